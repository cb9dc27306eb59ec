/* Fusion analysis: small hand-built graphs give the expected steps and
 * materialised values (a chain in one kernel, a library epilogue, a batch
 * norm's epilogue, a group that may not reach past a library step, sibling
 * steps merged, a node read only in a later step sunk into it), and every model's eval and training graphs (f32, amp,
 * channels last) pass the independent check with fewer kernels than nodes,
 * the optimizer in at most two launches writing parameters in place. */
#include <string.h>

#include "check.h"
#include "graph_nodes.h"
#include "codegen/kir.h"
#include "ir/buf.h"
#include "model_graphs.h"
#include "passes/fuse.h"

static ValueId input(Graph *g, const char *name, int ndim, const int64_t *d)
{
    return graph_add_value(g, (CtType){shape_make(ndim, d), CT_F32}, CT_ROLE_INPUT, name);
}

static ValueId unary(Graph *g, CtOp op, ValueId x) { return test_node(g, op, 1, &x, NULL, 0, NULL, 0); }
static ValueId binary(Graph *g, CtOp op, ValueId x, ValueId y)
{
    return test_node(g, op, 2, (ValueId[]){x, y}, NULL, 0, NULL, 0);
}

static int plan_ok(const Graph *g, FusePlan *p)
{
    CtErr err;
    if (fuse_plan(g, p, &err)) {
        CHECKF(0, "fuse_plan: %s", err.msg);
        return 0;
    }
    CHECKF(fuse_check(g, p, &err) == 0, "fuse_check: %s", err.msg);
    return 1;
}

static int step_of_value(const Graph *g, const FusePlan *p, ValueId v) { return p->step_of[g->values[v].producer]; }

/* relu(x + b) * 2 + 1: one kernel; only the result is written, unless the
 * relu is an output too. */
static void test_chain(void)
{
    for (int relu_out = 0; relu_out < 2; relu_out++) {
        Graph g;
        FusePlan p;
        graph_init(&g);
        ValueId x = input(&g, "x", 4, (int64_t[]){2, 3, 4, 4}), b = input(&g, "b", 3, (int64_t[]){3, 1, 1});
        ValueId a = binary(&g, CT_OP_add, x, b), r = unary(&g, CT_OP_relu, a);
        ValueId y = test_node(&g, CT_OP_scale_shift, 1, &r, NULL, 0, (double[]){2, 1}, 2);
        graph_mark_output(&g, y);
        if (relu_out)
            graph_mark_output(&g, r);
        if (plan_ok(&g, &p)) {
            CHECK(p.nsteps == 1 && p.kernels_after == 1 && p.kernels_before == 3);
            CHECK(p.steps[0].kind == FUSE_ELEMENTWISE && p.steps[0].n == 3 && p.steps[0].numel == 96);
            CHECK(!p.materialised[a] && p.materialised[r] == relu_out && p.materialised[y]);
            CtBuf dump = {0};
            fuse_dump(&g, &p, &dump);
            const char *want = relu_out ? "k0    elementwise x96: add(%2) relu(%3) scale_shift(%4) -> %3 %4\n"
                                        : "k0    elementwise x96: add(%2) relu(%3) scale_shift(%4) -> %4\n";
            CHECKF(dump.s && strstr(dump.s, "fuse: 1 steps, 1 kernels (3 before fusion, one per node)\n") &&
                       strstr(dump.s, want),
                   "%s", dump.s ? dump.s : "");
            buf_free(&dump);
            fuse_free(&p);
        }
        graph_free(&g);
    }
}

/* matmul -> + bias -> gelu: one library step with a bias and activation
 * epilogue; the pre-activation is written when something else reads it. */
