/*
 * The image-level operations behind transforms.c, on 8-bit RGB CtImages:
 * PIL 9.4's ImageOps / ImageEnhance / Image.transform as timm's
 * auto_augment.py calls them and the RandAugment / AutoAugment policies
 * (augment.c, augment_geom.c), torchvision 0.14's ColorJitter on PIL images
 * (color.c), and the random choices of the train transform (transforms.c).
 * Internal to runtime/data; tests reach the deterministic pieces through it.
 *
 * Ops work in place. Those that need a second buffer take `tmp`, an image of
 * the same size that they may clobber (its pixels are swapped with img's).
 *
 * Bit-exactness with PIL rests on evaluating PIL's float/double expressions
 * as written: ISO C mode (-std=c11, GCC's -ffp-contract=off) and no
 * -ffast-math; an FMA-contracting build would drift by an LSB here and there.
 */
#ifndef CTIMM_DATA_AUGMENT_H
#define CTIMM_DATA_AUGMENT_H

#include <stdint.h>

#include "runtime/data/image.h"
#include "runtime/data/rng.h"
#include "runtime/data/transforms.h"

/* ---- colour (color.c): PIL ImageEnhance, torchvision adjust_hue ---- */

/* ImageEnhance.Brightness / Contrast / Color / Sharpness(img).enhance(f). */
void enhance_brightness(CtImage *img, double factor);
void enhance_contrast(CtImage *img, double factor);
void enhance_color(CtImage *img, double factor);
void enhance_sharpness(CtImage *img, CtImage *tmp, double factor);
/* torchvision's adjust_hue on a PIL image: through PIL's 8-bit HSV. */
void adjust_hue(CtImage *img, double hue_factor);
/* torchvision.transforms.ColorJitter(b, c, s, h): factors uniform in
 * [max(0, 1-b), 1+b] (hue in [-h, h]), applied in a random order; a zero
 * argument leaves that adjustment out. */
void color_jitter(CtImage *img, double brightness, double contrast, double saturation, double hue, CtRng *rng);

/* ---- pixel ops (augment.c): PIL ImageOps ---- */

void aug_autocontrast(CtImage *img);
void aug_equalize(CtImage *img);
void aug_invert(CtImage *img);
void aug_posterize(CtImage *img, int bits);
void aug_solarize(CtImage *img, int thresh);
void aug_solarize_add(CtImage *img, int add, int thresh);
void aug_hflip(CtImage *img);
void aug_vflip(CtImage *img);

/* ---- geometry (augment_geom.c): PIL Image.transform(AFFINE) / rotate ---- */

/* img.transform(img.size, AFFINE, a, resample, fillcolor=fill): output pixel
 * (x, y) samples the input at a * (x + .5, y + .5); outside it keeps fill. */
void aug_affine(CtImage *img, CtImage *tmp, const double a[6], CtInterp interp, const uint8_t fill[3]);
/* img.rotate(degrees, resample, fillcolor=fill), counter-clockwise. */
void aug_rotate(CtImage *img, CtImage *tmp, double degrees, CtInterp interp, const uint8_t fill[3]);

/* ---- policies (augment.c): timm's RandAugment / AutoAugment ---- */

#define AUG_OPS(X)                                                                                      \
    X(AUTOCONTRAST, "AutoContrast") X(EQUALIZE, "Equalize") X(INVERT, "Invert") X(ROTATE, "Rotate")    \
    X(POSTERIZE, "Posterize") X(POSTERIZE_INC, "PosterizeIncreasing")                                  \
    X(POSTERIZE_ORIG, "PosterizeOriginal") X(SOLARIZE, "Solarize") X(SOLARIZE_INC, "SolarizeIncreasing") \
    X(SOLARIZE_ADD, "SolarizeAdd") X(COLOR, "Color") X(COLOR_INC, "ColorIncreasing")                   \
    X(CONTRAST, "Contrast") X(CONTRAST_INC, "ContrastIncreasing") X(BRIGHTNESS, "Brightness")          \
    X(BRIGHTNESS_INC, "BrightnessIncreasing") X(SHARPNESS, "Sharpness")                                \
    X(SHARPNESS_INC, "SharpnessIncreasing") X(SHEAR_X, "ShearX") X(SHEAR_Y, "ShearY")                  \
    X(TRANSLATE_X_REL, "TranslateXRel") X(TRANSLATE_Y_REL, "TranslateYRel") X(DESATURATE, "Desaturate")     \
    X(GAUSSIAN_BLUR, "GaussianBlur") X(GAUSSIAN_BLUR_RAND, "GaussianBlurRand")

