/*
 * cuBLASLt for the GEMM steps (codegen/cuda/gemm_desc.h): one handle per
 * executor; per step, a call prepared once (operation and matrix-layout
 * descriptors, the epilogue, the algorithms cuBLASLt's heuristic ranks
 * best within the workspace) and run as often as the step runs, on the
 * executor's stream (so it is captured into the step's CUDA graph). Where
 * there are buffers to time them on, blaslt_choose runs each candidate and
 * puts the fastest first, the choice kept in the executor's store of
 * measurements (ir/cache.h, beside cuDNN's): a later process on the same
 * device and cuBLASLt times nothing. A candidate cuBLASLt refuses at run
 * time (not supported) gives way to the next, and the one that ran is
 * kept for every later run.
 *
 * Types: f32 operands compute in f32, or in TF32 when allowed (timm's
 * benchmark allows it; the f32 parity tests do not); f16 and bf16 operands
 * compute in f32. Built only with the CUDA toolkit (CTIMM_HAVE_CUDA_LIBS);
 * the handle lives in the device's primary context, current on the calling
 * thread. libcublasLt is opened by blaslt_open, not linked: loading it makes
 * ~210 MiB of a process resident (its relocations), which every run without
 * the cuda backend would carry (bench/NOTES.md, issue 28).
 */
#ifndef CTIMM_BLASLT_H
#define CTIMM_BLASLT_H

#include "codegen/program.h"
#include "ir/cache.h"
#include "runtime/cuda/driver.h"

typedef struct BlasLt {
    void *lib;    /* libcublasLt */
    void *fn;     /* its entry points (blaslt.c) */
    void *handle; /* cublasLtHandle_t */
} BlasLt;

/* Fails with cuBLASLt's reason (no library, no device, no driver) and
 * leaves nothing open. */
int blaslt_open(BlasLt *b, CtErr *err);
void blaslt_close(BlasLt *b);

enum { BLASLT_ALGOS = 8 }; /* candidates kept per GEMM: 8 x 64 bytes, few ever tried */

typedef struct BlasLtCall {
    const BlasLt *lt;    /* the handle it was prepared on, which outlives it */
    void *op;            /* cublasLtMatmulDesc_t */
    void *layout[3];     /* A, B, C = D */
    unsigned char algo[BLASLT_ALGOS][64]; /* cublasLtMatmulAlgo_t: the heuristic's candidates, best first */
    size_t algo_workspace[BLASLT_ALGOS];  /* bytes each needs */
    int nalgo, cur;      /* candidates; the one that runs (the first that did) */
    size_t workspace;    /* bytes the caller provides: what the hungriest candidate needs */
    int has_c;           /* the residual is C (beta = 1) */
    int tf32;            /* as prepared: f32 on TF32 allowed, */
    size_t max_workspace; /* and the workspace the candidates were limited to */
} BlasLtCall;

typedef struct GemmPtrs {
    CUdeviceptr a, b, d, residual, bias, aux; /* 0 where the GemmDesc has none; bias: the bias gradient too */
} GemmPtrs;

int blaslt_prepare(const BlasLt *b, const GemmDesc *d, int allow_tf32, size_t max_workspace, BlasLtCall *c,
                   CtErr *err);
/* Device buffers to time candidates on: A, B and D (C too, in place) as
 * large as the GEMM's, aux as D where it has one, the bias (or its
 * gradient) as max(m, n) floats, and the workspace. */
typedef struct GemmScratch {
    CUdeviceptr a, b, d, aux, bias, workspace;
    size_t workspace_bytes;
} GemmScratch;

/* Bytes of A, B and D (C and aux alike) d's call touches. */
void blaslt_operand_bytes(const GemmDesc *d, size_t *a, size_t *b, size_t *dst);

/* CTIMM_LIB_CHOICE: "timed" (the default) times cuBLASLt's and cuDNN's
 * candidates before a program's first step (blaslt_choose, dnn_prepare with
 * scratch); "heuristic" takes their heuristics' order and times nothing,
 * so a device where the timing fails still runs (bench/gpu_check.sh falls
 * back to it). *timed: 1 or 0; another value is an error. */
int lib_choice_timed(int *timed, CtErr *err);

/* c's candidates ordered fastest first: each run on sc (one run to warm
 * up, then the mean of a few), on stream s, timed by the driver's events,
 * and the winner stored in `cache` under d's key, `device` and cuBLASLt's
 * version; on a hit, the stored winner first and nothing run. The others
 * stay behind it for a refusal at run time. */
int blaslt_choose(const BlasLt *b, BlasLtCall *c, const GemmDesc *d, const CudaDriver *drv, CUstream s,
                  const GemmScratch *sc, KernelCache *cache, const char *device, CtErr *err);
/* Aux and bias pointers are set per run: the graph capture sees the values. */
int blaslt_run(const BlasLt *b, BlasLtCall *c, const GemmPtrs *p, CUdeviceptr workspace, CUstream s, CtErr *err);
void blaslt_call_free(BlasLtCall *c);

#endif
