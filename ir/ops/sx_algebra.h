/* Private to the op definitions: ir/formulas.h over scalar expressions,
 * for the scalar rules of the ops whose formulas are there. A value is an
 * instruction of the expression `fx` every formula takes first. */
#ifndef CTIMM_SX_ALGEBRA_H
#define CTIMM_SX_ALGEBRA_H

#include "ir/ops.h"
#include "ir/scalar.h"

#define FX_T int
#define FX_CTX Sx *fx,
#define FX_ARG fx,
#define FX_K(c) sx_const(fx, c)
#define FX_ADD(a, b) sx_op(fx, SX_ADD, a, b, 0)
#define FX_SUB(a, b) sx_op(fx, SX_SUB, a, b, 0)
#define FX_MUL(a, b) sx_op(fx, SX_MUL, a, b, 0)
#define FX_DIV(a, b) sx_op(fx, SX_DIV, a, b, 0)
#define FX_POW(a, b) sx_op(fx, SX_POW, a, b, 0)
#define FX_NEG(a) sx_op(fx, SX_NEG, a, 0, 0)
#define FX_EXP(a) sx_op(fx, SX_EXP, a, 0, 0)
#define FX_SQRT(a) sx_op(fx, SX_SQRT, a, 0, 0)
#define FX_ERF(a) sx_op(fx, SX_ERF, a, 0, 0)
#define FX_TANH(a) sx_op(fx, SX_TANH, a, 0, 0)
#define FX_LT(a, b) sx_op(fx, SX_LT, a, b, 0)
#define FX_LE(a, b) sx_op(fx, SX_LE, a, b, 0)
#define FX_SEL(c, a, b) sx_op(fx, SX_SELECT, c, a, b)
#include "ir/formulas.h"

#endif
