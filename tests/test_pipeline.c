/* The pass pipeline (passes/pipeline.h): the stages run in the table's order
 * for training and eval graphs and give the graph the passes give when run
 * by hand in that order; --passes and --dump-ir-after names are read from
 * the table and unknown ones refused; the verifier between stages names the
 * stage that broke the graph. */
#include <string.h>

#include "check.h"
#include "ir/buf.h"
#include "models/registry.h"
#include "passes/passes.h"
#include "passes/pipeline.h"

static const LossSpec xent = {.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1};

static int build(const char *model, int training, Graph *g)
{
    ModelSpec spec = {.batch_size = 2, .training = training, .args = model_args_default()};
    CtErr err;
    int rc = model_build(model_find(model), &spec, g, &err);
    CHECKF(rc == 0, "%s: %s", model, err.msg);
    return rc;
}

static char *dump_of(const Graph *g)
{
    CtBuf b = {0};
    graph_dump(g, &b);
    return b.s;
}

/* The stages that ran, "build,amp,...". */
static void ran_list(const PipelineResult *r, char *s, size_t n)
{
    s[0] = 0;
    for (int k = 0; k < r->nran; k++)
        snprintf(s + strlen(s), n - strlen(s), "%s%s", k ? "," : "", r->ran[k]);
}

/* Runs p on test_resnet's graph (training as p says): the stages that ran. */
static void check_order(const Pipeline *p, const char *want)
{
    Graph g;
    PipelineResult r;
    CtErr err;
    char got[200];
    if (build("test_resnet", p->training, &g))
        return;
    CHECKF(pipeline_run(p, &g, &r, &err) == 0, "%s", err.msg);
    ran_list(&r, got, sizeof got);
    CHECKF(!strcmp(got, want), "ran %s, want %s", got, want);
    train_step_free(&r.ts);
    graph_free(&g);
}

static void test_order(void)
{
    OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9};
    check_order(&(Pipeline){.verify = 1}, "build");
    check_order(&(Pipeline){.bn_fold = 1, .amp = 1, .amp_dtype = CT_F16, .channels_last = 1, .verify = 1},
                "build,bn_fold,amp,layout");
    /* bn_fold is for eval graphs; the training step for training graphs */
    check_order(&(Pipeline){.training = 1, .loss = xent, .opt = sgd, .bn_fold = 1, .amp = 1, .amp_dtype = CT_BF16,
                            .channels_last = 1, .verify = 1},
                "build,amp,autodiff,layout");
    check_order(&(Pipeline){.training = 1, .loss = xent, .opt = sgd, .verify = 1}, "build,autodiff");
    /* a stage named in --passes runs as if asked; the analyses never run here */
    check_order(&(Pipeline){.amp_dtype = CT_F16, .passes = "layout,amp,fuse,plan,stats", .verify = 1},
                "build,amp,layout");
    check_order(&(Pipeline){.passes = "none", .verify = 1}, "build");
    Pipeline p = {.passes = "layout,fuse"};
    CHECK(pipeline_named(&p, "fuse") && pipeline_named(&p, "layout") && !pipeline_named(&p, "amp"));
    CHECK(!pipeline_named(&(Pipeline){.passes = "none"}, "none") && !pipeline_named(&(Pipeline){0}, "fuse"));
}

/* The pipeline's graph is the hand-ordered passes' graph, to the byte of
 * its dump: eval bn_fold -> amp -> layout; training amp -> training step
 * (its finite flag found among the outputs) -> layout. */
