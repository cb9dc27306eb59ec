/*
 * Fibers for the SIMT harness: each CUDA thread of a block runs on a stack
 * of its own, so that a barrier or a warp operation can suspend it until
 * the rest of its block or warp arrive.
 *
 * A fiber is a stack with a loop at its base that runs one job (a
 * function) after another and parks in between; the harness gives a
 * parked fiber the next thread, so a block of threads that never wait
 * needs one fiber, and one that waits at a barrier as many fibers as it
 * has threads. Entering a new stack the first time takes a ucontext
 * (makecontext, setcontext); every switch after that is the compiler's
 * __builtin_setjmp / __builtin_longjmp pair, which saves a frame and a
 * stack pointer, no signal mask (glibc's swapcontext makes a sigprocmask
 * system call per switch, too slow for a million threads) and, unlike
 * libc's _longjmp, is not intercepted by AddressSanitizer (whose handler
 * makes a sigaltstack system call and clears the shadow of the stack left,
 * each switch: it made the sanitizer build's cuda-sim tests several times
 * slower). Under AddressSanitizer every switch is announced to it
 * (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber), so
 * it knows which stack is current and reports no false stack errors.
 *
 * A fiber is used by one scheduler (SimSched, on some OS thread) at a time.
 */
#ifndef CTIMM_SIM_FIBER_H
#define CTIMM_SIM_FIBER_H

#include <stddef.h>

#include "ir/status.h"

/* __builtin_setjmp's buffer: the frame, the resume address, the stack pointer */
typedef void *SimCtx[5];

/* The scheduler's side: where a fiber that yields or finishes returns to. */
typedef struct SimSched {
    SimCtx ctx;
    void *asan_fake;         /* ASan's fake stack of the scheduler while a fiber runs */
    const void *asan_bottom; /* the scheduler's stack, as ASan reports it on each switch */
    size_t asan_size;
} SimSched;

typedef struct SimFiber SimFiber;

typedef struct SimFiberPool {
    SimFiber **parked; /* ready for a job */
    int nparked;
    SimFiber **all; /* every fiber made, for sim_fiber_pool_free */
    int nall, cap;
} SimFiberPool;

typedef void (*SimFiberFn)(void *arg);

/* A parked fiber of p (a new one when none), for scheduler s. Fails when
 * the stack cannot be mapped. */
SimFiber *sim_fiber_get(SimFiberPool *p, SimSched *s, CtErr *err);
/* f parked again: its job finished (sim_fiber_run returned 1), or it was
 * abandoned in the middle of a job (a failed launch) and is reset first. */
void sim_fiber_put(SimFiberPool *p, SimFiber *f, int abandoned);
void sim_fiber_pool_free(SimFiberPool *p);

/* Starts fn(arg) on a parked fiber; returns 1 when fn returned, 0 when it
 * yielded (sim_fiber_yield). */
int sim_fiber_start(SimFiber *f, SimFiberFn fn, void *arg);
/* Resumes a fiber that yielded; the same return. */
int sim_fiber_resume(SimFiber *f);
/* From inside a job: back to the scheduler until resumed. */
void sim_fiber_yield(SimFiber *f);

#endif
