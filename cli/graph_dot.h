/*
 * ctimm-compile --dot FILE: the compiled graph as Graphviz, so a user sees
 * what the compiler fused. Every step of the fusion plan is a cluster: an
 * elementwise kernel in its own colour (steps sharing a launch, as the
 * optimizer's multi-tensor update, share the colour), a library call (conv,
 * matmul, norms, ...) blue with its epilogue nodes inside, a view (reshapes
 * only, no kernel) dashed, a copy grey. Edges are the values between nodes;
 * parameters and buffers are left out (they would bury the picture), graph
 * inputs and outputs are drawn. Renders with `dot -Tsvg FILE`.
 */
#ifndef CTIMM_CLI_GRAPH_DOT_H
#define CTIMM_CLI_GRAPH_DOT_H

#include "ir/buf.h"
#include "passes/fuse.h"

void graph_dot(const Graph *g, const FusePlan *p, const char *title, CtBuf *out);

#endif
