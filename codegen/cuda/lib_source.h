/*
 * The CUDA C translation units of the library kernels, one a storage type
 * (f32, f16, bf16: kernel names ending _f32, _f16, _bf16): the generated
 * kernels' prelude (codegen/render_cuda.c: f16/bf16 conversions), the CUDA
 * dialect of codegen/cuda/lib_kernels.h, lib_common.h, ir/formulas.h over
 * float, then the kernels for that type. Each a module, compiled by NVRTC
 * through the kernel cache like the generated kernels; a program compiles
 * the units its launches use (codegen/cuda/cuda_program.h): an f32 step
 * has no use for the 16-bit ones, whose tensor-core kernels take most of
 * NVRTC's time (bench/NOTES.md: f32 26 s, f16 and bf16 41 s each, of CPU).
 */
#ifndef CTIMM_LIB_SOURCE_H
#define CTIMM_LIB_SOURCE_H

#include "ir/buf.h"

typedef enum { LIB_F32, LIB_F16, LIB_BF16, LIB_NTYPES } LibType;

void lib_source(LibType t, CtBuf *out);

/* The name of every kernel lib_source(t) defines ("ct_softmax_f32"; the
 * CT_GLOBAL16 ones in the _f16 and _bf16 units alone), *n of them: a table
 * owned by this module, the same on every call. A loader that binds them
 * all loads one module for every program (the cuda-sim's: one compile a
 * cache). */
const char *const *lib_kernel_names(LibType t, int *n);
/* The unit defining library kernel `name` (by its suffix), or -1 where the
 * name is no library kernel's. */
int lib_kernel_type(const char *name);

#endif
