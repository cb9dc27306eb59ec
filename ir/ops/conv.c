/*
 * conv2d: x [N,C,H,W], weight [O,C/groups,KH,KW], optional bias [O] ->
 * [N,O,OH,OW], as torch.nn.functional.conv2d with zero padding.
 */
#include "ops_impl.h"

enum { STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, GROUPS };

static int infer_conv2d(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err) || require_float(g, n, 1, 4, err))
        return -1;
    const CtShape *x = in_shape(g, n, 0), *w = in_shape(g, n, 1);
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
    if (n->nin == 3 && require_shape(g, n, 2, &(CtShape){1, {w->d[0]}}, err))
        return -1;
    int64_t oh = (x->d[2] + 2 * a[PAD_H] - a[DIL_H] * (w->d[2] - 1) - 1) / a[STRIDE_H] + 1;
    int64_t ow = (x->d[3] + 2 * a[PAD_W] - a[DIL_W] * (w->d[3] - 1) - 1) / a[STRIDE_W] + 1;
    if (oh < 1 || ow < 1)
        return ct_fail(err, "kernel %lldx%lld is larger than the padded input %lldx%lld", (long long)w->d[2],
                       (long long)w->d[3], (long long)x->d[2], (long long)x->d[3]);
    out[0].dtype = in_type(g, n, 0)->dtype;
    out[0].shape = (CtShape){4, {x->d[0], w->d[0], oh, ow}};
    return 1;
}

static void conv2d_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0), *w = in_shape(g, n, 1), *y = out_shape(g, n, 0);
    const int64_t *a = n->iattr;
    int64_t N = x->d[0], C = x->d[1], H = x->d[2], W = x->d[3];
    int64_t O = w->d[0], CG = w->d[1], KH = w->d[2], KW = w->d[3], OH = y->d[2], OW = y->d[3];
    int64_t OG = O / a[GROUPS];
    for (int64_t b = 0; b < N; b++)
        for (int64_t o = 0; o < O; o++) {
            int64_t g0 = (o / OG) * CG;
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = n->nin == 3 ? in[2][o] : 0;
                    for (int64_t c = 0; c < CG; c++)
                        for (int64_t kh = 0; kh < KH; kh++) {
                            int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
                            if (ih < 0 || ih >= H)
                                continue;
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t iw = ow * a[STRIDE_W] - a[PAD_W] + kw * a[DIL_W];
                                if (iw < 0 || iw >= W)
                                    continue;
                                acc += in[0][((b * C + g0 + c) * H + ih) * W + iw] *
                                       in[1][((o * CG + c) * KH + kh) * KW + kw];
                            }
                        }
                    out[0][((b * O + o) * OH + oh) * OW + ow] = acc;
                }
        }
}

const OpDef op_conv2d = {
    .name = "conv2d",
    .min_in = 2,
    .max_in = 3,
    .iattr = {"stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "groups"},
    .infer = infer_conv2d,
    .ref = conv2d_ref,
};
