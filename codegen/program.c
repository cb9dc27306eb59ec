/* Contract: program_compile(g, target) makes the Program a backend runs
 * (codegen/program.h): the passes that plan the step (fuse, plan) and the
 * codegen that compiles its kernels (host C by cc, CUDA C by NVRTC), run
 * here once, not per step.
 *
 * cpu: an sdpa whose gradient is in the same graph saves its attention
 * weights softmax(q k^T) (in the arena past the plan's values) and its
 * sdpa_grad reads them back, as torch saves them: one GEMM and an exp a
 * score fewer (the IR's rule is to recompute them from the scores and the
 * rows' statistics sdpa keeps, which the GPU's kernels follow: memory is
 * what a GPU runs out of). Up to
 * ATTN_SAVE_BYTES a graph, then recomputed; a pair that begins after
 * another ended (recomputed blocks: --grad-checkpointing) takes its space. */
#include "codegen/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/units.h"
#include "ir/buf.h"
#include "ir/ops/attention_geom.h"

#define ATTN_SAVE_BYTES ((size_t)1 << 30)

size_t program_value_bytes(const CtProgram *p, ValueId v)
{
    return value_bytes(&p->g.values[v]);
}

/* g with its own copies of every array and string. */
static void copy_graph(const Graph *g, Graph *out)
{
    graph_init(out);
    out->nvalues = out->cap_values = g->nvalues;
    out->nnodes = out->cap_nodes = g->nnodes;
    out->noutputs = out->cap_outputs = g->noutputs;
    out->nstate = g->nstate;
    out->values = malloc(sizeof *out->values * (size_t)(g->nvalues + 1));
    out->nodes = malloc(sizeof *out->nodes * (size_t)(g->nnodes + 1));
    out->outputs = malloc(sizeof *out->outputs * (size_t)(g->noutputs + 1));
    out->state = malloc(sizeof *out->state * (size_t)(g->nstate + 1));
    CT_ASSERT(out->values && out->nodes && out->outputs && out->state);
    if (g->nvalues) /* a graph of no nodes or no state has NULL arrays, which memcpy may not read */
        memcpy(out->values, g->values, sizeof *g->values * (size_t)g->nvalues);
    if (g->nnodes)
        memcpy(out->nodes, g->nodes, sizeof *g->nodes * (size_t)g->nnodes);
    if (g->noutputs)
        memcpy(out->outputs, g->outputs, sizeof *g->outputs * (size_t)g->noutputs);
    if (g->nstate)
        memcpy(out->state, g->state, sizeof *g->state * (size_t)g->nstate);
    for (ValueId v = 0; v < g->nvalues; v++) {
        if (g->values[v].name)
            out->values[v].name = arena_strdup(&out->arena, g->values[v].name);
        out->values[v].init = init_in_arena(&out->arena, g->values[v].init, shape_numel(&g->values[v].type.shape));
    }
    for (int i = 0; i < g->nnodes; i++)
        out->nodes[i].scope = arena_strdup(&out->arena, g->nodes[i].scope ? g->nodes[i].scope : "");
}

/* Whether b is the sdpa_grad of sdpa f (geometry a): it reads f's
 * statistics, with the same operands, bias, form and scale. */
static int same_attention(const Graph *g, const Node *f, const Node *b, const AttnGeom *a)
{
    if (b->op != CT_OP_sdpa_grad || b->nin != f->nin + 3 || attn_packed(b) != a->packed || b->fattr[0] != f->fattr[0])
        return 0;
    AttnGeom ab;
    attn_geom(g, b, &ab);
    for (int k = 0; k < (a->packed ? 1 : 3); k++)
        if (b->in[k] != f->in[k])
            return 0;
    return b->in[ab.stats_in] == f->out[a->stats_out] && (a->bias_in < 0 || b->in[ab.bias_in] == f->in[a->bias_in]);
}

/* Pairs each f32 sdpa of the ordered graph with its sdpa_grad: both get
 * one buffer of the weights [B,H,N,M]. */
