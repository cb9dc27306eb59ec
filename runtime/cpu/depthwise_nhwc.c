/*
 * Depthwise convolutions on channels-last values (x [N, H, W, C], y [N, OH,
 * OW, C]): each pixel's channels are contiguous, so every tap is one
 * multiply-add over a block of 16 channels, a vector, with the weights
 * transposed to [KH*KW, C] so a tap's block is contiguous too. The blocks
 * go along a pixel's channels, so memory is swept in order: a block per
 * pixel at a stride of C floats would touch one cache line per page for
 * the wide layers, where the hardware's prefetch does not follow. Channels
 * past the last full block go a float at a time.
 *
 * The forward and the input gradient gather: each output element is summed
 * in registers over the taps that reach it and written once (the input
 * gradient as the transposed convolution), rows split among the threads.
 * Four columns at a time where every tap stays inside the plane (for the
 * input gradient of a strided convolution, four columns a stride apart,
 * which meet the same taps), one at a time with the bounds checked at the
 * edges.
 *
 * The weight gradient sums each tap's products in float per chunk of rows,
 * and the chunks in double in a fixed order, so the result does not depend
 * on the thread count.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/conv.h"

#define CB 16 /* channels a block */
#define NW 4  /* columns a step where no tap leaves the plane */
#define PF 16 /* pixels ahead that the software prefetch asks for */

#define INLINE static inline __attribute__((always_inline))

/* A block of channels as one value: GCC lowers it to the clone's vectors
 * (one AVX-512 register, two AVX2 ones) and keeps accumulators of it in
 * registers, which it did not for float arrays. */
typedef float vf __attribute__((vector_size(CB * sizeof(float))));
typedef float vf_unaligned __attribute__((vector_size(CB * sizeof(float)), aligned(sizeof(float))));
#define LOAD(p) (*(const vf_unaligned *)(p))
#define STORE(p, v) (*(vf_unaligned *)(p) = (v))

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

/* The input column of output column ow at tap kw, and the output column
 * (through *ow, when the stride lets one) that reads input column iw at
 * tap kw: the convolution's geometry along a row. */
static inline int64_t in_col(const ConvGeom *c, int64_t ow, int64_t kw)
{
    return ow * c->a[STRIDE_W] - c->a[PAD_W] + kw * c->a[DIL_W];
}

static inline int out_col(const ConvGeom *c, int64_t iw, int64_t kw, int64_t *ow)
{
    int64_t u = iw + c->a[PAD_W] - kw * c->a[DIL_W];
    *ow = u / c->a[STRIDE_W];
    return u >= 0 && u % c->a[STRIDE_W] == 0 && *ow < c->OW;
}

/* y row (n, oh) for columns ow..ow+nw, the block at channel c0: x is
 * sample n's plane [H, W, C], yr its row [OW, C]. check: the taps may
 * leave the plane. */
INLINE void fwd_block(const ConvGeom *c, const float *x, const float *wt, const float *bias, float *yr, int64_t oh,
                      int64_t ow, int nw, int64_t c0, int check)
{
    const int64_t *a = c->a, C = c->C;
    vf acc[NW];
    if (!check) { /* the input row no earlier output row read, PF pixels ahead (past it: the next row's) */
        int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + (c->KH - 1) * a[DIL_H], at = ih * c->W + in_col(c, ow, 0) + PF;
        for (int64_t j = 0; j < NW * a[STRIDE_W] && at >= 0 && at + j < c->H * c->W; j++)
            __builtin_prefetch(x + (at + j) * C + c0);
    }
    for (int j = 0; j < nw; j++)
        acc[j] = bias ? LOAD(bias + c0) : (vf){0};
    for (int64_t kh = 0; kh < c->KH; kh++) {
        int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
        if (ih < 0 || ih >= c->H)
            continue;
        const float *xr = x + ih * c->W * C + c0;
        for (int64_t kw = 0; kw < c->KW; kw++) {
            vf wv = LOAD(wt + (kh * c->KW + kw) * C + c0);
            for (int j = 0; j < nw; j++) {
                int64_t iw = in_col(c, ow + j, kw);
                if (!check || (iw >= 0 && iw < c->W))
                    acc[j] += LOAD(xr + iw * C) * wv;
            }
        }
    }
    for (int j = 0; j < nw; j++)
        STORE(yr + (ow + j) * C + c0, acc[j]);
}

