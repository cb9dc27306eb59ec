/* Contract: the cuDNN entry points runtime/cuda/dnn.c calls, with cuDNN's
 * own types (cudnn.h), over the fake driver's memory: descriptors are kept
 * and checked against each other and the pointers against them; while
 * the fake computes (fake_gpu_compute), each call computes its result in
 * double from the descriptors (each tensor in its format, the filter in
 * its own, groups, padding, strides, dilation, alpha and beta) and stores
 * it rounded once. Algorithms: every one of a direction is a
 * candidate, each deterministic; an algorithm's workspace is
 * fake_gpu_set_depthwise_workspace's for a depthwise convolution, else 4
 * KiB per algorithm number. The fused forward takes an identity
 * activation with IMPLICIT_PRECOMP_GEMM alone, as cuDNN does. */
#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake_gpu/fake_internal.h"

struct cudnnContext {
    CUstream stream;
};
struct cudnnTensorStruct {
    int set, nhwc, n, c, h, w;
    cudnnDataType_t type;
};
struct cudnnFilterStruct {
    int set, nhwc, k, c, r, s;
    cudnnDataType_t type;
};
struct cudnnConvolutionStruct {
    int set, pad_h, pad_w, u, v, dil_h, dil_w, groups;
    cudnnMathType_t math;
};
struct cudnnActivationStruct {
    int set;
    cudnnActivationMode_t mode;
};

static size_t dw_workspace;
void fake_gpu_set_depthwise_workspace(size_t bytes) { dw_workspace = bytes; }

static cudnnStatus_t bad(const char *fmt, const char *what)
{
    fg_violation(fmt, what);
    return CUDNN_STATUS_BAD_PARAM;
}

size_t cudnnGetVersion(void) { return 91400; }

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    return s == CUDNN_STATUS_SUCCESS            ? "CUDNN_STATUS_SUCCESS"
           : s == CUDNN_STATUS_NOT_SUPPORTED    ? "CUDNN_STATUS_NOT_SUPPORTED"
           : s == CUDNN_STATUS_EXECUTION_FAILED ? "CUDNN_STATUS_EXECUTION_FAILED"
                                                : "refused by the fake cuDNN (its message is above)";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    if (!(*h = calloc(1, sizeof **h)))
        abort();
    fg_count.dnn_handles++;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    free(h);
    fg_count.dnn_handles--;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    h->stream = (CUstream)s;
    return fg_stream_ok(h->stream, "cudnnSetStream") ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

#define DESCRIPTOR(Type, Struct)                                                                                 \
    cudnnStatus_t cudnnCreate##Type##Descriptor(cudnn##Type##Descriptor_t *d)                                   \
    {                                                                                                            \
        if (!(*d = calloc(1, sizeof(struct Struct))))                                                            \
            abort();                                                                                             \
        fg_count.dnn_descriptors++;                                                                              \
        return CUDNN_STATUS_SUCCESS;                                                                             \
    }                                                                                                            \
    cudnnStatus_t cudnnDestroy##Type##Descriptor(cudnn##Type##Descriptor_t d)                                   \
    {                                                                                                            \
        free(d);                                                                                                 \
        fg_count.dnn_descriptors--;                                                                              \
        return CUDNN_STATUS_SUCCESS;                                                                             \
    }
DESCRIPTOR(Tensor, cudnnTensorStruct)
DESCRIPTOR(Filter, cudnnFilterStruct)
DESCRIPTOR(Convolution, cudnnConvolutionStruct)
DESCRIPTOR(Activation, cudnnActivationStruct)

