/* --layer-decay: every parameter's layer id and lr scale against timm's own
 * param groups (tests/data/layer_decay_refs.txt, tools/make_layer_decay_refs.py),
 * and the training step: one plain SGD step with layer decay moves each
 * param by its scale times the step without, and no_opt_scale freezes the
 * params below it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/layer_groups.h"
#include "models/registry.h"
#include "passes/fuse.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"

/* One model of the reference file: ctimm's groups against timm's, name by
 * name in state_dict order. Returns the text after the model's "end". */
static char *check_model(char *line)
{
    char model[128];
    double decay, min_scale;
    int want_layers;
    if (sscanf(line, "model %127s %lf %lf %d", model, &decay, &min_scale, &want_layers) != 4) {
        CHECKF(0, "bad reference line: %.60s", line);
        return NULL;
    }
    const ModelEntry *m = model_find(model);
    CHECKF(m != NULL, "%s is not registered", model);
    if (!m)
        return NULL;
    ModelSpec spec = {.batch_size = 1, .args = model_args_default()};
    Graph g;
    CtErr err;
    CHECKF(model_build(m, &spec, &g, &err) == 0, "%s", err.msg);
    int *ids = malloc(sizeof *ids * (size_t)g.nstate);
    double *scale = malloc(sizeof *scale * (size_t)g.nstate);
    int n = 0, nlayers = 0, row = 0, bad = 0;
    CHECKF(layer_decay_params(&g, model_family(m)->group_matcher, m->cfg.classifier, decay, min_scale, ids, scale, &n, &nlayers, &err) == 0,
           "%s", err.msg);
    CHECKF(nlayers == want_layers, "%s: %d layers, timm %d", model, nlayers, want_layers);
    const char *names[4096];
    for (int k = 0, j = 0; k < g.nstate && j < 4096; k++)
        if (g.values[g.state[k]].role == CT_ROLE_PARAM)
            names[j++] = g.values[g.state[k]].name;
    for (line = strtok(NULL, "\n"); line && strcmp(line, "end"); line = strtok(NULL, "\n"), row++) {
        char name[256];
        int id;
        double sc;
        CHECKF(sscanf(line, "%255s %d %lf", name, &id, &sc) == 3, "bad reference line: %.60s", line);
        if (row >= n || strcmp(name, names[row]) || ids[row] != id || scale[row] != sc) {
            if (bad++ < 3)
                fprintf(stderr, "%s: timm %s layer %d scale %.17g; ctimm %s layer %d scale %.17g\n", model, name, id, sc,
                        row < n ? names[row] : "(none)", row < n ? ids[row] : -1, row < n ? scale[row] : NAN);
        }
    }
    CHECKF(bad == 0 && row == n, "%s: %d of %d params differ from timm's groups (timm lists %d)", model, bad, n, row);
    printf("%s: %d params in %d layers as timm groups them\n", model, n, nlayers);
    free(ids);
    free(scale);
    graph_free(&g);
    return line;
}

static void test_timm_groups(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/layer_decay_refs.txt", test_data_dir());
    char *text = test_read_text(path);
    CHECKF(text != NULL, "cannot read %s", path);
    int models = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "model ", 6) == 0) {
            models++;
            if (!check_model(line))
                break;
        }
    }
    CHECKF(models >= 4, "only %d models in %s", models, path);
    free(text);
}

enum { B = 2, IMG = 32, CLASSES = 10 };

/* One SGD step (no momentum, no weight decay, lr 0.5) of test_vit from the
 * init of seed 1; *s the state after it, *ts its training step. */
static void one_step(const double *lr_scale, int n_scale, double no_opt_scale, CtState *s, TrainStep *ts)
{
    const ModelEntry *m = model_find("test_vit");
    ModelSpec spec = {.batch_size = B, .training = 1, .args = {.num_classes = CLASSES, .img_size = IMG}};
    OptimSpec opt = {.kind = CT_OPT_MOMENTUM, .lr_scale = lr_scale, .n_lr_scale = n_scale, .no_opt_scale = no_opt_scale};
    Graph g;
    CtErr err;
    CHECKF(model_build(m, &spec, &g, &err) == 0, "%s", err.msg);
    CHECKF(train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0, .bce_threshold = -1}, &opt, ts, &err) == 0,
           "%s", err.msg);
    state_create(s, &g);
    state_init(s, 1);
    static float x[B * 3 * IMG * IMG];
    int64_t y[B] = {3, 7};
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = (float)sin(0.37 * (double)i);
    float lr = 0.5f, loss_scale = 1;
    CtTensor in[4] = {{{{4, {B, 3, IMG, IMG}}, CT_F32}, x}, {{{1, {B}}, CT_I64}, y}, {{{0}, CT_F32}, &lr},
                      {{{0}, CT_F32}, &loss_scale}};
    CtTensor *out = calloc((size_t)g.noutputs, sizeof *out);
    CHECKF(backend_run_once(&ct_backend_ref, &g, s, in, 4, out, NULL, &err) == 0, "%s", err.msg);
    for (int k = 0; k < g.noutputs; k++)
        tensor_free(&out[k]);
    free(out);
    graph_free(&g);
}

