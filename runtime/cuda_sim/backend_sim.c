/* Contract: ct_backend_cuda_sim runs a cuda program (compiled with
 * ProgramOptions.cuda_sim: its images are CUDA C sources) the way the
 * executor (runtime/cuda/executor.c) runs it on a device: the same launch
 * plan, device-block offsets, input and state blocks, launches with their
 * grids and arguments, in stream order, the state resident between syncs
 * and the bytes each run moves counted; kernels through the SIMT harness
 * (runtime/cuda_sim/simt.h), the library calls from their descriptors
 * (runtime/cuda_sim/calls.h). A depthwise step runs its cuDNN twin with
 * CTIMM_DWCONV=cudnn, else its library kernels: the harness times
 * nothing, so "auto" runs what the executor runs untimed. Device memory
 * is host memory; under AddressSanitizer everything but the buffers of
 * the step running is poisoned, so a kernel or descriptor that reaches
 * past its values stops there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_sim/backend_sim.h"

#include "runtime/backend.h"
#include "runtime/cuda/twin_choice.h"
#include "runtime/cuda_sim/calls.h"
#include "runtime/cuda_sim/simt.h"

/* What the harness plays: few multiprocessors, so the plan's grid-stride
 * grids stay small on the host (any grid computes the same). */
#define SIM_CC 90
#define SIM_SMS 2

struct CtExec {
    const CtProgram *p;
    const LaunchPlan *lp;
    CtState *state;
    SimModule **gen; /* per translation unit */
    SimModule *lib[LIB_NTYPES]; /* the library units the program has, by LibType */
    size_t *in_off, *st_off; /* per value, as the executor places them */
    size_t in_bytes, st_bytes;
    size_t device_bytes; /* the host memory standing in for device memory */
    char *block, *inputs, *dstate, *scratch, *counters, *kept; /* counters: zero between launches */
    uint64_t seed;
    TwinMode dw_mode;
    ConvStatsMode stats_mode;
    int runs, state_stale;
    size_t moved_in, moved_out, moved_state;
};


static void *addr(const CtExec *e, ValueId v)
{
    if (v < 0)
        return NULL;
    if (e->lp->alias[v] >= 0)
        v = e->lp->alias[v];
    if (e->in_off[v] != PLAN_NONE)
        return e->inputs + e->in_off[v];
    if (e->st_off[v] != PLAN_NONE)
        return e->dstate + e->st_off[v];
    return e->block + e->lp->offset[v];
}

static int sim_target_options(ProgramOptions *o, CtErr *err)
{
    o->cuda_sim = 1;
    o->cuda_cc = o->cuda_cc ? o->cuda_cc : SIM_CC;
    o->cuda_sms = o->cuda_sms ? o->cuda_sms : SIM_SMS;
    return 0;
}

/* The launch plan's coverage: what the cuda backend runs. */
static int sim_supports(const Graph *g, const Node *n) { return ct_backend_cuda.supports(g, n); }

static void sim_free(CtExec *e)
{
    if (!e)
        return;
    for (int j = 0; e->gen && j < e->p->cuda.nunits; j++)
        sim_module_free(e->gen[j]);
    free(e->gen);
    for (int t = 0; t < LIB_NTYPES; t++)
        sim_module_free(e->lib[t]);
    char *mem[6] = {e->block, e->inputs, e->dstate, e->scratch, e->counters, e->kept};
    for (int i = 0; i < 6; i++)
        free(mem[i]);
    free(e->in_off);
    free(e->st_off);
    free(e);
}

/* Names of the kernels the plan launches from generated unit `unit`. */
static int kernel_names(const CtProgram *p, int unit, const char ***names)
{
    const CudaProgram *c = &p->cuda;
    const LaunchPlan *lp = &c->lp;
    int n = 0, cap = 16;
    const char **v = malloc(sizeof *v * (size_t)cap);
    CT_ASSERT(v != NULL);
    for (int s = 0; s < lp->nsteps; s++) {
        const LpStep *st = &lp->steps[s];
        if (st->kind != LP_KERNEL || c->unit[st->launch] != unit)
            continue;
        char buf[32];
        snprintf(buf, sizeof buf, "ct_k%d", c->fn[st->launch]);
        int seen = 0;
        for (int k = 0; k < n && !seen; k++)
            seen = !strcmp(v[k], buf);
        if (seen)
            continue;
        if (n == cap)
            v = realloc(v, sizeof *v * (size_t)(cap *= 2));
        CT_ASSERT(v != NULL);
        v[n] = strdup(buf);
        CT_ASSERT(v[n] != NULL);
        n++;
    }
    *names = v;
    return n;
}

static void names_free(const char **v, int n)
{
    for (int k = 0; k < n; k++)
        free((char *)v[k]);
    free(v);
}

