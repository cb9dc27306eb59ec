/*
 * Elementwise ops: activations (one input), broadcasting binaries (numpy
 * rules, right-aligned), scale_shift (a*x + b with constants), and the
 * stochastic identities dropout and drop_path.
 */
#include <math.h>
#include <stdint.h>

#include "ops_impl.h"

static int infer_unary(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static double sigmoid_f(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Each activation's value f(x) and its gradient dy * f'(x), as torch
 * computes them for NaN and infinities too. Where an activation is flat,
 * torch's backward selects 0 rather than multiplying dy by 0 (relu's
 * threshold_backward, hardsigmoid_backward, hardswish_backward), so an
 * infinite or NaN dy there gives 0; relu's NaN input is no flat point
 * (torch tests the result, relu(NaN) = NaN <= 0 is false) and passes dy. */
static double relu_f(double x, int approx) { return x <= 0 ? 0 : x; }
static double relu_grad(double x, double dy, int approx) { return x <= 0 ? 0 : dy; }
static double sigmoid_fa(double x, int approx) { return sigmoid_f(x); }
static double sigmoid_grad(double x, double dy, int approx) { return dy * (sigmoid_f(x) * (1 - sigmoid_f(x))); }
static double silu_f(double x, int approx) { return x * sigmoid_f(x); }
static double silu_grad(double x, double dy, int approx) { return dy * (sigmoid_f(x) * (1 + x * (1 - sigmoid_f(x)))); }
static double hard_sigmoid_f(double x, int approx) { return x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5; }
static double hard_sigmoid_grad(double x, double dy, int approx) { return x > -3 && x < 3 ? dy * (1.0 / 6) : 0; }
static double hard_swish_f(double x, int approx) { return x * hard_sigmoid_f(x, 0); }
/* PyTorch's hardswish_backward: 0 below -3, x/3 + 1/2 up to 3 inclusive, then
 * 1, and 1 at NaN (its CUDA kernel's and scalar CPU kernel's branches). */
static double hard_swish_grad(double x, double dy, int approx) { return x < -3 ? 0 : x <= 3 ? dy * (x / 3 + 0.5) : dy; }

static double rsqrt_f(double x, int approx) { return 1 / sqrt(x); }
static double rsqrt_grad(double x, double dy, int approx) { return dy * (-0.5 / (x * sqrt(x))); }

/* gelu: approx=0 is the exact erf form (nn.GELU()), 1 the tanh form. */
static double gelu_f(double x, int approx)
{
    if (approx)
        return 0.5 * x * (1 + tanh(sqrt(2 / CT_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2)));
}

static double gelu_grad(double x, double dy, int approx)
{
    if (approx) {
        double k = sqrt(2 / CT_PI), t = tanh(k * (x + 0.044715 * x * x * x));
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x));
    }
    return dy * (0.5 * (1 + erf(x / sqrt(2))) + x * exp(-0.5 * x * x) / sqrt(2 * CT_PI));
}

/* The activations: value and gradient, the latter used by act_grad. */
static const struct {
    CtOp op;
    double (*f)(double, int), (*grad)(double, double, int);
} acts[] = {
    {CT_OP_relu, relu_f, relu_grad},
    {CT_OP_sigmoid, sigmoid_fa, sigmoid_grad},
    {CT_OP_silu, silu_f, silu_grad},
    {CT_OP_hard_sigmoid, hard_sigmoid_f, hard_sigmoid_grad},
    {CT_OP_hard_swish, hard_swish_f, hard_swish_grad},
    {CT_OP_gelu, gelu_f, gelu_grad},
    {CT_OP_rsqrt, rsqrt_f, rsqrt_grad},
};
enum { NACTS = sizeof acts / sizeof acts[0] };

static int act_index(int64_t op)
{
    for (int i = 0; i < NACTS; i++)
        if ((int64_t)acts[i].op == op)
            return i;
    return -1;
}

static void act_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int a = act_index(n->op), approx = n->op == CT_OP_gelu && n->iattr[0];
    int64_t count = shape_numel(in_shape(g, n, 0));
    for (int64_t i = 0; i < count; i++)
        out[0][i] = acts[a].f(in[0][i], approx);
}

