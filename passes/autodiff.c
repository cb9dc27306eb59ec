/* Contract: autodiff(g, loss, wrt) appends the backward of loss w.r.t. wrt to g and
 * leaves g verified. */
#include "passes/autodiff.h"

#include <stdlib.h>

#include "ir/emit.h"
#include "passes/schedule.h"

static ValueId accumulate(Emitter *e, ValueId have, ValueId add)
{
    if (have < 0)
        return add;
    return emit(e, CT_OP_add, 2, (ValueId[]){have, add}, NULL, 0, NULL, 0, 0);
}

/* The gradients of unit-step slices are held back until their input's
 * gradient is read: slices that together cover a dim once each (a split
 * of qkv into q, k and v) then give one concat of their dy, where
 * slice_grad and add would write each piece's zeros and sum them, and
 * otherwise the same slice_grad and add nodes in the same order (the same
 * bits) as if nothing were held. */
typedef struct Held {
    Node slice;
    ValueId dy;
    int next; /* the next held for the same value, or -1 */
} Held;

typedef struct Grads {
    ValueId *sum;      /* per value: its gradient so far, or -1 */
    int *first, *last; /* per value: its held slices' gradients in arrival order, or -1 */
    Held *held;
    int nheld, cap;
} Grads;

static void hold(Grads *G, ValueId v, const Node *slice, ValueId dy)
{
    if (G->nheld == G->cap) {
        G->cap = G->cap ? 2 * G->cap : 16;
        G->held = realloc(G->held, (size_t)G->cap * sizeof *G->held);
        CT_ASSERT(G->held);
    }
    G->held[G->nheld] = (Held){*slice, dy, -1};
    if (G->first[v] < 0)
        G->first[v] = G->nheld;
    else
        G->held[G->last[v]].next = G->nheld;
    G->last[v] = G->nheld++;
}

/* v's held slices' gradients added to its sum, in the order they came. */
static void release(Emitter *e, Grads *G, ValueId v)
{
    for (int h = G->first[v]; h >= 0; h = G->held[h].next) {
        Held *x = &G->held[h];
        ValueId din = -1;
        e->scope = x->slice.scope;
        op_def(CT_OP_slice)->vjp(e, &x->slice, &x->dy, (int[]){1}, &din);
        G->sum[v] = accumulate(e, G->sum[v], din);
    }
    G->first[v] = G->last[v] = -1;
}

static void give(Emitter *e, Grads *G, ValueId v, ValueId din)
{
    release(e, G, v);
    G->sum[v] = accumulate(e, G->sum[v], din);
}

/* v's whole gradient: one concat where its held slices alone tile a dim. */
static ValueId take(Emitter *e, Grads *G, ValueId v)
{
    const Held *by_start[CT_MAX_IN];
    int n = 0, tiles = G->sum[v] < 0 && G->first[v] >= 0;
    for (int h = G->first[v]; tiles && h >= 0; h = G->held[h].next) {
        const Held *x = &G->held[h];
        tiles = n < CT_MAX_IN && x->slice.iattr[0] == G->held[G->first[v]].slice.iattr[0];
        int at = n++;
        for (; tiles && at > 0 && by_start[at - 1]->slice.iattr[1] > x->slice.iattr[1]; at--)
            by_start[at] = by_start[at - 1];
        if (tiles)
            by_start[at] = x;
    }
    if (tiles) {
        const Value *val = &e->g->values[v];
        int64_t dim = by_start[0]->slice.iattr[0], next = 0;
        for (int i = 0; i < n; i++) {
            tiles &= by_start[i]->slice.iattr[1] == next;
            next = by_start[i]->slice.iattr[2];
        }
        if (tiles && next == val->type.shape.d[dim]) {
            ValueId dy[CT_MAX_IN];
            for (int i = 0; i < n; i++)
                dy[i] = by_start[i]->dy;
            e->scope = G->held[G->first[v]].slice.scope;
            G->sum[v] = n == 1 ? dy[0] : emit(e, CT_OP_concat, n, dy, &dim, 1, NULL, 0, 0);
            G->first[v] = G->last[v] = -1;
        }
    }
    release(e, G, v);
    return G->sum[v];
}

