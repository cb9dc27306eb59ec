/* Contract: cuda_program_run computes what the ref backend computes for
 * the graph the program was built from, on the device, every driver and
 * library call checked. */
#include "runtime/cuda/executor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/nvrtc.h"
#include "runtime/cuda/blaslt.h"
#include "runtime/cuda/dnn.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/launch_plan.h"
#include "runtime/cuda/lib_source.h"

enum { STREAM_NON_BLOCKING = 1, CAPTURE_THREAD_LOCAL = 1 };
#define GEMM_WORKSPACE ((size_t)32 << 20) /* cuBLASLt's advice for Hopper */
#define CONV_WORKSPACE ((size_t)256 << 20)

struct CudaExec {
    CudaExecOptions opt;
    CudaDriver drv;
    CudaDeviceInfo info;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    BlasLt lt;
    Dnn dnn;
    NvrtcCompiler nc;
    KernelCache cache;
    int have_cache, have_lt, have_dnn;
    int cache_warned; /* cache_warn_disk's: the executor lives as long as the process */
    char name[192];
};

struct CudaProgram {
    CudaExec *ex;
    LaunchPlan lp;
    CUmodule *gen;       /* the generated kernels: per translation unit (codegen/units.h) */
    int ngen;            /* of them loaded */
    CUmodule lib;
    CUfunction *kfn;     /* per launch id */
    CUfunction **libfn;  /* per step: one per LibLaunch */
    CUfunction *mirrorfn; /* per step: its filter copy's kernel, where mirrored */
    BlasLtCall *gemm;    /* per step */
    DnnCall *conv;       /* per step */
    size_t *in_off;      /* per value: offset in the input block, or PLAN_NONE */
    size_t *st_off;      /* per value: offset in the state block (the CtState's layout), or PLAN_NONE */
    size_t in_bytes, st_bytes, workspace_bytes;
    CUdeviceptr block, inputs, state, scratch, workspace;
    CUgraph graph;
    CUgraphExec graph_exec;
    int runs;
    int state_stale;                          /* the host's state is newer: upload before the next run */
    size_t moved_in, moved_out, moved_state;  /* by the last run */
};

/* 0, or -1 with "what: the driver's error". */
static int cu_check(const CudaExec *ex, CUresult r, CtErr *err, const char *fmt, ...)
{
    if (r == CU_SUCCESS)
        return 0;
    char what[256], text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ct_fail(err, "%s: %s", what, cuda_error_text(&ex->drv, r, text, sizeof text));
}

int cuda_exec_open(const CudaExecOptions *opt, CudaExec **out, CtErr *err)
{
    CudaExec *ex = calloc(1, sizeof *ex);
    CT_ASSERT(ex != NULL);
    ex->opt = *opt;
    *out = NULL;
    if (cuda_driver_open(&ex->drv, err)) {
        free(ex);
        return -1;
    }
    if (cuda_device_info(&ex->drv, 0, &ex->info, err) ||
        cu_check(ex, ex->drv.DeviceGet(&ex->dev, 0), err, "cuDeviceGet") ||
        cu_check(ex, ex->drv.DevicePrimaryCtxRetain(&ex->ctx, ex->dev), err, "the device's primary context") ||
        cu_check(ex, ex->drv.CtxSetCurrent(ex->ctx), err, "cuCtxSetCurrent") ||
        cu_check(ex, ex->drv.StreamCreate(&ex->stream, STREAM_NON_BLOCKING), err, "cuStreamCreate"))
        goto fail;
    if (blaslt_open(&ex->lt, err))
        goto fail;
    ex->have_lt = 1;
    if (dnn_open(&ex->dnn, ex->stream, err))
        goto fail;
    ex->have_dnn = 1;
    if (nvrtc_init(&ex->nc, err))
        goto fail;
    if (cache_open(&ex->cache, &(CacheOptions){.memory_fallback = 1}, err))
        goto fail;
    ex->have_cache = 1;
    snprintf(ex->name, sizeof ex->name, "%s (sm_%d%d, %d SMs, %zu GiB)", ex->info.name, ex->info.major,
             ex->info.minor, ex->info.sms, ex->info.total_bytes >> 30);
    *out = ex;
    return 0;
fail:
    cuda_exec_close(ex);
    return -1;
}

