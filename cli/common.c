#include "cli/common.h"

#include "runtime/cuda/backend_cuda.h"

#include <errno.h>
#include <execinfo.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int cli_int(const char *prog, const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects a whole number from %d to %d, got '%s'\n", prog, opt, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

const char *cli_value(const char *prog, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_model_kwargs(const char *prog, const char *arg, int argc, char **argv, const char **kv, int *n)
{
    return cli_kwargs(prog, "--model-kwargs", CT_MAX_MODEL_KWARGS, arg, argc, argv, kv, n);
}

int cli_kwargs(const char *prog, const char *flag, int max, const char *arg, int argc, char **argv, const char **kv,
               int *n)
{
    for (const char *w = arg;;) {
        if (*n == max) {
            fprintf(stderr, "%s: %s takes at most %d KEY=VALUE words\n", prog, flag, max);
            return -1;
        }
        kv[(*n)++] = w;
        if (optind >= argc || argv[optind][0] == '-' || !strchr(argv[optind], '='))
            return 0;
        w = argv[optind++];
    }
}

int cli_model_options(const char *prog, const char *gp, const char *const *kv, int n, const ScriptKwarg *passed,
                      const char *script, ModelArgs *a)
{
    CtErr err;
    if (model_kwargs_gp(gp, a, &err) || model_kwargs_parse(kv, n, passed, script, a, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return -1;
    }
    return 0;
}

const ModelEntry *cli_model(const char *prog, const char *name)
{
    const ModelEntry *m = model_find(name);
    if (m)
        return m;
    const char *close[5];
    int n = model_suggest(name, close, 5);
    fprintf(stderr, "%s: unknown model '%s'; closest:", prog, name);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s %s", i ? "," : "", close[i]);
    fprintf(stderr, " (--list-models shows all)\n");
    return NULL;
}

int cli_bytes(const char *prog, const char *opt, const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    double mult = 1;
    if (*end == 'K' || *end == 'M' || *end == 'G')
        mult = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : 1073741824.0, end++;
    if (mult > 1 && !strcmp(end, "iB"))
        end += 2;
    if (errno || end == s || *end || !(d >= 0) || d * mult > 1e18) {
        fprintf(stderr, "%s: --%s expects a size in bytes (a number, or with K, M or G: 2G, 1536MiB), got '%s'\n",
                prog, opt, s);
        return -1;
    }
    *out = (size_t)(d * mult);
    return 0;
}

int cli_double(const char *prog, const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(d)) {
        fprintf(stderr, "%s: --%s expects a number, got '%s'\n", prog, opt, s);
        return -1;
    }
    *out = d;
    return 0;
}

int cli_number_list(const char *prog, const char *opt, const char *arg, int argc, char **argv, double *out, int max,
                    int *n)
{
    *n = 0;
    for (const char *w = arg;;) {
        char *end;
        double v = strtod(w, &end);
        if (end == w || (*end && *end != ',') || !isfinite(v)) {
            fprintf(stderr, "%s: --%s expects numbers, not '%s'\n", prog, opt, w);
            return -1;
        }
        if (*n == max) {
            fprintf(stderr, "%s: --%s takes at most %d values\n", prog, opt, max);
            return -1;
        }
        out[(*n)++] = v;
        if (*end == ',') {
            w = end + 1;
            continue;
        }
        if (optind >= argc || argv[optind][0] == '-' || (strtod(argv[optind], &end), end == argv[optind] || *end))
            return 0;
        w = argv[optind++];
    }
}

int cli_positional(const char *prog, int argc, char **argv, const char **dir)
{
    if (optind < argc)
        *dir = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        return -1;
    }
    return 0;
}

char **cli_read_lines(const char *what, const char *path, int *n, CtErr *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        ct_fail(err, "%s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    char **lines = NULL, line[1024];
    *n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0])
            continue;
        lines = realloc(lines, sizeof *lines * (size_t)(*n + 1));
        CT_ASSERT(lines != NULL);
        lines[*n] = strdup(line);
        CT_ASSERT(lines[*n] != NULL);
        (*n)++;
    }
    fclose(f);
    if (!*n)
        ct_fail(err, "%s %s: no names in it", what, path);
    return *n ? lines : NULL;
}

