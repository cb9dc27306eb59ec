/*
 * softmax along one dim, and scaled-dot-product attention as one op:
 * q, k, v [B, H, N, D] and an optional bias [B or 1, H or 1, N, M] ->
 * y = softmax(q k^T * scale + bias) v, [B, H, N, D]
 * (F.scaled_dot_product_attention with a float attn_mask, no dropout), and
 * the statistics [B, H, N] f32, each row's logsumexp of the scores
 * (attention_geom.h), which the gradient reads back, as torch's and
 * cuDNN's fused attention save theirs: with it and y the gradient forms the
 * weights from the scores alone, and rowsum(dP * P) as dy . y, without
 * running the forward again.
 * Gradients: softmax_grad(y, dy) = y * (dy - sum(dy * y)) along dim, and
 * sdpa_grad(q, k, v, dy, y, stats[, bias]) -> dq, dk, dv[, dbias].
 * packed=1: one qkv [B,N,3,H,D] in, y [B,N,H,D] out, and
 * sdpa_grad(qkv, dy, y, stats[, bias]) -> dqkv[, dbias].
 */
#include <math.h>
#include <stdlib.h>

#include "attention_geom.h"
#include "ops_impl.h"

static int infer_softmax(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    if (n->iattr[0] < 0 || n->iattr[0] >= in_shape(g, n, 0)->ndim)
        return ct_fail(err, "dim %lld out of range", (long long)n->iattr[0]);
    return infer_like_input0(g, n, out, err);
}

/* Softmax of `count` values `stride` apart, max-subtracted for stability;
 * *lse, unless lse is NULL, gets their logsumexp. */
static void softmax_line(const double *x, double *y, int64_t count, int64_t stride, double *lse)
{
    double m = -INFINITY, sum = 0;
    for (int64_t i = 0; i < count; i++)
        m = x[i * stride] > m ? x[i * stride] : m;
    m = m == -INFINITY ? 0 : m;
    for (int64_t i = 0; i < count; i++)
        sum += (y[i * stride] = exp(x[i * stride] - m));
    for (int64_t i = 0; i < count; i++)
        y[i * stride] /= sum;
    if (lse)
        *lse = m + log(sum);
}