static void test_same_as_by_hand(const char *model)
{
    for (int training = 0; training < 2; training++) {
        Graph g, h, next;
        CtErr err;
        TrainStep ts;
        if (build(model, training, &g))
            continue;
        if (build(model, training, &h)) {
            graph_free(&g);
            continue;
        }
        OptimSpec opt = {.kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05,
                         .skip_nonfinite = 1};
        Pipeline p = {.training = training, .loss = xent, .opt = opt, .amp = 1, .amp_dtype = CT_F16,
                      .bn_fold = !training, .channels_last = 1, .verify = 1};
        PipelineResult r;
        CHECKF(pipeline_run(&p, &g, &r, &err) == 0, "%s: %s", model, err.msg);
        if (!training) {
            CHECK(bn_fold(&h, &next, &err) == 0);
            graph_free(&h);
            h = next;
        }
        CHECK(amp_cast(&h, CT_F16, &next, &err) == 0);
        graph_free(&h);
        h = next;
        int finite_out = -1;
        if (training) {
            CHECK(train_step_build(&h, h.outputs[0], &xent, &opt, &ts, &err) == 0);
            for (int k = 0; k < h.noutputs; k++)
                finite_out = h.outputs[k] == ts.finite ? k : finite_out;
            CHECK(finite_out >= 0 && ts.finite == r.ts.finite && ts.nparams == r.ts.nparams);
            train_step_free(&ts);
        }
        CHECKF(r.finite_out == finite_out, "%s: finite output %d, want %d", model, r.finite_out, finite_out);
        CHECK(layout_channels_last(&h, &next, &err) == 0);
        graph_free(&h);
        h = next;
        char *a = dump_of(&g), *b = dump_of(&h);
        CHECKF(a && b && !strcmp(a, b), "%s %s: the pipeline's graph differs from the passes run by hand", model,
               training ? "train" : "eval");
        free(a);
        free(b);
        train_step_free(&r.ts);
        graph_free(&g);
        graph_free(&h);
    }
}

static void check_refused(const Pipeline *p, const char *want)
{
    Graph g;
    CtErr err = {{0}};
    CHECKF(pipeline_check(p, &err) != 0 && strstr(err.msg, want), "'%s' not refused with '%s'", err.msg, want);
    if (build("test_resnet", p->training, &g))
        return;
    CHECK(pipeline_run(p, &g, NULL, &err) != 0 && strstr(err.msg, want));
    CHECK(g.nnodes == 0); /* freed */
}

static void test_names(void)
{
    CtErr err;
    check_refused(&(Pipeline){.passes = "bn_fold,bogus"},
                  "unknown pass 'bogus' in --passes (input, bn_fold, amp, layout, remat, fuse, plan, stats)");
    /* the training step is --train's, the input no pass */
    check_refused(&(Pipeline){.passes = "autodiff"}, "unknown pass 'autodiff' in --passes");
    check_refused(&(Pipeline){.passes = "build"}, "unknown pass 'build' in --passes");
    check_refused(&(Pipeline){.passes = "none,layout"}, "unknown pass 'none'");
    check_refused(&(Pipeline){.passes = "layout,"}, "unknown pass '' in --passes");
    check_refused(&(Pipeline){.dump_after = "plan"},
                  "unknown pass 'plan' in --dump-ir-after (build, input, bn_fold, amp, autodiff, layout, remat, fuse)");
    const char *fine[] = {"build", "bn_fold", "amp", "autodiff", "layout", "fuse"};
    for (int k = 0; k < 6; k++)
        CHECKF(pipeline_check(&(Pipeline){.dump_after = fine[k], .passes = "amp,plan"}, &err) == 0, "%s", err.msg);
    CHECK(pass_find("amp") && !pass_find("bogus"));
}

