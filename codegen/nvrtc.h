/*
 * CUDA kernels: a translation unit of CUDA C (codegen/render.h) compiled at
 * run time by NVRTC through the kernel cache (ir/cache.h). No GPU is
 * needed to compile. Built only with the CUDA toolkit (CTIMM_HAVE_NVRTC).
 *
 * For sm_XX that this NVRTC can target, the image is a cubin
 * (nvrtcGetCUBIN); for a newer one, PTX of the newest architecture it knows
 * below XX, which the driver compiles on load. The options (and so the
 * image's kind) are part of the key, with NVRTC's version.
 */
#ifndef CTIMM_NVRTC_H
#define CTIMM_NVRTC_H

#include "codegen/units.h"
#include "ir/cache.h"

typedef struct NvrtcCompiler {
    char version[32]; /* "13.0" */
} NvrtcCompiler;

typedef struct NvrtcImage {
    const void *data; /* owned by the cache */
    size_t size;
    int is_ptx;       /* 0: a cubin (ELF) for the asked sm; 1: NUL-terminated PTX */
    char options[96]; /* the options it was compiled with */
} NvrtcImage;

int nvrtc_init(NvrtcCompiler *nc, CtErr *err);
/* Compiles (or finds in the cache) source for sm_<sm> (90 for sm_90), NVRTC
 * optimizing on every core. On a compile error the message holds the start
 * of NVRTC's log, and the source with line numbers and the whole log go to
 * stderr. */
int nvrtc_compile(const NvrtcCompiler *nc, KernelCache *cache, const char *source, int sm, NvrtcImage *img,
                  CtErr *err);
/* Every unit of u compiled (or found in the cache) into imgs[unit], the
 * units in parallel (codegen/units.h); on failure err holds the lowest
 * failing unit's message. */
int nvrtc_compile_units(const NvrtcCompiler *nc, KernelCache *cache, const KernelUnits *u, int sm, NvrtcImage *imgs,
                        CtErr *err);

#endif
