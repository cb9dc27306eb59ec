/* Kernel cache: memory and disk hits with zero compiles, every key part
 * counted, corrupt entries recompiled and replaced, env-var resolution,
 * --no-cache, an unusable directory (in memory, said once), the
 * forbid-compile switch, threads and two processes sharing one directory.
 * Works in a mkdtemp directory under /tmp, removed at the end. */
#include "ir/cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/check.h"

/* The fake compiler: the binary is "bin:" + target + ":" + source, so a
 * result can be checked against the parts that asked for it. */
typedef struct Compiler {
    int calls;
    int fail;
} Compiler;

static char *fake_binary(const CacheKeyParts *p, size_t *n)
{
    size_t len = 4 + strlen(p->target) + 1 + strlen(p->source);
    char *b = malloc(len + 1);
    snprintf(b, len + 1, "bin:%s:%s", p->target, p->source);
    *n = len;
    return b;
}

static int fake_compile(void *ctx, const CacheKeyParts *p, void **blob, size_t *n, CtErr *err)
{
    Compiler *cc = ctx;
    __atomic_fetch_add(&cc->calls, 1, __ATOMIC_SEQ_CST);
    if (cc->fail)
        return ct_fail(err, "fake compiler: syntax error");
    *blob = fake_binary(p, n);
    return 0;
}

static int blob_ok(const CacheKeyParts *p, const void *blob, size_t n)
{
    size_t en;
    char *want = fake_binary(p, &en);
    int ok = blob && n == en && memcmp(blob, want, n) == 0;
    free(want);
    return ok;
}

static CacheKeyParts parts_for(const char *src)
{
    return (CacheKeyParts){.source = src, .target = "sm_90", .compiler = "nvrtc",
                           .compiler_version = "12.4.131", .options = "-O3 --use_fast_math"};
}

/* One get with a fresh Compiler; returns the compile count (or -1 on error)
 * and checks the binary. */
static int get_count(KernelCache *c, const CacheKeyParts *p)
{
    Compiler cc = {0};
    const void *blob;
    size_t n;
    CtErr err;
    if (cache_get(c, p, fake_compile, &cc, &blob, &n, &err)) {
        fprintf(stderr, "cache_get: %s\n", err.msg);
        return -1;
    }
    CHECK(blob_ok(p, blob, n));
    return cc.calls;
}

