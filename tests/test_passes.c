/* Graph-to-graph passes: bn_fold keeps every model's eval logits (within
 * 1e-5 relative on the ref backend, with BN statistics and affine
 * parameters made non-trivial) and leaves no foldable batch_norm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/registry.h"
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
    ModelSpec spec = {.batch_size = 2, .args = {.num_classes = 10, .img_size = size}};
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
    int64_t n = 2 * 3 * size * size;
    float *x = malloc(sizeof *x * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)sin(0.1 * (double)i);
    CtTensor in = {{{4, {2, 3, size, size}}, CT_F32}, x}, a, b;
    CHECK(ct_backend_ref.run(&g, &s, &in, 1, &a, &err) == 0);
    CHECKF(ct_backend_ref.run(&f, &s, &in, 1, &b, &err) == 0, "%s: %s", model, err.msg);
    double d = 0, r = 0;
    for (int i = 0; i < 20; i++) {
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

int main(void)
{
    test_bn_fold("test_resnet", 64, 1);
    test_bn_fold("resnet50d", 32, 1);
    test_bn_fold("test_efficientnet", 64, 1);
    test_bn_fold("mobilenetv3_large_100", 32, 1);
    test_bn_fold("test_convnext", 64, 0);
    test_bn_fold("test_vit", 64, 0);
    return check_done("test_passes");
}
