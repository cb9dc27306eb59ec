/* Contract: units_make puts every kernel in exactly one unit, units in
 * launch order, by the kernels alone; units_compile runs the callback once
 * per unit on a pool of threads and returns after joining them all. */
#include "codegen/units.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "codegen/render.h"

int units_split(const int *w, int n, int target, int *unit)
{
    CT_ASSERT(target > 0);
    if (n == 0)
        return 0;
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += w[i];
    int64_t slots = (total + target - 1) / target, before = 0;
    /* item i goes to the slot holding its middle: runs are contiguous and as
     * even as whole items allow; an item heavier than a slot can leave the
     * slots it spans empty, and only slots holding items become runs */
    int runs = 0, last = -1;
    for (int i = 0; i < n; i++) {
        int slot = (int)((2 * before + w[i]) * slots / (2 * total));
        if (slot != last)
            runs++;
        last = slot;
        unit[i] = runs - 1;
        before += w[i];
    }
    return runs;
}

void units_make(const KirKernel *k, int nlaunches, int loops_per_unit, int cuda, KernelUnits *u)
{
    u->nlaunches = nlaunches;
    u->nkernels = 0;
    u->unit = malloc(sizeof *u->unit * (size_t)(nlaunches + 1));
    int *w = malloc(sizeof *w * (size_t)(nlaunches + 1)), *of = malloc(sizeof *of * (size_t)(nlaunches + 1));
    CT_ASSERT(u->unit && w && of);
    for (int l = 0; l < nlaunches; l++) {
        u->unit[l] = -1;
        if (k[l].nloops)
            w[u->nkernels++] = k[l].nloops;
    }
    u->n = units_split(w, u->nkernels, loops_per_unit, of);
    u->src = calloc((size_t)u->n + 1, sizeof *u->src);
    CT_ASSERT(u->src != NULL);
    for (int j = 0; j < u->n; j++)
        (cuda ? render_cuda_prelude : render_c_prelude)(&u->src[j]);
    for (int l = 0, i = 0; l < nlaunches; l++)
        if (k[l].nloops) {
            u->unit[l] = of[i++];
            (cuda ? render_cuda_kernel : render_c_kernel)(&k[l], &u->src[u->unit[l]]);
        }
    free(of);
    free(w);
}

void units_free(KernelUnits *u)
{
    for (int j = 0; j < u->n; j++)
        buf_free(&u->src[j]);
    free(u->src);
    free(u->unit);
    u->src = NULL;
    u->unit = NULL;
    u->n = u->nkernels = u->nlaunches = 0;
}

/* The pool's shared state. */
typedef struct Pool {
    const KernelUnits *u;
    UnitCompileFn compile;
    void *ctx;
    pthread_mutex_t mu;
    int next;   /* the next unit to take */
    int failed; /* the lowest unit that failed, or u->n */
    CtErr err;  /* its message */
} Pool;

static void *work(void *arg)
{
    Pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int j = p->failed < p->u->n ? p->u->n : p->next++;
        pthread_mutex_unlock(&p->mu);
        if (j >= p->u->n)
            return NULL;
        CtErr err;
        if (p->compile(p->ctx, j, p->u->src[j].s, &err)) {
            pthread_mutex_lock(&p->mu);
            if (j < p->failed) {
                p->failed = j;
                p->err = err;
            }
            pthread_mutex_unlock(&p->mu);
        }
    }
}

int units_compile(const KernelUnits *u, UnitCompileFn compile, void *ctx, CtErr *err)
{
    Pool p = {.u = u, .compile = compile, .ctx = ctx, .mu = PTHREAD_MUTEX_INITIALIZER, .failed = u->n};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = (int)(cpus < 1 ? 1 : cpus < u->n ? cpus : u->n), started = 0;
    pthread_t *th = malloc(sizeof *th * (size_t)(nthreads + 1));
    CT_ASSERT(th != NULL);
    /* a thread that cannot be started leaves its share to the others */
    for (int t = 1; t < nthreads; t++)
        if (pthread_create(&th[started], NULL, work, &p) == 0)
            started++;
    work(&p);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    free(th);
    if (p.failed < u->n) {
        if (err)
            *err = p.err;
        return -1;
    }
    return 0;
}
