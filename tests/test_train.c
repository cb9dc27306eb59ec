/* The training step: timm's weight-decay grouping for every model, the SGD
 * and AdamW update rules on timm's own gradients, where the gradients live,
 * and a short training run of test_resnet on the ref backend whose loss
 * must really go down. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "passes/plan.h"
#include "runtime/backend.h"

static int in_list(const cJSON *list, const char *name)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, list) if (cJSON_IsString(it) && strcmp(it->valuestring, name) == 0) return 1;
    return 0;
}

/* optim_no_decay must reproduce optimizer_grouping.no_weight_decay_params,
 * which timm's create_optimizer_v2 made for each model. */
static void test_weight_decay_groups(void)
{
    static const char *const models[] = {"resnet18", "resnet50d", "test_resnet", "test_vit",
                                         "deit_tiny_patch16_224", "vit_base_patch32_384",
                                         "test_efficientnet", "efficientnet_b0", "mobilenetv3_large_100"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s.json", test_data_dir(), models[i]);
        char *text = test_read_text(path);
        cJSON *j = text ? cJSON_Parse(text) : NULL;
        CHECKF(j != NULL, "cannot read %s", path);
        if (!j) {
            free(text);
            continue;
        }
        const cJSON *list = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "optimizer_grouping"), "no_weight_decay_params");
        const ModelEntry *m = model_find(models[i]);
        ModelSpec spec = {.batch_size = 1, .args = model_args_default()};
        Graph g;
        CtErr err;
        CHECK(model_build(m, &spec, &g, &err) == 0);
        int mismatches = 0;
        for (int k = 0; k < g.nstate; k++) {
            const Value *v = &g.values[g.state[k]];
            if (v->role != CT_ROLE_PARAM)
                continue;
            int ours = optim_no_decay(v->name, v->type.shape.ndim, m->no_weight_decay);
            if (ours != in_list(list, v->name) && mismatches++ < 3)
                fprintf(stderr, "%s: %s: ctimm says no_decay=%d\n", models[i], v->name, ours);
        }
        CHECKF(mismatches == 0, "%s: %d params grouped differently from timm", models[i], mismatches);
        graph_free(&g);
        cJSON_Delete(j);
        free(text);
    }
}

/* One update op on (param, grad) from a reference file, against timm's step. */
static double update_error(const StFile *f, const char *name, const ModelEntry *m, int adamw)
{
    char key[600];
    snprintf(key, sizeof key, "state.%s", name);
    const StTensor *p = st_find(f, key);
    snprintf(key, sizeof key, "grad.%s", name);
    const StTensor *gr = st_find(f, key);
    snprintf(key, sizeof key, "%s.%s", adamw ? "adamw" : "sgd", name);
    const StTensor *want = st_find(f, key);
    CHECKF(p && gr && want, "%s: missing reference tensors", name);
    if (!p || !gr || !want)
        return INFINITY;
    CtShape s = shape_make(p->ndim, p->shape);
    int no_decay = optim_no_decay(name, p->ndim, m->no_weight_decay);
    Graph g;
    graph_init(&g);
    Emitter e = {.g = &g, .scope = "update"};
    ValueId pv = graph_add_value(&g, (CtType){s, CT_F32}, CT_ROLE_INPUT, "p");
    ValueId gv = graph_add_value(&g, (CtType){s, CT_F32}, CT_ROLE_INPUT, "g");
    ValueId m1 = graph_add_value(&g, (CtType){s, CT_F32}, CT_ROLE_INPUT, "m");
    ValueId m2 = adamw ? graph_add_value(&g, (CtType){s, CT_F32}, CT_ROLE_INPUT, "v") : -1;
    ValueId lr = graph_add_value(&g, (CtType){{0}, CT_F32}, CT_ROLE_INPUT, "lr");
    ValueId step = adamw ? graph_add_value(&g, (CtType){{0}, CT_I64}, CT_ROLE_INPUT, "step") : -1;
    ValueId out = adamw ? emit(&e, CT_OP_adamw_update, 6, (ValueId[]){pv, gv, m1, m2, lr, step}, NULL, 0,
                               (double[]){0.9, 0.999, 1e-8, no_decay ? 0 : 0.05}, 4, 0)
                        : emit(&e, CT_OP_sgd_update, 4, (ValueId[]){pv, gv, m1, lr}, (int64_t[]){1}, 1,
                               (double[]){0.9, no_decay ? 0 : 1e-4}, 2, 0);
    CHECKF(!e.failed, "%s", e.err.msg);
    graph_mark_output(&g, out);
    float *zeros = calloc((size_t)st_numel(p) + 1, sizeof *zeros), lrv = adamw ? 1e-3f : 0.1f;
    int64_t step0 = 0;
    CtTensor in[6] = {{{s, CT_F32}, p->data}, {{s, CT_F32}, gr->data}, {{s, CT_F32}, zeros}};
    int nin = 3;
    if (adamw)
        in[nin++] = (CtTensor){{s, CT_F32}, zeros};
    in[nin++] = (CtTensor){{{0}, CT_F32}, &lrv};
    if (adamw)
        in[nin++] = (CtTensor){{{0}, CT_I64}, &step0};
    CtState none = {0};
    CtTensor res;
    CtErr err;
    double r = INFINITY;
    if (backend_run_once(&ct_backend_ref, &g, &none, in, nin, &res, NULL, &err) == 0) {
        r = test_rel_err(res.data, want->data, st_numel(p));
        tensor_free(&res);
    }
    free(zeros);
    graph_free(&g);
    return r;
}

