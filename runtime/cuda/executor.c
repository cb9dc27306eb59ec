/* Contract: cuda_loaded_run computes what the ref backend computes for
 * the graph the program was compiled from, on the device, every driver and
 * library call checked. */
#include "runtime/cuda/executor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/cuda/blaslt.h"
#include "runtime/cuda/dnn.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/step_profile.h"
#include "runtime/cuda/twin_choice.h"

enum { STREAM_NON_BLOCKING = 1, CAPTURE_THREAD_LOCAL = 1 };
#define GEMM_WORKSPACE ((size_t)32 << 20) /* cuBLASLt's advice for Hopper */
#define CONV_WORKSPACE ((size_t)256 << 20)
#define TWIN_RUNS 5 /* a depthwise step's way timed over these runs, after one to warm up */

struct CudaExec {
    CudaExecOptions opt;
    CudaDriver drv;
    CudaDeviceInfo info;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    BlasLt lt;
    Dnn dnn;
    KernelCache choices; /* cuDNN's and cuBLASLt's algorithm choices (runtime/cuda/dnn.h, blaslt.h) */
    int have_choices, have_lt, have_dnn;
    char name[192];
    char target[192]; /* "sm_90 NVIDIA H200": the device in the choices' keys */
};

struct CudaLoaded {
    CudaExec *ex;
    const CtProgram *p;
    const LaunchPlan *lp; /* p's */
    CUmodule *gen;       /* the generated kernels: per translation unit (codegen/units.h) */
    int ngen;            /* of them loaded */
    CUmodule lib[LIB_NTYPES]; /* the library units the program has, by LibType; NULL where none */
    CUfunction *kfn;     /* per launch id */
    CUfunction **libfn;  /* per step: one per LibLaunch, then one per fallback launch */
    CUfunction *mirrorfn; /* per step: its filter copy's kernel, where mirrored */
    BlasLtCall *gemm;    /* per step */
    char *unfused;       /* per step: cuBLASLt refused its bias gradient's epilogue, or a convolution's call
                          * makes no statistics (no graph plan, or CTIMM_CONV_STATS=kernel); the fallback runs */
    DnnCall *conv;       /* per step: LP_CONV's call, and a twin's where it may run (twin_wanted) */
    unsigned char *twin_on; /* per step: its twin runs instead of its library kernels */
    float *twin_ms;      /* per step, two: each way's time as timed (TwinChoice.ms), for the profile */
    TwinMode dw_mode;    /* CTIMM_DWCONV */
    ConvStatsMode stats_mode; /* CTIMM_CONV_STATS */
    int timed;           /* the libraries' choices timed (lib_choice_timed) */
    size_t *in_off;      /* per value: offset in the input block, or PLAN_NONE */
    size_t *st_off;      /* per value: offset in the state block (the CtState's layout), or PLAN_NONE */
    size_t in_bytes, st_bytes, workspace_bytes;
    size_t device_bytes; /* allocated on the device, all of it at load */
    CUdeviceptr block, inputs, state, scratch, workspace, counters, kept; /* counters: zero between launches */
    unsigned char *staging; /* pinned, in_bytes: the inputs on their way to the device */
    CUgraph graph;
    CUgraphExec graph_exec;
    int eager;              /* the step could not be captured as a graph: every run enqueues it */
    StepProfile prof;       /* with CudaExecOptions.profile */
    int have_prof;
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
    if (cache_open(&ex->choices, &(CacheOptions){.memory_fallback = 1, .first_wins = 1}, err))
        goto fail;
    ex->have_choices = 1;
    snprintf(ex->name, sizeof ex->name, "%s (sm_%d%d, %d SMs, %zu GiB)", ex->info.name, ex->info.major,
             ex->info.minor, ex->info.sms, ex->info.total_bytes >> 30);
    snprintf(ex->target, sizeof ex->target, "sm_%d%d %s", ex->info.major, ex->info.minor, ex->info.name);
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
    if (ex->have_choices)
        cache_close(&ex->choices);
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

int cuda_exec_cc(const CudaExec *ex) { return ex->info.major * 10 + ex->info.minor; }


/* The device address of value v. */
static CUdeviceptr addr(const CudaLoaded *ld, ValueId v)
{
    if (v < 0)
        return 0;
    if (ld->lp->alias[v] >= 0)
        v = ld->lp->alias[v];
    if (ld->in_off[v] != PLAN_NONE)
        return ld->inputs + ld->in_off[v];
    if (ld->st_off[v] != PLAN_NONE)
        return ld->state + ld->st_off[v];
    return ld->block + ld->lp->offset[v];
}

static int load_image(CudaExec *ex, const CudaImage *img, CUmodule *mod, CtErr *err)
{
    return cu_check(ex, ex->drv.ModuleLoadData(mod, img->data), err, "loading a %zu-byte %s (%s)", img->size,
                    img->is_ptx ? "PTX module" : "cubin", img->arch);
}

/* Library kernel `kernel` from the module of its storage type. */
static int lib_function(CudaLoaded *ld, const char *kernel, CUfunction *fn, CtErr *err)
{
    int t = lib_kernel_type(kernel);
    if (t < 0 || !ld->lib[t])
        return ct_fail(err, "library kernel %s: the program has no library image defining it", kernel);
    return cu_check(ld->ex, ld->ex->drv.ModuleGetFunction(fn, ld->lib[t], kernel), err, "library kernel %s", kernel);
}

/* One module per image of the program, loaded on the thread whose context
 * is current, and every launch's and library step's function from its
 * module. */
static int load_modules(CudaLoaded *ld, CtErr *err)
{
    CudaExec *ex = ld->ex;
    const CudaProgram *c = &ld->p->cuda;
    int rc = 0;
    ld->gen = calloc((size_t)c->nunits + 1, sizeof *ld->gen);
    CT_ASSERT(ld->gen != NULL);
    for (int j = 0; !rc && j < c->nunits; j++)
        if ((rc = load_image(ex, &c->units[j], &ld->gen[j], err)) == 0)
            ld->ngen++;
    for (int l = 0; !rc && l < ld->lp->nk; l++) {
        char name[32];
        snprintf(name, sizeof name, "ct_k%d", c->fn[l]);
        if (c->unit[l] >= 0)
            rc = cu_check(ex, ex->drv.ModuleGetFunction(&ld->kfn[l], ld->gen[c->unit[l]], name), err, "kernel %s",
                          name);
    }
    for (int t = 0; !rc && t < LIB_NTYPES; t++)
        if (c->lib[t].size)
            rc = load_image(ex, &c->lib[t], &ld->lib[t], err);
    for (int s = 0; !rc && s < ld->lp->nsteps; s++) {
        const LpStep *st = &ld->lp->steps[s];
        ld->libfn[s] = calloc((size_t)(st->nlib + st->nfallback) + 1, sizeof **ld->libfn);
        CT_ASSERT(ld->libfn[s] != NULL);
        for (int j = 0; !rc && j < st->nlib + st->nfallback; j++)
            rc = lib_function(ld, j < st->nlib ? st->lib[j].kernel : st->fallback[j - st->nlib].kernel,
                              &ld->libfn[s][j], err);
        if (!rc && st->mirrored)
            rc = lib_function(ld, st->mirror.kernel, &ld->mirrorfn[s], err);
    }
    return rc;
}

/* Where inputs and state go: the inputs one after another, the state as
 * the caller's CtState lays it out (so one copy moves all of it; an eval
 * graph over a training state binds its tensors in the larger block).
 * Fails naming a state tensor the caller's state lacks. */
static int place_blocks(CudaLoaded *ld, const Graph *g, const CtState *state, CtErr *err)
{
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        ld->in_off[v] = ld->st_off[v] = PLAN_NONE;
        if (val->role == CT_ROLE_INPUT) {
            ld->in_off[v] = ld->in_bytes;
            ld->in_bytes += (value_bytes(val) + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
        } else if (role_is_state(val->role)) {
            int s = state ? state_find(state, val->name) : -1;
            if (s < 0 || !shape_equal(&state->e[s].type.shape, &val->type.shape) ||
                state->e[s].type.dtype != val->type.dtype)
                return ct_fail(err, "state has no tensor '%s' of the graph's shape and dtype", val->name);
            ld->st_off[v] = state->e[s].offset;
        }
    }
    ld->st_bytes = state ? state->nbytes : 0;
    return 0;
}

/* The buffers the libraries' candidates are timed on: convolutions' x, w
 * and y are GEMMs' A, B and D, each as large as the largest use. */
typedef struct ChoiceScratch {
    DnnScratch dnn;
    GemmScratch gemm;
} ChoiceScratch;

static void free_choice_scratch(CudaLoaded *ld, ChoiceScratch *sc)
{
    (void)ld->ex->drv.StreamSynchronize(ld->ex->stream); /* the zeroing, where nothing was timed after it */
    CUdeviceptr *p[6] = {&sc->dnn.x, &sc->dnn.w, &sc->dnn.y, &sc->dnn.workspace, &sc->gemm.aux, &sc->gemm.bias};
    for (int i = 0; i < 6; i++)
        if (*p[i])
            (void)ld->ex->drv.MemFree(*p[i]);
    memset(sc, 0, sizeof *sc);
}

static size_t most(size_t a, size_t b) { return a > b ? a : b; }

/* Whether step st's twin is prepared: it is to run (CTIMM_DWCONV=cudnn),
 * or to be timed against the library's kernels. */
static int twin_wanted(const CudaLoaded *ld, const LpStep *st)
{
    return st->twin && (ld->dw_mode == TWIN_CUDNN || (ld->dw_mode == TWIN_AUTO && ld->timed));
}

/* Device buffers to time cuDNN's candidates on (cudnnFind*Ex, as torch's
 * cudnn.benchmark) and cuBLASLt's (blaslt_choose), as large as the
 * program's largest convolution and GEMM need, freed once every choice is
 * made (and cached on disk: a later process allocates them and finds
 * nothing left to time). 0 where the device has not the room: the choices
 * are then the libraries' heuristics'. */
static int alloc_choice_scratch(CudaLoaded *ld, ChoiceScratch *sc)
{
    const CudaDriver *d = &ld->ex->drv;
    size_t bx = 0, bw = 0, by = 0, baux = 0, bbias = 0;
    for (int s = 0; s < ld->lp->nsteps; s++) {
        const LpStep *st = &ld->lp->steps[s];
        if (st->kind == LP_CONV || twin_wanted(ld, st)) {
            const ConvDesc *c = &st->conv;
            bx = most(bx, (size_t)(c->n * c->c * c->h * c->w) * ct_dtype_size(c->x_type));
            bw = most(bw, (size_t)(c->k * (c->c / c->groups) * c->r * c->s) * ct_dtype_size(c->w_type));
            by = most(by, (size_t)(c->n * c->k * c->p * c->q) * ct_dtype_size(c->y_type));
        } else if (st->kind == LP_GEMM) {
            size_t a, b, dst;
            blaslt_operand_bytes(&st->gemm, &a, &b, &dst);
            bx = most(bx, a), bw = most(bw, b), by = most(by, dst);
            baux = st->gemm.epi.aux >= 0 ? most(baux, dst) : baux;
            bbias = most(bbias, sizeof(float) * (size_t)most((size_t)st->gemm.m, (size_t)st->gemm.n));
        }
    }
    memset(sc, 0, sizeof *sc);
    if (!bx)
        return 0;
    size_t ws = most(CONV_WORKSPACE, GEMM_WORKSPACE);
    int ok = d->MemAlloc(&sc->dnn.x, bx) == CU_SUCCESS && d->MemAlloc(&sc->dnn.w, bw) == CU_SUCCESS &&
             d->MemAlloc(&sc->dnn.y, by) == CU_SUCCESS && d->MemAlloc(&sc->dnn.workspace, ws) == CU_SUCCESS &&
             (!baux || d->MemAlloc(&sc->gemm.aux, baux) == CU_SUCCESS) &&
             (!bbias || d->MemAlloc(&sc->gemm.bias, bbias) == CU_SUCCESS);
    /* zeros: timing garbage bits could time NaN paths no training step takes */
    CUstream st = ld->ex->stream;
    ok = ok && d->MemsetD8Async(sc->dnn.x, 0, bx, st) == CU_SUCCESS &&
         d->MemsetD8Async(sc->dnn.w, 0, bw, st) == CU_SUCCESS;
    if (!ok) {
        free_choice_scratch(ld, sc);
        return 0;
    }
    sc->dnn.workspace_bytes = sc->gemm.workspace_bytes = ws;
    sc->gemm.a = sc->dnn.x, sc->gemm.b = sc->dnn.w, sc->gemm.d = sc->dnn.y, sc->gemm.workspace = sc->dnn.workspace;
    return 1;
}

/* The libraries' workspace the prepared calls need: every GEMM's and
 * convolution step's, and the twins' where `twins` says (all zero before
 * the choice: none; NULL: every twin prepared). */
static size_t calls_workspace(const CudaLoaded *ld, const unsigned char *twins)
{
    size_t need = 0;
    for (int s = 0; s < ld->lp->nsteps; s++) {
        const LpStep *st = &ld->lp->steps[s];
        if (st->kind == LP_GEMM)
            need = most(need, ld->gemm[s].workspace);
        else if (st->kind == LP_CONV || (twins ? twins[s] : ld->conv[s].conv != NULL))
            need = most(need, ld->conv[s].algo.workspace);
    }
    return need;
}

static int prepare_calls(CudaLoaded *ld, CtErr *err)
{
    CudaExec *ex = ld->ex;
    ChoiceScratch sc = {0};
    if (lib_choice_timed(&ld->timed, err) || twin_mode(&ld->dw_mode, err) || conv_stats_mode(&ld->stats_mode, err))
        return -1;
    int timed = ld->timed && alloc_choice_scratch(ld, &sc);
    int rc = 0;
    for (int s = 0; s < ld->lp->nsteps && !rc; s++) {
        const LpStep *st = &ld->lp->steps[s];
        if (st->kind == LP_GEMM) {
            /* without the bias gradient's epilogue where cuBLASLt has no algorithm for it */
            GemmDesc plain = st->gemm;
            plain.epi.bgrad = -1;
            plain.bias_type = plain.d_type;
            ld->unfused[s] = blaslt_prepare(&ex->lt, &st->gemm, ex->opt.allow_tf32, GEMM_WORKSPACE, &ld->gemm[s],
                                            err) != 0;
            if (ld->unfused[s] && (st->gemm.epi.bgrad < 0 ||
                 blaslt_prepare(&ex->lt, &plain, ex->opt.allow_tf32, GEMM_WORKSPACE, &ld->gemm[s], err))) {
                rc = ct_failctx(err, "step %d (GEMM %lldx%lldx%lld)", s, (long long)st->gemm.m,
                                (long long)st->gemm.n, (long long)st->gemm.k);
                break;
            }
            if (ld->unfused[s] && err)
                err->msg[0] = '\0'; /* the refusal the fallback answered */
            if (timed && blaslt_choose(&ex->lt, &ld->gemm[s], ld->unfused[s] ? &plain : &st->gemm, &ex->drv,
                                       ex->stream, &sc.gemm, &ex->choices, ex->target, err)) {
                rc = ct_failctx(err, "step %d (GEMM %lldx%lldx%lld)", s, (long long)st->gemm.m,
                                (long long)st->gemm.n, (long long)st->gemm.k);
                break;
            }
        } else if (st->kind == LP_CONV || twin_wanted(ld, st)) {
            ConvDesc c = st->conv;
            if (ld->stats_mode == STATS_KERNEL)
                c.stats = -1;
            if (dnn_prepare(&ex->dnn, &c, ex->opt.allow_tf32, CONV_WORKSPACE, &ex->choices, ex->target,
                            timed ? &sc.dnn : NULL, &ld->conv[s], err)) {
                if (st->kind == LP_LIB && ld->dw_mode == TWIN_AUTO) { /* no twin to time: the library's kernels */
                    if (err)
                        err->msg[0] = '\0';
                    continue;
                }
                rc = ct_failctx(err, "step %d (convolution)", s);
                break;
            }
        }
    }
    free_choice_scratch(ld, &sc);
    ld->workspace_bytes = calls_workspace(ld, NULL);
    return rc;
}

/* The depthwise steps' twins no longer prepared: their steps run the
 * library's kernels, untimed. */
static void drop_twins(CudaLoaded *ld)
{
    for (int s = 0; s < ld->lp->nsteps; s++)
        if (ld->lp->steps[s].kind == LP_LIB && ld->conv[s].conv)
            dnn_call_free(&ld->conv[s]);
    ld->workspace_bytes = calls_workspace(ld, NULL);
}

static int alloc_memory(CudaLoaded *ld, CtErr *err)
{
    CudaExec *ex = ld->ex;
    size_t free_bytes = 0, total = 0;
    size_t sizes[7] = {ld->lp->device_bytes,   ld->in_bytes,
                       ld->st_bytes,           ld->lp->scratch_bytes,
                       ld->workspace_bytes,    ld->lp->counters * sizeof(unsigned),
                       ld->lp->kept_bytes};
    CUdeviceptr *where[7] = {&ld->block,     &ld->inputs,   &ld->state, &ld->scratch,
                             &ld->workspace, &ld->counters, &ld->kept};
    size_t need = 0;
    for (int i = 0; i < 7; i++)
        need += sizes[i];
    if (cu_check(ex, ex->drv.MemGetInfo(&free_bytes, &total), err, "cuMemGetInfo"))
        return -1;
    /* a twin's workspace serves only its timing: where it is what the
     * device lacks, the twins go (CTIMM_DWCONV=cudnn asked for them: kept) */
    size_t without_twins = calls_workspace(ld, ld->twin_on);
    if (need > free_bytes && need - sizes[4] + without_twins <= free_bytes && ld->dw_mode == TWIN_AUTO) {
        drop_twins(ld);
        need -= sizes[4] - without_twins;
        sizes[4] = without_twins;
    }
    if (need > free_bytes)
        return ct_fail(err,
                       "out of memory: the plan needs %zu bytes (activations %zu, inputs %zu, state %zu, scratch %zu, "
                       "workspace %zu) and %s has %zu free",
                       need, sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], ex->info.name, free_bytes);
    for (int i = 0; i < 7; i++) {
        if (cu_check(ex, ex->drv.MemAlloc(where[i], sizes[i] ? sizes[i] : 1), err, "cuMemAlloc of %zu bytes",
                     sizes[i]))
            return -1;
        ld->device_bytes += sizes[i] ? sizes[i] : 1;
    }
    return cu_check(ex, ex->drv.MemsetD8Async(ld->counters, 0, sizes[5], ex->stream), err, "zeroing the counters");
}

