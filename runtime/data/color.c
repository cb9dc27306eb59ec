/*
 * Colour adjustments on 8-bit RGB images, bit-exact with PIL 9.4 as
 * torchvision 0.14's functional_pil and timm's auto_augment.py call it:
 * ImageEnhance's four enhancers (each a blend of the image with a
 * "degenerate" image), adjust_hue through PIL's 8-bit HSV, ColorJitter,
 * and convert('L') (image.h's image_to_gray). The float/double mix of the expressions follows PIL's C on purpose: it
 * decides the rounding.
 */
#include "runtime/data/augment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ImagingBlend for one byte, alpha already a float as PIL casts it:
 * a + alpha * (b - a) in float, truncated; clipped when extrapolating. */
static inline uint8_t blend_u8(int a, int b, float alpha, int extrapolate)
{
    float v = (float)a + alpha * (float)(b - a);
    if (!extrapolate)
        return (uint8_t)v;
    return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
}

static inline int blend_extrapolates(float alpha) { return !(alpha >= 0 && alpha <= 1.0); }

/* PIL's convert("L"): ITU-R 601-2 luma in 16.16 fixed point. */
static inline int luma(const uint8_t *p) { return (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16; }

void image_to_gray(CtImage *img)
{
    size_t n = (size_t)img->w * img->h;
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = img->px + 3 * i;
        p[0] = p[1] = p[2] = (uint8_t)luma(p);
    }
}

static void apply_lut(CtImage *img, const uint8_t lut[256])
{
    size_t n = (size_t)img->w * img->h * 3;
    for (size_t i = 0; i < n; i++)
        img->px[i] = lut[img->px[i]];
}

/* Blend of a constant degenerate value d with the image: one table. */
static void blend_const(CtImage *img, int d, double factor)
{
    float alpha = (float)factor;
    if (alpha == 1.0f)
        return;
    int ex = blend_extrapolates(alpha);
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = alpha == 0.0f ? (uint8_t)d : blend_u8(d, v, alpha, ex);
    apply_lut(img, lut);
}

void enhance_brightness(CtImage *img, double factor) { blend_const(img, 0, factor); }

void enhance_contrast(CtImage *img, double factor)
{
    /* degenerate: the mean of the L image, int(mean + 0.5), as a grey image */
    size_t n = (size_t)img->w * img->h;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (uint64_t)luma(img->px + 3 * i);
    int mean = n ? (int)((double)sum / (double)n + 0.5) : 0;
    blend_const(img, mean, factor);
}

/* The loop body of enhance_color, for one extrapolation mode. */
#define BLEND_WITH_LUMA(ex)                                                                                 \
    for (size_t i = 0; i < n; i++) {                                                                       \
        uint8_t *p = img->px + 3 * i;                                                                      \
        int l = luma(p);                                                                                   \
        p[0] = blend_u8(l, p[0], alpha, ex);                                                               \
        p[1] = blend_u8(l, p[1], alpha, ex);                                                               \
        p[2] = blend_u8(l, p[2], alpha, ex);                                                               \
    }

void enhance_color(CtImage *img, double factor)
{
    /* degenerate: convert("L").convert("RGB") */
    float alpha = (float)factor;
    if (alpha == 1.0f)
        return;
    size_t n = (size_t)img->w * img->h;
    if (alpha == 0.0f) {
        for (size_t i = 0; i < n; i++) {
            uint8_t *p = img->px + 3 * i;
            p[0] = p[1] = p[2] = (uint8_t)luma(p);
        }
    } else if (blend_extrapolates(alpha)) {
        BLEND_WITH_LUMA(1)
    } else {
        BLEND_WITH_LUMA(0)
    }
}
#undef BLEND_WITH_LUMA

/* ImageFilter.SMOOTH: PIL's ImagingFilter3x3 with kernel (1 1 1, 1 5 1,
 * 1 1 1) / 13 in float, 0.5 added for rounding, the border rows and columns
 * copied unfiltered. */
