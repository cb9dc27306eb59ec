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
 * over whole rows (vectorisable) and still matches Pillow's per-pixel loop;
 * on SSE2 both passes take two taps per pmaddwd (see "SSE2 passes").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/image_codec.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#define RESIZE_SSE2 1
#endif

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

#if !RESIZE_SSE2
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

#endif

#if RESIZE_SSE2
/* SSE2 passes. Each 22-bit weight k is split as kh * 2^15 + kl (kl in
 * 0..32767, kh small), so that pixel x weight products come from pmaddwd on
 * 16-bit lanes, two taps per instruction: sum = (sum_hi << 15) + sum_lo.
 * That is Pillow's int32 sum to the bit (integer sums wrap the same way in
 * any order), then the same rounding, shift and clamp to 0..255. */
static inline __m128i kpair(int32_t k0, int32_t k1, int hi)
{
    int32_t a = hi ? k0 >> 15 : k0 & 0x7fff, b = hi ? k1 >> 15 : k1 & 0x7fff;
    return _mm_set1_epi32((int32_t)(((uint32_t)b << 16) | ((uint32_t)a & 0xffff)));
}

static inline __m128i combine(__m128i lo, __m128i hi)
{
    __m128i s = _mm_add_epi32(_mm_add_epi32(lo, _mm_slli_epi32(hi, 15)), _mm_set1_epi32(1 << (PRECISION_BITS - 1)));
    return _mm_srai_epi32(s, PRECISION_BITS);
}

static inline __m128i load3(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return _mm_cvtsi32_si128((int)v);
}

static inline void store_px(uint8_t *o, __m128i s, int last)
{
    uint32_t v = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(_mm_packs_epi32(s, s), s));
    if (!last)
        memcpy(o, &v, 4); /* the 4th byte is the next pixel's, written next */
    else
        memcpy(o, &v, 3);
}

/* Horizontal taps as pairs: output i reads pixels first[i] .. + 2 * np[i],
 * an odd count widened by one zero-weight pixel inside the row; k holds
 * (lo, hi) per pair. Returns 0 when some pixel cannot be widened (its taps
 * cover the whole row: tiny sources), and the scalar pass runs instead. */
typedef struct HPairs {
    int maxp;
    int *first, *np;
    __m128i *k;
} HPairs;

static int hpairs_init(HPairs *h, const Taps *t, int in_size, int out_w)
{
    h->maxp = (t->ksize + 1) / 2;
    h->first = malloc((size_t)out_w * sizeof *h->first);
    h->np = malloc((size_t)out_w * sizeof *h->np);
    h->k = malloc((size_t)out_w * h->maxp * 2 * sizeof *h->k);
    if (!h->first || !h->np || !h->k)
        return 0;
    for (int i = 0; i < out_w; i++) {
        const int32_t *k = t->k + (size_t)i * t->ksize;
        int first = t->first[i], n = t->count[i], shift = 0;
        if (n & 1) {
            if (first + n < in_size)
                ;
            else if (first > 0)
                first--, shift = 1;
            else
                return 0;
        }
        int np = (n + 1) / 2;
        __m128i *kv = h->k + (size_t)i * h->maxp * 2;
        for (int j = 0; j < np; j++) {
            int x0 = 2 * j - shift, x1 = x0 + 1;
            int32_t k0 = x0 >= 0 && x0 < n ? k[x0] : 0, k1 = x1 >= 0 && x1 < n ? k[x1] : 0;
            kv[2 * j] = kpair(k0, k1, 0);
            kv[2 * j + 1] = kpair(k0, k1, 1);
        }
        h->first[i] = first;
        h->np[i] = np;
    }
    return 1;
}

static void hpairs_free(HPairs *h)
{
    free(h->first);
    free(h->np);
    free(h->k);
}

/* Pixels x and x + 1 as 16-bit lanes R0 R1 G0 G1 B0 B1 X X. */
static inline __m128i px_pair(const uint8_t *p, __m128i zero)
{
    return _mm_unpacklo_epi8(_mm_unpacklo_epi8(load3(p), load3(p + 3)), zero);
}

/* Rows y0 .. y0 + rows - 1; a row whose 4-byte loads could pass the end of
 * the image (its last row) takes the scalar pass. */
