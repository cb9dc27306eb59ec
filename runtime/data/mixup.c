/*
 * timm's Mixup / CutMix (timm/data/mixup.py Mixup: _params_per_batch,
 * _params_per_elem, _mix_batch, _mix_pair, _mix_elem, rand_bbox,
 * rand_bbox_minmax, cutmix_bbox_and_lam, mixup_target) on x [N, C, H, W].
 */
#include "runtime/data/mixup.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int mixup_mode_parse(const char *name)
{
    return !strcmp(name, "batch") ? CT_MIXUP_BATCH
           : !strcmp(name, "pair") ? CT_MIXUP_PAIR
           : !strcmp(name, "elem") ? CT_MIXUP_ELEM
                                   : -1;
}

int mixup_active(const Mixup *m) { return m->mixup_alpha > 0 || m->cutmix_alpha > 0 || m->has_minmax; }

/* Gamma(a, 1): Marsaglia and Tsang, boosted by U^(1/a) below a = 1. */
static double gamma_sample(CtRng *rng, double a)
{
    if (a < 1) {
        double u = rng_uniform(rng);
        return gamma_sample(rng, a + 1) * pow(u > 0 ? u : 0x1p-53, 1 / a);
    }
    double d = a - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double z = rng_normal(rng), v = 1 + c * z;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = rng_uniform(rng);
        if (u < 1 - 0.0331 * z * z * z * z || log(u > 0 ? u : 0x1p-53) < 0.5 * z * z + d * (1 - v + log(v)))
            return d * v;
    }
}

double mixup_beta(CtRng *rng, double a)
{
    double x = gamma_sample(rng, a), y = gamma_sample(rng, a);
    return x + y > 0 ? x / (x + y) : 0.5;
}

void mixup_target(const int64_t *labels, int n, int num_classes, const double *lam, double smoothing, float *target)
{
    double off = smoothing / num_classes, on = 1 - smoothing + off;
    for (int i = 0; i < n; i++) {
        float *t = target + (size_t)i * num_classes;
        int64_t y1 = labels[i], y2 = labels[n - 1 - i];
        for (int k = 0; k < num_classes; k++) {
            double a = k == y1 ? on : off, b = k == y2 ? on : off;
            t[k] = (float)(a * lam[i] + b * (1 - lam[i]));
        }
    }
}

/* numpy's randint(lo, hi): uniform in [lo, hi); lo when the range is empty. */
static int randint(CtRng *rng, int lo, int hi) { return hi > lo ? lo + (int)rng_below(rng, (uint64_t)(hi - lo)) : lo; }

static int clip(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }

void mixup_cutmix_box(const Mixup *m, int h, int w, double lam, CtRng *rng, int box[4], double *lam_out)
{
    if (m->has_minmax) { /* rand_bbox_minmax */
        int ch = randint(rng, (int)(h * m->cutmix_minmax[0]), (int)(h * m->cutmix_minmax[1]));
        int cw = randint(rng, (int)(w * m->cutmix_minmax[0]), (int)(w * m->cutmix_minmax[1]));
        box[0] = randint(rng, 0, h - ch);
        box[2] = randint(rng, 0, w - cw);
        box[1] = box[0] + ch;
        box[3] = box[2] + cw;
    } else { /* rand_bbox, no margin */
        double ratio = sqrt(1 - lam);
        int ch = (int)(h * ratio), cw = (int)(w * ratio);
        int cy = randint(rng, 0, h), cx = randint(rng, 0, w);
        box[0] = clip(cy - ch / 2, h);
        box[1] = clip(cy + ch / 2, h);
        box[2] = clip(cx - cw / 2, w);
        box[3] = clip(cx + cw / 2, w);
    }
    *lam_out = m->correct_lam || m->has_minmax
                   ? 1 - (double)(box[1] - box[0]) * (box[3] - box[2]) / ((double)h * w)
                   : lam;
}

/* lam and use_cutmix for one draw: the batch's (_params_per_batch) or one
 * element's (_params_per_elem, which draws the switch and beta even when
 * the element is then left unmixed). */
