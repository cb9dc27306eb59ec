/*
 * The cpu backend's elementwise ops, reductions and softmax, as f32 loops
 * over the ref kernels' formulas (activations evaluated in double per
 * element, sums accumulated in double). Broadcasting follows numpy's rules
 * as the ref kernels do; the innermost output dim runs as a strided loop.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu.h"

#define PI 3.14159265358979323846

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double hsig(double x) { return x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5; }

static double act_f(CtOp op, int approx, double x)
{
    switch (op) {
    case CT_OP_relu: return x > 0 ? x : 0;
    case CT_OP_sigmoid: return sigm(x);
    case CT_OP_silu: return x * sigm(x);
    case CT_OP_hard_sigmoid: return hsig(x);
    case CT_OP_hard_swish: return x * hsig(x);
    case CT_OP_rsqrt: return 1 / sqrt(x);
    case CT_OP_gelu:
        return approx ? 0.5 * x * (1 + tanh(sqrt(2 / PI) * (x + 0.044715 * x * x * x)))
                      : 0.5 * x * (1 + erf(x / sqrt(2)));
    default: CT_ASSERT(!"not an activation"); return 0;
    }
}

static double act_df(CtOp op, int approx, double x)
{
    switch (op) {
    case CT_OP_relu: return x > 0 ? 1 : 0;
    case CT_OP_sigmoid: return sigm(x) * (1 - sigm(x));
    case CT_OP_silu: return sigm(x) * (1 + x * (1 - sigm(x)));
    case CT_OP_hard_sigmoid: return x > -3 && x < 3 ? 1.0 / 6 : 0;
    case CT_OP_hard_swish: return x < -3 ? 0 : x <= 3 ? x / 3 + 0.5 : 1;
    case CT_OP_rsqrt: return -0.5 / (x * sqrt(x));
    case CT_OP_gelu:
        if (approx) {
            double k = sqrt(2 / PI), t = tanh(k * (x + 0.044715 * x * x * x));
            return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
        }
        return 0.5 * (1 + erf(x / sqrt(2))) + x * exp(-0.5 * x * x) / sqrt(2 * PI);
    default: CT_ASSERT(!"not an activation"); return 0;
    }
}

static void act(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    int approx = n->op == CT_OP_gelu && n->iattr[0];
    const float *x = in[0];
    float *y = out[0];
    if (n->op == CT_OP_relu) {
        for (int64_t i = 0; i < cnt; i++)
            y[i] = x[i] > 0 ? x[i] : 0.0f;
        return;
    }
    for (int64_t i = 0; i < cnt; i++)
        y[i] = (float)act_f(n->op, approx, x[i]);
}

#define ACT(op) \
    void cpu_##op(const Graph *g, const Node *n, float *const *in, float *const *out) { act(g, n, in, out); }
ACT(relu)
ACT(gelu)
ACT(silu)
ACT(sigmoid)
ACT(hard_swish)
ACT(hard_sigmoid)
ACT(rsqrt)

void cpu_act_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    CtOp op = (CtOp)n->iattr[0];
    int approx = (int)n->iattr[1];
    if (op == CT_OP_relu) {
        for (int64_t i = 0; i < cnt; i++)
            out[0][i] = in[0][i] > 0 ? in[1][i] : 0.0f;
        return;
    }
    for (int64_t i = 0; i < cnt; i++)
        out[0][i] = (float)(in[1][i] * act_df(op, approx, in[0][i]));
}

void cpu_scale_shift(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    double a = n->fattr[0], b = n->fattr[1];
    for (int64_t i = 0; i < cnt; i++)
        out[0][i] = (float)(a * in[0][i] + b);
}

enum { ADD, MUL, DIV };

static void binary(const Graph *g, const Node *n, float *const *in, float *const *out, int kind)
{
    const CtShape *os = cpu_out_shape(g, n, 0);
    int64_t cnt = shape_numel(os);
    const float *a = in[0], *b = in[1];
    float *y = out[0];
    if (cpu_in_numel(g, n, 0) == cnt && cpu_in_numel(g, n, 1) == cnt) {
        for (int64_t i = 0; i < cnt; i++)
            y[i] = kind == ADD ? a[i] + b[i] : kind == MUL ? a[i] * b[i] : a[i] / b[i];
        return;
    }
    int64_t sa[CT_MAX_DIMS], sb[CT_MAX_DIMS], idx[CT_MAX_DIMS] = {0};
    shape_broadcast_strides(cpu_in_shape(g, n, 0), os, sa);
    shape_broadcast_strides(cpu_in_shape(g, n, 1), os, sb);
    int nd = os->ndim;
    int64_t inner = nd ? os->d[nd - 1] : 1, ia0 = nd ? sa[nd - 1] : 0, ib0 = nd ? sb[nd - 1] : 0;
    for (int64_t i = 0; i < cnt; i += inner) {
        int64_t ia = 0, ib = 0;
        for (int d = 0; d < nd - 1; d++) {
            ia += idx[d] * sa[d];
            ib += idx[d] * sb[d];
        }
        for (int64_t j = 0; j < inner; j++) {
            float u = a[ia + j * ia0], v = b[ib + j * ib0];
            y[i + j] = kind == ADD ? u + v : kind == MUL ? u * v : u / v;
        }
        for (int d = nd - 2; d >= 0 && ++idx[d] == os->d[d]; d--)
            idx[d] = 0;
    }
}

void cpu_add(const Graph *g, const Node *n, float *const *in, float *const *out) { binary(g, n, in, out, ADD); }
void cpu_mul(const Graph *g, const Node *n, float *const *in, float *const *out) { binary(g, n, in, out, MUL); }
void cpu_div(const Graph *g, const Node *n, float *const *in, float *const *out) { binary(g, n, in, out, DIV); }

void cpu_reduce_sum(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t ostride[CT_MAX_DIMS], idx[CT_MAX_DIMS] = {0}, s = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        int reduced = (n->iattr[0] >> i) & 1;
        ostride[i] = reduced ? 0 : s;
        s *= reduced ? 1 : x->d[i];
    }
    double *acc = calloc((size_t)(s ? s : 1), sizeof *acc);
    CT_ASSERT(acc != NULL);
    int nd = x->ndim;
    int64_t cnt = shape_numel(x), inner = x->d[nd - 1], os0 = ostride[nd - 1];
    for (int64_t i = 0; i < cnt; i += inner) {
        int64_t o = 0;
        for (int d = 0; d < nd - 1; d++)
            o += idx[d] * ostride[d];
        if (os0 == 0) {
            double t = 0;
            for (int64_t j = 0; j < inner; j++)
                t += in[0][i + j];
            acc[o] += t;
        } else {
            for (int64_t j = 0; j < inner; j++)
                acc[o + j * os0] += in[0][i + j];
        }
        for (int d = nd - 2; d >= 0 && ++idx[d] == x->d[d]; d--)
            idx[d] = 0;
    }
    for (int64_t o = 0; o < s; o++)
        out[0][o] = (float)acc[o];
    free(acc);
}

void cpu_softmax(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t dim = n->iattr[0], outer, inner, D = x->d[dim];
    shape_split_at_dim(x, dim, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xs = in[0] + o * D * inner + i;
            float *ys = out[0] + o * D * inner + i, m = -INFINITY;
            double sum = 0;
            for (int64_t j = 0; j < D; j++)
                m = xs[j * inner] > m ? xs[j * inner] : m;
            for (int64_t j = 0; j < D; j++)
                sum += (ys[j * inner] = expf(xs[j * inner] - m));
            for (int64_t j = 0; j < D; j++)
                ys[j * inner] = (float)(ys[j * inner] / sum);
        }
}

void cpu_softmax_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t dim = n->iattr[0], outer, inner, D = x->d[dim];
    shape_split_at_dim(x, dim, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *y = in[0] + o * D * inner + i, *dy = in[1] + o * D * inner + i;
            double dot = 0;
            for (int64_t j = 0; j < D; j++)
                dot += (double)y[j * inner] * dy[j * inner];
            for (int64_t j = 0; j < D; j++)
                out[0][o * D * inner + i + j * inner] = (float)(y[j * inner] * (dy[j * inner] - dot));
        }
}
