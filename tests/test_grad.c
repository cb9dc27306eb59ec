/*
 * Every differentiable op's VJP against finite differences, in float64 on
 * the ref backend, as torch.autograd.gradcheck does it.
 *
 * A case builds a tiny graph y = f(inputs, params). The harness reduces it
 * to the scalar L = sum(y * W), W a fixed pseudo-random input of y's shape
 * (L = y when y is already a scalar, as for the losses), so every output
 * element reaches L with its own weight and a VJP that mixes up elements
 * cannot pass. It asks autodiff for dL/d(every float input and parameter),
 * runs the graph once for those analytic gradients, then re-runs the same
 * graph with one element at a time moved by +-h and compares with the
 * central difference (L(x + h) - L(x - h)) / 2h. Tensors above MAX_CHECKED
 * elements are checked on a spread sample that includes both ends.
 *
 * The graphs are differentiable almost everywhere only: inputs are drawn so
 * that no element sits near a kink (relu at 0, the hard activations at +-3;
 * max_pool ties have probability zero with continuous draws), while the
 * activations' inputs also hold probes on both sides of each kink, so a
 * kink in the wrong place shows. A case may give autodiff a runtime gradient
 * seed s (the loss scale); its gradients are then compared with s times the
 * differences. At the end, an op with a VJP rule that no case exercised
 * fails the test, so a new op cannot go unchecked.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/builder.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"
#include "tests/check.h"

/* One table of tolerances, per op family: the finite-difference step h and
 * the rule |analytic - numeric| <= atol + rtol * |numeric|. With h = 1e-6 in
 * f64 the difference's truncation error (~h^2) and roundoff (~1e-16 |L| / h)
 * both stay far below atol for these O(1) losses; a wrong VJP is off by O(1). */
typedef enum TolKind { TOL_LINEAR, TOL_SMOOTH, TOL_NORM, TOL_LOSS, TOL_COMPOSITE, NTOLS } TolKind;
static const struct {
    const char *family;
    double h, atol, rtol;
} tolerances[NTOLS] = {
    [TOL_LINEAR] = {"linear maps (conv, linear, matmul, pools, shape ops, dropout)", 1e-6, 1e-6, 1e-5},
    [TOL_SMOOTH] = {"nonlinear pointwise (activations, mul, div), softmax, sdpa", 1e-6, 1e-6, 1e-5},
    [TOL_NORM] = {"normalisations", 1e-6, 1e-6, 1e-5},
    [TOL_LOSS] = {"losses", 1e-6, 1e-6, 1e-5},
    [TOL_COMPOSITE] = {"composite", 1e-6, 1e-6, 1e-5},
};

#define MAX_CHECKED 40     /* elements checked per tensor at most */
#define KINK_MARGIN 1e-3   /* least distance of an input element from a kink */
#define MAX_REPORTED 3     /* mismatching elements printed per tensor */
#define MAX_CASE_INPUTS 8
/* Activation inputs start with these probes: each kink +- 0.01 and +- 0.3. */
static const double kink_probes[] = {-3.3, -3.01, -2.99, -2.7, -0.3, -0.01, 0.01, 0.3, 2.7, 2.99, 3.01, 3.3};

/* ---------------------------------------------------------------- inputs */

/* How the harness fills a graph input: a differentiated f64 tensor with
 * magnitudes in [lo, amp] and either sign (IN_PROBED: led by kink_probes),
 * the loss weights W in [-1, 1], probabilities in (0, 1] (soft targets, not
 * differentiated), i64 class indices in [0, classes), gather's indices
 * (i32 or i64, each of lo .. lo + classes - 1 in turn, so repeated), or the
 * gradient seed, a scalar equal to amp. */
typedef enum InKind { IN_DIFF, IN_PROBED, IN_WEIGHT, IN_PROB, IN_CLASSES, IN_INDEX, IN_SEED } InKind;

typedef struct InSpec {
    ValueId v;
    InKind kind;
    double lo, amp;
    int64_t classes;
} InSpec;

/* What a case function builds into: the builder and its inputs' specs. */
typedef struct GradCase {
    Builder *b;
    InSpec in[MAX_CASE_INPUTS];
    int nin;
} GradCase;

static ValueId add_input(GradCase *c, const char *name, CtShape s, CtDType dt, InSpec spec)
{
    CT_ASSERT(c->nin < MAX_CASE_INPUTS);
    spec.v = b_input(c->b, name, s, dt);
    c->in[c->nin++] = spec;
    return spec.v;
}

/* A differentiated input in [-2, 2]. */
static ValueId in_x(GradCase *c, const char *name, CtShape s)
{
    return add_input(c, name, s, CT_F64, (InSpec){.kind = IN_DIFF, .amp = 2});
}
/* A differentiated input in [-4, 4] led by the kink probes: reaches the hard
 * activations' flat parts and tests where their kinks are. */
static ValueId in_probed(GradCase *c, const char *name, CtShape s)
{
    return add_input(c, name, s, CT_F64, (InSpec){.kind = IN_PROBED, .amp = 4});
}
/* A differentiated input kept away from 0 (a divisor): |x| in [0.5, 2]. */
static ValueId in_nonzero(GradCase *c, const char *name, CtShape s)
{
    return add_input(c, name, s, CT_F64, (InSpec){.kind = IN_DIFF, .lo = 0.5, .amp = 2});
}
static ValueId in_prob(GradCase *c, const char *name, CtShape s)
{
    return add_input(c, name, s, CT_F64, (InSpec){.kind = IN_PROB});
}
static ValueId in_classes(GradCase *c, const char *name, int64_t batch, int64_t classes)
{
    return add_input(c, name, (CtShape){1, {batch}}, CT_I64, (InSpec){.kind = IN_CLASSES, .classes = classes});
}

/* splitmix64 on (stream, index): deterministic, well spread, no exact ties. */
static uint64_t mix64(uint64_t stream, uint64_t i)
{
    uint64_t z = stream * 0x9E3779B97F4A7C15ull + i * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t stream, uint64_t i) { return ((double)(mix64(stream, i) >> 11) + 0.5) * 0x1.0p-53; }

/* Moves x at least KINK_MARGIN away from the activations' kinks (0, -3, 3),
 * so a +-h step never crosses one. */
static double off_kinks(double x)
{
    static const double kinks[] = {0, -3, 3};
    for (int k = 0; k < 3; k++)
        if (fabs(x - kinks[k]) < KINK_MARGIN)
            x = kinks[k] + (x >= kinks[k] ? KINK_MARGIN : -KINK_MARGIN);
    return x;
}

