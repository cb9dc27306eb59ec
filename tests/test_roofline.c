/* The roofline of a cuda launch plan (codegen/cuda/roofline.h): over the
 * four test models' eval graphs the steps' FLOPs add up to twice the stats
 * pass's multiply-accumulates (attention counted as its matmuls), a
 * training step's to at least twice its forward's; and on small graphs the
 * bytes and floors are the ones counted by hand, a view moving none, a
 * bias gradient in its GEMM's epilogue reading dy once, a batch norm
 * output another step computes from its x counted as no store; the cuda
 * profile's floors beside its times. */
#include <stdio.h>

#include "check.h"
#include "model_graphs.h"
#include "codegen/cuda/roofline.h"
#include "runtime/cuda/step_profile.h"
#include "passes/stats.h"

static double total_flops(const Graph *g, const RooflineDevice *d, int *ok)
{
    LaunchPlan lp;
    CtErr err;
    double flops = 0;
    *ok = launch_plan(g, 132, &lp, &err) == 0;
    CHECKF(*ok, "%s", err.msg);
    for (int s = 0; *ok && s < lp.nsteps; s++)
        flops += roofline_step(&lp, g, s, d, 0).flops;
    if (*ok)
        launch_plan_free(&lp);
    return flops;
}

static void test_models(const RooflineDevice *d)
{
    static const char *const models[] = {"test_resnet", "test_vit", "test_efficientnet", "test_convnext"};
    for (int m = 0; m < 4; m++) {
        Graph g;
        GraphStats st;
        CtErr err;
        int ok;
        if (model_graph(models[m], &(GraphSpec){0}, &g))
            continue;
        CHECKF(graph_stats(&g, &(StatsOptions){.count_attention = 1}, &st, &err) == 0, "%s", err.msg);
        double eval = total_flops(&g, d, &ok);
        CHECKF(ok && eval == 2.0 * (double)st.macs, "%s: roofline %.0f FLOPs, stats 2 x %lld MACs", models[m], eval,
               (long long)st.macs);
        graph_free(&g);
        if (model_graph(models[m], &(GraphSpec){.training = 1}, &g))
            continue;
        double train = total_flops(&g, d, &ok);
        CHECKF(ok && train >= 2 * eval && train <= 3.5 * eval, "%s: a training step %.0f FLOPs, its forward %.0f",
               models[m], train, eval);
        printf("test_roofline: %s: eval %.3f GFLOP (stats %.3f GMACs), training step %.3f GFLOP\n", models[m],
               eval / 1e9, st.macs / 1e9, train / 1e9);
        graph_free(&g);
    }
}

static ValueId value(Graph *g, int nd, const int64_t *d)
{
    CtType t = {.dtype = CT_F32};
    t.shape.ndim = nd;
    for (int i = 0; i < nd; i++)
        t.shape.d[i] = d[i];
    return graph_add_value(g, t, CT_ROLE_INPUT, NULL);
}

static ValueId node(Graph *g, CtOp op, ValueId a, ValueId b)
{
    CtErr err;
    int at = graph_add_node(g, &(Node){.op = op, .nin = 2, .in = {a, b}}, "t", &err);
    CHECKF(at >= 0, "%s", err.msg);
    return at >= 0 ? g->nodes[at].out[0] : -1;
}

/* x [4, 8] -> x + x -> linear by w [16, 8] (both inputs) -> output [4, 16]: an
 * elementwise kernel reading x once (128 bytes) and storing its sum (read
 * by the GEMM: 128), then the GEMM reading the sum and w (128 + 512),
 * storing the output (256), 2 x 4 x 8 x 16 FLOPs. */