static int open_dir(KernelCache *c, const char *dir, int forbid)
{
    CtErr err;
    CacheOptions o = {.dir = dir, .forbid_compile = forbid};
    if (cache_open(c, &o, &err)) {
        fprintf(stderr, "cache_open: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Counts entries in dir; *bad gets the number of names that are not 32 hex
 * digits (temp files left behind, strays). */
static int count_entries(const char *dir, int *bad)
{
    DIR *d = opendir(dir);
    int n = 0;
    *bad = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        n++;
        if (strlen(e->d_name) != 32 || strspn(e->d_name, "0123456789abcdef") != 32)
            (*bad)++;
    }
    closedir(d);
    return n;
}

static void entry_file(const char *dir, const CacheKeyParts *p, char *path, size_t cap)
{
    CacheKey k;
    char hex[33];
    CHECK(cache_key(p, &k, NULL) == 0);
    cache_key_hex(&k, hex);
    snprintf(path, cap, "%.4000s/%s", dir, hex);
}

static long read_file(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    long n = (long)fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void write_file(const char *path, const unsigned char *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(buf, 1, n, f) == n);
        fclose(f);
    }
}

static void test_memory_and_disk(const char *dir)
{
    KernelCache c;
    CacheKeyParts p = parts_for("__global__ void k(float *x) { x[0] = 1; }");
    if (open_dir(&c, dir, 0))
        { CHECK(0); return; }
    CHECK(get_count(&c, &p) == 1);
    CHECK(get_count(&c, &p) == 0); /* memory hit */
    CacheStats s = cache_stats(&c);
    CHECK(s.compiles == 1 && s.mem_hits == 1 && s.disk_hits == 0 && s.corrupt == 0 && s.write_failures == 0);
    cache_close(&c);

    if (open_dir(&c, dir, 1)) /* fresh context, compiling forbidden */
        { CHECK(0); return; }
    CHECK(get_count(&c, &p) == 0);
    CHECK(get_count(&c, &p) == 0);
    s = cache_stats(&c);
    CHECK(s.compiles == 0 && s.disk_hits == 1 && s.mem_hits == 1);
    cache_close(&c);
}

static void test_key_parts(const char *dir)
{
    KernelCache c;
    if (open_dir(&c, dir, 0))
        { CHECK(0); return; }
    CacheKeyParts base = parts_for("void k(void) {}");
    CHECK(get_count(&c, &base) == 1);
    CacheKeyParts v[6];
    for (int i = 0; i < 6; i++)
        v[i] = base;
    v[0].source = "void k(void) { }";
    v[1].target = "sm_80";
    v[2].compiler_version = "12.4.99";
    v[3].options = "-O2 --use_fast_math";
    v[4].codegen_version = "ctimm-codegen-0";
    v[5].compiler = "nvcc";
    for (int i = 0; i < 6; i++)
        CHECKF(get_count(&c, &v[i]) == 1, "part %d", i);
    /* Explicit default codegen version is the same key as NULL. */
    CacheKeyParts same = base;
    same.codegen_version = CACHE_CODEGEN_VERSION;
    CHECK(get_count(&c, &same) == 0);
    /* Length prefixes: moving bytes between parts changes the key. */
    CacheKeyParts a = base, b = base;
    a.target = "sm_9";
    a.compiler = "0nvrtc";
    b.target = "sm_90";
    b.compiler = "nvrtc";
    CacheKey ka, kb;
    CHECK(cache_key(&a, &ka, NULL) == 0 && cache_key(&b, &kb, NULL) == 0);
    CHECK(memcmp(ka.bytes, kb.bytes, 16) != 0);
    cache_close(&c);
}

enum { CORRUPT_PAYLOAD, CORRUPT_TRUNCATE, CORRUPT_SOURCE, CORRUPT_GARBAGE, CORRUPT_EMPTY, CORRUPT_HEADER_LEN, NCORRUPT };

static void test_corruption(const char *dir)
{
    static const char *names[NCORRUPT] = {"payload", "truncate", "source", "garbage", "empty", "header length"};
    for (int kind = 0; kind < NCORRUPT; kind++) {
        char src[128], path[4200];
        snprintf(src, sizeof src, "__global__ void corrupt_%d(float *x) { x[%d] = 2; }", kind, kind);
        CacheKeyParts p = parts_for(src);
        KernelCache c;
        if (open_dir(&c, dir, 0))
            { CHECK(0); return; }
        CHECK(get_count(&c, &p) == 1);
        cache_close(&c);

        entry_file(dir, &p, path, sizeof path);
        unsigned char buf[4096];
        long n = read_file(path, buf, sizeof buf);
        CHECK(n > 64);
        if (n <= 64)
            continue;
        switch (kind) {
        case CORRUPT_PAYLOAD: buf[n - 1] ^= 0x01; break;
        case CORRUPT_TRUNCATE: n -= 5; break;
        case CORRUPT_SOURCE: {
            unsigned char *s = NULL;
            size_t sl = strlen(src);
            for (long i = 0; i + (long)sl <= n && !s; i++)
                if (!memcmp(buf + i, src, sl))
                    s = buf + i;
            CHECK(s != NULL);
            if (s)
                s[sl - 3] = '3'; /* x[k] = 3 */
            break;
        }
        case CORRUPT_GARBAGE:
            for (long i = 0; i < n; i++)
                buf[i] = (unsigned char)(i * 131 + 7);
            break;
        case CORRUPT_EMPTY: n = 0; break;
        case CORRUPT_HEADER_LEN: buf[40] ^= 0x04; break; /* payload length */
        }
        write_file(path, buf, (size_t)n);

        if (open_dir(&c, dir, 0))
            { CHECK(0); return; }
        CHECKF(get_count(&c, &p) == 1, "%s", names[kind]);
        CacheStats s = cache_stats(&c);
        CHECKF(s.corrupt == 1 && s.compiles == 1 && s.disk_hits == 0, "%s", names[kind]);
        cache_close(&c);

        /* Replaced by a good entry: a fresh context hits without compiling. */
        if (open_dir(&c, dir, 1))
            { CHECK(0); return; }
        CHECKF(get_count(&c, &p) == 0, "%s", names[kind]);
        s = cache_stats(&c);
        CHECKF(s.disk_hits == 1 && s.corrupt == 0, "%s", names[kind]);
        cache_close(&c);
    }
}

static void test_env(const char *root)
{
    char a[4200], xdg[4200], home[4200], out[4200], want[4300];
    snprintf(a, sizeof a, "%s/env-a", root);
    snprintf(xdg, sizeof xdg, "%s/env-xdg", root);
    snprintf(home, sizeof home, "%s/env-home", root);
    CtErr err;
    KernelCache c;

    setenv("CTIMM_CACHE_DIR", a, 1);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("HOME", home, 1);
    CHECK(cache_dir_from_env(out, sizeof out, &err) == 0 && !strcmp(out, a));
    CHECK(cache_open(&c, NULL, &err) == 0);
    CHECK(c.dir && !strcmp(c.dir, a));
    struct stat st;
    CHECK(stat(a, &st) == 0 && S_ISDIR(st.st_mode));
    cache_close(&c);

    unsetenv("CTIMM_CACHE_DIR");
    snprintf(want, sizeof want, "%s/ctimm", xdg);
    CHECK(cache_open(&c, NULL, &err) == 0);
    CHECK(c.dir && !strcmp(c.dir, want));
    cache_close(&c);

    setenv("CTIMM_CACHE_DIR", "", 1); /* empty counts as unset */
    setenv("XDG_CACHE_HOME", "relative/path", 1); /* relative: ignored, per XDG */
    snprintf(want, sizeof want, "%s/.cache/ctimm", home);
    CHECK(cache_open(&c, NULL, &err) == 0);
    CHECK(c.dir && !strcmp(c.dir, want));
    CHECK(stat(want, &st) == 0 && S_ISDIR(st.st_mode)); /* parents made too */
    cache_close(&c);

    /* The caller's directory wins over the environment. */
    setenv("CTIMM_CACHE_DIR", a, 1);
    CacheOptions o = {.dir = xdg};
    CHECK(cache_open(&c, &o, &err) == 0);
    CHECK(c.dir && !strcmp(c.dir, xdg));
    cache_close(&c);

    unsetenv("CTIMM_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    CHECK(cache_dir_from_env(out, sizeof out, &err) == -1);
    CHECK(strstr(err.msg, "CTIMM_CACHE_DIR") != NULL);
}

static void test_no_cache(const char *root)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/nocache", root);
    KernelCache c;
    CtErr err;
    CacheOptions o = {.dir = dir, .no_cache = 1};
    CHECK(cache_open(&c, &o, &err) == 0);
    CacheKeyParts p = parts_for("void nc(void) {}");
    CHECK(get_count(&c, &p) == 1);
    CHECK(get_count(&c, &p) == 1);
    CacheStats s = cache_stats(&c);
    CHECK(s.compiles == 2 && s.mem_hits == 0 && s.disk_hits == 0);
    cache_close(&c);
    struct stat st;
    CHECK(stat(dir, &st) != 0); /* no disk touched */
}

static void test_forbid_and_errors(const char *dir)
{
    KernelCache c;
    CtErr err;
    if (open_dir(&c, dir, 1))
        { CHECK(0); return; }
    CacheKeyParts p = parts_for("void never_compiled(void) {}");
    Compiler cc = {0};
    const void *blob;
    size_t n;
    CHECK(cache_get(&c, &p, fake_compile, &cc, &blob, &n, &err) == -1);
    CHECK(cc.calls == 0 && strstr(err.msg, "forbidden") != NULL);
    /* Switched off, the same key compiles once; a failing compile is an
     * error and is retried by the next request, not remembered. */
    c.forbid_compile = 0;
    cc.fail = 1;
    CHECK(cache_get(&c, &p, fake_compile, &cc, &blob, &n, &err) == -1);
    CHECK(cc.calls == 1 && strstr(err.msg, "syntax error") != NULL);
    cc.fail = 0;
    CHECK(cache_get(&c, &p, fake_compile, &cc, &blob, &n, &err) == 0 && blob_ok(&p, blob, n));
    CHECK(cc.calls == 2);
    CHECK(cache_stats(&c).compiles == 1);
    cache_close(&c);
}

/* What cache_warn_disk prints for c with the flag *warned. */
static char *warning_of(KernelCache *c, int *warned)
{
    static char text[2048];
    FILE *f = tmpfile();
    CHECK(f != NULL);
    text[0] = 0;
    if (!f)
        return text;
    cache_warn_disk(c, warned, f);
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    return text;
}

/* A cache folder that cannot be used (a regular file, a path under one; a
 * folder where writes fail, read-only or full, simulated by a file put in
 * its place after the open) keeps the kernels in memory and says so in one
 * line, once for all the caches that share one flag; a usable folder and
 * --no-cache say nothing. */
static void test_unusable_dir(const char *root)
{
    char file[4200], under[4300], gone[4200];
    snprintf(file, sizeof file, "%s/a-file", root);
    snprintf(under, sizeof under, "%s/sub", file);
    snprintf(gone, sizeof gone, "%s/replaced", root);
    write_file(file, (const unsigned char *)"x", 1);
    KernelCache c;
    CtErr err;
    int warned = 0;
    CacheKeyParts p = parts_for("void unusable(void) {}");

    setenv("CTIMM_CACHE_DIR", file, 1);
    CHECK(cache_open(&c, NULL, &err) == -1 && strstr(err.msg, "is not a directory")); /* without the fallback */
    CHECK(cache_open(&c, &(CacheOptions){.memory_fallback = 1}, &err) == 0);
    unsetenv("CTIMM_CACHE_DIR");
    CHECK(c.dir == NULL && strstr(c.disk_err.msg, file) && strstr(c.disk_err.msg, "is not a directory"));
    CHECK(get_count(&c, &p) == 1);
    CHECK(get_count(&c, &p) == 0); /* in memory */
    char *w = warning_of(&c, &warned);
    CHECKF(strstr(w, file) && strstr(w, "CTIMM_CACHE_DIR") && strchr(w, '\n') == w + strlen(w) - 1, "%s", w);
    CHECK(warned && !*warning_of(&c, &warned));
    cache_close(&c);

    CHECK(cache_open(&c, &(CacheOptions){.dir = under, .memory_fallback = 1}, &err) == 0);
    CHECKF(c.dir == NULL && strstr(c.disk_err.msg, under) && strstr(c.disk_err.msg, "Not a directory"), "%s",
           c.disk_err.msg);
    CHECK(!*warning_of(&c, &warned)); /* said once already */
    int fresh = 0;
    CHECK(*warning_of(&c, &fresh));
    cache_close(&c);

    CHECK(cache_open(&c, &(CacheOptions){.dir = gone, .memory_fallback = 1}, &err) == 0 && c.dir);
    warned = 0;
    CHECK(!*warning_of(&c, &warned));
    rmdir(gone);
    write_file(gone, (const unsigned char *)"x", 1);
    CHECK(get_count(&c, &p) == 1);
    CHECK(cache_stats(&c).write_failures == 1);
    w = warning_of(&c, &warned);
    CHECKF(strstr(w, gone) && strstr(w, "CTIMM_CACHE_DIR"), "%s", w);
    cache_close(&c);

    CHECK(cache_open(&c, &(CacheOptions){.no_cache = 1}, &err) == 0);
    warned = 0;
    CHECK(get_count(&c, &p) == 1 && !*warning_of(&c, &warned));
    cache_close(&c);
}

/* Threads asking for the same few keys: one compile per key. */
#define NTHREADS 8
#define NTKEYS 16
typedef struct ThreadArg {
    KernelCache *c;
    Compiler *cc;
    int ok;
} ThreadArg;

static void *thread_main(void *p)
{
    ThreadArg *a = p;
    a->ok = 1;
    for (int round = 0; round < 4; round++)
        for (int k = 0; k < NTKEYS; k++) {
            char src[64];
            snprintf(src, sizeof src, "void thr_%d(void) {}", k);
            CacheKeyParts parts = parts_for(src);
            const void *blob;
            size_t n;
            CtErr err;
            if (cache_get(a->c, &parts, fake_compile, a->cc, &blob, &n, &err) || !blob_ok(&parts, blob, n))
                a->ok = 0;
        }
    return NULL;
}

static void test_threads(const char *dir)
{
    KernelCache c;
    if (open_dir(&c, dir, 0))
        { CHECK(0); return; }
    Compiler cc = {0};
    pthread_t t[NTHREADS];
    ThreadArg a[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        a[i] = (ThreadArg){&c, &cc, 0};
        CHECK(pthread_create(&t[i], NULL, thread_main, &a[i]) == 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(t[i], NULL);
        CHECK(a[i].ok);
    }
    CHECK(cc.calls == NTKEYS);
    CacheStats s = cache_stats(&c);
    CHECK(s.compiles == NTKEYS && s.mem_hits == NTHREADS * 4 * NTKEYS - NTKEYS);
    cache_close(&c);
}

/* Two processes, each with fresh contexts round after round, on shared and
 * own keys; then every entry must verify. */
#define NSHARED 24
#define NOWN 8
#define NROUNDS 3

static void key_src(char *src, size_t cap, int proc, int k)
{
    if (proc < 0)
        snprintf(src, cap, "void shared_%d(void) {}", k);
    else
        snprintf(src, cap, "void own_%d_%d(void) {}", proc, k);
}

static int child(const char *dir, int proc, int start_fd)
{
    char go;
    if (read(start_fd, &go, 1) < 0) /* returns 0 when the parent closes it */
        return 1;
    int bad = 0;
    for (int round = 0; round < NROUNDS; round++) {
        KernelCache c;
        CtErr err;
        CacheOptions o = {.dir = dir};
        if (cache_open(&c, &o, &err))
            return 1;
        for (int k = 0; k < NSHARED + NOWN; k++) {
            char src[64];
            key_src(src, sizeof src, k < NSHARED ? -1 : proc, k);
            CacheKeyParts p = parts_for(src);
            Compiler cc = {0};
            const void *blob;
            size_t n;
            if (cache_get(&c, &p, fake_compile, &cc, &blob, &n, &err) || !blob_ok(&p, blob, n))
                bad++;
        }
        if (cache_stats(&c).corrupt)
            bad++;
        cache_close(&c);
    }
    return bad ? 1 : 0;
}

static void test_processes(const char *dir)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(fds[1]);
            _exit(child(dir, i, fds[0]));
        }
        CHECK(pids[i] > 0);
    }
    close(fds[0]);
    close(fds[1]); /* both start now */
    for (int i = 0; i < 2; i++) {
        int st = 0;
        CHECK(waitpid(pids[i], &st, 0) == pids[i]);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d status %d", i, st);
    }

    KernelCache c;
    if (open_dir(&c, dir, 1))
        { CHECK(0); return; }
    for (int proc = -1; proc < 2; proc++)
        for (int k = proc < 0 ? 0 : NSHARED; k < (proc < 0 ? NSHARED : NSHARED + NOWN); k++) {
            char src[64];
            key_src(src, sizeof src, proc, k);
            CacheKeyParts p = parts_for(src);
            CHECK(get_count(&c, &p) == 0);
        }
    CacheStats s = cache_stats(&c);
    CHECK(s.disk_hits == NSHARED + 2 * NOWN && s.corrupt == 0 && s.compiles == 0);
    cache_close(&c);
    int bad;
    CHECK(count_entries(dir, &bad) == NSHARED + 2 * NOWN);
    CHECK(bad == 0);
}

