/*
 * safetensors read and write.
 *
 * Reading: the whole file (up to ~100 MB in practice) is read into memory,
 * the JSON header is parsed with cJSON and every entry is validated (dtype,
 * shape, offsets inside the data section, size = numel * dtype size, no
 * overlaps, no duplicate names, string-only metadata) before any tensor
 * data is touched. Each tensor's bytes are then copied into their own
 * malloc'd buffer, so data is aligned for any element type (the offsets in
 * a file only guarantee byte alignment).
 *
 * Writing: tensors go out in the given order with consecutive offsets; the
 * header is padded with spaces to a multiple of 8 so the data section starts
 * 8-aligned. The file is written under a temporary name and renamed into
 * place so a crash never leaves a half-written file at path.
 *
 * The host is assumed little-endian (x86-64), like the format: tensor bytes
 * are copied as-is in both directions.
 */
/* fileno, fstat, fsync, getpid are POSIX. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "runtime/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies tensor data as-is and assumes a little-endian host"
#endif

/* A header larger than this is refused: real headers are a few hundred KiB,
 * and a corrupt length must not make us allocate gigabytes. */
#define ST_MAX_HEADER (100u * 1024u * 1024u)

/* cJSON stores numbers as doubles; integers are exact only up to 2^53. */
#define ST_MAX_JSON_INT 9007199254740992.0

static const char META_KEY[] = "__metadata__";

/* Where one tensor's bytes sit in the data section; used for overlap checks. */
typedef struct StSpan {
    uint64_t begin, end;
    const char *name;
    int index; /* into StFile.tensors */
} StSpan;

/* ------------------------------------------------------------------ */
/* Small shared helpers                                                */
/* ------------------------------------------------------------------ */

int64_t st_numel(const StTensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* malloc that never returns NULL for a zero size, so a NULL always means
 * out of memory and zero-element tensors still get a valid pointer. */
static void *alloc_bytes(size_t n)
{
    return malloc(n ? n : 1);
}

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void st_free(StFile *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->ntensors; i++) {
        free(f->tensors[i].name);
        free(f->tensors[i].data);
    }
    free(f->tensors);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    memset(f, 0, sizeof *f);
}

