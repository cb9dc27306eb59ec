/* Contract: the cpu backend's context (runtime/backend.h) runs a cpu
 * Program (codegen/program.h): the fused steps in plan order, one compiled
 * host kernel per elementwise launch and node by node for the rest, or
 * without compiled kernels every node in order; a convolution through
 * oneDNN where prepare chose it (conv_choice.h). Memory: the plan's arena
 * (with the saved attention weights past it), kept from run to run, since a
 * training step's activations are hundreds of MiB and fresh pages fault in
 * again at every step; state in place in the caller's CtState, bound once
 * at prepare; inputs where the caller holds them; outputs in the caller's
 * tensors; a value the plan left out (nothing reads it, or a kernel stores
 * it over memory it reads elsewhere) in a block of its own, kept too. */
#include "runtime/cpu/compiled.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/conv_choice.h"
#include "runtime/cpu/cpu.h"

struct CtExec {
    const CtProgram *p;
    CtState *state;
    void **ptr;  /* per value: its memory; inputs and the outputs without a place are set by each run */
    char *place; /* per value: PLACE_* */
    unsigned char *arena;
    ConvChoices conv; /* which convolutions run through oneDNN */
    char *bn_act;     /* per step: it and the next two run as one (bn_act_grad_steps) */
};

enum { PLACE_NONE, PLACE_STATE, PLACE_ARENA, PLACE_OWN, PLACE_INPUT, PLACE_OUTPUT };

void cpu_exec_free(CtExec *e)
{
    if (!e)
        return;
    for (ValueId v = 0; e->place && v < e->p->g.nvalues; v++)
        if (e->place[v] == PLACE_OWN)
            free(e->ptr[v]);
    free(e->ptr);
    free(e->place);
    free(e->arena);
    free(e->bn_act);
    conv_choices_free(&e->conv);
    free(e);
}

const char *cpu_exec_note(const CtExec *e) { return e->conv.note[0] ? e->conv.note : NULL; }

/* Whether values a and b, as prepared, share no byte. A value without
 * memory yet is an input or output the caller binds at each run: a tensor
 * of its own. */
static int disjoint(const CtExec *e, ValueId a, ValueId b)
{
    const char *pa = e->ptr[a], *pb = e->ptr[b];
    return !pa || !pb || pa + program_value_bytes(e->p, a) <= pb || pb + program_value_bytes(e->p, b) <= pa;
}

/* Per step of the plan, whether it and the next two run as one: a
 * batch_norm recomputed, its act_grad and batch_norm_grad
 * (fuse_bn_act_grad_steps' first kind), here in f32, NCHW or channels-last
 * throughout, with no output of the batch_norm_grad over x or over dz (dx
 * may be dz exactly): cpu_batch_norm_act_grad then runs the three, and the
 * activation's input is never written out (nor, NCHW, its gradient). */
static char *bn_act_grad_steps(const CtExec *e)
{
    const Graph *g = &e->p->g;
    const FusePlan *fp = &e->p->cpu.p;
    int *bn_of = fuse_bn_act_grad_steps(g, fp, 1);
    char *fuse = calloc((size_t)fp->nsteps + 1, 1);
    CT_ASSERT(fuse != NULL);
    for (int s = 0; s + 2 < fp->nsteps; s++) {
        const FuseStep *st = &fp->steps[s];
        if (bn_of[s] != st->first)
            continue;
        const Node *bn = &g->nodes[st[0].first], *act = &g->nodes[st[1].first], *n = &g->nodes[st[2].first];
        int nhwc = cpu_stored_nhwc(g, n->in[0]);
        int ok = cpu_all_f32(g, bn) && cpu_all_f32(g, act) && cpu_all_f32(g, n) &&
                 cpu_stored_nhwc(g, act->in[1]) == nhwc && cpu_stored_nhwc(g, n->out[0]) == nhwc &&
                 (!nhwc || cpu_batch_norm_nhwc(g, n));
        for (int k = 0; k < n->nout && ok; k++)
            ok = disjoint(e, n->out[k], n->in[0]) &&
                 (disjoint(e, n->out[k], act->in[1]) || (k == 0 && e->ptr[n->out[0]] == e->ptr[act->in[1]]));
        fuse[s] = (char)ok;
    }
    free(bn_of);
    return fuse;
}