/* Pinned host memory the inputs pass through, so that their upload is a
 * DMA on the stream, ordered before the steps, that the host need not wait
 * for (from pageable memory the driver stages the copy itself, on the
 * calling thread). */
static int alloc_staging(CudaLoaded *ld, CtErr *err)
{
    CudaExec *ex = ld->ex;
    if (!ld->in_bytes)
        return 0;
    void *p = NULL;
    if (cu_check(ex, ex->drv.MemAllocHost(&p, ld->in_bytes), err, "cuMemAllocHost of %zu bytes for the inputs",
                 ld->in_bytes))
        return -1;
    ld->staging = p;
    return 0;
}

static int choose_twins(CudaLoaded *ld, CtErr *err);
static int fit_workspace(CudaLoaded *ld, CtErr *err);

int cuda_load(CudaExec *ex, const CtProgram *p, const CtState *state, CudaLoaded **out, CtErr *err)
{
    CudaLoaded *ld = calloc(1, sizeof *ld);
    CT_ASSERT(ld != NULL);
    ld->ex = ex;
    ld->p = p;
    ld->lp = &p->cuda.lp;
    *out = NULL;
    ld->kfn = calloc((size_t)ld->lp->nk + 1, sizeof *ld->kfn);
    ld->libfn = calloc((size_t)ld->lp->nsteps + 1, sizeof *ld->libfn);
    ld->mirrorfn = calloc((size_t)ld->lp->nsteps + 1, sizeof *ld->mirrorfn);
    ld->gemm = calloc((size_t)ld->lp->nsteps + 1, sizeof *ld->gemm);
    ld->unfused = calloc((size_t)ld->lp->nsteps + 1, 1);
    ld->conv = calloc((size_t)ld->lp->nsteps + 1, sizeof *ld->conv);
    ld->twin_on = calloc((size_t)ld->lp->nsteps + 1, 1);
    ld->twin_ms = calloc(2 * (size_t)ld->lp->nsteps + 1, sizeof *ld->twin_ms);
    ld->in_off = calloc((size_t)p->g.nvalues + 1, sizeof *ld->in_off);
    ld->st_off = calloc((size_t)p->g.nvalues + 1, sizeof *ld->st_off);
    CT_ASSERT(ld->kfn && ld->libfn && ld->mirrorfn && ld->gemm && ld->unfused && ld->conv && ld->twin_on &&
              ld->twin_ms && ld->in_off && ld->st_off);
    if (cu_check(ex, ex->drv.CtxSetCurrent(ex->ctx), err, "cuCtxSetCurrent") ||
        place_blocks(ld, &p->g, state, err) || load_modules(ld, err) || prepare_calls(ld, err) ||
        alloc_memory(ld, err) || alloc_staging(ld, err) || choose_twins(ld, err) ||
        fit_workspace(ld, err))
        goto fail;
    if (ex->opt.profile) {
        ld->have_prof = 1; /* closed by cuda_loaded_free, also after a failed open */
        if (step_profile_open(&ld->prof, &ex->drv, ld->lp->nsteps, err))
            goto fail;
        ld->prof.twin = ld->twin_on;
        ld->prof.twin_ms = ld->twin_ms;
    }
    *out = ld;
    return 0;
fail:
    cuda_loaded_free(ld);
    return -1;
}

