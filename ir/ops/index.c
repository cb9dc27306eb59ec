/*
 * Indexing by an integer tensor.
 * gather(x, index), iattr dim: torch.index_select generalised to an index
 *   of any shape K (i32 or i64): y = x.shape[:dim] + K + x.shape[dim+1:],
 *   y[..., k..., ...] = x[..., index[k], ...]. timm's relative position
 *   bias tables (table[index.view(-1)]) and LeViT's attention_biases[:, idxs].
 *   An index outside [0, x.shape[dim]), which torch rejects, gives zeros
 *   (and no gradient): the kernels never read outside x.
 * gather_grad(dy, index), iattrs dim and T (x.shape[dim]): zeros of x's
 *   shape with each slice of dy added at its index (index_add_), repeated
 *   indices accumulating in the order of k.
 * Both see x as [O, T, I] (the dims before, at and after dim) and y as
 * [O, numel(K), I].
 */
#include "ops_impl.h"

static int require_index(const Graph *g, const Node *n, CtErr *err)
{
    CtDType t = in_type(g, n, 1)->dtype;
    if (t != CT_I32 && t != CT_I64)
        return ct_fail(err, "index must be an i32 or i64 tensor, got %s", ct_dtype_name(t));
    return 0;
}

static int infer_gather(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err) || require_index(g, n, err))
        return -1;
    const CtShape *x = in_shape(g, n, 0), *k = in_shape(g, n, 1);
    int64_t dim = n->iattr[0];
    if (dim < 0 || dim >= x->ndim)
        return ct_fail(err, "dim %lld out of range for %d dims", (long long)dim, x->ndim);
    if (x->ndim - 1 + k->ndim > CT_MAX_DIMS)
        return ct_fail(err, "the result would have more than %d dims", CT_MAX_DIMS);
    CtShape y = {0};
    for (int i = 0; i < dim; i++)
        y.d[y.ndim++] = x->d[i];
    for (int i = 0; i < k->ndim; i++)
        y.d[y.ndim++] = k->d[i];
    for (int i = (int)dim + 1; i < x->ndim; i++)
        y.d[y.ndim++] = x->d[i];
    out[0] = (CtType){y, in_type(g, n, 0)->dtype};
    return 1;
}

static int infer_gather_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err) || require_index(g, n, err))
        return -1;
    const CtShape *dy = in_shape(g, n, 0), *k = in_shape(g, n, 1);
    int64_t dim = n->iattr[0], T = n->iattr[1];
    char a[96], b[96];
    if (dim < 0 || dim + k->ndim > dy->ndim || dy->ndim - k->ndim + 1 > CT_MAX_DIMS)
        return ct_fail(err, "dim %lld with a %d-dim index does not fit dy %s", (long long)dim, k->ndim,
                       shape_str(dy, a, sizeof a));
    for (int i = 0; i < k->ndim; i++)
        if (dy->d[dim + i] != k->d[i])
            return ct_fail(err, "dy %s does not hold index %s at dim %lld", shape_str(dy, a, sizeof a),
                           shape_str(k, b, sizeof b), (long long)dim);
    if (T < 1)
        return ct_fail(err, "T %lld must be at least 1", (long long)T);
    CtShape x = {0};
    for (int i = 0; i < dim; i++)
        x.d[x.ndim++] = dy->d[i];
    x.d[x.ndim++] = T;
    for (int i = (int)dim + k->ndim; i < dy->ndim; i++)
        x.d[x.ndim++] = dy->d[i];
    out[0] = (CtType){x, in_type(g, n, 0)->dtype};
    return 1;
}

/* x as [O, T, I] around dim (of x's shape `x`). */
static void split_at(const CtShape *x, int64_t dim, int64_t *O, int64_t *T, int64_t *I)
{
    *O = *I = 1;
    for (int i = 0; i < dim; i++)
        *O *= x->d[i];
    *T = x->d[dim];
    for (int i = (int)dim + 1; i < x->ndim; i++)
        *I *= x->d[i];
}

static void gather_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t O, T, I, K = shape_numel(in_shape(g, n, 1));
    split_at(in_shape(g, n, 0), n->iattr[0], &O, &T, &I);
    for (int64_t o = 0; o < O; o++)
        for (int64_t k = 0; k < K; k++) {
            double t = in[1][k];
            for (int64_t i = 0; i < I; i++)
                out[0][(o * K + k) * I + i] = t >= 0 && t < (double)T ? in[0][(o * T + (int64_t)t) * I + i] : 0;
        }
}

static void gather_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t O, T, I, K = shape_numel(in_shape(g, n, 1));
    split_at(out_shape(g, n, 0), n->iattr[0], &O, &T, &I);
    for (int64_t j = 0; j < O * T * I; j++)
        out[0][j] = 0;
    for (int64_t o = 0; o < O; o++)
        for (int64_t k = 0; k < K; k++) {
            double t = in[1][k];
            if (t >= 0 && t < (double)T)
                for (int64_t i = 0; i < I; i++)
                    out[0][(o * T + (int64_t)t) * I + i] += in[0][(o * K + k) * I + i];
        }
}

static void gather_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    if (dout[0] < 0 || !need[0])
        return;
    int64_t a[2] = {n->iattr[0], emit_shape(e, n->in[0]).d[n->iattr[0]]};
    din[0] = emit(e, CT_OP_gather_grad, 2, (ValueId[]){dout[0], n->in[1]}, a, 2, NULL, 0, 0);
}

/* fvcore counts nothing for aten::index / index_select. */
const OpDef op_gather = {.name = "gather", .min_in = 2, .max_in = 2, .iattr = {"dim"}, .infer = infer_gather,
                         .ref = gather_ref, .vjp = gather_vjp, .nondiff = 1u << 1, .fusion = OP_LIBRARY,
                         .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW, .cost = op_cost_none};

const OpDef op_gather_grad = {.name = "gather_grad", .min_in = 2, .max_in = 2, .iattr = {"dim", "T"},
                              .infer = infer_gather_grad, .ref = gather_grad_ref, .nondiff = 1u << 1,
                              .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};