/* The update rules alone, fed timm's gradients: they must give timm's
 * sgd.* and adamw.* almost exactly (what is left is float32 rounding). */
static void test_update_rules(void)
{
    static const char *const models[] = {"test_resnet", "test_vit"};
    for (int i = 0; i < 2; i++) {
        char path[512];
        StFile f;
        CtErr err;
        snprintf(path, sizeof path, "%s/%s.safetensors", test_data_dir(), models[i]);
        CHECKF(st_read(path, &f, &err) == 0, "%s", err.msg);
        const ModelEntry *m = model_find(models[i]);
        double worst[2] = {0, 0};
        int n = 0;
        for (int k = 0; k < f.ntensors; k++) {
            const char *name = f.tensors[k].name;
            if (strncmp(name, "grad.", 5) != 0)
                continue;
            n++;
            for (int adamw = 0; adamw < 2; adamw++) {
                double r = update_error(&f, name + 5, m, adamw);
                worst[adamw] = r > worst[adamw] ? r : worst[adamw];
            }
        }
        CHECKF(n > 40, "%s: only %d gradients", models[i], n);
        CHECKF(worst[0] < 1e-6 && worst[1] < 1e-6, "%s: sgd %.2e adamw %.2e", models[i], worst[0], worst[1]);
        printf("%s: update rules on timm's %d gradients: sgd %.1e, adamw %.1e\n", models[i], n, worst[0], worst[1]);
        st_free(&f);
    }
}

/* Training test_resnet (10 classes, 32x32) on four fixed batches whose class
 * shows in the image: the loss must fall well below where it starts. */
/* With an update the gradients are arena values, not outputs (grads_out
 * asks for them, CT_OPT_NONE always has them), and the step is the same
 * either way: SGD's first momentum buffer is the gradient output bit for
 * bit. relu's gradient reads relu's output, so its input may die there. */
