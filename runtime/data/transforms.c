/*
 * timm's train and eval transforms (transforms_factory.py) from encoded
 * bytes to an img_size x img_size RGB crop.
 *
 * Train: RandomResizedCropAndInterpolation (or, train_crop_mode rkrc/rkrr,
 * ResizeKeepRatio and a reflect-padded centre/random crop) ->
 * RandomHorizontalFlip -> RandomVerticalFlip -> RandAugment/AutoAugment/
 * AugMix -> ColorJitter (with probability color_jitter_prob if set; timm
 * leaves it out under an auto_augment policy but a '3a' one) ->
 * RandomGrayscale -> GaussianBlur (kernel 23, sigma in [0.1, 2], with
 * probability gaussian_blur_prob). The crop box (or resize) is drawn on
 * image_probe's size before decoding, so a JPEG is decoded at the coarsest
 * DCT scale whose shrunk crop still covers the output (then the result is
 * close to, not bit-identical with, timm's full decode).
 *
 * Eval: resize to scale_size = floor(img_size / crop_pct) per crop mode
 * ('center': shorter side, 'squash': both sides, 'border': longer side),
 * then a centre crop, padding where the image is smaller.
 *
 * Gray ('L') images are converted right after decoding, as timm's dataset
 * converts before any transform, and go through the same RGB code with
 * three equal channels (image_to_gray says why that is exact); the output
 * keeps one. 'RGBA' images carry their alpha band beside the RGB (CtImage),
 * which every step here moves, resamples or keeps as torchvision does; the
 * output interleaves it as the fourth channel.
 */
#include "runtime/data/transforms.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/augment.h"

#define IMAGENET_MEAN {0.485, 0.456, 0.406}

TrainTransform train_transform_default(int img_size)
{
    return (TrainTransform){
        .img_size = img_size,
        .scale = {0.08, 1.0},
        .ratio = {3.0 / 4.0, 4.0 / 3.0},
        .interp = CT_INTERP_BILINEAR,
        .hflip = 0.5,
        .color_jitter = 0.4,
        .color_jitter_prob = -1,
        .mean = IMAGENET_MEAN,
    };
}

int train_crop_mode_parse(const char *s, CtTrainCrop *mode, CtErr *err)
{
    if (!s || !*s || !strcmp(s, "rrc"))
        *mode = CT_TRAIN_RRC;
    else if (!strcmp(s, "rkrc"))
        *mode = CT_TRAIN_RKRC;
    else if (!strcmp(s, "rkrr"))
        *mode = CT_TRAIN_RKRR;
    else
        return ct_fail(err, "--train-crop-mode %s is not one of rrc, rkrc, rkrr", s);
    return 0;
}

EvalTransform eval_transform_default(int img_size)
{
    return (EvalTransform){
        .img_size = img_size,
        .crop_pct = 0.875,
        .crop_mode = CT_CROP_CENTER,
        .interp = CT_INTERP_BILINEAR,
        .mean = IMAGENET_MEAN,
    };
}

/* n pixels of the RGB px (and alpha: NULL is 255) as the output holds
 * them: all three bytes, (chans 1) the first, a gray image's channels being
 * equal, or (chans 4) the three and the alpha. */
static void put_pixels(uint8_t *out, const uint8_t *px, const uint8_t *alpha, size_t n, int chans)
{
    if (chans == 3) {
        memcpy(out, px, n * 3);
    } else if (chans == 4) {
        for (size_t i = 0; i < n; i++) {
            memcpy(out + 4 * i, px + 3 * i, 3);
            out[4 * i + 3] = alpha ? alpha[i] : 255;
        }
    } else {
        for (size_t i = 0; i < n; i++)
            out[i] = px[3 * i];
    }
}

/* Python's int(round(x)): halves to even. */
static int round_even(double x) { return (int)nearbyint(x); }

