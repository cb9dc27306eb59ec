/* Graphs built node by node in tests: a node appended with its inputs and
 * attributes, failing the test where the graph refuses it. */
#ifndef CTIMM_TEST_GRAPH_NODES_H
#define CTIMM_TEST_GRAPH_NODES_H

#include <string.h>

#include "check.h"
#include "ir/ir.h"
#include "ir/ops.h"

/* Appends op(in[nin]) with iattr a[na] and fattr f[nf]; returns its output
 * 0 (0 where the graph refused it). */
static inline ValueId test_node(Graph *g, CtOp op, int nin, const ValueId *in, const int64_t *a, int na,
                                const double *f, int nf)
{
    Node n = {.op = op, .nin = nin};
    memcpy(n.in, in, sizeof *in * (size_t)nin);
    if (na)
        memcpy(n.iattr, a, sizeof *a * (size_t)na);
    if (nf)
        memcpy(n.fattr, f, sizeof *f * (size_t)nf);
    CtErr err;
    int i = graph_add_node(g, &n, "t", &err);
    CHECKF(i >= 0, "%s: %s", op_def(op)->name, err.msg);
    return i >= 0 ? g->nodes[i].out[0] : 0;
}

#endif
