/*
 * Datasets: building the sample list (folder walk, split search, class
 * map, natural sort), the class table, and reading samples (files, tar
 * members by offset, synthetic images encoded on the fly).
 */
#include "runtime/data/dataset.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "runtime/data/dataset_impl.h"
#include "runtime/data/rng.h"
#include "runtime/data/shapes.h"
#include "runtime/torch_pickle.h"

/* A file larger than this is not an image we can use; refusing it keeps a
 * corrupt size from turning into a huge allocation. */
#define MAX_SAMPLE_BYTES (512ull << 20)
#define MAX_DEPTH 64

struct Dataset {
    CtDatasetKind kind;
    char *root;
    size_t n;
    char *strings;      /* every name, NUL-terminated */
    const char **names; /* [n] into strings */
    int32_t *labels;    /* [n] */
    uint64_t *offsets, *sizes; /* [n], tar only */
    int nclasses;
    const char **class_names; /* [nclasses] into strings or class_store */
    char *class_store;
    int fd; /* tar */
    WdsIndex wds;
    size_t *shard_of; /* [n], wds */
    int syn_size;
    uint64_t syn_seed;
};

struct DatasetReader {
    const Dataset *ds;
    uint8_t *buf;
    size_t cap;
    char *path;
    size_t path_cap;
    int wds_fd;         /* wds: the open shard */
    size_t wds_shard;
    tjhandle tj;        /* synthetic */
    uint8_t *rgb;       /* synthetic */
    unsigned char *jpeg;
    unsigned long jpeg_cap;
};

/* ------------------------------------------------------------------ */
/* Natural order (timm.utils.misc.natural_key)                         */
/* ------------------------------------------------------------------ */

/* natural_key splits the lower-cased string into alternating text and digit
 * runs, digit runs compared as integers, and Python compares the lists
 * element by element, a shorter list first when one is a prefix of the
 * other. This walks both strings the same way without building the lists.
 * Lower-casing is ASCII only. */
int natural_cmp(const char *a, const char *b)
{
    const unsigned char *p = (const unsigned char *)a, *q = (const unsigned char *)b;
    for (;;) {
        /* a text run (possibly empty) */
        for (;;) {
            int ea = !*p || isdigit(*p), eb = !*q || isdigit(*q);
            if (ea && eb)
                break;
            if (ea)
                return -1; /* a's text is a prefix of b's */
            if (eb)
                return 1;
            int ca = tolower(*p), cb = tolower(*q);
            if (ca != cb)
                return ca < cb ? -1 : 1;
            p++, q++;
        }
        if (!*p || !*q) /* a list ends after a text run */
            return !*p && !*q ? 0 : !*p ? -1 : 1;
        /* both at a digit run: compare as numbers of any length */
        while (*p == '0' && isdigit(p[1]))
            p++;
        while (*q == '0' && isdigit(q[1]))
            q++;
        size_t la = 0, lb = 0;
        while (isdigit(p[la]))
            la++;
        while (isdigit(q[lb]))
            lb++;
        if (la != lb)
            return la < lb ? -1 : 1;
        int c = memcmp(p, q, la);
        if (c)
            return c < 0 ? -1 : 1;
        p += la, q += lb;
    }
}

/* Natural order, then plain byte order so the order is total (timm leaves
 * ties such as "a01" / "a1" in file-system order). */
static int natural_total(const char *a, const char *b)
{
    int c = natural_cmp(a, b);
    return c ? c : strcmp(a, b);
}

/* ------------------------------------------------------------------ */
/* Building the list                                                   */
/* ------------------------------------------------------------------ */

int ds_str(DsBuild *b, const char *s, size_t n, size_t *off, CtErr *err)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->str, cap);
        if (!p)
            return ct_fail(err, "out of memory indexing the dataset");
        b->str = p;
        b->cap = cap;
    }
    memcpy(b->str + b->len, s, n);
    b->str[b->len + n] = 0;
    *off = b->len;
    b->len += n + 1;
    return 0;
}

int ds_add(DsBuild *b, DsEntry e, CtErr *err)
{
    if (b->n == b->ecap) {
        size_t cap = b->ecap ? b->ecap * 2 : 256;
        DsEntry *p = realloc(b->e, cap * sizeof *p);
        if (!p)
            return ct_fail(err, "out of memory indexing the dataset");
        b->e = p;
        b->ecap = cap;
    }
    b->e[b->n++] = e;
    return 0;
}

/* The extension as os.path.splitext finds it: from the last dot of the
 * name, unless only dots come before it. NULL when there is none. */
static const char *extension(const char *name, size_t n)
{
    size_t dot = n;
    for (size_t i = n; i-- > 0;)
        if (name[i] == '.') {
            dot = i;
            break;
        }
    if (dot == n)
        return NULL;
    for (size_t i = 0; i < dot; i++)
        if (name[i] != '.')
            return name + dot;
    return NULL;
}

static int ext_is(const char *name, size_t n, const char *want)
{
    const char *e = extension(name, n);
    if (!e)
        return 0;
    size_t el = n - (size_t)(e - name);
    if (el != strlen(want))
        return 0;
    for (size_t i = 0; i < el; i++)
        if (tolower((unsigned char)e[i]) != want[i])
            return 0;
    return 1;
}

int ds_is_image_name(const char *name, size_t n)
{
    return ext_is(name, n, ".jpg") || ext_is(name, n, ".jpeg") || ext_is(name, n, ".png");
}

