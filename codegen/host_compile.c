/* Contract: host_compile(source) gives a loaded module of that source as
 * compiled by `cc <hc->options>` (HOST_CC_OPTIONS for C), compiling only
 * on a cache miss; the compile runs in a private mkdtemp directory that is
 * removed afterwards (at once when hc->stop is raised, cc's process group
 * killed first), and the object is loaded from a private temporary file
 * unlinked as soon as it is mapped (at host_module_close with
 * keep_objects). */
#define _GNU_SOURCE /* RTLD_NOLOAD, RTLD_NODELETE, pipe2 */
#include "codegen/host_compile.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

extern char **environ;

/* Words of a compiler command line: the compiler, the options, the rest. */
#define MAX_ARGS 40

static void pause_ms(long ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL); }

/* argv = cc, the words of options (split at spaces into buf), then extra
 * (NULL-terminated), NULL. */
static void make_argv(const char *cc, const char *options, char *buf, size_t cap, const char *const *extra,
                      char **argv)
{
    int n = 0;
    argv[n++] = (char *)cc;
    snprintf(buf, cap, "%s", options);
    char *save = NULL;
    for (char *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        CT_ASSERT(n < MAX_ARGS - 8);
        argv[n++] = w;
    }
    for (; *extra; extra++) {
        CT_ASSERT(n < MAX_ARGS - 1);
        argv[n++] = (char *)*extra;
    }
    argv[n] = NULL;
}

/* Starts argv (argv[0] found in PATH; no shell) in a process group of its
 * own, so that a terminal's Ctrl-C goes to ctimm alone, with stdin from
 * /dev/null, stdout and stderr into out_fd (-1: /dev/null), and TMPDIR=tmp
 * when tmp is not NULL. cxx: argv[0] is the C++ compiler (for the hint). */
static int spawn(char *const *argv, int cxx, int out_fd, const char *tmp, pid_t *pid, CtErr *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, dfl;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_init(&at);
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char **envp = environ, tmpvar[320];
    if (tmp) {
        size_t n = 0, k = 0;
        while (environ[n])
            n++;
        envp = malloc(sizeof *envp * (n + 2));
        CT_ASSERT(envp != NULL);
        for (size_t i = 0; i < n; i++)
            if (strncmp(environ[i], "TMPDIR=", 7))
                envp[k++] = environ[i];
        snprintf(tmpvar, sizeof tmpvar, "TMPDIR=%s", tmp);
        envp[k++] = tmpvar;
        envp[k] = NULL;
    }
    int e = posix_spawnp(pid, argv[0], &fa, &at, argv, envp);
    if (envp != environ)
        free(envp);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    if (e)
        return cxx ? ct_fail(err, "cannot run %s: %s (install g++, or set CTIMM_CXX to a C++ compiler)", argv[0],
                             strerror(e))
                   : ct_fail(err, "cannot run %s: %s (install gcc, or set CTIMM_CC to a C compiler)", argv[0],
                             strerror(e));
    return 0;
}

/* Waits for the child pid (what names it). While it runs, a raised *stop
 * kills its process group and reaps it: CT_INTERRUPTED. 0 when it exited
 * with status 0, else -1. */
static int wait_child(pid_t pid, const char *what, const volatile sig_atomic_t *stop, CtErr *err)
{
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, stop ? WNOHANG : 0);
        if (r == pid) {
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return 0;
            return WIFEXITED(st) ? ct_fail(err, "%s exited with status %d", what, WEXITSTATUS(st))
                                 : ct_fail(err, "%s was killed by signal %d", what, WTERMSIG(st));
        }
        if (r < 0 && errno != EINTR)
            return ct_fail(err, "cannot wait for %s: %s", what, strerror(errno));
        if (stop && *stop) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
            ct_fail(err, "interrupted: %s stopped", what);
            return CT_INTERRUPTED;
        }
        if (r == 0)
            pause_ms(5); /* a compile takes seconds: 5 ms of latency is nothing */
    }
}

/* What argv prints on stdout (malloc'd, NUL-terminated), or NULL when it
 * cannot be run or fails. */