static void test_by_hand(const RooflineDevice *d)
{
    Graph g;
    LaunchPlan lp;
    CtErr err;
    graph_init(&g);
    ValueId x = value(&g, 2, (int64_t[]){4, 8}), w = value(&g, 2, (int64_t[]){16, 8});
    ValueId y = node(&g, CT_OP_linear, node(&g, CT_OP_add, x, x), w);
    graph_mark_output(&g, y);
    if (launch_plan(&g, 132, &lp, &err)) {
        CHECKF(0, "%s", err.msg);
        graph_free(&g);
        return;
    }
    CHECKF(lp.nsteps == 2 && lp.steps[0].kind == LP_KERNEL && lp.steps[1].kind == LP_GEMM, "%d steps", lp.nsteps);
    if (lp.nsteps == 2) {
        RooflineStep a = roofline_step(&lp, &g, 0, d, 0), b = roofline_step(&lp, &g, 1, d, 0);
        CHECKF(a.flops == 0 && a.bytes == 256 && !a.compute_bound && a.floor_s == 256 / d->bytes_per_s,
               "the add: %g FLOPs, %g bytes, floor %g s", a.flops, a.bytes, a.floor_s);
        CHECKF(b.flops == 1024 && b.bytes == 896, "the GEMM: %g FLOPs, %g bytes", b.flops, b.bytes);
        double compute = 1024 / d->f32, memory = 896 / d->bytes_per_s; /* f32, TF32 not allowed */
        CHECKF(b.floor_s == (compute > memory ? compute : memory) && b.compute_bound == (compute > memory),
               "the GEMM's floor %g s", b.floor_s);
        RooflineStep t = roofline_step(&lp, &g, 1, d, 1);
        CHECK(t.floor_s == (1024 / d->tf32 > memory ? 1024 / d->tf32 : memory));
        CtBuf out = {0};
        roofline_report(&lp, &g, d, 0, &out);
        CHECKF(out.s && strstr(out.s, "total: 2 steps, 0.000 GFLOP, 0.0 MB") &&
                   strstr(out.s, "the ten steps of the highest floor:\n  step "),
               "report:\n%s", out.s ? out.s : "");
        buf_free(&out);
    }
    launch_plan_free(&lp);
    graph_free(&g);
}

/* dy [6, 4], x [6, 3] -> dW = dy^T x [4, 3] and db = dy summed over rows
 * [4]: one GEMM step spanning the sum (BGRADB), reading dy once (96 bytes)
 * and x (72), storing dW (48) and db (16), 2 x 4 x 3 x 6 FLOPs. */
static void test_bias_grad(const RooflineDevice *d)
{
    Graph g;
    LaunchPlan lp;
    CtErr err;
    graph_init(&g);
    ValueId dy = value(&g, 2, (int64_t[]){6, 4}), x = value(&g, 2, (int64_t[]){6, 3});
    int mm = graph_add_node(&g, &(Node){.op = CT_OP_matmul, .nin = 2, .in = {dy, x}, .iattr = {1, 0}}, "w", &err);
    int rs = graph_add_node(&g, &(Node){.op = CT_OP_reduce_sum, .nin = 1, .in = {dy}, .iattr = {1, 0}}, "b", &err);
    CHECKF(mm >= 0 && rs >= 0, "%s", err.msg);
    if (rs < 0)
        return;
    graph_mark_output(&g, g.nodes[mm].out[0]);
    graph_mark_output(&g, g.nodes[rs].out[0]);
    if (launch_plan(&g, 132, &lp, &err)) {
        CHECKF(0, "%s", err.msg);
        graph_free(&g);
        return;
    }
    CHECKF(lp.nsteps == 1 && lp.steps[0].kind == LP_GEMM && lp.steps[0].span == 1 &&
               lp.steps[0].gemm.epi.bgrad == g.nodes[rs].out[0],
           "%d steps", lp.nsteps);
    if (lp.nsteps == 1) {
        RooflineStep t = roofline_step(&lp, &g, 0, d, 0);
        CHECKF(t.flops == 144 && t.bytes == 232, "the GEMM: %g FLOPs, %g bytes", t.flops, t.bytes);
    }
    launch_plan_free(&lp);
    graph_free(&g);
}

