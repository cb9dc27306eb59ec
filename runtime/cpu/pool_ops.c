/*
 * The cpu backend's pooling over x [N,C,H,W]: avg and max pooling with
 * PyTorch's windows and divisors (the ref kernels' rules), adaptive average
 * pooling, and their gradients, as f32 loops over each plane.
 */
#include <math.h>
#include <string.h>

#include "ir/ops/pool_window.h"
#include "runtime/cpu/cpu.h"

/* Index in the plane of the window's maximum; NaN wins, as in PyTorch. */
static int64_t window_argmax(const float *xp, int64_t W, const Window *r)
{
    int64_t best = r->h0 * W + r->w0;
    for (int64_t h = r->h0; h < r->h1; h++)
        for (int64_t w = r->w0; w < r->w1; w++)
            if (xp[h * W + w] > xp[best] || isnan(xp[h * W + w]))
                best = h * W + w;
    return best;
}

/* mode 0 avg, 1 max forward; 2 avg grad (dy = src), 3 max grad (x = src, dy). */
static void pool(const int64_t *a, const CtShape *x, const CtShape *y, const float *src, const float *dy, float *dst,
                 int mode)
{
    int64_t H = x->d[2], W = x->d[3], OH = y->d[2], OW = y->d[3], planes = x->d[0] * x->d[1];
    if (mode >= 2)
        memset(dst, 0, (size_t)(planes * H * W) * sizeof *dst);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                Window r = pool_window(a, oh, ow, H, W);
                float inv_divisor = (float)(1 / r.divisor);
                int64_t yi = (p * OH + oh) * OW + ow;
                if (mode == 1) {
                    dst[yi] = src[p * H * W + window_argmax(src + p * H * W, W, &r)];
                } else if (mode == 3) {
                    dst[p * H * W + window_argmax(src + p * H * W, W, &r)] += dy[yi];
                } else if (mode == 0) {
                    double acc = 0;
                    for (int64_t h = r.h0; h < r.h1; h++)
                        for (int64_t w = r.w0; w < r.w1; w++)
                            acc += src[p * H * W + h * W + w];
                    dst[yi] = (float)(acc * inv_divisor);
                } else {
                    float share = src[yi] * inv_divisor;
                    for (int64_t h = r.h0; h < r.h1; h++)
                        for (int64_t w = r.w0; w < r.w1; w++)
                            dst[p * H * W + h * W + w] += share;
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
static void adaptive(const CtShape *x, int64_t OH, int64_t OW, const float *src, float *dst, int grad)
{
    int64_t H = x->d[2], W = x->d[3], planes = x->d[0] * x->d[1];
    if (grad)
        memset(dst, 0, (size_t)(planes * H * W) * sizeof *dst);
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

void cpu_adaptive_avg_pool2d(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    adaptive(cpu_in_shape(g, n, 0), n->iattr[0], n->iattr[1], in[0], out[0], 0);
}

void cpu_adaptive_avg_pool2d_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    adaptive(cpu_out_shape(g, n, 0), n->iattr[0], n->iattr[1], in[0], out[0], 1);
}
