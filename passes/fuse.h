/*
 * Fusion: an analysis that partitions a verified graph's nodes into steps,
 * each one kernel launch or library call (or none, for a view), in an order
 * that is a valid schedule. The graph itself is not changed.
 *
 *   FUSE_LIBRARY      one node that keeps a kernel of its own: convolutions
 *                     and their gradients, linear, matmul, sdpa (and grad),
 *                     norms, pools, softmax, reductions, losses, data
 *                     movement; for conv2d/linear/matmul followed by a bias
 *                     add, a residual add and/or an activation, those nodes
 *                     too, recorded as the call's epilogue (cuBLASLt/cuDNN
 *                     epilogues on the GPU; an elementwise pass over the
 *                     call's output elsewhere), for batch_norm the
 *                     residual add and activation (the cpu backend applies
 *                     them to each plane as it normalises it), and for
 *                     layer_norm_grad the residual add of its dx and a
 *                     cast of the sum (the cuda kernel stores both).
 *   FUSE_ELEMENTWISE  elementwise and broadcast nodes (fuse_is_elementwise)
 *                     over one iteration space: every node's output has the
 *                     group's element count and memory order, so element i
 *                     of each is computed from element i of the others in
 *                     one pass; inputs from outside are read with broadcast
 *                     strides. A group of reshapes only is a view (no kernel).
 *   FUSE_COPY         an assign that no group could take over.
 *
 * Elementwise groups holding optimizer updates of one op, attributes and
 * scalar inputs share a `launch` id, as many in a row as may wait for the
 * last of them: they run as one multi-tensor kernel there; so do groups of
 * one node whose output only goes into state, by op and attributes
 * (batch_norm's num_batches_tracked + 1), and groups read only by such
 * launches doing the same work of other tensors (the unscale of a
 * channels-last gradient the update reads in its parameter's layout), a
 * launch before them. Groups reading only state (a
 * parameter's cast to the AMP dtype) share one with the ones after them, up
 * to 32 MiB of outputs, and run at the first of them; so, a level at a
 * time, do groups reading only state and what such groups made of it (in
 * eval, each batch norm's scale folded into its convolution's filter), each
 * batch after the batches it reads.
 * An assign whose source is computed in an elementwise group (or is a
 * running statistic of the batch_norm that read it), when nothing after the
 * step reads the destination, joins that step: the step stores the source
 * straight into the destination (the optimizer writing parameters and state
 * in place, batch_norm updating its running statistics).
 *
 * Materialisation: a value computed inside a step is written to memory iff
 * it is read outside the step (by a node of another step, or an assign the
 * step did not take) or is a graph output; an assign taken by the step
 * writes its source into the destination. Nothing is recomputed: a node
 * belongs to exactly one step.
 */
#ifndef CTIMM_FUSE_H
#define CTIMM_FUSE_H

#include <stdint.h>

#include "ir/ir.h"

typedef enum FuseKind { FUSE_LIBRARY, FUSE_ELEMENTWISE, FUSE_COPY } FuseKind;

/* Epilogue parts of a library step, as bits. */
enum { FUSE_EPI_BIAS = 1, FUSE_EPI_RESIDUAL = 2, FUSE_EPI_ACT = 4, FUSE_EPI_CAST = 8 };

typedef struct FuseStep {
    FuseKind kind;
    int first, n;  /* its nodes: FusePlan.nodes[first .. first + n), in graph order, the assigns last */
    int epilogue;  /* FUSE_LIBRARY: FUSE_EPI_* bits */
    int64_t numel; /* FUSE_ELEMENTWISE: elements in the iteration space */
    int view;      /* FUSE_ELEMENTWISE of reshapes only: no kernel */
    int launch;    /* the kernel this step runs in: steps with one launch id run as one kernel; -1 for views */
} FuseStep;

typedef struct FusePlan {
    FuseStep *steps;
    int nsteps;
    int *nodes;         /* node indices, grouped by step in step order */
    int *step_of;       /* per node: its step */
    char *materialised; /* per value: written to its own memory */
    int kernels_before; /* one per node: the node-by-node backends' count */
    int kernels_after;  /* distinct launch ids */
} FusePlan;

/* Whether node n may join an elementwise group: its op's fusion class
 * (ir/ops.h) is elementwise or activation, or a view between row-major
 * values. Such a node has a scalar expression, which codegen/kir.c lowers. */
int fuse_is_elementwise(const Graph *g, const Node *n);

int fuse_plan(const Graph *g, FusePlan *p, CtErr *err);
void fuse_free(FusePlan *p);
/* og = g with its nodes in p's step order (producers renumbered), owning
 * its arrays and nothing of g's, so it can outlive g: no names, scopes or
 * state list. What the executors plan memory over; free with graph_free. */
void fuse_ordered_graph(const Graph *g, const FusePlan *p, Graph *og);
/* An independent check: every node in exactly one step, steps in a valid
 * order (each reads only values of earlier steps, its own, or no producer),
 * elementwise steps in one iteration space, the materialisation rule. */
int fuse_check(const Graph *g, const FusePlan *p, CtErr *err);

/* Per step of p (over g, or over fuse_ordered_graph's og where `ordered`),
 * the node of that graph whose batch_norm's forward the step and the next
 * one or two run again to take its gradient in one pass, or -1:
 *   - the step is that batch_norm, recomputed for the backward, and the
 *     next two the act_grad of its output and the batch_norm_grad (of the
 *     same x and weight) reading that gradient; nothing else reads the
 *     batch_norm's outputs (a backend may leave them unwritten);
 *   - or the step is an act_grad of a relu's output, that relu the
 *     batch_norm's activation (relu's gradient is the same from its input),
 *     and the next one the batch_norm_grad reading that gradient.
 * Training statistics, not synchronised; each node alone in its step (the
 * act_grad alone in its launch), nothing but the batch_norm_grad reading
 * the act_grad's output, which is no graph output: a backend may run the
 * steps as one, with the activation's input and gradient recomputed from x
 * where they are read, never written. The caller frees the array. */
int *fuse_bn_act_grad_steps(const Graph *g, const FusePlan *p, int ordered);

struct CtBuf;
/* One line per step: kernel number, kind, ops, values written. */
void fuse_dump(const Graph *g, const FusePlan *p, struct CtBuf *out);

#endif
