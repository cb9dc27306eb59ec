/*
 * 2-D pooling over x [N,C,H,W], with PyTorch's output-size rule (floor, or
 * ceil_mode where the last window must start inside the input or its left
 * padding) and PyTorch's divisors for average pooling.
 */
#include <math.h>

#include "ops_impl.h"

enum { KH, KW, SH, SW, PH, PW, CEIL, COUNT_PAD };

static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int ceil_mode)
{
    int64_t num = in + 2 * p - k;
    int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
    if (ceil_mode && (o - 1) * s >= in + p)
        o--;
    return o;
}

static int infer_pool(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err))
        return -1;
    const int64_t *a = n->iattr;
    const CtShape *x = in_shape(g, n, 0);
    if (a[KH] < 1 || a[KW] < 1 || a[SH] < 1 || a[SW] < 1 || a[PH] < 0 || a[PW] < 0)
        return ct_fail(err, "kernel and stride must be >= 1, padding >= 0");
    if (2 * a[PH] > a[KH] || 2 * a[PW] > a[KW])
        return ct_fail(err, "padding must be at most half the kernel size");
    int64_t oh = pool_out(x->d[2], a[KH], a[SH], a[PH], (int)a[CEIL]);
    int64_t ow = pool_out(x->d[3], a[KW], a[SW], a[PW], (int)a[CEIL]);
    if (oh < 1 || ow < 1)
        return ct_fail(err, "window larger than the padded input");
    out[0].dtype = in_type(g, n, 0)->dtype;
    out[0].shape = (CtShape){4, {x->d[0], x->d[1], oh, ow}};
    return 1;
}

static void pool_ref(const Graph *g, const Node *n, double *const *in, double *const *out, int is_max)
{
    const CtShape *x = in_shape(g, n, 0), *y = out_shape(g, n, 0);
    const int64_t *a = n->iattr;
    int64_t H = x->d[2], W = x->d[3], OH = y->d[2], OW = y->d[3];
    for (int64_t p = 0; p < x->d[0] * x->d[1]; p++) {
        const double *xp = in[0] + p * H * W;
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0 = oh * a[SH] - a[PH], w0 = ow * a[SW] - a[PW];
                int64_t h1 = h0 + a[KH] < H + a[PH] ? h0 + a[KH] : H + a[PH];
                int64_t w1 = w0 + a[KW] < W + a[PW] ? w0 + a[KW] : W + a[PW];
                double padded_count = (double)((h1 - h0) * (w1 - w0));
                h0 = h0 < 0 ? 0 : h0;
                w0 = w0 < 0 ? 0 : w0;
                h1 = h1 > H ? H : h1;
                w1 = w1 > W ? W : w1;
                double acc = is_max ? -INFINITY : 0;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++)
                        acc = is_max ? (xp[h * W + w] > acc || isnan(xp[h * W + w]) ? xp[h * W + w] : acc)
                                     : acc + xp[h * W + w];
                if (!is_max)
                    acc /= a[COUNT_PAD] ? padded_count : (double)((h1 - h0) * (w1 - w0));
                out[0][(p * OH + oh) * OW + ow] = acc;
            }
    }
}

static void avg_pool2d_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    pool_ref(g, n, in, out, 0);
}
static void max_pool2d_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    pool_ref(g, n, in, out, 1);
}

const OpDef op_avg_pool2d = {
    .name = "avg_pool2d",
    .min_in = 1,
    .max_in = 1,
    .iattr = {"kh", "kw", "sh", "sw", "ph", "pw", "ceil_mode", "count_include_pad"},
    .infer = infer_pool,
    .ref = avg_pool2d_ref,
};
const OpDef op_max_pool2d = {
    .name = "max_pool2d",
    .min_in = 1,
    .max_in = 1,
    .iattr = {"kh", "kw", "sh", "sw", "ph", "pw", "ceil_mode"},
    .infer = infer_pool,
    .ref = max_pool2d_ref,
};

/* adaptive_avg_pool2d: output [N,C,OH,OW]; window i spans
 * [floor(i*H/OH), ceil((i+1)*H/OH)), as nn.AdaptiveAvgPool2d. */
static int infer_adaptive(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err))
        return -1;
    if (n->iattr[0] < 1 || n->iattr[1] < 1)
        return ct_fail(err, "output size must be >= 1");
    const CtShape *x = in_shape(g, n, 0);
    out[0].dtype = in_type(g, n, 0)->dtype;
    out[0].shape = (CtShape){4, {x->d[0], x->d[1], n->iattr[0], n->iattr[1]}};
    return 1;
}

static void adaptive_avg_pool2d_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t H = x->d[2], W = x->d[3], OH = n->iattr[0], OW = n->iattr[1];
    for (int64_t p = 0; p < x->d[0] * x->d[1]; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
                int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
                double acc = 0;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++)
                        acc += in[0][(p * H + h) * W + w];
                out[0][(p * OH + oh) * OW + ow] = acc / (double)((h1 - h0) * (w1 - w0));
            }
}

const OpDef op_adaptive_avg_pool2d = {
    .name = "adaptive_avg_pool2d",
    .min_in = 1,
    .max_in = 1,
    .iattr = {"oh", "ow"},
    .infer = infer_adaptive,
    .ref = adaptive_avg_pool2d_ref,
};