/* Element i of a float input. */
static double input_value(const InSpec *in, uint64_t stream, int64_t i)
{
    double u = uniform01(stream, (uint64_t)i), s = 2 * u - 1;
    switch (in->kind) {
    case IN_SEED: return in->amp;
    case IN_PROB: return 0.1 + 0.9 * u;
    case IN_WEIGHT: return s;
    case IN_PROBED:
        if (i < (int64_t)(sizeof kink_probes / sizeof kink_probes[0]))
            return kink_probes[i];
        /* fall through */
    default: return off_kinks(copysign(in->lo + (in->amp - in->lo) * fabs(s), s));
    }
}

static void fill_input(const InSpec *in, uint64_t stream, CtTensor *t)
{
    int64_t n = shape_numel(&t->type.shape);
    for (int64_t i = 0; i < n; i++) {
        if (in->kind == IN_CLASSES)
            ((int64_t *)t->data)[i] = (int64_t)(uniform01(stream, (uint64_t)i) * (double)in->classes);
        else if (in->kind == IN_INDEX && t->type.dtype == CT_I32)
            ((int32_t *)t->data)[i] = (int32_t)((i * 3 + 1) % in->classes + (int64_t)in->lo);
        else if (in->kind == IN_INDEX)
            ((int64_t *)t->data)[i] = (i * 3 + 1) % in->classes + (int64_t)in->lo;
        else
            ((double *)t->data)[i] = input_value(in, stream, i);
    }
}

/* Parameters in [-1, 1]; running means in [-1, 1] and running variances in
 * [0.5, 1.5] (eval-mode BN divides by them); integer buffers stay zero. */
static void fill_state(CtState *s, uint64_t stream)
{
    for (int j = 0; j < s->n; j++) {
        if (s->e[j].type.dtype != CT_F64)
            continue;
        double *p = state_data(s, j);
        const char *dot = strrchr(s->e[j].name, '.');
        int var = dot && strcmp(dot, ".running_var") == 0;
        for (int64_t i = 0; i < shape_numel(&s->e[j].type.shape); i++) {
            double u = uniform01(stream + 1000 + (uint64_t)j, (uint64_t)i);
            p[i] = var ? 0.5 + u : off_kinks(2 * u - 1);
        }
    }
}

/* ----------------------------------------------------------------- cases */

typedef ValueId (*CaseFn)(GradCase *c, int variant);

static ValueId case_conv(GradCase *c, int v)
{
    static const struct {
        CtShape x;
        int out, kernel;
        ConvOpts o;
    } cfg[] = {
        {{4, {2, 3, 5, 5}}, 4, 3, {.padding = 1, .bias = 1}},
        {{4, {1, 2, 7, 7}}, 3, 3, {.stride = 2, .dilation = 2, .padding = 1, .bias = 1}},
        {{4, {1, 4, 5, 5}}, 6, 3, {.padding = 1, .groups = 2}},
        {{4, {2, 3, 4, 4}}, 3, 3, {.padding = 1, .groups = 3}},
        {{4, {2, 3, 5, 5}}, 2, 1, {.stride = 2, .bias = 1}},
        {{4, {1, 2, 4, 7}}, 3, 3, {.bias = 1}},
    };
    return nn_conv2d(c->b, "conv", in_x(c, "x", cfg[v].x), cfg[v].out, cfg[v].kernel, cfg[v].o);
}

/* A 2x3 kernel with different strides, paddings and dilations per axis,
 * which nn_conv2d (square, uniform) cannot make. */
static ValueId case_conv_asym(GradCase *c, int v)
{
    ValueId x = in_x(c, "x", (CtShape){4, {1, 2, 5, 6}});
    b_push(c->b, "conv");
    ValueId w = b_param(c->b, "weight", (CtShape){4, {2, 2, 2, 3}}, init_uniform(1));
    b_pop(c->b);
    int64_t a[] = {2, 1, 1, 0, 1, 2, 1};
    return b_node(c->b, CT_OP_conv2d, 2, (ValueId[]){x, w}, a, 7, NULL, 0, 0);
}

static ValueId case_batch_norm(GradCase *c, int v)
{
    CtShape s = v == 1 ? (CtShape){2, {4, 3}} : (CtShape){4, {2, 3, 2, 2}};
    return nn_batch_norm(c->b, "bn", in_x(c, "x", s), (BNOpts){0});
}

static ValueId case_layer_norm(GradCase *c, int v)
{
    return nn_layer_norm(c->b, "norm", in_x(c, "x", (CtShape){3, {2, 3, 5}}), 1e-5);
}

/* Groups of two channels of 4-D input, groups of one (groups = C) and one
 * group of every channel, on 4-D, 3-D and 2-D inputs. */
static ValueId case_group_norm(GradCase *c, int v)
{
    static const struct {
        CtShape x;
        int groups;
    } cfg[] = {{{4, {2, 4, 2, 3}}, 2}, {{4, {2, 3, 2, 2}}, 3}, {{3, {2, 3, 5}}, 1}, {{2, {3, 4}}, 2}};
    return nn_group_norm(c->b, "norm", in_x(c, "x", cfg[v].x), (GNOpts){.groups = cfg[v].groups});
}

/* Weight-standardised convs: group_norm without an affine (StdConv2d) and
 * with the scaled gain as its only weight (grouped ScaledStdConv2d), the
 * gradients reaching x, the raw weight, the bias and the gain. */
static ValueId case_std_conv(GradCase *c, int v)
{
    ValueId x = in_x(c, "x", (CtShape){4, {2, 4, 4, 4}});
    if (v == 0)
        return nn_std_conv2d(c->b, "conv", x, 3, 3, (ConvOpts){.padding = 1}, (StdConvOpts){.eps = 1e-6});
    return nn_std_conv2d(c->b, "conv", x, 4, 3, (ConvOpts){.stride = 2, .groups = 2, .bias = 1},
                         (StdConvOpts){.eps = 1e-5, .scaled = 1, .gamma = 1.7, .gain_init = 0.8});
}

/* 2-D and 3-D inputs, with and without bias. */
static ValueId case_linear(GradCase *c, int v)
{
    CtShape s = v & 1 ? (CtShape){3, {2, 3, 4}} : (CtShape){2, {3, 4}};
    return nn_linear(c->b, "fc", in_x(c, "x", s), 5, (LinearOpts){.no_bias = v >= 2});
}

/* v: bit 0 a 2-D b shared by the batch, bit 1 a stored transposed, bit 2 b. */
static ValueId case_matmul(GradCase *c, int v)
{
    int shared = v & 1, ta = v >> 1 & 1, tb = v >> 2 & 1;
    ValueId a = in_x(c, "a", ta ? (CtShape){3, {2, 4, 3}} : (CtShape){3, {2, 3, 4}});
    CtShape bs = shared ? (CtShape){2, {4, 5}} : (CtShape){3, {2, 4, 5}};
    if (tb) {
        bs.d[bs.ndim - 2] = 5;
        bs.d[bs.ndim - 1] = 4;
    }
    ValueId b = in_x(c, "b", bs);
    return b_node(c->b, CT_OP_matmul, 2, (ValueId[]){a, b}, (int64_t[]){ta, tb}, 2, NULL, 0, 0);
}

