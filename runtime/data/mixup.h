/*
 * timm's Mixup / CutMix (timm/data/mixup.py) for a batch of N images with
 * integer labels [N], as the numbers the graph's mix_images node reads
 * (the pixel work is the graph's, ir/ops/image.c): mixes each image i with image
 * N-1-i (the batch flipped) and writes the soft targets [N, num_classes],
 * lam * smoothed_one_hot(y) + (1 - lam) * smoothed_one_hot(flip(y)), with
 * timm's smoothing (off = s / C, on = 1 - s + off). Modes: 'batch' (one lam
 * and one box for the whole batch), 'pair' (one per pair i, N-1-i), 'elem'
 * (one per image). CutMix pastes a box of the partner image and corrects
 * lam to the box's clipped area. Random numbers come from the caller's
 * generator (rng.h), so a batch's mixing depends on (seed, epoch, batch).
 */
#ifndef CTIMM_DATA_MIXUP_H
#define CTIMM_DATA_MIXUP_H

#include <stdint.h>

#include "ir/status.h"
#include "runtime/data/rng.h"

typedef enum CtMixupMode { CT_MIXUP_BATCH, CT_MIXUP_PAIR, CT_MIXUP_ELEM } CtMixupMode;

typedef struct Mixup {
    double mixup_alpha, cutmix_alpha; /* active when > 0 */
    int has_minmax;                   /* cutmix_minmax given: cutmix on, alpha 1, box from these ratios */
    double cutmix_minmax[2];
    double prob, switch_prob;         /* timm: 1.0, 0.5 */
    CtMixupMode mode;
    int correct_lam;                  /* timm: 1 */
    double label_smoothing;
    int num_classes;
    int enabled;                      /* 0 after --mixup-off-epoch: targets only, lam 1 */
} Mixup;

/* "batch", "pair", "elem" -> mode; -1 for another name. */
int mixup_mode_parse(const char *name);
/* train.py's mixup_active: mixup or cutmix alpha > 0, or cutmix_minmax set. */
int mixup_active(const Mixup *m);

/* Beta(a, a) sample (Marsaglia-Tsang gammas), a > 0. */
double mixup_beta(CtRng *rng, double a);
/* Soft targets [n, C] for per-image lam[n]. */
void mixup_target(const int64_t *labels, int n, int num_classes, const double *lam, double smoothing, float *target);
/* timm's cutmix_bbox_and_lam for an h x w image: box rows [box[0], box[1]),
 * columns [box[2], box[3]); *lam_out is lam, or 1 - box area / (h * w) when
 * corrected (always with minmax). */
void mixup_cutmix_box(const Mixup *m, int h, int w, double lam, CtRng *rng, int box[4], double *lam_out);

/* The numbers of one batch's mixing, drawn as timm draws them: each
 * image's MIX_PARAMS for the mix_images op (ir/ops/image.c: lam, cut and
 * the box rows [y0, y1), columns [x0, x1) pasted from image n-1-i) in
 * params [n, MIX_PARAMS], the soft targets [n, num_classes], and each
 * image's final lam in lam_out [n] (may be NULL). n must be even (timm's
 * assert). */
#define MIX_PARAMS 6
int mixup_draw(const Mixup *m, int n, int h, int w, const int64_t *labels, float *params, float *target,
               double *lam_out, CtRng *rng, CtErr *err);

#endif