/* The generated units' modules, then the library units' the program has,
 * each with every kernel it defines: one module text a storage type for
 * every program, compiled once a kernel cache (its entries for the
 * launched kernels alone made one for each program). */
static int load_modules(CtExec *e, CtErr *err)
{
    const CudaProgram *c = &e->p->cuda;
    e->gen = calloc((size_t)c->nunits + 1, sizeof *e->gen);
    CT_ASSERT(e->gen != NULL);
    for (int j = 0; j < c->nunits; j++) {
        const char **names;
        int n = kernel_names(e->p, j, &names);
        int rc = sim_module_build(c->units[j].data, names, n, &e->gen[j], err);
        names_free(names, n);
        if (rc)
            return ct_failctx(err, "the SIMT harness loading a unit of generated kernels");
    }
    for (int t = 0; t < LIB_NTYPES; t++) {
        int n;
        const char *const *names = lib_kernel_names((LibType)t, &n);
        if (c->lib[t].size && sim_module_build(c->lib[t].data, names, n, &e->lib[t], err))
            return ct_failctx(err, "the SIMT harness loading the library kernels");
    }
    return 0;
}

static int place_blocks(CtExec *e, const CtState *state, CtErr *err)
{
    const Graph *g = &e->p->g;
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        e->in_off[v] = e->st_off[v] = PLAN_NONE;
        if (val->role == CT_ROLE_INPUT) {
            e->in_off[v] = e->in_bytes;
            e->in_bytes += (value_bytes(val) + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
        } else if (e->p->state_name[v]) {
            int s = state ? state_find(state, e->p->state_name[v]) : -1;
            if (s < 0 || !shape_equal(&state->e[s].type.shape, &val->type.shape) ||
                state->e[s].type.dtype != val->type.dtype)
                return ct_fail(err, "state has no tensor '%s' of the graph's shape and dtype", e->p->state_name[v]);
            e->st_off[v] = state->e[s].offset;
        }
    }
    e->st_bytes = state ? state->nbytes : 0;
    return 0;
}

static int sim_prepare(const CtProgram *p, CtState *state, CtExec **out, CtErr *err)
{
    if (p->target != CT_TARGET_CUDA || !p->opt.cuda_sim)
        return ct_fail(err, "the cuda-sim backend runs cuda programs compiled for the SIMT harness "
                            "(ProgramOptions.cuda_sim)");
    CtExec *e = calloc(1, sizeof *e);
    CT_ASSERT(e != NULL);
    *e = (CtExec){.p = p, .lp = &p->cuda.lp, .state = state, .seed = p->opt.sim_seed ? p->opt.sim_seed : 1};
    e->in_off = calloc((size_t)p->g.nvalues + 1, sizeof *e->in_off);
    e->st_off = calloc((size_t)p->g.nvalues + 1, sizeof *e->st_off);
    CT_ASSERT(e->in_off && e->st_off);
    if (twin_mode(&e->dw_mode, err) || conv_stats_mode(&e->stats_mode, err) || place_blocks(e, state, err) ||
        load_modules(e, err)) {
        sim_free(e);
        return -1;
    }
    size_t sizes[6] = {e->lp->device_bytes, e->in_bytes, e->st_bytes, e->lp->scratch_bytes,
                       e->lp->counters * sizeof(unsigned), e->lp->kept_bytes};
    char **where[6] = {&e->block, &e->inputs, &e->dstate, &e->scratch, &e->counters, &e->kept};
    for (int i = 0; i < 6; i++) {
        if (!(*where[i] = malloc(sizes[i] + 1))) {
            sim_free(e);
            return ct_fail(err, "out of memory: the plan needs %zu bytes of device memory", sizes[i]);
        }
        /* NaN bytes: what a kernel reads before anything wrote it shows; the counters start at zero */
        memset(*where[i], i == 4 ? 0 : 0xff, sizes[i] + 1);
        e->device_bytes += sizes[i]; /* what the device would hold: the guard byte is the harness's */
    }
    *out = e;
    return 0;
}

/* Under ASan: device memory readable only where the step's values are. */
static void guard_all(CtExec *e)
{
    sim_guard(e->block, e->lp->device_bytes + 1);
    sim_guard(e->inputs, e->in_bytes + 1);
    sim_guard(e->dstate, e->st_bytes + 1);
    sim_guard(e->scratch, e->lp->scratch_bytes + 1);
    sim_guard(e->counters, e->lp->counters * sizeof(unsigned) + 1);
    sim_guard(e->kept, e->lp->kept_bytes + 1);
}

static void allow_value(CtExec *e, ValueId v)
{
    if (v >= 0)
        sim_allow(addr(e, v), value_bytes(&e->p->g.values[e->lp->alias[v] >= 0 ? e->lp->alias[v] : v]));
}

