/* Contract: cpu_run_fused(g) computes what the node-by-node cpu backend
 * computes, running g's fused steps in plan order: one compiled host kernel
 * per elementwise launch, node by node for the rest. Memory: the plan over
 * g's nodes in step order (arena), state in place, inputs where the caller
 * holds them, outputs in the caller's tensors; a kernel's stored value that
 * the plan put over memory the same kernel reads at other elements gets
 * memory of its own instead.
 *
 * What a graph compiles to (its fusion plan, memory plan and loaded
 * kernels) depends on the graph's content alone, and the backend's run()
 * is called once per training step with no place to keep it; so it is kept
 * in a process-wide memo keyed by a hash of the graph's content, under a
 * mutex, for the life of the process (a run uses a graph or two). The
 * same goes for the compiler, the caller's stop flag and whether the kernel
 * cache's "nothing kept on disk" line was printed (once a process).
 *
 * Attention: sdpa_grad recomputes the weights softmax(q k^T) that its sdpa
 * computed (the IR's rule, which the GPU's kernels keep: memory is what a
 * GPU runs out of). Here an sdpa whose gradient is in the same graph saves
 * them instead, in the arena past the plan's values, and its sdpa_grad
 * reads them back (as torch saves them): one GEMM and a softmax a head
 * fewer, the same numbers. Up to ATTN_SAVE_BYTES a graph, then recomputed. */
#include "runtime/cpu/compiled.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "codegen/host_compile.h"
#include "ir/graph_hash.h"
#include "passes/plan.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu.h"

static size_t value_nbytes(const Value *v) { return (size_t)shape_numel(&v->type.shape) * ct_dtype_size(v->type.dtype); }

#define ATTN_SAVE_BYTES ((size_t)1 << 30)

/* A graph compiled for this backend. */
typedef struct Compiled {
    XXH128_hash_t key;
    FusePlan p;
    Graph og;         /* g's nodes in step order (fuse_ordered_graph) */
    MemPlan plan;     /* over og */
    KirKernel *k;     /* per launch; nloops == 0 where the launch is not elementwise */
    int nk;
    HostModule *mods; /* per translation unit (codegen/units.h) */
    int nmods;
    HostKernelFn *fn; /* per launch: ct_k<launch> from its unit's module, NULL where no kernel */
    char *own;        /* per value: stored over what its kernel reads elsewhere, so not in the arena */
    size_t *attn;     /* per og node: an sdpa's or sdpa_grad's saved weights, bytes past the plan's arena; -1 none */
    size_t attn_bytes;
    /* The arena, kept from run to run: a training step's activations are
     * hundreds of MiB, and a fresh malloc gives fresh pages that fault in
     * again at every step. A run that finds it taken (another thread
     * running the same graph) uses one of its own. Guarded by memo_mu. */
    unsigned char *arena;
    int arena_busy;
    struct Compiled *next;
} Compiled;

static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
static Compiled *memo;
static int have_cc = -1; /* -1: not asked yet */
static HostCompiler hc;
static const volatile sig_atomic_t *stop_flag; /* backend_set_stop_flag's */
static int cache_warned;                     /* cache_warn_disk's: once per process */

void backend_set_stop_flag(const volatile sig_atomic_t *stop)
{
    pthread_mutex_lock(&memo_mu);
    stop_flag = stop;
    pthread_mutex_unlock(&memo_mu);
}

/* Lowers every elementwise launch, compiles them as translation units in
 * parallel and finds each launch's function in its unit's module. */
