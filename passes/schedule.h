/* Node order passes. */
#ifndef CTIMM_SCHEDULE_H
#define CTIMM_SCHEDULE_H

#include "ir/ir.h"

/* Moves every assign node after all other nodes, keeping the relative order
 * of each group: assign writes state in place, so the backward pass appended
 * after a forward must still read the state the forward read (BN running
 * stats, the RNG counter). */
void schedule_assigns_last(Graph *g);

#endif
