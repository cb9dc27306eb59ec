/*
 * timm's auto_augment.py in C: the per-pixel ImageOps (lookup tables, as PIL
 * builds them), each op's magnitude -> argument mapping (timm's *_level_to_arg
 * with _LEVEL_DENOM 10), AugmentOp's sampling (prob, magnitude noise, random
 * sign, random resample) and the RandAugment / AutoAugment policies with
 * their config strings. Geometry is in augment_geom.c, enhancers in color.c.
 */
#include "runtime/data/augment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ImageOps ---- */

static void apply_lut3(CtImage *img, uint8_t lut[3][256])
{
    size_t n = (size_t)img->w * img->h;
    uint8_t *p = img->px;
    for (size_t i = 0; i < n; i++, p += 3) {
        p[0] = lut[0][p[0]];
        p[1] = lut[1][p[1]];
        p[2] = lut[2][p[2]];
    }
}

static void apply_lut(CtImage *img, const uint8_t lut[256])
{
    size_t n = (size_t)img->w * img->h * 3;
    for (size_t i = 0; i < n; i++)
        img->px[i] = lut[img->px[i]];
}

static void histograms(const CtImage *img, uint32_t hist[3][256])
{
    memset(hist, 0, sizeof(uint32_t) * 3 * 256);
    size_t n = (size_t)img->w * img->h;
    const uint8_t *p = img->px;
    for (size_t i = 0; i < n; i++, p += 3) {
        hist[0][p[0]]++;
        hist[1][p[1]]++;
        hist[2][p[2]]++;
    }
}