void cuda_loaded_free(CudaLoaded *ld)
{
    if (!ld)
        return;
    CudaDriver *d = &ld->ex->drv;
    if (ld->have_prof) {
        double *floor_s = calloc((size_t)ld->lp->nsteps + 1, sizeof *floor_s);
        CT_ASSERT(floor_s != NULL);
        const char *device = cuda_program_floors(&ld->p->cuda, &ld->p->g, ld->ex->info.name, ld->ex->opt.allow_tf32,
                                                 floor_s);
        CtBuf report = {0};
        step_profile_report(&ld->prof, ld->lp, &ld->p->g, device ? floor_s : NULL, device, &report);
        if (report.s)
            fputs(report.s, stderr);
        buf_free(&report);
        free(floor_s);
        step_profile_close(&ld->prof);
    }
    if (ld->graph_exec)
        d->GraphExecDestroy(ld->graph_exec);
    if (ld->graph)
        d->GraphDestroy(ld->graph);
    CUdeviceptr mem[7] = {ld->block, ld->inputs, ld->state, ld->scratch, ld->workspace, ld->counters, ld->kept};
    for (int i = 0; i < 7; i++)
        if (mem[i])
            d->MemFree(mem[i]);
    if (ld->staging)
        d->MemFreeHost(ld->staging);
    for (int s = 0; s < ld->lp->nsteps; s++) {
        free(ld->libfn[s]);
        if (ld->gemm[s].op)
            blaslt_call_free(&ld->gemm[s]);
        if (ld->conv[s].conv)
            dnn_call_free(&ld->conv[s]);
    }
    for (int j = 0; j < ld->ngen; j++)
        d->ModuleUnload(ld->gen[j]);
    free(ld->gen);
    for (int t = 0; t < LIB_NTYPES; t++)
        if (ld->lib[t])
            d->ModuleUnload(ld->lib[t]);
    free(ld->kfn);
    free(ld->libfn);
    free(ld->mirrorfn);
    free(ld->gemm);
    free(ld->unfused);
    free(ld->conv);
    free(ld->twin_on);
    free(ld->twin_ms);
    free(ld->in_off);
    free(ld->st_off);
    free(ld);
}

