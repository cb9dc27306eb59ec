/*
 * The embedded default dataset: small pictures of ten kinds of drawn shapes
 * and textures (circle, square, triangle, cross, ring, stripes-h, stripes-v,
 * checker, dots, diagonal) on noisy or gradient backgrounds, with random
 * colours, position, scale and rotation. Easy to learn, hard enough that a
 * model must look at shape rather than colour. Everything is a function of
 * a seed, so a dataset is the same on every machine.
 *
 * shapes_draw renders one RGB HWC image (used by the synthetic dataset);
 * shapes_generate writes a JPEG ImageFolder with train/ and val/ splits.
 */
#ifndef CTIMM_SHAPES_H
#define CTIMM_SHAPES_H

#include <stdint.h>

#include "ir/status.h"
#include "runtime/data/rng.h"

#define SHAPES_NUM_KINDS 10

/* The folder name of kind k in [0, SHAPES_NUM_KINDS): "circle", ... */
const char *shapes_kind_name(int k);

/* Draws a size x size RGB image of kind `kind % SHAPES_NUM_KINDS` into
 * rgb (size * size * 3 bytes) with parameters drawn from rng. Kinds past
 * the ten reuse the ten shapes with a hue shift, so any class count works. */
void shapes_draw(int kind, int size, CtRng *rng, uint8_t *rgb);

typedef struct ShapesConfig {
    int img_size;        /* pixels, square; 64 */
    int train_per_class; /* 300 */
    int val_per_class;   /* 50 */
    int quality;         /* JPEG quality; 90 */
    uint64_t seed;       /* 0 */
} ShapesConfig;

ShapesConfig shapes_config_default(void);

/* Makes root/train/<kind>/<kind>_NNNNN.jpg and root/val/... unless root
 * already holds a complete set made with the same config (its marker file
 * root/ctimm-shapes.txt, written last, records the config). Generation goes
 * to a temporary folder beside root that is renamed into place, so an
 * interrupted run leaves no half dataset at root; a stale temporary folder
 * or a set made with another config is replaced. A root that exists but is
 * not a shapes dataset is refused, never deleted. *generated (may be NULL)
 * is set to 1 when images were written, 0 when an existing set was kept. */
int shapes_generate(const char *root, const ShapesConfig *cfg, int *generated, CtErr *err);

#endif
