/* Contract: runtime/cpu/conv_choice.h. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "runtime/cpu/conv_choice.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ir/cache.h"
#include "ir/ops/pool_window.h"
#include "runtime/cpu/compiled.h"
#include "runtime/cpu/cpu.h"

enum { MODE_OWN, MODE_ONEDNN, MODE_AUTO };

static int conv_mode(int *mode, CtErr *err)
{
    const char *s = getenv("CTIMM_CONV");
    if (!s || !*s || !strcmp(s, "auto"))
        *mode = MODE_AUTO;
    else if (!strcmp(s, "onednn"))
        *mode = MODE_ONEDNN;
    else if (!strcmp(s, "own"))
        *mode = MODE_OWN;
    else
        return ct_fail(err, "CTIMM_CONV=%s: use auto, onednn or own", s);
    return 0;
}

static int is_conv(const Node *n)
{
    return n->op == CT_OP_conv2d || n->op == CT_OP_conv2d_grad_input || n->op == CT_OP_conv2d_grad_weight;
}

#ifdef CTIMM_HAVE_DNNL

static int is_pool(const Node *n)
{
    return n->op == CT_OP_max_pool2d || n->op == CT_OP_max_pool2d_grad || n->op == CT_OP_avg_pool2d ||
           n->op == CT_OP_avg_pool2d_grad;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct Timing {
    const Graph *g;
    const Node *n;
    void *dn; /* the primitive made for the timing, kept when oneDNN wins */
    void (*run)(void *dn, float *const *in, float *const *out);
} Timing;

static void run_conv(void *dn, float *const *in, float *const *out) { onednn_conv_run(dn, in, NULL, out); }
static void run_pool(void *dn, float *const *in, float *const *out) { onednn_pool_run(dn, in, out); }

static double time_run(const Timing *t, int dn, float *const *in, float *const *out)
{
    double t0 = now();
    if (dn)
        t->run(t->dn, in, out);
    else
        cpu_run_node(t->g, t->n, (void *const *)in, (void *const *)out, NULL);
    return now() - t0;
}

/* Each side's best of a few runs, after one unmeasured (first touch of the
 * buffers and scratch), the two sides alternating: machines like this VM
 * run in slow spells of seconds, and with each side's runs back to back a
 * spell could fall on one side only. */
static void time_pairs(const Timing *t, float *const *in, float *const *out, double *own, double *dn)
{
    *own = *dn = 1e30;
    time_run(t, 0, in, out);
    time_run(t, 1, in, out);
    for (int i = 0; i < 3; i++) {
        double a = time_run(t, 0, in, out), b = time_run(t, 1, in, out);
        *own = a < *own ? a : *own;
        *dn = b < *dn ? b : *dn;
        if (a + b > 0.1) /* a big convolution: one measured pair says enough */
            break;
    }
}

/* The operands of a timing, mapped and unmapped whole: freed to malloc,
 * tens of MiB would stay resident in its heap (its mmap threshold rises
 * with what is freed) and add to the step's peak. */
