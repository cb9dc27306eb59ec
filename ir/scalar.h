/*
 * Scalar expressions (Sx): what an elementwise op computes for one element,
 * as straight-line SSA over a few primitive operations, tinygrad's way. Each
 * elementwise op's OpDef.scalar builds the expression of a node (formulas
 * that backends also compile as C come from ir/formulas.h); the ref backend
 * evaluates it in double (sx_ref, the op's ref kernel) and codegen/kir.c
 * lowers it, instruction for instruction, into the fused kernels. So one
 * text gives every backend's numbers, and a fused kernel computing in
 * double gives the ref kernel's results bit for bit.
 *
 * Input k of the node is read at the output's element, broadcast (numpy's
 * rules, right-aligned) to output 0's shape, which every output has.
 */
#ifndef CTIMM_SCALAR_H
#define CTIMM_SCALAR_H

#include "ir/ir.h"

typedef enum SxOp {
    SX_IN,    /* input a of the node */
    SX_CONST, /* imm */
    SX_ADD, SX_SUB, SX_MUL, SX_DIV, SX_POW,
    SX_NEG, SX_EXP, SX_SQRT, SX_ERF, SX_TANH,
    SX_LT, SX_LE, /* 1 or 0 */
    SX_SELECT,    /* a != 0 ? b : c */
    SX_NOPS
} SxOp;

typedef struct SxIns {
    SxOp op;
    int a, b, c; /* operands: earlier instructions (SX_IN: the input's index) */
    double imm;  /* SX_CONST */
} SxIns;

#define SX_MAX_INS 96

typedef struct Sx {
    SxIns ins[SX_MAX_INS];
    int n;
    int out[CT_MAX_OUT]; /* output o of the node: an instruction */
    /* Computed in f64 by every backend, whatever the dtypes (Adam's bias
     * corrections, which torch takes in double). */
    int f64;
} Sx;

/* s = node n's expression (op_def(n->op)->scalar, which must exist). */
void sx_build(const Node *n, Sx *s);

/* The instructions, each appended once: asking again for an instruction
 * the expression has gives the earlier one. */
int sx_in(Sx *s, int k);
int sx_const(Sx *s, double v);
int sx_op(Sx *s, SxOp op, int a, int b, int c);

static inline int sx_add(Sx *s, int a, int b) { return sx_op(s, SX_ADD, a, b, 0); }
static inline int sx_mul(Sx *s, int a, int b) { return sx_op(s, SX_MUL, a, b, 0); }
static inline int sx_div(Sx *s, int a, int b) { return sx_op(s, SX_DIV, a, b, 0); }
static inline int sx_sqrt(Sx *s, int a) { return sx_op(s, SX_SQRT, a, 0, 0); }
static inline int sx_lt(Sx *s, int a, int b) { return sx_op(s, SX_LT, a, b, 0); }
static inline int sx_select(Sx *s, int c, int a, int b) { return sx_op(s, SX_SELECT, c, a, b); }

/* The number of operands of each op (SX_IN's index is none). */
int sx_arity(SxOp op);

/* The ref kernel of every op with a scalar expression: node n's expression
 * evaluated in double at every element of its outputs. */
void sx_ref(const Graph *g, const Node *n, double *const *in, double *const *out);

#endif
