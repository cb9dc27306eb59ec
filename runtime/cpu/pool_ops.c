/*
 * The cpu backend's pooling over x [N,C,H,W]: avg and max pooling with
 * PyTorch's windows and divisors (the ref kernels' rules), adaptive average
 * pooling, and their gradients, as f32 loops over each plane (planes split
 * among OpenMP threads: a gradient scatters only within its plane); the
 * global average pool of a channels-last x over its rows of channels.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops/pool_window.h"
#include "runtime/cpu/cpu.h"

/* Index in the plane of the window's maximum; NaN wins, as in PyTorch.
 * The running maximum in a register and selects, not branches: which
 * element wins is data, which a branch predictor cannot learn. */
static int64_t window_argmax(const float *xp, int64_t W, const Window *r)
{
    int64_t best = r->h0 * W + r->w0;
    float bv = xp[best];
    for (int64_t h = r->h0; h < r->h1; h++)
        for (int64_t w = r->w0; w < r->w1; w++) {
            float v = xp[h * W + w];
            int take = v > bv || v != v;
            best = take ? h * W + w : best;
            bv = take ? v : bv;
        }
    return best;
}

/* One tap of the windows of output columns [lo, hi): xr[ow * step], the
 * plane's element i0 + ow * step, into their running maximum. Inlined with a
 * constant step (the common strides 1 and 2), the loads are whole vectors
 * and shuffles instead of one lane at a time. */
static inline __attribute__((always_inline)) void max_taps(const float *xr, int32_t i0, int32_t step, int64_t lo,
                                                            int64_t hi, float *bv, int32_t *bi, int track)
{
    for (int64_t ow = lo; ow < hi; ow++) {
        float v = xr[ow * step];
        int take = v > bv[ow] || v != v;
        if (track)
            bi[ow] = take ? i0 + (int32_t)ow * step : bi[ow];
        bv[ow] = take ? v : bv[ow];
    }
}

/* max_taps with a constant step where it is 1 or 2; indices only where
 * `track` (the gradient's scatter needs them, the forward only the values). */
static inline __attribute__((always_inline)) void max_row(const float *xr, int32_t i0, int64_t sw, int64_t lo,
                                                           int64_t hi, float *bv, int32_t *bi, int track)
{
    if (sw == 2)
        max_taps(xr, i0, 2, lo, hi, bv, bi, track);
    else if (sw == 1)
        max_taps(xr, i0, 1, lo, hi, bv, bi, track);
    else
        max_taps(xr, i0, (int32_t)sw, lo, hi, bv, bi, track);
}

/* Max pooling of one plane x [H, W], a row of outputs at a time: the running
 * maximum of every output column whose window lies inside the row at once
 * (a loop over columns, which vectorises; per column, the loop-carried
 * compare of window_argmax is a chain of latencies), taps in the window's
 * row-major order so ties and NaN resolve as window_argmax does; the edge
 * columns through window_argmax. mode 1: y [OH, OW] = max; 3: dx [H, W] =
 * the sum of dy at each argmax, the plane zeroed here first, so that it is
 * still in cache for the scatter (a whole-tensor memset before the planes
 * wrote every byte of dx twice, from memory each time). bv, bi: room for OW values and indices (int32, as
 * wide as the values, so both fill the same vector lanes; a plane's index
 * fits). */
CPU_CLONES static void max_pool_plane(const int64_t *a, int64_t H, int64_t W, int64_t OH, int64_t OW, const float *x,
                                      const float *dy, float *out, int mode, float *bv, int32_t *bi)
{
    int64_t sw = a[POOL_SW], pw = a[POOL_PW], kw_n = a[POOL_KW];
    int64_t lo = (pw + sw - 1) / sw, hi = W >= kw_n - pw ? (W - kw_n + pw) / sw + 1 : 0;
    hi = hi < OW ? hi : OW;
    lo = lo < hi ? lo : hi;
    if (mode == 3)
        memset(out, 0, sizeof *out * (size_t)(H * W));
    for (int64_t oh = 0; oh < OH; oh++) {
        Window rows = pool_window(a, oh, 0, H, W);
        for (int64_t ow = 0; ow < OW; ow++) {
            Window r = pool_window(a, oh, ow, H, W);
            if (ow >= lo && ow < hi) {
                bi[ow] = (int32_t)(r.h0 * W + r.w0);
                bv[ow] = x[bi[ow]];
            } else {
                bi[ow] = (int32_t)window_argmax(x, W, &r);
                bv[ow] = x[bi[ow]];
            }
        }
        for (int64_t h = rows.h0; h < rows.h1; h++)
            for (int64_t kw = 0; kw < kw_n; kw++) {
                int32_t i0 = (int32_t)(h * W + kw - pw);
                if (mode == 1)
                    max_row(x + i0, i0, sw, lo, hi, bv, bi, 0);
                else
                    max_row(x + i0, i0, sw, lo, hi, bv, bi, 1);
            }
        if (mode == 1)
            memcpy(out + oh * OW, bv, sizeof *bv * (size_t)OW);
        else
            for (int64_t ow = 0; ow < OW; ow++)
                out[bi[ow]] += dy[oh * OW + ow];
    }
}