int ds_is_tar_name(const char *name, size_t n) { return ext_is(name, n, ".tar"); }

typedef struct DirStack {
    dev_t dev;
    ino_t ino;
    const struct DirStack *up;
} DirStack;

/* Walks abs (= root/rel) like os.walk(followlinks=True): every image file
 * becomes an entry labelled with its folder's leaf name. A folder that is
 * its own ancestor through a link is not entered twice. */
/* Whether name (n bytes) is an image: ds_is_image_name, or with types
 * (--input-key) its lower-cased extension is one of types' ';' items. */
static int is_image(const char *name, size_t n, const char *types)
{
    if (!types)
        return ds_is_image_name(name, n);
    const char *e = extension(name, n);
    if (!e)
        return 0;
    size_t el = n - (size_t)(e - name);
    for (const char *t = types; *t;) {
        size_t tl = strcspn(t, ";");
        if (tl == el) {
            size_t i = 0;
            while (i < el && tolower((unsigned char)e[i]) == (unsigned char)t[i])
                i++;
            if (i == el)
                return 1;
        }
        t += tl + (t[tl] == ';');
    }
    return 0;
}

static int walk(const char *abs, const char *rel, const DirStack *up, int depth, const char *types, DsBuild *b,
                CtErr *err)
{
    struct stat st;
    if (stat(abs, &st) != 0)
        return ct_fail(err, "cannot read folder %s: %s", abs, strerror(errno));
    for (const DirStack *s = up; s; s = s->up)
        if (s->dev == st.st_dev && s->ino == st.st_ino)
            return 0; /* a link loop */
    if (depth > MAX_DEPTH)
        return ct_fail(err, "%s: folders nested more than %d deep", abs, MAX_DEPTH);
    DirStack me = {st.st_dev, st.st_ino, up};
    DIR *d = opendir(abs);
    if (!d)
        return ct_fail(err, "cannot read folder %s: %s", abs, strerror(errno));
    const char *leaf = strrchr(rel, '/');
    leaf = leaf ? leaf + 1 : rel;
    size_t label = (size_t)-1;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (errno = 0, e = readdir(d))) {
        const char *nm = e->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        size_t la = strlen(abs), lr = strlen(rel), ln = strlen(nm);
        char *cabs = malloc(la + ln + 2), *crel = malloc(lr + ln + 2);
        if (!cabs || !crel) {
            free(cabs);
            free(crel);
            rc = ct_fail(err, "out of memory");
            break;
        }
        sprintf(cabs, "%s/%s", abs, nm);
        if (lr)
            sprintf(crel, "%s/%s", rel, nm);
        else
            strcpy(crel, nm);
        struct stat cs;
        int ok = stat(cabs, &cs) == 0;
        if (ok && S_ISDIR(cs.st_mode)) {
            rc = walk(cabs, crel, &me, depth + 1, types, b, err);
        } else if (is_image(nm, ln, types) && (!ok || !S_ISDIR(cs.st_mode))) {
            /* a dangling link is listed too, as os.walk does; reading it fails later */
            DsEntry ent = {0};
            if (label == (size_t)-1)
                rc = ds_str(b, leaf, strlen(leaf), &label, err);
            if (!rc)
                rc = ds_str(b, crel, strlen(crel), &ent.name, err);
            ent.key = ent.name;
            ent.label = label;
            if (!rc)
                rc = ds_add(b, ent, err);
        }
        free(cabs);
        free(crel);
    }
    if (rc == 0 && errno != 0)
        rc = ct_fail(err, "cannot read folder %s: %s", abs, strerror(errno));
    closedir(d);
    return rc;
}

static int path_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", a, b);
    return p;
}

static const char *const TRAIN_SYN[] = {"train", "training", NULL};
static const char *const EVAL_SYN[] = {"val", "valid", "validation", "eval", "evaluation", NULL};

static int in_list(const char *s, size_t n, const char *const *list)
{
    for (; *list; list++)
        if (strlen(*list) == n && !strncmp(*list, s, n))
            return 1;
    return 0;
}

/* timm's _search_split, made strict: see dataset.h. *out is malloc'd. */
static int search_split(const char *root, const char *split, char **out, CtErr *err)
{
    size_t n = strcspn(split, "[");
    char name[256];
    if (n == 0 || n >= sizeof name)
        return ct_fail(err, "bad split name '%s'", split);
    memcpy(name, split, n);
    name[n] = 0;
    char *p = join(root, name);
    if (!p)
        return ct_fail(err, "out of memory");
    if (path_exists(p)) {
        *out = p;
        return 0;
    }
    free(p);
    const char *const *syn = in_list(name, n, TRAIN_SYN) ? TRAIN_SYN : in_list(name, n, EVAL_SYN) ? EVAL_SYN : NULL;
    for (const char *const *s = syn; s && *s; s++) {
        p = join(root, *s);
        if (!p)
            return ct_fail(err, "out of memory");
        if (path_exists(p)) {
            *out = p;
            return 0;
        }
        free(p);
    }
    /* no such split: fine when root has no split folders at all (it is the split itself) */
    const char *const *lists[2] = {TRAIN_SYN, EVAL_SYN};
    char found[256] = "";
    for (int l = 0; l < 2; l++)
        for (const char *const *s = lists[l]; *s; s++) {
            p = join(root, *s);
            if (p && path_exists(p) && strlen(found) + strlen(*s) + 3 < sizeof found)
                snprintf(found + strlen(found), sizeof found - strlen(found), "%s%s", *found ? ", " : "", *s);
            free(p);
        }
    if (*found) {
        char tried[256] = "";
        snprintf(tried, sizeof tried, "%s", name);
        for (const char *const *s = syn; s && *s; s++)
            if (strcmp(*s, name))
                snprintf(tried + strlen(tried), sizeof tried - strlen(tried), ", %s", *s);
        return ct_fail(err, "%s: no '%s' split (looked for %s; found %s)", root, name, tried, found);
    }
    *out = strdup(root);
    return *out ? 0 : ct_fail(err, "out of memory");
}

