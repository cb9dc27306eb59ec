/* Contract: schedule_assigns_last(g), schedule_assigns(g),
 * schedule_hoist(g) and schedule_bn_reruns(g) reorder nodes only; a
 * verified graph stays verified, with no value read after its assign. */
#include "passes/schedule.h"

#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* Node j joins the end of list `at` (head, tail, next: lists of nodes). */
static void append(int *head, int *tail, int *next, int at, int j)
{
    next[j] = -1;
    if (tail[at] < 0)
        head[at] = j;
    else
        next[tail[at]] = j;
    tail[at] = j;
}

/* g's nodes become order's (a permutation of them), producers renumbered. */
static void apply_order(Graph *g, const Node *order)
{
    for (int i = 0; i < g->nnodes; i++) {
        g->nodes[i] = order[i];
        for (int o = 0; o < order[i].nout; o++)
            g->values[order[i].out[o]].producer = i;
    }
}

void schedule_assigns_last(Graph *g)
{
    Node *order = malloc(sizeof *order * (size_t)(g->nnodes ? g->nnodes : 1));
    CT_ASSERT(order != NULL);
    int k = 0;
    for (int last = 0; last < 2; last++)
        for (int i = 0; i < g->nnodes; i++)
            if ((g->nodes[i].op == CT_OP_assign) == last)
                order[k++] = g->nodes[i];
    apply_order(g, order);
    free(order);
}

void schedule_assigns(Graph *g)
{
    int n = g->nnodes;
    int *last_read = malloc(sizeof *last_read * (size_t)(g->nvalues + 1));
    int *anchor = malloc(sizeof *anchor * (size_t)(n + 1));
    Node *order = malloc(sizeof *order * (size_t)(n + 1));
    CT_ASSERT(last_read && anchor && order);
    for (ValueId v = 0; v < g->nvalues; v++)
        last_read[v] = -1;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin && g->nodes[i].op != CT_OP_assign; k++)
            last_read[g->nodes[i].in[k]] = i;
    /* An assign also follows every assign that reads what it overwrites (as
     * its source: EMA's copy of a buffer), which came before it. */
    for (int i = 0; i < n; i++) {
        const Node *a = &g->nodes[i];
        if (a->op != CT_OP_assign)
            continue;
        int at = last_read[a->in[0]], p = g->values[a->in[1]].producer;
        anchor[i] = p > at ? p : at;
        if (anchor[i] > last_read[a->in[1]])
            last_read[a->in[1]] = anchor[i];
    }
    /* the assigns after node i in their order: a list per anchor (-1: first) */
    int *head = malloc(sizeof *head * (size_t)(n + 1)), *tail = malloc(sizeof *tail * (size_t)(n + 1));
    int *next = malloc(sizeof *next * (size_t)(n + 1));
    CT_ASSERT(head && tail && next);
    for (int i = 0; i <= n; i++)
        head[i] = tail[i] = -1;
    for (int j = 0; j < n; j++) {
        if (g->nodes[j].op != CT_OP_assign)
            continue;
        append(head, tail, next, anchor[j] + 1, j);
    }
    int k = 0;
    for (int i = -1; i < n; i++) {
        if (i >= 0 && g->nodes[i].op == CT_OP_assign)
            continue;
        if (i >= 0)
            order[k++] = g->nodes[i];
        for (int j = head[i + 1]; j >= 0; j = next[j])
            order[k++] = g->nodes[j];
    }
    CT_ASSERT(k == n);
    free(head);
    free(tail);
    free(next);
    apply_order(g, order);
    free(last_read);
    free(anchor);
    free(order);
}

void schedule_hoist(Graph *g, int from, int floor)
{
    int n = g->nnodes;
    int *anchor = malloc(sizeof *anchor * (size_t)(n + 1)); /* per node: the node it follows, -1 itself */
    int *head = malloc(sizeof *head * (size_t)(n + 1)), *tail = malloc(sizeof *tail * (size_t)(n + 1));
    int *next = malloc(sizeof *next * (size_t)(n + 1));
    Node *order = malloc(sizeof *order * (size_t)(n + 1));
    CT_ASSERT(anchor && head && tail && next && order);
    for (int i = 0; i < n; i++) {
        head[i] = tail[i] = next[i] = -1;
        anchor[i] = -1;
        const Node *nd = &g->nodes[i];
        if (i < from || nd->op == CT_OP_assign)
            continue;
        int at = floor;
        for (int k = 0; k < nd->nin; k++) {
            int p = g->values[nd->in[k]].producer;
            int a = p >= 0 && anchor[p] >= 0 ? anchor[p] : p;
            if (a > at)
                at = a;
        }
        if (at >= i)
            continue;
        anchor[i] = at;
        append(head, tail, next, at, i);
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (anchor[i] >= 0)
            continue;
        order[k++] = g->nodes[i];
        for (int j = head[i]; j >= 0; j = next[j])
            order[k++] = g->nodes[j];
    }
    CT_ASSERT(k == n);
    apply_order(g, order);
    free(anchor);
    free(head);
    free(tail);
    free(next);
    free(order);
    schedule_assigns(g);
}