static void test_grads_outputs(void)
{
    enum { B = 2, H = 32, CLASSES = 10 };
    ModelSpec spec = {.batch_size = B, .training = 1, .args = {.num_classes = CLASSES, .img_size = H}};
    static float x[B * 3 * H * H];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = (float)cos(0.37 * (double)i);
    int64_t y[B] = {3, 7};
    float lr = 0.1f, scale = 1;
    CtTensor in[4] = {{{{4, {B, 3, H, H}}, CT_F32}, x}, {{{1, {B}}, CT_I64}, y}, {{{0}, CT_F32}, &lr},
                      {{{0}, CT_F32}, &scale}};
    Graph g[3];
    TrainStep ts[3];
    CtState st[3];
    CtTensor *out[3] = {NULL};
    CtErr err = {{0}};
    for (int c = 0; c < 3; c++) { /* SGD; SGD with grads_out; none */
        OptimSpec o = {.kind = c < 2 ? CT_OPT_SGD : CT_OPT_NONE, .momentum = 0.9, .grads_out = c == 1};
        CHECKF(model_build(model_find("test_resnet"), &spec, &g[c], &err) == 0 &&
                   train_step_build(&g[c], g[c].outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .bce_threshold = -1},
                                    &o, &ts[c], &err) == 0,
               "%s", err.msg);
        int want = c == 0 ? 2 : 2 + ts[c].nparams;
        CHECKF(g[c].noutputs == want, "case %d: %d outputs, want %d", c, g[c].noutputs, want);
        for (int k = 0; k < ts[c].nparams && g[c].noutputs == want && c > 0; k++)
            CHECK(g[c].outputs[2 + k] == ts[c].grads[k]);
        MemPlan plan;
        CHECK(plan_memory(&g[c], &plan, &err) == 0);
        int in_arena = 0;
        for (int k = 0; k < ts[c].nparams; k++)
            in_arena += g[c].values[ts[c].grads[k]].role == CT_ROLE_GRAD && plan.offset[ts[c].grads[k]] != PLAN_NONE;
        CHECKF(in_arena == (c == 0 ? ts[c].nparams : 0), "case %d: %d of %d gradients in the arena", c, in_arena,
               ts[c].nparams);
        int relus = 0, in_place = 0;
        for (int i = 0; i < g[c].nnodes; i++) {
            const Node *n = &g[c].nodes[i];
            if (n->op == CT_OP_act_grad && n->iattr[0] == CT_OP_relu) {
                relus++;
                CHECK(g[c].nodes[g[c].values[n->in[0]].producer].op == CT_OP_relu);
            }
            in_place += n->op == CT_OP_relu && plan.alias_of[n->out[0]] >= 0;
        }
        CHECKF(relus > 0 && in_place > 0, "case %d: %d relu gradients, %d relus in place", c, relus, in_place);
        plan_free(&plan);
        state_create(&st[c], &g[c]);
        state_init(&st[c], 4);
        out[c] = calloc((size_t)g[c].noutputs, sizeof *out[c]);
        CHECKF(backend_run_once(&ct_backend_ref, &g[c], &st[c], in, 4, out[c], NULL, &err) == 0, "%s", err.msg);
    }
    CHECK(st[0].nbytes == st[1].nbytes && memcmp(st[0].data, st[1].data, st[0].nbytes) == 0);
    int same = 0;
    for (int k = 0; k < ts[1].nparams; k++) {
        char name[600];
        snprintf(name, sizeof name, "optim.%s.momentum_buffer", g[1].values[ts[1].params[k]].name);
        int i = state_find(&st[1], name);
        int64_t n = shape_numel(&out[1][2 + k].type.shape), eq = 0;
        const float *gr = out[1][2 + k].data, *gn = out[2][2 + k].data, *buf = i >= 0 ? state_data(&st[1], i) : NULL;
        for (int64_t j = 0; buf && gr && gn && j < n; j++) /* == : 0 + -0 is +0 in the buffer */
            eq += buf[j] == gr[j] && !memcmp(&gn[j], &gr[j], sizeof *gr);
        same += eq == n;
    }
    printf("test_resnet: %d gradients in the arena with SGD, the same step and gradients with grads_out\n",
           ts[0].nparams);
    CHECKF(same == ts[1].nparams, "%d of %d gradients equal the momentum buffers", same, ts[1].nparams);
    for (int c = 0; c < 3; c++) {
        for (int k = 0; out[c] && k < g[c].noutputs; k++)
            tensor_free(&out[c][k]);
        free(out[c]);
        state_free(&st[c]);
        train_step_free(&ts[c]);
        graph_free(&g[c]);
    }
}

