/*
 * The forward of a convolution over a few input channels, as an image
 * model's stem (3 channels in), on NCHW values. As im2col and a GEMM, its
 * K is C*KH*KW (27 for a 3x3 stem): too short for the GEMM's kernels to run
 * near their peak, after a column matrix 9x the input's size.
 *
 * Here each output row is computed directly, 16 output columns a vector.
 * A tap reads, for those 16 columns, 16 input columns a stride apart: each
 * input row is first copied split by the stride's phase (column j*s + r at
 * phase r, index j, zeros past the edges), so that a tap's columns are 16
 * contiguous floats there. Each output channel's accumulator then takes
 * that vector times the tap's weight, from a copy of the weights packed a
 * tap's channels together; up to 24 channels' accumulators a pass, held in
 * registers. A band of output rows is one task; a fused activation (the
 * conv's step's epilogue) runs over the band's outputs while they are still
 * in the core's cache.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/conv.h"

#define VW 16 /* output columns a vector */
#define OB 24 /* output channels a pass at most */
#define BAND 16 /* output rows a task: their input rows split once, their outputs in L2 for the activation */

#define INLINE static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(VW * sizeof(float))));
typedef float vf_unaligned __attribute__((vector_size(VW * sizeof(float)), aligned(sizeof(float))));
#define LOAD(p) (*(const vf_unaligned *)(p))
#define STORE(p, v) (*(vf_unaligned *)(p) = (v))

int stem_conv_applies(const ConvGeom *c)
{
    return c->groups == 1 && c->C <= 4 && c->C * c->KH * c->KW <= 64 && c->KW <= 16 && !c->pointwise && !c->nhwc;
}

/* A band of up to BAND output rows of one sample: the input rows they read,
 * each split by phase once (s*L floats a row, channel by channel), and for
 * the row being computed its taps that stay inside the plane (ntaps: each
 * one's phase-split row and the index of its first tap, (ch, kh, 0), among
 * the C*KH*KW). */
typedef struct {
    int64_t L, ih0, nrows, ntaps;
    float *split;
    const float *row[64];
    int64_t woff[64];
} Band;

/* Splits the input rows [ih0, ih0 + nrows) of sample x [C, H, W] by phase. */
INLINE void split_rows(const ConvGeom *c, const float *x, Band *b)
{
    const int64_t s = c->a[STRIDE_W], L = b->L;
    for (int64_t ch = 0; ch < c->C; ch++)
        for (int64_t i = 0; i < b->nrows; i++) {
            const float *xr = x + (ch * c->H + b->ih0 + i) * c->W;
            float *dst = b->split + (ch * b->nrows + i) * s * L;
            for (int64_t r = 0; r < s; r++) {
                /* j in [lo, hi): input column j*s + r - pad inside the row */
                int64_t off = r - c->a[PAD_W], lo = off >= 0 ? 0 : (-off + s - 1) / s;
                int64_t hi = c->W - off > 0 ? (c->W - off + s - 1) / s : 0;
                lo = lo < L ? lo : L;
                hi = hi < L ? (hi > lo ? hi : lo) : L;
                float *d = dst + r * L;
                for (int64_t j = 0; j < lo; j++)
                    d[j] = 0.0f;
                if (s == 2) /* the stems' stride: a constant, so that the loop vectorises */
                    for (int64_t j = lo; j < hi; j++)
                        d[j] = xr[j * 2 + off];
                else
                    for (int64_t j = lo; j < hi; j++)
                        d[j] = xr[j * s + off];
                for (int64_t j = hi; j < L; j++)
                    d[j] = 0.0f;
            }
        }
}

/* The taps of output row oh that stay inside the plane. */
INLINE void row_taps(const ConvGeom *c, int64_t oh, Band *b)
{
    const int64_t *a = c->a, s = a[STRIDE_W];
    b->ntaps = 0;
    for (int64_t ch = 0; ch < c->C; ch++)
        for (int64_t kh = 0; kh < c->KH; kh++) {
            int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
            if (ih < 0 || ih >= c->H)
                continue;
            b->row[b->ntaps] = b->split + (ch * b->nrows + ih - b->ih0) * s * b->L;
            b->woff[b->ntaps++] = (ch * c->KH + kh) * c->KW;
        }
}

/* How many output channels the pass over the rem left computes (pass's NB),
 * more than rem only in the last pass. */
static int pass_width(int64_t rem) { return rem >= OB && rem != 32 ? OB : rem > 8 ? 16 : 8; }

/* nb output channels of output row yr (channel o's at yr + o * plane),
 * columns ow0..ow0+VW (fewer at the row's end); NB computed, w their
 * weights [C*KH*KW, NB] and bias both padded with zeros to NB. kofs[kw]:
 * where tap kw's 16 columns start in a phase-split row. */
