/* Translation units (codegen/units.h): the split is contiguous, covers every
 * item once, follows the weights and never leaves a unit empty; a graph's
 * units hold every distinct kernel exactly once, in launch order, each after
 * the prelude, the same text on every call, and a launch whose kernel
 * repeats an earlier one's text runs that one; the pool runs every unit once
 * and reports the lowest failing unit (host units: with cc's log, no module
 * left open); and on the cpu backend, through the disk cache, test_convnext's
 * training step (two units) compiles once per unit, a second compile
 * compiles nothing, a corrupted entry recompiles that unit alone, and the
 * step run over a corrupted entry matches the ref backend. The cache lives
 * in a mkdtemp directory under /tmp, removed at the end. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "codegen/host_compile.h"
#include "codegen/render.h"
#include "codegen/units.h"
#include "model_vectors.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"

/* Checks a split of n items: runs numbered 0, 1, ... in item order. */
static void check_runs(const int *unit, int n, int runs)
{
    CHECK(n == 0 || unit[0] == 0);
    for (int i = 1; i < n; i++)
        CHECKF(unit[i] == unit[i - 1] || unit[i] == unit[i - 1] + 1, "item %d: unit %d after %d", i, unit[i],
               unit[i - 1]);
    CHECK(n == 0 || unit[n - 1] == runs - 1);
}

static void test_split(void)
{
    int w[256], unit[256];
    for (int i = 0; i < 256; i++)
        w[i] = 1;
    /* small: one unit, up to and including the target */
    CHECK(units_split(w, 96, 96, unit) == 1);
    check_runs(unit, 96, 1);
    CHECK(units_split(w, 0, 96, unit) == 0);
    /* 200 equal items: ceil(200 / 96) = 3 runs of 66 or 67 */
    int runs = units_split(w, 200, 96, unit);
    CHECK(runs == 3);
    check_runs(unit, 200, runs);
    int size[3] = {0};
    for (int i = 0; i < 200; i++)
        size[unit[i]]++;
    for (int j = 0; j < 3; j++)
        CHECKF(size[j] >= 66 && size[j] <= 67, "run %d: %d items", j, size[j]);
    /* resnet50's step as cc sees it: 152 one-loop kernels, then SGD launches
     * of 54 and 107 loops, which must not share a unit */
    w[152] = 54;
    w[153] = 107;
    runs = units_split(w, 154, 96, unit);
    CHECK(runs == 4);
    check_runs(unit, 154, runs);
    CHECK(unit[151] < unit[152] && unit[152] < unit[153]);
    /* the same weights, the same split */
    int again[256];
    CHECK(units_split(w, 154, 96, again) == 4 && memcmp(unit, again, sizeof *unit * 154) == 0);
    /* an item heavier than several units: the slots it covers are not runs */
    int heavy[3] = {1, 500, 1};
    runs = units_split(heavy, 3, 96, unit);
    CHECK(runs == 3);
    check_runs(unit, 3, runs);
}

/* The pool's callback: counts calls per unit; fails the units in `fail`. */
typedef struct Calls {
    pthread_mutex_t mu;
    int count[16];
    int fail[16];
} Calls;

static int count_call(void *ctx, int unit, const char *source, CtErr *err)
{
    Calls *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->count[unit]++;
    pthread_mutex_unlock(&c->mu);
    CHECK(source && !strcmp(source, "src"));
    return c->fail[unit] ? ct_fail(err, "unit %d failed", unit) : 0;
}

static void test_pool(void)
{
    CtBuf src[16] = {{0}};
    for (int j = 0; j < 16; j++)
        buf_printf(&src[j], "src");
    KernelUnits u = {.n = 16, .src = src};
    Calls c = {.mu = PTHREAD_MUTEX_INITIALIZER};
    CtErr err;
    CHECK(units_compile(&u, count_call, &c, &err) == 0);
    for (int j = 0; j < 16; j++)
        CHECKF(c.count[j] == 1, "unit %d ran %d times", j, c.count[j]);
    /* units 5 and 9 fail: unit 5's message, nothing after a failure taken */
    memset(c.count, 0, sizeof c.count);
    c.fail[5] = c.fail[9] = 1;
    CHECK(units_compile(&u, count_call, &c, &err) == -1);
    CHECKF(!strcmp(err.msg, "unit 5 failed"), "%s", err.msg);
    for (int j = 0; j <= 5; j++)
        CHECKF(c.count[j] == 1, "unit %d ran %d times", j, c.count[j]);
    for (int j = 6; j < 16; j++)
        CHECK(c.count[j] <= 1);
    u.n = 0;
    CHECK(units_compile(&u, count_call, &c, &err) == 0);
    for (int j = 0; j < 16; j++)
        buf_free(&src[j]);
}