/* round(255 * mean), clipped to a byte (timm's img_mean and border fill). */
static void mean_fill(const double mean[3], uint8_t fill[3])
{
    for (int c = 0; c < 3; c++) {
        int v = round_even(255 * mean[c]);
        fill[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

CropBox rrc_sample(int w, int h, const double scale[2], const double ratio[2], CtRng *rng)
{
    double area = (double)w * h, log_lo = log(ratio[0]), log_hi = log(ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target_area = rng_range(rng, scale[0], scale[1]) * area;
        double aspect = exp(rng_range(rng, log_lo, log_hi));
        int tw = round_even(sqrt(target_area * aspect)), th = round_even(sqrt(target_area / aspect));
        /* (timm would go on to crash on an empty box; it counts as a miss here) */
        if (tw <= w && th <= h && tw > 0 && th > 0) {
            int y = (int)rng_below(rng, (uint64_t)(h - th + 1));
            int x = (int)rng_below(rng, (uint64_t)(w - tw + 1));
            return (CropBox){x, y, tw, th};
        }
    }
    /* fallback: the central crop clipped to the ratio range */
    double in_ratio = (double)w / h, rmin = fmin(ratio[0], ratio[1]), rmax = fmax(ratio[0], ratio[1]);
    int tw = w, th = h;
    if (in_ratio < rmin)
        th = round_even(tw / rmin);
    else if (in_ratio > rmax)
        tw = round_even(th * rmax);
    tw = tw < 1 ? 1 : tw;
    th = th < 1 ? 1 : th;
    return (CropBox){(w - tw) / 2, (h - th) / 2, tw, th};
}

int crop_offset(int in, int crop) { return crop > in ? -((crop - in) / 2) : round_even((in - crop) / 2.0); }

/* RandomCropOrPad.get_params on one axis: copysign(randint(0, |d|), d). */
static int random_offset(int in, int crop, CtRng *rng)
{
    int d = in - crop, a = d < 0 ? -d : d, v = (int)rng_below(rng, (uint64_t)a + 1);
    return d < 0 ? -v : v;
}

/* ResizeKeepRatio.get_params (longest 0, both random probabilities 0.5,
 * random_scale_area): the size the whole image is resized to. */
static void rkr_size(const TrainTransform *t, int w, int h, CtRng *rng, int *rw, int *rh)
{
    double ratio = fmin((double)h / t->img_size, (double)w / t->img_size), fh = 1, fw = 1;
    if (rng_uniform(rng) < 0.5)
        fh = fw = 1 / sqrt(rng_range(rng, t->scale[0], t->scale[1]));
    if (rng_uniform(rng) < 0.5) {
        double aspect = sqrt(exp(rng_range(rng, log(t->ratio[0]), log(t->ratio[1]))));
        fh /= aspect;
        fw *= aspect;
    }
    *rh = round_even(h * fh / ratio);
    *rw = round_even(w * fw / ratio);
    *rh = *rh < 1 ? 1 : *rh;
    *rw = *rw < 1 ? 1 : *rw;
}

void train_sample(const TrainTransform *t, int w, int h, CtRng *rng, TrainSample *s)
{
    int size = t->img_size;
    if (t->crop_mode == CT_TRAIN_RRC) {
        s->box = rrc_sample(w, h, t->scale, t->ratio, rng);
        s->rw = s->rh = size;
    } else {
        s->box = (CropBox){0, 0, w, h};
        rkr_size(t, w, h, rng, &s->rw, &s->rh);
    }
    s->interp = t->interp;
    if (t->random_interp)
        s->interp = rng_below(rng, 2) ? CT_INTERP_BICUBIC : CT_INTERP_BILINEAR;
    s->top = s->left = 0;
    if (t->crop_mode == CT_TRAIN_RKRC) {
        s->top = crop_offset(s->rh, size);
        s->left = crop_offset(s->rw, size);
    } else if (t->crop_mode == CT_TRAIN_RKRR) {
        s->top = random_offset(s->rh, size, rng);
        s->left = random_offset(s->rw, size, rng);
    }
    s->hflip = t->hflip > 0 && rng_uniform(rng) < t->hflip;
    s->vflip = t->vflip > 0 && rng_uniform(rng) < t->vflip;
}

int decode_crop_resize(const uint8_t *data, size_t n, int w, int h, CropBox box, int out_w, int out_h, CtInterp interp,
                       int allow_shrink, CtImgMode mode, CtImage *out, CtErr *err)
{
    out->w = out->h = 0;
    out->px = out->alpha = NULL;
    if (box.w < 1 || box.h < 1 || box.x < 0 || box.y < 0 || box.x + box.w > w || box.y + box.h > h)
        return ct_fail(err, "crop: box %d,%d %dx%d is outside the %dx%d image", box.x, box.y, box.w, box.h, w, h);
    int shrink = 1;
    for (int s = 8; allow_shrink && s > 1; s /= 2) {
        if (box.w >= out_w * s && box.h >= out_h * s) {
            shrink = s;
            break;
        }
    }
    /* the box on the decoded image (identical unless it was shrunk), then
     * the pixels that cover it: torchvision crops before it resizes, so the
     * filters must not reach past the crop. Only those pixels are decoded. */
    int dw, dh;
    image_decoded_size(data, n, w, h, shrink, &dw, &dh);
    double sx = (double)dw / w, sy = (double)dh / h;
    double bx0 = box.x * sx, by0 = box.y * sy, bx1 = (box.x + box.w) * sx, by1 = (box.y + box.h) * sy;
    int cx0 = (int)floor(bx0), cy0 = (int)floor(by0), cx1 = (int)ceil(bx1), cy1 = (int)ceil(by1);
    cx1 = cx1 > dw ? dw : cx1;
    cy1 = cy1 > dh ? dh : cy1;
    CtImage src;
    if ((mode == CT_IMG_RGBA ? image_decode_region_rgba : image_decode_region)(data, n, shrink, w, h, cx0, cy0, cx1,
                                                                              cy1, &src, err))
        return -1;
    if (mode == CT_IMG_L)
        image_to_gray(&src);
    CtBox rbox = {bx0 - cx0, by0 - cy0, bx1 - cx0, by1 - cy0};
    if (src.w == out_w && src.h == out_h && rbox.x0 == 0 && rbox.y0 == 0 && rbox.x1 == out_w && rbox.y1 == out_h) {
        /* PIL's resize to the same size is a copy */
        *out = src;
        return 0;
    }
    int rc = image_resize(&src, rbox, out_w, out_h, interp, out, err);
    image_free(&src);
    if (rc)
        return ct_failctx(err, "crop %d,%d %dx%d of a %dx%d image", box.x, box.y, box.w, box.h, w, h);
    return 0;
}

/* train_transform_check, with the auto_augment policy parsed into *policy. */
static int check(const TrainTransform *t, AugPolicy *policy, CtErr *err)
{
    if (t->img_size < 1)
        return ct_fail(err, "train transform: image size %d", t->img_size);
    /* torchvision's RandomResizedCrop only warns on a reversed range, and
     * then samples nonsense: refuse it instead */
    if (!(t->scale[0] >= 0 && t->scale[0] <= t->scale[1] && isfinite(t->scale[1])))
        return ct_fail(err, "scale %g %g: needs 0 <= MIN <= MAX (fractions of the image's area)", t->scale[0],
                       t->scale[1]);
    if (!(t->ratio[0] > 0 && t->ratio[0] <= t->ratio[1] && isfinite(t->ratio[1])))
        return ct_fail(err, "ratio %g %g: needs 0 < MIN <= MAX (aspect ratios)", t->ratio[0], t->ratio[1]);
    if (t->crop_mode != CT_TRAIN_RRC && t->crop_mode != CT_TRAIN_RKRC && t->crop_mode != CT_TRAIN_RKRR)
        return ct_fail(err, "train_crop_mode %d: not rrc, rkrc or rkrr", (int)t->crop_mode);
    /* ResizeKeepRatio zooms by 1 / sqrt(scale): Python divides by zero at 0 */
    if (t->crop_mode != CT_TRAIN_RRC && !(t->scale[0] > 0))
        return ct_fail(err, "scale %g %g: the rkrc/rkrr crops zoom by 1/sqrt(scale), needs MIN > 0",
                       t->scale[0], t->scale[1]);
    static const char *const names[] = {"hflip", "vflip", "grayscale_prob", "gaussian_blur_prob"};
    const double probs[4] = {t->hflip, t->vflip, t->grayscale_prob, t->gaussian_blur_prob};
    for (int k = 0; k < 4; k++)
        if (!(probs[k] >= 0 && probs[k] <= 1))
            return ct_fail(err, "%s %g: a probability, in [0, 1]", names[k], probs[k]);
    if (!(t->color_jitter_prob < 0 || t->color_jitter_prob <= 1))
        return ct_fail(err, "color_jitter_prob %g: a probability, in [0, 1]", t->color_jitter_prob);
    /* torch's reflect padding of the 23 x 23 blur needs 11 < each side */
    if (t->gaussian_blur_prob > 0 && t->img_size < 12)
        return ct_fail(err, "gaussian_blur_prob %g: torchvision's 23 x 23 blur pads by reflection, which needs an "
                       "image size of at least 12, not %d", t->gaussian_blur_prob, t->img_size);
    if (!(t->color_jitter >= 0 && isfinite(t->color_jitter))) /* torchvision's ColorJitter raises */
        return ct_fail(err, "color_jitter %g: must be >= 0, a number", t->color_jitter);
    if (!(t->jitter_hue >= 0 && t->jitter_hue <= 0.5))
        return ct_fail(err, "color_jitter hue %g: must be in [0, 0.5]", t->jitter_hue);
    for (int c = 0; c < 3; c++)
        if (!isfinite(t->mean[c]))
            return ct_fail(err, "mean %g: not a number", t->mean[c]);
    if (t->auto_augment && *t->auto_augment && aug_parse(t->auto_augment, policy, err))
        return -1;
    if (t->mode == CT_IMG_RGBA && t->auto_augment && *t->auto_augment)
        return ct_fail(err, "auto_augment %s on RGBA images: not built (timm's policies treat the alpha band op by "
                       "op: some invert or equalize it, some keep it)", t->auto_augment);
    /* torchvision's RandomGrayscale raises: it makes 1 or 3 channels, not 4 */
    if (t->mode == CT_IMG_RGBA && t->grayscale_prob > 0)
        return ct_fail(err, "grayscale_prob %g on RGBA images: torchvision's RandomGrayscale refuses 4-channel "
                       "images", t->grayscale_prob);
    /* timm raises at the first rotate, shear or translate ('3a' and 't3a' have none) */
    if (t->mode == CT_IMG_L && t->auto_augment && *t->auto_augment && aug_policy_geometric(policy))
        return ct_fail(err, "auto_augment %s on gray ('L') images: timm's policies fill the corners of rotated, "
                       "sheared and translated images with the 3-value mean colour, which PIL refuses for 'L' "
                       "images", t->auto_augment);
    return 0;
}

int train_transform_check(const TrainTransform *t, CtErr *err)
{
    AugPolicy policy;
    return check(t, &policy, err);
}

/* The secondary transforms (create_transform(separate=True)'s second
 * stage): the policy, ColorJitter (torchvision's RandomApply skips it when
 * p < torch.rand(1)), RandomGrayscale, RandomApply(GaussianBlur). */
static void train_secondary(const TrainTransform *t, const AugPolicy *policy, CtImage *img, AugScratch *scratch,
                            CtRng *rng)
{
    int use_aa = t->auto_augment && *t->auto_augment;
    if (use_aa) {
        /* AugMix's translations reach 0.3 of the image, the others' 0.45 */
        AugEnv env = {.interp = t->interp, .random_interp = t->random_interp,
                      .translate_pct = policy->kind == AUG_MIX ? 0.3 : 0.45};
        mean_fill(t->mean, env.fill);
        aug_policy_apply(policy, &env, img, scratch, rng);
    }
    int jitter = (!use_aa || strstr(t->auto_augment, "3a")) && (t->color_jitter > 0 || t->jitter_hue > 0);
    if (jitter && (t->color_jitter_prob < 0 || !(t->color_jitter_prob < rng_uniform(rng)))) {
        double cj = t->color_jitter > 0 ? t->color_jitter : 0;
        color_jitter(img, cj, cj, cj, t->jitter_hue > 0 ? t->jitter_hue : 0, rng);
    }
    if (t->grayscale_prob > 0 && rng_uniform(rng) < t->grayscale_prob)
        image_to_gray(img);
    if (t->gaussian_blur_prob > 0 && !(t->gaussian_blur_prob < rng_uniform(rng)))
        tv_gaussian_blur(img, &scratch->tmp, 23, rng_range(rng, 0.1, 2.0));
}

int transform_train_splits(const TrainTransform *t, const uint8_t *data, size_t n, CtRng *rng, int splits,
                           uint8_t *const *out, CtErr *err)
{
    int size = t->img_size;
    AugPolicy policy = {.kind = AUG_AUTO};
    if (check(t, &policy, err))
        return -1;
    if (splits < 1 || splits > CT_MAX_AUG_SPLITS)
        return ct_fail(err, "train transform: %d splits (1..%d)", splits, CT_MAX_AUG_SPLITS);
    int w, h;
    if (image_probe(data, n, &w, &h, err))
        return -1;
    /* the primary transforms: the crop, resize and flips */
    TrainSample s;
    train_sample(t, w, h, rng, &s);
    CtImage img, aug = {0};
    AugScratch scratch;
    if (decode_crop_resize(data, n, w, h, s.box, s.rw, s.rh, s.interp, 1, t->mode, &img, err))
        return -1;
    if (t->crop_mode != CT_TRAIN_RRC) {
        CtImage resized = img;
        int rc = crop_reflect(&resized, s.top, s.left, size, &img, err);
        image_free(&resized);
        if (rc)
            return -1;
    }
    int rc = 0;
    if (aug_scratch_alloc(&policy, size, size, &scratch, err) || (splits > 1 && image_alloc(&aug, size, size, err))) {
        image_free(&img);
        aug_scratch_free(&scratch);
        return -1;
    }
    if (s.hflip)
        aug_hflip(&img);
    if (s.vflip)
        aug_vflip(&img);
    size_t npx = (size_t)size * size;
    int chans = img_mode_channels(t->mode);
    if (splits == 1) {
        train_secondary(t, &policy, &img, &scratch, rng);
        put_pixels(out[0], img.px, img.alpha, npx, chans);
    } else {
        /* AugMixDataset: the clean split, then each other split the secondary
         * transforms on a copy of it, their draws in split order */
        put_pixels(out[0], img.px, img.alpha, npx, chans);
        for (int k = 1; k < splits; k++) {
            memcpy(aug.px, img.px, npx * 3);
            if (img.alpha && !aug.alpha && !(aug.alpha = malloc(npx))) {
                rc = ct_fail(err, "train transform: out of memory for a %dx%d alpha band", size, size);
                break;
            }
            if (img.alpha) {
                memcpy(aug.alpha, img.alpha, npx);
            } else {
                free(aug.alpha);
                aug.alpha = NULL;
            }
            train_secondary(t, &policy, &aug, &scratch, rng);
            put_pixels(out[k], aug.px, aug.alpha, npx, chans);
        }
    }
    image_free(&img);
    image_free(&aug);
    aug_scratch_free(&scratch);
    return rc;
}

int transform_train(const TrainTransform *t, const uint8_t *data, size_t n, CtRng *rng, uint8_t *out, CtErr *err)
{
    return transform_train_splits(t, data, n, rng, 1, &out, err);
}

/* numpy's 'reflect' index: the edge not repeated, period 2 (n - 1). */
static int reflect_index(int i, int n)
{
    if (n == 1)
        return 0;
    int p = 2 * (n - 1);
    i %= p;
    i = i < 0 ? i + p : i;
    return i < n ? i : p - i;
}

int crop_reflect(const CtImage *src, int top, int left, int size, CtImage *out, CtErr *err)
{
    if (image_alloc(out, size, size, err))
        return -1;
    if (src->alpha && !(out->alpha = malloc((size_t)size * size))) {
        image_free(out);
        return ct_fail(err, "crop: out of memory for a %dx%d alpha band", size, size);
    }
    for (int y = 0; y < size; y++) {
        size_t sy = (size_t)reflect_index(top + y, src->h) * src->w, oy = (size_t)y * size;
        const uint8_t *row = src->px + sy * 3;
        for (int x = 0; x < size; x++) {
            size_t sx = (size_t)reflect_index(left + x, src->w);
            memcpy(out->px + (oy + x) * 3, row + sx * 3, 3);
            if (src->alpha)
                out->alpha[oy + x] = src->alpha[sy + sx];
        }
    }
    return 0;
}

/* The cw x ch crop into out, chans bytes a pixel (put_pixels); fill: the
 * padding's chans bytes. */
static void center_crop_or_pad(const CtImage *src, int cw, int ch, const uint8_t fill[4], int chans, uint8_t *out)
{
    int ox = crop_offset(src->w, cw), oy = crop_offset(src->h, ch);
    int x_lo = ox < 0 ? -ox : 0, x_hi = src->w - ox < cw ? src->w - ox : cw;
    for (int y = 0; y < ch; y++) {
        uint8_t *o = out + (size_t)y * cw * chans;
        int sy = y + oy;
        if (sy < 0 || sy >= src->h || x_hi <= x_lo) {
            for (int x = 0; x < cw; x++)
                memcpy(o + chans * x, fill, (size_t)chans);
            continue;
        }
        for (int x = 0; x < x_lo; x++)
            memcpy(o + chans * x, fill, (size_t)chans);
        size_t at = (size_t)sy * src->w + x_lo + ox;
        put_pixels(o + chans * x_lo, src->px + at * 3, src->alpha ? src->alpha + at : NULL, (size_t)(x_hi - x_lo),
                   chans);
        for (int x = x_hi; x < cw; x++)
            memcpy(o + chans * x, fill, (size_t)chans);
    }
}

int eval_transform_check(const EvalTransform *t, CtErr *err)
{
    if (t->mode != CT_IMG_RGB && t->crop_mode == CT_CROP_BORDER) /* torchvision's pad raises on the first image it pads */
        return ct_fail(err, "crop mode 'border' on %s images: timm pads with the 3-value mean colour, which "
                       "torchvision refuses for %d-channel images", t->mode == CT_IMG_L ? "gray ('L')" : "RGBA",
                       img_mode_channels(t->mode));
    return 0;
}

int transform_eval(const EvalTransform *t, const uint8_t *data, size_t n, uint8_t *out, CtErr *err)
{
    int size = t->img_size;
    double crop_pct = t->crop_pct == 0 ? 0.875 : t->crop_pct; /* timm: crop_pct or DEFAULT_CROP_PCT */
    if (size < 1 || !(crop_pct > 0))
        return ct_fail(err, "eval transform: bad settings (img_size %d, crop_pct %g)", size, t->crop_pct);
    int scale_size = (int)floor(size / crop_pct);
    if (scale_size < 1)
        return ct_fail(err, "eval transform: img_size %d / crop_pct %g leaves nothing to resize to", size, crop_pct);
    if (eval_transform_check(t, err))
        return -1;
    CtImage img, resized;
    if ((t->mode == CT_IMG_RGBA ? image_decode_rgba : image_decode)(data, n, 1, &img, err))
        return -1;
    if (t->mode == CT_IMG_L)
        image_to_gray(&img);
    int rw, rh;
    uint8_t fill[4] = {0, 0, 0, 0};
    switch (t->crop_mode) {
    case CT_CROP_SQUASH: rw = rh = scale_size; break;
    case CT_CROP_BORDER: {
        /* ResizeKeepRatio(longest=1): the longer side to scale_size */
        double ratio = fmax((double)img.h / scale_size, (double)img.w / scale_size);
        rw = round_even(img.w / ratio);
        rh = round_even(img.h / ratio);
        mean_fill(t->mean, fill);
        break;
    }
    default: {
        /* Resize(int): the shorter side to scale_size, the longer int(s * long / short) */
        int w_short = img.w <= img.h, shorter = w_short ? img.w : img.h, longer = w_short ? img.h : img.w;
        int l = (int)((double)((long long)scale_size * longer) / shorter);
        rw = w_short ? scale_size : l;
        rh = w_short ? l : scale_size;
        break;
    }
    }
    rw = rw < 1 ? 1 : rw;
    rh = rh < 1 ? 1 : rh;
    if (rw == img.w && rh == img.h) {
        resized = img; /* PIL's resize to the same size is a copy */
    } else {
        CtBox box = {0, 0, img.w, img.h};
        int rc = image_resize(&img, box, rw, rh, t->interp, &resized, err);
        image_free(&img);
        if (rc)
            return ct_failctx(err, "eval transform: resize to %dx%d", rw, rh);
    }
    center_crop_or_pad(&resized, size, size, fill, img_mode_channels(t->mode), out);
    image_free(&resized);
    return 0;
}