int autodiff(Graph *g, ValueId loss, ValueId seed, const ValueId *wrt, int nwrt, ValueId *grads, CtErr *err)
{
    if (nwrt <= 0)
        return ct_fail(err, "autodiff: nothing to differentiate (no parameters)");
    if (seed >= 0 && (seed >= g->nvalues || g->values[seed].type.shape.ndim != 0 ||
                      g->values[seed].type.dtype != g->values[loss < 0 || loss >= g->nvalues ? seed : loss].type.dtype))
        return ct_fail(err, "autodiff: the gradient seed must be a scalar of the loss's dtype");
    if (loss < 0 || loss >= g->nvalues || g->values[loss].type.shape.ndim != 0 ||
        !ct_dtype_is_float(g->values[loss].type.dtype))
        return ct_fail(err, "autodiff: the loss must be a float scalar");
    int n0 = g->nnodes, nv0 = g->nvalues, rc = -1;
    char *depends = calloc((size_t)nv0, 1), *leads = calloc((size_t)nv0, 1);
    Grads G = {.sum = malloc((size_t)nv0 * sizeof *G.sum), .first = malloc((size_t)nv0 * sizeof *G.first),
               .last = malloc((size_t)nv0 * sizeof *G.last)};
    CT_ASSERT(depends && leads && G.sum && G.first && G.last);
    for (int v = 0; v < nv0; v++)
        G.sum[v] = G.first[v] = G.last[v] = -1;
    for (int k = 0; k < nwrt; k++)
        depends[wrt[k]] = 1;
    for (int i = 0; i < n0; i++) {
        const Node *n = &g->nodes[i];
        const OpDef *def = op_def(n->op);
        int any = 0;
        for (int k = 0; k < n->nin; k++)
            any |= depends[n->in[k]] && !(def->nondiff >> k & 1);
        for (int k = 0; k < n->nout; k++)
            depends[n->out[k]] = (char)any;
    }
    leads[loss] = 1;
    for (int i = n0 - 1; i >= 0; i--) {
        const Node *n = &g->nodes[i];
        int any = 0;
        for (int k = 0; k < n->nout; k++)
            any |= leads[n->out[k]];
        for (int k = 0; any && k < n->nin; k++)
            leads[n->in[k]] = 1;
    }

    Emitter e = {.g = g, .scope = "loss"};
    G.sum[loss] = seed >= 0 ? seed : emit(&e, CT_OP_scale_shift, 1, &loss, NULL, 0, (double[]){0, 1}, 2, 0);
    for (int i = n0 - 1; i >= 0 && !e.failed; i--) {
        Node n = g->nodes[i];
        const OpDef *def = op_def(n.op);
        ValueId dout[CT_MAX_OUT], din[CT_MAX_IN];
        int need[CT_MAX_IN], any_out = 0, any_in = 0;
        for (int k = 0; k < n.nout; k++) {
            dout[k] = leads[n.out[k]] && depends[n.out[k]] ? take(&e, &G, n.out[k]) : -1;
            any_out |= dout[k] >= 0;
        }
        for (int k = 0; k < n.nin; k++) {
            need[k] = depends[n.in[k]] && leads[n.in[k]] && !(def->nondiff >> k & 1);
            any_in |= need[k];
            din[k] = -1;
        }
        if (!any_out || !any_in)
            continue;
        if (!def->vjp) {
            emit_fail(&e, "autodiff: op %s (node %d at '%s') has no VJP rule", def->name, i, n.scope);
            break;
        }
        if (n.op == CT_OP_slice && n.iattr[3] == 1) {
            hold(&G, n.in[0], &n, dout[0]);
            continue;
        }
        e.scope = n.scope;
        def->vjp(&e, &n, dout, need, din);
        for (int k = 0; k < n.nin; k++)
            if (need[k] && din[k] >= 0)
                give(&e, &G, n.in[k], din[k]);
    }
    for (int k = 0; k < nwrt; k++) {
        ValueId gv = take(&e, &G, wrt[k]);
        e.scope = "grad";
        /* A parameter the loss does not reach gets a zero gradient, as torch's
         * optimizers see no update from it (weight decay aside). */
        if (gv < 0)
            gv = emit(&e, CT_OP_scale_shift, 1, &wrt[k], NULL, 0, (double[]){0, 0}, 2, 0);
        grads[k] = gv;
        if (gv >= 0 && g->values[gv].producer >= 0)
            g->values[gv].role = CT_ROLE_GRAD;
    }
    if (e.failed) {
        *err = e.err;
        goto free_marks;
    }
    schedule_assigns_last(g);
    rc = graph_verify(g, err);
free_marks:
    free(depends);
    free(leads);
    free(G.sum);
    free(G.first);
    free(G.last);
    free(G.held);
    return rc;
}