/* Host units where units 1 and 2 do not compile: the error is unit 1's,
 * with cc's log, and no module is left open. */
static void test_host_failure(const HostCompiler *hc)
{
    static const char *const text[3] = {"void ct_k0(void *const *a) { (void)a; }\n",
                                        "void ct_k1(void *const *a) { undefined_name_1; }\n",
                                        "void ct_k2(void *const *a) { undefined_name_2; }\n"};
    CtBuf src[3] = {{0}};
    for (int j = 0; j < 3; j++)
        buf_printf(&src[j], "%s", text[j]);
    KernelUnits u = {.n = 3, .src = src};
    HostModule mods[3];
    KernelCache cache;
    CtErr err;
    CHECK(cache_open(&cache, &(CacheOptions){.no_cache = 1}, &err) == 0);
    CHECK(host_compile_units(hc, &cache, &u, mods, &err) == -1);
    CHECKF(strstr(err.msg, "undefined_name_1") && !strstr(err.msg, "undefined_name_2"), "%s", err.msg);
    for (int j = 0; j < 3; j++)
        CHECK(mods[j].dl == NULL);
    cache_close(&cache);
    for (int j = 0; j < 3; j++)
        buf_free(&src[j]);
}

/* test_convnext's SGD training step as test_cpu builds it, on its vectors
 * (two units: its SGD launch has a loop per parameter). */
static int build_step(const Vectors *v, Graph *g)
{
    ModelSpec spec = {.batch_size = v->batch, .training = 1, .args = v->args};
    OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4, .no_weight_decay = v->m->no_weight_decay};
    TrainStep ts;
    CtErr err;
    if (model_build(v->m, &spec, g, &err) == 0) {
        if (train_step_build(g, g->outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1}, &sgd, &ts, &err) == 0) {
            train_step_free(&ts);
            return 0;
        }
        graph_free(g);
    }
    CHECKF(0, "%s", err.msg);
    return -1;
}

/* The kernels of g's launches as a backend lowers them (layouts: CUDA's). */
static KirKernel *lower_all(const Graph *g, const FusePlan *p, int layouts)
{
    KirKernel *k = calloc((size_t)p->kernels_after + 1, sizeof *k);
    CtErr err;
    for (int l = 0; l < p->kernels_after; l++)
        if (kir_lowerable(p, l))
            CHECKF(kir_lower(g, p, l, (KirOptions){KIR_F32, layouts}, &k[l], &err) == 0, "%s", err.msg);
    return k;
}

static void free_kernels(KirKernel *k, int n)
{
    for (int l = 0; l < n; l++)
        kir_free(&k[l]);
    free(k);
}

/* Kernel k's text under the name ct_k0, as units_make compares them. */
static char *anon_text(const KirKernel *k, int cuda)
{
    KirKernel anon = *k;
    CtBuf b = {0};
    anon.launch = 0;
    (cuda ? render_cuda_kernel : render_c_kernel)(&anon, &b);
    return b.s;
}

/* Every unit is the prelude and then its kernels; the units' kernels, in
 * unit order, are the distinct kernels of render_graph's one unit, each
 * once, in the launch order of their first use; every launch runs a kernel
 * of the same text as its own, the first such; a second split is the same. */
