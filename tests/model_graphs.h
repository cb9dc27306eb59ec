/* Shared by the compiler tests (test_fuse, test_plan, test_launch_plan,
 * test_lib_desc, test_nvrtc): a test model's graph as ctimm-train and
 * ctimm-bench build it, in their order: the model (model_args_default), the
 * AMP cast, the training step (cross entropy with label smoothing 0.1),
 * then channels_last. */
#ifndef CTIMM_TEST_MODEL_GRAPHS_H
#define CTIMM_TEST_MODEL_GRAPHS_H

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "passes/passes.h"

typedef struct GraphSpec {
    int batch;          /* 0: 2 */
    int training;       /* with the training step */
    CtDType amp;        /* CT_F32: no cast */
    int channels_last;
    const OptimSpec *opt; /* NULL: SGD with momentum 0.9 */
} GraphSpec;

/* *g replaced by pass(*g): on failure the pass freed its output, and *g
 * holds nothing to free. */
static inline int model_graph_pass(int rc, Graph *g, Graph *out)
{
    graph_free(g);
    *g = *out;
    return rc;
}

/* The graph of `model` under s in *g; -1 after a failed CHECK naming the
 * model and the step that failed (g then holds nothing to free). */
static inline int model_graph(const char *model, const GraphSpec *s, Graph *g)
{
    ModelSpec spec = {.batch_size = s->batch ? s->batch : 2, .training = s->training, .args = model_args_default()};
    OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9};
    LossSpec loss = {.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1};
    CtErr err = {{0}};
    const char *step = "build";
    int rc = model_build(model_find(model), &spec, g, &err);
    Graph out;
    if (!rc && s->amp != CT_F32) {
        step = "amp";
        rc = model_graph_pass(amp_cast(g, s->amp, &out, &err), g, &out);
    }
    if (!rc && s->training) {
        TrainStep ts;
        step = "train step";
        if ((rc = train_step_build(g, g->outputs[0], &loss, s->opt ? s->opt : &sgd, &ts, &err)) == 0)
            train_step_free(&ts);
        else
            graph_free(g);
    }
    if (!rc && s->channels_last) {
        step = "channels_last";
        rc = model_graph_pass(layout_channels_last(g, &out, &err), g, &out);
    }
    CHECKF(rc == 0, "%s (%s): %s", model, step, err.msg);
    return rc ? -1 : 0;
}

#endif
