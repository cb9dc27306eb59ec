/*
 * The CUDA C translation unit of the library kernels: the generated
 * kernels' prelude (codegen/render_cuda.c: f16/bf16 conversions), the CUDA
 * dialect of codegen/cuda/lib_kernels.h, lib_common.h, ir/formulas.h over
 * float, then the kernels once per storage type (f32, f16, bf16: names
 * ending _f32, _f16, _bf16).
 * One module, compiled by NVRTC through the kernel cache like the
 * generated kernels.
 */
#ifndef CTIMM_LIB_SOURCE_H
#define CTIMM_LIB_SOURCE_H

#include "ir/buf.h"

void lib_source(CtBuf *out);

/* The name of every kernel lib_source defines ("ct_softmax_f32"; the
 * CT_GLOBAL16 ones _f16 and _bf16 alone), *n of them: a table owned by
 * this module, the same on every call. A loader that binds them all loads
 * one module for every program (the cuda-sim's: one compile a cache). */
const char *const *lib_kernel_names(int *n);

#endif
