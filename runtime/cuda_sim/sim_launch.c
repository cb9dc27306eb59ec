/* Contract: sim_launch runs every thread of every block of the grid once,
 * blocks one after another in an order drawn from the launch's seed; in a
 * block, phases: every thread that can run does (in an order drawn from
 * the seed) until it exits or waits at a barrier or warp operation; then
 * the warp operations all of whose lanes arrived complete, else the
 * barrier when every live thread reached it; a block where nothing can go
 * on, or whose barrier some thread exited before, fails the launch. Shared
 * memory reads 0xFF bytes at the start of every block. */
#define _GNU_SOURCE /* _setjmp, _longjmp */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_sim/sim_internal.h"
#include "runtime/cuda_sim/sim_warp.h"

#define MAX_BLOCK_THREADS 1024u
/* what a block of sm_90 may have, static and dynamic together */
#define MAX_SHARED_BYTES (227u << 10)
/* the shared memory every block starts with: NaN as a float, double, half
 * or bfloat16, -1 as an integer */
#define SHARED_POISON 0xFF

/* One launch under way. */
typedef struct SimRun {
    SimModule *m;
    const char *kernel;
    SimEntry entry;
    void **params;
    CtSimCtx *ctx;
    unsigned int n;    /* threads per block */
    CtSimDim *tidx;    /* [n]: each thread's threadIdx */
    SimLane *lane;     /* [n] */
    SimFiber **fiber;  /* [n]: the fiber of a thread under way, else NULL */
    unsigned int *ready, nready;
    uint64_t rng;
    SimSched sched;
    unsigned int cur;  /* the thread running */
    int failed;
    CtErr *err;
    jmp_buf abort;     /* a failure inside a kernel run without fibers */
} SimRun;

