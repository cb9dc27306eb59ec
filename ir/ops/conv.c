/*
 * conv2d: x [N,C,H,W], weight [O,C/groups,KH,KW], optional bias [O] ->
 * [N,O,OH,OW], as torch.nn.functional.conv2d with zero padding; and its two
 * gradients: conv2d_grad_input(dy, weight) -> dx (iattr in_h, in_w after the
 * conv's own) and conv2d_grad_weight(x, dy) -> dweight (iattr kh, kw).
 */
#include "ops_impl.h"

enum { STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, GROUPS, EXTRA_H, EXTRA_W };

/* The forward rule, on x and weight shapes given explicitly so the gradient
 * ops can check themselves against it. */
static int conv_rule(const Graph *g, const Node *n, const CtShape *x, const CtShape *w, CtType *out, CtErr *err)
{
    const int64_t *a = n->iattr;
    if (a[STRIDE_H] < 1 || a[STRIDE_W] < 1 || a[DIL_H] < 1 || a[DIL_W] < 1 || a[PAD_H] < 0 || a[PAD_W] < 0 ||
        a[GROUPS] < 1)
        return ct_fail(err, "stride and dilation must be >= 1, padding >= 0, groups >= 1");
    if (x->d[1] % a[GROUPS] || w->d[0] % a[GROUPS])
        return ct_fail(err, "groups=%lld must divide in channels %lld and out channels %lld",
                       (long long)a[GROUPS], (long long)x->d[1], (long long)w->d[0]);
    if (w->d[1] != x->d[1] / a[GROUPS])
        return ct_fail(err, "weight has %lld input channels per group, input gives %lld", (long long)w->d[1],
                       (long long)(x->d[1] / a[GROUPS]));
    int64_t span_h = x->d[2] + 2 * a[PAD_H] - a[DIL_H] * (w->d[2] - 1) - 1;
    int64_t span_w = x->d[3] + 2 * a[PAD_W] - a[DIL_W] * (w->d[3] - 1) - 1;
    int64_t oh = span_h / a[STRIDE_H] + 1, ow = span_w / a[STRIDE_W] + 1;
    if (span_h < 0 || span_w < 0)
        return ct_fail(err, "kernel %lldx%lld is larger than the padded input %lldx%lld", (long long)w->d[2],
                       (long long)w->d[3], (long long)x->d[2], (long long)x->d[3]);
    out[0].dtype = in_type(g, n, 0)->dtype;
    out[0].shape = (CtShape){4, {x->d[0], w->d[0], oh, ow}};
    return 1;
}

static int infer_conv2d(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err) || require_float(g, n, 1, 4, err))
        return -1;
    if (n->nin == 3 && require_shape(g, n, 2, &(CtShape){1, {in_shape(g, n, 1)->d[0]}}, err))
        return -1;
    return conv_rule(g, n, in_shape(g, n, 0), in_shape(g, n, 1), out, err);
}

/* Each (output position, kernel tap) pair, with the input and weight offsets
 * it multiplies: the loop nest the forward and both gradients share. */
#define CONV_FOREACH(x, w, y, a, body)                                                                      \
    for (int64_t b = 0; b < (x)->d[0]; b++)                                                                 \
        for (int64_t o = 0; o < (w)->d[0]; o++) {                                                          \
            int64_t CG = (w)->d[1], g0 = (o / ((w)->d[0] / (a)[GROUPS])) * CG;                             \
            for (int64_t oh = 0; oh < (y)->d[2]; oh++)                                                      \
                for (int64_t ow = 0; ow < (y)->d[3]; ow++) {                                                \
                    int64_t yi = ((b * (w)->d[0] + o) * (y)->d[2] + oh) * (y)->d[3] + ow;                   \
                    for (int64_t c = 0; c < CG; c++)                                                        \
                        for (int64_t kh = 0; kh < (w)->d[2]; kh++) {                                        \
                            int64_t ih = oh * (a)[STRIDE_H] - (a)[PAD_H] + kh * (a)[DIL_H];                 \
                            if (ih < 0 || ih >= (x)->d[2])                                                  \
                                continue;                                                                   \
                            for (int64_t kw = 0; kw < (w)->d[3]; kw++) {                                    \
                                int64_t iw = ow * (a)[STRIDE_W] - (a)[PAD_W] + kw * (a)[DIL_W];             \
                                if (iw < 0 || iw >= (x)->d[3])                                              \
                                    continue;                                                               \
                                int64_t xi = ((b * (x)->d[1] + g0 + c) * (x)->d[2] + ih) * (x)->d[3] + iw;  \
                                int64_t wi = ((o * CG + c) * (w)->d[2] + kh) * (w)->d[3] + kw;              \
                                body;                                                                       \
                            }                                                                               \
                        }                                                                                   \
                }                                                                                           \
        }

static void conv2d_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0), *w = in_shape(g, n, 1), *y = out_shape(g, n, 0);
    int64_t count = shape_numel(y), plane = y->d[2] * y->d[3];
    for (int64_t i = 0; i < count; i++)
        out[0][i] = n->nin == 3 ? in[2][(i / plane) % y->d[1]] : 0;
    CONV_FOREACH(x, w, y, n->iattr, out[0][yi] += in[0][xi] * in[1][wi])
}

