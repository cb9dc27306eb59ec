/* tools/make_zoo_refs.py's formula for a full-size model's weights and
 * input (zoo_fill, uniform there), which both sides compute in integers
 * and then in double, so that they get the same float32 bits: tensor
 * `name`, element i, from the FNV-1a hash of the name and a 32-bit mix of
 * i; and the reference files' loader. Shared by test_zoo (eval mode) and
 * test_zoo_train (training mode). */
#ifndef CTIMM_TEST_ZOO_FILL_H
#define CTIMM_TEST_ZOO_FILL_H

#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "runtime/state.h"

static inline uint32_t fnv1a(const char *s)
{
    uint32_t h = 0x811C9DC5u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x01000193u;
    return h;
}

static inline uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

static inline double uniform(uint32_t seed, int64_t i)
{
    return mix((uint32_t)((uint64_t)i * 0x9E3779B1u + seed)) / 4294967296.0;
}

static inline int ends_with(const char *s, const char *end)
{
    size_t n = strlen(s), k = strlen(end);
    return n >= k && !strcmp(s + n - k, end);
}

/* tools/make_zoo_refs.py's zoo_fill for one tensor: what its name and
 * shape decide, found once a tensor (found per element, the hash and the
 * name's tests took a quarter of test_zoo's time); zoo_fill_at gives
 * element i by the formula's expressions as written, so the same double. */
typedef struct ZooFill {
    uint32_t seed;
    enum { ZOO_VAR, ZOO_MEAN, ZOO_FAN_IN, ZOO_BIAS, ZOO_GAIN } kind;
    double fan_scale; /* ZOO_FAN_IN: sqrt(3 / fan_in) */
} ZooFill;

static inline ZooFill zoo_fill_of(const char *name, const CtShape *s)
{
    ZooFill f = {.seed = fnv1a(name), .kind = ZOO_GAIN};
    if (ends_with(name, "running_var"))
        f.kind = ZOO_VAR;
    else if (ends_with(name, "running_mean"))
        f.kind = ZOO_MEAN;
    else if (s->ndim >= 2)
        f.kind = ZOO_FAN_IN, f.fan_scale = sqrt(3.0 / (double)(shape_numel(s) / s->d[0]));
    else if (ends_with(name, "bias"))
        f.kind = ZOO_BIAS;
    return f;
}

static inline double zoo_fill_at(const ZooFill *f, int64_t i)
{
    double u = uniform(f->seed, i), v = 2 * u - 1;
    switch (f->kind) {
    case ZOO_VAR: return 1 + 0.5 * u;
    case ZOO_MEAN: return 0.1 * v;
    case ZOO_FAN_IN: return v * f->fan_scale;
    case ZOO_BIAS: return 0.1 * v;
    default: return 1 + 0.2 * v;
    }
}

/* The model's params and buffers in st by the formula: integers 0, floats
 * (f32, or f64 holding the f32 value) the formula's value times
 * scale(name) rounded to float32; scale NULL: 1. Other state (an
 * optimizer's) is left as it is. */
static inline void zoo_fill_state(CtState *st, double (*scale)(const char *name, void *ctx), void *ctx)
{
    for (int i = 0; i < st->n; i++) {
        const StateEntry *e = &st->e[i];
        int64_t n = shape_numel(&e->type.shape);
        if (e->role != CT_ROLE_PARAM && e->role != CT_ROLE_BUFFER)
            continue;
        double f = scale ? scale(e->name, ctx) : 1;
        ZooFill z = zoo_fill_of(e->name, &e->type.shape);
        if (e->type.dtype == CT_I64)
            memset(state_data(st, i), 0, (size_t)n * sizeof(int64_t));
        else if (e->type.dtype == CT_F32)
            for (int64_t k = 0; k < n; k++)
                ((float *)state_data(st, i))[k] = (float)(zoo_fill_at(&z, k) * f);
        else if (e->type.dtype == CT_F64)
            for (int64_t k = 0; k < n; k++)
                ((double *)state_data(st, i))[k] = (float)(zoo_fill_at(&z, k) * f);
    }
}

/* tests/data/<dir>/<name>.json parsed, or NULL with a failed check. */
static inline cJSON *zoo_read_refs(const char *dir, const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s/%s.json", test_data_dir(), dir, name);
    char *text = test_read_text(path);
    CHECKF(text != NULL, "cannot read %s", path);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECKF(doc != NULL, "%s is not JSON", path);
    return doc;
}

#endif