static void test_epilogue(void)
{
    for (int aux = 0; aux < 2; aux++) {
        Graph g;
        FusePlan p;
        graph_init(&g);
        ValueId x = input(&g, "x", 2, (int64_t[]){4, 8}), w = input(&g, "w", 2, (int64_t[]){8, 6});
        ValueId bias = input(&g, "bias", 1, (int64_t[]){6});
        ValueId m = binary(&g, CT_OP_matmul, x, w), a = binary(&g, CT_OP_add, m, bias);
        ValueId y = test_node(&g, CT_OP_gelu, 1, &a, (int64_t[]){0}, 1, NULL, 0);
        graph_mark_output(&g, y);
        ValueId z = aux ? binary(&g, CT_OP_mul, a, y) : -1;
        if (aux)
            graph_mark_output(&g, z);
        if (plan_ok(&g, &p)) {
            CHECK(p.steps[0].kind == FUSE_LIBRARY && p.steps[0].n == 3);
            CHECK(p.steps[0].epilogue == (FUSE_EPI_BIAS | FUSE_EPI_ACT));
            CHECK(!p.materialised[m] && p.materialised[a] == aux && p.materialised[y]);
            CHECK(p.nsteps == 1 + aux && p.kernels_after == 1 + aux);
            fuse_free(&p);
        }
        graph_free(&g);
    }
}

/* batch_norm (eval) -> + residual -> relu: one library step with a residual
 * and activation epilogue, nothing before the relu written; a per-channel
 * add after a batch_norm is no epilogue of it (a batch_norm has its own
 * shift), so it runs as a kernel of its own. */
static void test_bn_epilogue(void)
{
    for (int bias = 0; bias < 2; bias++) {
        Graph g;
        FusePlan p;
        graph_init(&g);
        ValueId x = input(&g, "x", 4, (int64_t[]){2, 4, 3, 3});
        ValueId r = bias ? input(&g, "b", 3, (int64_t[]){4, 1, 1}) : input(&g, "r", 4, (int64_t[]){2, 4, 3, 3});
        ValueId in[5] = {x};
        for (int k = 1; k < 5; k++)
            in[k] = input(&g, "c", 1, (int64_t[]){4});
        ValueId y = test_node(&g, CT_OP_batch_norm, 5, in, (int64_t[]){0, 0}, 2, (double[]){0.1, 1e-5}, 2);
        ValueId a = binary(&g, CT_OP_add, y, r), z = unary(&g, CT_OP_relu, a);
        graph_mark_output(&g, z);
        if (plan_ok(&g, &p)) {
            if (bias) {
                CHECK(p.steps[0].kind == FUSE_LIBRARY && p.steps[0].n == 1 && !p.steps[0].epilogue);
                CHECK(p.nsteps == 2 && p.materialised[y]);
            } else {
                CHECK(p.nsteps == 1 && p.steps[0].kind == FUSE_LIBRARY && p.steps[0].n == 3);
                CHECK(p.steps[0].epilogue == (FUSE_EPI_RESIDUAL | FUSE_EPI_ACT));
                CHECK(!p.materialised[y] && !p.materialised[a] && p.materialised[z]);
            }
            fuse_free(&p);
        }
        graph_free(&g);
    }
}

/* a = relu(x); s = softmax(a); y = a * s: y may not join a's group (that
 * step would read s before the softmax runs), so a is written. */
static void test_no_cycle(void)
{
    Graph g;
    FusePlan p;
    graph_init(&g);
    ValueId x = input(&g, "x", 2, (int64_t[]){4, 8});
    ValueId a = unary(&g, CT_OP_relu, x), s = test_node(&g, CT_OP_softmax, 1, &a, (int64_t[]){1}, 1, NULL, 0);
    ValueId y = binary(&g, CT_OP_mul, a, s);
    graph_mark_output(&g, y);
    if (plan_ok(&g, &p)) {
        CHECK(p.nsteps == 3 && p.kernels_after == 3);
        CHECK(step_of_value(&g, &p, a) < step_of_value(&g, &p, s) &&
              step_of_value(&g, &p, s) < step_of_value(&g, &p, y));
        CHECK(p.materialised[a] && p.materialised[s] && p.materialised[y]);
        fuse_free(&p);
    }
    graph_free(&g);
}

