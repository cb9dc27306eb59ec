#include "cli/graph_dot.h"

#include <stdio.h>

/* Pastel fills for elementwise kernels, by launch id. */
static const char *const palette[] = {"#fde2c8", "#d9f2d0", "#f6d5e8", "#fff3b0", "#d5e8f6", "#e6d9f2",
                                      "#ffd6d6", "#d0f0ee"};

static void node_label(const Graph *g, int i, CtBuf *out)
{
    const Node *n = &g->nodes[i];
    buf_printf(out, "%s", op_def(n->op)->name);
    if (n->scope && *n->scope) {
        buf_printf(out, "\\n");
        for (const char *c = n->scope; *c; c++) /* a DOT string: escape quotes and backslashes */
            buf_printf(out, "%s%c", *c == '"' || *c == '\\' ? "\\" : "", *c);
    }
}

void graph_dot(const Graph *g, const FusePlan *p, const char *title, CtBuf *out)
{
    buf_printf(out, "digraph ctimm {\n  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=12, labelloc=t,\n"
                    "         label=\"%s: %d nodes, %d kernels after fusion (%d node by node)\"];\n"
                    "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", "
                    "fontsize=9];\n  edge [color=\"#777777\", arrowsize=0.5];\n",
               title, g->nnodes, p->kernels_after, p->kernels_before);
    for (ValueId v = 0; v < g->nvalues; v++)
        if (g->values[v].role == CT_ROLE_INPUT)
            buf_printf(out, "  v%d [shape=ellipse, fillcolor=\"#eeeeee\", label=\"%s\"];\n", v,
                       g->values[v].name ? g->values[v].name : "input");
    for (int s = 0; s < p->nsteps; s++) {
        const FuseStep *st = &p->steps[s];
        const char *fill = "#cfe2ff", *style = "filled,rounded";
        char label[160];
        if (st->kind == FUSE_ELEMENTWISE && st->view) {
            fill = "white";
            style = "dashed,rounded";
            snprintf(label, sizeof label, "view (no kernel)");
        } else if (st->kind == FUSE_ELEMENTWISE) {
            fill = palette[(st->launch < 0 ? 0 : st->launch) % (int)(sizeof palette / sizeof *palette)];
            snprintf(label, sizeof label, "kernel %d: %d fused elementwise op%s", st->launch, st->n,
                     st->n == 1 ? "" : "s");
        } else if (st->kind == FUSE_COPY) {
            fill = "#e0e0e0";
            snprintf(label, sizeof label, "kernel %d: copy", st->launch);
        } else {
            snprintf(label, sizeof label, "kernel %d: library call%s%s%s%s", st->launch, st->epilogue ? " + epilogue:" : "",
                     st->epilogue & FUSE_EPI_BIAS ? " bias" : "", st->epilogue & FUSE_EPI_RESIDUAL ? " residual" : "",
                     st->epilogue & FUSE_EPI_ACT ? " activation" : "");
        }
        buf_printf(out, "  subgraph cluster_%d {\n    label=\"%s\"; style=\"%s\"; fillcolor=\"%s\"; color=\"#555555\";"
                        " fontsize=9;\n",
                   s, label, style, fill);
        for (int k = 0; k < st->n; k++) {
            int i = p->nodes[st->first + k];
            int lib = st->kind == FUSE_LIBRARY && k == 0;
            buf_printf(out, "    n%d [label=\"", i);
            node_label(g, i, out);
            buf_printf(out, "\"%s];\n", lib ? ", fillcolor=\"#9ec5fe\", penwidth=1.5" : "");
        }
        buf_printf(out, "  }\n");
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            const Value *v = &g->values[n->in[k]];
            if (v->producer >= 0)
                buf_printf(out, "  n%d -> n%d;\n", v->producer, i);
            else if (v->role == CT_ROLE_INPUT)
                buf_printf(out, "  v%d -> n%d;\n", n->in[k], i);
        }
    }
    for (int k = 0; k < g->noutputs; k++) {
        const Value *v = &g->values[g->outputs[k]];
        buf_printf(out, "  out%d [shape=ellipse, fillcolor=\"#eeeeee\", label=\"output %d\"];\n", k, k);
        if (v->producer >= 0)
            buf_printf(out, "  n%d -> out%d;\n", v->producer, k);
    }
    buf_printf(out, "}\n");
}
