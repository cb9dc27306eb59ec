/* Contract: units_make puts every distinct kernel in exactly one unit,
 * units in launch order, by the kernels alone; units_compile runs the callback once
 * per unit on a pool of threads and returns after joining them all. */
#include "codegen/units.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

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

/* The text of kernel k under a name shared by all: what tells two
 * launches' kernels the same. */
static char *kernel_text(const KirKernel *k, int cuda)
{
    KirKernel anon = *k;
    CtBuf b = {0};
    anon.launch = 0;
    (cuda ? render_cuda_kernel : render_c_kernel)(&anon, &b);
    return b.s;
}

/* fn[l] for every launch: the first launch whose kernel has the same text,
 * through an open-addressing table of XXH3 hashes; -1 without a kernel. */
static int find_distinct(const KirKernel *k, int nlaunches, int cuda, int *fn)
{
    int size = 2, distinct = 0;
    while (size < 2 * nlaunches)
        size *= 2;
    int *slot = malloc(sizeof *slot * (size_t)size);
    char **text = calloc((size_t)nlaunches + 1, sizeof *text);
    CT_ASSERT(slot && text);
    for (int i = 0; i < size; i++)
        slot[i] = -1;
    for (int l = 0; l < nlaunches; l++) {
        fn[l] = -1;
        if (!k[l].nloops)
            continue;
        text[l] = kernel_text(&k[l], cuda);
        unsigned h = (unsigned)XXH3_64bits(text[l], strlen(text[l])) & (unsigned)(size - 1);
        while (slot[h] >= 0 && strcmp(text[slot[h]], text[l]))
            h = (h + 1) & (unsigned)(size - 1);
        if (slot[h] < 0) {
            slot[h] = l;
            distinct++;
        }
        fn[l] = slot[h];
    }
    for (int l = 0; l < nlaunches; l++)
        free(text[l]);
    free(text);
    free(slot);
    return distinct;
}

void units_make(const KirKernel *k, int nlaunches, int loops_per_unit, int cuda, KernelUnits *u)
{
    u->nlaunches = nlaunches;
    u->nkernels = 0;
    u->unit = malloc(sizeof *u->unit * (size_t)(nlaunches + 1));
    u->fn = malloc(sizeof *u->fn * (size_t)(nlaunches + 1));
    int *w = malloc(sizeof *w * (size_t)(nlaunches + 1)), *of = malloc(sizeof *of * (size_t)(nlaunches + 1));
    CT_ASSERT(u->unit && u->fn && w && of);
    u->ndistinct = find_distinct(k, nlaunches, cuda, u->fn);
    for (int l = 0, i = 0; l < nlaunches; l++) {
        u->unit[l] = -1;
        u->nkernels += k[l].nloops > 0;
        if (u->fn[l] == l)
            w[i++] = k[l].nloops;
    }
    u->n = units_split(w, u->ndistinct, loops_per_unit, of);
    u->src = calloc((size_t)u->n + 1, sizeof *u->src);
    CT_ASSERT(u->src != NULL);
    for (int j = 0; j < u->n; j++)
        (cuda ? render_cuda_prelude : render_c_prelude)(&u->src[j]);
    for (int l = 0, i = 0; l < nlaunches; l++) {
        if (u->fn[l] != l) {
            u->unit[l] = u->fn[l] >= 0 ? u->unit[u->fn[l]] : -1;
            continue;
        }
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
    free(u->fn);
    u->src = NULL;
    u->unit = u->fn = NULL;
    u->n = u->nkernels = u->ndistinct = u->nlaunches = 0;
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
    int interrupted;
    CtErr interrupted_err;
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
        int rc = p->compile(p->ctx, j, p->u->src[j].s, &err);
        if (rc) {
            pthread_mutex_lock(&p->mu);
            if (rc == CT_INTERRUPTED && !p->interrupted) {
                p->interrupted = 1;
                p->interrupted_err = err;
            }
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
    if (p.interrupted) {
        if (err)
            *err = p.interrupted_err;
        return CT_INTERRUPTED;
    }
    if (p.failed < u->n) {
        if (err)
            *err = p.err;
        return -1;
    }
    return 0;
}