/* Reshapes alone are views (no kernel); a corrupted plan is caught. */
static void test_view_and_check(void)
{
    Graph g;
    FusePlan p;
    CtErr err;
    graph_init(&g);
    ValueId x = input(&g, "x", 2, (int64_t[]){4, 8});
    ValueId s = test_node(&g, CT_OP_softmax, 1, &x, (int64_t[]){1}, 1, NULL, 0);
    ValueId r = test_node(&g, CT_OP_reshape, 1, &s, (int64_t[]){1, 32}, 2, NULL, 0);
    ValueId t = test_node(&g, CT_OP_softmax, 1, &r, (int64_t[]){0}, 1, NULL, 0);
    graph_mark_output(&g, t);
    if (plan_ok(&g, &p)) {
        CHECK(p.nsteps == 3 && p.kernels_after == 2 && p.steps[1].view && p.steps[1].launch == -1);
        p.materialised[s] = 0;
        CHECK(fuse_check(&g, &p, &err) == -1 && strstr(err.msg, "materialisation"));
        p.materialised[s] = 1;
        p.step_of[p.nodes[0]] = 2;
        CHECK(fuse_check(&g, &p, &err) == -1);
        fuse_free(&p);
    }
    graph_free(&g);
}

/* Every model, eval and train (SGD, AdamW), f32 and amp, channels last
 * with and without the cheap recomputation: a valid plan with fewer
 * kernels than nodes; training updates in few launches (recomputed nodes
 * read some parameters late in the backward, whose updates then wait there
 * with their assigns), every batch norm's num_batches_tracked + 1 in one,
 * under amp every parameter's cast in one (less than SOURCE_BATCH_BYTES)
 * and every unscale of a channels-last gradient the update reads in the
 * parameter's layout in one, no copy left for a parameter. */
static void test_models(void)
{
    static const char *const models[] = {"test_resnet", "test_vit", "test_efficientnet", "test_convnext"};
    for (int m = 0; m < 4; m++)
        for (int mode = 0; mode < 6; mode++) {
            Graph g;
            FusePlan p;
            OptimSpec o = {.kind = mode == 2 ? CT_OPT_ADAMW : CT_OPT_SGD, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999,
                           .eps = 1e-8, .weight_decay = 0.05};
            CtDType amp = mode < 3 ? CT_F32 : (m & 1) || mode == 5 ? CT_BF16 : CT_F16;
            GraphSpec spec = {.training = mode > 0, .amp = amp, .channels_last = mode >= 4, .remat = mode == 5, .opt = &o};
            if (model_graph(models[m], &spec, &g))
                continue;
            if (plan_ok(&g, &p)) {
                CHECKF(p.kernels_after < p.kernels_before, "%s mode %d: %d kernels after, %d before", models[m], mode,
                       p.kernels_after, p.kernels_before);
                int update_launch[2] = {-1, -1}, launches = 0, param_copies = 0, counters = 0, counter_launch = -1;
                int cast_launch[2] = {-1, -1}, cast_launches = 0, unscale_launch = -1, unscales = 0;
                for (int s = 0; s < p.nsteps; s++) {
                    const Node *n0 = &g.nodes[p.nodes[p.steps[s].first]];
                    if (p.steps[s].n == 2 && n0->op == CT_OP_cast && g.nodes[p.nodes[p.steps[s].first + 1]].op == CT_OP_div) {
                        CHECKF(unscale_launch < 0 || p.steps[s].launch == unscale_launch,
                               "%s mode %d: gradients unscaled apart from their updates in several launches",
                               models[m], mode);
                        unscale_launch = p.steps[s].launch;
                        unscales++;
                    }
                    for (int j = 0; j < p.steps[s].n; j++) {
                        const Node *n = &g.nodes[p.nodes[p.steps[s].first + j]];
                        if (n->op == CT_OP_cast && g.values[n->in[0]].role == CT_ROLE_PARAM &&
                            p.steps[s].launch != cast_launch[0] && p.steps[s].launch != cast_launch[1])
                            cast_launch[cast_launches++ & 1] = p.steps[s].launch;
                        if (n->op == CT_OP_scale_shift && g.values[n->out[0]].type.dtype == CT_I64) {
                            CHECKF(counter_launch < 0 || p.steps[s].launch == counter_launch,
                                   "%s mode %d: batch norm's num_batches_tracked in several launches", models[m], mode);
                            counter_launch = p.steps[s].launch;
                            counters++;
                        }
                        if (n->op == CT_OP_sgd_update || n->op == CT_OP_adamw_update) {
                            int l = p.steps[s].launch;
                            if (l != update_launch[0] && l != update_launch[1])
                                update_launch[launches++ & 1] = l;
                        }
                        param_copies += n->op == CT_OP_assign && p.steps[s].kind == FUSE_COPY &&
                                        g.values[n->in[0]].role == CT_ROLE_PARAM;
                    }
                }
                CHECKF(launches <= 2 && param_copies == 0, "%s mode %d: updates in %d launches, %d param copies",
                       models[m], mode, launches, param_copies);
                CHECKF(counters > 1 || (m & 1) || mode == 0, "%s mode %d: %d batch norm counters", models[m], mode,
                       counters);
                CHECKF(unscales > 1 || mode < 4 || m == 1, "%s mode %d: %d gradients unscaled apart", models[m], mode,
                       unscales);
                CHECKF(cast_launches <= 1 && (cast_launches == 1) == (amp != CT_F32),
                       "%s mode %d: parameters cast in %d launches", models[m], mode, cast_launches);
                if (m == 0)
                    printf("%s mode %d: %d nodes -> %d kernels\n", models[m], mode, p.kernels_before, p.kernels_after);
                fuse_free(&p);
            }
            graph_free(&g);
        }
}