static void subdir(char *out, size_t cap, const char *root, const char *name)
{
    snprintf(out, cap, "%s/%s", root, name);
}

/* A measurement that, while it runs, sees another process store its own
 * result for the same key (the other cache object plays that process). */
typedef struct Race {
    KernelCache *other;
    const char *mine, *theirs;
} Race;

static int store_one(void *ctx, const CacheKeyParts *p, void **blob, size_t *n, CtErr *err)
{
    (void)p;
    (void)err;
    *blob = strdup(ctx);
    *n = strlen(ctx);
    return 0;
}

static int racing_measure(void *ctx, const CacheKeyParts *p, void **blob, size_t *n, CtErr *err)
{
    Race *r = ctx;
    const void *b;
    size_t bn;
    if (cache_get(r->other, p, store_one, (void *)r->theirs, &b, &bn, err))
        return -1;
    *blob = strdup(r->mine);
    *n = strlen(r->mine);
    return 0;
}

/* first_wins: the entry stored first stands, and the process that measured
 * meanwhile takes it; without it the last writer's replaces it. */
static void test_first_wins(const char *root)
{
    for (int first = 0; first < 2; first++) {
        char dir[4200];
        subdir(dir, sizeof dir, root, first ? "first-wins" : "last-wins");
        KernelCache a, b;
        CtErr err;
        CHECK(cache_open(&a, &(CacheOptions){.dir = dir, .first_wins = first}, &err) == 0);
        CHECK(cache_open(&b, &(CacheOptions){.dir = dir, .first_wins = first}, &err) == 0);
        CacheKeyParts p = parts_for("conv2d [8,64,56,56]");
        Race r = {&b, "own", "onednn"};
        const void *got;
        size_t n;
        CHECK(cache_get(&a, &p, racing_measure, &r, &got, &n, &err) == 0);
        const char *want = first ? "onednn" : "own";
        CHECKF(n == strlen(want) && !memcmp(got, want, n), "first_wins=%d: got %.*s", first, (int)n, (const char *)got);
        cache_close(&a);
        cache_close(&b);
        KernelCache c;
        CHECK(cache_open(&c, &(CacheOptions){.dir = dir, .forbid_compile = 1}, &err) == 0);
        CHECK(cache_get(&c, &p, store_one, "x", &got, &n, &err) == 0);
        CHECKF(n == strlen(want) && !memcmp(got, want, n), "on disk: %.*s", (int)n, (const char *)got);
        cache_close(&c);
        int bad;
        CHECKF(count_entries(dir, &bad) == 1 && bad == 0, "%s: temporary files left", dir);
    }
}

int main(void)
{
    char root[] = "/tmp/ctimm-test-cache-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    char dir[4200];
    int bad, n;

    subdir(dir, sizeof dir, root, "basic");
    test_memory_and_disk(dir);
    test_key_parts(dir);
    test_forbid_and_errors(dir);
    n = count_entries(dir, &bad);
    CHECKF(n == 9 && bad == 0, "%d entries, %d bad names", n, bad);

    subdir(dir, sizeof dir, root, "corrupt");
    test_corruption(dir);
    n = count_entries(dir, &bad);
    CHECKF(n == NCORRUPT && bad == 0, "%d entries, %d bad names", n, bad);

    subdir(dir, sizeof dir, root, "threads");
    test_threads(dir);

    subdir(dir, sizeof dir, root, "procs");
    test_processes(dir);

    test_first_wins(root);
    test_no_cache(root);
    test_unusable_dir(root);
    test_env(root); /* last: it changes HOME and friends */

    test_rm_tree(root);
    return check_done("test_cache");
}