void cuda_exec_close(CudaExec *ex)
{
    if (!ex)
        return;
    if (ex->have_cache)
        cache_close(&ex->cache);
    if (ex->have_dnn)
        dnn_close(&ex->dnn);
    if (ex->have_lt)
        blaslt_close(&ex->lt);
    if (ex->stream)
        ex->drv.StreamDestroy(ex->stream);
    if (ex->ctx)
        ex->drv.DevicePrimaryCtxRelease(ex->dev);
    cuda_driver_close(&ex->drv);
    free(ex);
}

const char *cuda_exec_device(const CudaExec *ex) { return ex->name; }

static size_t value_bytes(const Value *v) { return (size_t)shape_numel(&v->type.shape) * ct_dtype_size(v->type.dtype); }

/* The device address of value v. */
static CUdeviceptr addr(const CudaProgram *pr, ValueId v)
{
    if (v < 0)
        return 0;
    if (pr->lp.alias[v] >= 0)
        v = pr->lp.alias[v];
    if (pr->in_off[v] != PLAN_NONE)
        return pr->inputs + pr->in_off[v];
    if (pr->st_off[v] != PLAN_NONE)
        return pr->state + pr->st_off[v];
    return pr->block + pr->lp.offset[v];
}

/* The device's architecture as NVRTC takes it: 90 for sm_90. */
static int device_sm(const CudaExec *ex) { return ex->info.major * 10 + ex->info.minor; }

static int load_image(CudaExec *ex, const NvrtcImage *img, CUmodule *mod, CtErr *err)
{
    return cu_check(ex, ex->drv.ModuleLoadData(mod, img->data), err, "loading a %zu-byte %s", img->size,
                    img->is_ptx ? "PTX module" : "cubin");
}

/* NVRTC's image of `source` for this device, loaded as a module. */
static int load_module(CudaExec *ex, const char *source, CUmodule *mod, CtErr *err)
{
    NvrtcImage img;
    if (nvrtc_compile(&ex->nc, &ex->cache, source, device_sm(ex), &img, err))
        return -1;
    return load_image(ex, &img, mod, err);
}

/* The generated kernels: their translation units compiled in parallel, one
 * module each (loaded here, on the thread whose context is current), and
 * every launch's function from its unit's module. */
static int build_generated(CudaProgram *pr, CtErr *err)
{
    CudaExec *ex = pr->ex;
    KernelUnits units;
    units_make(pr->lp.k, pr->lp.nk, UNIT_LOOPS, 1, &units);
    NvrtcImage *imgs = calloc((size_t)units.n + 1, sizeof *imgs);
    pr->gen = calloc((size_t)units.n + 1, sizeof *pr->gen);
    CT_ASSERT(imgs && pr->gen);
    int rc = nvrtc_compile_units(&ex->nc, &ex->cache, &units, device_sm(ex), imgs, err);
    for (int j = 0; !rc && j < units.n; j++)
        if ((rc = load_image(ex, &imgs[j], &pr->gen[j], err)) == 0)
            pr->ngen++;
    for (int l = 0; !rc && l < pr->lp.nk; l++) {
        char name[32];
        snprintf(name, sizeof name, "ct_k%d", units.fn[l]);
        if (units.unit[l] >= 0)
            rc = cu_check(ex, ex->drv.ModuleGetFunction(&pr->kfn[l], pr->gen[units.unit[l]], name), err, "kernel %s",
                          name);
    }
    free(imgs);
    units_free(&units);
    return rc;
}

static int build_kernels(CudaProgram *pr, CtErr *err)
{
    CudaExec *ex = pr->ex;
    CtBuf src = {0};
    if (build_generated(pr, err))
        return -1;
    lib_source(&src);
    int rc = load_module(ex, src.s, &pr->lib, err);
    buf_free(&src);
    cache_warn_disk(&ex->cache, &ex->cache_warned, stderr);
    for (int s = 0; !rc && s < pr->lp.nsteps; s++) {
        const LpStep *st = &pr->lp.steps[s];
        pr->libfn[s] = calloc((size_t)st->nlib + 1, sizeof **pr->libfn);
        CT_ASSERT(pr->libfn[s] != NULL);
        for (int j = 0; !rc && j < st->nlib; j++)
            rc = cu_check(ex, ex->drv.ModuleGetFunction(&pr->libfn[s][j], pr->lib, st->lib[j].kernel), err,
                          "library kernel %s", st->lib[j].kernel);
        if (!rc && st->mirrored)
            rc = cu_check(ex, ex->drv.ModuleGetFunction(&pr->mirrorfn[s], pr->lib, st->mirror.kernel), err,
                          "library kernel %s", st->mirror.kernel);
    }
    return rc;
}

