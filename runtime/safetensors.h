/*
 * safetensors files: read and write, with timm's tensor names.
 * Format: u64 little-endian header length N, N bytes of JSON header
 * ({"name": {"dtype","shape","data_offsets":[b,e]}, "__metadata__": {str: str}}),
 * then the raw little-endian data. The header is parsed with cJSON, its size is
 * bounded, and every offset, dtype and shape is validated before data is used.
 */
#ifndef CTIMM_SAFETENSORS_H
#define CTIMM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ir/dtype.h"
#include "ir/status.h"

#define ST_MAX_DIMS 6

typedef struct StTensor {
    char *name;
    CtDType dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    void *data;
} StTensor;

/* An StFile owns everything in it; st_free releases it. */
typedef struct StFile {
    StTensor *tensors;
    int ntensors;
    char **meta_keys, **meta_vals;
    int nmeta;
} StFile;

int st_read(const char *path, StFile *out, CtErr *err);
/* The same for a whole file's bytes in memory; path only names it in
 * messages. */
int st_parse(const char *path, const void *buf, size_t size, StFile *out, CtErr *err);
void st_free(StFile *f);
const StTensor *st_find(const StFile *f, const char *name);
const char *st_meta(const StFile *f, const char *key);
int64_t st_numel(const StTensor *t);

/* Writes tensors (in the given order) and string metadata pairs. The file is
 * written to a temporary name beside path and renamed into place. */
int st_write(const char *path, const StTensor *tensors, int n,
             const char *const *meta_keys, const char *const *meta_vals, int nmeta, CtErr *err);

#endif