/* softmax of x [4, 8] over dim 1, viewed [8, 4], softmax over dim 1: the
 * view between the two library steps is placed at its input's address, no
 * launch, and moves nothing; each softmax reads 128 bytes and stores 128. */
static void test_view(const RooflineDevice *d)
{
    Graph g;
    LaunchPlan lp;
    CtErr err;
    graph_init(&g);
    ValueId x = value(&g, 2, (int64_t[]){4, 8});
    Node sm = {.op = CT_OP_softmax, .nin = 1, .in = {x}, .iattr = {1}};
    int a = graph_add_node(&g, &sm, "a", &err);
    Node rs = {.op = CT_OP_reshape, .nin = 1, .in = {a >= 0 ? g.nodes[a].out[0] : x}, .iattr = {2, 8, 4}};
    int r = graph_add_node(&g, &rs, "r", &err);
    sm.in[0] = r >= 0 ? g.nodes[r].out[0] : x;
    int b = graph_add_node(&g, &sm, "b", &err);
    CHECKF(a >= 0 && r >= 0 && b >= 0, "%s", err.msg);
    if (b < 0)
        return;
    graph_mark_output(&g, g.nodes[b].out[0]);
    if (launch_plan(&g, 132, &lp, &err)) {
        CHECKF(0, "%s", err.msg);
        graph_free(&g);
        return;
    }
    CHECKF(lp.nsteps == 3 && lp.steps[1].kind == LP_LIB && lp.steps[1].nlib == 0, "%d steps", lp.nsteps);
    for (int s = 0; lp.nsteps == 3 && s < 3; s++) {
        RooflineStep t = roofline_step(&lp, &g, s, d, 0);
        CHECKF(t.bytes == (s == 1 ? 0 : 256) && t.floor_s == t.bytes / d->bytes_per_s, "step %d: %g bytes", s,
               t.bytes);
    }
    launch_plan_free(&lp);
    graph_free(&g);
}

/* test_resnet's training step: a downsampling shortcut's batch norm
 * whose output its block's last norm computes from its x (launch_plan.h's
 * bn_res) stores no output: its step moves x and the small vectors (its
 * parameters and statistics), not x and y. */
static void test_shortcut_norm(const RooflineDevice *d)
{
    Graph g;
    LaunchPlan lp;
    CtErr err;
    if (model_graph("test_resnet", &(GraphSpec){.training = 1}, &g))
        return;
    if (launch_plan(&g, 132, &lp, &err)) {
        CHECKF(0, "%s", err.msg);
        graph_free(&g);
        return;
    }
    int shortcuts = 0;
    for (int s = 0; s < lp.nsteps; s++) {
        const LpStep *st = &lp.steps[s];
        if (st->unstored < 0)
            continue;
        const Node *bn = &g.nodes[g.values[st->unstored].producer];
        double x = (double)value_bytes(&g.values[bn->in[0]]), y = (double)value_bytes(&g.values[bn->out[0]]);
        RooflineStep t = roofline_step(&lp, &g, s, d, 0);
        CHECKF(bn->op == CT_OP_batch_norm && t.bytes >= x && t.bytes < x + y, "step %d: %g bytes (x %g, y %g)", s,
               t.bytes, x, y);
        shortcuts++;
    }
    CHECKF(shortcuts == 3, "%d shortcut norms' outputs unstored (test_resnet has 3)", shortcuts);
    launch_plan_free(&lp);
    graph_free(&g);
}

/* The cuda profile's report (runtime/cuda/step_profile.h) of test_by_hand's
 * two steps, measured (summed over two runs) at 3x the add's floor and
 * 1.1x the GEMM's: the GEMM the slowest, the add the most time over its
 * floor; without a device's roofline, times alone; with a step's two
 * ways timed at load, each way's time and the one that runs. And the
 * roofline of a GPU by its name. */