/* One library kernel launch: its arguments by value, as the kernel takes them. */
static int launch_lib(CudaLoaded *ld, CUfunction f, const LibLaunch *l, CtErr *err)
{
    CudaExec *ex = ld->ex;
    unsigned long long ptr[LIB_MAX_ARGS] = {0};
    LibArgStore store[LIB_MAX_ARGS];
    void *params[LIB_MAX_ARGS];
    for (int a = 0; a < l->nargs; a++)
        ptr[a] = l->arg[a].kind == LA_VALUE      ? addr(ld, l->arg[a].v)
                 : l->arg[a].kind == LA_SCRATCH  ? ld->scratch + (CUdeviceptr)l->arg[a].i
                 : l->arg[a].kind == LA_COUNTERS ? ld->counters
                 : l->arg[a].kind == LA_KEPT     ? ld->kept + (CUdeviceptr)l->arg[a].i
                                                 : 0;
    lib_params(l, ptr, store, params);
    unsigned grid = lp_grid(l->items, ld->p->opt.cuda_sms); /* as the plan's kernels: the program's SMs */
    CUresult r = ex->drv.LaunchKernel(f, grid, 1, 1, LP_BLOCK, 1, 1, (unsigned)l->shared, ex->stream, params, NULL);
    return cu_check(ex, r, err, "launching %s (%u x %d)", l->kernel, grid, LP_BLOCK);
}