static void check_units(const Graph *g, const FusePlan *p, const KirKernel *k, int cuda)
{
    KernelUnits u, again;
    CtBuf prelude = {0}, whole = {0}, joined = {0}, firsts = {0};
    CtErr err;
    int nk, distinct = 0;
    units_make(k, p->kernels_after, UNIT_LOOPS, cuda, &u);
    units_make(k, p->kernels_after, UNIT_LOOPS, cuda, &again);
    (cuda ? render_cuda_prelude : render_c_prelude)(&prelude);
    CHECK(render_graph(g, p, cuda, &whole, &nk, &err) == 0);
    CHECKF(u.n >= 2, "test_convnext's training step: %d unit(s)", u.n);
    CHECK(u.nkernels == nk && u.nlaunches == p->kernels_after);
    for (int j = 0; j < u.n; j++) {
        CHECKF(!strncmp(u.src[j].s, prelude.s, prelude.len), "unit %d does not start with the prelude", j);
        buf_printf(&joined, "%s", u.src[j].s + prelude.len);
    }
    for (int l = 0, last = 0; l < p->kernels_after; l++) {
        CHECK((u.unit[l] >= 0) == (k[l].nloops > 0) && (u.fn[l] >= 0) == (k[l].nloops > 0));
        if (u.unit[l] < 0)
            continue;
        int f = u.fn[l];
        char name[32], *mine = anon_text(&k[l], cuda), *theirs = anon_text(&k[f], cuda);
        CHECKF(f <= l && u.fn[f] == f && u.unit[l] == u.unit[f] && !strcmp(mine, theirs), "launch %d runs ct_k%d", l,
               f);
        snprintf(name, sizeof name, " ct_k%d(", f);
        CHECKF(strstr(u.src[u.unit[l]].s, name) != NULL, "launch %d: no ct_k%d in unit %d", l, f, u.unit[l]);
        if (f == l) {
            CHECKF(u.unit[l] >= last, "launch %d in unit %d after %d", l, u.unit[l], last);
            last = u.unit[l];
            distinct++;
            (cuda ? render_cuda_kernel : render_c_kernel)(&k[l], &firsts);
            for (int e = 0; e < l; e++) /* no earlier kernel has its text */
                if (u.fn[e] == e) {
                    char *earlier = anon_text(&k[e], cuda);
                    CHECKF(strcmp(earlier, mine) != 0, "launches %d and %d: the same kernel twice", e, l);
                    free(earlier);
                }
        }
        free(mine);
        free(theirs);
    }
    CHECKF(distinct == u.ndistinct && distinct < nk, "%d distinct kernels of %d", u.ndistinct, nk);
    CHECK(firsts.len > 0 && !strcmp(joined.s, firsts.s));
    CHECK(again.n == u.n && !memcmp(again.unit, u.unit, sizeof *u.unit * (size_t)u.nlaunches) &&
          !memcmp(again.fn, u.fn, sizeof *u.fn * (size_t)u.nlaunches));
    for (int j = 0; j < u.n && j < again.n; j++)
        CHECK(!strcmp(again.src[j].s, u.src[j].s));
    printf("test_convnext training step, %s: %d kernels, %d distinct, in %d units\n", cuda ? "CUDA C" : "host C",
           u.nkernels, u.ndistinct, u.n);
    units_free(&again);
    units_free(&u);
    buf_free(&prelude);
    buf_free(&whole);
    buf_free(&joined);
    buf_free(&firsts);
}

/* Compiles u's units through a fresh cache on dir; its stats. */
static CacheStats compile_once(const HostCompiler *hc, const char *dir, const KernelUnits *u, int forbid)
{
    KernelCache cache;
    CtErr err;
    CacheStats st = {0};
    HostModule *mods = calloc((size_t)u->n + 1, sizeof *mods);
    if (cache_open(&cache, &(CacheOptions){.dir = dir, .forbid_compile = forbid}, &err)) {
        CHECKF(0, "%s", err.msg);
        free(mods);
        return st;
    }
    CHECKF(host_compile_units(hc, &cache, u, mods, &err) == 0, "%s", err.msg);
    for (int j = 0; j < u->n; j++)
        host_module_close(&mods[j]);
    st = cache_stats(&cache);
    cache_close(&cache);
    free(mods);
    return st;
}

/* Overwrites a byte in the middle of unit j's cache entry. */
static void corrupt_unit(const HostCompiler *hc, const char *dir, const KernelUnits *u, int j)
{
    CacheKeyParts parts = {.source = u->src[j].s, .target = hc->target, .compiler = hc->cc,
                           .compiler_version = hc->version, .options = HOST_CC_OPTIONS};
    CacheKey key;
    CtErr err;
    char hex[33], path[600];
    CHECK(cache_key(&parts, &key, &err) == 0);
    cache_key_hex(&key, hex);
    snprintf(path, sizeof path, "%s/%s", dir, hex);
    FILE *f = fopen(path, "r+b");
    CHECKF(f != NULL, "no entry %s for unit %d", path, j);
    if (!f)
        return;
    fseek(f, 300, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 300, SEEK_SET);
    fputc(c ^ 0xff, f);
    fclose(f);
}

/* Runs the step on the cpu and ref backends: every output and state tensor
 * within 1e-4. */
