/*
 * Indexing a WebDataset split (dataset.h, CT_DS_WDS) as timm's ReaderWds
 * reads one: the split from root/_info.json (or info.json), or a shard
 * pattern; each shard's members grouped into samples by key as webdataset's
 * tar_file_expander and group_by_keys do; the image and the label resolved
 * as reader_wds._decode does. A shard missing or damaged is a warning on
 * stderr and the samples read before the damage, as timm's handler
 * log_and_continue goes on; wrong labels stop the run.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/data/dataset_impl.h"
#include "runtime/data/wds.h"

#define MAX_INFO_BYTES (256u << 20)
#define MAX_META_BYTES (16u << 20)

/* _load_info: root/_info.json, else root/info.json; NULL when neither. */
static int load_info(const char *root, cJSON **info, char *used, size_t used_n, CtErr *err)
{
    static const char *const names[] = {"_info.json", "info.json"};
    *info = NULL;
    for (int k = 0; k < 2; k++) {
        snprintf(used, used_n, "%s/%s", root, names[k]);
        char *text = NULL;
        int rc = ds_read_whole(used, MAX_INFO_BYTES, &text, NULL, err);
        if (rc < 0)
            return -1;
        if (rc > 0)
            continue;
        *info = cJSON_Parse(text);
        free(text);
        if (!*info)
            return ct_fail(err, "%s: not valid JSON", used);
        return 0;
    }
    *used = 0;
    return 0;
}

static const cJSON *info_split(const cJSON *info, const char *name)
{
    const cJSON *splits = info ? cJSON_GetObjectItemCaseSensitive(info, "splits") : NULL;
    return cJSON_IsObject(splits) ? cJSON_GetObjectItemCaseSensitive(splits, name) : NULL;
}

static int json_count(const cJSON *v, size_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e15 || v->valuedouble != (double)(size_t)v->valuedouble)
        return -1;
    *out = (size_t)v->valuedouble;
    return 0;
}

/* _parse_split_info: the shard files, their sample count and the json
 * label field (alt_label). */
