/*
 * resume_torch: a timm train.py checkpoint into a training state
 * (train/resume_torch.h). It owns the mapping of torch's
 * optimizer.state_dict() onto ctimm's optimizer state:
 *   {'state': {id: {'step', slot: tensor, ...}}, 'param_groups': [{'params': [id, ...], 'lr', ...}]}
 * The ids, taken in param-group order, are the optimizer's params in its
 * order (torch's load_state_dict zips them so); that order is rebuilt
 * from the run as create_optimizer_v2 builds its groups. torch's slot
 * names are ctimm's ("optim.<param>.<slot>": momentum_buffer, exp_avg,
 * exp_avg_sq, exp_avg_var, square_avg, sum, mu_product ...; but Adan's
 * neg_pre_grad, ctimm's pre_grad negated, and LaProp's exp_avg_lr_2,
 * which ctimm derives from the step), and its
 * per-param 'step' (or timm's Lamb's per-group one) is the one
 * "optim.step" every param shares, so all of them must agree.
 */
#include "train/resume_torch.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/autodiff.h"
#include "runtime/tensor.h"
#include "runtime/torch_file.h"

/* How every refusal of the optimizer state ends. */
#define WEIGHTS_ONLY "; --no-resume-opt resumes the weights only"

typedef struct Rs {
    const char *path;
    TorchFile *f;
    CtState *s;
    CtErr *err;
} Rs;

/* The run's optimized params in torch's order: order[k] is the state entry
 * of the k-th; gsize[g] how many of them param group g holds. */
typedef struct Layout {
    const char *opt;
    OptimOp u; /* the run's slots */
    int *order, *gsize;
    int n, ngroups;
} Layout;

/* The step all params share: torch's per-param (or per-group) counts. */
typedef struct Step {
    double v;
    int have;
} Step;

static const char *str_of(const PkValue *v)
{
    return v && v->kind == PK_STR && v->u.str.n == strlen(v->u.str.s) ? v->u.str.s : NULL;
}

/* A number torch keeps as a Python int or float, or as a one-element
 * tensor (an optimizer's 'step' since torch 1.12); what names it. */
static int number(Rs *r, const PkValue *v, const char *what, double *out)
{
    if (v->kind == PK_INT || v->kind == PK_FLOAT) {
        *out = v->kind == PK_INT ? (double)v->u.i : v->u.f;
        return 0;
    }
    if (v->kind != PK_TENSOR)
        return ct_fail(r->err, "--resume %s: %s is %s, not a number", r->path, what, pk_kind_name(v));
    StTensor t;
    if (torch_tensor(r->f, v, what, &t, r->err))
        return ct_failctx(r->err, "--resume");
    int rc = 0;
    if (st_numel(&t) != 1 || elems_to_double(t.data, t.dtype, 1, out))
        rc = ct_fail(r->err, "--resume %s: %s is a tensor of %lld elements, not a number", r->path, what,
                     (long long)st_numel(&t));
    free(t.name);
    free(t.data);
    return rc;
}

/* A model name without its hub prefix or pretrained tag. */
static void base_name(const char *name, char *out, size_t n)
{
    const char *slash = strrchr(name, '/'), *b = slash ? slash + 1 : name;
    snprintf(out, n, "%.*s", (int)strcspn(b, "."), b);
}

/* 'arch' names the run's model: CheckpointSaver writes train.py's --model
 * there when it has the args, else the model's class name (which says
 * nothing then: a ResNet of any depth is 'resnet'). */
static int check_arch(Rs *r, const PkValue *root, const char *model)
{
    const char *arch = str_of(pk_dict_get(root, "arch"));
    char a[256], m[256];
    if (!arch || !pk_dict_get(root, "args"))
        return 0;
    base_name(arch, a, sizeof a);
    base_name(model, m, sizeof m);
    if (strcmp(a, m))
        return ct_fail(r->err, "--resume %s: a checkpoint of %s, not of --model %s", r->path, arch, model);
    return 0;
}

/* timm's resume_epoch less one: the last epoch done (-1 without 'epoch':
 * training starts at 0). A recovery checkpoint holds the epoch in progress
 * (save_recovery(epoch, batch) with version 2), so timm's train.py goes on
 * at the next epoch and the rest of that one is never trained; so does
 * this, as timm does (the batch, in the file's name only, is not used). */
