/*
 * Internals shared by dataset.c (folders, sorting, classes, reading) and
 * dataset_tar.c (tar indexing): the list of samples while it is built.
 * Strings live in one growing buffer and are referred to by offset until
 * the list is complete.
 */
#ifndef CTIMM_DATASET_IMPL_H
#define CTIMM_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"

typedef struct DsEntry {
    size_t name;  /* display / file name: path under root, or member name */
    size_t key;   /* what samples are sorted by (timm: the path) */
    size_t label; /* class name */
    uint64_t off, size; /* tar: the member's data */
    size_t shard;        /* wds: the shard holding it */
    int32_t class_index; /* wds: the label itself (label is unused) */
} DsEntry;

typedef struct DsBuild {
    char *str;
    size_t len, cap;
    DsEntry *e;
    size_t n, ecap;
} DsBuild;

/* Appends s[0..n) and a NUL; *off receives its offset. */
int ds_str(DsBuild *b, const char *s, size_t n, size_t *off, CtErr *err);
int ds_add(DsBuild *b, DsEntry e, CtErr *err);
/* .jpg, .jpeg or .png, any case, by Python's os.path.splitext rule (leading dots of the name are not an extension). */
int ds_is_image_name(const char *name, size_t n);
/* 1 when the name (n bytes) ends in .tar, any case. */
int ds_is_tar_name(const char *name, size_t n);
/* The file at path whole, NUL-terminated, in *out (malloc'd; its length in
 * *n when n is not NULL): 0; 1 when it does not exist (err untouched); -1
 * with err when it cannot be read or holds max bytes or more. */
int ds_read_whole(const char *path, size_t max, char **out, size_t *n, CtErr *err);
/* Indexes every image member of the open tar fd (path for messages). */
int ds_tar_scan(const char *path, int fd, DsBuild *b, CtErr *err);

/* Calls member(ctx, name, data offset, size) for every regular file of the
 * open tar fd in archive order, member tars not entered (WebDataset shards). */
int ds_tar_walk(const char *path, int fd, int (*member)(void *ctx, const char *name, uint64_t off, uint64_t size,
                                                         CtErr *err),
                void *ctx, CtErr *err);

/* A WebDataset split (dataset_wds.c). */
typedef struct WdsIndex {
    char **shards;       /* [nshards] paths */
    size_t nshards;
    size_t *shard_first; /* [nshards + 1] into the samples, in shard order */
    size_t num_samples;  /* the split's count, 0 when unknown */
    char *alt_label;     /* the split's json label field, or NULL (.cls) */
    size_t skipped;      /* key groups without an image or label */
} WdsIndex;

/* Indexes split of the WebDataset at root into b (entries in shard order);
 * num_samples > 0 overrides the split's count. */
int ds_wds_index(const char *root, const char *split, size_t num_samples, const char *input_key,
                 const char *target_key, WdsIndex *x, DsBuild *b, CtErr *err);
void ds_wds_free(WdsIndex *x);

#endif