#define AUG_ENUM(id, name) AUG_##id,
typedef enum AugOpKind { AUG_OPS(AUG_ENUM) AUG_N_OPS } AugOpKind;
#undef AUG_ENUM

/* timm's name for an op ("ShearX"); its kind by name, -1 if unknown. */
const char *aug_op_name(AugOpKind k);
int aug_op_by_name(const char *name);

typedef struct AugOp {
    uint8_t kind; /* AugOpKind */
    double prob, magnitude;
} AugOp;

#define AUG_MAX_OPS 64

typedef enum AugPolicyKind { AUG_AUTO, AUG_RAND, AUG_MIX } AugPolicyKind;

typedef struct AugPolicy {
    AugPolicyKind kind;   /* AutoAugment ("original", "v0", "3a" ...), RandAugment ("rand-..."), AugMix */
    int sub_len;          /* AutoAugment: ops per sub-policy (2; 1 for '3a') */
    int num_layers;       /* RandAugment: ops drawn per image */
    int weighted;         /* RandAugment 'tweights': drawn without replacement by weight */
    double magnitude_std; /* 0: fixed; INFINITY: uniform in [0, m] */
    double magnitude_max; /* upper clip of the sampled magnitude (timm's 10 unless mmax) */
    int n_ops;            /* RandAugment, AugMix: the op list; AutoAugment: n_ops / sub_len sub-policies */
    int width, depth;     /* AugMix: chains mixed; ops per chain (-1: 1..3 at random) */
    int blended;          /* AugMix 'b1': each chain blended into the image in turn */
    double alpha;         /* AugMix: Dirichlet / Beta concentration */
    AugOp ops[AUG_MAX_OPS];
    double weights[AUG_MAX_OPS];
} AugPolicy;

/* Parses timm's auto_augment string ("rand-m9-mstd0.5-inc1", "rand-m9-n3-t3a",
 * "original", "v0r-mstd0.5", "3a", "augmix-m5-w4-d2", ...). */
int aug_parse(const char *spec, AugPolicy *p, CtErr *err);

/* Whether p has a geometric op (rotate, shear, translate), whose corners
 * take the 3-value fill colour. */
int aug_policy_geometric(const AugPolicy *p);

/* What an op does with its sampled parameters. */
typedef struct AugEnv {
    uint8_t fill[3];  /* timm's img_mean: round(255 * mean) */
    CtInterp interp;  /* resample of the geometric ops ... */
    int random_interp; /* ... or bilinear / bicubic at random per op */
    double translate_pct; /* TranslateXRel/YRel at magnitude 10: 0.45 (AugMix's 0.3) */
} AugEnv;

/* An op's draws: the magnitude (already sampled and clipped), the sign of the
 * signed ops, the resample of the geometric ones, and GaussianBlurRand's
 * uniform draw u in [0, 1) (radius 0.1 + (2 * factor - 0.1) * u). */
typedef struct AugOpArgs {
    double magnitude;
    int negate;
    CtInterp interp;
    double u;
} AugOpArgs;

/* One op with its draws given: AugmentOp's aug_fn(img, *level_fn(magnitude)). */
void aug_op_apply(CtImage *img, CtImage *tmp, AugOpKind k, const AugOpArgs *a, const AugEnv *env);
/* The buffers a policy needs beside the image: tmp for every op, AugMix's
 * chain image, its float sum (basic) or the original (blended). */
