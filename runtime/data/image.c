/*
 * Host images: allocation, and probe/decode dispatch to the JPEG and PNG
 * codecs by their magic bytes (never by file name: ImageNet has PNGs and
 * CMYK JPEGs behind .JPEG names).
 */
#include "runtime/data/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/image_codec.h"

typedef enum { FMT_UNKNOWN, FMT_JPEG, FMT_PNG } Format;

static Format sniff(const uint8_t *data, size_t n)
{
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
        return FMT_JPEG;
    if (n >= 8 && memcmp(data, png_sig, 8) == 0)
        return FMT_PNG;
    return FMT_UNKNOWN;
}

/* One line naming what the bytes are not, with the first bytes as a hint. */
static int fail_format(const uint8_t *data, size_t n, CtErr *err)
{
    if (n == 0)
        return ct_fail(err, "image: empty input (0 bytes)");
    char hex[3 * 8 + 1] = "";
    for (size_t i = 0, len = 0; i < n && i < 8; i++, len = strlen(hex))
        snprintf(hex + len, sizeof hex - len, "%s%02x", i ? " " : "", data[i]);
    return ct_fail(err, "image: not a JPEG or PNG (%zu bytes, starting %s)", n, hex);
}

int image_check_size(int w, int h, CtErr *err)
{
    if (w < 1 || h < 1)
        return ct_fail(err, "invalid image size %dx%d", w, h);
    if (w > CT_IMAGE_MAX_SIDE || h > CT_IMAGE_MAX_SIDE)
        return ct_fail(err, "a %dx%d image is larger than %d pixels on a side; refusing it", w, h,
                       CT_IMAGE_MAX_SIDE);
    if ((long)w * h > CT_IMAGE_MAX_PIXELS)
        return ct_fail(err, "a %dx%d image has more than %ld pixels (a decompression bomb?); refusing it", w, h,
                       (long)CT_IMAGE_MAX_PIXELS);
    return 0;
}

int img_mode_parse(const char *s, CtImgMode *mode, CtErr *err)
{
    static const char *const names[] = {"RGB", "L", "RGBA"};
    for (int k = 0; k < 3; k++)
        if (s && !strcmp(s, names[k])) {
            *mode = (CtImgMode)k;
            return 0;
        }
    return ct_fail(err, "--input-img-mode %s: ctimm reads images as RGB, L (gray) or RGBA", s ? s : "(null)");
}

int image_alloc(CtImage *img, int w, int h, CtErr *err)
{
    img->w = img->h = 0;
    img->px = img->alpha = NULL;
    if (image_check_size(w, h, err))
        return ct_failctx(err, "image");
    size_t bytes = (size_t)w * (size_t)h * 3;
    img->px = malloc(bytes);
    if (!img->px)
        return ct_fail(err, "image: out of memory for a %dx%d RGB image (%zu bytes)", w, h, bytes);
    img->w = w;
    img->h = h;
    return 0;
}

void image_free(CtImage *img)
{
    if (!img)
        return;
    free(img->px);
    free(img->alpha);
    img->px = img->alpha = NULL;
    img->w = img->h = 0;
}

int image_probe(const uint8_t *data, size_t n, int *w, int *h, CtErr *err)
{
    *w = *h = 0;
    if (!data && n)
        return ct_fail(err, "image: NULL data with %zu bytes", n);
    switch (sniff(data, n)) {
    case FMT_JPEG: return codec_jpeg_probe(data, n, w, h, err);
    case FMT_PNG: return codec_png_probe(data, n, w, h, err);
    default: return fail_format(data, n, err);
    }
}

