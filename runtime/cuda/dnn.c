/* Contract: dnn_run computes the step's convolution (forward with its
 * fused bias/residual/ReLU, or a gradient) with the algorithm dnn_prepare
 * chose once per shape, on the handle's stream. */
#include "runtime/cuda/dnn.h"

#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ALGOS = 16 };

static int dnn_fail(CtErr *err, const char *what, cudnnStatus_t s)
{
    return ct_fail(err, "cuDNN %s: %s (%d)", what, cudnnGetErrorString(s), (int)s);
}

int dnn_open(Dnn *d, CUstream stream, CtErr *err)
{
    cudnnHandle_t h = NULL;
    memset(d, 0, sizeof *d);
    cudnnStatus_t s = cudnnCreate(&h);
    if (s != CUDNN_STATUS_SUCCESS)
        return dnn_fail(err, "could not create a handle (is there a GPU and its driver?)", s);
    if ((s = cudnnSetStream(h, (cudaStream_t)stream)) != CUDNN_STATUS_SUCCESS) {
        cudnnDestroy(h);
        return dnn_fail(err, "set stream", s);
    }
    d->handle = h;
    d->version = cudnnGetVersion();
    return 0;
}

void dnn_close(Dnn *d)
{
    if (d->handle)
        cudnnDestroy((cudnnHandle_t)d->handle);
    memset(d, 0, sizeof *d);
}