static ValueId case_activation(GradCase *c, int v)
{
    ValueId x = in_probed(c, "x", (CtShape){2, {4, 10}});
    switch (v) {
    case 0: return f_relu(c->b, x);
    case 1: return f_gelu(c->b, x, 0);
    case 2: return f_gelu(c->b, x, 1);
    case 3: return f_silu(c->b, x);
    case 4: return f_sigmoid(c->b, x);
    case 5: return f_hard_swish(c->b, x);
    case 6: return f_hard_sigmoid(c->b, x);
    case 7: return f_rsqrt(c->b, f_scale_shift(c->b, f_mul(c->b, x, x), 1, 0.5)); /* on x*x + 0.5 > 0 */
    case 8: return f_sqrt(c->b, f_scale_shift(c->b, f_mul(c->b, x, x), 1, 0.5));
    case 9: return f_exp(c->b, x);
    case 10: return f_clamp(c->b, x, -3, 3); /* kinks at the probes' +-3 */
    default: return f_clamp(c->b, x, -HUGE_VAL, 3);
    }
}

static ValueId case_normalize(GradCase *c, int v)
{
    return f_normalize(c->b, in_x(c, "x", (CtShape){3, {2, 3, 4}}), 1e-12);
}

/* Broadcasting on either side: [2,3,4] with [4], [2,1,4] with [1,3,1], and
 * equal shapes (both gradients are then dy itself). */
static const CtShape binary_shapes[][2] = {
    {{3, {2, 3, 4}}, {1, {4}}},
    {{1, {4}}, {3, {2, 3, 4}}},
    {{3, {2, 1, 4}}, {3, {1, 3, 1}}},
    {{2, {2, 3}}, {2, {2, 3}}},
};

static ValueId case_add(GradCase *c, int v)
{
    return f_add(c->b, in_x(c, "a", binary_shapes[v][0]), in_x(c, "b", binary_shapes[v][1]));
}

static ValueId case_mul(GradCase *c, int v)
{
    return f_mul(c->b, in_x(c, "a", binary_shapes[v][0]), in_x(c, "b", binary_shapes[v][1]));
}

/* The divisor's magnitude stays >= 0.5. */
static ValueId case_div(GradCase *c, int v)
{
    return f_div(c->b, in_x(c, "a", binary_shapes[v][0]), in_nonzero(c, "b", binary_shapes[v][1]));
}

static ValueId case_scale_shift(GradCase *c, int v)
{
    return f_scale_shift(c->b, in_x(c, "x", (CtShape){2, {2, 3}}), 1.5, -0.25);
}

static ValueId case_pool(GradCase *c, int v)
{
    ValueId x = in_x(c, "x", v == 5 ? (CtShape){4, {1, 1, 6, 8}} : (CtShape){4, {1, 2, 5, 7}});
    switch (v) {
    case 0: return f_avg_pool2d(c->b, x, 2, 2, 0, 1, 0);
    case 1: return f_avg_pool2d(c->b, x, 3, 2, 1, 0, 1);
    case 2: return f_max_pool2d(c->b, x, 3, 2, 1);
    case 3: return f_adaptive_avg_pool2d(c->b, x, 3, 2);
    case 4: return f_global_avg_pool(c->b, x);
    default: return f_avg_pool2d(c->b, x, 3, 2, 1, 1, 1);
    }
}

/* to_layout is the identity on the logical tensor, both ways. */
static ValueId case_to_layout(GradCase *c, int v)
{
    ValueId x = in_x(c, "x", (CtShape){4, {2, 3, 2, 3}});
    int64_t to = CT_LAYOUT_CHANNELS_LAST;
    return b_node(c->b, CT_OP_to_layout, 1, &x, &to, 1, NULL, 0, 0);
}

/* cast's gradient is the cast back; checked f64 -> f64, since FD steps
 * of 1e-6 are below the resolution of narrower formats. */
static ValueId case_cast(GradCase *c, int v)
{
    ValueId x = in_x(c, "x", (CtShape){2, {3, 4}});
    int64_t to = CT_F64;
    return f_relu(c->b, b_node(c->b, CT_OP_cast, 1, &x, &to, 1, NULL, 0, 0));
}

static ValueId case_reshape(GradCase *c, int v)
{
    return f_reshape(c->b, in_x(c, "x", (CtShape){3, {2, 3, 4}}), 2, (int64_t[]){4, 6});
}

static ValueId case_permute(GradCase *c, int v)
{
    return f_permute(c->b, in_x(c, "x", (CtShape){3, {2, 3, 4}}), 3, (int64_t[]){2, 0, 1});
}

static ValueId case_slice(GradCase *c, int v)
{
    return f_slice(c->b, in_x(c, "x", (CtShape){3, {2, 5, 3}}), 1, 1, 5, 2);
}

/* x [2, 6, 3] in unit-step slices of dim 1, each used differently: v 0
 * slices that tile the dim (autodiff's one concat of their gradients), 1
 * with a gap, 2 overlapping, with x itself used too. */
static ValueId case_split(GradCase *c, int v)
{
    static const int64_t at[][3][2] = {{{3, 6}, {0, 2}, {2, 3}}, {{3, 6}, {0, 2}, {0, 0}}, {{2, 6}, {0, 4}, {0, 0}}};
    Builder *b = c->b;
    ValueId x = in_x(c, "x", (CtShape){3, {2, 6, 3}}), ys[4];
    int n = 0;
    for (int k = 0; k < 3 && at[v][k][1] > 0; k++) {
        ValueId s = f_slice(b, x, 1, at[v][k][0], at[v][k][1], 1);
        ys[n++] = k == 0 ? f_mul(b, s, s) : k == 1 ? f_scale_shift(b, s, -2, 1) : s;
    }
    if (v == 2)
        ys[n++] = x;
    return f_concat(b, n, ys, 1);
}

/* SAME padding's asymmetric zeros, a crop of every side, and both at once
 * with a value (which has no gradient): the VJP is pad(-amounts). */
static ValueId case_pad(GradCase *c, int v)
{
    static const int64_t a[][4] = {{0, 1, 1, 2}, {-1, -1, -2, -1}, {2, -1, -1, 1}};
    return f_pad(c->b, in_x(c, "x", (CtShape){4, {2, 2, 3, 4}}), a[v][0], a[v][1], a[v][2], a[v][3], v == 2 ? -1.5 : 0);
}

