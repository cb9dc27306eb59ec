/*
 * Depthwise convolutions on channels-last values (x [N, H, W, C], y [N, OH,
 * OW, C]): each pixel's channels are contiguous, so every tap is one
 * multiply-add over a block of 16 channels, a vector, with the weights
 * transposed to [KH*KW, C] so a tap's block is contiguous too.
 *
 * The forward and the input gradient gather: each output element is summed
 * in registers over the taps that reach it and written once (the input
 * gradient as the transposed convolution, output pixels split among the
 * threads by row). Four columns at a time where every tap is inside the
 * plane, one at a time with the bounds checked at the edges and, for the
 * input gradient of a strided convolution, where the taps reaching a column
 * depend on its parity.
 *
 * The weight gradient splits the channel blocks among the threads, each
 * block's sum over the batch in one thread and in a fixed order (whatever
 * the thread count): per row and tap a float sum of the row's columns,
 * added into doubles.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/conv.h"

#define CB 16 /* channels a block: one AVX-512 vector, two AVX2 ones */
#define NW 4  /* columns a step where no tap leaves the plane */

#define INLINE static inline __attribute__((always_inline))

/* wt [KH*KW, C] = w [C, 1, KH, KW] transposed. */
static float *transposed_taps(const ConvGeom *c, const float *w)
{
    int64_t K = c->KH * c->KW;
    float *wt = cpu_floats(K * c->C);
    for (int64_t ch = 0; ch < c->C; ch++)
        for (int64_t t = 0; t < K; t++)
            wt[t * c->C + ch] = w[ch * K + t];
    return wt;
}

/* y row (n, oh) for columns ow..ow+nw of channels c0..c0+cb: x is sample
 * n's plane [H, W, C], yr its row [OW, C]. check: the taps may leave the
 * plane. */
INLINE void fwd_cols(const ConvGeom *c, const float *x, const float *wt, const float *bias, float *yr, int64_t oh,
                     int64_t ow, int nw, int64_t c0, int cb, int check)
{
    const int64_t *a = c->a, C = c->C;
    float acc[NW][CB];
    for (int j = 0; j < nw; j++)
        for (int q = 0; q < cb; q++)
            acc[j][q] = bias ? bias[c0 + q] : 0.0f;
    for (int64_t kh = 0; kh < c->KH; kh++) {
        int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
        if (ih < 0 || ih >= c->H)
            continue;
        const float *xr = x + ih * c->W * C + c0;
        for (int64_t kw = 0; kw < c->KW; kw++) {
            const float *wp = wt + (kh * c->KW + kw) * C + c0;
            for (int j = 0; j < nw; j++) {
                int64_t iw = (ow + j) * a[STRIDE_W] - a[PAD_W] + kw * a[DIL_W];
                if (check && (iw < 0 || iw >= c->W))
                    continue;
                const float *xp = xr + iw * C;
                for (int q = 0; q < cb; q++)
                    acc[j][q] += xp[q] * wp[q];
            }
        }
    }
    for (int j = 0; j < nw; j++)
        memcpy(yr + (ow + j) * C + c0, acc[j], sizeof(float) * (size_t)cb);
}

/* The output columns [*lo, *hi) that every tap of a row keeps inside the
 * input's W columns. */
static void interior_cols(const ConvGeom *c, int64_t *lo, int64_t *hi)
{
    int64_t s = c->a[STRIDE_W], p = c->a[PAD_W], reach = (c->KW - 1) * c->a[DIL_W];
    *lo = (p + s - 1) / s;
    *hi = c->W - 1 + p - reach >= 0 ? (c->W - 1 + p - reach) / s + 1 : 0;
    *hi = *hi < c->OW ? *hi : c->OW;
    *lo = *lo < *hi ? *lo : *hi;
}