static void pair_attention(CtProgram *p)
{
    const Graph *g = &p->g;
    CpuProgram *c = &p->cpu;
    c->attn = malloc(sizeof *c->attn * (size_t)(g->nnodes + 1));
    /* slots of the saved weights: a pair's weights live from its sdpa to its
     * sdpa_grad, so a later pair (a recomputed block's) reuses a slot whose
     * pair has ended */
    size_t *slot_off = malloc(sizeof *slot_off * (size_t)(g->nnodes + 1));
    size_t *slot_size = malloc(sizeof *slot_size * (size_t)(g->nnodes + 1));
    int *slot_end = malloc(sizeof *slot_end * (size_t)(g->nnodes + 1)), nslots = 0;
    CT_ASSERT(c->attn && slot_off && slot_size && slot_end);
    for (int i = 0; i < g->nnodes; i++)
        c->attn[i] = (size_t)-1;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *f = &g->nodes[i];
        if (f->op != CT_OP_sdpa || g->values[f->in[0]].type.dtype != CT_F32)
            continue;
        AttnGeom a;
        attn_geom(g, f, &a);
        size_t bytes = (size_t)(a.B * a.H * a.N * a.M) * sizeof(float);
        bytes = (bytes + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
        int s = -1;
        for (int t = 0; t < nslots && s < 0; t++)
            if (slot_end[t] < i && slot_size[t] >= bytes)
                s = t;
        for (int j = i + 1; j < g->nnodes && (s >= 0 || c->attn_bytes + bytes <= ATTN_SAVE_BYTES); j++) {
            const Node *b = &g->nodes[j];
            if (same_attention(g, f, b, &a) && c->attn[j] == (size_t)-1) {
                if (s < 0) {
                    s = nslots++;
                    slot_off[s] = c->attn_bytes;
                    slot_size[s] = bytes;
                    c->attn_bytes += bytes;
                }
                slot_end[s] = j;
                c->attn[i] = c->attn[j] = slot_off[s];
                break;
            }
        }
    }
    free(slot_off);
    free(slot_size);
    free(slot_end);
}

/* Lowers every elementwise launch of src, compiles them as translation
 * units in parallel and finds each launch's function in its unit. */
static int compile_kernels(const Graph *src, CpuProgram *c, const HostCompiler *hc, const ProgramOptions *o,
                           CtErr *err)
{
    KernelUnits units;
    KernelCache cache;
    int rc = -1;
    c->nk = c->p.kernels_after;
    c->k = calloc((size_t)c->nk + 1, sizeof *c->k);
    c->fn = calloc((size_t)c->nk + 1, sizeof *c->fn);
    CT_ASSERT(c->k && c->fn);
    for (int l = 0; l < c->nk; l++)
        /* f32 as the cpu kernels compute, on the values' stored layouts */
        if (kir_lowerable(&c->p, l) && kir_lower(src, &c->p, l, (KirOptions){KIR_F32, 1}, &c->k[l], err))
            return -1;
    units_make(c->k, c->nk, UNIT_LOOPS, 0, &units);
    c->mods = calloc((size_t)units.n + 1, sizeof *c->mods);
    CT_ASSERT(c->mods != NULL);
    if (cache_open(&cache, &(CacheOptions){.memory_fallback = 1}, err))
        goto free_units;
    rc = host_compile_units(hc, &cache, &units, c->mods, err); /* the modules are loaded: the cache may go */
    int said = 0;
    cache_warn_disk(&cache, o->cache_warned ? o->cache_warned : &said, stderr);
    cache_close(&cache);
    if (rc)
        goto free_units;
    c->nmods = units.n;
    for (int l = 0; l < c->nk && !rc; l++)
        if (units.unit[l] >= 0 && !(c->fn[l] = host_kernel(&c->mods[units.unit[l]], units.fn[l])))
            rc = ct_fail(err, "the compiled kernels have no ct_k%d (translation unit %d)", units.fn[l], units.unit[l]);
free_units:
    units_free(&units);
    return rc;
}

/* The cpu target: the fused steps with compiled kernels, or without a C
 * compiler the graph node by node over one memory plan. */
static int compile_cpu(const Graph *g, CtProgram *p, const ProgramOptions *o, CtErr *err)
{
    HostCompiler hc;
    CtErr why;
    CpuProgram *c = &p->cpu;
    if (host_compiler_init(&hc, &why)) {
        copy_graph(g, &p->g);
        return plan_memory(&p->g, &p->plan, err);
    }
    hc.stop = o->stop;
    c->fused = 1;
    if (fuse_plan(g, &c->p, err))
        return -1;
    fuse_ordered_graph(g, &c->p, &p->g);
    pair_attention(p);
    c->own = calloc((size_t)g->nvalues + 1, 1);
    CT_ASSERT(c->own != NULL);
    int rc = plan_memory(&p->g, &p->plan, err);
    if (rc == 0)
        rc = compile_kernels(g, c, &hc, o, err);
    for (int l = 0; rc == 0 && l < c->nk; l++)
        kir_mark_clashes(g, &p->plan, &c->k[l], 0, c->own);
    return rc;
}

