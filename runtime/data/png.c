/*
 * PNG through libpng, to 8-bit RGB exactly as Pillow's open(...).convert('RGB'):
 *   grey 1/2/4/8-bit   scaled to 0..255 (x255, x85, x17), then R = G = B
 *   grey 16-bit        Pillow's mode I, whose convert('RGB') clips at 255
 *   other 16-bit       the high byte of each sample (Pillow's ";16B" rawmodes)
 *   palette            through the PLTE; indices past it through Pillow's
 *                      default palette, a greyscale ramp (i -> (i, i, i))
 *   alpha, tRNS        dropped, not composited (Pillow's rgba2rgb / la2rgb)
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
    png_bytep *rows; /* owned: pointers into out->px */
    CtImage *out;    /* NULL to probe only */
    int w, h;
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

/* Asks libpng for at most 3 bytes a pixel, all of them final but for palette
 * indices and 16-bit grey, which finish_rows completes. */
static Finish set_transforms(png_structp png, int color_type, int depth)
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
        png_set_strip_alpha(png);
        png_set_gray_to_rgb(png);
        break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
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
    Finish finish = set_transforms(r->png, color_type, depth);
    png_set_interlace_handling(r->png);
    png_read_update_info(r->png, r->info);
    if (png_get_rowbytes(r->png, r->info) > (size_t)w * 3) {
        snprintf(r->msg, sizeof r->msg, "unexpected row size %zu for %u pixels (colour type %d, %d-bit)",
                 (size_t)png_get_rowbytes(r->png, r->info), (unsigned)w, color_type, depth);
        return -1;
    }
    if (image_alloc(r->out, r->w, r->h, &e) || !(r->rows = malloc((size_t)h * sizeof *r->rows))) {
        snprintf(r->msg, sizeof r->msg, "out of memory for a %ux%u image", (unsigned)w, (unsigned)h);
        return -1;
    }
    for (int y = 0; y < r->h; y++)
        r->rows[y] = r->out->px + (size_t)y * w * 3;
    png_read_image(r->png, r->rows);
    finish_rows(r, finish);
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

int codec_png_decode(const uint8_t *data, size_t n, CtImage *out, CtErr *err)
{
    PngRead r = {.data = data, .n = n, .out = out};
    return run(&r, err);
}
