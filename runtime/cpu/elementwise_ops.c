/*
 * The cpu backend's elementwise ops, reductions and softmax, as f32 loops
 * over the ref kernels' formulas (activations in f32 with
 * codegen/host_math.h's exp, tanh and erf, as the generated kernels compute
 * them; sums accumulated in double). Broadcasting follows numpy's rules
 * as the ref kernels do; the innermost output dim runs as a strided loop.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/host_math.h"
#include "runtime/cpu/cpu.h"

#define SQRT_2_PI 0.797884560802865355f /* sqrt(2 / pi) */
#define INV_SQRT_2 0.707106781186547524f
#define INV_SQRT_2PI 0.398942280401432678f /* 1 / sqrt(2 pi) */

static inline float sigm(float x) { return 1.0f / (1.0f + ct_expf(-x)); }
static inline float hsig(float x) { return x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5f; }

/* Each activation its own loop with the op chosen outside, so every loop
 * vectorises. */
CPU_CLONES static void act(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    const float *x = in[0];
    float *y = out[0];
    switch (n->op) {
    case CT_OP_relu:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++)
            y[i] = x[i] <= 0 ? 0.0f : x[i]; /* NaN passes, as torch's */
        break;
    case CT_OP_sigmoid:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++)
            y[i] = sigm(x[i]);
        break;
    case CT_OP_silu:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++)
            y[i] = x[i] * sigm(x[i]);
        break;
    case CT_OP_hard_sigmoid:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++)
            y[i] = hsig(x[i]);
        break;
    case CT_OP_hard_swish:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++)
            y[i] = x[i] * hsig(x[i]);
        break;
    case CT_OP_rsqrt:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++)
            y[i] = 1 / sqrtf(x[i]);
        break;
    case CT_OP_gelu:
        if (n->iattr[0])
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
            for (int64_t i = 0; i < cnt; i++)
                y[i] = 0.5f * x[i] * (1 + ct_tanhf(SQRT_2_PI * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
        else
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
            for (int64_t i = 0; i < cnt; i++)
                y[i] = 0.5f * x[i] * (1 + ct_erff(x[i] * INV_SQRT_2));
        break;
    default: CT_ASSERT(!"not an activation"); break;
    }
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

/* dy * f'(x): in[0] x, in[1] dy; 0 where f is flat, whatever dy (ir/ops/elementwise.c) */
CPU_CLONES void cpu_act_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    int64_t cnt = cpu_in_numel(g, n, 0);
    const float *x = in[0], *dy = in[1];
    float *y = out[0];
    switch ((CtOp)n->iattr[0]) {
    case CT_OP_relu:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++)
            y[i] = x[i] <= 0 ? 0.0f : dy[i];
        break;
    case CT_OP_sigmoid:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++) {
            float s = sigm(x[i]);
            y[i] = dy[i] * (s * (1 - s));
        }
        break;
    case CT_OP_silu:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++) {
            float s = sigm(x[i]);
            y[i] = dy[i] * (s * (1 + x[i] * (1 - s)));
        }
        break;
    case CT_OP_hard_sigmoid:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++)
            y[i] = x[i] > -3 && x[i] < 3 ? dy[i] * (1.0f / 6) : 0.0f;
        break;
    case CT_OP_hard_swish:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++) {
            float d = dy[i]; /* read on every path: the baseline clone has no masked loads to vectorise with */
            y[i] = x[i] < -3 ? 0.0f : x[i] <= 3 ? d * (x[i] / 3 + 0.5f) : d;
        }
        break;
    case CT_OP_rsqrt:
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < cnt; i++)
            y[i] = dy[i] * (-0.5f / (x[i] * sqrtf(x[i])));
        break;
    case CT_OP_gelu:
        if (n->iattr[1])
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
            for (int64_t i = 0; i < cnt; i++) {
                float v = x[i], t = ct_tanhf(SQRT_2_PI * (v + 0.044715f * v * v * v));
                y[i] = dy[i] * (0.5f * (1 + t) + 0.5f * v * (1 - t * t) * SQRT_2_PI * (1 + 3 * 0.044715f * v * v));
            }
        else
#pragma omp parallel for simd if (cnt > CPU_PARALLEL_MIN)
            for (int64_t i = 0; i < cnt; i++) {
                float v = x[i];
                y[i] = dy[i] * (0.5f * (1 + ct_erff(v * INV_SQRT_2)) + v * ct_expf(-0.5f * v * v) * INV_SQRT_2PI);
            }
        break;
    default: CT_ASSERT(!"not an activation"); break;
    }
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

CPU_CLONES void cpu_reduce_sum(const Graph *g, const Node *n, float *const *in, float *const *out)
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
