/* The host compiler's process and files (codegen/host_compile.h): a raised
 * stop flag ends a compile under way at once (CT_INTERRUPTED, cc's process
 * group gone, its folder removed) and starts none; the thread pool passes
 * the interrupt up over other units' errors; temporary files that killed
 * processes left are recognised by their pid and age and removed at
 * start, under TMPDIR and in the kernel cache, and nothing else is; the
 * target, part of every key, follows the instruction set -march=native
 * gives (cc's predefined macros), not just the CPU's name. Works in a
 * mkdtemp folder under /tmp with a CTIMM_CC wrapper script. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "codegen/host_compile.h"

static const char *const source = "void ct_k0(void *const *a) { (void)a; }\n";

static void pause_10ms(void) { nanosleep(&(struct timespec){0, 10000000}, NULL); }

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Whether a process of group pgid is alive (zombies are not). */
static int group_alive(pid_t pgid)
{
    DIR *d = opendir("/proc");
    int alive = 0;
    if (!d)
        return kill(-pgid, 0) == 0;
    for (struct dirent *e; !alive && (e = readdir(d));) {
        char path[300], buf[512], state;
        int ppid, pgrp;
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')'); /* the command name may hold anything */
        alive = p && sscanf(p + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == pgid && state != 'Z';
    }
    closedir(d);
    return alive;
}

/* A pid that no process has: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

/* Sets a file's modification time `age` seconds back. */
static void age_file(const char *path, double age)
{
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= (time_t)age;
    t[1] = t[0];
    CHECK(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW) == 0);
}

/* --- the stop flag ---------------------------------------------------------- */

typedef struct Raiser {
    const char *marker; /* the wrapper writes its pid here when it starts a compile */
    volatile sig_atomic_t *stop;
} Raiser;

static void *raise_when_compiling(void *arg)
{
    Raiser *r = arg;
    for (int i = 0; i < 3000 && !exists(r->marker); i++)
        pause_10ms();
    *r->stop = SIGINT;
    return NULL;
}

/* A compile that sleeps a minute, ended by the flag: CT_INTERRUPTED within
 * seconds, nothing left under tmpdir, the wrapper's group gone; a raised
 * flag starts no compile; a lowered one compiles again. */
static void test_stop(const char *root)
{
    char tmp[600], wrapper[600], marker[600], script[2000];
    snprintf(tmp, sizeof tmp, "%s/tmp", root);
    snprintf(wrapper, sizeof wrapper, "%s/slow-cc", root);
    snprintf(marker, sizeof marker, "%s/compiling", root);
    CHECK(mkdir(tmp, 0755) == 0);
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "case \" $* \" in *\" -o \"*) [ -e %s.off ] || { echo $$ > %s; sleep 60; } ;; esac\n"
             "exec cc \"$@\"\n",
             marker, marker);
    write_text(wrapper, script);
    CHECK(chmod(wrapper, 0755) == 0);
    setenv("CTIMM_CC", wrapper, 1);
    setenv("TMPDIR", tmp, 1);
    HostCompiler hc;
    CtErr err;
    int ok = host_compiler_init(&hc, &err) == 0;
    CHECKF(ok, "%s", err.msg);
    unsetenv("CTIMM_CC");
    unsetenv("TMPDIR");
    if (!ok)
        return;
    CHECK(!strcmp(hc.cc, wrapper) && !strcmp(hc.tmpdir, tmp));
    volatile sig_atomic_t stop = 0;
    hc.stop = &stop;
    KernelCache cache;
    HostModule m;
    CHECK(cache_open(&cache, &(CacheOptions){.no_cache = 1}, &err) == 0);

    Raiser r = {marker, &stop};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, raise_when_compiling, &r) == 0);
    double t0 = now();
    int rc = host_compile(&hc, &cache, source, &m, &err);
    double took = now() - t0;
    pthread_join(th, NULL);
    CHECKF(rc == CT_INTERRUPTED && strstr(err.msg, "interrupted"), "%d: %s", rc, err.msg);
    CHECKF(took < 10, "%.1f s", took);
    CHECK(m.dl == NULL);
    CHECKF(entries(tmp) == 0, "%d files left in %s", entries(tmp), tmp);
    FILE *f = fopen(marker, "r");
    int pgid = 0;
    CHECK(f && fscanf(f, "%d", &pgid) == 1 && pgid > 0);
    if (f)
        fclose(f);
    int gone = 0;
    for (int i = 0; i < 200 && !(gone = !group_alive(pgid)); i++)
        pause_10ms();
    CHECKF(gone, "the compiler's process group %d is still alive", pgid);

    /* raised before: nothing started */
    unlink(marker);
    CHECK(host_compile(&hc, &cache, source, &m, &err) == CT_INTERRUPTED);
    CHECK(!exists(marker) && entries(tmp) == 0);

    /* lowered: an ordinary compile (the wrapper now passes straight to cc) */
    char off[700];
    snprintf(off, sizeof off, "%s.off", marker);
    write_text(off, "");
    stop = 0;
    rc = host_compile(&hc, &cache, source, &m, &err);
    CHECKF(rc == 0 && m.dl && host_kernel(&m, 0), "%d: %s", rc, err.msg);
    host_module_close(&m);
    CHECK(entries(tmp) == 0);
    cache_close(&cache);
}

