/*
 * Depthwise convolutions, a (sample, channel) plane at a time, planes split
 * among OpenMP threads (the weight gradient's by channel, so each channel's
 * sum over the batch stays in one thread, in batch order).
 *
 * Stride 1 without dilation (ConvNeXt's 7x7, MobileNet's and EfficientNet's
 * stride-1 3x3 and 5x5): the plane goes into a zero-padded copy, so every
 * tap is one multiply-add over the whole plane seen as a flat array with
 * the padded row length, the few columns between rows computed and thrown
 * away: a loop of OH * (W + 2 * pad) elements per tap instead of OH loops of
 * OW elements, which for the small planes of a network's later stages (5 to
 * 20 columns) were mostly loop overhead. Other strides and dilations: row by
 * row over each tap's valid columns.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/conv.h"

/* Depthwise plane kernels: x, dx [H, W]; y, dy [OH, OW]; w, dw [KH, KW].
 * mode 0: y += w (*) x; 1: dx += w (*)^T dy; 2: dw += dy . x per tap. */
CPU_CLONES static void depthwise_plane(const ConvGeom *c, int mode, const float *w, float *dw, float *x,
                                       float *y)
{
    const int64_t *a = c->a, sw = a[STRIDE_W];
    for (int64_t kh = 0; kh < c->KH; kh++)
        for (int64_t kw = 0; kw < c->KW; kw++) {
            int64_t off = kw * a[DIL_W] - a[PAD_W], lo, hi;
            valid_cols(c, off, &lo, &hi);
            float wv = mode == 2 ? 0 : w[kh * c->KW + kw];
            double acc = 0;
            for (int64_t oh = 0; oh < c->OH; oh++) {
                int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
                if (ih < 0 || ih >= c->H)
                    continue;
                int64_t base = ih * c->W + off; /* x's index of output column 0 (before lo: out of the row) */
                float *yr = y + oh * c->OW;
                if (sw == 1) { /* contiguous rows: loops the compiler vectorises */
                    float *restrict xs = x + base + lo, *restrict ys = yr + lo;
                    int64_t len = hi - lo;
                    if (mode == 0)
                        for (int64_t j = 0; j < len; j++)
                            ys[j] += wv * xs[j];
                    else if (mode == 1)
                        for (int64_t j = 0; j < len; j++)
                            xs[j] += wv * ys[j];
                    else { /* eight partial sums: a dot product the compiler may vectorise */
                        float part[8] = {0};
                        int64_t j = 0;
                        for (; j + 8 <= len; j += 8)
                            for (int q = 0; q < 8; q++)
                                part[q] += ys[j + q] * xs[j + q];
                        for (; j < len; j++)
                            part[0] += ys[j] * xs[j];
                        for (int q = 0; q < 8; q++)
                            acc += part[q];
                    }
                } else if (mode == 0) {
                    for (int64_t ow = lo; ow < hi; ow++)
                        yr[ow] += wv * x[base + ow * sw];
                } else if (mode == 1) {
                    for (int64_t ow = lo; ow < hi; ow++)
                        x[base + ow * sw] += wv * yr[ow];
                } else {
                    float part = 0;
                    for (int64_t ow = lo; ow < hi; ow++)
                        part += yr[ow] * x[base + ow * sw];
                    acc += part;
                }
            }
            if (mode == 2)
                dw[kh * c->KW + kw] += (float)acc;
        }
}

/* Stride 1, no dilation, padding below the kernel size (so the transposed
 * convolution of the input gradient needs no negative padding). */
static int flat_ok(const ConvGeom *c)
{
    const int64_t *a = c->a;
    return a[STRIDE_H] == 1 && a[STRIDE_W] == 1 && a[DIL_H] == 1 && a[DIL_W] == 1 && a[PAD_H] < c->KH &&
           a[PAD_W] < c->KW;
}

/* dst [rows, cols] (row stride cols) = src [h, w] at row top, column left,
 * zeros around it. */
static void pad_plane(const float *src, int64_t h, int64_t w, float *dst, int64_t rows, int64_t cols, int64_t top,
                      int64_t left)
{
    memset(dst, 0, sizeof *dst * (size_t)(rows * cols));
    for (int64_t r = 0; r < h; r++)
        memcpy(dst + (r + top) * cols + left, src + r * w, sizeof *dst * (size_t)w);
}

/* acc [L] += sum over taps of k[t] * src[t's offset + i]: the flat
 * correlation of a padded plane with row length ld (taps flipped for the
 * input gradient's transposed convolution). */
CPU_CLONES static void flat_correlate(const float *src, int64_t ld, const float *k, int64_t KH, int64_t KW, int flip,
                                      float *acc, int64_t L)
{
    memset(acc, 0, sizeof *acc * (size_t)L);
    for (int64_t kh = 0; kh < KH; kh++)
        for (int64_t kw = 0; kw < KW; kw++) {
            float wv = flip ? k[(KH - 1 - kh) * KW + (KW - 1 - kw)] : k[kh * KW + kw];
            const float *s = src + kh * ld + kw;
            for (int64_t i = 0; i < L; i++)
                acc[i] += wv * s[i];
        }
}

/* dw [KH*KW] += per tap, the dot product of dyz (dy with row length ld, zero
 * between rows) and the padded plane xp at that tap's offset. */
CPU_CLONES static void flat_taps(const float *xp, const float *dyz, int64_t ld, int64_t KH, int64_t KW, int64_t L,
                                 double *dw)
{
    for (int64_t kh = 0; kh < KH; kh++)
        for (int64_t kw = 0; kw < KW; kw++) {
            const float *s = xp + kh * ld + kw;
            float acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < L; i++)
                acc += dyz[i] * s[i];
            dw[kh * KW + kw] += acc;
        }
}

