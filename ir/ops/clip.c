/*
 * Clamping, and gradient clipping (timm's dispatch_clip_grad, applied to the
 * unscaled gradients before the update; clip_coef is not differentiated).
 *
 * clamp(x), fattr lo, hi: min(max(x, lo), hi) elementwise, NaN kept
 *   (torch.clamp; an infinite bound is none); --clip-mode value is
 *   clamp(g, -v, v); SwinV2's logit scale and F.normalize's floor in models.
 * clamp_grad(x, dy), fattr lo, hi: its gradient, torch's clamp_backward:
 *   dy where lo <= x <= hi, else 0 (a NaN x, whatever dy, among them).
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
#include "ops_impl.h"

static int infer_clamp(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    if (!(n->fattr[0] <= n->fattr[1]))
        return ct_fail(err, "clamp: lo %g is above hi %g", n->fattr[0], n->fattr[1]);
    return infer_like_input0(g, n, out, err);
}

static void clamp_scalar(const Node *n, Sx *s)
{
    int x = sx_in(s, 0), lo = sx_const(s, n->fattr[0]), hi = sx_const(s, n->fattr[1]);
    s->out[0] = sx_select(s, sx_lt(s, x, lo), lo, sx_select(s, sx_lt(s, hi, x), hi, x));
}

static void clamp_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    din[0] = emit(e, CT_OP_clamp_grad, 2, (ValueId[]){n->in[0], dout[0]}, NULL, 0, n->fattr, 2, 0);
}

const OpDef op_clamp = {.name = "clamp", .min_in = 1, .max_in = 1, .fattr = {"lo", "hi"}, .infer = infer_clamp,
                        .ref = sx_ref, .vjp = clamp_vjp, .inplace = 1, .fusion = OP_ELEMENTWISE,
                        .scalar = clamp_scalar, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW,
                        .cost = op_cost_none};

static int infer_clamp_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (infer_clamp(g, n, out, err) < 0 || require_shape(g, n, 1, in_shape(g, n, 0), err))
        return -1;
    return 1;
}

static void clamp_grad_scalar(const Node *n, Sx *s)
{
    int x = sx_in(s, 0), zero = sx_const(s, 0);
    int inside = sx_select(s, sx_op(s, SX_LE, x, sx_const(s, n->fattr[1]), 0), sx_in(s, 1), zero);
    s->out[0] = sx_select(s, sx_op(s, SX_LE, sx_const(s, n->fattr[0]), x, 0), inside, zero);
}

const OpDef op_clamp_grad = {.name = "clamp_grad", .min_in = 2, .max_in = 2, .fattr = {"lo", "hi"},
                             .infer = infer_clamp_grad, .ref = sx_ref, .inplace = 2, .fusion = OP_ELEMENTWISE,
                             .scalar = clamp_grad_scalar, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static int infer_clip_coef(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    if (n->nin == 2 && require_shape(g, n, 1, in_shape(g, n, 0), err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static void clip_coef_scalar(const Node *n, Sx *s)
{
    int num = sx_const(s, n->fattr[0]);
    if (n->nin == 2) {
        int r = sx_sqrt(s, sx_in(s, 1)), eps = sx_const(s, n->fattr[1]);
        num = sx_mul(s, num, sx_select(s, sx_lt(s, r, eps), eps, r));
    }
    int den = sx_add(s, sx_sqrt(s, sx_in(s, 0)), sx_const(s, n->fattr[2])), floor = sx_const(s, n->fattr[3]);
    int q = sx_div(s, num, sx_select(s, sx_lt(s, den, floor), floor, den)), one = sx_const(s, 1);
    s->out[0] = sx_select(s, sx_lt(s, one, q), one, q);
}

const OpDef op_clip_coef = {.name = "clip_coef", .min_in = 1, .max_in = 2,
                            .fattr = {"c", "ref_eps", "shift", "floor"}, .infer = infer_clip_coef, .ref = sx_ref,
                            .fusion = OP_ELEMENTWISE, .scalar = clip_coef_scalar, .amp = OP_AMP_FOLLOW,
                            .layout = OP_LAYOUT_NCHW};