/* As fwd_block for one column, channels c0..C (fewer than a block). */
static void fwd_tail(const ConvGeom *c, const float *x, const float *wt, const float *bias, float *yr, int64_t oh,
                     int64_t ow, int64_t c0)
{
    const int64_t *a = c->a, C = c->C;
    for (int64_t ch = c0; ch < C; ch++)
        yr[ow * C + ch] = bias ? bias[ch] : 0.0f;
    for (int64_t kh = 0; kh < c->KH; kh++) {
        int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
        for (int64_t kw = 0; kw < c->KW && ih >= 0 && ih < c->H; kw++) {
            int64_t iw = in_col(c, ow, kw);
            if (iw >= 0 && iw < c->W)
                for (int64_t ch = c0; ch < C; ch++)
                    yr[ow * C + ch] += x[(ih * c->W + iw) * C + ch] * wt[(kh * c->KW + kw) * C + ch];
        }
    }
}

/* Columns ow..ow+nw of y's row, every channel. */
INLINE void fwd_pixels(const ConvGeom *c, const float *x, const float *wt, const float *bias, float *yr, int64_t oh,
                       int64_t ow, int nw, int check)
{
    int64_t c0 = 0;
    for (; c0 + CB <= c->C; c0 += CB)
        fwd_block(c, x, wt, bias, yr, oh, ow, nw, c0, check);
    for (int j = 0; j < nw && c0 < c->C; j++)
        fwd_tail(c, x, wt, bias, yr, oh, ow + j, c0);
}

CPU_CLONES void depthwise_nhwc(const ConvGeom *c, const float *x, const float *w, const float *bias, float *y)
{
    float *wt = transposed_taps(c, w);
    /* [lo, hi): the output columns that every tap keeps inside the input's
     * columns, those of the first tap from the left and of the last from the right */
    int64_t lo, hi, lo_last, hi_first;
    valid_cols(c, in_col(c, 0, 0), &lo, &hi_first);
    valid_cols(c, in_col(c, 0, c->KW - 1), &lo_last, &hi);
#pragma omp parallel for collapse(2) if (c->N * c->C * c->OH * c->OW * c->KH * c->KW > CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t oh = 0; oh < c->OH; oh++) {
            const float *xs = x + b * c->H * c->W * c->C;
            float *yr = y + (b * c->OH + oh) * c->OW * c->C;
            int64_t ow = 0;
            for (; ow < lo; ow++)
                fwd_pixels(c, xs, wt, bias, yr, oh, ow, 1, 1);
            for (; ow + NW <= hi; ow += NW)
                fwd_pixels(c, xs, wt, bias, yr, oh, ow, NW, 0);
            for (; ow < c->OW; ow++)
                fwd_pixels(c, xs, wt, bias, yr, oh, ow, 1, 1);
        }
    free(wt);
}

/* The output row that reads input row ih at tap kh, where there is one. */
static inline int out_row(const ConvGeom *c, int64_t ih, int64_t kh, int64_t *oh)
{
    int64_t t = ih + c->a[PAD_H] - kh * c->a[DIL_H];
    *oh = t / c->a[STRIDE_H];
    return t >= 0 && t % c->a[STRIDE_H] == 0 && *oh < c->OH;
}

/* dx row (n, ih) for columns iw + j * stride (j < nw), the block at
 * channel c0: dy is sample n's [OH, OW, C], dxr the row [W, C]. Each sums
 * the taps of the output pixels that read it. Columns a stride apart meet
 * the same taps, at consecutive output columns. check: the columns may be
 * at an edge (nw = 1), with no prefetch there; out_col tests each tap's
 * first column either way. */
