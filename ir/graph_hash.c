#include "ir/graph_hash.h"

XXH128_hash_t graph_content_hash(const Graph *g)
{
    XXH3_state_t *st = XXH3_createState();
    CT_ASSERT(st != NULL);
    XXH3_128bits_reset(st);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        int head[3] = {n->op, n->nin, n->nout};
        XXH3_128bits_update(st, head, sizeof head);
        XXH3_128bits_update(st, n->in, sizeof *n->in * (size_t)n->nin);
        XXH3_128bits_update(st, n->out, sizeof *n->out * (size_t)n->nout);
        XXH3_128bits_update(st, n->iattr, sizeof n->iattr);
        XXH3_128bits_update(st, n->fattr, sizeof n->fattr);
    }
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        int head[4] = {val->type.dtype, val->type.shape.ndim, val->layout, val->role};
        XXH3_128bits_update(st, head, sizeof head);
        XXH3_128bits_update(st, val->type.shape.d, sizeof *val->type.shape.d * (size_t)val->type.shape.ndim);
    }
    XXH3_128bits_update(st, g->outputs, sizeof *g->outputs * (size_t)g->noutputs);
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    return h;
}