static void pass_h_sse2(const CtImage *src, int y0, int rows, const HPairs *h, const Taps *t, uint8_t *dst, int out_w)
{
    size_t in_row = (size_t)src->w * 3, out_row = (size_t)out_w * 3;
    const __m128i zero = _mm_setzero_si128();
    int safe = src->h - 1 - y0; /* rows 0 .. safe - 1 may be read with loads */
    if (safe > rows)
        safe = rows;
    int y = 0;
    for (; y + 2 <= safe; y += 2) {
        const uint8_t *in = src->px + (size_t)(y0 + y) * in_row;
        uint8_t *o = dst + (size_t)y * out_row;
        for (int i = 0; i < out_w; i++) {
            const uint8_t *p = in + (size_t)h->first[i] * 3, *q = p + in_row;
            const __m128i *k = h->k + (size_t)i * h->maxp * 2;
            __m128i alo = zero, ahi = zero, blo = zero, bhi = zero;
            for (int j = 0, n = h->np[i]; j < n; j++, p += 6, q += 6, k += 2) {
                __m128i a = px_pair(p, zero), b = px_pair(q, zero);
                alo = _mm_add_epi32(alo, _mm_madd_epi16(a, k[0]));
                ahi = _mm_add_epi32(ahi, _mm_madd_epi16(a, k[1]));
                blo = _mm_add_epi32(blo, _mm_madd_epi16(b, k[0]));
                bhi = _mm_add_epi32(bhi, _mm_madd_epi16(b, k[1]));
            }
            store_px(o + 3 * i, combine(alo, ahi), i == out_w - 1);
            store_px(o + out_row + 3 * i, combine(blo, bhi), i == out_w - 1);
        }
    }
    for (; y < safe; y++) {
        const uint8_t *in = src->px + (size_t)(y0 + y) * in_row;
        uint8_t *o = dst + (size_t)y * out_row;
        for (int i = 0; i < out_w; i++) {
            const uint8_t *p = in + (size_t)h->first[i] * 3;
            const __m128i *k = h->k + (size_t)i * h->maxp * 2;
            __m128i alo = zero, ahi = zero;
            for (int j = 0, n = h->np[i]; j < n; j++, p += 6, k += 2) {
                __m128i a = px_pair(p, zero);
                alo = _mm_add_epi32(alo, _mm_madd_epi16(a, k[0]));
                ahi = _mm_add_epi32(ahi, _mm_madd_epi16(a, k[1]));
            }
            store_px(o + 3 * i, combine(alo, ahi), i == out_w - 1);
        }
    }
    if (y < rows)
        pass_h(src, y0 + y, rows - y, t, dst + (size_t)y * out_row, out_w);
}

/* Vertical pass, two source rows per pmaddwd: for each 16-byte column
 * block the sums stay in registers over all the taps. kv: scratch for
 * 2 * ((ksize + 1) / 2) vectors, rp: for as many row pointers. */
static void pass_v_sse2(const uint8_t *src, int row0, size_t n, const Taps *t, uint8_t *dst, int out_h, __m128i *kv,
                        const uint8_t **rp)
{
    const __m128i zero = _mm_setzero_si128();
    size_t nb = n / 16 * 16;
    for (int j = 0; j < out_h; j++) {
        const int32_t *k = t->k + (size_t)j * t->ksize;
        int c = t->count[j], np = (c + 1) / 2;
        const uint8_t *base = src + (size_t)(t->first[j] - row0) * n;
        for (int p = 0; p < np; p++) {
            int32_t k0 = k[2 * p], k1 = 2 * p + 1 < c ? k[2 * p + 1] : 0;
            kv[2 * p] = kpair(k0, k1, 0);
            kv[2 * p + 1] = kpair(k0, k1, 1);
            rp[2 * p] = base + (size_t)(2 * p) * n;
            rp[2 * p + 1] = 2 * p + 1 < c ? rp[2 * p] + n : rp[2 * p];
        }
        uint8_t *o = dst + (size_t)j * n;
        for (size_t i = 0; i < nb; i += 16) {
            __m128i l0 = zero, l1 = zero, l2 = zero, l3 = zero, h0 = zero, h1 = zero, h2 = zero, h3 = zero;
            for (int p = 0; p < np; p++) {
                __m128i a = _mm_loadu_si128((const __m128i *)(rp[2 * p] + i));
                __m128i b = _mm_loadu_si128((const __m128i *)(rp[2 * p + 1] + i));
                __m128i lo = _mm_unpacklo_epi8(a, b), hi = _mm_unpackhi_epi8(a, b);
                __m128i w0 = _mm_unpacklo_epi8(lo, zero), w1 = _mm_unpackhi_epi8(lo, zero);
                __m128i w2 = _mm_unpacklo_epi8(hi, zero), w3 = _mm_unpackhi_epi8(hi, zero);
                __m128i kl = kv[2 * p], kh = kv[2 * p + 1];
                l0 = _mm_add_epi32(l0, _mm_madd_epi16(w0, kl));
                l1 = _mm_add_epi32(l1, _mm_madd_epi16(w1, kl));
                l2 = _mm_add_epi32(l2, _mm_madd_epi16(w2, kl));
                l3 = _mm_add_epi32(l3, _mm_madd_epi16(w3, kl));
                h0 = _mm_add_epi32(h0, _mm_madd_epi16(w0, kh));
                h1 = _mm_add_epi32(h1, _mm_madd_epi16(w1, kh));
                h2 = _mm_add_epi32(h2, _mm_madd_epi16(w2, kh));
                h3 = _mm_add_epi32(h3, _mm_madd_epi16(w3, kh));
            }
            __m128i s01 = _mm_packs_epi32(combine(l0, h0), combine(l1, h1));
            __m128i s23 = _mm_packs_epi32(combine(l2, h2), combine(l3, h3));
            _mm_storeu_si128((__m128i *)(o + i), _mm_packus_epi16(s01, s23));
        }
        for (size_t i = nb; i < n; i++) {
            int32_t s = 1 << (PRECISION_BITS - 1);
            for (int y = 0; y < c; y++)
                s += base[(size_t)y * n + i] * k[y];
            o[i] = clip8(s);
        }
    }
}
#endif

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
        int hrows = need_v ? y_last - y_first : out_h;
