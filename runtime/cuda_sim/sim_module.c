/* Contract: sim_module_build gives a loaded module of the source behind
 * the prelude, with a launch entry per kernel named, compiled by the C++
 * compiler through the kernel cache (only on a miss).
 *
 * The harness stands where the driver does: like cuModuleLoadData with PTX,
 * loading a module compiles it. That is why this one file of the runtime
 * includes a compiler (codegen/host_compile.h: the same spawning, cache
 * and loading as the cpu backend's kernels), an exception
 * tests/CMakeLists.txt's runtime_includes_only_the_program names. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/host_compile.h"
#include "ir/buf.h"
#include "runtime/cuda_sim/sim_internal.h"

/* made at build time from runtime/cuda_sim/sim_abi.h and sim_prelude.h */
extern const char ct_sim_abi_text[];
extern const char ct_sim_prelude_text[];

/* -O1: kernels compile in a fraction of -O2's time and run fast enough.
 * No FMA contraction, as the ref kernels. Under ASan the kernels are
 * instrumented too, so their accesses to guarded memory are caught, and
 * carry line tables, so the report says where (kernels.cu:<line>). */
#define SIM_CXX_OPTIONS_BASE "-std=c++17 -O1 -fPIC -shared -fno-exceptions -ffp-contract=off"
#if SIM_ASAN
#define SIM_CXX_OPTIONS SIM_CXX_OPTIONS_BASE " -fsanitize=address -fno-omit-frame-pointer -g1"
#else
#define SIM_CXX_OPTIONS SIM_CXX_OPTIONS_BASE
#endif

/* The process's C++ compiler and kernel cache, made by the first build:
 * sim_module_build takes no context, as cuModuleLoadData takes none. */
static struct {
    pthread_once_t once;
    int rc;
    CtErr err;
    HostCompiler hc;
    KernelCache cache;
} compiler = {.once = PTHREAD_ONCE_INIT};

static void compiler_init(void)
{
    compiler.rc = host_cxx_init(&compiler.hc, SIM_CXX_OPTIONS, &compiler.err);
    compiler.hc.keep_objects = SIM_ASAN; /* ASan's reports then name the kernels */
    if (compiler.rc == 0)
        compiler.rc = cache_open(&compiler.cache, &(CacheOptions){.memory_fallback = 1}, &compiler.err);
}

int sim_source_waits(const char *source)
{
    /* every barrier and warp intrinsic but __activemask ends in _sync or
     * starts with __sync; a name like async_copy matches too, and only
     * costs the fibers */
    return strstr(source, "_sync") || strstr(source, "__activemask");
}

static int is_identifier(const char *s)
{
    if (!*s || (*s >= '0' && *s <= '9') || strlen(s) > 200)
        return 0;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

/* The translation unit: ABI, prelude, the source, a launch entry per kernel. */
static int module_text(const char *source, const char *const *names, int n, CtBuf *out, CtErr *err)
{
    buf_printf(out, "%s\n%s\n#line 1 \"kernels.cu\"\n%s\n#line 1 \"ctimm-sim-entries\"\n", ct_sim_abi_text,
               ct_sim_prelude_text, source);
    for (int i = 0; i < n; i++) {
        if (!is_identifier(names[i]))
            return ct_fail(err, "\"%.100s\" is not a kernel's name", names[i]);
        buf_printf(out, "extern \"C\" __attribute__((visibility(\"default\"))) void %s__sim(void **p) "
                        "{ ct_sim_call(%s, p); }\n", names[i], names[i]);
    }
    return 0;
}

int sim_module_build(const char *source, const char *const *names, int n, SimModule **out, CtErr *err)
{
    *out = NULL;
    pthread_once(&compiler.once, compiler_init);
    if (compiler.rc) {
        if (err)
            *err = compiler.err;
        return -1;
    }
    CtBuf text = {0};
    if (module_text(source, names, n, &text, err)) {
        buf_free(&text);
        return -1;
    }
    HostModule *hm = malloc(sizeof *hm);
    if (!hm) {
        buf_free(&text);
        return ct_fail(err, "out of memory for a module");
    }
    int rc = host_compile(&compiler.hc, &compiler.cache, text.s, hm, err);
    buf_free(&text);
    if (rc) {
        free(hm);
        ct_failctx(err, "the SIMT harness's module");
        return rc;
    }
    SimModule *m = calloc(1, sizeof *m);
    if (!m || !(m->kernels = calloc((size_t)(n > 0 ? n : 1), sizeof *m->kernels))) {
        free(m);
        host_module_close(hm);
        free(hm);
        return ct_fail(err, "out of memory for a module of %d kernels", n);
    }
    m->so = hm;
    m->dl = hm->dl;
    pthread_mutex_init(&m->mu, NULL);
    m->fibers = sim_source_waits(source);
    void (*bind)(CtSimCtx *);
    void *sym = dlsym(m->dl, "ct_sim_bind");
    memcpy(&bind, &sym, sizeof bind); /* object to function pointer, as POSIX allows */
    if (!bind) {
        sim_module_free(m);
        return ct_fail(err, "the SIMT harness's module has no ct_sim_bind (not built behind its prelude?)");
    }
    bind(&m->ctx);
    for (int i = 0; i < n; i++, m->nkernels++) {
        char entry[300];
        snprintf(entry, sizeof entry, "%s__sim", names[i]);
        sym = dlsym(m->dl, entry);
        memcpy(&m->kernels[i].entry, &sym, sizeof m->kernels[i].entry);
        m->kernels[i].name = strdup(names[i]);
        if (!sym || !m->kernels[i].name) {
            m->nkernels++;
            sim_module_free(m);
            return ct_fail(err, "the SIMT harness's module has no entry %s", entry);
        }
    }
    *out = m;
    return 0;
}

void sim_module_free(SimModule *m)
{
    if (!m)
        return;
    sim_fiber_pool_free(&m->pool);
    host_module_close(m->so);
    free(m->so);
    for (int i = 0; i < m->nkernels; i++)
        free(m->kernels[i].name);
    free(m->kernels);
    pthread_mutex_destroy(&m->mu);
    free(m);
}