static void test_loss_goes_down(void)
{
    enum { B = 4, H = 32, CLASSES = 10, BATCHES = 4, EPOCHS = 5 };
    const ModelEntry *m = model_find("test_resnet");
    ModelSpec spec = {.batch_size = B, .training = 1, .args = {.num_classes = CLASSES, .img_size = H}};
    OptimSpec opt = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4};
    Graph g;
    TrainStep ts;
    CtErr err;
    CHECKF(model_build(m, &spec, &g, &err) == 0, "%s", err.msg);
    CHECKF(train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1}, &opt, &ts, &err) == 0,
           "%s", err.msg);
    CtState state;
    state_create(&state, &g);
    state_init(&state, 1);
    static float images[BATCHES][B * 3 * H * H];
    static int64_t labels[BATCHES][B];
    uint32_t rng = 12345;
    for (int bt = 0; bt < BATCHES; bt++)
        for (int i = 0; i < B; i++) {
            int c = labels[bt][i] = (bt * B + i) % CLASSES;
            for (int k = 0; k < 3 * H * H; k++) {
                rng = rng * 1664525u + 1013904223u;
                int ch = k / (H * H), y = k / H % H, x = k % H;
                double pattern = sin(0.3 * (c + 1) * x + ch) * cos(0.2 * (c % 3 + 1) * y);
                images[bt][i * 3 * H * H + k] = (float)(pattern + 0.3 * ((rng >> 8) / 16777216.0 - 0.5));
            }
        }
    float lr = 0.05f, loss_scale = 256;
    double first = 0, last = 0;
    for (int ep = 0; ep < EPOCHS; ep++)
        for (int bt = 0; bt < BATCHES; bt++) {
            CtTensor in[4] = {{{{4, {B, 3, H, H}}, CT_F32}, images[bt]},
                              {{{1, {B}}, CT_I64}, labels[bt]},
                              {{{0}, CT_F32}, &lr},
                              {{{0}, CT_F32}, &loss_scale}};
            CtTensor *out = calloc((size_t)g.noutputs, sizeof *out);
            CHECKF(backend_run_once(&ct_backend_ref, &g, &state, in, 4, out, NULL, &err) == 0, "%s", err.msg);
            double loss = out[1].data ? *(float *)out[1].data : NAN;
            for (int k = 0; k < g.noutputs; k++)
                tensor_free(&out[k]);
            free(out);
            if (ep == 0)
                first += loss / BATCHES;
            if (ep == EPOCHS - 1)
                last += loss / BATCHES;
        }
    printf("test_resnet, SGD: mean loss %.3f in the first epoch, %.3f in the fifth\n", first, last);
    CHECKF(first > 2.0 && last < 0.6 * first, "loss %.3f -> %.3f", first, last);
    state_free(&state);
    train_step_free(&ts);
    graph_free(&g);
}

/* drop_path in a model: the same state (hence RNG counter) gives the same
 * loss twice; another counter draws other masks and another loss. */
static void test_drop_path_reproducible(void)
{
    const ModelEntry *m = model_find("test_resnet");
    ModelSpec spec = {.batch_size = 4, .training = 1, .args = {.num_classes = 10, .img_size = 32, .drop_path_rate = 0.5}};
    OptimSpec opt = {.kind = CT_OPT_SGD, .momentum = 0.9};
    Graph g;
    TrainStep ts;
    CtErr err;
    CtState state;
    CHECKF(model_build(m, &spec, &g, &err) == 0, "%s", err.msg);
    CHECKF(train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0, .bce_threshold = -1}, &opt, &ts, &err) == 0, "%s",
           err.msg);
    state_create(&state, &g);
    state_init(&state, 3);
    /* zero_init_last makes every residual branch 0 at init, and dropping a
     * zero path changes nothing: give those BN weights 1. */
    for (int i = 0; i < state.n; i++)
        if (state.e[i].role == CT_ROLE_PARAM && state.e[i].init.kind == CT_INIT_ZEROS && strstr(state.e[i].name, "weight"))
            for (int64_t j = 0; j < shape_numel(&state.e[i].type.shape); j++)
                ((float *)state_data(&state, i))[j] = 1;
    unsigned char *start = malloc(state.nbytes);
    memcpy(start, state.data, state.nbytes);
    static float x[4 * 3 * 32 * 32];
    int64_t y[4] = {1, 2, 3, 4};
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = (float)sin(0.37 * (double)i);
    float lr = 0.1f, scale = 1;
    double loss[3];
    int counter = state_find(&state, "rng.counter");
    CHECK(counter >= 0);
    for (int run = 0; run < 3 && counter >= 0; run++) {
        memcpy(state.data, start, state.nbytes);
        if (run == 2)
            *(int64_t *)state_data(&state, counter) = 7;
        CtTensor in[4] = {{{{4, {4, 3, 32, 32}}, CT_F32}, x}, {{{1, {4}}, CT_I64}, y}, {{{0}, CT_F32}, &lr},
                          {{{0}, CT_F32}, &scale}};
        CtTensor *out = calloc((size_t)g.noutputs, sizeof *out);
        CHECKF(backend_run_once(&ct_backend_ref, &g, &state, in, 4, out, NULL, &err) == 0, "%s", err.msg);
        loss[run] = out[1].data ? *(float *)out[1].data : NAN;
        for (int k = 0; k < g.noutputs; k++)
            tensor_free(&out[k]);
        free(out);
    }
    CHECK(counter >= 0 && *(int64_t *)state_data(&state, counter) == 8); /* one step from 7 */
    CHECKF(loss[0] == loss[1], "same state, losses %.9g and %.9g", loss[0], loss[1]);
    CHECKF(loss[2] != loss[0], "another RNG counter, the same loss %.9g", loss[0]);
    free(start);
    state_free(&state);
    train_step_free(&ts);
    graph_free(&g);
}

