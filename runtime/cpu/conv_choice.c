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


static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct Timing {
    const Graph *g;
    const Node *n;
    OnednnConv *dn; /* made for the timing; kept when oneDNN wins */
} Timing;

/* Seconds per run, the best of a few after one unmeasured (first touch of the buffers and scratch). */
static double time_runs(const Timing *t, OnednnConv *dn, float *const *in, float *const *out)
{
    double best = 1e30;
    for (int i = 0; i < 4; i++) {
        double t0 = now();
        if (dn)
            onednn_conv_run(dn, in, out);
        else
            cpu_run_node(t->g, t->n, (void *const *)in, (void *const *)out, NULL);
        double dt = now() - t0;
        if (i && dt < best)
            best = dt;
        if (i && dt > 0.05) /* a big convolution: one measured run says enough */
            break;
    }
    return best;
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
    double own = time_runs(t, NULL, in, out), dn = time_runs(t, t->dn, in, out);
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

/* Whether node n runs on oneDNN: the cached choice, else timed now. */
static int choose(const Graph *g, const Node *n, KernelCache *cache, OnednnConv *dn, int *onednn, CtErr *err)
{
    char key[320], target[320], model[256];
    int len = snprintf(key, sizeof key, "%s bias=%d", op_def(n->op)->name, n->nin == 3);
    const ValueId v[3] = {n->in[0], n->in[1], n->out[0]};
    for (int k = 0; k < 3; k++) {
        const CtShape *s = &g->values[v[k]].type.shape;
        len += snprintf(key + len, sizeof key - (size_t)len, " [%lld,%lld,%lld,%lld]", (long long)s->d[0],
                        (long long)s->d[1], (long long)s->d[2], (long long)s->d[3]);
    }
    for (int k = 0; k < 7; k++)
        len += snprintf(key + len, sizeof key - (size_t)len, " %lld", (long long)n->iattr[k]);
    host_cpu_model(model, sizeof model);
    snprintf(target, sizeof target, "host %s, %d threads", model, omp_get_max_threads());
    CacheKeyParts parts = {.source = key, .target = target, .compiler = "onednn", .compiler_version = onednn_version(),
                           .options = "own-vs-onednn", .codegen_version = "ctimm-conv-choice-1"};
    Timing t = {g, n, dn};
    const void *blob;
    size_t len_blob;
    if (cache_get(cache, &parts, time_both, &t, &blob, &len_blob, err))
        return -1;
    if (len_blob != 1)
        return ct_fail(err, "cached convolution choice for %s has %zu bytes, not 1", key, len_blob);
    *onednn = *(const char *)blob == 'd';
    return 0;
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

int conv_choices_make(const Graph *g, ConvChoices *c, CtErr *err)
{
    memset(c, 0, sizeof *c);
    int mode = MODE_AUTO;
    if (conv_mode(&mode, err))
        return -1;
    for (int i = 0; i < g->nnodes; i++)
        c->convs += is_conv(&g->nodes[i]);
    if (!c->convs)
        return 0;
    c->nnodes = g->nnodes;
    c->dn = calloc((size_t)g->nnodes, sizeof *c->dn);
    CT_ASSERT(c->dn != NULL);
    if (mode == MODE_AUTO) {
        pthread_once(&choices_once, choices_open);
        if (choices_failed) {
            conv_choices_free(c);
            return ct_fail(err, "%s", choices_err.msg);
        }
    }
    CtErr why = {{0}};
    int eligible = 0;
    for (int i = 0; i < g->nnodes && mode != MODE_OWN; i++) {
        const Node *n = &g->nodes[i];
        if (!is_conv(n) || !cpu_all_f32(g, n))
            continue;
        eligible++;
        OnednnConv *dn;
        if (onednn_conv_create(g, n, &dn, &why))
            continue; /* no oneDNN implementation: the own kernel */
        int use = 1;
        if (mode == MODE_AUTO) {
            uint64_t before = cache_stats(&choices).compiles;
            if (choose(g, n, &choices, dn, &use, err)) {
                onednn_conv_free(dn);
                conv_choices_free(c);
                return -1;
            }
            if (cache_stats(&choices).compiles > before)
                c->timed++;
            else
                c->cached++;
        }
        if (use) {
            c->dn[i] = dn;
            c->onednn++;
        } else {
            onednn_conv_free(dn);
        }
    }
    if (mode == MODE_OWN || !eligible) {
        snprintf(c->note, sizeof c->note, "Convolutions: ctimm's own kernels (%s)",
                 mode == MODE_OWN ? "CTIMM_CONV=own" : "oneDNN takes the f32 ones; these are f16/bf16");
        return 0;
    }
    int len = snprintf(c->note, sizeof c->note, "Convolutions: %d of %d on oneDNN %s", c->onednn, c->convs,
                       onednn_version());
    if (mode == MODE_AUTO)
        len += snprintf(c->note + len, sizeof c->note - (size_t)len,
                        " (the faster of oneDNN and ctimm's own: %d timed now, %d cached)", c->timed, c->cached);
    else
        len += snprintf(c->note + len, sizeof c->note - (size_t)len, " (CTIMM_CONV=onednn)");
    if (eligible < c->convs)
        snprintf(c->note + len, sizeof c->note - (size_t)len, "; %d f16/bf16 ones on ctimm's own", c->convs - eligible);
    return 0;
}

int conv_choices_run(const ConvChoices *c, int node, float *const *in, float *const *out)
{
    if (!c->dn || !c->dn[node])
        return 0;
    onednn_conv_run(c->dn[node], in, out);
    return 1;
}

void conv_choices_free(ConvChoices *c)
{
    for (int i = 0; c->dn && i < c->nnodes; i++)
        onednn_conv_free(c->dn[i]);
    free(c->dn);
    c->dn = NULL;
}

#else

int conv_choices_make(const Graph *g, ConvChoices *c, CtErr *err)
{
    memset(c, 0, sizeof *c);
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