static int run_step(CudaLoaded *ld, int s, CtErr *err)
{
    CudaExec *ex = ld->ex;
    const LpStep *st = &ld->lp->steps[s];
    int rc = 0, twin = ld->twin_on[s];
    if (st->kind == LP_KERNEL) {
        const KirKernel *k = &ld->lp->k[st->launch];
        CUdeviceptr *ptr = malloc(sizeof *ptr * (size_t)(k->nbufs + 1));
        void **params = malloc(sizeof *params * (size_t)(k->nbufs + 1));
        CT_ASSERT(ptr && params);
        for (int b = 0; b < k->nbufs; b++) {
            ptr[b] = addr(ld, k->bufs[b].value);
            params[b] = &ptr[b];
        }
        rc = cu_check(ex, ex->drv.LaunchKernel(ld->kfn[st->launch], st->grid, 1, 1, st->block, 1, 1, 0, ex->stream,
                                               params, NULL),
                      err, "launching ct_k%d (%u x %u)", st->launch, st->grid, st->block);
        free(ptr);
        free(params);
    } else if (st->kind == LP_GEMM) {
        const GemmDesc *d = &st->gemm;
        GemmPtrs p = {addr(ld, d->a), addr(ld, d->b), addr(ld, d->epi.d), addr(ld, d->epi.residual),
                      addr(ld, ld->unfused[s] || d->epi.bgrad < 0 ? d->epi.bias : d->epi.bgrad), addr(ld, d->epi.aux)};
        rc = blaslt_run(&ex->lt, &ld->gemm[s], &p, ld->workspace, ex->stream, err);
    } else if (st->kind == LP_CONV || twin) {
        const ConvDesc *c = &st->conv;
        int back = c->dir == CONV_BWD_FILTER;
        ConvPtrs p = {addr(ld, c->x), st->mirrored ? ld->scratch : addr(ld, c->wt),
                      addr(ld, c->dir == CONV_FWD ? c->epi.d : c->y), addr(ld, c->epi.bias),
                      addr(ld, c->epi.residual), c->stats >= 0 ? ld->kept + (CUdeviceptr)c->stats : 0};
        if (st->mirrored && !back)
            rc = launch_lib(ld, ld->mirrorfn[s], &st->mirror, err);
        if (!rc)
            rc = dnn_run(&ex->dnn, &ld->conv[s], c, &p, ld->workspace, err);
        if (st->kind == LP_CONV && c->stats >= 0 && !ld->conv[s].stats_plan) /* no plan, or refused when run */
            ld->unfused[s] = 1;
        if (!rc && st->mirrored && back)
            rc = launch_lib(ld, ld->mirrorfn[s], &st->mirror, err);
    } else if (st->kind == LP_COPY) {
        rc = cu_check(ex,
                      ex->drv.MemcpyDtoDAsync(addr(ld, st->copy_dst), addr(ld, st->copy_src),
                                              value_bytes(&ld->lp->og.values[st->copy_src]), ex->stream),
                      err, "copy of %%%d into %%%d", st->copy_src, st->copy_dst);
    }
    for (int j = 0; !rc && !twin && j < st->nlib; j++)
        rc = launch_lib(ld, ld->libfn[s][j], &st->lib[j], err);
    for (int j = 0; !rc && (ld->unfused[s] || twin) && j < st->nfallback; j++)
        rc = launch_lib(ld, ld->libfn[s][st->nlib + j], &st->fallback[j], err);
    if (!rc && ex->opt.sync_each)
        rc = cu_check(ex, ex->drv.StreamSynchronize(ex->stream), err, "running step %d", s);
    return rc ? ct_failctx(err, "step %d of %d", s, ld->lp->nsteps) : 0;
}

