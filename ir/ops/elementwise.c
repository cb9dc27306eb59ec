/*
 * Elementwise ops: activations (one input; their formulas, which backends
 * also compile, are in ir/formulas.h), broadcasting binaries (numpy rules,
 * right-aligned), scale_shift (a*x + b with constants), and the stochastic
 * identities dropout and drop_path.
 */
#include <stdint.h>

#include "ir/counter_rng.h"
#include "ops_impl.h"
#include "sx_algebra.h"

static int infer_unary(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

/* Whether op kind a is an activation act_grad takes (ir/formulas.h). */
static int is_activation(int64_t a)
{
#define IS(name) || a == CT_OP_##name
    return 0 CT_ACTIVATIONS(IS);
#undef IS
}

static void act_scalar(const Node *n, Sx *s)
{
    s->out[0] = fx_act(s, n->op, n->op == CT_OP_gelu && n->iattr[0], sx_in(s, 0));
}

/* relu's gradient reads its output, which is 0 exactly where its input is
 * <= 0 and NaN where it is NaN (fx_relu_grad gives the same bits), so the
 * backward keeps the output the next op reads anyway instead of the input
 * too, as PyTorch's threshold_backward does. */
static void act_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int64_t a[2] = {n->op, n->op == CT_OP_gelu ? n->iattr[0] : 0};
    ValueId x = n->op == CT_OP_relu ? n->out[0] : n->in[0];
    din[0] = emit(e, CT_OP_act_grad, 2, (ValueId[]){x, dout[0]}, a, 2, NULL, 0, 0);
}

#define ACT_OP(op, fusion_, amp_, ...)                                                                           \
    const OpDef op_##op = {.name = #op, .min_in = 1, .max_in = 1, .infer = infer_unary, .ref = sx_ref,           \
                           .vjp = act_vjp, .inplace = 1, .fusion = fusion_, .scalar = act_scalar, .amp = amp_, \
                           .layout = OP_LAYOUT_EITHER, .cost = op_cost_none, __VA_ARGS__};
ACT_OP(relu, OP_ACTIVATION, OP_AMP_FOLLOW)
ACT_OP(sigmoid, OP_ACTIVATION, OP_AMP_FOLLOW)
ACT_OP(silu, OP_ACTIVATION, OP_AMP_FOLLOW)
ACT_OP(hard_sigmoid, OP_ACTIVATION, OP_AMP_FOLLOW)
ACT_OP(hard_swish, OP_ACTIVATION, OP_AMP_FOLLOW)
ACT_OP(gelu, OP_ACTIVATION, OP_AMP_FOLLOW, .iattr = {"approximate"})
/* in autocast's f32 list, and no library's epilogue */
ACT_OP(rsqrt, OP_ELEMENTWISE, OP_AMP_F32)
/* no library's epilogue either; autocast runs it in its input's dtype */
ACT_OP(sqrt, OP_ELEMENTWISE, OP_AMP_FOLLOW)
/* autocast's f32 list, as rsqrt (SwinV2's logit scale) */
ACT_OP(exp, OP_ELEMENTWISE, OP_AMP_F32)

/* act_grad(x, dy): dy * f'(x) for the activation whose op kind is iattr act
 * (0 where it is flat, whatever dy). */
static int infer_act_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (!is_activation(n->iattr[0]))
        return ct_fail(err, "op kind %lld is not an activation", (long long)n->iattr[0]);
    if (require_float(g, n, 0, -1, err) || require_shape(g, n, 1, in_shape(g, n, 0), err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static void act_grad_scalar(const Node *n, Sx *s)
{
    s->out[0] = fx_act_grad(s, (int)n->iattr[0], (int)n->iattr[1], sx_in(s, 0), sx_in(s, 1));
}

const OpDef op_act_grad = {.name = "act_grad", .min_in = 2, .max_in = 2, .iattr = {"act", "approximate"},
                           .infer = infer_act_grad, .ref = sx_ref, .inplace = 2, .fusion = OP_ELEMENTWISE,
                           .scalar = act_grad_scalar, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_EITHER};

static void scale_shift_scalar(const Node *n, Sx *s)
{
    s->out[0] = sx_add(s, sx_mul(s, sx_const(s, n->fattr[0]), sx_in(s, 0)), sx_const(s, n->fattr[1]));
}

static void scale_shift_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    din[0] = emit(e, CT_OP_scale_shift, 1, dout, NULL, 0, (double[]){n->fattr[0], 0}, 2, 0);
}

const OpDef op_scale_shift = {.name = "scale_shift", .min_in = 1, .max_in = 1, .fattr = {"a", "b"},
                              .infer = infer_like_input0, .ref = sx_ref, .vjp = scale_shift_vjp, .inplace = 1,
                              .fusion = OP_ELEMENTWISE, .scalar = scale_shift_scalar, .amp = OP_AMP_FOLLOW,
                              .layout = OP_LAYOUT_EITHER, .cost = op_cost_none};

static int infer_broadcast(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtType *a = in_type(g, n, 0), *b = in_type(g, n, 1);
    char sa[96], sb[96];
    if (a->dtype != b->dtype)
        return ct_fail(err, "inputs have different dtypes (%s, %s)", ct_dtype_name(a->dtype), ct_dtype_name(b->dtype));
    int nd = a->shape.ndim > b->shape.ndim ? a->shape.ndim : b->shape.ndim;
    out[0].dtype = a->dtype;
    out[0].shape.ndim = nd;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->shape.ndim), ib = i - (nd - b->shape.ndim);
        int64_t da = ia >= 0 ? a->shape.d[ia] : 1, db = ib >= 0 ? b->shape.d[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return ct_fail(err, "shapes %s and %s do not broadcast", shape_str(&a->shape, sa, sizeof sa),
                           shape_str(&b->shape, sb, sizeof sb));
        out[0].shape.d[i] = da == 1 ? db : da;
    }
    return 1;
}