int cpu_exec_prepare(const CtProgram *p, CtState *state, CtExec **out, CtErr *err)
{
    const Graph *g = &p->g;
    const CpuProgram *c = &p->cpu;
    CtExec *e = calloc(1, sizeof *e);
    CT_ASSERT(e != NULL);
    e->p = p;
    e->state = state;
    e->ptr = calloc((size_t)g->nvalues + 1, sizeof *e->ptr);
    e->place = calloc((size_t)g->nvalues + 1, 1);
    CT_ASSERT(e->ptr && e->place);
    size_t arena_bytes = p->plan.arena_bytes + c->attn_bytes;
    if (!(e->arena = malloc(arena_bytes + 1))) {
        cpu_exec_free(e);
        return ct_fail(err, "out of memory: the step's activations need %.1f MiB (a smaller batch needs less)",
                       (double)arena_bytes / (1 << 20));
    }
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->role == CT_ROLE_INPUT) {
            e->place[v] = PLACE_INPUT;
        } else if (p->state_name[v]) {
            int s = state ? state_find(state, p->state_name[v]) : -1;
            if (s < 0 || !shape_equal(&state->e[s].type.shape, &val->type.shape) ||
                state->e[s].type.dtype != val->type.dtype) {
                ct_fail(err, "state has no tensor '%s' of the graph's shape and dtype", p->state_name[v]);
                cpu_exec_free(e);
                return -1;
            }
            e->ptr[v] = state_data(state, s);
            e->place[v] = PLACE_STATE;
        } else if (p->plan.offset[v] != PLAN_NONE && !(c->fused && c->own[v])) {
            e->ptr[v] = e->arena + p->plan.offset[v];
            e->place[v] = PLACE_ARENA;
        }
    }
    for (int k = 0; k < g->noutputs; k++) {
        ValueId v = g->outputs[k];
        if (e->place[v] == PLACE_NONE && g->values[v].producer >= 0)
            e->place[v] = PLACE_OUTPUT;
    }
    for (ValueId v = 0; v < g->nvalues; v++)
        if (e->place[v] == PLACE_NONE) {
            size_t bytes = program_value_bytes(p, v);
            if (!(e->ptr[v] = malloc(bytes + 1))) {
                cpu_exec_free(e);
                return ct_fail(err, "out of memory: %.1f MiB for a value of the step", (double)bytes / (1 << 20));
            }
            e->place[v] = PLACE_OWN;
        }
    if (conv_choices_make(g, c->fused ? &c->p : NULL, e->ptr, &e->conv, err)) {
        cpu_exec_free(e);
        return -1;
    }
    if (c->fused)
        e->bn_act = bn_act_grad_steps(e);
    *out = e;
    return 0;
}

/* Whether step st is a linear and the activation of its output (fuse's
 * epilogue) in f32: one kernel then runs both, a block of rows at a time.
 * Not where the plan put the activation over the linear's input, which the
 * node-by-node order allows but the blocks would overwrite before they read it. */
static int linear_act(const CtExec *e, const FuseStep *st)
{
    const Graph *g = &e->p->g;
    const Node *n = &g->nodes[st->first], *a = n + 1;
    if (st->kind != FUSE_LIBRARY || st->n != 2 || n->op != CT_OP_linear || op_def(a->op)->fusion != OP_ACTIVATION ||
        a->in[0] != n->out[0] || !cpu_all_f32(g, n) || !cpu_all_f32(g, a))
        return 0;
    return disjoint(e, n->in[0], a->out[0]);
}

/* Whether step st is a convolution on the stem kernel (the own kernels'
 * choice, cpu_conv2d_stem) and the activation of its output, in f32: the
 * kernel then applies it band by band, as linear_act's. Not where the
 * activation's output overlaps the convolution's input, which later bands
 * still read. */
static int conv_act(const CtExec *e, const FuseStep *st)
{
    const Graph *g = &e->p->g;
    const Node *n = &g->nodes[st->first], *a = n + 1;
    if (st->kind != FUSE_LIBRARY || st->n != 2 || n->op != CT_OP_conv2d || op_def(a->op)->fusion != OP_ACTIVATION ||
        a->in[0] != n->out[0] || !cpu_all_f32(g, n) || !cpu_all_f32(g, a) || (e->conv.dn && e->conv.dn[st->first]) ||
        !cpu_conv2d_stem(g, n) || cpu_stored_nhwc(g, a->out[0]))
        return 0;
    return disjoint(e, n->in[0], a->out[0]);
}