static double draw_params(const Mixup *m, CtRng *rng, int per_elem, int *cut)
{
    double cutmix_alpha = m->has_minmax ? 1.0 : m->cutmix_alpha, lam_mix;
    *cut = 0;
    if (!m->enabled)
        return 1;
    if (!per_elem && !(rng_uniform(rng) < m->prob))
        return 1;
    if (m->mixup_alpha > 0 && cutmix_alpha > 0) {
        *cut = rng_uniform(rng) < m->switch_prob;
        lam_mix = mixup_beta(rng, *cut ? cutmix_alpha : m->mixup_alpha);
    } else if (m->mixup_alpha > 0) {
        lam_mix = mixup_beta(rng, m->mixup_alpha);
    } else {
        *cut = 1;
        lam_mix = mixup_beta(rng, cutmix_alpha);
    }
    if (per_elem && !(rng_uniform(rng) < m->prob))
        return 1; /* timm keeps use_cutmix, but lam 1 means no mixing */
    return per_elem ? (double)(float)lam_mix : lam_mix; /* elem lams are float32 in timm */
}

/* Image i's mix_images parameters: mixed from its partner by lam, or the
 * partner's box pasted in; lam 1 and no cut where it is left as it is. */
static void set_params(float *params, int i, double lam, int cut, const int box[4])
{
    float *p = params + (size_t)i * MIX_PARAMS;
    p[0] = (float)lam;
    p[1] = (float)cut;
    for (int k = 0; k < 4; k++)
        p[2 + k] = cut ? (float)box[k] : 0;
}

int mixup_draw(const Mixup *m, int n, int h, int w, const int64_t *labels, float *params, float *target,
               double *lam_out, CtRng *rng, CtErr *err)
{
    if (n % 2)
        return ct_fail(err, "mixup/cutmix needs an even batch size, not %d", n);
    double *lam = malloc(sizeof *lam * (size_t)n);
    int *cut = malloc(sizeof *cut * (size_t)n);
    if (!lam || !cut) {
        free(lam);
        free(cut);
        return ct_fail(err, "mixup: out of memory for a batch of %d", n);
    }
    /* the draws: one for the batch, one per pair, or one per element */
    int draws = m->mode == CT_MIXUP_BATCH ? 1 : m->mode == CT_MIXUP_PAIR ? n / 2 : n;
    for (int k = 0; k < draws; k++)
        lam[k] = draw_params(m, rng, m->mode != CT_MIXUP_BATCH, &cut[k]);
    for (int k = draws; k < n; k++) { /* batch and pair: image j = n-1-i shares its partner's draw */
        int src = m->mode == CT_MIXUP_BATCH ? 0 : n - 1 - k;
        lam[k] = lam[src];
        cut[k] = cut[src];
    }
    int box[4] = {0, 0, 0, 0}, batch_mixed = lam[0] != 1;
    if (m->mode == CT_MIXUP_BATCH && batch_mixed && cut[0]) {
        double l;
        mixup_cutmix_box(m, h, w, lam[0], rng, box, &l);
        for (int k = 0; k < n; k++)
            lam[k] = l;
    }
    /* pairs (i, j = n-1-i), each image mixed from its partner's original */
    for (int i = 0; i < n / 2; i++) {
        int j = n - 1 - i, mi = m->mode == CT_MIXUP_BATCH ? batch_mixed : lam[i] != 1;
        int mj = m->mode == CT_MIXUP_ELEM ? lam[j] != 1 : mi;
        set_params(params, i, 1, 0, box);
        set_params(params, j, 1, 0, box);
        if (!mi && !mj)
            continue;
        if (m->mode == CT_MIXUP_PAIR && cut[i]) {
            double l;
            mixup_cutmix_box(m, h, w, lam[i], rng, box, &l);
            lam[i] = lam[j] = (double)(float)l;
        }
        if (m->mode != CT_MIXUP_ELEM) { /* one lam and box for both images of the pair */
            set_params(params, i, lam[i], cut[i], box);
            set_params(params, j, lam[i], cut[i], box);
            continue;
        }
        int bx[4] = {0, 0, 0, 0};
        double l;
        if (mi && cut[i]) {
            mixup_cutmix_box(m, h, w, lam[i], rng, bx, &l);
            lam[i] = (double)(float)l;
        }
        if (mi)
            set_params(params, i, lam[i], cut[i], bx);
        if (mj && cut[j]) {
            mixup_cutmix_box(m, h, w, lam[j], rng, bx, &l);
            lam[j] = (double)(float)l;
        }
        if (mj)
            set_params(params, j, lam[j], cut[j], bx);
    }
    mixup_target(labels, n, m->num_classes, lam, m->label_smoothing, target);
    if (lam_out)
        memcpy(lam_out, lam, sizeof *lam * (size_t)n);
    free(lam);
    free(cut);
    return 0;
}
