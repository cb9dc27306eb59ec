/*
 * The GEMM a library step computes, as cuBLASLt sees it: a pure translation
 * of a fused plan's linear/matmul step (passes/fuse.h) into column-major
 * (m, n, k), transposes, leading dimensions, batch strides and an epilogue,
 * with no CUDA in it, so that it is tested on any machine.
 *
 * ctimm's tensors are row-major, cuBLAS's column-major: a row-major C[R,N]
 * is a column-major C^T[N,R], so C = A B is computed as C^T = B^T A^T, that
 * is m = N, n = R (or M), k = K, the "A" operand being the node's right one.
 *   linear  x [..., K] w [N, K]: A = w (transposed, lda K), B = x (ldb K).
 *   matmul  a [..., M, K] b [..., K, N]: A = b (lda N), B = a (ldb K),
 *           batched with strides K*N, M*K, M*N; a shared [K, N] b folds the
 *           batch into n (one GEMM of n = batch * M).
 *
 * The epilogue takes the step's parts (passes/fuse.h: bias, residual,
 * activation, in that order) while cuBLASLt can compute them: a bias of m
 * values (the linear's own, or a bias add), a residual of D's shape and
 * dtype as C with beta = 1, then ReLU, or GELU with approximate='tanh'
 * (cuBLASLt's GELU is the tanh form: timm's exact GELU is left to a kernel).
 * A value between the parts that is read elsewhere must be stored: GELU's
 * input can go to the epilogue's aux output; anything else stops the
 * epilogue there. The step's nodes from `tail` on are not done by the call
 * and run as an elementwise pass over its output. Operands stored NHWC
 * (channels_last 4-D values) are refused: they are not row-major matrices.
 *
 * A weight gradient's GEMM (dW = dy^T x, no epilogue of its own) can also
 * compute the bias gradient beside it, the sum of dy over the rows that
 * the GEMM reduces (cuBLASLt's BGRADB: B summed over k, one value per
 * column of D, written through the bias pointer): gemm_bias_grad.
 */
#ifndef CTIMM_GEMM_DESC_H
#define CTIMM_GEMM_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "passes/fuse.h"

typedef enum GemmAct { GEMM_ACT_NONE, GEMM_ACT_RELU, GEMM_ACT_GELU_TANH } GemmAct;

/* The part of a library step's epilogue the library call computes. */
typedef struct EpiDesc {
    ValueId bias;     /* one value per output channel, or -1 */
    ValueId residual; /* added with beta = 1, or -1 */
    ValueId aux;      /* GELU's input, stored by the epilogue, or -1 */
    ValueId bgrad;    /* B summed over k (n values, bias_type), stored by the epilogue, or -1; never with the
                       * others */
    GemmAct act;
    ValueId d;        /* the value the call writes */
    int tail;         /* first node of the step (0-based within it) the call leaves */
} EpiDesc;

/* The longest prefix of step st's epilogue parts (after its first node,
 * whose output is `out`) a library computes: a bias of `channels` values,
 * a residual of the same dtype, then ReLU or (with gelu) tanh-GELU. */
void epi_desc(const Graph *g, const FusePlan *p, const FuseStep *st, int64_t channels, int gelu, EpiDesc *e);

typedef struct GemmDesc {
    int64_t m, n, k;
    int trans_a, trans_b;                /* A or B read transposed */
    int64_t lda, ldb, ldc;
    int64_t batch;                       /* 1: a plain GEMM */
    int64_t stride_a, stride_b, stride_c; /* elements between batch items (0: shared) */
    CtDType ab_type, d_type, bias_type;
    ValueId a, b;                        /* the cuBLASLt operands A and B */
    EpiDesc epi;                         /* D = epi.d; epi.bias has m values; epi.residual is C */
} GemmDesc;

/* The step's GEMM; fails when the step is not a linear/matmul step. */
int gemm_desc(const Graph *g, const FusePlan *p, const FuseStep *st, GemmDesc *d, CtErr *err);

/* A text naming everything about d that shapes the cuBLASLt call (sizes,
 * transposes, leading dimensions, batch strides, dtypes, which epilogue
 * parts), not which values it reads: the key its timed algorithm choice
 * is stored under (runtime/cuda/blaslt.h). */
void gemm_desc_key(const GemmDesc *d, char *buf, size_t n);

/* The value of fusion step `next` (a reduce_sum alone) when it sums the
 * B operand of d, the GEMM of step st, over d's k dimension into d's n
 * values in D's dtype, and st is a plain, unbatched matmul with nothing
 * after it: a weight gradient's GEMM and its bias gradient, which BGRADB
 * computes together. -1 otherwise. */
ValueId gemm_bias_grad(const Graph *g, const FusePlan *p, const FuseStep *st, const FuseStep *next,
                       const GemmDesc *d);

#endif
