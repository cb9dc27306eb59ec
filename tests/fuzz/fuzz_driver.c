/*
 * A stand-in for libFuzzer where there is none (gcc: CI's sanitizer build),
 * linked with one fuzz target's LLVMFuzzerTestOneInput: it runs every seed,
 * then mutants of the seeds and of recent mutants (bit flips, byte insert,
 * delete and overwrite, span copies, truncation, splices of two inputs,
 * dictionary tokens) until the time is up. Blind where libFuzzer follows
 * coverage, but reproducible: the random seed is printed and fixes the
 * sequence of inputs, and the input of a crash, a sanitizer report or a run
 * past the per-input limit is written to a file before the process dies.
 *
 *   fuzz_TARGET [-t SECONDS] [-s SEED] [-n RUNS] [-x DICT] [-o CRASH_FILE]
 *               [-l MAX_LEN] [-p PER_INPUT_SECONDS] SEED_DIR_OR_FILE...
 *
 * -n 0 CRASH_FILE runs just that input again. Every input is run from its own
 * malloc'd block of exactly its size, so ASan sees a read past its end.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* The sanitizers' hook before they end the process; absent without them. */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

typedef struct Blob {
    uint8_t *p;
    size_t n;
} Blob;

typedef struct Pool {
    Blob *b;
    int n, cap;
} Pool;

static void *alloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "fuzz_driver: out of memory\n");
        exit(2);
    }
    return p;
}

static Blob blob_copy(const uint8_t *p, size_t n)
{
    Blob b = {alloc(n), n};
    memcpy(b.p, p, n);
    return b;
}

static void pool_add(Pool *pl, const uint8_t *p, size_t n)
{
    if (pl->n == pl->cap) {
        pl->cap = pl->cap ? 2 * pl->cap : 64;
        Blob *grown = alloc((size_t)pl->cap * sizeof *grown);
        if (pl->n)
            memcpy(grown, pl->b, (size_t)pl->n * sizeof *grown);
        free(pl->b);
        pl->b = grown;
    }
    pl->b[pl->n++] = blob_copy(p, n);
}

static void pool_free(Pool *pl)
{
    for (int i = 0; i < pl->n; i++)
        free(pl->b[i].p);
    free(pl->b);
}

/* The input being run and where it goes when the process dies on it. */
static const uint8_t *cur;
static size_t cur_n;
static const char *crash_path = "fuzz-crash";

static void say(const char *s)
{
    ssize_t ignored = write(2, s, strlen(s));
    (void)ignored;
}

/* Async-signal-safe: it runs from signal handlers and the sanitizers' death. */
static void save_input(void)
{
    if (!cur)
        return;
    int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (size_t off = 0; fd >= 0 && off < cur_n;) {
        ssize_t k = write(fd, cur + off, cur_n - off);
        if (k <= 0)
            break;
        off += (size_t)k;
    }
    if (fd >= 0)
        close(fd);
    say("fuzz_driver: the failing input is in ");
    say(crash_path);
    say("\n");
    cur = NULL;
}

static void on_signal(int sig)
{
    if (sig == SIGALRM)
        say("fuzz_driver: an input ran past the per-input time limit\n");
    save_input();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run(const uint8_t *p, size_t n, unsigned per_input)
{
    uint8_t *in = blob_copy(p, n).p;
    cur = in;
    cur_n = n;
    alarm(per_input);
    LLVMFuzzerTestOneInput(in, n);
    alarm(0);
    cur = NULL;
    free(in);
}

static uint64_t rng;

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static void read_file(Pool *pl, const char *path, size_t max_len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = alloc(max_len);
    if (!f) {
        fprintf(stderr, "fuzz_driver: cannot read %s\n", path);
        exit(2);
    }
    size_t n = fread(buf, 1, max_len, f);
    fclose(f);
    pool_add(pl, buf, n);
    free(buf);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The files of path, a folder (in name order) or one file. */
static void read_seeds(Pool *pl, const char *path, size_t max_len)
{
    struct stat st;
    DIR *d = stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? opendir(path) : NULL;
    if (!d) {
        read_file(pl, path, max_len);
        return;
    }
    char **names = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            char **grown = alloc((size_t)(n + 1) * sizeof *grown);
            if (n)
                memcpy(grown, names, (size_t)n * sizeof *grown);
            free(names);
            names = grown;
            names[n] = alloc(strlen(full) + 1);
            strcpy(names[n++], full);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; i < n; i++) {
        read_file(pl, names[i], max_len);
        free(names[i]);
    }
    free(names);
}

/* libFuzzer's dictionary format: one "token" per line (name= before it and
 * \\, \" and \xNN escapes allowed), # comments. */
static void read_dict(Pool *pl, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fuzz_driver: cannot read dictionary %s\n", path);
        exit(2);
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *q0 = strchr(line, '"'), *q1 = strrchr(line, '"');
        if (line[strspn(line, " \t")] == '#' || !q0 || q1 == q0)
            continue;
        uint8_t tok[1024];
        size_t n = 0;
        for (char *c = q0 + 1; c < q1; c++) {
            unsigned x;
            if (*c == '\\' && c[1] == 'x' && sscanf(c + 2, "%2x", &x) == 1) {
                tok[n++] = (uint8_t)x;
                c += 3;
            } else {
                tok[n++] = (uint8_t)(*c == '\\' ? *++c : *c);
            }
        }
        pool_add(pl, tok, n);
    }
    fclose(f);
}