static void softmax_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t dim = n->iattr[0], outer, inner, D = x->d[dim];
    shape_split_at_dim(x, dim, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            softmax_line(in[0] + o * D * inner + i, out[0] + o * D * inner + i, D, inner, NULL);
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

/* The bias, where present, is an additive [B|1, H|1, N, M] on the scores, of
 * q's dtype. */
static int check_bias(const Graph *g, const Node *n, int i, const AttnGeom *a, CtErr *err)
{
    if (i < 0)
        return 0;
    if (require_float(g, n, i, 4, err))
        return -1;
    const CtShape *s = in_shape(g, n, i);
    if ((s->d[0] != 1 && s->d[0] != a->B) || (s->d[1] != 1 && s->d[1] != a->H) || s->d[2] != a->N ||
        s->d[3] != a->M)
        return ct_fail(err, "the bias must be [B or 1, H or 1, N, M] for %lld heads of %lld queries and %lld keys",
                       (long long)a->H, (long long)a->N, (long long)a->M);
    if (in_type(g, n, i)->dtype != in_type(g, n, 0)->dtype)
        return ct_fail(err, "the bias must have q's dtype");
    return 0;
}

/* Both forms' operands (attention_geom.h) of sdpa or sdpa_grad (nin: the
 * forward's count of them, the bias's included), and the bias's; out[0] = y,
 * out[1] its statistics. */
static int infer_attention(const Graph *g, const Node *n, int nin, AttnGeom *a, CtType *out, CtErr *err)
{
    int packed = attn_packed(n);
    if (nin < (packed ? 1 : 3) || nin > (packed ? 2 : 4))
        return ct_fail(err, packed ? "packed: qkv and an optional bias" : "q, k, v and an optional bias");
    if (packed) {
        if (require_float(g, n, 0, 5, err))
            return -1;
        if (in_shape(g, n, 0)->d[2] != 3)
            return ct_fail(err, "packed: qkv must be [B,N,3,H,D]");
    } else {
        for (int i = 0; i < 3; i++)
            if (require_float(g, n, i, 4, err))
                return -1;
        const CtShape *q = in_shape(g, n, 0), *k = in_shape(g, n, 1), *v = in_shape(g, n, 2);
        if (!shape_equal(k, v) || q->d[0] != k->d[0] || q->d[1] != k->d[1] || q->d[3] != k->d[3])
            return ct_fail(err, "q, k, v must be [B,H,N,D] with matching B, H, D (k and v equal)");
    }
    attn_geom(g, n, a);
    if (check_bias(g, n, a->bias_in, a, err))
        return -1;
    out[0] = *in_type(g, n, 0);
    out[0].shape = packed ? (CtShape){4, {a->B, a->N, a->H, a->D}} : *in_shape(g, n, 0);
    out[1] = (CtType){.dtype = CT_F32, .shape = {3, {a->B, a->H, a->N}}};
    return 0;
}

static int infer_sdpa(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    AttnGeom a;
    return infer_attention(g, n, n->nin, &a, out, err) < 0 ? -1 : 2;
}

/* One head's operands: its first elements and their rows' strides. */
typedef struct Head {
    const double *Q, *K, *V, *A, *dY, *Y, *L; /* L: the rows' logsumexp */
    int64_t lq, lkv, lo;
} Head;

static Head head_of(const Graph *g, const Node *n, const AttnGeom *a, double *const *in, int64_t bh)
{
    Head h = {in[0] + attn_head(&a->q, a->H, bh),
              in[a->k_in] + a->k_off + attn_head(&a->kv, a->H, bh),
              in[a->v_in] + a->v_off + attn_head(&a->kv, a->H, bh),
              .lq = a->q.row,
              .lkv = a->kv.row,
              .lo = a->o.row};
    if (a->bias_in >= 0)
        h.A = in[a->bias_in] + attn_bias_head(in_shape(g, n, a->bias_in), a->H, bh);
    if (a->dy_in >= 0) {
        h.dY = in[a->dy_in] + attn_head(&a->o, a->H, bh);
        h.Y = in[a->y_in] + attn_head(&a->o, a->H, bh);
        h.L = in[a->stats_in] + bh * a->N;
    }
    return h;
}

/* The scores of query row i of one head: s[j] = q_i . k_j * scale (+ A[i, j]). */
static void sdpa_scores(const Head *h, int64_t i, int64_t M, int64_t D, double scale, double *s)
{
    for (int64_t j = 0; j < M; j++) {
        double acc = 0;
        for (int64_t d = 0; d < D; d++)
            acc += h->Q[i * h->lq + d] * h->K[j * h->lkv + d];
        s[j] = acc * scale + (h->A ? h->A[i * M + j] : 0);
    }
}

static void sdpa_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    AttnGeom a;
    attn_geom(g, n, &a);
    int64_t N = a.N, M = a.M, D = a.D;
    double *s = malloc((size_t)M * sizeof *s);
    CT_ASSERT(s != NULL);
    for (int64_t bh = 0; bh < a.B * a.H; bh++) {
        Head h = head_of(g, n, &a, in, bh);
        double *Y = out[0] + attn_head(&a.o, a.H, bh), *L = out[a.stats_out] + bh * N;
        for (int64_t i = 0; i < N; i++) {
            sdpa_scores(&h, i, M, D, n->fattr[0], s);
            softmax_line(s, s, M, 1, L + i);
            for (int64_t d = 0; d < D; d++) {
                double acc = 0;
                for (int64_t j = 0; j < M; j++)
                    acc += s[j] * h.V[j * h.lkv + d];
                Y[i * h.lo + d] = acc;
            }
        }
    }
    free(s);
}

/* sdpa_grad takes dy, y and the statistics after the forward's q, k, v
 * (or qkv), then the bias, and gives the bias's gradient, of the full
 * scores' shape [B,H,N,M], only when asked; summed here to the bias's shape. */
static void sdpa_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    AttnGeom a;
    attn_geom(e->g, n, &a);
    int nops = a.packed ? 1 : 3, bias = a.bias_in >= 0;
    if (dout[0] < 0) /* the statistics alone have no gradient to pass on */
        return;
    ValueId in[7];
    for (int i = 0; i < nops; i++)
        in[i] = n->in[i];
    in[nops] = dout[0], in[nops + 1] = n->out[0], in[nops + 2] = n->out[a.stats_out];
    if (bias)
        in[nops + 3] = n->in[a.bias_in];
    int64_t attr[2] = {bias && need[a.bias_in], a.packed};
    if (emit(e, CT_OP_sdpa_grad, nops + 3 + bias, in, attr, 2, n->fattr, 1, 0) < 0)
        return;
    const Node *gr = emit_last(e);
    ValueId dbias = attr[0] ? gr->out[nops] : -1;
    for (int k = 0; k < nops; k++)
        din[k] = need[k] ? gr->out[k] : -1;
    if (dbias >= 0)
        din[a.bias_in] = emit_sum_to(e, dbias, emit_shape(e, n->in[a.bias_in]));
}

/* fvcore skips aten::scaled_dot_product_attention; timm without fused
 * attention calls q@k^T [B,H,N,M] and attn@v [B,H,N,D], two matmuls (the
 * bias's add between them counts nothing). */
static OpCost sdpa_cost(const Graph *g, const Node *n, unsigned flags)
{
    if (!(flags & OP_COST_ATTENTION))
        return (OpCost){0, 0};
    AttnGeom a;
    attn_geom(g, n, &a);
    int64_t scores = a.B * a.H * a.N * a.M;
    return (OpCost){2 * scores * a.D, scores + shape_numel(out_shape(g, n, 0))};
}

