/*
 * 2-D pooling over x [N,C,H,W], with PyTorch's output-size rule (floor, or
 * ceil_mode where the last window must start inside the input or its left
 * padding) and PyTorch's divisors for average pooling. The gradient ops take
 * the forward's attributes plus the input size (in_h, in_w) where the
 * forward input is not among their inputs.
 */
#include <math.h>
#include <string.h>

#include "ops_impl.h"
#include "pool_window.h"

enum { IN_H = POOL_IN_H, IN_W = POOL_IN_W };

static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int ceil_mode)
{
    int64_t num = in + 2 * p - k;
    int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
    if (ceil_mode && (o - 1) * s >= in + p)
        o--;
    return o;
}

/* The output shape of pooling x by attributes a. */
static int pool_rule(const int64_t *a, const CtShape *x, CtShape *y, CtErr *err)
{
    if (a[POOL_KH] < 1 || a[POOL_KW] < 1 || a[POOL_SH] < 1 || a[POOL_SW] < 1 || a[POOL_PH] < 0 || a[POOL_PW] < 0)
        return ct_fail(err, "kernel and stride must be >= 1, padding >= 0");
    if (2 * a[POOL_PH] > a[POOL_KH] || 2 * a[POOL_PW] > a[POOL_KW])
        return ct_fail(err, "padding must be at most half the kernel size");
    int64_t oh = pool_out(x->d[2], a[POOL_KH], a[POOL_SH], a[POOL_PH], (int)a[POOL_CEIL]);
    int64_t ow = pool_out(x->d[3], a[POOL_KW], a[POOL_SW], a[POOL_PW], (int)a[POOL_CEIL]);
    if (x->d[2] + 2 * a[POOL_PH] < a[POOL_KH] || x->d[3] + 2 * a[POOL_PW] < a[POOL_KW] || oh < 1 || ow < 1)
        return ct_fail(err, "window larger than the padded input");
    *y = (CtShape){4, {x->d[0], x->d[1], oh, ow}};
    return 0;
}

static int infer_pool(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err))
        return -1;
    out[0].dtype = in_type(g, n, 0)->dtype;
    return pool_rule(n->iattr, in_shape(g, n, 0), &out[0].shape, err) ? -1 : 1;
}

/* Index (within the plane) of the window's maximum; NaN wins, as in PyTorch. */
static int64_t window_argmax(const double *xp, int64_t W, const Window *r)
{
    int64_t best = r->h0 * W + r->w0;
    for (int64_t h = r->h0; h < r->h1; h++)
        for (int64_t w = r->w0; w < r->w1; w++)
            if (xp[h * W + w] > xp[best] || isnan(xp[h * W + w]))
                best = h * W + w;
    return best;
}

/* Forward (mode 0 avg, 1 max) or gradient (2 avg, 3 max: x is in[0] and
 * dy in[1] for max, dy in[0] for avg). */
static void pool_apply(const int64_t *a, const CtShape *x, const CtShape *y, double *const *in, double *out, int mode)
{
    int64_t H = x->d[2], W = x->d[3], OH = y->d[2], OW = y->d[3];
    if (mode >= 2)
        for (int64_t i = 0; i < shape_numel(x); i++)
            out[i] = 0;
    for (int64_t p = 0; p < x->d[0] * x->d[1]; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                Window r = pool_window(a, oh, ow, H, W);
                int64_t yi = (p * OH + oh) * OW + ow;
                if (mode == 1) {
                    out[yi] = in[0][p * H * W + window_argmax(in[0] + p * H * W, W, &r)];
                } else if (mode == 3) {
                    out[p * H * W + window_argmax(in[0] + p * H * W, W, &r)] += in[1][yi];
                } else {
                    double acc = 0;
                    for (int64_t h = r.h0; h < r.h1; h++)
                        for (int64_t w = r.w0; w < r.w1; w++) {
                            if (mode == 0)
                                acc += in[0][p * H * W + h * W + w];
                            else
                                out[p * H * W + h * W + w] += in[0][yi] / r.divisor;
                        }
                    if (mode == 0)
                        out[yi] = acc / r.divisor;
                }
            }
}