/* Where inputs and state go: the inputs one after another, the state as
 * the caller's CtState lays it out (so one copy moves all of it; an eval
 * graph over a training state binds its tensors in the larger block).
 * Fails naming a state tensor the caller's state lacks. */
static int place_blocks(CudaProgram *pr, const Graph *g, const CtState *state, CtErr *err)
{
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        pr->in_off[v] = pr->st_off[v] = PLAN_NONE;
        if (val->role == CT_ROLE_INPUT) {
            pr->in_off[v] = pr->in_bytes;
            pr->in_bytes += (value_bytes(val) + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
        } else if (val->role == CT_ROLE_PARAM || val->role == CT_ROLE_BUFFER || val->role == CT_ROLE_STATE) {
            int s = state ? state_find(state, val->name) : -1;
            if (s < 0 || !shape_equal(&state->e[s].type.shape, &val->type.shape) ||
                state->e[s].type.dtype != val->type.dtype)
                return ct_fail(err, "state has no tensor '%s' of the graph's shape and dtype", val->name);
            pr->st_off[v] = state->e[s].offset;
        }
    }
    pr->st_bytes = state ? state->nbytes : 0;
    return 0;
}

static int prepare_calls(CudaProgram *pr, CtErr *err)
{
    CudaExec *ex = pr->ex;
    char device[192];
    snprintf(device, sizeof device, "sm_%d%d %s", ex->info.major, ex->info.minor, ex->info.name);
    for (int s = 0; s < pr->lp.nsteps; s++) {
        const LpStep *st = &pr->lp.steps[s];
        if (st->kind == LP_GEMM) {
            if (blaslt_prepare(&ex->lt, &st->gemm, ex->opt.allow_tf32, GEMM_WORKSPACE, &pr->gemm[s], err))
                return ct_failctx(err, "step %d (GEMM %lldx%lldx%lld)", s, (long long)st->gemm.m,
                                  (long long)st->gemm.n, (long long)st->gemm.k);
            if (pr->gemm[s].workspace > pr->workspace_bytes)
                pr->workspace_bytes = pr->gemm[s].workspace;
        } else if (st->kind == LP_CONV) {
            if (dnn_prepare(&ex->dnn, &st->conv, ex->opt.allow_tf32, CONV_WORKSPACE, &ex->cache, device, NULL,
                            &pr->conv[s], err))
                return ct_failctx(err, "step %d (convolution)", s);
            if (pr->conv[s].algo.workspace > pr->workspace_bytes)
                pr->workspace_bytes = pr->conv[s].algo.workspace;
        }
    }
    return 0;
}

static int alloc_memory(CudaProgram *pr, CtErr *err)
{
    CudaExec *ex = pr->ex;
    size_t free_bytes = 0, total = 0;
    size_t sizes[5] = {pr->lp.device_bytes, pr->in_bytes, pr->st_bytes, pr->lp.scratch_bytes, pr->workspace_bytes};
    CUdeviceptr *where[5] = {&pr->block, &pr->inputs, &pr->state, &pr->scratch, &pr->workspace};
    size_t need = 0;
    for (int i = 0; i < 5; i++)
        need += sizes[i];
    if (cu_check(ex, ex->drv.MemGetInfo(&free_bytes, &total), err, "cuMemGetInfo"))
        return -1;
    if (need > free_bytes)
        return ct_fail(err,
                       "out of memory: the plan needs %zu bytes (activations %zu, inputs %zu, state %zu, scratch %zu, "
                       "workspace %zu) and %s has %zu free",
                       need, sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], ex->info.name, free_bytes);
    for (int i = 0; i < 5; i++)
        if (cu_check(ex, ex->drv.MemAlloc(where[i], sizes[i] ? sizes[i] : 1), err, "cuMemAlloc of %zu bytes",
                     sizes[i]))
            return -1;
    return 0;
}

