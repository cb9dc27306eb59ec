/*
 * The library calls of a cuda program (cuBLASLt GEMMs, cuDNN
 * convolutions) as the cuda-sim backend makes them: from the same
 * descriptors (codegen/cuda/gemm_desc.h, conv_desc.h) the executor gives
 * the libraries, read literally (column-major operands and their leading
 * dimensions, transposes, batch strides, tensor formats, groups, dilation,
 * the epilogue's bias, residual, activation and aux output, each tensor's
 * dtype), in double and rounded once when stored, over the device memory
 * the plan placed them in. A descriptor that would make the library read
 * or write the wrong bytes makes these read or write them too.
 */
#ifndef CTIMM_SIM_CALLS_H
#define CTIMM_SIM_CALLS_H

#include "codegen/program.h"

/* D = act(op(A) op(B) + C + bias), aux = its input where asked; with a
 * bias gradient (epi.bgrad), D = op(A) op(B) and `bias` is written: op(B)
 * summed over k, per column (batch 1). */
void sim_gemm(const GemmDesc *d, const void *a, const void *b, void *dst, const void *residual, void *bias,
              void *aux);

/* CONV_FWD: y = act(conv(x, w) + z + bias) into y; CONV_BWD_DATA: x = the
 * gradient of x from y (dy) and w; CONV_BWD_FILTER: w = the gradient of w
 * from x and y (dy). Overwrites its output, as cuDNN with beta 0. Where
 * sums is not NULL (a forward with `stats`), also GenStats' outputs: each
 * channel's sum of y as stored, then its sum of squares, f32. */
void sim_conv(const ConvDesc *c, void *x, void *w, void *y, const void *bias, const void *residual, float *sums);

#endif