static float *map_floats(int64_t n)
{
    void *p = mmap(NULL, (size_t)n * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CT_ASSERT(p != MAP_FAILED);
    return p;
}

static int time_both(void *vctx, const CacheKeyParts *parts, void **blob, size_t *n, CtErr *err)
{
    (void)parts;
    (void)err;
    Timing *t = vctx;
    float *in[CT_MAX_IN] = {0}, *out[1];
    int64_t cnt[CT_MAX_IN + 1];
    unsigned seed = 12345u;
    for (int k = 0; k < t->n->nin; k++) {
        cnt[k] = shape_numel(&t->g->values[t->n->in[k]].type.shape);
        in[k] = map_floats(cnt[k]);
        for (int64_t i = 0; i < cnt[k]; i++) {
            seed = seed * 1103515245u + 12345u;
            in[k][i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
        }
    }
    cnt[CT_MAX_IN] = shape_numel(&t->g->values[t->n->out[0]].type.shape);
    out[0] = map_floats(cnt[CT_MAX_IN]);
    double own, dn;
    time_pairs(t, in, out, &own, &dn);
    for (int k = 0; k < t->n->nin; k++)
        munmap(in[k], (size_t)cnt[k] * sizeof(float));
    munmap(out[0], (size_t)cnt[CT_MAX_IN] * sizeof(float));
    char *b = malloc(1);
    CT_ASSERT(b != NULL);
    *b = dn < own ? 'd' : 'o';
    *blob = b;
    *n = 1;
    return 0;
}

/* Whether t's node runs on oneDNN: the cached choice, else timed now. The
 * key: the op, its operands' and output's shapes (and "nhwc" after those
 * stored channels-last), its attributes (a
 * convolution's first two operands and 7 attributes, as before pooling
 * took choices too, so that the cache's entries stay valid). */
static int choose(const Timing *t, KernelCache *cache, int *onednn, CtErr *err)
{
    const Graph *g = t->g;
    const Node *n = t->n;
    char key[320], target[320], model[256];
    int conv = is_conv(n), len = snprintf(key, sizeof key, "%s", op_def(n->op)->name);
    if (conv)
        len += snprintf(key + len, sizeof key - (size_t)len, " bias=%d", n->nin == 3);
    ValueId v[CT_MAX_IN + 1];
    int nv = conv ? 2 : n->nin;
    for (int k = 0; k < nv; k++)
        v[k] = n->in[k];
    v[nv++] = n->out[0];
    for (int k = 0; k < nv; k++) {
        const CtShape *s = &g->values[v[k]].type.shape;
        len += snprintf(key + len, sizeof key - (size_t)len, " [%lld,%lld,%lld,%lld]%s", (long long)s->d[0],
                        (long long)s->d[1], (long long)s->d[2], (long long)s->d[3],
                        cpu_stored_nhwc(g, v[k]) ? "nhwc" : "");
    }
    for (int k = 0; k < (conv ? 7 : POOL_COUNT_PAD + 1); k++)
        len += snprintf(key + len, sizeof key - (size_t)len, " %lld", (long long)n->iattr[k]);
    host_cpu_model(model, sizeof model);
    snprintf(target, sizeof target, "host %s, %d threads", model, omp_get_max_threads());
    CacheKeyParts parts = {.source = key, .target = target, .compiler = "onednn", .compiler_version = onednn_version(),
                           .options = "own-vs-onednn", .codegen_version = "ctimm-conv-choice-4"};
    const void *blob;
    size_t len_blob;
    if (cache_get(cache, &parts, time_both, (void *)t, &blob, &len_blob, err))
        return -1;
    if (len_blob != 1)
        return ct_fail(err, "cached oneDNN choice for %s has %zu bytes, not 1", key, len_blob);
    *onednn = *(const char *)blob == 'd';
    return 0;
}

static size_t f32_bytes(const Graph *g, ValueId v)
{
    return (size_t)shape_numel(&g->values[v].type.shape) * sizeof(float);
}

static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return x < y + nb && y < x + na;
}

static int step_operands(const OnednnConv *dn, const Graph *g, int first, int n, void *const *ptr, int always,
                         float **in, const float **res, float **y);

/* A primitive with its step's epilogue as post-ops for each library step
 * that starts with a forward convolution on oneDNN and continues with a
 * residual add and/or an activation (not a separate bias add: the folded
 * and the plain biases are the conv2d's own input), in f32, reading no
 * value between them outside the step. Where oneDNN has no post-op for it,
 * the step runs node by node. */
static void fuse_epilogues(const Graph *g, const FusePlan *fp, ConvChoices *c)
{
    for (int s = 0; fp && s < fp->nsteps; s++) {
        const FuseStep *st = &fp->steps[s];
        const Node *n = &g->nodes[st->first];
        if (st->kind != FUSE_LIBRARY || st->n < 2 || n->op != CT_OP_conv2d || !c->dn[st->first] ||
            (st->epilogue & FUSE_EPI_BIAS))
            continue;
        int ok = 1;
        for (int j = 0; j < st->n && ok; j++)
            ok = cpu_all_f32(g, &n[j]) && (j == st->n - 1 || !fp->materialised[n[j].out[0]]);
        CtErr why;
        if (ok && !onednn_conv_create(g, n, n + 1, st->n - 1, &c->epi[st->first], &why))
            c->fused++;
    }
}

/* The primitive that writes value v and the step it ends ([*first, + *n)),
 * or NULL: a plain convolution on oneDNN, or a step fused into one.
 * step_of: per node, the FusePlan step holding it (NULL: node by node). */
static OnednnConv *writer(const Graph *g, const FusePlan *fp, const int *step_of, const ConvChoices *c, ValueId v,
                          int *first, int *n)
{
    int p = g->values[v].producer;
    if (p < 0)
        return NULL;
    if (!step_of) {
        *first = p;
        *n = 1;
        return c->dn[p];
    }
    const FuseStep *st = &fp->steps[step_of[p]];
    *first = st->first;
    *n = st->n;
    if (c->epi[st->first])
        return p == st->first + st->n - 1 ? c->epi[st->first] : NULL;
    return st->n == 1 ? c->dn[p] : NULL;
}

/* Values that pass from one convolution on oneDNN to others only, as the
 * source of each, stay in the blocked layout they all run in: neither the
 * writer's reorder to NCHW nor the readers' back (an inference graph's
 * chains of convolutions with their activations). Not graph outputs, nor
 * where the writer's destination, no longer a private copy, would overlap
 * what it reads (ptr: the values' memory as prepared). */
static void chain_blocked(const Graph *g, const FusePlan *fp, ConvChoices *c, void *const *ptr)
{
    char *bad = calloc((size_t)g->nvalues + 1, 1);
    int *step_of = fp ? malloc(sizeof *step_of * (size_t)(g->nnodes + 1)) : NULL;
    CT_ASSERT(bad && (step_of || !fp));
    for (int s = 0; fp && s < fp->nsteps; s++)
        for (int j = 0; j < fp->steps[s].n; j++)
            step_of[fp->steps[s].first + j] = s;
    for (int k = 0; k < g->noutputs; k++)
        bad[g->outputs[k]] = 1;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++)
            if (k || n->op != CT_OP_conv2d || !c->dn[i])
                bad[n->in[k]] = 1;
    }
    for (ValueId v = 0; v < g->nvalues; v++) {
        int first, n;
        OnednnConv *w = bad[v] ? NULL : writer(g, fp, step_of, c, v, &first, &n);
        int ok = w != NULL, readers = 0;
        size_t bytes = f32_bytes(g, v);
        for (int i = 0; i < g->nnodes && ok; i++)
            if (g->nodes[i].nin && g->nodes[i].in[0] == v) {
                readers++;
                ok = onednn_conv_blocked_match(w, c->dn[i], bytes) &&
                     (!c->epi[i] || onednn_conv_blocked_match(w, c->epi[i], bytes));
            }
        float *in[CT_MAX_IN], *y;
        const float *res;
        if (!ok || !readers || step_operands(w, g, first, n, ptr, 1, in, &res, &y))
            continue;
        onednn_conv_keep_blocked(w, 1);
        for (int i = 0; i < g->nnodes; i++)
            if (g->nodes[i].nin && g->nodes[i].in[0] == v) {
                onednn_conv_keep_blocked(c->dn[i], 0);
                if (c->epi[i])
                    onednn_conv_keep_blocked(c->epi[i], 0);
            }
        c->blocked++;
    }
    free(bad);
    free(step_of);
}

