/*
 * The cuda target's part of the Program (codegen/program.h): the launch
 * plan (codegen/cuda/launch_plan.h) and the compiled images of every kernel
 * it launches, made once by program_compile for one compute capability and
 * SM count, so that the executor (runtime/cuda/executor.h) only loads
 * modules, prepares the library calls and runs.
 *
 * Images: one per translation unit of the generated kernels
 * (codegen/units.h: launch l runs ct_k<fn[l]> of unit unit[l]) and one per
 * storage type of the library kernels the plan launches
 * (codegen/cuda/lib_source.h: f32, f16, bf16), each NVRTC's output
 * through the kernel cache (codegen/nvrtc.h: keyed by the source, the
 * target, the options and NVRTC's version), copied here because the
 * program outlives the cache. An image is a cubin for the target, or PTX
 * of the newest older architecture where NVRTC does not know the target
 * (the driver compiles it on load). Without NVRTC (a build without the
 * CUDA toolkit) nothing compiles for this target.
 *
 * For the SIMT harness (runtime/cuda_sim: `--backend cuda-sim`) the images
 * are the same units' CUDA C sources instead, which the harness compiles
 * for the host when it loads them, as a driver compiles PTX: the plan, its
 * launches and their arguments are the ones a GPU would run.
 */
#ifndef CTIMM_CUDA_PROGRAM_H
#define CTIMM_CUDA_PROGRAM_H

#include "codegen/cuda/launch_plan.h"
#include "codegen/cuda/lib_source.h"
#include "ir/buf.h"

typedef struct CudaImage {
    void *data;    /* what cuModuleLoadData takes: a cubin, or NUL-terminated PTX */
    size_t size;
    int is_ptx;
    int is_source; /* the CUDA C source itself (NUL-terminated), for the SIMT harness */
    char arch[16]; /* what NVRTC compiled for: "sm_90", or "compute_89" for PTX; "source" */
} CudaImage;

typedef struct CudaProgram {
    LaunchPlan lp;    /* over CtProgram.g */
    CudaImage *units; /* the generated kernels, per translation unit */
    int nunits;
    int *unit, *fn;   /* per launch id: the unit holding its kernel ct_k<fn>, -1 where none */
    /* per LibType, the library kernels of that storage type where the plan
     * launches one of them, else size 0 */
    CudaImage lib[LIB_NTYPES]; /* its kernels: lib_kernel_names(t); a kernel's unit: lib_kernel_type */
} CudaProgram;

/* The plan of g and its images for compute capability cc (90: sm_90) and
 * `sms` multiprocessors; with `sources`, the images are the CUDA C sources
 * (nothing is compiled). Fails naming an op the plan has no kernel for, or
 * with NVRTC's log. *cache_warned as ProgramOptions.cache_warned. */
int cuda_compile(const Graph *g, int cc, int sms, int sources, int *cache_warned, CudaProgram *c, CtErr *err);
void cuda_program_free(CudaProgram *c);

/* Each step's roofline floor in seconds (codegen/cuda/roofline.h) on the
 * known device whose name the GPU's contains ("NVIDIA H200": h200), into
 * floor_s[c->lp.nsteps]; that device's short name, or NULL where none is
 * known (floor_s untouched). g: the program's graph. */
const char *cuda_program_floors(const CudaProgram *c, const Graph *g, const char *gpu, int allow_tf32,
                                double *floor_s);

/* --dump-program's lines: the plan's steps, then the images. */
void cuda_program_dump(const CudaProgram *c, const Graph *g, CtBuf *out);

#endif
