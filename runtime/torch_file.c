/*
 * torch.save's two containers around the unpickler: where the pickles are,
 * where each storage's bytes are (a zip entry, or a span after the legacy
 * format's pickles), and the state_dicts made from the unpickled tree.
 * Storage references are checked once for the whole file (one type and
 * element count per key) and each storage's bytes against them when a
 * tensor made from it first uses it; storages no tensor is asked of (the
 * optimizer's, when only the weights are read) are never touched.
 *
 * torch_open maps the file instead of reading it: a checkpoint of several
 * GB is then copied once (into the tensors), not twice.
 *
 * Over 600 lines: the metadata's str() rendering (put_*, render) belongs
 * in a file of its own.
 */
#include "runtime/torch_file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/torch_pickle.h"
#include "runtime/zip_archive.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "torch_file.c copies little-endian tensor data as-is and assumes a little-endian host"
#endif

/* torch.serialization's MAGIC_NUMBER, 0x1950a86a20f9469cfc6c, as LONG1's bytes. */
static const unsigned char legacy_magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
#define LEGACY_PROTOCOL 1001
#define MAX_META_TEXT 2048 /* longer values are left out of the metadata */
#define MAX_META_DEPTH 4
/* What the tensors may take beyond 4x the file: room for a small model
 * whose weights are views of a few shared storages (the CLI test's). A
 * fuzzing build lowers it so that a mutated stride cannot make every run
 * fill 64 MiB. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define EXPAND_ALLOWANCE (1ull << 20)
#else
#define EXPAND_ALLOWANCE (64ull << 20)
#endif

/* The type and element count a storage key has in every reference to it. */
typedef struct Ref {
    const char *key;
    int dtype;
    int64_t numel;
} Ref;

/* A legacy file's storage: its bytes after the pickles. */
typedef struct Blob {
    const char *key;
    const unsigned char *data;
    uint64_t nbytes;
} Blob;

typedef struct Ctx {
    const char *path;
    CtErr *err;
    PkArena *arena;
    int zip;
    ZipArchive z;
    char top[256]; /* the zip's folder, "archive" or the file's stem */
    Ref *refs;
    size_t nrefs;
    Blob *blobs;
    size_t nblobs;
    uint64_t budget; /* bytes the tensors made may still take */
} Ctx;

int torch_file_sniff(const unsigned char *h, size_t n)
{
    if (n >= 4 && !memcmp(h, "PK\3\4", 4))
        return 1;
    if (n < 3 || h[0] != 0x80 || h[1] < 2 || h[1] > 5)
        return 0;
    size_t at = h[2] == 0x95 ? 11 : 2; /* protocol 4's FRAME comes first */
    return n >= at + 2 && h[at] == 0x8a && h[at + 1] == sizeof legacy_magic;
}

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* ------------------------------------------------------------------ */
/* Storages                                                            */
/* ------------------------------------------------------------------ */

static int ref_by_key(const void *a, const void *b) { return strcmp(((const Ref *)a)->key, ((const Ref *)b)->key); }
static int blob_by_key(const void *a, const void *b) { return strcmp(((const Blob *)a)->key, ((const Blob *)b)->key); }

/* One Ref per storage key, refusing a key used with two types or sizes
 * (torch would read the second as the first). */
static int index_storages(Ctx *c)
{
    size_t n;
    const PkValue *const *s = pk_storages(c->arena, &n);
    c->refs = calloc(n + 1, sizeof *c->refs);
    if (!c->refs)
        return ct_fail(c->err, "%s: out of memory for %zu storages", c->path, n);
    for (size_t i = 0; i < n; i++)
        c->refs[i] = (Ref){s[i]->u.storage.key, s[i]->u.storage.dtype, s[i]->u.storage.numel};
    qsort(c->refs, n, sizeof *c->refs, ref_by_key);
    for (size_t i = 0; i < n; i++) {
        const Ref *r = &c->refs[i], *prev = c->nrefs ? &c->refs[c->nrefs - 1] : NULL;
        if (prev && !strcmp(prev->key, r->key)) {
            if (prev->dtype != r->dtype || prev->numel != r->numel)
                return ct_fail(c->err, "%s: storage '%.64s' is used as %lld x torch.%s and as %lld x torch.%s", c->path,
                               r->key, (long long)prev->numel, pk_dtype(prev->dtype)->storage, (long long)r->numel,
                               pk_dtype(r->dtype)->storage);
            continue;
        }
        c->refs[c->nrefs++] = *r;
    }
    return 0;
}

