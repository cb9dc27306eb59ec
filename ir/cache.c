/*
 * Kernel cache: in-memory map in front of a directory of verified entries.
 * File layout and guarantees are described in cache.h.
 */
#include "ir/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define HEADER_SIZE 64u
#define MAGIC "CTIMMKC\0"
#define NPARTS 6

enum { SLOT_EMPTY, SLOT_ABSENT, SLOT_PENDING, SLOT_READY };

/* A slot, once given a key, keeps it until the map grows: ABSENT marks a key
 * whose compile failed (the next request claims it again). */
struct CacheEntry {
    CacheKey key;
    int state;
    void *blob;
    size_t n;
};

/* --- key material --------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* The bytes that are hashed and stored: each part as u64 length + bytes. */
static int build_material(const CacheKeyParts *parts, uint8_t **out, size_t *len, CtErr *err)
{
    const char *s[NPARTS] = {
        parts->codegen_version ? parts->codegen_version : CACHE_CODEGEN_VERSION,
        parts->target, parts->compiler, parts->compiler_version, parts->options, parts->source,
    };
    size_t total = 0, l[NPARTS];
    for (int i = 0; i < NPARTS; i++) {
        l[i] = s[i] ? strlen(s[i]) : 0;
        total += 8 + l[i];
    }
    uint8_t *buf = malloc(total), *p = buf;
    if (!buf)
        return ct_fail(err, "kernel cache: out of memory for a %zu-byte key", total);
    for (int i = 0; i < NPARTS; i++) {
        put_u64(p, l[i]);
        if (l[i])
            memcpy(p + 8, s[i], l[i]);
        p += 8 + l[i];
    }
    *out = buf;
    *len = total;
    return 0;
}

static CacheKey hash128(const void *data, size_t n)
{
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits(data, n));
    CacheKey k;
    memcpy(k.bytes, canon.digest, sizeof k.bytes);
    return k;
}

int cache_key(const CacheKeyParts *parts, CacheKey *key, CtErr *err)
{
    uint8_t *m;
    size_t mlen;
    if (build_material(parts, &m, &mlen, err))
        return -1;
    *key = hash128(m, mlen);
    free(m);
    return 0;
}

void cache_key_hex(const CacheKey *key, char out[33])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[key->bytes[i] >> 4];
        out[2 * i + 1] = hex[key->bytes[i] & 15];
    }
    out[32] = '\0';
}

/* --- directory -------------------------------------------------------------- */

int cache_dir_from_env(char *out, size_t cap, CtErr *err)
{
    const char *d = getenv("CTIMM_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (d && *d)
        n = snprintf(out, cap, "%s", d);
    else if (xdg && xdg[0] == '/') /* XDG: relative values are ignored */
        n = snprintf(out, cap, "%s/ctimm", xdg);
    else if (home && *home)
        n = snprintf(out, cap, "%s/.cache/ctimm", home);
    else
        return ct_fail(err, "kernel cache: no directory: set CTIMM_CACHE_DIR (or HOME)");
    if (n < 0 || (size_t)n >= cap)
        return ct_fail(err, "kernel cache: directory path too long (%d bytes)", n);
    return 0;
}

/* mkdir -p */
static int make_dirs(const char *dir, CtErr *err)
{
    char *p = strdup(dir);
    if (!p)
        return ct_fail(err, "kernel cache: out of memory");
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            ct_fail(err, "kernel cache: cannot create directory %s: %s", p, strerror(e));
            free(p);
            return -1;
        }
        *s = saved;
        if (!saved)
            break;
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ct_fail(err, "kernel cache: %s is not a directory", dir);
    return 0;
}

static char *entry_path(const KernelCache *c, const CacheKey *key)
{
    char hex[33];
    cache_key_hex(key, hex);
    size_t n = strlen(c->dir) + 1 + 32 + 1;
    char *path = malloc(n);
    if (path)
        snprintf(path, n, "%s/%s", c->dir, hex);
    return path;
}