static void act_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int64_t a[2] = {n->op, n->op == CT_OP_gelu ? n->iattr[0] : 0};
    din[0] = emit(e, CT_OP_act_grad, 2, (ValueId[]){n->in[0], dout[0]}, a, 2, NULL, 0, 0);
}

#define ACT_OP(op, ...) \
    const OpDef op_##op = {.name = #op, .min_in = 1, .max_in = 1, .infer = infer_unary, .ref = act_ref, \
                           .vjp = act_vjp, .inplace = 1, __VA_ARGS__};
ACT_OP(relu)
ACT_OP(sigmoid)
ACT_OP(silu)
ACT_OP(hard_sigmoid)
ACT_OP(hard_swish)
ACT_OP(gelu, .iattr = {"approximate"})
ACT_OP(rsqrt)

/* act_grad(x, dy): dy * f'(x) for the activation whose op kind is iattr act
 * (0 where it is flat, whatever dy). */
static int infer_act_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (act_index(n->iattr[0]) < 0)
        return ct_fail(err, "op kind %lld is not an activation", (long long)n->iattr[0]);
    if (require_float(g, n, 0, -1, err) || require_shape(g, n, 1, in_shape(g, n, 0), err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static void act_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int a = act_index(n->iattr[0]);
    int64_t count = shape_numel(in_shape(g, n, 0));
    for (int64_t i = 0; i < count; i++)
        out[0][i] = acts[a].grad(in[0][i], in[1][i], (int)n->iattr[1]);
}

const OpDef op_act_grad = {.name = "act_grad", .min_in = 2, .max_in = 2, .iattr = {"act", "approximate"},
                           .infer = infer_act_grad, .ref = act_grad_ref, .inplace = 2};

static void scale_shift_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    for (int64_t i = 0; i < count; i++)
        out[0][i] = n->fattr[0] * in[0][i] + n->fattr[1];
}
static void scale_shift_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    din[0] = emit(e, CT_OP_scale_shift, 1, dout, NULL, 0, (double[]){n->fattr[0], 0}, 2, 0);
}

const OpDef op_scale_shift = {.name = "scale_shift", .min_in = 1, .max_in = 1, .fattr = {"a", "b"},
                              .infer = infer_like_input0, .ref = scale_shift_ref, .vjp = scale_shift_vjp,
                              .inplace = 1};

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

static double add_f(double a, double b) { return a + b; }
static double mul_f(double a, double b) { return a * b; }
static double div_f(double a, double b) { return a / b; }

static void binary_ref(const Graph *g, const Node *n, double *const *in, double *const *out, double (*f)(double, double))
{
    const CtShape *os = out_shape(g, n, 0);
    int64_t sa[CT_MAX_DIMS], sb[CT_MAX_DIMS], idx[CT_MAX_DIMS] = {0};
    shape_broadcast_strides(in_shape(g, n, 0), os, sa);
    shape_broadcast_strides(in_shape(g, n, 1), os, sb);
    int64_t count = shape_numel(os);
    for (int64_t i = 0; i < count; i++) {
        int64_t ia = 0, ib = 0;
        for (int d = 0; d < os->ndim; d++) {
            ia += idx[d] * sa[d];
            ib += idx[d] * sb[d];
        }
        out[0][i] = f(in[0][ia], in[1][ib]);
        for (int d = os->ndim - 1; d >= 0 && ++idx[d] == os->d[d]; d--)
            idx[d] = 0;
    }
}

static void add_ref(const Graph *g, const Node *n, double *const *in, double *const *out) { binary_ref(g, n, in, out, add_f); }
static void mul_ref(const Graph *g, const Node *n, double *const *in, double *const *out) { binary_ref(g, n, in, out, mul_f); }
static void div_ref(const Graph *g, const Node *n, double *const *in, double *const *out) { binary_ref(g, n, in, out, div_f); }