static int launch(CtExec *e, SimModule *m, const char *name, unsigned grid, unsigned block, size_t shared,
                  void **params, uint64_t salt, CtErr *err)
{
    SimLaunch l = {.grid = {grid, 1, 1}, .block = {block, 1, 1}, .dyn_shared = shared,
                   .seed = e->seed ^ (salt * 0x9E3779B97F4A7C15ull)};
    return sim_launch(m, name, &l, params, err);
}

static int launch_lib(CtExec *e, const LibLaunch *l, uint64_t salt, CtErr *err)
{
    unsigned long long ptr[LIB_MAX_ARGS] = {0};
    LibArgStore store[LIB_MAX_ARGS];
    void *params[LIB_MAX_ARGS];
    for (int a = 0; a < l->nargs; a++) {
        if (l->arg[a].kind == LA_VALUE) {
            ptr[a] = (uintptr_t)addr(e, l->arg[a].v);
            allow_value(e, l->arg[a].v);
        } else if (l->arg[a].kind == LA_SCRATCH) {
            ptr[a] = (uintptr_t)(e->scratch + l->arg[a].i);
            sim_allow(e->scratch, e->lp->scratch_bytes);
        } else if (l->arg[a].kind == LA_COUNTERS) {
            ptr[a] = (uintptr_t)e->counters;
            sim_allow(e->counters, sizeof(unsigned) * (size_t)l->arg[a].i);
        } else if (l->arg[a].kind == LA_KEPT) {
            ptr[a] = (uintptr_t)(e->kept + l->arg[a].i);
            sim_allow(e->kept, e->lp->kept_bytes);
        }
    }
    lib_params(l, ptr, store, params);
    int t = lib_kernel_type(l->kernel);
    if (t < 0 || !e->lib[t])
        return ct_fail(err, "library kernel %s: the program has no library image defining it", l->kernel);
    return launch(e, e->lib[t], l->kernel, lp_grid(l->items, e->p->opt.cuda_sms), LP_BLOCK, l->shared, params, salt,
                  err);
}

static int run_step(CtExec *e, int s, CtErr *err)
{
    const LpStep *st = &e->lp->steps[s];
    const CudaProgram *c = &e->p->cuda;
    uint64_t salt = (uint64_t)e->runs << 32 | (uint64_t)s << 8;
    int rc = 0, twin = st->twin && e->dw_mode == TWIN_CUDNN;
    /* a convolution's statistics made by the call, else by the launch plan's pass after it */
    int stats_call = st->kind == LP_CONV && st->conv.stats >= 0 && e->stats_mode == STATS_CUDNN;
    int fallback = twin || (st->kind == LP_CONV && st->conv.stats >= 0 && !stats_call);
    guard_all(e);
    if (st->kind == LP_KERNEL) {
        const KirKernel *k = &e->lp->k[st->launch];
        void **ptr = malloc(sizeof *ptr * (size_t)(k->nbufs + 1)), **params = malloc(sizeof *params * (size_t)(k->nbufs + 1));
        CT_ASSERT(ptr && params);
        for (int b = 0; b < k->nbufs; b++) {
            ptr[b] = addr(e, k->bufs[b].value);
            allow_value(e, k->bufs[b].value);
            params[b] = &ptr[b];
        }
        char name[32];
        snprintf(name, sizeof name, "ct_k%d", c->fn[st->launch]);
        rc = launch(e, e->gen[c->unit[st->launch]], name, st->grid, st->block, 0, params, salt, err);
        free(ptr);
        free(params);
    } else if (st->kind == LP_GEMM) {
        const GemmDesc *d = &st->gemm;
        ValueId bias = d->epi.bgrad >= 0 ? d->epi.bgrad : d->epi.bias; /* the library's bias pointer */
        ValueId vs[6] = {d->a, d->b, d->epi.d, d->epi.residual, bias, d->epi.aux};
        for (int i = 0; i < 6; i++)
            allow_value(e, vs[i]);
        sim_gemm(d, addr(e, d->a), addr(e, d->b), addr(e, d->epi.d), addr(e, d->epi.residual), addr(e, bias),
                 addr(e, d->epi.aux));
    } else if (st->kind == LP_CONV || twin) {
        const ConvDesc *cd = &st->conv;
        int back = cd->dir == CONV_BWD_FILTER;
        ValueId out = cd->dir == CONV_FWD ? cd->epi.d : cd->y;
        ValueId vs[5] = {cd->x, cd->wt, out, cd->epi.bias, cd->epi.residual};
        for (int i = 0; i < 5; i++)
            allow_value(e, vs[i]);
        if (st->mirrored)
            sim_allow(e->scratch, e->lp->scratch_bytes);
        if (stats_call)
            sim_allow(e->kept, e->lp->kept_bytes);
        if (st->mirrored && !back)
            rc = launch_lib(e, &st->mirror, salt | 1, err);
        if (!rc)
            sim_conv(cd, addr(e, cd->x), st->mirrored ? (void *)e->scratch : addr(e, cd->wt), addr(e, out),
                     addr(e, cd->epi.bias), addr(e, cd->epi.residual),
                     stats_call ? (float *)(void *)(e->kept + cd->stats) : NULL);
        if (!rc && st->mirrored && back)
            rc = launch_lib(e, &st->mirror, salt | 2, err);
    } else if (st->kind == LP_COPY) {
        allow_value(e, st->copy_src);
        allow_value(e, st->copy_dst);
        memmove(addr(e, st->copy_dst), addr(e, st->copy_src), value_bytes(&e->lp->og.values[st->copy_src]));
    }
    for (int j = 0; !rc && !twin && j < st->nlib; j++)
        rc = launch_lib(e, &st->lib[j], salt | (uint64_t)(j + 3), err);
    for (int j = 0; !rc && fallback && j < st->nfallback; j++)
        rc = launch_lib(e, &st->fallback[j], salt | (uint64_t)(j + 3), err);
    return rc ? ct_failctx(err, "step %d of %d", s, e->lp->nsteps) : 0;
}