INLINE void fwd_block(const ConvGeom *c, const float *x, const float *wt, const float *bias, float *yr, int64_t oh,
                      int64_t c0, int cb, int64_t lo, int64_t hi)
{
    int64_t ow = 0;
    for (; ow < lo; ow++)
        fwd_cols(c, x, wt, bias, yr, oh, ow, 1, c0, cb, 1);
    for (; ow + NW <= hi; ow += NW)
        fwd_cols(c, x, wt, bias, yr, oh, ow, NW, c0, cb, 0);
    for (; ow < c->OW; ow++)
        fwd_cols(c, x, wt, bias, yr, oh, ow, 1, c0, cb, 1);
}

CPU_CLONES void depthwise_nhwc(const ConvGeom *c, const float *x, const float *w, const float *bias, float *y)
{
    float *wt = transposed_taps(c, w);
    int64_t lo, hi, C = c->C;
    interior_cols(c, &lo, &hi);
#pragma omp parallel for collapse(2) if (c->N * c->C * c->OH * c->OW * c->KH * c->KW > CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t oh = 0; oh < c->OH; oh++) {
            const float *xs = x + b * c->H * c->W * C;
            float *yr = y + (b * c->OH + oh) * c->OW * C;
            int64_t c0 = 0;
            for (; c0 + CB <= C; c0 += CB)
                fwd_block(c, xs, wt, bias, yr, oh, c0, CB, lo, hi);
            if (c0 < C)
                fwd_block(c, xs, wt, bias, yr, oh, c0, (int)(C - c0), lo, hi);
        }
    free(wt);
}

/* dx row (n, ih) for columns iw..iw+nw of channels c0..c0+cb: dy is sample
 * n's [OH, OW, C], dxr the row [W, C]; the taps (kh, kw) that output pixel
 * (oh, ow) with oh * stride - pad + kh * dil = ih (and so for columns)
 * reads. check: bounds and strides checked per column. */
INLINE void grad_cols(const ConvGeom *c, const float *dy, const float *wt, float *dxr, int64_t ih, int64_t iw, int nw,
                      int64_t c0, int cb, int check)
{
    const int64_t *a = c->a, C = c->C, sh = a[STRIDE_H], sw = a[STRIDE_W];
    float acc[NW][CB] = {{0}};
    for (int64_t kh = 0; kh < c->KH; kh++) {
        int64_t t = ih + a[PAD_H] - kh * a[DIL_H], oh = t / sh;
        if (t < 0 || t % sh || oh >= c->OH)
            continue;
        const float *dyr = dy + oh * c->OW * C + c0;
        for (int64_t kw = 0; kw < c->KW; kw++) {
            const float *wp = wt + (kh * c->KW + kw) * C + c0;
            for (int j = 0; j < nw; j++) {
                int64_t u = iw + j + a[PAD_W] - kw * a[DIL_W], ow = check ? u / sw : u;
                if (check && (u < 0 || u % sw || ow >= c->OW))
                    continue;
                const float *gp = dyr + ow * C;
                for (int q = 0; q < cb; q++)
                    acc[j][q] += gp[q] * wp[q];
            }
        }
    }
    for (int j = 0; j < nw; j++)
        memcpy(dxr + (iw + j) * C + c0, acc[j], sizeof(float) * (size_t)cb);
}

INLINE void grad_block(const ConvGeom *c, const float *dy, const float *wt, float *dxr, int64_t ih, int64_t c0, int cb,
                       int64_t lo, int64_t hi)
{
    int64_t iw = 0;
    for (; iw < lo; iw++)
        grad_cols(c, dy, wt, dxr, ih, iw, 1, c0, cb, 1);
    for (; iw + NW <= hi; iw += NW)
        grad_cols(c, dy, wt, dxr, ih, iw, NW, c0, cb, 0);
    for (; iw < c->W; iw++)
        grad_cols(c, dy, wt, dxr, ih, iw, 1, c0, cb, 1);
}

