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
/* Indexes every image member of the open tar fd (path for messages). */
int ds_tar_scan(const char *path, int fd, DsBuild *b, CtErr *err);

#endif
