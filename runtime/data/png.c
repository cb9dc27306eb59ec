/*
 * PNG through libpng, to 8-bit RGB exactly as Pillow's open(...).convert('RGB'):
 *   grey 1/2/4/8-bit   scaled to 0..255 (x255, x85, x17), then R = G = B
 *   grey 16-bit        Pillow's mode I, whose convert('RGB') clips at 255
 *   other 16-bit       the high byte of each sample (Pillow's ";16B" rawmodes)
 *   palette            through the PLTE; indices past it through Pillow's
 *                      default palette, a greyscale ramp (i -> (i, i, i))
 *   alpha, tRNS        dropped, not composited (Pillow's rgba2rgb / la2rgb);
 *                      or, for convert('RGBA'), kept as the alpha band: the
 *                      alpha samples (their high byte), else 0 where the
 *                      tRNS colour equals the decoded pixel (Pillow's
 *                      comparison: after the grey scaling above) or the
 *                      palette entry's tRNS alpha, 255 elsewhere
 *   Adam7              de-interlaced by libpng
 * Checks as Pillow's reader: a bad CRC on any chunk before the image data is
 * an error, the image data's own CRCs are not checked, and nothing after the
 * last row is read. Gamma, colour profiles and text chunks are ignored.
 */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/image_codec.h"

/* How rows are finished in place once libpng has written them. */
typedef enum { FINISH_NONE, FINISH_PALETTE, FINISH_GREY16 } Finish;

/* Everything the setjmp-protected reader changes lives here, outside the
 * function that calls setjmp, so it is still valid after a longjmp. */
typedef struct PngRead {
    const uint8_t *data;
    size_t n, pos;
    char msg[400];
    png_structp png;
    png_infop info;
    png_bytep *rows; /* owned: pointers into out->px, or into rgba */
    uint8_t *rgba;   /* owned: the 4-byte pixels of an image with an alpha band, when keep_alpha */
    CtImage *out;    /* NULL to probe only */
    int w, h, keep_alpha;
} PngRead;

static void on_error(png_structp png, png_const_charp msg)
{
    PngRead *r = png_get_error_ptr(png);
    snprintf(r->msg, sizeof r->msg, "%s", msg);
    png_longjmp(png, 1);
}

/* Pillow goes on where libpng only warns, and warnings must not reach stderr. */
static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void read_data(png_structp png, png_bytep dst, size_t len)
{
    PngRead *r = png_get_io_ptr(png);
    if (len > r->n - r->pos)
        png_error(png, "truncated file: the data ends early");
    memcpy(dst, r->data + r->pos, len);
    r->pos += len;
}

/* Asks libpng for at most 3 bytes a pixel (4 with an alpha band kept), all
 * of them final but for palette indices and 16-bit grey, which finish_rows
 * completes. */
static Finish set_transforms(png_structp png, int color_type, int depth, int keep_alpha)
{
    switch (color_type) {
    case PNG_COLOR_TYPE_PALETTE:
        png_set_packing(png); /* one index a byte */
        return FINISH_PALETTE;
    case PNG_COLOR_TYPE_GRAY:
        if (depth == 16)
            return FINISH_GREY16;
        if (depth < 8)
            png_set_expand_gray_1_2_4_to_8(png); /* no tRNS: that takes png_set_tRNS_to_alpha */
        png_set_gray_to_rgb(png);
        return FINISH_NONE;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
        if (!keep_alpha)
            png_set_strip_alpha(png);
        png_set_gray_to_rgb(png);
        break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
        if (!keep_alpha)
            png_set_strip_alpha(png);
        break;
    default:
        break;
    }
    if (depth == 16)
        png_set_strip_16(png); /* keeps the high byte, not a rounded scale */
    return FINISH_NONE;
}

