/* Private to the op definitions: the OpDef objects and the small helpers
 * their shape rules and ref kernels share. */
#ifndef CTIMM_OPS_IMPL_H
#define CTIMM_OPS_IMPL_H

#include "ir/emit.h"
#include "ir/ir.h"
#include "ir/scalar.h"

#define OP(name) extern const OpDef op_##name;
#include "ir/ops.def"
#undef OP

static inline const CtType *in_type(const Graph *g, const Node *n, int i) { return &g->values[n->in[i]].type; }
static inline const CtShape *in_shape(const Graph *g, const Node *n, int i) { return &g->values[n->in[i]].type.shape; }
static inline const CtShape *out_shape(const Graph *g, const Node *n, int i) { return &g->values[n->out[i]].type.shape; }

/* dst[o] = src[sum of o's index times stride] for every element o of a
 * tensor of shape `out`: a permute is a gather like this. */
void strided_gather(const double *src, double *dst, const CtShape *out, const int64_t *stride);

/* The cost rule of forward ops fvcore counts nothing for. */
OpCost op_cost_none(const Graph *g, const Node *n, unsigned flags);

/* Shape rule of ops whose single output has the type of input 0. */
int infer_like_input0(const Graph *g, const Node *n, CtType *out, CtErr *err);
/* Fails unless input i is a floating tensor of exactly ndim dims (ndim<0: any). */
int require_float(const Graph *g, const Node *n, int i, int ndim, CtErr *err);
/* Fails unless input i has shape == s. */
int require_shape(const Graph *g, const Node *n, int i, const CtShape *s, CtErr *err);

#endif