static int done_epoch(Rs *r, const PkValue *root, int *out)
{
    const PkValue *e = pk_dict_get(root, "epoch"), *v = pk_dict_get(root, "version");
    double version = 0;
    *out = -1;
    if (!e)
        return 0;
    if (e->kind != PK_INT || e->u.i < 0 || e->u.i >= INT_MAX)
        return ct_fail(r->err, "--resume %s: its 'epoch' (%s) is not an epoch number", r->path,
                       e->kind == PK_INT ? "negative" : pk_kind_name(e));
    if (v && number(r, v, "'version'", &version))
        return -1;
    *out = (int)e->u.i - (version > 1 ? 0 : 1);
    return 0;
}

static int load_weights(Rs *r)
{
    StFile w;
    if (torch_state_dict(r->f, 0, &w, NULL, r->err))
        return ct_failctx(r->err, "--resume");
    int rc = state_load(r->s, &w, "", r->err);
    st_free(&w);
    return rc ? ct_failctx(r->err, "--resume %s", r->path) : 0;
}

/* 'state_dict_ema' into the "ema.<name>" entries, through a view of them
 * under the model's names; *missing when the file has no EMA. */
static int load_ema(Rs *r, int *missing)
{
    CtState *s = r->s, view = {.data = s->data, .nbytes = s->nbytes};
    view.e = malloc(sizeof *view.e * ((size_t)s->n + 1));
    CT_ASSERT(view.e != NULL);
    for (int i = 0; i < s->n; i++) {
        int m = strncmp(s->e[i].name, "ema.", 4) ? -1 : state_find(s, s->e[i].name + 4);
        if (m >= 0) {
            view.e[view.n] = s->e[i];
            view.e[view.n].name = s->e[i].name + 4;
            view.e[view.n++].role = s->e[m].role;
        }
    }
    StFile f;
    int from_ema = 0, rc = 0;
    if (view.n) {
        if (torch_state_dict(r->f, 1, &f, &from_ema, r->err))
            rc = ct_failctx(r->err, "--resume");
        else if (from_ema && state_load(&view, &f, "", r->err))
            rc = ct_failctx(r->err, "--resume %s (its model EMA)", r->path);
        st_free(&f);
    }
    *missing = view.n && !from_ema;
    free(view.e);
    return rc;
}

/* GradScaler.state_dict() ('amp_scaler'); an empty one (AMP off) is none. */
static int read_scaler(Rs *r, const PkValue *root, Resumed *out)
{
    static const char *const keys[] = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                                       "_growth_tracker"};
    const PkValue *d = pk_dict_get(root, "amp_scaler");
    double v[5];
    if (!d || d->kind != PK_DICT || !d->u.seq.n)
        return 0;
    for (int k = 0; k < 5; k++) {
        const PkValue *x = pk_dict_get(d, keys[k]);
        char what[64];
        snprintf(what, sizeof what, "'amp_scaler' '%s'", keys[k]);
        if (!x)
            return ct_fail(r->err, "--resume %s: its 'amp_scaler' has no '%s'", r->path, keys[k]);
        if (number(r, x, what, &v[k]))
            return -1;
    }
    if (!(v[0] > 0) || !(v[3] >= 1 && v[3] <= INT_MAX) || !(v[4] >= 0 && v[4] <= INT_MAX))
        return ct_fail(r->err, "--resume %s: its 'amp_scaler' (scale %g, growth_interval %g, _growth_tracker %g) is "
                       "not a GradScaler's state", r->path, v[0], v[3], v[4]);
    out->scaler = (LossScaler){v[0], v[1], v[2], (int)v[3], (int)v[4]};
    out->has_scaler = 1;
    return 0;
}

/* train.py's --opt as the checkpoint's args hold it, when they do: the
 * state of another optimizer would be taken for this one's when their
 * slots look alike (adam, adamw, radam). */