/* Expands, right to left within each row, 1-byte indices or 2-byte grey to RGB. */
static void finish_rows(PngRead *r, Finish finish)
{
    int w = r->w;
    if (finish == FINISH_PALETTE) {
        uint8_t lut[256 * 3];
        for (int i = 0; i < 256; i++)
            lut[3 * i] = lut[3 * i + 1] = lut[3 * i + 2] = (uint8_t)i;
        png_colorp plte = NULL;
        int count = 0;
        if (png_get_PLTE(r->png, r->info, &plte, &count) && plte)
            for (int i = 0; i < count && i < 256; i++) {
                lut[3 * i] = plte[i].red;
                lut[3 * i + 1] = plte[i].green;
                lut[3 * i + 2] = plte[i].blue;
            }
        for (int y = 0; y < r->h; y++) {
            uint8_t *row = r->rows[y];
            for (int x = w - 1; x >= 0; x--) {
                const uint8_t *c = lut + 3 * row[x];
                row[3 * x] = c[0];
                row[3 * x + 1] = c[1];
                row[3 * x + 2] = c[2];
            }
        }
    } else if (finish == FINISH_GREY16) {
        for (int y = 0; y < r->h; y++) {
            uint8_t *row = r->rows[y];
            for (int x = w - 1; x >= 0; x--) {
                int v = row[2 * x] << 8 | row[2 * x + 1];
                uint8_t g = v > 255 ? 255 : (uint8_t)v;
                row[3 * x] = row[3 * x + 1] = row[3 * x + 2] = g;
            }
        }
    }
}

/* The alpha band of a palette image from its tRNS (before finish_rows
 * replaces the indices), or of a grey or RGB one from its tRNS colour
 * (after): 0 where Pillow's convert('RGBA') makes the pixel transparent. */
static void trns_alpha(PngRead *r, int color_type, uint8_t *alpha)
{
    png_bytep trans = NULL;
    int count = 0;
    png_color_16p colour = NULL;
    png_get_tRNS(r->png, r->info, &trans, &count, &colour);
    size_t w = (size_t)r->w;
    for (int y = 0; y < r->h; y++) {
        const uint8_t *row = r->rows[y];
        uint8_t *a = alpha + y * w;
        for (size_t x = 0; x < w; x++) {
            if (color_type == PNG_COLOR_TYPE_PALETTE)
                a[x] = trans && row[x] < count ? trans[row[x]] : 255;
            else if (color_type == PNG_COLOR_TYPE_GRAY)
                a[x] = colour && row[3 * x] == colour->gray ? 0 : 255;
            else
                a[x] = colour && row[3 * x] == colour->red && row[3 * x + 1] == colour->green &&
                               row[3 * x + 2] == colour->blue ? 0 : 255;
        }
    }
}

/* The alpha band out of r->rgba into out->alpha, the colours into out->px. */
static void split_rgba(PngRead *r, uint8_t *alpha)
{
    size_t n = (size_t)r->w * r->h;
    for (size_t i = 0; i < n; i++) {
        memcpy(r->out->px + 3 * i, r->rgba + 4 * i, 3);
        alpha[i] = r->rgba[4 * i + 3];
    }
}

/* An alpha band of 255 everywhere is no band (CtImage's NULL). */
static void drop_opaque(CtImage *img)
{
    size_t n = (size_t)img->w * img->h, i = 0;
    while (i < n && img->alpha[i] == 255)
        i++;
    if (i == n) {
        free(img->alpha);
        img->alpha = NULL;
    }
}