static void avg_pool2d_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    pool_apply(n->iattr, in_shape(g, n, 0), out_shape(g, n, 0), in, out[0], 0);
}
static void max_pool2d_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    pool_apply(n->iattr, in_shape(g, n, 0), out_shape(g, n, 0), in, out[0], 1);
}

static void avg_pool2d_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int64_t a[10];
    for (int i = 0; i < 8; i++)
        a[i] = n->iattr[i];
    a[IN_H] = emit_shape(e, n->in[0]).d[2];
    a[IN_W] = emit_shape(e, n->in[0]).d[3];
    din[0] = emit(e, CT_OP_avg_pool2d_grad, 1, dout, a, 10, NULL, 0, 0);
}

static void max_pool2d_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    din[0] = emit(e, CT_OP_max_pool2d_grad, 2, (ValueId[]){n->in[0], dout[0]}, n->iattr, 7, NULL, 0, 0);
}

const OpDef op_avg_pool2d = {
    .name = "avg_pool2d",
    .min_in = 1,
    .max_in = 1,
    .iattr = {"kh", "kw", "sh", "sw", "ph", "pw", "ceil_mode", "count_include_pad"},
    .infer = infer_pool,
    .ref = avg_pool2d_ref,
    .vjp = avg_pool2d_vjp,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_EITHER,
    .cost = op_cost_none,
};
const OpDef op_max_pool2d = {
    .name = "max_pool2d",
    .min_in = 1,
    .max_in = 1,
    .iattr = {"kh", "kw", "sh", "sw", "ph", "pw", "ceil_mode"},
    .infer = infer_pool,
    .ref = max_pool2d_ref,
    .vjp = max_pool2d_vjp,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_EITHER,
    .cost = op_cost_none,
};

/* dx [N,C,in_h,in_w] from dy; checked by the forward rule on that input. */
static int infer_avg_pool2d_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err))
        return -1;
    const CtShape *dy = in_shape(g, n, 0);
    CtShape x = {4, {dy->d[0], dy->d[1], n->iattr[IN_H], n->iattr[IN_W]}};
    CtType y;
    if (pool_rule(n->iattr, &x, &y.shape, err) || require_shape(g, n, 0, &y.shape, err))
        return -1;
    out[0] = (CtType){x, in_type(g, n, 0)->dtype};
    return 1;
}

static void avg_pool2d_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    pool_apply(n->iattr, out_shape(g, n, 0), in_shape(g, n, 0), in, out[0], 2);
}

const OpDef op_avg_pool2d_grad = {
    .name = "avg_pool2d_grad",
    .min_in = 1,
    .max_in = 1,
    .iattr = {"kh", "kw", "sh", "sw", "ph", "pw", "ceil_mode", "count_include_pad", "in_h", "in_w"},
    .infer = infer_avg_pool2d_grad,
    .ref = avg_pool2d_grad_ref,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_EITHER,
};