const OpDef op_sdpa = {.name = "sdpa", .min_in = 1, .max_in = 4, .iattr = {"packed"}, .fattr = {"scale"},
                       .infer = infer_sdpa, .ref = sdpa_ref, .vjp = sdpa_vjp, .fusion = OP_LIBRARY,
                       .amp = OP_AMP_LOW, .layout = OP_LAYOUT_NCHW, .cost = sdpa_cost};

/* sdpa_grad(q, k, v, dy, y, stats[, bias]) -> dq, dk, dv[, dS [B,H,N,M]
 * when dbias=1]; packed: (qkv, dy, y, stats[, bias]) -> dqkv[, dS]. */
static int infer_sdpa_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    AttnGeom a;
    int nops = attn_packed(n) ? 1 : 3;
    if (n->nin < nops + 3)
        return ct_fail(err, "dy, y and the statistics after the operands");
    if (infer_attention(g, n, n->nin - 3, &a, out, err) < 0)
        return -1;
    for (int i = a.dy_in; i <= a.stats_in; i++) {
        const CtType *want = &out[i == a.stats_in];
        if (require_shape(g, n, i, &want->shape, err))
            return -1;
        if (in_type(g, n, i)->dtype != want->dtype)
            return ct_fail(err, "input %d: %s must be %s", i, i == a.stats_in ? "the statistics" : "dy and y",
                           ct_dtype_name(want->dtype));
    }
    for (int k = 0; k < nops; k++)
        out[k] = *in_type(g, n, k);
    if (!n->iattr[0])
        return nops;
    if (a.bias_in < 0)
        return ct_fail(err, "dbias=1 without a bias");
    out[nops] = *in_type(g, n, a.bias_in);
    out[nops].shape.d[0] = a.B;
    out[nops].shape.d[1] = a.H;
    return nops + 1;
}

/* With P = softmax(q k^T s + bias) = exp(scores - lse) from the forward's
 * statistics: dv = P^T dy; dP = dy v^T; dS = P * (dP - dy . y)
 * (dy . y = rowsum(dP * P)); dq = dS k s; dk = dS^T q s; dbias = dS. */
static void sdpa_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    AttnGeom a;
    attn_geom(g, n, &a);
    int64_t N = a.N, M = a.M, D = a.D;
    double scale = n->fattr[0];
    double *p = malloc((size_t)M * sizeof *p);
    CT_ASSERT(p != NULL);
    for (int k = 0; k < (a.packed ? 1 : 3); k++)
        for (int64_t i = 0; i < shape_numel(out_shape(g, n, k)); i++)
            out[k][i] = 0;
    for (int64_t bh = 0; bh < a.B * a.H; bh++) {
        Head h = head_of(g, n, &a, in, bh);
        double *dQ = out[0] + attn_head(&a.q, a.H, bh), *dK = out[a.dk_out] + a.k_off + attn_head(&a.kv, a.H, bh);
        double *dV = out[a.dv_out] + a.v_off + attn_head(&a.kv, a.H, bh);
        int64_t lq = h.lq, lkv = h.lkv, lo = h.lo;
        for (int64_t i = 0; i < N; i++) {
            sdpa_scores(&h, i, M, D, scale, p);
            double dot = 0;
            for (int64_t d = 0; d < D; d++)
                dot += h.dY[i * lo + d] * h.Y[i * lo + d];
            for (int64_t j = 0; j < M; j++) {
                double dp = 0, pj = exp(p[j] - h.L[i]);
                for (int64_t d = 0; d < D; d++) {
                    dp += h.dY[i * lo + d] * h.V[j * lkv + d];
                    dV[j * lkv + d] += pj * h.dY[i * lo + d];
                }
                double ds = pj * (dp - dot);
                if (a.dbias_out >= 0)
                    out[a.dbias_out][(bh * N + i) * M + j] = ds;
                for (int64_t d = 0; d < D; d++) {
                    dQ[i * lq + d] += ds * scale * h.K[j * lkv + d];
                    dK[j * lkv + d] += ds * scale * h.Q[i * lq + d];
                }
            }
        }
    }
    free(p);
}

/* amp leaves the statistics f32, as autocast's fused attention keeps its logsumexp. */
static unsigned sdpa_grad_amp_keep(const Graph *g, const Node *n)
{
    AttnGeom a;
    attn_geom(g, n, &a);
    return 1u << a.stats_in;
}

const OpDef op_sdpa_grad = {.name = "sdpa_grad", .min_in = 4, .max_in = 7, .iattr = {"dbias", "packed"},
                            .fattr = {"scale"}, .infer = infer_sdpa_grad, .ref = sdpa_grad_ref,
                            .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW, .amp_keep_of = sdpa_grad_amp_keep,
                            .layout = OP_LAYOUT_NCHW};
