/*
 * The reference backend: interprets the graph node by node with each op's
 * ref kernel. Every tensor is held as doubles and rounded to its value's
 * dtype after the node that writes it, so f32 graphs see f32 storage while
 * each kernel accumulates in double; the ops that reduce over the ranks
 * reduce over the collective of the program's options. Slow and obviously
 * correct: the oracle the other backends are checked against.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"

/* Every op in every dtype: f16/bf16 results are rounded to their format. */
static int ref_supports(const Graph *g, const Node *n) { return 1; }

static double *alloc_doubles(int64_t n)
{
    double *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    CT_ASSERT(p != NULL);
    return p;
}

struct CtExec {
    const CtProgram *p;
    CtState *state;
    int *slot; /* per value: its state tensor, or -1 */
};

/* The state tensor of every state value, found once by name. */
static int bind_state(const CtProgram *p, CtState *state, int *slot, CtErr *err)
{
    const Graph *g = &p->g;
    for (ValueId v = 0; v < g->nvalues; v++) {
        slot[v] = -1;
        if (!p->state_name[v])
            continue;
        int s = state ? state_find(state, p->state_name[v]) : -1;
        if (s < 0 || !shape_equal(&state->e[s].type.shape, &g->values[v].type.shape) ||
            state->e[s].type.dtype != g->values[v].type.dtype)
            return ct_fail(err, "state has no tensor '%s' of the graph's shape and dtype", p->state_name[v]);
        slot[v] = s;
    }
    return 0;
}

static int ref_prepare(const CtProgram *p, CtState *state, CtExec **out, CtErr *err)
{
    CtExec *e = calloc(1, sizeof *e);
    int *slot = malloc(sizeof *slot * (size_t)(p->g.nvalues + 1));
    CT_ASSERT(e && slot);
    *e = (CtExec){p, state, slot};
    if (bind_state(p, state, slot, err)) {
        free(slot);
        free(e);
        return -1;
    }
    *out = e;
    return 0;
}

static void ref_free(CtExec *e)
{
    free(e->slot);
    free(e);
}

static int ref_sync(CtExec *e, CtErr *err) { return 0; }

static int ref_run(CtExec *e, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    const Graph *g = &e->p->g;
    CtState *state = e->state;
    const int *slot = e->slot;
    int rc = -1, in_k = 0;
    double **buf = calloc((size_t)g->nvalues + 1, sizeof *buf);
    int *last_use = malloc((size_t)(g->nvalues + 1) * sizeof *last_use);
    CT_ASSERT(buf && last_use);
    for (int v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        int64_t n = shape_numel(&val->type.shape);
        last_use[v] = -1;
        if (val->role == CT_ROLE_INPUT) {
            if (in_k >= ninputs || !shape_equal(&inputs[in_k].type.shape, &val->type.shape) ||
                inputs[in_k].type.dtype != val->type.dtype) {
                ct_fail(err, "input %d is missing or has the wrong shape or dtype", in_k);
                goto free_buffers;
            }
            buf[v] = alloc_doubles(n);
            if (elems_to_double(inputs[in_k++].data, val->type.dtype, n, buf[v])) {
                ct_fail(err, "input %d: dtype %s unsupported by ref", in_k - 1, ct_dtype_name(val->type.dtype));
                goto free_buffers;
            }
        } else if (slot[v] >= 0) {
            buf[v] = alloc_doubles(n);
            elems_to_double(state_data(state, slot[v]), val->type.dtype, n, buf[v]);
        }
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            last_use[g->nodes[i].in[k]] = i;
    for (int k = 0; k < g->noutputs; k++)
        last_use[g->outputs[k]] = g->nnodes;

    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        double *in[CT_MAX_IN], *out[CT_MAX_OUT];
        for (int k = 0; k < n->nin; k++)
            in[k] = buf[n->in[k]];
        for (int k = 0; k < n->nout; k++)
            out[k] = buf[n->out[k]] = alloc_doubles(shape_numel(&g->values[n->out[k]].type.shape));
        op_run_ref(g, n, in, out, e->p->opt.collective);
        for (int k = 0; k < n->nout; k++) {
            const Value *o = &g->values[n->out[k]];
            elems_round(out[k], o->type.dtype, shape_numel(&o->type.shape));
        }
        /* Activations die after their last reader; state stays to be written back. */
        for (int k = 0; k < n->nin; k++) {
            ValueId v = n->in[k];
            if (last_use[v] == i && g->values[v].role == CT_ROLE_ACTIVATION) {
                free(buf[v]);
                buf[v] = NULL;
            }
        }
    }
    for (int v = 0; v < g->nvalues; v++)
        if (slot[v] >= 0)
            elems_from_double(buf[v], g->values[v].type.dtype, shape_numel(&g->values[v].type.shape),
                              state_data(state, slot[v]));
    for (int k = 0; k < g->noutputs; k++) {
        const Value *o = &g->values[g->outputs[k]];
        tensor_alloc(&outputs[k], o->type);
        elems_from_double(buf[g->outputs[k]], o->type.dtype, shape_numel(&o->type.shape), outputs[k].data);
    }
    rc = 0;
free_buffers:
    for (int v = 0; v < g->nvalues; v++)
        free(buf[v]);
    free(buf);
    free(last_use);
    return rc;
}

const CtBackend ct_backend_ref = {.name = "ref", .target = CT_TARGET_REF, .supports = ref_supports,
                                  .prepare = ref_prepare, .run = ref_run, .state_to_host = ref_sync,
                                  .state_from_host = ref_sync, .free = ref_free};