static const Ref *find_ref(const Ctx *c, const char *key)
{
    Ref k = {.key = key};
    return c->nrefs ? bsearch(&k, c->refs, c->nrefs, sizeof *c->refs, ref_by_key) : NULL;
}

/* The bytes of storage s (numel of its type), checked against the file. */
static int storage_data(Ctx *c, const PkValue *s, const unsigned char **data)
{
    const char *key = s->u.storage.key;
    const PkDType *dt = pk_dtype(s->u.storage.dtype);
    uint64_t want = (uint64_t)s->u.storage.numel * dt->size, have;
    if (!c->zip) {
        Blob k = {.key = key};
        const Blob *b = c->nblobs ? bsearch(&k, c->blobs, c->nblobs, sizeof *c->blobs, blob_by_key) : NULL;
        if (!b)
            return ct_fail(c->err, "%s: storage '%.64s' is missing from the file", c->path, key);
        *data = b->data; /* its size is its element count, checked against the Ref */
        return 0;
    }
    char name[400];
    snprintf(name, sizeof name, "%s/data/%s", c->top, key);
    int i = zip_find(&c->z, name);
    if (i < 0)
        return ct_fail(c->err, "%s: storage '%.64s' (zip entry %.200s) is missing from the archive", c->path, key, name);
    if (zip_entry_data(&c->z, i, data, &have, c->err))
        return ct_failctx(c->err, "%s", c->path);
    if (have != want)
        return ct_fail(c->err, "%s: storage '%.64s' has %llu bytes but its pickle says %lld x torch.%s (%llu bytes)",
                       c->path, key, (unsigned long long)have, (long long)s->u.storage.numel, dt->storage,
                       (unsigned long long)want);
    return 0;
}

/* ------------------------------------------------------------------ */
/* The two containers                                                  */
/* ------------------------------------------------------------------ */

static int load_zip(Ctx *c, const void *buf, size_t size, const PkValue **root)
{
    if (zip_open(c->path, buf, size, &c->z, c->err))
        return -1;
    c->zip = 1;
    int pkl = -1;
    for (int i = 0; i < c->z.n; i++) {
        const char *name = c->z.e[i].name, *slash = strchr(name, '/');
        if (!slash || strcmp(slash + 1, "data.pkl"))
            continue;
        if (pkl >= 0)
            return ct_fail(c->err, "%s: two archives in one zip (%.100s and %.100s)", c->path, c->z.e[pkl].name, name);
        if ((size_t)(slash - name) >= sizeof c->top)
            return ct_fail(c->err, "%s: the archive's folder name is over %zu bytes", c->path, sizeof c->top);
        pkl = i;
        memcpy(c->top, name, (size_t)(slash - name));
        c->top[slash - name] = 0;
    }
    if (pkl < 0)
        return ct_fail(c->err, "%s: a zip archive without FOLDER/data.pkl: not a torch.save file", c->path);
    char name[400];
    snprintf(name, sizeof name, "%s/constants.pkl", c->top);
    if (zip_find(&c->z, name) >= 0)
        return ct_fail(c->err, "%s: a TorchScript archive (torch.jit.save), not torch.save's; save the model's "
                       "state_dict() with torch.save", c->path);
    const unsigned char *data;
    uint64_t n;
    snprintf(name, sizeof name, "%s/byteorder", c->top);
    int bo = zip_find(&c->z, name);
    if (bo >= 0) {
        if (zip_entry_data(&c->z, bo, &data, &n, c->err))
            return ct_failctx(c->err, "%s", c->path);
        if (n != 6 || memcmp(data, "little", 6))
            return ct_fail(c->err, "%s: written on a big-endian machine (%.200s), not supported", c->path, name);
    }
    if (zip_entry_data(&c->z, pkl, &data, &n, c->err))
        return ct_failctx(c->err, "%s", c->path);
    size_t used;
    snprintf(name, sizeof name, "%s (%s/data.pkl)", c->path, c->top);
    return pk_load(c->arena, name, data, (size_t)n, &used, root, c->err);
}