/* A bias table [T=5, 3] at a [4, 4] i32 index (each row taken three or four
 * times, so its gradient sums them); dim 1 at an i64 index of -1 .. 4 into
 * T=4, the out-of-range -1 and 4 taking nothing; the last dim. */
static ValueId case_gather(GradCase *c, int v)
{
    static const struct {
        CtShape x, index;
        int dim;
        CtDType dt;
        int64_t lo, values;
    } k[] = {{{2, {5, 3}}, {2, {4, 4}}, 0, CT_I32, 0, 5},
             {{3, {2, 4, 3}}, {1, {7}}, 1, CT_I64, -1, 6},
             {{3, {2, 3, 4}}, {2, {2, 3}}, 2, CT_I32, 0, 4}};
    ValueId x = in_x(c, "x", k[v].x);
    ValueId i = add_input(c, "index", k[v].index, k[v].dt,
                          (InSpec){.kind = IN_INDEX, .lo = (double)k[v].lo, .classes = k[v].values});
    return f_gather(c->b, x, k[v].dim, i);
}

static ValueId case_concat(GradCase *c, int v)
{
    ValueId xs[3];
    for (int k = 0; k < 3; k++)
        xs[k] = in_x(c, "x", (CtShape){3, {2, k + 1, 3}});
    return f_concat(c->b, 3, xs, 1);
}

static ValueId case_expand(GradCase *c, int v)
{
    return f_expand(c->b, in_x(c, "x", (CtShape){3, {1, 3, 1}}), 3, (int64_t[]){2, 3, 4});
}

/* Sums dims 0 and 2 of [2,3,4], dropping or keeping them; variant 2 the
 * product of two such (both gradients). */
static ValueId case_reduce_sum(GradCase *c, int v)
{
    ValueId x[2] = {in_x(c, "x", (CtShape){3, {2, 3, 4}}), v == 2 ? in_x(c, "f", (CtShape){3, {2, 3, 4}}) : -1};
    return b_node(c->b, CT_OP_reduce_sum, v == 2 ? 2 : 1, x, (int64_t[]){5, v == 1}, 2, NULL, 0, 0);
}

static ValueId case_softmax(GradCase *c, int v) { return f_softmax(c->b, in_x(c, "x", (CtShape){3, {2, 3, 4}}), 1); }

/* 3 queries over 5 keys/values; variants 1-4 add a bias on the scores of
 * shape [2 or 1, 2 or 1, 3, 5] (1: a parameter [1, H, N, M], as timm's
 * relative-position tables; 2: [B, 1, N, M]; 3: full; 4: [1, 1, N, M]);
 * 5: a bias [B, 1, N, M] that is no differentiated input (a mask), so
 * sdpa_grad gives no dbias. */
static ValueId case_sdpa(GradCase *c, int v)
{
    static const int64_t bias[][2] = {{0, 0}, {1, 2}, {2, 1}, {2, 2}, {1, 1}, {2, 1}};
    int64_t B = v ? 2 : 1;
    ValueId q = in_x(c, "q", (CtShape){4, {B, 2, 3, 4}});
    ValueId k = in_x(c, "k", (CtShape){4, {B, 2, 5, 4}}), val = in_x(c, "v", (CtShape){4, {B, 2, 5, 4}});
    if (!v)
        return f_sdpa(c->b, q, k, val, 0.5);
    CtShape bs = {4, {bias[v][0], bias[v][1], 3, 5}};
    ValueId a = v == 1   ? b_param(c->b, "rel_bias", bs, init_uniform(1))
                : v == 5 ? add_input(c, "mask", bs, CT_F64, (InSpec){.kind = IN_WEIGHT})
                         : in_x(c, "bias", bs);
    return f_sdpa_bias(c->b, q, k, val, a, 0.5);
}

/* The packed form: 2 batches of 4 tokens, qkv [2, 4, 3, 2, 3]; variant 1
 * with a bias parameter [1, H, N, N], variant 2 through f_attention_qkv
 * (a [2, 4, 18] projection's output in, [2, 4, 6] out). */
static ValueId case_sdpa_qkv(GradCase *c, int v)
{
    if (v == 2)
        return f_attention_qkv(c->b, in_x(c, "qkv", (CtShape){3, {2, 4, 18}}), 2, -1, 0.5);
    ValueId qkv = in_x(c, "qkv", (CtShape){5, {2, 4, 3, 2, 3}});
    ValueId a = v ? b_param(c->b, "rel_bias", (CtShape){4, {1, 2, 4, 4}}, init_uniform(1)) : -1;
    return f_sdpa_qkv(c->b, qkv, a, 0.5);
}

static ValueId case_dropout(GradCase *c, int v)
{
    if (v)
        return f_drop_path(c->b, in_x(c, "x", (CtShape){3, {8, 2, 3}}), 0.3);
    return f_dropout(c->b, in_x(c, "x", (CtShape){2, {4, 5}}), 0.3);
}

/* cross_entropy with smoothing 0 and 0.1 over logits [3,5]. */
static ValueId case_cross_entropy(GradCase *c, int v)
{
    ValueId x = in_x(c, "logits", (CtShape){2, {3, 5}}), t = in_classes(c, "target", 3, 5);
    return b_node(c->b, CT_OP_cross_entropy, 2, (ValueId[]){x, t}, NULL, 0, (double[]){v ? 0.1 : 0}, 1, 0);
}

static ValueId case_soft_target(GradCase *c, int v)
{
    ValueId x = in_x(c, "logits", (CtShape){2, {3, 5}}), t = in_prob(c, "target", (CtShape){2, {3, 5}});
    return b_node(c->b, CT_OP_soft_target_cross_entropy, 2, (ValueId[]){x, t}, NULL, 0, NULL, 0, 0);
}

/* binary_cross_entropy {smoothing, threshold, pos_weight; sum_classes}:
 * plain, smoothed, smoothed and binarised; on probability targets, plain
 * and binarised; a positive weight, summed over classes, on both. */
static ValueId case_bce(GradCase *c, int v)
{
    static const double f[][3] = {{0, -1, 0}, {0.1, -1, 0}, {0.1, 0.2, 0}, {0, -1, 0}, {0, 0.25, 0}, {0.1, -1, 2.5},
                                  {0, -1, 0.4}};
    ValueId x = in_x(c, "logits", (CtShape){2, {3, 5}});
    ValueId t = v == 3 || v == 4 || v == 6 ? in_prob(c, "target", (CtShape){2, {3, 5}}) : in_classes(c, "target", 3, 5);
    return b_node(c->b, CT_OP_binary_cross_entropy, 2, (ValueId[]){x, t}, (int64_t[]){v >= 5}, 1, f[v], 3, 0);
}

/* jsd_cross_entropy {num_splits; smoothing, alpha}: 2 splits of 3
 * unsmoothed, 3 smoothed with timm's alpha 12. */
