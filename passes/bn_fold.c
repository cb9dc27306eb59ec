/* Contract: bn_fold(g) returns an equivalent eval graph in which every
 * conv2d whose only reader is an eval-mode batch_norm is one conv2d with
 * folded weight and bias, and that batch_norm is gone. */
#include "passes/passes.h"

#include <stdlib.h>

#include "ir/rewrite.h"

/* The batch_norm (eval) that is the only reader of conv node i's output. */
static int sole_bn_reader(const Graph *g, int i, const char *is_output)
{
    ValueId y = g->nodes[i].out[0];
    int reader = -1, readers = 0;
    if (is_output[y])
        return -1;
    for (int j = i + 1; j < g->nnodes; j++)
        for (int k = 0; k < g->nodes[j].nin; k++)
            if (g->nodes[j].in[k] == y) {
                readers++;
                reader = j;
            }
    if (readers != 1 || g->nodes[reader].op != CT_OP_batch_norm || g->nodes[reader].iattr[0] ||
        g->nodes[reader].in[0] != y)
        return -1;
    return reader;
}

/* With s = gamma / sqrt(running_var + eps):
 *   weight' = weight * s (per output channel), bias' = beta + (bias - mean) * s.
 * Both are computed from the parameters in the graph, ahead of the conv. */
static void fold(Rewriter *r, const Node *conv, const Node *bn)
{
    Emitter *e = &r->e;
    ValueId w = rewrite_value(r, conv->in[1]), gamma = rewrite_value(r, bn->in[1]), beta = rewrite_value(r, bn->in[2]);
    ValueId mean = rewrite_value(r, bn->in[3]), var = rewrite_value(r, bn->in[4]);
    int64_t out = emit_shape(e, w).d[0];
    e->scope = bn->scope;
    ValueId s = emit(e, CT_OP_scale_shift, 1, &var, NULL, 0, (double[]){1, bn->fattr[1]}, 2, 0);
    s = emit(e, CT_OP_rsqrt, 1, &s, NULL, 0, NULL, 0, 0);
    s = emit(e, CT_OP_mul, 2, (ValueId[]){s, gamma}, NULL, 0, NULL, 0, 0);
    ValueId ws = emit(e, CT_OP_mul, 2, (ValueId[]){w, emit_reshape(e, s, (CtShape){4, {out, 1, 1, 1}})}, NULL, 0, NULL, 0, 0);
    ValueId shift = emit(e, CT_OP_scale_shift, 1, &mean, NULL, 0, (double[]){-1, 0}, 2, 0);
    if (conv->nin == 3)
        shift = emit(e, CT_OP_add, 2, (ValueId[]){rewrite_value(r, conv->in[2]), shift}, NULL, 0, NULL, 0, 0);
    ValueId bias = emit(e, CT_OP_add, 2, (ValueId[]){beta, emit(e, CT_OP_mul, 2, (ValueId[]){shift, s}, NULL, 0, NULL, 0, 0)},
                        NULL, 0, NULL, 0, 0);
    e->scope = conv->scope;
    ValueId y = emit(e, CT_OP_conv2d, 3, (ValueId[]){rewrite_value(r, conv->in[0]), ws, bias}, conv->iattr, 7, NULL, 0, 0);
    rewrite_map(r, bn->out[0], y);
}

int bn_fold(const Graph *g, Graph *out, CtErr *err)
{
    Rewriter r;
    char *is_output = calloc((size_t)(g->nvalues ? g->nvalues : 1), 1), *skip = calloc((size_t)(g->nnodes + 1), 1);
    CT_ASSERT(is_output && skip);
    for (int k = 0; k < g->noutputs; k++)
        is_output[g->outputs[k]] = 1;
    rewrite_begin(&r, g, out);
    for (int i = 0; i < g->nnodes; i++) {
        if (skip[i])
            continue;
        int bn = g->nodes[i].op == CT_OP_conv2d ? sole_bn_reader(g, i, is_output) : -1;
        if (bn < 0) {
            rewrite_copy(&r, i);
            continue;
        }
        fold(&r, &g->nodes[i], &g->nodes[bn]);
        skip[bn] = 1;
    }
    free(is_output);
    free(skip);
    return rewrite_end(&r, err);
}