/* ------------------------------------------------------------------ */
/* Class maps and the class table                                      */
/* ------------------------------------------------------------------ */

typedef struct ClassRef {
    const char *name;
    int idx;
} ClassRef;

static int cmp_classref(const void *a, const void *b)
{
    const ClassRef *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

static int cmp_classref_name(const void *a, const void *b)
{
    return strcmp(((const ClassRef *)a)->name, ((const ClassRef *)b)->name);
}

static int is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

int ds_read_whole(const char *path, size_t max, char **out, size_t *n, CtErr *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? 1 : ct_fail(err, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap)
            break;
        if (cap >= max) {
            free(buf);
            fclose(f);
            return ct_fail(err, "%s: larger than %zu bytes", path, max);
        }
        char *p = realloc(buf, cap * 2 + 1);
        if (!p) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = p;
        cap *= 2;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return ct_fail(err, "cannot read %s", path);
    }
    buf[len] = 0;
    *out = buf;
    if (n)
        *n = len;
    return 0;
}

/* A class map's text: absent is an error here. */
static int read_class_map(const char *path, char **out, size_t *n, CtErr *err)
{
    int rc = ds_read_whole(path, 64u << 20, out, n, err);
    return rc > 0 ? ct_fail(err, "cannot open %s: %s", path, strerror(ENOENT)) : rc;
}

/* A .pkl class map (timm's _ClassMapUnpickler: a pickled dict, no globals)
 * of class (folder) names to indices, read by the restricted unpickler.
 * Several names may share an index; the class table names each index by
 * its first name in the dict ("" for an index no name has). */
static int load_pkl_map(Dataset *ds, const char *path, const char *text, size_t len, ClassRef **refs, int *nrefs,
                        CtErr *err)
{
    PkArena *arena = NULL;
    const PkValue *v = NULL;
    size_t used = 0;
    if (pk_arena_create(&arena, err))
        return -1;
    int rc = pk_load(arena, path, (const unsigned char *)text, len, &used, &v, err);
    if (!rc && v->kind != PK_DICT)
        rc = ct_fail(err, "class map %s: %s, expected a dict of class names to indices", path, pk_kind_name(v));
    size_t n = rc ? 0 : v->u.seq.n / 2;
    if (!rc && n == 0)
        rc = ct_fail(err, "class map %s lists no classes", path);
    int64_t top = -1;
    for (size_t i = 0; !rc && i < n; i++) {
        const PkValue *k = v->u.seq.v[2 * i], *x = v->u.seq.v[2 * i + 1];
        if (k->kind != PK_STR || strlen(k->u.str.s) != k->u.str.n)
            rc = ct_fail(err, "class map %s: key %zu is %s; folder datasets need class names", path, i,
                         pk_kind_name(k));
        else if (x->kind != PK_INT || x->u.i < 0 || x->u.i >= (1 << 24))
            rc = ct_fail(err, "class map %s: '%s' maps to %s, not a class index", path, k->u.str.s, pk_kind_name(x));
        else if (x->u.i > top)
            top = x->u.i;
    }
    size_t store = 1;
    for (size_t i = 0; !rc && i < n; i++)
        store += v->u.seq.v[2 * i]->u.str.n + 1;
    if (!rc) {
        ds->class_store = malloc(store);
        ds->class_names = malloc((size_t)(top + 1) * sizeof *ds->class_names);
        *refs = malloc(n * sizeof **refs);
        if (!ds->class_store || !ds->class_names || !*refs)
            rc = ct_fail(err, "out of memory");
    }
    if (!rc) {
        ds->class_store[0] = 0;
        for (int64_t c = 0; c <= top; c++)
            ds->class_names[c] = ds->class_store;
        size_t at = 1;
        for (size_t i = 0; i < n; i++) {
            const PkValue *k = v->u.seq.v[2 * i];
            int idx = (int)v->u.seq.v[2 * i + 1]->u.i;
            char *name = ds->class_store + at;
            memcpy(name, k->u.str.s, k->u.str.n + 1);
            at += k->u.str.n + 1;
            if (!*ds->class_names[idx])
                ds->class_names[idx] = name;
            (*refs)[i] = (ClassRef){name, idx};
        }
        qsort(*refs, n, sizeof **refs, cmp_classref);
        ds->nclasses = (int)(top + 1);
        *nrefs = (int)n;
    }
    pk_arena_free(arena);
    return rc;
}

/* Loads a class map (.txt: one class name a line, its index the line's;
 * .pkl: see load_pkl_map) into ds's class table and a name -> index lookup
 * (*refs, sorted by name); a name on two lines is refused. */