static int parse_split(const char *root, const char *split, const cJSON *info, const char *info_path, WdsIndex *x,
                       CtErr *err)
{
    if (strstr(split, "tar") || strstr(split, "..")) {
        /* a shard pattern, optionally "|N" samples */
        char *pat = strdup(split);
        if (!pat)
            return ct_fail(err, "out of memory");
        char *bar = strchr(pat, '|');
        size_t n = 0;
        if (bar) {
            *bar = 0;
            char *end;
            errno = 0;
            unsigned long long v = strtoull(bar + 1, &end, 10);
            if (errno || end == bar + 1 || *end) {
                free(pat);
                return ct_fail(err, "split '%s': the sample count after '|' is not a whole number", split);
            }
            n = (size_t)v;
        }
        /* a pattern "x-y-NAME" whose last part names a split of the info: that split */
        const cJSON *named = NULL;
        char last[256] = "";
        int has_n = bar != NULL;
        if (!strstr(pat, "::")) {
            const char *p = pat;
            for (int k = 0; k < 3; k++) {
                const char *d = strchr(p, '-');
                if (!d)
                    break;
                p = d + 1;
            }
            if (p != pat && strlen(p) < sizeof last) {
                strcpy(last, p);
                named = info_split(info, last);
            }
        }
        int rc = wds_expand(pat, &x->shards, &x->nshards, err);
        free(pat);
        if (rc)
            return -1;
        if (named) {
            /* as timm's _parse_split_info: the named split's shards, all of them, and its
             * num_samples when the pattern gave "|N", else the count of the pattern's shards */
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(named, "filenames");
            if (has_n && json_count(cJSON_GetObjectItemCaseSensitive(named, "num_samples"), &n))
                return ct_fail(err, "%s: split '%s' needs num_samples", info_path, last);
            const cJSON *sl = cJSON_GetObjectItemCaseSensitive(named, "shard_lengths");
            for (size_t i = 0; !has_n && i < x->nshards; i++) {
                size_t c = 0;
                int found = 0;
                for (int j = 0; j < cJSON_GetArraySize(fn); j++) {
                    const cJSON *f = cJSON_GetArrayItem(fn, j);
                    if (cJSON_IsString(f) && !strcmp(f->valuestring, x->shards[i]) &&
                        !json_count(cJSON_GetArrayItem(sl, j), &c)) {
                        found = 1;
                        break;
                    }
                }
                if (!found)
                    return ct_fail(err, "split '%s': shard %s is not among %s's filenames", split, x->shards[i],
                                   info_path);
                n += c;
            }
            size_t nf = (size_t)cJSON_GetArraySize(fn);
            wds_free_names(x->shards, x->nshards);
            x->nshards = 0;
            if (!(x->shards = calloc(nf ? nf : 1, sizeof *x->shards)))
                return ct_fail(err, "out of memory");
            for (size_t i = 0; i < nf; i++) {
                const cJSON *f = cJSON_GetArrayItem(fn, (int)i);
                if (!cJSON_IsString(f))
                    return ct_fail(err, "%s: split '%s': filenames[%zu] is not a string", info_path, last, i);
                if (!(x->shards[i] = strdup(f->valuestring)))
                    return ct_fail(err, "out of memory");
                x->nshards = i + 1;
            }
            if (nf == 0)
                return ct_fail(err, "%s: split '%s' lists no shard", info_path, last);
            const cJSON *al = cJSON_GetObjectItemCaseSensitive(named, "alt_label");
            if (cJSON_IsString(al) && *al->valuestring && !(x->alt_label = strdup(al->valuestring)))
                return ct_fail(err, "out of memory");
        }
        x->num_samples = n;
        return 0;
    }
    const cJSON *s = info_split(info, split);
    if (!s) {
        char have[256] = "";
        const cJSON *splits = info ? cJSON_GetObjectItemCaseSensitive(info, "splits") : NULL;
        for (const cJSON *c = cJSON_IsObject(splits) ? splits->child : NULL; c; c = c->next)
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", *have ? ", " : "", c->string);
        if (!info)
            return ct_fail(err, "%s: no _info.json or info.json, so split '%s' cannot be found (give a shard pattern "
                           "such as 'shard-{000000..000009}.tar|N' as the split)", root, split);
        return ct_fail(err, "%s: split '%s' not found (its splits: %s)", info_path, split, *have ? have : "none");
    }
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(s, "filenames");
    if (!cJSON_IsArray(fn) || json_count(cJSON_GetObjectItemCaseSensitive(s, "num_samples"), &x->num_samples))
        return ct_fail(err, "%s: split '%s' needs filenames (a list) and num_samples", info_path, split);
    x->nshards = (size_t)cJSON_GetArraySize(fn);
    x->shards = calloc(x->nshards ? x->nshards : 1, sizeof *x->shards);
    if (!x->shards)
        return ct_fail(err, "out of memory");
    for (size_t i = 0; i < x->nshards; i++) {
        const cJSON *f = cJSON_GetArrayItem(fn, (int)i);
        if (!cJSON_IsString(f))
            return ct_fail(err, "%s: split '%s': filenames[%zu] is not a string", info_path, split, i);
        if (!(x->shards[i] = strdup(f->valuestring)))
            return ct_fail(err, "out of memory");
    }
    if (x->nshards == 0)
        return ct_fail(err, "%s: split '%s' lists no shard", info_path, split);
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(s, "alt_label");
    if (cJSON_IsString(al) && *al->valuestring && !(x->alt_label = strdup(al->valuestring)))
        return ct_fail(err, "out of memory");
    return 0;
}

/* One sample while its shard is read: the members seen under its key. */
typedef struct Group {
    char key[1024];
    int have;
    uint64_t img_off, img_size;
    int img_rank; /* 1 + the position in input_key of the image kept (the first of its keys present), 0: none */
    uint64_t cls_off, cls_size, json_off, json_size;
    int has_cls, has_json;
} Group;

#define MAX_IMAGE_KEYS 8

typedef struct ShardCtx {
    const char *img_keys[MAX_IMAGE_KEYS]; /* --input-key's extensions, preferred first */
    size_t img_len[MAX_IMAGE_KEYS];
    int nimg;
    const char *label_field; /* --target-key, else the split's alt_label, else NULL (.cls) */
    const char *path;
    int fd;
    size_t shard;
    WdsIndex *x;
    DsBuild *b;
    Group g;
    size_t skipped;
    int bad_label; /* flush_group failed: the data's labels, not the archive, are wrong */
} ShardCtx;

static int read_member(ShardCtx *c, uint64_t off, uint64_t size, char **out, CtErr *err)
{
    if (size > MAX_META_BYTES)
        return ct_fail(err, "%s: a label member of %llu bytes", c->path, (unsigned long long)size);
    char *buf = malloc(size + 1);
    if (!buf)
        return ct_fail(err, "out of memory");
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(c->fd, buf + got, size - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            return ct_fail(err, "%s: read failed at offset %llu", c->path, (unsigned long long)(off + got));
        }
        got += (size_t)r;
    }
    buf[size] = 0;
    *out = buf;
    return 0;
}

