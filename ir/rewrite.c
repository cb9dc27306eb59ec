#include "ir/rewrite.h"

#include <stdlib.h>
#include <string.h>

void rewrite_begin(Rewriter *r, const Graph *src, Graph *dst)
{
    graph_init(dst);
    r->src = src;
    r->dst = dst;
    r->e = (Emitter){.g = dst, .scope = ""};
    r->map = malloc(sizeof *r->map * (size_t)(src->nvalues ? src->nvalues : 1));
    CT_ASSERT(r->map != NULL);
    for (ValueId v = 0; v < src->nvalues; v++) {
        const Value *val = &src->values[v];
        r->map[v] = -1;
        if (val->producer >= 0)
            continue;
        ValueId w = graph_add_value(dst, val->type, val->role, val->name);
        dst->values[w].init = init_in_arena(&dst->arena, val->init, shape_numel(&val->type.shape));
        dst->values[w].layout = val->layout;
        r->map[v] = w;
    }
}

void rewrite_copy(Rewriter *r, int i)
{
    const Node *n = &r->src->nodes[i];
    ValueId in[CT_MAX_IN];
    for (int k = 0; k < n->nin; k++)
        in[k] = r->map[n->in[k]];
    r->e.scope = n->scope;
    if (emit(&r->e, n->op, n->nin, in, n->iattr, CT_MAX_IATTR, n->fattr, CT_MAX_FATTR, 0) < 0 && n->nout)
        return;
    const Node *copy = &r->dst->nodes[r->dst->nnodes - 1];
    for (int k = 0; k < n->nout; k++) {
        r->map[n->out[k]] = copy->out[k];
        r->dst->values[copy->out[k]].role = r->src->values[n->out[k]].role;
        r->dst->values[copy->out[k]].layout = r->src->values[n->out[k]].layout;
    }
}

int rewrite_end(Rewriter *r, CtErr *err)
{
    Graph *dst = r->dst;
    int rc = 0;
    for (int k = 0; k < r->src->noutputs && !r->e.failed; k++) {
        ValueId v = r->map[r->src->outputs[k]];
        if (v < 0)
            emit_fail(&r->e, "rewrite: graph output %d has no value in the new graph", k);
        else
            graph_mark_output(dst, v);
    }
    if (!r->e.failed) {
        dst->state = malloc(sizeof *dst->state * (size_t)(r->src->nstate ? r->src->nstate : 1));
        CT_ASSERT(dst->state != NULL);
        for (int k = 0; k < r->src->nstate; k++)
            dst->state[dst->nstate++] = r->map[r->src->state[k]];
    }
    if (r->e.failed) {
        *err = r->e.err;
        rc = -1;
    } else {
        rc = graph_verify(dst, err);
    }
    free(r->map);
    r->map = NULL;
    if (rc)
        graph_free(dst);
    return rc;
}