static int load_class_map(Dataset *ds, const char *map, const char *root, ClassRef **refs, int *nrefs, CtErr *err)
{
    const char *ext = extension(map, strlen(map));
    int pkl = ext && strlen(ext) == 4 && tolower((unsigned char)ext[1]) == 'p' &&
              tolower((unsigned char)ext[2]) == 'k' && tolower((unsigned char)ext[3]) == 'l';
    if (!pkl && (!ext || strlen(ext) != 4 || tolower((unsigned char)ext[1]) != 't' ||
                 tolower((unsigned char)ext[2]) != 'x' || tolower((unsigned char)ext[3]) != 't'))
        return ct_fail(err, "class map %s: unsupported format '%s' (timm's class maps are .txt, one class name a "
                       "line, or .pkl, a pickled dict)", map, ext ? ext : "");
    char *path = NULL;
    if (path_exists(map))
        path = strdup(map);
    else if (!(path = join(root, map)) || !path_exists(path)) {
        free(path);
        return ct_fail(err, "class map %s not found (also looked under %s)", map, root);
    }
    if (!path)
        return ct_fail(err, "out of memory");
    char *text = NULL;
    size_t len = 0;
    int rc = read_class_map(path, &text, &len, err);
    if (rc) {
        free(path);
        return rc;
    }
    if (pkl) {
        rc = load_pkl_map(ds, path, text, len, refs, nrefs, err);
        free(text);
        free(path);
        return rc;
    }
    /* lines end at \n, \r\n or \r (Python's universal newlines); the text
     * after the last line end is a line only when not empty */
    int lines = 0;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '\n' || (text[i] == '\r' && (i + 1 >= len || text[i + 1] != '\n')))
            lines++;
    if (len && text[len - 1] != '\n' && text[len - 1] != '\r')
        lines++;
    if (lines == 0) {
        free(text);
        rc = ct_fail(err, "class map %s lists no classes", path);
        free(path);
        return rc;
    }
    ds->class_names = malloc((size_t)lines * sizeof *ds->class_names);
    *refs = malloc((size_t)lines * sizeof **refs);
    if (!ds->class_names || !*refs) {
        free(text);
        free(path);
        return ct_fail(err, "out of memory");
    }
    ds->class_store = text;
    int k = 0;
    for (size_t i = 0; i < len && k < lines;) {
        size_t j = i;
        while (j < len && text[j] != '\n' && text[j] != '\r')
            j++;
        size_t next = j < len ? (text[j] == '\r' && j + 1 < len && text[j + 1] == '\n' ? j + 2 : j + 1) : j;
        size_t a = i, e = j;
        while (a < e && is_space(text[a]))
            a++;
        while (e > a && is_space(text[e - 1]))
            e--;
        text[e] = 0; /* e <= j, and text[j] is a line end or the final NUL */
        ds->class_names[k] = text + a;
        (*refs)[k] = (ClassRef){text + a, k};
        k++;
        i = next;
    }
    ds->nclasses = lines;
    qsort(*refs, (size_t)lines, sizeof **refs, cmp_classref);
    for (int i = 1; i < lines; i++)
        if (!strcmp((*refs)[i - 1].name, (*refs)[i].name)) {
            /* timm's dict keeps the last line and leaves a class index that
             * no image has: refuse the map instead */
            rc = ct_fail(err, "class map %s: '%s' is on lines %d and %d; each class is named once", path,
                         (*refs)[i].name, (*refs)[i - 1].idx + 1, (*refs)[i].idx + 1);
            free(path);
            return rc;
        }
    *nrefs = lines;
    free(path);
    return 0;
}

static int cmp_natural_ptr(const void *a, const void *b)
{
    return natural_total(*(const char *const *)a, *(const char *const *)b);
}

typedef struct SortEnt {
    const char *key, *name;
    int32_t label;
    uint64_t off, size;
} SortEnt;

static int cmp_sortent(const void *a, const void *b)
{
    const SortEnt *x = a, *y = b;
    int c = natural_total(x->key, y->key);
    return c ? c : strcmp(x->name, y->name);
}

/* Turns the built list into the dataset: classes (from the class map or
 * the sorted distinct folder names), samples of known classes, sorted. */
