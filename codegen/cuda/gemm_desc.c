/* Contract: gemm_desc(step) gives the column-major GEMM and the largest
 * prefix of the step's epilogue that cuBLASLt computes, storing every value
 * of that prefix the plan materialises (passes/fuse.h). */
#include "codegen/cuda/gemm_desc.h"

#include <stdio.h>
#include <string.h>

#include "ir/ops.h"

static const CtShape *shape_of(const Graph *g, ValueId v) { return &g->values[v].type.shape; }

/* A value whose memory order is not its row-major order. */
static int nhwc_order(const Value *v)
{
    const CtShape *s = &v->type.shape;
    return v->layout == CT_LAYOUT_CHANNELS_LAST && s->ndim == 4 && s->d[1] > 1 && s->d[2] * s->d[3] > 1;
}

/* Adds node n (the step's next part, reading cur) to the epilogue, or
 * returns 0 when the library cannot take it. */
static int take_part(const Graph *g, const FusePlan *p, const Node *n, ValueId cur, int64_t channels, int gelu,
                     EpiDesc *e)
{
    int stored = p->materialised[cur];
    if (e->act != GEMM_ACT_NONE)
        return 0;
    if (n->op == CT_OP_relu && n->in[0] == cur && !stored) {
        e->act = GEMM_ACT_RELU;
        return 1;
    }
    if (gelu && n->op == CT_OP_gelu && n->in[0] == cur && n->iattr[0]) {
        e->act = GEMM_ACT_GELU_TANH;
        e->aux = stored ? cur : -1;
        return 1;
    }
    if (n->op != CT_OP_add || stored || (n->in[0] == cur) == (n->in[1] == cur))
        return 0;
    ValueId other = n->in[0] == cur ? n->in[1] : n->in[0];
    const Value *ov = &g->values[other];
    if (shape_equal(&ov->type.shape, shape_of(g, cur))) {
        if (e->residual >= 0 || ov->type.dtype != g->values[cur].type.dtype)
            return 0;
        e->residual = other;
        return 1;
    }
    if (e->bias >= 0 || e->residual >= 0 || shape_numel(&ov->type.shape) != channels)
        return 0;
    e->bias = other;
    return 1;
}

void epi_desc(const Graph *g, const FusePlan *p, const FuseStep *st, int64_t channels, int gelu, EpiDesc *e)
{
    const Node *first = &g->nodes[p->nodes[st->first]];
    ValueId cur = first->out[0];
    e->residual = e->aux = e->bgrad = -1;
    e->act = GEMM_ACT_NONE;
    int i = 1;
    for (; i < st->n; i++) {
        const Node *n = &g->nodes[p->nodes[st->first + i]];
        if (!take_part(g, p, n, cur, channels, gelu, e))
            break;
        cur = n->out[0];
    }
    e->d = cur;
    e->tail = i;
}

