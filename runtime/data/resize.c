/*
 * image_resize: Pillow 9.4's Image.resize(size, filter, box) on RGB, to the
 * bit (libImaging/Resample.c and Geometry.c, _imaging.c's _resize):
 *   - box coordinates are float32, as Pillow parses them;
 *   - an integer box of the output's size is a plain crop;
 *   - NEAREST maps pixel centres with an accumulated double step;
 *   - BILINEAR/BICUBIC (a = -0.5) are separable: per output pixel the taps
 *     cover support * max(scale, 1) source pixels (antialiasing when
 *     shrinking), are normalised to sum 1, then turned into 22-bit fixed
 *     point; the horizontal pass (over just the rows the vertical one reads)
 *     rounds to uint8, then the vertical pass does.
 * Integer sums are exact in any order, so the vertical pass runs tap by tap
 * over whole rows (vectorisable) and still matches Pillow's per-pixel loop.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/image_codec.h"

/* Pillow's fixed point: 8 bits of result, 2 of headroom for the overshoot
 * of negative lobes, the rest (22) fraction, in 32-bit sums. */
#define PRECISION_BITS (32 - 8 - 2)

/* Taps of a 1-D resampling: output i reads `count[i]` source pixels from
 * `first[i]` with weights k[i * ksize ...] in PRECISION_BITS fixed point. */
typedef struct Taps {
    int ksize;
    int *first, *count;
    int32_t *k;
} Taps;

static void taps_free(Taps *t)
{
    free(t->first);
    free(t->count);
    free(t->k);
}

static double bilinear(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

static double bicubic(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc, same expressions in the
 * same order (in0, in1 are float there too), so the weights are identical. */
static int taps_init(Taps *t, int in_size, float in0, float in1, int out_size, CtInterp interp, CtErr *err)
{
    double (*filter)(double) = interp == CT_INTERP_BICUBIC ? bicubic : bilinear;
    double support = interp == CT_INTERP_BICUBIC ? 2.0 : 1.0;
    double scale = (double)(in1 - in0) / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    support *= filterscale;
    t->ksize = (int)ceil(support) * 2 + 1;
    t->first = malloc((size_t)out_size * sizeof *t->first);
    t->count = malloc((size_t)out_size * sizeof *t->count);
    t->k = malloc((size_t)out_size * t->ksize * sizeof *t->k);
    double *w = malloc((size_t)t->ksize * sizeof *w);
    if (!t->first || !t->count || !t->k || !w) {
        free(w);
        taps_free(t);
        return ct_fail(err, "resize: out of memory for %d x %d filter taps", out_size, t->ksize);
    }
    for (int i = 0; i < out_size; i++) {
        double center = in0 + (i + 0.5) * scale, ss = 1.0 / filterscale, sum = 0.0;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            w[x] = filter((x + xmin - center + 0.5) * ss);
            sum += w[x];
        }
        int32_t *k = t->k + (size_t)i * t->ksize;
        for (int x = 0; x < xmax; x++) {
            double v = sum != 0.0 ? w[x] / sum : w[x];
            k[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
        }
        t->first[i] = xmin;
        t->count[i] = xmax > 0 ? xmax : 0;
    }
    free(w);
    return 0;
}

/* Pillow's clip8: the rounded sum's integer part, clamped to 0..255. The
 * shift of a negative sum is arithmetic on every compiler ctimm supports. */
static inline uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* Horizontal pass over `rows` source rows from `y0`, into dst (out_w wide).
 * Two rows at a time share each output pixel's taps (fewer loads, more
 * independent sums in flight). */
static void pass_h(const CtImage *src, int y0, int rows, const Taps *t, uint8_t *dst, int out_w)
{
    size_t in_row = (size_t)src->w * 3, out_row = (size_t)out_w * 3;
    int y = 0;
    for (; y + 2 <= rows; y += 2) {
        const uint8_t *in = src->px + (size_t)(y0 + y) * in_row;
        uint8_t *o = dst + (size_t)y * out_row;
        for (int i = 0; i < out_w; i++) {
            const uint8_t *p = in + (size_t)t->first[i] * 3, *q = p + in_row;
            const int32_t *k = t->k + (size_t)i * t->ksize;
            int32_t a0 = 1 << (PRECISION_BITS - 1), a1 = a0, a2 = a0, b0 = a0, b1 = a0, b2 = a0;
            for (int x = 0, n = t->count[i]; x < n; x++, p += 3, q += 3) {
                int32_t kx = k[x];
                a0 += p[0] * kx;
                a1 += p[1] * kx;
                a2 += p[2] * kx;
                b0 += q[0] * kx;
                b1 += q[1] * kx;
                b2 += q[2] * kx;
            }
            o[3 * i] = clip8(a0);
            o[3 * i + 1] = clip8(a1);
            o[3 * i + 2] = clip8(a2);
            o[out_row + 3 * i] = clip8(b0);
            o[out_row + 3 * i + 1] = clip8(b1);
            o[out_row + 3 * i + 2] = clip8(b2);
        }
    }
    for (; y < rows; y++) {
        const uint8_t *in = src->px + (size_t)(y0 + y) * in_row;
        uint8_t *o = dst + (size_t)y * out_row;
        for (int i = 0; i < out_w; i++) {
            const uint8_t *p = in + (size_t)t->first[i] * 3;
            const int32_t *k = t->k + (size_t)i * t->ksize;
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int x = 0, n = t->count[i]; x < n; x++, p += 3) {
                s0 += p[0] * k[x];
                s1 += p[1] * k[x];
                s2 += p[2] * k[x];
            }
            o[3 * i] = clip8(s0);
            o[3 * i + 1] = clip8(s1);
            o[3 * i + 2] = clip8(s2);
        }
    }
}

