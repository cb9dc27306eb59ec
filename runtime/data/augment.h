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
    X(TRANSLATE_X_REL, "TranslateXRel") X(TRANSLATE_Y_REL, "TranslateYRel")

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

typedef struct AugPolicy {
    int rand;             /* 1: RandAugment ("rand-..."), 0: AutoAugment ("original", "v0", ...) */
    int num_layers;       /* RandAugment: ops drawn per image */
    int weighted;         /* RandAugment 'tweights': drawn without replacement by weight */
    double magnitude_std; /* 0: fixed; INFINITY: uniform in [0, m] */
    double magnitude_max; /* upper clip of the sampled magnitude (timm's 10 unless mmax) */
    int n_ops;            /* RandAugment: the op list; AutoAugment: n_ops/2 pairs */
    AugOp ops[AUG_MAX_OPS];
    double weights[AUG_MAX_OPS];
} AugPolicy;

/* Parses timm's auto_augment string ("rand-m9-mstd0.5-inc1", "rand-m9-n3",
 * "original", "v0r-mstd0.5", ...). AugMix and the '3a' sets are refused. */
int aug_parse(const char *spec, AugPolicy *p, CtErr *err);

/* What an op does with its sampled parameters. */
typedef struct AugEnv {
    uint8_t fill[3];  /* timm's img_mean: round(255 * mean) */
    CtInterp interp;  /* resample of the geometric ops ... */
    int random_interp; /* ... or bilinear / bicubic at random per op */
} AugEnv;

/* One op at a given (already sampled and clipped) magnitude, with the sign of
 * the signed ops given: AugmentOp's aug_fn(img, *level_fn(magnitude)). */
void aug_op_apply(CtImage *img, CtImage *tmp, AugOpKind k, double magnitude, int negate, CtInterp interp,
                  const uint8_t fill[3]);
/* The policy on one image, every random choice drawn from rng. */
void aug_policy_apply(const AugPolicy *p, const AugEnv *env, CtImage *img, CtImage *tmp, CtRng *rng);

/* ---- train-transform sampling (transforms.c) ---- */

/* RandomResizedCropAndInterpolation.get_params: a crop box in a w x h image. */
typedef struct CropBox {
    int x, y, w, h;
} CropBox;
CropBox rrc_sample(int w, int h, const double scale[2], const double ratio[2], CtRng *rng);

/* The train transform's geometric draws for a w x h image, in timm's order:
 * the crop box, the interpolation ('random'), hflip, vflip. */
typedef struct TrainSample {
    CropBox box;
    CtInterp interp;
    int hflip, vflip;
} TrainSample;
void train_sample(const TrainTransform *t, int w, int h, CtRng *rng, TrainSample *s);

/* Decodes data (w x h, from image_probe), crops box and resizes it to
 * out_w x out_h (torchvision's resized_crop). With allow_shrink a JPEG is
 * decoded at the largest 1/s (s = 1, 2, 4, 8) whose shrunk crop still covers
 * out_w x out_h, and the box is mapped onto the smaller image. gray: the
 * decoded pixels made PIL's 'L' image first (image_to_gray). */
int decode_crop_resize(const uint8_t *data, size_t n, int w, int h, CropBox box, int out_w, int out_h, CtInterp interp,
                       int allow_shrink, int gray, CtImage *out, CtErr *err);

#endif
