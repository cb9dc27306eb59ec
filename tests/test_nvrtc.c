/* NVRTC (built only with the CUDA toolkit; no GPU needed): every generated
 * CUDA kernel of the four test models (test_resnet, test_vit,
 * test_efficientnet, test_convnext), eval and training graphs, f32 and amp
 * f16 and bf16, NCHW and channels-last, compiles for sm_90 to a cubin (the
 * sanitizer build: four of the 48 graphs), one translation unit per graph,
 * two graphs at a time; an architecture past NVRTC's gets PTX; a broken
 * source fails with NVRTC's log in the message. */
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "codegen/nvrtc.h"
#include "codegen/render.h"
#include "model_graphs.h"

/* One graph's translation unit and what compiling it gave. */
typedef struct Job {
    char name[64];
    CtBuf src;
    int nkernels, rc;
    NvrtcImage img;
    CtErr err;
} Job;

typedef struct Worker {
    const NvrtcCompiler *nc;
    KernelCache *cache;
    Job *jobs;
    int njobs, first; /* jobs first, first + 2, ... */
} Worker;

static void *compile_jobs(void *arg)
{
    Worker *w = arg;
    for (int j = w->first; j < w->njobs; j += 2)
        w->jobs[j].rc = nvrtc_compile(w->nc, w->cache, w->jobs[j].src.s, 90, &w->jobs[j].img, &w->jobs[j].err);
    return NULL;
}

/* The graphs are rendered here, then compiled on two threads (the cache is
 * thread-safe), one per core. */
static void test_models(const NvrtcCompiler *nc, KernelCache *cache)
{
    typedef struct Case {
        const char *model;
        int training;
        CtDType dtype;
        int channels_last;
    } Case;
    enum { NCASES = 48 };
    /* first the four the sanitizer build compiles: the conv nets' graphs as the
     * GPU trains them (--amp --channels-last) and an eval graph */
    Case cases[NCASES] = {
        {"test_resnet", 1, CT_F16, 1}, {"test_efficientnet", 1, CT_F16, 1}, {"test_convnext", 1, CT_BF16, 1},
        {"test_convnext", 0, CT_F32, 0},
    };
    static const char *const models[] = {"test_resnet", "test_vit", "test_efficientnet", "test_convnext"};
    static const CtDType precisions[] = {CT_F32, CT_F16, CT_BF16};
    static const OptimSpec adamw = {
        .kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05};
    int ncases = 4;
#ifdef __SANITIZE_ADDRESS__
    /* NVRTC itself is not instrumented: the sanitizer build checks ctimm's side
     * (rendering, the cache from two threads, loading the results) on four graphs */
    int nall = 4;
#else
    int nall = NCASES;
#endif
    for (int m = 0; m < 4 && ncases < nall; m++)
        for (int training = 0; training < 2; training++)
            for (int p = 0; p < 3; p++)
                for (int cl = 0; cl < 2; cl++) {
                    Case c = {models[m], training, precisions[p], cl};
                    int seen = 0;
                    for (int k = 0; k < 4; k++)
                        seen |= !strcmp(cases[k].model, c.model) && cases[k].training == training &&
                                cases[k].dtype == c.dtype && cases[k].channels_last == cl;
                    if (!seen)
                        cases[ncases++] = c;
                }
    Job jobs[NCASES] = {0};
    int n = 0;
    for (int c = 0; c < ncases; c++) {
        Graph g;
        FusePlan plan;
        CtErr err;
        Job *j = &jobs[n];
        snprintf(j->name, sizeof j->name, "%s %s %s%s", cases[c].model, cases[c].training ? "train" : "eval",
                 ct_dtype_name(cases[c].dtype), cases[c].channels_last ? " channels_last" : "");
        GraphSpec gs = {.training = cases[c].training, .amp = cases[c].dtype, .channels_last = cases[c].channels_last,
                        .opt = &adamw};
        if (model_graph(cases[c].model, &gs, &g))
            continue;
        if (fuse_plan(&g, &plan, &err) == 0) {
            int ok = render_graph(&g, &plan, 1, &j->src, &j->nkernels, &err) == 0;
            CHECKF(ok, "%s: %s", j->name, err.msg);
            n += ok;
            fuse_free(&plan);
        } else {
            CHECKF(0, "%s: %s", j->name, err.msg);
        }
        graph_free(&g);
    }
    CHECK(n == nall);
    pthread_t th[2];
    Worker w[2];
    for (int t = 0; t < 2; t++) {
        w[t] = (Worker){nc, cache, jobs, n, t};
        CT_ASSERT(pthread_create(&th[t], NULL, compile_jobs, &w[t]) == 0);
    }
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    for (int k = 0; k < n; k++) {
        Job *j = &jobs[k];
        CHECKF(j->rc == 0, "%s: %s", j->name, j->err.msg);
        CHECK(j->rc || (!j->img.is_ptx && j->img.size > 4 && !memcmp(j->img.data, "\177ELF", 4)));
        printf("%s: %d kernels, %zu-byte %s (%s)\n", j->name, j->nkernels, j->rc ? 0 : j->img.size,
               j->img.is_ptx ? "PTX" : "cubin", j->rc ? "-" : j->img.options);
        buf_free(&j->src);
    }
}

/* An architecture newer than NVRTC knows: PTX of the newest it does. */
static void test_ptx_fallback(const NvrtcCompiler *nc, KernelCache *cache)
{
    NvrtcImage img;
    CtErr err;
    int rc = nvrtc_compile(nc, cache, "extern \"C\" __global__ void k(float *x) { x[0] = 1; }\n", 999, &img, &err);
    CHECKF(rc == 0, "%s", err.msg);
    CHECKF(rc || (img.is_ptx && strstr(img.options, "compute_") && img.size > 0 &&
                  strstr((const char *)img.data, ".entry k")),
           "%s", img.options);
}

static void test_error(const NvrtcCompiler *nc, KernelCache *cache)
{
    NvrtcImage img;
    CtErr err;
    fprintf(stderr, "(a compile error on purpose follows)\n");
    int rc = nvrtc_compile(nc, cache, "extern \"C\" __global__ void k(float *x) { x[0] = undefined_name; }\n", 90,
                           &img, &err);
    CHECKF(rc == -1 && strstr(err.msg, "undefined_name"), "%s", rc ? err.msg : "compiled");
}

int main(void)
{
    NvrtcCompiler nc;
    KernelCache cache;
    CtErr err;
    if (nvrtc_init(&nc, &err)) {
        CHECKF(0, "%s", err.msg);
        return check_done("test_nvrtc");
    }
    CHECK(cache_open(&cache, &(CacheOptions){.no_cache = 1}, &err) == 0);
    test_models(&nc, &cache);
    test_ptx_fallback(&nc, &cache);
    test_error(&nc, &cache);
    cache_close(&cache);
    return check_done("test_nvrtc");
}