void depthwise_conv(const ConvGeom *c, const float *x, const float *w, const float *bias, float *y)
{
    int64_t P = c->OH * c->OW, K = c->KH * c->KW, ph = c->a[PAD_H], pw = c->a[PAD_W];
    int64_t Hp = c->H + 2 * ph, Wp = c->W + 2 * pw, L = (c->OH - 1) * Wp + c->OW;
    int flat = flat_ok(c);
#pragma omp parallel if (c->N * c->C * P * K > CPU_PARALLEL_MIN)
    {
        float *xp = flat ? cpu_floats(Hp * Wp) : NULL, *acc = flat ? cpu_floats(L) : NULL;
#pragma omp for collapse(2)
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t ch = 0; ch < c->C; ch++) {
                const float *xs = x + (b * c->C + ch) * c->H * c->W;
                float *ys = y + (b * c->C + ch) * P, bv = bias ? bias[ch] : 0;
                if (flat) {
                    pad_plane(xs, c->H, c->W, xp, Hp, Wp, ph, pw);
                    flat_correlate(xp, Wp, w + ch * K, c->KH, c->KW, 0, acc, L);
                    for (int64_t oh = 0; oh < c->OH; oh++)
                        for (int64_t ow = 0; ow < c->OW; ow++)
                            ys[oh * c->OW + ow] = acc[oh * Wp + ow] + bv;
                    continue;
                }
                for (int64_t p = 0; p < P; p++)
                    ys[p] = bv;
                depthwise_plane(c, 0, w + ch * K, NULL, (float *)xs, ys);
            }
        free(xp);
        free(acc);
    }
}

void depthwise_conv_grad_input(const ConvGeom *c, const float *dy, const float *w, float *dx)
{
    int64_t P = c->OH * c->OW, K = c->KH * c->KW;
    /* dx = dy padded by kernel - 1 - pad, correlated with the flipped kernel */
    int64_t th = c->KH - 1 - c->a[PAD_H], tw = c->KW - 1 - c->a[PAD_W];
    int64_t Hq = c->H + c->KH - 1, Wq = c->W + c->KW - 1, L = (c->H - 1) * Wq + c->W;
    int flat = flat_ok(c);
    if (!flat)
        memset(dx, 0, sizeof *dx * (size_t)(c->N * c->C * c->H * c->W));
#pragma omp parallel if (c->N * c->C * P * K > CPU_PARALLEL_MIN)
    {
        float *dyp = flat ? cpu_floats(Hq * Wq) : NULL, *acc = flat ? cpu_floats(L) : NULL;
#pragma omp for collapse(2)
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t ch = 0; ch < c->C; ch++) {
                const float *dys = dy + (b * c->C + ch) * P;
                float *dxs = dx + (b * c->C + ch) * c->H * c->W;
                if (flat) {
                    pad_plane(dys, c->OH, c->OW, dyp, Hq, Wq, th, tw);
                    flat_correlate(dyp, Wq, w + ch * K, c->KH, c->KW, 1, acc, L);
                    for (int64_t ih = 0; ih < c->H; ih++)
                        memcpy(dxs + ih * c->W, acc + ih * Wq, sizeof *dxs * (size_t)c->W);
                    continue;
                }
                depthwise_plane(c, 1, w + ch * K, NULL, dxs, (float *)dys);
            }
        free(dyp);
        free(acc);
    }
}

void depthwise_conv_grad_weight(const ConvGeom *c, const float *x, const float *dy, float *dw)
{
    int64_t P = c->OH * c->OW, K = c->KH * c->KW, ph = c->a[PAD_H], pw = c->a[PAD_W];
    int64_t Hp = c->H + 2 * ph, Wp = c->W + 2 * pw, L = (c->OH - 1) * Wp + c->OW;
    int flat = flat_ok(c);
    memset(dw, 0, sizeof *dw * (size_t)(c->C * K));
#pragma omp parallel if (c->N * c->C * P * K > CPU_PARALLEL_MIN)
    {
        float *xp = flat ? cpu_floats(Hp * Wp) : NULL, *dyz = flat ? cpu_floats(L) : NULL;
        double *sum = malloc(sizeof *sum * (size_t)K);
        CT_ASSERT(sum != NULL);
        if (dyz)
            memset(dyz, 0, sizeof *dyz * (size_t)L);
#pragma omp for
        for (int64_t ch = 0; ch < c->C; ch++) {
            if (!flat) {
                for (int64_t b = 0; b < c->N; b++)
                    depthwise_plane(c, 2, NULL, dw + ch * K, (float *)x + (b * c->C + ch) * c->H * c->W,
                                    (float *)dy + (b * c->C + ch) * P);
                continue;
            }
            memset(sum, 0, sizeof *sum * (size_t)K);
            for (int64_t b = 0; b < c->N; b++) {
                pad_plane(x + (b * c->C + ch) * c->H * c->W, c->H, c->W, xp, Hp, Wp, ph, pw);
                for (int64_t oh = 0; oh < c->OH; oh++) /* the columns between rows stay zero */
                    memcpy(dyz + oh * Wp, dy + (b * c->C + ch) * P + oh * c->OW, sizeof *dyz * (size_t)c->OW);
                flat_taps(xp, dyz, Wp, c->KH, c->KW, L, sum);
            }
            for (int64_t t = 0; t < K; t++)
                dw[ch * K + t] = (float)sum[t];
        }
        free(xp);
        free(dyz);
        free(sum);
    }
}
