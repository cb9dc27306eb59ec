/* Contract: train_step_build(g, logits) appends loss, backward and the optimizer
 * update (with assign nodes) to a training-mode forward graph and leaves it
 * verified. */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/emit.h"
#include "passes/autodiff.h"
#include "passes/schedule.h"

int optim_no_decay(const char *name, int ndim, const char *const *patterns)
{
    size_t len = strlen(name);
    if (ndim <= 1 || (len >= 5 && strcmp(name + len - 5, ".bias") == 0))
        return 1;
    for (int i = 0; patterns && patterns[i]; i++)
        if (fnmatch(patterns[i], name, 0) == 0)
            return 1;
    return 0;
}

static ValueId add_input(Graph *g, const char *name, CtShape shape, CtDType dt)
{
    return graph_add_value(g, (CtType){shape, dt}, CT_ROLE_INPUT, name);
}

/* An optimizer-state tensor "optim.<param>.<what>" of type t, starting at
 * `init` (0 or 1). */
static ValueId add_slot(Graph *g, const Value *p, CtType t, const char *what, double init, ValueId *state,
                        int *nstate)
{
    char name[600];
    snprintf(name, sizeof name, "optim.%s.%s", p->name, what);
    ValueId v = graph_add_value(g, t, CT_ROLE_STATE, name);
    g->values[v].init = (CtInit){.kind = init == 1 ? CT_INIT_ONES : CT_INIT_ZEROS, .a = 0};
    state[(*nstate)++] = v;
    return v;
}

const char optim_names[] = "sgd, momentum, sgdw, sgdc, adam, adamw, adamwlegacy, adamc, nadam, nadamlegacy, "
                           "nadamw, nadamc, radam, adamax, adopt, adoptw, adoptc, lamb, lambc, lambw, lambcw, lambcd, "
                           "lars, larc, nlars, nlarc, rmsprop, rmsproptf, rmsproptfc, adabelief, adagrad, lion, lionc, "
                           "madgrad, madgradw, adan, adanw, laprop, lapropc, sgdp, adamp, adafactor, adafactorbv, "
                           "adafactorbvc, muon, cadamw, cadamc, cnadamw, cnadamc, cadopt, cadoptw, cadoptc, clion, "
                           "clionc, csgdw, csgdc, crmsproptf, cadan, cadanw, claprop";

