/* Contract: cuda_compile(g) makes the launch plan of g and an image of
 * every kernel it launches for one target, or fails saying why; nothing
 * of it refers to g afterwards. */
#include "codegen/cuda/cuda_program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/lib_source.h"
#include "codegen/cuda/roofline.h"
#include "codegen/units.h"
#include "ir/ops.h"
/* The bit of the library unit (LibType) defining `kernel`. */
static unsigned lib_bit(const char *kernel)
{
    int t = lib_kernel_type(kernel);
    CT_ASSERT(t >= 0);
    return 1u << t;
}

/* The library units (a bit per LibType) that the plan's launches use. */
static unsigned lib_types_used(const LaunchPlan *lp)
{
    unsigned used = 0;
    for (int s = 0; s < lp->nsteps; s++) {
        const LpStep *st = &lp->steps[s];
        for (int j = 0; j < st->nlib + st->nfallback; j++)
            used |= lib_bit(j < st->nlib ? st->lib[j].kernel : st->fallback[j - st->nlib].kernel);
        if (st->mirrored)
            used |= lib_bit(st->mirror.kernel);
    }
    return used;
}

#ifdef CTIMM_HAVE_NVRTC
#include "codegen/nvrtc.h"

/* The cache's image as the program keeps it. */
static void keep_image(const NvrtcImage *img, CudaImage *out)
{
    const char *arch = strchr(img->options, '=');
    out->data = malloc(img->size);
    CT_ASSERT(out->data != NULL);
    memcpy(out->data, img->data, img->size);
    out->size = img->size;
    out->is_ptx = img->is_ptx;
    arch = arch ? arch + 1 : img->options;
    snprintf(out->arch, sizeof out->arch, "%.*s", (int)strcspn(arch, " "), arch);
}

/* The generated kernels' translation units, compiled in parallel, and the
 * library units the plan uses, for sm_<cc>. */
static int compile_images(CudaProgram *c, int cc, int *cache_warned, CtErr *err)
{
    NvrtcCompiler nc;
    KernelCache cache;
    KernelUnits units;
    if (nvrtc_init(&nc, err) || cache_open(&cache, &(CacheOptions){.memory_fallback = 1}, err))
        return -1;
    units_make(c->lp.k, c->lp.nk, UNIT_LOOPS, 1, &units);
    NvrtcImage *imgs = calloc((size_t)units.n + 1, sizeof *imgs);
    CT_ASSERT(imgs != NULL);
    int rc = nvrtc_compile_units(&nc, &cache, &units, cc, imgs, err);
    unsigned used = lib_types_used(&c->lp);
    for (int t = 0; rc == 0 && t < LIB_NTYPES; t++) {
        if (!(used >> t & 1))
            continue;
        CtBuf src = {0};
        NvrtcImage lib;
        lib_source((LibType)t, &src);
        rc = nvrtc_compile(&nc, &cache, src.s, cc, &lib, err);
        if (rc == 0)
            keep_image(&lib, &c->lib[t]);
        buf_free(&src);
    }
    if (rc == 0) {
        c->nunits = units.n;
        c->units = calloc((size_t)units.n + 1, sizeof *c->units);
        c->unit = malloc(sizeof *c->unit * (size_t)(c->lp.nk + 1));
        c->fn = malloc(sizeof *c->fn * (size_t)(c->lp.nk + 1));
        CT_ASSERT(c->units && c->unit && c->fn);
        for (int j = 0; j < units.n; j++)
            keep_image(&imgs[j], &c->units[j]);
        if (c->lp.nk) {
            memcpy(c->unit, units.unit, sizeof *c->unit * (size_t)c->lp.nk);
            memcpy(c->fn, units.fn, sizeof *c->fn * (size_t)c->lp.nk);
        }
    }
    int said = 0;
    cache_warn_disk(&cache, cache_warned ? cache_warned : &said, stderr);
    cache_close(&cache);
    free(imgs);
    units_free(&units);
    return rc;
}
#else
static int compile_images(CudaProgram *c, int cc, int *cache_warned, CtErr *err)
{
    return ct_fail(err, "this ctimm was built without NVRTC (the CUDA toolkit was not found at configure time): "
                        "nothing compiles for the cuda target");
}
#endif

static void keep_source(const char *text, CudaImage *out)
{
    out->size = strlen(text) + 1;
    out->data = malloc(out->size);
    CT_ASSERT(out->data != NULL);
    memcpy(out->data, text, out->size);
    out->is_source = 1;
    snprintf(out->arch, sizeof out->arch, "source");
}

/* The images as the units' and the used library units' sources. */
static void keep_sources(CudaProgram *c)
{
    KernelUnits units;
    units_make(c->lp.k, c->lp.nk, UNIT_LOOPS, 1, &units);
    c->nunits = units.n;
    c->units = calloc((size_t)units.n + 1, sizeof *c->units);
    c->unit = malloc(sizeof *c->unit * (size_t)(c->lp.nk + 1));
    c->fn = malloc(sizeof *c->fn * (size_t)(c->lp.nk + 1));
    CT_ASSERT(c->units && c->unit && c->fn);
    for (int j = 0; j < units.n; j++)
        keep_source(units.src[j].s, &c->units[j]);
    if (c->lp.nk) {
        memcpy(c->unit, units.unit, sizeof *c->unit * (size_t)c->lp.nk);
        memcpy(c->fn, units.fn, sizeof *c->fn * (size_t)c->lp.nk);
    }
    unsigned used = lib_types_used(&c->lp);
    for (int t = 0; t < LIB_NTYPES; t++)
        if (used >> t & 1) {
            CtBuf src = {0};
            lib_source((LibType)t, &src);
            keep_source(src.s, &c->lib[t]);
            buf_free(&src);
        }
    units_free(&units);
}