/* One cache of choices for the process, opened at the first timed choice
 * and kept: its in-memory map makes every program of a process (a training
 * step and its eval graph, two programs a test compares bit for bit) take
 * the same kernels for the same geometry even where the directory cannot
 * keep entries (memory_fallback). */
static KernelCache choices;
static CtErr choices_err;
static int choices_failed;
static pthread_once_t choices_once = PTHREAD_ONCE_INIT;

static void choices_open(void)
{
    choices_failed = cache_open(&choices, &(CacheOptions){.memory_fallback = 1, .first_wins = 1}, &choices_err) != 0;
}

/* The primitive of node n on oneDNN (conv: onednn_conv_create's, else
 * onednn_pool_create's), or NULL where oneDNN has none. */
static void *dn_create(const Graph *g, const Node *n, int conv)
{
    CtErr why;
    if (conv) {
        OnednnConv *dn;
        return onednn_conv_create(g, n, NULL, 0, &dn, &why) ? NULL : dn;
    }
    OnednnPool *dn;
    return onednn_pool_create(g, n, &dn, &why) ? NULL : dn;
}

static void dn_free(void *dn, int conv)
{
    if (conv)
        onednn_conv_free(dn);
    else
        onednn_pool_free(dn);
}

/* The node's primitive on oneDNN where that is the mode's choice, else
 * NULL; -1 where a timed choice failed (err). */