INLINE void grad_block(const ConvGeom *c, const float *dy, const float *wt, float *dxr, int64_t ih, int64_t iw, int nw,
                       int64_t c0, int check)
{
    const int64_t C = c->C;
    vf acc[NW];
    int64_t oh = (ih + c->a[PAD_H]) / c->a[STRIDE_H], ow = (iw + c->a[PAD_W]) / c->a[STRIDE_W];
    int64_t at = oh * c->OW + ow + PF; /* dy's newest row, ahead as in fwd_block */
    for (int64_t j = 0; j < NW && !check && at + j < c->OH * c->OW; j++)
        __builtin_prefetch(dy + (at + j) * C + c0);
    for (int j = 0; j < nw; j++)
        acc[j] = (vf){0};
    for (int64_t kh = 0; kh < c->KH; kh++) {
        if (!out_row(c, ih, kh, &oh))
            continue;
        const float *dyr = dy + oh * c->OW * C + c0;
        for (int64_t kw = 0; kw < c->KW; kw++) {
            if (!out_col(c, iw, kw, &ow)) /* inside the plane, only the stride refuses a tap */
                continue;
            vf wv = LOAD(wt + (kh * c->KW + kw) * C + c0);
            for (int j = 0; j < nw; j++)
                acc[j] += LOAD(dyr + (ow + j) * C) * wv;
        }
    }
    for (int j = 0; j < nw; j++)
        STORE(dxr + (iw + j * c->a[STRIDE_W]) * C + c0, acc[j]);
}

/* As grad_block for one column, channels c0..C (fewer than a block). */
static void grad_tail(const ConvGeom *c, const float *dy, const float *wt, float *dxr, int64_t ih, int64_t iw, int64_t c0)
{
    const int64_t C = c->C;
    for (int64_t ch = c0; ch < C; ch++)
        dxr[iw * C + ch] = 0.0f;
    for (int64_t kh = 0; kh < c->KH; kh++) {
        int64_t oh, ow;
        for (int64_t kw = 0; kw < c->KW && out_row(c, ih, kh, &oh); kw++)
            if (out_col(c, iw, kw, &ow))
                for (int64_t ch = c0; ch < C; ch++)
                    dxr[iw * C + ch] += dy[(oh * c->OW + ow) * C + ch] * wt[(kh * c->KW + kw) * C + ch];
    }
}

INLINE void grad_pixels(const ConvGeom *c, const float *dy, const float *wt, float *dxr, int64_t ih, int64_t iw, int nw,
                        int check)
{
    int64_t c0 = 0;
    for (; c0 + CB <= c->C; c0 += CB)
        grad_block(c, dy, wt, dxr, ih, iw, nw, c0, check);
    for (int j = 0; j < nw && c0 < c->C; j++)
        grad_tail(c, dy, wt, dxr, ih, iw + j * c->a[STRIDE_W], c0);
}

CPU_CLONES void depthwise_nhwc_grad_input(const ConvGeom *c, const float *dy, const float *w, float *dx)
{
    float *wt = transposed_taps(c, w);
    /* [lo, hi): the input columns whose every tap lands on an output column
     * (its stride permitting), taken stride * NW at a time, NW columns a
     * stride apart together */
    int64_t s = c->a[STRIDE_W], p = c->a[PAD_W], reach = (c->KW - 1) * c->a[DIL_W];
    int64_t lo = reach - p > 0 ? reach - p : 0, hi = c->OW * s - p < c->W ? c->OW * s - p : c->W;
#pragma omp parallel for collapse(2) if (c->N * c->C * c->OH * c->OW * c->KH * c->KW > CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t ih = 0; ih < c->H; ih++) {
            const float *dys = dy + b * c->OH * c->OW * c->C;
            float *dxr = dx + (b * c->H + ih) * c->W * c->C;
            int64_t iw = 0;
            for (; iw < lo && iw < c->W; iw++)
                grad_pixels(c, dys, wt, dxr, ih, iw, 1, 1);
            for (; iw + s * NW <= hi; iw += s * NW)
                for (int64_t r = 0; r < s; r++)
                    grad_pixels(c, dys, wt, dxr, ih, iw + r, NW, 0);
            for (; iw < c->W; iw++)
                grad_pixels(c, dys, wt, dxr, ih, iw, 1, 1);
        }
    free(wt);
}

/* sum [KH*KW, C] += per tap, the products of dy and x over output row
 * (n, oh), the block at channel c0 (fewer channels, to C, at the tail): x
 * is sample n's plane, dyr the row [OW, C]. */
