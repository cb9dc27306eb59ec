/* What the tests of the training step share: a model's training graph
 * with its loss, backward and update built on it (passes/autodiff.h), its
 * state, and a batch of pseudo-random images. */
#ifndef CTIMM_TEST_TRAIN_SETUP_H
#define CTIMM_TEST_TRAIN_SETUP_H

#include <stdint.h>

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "runtime/state.h"

typedef struct StepSetup {
    Graph g;
    TrainStep ts;
    CtState s;
} StepSetup;

/* model's training step for batches of `batch` images of img px and
 * `classes` classes, cross-entropy with `smoothing`, under opt; the state
 * initialised from `seed`. -1 (a failed check) when it does not build. */
static inline int step_setup(StepSetup *u, const char *model, int batch, int img, int classes, double smoothing,
                             const OptimSpec *opt, uint64_t seed)
{
    ModelSpec spec = {.batch_size = batch, .training = 1, .args = {.num_classes = classes, .img_size = img}};
    CtErr err = {{0}};
    LossSpec loss = {.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = smoothing, .bce_threshold = -1};
    if (model_build(model_find(model), &spec, &u->g, &err) ||
        train_step_build(&u->g, u->g.outputs[0], &loss, opt, &u->ts, &err)) {
        CHECKF(0, "%s: %s", model, err.msg);
        return -1;
    }
    state_create(&u->s, &u->g);
    state_init(&u->s, seed);
    return 0;
}

static inline void step_teardown(StepSetup *u)
{
    state_free(&u->s);
    train_step_free(&u->ts);
    graph_free(&u->g);
}

/* n images' worth of values uniform in [-1, 1) from an LCG of `seed`, and
 * labels (i * stride) % classes. */
static inline void step_batch(float *images, size_t nvalues, int64_t *labels, int n, int classes, uint32_t seed,
                              int stride)
{
    for (int i = 0; i < n; i++)
        labels[i] = (i * stride) % classes;
    for (size_t k = 0; k < nvalues; k++) {
        seed = seed * 1664525u + 1013904223u;
        images[k] = (float)((seed >> 8) / 16777216.0 * 2 - 1);
    }
}

#endif
