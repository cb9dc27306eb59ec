/*
 * cuBLASLt for the GEMM steps (codegen/cuda/gemm_desc.h): one handle per
 * executor; per step, a call prepared once (operation and matrix-layout
 * descriptors, the epilogue, the algorithms cuBLASLt's heuristic ranks
 * best within the workspace) and run as often as the step runs, on the
 * executor's stream (so it is captured into the step's CUDA graph). A
 * candidate cuBLASLt refuses at run time (not supported) gives way to the
 * next, and the one that ran is kept for every later run.
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
} BlasLtCall;

typedef struct GemmPtrs {
    CUdeviceptr a, b, d, residual, bias, aux; /* 0 where the GemmDesc has none; bias: the bias gradient too */
} GemmPtrs;

int blaslt_prepare(const BlasLt *b, const GemmDesc *d, int allow_tf32, size_t max_workspace, BlasLtCall *c,
                   CtErr *err);
/* Aux and bias pointers are set per run: the graph capture sees the values. */
int blaslt_run(const BlasLt *b, BlasLtCall *c, const GemmPtrs *p, CUdeviceptr workspace, CUstream s, CtErr *err);
void blaslt_call_free(BlasLtCall *c);

#endif
