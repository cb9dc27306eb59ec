/* Contract: amp(g, dtype) returns g with torch.autocast's policy applied:
 * matrix ops compute in dtype (f16 or bf16), norms, softmax, losses and
 * reductions in f32, everything else in its inputs' dtype (the wider one
 * when they differ); f32 params stay the master copy, cast once per use
 * site per step, and graph outputs keep their dtypes. */
#include <stdlib.h>

#include "ir/rewrite.h"
#include "passes/passes.h"

typedef enum Policy { FOLLOW, LOW, F32 } Policy;

/* torch.autocast's lists, for the ops ctimm has. */
static Policy policy(CtOp op)
{
    switch (op) {
    case CT_OP_conv2d: case CT_OP_linear: case CT_OP_matmul: case CT_OP_sdpa:
        return LOW;
    case CT_OP_batch_norm: case CT_OP_layer_norm: case CT_OP_softmax: case CT_OP_reduce_sum: case CT_OP_cross_entropy:
    case CT_OP_soft_target_cross_entropy: case CT_OP_binary_cross_entropy: case CT_OP_adaptive_avg_pool2d:
    case CT_OP_rsqrt:
        return F32;
    default:
        return FOLLOW;
    }
}

typedef struct Amp {
    Rewriter r;
    CtDType low;
    ValueId *cast[2]; /* per src value: its dst cast to low (0) or to f32 (1), made once */
} Amp;

static ValueId as(Amp *a, ValueId v, CtDType dt)
{
    ValueId w = rewrite_value(&a->r, v);
    CtDType have = a->r.dst->values[w].type.dtype;
    if (have == dt || !ct_dtype_is_float(have))
        return w;
    ValueId *slot = &a->cast[dt == CT_F32][v];
    if (*slot < 0) {
        int64_t to = dt;
        *slot = emit(&a->r.e, CT_OP_cast, 1, &w, &to, 1, NULL, 0, 0);
    }
    return *slot;
}

int amp_cast(const Graph *g, CtDType low, Graph *out, CtErr *err)
{
    Amp a = {.low = low};
    for (int k = 0; k < 2; k++) {
        a.cast[k] = malloc(sizeof *a.cast[k] * (size_t)(g->nvalues ? g->nvalues : 1));
        CT_ASSERT(a.cast[k] != NULL);
        for (ValueId v = 0; v < g->nvalues; v++)
            a.cast[k][v] = -1;
    }
    rewrite_begin(&a.r, g, out);
    for (int i = 0; i < g->nnodes && !a.r.e.failed; i++) {
        const Node *n = &g->nodes[i];
        Policy p = policy(n->op);
        CtDType want = CT_F32;
        if (p == LOW) {
            want = low;
        } else if (p == FOLLOW) {
            /* the widest float input; an op of low inputs alone stays low */
            int all_low = 0, any_float = 0;
            for (int k = 0; k < n->nin; k++) {
                CtDType d = a.r.dst->values[rewrite_value(&a.r, n->in[k])].type.dtype;
                if (ct_dtype_is_float(d) && !(n->op == CT_OP_assign && k == 0)) {
                    all_low = any_float ? all_low && d == low : d == low;
                    any_float = 1;
                }
            }
            want = any_float && all_low ? low : CT_F32;
        }
        ValueId in[CT_MAX_IN];
        a.r.e.scope = n->scope;
        for (int k = 0; k < n->nin; k++) {
            /* assign writes state in its own dtype; BN's running stats stay f32 */
            int keep = n->op == CT_OP_assign || (n->op == CT_OP_batch_norm && k >= 3);
            in[k] = keep ? rewrite_value(&a.r, n->in[k]) : as(&a, n->in[k], want);
        }
        if (n->op == CT_OP_assign)
            in[1] = as(&a, n->in[1], a.r.dst->values[in[0]].type.dtype);
        if (emit(&a.r.e, n->op, n->nin, in, n->iattr, CT_MAX_IATTR, n->fattr, CT_MAX_FATTR, 0) < 0 && n->nout)
            break;
        const Node *copy = &a.r.dst->nodes[a.r.dst->nnodes - 1];
        for (int k = 0; k < n->nout; k++) {
            a.r.dst->values[copy->out[k]].role = g->values[n->out[k]].role;
            a.r.dst->values[copy->out[k]].layout = g->values[n->out[k]].layout;
            rewrite_map(&a.r, n->out[k], copy->out[k]);
        }
    }
    for (int k = 0; k < g->noutputs && !a.r.e.failed; k++) {
        ValueId v = g->outputs[k];
        rewrite_map(&a.r, v, as(&a, v, g->values[v].type.dtype));
    }
    free(a.cast[0]);
    free(a.cast[1]);
    return rewrite_end(&a.r, err);
}