static size_t type_size(cudnnDataType_t t)
{
    return t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16 ? 2 : t == CUDNN_DATA_DOUBLE ? 8 : 4;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n,
                                         int c, int h, int w)
{
    if (n < 1 || c < 1 || h < 1 || w < 1 || (f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC))
        return bad("cudnnSetTensor4dDescriptor: %s", "a dimension below 1 or an unknown format");
    *d = (struct cudnnTensorStruct){1, f == CUDNN_TENSOR_NHWC, n, c, h, w, t};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k,
                                         int c, int r, int s)
{
    if (k < 1 || c < 1 || r < 1 || s < 1 || (f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC))
        return bad("cudnnSetFilter4dDescriptor: %s", "a dimension below 1 or an unknown format");
    *d = (struct cudnnFilterStruct){1, f == CUDNN_TENSOR_NHWC, k, c, r, s, t};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dil_h, int dil_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute)
{
    if (pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dil_h < 1 || dil_w < 1 || compute != CUDNN_DATA_FLOAT ||
        mode != CUDNN_CROSS_CORRELATION)
        return bad("cudnnSetConvolution2dDescriptor: %s", "a negative pad, a stride or dilation below 1, or not "
                                                          "cross-correlation in float");
    *d = (struct cudnnConvolutionStruct){1, pad_h, pad_w, u, v, dil_h, dil_w, 1, CUDNN_DEFAULT_MATH};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups)
{
    if (groups < 1)
        return bad("%s: fewer than one group", "cudnnSetConvolutionGroupCount");
    d->groups = groups;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m)
{
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t nan, double coef)
{
    d->set = 1;
    d->mode = mode;
    return CUDNN_STATUS_SUCCESS;
}

static size_t tensor_bytes(const struct cudnnTensorStruct *t)
{
    return (size_t)t->n * t->c * t->h * t->w * type_size(t->type);
}

static size_t filter_bytes(const struct cudnnFilterStruct *f)
{
    return (size_t)f->k * f->c * f->r * f->s * type_size(f->type);
}

/* The four descriptors of one convolution agree: channels and groups, the
 * output's shape from the input's, the filter's and the convolution's. */
static cudnnStatus_t conv_ok(const char *call, const struct cudnnTensorStruct *x, const struct cudnnFilterStruct *w,
                             const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *y)
{
    char why[256] = "";
    if (!x->set || !w->set || !cv->set || !y->set)
        snprintf(why, sizeof why, "a descriptor never set");
    else if (x->c != w->c * cv->groups || w->k % cv->groups || y->c != w->k || x->n != y->n)
        snprintf(why, sizeof why, "x %dx%d, filter %dx%d in %d groups, y %dx%d", x->n, x->c, w->k, w->c, cv->groups,
                 y->n, y->c);
    else {
        int p = (x->h + 2 * cv->pad_h - cv->dil_h * (w->r - 1) - 1) / cv->u + 1;
        int q = (x->w + 2 * cv->pad_w - cv->dil_w * (w->s - 1) - 1) / cv->v + 1;
        if (p != y->h || q != y->w)
            snprintf(why, sizeof why, "the output is %dx%d, y's descriptor says %dx%d", p, q, y->h, y->w);
        else if (x->type != y->type || x->type != w->type)
            snprintf(why, sizeof why, "x, the filter and y of different data types");
    }
    if (!why[0])
        return CUDNN_STATUS_SUCCESS;
    fg_violation("%s: %s", call, why);
    return CUDNN_STATUS_BAD_PARAM;
}

static size_t workspace(const struct cudnnTensorStruct *x, const struct cudnnConvolutionStruct *cv, int algo)
{
    return cv->groups > 1 && cv->groups == x->c ? dw_workspace : (size_t)algo * 4096;
}