const StTensor *st_find(const StFile *f, const char *name)
{
    for (int i = 0; i < f->ntensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_vals[i];
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Reading                                                             */
/* ------------------------------------------------------------------ */

/* Reads the whole file at path into a fresh buffer. */
static int read_whole_file(const char *path, unsigned char **buf_out, size_t *size_out, CtErr *err)
{
    int rc = -1;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return ct_fail(err, "%s: cannot open: %s", path, strerror(errno));

    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        ct_fail(err, "%s: cannot stat: %s", path, strerror(errno));
        goto close_file;
    }
    if (!S_ISREG(sb.st_mode)) {
        ct_fail(err, "%s: not a regular file", path);
        goto close_file;
    }
    size_t size = (size_t)sb.st_size;
    unsigned char *buf = alloc_bytes(size);
    if (!buf) {
        ct_fail(err, "%s: out of memory reading %zu bytes", path, size);
        goto close_file;
    }
    if (fread(buf, 1, size, fp) != size) {
        ct_fail(err, "%s: short read (file changed while reading?)", path);
        free(buf);
        goto close_file;
    }
    *buf_out = buf;
    *size_out = size;
    rc = 0;
close_file:
    fclose(fp);
    return rc;
}

/* Reads a JSON number that must be a non-negative integer small enough to be
 * exact in a double. */
static int json_uint(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return -1;
    double d = item->valuedouble;
    if (!(d >= 0.0) || d > ST_MAX_JSON_INT || d != floor(d))
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static int parse_dtype(const char *path, const char *name, const cJSON *entry, StTensor *t, CtErr *err)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!cJSON_IsString(dt))
        return ct_fail(err, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    int code = ct_dtype_from_st_name(dt->valuestring);
    if (code < 0)
        return ct_fail(err, "%s: tensor '%s': unsupported dtype \"%s\"", path, name, dt->valuestring);
    t->dtype = (CtDType)code;
    return 0;
}

/* Parses "shape" and returns the element count, refusing counts whose byte
 * size could overflow (they could never match the offsets anyway). */
static int parse_shape(const char *path, const char *name, const cJSON *entry, StTensor *t,
                       uint64_t *numel_out, CtErr *err)
{
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    if (!cJSON_IsArray(shape))
        return ct_fail(err, "%s: tensor '%s': missing or non-array \"shape\"", path, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return ct_fail(err, "%s: tensor '%s': %d dims, at most %d supported", path, name, ndim,
                       ST_MAX_DIMS);
    uint64_t numel = 1, limit = UINT64_MAX / 8;
    int i = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape) {
        uint64_t d;
        if (json_uint(dim, &d) != 0)
            return ct_fail(err, "%s: tensor '%s': shape[%d] is not a non-negative integer", path,
                           name, i);
        if (d != 0 && numel > limit / d)
            return ct_fail(err, "%s: tensor '%s': shape is too large", path, name);
        numel *= d;
        t->shape[i++] = (int64_t)d;
    }
    t->ndim = ndim;
    *numel_out = numel;
    return 0;
}

/* Parses "data_offsets" and checks them against the data section size and
 * the size implied by dtype and shape. */
static int parse_offsets(const char *path, const char *name, const cJSON *entry, uint64_t nbytes,
                         uint64_t data_size, StSpan *span, CtErr *err)
{
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return ct_fail(err, "%s: tensor '%s': \"data_offsets\" must be an array [begin, end]",
                       path, name);
    uint64_t begin, end;
    if (json_uint(cJSON_GetArrayItem(offs, 0), &begin) != 0 ||
        json_uint(cJSON_GetArrayItem(offs, 1), &end) != 0)
        return ct_fail(err, "%s: tensor '%s': data_offsets must be non-negative integers", path,
                       name);
    if (begin > end)
        return ct_fail(err, "%s: tensor '%s': data_offsets [%llu, %llu] have begin > end", path,
                       name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return ct_fail(err, "%s: tensor '%s': data_offsets [%llu, %llu] out of range, data "
                       "section is %llu bytes", path, name, (unsigned long long)begin,
                       (unsigned long long)end, (unsigned long long)data_size);
    if (end - begin != nbytes)
        return ct_fail(err, "%s: tensor '%s': data_offsets span %llu bytes but dtype and shape "
                       "need %llu", path, name, (unsigned long long)(end - begin),
                       (unsigned long long)nbytes);
    span->begin = begin;
    span->end = end;
    span->name = name;
    return 0;
}

/* Validates one header entry and fills t (name included, data not yet). */
static int parse_tensor(const char *path, const cJSON *entry, uint64_t data_size, StTensor *t,
                        StSpan *span, CtErr *err)
{
    const char *name = entry->string;
    if (!cJSON_IsObject(entry))
        return ct_fail(err, "%s: tensor '%s': header entry is not an object", path, name);
    uint64_t numel = 0;
    if (parse_dtype(path, name, entry, t, err) != 0 ||
        parse_shape(path, name, entry, t, &numel, err) != 0)
        return -1;
    uint64_t nbytes = numel * ct_dtype_size(t->dtype);
    if (parse_offsets(path, name, entry, nbytes, data_size, span, err) != 0)
        return -1;
    t->nbytes = (size_t)nbytes;
    t->name = dup_string(name);
    if (!t->name)
        return ct_fail(err, "%s: tensor '%s': out of memory", path, name);
    return 0;
}

static int cmp_string_ptr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Refuses a repeated metadata key: sorted, so a header of many keys costs
 * n log n, not the n^2 of comparing each with all before it. */
static int check_meta_keys(const char *path, const StFile *f, CtErr *err)
{
    char **keys = malloc(((size_t)f->nmeta + 1) * sizeof *keys);
    if (!keys)
        return ct_fail(err, "%s: out of memory reading metadata", path);
    memcpy(keys, f->meta_keys, (size_t)f->nmeta * sizeof *keys);
    qsort(keys, (size_t)f->nmeta, sizeof *keys, cmp_string_ptr);
    int rc = 0;
    for (int i = 1; i < f->nmeta && !rc; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            rc = ct_fail(err, "%s: metadata '%s': duplicate key", path, keys[i]);
    free(keys);
    return rc;
}

static int parse_metadata(const char *path, const cJSON *meta, StFile *f, CtErr *err)
{
    if (!cJSON_IsObject(meta))
        return ct_fail(err, "%s: \"__metadata__\" is not an object", path);
    int n = cJSON_GetArraySize(meta);
    f->meta_keys = calloc((size_t)n + 1, sizeof *f->meta_keys);
    f->meta_vals = calloc((size_t)n + 1, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals)
        return ct_fail(err, "%s: out of memory reading metadata", path);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, meta) {
        if (!cJSON_IsString(kv))
            return ct_fail(err, "%s: metadata '%s': value is not a string", path, kv->string);
        char *k = dup_string(kv->string), *v = dup_string(kv->valuestring);
        if (!k || !v) {
            free(k);
            free(v);
            return ct_fail(err, "%s: out of memory reading metadata", path);
        }
        f->meta_keys[f->nmeta] = k;
        f->meta_vals[f->nmeta] = v;
        f->nmeta++;
    }
    return check_meta_keys(path, f, err);
}

static int cmp_span_begin(const void *a, const void *b)
{
    const StSpan *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_span_name(const void *a, const void *b)
{
    return strcmp(((const StSpan *)a)->name, ((const StSpan *)b)->name);
}

/* Refuses duplicate names and overlapping byte ranges. Sorts spans. */
static int check_spans(const char *path, StSpan *spans, int n, CtErr *err)
{
    qsort(spans, (size_t)n, sizeof *spans, cmp_span_name);
    for (int i = 1; i < n; i++)
        if (strcmp(spans[i - 1].name, spans[i].name) == 0)
            return ct_fail(err, "%s: tensor '%s': duplicate name in header", path, spans[i].name);
    qsort(spans, (size_t)n, sizeof *spans, cmp_span_begin);
    for (int i = 1; i < n; i++)
        if (spans[i].begin < spans[i - 1].end)
            return ct_fail(err, "%s: tensor '%s': data overlaps tensor '%s'", path, spans[i].name,
                           spans[i - 1].name);
    return 0;
}

/* Parses the header, refusing anything that is not one JSON object followed
 * only by whitespace padding. */
static int parse_header_json(const char *path, const char *json, size_t len, cJSON **root_out,
                             CtErr *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - json) : 0;
        return ct_fail(err, "%s: header is not valid JSON (near byte %zu of %zu)", path, at, len);
    }
    for (const char *p = end; p < json + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return ct_fail(err, "%s: header has trailing bytes after the JSON object", path);
        }
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ct_fail(err, "%s: header is not a JSON object", path);
    }
    *root_out = root;
    return 0;
}

