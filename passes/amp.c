/* Contract: amp(g, dtype) returns g with torch.autocast's policy applied,
 * each op's as its OpDef states it (ir/ops.h): matrix ops compute in dtype
 * (f16 or bf16), norms (but batch norm, in its input's dtype with f32
 * weights and statistics), softmax, losses and reductions in f32 (layer
 * norm reading its input as it is, and storing its output low where every
 * reader would cast it there),
 * everything else in its inputs' dtype (the wider one when they differ); f32 params
 * stay the master copy, cast once per use site per step, and graph outputs
 * keep their dtypes. */
#include <stdlib.h>
#include <string.h>

#include "ir/rewrite.h"
#include "passes/passes.h"

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

/* Whether every reader of v would cast it to the low dtype: ops computing
 * in it, or views (reshape, permute) whose outputs every reader would cast
 * so. Not a graph output. */
static int read_low(const Graph *g, ValueId v, int depth)
{
    for (int k = 0; k < g->noutputs; k++)
        if (g->outputs[k] == v)
            return 0;
    int readers = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *c = &g->nodes[i];
        const OpDef *d = op_def(c->op);
        for (int k = 0; k < c->nin; k++) {
            if (c->in[k] != v)
                continue;
            readers++;
            int view = c->op == CT_OP_reshape || c->op == CT_OP_permute;
            if (!(d->amp == OP_AMP_LOW && !((op_amp_keep(g, c) >> k) & 1)) &&
                !(view && depth < 8 && read_low(g, c->out[0], depth + 1)))
                return 0;
        }
    }
    return readers > 0;
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
        const OpDef *d = op_def(n->op);
        unsigned keep = op_amp_keep(g, n);
        CtDType want = CT_F32;
        if (d->amp == OP_AMP_LOW) {
            want = low;
        } else if (d->amp == OP_AMP_DEST) {
            want = a.r.dst->values[rewrite_value(&a.r, n->in[0])].type.dtype;
        } else if (d->amp == OP_AMP_FOLLOW) {
            /* the widest float input amp casts; an op of low inputs alone stays low */
            int all_low = 0, any_float = 0;
            for (int k = 0; k < n->nin; k++) {
                if ((keep >> k) & 1)
                    continue;
                CtDType t = a.r.dst->values[rewrite_value(&a.r, n->in[k])].type.dtype;
                if (ct_dtype_is_float(t)) {
                    all_low = any_float ? all_low && t == low : t == low;
                    any_float = 1;
                }
            }
            want = any_float && all_low ? low : CT_F32;
        }
        /* f32 math that stores its output low, so that neither cast around it is written */
        int io = d->amp == OP_AMP_F32_IO && read_low(g, n->out[0], 0);
        ValueId in[CT_MAX_IN];
        int64_t iattr[CT_MAX_IATTR];
        memcpy(iattr, n->iattr, sizeof iattr);
        if (io)
            iattr[0] = low;
        a.r.e.scope = n->scope;
        /* the parameters' casts first, so that an activation's cast comes last, next to the node (and to
         * the layout change the layout pass puts before it: the input batch's is one converting copy) */
        for (int pass = 0; pass < 2; pass++)
            for (int k = 0; k < n->nin; k++) {
                if (role_is_state(g->values[n->in[k]].role) == !pass)
                    in[k] = ((keep >> k) & 1) || (d->amp == OP_AMP_F32_IO && k == 0) ? rewrite_value(&a.r, n->in[k])
                                                                                       : as(&a, n->in[k], want);
            }
        if (emit(&a.r.e, n->op, n->nin, in, iattr, CT_MAX_IATTR, n->fattr, CT_MAX_FATTR, 0) < 0 && n->nout)
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