void cli_free_lines(char **lines, int n)
{
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

const CtBackend *cli_backend(const char *prog, const char *device, CtErr *err)
{
    if (!strcmp(device, "cuda")) {
        char why[512];
        if (cuda_backend_usable(why, sizeof why))
            return &ct_backend_cuda;
        fprintf(stderr, "%s: --device cuda: %s; running on the cpu backend\n", prog, why);
        return backend_find("cpu");
    }
    const CtBackend *be = backend_find(device);
    if (!be)
        ct_fail(err, "unknown --device '%s' (cpu, cuda, cuda-sim, ref)", device);
    return be;
}

/* The tools' stop flag, raised by the signal thread below. */
static volatile sig_atomic_t stop_signal;
static volatile sig_atomic_t catching;

static int cache_warned;
static ProgramOptions program_options = {.stop = &stop_signal, .cache_warned = &cache_warned};

/* SIGINT and SIGTERM are blocked in every thread (all inherit main's mask)
 * and taken here by sigwait, so that no thread is ever interrupted by a
 * handler for them: oneDNN's JIT GEMM kernels (Debian's 2.x) point rsp into
 * a heap workspace while they run, and a signal frame pushed there
 * corrupts the heap (oneDNN issue #4845, fixed in 3.11). Before
 * cli_catch_interrupts, and at a second signal, the default action. */
typedef struct {
    sigset_t set;
    sem_t running;
} SignalThread;

static void *signal_thread(void *arg)
{
    SignalThread *st = arg;
    sem_post(&st->running);
    for (;;) {
        int sig;
        if (sigwait(&st->set, &sig))
            continue;
        if (!catching || stop_signal) {
            sigset_t one;
            sigemptyset(&one);
            sigaddset(&one, sig);
            signal(sig, SIG_DFL);
            pthread_sigmask(SIG_UNBLOCK, &one, NULL);
            raise(sig);
        }
        stop_signal = sig;
    }
    return NULL;
}

/* Returns once the thread runs: a tool that refuses its arguments exits at
 * once, and a thread still starting then (its stack not yet known to
 * LeakSanitizer) shows as a leak of the sanitizer's own pthread_getattr_np. */
static void catch_stop_signals(void)
{
    static SignalThread st;
    sigemptyset(&st.set);
    sigaddset(&st.set, SIGINT);
    sigaddset(&st.set, SIGTERM);
    if (sem_init(&st.running, 0, 0))
        return; /* no thread: the signals keep their default action */
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_sigmask(SIG_BLOCK, &st.set, NULL) == 0) {
        if (pthread_create(&th, &at, signal_thread, &st) != 0)
            pthread_sigmask(SIG_UNBLOCK, &st.set, NULL);
        else
            while (sem_wait(&st.running) && errno == EINTR)
                ;
    }
    pthread_attr_destroy(&at);
}

const volatile sig_atomic_t *cli_catch_interrupts(void)
{
    catching = 1;
    return &stop_signal;
}

void cli_unblock_signals(void)
{
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, NULL);
}

int cli_interrupted(void) { return stop_signal; }

static const char *crash_prog = "ctimm";

static void say(const char *s)
{
    ssize_t n = write(STDERR_FILENO, s, strlen(s));
    (void)n;
}

/* Async-signal-safe: write(2) and backtrace_symbols_fd only (backtrace was
 * called once at install, so it loads nothing now). The signal, blocked
 * here and back at its default action (SA_RESETHAND), is raised again to
 * end the process as it would have ended (exit status 128 + sig). */
static void on_crash(int sig)
{
    const char *name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
                     : sig == SIGILL ? "SIGILL" : "SIGABRT";
    say(crash_prog);
    say(": crashed with ");
    say(name);
    say(": a bug in ctimm; please report it with the command line and this trace\n");
    void *frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
    raise(sig);
}

void cli_init_signals(const char *prog)
{
    catch_stop_signals();
    void *warm[1];
    backtrace(warm, 1);
    crash_prog = prog;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGABRT, &sa, NULL);
#ifndef __SANITIZE_ADDRESS__ /* AddressSanitizer reports the faults itself, with more */
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGFPE, &sa, NULL);
    sigaction(SIGILL, &sa, NULL);
#endif
}

ProgramOptions *cli_program_options(void) { return &program_options; }

/* CT_INTERRUPTED with err saying which signal. */
static int interrupted(CtErr *err)
{
    ct_fail(err, "interrupted by %s", stop_signal == SIGINT ? "SIGINT (Ctrl-C)" : "SIGTERM");
    return CT_INTERRUPTED;
}

int cli_open(CtRunner *r, const CtBackend *be, const Graph *g, CtState *state, CtErr *err)
{
    int rc = stop_signal ? CT_INTERRUPTED : backend_open(r, be, g, state, &program_options, err);
    return rc == CT_INTERRUPTED && stop_signal ? interrupted(err) : rc;
}

int cli_run_once(const CtBackend *be, const Graph *g, CtState *state, const CtTensor *inputs, int ninputs,
                 CtTensor *outputs, CtErr *err)
{
    int rc = stop_signal ? CT_INTERRUPTED
                         : backend_run_once(be, g, state, inputs, ninputs, outputs, &program_options, err);
    return rc == CT_INTERRUPTED && stop_signal ? interrupted(err) : rc;
}

int cli_step(CtRunner *r, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    if (stop_signal)
        return interrupted(err);
    int rc = backend_step(r, inputs, ninputs, outputs, err);
    if (rc == 0 && stop_signal) {
        for (int k = 0; k < r->prog->g.noutputs; k++)
            tensor_free(&outputs[k]);
        return interrupted(err);
    }
    return rc;
}

double cli_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void cli_py_repr(char *buf, size_t n, double v, int f32)
{
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, v);
        double back = strtod(buf, NULL);
        if (f32 ? (float)back == (float)v : back == v)
            break;
    }
    /* %g writes 50.0 as 5e+01 at one digit; repr writes exponents below
     * -4 and from 16 only */
    const char *e = strchr(buf, 'e');
    int exp10 = e ? atoi(e + 1) : 0;
    if (e && exp10 >= -4 && exp10 < 16)
        snprintf(buf, n, "%.*f", p - 1 - exp10 > 0 ? p - 1 - exp10 : 0, v);
    if (!strpbrk(buf, ".eni"))
        strncat(buf, ".0", n - strlen(buf) - 1);
}