/* Whether step st is a batch_norm and its epilogue (a residual add and/or
 * an activation, fuse.h), in f32, nothing outside the step reading a value
 * between them: one pass then runs them all (cpu_batch_norm_epilogue). Not
 * where the plan put the step's output over the normalised x's input,
 * which the node-by-node order allows (x read whole before) but one pass
 * would overwrite channels it has yet to read. Every value in one stored
 * layout. */
/* The nodes of step st before the assigns it took (batch_norm's running
 * statistics written into the state). */
static int step_body(const Graph *g, const FuseStep *st)
{
    int n = st->n;
    while (n > 0 && g->nodes[st->first + n - 1].op == CT_OP_assign)
        n--;
    return n;
}

static int bn_epilogue(const CtExec *e, const FuseStep *st)
{
    const Graph *g = &e->p->g;
    const FusePlan *fp = &e->p->cpu.p;
    const Node *n = &g->nodes[st->first];
    int body = step_body(g, st);
    if (st->kind != FUSE_LIBRARY || body < 2 || n->op != CT_OP_batch_norm ||
        !(st->epilogue & (FUSE_EPI_RESIDUAL | FUSE_EPI_ACT)))
        return 0;
    int nhwc = cpu_stored_nhwc(g, n->in[0]);
    if (nhwc && !cpu_batch_norm_nhwc(g, n))
        return 0;
    for (int j = 0; j < body; j++) {
        if (!cpu_all_f32(g, &n[j]) || (j < body - 1 && fp->materialised[n[j].out[0]]))
            return 0;
        for (int k = 0; k < n[j].nin && j; k++)
            if (cpu_stored_nhwc(g, n[j].in[k]) != nhwc)
                return 0;
    }
    return disjoint(e, n->in[0], n[body - 1].out[0]);
}

/* The residual of bn_epilogue's step st (NULL: none) and its activation. */
static void bn_epilogue_parts(const CtExec *e, const FuseStep *st, const float **residual, const Node **act)
{
    const Graph *g = &e->p->g;
    const Node *n = &g->nodes[st->first];
    *residual = NULL;
    *act = NULL;
    for (int j = 1; j < step_body(g, st); j++) {
        if (n[j].op == CT_OP_add)
            *residual = e->ptr[n[j].in[n[j].in[0] == n[j - 1].out[0] ? 1 : 0]];
        else
            *act = &n[j];
    }
}