static int compile_kernels(const Graph *g, Compiled *c, CtErr *err)
{
    KernelUnits units;
    KernelCache cache;
    int rc = -1;
    c->nk = c->p.kernels_after;
    c->k = calloc((size_t)c->nk + 1, sizeof *c->k);
    c->fn = calloc((size_t)c->nk + 1, sizeof *c->fn);
    CT_ASSERT(c->k && c->fn);
    for (int l = 0; l < c->nk; l++)
        /* f32 as the cpu kernels compute, on row-major memory */
        if (kir_lowerable(&c->p, l) && kir_lower(g, &c->p, l, (KirOptions){KIR_F32, 0}, &c->k[l], err))
            return -1;
    units_make(c->k, c->nk, UNIT_LOOPS, 0, &units);
    c->mods = calloc((size_t)units.n + 1, sizeof *c->mods);
    CT_ASSERT(c->mods != NULL);
    if (cache_open(&cache, &(CacheOptions){.memory_fallback = 1}, err))
        goto free_units;
    rc = host_compile_units(&hc, &cache, &units, c->mods, err); /* the modules are loaded: the cache may go */
    cache_warn_disk(&cache, &cache_warned, stderr);
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

static void free_compiled(Compiled *c)
{
    for (int l = 0; l < c->nk; l++)
        kir_free(&c->k[l]);
    free(c->k);
    for (int j = 0; j < c->nmods; j++)
        host_module_close(&c->mods[j]);
    free(c->mods);
    free(c->fn);
    plan_free(&c->plan);
    graph_free(&c->og);
    fuse_free(&c->p);
    free(c->own);
    free(c->attn);
    free(c->arena);
    free(c);
}

/* Pairs each f32 sdpa of og with the sdpa_grad of the same q, k, v and
 * scale: both get one buffer of the weights [B,H,N,M] (see the top). */
static void pair_attention(Compiled *c)
{
    const Graph *g = &c->og;
    c->attn = malloc(sizeof *c->attn * (size_t)(g->nnodes + 1));
    CT_ASSERT(c->attn != NULL);
    for (int i = 0; i < g->nnodes; i++)
        c->attn[i] = (size_t)-1;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *f = &g->nodes[i];
        if (f->op != CT_OP_sdpa || g->values[f->in[0]].type.dtype != CT_F32)
            continue;
        const CtShape *q = &g->values[f->in[0]].type.shape, *k = &g->values[f->in[1]].type.shape;
        size_t bytes = (size_t)(q->d[0] * q->d[1] * q->d[2] * k->d[2]) * sizeof(float);
        bytes = (bytes + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
        for (int j = i + 1; j < g->nnodes && c->attn_bytes + bytes <= ATTN_SAVE_BYTES; j++) {
            const Node *b = &g->nodes[j];
            if (b->op == CT_OP_sdpa_grad && b->in[0] == f->in[0] && b->in[1] == f->in[1] && b->in[2] == f->in[2] &&
                b->fattr[0] == f->fattr[0] && c->attn[j] == (size_t)-1) {
                c->attn[i] = c->attn[j] = c->attn_bytes;
                c->attn_bytes += bytes;
                break;
            }
        }
    }
}

/* 0, -1 or CT_INTERRUPTED (compile_kernels'). */
static int compile_graph(const Graph *g, XXH128_hash_t key, Compiled **out, CtErr *err)
{
    Compiled *c = calloc(1, sizeof *c);
    CT_ASSERT(c != NULL);
    c->key = key;
    if (fuse_plan(g, &c->p, err)) {
        free(c);
        return -1;
    }
    fuse_ordered_graph(g, &c->p, &c->og);
    pair_attention(c);
    c->own = calloc((size_t)g->nvalues + 1, 1);
    CT_ASSERT(c->own != NULL);
    int rc = plan_memory(&c->og, &c->plan, err);
    if (rc == 0)
        rc = compile_kernels(g, c, err);
    if (rc) {
        free_compiled(c);
        return rc;
    }
    for (int l = 0; l < c->nk; l++)
        kir_mark_clashes(g, &c->plan, &c->k[l], c->own);
    *out = c;
    return 0;
}

/* The memo's entry for g in *found, compiled on first use: 0,
 * CPU_FUSED_UNAVAILABLE when there is no C compiler, -1 or CT_INTERRUPTED. */
static int lookup(const Graph *g, Compiled **found, CtErr *err)
{
    XXH128_hash_t key = graph_content_hash(g);
    CtErr why;
    int rc = 0;
    *found = NULL;
    pthread_mutex_lock(&memo_mu);
    if (have_cc < 0)
        have_cc = host_compiler_init(&hc, &why) == 0;
    hc.stop = stop_flag;
    for (Compiled *c = memo; have_cc && c && !*found; c = c->next)
        if (XXH128_isEqual(c->key, key))
            *found = c;
    if (!have_cc)
        rc = CPU_FUSED_UNAVAILABLE;
    else if (!*found && (rc = compile_graph(g, key, found, err)) == 0) {
        (*found)->next = memo;
        memo = *found;
    }
    pthread_mutex_unlock(&memo_mu);
    return rc;
}

/* Every value's memory: inputs, state, outputs, the arena, own blocks
 * (own[v] = 1: malloc'd here; 2: the caller's output). */
static int place_values(const Graph *g, const Compiled *c, CtState *state, const CtTensor *inputs, int ninputs,
                        CtTensor *outputs, unsigned char *arena, void **ptr, char *own, CtErr *err)
{
    int in_k = 0;
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        if (val->role == CT_ROLE_INPUT) {
            if (in_k >= ninputs || !shape_equal(&inputs[in_k].type.shape, &val->type.shape) ||
                inputs[in_k].type.dtype != val->type.dtype)
                return ct_fail(err, "input %d ('%s') is missing or has the wrong shape or dtype", in_k, val->name);
            ptr[v] = inputs[in_k++].data;
        } else if (val->role == CT_ROLE_PARAM || val->role == CT_ROLE_BUFFER || val->role == CT_ROLE_STATE) {
            int s = state_find(state, val->name);
            if (s < 0 || !shape_equal(&state->e[s].type.shape, &val->type.shape) ||
                state->e[s].type.dtype != val->type.dtype)
                return ct_fail(err, "state has no tensor '%s' of the graph's shape and dtype", val->name);
            ptr[v] = state_data(state, s);
        } else if (c->plan.offset[v] != PLAN_NONE && !c->own[v]) {
            ptr[v] = arena + c->plan.offset[v];
        }
    }
    for (int k = 0; k < g->noutputs; k++) {
        ValueId v = g->outputs[k];
        if (!ptr[v] && g->values[v].producer >= 0) {
            ptr[v] = outputs[k].data;
            own[v] = 2;
        }
    }
    for (ValueId v = 0; v < g->nvalues; v++)
        if (!ptr[v]) { /* not in the arena (nothing reads it) or moved out of it */
            ptr[v] = malloc(value_nbytes(&g->values[v]) + 1);
            CT_ASSERT(ptr[v] != NULL);
            own[v] = 1;
        }
    return 0;
}

