/*
 * WebDataset epochs (wds.h): the buffered shuffle, brace expansion and the
 * per-rank order.
 */
#include "runtime/data/wds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tags that keep the shard and sample generators apart from the loader's
 * per-sample ones (rng_for(seed, epoch, position)). */
#define TAG_SHARDS 0x5344534853574400ull
#define TAG_SAMPLES 0x5344534d50574400ull

void wds_shuffle(const size_t *in, size_t n, size_t bufsize, size_t initial, CtRng *rng, size_t *out)
{
    if (initial > bufsize)
        initial = bufsize;
    size_t *buf = malloc((bufsize + 2) * sizeof *buf), len = 0, o = 0, i = 0;
    CT_ASSERT(buf != NULL);
    while (i < n) {
        buf[len++] = in[i++];
        if (len < bufsize && i < n)
            buf[len++] = in[i++];
        if (len >= initial) {
            size_t k = (size_t)rng_below(rng, len);
            out[o++] = buf[k];
            buf[k] = buf[--len];
        }
    }
    while (len > 0) {
        size_t k = (size_t)rng_below(rng, len);
        out[o++] = buf[k];
        buf[k] = buf[--len];
    }
    free(buf);
}

void wds_free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

typedef struct Names {
    char **v;
    size_t n, cap;
} Names;

static int names_add(Names *l, char *s, CtErr *err)
{
    if (!s)
        return ct_fail(err, "out of memory");
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **p = realloc(l->v, cap * sizeof *p);
        if (!p) {
            free(s);
            return ct_fail(err, "out of memory");
        }
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return 0;
}

static int parse_uint(const char *s, size_t n, unsigned long long *v)
{
    if (n == 0 || n > 18)
        return -1;
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        *v = *v * 10 + (unsigned long long)(s[i] - '0');
    }
    return 0;
}

/* Expands the first brace group of pat after the prefix `done`, recursing
 * on the rest. */
static int expand_one(const char *done, const char *pat, Names *out, const char *whole, CtErr *err)
{
    const char *open = strchr(pat, '{');
    if (!open) {
        size_t n = strlen(done) + strlen(pat) + 1;
        char *s = malloc(n);
        if (s)
            snprintf(s, n, "%s%s", done, pat);
        return names_add(out, s, err);
    }
    const char *close = strchr(open, '}');
    if (!close)
        return ct_fail(err, "shard pattern '%s': a '{' without its '}'", whole);
    size_t head = (size_t)(open - pat), body = (size_t)(close - open - 1);
    const char *b = open + 1, *dots = NULL;
    for (size_t i = 0; i + 1 < body; i++)
        if (b[i] == '.' && b[i + 1] == '.') {
            dots = b + i;
            break;
        }
    size_t dl = strlen(done);
    char *pre = malloc(dl + head + 32);
    if (!pre)
        return ct_fail(err, "out of memory");
    memcpy(pre, done, dl);
    memcpy(pre + dl, pat, head);
    pre[dl + head] = 0;
    int rc = 0;
    if (dots) {
        size_t la = (size_t)(dots - b), lb = body - la - 2;
        unsigned long long lo, hi;
        if (parse_uint(b, la, &lo) || parse_uint(dots + 2, lb, &hi) || hi < lo || hi - lo > 10000000) {
            free(pre);
            return ct_fail(err, "shard pattern '%s': '{%.*s}' is not a range of whole numbers, low to high", whole,
                           (int)body, b);
        }
        /* braceexpand pads to the longer bound when either has a leading zero */
        int width = (la > 1 && b[0] == '0') || (lb > 1 && dots[2] == '0') ? (int)(la > lb ? la : lb) : 0;
        for (unsigned long long v = lo; v <= hi && !rc; v++) {
            snprintf(pre + dl + head, 32, "%0*llu", width, v);
            rc = expand_one(pre, close + 1, out, whole, err);
        }
    } else {
        for (const char *p = b; !rc;) {
            const char *comma = memchr(p, ',', (size_t)(close - p));
            const char *end = comma ? comma : close;
            char *item = malloc(dl + head + (size_t)(end - p) + 1);
            if (!item) {
                rc = ct_fail(err, "out of memory");
                break;
            }
            snprintf(item, dl + head + (size_t)(end - p) + 1, "%s%.*s", pre, (int)(end - p), p);
            rc = expand_one(item, close + 1, out, whole, err);
            free(item);
            if (!comma)
                break;
            p = comma + 1;
        }
    }
    free(pre);
    return rc;
}

int wds_expand(const char *pattern, char ***out, size_t *n, CtErr *err)
{
    *out = NULL;
    *n = 0;
    Names l = {0};
    char *copy = strdup(pattern);
    if (!copy)
        return ct_fail(err, "out of memory");
    int rc = 0;
    for (char *p = copy; p && !rc;) {
        char *sep = strstr(p, "::");
        if (sep)
            *sep = 0;
        if (*p)
            rc = expand_one("", p, &l, pattern, err);
        p = sep ? sep + 2 : NULL;
    }
    free(copy);
    if (!rc && l.n == 0)
        rc = ct_fail(err, "shard pattern '%s' names no shard", pattern);
    if (rc) {
        wds_free_names(l.v, l.n);
        return -1;
    }
    *out = l.v;
    *n = l.n;
    return 0;
}

