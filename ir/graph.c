#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *ct_grow(void *p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return p;
    int c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    p = realloc(p, (size_t)c * elem);
    CT_ASSERT(p != NULL);
    *cap = c;
    return p;
}

void graph_init(Graph *g) { memset(g, 0, sizeof *g); }

void graph_free(Graph *g)
{
    free(g->values);
    free(g->nodes);
    free(g->outputs);
    free(g->state);
    arena_free(&g->arena);
    memset(g, 0, sizeof *g);
}

ValueId graph_add_value(Graph *g, CtType type, CtRole role, const char *name)
{
    g->values = ct_grow(g->values, &g->cap_values, g->nvalues + 1, sizeof *g->values);
    Value *v = &g->values[g->nvalues];
    memset(v, 0, sizeof *v);
    v->type = type;
    v->role = role;
    v->layout = CT_LAYOUT_CONTIG;
    v->name = name ? arena_strdup(&g->arena, name) : NULL;
    v->producer = -1;
    return g->nvalues++;
}

int graph_add_node(Graph *g, const Node *proto, const char *scope, CtErr *err)
{
    const OpDef *def = op_def(proto->op);
    if (proto->nin < def->min_in || proto->nin > def->max_in)
        return ct_fail(err, "%s at '%s': takes %d..%d inputs, got %d", def->name, scope ? scope : "",
                       def->min_in, def->max_in, proto->nin);
    CtType out[CT_MAX_OUT];
    int nout = def->infer(g, proto, out, err);
    if (nout < 0)
        return ct_failctx(err, "%s at '%s'", def->name, scope ? scope : "");
    g->nodes = ct_grow(g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof *g->nodes);
    int idx = g->nnodes++;
    Node *n = &g->nodes[idx];
    *n = *proto;
    n->scope = scope ? arena_strdup(&g->arena, scope) : "";
    n->nout = nout;
    for (int i = 0; i < nout; i++) {
        ValueId v = graph_add_value(g, out[i], CT_ROLE_ACTIVATION, NULL);
        g->values[v].producer = idx;
        g->nodes[idx].out[i] = v;
    }
    return idx;
}

void graph_mark_output(Graph *g, ValueId v)
{
    g->outputs = ct_grow(g->outputs, &g->cap_outputs, g->noutputs + 1, sizeof *g->outputs);
    g->outputs[g->noutputs++] = v;
}

int graph_reads(const Graph *g, ValueId v)
{
    int reads = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            reads += g->nodes[i].in[k] == v;
    for (int k = 0; k < g->noutputs; k++)
        reads += g->outputs[k] == v;
    return reads;
}

int shape_equal(const CtShape *a, const CtShape *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->d[i] != b->d[i])
            return 0;
    return 1;
}

const char *shape_str(const CtShape *s, char *buf, size_t n)
{
    size_t len = 0;
    len += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < s->ndim && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, i ? ",%lld" : "%lld", (long long)s->d[i]);
    if (len < n)
        snprintf(buf + len, n - len, "]");
    return buf;
}

CtShape shape_make(int ndim, const int64_t *d)
{
    CtShape s = {.ndim = ndim};
    CT_ASSERT(ndim >= 0 && ndim <= CT_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        s.d[i] = d[i];
    return s;
}

void shape_split_at_dim(const CtShape *s, int64_t dim, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int64_t i = 0; i < dim; i++)
        *outer *= s->d[i];
    for (int64_t i = dim + 1; i < s->ndim; i++)
        *inner *= s->d[i];
}

void shape_broadcast_strides(const CtShape *in, const CtShape *out, int64_t *strides)
{
    int64_t s = 1;
    for (int i = out->ndim - 1; i >= 0; i--) {
        int j = i - (out->ndim - in->ndim);
        int64_t d = j >= 0 ? in->d[j] : 1;
        strides[i] = d == 1 ? 0 : s;
        s *= d;
    }
}

const char *ct_role_name(CtRole r)
{
    static const char *const names[] = {"input", "param", "buffer", "activation", "grad", "state", "const"};
    return names[r];
}

CtInit init_in_arena(CtArena *a, CtInit init, int64_t n)
{
    if (init.kind != CT_INIT_DATA)
        return init;
    double *d = arena_alloc(a, sizeof *d * (size_t)(n ? n : 1));
    memcpy(d, init.data, sizeof *d * (size_t)n);
    init.data = d;
    return init;
}

const char *ct_layout_name(CtLayout l) { return l == CT_LAYOUT_CHANNELS_LAST ? "nhwc" : "contig"; }

void value_strides(const Value *v, int64_t *st)
{
    const CtShape *s = &v->type.shape;
    if (v->layout == CT_LAYOUT_CHANNELS_LAST && s->ndim == 4) {
        int64_t C = s->d[1], H = s->d[2], W = s->d[3];
        st[0] = H * W * C, st[1] = 1, st[2] = W * C, st[3] = C;
        return;
    }
    int64_t k = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        st[d] = k;
        k *= s->d[d];
    }
}

int value_row_major(const Value *v)
{
    const CtShape *s = &v->type.shape;
    return v->layout != CT_LAYOUT_CHANNELS_LAST || s->ndim != 4 || s->d[1] == 1 || s->d[2] * s->d[3] == 1;
}

int64_t graph_param_count(const Graph *g)
{
    int64_t n = 0;
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i].role == CT_ROLE_PARAM)
            n += shape_numel(&g->values[i].type.shape);
    return n;
}
