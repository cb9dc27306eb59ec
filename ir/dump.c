/* The text form of a graph: declarations of inputs, params and buffers, then
 * one node a line with its attributes and output types, then the outputs. */
#include "ir/buf.h"
#include "ir/ir.h"

static void dump_type(const Value *v, CtBuf *out)
{
    char b[96];
    buf_printf(out, "%s %s %s", shape_str(&v->type.shape, b, sizeof b), ct_dtype_name(v->type.dtype),
               ct_layout_name(v->layout));
}

static void dump_node(const Graph *g, const Node *n, CtBuf *out)
{
    const OpDef *def = op_def(n->op);
    for (int k = 0; k < n->nout; k++)
        buf_printf(out, k ? ", %%%d" : "%%%d", n->out[k]);
    buf_printf(out, n->nout ? " = %s(" : "%s(", def->name);
    for (int k = 0; k < n->nin; k++)
        buf_printf(out, k ? ", %%%d" : "%%%d", n->in[k]);
    buf_printf(out, ")");
    if (def->list_attr) {
        buf_printf(out, " %s=[", def->list_attr);
        for (int k = 0; k < n->iattr[0]; k++)
            buf_printf(out, k ? ",%lld" : "%lld", (long long)n->iattr[1 + k]);
        buf_printf(out, "]");
    }
    for (int k = 0; def->iattr[k]; k++)
        buf_printf(out, " %s=%lld", def->iattr[k], (long long)n->iattr[k]);
    for (int k = 0; def->fattr[k]; k++)
        buf_printf(out, " %s=%.9g", def->fattr[k], n->fattr[k]);
    if (n->nout)
        buf_printf(out, " :");
    for (int k = 0; k < n->nout; k++) {
        buf_printf(out, k ? ", " : " ");
        dump_type(&g->values[n->out[k]], out);
    }
    if (n->scope && n->scope[0])
        buf_printf(out, "  # %s", n->scope);
    buf_printf(out, "\n");
}

void graph_dump(const Graph *g, CtBuf *out)
{
    for (int v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->producer >= 0)
            continue;
        buf_printf(out, "%%%d = %s %s : ", v, ct_role_name(val->role), val->name ? val->name : "-");
        dump_type(val, out);
        buf_printf(out, "\n");
    }
    for (int i = 0; i < g->nnodes; i++)
        dump_node(g, &g->nodes[i], out);
    buf_printf(out, "outputs:");
    for (int k = 0; k < g->noutputs; k++)
        buf_printf(out, " %%%d", g->outputs[k]);
    buf_printf(out, "\n");
}
