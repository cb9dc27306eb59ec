/*
 * Memory planning: liveness over the scheduled graph and an offset for every
 * activation and gradient in one arena, reusing the space of values that
 * have died (best fit), and letting an elementwise op write over an input it
 * reads for the last time. A reshape between row-major values, and a permute
 * that only relabels memory (of channels-last values), are views: the output
 * takes its input's space (the same bytes in the same order), and the space
 * lives until the last read of any of them, so executors skip the copy (an
 * output and input with one address). Graph inputs, outputs
 * and the persistent state (params, buffers, optimizer state) are not in the
 * arena: inputs and state have their own blocks and outputs are never
 * overwritten.
 */
#ifndef CTIMM_PLAN_H
#define CTIMM_PLAN_H

#include <stddef.h>

#include "ir/ir.h"

#define PLAN_ALIGN 256
#define PLAN_NONE ((size_t)-1)

typedef struct MemPlan {
    size_t *offset;   /* per value: byte offset in the arena, PLAN_NONE if not there */
    int *alias_of;    /* per value: the input whose space it took in place, or -1 */
    int *view_of;     /* per value: the value whose space it shares as a view (the first of a
                       * chain of reshapes), itself if none; a view's first/last are its group's */
    int *first, *last; /* per value: live from node first to node last (inclusive) */
    size_t arena_bytes; /* peak: the arena's size */
    size_t naive_bytes; /* every arena value in its own space */
    size_t input_bytes, output_bytes, state_bytes, param_bytes;
} MemPlan;

int plan_memory(const Graph *g, MemPlan *plan, CtErr *err);
/* Lifetimes asked for beyond the graph's own, per value (-1: none): live
 * from node born[v] (before its producer), or until node until[v] (after
 * its last reader). A backend whose fused kernels store a value while they
 * still read others the graph reads for the last time before it asks for
 * the two to be live together, so that they do not share bytes
 * (codegen/cuda/launch_plan.c). A value born early takes no input's space
 * in place. */
typedef struct PlanHints {
    int *born, *until;
} PlanHints;
int plan_memory_hinted(const Graph *g, const PlanHints *hints, MemPlan *plan, CtErr *err);
/* The step's planned peak: the arena, the state, the inputs and outputs. */
static inline size_t plan_peak_bytes(const MemPlan *p)
{
    return p->arena_bytes + p->param_bytes + p->state_bytes + p->input_bytes + p->output_bytes;
}

/* What the arena holds where the most of it is live (a view group or an
 * in-place output counted once), by kind: activations the forward made
 * (nodes before `fwd_end`: the training step's loss node, or g->nnodes),
 * the params' gradients (is_param_grad[v]), the gradients of activations
 * (the other CT_ROLE_GRAD values), and the backward's and the optimizer's
 * temporaries (the rest). The arena's peak is live + what fragmentation
 * leaves unused. */
typedef struct PlanSplit {
    int node; /* where the live bytes peak */
    size_t live, activations, param_grads, act_grads, temps;
} PlanSplit;
void plan_split(const Graph *g, const MemPlan *plan, int fwd_end, const char *is_param_grad, PlanSplit *out);
void plan_free(MemPlan *plan);
/* An independent check of a plan: no two values live at the same time
 * overlap in the arena, except an in-place output and the input it took and
 * the values of one view group, which must have one offset. */
int plan_check(const Graph *g, const MemPlan *plan, CtErr *err);

#endif