static void run_steps(const CtExec *e)
{
    const CtProgram *p = e->p;
    const CpuProgram *c = &p->cpu;
    void *const *ptr = e->ptr;
    for (int s = 0, last_launch = -1; s < c->p.nsteps; s++) {
        const FuseStep *st = &c->p.steps[s];
        const KirKernel *k = st->launch >= 0 ? &c->k[st->launch] : NULL;
        if (e->bn_act[s]) {
            const Node *bn = &p->g.nodes[st->first], *act = &p->g.nodes[st[1].first], *n = &p->g.nodes[st[2].first];
            float *in[5], *out[3];
            for (int i = 0; i < 5; i++)
                in[i] = ptr[n->in[i]];
            in[4] = ptr[act->in[1]];
            for (int o = 0; o < 3; o++)
                out[o] = ptr[n->out[o]];
            cpu_batch_norm_act_grad(&p->g, bn, act, n, ptr[bn->in[2]], in, ptr[act->out[0]], out);
            s += 2;
            continue;
        }
        if (k && k->nloops) {
            if (st->launch != last_launch) { /* a multi-tensor launch runs once for all its steps */
                void *args[k->nbufs + 1];
                for (int b = 0; b < k->nbufs; b++)
                    args[b] = ptr[k->bufs[b].value];
                c->fn[st->launch](args);
            }
            last_launch = st->launch;
            continue;
        }
        if (linear_act(e, st)) {
            const Node *n = &p->g.nodes[st->first];
            float *in[CT_MAX_IN];
            for (int i = 0; i < n->nin; i++)
                in[i] = ptr[n->in[i]];
            cpu_linear_act(&p->g, n, n + 1, in, ptr[n->out[0]], ptr[n[1].out[0]]);
            continue;
        }
        if (conv_act(e, st)) {
            const Node *n = &p->g.nodes[st->first];
            float *in[CT_MAX_IN];
            for (int i = 0; i < n->nin; i++)
                in[i] = ptr[n->in[i]];
            /* a convolution output nothing after the step reads is not written: the activation's output
             * takes it, and the activation runs there in place */
            float *y = ptr[n[1].out[0]];
            cpu_conv2d_act(&p->g, n, n + 1, in, c->p.materialised[n->out[0]] ? ptr[n->out[0]] : y, y);
            continue;
        }
        if (bn_epilogue(e, st)) {
            const Node *n = &p->g.nodes[st->first];
            const float *residual;
            const Node *act;
            float *in[CT_MAX_IN], *out[CT_MAX_OUT];
            for (int i = 0; i < n->nin; i++)
                in[i] = ptr[n->in[i]];
            for (int o = 0; o < n->nout; o++)
                out[o] = ptr[n->out[o]];
            bn_epilogue_parts(e, st, &residual, &act);
            int body = step_body(&p->g, st);
            cpu_batch_norm_epilogue(&p->g, n, in, out, p->opt.collective, residual, act, ptr[n[body - 1].out[0]]);
            for (int j = body; j < st->n; j++)
                cpu_run_node(&p->g, &n[j], (void *const[]){ptr[n[j].in[0]], ptr[n[j].in[1]]}, NULL,
                             p->opt.collective);
            continue;
        }
        if (st->kind == FUSE_LIBRARY && conv_choices_run_step(&e->conv, &p->g, st->first, st->n, ptr))
            continue;
        for (int j = 0; j < st->n; j++) {
            const Node *n = &p->g.nodes[st->first + j];
            size_t saved = c->attn[st->first + j];
            void *in[CT_MAX_IN], *out[CT_MAX_OUT];
            for (int i = 0; i < n->nin; i++)
                in[i] = ptr[n->in[i]];
            for (int o = 0; o < n->nout; o++)
                out[o] = ptr[n->out[o]];
            if (conv_choices_run(&e->conv, st->first + j, (float *const *)in, (float *const *)out))
                continue;
            if (saved == (size_t)-1)
                cpu_run_node(&p->g, n, in, out, p->opt.collective);
            else if (n->op == CT_OP_sdpa)
                cpu_sdpa_saving(&p->g, n, (float *const *)in, (float *const *)out,
                                (float *)(e->arena + p->plan.arena_bytes + saved));
            else
                cpu_sdpa_grad_saved(&p->g, n, (float *const *)in, (float *const *)out,
                                    (const float *)(e->arena + p->plan.arena_bytes + saved));
        }
    }
}

static void run_nodes(const CtExec *e)
{
    const Graph *g = &e->p->g;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        void *in[CT_MAX_IN], *out[CT_MAX_OUT];
        for (int k = 0; k < n->nin; k++)
            in[k] = e->ptr[n->in[k]];
        for (int k = 0; k < n->nout; k++)
            out[k] = e->ptr[n->out[k]];
        if (!conv_choices_run(&e->conv, i, (float *const *)in, (float *const *)out))
            cpu_run_node(g, n, in, out, e->p->opt.collective);
    }
}

int cpu_exec_run(CtExec *e, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    const Graph *g = &e->p->g;
    int in_k = 0;
    for (ValueId v = 0; v < g->nvalues; v++)
        if (e->place[v] == PLACE_INPUT) {
            const Value *val = &g->values[v];
            if (in_k >= ninputs || !shape_equal(&inputs[in_k].type.shape, &val->type.shape) ||
                inputs[in_k].type.dtype != val->type.dtype)
                return ct_fail(err, "input %d is missing or has the wrong shape or dtype", in_k);
            e->ptr[v] = inputs[in_k++].data;
        }
    for (int k = 0; k < g->noutputs; k++) {
        ValueId v = g->outputs[k];
        tensor_alloc(&outputs[k], g->values[v].type);
        if (e->place[v] == PLACE_OUTPUT)
            e->ptr[v] = outputs[k].data;
    }
    if (e->p->cpu.fused)
        run_steps(e);
    else
        run_nodes(e);
    for (int k = 0; k < g->noutputs; k++) {
        ValueId v = g->outputs[k];
        if (e->ptr[v] != outputs[k].data)
            memcpy(outputs[k].data, e->ptr[v], program_value_bytes(e->p, v));
    }
    return 0;
}