static void test_profile(const RooflineDevice *d)
{
    Graph g;
    LaunchPlan lp;
    CtErr err;
    RooflineDevice found;
    CHECK(roofline_device_of("NVIDIA H200", &found) == 0 && !strcmp(found.name, "h200"));
    CHECK(roofline_device_of("NVIDIA H100 80GB HBM3", &found) == 0 && !strcmp(found.name, "h100"));
    CHECK(roofline_device_of("NVIDIA A100-SXM4-80GB", &found) != 0);
    graph_init(&g);
    ValueId x = value(&g, 2, (int64_t[]){4, 8}), w = value(&g, 2, (int64_t[]){16, 8});
    graph_mark_output(&g, node(&g, CT_OP_linear, node(&g, CT_OP_add, x, x), w));
    if (launch_plan(&g, 132, &lp, &err)) {
        CHECKF(0, "%s", err.msg);
        graph_free(&g);
        return;
    }
    double floor_s[2];
    roofline_floors(&lp, &g, d, 0, floor_s);
    CHECK(floor_s[0] == roofline_step(&lp, &g, 0, d, 0).floor_s && floor_s[1] == roofline_step(&lp, &g, 1, d, 0).floor_s);
    double ms[3] = {2 * 3 * floor_s[0] * 1e3, 2 * 1.1 * floor_s[1] * 1e3, 0};
    StepProfile sp = {.ms = ms, .nsteps = 2, .runs = 3, .counted = 2};
    CtBuf out = {0}, bare = {0};
    step_profile_report(&sp, &lp, &g, floor_s, d->name, &out);
    step_profile_report(&sp, &lp, &g, NULL, NULL, &bare);
    const char *slow = out.s ? strstr(out.s, "the slowest steps:") : NULL;
    const char *over = slow ? strstr(slow, "the most time over the floor:") : NULL;
    CHECKF(slow && over && strstr(out.s, "their roofline floor on h200") && strstr(slow, "3.0x") &&
               strstr(slow, "1.1x") && strstr(slow, "step 1:") < strstr(slow, "step 0:") &&
               strstr(over, "step 0:") < strstr(over, "step 1:"),
           "report:\n%s", out.s ? out.s : "");
    CHECKF(bare.s && strstr(bare.s, "the slowest steps:") && !strstr(bare.s, "floor") &&
               !strstr(out.s, "timed both ways"),
           "report:\n%s", bare.s ? bare.s : "");
    /* the first step as if a depthwise one timed both ways at load, its twin the faster */
    float twin_ms[4] = {0.5f, 0.25f, 0, 0};
    unsigned char twin[2] = {1, 0};
    sp.twin = twin;
    sp.twin_ms = twin_ms;
    CtBuf both = {0};
    step_profile_report(&sp, &lp, &g, NULL, NULL, &both);
    const char *timed = both.s ? strstr(both.s, "depthwise steps timed both ways at load (ms a run):\n") : NULL;
    CHECKF(timed && strstr(timed, "  library    0.500  cuDNN twin    0.250  runs the twin    step 0: ") &&
               !strstr(timed, "step 1:"),
           "report:\n%s", both.s ? both.s : "");
    buf_free(&out);
    buf_free(&bare);
    buf_free(&both);
    launch_plan_free(&lp);
    graph_free(&g);
}

int main(void)
{
    RooflineDevice d;
    CtErr err;
    CHECK(roofline_device("h200", &d, &err) == 0 && d.bytes_per_s == 4.8e12 && d.tensor16 > d.tf32 &&
          d.tf32 > d.f32);
    CHECK(roofline_device("rtx9090", &d, &err) != 0 && strstr(err.msg, "h200, h100"));
    roofline_device("h200", &d, &err);
    test_models(&d);
    test_by_hand(&d);
    test_view(&d);
    test_bias_grad(&d);
    test_shortcut_norm(&d);
    test_profile(&d);
    return check_done("test_roofline");
}