static int finalize(Dataset *ds, DsBuild *b, const char *class_map, CtErr *err)
{
    ds->strings = b->str;
    b->str = NULL;
    const char *S = ds->strings;
    ClassRef *refs = NULL;
    int nrefs = 0, rc = 0;
    SortEnt *v = NULL;
    if (class_map && *class_map) {
        if ((rc = load_class_map(ds, class_map, ds->root, &refs, &nrefs, err)))
            goto done;
    } else {
        const char **labels = malloc((b->n ? b->n : 1) * sizeof *labels);
        if (!labels) {
            rc = ct_fail(err, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < b->n; i++)
            labels[i] = S + b->e[i].label;
        qsort(labels, b->n, sizeof *labels, cmp_natural_ptr);
        size_t u = 0;
        for (size_t i = 0; i < b->n; i++)
            if (u == 0 || strcmp(labels[u - 1], labels[i]))
                labels[u++] = labels[i];
        if (u > INT32_MAX) {
            free(labels);
            rc = ct_fail(err, "%s: too many classes", ds->root);
            goto done;
        }
        ds->class_names = labels;
        ds->nclasses = (int)u;
        refs = malloc((u ? u : 1) * sizeof *refs);
        if (!refs) {
            rc = ct_fail(err, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < u; i++)
            refs[i] = (ClassRef){labels[i], (int)i};
        qsort(refs, u, sizeof *refs, cmp_classref_name);
        nrefs = (int)u;
    }
    v = malloc((b->n ? b->n : 1) * sizeof *v);
    if (!v) {
        rc = ct_fail(err, "out of memory");
        goto done;
    }
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++) {
        ClassRef key = {S + b->e[i].label, 0};
        const ClassRef *r = bsearch(&key, refs, (size_t)nrefs, sizeof *refs, cmp_classref_name);
        if (r)
            v[n++] = (SortEnt){S + b->e[i].key, S + b->e[i].name, r->idx, b->e[i].off, b->e[i].size};
    }
    if (n == 0) {
        if (b->n && class_map && *class_map)
            rc = ct_fail(err, "%s: none of its %zu images is in a class listed by class map %s", ds->root, b->n,
                         class_map);
        else
            rc = ct_fail(err, "%s: no images found (looked for .jpg, .jpeg and .png files in its subfolders)",
                         ds->root);
        goto done;
    }
    qsort(v, n, sizeof *v, cmp_sortent);
    ds->n = n;
    ds->names = malloc(n * sizeof *ds->names);
    ds->labels = malloc(n * sizeof *ds->labels);
    if (ds->kind == CT_DS_TAR) {
        ds->offsets = malloc(n * sizeof *ds->offsets);
        ds->sizes = malloc(n * sizeof *ds->sizes);
    }
    if (!ds->names || !ds->labels || (ds->kind == CT_DS_TAR && (!ds->offsets || !ds->sizes))) {
        rc = ct_fail(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        ds->names[i] = v[i].name;
        ds->labels[i] = v[i].label;
        if (ds->kind == CT_DS_TAR) {
            ds->offsets[i] = v[i].off;
            ds->sizes[i] = v[i].size;
        }
    }
done:
    free(v);
    free(refs);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Opening                                                             */
/* ------------------------------------------------------------------ */

static int open_synthetic(Dataset *ds, const DatasetConfig *cfg, CtErr *err)
{
    if (cfg->synthetic_len == 0 || cfg->synthetic_classes <= 0 || cfg->synthetic_img_size < 8 ||
        cfg->synthetic_img_size > 4096)
        return ct_fail(err, "synthetic dataset: need len > 0, classes > 0 and img_size in 8..4096 (got %zu, %d, %d)",
                       cfg->synthetic_len, cfg->synthetic_classes, cfg->synthetic_img_size);
    ds->n = cfg->synthetic_len;
    ds->nclasses = cfg->synthetic_classes;
    ds->syn_size = cfg->synthetic_img_size;
    ds->syn_seed = cfg->synthetic_seed;
    ds->root = strdup("synthetic");
    size_t cap = (size_t)ds->nclasses * 24;
    ds->class_store = malloc(cap);
    ds->class_names = malloc((size_t)ds->nclasses * sizeof *ds->class_names);
    if (!ds->root || !ds->class_store || !ds->class_names)
        return ct_fail(err, "out of memory");
    size_t at = 0;
    for (int c = 0; c < ds->nclasses; c++) {
        ds->class_names[c] = ds->class_store + at;
        if (c < SHAPES_NUM_KINDS)
            at += (size_t)snprintf(ds->class_store + at, cap - at, "%s", shapes_kind_name(c)) + 1;
        else
            at += (size_t)snprintf(ds->class_store + at, cap - at, "%s_%d", shapes_kind_name(c % SHAPES_NUM_KINDS),
                                   c / SHAPES_NUM_KINDS) + 1;
    }
    return 0;
}

/* A wds class map: timm's remap_target looks each numeric label up in the
 * map, so only a .pkl dict keyed by label numbers can serve (a .txt, or a
 * dict of names, matches no label: timm's KeyError at the first sample).
 * *to[label] = index, -1 when the label is not a key. */
static int wds_class_map(const char *map, int32_t **to, int32_t *nto, CtErr *err)
{
    const char *ext = extension(map, strlen(map));
    if (!ext || strlen(ext) != 4 || tolower((unsigned char)ext[1]) != 'p' || tolower((unsigned char)ext[2]) != 'k' ||
        tolower((unsigned char)ext[3]) != 'l')
        return ct_fail(err, "class map %s: WebDataset labels are numbers, so timm's remap needs a .pkl dict of label "
                       "numbers to indices (a .txt names classes, which no wds label matches)", map);
    char *text = NULL;
    size_t len = 0, used = 0;
    if (read_class_map(map, &text, &len, err))
        return -1;
    PkArena *arena = NULL;
    const PkValue *v = NULL;
    int rc = pk_arena_create(&arena, err);
    if (!rc)
        rc = pk_load(arena, map, (const unsigned char *)text, len, &used, &v, err);
    if (!rc && v->kind != PK_DICT)
        rc = ct_fail(err, "class map %s: %s, expected a dict of label numbers to indices", map, pk_kind_name(v));
    size_t n = rc ? 0 : v->u.seq.n / 2;
    int64_t top = -1;
    for (size_t i = 0; !rc && i < n; i++) {
        const PkValue *k = v->u.seq.v[2 * i], *x = v->u.seq.v[2 * i + 1];
        if (k->kind != PK_INT || k->u.i < 0 || k->u.i >= (1 << 24))
            rc = ct_fail(err, "class map %s: key %zu is %s; WebDataset labels are numbers 0..", map, i,
                         pk_kind_name(k));
        else if (x->kind != PK_INT || x->u.i < 0 || x->u.i >= (1 << 24))
            rc = ct_fail(err, "class map %s: label %lld maps to %s, not a class index", map, (long long)k->u.i,
                         pk_kind_name(x));
        else if (k->u.i > top)
            top = k->u.i;
    }
    if (!rc && !(*to = malloc((size_t)(top + 1) * sizeof **to + 1)))
        rc = ct_fail(err, "out of memory");
    for (int64_t c = 0; !rc && c <= top; c++)
        (*to)[c] = -1;
    for (size_t i = 0; !rc && i < n; i++)
        (*to)[v->u.seq.v[2 * i]->u.i] = (int32_t)v->u.seq.v[2 * i + 1]->u.i;
    *nto = (int32_t)(top + 1);
    pk_arena_free(arena);
    free(text);
    return rc;
}

static int open_wds(Dataset *ds, const DatasetConfig *cfg, CtErr *err)
{
    struct stat st;
    if (stat(cfg->root, &st) != 0 || !S_ISDIR(st.st_mode))
        return ct_fail(err, "wds dataset %s: not a folder", cfg->root);
    int32_t *to = NULL, nto = 0;
    if (cfg->class_map && *cfg->class_map && wds_class_map(cfg->class_map, &to, &nto, err))
        return -1;
    if (!(ds->root = strdup(cfg->root))) {
        free(to);
        return ct_fail(err, "out of memory");
    }
    DsBuild b = {0};
    int rc = ds_wds_index(ds->root, cfg->split, cfg->num_samples, cfg->input_key, cfg->target_key, &ds->wds, &b,
                          err);
    ds->strings = b.str;
    /* timm's remap_target, outside the pipeline's error handler: a label the map lacks stops the run */
    for (size_t i = 0; !rc && to && i < b.n; i++) {
        int32_t l = b.e[i].class_index;
        if (l >= nto || to[l] < 0) {
            size_t s = 0;
            while (ds->wds.shard_first[s + 1] <= i)
                s++;
            rc = ct_fail(err, "wds sample %s:%s: label %d is not in class map %s", ds->wds.shards[s],
                         b.str + b.e[i].name, l, cfg->class_map);
        } else {
            b.e[i].class_index = to[l];
        }
    }
    free(to);
    size_t n = b.n;
    if (!rc && n == 0)
        rc = ct_fail(err, "wds dataset %s, split %s: no samples (an image with a .cls, or a .json label) in its %zu "
                     "shards", ds->root, cfg->split, ds->wds.nshards);
    if (!rc) {
        ds->n = n;
        ds->names = malloc(n * sizeof *ds->names);
        ds->labels = malloc(n * sizeof *ds->labels);
        ds->offsets = malloc(n * sizeof *ds->offsets);
        ds->sizes = malloc(n * sizeof *ds->sizes);
        ds->shard_of = malloc(n * sizeof *ds->shard_of);
        if (!ds->names || !ds->labels || !ds->offsets || !ds->sizes || !ds->shard_of)
            rc = ct_fail(err, "out of memory");
    }
    int32_t top = -1;
    for (size_t i = 0; !rc && i < n; i++) {
        ds->names[i] = ds->strings + b.e[i].name;
        ds->labels[i] = b.e[i].class_index;
        ds->offsets[i] = b.e[i].off;
        ds->sizes[i] = b.e[i].size;
        ds->shard_of[i] = b.e[i].shard;
        if (b.e[i].class_index > top)
            top = b.e[i].class_index;
    }
    free(b.e);
    if (rc)
        return rc;
    ds->nclasses = top + 1;
    size_t cap = (size_t)ds->nclasses * 12;
    ds->class_store = malloc(cap ? cap : 1);
    ds->class_names = malloc((size_t)ds->nclasses * sizeof *ds->class_names + 1);
    if (!ds->class_store || !ds->class_names)
        return ct_fail(err, "out of memory");
    for (int c = 0, at = 0; c < ds->nclasses; c++) {
        ds->class_names[c] = ds->class_store + at;
        at += snprintf(ds->class_store + at, cap - (size_t)at, "%d", c) + 1;
    }
    return 0;
}

int dataset_open(Dataset **out, const DatasetConfig *cfg, CtErr *err)
{
    *out = NULL;
    if (!cfg)
        return ct_fail(err, "dataset_open: no config");
    Dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return ct_fail(err, "out of memory");
    ds->fd = -1;
    ds->kind = cfg->kind;
    DsBuild b = {0};
    int rc = 0;
    if (cfg->kind == CT_DS_SYNTHETIC) {
        rc = open_synthetic(ds, cfg, err);
        goto done;
    }
    if (!cfg->root || !*cfg->root) {
        rc = ct_fail(err, "dataset: no root folder or .tar file given");
        goto done;
    }
    if (cfg->kind == CT_DS_WDS) {
        rc = open_wds(ds, cfg, err);
        goto done;
    }
    struct stat st;
    if (stat(cfg->root, &st) != 0) {
        rc = ct_fail(err, "dataset %s: %s", cfg->root, strerror(errno));
        goto done;
    }
    if (S_ISDIR(st.st_mode) && cfg->split && *cfg->split) {
        if ((rc = search_split(cfg->root, cfg->split, &ds->root, err)))
            goto done;
        if (stat(ds->root, &st) != 0) {
            rc = ct_fail(err, "dataset %s: %s", ds->root, strerror(errno));
            goto done;
        }
    } else if (!(ds->root = strdup(cfg->root))) {
        rc = ct_fail(err, "out of memory");
        goto done;
    }
    size_t rl = strlen(ds->root);
    while (rl > 1 && ds->root[rl - 1] == '/')
        ds->root[--rl] = 0;
    int is_tar_file = S_ISREG(st.st_mode) && ds_is_tar_name(ds->root, rl);
    if (ds->kind == CT_DS_AUTO)
        ds->kind = S_ISDIR(st.st_mode) ? CT_DS_FOLDER : CT_DS_TAR;
    if (ds->kind == CT_DS_FOLDER && !S_ISDIR(st.st_mode)) {
        rc = ct_fail(err, "dataset %s: not a folder", ds->root);
        goto done;
    }
    if (ds->kind == CT_DS_TAR && !is_tar_file) {
        rc = ct_fail(err, "dataset %s: not a folder or a .tar file", ds->root);
        goto done;
    }
    /* timm's ImageFolder reader takes an input key only, its tar reader neither (a TypeError) */
    if ((cfg->target_key && *cfg->target_key) || (ds->kind == CT_DS_TAR && cfg->input_key && *cfg->input_key)) {
        rc = ct_fail(err, "dataset %s: --%s is for %s datasets (timm's %s reader takes none)", ds->root,
                     cfg->target_key && *cfg->target_key ? "target-key" : "input-key",
                     cfg->target_key && *cfg->target_key ? "wds" : "folder and wds",
                     ds->kind == CT_DS_TAR ? "tar" : "folder");
        goto done;
    }
    if (ds->kind == CT_DS_FOLDER) {
        rc = walk(ds->root, "", NULL, 0, cfg->input_key, &b, err);
    } else {
        ds->fd = open(ds->root, O_RDONLY);
        if (ds->fd < 0)
            rc = ct_fail(err, "cannot open %s: %s", ds->root, strerror(errno));
        else
            rc = ds_tar_scan(ds->root, ds->fd, &b, err);
    }
    if (rc == 0)
        rc = finalize(ds, &b, cfg->class_map, err);
done:
    free(b.str);
    free(b.e);
    if (rc) {
        dataset_close(ds);
        return -1;
    }
    *out = ds;
    return 0;
}

void dataset_close(Dataset *ds)
{
    if (!ds)
        return;
    if (ds->fd >= 0)
        close(ds->fd);
    free(ds->root);
    free(ds->strings);
    free(ds->names);
    free(ds->labels);
    free(ds->offsets);
    free(ds->sizes);
    free(ds->class_names);
    free(ds->class_store);
    free(ds->shard_of);
    ds_wds_free(&ds->wds);
    free(ds);
}

int dataset_wds_shards(const Dataset *ds, size_t *nshards, const size_t **shard_first, size_t *num_samples)
{
    if (ds->kind != CT_DS_WDS)
        return -1;
    *nshards = ds->wds.nshards;
    *shard_first = ds->wds.shard_first;
    *num_samples = ds->wds.num_samples;
    return 0;
}

size_t dataset_len(const Dataset *ds) { return ds->n; }
CtDatasetKind dataset_kind(const Dataset *ds) { return ds->kind; }
const char *dataset_root(const Dataset *ds) { return ds->root; }
int dataset_num_classes(const Dataset *ds) { return ds->nclasses; }

const char *dataset_class_name(const Dataset *ds, int c)
{
    return c >= 0 && c < ds->nclasses ? ds->class_names[c] : NULL;
}

int64_t dataset_label(const Dataset *ds, size_t i)
{
    if (i >= ds->n)
        return -1;
    return ds->kind == CT_DS_SYNTHETIC ? (int64_t)(i % (size_t)ds->nclasses) : ds->labels[i];
}

void dataset_sample_name(const Dataset *ds, size_t i, char *buf, size_t n)
{
    if (!n)
        return;
    if (i >= ds->n)
        snprintf(buf, n, "%s:#%zu (out of range)", ds->root, i);
    else if (ds->kind == CT_DS_SYNTHETIC)
        snprintf(buf, n, "synthetic:%zu", i);
    else if (ds->kind == CT_DS_TAR)
        snprintf(buf, n, "%s:%s", ds->root, ds->names[i]);
    else if (ds->kind == CT_DS_WDS)
        snprintf(buf, n, "%s:%s", ds->wds.shards[ds->shard_of[i]], ds->names[i]);
    else
        snprintf(buf, n, "%s/%s", ds->root, ds->names[i]);
}

/* ------------------------------------------------------------------ */
/* Reading                                                             */
/* ------------------------------------------------------------------ */

int dataset_reader_open(DatasetReader **out, const Dataset *ds, CtErr *err)
{
    DatasetReader *r = calloc(1, sizeof *r);
    if (!r)
        return ct_fail(err, "out of memory");
    r->ds = ds;
    r->wds_fd = -1;
    if (ds->kind == CT_DS_SYNTHETIC) {
        int s = ds->syn_size;
        r->tj = tjInitCompress();
        r->jpeg_cap = tjBufSize(s, s, TJSAMP_420);
        r->jpeg = r->jpeg_cap ? tjAlloc((int)r->jpeg_cap) : NULL;
        r->rgb = malloc((size_t)s * s * 3);
        if (!r->tj || !r->jpeg || !r->rgb) {
            dataset_reader_close(r);
            return ct_fail(err, "synthetic dataset: cannot start the JPEG encoder");
        }
    }
    *out = r;
    return 0;
}

void dataset_reader_close(DatasetReader *r)
{
    if (!r)
        return;
    if (r->wds_fd >= 0)
        close(r->wds_fd);
    free(r->buf);
    free(r->path);
    free(r->rgb);
    if (r->jpeg)
        tjFree(r->jpeg);
    if (r->tj)
        tjDestroy(r->tj);
    free(r);
}

static int reserve(DatasetReader *r, size_t n, CtErr *err)
{
    if (n <= r->cap)
        return 0;
    size_t cap = r->cap ? r->cap : 64 * 1024;
    while (cap < n)
        cap *= 2;
    uint8_t *p = realloc(r->buf, cap);
    if (!p)
        return ct_fail(err, "out of memory reading a sample of %zu bytes", n);
    r->buf = p;
    r->cap = cap;
    return 0;
}

static int read_full(int fd, uint8_t *buf, size_t n, uint64_t off, int use_pread)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = use_pread ? pread(fd, buf + got, n - got, (off_t)(off + got)) : read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k == 0 ? (errno = EIO, -1) : -1;
        got += (size_t)k;
    }
    return 0;
}

static int read_file(DatasetReader *r, size_t i, const uint8_t **data, size_t *n, CtErr *err)
{
    const Dataset *ds = r->ds;
    size_t need = strlen(ds->root) + strlen(ds->names[i]) + 2;
    if (need > r->path_cap) {
        char *p = realloc(r->path, need);
        if (!p)
            return ct_fail(err, "out of memory");
        r->path = p;
        r->path_cap = need;
    }
    snprintf(r->path, need, "%s/%s", ds->root, ds->names[i]);
    int fd = open(r->path, O_RDONLY);
    if (fd < 0)
        return ct_fail(err, "cannot open %s: %s", r->path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = ct_fail(err, "cannot read %s: %s", r->path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = ct_fail(err, "%s: not a regular file", r->path);
    else if (st.st_size == 0)
        rc = ct_fail(err, "%s: empty file", r->path);
    else if ((uint64_t)st.st_size > MAX_SAMPLE_BYTES)
        rc = ct_fail(err, "%s: %lld bytes, too large for an image", r->path, (long long)st.st_size);
    else if (!(rc = reserve(r, (size_t)st.st_size, err)) && read_full(fd, r->buf, (size_t)st.st_size, 0, 0) != 0)
        rc = ct_fail(err, "cannot read %s: %s", r->path, strerror(errno));
    close(fd);
    if (rc)
        return rc;
    *data = r->buf;
    *n = (size_t)st.st_size;
    return 0;
}

int dataset_read(DatasetReader *r, size_t i, const uint8_t **data, size_t *n, CtErr *err)
{
    const Dataset *ds = r->ds;
    if (i >= ds->n)
        return ct_fail(err, "%s: sample %zu out of range (%zu samples)", ds->root, i, ds->n);
    switch (ds->kind) {
    case CT_DS_WDS:
    case CT_DS_TAR: {
        const char *file = ds->root;
        int fd = ds->fd;
        if (ds->kind == CT_DS_WDS) {
            /* one shard open per reader: a worker reads its shards' samples together */
            file = ds->wds.shards[ds->shard_of[i]];
            if (r->wds_fd < 0 || r->wds_shard != ds->shard_of[i]) {
                if (r->wds_fd >= 0)
                    close(r->wds_fd);
                r->wds_fd = open(file, O_RDONLY);
                if (r->wds_fd < 0)
                    return ct_fail(err, "cannot open %s: %s", file, strerror(errno));
                r->wds_shard = ds->shard_of[i];
            }
            fd = r->wds_fd;
        }
        uint64_t size = ds->sizes[i];
        if (size == 0)
            return ct_fail(err, "%s:%s: empty member", file, ds->names[i]);
        if (size > MAX_SAMPLE_BYTES)
            return ct_fail(err, "%s:%s: too large for an image", file, ds->names[i]);
        if (reserve(r, (size_t)size, err))
            return -1;
        if (read_full(fd, r->buf, (size_t)size, ds->offsets[i], 1) != 0)
            return ct_fail(err, "%s:%s: read failed: %s", file, ds->names[i], strerror(errno));
        *data = r->buf;
        *n = (size_t)size;
        return 0;
    }
    case CT_DS_SYNTHETIC: {
        int s = ds->syn_size;
        CtRng rng = rng_for(ds->syn_seed, 0x5157, i);
        shapes_draw((int)(i % (size_t)ds->nclasses), s, &rng, r->rgb);
        unsigned long len = r->jpeg_cap;
        if (tjCompress2(r->tj, r->rgb, s, 0, s, TJPF_RGB, &r->jpeg, &len, TJSAMP_420, 90, TJFLAG_NOREALLOC) != 0)
            return ct_fail(err, "synthetic:%zu: JPEG encoding failed: %s", i, tjGetErrorStr2(r->tj));
        *data = r->jpeg;
        *n = len;
        return 0;
    }
    default:
        return read_file(r, i, data, n, err);
    }
}
