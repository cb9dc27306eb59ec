/*
 * Matrix products.
 * linear: x [..., K], weight [N, K], optional bias [N] -> [..., N] (nn.Linear).
 * matmul: a [..., M, K] @ b [..., K, N] -> [..., M, N]; the leading dims of a
 *   and b are equal, or b is a plain [K, N] matrix shared by all.
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
    if (need[1]) {
        ValueId dyt = emit_permute(e, dy, 2, (int64_t[]){1, 0});
        din[1] = emit(e, CT_OP_matmul, 2, (ValueId[]){dyt, emit_reshape(e, n->in[0], rk)}, NULL, 0, NULL, 0, 0);
    }
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

static int infer_matmul(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err) || require_float(g, n, 1, -1, err))
        return -1;
    const CtShape *a = in_shape(g, n, 0), *b = in_shape(g, n, 1);
    char sa[96], sb[96];
    if (a->ndim < 2 || b->ndim < 2 || a->d[a->ndim - 1] != b->d[b->ndim - 2])
        goto mismatch;
    if (b->ndim != 2) {
        if (b->ndim != a->ndim)
            goto mismatch;
        for (int i = 0; i < a->ndim - 2; i++)
            if (a->d[i] != b->d[i])
                goto mismatch;
    }
    out[0] = *in_type(g, n, 0);
    out[0].shape.d[a->ndim - 1] = b->d[b->ndim - 1];
    return 1;
mismatch:
    return ct_fail(err, "cannot multiply %s by %s", shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb));
}

static void matmul_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *a = in_shape(g, n, 0), *b = in_shape(g, n, 1);
    int64_t M = a->d[a->ndim - 2], K = a->d[a->ndim - 1], N = b->d[b->ndim - 1];
    int64_t batch = shape_numel(a) / (M * K);
    int shared_b = b->ndim == 2;
    for (int64_t t = 0; t < batch; t++) {
        const double *A = in[0] + t * M * K, *B = in[1] + (shared_b ? 0 : t * K * N);
        double *C = out[0] + t * M * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += A[i * K + k] * B[k * N + j];
                C[i * N + j] = acc;
            }
    }
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

/* da = dc b^T; db = a^T dc, summed over the batch when b is shared. */
static void matmul_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    CtShape a = emit_shape(e, n->in[0]), b = emit_shape(e, n->in[1]);
    if (need[0])
        din[0] = emit(e, CT_OP_matmul, 2, (ValueId[]){dout[0], transpose(e, n->in[1])}, NULL, 0, NULL, 0, 0);
    if (!need[1])
        return;
    ValueId lhs = n->in[0], rhs = dout[0];
    if (b.ndim == 2 && a.ndim > 2) {
        int64_t K = a.d[a.ndim - 1], N = b.d[1], R = shape_numel(&a) / K;
        lhs = emit_reshape(e, lhs, (CtShape){2, {R, K}});
        rhs = emit_reshape(e, rhs, (CtShape){2, {R, N}});
    }
    din[1] = emit(e, CT_OP_matmul, 2, (ValueId[]){transpose(e, lhs), rhs}, NULL, 0, NULL, 0, 0);
}

/* fvcore's aten::matmul family: numel(a) * b[-1] MACs, the output's
 * elements as activations. */
static OpCost matmul_cost(const Graph *g, const Node *n, unsigned flags)
{
    const CtShape *b = in_shape(g, n, 1);
    return (OpCost){shape_numel(in_shape(g, n, 0)) * b->d[b->ndim - 1], shape_numel(out_shape(g, n, 0))};
}

const OpDef op_matmul = {.name = "matmul", .min_in = 2, .max_in = 2, .infer = infer_matmul, .ref = matmul_ref,
                         .vjp = matmul_vjp, .fusion = OP_CONTRACTION, .amp = OP_AMP_LOW, .layout = OP_LAYOUT_NCHW,
                         .cost = matmul_cost};