void aug_autocontrast(CtImage *img)
{
    uint32_t hist[3][256];
    uint8_t lut[3][256];
    histograms(img, hist);
    for (int c = 0; c < 3; c++) {
        int lo = 0, hi = 255;
        while (lo < 255 && !hist[c][lo])
            lo++;
        while (hi > 0 && !hist[c][hi])
            hi--;
        for (int i = 0; i < 256; i++) {
            if (hi <= lo) {
                lut[c][i] = (uint8_t)i;
                continue;
            }
            double scale = 255.0 / (hi - lo), offset = -lo * scale;
            int v = (int)(i * scale + offset);
            lut[c][i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
    apply_lut3(img, lut);
}

void aug_equalize(CtImage *img)
{
    uint32_t hist[3][256];
    uint8_t lut[3][256];
    histograms(img, hist);
    for (int c = 0; c < 3; c++) {
        /* step from all but the last non-empty bin; one bin or step 0: identity */
        uint64_t total = 0, last = 0;
        int nonzero = 0;
        for (int i = 0; i < 256; i++) {
            if (hist[c][i]) {
                nonzero++;
                total += hist[c][i];
                last = hist[c][i];
            }
        }
        uint64_t step = nonzero > 1 ? (total - last) / 255 : 0;
        uint64_t acc = step / 2;
        for (int i = 0; i < 256; i++) {
            if (!step) {
                lut[c][i] = (uint8_t)i;
                continue;
            }
            uint64_t v = acc / step;
            lut[c][i] = (uint8_t)(v > 255 ? 255 : v);
            acc += hist[c][i];
        }
    }
    apply_lut3(img, lut);
}

void aug_invert(CtImage *img)
{
    uint8_t lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = (uint8_t)(255 - i);
    apply_lut(img, lut);
}

void aug_posterize(CtImage *img, int bits)
{
    /* timm returns the image untouched at >= 8 bits; PIL's mask otherwise */
    if (bits >= 8)
        return;
    if (bits < 0)
        bits = 0;
    uint8_t lut[256], mask = (uint8_t)~((1u << (8 - bits)) - 1);
    for (int i = 0; i < 256; i++)
        lut[i] = (uint8_t)(i & mask);
    apply_lut(img, lut);
}

void aug_solarize(CtImage *img, int thresh)
{
    uint8_t lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = (uint8_t)(i < thresh ? i : 255 - i);
    apply_lut(img, lut);
}

void aug_solarize_add(CtImage *img, int add, int thresh)
{
    uint8_t lut[256];
    for (int i = 0; i < 256; i++) {
        int v = i < thresh ? i + add : i;
        lut[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    apply_lut(img, lut);
}

/* Mirrors a w x h plane of bpp-byte pixels left to right. */
static void hflip_plane(uint8_t *px, int w, int h, int bpp)
{
    for (int y = 0; y < h; y++) {
        uint8_t *l = px + (size_t)y * w * bpp, *r = l + (size_t)(w - 1) * bpp;
        for (; l < r; l += bpp, r -= bpp) {
            uint8_t t[3];
            memcpy(t, l, (size_t)bpp);
            memcpy(l, r, (size_t)bpp);
            memcpy(r, t, (size_t)bpp);
        }
    }
}

/* Mirrors a plane of h rows of `row` bytes top to bottom. */
static void vflip_plane(uint8_t *px, size_t row, int h)
{
    uint8_t buf[4096];
    for (int y = 0; y < h / 2; y++) {
        uint8_t *a = px + y * row, *b = px + (h - 1 - y) * row;
        for (size_t o = 0; o < row; o += sizeof buf) {
            size_t k = row - o < sizeof buf ? row - o : sizeof buf;
            memcpy(buf, a + o, k);
            memcpy(a + o, b + o, k);
            memcpy(b + o, buf, k);
        }
    }
}

void aug_hflip(CtImage *img)
{
    hflip_plane(img->px, img->w, img->h, 3);
    if (img->alpha)
        hflip_plane(img->alpha, img->w, img->h, 1);
}

void aug_vflip(CtImage *img)
{
    vflip_plane(img->px, (size_t)img->w * 3, img->h);
    if (img->alpha)
        vflip_plane(img->alpha, (size_t)img->w, img->h);
}

/* ---- ops: names and magnitude mapping ---- */

#define AUG_NAME(id, name) name,
static const char *const op_names[] = {AUG_OPS(AUG_NAME)};
#undef AUG_NAME
_Static_assert(sizeof op_names / sizeof op_names[0] == AUG_N_OPS, "one name per op");

const char *aug_op_name(AugOpKind k) { return k < AUG_N_OPS ? op_names[k] : "?"; }

int aug_op_by_name(const char *name)
{
    for (int k = 0; k < AUG_N_OPS; k++)
        if (!strcmp(op_names[k], name))
            return k;
    return -1;
}

static int is_geometric(AugOpKind k)
{
    return k == AUG_ROTATE || k == AUG_SHEAR_X || k == AUG_SHEAR_Y || k == AUG_TRANSLATE_X_REL ||
           k == AUG_TRANSLATE_Y_REL;
}

int aug_policy_geometric(const AugPolicy *p)
{
    for (int i = 0; i < p->n_ops; i++)
        if (is_geometric((AugOpKind)p->ops[i].kind))
            return 1;
    return 0;
}

/* Ops whose level_to_arg calls _randomly_negate. */
static int is_signed(AugOpKind k)
{
    return is_geometric(k) || k == AUG_COLOR_INC || k == AUG_CONTRAST_INC || k == AUG_BRIGHTNESS_INC ||
           k == AUG_SHARPNESS_INC;
}

/* _minmax_level_to_arg: level / 10 mapped onto [lo, hi], clamped. */
static double minmax_level(double level, double lo, double hi) { return fmax(lo, fmin(hi, lo + (hi - lo) * level)); }

void aug_op_apply(CtImage *img, CtImage *tmp, AugOpKind k, const AugOpArgs *a, const AugEnv *env)
{
    double level = a->magnitude / 10.0, sgn = a->negate ? -1.0 : 1.0;
    CtInterp interp = a->interp;
    const uint8_t *fill = env->fill;
    double enhance = level * 1.8 + 0.1;             /* _enhance_level_to_arg */
    double enhance_inc = fmax(0.1, 1.0 + sgn * (level * 0.9)); /* _enhance_increasing_level_to_arg */
    int poster = (int)(level * 4);
    int solar = (int)(level * 256) < 256 ? (int)(level * 256) : 256;
    switch (k) {
    case AUG_AUTOCONTRAST: aug_autocontrast(img); break;
    case AUG_EQUALIZE: aug_equalize(img); break;
    case AUG_INVERT: aug_invert(img); break;
    case AUG_ROTATE: aug_rotate(img, tmp, sgn * (level * 30.0), interp, fill); break;
    case AUG_POSTERIZE: aug_posterize(img, poster); break;
    case AUG_POSTERIZE_INC: aug_posterize(img, 4 - poster); break;
    case AUG_POSTERIZE_ORIG: aug_posterize(img, poster + 4); break;
    case AUG_SOLARIZE: aug_solarize(img, solar); break;
    case AUG_SOLARIZE_INC: aug_solarize(img, 256 - solar); break;
    case AUG_SOLARIZE_ADD: {
        int add = (int)(level * 110);
        aug_solarize_add(img, add < 128 ? add : 128, 128);
        break;
    }
    case AUG_COLOR: enhance_color(img, enhance); break;
    case AUG_COLOR_INC: enhance_color(img, enhance_inc); break;
    case AUG_CONTRAST: enhance_contrast(img, enhance); break;
    case AUG_CONTRAST_INC: enhance_contrast(img, enhance_inc); break;
    case AUG_BRIGHTNESS: enhance_brightness(img, enhance); break;
    case AUG_BRIGHTNESS_INC: enhance_brightness(img, enhance_inc); break;
    case AUG_SHARPNESS: enhance_sharpness(img, tmp, enhance); break;
    case AUG_SHARPNESS_INC: enhance_sharpness(img, tmp, enhance_inc); break;
    case AUG_SHEAR_X:
    case AUG_SHEAR_Y: {
        double f = sgn * (level * 0.3);
        double a[6] = {1, k == AUG_SHEAR_X ? f : 0, 0, k == AUG_SHEAR_Y ? f : 0, 1, 0};
        aug_affine(img, tmp, a, interp, fill);
        break;
    }
    case AUG_TRANSLATE_X_REL:
    case AUG_TRANSLATE_Y_REL: {
        /* _translate_rel_level_to_arg, pixels = pct * size */
        double pct = sgn * (level * env->translate_pct);
        double a[6] = {1, 0, k == AUG_TRANSLATE_X_REL ? pct * img->w : 0,
                       0, 1, k == AUG_TRANSLATE_Y_REL ? pct * img->h : 0};
        aug_affine(img, tmp, a, interp, fill);
        break;
    }
    case AUG_DESATURATE: /* desaturate(): Color at 1 - factor, factor in [0.5, 1] */
        enhance_color(img, fmin(1.0, fmax(0.0, 1.0 - minmax_level(level, 0.5, 1.0))));
        break;
    case AUG_GAUSSIAN_BLUR: pil_gaussian_blur(img, tmp, (float)minmax_level(level, 0.1, 2.0)); break;
    case AUG_GAUSSIAN_BLUR_RAND: /* gaussian_blur_rand: random.uniform(0.1, 2.0 * factor) */
        pil_gaussian_blur(img, tmp, (float)(0.1 + (2.0 * minmax_level(level, 0.0, 1.0) - 0.1) * a->u));
        break;
    default: CT_ASSERT(!"unknown augment op");
    }
}

/* AugmentOp.__call__. */
static void op_call(const AugPolicy *p, const AugOp *op, const AugEnv *env, CtImage *img, CtImage *tmp,
                    CtRng *rng)
{
    if (op->prob < 1.0 && rng_uniform(rng) > op->prob)
        return;
    double m = op->magnitude;
    if (isinf(p->magnitude_std))
        m = rng_range(rng, 0, m);
    else if (p->magnitude_std > 0)
        m = m + p->magnitude_std * rng_normal(rng);
    AugOpArgs a = {.magnitude = fmax(0.0, fmin(m, p->magnitude_max)), .interp = env->interp};
    AugOpKind k = (AugOpKind)op->kind;
    a.negate = is_signed(k) ? rng_uniform(rng) > 0.5 : 0;
    if (is_geometric(k) && env->random_interp)
        a.interp = rng_below(rng, 2) ? CT_INTERP_BICUBIC : CT_INTERP_BILINEAR;
    if (k == AUG_GAUSSIAN_BLUR_RAND)
        a.u = rng_uniform(rng);
    aug_op_apply(img, tmp, k, &a, env);
}

/* AugMixAugment.__call__: width chains of 1..3 random ops, each on a copy
 * of the image, mixed by Dirichlet weights and blended with the image by a
 * Beta draw (basic), or blended into it one by one (blended). */
static void augmix_apply(const AugPolicy *p, const AugEnv *env, CtImage *img, AugScratch *s, CtRng *rng)
{
    float ws[AUG_MAX_OPS], m;
    augmix_draw_weights(p->alpha, p->width, rng, ws, &m);
    size_t bytes = (size_t)img->w * img->h * 3;
    if (p->blended) {
        augmix_blended_weights(ws, p->width, m, ws);
        memcpy(s->orig.px, img->px, bytes);
    } else {
        memset(s->acc, 0, bytes * sizeof *s->acc);
    }
    for (int c = 0; c < p->width; c++) {
        int depth = p->depth > 0 ? p->depth : 1 + (int)rng_below(rng, 3);
        memcpy(s->chain.px, p->blended ? s->orig.px : img->px, bytes);
        for (int d = 0; d < depth; d++)
            op_call(p, &p->ops[rng_below(rng, (uint64_t)p->n_ops)], env, &s->chain, &s->tmp, rng);
        if (p->blended)
            image_blend(img, &s->chain, ws[c]);
        else
            augmix_accumulate(s->acc, &s->chain, ws[c]);
    }
    if (!p->blended)
        augmix_finish(img, s->acc, m);
}

int aug_scratch_alloc(const AugPolicy *p, int w, int h, AugScratch *s, CtErr *err)
{
    memset(s, 0, sizeof *s);
    int mix = p->kind == AUG_MIX;
    if (image_alloc(&s->tmp, w, h, err) || (mix && image_alloc(&s->chain, w, h, err)) ||
        (mix && p->blended && image_alloc(&s->orig, w, h, err))) {
        aug_scratch_free(s);
        return -1;
    }
    if (mix && !p->blended && !(s->acc = malloc(sizeof *s->acc * (size_t)w * h * 3))) {
        aug_scratch_free(s);
        return ct_fail(err, "augmix: out of memory for a %dx%d image", w, h);
    }
    return 0;
}

void aug_scratch_free(AugScratch *s)
{
    image_free(&s->tmp);
    image_free(&s->chain);
    image_free(&s->orig);
    free(s->acc);
    s->acc = NULL;
}

void aug_policy_apply(const AugPolicy *p, const AugEnv *env, CtImage *img, AugScratch *s, CtRng *rng)
{
    CtImage *tmp = &s->tmp;
    if (p->kind == AUG_MIX) {
        augmix_apply(p, env, img, s, rng);
        return;
    }
    if (p->kind == AUG_AUTO) {
        /* AutoAugment: one sub-policy uniformly */
        int s = (int)rng_below(rng, (uint64_t)(p->n_ops / p->sub_len));
        for (int i = 0; i < p->sub_len; i++)
            op_call(p, &p->ops[p->sub_len * s + i], env, img, tmp, rng);
        return;
    }
    if (!p->weighted) {
        /* np.random.choice(ops, n, replace=True) */
        for (int l = 0; l < p->num_layers; l++)
            op_call(p, &p->ops[rng_below(rng, (uint64_t)p->n_ops)], env, img, tmp, rng);
        return;
    }
    /* np.random.choice(ops, n, replace=False, p=weights): successive draws
     * by weight among the ops not yet drawn */
    int taken[AUG_MAX_OPS] = {0};
    for (int l = 0; l < p->num_layers; l++) {
        double total = 0;
        for (int i = 0; i < p->n_ops; i++)
            total += taken[i] ? 0 : p->weights[i];
        double u = rng_uniform(rng) * total, acc = 0;
        int pick = -1;
        for (int i = 0; i < p->n_ops; i++) {
            if (taken[i])
                continue;
            pick = i;
            acc += p->weights[i];
            if (u < acc)
                break;
        }
        taken[pick] = 1;
        op_call(p, &p->ops[pick], env, img, tmp, rng);
    }
}
