#include "ir/emit.h"

#include <stdarg.h>
#include <stdio.h>

int emit_fail(Emitter *e, const char *fmt, ...)
{
    if (e->failed)
        return -1;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e->failed = 1;
    ct_fail(&e->err, "building '%s': %s", e->scope ? e->scope : "", msg);
    return -1;
}

ValueId emit(Emitter *e, CtOp op, int nin, const ValueId *in, const int64_t *iattr, int niattr, const double *fattr,
             int nfattr, int which)
{
    if (e->failed)
        return -1;
    Node n = {.op = op, .nin = nin};
    CT_ASSERT(nin <= CT_MAX_IN && niattr <= CT_MAX_IATTR && nfattr <= CT_MAX_FATTR);
    for (int i = 0; i < nin; i++) {
        if (in[i] < 0 || in[i] >= e->g->nvalues)
            return emit_fail(e, "%s given an invalid input", op_def(op)->name);
        n.in[i] = in[i];
    }
    for (int i = 0; i < niattr; i++)
        n.iattr[i] = iattr[i];
    for (int i = 0; i < nfattr; i++)
        n.fattr[i] = fattr[i];
    CtErr err;
    int idx = graph_add_node(e->g, &n, e->scope, &err);
    if (idx < 0)
        return emit_fail(e, "%s", err.msg);
    return which < e->g->nodes[idx].nout ? e->g->nodes[idx].out[which] : -1;
}

const Node *emit_last(const Emitter *e)
{
    return e->failed || !e->g->nnodes ? NULL : &e->g->nodes[e->g->nnodes - 1];
}

CtShape emit_shape(const Emitter *e, ValueId v)
{
    return v >= 0 && v < e->g->nvalues ? e->g->values[v].type.shape : (CtShape){0};
}

ValueId emit_reshape(Emitter *e, ValueId x, CtShape to)
{
    CtShape s = emit_shape(e, x);
    if (shape_equal(&s, &to))
        return x;
    int64_t a[1 + CT_MAX_DIMS] = {to.ndim};
    for (int i = 0; i < to.ndim; i++)
        a[1 + i] = to.d[i];
    return emit(e, CT_OP_reshape, 1, &x, a, 1 + to.ndim, NULL, 0, 0);
}

ValueId emit_permute(Emitter *e, ValueId x, int ndim, const int64_t *perm)
{
    int64_t a[1 + CT_MAX_DIMS] = {ndim};
    for (int i = 0; i < ndim; i++)
        a[1 + i] = perm[i];
    return emit(e, CT_OP_permute, 1, &x, a, 1 + ndim, NULL, 0, 0);
}

/* The dims of s that summing to shape `to` reduces (broadcast's inverse). */
static int64_t sum_mask(const CtShape *s, const CtShape *to)
{
    int64_t mask = 0;
    for (int i = 0; i < s->ndim; i++) {
        int j = i - (s->ndim - to->ndim);
        if (j < 0 || (to->d[j] == 1 && s->d[i] != 1))
            mask |= (int64_t)1 << i;
    }
    return mask;
}

ValueId emit_sum_to(Emitter *e, ValueId x, CtShape to)
{
    CtShape s = emit_shape(e, x);
    if (e->failed || shape_equal(&s, &to))
        return x;
    int64_t a[2] = {sum_mask(&s, &to), 1};
    ValueId r = a[0] ? emit(e, CT_OP_reduce_sum, 1, &x, a, 2, NULL, 0, 0) : x;
    return emit_reshape(e, r, to);
}

/* What a widening cast's output f was cast from (amp's f16 or bf16
 * activation cast to f32 for a product with an f32 operand); else f. The
 * value read as stored gives the same numbers, and the forward need not
 * keep the f32 copy for the backward. */
static ValueId widened_from(const Emitter *e, ValueId f)
{
    if (e->failed || f < 0 || e->g->values[f].producer < 0)
        return f;
    const Node *c = &e->g->nodes[e->g->values[f].producer];
    if (c->op != CT_OP_cast)
        return f;
    CtDType from = e->g->values[c->in[0]].type.dtype;
    return e->g->values[f].type.dtype == CT_F32 && (from == CT_F16 || from == CT_BF16) ? c->in[0] : f;
}

ValueId emit_sum_product_to(Emitter *e, ValueId x, ValueId f, CtShape to)
{
    CtShape s = emit_shape(e, x), sf = emit_shape(e, f);
    int64_t a[2] = {sum_mask(&s, &to), 1};
    if (e->failed || !shape_equal(&s, &sf) || !a[0])
        return emit_sum_to(e, emit(e, CT_OP_mul, 2, (ValueId[]){x, f}, NULL, 0, NULL, 0, 0), to);
    return emit_reshape(e, emit(e, CT_OP_reduce_sum, 2, (ValueId[]){x, widened_from(e, f)}, a, 2, NULL, 0, 0), to);
}
