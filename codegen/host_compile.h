/*
 * Host kernels: a translation unit of host C (codegen/render.h) compiled by
 * the system C compiler into a shared object, through the kernel cache
 * (codegen/cache.h), and loaded with dlopen.
 *
 * One translation unit per graph: every elementwise kernel of a graph goes
 * into one file and one compiler run. A run's fixed cost (starting cc, the
 * headers, the linker) is most of the time for kernels this small, a graph
 * hits or misses the cache as a whole, and there is one shared object to
 * load. The tiny test models compile in 1-2 s at -O3, resnet50's training
 * step (535 kernels) in about 12 s on 2 cores, once: later runs hit the
 * cache. Splitting a graph into a few units compiled by a thread pool is
 * the step to take when many-core machines make that wait matter.
 *
 * The key holds the source, the compiler's first `--version` line, the
 * options and the target: the machine and CPU model, since -march=native
 * ties the binary to the CPU it was built on.
 */
#ifndef CTIMM_HOST_COMPILE_H
#define CTIMM_HOST_COMPILE_H

#include "codegen/cache.h"

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
/* Kernel ct_k<launch> of the module, or NULL. */
HostKernelFn host_kernel(const HostModule *m, int launch);
void host_module_close(HostModule *m);

#endif
