/* Contract: nvrtc_compile(source, sm) gives a cubin for sm_<sm>, or PTX
 * for the newest older architecture NVRTC supports, compiling only on a
 * cache miss; errors carry NVRTC's log.
 *
 * Threads: nvrtc_compile_units calls NVRTC from several threads at once,
 * each on its own program, with no lock of ours. NVRTC allows that: up to
 * CUDA 11.4 it serialised concurrent compiles with a global lock of its
 * own; since 11.5 it takes locks per compilation stage, so compiles of
 * different programs from different threads overlap (NVIDIA, "Reducing
 * Application Build Times Using CUDA C++ Compilation Aids",
 * developer.nvidia.com/blog, CUDA 11.5, section "Concurrent compilation").
 * Measured with NVRTC 13.0 on 2 cores: vit_base_patch32_384's --amp
 * step, 5 units on 2 threads, compiles in 6.3 s, against 10.4 s as one
 * unit, for about the same CPU time (9.9 s and 10.1 s).
 */
#include "codegen/nvrtc.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nvrtc_init(NvrtcCompiler *nc, CtErr *err)
{
    int major, minor;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
        return ct_fail(err, "NVRTC does not answer its version (is libnvrtc from the CUDA toolkit installed?)");
    snprintf(nc->version, sizeof nc->version, "%d.%d", major, minor);
    return 0;
}

/* The architecture to ask NVRTC for: sm itself when supported (*ptx = 0),
 * else the newest supported one below it (*ptx = 1); -1 when none. */
static int pick_arch(int sm, int *ptx)
{
    int n = 0, best = -1;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0)
        return -1;
    int *archs = malloc(sizeof *archs * (size_t)n);
    CT_ASSERT(archs != NULL);
    if (nvrtcGetSupportedArchs(archs) == NVRTC_SUCCESS)
        for (int k = 0; k < n; k++)
            if (archs[k] <= sm && archs[k] > best)
                best = archs[k];
    free(archs);
    *ptx = best != sm;
    return best;
}

/* The source with line numbers, then the log, on stderr. */
static void print_failure(const char *source, const char *log)
{
    int line = 1;
    flockfile(stderr); /* whole, when two units fail at once */
    fprintf(stderr, "ctimm: NVRTC could not compile the generated CUDA C:\n%5d  ", line);
    for (const char *p = source; *p; p++) {
        fputc(*p, stderr);
        if (*p == '\n' && p[1])
            fprintf(stderr, "%5d  ", ++line);
    }
    fprintf(stderr, "\n%s\n", log);
    funlockfile(stderr);
}

static int compile_nvrtc(void *ctx, const CacheKeyParts *parts, void **blob, size_t *n, CtErr *err)
{
    char words[sizeof ((NvrtcImage *)0)->options], *opts[4], *save;
    int nopts = 0, ptx = strstr(parts->options, "compute_") != NULL, rc = -1;
    snprintf(words, sizeof words, "%s", parts->options); /* NVRTC takes an option a string */
    for (char *w = strtok_r(words, " ", &save); w && nopts < 4; w = strtok_r(NULL, " ", &save))
        opts[nopts++] = w;
    nvrtcProgram prog;
    nvrtcResult res;
    /* the options after the architecture only speed the compile up
     * (--split-compile): an NVRTC that does not know them compiles the
     * same image without */
    for (;; nvrtcDestroyProgram(&prog), nopts = 1) {
        if (nvrtcCreateProgram(&prog, parts->source, "ctimm_kernels.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
            return ct_fail(err, "NVRTC could not create a program");
        res = nvrtcCompileProgram(prog, nopts, (const char *const *)opts);
        if (res != NVRTC_ERROR_INVALID_OPTION || nopts == 1)
            break;
    }
    size_t log_size = 0, size = 0;
    nvrtcGetProgramLogSize(prog, &log_size);
    char *log = calloc(log_size + 1, 1);
    CT_ASSERT(log != NULL);
    nvrtcGetProgramLog(prog, log);
    if (res != NVRTC_SUCCESS) {
        print_failure(parts->source, log);
        ct_fail(err, "NVRTC (%s): %s: %.300s", parts->options, nvrtcGetErrorString(res), log);
        goto free_log;
    }
    if ((ptx ? nvrtcGetPTXSize(prog, &size) : nvrtcGetCUBINSize(prog, &size)) != NVRTC_SUCCESS || size == 0) {
        ct_fail(err, "NVRTC (%s) produced no %s", parts->options, ptx ? "PTX" : "cubin");
        goto free_log;
    }
    *blob = malloc(size);
    CT_ASSERT(*blob != NULL);
    if ((ptx ? nvrtcGetPTX(prog, *blob) : nvrtcGetCUBIN(prog, *blob)) != NVRTC_SUCCESS) {
        free(*blob);
        ct_fail(err, "NVRTC (%s) could not hand over its output", parts->options);
        goto free_log;
    }
    *n = size;
    rc = 0;
free_log:
    free(log);
    nvrtcDestroyProgram(&prog);
    return rc;
}

/* A compile of its own (split) runs NVRTC's optimizer on every core
 * (--split-compile=0): the library kernels (then one unit of all three
 * storage types) took nvcc 13.0 107 s on one thread of a 2-core host and
 * 56 s split, every kernel with the same registers and spills; the units'
 * pool compiles one unit a core instead. */
static int compile_image(const NvrtcCompiler *nc, KernelCache *cache, const char *source, int sm, int split,
                         NvrtcImage *img, CtErr *err)
{
    memset(img, 0, sizeof *img);
    int arch = pick_arch(sm, &img->is_ptx);
    if (arch < 0)
        return ct_fail(err, "NVRTC %s supports no architecture at or below sm_%d", nc->version, sm);
    snprintf(img->options, sizeof img->options, "--gpu-architecture=%s_%d%s", img->is_ptx ? "compute" : "sm", arch,
             split ? " --split-compile=0" : "");
    char target[16];
    snprintf(target, sizeof target, "sm_%d", sm);
    CacheKeyParts parts = {.source = source, .target = target, .compiler = "nvrtc", .compiler_version = nc->version,
                           .options = img->options};
    return cache_get(cache, &parts, compile_nvrtc, NULL, &img->data, &img->size, err);
}

int nvrtc_compile(const NvrtcCompiler *nc, KernelCache *cache, const char *source, int sm, NvrtcImage *img,
                  CtErr *err)
{
    return compile_image(nc, cache, source, sm, 1, img, err);
}

/* The pool's context: where each unit's image goes. */
typedef struct UnitsCtx {
    const NvrtcCompiler *nc;
    KernelCache *cache;
    int sm;
    NvrtcImage *imgs;
} UnitsCtx;

static int compile_unit(void *ctx, int unit, const char *source, CtErr *err)
{
    UnitsCtx *c = ctx;
    return compile_image(c->nc, c->cache, source, c->sm, 0, &c->imgs[unit], err);
}

int nvrtc_compile_units(const NvrtcCompiler *nc, KernelCache *cache, const KernelUnits *u, int sm, NvrtcImage *imgs,
                        CtErr *err)
{
    UnitsCtx c = {nc, cache, sm, imgs};
    return units_compile(u, compile_unit, &c, err);
}