/* Over many steps drop_path drops the expected fraction of samples: 64
 * samples x 60 steps at p = 0.3, within 4 standard deviations (0.032). */
static void test_drop_path_rate(void)
{
    enum { N = 64, STEPS = 60 };
    Graph g;
    Builder b;
    CtErr err;
    graph_init(&g);
    b_init(&b, &g, 1);
    ValueId x = b_input(&b, "x", (CtShape){2, {N, 3}}, CT_F32);
    graph_mark_output(&g, f_drop_path(&b, x, 0.3));
    CHECKF(b_finish(&b, &err) == 0, "%s", err.msg);
    CtState state;
    state_create(&state, &g);
    float ones[N * 3];
    for (int i = 0; i < N * 3; i++)
        ones[i] = 1;
    int dropped = 0, changed = 0;
    unsigned char prev[N] = {0};
    for (int step = 0; step < STEPS; step++) {
        CtTensor in = {{{2, {N, 3}}, CT_F32}, ones}, out;
        CHECKF(backend_run_once(&ct_backend_ref, &g, &state, &in, 1, &out, NULL, &err) == 0, "%s", err.msg);
        const float *y = out.data;
        for (int s = 0; s < N; s++) {
            unsigned char d = y[s * 3] == 0;
            CHECK(y[s * 3] == y[s * 3 + 1] && y[s * 3] == y[s * 3 + 2]);
            dropped += d;
            changed += step > 0 && d != prev[s];
            prev[s] = d;
        }
        tensor_free(&out);
    }
    double frac = (double)dropped / (N * STEPS);
    printf("drop_path p=0.3: dropped %.3f of %d sample-steps; %d masks changed between steps\n", frac, N * STEPS,
           changed);
    CHECKF(fabs(frac - 0.3) < 0.032, "dropped fraction %.4f", frac);
    CHECKF(changed > N * (STEPS - 1) / 5, "masks barely change between steps (%d)", changed);
    state_free(&state);
    graph_free(&g);
}

/* The largest drop_path rate in model m's training graph, -1 when none. */
static double max_drop_path(const char *model, double rate)
{
    ModelSpec spec = {.batch_size = 2, .training = 1, .args = model_args_default()};
    spec.args.img_size = 32;
    spec.args.drop_path_rate = rate;
    Graph g;
    CtErr err;
    double most = -1;
    CHECKF(model_build(model_find(model), &spec, &g, &err) == 0, "%s: %s", model, err.msg);
    for (int i = 0; i < g.nnodes; i++)
        if (g.nodes[i].op == CT_OP_drop_path && g.nodes[i].fattr[0] > most)
            most = g.nodes[i].fattr[0];
    graph_free(&g);
    return most;
}

/* A run that gives no --drop-path trains with the model's own default, as
 * train.py's None leaves create_model's: Swin's 0.1 (linspace over the
 * blocks, the last block at 0.1), none in most families; a given rate,
 * 0 included, is the run's. */
static void test_drop_path_default(void)
{
    double swin = max_drop_path("swin_tiny_patch4_window7_224", -1);
    CHECKF(fabs(swin - 0.1) < 1e-12, "swin's default drop_path: last block %g", swin);
    CHECKF(max_drop_path("swin_tiny_patch4_window7_224", 0) < 0, "swin at --drop-path 0 still drops");
    CHECKF(fabs(max_drop_path("swin_tiny_patch4_window7_224", 0.3) - 0.3) < 1e-12, "swin at --drop-path 0.3");
    CHECKF(max_drop_path("test_vit", -1) < 0, "test_vit's default drops");
}

int main(void)
{
    test_drop_path_default();
    test_drop_path_reproducible();
    test_drop_path_rate();
    test_weight_decay_groups();
    test_update_rules();
    test_grads_outputs();
    test_loss_goes_down();
    return check_done("test_train");
}