/* Each operand's bytes in one live allocation, and the workspace as large as the algorithm asks. */
static cudnnStatus_t operands_ok(const char *call, const struct cudnnTensorStruct *x, const void *xp,
                                 const struct cudnnFilterStruct *w, const void *wp, const struct cudnnTensorStruct *y,
                                 const void *yp, const struct cudnnConvolutionStruct *cv, int algo, const void *ws,
                                 size_t wsb)
{
    char what[128];
    snprintf(what, sizeof what, "%s's x", call);
    if (!fg_host((CUdeviceptr)(uintptr_t)xp, tensor_bytes(x), what))
        return CUDNN_STATUS_BAD_PARAM;
    snprintf(what, sizeof what, "%s's filter", call);
    if (!fg_host((CUdeviceptr)(uintptr_t)wp, filter_bytes(w), what))
        return CUDNN_STATUS_BAD_PARAM;
    snprintf(what, sizeof what, "%s's y", call);
    if (!fg_host((CUdeviceptr)(uintptr_t)yp, tensor_bytes(y), what))
        return CUDNN_STATUS_BAD_PARAM;
    size_t need = workspace(x, cv, algo);
    if (wsb < need) {
        fg_violation("%s: algorithm %d given %zu bytes of workspace, needs %zu", call, algo, wsb, need);
        return CUDNN_STATUS_BAD_PARAM;
    }
    snprintf(what, sizeof what, "%s's workspace", call);
    if (wsb && !fg_host((CUdeviceptr)(uintptr_t)ws, wsb, what))
        return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- computing (fake_gpu_compute) ---- */

typedef enum { DNN_FWD, DNN_FUSED, DNN_BWD_DATA, DNN_BWD_FILTER, DNN_ADD, DNN_ACT, DNN_FWD_STATS } DnnOp;

/* One call's descriptors and pointers; ADD: C = alpha A + beta C is
 * y = alpha x + beta y, ACT: y = alpha act(x) + beta y. An operand scaled
 * by zero is not read (cuDNN's rule for beta; here for alpha2 too). */
typedef struct DnnArgs {
    DnnOp op;
    struct cudnnTensorStruct x, y, z, b;
    struct cudnnFilterStruct w;
    struct cudnnConvolutionStruct cv;
    cudnnActivationMode_t act;
    float alpha, beta; /* FUSED: alpha1, alpha2 */
    CUdeviceptr xp, wp, yp, zp, bp;
    CUdeviceptr sp, qp; /* FWD_STATS: y's channel sums and sums of squares, f32 */
} DnnArgs;

static CtDType element(cudnnDataType_t t)
{
    return t == CUDNN_DATA_HALF ? CT_F16 : t == CUDNN_DATA_BFLOAT16 ? CT_BF16 : CT_F32;
}

/* Where element (n, c, h, w) of t lies, in its format; a dimension of 1
 * broadcasts (a bias's n, h and w). */
static size_t tensor_at(const struct cudnnTensorStruct *t, int n, int c, int h, int w)
{
    n = t->n == 1 ? 0 : n, c = t->c == 1 ? 0 : c, h = t->h == 1 ? 0 : h, w = t->w == 1 ? 0 : w;
    return t->nhwc ? (((size_t)n * t->h + h) * t->w + w) * t->c + c : (((size_t)n * t->c + c) * t->h + h) * t->w + w;
}

/* A filter is a tensor of K images: KCRS is NCHW's order, KRSC NHWC's. */
static struct cudnnTensorStruct as_tensor(const struct cudnnFilterStruct *f)
{
    return (struct cudnnTensorStruct){1, f->nhwc, f->k, f->c, f->r, f->s, f->type};
}

static double activate(cudnnActivationMode_t m, double v) { return m == CUDNN_ACTIVATION_RELU && v < 0 ? 0 : v; }

/* Between t's elements at p and v, doubles in (n, c, h, w) order: read
 * into v, or (out) stored from v rounded to t's type once as alpha v +
 * beta (what t held; unread at beta 0). */
static void tensor_move(const struct cudnnTensorStruct *t, void *p, double *v, int out, float alpha, float beta)
{
    for (int n = 0; n < t->n; n++)
        for (int c = 0; c < t->c; c++)
            for (int h = 0; h < t->h; h++)
                for (int w = 0; w < t->w; w++, v++) {
                    size_t i = tensor_at(t, n, c, h, w);
                    if (!out)
                        *v = fg_load(p, element(t->type), i);
                    else
                        fg_store(p, element(t->type), i,
                                 alpha * *v + (beta != 0 ? beta * fg_load(p, element(t->type), i) : 0));
                }
}

static double *tensor_in(const struct cudnnTensorStruct *t, const void *p)
{
    double *v = malloc(sizeof *v * ((size_t)t->n * t->c * t->h * t->w + 1));
    if (!v)
        abort();
    tensor_move(t, (void *)p, v, 0, 1, 0);
    return v;
}

/* The convolution's sums, every operand in its logical order: the forward
 * into y, the data gradient into x, the filter gradient into w (each
 * zeroed first). */
static void conv_sums(const DnnArgs *a, double *x, double *w, double *y)
{
    const struct cudnnFilterStruct *f = &a->w;
    const struct cudnnConvolutionStruct *cv = &a->cv;
    int H = a->x.h, W = a->x.w, P = a->y.h, Q = a->y.w, per_group = f->k / cv->groups;
    for (int n = 0; n < a->y.n; n++)
        for (int k = 0; k < f->k; k++)
            for (int c = 0; c < f->c; c++) {
                double *xc = x + ((size_t)n * a->x.c + (size_t)(k / per_group * f->c + c)) * H * W;
                double *wk = w + ((size_t)k * f->c + c) * f->r * f->s, *yk = y + ((size_t)n * f->k + k) * P * Q;
                for (int p = 0; p < P; p++)
                    for (int r = 0; r < f->r; r++) {
                        int h = p * cv->u - cv->pad_h + r * cv->dil_h;
                        if (h < 0 || h >= H)
                            continue;
                        for (int q = 0; q < Q; q++)
                            for (int s = 0; s < f->s; s++) {
                                int wi = q * cv->v - cv->pad_w + s * cv->dil_w;
                                if (wi < 0 || wi >= W)
                                    continue;
                                double *xv = &xc[h * W + wi], *wv = &wk[r * f->s + s], *yv = &yk[p * Q + q];
                                if (a->op == DNN_BWD_DATA)
                                    *xv += *yv * *wv;
                                else if (a->op == DNN_BWD_FILTER)
                                    *wv += *xv * *yv;
                                else
                                    *yv += *xv * *wv;
                            }
                    }
            }
}

static void run_dnn(const void *arg)
{
    const DnnArgs *a = arg;
    void *x = fg_host(a->xp, tensor_bytes(&a->x), "cuDNN's x"), *y = fg_host(a->yp, tensor_bytes(&a->y), "cuDNN's y");
    if (!x || !y)
        return;
    if (a->op == DNN_ADD || a->op == DNN_ACT) {
        for (int n = 0; n < a->y.n; n++)
            for (int c = 0; c < a->y.c; c++)
                for (int h = 0; h < a->y.h; h++)
                    for (int w = 0; w < a->y.w; w++) {
                        size_t yi = tensor_at(&a->y, n, c, h, w);
                        double v = fg_load(x, element(a->x.type), tensor_at(&a->x, n, c, h, w));
                        v = a->alpha * (a->op == DNN_ACT ? activate(a->act, v) : v);
                        if (a->beta != 0)
                            v += a->beta * fg_load(y, element(a->y.type), yi);
                        fg_store(y, element(a->y.type), yi, v);
                    }
        return;
    }
    void *w = fg_host(a->wp, filter_bytes(&a->w), "cuDNN's filter");
    const void *z = a->op == DNN_FUSED ? fg_host(a->zp, tensor_bytes(&a->z), "cuDNN's z") : NULL;
    const void *b = a->op == DNN_FUSED ? fg_host(a->bp, tensor_bytes(&a->b), "cuDNN's bias") : NULL;
    if (!w || (a->op == DNN_FUSED && (!z || !b)))
        return;
    struct cudnnTensorStruct wt = as_tensor(&a->w);
    double *xv = tensor_in(&a->x, x), *wv = tensor_in(&wt, w), *yv = tensor_in(&a->y, y);
    double *out = a->op == DNN_BWD_DATA ? xv : a->op == DNN_BWD_FILTER ? wv : yv;
    size_t nout = a->op == DNN_BWD_DATA   ? (size_t)a->x.n * a->x.c * a->x.h * a->x.w
                  : a->op == DNN_BWD_FILTER ? (size_t)a->w.k * a->w.c * a->w.r * a->w.s
                                            : (size_t)a->y.n * a->y.c * a->y.h * a->y.w;
    memset(out, 0, sizeof *out * nout);
    conv_sums(a, xv, wv, yv);
    if (a->op == DNN_FUSED) { /* act(alpha1 conv + alpha2 z + bias) */
        double *zv = tensor_in(&a->z, z), *bv = tensor_in(&a->b, b);
        size_t hw = (size_t)a->y.h * a->y.w;
        for (size_t i = 0; i < nout; i++)
            yv[i] = activate(a->act, a->alpha * yv[i] + (a->beta != 0 ? a->beta * zv[i] : 0) +
                                         bv[i / hw % (size_t)a->y.c]);
        tensor_move(&a->y, y, yv, 1, 1, 0);
        free(zv);
        free(bv);
    } else if (a->op == DNN_BWD_DATA) {
        tensor_move(&a->x, x, xv, 1, a->alpha, a->beta);
    } else if (a->op == DNN_BWD_FILTER) {
        tensor_move(&wt, w, wv, 1, a->alpha, a->beta);
    } else {
        tensor_move(&a->y, y, yv, 1, a->alpha, a->beta);
    }
    if (a->op == DNN_FWD_STATS) { /* GenStats over y as stored */
        float *sum = fg_host(a->sp, sizeof(float) * (size_t)a->y.c, "GenStats' sums");
        float *sq = fg_host(a->qp, sizeof(float) * (size_t)a->y.c, "GenStats' sums of squares");
        double *st = tensor_in(&a->y, y);
        size_t hw = (size_t)a->y.h * a->y.w;
        for (int c = 0; sum && sq && c < a->y.c; c++) {
            double s = 0, q = 0;
            for (int n = 0; n < a->y.n; n++)
                for (size_t i = 0; i < hw; i++) {
                    double v = st[((size_t)n * a->y.c + (size_t)c) * hw + i];
                    s += v;
                    q += v * v;
                }
            sum[c] = (float)s;
            sq[c] = (float)q;
        }
        free(st);
    }
    free(xv);
    free(wv);
    free(yv);
}

static cudnnStatus_t run(cudnnHandle_t h, const char *call, const DnnArgs *args)
{
    if (!fg_stream_ok(h->stream, call))
        return CUDNN_STATUS_EXECUTION_FAILED;
    if (fg_capturing() && fg_refused("capture")) { /* as a call that is not capture-safe fails */
        fg_invalidate_capture(call, 0);
        return CUDNN_STATUS_EXECUTION_FAILED;
    }
    fg_count.dnn_calls++;
    FgOp op = fg_nop(call);
    if (fg_computing()) {
        if (!(op.arg = malloc(sizeof *args)))
            abort();
        memcpy(op.arg, args, sizeof *args);
        op.arg_bytes = sizeof *args;
        op.kind = FG_CALL;
        op.call = run_dnn;
    }
    fg_enqueue(h->stream, &op);
    return CUDNN_STATUS_SUCCESS;
}

int fg_dnn_conv_stats(void *h, const FgConvStats *c)
{
    cudnnDataType_t t[3];
    const CtDType ct[3] = {c->x_type, c->w_type, c->y_type};
    for (int k = 0; k < 3; k++)
        t[k] = ct[k] == CT_F16 ? CUDNN_DATA_HALF : ct[k] == CT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    int p = (c->h + 2 * c->pad_h - c->dil_h * (c->r - 1) - 1) / c->u + 1;
    int q = (c->w + 2 * c->pad_w - c->dil_w * (c->s - 1) - 1) / c->v + 1;
    DnnArgs a = {.op = DNN_FWD_STATS,
                 .x = {1, c->x_nhwc, c->n, c->c, c->h, c->w, t[0]},
                 .y = {1, c->y_nhwc, c->n, c->k, p, q, t[2]},
                 .w = {1, c->w_nhwc, c->k, c->c / c->groups, c->r, c->s, t[1]},
                 .cv = {1, c->pad_h, c->pad_w, c->u, c->v, c->dil_h, c->dil_w, c->groups, CUDNN_DEFAULT_MATH},
                 .alpha = 1, .beta = 0, .xp = c->xp, .wp = c->wp, .yp = c->yp, .sp = c->sump, .qp = c->sqp};
    return run(h, "cudnnBackendExecute", &a) == CUDNN_STATUS_SUCCESS ? 0 : -1;
}

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }
static float scalar(const void *p) { return *(const float *)p; }