int optim_defaults(const char *name, OptimSpec *o)
{
    static const struct {
        const char *name;
        OptimSpec spec;
    } table[] = {
        {"sgd", {.kind = CT_OPT_SGD, .momentum = 0.9}},
        {"nesterov", {.kind = CT_OPT_SGD, .momentum = 0.9}},
        {"momentum", {.kind = CT_OPT_MOMENTUM, .momentum = 0.9}},
        {"adam", {.kind = CT_OPT_ADAM, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
        {"adamw", {.kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
        {"nadam", {.kind = CT_OPT_NADAM, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
        {"radam", {.kind = CT_OPT_RADAM, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
        {"lamb", {.kind = CT_OPT_LAMB, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .max_grad_norm = 1}},
        {"lambc", {.kind = CT_OPT_LAMB, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .max_grad_norm = 1, .trust_clip = 1}},
        {"lambw", {.kind = CT_OPT_LAMB, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .max_grad_norm = 1,
                   .decoupled_decay = 1}},
        {"lambcw", {.kind = CT_OPT_LAMB, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .max_grad_norm = 1,
                    .trust_clip = 1, .decoupled_decay = 1}},
        {"lambcd", {.kind = CT_OPT_LAMB, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .max_grad_norm = 1,
                    .decoupled_decay = 1, .corrected = 1}},
        {"lars", {.kind = CT_OPT_LARS, .momentum = 0.9, .trust_coeff = 1e-3, .eps = 1e-8}},
        {"larc", {.kind = CT_OPT_LARS, .momentum = 0.9, .trust_coeff = 1e-3, .eps = 1e-8, .trust_clip = 1}},
        {"nlars", {.kind = CT_OPT_LARS, .momentum = 0.9, .trust_coeff = 1e-3, .eps = 1e-8, .nesterov = 1}},
        {"nlarc", {.kind = CT_OPT_LARS, .momentum = 0.9, .trust_coeff = 1e-3, .eps = 1e-8, .trust_clip = 1,
                   .nesterov = 1}},
        {"rmsprop", {.kind = CT_OPT_RMSPROP, .momentum = 0.9, .alpha = 0.9, .eps = 1e-8}},
        {"rmsproptf", {.kind = CT_OPT_RMSPROPTF, .momentum = 0.9, .alpha = 0.9, .eps = 1e-10}},
        {"rmsproptfc", {.kind = CT_OPT_RMSPROPTF, .momentum = 0.9, .alpha = 0.9, .eps = 1e-10, .decoupled = 1,
                        .corrected = 1}},
        {"crmsproptf", {.kind = CT_OPT_RMSPROPTF, .momentum = 0.9, .alpha = 0.9, .eps = 1e-10, .caution = 1}},
        {"adabelief", {.kind = CT_OPT_ADABELIEF, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-16}},
        {"adagrad", {.kind = CT_OPT_ADAGRAD, .eps = 1e-8}},
        {"sgdw", {.kind = CT_OPT_SGD, .momentum = 0.9, .decoupled = 1}},
        {"sgdc", {.kind = CT_OPT_SGD, .momentum = 0.9, .decoupled = 1, .corrected = 1}},
        {"csgdw", {.kind = CT_OPT_SGD, .momentum = 0.9, .decoupled = 1, .caution = 1}},
        {"csgdc", {.kind = CT_OPT_SGD, .momentum = 0.9, .decoupled = 1, .corrected = 1, .caution = 1}},
        /* timm's AdamWLegacy and NAdamLegacy: torch AdamW's rule and torch >= 2.0 NAdam's */
        {"adamwlegacy", {.kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
        {"adamc", {.kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .corrected = 1}},
        {"cadamw", {.kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .caution = 1}},
        {"cadamc", {.kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .corrected = 1, .caution = 1}},
        {"nadamlegacy", {.kind = CT_OPT_NADAM, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
        {"nadamw", {.kind = CT_OPT_NADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
        {"nadamc", {.kind = CT_OPT_NADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .corrected = 1}},
        {"cnadamw", {.kind = CT_OPT_NADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .caution = 1}},
        {"cnadamc", {.kind = CT_OPT_NADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .corrected = 1, .caution = 1}},
        {"adamax", {.kind = CT_OPT_ADAMAX, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
        {"adopt", {.kind = CT_OPT_ADOPT, .beta1 = 0.9, .beta2 = 0.9999, .eps = 1e-6, .clip_exp = 0.333}},
        {"adoptw", {.kind = CT_OPT_ADOPT, .beta1 = 0.9, .beta2 = 0.9999, .eps = 1e-6, .clip_exp = 0.333, .decoupled = 1}},
        {"adoptc", {.kind = CT_OPT_ADOPT, .beta1 = 0.9, .beta2 = 0.9999, .eps = 1e-6, .clip_exp = 0.333, .decoupled = 1,
                    .corrected = 1}},
        {"cadopt", {.kind = CT_OPT_ADOPT, .beta1 = 0.9, .beta2 = 0.9999, .eps = 1e-6, .clip_exp = 0.333, .caution = 1}},
        {"cadoptw", {.kind = CT_OPT_ADOPT, .beta1 = 0.9, .beta2 = 0.9999, .eps = 1e-6, .clip_exp = 0.333,
                     .decoupled = 1, .caution = 1}},
        {"cadoptc", {.kind = CT_OPT_ADOPT, .beta1 = 0.9, .beta2 = 0.9999, .eps = 1e-6, .clip_exp = 0.333,
                     .decoupled = 1, .corrected = 1, .caution = 1}},
        {"lion", {.kind = CT_OPT_LION, .beta1 = 0.9, .beta2 = 0.99}},
        {"lionc", {.kind = CT_OPT_LION, .beta1 = 0.9, .beta2 = 0.99, .corrected = 1}},
        {"clion", {.kind = CT_OPT_LION, .beta1 = 0.9, .beta2 = 0.99, .caution = 1}},
        {"clionc", {.kind = CT_OPT_LION, .beta1 = 0.9, .beta2 = 0.99, .corrected = 1, .caution = 1}},
        {"madgrad", {.kind = CT_OPT_MADGRAD, .momentum = 0.9, .eps = 1e-6}},
        {"madgradw", {.kind = CT_OPT_MADGRAD, .momentum = 0.9, .eps = 1e-6, .decoupled = 1}},
        {"adan", {.kind = CT_OPT_ADAN, .beta1 = 0.98, .beta2 = 0.92, .beta3 = 0.99, .eps = 1e-8}},
        {"adanw", {.kind = CT_OPT_ADAN, .beta1 = 0.98, .beta2 = 0.92, .beta3 = 0.99, .eps = 1e-8, .decoupled = 1}},
        {"cadan", {.kind = CT_OPT_ADAN, .beta1 = 0.98, .beta2 = 0.92, .beta3 = 0.99, .eps = 1e-8, .caution = 1}},
        {"cadanw", {.kind = CT_OPT_ADAN, .beta1 = 0.98, .beta2 = 0.92, .beta3 = 0.99, .eps = 1e-8, .decoupled = 1,
                    .caution = 1}},
        {"laprop", {.kind = CT_OPT_LAPROP, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-15}},
        {"claprop", {.kind = CT_OPT_LAPROP, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-15, .caution = 1}},
        {"lapropc", {.kind = CT_OPT_LAPROP, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-15, .corrected = 1}},
        {"sgdp", {.kind = CT_OPT_SGDP, .momentum = 0.9, .nesterov = 1, .eps = 1e-8, .delta = 0.1, .wd_ratio = 0.1}},
        {"adamp", {.kind = CT_OPT_ADAMP, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .nesterov = 1, .delta = 0.1,
                   .wd_ratio = 0.01}},
        /* beta1 0: timm's betas None, no first moment (an lr is always given:
         * relative_step off, so scale_parameter and warmup_init do nothing) */
        {"adafactor", {.kind = CT_OPT_ADAFACTOR, .eps = 1e-30, .clip_threshold = 1, .decay_rate = -0.8,
                       .min_dim_size_to_factor = 16}},
        {"adafactorbv", {.kind = CT_OPT_ADAFACTORBV, .momentum = 0.9, .decay_rate = 0.8, .beta2_cap = 0.999,
                         .min_dim_size_to_factor = 16}},
        {"adafactorbvc", {.kind = CT_OPT_ADAFACTORBV, .momentum = 0.9, .decay_rate = 0.8, .beta2_cap = 0.999,
                          .min_dim_size_to_factor = 16, .corrected = 1}},
        {"muon", {.kind = CT_OPT_MUON, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-7, .ns_steps = 5,
                  .ns_preset = 1, .safety_factor = 1, .adjust_lr = CT_MUON_ADJUST_MATCH_RMS_ADAMW,
                  .fallback_lr_scale = 1}},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, name) == 0) {
            *o = table[i].spec;
            return 0;
        }
    return -1;
}

/* Adafactor's factored dims of a param of shape s (*dc, *dr; -1 when not
 * factored): timm's Adafactor._get_options, or with bv big_vision's
 * _factored_dims (the two largest dims, the second at least min). */
static void factored_dims(const CtShape *s, int bv, int min, int *dc, int *dr)
{
    const int64_t *d = s ? s->d : NULL;
    int nd = s ? s->ndim : 0;
    *dc = *dr = -1;
    if (!bv) {
        if (nd > 2 && d[0] > min && d[1] > min)
            *dc = 0, *dr = 1;
        else if (nd >= 2 && d[nd - 2] > min && d[nd - 1] > min)
            *dc = nd - 2, *dr = nd - 1;
        return;
    }
    if (nd < 2)
        return;
    int big = 0, next = -1; /* python's sorted((size, index)): a later index wins a tie */
    for (int k = 1; k < nd; k++)
        if (d[k] >= d[big])
            big = k;
    for (int k = 0; k < nd; k++)
        if (k != big && (next < 0 || d[k] >= d[next]))
            next = k;
    if (d[next] >= min)
        *dc = next, *dr = big;
}

/* Both Adafactors' slots: the second moments (factored or not), then the
 * momentum when has_m. */
static void adafactor_slots(OptimOp *u, int bv, int dc, int dr, int has_m)
{
    u->nslot = 0;
    if (dc >= 0) {
        u->slot[0] = bv ? "exp_avg_sq_r" : "exp_avg_sq_row", u->slot_reduce[0] = dr + 1;
        u->slot[1] = bv ? "exp_avg_sq_c" : "exp_avg_sq_col", u->slot_reduce[1] = dc + 1;
        u->nslot = 2;
    } else {
        u->slot[u->nslot++] = "exp_avg_sq";
    }
    if (has_m)
        u->slot[u->nslot++] = "exp_avg";
    u->slot_keepdim = bv;
}

CtShape optim_slot_shape(const OptimOp *u, int k, const CtShape *p)
{
    CtShape s = *p;
    int d = u->slot_reduce[k] - 1;
    if (d < 0)
        return s;
    if (u->slot_keepdim) {
        s.d[d] = 1;
        return s;
    }
    for (int i = d; i + 1 < s.ndim; i++)
        s.d[i] = s.d[i + 1];
    s.ndim--;
    return s;
}

/* timm's _is_suitable_for_muon: >= 2 dims of which two exceed 1, the
 * first two not 1, and the [out, rest] view neither below 4 nor more
 * than 128 times wider than tall (or taller than wide). */
static int muon_suitable(const CtShape *s)
{
    int big = 0;
    for (int k = 0; s && k < s->ndim; k++)
        big += s->d[k] > 1;
    if (!s || s->ndim < 2 || big < 2 || s->d[0] == 1 || s->d[1] == 1)
        return 0;
    double out = (double)s->d[0], in = (double)shape_numel(s) / out, lo = fmin(out, in), hi = fmax(out, in);
    return lo >= 4 && hi / lo <= 128;
}

/* get_lr_scale of the flattened [out, in] */
static double muon_lr_scale(const CtShape *s, CtMuonAdjust a)
{
    double out = (double)s->d[0], in = (double)shape_numel(s) / out;
    switch (a) {
    case CT_MUON_ADJUST_NONE: break;
    case CT_MUON_ADJUST_ORIGINAL: return sqrt(fmax(1, out / in));
    case CT_MUON_ADJUST_MATCH_RMS_ADAMW: return 0.2 * sqrt(fmax(out, in));
    case CT_MUON_ADJUST_RMS_TO_RMS: return sqrt(out / in);
    }
    return 1;
}

void optim_op(const OptimSpec *o, double wd, OptimOp *u) { optim_param_op(o, wd, NULL, u); }

void optim_param_op(const OptimSpec *o, double wd, const CtShape *shape, OptimOp *u)
{
    CtOptKind k = o->kind;
    int dc, dr;
    double max_lr = o->corrected ? o->max_lr : 0;
    *u = (OptimOp){.nfattr = 4, .nslot = 2, .slot = {"exp_avg", "exp_avg_sq"}, .step = 1};
    switch (k) {
    case CT_OPT_NONE:
    case CT_OPT_SGD:
    case CT_OPT_MOMENTUM:
        /* timm's SGDW cautions its momentum's direction; with no momentum, none */
        *u = (OptimOp){.op = CT_OP_sgd_update, .iattr = {k == CT_OPT_SGD, o->decoupled, 0}, .niattr = 3,
                       .fattr = {o->momentum, wd, max_lr}, .nfattr = 3, .nslot = 1, .slot = {"momentum_buffer"},
                       .caution = o->caution && o->decoupled && o->momentum != 0};
        u->iattr[2] = u->caution ? 2 : 0;
        break;
    case CT_OPT_ADAMW:
    case CT_OPT_ADAM:
    case CT_OPT_RADAM:
    case CT_OPT_ADABELIEF:
        u->op = CT_OP_adamw_update;
        u->iattr[0] = k == CT_OPT_ADAMW ? 0 : k == CT_OPT_ADAM ? 1 : k == CT_OPT_RADAM ? 2 : 3;
        u->niattr = 1;
        u->fattr[0] = o->beta1, u->fattr[1] = o->beta2, u->fattr[2] = o->eps, u->fattr[3] = wd;
        u->fattr[4] = max_lr, u->nfattr = 5;
        u->caution = k == CT_OPT_ADAMW && o->caution, u->iattr[1] = u->caution ? 2 : 0, u->niattr = 2;
        if (k == CT_OPT_ADABELIEF)
            u->slot[1] = "exp_avg_var";
        break;
    case CT_OPT_NADAM:
        u->op = CT_OP_nadam_update;
        u->iattr[0] = o->nadam_legacy, u->niattr = 1;
        u->fattr[0] = o->beta1, u->fattr[1] = o->beta2, u->fattr[2] = o->eps, u->fattr[3] = wd;
        u->nscalar = 1, u->scalar[0] = "mu_product", u->scalar_init[0] = 1;
        break;
    case CT_OPT_LAMB:
        u->op = CT_OP_lamb_update;
        u->clip = o->max_grad_norm > 0;
        u->iattr[0] = o->trust_clip, u->iattr[1] = o->always_adapt, u->iattr[2] = u->clip;
        u->iattr[3] = o->decoupled_decay, u->niattr = 4;
        u->fattr[0] = o->beta1, u->fattr[1] = o->beta2, u->fattr[2] = o->eps, u->fattr[3] = wd;
        u->fattr[4] = o->decoupled_decay ? max_lr : 0, u->nfattr = 5; /* timm's max_lr None without it */
        break;
    case CT_OPT_LARS:
        *u = (OptimOp){.op = CT_OP_lars_update, .iattr = {o->nesterov, o->trust_clip, o->always_adapt},
                       .niattr = 3, .fattr = {o->momentum, wd, o->trust_coeff, o->eps}, .nfattr = 4, .nslot = 1,
                       .slot = {"momentum_buffer"}};
        break;
    case CT_OPT_RMSPROP:
    case CT_OPT_RMSPROPTF:
        /* RMSpropTF cautions its momentum buffer; with no momentum, none */
        *u = (OptimOp){.op = CT_OP_rmsprop_update, .iattr = {k == CT_OPT_RMSPROPTF, o->decoupled}, .niattr = 3,
                       .fattr = {o->alpha, o->eps, wd, o->momentum, max_lr}, .nfattr = 5, .nslot = 2,
                       .slot = {"square_avg", "momentum_buffer"}, .slot_init = {k == CT_OPT_RMSPROPTF, 0},
                       .caution = o->caution && k == CT_OPT_RMSPROPTF && o->momentum > 0};
        u->iattr[2] = u->caution ? 2 : 0;
        break;
    case CT_OPT_ADAGRAD:
        *u = (OptimOp){.op = CT_OP_adagrad_update, .fattr = {o->eps, wd}, .nfattr = 2, .nslot = 1, .slot = {"sum"}};
        break;
    case CT_OPT_LION:
        *u = (OptimOp){.op = CT_OP_lion_update, .iattr = {o->caution ? 2 : 0}, .niattr = 1,
                       .fattr = {o->beta1, o->beta2, wd, max_lr}, .nfattr = 4, .nslot = 1, .slot = {"exp_avg"},
                       .caution = o->caution};
        break;
    case CT_OPT_NADAMW:
    case CT_OPT_ADAMAX:
    case CT_OPT_ADOPT:
    case CT_OPT_LAPROP:
        u->op = CT_OP_adamx_update;
        u->iattr[0] = k == CT_OPT_NADAMW ? 0 : k == CT_OPT_ADAMAX ? 1 : k == CT_OPT_LAPROP ? 4 : o->decoupled ? 3 : 2;
        u->lr_avg = k == CT_OPT_LAPROP;
        u->caution = o->caution && k != CT_OPT_ADAMAX;
        u->iattr[1] = o->no_clip, u->iattr[2] = u->caution ? 2 : 0, u->niattr = 3;
        u->fattr[0] = o->beta1, u->fattr[1] = o->beta2, u->fattr[2] = o->eps, u->fattr[3] = wd;
        u->fattr[4] = o->clip_exp, u->fattr[5] = max_lr, u->nfattr = 6;
        if (k == CT_OPT_ADAMAX)
            u->slot[1] = "exp_inf";
        break;
    case CT_OPT_MADGRAD:
        *u = (OptimOp){.op = CT_OP_madgrad_update, .iattr = {o->decoupled}, .niattr = 1,
                       .fattr = {o->momentum, wd, o->eps}, .nfattr = 3, .nslot = 3, .slot = {"grad_sum_sq", "s", "x0"},
                       .step = 1};
        break;
    case CT_OPT_ADAN:
        *u = (OptimOp){.op = CT_OP_adan_update, .iattr = {o->decoupled, o->caution ? 2 : 0}, .niattr = 2,
                       .fattr = {o->beta1, o->beta2, o->beta3, o->eps, wd}, .nfattr = 5, .nslot = 4,
                       .slot = {"exp_avg", "exp_avg_diff", "exp_avg_sq", "pre_grad"}, .step = 1,
                       .caution = o->caution};
        break;
    case CT_OPT_SGDP:
        *u = (OptimOp){.op = CT_OP_sgdp_update, .iattr = {o->nesterov}, .niattr = 1,
                       .fattr = {o->momentum, wd, o->delta, o->wd_ratio, o->eps}, .nfattr = 5, .nslot = 1,
                       .slot = {"momentum"}};
        break;
    case CT_OPT_ADAMP:
        *u = (OptimOp){.op = CT_OP_adamp_update, .iattr = {o->nesterov}, .niattr = 1,
                       .fattr = {o->beta1, o->beta2, o->eps, wd, o->delta, o->wd_ratio}, .nfattr = 6, .nslot = 2,
                       .slot = {"exp_avg", "exp_avg_sq"}, .step = 1};
        break;
    case CT_OPT_ADAFACTOR:
        factored_dims(shape, 0, o->min_dim_size_to_factor, &dc, &dr);
        *u = (OptimOp){.op = CT_OP_adafactor_update, .iattr = {dc, dr, o->beta1 != 0}, .niattr = 3,
                       .fattr = {o->eps, o->clip_threshold, o->decay_rate, o->beta1, wd}, .nfattr = 5, .step = 1};
        adafactor_slots(u, 0, dc, dr, o->beta1 != 0);
        break;
    case CT_OPT_ADAFACTORBV:
        factored_dims(shape, 1, o->min_dim_size_to_factor, &dc, &dr);
        *u = (OptimOp){.op = CT_OP_adafactorbv_update,
                       .iattr = {dc, dr, o->momentum != 0, !o->momentum_f32, o->unscaled_wd, o->decay_offset},
                       .niattr = 6, .nfattr = 7, .step = 1,
                       .fattr = {o->eps > 0 ? o->eps : 1e-30, o->clip_threshold, o->decay_rate, o->momentum, wd,
                                 o->beta2_cap, max_lr}};
        adafactor_slots(u, 1, dc, dr, o->momentum != 0);
        break;
    case CT_OPT_MUON:
        if (!muon_suitable(shape)) { /* timm's AdamW fallback */
            u->op = CT_OP_adamw_update, u->niattr = 1;
            u->fattr[0] = o->beta1, u->fattr[1] = o->beta2, u->fattr[2] = o->eps, u->fattr[3] = wd;
            u->lr_mul = o->fallback_lr_scale;
            break;
        }
        *u = (OptimOp){.op = CT_OP_muon_update, .iattr = {o->nesterov, o->ns_steps, o->ns_preset}, .niattr = 3,
                       .fattr = {o->momentum, wd, o->eps, o->safety_factor, muon_lr_scale(shape, o->adjust_lr)},
                       .nfattr = 5, .nslot = 1, .slot = {"momentum_buffer"}};
        break;
    }
}

static ValueId add_loss(Emitter *e, ValueId logits, ValueId target, const LossSpec *l)
{
    ValueId in[2] = {logits, target};
    switch (l->kind) {
    case CT_LOSS_CROSS_ENTROPY: return emit(e, CT_OP_cross_entropy, 2, in, NULL, 0, &l->smoothing, 1, 0);
    case CT_LOSS_SOFT_TARGET: return emit(e, CT_OP_soft_target_cross_entropy, 2, in, NULL, 0, NULL, 0, 0);
    case CT_LOSS_JSD:
        return emit(e, CT_OP_jsd_cross_entropy, 2, in, (int64_t[]){l->num_splits}, 1, (double[]){l->smoothing, 12}, 2,
                    0);
    case CT_LOSS_BCE:
        return emit(e, CT_OP_binary_cross_entropy, 2, in, (int64_t[]){l->bce_sum}, 1,
                    (double[]){l->smoothing, l->bce_threshold, l->bce_pos_weight}, 3, 0);
    }
    return emit_fail(e, "unknown loss kind %d", (int)l->kind);
}

ValueId optim_caution_mean(Emitter *e, const OptimOp *u, const ValueId *in, int nin)
{
    int64_t iattr[6];
    memcpy(iattr, u->iattr, sizeof iattr);
    int at = u->op == CT_OP_lion_update ? 0 : u->op == CT_OP_adamw_update || u->op == CT_OP_adan_update ? 1 : 2;
    iattr[at] = 1; /* ir/ops/optim.c's caution */
    ValueId mask = emit(e, u->op, nin, in, iattr, u->niattr, u->fattr, u->nfattr, 0);
    CtShape s = emit_shape(e, mask);
    ValueId sum = s.ndim ? emit(e, CT_OP_reduce_sum, 1, &mask, (int64_t[]){((int64_t)1 << s.ndim) - 1, 0}, 2, NULL,
                                0, 0)
                         : mask;
    ValueId mean = emit(e, CT_OP_scale_shift, 1, &sum, NULL, 0, (double[]){1.0 / (double)shape_numel(&s), 0}, 2, 0);
    return emit(e, CT_OP_clamp, 1, &mean, NULL, 0, (double[]){1e-3, INFINITY}, 2, 0);
}

/* The update of param p and its assign nodes; clip: LAMB's clip input or -1.
 * Returns p's new value. */
static ValueId add_update(Emitter *e, ValueId p, ValueId grad, ValueId lr, ValueId step, ValueId clip, ValueId apply,
                       const OptimSpec *o, ValueId *state, int *nstate)
{
    Graph *g = e->g;
    Value pv = g->values[p];
    OptimOp u;
    double wd = optim_no_decay(pv.name, pv.type.shape.ndim, o->no_weight_decay) ? 0 : o->weight_decay;
    optim_param_op(o, wd, &pv.type.shape, &u);
    ValueId in[CT_MAX_IN], st[5];
    int nin = 0, ns = 0;
    in[nin++] = p;
    in[nin++] = grad;
    for (int k = 0; k < u.nslot; k++) {
        CtType t = {optim_slot_shape(&u, k, &pv.type.shape), pv.type.dtype};
        in[nin++] = st[ns++] = add_slot(g, &pv, t, u.slot[k], u.slot_init[k], state, nstate);
    }
    for (int k = 0; k < u.nscalar; k++)
        in[nin++] = st[ns++] = add_slot(g, &pv, (CtType){{0}, CT_F32}, u.scalar[k], u.scalar_init[k], state, nstate);
    in[nin++] = u.lr_mul && u.lr_mul != 1 ? emit(e, CT_OP_scale_shift, 1, &lr, NULL, 0, (double[]){u.lr_mul, 0}, 2, 0)
                                           : lr;
    if (u.step)
        in[nin++] = step;
    if (u.clip)
        in[nin++] = clip;
    if (u.lr_avg) {
        ValueId avg = add_slot(g, &pv, (CtType){{0}, CT_F32}, "exp_avg_lr_1", 0, state, nstate);
        double b1 = u.fattr[0];
        ValueId next = emit(e, CT_OP_add, 2,
                            (ValueId[]){emit(e, CT_OP_scale_shift, 1, &avg, NULL, 0, (double[]){b1, 0}, 2, 0),
                                        emit(e, CT_OP_scale_shift, 1, &lr, NULL, 0, (double[]){1 - b1, 0}, 2, 0)},
                            NULL, 0, NULL, 0, 0);
        if (apply >= 0) { /* avg + apply (next - avg): avg itself on a skipped step */
            ValueId back = emit(e, CT_OP_scale_shift, 1, &avg, NULL, 0, (double[]){-1, 0}, 2, 0);
            ValueId d = emit(e, CT_OP_add, 2, (ValueId[]){next, back}, NULL, 0, NULL, 0, 0);
            next = emit(e, CT_OP_add, 2, (ValueId[]){avg, emit(e, CT_OP_mul, 2, (ValueId[]){d, apply}, NULL, 0, NULL,
                                                               0, 0)}, NULL, 0, NULL, 0, 0);
        }
        emit(e, CT_OP_assign, 2, (ValueId[]){avg, next}, NULL, 0, NULL, 0, 0);
        in[nin++] = next;
    }
    if (u.caution)
        in[nin] = optim_caution_mean(e, &u, in, nin), nin++;
    if (apply >= 0)
        in[nin++] = apply;
    ValueId out = emit(e, u.op, nin, in, u.iattr, u.niattr, u.fattr, u.nfattr, 0);
    if (out >= 0) {
        Node n = *emit_last(e);
        for (int k = 0; k < ns; k++)
            emit(e, CT_OP_assign, 2, (ValueId[]){st[k], n.out[1 + k]}, NULL, 0, NULL, 0, 0);
    }
    emit(e, CT_OP_assign, 2, (ValueId[]){p, out}, NULL, 0, NULL, 0, 0);
    return out;
}

/* The squared L2 norm of x: over every element, or with `unitwise` over
 * all dims but the first, kept as [d0, 1, ...] (timm's unitwise_norm; a
 * tensor of at most 1 dim is one unit). */
static ValueId add_norm_sq(Emitter *e, ValueId x, int unitwise)
{
    int ndim = emit_shape(e, x).ndim;
    ValueId sq = emit(e, CT_OP_mul, 2, (ValueId[]){x, x}, NULL, 0, NULL, 0, 0);
    if (ndim == 0)
        return sq;
    int64_t mask = ((int64_t)1 << ndim) - 1;
    if (unitwise && ndim > 1)
        return emit(e, CT_OP_reduce_sum, 1, &sq, (int64_t[]){mask & ~(int64_t)1, 1}, 2, NULL, 0, 0);
    return emit(e, CT_OP_reduce_sum, 1, &sq, (int64_t[]){mask, 0}, 2, NULL, 0, 0);
}

/* The total squared norm of every gradient. */
static ValueId add_total_norm_sq(Emitter *e, const ValueId *grads, int n)
{
    ValueId total = -1;
    for (int k = 0; k < n; k++) {
        ValueId sq = add_norm_sq(e, grads[k], 0);
        total = total < 0 ? sq : emit(e, CT_OP_add, 2, (ValueId[]){total, sq}, NULL, 0, NULL, 0, 0);
    }
    return total;
}

/* LAMB's clip input: (global gradient norm / max_grad_norm)^2. */
static ValueId add_grad_norm_sq(Emitter *e, const ValueId *grads, int n, double max_norm)
{
    ValueId total = add_total_norm_sq(e, grads, n);
    return emit(e, CT_OP_scale_shift, 1, &total, NULL, 0, (double[]){1 / (max_norm * max_norm), 0}, 2, 0);
}

/* timm's dispatch_clip_grad: clipped[k] from grads[k] (params[k]'s).
 * Returns the total squared norm for CT_CLIP_NORM, else -1. */
static ValueId add_clip(Emitter *e, const OptimSpec *o, const ValueId *params, const ValueId *grads, int n,
                        ValueId *clipped)
{
    double v = o->clip_grad;
    ValueId total = -1;
    switch (o->clip_mode) {
    case CT_CLIP_NONE:
        memcpy(clipped, grads, sizeof *grads * (size_t)n);
        break;
    case CT_CLIP_NORM: {
        total = add_total_norm_sq(e, grads, n);
        ValueId coef = emit(e, CT_OP_clip_coef, 1, &total, NULL, 0, (double[]){v, 0, 1e-6, 0}, 4, 0);
        for (int k = 0; k < n; k++)
            clipped[k] = emit(e, CT_OP_mul, 2, (ValueId[]){grads[k], coef}, NULL, 0, NULL, 0, 0);
        break;
    }
    case CT_CLIP_VALUE:
        for (int k = 0; k < n; k++)
            clipped[k] = emit(e, CT_OP_clamp, 1, &grads[k], NULL, 0, (double[]){-v, v}, 2, 0);
        break;
    case CT_CLIP_AGC:
        /* train.py: get_clip_parameters(exclude_head=True), all but the last two */
        for (int k = 0; k < n; k++) {
            if (k >= n - 2) {
                clipped[k] = grads[k];
                continue;
            }
            ValueId sq[2] = {add_norm_sq(e, grads[k], 1), add_norm_sq(e, params[k], 1)};
            ValueId coef = emit(e, CT_OP_clip_coef, 2, sq, NULL, 0, (double[]){v, 1e-3, 0, 1e-6}, 4, 0);
            clipped[k] = emit(e, CT_OP_mul, 2, (ValueId[]){grads[k], coef}, NULL, 0, NULL, 0, 0);
        }
        break;
    }
    return total;
}

/* lr * scale: lr itself for 1, else one scalar node per distinct scale
 * (seen[0..*nseen) with their nodes), so updates sharing a scale still
 * batch into one launch (OpDef.batch_from compares the lr input). */
static ValueId scaled_lr(Emitter *e, ValueId lr, double scale, double *seen, ValueId *nodes, int *nseen)
{
    if (scale == 1)
        return lr;
    for (int k = 0; k < *nseen; k++)
        if (seen[k] == scale)
            return nodes[k];
    seen[*nseen] = scale;
    return nodes[(*nseen)++] = emit(e, CT_OP_scale_shift, 1, &lr, NULL, 0, (double[]){scale, 0}, 2, 0);
}

/* out->params: the params of g the step trains, in state_dict order (those
 * --layer-decay-no-opt-scale freezes left out), scale[k] the lr scale of
 * out->params[k]; all[0..*nall) every param. */
static int pick_params(const Graph *g, const OptimSpec *o, TrainStep *out, ValueId **all, int *nall, double **scale,
                       CtErr *err)
{
    int n = 0;
    for (int k = 0; k < g->nstate; k++)
        n += g->values[g->state[k]].role == CT_ROLE_PARAM;
    *nall = n;
    if (o->lr_scale && o->n_lr_scale != n)
        return ct_fail(err, "train step: %d layer-decay lr scales for %d params", o->n_lr_scale, n);
    out->params = malloc(sizeof *out->params * (size_t)(n + 1));
    out->grads = malloc(sizeof *out->grads * (size_t)(n + 1));
    *all = malloc(sizeof **all * (size_t)(n + 1));
    *scale = malloc(sizeof **scale * (size_t)(n + 1));
    CT_ASSERT(out->params && out->grads && *all && *scale);
    for (int k = 0, i = 0; k < g->nstate; k++) {
        if (g->values[g->state[k]].role != CT_ROLE_PARAM)
            continue;
        double sc = o->lr_scale ? o->lr_scale[i] : 1;
        (*all)[i++] = g->state[k];
        if (o->no_opt_scale > 0 && sc < o->no_opt_scale)
            continue;
        (*scale)[out->nparams] = sc;
        out->params[out->nparams++] = g->state[k];
    }
    if (n > 0 && out->nparams == 0)
        return ct_fail(err, "train step: every param's layer-decay lr scale is below --layer-decay-no-opt-scale %g",
                       o->no_opt_scale);
    return 0;
}

/* --grad-accum-steps: total[k] becomes the accumulated gradient of
 * param k, its state "accum.<name>" reset on the updating step. */
static void add_accumulate(Emitter *e, const TrainStep *t, ValueId *total, ValueId *state, int *nstate)
{
    Graph *g = e->g;
    e->scope = "accumulate";
    for (int k = 0; k < t->nparams; k++) {
        Value pv = g->values[t->params[k]];
        char name[600];
        snprintf(name, sizeof name, "accum.%s", pv.name);
        ValueId acc = graph_add_value(g, g->values[t->grads[k]].type, CT_ROLE_STATE, name);
        g->values[acc].init = (CtInit){.kind = CT_INIT_ZEROS, .a = 0};
        state[(*nstate)++] = acc;
        total[k] = emit(e, CT_OP_grad_accumulate, 3, (ValueId[]){acc, t->grads[k], t->update}, NULL, 0, NULL, 0, 0);
        if (total[k] >= 0)
            emit(e, CT_OP_assign, 2, (ValueId[]){acc, emit_last(e)->out[1]}, NULL, 0, NULL, 0, 0);
    }
}

/* ModelEmaV3.apply_update_: for every param (new value fresh[k]) and buffer
 * (its value after the forward's assign), state "ema.<name>" and its
 * assign: float ema * decay + new * (1 - decay), integer ones copied. */
static void add_ema(Emitter *e, const TrainStep *t, const ValueId *fresh, int nmodel, ValueId *state, int *nstate)
{
    Graph *g = e->g;
    ValueId decay = t->ema_decay;
    ValueId keep = emit(e, CT_OP_scale_shift, 1, &decay, NULL, 0, (double[]){-1, 1}, 2, 0);
    for (int k = 0, j = 0; k < nmodel; k++) {
        ValueId v = state[k], now = v;
        if (g->values[v].role != CT_ROLE_PARAM && g->values[v].role != CT_ROLE_BUFFER)
            continue; /* the rng counter */
        if (g->values[v].role == CT_ROLE_PARAM)
            now = fresh[j++];
        else
            for (int i = 0; i < g->nnodes; i++) /* the buffer's last assign */
                if (g->nodes[i].op == CT_OP_assign && g->nodes[i].in[0] == v)
                    now = g->nodes[i].in[1];
        Value pv = g->values[v];
        char name[600];
        snprintf(name, sizeof name, "ema.%s", pv.name);
        ValueId ema = graph_add_value(g, pv.type, CT_ROLE_STATE, name);
        g->values[ema].init = (CtInit){.kind = CT_INIT_ZEROS, .a = 0};
        state[(*nstate)++] = ema;
        ValueId next = now;
        if (ct_dtype_is_float(pv.type.dtype)) {
            ValueId d = decay, w = keep;
            if (pv.type.dtype != CT_F32) {
                d = emit(e, CT_OP_cast, 1, &decay, (int64_t[]){pv.type.dtype}, 1, NULL, 0, 0);
                w = emit(e, CT_OP_cast, 1, &keep, (int64_t[]){pv.type.dtype}, 1, NULL, 0, 0);
            }
            next = emit(e, CT_OP_add, 2,
                        (ValueId[]){emit(e, CT_OP_mul, 2, (ValueId[]){ema, d}, NULL, 0, NULL, 0, 0),
                                    emit(e, CT_OP_mul, 2, (ValueId[]){now, w}, NULL, 0, NULL, 0, 0)},
                        NULL, 0, NULL, 0, 0);
        }
        emit(e, CT_OP_assign, 2, (ValueId[]){ema, next}, NULL, 0, NULL, 0, 0);
    }
}

int train_step_build(Graph *g, ValueId logits, const LossSpec *loss, const OptimSpec *opt, TrainStep *out,
                     CtErr *err)
{
    memset(out, 0, sizeof *out);
    out->finite = out->grad_norm_sq = out->ema_decay = out->update = out->unscale = -1;
    const CtShape *ls = &g->values[logits].type.shape;
    if (ls->ndim != 2)
        return ct_fail(err, "train step: logits must be [B, classes], got %d dims", ls->ndim);
    int soft = loss->kind == CT_LOSS_SOFT_TARGET || (loss->kind == CT_LOSS_BCE && loss->soft);
    out->target = add_input(g, "target", soft ? *ls : (CtShape){1, {ls->d[0]}}, soft ? CT_F32 : CT_I64);
    out->lr = add_input(g, "lr", (CtShape){0}, CT_F32);
    out->loss_scale = add_input(g, "loss_scale", (CtShape){0}, CT_F32);
    if (opt->model_ema && opt->kind != CT_OPT_NONE)
        out->ema_decay = add_input(g, "ema_decay", (CtShape){0}, CT_F32);
    int accum = opt->grad_accum > 1 && opt->kind != CT_OPT_NONE;
    if (accum) {
        out->update = add_input(g, "update", (CtShape){0}, CT_F32);
        out->unscale = add_input(g, "unscale", (CtShape){0}, CT_F32);
    }

    Emitter e = {.g = g, .scope = "loss"};
    out->loss = add_loss(&e, logits, out->target, loss);
    if (e.failed)
        return *err = e.err, -1;
    graph_mark_output(g, out->loss);

    ValueId *all = NULL;
    double *scale = NULL;
    int nall;
    if (pick_params(g, opt, out, &all, &nall, &scale, err))
        goto fail;
    for (int i = 0; i < g->nnodes && opt->sync_bn; i++)
        if (g->nodes[i].op == CT_OP_batch_norm && g->nodes[i].iattr[0])
            g->nodes[i].iattr[1] = 1;
    if (autodiff(g, out->loss, out->loss_scale, out->params, out->nparams, out->grads, err))
        goto fail;
    /* the loss (where autodiff's reordering left it): nothing of the tail moves into the forward */
    int floor = g->values[out->loss].producer;
    /* DDP averages the gradients of the scaled loss; GradScaler unscales after */
    if (opt->allreduce_bucket_bytes > 0 &&
        grad_allreduce(g, out->grads, out->nparams, opt->allreduce_bucket_bytes, err))
        goto fail;
    int tail = g->nnodes;
    e.scope = "unscale";
    for (int k = 0; k < out->nparams; k++) {
        ValueId by = accum ? out->unscale : out->loss_scale;
        out->grads[k] = emit(&e, CT_OP_div, 2, (ValueId[]){out->grads[k], by}, NULL, 0, NULL, 0, 0);
        if (out->grads[k] >= 0)
            g->values[out->grads[k]].role = CT_ROLE_GRAD;
    }
    if (e.failed) {
        *err = e.err;
        goto fail;
    }
    for (int k = 0; (opt->kind == CT_OPT_NONE || opt->grads_out) && k < out->nparams; k++)
        graph_mark_output(g, out->grads[k]);
    if (opt->kind == CT_OPT_NONE) {
        schedule_assigns_last(g);
        goto done;
    }

    /* Optimizer state follows the params and buffers in g->state. */
    int nmodel = g->nstate;
    int cap = g->nstate + 5 * out->nparams + 1 + (opt->model_ema ? nmodel : 0);
    ValueId *state = realloc(g->state, sizeof *state * (size_t)cap);
    CT_ASSERT(state != NULL);
    g->state = state;
    ValueId step = -1;
    OptimOp kind_op;
    optim_op(opt, 0, &kind_op);
    if (kind_op.step) {
        step = graph_add_value(g, (CtType){{0}, CT_I64}, CT_ROLE_STATE, "optim.step");
        g->values[step].init = (CtInit){.kind = CT_INIT_ZEROS, .a = 0};
        g->state[g->nstate++] = step;
    }
    /* the gradients the update reads: this step's, or the group's sum */
    ValueId *total = malloc(sizeof *total * (size_t)(out->nparams + 1));
    CT_ASSERT(total != NULL);
    memcpy(total, out->grads, sizeof *total * (size_t)out->nparams);
    if (accum)
        add_accumulate(&e, out, total, g->state, &g->nstate);
    e.scope = "optimizer";
    ValueId apply = accum ? out->update : -1;
    if (opt->skip_nonfinite) {
        for (int k = 0; k < out->nparams; k++) {
            ValueId ok = emit(&e, CT_OP_all_finite, 1, &total[k], NULL, 0, NULL, 0, 0);
            apply = apply < 0 ? ok : emit(&e, CT_OP_mul, 2, (ValueId[]){apply, ok}, NULL, 0, NULL, 0, 0);
        }
        if (apply >= 0)
            graph_mark_output(g, apply);
        out->finite = apply;
    }
    /* upd: the clipped gradients; fresh: every param's value after the step;
     * lrs: the scaled lr nodes */
    ValueId *upd = malloc(sizeof *upd * (size_t)(2 * out->nparams + nall + 1)), *fresh = upd + out->nparams;
    ValueId *lrs = fresh + nall;
    double *seen = malloc(sizeof *seen * (size_t)(out->nparams + 1));
    CT_ASSERT(upd != NULL && seen != NULL);
    int nseen = 0;
    e.scope = "clip";
    out->grad_norm_sq = add_clip(&e, opt, out->params, total, out->nparams, upd);
    free(total);
    if (out->grad_norm_sq >= 0)
        graph_mark_output(g, out->grad_norm_sq);
    e.scope = "optimizer";
    ValueId clip = kind_op.clip ? add_grad_norm_sq(&e, upd, out->nparams, opt->max_grad_norm) : -1;
    for (int i = 0, k = 0; i < nall; i++) {
        if (k == out->nparams || out->params[k] != all[i]) {
            fresh[i] = all[i]; /* frozen */
            continue;
        }
        ValueId lr = scaled_lr(&e, out->lr, scale[k], seen, lrs, &nseen);
        fresh[i] = add_update(&e, out->params[k], upd[k], lr, step, clip, apply, opt, g->state, &g->nstate);
        k++;
    }
    if (out->ema_decay >= 0) {
        e.scope = "ema";
        add_ema(&e, out, fresh, nmodel, g->state, &g->nstate);
    }
    free(upd);
    free(seen);
    if (step >= 0) {
        ValueId next = apply < 0 ? emit(&e, CT_OP_scale_shift, 1, &step, NULL, 0, (double[]){1, 1}, 2, 0)
                                 : emit(&e, CT_OP_add, 2, (ValueId[]){step, emit(&e, CT_OP_cast, 1, &apply,
                                                                                   (int64_t[]){CT_I64}, 1, NULL, 0, 0)},
                                        NULL, 0, NULL, 0, 0);
        emit(&e, CT_OP_assign, 2, (ValueId[]){step, next}, NULL, 0, NULL, 0, 0);
    }
    if (e.failed) {
        *err = e.err;
        goto fail;
    }
    if (opt->step_in_backward)
        schedule_hoist(g, tail, floor);
    else
        schedule_assigns_last(g);
    if (graph_verify(g, err))
        goto fail;
done:
    free(all);
    free(scale);
    return 0;
fail:
    free(all);
    free(scale);
    train_step_free(out);
    return -1;
}

void train_step_free(TrainStep *t)
{
    free(t->params);
    free(t->grads);
    t->params = t->grads = NULL;
}