/* --- disk entries ----------------------------------------------------------- */

enum { DISK_MISS, DISK_HIT, DISK_CORRUPT };

static int read_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads and checks the entry for key. DISK_HIT fills *blob (malloc'd) and *n.
 * An unreadable file (other than absent) counts as a miss: it gets rewritten. */
static int disk_read(const char *path, const CacheKey *key, const uint8_t *mat, size_t mlen, void **blob, size_t *n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return DISK_MISS;
    int result = DISK_CORRUPT;
    uint8_t *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)HEADER_SIZE)
        goto out_close;
    /* The exact size is known from the request; anything else is bad. */
    if ((uint64_t)st.st_size - HEADER_SIZE < mlen)
        goto out_close;
    size_t size = (size_t)st.st_size;
    buf = malloc(size);
    if (!buf || read_all(fd, buf, size) != 0)
        goto out_free;
    if (memcmp(buf, MAGIC, 8) != 0 || get_u32(buf + 8) != CACHE_FORMAT_VERSION || get_u32(buf + 12) != HEADER_SIZE)
        goto out_free;
    if (memcmp(buf + 16, key->bytes, 16) != 0)
        goto out_free;
    uint64_t flen = get_u64(buf + 32), plen = get_u64(buf + 40);
    if (flen != mlen || plen == 0 || plen != size - HEADER_SIZE - mlen)
        goto out_free;
    if (memcmp(buf + HEADER_SIZE, mat, mlen) != 0)
        goto out_free;
    const uint8_t *payload = buf + HEADER_SIZE + mlen;
    CacheKey ph = hash128(payload, plen);
    if (memcmp(buf + 48, ph.bytes, 16) != 0)
        goto out_free;
    void *b = malloc(plen);
    if (!b)
        goto out_free;
    memcpy(b, payload, plen);
    *blob = b;
    *n = plen;
    result = DISK_HIT;
out_free:
    free(buf);
out_close:
    close(fd);
    return result;
}

/* Writes the entry to a temp file beside it, fsyncs, renames into place;
 * keep_existing: links it into place instead, and returns 1 where another
 * writer's entry is there already (left as it is). */
static int disk_write(const KernelCache *c, const char *path, const CacheKey *key, const uint8_t *mat, size_t mlen,
                      const void *blob, size_t n, int keep_existing, CtErr *err)
{
    int result = -1;
    uint8_t hdr[HEADER_SIZE] = {0};
    memcpy(hdr, MAGIC, 8);
    put_u32(hdr + 8, CACHE_FORMAT_VERSION);
    put_u32(hdr + 12, HEADER_SIZE);
    memcpy(hdr + 16, key->bytes, 16);
    put_u64(hdr + 32, mlen);
    put_u64(hdr + 40, n);
    CacheKey ph = hash128(blob, n);
    memcpy(hdr + 48, ph.bytes, 16);

    size_t tlen = strlen(path) + sizeof ".tmp.XXXXXX" + 24;
    char *tmp = malloc(tlen);
    if (!tmp)
        return ct_fail(err, "kernel cache: out of memory");
    snprintf(tmp, tlen, "%s.tmp.%ld.XXXXXX", path, (long)getpid());
    int fd = mkstemp(tmp);
    if (fd < 0) {
        ct_fail(err, "kernel cache: cannot create a file in %s: %s", c->dir, strerror(errno));
        goto out_free;
    }
    if (fchmod(fd, 0644) != 0 || write_all(fd, hdr, sizeof hdr) != 0 || write_all(fd, mat, mlen) != 0 ||
        write_all(fd, blob, n) != 0 || fsync(fd) != 0) {
        ct_fail(err, "kernel cache: cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        goto out_unlink;
    }
    if (close(fd) != 0) {
        ct_fail(err, "kernel cache: cannot write %s: %s", tmp, strerror(errno));
        goto out_unlink;
    }
    if (keep_existing) {
        if (link(tmp, path) == 0)
            result = 0;
        else if (errno == EEXIST)
            result = 1;
        else
            ct_fail(err, "kernel cache: cannot link %s into place: %s", tmp, strerror(errno));
        goto out_unlink; /* the temp name goes; the entry stays under its own */
    }
    if (rename(tmp, path) != 0) {
        ct_fail(err, "kernel cache: cannot rename %s into place: %s", tmp, strerror(errno));
        goto out_unlink;
    }
    free(tmp);
    return 0;
out_unlink:
    unlink(tmp);
out_free:
    free(tmp);
    return result;
}

int cache_temp_stale(long pid, const struct stat *st)
{
    if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
        return 0;
    return difftime(time(NULL), st->st_mtime) > CACHE_STALE_SECONDS;
}

/* Removes the temp files of entries whose writers were killed. */
static void remove_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *t = strstr(e->d_name, ".tmp.");
        char *end;
        if (!t)
            continue;
        long pid = strtol(t + 5, &end, 10);
        char path[4200];
        struct stat st;
        if (end == t + 5 || *end != '.' || snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
            continue;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && cache_temp_stale(pid, &st))
            unlink(path);
    }
    closedir(d);
}

