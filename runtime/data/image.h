/*
 * Images on the host: 8-bit RGB, HWC, as the loader hands them to the
 * transforms, with an alpha plane beside them where timm's input_img_mode
 * 'RGBA' asks for one and the image has one. Decoding (JPEG through
 * libjpeg-turbo's TurboJPEG API, with its DCT-domain downscaling; PNG
 * through libpng; greyscale and CMYK become RGB like PIL's convert('RGB'))
 * and the geometric primitives the transforms are built from (crop + resize
 * in one pass, PIL's resampling filters).
 */
#ifndef CTIMM_IMAGE_H
#define CTIMM_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"

typedef struct CtImage {
    int w, h;       /* pixels */
    uint8_t *px;    /* w * h * 3 bytes, RGB, row-major; owned (image_free) */
    uint8_t *alpha; /* NULL: opaque (alpha 255 everywhere); else w * h bytes, PIL's 'A' band; owned */
} CtImage;

/* timm's input_img_mode: what its dataset converts every image to. */
typedef enum CtImgMode { CT_IMG_RGB, CT_IMG_L, CT_IMG_RGBA } CtImgMode;

/* "RGB", "L" or "RGBA" (PIL's names; timm passes any to convert()). */
int img_mode_parse(const char *s, CtImgMode *mode, CtErr *err);
/* The channels of mode's images: 3, 1, 4. */
static inline int img_mode_channels(CtImgMode m) { return m == CT_IMG_L ? 1 : m == CT_IMG_RGBA ? 4 : 3; }

typedef enum CtInterp { CT_INTERP_NEAREST, CT_INTERP_BILINEAR, CT_INTERP_BICUBIC } CtInterp;

/* A box in source pixel coordinates (PIL's resize `box`): x0, y0, x1, y1. */
typedef struct CtBox {
    double x0, y0, x1, y1;
} CtBox;

/* Allocates a w x h image (contents undefined, opaque). */
int image_alloc(CtImage *img, int w, int h, CtErr *err);
void image_free(CtImage *img);

/* Width and height of an encoded JPEG or PNG without decoding it. */
int image_probe(const uint8_t *data, size_t n, int *w, int *h, CtErr *err);

/* Decodes a JPEG or PNG (told apart by their magic bytes). `shrink` (1, 2, 4
 * or 8) lets a JPEG be decoded at 1/shrink of its size in the DCT domain,
 * which is much faster; the result is ceil(w/shrink) x ceil(h/shrink), so a
 * caller maps boxes by out->w / w. PNGs are always decoded at full size.
 * The image is opaque: an alpha band is dropped, as PIL's convert('RGB'). */
int image_decode(const uint8_t *data, size_t n, int shrink, CtImage *out, CtErr *err);
/* image_decode as PIL's convert('RGBA'): a PNG's alpha band or tRNS
 * transparency kept in out->alpha (left NULL where it is 255 everywhere,
 * and for JPEGs, which have none). */
int image_decode_rgba(const uint8_t *data, size_t n, int shrink, CtImage *out, CtErr *err);

/* The size image_decode(data, n, shrink) gives an image that probes as
 * w x h: ceil(w/shrink) x ceil(h/shrink) for a JPEG, w x h for a PNG. */
void image_decoded_size(const uint8_t *data, size_t n, int w, int h, int shrink, int *dw, int *dh);

/* The x0..x1, y0..y1 rectangle (in image_decoded_size's coordinates) of
 * image_decode(data, n, shrink), pixel for pixel, without decoding all of a
 * JPEG: only the rectangle's columns and the rows down to its last. w, h:
 * the size image_probe gave. */
int image_decode_region(const uint8_t *data, size_t n, int shrink, int w, int h, int x0, int y0, int x1, int y1,
                        CtImage *out, CtErr *err);
/* The same rectangle of image_decode_rgba. */
int image_decode_region_rgba(const uint8_t *data, size_t n, int shrink, int w, int h, int x0, int y0, int x1, int y1,
                             CtImage *out, CtErr *err);

/* PIL's convert('L') of the decoded image (what timm's dataset does for
 * input_img_mode 'L'): ITU-R 601-2 luma in 16.16 fixed point, L = (R * 19595
 * + G * 38470 + B * 7471 + 0x8000) >> 16, for every mode PIL decodes (its
 * 'P', 'CMYK', 'LA' ... go through the RGB image_decode gives). L is written
 * to all three channels: every transform treats the channels alike and
 * keeps equal ones equal, each what PIL makes of the 'L' image, so the RGB
 * transforms run on it unchanged and the batch keeps one channel. */
void image_to_gray(CtImage *img);

/* Resamples `box` of src to an out_w x out_h image, as PIL's
 * Image.resize((out_w, out_h), filter, box=box): separable filters whose
 * support widens when downscaling (antialiasing). An image with alpha is
 * resampled as PIL resamples 'RGBA' (but with the nearest filter): colours
 * premultiplied by alpha ('RGBa'), all four bands resampled, then divided
 * again. */
int image_resize(const CtImage *src, CtBox box, int out_w, int out_h, CtInterp interp, CtImage *dst, CtErr *err);

#endif
