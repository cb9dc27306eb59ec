/* Contract: schedule_assigns_last(g), schedule_assigns(g) and
 * schedule_hoist(g) reorder nodes only; a verified graph stays verified,
 * with no value read after its assign. */
#include "passes/schedule.h"

#include <stdlib.h>

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