/* Param `name` after the scaled step against the plain one: equal to
 * p0 - scale * (p0 - plain) up to float32 rounding. Returns the elements
 * whose step the scale changed beyond that rounding (the scale shows). */
static int64_t check_scaled(const CtState *init, const CtState *plain, const CtState *ld, const char *name, double sc)
{
    int i0 = state_find(init, name), ip = state_find(plain, name), il = state_find(ld, name);
    CHECKF(i0 >= 0 && ip >= 0 && il >= 0, "%s missing", name);
    if (i0 < 0 || ip < 0 || il < 0)
        return 0;
    const float *p0 = state_data(init, i0), *pp = state_data(plain, ip), *pl = state_data(ld, il);
    int64_t n = shape_numel(&init->e[i0].type.shape), bad = 0, shows = 0;
    for (int64_t j = 0; j < n; j++) {
        double step = (double)p0[j] - pp[j], tol = 3e-7 * (fabs(p0[j]) + fabs(step));
        bad += !(fabs(pl[j] - (p0[j] - sc * step)) <= tol);
        shows += fabs(pl[j] - pp[j]) > tol;
    }
    CHECKF(bad == 0, "%s (scale %g): %lld of %lld elements not scaled", name, sc, (long long)bad, (long long)n);
    return shows;
}

static void test_scaled_step(void)
{
    const ModelEntry *m = model_find("test_vit");
    ModelSpec spec = {.batch_size = B, .args = {.num_classes = CLASSES, .img_size = IMG}};
    Graph g;
    CtErr err;
    CHECKF(model_build(m, &spec, &g, &err) == 0, "%s", err.msg);
    int *ids = malloc(sizeof *ids * (size_t)g.nstate), n, nlayers;
    double *scale = malloc(sizeof *scale * (size_t)g.nstate);
    CHECKF(layer_decay_params(&g, model_family(m)->group_matcher, m->cfg.classifier, 0.75, 0, ids, scale, &n, &nlayers, &err) == 0, "%s",
           err.msg);
    CtState init, plain, ld, frozen;
    TrainStep tp, tl, tf;
    state_create(&init, &g);
    state_init(&init, 1);
    one_step(NULL, 0, 0, &plain, &tp);
    one_step(scale, n, 0, &ld, &tl);
    one_step(scale, n, 0.3, &frozen, &tf);
    CHECK(tp.nparams == n && tl.nparams == n);
    int64_t shows = 0;
    int nfrozen = 0;
    for (int k = 0, j = 0; k < g.nstate; k++) {
        const char *name = g.values[g.state[k]].name;
        if (g.values[g.state[k]].role != CT_ROLE_PARAM)
            continue;
        double sc = scale[j++];
        shows += check_scaled(&init, &plain, &ld, name, sc);
        if (sc >= 0.3) {
            check_scaled(&init, &plain, &frozen, name, sc);
            continue;
        }
        nfrozen++;
        int i0 = state_find(&init, name), i1 = state_find(&frozen, name);
        CHECKF(i0 >= 0 && i1 >= 0 && 
                   !memcmp(state_data(&init, i0), state_data(&frozen, i1),
                           sizeof(float) * (size_t)shape_numel(&init.e[i0].type.shape)),
               "%s (scale %g < 0.3) changed", name, sc);
        char slot[300];
        snprintf(slot, sizeof slot, "optim.%s.momentum_buffer", name);
        CHECKF(state_find(&frozen, slot) < 0, "%s has optimizer state", name);
    }
    /* 8 layers: stem and blocks 0, 1 (0.75^7, ^6, ^5) fall below 0.3 */
    CHECKF(nlayers == 8 && nfrozen > 0 && tf.nparams == n - nfrozen, "%d layers, %d frozen, %d trained of %d", nlayers,
           nfrozen, tf.nparams, n);
    CHECKF(shows > 1000, "only %lld elements show the scale", (long long)shows);
    printf("test_vit: one SGD step scaled per layer (%lld elements differ from the plain step); %d params frozen\n",
           (long long)shows, nfrozen);
    state_free(&init);
    state_free(&plain);
    state_free(&ld);
    state_free(&frozen);
    train_step_free(&tp);
    train_step_free(&tl);
    train_step_free(&tf);
    free(ids);
    free(scale);
    graph_free(&g);
}

/* The multi-tensor update launches of the fused plan (what the cpu and cuda
 * backends run): one per distinct (lr scale, weight decay), never mixing
 * two; and the cpu backend's step equals the ref backend's. */
