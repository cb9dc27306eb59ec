#include "runtime/state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensor.h"

void state_create(CtState *s, const Graph *g)
{
    memset(s, 0, sizeof *s);
    s->e = calloc((size_t)(g->nstate ? g->nstate : 1), sizeof *s->e);
    CT_ASSERT(s->e != NULL);
    size_t off = 0;
    for (int k = 0; k < g->nstate; k++) {
        const Value *v = &g->values[g->state[k]];
        StateEntry *e = &s->e[s->n++];
        e->name = strdup(v->name);
        CT_ASSERT(e->name != NULL);
        e->type = v->type;
        e->role = v->role;
        e->init = v->init;
        e->init.data = NULL; /* the graph's: its values are copied below */
        e->offset = off;
        off += ((size_t)shape_numel(&v->type.shape) * ct_dtype_size(v->type.dtype) + 63) & ~(size_t)63;
    }
    s->nbytes = off;
    s->data = calloc(off ? off : 1, 1);
    CT_ASSERT(s->data != NULL);
    for (int k = 0; k < g->nstate; k++) {
        const Value *v = &g->values[g->state[k]];
        if (v->init.kind == CT_INIT_DATA)
            elems_from_double(v->init.data, v->type.dtype, shape_numel(&v->type.shape), state_data(s, k));
    }
}

void state_free(CtState *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->e[i].name);
    free(s->e);
    free(s->data);
    memset(s, 0, sizeof *s);
}

int state_find(const CtState *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->e[i].name, name) == 0)
            return i;
    return -1;
}

/* splitmix64: a small, well-mixed generator; one stream per tensor. */
static uint64_t next_u64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double next_uniform(uint64_t *x) { return ((double)(next_u64(x) >> 11) + 0.5) * 0x1.0p-53; }

static double next_normal(uint64_t *x)
{
    double u = next_uniform(x), v = next_uniform(x);
    return sqrt(-2 * log(u)) * cos(2 * 3.14159265358979323846 * v);
}