static void add_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    for (int k = 0; k < 2; k++)
        if (need[k])
            din[k] = emit_sum_to(e, dout[0], emit_shape(e, n->in[k]));
}

static void mul_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    for (int k = 0; k < 2; k++)
        if (need[k]) {
            ValueId p = emit(e, CT_OP_mul, 2, (ValueId[]){dout[0], n->in[1 - k]}, NULL, 0, NULL, 0, 0);
            din[k] = emit_sum_to(e, p, emit_shape(e, n->in[k]));
        }
}

const OpDef op_add = {.name = "add", .min_in = 2, .max_in = 2, .infer = infer_broadcast, .ref = add_ref,
                      .vjp = add_vjp, .inplace = 3};
const OpDef op_mul = {.name = "mul", .min_in = 2, .max_in = 2, .infer = infer_broadcast, .ref = mul_ref,
                      .vjp = mul_vjp, .inplace = 3};

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

const OpDef op_div = {.name = "div", .min_in = 2, .max_in = 2, .infer = infer_broadcast, .ref = div_ref,
                      .vjp = div_vjp, .inplace = 3};

/* splitmix64's finaliser: a bijective mix of 64 bits. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A counter-based draw in [0,1) for element i of stochastic node `node` at
 * RNG counter `counter`: no generator state, so the backward pass (and any
 * backend) regenerates the same mask from (counter, node, i) instead of
 * storing it, and every training step (the counter) draws a new one. */
static double rng_uniform(uint64_t counter, uint64_t node, uint64_t i)
{
    uint64_t key = mix64(mix64(counter + 0x632BE59BD9B4E019ull) ^ (node * 0x9E3779B97F4A7C15ull));
    return (double)(mix64(key + (i + 1) * 0xD1B54A32D192ED03ull) >> 11) * 0x1.0p-53;
}

/* dropout(x, counter): iattr node; fattr p. Zeroes each element with
 * probability p and scales the rest by 1/(1-p), as nn.Dropout in training. */
static void dropout_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double p = n->fattr[0];
    uint64_t counter = (uint64_t)(int64_t)in[1][0], node = (uint64_t)n->iattr[0];
    for (int64_t i = 0; i < count; i++)
        out[0][i] = rng_uniform(counter, node, (uint64_t)i) < p ? 0 : in[0][i] / (1 - p);
}

/* drop_path: the same per sample (dim 0), as timm's DropPath (scale_by_keep). */
static void drop_path_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t per = shape_numel(s) / s->d[0];
    double p = n->fattr[0];
    uint64_t counter = (uint64_t)(int64_t)in[1][0], node = (uint64_t)n->iattr[0];
    for (int64_t b = 0; b < s->d[0]; b++) {
        double keep = rng_uniform(counter, node, (uint64_t)b) < p ? 0 : 1 / (1 - p);
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
                          .infer = infer_dropout, .ref = dropout_ref, .vjp = dropout_vjp, .nondiff = 1u << 1};
const OpDef op_drop_path = {.name = "drop_path", .min_in = 2, .max_in = 2, .iattr = {"node"}, .fattr = {"p"},
                            .infer = infer_dropout, .ref = drop_path_ref, .vjp = dropout_vjp, .nondiff = 1u << 1};

/* reduce_sum: sums over the dims whose bit is set in iattr mask; keepdim=1
 * leaves them as size 1, keepdim=0 drops them. */
static int infer_reduce_sum(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtShape *x = in_shape(g, n, 0);
    if (n->iattr[0] <= 0 || n->iattr[0] >= ((int64_t)1 << x->ndim))
        return ct_fail(err, "dims mask %lld does not fit %d dims", (long long)n->iattr[0], x->ndim);
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
        out[0][o] += in[0][i];
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
    din[0] = emit(e, CT_OP_expand, 1, &r, a, 1 + x.ndim, NULL, 0, 0);
}

const OpDef op_reduce_sum = {.name = "reduce_sum", .min_in = 1, .max_in = 1, .iattr = {"mask", "keepdim"},
                             .infer = infer_reduce_sum, .ref = reduce_sum_ref, .vjp = reduce_sum_vjp};