static void add_scalar(const Node *n, Sx *s) { s->out[0] = sx_add(s, sx_in(s, 0), sx_in(s, 1)); }
static void mul_scalar(const Node *n, Sx *s) { s->out[0] = sx_mul(s, sx_in(s, 0), sx_in(s, 1)); }
static void div_scalar(const Node *n, Sx *s) { s->out[0] = sx_div(s, sx_in(s, 0), sx_in(s, 1)); }

static void add_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    for (int k = 0; k < 2; k++)
        if (need[k])
            din[k] = emit_sum_to(e, dout[0], emit_shape(e, n->in[k]));
}

static void mul_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    for (int k = 0; k < 2; k++)
        if (need[k])
            din[k] = emit_sum_product_to(e, dout[0], n->in[1 - k], emit_shape(e, n->in[k]));
}

#define BINARY_OP(op)                                                                                       \
    const OpDef op_##op = {.name = #op, .min_in = 2, .max_in = 2, .infer = infer_broadcast, .ref = sx_ref,     \
                           .vjp = op##_vjp, .inplace = 3, .fusion = OP_ELEMENTWISE, .scalar = op##_scalar,   \
                           .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_EITHER, .cost = op_cost_none};
BINARY_OP(add)
BINARY_OP(mul)

/* y = a / b: da = dy / b, db = -dy * y / b. */
static void div_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    ValueId q = emit(e, CT_OP_div, 2, (ValueId[]){dout[0], n->in[1]}, NULL, 0, NULL, 0, 0);
    if (need[0])
        din[0] = emit_sum_to(e, q, emit_shape(e, n->in[0]));
    if (need[1]) {
        ValueId p = emit(e, CT_OP_mul, 2, (ValueId[]){q, n->out[0]}, NULL, 0, NULL, 0, 0);
        din[1] = emit_sum_to(e, emit(e, CT_OP_scale_shift, 1, &p, NULL, 0, (double[]){-1, 0}, 2, 0),
                             emit_shape(e, n->in[1]));
    }
}

BINARY_OP(div)

/* dropout(x, counter): iattr node; fattr p. Zeroes each element with
 * probability p and scales the rest by 1/(1-p), as nn.Dropout in training;
 * element i's draw is crng_mask_uniform(counter, node, i) (ir/counter_rng.h),
 * i its logical row-major index. */
static void dropout_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double p = n->fattr[0];
    uint64_t counter = (uint64_t)(int64_t)in[1][0], node = (uint64_t)n->iattr[0];
    for (int64_t i = 0; i < count; i++)
        out[0][i] = crng_mask_uniform(counter, node, (uint64_t)i) < p ? 0 : in[0][i] / (1 - p);
}

/* drop_path: the same per sample (dim 0), as timm's DropPath (scale_by_keep). */
static void drop_path_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t per = shape_numel(s) / s->d[0];
    double p = n->fattr[0];
    uint64_t counter = (uint64_t)(int64_t)in[1][0], node = (uint64_t)n->iattr[0];
    for (int64_t b = 0; b < s->d[0]; b++) {
        double keep = crng_mask_uniform(counter, node, (uint64_t)b) < p ? 0 : 1 / (1 - p);
        for (int64_t i = 0; i < per; i++)
            out[0][b * per + i] = in[0][b * per + i] * keep;
    }
}

static int infer_dropout(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (!(n->fattr[0] > 0 && n->fattr[0] < 1))
        return ct_fail(err, "drop rate %g must be in (0, 1); rate 0 is no node at all", n->fattr[0]);
    if (in_type(g, n, 1)->dtype != CT_I64 || in_shape(g, n, 1)->ndim != 0)
        return ct_fail(err, "input 1 must be the i64 scalar RNG counter");
    return infer_unary(g, n, out, err);
}