static ValueId case_jsd(GradCase *c, int v)
{
    int s = 2 + v;
    ValueId x = in_x(c, "logits", (CtShape){2, {3 * s, 5}}), t = in_classes(c, "target", 3 * s, 5);
    return b_node(c->b, CT_OP_jsd_cross_entropy, 2, (ValueId[]){x, t}, (int64_t[]){s}, 1,
                  (double[]){v ? 0.1 : 0, v ? 12 : 1}, 2, 0);
}

/* conv -> BN (train) -> relu -> + x -> global pool -> linear -> cross
 * entropy: x feeds both the conv and the residual add, so its gradient is a
 * sum over two paths. */
static ValueId case_composite(GradCase *c, int v)
{
    Builder *b = c->b;
    ValueId x = in_x(c, "x", (CtShape){4, {2, 3, 4, 4}});
    ValueId h = nn_conv2d(b, "conv", x, 3, 3, (ConvOpts){.padding = 1});
    h = f_relu(b, nn_batch_norm(b, "bn", h, (BNOpts){0}));
    h = f_global_avg_pool(b, f_add(b, h, x));
    ValueId logits = nn_linear(b, "fc", h, 4, (LinearOpts){0});
    ValueId t = in_classes(c, "target", 2, 4);
    return b_node(b, CT_OP_cross_entropy, 2, (ValueId[]){logits, t}, NULL, 0, (double[]){0.1}, 1, 0);
}

typedef struct CaseDef {
    const char *name;
    CaseFn build;
    int variant, training;
    TolKind tol;
    double seed; /* gradient seed given to autodiff as a runtime scalar; 0: none (1) */
} CaseDef;

