/*
 * timm's image transforms (timm/data/transforms_factory.py semantics), from
 * an encoded image to a uint8 HWC crop of img_size x img_size, RGB, the one
 * channel of PIL's 'L' image or RGBA (timm's input_img_mode), the form the
 * loader batches. The
 * train transform decides its crop before decoding, so a JPEG is decoded at
 * the smallest DCT scale that still covers it.
 * Normalisation by mean/std is not here: it runs on the device, on the batch.
 */
#ifndef CTIMM_TRANSFORMS_H
#define CTIMM_TRANSFORMS_H

#include "runtime/data/image.h"
#include "runtime/data/rng.h"

/* timm's train_crop_mode: RandomResizedCrop ('rrc'), or ResizeKeepRatio
 * (shorter side to img_size, zoomed by 1/sqrt(U(scale)) and stretched by
 * sqrt(exp(U(log ratio))), each with probability 0.5) followed by a centre
 * ('rkrc') or random ('rkrr') crop, reflect-padded where the image is smaller. */
typedef enum CtTrainCrop { CT_TRAIN_RRC, CT_TRAIN_RKRC, CT_TRAIN_RKRR } CtTrainCrop;

typedef struct TrainTransform {
    int img_size;
    CtTrainCrop crop_mode;
    double scale[2], ratio[2]; /* RandomResizedCrop: (0.08, 1), (3/4, 4/3); RKR's ranges of the same */
    CtInterp interp;
    int random_interp;         /* timm's 'random': bilinear or bicubic per sample */
    double hflip, vflip;       /* probabilities: 0.5, 0 */
    double color_jitter;       /* brightness = contrast = saturation = cj, hue = 0 unless set */
    double jitter_hue;
    double color_jitter_prob;  /* < 0: always (timm's None); else RandomApply(ColorJitter, p) */
    double grayscale_prob;     /* RandomGrayscale(p), after the jitter */
    double gaussian_blur_prob; /* RandomApply(GaussianBlur(23), p), last */
    const char *auto_augment;  /* NULL, "rand-m9-mstd0.5-inc1", "original", "3a", "augmix-m5-w4-d2" ... */
    double mean[3];            /* the model's mean: auto_augment's fill colour, round(255 * mean) */
    CtImgMode mode;            /* timm's input_img_mode (train.py's 'L' for in_chans 1): what the decoded image becomes */
} TrainTransform;

typedef enum CtCropMode { CT_CROP_CENTER, CT_CROP_SQUASH, CT_CROP_BORDER } CtCropMode;

typedef struct EvalTransform {
    int img_size;
    double crop_pct;
    CtCropMode crop_mode;
    CtInterp interp;
    double mean[3];            /* the model's mean: 'border' mode pads with round(255 * mean) */
    CtImgMode mode;            /* as TrainTransform's */
} EvalTransform;

/* train.py's --train-crop-mode (NULL or empty: rrc). */
int train_crop_mode_parse(const char *s, CtTrainCrop *mode, CtErr *err);
/* timm's train defaults for img_size (scale, ratio, hflip 0.5, jitter 0.4
 * always, no grayscale or blur, bilinear). */
TrainTransform train_transform_default(int img_size);
/* timm's eval defaults: crop_pct 0.875, center crop, bilinear, ImageNet mean. */
EvalTransform eval_transform_default(int img_size);

/* Whether t's settings are ones timm would accept (scale, ratio, flips,
 * color_jitter, auto_augment, named as train.py's arguments), so a bad one
 * is refused before any image, not image by image. */
int train_transform_check(const TrainTransform *t, CtErr *err);
/* The same for an eval transform's crop mode with gray or RGBA images. */
int eval_transform_check(const EvalTransform *t, CtErr *err);
/* Decodes `data` and writes img_size * img_size * img_mode_channels(mode) bytes to out. */
int transform_train(const TrainTransform *t, const uint8_t *data, size_t n, CtRng *rng, uint8_t *out, CtErr *err);
int transform_eval(const EvalTransform *t, const uint8_t *data, size_t n, uint8_t *out, CtErr *err);
/* timm's AugMixDataset (train.py's --aug-splits) over the train transform
 * split as create_transform(separate=True) splits it: out[0] gets the
 * 'clean' image (crop, resize, flips), out[k] for 0 < k < splits that image
 * through the rest (the policy, jitter, grayscale, blur), drawn in turn
 * from rng. splits 1: transform_train. */
#define CT_MAX_AUG_SPLITS 16
int transform_train_splits(const TrainTransform *t, const uint8_t *data, size_t n, CtRng *rng, int splits,
                           uint8_t *const *out, CtErr *err);

/* timm's RandomErasing of a normalised batch [N, C, H, W]: with
 * probability `prob` per image, `count` boxes (area 2%..1/3 of the image,
 * log-uniform aspect 0.3..3.3) filled by mode: 'const' zeros, 'rand' one
 * normal value per channel, 'pixel' normal per pixel. The host draws the
 * boxes; the graph's random_erase node (ir/ops/image.c) fills them. */
typedef enum CtEraseMode { CT_ERASE_CONST, CT_ERASE_RAND, CT_ERASE_PIXEL } CtEraseMode;
typedef struct RandomErasing {
    double prob;
    CtEraseMode mode;
    int min_count, max_count;
    int num_splits; /* > 1: the batch's first 1/num_splits is left alone (--resplit's clean split) */
} RandomErasing;
/* Boxes an image may get (random_erase's K); 0 when erasing is off. */
int random_erasing_boxes(const RandomErasing *re);
/* The boxes of n images of h x w, boxes [n, K, 5] as random_erase reads
 * them (top, left, height, width, fill seed; zeros for none). */
void random_erasing_draw(const RandomErasing *re, int n, int h, int w, int64_t *boxes, CtRng *rng);

#endif
