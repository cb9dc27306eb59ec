/*
 * NaN and infinities through the ops as PyTorch propagates them: every
 * activation (forward and gradient), clamp and the clip factor, pooling, pad, gather,
 * softmax, the losses, the norms, reductions, attention and the optimizer
 * updates, each on the ref backend, the cpu backend (compiled kernels for
 * elementwise work) and the cpu backend's node kernels, against what torch
 * gives; and one NaN weight in test_resnet giving NaN logits and a NaN loss,
 * as it does in timm, instead of hiding behind a ReLU.
 *
 * torch's rules (aten/src/ATen/native/cpu and cuda kernels):
 *   relu(NaN) = NaN (clamp_min); relu's backward is threshold_backward on
 *     the result, 0 where result <= 0 else dy: dy at a NaN input, and 0 where
 *     x <= 0 even for a NaN or infinite dy (a select, not dy * 0);
 *   hardsigmoid_backward: dy / 6 inside (-3, 3), else 0 (NaN x too);
 *   hardswish_backward: 0 below -3, dy (x/3 + 1/2) up to 3, else dy (NaN x);
 *   silu, gelu at -inf: -inf * 0 = NaN; clamp keeps NaN; max_pool2d: a NaN
 *     in the window wins (the last one, for the gradient's index);
 *   softmax (and attention's weights, a bias on the scores included): a row
 *     with a NaN or +inf is all NaN, as is a row all -inf; -inf gives 0;
 *   pad (constant_pad_nd): NaN and infinities move as they are, or are
 *     cropped away; the value, -inf too, fills the rest;
 *   gather (index_select): they move as they are; its gradient (index_add_)
 *     sums them into their rows (inf + -inf = NaN); an index out of range,
 *     which torch rejects, gives zeros and takes nothing (ctimm's rule);
 *   norms: a NaN in a row (layer_norm), channel (batch_norm, training) or
 *     a sample's group (group_norm) makes all of it NaN; in eval
 *     batch_norm's dx does not read x;
 *   clip_grad_norm_: a NaN gradient makes the total norm and so every
 *     clipped gradient NaN; timm's Lamb clamp_(min=1) of the norm keeps NaN.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_vectors.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "runtime/backend.h"
#include "runtime/cpu/compiled.h"

#define N NAN
#define I INFINITY
#define FIN 1e300 /* want: finite, any value */
#define MAX_EL 32

static const CtBackend *cpu, *ref;

typedef struct Arg {
    CtShape shape;
    CtDType dtype; /* 0: CT_F32 */
    double v[MAX_EL];
} Arg;

/* One node on inputs with NaN or infinities; want[k]: output k per element
 * (NaN, an infinity, FIN or a value) for the first `check` outputs; check
 * LIKE_REF: every output as the ref backend's instead (NaN and infinities
 * where it has them, finite values within 1e-4). */
typedef struct NanCase {
    const char *what;
    CtOp op;
    int nin;
    Arg in[CT_MAX_IN];
    int64_t iattr[CT_MAX_IATTR];
    double fattr[CT_MAX_FATTR];
    double want[CT_MAX_OUT][MAX_EL];
    int check;
} NanCase;

enum { LIKE_REF = -1 };

static int matches(double got, double want)
{
    if (isnan(want))
        return isnan(got);
    if (want == FIN)
        return isfinite(got);
    if (isinf(want) || isinf(got))
        return got == want;
    return fabs(got - want) <= 1e-4 * (1 + fabs(want));
}

static void check_output(const char *what, const char *be, int k, const CtTensor *got, const double *want)
{
    int64_t n = shape_numel(&got->type.shape);
    double v[MAX_EL];
    CT_ASSERT(n <= MAX_EL);
    elems_to_double(got->data, got->type.dtype, n, v);
    for (int64_t i = 0; i < n; i++)
        if (want[i] == FIN)
            CHECKF(matches(v[i], want[i]), "%s on %s: output %d element %lld is %g, want a finite value", what, be, k,
                   (long long)i, v[i]);
        else
            CHECKF(matches(v[i], want[i]), "%s on %s: output %d element %lld is %g, want %g", what, be, k,
                   (long long)i, v[i], want[i]);
}

/* The node's outputs from cpu_run_node, the node-by-node kernels (the
 * activations' own loops, which the compiled path does not run). */
static void run_cpu_node(const Graph *g, const Node *n, const CtTensor *in, CtTensor *out)
{
    void *pin[CT_MAX_IN], *pout[CT_MAX_OUT];
    for (int k = 0; k < n->nin; k++)
        pin[k] = in[k].data;
    for (int k = 0; k < n->nout; k++) {
        tensor_alloc(&out[k], g->values[n->out[k]].type);
        pout[k] = out[k].data;
    }
    cpu_run_node(g, n, pin, pout, NULL);
}

