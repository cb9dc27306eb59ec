/* Graph-to-graph passes: bn_fold keeps every model's eval logits (within
 * 1e-5 relative on the ref backend, with BN statistics and affine
 * parameters made non-trivial) and leaves no foldable batch_norm; layout
 * makes conv activations NHWC with at most two transposes on resnet50 and
 * keeps the training step's loss and gradients. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "runtime/backend.h"

static int count_op(const Graph *g, CtOp op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

/* BN weights 1 + 0.2 u, biases and running means 0.1 u, running vars in
 * [0.5, 1.5), like the reference generator's perturbation. */
static void perturb(CtState *s)
{
    uint32_t x = 99;
    for (int i = 0; i < s->n; i++) {
        const char *name = s->e[i].name;
        if (s->e[i].type.dtype != CT_F32)
            continue;
        int w = strstr(name, "bn") && strstr(name, ".weight"), b = strstr(name, ".bias") != NULL;
        int mean = strstr(name, "running_mean") != NULL, var = strstr(name, "running_var") != NULL;
        float *p = state_data(s, i);
        for (int64_t j = 0; j < shape_numel(&s->e[i].type.shape); j++) {
            x = x * 1664525u + 1013904223u;
            double u = (x >> 8) / 16777216.0 - 0.5;
            if (w)
                p[j] = (float)(1 + 0.4 * u);
            else if (b || mean)
                p[j] = (float)(0.2 * u);
            else if (var)
                p[j] = (float)(1 + u);
        }
    }
}

static void test_bn_fold(const char *model, int size, int expect_fold)
{
    ModelSpec spec = {.batch_size = 1, .args = {.num_classes = 10, .img_size = size}};
    Graph g, f;
    CtErr err;
    if (model_build(model_find(model), &spec, &g, &err)) {
        CHECKF(0, "%s: %s", model, err.msg);
        return;
    }
    CHECKF(bn_fold(&g, &f, &err) == 0, "%s: %s", model, err.msg);
    int before = count_op(&g, CT_OP_batch_norm), after = count_op(&f, CT_OP_batch_norm);
    CHECKF(expect_fold ? before > 0 && after == 0 : after == before, "%s: %d batch_norms before, %d after", model,
           before, after);
    CtState s;
    state_create(&s, &g);
    state_init(&s, 11);
    perturb(&s);
    int64_t n = 3 * size * size;
    float *x = malloc(sizeof *x * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)sin(0.1 * (double)i);
    CtTensor in = {{{4, {1, 3, size, size}}, CT_F32}, x}, a, b;
    CHECK(backend_run_once(&ct_backend_ref, &g, &s, &in, 1, &a, NULL, &err) == 0);
    CHECKF(backend_run_once(&ct_backend_ref, &f, &s, &in, 1, &b, NULL, &err) == 0, "%s: %s", model, err.msg);
    double d = 0, r = 0;
    for (int i = 0; i < 10; i++) {
        double u = ((float *)a.data)[i], v = ((float *)b.data)[i];
        d += (u - v) * (u - v);
        r += u * u;
    }
    CHECKF(sqrt(d / r) < 1e-5, "%s: folded logits differ by %.2e", model, sqrt(d / r));
    printf("%s: %d batch_norms folded, logits within %.1e\n", model, before - after, sqrt(d / r));
    tensor_free(&a);
    tensor_free(&b);
    free(x);
    state_free(&s);
    graph_free(&f);
    graph_free(&g);
}

static int count_layout(const Graph *g, CtLayout l, int ndim)
{
    int n = 0;
    for (int v = 0; v < g->nvalues; v++)
        n += g->values[v].layout == l && g->values[v].type.shape.ndim == ndim;
    return n;
}

static void test_layout_counts(const char *model, int training)
{
    ModelSpec spec = {.batch_size = 2, .training = training, .args = model_args_default()};
    Graph g, l;
    CtErr err;
    TrainStep ts;
    CHECK(model_build(model_find(model), &spec, &g, &err) == 0);
    if (training)
        CHECK(train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1},
                               &(OptimSpec){.kind = CT_OPT_SGD, .momentum = 0.9}, &ts, &err) == 0);
    CHECKF(layout_channels_last(&g, &l, &err) == 0, "%s", err.msg);
    int transposes = count_op(&l, CT_OP_to_layout);
    printf("%s %s: %d transposes, %d NHWC activations\n", model, training ? "train" : "eval", transposes,
           count_layout(&l, CT_LAYOUT_CHANNELS_LAST, 4));
    CHECKF(transposes <= 2, "%s: %d transposes", model, transposes);
    CHECK(count_layout(&l, CT_LAYOUT_CHANNELS_LAST, 4) > 50);
    for (int i = 0; i < l.nnodes; i++)
        if (l.nodes[i].op == CT_OP_conv2d)
            CHECK(l.values[l.nodes[i].out[0]].layout == CT_LAYOUT_CHANNELS_LAST);
    if (training)
        train_step_free(&ts);
    graph_free(&l);
    graph_free(&g);
}

/* The training step (the loss, the updated parameters and the momentum
 * buffers, which hold the gradients) with and without the layout pass. */