INLINE void pass(const ConvGeom *c, const Band *t, const int64_t *kofs, const float *w, const float *bias,
                 int nb, const int NB, int64_t ow0, float *yr, int64_t plane)
{
    vf acc[NB];
    for (int o = 0; o < NB; o++)
        acc[o] = (vf){0} + bias[o];
    for (int64_t i = 0; i < t->ntaps; i++) {
        const float *row = t->row[i] + ow0, *wt = w + t->woff[i] * NB;
        for (int64_t kw = 0; kw < c->KW; kw++, wt += NB) {
            vf v = LOAD(row + kofs[kw]);
#pragma GCC unroll 24
            for (int o = 0; o < NB; o++)
                acc[o] += v * wt[o];
        }
    }
    int64_t n = c->OW - ow0 < VW ? c->OW - ow0 : VW;
#pragma GCC unroll 24
    for (int o = 0; o < NB; o++) { /* unrolled, as the accumulators' loop: acc[o] stays a register */
        float *dst = yr + o * plane + ow0;
        if (o >= nb)
            break;
        if (n == VW) {
            STORE(dst, acc[o]);
        } else {
            float lanes[VW];
            STORE(lanes, acc[o]);
            memcpy(dst, lanes, (size_t)n * sizeof(float));
        }
    }
}

CPU_CLONES void stem_conv(const ConvGeom *c, const float *x, const float *w, const float *bias, const Node *act,
                          float *y, float *ya)
{
    const int64_t *a = c->a, s = a[STRIDE_W], plane = c->OH * c->OW, K = c->C * c->KH * c->KW;
    const int64_t L = (c->OW + VW - 1) / VW * VW + (c->KW - 1) * a[DIL_W] / s;
    int64_t kofs[16], opad = 0;
    for (int64_t kw = 0; kw < c->KW; kw++)
        kofs[kw] = kw * a[DIL_W] % s * L + kw * a[DIL_W] / s;
    while (opad < c->O)
        opad += pass_width(c->O - opad);
    /* each pass's weights [K, NB] at o0 * K: a tap's NB contiguous, one
     * register addressing them all; channels past O zero */
    float *wp = cpu_floats(opad * (K + 1)), *bp = wp + opad * K;
    memset(wp, 0, sizeof *wp * (size_t)(opad * (K + 1)));
    for (int64_t o0 = 0, pw; o0 < c->O; o0 += pw) {
        pw = pass_width(c->O - o0);
        for (int64_t o = o0; o < c->O && o < o0 + pw; o++)
            for (int64_t k = 0; k < K; k++)
                wp[o0 * K + k * pw + o - o0] = w[o * K + k];
    }
    if (bias)
        memcpy(bp, bias, sizeof *bp * (size_t)c->O);
    const int64_t bands = (c->OH + BAND - 1) / BAND;
#pragma omp parallel for schedule(static) if (c->N * plane * c->O > CPU_PARALLEL_MIN)
    for (int64_t task = 0; task < c->N * bands; task++) {
        int64_t n = task / bands, oh0 = task % bands * BAND, oh1 = oh0 + BAND < c->OH ? oh0 + BAND : c->OH;
        int64_t lo = oh0 * a[STRIDE_H] - a[PAD_H], hi = (oh1 - 1) * a[STRIDE_H] - a[PAD_H] + (c->KH - 1) * a[DIL_H] + 1;
        lo = lo > 0 ? lo : 0;
        hi = hi < c->H ? hi : c->H;
        Band b = {.L = L, .ih0 = lo, .nrows = hi > lo ? hi - lo : 0};
        b.split = cpu_scratch(CPU_SCRATCH_COLS, c->C * b.nrows * s * L + 1);
        split_rows(c, x + n * c->C * c->H * c->W, &b);
        for (int64_t oh = oh0; oh < oh1; oh++) {
            row_taps(c, oh, &b);
            float *yr = y + n * c->O * plane + oh * c->OW;
            for (int64_t o0 = 0; o0 < c->O; o0 += pass_width(c->O - o0)) {
                int64_t rem = c->O - o0;
                int nb = rem < pass_width(rem) ? (int)rem : pass_width(rem);
                for (int64_t ow0 = 0; ow0 < c->OW; ow0 += VW) {
                    float *yo = yr + o0 * plane;
                    if (pass_width(rem) == OB)
                        pass(c, &b, kofs, wp + o0 * K, bp + o0, nb, OB, ow0, yo, plane);
                    else if (pass_width(rem) == 16)
                        pass(c, &b, kofs, wp + o0 * K, bp + o0, nb, 16, ow0, yo, plane);
                    else
                        pass(c, &b, kofs, wp + o0 * K, bp + o0, nb, 8, ow0, yo, plane);
                }
            }
        }
        for (int64_t o = 0; act && o < c->O; o++) {
            int64_t at = (n * c->O + o) * plane + oh0 * c->OW;
            cpu_act_span(act, y + at, ya + at, (oh1 - oh0) * c->OW);
        }
    }
    free(wp);
}