static void run_steps(const Compiled *c, void **ptr, unsigned char *arena)
{
    for (int s = 0, last_launch = -1; s < c->p.nsteps; s++) {
        const FuseStep *st = &c->p.steps[s];
        const KirKernel *k = st->launch >= 0 ? &c->k[st->launch] : NULL;
        if (k && k->nloops) {
            if (st->launch != last_launch) { /* a multi-tensor launch runs once for all its steps */
                void **args = malloc(sizeof *args * (size_t)(k->nbufs + 1));
                CT_ASSERT(args != NULL);
                for (int b = 0; b < k->nbufs; b++)
                    args[b] = ptr[k->bufs[b].value];
                c->fn[st->launch](args);
                free(args);
            }
            last_launch = st->launch;
            continue;
        }
        for (int j = 0; j < st->n; j++) {
            const Node *n = &c->og.nodes[st->first + j];
            size_t saved = c->attn[st->first + j];
            void *in[CT_MAX_IN], *out[CT_MAX_OUT];
            for (int i = 0; i < n->nin; i++)
                in[i] = ptr[n->in[i]];
            for (int o = 0; o < n->nout; o++)
                out[o] = ptr[n->out[o]];
            if (saved == (size_t)-1)
                cpu_run_node(&c->og, n, in, out);
            else if (n->op == CT_OP_sdpa)
                cpu_sdpa_saving(&c->og, n, (float *const *)in, (float *const *)out,
                                (float *)(arena + c->plan.arena_bytes + saved));
            else
                cpu_sdpa_grad_saved(&c->og, n, (float *const *)in, (float *const *)out,
                                    (const float *)(arena + c->plan.arena_bytes + saved));
        }
    }
}

int cpu_run_fused(const Graph *g, CtState *state, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    int rc = -1, nout_done = 0;
    if (backend_check(&ct_backend_cpu, g, err))
        return -1;
    Compiled *c;
    int found = lookup(g, &c, err);
    if (found)
        return found;
    void **ptr = calloc((size_t)g->nvalues + 1, sizeof *ptr);
    char *own = calloc((size_t)g->nvalues + 1, 1);
    unsigned char *arena = NULL;
    pthread_mutex_lock(&memo_mu);
    if (!c->arena_busy) {
        if (!c->arena)
            c->arena = malloc(c->plan.arena_bytes + c->attn_bytes + 1);
        c->arena_busy = 1;
        arena = c->arena;
    }
    pthread_mutex_unlock(&memo_mu);
    if (!arena)
        arena = malloc(c->plan.arena_bytes + c->attn_bytes + 1);
    CT_ASSERT(ptr && own && arena);
    for (int k = 0; k < g->noutputs; k++) {
        tensor_alloc(&outputs[k], g->values[g->outputs[k]].type);
        nout_done = k + 1;
    }
    if (place_values(g, c, state, inputs, ninputs, outputs, arena, ptr, own, err))
        goto free_memory;
    run_steps(c, ptr, arena);
    for (int k = 0; k < g->noutputs; k++) {
        ValueId v = g->outputs[k];
        if (ptr[v] != outputs[k].data)
            memcpy(outputs[k].data, ptr[v], value_nbytes(&g->values[v]));
    }
    rc = 0;
free_memory:
    if (rc)
        for (int k = 0; k < nout_done; k++)
            tensor_free(&outputs[k]);
    for (ValueId v = 0; v < g->nvalues; v++)
        if (own[v] == 1)
            free(ptr[v]);
    pthread_mutex_lock(&memo_mu);
    if (arena == c->arena)
        c->arena_busy = 0;
    else
        free(arena);
    pthread_mutex_unlock(&memo_mu);
    free(ptr);
    free(own);
    return rc;
}