/* --dump-ir-after: the graph as that stage left it; nothing when it did not run. */
static void test_dump_after(void)
{
    const char *stages[] = {"build", "amp", "autodiff", "layout", "bn_fold"};
    OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9};
    for (int k = 0; k < 5; k++) {
        Graph g, h, next;
        CtBuf dump = {0};
        CtErr err;
        TrainStep ts;
        if (build("test_resnet", 1, &g) || build("test_resnet", 1, &h))
            return;
        Pipeline p = {.training = 1, .loss = xent, .opt = sgd, .amp = 1, .amp_dtype = CT_F16, .channels_last = 1,
                      .dump_after = stages[k], .dump = &dump};
        CHECKF(pipeline_run(&p, &g, NULL, &err) == 0, "%s", err.msg);
        if (k >= 1) {
            CHECK(amp_cast(&h, CT_F16, &next, &err) == 0);
            graph_free(&h);
            h = next;
        }
        if (k >= 2) {
            CHECK(train_step_build(&h, h.outputs[0], &xent, &sgd, &ts, &err) == 0);
            train_step_free(&ts);
        }
        if (k >= 3) {
            CHECK(layout_channels_last(&h, &next, &err) == 0);
            graph_free(&h);
            h = next;
        }
        char *want = k == 4 ? NULL : dump_of(&h);
        CHECKF(want ? dump.s && !strcmp(dump.s, want) : dump.len == 0, "--dump-ir-after %s", stages[k]);
        free(want);
        buf_free(&dump);
        graph_free(&g);
        graph_free(&h);
    }
}

/* A stage that breaks its graph without saying so: the first conv's output
 * claims one more channel than the op's rule gives. */
static int corrupt_shape(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == CT_OP_conv2d) {
            g->values[g->nodes[i].out[0]].type.shape.d[1]++;
            break;
        }
    return 0;
}

static int fails(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err)
{
    graph_free(g);
    return ct_fail(err, "out of ideas");
}

static int ask_always(const Pipeline *p) { return 1; }

static void test_verify_names_the_stage(void)
{
    const PassDef corrupt = {"corrupt_shape", corrupt_shape, ask_always, 0}, failing = {"failing", fails, ask_always, 0};
    const PassDef *stages[] = {pass_find("build"), pass_find("bn_fold"), pass_find("amp"), pass_find("autodiff"),
                               pass_find("layout"), &corrupt};
    OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9};
    for (int verify = 0; verify < 2; verify++) {
        Graph g;
        CtErr err = {{0}};
        PipelineResult r;
        if (build("test_resnet", 1, &g))
            return;
        Pipeline p = {.training = 1, .loss = xent, .opt = sgd, .channels_last = 1, .verify = verify};
        int rc = pipeline_run_stages(stages, 6, &p, &g, &r, &err);
        if (!verify) { /* the broken graph gets through */
            CHECK(rc == 0 && r.nran == 4 && !strcmp(r.ran[3], "corrupt_shape"));
            train_step_free(&r.ts);
            graph_free(&g);
            continue;
        }
        const char *want = "pass corrupt_shape broke the graph: node ";
        CHECKF(rc != 0 && !strncmp(err.msg, want, strlen(want)) && strstr(err.msg, "(conv2d at 'conv1.0')") &&
                   strstr(err.msg, "but the op's rule gives"),
               "%s", err.msg);
        CHECK(g.nnodes == 0 && r.ts.params == NULL); /* nothing left to free */
    }
    Graph g;
    CtErr err;
    if (build("test_resnet", 0, &g))
        return;
    const PassDef *two[] = {pass_find("build"), &failing};
    CHECK(pipeline_run_stages(two, 2, &(Pipeline){.verify = 1}, &g, NULL, &err) != 0);
    CHECKF(!strcmp(err.msg, "pass failing: out of ideas"), "%s", err.msg);
    /* a graph broken before any pass is blamed on none */
    if (build("test_resnet", 0, &g))
        return;
    g.values[g.nodes[0].out[0]].type.dtype = CT_F64;
    CHECK(pipeline_run(&(Pipeline){.verify = 1}, &g, NULL, &err) != 0);
    const char *want = "the graph at build is broken: node 0 ";
    CHECKF(!strncmp(err.msg, want, strlen(want)), "%s", err.msg);
}

int main(void)
{
    test_order();
    test_same_as_by_hand("test_resnet");
    test_same_as_by_hand("test_vit");
    test_names();
    test_dump_after();
    test_verify_names_the_stage();
    return check_done("test_pipeline");
}
