/* The stats pass: fvcore's counting rules (see stats.h), each op's in its
 * OpDef (ir/ops/), applied node by node to a forward graph. */
#include "passes/stats.h"

#include <string.h>

int graph_stats(const Graph *g, const StatsOptions *opt, GraphStats *st, CtErr *err)
{
    memset(st, 0, sizeof *st);
    st->params = graph_param_count(g);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        const OpDef *d = op_def(n->op);
        if (!d->cost)
            return ct_fail(err, "stats: node %d is %s (%s), not a forward op; timm's counts are of the forward graph",
                           i, d->name, n->scope && n->scope[0] ? n->scope : "model");
        OpCost c = d->cost(g, n, opt->count_attention ? OP_COST_ATTENTION : 0);
        st->macs += c.macs;
        st->activations += c.activations;
        st->macs_by_op[n->op] += c.macs;
        st->activations_by_op[n->op] += c.activations;
    }
    return 0;
}
