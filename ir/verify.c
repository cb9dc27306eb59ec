/* The verifier: every pass ends with it. It re-derives what the builder
 * promised (SSA, topological order, shapes and dtypes by each op's rule) and
 * names the first node that breaks it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static int fail_node(const Graph *g, int i, CtErr *err, const char *what)
{
    const Node *n = &g->nodes[i];
    return ct_fail(err, "node %d (%s at '%s'): %s", i, op_def(n->op)->name, n->scope, what);
}

static int verify_node(const Graph *g, int i, CtErr *err)
{
    const Node *n = &g->nodes[i];
    char msg[400];
    if ((int)n->op < 0 || n->op >= CT_NOPS)
        return ct_fail(err, "node %d: unknown op kind %d", i, (int)n->op);
    const OpDef *def = op_def(n->op);
    if (n->nin < def->min_in || n->nin > def->max_in)
        return fail_node(g, i, err, "wrong number of inputs");
    for (int k = 0; k < n->nin; k++) {
        ValueId v = n->in[k];
        if (v < 0 || v >= g->nvalues)
            return fail_node(g, i, err, "input refers to a value that does not exist");
        const Value *val = &g->values[v];
        if (val->role == CT_ROLE_ACTIVATION || val->role == CT_ROLE_GRAD) {
            if (val->producer < 0)
                return fail_node(g, i, err, "input is an activation that no node writes (dangling)");
            if (val->producer >= i) {
                snprintf(msg, sizeof msg, "input %%%d is written later, by node %d (order)", v, val->producer);
                return fail_node(g, i, err, msg);
            }
        }
    }
    CtType want[CT_MAX_OUT];
    CtErr inner;
    int nout = def->infer(g, n, want, &inner);
    if (nout < 0)
        return fail_node(g, i, err, inner.msg);
    if (nout != n->nout)
        return fail_node(g, i, err, "number of outputs differs from the op's rule");
    for (int k = 0; k < nout; k++) {
        ValueId v = n->out[k];
        if (v < 0 || v >= g->nvalues)
            return fail_node(g, i, err, "output refers to a value that does not exist");
        const Value *val = &g->values[v];
        if (val->producer != i) {
            snprintf(msg, sizeof msg, "output %%%d is also written elsewhere (SSA)", v);
            return fail_node(g, i, err, msg);
        }
        if (!shape_equal(&val->type.shape, &want[k].shape) || val->type.dtype != want[k].dtype) {
            char a[96], b[96];
            snprintf(msg, sizeof msg, "output %%%d is %s %s but the op's rule gives %s %s", v,
                     shape_str(&val->type.shape, a, sizeof a), ct_dtype_name(val->type.dtype),
                     shape_str(&want[k].shape, b, sizeof b), ct_dtype_name(want[k].dtype));
            return fail_node(g, i, err, msg);
        }
    }
    return 0;
}

/* assign writes its destination in place, so nothing may read a value after
 * the node that assigns it, and each value is assigned at most once. */
static int verify_assign_order(const Graph *g, CtErr *err)
{
    int *assigned_by = malloc(sizeof *assigned_by * (size_t)(g->nvalues ? g->nvalues : 1)), rc = 0;
    CT_ASSERT(assigned_by != NULL);
    for (int v = 0; v < g->nvalues; v++)
        assigned_by[v] = -1;
    for (int i = 0; i < g->nnodes && rc == 0; i++) {
        const Node *n = &g->nodes[i];
        for (int k = n->op == CT_OP_assign; k < n->nin && rc == 0; k++)
            if (assigned_by[n->in[k]] >= 0)
                rc = fail_node(g, i, err, "reads a value after an assign wrote it; assigns must come after every reader");
        if (n->op == CT_OP_assign && rc == 0) {
            if (assigned_by[n->in[0]] >= 0)
                rc = fail_node(g, i, err, "assigns a value that an earlier node already assigned");
            assigned_by[n->in[0]] = i;
        }
    }
    free(assigned_by);
    return rc;
}

/* Every param and buffer appears once in the state_dict list, nothing else. */
static int verify_state_list(const Graph *g, CtErr *err)
{
    int listed = 0;
    for (int k = 0; k < g->nstate; k++) {
        ValueId v = g->state[k];
        if (v < 0 || v >= g->nvalues)
            return ct_fail(err, "state entry %d refers to a value that does not exist", k);
        const Value *val = &g->values[v];
        if (!role_is_state(val->role))
            return ct_fail(err, "state entry %d (%%%d) is a %s, not a param, buffer, optimizer state or const", k, v,
                           ct_role_name(val->role));
        if (!val->name)
            return ct_fail(err, "state entry %d (%%%d) has no state_dict name", k, v);
        for (int j = 0; j < k; j++)
            if (g->state[j] == v || strcmp(g->values[g->state[j]].name, val->name) == 0)
                return ct_fail(err, "'%s' appears twice in the state_dict", val->name);
        listed++;
    }
    for (int v = 0; v < g->nvalues; v++)
        listed -= role_is_state(g->values[v].role);
    if (listed)
        return ct_fail(err, "the state list misses %d params, buffers, optimizer state or consts", -listed);
    return 0;
}

int graph_verify(const Graph *g, CtErr *err)
{
    if (verify_state_list(g, err))
        return -1;
    for (int i = 0; i < g->nnodes; i++)
        if (verify_node(g, i, err))
            return -1;
    if (verify_assign_order(g, err))
        return -1;
    for (int v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        int produced = val->role == CT_ROLE_ACTIVATION || val->role == CT_ROLE_GRAD;
        if (produced && val->producer < 0)
            return ct_fail(err, "value %%%d: an activation that no node writes (dangling)", v);
        if (!produced && val->producer >= 0)
            return ct_fail(err, "value %%%d (%s '%s'): written by node %d, but only assign may change it", v,
                           ct_role_name(val->role), val->name ? val->name : "", val->producer);
        if (val->producer >= g->nnodes)
            return ct_fail(err, "value %%%d: producer %d does not exist", v, val->producer);
        if (val->producer >= 0) {
            const Node *p = &g->nodes[val->producer];
            int found = 0;
            for (int k = 0; k < p->nout; k++)
                found |= p->out[k] == v;
            if (!found)
                return ct_fail(err, "value %%%d: node %d is named as its producer but does not write it", v,
                               val->producer);
        }
        if (role_is_state(val->role) && !val->name)
            return ct_fail(err, "value %%%d: a %s needs a state_dict name", v, ct_role_name(val->role));
    }
    for (int k = 0; k < g->noutputs; k++)
        if (g->outputs[k] < 0 || g->outputs[k] >= g->nvalues)
            return ct_fail(err, "graph output %d refers to a value that does not exist", k);
    return 0;
}