/* mode 0 avg, 1 max forward; 2 avg grad (dy = src), 3 max grad (x = src, dy). */
CPU_CLONES static void pool(const int64_t *a, const CtShape *x, const CtShape *y, const float *src, const float *dy,
                            float *dst, int mode)
{
    int64_t H = x->d[2], W = x->d[3], OH = y->d[2], OW = y->d[3], planes = x->d[0] * x->d[1];
    if (mode == 1 || mode == 3) {
#pragma omp parallel if (planes * H * W > CPU_PARALLEL_MIN)
        {
            float *bv = cpu_floats(OW);
            int32_t *bi = malloc(sizeof *bi * (size_t)OW);
            CT_ASSERT(bi != NULL);
#pragma omp for
            for (int64_t p = 0; p < planes; p++)
                max_pool_plane(a, H, W, OH, OW, src + p * H * W, mode == 3 ? dy + p * OH * OW : NULL,
                               dst + (mode == 1 ? p * OH * OW : p * H * W), mode, bv, bi);
            free(bv);
            free(bi);
        }
        return;
    }
#pragma omp parallel for if (planes * H * W > CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < planes; p++) {
        if (mode == 2) /* the plane zeroed just before its scatter, as max_pool_plane's */
            memset(dst + p * H * W, 0, sizeof *dst * (size_t)(H * W));
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                Window r = pool_window(a, oh, ow, H, W);
                int64_t yi = (p * OH + oh) * OW + ow;
                if (mode == 0) {
                    double acc = 0;
                    for (int64_t h = r.h0; h < r.h1; h++)
                        for (int64_t w = r.w0; w < r.w1; w++)
                            acc += src[p * H * W + h * W + w];
                    dst[yi] = (float)(acc * (float)(1 / r.divisor));
                } else {
                    float share = src[yi] * (float)(1 / r.divisor);
                    for (int64_t h = r.h0; h < r.h1; h++)
                        for (int64_t w = r.w0; w < r.w1; w++)
                            dst[p * H * W + h * W + w] += share;
                }
            }
    }
}

void cpu_avg_pool2d(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    pool(n->iattr, cpu_in_shape(g, n, 0), cpu_out_shape(g, n, 0), in[0], NULL, out[0], 0);
}

void cpu_max_pool2d(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    pool(n->iattr, cpu_in_shape(g, n, 0), cpu_out_shape(g, n, 0), in[0], NULL, out[0], 1);
}

void cpu_avg_pool2d_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    pool(n->iattr, cpu_out_shape(g, n, 0), cpu_in_shape(g, n, 0), in[0], NULL, out[0], 2);
}

void cpu_max_pool2d_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    pool(n->iattr, cpu_in_shape(g, n, 0), cpu_in_shape(g, n, 1), in[0], in[1], out[0], 3);
}

/* Adaptive windows: [floor(i*H/OH), ceil((i+1)*H/OH)); grad spreads dy back. */
CPU_CLONES static void adaptive(const CtShape *x, int64_t OH, int64_t OW, const float *src, float *dst, int grad)
{
    int64_t H = x->d[2], W = x->d[3], planes = x->d[0] * x->d[1];
    if (grad)
        memset(dst, 0, (size_t)(planes * H * W) * sizeof *dst);
#pragma omp parallel for if (planes * H * W > CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
                int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
                double cnt = (double)((h1 - h0) * (w1 - w0)), acc = 0;
                int64_t yi = (p * OH + oh) * OW + ow;
                float share = grad ? (float)(src[yi] / cnt) : 0.0f;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        if (grad)
                            dst[(p * H + h) * W + w] += share;
                        else
                            acc += src[(p * H + h) * W + w];
                    }
                if (!grad)
                    dst[yi] = (float)(acc / cnt);
            }
}

/* The global average pool (one output per channel) of channels-last x
 * [N, S = H*W, C], or its gradient: each image's S rows as C-vectors, the
 * sums in double as the planes' above. */
CPU_CLONES static void global_nhwc(const CtShape *x, const float *src, float *dst, int grad)
{
    int64_t N = x->d[0], C = x->d[1], S = x->d[2] * x->d[3];
#pragma omp parallel for if (N * C * S > CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < N; b++) {
        if (grad) { /* the first row holds the shares, the others copy it */
            float *row = dst + b * S * C;
            for (int64_t c = 0; c < C; c++)
                row[c] = (float)(src[b * C + c] / (double)S);
            for (int64_t s = 1; s < S; s++)
                memcpy(row + s * C, row, (size_t)C * sizeof *dst);
            continue;
        }
        double *acc = calloc((size_t)C, sizeof *acc);
        CT_ASSERT(acc != NULL);
        for (int64_t s = 0; s < S; s++) {
            const float *xr = src + (b * S + s) * C;
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                acc[c] += xr[c];
        }
        for (int64_t c = 0; c < C; c++)
            dst[b * C + c] = (float)(acc[c] / (double)S);
        free(acc);
    }
}

int cpu_adaptive_pool_nhwc(const Graph *g, const Node *n)
{
    ValueId x = n->op == CT_OP_adaptive_avg_pool2d ? n->in[0] : n->out[0];
    return (n->op == CT_OP_adaptive_avg_pool2d || n->op == CT_OP_adaptive_avg_pool2d_grad) && n->iattr[0] == 1 &&
           n->iattr[1] == 1 && cpu_stored_nhwc(g, x);
}

void cpu_adaptive_avg_pool2d(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    if (cpu_adaptive_pool_nhwc(g, n))
        global_nhwc(cpu_in_shape(g, n, 0), in[0], out[0], 0);
    else
        adaptive(cpu_in_shape(g, n, 0), n->iattr[0], n->iattr[1], in[0], out[0], 0);
}

void cpu_adaptive_avg_pool2d_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    if (cpu_adaptive_pool_nhwc(g, n))
        global_nhwc(cpu_out_shape(g, n, 0), in[0], out[0], 1);
    else
        adaptive(cpu_out_shape(g, n, 0), n->iattr[0], n->iattr[1], in[0], out[0], 1);
}
