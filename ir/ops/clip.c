/*
 * Gradient clipping, timm's dispatch_clip_grad, applied to the unscaled
 * gradients before the update. Neither op is differentiated.
 *
 * clamp(x), fattr lo, hi: min(max(x, lo), hi) elementwise, NaN kept
 *   (torch.clamp); --clip-mode value is clamp(g, -v, v).
 * clip_coef(sq, [ref_sq]), fattr c, ref_eps, shift, floor: the factor a
 *   gradient is multiplied by, elementwise over sq (ref_sq shaped alike):
 *     min(num / max(sqrt(sq) + shift, floor), 1),
 *     num = c without ref_sq, c * max(sqrt(ref_sq), ref_eps) with it;
 *   NaN stays NaN, as in torch.
 *   clip_grad_norm_: sq the total squared norm of every gradient, c
 *     max_norm, shift 1e-6, floor 0.
 *   adaptive_clip_grad: sq the unit-wise squared norms of g, ref_sq those
 *     of p, c the clip factor, ref_eps 1e-3, shift 0, floor 1e-6 (timm's
 *     where(norm < max, g, g * max / clamp(norm, 1e-6)) is this factor).
 */
#include <math.h>

#include "ops_impl.h"

static int infer_clamp(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    if (!(n->fattr[0] <= n->fattr[1]))
        return ct_fail(err, "clamp: lo %g is above hi %g", n->fattr[0], n->fattr[1]);
    return infer_like_input0(g, n, out, err);
}

static void clamp_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double lo = n->fattr[0], hi = n->fattr[1];
    for (int64_t i = 0; i < count; i++) {
        double x = in[0][i];
        out[0][i] = x < lo ? lo : x > hi ? hi : x;
    }
}

const OpDef op_clamp = {.name = "clamp", .min_in = 1, .max_in = 1, .fattr = {"lo", "hi"}, .infer = infer_clamp,
                        .ref = clamp_ref, .inplace = 1};

static int infer_clip_coef(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    if (n->nin == 2 && require_shape(g, n, 1, in_shape(g, n, 0), err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static void clip_coef_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double c = n->fattr[0], ref_eps = n->fattr[1], shift = n->fattr[2], floor = n->fattr[3];
    for (int64_t i = 0; i < count; i++) {
        double num = c;
        if (n->nin == 2) {
            double r = sqrt(in[1][i]);
            num = c * (r < ref_eps ? ref_eps : r);
        }
        double den = sqrt(in[0][i]) + shift;
        double q = num / (den < floor ? floor : den);
        out[0][i] = q > 1 ? 1 : q;
    }
}

const OpDef op_clip_coef = {.name = "clip_coef", .min_in = 1, .max_in = 2,
                            .fattr = {"c", "ref_eps", "shift", "floor"}, .infer = infer_clip_coef,
                            .ref = clip_coef_ref};