static cudnnDataType_t data_type(CtDType t)
{
    switch (t) {
    case CT_F16: return CUDNN_DATA_HALF;
    case CT_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

static cudnnTensorFormat_t format(int nhwc) { return nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW; }

static void *dev(CUdeviceptr p) { return (void *)(uintptr_t)p; }

/* f16 or bf16 data: tensor cores whatever allow_tf32 says. */
static int low_precision(const ConvDesc *c) { return c->x_type != CT_F32 || c->w_type != CT_F32; }

/* A forward whose step adds a bias or a residual, or applies ReLU, after it. */
static int has_epilogue(const ConvDesc *c)
{
    return c->dir == CONV_FWD && (c->epi.bias >= 0 || c->epi.residual >= 0 || c->epi.act != GEMM_ACT_NONE);
}

/* The descriptors of the convolution and its three tensors (and, for a
 * forward with an epilogue, of the bias and the activation). */
static cudnnStatus_t describe(const ConvDesc *c, int allow_tf32, DnnCall *call)
{
    cudnnStatus_t s;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    if ((s = cudnnCreateTensorDescriptor(&x)) != CUDNN_STATUS_SUCCESS)
        return s;
    call->x = x;
    if ((s = cudnnCreateTensorDescriptor(&y)) != CUDNN_STATUS_SUCCESS)
        return s;
    call->y = y;
    if ((s = cudnnCreateFilterDescriptor(&w)) != CUDNN_STATUS_SUCCESS)
        return s;
    call->w = w;
    if ((s = cudnnCreateConvolutionDescriptor(&conv)) != CUDNN_STATUS_SUCCESS)
        return s;
    call->conv = conv;
    s = cudnnSetTensor4dDescriptor(x, format(c->x_nhwc), data_type(c->x_type), (int)c->n, (int)c->c, (int)c->h,
                                   (int)c->w);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetTensor4dDescriptor(y, format(c->y_nhwc), data_type(c->y_type), (int)c->n, (int)c->k, (int)c->p,
                                       (int)c->q);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetFilter4dDescriptor(w, data_type(c->w_type), format(c->w_nhwc), (int)c->k, (int)(c->c / c->groups),
                                       (int)c->r, (int)c->s);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetConvolution2dDescriptor(conv, (int)c->pad_h, (int)c->pad_w, (int)c->stride_h, (int)c->stride_w,
                                            (int)c->dil_h, (int)c->dil_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetConvolutionGroupCount(conv, (int)c->groups);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetConvolutionMathType(conv, low_precision(c) || allow_tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH);
    if (s != CUDNN_STATUS_SUCCESS || !has_epilogue(c))
        return s;
    cudnnTensorDescriptor_t bias;
    cudnnActivationDescriptor_t act;
    if ((s = cudnnCreateTensorDescriptor(&bias)) != CUDNN_STATUS_SUCCESS)
        return s;
    call->bias = bias;
    if ((s = cudnnCreateActivationDescriptor(&act)) != CUDNN_STATUS_SUCCESS)
        return s;
    call->act = act;
    s = cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, data_type(c->bias_type), 1, (int)c->k, 1, 1);
    if (s == CUDNN_STATUS_SUCCESS) /* relu(NaN) = NaN, as torch's relu and the other backends' */
        s = cudnnSetActivationDescriptor(act, c->epi.act == GEMM_ACT_RELU ? CUDNN_ACTIVATION_RELU
                                                                          : CUDNN_ACTIVATION_IDENTITY,
                                         CUDNN_PROPAGATE_NAN, 0.0);
    return s;
}

typedef struct ChooseCtx {
    const Dnn *d;
    const DnnCall *call;
    const ConvDesc *c;
    const DnnScratch *scratch;
    int allow_tf32;
    size_t max_workspace;
} ChooseCtx;

/* One of cuDNN's ranked candidates, whichever direction's perf struct it came in. */
typedef struct Candidate {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t math;
} Candidate;

#define TO_CANDIDATES(perf, n, out)                                                                             \
    for (int i_ = 0; i_ < (n); i_++) {                                                                          \
        (out)[i_] = (Candidate){(int)(perf)[i_].algo, (perf)[i_].status, (perf)[i_].memory,                     \
                                (perf)[i_].determinism, (perf)[i_].mathType};                                   \
    }

/* cuDNN's candidates for the convolution, best first: timed by
 * cudnnFind*Ex on the scratch buffers when there are some, else ranked by
 * its heuristics, which ask the device but run nothing and rank the same
 * way every time. */
static cudnnStatus_t rank(const ChooseCtx *k, Candidate *out, int *n)
{
    const DnnCall *call = k->call;
    const DnnScratch *sc = k->scratch;
    cudnnHandle_t h = k->d->handle;
    void *x = sc ? dev(sc->x) : NULL, *w = sc ? dev(sc->w) : NULL, *y = sc ? dev(sc->y) : NULL;
    void *ws = sc ? dev(sc->workspace) : NULL;
    size_t wsb = sc ? sc->workspace_bytes : 0;
    cudnnStatus_t s;
    *n = 0;
    switch (k->c->dir) {
    case CONV_FWD: {
        cudnnConvolutionFwdAlgoPerf_t perf[MAX_ALGOS];
        s = sc ? cudnnFindConvolutionForwardAlgorithmEx(h, call->x, x, call->w, w, call->conv, call->y, y, MAX_ALGOS,
                                                        n, perf, ws, wsb)
               : cudnnGetConvolutionForwardAlgorithm_v7(h, call->x, call->w, call->conv, call->y, MAX_ALGOS, n, perf);
        TO_CANDIDATES(perf, s == CUDNN_STATUS_SUCCESS ? *n : 0, out);
        return s;
    }
    case CONV_BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_ALGOS];
        s = sc ? cudnnFindConvolutionBackwardDataAlgorithmEx(h, call->w, w, call->y, y, call->conv, call->x, x,
                                                             MAX_ALGOS, n, perf, ws, wsb)
               : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, call->w, call->y, call->conv, call->x, MAX_ALGOS, n,
                                                             perf);
        TO_CANDIDATES(perf, s == CUDNN_STATUS_SUCCESS ? *n : 0, out);
        return s;
    }
    default: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_ALGOS];
        s = sc ? cudnnFindConvolutionBackwardFilterAlgorithmEx(h, call->x, x, call->y, y, call->conv, call->w, w,
                                                               MAX_ALGOS, n, perf, ws, wsb)
               : cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, call->x, call->y, call->conv, call->w, MAX_ALGOS, n,
                                                               perf);
        TO_CANDIDATES(perf, s == CUDNN_STATUS_SUCCESS ? *n : 0, out);
        return s;
    }
    }
}