typedef struct AugScratch {
    CtImage tmp, chain, orig;
    float *acc;
} AugScratch;
int aug_scratch_alloc(const AugPolicy *p, int w, int h, AugScratch *s, CtErr *err);
void aug_scratch_free(AugScratch *s);
/* The policy on one w x h image (s allocated for that size), every random
 * choice drawn from rng. */
void aug_policy_apply(const AugPolicy *p, const AugEnv *env, CtImage *img, AugScratch *s, CtRng *rng);

/* ---- AugMix's mixing (augment_mix.c): AugMixAugment ---- */

/* Its draws: np.float32(dirichlet([alpha] * width)) and np.float32(beta(alpha, alpha)). */
void augmix_draw_weights(double alpha, int width, CtRng *rng, float *ws, float *m);
/* _apply_basic's sum: acc (w * h * 3 floats, zero at first) += w * aug, in float32. */
void augmix_accumulate(float *acc, const CtImage *aug, float w);
/* ... then img = Image.blend(img, uint8(clip(acc, 0, 255)), m). */
void augmix_finish(CtImage *img, const float *acc, float m);
/* _calc_blended_weights: the per-chain blend factors of _apply_blended. */
void augmix_blended_weights(const float *ws, int width, float m, float *out);
/* PIL's Image.blend(img, other, alpha) into img, for alpha in [0, 1]. */
void image_blend(CtImage *img, const CtImage *other, float alpha);

/* ---- blurs (blur.c) ---- */

/* img.filter(ImageFilter.GaussianBlur(radius)): PIL's three box-blur passes
 * per axis. */
void pil_gaussian_blur(CtImage *img, CtImage *tmp, float radius);
/* torchvision's F.gaussian_blur(img, [k, k], [sigma, sigma]) on a PIL image:
 * a float32 k x k kernel, reflect padding (needs k / 2 < w, h), rounded. */
void tv_gaussian_blur(CtImage *img, CtImage *tmp, int k, double sigma);

/* ---- train-transform sampling (transforms.c) ---- */

/* RandomResizedCropAndInterpolation.get_params: a crop box in a w x h image. */
typedef struct CropBox {
    int x, y, w, h;
} CropBox;
CropBox rrc_sample(int w, int h, const double scale[2], const double ratio[2], CtRng *rng);

/* The train transform's geometric draws for a w x h image, in timm's order:
 * the crop box (rrc) or the resized size (rkr), the interpolation
 * ('random'), the crop's offset (rkrr), hflip, vflip. */
typedef struct TrainSample {
    CropBox box;    /* rrc: the crop; rkr: the whole image */
    int rw, rh;     /* the size box is resized to: img_size squared for rrc */
    int top, left;  /* rkr: where the img_size crop starts in the resized image (< 0: reflect padding) */
    CtInterp interp;
    int hflip, vflip;
} TrainSample;
void train_sample(const TrainTransform *t, int w, int h, CtRng *rng, TrainSample *s);
/* torchvision's center_crop / timm's center_crop_or_pad on one axis: where
 * the crop starts in the image (negative: padding (crop - in) // 2 first). */
int crop_offset(int in, int crop);
/* The size x size crop of src at (top, left) into out (allocated here), the
 * pixels outside src mirrored as numpy's pad(mode='reflect'). */
int crop_reflect(const CtImage *src, int top, int left, int size, CtImage *out, CtErr *err);

/* Decodes data (w x h, from image_probe), crops box and resizes it to
 * out_w x out_h (torchvision's resized_crop). With allow_shrink a JPEG is
 * decoded at the largest 1/s (s = 1, 2, 4, 8) whose shrunk crop still covers
 * out_w x out_h, and the box is mapped onto the smaller image. mode: what
 * the decoded pixels are made first, as timm's dataset converts them (L:
 * image_to_gray; RGBA: the alpha band kept). */
int decode_crop_resize(const uint8_t *data, size_t n, int w, int h, CropBox box, int out_w, int out_h, CtInterp interp,
                       int allow_shrink, CtImgMode mode, CtImage *out, CtErr *err);

#endif