int cuda_program_build(CudaExec *ex, const Graph *g, const CtState *state, CudaProgram **out, CtErr *err)
{
    CudaProgram *pr = calloc(1, sizeof *pr);
    CT_ASSERT(pr != NULL);
    pr->ex = ex;
    *out = NULL;
    if (cu_check(ex, ex->drv.CtxSetCurrent(ex->ctx), err, "cuCtxSetCurrent") ||
        launch_plan(g, ex->info.sms, &pr->lp, err)) {
        free(pr);
        return -1;
    }
    for (int s = 0; s < pr->lp.nsteps; s++)
        if (pr->lp.steps[s].kind == LP_UNSUPPORTED) {
            ct_fail(err, "the cuda backend has no kernel for %s yet", pr->lp.steps[s].op);
            goto fail;
        }
    pr->kfn = calloc((size_t)pr->lp.nk + 1, sizeof *pr->kfn);
    pr->libfn = calloc((size_t)pr->lp.nsteps + 1, sizeof *pr->libfn);
    pr->mirrorfn = calloc((size_t)pr->lp.nsteps + 1, sizeof *pr->mirrorfn);
    pr->gemm = calloc((size_t)pr->lp.nsteps + 1, sizeof *pr->gemm);
    pr->conv = calloc((size_t)pr->lp.nsteps + 1, sizeof *pr->conv);
    pr->in_off = calloc((size_t)g->nvalues + 1, sizeof *pr->in_off);
    pr->st_off = calloc((size_t)g->nvalues + 1, sizeof *pr->st_off);
    CT_ASSERT(pr->kfn && pr->libfn && pr->mirrorfn && pr->gemm && pr->conv && pr->in_off && pr->st_off);
    if (place_blocks(pr, g, state, err) || build_kernels(pr, err) || prepare_calls(pr, err) ||
        alloc_memory(pr, err))
        goto fail;
    *out = pr;
    return 0;
fail:
    cuda_program_free(pr);
    return -1;
}

void cuda_program_free(CudaProgram *pr)
{
    if (!pr)
        return;
    CudaDriver *d = &pr->ex->drv;
    if (pr->graph_exec)
        d->GraphExecDestroy(pr->graph_exec);
    if (pr->graph)
        d->GraphDestroy(pr->graph);
    CUdeviceptr mem[5] = {pr->block, pr->inputs, pr->state, pr->scratch, pr->workspace};
    for (int i = 0; i < 5; i++)
        if (mem[i])
            d->MemFree(mem[i]);
    for (int s = 0; s < pr->lp.nsteps; s++) {
        if (pr->libfn)
            free(pr->libfn[s]);
        if (pr->gemm && pr->gemm[s].op)
            blaslt_call_free(&pr->gemm[s]);
        if (pr->conv && pr->conv[s].conv)
            dnn_call_free(&pr->conv[s]);
    }
    for (int j = 0; j < pr->ngen; j++)
        d->ModuleUnload(pr->gen[j]);
    free(pr->gen);
    if (pr->lib)
        d->ModuleUnload(pr->lib);
    free(pr->kfn);
    free(pr->libfn);
    free(pr->mirrorfn);
    free(pr->gemm);
    free(pr->conv);
    free(pr->in_off);
    free(pr->st_off);
    launch_plan_free(&pr->lp);
    free(pr);
}

/* One library kernel launch: its arguments by value, as the kernel takes them. */
static int launch_lib(CudaProgram *pr, CUfunction f, const LibLaunch *l, CtErr *err)
{
    CudaExec *ex = pr->ex;
    union {
        CUdeviceptr p;
        long long i;
        int i32;
        float f;
        CtIndex ix;
        CtPool pool;
    } store[LIB_MAX_ARGS];
    void *params[LIB_MAX_ARGS];
    for (int a = 0; a < l->nargs; a++) {
        const LibArg *arg = &l->arg[a];
        switch (arg->kind) {
        case LA_VALUE: store[a].p = addr(pr, arg->v); break;
        case LA_SCRATCH: store[a].p = pr->scratch; break;
        case LA_NULL: store[a].p = 0; break;
        case LA_I64: store[a].i = arg->i; break;
        case LA_I32: store[a].i32 = (int)arg->i; break;
        case LA_F32: store[a].f = arg->f; break;
        case LA_INDEX: store[a].ix = arg->ix; break;
        case LA_POOL: store[a].pool = arg->pool; break;
        }
        params[a] = &store[a];
    }
    unsigned grid = lp_grid(l->items, ex->info.sms);
    return cu_check(ex, ex->drv.LaunchKernel(f, grid, 1, 1, LP_BLOCK, 1, 1, 0, ex->stream, params, NULL), err,
                    "launching %s (%u x %d)", l->kernel, grid, LP_BLOCK);
}