static void check_case(const NanCase *c)
{
    Graph g;
    CtErr err;
    CtTensor in[CT_MAX_IN], out[3][CT_MAX_OUT];
    Node n = {.op = c->op, .nin = c->nin};
    graph_init(&g);
    for (int k = 0; k < c->nin; k++) {
        CtType t = {c->in[k].shape, c->in[k].dtype};
        n.in[k] = graph_add_value(&g, t, CT_ROLE_INPUT, NULL);
        tensor_alloc(&in[k], t);
        elems_from_double(c->in[k].v, t.dtype, shape_numel(&t.shape), in[k].data);
    }
    memcpy(n.iattr, c->iattr, sizeof n.iattr);
    memcpy(n.fattr, c->fattr, sizeof n.fattr);
    int id = graph_add_node(&g, &n, c->what, &err);
    CHECKF(id >= 0, "%s: %s", c->what, err.msg);
    if (id < 0)
        goto free_inputs;
    const Node *node = &g.nodes[id];
    for (int k = 0; k < node->nout; k++)
        graph_mark_output(&g, node->out[k]);
    static const char *const names[] = {"ref", "cpu", "cpu node kernels"};
    int ran[3] = {0};
    for (int b = 0; b < 3; b++) {
        CtState st;
        state_create(&st, &g);
        if (b == 2) {
            run_cpu_node(&g, node, in, out[b]);
            ran[b] = 1;
        } else {
            ran[b] = backend_run_once(b ? cpu : ref, &g, &st, in, c->nin, out[b], NULL, &err) == 0;
            CHECKF(ran[b], "%s on %s: %s", c->what, names[b], err.msg);
        }
        state_free(&st);
    }
    for (int k = 0; k < node->nout; k++) {
        double want[MAX_EL];
        const double *w = k < c->check ? c->want[k] : NULL;
        if (c->check == LIKE_REF && ran[0]) {
            int64_t cnt = shape_numel(&out[0][k].type.shape);
            CT_ASSERT(cnt <= MAX_EL);
            elems_to_double(out[0][k].data, out[0][k].type.dtype, cnt, want);
            w = want;
        }
        for (int b = c->check == LIKE_REF; w && b < 3; b++)
            if (ran[b])
                check_output(c->what, names[b], k, &out[b][k], w);
    }
    for (int b = 0; b < 3; b++)
        for (int k = 0; ran[b] && k < node->nout; k++)
            tensor_free(&out[b][k]);
free_inputs:
    for (int k = 0; k < c->nin; k++)
        tensor_free(&in[k]);
    graph_free(&g);
}

#define V(...) {__VA_ARGS__}
#define S1(a) {1, {a}}
#define S2(a, b) {2, {a, b}}
#define S3(a, b, c) {3, {a, b, c}}
#define S4(a, b, c, d) {4, {a, b, c, d}}

static void test_activations(void)
{
    /* x: NaN, +inf, -inf, 0.5, -0.5, 0 */
    static const NanCase cases[] = {
        {"relu", CT_OP_relu, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {0}, {0}, {V(N, I, 0, 0.5, 0, 0)}, 1},
        {"sigmoid", CT_OP_sigmoid, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {0}, {0}, {V(N, 1, 0, FIN, FIN, 0.5)}, 1},
        {"silu", CT_OP_silu, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {0}, {0}, {V(N, I, N, FIN, FIN, 0)}, 1},
        {"gelu", CT_OP_gelu, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {0}, {0}, {V(N, I, N, FIN, FIN, 0)}, 1},
        {"gelu tanh", CT_OP_gelu, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {1}, {0}, {V(N, I, N, FIN, FIN, 0)}, 1},
        {"hard_sigmoid", CT_OP_hard_sigmoid, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {0}, {0},
         {V(N, 1, 0, FIN, FIN, 0.5)}, 1},
        {"hard_swish", CT_OP_hard_swish, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {0}, {0},
         {V(N, I, N, FIN, FIN, 0)}, 1},
        {"rsqrt", CT_OP_rsqrt, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {0}, {0}, {V(N, 0, N, FIN, N, I)}, 1},
        {"sqrt", CT_OP_sqrt, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {0}, {0}, {V(N, I, N, FIN, N, 0)}, 1},
        {"exp", CT_OP_exp, 1, {{S1(6), 0, V(N, I, -I, 0.5, -0.5, 0)}}, {0}, {0}, {V(N, I, 0, FIN, FIN, 1)}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i]);
}

/* act_grad(x, dy) at (x, dy): (NaN, 1), (1, NaN), (-1, NaN), (5, NaN),
 * (-5, NaN), (1, inf), (NaN, NaN), (-1, inf). */
