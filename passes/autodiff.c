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
    ValueId *grad = malloc((size_t)nv0 * sizeof *grad);
    CT_ASSERT(depends && leads && grad);
    for (int v = 0; v < nv0; v++)
        grad[v] = -1;
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
    grad[loss] = seed >= 0 ? seed : emit(&e, CT_OP_scale_shift, 1, &loss, NULL, 0, (double[]){0, 1}, 2, 0);
    for (int i = n0 - 1; i >= 0 && !e.failed; i--) {
        Node n = g->nodes[i];
        const OpDef *def = op_def(n.op);
        ValueId dout[CT_MAX_OUT], din[CT_MAX_IN];
        int need[CT_MAX_IN], any_out = 0, any_in = 0;
        for (int k = 0; k < n.nout; k++) {
            dout[k] = leads[n.out[k]] && depends[n.out[k]] ? grad[n.out[k]] : -1;
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
        e.scope = n.scope;
        def->vjp(&e, &n, dout, need, din);
        for (int k = 0; k < n.nin; k++)
            if (need[k] && din[k] >= 0)
                grad[n.in[k]] = accumulate(&e, grad[n.in[k]], din[k]);
    }
    e.scope = "grad";
    for (int k = 0; k < nwrt; k++) {
        ValueId gv = grad[wrt[k]];
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
    free(grad);
    return rc;
}