/* test_resnet's and test_efficientnet's eval graphs with their batch
 * norms folded: every filter times its batch norm's scale in one launch
 * (less than SOURCE_BATCH_BYTES of filters), at the first of those steps,
 * after every step making a scale (their own launch, from state alone). */
static void test_folds(void)
{
    static const char *const models[] = {"test_resnet", "test_efficientnet"};
    for (int m = 0; m < 2; m++) {
        Graph g;
        FusePlan p;
        if (model_graph(models[m], &(GraphSpec){.bn_fold = 1}, &g))
            continue;
        if (plan_ok(&g, &p)) {
            int launch = -1, launches = 0, folds = 0, first = -1, last_scale = -1;
            for (int s = 0; s < p.nsteps; s++)
                for (int j = 0; j < p.steps[s].n; j++) {
                    const Node *n = &g.nodes[p.nodes[p.steps[s].first + j]];
                    if (n->op != CT_OP_mul || g.values[n->in[0]].role != CT_ROLE_PARAM ||
                        g.values[n->in[0]].type.shape.ndim != 4 || g.values[n->in[1]].producer < 0)
                        continue;
                    launches += p.steps[s].launch != launch;
                    launch = p.steps[s].launch;
                    folds++;
                    first = first < 0 ? s : first;
                    int scale = p.step_of[g.values[n->in[1]].producer];
                    last_scale = scale > last_scale ? scale : last_scale;
                    CHECKF(p.steps[scale].launch != launch, "%s: a filter folded in the launch making its scale",
                           models[m]);
                }
            CHECKF(folds > 10 && launches == 1 && last_scale < first,
                   "%s: %d filters folded in %d launches, the first at step %d, a scale made at step %d", models[m],
                   folds, launches, first, last_scale);
            printf("%s eval, batch norms folded: %d filters folded in %d launch, %d kernels\n", models[m], folds,
                   launches, p.kernels_after);
            fuse_free(&p);
        }
        graph_free(&g);
    }
}

/* Adjacent steps over the same elements loading the same input merge: an
 * activation's recomputation beside its gradient is one kernel computing
 * their erf once. Not across another step, not a step of views only, not
 * over other elements. */