/* A depthwise convolution, where the test asked cuDNN to have no
 * algorithm for one (fake_gpu_refuse's "depthwise"). */
static int dw_refused(const struct cudnnTensorStruct *x, const struct cudnnConvolutionStruct *cv)
{
    return cv->groups > 1 && cv->groups == x->c && fg_refused("depthwise");
}

/* Every algorithm of the direction, in order, into perf; through a macro
 * since the three directions' perf structs are three types. */
#define RANK(perf, requested, returned, count, x, cv, math)                                                \
    do {                                                                                                         \
        int n_ = (count) < (requested) ? (count) : (requested);                                                  \
        for (int a_ = 0; a_ < n_; a_++) {                                                                        \
            memset(&(perf)[a_], 0, sizeof(perf)[a_]);                                                            \
            (perf)[a_].algo = a_;                                                                                \
            (perf)[a_].status = dw_refused((x), (cv)) ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;        \
            (perf)[a_].time = 1.0f + (float)a_;                                                                  \
            (perf)[a_].memory = workspace((x), (cv), a_);                                                        \
            (perf)[a_].determinism = CUDNN_DETERMINISTIC;                                                        \
            (perf)[a_].mathType = (math);                                                                        \
        }                                                                                                        \
        *(returned) = n_;                                                                                        \
    } while (0)