static int choose_node(const Graph *g, const Node *n, int mode, ConvChoices *c, void **out, CtErr *err)
{
    int conv = is_conv(n);
    *out = NULL;
    void *dn = dn_create(g, n, conv);
    if (!dn)
        return 0; /* no oneDNN implementation: the own kernel */
    int use = 1;
    if (mode == MODE_AUTO) {
        uint64_t before = cache_stats(&choices).compiles;
        Timing t = {g, n, dn, conv ? run_conv : run_pool};
        if (choose(&t, &choices, &use, err)) {
            dn_free(dn, conv);
            return -1;
        }
        if (cache_stats(&choices).compiles > before)
            c->timed++;
        else
            c->cached++;
    }
    if (use)
        *out = dn;
    else
        dn_free(dn, conv);
    return 0;
}

/* c's line for the logs. */
static void write_note(ConvChoices *c, int mode, int eligible)
{
    int len = 0;
    size_t n = sizeof c->note;
    if (mode == MODE_OWN || (c->convs && !eligible)) {
        if (c->convs)
            snprintf(c->note, n, "Convolutions: ctimm's own kernels (%s)",
                     mode == MODE_OWN ? "CTIMM_CONV=own" : "oneDNN takes the f32 ones; these are f16/bf16");
        else
            snprintf(c->note, n, "Pooling: ctimm's own kernels (CTIMM_CONV=own)");
        return;
    }
    if (c->convs)
        len = snprintf(c->note, n, "Convolutions: %d of %d on oneDNN %s", c->onednn, c->convs, onednn_version());
    if (c->pools)
        len += snprintf(c->note + len, n - (size_t)len, "%s: %d of %d on oneDNN", c->convs ? "; pooling" : "Pooling",
                        c->pool_onednn, c->pools);
    if (mode == MODE_AUTO)
        len += snprintf(c->note + len, n - (size_t)len, " (the faster of oneDNN and ctimm's own: %d timed now, %d cached)",
                        c->timed, c->cached);
    else
        len += snprintf(c->note + len, n - (size_t)len, " (CTIMM_CONV=onednn)");
    if (c->fused)
        len += snprintf(c->note + len, n - (size_t)len, "; %d with their epilogue as post-ops", c->fused);
    if (c->blocked)
        len += snprintf(c->note + len, n - (size_t)len, "; %d values passed on blocked", c->blocked);
    if (c->convs && eligible < c->convs)
        snprintf(c->note + len, n - (size_t)len, "; %d f16/bf16 ones on ctimm's own", c->convs - eligible);
}

int conv_choices_make(const Graph *g, const FusePlan *fp, void *const *ptr, ConvChoices *c, CtErr *err)
{
    memset(c, 0, sizeof *c);
    int mode = MODE_AUTO;
    if (conv_mode(&mode, err))
        return -1;
    for (int i = 0; i < g->nnodes; i++) {
        c->convs += is_conv(&g->nodes[i]);
        c->pools += is_pool(&g->nodes[i]);
    }
    if (!c->convs && !c->pools)
        return 0;
    c->nnodes = g->nnodes;
    c->dn = calloc((size_t)g->nnodes, sizeof *c->dn);
    c->epi = calloc((size_t)g->nnodes, sizeof *c->epi);
    c->pool = calloc((size_t)g->nnodes, sizeof *c->pool);
    CT_ASSERT(c->dn && c->epi && c->pool);
    if (mode == MODE_AUTO) {
        pthread_once(&choices_once, choices_open);
        if (choices_failed) {
            conv_choices_free(c);
            return ct_fail(err, "%s", choices_err.msg);
        }
    }
    int eligible = 0;
    for (int i = 0; i < g->nnodes && mode != MODE_OWN; i++) {
        const Node *n = &g->nodes[i];
        if (!(is_conv(n) || is_pool(n)) || !cpu_all_f32(g, n))
            continue;
        eligible += is_conv(n);
        void *dn;
        if (choose_node(g, n, mode, c, &dn, err)) {
            conv_choices_free(c);
            return -1;
        }
        if (dn && is_conv(n)) {
            c->dn[i] = dn;
            c->onednn++;
        } else if (dn) {
            c->pool[i] = dn;
            c->pool_onednn++;
        }
    }
    fuse_epilogues(g, fp, c);
    chain_blocked(g, fp, c, ptr);
    write_note(c, mode, eligible);
    return 0;
}

