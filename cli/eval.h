/*
 * What ctimm-train's validation and ctimm-validate share: the loader's uint8
 * NHWC batch made into the graph's normalised f32 NCHW input, and timm's
 * accuracy() / CrossEntropyLoss over logits, accumulated per batch.
 */
#ifndef CTIMM_CLI_EVAL_H
#define CTIMM_CLI_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/data/loader.h"

/* x[b, c, :, :] = (image[b, :, :, c] / 255 - mean[c]) / std[c] for the
 * batch's n images; rows n..batch-1 (a short last batch) are zeros. */
void eval_normalise(const Batch *bt, int batch, const double *mean, const double *std, float *x);

typedef struct EvalMeter {
    double loss_sum, top1, top5; /* sums over images: loss, hits */
    size_t seen;
} EvalMeter;

typedef struct EvalBatch {
    double loss, top1, top5; /* this batch's mean loss and accuracies (percent) */
} EvalBatch;

/* Adds n rows of logits [n, C] with their labels. A class ranks above the
 * label's when its logit is larger, or equal with a smaller index (torch.topk
 * on CPU). */
EvalBatch eval_meter_add(EvalMeter *m, const float *logits, int C, const int64_t *labels, int n);
/* Mean loss, top-1 and top-5 (percent) so far. */
double eval_loss(const EvalMeter *m);
double eval_top1(const EvalMeter *m);
double eval_top5(const EvalMeter *m);

/* "bilinear", "bicubic", "nearest" -> CtInterp; -1 for anything else. */
int eval_interp_parse(const char *name);

/* The rank of `label` among logits row[0..C) (0 = the arg max). */
int eval_rank(const float *row, int C, int64_t label);

#endif
