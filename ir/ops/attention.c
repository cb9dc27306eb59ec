/*
 * softmax along one dim, and scaled-dot-product attention as one op:
 * q, k, v [B, H, N, D] -> softmax(q k^T * scale) v, [B, H, N, D]
 * (F.scaled_dot_product_attention without mask or dropout).
 * Gradients: softmax_grad(y, dy) = y * (dy - sum(dy * y)) along dim, and
 * sdpa_grad(q, k, v, dy) -> dq, dk, dv, recomputing the attention weights.
 */
#include <math.h>
#include <stdlib.h>

#include "ops_impl.h"

static int infer_softmax(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    if (n->iattr[0] < 0 || n->iattr[0] >= in_shape(g, n, 0)->ndim)
        return ct_fail(err, "dim %lld out of range", (long long)n->iattr[0]);
    return infer_like_input0(g, n, out, err);
}

/* Softmax of `count` values `stride` apart, max-subtracted for stability. */
static void softmax_line(const double *x, double *y, int64_t count, int64_t stride)
{
    double m = -INFINITY, sum = 0;
    for (int64_t i = 0; i < count; i++)
        m = x[i * stride] > m ? x[i * stride] : m;
    for (int64_t i = 0; i < count; i++)
        sum += (y[i * stride] = exp(x[i * stride] - m));
    for (int64_t i = 0; i < count; i++)
        y[i * stride] /= sum;
}

static void softmax_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t dim = n->iattr[0], outer, inner, D = x->d[dim];
    shape_split_at_dim(x, dim, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            softmax_line(in[0] + o * D * inner + i, out[0] + o * D * inner + i, D, inner);
}

static void softmax_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    din[0] = emit(e, CT_OP_softmax_grad, 2, (ValueId[]){n->out[0], dout[0]}, n->iattr, 1, NULL, 0, 0);
}

const OpDef op_softmax = {.name = "softmax", .min_in = 1, .max_in = 1, .iattr = {"dim"},
                          .infer = infer_softmax, .ref = softmax_ref, .vjp = softmax_vjp, .fusion = OP_LIBRARY,
                          .amp = OP_AMP_F32, .layout = OP_LAYOUT_NCHW, .cost = op_cost_none};

static int infer_softmax_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_shape(g, n, 1, in_shape(g, n, 0), err))
        return -1;
    return infer_softmax(g, n, out, err);
}

static void softmax_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t dim = n->iattr[0], outer, inner, D = x->d[dim];
    shape_split_at_dim(x, dim, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *y = in[0] + o * D * inner + i, *dy = in[1] + o * D * inner + i;
            double dot = 0;
            for (int64_t j = 0; j < D; j++)
                dot += y[j * inner] * dy[j * inner];
            for (int64_t j = 0; j < D; j++)
                out[0][o * D * inner + i + j * inner] = y[j * inner] * (dy[j * inner] - dot);
        }
}

const OpDef op_softmax_grad = {.name = "softmax_grad", .min_in = 2, .max_in = 2, .iattr = {"dim"},
                               .infer = infer_softmax_grad, .ref = softmax_grad_ref, .fusion = OP_LIBRARY,
                               .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static int infer_sdpa(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    for (int i = 0; i < 3; i++)
        if (require_float(g, n, i, 4, err))
            return -1;
    const CtShape *q = in_shape(g, n, 0), *k = in_shape(g, n, 1), *v = in_shape(g, n, 2);
    if (!shape_equal(k, v) || q->d[0] != k->d[0] || q->d[1] != k->d[1] || q->d[3] != k->d[3])
        return ct_fail(err, "q, k, v must be [B,H,N,D] with matching B, H, D (k and v equal)");
    return infer_like_input0(g, n, out, err);
}

static void sdpa_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *q = in_shape(g, n, 0), *k = in_shape(g, n, 1);
    int64_t BH = q->d[0] * q->d[1], N = q->d[2], M = k->d[2], D = q->d[3];
    double scale = n->fattr[0];
    double *s = malloc((size_t)M * sizeof *s);
    CT_ASSERT(s != NULL);
    for (int64_t h = 0; h < BH; h++) {
        const double *Q = in[0] + h * N * D, *K = in[1] + h * M * D, *V = in[2] + h * M * D;
        for (int64_t i = 0; i < N; i++) {
            for (int64_t j = 0; j < M; j++) {
                double acc = 0;
                for (int64_t d = 0; d < D; d++)
                    acc += Q[i * D + d] * K[j * D + d];
                s[j] = acc * scale;
            }
            softmax_line(s, s, M, 1);
            for (int64_t d = 0; d < D; d++) {
                double acc = 0;
                for (int64_t j = 0; j < M; j++)
                    acc += s[j] * V[j * D + d];
                out[0][(h * N + i) * D + d] = acc;
            }
        }
    }
    free(s);
}

