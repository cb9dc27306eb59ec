/*
 * Kernel cache: content-addressed storage of compiled kernels. Compiling is
 * not done here: cache_get takes a compile callback and calls it on a miss.
 *
 * It lives in ir/, the layer every other one includes, and not in codegen/,
 * because the runtime keeps entries too: the compile stage stores the
 * kernels it compiles (codegen/nvrtc.h, host_compile.h), the cuda runtime
 * the cuDNN algorithm choices it times on the device (runtime/cuda/dnn.h),
 * which cannot be made before there is a device. The runtime reads no
 * compiler through it: a "compile" there is a measurement.
 *
 * Key: XXH3-128 over everything that shapes the binary (rendered source,
 * target, compiler identity and version, compile options, codegen version),
 * each part length-prefixed so different splits cannot collide.
 *
 * Two levels: an in-process map (key -> blob, owned by the KernelCache) in
 * front of a directory with one file per entry, named by the hex key:
 *
 *   header (64 bytes, little-endian):
 *     0  magic "CTIMMKC\0"        8  u32 format version   12 u32 header size
 *     16 key (XXH128 canonical)   32 u64 material length  40 u64 payload length
 *     48 XXH3-128 of the payload (canonical)
 *   material: the hashed key parts themselves (so the source is stored, and a
 *     hit is checked byte for byte against what was asked for)
 *   payload: the compiled binary
 *
 * Entries are written to a mkstemp file in the same directory,
 * "<hex>.tmp.<pid>.XXXXXX", fsynced and renamed into place, so readers
 * (other threads, other processes) only ever see whole files; two writers of
 * one key both rename valid files, last wins. A temp file whose writer was
 * killed is removed by a later cache_open once stale (cache_temp_stale).
 * A file that fails any check (magic, version, key vs name and request,
 * material, sizes, payload hash) is never trusted: it is recompiled, replaced
 * and counted in stats.corrupt.
 *
 * Thread safety: cache_get may be called from many threads at once. A key
 * being compiled by one thread is waited for by the others (one compile per
 * key per process).
 */
#ifndef CTIMM_CACHE_H
#define CTIMM_CACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "ir/status.h"

/* Bump whenever codegen changes what it emits for the same inputs. */
#define CACHE_CODEGEN_VERSION "ctimm-codegen-1"
/* Bump whenever the entry file layout changes. */
#define CACHE_FORMAT_VERSION 1u

/* Everything that shapes the binary. All are NUL-terminated strings; NULL
 * is taken as "". codegen_version NULL means CACHE_CODEGEN_VERSION. */
typedef struct CacheKeyParts {
    const char *source;           /* rendered CUDA C or host C */
    const char *target;           /* "sm_90", "host-x86_64" */
    const char *compiler;         /* "nvrtc", "cc" */
    const char *compiler_version; /* full version string */
    const char *options;          /* compile options, as passed */
    const char *codegen_version;
} CacheKeyParts;

typedef struct CacheKey {
    uint8_t bytes[16]; /* XXH128 canonical (big-endian) form */
} CacheKey;

/* Fills *blob with a malloc'd binary of *n > 0 bytes (the cache takes it
 * and frees it), or returns -1 with err set, or CT_INTERRUPTED when the
 * caller's stop flag ended the compile (cache_get returns it as it is). */
typedef int (*CacheCompileFn)(void *ctx, const CacheKeyParts *parts, void **blob, size_t *n, CtErr *err);

typedef struct CacheOptions {
    const char *dir;    /* NULL: resolved from the environment (cache_dir_from_env) */
    int no_cache;       /* --no-cache: compile every time, touch no disk */
    int forbid_compile; /* a compile is an error (tests assert "nothing compiled") */
    /* A directory that cannot be used (not a directory, under a file, no
     * HOME to find it by) leaves the cache in memory, the reason in
     * disk_err, instead of failing: a backend goes on compiling. */
    int memory_fallback;
    /* Entries are measurements (which kernel timed faster), not compiles
     * that come out the same each time: the first entry stored for a key
     * stays, and a process that measured the same key meanwhile takes the
     * stored one instead of its own, so every process agrees with what the
     * first one ran. */
    int first_wins;
} CacheOptions;

typedef struct CacheStats {
    uint64_t mem_hits, disk_hits, compiles;
    uint64_t corrupt;        /* bad disk entries recompiled and replaced */
    uint64_t write_failures; /* entries that could not be stored (the get still succeeded) */
} CacheStats;

typedef struct CacheEntry CacheEntry;

typedef struct KernelCache {
    char *dir;          /* NULL when no_cache or in memory by memory_fallback */
    int no_cache;
    int forbid_compile; /* may be flipped between calls to cache_get */
    int first_wins;
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* a pending compile finished */
    CacheEntry *slots;  /* open addressing, power-of-two capacity */
    size_t cap, used;
    void **loose;       /* blobs compiled under no_cache, freed at close */
    size_t nloose, loose_cap;
    CacheStats stats;
    /* Why entries are not kept on disk: the directory unusable (memory_fallback),
     * else the first write that failed (read-only, full); "" while none. */
    CtErr disk_err;
} KernelCache;

/* opt NULL: defaults (dir from the environment). Creates the directory
 * (and its parents) unless no_cache. */
int cache_open(KernelCache *c, const CacheOptions *opt, CtErr *err);
void cache_close(KernelCache *c);

/* The cache directory from the environment: $CTIMM_CACHE_DIR, else
 * $XDG_CACHE_HOME/ctimm (when absolute), else $HOME/.cache/ctimm. */
int cache_dir_from_env(char *out, size_t cap, CtErr *err);

int cache_key(const CacheKeyParts *parts, CacheKey *key, CtErr *err);
/* 32 lowercase hex digits and a NUL. */
void cache_key_hex(const CacheKey *key, char out[33]);

/* *blob stays valid, owned by c, until cache_close. */
int cache_get(KernelCache *c, const CacheKeyParts *parts, CacheCompileFn compile, void *ctx, const void **blob,
              size_t *n, CtErr *err);

CacheStats cache_stats(KernelCache *c);
void cache_stats_print(KernelCache *c, FILE *f);

/* When c keeps nothing on disk (disk_err), one line on f saying which
 * directory, why, and what to do, unless *warned; then sets *warned. A
 * caller shares one flag among its caches to say it once per process:
 * without the line, every run would compile everything again unseen. */
void cache_warn_disk(KernelCache *c, int *warned, FILE *f);

/* Whether a temporary file or folder that process pid made (its name says
 * which; st its lstat) was left by a kill: pid is gone as seen from here,
 * and the file has not changed for CACHE_STALE_SECONDS. The age is for a
 * /tmp or cache folder shared with another pid namespace (a container) or
 * host, where a live writer's pid may name no process here. */
#define CACHE_STALE_SECONDS 3600

/* The CPU model of /proc/cpuinfo ("unknown" where there is none): part of
 * the key of what is compiled or measured for this host. */
void host_cpu_model(char *out, size_t cap);
int cache_temp_stale(long pid, const struct stat *st);

#endif