int program_compile(const Graph *g, CtTarget target, const ProgramOptions *o, CtProgram **out, CtErr *err)
{
    static const ProgramOptions none = {0};
    CtProgram *p = calloc(1, sizeof *p);
    CT_ASSERT(p != NULL);
    p->target = target;
    if (o)
        p->opt = (ProgramOptions){.allow_tf32 = o->allow_tf32, .sync_each = o->sync_each,
                                  .outputs_on_device = o->outputs_on_device,
                                  .inputs_fixed = o->inputs_fixed, .collective = o->collective};
    *out = NULL;
    int rc = 0;
    if (target == CT_TARGET_CPU) {
        rc = compile_cpu(g, p, o ? o : &none, err);
    } else {
        copy_graph(g, &p->g);
        if (target == CT_TARGET_CUDA) {
            p->opt.cuda_cc = o && o->cuda_cc ? o->cuda_cc : PROGRAM_CUDA_CC;
            p->opt.cuda_sms = o && o->cuda_sms ? o->cuda_sms : PROGRAM_CUDA_SMS;
            p->opt.cuda_sim = o && o->cuda_sim;
            p->opt.sim_seed = o ? o->sim_seed : 0;
            rc = cuda_compile(g, p->opt.cuda_cc, p->opt.cuda_sms, p->opt.cuda_sim, o ? o->cache_warned : NULL,
                              &p->cuda, err);
        }
    }
    if (rc) {
        program_free(p);
        return rc;
    }
    p->state_name = calloc((size_t)g->nvalues + 1, sizeof *p->state_name);
    CT_ASSERT(p->state_name != NULL);
    for (ValueId v = 0; v < g->nvalues; v++)
        if (role_is_state(g->values[v].role) && g->values[v].name)
            p->state_name[v] = arena_strdup(&p->g.arena, g->values[v].name);
    *out = p;
    return 0;
}

void program_free(CtProgram *p)
{
    if (!p)
        return;
    CpuProgram *c = &p->cpu;
    for (int l = 0; l < c->nk; l++)
        kir_free(&c->k[l]);
    free(c->k);
    for (int j = 0; j < c->nmods; j++)
        host_module_close(&c->mods[j]);
    free(c->mods);
    free(c->fn);
    free(c->own);
    free(c->attn);
    if (c->fused)
        fuse_free(&c->p);
    if (p->target == CT_TARGET_CPU)
        plan_free(&p->plan);
    if (p->target == CT_TARGET_CUDA)
        cuda_program_free(&p->cuda);
    free(p->state_name);
    graph_free(&p->g);
    free(p);
}

void program_dump(const CtProgram *p, CtBuf *out)
{
    static const char *const targets[] = {"ref", "cpu", "cuda"};
    const Graph *g = &p->g;
    int ninputs = 0, nstate = 0;
    for (ValueId v = 0; v < g->nvalues; v++) {
        ninputs += g->values[v].role == CT_ROLE_INPUT;
        nstate += p->state_name[v] != NULL;
    }
    buf_printf(out, "program: target %s, %d nodes, %d values (%d inputs, %d state, %d outputs)\n", targets[p->target],
               g->nnodes, g->nvalues, ninputs, nstate, g->noutputs);
    if (p->target == CT_TARGET_CPU) {
        const CpuProgram *c = &p->cpu;
        if (c->fused)
            buf_printf(out, "steps: %d (%d launches, %d translation units), arena %zu bytes + %zu saved attention\n",
                       c->p.nsteps, c->nk, c->nmods, p->plan.arena_bytes, c->attn_bytes);
        else
            buf_printf(out, "node by node (no C compiler), arena %zu bytes\n", p->plan.arena_bytes);
        for (int s = 0; c->fused && s < c->p.nsteps; s++) {
            const FuseStep *st = &c->p.steps[s];
            static const char *const kinds[] = {"library", "elementwise", "copy"};
            buf_printf(out, "step %d: %s, launch %d, nodes %d..%d (%s", s, kinds[st->kind], st->launch, st->first,
                       st->first + st->n - 1, op_def(g->nodes[st->first].op)->name);
            for (int j = 1; j < st->n; j++)
                buf_printf(out, " %s", op_def(g->nodes[st->first + j].op)->name);
            buf_printf(out, ")%s\n", st->view ? ", a view" : st->launch >= 0 && c->fn[st->launch] ? ", compiled" : "");
        }
    }
    if (p->target == CT_TARGET_CUDA) {
        buf_printf(out, "target: sm_%d, %d SMs%s\n", p->opt.cuda_cc, p->opt.cuda_sms,
                   p->opt.cuda_sim ? ", for the SIMT harness" : "");
        cuda_program_dump(&p->cuda, g, out);
    }
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        char sh[128];
        shape_str(&val->type.shape, sh, sizeof sh);
        if (val->role == CT_ROLE_INPUT)
            buf_printf(out, "%%%d %s %s: input\n", v, sh, ct_dtype_name(val->type.dtype));
        else if (p->state_name[v])
            buf_printf(out, "%%%d %s %s: state '%s'\n", v, sh, ct_dtype_name(val->type.dtype), p->state_name[v]);
        else if (p->target == CT_TARGET_CPU && p->plan.offset[v] != PLAN_NONE &&
                 !(p->cpu.fused && p->cpu.own[v]))
            buf_printf(out, "%%%d %s %s: arena +%zu\n", v, sh, ct_dtype_name(val->type.dtype),
                       (size_t)p->plan.offset[v]);
        else if (p->target == CT_TARGET_CUDA && p->cuda.lp.offset[v] != PLAN_NONE)
            buf_printf(out, "%%%d %s %s: device +%zu\n", v, sh, ct_dtype_name(val->type.dtype),
                       p->cuda.lp.offset[v]);
    }
}