static void test_siblings(void)
{
    for (int c = 0; c < 4; c++) {
        Graph g;
        FusePlan p;
        graph_init(&g);
        ValueId x = input(&g, "x", 2, (int64_t[]){6, 8}), dy = input(&g, "dy", 2, (int64_t[]){6, 8});
        ValueId w = input(&g, "w", 2, (int64_t[]){8, 8}), b = input(&g, "b", 1, (int64_t[]){8});
        ValueId first = c == 2   ? test_node(&g, CT_OP_reshape, 1, &x, (int64_t[]){2, 8, 6}, 3, NULL, 0)
                        : c == 3 ? unary(&g, CT_OP_exp, b)
                                 : test_node(&g, CT_OP_act_grad, 2, (ValueId[]){x, dy}, (int64_t[]){CT_OP_gelu, 0}, 2,
                                             NULL, 0);
        graph_mark_output(&g, first);
        if (c == 1) /* a library step between them */
            graph_mark_output(&g, binary(&g, CT_OP_matmul, dy, w));
        ValueId second =
            c == 3 ? binary(&g, CT_OP_add, x, b) : test_node(&g, CT_OP_gelu, 1, &x, (int64_t[]){0}, 1, NULL, 0);
        graph_mark_output(&g, second);
        if (!plan_ok(&g, &p)) {
            graph_free(&g);
            continue;
        }
        int merged = step_of_value(&g, &p, first) == step_of_value(&g, &p, second);
        CHECKF(merged == (c == 0), "case %d: %d steps, merged %d", c, p.nsteps, merged);
        if (c == 0) {
            KirKernel k;
            CtErr err;
            int erfs = 0;
            CHECKF(kir_lower(&g, &p, p.steps[0].launch, (KirOptions){KIR_F32, 0}, &k, &err) == 0, "%s", err.msg);
            for (int j = 0; j < k.loops[0].nins; j++)
                erfs += k.loops[0].ins[j].op == KIR_ERF;
            CHECKF(erfs == 1, "gelu and its gradient: %d erf instructions", erfs);
            kir_free(&k);
        }
        fuse_free(&p);
        graph_free(&g);
    }
}

/* Squeeze-excitation's backward: y = dy * s (s per channel) is read only
 * by the add of the pooled branch's gradient, after a reduction of dy * x:
 * y sinks into the add's step and is never stored. Not when y is an
 * output, nor when it would load two tensors more there (y = dy + x). */
static void test_sink(void)
{
    for (int c = 0; c < 3; c++) {
        Graph g;
        FusePlan p;
        graph_init(&g);
        const int64_t full[] = {2, 4, 3, 3}, per_channel[] = {2, 4, 1, 1};
        ValueId x = input(&g, "x", 4, full), dy = input(&g, "dy", 4, full), s = input(&g, "s", 4, per_channel);
        ValueId y = binary(&g, c == 2 ? CT_OP_add : CT_OP_mul, dy, c == 2 ? x : s);
        ValueId r = test_node(&g, CT_OP_reduce_sum, 1, (ValueId[]){binary(&g, CT_OP_mul, dy, x)}, (int64_t[]){12, 1}, 2,
                              NULL, 0);
        ValueId w = binary(&g, CT_OP_add, y, r);
        graph_mark_output(&g, w);
        if (c == 1)
            graph_mark_output(&g, y);
        if (!plan_ok(&g, &p)) {
            graph_free(&g);
            continue;
        }
        int sunk = step_of_value(&g, &p, y) == step_of_value(&g, &p, w);
        CHECKF(sunk == (c == 0), "case %d: y in the add's step %d", c, sunk);
        CHECKF(p.materialised[y] == (c != 0), "case %d: y stored %d", c, p.materialised[y]);
        CHECKF(p.nsteps == 3, "case %d: %d steps (the products, the reduction, the add)", c, p.nsteps);
        fuse_free(&p);
        graph_free(&g);
    }
}

int main(void)
{
    test_chain();
    test_epilogue();
    test_bn_epilogue();
    test_no_cycle();
    test_view_and_check();
    test_siblings();
    test_sink();
    test_models();
    test_folds();
    return check_done("test_fuse");
}