/* The legacy format's storages: for each key the pickle listed, its element
 * count (8 bytes) and its bytes, in that order. */
static int read_legacy_storages(Ctx *c, const PkValue *keys, const unsigned char *b, size_t size, size_t pos)
{
    if (keys->kind != PK_LIST)
        return ct_fail(c->err, "%s: the storage keys are %s, not a list", c->path, pk_kind_name(keys));
    c->blobs = calloc(keys->u.seq.n + 1, sizeof *c->blobs);
    if (!c->blobs)
        return ct_fail(c->err, "%s: out of memory for %zu storages", c->path, keys->u.seq.n);
    for (size_t i = 0; i < keys->u.seq.n; i++) {
        const PkValue *k = keys->u.seq.v[i];
        if (k->kind != PK_STR)
            return ct_fail(c->err, "%s: storage key %zu is %s, not a str", c->path, i, pk_kind_name(k));
        const Ref *r = find_ref(c, k->u.str.s);
        if (!r)
            return ct_fail(c->err, "%s: storage '%.64s' is listed but nothing refers to it", c->path, k->u.str.s);
        if (size - pos < 8)
            return ct_fail(c->err, "%s: the file ends before storage '%.64s' (truncated?)", c->path, r->key);
        uint64_t count = 0, nbytes;
        for (int j = 7; j >= 0; j--)
            count = count << 8 | b[pos + (size_t)j];
        pos += 8;
        if (count != (uint64_t)r->numel)
            return ct_fail(c->err, "%s: storage '%.64s' holds %llu elements but its tensors say %lld", c->path, r->key,
                           (unsigned long long)count, (long long)r->numel);
        if (__builtin_mul_overflow(count, (uint64_t)pk_dtype(r->dtype)->size, &nbytes) || nbytes > size - pos)
            return ct_fail(c->err, "%s: storage '%.64s' (%llu elements) runs past the end of the file (truncated?)",
                           c->path, r->key, (unsigned long long)count);
        c->blobs[c->nblobs++] = (Blob){r->key, b + pos, nbytes};
        pos += nbytes;
    }
    qsort(c->blobs, c->nblobs, sizeof *c->blobs, blob_by_key);
    for (size_t i = 1; i < c->nblobs; i++)
        if (!strcmp(c->blobs[i - 1].key, c->blobs[i].key))
            return ct_fail(c->err, "%s: storage '%.64s' is listed twice", c->path, c->blobs[i].key);
    return 0;
}

static int load_legacy(Ctx *c, const unsigned char *b, size_t size, const PkValue **root)
{
    static const char *const parts[] = {"magic number", "protocol version", "sys_info", "object", "storage keys"};
    const PkValue *v[5];
    size_t pos = 0;
    for (int i = 0; i < 5; i++) {
        char name[400];
        size_t used;
        snprintf(name, sizeof name, "%s (%s)", c->path, parts[i]);
        if (pk_load(c->arena, name, b + pos, size - pos, &used, &v[i], c->err))
            return -1;
        pos += used;
        if (i == 0 && (v[0]->kind != PK_BIGINT || v[0]->u.str.n != sizeof legacy_magic ||
                       memcmp(v[0]->u.str.s, legacy_magic, sizeof legacy_magic)))
            return ct_fail(c->err, "%s: a pickle, but not torch.save's (no magic number)", c->path);
        if (i == 1 && (v[1]->kind != PK_INT || v[1]->u.i != LEGACY_PROTOCOL))
            return ct_fail(c->err, "%s: torch.save's legacy format of another protocol version (%s %lld, not %d)",
                           c->path, pk_kind_name(v[1]), v[1]->kind == PK_INT ? (long long)v[1]->u.i : 0LL,
                           LEGACY_PROTOCOL);
        if (i == 2) {
            const PkValue *le = pk_dict_get(v[2], "little_endian");
            if (!le || le->kind != PK_BOOL || !le->u.i)
                return ct_fail(c->err, "%s: its sys_info does not say little_endian: True (a big-endian machine's "
                               "file?), not supported", c->path);
        }
    }
    *root = v[3];
    return index_storages(c) || read_legacy_storages(c, v[4], b, size, pos);
}

/* ------------------------------------------------------------------ */
/* Tensors                                                             */
/* ------------------------------------------------------------------ */