/* A search that runs the candidates: on the stream's device, never inside a capture. */
static cudnnStatus_t find_ok(cudnnHandle_t h, const char *call)
{
    if (fg_capturing()) {
        fg_invalidate_capture(call, 1);
        return CUDNN_STATUS_EXECUTION_FAILED;
    }
    if (!fg_stream_ok(h->stream, call))
        return CUDNN_STATUS_EXECUTION_FAILED;
    fg_count.dnn_finds++;
    return CUDNN_STATUS_SUCCESS;
}

/* One convolution's descriptors and operands, as every call that runs one checks them. */
static cudnnStatus_t conv_checked(const char *call, const struct cudnnTensorStruct *x, const void *xp,
                                  const struct cudnnFilterStruct *w, const void *wp,
                                  const struct cudnnConvolutionStruct *cv, int algo,
                                  const struct cudnnTensorStruct *y, const void *yp, const void *ws, size_t wsb)
{
    cudnnStatus_t s = conv_ok(call, x, w, cv, y);
    return s == CUDNN_STATUS_SUCCESS ? operands_ok(call, x, xp, w, wp, y, yp, cv, algo, ws, wsb) : s;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t cv,
                                                     const cudnnTensorDescriptor_t y, const int requested, int *returned,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf)
{
    cudnnStatus_t s = conv_ok("cudnnGetConvolutionForwardAlgorithm_v7", x, w, cv, y);
    if (s == CUDNN_STATUS_SUCCESS)
        RANK(perf, requested, returned, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, x, cv, cv->math);
    return s;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t cv,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int *returned, cudnnConvolutionBwdDataAlgoPerf_t *perf)
{
    cudnnStatus_t s = conv_ok("cudnnGetConvolutionBackwardDataAlgorithm_v7", dx, w, cv, dy);
    if (s == CUDNN_STATUS_SUCCESS)
        RANK(perf, requested, returned, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, dx, cv, cv->math);
    return s;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t cv,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int *returned, cudnnConvolutionBwdFilterAlgoPerf_t *perf)
{
    cudnnStatus_t s = conv_ok("cudnnGetConvolutionBackwardFilterAlgorithm_v7", x, dw, cv, dy);
    if (s == CUDNN_STATUS_SUCCESS)
        RANK(perf, requested, returned, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, x, cv, cv->math);
    return s;
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const void *xp,
                                                     const cudnnFilterDescriptor_t w, const void *wp,
                                                     const cudnnConvolutionDescriptor_t cv,
                                                     const cudnnTensorDescriptor_t y, void *yp, const int requested,
                                                     int *returned, cudnnConvolutionFwdAlgoPerf_t *perf, void *ws,
                                                     size_t wsb)
{
    const char *call = "cudnnFindConvolutionForwardAlgorithmEx";
    cudnnStatus_t s = find_ok(h, call);
    if (s == CUDNN_STATUS_SUCCESS)
        s = conv_checked(call, x, xp, w, wp, cv, 0, y, yp, ws, wsb);
    if (s == CUDNN_STATUS_SUCCESS)
        RANK(perf, requested, returned, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, x, cv, cv->math);
    return s;
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                          const void *wp, const cudnnTensorDescriptor_t dy,
                                                          const void *dyp, const cudnnConvolutionDescriptor_t cv,
                                                          const cudnnTensorDescriptor_t dx, void *dxp,
                                                          const int requested, int *returned,
                                                          cudnnConvolutionBwdDataAlgoPerf_t *perf, void *ws,
                                                          size_t wsb)
{
    const char *call = "cudnnFindConvolutionBackwardDataAlgorithmEx";
    cudnnStatus_t s = find_ok(h, call);
    if (s == CUDNN_STATUS_SUCCESS)
        s = conv_checked(call, dx, dxp, w, wp, cv, 0, dy, dyp, ws, wsb);
    if (s == CUDNN_STATUS_SUCCESS)
        RANK(perf, requested, returned, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, dx, cv, cv->math);
    return s;
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                            const void *xp, const cudnnTensorDescriptor_t dy,
                                                            const void *dyp, const cudnnConvolutionDescriptor_t cv,
                                                            const cudnnFilterDescriptor_t dw, void *dwp,
                                                            const int requested, int *returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *perf, void *ws,
                                                            size_t wsb)
{
    const char *call = "cudnnFindConvolutionBackwardFilterAlgorithmEx";
    cudnnStatus_t s = find_ok(h, call);
    if (s == CUDNN_STATUS_SUCCESS)
        s = conv_checked(call, x, xp, dw, dwp, cv, 0, dy, dyp, ws, wsb);
    if (s == CUDNN_STATUS_SUCCESS)
        RANK(perf, requested, returned, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, x, cv, cv->math);
    return s;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t cv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t *bytes)
{
    cudnnStatus_t s = conv_ok("cudnnGetConvolutionForwardWorkspaceSize", x, w, cv, y);
    *bytes = workspace(x, cv, (int)algo);
    return s;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t cv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes)
{
    cudnnStatus_t s = conv_ok("cudnnGetConvolutionBackwardDataWorkspaceSize", dx, w, cv, dy);
    *bytes = workspace(dx, cv, (int)algo);
    return s;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t cv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes)
{
    cudnnStatus_t s = conv_ok("cudnnGetConvolutionBackwardFilterWorkspaceSize", x, dw, cv, dy);
    *bytes = workspace(x, cv, (int)algo);
    return s;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t x,
                                      const void *xp, const cudnnFilterDescriptor_t w, const void *wp,
                                      const cudnnConvolutionDescriptor_t cv, cudnnConvolutionFwdAlgo_t algo, void *ws,
                                      size_t wsb, const void *beta, const cudnnTensorDescriptor_t y, void *yp)
{
    const char *call = "cudnnConvolutionForward";
    cudnnStatus_t s = conv_checked(call, x, xp, w, wp, cv, (int)algo, y, yp, ws, wsb);
    DnnArgs a = {.op = DNN_FWD, .x = *x, .y = *y, .w = *w, .cv = *cv, .alpha = scalar(alpha), .beta = scalar(beta),
                 .xp = dptr(xp), .wp = dptr(wp), .yp = dptr(yp)};
    return s == CUDNN_STATUS_SUCCESS ? run(h, call, &a) : s;
}

