/*
 * Host kernels: a translation unit of host C (codegen/render.h) compiled by
 * the system C compiler into a shared object, through the kernel cache
 * (codegen/cache.h), and loaded with dlopen.
 *
 * A graph's kernels are a few translation units (codegen/units.h), each
 * its own compiler run, shared object and cache entry, compiled by a pool
 * of threads: a run's fixed cost (starting cc, the headers, the linker,
 * about 0.07 s) is small next to a unit of ~96 loops (1.5-2 s), and on a
 * cold cache the units compile side by side (resnet50's training step, 154
 * kernels, 313 loops: 4 units). Units are made from the kernels alone, so
 * each one hits or misses the cache on its own, the same on every machine.
 *
 * The key holds the source, the compiler's first `--version` line, the
 * options and the target: the machine and CPU model, since -march=native
 * ties the binary to the CPU it was built on.
 */
#ifndef CTIMM_HOST_COMPILE_H
#define CTIMM_HOST_COMPILE_H

#include "codegen/cache.h"
#include "codegen/units.h"

/* No FMA contraction: KIR_EXACT kernels round as the ref kernels do. */
#define HOST_CC_OPTIONS "-O3 -march=native -ffp-contract=off -fno-math-errno -fopenmp -shared -fPIC"

/* The compiler's identity, read once (host_compiler_init). */
typedef struct HostCompiler {
    char cc[64];         /* the command, "cc" */
    char version[256];   /* first line of `cc --version` */
    char target[320];    /* "host-<machine>-<cpu model>" */
    char tmpdir[256];    /* where sources and objects are written: $TMPDIR or /tmp */
} HostCompiler;

typedef struct HostModule {
    void *dl;
} HostModule;

/* A rendered host kernel: args[b] is the memory of its buffer b. */
typedef void (*HostKernelFn)(void *const *args);

/* Finds the compiler and names the target (the machine and CPU model). */
int host_compiler_init(HostCompiler *hc, CtErr *err);
/* Compiles (or finds in the cache) source and loads it into *m. On a
 * compile error the message holds the compiler's output. */
int host_compile(const HostCompiler *hc, KernelCache *cache, const char *source, HostModule *m, CtErr *err);
/* Every unit of u compiled (or found in the cache) and loaded into
 * mods[unit], the units in parallel (codegen/units.h). On failure every
 * module is closed and err holds the lowest failing unit's message. */
int host_compile_units(const HostCompiler *hc, KernelCache *cache, const KernelUnits *u, HostModule *mods, CtErr *err);
/* Kernel ct_k<launch> of the module, or NULL. */
HostKernelFn host_kernel(const HostModule *m, int launch);
void host_module_close(HostModule *m);

#endif
