/*
 * The window of one output position of 2-D pooling, PyTorch's rule: the
 * attribute layout of avg_pool2d/max_pool2d (and their gradients), the
 * clamped bounds and the divisor (count_include_pad counts the padding up to
 * the padded edge). Shared by the ref kernels and the cpu backend, so the
 * rule lives in one place.
 */
#ifndef CTIMM_POOL_WINDOW_H
#define CTIMM_POOL_WINDOW_H

#include <stdint.h>

enum { POOL_KH, POOL_KW, POOL_SH, POOL_SW, POOL_PH, POOL_PW, POOL_CEIL, POOL_COUNT_PAD, POOL_IN_H, POOL_IN_W };

typedef struct Window {
    int64_t h0, h1, w0, w1;
    double divisor;
} Window;

static inline Window pool_window(const int64_t *a, int64_t oh, int64_t ow, int64_t H, int64_t W)
{
    Window r;
    int64_t h0 = oh * a[POOL_SH] - a[POOL_PH], w0 = ow * a[POOL_SW] - a[POOL_PW];
    int64_t h1 = h0 + a[POOL_KH] < H + a[POOL_PH] ? h0 + a[POOL_KH] : H + a[POOL_PH];
    int64_t w1 = w0 + a[POOL_KW] < W + a[POOL_PW] ? w0 + a[POOL_KW] : W + a[POOL_PW];
    double padded_count = (double)((h1 - h0) * (w1 - w0));
    r.h0 = h0 < 0 ? 0 : h0;
    r.w0 = w0 < 0 ? 0 : w0;
    r.h1 = h1 > H ? H : h1;
    r.w1 = w1 > W ? W : w1;
    r.divisor = a[POOL_COUNT_PAD] ? padded_count : (double)((r.h1 - r.h0) * (r.w1 - r.w0));
    return r;
}

#endif
