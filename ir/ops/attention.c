/*
 * softmax along one dim, and scaled-dot-product attention as one op:
 * q, k, v [B, H, N, D] and an optional bias [B or 1, H or 1, N, M] ->
 * softmax(q k^T * scale + bias) v, [B, H, N, D]
 * (F.scaled_dot_product_attention with a float attn_mask, no dropout).
 * Gradients: softmax_grad(y, dy) = y * (dy - sum(dy * y)) along dim, and
 * sdpa_grad(q, k, v, dy[, bias]) -> dq, dk, dv[, dbias], recomputing the
 * attention weights.
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

/* Input 3, where present, is an additive bias [B|1, H|1, N, M] on the scores. */
static int infer_sdpa(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    for (int i = 0; i < 3; i++)
        if (require_float(g, n, i, 4, err))
            return -1;
    const CtShape *q = in_shape(g, n, 0), *k = in_shape(g, n, 1), *v = in_shape(g, n, 2);
    if (!shape_equal(k, v) || q->d[0] != k->d[0] || q->d[1] != k->d[1] || q->d[3] != k->d[3])
        return ct_fail(err, "q, k, v must be [B,H,N,D] with matching B, H, D (k and v equal)");
    if (n->nin > 3) {
        if (require_float(g, n, 3, 4, err))
            return -1;
        const CtShape *a = in_shape(g, n, 3);
        if ((a->d[0] != 1 && a->d[0] != q->d[0]) || (a->d[1] != 1 && a->d[1] != q->d[1]) || a->d[2] != q->d[2] ||
            a->d[3] != k->d[2])
            return ct_fail(err, "the bias must be [B or 1, H or 1, N, M] for q [B,H,N,D] and k [B,H,M,D]");
        if (in_type(g, n, 3)->dtype != in_type(g, n, 0)->dtype)
            return ct_fail(err, "the bias must have q's dtype");
    }
    return infer_like_input0(g, n, out, err);
}

/* Where head bh (= b * H + h) of a bias of shape a starts: a broadcast
 * dim (size 1) steps 0. */
static int64_t bias_head(const CtShape *a, int64_t H, int64_t bh)
{
    int64_t NM = a->d[2] * a->d[3];
    return (a->d[0] == 1 ? 0 : bh / H * a->d[1] * NM) + (a->d[1] == 1 ? 0 : bh % H * NM);
}

/* The scores of query row i of one head: s[j] = q_i . k_j * scale (+ A[i, j]). */
static void sdpa_scores(const double *Q, const double *K, const double *A, int64_t i, int64_t M, int64_t D,
                        double scale, double *s)
{
    for (int64_t j = 0; j < M; j++) {
        double acc = 0;
        for (int64_t d = 0; d < D; d++)
            acc += Q[i * D + d] * K[j * D + d];
        s[j] = acc * scale + (A ? A[i * M + j] : 0);
    }
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
        const double *A = n->nin > 3 ? in[3] + bias_head(in_shape(g, n, 3), q->d[1], h) : NULL;
        for (int64_t i = 0; i < N; i++) {
            sdpa_scores(Q, K, A, i, M, D, scale, s);
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

/* sdpa_grad takes the bias after dy and gives its gradient, of the full
 * scores' shape [B,H,N,M], only when asked; summed here to the bias's shape. */
static void sdpa_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int bias = n->nin > 3;
    ValueId in[5] = {n->in[0], n->in[1], n->in[2], dout[0], bias ? n->in[3] : -1};
    int64_t dbias = bias && need[3];
    if (emit(e, CT_OP_sdpa_grad, 4 + bias, in, &dbias, 1, n->fattr, 1, 0) < 0)
        return;
    const Node *gr = emit_last(e);
    ValueId out[4] = {gr->out[0], gr->out[1], gr->out[2], dbias ? gr->out[3] : -1};
    for (int k = 0; k < 3; k++)
        din[k] = need[k] ? out[k] : -1;
    if (dbias)
        din[3] = emit_sum_to(e, out[3], emit_shape(e, n->in[3]));
}

/* fvcore skips aten::scaled_dot_product_attention; timm without fused
 * attention calls q@k^T [B,H,N,M] and attn@v [B,H,N,D], two matmuls (the
 * bias's add between them counts nothing). */
static OpCost sdpa_cost(const Graph *g, const Node *n, unsigned flags)
{
    if (!(flags & OP_COST_ATTENTION))
        return (OpCost){0, 0};
    const CtShape *q = in_shape(g, n, 0), *v = in_shape(g, n, 2);
    int64_t scores = q->d[0] * q->d[1] * q->d[2] * in_shape(g, n, 1)->d[2];
    return (OpCost){shape_numel(q) * v->d[2] + scores * v->d[3], scores + shape_numel(out_shape(g, n, 0))};
}

const OpDef op_sdpa = {.name = "sdpa", .min_in = 3, .max_in = 4, .fattr = {"scale"},
                       .infer = infer_sdpa, .ref = sdpa_ref, .vjp = sdpa_vjp, .fusion = OP_LIBRARY,
                       .amp = OP_AMP_LOW, .layout = OP_LAYOUT_NCHW, .cost = sdpa_cost};

/* sdpa_grad(q, k, v, dy[, bias]) -> dq, dk, dv[, dS [B,H,N,M] when dbias=1]. */
static int infer_sdpa_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    Node fwd = *n;
    fwd.nin = n->nin - 1;
    if (n->nin > 4)
        fwd.in[3] = n->in[4];
    if (infer_sdpa(g, &fwd, out, err) < 0 || require_shape(g, n, 3, in_shape(g, n, 0), err))
        return -1;
    if (n->iattr[0] && n->nin < 5)
        return ct_fail(err, "dbias=1 without a bias");
    out[1] = *in_type(g, n, 1);
    out[2] = *in_type(g, n, 2);
    if (!n->iattr[0])
        return 3;
    out[3] = *in_type(g, n, 4);
    out[3].shape.d[0] = in_shape(g, n, 0)->d[0];
    out[3].shape.d[1] = in_shape(g, n, 0)->d[1];
    return 4;
}

/* With P = softmax(q k^T s + bias): dv = P^T dy; dP = dy v^T;
 * dS = P * (dP - rowsum(dP * P)); dq = dS k s; dk = dS^T q s; dbias = dS. */
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
        const double *A = n->nin > 4 ? in[4] + bias_head(in_shape(g, n, 4), q->d[1], h) : NULL;
        double *dQ = out[0] + h * N * D, *dK = out[1] + h * M * D, *dV = out[2] + h * M * D;
        for (int64_t i = 0; i < N; i++) {
            sdpa_scores(Q, K, A, i, M, D, scale, p);
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
                double ds = p[j] * (dp[j] - dot);
                if (n->iattr[0])
                    out[3][(h * N + i) * M + j] = ds;
                for (int64_t d = 0; d < D; d++) {
                    dQ[i * D + d] += ds * scale * K[j * D + d];
                    dK[j * D + d] += ds * scale * Q[i * D + d];
                }
            }
        }
    }
    free(p);
    free(dp);
}

const OpDef op_sdpa_grad = {.name = "sdpa_grad", .min_in = 4, .max_in = 5, .iattr = {"dbias"}, .fattr = {"scale"},
                            .infer = infer_sdpa_grad, .ref = sdpa_grad_ref, .fusion = OP_LIBRARY,
                            .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};
