/*
 * cuDNN for the convolution steps (codegen/cuda/conv_desc.h): forward
 * (with bias, residual and ReLU through cudnnConvolutionBiasActivationForward
 * when the step's epilogue has a bias and cuDNN has an algorithm for the
 * fused call, else cudnnConvolutionForward followed by cuDNN's own tensor
 * calls for the epilogue, on the same stream), backward-data and
 * backward-filter, in the steps' own formats (NHWC activations after the
 * layout pass) and types: f16/bf16 data computes in f32 on tensor cores,
 * f32 in f32 (FMA only: never TF32 unless allowed, then on tensor cores).
 *
 * The algorithm of each convolution is chosen once per shape (by cuDNN's
 * heuristics, or by timing them with cudnnFind*Ex when scratch device
 * memory is given, as torch's cudnn.benchmark does): the first of cuDNN's
 * ranked candidates that is deterministic (else the first at all) and
 * fits, so that a step replayed gives what it gave eagerly. The choice,
 * with the forward's form (fused or not), is kept in the kernel cache on
 * disk (ir/cache.h), keyed by conv_desc_key, the device and cuDNN's
 * version: the next process skips the search. The choice is the
 * runtime's, not the compile stage's: it needs the device (cuDNN's
 * heuristics ask it, timing runs on it), so it cannot be in the Program;
 * the store it goes to is the generic one in ir/, which compiles nothing.
 * Built only with the CUDA toolkit and cuDNN (CTIMM_HAVE_CUDA_LIBS).
 */
#ifndef CTIMM_DNN_H
#define CTIMM_DNN_H

#include "codegen/program.h"
#include "ir/cache.h"
#include "runtime/cuda/driver.h"

typedef struct Dnn {
    void *handle; /* cudnnHandle_t */
    size_t version;
} Dnn;

/* Fails with cuDNN's reason (no device, no driver) and leaves nothing open. */
int dnn_open(Dnn *d, CUstream stream, CtErr *err);
void dnn_close(Dnn *d);

/* The algorithm choice as it is cached: small and plain. */
typedef struct DnnAlgo {
    int32_t algo, math; /* cudnnConvolution*Algo_t, cudnnMathType_t */
    int32_t fused;      /* a forward's epilogue in the fused call (the form chosen) */
    int32_t zero;       /* 0: no padding, so every cached byte is defined */
    uint64_t workspace;
} DnnAlgo;

typedef struct DnnCall {
    void *x, *w, *y, *conv, *bias, *act; /* descriptors; bias/act only for a forward with an epilogue */
    int fused;  /* the epilogue in cudnnConvolutionBiasActivationForward, as chosen, until cuDNN refuses
                 * it at run time; else, a forward with one runs the plain call and then the epilogue */
    DnnAlgo algo;
    void *stats_plan;       /* a forward with `stats`: the graph API's plan making y and its sums, where
                             * cuDNN has an engine for it (dnn_stats.c); NULL: the plain call */
    size_t stats_workspace; /* that plan's */
} DnnCall;

/* For timing the candidates: device buffers of the convolution's three
 * tensors and a workspace, contents to be overwritten. */
typedef struct DnnScratch {
    CUdeviceptr x, w, y, workspace;
    size_t workspace_bytes;
} DnnScratch;

/* Descriptors and the cached (or newly chosen) algorithm. scratch NULL:
 * cuDNN's heuristics; `device` names the device in the cache key. */
int dnn_prepare(const Dnn *d, const ConvDesc *c, int allow_tf32, size_t max_workspace, KernelCache *cache,
                const char *device, const DnnScratch *scratch, DnnCall *call, CtErr *err);

typedef struct ConvPtrs {
    CUdeviceptr x, w, y, bias, residual; /* the forward's roles; bias and residual 0 where none */
    CUdeviceptr sums;                    /* a forward with `stats`: y's channel sums, then their squares' */
} ConvPtrs;

/* A fused forward that cuDNN refuses (not supported) runs, from then on,
 * as the plain call and the epilogue after it, with the same algorithm.
 * A forward with a stats plan runs it (sums written); without one, or
 * where cuDNN refuses it when run (the plan then freed), the plain call
 * (the caller then makes the sums). */
int dnn_run(const Dnn *d, DnnCall *call, const ConvDesc *c, const ConvPtrs *p, CUdeviceptr workspace, CtErr *err);
void dnn_call_free(DnnCall *call);

/* A forward convolution with `stats` (conv_desc.h) and no epilogue, in
 * f16 or bf16: the graph API's plan for the convolution and GenStats over
 * its y (sum and sum of squares a channel, f32), the first of cuDNN's
 * heuristic choices that builds within max_workspace, deterministic first,
 * into call->stats_plan; NULL where cuDNN has none (no error: the launch
 * plan's statistics pass answers). dnn_prepare calls it; dnn_stats_run
 * (its status, a cudnnStatus_t) runs it, the sums k floats then k. */
void dnn_stats_prepare(const Dnn *d, const ConvDesc *c, size_t max_workspace, DnnCall *call);
int dnn_stats_run(const Dnn *d, const DnnCall *call, const ConvPtrs *p, CUdeviceptr workspace, int64_t k);
void dnn_stats_free(DnnCall *call);

#endif
