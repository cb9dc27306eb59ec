/*
 * The graph-to-graph passes (passes/pipeline.h runs them in order). Each
 * pass is one file in passes/ with its contract at the top; each takes a
 * verified graph and leaves a verified graph in `out` (the input is not
 * changed).
 */
#ifndef CTIMM_PASSES_H
#define CTIMM_PASSES_H

#include "ir/ir.h"

int bn_fold(const Graph *g, Graph *out, CtErr *err);
int layout_channels_last(const Graph *g, Graph *out, CtErr *err);
/* On a forward graph, before autodiff (the backward follows its dtypes). */
int amp_cast(const Graph *g, CtDType low, Graph *out, CtErr *err);

#endif