static void test_activation_grads(void)
{
#define XDY {S1(8), 0, V(N, 1, -1, 5, -5, 1, N, -1)}, {S1(8), 0, V(1, N, N, N, N, I, N, I)}
    static const NanCase cases[] = {
        {"relu grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_relu}, {0}, {V(1, N, 0, N, 0, I, N, 0)}, 1},
        {"hard_sigmoid grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_hard_sigmoid}, {0}, {V(0, N, N, 0, 0, I, 0, I)}, 1},
        {"hard_swish grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_hard_swish}, {0}, {V(1, N, N, N, 0, I, N, I)}, 1},
        {"sigmoid grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_sigmoid}, {0}, {V(N, N, N, N, N, I, N, I)}, 1},
        {"silu grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_silu}, {0}, {V(N, N, N, N, N, I, N, I)}, 1},
        {"gelu grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_gelu}, {0}, {V(N, N, N, N, N, I, N, -I)}, 1},
        {"gelu tanh grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_gelu, 1}, {0}, {V(N, N, N, N, N, I, N, -I)}, 1},
        {"rsqrt grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_rsqrt}, {0}, {V(N, N, N, N, N, -I, N, N)}, 1},
        {"sqrt grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_sqrt}, {0}, {V(N, N, N, N, N, I, N, N)}, 1},
        {"exp grad", CT_OP_act_grad, 2, {XDY}, {CT_OP_exp}, {0}, {V(N, N, N, N, N, I, N, I)}, 1},
        /* torch's clamp_backward: where(lo <= x <= hi, dy, 0) */
        {"clamp grad", CT_OP_clamp_grad, 2, {XDY}, {0}, {-1, 1}, {V(0, N, N, 0, 0, I, 0, I)}, 1},
    };
#undef XDY
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i]);
}

/* clamp and the clip factor; the total norm of clip_grad_norm_ over a
 * NaN gradient (sum of squares, factor, scaled gradients: all NaN); SGD
 * and AdamW where one gradient is NaN; timm's Lamb with a NaN norm to clip
 * by; Lars whose trust ratio is NaN (an infinite weight), trust-clipped. */
static void test_clip_and_updates(void)
{
    static const NanCase cases[] = {
        {"clamp", CT_OP_clamp, 1, {{S1(5), 0, V(N, I, -I, 0.5, -3)}}, {0}, {-1, 1}, {V(N, 1, -1, 0.5, -1)}, 1},
        {"clip_coef", CT_OP_clip_coef, 1, {{S1(4), 0, V(N, I, 4, 0.25)}}, {0}, {1, 0, 1e-6, 0}, {V(N, 0, 0.5, 1)}, 1},
        {"clip_coef adaptive", CT_OP_clip_coef, 2, {{S1(3), 0, V(4, 4, N)}, {S1(3), 0, V(N, 1, 1)}}, {0},
         {0.5, 1e-3, 0, 1e-6}, {V(N, 0.25, N)}, 1},
        {"reduce_sum", CT_OP_reduce_sum, 1, {{S2(2, 3), 0, V(1, N, 2, 3, 4, 5)}}, {2, 0}, {0}, {V(N, 12)}, 1},
        {"reduce_sum over rows", CT_OP_reduce_sum, 1, {{S2(2, 3), 0, V(1, N, 2, -I, 4, 5)}}, {1, 0}, {0},
         {V(-I, N, 7)}, 1},
        {"all_finite NaN", CT_OP_all_finite, 1, {{S1(3), 0, V(1, N, 2)}}, {0}, {0}, {V(0)}, 1},
        {"all_finite inf", CT_OP_all_finite, 1, {{S1(3), 0, V(1, -I, 2)}}, {0}, {0}, {V(0)}, 1},
        {"sgd_update", CT_OP_sgd_update, 4,
         {{S1(3), 0, V(1, 2, 3)}, {S1(3), 0, V(0.5, N, 0.5)}, {S1(3), 0, V(0, 0, 0)}, {{0}, 0, V(0.1)}}, {0},
         {0.9, 1e-4}, {V(FIN, N, FIN), V(FIN, N, FIN)}, 2},
        {"adamw_update", CT_OP_adamw_update, 6,
         {{S1(3), 0, V(1, 2, 3)}, {S1(3), 0, V(0.5, N, 0.5)}, {S1(3), 0, V(0, 0, 0)}, {S1(3), 0, V(0, 0, 0)},
          {{0}, 0, V(0.1)}, {{0}, CT_I64, V(0)}},
         {0}, {0.9, 0.999, 1e-8, 0.05}, {V(FIN, N, FIN), V(FIN, N, FIN), V(FIN, N, FIN)}, 3},
        {"lamb_update clipped by a NaN norm", CT_OP_lamb_update, 7,
         {{S1(3), 0, V(1, 2, 3)}, {S1(3), 0, V(0.5, 0.25, 0.5)}, {S1(3), 0, V(0, 0, 0)}, {S1(3), 0, V(0, 0, 0)},
          {{0}, 0, V(0.1)}, {{0}, CT_I64, V(0)}, {{0}, 0, V(N)}},
         {0, 0, 1}, {0.9, 0.999, 1e-6, 0.01}, {V(N, N, N)}, 1},
        {"lars_update trust-clipped NaN ratio", CT_OP_lars_update, 4,
         {{S1(3), 0, V(I, 2, 3)}, {S1(3), 0, V(0.5, 0.25, 0.5)}, {S1(3), 0, V(0, 0, 0)}, {{0}, 0, V(0.1)}},
         {0, 1, 0}, {0.9, 1e-4, 1e-3, 1e-8}, {V(N, N, N)}, 1},
        /* a NaN gradient stays in its element: Lion's sign of NaN is NaN */
        {"lion_update", CT_OP_lion_update, 4,
         {{S1(3), 0, V(1, 2, 3)}, {S1(3), 0, V(0.5, N, 0)}, {S1(3), 0, V(0, 0, 0)}, {{0}, 0, V(0.1)}}, {0},
         {0.9, 0.99, 0.05}, {V(FIN, N, FIN), V(FIN, N, FIN)}, 2},
        {"adamx_update ADOPT", CT_OP_adamx_update, 6,
         {{S1(3), 0, V(1, 2, 3)}, {S1(3), 0, V(0.5, N, 0.5)}, {S1(3), 0, V(0, 0, 0)}, {S1(3), 0, V(1, 1, 1)},
          {{0}, 0, V(0.1)}, {{0}, CT_I64, V(3)}},
         {2}, {0.9, 0.9999, 1e-6, 1e-4, 0.333}, {V(FIN, N, FIN), V(FIN, N, FIN), V(FIN, N, FIN)}, 3},
        {"madgrad_update", CT_OP_madgrad_update, 7,
         {{S1(3), 0, V(1, 2, 3)}, {S1(3), 0, V(0.5, N, 0.5)}, {S1(3), 0, V(0, 0, 0)}, {S1(3), 0, V(0, 0, 0)},
          {S1(3), 0, V(0, 0, 0)}, {{0}, 0, V(0.1)}, {{0}, CT_I64, V(0)}},
         {0}, {0.9, 1e-4, 1e-6}, {V(FIN, N, FIN), V(FIN, N, FIN), V(FIN, N, FIN), V(FIN, FIN, FIN)}, 4},
        {"adan_update", CT_OP_adan_update, 8,
         {{S1(3), 0, V(1, 2, 3)}, {S1(3), 0, V(0.5, N, 0.5)}, {S1(3), 0, V(0, 0, 0)}, {S1(3), 0, V(0, 0, 0)},
          {S1(3), 0, V(0, 0, 0)}, {S1(3), 0, V(0.25, 0.25, 0.25)}, {{0}, 0, V(0.1)}, {{0}, CT_I64, V(1)}},
         {0}, {0.98, 0.92, 0.99, 1e-8, 0.02}, {V(FIN, N, FIN), V(FIN, N, FIN), V(FIN, N, FIN), V(FIN, N, FIN)}, 4},
        /* timm's cosine_sim.max() < limit is False for a NaN: no projection */
        {"sgdp_update NaN gradient", CT_OP_sgdp_update, 4,
         {{S2(2, 3), 0, V(1, 2, 3, 4, 5, 6)}, {S2(2, 3), 0, V(0.5, N, 0.5, 0.1, 0.2, 0.3)}, {S2(2, 3), 0, {0}},
          {{0}, 0, V(0.1)}},
         {1}, {0.9, 1e-4, 0.1, 0.1, 1e-8}, {V(FIN, N, FIN, FIN, FIN, FIN), V(FIN, N, FIN, FIN, FIN, FIN)}, 2},
        {"adafactor_update NaN through the update's RMS", CT_OP_adafactor_update, 5,
         {{S1(3), 0, V(1, 2, 3)}, {S1(3), 0, V(0.5, N, 0.5)}, {S1(3), 0, V(0, 0, 0)}, {{0}, 0, V(0.1)},
          {{0}, CT_I64, V(0)}},
         {-1, -1, 0}, {1e-30, 1, -0.8, 0, 0}, {V(N, N, N), V(FIN, N, FIN)}, 2},
        {"muon_update NaN through Newton-Schulz", CT_OP_muon_update, 4,
         {{S2(4, 4), 0, V(1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 9)},
          {S2(4, 4), 0, V(0.5, N, 0.5, 1, 0.1, 0.2, 0.3, 0.4, 0.5, 1, 0.5, 1, 0.1, 0.2, 0.3, 0.4)}, {S2(4, 4), 0, {0}},
          {{0}, 0, V(0.1)}},
         {0, 5, 1}, {0.9, 0, 1e-7, 1, 1}, {V(N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N)}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i]);
}

/* One 4x4 plane:   1  N  2  3
 *                  4  N  6  7
 *                  I  0 -I -I
 *                  1  2 -I -I   (a second plane of finite values for the adaptive pool) */
#define PLANE V(1, N, 2, 3, 4, N, 6, 7, I, 0, -I, -I, 1, 2, -I, -I)
#define PLANE2 V(1, N, 2, 3, 4, N, 6, 7, I, 0, -I, -I, 1, 2, -I, -I, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7)

static void test_pools(void)
{
    static const NanCase cases[] = {
        /* 2x2 windows: the NaN wins (the gradient goes to the last NaN), +inf, all -inf (the first) */
        {"max_pool2d", CT_OP_max_pool2d, 1, {{S4(1, 1, 4, 4), 0, PLANE}}, {2, 2, 2, 2, 0, 0, 0}, {0},
         {V(N, 7, I, -I)}, 1},
        {"max_pool2d_grad", CT_OP_max_pool2d_grad, 2,
         {{S4(1, 1, 4, 4), 0, PLANE}, {S4(1, 1, 2, 2), 0, V(1, 2, 3, 4)}}, {2, 2, 2, 2, 0, 0, 0}, {0},
         {V(0, 0, 0, 0, 0, 1, 0, 2, 3, 0, 4, 0, 0, 0, 0, 0)}, 1},
        /* overlapping padded windows: the edge columns' path and the vectorised one */
        {"max_pool2d 3x3 s1 p1", CT_OP_max_pool2d, 1, {{S4(1, 1, 4, 4), 0, PLANE}}, {3, 3, 1, 1, 1, 1, 0}, {0},
         {V(N, N, N, 7, N, N, N, 7, N, N, N, 7, I, I, 2, -I)}, 1},
        {"max_pool2d_grad 3x3 s1 p1", CT_OP_max_pool2d_grad, 2,
         {{S4(1, 1, 4, 4), 0, PLANE}, {S4(1, 1, 4, 4), 0, V(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)}},
         {3, 3, 1, 1, 1, 1, 0}, {0}, {V(0)}, LIKE_REF},
        {"avg_pool2d", CT_OP_avg_pool2d, 1, {{S4(1, 1, 4, 4), 0, PLANE}}, {2, 2, 2, 2, 0, 0, 0, 1}, {0},
         {V(N, 4.5, I, -I)}, 1},
        {"avg_pool2d_grad", CT_OP_avg_pool2d_grad, 1, {{S4(1, 1, 2, 2), 0, V(N, 1, I, 3)}},
         {2, 2, 2, 2, 0, 0, 0, 1, 4, 4}, {0}, {V(N, N, 0.25, 0.25, N, N, 0.25, 0.25, I, I, 0.75, 0.75, I, I, 0.75, 0.75)},
         1},
        /* pad, max pooling SAME's -inf on the left, cropping the top row (its
         * NaN) and two right columns: the rest moves as it is */
        {"pad -1,0,1,-2 value -inf", CT_OP_pad, 1, {{S4(1, 1, 4, 4), 0, PLANE}}, {-1, 0, 1, -2}, {-I},
         {V(-I, 4, N, -I, I, 0, -I, 1, 2)}, 1},
        /* gather: rows [inf, -inf] and [NaN, 1] move as they are, index 3 (out of range) gives zeros;
         * gather_grad: row 0 takes inf and -inf (NaN), the row at index 3 is dropped */
        {"gather", CT_OP_gather, 2, {{S2(3, 2), 0, V(N, 1, I, -I, 2, 3)}, {S1(4), CT_I32, V(1, 0, 3, 0)}}, {0}, {0},
         {V(I, -I, N, 1, 0, 0, N, 1)}, 1},
        {"gather_grad", CT_OP_gather_grad, 2,
         {{S2(4, 2), 0, V(N, 1, I, 2, N, 4, -I, 5)}, {S1(4), CT_I32, V(1, 0, 3, 0)}}, {0, 3}, {0},
         {V(N, 7, N, 1, 0, 0)}, 1},
        {"adaptive_avg_pool2d", CT_OP_adaptive_avg_pool2d, 1, {{S4(1, 2, 4, 4), 0, PLANE2}}, {1, 1}, {0},
         {V(N, 4.5625)}, 1},
        {"adaptive_avg_pool2d_grad", CT_OP_adaptive_avg_pool2d_grad, 1, {{S4(1, 2, 1, 1), 0, V(N, 16)}},
         {1, 1, 2, 2}, {0}, {V(N, N, N, N, 4, 4, 4, 4)}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i]);
}

/* Rows of logits: one with a NaN, one with +inf (both all NaN through a
 * softmax), one with -inf (its weight 0). */
#define ROWS V(1, N, 2, 3, 1, I, 2, 3, 1, -I, 2, 3)

static void test_rows(void)
{
    static const NanCase cases[] = {
        {"softmax", CT_OP_softmax, 1, {{S2(3, 4), 0, ROWS}}, {1}, {0},
         {V(N, N, N, N, N, N, N, N, FIN, 0, FIN, FIN)}, 1},
        {"softmax dim 0", CT_OP_softmax, 1, {{S2(4, 3), 0, V(1, 1, 1, N, I, -I, 2, 2, 2, 3, 3, 3)}}, {0}, {0},
         {V(N, N, FIN, N, N, 0, N, N, FIN, N, N, FIN)}, 1},
        {"softmax_grad", CT_OP_softmax_grad, 2,
         {{S2(2, 3), 0, V(0.2, N, 0.8, 0.5, 0.25, 0.25)}, {S2(2, 3), 0, V(1, 2, 3, 1, 2, 3)}}, {1}, {0},
         {V(N, N, N, FIN, FIN, FIN)}, 1},
        {"cross_entropy", CT_OP_cross_entropy, 2, {{S2(3, 4), 0, ROWS}, {S1(3), CT_I64, V(0, 0, 0)}}, {0}, {0.1},
         {V(N)}, 1},
        {"cross_entropy, the -inf row alone", CT_OP_cross_entropy, 2,
         {{S2(1, 4), 0, V(1, -I, 2, 3)}, {S1(1), CT_I64, V(2)}}, {0}, {0}, {V(FIN)}, 1},
        {"cross_entropy_grad", CT_OP_cross_entropy_grad, 3,
         {{S2(3, 4), 0, ROWS}, {S1(3), CT_I64, V(0, 0, 0)}, {{0}, 0, V(1)}}, {0}, {0.1},
         {V(N, N, N, N, N, N, N, N, FIN, FIN, FIN, FIN)}, 1},
        {"soft_target_cross_entropy_grad", CT_OP_soft_target_cross_entropy_grad, 3,
         {{S2(2, 3), 0, V(1, N, 2, 1, 2, 3)}, {S2(2, 3), 0, V(0.5, 0, 0.5, 0.2, 0.3, 0.5)}, {{0}, 0, V(1)}}, {0},
         {0}, {V(N, N, N, FIN, FIN, FIN)}, 1},
        {"binary_cross_entropy", CT_OP_binary_cross_entropy, 2,
         {{S2(2, 3), 0, V(1, N, 2, 1, 2, 3)}, {S1(2), CT_I64, V(0, 2)}}, {0}, {0, -1}, {V(N)}, 1},
        {"binary_cross_entropy_grad", CT_OP_binary_cross_entropy_grad, 3,
         {{S2(2, 3), 0, V(1, N, 2, 1, 2, 3)}, {S1(2), CT_I64, V(0, 2)}, {{0}, 0, V(1)}}, {0}, {0, -1},
         {V(FIN, N, FIN, FIN, FIN, FIN)}, 1},
        /* 2 splits of 2 samples: a NaN in sample 0's clean row poisons its
         * mixture, so both of its rows; sample 1's stay finite */
        {"jsd_cross_entropy", CT_OP_jsd_cross_entropy, 2,
         {{S2(4, 3), 0, V(1, N, 2, 1, 2, 3, 0, 1, 2, 3, 2, 1)}, {S1(4), CT_I64, V(0, 2, 0, 2)}}, {2}, {0.1, 12},
         {V(N)}, 1},
        {"jsd_cross_entropy_grad", CT_OP_jsd_cross_entropy_grad, 3,
         {{S2(4, 3), 0, V(1, N, 2, 1, 2, 3, 0, 1, 2, 3, 2, 1)}, {S1(4), CT_I64, V(0, 2, 0, 2)}, {{0}, 0, V(1)}},
         {2}, {0.1, 12}, {V(N, N, N, FIN, FIN, FIN, N, N, N, FIN, FIN, FIN)}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i]);
}

static void test_norms(void)
{
    /* x [2, 2, 1, 2]: channel 0 holds a NaN (sample 1) */
#define BNX {S4(2, 2, 1, 2), 0, V(1, 2, 3, 4, N, 6, 7, 8)}
#define CH(a, b) {S1(2), 0, V(a, b)}
    static const NanCase cases[] = {
        {"layer_norm", CT_OP_layer_norm, 3, {{S2(3, 4), 0, V(1, N, 2, 3, 1, 2, 3, 4, I, 1, 2, 3)},
                                             {S1(4), 0, V(1, 1, 1, 1)}, {S1(4), 0, V(0, 0, 0, 0)}},
         {0}, {1e-5}, {V(N, N, N, N, FIN, FIN, FIN, FIN, N, N, N, N)}, 1},
        {"layer_norm_grad", CT_OP_layer_norm_grad, 3, {{S2(2, 3), 0, V(1, N, 2, 1, 2, 4)}, {S1(3), 0, V(1, 1, 1)},
                                                       {S2(2, 3), 0, V(1, 2, 3, 1, 2, 3)}},
         {0}, {1e-5}, {V(N, N, N, FIN, FIN, FIN), V(N, N, N), V(2, 4, 6)}, 3},
        {"batch_norm training", CT_OP_batch_norm, 5, {BNX, CH(1, 1), CH(0, 0), CH(0, 0), CH(1, 1)}, {1}, {0.1, 1e-5},
         {V(N, N, FIN, FIN, N, N, FIN, FIN), V(N, FIN), V(N, FIN)}, 3},
        {"batch_norm eval", CT_OP_batch_norm, 5, {BNX, CH(1, 1), CH(0, 0), CH(0, 0), CH(1, 1)}, {0}, {0.1, 1e-5},
         {V(FIN, FIN, FIN, FIN, N, FIN, FIN, FIN)}, 1},
        {"batch_norm_grad training", CT_OP_batch_norm_grad, 5,
         {BNX, CH(1, 1), CH(0, 0), CH(1, 1), {S4(2, 2, 1, 2), 0, V(1, 1, 1, 1, 1, 1, 1, 1)}}, {1}, {1e-5},
         {V(N, N, FIN, FIN, N, N, FIN, FIN), V(N, FIN), V(4, 4)}, 3},
        /* eval: dx = dy w / std reads no x, so it stays finite; the weight's gradient does not */
        {"batch_norm_grad eval", CT_OP_batch_norm_grad, 5,
         {BNX, CH(1, 1), CH(0, 0), CH(1, 1), {S4(2, 2, 1, 2), 0, V(1, 1, 1, 1, 1, 1, 1, 1)}}, {0}, {1e-5},
         {V(FIN, FIN, FIN, FIN, FIN, FIN, FIN, FIN), V(N, FIN), V(4, 4)}, 3},
    };
#undef BNX
#undef CH
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i]);
}

/* group_norm, two groups of two channels: a NaN or +inf makes its group
 * NaN (x [2, 4, 1, 2], the first group of each sample); its gradient, with
 * a NaN in x or in dy: that group's dx, and the weight's gradient of the
 * channels it touches (and the bias's, for dy) are NaN, as in torch. */
static void test_group_norm(void)
{
#define W4 {S1(4), 0, V(1, 1, 1, 1)}
#define X1(...) {S4(1, 4, 1, 2), 0, V(__VA_ARGS__)}
    static const NanCase cases[] = {
        {"group_norm", CT_OP_group_norm, 3,
         {{S4(2, 4, 1, 2), 0, V(1, N, 2, 3, 1, 2, 3, 4, I, 1, 2, 3, 1, 2, 3, 5)}, W4, {S1(4), 0, V(0, 0, 0, 0)}},
         {2}, {1e-5}, {V(N, N, N, N, FIN, FIN, FIN, FIN, N, N, N, N, FIN, FIN, FIN, FIN)}, 1},
        {"group_norm_grad NaN x", CT_OP_group_norm_grad, 3,
         {X1(1, N, 2, 3, 1, 2, 3, 4), W4, X1(1, 2, 3, 1, 2, 3, 1, 2)}, {2}, {1e-5},
         {V(N, N, N, N, FIN, FIN, FIN, FIN), V(N, N, FIN, FIN), V(3, 4, 5, 3)}, 3},
        {"group_norm_grad NaN dy", CT_OP_group_norm_grad, 3,
         {X1(1, 5, 2, 3, 1, 2, 3, 4), W4, X1(1, N, 3, 1, 2, 3, 1, 2)}, {2}, {1e-5},
         {V(N, N, N, N, FIN, FIN, FIN, FIN), V(N, FIN, FIN, FIN), V(N, 4, 5, 3)}, 3},
    };
#undef W4
#undef X1
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i]);
}

/* Attention [1, 1, 3, 2]: a NaN in query 0 is NaN in output row 0 alone;
 * one in key 1 is NaN everywhere (every row weighs it); one in value 2's
 * dim 1 is NaN in that column; a bias [1, 1, 3, 3] of -inf drops that key
 * from the row, a NaN or a row all -inf makes the row NaN (softmax's
 * rule); the gradients as the ref backend's, from the y and logsumexp
 * such a forward leaves (a NaN query's row: NaN in both). */
static void test_attention(void)
{
#define QKV(q, k, v) {S4(1, 1, 3, 2), 0, q}, {S4(1, 1, 3, 2), 0, k}, {S4(1, 1, 3, 2), 0, v}
#define FINITE V(0.1, 0.2, 0.3, -0.4, 0.5, 0.6)
#define DY {S4(1, 1, 3, 2), 0, V(1, -1, 0.5, 2, -0.5, 1)}
#define MASK(...) {S4(1, 1, 3, 3), 0, V(__VA_ARGS__)}
#define FWD(y, lse) {S4(1, 1, 3, 2), 0, y}, {S3(1, 1, 3), 0, lse}
    static const NanCase cases[] = {
        {"sdpa NaN query", CT_OP_sdpa, 3, {QKV(V(N, 0.2, 0.3, -0.4, 0.5, 0.6), FINITE, FINITE)}, {0}, {0.7},
         {V(N, N, FIN, FIN, FIN, FIN)}, 1},
        {"sdpa NaN key", CT_OP_sdpa, 3, {QKV(FINITE, V(0.1, 0.2, N, -0.4, 0.5, 0.6), FINITE)}, {0}, {0.7},
         {V(N, N, N, N, N, N)}, 1},
        {"sdpa NaN value", CT_OP_sdpa, 3, {QKV(FINITE, FINITE, V(0.1, 0.2, 0.3, -0.4, 0.5, N))}, {0}, {0.7},
         {V(FIN, N, FIN, N, FIN, N)}, 1},
        {"sdpa_grad NaN query", CT_OP_sdpa_grad, 6,
         {QKV(V(N, 0.2, 0.3, -0.4, 0.5, 0.6), FINITE, FINITE), DY,
          FWD(V(N, N, 0.2, 0.1, 0.3, 0.2), V(N, 1.2, 1.1))},
         {0}, {0.7}, {V(0)}, LIKE_REF},
        {"sdpa_grad NaN value", CT_OP_sdpa_grad, 6,
         {QKV(FINITE, FINITE, V(0.1, 0.2, 0.3, -0.4, 0.5, N)), DY,
          FWD(V(0.3, N, 0.2, N, 0.3, N), V(1.1, 1.2, 1.1))},
         {0}, {0.7}, {V(0)}, LIKE_REF},
        {"sdpa bias -inf, NaN, all -inf", CT_OP_sdpa, 4,
         {QKV(FINITE, FINITE, FINITE), MASK(0, -I, 0.5, N, 0, 0, -I, -I, -I)}, {0}, {0.7},
         {V(FIN, FIN, N, N, N, N)}, 1},
        {"sdpa_grad bias -inf", CT_OP_sdpa_grad, 7,
         {QKV(FINITE, FINITE, FINITE), DY, FWD(V(0.3, 0.1, 0.2, 0.2, 0.3, 0.1), V(1.1, 0.8, 1.4)),
          MASK(0, -I, 0.5, 0, 0, -I, 0.3, 0.1, 0.2)},
         {1}, {0.7}, {V(0)}, LIKE_REF},
    };
#undef QKV
#undef FINITE
#undef DY
#undef MASK
#undef FWD
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(&cases[i]);
}

/* test_resnet with one NaN weight in its stem convolution: eval logits all
 * NaN (as built, and as ctimm-validate runs it: batch norms folded, channels
 * last), and a training step's loss NaN, on both backends. */
static void test_model_nan_weight(void)
{
    static const char *const modes[] = {"eval", "eval folded channels_last", "training step"};
    Vectors v;
    CtErr err;
    if (vectors_open(&v, "test_resnet", 1))
        return;
    for (int mode = 0; mode < 3; mode++) {
        int training = mode == 2;
        ModelSpec spec = {.batch_size = v.batch, .training = training, .args = v.args};
        OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4,
                         .no_weight_decay = v.m->no_weight_decay};
        Graph g, f, l;
        TrainStep ts;
        if (model_build(v.m, &spec, &g, &err)) {
            CHECKF(0, "test_resnet: %s", err.msg);
            continue;
        }
        if (mode == 1) {
            int ok = bn_fold(&g, &f, &err) == 0;
            graph_free(&g);
            if (!ok || layout_channels_last(&f, &l, &err)) {
                CHECKF(0, "test_resnet: %s", err.msg);
                if (ok)
                    graph_free(&f);
                continue;
            }
            graph_free(&f);
            g = l;
        }
        if (training && train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1}, &sgd, &ts,
                                         &err)) {
            CHECKF(0, "test_resnet: %s", err.msg);
            graph_free(&g);
            continue;
        }
        int watch = 0; /* the output to check: the logits, or the loss */
        for (int k = 0; training && k < g.noutputs; k++)
            if (g.outputs[k] == ts.loss)
                watch = k;
        for (int b = 0; b < 2; b++) {
            CtState st;
            CtTensor *out = calloc((size_t)g.noutputs, sizeof *out);
            state_create(&st, &g);
            CHECKF(state_load(&st, &v.f, "state.", &err) == 0, "test_resnet: %s", err.msg);
            /* the first tensor of the state_dict: the stem's first convolution's weight */
            CHECKF(!strncmp(st.e[0].name, "conv1.", 6), "test_resnet's first tensor is %s", st.e[0].name);
            ((float *)state_data(&st, 0))[0] = NAN;
            const CtBackend *be = b ? cpu : ref;
            if (backend_run_once(be, &g, &st, v.in, training ? 4 : 1, out, NULL, &err) == 0) {
                const CtTensor *t = &out[watch];
                int64_t n = shape_numel(&t->type.shape), finite = 0;
                for (int64_t i = 0; i < n; i++)
                    finite += isfinite(((const float *)t->data)[i]);
                CHECKF(finite == 0, "test_resnet %s on %s with a NaN stem weight: %lld of %lld %s finite",
                       modes[mode], be->name, (long long)finite, (long long)n, training ? "loss values" : "logits");
                for (int k = 0; k < g.noutputs; k++)
                    tensor_free(&out[k]);
            } else {
                CHECKF(0, "test_resnet on %s: %s", be->name, err.msg);
            }
            free(out);
            state_free(&st);
        }
        if (training)
            train_step_free(&ts);
        graph_free(&g);
    }
    st_free(&v.f);
}

int main(void)
{
    cpu = backend_find("cpu");
    ref = backend_find("ref");
    CHECK(cpu != NULL && ref != NULL);
    if (!cpu || !ref)
        return check_done("test_nan");
    test_activations();
    test_activation_grads();
    test_clip_and_updates();
    test_pools();
    test_rows();
    test_norms();
    test_group_norm();
    test_attention();
    test_model_nan_weight();
    return check_done("test_nan");
}
