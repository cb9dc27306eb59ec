/*
 * Host kernels: a translation unit of host C (codegen/render.h) compiled by
 * the system C compiler into a shared object, through the kernel cache
 * (ir/cache.h), and loaded with dlopen.
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
 * options and the target: the machine, the CPU model and what -march=native
 * made of this CPU, since it ties the binary to the instruction set it was
 * built for: the predefined macros of `cc HOST_CC_OPTIONS -dM -E` (__AVX2__,
 * __AVX512F__, __FMA__, ... and -march's own), hashed. The CPU model alone
 * is not enough: a VM's CPU model may hide AVX-512 on the same name, and a
 * kernel cached where it had AVX-512 then dies of SIGILL.
 *
 * The same machinery compiles C++ for the SIMT harness (runtime/cuda_sim/
 * simt.h: CUDA C kernels built for the host): host_cxx_init names the C++
 * compiler ($CTIMM_CXX, else c++) and the options its compiles use.
 *
 * The compiler is run without a shell (posix_spawnp), in a process group of
 * its own, so that a terminal's Ctrl-C reaches ctimm and not cc; ctimm's
 * caller raises its stop flag (HostCompiler.stop) and the compile under way
 * ends: cc's group killed and reaped, its files removed, CT_INTERRUPTED.
 * Everything a compile writes, cc's own temporary files too (its TMPDIR),
 * is in one folder "<tmpdir>/ctimm-cc-<pid>-XXXXXX", removed afterwards; a
 * folder (or a "ctimm-so-<pid>-XXXXXX" object being loaded) left by a
 * killed process is removed by a later host_compiler_init once stale
 * (cache_temp_stale).
 */
#ifndef CTIMM_HOST_COMPILE_H
#define CTIMM_HOST_COMPILE_H

#include <signal.h>

#include "codegen/units.h"
#include "ir/cache.h"

/* No FMA contraction: KIR_EXACT kernels round as the ref kernels do. */
#define HOST_CC_OPTIONS "-O3 -march=native -ffp-contract=off -fno-math-errno -fopenmp -shared -fPIC"

/* The compiler's identity, read once (host_compiler_init). */
typedef struct HostCompiler {
    char cc[256];        /* the program: $CTIMM_CC (a name found in PATH, or a path), else "cc" */
    int cxx;             /* C++ (host_cxx_init) rather than C */
    char options[256];   /* of every compile: HOST_CC_OPTIONS, or host_cxx_init's */
    char version[256];   /* first line of `cc --version` */
    char target[400];    /* host_target_name's */
    char tmpdir[256];    /* where sources and objects are written: $TMPDIR or /tmp */
    /* The caller's stop flag (its SIGINT/SIGTERM handler raises it), or
     * NULL: once raised, a compile under way ends and none starts. */
    const volatile sig_atomic_t *stop;
    /* Set by the caller: a loaded object stays on disk under tmpdir until
     * host_module_close, so that a sanitizer's report names its functions. */
    int keep_objects;
} HostCompiler;

typedef struct HostModule {
    void *dl;
    char path[300]; /* the object on disk while loaded (keep_objects), else "" */
} HostModule;

/* A rendered host kernel: args[b] is the memory of its buffer b. */
typedef void (*HostKernelFn)(void *const *args);

/* Finds the compiler, names the target and removes stale temporary files
 * under tmpdir. stop is NULL: the caller sets it. */
int host_compiler_init(HostCompiler *hc, CtErr *err);
/* The C++ compiler, $CTIMM_CXX else "c++", compiling with options; its
 * target named from its predefined macros under those options. */
int host_cxx_init(HostCompiler *hc, const char *options, CtErr *err);
/* "host-<machine>-<cpu model>-isa<16 hex digits>": the digits hash the
 * compiler's predefined macros, macros (`cc -dM -E` output, one #define a
 * line, in any order). */
void host_target_name(const char *machine, const char *cpu_model, const char *macros, char *out, size_t cap);
/* Compiles (or finds in the cache) source with hc->options and loads it into *m. On a
 * compile error the message holds the compiler's output; CT_INTERRUPTED
 * when hc->stop ended it. */
int host_compile(const HostCompiler *hc, KernelCache *cache, const char *source, HostModule *m, CtErr *err);
/* Every unit of u compiled (or found in the cache) and loaded into
 * mods[unit], the units in parallel (codegen/units.h). On failure every
 * module is closed and err holds the lowest failing unit's message;
 * CT_INTERRUPTED when hc->stop ended a compile. */
int host_compile_units(const HostCompiler *hc, KernelCache *cache, const KernelUnits *u, HostModule *mods, CtErr *err);
/* Kernel ct_k<launch> of the module, or NULL. */
HostKernelFn host_kernel(const HostModule *m, int launch);
void host_module_close(HostModule *m);

#endif