static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle(unsigned int *a, unsigned int n, uint64_t *s)
{
    for (unsigned int i = n; i > 1; i--) {
        unsigned int j = (unsigned int)(next_rand(s) % i), t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* An order of the blocks: a bijection of [0, 2^k) drawn from the seed,
 * the values past the grid skipped (no table: grids reach 2^31 blocks). */
typedef struct BlockOrder {
    uint64_t mask, a1, c1, a2, c2;
    int shift;
} BlockOrder;

static BlockOrder block_order(uint64_t blocks, uint64_t seed)
{
    BlockOrder o = {0};
    int k = 0;
    while (k < 64 && (1ull << k) < blocks)
        k++;
    o.mask = k == 64 ? ~0ull : (1ull << k) - 1;
    o.shift = k / 2 + 1;
    o.a1 = next_rand(&seed) | 1, o.c1 = next_rand(&seed);
    o.a2 = next_rand(&seed) | 1, o.c2 = next_rand(&seed);
    return o;
}

static uint64_t block_at(const BlockOrder *o, uint64_t i)
{
    uint64_t x = (i * o->a1 + o->c1) & o->mask;
    x ^= x >> o->shift;
    return (x * o->a2 + o->c2) & o->mask;
}

/* "kernel K, block (x,y,z), thread (x,y,z)" */
static void where(const SimRun *r, char *out, size_t cap)
{
    const CtSimDim *b = &r->ctx->block_idx, *t = &r->tidx[r->cur];
    snprintf(out, cap, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", r->kernel, b->x, b->y, b->z, t->x,
                    t->y, t->z);
}

/* The running thread failed: the launch ends and the thread never resumes. */
__attribute__((noreturn, format(printf, 2, 3))) static void thread_fail(SimRun *r, const char *fmt, ...)
{
    char at[200], what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    where(r, at, sizeof at);
    ct_fail(r->err, "%s: %s", at, what);
    r->failed = 1;
    if (!r->m->fibers)
        _longjmp(r->abort, 1);
    sim_fiber_yield(r->fiber[r->cur]);
    ct_abort(__FILE__, __LINE__, "a failed thread resumed"); /* sim_launch abandons its fiber */
}

/* A thread waits (state) until the scheduler releases it; returns its result. */
static unsigned long long wait_here(SimRun *r, int state, int op, unsigned int mask, unsigned long long v, int arg,
                                    int width)
{
    unsigned int t = r->cur;
    if (!r->m->fibers)
        thread_fail(r, "%s in a kernel run without fibers (its module's source names no barrier or warp operation)",
                    state == SIM_AT_BARRIER ? "a barrier" : sim_warp_op_name(op));
    r->lane[t] = (SimLane){.state = state, .op = op, .mask = mask, .val = v, .arg = arg, .width = width};
    sim_fiber_yield(r->fiber[t]);
    return r->lane[t].res;
}

static unsigned long long cb_warp(CtSimCtx *c, int op, unsigned int mask, unsigned long long v, int arg, int width)
{
    SimRun *r = c->run;
    CtErr e;
    if (op < 0 || op >= CT_SIM_NWARP_OPS)
        thread_fail(r, "unknown warp operation %d (a module built for another harness?)", op);
    if (sim_warp_check(op, mask, width, (int)(r->cur % 32), &e))
        thread_fail(r, "%s", e.msg);
    return wait_here(r, SIM_AT_WARP, op, mask, v, arg, width);
}

static int cb_barrier(CtSimCtx *c, int op, int pred)
{
    return (int)wait_here(c->run, SIM_AT_BARRIER, op, 0, (unsigned long long)pred, 0, 0);
}

static unsigned int cb_active(CtSimCtx *c)
{
    SimRun *r = c->run;
    unsigned int first = r->cur & ~31u, mask = 0;
    for (unsigned int i = first; i < r->n && i < first + 32; i++)
        mask |= (unsigned int)(r->lane[i].state != SIM_EXITED) << (i - first);
    return mask;
}

static void cb_trap(CtSimCtx *c) { thread_fail(c->run, "__trap()"); }

static void thread_main(void *arg)
{
    SimRun *r = arg;
    r->entry(r->params);
}

static void run_straight(SimRun *r)
{
    for (unsigned int k = 0; k < r->n; k++) {
        unsigned int t = r->ready[k];
        r->cur = t;
        r->ctx->thread_idx = r->tidx[t];
        r->entry(r->params);
        r->lane[t].state = SIM_EXITED;
    }
}

/* A block of a module without barriers: each thread straight through. */
static int block_straight(SimRun *r)
{
    if (_setjmp(r->abort))
        return -1;
    run_straight(r);
    return 0;
}

/* The fibers of threads under way abandoned: the launch failed. */
static int abandon(SimRun *r)
{
    for (unsigned int t = 0; t < r->n; t++)
        if (r->fiber[t]) {
            sim_fiber_put(&r->m->pool, r->fiber[t], 1);
            r->fiber[t] = NULL;
        }
    return -1;
}

/* Runs the ready threads, each until it exits or waits; counts exits. */
static int run_phase(SimRun *r, unsigned int *live, unsigned int *first_exit)
{
    shuffle(r->ready, r->nready, &r->rng);
    for (unsigned int k = 0; k < r->nready; k++) {
        unsigned int t = r->ready[k];
        int done;
        r->cur = t;
        r->ctx->thread_idx = r->tidx[t];
        if (r->fiber[t]) {
            done = sim_fiber_resume(r->fiber[t]);
        } else {
            if (!(r->fiber[t] = sim_fiber_get(&r->m->pool, &r->sched, r->err)))
                return -1;
            done = sim_fiber_start(r->fiber[t], thread_main, r);
        }
        if (r->failed)
            return -1;
        if (done) {
            r->lane[t].state = SIM_EXITED;
            sim_fiber_put(&r->m->pool, r->fiber[t], 0);
            r->fiber[t] = NULL;
            --*live;
            if (*first_exit == UINT_MAX)
                *first_exit = t;
        }
    }
    r->nready = 0;
    return 0;
}

/* Completes the warp operations whose lanes all arrived: their lanes ready. */
static int release_warps(SimRun *r)
{
    for (unsigned int w = 0; w * 32 < r->n; w++) {
        CtErr e;
        unsigned int n = r->n - w * 32 < 32 ? r->n - w * 32 : 32;
        long long done = sim_warp_complete(&r->lane[w * 32], (int)n, &e);
        if (done < 0) {
            const CtSimDim *b = &r->ctx->block_idx;
            return ct_fail(r->err, "kernel %s, block (%u,%u,%u), warp %u: %s", r->kernel, b->x, b->y, b->z, w,
                           e.msg);
        }
        for (unsigned int i = 0; i < n; i++)
            if (done >> i & 1) {
                r->lane[w * 32 + i].state = SIM_READY;
                r->ready[r->nready++] = w * 32 + i;
            }
    }
    return 0;
}

/* Every live thread is at the barrier: its reductions, and all ready. */
static void release_barrier(SimRun *r, unsigned int live)
{
    unsigned int count = 0;
    for (unsigned int t = 0; t < r->n; t++)
        count += r->lane[t].state == SIM_AT_BARRIER && r->lane[t].val;
    for (unsigned int t = 0; t < r->n; t++) {
        SimLane *l = &r->lane[t];
        if (l->state != SIM_AT_BARRIER)
            continue;
        l->res = l->op == CT_SIM_SYNC_COUNT ? count
                 : l->op == CT_SIM_SYNC_AND ? count == live
                 : l->op == CT_SIM_SYNC_OR  ? count > 0
                                            : 0;
        l->state = SIM_READY;
        r->ready[r->nready++] = t;
    }
}

/* Nothing can go on: why, for the message. */
static int stuck(SimRun *r, unsigned int at_barrier)
{
    const CtSimDim *b = &r->ctx->block_idx;
    for (unsigned int t = 0; t < r->n; t++) {
        const SimLane *l = &r->lane[t];
        if (l->state != SIM_AT_WARP)
            continue;
        unsigned int first = t & ~31u;
        for (unsigned int i = 0; i < 32 && first + i < r->n; i++)
            if (l->mask >> i & 1 && r->lane[first + i].state == SIM_AT_BARRIER) {
                const CtSimDim *a = &r->tidx[t], *o = &r->tidx[first + i];
                return ct_fail(r->err, "kernel %s, block (%u,%u,%u): thread (%u,%u,%u) waits at %s (mask 0x%08x) "
                                       "for thread (%u,%u,%u), which waits at __syncthreads with %u others: "
                                       "neither can go on", r->kernel, b->x, b->y, b->z, a->x, a->y, a->z,
                               sim_warp_op_name(l->op), l->mask, o->x, o->y, o->z, at_barrier - 1);
            }
    }
    return ct_fail(r->err, "kernel %s, block (%u,%u,%u): no thread can go on", r->kernel, b->x, b->y, b->z);
}

static int block_fibers(SimRun *r)
{
    unsigned int live = r->n, first_exit = UINT_MAX;
    for (;;) {
        if (run_phase(r, &live, &first_exit))
            return abandon(r);
        if (release_warps(r))
            return abandon(r);
        if (r->nready)
            continue;
        if (!live)
            return 0;
        unsigned int at_barrier = 0;
        for (unsigned int t = 0; t < r->n; t++)
            at_barrier += r->lane[t].state == SIM_AT_BARRIER;
        if (at_barrier < live) {
            stuck(r, at_barrier);
            return abandon(r);
        }
        if (first_exit != UINT_MAX) {
            const CtSimDim *b = &r->ctx->block_idx, *x = &r->tidx[first_exit];
            ct_fail(r->err, "kernel %s, block (%u,%u,%u): thread (%u,%u,%u) exited while %u threads wait at "
                            "__syncthreads (a barrier every thread of the block must reach)", r->kernel, b->x, b->y,
                    b->z, x->x, x->y, x->z, at_barrier);
            return abandon(r);
        }
        release_barrier(r, live);
    }
}

static int run_block(SimRun *r, uint64_t seed, uint64_t block)
{
    for (unsigned int t = 0; t < r->n; t++) {
        r->lane[t] = (SimLane){.state = SIM_READY};
        r->ready[t] = t;
    }
    r->nready = r->n;
    r->rng = seed ^ (block * 0xD1B54A32D192ED03ull);
    next_rand(&r->rng);
    if (!r->m->fibers) {
        shuffle(r->ready, r->n, &r->rng);
        return block_straight(r);
    }
    return block_fibers(r);
}

static const SimKernel *find_kernel(const SimModule *m, const char *name)
{
    for (int i = 0; i < m->nkernels; i++)
        if (!strcmp(m->kernels[i].name, name))
            return &m->kernels[i];
    return NULL;
}

/* What cuLaunchKernel refuses. */
static int check_shape(const char *name, const unsigned int *g, const unsigned int *b, size_t shared, CtErr *err)
{
    if (b[0] > 1024 || b[1] > 1024 || b[2] > 64 || (uint64_t)b[0] * b[1] * b[2] > MAX_BLOCK_THREADS)
        return ct_fail(err, "kernel %s: block (%u,%u,%u) (at most 1024 threads, z at most 64)", name, b[0], b[1],
                       b[2]);
    if (g[0] > INT_MAX || g[1] > 65535 || g[2] > 65535)
        return ct_fail(err, "kernel %s: grid (%u,%u,%u) (y and z at most 65535)", name, g[0], g[1], g[2]);
    if (shared > MAX_SHARED_BYTES)
        return ct_fail(err, "kernel %s: %zu bytes of shared memory (a block has at most %u)", name, shared,
                       MAX_SHARED_BYTES);
    return 0;
}

int sim_launch(SimModule *m, const char *name, const SimLaunch *l, void **params, CtErr *err)
{
    const SimKernel *k = find_kernel(m, name);
    if (!k)
        return ct_fail(err, "kernel %s is not one of the module's %d", name, m->nkernels);
    unsigned int g[3], b[3];
    for (int d = 0; d < 3; d++) {
        g[d] = l->grid[d] ? l->grid[d] : 1;
        b[d] = l->block[d] ? l->block[d] : 1;
    }
    size_t static_shared = (size_t)(m->ctx.shared_end - m->ctx.shared_begin);
    if (check_shape(name, g, b, static_shared + l->dyn_shared, err))
        return -1;
    unsigned int n = b[0] * b[1] * b[2];
    SimRun r = {.m = m, .kernel = k->name, .entry = k->entry, .params = params, .ctx = &m->ctx, .n = n, .err = err};
    r.tidx = malloc(sizeof *r.tidx * n);
    r.lane = malloc(sizeof *r.lane * n);
    r.fiber = calloc(n, sizeof *r.fiber);
    r.ready = malloc(sizeof *r.ready * n);
    void *dyn = NULL;
    int rc = -1;
    if (!r.tidx || !r.lane || !r.fiber || !r.ready || (l->dyn_shared && posix_memalign(&dyn, 16, l->dyn_shared))) {
        ct_fail(err, "kernel %s: out of memory for a block of %u threads", name, n);
        goto free_run;
    }
    for (unsigned int t = 0; t < n; t++)
        r.tidx[t] = (CtSimDim){t % b[0], t / b[0] % b[1], t / (b[0] * b[1])};
    pthread_mutex_lock(&m->mu);
    CtSimCtx *c = &m->ctx;
    c->block_dim = (CtSimDim){b[0], b[1], b[2]};
    c->grid_dim = (CtSimDim){g[0], g[1], g[2]};
    c->dyn_shared = dyn;
    c->warp = cb_warp;
    c->barrier = cb_barrier;
    c->active = cb_active;
    c->trap = cb_trap;
    c->run = &r;
    uint64_t blocks = (uint64_t)g[0] * g[1] * g[2], seed = l->seed;
    BlockOrder order = block_order(blocks, seed);
    rc = 0;
    for (uint64_t i = 0; i <= order.mask && rc == 0; i++) {
        uint64_t id = block_at(&order, i);
        if (id >= blocks)
            continue;
        c->block_idx = (CtSimDim){(unsigned int)(id % g[0]), (unsigned int)(id / g[0] % g[1]),
                                  (unsigned int)(id / ((uint64_t)g[0] * g[1]))};
        memset(c->shared_begin, SHARED_POISON, static_shared);
        if (dyn)
            memset(dyn, SHARED_POISON, l->dyn_shared);
        rc = run_block(&r, seed, id);
    }
    c->run = NULL;
    c->dyn_shared = NULL;
    pthread_mutex_unlock(&m->mu);
free_run:
    free(dyn);
    free(r.tidx);
    free(r.lane);
    free(r.fiber);
    free(r.ready);
    return rc;
}
