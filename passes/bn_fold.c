/* Contract: bn_fold(g) returns an equivalent eval graph in which an
 * eval-mode batch_norm is folded away wherever that is exact: into the conv2d
 * or linear whose output only it reads (conv -> BN, linear -> BN1d), or into
 * the unpadded, ungrouped conv2d that alone reads its output (BN -> conv). */
#include "passes/passes.h"

#include <stdlib.h>

#include "ir/rewrite.h"

/* The node that alone reads node i's output (as its input 0), or -1. */
static int sole_reader(const Graph *g, int i, const char *is_output)
{
    ValueId y = g->nodes[i].out[0];
    int reader = -1, readers = 0;
    if (g->nodes[i].nout < 1 || is_output[y])
        return -1;
    for (int j = i + 1; j < g->nnodes; j++)
        for (int k = 0; k < g->nodes[j].nin; k++)
            if (g->nodes[j].in[k] == y) {
                readers++;
                reader = j;
            }
    return readers == 1 && g->nodes[reader].in[0] == y ? reader : -1;
}

static int is_eval_bn(const Node *n) { return n->op == CT_OP_batch_norm && !n->iattr[0]; }

/* BN -> conv folds exactly only when no zero padding enters the conv (the
 * padding would have to be -t/s after the fold) and channels are not grouped. */
static int conv_takes_bn(const Node *conv)
{
    const int64_t *a = conv->iattr;
    return conv->op == CT_OP_conv2d && a[2] == 0 && a[3] == 0 && a[6] == 1;
}

/* s = gamma / sqrt(running_var + eps) and t = beta - mean * s, per channel. */
static void bn_affine(Rewriter *r, const Node *bn, ValueId *s, ValueId *t)
{
    Emitter *e = &r->e;
    ValueId gamma = rewrite_value(r, bn->in[1]), beta = rewrite_value(r, bn->in[2]);
    ValueId mean = rewrite_value(r, bn->in[3]), var = rewrite_value(r, bn->in[4]);
    e->scope = bn->scope;
    *s = emit(e, CT_OP_scale_shift, 1, &var, NULL, 0, (double[]){1, bn->fattr[1]}, 2, 0);
    *s = emit(e, CT_OP_rsqrt, 1, s, NULL, 0, NULL, 0, 0);
    *s = emit(e, CT_OP_mul, 2, (ValueId[]){*s, gamma}, NULL, 0, NULL, 0, 0);
    ValueId ms = emit(e, CT_OP_mul, 2, (ValueId[]){mean, *s}, NULL, 0, NULL, 0, 0);
    *t = emit(e, CT_OP_add, 2, (ValueId[]){beta, emit(e, CT_OP_scale_shift, 1, &ms, NULL, 0, (double[]){-1, 0}, 2, 0)},
              NULL, 0, NULL, 0, 0);
}

/* linear -> BN1d: weight' = weight * s (per output row), bias' = bias * s + t. */
static void fold_linear(Rewriter *r, const Node *fc, const Node *bn)
{
    Emitter *e = &r->e;
    ValueId s, t, w = rewrite_value(r, fc->in[1]);
    bn_affine(r, bn, &s, &t);
    int64_t out = emit_shape(e, w).d[0];
    ValueId ws = emit(e, CT_OP_mul, 2, (ValueId[]){w, emit_reshape(e, s, (CtShape){2, {out, 1}})}, NULL, 0, NULL, 0, 0);
    ValueId bias = t;
    if (fc->nin == 3)
        bias = emit(e, CT_OP_add, 2,
                    (ValueId[]){emit(e, CT_OP_mul, 2, (ValueId[]){rewrite_value(r, fc->in[2]), s}, NULL, 0, NULL, 0, 0), t},
                    NULL, 0, NULL, 0, 0);
    e->scope = fc->scope;
    rewrite_map(r, bn->out[0],
                emit(e, CT_OP_linear, 3, (ValueId[]){rewrite_value(r, fc->in[0]), ws, bias}, NULL, 0, NULL, 0, 0));
}

/* BN -> conv: conv(x * s + t) = conv'(x) with weight'[o,c] = weight[o,c] * s[c]
 * and bias' = bias + sum over c, kh, kw of weight[o,c,kh,kw] * t[c]. */
static void fold_into_conv(Rewriter *r, const Node *bn, const Node *conv)
{
    Emitter *e = &r->e;
    ValueId s, t, w = rewrite_value(r, conv->in[1]);
    bn_affine(r, bn, &s, &t);
    int64_t c = emit_shape(e, w).d[1];
    CtShape per_in = {4, {1, c, 1, 1}};
    ValueId ws = emit(e, CT_OP_mul, 2, (ValueId[]){w, emit_reshape(e, s, per_in)}, NULL, 0, NULL, 0, 0);
    ValueId wt = emit(e, CT_OP_mul, 2, (ValueId[]){w, emit_reshape(e, t, per_in)}, NULL, 0, NULL, 0, 0);
    ValueId bias = emit(e, CT_OP_reduce_sum, 1, &wt, (int64_t[]){0xe, 0}, 2, NULL, 0, 0);
    if (conv->nin == 3)
        bias = emit(e, CT_OP_add, 2, (ValueId[]){rewrite_value(r, conv->in[2]), bias}, NULL, 0, NULL, 0, 0);
    e->scope = conv->scope;
    rewrite_map(r, conv->out[0], emit(e, CT_OP_conv2d, 3, (ValueId[]){rewrite_value(r, bn->in[0]), ws, bias},
                                      conv->iattr, 7, NULL, 0, 0));
}

/* conv -> BN: weight' = weight * s (per output channel), bias' = bias * s + t. */
static void fold(Rewriter *r, const Node *conv, const Node *bn)
{
    Emitter *e = &r->e;
    ValueId s, t, w = rewrite_value(r, conv->in[1]);
    bn_affine(r, bn, &s, &t);
    int64_t out = emit_shape(e, w).d[0];
    ValueId ws = emit(e, CT_OP_mul, 2, (ValueId[]){w, emit_reshape(e, s, (CtShape){4, {out, 1, 1, 1}})}, NULL, 0, NULL, 0, 0);
    ValueId bias = t;
    if (conv->nin == 3)
        bias = emit(e, CT_OP_add, 2,
                    (ValueId[]){emit(e, CT_OP_mul, 2, (ValueId[]){rewrite_value(r, conv->in[2]), s}, NULL, 0, NULL, 0, 0), t},
                    NULL, 0, NULL, 0, 0);
    e->scope = conv->scope;
    rewrite_map(r, bn->out[0], emit(e, CT_OP_conv2d, 3, (ValueId[]){rewrite_value(r, conv->in[0]), ws, bias},
                                    conv->iattr, 7, NULL, 0, 0));
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
        const Node *n = &g->nodes[i];
        int j = sole_reader(g, i, is_output);
        const Node *next = j >= 0 ? &g->nodes[j] : NULL;
        if (next && is_eval_bn(next) && n->op == CT_OP_conv2d) {
            fold(&r, n, next);
        } else if (next && is_eval_bn(next) && n->op == CT_OP_linear && g->values[n->out[0]].type.shape.ndim == 2) {
            fold_linear(&r, n, next);
        } else if (next && is_eval_bn(n) && conv_takes_bn(next)) {
            fold_into_conv(&r, n, next);
        } else {
            rewrite_copy(&r, i);
            continue;
        }
        skip[j] = 1;
    }
    free(is_output);
    free(skip);
    return rewrite_end(&r, err);
}
