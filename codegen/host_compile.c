/* Contract: host_compile(source) gives a loaded module of that source as
 * compiled by `cc HOST_CC_OPTIONS`, compiling only on a cache miss; the
 * compile runs in a private mkdtemp directory that is removed afterwards,
 * and the object is loaded from a private temporary file unlinked as soon
 * as it is mapped. */
#define _GNU_SOURCE /* RTLD_NOLOAD, RTLD_NODELETE */
#include "codegen/host_compile.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* The first line of a command's output into out ("" when none). */
static void first_line(const char *cmd, char *out, size_t cap)
{
    out[0] = 0;
    FILE *f = popen(cmd, "r");
    if (!f)
        return;
    if (fgets(out, (int)cap, f))
        out[strcspn(out, "\n")] = 0;
    while (fgetc(f) != EOF)
        ;
    pclose(f);
}

int host_compiler_init(HostCompiler *hc, CtErr *err)
{
    memset(hc, 0, sizeof *hc);
    snprintf(hc->cc, sizeof hc->cc, "cc");
    first_line("cc --version 2>/dev/null", hc->version, sizeof hc->version);
    if (!hc->version[0])
        return ct_fail(err, "no C compiler: `cc --version` failed (install gcc) for the cpu backend's kernels");
    struct utsname u;
    char cpu[256] = "";
    first_line("grep -m1 '^model name' /proc/cpuinfo 2>/dev/null", cpu, sizeof cpu);
    snprintf(hc->target, sizeof hc->target, "host-%s-%s", uname(&u) == 0 ? u.machine : "unknown",
             strchr(cpu, ':') ? strchr(cpu, ':') + 2 : "unknown");
    const char *t = getenv("TMPDIR");
    /* the compile command quotes its paths with ' */
    snprintf(hc->tmpdir, sizeof hc->tmpdir, "%s", t && t[0] == '/' && !strchr(t, '\'') ? t : "/tmp");
    return 0;
}

/* A whole file into a malloc'd blob; -1 when it cannot be read. */
static int read_all(const char *path, void **blob, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int rc = -1;
    long len;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        *blob = malloc((size_t)len);
        CT_ASSERT(*blob != NULL);
        if (fread(*blob, 1, (size_t)len, f) == (size_t)len) {
            *n = (size_t)len;
            rc = 0;
        } else {
            free(*blob);
        }
    }
    fclose(f);
    return rc;
}

static int write_all(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The cache's compile callback: source -> shared object bytes. */
static int compile_cc(void *ctx, const CacheKeyParts *parts, void **blob, size_t *n, CtErr *err)
{
    const HostCompiler *hc = ctx;
    char dir[300], src[340], obj[340], log[340], cmd[1400];
    snprintf(dir, sizeof dir, "%s/ctimm-cc-XXXXXX", hc->tmpdir);
    if (!mkdtemp(dir))
        return ct_fail(err, "cannot make a temporary directory under %s for the C compiler", hc->tmpdir);
    snprintf(src, sizeof src, "%s/kernels.c", dir);
    snprintf(obj, sizeof obj, "%s/kernels.so", dir);
    snprintf(log, sizeof log, "%s/cc.log", dir);
    int rc = -1;
    if (write_all(src, parts->source, strlen(parts->source))) {
        ct_fail(err, "cannot write %s", src);
        goto remove_dir;
    }
    snprintf(cmd, sizeof cmd, "%s %s -o '%s' '%s' -lm > '%s' 2>&1", hc->cc, parts->options, obj, src, log);
    if (system(cmd) != 0) {
        void *text = NULL;
        size_t len = 0;
        read_all(log, &text, &len);
        ct_fail(err, "%s failed on the generated kernels: %.*s", hc->cc, (int)(len < 400 ? len : 400),
                text ? (const char *)text : "(no output)");
        free(text);
        goto remove_files;
    }
    if (read_all(obj, blob, n)) {
        ct_fail(err, "%s produced no readable %s", hc->cc, obj);
        goto remove_files;
    }
    rc = 0;
remove_files:
    unlink(obj);
    unlink(log);
    unlink(src);
remove_dir:
    rmdir(dir);
    return rc;
}

/* dlopen of a blob: written to a private file, mapped, unlinked. */
static int load_blob(const HostCompiler *hc, const void *blob, size_t n, HostModule *m, CtErr *err)
{
    char path[300];
    snprintf(path, sizeof path, "%s/ctimm-so-XXXXXX", hc->tmpdir);
    int fd = mkstemp(path);
    if (fd < 0)
        return ct_fail(err, "cannot make a temporary file under %s for a kernel object", hc->tmpdir);
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)blob + done, n - done);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    close(fd);
    m->dl = done == n ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    unlink(path);
    if (!m->dl)
        return ct_fail(err, "cannot load the compiled kernels: %s", done == n ? dlerror() : "short write");
    /* OpenMP's idle worker threads outlive a module: its runtime, loaded
     * with the first one where the program does not link it, must never be
     * unloaded with the last */
    dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}

int host_compile(const HostCompiler *hc, KernelCache *cache, const char *source, HostModule *m, CtErr *err)
{
    m->dl = NULL;
    CacheKeyParts parts = {.source = source, .target = hc->target, .compiler = hc->cc,
                           .compiler_version = hc->version, .options = HOST_CC_OPTIONS};
    const void *blob;
    size_t n;
    if (cache_get(cache, &parts, compile_cc, (void *)hc, &blob, &n, err))
        return -1;
    return load_blob(hc, blob, n, m, err);
}

/* The pool's context: where each unit's module goes. */
typedef struct UnitsCtx {
    const HostCompiler *hc;
    KernelCache *cache;
    HostModule *mods;
} UnitsCtx;

static int compile_unit(void *ctx, int unit, const char *source, CtErr *err)
{
    UnitsCtx *c = ctx;
    return host_compile(c->hc, c->cache, source, &c->mods[unit], err);
}

int host_compile_units(const HostCompiler *hc, KernelCache *cache, const KernelUnits *u, HostModule *mods, CtErr *err)
{
    UnitsCtx c = {hc, cache, mods};
    for (int j = 0; j < u->n; j++)
        mods[j].dl = NULL;
    if (units_compile(u, compile_unit, &c, err) == 0)
        return 0;
    for (int j = 0; j < u->n; j++)
        host_module_close(&mods[j]);
    return -1;
}

HostKernelFn host_kernel(const HostModule *m, int launch)
{
    char name[32];
    snprintf(name, sizeof name, "ct_k%d", launch);
    void *sym = dlsym(m->dl, name);
    HostKernelFn fn;
    memcpy(&fn, &sym, sizeof fn); /* object to function pointer, as POSIX allows */
    return fn;
}

void host_module_close(HostModule *m)
{
    if (m->dl)
        dlclose(m->dl);
    m->dl = NULL;
}
