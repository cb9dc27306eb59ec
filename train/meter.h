/*
 * timm's accuracy() and CrossEntropyLoss over a validation pass, summed per
 * batch of logits [n, C]: what the trainer's validation, ctimm-validate and
 * ctimm-infer score with, in torch.topk's order.
 */
#ifndef CTIMM_TRAIN_METER_H
#define CTIMM_TRAIN_METER_H

#include <stddef.h>
#include <stdint.h>

typedef struct EvalMeter {
    double loss_sum, top1, top5; /* sums over images: loss, hits */
    size_t seen;
} EvalMeter;

typedef struct EvalBatch {
    double loss, top1, top5; /* this batch's mean loss and accuracies (percent) */
} EvalBatch;

/* Adds n rows of logits [n, C] with their labels (each in [0, C)), ranked
 * by eval_before. */
EvalBatch eval_meter_add(EvalMeter *m, const float *logits, int C, const int64_t *labels, int n);
/* Mean loss, top-1 and top-5 (percent) so far; NaN before any image. */
double eval_loss(const EvalMeter *m);
double eval_top1(const EvalMeter *m);
double eval_top5(const EvalMeter *m);

/* Whether logit a of class ia comes before logit b of class ib in torch.topk's
 * order on CPU: larger first, equal ones by the smaller index, NaN above
 * every number (and NaNs among themselves by index). */
int eval_before(float a, int ia, float b, int ib);
/* The rank of `label` among logits row[0..C) (0 = the arg max). */
int eval_rank(const float *row, int C, int64_t label);

#endif
