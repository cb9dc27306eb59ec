/*
 * The graph-to-graph passes (passes/pipeline.h runs them in order). Each
 * pass is one file in passes/ with its contract at the top; each takes a
 * verified graph and leaves a verified graph in `out` (the input is not
 * changed).
 */
#ifndef CTIMM_PASSES_H
#define CTIMM_PASSES_H

#include "ir/ir.h"

/* The graph's image input as DESIGN.md has it: the loader's uint8 batch
 * [B, H, W, C] as it arrives, normalised in the graph by mean/std; in
 * training, random erasing and mixup/cutmix there too, each reading the
 * numbers the host drew for the batch as a further input (ir/ops/image.c
 * says what they hold). */
typedef struct InputSpec {
    int u8;                 /* 0: the f32 [B, C, H, W] input as built (ctimm-run, parity tests, benches) */
    double mean[4], std[4]; /* of each of the image's C channels (the first C; C <= 4) */
    int erase_boxes;        /* K > 0: random_erase with an i64 [B, K, 5] input "erase_boxes" */
    int erase_mode;         /* random_erase's mode: 0 const, 1 rand, 2 pixel */
    int mix;                /* mix_images with an f32 [B, 6] input "mix_params" */
} InputSpec;

/* On a forward graph whose input 0 is the image batch: that input becomes
 * the uint8 batch, followed by image_normalize (then random_erase and
 * mix_images where s asks). The added inputs follow the graph's own. */
int input_image(const Graph *g, const InputSpec *s, Graph *out, CtErr *err);
int bn_fold(const Graph *g, Graph *out, CtErr *err);
int layout_channels_last(const Graph *g, Graph *out, CtErr *err);
/* On a forward graph, before autodiff (the backward follows its dtypes). */
int amp_cast(const Graph *g, CtDType low, Graph *out, CtErr *err);

#endif