typedef struct TwinTime {
    CudaLoaded *ld;
    int s;
} TwinTime;

/* Step s run `way` (twin_choice.h): one run to warm up, then TWIN_RUNS
 * between two events. */
static int time_way(void *vctx, int way, float *ms, CtErr *err)
{
    const TwinTime *k = vctx;
    CudaLoaded *ld = k->ld;
    const CudaDriver *d = &ld->ex->drv;
    CUevent ev[2] = {0};
    ld->twin_on[k->s] = (unsigned char)way;
    int rc = cu_check(ld->ex, d->EventCreate(&ev[0], 0), err, "cuEventCreate") ||
             cu_check(ld->ex, d->EventCreate(&ev[1], 0), err, "cuEventCreate") || run_step(ld, k->s, err) ||
             cu_check(ld->ex, d->EventRecord(ev[0], ld->ex->stream), err, "cuEventRecord");
    for (int t = 0; !rc && t < TWIN_RUNS; t++)
        rc = run_step(ld, k->s, err);
    rc = rc || cu_check(ld->ex, d->EventRecord(ev[1], ld->ex->stream), err, "cuEventRecord") ||
         cu_check(ld->ex, d->EventSynchronize(ev[1]), err, "running step %d", k->s) ||
         cu_check(ld->ex, d->EventElapsedTime(ms, ev[0], ev[1]), err, "cuEventElapsedTime");
    for (int i = 0; i < 2; i++)
        if (ev[i])
            d->EventDestroy(ev[i]);
    ld->twin_on[k->s] = 0;
    *ms /= TWIN_RUNS;
    return rc ? -1 : 0;
}

/* What a depthwise step's choice depends on: its convolution, the
 * launches of both ways, cuDNN's algorithm for the twin, the library's
 * image (its bytes' hash) and the device. */
static void twin_key_parts(const CudaLoaded *ld, int s, char *key, size_t nkey, char *version, size_t nversion,
                           char *options, size_t noptions)
{
    const LpStep *st = &ld->lp->steps[s];
    conv_desc_key(&st->conv, key, nkey);
    size_t at = strlen(key);
    for (int j = 0; j < st->nlib + st->nfallback && at < nkey; j++) {
        const LibLaunch *l = j < st->nlib ? &st->lib[j] : &st->fallback[j - st->nlib];
        at += (size_t)snprintf(key + at, nkey - at, "%s%s:%lld", j == st->nlib ? " | " : " ", l->kernel, l->items);
    }
    const CudaImage *img = &ld->p->cuda.lib[lib_kernel_type(st->lib[0].kernel)];
    snprintf(version, nversion, "cudnn %zu library %016llx", ld->ex->dnn.version,
             (unsigned long long)XXH3_64bits(img->data, img->size));
    snprintf(options, noptions, "runs=%d tf32=%d algo=%d math=%d fused=%d", TWIN_RUNS, ld->ex->opt.allow_tf32,
             (int)ld->conv[s].algo.algo, (int)ld->conv[s].algo.math, ld->conv[s].fused);
}

/* Which way each depthwise step with a twin runs (twin_mode). "auto"
 * with the choices timed: both ways on the program's own buffers, before
 * its first run (which fills them: zeroed first, so that no garbage's
 * NaN path is timed), the faster kept for later processes; where cuDNN
 * had no algorithm for the twin, the library's kernels. */
