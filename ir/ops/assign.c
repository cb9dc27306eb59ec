/*
 * assign(dst, src): writes src into the storage of a parameter or buffer
 * (BN running stats now; parameters and optimizer state after the update
 * step later). It has no output, so passes see every state change as a node.
 */
#include "ops_impl.h"

static int infer_assign(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const Value *dst = &g->values[n->in[0]];
    if (dst->role != CT_ROLE_PARAM && dst->role != CT_ROLE_BUFFER && dst->role != CT_ROLE_STATE)
        return ct_fail(err, "destination %%%d is a %s; only params, buffers and state can be assigned", n->in[0],
                       ct_role_name(dst->role));
    if (!shape_equal(&dst->type.shape, in_shape(g, n, 1)) || dst->type.dtype != in_type(g, n, 1)->dtype)
        return ct_fail(err, "source type differs from destination '%s'", dst->name ? dst->name : "");
    return 0;
}

static void assign_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 1));
    for (int64_t i = 0; i < count; i++)
        in[0][i] = in[1][i];
}

/* State keeps its dtype and storage: the source is cast to the destination's
 * dtype, and neither changes layout. BN's running statistics in training
 * mode are assigns in a forward graph: counted as nothing. */
const OpDef op_assign = {.name = "assign", .min_in = 2, .max_in = 2, .infer = infer_assign, .ref = assign_ref,
                         .fusion = OP_STATE, .amp = OP_AMP_DEST, .amp_keep = 1, .layout = OP_LAYOUT_NCHW,
                         .layout_keep = 3, .cost = op_cost_none};
