/* Shared by test_cuda_sim and tests/gpu: the training step as ctimm-train
 * compiles it (test_resnet, the loader's uint8 batch of RGB or gray images
 * normalised, erased ('pixel', up to a box an image) and mixed in the
 * graph, soft targets, channels-last), with fixed inputs and initial state. */
#ifndef CTIMM_TEST_UINT8_STEP_H
#define CTIMM_TEST_UINT8_STEP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/registry.h"
#include "passes/pipeline.h"
#include "runtime/state.h"
#include "runtime/tensor.h"

enum { U8_B = 4, U8_S = 32 };

typedef struct Uint8Step {
    Graph g;
    CtState init;
    CtTensor in[6]; /* batch, erase boxes, mix params, soft targets, lr, loss scale */
    uint8_t img[U8_B * U8_S * U8_S * 3]; /* of `chans` channels */
    int64_t boxes[U8_B * 5];
    float params[U8_B * 6], *soft, lr, scale;
} Uint8Step;

/* For images of chans channels (3, or 1: in_chans 1's gray batch); -1
 * after a failed CHECK; else the caller frees it with uint8_step_free. */
static inline int uint8_step_open(Uint8Step *u, int chans)
{
    InputSpec is = {.u8 = 1, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225}, .erase_boxes = 1,
                    .erase_mode = 2, .mix = 1};
    ModelSpec spec = {.batch_size = U8_B, .training = 1, .args = model_args_default()};
    spec.args.img_size = U8_S;
    spec.args.in_chans = chans;
    Pipeline p = {.input = is, .training = 1, .loss = {CT_LOSS_SOFT_TARGET, 0, -1, 1},
                  .opt = {.kind = CT_OPT_SGD, .momentum = 0.9}, .channels_last = 1, .verify = 1};
    CtErr err;
    memset(u, 0, sizeof *u);
    if (model_build(model_find("test_resnet"), &spec, &u->g, &err) || pipeline_run(&p, &u->g, NULL, &err)) {
        CHECKF(0, "uint8 step: %s", err.msg);
        return -1;
    }
    int64_t classes = 0;
    for (ValueId v = 0; v < u->g.nvalues; v++)
        if (u->g.values[v].role == CT_ROLE_INPUT && u->g.values[v].type.shape.ndim == 2 &&
            !(u->g.values[v].name && !strcmp(u->g.values[v].name, "mix_params")))
            classes = u->g.values[v].type.shape.d[1]; /* the soft targets */
    for (int i = 0; i < U8_B * U8_S * U8_S * chans; i++)
        u->img[i] = (uint8_t)(i * 97 + i / 7);
    const int64_t boxes[U8_B * 5] = {2, 3, 10, 12, 101, 0, 0, 0, 0, 0, 20, 20, 30, 30, 102, 5, 5, 4, 4, 103};
    const float params[U8_B * 6] = {0.7f, 0, 0, 0, 0, 0, 0.4f, 1, 8, 20, 4, 28, 0.4f, 1, 8, 20, 4, 28, 0.7f, 0, 0, 0, 0, 0};
    memcpy(u->boxes, boxes, sizeof boxes);
    memcpy(u->params, params, sizeof params);
    u->soft = calloc((size_t)(U8_B * classes), sizeof *u->soft);
    CT_ASSERT(u->soft != NULL);
    for (int b = 0; b < U8_B; b++)
        u->soft[b * classes + b % classes] = 1;
    u->lr = 0.1f;
    u->scale = 1;
    CtTensor in[6] = {{{{4, {U8_B, U8_S, U8_S, chans}}, CT_U8}, u->img}, {{{3, {U8_B, 1, 5}}, CT_I64}, u->boxes},
                      {{{2, {U8_B, 6}}, CT_F32}, u->params},         {{{2, {U8_B, classes}}, CT_F32}, u->soft},
                      {{{0}, CT_F32}, &u->lr},                       {{{0}, CT_F32}, &u->scale}};
    memcpy(u->in, in, sizeof in);
    state_create(&u->init, &u->g);
    state_init(&u->init, 11);
    return 0;
}

static inline void uint8_step_free(Uint8Step *u)
{
    state_free(&u->init);
    free(u->soft);
    graph_free(&u->g);
}

#endif
