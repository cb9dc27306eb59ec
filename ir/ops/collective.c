/*
 * Collectives inside the training graph (data-parallel training).
 *
 * allreduce_mean(x), iattr bucket: the mean of x over the ranks, x a flat
 *   [n] bucket of gradients (DDP's bucket: the gradients of several params
 *   concatenated in the order the backward finishes them, passes/bucket.c);
 *   `bucket` numbers them, for dumps and for an executor that launches each
 *   as soon as its inputs are final. Not differentiated. The reference
 *   kernel calls the run's collective (ir/collective.h); without one it is
 *   a copy. A failed collective leaves NaN in the output, so the step's
 *   loss and update cannot pass for good; the communicator's owner reports
 *   why.
 */
#include <math.h>
#include <string.h>

#include "ir/collective.h"
#include "ops_impl.h"

int ct_collective_world(const CtCollective *c) { return c ? c->world_size : 1; }

int ct_collective_sum(const CtCollective *c, double *buf, int64_t n)
{
    return ct_collective_world(c) > 1 ? c->allreduce_sum(c->ctx, buf, n) : 0;
}

static int infer_allreduce_mean(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 1, err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static void allreduce_mean_ref(const Graph *g, const Node *n, double *const *in, double *const *out,
                               const CtCollective *coll)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    memcpy(out[0], in[0], sizeof(double) * (size_t)count);
    int world = ct_collective_world(coll), failed = ct_collective_sum(coll, out[0], count);
    for (int64_t i = 0; i < count && world > 1; i++)
        out[0][i] = failed ? NAN : out[0][i] / world;
}

const OpDef op_allreduce_mean = {.name = "allreduce_mean", .min_in = 1, .max_in = 1, .iattr = {"bucket"},
                                 .infer = infer_allreduce_mean, .ref_ranks = allreduce_mean_ref,
                                 .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};