static void test_update_launches(void)
{
    const ModelEntry *m = model_find("test_vit");
    ModelSpec spec = {.batch_size = B, .training = 1, .args = {.num_classes = CLASSES, .img_size = IMG}};
    Graph g;
    TrainStep ts;
    CtErr err;
    CHECKF(model_build(m, &spec, &g, &err) == 0, "%s", err.msg);
    int *ids = malloc(sizeof *ids * (size_t)g.nstate), n, nlayers;
    double *scale = malloc(sizeof *scale * (size_t)g.nstate);
    CHECKF(layer_decay_params(&g, model_family(m)->group_matcher, m->cfg.classifier, 0.75, 0, ids, scale, &n, &nlayers, &err) == 0, "%s",
           err.msg);
    OptimSpec opt = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 0.05, .no_weight_decay = m->no_weight_decay,
                     .lr_scale = scale, .n_lr_scale = n};
    CHECKF(train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0, .bce_threshold = -1}, &opt, &ts, &err) == 0,
           "%s", err.msg);
    FusePlan p;
    CHECKF(fuse_plan(&g, &p, &err) == 0, "%s", err.msg);
    /* per update: its (lr input, weight decay) and launch */
    enum { MAXU = 256 };
    ValueId lr[MAXU];
    double wd[MAXU];
    int launch[MAXU], nu = 0, nkeys = 0, nlaunches = 0, mixed = 0;
    for (int s = 0; s < p.nsteps; s++)
        for (int j = 0; j < p.steps[s].n && nu < MAXU; j++) {
            const Node *u = &g.nodes[p.nodes[p.steps[s].first + j]];
            if (u->op != CT_OP_sgd_update)
                continue;
            lr[nu] = u->in[3], wd[nu] = u->fattr[1], launch[nu++] = p.steps[s].launch;
        }
    for (int a = 0; a < nu; a++) {
        int new_key = 1, new_launch = 1;
        for (int b = 0; b < a; b++) {
            int same_key = lr[a] == lr[b] && wd[a] == wd[b];
            mixed += same_key != (launch[a] == launch[b]);
            new_key &= !same_key;
            new_launch &= launch[a] != launch[b];
        }
        nkeys += new_key, nlaunches += new_launch;
    }
    CHECKF(nu == n && mixed == 0 && nkeys == nlaunches && nkeys > 2,
           "%d updates: %d (lr, wd) groups in %d launches, %d pairs split or mixed", nu, nkeys, nlaunches, mixed);
    printf("test_vit: %d updates in %d launches, one per (lr scale, weight decay)\n", nu, nlaunches);
    fuse_free(&p);

    /* the steps, not the params: a wrong scale is off by 25% or more */
    CtState s[3];
    static float x[B * 3 * IMG * IMG];
    int64_t y[B] = {3, 7};
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = (float)cos(0.21 * (double)i);
    float lrv = 0.5f, loss_scale = 1;
    CtTensor in[4] = {{{{4, {B, 3, IMG, IMG}}, CT_F32}, x}, {{{1, {B}}, CT_I64}, y}, {{{0}, CT_F32}, &lrv},
                      {{{0}, CT_F32}, &loss_scale}};
    const CtBackend *be[2] = {&ct_backend_ref, &ct_backend_cpu};
    for (int k = 0; k < 3; k++) {
        state_create(&s[k], &g);
        state_init(&s[k], 2);
        if (k == 2)
            break;
        CtTensor *out = calloc((size_t)g.noutputs, sizeof *out);
        CHECKF(backend_run_once(be[k], &g, &s[k], in, 4, out, NULL, &err) == 0, "%s", err.msg);
        for (int o = 0; o < g.noutputs; o++)
            tensor_free(&out[o]);
        free(out);
    }
    double worst = 0;
    for (int i = 0; i < s[0].n; i++) {
        if (s[0].e[i].role != CT_ROLE_PARAM)
            continue;
        const float *r = state_data(&s[0], i), *c = state_data(&s[1], i), *p0 = state_data(&s[2], i);
        double d = 0, norm = 0;
        for (int64_t j = 0; j < shape_numel(&s[0].e[i].type.shape); j++) {
            double step = (double)r[j] - p0[j];
            d += ((double)c[j] - r[j]) * ((double)c[j] - r[j]);
            norm += step * step;
        }
        worst = fmax(worst, norm > 0 ? sqrt(d / norm) : sqrt(d));
    }
    CHECKF(worst < 1e-2, "cpu and ref steps differ by %.2e", worst);
    printf("test_vit: cpu and ref layer-decay steps agree to %.1e\n", worst);
    state_free(&s[2]);
    state_free(&s[0]);
    state_free(&s[1]);
    train_step_free(&ts);
    free(ids);
    free(scale);
    graph_free(&g);
}

/* A scale table of another length is the caller's error, not a crash. */
static void test_bad_scales(void)
{
    const ModelEntry *m = model_find("test_vit");
    ModelSpec spec = {.batch_size = 1, .training = 1, .args = {.num_classes = CLASSES, .img_size = IMG}};
    double one = 1;
    OptimSpec opt = {.kind = CT_OPT_MOMENTUM, .lr_scale = &one, .n_lr_scale = 1};
    Graph g;
    TrainStep ts;
    CtErr err;
    CHECKF(model_build(m, &spec, &g, &err) == 0, "%s", err.msg);
    CHECK(train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0, .bce_threshold = -1}, &opt, &ts, &err) != 0);
    CHECKF(strstr(err.msg, "lr scales"), "%s", err.msg);
    graph_free(&g);
}

int main(void)
{
    test_timm_groups();
    test_scaled_step();
    test_update_launches();
    test_bad_scales();
    return check_done("test_layer_decay");
}