/* Validates every header entry into f; spans receives each tensor's range. */
static int parse_entries(const char *path, const cJSON *root, uint64_t data_size, StFile *f,
                         StSpan *spans, CtErr *err)
{
    int seen_meta = 0;
    const cJSON *entry;
    cJSON_ArrayForEach(entry, root) {
        if (strcmp(entry->string, META_KEY) == 0) {
            if (seen_meta++)
                return ct_fail(err, "%s: \"__metadata__\" appears twice", path);
            if (parse_metadata(path, entry, f, err) != 0)
                return -1;
            continue;
        }
        StSpan *span = &spans[f->ntensors];
        if (parse_tensor(path, entry, data_size, &f->tensors[f->ntensors], span, err) != 0)
            return -1;
        span->index = f->ntensors++;
    }
    return check_spans(path, spans, f->ntensors, err);
}

/* Gives every tensor its own copy of its bytes: malloc'd, hence aligned for
 * any element type, which offsets inside the file do not guarantee. */
static int copy_tensor_data(const char *path, const StSpan *spans, const unsigned char *data,
                            StFile *f, CtErr *err)
{
    for (int i = 0; i < f->ntensors; i++) {
        StTensor *t = &f->tensors[spans[i].index];
        t->data = alloc_bytes(t->nbytes);
        if (!t->data)
            return ct_fail(err, "%s: tensor '%s': out of memory (%zu bytes)", path, t->name,
                           t->nbytes);
        memcpy(t->data, data + spans[i].begin, t->nbytes);
    }
    return 0;
}