/* Everything readable again: the host's copies in and out. */
static void allow_all(CtExec *e)
{
    sim_allow(e->block, e->lp->device_bytes + 1);
    sim_allow(e->inputs, e->in_bytes + 1);
    sim_allow(e->dstate, e->st_bytes + 1);
    sim_allow(e->scratch, e->lp->scratch_bytes + 1);
    sim_allow(e->counters, e->lp->counters * sizeof(unsigned) + 1);
    sim_allow(e->kept, e->lp->kept_bytes + 1);
}

static int sim_run(CtExec *e, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    const Graph *g = &e->p->g;
    size_t st_bytes = e->state ? e->state->nbytes : 0;
    if (st_bytes != e->st_bytes)
        return ct_fail(err, "the state has %zu bytes, the program was prepared for %zu", st_bytes, e->st_bytes);
    e->moved_in = e->moved_out = e->moved_state = 0;
    allow_all(e);
    if (st_bytes && (e->runs == 0 || e->state_stale)) {
        memcpy(e->dstate, e->state->data, st_bytes);
        e->state_stale = 0;
        e->moved_state = st_bytes;
    }
    int k = 0;
    for (ValueId v = 0; v < g->nvalues; v++) {
        if (e->in_off[v] == PLAN_NONE)
            continue;
        const Value *val = &g->values[v];
        if (k >= ninputs || !shape_equal(&inputs[k].type.shape, &val->type.shape) ||
            inputs[k].type.dtype != val->type.dtype)
            return ct_fail(err, "input %d ('%s') is missing or has the wrong shape or dtype", k, val->name);
        memcpy(e->inputs + e->in_off[v], inputs[k].data, value_bytes(val));
        e->moved_in += value_bytes(val);
        k++;
    }
    for (int s = 0; s < e->lp->nsteps; s++)
        if (run_step(e, s, err)) {
            allow_all(e);
            return -1;
        }
    allow_all(e);
    e->runs++;
    for (int o = 0; o < g->noutputs; o++) {
        const Value *val = &g->values[g->outputs[o]];
        tensor_alloc(&outputs[o], val->type);
        memcpy(outputs[o].data, addr(e, g->outputs[o]), value_bytes(val));
        e->moved_out += value_bytes(val);
    }
    return 0;
}

static int sim_to_host(CtExec *e, CtErr *err)
{
    if (e->st_bytes && e->runs && !e->state_stale)
        memcpy(e->state->data, e->dstate, e->st_bytes);
    return 0;
}

static int sim_from_host(CtExec *e, CtErr *err)
{
    e->state_stale = 1;
    return 0;
}

void cuda_sim_moved(const CtExec *e, size_t *in, size_t *out, size_t *state)
{
    *in = e->moved_in;
    *out = e->moved_out;
    *state = e->moved_state;
}

static size_t sim_device_bytes(const CtExec *e) { return e->device_bytes; }

const CtBackend ct_backend_cuda_sim = {.name = "cuda-sim", .target = CT_TARGET_CUDA,
                                       .target_options = sim_target_options, .supports = sim_supports,
                                       .prepare = sim_prepare, .run = sim_run, .state_to_host = sim_to_host,
                                       .state_from_host = sim_from_host, .free = sim_free,
                                       .device_bytes = sim_device_bytes};