static void smooth3x3(const CtImage *src, CtImage *dst)
{
    int w = src->w, h = src->h;
    size_t row = (size_t)w * 3;
    if (w < 3 || h < 3) {
        memcpy(dst->px, src->px, row * h);
        return;
    }
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    memcpy(dst->px, src->px, row);
    for (int y = 1; y < h - 1; y++) {
        const uint8_t *up = src->px + (y - 1) * row, *mid = up + row, *dn = mid + row;
        uint8_t *out = dst->px + y * row;
        memcpy(out, mid, 3);
        /* channels interleave, so the horizontal neighbours are +-3 bytes */
        for (size_t i = 3; i < row - 3; i++) {
            float ss = 0.5f;
            /* PIL's row order: kernel rows 0..2 meet image rows y+1, y, y-1 */
            ss += (float)dn[i - 3] * k1 + (float)dn[i] * k1 + (float)dn[i + 3] * k1;
            ss += (float)mid[i - 3] * k1 + (float)mid[i] * k5 + (float)mid[i + 3] * k1;
            ss += (float)up[i - 3] * k1 + (float)up[i] * k1 + (float)up[i + 3] * k1;
            out[i] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (uint8_t)ss;
        }
        memcpy(out + row - 3, mid + row - 3, 3);
    }
    memcpy(dst->px + (h - 1) * row, src->px + (h - 1) * row, row);
}

void enhance_sharpness(CtImage *img, CtImage *tmp, double factor)
{
    float alpha = (float)factor;
    if (alpha == 1.0f)
        return;
    smooth3x3(img, tmp);
    size_t n = (size_t)img->w * img->h * 3;
    if (alpha == 0.0f) {
        memcpy(img->px, tmp->px, n);
    } else if (blend_extrapolates(alpha)) {
        for (size_t i = 0; i < n; i++)
            img->px[i] = blend_u8(tmp->px[i], img->px[i], alpha, 1);
    } else {
        for (size_t i = 0; i < n; i++)
            img->px[i] = blend_u8(tmp->px[i], img->px[i], alpha, 0);
    }
}

/* PIL's rgb2hsv_row (after colorsys.py), types as in Convert.c. */
static inline void rgb_to_hsv(const uint8_t *in, uint8_t *hsv)
{
    int r = in[0], g = in[1], b = in[2];
    int maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
    int minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
    hsv[2] = (uint8_t)maxc;
    if (minc == maxc) {
        hsv[0] = hsv[1] = 0;
        return;
    }
    float cr = (float)(maxc - minc);
    float s = cr / (float)maxc;
    float rc = (float)(maxc - r) / cr, gc = (float)(maxc - g) / cr, bc = (float)(maxc - b) / cr;
    float h;
    if (r == maxc)
        h = bc - gc;
    else if (g == maxc)
        h = (float)(2.0 + rc - bc);
    else
        h = (float)(4.0 + gc - rc);
    h = (float)fmod(h / 6.0 + 1.0, 1.0);
    int uh = (int)(h * 255.0), us = (int)(s * 255.0);
    hsv[0] = (uint8_t)(uh < 0 ? 0 : uh > 255 ? 255 : uh);
    hsv[1] = (uint8_t)(us < 0 ? 0 : us > 255 ? 255 : us);
}

static inline uint8_t clip8i(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* PIL's hsv2rgb, types as in Convert.c. */
static inline void hsv_to_rgb(int h, int s, int v, uint8_t *out)
{
    if (s == 0) {
        out[0] = out[1] = out[2] = (uint8_t)v;
        return;
    }
    int i = (int)floor((float)h * 6.0 / 255.0);
    float f = (float)((float)h * 6.0 / 255.0 - (float)i);
    float fs = (float)((float)s / 255.0);
    uint8_t p = clip8i((int)round((float)v * (1.0 - fs)));
    uint8_t q = clip8i((int)round((float)v * (1.0 - fs * f)));
    uint8_t t = clip8i((int)round((float)v * (1.0 - fs * (1.0 - f))));
    uint8_t vv = (uint8_t)v;
    switch (i % 6) {
    case 0: out[0] = vv, out[1] = t, out[2] = p; break;
    case 1: out[0] = q, out[1] = vv, out[2] = p; break;
    case 2: out[0] = p, out[1] = vv, out[2] = t; break;
    case 3: out[0] = p, out[1] = q, out[2] = vv; break;
    case 4: out[0] = t, out[1] = p, out[2] = vv; break;
    default: out[0] = vv, out[1] = p, out[2] = q; break;
    }
}

void adjust_hue(CtImage *img, double hue_factor)
{
    /* np.uint8(hue_factor * 255): truncation toward zero, then modulo 256 */
    uint8_t shift = (uint8_t)(int)(hue_factor * 255);
    size_t n = (size_t)img->w * img->h;
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = img->px + 3 * i, hsv[3];
        rgb_to_hsv(p, hsv);
        hsv_to_rgb((uint8_t)(hsv[0] + shift), hsv[1], hsv[2], p);
    }
    /* torchvision goes through PIL's 'HSV', which has no alpha: an 'RGBA'
     * image comes back opaque */
    free(img->alpha);
    img->alpha = NULL;
}

