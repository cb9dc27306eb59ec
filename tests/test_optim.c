/* Every optimizer's update op against timm: for each case, the op that
 * optim_defaults + opt_kwargs_apply + optim_op (what train_step_build emits
 * for --opt and --opt-kwargs) make is run on test_resnet's parameters and
 * timm's gradients (times a scale per step) for ten steps, the state fed
 * back between them, and must
 * give the parameters timm's create_optimizer_v2 optimizer had after steps
 * 1 and 10 (tests/data/opt_refs.safetensors, tools/make_opt_refs.py) within
 * 1e-5 relative per tensor, on the ref and the cpu backend. Then
 * opt_kwargs_apply's refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"
#include "runtime/state.h"
#include "train/opt_kwargs.h"

/* Relative error of the change a - p0 against b - p0 (a stricter view of
 * the same numbers where the step is small beside the weights). */
static double step_err(const float *a, const float *b, const float *p0, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += ((double)b[i] - p0[i]) * ((double)b[i] - p0[i]);
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

typedef struct Case {
    const char *name; /* the key in the file: the --opt name, then {kwargs} */
    double lr, wd, momentum; /* momentum < 0: the optimizer's default */
    const char *kwargs[3];
} Case;

enum { STEPS = 10 };
/* step k's gradients are timm's times scales[k - 1] (tools/make_opt_refs.py's SCALES) */
static const double scales[STEPS] = {1, -0.5, 2, 0.25, -1, 1.5, 0.75, -2, 0.5, 1};
/* an optimizer with corrected weight decay steps at this times the lr it
 * was built with, its max_lr (the script's LR_NOW); a cautious one's
 * gradients flip sign where (flattened index + step) % 3 is 0 */
static const double lr_now = 0.5;

/* One param's update op, run a step at a time with its state fed back:
 * buf[0] the param, buf[1] the gradient, then the slots and scalars. */
typedef struct OpRun {
    OptimOp u;
    Graph g;
    CtRunner run;
    CtTensor tin[CT_MAX_IN];
    float *buf[CT_MAX_IN], lr, clip, lr_avg;
    int64_t n, step;
    int nin, nret, nout, open;
} OpRun;

static int oprun_open(OpRun *r, const OptimOp *u, CtShape s, const float *p, double lr, const CtBackend *be)
{
    memset(r, 0, sizeof *r);
    r->u = *u;
    r->n = shape_numel(&s);
    r->lr = (float)lr;
    graph_init(&r->g);
    Emitter e = {.g = &r->g, .scope = "update"};
    ValueId in[CT_MAX_IN];
    for (int k = 0; k < 2 + u->nslot; k++) {
        in[r->nin] = graph_add_value(&r->g, (CtType){s, CT_F32}, CT_ROLE_INPUT, "t");
        r->buf[r->nin] = malloc(sizeof(float) * (size_t)r->n);
        for (int64_t i = 0; i < r->n; i++)
            r->buf[r->nin][i] = k == 0 ? p[i] : k == 1 ? 0 : (float)u->slot_init[k - 2];
        r->tin[r->nin] = (CtTensor){{s, CT_F32}, r->buf[r->nin]};
        r->nin++;
    }
    for (int k = 0; k < u->nscalar; k++) {
        in[r->nin] = graph_add_value(&r->g, (CtType){{0}, CT_F32}, CT_ROLE_INPUT, "scalar");
        r->buf[r->nin] = malloc(sizeof(float));
        r->buf[r->nin][0] = (float)u->scalar_init[k];
        r->tin[r->nin] = (CtTensor){{{0}, CT_F32}, r->buf[r->nin]};
        r->nin++;
    }
    in[r->nin] = graph_add_value(&r->g, (CtType){{0}, CT_F32}, CT_ROLE_INPUT, "lr");
    r->tin[r->nin++] = (CtTensor){{{0}, CT_F32}, &r->lr};
    if (u->step) {
        in[r->nin] = graph_add_value(&r->g, (CtType){{0}, CT_I64}, CT_ROLE_INPUT, "step");
        r->tin[r->nin++] = (CtTensor){{{0}, CT_I64}, &r->step};
    }
    if (u->clip) {
        in[r->nin] = graph_add_value(&r->g, (CtType){{0}, CT_F32}, CT_ROLE_INPUT, "clip_sq");
        r->tin[r->nin++] = (CtTensor){{{0}, CT_F32}, &r->clip};
    }
    if (u->lr_avg) { /* LaProp's running average of lr, as train_step_build's nodes update it */
        in[r->nin] = graph_add_value(&r->g, (CtType){{0}, CT_F32}, CT_ROLE_INPUT, "exp_avg_lr_1");
        r->tin[r->nin++] = (CtTensor){{{0}, CT_F32}, &r->lr_avg};
    }
    int nin = r->nin;
    if (u->caution) /* the mask's mean, computed in the graph */
        in[nin] = optim_caution_mean(&e, u, in, nin), nin++;
    emit(&e, u->op, nin, in, u->iattr, u->niattr, u->fattr, u->nfattr, 0);
    CHECKF(!e.failed, "%s", e.err.msg);
    if (e.failed)
        return -1;
    r->nret = u->nslot;
    r->nout = 1 + r->nret + u->nscalar;
    Node node = *emit_last(&e);
    for (int k = 0; k < r->nout; k++)
        graph_mark_output(&r->g, node.out[k]);
    CtErr err;
    CtState none = {0};
    if (backend_open(&r->run, be, &r->g, &none, NULL, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    r->open = 1;
    return 0;
}

/* One step on gradient grad (clip_sq: Lamb's clip input); buf[0] becomes
 * the new param. */
static int oprun_step(OpRun *r, const float *grad, double clip_sq)
{
    r->lr_avg = (float)(r->lr_avg * r->u.fattr[0] + (float)(1 - r->u.fattr[0]) * r->lr);
    r->clip = (float)clip_sq;
    memcpy(r->buf[1], grad, sizeof(float) * (size_t)r->n);
    CtTensor res[CT_MAX_OUT];
    CtErr err;
    if (backend_step(&r->run, r->tin, r->nin, res, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    /* outputs become the next step's inputs: p, slots, scalars */
    for (int k = 0; k < r->nout; k++) {
        memcpy(r->buf[k == 0 ? 0 : k + 1], res[k].data, sizeof(float) * (size_t)(k <= r->nret ? r->n : 1));
        tensor_free(&res[k]);
    }
    r->step++;
    return 0;
}

static void oprun_close(OpRun *r)
{
    if (r->open)
        backend_close(&r->run);
    for (int k = 0; k < CT_MAX_IN; k++)
        free(r->buf[k]);
    graph_free(&r->g);
}

/* The spec of case c: --opt, --opt-kwargs, weight decay and momentum. */
static void case_spec(const Case *c, int legacy, OptimSpec *o)
{
    char opt[32];
    CtErr err;
    int nkw = 0;
    while (nkw < 3 && c->kwargs[nkw])
        nkw++;
    snprintf(opt, sizeof opt, "%.*s", (int)strcspn(c->name, "{"), c->name);
    CHECK(optim_defaults(opt, o) == 0);
    CHECKF(opt_kwargs_apply(opt, c->kwargs, nkw, 0, 0, o, &err) == 0, "%s: %s", c->name, err.msg);
    o->weight_decay = c->wd;
    o->max_lr = c->lr;
    o->nadam_legacy = legacy && !strcmp(opt, "nadam"); /* timm's nadamlegacy has torch 2's rule */
    if (c->momentum >= 0)
        o->momentum = c->momentum;
}

/* STEPS steps of case c on one param; worst[0..1]: parameter errors after
 * steps 1 and STEPS, worst[2]: errors of the change from the start. */
static void run_param(const StFile *ref, const StFile *vec, const Case *c, const char *pname, const ModelEntry *m,
                      double clip_sq, int legacy, const CtBackend *be, double *worst)
{
    char key[600];
    snprintf(key, sizeof key, "state.%s", pname);
    const StTensor *p = st_find(vec, key);
    snprintf(key, sizeof key, "grad.%s", pname);
    const StTensor *gr = st_find(vec, key);
    CHECKF(p && gr, "%s: missing", pname);
    if (!p || !gr)
        return;
    OptimSpec o;
    case_spec(c, legacy, &o);
    OptimOp u;
    optim_op(&o, optim_no_decay(pname, p->ndim, m->no_weight_decay) ? 0 : c->wd, &u);
    int64_t n = st_numel(p);
    float *g = malloc(sizeof(float) * (size_t)n);
    OpRun r;
    if (oprun_open(&r, &u, shape_make(p->ndim, p->shape), p->data, o.corrected ? c->lr * lr_now : c->lr, be) == 0)
        for (int st = 1; st <= STEPS; st++) {
            for (int64_t i = 0; i < n; i++)
                g[i] = (float)(((float *)gr->data)[i] * scales[st - 1] * (o.caution && (i + st) % 3 == 0 ? -1 : 1));
            if (oprun_step(&r, g, clip_sq * scales[st - 1] * scales[st - 1]))
                break;
            snprintf(key, sizeof key, "%s.step%d.%s", c->name, st, pname);
            const StTensor *want = st == 1 || st == STEPS ? st_find(ref, key) : NULL;
            CHECKF(want != NULL || (st != 1 && st != STEPS), "no %s", key);
            if (want) {
                worst[st == 1 ? 0 : 1] = fmax(worst[st == 1 ? 0 : 1], test_rel_err(r.buf[0], want->data, n));
                worst[2] = fmax(worst[2], step_err(r.buf[0], want->data, p->data, n));
            }
        }
    oprun_close(&r);
    free(g);
}

enum { B = 4, D = 6, C = 3, NSTEP = 3 };

/* logits = linear(x [B, D], fc.weight [C, D], fc.bias [C]) in g; w, b: the params (NULL: not wanted) */
static ValueId fc_graph(Graph *g, ValueId *w, ValueId *b)
{
    graph_init(g);
    ValueId x = graph_add_value(g, (CtType){{2, {B, D}}, CT_F32}, CT_ROLE_INPUT, "x");
    ValueId pw = graph_add_value(g, (CtType){{2, {C, D}}, CT_F32}, CT_ROLE_PARAM, "fc.weight");
    ValueId pb = graph_add_value(g, (CtType){{1, {C}}, CT_F32}, CT_ROLE_PARAM, "fc.bias");
    g->state = malloc(2 * sizeof *g->state);
    CT_ASSERT(g->state != NULL);
    g->state[0] = pw, g->state[1] = pb, g->nstate = 2;
    Emitter e = {.g = g, .scope = "fc"};
    ValueId logits = emit(&e, CT_OP_linear, 3, (ValueId[]){x, pw, pb}, NULL, 0, NULL, 0, 0);
    graph_mark_output(g, logits);
    if (w)
        *w = pw, *b = pb;
    return logits;
}

/* train_step_build's wiring of the updates (state tensors and scalars fed
 * back, the step count, LaProp's lr average, Adan's previous gradient,
 * the decay groups): logits = linear(x, W, b) trained three steps with a
 * changing lr on the ref backend, the second on a non-finite batch that
 * GradScaler's check skips, must leave W and b where the update ops alone
 * take them on the gradients of the other two steps. */
static void test_train_step_wiring(void)
{
    static const Case cases[] = {
        {"laprop", 4e-4, 0.05, -1, {0}}, {"adan", 1e-3, 0.02, -1, {0}},     {"madgrad", 1e-3, 1e-4, -1, {0}},
        {"adoptw", 1e-3, 0.05, -1, {0}}, {"lion", 1e-4, 0.05, -1, {0}},     {"sgdw", 0.1, 0.05, -1, {0}},
        {"nadamw", 1e-3, 0.05, -1, {0}}, {"adamax", 2e-3, 1e-4, -1, {0}}, {"nadam", 2e-3, 1e-4, -1, {0}},
        {"sgdc", 0.1, 0.05, -1, {0}},    {"lapropc", 4e-4, 0.05, -1, {0}},  {"rmsproptfc", 1e-2, 0.05, -1, {0}},
        {"clion", 1e-4, 0.05, -1, {0}},  {"cadamw", 1e-3, 0.05, -1, {0}},   {"cadoptw", 1e-3, 0.05, -1, {0}},
        {"csgdw", 0.1, 0.05, -1, {0}},   {"crmsproptf", 1e-2, 1e-5, -1, {0}}, {"cadan", 1e-3, 0.02, -1, {0}},
        {"claprop", 4e-4, 0.05, -1, {0}},
    };
    static const double lr_scale[NSTEP] = {1, 0.5, 2};
    enum { SKIPPED = 1 };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        OptimSpec o;
        case_spec(&cases[c], 0, &o);
        o.skip_nonfinite = 1;
        o.grads_out = 1;
        Graph g;
        ValueId w, b, logits = fc_graph(&g, &w, &b);
        TrainStep ts;
        CtErr err;
        if (train_step_build(&g, logits, &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .bce_threshold = -1}, &o, &ts, &err)) {
            CHECKF(0, "%s: %s", cases[c].name, err.msg);
            graph_free(&g);
            continue;
        }
        CtState st;
        state_create(&st, &g);
        state_init(&st, 1);
        float *pw = state_data(&st, state_find(&st, "fc.weight")), *pb = state_data(&st, state_find(&st, "fc.bias"));
        for (int i = 0; i < C * D; i++)
            pw[i] = (float)(0.3 * sin(1.7 * i + 0.2));
        for (int i = 0; i < C; i++)
            pb[i] = (float)(0.1 * (i - 1));
        float w0[C * D];
        memcpy(w0, pw, sizeof w0);
        OpRun r[2];
        OptimOp u[2];
        const float *start[2] = {pw, pb};
        int ok = 1;
        for (int k = 0; k < 2; k++) {
            optim_op(&o, k == 0 ? o.weight_decay : 0, &u[k]); /* timm's groups: no decay for the bias */
            ok &= oprun_open(&r[k], &u[k], g.values[k == 0 ? w : b].type.shape, start[k], cases[c].lr,
                             &ct_backend_ref) == 0;
        }
        for (int step = 0; step < NSTEP && ok; step++) {
            float xs[B * D], lr = (float)(cases[c].lr * lr_scale[step]), one = 1;
            int64_t target[B] = {0, 2, 1, (step + 1) % C};
            for (int i = 0; i < B * D; i++)
                xs[i] = (float)cos(0.9 * i + step);
            if (step == SKIPPED)
                xs[3] = NAN;
            CtTensor in[4] = {{{{2, {B, D}}, CT_F32}, xs}, {{{1, {B}}, CT_I64}, target}, {{{0}, CT_F32}, &lr},
                              {{{0}, CT_F32}, &one}};
            CtTensor *out = calloc((size_t)g.noutputs, sizeof *out);
            ok = backend_run_once(&ct_backend_ref, &g, &st, in, 4, out, NULL, &err) == 0;
            CHECKF(ok, "%s: %s", cases[c].name, err.msg);
            for (int k = 0; k < 2 && ok && step != SKIPPED; k++) { /* outputs: logits, loss, then the gradients */
                r[k].lr = lr;
                ok = oprun_step(&r[k], out[2 + k].data, 0) == 0;
            }
            for (int k = 0; k < g.noutputs; k++)
                tensor_free(&out[k]);
            free(out);
        }
        double ew = ok ? test_rel_err(pw, r[0].buf[0], C * D) : 1, eb = ok ? test_rel_err(pb, r[1].buf[0], C) : 1;
        printf("train step %-8s W rel err %.1e, b %.1e (against the update ops alone)\n", cases[c].name, ew, eb);
        CHECKF(ew < 1e-6 && eb < 1e-6, "%s: train step W %.2e b %.2e", cases[c].name, ew, eb);
        CHECKF(test_rel_err(pw, w0, C * D) > 1e-4, "%s: the train step left W where it was", cases[c].name);
        for (int k = 0; k < 2; k++)
            oprun_close(&r[k]);
        state_free(&st);
        train_step_free(&ts);
        graph_free(&g);
    }
}

/* opt_kwargs_apply on --opt opt with the one word kw: 0 and the spec, or
 * the refusal, which must contain `want`. */
static void kwarg_case(const char *opt, const char *kw, int eps_given, const char *want, OptimSpec *o)
{
    CtErr err = {0};
    CHECK(optim_defaults(opt, o) == 0);
    int rc = opt_kwargs_apply(opt, &kw, 1, eps_given, 0, o, &err);
    if (!want)
        CHECKF(rc == 0, "--opt %s --opt-kwargs %s: %s", opt, kw, err.msg);
    else
        CHECKF(rc != 0 && strstr(err.msg, want), "--opt %s --opt-kwargs %s: '%s', want '%s'", opt, kw,
               rc ? err.msg : "accepted", want);
}

static void test_kwargs(void)
{
    OptimSpec o;
    kwarg_case("lion", "betas=(0.95, 0.98)", 0, NULL, &o);
    CHECK(o.beta1 == 0.95 && o.beta2 == 0.98);
    kwarg_case("adan", "betas=0.9, 0.95, 0.999", 0, NULL, &o); /* a bare tuple */
    CHECK(o.beta1 == 0.9 && o.beta2 == 0.95 && o.beta3 == 0.999);
    kwarg_case("lion", "eps=1e-3", 0, NULL, &o); /* create_optimizer_v2 drops eps where there is none */
    CHECK(o.eps == 0);
    kwarg_case("sgd", "nesterov=False", 0, NULL, &o);
    CHECK(o.kind == CT_OPT_MOMENTUM);
    kwarg_case("adopt", "clip_exp=None", 0, NULL, &o);
    CHECK(o.no_clip == 1);
    kwarg_case("lamb", "max_grad_norm=None", 0, NULL, &o);
    CHECK(o.max_grad_norm == 0);
    kwarg_case("madgrad", "decoupled_decay=True", 0, NULL, &o);
    CHECK(o.decoupled == 1);
    kwarg_case("lion", "no_prox=True", 0,
               "--opt lion takes no 'no_prox' in ctimm (its keys: betas corrected_weight_decay caution)", &o);
    kwarg_case("adamw", "weight_decay=0.1", 0, "train.py passes weight_decay to create_optimizer_v2 itself", &o);
    kwarg_case("madgrad", "momentum=0.5", 0, "(--momentum)", &o);
    kwarg_case("adamw", "eps=1e-6", 1, "(--opt-eps)", &o);
    kwarg_case("adan", "betas=(0.9, 0.99)", 0, "betas takes a tuple of 3 numbers", &o);
    kwarg_case("lion", "betas=(0.9, 1.5)", 0, "each beta must be in [0, 1)", &o);
    kwarg_case("lamb", "caution=True", 0, "ctimm implements --opt lamb with caution=0 only", &o);
    kwarg_case("adan", "caution=True", 0, NULL, &o);
    CHECK(o.caution == 1);
    kwarg_case("lion", "caution=True", 0, NULL, &o);
    CHECK(o.caution == 1);
    kwarg_case("cadoptw", "caution=False", 0, NULL, &o);
    CHECK(o.caution == 0 && o.decoupled == 1);
    kwarg_case("laprop", "caution=True", 0, NULL, &o);
    CHECK(o.caution == 1);
    kwarg_case("adamw", "eps=small", 0, "eps takes a number", &o);
    kwarg_case("adopt", "decoupled=maybe", 0, "decoupled takes True or False", &o);
    kwarg_case("adamw", "novalue", 0, "expected KEY=VALUE", &o);
    /* the non-elementwise optimizers' keys (their steps: test_optim_norm) */
    kwarg_case("sgdp", "wd_ratio=0.2", 0, NULL, &o);
    CHECK(o.wd_ratio == 0.2 && o.delta == 0.1);
    kwarg_case("adamp", "nesterov=False", 0, NULL, &o);
    CHECK(o.nesterov == 0);
    kwarg_case("lion", "corrected_weight_decay=True", 0, NULL, &o);
    CHECK(o.corrected == 1);
    kwarg_case("sgdc", "nesterov=False", 0, NULL, &o);
    CHECK(o.kind == CT_OPT_MOMENTUM && o.decoupled == 1 && o.corrected == 1);
    kwarg_case("rmsproptf", "decoupled_decay=True", 0, NULL, &o);
    CHECK(o.decoupled == 1);
    kwarg_case("adafactorbv", "corrected_weight_decay=True", 0, NULL, &o); /* its steps: test_optim_norm */
    CHECK(o.corrected == 1);
    kwarg_case("nlarc", "nesterov=False", 0, NULL, &o);
    CHECK(o.nesterov == 0 && o.trust_clip == 1);
    kwarg_case("lars", "dampening=0.1", 0, "ctimm implements --opt lars with dampening=0 only", &o);
    kwarg_case("lambw", "decoupled_decay=False", 0, NULL, &o);
    CHECK(o.decoupled_decay == 0);
    kwarg_case("adafactor", "betas=None", 0, NULL, &o);
    CHECK(o.beta1 == 0);
    kwarg_case("adafactor", "decay_rate=-0.5", 0, NULL, &o);
    CHECK(o.decay_rate == -0.5);
    kwarg_case("adafactor", "scale_parameter=False", 0, NULL, &o); /* nothing without relative_step */
    kwarg_case("adafactorbv", "momentum_dtype=float32", 0, NULL, &o);
    CHECK(o.momentum_f32 == 1);
    kwarg_case("adafactorbv", "clipping_threshold=None", 0, NULL, &o);
    CHECK(o.clip_threshold == 0);
    kwarg_case("adafactorbv", "min_dim_size_to_factor=8", 0, NULL, &o);
    CHECK(o.min_dim_size_to_factor == 8);
    kwarg_case("muon", "ns_coefficients='polar_express'", 0, NULL, &o);
    CHECK(o.ns_preset == 2);
    kwarg_case("muon", "adjust_lr_fn=None", 0, NULL, &o);
    CHECK(o.adjust_lr == CT_MUON_ADJUST_NONE);
    kwarg_case("muon", "ns_steps=3", 0, NULL, &o);
    CHECK(o.ns_steps == 3);
    kwarg_case("muon", "nesterov=True", 0, "ctimm implements --opt muon with nesterov=0 only", &o);
    kwarg_case("muon", "ns_coefficients=cubic", 0, "ns_coefficients takes one of original|quintic", &o);
    kwarg_case("muon", "ns_steps=2.5", 0, "ns_steps takes a whole number", &o);
}

int main(void)
{
    test_kwargs();
    test_train_step_wiring();
    static const Case cases[] = {
        {"sgd", 0.1, 1e-4, -1, {0}},        {"momentum", 0.1, 1e-4, -1, {0}},   {"adamw", 1e-3, 0.05, -1, {0}},
        {"adam", 1e-3, 1e-4, -1, {0}},      {"nadam", 2e-3, 1e-4, -1, {0}},     {"radam", 1e-3, 1e-4, -1, {0}},
        {"lamb", 5e-3, 0.02, -1, {0}},      {"lambc", 5e-3, 0.02, -1, {0}},     {"lars", 0.1, 1e-4, -1, {0}},
        {"larc", 0.1, 1e-4, -1, {0}},       {"rmsprop", 1e-3, 1e-5, -1, {0}},   {"rmsproptf", 1e-3, 1e-5, -1, {0}},
        {"nlars", 0.1, 1e-4, -1, {0}},      {"nlarc", 0.1, 1e-4, -1, {0}},
        {"lars{nesterov=True}", 0.1, 1e-4, -1, {"nesterov=True"}},
        {"adabelief", 1e-3, 0.05, -1, {0}}, {"adagrad", 1e-2, 1e-4, -1, {0}},   {"sgdw", 0.1, 0.05, -1, {0}},
        {"sgdw{nesterov=False}", 0.1, 0.05, -1, {"nesterov=False"}},
        {"adamwlegacy", 1e-3, 0.05, -1, {0}}, {"nadamlegacy", 2e-3, 1e-4, -1, {0}},
        {"nadamw", 1e-3, 0.05, -1, {0}},
        {"nadamw{betas=(0.8, 0.99)}", 1e-3, 0.05, -1, {"betas=(0.8, 0.99)"}},
        {"adamax", 2e-3, 1e-4, -1, {0}},
        {"adamax{eps=0.001}", 2e-3, 1e-4, -1, {"eps=1e-3"}},
        {"adopt", 1e-3, 1e-4, -1, {0}},
        {"adopt{clip_exp=None}", 1e-3, 1e-4, -1, {"clip_exp=None"}},
        {"adoptw", 1e-3, 0.05, -1, {0}},
        {"adoptw{betas=(0.8, 0.99), clip_exp=0.5}", 1e-3, 0.05, -1, {"betas=(0.8, 0.99)", "clip_exp=0.5"}},
        {"lion", 1e-4, 0.05, -1, {0}},
        {"lion{betas=(0.95, 0.98)}", 1e-4, 0.05, -1, {"betas=(0.95, 0.98)"}},
        {"madgrad", 1e-3, 1e-4, -1, {0}},
        {"madgrad{momentum=0}", 1e-3, 1e-4, 0, {0}},
        {"madgradw", 1e-3, 0.05, -1, {0}},
        {"madgrad{decoupled_decay=True, eps=0.0001}", 1e-3, 0.05, -1, {"decoupled_decay=True", "eps=0.0001"}},
        {"adan", 1e-3, 0.02, -1, {0}},
        {"adan{betas=(0.9, 0.95, 0.999)}", 1e-3, 0.02, -1, {"betas=(0.9, 0.95, 0.999)"}},
        {"adanw", 1e-3, 0.02, -1, {0}},
        {"laprop", 4e-4, 0.05, -1, {0}},
        {"laprop{betas=(0.8, 0.99)}", 4e-4, 0.05, -1, {"betas=(0.8, 0.99)"}},
        {"rmsproptf{decoupled_decay=True}", 1e-2, 0.05, -1, {"decoupled_decay=True"}},
        {"adamc", 1e-3, 0.05, -1, {0}},     {"nadamc", 1e-3, 0.05, -1, {0}},     {"sgdc", 0.1, 0.05, -1, {0}},
        {"adoptc", 1e-3, 0.05, -1, {0}},    {"lambcd", 5e-3, 0.02, -1, {0}},     {"lionc", 1e-4, 0.05, -1, {0}},
        {"lapropc", 4e-4, 0.05, -1, {0}},   {"rmsproptfc", 1e-2, 0.05, -1, {0}},
        {"lambw{corrected_weight_decay=True}", 5e-3, 0.02, -1, {"corrected_weight_decay=True"}},
        {"adamwlegacy{corrected_weight_decay=True}", 1e-3, 0.05, -1, {"corrected_weight_decay=True"}},
        {"cadamw", 1e-3, 0.05, -1, {0}},    {"cnadamw", 1e-3, 0.05, -1, {0}},    {"cadopt", 1e-3, 1e-4, -1, {0}},
        {"cadoptw", 1e-3, 0.05, -1, {0}},   {"clion", 1e-4, 0.05, -1, {0}},      {"cadamc", 1e-3, 0.05, -1, {0}},
        {"lion{betas=(0.95, 0.5), caution=True}", 1e-4, 0.05, -1, {"betas=(0.95, 0.5)", "caution=True"}},
        {"csgdw", 0.1, 0.05, -1, {0}},      {"csgdc", 0.1, 0.05, -1, {0}},       {"crmsproptf", 1e-2, 1e-5, -1, {0}},
        {"sgdw{caution=True, nesterov=False}", 0.1, 0.05, -1, {"caution=True", "nesterov=False"}},
        {"cadan", 1e-3, 0.02, -1, {0}},     {"cadanw", 1e-3, 0.02, -1, {0}},     {"claprop", 4e-4, 0.05, -1, {0}},
    };
    static const char *const params[] = {"conv1.0.weight",      "conv1.1.weight",      "conv1.1.bias",
                                         "layer2.0.downsample.1.weight", "layer3.0.bn3.weight", "layer3.0.bn3.bias",
                                         "fc.bias"};
    char path[512];
    StFile ref, vec;
    CtErr err;
    snprintf(path, sizeof path, "%s/opt_refs.safetensors", test_data_dir());
    if (st_read(path, &ref, &err)) {
        CHECKF(0, "%s", err.msg);
        return check_done("test_optim");
    }
    snprintf(path, sizeof path, "%s/test_resnet.safetensors", test_data_dir());
    if (st_read(path, &vec, &err)) {
        CHECKF(0, "%s", err.msg);
        st_free(&ref);
        return check_done("test_optim");
    }
    const char *tv = st_meta(&ref, "torch_version");
    int legacy = tv && tv[0] == '1' && tv[1] == '.'; /* torch 1.x NAdam */
    /* Lamb's global gradient norm over all of test_resnet's params */
    double gsq = 0;
    for (int k = 0; k < vec.ntensors; k++)
        if (strncmp(vec.tensors[k].name, "grad.", 5) == 0)
            for (int64_t i = 0; i < st_numel(&vec.tensors[k]); i++)
                gsq += (double)((float *)vec.tensors[k].data)[i] * ((float *)vec.tensors[k].data)[i];
    const StTensor *gn = st_find(&ref, "grad_norm");
    CHECKF(gn && fabs(sqrt(gsq) / *(float *)gn->data - 1) < 1e-6, "global grad norm %.8g", sqrt(gsq));
    const ModelEntry *m = model_find("test_resnet");
    const CtBackend *backends[2] = {&ct_backend_ref, &ct_backend_cpu};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int b = 0; b < 2; b++) {
            double worst[3] = {0, 0, 0};
            for (size_t k = 0; k < sizeof params / sizeof params[0]; k++)
                run_param(&ref, &vec, &cases[c], params[k], m, gsq, legacy, backends[b], worst);
            printf("%-42s %-3s param rel err step1 %.1e step%d %.1e; change rel err %.1e\n", cases[c].name,
                   backends[b]->name, worst[0], STEPS, worst[1], worst[2]);
            CHECKF(worst[0] < 1e-5 && worst[1] < 1e-5, "%s on %s: %.2e %.2e", cases[c].name, backends[b]->name,
                   worst[0], worst[1]);
            CHECKF(worst[2] < 1e-3, "%s on %s: change rel err %.2e", cases[c].name, backends[b]->name, worst[2]);
        }
    st_free(&vec);
    st_free(&ref);
    return check_done("test_optim");
}
