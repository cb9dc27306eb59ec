#include "ir/scalar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops.h"

void sx_build(const Node *n, Sx *s)
{
    memset(s, 0, sizeof *s);
    op_def(n->op)->scalar(n, s);
}

static int append(Sx *s, SxIns in)
{
    for (int j = 0; j < s->n; j++) {
        const SxIns *e = &s->ins[j];
        if (e->op == in.op && e->a == in.a && e->b == in.b && e->c == in.c && !memcmp(&e->imm, &in.imm, sizeof in.imm))
            return j; /* constants by their bits: -0 is not 0, NaN is itself */
    }
    CT_ASSERT(s->n < SX_MAX_INS);
    s->ins[s->n] = in;
    return s->n++;
}

int sx_in(Sx *s, int k) { return append(s, (SxIns){.op = SX_IN, .a = k}); }

int sx_const(Sx *s, double v) { return append(s, (SxIns){.op = SX_CONST, .imm = v}); }

int sx_arity(SxOp op)
{
    switch (op) {
    case SX_IN: case SX_CONST: return 0;
    case SX_NEG: case SX_EXP: case SX_SQRT: case SX_ERF: case SX_TANH: return 1;
    case SX_SELECT: return 3;
    default: return 2;
    }
}

int sx_op(Sx *s, SxOp op, int a, int b, int c)
{
    int n = sx_arity(op);
    CT_ASSERT(n > 0 && a >= 0 && a < s->n && (n < 2 || (b >= 0 && b < s->n)) && (n < 3 || (c >= 0 && c < s->n)));
    return append(s, (SxIns){.op = op, .a = a, .b = n > 1 ? b : 0, .c = n > 2 ? c : 0});
}

enum { BLOCK = 256 };

/* Instruction j over elements [0, m) of the block. */
static void eval_block(const Sx *s, int j, int m, double (*r)[BLOCK])
{
    const SxIns *in = &s->ins[j];
    if (in->op == SX_IN || in->op == SX_CONST)
        return; /* gathered, or filled once */
    double *d = r[j];
    const double *a = r[in->a], *b = r[in->b], *c = r[in->c];
    switch (in->op) {
    case SX_ADD: for (int e = 0; e < m; e++) d[e] = a[e] + b[e]; break;
    case SX_SUB: for (int e = 0; e < m; e++) d[e] = a[e] - b[e]; break;
    case SX_MUL: for (int e = 0; e < m; e++) d[e] = a[e] * b[e]; break;
    case SX_DIV: for (int e = 0; e < m; e++) d[e] = a[e] / b[e]; break;
    case SX_POW: for (int e = 0; e < m; e++) d[e] = pow(a[e], b[e]); break;
    case SX_NEG: for (int e = 0; e < m; e++) d[e] = -a[e]; break;
    case SX_EXP: for (int e = 0; e < m; e++) d[e] = exp(a[e]); break;
    case SX_SQRT: for (int e = 0; e < m; e++) d[e] = sqrt(a[e]); break;
    case SX_ERF: for (int e = 0; e < m; e++) d[e] = erf(a[e]); break;
    case SX_TANH: for (int e = 0; e < m; e++) d[e] = tanh(a[e]); break;
    case SX_LT: for (int e = 0; e < m; e++) d[e] = a[e] < b[e]; break;
    case SX_LE: for (int e = 0; e < m; e++) d[e] = a[e] <= b[e]; break;
    case SX_SELECT: for (int e = 0; e < m; e++) d[e] = a[e] != 0 ? b[e] : c[e]; break;
    default: CT_ASSERT(!"unknown scalar op"); break;
    }
}

void sx_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    Sx s;
    sx_build(n, &s);
    const CtShape *os = &g->values[n->out[0]].type.shape;
    int64_t st[CT_MAX_IN][CT_MAX_DIMS], idx[CT_MAX_DIMS] = {0}, count = shape_numel(os);
    for (int k = 0; k < n->nin; k++)
        shape_broadcast_strides(&g->values[n->in[k]].type.shape, os, st[k]);
    for (int o = 1; o < n->nout; o++)
        CT_ASSERT(shape_numel(&g->values[n->out[o]].type.shape) == count);
    double(*r)[BLOCK] = malloc(sizeof *r * (size_t)s.n);
    CT_ASSERT(r != NULL);
    for (int j = 0; j < s.n; j++)
        if (s.ins[j].op == SX_CONST)
            for (int e = 0; e < BLOCK; e++)
                r[j][e] = s.ins[j].imm;
    for (int64_t i0 = 0; i0 < count; i0 += BLOCK) {
        int m = count - i0 < BLOCK ? (int)(count - i0) : BLOCK;
        for (int e = 0; e < m; e++) {
            for (int j = 0; j < s.n; j++)
                if (s.ins[j].op == SX_IN) {
                    int64_t at = 0;
                    for (int d = 0; d < os->ndim; d++)
                        at += idx[d] * st[s.ins[j].a][d];
                    r[j][e] = in[s.ins[j].a][at];
                }
            for (int d = os->ndim - 1; d >= 0 && ++idx[d] == os->d[d]; d--)
                idx[d] = 0;
        }
        for (int j = 0; j < s.n; j++)
            eval_block(&s, j, m, r);
        for (int o = 0; o < n->nout; o++)
            memcpy(out[o] + i0, r[s.out[o]], sizeof(double) * (size_t)m);
    }
    free(r);
}
