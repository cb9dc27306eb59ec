/*
 * Private to runtime/data: the codecs behind image.c's probe/decode dispatch,
 * and the size limit every decoder checks before it allocates.
 */
#ifndef CTIMM_IMAGE_CODEC_H
#define CTIMM_IMAGE_CODEC_H

#include "runtime/data/image.h"

/* Refused before any allocation: a side above 32768, or more pixels than
 * Pillow accepts (it raises DecompressionBombError above 2 * 89478485). A
 * fuzzing build lowers the pixel limit so that a 20-byte header cannot make
 * every run allocate and fill half a gigabyte. */
#define CT_IMAGE_MAX_SIDE 32768
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define CT_IMAGE_MAX_PIXELS (1L << 22)
#else
#define CT_IMAGE_MAX_PIXELS 178956970L
#endif

/* 0 when w x h is a decodable size, else -1 with the reason. */
int image_check_size(int w, int h, CtErr *err);

int codec_jpeg_probe(const uint8_t *data, size_t n, int *w, int *h, CtErr *err);
int codec_jpeg_decode(const uint8_t *data, size_t n, int shrink, CtImage *out, CtErr *err);
/* The x0..x1, y0..y1 rectangle of the decode at 1/shrink of a w x h JPEG
 * (w, h as probed), with the same pixels as that rectangle of the full decode. */
int codec_jpeg_decode_region(const uint8_t *data, size_t n, int shrink, int w, int h, int x0, int y0, int x1,
                             int y1, CtImage *out, CtErr *err);
int codec_png_probe(const uint8_t *data, size_t n, int *w, int *h, CtErr *err);
/* keep_alpha: PIL's convert('RGBA') (out->alpha), else convert('RGB'). */
int codec_png_decode(const uint8_t *data, size_t n, int keep_alpha, CtImage *out, CtErr *err);

/* Takes box [x0,x1) x [y0,y1) out of a whole decoded image into *out (the
 * whole image itself when the box covers it); `full` is consumed either way. */
int image_take_box(CtImage *full, int x0, int y0, int x1, int y1, CtImage *out, CtErr *err);

#endif
