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

#endif