/* The pool's units: 1 is interrupted, 0 fails with an error once unit 1
 * has been taken (or after 2 s, where one thread runs them in turn). */
typedef struct PoolCase {
    int taken1;
} PoolCase;

static int pool_call(void *ctx, int unit, const char *src, CtErr *err)
{
    PoolCase *pc = ctx;
    (void)src;
    if (unit == 1) {
        __atomic_store_n(&pc->taken1, 1, __ATOMIC_SEQ_CST);
        ct_fail(err, "unit 1: interrupted");
        return CT_INTERRUPTED;
    }
    for (int i = 0; unit == 0 && i < 200 && !__atomic_load_n(&pc->taken1, __ATOMIC_SEQ_CST); i++)
        pause_10ms();
    return unit == 0 ? ct_fail(err, "unit 0: syntax error") : 0;
}

/* An interrupted unit outranks a lower unit's error: the user asked to stop. */
static void test_pool(void)
{
    CtBuf src[3] = {{0}};
    KernelUnits u = {.n = 3, .src = src};
    PoolCase pc = {0};
    CtErr err;
    for (int j = 0; j < 3; j++)
        buf_printf(&src[j], "unit %d", j);
    int rc = units_compile(&u, pool_call, &pc, &err);
    if (sysconf(_SC_NPROCESSORS_ONLN) > 1)
        CHECKF(rc == CT_INTERRUPTED && !strcmp(err.msg, "unit 1: interrupted"), "%d: %s", rc, err.msg);
    u.n = 1; /* an error alone stays one */
    CHECK(units_compile(&u, pool_call, &pc, &err) == -1 && !strcmp(err.msg, "unit 0: syntax error"));
    for (int j = 0; j < 3; j++)
        buf_free(&src[j]);
}

/* --- stale temporary files -------------------------------------------------- */

/* Under TMPDIR: a dead process's old folder and object go; its recent
 * ones, a live process's old ones and other names stay. */
static void test_stale_tmp(const char *root)
{
    char tmp[600], path[8][800];
    snprintf(tmp, sizeof tmp, "%s/stale", root);
    CHECK(mkdir(tmp, 0755) == 0);
    long dead = (long)dead_pid(), live = (long)getppid();
    snprintf(path[0], sizeof path[0], "%s/ctimm-cc-%ld-Ab12Cd", tmp, dead);   /* stale folder */
    snprintf(path[1], sizeof path[1], "%s/ctimm-so-%ld-Ef34Gh", tmp, dead);   /* stale object */
    snprintf(path[2], sizeof path[2], "%s/ctimm-cc-%ld-Ij56Kl", tmp, dead);   /* dead but recent */
    snprintf(path[3], sizeof path[3], "%s/ctimm-cc-%ld-Mn78Op", tmp, live);   /* old but alive */
    snprintf(path[4], sizeof path[4], "%s/ctimm-cc-XXXXXX", tmp);              /* no pid */
    snprintf(path[5], sizeof path[5], "%s/other-%ld-file", tmp, dead);         /* not ours */
    for (int k = 0; k < 6; k++) {
        if (k == 1 || k == 5) {
            write_text(path[k], "x");
        } else {
            char inner[sizeof path[k] + 32];
            CHECK(mkdir(path[k], 0700) == 0);
            snprintf(inner, sizeof inner, "%.790s/kernels.c", path[k]);
            write_text(inner, "int x;");
            snprintf(inner, sizeof inner, "%.790s/ccAbCdEf.s", path[k]); /* cc's own, its TMPDIR */
            write_text(inner, "");
        }
        if (k != 2)
            age_file(path[k], 2.0 * CACHE_STALE_SECONDS);
    }
    setenv("TMPDIR", tmp, 1);
    HostCompiler hc;
    CtErr err;
    CHECKF(host_compiler_init(&hc, &err) == 0, "%s", err.msg);
    unsetenv("TMPDIR");
    CHECK(!exists(path[0]) && !exists(path[1]));
    CHECK(exists(path[2]) && exists(path[3]) && exists(path[4]) && exists(path[5]));
}