static int check_kind(Rs *r, const PkValue *root, const char *opt)
{
    const PkValue *a = pk_dict_get(root, "args"), *fields = a && a->kind == PK_RECORD ? a->u.fields : a;
    const char *name = fields && fields->kind == PK_DICT ? str_of(pk_dict_get(fields, "opt")) : NULL;
    OptimSpec mine, theirs;
    char low[64];
    if (!name)
        return 0;
    snprintf(low, sizeof low, "%s", name);
    for (char *c = low; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    CT_ASSERT(optim_defaults(opt, &mine) == 0);
    if (optim_defaults(low, &theirs) || theirs.kind != mine.kind)
        return ct_fail(r->err, "--resume %s: its optimizer is --opt %.60s, the run's --opt %s" WEIGHTS_ONLY, r->path,
                       name, opt);
    return 0;
}

/* create_optimizer_v2's param groups over the run's optimized params (a
 * param without optimizer state, frozen by --layer-decay-no-opt-scale, is
 * in none): with --layer-decay one per layer and decay / no decay in the
 * order they first appear (param_groups_layer_decay's dict), else no
 * decay then decay (param_groups_weight_decay), one group without weight
 * decay; empty groups are left out. */
static void build_layout(const CtState *s, const ResumeOptim *o, Layout *L)
{
    OptimSpec spec;
    CT_ASSERT(optim_defaults(o->opt, &spec) == 0);
    optim_op(&spec, 0, &L->u);
    CT_ASSERT(L->u.nslot > 0);
    L->opt = o->opt;
    L->order = calloc((size_t)s->n + 1, sizeof *L->order);
    L->gsize = calloc((size_t)s->n + 1, sizeof *L->gsize);
    int *key = calloc((size_t)s->n + 1, sizeof *key), *ent = calloc((size_t)s->n + 1, sizeof *ent);
    int *gkey = calloc((size_t)s->n + 1, sizeof *gkey), m = 0;
    CT_ASSERT(L->order && L->gsize && key && ent && gkey);
    char name[600];
    for (int i = 0, k = 0; i < s->n; i++) {
        const StateEntry *e = &s->e[i];
        if (e->role != CT_ROLE_PARAM)
            continue;
        int id = k++;
        snprintf(name, sizeof name, "optim.%s.%s", e->name, L->u.slot[0]);
        if (state_find(s, name) < 0)
            continue;
        int nd = optim_no_decay(e->name, e->type.shape.ndim, o->no_weight_decay);
        key[m] = o->layer_ids ? 2 * o->layer_ids[id] + nd : o->weight_decay > 0 ? !nd : 0;
        ent[m++] = i;
    }
    L->ngroups = 0;
    for (int j = 0; j < m; j++) {
        int g = 0;
        while (g < L->ngroups && gkey[g] != key[j])
            g++;
        if (g == L->ngroups)
            gkey[L->ngroups++] = key[j];
    }
    if (!o->layer_ids && L->ngroups == 2 && gkey[0] > gkey[1]) { /* no decay first */
        gkey[0] = 0;
        gkey[1] = 1;
    }
    L->n = 0;
    for (int g = 0; g < L->ngroups; g++)
        for (int j = 0; j < m; j++)
            if (key[j] == gkey[g]) {
                L->order[L->n++] = ent[j];
                L->gsize[g]++;
            }
    free(key);
    free(ent);
    free(gkey);
}

static void free_layout(Layout *L)
{
    free(L->order);
    free(L->gsize);
}

/* "n param groups of a, b, c params" into buf (the first 16 sizes). */
static void sizes_text(char *buf, size_t n, const int *sizes, int count)
{
    size_t k = (size_t)snprintf(buf, n, "%d param group%s of ", count, count == 1 ? "" : "s");
    for (int g = 0; g < count && g < 16 && k < n; g++)
        k += (size_t)snprintf(buf + k, n - k, g ? ", %d" : "%d", sizes[g]);
    if (k < n)
        snprintf(buf + k, n - k, "%s params", count > 16 ? ", ..." : "");
}

typedef struct IdPos {
    int64_t id;
    int pos;
} IdPos;

static int by_id(const void *a, const void *b)
{
    int64_t x = ((const IdPos *)a)->id, y = ((const IdPos *)b)->id;
    return (x > y) - (x < y);
}

/* The checkpoint's param groups against the run's: the same count and
 * sizes; ids (sorted, for lookup) gets each param id's place in torch's
 * order. */
static int fit_groups(Rs *r, const PkValue *groups, const Layout *L, IdPos *ids)
{
    if (!groups || groups->kind != PK_LIST)
        return ct_fail(r->err, "--resume %s: its optimizer's 'param_groups' is %s, not a list", r->path,
                       groups ? pk_kind_name(groups) : "missing");
    int ng = (int)groups->u.seq.n, *sizes = calloc((size_t)ng + 1, sizeof *sizes), fits = ng == L->ngroups, n = 0;
    CT_ASSERT(sizes != NULL);
    for (int g = 0; g < ng; g++) {
        const PkValue *p = pk_dict_get(groups->u.seq.v[g], "params");
        if (!p || p->kind != PK_LIST) {
            free(sizes);
            return ct_fail(r->err, "--resume %s: its optimizer's param group %d has no 'params' list", r->path, g);
        }
        sizes[g] = (int)p->u.seq.n;
        fits = fits && sizes[g] == L->gsize[g];
        for (size_t j = 0; fits && j < p->u.seq.n; j++, n++) {
            if (p->u.seq.v[j]->kind != PK_INT) {
                free(sizes);
                return ct_fail(r->err, "--resume %s: its optimizer's param group %d lists %s, not a param id", r->path,
                               g, pk_kind_name(p->u.seq.v[j]));
            }
            ids[n] = (IdPos){p->u.seq.v[j]->u.i, n};
        }
    }
    if (!fits) {
        char have[128], want[128];
        sizes_text(have, sizeof have, sizes, ng);
        sizes_text(want, sizeof want, L->gsize, L->ngroups);
        free(sizes);
        return ct_fail(r->err, "--resume %s: its optimizer has %s, --opt %s here %s (another model, --weight-decay or "
                       "--layer-decay?)" WEIGHTS_ONLY, r->path, have, L->opt, want);
    }
    free(sizes);
    qsort(ids, (size_t)n, sizeof *ids, by_id);
    for (int k = 1; k < n; k++)
        if (ids[k].id == ids[k - 1].id)
            return ct_fail(r->err, "--resume %s: its optimizer lists param id %lld twice", r->path,
                           (long long)ids[k].id);
    return 0;
}

/* One more count of steps (`what` names it), which must be the same as the others. */
static int agree(Rs *r, Step *st, double v, const char *what)
{
    if (!(v >= 0 && v == floor(v) && v < 9e15))
        return ct_fail(r->err, "--resume %s: %s is %g, not a step count", r->path, what, v);
    if (st->have && st->v != v)
        return ct_fail(r->err, "--resume %s: its optimizer's params are at steps %g and %g (%s); ctimm keeps one step "
                       "for all" WEIGHTS_ONLY, r->path, st->v, v, what);
    st->v = v;
    st->have = 1;
    return 0;
}

/* Slot value v of a param into state entry i: a tensor of the entry's
 * shape and dtype, or for a scalar entry (NAdam's mu_product) a number. */
static int load_slot(Rs *r, int i, const PkValue *v, const char *what)
{
    StateEntry *e = &r->s->e[i];
    if (e->type.shape.ndim == 0 && v->kind != PK_TENSOR) {
        double x;
        return number(r, v, what, &x) || elems_from_double(&x, e->type.dtype, 1, state_data(r->s, i)) ? -1 : 0;
    }
    if (v->kind != PK_TENSOR)
        return ct_fail(r->err, "--resume %s: %s is %s, not a tensor" WEIGHTS_ONLY, r->path, what, pk_kind_name(v));
    StTensor t;
    if (torch_tensor(r->f, v, what, &t, r->err))
        return ct_failctx(r->err, "--resume");
    CtShape ts = shape_make(t.ndim, t.shape);
    char a[96], b[96];
    int rc = 0;
    if (!shape_equal(&ts, &e->type.shape) || t.dtype != e->type.dtype)
        rc = ct_fail(r->err, "--resume %s: %s is %s %s, the run's %s %s: the optimizer does not fit" WEIGHTS_ONLY,
                     r->path, what, ct_dtype_st_name(t.dtype), shape_str(&ts, a, sizeof a),
                     ct_dtype_st_name(e->type.dtype), shape_str(&e->type.shape, b, sizeof b));
    else
        memcpy(state_data(r->s, i), t.data, t.nbytes);
    free(t.name);
    free(t.data);
    return rc;
}

/* The state torch keeps of the param at state entry p (id in messages). */
static int load_param(Rs *r, const Layout *L, int p, int64_t id, const PkValue *st, Step *step)
{
    const char *pname = r->s->e[p].name;
    char what[700], name[600];
    if (st->kind != PK_DICT)
        return ct_fail(r->err, "--resume %s: its optimizer state of param %lld is %s, not a dict", r->path,
                       (long long)id, pk_kind_name(st));
    int nslots = L->u.nslot + L->u.nscalar, found = 0;
    for (size_t k = 0; k + 1 < st->u.seq.n; k += 2) {
        const char *key = str_of(st->u.seq.v[k]);
        const PkValue *v = st->u.seq.v[k + 1];
        snprintf(what, sizeof what, "the optimizer's '%s' of param %lld ('%s')", key ? key : "?", (long long)id, pname);
        if (key && !strcmp(key, "step")) {
            double x;
            if (number(r, v, what, &x) || agree(r, step, x, what))
                return -1;
            continue;
        }
        /* LaProp's lr averages: the first is ctimm's state beside the
         * slots, the second (1 - beta2^step) ctimm derives from the step */
        if (key && L->u.lr_avg && !strcmp(key, "exp_avg_lr_2"))
            continue;
        int lr_avg = key && L->u.lr_avg && !strcmp(key, "exp_avg_lr_1");
        /* Adan keeps the previous gradient negated */
        int negate = key && L->u.op == CT_OP_adan_update && !strcmp(key, "neg_pre_grad");
        const char *slot = negate ? "pre_grad" : key;
        int j = 0;
        while (slot && !lr_avg && j < nslots &&
               strcmp(slot, j < L->u.nslot ? L->u.slot[j] : L->u.scalar[j - L->u.nslot]))
            j++;
        if (!key || j == nslots)
            return ct_fail(r->err, "--resume %s: its optimizer keeps '%.40s' per param, which --opt %s has no place "
                           "for (another optimizer?)" WEIGHTS_ONLY, r->path, key ? key : "(not a str)", L->opt);
        if (v->kind == PK_NONE) /* torch's SGD without momentum */
            continue;
        snprintf(name, sizeof name, "optim.%s.%s", pname, slot);
        int i = state_find(r->s, name);
        CT_ASSERT(i >= 0);
        if (load_slot(r, i, v, what))
            return -1;
        float *x = state_data(r->s, i);
        for (int64_t e = 0, n = negate ? shape_numel(&r->s->e[i].type.shape) : 0; e < n; e++)
            x[e] = -x[e];
        if (!lr_avg)
            found |= 1 << j;
    }
    for (int j = 0; j < nslots; j++) {
        const char *slot = j < L->u.nslot ? L->u.slot[j] : L->u.scalar[j - L->u.nslot];
        if (!(found >> j & 1) && strcmp(slot, "momentum_buffer")) /* torch keeps none without momentum */
            return ct_fail(r->err, "--resume %s: its optimizer has no '%s' for param %lld ('%s'): not the state of "
                           "--opt %s" WEIGHTS_ONLY, r->path, slot, (long long)id, pname, L->opt);
    }
    return 0;
}

/* The first param group's lr, its lr_scale (--layer-decay) undone: what a
 * plateau schedule goes on from (timm's keeps the optimizer's lr). */
static int group_lr(Rs *r, const PkValue *groups, double *lr)
{
    const PkValue *g = groups->u.seq.n ? groups->u.seq.v[0] : NULL, *v = g ? pk_dict_get(g, "lr") : NULL;
    const PkValue *sc = g ? pk_dict_get(g, "lr_scale") : NULL;
    double scale = 1;
    if (!v)
        return 0;
    if (number(r, v, "the optimizer's 'lr'", lr) || (sc && number(r, sc, "the optimizer's 'lr_scale'", &scale)))
        return -1;
    if (scale > 0)
        *lr /= scale;
    return 0;
}

/* 'optimizer' (when the file has one, as timm's resume_checkpoint) into the
 * run's optimizer state. */
static int load_optimizer(Rs *r, const PkValue *root, const ResumeOptim *o, Resumed *out)
{
    const PkValue *opt = pk_dict_get(root, "optimizer");
    if (!opt || opt->kind == PK_NONE)
        return 0;
    const PkValue *groups = pk_dict_get(opt, "param_groups"), *state = pk_dict_get(opt, "state");
    if (opt->kind != PK_DICT || !state || state->kind != PK_DICT)
        return ct_fail(r->err, "--resume %s: its 'optimizer' is not an optimizer's state_dict ('state' and "
                       "'param_groups')", r->path);
    if (check_kind(r, root, o->opt))
        return -1;
    OptimSpec spec;
    CT_ASSERT(optim_defaults(o->opt, &spec) == 0);
    /* their slots differ per param (Adafactor's factored or not, Muon's or
     * its AdamW fallback's), timm keeps 'RMS', 'use_muon' and big_vision's
     * momentum in bfloat16: not read yet */
    if (spec.kind == CT_OPT_ADAFACTOR || spec.kind == CT_OPT_ADAFACTORBV || spec.kind == CT_OPT_MUON)
        return ct_fail(r->err, "--resume %s: reading torch's --opt %s state is not implemented" WEIGHTS_ONLY, r->path,
                       o->opt);
    Layout L;
    build_layout(r->s, o, &L);
    IdPos *ids = calloc((size_t)L.n + 1, sizeof *ids);
    CT_ASSERT(ids != NULL);
    Step step = {0};
    int rc = fit_groups(r, groups, &L, ids);
    for (size_t k = 0; !rc && k + 1 < state->u.seq.n; k += 2) {
        const PkValue *key = state->u.seq.v[k];
        IdPos want = {key->kind == PK_INT ? key->u.i : 0, 0};
        const IdPos *at = key->kind == PK_INT && L.n ? bsearch(&want, ids, (size_t)L.n, sizeof *ids, by_id) : NULL;
        if (!at)
            rc = ct_fail(r->err, "--resume %s: its optimizer has state for param %s%lld, which no param group lists",
                         r->path, key->kind == PK_INT ? "" : "(not an int) ", (long long)want.id);
        else
            rc = load_param(r, &L, L.order[at->pos], want.id, state->u.seq.v[k + 1], &step);
    }
    for (size_t g = 0; !rc && g < groups->u.seq.n; g++) { /* timm's Lamb counts steps per group */
        const PkValue *v = pk_dict_get(groups->u.seq.v[g], "step");
        double x;
        if (v && v->kind != PK_NONE)
            rc = number(r, v, "a param group's 'step'", &x) || agree(r, &step, x, "a param group's 'step'");
    }
    int at = state_find(r->s, "optim.step");
    if (!rc && L.u.step && state->u.seq.n && !step.have)
        rc = ct_fail(r->err, "--resume %s: its optimizer keeps no 'step': not the state of --opt %s" WEIGHTS_ONLY,
                     r->path, o->opt);
    if (!rc && at >= 0)
        *(int64_t *)state_data(r->s, at) = step.have ? (int64_t)step.v : 0;
    if (!rc)
        rc = group_lr(r, groups, &out->opt_lr);
    free(ids);
    free_layout(&L);
    return rc;
}

int resume_torch(const char *path, CtState *s, const char *model, const ResumeOptim *opt, Resumed *out, CtErr *err)
{
    memset(out, 0, sizeof *out);
    out->batches_done = -1;
    out->opt_lr = NAN;
    out->scaler = scaler_default();
    Rs r = {.path = path, .s = s, .err = err};
    if (torch_open(path, &r.f, err))
        return ct_failctx(err, "--resume");
    const PkValue *root = torch_root(r.f);
    int rc = check_arch(&r, root, model) || load_weights(&r) || load_ema(&r, &out->ema_missing) ||
             done_epoch(&r, root, &out->epoch) || (opt && (load_optimizer(&r, root, opt, out) ||
                                                           read_scaler(&r, root, out)));
    torch_close(r.f);
    return rc ? -1 : 0;
}
