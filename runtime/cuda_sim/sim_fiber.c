/* Contract: a fiber runs its jobs on its own stack, one after another,
 * handing control back to its scheduler when a job yields or finishes;
 * only the first entry into a stack pays for a ucontext. */
#define _GNU_SOURCE /* MAP_STACK, MAP_NORESERVE */
#include "runtime/cuda_sim/sim_fiber.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "runtime/cuda_sim/sim_internal.h"

#if SIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
/* ASan's frames are a few times larger */
#define STACK_BYTES (1u << 20)
#define SWITCH_START(fake, bottom, size) __sanitizer_start_switch_fiber(fake, bottom, size)
#define SWITCH_FINISH(fake, bottom, size) __sanitizer_finish_switch_fiber(fake, bottom, size)
#define STACK_CLEAN(p, n) __asan_unpoison_memory_region(p, n)
#else
/* the library kernels' largest frames hold a few KiB of row accumulators */
#define STACK_BYTES (256u << 10)
#define SWITCH_START(fake, bottom, size) ((void)0)
#define SWITCH_FINISH(fake, bottom, size) ((void)0)
#define STACK_CLEAN(p, n) ((void)0)
#endif

struct SimFiber {
    SimCtx ctx; /* where the fiber resumes */
    SimSched *sched;
    char *map, *stack; /* the mapping: a guard page, then the stack */
    size_t map_bytes, stack_bytes;
    SimFiberFn fn;
    void *arg;
    int done;        /* fn returned */
    void *asan_fake; /* ASan's fake stack of the fiber while it is suspended */
};

/* The functions that switch stacks are not instrumented: AddressSanitizer
 * calls __asan_handle_no_return before every call that does not return
 * (the compiler finds jump's), the cost these switches avoid (sim_fiber.h). */
#define SWITCHES __attribute__((no_sanitize_address))

/* Resumes the context saved in `to`; in a function of its own, as
 * __builtin_longjmp must not be in the function of its __builtin_setjmp. */
SWITCHES __attribute__((noinline)) static void jump(SimCtx to)
{
    __builtin_longjmp(to, 1);
}

SWITCHES __attribute__((noinline)) void sim_fiber_yield(SimFiber *f)
{
    if (!__builtin_setjmp(f->ctx)) {
        SWITCH_START(&f->asan_fake, f->sched->asan_bottom, f->sched->asan_size);
        jump(f->sched->ctx);
    }
    /* f->sched is whichever scheduler resumed the fiber */
    SWITCH_FINISH(f->asan_fake, &f->sched->asan_bottom, &f->sched->asan_size);
}

/* The loop at the base of every stack: park, run the job given, park... */
static void fiber_main(unsigned int lo, unsigned int hi)
{
    SimFiber *f = (SimFiber *)(uintptr_t)(((uint64_t)hi << 32) | lo);
    SWITCH_FINISH(NULL, &f->sched->asan_bottom, &f->sched->asan_size);
    for (;;) {
        sim_fiber_yield(f);
        f->fn(f->arg);
        f->done = 1;
    }
}

/* Starts fiber_main on f's stack from scratch; returns once it parks. */
SWITCHES static void enter(SimFiber *f)
{
    ucontext_t uc;
    getcontext(&uc);
    uc.uc_stack.ss_sp = f->stack;
    uc.uc_stack.ss_size = f->stack_bytes;
    uc.uc_link = NULL;
    uint64_t p = (uintptr_t)f; /* makecontext passes ints */
    makecontext(&uc, (void (*)(void))fiber_main, 2, (unsigned int)p, (unsigned int)(p >> 32));
    if (!__builtin_setjmp(f->sched->ctx)) {
        SWITCH_START(&f->sched->asan_fake, f->stack, f->stack_bytes);
        setcontext(&uc);
    }
    SWITCH_FINISH(f->sched->asan_fake, NULL, NULL);
}

SWITCHES int sim_fiber_resume(SimFiber *f)
{
    if (!__builtin_setjmp(f->sched->ctx)) {
        SWITCH_START(&f->sched->asan_fake, f->stack, f->stack_bytes);
        jump(f->ctx);
    }
    SWITCH_FINISH(f->sched->asan_fake, NULL, NULL);
    return f->done;
}

int sim_fiber_start(SimFiber *f, SimFiberFn fn, void *arg)
{
    f->fn = fn;
    f->arg = arg;
    f->done = 0;
    return sim_fiber_resume(f);
}

SimFiber *sim_fiber_get(SimFiberPool *p, SimSched *s, CtErr *err)
{
    if (p->nparked) {
        SimFiber *f = p->parked[--p->nparked];
        f->sched = s;
        return f;
    }
    if (p->nall == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        SimFiber **all = realloc(p->all, sizeof *all * (size_t)cap), **parked = NULL;
        if (all) {
            p->all = all;
            parked = realloc(p->parked, sizeof *parked * (size_t)cap);
        }
        if (!parked) {
            ct_fail(err, "out of memory for %d fibers", cap);
            return NULL;
        }
        p->parked = parked;
        p->cap = cap;
    }
    SimFiber *f = calloc(1, sizeof *f);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *map = MAP_FAILED;
    if (f)
        map = mmap(NULL, STACK_BYTES + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (map == MAP_FAILED) {
        ct_fail(err, "cannot map a %u KiB fiber stack (fiber %d): %s", STACK_BYTES >> 10, p->nall + 1,
                f ? strerror(errno) : "out of memory");
        free(f);
        return NULL;
    }
    /* an overflow faults on the guard page instead of writing over a neighbour */
    mprotect(map, page, PROT_NONE);
    f->map = map;
    f->map_bytes = STACK_BYTES + page;
    f->stack = map + page;
    f->stack_bytes = STACK_BYTES;
    f->sched = s;
    enter(f);
    p->all[p->nall++] = f;
    return f;
}

void sim_fiber_put(SimFiberPool *p, SimFiber *f, int abandoned)
{
    if (abandoned) {
        /* the frames of the abandoned job go; ASan forgets their redzones */
        STACK_CLEAN(f->stack, f->stack_bytes);
        enter(f);
    }
    p->parked[p->nparked++] = f;
}

void sim_fiber_pool_free(SimFiberPool *p)
{
    for (int i = 0; i < p->nall; i++) {
        /* a later mapping at this address must not inherit the frames' poison */
        STACK_CLEAN(p->all[i]->stack, p->all[i]->stack_bytes);
        munmap(p->all[i]->map, p->all[i]->map_bytes);
        free(p->all[i]);
    }
    free(p->all);
    free(p->parked);
    memset(p, 0, sizeof *p);
}
