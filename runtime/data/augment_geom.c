/*
 * PIL 9.4's Image.transform(size, AFFINE, a, resample, fillcolor) and
 * Image.rotate on 8-bit RGB, as timm's Rotate / ShearX/Y / TranslateX/YRel
 * call them: the output keeps the fill colour wherever the sample point falls
 * outside the input. Each of PIL's engines is reproduced, because they round
 * differently: nearest goes through 16.16 fixed point (or, for a pure
 * scale/translate, a pretabulated float walk); bilinear and bicubic through
 * the generic engine, sampling at a * (x + .5, y + .5) in double.
 */
#include "runtime/data/augment.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill_image(CtImage *img, const uint8_t fill[3])
{
    size_t n = (size_t)img->w * img->h;
    for (size_t i = 0; i < n; i++)
        memcpy(img->px + 3 * i, fill, 3);
}

static void swap_images(CtImage *a, CtImage *b)
{
    CtImage t = *a;
    *a = *b;
    *b = t;
}

/* PIL's COORD and FLOOR macros. */
static inline int coord(double v) { return v < 0.0 ? -1 : (int)v; }
static inline int floor_i(double v) { return v < 0.0 ? (int)floor(v) : (int)v; }
/* v >> 16 as an arithmetic shift (PIL relies on the compiler's). */
static inline int asr16(int v) { return v >= 0 ? v >> 16 : -(int)(((unsigned)(-(v + 1))) >> 16) - 1; }

/* ImagingScaleAffine: a[1] == a[3] == 0 with nearest. */
static void affine_scale_nearest(const CtImage *src, CtImage *dst, const double a[6], int *xtab)
{
    int w = dst->w, h = dst->h, xmin = w, xmax = 0;
    double xo = a[2] + a[0] * 0.5, yo = a[5] + a[4] * 0.5;
    for (int x = 0; x < w; x++) {
        int xin = coord(xo);
        if (xin >= 0 && xin < src->w) {
            xmax = x + 1;
            if (x < xmin)
                xmin = x;
            xtab[x] = xin;
        }
        xo += a[0];
    }
    for (int y = 0; y < h; y++) {
        int yi = coord(yo);
        if (yi >= 0 && yi < src->h) {
            const uint8_t *in = src->px + (size_t)yi * src->w * 3;
            uint8_t *out = dst->px + (size_t)y * w * 3;
            for (int x = xmin; x < xmax; x++)
                memcpy(out + 3 * x, in + 3 * xtab[x], 3);
        }
        yo += a[4];
    }
}

/* affine_fixed: nearest in 16.16 fixed point. PIL falls back to a float walk
 * when a corner maps beyond +-32768, which images this small never reach. */
static void affine_fixed_nearest(const CtImage *src, CtImage *dst, const double a[6])
{
#define FIX(v) floor_i((v) * 65536.0 + 0.5)
    int a0 = FIX(a[0]), a1 = FIX(a[1]), a3 = FIX(a[3]), a4 = FIX(a[4]);
    int a2 = FIX(a[2] + a[0] * 0.5 + a[1] * 0.5), a5 = FIX(a[5] + a[3] * 0.5 + a[4] * 0.5);
#undef FIX
    for (int y = 0; y < dst->h; y++) {
        uint8_t *out = dst->px + (size_t)y * dst->w * 3;
        int xx = a2, yy = a5;
        for (int x = 0; x < dst->w; x++, out += 3) {
            int xin = asr16(xx), yin = asr16(yy);
            if (xin >= 0 && xin < src->w && yin >= 0 && yin < src->h)
                memcpy(out, src->px + ((size_t)yin * src->w + xin) * 3, 3);
            xx += a0;
            yy += a3;
        }
        a2 += a1;
        a5 += a4;
    }
}

static inline int clampi(int v, int hi) { return v < 0 ? 0 : v < hi ? v : hi - 1; }

/* bilinear_filter32RGB at the source point (xin, yin) (already checked
 * inside). PIL reads row y clamped and row y + 1 only when it exists, else
 * repeats the first row's value: pointing at the same row gives that value. */
static inline void sample_bilinear(const CtImage *im, double xin, double yin, uint8_t *out)
{
    xin -= 0.5;
    yin -= 0.5;
    int x = floor_i(xin), y = floor_i(yin);
    double dx = xin - x, dy = yin - y;
    size_t row = (size_t)im->w * 3;
    const uint8_t *r0 = im->px + clampi(y, im->h) * row;
    const uint8_t *r1 = y + 1 >= 0 && y + 1 < im->h ? im->px + (y + 1) * row : r0;
    const uint8_t *a0 = r0 + clampi(x, im->w) * 3, *a1 = r0 + clampi(x + 1, im->w) * 3;
    const uint8_t *b0 = r1 + clampi(x, im->w) * 3, *b1 = r1 + clampi(x + 1, im->w) * 3;
    for (int c = 0; c < 3; c++) {
        double v1 = a0[c] + (a1[c] - a0[c]) * dx;
        double v2 = b0[c] + (b1[c] - b0[c]) * dx;
        out[c] = (uint8_t)(v1 + (v2 - v1) * dy);
    }
}

