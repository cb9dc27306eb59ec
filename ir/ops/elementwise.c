/*
 * Elementwise ops: activations (one input), broadcasting binaries (numpy
 * rules, right-aligned), scale_shift (a*x + b with constants), and the
 * stochastic identities dropout and drop_path.
 */
#include <math.h>
#include <stdint.h>

#include "ops_impl.h"

static void unary_ref(const Graph *g, const Node *n, double *const *in, double *const *out, double (*f)(double))
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    for (int64_t i = 0; i < count; i++)
        out[0][i] = f(in[0][i]);
}

static int infer_unary(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static double relu_f(double x) { return x > 0 ? x : 0; }
static double sigmoid_f(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu_f(double x) { return x * sigmoid_f(x); }
static double relu6_f(double x) { return x < 0 ? 0 : x > 6 ? 6 : x; }
static double hard_sigmoid_f(double x) { return relu6_f(x + 3) / 6; }
static double hard_swish_f(double x) { return x * hard_sigmoid_f(x); }

#define UNARY_OP(op)                                                                                    \
    static void op##_ref(const Graph *g, const Node *n, double *const *in, double *const *out)        \
    {                                                                                                   \
        unary_ref(g, n, in, out, op##_f);                                                               \
    }                                                                                                   \
    const OpDef op_##op = {.name = #op, .min_in = 1, .max_in = 1, .infer = infer_unary, .ref = op##_ref};

UNARY_OP(relu)
UNARY_OP(sigmoid)
UNARY_OP(silu)
UNARY_OP(hard_sigmoid)
UNARY_OP(hard_swish)

/* gelu: approximate=0 is the exact erf form (nn.GELU()), 1 the tanh form. */
static void gelu_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    for (int64_t i = 0; i < count; i++) {
        double x = in[0][i];
        if (n->iattr[0])
            out[0][i] = 0.5 * x * (1 + tanh(sqrt(2 / CT_PI) * (x + 0.044715 * x * x * x)));
        else
            out[0][i] = 0.5 * x * (1 + erf(x / sqrt(2)));
    }
}
const OpDef op_gelu = {.name = "gelu", .min_in = 1, .max_in = 1, .iattr = {"approximate"},
                       .infer = infer_unary, .ref = gelu_ref};

static void scale_shift_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    for (int64_t i = 0; i < count; i++)
        out[0][i] = n->fattr[0] * in[0][i] + n->fattr[1];
}
const OpDef op_scale_shift = {.name = "scale_shift", .min_in = 1, .max_in = 1, .fattr = {"a", "b"},
                              .infer = infer_like_input0, .ref = scale_shift_ref};

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

/* Strides of `in` seen through the broadcast to `out` (0 on broadcast dims). */
static void broadcast_strides(const CtShape *in, const CtShape *out, int64_t *strides)
{
    int64_t s = 1;
    for (int i = out->ndim - 1; i >= 0; i--) {
        int j = i - (out->ndim - in->ndim);
        int64_t d = j >= 0 ? in->d[j] : 1;
        strides[i] = d == 1 ? 0 : s;
        s *= d;
    }
}

static void binary_ref(const Graph *g, const Node *n, double *const *in, double *const *out, int is_mul)
{
    const CtShape *os = out_shape(g, n, 0);
    int64_t sa[CT_MAX_DIMS], sb[CT_MAX_DIMS], idx[CT_MAX_DIMS] = {0};
    broadcast_strides(in_shape(g, n, 0), os, sa);
    broadcast_strides(in_shape(g, n, 1), os, sb);
    int64_t count = shape_numel(os);
    for (int64_t i = 0; i < count; i++) {
        int64_t ia = 0, ib = 0;
        for (int d = 0; d < os->ndim; d++) {
            ia += idx[d] * sa[d];
            ib += idx[d] * sb[d];
        }
        out[0][i] = is_mul ? in[0][ia] * in[1][ib] : in[0][ia] + in[1][ib];
        for (int d = os->ndim - 1; d >= 0 && ++idx[d] == os->d[d]; d--)
            idx[d] = 0;
    }
}

static void add_ref(const Graph *g, const Node *n, double *const *in, double *const *out) { binary_ref(g, n, in, out, 0); }
static void mul_ref(const Graph *g, const Node *n, double *const *in, double *const *out) { binary_ref(g, n, in, out, 1); }
const OpDef op_add = {.name = "add", .min_in = 2, .max_in = 2, .infer = infer_broadcast, .ref = add_ref};
const OpDef op_mul = {.name = "mul", .min_in = 2, .max_in = 2, .infer = infer_broadcast, .ref = mul_ref};

/* A counter-based uniform draw in [0,1): the same (seed, index) always gives
 * the same number, whichever backend evaluates it. */
static double hash_uniform(uint64_t seed, uint64_t i)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* dropout: iattr seed; fattr p. Zeroes each element with probability p and
 * scales the rest by 1/(1-p), as nn.Dropout in training. */
static void dropout_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double p = n->fattr[0];
    for (int64_t i = 0; i < count; i++)
        out[0][i] = hash_uniform((uint64_t)n->iattr[0], (uint64_t)i) < p ? 0 : in[0][i] / (1 - p);
}

/* drop_path: the same per sample (dim 0), as timm's DropPath (scale_by_keep). */
static void drop_path_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t per = shape_numel(s) / s->d[0];
    double p = n->fattr[0];
    for (int64_t b = 0; b < s->d[0]; b++) {
        double keep = hash_uniform((uint64_t)n->iattr[0], (uint64_t)b) < p ? 0 : 1 / (1 - p);
        for (int64_t i = 0; i < per; i++)
            out[0][b * per + i] = in[0][b * per + i] * keep;
    }
}

static int infer_dropout(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (!(n->fattr[0] > 0 && n->fattr[0] < 1))
        return ct_fail(err, "drop rate %g must be in (0, 1); rate 0 is no node at all", n->fattr[0]);
    return infer_unary(g, n, out, err);
}

const OpDef op_dropout = {.name = "dropout", .min_in = 1, .max_in = 1, .iattr = {"seed"}, .fattr = {"p"},
                          .infer = infer_dropout, .ref = dropout_ref};
const OpDef op_drop_path = {.name = "drop_path", .min_in = 1, .max_in = 1, .iattr = {"seed"}, .fattr = {"p"},
                            .infer = infer_dropout, .ref = drop_path_ref};