static int choose_twins(CudaLoaded *ld, CtErr *err)
{
    CudaExec *ex = ld->ex;
    int zeroed = 0;
    for (int s = 0; s < ld->lp->nsteps; s++) {
        const LpStep *st = &ld->lp->steps[s];
        if (!twin_wanted(ld, st) || !ld->conv[s].conv)
            continue;
        if (ld->dw_mode == TWIN_CUDNN) {
            ld->twin_on[s] = 1;
            continue;
        }
        CUdeviceptr mem[4] = {ld->block, ld->inputs, ld->state, ld->scratch};
        size_t bytes[4] = {ld->lp->device_bytes, ld->in_bytes, ld->st_bytes, ld->lp->scratch_bytes};
        for (int i = 0; i < 4 && !zeroed; i++)
            if (bytes[i] && cu_check(ex, ex->drv.MemsetD8Async(mem[i], 0, bytes[i], ex->stream), err,
                                     "zeroing device memory to time the depthwise convolutions on"))
                return -1;
        zeroed = 1;
        char key[1024], version[96], options[128];
        twin_key_parts(ld, s, key, sizeof key, version, sizeof version, options, sizeof options);
        CacheKeyParts parts = {.source = key, .target = ex->target, .compiler = "ctimm library kernels or cudnn twin",
                               .compiler_version = version, .options = options};
        TwinChoice c;
        if (twin_choose(&ex->choices, &parts, time_way, &(TwinTime){ld, s}, &c, err))
            return ct_failctx(err, "step %d (a depthwise convolution's two ways timed)", s);
        ld->twin_on[s] = (unsigned char)c.twin;
        memcpy(&ld->twin_ms[2 * s], c.ms, sizeof c.ms);
    }
    return 0;
}

/* The libraries' workspace cut to what the calls that run need: a twin
 * timed and not chosen may have needed more than any of them. */
static int fit_workspace(CudaLoaded *ld, CtErr *err)
{
    CudaExec *ex = ld->ex;
    size_t need = calls_workspace(ld, ld->twin_on);
    if (need >= ld->workspace_bytes)
        return 0;
    if (cu_check(ex, ex->drv.StreamSynchronize(ex->stream), err, "timing the depthwise convolutions") ||
        cu_check(ex, ex->drv.MemFree(ld->workspace), err, "cuMemFree of the workspace"))
        return -1;
    ld->device_bytes -= ld->workspace_bytes ? ld->workspace_bytes : 1;
    ld->workspace = 0;
    ld->workspace_bytes = need;
    if (cu_check(ex, ex->drv.MemAlloc(&ld->workspace, need ? need : 1), err, "cuMemAlloc of %zu bytes", need))
        return -1;
    ld->device_bytes += need ? need : 1;
    return 0;
}

static int enqueue(CudaLoaded *ld, CtErr *err)
{
    for (int s = 0; s < ld->lp->nsteps; s++)
        if ((ld->have_prof && step_profile_mark(&ld->prof, s, ld->ex->stream, err)) || run_step(ld, s, err))
            return -1;
    return ld->have_prof ? step_profile_mark(&ld->prof, ld->lp->nsteps, ld->ex->stream, err) : 0;
}

/* The steps captured as one CUDA graph into ld. The capture is ended
 * whatever happened, so the stream never stays in capture mode; nothing of
 * a failed attempt is kept. */
static int capture(CudaLoaded *ld, CtErr *err)
{
    CudaExec *ex = ld->ex;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    if (cu_check(ex, ex->drv.StreamBeginCapture(ex->stream, CAPTURE_THREAD_LOCAL), err, "beginning a capture"))
        return -1;
    int rc = enqueue(ld, err);
    CUresult r = ex->drv.StreamEndCapture(ex->stream, &graph);
    if (!rc)
        rc = cu_check(ex, r, err, "ending the capture");
    if (!rc)
        rc = cu_check(ex, ex->drv.GraphInstantiate(&exec, graph, 0), err, "instantiating the graph");
    if (rc) {
        if (graph)
            ex->drv.GraphDestroy(graph);
        return -1;
    }
    ld->graph = graph;
    ld->graph_exec = exec;
    return 0;
}

/* Graphs given up for this program (a library call that cannot be
 * captured invalidates the capture, and would fail every later run): said
 * once, and this run's steps enqueued one by one instead. */
static int run_eagerly(CudaLoaded *ld, const CtErr *why, CtErr *err)
{
    CudaExec *ex = ld->ex;
    if (ld->graph_exec)
        ex->drv.GraphExecDestroy(ld->graph_exec);
    if (ld->graph)
        ex->drv.GraphDestroy(ld->graph);
    ld->graph = NULL;
    ld->graph_exec = NULL;
    ld->eager = 1;
    fprintf(stderr, "ctimm: cuda: the step could not be captured as a CUDA graph (%s); running it eagerly\n",
            why->msg);
    /* out of capture mode now; an error left in the context shows here, not
     * as a puzzling failure of the first eager step */
    if (cu_check(ex, ex->drv.StreamSynchronize(ex->stream), err, "the stream after the failed capture"))
        return -1;
    return enqueue(ld, err);
}

/* The steps as one CUDA graph, captured on the first call; a capture, or
 * a first launch, that fails falls back to running them eagerly. */
static int replay(CudaLoaded *ld, CtErr *err)
{
    CudaExec *ex = ld->ex;
    CtErr why;
    int first = !ld->graph_exec;
    if (first && capture(ld, &why))
        return run_eagerly(ld, &why, err);
    if (cu_check(ex, ex->drv.GraphLaunch(ld->graph_exec, ex->stream), first ? &why : err,
                 "launching the step's graph"))
        return first ? run_eagerly(ld, &why, err) : -1;
    return 0;
}

/* Each input of the graph's, in value order, as the program takes it. */
static int check_inputs(const CudaLoaded *ld, const CtTensor *inputs, int ninputs, CtErr *err)
{
    const Graph *g = &ld->p->g;
    int k = 0;
    for (ValueId v = 0; v < g->nvalues; v++) {
        if (ld->in_off[v] == PLAN_NONE)
            continue;
        const Value *val = &g->values[v];
        if (k >= ninputs || !shape_equal(&inputs[k].type.shape, &val->type.shape) ||
            inputs[k].type.dtype != val->type.dtype)
            return ct_fail(err, "input %d ('%s') is missing or has the wrong shape or dtype", k, val->name);
        k++;
    }
    return 0;
}

