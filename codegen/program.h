/*
 * The compiled Program (DESIGN.md, "Runtime"): what the compile stage
 * (passes + codegen) makes of one graph for one target, once. The caller
 * owns it and frees it; a backend (runtime/backend.h) reads it and never
 * re-runs a pass, hashes a graph or keeps a program of its own.
 *
 * Every target's program holds the graph as it runs (for cpu and cuda its
 * nodes in the fusion plan's step order), the state names its values bind
 * to, and the graph's inputs and outputs. The cpu target adds the fusion
 * plan, the memory plan over the ordered graph and the compiled host
 * kernels (one shared object per translation unit, through the kernel
 * cache); without a C compiler it runs node by node over the memory plan.
 * The cuda target keeps the graph as given; the executor builds its launch
 * plan (fusion included) and device modules once per context
 * (runtime/cuda/executor.h).
 */
#ifndef CTIMM_PROGRAM_H
#define CTIMM_PROGRAM_H

#include <signal.h>

#include "codegen/host_compile.h"
#include "codegen/kir.h"
#include "passes/fuse.h"
#include "passes/plan.h"

typedef enum CtTarget { CT_TARGET_REF, CT_TARGET_CPU, CT_TARGET_CUDA } CtTarget;

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
     * steps). */
    int allow_tf32, sync_each, outputs_on_device;
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
    ProgramOptions opt; /* as compiled (its pointers cleared) */
} CtProgram;

/* Compiles g for target: 0, -1 with err, or CT_INTERRUPTED (o->stop). The
 * program does not refer to g afterwards. o may be NULL. */
int program_compile(const Graph *g, CtTarget target, const ProgramOptions *o, CtProgram **out, CtErr *err);
void program_free(CtProgram *p);

/* Bytes of one value of p's graph. */
size_t program_value_bytes(const CtProgram *p, ValueId v);

struct CtBuf;
/* `ctimm-compile --dump-program`: target, steps, arena, kernels and each
 * value's binding, one line each. */
void program_dump(const CtProgram *p, struct CtBuf *out);

#endif