/* Vertical pass: rows of `n` bytes from src (row r of src is source row
 * r + row0), into out_h rows of dst, tap by tap over whole rows. The rows
 * go in blocks of 16 bytes, a fixed count every compiler vectorises at -O2. */
#define VBLOCK 16
static void pass_v(const uint8_t *src, int row0, size_t n, const Taps *t, uint8_t *dst, int out_h, int32_t *acc)
{
    size_t nb = n / VBLOCK * VBLOCK;
    for (int j = 0; j < out_h; j++) {
        const int32_t *k = t->k + (size_t)j * t->ksize;
        for (size_t i = 0; i < n; i++)
            acc[i] = 1 << (PRECISION_BITS - 1);
        for (int y = 0; y < t->count[j]; y++) {
            const uint8_t *in = src + (size_t)(t->first[j] + y - row0) * n;
            int32_t ky = k[y];
            for (size_t i = 0; i < nb; i += VBLOCK)
                for (int l = 0; l < VBLOCK; l++)
                    acc[i + l] += in[i + l] * ky;
            for (size_t i = nb; i < n; i++)
                acc[i] += in[i] * ky;
        }
        uint8_t *o = dst + (size_t)j * n;
        for (size_t i = 0; i < nb; i += VBLOCK)
            for (int l = 0; l < VBLOCK; l++)
                o[i + l] = clip8(acc[i + l]);
        for (size_t i = nb; i < n; i++)
            o[i] = clip8(acc[i]);
    }
}

/* BILINEAR/BICUBIC as ImagingResampleInner: each pass only when it is not
 * the identity, the horizontal one over the rows the vertical one reads. */
static int resample(const CtImage *src, const float b[4], CtInterp interp, CtImage *dst, CtErr *err)
{
    int out_w = dst->w, out_h = dst->h;
    int need_h = out_w != src->w || b[0] != 0 || b[2] != out_w;
    int need_v = out_h != src->h || b[1] != 0 || b[3] != out_h;
    Taps th = {0}, tv = {0};
    uint8_t *tmp = NULL;
    int32_t *acc = NULL;
    int rc = -1;
    if (taps_init(&tv, src->h, b[1], b[3], out_h, interp, err))
        return -1;
    if (need_h && taps_init(&th, src->w, b[0], b[2], out_w, interp, err))
        goto free_taps;
    const uint8_t *rows = src->px;
    int row0 = 0;
    if (need_h) {
        /* Only source rows first[0] .. first[last] + count[last] are read. */
        int y_first = tv.first[0], y_last = tv.first[out_h - 1] + tv.count[out_h - 1];
        if (y_last <= y_first)
            y_last = y_first + 1;
        uint8_t *hout = dst->px;
        if (need_v) {
            tmp = malloc((size_t)(y_last - y_first) * out_w * 3);
            if (!tmp) {
                ct_fail(err, "resize: out of memory for a %dx%d intermediate", out_w, y_last - y_first);
                goto free_taps;
            }
            hout = tmp;
        }
        pass_h(src, y_first, need_v ? y_last - y_first : out_h, &th, hout, out_w);
        rows = tmp;
        row0 = y_first;
    }
    if (need_v) {
        size_t n = (size_t)out_w * 3;
        acc = malloc(n * sizeof *acc);
        if (!acc) {
            ct_fail(err, "resize: out of memory for a %d-pixel row", out_w);
            goto free_taps;
        }
        pass_v(rows, row0, n, &tv, dst->px, out_h, acc);
    }
    rc = 0;
free_taps:
    free(acc);
    free(tmp);
    taps_free(&th);
    taps_free(&tv);
    return rc;
}