/* Reads the 8-byte length and checks the header fits in the file. */
static int header_bounds(const char *path, const unsigned char *buf, size_t size,
                         uint64_t *hlen_out, CtErr *err)
{
    if (size < 8)
        return ct_fail(err, "%s: file is %zu bytes, too short for the 8-byte header length "
                       "(truncated?)", path, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    if (hlen > ST_MAX_HEADER)
        return ct_fail(err, "%s: header length %llu exceeds the %u-byte limit (corrupt file?)",
                       path, (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen > size - 8)
        return ct_fail(err, "%s: header length %llu exceeds the %zu bytes after it (truncated?)",
                       path, (unsigned long long)hlen, size - 8);
    *hlen_out = hlen;
    return 0;
}

/* Parses and validates a whole file image into out. */
static int parse_file(const char *path, const unsigned char *buf, size_t size, StFile *out,
                      CtErr *err)
{
    int rc = -1;
    uint64_t hlen = 0;
    if (header_bounds(path, buf, size, &hlen, err) != 0)
        return -1;
    cJSON *root = NULL;
    if (parse_header_json(path, (const char *)buf + 8, (size_t)hlen, &root, err) != 0)
        return -1;

    int nentries = cJSON_GetArraySize(root);
    /* +1 so an empty header still gets non-NULL arrays (NULL means no memory). */
    out->tensors = calloc((size_t)nentries + 1, sizeof *out->tensors);
    StSpan *spans = calloc((size_t)nentries + 1, sizeof *spans);
    if (!out->tensors || !spans) {
        ct_fail(err, "%s: out of memory for %d header entries", path, nentries);
        goto free_spans_and_root;
    }
    const unsigned char *data = buf + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    if (parse_entries(path, root, data_size, out, spans, err) != 0)
        goto free_spans_and_root;
    if (copy_tensor_data(path, spans, data, out, err) != 0)
        goto free_spans_and_root;
    rc = 0;
free_spans_and_root:
    free(spans);
    cJSON_Delete(root);
    return rc;
}

int st_parse(const char *path, const void *buf, size_t size, StFile *out, CtErr *err)
{
    memset(out, 0, sizeof *out);
    int rc = parse_file(path, buf, size, out, err);
    if (rc != 0)
        st_free(out);
    return rc;
}

int st_read(const char *path, StFile *out, CtErr *err)
{
    memset(out, 0, sizeof *out);
    unsigned char *buf = NULL;
    size_t size = 0;
    if (read_whole_file(path, &buf, &size, err) != 0)
        return -1;
    int rc = st_parse(path, buf, size, out, err);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Writing                                                             */
/* ------------------------------------------------------------------ */

/* Adds an integer as raw JSON text so values above 2^31 print exactly
 * (cJSON formats doubles with %g otherwise). */
static int add_raw_int(cJSON *array, uint64_t v)
{
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    cJSON *item = cJSON_CreateRaw(text);
    if (!item)
        return -1;
    cJSON_AddItemToArray(array, item);
    return 0;
}

/* Checks a tensor handed to st_write is self-consistent and can be read back. */
static int check_write_tensor(const char *path, const StTensor *t, CtErr *err)
{
    const char *name = t->name ? t->name : "(null)";
    if (!t->name || strcmp(t->name, META_KEY) == 0)
        return ct_fail(err, "%s: tensor '%s': invalid tensor name", path, name);
    if ((int)t->dtype < 0 || t->dtype >= CT_NDTYPE)
        return ct_fail(err, "%s: tensor '%s': invalid dtype %d", path, name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
        return ct_fail(err, "%s: tensor '%s': %d dims, at most %d supported", path, name, t->ndim,
                       ST_MAX_DIMS);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (t->shape[i] < 0 || (d != 0 && numel > UINT64_MAX / 8 / d))
            return ct_fail(err, "%s: tensor '%s': bad shape[%d] = %lld", path, name, i,
                           (long long)t->shape[i]);
        numel *= d;
    }
    if (numel * ct_dtype_size(t->dtype) != t->nbytes)
        return ct_fail(err, "%s: tensor '%s': nbytes %zu does not match dtype and shape", path,
                       name, t->nbytes);
    if (t->nbytes && !t->data)
        return ct_fail(err, "%s: tensor '%s': no data", path, name);
    return 0;
}

static cJSON *tensor_entry(const StTensor *t, uint64_t begin)
{
    cJSON *entry = cJSON_CreateObject();
    if (!cJSON_AddStringToObject(entry, "dtype", ct_dtype_st_name(t->dtype)))
        goto free_entry;
    cJSON *shape = cJSON_AddArrayToObject(entry, "shape");
    cJSON *offs = cJSON_AddArrayToObject(entry, "data_offsets");
    if (!shape || !offs)
        goto free_entry;
    for (int i = 0; i < t->ndim; i++)
        if (add_raw_int(shape, (uint64_t)t->shape[i]) != 0)
            goto free_entry;
    if (add_raw_int(offs, begin) != 0 || add_raw_int(offs, begin + t->nbytes) != 0)
        goto free_entry;
    return entry;
free_entry:
    cJSON_Delete(entry);
    return NULL;
}

/* Builds the header text, metadata first (as the Python library does). */
static char *build_header(const char *path, const StTensor *tensors, int n,
                          const char *const *meta_keys, const char *const *meta_vals, int nmeta,
                          CtErr *err)
{
    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        goto out_of_memory;
    if (nmeta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, META_KEY);
        if (!meta)
            goto out_of_memory;
        for (int i = 0; i < nmeta; i++) {
            if (!meta_keys[i] || !meta_vals[i]) {
                ct_fail(err, "%s: metadata entry %d is NULL", path, i);
                goto free_root;
            }
            if (cJSON_GetObjectItemCaseSensitive(meta, meta_keys[i])) {
                ct_fail(err, "%s: metadata '%s': duplicate key", path, meta_keys[i]);
                goto free_root;
            }
            if (!cJSON_AddStringToObject(meta, meta_keys[i], meta_vals[i]))
                goto out_of_memory;
        }
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        if (check_write_tensor(path, &tensors[i], err) != 0)
            goto free_root;
        if (cJSON_GetObjectItemCaseSensitive(root, tensors[i].name)) {
            ct_fail(err, "%s: tensor '%s': duplicate name", path, tensors[i].name);
            goto free_root;
        }
        cJSON *entry = tensor_entry(&tensors[i], offset);
        if (!entry)
            goto out_of_memory;
        cJSON_AddItemToObject(root, tensors[i].name, entry);
        offset += tensors[i].nbytes;
    }
    text = cJSON_PrintUnformatted(root);
    if (!text)
        goto out_of_memory;
    goto free_root;
out_of_memory:
    ct_fail(err, "%s: out of memory building the header", path);
free_root:
    cJSON_Delete(root);
    return text;
}

/* Writes length, padded header and data to fp; the caller closes it. */
static int write_contents(FILE *fp, const char *header, const StTensor *tensors, int n)
{
    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) / 8 * 8;
    unsigned char len_le[8];
    for (int i = 0; i < 8; i++)
        len_le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    if (fwrite(len_le, 1, 8, fp) != 8 || fwrite(header, 1, hlen, fp) != hlen)
        return -1;
    for (size_t i = hlen; i < padded; i++)
        if (fputc(' ', fp) == EOF)
            return -1;
    for (int i = 0; i < n; i++)
        if (tensors[i].nbytes && fwrite(tensors[i].data, 1, tensors[i].nbytes, fp) != tensors[i].nbytes)
            return -1;
    if (fflush(fp) != 0 || fsync(fileno(fp)) != 0)
        return -1;
    return 0;
}

/* Writes the file under tmp_path; removes it on any failure. */
static int write_temp(const char *path, const char *tmp_path, const char *header,
                      const StTensor *tensors, int n, CtErr *err)
{
    FILE *fp = fopen(tmp_path, "wb");
    if (!fp)
        return ct_fail(err, "%s: cannot create temporary file %s: %s", path, tmp_path,
                       strerror(errno));
    int wrc = write_contents(fp, header, tensors, n);
    int saved = errno;
    if (fclose(fp) != 0 && wrc == 0) {
        wrc = -1;
        saved = errno;
    }
    if (wrc != 0) {
        remove(tmp_path);
        return ct_fail(err, "%s: write to %s failed: %s", path, tmp_path, strerror(saved));
    }
    return 0;
}

int st_write(const char *path, const StTensor *tensors, int n,
             const char *const *meta_keys, const char *const *meta_vals, int nmeta, CtErr *err)
{
    int rc = -1;
    char *header = build_header(path, tensors, n, meta_keys, meta_vals, nmeta, err);
    if (!header)
        return -1;
    size_t tmp_len = strlen(path) + 32;
    char *tmp_path = malloc(tmp_len);
    if (!tmp_path) {
        ct_fail(err, "%s: out of memory", path);
        goto free_header;
    }
    snprintf(tmp_path, tmp_len, "%s.tmp.%ld", path, (long)getpid());
    if (write_temp(path, tmp_path, header, tensors, n, err) != 0)
        goto free_tmp_path;
    if (rename(tmp_path, path) != 0) {
        ct_fail(err, "%s: cannot rename %s into place: %s", path, tmp_path, strerror(errno));
        remove(tmp_path);
        goto free_tmp_path;
    }
    rc = 0;
free_tmp_path:
    free(tmp_path);
free_header:
    free(header);
    return rc;
}