/* Python's int() of the .cls bytes: whitespace, a sign, digits. */
static int parse_cls(const char *s, long long *v)
{
    while (isspace((unsigned char)*s))
        s++;
    int neg = *s == '-';
    if (*s == '-' || *s == '+')
        s++;
    if (!isdigit((unsigned char)*s))
        return -1;
    long long n = 0;
    for (; isdigit((unsigned char)*s) || (*s == '_' && isdigit((unsigned char)s[1])); s++) {
        if (*s == '_')
            continue;
        if (n > (1ll << 40))
            return -1;
        n = n * 10 + (*s - '0');
    }
    while (isspace((unsigned char)*s))
        s++;
    if (*s)
        return -1;
    *v = neg ? -n : n;
    return 0;
}

/* targets.get_field: a literal key, else a '/' path through nested objects. */
static const cJSON *get_field(const cJSON *o, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, path);
    if (v)
        return v;
    char part[256];
    for (const char *p = path; o && *p;) {
        size_t n = strcspn(p, "/");
        if (n >= sizeof part)
            return NULL;
        memcpy(part, p, n);
        part[n] = 0;
        o = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, part) : NULL;
        p += n + (p[n] == '/');
    }
    return o;
}

/* Ends the sample being grouped: kept with its label, or left out as
 * timm's pipeline drops it (no image, no label: log_and_continue; a json
 * label below 0: _decode's None). */
static int flush_group_checked(ShardCtx *c, CtErr *err);

static int flush_group(ShardCtx *c, CtErr *err)
{
    int rc = flush_group_checked(c, err);
    c->bad_label |= rc != 0;
    return rc;
}

static int flush_group_checked(ShardCtx *c, CtErr *err)
{
    Group *g = &c->g;
    if (!g->have)
        return 0;
    g->have = 0;
    if (!g->img_rank) {
        c->skipped++;
        return 0;
    }
    long long label;
    const char *why = NULL;
    char *text = NULL;
    if (c->label_field) {
        if (!g->has_json)
            return ct_fail(err, "%s: sample '%s' has no .json for its label field '%s'", c->path, g->key,
                           c->label_field);
        if (read_member(c, g->json_off, g->json_size, &text, err))
            return -1;
        cJSON *meta = cJSON_Parse(text);
        const cJSON *v = meta ? get_field(meta, c->label_field) : NULL;
        int ok = cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
        label = ok ? (long long)v->valuedouble : 0;
        int is_list = cJSON_IsArray(v);
        cJSON_Delete(meta);
        if (is_list)
            why = "its .json holds a list (timm's multi-label targets; ctimm trains single labels) in";
        else if (!ok)
            why = "its .json has no whole-number field";
        else if (label < 0) {
            free(text);
            c->skipped++;
            return 0;
        }
    } else {
        if (!g->has_cls) {
            c->skipped++;
            return 0;
        }
        if (read_member(c, g->cls_off, g->cls_size, &text, err))
            return -1;
        if (parse_cls(text, &label))
            why = "its .cls is not a whole number";
        else if (label < 0)
            why = "its .cls is negative";
    }
    free(text);
    if (why)
        return ct_fail(err, "%s: sample '%s': %s%s%s", c->path, g->key, why, c->label_field ? " " : "",
                       c->label_field ? c->label_field : "");
    if (label > INT32_MAX - 1)
        return ct_fail(err, "%s: sample '%s': label %lld out of range", c->path, g->key, label);
    DsEntry e = {.off = g->img_off, .size = g->img_size, .shard = c->shard, .class_index = (int32_t)label};
    if (ds_str(c->b, g->key, strlen(g->key), &e.name, err))
        return -1;
    e.key = e.name;
    return ds_add(c->b, e, err);
}

/* webdataset's base_plus_ext and group_by_keys for one member. */
static int on_member(void *ctx, const char *name, uint64_t off, uint64_t size, CtErr *err)
{
    ShardCtx *c = ctx;
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base)
        return 0; /* base_plus_ext finds no key: not part of a sample */
    /* webdataset's meta files (__x__) are no samples either */
    if (base[0] == '_' && base[1] == '_' && dot - base >= 4 && dot[-1] == '_' && dot[-2] == '_')
        return 0;
    size_t kl = (size_t)(dot - name);
    if (kl >= sizeof c->g.key)
        return ct_fail(err, "%s: member name too long: %.60s...", c->path, name);
    if (!c->g.have || strncmp(c->g.key, name, kl) || c->g.key[kl]) {
        if (flush_group(c, err))
            return -1;
        memset(&c->g, 0, sizeof c->g);
        memcpy(c->g.key, name, kl);
        c->g.key[kl] = 0;
        c->g.have = 1;
    }
    char ext[16];
    size_t el = strlen(dot + 1);
    if (el >= sizeof ext)
        return 0;
    for (size_t i = 0; i <= el; i++)
        ext[i] = (char)tolower((unsigned char)dot[1 + i]);
    for (int k = 0; k < c->nimg; k++)
        if (strlen(ext) == c->img_len[k] && !strncmp(ext, c->img_keys[k], c->img_len[k]) &&
            (!c->g.img_rank || k + 1 < c->g.img_rank)) {
            c->g.img_rank = k + 1;
            c->g.img_off = off;
            c->g.img_size = size;
        }
    if (!strcmp(ext, "cls")) {
        c->g.has_cls = 1;
        c->g.cls_off = off;
        c->g.cls_size = size;
    } else if (!strcmp(ext, "json")) {
        c->g.has_json = 1;
        c->g.json_off = off;
        c->g.json_size = size;
    }
    return 0;
}

