/* Shared by the compiler tests (test_fuse, test_plan, test_launch_plan,
 * test_lib_desc, test_nvrtc, test_cuda_program): a test model's graph as
 * ctimm-train and ctimm-bench build it: the model (model_args_default)
 * through the pass pipeline, the training step's loss cross entropy with
 * label smoothing 0.1. */
#ifndef CTIMM_TEST_MODEL_GRAPHS_H
#define CTIMM_TEST_MODEL_GRAPHS_H

#include "check.h"
#include "models/registry.h"
#include "passes/pipeline.h"

typedef struct GraphSpec {
    int batch;          /* 0: 2 */
    int training;       /* with the training step */
    CtDType amp;        /* CT_F32: no cast */
    int channels_last;
    int remat;          /* the cheap recomputation ctimm-train runs by default */
    int bn_fold;        /* eval: batch norms folded into their convolutions, as ctimm-compile does */
    const OptimSpec *opt; /* NULL: SGD with momentum 0.9 */
    const InputSpec *input; /* NULL: the f32 NCHW input as built */
} GraphSpec;

/* The graph of `model` under s in *g, by the pipeline with the verifier
 * between passes; -1 after a failed CHECK naming the model and what failed
 * (g then holds nothing to free). */
static inline int model_graph(const char *model, const GraphSpec *s, Graph *g)
{
    ModelSpec spec = {.batch_size = s->batch ? s->batch : 2, .training = s->training, .args = model_args_default()};
    Pipeline p = {.training = s->training,
                  .loss = {.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1},
                  .opt = s->opt ? *s->opt : (OptimSpec){.kind = CT_OPT_SGD, .momentum = 0.9},
                  .amp = s->amp != CT_F32, .amp_dtype = s->amp, .channels_last = s->channels_last, .verify = 1};
    p.remat.cheap = s->remat;
    p.bn_fold = s->bn_fold;
    if (s->input)
        p.input = *s->input;
    CtErr err = {{0}};
    int rc = model_build(model_find(model), &spec, g, &err) || pipeline_run(&p, g, NULL, &err);
    CHECKF(rc == 0, "%s: %s", model, err.msg);
    return rc ? -1 : 0;
}

#endif
