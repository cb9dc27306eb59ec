/*
 * Matrix products.
 * linear: x [..., K], weight [N, K], optional bias [N] -> [..., N] (nn.Linear).
 * matmul: a [..., M, K] @ b [..., K, N] -> [..., M, N]; the leading dims of a
 *   and b are equal, or b is a plain [K, N] matrix shared by all. trans_a /
 *   trans_b: a stored [..., K, M], b [..., N, K], read transposed (a GEMM's
 *   flags: the backward's transposes are not copied).
 */
#include "ops_impl.h"

static int infer_linear(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err) || require_float(g, n, 1, 2, err))
        return -1;
    const CtShape *x = in_shape(g, n, 0), *w = in_shape(g, n, 1);
    if (x->ndim < 1 || x->d[x->ndim - 1] != w->d[1])
        return ct_fail(err, "input's last dim must equal weight's in_features %lld", (long long)w->d[1]);
    if (n->nin == 3 && require_shape(g, n, 2, &(CtShape){1, {w->d[0]}}, err))
        return -1;
    out[0] = *in_type(g, n, 0);
    out[0].shape.d[x->ndim - 1] = w->d[0];
    return 1;
}

static void linear_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0), *w = in_shape(g, n, 1);
    int64_t K = w->d[1], N = w->d[0], rows = shape_numel(x) / K;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < N; j++) {
            double acc = n->nin == 3 ? in[2][j] : 0;
            for (int64_t k = 0; k < K; k++)
                acc += in[0][r * K + k] * in[1][j * K + k];
            out[0][r * N + j] = acc;
        }
}

/* Over rows R = all leading dims: dx = dy W, dW = dy^T x, db = sum_rows dy. */
static void linear_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    CtShape x = emit_shape(e, n->in[0]), w = emit_shape(e, n->in[1]);
    int64_t N = w.d[0], K = w.d[1], R = shape_numel(&x) / (K ? K : 1);
    CtShape rn = {2, {R, N}}, rk = {2, {R, K}};
    ValueId dy = emit_reshape(e, dout[0], rn);
    if (need[0])
        din[0] = emit_reshape(e, emit(e, CT_OP_matmul, 2, (ValueId[]){dy, n->in[1]}, NULL, 0, NULL, 0, 0), x);
    if (need[1]) /* dy read transposed by the GEMM, not copied */
        din[1] = emit(e, CT_OP_matmul, 2, (ValueId[]){dy, emit_reshape(e, n->in[0], rk)}, (int64_t[]){1, 0}, 2, NULL,
                      0, 0);
    if (n->nin == 3 && need[2])
        din[2] = emit(e, CT_OP_reduce_sum, 1, &dy, (int64_t[]){1, 0}, 2, NULL, 0, 0);
}

/* fvcore's aten::linear: numel(x) * out_features MACs, the output's
 * elements as activations. */
static OpCost linear_cost(const Graph *g, const Node *n, unsigned flags)
{
    return (OpCost){shape_numel(in_shape(g, n, 0)) * in_shape(g, n, 1)->d[0], shape_numel(out_shape(g, n, 0))};
}

const OpDef op_linear = {.name = "linear", .min_in = 2, .max_in = 3, .infer = infer_linear, .ref = linear_ref,
                         .vjp = linear_vjp, .fusion = OP_CONTRACTION, .amp = OP_AMP_LOW, .layout = OP_LAYOUT_NCHW,
                         .cost = linear_cost};

void op_matmul_dims(const Graph *g, const Node *n, int64_t *M, int64_t *K, int64_t *N)
{
    const CtShape *a = in_shape(g, n, 0), *b = in_shape(g, n, 1);
    int64_t a0 = a->d[a->ndim - 2], a1 = a->d[a->ndim - 1], b0 = b->d[b->ndim - 2], b1 = b->d[b->ndim - 1];
    *M = n->iattr[0] ? a1 : a0;
    *K = n->iattr[0] ? a0 : a1;
    *N = n->iattr[1] ? b0 : b1;
}

static int infer_matmul(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err) || require_float(g, n, 1, -1, err))
        return -1;
    const CtShape *a = in_shape(g, n, 0), *b = in_shape(g, n, 1);
    char sa[96], sb[96];
    if ((n->iattr[0] | n->iattr[1]) & ~(int64_t)1)
        return ct_fail(err, "trans_a and trans_b are 0 or 1");
    if (a->ndim < 2 || b->ndim < 2)
        goto mismatch;
    int64_t M, K, N;
    op_matmul_dims(g, n, &M, &K, &N);
    if (K != (n->iattr[1] ? b->d[b->ndim - 1] : b->d[b->ndim - 2]))
        goto mismatch;
    if (b->ndim != 2) {
        if (b->ndim != a->ndim)
            goto mismatch;
        for (int i = 0; i < a->ndim - 2; i++)
            if (a->d[i] != b->d[i])
                goto mismatch;
    }
    out[0] = *in_type(g, n, 0);
    out[0].shape.d[a->ndim - 2] = M;
    out[0].shape.d[a->ndim - 1] = N;
    return 1;