/* The mask depends on (counter, node, index) alone, so the gradient is the
 * same op, node and counter applied to dy. */
static void dropout_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    din[0] = emit(e, n->op, 2, (ValueId[]){dout[0], n->in[1]}, n->iattr, 1, n->fattr, 1, 0);
}

const OpDef op_dropout = {.name = "dropout", .min_in = 2, .max_in = 2, .iattr = {"node"}, .fattr = {"p"},
                          .infer = infer_dropout, .ref = dropout_ref, .vjp = dropout_vjp, .nondiff = 1u << 1,
                          .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_EITHER,
                          .cost = op_cost_none};
const OpDef op_drop_path = {.name = "drop_path", .min_in = 2, .max_in = 2, .iattr = {"node"}, .fattr = {"p"},
                            .infer = infer_dropout, .ref = drop_path_ref, .vjp = dropout_vjp, .nondiff = 1u << 1,
                            .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_EITHER,
                            .cost = op_cost_none};

/* reduce_sum: sums over the dims whose bit is set in iattr mask; keepdim=1
 * leaves them as size 1, keepdim=0 drops them. reduce_sum(x, f) sums the
 * product x * f (f of x's shape; x's dtype, or f16/bf16 beside an f32 x:
 * the 16-bit activation an f32 gradient multiplies, read as stored): a
 * broadcast product's gradient (squeeze-excitation's scale's, layer
 * scale's) in one pass, the product never stored. */
static int infer_reduce_sum(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtShape *x = in_shape(g, n, 0);
    if (n->iattr[0] <= 0 || n->iattr[0] >= ((int64_t)1 << x->ndim))
        return ct_fail(err, "dims mask %lld does not fit %d dims", (long long)n->iattr[0], x->ndim);
    if (n->nin > 1) {
        if (require_shape(g, n, 1, x, err))
            return -1;
        CtDType t = in_type(g, n, 0)->dtype, tf = in_type(g, n, 1)->dtype;
        if (tf != t && !(t == CT_F32 && (tf == CT_F16 || tf == CT_BF16)))
            return ct_fail(err, "the factor must have x's dtype, or be f16 or bf16 beside an f32 x");
    }
    out[0].dtype = in_type(g, n, 0)->dtype;
    out[0].shape.ndim = 0;
    for (int i = 0; i < x->ndim; i++) {
        int reduced = (n->iattr[0] >> i) & 1;
        if (!reduced || n->iattr[1])
            out[0].shape.d[out[0].shape.ndim++] = reduced ? 1 : x->d[i];
    }
    return 1;
}

static void reduce_sum_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t ostride[CT_MAX_DIMS], idx[CT_MAX_DIMS] = {0}, s = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        int reduced = (n->iattr[0] >> i) & 1;
        ostride[i] = reduced ? 0 : s;
        s *= reduced ? 1 : x->d[i];
    }
    for (int64_t o = 0; o < s; o++)
        out[0][o] = 0;
    int64_t count = shape_numel(x);
    for (int64_t i = 0; i < count; i++) {
        int64_t o = 0;
        for (int d = 0; d < x->ndim; d++)
            o += idx[d] * ostride[d];
        out[0][o] += n->nin > 1 ? in[0][i] * in[1][i] : in[0][i];
        for (int d = x->ndim - 1; d >= 0 && ++idx[d] == x->d[d]; d--)
            idx[d] = 0;
    }
}

static void reduce_sum_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    CtShape x = emit_shape(e, n->in[0]), kept = x;
    int64_t a[1 + CT_MAX_DIMS] = {x.ndim};
    for (int i = 0; i < x.ndim; i++) {
        if ((n->iattr[0] >> i) & 1)
            kept.d[i] = 1;
        a[1 + i] = x.d[i];
    }
    ValueId r = emit_reshape(e, dout[0], kept);
    ValueId dx = emit(e, CT_OP_expand, 1, &r, a, 1 + x.ndim, NULL, 0, 0);
    for (int k = 0; k < n->nin; k++)
        if (need[k])
            din[k] = n->nin == 1 ? dx : emit(e, CT_OP_mul, 2, (ValueId[]){dx, n->in[1 - k]}, NULL, 0, NULL, 0, 0);
}

const OpDef op_reduce_sum = {.name = "reduce_sum", .min_in = 1, .max_in = 2, .iattr = {"mask", "keepdim"},
                             .infer = infer_reduce_sum, .ref = reduce_sum_ref, .vjp = reduce_sum_vjp,
                             .fusion = OP_REDUCTION, .amp = OP_AMP_F32, .layout = OP_LAYOUT_EITHER,
                             .cost = op_cost_none};