/* --- in-memory map (callers hold c->mu) -------------------------------------- */

static size_t slot_index(const KernelCache *c, const CacheKey *key)
{
    uint64_t h = get_u64(key->bytes); /* already uniformly distributed */
    return (size_t)h & (c->cap - 1);
}

/* The slot for key: the one holding it, else the empty one where it goes. */
static CacheEntry *slot_find(const KernelCache *c, const CacheKey *key)
{
    for (size_t i = slot_index(c, key);; i = (i + 1) & (c->cap - 1)) {
        CacheEntry *e = &c->slots[i];
        if (e->state == SLOT_EMPTY || memcmp(e->key.bytes, key->bytes, 16) == 0)
            return e;
    }
}

/* Doubles the table, dropping ABSENT keys; keeps load under one half. */
static int map_grow(KernelCache *c, CtErr *err)
{
    size_t ncap = c->cap ? c->cap * 2 : 64;
    CacheEntry *old = c->slots;
    size_t ocap = c->cap;
    CacheEntry *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return ct_fail(err, "kernel cache: out of memory for %zu map slots", ncap);
    c->slots = ns;
    c->cap = ncap;
    c->used = 0;
    for (size_t i = 0; i < ocap; i++) {
        if (old[i].state == SLOT_EMPTY || old[i].state == SLOT_ABSENT)
            continue;
        *slot_find(c, &old[i].key) = old[i];
        c->used++;
    }
    free(old);
    return 0;
}

static int keep_loose(KernelCache *c, void *blob, CtErr *err)
{
    if (c->nloose == c->loose_cap) {
        size_t ncap = c->loose_cap ? c->loose_cap * 2 : 16;
        void **nl = realloc(c->loose, ncap * sizeof *nl);
        if (!nl)
            return ct_fail(err, "kernel cache: out of memory");
        c->loose = nl;
        c->loose_cap = ncap;
    }
    c->loose[c->nloose++] = blob;
    return 0;
}

/* --- public ------------------------------------------------------------------ */

int cache_open(KernelCache *c, const CacheOptions *opt, CtErr *err)
{
    static const CacheOptions defaults = {0};
    if (!opt)
        opt = &defaults;
    memset(c, 0, sizeof *c);
    c->no_cache = opt->no_cache;
    c->forbid_compile = opt->forbid_compile;
    c->first_wins = opt->first_wins;
    if (!c->no_cache) {
        char path[4096];
        if (opt->dir) {
            if (!*opt->dir)
                return ct_fail(err, "kernel cache: empty directory name");
            if (strlen(opt->dir) >= sizeof path)
                return ct_fail(err, "kernel cache: directory path too long (%zu bytes)", strlen(opt->dir));
            snprintf(path, sizeof path, "%s", opt->dir);
        } else if (cache_dir_from_env(path, sizeof path, &c->disk_err)) {
            if (!opt->memory_fallback)
                return ct_fail(err, "%s", c->disk_err.msg);
            path[0] = 0;
        }
        if (path[0] && make_dirs(path, &c->disk_err)) {
            if (!opt->memory_fallback)
                return ct_fail(err, "%s", c->disk_err.msg);
            path[0] = 0;
        }
        if (path[0] && !(c->dir = strdup(path)))
            return ct_fail(err, "kernel cache: out of memory");
        if (c->dir)
            remove_stale_temps(c->dir);
    }
    if (map_grow(c, err))
        goto out_dir;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        ct_fail(err, "kernel cache: cannot create a mutex");
        goto out_slots;
    }
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        ct_fail(err, "kernel cache: cannot create a condition variable");
        goto out_mutex;
    }
    return 0;