int gemm_desc(const Graph *g, const FusePlan *p, const FuseStep *st, GemmDesc *d, CtErr *err)
{
    memset(d, 0, sizeof *d);
    const Node *n = &g->nodes[p->nodes[st->first]];
    if (st->kind != FUSE_LIBRARY || (n->op != CT_OP_linear && n->op != CT_OP_matmul))
        return ct_fail(err, "step of %s is not a GEMM", op_def(n->op)->name);
    CtDType ab = g->values[n->in[0]].type.dtype;
    if (ab != g->values[n->in[1]].type.dtype)
        return ct_fail(err, "%s: operands of two dtypes (%s, %s)", op_def(n->op)->name, ct_dtype_name(ab),
                       ct_dtype_name(g->values[n->in[1]].type.dtype));
    const CtShape *a = shape_of(g, n->in[0]), *b = shape_of(g, n->in[1]);
    if (n->op == CT_OP_linear) {
        int64_t K = b->d[1], N = b->d[0];
        *d = (GemmDesc){.m = N, .n = shape_numel(a) / K, .k = K, .trans_a = 1, .lda = K, .ldb = K, .ldc = N,
                        .batch = 1, .ab_type = ab, .a = n->in[1], .b = n->in[0]};
        d->epi.bias = n->nin == 3 ? n->in[2] : -1;
    } else {
        /* row-major c = op(a) op(b) as column-major c^T = op(b)^T op(a)^T:
         * the library's A is b, its B is a, each transposed by its own flag */
        int ta = (int)n->iattr[0], tb = (int)n->iattr[1];
        int64_t M, K, N;
        op_matmul_dims(g, n, &M, &K, &N);
        int64_t batch = shape_numel(a) / (M * K);
        int shared = b->ndim == 2, rows = shared && !ta; /* all of a's rows as one matrix */
        *d = (GemmDesc){.m = N, .n = rows ? batch * M : M, .k = K, .trans_a = tb, .trans_b = ta, .lda = tb ? K : N,
                        .ldb = ta ? M : K, .ldc = N, .batch = rows ? 1 : batch, .stride_a = shared ? 0 : K * N,
                        .stride_b = rows ? 0 : M * K, .stride_c = rows ? 0 : M * N, .ab_type = ab, .a = n->in[1],
                        .b = n->in[0]};
        d->epi.bias = -1;
    }
    epi_desc(g, p, st, d->m, 1, &d->epi);
    ValueId used[5] = {d->a, d->b, d->epi.d, d->epi.residual, d->epi.aux};
    for (int i = 0; i < 5; i++)
        if (used[i] >= 0 && nhwc_order(&g->values[used[i]]))
            return ct_fail(err, "%s: an operand stored channels_last (NHWC) is not a row-major matrix",
                           op_def(n->op)->name);
    d->d_type = g->values[d->epi.d].type.dtype;
    d->bias_type = d->epi.bias >= 0 ? g->values[d->epi.bias].type.dtype : d->d_type;
    return 0;
}

void gemm_desc_key(const GemmDesc *d, char *buf, size_t n)
{
    static const char *const act[] = {"none", "relu", "gelu_tanh"};
    snprintf(buf, n,
             "gemm %lldx%lldx%lld trans %d%d ld %lld,%lld,%lld batch %lld strides %lld,%lld,%lld ab %s d %s bias %s "
             "epi bias %d residual %d aux %d bgrad %d act %s",
             (long long)d->m, (long long)d->n, (long long)d->k, d->trans_a, d->trans_b, (long long)d->lda,
             (long long)d->ldb, (long long)d->ldc, (long long)d->batch, (long long)d->stride_a,
             (long long)d->stride_b, (long long)d->stride_c, ct_dtype_name(d->ab_type), ct_dtype_name(d->d_type),
             ct_dtype_name(d->bias_type), d->epi.bias >= 0, d->epi.residual >= 0, d->epi.aux >= 0, d->epi.bgrad >= 0,
             act[d->epi.act]);
}

ValueId gemm_bias_grad(const Graph *g, const FusePlan *p, const FuseStep *st, const FuseStep *next,
                       const GemmDesc *d)
{
    const Node *mm = &g->nodes[p->nodes[st->first]], *r = &g->nodes[p->nodes[next->first]];
    if (mm->op != CT_OP_matmul || st->n != 1 || d->batch != 1 || next->kind != FUSE_LIBRARY || next->n != 1 ||
        r->op != CT_OP_reduce_sum || r->nin != 1 || r->in[0] != d->b)
        return -1;
    /* B is the node's a: [k, n] read transposed, else [..., k] with its
     * other dims folded into n; k is a's first dim or its last */
    const CtShape *b = shape_of(g, d->b);
    int64_t k_dim = d->trans_b ? 0 : b->ndim - 1;
    if ((d->trans_b && b->ndim != 2) || r->iattr[0] != (int64_t)1 << k_dim)
        return -1;
    const Value *out = &g->values[r->out[0]];
    return out->type.dtype == d->d_type && shape_numel(&out->type.shape) == d->n ? r->out[0] : -1;
}