/* max_pool2d_grad(x, dy): dy routed to each window's argmax. */
static int infer_max_pool2d_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    CtType y;
    if (infer_pool(g, n, &y, err) < 0 || require_shape(g, n, 1, &y.shape, err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static void max_pool2d_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    pool_apply(n->iattr, in_shape(g, n, 0), in_shape(g, n, 1), in, out[0], 3);
}

const OpDef op_max_pool2d_grad = {
    .name = "max_pool2d_grad",
    .min_in = 2,
    .max_in = 2,
    .iattr = {"kh", "kw", "sh", "sw", "ph", "pw", "ceil_mode"},
    .infer = infer_max_pool2d_grad,
    .ref = max_pool2d_grad_ref,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_EITHER,
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

static void adaptive_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    CtShape x = emit_shape(e, n->in[0]);
    int64_t a[4] = {n->iattr[0], n->iattr[1], x.d[2], x.d[3]};
    if (a[0] == 1 && a[1] == 1) /* a global pool's: a broadcast, fused into what reads it */
        din[0] = emit(e, CT_OP_global_avg_pool2d_grad, 1, dout, &a[2], 2, NULL, 0, 0);
    else
        din[0] = emit(e, CT_OP_adaptive_avg_pool2d_grad, 1, dout, a, 4, NULL, 0, 0);
}

/* fvcore's aten::adaptive_avg_pool2d: numel(x) when it is timm's
 * SelectAdaptivePool2d (nn.AdaptiveAvgPool2d); nothing for the squeeze of a
 * SqueezeExcite module (scope "....se", NormFreeBlock's "....attn_last", or
 * ByobNet's blocks' "....attn" / "....attn_last"), which timm writes as
 * x.mean((2, 3), keepdim=True), an op fvcore does not count. */
static OpCost adaptive_avg_pool2d_cost(const Graph *g, const Node *n, unsigned flags)
{
    const char *dot = n->scope ? strrchr(n->scope, '.') : NULL, *leaf = dot ? dot + 1 : n->scope;
    int se = n->scope && (!strcmp(leaf, "se") || !strcmp(leaf, "attn") || !strcmp(leaf, "attn_last"));
    return (OpCost){se ? 0 : shape_numel(in_shape(g, n, 0)), 0};
}

const OpDef op_adaptive_avg_pool2d = {
    .name = "adaptive_avg_pool2d",
    .min_in = 1,
    .max_in = 1,
    .iattr = {"oh", "ow"},
    .infer = infer_adaptive,
    .ref = adaptive_avg_pool2d_ref,
    .vjp = adaptive_vjp,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_EITHER,
    .cost = adaptive_avg_pool2d_cost,
};

static int infer_adaptive_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err))
        return -1;
    const CtShape *dy = in_shape(g, n, 0);
    if (dy->d[2] != n->iattr[0] || dy->d[3] != n->iattr[1] || n->iattr[2] < 1 || n->iattr[3] < 1)
        return ct_fail(err, "dy must be [N,C,oh,ow] and the input size positive");
    out[0] = (CtType){{4, {dy->d[0], dy->d[1], n->iattr[2], n->iattr[3]}}, in_type(g, n, 0)->dtype};
    return 1;
}

static void adaptive_avg_pool2d_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = out_shape(g, n, 0);
    int64_t H = x->d[2], W = x->d[3], OH = n->iattr[0], OW = n->iattr[1];
    for (int64_t i = 0; i < shape_numel(x); i++)
        out[0][i] = 0;
    for (int64_t p = 0; p < x->d[0] * x->d[1]; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
                int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
                double share = in[0][(p * OH + oh) * OW + ow] / (double)((h1 - h0) * (w1 - w0));
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++)
                        out[0][(p * H + h) * W + w] += share;
            }
}

const OpDef op_adaptive_avg_pool2d_grad = {
    .name = "adaptive_avg_pool2d_grad",
    .min_in = 1,
    .max_in = 1,
    .iattr = {"oh", "ow", "in_h", "in_w"},
    .infer = infer_adaptive_grad,
    .ref = adaptive_avg_pool2d_grad_ref,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_EITHER,
};

/* The gradient of adaptive_avg_pool2d to 1x1 (timm's global pools, the
 * squeeze of squeeze-excitation): dy [N,C,1,1] broadcast over
 * [N,C,in_h,in_w], each element dy / (in_h in_w) as the general gradient
 * gives it. Elementwise, so that the add of the excitation's gradient
 * reads dy where it would read a tensor of the input's size. */
static int infer_global_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err))
        return -1;
    const CtShape *dy = in_shape(g, n, 0);
    if (dy->d[2] != 1 || dy->d[3] != 1 || n->iattr[0] < 1 || n->iattr[1] < 1)
        return ct_fail(err, "dy must be [N,C,1,1] and the input size positive");
    out[0] = (CtType){{4, {dy->d[0], dy->d[1], n->iattr[0], n->iattr[1]}}, in_type(g, n, 0)->dtype};
    return 1;
}

static void global_grad_scalar(const Node *n, Sx *s)
{
    s->out[0] = sx_div(s, sx_in(s, 0), sx_const(s, (double)(n->iattr[0] * n->iattr[1])));
}

const OpDef op_global_avg_pool2d_grad = {
    .name = "global_avg_pool2d_grad",
    .min_in = 1,
    .max_in = 1,
    .iattr = {"in_h", "in_w"},
    .infer = infer_global_grad,
    .ref = sx_ref,
    .fusion = OP_ELEMENTWISE,
    .scalar = global_grad_scalar,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_EITHER,
};