out_mutex:
    pthread_mutex_destroy(&c->mu);
out_slots:
    free(c->slots);
out_dir:
    free(c->dir);
    memset(c, 0, sizeof *c);
    return -1;
}

void cache_close(KernelCache *c)
{
    if (!c->slots)
        return;
    for (size_t i = 0; i < c->cap; i++)
        free(c->slots[i].blob);
    for (size_t i = 0; i < c->nloose; i++)
        free(c->loose[i]);
    free(c->slots);
    free(c->loose);
    free(c->dir);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    memset(c, 0, sizeof *c);
}

static int run_compile(KernelCache *c, const CacheKeyParts *parts, const char *hex, CacheCompileFn compile,
                       void *ctx, void **blob, size_t *n, CtErr *err)
{
    if (c->forbid_compile)
        return ct_fail(err, "kernel cache: kernel %s (target %s) needs a compile, and compiling is forbidden", hex,
                       parts->target ? parts->target : "");
    *blob = NULL;
    *n = 0;
    int rc = compile(ctx, parts, blob, n, err);
    if (rc) {
        if (c->first_wins) /* a choice (runtime/cuda's: timed, or the heuristics'), not a compile */
            ct_failctx(err, "choosing among %s's candidates (entry %s)", parts->compiler ? parts->compiler : "the",
                       hex);
        else
            ct_failctx(err, "compiling kernel %s", hex);
        return rc == CT_INTERRUPTED ? rc : -1;
    }
    if (!*blob || !*n) {
        free(*blob);
        return ct_fail(err, "compiling kernel %s: the compiler returned an empty binary", hex);
    }
    pthread_mutex_lock(&c->mu);
    c->stats.compiles++;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int cache_get(KernelCache *c, const CacheKeyParts *parts, CacheCompileFn compile, void *ctx, const void **blob,
              size_t *n, CtErr *err)
{
    uint8_t *mat;
    size_t mlen;
    if (build_material(parts, &mat, &mlen, err))
        return -1;
    CacheKey key = hash128(mat, mlen);
    char hex[33];
    cache_key_hex(&key, hex);
    void *b = NULL;
    size_t bn = 0;
    int rc = -1;

    if (c->no_cache) {
        if ((rc = run_compile(c, parts, hex, compile, ctx, &b, &bn, err)) != 0)
            goto out_mat;
        pthread_mutex_lock(&c->mu);
        rc = keep_loose(c, b, err);
        pthread_mutex_unlock(&c->mu);
        if (rc) {
            free(b);
            goto out_mat;
        }
        *blob = b;
        *n = bn;
        goto out_mat;
    }

    /* Claim the key, or wait for whoever holds it. */
    pthread_mutex_lock(&c->mu);
    for (;;) {
        CacheEntry *e = slot_find(c, &key);
        if (e->state == SLOT_READY) {
            c->stats.mem_hits++;
            *blob = e->blob;
            *n = e->n;
            pthread_mutex_unlock(&c->mu);
            rc = 0;
            goto out_mat;
        }
        if (e->state == SLOT_PENDING) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        if (e->state == SLOT_EMPTY) {
            if (2 * (c->used + 1) > c->cap) {
                if (map_grow(c, err)) {
                    pthread_mutex_unlock(&c->mu);
                    goto out_mat;
                }
                continue;
            }
            c->used++;
            e->key = key;
        }
        e->state = SLOT_PENDING;
        break;
    }
    pthread_mutex_unlock(&c->mu);

    char *path = NULL;
    if (c->dir && !(path = entry_path(c, &key))) {
        ct_fail(err, "kernel cache: out of memory");
        goto out_release;
    }
    int d = path ? disk_read(path, &key, mat, mlen, &b, &bn) : DISK_MISS;
    if (d != DISK_HIT) {
        if ((rc = run_compile(c, parts, hex, compile, ctx, &b, &bn, err)) != 0)
            goto out_path;
        CtErr werr;
        int w = path ? disk_write(c, path, &key, mat, mlen, b, bn, c->first_wins && d == DISK_MISS, &werr) : 0;
        void *theirs;
        size_t tn;
        if (w < 0) {
            pthread_mutex_lock(&c->mu);
            if (!c->stats.write_failures++ && !c->disk_err.msg[0])
                c->disk_err = werr;
            pthread_mutex_unlock(&c->mu);
        } else if (w > 0 && disk_read(path, &key, mat, mlen, &theirs, &tn) == DISK_HIT) {
            free(b); /* another process stored its measurement first: that one stands */
            b = theirs;
            bn = tn;
        }
    }
    pthread_mutex_lock(&c->mu);
    if (d == DISK_HIT)
        c->stats.disk_hits++;
    else if (d == DISK_CORRUPT)
        c->stats.corrupt++;
    CacheEntry *e = slot_find(c, &key);
    CT_ASSERT(e->state == SLOT_PENDING);
    e->state = SLOT_READY;
    e->blob = b;
    e->n = bn;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    *blob = b;
    *n = bn;
    rc = 0;
out_path:
    free(path);
out_release:
    if (rc) {
        pthread_mutex_lock(&c->mu);
        CacheEntry *e = slot_find(c, &key);
        CT_ASSERT(e->state == SLOT_PENDING);
        e->state = SLOT_ABSENT;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
out_mat:
    free(mat);
    return rc;
}

CacheStats cache_stats(KernelCache *c)
{
    pthread_mutex_lock(&c->mu);
    CacheStats s = c->stats;
    pthread_mutex_unlock(&c->mu);
    return s;
}

void cache_stats_print(KernelCache *c, FILE *f)
{
    pthread_mutex_lock(&c->mu);
    CacheStats s = c->stats;
    fprintf(f,
            "kernel cache: %s; %" PRIu64 " memory hits, %" PRIu64 " disk hits, %" PRIu64 " compiles, %" PRIu64
            " corrupt entries recompiled, %" PRIu64 " write failures\n",
            c->no_cache ? "disabled (--no-cache)" : c->dir ? c->dir : "in memory only", s.mem_hits, s.disk_hits,
            s.compiles, s.corrupt, s.write_failures);
    if (c->disk_err.msg[0])
        fprintf(f, "kernel cache: not kept on disk: %s\n", c->disk_err.msg);
    pthread_mutex_unlock(&c->mu);
}

void cache_warn_disk(KernelCache *c, int *warned, FILE *f)
{
    pthread_mutex_lock(&c->mu);
    if (c->disk_err.msg[0] && !*warned) {
        fprintf(f, "ctimm: warning: %s; the kernels are compiled in memory, again in every run: set "
                   "CTIMM_CACHE_DIR to a writable directory with free space\n", c->disk_err.msg);
        *warned = 1;
    }
    pthread_mutex_unlock(&c->mu);
}

void host_cpu_model(char *out, size_t cap)
{
    char line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(out, cap, "unknown");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(out, cap, "%s", strchr(line, ':') + 1 + (strchr(line, ':')[1] == ' '));
            out[strcspn(out, "\n")] = 0;
            break;
        }
    if (f)
        fclose(f);
}