static void sdpa_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    ValueId in[4] = {n->in[0], n->in[1], n->in[2], dout[0]};
    if (emit(e, CT_OP_sdpa_grad, 4, in, NULL, 0, n->fattr, 1, 0) < 0)
        return;
    for (int k = 0; k < 3; k++)
        din[k] = need[k] ? emit_last(e)->out[k] : -1;
}

/* fvcore skips aten::scaled_dot_product_attention; timm without fused
 * attention calls q@k^T [B,H,N,M] and attn@v [B,H,N,D], two matmuls. */
static OpCost sdpa_cost(const Graph *g, const Node *n, unsigned flags)
{
    if (!(flags & OP_COST_ATTENTION))
        return (OpCost){0, 0};
    const CtShape *q = in_shape(g, n, 0), *v = in_shape(g, n, 2);
    int64_t scores = q->d[0] * q->d[1] * q->d[2] * in_shape(g, n, 1)->d[2];
    return (OpCost){shape_numel(q) * v->d[2] + scores * v->d[3], scores + shape_numel(out_shape(g, n, 0))};
}

const OpDef op_sdpa = {.name = "sdpa", .min_in = 3, .max_in = 3, .fattr = {"scale"},
                       .infer = infer_sdpa, .ref = sdpa_ref, .vjp = sdpa_vjp, .fusion = OP_LIBRARY,
                       .amp = OP_AMP_LOW, .layout = OP_LAYOUT_NCHW, .cost = sdpa_cost};

static int infer_sdpa_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (infer_sdpa(g, n, out, err) < 0 || require_shape(g, n, 3, in_shape(g, n, 0), err))
        return -1;
    out[1] = *in_type(g, n, 1);
    out[2] = *in_type(g, n, 2);
    return 3;
}

/* With P = softmax(q k^T s): dv = P^T dy; dP = dy v^T;
 * dS = P * (dP - rowsum(dP * P)); dq = dS k s; dk = dS^T q s. */
static void sdpa_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *q = in_shape(g, n, 0), *k = in_shape(g, n, 1);
    int64_t BH = q->d[0] * q->d[1], N = q->d[2], M = k->d[2], D = q->d[3];
    double scale = n->fattr[0];
    double *p = malloc((size_t)M * sizeof *p), *dp = malloc((size_t)M * sizeof *dp);
    CT_ASSERT(p && dp);
    for (int64_t i = 0; i < BH * M * D; i++)
        out[1][i] = out[2][i] = 0;
    for (int64_t h = 0; h < BH; h++) {
        const double *Q = in[0] + h * N * D, *K = in[1] + h * M * D, *V = in[2] + h * M * D, *dY = in[3] + h * N * D;
        double *dQ = out[0] + h * N * D, *dK = out[1] + h * M * D, *dV = out[2] + h * M * D;
        for (int64_t i = 0; i < N; i++) {
            for (int64_t j = 0; j < M; j++) {
                double acc = 0;
                for (int64_t d = 0; d < D; d++)
                    acc += Q[i * D + d] * K[j * D + d];
                p[j] = acc * scale;
            }
            softmax_line(p, p, M, 1);
            double dot = 0;
            for (int64_t j = 0; j < M; j++) {
                double acc = 0;
                for (int64_t d = 0; d < D; d++) {
                    acc += dY[i * D + d] * V[j * D + d];
                    dV[j * D + d] += p[j] * dY[i * D + d];
                }
                dp[j] = acc;
                dot += acc * p[j];
            }
            for (int64_t d = 0; d < D; d++)
                dQ[i * D + d] = 0;
            for (int64_t j = 0; j < M; j++) {
                double ds = p[j] * (dp[j] - dot) * scale;
                for (int64_t d = 0; d < D; d++) {
                    dQ[i * D + d] += ds * K[j * D + d];
                    dK[j * D + d] += ds * Q[i * D + d];
                }
            }
        }
    }
    free(p);
    free(dp);
}

const OpDef op_sdpa_grad = {.name = "sdpa_grad", .min_in = 4, .max_in = 4, .fattr = {"scale"},
                            .infer = infer_sdpa_grad, .ref = sdpa_grad_ref, .fusion = OP_LIBRARY,
                            .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};