INLINE void wgrad_row(const ConvGeom *c, const float *x, const float *dyr, int64_t oh, int64_t c0, int tail, float *sum)
{
    const int64_t *a = c->a, C = c->C, sw = a[STRIDE_W];
    /* while the first tap goes along the row, the next row's lines of dy and
     * of the input row it adds: the block's lines are C floats apart, too far
     * apart for the hardware's prefetch */
    int64_t next = (oh + 1) * a[STRIDE_H] - a[PAD_H] + (c->KH - 1) * a[DIL_H], pf = -1;
    int ahead = oh + 1 < c->OH && next < c->H;
    const float *pdy = ahead ? dyr + c->OW * C + c0 : dyr, *px = ahead ? x + next * c->W * C + c0 : x;
    for (int64_t kh = 0; kh < c->KH; kh++) {
        int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
        if (ih < 0 || ih >= c->H)
            continue;
        const float *xr = x + ih * c->W * C + c0, *gr = dyr + c0;
        for (int64_t kw = 0; kw < c->KW; kw++) {
            int64_t off = kw * a[DIL_W] - a[PAD_W], lo, hi, ow;
            float *sp = sum + (kh * c->KW + kw) * C + c0;
            valid_cols(c, off, &lo, &hi);
            if (tail) {
                for (ow = lo; ow < hi; ow++)
                    for (int64_t q = 0; q < C - c0; q++)
                        sp[q] += gr[ow * C + q] * xr[(ow * sw + off) * C + q];
                continue;
            }
            vf acc[NW] = {{0}};
            pf = pf < 0 && ahead ? kh * c->KW + kw : pf;
            for (ow = lo; ow + NW <= hi; ow += NW) {
                for (int j = 0; j < NW; j++)
                    acc[j] += LOAD(gr + (ow + j) * C) * LOAD(xr + ((ow + j) * sw + off) * C);
                for (int64_t j = 0; j < NW * sw && pf == kh * c->KW + kw && ow * sw + j < c->W; j++) {
                    __builtin_prefetch(px + (ow * sw + j) * C);
                    __builtin_prefetch(pdy + (ow + j / sw) * C);
                }
            }
            for (; ow < hi; ow++)
                acc[0] += LOAD(gr + ow * C) * LOAD(xr + (ow * sw + off) * C);
            STORE(sp, LOAD(sp) + ((acc[0] + acc[1]) + (acc[2] + acc[3])));
        }
    }
}

#define WGRAD_CHUNKS 16 /* the weight gradient's chunks of rows, whatever the thread count */

CPU_CLONES void depthwise_nhwc_grad_weight(const ConvGeom *c, const float *x, const float *dy, float *dw)
{
    int64_t K = c->KH * c->KW, KC = K * c->C, rows = c->N * c->OH;
    int64_t chunks = rows < WGRAD_CHUNKS ? rows : WGRAD_CHUNKS;
    /* the GEMM convolutions' column slot: one convolution runs at a time */
    float *part = cpu_scratch(CPU_SCRATCH_COLS, chunks * KC);
#pragma omp parallel for schedule(dynamic) if (c->N * c->C * c->OH * c->OW * K > CPU_PARALLEL_MIN)
    for (int64_t k = 0; k < chunks; k++) {
        float *sum = part + k * KC;
        memset(sum, 0, sizeof *sum * (size_t)KC);
        for (int64_t r = rows * k / chunks; r < rows * (k + 1) / chunks; r++) {
            int64_t b = r / c->OH, oh = r % c->OH, c0 = 0;
            const float *xs = x + b * c->H * c->W * c->C, *dyr = dy + r * c->OW * c->C;
            for (; c0 + CB <= c->C; c0 += CB)
                wgrad_row(c, xs, dyr, oh, c0, 0, sum);
            if (c0 < c->C)
                wgrad_row(c, xs, dyr, oh, c0, 1, sum);
        }
    }
#pragma omp parallel for if (chunks * KC > CPU_PARALLEL_MIN)
    for (int64_t ch = 0; ch < c->C; ch++)
        for (int64_t t = 0; t < K; t++) {
            double v = 0;
            for (int64_t k = 0; k < chunks; k++)
                v += part[k * KC + t * c->C + ch];
            dw[ch * K + t] = (float)v;
        }
}