static void test_layout_same_step(const char *model)
{
    ModelSpec spec = {.batch_size = 2, .training = 1, .args = {.num_classes = 10, .img_size = 32}};
    Graph g, l;
    CtErr err;
    TrainStep ts;
    CHECK(model_build(model_find(model), &spec, &g, &err) == 0);
    CHECK(train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1},
                           &(OptimSpec){.kind = CT_OPT_SGD, .momentum = 0.9}, &ts, &err) == 0);
    CHECKF(layout_channels_last(&g, &l, &err) == 0, "%s", err.msg);
    CtState s1, s2;
    state_create(&s1, &g);
    state_init(&s1, 5);
    perturb(&s1);
    state_create(&s2, &l);
    memcpy(s2.data, s1.data, s1.nbytes);
    static float x[2 * 3 * 32 * 32];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = (float)cos(0.3 * (double)i);
    int64_t y[2] = {3, 7};
    float lr = 0.1f, scale = 1;
    CtTensor in[4] = {{{{4, {2, 3, 32, 32}}, CT_F32}, x}, {{{1, {2}}, CT_I64}, y}, {{{0}, CT_F32}, &lr},
                      {{{0}, CT_F32}, &scale}};
    CtTensor *a = calloc((size_t)g.noutputs, sizeof *a), *b = calloc((size_t)l.noutputs, sizeof *b);
    CHECK(backend_run_once(&ct_backend_ref, &g, &s1, in, 4, a, NULL, &err) == 0);
    CHECKF(backend_run_once(&ct_backend_ref, &l, &s2, in, 4, b, NULL, &err) == 0, "%s", err.msg);
    double worst = 0;
    for (int k = 0; k < g.noutputs && k < l.noutputs; k++) {
        int64_t n = shape_numel(&a[k].type.shape);
        double d = 0, r = 0;
        for (int64_t i = 0; i < n; i++) {
            double u = ((float *)a[k].data)[i], v = ((float *)b[k].data)[i];
            d += (u - v) * (u - v);
            r += u * u;
        }
        worst = fmax(worst, r > 0 ? sqrt(d / r) : sqrt(d));
        tensor_free(&a[k]);
        tensor_free(&b[k]);
    }
    CHECKF(worst < 1e-5 && memcmp(s1.data, s2.data, s1.nbytes) == 0, "%s: outputs differ by %.2e", model, worst);
    free(a);
    free(b);
    state_free(&s1);
    state_free(&s2);
    train_step_free(&ts);
    graph_free(&l);
    graph_free(&g);
}

/* linear -> BN1d and BN -> unpadded conv fold too; BN -> padded conv must not. */
static void test_bn_fold_other_patterns(void)
{
    for (int pad = 0; pad < 2; pad++) {
        Graph g, f;
        Builder b;
        CtErr err;
        graph_init(&g);
        b_init(&b, &g, 0);
        ValueId x = b_input(&b, "x", (CtShape){4, {2, 3, 6, 6}}, CT_F32);
        x = nn_conv2d(&b, "c", nn_batch_norm(&b, "bn0", x, (BNOpts){0}), 5, 3, (ConvOpts){.padding = pad, .bias = 1});
        x = nn_linear(&b, "fc", f_global_avg_pool(&b, x), 4, (LinearOpts){0});
        graph_mark_output(&g, nn_batch_norm(&b, "bn1", x, (BNOpts){0}));
        CHECK(b_finish(&b, &err) == 0);
        CHECKF(bn_fold(&g, &f, &err) == 0, "%s", err.msg);
        CHECKF(count_op(&f, CT_OP_batch_norm) == pad, "pad %d: %d batch_norms left", pad, count_op(&f, CT_OP_batch_norm));
        CtState s;
        state_create(&s, &g);
        state_init(&s, 2);
        perturb(&s);
        for (int i = 0; i < s.n; i++) /* perturb() knows timm's BN names; these are bn0/bn1 */
            if (strstr(s.e[i].name, "weight") && s.e[i].type.shape.ndim == 1)
                for (int64_t k = 0; k < s.e[i].type.shape.d[0]; k++)
                    ((float *)state_data(&s, i))[k] = (float)(0.7 + 0.1 * (double)k);
        float xv[2 * 3 * 36];
        for (int i = 0; i < 2 * 3 * 36; i++)
            xv[i] = (float)cos(0.7 * i);
        CtTensor in = {{{4, {2, 3, 6, 6}}, CT_F32}, xv}, a, c;
        CHECK(backend_run_once(&ct_backend_ref, &g, &s, &in, 1, &a, NULL, &err) == 0);
        CHECK(backend_run_once(&ct_backend_ref, &f, &s, &in, 1, &c, NULL, &err) == 0);
        double d = 0, r = 0;
        for (int i = 0; i < 8; i++) {
            double u = ((float *)a.data)[i], v = ((float *)c.data)[i];
            d += (u - v) * (u - v);
            r += u * u;
        }
        CHECKF(sqrt(d / r) < 1e-5, "pad %d: %.2e", pad, sqrt(d / r));
        tensor_free(&a);
        tensor_free(&c);
        state_free(&s);
        graph_free(&f);
        graph_free(&g);
    }
}

int main(void)
{
    test_bn_fold_other_patterns();
    test_layout_counts("resnet50", 0);
    test_layout_counts("resnet50", 1);
    test_layout_counts("efficientnet_b0", 1);
    test_layout_counts("convnext_tiny", 1);
    test_layout_same_step("test_resnet");
    test_layout_same_step("test_convnext");
    /* every model with a BatchNorm to fold, at a small size */
    static const char *const folded[] = {"test_resnet", "resnet18", "resnet26", "resnet34", "resnet50", "resnet50d",
                                         "test_efficientnet", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
                                         "efficientnet_b3", "mobilenetv3_large_100", "mobilenetv3_small_100"};
    for (size_t i = 0; i < sizeof folded / sizeof folded[0]; i++)
        test_bn_fold(folded[i], 32, 1);
    test_bn_fold("test_convnext", 64, 0);
    test_bn_fold("test_vit", 64, 0);
    return check_done("test_passes");
}