/* blend_const's table (the identity when alpha is 1: the blend is skipped). */
static void blend_const_lut(int d, double factor, uint8_t lut[256])
{
    float alpha = (float)factor;
    int ex = blend_extrapolates(alpha);
    for (int v = 0; v < 256; v++)
        lut[v] = alpha == 1.0f ? (uint8_t)v : alpha == 0.0f ? (uint8_t)d : blend_u8(d, v, alpha, ex);
}

/* enhance_contrast's degenerate value for lut applied to img. */
static int mean_luma_lut(const CtImage *img, const uint8_t lut[256])
{
    size_t n = (size_t)img->w * img->h;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = img->px + 3 * i;
        uint8_t q[3] = {lut[p[0]], lut[p[1]], lut[p[2]]};
        sum += (uint64_t)luma(q);
    }
    return n ? (int)((double)sum / (double)n + 0.5) : 0;
}

/* enhance_color of lut applied to img (alpha != 1), in one pass. */
#define BLEND_WITH_LUMA_LUT(ex)                                                                             \
    for (size_t i = 0; i < n; i++) {                                                                       \
        uint8_t *p = img->px + 3 * i, q[3] = {lut[p[0]], lut[p[1]], lut[p[2]]};                            \
        int l = luma(q);                                                                                   \
        p[0] = blend_u8(l, q[0], alpha, ex);                                                               \
        p[1] = blend_u8(l, q[1], alpha, ex);                                                               \
        p[2] = blend_u8(l, q[2], alpha, ex);                                                               \
    }

static void enhance_color_lut(CtImage *img, float alpha, const uint8_t lut[256])
{
    size_t n = (size_t)img->w * img->h;
    if (alpha == 0.0f) {
        for (size_t i = 0; i < n; i++) {
            uint8_t *p = img->px + 3 * i, q[3] = {lut[p[0]], lut[p[1]], lut[p[2]]};
            p[0] = p[1] = p[2] = (uint8_t)luma(q);
        }
    } else if (blend_extrapolates(alpha)) {
        BLEND_WITH_LUMA_LUT(1)
    } else {
        BLEND_WITH_LUMA_LUT(0)
    }
}
#undef BLEND_WITH_LUMA_LUT

void color_jitter(CtImage *img, double brightness, double contrast, double saturation, double hue, CtRng *rng)
{
    /* torch.randperm(4), then the four factors, as ColorJitter.get_params */
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) {
        int j = (int)rng_below(rng, (uint64_t)i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    double amount[4] = {brightness, contrast, saturation, hue}, factor[4];
    for (int k = 0; k < 3; k++)
        factor[k] = rng_range(rng, fmax(0.0, 1.0 - amount[k]), 1.0 + amount[k]);
    factor[3] = rng_range(rng, -hue, hue);
    /* Brightness and contrast are per-byte tables (contrast's after one pass
     * for its mean): consecutive ones compose into `pending`, which is
     * applied when the next step reads the image (saturation reads through
     * it) or at the end: the same bytes as one pass per step. */
    uint8_t pending[256], lut[256];
    int have = 0;
    for (int i = 0; i < 4; i++) {
        int k = order[i];
        if (amount[k] <= 0)
            continue;
        switch (k) {
        case 0:
        case 1:
            if (k == 0)
                blend_const_lut(0, factor[0], lut);
            else if (have)
                blend_const_lut(mean_luma_lut(img, pending), factor[1], lut);
            else if ((float)factor[1] == 1.0f)
                break;
            else {
                size_t n = (size_t)img->w * img->h;
                uint64_t sum = 0;
                for (size_t p = 0; p < n; p++)
                    sum += (uint64_t)luma(img->px + 3 * p);
                blend_const_lut(n ? (int)((double)sum / (double)n + 0.5) : 0, factor[1], lut);
            }
            for (int v = 0; v < 256; v++)
                pending[v] = have ? lut[pending[v]] : lut[v];
            have = 1;
            break;
        case 2:
            if ((float)factor[2] == 1.0f)
                break;
            if (have)
                enhance_color_lut(img, (float)factor[2], pending);
            else
                enhance_color(img, factor[2]);
            have = 0;
            break;
        default:
            if (have)
                apply_lut(img, pending);
            have = 0;
            adjust_hue(img, factor[3] < -0.5 ? -0.5 : factor[3] > 0.5 ? 0.5 : factor[3]);
            break;
        }
    }
    if (have)
        apply_lut(img, pending);
}
