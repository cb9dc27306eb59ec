/*
 * What the files of the SIMT harness share: a loaded module (made by
 * sim_module.c, run by sim_launch.c) and whether this build runs under
 * AddressSanitizer (then the modules are compiled with it too).
 */
#ifndef CTIMM_SIM_INTERNAL_H
#define CTIMM_SIM_INTERNAL_H

#include <pthread.h>

#include "runtime/cuda_sim/sim_abi.h"
#include "runtime/cuda_sim/sim_fiber.h"
#include "runtime/cuda_sim/simt.h"

#if defined(__SANITIZE_ADDRESS__)
#define SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_ASAN 1
#endif
#endif
#ifndef SIM_ASAN
#define SIM_ASAN 0
#endif

/* A kernel's launch entry in the module: the kernel, for the thread the
 * context names, with its arguments unpacked from kernelParams. */
typedef void (*SimEntry)(void **params);

typedef struct SimKernel {
    char *name;
    SimEntry entry;
} SimKernel;

struct SimModule {
    void *so; /* the loaded object: sim_module.c's HostModule */
    void *dl;
    SimKernel *kernels;
    int nkernels;
    /* The source calls barriers or warp operations: its threads run as
     * fibers. Without, each thread runs straight through, in turn. */
    int fibers;
    CtSimCtx ctx;       /* the module's (ct_sim_bind) */
    pthread_mutex_t mu; /* one launch at a time: the __shared__ variables are the module's */
    SimFiberPool pool;  /* under mu */
};

/* Whether the text calls anything that can make a thread wait for others. */
int sim_source_waits(const char *source);

#endif