static char *capture(char *const *argv, int cxx)
{
    int fds[2];
    pid_t pid;
    CtErr err;
    if (pipe2(fds, O_CLOEXEC))
        return NULL;
    int started = spawn(argv, cxx, fds[1], NULL, &pid, &err) == 0;
    close(fds[1]);
    size_t n = 0, cap = 4096;
    char *out = malloc(cap);
    CT_ASSERT(out != NULL);
    while (started) {
        ssize_t r = read(fds[0], out + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n + 1 == cap) {
            out = realloc(out, cap *= 2);
            CT_ASSERT(out != NULL);
        }
    }
    close(fds[0]);
    out[n] = 0;
    if (!started || wait_child(pid, argv[0], NULL, &err)) {
        free(out);
        return NULL;
    }
    return out;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* rm -rf dir. A process of cc's group killed a moment ago may still finish
 * the system call that makes a file: a few tries. */
static void remove_dir(const char *dir)
{
    struct stat st;
    for (int tries = 0; tries < 100 && lstat(dir, &st) == 0; tries++) {
        if (tries)
            pause_ms(10);
        nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    }
}

/* Removes what killed processes left under tmpdir: "ctimm-cc-<pid>-*"
 * folders and "ctimm-so-<pid>-*" objects of processes gone. */
static void remove_stale(const char *tmpdir)
{
    DIR *d = opendir(tmpdir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int folder = !strncmp(e->d_name, "ctimm-cc-", 9);
        char *end, path[600];
        struct stat st;
        if (!folder && strncmp(e->d_name, "ctimm-so-", 9))
            continue;
        long pid = strtol(e->d_name + 9, &end, 10);
        if (end == e->d_name + 9 || *end != '-' ||
            snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name) >= (int)sizeof path || lstat(path, &st) ||
            !(folder ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) || !cache_temp_stale(pid, &st))
            continue;
        if (folder)
            remove_dir(path);
        else
            unlink(path);
    }
    closedir(d);
}