/* In the cache folder: a dead writer's old temp entry goes; its recent one,
 * a live writer's and the entries stay. */
static void test_stale_cache(const char *root)
{
    char dir[600], path[4][800];
    snprintf(dir, sizeof dir, "%s/cache", root);
    CHECK(mkdir(dir, 0755) == 0);
    long dead = (long)dead_pid();
    const char *hex = "0123456789abcdef0123456789abcdef";
    snprintf(path[0], sizeof path[0], "%s/%s.tmp.%ld.Ab12Cd", dir, hex, dead);
    snprintf(path[1], sizeof path[1], "%s/%s.tmp.%ld.Ef34Gh", dir, hex, dead);
    snprintf(path[2], sizeof path[2], "%s/%s.tmp.%ld.Ij56Kl", dir, hex, (long)getppid());
    snprintf(path[3], sizeof path[3], "%s/%s", dir, hex);
    for (int k = 0; k < 4; k++) {
        write_text(path[k], "x");
        if (k != 1)
            age_file(path[k], 2.0 * CACHE_STALE_SECONDS);
    }
    KernelCache c;
    CtErr err;
    CHECK(cache_open(&c, &(CacheOptions){.dir = dir}, &err) == 0);
    cache_close(&c);
    CHECK(!exists(path[0]));
    CHECK(exists(path[1]) && exists(path[2]) && exists(path[3]));
}

/* --- the target --------------------------------------------------------------- */

static void test_target(void)
{
    static const char *const avx512 =
        "#define __AVX2__ 1\n#define __AVX512F__ 1\n#define __FMA__ 1\n#define __x86_64__ 1\n";
    static const char *const reordered = /* any order, blank lines, no newline at the end */
        "#define __x86_64__ 1\n#define __FMA__ 1\n\n#define __AVX512F__ 1\n#define __AVX2__ 1";
    static const char *const avx2 = "#define __AVX2__ 1\n#define __FMA__ 1\n#define __x86_64__ 1\n";
    char a[400], b[400], c[400];
    host_target_name("x86_64", "AMD EPYC", avx512, a, sizeof a);
    host_target_name("x86_64", "AMD EPYC", reordered, b, sizeof b);
    host_target_name("x86_64", "AMD EPYC", avx2, c, sizeof c);
    CHECKF(!strncmp(a, "host-x86_64-AMD EPYC-isa", 24) && strlen(a) == 24 + 16, "%s", a);
    CHECKF(!strcmp(a, b), "%s vs %s", a, b);
    CHECKF(strcmp(a, c) != 0, "%s", a);
    /* so the same CPU name with and without AVX-512 gives two cache keys */
    CacheKeyParts pa = {.source = source, .target = a, .compiler = "cc", .options = HOST_CC_OPTIONS};
    CacheKeyParts pb = pa, pc = pa;
    pb.target = b;
    pc.target = c;
    CacheKey ka, kb, kc;
    CHECK(cache_key(&pa, &ka, NULL) == 0 && cache_key(&pb, &kb, NULL) == 0 && cache_key(&pc, &kc, NULL) == 0);
    CHECK(!memcmp(ka.bytes, kb.bytes, 16) && memcmp(ka.bytes, kc.bytes, 16));
    /* this machine's: its macros' hash at the end */
    HostCompiler hc;
    CtErr err;
    if (host_compiler_init(&hc, &err) == 0) {
        const char *isa = strstr(hc.target, "-isa");
        CHECKF(isa && strlen(isa) == 4 + 16 && strspn(isa + 4, "0123456789abcdef") == 16, "%s", hc.target);
    }
}

int main(void)
{
    HostCompiler hc;
    CtErr err;
    if (host_compiler_init(&hc, &err)) {
        printf("test_host_compile: skipped: %s\n", err.msg);
        return 0;
    }
    char root[] = "/tmp/ctimm-test-host-compile-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_target();
    test_pool();
    test_stop(root);
    test_stale_tmp(root);
    test_stale_cache(root);
    test_rm_tree(root);
    return check_done("test_host_compile");
}