/* PIL's BICUBIC macro: cubic convolution with a = -1. */
static inline double cubic(double v1, double v2, double v3, double v4, double d)
{
    double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

/* The same on bytes: PIL's first pass gets UINT8 arguments, so its p terms
 * are int arithmetic, exact; only the Horner steps are in double. */
static inline double cubic_u8(int v1, int v2, int v3, int v4, double d)
{
    int p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
    return v2 + d * (p2 + d * (p3 + d * p4));
}

/* bicubic_filter32RGB: four rows, a missing row repeats the one above (as a
 * repeated row pointer), columns clamped. Twelve independent horizontal
 * cubics, then three vertical ones. */
static inline void sample_bicubic(const CtImage *im, double xin, double yin, uint8_t *out)
{
    xin -= 0.5;
    yin -= 0.5;
    int x = floor_i(xin) - 1, y = floor_i(yin) - 1;
    double dx = xin - (x + 1), dy = yin - (y + 1);
    size_t row = (size_t)im->w * 3;
    const uint8_t *rows[4];
    rows[0] = im->px + clampi(y, im->h) * row;
    for (int k = 1; k < 4; k++)
        rows[k] = y + k >= 0 && y + k < im->h ? im->px + (y + k) * row : rows[k - 1];
    int x0 = clampi(x, im->w) * 3, x1 = clampi(x + 1, im->w) * 3, x2 = clampi(x + 2, im->w) * 3,
        x3 = clampi(x + 3, im->w) * 3;
    double v[4][3];
    for (int k = 0; k < 4; k++)
        for (int c = 0; c < 3; c++) {
            const uint8_t *r = rows[k] + c;
            v[k][c] = cubic_u8(r[x0], r[x1], r[x2], r[x3], dx);
        }
    for (int c = 0; c < 3; c++) {
        double s = cubic(v[0][c], v[1][c], v[2][c], v[3][c], dy);
        out[c] = s <= 0.0 ? 0 : s >= 255.0 ? 255 : (uint8_t)s;
    }
}

/* ImagingGenericTransform with affine_transform and a bilinear/bicubic filter. */
static void affine_generic(const CtImage *src, CtImage *dst, const double a[6], int bicubic)
{
    double sw = src->w, sh = src->h;
    for (int y = 0; y < dst->h; y++) {
        uint8_t *out = dst->px + (size_t)y * dst->w * 3;
        double yc = y + 0.5;
        for (int x = 0; x < dst->w; x++, out += 3) {
            double xc = x + 0.5;
            double xin = a[0] * xc + a[1] * yc + a[2];
            double yin = a[3] * xc + a[4] * yc + a[5];
            if (xin < 0.0 || xin >= sw || yin < 0.0 || yin >= sh)
                continue;
            if (bicubic)
                sample_bicubic(src, xin, yin, out);
            else
                sample_bilinear(src, xin, yin, out);
        }
    }
}

void aug_affine(CtImage *img, CtImage *tmp, const double a[6], CtInterp interp, const uint8_t fill[3])
{
    CT_ASSERT(tmp->w == img->w && tmp->h == img->h);
    fill_image(tmp, fill);
    if (interp != CT_INTERP_NEAREST) {
        affine_generic(img, tmp, a, interp == CT_INTERP_BICUBIC);
    } else if (a[1] == 0 && a[3] == 0) {
        int stack[1024], *xtab = img->w <= 1024 ? stack : malloc(sizeof(int) * (size_t)img->w);
        CT_ASSERT(xtab);
        affine_scale_nearest(img, tmp, a, xtab);
        if (xtab != stack)
            free(xtab);
    } else {
        affine_fixed_nearest(img, tmp, a);
    }
    swap_images(img, tmp);
}

/* PIL's transposes ROTATE_90 / 180 / 270 (counter-clockwise), which
 * Image.rotate uses instead of the affine engine at those angles (90 and 270
 * only on squares, the only shape timm's rotate keeps). */
static void rotate_quarter(CtImage *img, CtImage *tmp, int angle)
{
    int w = img->w, h = img->h;
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            int sx = angle == 90 ? w - 1 - y : angle == 270 ? y : w - 1 - x;
            int sy = angle == 90 ? x : angle == 270 ? h - 1 - x : h - 1 - y;
            memcpy(tmp->px + ((size_t)y * w + x) * 3, img->px + ((size_t)sy * w + sx) * 3, 3);
        }
    }
    swap_images(img, tmp);
}

/* Python's round(x, 15) through its correctly rounded decimal conversion;
 * glibc's printf and strtod are correctly rounded too. */
static double round15(double x)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.15f", x);
    return strtod(buf, NULL);
}

void aug_rotate(CtImage *img, CtImage *tmp, double degrees, CtInterp interp, const uint8_t fill[3])
{
    double angle = fmod(degrees, 360.0);
    if (angle < 0)
        angle += 360.0; /* Python's % */
    if (angle == 0)
        return;
    if (angle == 180 || ((angle == 90 || angle == 270) && img->w == img->h)) {
        rotate_quarter(img, tmp, (int)angle);
        return;
    }
    double w = img->w, h = img->h, cx = w / 2.0, cy = h / 2.0;
    double rad = -(angle * (3.14159265358979323846 / 180.0));
    double a[6] = {round15(cos(rad)), round15(sin(rad)), 0.0, round15(-sin(rad)), round15(cos(rad)), 0.0};
    a[2] = a[0] * -cx + a[1] * -cy + a[2];
    a[5] = a[3] * -cx + a[4] * -cy + a[5];
    a[2] += cx;
    a[5] += cy;
    aug_affine(img, tmp, a, interp, fill);
}
