/*
 * Appending nodes with sticky errors: the first failure is recorded, every
 * later emit returns -1 and adds nothing, so code that emits many nodes (the
 * builder, VJP rules, passes) checks once at the end. Node scopes come from
 * `scope`, which the owner of the emitter keeps current.
 */
#ifndef CTIMM_EMIT_H
#define CTIMM_EMIT_H

#include "ir/ir.h"

typedef struct Emitter {
    Graph *g;
    const char *scope;
    int failed;
    CtErr err;
} Emitter;

/* Appends one node and returns its output `which` (-1 on failure). */
ValueId emit(Emitter *e, CtOp op, int nin, const ValueId *in, const int64_t *iattr, int niattr, const double *fattr,
             int nfattr, int which);
/* The node emit appended last: for ops with several outputs. */
const Node *emit_last(const Emitter *e);
/* Records a failure (if none yet) and returns -1. */
int emit_fail(Emitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Shape of v, by value (emitting moves the value array, so a pointer into
 * it would not survive the next emit); an empty shape for -1, so emitting
 * code can run to its end after a failure without checking each value. */
CtShape emit_shape(const Emitter *e, ValueId v);

/* Shorthands for the shape ops, used wherever gradients are reshaped. */
ValueId emit_reshape(Emitter *e, ValueId x, CtShape to);
ValueId emit_permute(Emitter *e, ValueId x, int ndim, const int64_t *perm);
/* Sums x over the dims broadcasting made, back to shape `to`. */
ValueId emit_sum_to(Emitter *e, ValueId x, CtShape to);
/* emit_sum_to of x * f: one reduce_sum of both where f has x's shape and
 * there is something to sum, the product never stored. */
ValueId emit_sum_product_to(Emitter *e, ValueId x, ValueId f, CtShape to);

#endif