/* NEAREST as ImagingScaleAffine: centres stepped by accumulation, not
 * multiplication (the last ulp decides some pixels), outside pixels zero. */
static int nearest(const CtImage *src, const float b[4], CtImage *dst, CtErr *err)
{
    int out_w = dst->w, out_h = dst->h;
    int *xin = calloc((size_t)out_w, sizeof *xin);
    if (!xin)
        return ct_fail(err, "resize: out of memory for a %d-pixel row table", out_w);
    double ax = (double)(b[2] - b[0]) / out_w, ay = (double)(b[3] - b[1]) / out_h;
    double xo = (double)b[0] + ax * 0.5, yo = (double)b[1] + ay * 0.5;
    int xmin = out_w, xmax = 0;
    for (int x = 0; x < out_w; x++, xo += ax) {
        int xi = xo < 0.0 ? -1 : (int)xo;
        if (xi >= 0 && xi < src->w) {
            xmax = x + 1;
            if (x < xmin)
                xmin = x;
            xin[x] = xi;
        }
    }
    size_t row = (size_t)out_w * 3;
    for (int y = 0; y < out_h; y++, yo += ay) {
        int yi = yo < 0.0 ? -1 : (int)yo;
        uint8_t *o = dst->px + (size_t)y * row;
        memset(o, 0, row);
        if (yi < 0 || yi >= src->h)
            continue;
        const uint8_t *in = src->px + (size_t)yi * src->w * 3;
        for (int x = xmin; x < xmax; x++) {
            const uint8_t *p = in + (size_t)xin[x] * 3;
            o[3 * x] = p[0];
            o[3 * x + 1] = p[1];
            o[3 * x + 2] = p[2];
        }
    }
    free(xin);
    return 0;
}

int image_resize(const CtImage *src, CtBox box, int out_w, int out_h, CtInterp interp, CtImage *dst, CtErr *err)
{
    dst->w = dst->h = 0;
    dst->px = NULL;
    if (!src->px || src->w < 1 || src->h < 1)
        return ct_fail(err, "resize: empty source image (%dx%d)", src->w, src->h);
    if (interp != CT_INTERP_NEAREST && interp != CT_INTERP_BILINEAR && interp != CT_INTERP_BICUBIC)
        return ct_fail(err, "resize: unknown interpolation %d", (int)interp);
    if (out_w < 1 || out_h < 1 || out_w > CT_IMAGE_MAX_SIDE || out_h > CT_IMAGE_MAX_SIDE)
        return ct_fail(err, "resize: output size %dx%d is not within 1..%d", out_w, out_h, CT_IMAGE_MAX_SIDE);
    float b[4] = {(float)box.x0, (float)box.y0, (float)box.x1, (float)box.y1};
    if (!isfinite(b[0]) || !isfinite(b[1]) || !isfinite(b[2]) || !isfinite(b[3]) || b[0] < 0 || b[1] < 0 ||
        b[2] > src->w || b[3] > src->h || b[2] - b[0] < 0 || b[3] - b[1] < 0)
        return ct_fail(err, "resize: box (%g, %g, %g, %g) is not within the %dx%d image", box.x0, box.y0, box.x1,
                       box.y1, src->w, src->h);
    if (image_alloc(dst, out_w, out_h, err))
        return ct_failctx(err, "resize");
    int rc;
    if (b[0] - (int)b[0] == 0 && b[2] - b[0] == out_w && b[1] - (int)b[1] == 0 && b[3] - b[1] == out_h) {
        size_t row = (size_t)out_w * 3;
        int x0 = (int)b[0], y0 = (int)b[1];
        for (int y = 0; y < out_h; y++)
            memcpy(dst->px + y * row, src->px + ((size_t)(y0 + y) * src->w + x0) * 3, row);
        rc = 0;
    } else if (interp == CT_INTERP_NEAREST) {
        rc = nearest(src, b, dst, err);
    } else {
        rc = resample(src, b, interp, dst, err);
    }
    if (rc)
        image_free(dst);
    return rc;
}