static int by_string(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void host_target_name(const char *machine, const char *cpu_model, const char *macros, char *out, size_t cap)
{
    char *text = strdup(macros);
    size_t n = 0, lines = 1;
    for (const char *p = macros; *p; p++)
        lines += *p == '\n';
    char **line = malloc(sizeof *line * lines);
    CT_ASSERT(text && line);
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        line[n++] = l;
    qsort(line, n, sizeof *line, by_string); /* cc prints them in hash-table order */
    XXH3_state_t *h = XXH3_createState();
    CT_ASSERT(h != NULL);
    XXH3_64bits_reset(h);
    for (size_t i = 0; i < n; i++)
        XXH3_64bits_update(h, line[i], strlen(line[i]) + 1);
    snprintf(out, cap, "host-%s-%.200s-isa%016llx", machine, cpu_model, (unsigned long long)XXH3_64bits_digest(h));
    XXH3_freeState(h);
    free(line);
    free(text);
}

/* The compiler named by $env (else dflt), what it names for the messages
 * ("C", "C++"), its version and its target under hc->options. */
static int compiler_init(HostCompiler *hc, const char *env, const char *dflt, const char *what, CtErr *err)
{
    const char *cc = getenv(env);
    if (cc && strlen(cc) >= sizeof hc->cc)
        return ct_fail(err, "%s is %zu bytes long: name the %s compiler in fewer than %zu", env, strlen(cc), what,
                       sizeof hc->cc);
    snprintf(hc->cc, sizeof hc->cc, "%s", cc && *cc ? cc : dflt);
    const char *t = getenv("TMPDIR");
    snprintf(hc->tmpdir, sizeof hc->tmpdir, "%s", t && t[0] == '/' && strlen(t) < 200 ? t : "/tmp");
    char buf[512], *argv[MAX_ARGS];
    make_argv(hc->cc, "--version", buf, sizeof buf, (const char *const[]){NULL}, argv);
    char *version = capture(argv, hc->cxx);
    if (version)
        snprintf(hc->version, sizeof hc->version, "%.*s", (int)strcspn(version, "\n"), version);
    free(version);
    if (!hc->version[0])
        return hc->cxx ? ct_fail(err, "no C++ compiler: `%s --version` failed (install g++, or set CTIMM_CXX) for "
                                      "the SIMT harness's kernels", hc->cc)
                       : ct_fail(err, "no C compiler: `%s --version` failed (install gcc, or set CTIMM_CC) for the "
                                      "cpu backend's kernels", hc->cc);
    const char *const list_macros[] = {"-dM", "-E", "-x", hc->cxx ? "c++" : "c", "/dev/null", NULL};
    make_argv(hc->cc, hc->options, buf, sizeof buf, list_macros, argv);
    char *macros = capture(argv, hc->cxx);
    if (!macros || !strstr(macros, "#define")) {
        free(macros);
        return ct_fail(err, "`%s %s -dM -E -x %s /dev/null` listed no predefined macros: is %s a %s compiler like "
                            "%s?", hc->cc, hc->options, hc->cxx ? "c++" : "c", hc->cc, what, hc->cxx ? "g++" : "gcc");
    }
    struct utsname u;
    char cpu[256];
    host_cpu_model(cpu, sizeof cpu);
    host_target_name(uname(&u) == 0 ? u.machine : "unknown", cpu, macros, hc->target, sizeof hc->target);
    free(macros);
    remove_stale(hc->tmpdir);
    return 0;
}

int host_compiler_init(HostCompiler *hc, CtErr *err)
{
    memset(hc, 0, sizeof *hc);
    snprintf(hc->options, sizeof hc->options, "%s", HOST_CC_OPTIONS);
    return compiler_init(hc, "CTIMM_CC", "cc", "C", err);
}

int host_cxx_init(HostCompiler *hc, const char *options, CtErr *err)
{
    memset(hc, 0, sizeof *hc);
    hc->cxx = 1;
    if (strlen(options) >= sizeof hc->options)
        return ct_fail(err, "C++ compile options of %zu bytes: at most %zu", strlen(options), sizeof hc->options - 1);
    snprintf(hc->options, sizeof hc->options, "%s", options);
    return compiler_init(hc, "CTIMM_CXX", "c++", "C++", err);
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
    char dir[300], src[340], obj[340], log[340], buf[512], *argv[MAX_ARGS];
    if (hc->stop && *hc->stop) {
        ct_fail(err, "interrupted before %s started", hc->cc);
        return CT_INTERRUPTED;
    }
    snprintf(dir, sizeof dir, "%s/ctimm-cc-%ld-XXXXXX", hc->tmpdir, (long)getpid());
    if (!mkdtemp(dir))
        return ct_fail(err, "cannot make a temporary directory under %s for the C compiler: %s", hc->tmpdir,
                       strerror(errno));
    snprintf(src, sizeof src, "%s/kernels.%s", dir, hc->cxx ? "cc" : "c");
    snprintf(obj, sizeof obj, "%s/kernels.so", dir);
    snprintf(log, sizeof log, "%s/cc.log", dir);
    int rc = -1, fd = -1;
    pid_t pid;
    if (write_all(src, parts->source, strlen(parts->source))) {
        ct_fail(err, "cannot write %s", src);
        goto remove;
    }
    make_argv(hc->cc, parts->options, buf, sizeof buf, (const char *const[]){"-o", obj, src, "-lm", NULL}, argv);
    if ((fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        ct_fail(err, "cannot write %s: %s", log, strerror(errno));
        goto remove;
    }
    rc = spawn(argv, hc->cxx, fd, dir, &pid, err);
    close(fd);
    if (rc == 0 && (rc = wait_child(pid, hc->cc, hc->stop, err)) == -1) {
        void *text = NULL;
        size_t len = 0;
        read_all(log, &text, &len);
        ct_fail(err, "%s failed on the generated kernels: %.*s", hc->cc, (int)(len < 400 ? len : 400),
                text ? (const char *)text : "(no output)");
        free(text);
    }
    if (rc)
        goto remove;
    if (read_all(obj, blob, n))
        rc = ct_fail(err, "%s produced no readable %s", hc->cc, obj);
remove:
    remove_dir(dir);
    return rc;
}

/* dlopen of a blob: written to a private file, mapped, unlinked. */
static int load_blob(const HostCompiler *hc, const void *blob, size_t n, HostModule *m, CtErr *err)
{
    char path[300];
    snprintf(path, sizeof path, "%s/ctimm-so-%ld-XXXXXX", hc->tmpdir, (long)getpid());
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
    if (m->dl && hc->keep_objects)
        snprintf(m->path, sizeof m->path, "%s", path);
    else
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
    m->path[0] = 0;
    CacheKeyParts parts = {.source = source, .target = hc->target, .compiler = hc->cc,
                           .compiler_version = hc->version, .options = hc->options};
    const void *blob;
    size_t n;
    int rc = cache_get(cache, &parts, compile_cc, (void *)hc, &blob, &n, err);
    if (rc)
        return rc;
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
        mods[j] = (HostModule){0};
    int rc = units_compile(u, compile_unit, &c, err);
    if (rc == 0)
        return 0;
    for (int j = 0; j < u->n; j++)
        host_module_close(&mods[j]);
    return rc;
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
    if (m->path[0])
        unlink(m->path);
    m->dl = NULL;
    m->path[0] = 0;
}
