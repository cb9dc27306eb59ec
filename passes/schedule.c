/* Contract: schedule_assigns_last(g) reorders nodes only; a verified graph
 * stays verified, with no value read after its assign. */
#include "passes/schedule.h"

#include <stdlib.h>

void schedule_assigns_last(Graph *g)
{
    Node *order = malloc(sizeof *order * (size_t)(g->nnodes ? g->nnodes : 1));
    CT_ASSERT(order != NULL);
    int k = 0;
    for (int last = 0; last < 2; last++)
        for (int i = 0; i < g->nnodes; i++)
            if ((g->nodes[i].op == CT_OP_assign) == last)
                order[k++] = g->nodes[i];
    for (int i = 0; i < g->nnodes; i++) {
        g->nodes[i] = order[i];
        for (int o = 0; o < order[i].nout; o++)
            g->values[order[i].out[o]].producer = i;
    }
    free(order);
}