static const CaseDef cases[] = {
    {"conv2d 3x3 pad 1 bias", case_conv, 0, 0, TOL_LINEAR, 0},
    {"conv2d stride 2 dilation 2", case_conv, 1, 0, TOL_LINEAR, 0},
    {"conv2d groups 2 no bias", case_conv, 2, 0, TOL_LINEAR, 0},
    {"conv2d depthwise", case_conv, 3, 0, TOL_LINEAR, 0},
    {"conv2d 1x1 stride 2", case_conv, 4, 0, TOL_LINEAR, 0},
    {"conv2d non-square input", case_conv, 5, 0, TOL_LINEAR, 0},
    {"conv2d 2x3 kernel, per-axis stride/pad/dilation", case_conv_asym, 0, 0, TOL_LINEAR, 0},
    {"batch_norm train [N,C,H,W]", case_batch_norm, 0, 1, TOL_NORM, 0},
    {"batch_norm train [N,C]", case_batch_norm, 1, 1, TOL_NORM, 0},
    {"batch_norm eval", case_batch_norm, 0, 0, TOL_NORM, 0},
    {"layer_norm", case_layer_norm, 0, 0, TOL_NORM, 0},
    {"group_norm groups 2 [N,C,H,W]", case_group_norm, 0, 0, TOL_NORM, 0},
    {"group_norm groups = C [N,C,H,W]", case_group_norm, 1, 0, TOL_NORM, 0},
    {"group_norm groups 1 [N,C,L]", case_group_norm, 2, 0, TOL_NORM, 0},
    {"group_norm groups 2 [N,C]", case_group_norm, 3, 0, TOL_NORM, 0},
    {"std conv: group_norm without affine", case_std_conv, 0, 0, TOL_NORM, 0},
    {"scaled std conv: group_norm with a weight only", case_std_conv, 1, 0, TOL_NORM, 0},
    {"linear 2-D bias", case_linear, 0, 0, TOL_LINEAR, 0},
    {"linear 3-D bias", case_linear, 1, 0, TOL_LINEAR, 0},
    {"linear 2-D no bias", case_linear, 2, 0, TOL_LINEAR, 0},
    {"linear 3-D no bias", case_linear, 3, 0, TOL_LINEAR, 0},
    {"matmul batched", case_matmul, 0, 0, TOL_LINEAR, 0},
    {"matmul shared rhs", case_matmul, 1, 0, TOL_LINEAR, 0},
    {"matmul batched a^T", case_matmul, 2, 0, TOL_LINEAR, 0},
    {"matmul shared rhs a^T", case_matmul, 3, 0, TOL_LINEAR, 0},
    {"matmul batched b^T", case_matmul, 4, 0, TOL_LINEAR, 0},
    {"matmul shared rhs b^T", case_matmul, 5, 0, TOL_LINEAR, 0},
    {"matmul batched a^T b^T", case_matmul, 6, 0, TOL_LINEAR, 0},
    {"matmul shared rhs a^T b^T", case_matmul, 7, 0, TOL_LINEAR, 0},
    {"relu", case_activation, 0, 0, TOL_SMOOTH, 0},
    {"gelu erf", case_activation, 1, 0, TOL_SMOOTH, 0},
    {"gelu tanh", case_activation, 2, 0, TOL_SMOOTH, 0},
    {"silu", case_activation, 3, 0, TOL_SMOOTH, 0},
    {"sigmoid", case_activation, 4, 0, TOL_SMOOTH, 0},
    {"hard_swish", case_activation, 5, 0, TOL_SMOOTH, 0},
    {"hard_sigmoid", case_activation, 6, 0, TOL_SMOOTH, 0},
    {"rsqrt", case_activation, 7, 0, TOL_SMOOTH, 0},
    {"sqrt", case_activation, 8, 0, TOL_SMOOTH, 0},
    {"exp", case_activation, 9, 0, TOL_SMOOTH, 0},
    {"clamp -3, 3", case_activation, 10, 0, TOL_SMOOTH, 0},
    {"clamp max 3", case_activation, 11, 0, TOL_SMOOTH, 0},
    {"F.normalize dim -1 (rsqrt of a clamped sum of squares)", case_normalize, 0, 0, TOL_NORM, 0},
    {"add [2,3,4]+[4]", case_add, 0, 0, TOL_LINEAR, 0},
    {"add [4]+[2,3,4]", case_add, 1, 0, TOL_LINEAR, 0},
    {"add [2,1,4]+[1,3,1]", case_add, 2, 0, TOL_LINEAR, 0},
    {"add same shape", case_add, 3, 0, TOL_LINEAR, 0},
    {"mul [2,3,4]*[4]", case_mul, 0, 0, TOL_SMOOTH, 0},
    {"mul [4]*[2,3,4]", case_mul, 1, 0, TOL_SMOOTH, 0},
    {"mul [2,1,4]*[1,3,1]", case_mul, 2, 0, TOL_SMOOTH, 0},
    {"mul same shape", case_mul, 3, 0, TOL_SMOOTH, 0},
    {"div [2,3,4]/[4]", case_div, 0, 0, TOL_SMOOTH, 0},
    {"div [4]/[2,3,4]", case_div, 1, 0, TOL_SMOOTH, 0},
    {"div [2,1,4]/[1,3,1]", case_div, 2, 0, TOL_SMOOTH, 0},
    {"div same shape", case_div, 3, 0, TOL_SMOOTH, 0},
    {"scale_shift", case_scale_shift, 0, 0, TOL_LINEAR, 0},
    {"avg_pool2d 2x2/2 ceil, no count_include_pad, 5x7", case_pool, 0, 0, TOL_LINEAR, 0},
    {"avg_pool2d 3x3/2 pad 1 count_include_pad", case_pool, 1, 0, TOL_LINEAR, 0},
    {"max_pool2d 3x3/2 pad 1", case_pool, 2, 0, TOL_LINEAR, 0},
    {"adaptive_avg_pool2d 5x7 -> 3x2", case_pool, 3, 0, TOL_LINEAR, 0},
    {"global avg pool", case_pool, 4, 0, TOL_LINEAR, 0},
    {"avg_pool2d 3x3/2 pad 1 ceil count_include_pad 6x8", case_pool, 5, 0, TOL_LINEAR, 0},
    {"reshape", case_reshape, 0, 0, TOL_LINEAR, 0},
    {"to_layout", case_to_layout, 0, 0, TOL_LINEAR, 0},
    {"cast", case_cast, 0, 0, TOL_LINEAR, 0},
    {"permute", case_permute, 0, 0, TOL_LINEAR, 0},
    {"slice 1:5:2 on dim 1", case_slice, 0, 0, TOL_LINEAR, 0},
    {"concat of 3", case_concat, 0, 0, TOL_LINEAR, 0},
    {"slices tiling dim 1", case_split, 0, 0, TOL_SMOOTH, 0},
    {"slices with a gap", case_split, 1, 0, TOL_SMOOTH, 0},
    {"overlapping slices and their input", case_split, 2, 0, TOL_SMOOTH, 0},
    {"pad 0,1,1,2", case_pad, 0, 0, TOL_LINEAR, 0},
    {"pad -1,-1,-2,-1 (crop)", case_pad, 1, 0, TOL_LINEAR, 0},
    {"pad 2,-1,-1,1 value -1.5", case_pad, 2, 0, TOL_LINEAR, 0},
    {"gather dim 0, repeated i32 indices", case_gather, 0, 0, TOL_LINEAR, 0},
    {"gather dim 1, i64 indices out of range", case_gather, 1, 0, TOL_LINEAR, 0},
    {"gather dim 2 (last)", case_gather, 2, 0, TOL_LINEAR, 0},
    {"expand [1,3,1] -> [2,3,4]", case_expand, 0, 0, TOL_LINEAR, 0},
    {"reduce_sum keepdim 0", case_reduce_sum, 0, 0, TOL_LINEAR, 0},
    {"reduce_sum keepdim 1", case_reduce_sum, 1, 0, TOL_LINEAR, 0},
    {"reduce_sum of a product", case_reduce_sum, 2, 0, TOL_LINEAR, 0},
    {"softmax dim 1", case_softmax, 0, 0, TOL_SMOOTH, 0},
    {"sdpa N=3 M=5", case_sdpa, 0, 0, TOL_SMOOTH, 0},
    {"sdpa bias parameter [1,H,N,M]", case_sdpa, 1, 0, TOL_SMOOTH, 0},
    {"sdpa bias [B,1,N,M]", case_sdpa, 2, 0, TOL_SMOOTH, 0},
    {"sdpa bias [B,H,N,M]", case_sdpa, 3, 0, TOL_SMOOTH, 0},
    {"sdpa bias [1,1,N,M]", case_sdpa, 4, 0, TOL_SMOOTH, 0},
    {"sdpa mask [B,1,N,M] (no dbias)", case_sdpa, 5, 0, TOL_SMOOTH, 0},
    {"sdpa packed qkv", case_sdpa_qkv, 0, 0, TOL_SMOOTH, 0},
    {"sdpa packed qkv, bias parameter [1,H,N,N]", case_sdpa_qkv, 1, 0, TOL_SMOOTH, 0},
    {"attention from a qkv projection", case_sdpa_qkv, 2, 0, TOL_SMOOTH, 0},
    {"dropout p=0.3", case_dropout, 0, 1, TOL_LINEAR, 0},
    {"drop_path p=0.3", case_dropout, 1, 1, TOL_LINEAR, 0},
    {"cross_entropy", case_cross_entropy, 0, 0, TOL_LOSS, 0},
    {"cross_entropy smoothing 0.1", case_cross_entropy, 1, 0, TOL_LOSS, 0},
    {"soft_target_cross_entropy", case_soft_target, 0, 0, TOL_LOSS, 0},
    {"binary_cross_entropy", case_bce, 0, 0, TOL_LOSS, 0},
    {"binary_cross_entropy smoothing 0.1", case_bce, 1, 0, TOL_LOSS, 0},
    {"binary_cross_entropy smoothing 0.1 threshold 0.2", case_bce, 2, 0, TOL_LOSS, 0},
    {"binary_cross_entropy soft targets", case_bce, 3, 0, TOL_LOSS, 0},
    {"binary_cross_entropy soft targets threshold 0.25", case_bce, 4, 0, TOL_LOSS, 0},
    {"binary_cross_entropy smoothing 0.1 pos_weight 2.5 sum", case_bce, 5, 0, TOL_LOSS, 0},
    {"binary_cross_entropy soft targets pos_weight 0.4 sum", case_bce, 6, 0, TOL_LOSS, 0},
    {"jsd_cross_entropy 2 splits", case_jsd, 0, 0, TOL_LOSS, 0},
    {"jsd_cross_entropy 3 splits smoothing 0.1 alpha 12", case_jsd, 1, 0, TOL_LOSS, 0},
    {"conv-bn-relu-residual-pool-linear-ce", case_composite, 0, 1, TOL_COMPOSITE, 0},
    {"the same, loss seed 256", case_composite, 0, 1, TOL_COMPOSITE, 256},
    {"layer_norm, loss seed 0.125", case_layer_norm, 0, 0, TOL_NORM, 0.125},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

/* --------------------------------------------------------------- harness */

typedef struct Totals {
    int cases, tensors;
    long elements;
    double worst[NTOLS]; /* largest |analytic - numeric| / tolerance per family: the margin left */
    char worst_at[NTOLS][160];
    int covered[CT_NOPS];
} Totals;

/* A built case ready to run: graph with loss and gradients, its state (and
 * the copy each run starts from, so BN's running-stat assigns cannot drift
 * between runs), and its input tensors. */
typedef struct Prepared {
    Graph g;
    CtState s;
    unsigned char *base;
    CtTensor in[MAX_CASE_INPUTS];
    int nin;
    ValueId *wrt, *grads;
    int nwrt;
} Prepared;

static void prepared_free(Prepared *p)
{
    for (int k = 0; k < p->nin; k++)
        tensor_free(&p->in[k]);
    free(p->base);
    free(p->wrt);
    free(p->grads);
    state_free(&p->s);
    graph_free(&p->g);
}

/* L = sum(y * W) over all of y's dims, or y itself for a scalar. */
static ValueId weighted_loss(GradCase *c, ValueId y)
{
    const CtShape *s = b_shape(c->b, y);
    if (y < 0 || s->ndim == 0)
        return y;
    CtShape shape = *s;
    ValueId w = add_input(c, "W", shape, CT_F64, (InSpec){.kind = IN_WEIGHT});
    ValueId p = b_node(c->b, CT_OP_mul, 2, (ValueId[]){y, w}, NULL, 0, NULL, 0, 0);
    return b_node(c->b, CT_OP_reduce_sum, 1, &p, (int64_t[]){((int64_t)1 << shape.ndim) - 1, 0}, 2, NULL, 0, 0);
}

static const InSpec *spec_of(const GradCase *c, ValueId v)
{
    for (int k = 0; k < c->nin; k++)
        if (c->in[k].v == v)
            return &c->in[k];
    return NULL;
}

/* Differentiates L (times the seed input, if any) w.r.t. every
 * differentiated input and every parameter; marks L (output 0) and the
 * gradients (outputs 1..nwrt). */
static int add_gradients(Prepared *p, const GradCase *c, ValueId loss, ValueId seed, const char *name)
{
    CtErr err;
    int nv = p->g.nvalues;
    p->wrt = malloc((size_t)nv * sizeof *p->wrt);
    p->grads = malloc((size_t)nv * sizeof *p->grads);
    CT_ASSERT(p->wrt && p->grads);
    for (ValueId v = 0; v < nv; v++) {
        const Value *val = graph_value(&p->g, v);
        const InSpec *in = spec_of(c, v);
        if (val->role == CT_ROLE_PARAM ||
            (val->role == CT_ROLE_INPUT && in && (in->kind == IN_DIFF || in->kind == IN_PROBED)))
            p->wrt[p->nwrt++] = v;
    }
    if (autodiff(&p->g, loss, seed, p->wrt, p->nwrt, p->grads, &err)) {
        CHECKF(0, "%s: autodiff failed: %s", name, err.msg);
        return -1;
    }
    graph_mark_output(&p->g, loss);
    for (int k = 0; k < p->nwrt; k++)
        graph_mark_output(&p->g, p->grads[k]);
    return 0;
}

/* Creates and fills the state and the input tensors (in value order, as the
 * backend takes them). */
static void make_data(Prepared *p, const GradCase *c, int case_index)
{
    uint64_t stream = (uint64_t)case_index * 64;
    state_create(&p->s, &p->g);
    fill_state(&p->s, stream);
    p->base = malloc(p->s.nbytes ? p->s.nbytes : 1);
    CT_ASSERT(p->base != NULL);
    memcpy(p->base, p->s.data, p->s.nbytes);
    for (ValueId v = 0; v < p->g.nvalues; v++) {
        const Value *val = graph_value(&p->g, v);
        if (val->role != CT_ROLE_INPUT)
            continue;
        const InSpec *in = spec_of(c, v);
        CT_ASSERT(in != NULL && p->nin < MAX_CASE_INPUTS);
        tensor_alloc(&p->in[p->nin], val->type);
        fill_input(in, stream + (uint64_t)p->nin, &p->in[p->nin]);
        p->nin++;
    }
}

/* Builds case `ci`: the case's graph, the weighted loss, the gradients and
 * the data. Records which ops the case itself built, for the coverage check. */
static int prepare(Prepared *p, int ci, Totals *tot)
{
    const CaseDef *def = &cases[ci];
    Builder b;
    GradCase c = {.b = &b};
    CtErr err;
    memset(p, 0, sizeof *p);
    graph_init(&p->g);
    b_init(&b, &p->g, def->training);
    b.param_dtype = CT_F64;
    ValueId y = def->build(&c, def->variant);
    for (int i = 0; i < p->g.nnodes; i++)
        tot->covered[p->g.nodes[i].op] = 1;
    ValueId loss = weighted_loss(&c, y), seed = -1;
    if (def->seed != 0)
        seed = add_input(&c, "seed", (CtShape){0}, CT_F64, (InSpec){.kind = IN_SEED, .amp = def->seed});
    if (b_finish(&b, &err)) {
        CHECKF(0, "%s: build failed: %s", def->name, err.msg);
        return -1;
    }
    if (add_gradients(p, &c, loss, seed, def->name))
        return -1;
    make_data(p, &c, ci);
    return 0;
}

/* Runs the graph from the base state; outputs go to out (caller frees). */
static int run(Prepared *p, CtTensor *out, const char *name)
{
    CtErr err;
    memcpy(p->s.data, p->base, p->s.nbytes);
    if (backend_run_once(&ct_backend_ref, &p->g, &p->s, p->in, p->nin, out, NULL, &err)) {
        CHECKF(0, "%s: run failed: %s", name, err.msg);
        return -1;
    }
    return 0;
}

/* L at the current inputs and base state; NAN when the run fails. */
static double loss_at(Prepared *p, const char *name)
{
    CtTensor *out = calloc((size_t)p->g.noutputs, sizeof *out);
    CT_ASSERT(out != NULL);
    double l = run(p, out, name) ? NAN : *(const double *)out[0].data;
    for (int k = 0; k < p->g.noutputs; k++)
        tensor_free(&out[k]);
    free(out);
    return l;
}

/* The storage a perturbation of wrt value v writes: the input tensor, or
 * the parameter's slice of the base state. */
static double *wrt_data(Prepared *p, ValueId v)
{
    if (graph_value(&p->g, v)->role == CT_ROLE_PARAM) {
        int j = state_find(&p->s, graph_value(&p->g, v)->name);
        CT_ASSERT(j >= 0 && p->s.e[j].type.dtype == CT_F64);
        return (double *)(p->base + p->s.e[j].offset);
    }
    int k = 0;
    for (ValueId u = 0; u < v; u++)
        k += graph_value(&p->g, u)->role == CT_ROLE_INPUT;
    return p->in[k].data;
}

/* Element j of the sample: every element of a small tensor, else
 * MAX_CHECKED evenly spread from the first to the last. */
static int64_t sample_count(int64_t n) { return n <= MAX_CHECKED ? n : MAX_CHECKED; }
static int64_t sample_index(int64_t n, int64_t j) { return n <= MAX_CHECKED ? j : j * (n - 1) / (MAX_CHECKED - 1); }

/* (L(x + h) - L(x - h)) / 2h for element i of x, which is left as it was. */
static double central_difference(Prepared *p, double *x, int64_t i, double h, const char *name)
{
    double orig = x[i];
    x[i] = orig + h;
    double lp = loss_at(p, name);
    x[i] = orig - h;
    double lm = loss_at(p, name);
    x[i] = orig;
    return (lp - lm) / (2 * h);
}

/* Compares one tensor's analytic gradient with the central differences
 * (times the seed); returns the number of mismatching elements. */
static int check_tensor(Prepared *p, int ci, ValueId v, const double *analytic, Totals *tot)
{
    const CaseDef *def = &cases[ci];
    double h = tolerances[def->tol].h, atol = tolerances[def->tol].atol, rtol = tolerances[def->tol].rtol;
    double seed = def->seed != 0 ? def->seed : 1;
    const char *tensor = graph_value(&p->g, v)->name;
    int64_t n = shape_numel(&graph_value(&p->g, v)->type.shape);
    double *x = wrt_data(p, v);
    int bad = 0;
    for (int64_t j = 0; j < sample_count(n); j++) {
        int64_t i = sample_index(n, j);
        double numeric = seed * central_difference(p, x, i, h, def->name);
        double diff = fabs(analytic[i] - numeric), tol = atol + rtol * fabs(numeric);
        tot->elements++;
        if (!(diff / tol <= tot->worst[def->tol])) { /* NaN counts as worst */
            tot->worst[def->tol] = isnan(diff) ? INFINITY : diff / tol;
            snprintf(tot->worst_at[def->tol], sizeof tot->worst_at[0], "%s, %s[%lld]", def->name, tensor,
                     (long long)i);
        }
        if (diff <= tol)
            continue;
        if (bad++ < MAX_REPORTED)
            fprintf(stderr, "  %s: d/d %s[%lld]: analytic %.12g, numeric %.12g (|diff| %.3g > tol %.3g)\n",
                    def->name, tensor, (long long)i, analytic[i], numeric, diff, tol);
    }
    CHECKF(bad == 0, "%s: gradient of %s wrong in %d of %lld checked elements", def->name, tensor, bad,
           (long long)sample_count(n));
    return bad;
}

static void run_case(int ci, Totals *tot)
{
    Prepared p;
    if (prepare(&p, ci, tot)) {
        prepared_free(&p);
        return;
    }
    CtTensor *out = calloc((size_t)p.g.noutputs, sizeof *out);
    CT_ASSERT(out != NULL);
    if (run(&p, out, cases[ci].name) == 0) {
        for (int k = 0; k < p.nwrt; k++)
            check_tensor(&p, ci, p.wrt[k], out[1 + k].data, tot);
        tot->tensors += p.nwrt;
        tot->cases++;
        for (int k = 0; k < p.g.noutputs; k++)
            tensor_free(&out[k]);
    }
    free(out);
    prepared_free(&p);
}

/* Fails for each op with a VJP rule that no case built. */
static void check_coverage(const Totals *tot)
{
    for (int op = 0; op < CT_NOPS; op++)
        CHECKF(!op_def((CtOp)op)->vjp || tot->covered[op], "op %s has a VJP rule but no gradient case",
               op_def((CtOp)op)->name);
}

/* The slices' gradients of the case_split cases: one concat and no
 * slice_grad where they tile the dim, slice_grad where they do not. */
static void test_split_grads(void)
{
    static const struct {
        const char *name;
        int slice_grads;
    } want[] = {{"slices tiling dim 1", 0}, {"slices with a gap", 2}, {"overlapping slices and their input", 2}};
    static Totals tot;
    for (size_t k = 0; k < sizeof want / sizeof *want; k++)
        for (int ci = 0; ci < NCASES; ci++) {
            if (strcmp(cases[ci].name, want[k].name))
                continue;
            Prepared p;
            if (prepare(&p, ci, &tot) == 0) {
                int n = 0;
                for (int i = 0; i < p.g.nnodes; i++)
                    n += p.g.nodes[i].op == CT_OP_slice_grad;
                CHECKF(n == want[k].slice_grads, "%s: %d slice_grad nodes, want %d", want[k].name, n,
                       want[k].slice_grads);
            }
            prepared_free(&p);
        }
}

/* autodiff refuses, with a message and without touching the graph, an
 * empty wrt list, a loss that is not a scalar and a seed that is not one. */
static void test_autodiff_errors(void)
{
    Graph g;
    Builder b;
    CtErr err = {{0}};
    graph_init(&g);
    b_init(&b, &g, 0);
    b.param_dtype = CT_F64;
    ValueId x = b_input(&b, "x", (CtShape){2, {2, 3}}, CT_F64);
    ValueId y = f_relu(&b, x);
    ValueId loss = b_node(&b, CT_OP_reduce_sum, 1, &y, (int64_t[]){3, 0}, 2, NULL, 0, 0);
    CHECK(b_finish(&b, &err) == 0);
    int nodes = g.nnodes, nvalues = g.nvalues;
    ValueId grad = -1;

    err.msg[0] = '\0';
    CHECK(autodiff(&g, loss, -1, NULL, 0, &grad, &err) == -1);
    CHECKF(strstr(err.msg, "autodiff") && strstr(err.msg, "nothing to differentiate"),
           "no wrt: unclear message '%s'", err.msg);

    err.msg[0] = '\0';
    CHECK(autodiff(&g, y, -1, &x, 1, &grad, &err) == -1);
    CHECKF(strstr(err.msg, "autodiff") && strstr(err.msg, "scalar"), "non-scalar loss: unclear message '%s'",
           err.msg);

    err.msg[0] = '\0';
    CHECK(autodiff(&g, loss, x, &x, 1, &grad, &err) == -1);
    CHECKF(strstr(err.msg, "autodiff") && strstr(err.msg, "seed"), "non-scalar seed: unclear message '%s'", err.msg);
    CHECKF(g.nnodes == nodes && g.nvalues == nvalues, "a failed autodiff changed the graph");
    graph_free(&g);
}

int main(void)
{
    static Totals tot;
    for (int ci = 0; ci < NCASES; ci++)
        run_case(ci, &tot);
    check_coverage(&tot);
    test_split_grads();
    test_autodiff_errors();
    printf("test_grad: %d of %d cases, %d tensors, %ld elements checked; worst |error|/tolerance:\n", tot.cases,
           NCASES, tot.tensors, tot.elements);
    for (int k = 0; k < NTOLS; k++)
        printf("  %-64s %.3g (%s)\n", tolerances[k].family, tot.worst[k], tot.worst_at[k]);
    return check_done("test_grad");
}
