/* The stats pass: fvcore's counting rules (see stats.h) applied node by node
 * to a forward graph. */
#include "passes/stats.h"

#include <string.h>

typedef struct Cost {
    int64_t macs, activations;
} Cost;

static const CtShape *shape_of(const Graph *g, ValueId v) { return &g->values[v].type.shape; }
static int64_t numel_of(const Graph *g, ValueId v) { return shape_numel(shape_of(g, v)); }

/* Whether the node was emitted by a SqueezeExcite module ("blocks.1.0.se"):
 * timm squeezes there with x.mean((2, 3), keepdim=True), not with
 * nn.AdaptiveAvgPool2d. */
static int in_squeeze_excite(const Node *n)
{
    if (!n->scope)
        return 0;
    const char *dot = strrchr(n->scope, '.');
    return strcmp(dot ? dot + 1 : n->scope, "se") == 0;
}

/* A norm's affine weight is a parameter; fvcore counts one more op per
 * element for it. */
static int has_affine(const Graph *g, const Node *n) { return g->values[n->in[1]].role == CT_ROLE_PARAM; }

/* What fvcore counts for the ATen op(s) timm calls where this node stands. */
static Cost node_cost(const Graph *g, const Node *n, const StatsOptions *opt)
{
    switch (n->op) {
    case CT_OP_conv2d: { /* N * O * C/groups * KH * KW * OH * OW */
        const CtShape *y = shape_of(g, n->out[0]);
        return (Cost){shape_of(g, n->in[0])->d[0] * numel_of(g, n->in[1]) * y->d[2] * y->d[3], shape_numel(y)};
    }
    case CT_OP_linear:
        return (Cost){numel_of(g, n->in[0]) * shape_of(g, n->in[1])->d[0], numel_of(g, n->out[0])};
    case CT_OP_matmul: {
        const CtShape *b = shape_of(g, n->in[1]);
        return (Cost){numel_of(g, n->in[0]) * b->d[b->ndim - 1], numel_of(g, n->out[0])};
    }
    case CT_OP_sdpa: { /* q [B,H,N,D] @ k^T [B,H,D,M] -> [B,H,N,M]; @ v [B,H,M,D] -> [B,H,N,D] */
        if (!opt->count_attention)
            return (Cost){0, 0};
        const CtShape *q = shape_of(g, n->in[0]), *v = shape_of(g, n->in[2]);
        int64_t scores = q->d[0] * q->d[1] * q->d[2] * shape_of(g, n->in[1])->d[2];
        return (Cost){shape_numel(q) * v->d[2] + scores * v->d[3], scores + numel_of(g, n->out[0])};
    }
    case CT_OP_batch_norm:
        if (n->iattr[0]) /* training: normalised by the batch's statistics */
            return (Cost){numel_of(g, n->in[0]) * (has_affine(g, n) ? 5 : 4), 0};
        return (Cost){numel_of(g, n->in[0]) * (has_affine(g, n) ? 2 : 1), 0};
    case CT_OP_layer_norm:
        return (Cost){numel_of(g, n->in[0]) * (has_affine(g, n) ? 5 : 4), 0};
    case CT_OP_adaptive_avg_pool2d:
        return (Cost){in_squeeze_excite(n) ? 0 : numel_of(g, n->in[0]), 0};
    default:
        return (Cost){0, 0};
    }
}

int graph_stats(const Graph *g, const StatsOptions *opt, GraphStats *st, CtErr *err)
{
    memset(st, 0, sizeof *st);
    st->params = graph_param_count(g);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (!op_def(n->op)->vjp && n->op != CT_OP_assign) /* assign: BN's running stats, training mode */
            return ct_fail(err, "stats: node %d is %s (%s), not a forward op; timm's counts are of the forward graph",
                           i, op_def(n->op)->name, n->scope && n->scope[0] ? n->scope : "model");
        Cost c = node_cost(g, n, opt);
        st->macs += c.macs;
        st->activations += c.activations;
        st->macs_by_op[n->op] += c.macs;
        st->activations_by_op[n->op] += c.activations;
    }
    return 0;
}