/* The elements of a strided view (base: its first element) in row-major
 * order into dst, whole runs at once where the trailing dims are
 * contiguous in the storage. */
static void gather(unsigned char *dst, const unsigned char *base, int ndim, const int64_t *size,
                   const int64_t *stride, size_t es)
{
    size_t run = es;
    int d = ndim;
    while (d > 0 && (size[d - 1] == 1 || (uint64_t)stride[d - 1] * es == run))
        run *= (size_t)size[--d];
    int64_t idx[ST_MAX_DIMS] = {0};
    for (;;) {
        int64_t off = 0;
        for (int k = 0; k < d; k++)
            off += idx[k] * stride[k];
        memcpy(dst, base + (size_t)off * es, run);
        dst += run;
        int k = d - 1;
        while (k >= 0 && ++idx[k] == size[k])
            idx[k--] = 0;
        if (k < 0)
            return;
    }
}

/* timm's clean_state_dict: '_orig_mod.' and 'module.' (torch.compile's
 * and DDP's wrappers) dropped, wrapped in either order. */
static const char *clean_name(const char *k)
{
    static const char *const wrappers[] = {"_orig_mod.", "module.", "_orig_mod."};
    for (int i = 0; i < 3; i++)
        if (!strncmp(k, wrappers[i], strlen(wrappers[i])))
            k += strlen(wrappers[i]);
    return k;
}

/* One tensor of a state_dict (which names it in messages) into t. */
static int make_tensor(Ctx *c, const char *which, const char *name, const PkValue *v, StTensor *t)
{
    if (v->kind != PK_TENSOR)
        return ct_fail(c->err, "%s: '%.200s' in the %s is %s, not a tensor", c->path, name, which, pk_kind_name(v));
    const PkDType *dt = pk_dtype(v->u.tensor.dtype);
    if (dt->ct < 0)
        return ct_fail(c->err, "%s: '%.200s' is torch.%s; ctimm reads float32, float64, float16, bfloat16, int64, "
                       "int32, uint8 and bool tensors", c->path, name, dt->name);
    const PkValue *size = v->u.tensor.size, *stride = v->u.tensor.stride;
    int ndim = (int)size->u.seq.n;
    if (size->u.seq.n > ST_MAX_DIMS)
        return ct_fail(c->err, "%s: '%.200s' has %zu dims, at most %d are supported", c->path, name, size->u.seq.n,
                       ST_MAX_DIMS);
    int64_t sz[ST_MAX_DIMS], st[ST_MAX_DIMS];
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        sz[d] = size->u.seq.v[d]->u.i;
        st[d] = stride->u.seq.v[d]->u.i;
        numel *= (uint64_t)sz[d]; /* the unpickler checked the product fits */
    }
    uint64_t nbytes = numel * dt->size;
    if (nbytes > c->budget)
        return ct_fail(c->err, "%s: '%.200s' would take the tensors past 4x the file's size + 64 MiB (views "
                       "repeating their storage?)", c->path, name);
    c->budget -= nbytes;
    const unsigned char *data;
    if (storage_data(c, v->u.tensor.storage, &data))
        return -1;
    t->name = dup_string(name);
    t->data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!t->name || !t->data)
        return ct_fail(c->err, "%s: '%.200s': out of memory (%llu bytes)", c->path, name, (unsigned long long)nbytes);
    t->dtype = (CtDType)dt->ct;
    t->ndim = ndim;
    memcpy(t->shape, sz, sizeof(int64_t) * (size_t)ndim);
    t->nbytes = (size_t)nbytes;
    if (numel)
        gather(t->data, data + (uint64_t)v->u.tensor.offset * dt->size, ndim, sz, st, dt->size);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Refuses a name given twice (names are sorted in a copy); note follows
 * the name in the message. */
static int check_unique(Ctx *c, char **names, int n, const char *what, const char *note)
{
    if (n < 2)
        return 0;
    char **s = malloc(((size_t)n + 1) * sizeof *s);
    if (!s)
        return ct_fail(c->err, "%s: out of memory", c->path);
    memcpy(s, names, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, by_name);
    int rc = 0;
    for (int i = 1; i < n && !rc; i++)
        if (!strcmp(s[i - 1], s[i]))
            rc = ct_fail(c->err, "%s: %s '%.200s' appears twice%s", c->path, what, s[i], note);
    free(s);
    return rc;
}