#if RESIZE_SSE2
        HPairs hp = {0};
        if (hpairs_init(&hp, &th, src->w, out_w))
            pass_h_sse2(src, y_first, hrows, &hp, &th, hout, out_w);
        else
            pass_h(src, y_first, hrows, &th, hout, out_w);
        hpairs_free(&hp);
#else
        pass_h(src, y_first, hrows, &th, hout, out_w);
#endif
        rows = tmp;
        row0 = y_first;
    }
    if (need_v) {
        size_t n = (size_t)out_w * 3;
#if RESIZE_SSE2
        size_t np = (size_t)(tv.ksize + 1) / 2 * 2;
        __m128i *kv = malloc(np * sizeof *kv);
        const uint8_t **rp = malloc(np * sizeof *rp);
        if (kv && rp)
            pass_v_sse2(rows, row0, n, &tv, dst->px, out_h, kv, rp);
        free(kv);
        free(rp);
        if (!kv || !rp) {
            ct_fail(err, "resize: out of memory for %d filter taps", tv.ksize);
            goto free_taps;
        }
#else
        acc = malloc(n * sizeof *acc);
        if (!acc) {
            ct_fail(err, "resize: out of memory for a %d-pixel row", out_w);
            goto free_taps;
        }
        pass_v(rows, row0, n, &tv, dst->px, out_h, acc);
#endif
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

/* The RGB of src resampled into dst (allocated here), box b checked. */
static int resize_rgb(const CtImage *src, const float b[4], int out_w, int out_h, CtInterp interp, CtImage *dst,
                      CtErr *err)
{
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

/* PIL's MULDIV255: a * b / 255 rounded, as its RGBA -> RGBa conversion. */
static uint8_t muldiv255(unsigned a, unsigned b)
{
    unsigned t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/* src with alpha, as PIL resamples 'RGBA' (image.h): the alpha band goes
 * through resize_rgb as a grey image, the colours premultiplied unless the
 * filter is nearest or the resize is the whole image's copy. */
static int resize_alpha(const CtImage *src, const float b[4], int out_w, int out_h, CtInterp interp, CtImage *dst,
                        CtErr *err)
{
    size_t n = (size_t)src->w * src->h;
    int copy = b[0] == 0 && b[1] == 0 && b[2] == src->w && b[3] == src->h && out_w == src->w && out_h == src->h;
    int premul = interp != CT_INTERP_NEAREST && !copy;
    CtImage a3, pm = {0}, ra = {0};
    if (image_alloc(&a3, src->w, src->h, err) || (premul && image_alloc(&pm, src->w, src->h, err))) {
        image_free(&a3);
        return ct_failctx(err, "resize");
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t a = src->alpha[i];
        a3.px[3 * i] = a3.px[3 * i + 1] = a3.px[3 * i + 2] = a;
        for (int c = 0; premul && c < 3; c++)
            pm.px[3 * i + c] = muldiv255(src->px[3 * i + c], a);
    }
    int rc = resize_rgb(premul ? &pm : src, b, out_w, out_h, interp, dst, err) ||
             resize_rgb(&a3, b, out_w, out_h, interp, &ra, err);
    image_free(&a3);
    image_free(&pm);
    size_t m = (size_t)out_w * out_h;
    if (!rc && !(dst->alpha = malloc(m)))
        rc = ct_fail(err, "resize: out of memory for a %dx%d alpha band", out_w, out_h);
    if (rc) {
        image_free(dst);
        image_free(&ra);
        return -1;
    }
    for (size_t i = 0; i < m; i++) {
        unsigned a = ra.px[3 * i];
        dst->alpha[i] = (uint8_t)a;
        for (int c = 0; premul && a != 0 && a != 255 && c < 3; c++) {
            unsigned v = 255u * dst->px[3 * i + c] / a;
            dst->px[3 * i + c] = (uint8_t)(v > 255 ? 255 : v);
        }
    }
    image_free(&ra);
    return 0;
}

int image_resize(const CtImage *src, CtBox box, int out_w, int out_h, CtInterp interp, CtImage *dst, CtErr *err)
{
    dst->w = dst->h = 0;
    dst->px = dst->alpha = NULL;
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
    return src->alpha ? resize_alpha(src, b, out_w, out_h, interp, dst, err)
                      : resize_rgb(src, b, out_w, out_h, interp, dst, err);
}