/* cuDNN's own figure for the workspace of algo at the descriptor's math
 * type; not supported where that pair cannot run. */
static cudnnStatus_t workspace_size(const ChooseCtx *k, int algo, size_t *bytes)
{
    const DnnCall *call = k->call;
    cudnnHandle_t h = k->d->handle;
    switch (k->c->dir) {
    case CONV_FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(h, call->x, call->w, call->conv, call->y,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    case CONV_BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, call->w, call->y, call->conv, call->x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, call->x, call->y, call->conv, call->w,
                                                              (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    }
}

/* f32 data where TF32 is not allowed: FMA kernels only. A candidate ranked
 * with the default math type is run with FMA_MATH instead, since on Ampere
 * and later the default lets an f32 convolution use TF32; one ranked for
 * tensor cores is refused. */
static int strict_f32(const ChooseCtx *k) { return !low_precision(k->c) && !k->allow_tf32; }

static int math_allowed(const ChooseCtx *k, cudnnMathType_t m)
{
    return !strict_f32(k) || m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}

/* Candidate p, if it ran (or would), is deterministic when `deterministic`
 * asks, suits the math the step allows and, for the fused call with an
 * identity activation, is IMPLICIT_PRECOMP_GEMM (the only algorithm cuDNN
 * takes there): with its math type set on the descriptor, whether cuDNN
 * sizes its workspace within the limit, into *a. */
static int usable(const ChooseCtx *k, const Candidate *p, int deterministic, int precomp_only, DnnAlgo *a)
{
    if (p->status != CUDNN_STATUS_SUCCESS || p->memory > k->max_workspace ||
        (deterministic && p->determinism != CUDNN_DETERMINISTIC) || !math_allowed(k, p->math) ||
        (precomp_only && p->algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM))
        return 0;
    cudnnMathType_t math = strict_f32(k) ? CUDNN_FMA_MATH : p->math;
    size_t bytes = 0;
    if (cudnnSetConvolutionMathType(k->call->conv, math) != CUDNN_STATUS_SUCCESS ||
        workspace_size(k, p->algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > k->max_workspace)
        return 0;
    *a = (DnnAlgo){.algo = p->algo, .math = math, .workspace = bytes > p->memory ? bytes : p->memory};
    return 1;
}

/* The first usable candidate, deterministic ones first: replaying a step
 * must give what running it eagerly gave. */
static int pick(const ChooseCtx *k, const Candidate *cand, int n, int precomp_only, DnnAlgo *a)
{
    for (int deterministic = 1; deterministic >= 0; deterministic--)
        for (int i = 0; i < n; i++)
            if (usable(k, &cand[i], deterministic, precomp_only, a))
                return 1;
    return 0;
}

/* A forward with an epilogue takes the fused call when it has a bias (the
 * call has no form without one) and cuDNN has an algorithm for it; else the
 * plain call, whose epilogue then follows it. */
static int choose(void *vctx, const CacheKeyParts *parts, void **blob, size_t *n, CtErr *err)
{
    const ChooseCtx *k = vctx;
    Candidate cand[MAX_ALGOS];
    int got = 0;
    DnnAlgo a = {.algo = -1};
    cudnnStatus_t s = rank(k, cand, &got);
    if (s != CUDNN_STATUS_SUCCESS)
        return dnn_fail(err, "algorithm search", s);
    int fusable = has_epilogue(k->c) && k->c->epi.bias >= 0;
    if (fusable && pick(k, cand, got, k->c->epi.act == GEMM_ACT_NONE, &a))
        a.fused = 1;
    else if (!pick(k, cand, got, 0, &a))
        return ct_fail(err, "cuDNN has no algorithm within %zu bytes of workspace%s for %s", k->max_workspace,
                       strict_f32(k) ? " and without TF32" : "", parts->source);
    *blob = malloc(sizeof a);
    CT_ASSERT(*blob != NULL);
    memcpy(*blob, &a, sizeof a);
    *n = sizeof a;
    return 0;
}

int dnn_prepare(const Dnn *d, const ConvDesc *c, int allow_tf32, size_t max_workspace, KernelCache *cache,
                const char *device, const DnnScratch *scratch, DnnCall *call, CtErr *err)
{
    memset(call, 0, sizeof *call);
    cudnnStatus_t s = describe(c, allow_tf32, call);
    if (s != CUDNN_STATUS_SUCCESS) {
        dnn_call_free(call);
        return dnn_fail(err, "convolution descriptors", s);
    }
    char key[512], version[32], options[112];
    conv_desc_key(c, key, sizeof key);
    snprintf(version, sizeof version, "%zu", d->version);
    /* named: the deterministic-first rule, and the forward's form in the
     * entry (DnnAlgo), so that an entry chosen otherwise or of the older
     * layout is never read as one of these */
    snprintf(options, sizeof options, "%s tf32=%d max_workspace=%zu deterministic form", scratch ? "find" : "heuristic",
             allow_tf32, max_workspace);
    CacheKeyParts parts = {.source = key, .target = device, .compiler = "cudnn", .compiler_version = version,
                           .options = options};
    ChooseCtx ctx = {d, call, c, scratch, allow_tf32, max_workspace};
    const void *blob;
    size_t n;
    if (cache_get(cache, &parts, choose, &ctx, &blob, &n, err)) {
        dnn_call_free(call);
        return -1;
    }
    if (n != sizeof call->algo) {
        dnn_call_free(call);
        return ct_fail(err, "cached cuDNN choice for %s has %zu bytes, not %zu", key, n, sizeof call->algo);
    }
    memcpy(&call->algo, blob, sizeof call->algo);
    call->fused = call->algo.fused;
    s = cudnnSetConvolutionMathType(call->conv, (cudnnMathType_t)call->algo.math);
    if (s != CUDNN_STATUS_SUCCESS) {
        dnn_call_free(call);
        return dnn_fail(err, "math type", s);
    }
    dnn_stats_prepare(d, c, max_workspace, call);
    if (call->stats_plan && call->stats_workspace > call->algo.workspace)
        call->algo.workspace = call->stats_workspace; /* what the step's workspace must hold either way */
    return 0;
}

/* y = act(conv(x, w) + z + bias) in one call; z is y itself, scaled by 0,
 * where there is no residual. */
static cudnnStatus_t fused_forward(cudnnHandle_t h, const DnnCall *call, const ConvPtrs *p, void *ws)
{
    const float one = 1.0f, zero = 0.0f;
    void *y = dev(p->y), *z = p->residual ? dev(p->residual) : y;
    return cudnnConvolutionBiasActivationForward(h, &one, call->x, dev(p->x), call->w, dev(p->w), call->conv,
                                                 (cudnnConvolutionFwdAlgo_t)call->algo.algo, ws,
                                                 call->algo.workspace, p->residual ? &one : &zero, call->y, z,
                                                 call->bias, dev(p->bias), call->act, call->y, y);
}

/* The same y = act(conv(x, w) + z + bias) from the plain forward and
 * cuDNN's tensor calls, on the handle's stream one after another: a
 * residual stored in y itself (in place) is the forward's beta = 1, since
 * the forward overwrites it; ReLU in place (cuDNN allows it with one
 * descriptor for both). With no epilogue, the plain forward alone. */
static cudnnStatus_t plain_forward(cudnnHandle_t h, const DnnCall *call, const ConvDesc *c, const ConvPtrs *p,
                                   void *ws)
{
    const float one = 1.0f, zero = 0.0f;
    void *y = dev(p->y);
    int z_in_y = c->epi.residual >= 0 && p->residual == p->y;
    cudnnStatus_t s = cudnnConvolutionForward(h, &one, call->x, dev(p->x), call->w, dev(p->w), call->conv,
                                              (cudnnConvolutionFwdAlgo_t)call->algo.algo, ws, call->algo.workspace,
                                              z_in_y ? &one : &zero, call->y, y);
    if (s == CUDNN_STATUS_SUCCESS && c->epi.residual >= 0 && !z_in_y)
        s = cudnnAddTensor(h, &one, call->y, dev(p->residual), &one, call->y, y);
    if (s == CUDNN_STATUS_SUCCESS && c->epi.bias >= 0)
        s = cudnnAddTensor(h, &one, call->bias, dev(p->bias), &one, call->y, y);
    if (s == CUDNN_STATUS_SUCCESS && c->epi.act == GEMM_ACT_RELU)
        s = cudnnActivationForward(h, call->act, &one, call->y, y, &zero, call->y, y);
    return s;
}

int dnn_run(const Dnn *d, DnnCall *call, const ConvDesc *c, const ConvPtrs *p, CUdeviceptr workspace, CtErr *err)
{
    cudnnHandle_t h = d->handle;
    const float one = 1.0f, zero = 0.0f;
    void *ws = dev(workspace);
    size_t wsb = call->algo.workspace;
    cudnnStatus_t s = CUDNN_STATUS_NOT_SUPPORTED;
    if (c->dir == CONV_FWD && call->stats_plan) {
        s = dnn_stats_run(d, call, p, workspace, c->k);
        if (s != CUDNN_STATUS_NOT_SUPPORTED && s != CUDNN_STATUS_BAD_PARAM)
            return s == CUDNN_STATUS_SUCCESS ? 0 : dnn_fail(err, "forward convolution with its statistics", s);
        dnn_stats_free(call); /* refused, nothing launched: the plain call, the caller's pass after it */
    }
    if (c->dir == CONV_FWD && call->fused) {
        s = fused_forward(h, call, p, ws);
        if (s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM) /* refused, nothing launched */
            call->fused = 0;
    }
    if (c->dir == CONV_FWD && !call->fused) {
        s = plain_forward(h, call, c, p, ws);
    } else if (c->dir == CONV_BWD_DATA) {
        s = cudnnConvolutionBackwardData(h, &one, call->w, dev(p->w), call->y, dev(p->y), call->conv,
                                         (cudnnConvolutionBwdDataAlgo_t)call->algo.algo, ws, wsb, &zero, call->x,
                                         dev(p->x));
    } else if (c->dir == CONV_BWD_FILTER) {
        s = cudnnConvolutionBackwardFilter(h, &one, call->x, dev(p->x), call->y, dev(p->y), call->conv,
                                           (cudnnConvolutionBwdFilterAlgo_t)call->algo.algo, ws, wsb, &zero, call->w,
                                           dev(p->w));
    }
    static const char *const what[] = {"forward convolution", "backward-data convolution",
                                       "backward-filter convolution"};
    return s == CUDNN_STATUS_SUCCESS ? 0 : dnn_fail(err, what[c->dir], s);
}

void dnn_call_free(DnnCall *call)
{
    dnn_stats_free(call);
    if (call->x)
        cudnnDestroyTensorDescriptor(call->x);
    if (call->y)
        cudnnDestroyTensorDescriptor(call->y);
    if (call->bias)
        cudnnDestroyTensorDescriptor(call->bias);
    if (call->w)
        cudnnDestroyFilterDescriptor(call->w);
    if (call->conv)
        cudnnDestroyConvolutionDescriptor(call->conv);
    if (call->act)
        cudnnDestroyActivationDescriptor(call->act);
    memset(call, 0, sizeof *call);
}