static void compare_step(const Graph *g, const Vectors *v)
{
    const CtBackend *be[2] = {backend_find("cpu"), backend_find("ref")};
    CtState s[2];
    CtTensor *out[2];
    CtErr err;
    int ran = 0;
    for (int b = 0; b < 2; b++) {
        state_create(&s[b], g);
        CHECKF(state_load(&s[b], &v->f, "state.", &err) == 0, "%s", err.msg);
        out[b] = calloc((size_t)g->noutputs + 1, sizeof *out[b]);
        int ok = backend_run_once(be[b], g, &s[b], v->in, 4, out[b], NULL, &err) == 0;
        CHECKF(ok, "%s: %s", be[b]->name, err.msg);
        ran += ok;
    }
    for (int k = 0; ran == 2 && k < g->noutputs; k++)
        if (out[0][k].type.dtype == CT_F32)
            CHECKF(rel_err(out[0][k].data, out[1][k].data, shape_numel(&out[0][k].type.shape)) <= 1e-4, "output %d",
                   k);
    for (int i = 0; ran == 2 && i < s[0].n; i++)
        if (s[0].e[i].type.dtype == CT_F32)
            CHECKF(rel_err(state_data(&s[0], i), state_data(&s[1], i), shape_numel(&s[0].e[i].type.shape)) <= 1e-4,
                   "state '%s'", s[0].e[i].name);
    for (int b = 0; b < 2; b++) {
        for (int k = 0; k < g->noutputs; k++)
            tensor_free(&out[b][k]);
        free(out[b]);
        state_free(&s[b]);
    }
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[600];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* Through a cache in dir, which the cpu backend uses too: the step
 * compiles once per unit, then not at all; one corrupt entry recompiles
 * that unit alone; the backend, meeting it corrupt again, recompiles it and
 * runs the step right, leaving every entry whole. The unit corrupted is the
 * one with the shortest source, the quickest to recompile. */
static void test_cache(const HostCompiler *hc, const char *dir, const Graph *g, const Vectors *v, const KirKernel *k,
                       int nlaunches)
{
    KernelUnits u;
    units_make(k, nlaunches, UNIT_LOOPS, 0, &u);
    int small = 0;
    for (int j = 1; j < u.n; j++)
        small = u.src[j].len < u.src[small].len ? j : small;
    setenv("CTIMM_CACHE_DIR", dir, 1);
    CacheStats st = compile_once(hc, dir, &u, 0);
    CHECKF(st.compiles == (uint64_t)u.n && st.disk_hits == 0, "cold: %llu compiles for %d units",
           (unsigned long long)st.compiles, u.n);
    st = compile_once(hc, dir, &u, 1);
    CHECKF(st.compiles == 0 && st.disk_hits == (uint64_t)u.n, "warm: %llu compiles", (unsigned long long)st.compiles);
    corrupt_unit(hc, dir, &u, small);
    st = compile_once(hc, dir, &u, 0);
    CHECKF(st.compiles == 1 && st.corrupt == 1 && st.disk_hits == (uint64_t)u.n - 1,
           "one corrupt entry: %llu compiles, %llu corrupt", (unsigned long long)st.compiles,
           (unsigned long long)st.corrupt);
    corrupt_unit(hc, dir, &u, small);
    compare_step(g, v);
    st = compile_once(hc, dir, &u, 1);
    CHECKF(st.compiles == 0 && st.corrupt == 0 && st.disk_hits == (uint64_t)u.n,
           "after the backend's run: %llu corrupt", (unsigned long long)st.corrupt);
    units_free(&u);
}

static void test_graph(void)
{
    Vectors v;
    Graph g;
    FusePlan p;
    HostCompiler hc;
    CtErr err;
    char dir[] = "/tmp/ctimm-units-XXXXXX";
    if (vectors_open(&v, "test_convnext", 1))
        return;
    if (build_step(&v, &g) == 0) {
        int planned = fuse_plan(&g, &p, &err) == 0;
        CHECKF(planned, "%s", err.msg);
        if (planned) {
            KirKernel *cuda_k = lower_all(&g, &p, 1), *host_k = lower_all(&g, &p, 0);
            check_units(&g, &p, cuda_k, 1);
            check_units(&g, &p, host_k, 0);
            if (host_compiler_init(&hc, &err) == 0 && mkdtemp(dir)) {
                test_host_failure(&hc);
                test_cache(&hc, dir, &g, &v, host_k, p.kernels_after);
                remove_dir(dir);
            } else {
                printf("test_units: no C compiler or temporary directory; cache checks skipped\n");
            }
            free_kernels(cuda_k, p.kernels_after);
            free_kernels(host_k, p.kernels_after);
            fuse_free(&p);
        }
        graph_free(&g);
    }
    st_free(&v.f);
}

int main(void)
{
    test_split();
    test_pool();
    test_graph();
    return check_done("test_units");
}
