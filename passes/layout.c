/* Contract: layout(g) returns an equivalent graph whose conv-net
 * activations are channels_last (NHWC), with to_layout nodes only where a
 * value must change layout: the edges of the conv part of the net. What
 * each op does with NHWC values is its OpDef's layout rule (ir/ops.h). */
#include <stdlib.h>

#include "ir/rewrite.h"
#include "passes/passes.h"

/* A 4-D value whose two layouts are the same bytes (H = W = 1, or C = 1). */
static int either_layout(const Value *v)
{
    const CtShape *s = &v->type.shape;
    return s->ndim == 4 && (s->d[2] * s->d[3] == 1 || s->d[1] == 1);
}

/* The dst value for src value v in `want` layout, converting once per value. */
static ValueId in_layout(Rewriter *r, ValueId v, CtLayout want, ValueId *converted)
{
    ValueId w = rewrite_value(r, v);
    Value *val = &r->dst->values[w];
    if (val->type.shape.ndim != 4 || val->layout == want || either_layout(val))
        return w;
    if (converted[v] >= 0)
        return converted[v];
    int64_t to = want;
    ValueId c = emit(&r->e, CT_OP_to_layout, 1, &w, &to, 1, NULL, 0, 0);
    if (c >= 0)
        r->dst->values[c].layout = want;
    return converted[v] = c;
}

/* permute [0,2,3,1] of an NHWC value is its memory read as contiguous
 * [N,H,W,C], and permute [0,3,1,2] of contiguous [N,H,W,C] is an NHWC
 * [N,C,H,W]: the same bytes, so these permutes (ConvNeXt's, around its
 * channels-last LayerNorm and MLP) need no transpose; a backend runs them as
 * views. Returns the output layout, or -1 for other permutes. */
static int free_permute(const Node *n, const Value *in)
{
    const int64_t *p = &n->iattr[1];
    if (n->op != CT_OP_permute || n->iattr[0] != 4)
        return -1;
    if (in->layout == CT_LAYOUT_CHANNELS_LAST && p[0] == 0 && p[1] == 2 && p[2] == 3 && p[3] == 1)
        return CT_LAYOUT_CONTIG;
    if (in->layout == CT_LAYOUT_CONTIG && p[0] == 0 && p[1] == 3 && p[2] == 1 && p[3] == 2)
        return CT_LAYOUT_CHANNELS_LAST;
    return -1;
}

int layout_channels_last(const Graph *g, Graph *out, CtErr *err)
{
    Rewriter r;
    ValueId *converted = malloc(sizeof *converted * (size_t)(g->nvalues ? g->nvalues : 1));
    CT_ASSERT(converted != NULL);
    for (ValueId v = 0; v < g->nvalues; v++)
        converted[v] = -1;
    rewrite_begin(&r, g, out);
    for (int i = 0; i < g->nnodes && !r.e.failed; i++) {
        const Node *n = &g->nodes[i];
        const OpDef *d = op_def(n->op);
        int nhwc = d->layout == OP_LAYOUT_NHWC, flexible = nhwc || d->layout == OP_LAYOUT_EITHER;
        int four_d = 0, ambiguous = 0;
        for (int k = 0; k < n->nin && flexible; k++) {
            const Value *v = &r.dst->values[rewrite_value(&r, n->in[k])];
            nhwc |= v->layout == CT_LAYOUT_CHANNELS_LAST && !either_layout(v);
            four_d += v->type.shape.ndim == 4;
            ambiguous += either_layout(v);
        }
        /* inputs whose layouts are the same bytes leave the choice to us: NHWC */
        nhwc |= four_d && four_d == ambiguous;
        CtLayout want = flexible && nhwc ? CT_LAYOUT_CHANNELS_LAST : CT_LAYOUT_CONTIG;
        int view = n->op == CT_OP_permute ? free_permute(n, &r.dst->values[rewrite_value(&r, n->in[0])]) : -1;
        if (view >= 0) {
            r.e.scope = n->scope;
            ValueId y = emit(&r.e, CT_OP_permute, 1, (ValueId[]){rewrite_value(&r, n->in[0])}, n->iattr, CT_MAX_IATTR,
                             NULL, 0, 0);
            if (y >= 0)
                r.dst->values[y].layout = (CtLayout)view;
            rewrite_map(&r, n->out[0], y);
            continue;
        }
        ValueId in[CT_MAX_IN];
        for (int k = 0; k < n->nin; k++)
            in[k] = (d->layout_keep >> k) & 1 ? rewrite_value(&r, n->in[k]) : in_layout(&r, n->in[k], want, converted);
        r.e.scope = n->scope;
        if (emit(&r.e, n->op, n->nin, in, n->iattr, CT_MAX_IATTR, n->fattr, CT_MAX_FATTR, 0) < 0 && n->nout)
            break;
        const Node *copy = &r.dst->nodes[r.dst->nnodes - 1];
        for (int k = 0; k < n->nout; k++) {
            Value *o = &r.dst->values[copy->out[k]];
            o->role = g->values[n->out[k]].role;
            o->layout = want == CT_LAYOUT_CHANNELS_LAST && o->type.shape.ndim == 4 && !((d->layout_contig_out >> k) & 1)
                            ? CT_LAYOUT_CHANNELS_LAST : CT_LAYOUT_CONTIG;
            rewrite_map(&r, n->out[k], copy->out[k]);
        }
    }
    /* graph outputs leave in their original layout */
    for (int k = 0; k < g->noutputs && !r.e.failed; k++) {
        ValueId v = g->outputs[k];
        rewrite_map(&r, v, in_layout(&r, v, g->values[v].layout, converted));
    }
    free(converted);
    return rewrite_end(&r, err);
}