int conv_choices_run(const ConvChoices *c, int node, float *const *in, float *const *out)
{
    if (c->dn && c->dn[node])
        onednn_conv_run(c->dn[node], in, NULL, out);
    else if (c->pool && c->pool[node])
        onednn_pool_run(c->pool[node], in, out);
    else
        return 0;
    return 1;
}

/* The operands of the step of nodes [first, first + n) as dn runs it: 0,
 * or -1 where the memory plan put its destination over an operand that dn
 * would read after writing it (unless dn writes it last from a private
 * copy, and `always` is 0). A NULL pointer (a value the caller binds at
 * each run) is the caller's memory, apart from the program's. */
static int step_operands(const OnednnConv *dn, const Graph *g, int first, int n, void *const *ptr, int always,
                         float **in, const float **res, float **y)
{
    const Node *conv = &g->nodes[first], *last = conv + n - 1;
    *y = ptr[last->out[0]];
    *res = NULL;
    for (int k = 0; k < conv->nin; k++)
        in[k] = ptr[conv->in[k]];
    ValueId t = conv->out[0];
    for (const Node *e = conv + 1; e <= last; t = e->out[0], e++)
        if (e->op == CT_OP_add)
            *res = ptr[e->in[0] == t ? e->in[1] : e->in[0]];
    /* written in place, the destination must not be read as an operand (the
     * node-by-node plan may have put it there: the convolution's input dies at it) */
    size_t yb = f32_bytes(g, last->out[0]);
    if ((!always && onednn_conv_dst_private(dn)) || !*y)
        return 0;
    for (int k = 0; k < conv->nin; k++)
        if (in[k] && overlap(*y, yb, in[k], f32_bytes(g, conv->in[k])))
            return -1;
    return *res && *res != *y && overlap(*y, yb, *res, yb) ? -1 : 0;
}

int conv_choices_run_step(const ConvChoices *c, const Graph *g, int first, int n, void *const *ptr)
{
    OnednnConv *dn = c->epi ? c->epi[first] : NULL;
    float *in[CT_MAX_IN], *y;
    const float *res;
    if (!dn || step_operands(dn, g, first, n, ptr, 0, in, &res, &y))
        return 0;
    onednn_conv_run(dn, in, res, &y);
    return 1;
}

void conv_choices_free(ConvChoices *c)
{
    for (int i = 0; c->dn && i < c->nnodes; i++) {
        onednn_conv_free(c->dn[i]);
        onednn_conv_free(c->epi[i]);
        onednn_pool_free(c->pool[i]);
    }
    free(c->dn);
    free(c->epi);
    free(c->pool);
    c->dn = c->epi = NULL;
    c->pool = NULL;
}

#else

int conv_choices_make(const Graph *g, const FusePlan *fp, void *const *ptr, ConvChoices *c, CtErr *err)
{
    memset(c, 0, sizeof *c);
    (void)fp;
    int mode = MODE_AUTO;
    if (conv_mode(&mode, err))
        return -1;
    for (int i = 0; i < g->nnodes; i++)
        c->convs += is_conv(&g->nodes[i]);
    if (mode == MODE_ONEDNN)
        return ct_fail(err, "CTIMM_CONV=onednn: this build has no oneDNN (install libdnnl-dev and rebuild)");
    if (c->convs)
        snprintf(c->note, sizeof c->note, "Convolutions: ctimm's own kernels (built without oneDNN)");
    return 0;
}

int conv_choices_run_step(const ConvChoices *c, const Graph *g, int first, int n, void *const *ptr)
{
    (void)c;
    (void)g;
    (void)first;
    (void)n;
    (void)ptr;
    return 0;
}

int conv_choices_run(const ConvChoices *c, int node, float *const *in, float *const *out)
{
    (void)c;
    (void)node;
    (void)in;
    (void)out;
    return 0;
}

void conv_choices_free(ConvChoices *c)
{
    free(c->dn);
    c->dn = NULL;
}

#endif
