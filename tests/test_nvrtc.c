/* NVRTC (built only with the CUDA toolkit; no GPU needed): every generated
 * CUDA kernel of the four test models (test_resnet, test_vit,
 * test_efficientnet, test_convnext), eval and training graphs, f32 and amp
 * f16 and bf16, NCHW and channels-last, and of a full-size model of each
 * family as the GPU trains it (amp f16, channels-last), compiles for sm_90 to
 * a cubin (the sanitizer build: four of the test models' 48 graphs), in
 * translation units as the cuda backend makes them (codegen/units.h), of
 * all the graphs' kernels together, so each distinct kernel text compiles
 * once however many graphs have it (the graphs share most), two units at a
 * time; an architecture past NVRTC's gets PTX; a broken source fails with
 * NVRTC's log in the message. */
#include <string.h>

#include "check.h"
#include "codegen/nvrtc.h"
#include "codegen/render.h"
#include "codegen/units.h"
#include "model_graphs.h"

typedef struct Case {
    const char *model;
    int training;
    CtDType dtype;
    int channels_last;
} Case;

/* c's graph's kernels appended to *all (its lowering checked): 0 or -1. */
static int add_kernels(const Case *c, KirKernel **all, int *nall, int *cap)
{
    static const OptimSpec adamw = {
        .kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05};
    char name[64];
    snprintf(name, sizeof name, "%s %s %s%s", c->model, c->training ? "train" : "eval", ct_dtype_name(c->dtype),
             c->channels_last ? " channels_last" : "");
    GraphSpec gs = {.training = c->training, .amp = c->dtype, .channels_last = c->channels_last, .opt = &adamw};
    Graph g;
    FusePlan plan;
    CtErr err;
    int rc = -1;
    if (model_graph(c->model, &gs, &g))
        return -1;
    if (fuse_plan(&g, &plan, &err) == 0) {
        if (*nall + plan.kernels_after + 1 > *cap) {
            *cap = 2 * (*nall + plan.kernels_after + 1);
            *all = realloc(*all, sizeof **all * (size_t)*cap);
            CT_ASSERT(*all != NULL);
        }
        KirKernel *k = *all + *nall;
        memset(k, 0, sizeof *k * (size_t)plan.kernels_after);
        rc = 0;
        for (int l = 0; l < plan.kernels_after && !rc; l++)
            if (kir_lowerable(&plan, l) && kir_lower(&g, &plan, l, (KirOptions){KIR_F32, 1}, &k[l], &err))
                rc = -1;
        CHECKF(rc == 0, "%s: %s", name, err.msg);
        for (int l = 0; l < plan.kernels_after; l++) /* named by their place among all the graphs' */
            k[l].launch = *nall + l;
        *nall += plan.kernels_after;
        fuse_free(&plan);
    } else {
        CHECKF(0, "%s: %s", name, err.msg);
    }
    graph_free(&g);
    return rc;
}

/* The graphs are rendered here, then their units compiled as the backend
 * compiles them (nvrtc_compile_units: in parallel, the cache shared). */
static void test_models(const NvrtcCompiler *nc, KernelCache *cache)
{
    enum { NCASES = 48 };
    /* first the four the sanitizer build compiles: the conv nets' graphs as the
     * GPU trains them (--amp --channels-last) and an eval graph */
    Case cases[NCASES] = {
        {"test_resnet", 1, CT_F16, 1}, {"test_efficientnet", 1, CT_F16, 1}, {"test_convnext", 1, CT_BF16, 1},
        {"test_convnext", 0, CT_F32, 0},
    };
    static const char *const models[] = {"test_resnet", "test_vit", "test_efficientnet", "test_convnext"};
    static const CtDType precisions[] = {CT_F32, CT_F16, CT_BF16};
    int ncases = 4;
#ifdef __SANITIZE_ADDRESS__
    /* NVRTC itself is not instrumented: the sanitizer build checks ctimm's side
     * (rendering, the cache from two threads, loading the results) on four graphs */
    int nall = 4, zoo = 0;
#else
    int nall = NCASES, zoo = 1;
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
    CHECK(ncases == nall);
    KirKernel *all = NULL;
    int nall_k = 0, cap = 0, graphs = 0;
    for (int c = 0; c < ncases; c++)
        graphs += add_kernels(&cases[c], &all, &nall_k, &cap) == 0;
    /* a full-size model of each family, as the GPU trains it (--amp,
     * channels-last): what the test models lack (mobilenetv3's hard
     * activations, resnet50d's average-pool shortcut, reductions over
     * hundreds of channels, MixNet's mixed kernels), and test models of
     * the families whose kernels the four lack (weight standardisation,
     * EvoNorm's group statistics, MAP attention pooling, a relative position
     * MLP's bias gathered into attention); each adds its own
     * shapes' kernels, so the whole zoo would take minutes */
    static const char *const zoo_models[] = {"resnet50d",     "vit_tiny_patch16_224", "efficientnet_b0",
                                             "mobilenetv3_large_100", "convnext_tiny", "mixnet_s",
                                             "test_nfnet", "test_efficientnet_evos", "test_vit3",
                                             "test_vit_relpos"};
    enum { NZOO = sizeof zoo_models / sizeof *zoo_models };
    for (int m = 0; zoo && m < NZOO; m++) {
        Case c = {zoo_models[m], 1, CT_F16, 1};
        graphs += add_kernels(&c, &all, &nall_k, &cap) == 0;
        nall++;
    }
    CHECKF(graphs == nall, "%d of %d graphs rendered", graphs, nall);
    KernelUnits u;
    CtErr err = {{0}};
    units_make(all, nall_k, UNIT_LOOPS, 1, &u);
    for (int l = 0; l < nall_k; l++)
        kir_free(&all[l]);
    free(all);
    NvrtcImage *imgs = calloc((size_t)u.n + 1, sizeof *imgs);
    CT_ASSERT(imgs != NULL);
    CHECKF(nvrtc_compile_units(nc, cache, &u, 90, imgs, &err) == 0, "%s", err.msg);
    for (int k = 0; k < u.n; k++) {
        const NvrtcImage *img = &imgs[k];
        CHECKF(!img->is_ptx && img->size > 4 && !memcmp(img->data, "\177ELF", 4), "unit %d of %d", k + 1, u.n);
        printf("unit %d of %d: %zu-byte %s (%s)\n", k + 1, u.n, img->size, img->is_ptx ? "PTX" : "cubin",
               img->options);
    }
    int nkernels = u.nkernels, ndistinct = u.ndistinct, njobs = u.n;
    units_free(&u);
    free(imgs);
    printf("%d graphs: %d kernels, %d distinct, in %d translation units\n", graphs, nkernels, ndistinct, njobs);
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