static void conv2d_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    CtShape x = emit_shape(e, n->in[0]), w = emit_shape(e, n->in[1]);
    int64_t a[9];
    for (int i = 0; i < 7; i++)
        a[i] = n->iattr[i];
    if (need[0]) {
        a[EXTRA_H] = x.d[2];
        a[EXTRA_W] = x.d[3];
        din[0] = emit(e, CT_OP_conv2d_grad_input, 2, (ValueId[]){dout[0], n->in[1]}, a, 9, NULL, 0, 0);
    }
    if (need[1]) {
        a[EXTRA_H] = w.d[2];
        a[EXTRA_W] = w.d[3];
        din[1] = emit(e, CT_OP_conv2d_grad_weight, 2, (ValueId[]){n->in[0], dout[0]}, a, 9, NULL, 0, 0);
    }
    if (n->nin == 3 && need[2])
        din[2] = emit(e, CT_OP_reduce_sum, 1, dout, (int64_t[]){0xd, 0}, 2, NULL, 0, 0);
}

/* fvcore's aten::_convolution: N * O * C/groups * KH * KW * OH * OW MACs,
 * the output's elements as activations. */
static OpCost conv2d_cost(const Graph *g, const Node *n, unsigned flags)
{
    const CtShape *y = out_shape(g, n, 0);
    return (OpCost){in_shape(g, n, 0)->d[0] * shape_numel(in_shape(g, n, 1)) * y->d[2] * y->d[3], shape_numel(y)};
}

const OpDef op_conv2d = {
    .name = "conv2d",
    .min_in = 2,
    .max_in = 3,
    .iattr = {"stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "groups"},
    .infer = infer_conv2d,
    .ref = conv2d_ref,
    .vjp = conv2d_vjp,
    .fusion = OP_CONTRACTION,
    .amp = OP_AMP_LOW,
    .layout = OP_LAYOUT_NHWC,
    .layout_keep = 1u << 1, /* the weight keeps timm's layout */
    .cost = conv2d_cost,
};

#define CONV_ATTRS "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "groups"

/* dx [N, CG*groups, in_h, in_w] from dy and the weight; checked by running
 * the forward rule on the input shape it produces. */
static int infer_conv2d_grad_input(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err) || require_float(g, n, 1, 4, err))
        return -1;
    const CtShape *dy = in_shape(g, n, 0), *w = in_shape(g, n, 1);
    CtShape x = {4, {dy->d[0], w->d[1] * n->iattr[GROUPS], n->iattr[EXTRA_H], n->iattr[EXTRA_W]}};
    CtType y;
    if (conv_rule(g, n, &x, w, &y, err) < 0)
        return -1;
    if (require_shape(g, n, 0, &y.shape, err))
        return -1;
    out[0] = (CtType){x, in_type(g, n, 0)->dtype};
    return 1;
}

static void conv2d_grad_input_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *y = in_shape(g, n, 0), *w = in_shape(g, n, 1), *x = out_shape(g, n, 0);
    int64_t count = shape_numel(x);
    for (int64_t i = 0; i < count; i++)
        out[0][i] = 0;
    CONV_FOREACH(x, w, y, n->iattr, out[0][xi] += in[0][yi] * in[1][wi])
}

const OpDef op_conv2d_grad_input = {
    .name = "conv2d_grad_input",
    .min_in = 2,
    .max_in = 2,
    .iattr = {CONV_ATTRS, "in_h", "in_w"},
    .infer = infer_conv2d_grad_input,
    .ref = conv2d_grad_input_ref,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_NHWC,
    .layout_keep = 1u << 1,
};

/* dweight [O, C/groups, kh, kw] from x and dy. */
static int infer_conv2d_grad_weight(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err) || require_float(g, n, 1, 4, err))
        return -1;
    const CtShape *x = in_shape(g, n, 0), *dy = in_shape(g, n, 1);
    if (n->iattr[GROUPS] < 1 || x->d[1] % n->iattr[GROUPS])
        return ct_fail(err, "groups must divide the input channels");
    CtShape w = {4, {dy->d[1], x->d[1] / n->iattr[GROUPS], n->iattr[EXTRA_H], n->iattr[EXTRA_W]}};
    CtType y;
    if (conv_rule(g, n, x, &w, &y, err) < 0 || require_shape(g, n, 1, &y.shape, err))
        return -1;
    out[0] = (CtType){w, in_type(g, n, 0)->dtype};
    return 1;
}

static void conv2d_grad_weight_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0), *y = in_shape(g, n, 1), *w = out_shape(g, n, 0);
    int64_t count = shape_numel(w);
    for (int64_t i = 0; i < count; i++)
        out[0][i] = 0;
    CONV_FOREACH(x, w, y, n->iattr, out[0][wi] += in[1][yi] * in[0][xi])
}

const OpDef op_conv2d_grad_weight = {
    .name = "conv2d_grad_weight",
    .min_in = 2,
    .max_in = 2,
    .iattr = {CONV_ATTRS, "kh", "kw"},
    .infer = infer_conv2d_grad_weight,
    .ref = conv2d_grad_weight_ref,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_EITHER,
    .layout_contig_out = 1, /* the weight's gradient, in the weight's layout */
};
