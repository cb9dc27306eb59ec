#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/twin_choice.h"

int twin_mode(TwinMode *mode, CtErr *err)
{
    const char *s = getenv("CTIMM_DWCONV");
    *mode = !s || !*s || !strcmp(s, "auto") ? TWIN_AUTO : !strcmp(s, "lib") ? TWIN_LIB : TWIN_CUDNN;
    if (*mode == TWIN_CUDNN && strcmp(s, "cudnn"))
        return ct_fail(err, "CTIMM_DWCONV=%s: use auto, lib or cudnn", s);
    return 0;
}

int conv_stats_mode(ConvStatsMode *mode, CtErr *err)
{
    const char *s = getenv("CTIMM_CONV_STATS");
    *mode = s && !strcmp(s, "kernel") ? STATS_KERNEL : STATS_CUDNN;
    if (s && *s && strcmp(s, "kernel") && strcmp(s, "cudnn"))
        return ct_fail(err, "CTIMM_CONV_STATS=%s: use cudnn or kernel", s);
    return 0;
}

typedef struct TimeCtx {
    TwinTimeFn time;
    void *ctx;
} TimeCtx;

/* The store's "compile": both ways timed. */
static int time_both(void *vctx, const CacheKeyParts *parts, void **blob, size_t *n, CtErr *err)
{
    (void)parts;
    const TimeCtx *k = vctx;
    TwinChoice c = {0};
    for (int way = 0; way < 2; way++)
        if (k->time(k->ctx, way, &c.ms[way], err))
            return -1;
    c.twin = c.ms[1] < c.ms[0];
    *blob = malloc(sizeof c);
    CT_ASSERT(*blob != NULL);
    memcpy(*blob, &c, sizeof c);
    *n = sizeof c;
    return 0;
}

int twin_choose(KernelCache *c, const CacheKeyParts *parts, TwinTimeFn time, void *ctx, TwinChoice *out, CtErr *err)
{
    TimeCtx k = {time, ctx};
    const void *blob;
    size_t n;
    if (cache_get(c, parts, time_both, &k, &blob, &n, err))
        return -1;
    if (n != sizeof *out)
        return ct_fail(err, "stored choice for %s has %zu bytes, not %zu", parts->source, n, sizeof *out);
    memcpy(out, blob, sizeof *out);
    return 0;
}
