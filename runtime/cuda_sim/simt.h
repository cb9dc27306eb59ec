/*
 * The SIMT harness: CUDA C kernels run on the host, so GPU kernels are
 * tested without a GPU (issue 30). A kernel source (the NVRTC text the
 * cuda target generates, or the library kernels) is compiled for the host
 * by the C++ compiler behind a prelude (runtime/cuda_sim/sim_prelude.h)
 * that gives it CUDA's built-ins: blockIdx/threadIdx/blockDim/gridDim,
 * __shared__, __syncthreads, warp shuffles and votes, atomics, half and
 * __nv_bfloat16, vector types. The compiler is $CTIMM_CXX, else c++.
 *
 * A launch runs the grid's blocks one after another (in an order drawn
 * from the launch's seed) and each block's threads as fibers, so a barrier
 * really separates phases (a module whose source names no barrier or warp
 * operation runs each thread straight through instead); inside a phase
 * the threads run in an order drawn from the seed (two seeds that give
 * different results expose a missing barrier); shared memory is poisoned
 * before every block (0xFF bytes: NaN as a float, double, half or
 * bfloat16, -1 as an integer) so a read before a write shows.
 *
 * A module runs one launch at a time (its __shared__ variables are its
 * own); launches of different modules may run on different threads.
 *
 * Out-of-bounds global accesses: in a build with AddressSanitizer the
 * modules are compiled with it too, and sim_guard/sim_allow poison the
 * device memory around a launch's buffers (the executor's job), so a
 * kernel touching anything else stops with ASan's report.
 */
#ifndef CTIMM_SIMT_H
#define CTIMM_SIMT_H

#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"

typedef struct SimModule SimModule;

typedef struct SimLaunch {
    unsigned grid[3], block[3]; /* 0 counts as 1 */
    size_t dyn_shared;          /* bytes of dynamic shared memory (ct_dyn_shared() in the kernel) */
    uint64_t seed;              /* the order of threads inside each phase */
} SimLaunch;

/* Compiles `source` (CUDA C) for the host with a launch entry for each of
 * the kernels names[0..n) (each an extern "C" __global__ function of the
 * source), through the kernel cache, and loads it. */
int sim_module_build(const char *source, const char *const *names, int n, SimModule **out, CtErr *err);
void sim_module_free(SimModule *m);

/* Runs kernel `name` of m over the launch's grid; params[k] points at its
 * argument k (cuLaunchKernel's kernelParams). Fails for an unknown name, a
 * block over 1024 threads, or a barrier some threads of a block never
 * reach (CUDA leaves it undefined; here it is an error naming the kernel
 * and block). */
int sim_launch(SimModule *m, const char *name, const SimLaunch *l, void **params, CtErr *err);

/* Device memory [p, p + n) made unreadable (sim_guard) or readable again
 * (sim_allow) under AddressSanitizer; no-ops in other builds. ASan works
 * in 8-byte granules: a range allowed from inside one makes that granule's
 * bytes before it readable too (runtime/cuda_sim/sim_guard.c). */
void sim_guard(void *p, size_t n);
void sim_allow(void *p, size_t n);
/* Whether this build catches out-of-bounds accesses (AddressSanitizer). */
int sim_checks_bounds(void);

#endif
