/*
 * softmax along one dim, and scaled-dot-product attention as one op:
 * q, k, v [B, H, N, D] -> softmax(q k^T * scale) v, [B, H, N, D]
 * (F.scaled_dot_product_attention without mask or dropout).
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
    int64_t dim = n->iattr[0], outer = 1, inner = 1, D = x->d[dim];
    for (int i = 0; i < dim; i++)
        outer *= x->d[i];
    for (int i = (int)dim + 1; i < x->ndim; i++)
        inner *= x->d[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            softmax_line(in[0] + o * D * inner + i, out[0] + o * D * inner + i, D, inner);
}

const OpDef op_softmax = {.name = "softmax", .min_in = 1, .max_in = 1, .iattr = {"dim"},
                          .infer = infer_softmax, .ref = softmax_ref};

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

const OpDef op_sdpa = {.name = "sdpa", .min_in = 3, .max_in = 3, .fattr = {"scale"},
                       .infer = infer_sdpa, .ref = sdpa_ref};