size_t wds_worker_samples(size_t num_samples, int world_size, int num_workers, int batch_size, int training)
{
    size_t G = (size_t)world_size * (size_t)(num_workers > 1 ? num_workers : 1);
    size_t d = G > (size_t)world_size ? G : (size_t)world_size;
    size_t per = training || world_size > 1 ? (num_samples + d - 1) / d : num_samples / d;
    if (training)
        per = (per + (size_t)batch_size - 1) / (size_t)batch_size * (size_t)batch_size;
    return per;
}

static int cut_to_epoch(const WdsPlan *p) { return p->training || p->world_size > 1; }

static int nworkers(const WdsPlan *p) { return p->num_workers > 1 ? p->num_workers : 1; }

size_t wds_rank_samples(const WdsPlan *p)
{
    if (cut_to_epoch(p))
        return wds_worker_samples(p->num_samples, p->world_size, p->num_workers, p->batch_size, p->training) *
               (size_t)nworkers(p);
    return p->shard_first[p->nshards]; /* every shard once */
}

int wds_plan_check(const WdsPlan *p, CtErr *err)
{
    size_t G = (size_t)p->world_size * (size_t)nworkers(p);
    if (p->nshards == 0)
        return ct_fail(err, "wds: no shards");
    if (p->training && p->num_samples == 0)
        return ct_fail(err, "wds: the training split's sample count is not known (give it in _info.json, as "
                       "'pattern|N', or with --train-num-samples)");
    if (cut_to_epoch(p) && wds_worker_samples(p->num_samples, p->world_size, p->num_workers, p->batch_size,
                                              p->training) > 0) {
        if (G > p->nshards)
            return ct_fail(err, "wds: %zu shards for %zu loader workers (%d ranks x %d): a worker without a shard "
                           "would never finish its epoch (fewer --workers, or more shards)",
                           p->nshards, G, p->world_size, nworkers(p));
        for (size_t s = 0; s < p->nshards; s++)
            if (p->shard_first[s + 1] == p->shard_first[s])
                return ct_fail(err, "wds: shard %zu holds no sample: its worker's epoch could not be filled", s);
    }
    return 0;
}

int wds_epoch_order(const WdsPlan *p, uint64_t epoch, size_t *out, CtErr *err)
{
    if (wds_plan_check(p, err))
        return -1;
    size_t S = p->nshards, nw = (size_t)nworkers(p), G = (size_t)p->world_size * nw, B = (size_t)p->batch_size;
    size_t total = p->shard_first[S];
    size_t *shards = malloc(S * sizeof *shards), *order = malloc(S * sizeof *order);
    size_t *stream = malloc((total ? total : 1) * sizeof *stream), *mixed = malloc((total ? total : 1) * sizeof *mixed);
    size_t **w = calloc(nw, sizeof *w), *wn = calloc(nw, sizeof *wn);
    int rc = 0;
    if (!shards || !order || !stream || !mixed || !w || !wn) {
        rc = ct_fail(err, "out of memory");
        goto done;
    }
    for (size_t s = 0; s < S; s++)
        shards[s] = s;
    if (p->training) {
        CtRng r = rng_for(p->seed ^ TAG_SHARDS, epoch, 0); /* shared by all ranks and workers */
        wds_shuffle(shards, S, WDS_SHARD_SHUFFLE, WDS_SHARD_INITIAL, &r, order);
    } else {
        memcpy(order, shards, S * sizeof *order);
    }
    size_t want = cut_to_epoch(p) ? wds_worker_samples(p->num_samples, p->world_size, p->num_workers, p->batch_size,
                                                       p->training)
                                  : 0;
    for (size_t k = 0; k < nw; k++) {
        size_t g = (size_t)p->rank * nw + k, len = 0;
        for (size_t j = g; j < S; j += G)
            for (size_t i = p->shard_first[order[j]]; i < p->shard_first[order[j] + 1]; i++)
                stream[len++] = i;
        size_t n = cut_to_epoch(p) ? want : len;
        w[k] = malloc((n ? n : 1) * sizeof **w);
        if (!w[k]) {
            rc = ct_fail(err, "out of memory");
            goto done;
        }
        CtRng r = rng_for(p->seed ^ TAG_SAMPLES, epoch, g);
        /* with_epoch: the pipeline is read again (its buffer drawing on from
         * the same generator) until the epoch has its samples */
        for (size_t got = 0; got < n;) {
            size_t take = len < n - got ? len : n - got;
            if (p->training) {
                wds_shuffle(stream, len, WDS_SAMPLE_SHUFFLE, WDS_SAMPLE_INITIAL, &r, mixed);
                memcpy(w[k] + got, mixed, take * sizeof *mixed);
            } else {
                memcpy(w[k] + got, stream, take * sizeof *stream);
            }
            got += take;
        }
        wn[k] = n;
    }
    /* the DataLoader takes the workers' batches in turn, passing over a worker whose stream has ended */
    size_t o = 0;
    for (size_t b = 0;; b++) {
        int any = 0;
        for (size_t k = 0; k < nw; k++) {
            if (b * B >= wn[k])
                continue;
            size_t m = wn[k] - b * B < B ? wn[k] - b * B : B;
            memcpy(out + o, w[k] + b * B, m * sizeof *out);
            o += m;
            any = 1;
        }
        if (!any)
            break;
    }
    CT_ASSERT(o == wds_rank_samples(p));
done:
    for (size_t k = 0; w && k < nw; k++)
        free(w[k]);
    free(w);
    free(wn);
    free(shards);
    free(order);
    free(stream);
    free(mixed);
    return rc;
}
