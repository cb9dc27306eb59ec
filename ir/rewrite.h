/*
 * Rewriting a graph: a pass copies its input graph node by node into a new
 * one, replacing the nodes it changes. Inputs, params, buffers and state are
 * carried over first, under the same names, inits and state order, so the
 * new graph runs on the same CtState.
 */
#ifndef CTIMM_REWRITE_H
#define CTIMM_REWRITE_H

#include "ir/emit.h"

typedef struct Rewriter {
    const Graph *src;
    Graph *dst;
    Emitter e;  /* emits into dst; its scope is the node being rewritten */
    ValueId *map; /* src value -> dst value (-1: not yet) */
} Rewriter;

void rewrite_begin(Rewriter *r, const Graph *src, Graph *dst);
/* Copies src node i with its inputs mapped; maps its outputs. */
void rewrite_copy(Rewriter *r, int i);
/* Says that src value v is now dst value to. */
static inline void rewrite_map(Rewriter *r, ValueId v, ValueId to) { r->map[v] = to; }
static inline ValueId rewrite_value(const Rewriter *r, ValueId v) { return r->map[v]; }
/* Maps the outputs and state list, verifies dst and frees the rewriter; on
 * failure dst is freed. */
int rewrite_end(Rewriter *r, CtErr *err);

#endif