static int run_step(CudaProgram *pr, int s, CtErr *err)
{
    CudaExec *ex = pr->ex;
    const LpStep *st = &pr->lp.steps[s];
    int rc = 0;
    if (st->kind == LP_KERNEL) {
        const KirKernel *k = &pr->lp.k[st->launch];
        CUdeviceptr *ptr = malloc(sizeof *ptr * (size_t)(k->nbufs + 1));
        void **params = malloc(sizeof *params * (size_t)(k->nbufs + 1));
        CT_ASSERT(ptr && params);
        for (int b = 0; b < k->nbufs; b++) {
            ptr[b] = addr(pr, k->bufs[b].value);
            params[b] = &ptr[b];
        }
        rc = cu_check(ex, ex->drv.LaunchKernel(pr->kfn[st->launch], st->grid, 1, 1, st->block, 1, 1, 0, ex->stream,
                                               params, NULL),
                      err, "launching ct_k%d (%u x %u)", st->launch, st->grid, st->block);
        free(ptr);
        free(params);
    } else if (st->kind == LP_GEMM) {
        const GemmDesc *d = &st->gemm;
        GemmPtrs p = {addr(pr, d->a), addr(pr, d->b), addr(pr, d->epi.d), addr(pr, d->epi.residual),
                      addr(pr, d->epi.bias), addr(pr, d->epi.aux)};
        rc = blaslt_run(&ex->lt, &pr->gemm[s], &p, pr->workspace, ex->stream, err);
    } else if (st->kind == LP_CONV) {
        const ConvDesc *c = &st->conv;
        int back = c->dir == CONV_BWD_FILTER;
        ConvPtrs p = {addr(pr, c->x), st->mirrored ? pr->scratch : addr(pr, c->wt),
                      addr(pr, c->dir == CONV_FWD ? c->epi.d : c->y), addr(pr, c->epi.bias),
                      addr(pr, c->epi.residual)};
        if (st->mirrored && !back)
            rc = launch_lib(pr, pr->mirrorfn[s], &st->mirror, err);
        if (!rc)
            rc = dnn_run(&ex->dnn, &pr->conv[s], c, &p, pr->workspace, err);
        if (!rc && st->mirrored && back)
            rc = launch_lib(pr, pr->mirrorfn[s], &st->mirror, err);
    } else if (st->kind == LP_COPY) {
        rc = cu_check(ex,
                      ex->drv.MemcpyDtoDAsync(addr(pr, st->copy_dst), addr(pr, st->copy_src),
                                              value_bytes(&pr->lp.og.values[st->copy_src]), ex->stream),
                      err, "copy of %%%d into %%%d", st->copy_src, st->copy_dst);
    }
    for (int j = 0; !rc && j < st->nlib; j++)
        rc = launch_lib(pr, pr->libfn[s][j], &st->lib[j], err);
    if (!rc && ex->opt.sync_each)
        rc = cu_check(ex, ex->drv.StreamSynchronize(ex->stream), err, "running step %d", s);
    return rc ? ct_failctx(err, "step %d of %d", s, pr->lp.nsteps) : 0;
}

static int enqueue(CudaProgram *pr, CtErr *err)
{
    for (int s = 0; s < pr->lp.nsteps; s++)
        if (run_step(pr, s, err))
            return -1;
    return 0;
}

/* The steps as one CUDA graph, captured on the first call. */
static int replay(CudaProgram *pr, CtErr *err)
{
    CudaExec *ex = pr->ex;
    if (!pr->graph_exec) {
        if (cu_check(ex, ex->drv.StreamBeginCapture(ex->stream, CAPTURE_THREAD_LOCAL), err, "beginning a capture"))
            return -1;
        int rc = enqueue(pr, err);
        CUresult r = ex->drv.StreamEndCapture(ex->stream, &pr->graph);
        if (rc || cu_check(ex, r, err, "ending the capture") ||
            cu_check(ex, ex->drv.GraphInstantiate(&pr->graph_exec, pr->graph, 0), err, "instantiating the graph"))
            return -1;
    }
    return cu_check(ex, ex->drv.GraphLaunch(pr->graph_exec, ex->stream), err, "launching the step's graph");
}