/* The bias a 1 x K x 1 x 1 tensor of y's K channels, in one allocation. */
static cudnnStatus_t bias_ok(const char *call, const struct cudnnTensorStruct *b, const void *bp,
                             const struct cudnnTensorStruct *y)
{
    if (!b->set || b->n != 1 || b->c != y->c || b->h != 1 || b->w != 1) {
        fg_violation("%s: the bias is not 1 x %d x 1 x 1", call, y->c);
        return CUDNN_STATUS_BAD_PARAM;
    }
    char what[128];
    snprintf(what, sizeof what, "%s's bias", call);
    return fg_host((CUdeviceptr)(uintptr_t)bp, tensor_bytes(b), what) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnConvolutionBiasActivationForward(cudnnHandle_t h, const void *alpha1,
                                                    const cudnnTensorDescriptor_t x, const void *xp,
                                                    const cudnnFilterDescriptor_t w, const void *wp,
                                                    const cudnnConvolutionDescriptor_t cv,
                                                    cudnnConvolutionFwdAlgo_t algo, void *ws, size_t wsb,
                                                    const void *alpha2, const cudnnTensorDescriptor_t z,
                                                    const void *zp, const cudnnTensorDescriptor_t b, const void *bp,
                                                    const cudnnActivationDescriptor_t act,
                                                    const cudnnTensorDescriptor_t y, void *yp)
{
    const char *call = "cudnnConvolutionBiasActivationForward";
    if (!act->set || (act->mode != CUDNN_ACTIVATION_RELU && act->mode != CUDNN_ACTIVATION_IDENTITY))
        return bad("%s: the activation is neither ReLU nor identity", call);
    if ((act->mode == CUDNN_ACTIVATION_IDENTITY && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) ||
        fg_refused(call))
        return CUDNN_STATUS_NOT_SUPPORTED;
    cudnnStatus_t s = conv_checked(call, x, xp, w, wp, cv, (int)algo, y, yp, ws, wsb);
    if (s == CUDNN_STATUS_SUCCESS)
        s = bias_ok(call, b, bp, y);
    if (s == CUDNN_STATUS_SUCCESS && (z->n != y->n || z->c != y->c || z->h != y->h || z->w != y->w ||
                                      !fg_host((CUdeviceptr)(uintptr_t)zp, tensor_bytes(z), "the fused call's z")))
        s = bad("%s: z is not shaped as y, or not in one allocation", call);
    else if (s == CUDNN_STATUS_SUCCESS && (z->nhwc != y->nhwc || z->type != y->type))
        s = bad("%s: z is not in y's format and type", call);
    DnnArgs a = {.op = DNN_FUSED, .x = *x, .y = *y, .z = *z, .b = *b, .w = *w, .cv = *cv, .act = act->mode,
                 .alpha = scalar(alpha1), .beta = scalar(alpha2), .xp = dptr(xp), .wp = dptr(wp), .yp = dptr(yp),
                 .zp = dptr(zp), .bp = dptr(bp)};
    return s == CUDNN_STATUS_SUCCESS ? run(h, call, &a) : s;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t w,
                                           const void *wp, const cudnnTensorDescriptor_t dy, const void *dyp,
                                           const cudnnConvolutionDescriptor_t cv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void *ws, size_t wsb, const void *beta, const cudnnTensorDescriptor_t dx,
                                           void *dxp)
{
    const char *call = "cudnnConvolutionBackwardData";
    cudnnStatus_t s = conv_checked(call, dx, dxp, w, wp, cv, (int)algo, dy, dyp, ws, wsb);
    DnnArgs a = {.op = DNN_BWD_DATA, .x = *dx, .y = *dy, .w = *w, .cv = *cv, .alpha = scalar(alpha),
                 .beta = scalar(beta), .xp = dptr(dxp), .wp = dptr(wp), .yp = dptr(dyp)};
    return s == CUDNN_STATUS_SUCCESS ? run(h, call, &a) : s;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t x,
                                             const void *xp, const cudnnTensorDescriptor_t dy, const void *dyp,
                                             const cudnnConvolutionDescriptor_t cv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t wsb,
                                             const void *beta, const cudnnFilterDescriptor_t dw, void *dwp)
{
    const char *call = "cudnnConvolutionBackwardFilter";
    cudnnStatus_t s = conv_checked(call, x, xp, dw, dwp, cv, (int)algo, dy, dyp, ws, wsb);
    DnnArgs a = {.op = DNN_BWD_FILTER, .x = *x, .y = *dy, .w = *dw, .cv = *cv, .alpha = scalar(alpha),
                 .beta = scalar(beta), .xp = dptr(xp), .wp = dptr(dwp), .yp = dptr(dyp)};
    return s == CUDNN_STATUS_SUCCESS ? run(h, call, &a) : s;
}

/* C += A, A as C or a per-channel bias. */
cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t a, const void *ap,
                             const void *beta, const cudnnTensorDescriptor_t c, void *cp)
{
    const char *call = "cudnnAddTensor";
    int same = a->n == c->n && a->c == c->c && a->h == c->h && a->w == c->w;
    cudnnStatus_t s = same ? CUDNN_STATUS_SUCCESS : bias_ok(call, a, ap, c);
    if (s == CUDNN_STATUS_SUCCESS && ((same && !fg_host((CUdeviceptr)(uintptr_t)ap, tensor_bytes(a), "cudnnAddTensor's A")) ||
                                      !fg_host((CUdeviceptr)(uintptr_t)cp, tensor_bytes(c), "cudnnAddTensor's C")))
        s = CUDNN_STATUS_BAD_PARAM;
    DnnArgs args = {.op = DNN_ADD, .x = *a, .y = *c, .alpha = scalar(alpha), .beta = scalar(beta), .xp = dptr(ap),
                    .yp = dptr(cp)};
    return s == CUDNN_STATUS_SUCCESS ? run(h, call, &args) : s;
}

cudnnStatus_t cudnnActivationForward(cudnnHandle_t h, cudnnActivationDescriptor_t act, const void *alpha,
                                     const cudnnTensorDescriptor_t x, const void *xp, const void *beta,
                                     const cudnnTensorDescriptor_t y, void *yp)
{
    const char *call = "cudnnActivationForward";
    if (!act->set || tensor_bytes(x) != tensor_bytes(y) ||
        !fg_host((CUdeviceptr)(uintptr_t)xp, tensor_bytes(x), "cudnnActivationForward's x") ||
        !fg_host((CUdeviceptr)(uintptr_t)yp, tensor_bytes(y), "cudnnActivationForward's y"))
        return bad("%s: an activation never set, x and y of different sizes, or outside memory", call);
    DnnArgs a = {.op = DNN_ACT, .x = *x, .y = *y, .act = act->mode, .alpha = scalar(alpha), .beta = scalar(beta),
                 .xp = dptr(xp), .yp = dptr(yp)};
    return run(h, call, &a);
}