void ds_wds_free(WdsIndex *x)
{
    wds_free_names(x->shards, x->nshards);
    free(x->shard_first);
    free(x->alt_label);
    memset(x, 0, sizeof *x);
}

int ds_wds_index(const char *root, const char *split, size_t num_samples, const char *input_key,
                 const char *target_key, WdsIndex *x, DsBuild *b, CtErr *err)
{
    memset(x, 0, sizeof *x);
    if (!split || !*split)
        return ct_fail(err, "wds %s: no split given", root);
    if (target_key && strchr(target_key, ','))
        return ct_fail(err, "--target-key %s: several fields make timm's multi-label targets; ctimm trains single "
                       "labels", target_key);
    ShardCtx proto = {.nimg = 0};
    const char *keys = input_key && *input_key ? input_key : "jpg;png;webp";
    for (const char *k = keys; *k;) {
        size_t n = strcspn(k, ";");
        if (proto.nimg == MAX_IMAGE_KEYS)
            return ct_fail(err, "--input-key %s: more than %d image keys", keys, MAX_IMAGE_KEYS);
        proto.img_keys[proto.nimg] = k;
        proto.img_len[proto.nimg++] = n;
        k += n + (k[n] == ';');
    }
    cJSON *info = NULL;
    char info_path[4200];
    int rc = load_info(root, &info, info_path, sizeof info_path, err);
    if (!rc)
        rc = parse_split(root, split, info, info_path, x, err);
    cJSON_Delete(info);
    if (rc)
        return -1;
    if (num_samples)
        x->num_samples = num_samples;
    x->shard_first = malloc((x->nshards + 1) * sizeof *x->shard_first);
    if (!x->shard_first)
        return ct_fail(err, "out of memory");
    /* A shard that cannot be opened or read to its end is timm's
     * log_and_continue: a warning, the samples read before the damage kept
     * (not the one being grouped), the shard left out if it gave none. */
    size_t kept = 0;
    for (size_t s = 0; s < x->nshards; s++) {
        x->shard_first[kept] = b->n;
        size_t need = strlen(root) + strlen(x->shards[s]) + 2;
        char *path = malloc(need);
        if (!path)
            return ct_fail(err, "out of memory");
        snprintf(path, need, "%s/%s", root, x->shards[s]);
        free(x->shards[s]);
        x->shards[s] = NULL;
        int fd = open(path, O_RDONLY);
        if (fd < 0) {
            fprintf(stderr, "ctimm: warning: wds shard %s: %s; skipped (timm's log_and_continue)\n", path,
                    strerror(errno));
            free(path);
            continue;
        }
        ShardCtx c = proto;
        c.label_field = target_key && *target_key ? target_key : x->alt_label;
        c.path = path;
        c.fd = fd;
        c.shard = kept;
        c.x = x;
        c.b = b;
        rc = ds_tar_walk(path, fd, on_member, &c, err);
        int damaged = rc && !c.bad_label;
        if (damaged) {
            fprintf(stderr, "ctimm: warning: wds shard %s; its samples from there on skipped (timm's "
                    "log_and_continue)\n", err->msg);
            c.g.have = 0;
            rc = 0;
        }
        if (!rc)
            rc = flush_group(&c, err);
        close(fd);
        x->skipped += c.skipped;
        if (rc) {
            free(path);
            return -1;
        }
        if (damaged && b->n == x->shard_first[kept]) {
            free(path);
            continue;
        }
        x->shards[kept++] = path;
    }
    x->nshards = kept;
    if (kept == 0)
        return ct_fail(err, "wds %s: split '%s': no shard could be read", root, split);
    if (x->skipped) /* as timm's pipeline leaves them out, which warns of those without an image or label */
        fprintf(stderr, "ctimm: warning: wds %s: split '%s': %zu samples left out (no image of --input-key, no "
                "label, or a .json label below 0)\n", root, split, x->skipped);
    x->shard_first[x->nshards] = b->n;
    return 0;
}