mismatch:
    return ct_fail(err, "cannot multiply %s%s by %s%s", shape_str(a, sa, sizeof sa), n->iattr[0] ? "^T" : "",
                   shape_str(b, sb, sizeof sb), n->iattr[1] ? "^T" : "");
}

static void matmul_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *b = in_shape(g, n, 1);
    int64_t M, K, N;
    op_matmul_dims(g, n, &M, &K, &N);
    int64_t batch = shape_numel(in_shape(g, n, 0)) / (M * K);
    int shared_b = b->ndim == 2, ta = (int)n->iattr[0], tb = (int)n->iattr[1];
    for (int64_t t = 0; t < batch; t++) {
        const double *A = in[0] + t * M * K, *B = in[1] + (shared_b ? 0 : t * K * N);
        double *C = out[0] + t * M * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += A[ta ? k * M + i : i * K + k] * B[tb ? j * K + k : k * N + j];
                C[i * N + j] = acc;
            }
    }
}

static ValueId emit_matmul(Emitter *e, ValueId a, ValueId b, int ta, int tb)
{
    return emit(e, CT_OP_matmul, 2, (ValueId[]){a, b}, (int64_t[]){ta, tb}, 2, NULL, 0, 0);
}

/* The last two dims swapped. */
static ValueId transpose(Emitter *e, ValueId x)
{
    int nd = emit_shape(e, x).ndim;
    int64_t p[CT_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        p[i] = i;
    p[nd - 2] = nd - 1;
    p[nd - 1] = nd - 2;
    return emit_permute(e, x, nd, p);
}

/* c = op(a) op(b), op the transpose where the node's flag says: da = dc
 * op(b)^T, or its transpose op(b) dc^T where a is read transposed; db =
 * op(a)^T dc, or dc^T op(a); the transposes as the products' flags, not
 * copies. A b shared by the batch sums its gradient over it: one GEMM over
 * all rows of a (a transposed a copied to rows first). */
static void matmul_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    CtShape a = emit_shape(e, n->in[0]), b = emit_shape(e, n->in[1]);
    int ta = (int)n->iattr[0], tb = (int)n->iattr[1];
    int shared = b.ndim == 2 && a.ndim > 2;
    if (need[0] && ta && !shared)
        din[0] = emit_matmul(e, n->in[1], dout[0], tb, 1);
    else if (need[0]) /* a transposed a beside a shared b: the rows' gradient, transposed */
        din[0] = emit_matmul(e, dout[0], n->in[1], 0, !tb);
    if (need[0] && ta && shared)
        din[0] = transpose(e, din[0]);
    if (!need[1])
        return;
    ValueId lhs = n->in[0], rhs = dout[0];
    if (shared) {
        if (ta) {
            lhs = transpose(e, lhs);
            ta = 0;
        }
        int64_t K = emit_shape(e, lhs).d[a.ndim - 1], N = emit_shape(e, rhs).d[a.ndim - 1];
        int64_t R = shape_numel(&a) / K;
        lhs = emit_reshape(e, lhs, (CtShape){2, {R, K}});
        rhs = emit_reshape(e, rhs, (CtShape){2, {R, N}});
    }
    din[1] = tb ? emit_matmul(e, rhs, lhs, 1, ta) : emit_matmul(e, lhs, rhs, !ta, 0);
}

/* fvcore's aten::matmul family: numel(a) * N MACs, the output's elements
 * as activations. */
static OpCost matmul_cost(const Graph *g, const Node *n, unsigned flags)
{
    int64_t M, K, N;
    op_matmul_dims(g, n, &M, &K, &N);
    return (OpCost){shape_numel(in_shape(g, n, 0)) * N, shape_numel(out_shape(g, n, 0))};
}

const OpDef op_matmul = {.name = "matmul", .min_in = 2, .max_in = 2, .iattr = {"trans_a", "trans_b"},
                         .infer = infer_matmul, .ref = matmul_ref, .vjp = matmul_vjp, .fusion = OP_CONTRACTION,
                         .amp = OP_AMP_LOW, .layout = OP_LAYOUT_NCHW, .cost = matmul_cost};