/* Whether node n reads an output of a node marked in `moved`. */
static int reads_moved(const Graph *g, const Node *n, const char *moved)
{
    for (int k = 0; k < n->nin; k++) {
        int p = g->values[n->in[k]].producer;
        if (p >= 0 && moved[p])
            return 1;
    }
    return 0;
}

/* The rerun batch norm at node i and its relu, moved to right before the
 * act_grad of that relu that feeds its batch_norm_grad, and the nodes
 * between that read the relu's output (and theirs), after the gradient:
 * 1 when g was reordered so, 0 when the nodes do not fit or are in place. */
static int bn_rerun_by_grad(Graph *g, int i, Node *order, char *moved)
{
    const Node *bn = &g->nodes[i];
    ValueId z = bn->out[0];
    int r = -1, j = -1;
    for (int k = i + 1; k < g->nnodes && r < 0; k++)
        if (g->nodes[k].op == CT_OP_relu && g->nodes[k].in[0] == z)
            r = k;
    if (r < 0 || graph_reads(g, z) != 1 || graph_reads(g, bn->out[1]) || graph_reads(g, bn->out[2]))
        return 0;
    ValueId a = g->nodes[r].out[0];
    for (int k = r + 1; k < g->nnodes && j < 0; k++)
        if (g->nodes[k].op == CT_OP_act_grad && g->nodes[k].iattr[0] == CT_OP_relu && g->nodes[k].in[0] == a)
            j = k;
    if (j < 0 || j + 1 >= g->nnodes)
        return 0;
    const Node *ag = &g->nodes[j], *gr = &g->nodes[j + 1];
    if (gr->op != CT_OP_batch_norm_grad || !gr->iattr[0] || gr->iattr[1] || gr->in[0] != bn->in[0] ||
        gr->in[1] != bn->in[1] || gr->in[4] != ag->out[0] || graph_reads(g, ag->out[0]) != 1)
        return 0;
    memset(moved, 0, (size_t)g->nnodes);
    int nmoved = 0;
    for (int k = r + 1; k < j; k++) {
        const Node *w = &g->nodes[k];
        int reads_a = 0;
        for (int q = 0; q < w->nin; q++)
            reads_a |= w->in[q] == a;
        if (reads_a || reads_moved(g, w, moved)) {
            if (w->op == CT_OP_assign)
                return 0;
            moved[k] = 1;
            nmoved++;
        }
    }
    if ((!nmoved && i + 1 == r && r + 1 == j) || reads_moved(g, ag, moved) || reads_moved(g, gr, moved))
        return 0;
    int n = 0;
    for (int k = 0; k < j; k++)
        if (k != i && k != r && !moved[k])
            order[n++] = g->nodes[k];
    order[n++] = g->nodes[i];
    order[n++] = g->nodes[r];
    order[n++] = g->nodes[j];
    order[n++] = g->nodes[j + 1];
    for (int k = r + 1; k < j; k++)
        if (moved[k])
            order[n++] = g->nodes[k];
    for (int k = j + 2; k < g->nnodes; k++)
        order[n++] = g->nodes[k];
    CT_ASSERT(n == g->nnodes);
    apply_order(g, order);
    return 1;
}

void schedule_bn_reruns(Graph *g)
{
    Node *order = malloc(sizeof *order * (size_t)(g->nnodes + 1));
    char *moved = malloc((size_t)g->nnodes + 1);
    CT_ASSERT(order && moved);
    for (int i = 0; i < g->nnodes; i++)
        if (remat_bn_forward(g, &g->nodes[i]) >= 0 && bn_rerun_by_grad(g, i, order, moved))
            i--; /* another node is at i now */
    free(order);
    free(moved);
}