/* Reads the header, and unless probing, the image into r->out. */
static int read_png(PngRead *r)
{
    if (setjmp(png_jmpbuf(r->png)))
        return -1;
    png_set_read_fn(r->png, r, read_data);
    png_set_keep_unknown_chunks(r->png, PNG_HANDLE_CHUNK_NEVER, NULL, -1);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    /* Let mutated files reach the decoder instead of failing checksums. */
    png_set_crc_action(r->png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
    png_set_option(r->png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#else
    png_set_crc_action(r->png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
#endif
    png_read_info(r->png, r->info);
    png_uint_32 w, h;
    int depth, color_type, interlace;
    png_get_IHDR(r->png, r->info, &w, &h, &depth, &color_type, &interlace, NULL, NULL);
    CtErr e;
    /* libpng has refused sides above its own limit (1000000) already. */
    if (image_check_size((int)w, (int)h, &e)) {
        snprintf(r->msg, sizeof r->msg, "%.300s", e.msg);
        return -1;
    }
    r->w = (int)w;
    r->h = (int)h;
    if (!r->out)
        return 0;
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    /* Pillow never checks the CRCs of IDAT chunks. */
    png_set_crc_action(r->png, PNG_CRC_QUIET_USE, PNG_CRC_NO_CHANGE);
#endif
    int band = r->keep_alpha && (color_type & PNG_COLOR_MASK_ALPHA);
    int trns = r->keep_alpha && !band && png_get_valid(r->png, r->info, PNG_INFO_tRNS);
    Finish finish = set_transforms(r->png, color_type, depth, band);
    png_set_interlace_handling(r->png);
    png_read_update_info(r->png, r->info);
    size_t px_bytes = band ? 4 : 3;
    if (png_get_rowbytes(r->png, r->info) > (size_t)w * px_bytes) {
        snprintf(r->msg, sizeof r->msg, "unexpected row size %zu for %u pixels (colour type %d, %d-bit)",
                 (size_t)png_get_rowbytes(r->png, r->info), (unsigned)w, color_type, depth);
        return -1;
    }
    size_t n = (size_t)w * h;
    if (image_alloc(r->out, r->w, r->h, &e) || !(r->rows = malloc((size_t)h * sizeof *r->rows)) ||
        (band && !(r->rgba = malloc(n * 4))) || ((band || trns) && !(r->out->alpha = malloc(n)))) {
        snprintf(r->msg, sizeof r->msg, "out of memory for a %ux%u image", (unsigned)w, (unsigned)h);
        return -1;
    }
    for (int y = 0; y < r->h; y++)
        r->rows[y] = (band ? r->rgba : r->out->px) + (size_t)y * w * px_bytes;
    png_read_image(r->png, r->rows);
    if (band)
        split_rgba(r, r->out->alpha);
    if (trns && color_type == PNG_COLOR_TYPE_PALETTE)
        trns_alpha(r, color_type, r->out->alpha);
    finish_rows(r, finish);
    if (trns && color_type != PNG_COLOR_TYPE_PALETTE)
        trns_alpha(r, color_type, r->out->alpha);
    if (r->out->alpha)
        drop_opaque(r->out);
    return 0;
}

/* Runs read_png with a fresh libpng reader; on failure frees r->out's pixels. */
static int run(PngRead *r, CtErr *err)
{
    r->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, r, on_error, on_warning);
    if (!r->png)
        return ct_fail(err, "PNG: cannot create a libpng reader");
    r->info = png_create_info_struct(r->png);
    int rc = r->info ? read_png(r) : (snprintf(r->msg, sizeof r->msg, "cannot create libpng info"), -1);
    png_destroy_read_struct(&r->png, &r->info, NULL);
    free(r->rows);
    free(r->rgba);
    if (rc == 0)
        return 0;
    if (r->out)
        image_free(r->out);
    return ct_fail(err, "PNG: %s", r->msg);
}

int codec_png_probe(const uint8_t *data, size_t n, int *w, int *h, CtErr *err)
{
    PngRead r = {.data = data, .n = n};
    if (run(&r, err))
        return -1;
    *w = r.w;
    *h = r.h;
    return 0;
}

int codec_png_decode(const uint8_t *data, size_t n, int keep_alpha, CtImage *out, CtErr *err)
{
    PngRead r = {.data = data, .n = n, .out = out, .keep_alpha = keep_alpha};
    return run(&r, err);
}