static const uint8_t interesting[] = {0, 1, 0x7f, 0x80, 0xff, '0', '1', '9', '-', '.', ',', ':', ' ', '\n', '\t',
                                      '"', '\'', '[', ']', '{', '}', '&', '*', '!', '#', '\\'};

static uint8_t some_byte(void)
{
    return below(2) ? (uint8_t)rnd() : interesting[below(sizeof interesting)];
}

/* Puts src (k bytes) at position at of b (n bytes, room for cap), inserted
 * or over what is there; returns the new length. */
static size_t put(uint8_t *b, size_t n, size_t cap, size_t at, const uint8_t *src, size_t k, int insert)
{
    if (insert) {
        k = k < cap - n ? k : cap - n;
        memmove(b + at + k, b + at, n - at);
        memcpy(b + at, src, k);
        return n + k;
    }
    k = k < cap - at ? k : cap - at;
    memcpy(b + at, src, k);
    return at + k > n ? at + k : n;
}

/* One mutation of b (n bytes, room for cap); returns the new length. */
static size_t mutate(uint8_t *b, size_t n, size_t cap, const Pool *inputs, const Pool *dict)
{
    size_t at = below(n + 1);
    switch (below(8)) {
    case 0: /* bit flip */
        if (n)
            b[below(n)] ^= (uint8_t)(1u << below(8));
        return n;
    case 1: { /* byte insert */
        uint8_t x = some_byte();
        return put(b, n, cap, at, &x, 1, 1);
    }
    case 2: { /* delete up to 8 bytes */
        size_t k = at < n ? 1 + below(n - at < 8 ? n - at : 8) : 0;
        memmove(b + at, b + at + k, n - at - k);
        return n - k;
    }
    case 3: /* byte overwrite */
        if (n)
            b[below(n)] = some_byte();
        return n;
    case 4: /* truncation */
        return at;
    case 5: { /* a span of the input copied elsewhere in it (repeats, nesting) */
        if (!n)
            return n;
        size_t from = below(n), k = 1 + below(n - from < 64 ? n - from : 64);
        uint8_t span[64];
        memcpy(span, b + from, k);
        return put(b, n, cap, at, span, k, (int)below(2));
    }
    case 6: { /* splice: this input up to at, then another's tail */
        const Blob *o = &inputs->b[below((size_t)inputs->n)];
        size_t from = below(o->n + 1);
        return put(b, at, cap, at, o->p + from, o->n - from, 0);
    }
    default: { /* a dictionary token, inserted or over what is there */
        if (!dict->n)
            return n;
        const Blob *t = &dict->b[below((size_t)dict->n)];
        return put(b, n, cap, at, t->p, t->n, (int)below(2));
    }
    }
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    double seconds = 10;
    unsigned long long seed = 0, max_runs = ~0ull;
    size_t max_len = 65536;
    unsigned per_input = 10;
    int seeded = 0;
    Pool seeds = {0}, dict = {0}, recent = {0};
    for (int c; (c = getopt(argc, argv, "t:s:n:x:o:l:p:")) != -1;) {
        switch (c) {
        case 't': seconds = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 0), seeded = 1; break;
        case 'n': max_runs = strtoull(optarg, NULL, 0); break;
        case 'x': read_dict(&dict, optarg); break;
        case 'o': crash_path = optarg; break;
        case 'l': max_len = (size_t)strtoull(optarg, NULL, 0); break;
        case 'p': per_input = (unsigned)atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-t SECONDS] [-s SEED] [-n RUNS] [-x DICT] [-o CRASH_FILE] [-l MAX_LEN] "
                            "[-p PER_INPUT_SECONDS] SEED_DIR_OR_FILE...\n", argv[0]);
            return 2;
        }
    }
    if (!seeded)
        seed = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
    rng = seed;
    for (int i = optind; i < argc; i++)
        read_seeds(&seeds, argv[i], max_len);
    if (!seeds.n)
        pool_add(&seeds, (const uint8_t *)"", 0);
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(save_input);
    signal(SIGSEGV, on_signal);
    signal(SIGABRT, on_signal);
    signal(SIGALRM, on_signal);
    printf("fuzz_driver: seed %llu (-s %llu repeats this run), %d seeds, %d dictionary tokens, %g s\n", seed, seed,
           seeds.n, dict.n, seconds);
    fflush(stdout);
    double start = now();
    for (int i = 0; i < seeds.n; i++)
        run(seeds.b[i].p, seeds.b[i].n, per_input);
    uint8_t *buf = alloc(max_len);
    unsigned long long runs = 0;
    for (; runs < max_runs && now() - start < seconds; runs++) {
        const Pool *from = recent.n && below(2) ? &recent : &seeds;
        const Blob *src = &from->b[below((size_t)from->n)];
        size_t n = src->n < max_len ? src->n : max_len;
        memcpy(buf, src->p, n);
        for (size_t k = 1 + below(4); k > 0; k--)
            n = mutate(buf, n, max_len, below(2) ? &seeds : from, &dict);
        run(buf, n, per_input);
        if (recent.n < 256) { /* mutants of mutants reach further from the seeds */
            pool_add(&recent, buf, n);
        } else {
            free(recent.b[runs % 256].p);
            recent.b[runs % 256] = blob_copy(buf, n);
        }
    }
    printf("fuzz_driver: %d seeds and %llu mutants in %.1f s (seed %llu): no failure\n", seeds.n, runs,
           now() - start, seed);
    free(buf);
    pool_free(&seeds);
    pool_free(&dict);
    pool_free(&recent);
    return 0;
}