int cuda_compile(const Graph *g, int cc, int sms, int sources, int *cache_warned, CudaProgram *c, CtErr *err)
{
    memset(c, 0, sizeof *c);
    if (launch_plan(g, sms, &c->lp, err))
        return -1;
    for (int s = 0; s < c->lp.nsteps; s++)
        if (c->lp.steps[s].kind == LP_UNSUPPORTED)
            return ct_fail(err, "the cuda backend has no kernel for %s yet", c->lp.steps[s].op);
    if (sources) {
        keep_sources(c);
        return 0;
    }
    return compile_images(c, cc, cache_warned, err);
}

void cuda_program_free(CudaProgram *c)
{
    for (int j = 0; j < c->nunits; j++)
        free(c->units[j].data);
    free(c->units);
    free(c->unit);
    free(c->fn);
    for (int t = 0; t < LIB_NTYPES; t++)
        free(c->lib[t].data);
    launch_plan_free(&c->lp);
    memset(c, 0, sizeof *c);
}

/* What step st runs, after "step N: ". */
static void dump_step(const CudaProgram *c, const Graph *g, const LpStep *st, CtBuf *out)
{
    static const char *const dirs[] = {"forward", "backward-data", "backward-filter"};
    const FuseStep *fs = &c->lp.fuse.steps[st->fuse_step];
    switch (st->kind) {
    case LP_KERNEL:
        buf_printf(out, "kernel ct_k%d of unit %d, %u x %u", c->fn[st->launch], c->unit[st->launch], st->grid,
                   st->block);
        break;
    case LP_GEMM:
        buf_printf(out, "cuBLASLt GEMM %lldx%lldx%lld, batch %lld", (long long)st->gemm.m, (long long)st->gemm.n,
                   (long long)st->gemm.k, (long long)st->gemm.batch);
        break;
    case LP_CONV:
        buf_printf(out, "cuDNN convolution %s%s%s", dirs[st->conv.dir], st->mirrored ? ", NHWC filter copy" : "",
                   st->conv.stats >= 0 ? ", its batch norm's sums" : "");
        break;
    case LP_LIB:
        buf_printf(out, "library");
        break;
    case LP_COPY:
        buf_printf(out, "copy %%%d into %%%d", st->copy_src, st->copy_dst);
        break;
    case LP_UNSUPPORTED:
        buf_printf(out, "no kernel for %s", st->op);
        break;
    }
    for (int j = 0; j < st->nlib; j++)
        buf_printf(out, "%s%s", j ? " " : st->kind == LP_LIB ? " " : ", then ", st->lib[j].kernel);
    if (st->twin)
        buf_printf(out, "; cuDNN twin: convolution %s%s", dirs[st->conv.dir], st->nfallback ? ", then" : "");
    if (st->kind == LP_CONV && st->nfallback)
        buf_printf(out, "; without them from the call:");
    for (int j = 0; (st->twin || st->kind == LP_CONV) && j < st->nfallback; j++)
        buf_printf(out, " %s", st->fallback[j].kernel);
    for (int k = 0; k <= st->span; k++)
        for (int j = 0; j < fs[k].n; j++)
            buf_printf(out, "%s%s", k || j ? " " : " (", op_def(g->nodes[c->lp.fuse.nodes[fs[k].first + j]].op)->name);
    buf_printf(out, ")\n");
}

/* "image unit 0: 1234 bytes, sm_90 cubin" (or compute_89 PTX, or CUDA C source) */
static void dump_image(const char *what, const CudaImage *img, CtBuf *out)
{
    buf_printf(out, "image %s: %zu bytes, %s%s%s\n", what, img->size, img->is_source ? "" : img->arch,
               img->is_source ? "" : " ", img->is_source ? "CUDA C source" : img->is_ptx ? "PTX" : "cubin");
}

const char *cuda_program_floors(const CudaProgram *c, const Graph *g, const char *gpu, int allow_tf32,
                                double *floor_s)
{
    RooflineDevice d;
    if (roofline_device_of(gpu, &d))
        return NULL;
    roofline_floors(&c->lp, g, &d, allow_tf32, floor_s);
    return d.name; /* a literal of roofline.c's table */
}

void cuda_program_dump(const CudaProgram *c, const Graph *g, CtBuf *out)
{
    const LaunchPlan *lp = &c->lp;
    int kernels = 0, distinct = 0;
    for (int l = 0; l < lp->nk; l++) {
        kernels += c->unit[l] >= 0;
        distinct += c->unit[l] >= 0 && c->fn[l] == l;
    }
    buf_printf(out, "steps: %d (%d generated kernels, %d distinct, in %d translation unit%s), device block %zu bytes, "
                    "scratch %zu bytes\n",
               lp->nsteps, kernels, distinct, c->nunits, c->nunits == 1 ? "" : "s", lp->device_bytes,
               lp->scratch_bytes);
    for (int s = 0; s < lp->nsteps; s++) {
        buf_printf(out, "step %d: ", s);
        dump_step(c, g, &lp->steps[s], out);
    }
    for (int j = 0; j < c->nunits; j++) {
        char what[32];
        snprintf(what, sizeof what, "unit %d", j);
        dump_image(what, &c->units[j], out);
    }
    static const char *const types[LIB_NTYPES] = {"library f32", "library f16", "library bf16"};
    for (int t = 0; t < LIB_NTYPES; t++)
        if (c->lib[t].size)
            dump_image(types[t], &c->lib[t], out);
}
