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

/* The descriptors of the convolution and its three tensors (and, for a
 * fused forward, of the bias and the activation). */
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
    int low = c->x_type != CT_F32 || c->w_type != CT_F32;
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetConvolutionMathType(conv, low || allow_tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH);
    call->fused = c->dir == CONV_FWD && (c->epi.bias >= 0 || c->epi.residual >= 0 || c->epi.act != GEMM_ACT_NONE);
    if (s != CUDNN_STATUS_SUCCESS || !call->fused)
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

/* The first ranked algorithm that ran and fits: an identity activation
 * runs only with IMPLICIT_PRECOMP_GEMM (cuDNN's rule for the fused call). */
#define PICK(perf, n, max_ws, need_precomp, out)                                                                \
    do {                                                                                                        \
        for (int i_ = 0; i_ < (n); i_++)                                                                        \
            if ((perf)[i_].status == CUDNN_STATUS_SUCCESS && (perf)[i_].memory <= (max_ws) &&                   \
                (!(need_precomp) || (int)(perf)[i_].algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)) { \
                (out)->algo = (int32_t)(perf)[i_].algo;                                                         \
                (out)->math = (int32_t)(perf)[i_].mathType;                                                     \
                (out)->workspace = (perf)[i_].memory;                                                           \
                break;                                                                                          \
            }                                                                                                   \
    } while (0)

typedef struct ChooseCtx {
    const Dnn *d;
    const DnnCall *call;
    const ConvDesc *c;
    const DnnScratch *scratch;
    size_t max_workspace;
} ChooseCtx;

static int choose(void *vctx, const CacheKeyParts *parts, void **blob, size_t *n, CtErr *err)
{
    const ChooseCtx *k = vctx;
    const DnnCall *call = k->call;
    const DnnScratch *sc = k->scratch;
    cudnnHandle_t h = k->d->handle;
    int got = 0, precomp = call->fused && k->c->epi.act == GEMM_ACT_NONE;
    DnnAlgo a = {.algo = -1};
    cudnnStatus_t s;
    void *x = sc ? (void *)(uintptr_t)sc->x : NULL, *w = sc ? (void *)(uintptr_t)sc->w : NULL;
    void *y = sc ? (void *)(uintptr_t)sc->y : NULL, *ws = sc ? (void *)(uintptr_t)sc->workspace : NULL;
    size_t wsb = sc ? sc->workspace_bytes : 0;
    switch (k->c->dir) {
    case CONV_FWD: {
        cudnnConvolutionFwdAlgoPerf_t perf[MAX_ALGOS];
        s = sc ? cudnnFindConvolutionForwardAlgorithmEx(h, call->x, x, call->w, w, call->conv, call->y, y, MAX_ALGOS,
                                                        &got, perf, ws, wsb)
               : cudnnGetConvolutionForwardAlgorithm_v7(h, call->x, call->w, call->conv, call->y, MAX_ALGOS, &got,
                                                        perf);
        if (s == CUDNN_STATUS_SUCCESS)
            PICK(perf, got, k->max_workspace, precomp, &a);
        break;
    }
    case CONV_BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_ALGOS];
        s = sc ? cudnnFindConvolutionBackwardDataAlgorithmEx(h, call->w, w, call->y, y, call->conv, call->x, x,
                                                             MAX_ALGOS, &got, perf, ws, wsb)
               : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, call->w, call->y, call->conv, call->x, MAX_ALGOS,
                                                             &got, perf);
        if (s == CUDNN_STATUS_SUCCESS)
            PICK(perf, got, k->max_workspace, 0, &a);
        break;
    }
    default: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_ALGOS];
        s = sc ? cudnnFindConvolutionBackwardFilterAlgorithmEx(h, call->x, x, call->y, y, call->conv, call->w, w,
                                                               MAX_ALGOS, &got, perf, ws, wsb)
               : cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, call->x, call->y, call->conv, call->w, MAX_ALGOS,
                                                               &got, perf);
        if (s == CUDNN_STATUS_SUCCESS)
            PICK(perf, got, k->max_workspace, 0, &a);
        break;
    }
    }
    if (s != CUDNN_STATUS_SUCCESS)
        return dnn_fail(err, "algorithm search", s);
    if (a.algo < 0)
        return ct_fail(err, "cuDNN has no algorithm within %zu bytes of workspace for %s", k->max_workspace,
                       parts->source);
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
    char key[512], version[32], options[96];
    conv_desc_key(c, key, sizeof key);
    snprintf(version, sizeof version, "%zu", d->version);
    snprintf(options, sizeof options, "%s tf32=%d max_workspace=%zu", scratch ? "find" : "heuristic", allow_tf32,
             max_workspace);
    CacheKeyParts parts = {.source = key, .target = device, .compiler = "cudnn", .compiler_version = version,
                           .options = options};
    ChooseCtx ctx = {d, call, c, scratch, max_workspace};
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
    s = cudnnSetConvolutionMathType(call->conv, (cudnnMathType_t)call->algo.math);
    if (s != CUDNN_STATUS_SUCCESS) {
        dnn_call_free(call);
        return dnn_fail(err, "math type", s);
    }
    return 0;
}

int dnn_run(const Dnn *d, const DnnCall *call, const ConvDesc *c, const ConvPtrs *p, CUdeviceptr workspace,
            CtErr *err)
{
    cudnnHandle_t h = d->handle;
    const float one = 1.0f, zero = 0.0f;
    void *x = (void *)(uintptr_t)p->x, *w = (void *)(uintptr_t)p->w, *y = (void *)(uintptr_t)p->y;
    void *ws = (void *)(uintptr_t)workspace;
    size_t wsb = call->algo.workspace;
    cudnnStatus_t s;
    if (c->dir == CONV_FWD && call->fused) {
        /* y = act(conv(x) + alpha2 z + bias); z aliases y when there is no residual (alpha2 = 0) */
        void *z = p->residual ? (void *)(uintptr_t)p->residual : y;
        s = cudnnConvolutionBiasActivationForward(h, &one, call->x, x, call->w, w, call->conv,
                                                  (cudnnConvolutionFwdAlgo_t)call->algo.algo, ws, wsb,
                                                  p->residual ? &one : &zero, call->y, z, call->bias,
                                                  (void *)(uintptr_t)p->bias, call->act, call->y, y);
    } else if (c->dir == CONV_FWD) {
        s = cudnnConvolutionForward(h, &one, call->x, x, call->w, w, call->conv,
                                    (cudnnConvolutionFwdAlgo_t)call->algo.algo, ws, wsb, &zero, call->y, y);
    } else if (c->dir == CONV_BWD_DATA) {
        s = cudnnConvolutionBackwardData(h, &one, call->w, w, call->y, y, call->conv,
                                         (cudnnConvolutionBwdDataAlgo_t)call->algo.algo, ws, wsb, &zero, call->x, x);
    } else {
        s = cudnnConvolutionBackwardFilter(h, &one, call->x, x, call->y, y, call->conv,
                                           (cudnnConvolutionBwdFilterAlgo_t)call->algo.algo, ws, wsb, &zero, call->w,
                                           w);
    }
    static const char *const what[] = {"forward convolution", "backward-data convolution",
                                       "backward-filter convolution"};
    return s == CUDNN_STATUS_SUCCESS ? 0 : dnn_fail(err, what[c->dir], s);
}

void dnn_call_free(DnnCall *call)
{
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
