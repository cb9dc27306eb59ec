/*
 * The cpu backend's elementwise ops, reductions and softmax, as f32 loops
 * (activations: ir/formulas.h's, in f32 with ir/host_math.h's exp,
 * tanh and erf, as the generated kernels compute them; sums accumulated in
 * double). Broadcasting follows numpy's rules as the ref kernels do; the
 * innermost output dim runs as a strided loop.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ir/host_math.h"
#include "runtime/cpu/cpu.h"

/* ir/formulas.h over f32 numbers, with the generated kernels' exp, tanh
 * and erf: the values the fused kernels compute. */
#define FX_T float
#define FX_EXP ct_expf
#define FX_SQRT sqrtf
#define FX_ERF ct_erff
#define FX_TANH ct_tanhf
#define FX_POW powf
#include "ir/formulas.h"

/* The loop of one activation (or its gradient) over a span: each its own,
 * with gelu's form a constant in it, so that every loop vectorises. */
#define SPAN_LOOP(expr)                                                \
    _Pragma("omp simd")                                                \
    for (int64_t i = 0; i < cnt; i++)                                  \
        y[i] = expr;

CPU_CLONES void cpu_act_span(const Node *n, const float *x, float *y, int64_t cnt)
{
    int approx = n->op == CT_OP_gelu && n->iattr[0];
    switch (n->op) {
#define CASE(name)                                   \
    case CT_OP_##name:                               \
        if (approx) {                                \
            SPAN_LOOP(fx_##name(x[i], 1))            \
        } else {                                     \
            SPAN_LOOP(fx_##name(x[i], 0))            \
        }                                            \
        break;
        CT_ACTIVATIONS(CASE)
#undef CASE
    default: CT_ASSERT(!"not an activation"); break;
    }
}

/* Blocks of a few L1 lines' worth: one call through the clone's resolver each. */
#define ACT_BLOCK 4096

void cpu_act_parallel(const Node *n, const float *x, float *y, int64_t cnt)
{
#pragma omp parallel for if (cnt > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < cnt; i += ACT_BLOCK)
        cpu_act_span(n, x + i, y + i, cnt - i < ACT_BLOCK ? cnt - i : ACT_BLOCK);
}

static void act(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    cpu_act_parallel(n, in[0], out[0], cpu_in_numel(g, n, 0));
}

#define ACT(op) \
    void cpu_##op(const Graph *g, const Node *n, float *const *in, float *const *out) { act(g, n, in, out); }
CT_ACTIVATIONS(ACT)

CPU_CLONES void cpu_act_grad_span(const Node *n, const float *x, const float *dy, float *y, int64_t cnt)
{
    int approx = (int)n->iattr[1];
    switch ((CtOp)n->iattr[0]) {
#define CASE(name)                                        \
    case CT_OP_##name:                                    \
        if (approx) {                                     \
            SPAN_LOOP(fx_##name##_grad(x[i], dy[i], 1))   \
        } else {                                          \
            SPAN_LOOP(fx_##name##_grad(x[i], dy[i], 0))   \
        }                                                 \
        break;
        CT_ACTIVATIONS(CASE)
#undef CASE
    default: CT_ASSERT(!"not an activation"); break;
    }
}

/* dy * f'(x): in[0] x, in[1] dy; 0 where f is flat, whatever dy */
void cpu_act_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
#pragma omp parallel for if (cnt > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < cnt; i += ACT_BLOCK)
        cpu_act_grad_span(n, in[0] + i, in[1] + i, out[0] + i, cnt - i < ACT_BLOCK ? cnt - i : ACT_BLOCK);
}

CPU_CLONES void cpu_scale_shift(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    double a = n->fattr[0], b = n->fattr[1];
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < cnt; i++)
        out[0][i] = (float)(a * in[0][i] + b);
}

enum { ADD, MUL, DIV };

CPU_CLONES static void binary(const Graph *g, const Node *n, float *const *in, float *const *out, int kind)
{
    const CtShape *os = cpu_out_shape(g, n, 0);
    int64_t cnt = shape_numel(os);
    const float *a = in[0], *b = in[1];
    float *y = out[0];
    if (cpu_in_numel(g, n, 0) == cnt && cpu_in_numel(g, n, 1) == cnt) {
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
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

/* Sums in double (of x * f with a factor f, which has x's layout). The rows
 * (runs of x's innermost dim in memory) split among the threads in fixed
 * contiguous parts, each into its own sums, which are added in thread
 * order: the same result on every run with as many threads. x and the sums
 * are walked in their stored layouts (a channels-last x in N, H, W, C
 * order). */
CPU_CLONES void cpu_reduce_sum(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *xs = cpu_in_shape(g, n, 0);
    int nd = xs->ndim, keep = (int)n->iattr[1];
    const float *f = n->nin > 1 ? in[1] : NULL;
    if (nd == 0) {
        out[0][0] = f ? in[0][0] * f[0] : in[0][0];
        return;
    }
    int order[CT_MAX_DIMS], odim[CT_MAX_DIMS];
    int64_t ymem[CT_MAX_DIMS] = {0}, ostride[CT_MAX_DIMS], s = shape_numel(cpu_out_shape(g, n, 0));
    cpu_memory_order(g, n->in[0], order);
    value_strides(&g->values[n->out[0]], ymem);
    for (int d = 0, j = 0; d < nd; d++)
        odim[d] = keep ? d : ((n->iattr[0] >> d) & 1) ? -1 : j++;
    CtShape m = {.ndim = nd};
    const CtShape *x = &m;
    for (int k = 0; k < nd; k++) {
        int d = order[k];
        m.d[k] = xs->d[d];
        ostride[k] = (n->iattr[0] >> d) & 1 ? 0 : ymem[odim[d]];
    }
    int64_t cnt = shape_numel(x), inner = x->d[nd - 1], os0 = ostride[nd - 1], rows = inner ? cnt / inner : 0;
    int parts = cnt > CPU_PARALLEL_MIN && rows > 1 ? omp_get_max_threads() : 1;
    double *acc = calloc((size_t)(s ? s : 1) * (size_t)parts, sizeof *acc);
    CT_ASSERT(acc != NULL);
#pragma omp parallel for num_threads(parts) schedule(static, 1)
    for (int t = 0; t < parts; t++) {
        int64_t r0 = rows * t / parts, r1 = rows * (t + 1) / parts, idx[CT_MAX_DIMS] = {0}, rest = r0;
        double *sum = acc + t * s;
        for (int d = nd - 2; d >= 0; d--) {
            idx[d] = rest % x->d[d];
            rest /= x->d[d];
        }
        for (int64_t r = r0; r < r1; r++) {
            const float *row = in[0] + r * inner, *frow = f ? f + r * inner : NULL;
            int64_t o = 0;
            for (int d = 0; d < nd - 1; d++)
                o += idx[d] * ostride[d];
            if (os0 == 0) {
                double u = 0;
                if (frow)
                    for (int64_t j = 0; j < inner; j++)
                        u += (double)row[j] * frow[j];
                else
                    for (int64_t j = 0; j < inner; j++)
                        u += row[j];
                sum[o] += u;
            } else if (frow) {
                for (int64_t j = 0; j < inner; j++)
                    sum[o + j * os0] += (double)row[j] * frow[j];
            } else {
                for (int64_t j = 0; j < inner; j++)
                    sum[o + j * os0] += row[j];
            }
            for (int d = nd - 2; d >= 0 && ++idx[d] == x->d[d]; d--)
                idx[d] = 0;
        }
    }
    for (int64_t o = 0; o < s; o++) {
        double u = acc[o];
        for (int t = 1; t < parts; t++)
            u += acc[t * s + o];
        out[0][o] = (float)u;
    }
    free(acc);
}

CPU_CLONES void cpu_softmax(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t dim = n->iattr[0], outer, inner, D = x->d[dim];
    shape_split_at_dim(x, dim, &outer, &inner);
#pragma omp parallel for collapse(2) if (outer * inner * D > CPU_PARALLEL_MIN)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xs = in[0] + o * D * inner + i;
            float *ys = out[0] + o * D * inner + i, m = -INFINITY;
            double sum = 0;
#pragma omp simd reduction(max : m)
            for (int64_t j = 0; j < D; j++)
                m = xs[j * inner] > m ? xs[j * inner] : m;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < D; j++) {
                ys[j * inner] = ct_expf(xs[j * inner] - m);
                sum += ys[j * inner];
            }
            float inv = (float)(1 / sum);
            for (int64_t j = 0; j < D; j++)
                ys[j * inner] *= inv;
        }
}

CPU_CLONES void cpu_softmax_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t dim = n->iattr[0], outer, inner, D = x->d[dim];
    shape_split_at_dim(x, dim, &outer, &inner);
#pragma omp parallel for collapse(2) if (outer * inner * D > CPU_PARALLEL_MIN)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *y = in[0] + o * D * inner + i, *dy = in[1] + o * D * inner + i;
            double dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t j = 0; j < D; j++)
                dot += (double)y[j * inner] * dy[j * inner];
            for (int64_t j = 0; j < D; j++)
                out[0][o * D * inner + i + j * inner] = (float)(y[j * inner] * (dy[j * inner] - dot));
        }
}