CPU_CLONES void depthwise_nhwc_grad_input(const ConvGeom *c, const float *dy, const float *w, float *dx)
{
    float *wt = transposed_taps(c, w);
    int64_t C = c->C, p = c->a[PAD_W], reach = (c->KW - 1) * c->a[DIL_W], lo = 0, hi = 0;
    if (c->a[STRIDE_W] == 1) { /* the input columns whose every tap lands on an output column */
        lo = reach - p > 0 ? reach - p : 0;
        hi = c->OW - p < c->W ? c->OW - p : c->W;
        lo = lo < hi ? lo : hi > 0 ? hi : 0;
    }
#pragma omp parallel for collapse(2) if (c->N * c->C * c->OH * c->OW * c->KH * c->KW > CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t ih = 0; ih < c->H; ih++) {
            const float *dys = dy + b * c->OH * c->OW * C;
            float *dxr = dx + (b * c->H + ih) * c->W * C;
            int64_t c0 = 0;
            for (; c0 + CB <= C; c0 += CB)
                grad_block(c, dys, wt, dxr, ih, c0, CB, lo, hi);
            if (c0 < C)
                grad_block(c, dys, wt, dxr, ih, c0, (int)(C - c0), lo, hi);
        }
    free(wt);
}

/* sum [KH*KW, CB] += over sample n's rows, per tap, the products of dy and
 * x for channels c0..c0+cb. */
INLINE void wgrad_sample(const ConvGeom *c, const float *x, const float *dy, int64_t c0, int cb, double *sum)
{
    const int64_t *a = c->a, C = c->C, sw = a[STRIDE_W];
    for (int64_t oh = 0; oh < c->OH; oh++) {
        const float *dyr = dy + oh * c->OW * C + c0;
        for (int64_t kh = 0; kh < c->KH; kh++) {
            int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
            if (ih < 0 || ih >= c->H)
                continue;
            const float *xr = x + ih * c->W * C + c0;
            for (int64_t kw = 0; kw < c->KW; kw++) {
                int64_t off = kw * a[DIL_W] - a[PAD_W], lo, hi, ow;
                valid_cols(c, off, &lo, &hi);
                float acc[NW][CB] = {{0}};
                for (ow = lo; ow + NW <= hi; ow += NW)
                    for (int j = 0; j < NW; j++) {
                        const float *gp = dyr + (ow + j) * C, *xp = xr + ((ow + j) * sw + off) * C;
                        for (int q = 0; q < cb; q++)
                            acc[j][q] += gp[q] * xp[q];
                    }
                for (; ow < hi; ow++) {
                    const float *gp = dyr + ow * C, *xp = xr + (ow * sw + off) * C;
                    for (int q = 0; q < cb; q++)
                        acc[0][q] += gp[q] * xp[q];
                }
                double *s = sum + (kh * c->KW + kw) * CB;
                for (int q = 0; q < cb; q++)
                    s[q] += (double)acc[0][q] + acc[1][q] + acc[2][q] + acc[3][q];
            }
        }
    }
}

INLINE void wgrad_block(const ConvGeom *c, const float *x, const float *dy, int64_t c0, int cb, float *dw)
{
    int64_t K = c->KH * c->KW;
    double *sum = calloc((size_t)(K * CB), sizeof *sum);
    CT_ASSERT(sum != NULL);
    for (int64_t b = 0; b < c->N; b++)
        wgrad_sample(c, x + b * c->H * c->W * c->C, dy + b * c->OH * c->OW * c->C, c0, cb, sum);
    for (int q = 0; q < cb; q++)
        for (int64_t t = 0; t < K; t++)
            dw[(c0 + q) * K + t] = (float)sum[t * CB + q];
    free(sum);
}

CPU_CLONES void depthwise_nhwc_grad_weight(const ConvGeom *c, const float *x, const float *dy, float *dw)
{
    int64_t blocks = (c->C + CB - 1) / CB;
#pragma omp parallel for schedule(dynamic) if (c->N * c->C * c->OH * c->OW * c->KH * c->KW > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < blocks; i++) {
        int64_t c0 = i * CB;
        if (c0 + CB <= c->C)
            wgrad_block(c, x, dy, c0, CB, dw);
        else
            wgrad_block(c, x, dy, c0, (int)(c->C - c0), dw);
    }
}