int cuda_program_run(CudaProgram *pr, const Graph *g, CtState *state, const CtTensor *inputs, int ninputs,
                     CtTensor *outputs, CtErr *err)
{
    CudaExec *ex = pr->ex;
    int k = 0, nout = 0, rc = -1;
    size_t st_bytes = state ? state->nbytes : 0;
    if (st_bytes != pr->st_bytes)
        return ct_fail(err, "the state has %zu bytes, the program was built for %zu", st_bytes, pr->st_bytes);
    if (cu_check(ex, ex->drv.CtxSetCurrent(ex->ctx), err, "cuCtxSetCurrent"))
        return -1;
    pr->moved_in = pr->moved_out = pr->moved_state = 0;
    if (st_bytes && (pr->runs == 0 || pr->state_stale)) {
        if (cu_check(ex, ex->drv.MemcpyHtoD(pr->state, state->data, state->nbytes), err, "uploading the state"))
            return -1;
        pr->state_stale = 0;
        pr->moved_state = state->nbytes;
    }
    for (ValueId v = 0; v < g->nvalues; v++) {
        if (pr->in_off[v] == PLAN_NONE)
            continue;
        const Value *val = &g->values[v];
        if (k >= ninputs || !shape_equal(&inputs[k].type.shape, &val->type.shape) ||
            inputs[k].type.dtype != val->type.dtype)
            return ct_fail(err, "input %d ('%s') is missing or has the wrong shape or dtype", k, val->name);
        if (cu_check(ex, ex->drv.MemcpyHtoD(pr->inputs + pr->in_off[v], inputs[k].data, value_bytes(val)), err,
                     "uploading input %d", k))
            return -1;
        pr->moved_in += value_bytes(val);
        k++;
    }
    int graphs = ex->opt.graphs && !ex->opt.sync_each && pr->runs > 0;
    if ((graphs ? replay(pr, err) : enqueue(pr, err)) ||
        cu_check(ex, ex->drv.StreamSynchronize(ex->stream), err, "running the step (%d steps%s)", pr->lp.nsteps,
                 graphs ? ", as a CUDA graph" : ""))
        return -1;
    pr->runs++;
    for (; nout < g->noutputs; nout++) {
        const Value *val = &g->values[g->outputs[nout]];
        tensor_alloc(&outputs[nout], val->type);
        if (ex->opt.outputs_on_device)
            continue;
        if (cu_check(ex, ex->drv.MemcpyDtoH(outputs[nout].data, addr(pr, g->outputs[nout]), value_bytes(val)), err,
                     "downloading output %d", nout)) {
            tensor_free(&outputs[nout]);
            goto fail;
        }
        pr->moved_out += value_bytes(val);
    }
    rc = 0;
fail:
    if (rc)
        for (int o = 0; o < nout; o++)
            tensor_free(&outputs[o]);
    return rc;
}

int cuda_program_state_to_host(CudaProgram *pr, CtState *state, CtErr *err)
{
    CudaExec *ex = pr->ex;
    if (!pr->st_bytes || pr->runs == 0 || pr->state_stale) /* the device has nothing newer */
        return 0;
    if (state->nbytes != pr->st_bytes)
        return ct_fail(err, "the state has %zu bytes, the program was built for %zu", state->nbytes, pr->st_bytes);
    if (cu_check(ex, ex->drv.CtxSetCurrent(ex->ctx), err, "cuCtxSetCurrent"))
        return -1;
    return cu_check(ex, ex->drv.MemcpyDtoH(state->data, pr->state, state->nbytes), err, "downloading the state");
}

void cuda_program_state_changed(CudaProgram *pr) { pr->state_stale = 1; }

void cuda_program_moved(const CudaProgram *pr, size_t *in, size_t *out, size_t *state)
{
    *in = pr->moved_in;
    *out = pr->moved_out;
    *state = pr->moved_state;
}