/* The state, when the host's is newer, and the inputs (at the first run alone with inputs_fixed), onto the stream. */
static int upload(CudaLoaded *ld, const CtState *state, const CtTensor *inputs, CtErr *err)
{
    CudaExec *ex = ld->ex;
    const Graph *g = &ld->p->g;
    if (ld->st_bytes && (ld->runs == 0 || ld->state_stale)) {
        /* from pageable memory: the driver has copied state->data aside
         * when the call returns, and the copy is ordered on the stream after
         * the last run's steps and before this one's, which is all it needs */
        if (cu_check(ex, ex->drv.MemcpyHtoDAsync(ld->state, state->data, state->nbytes, ex->stream), err,
                     "uploading the state"))
            return -1;
        ld->state_stale = 0;
        ld->moved_state = state->nbytes;
    }
    if (ex->opt.inputs_fixed && ld->runs > 0)
        return 0;
    int k = 0;
    for (ValueId v = 0; v < g->nvalues; v++) {
        if (ld->in_off[v] == PLAN_NONE)
            continue;
        size_t n = value_bytes(&g->values[v]);
        unsigned char *pinned = ld->staging + ld->in_off[v];
        memcpy(pinned, inputs[k].data, n);
        if (cu_check(ex, ex->drv.MemcpyHtoDAsync(ld->inputs + ld->in_off[v], pinned, n, ex->stream), err,
                     "uploading input %d", k))
            return -1;
        ld->moved_in += n;
        k++;
    }
    return 0;
}

/* The outputs, allocated here (*nout of them so far), their copies
 * enqueued after the steps; in outputs_on_device they stay unset. */
static int download(CudaLoaded *ld, CtTensor *outputs, int *nout, CtErr *err)
{
    CudaExec *ex = ld->ex;
    const Graph *g = &ld->p->g;
    for (; *nout < g->noutputs; (*nout)++) {
        const Value *val = &g->values[g->outputs[*nout]];
        tensor_alloc(&outputs[*nout], val->type);
        if (ex->opt.outputs_on_device)
            continue;
        if (cu_check(ex,
                     ex->drv.MemcpyDtoHAsync(outputs[*nout].data, addr(ld, g->outputs[*nout]), value_bytes(val),
                                             ex->stream),
                     err, "downloading output %d", *nout)) {
            (*nout)++;
            return -1;
        }
        ld->moved_out += value_bytes(val);
    }
    return 0;
}

int cuda_loaded_run(CudaLoaded *ld, CtState *state, const CtTensor *inputs, int ninputs, CtTensor *outputs,
                    CtErr *err)
{
    CudaExec *ex = ld->ex;
    int nout = 0;
    size_t st_bytes = state ? state->nbytes : 0;
    if (st_bytes != ld->st_bytes)
        return ct_fail(err, "the state has %zu bytes, the program was loaded for %zu", st_bytes, ld->st_bytes);
    if (check_inputs(ld, inputs, ninputs, err) ||
        cu_check(ex, ex->drv.CtxSetCurrent(ex->ctx), err, "cuCtxSetCurrent"))
        return -1;
    ld->moved_in = ld->moved_out = ld->moved_state = 0;
    int graphs = ex->opt.graphs && !ex->opt.sync_each && !ld->have_prof && ld->runs > 0 && !ld->eager;
    if (upload(ld, state, inputs, err) || (graphs ? replay(ld, err) : enqueue(ld, err)) ||
        download(ld, outputs, &nout, err) ||
        cu_check(ex, ex->drv.StreamSynchronize(ex->stream), err, "running the step (%d steps%s)", ld->lp->nsteps,
                 graphs && !ld->eager ? ", as a CUDA graph" : "")) {
        /* nothing in flight any more reads the staging buffer or writes the outputs freed here */
        (void)ex->drv.StreamSynchronize(ex->stream);
        for (int o = 0; o < nout; o++)
            tensor_free(&outputs[o]);
        return -1;
    }
    ld->runs++;
    return ld->have_prof ? step_profile_collect(&ld->prof, err) : 0;
}

int cuda_loaded_state_to_host(CudaLoaded *ld, CtState *state, CtErr *err)
{
    CudaExec *ex = ld->ex;
    if (!ld->st_bytes || ld->runs == 0 || ld->state_stale) /* the device has nothing newer */
        return 0;
    if (state->nbytes != ld->st_bytes)
        return ct_fail(err, "the state has %zu bytes, the program was loaded for %zu", state->nbytes, ld->st_bytes);
    if (cu_check(ex, ex->drv.CtxSetCurrent(ex->ctx), err, "cuCtxSetCurrent") ||
        cu_check(ex, ex->drv.MemcpyDtoHAsync(state->data, ld->state, state->nbytes, ex->stream), err,
                 "downloading the state"))
        return -1;
    return cu_check(ex, ex->drv.StreamSynchronize(ex->stream), err, "downloading the state");
}

void cuda_loaded_state_changed(CudaLoaded *ld) { ld->state_stale = 1; }

size_t cuda_loaded_device_bytes(const CudaLoaded *ld) { return ld->device_bytes; }

void cuda_loaded_moved(const CudaLoaded *ld, size_t *in, size_t *out, size_t *state)
{
    *in = ld->moved_in;
    *out = ld->moved_out;
    *state = ld->moved_state;
}
