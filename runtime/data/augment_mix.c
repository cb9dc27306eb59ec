/*
 * AugMix's mixing (timm's AugMixAugment): the Dirichlet / Beta draws, the
 * float32 sum of the chains and PIL's blend, in numpy's and PIL's precisions
 * (float32 sums and products, float blend factors, truncation to bytes).
 */
#include "runtime/data/augment.h"

#include <string.h>

void augmix_draw_weights(double alpha, int width, CtRng *rng, float *ws, float *m)
{
    /* Dirichlet: normalised Gamma(alpha) draws; Beta(a, a): X / (X + Y) */
    double g[AUG_MAX_OPS], sum = 0;
    for (int i = 0; i < width; i++)
        sum += g[i] = rng_gamma(rng, alpha);
    for (int i = 0; i < width; i++)
        ws[i] = (float)(g[i] / sum);
    double x = rng_gamma(rng, alpha), y = rng_gamma(rng, alpha);
    *m = (float)(x / (x + y));
}

void augmix_accumulate(float *acc, const CtImage *aug, float w)
{
    size_t n = (size_t)aug->w * aug->h * 3;
    for (size_t i = 0; i < n; i++) {
        float t = w * (float)aug->px[i];
        acc[i] = acc[i] + t;
    }
}

void augmix_finish(CtImage *img, const float *acc, float m)
{
    size_t n = (size_t)img->w * img->h * 3;
    for (size_t i = 0; i < n; i++) {
        float v = acc[i] < 0 ? 0 : acc[i] > 255.0f ? 255.0f : acc[i];
        uint8_t mixed = (uint8_t)v;
        float b = (float)img->px[i] + m * (float)(mixed - img->px[i]);
        img->px[i] = (uint8_t)b;
    }
}

void augmix_blended_weights(const float *ws, int width, float m, float *out)
{
    /* from the last chain back: each factor the share of what the later
     * blends leave (numpy's float64 scalars, stored as float32) */
    double cump = 1;
    for (int i = width - 1; i >= 0; i--) {
        float w = ws[i] * m;
        double a = (double)w / cump;
        cump *= 1 - a;
        out[i] = (float)a;
    }
}

void image_blend(CtImage *img, const CtImage *other, float alpha)
{
    size_t n = (size_t)img->w * img->h * 3;
    for (size_t i = 0; i < n; i++) {
        float b = (float)img->px[i] + alpha * (float)(other->px[i] - img->px[i]);
        img->px[i] = (uint8_t)b;
    }
}
