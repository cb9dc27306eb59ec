/*
 * The compiled Program (DESIGN.md, "Runtime"): what the compile stage
 * (passes + codegen) makes of one graph for one target, once. The caller
 * owns it and frees it; a backend (runtime/backend.h) reads it and never
 * re-runs a pass, hashes a graph or keeps a program of its own.
 *
 * Every target's program holds the graph as it runs (for cpu its nodes in
 * the fusion plan's step order), the state names its values bind to, and
 * the graph's inputs and outputs. The cpu target adds the fusion plan, the
 * memory plan over the ordered graph and the compiled host kernels (one
 * shared object per translation unit, through the kernel cache); without a
 * C compiler it runs node by node over the memory plan. The cuda target
 * keeps the graph as given and adds its launch plan (fusion, memory,
 * library call descriptors) and the NVRTC images of its kernels, for one
 * compute capability (codegen/cuda/cuda_program.h): the executor
 * (runtime/cuda/executor.h) loads them and compiles nothing.
 */
#ifndef CTIMM_PROGRAM_H
#define CTIMM_PROGRAM_H

#include <signal.h>

#include "codegen/cuda/cuda_program.h"
#include "codegen/host_compile.h"
#include "codegen/kir.h"
#include "ir/collective.h"
#include "passes/fuse.h"
#include "passes/plan.h"

typedef enum CtTarget { CT_TARGET_REF, CT_TARGET_CPU, CT_TARGET_CUDA } CtTarget;

/* The cuda target where ProgramOptions leave it 0 and no device filled it
 * in: the H200's (sm_90, 132 SMs). */
#define PROGRAM_CUDA_CC 90
#define PROGRAM_CUDA_SMS 132

typedef struct ProgramOptions {
    /* The caller's stop flag, raised by its SIGINT/SIGTERM handler: a host
     * compile under way (cc, a child process) is ended and its files
     * removed, and program_compile returns CT_INTERRUPTED. NULL: none. */
    const volatile sig_atomic_t *stop;
    /* The caller's "the kernel cache keeps nothing on disk" line, said once
     * (cache_warn_disk); NULL: said at every compile that finds it so. */
    int *cache_warned;
    /* cuda: f32 GEMMs and convolutions on TF32 tensor cores (timm's
     * benchmark allows them); every step run eagerly with a
     * synchronisation after each (a fault names its step); the outputs
     * left on the device (a caller that reads none, as ctimm-bench's timed
     * steps); the inputs uploaded at the first run only (a caller whose
     * every run passes the same unchanged batch, as benchmark.py's
     * example_inputs, made on the device once). */
    int allow_tf32, sync_each, outputs_on_device, inputs_fixed;
    /* The collective of the data-parallel ranks that allreduce_mean and
     * synchronised batch norm reduce over when the program runs
     * (ir/collective.h; the trainer's is its communicator's). The program
     * keeps it: it must outlive the program. NULL: a world of one rank. */
    const CtCollective *collective;
    /* cuda: the target. cuda_cc is its compute capability, major * 10 +
     * minor (90: sm_90), which the images are compiled for and a device of
     * another one refuses; cuda_sms its multiprocessors, which size the
     * grids of grid-stride loops (any device runs them). 0: the device's
     * where backend_open finds one (CtBackend.target_options), else
     * PROGRAM_CUDA_CC and PROGRAM_CUDA_SMS; a cuda program's opt holds
     * what it was compiled for. */
    int cuda_cc, cuda_sms;
    /* cuda: the images are the kernels' CUDA C sources, for the SIMT
     * harness (the cuda-sim backend, runtime/cuda_sim/), not NVRTC's. */
    int cuda_sim;
    /* cuda-sim: the order of threads inside each phase of every launch
     * (runtime/cuda_sim/simt.h; two seeds that differ expose a missing
     * barrier); 0: 1. */
    uint64_t sim_seed;
} ProgramOptions;

/* The cpu target's compiled kernels and what runs around them. */
typedef struct CpuProgram {
    int fused;        /* 0: no C compiler here; every node runs on its own over the memory plan */
    FusePlan p;       /* over the source graph; steps name nodes of CtProgram.g by position */
    KirKernel *k;     /* per launch; nloops == 0 where the launch is not elementwise */
    int nk;
    HostModule *mods; /* per translation unit (codegen/units.h) */
    int nmods;
    HostKernelFn *fn; /* per launch: ct_k<launch> from its unit's module, NULL where no kernel */
    char *own;        /* per value: stored over what its kernel reads elsewhere, so not in the arena */
    size_t *attn;     /* per node: an sdpa's or sdpa_grad's saved weights, bytes past the plan's arena; -1 none */
    size_t attn_bytes;
} CpuProgram;

typedef struct CtProgram {
    CtTarget target;
    Graph g;           /* the graph as it runs (cpu, cuda: nodes in step order), owning its arrays */
    char **state_name; /* per value: the state tensor it is (params, buffers, optimizer state), else NULL */
    MemPlan plan;      /* cpu: one arena by liveness over g */
    CpuProgram cpu;
    CudaProgram cuda;
    ProgramOptions opt; /* as compiled (stop and cache_warned cleared: the compile's alone) */
} CtProgram;

/* Compiles g for target: 0, -1 with err, or CT_INTERRUPTED (o->stop). The
 * program does not refer to g afterwards. o may be NULL. */
int program_compile(const Graph *g, CtTarget target, const ProgramOptions *o, CtProgram **out, CtErr *err);
void program_free(CtProgram *p);

/* Bytes of one value of p's graph. */
size_t program_value_bytes(const CtProgram *p, ValueId v);

struct CtBuf;
/* `ctimm-compile --dump-program`: target, steps, arena, kernels (cuda:
 * their images) and each value's binding, one line each. */
void program_dump(const CtProgram *p, struct CtBuf *out);

#endif
