/* Contract: train_step_build(g, logits) appends loss, backward and the optimizer
 * update (with assign nodes) to a training-mode forward graph and leaves it
 * verified. */
#include <fnmatch.h>
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

/* A zero-initialised optimizer-state tensor "optim.<param>.<what>". */
static ValueId add_slot(Graph *g, const Value *p, const char *what, ValueId *state, int *nstate)
{
    char name[600];
    snprintf(name, sizeof name, "optim.%s.%s", p->name, what);
    ValueId v = graph_add_value(g, p->type, CT_ROLE_STATE, name);
    g->values[v].init = (CtInit){CT_INIT_ZEROS, 0};
    state[(*nstate)++] = v;
    return v;
}

static ValueId add_loss(Emitter *e, ValueId logits, ValueId target, const LossSpec *l)
{
    ValueId in[2] = {logits, target};
    switch (l->kind) {
    case CT_LOSS_CROSS_ENTROPY: return emit(e, CT_OP_cross_entropy, 2, in, NULL, 0, &l->smoothing, 1, 0);
    case CT_LOSS_SOFT_TARGET: return emit(e, CT_OP_soft_target_cross_entropy, 2, in, NULL, 0, NULL, 0, 0);
    case CT_LOSS_BCE:
        return emit(e, CT_OP_binary_cross_entropy, 2, in, NULL, 0, (double[]){l->smoothing, l->bce_threshold}, 2, 0);
    }
    return emit_fail(e, "unknown loss kind %d", (int)l->kind);
}

static void add_update(Emitter *e, ValueId p, ValueId grad, ValueId lr, ValueId step, ValueId apply,
                       const OptimSpec *o, ValueId *state, int *nstate)
{
    Graph *g = e->g;
    Value pv = g->values[p];
    double wd = optim_no_decay(pv.name, pv.type.shape.ndim, o->no_weight_decay) ? 0 : o->weight_decay;
    ValueId out;
    if (o->kind == CT_OPT_ADAMW) {
        ValueId m = add_slot(g, &pv, "exp_avg", state, nstate), v = add_slot(g, &pv, "exp_avg_sq", state, nstate);
        out = emit(e, CT_OP_adamw_update, apply >= 0 ? 7 : 6, (ValueId[]){p, grad, m, v, lr, step, apply}, NULL, 0,
                   (double[]){o->beta1, o->beta2, o->eps, wd}, 4, 0);
        if (out >= 0) {
            Node u = *emit_last(e);
            emit(e, CT_OP_assign, 2, (ValueId[]){m, u.out[1]}, NULL, 0, NULL, 0, 0);
            emit(e, CT_OP_assign, 2, (ValueId[]){v, u.out[2]}, NULL, 0, NULL, 0, 0);
        }
    } else {
        ValueId buf = add_slot(g, &pv, "momentum_buffer", state, nstate);
        int64_t nesterov = o->kind == CT_OPT_SGD;
        out = emit(e, CT_OP_sgd_update, apply >= 0 ? 5 : 4, (ValueId[]){p, grad, buf, lr, apply}, &nesterov, 1,
                   (double[]){o->momentum, wd}, 2, 0);
        if (out >= 0)
            emit(e, CT_OP_assign, 2, (ValueId[]){buf, emit_last(e)->out[1]}, NULL, 0, NULL, 0, 0);
    }
    emit(e, CT_OP_assign, 2, (ValueId[]){p, out}, NULL, 0, NULL, 0, 0);
}

int train_step_build(Graph *g, ValueId logits, const LossSpec *loss, const OptimSpec *opt, TrainStep *out,
                     CtErr *err)
{
    memset(out, 0, sizeof *out);
    out->finite = -1;
    const CtShape *ls = &g->values[logits].type.shape;
    if (ls->ndim != 2)
        return ct_fail(err, "train step: logits must be [B, classes], got %d dims", ls->ndim);
    CtShape tshape = loss->kind == CT_LOSS_SOFT_TARGET ? *ls : (CtShape){1, {ls->d[0]}};
    out->target = add_input(g, "target", tshape, loss->kind == CT_LOSS_SOFT_TARGET ? CT_F32 : CT_I64);
    out->lr = add_input(g, "lr", (CtShape){0}, CT_F32);
    out->loss_scale = add_input(g, "loss_scale", (CtShape){0}, CT_F32);

    Emitter e = {.g = g, .scope = "loss"};
    out->loss = add_loss(&e, logits, out->target, loss);
    if (e.failed)
        return *err = e.err, -1;
    graph_mark_output(g, out->loss);

    for (int k = 0; k < g->nstate; k++)
        out->nparams += g->values[g->state[k]].role == CT_ROLE_PARAM;
    out->params = malloc(sizeof *out->params * (size_t)(out->nparams + 1));
    out->grads = malloc(sizeof *out->grads * (size_t)(out->nparams + 1));
    CT_ASSERT(out->params && out->grads);
    for (int k = 0, j = 0; k < g->nstate; k++)
        if (g->values[g->state[k]].role == CT_ROLE_PARAM)
            out->params[j++] = g->state[k];
    if (autodiff(g, out->loss, out->loss_scale, out->params, out->nparams, out->grads, err))
        goto fail;
    e.scope = "unscale";
    for (int k = 0; k < out->nparams; k++) {
        out->grads[k] = emit(&e, CT_OP_div, 2, (ValueId[]){out->grads[k], out->loss_scale}, NULL, 0, NULL, 0, 0);
        if (out->grads[k] >= 0)
            g->values[out->grads[k]].role = CT_ROLE_GRAD;
    }
    if (e.failed) {
        *err = e.err;
        goto fail;
    }
    for (int k = 0; k < out->nparams; k++)
        graph_mark_output(g, out->grads[k]);
    if (opt->kind == CT_OPT_NONE)
        return 0;

    /* Optimizer state follows the params and buffers in g->state. */
    int cap = g->nstate + 2 * out->nparams + 1;
    ValueId *state = realloc(g->state, sizeof *state * (size_t)cap);
    CT_ASSERT(state != NULL);
    g->state = state;
    ValueId step = -1;
    if (opt->kind == CT_OPT_ADAMW) {
        step = graph_add_value(g, (CtType){{0}, CT_I64}, CT_ROLE_STATE, "optim.step");
        g->values[step].init = (CtInit){CT_INIT_ZEROS, 0};
        g->state[g->nstate++] = step;
    }
    e.scope = "optimizer";
    ValueId apply = -1;
    if (opt->skip_nonfinite) {
        for (int k = 0; k < out->nparams; k++) {
            ValueId ok = emit(&e, CT_OP_all_finite, 1, &out->grads[k], NULL, 0, NULL, 0, 0);
            apply = apply < 0 ? ok : emit(&e, CT_OP_mul, 2, (ValueId[]){apply, ok}, NULL, 0, NULL, 0, 0);
        }
        if (apply >= 0)
            graph_mark_output(g, apply);
        out->finite = apply;
    }
    for (int k = 0; k < out->nparams; k++)
        add_update(&e, out->params[k], out->grads[k], out->lr, step, apply, opt, g->state, &g->nstate);
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
    schedule_assigns_last(g);
    if (graph_verify(g, err))
        goto fail;
    return 0;
fail:
    train_step_free(out);
    return -1;
}

void train_step_free(TrainStep *t)
{
    free(t->params);
    free(t->grads);
    t->params = t->grads = NULL;
}