static int decode(const uint8_t *data, size_t n, int shrink, int keep_alpha, CtImage *out, CtErr *err)
{
    out->w = out->h = 0;
    out->px = out->alpha = NULL;
    if (!data && n)
        return ct_fail(err, "image: NULL data with %zu bytes", n);
    if (shrink != 1 && shrink != 2 && shrink != 4 && shrink != 8)
        return ct_fail(err, "image: shrink must be 1, 2, 4 or 8, not %d", shrink);
    switch (sniff(data, n)) {
    case FMT_JPEG: return codec_jpeg_decode(data, n, shrink, out, err);
    case FMT_PNG: return codec_png_decode(data, n, keep_alpha, out, err);
    default: return fail_format(data, n, err);
    }
}

int image_decode(const uint8_t *data, size_t n, int shrink, CtImage *out, CtErr *err)
{
    return decode(data, n, shrink, 0, out, err);
}

int image_decode_rgba(const uint8_t *data, size_t n, int shrink, CtImage *out, CtErr *err)
{
    return decode(data, n, shrink, 1, out, err);
}

void image_decoded_size(const uint8_t *data, size_t n, int w, int h, int shrink, int *dw, int *dh)
{
    int s = sniff(data, n) == FMT_JPEG && shrink > 1 ? shrink : 1;
    *dw = (w + s - 1) / s;
    *dh = (h + s - 1) / s;
}

static int decode_region(const uint8_t *data, size_t n, int shrink, int keep_alpha, int w, int h, int x0, int y0,
                         int x1, int y1, CtImage *out, CtErr *err)
{
    out->w = out->h = 0;
    out->px = out->alpha = NULL;
    if (!data && n)
        return ct_fail(err, "image: NULL data with %zu bytes", n);
    if (shrink != 1 && shrink != 2 && shrink != 4 && shrink != 8)
        return ct_fail(err, "image: shrink must be 1, 2, 4 or 8, not %d", shrink);
    if (sniff(data, n) == FMT_JPEG)
        return codec_jpeg_decode_region(data, n, shrink, w, h, x0, y0, x1, y1, out, err);
    CtImage full;
    if (decode(data, n, shrink, keep_alpha, &full, err))
        return -1;
    if (x0 < 0 || y0 < 0 || x1 > full.w || y1 > full.h || x0 >= x1 || y0 >= y1) {
        image_free(&full);
        return ct_fail(err, "image: region %d,%d..%d,%d is outside the %dx%d image", x0, y0, x1, y1, full.w, full.h);
    }
    return image_take_box(&full, x0, y0, x1, y1, out, err);
}

int image_decode_region(const uint8_t *data, size_t n, int shrink, int w, int h, int x0, int y0, int x1, int y1,
                        CtImage *out, CtErr *err)
{
    return decode_region(data, n, shrink, 0, w, h, x0, y0, x1, y1, out, err);
}

int image_decode_region_rgba(const uint8_t *data, size_t n, int shrink, int w, int h, int x0, int y0, int x1, int y1,
                             CtImage *out, CtErr *err)
{
    return decode_region(data, n, shrink, 1, w, h, x0, y0, x1, y1, out, err);
}

int image_take_box(CtImage *full, int x0, int y0, int x1, int y1, CtImage *out, CtErr *err)
{
    if (x0 == 0 && y0 == 0 && x1 == full->w && y1 == full->h) {
        *out = *full;
        return 0;
    }
    int rc = image_alloc(out, x1 - x0, y1 - y0, err);
    if (rc == 0 && full->alpha && !(out->alpha = malloc((size_t)out->w * out->h)))
        rc = ct_fail(err, "image: out of memory for a %dx%d alpha band", out->w, out->h);
    if (rc == 0) {
        size_t row = (size_t)out->w * 3;
        for (int y = y0; y < y1; y++) {
            memcpy(out->px + (size_t)(y - y0) * row, full->px + ((size_t)y * full->w + x0) * 3, row);
            if (out->alpha)
                memcpy(out->alpha + (size_t)(y - y0) * out->w, full->alpha + (size_t)y * full->w + x0,
                       (size_t)out->w);
        }
    } else {
        image_free(out);
    }
    image_free(full);
    return rc;
}
