/* Node order passes. */
#ifndef CTIMM_SCHEDULE_H
#define CTIMM_SCHEDULE_H

#include "ir/ir.h"

/* Moves every assign node after all other nodes, keeping the relative order
 * of each group: assign writes state in place, so the backward pass appended
 * after a forward must still read the state the forward read (BN running
 * stats, the RNG counter). Kept together at the end, the optimizer's
 * updates stay adjacent and run as few multi-tensor launches. */
void schedule_assigns_last(Graph *g);

/* Puts every assign node right after the last node that reads the value it
 * writes (and the one that computes what it writes), keeping the order of
 * the rest: assign writes state in place, and every other node must read
 * the state as the step began (the backward the forward's BN running stats
 * and RNG counter, the optimizer the params). A graph may come in any order
 * that means that (a backward appended after a forward's assigns, nodes
 * recomputed after them); each assign is then as early as it can be, so
 * what it copies dies there (an optimizer's new params and moments one
 * tensor at a time, not all of them together at the step's end). */
void schedule_assigns(Graph *g);

/* Moves each node from `from` on (but the assigns) up to right after the
 * last node computing one of its inputs, though never before node `floor`,
 * the rest in order: the training step's tail (gradients unscaled, clipped,
 * the optimizer's updates, the EMA), emitted after the whole backward, then
 * runs each piece as soon as its gradient is there, so a gradient dies
 * where it is made (where nothing waits for all of them: a global-norm clip,
 * AMP's skip of a non-finite step). Then schedule_assigns. */
void schedule_hoist(Graph *g, int from, int floor);

/* Moves each batch norm that remat runs again in the backward, with its
 * relu, to right before the act_grad of that relu which feeds the norm's
 * batch_norm_grad, and the nodes between that read the relu's output (a
 * convolution's weight gradient, its optimizer update) to right after the
 * gradient: the cuda backend's gradient pass then stores the relu's output
 * where it reads x anyway (launch_plan.c's bn_act_grad_step), so the rerun
 * is no pass of its own. Reorders only, before the assigns are placed. */
void schedule_bn_reruns(Graph *g);

#endif