static uint64_t name_hash(const char *s, uint64_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static double draw(const CtInit *init, uint64_t *rng)
{
    switch (init->kind) {
    case CT_INIT_ONES: return 1;
    case CT_INIT_NORMAL: return init->a * next_normal(rng);
    case CT_INIT_TRUNC_NORMAL:
        /* timm's trunc_normal_(std, a=-2, b=2): the bounds are absolute values */
        for (;;) {
            double v = init->a * next_normal(rng);
            if (v >= -2 && v <= 2)
                return v;
        }
    case CT_INIT_UNIFORM: return init->a * (2 * next_uniform(rng) - 1);
    case CT_INIT_CONSTANT: return init->a;
    case CT_INIT_TRUNC_NORMAL_TF:
        for (;;) {
            double v = next_normal(rng);
            if (v >= -2 && v <= 2)
                return init->a * v;
        }
    default: return 0;
    }
}

/* The uniforms one element draws where that is fixed (0 where none), so
 * that element j's draws start 2j or j steps into the tensor's stream and
 * a chunk of it can be drawn apart; -1 where rejection makes it vary. */
static int draws_per_element(CtInitKind kind)
{
    switch (kind) {
    case CT_INIT_NORMAL: return 2;
    case CT_INIT_UNIFORM: return 1;
    case CT_INIT_TRUNC_NORMAL:
    case CT_INIT_TRUNC_NORMAL_TF: return -1;
    default: return 0;
    }
}

enum { INIT_CHUNK = 1 << 16 };

/* Elements [j0, j1) of entry e (its data at p) from its stream at rng. */
static void init_range(const StateEntry *e, void *p, uint64_t rng, int64_t j0, int64_t j1)
{
    double buf[1024];
    size_t es = ct_dtype_size(e->type.dtype);
    for (int64_t j = j0; j < j1; j += 1024) {
        int64_t m = j1 - j < 1024 ? j1 - j : 1024;
        for (int64_t k = 0; k < m; k++)
            buf[k] = draw(&e->init, &rng);
        elems_from_double(buf, e->type.dtype, m, (unsigned char *)p + (size_t)j * es);
    }
}

/* Work items of INIT_CHUNK elements where an element's draws are fixed
 * (splitmix64 skips ahead by adding), a whole tensor where they are not:
 * the same values as drawing each tensor in order, on every core. */
void state_init(CtState *s, uint64_t seed)
{
    int nitems = 0, cap = 0;
    struct {
        int entry;
        int64_t j0; /* its first element; -1: the whole tensor, drawn in order */
    } *items = NULL;
    for (int i = 0; i < s->n; i++) {
        const StateEntry *e = &s->e[i];
        if (e->init.kind == CT_INIT_DATA) /* filled when the state was made */
            continue;
        int64_t n = shape_numel(&e->type.shape);
        for (int64_t j0 = draws_per_element(e->init.kind) < 0 ? -1 : 0; j0 < n; j0 = j0 < 0 ? n : j0 + INIT_CHUNK) {
            items = ct_grow(items, &cap, nitems + 1, sizeof *items);
            items[nitems].entry = i;
            items[nitems++].j0 = j0;
        }
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < nitems; k++) {
        const StateEntry *e = &s->e[items[k].entry];
        int64_t n = shape_numel(&e->type.shape), j0 = items[k].j0 < 0 ? 0 : items[k].j0;
        int64_t j1 = items[k].j0 < 0 || j0 + INIT_CHUNK > n ? n : j0 + INIT_CHUNK;
        uint64_t skip = (uint64_t)j0 * (uint64_t)draws_per_element(e->init.kind) * 0x9E3779B97F4A7C15ull;
        init_range(e, state_data(s, items[k].entry), name_hash(e->name, seed) + skip, j0, j1);
    }
    free(items);
}

/* Which entries a load or save covers: the model (params and buffers), or
 * the training state (optimizer state and rng counter; optimizer state only
 * when `optim` is set). */
static int in_part(const StateEntry *e, int model, int optim)
{
    if (model)
        return e->role == CT_ROLE_PARAM || e->role == CT_ROLE_BUFFER;
    return e->role == CT_ROLE_STATE && (optim || strncmp(e->name, "optim.", 6) != 0);
}

/* A model EMA's copy ("ema.*"): optional in a training-state file. */
static int is_ema(const char *name) { return strncmp(name, "ema.", 4) == 0; }

/* --grad-accum-steps' accumulated gradients ("accum.*"): zero at every
 * update, so a file without them resumes as one with (a run with another
 * step count reads or ignores them). */
static int is_accum(const char *name) { return strncmp(name, "accum.", 6) == 0; }

/* BatchNorm's step counter: torch's BatchNorm fills it in when a
 * state_dict lacks it (hub weights often do), so a model file may too. */
static int is_batch_count(const StateEntry *e)
{
    size_t n = strlen(e->name), k = strlen("num_batches_tracked");
    return e->role == CT_ROLE_BUFFER && n >= k && strcmp(e->name + n - k, "num_batches_tracked") == 0 &&
           (n == k || e->name[n - k - 1] == '.');
}

static int in_list(const char *name, const char *const *list)
{
    for (int k = 0; list && list[k]; k++)
        if (strcmp(name, list[k]) == 0)
            return 1;
    return 0;
}

static int load_part(CtState *s, const StFile *f, const char *prefix, int model, int optim, int *ema_missing,
                     const char *const *keep, CtErr *err)
{
    size_t plen = strlen(prefix);
    char name[600], a[96], b[96];
    for (int i = 0; i < s->n; i++) {
        StateEntry *e = &s->e[i];
        if (!in_part(e, model, optim) || in_list(e->name, keep))
            continue;
        snprintf(name, sizeof name, "%s%s", prefix, e->name);
        const StTensor *t = st_find(f, name);
        if (!t && ema_missing && is_ema(e->name)) {
            *ema_missing = 1;
            continue;
        }
        if (!t && ((model && is_batch_count(e)) || (!model && is_accum(e->name))))
            continue;
        if (!t)
            return ct_fail(err, "'%s' is missing from the file", name);
        CtShape ts = shape_make(t->ndim, t->shape);
        if (!shape_equal(&ts, &e->type.shape))
            return ct_fail(err, "'%s' has shape %s in the file but the model needs %s", name,
                           shape_str(&ts, a, sizeof a), shape_str(&e->type.shape, b, sizeof b));
        if (t->dtype != e->type.dtype)
            return ct_fail(err, "'%s' is %s in the file but the model needs %s", name, ct_dtype_st_name(t->dtype),
                           ct_dtype_st_name(e->type.dtype));
        memcpy(state_data(s, i), t->data, t->nbytes);
    }
    for (int k = 0; k < f->ntensors; k++) {
        const char *n = f->tensors[k].name;
        if (strncmp(n, prefix, plen) != 0 || (!model && !optim && strncmp(n + plen, "optim.", 6) == 0))
            continue;
        int i = state_find(s, n + plen);
        if ((i < 0 && ((ema_missing && is_ema(n + plen)) || (!model && is_accum(n + plen)))) || in_list(n + plen, keep))
            continue;
        /* a build-time constant the file holds (older timm checkpoints saved relative position indices and
         * masks, which timm's checkpoint_filter_fns drop): the model's own values stand */
        if (i >= 0 && s->e[i].role == CT_ROLE_CONST)
            continue;
        if (i < 0 || !in_part(&s->e[i], model, 1))
            return ct_fail(err, "'%s' in the file is not part of the %s", n, model ? "model" : "training state");
    }
    return 0;
}

int state_load(CtState *s, const StFile *f, const char *prefix, CtErr *err)
{
    return load_part(s, f, prefix, 1, 0, NULL, NULL, err);
}

int state_load_keeping(CtState *s, const StFile *f, const char *const *keep, CtErr *err)
{
    return load_part(s, f, "", 1, 0, NULL, keep, err);
}

int state_load_training(CtState *s, const StFile *f, int optim, int *ema_missing, CtErr *err)
{
    *ema_missing = 0;
    return load_part(s, f, "", 0, optim, ema_missing, NULL, err);
}

static int save_part(const CtState *s, int model, const char *path, const char *const *meta_keys,
                     const char *const *meta_vals, int nmeta, CtErr *err)
{
    StTensor *t = calloc((size_t)(s->n ? s->n : 1), sizeof *t);
    CT_ASSERT(t != NULL);
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        const StateEntry *e = &s->e[i];
        if (!in_part(e, model, 1))
            continue;
        t[n] = (StTensor){.name = e->name, .dtype = e->type.dtype, .ndim = e->type.shape.ndim,
                          .nbytes = (size_t)shape_numel(&e->type.shape) * ct_dtype_size(e->type.dtype),
                          .data = state_data(s, i)};
        memcpy(t[n].shape, e->type.shape.d, sizeof(int64_t) * (size_t)e->type.shape.ndim);
        n++;
    }
    int rc = st_write(path, t, n, meta_keys, meta_vals, nmeta, err);
    free(t);
    return rc;
}

int state_save(const CtState *s, const char *path, const char *const *meta_keys, const char *const *meta_vals,
               int nmeta, CtErr *err)
{
    return save_part(s, 1, path, meta_keys, meta_vals, nmeta, err);
}

int state_save_training(const CtState *s, const char *path, const char *const *meta_keys,
                        const char *const *meta_vals, int nmeta, CtErr *err)
{
    return save_part(s, 0, path, meta_keys, meta_vals, nmeta, err);
}