/* The tensors of state_dict dict (its role named by which) into out. */
static int fill(Ctx *c, const PkValue *dict, const char *which, StFile *out)
{
    size_t n = dict->u.seq.n / 2;
    out->tensors = calloc(n + 1, sizeof *out->tensors);
    char **names = calloc(n + 1, sizeof *names);
    int rc = -1;
    if (!out->tensors || !names) {
        ct_fail(c->err, "%s: out of memory for %zu tensors", c->path, n);
        goto free_names;
    }
    for (size_t i = 0; i < n; i++) {
        const PkValue *k = dict->u.seq.v[2 * i];
        if (k->kind != PK_STR || k->u.str.n != strlen(k->u.str.s)) {
            ct_fail(c->err, "%s: a key of the %s is a %s, not a tensor name", c->path, which,
                    k->kind == PK_STR ? "a str with a NUL" : pk_kind_name(k));
            goto free_names;
        }
        if (make_tensor(c, which, clean_name(k->u.str.s), dict->u.seq.v[2 * i + 1], &out->tensors[i])) {
            out->ntensors = (int)i + 1; /* st_free releases what it got */
            goto free_names;
        }
        out->ntensors = (int)i + 1;
        names[i] = out->tensors[i].name;
    }
    rc = check_unique(c, names, out->ntensors, "tensor", " (after dropping 'module.' prefixes)");
free_names:
    free(names);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Metadata                                                            */
/* ------------------------------------------------------------------ */

typedef struct Text {
    char s[MAX_META_TEXT];
    size_t n;
    int over;
} Text;

static void put(Text *t, const char *s)
{
    size_t k = strlen(s);
    if (t->over || k >= sizeof t->s - t->n) {
        t->over = 1;
        return;
    }
    memcpy(t->s + t->n, s, k + 1);
    t->n += k;
}

/* Python's repr of a float: the fewest digits that read back the same,
 * positional between 1e-4 and 1e16. */
static void put_float(Text *t, double x)
{
    char e[40], f[400];
    if (isnan(x) || isinf(x)) {
        put(t, isnan(x) ? "nan" : x < 0 ? "-inf" : "inf");
        return;
    }
    int p = 1;
    for (; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, x);
    int exp = atoi(strchr(e, 'e') + 1);
    if (exp < -4 || exp >= 16) {
        put(t, e);
        return;
    }
    snprintf(f, sizeof f, "%.*f", p - 1 - exp > 0 ? p - 1 - exp : 0, x);
    put(t, f);
    if (!strchr(f, '.'))
        put(t, ".0");
}

/* Python's repr of a str: single quotes, escapes for quotes, backslashes
 * and bytes that are not printable ASCII. */
static void put_repr(Text *t, const PkValue *v)
{
    put(t, "'");
    for (size_t i = 0; i < v->u.str.n; i++) {
        unsigned char ch = (unsigned char)v->u.str.s[i];
        char b[8];
        if (ch == '\'' || ch == '\\')
            snprintf(b, sizeof b, "\\%c", ch);
        else if (ch < ' ' || ch > '~')
            snprintf(b, sizeof b, "\\x%02x", ch);
        else
            snprintf(b, sizeof b, "%c", ch);
        put(t, b);
    }
    put(t, "'");
}

/* v as Python's str() prints it (repr inside containers); -1 for a value
 * that is not plain data or nests too deep. */
static int render(Text *t, const PkValue *v, int depth, int inner)
{
    char b[32];
    switch (v->kind) {
    case PK_NONE: put(t, "None"); return 0;
    case PK_BOOL: put(t, v->u.i ? "True" : "False"); return 0;
    case PK_INT: snprintf(b, sizeof b, "%lld", (long long)v->u.i); put(t, b); return 0;
    case PK_FLOAT: put_float(t, v->u.f); return 0;
    case PK_STR:
        if (v->u.str.n != strlen(v->u.str.s))
            return -1;
        if (inner)
            put_repr(t, v);
        else
            put(t, v->u.str.s);
        return 0;
    case PK_TUPLE: case PK_LIST: case PK_DICT: {
        if (depth == MAX_META_DEPTH)
            return -1;
        int dict = v->kind == PK_DICT;
        put(t, dict ? "{" : v->kind == PK_LIST ? "[" : "(");
        for (size_t i = 0; i < v->u.seq.n; i++) {
            if (t->over) /* stop early: a memo can repeat a long list many times */
                return -1;
            put(t, i == 0 ? "" : dict && i % 2 ? ": " : ", ");
            if (render(t, v->u.seq.v[i], depth + 1, 1))
                return -1;
        }
        put(t, v->kind == PK_TUPLE && v->u.seq.n == 1 ? ",)" : dict ? "}" : v->kind == PK_LIST ? "]" : ")");
        return 0;
    }
    default: return -1;
    }
}

static int add_meta(Ctx *c, StFile *f, const char *key, const char *val)
{
    char **k = realloc(f->meta_keys, ((size_t)f->nmeta + 1) * sizeof *k);
    if (k)
        f->meta_keys = k;
    char **v = realloc(f->meta_vals, ((size_t)f->nmeta + 1) * sizeof *v);
    if (v)
        f->meta_vals = v;
    char *ks = k && v ? dup_string(key) : NULL, *vs = ks ? dup_string(val) : NULL;
    if (!vs) {
        free(ks);
        return ct_fail(c->err, "%s: out of memory for metadata", c->path);
    }
    f->meta_keys[f->nmeta] = ks;
    f->meta_vals[f->nmeta++] = vs;
    return 0;
}

/* The plain values of a dict (a checkpoint's, or its args') as metadata
 * "<prefix><key>". */
static int dict_meta(Ctx *c, const PkValue *dict, const char *prefix, StFile *f)
{
    for (size_t i = 0; i + 1 < dict->u.seq.n; i += 2) {
        const PkValue *k = dict->u.seq.v[i], *v = dict->u.seq.v[i + 1];
        if (k->kind != PK_STR || k->u.str.n != strlen(k->u.str.s) || k->u.str.n > 200)
            continue;
        if (!*prefix && !strcmp(k->u.str.s, "args")) {
            const PkValue *fields = v->kind == PK_RECORD ? v->u.fields : v;
            if (fields && fields->kind == PK_DICT && dict_meta(c, fields, "args.", f))
                return -1;
            continue;
        }
        Text t = {.n = 0};
        if (render(&t, v, 0, 0) || t.over)
            continue;
        char key[256];
        snprintf(key, sizeof key, "%s%s", prefix, k->u.str.s);
        if (add_meta(c, f, key, t.s))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Which dicts are the state_dicts                                     */
/* ------------------------------------------------------------------ */

static const PkValue *get_dict(Ctx *c, const PkValue *root, const char *key, int *bad)
{
    const PkValue *v = pk_dict_get(root, key);
    if (!v || v->kind == PK_NONE || v->kind == PK_TENSOR) /* a tensor: a bare state_dict's */
        return NULL;
    if (v->kind != PK_DICT) {
        *bad = ct_fail(c->err, "%s: the checkpoint's '%s' is %s, not a state_dict", c->path, key, pk_kind_name(v));
        return NULL;
    }
    return v;
}

static int read_dicts(Ctx *c, const PkValue *root, int use_ema, StFile *out, int *from_ema)
{
    if (root->kind != PK_DICT)
        return ct_fail(c->err, "%s: holds %s, not a state_dict or a checkpoint dict", c->path, pk_kind_name(root));
    int bad = 0;
    const PkValue *sd = NULL;
    static const char *const keys[] = {"state_dict_ema", "model_ema", "state_dict", "model"};
    for (int i = use_ema ? 0 : 2; i < 4 && !sd && !bad; i++) {
        sd = get_dict(c, root, keys[i], &bad);
        *from_ema = sd && i < 2;
    }
    if (bad)
        return -1;
    if (sd)
        return fill(c, sd, *from_ema ? "model EMA's state_dict" : "state_dict", out) || dict_meta(c, root, "", out) ||
                       check_unique(c, out->meta_keys, out->nmeta, "metadata key", "")
                   ? -1
                   : 0;
    /* a bare state_dict: every value a tensor */
    for (size_t i = 0; i + 1 < root->u.seq.n; i += 2) {
        const PkValue *k = root->u.seq.v[i], *v = root->u.seq.v[i + 1];
        if (v->kind != PK_TENSOR)
            return ct_fail(c->err, "%s: a dict without 'state_dict' or 'model', and its '%.200s' is %s, not a "
                           "tensor: neither a checkpoint nor a state_dict", c->path,
                           k->kind == PK_STR ? k->u.str.s : pk_kind_name(k), pk_kind_name(v));
    }
    return fill(c, root, "state_dict", out);
}

/* ------------------------------------------------------------------ */
/* Entry points                                                        */
/* ------------------------------------------------------------------ */

struct TorchFile {
    Ctx c;
    char *path; /* c.path */
    const PkValue *root;
    void *map; /* the mapped file (torch_open), or NULL */
    size_t size;
};

static void close_ctx(Ctx *c)
{
    zip_close(&c->z);
    free(c->refs);
    free(c->blobs);
    pk_arena_free(c->arena);
}

/* Unpickles buf (path names it in messages) into a new *out; buf stays the caller's. */
static int open_buf(const char *path, const void *buf, size_t size, TorchFile **out, CtErr *err)
{
    *out = NULL;
    if (!torch_file_sniff(buf, size))
        return ct_fail(err, "%s: not a PyTorch file (torch.save's begin with a zip header or a pickled magic number)",
                       path);
    TorchFile *f = calloc(1, sizeof *f);
    char *p = dup_string(path);
    if (!f || !p) {
        free(f);
        free(p);
        return ct_fail(err, "%s: out of memory", path);
    }
    f->path = p;
    f->c = (Ctx){.path = p, .err = err, .budget = 4 * (uint64_t)size + EXPAND_ALLOWANCE};
    int rc = pk_arena_create(&f->c.arena, err);
    if (!rc) {
        const unsigned char *b = buf;
        if (b[0] == 'P')
            rc = load_zip(&f->c, buf, size, &f->root) || index_storages(&f->c);
        else
            rc = load_legacy(&f->c, buf, size, &f->root);
    }
    if (rc) {
        torch_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void torch_close(TorchFile *f)
{
    if (!f)
        return;
    close_ctx(&f->c);
    if (f->map)
        munmap(f->map, f->size);
    free(f->path);
    free(f);
}

const PkValue *torch_root(const TorchFile *f) { return f->root; }

int torch_state_dict(TorchFile *f, int use_ema, StFile *out, int *from_ema, CtErr *err)
{
    int ema = 0;
    memset(out, 0, sizeof *out);
    f->c.err = err;
    if (read_dicts(&f->c, f->root, use_ema, out, &ema)) {
        st_free(out);
        return -1;
    }
    if (from_ema)
        *from_ema = ema;
    return 0;
}

int torch_tensor(TorchFile *f, const PkValue *v, const char *name, StTensor *t, CtErr *err)
{
    memset(t, 0, sizeof *t);
    f->c.err = err;
    if (make_tensor(&f->c, "checkpoint", name, v, t) == 0)
        return 0;
    free(t->name);
    free(t->data);
    memset(t, 0, sizeof *t);
    return -1;
}

int torch_parse(const char *path, const void *buf, size_t size, int use_ema, StFile *out, int *from_ema,
                CtErr *err)
{
    TorchFile *f;
    memset(out, 0, sizeof *out);
    if (from_ema)
        *from_ema = 0;
    if (open_buf(path, buf, size, &f, err))
        return -1;
    int rc = torch_state_dict(f, use_ema, out, from_ema, err);
    torch_close(f);
    return rc;
}

int torch_open(const char *path, TorchFile **out, CtErr *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return ct_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return ct_fail(err, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    void *m = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (m == MAP_FAILED)
        return ct_fail(err, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
    if (open_buf(path, m ? m : "", size, out, err)) {
        if (m)
            munmap(m, size);
        return -1;
    }
    (*out)->map = m;
    (*out)->size = size;
    return 0;
}

int torch_read(const char *path, int use_ema, StFile *out, int *from_ema, CtErr *err)
{
    TorchFile *f;
    memset(out, 0, sizeof *out);
    if (from_ema)
        *from_ema = 0;
    if (torch_open(path, &f, err))
        return -1;
    int rc = torch_state_dict(f, use_ema, out, from_ema, err);
    torch_close(f);
    return rc;
}
