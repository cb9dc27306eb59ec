/* Contract: dnn_stats_prepare builds, through cuDNN's graph API, one
 * execution plan computing y = conv(x, w) and y's channel sums and sums
 * of squares (GenStats) for a forward convolution without an epilogue,
 * or leaves none where cuDNN has no engine for it; dnn_stats_run runs it. */
#include "runtime/cuda/dnn.h"

#include <cudnn.h>
#include <stdlib.h>
#include <string.h>

enum { UID_X = 1, UID_W, UID_Y, UID_SUM, UID_SQSUM, MAX_CFGS = 16 };

typedef cudnnBackendDescriptor_t Desc;

/* The descriptors a plan is built of, kept with it until it is freed (a
 * descriptor set as another's attribute is referred to, not copied). */
typedef struct Parts {
    Desc d[40];
    int n;
    cudnnStatus_t s; /* the first failure; every later call then does nothing */
} Parts;

static Desc make(Parts *p, cudnnBackendDescriptorType_t type)
{
    Desc d = NULL;
    if (p->s == CUDNN_STATUS_SUCCESS && p->n < (int)(sizeof p->d / sizeof p->d[0]))
        p->s = cudnnBackendCreateDescriptor(type, &d);
    if (p->s == CUDNN_STATUS_SUCCESS && d)
        p->d[p->n++] = d;
    return d;
}

static void set(Parts *p, Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                const void *v)
{
    if (p->s == CUDNN_STATUS_SUCCESS)
        p->s = cudnnBackendSetAttribute(d, name, type, count, v);
}

static void finalize(Parts *p, Desc d)
{
    if (p->s == CUDNN_STATUS_SUCCESS)
        p->s = cudnnBackendFinalize(d);
}

static void parts_free(Parts *p)
{
    for (int i = p->n - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(p->d[i]);
    p->n = 0;
}

static cudnnDataType_t data_type(CtDType t)
{
    return t == CT_F16 ? CUDNN_DATA_HALF : t == CT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* A 4-d tensor of dims [a, b, c, d] (the graph API's NCHW order whatever
 * the layout), its strides NHWC or NCHW. The executor's device addresses
 * are 256-byte block bases plus offsets the plans keep 16-byte aligned
 * for 16-bit data; the sums (f32, C apart) are 4-byte aligned at least. */
static Desc tensor(Parts *p, int64_t uid, CtDType t, const int64_t dims[4], int nhwc, int64_t align)
{
    int64_t st[4];
    if (nhwc) {
        st[1] = 1, st[3] = dims[1], st[2] = dims[3] * dims[1], st[0] = dims[2] * dims[3] * dims[1];
    } else {
        st[3] = 1, st[2] = dims[3], st[1] = dims[2] * dims[3], st[0] = dims[1] * dims[2] * dims[3];
    }
    cudnnDataType_t dt = data_type(t);
    Desc d = make(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    set(p, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(p, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    set(p, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st);
    set(p, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(p, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    finalize(p, d);
    return d;
}

/* The operation graph: the forward convolution, then GenStats over its y. */
static Desc op_graph(Parts *p, cudnnHandle_t h, const ConvDesc *c)
{
    const int64_t xd[4] = {c->n, c->c, c->h, c->w}, wd[4] = {c->k, c->c / c->groups, c->r, c->s};
    const int64_t yd[4] = {c->n, c->k, c->p, c->q}, sd[4] = {1, c->k, 1, 1};
    Desc x = tensor(p, UID_X, c->x_type, xd, c->x_nhwc, 16), w = tensor(p, UID_W, c->w_type, wd, c->w_nhwc, 16);
    Desc y = tensor(p, UID_Y, c->y_type, yd, c->y_nhwc, 16);
    Desc sum = tensor(p, UID_SUM, CT_F32, sd, 1, 4), sq = tensor(p, UID_SQSUM, CT_F32, sd, 1, 4);

    Desc conv = make(p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, pad[2] = {c->pad_h, c->pad_w}, stride[2] = {c->stride_h, c->stride_w};
    const int64_t dil[2] = {c->dil_h, c->dil_w};
    set(p, conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    set(p, conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    set(p, conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    set(p, conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    set(p, conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
    set(p, conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    set(p, conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    finalize(p, conv);

    Desc fwd = make(p, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    const float one = 1.0f, zero = 0.0f;
    set(p, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(p, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    set(p, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    set(p, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    set(p, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one);
    set(p, fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero);
    finalize(p, fwd);

    Desc stats = make(p, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    cudnnGenStatsMode_t gm = CUDNN_GENSTATS_SUM_SQSUM;
    set(p, stats, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &gm);
    set(p, stats, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    set(p, stats, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    set(p, stats, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum);
    set(p, stats, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq);
    finalize(p, stats);

    Desc graph = make(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    Desc ops[2] = {fwd, stats};
    set(p, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    set(p, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, ops);
    finalize(p, graph);
    return graph;
}

/* Whether engine configuration cfg's engine is deterministic. */
static int deterministic(Desc cfg)
{
    Desc engine = NULL;
    int64_t got = 0;
    cudnnBackendNumericalNote_t notes[16];
    int det = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS)
        return 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &engine) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &got,
                                 notes) == CUDNN_STATUS_SUCCESS) {
        det = 1;
        for (int64_t i = 0; i < got && i < 16; i++)
            det &= notes[i] != CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    }
    cudnnBackendDestroyDescriptor(engine);
    return det;
}

/* The plan of the first of cuDNN's ranked configurations (heuristics mode
 * A) that finalizes within the workspace limit, deterministic ones first
 * (a step replayed gives what it gave eagerly), or NULL. */
static Desc first_plan(Parts *p, cudnnHandle_t h, Desc graph, size_t max_workspace, size_t *workspace)
{
    Desc heur = make(p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(p, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    set(p, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(p, heur);
    Desc cfg[MAX_CFGS];
    int64_t n = 0;
    for (int i = 0; i < MAX_CFGS; i++)
        cfg[i] = make(p, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (p->s == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_CFGS, &n,
                                 cfg) != CUDNN_STATUS_SUCCESS)
        n = 0;
    Desc plan = NULL;
    for (int det = 1; det >= 0 && !plan && p->s == CUDNN_STATUS_SUCCESS; det--)
        for (int64_t i = 0; i < n && i < MAX_CFGS && !plan; i++) {
            int64_t ws = 0, got = 0;
            if (det && !deterministic(cfg[i]))
                continue;
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) {
                plan = NULL;
                break;
            }
            if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
                cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]) ||
                cudnnBackendFinalize(plan) ||
                cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                         &ws) ||
                ws < 0 || (size_t)ws > max_workspace) {
                cudnnBackendDestroyDescriptor(plan);
                plan = NULL;
                continue;
            }
            *workspace = (size_t)ws;
        }
    return plan;
}

/* What DnnCall.stats_plan points at. */
typedef struct StatsPlan {
    Parts parts;
    Desc plan;
} StatsPlan;

void dnn_stats_prepare(const Dnn *d, const ConvDesc *c, size_t max_workspace, DnnCall *call)
{
    cudnnHandle_t h = d->handle;
    call->stats_plan = NULL;
    if (c->dir != CONV_FWD || c->stats < 0 || c->epi.bias >= 0 || c->epi.residual >= 0 ||
        c->epi.act != GEMM_ACT_NONE || c->x_type == CT_F32)
        return;
    StatsPlan *sp = calloc(1, sizeof *sp);
    CT_ASSERT(sp != NULL);
    Desc graph = op_graph(&sp->parts, h, c);
    size_t ws = 0;
    sp->plan = sp->parts.s == CUDNN_STATUS_SUCCESS ? first_plan(&sp->parts, h, graph, max_workspace, &ws) : NULL;
    if (!sp->plan) { /* no engine for it here: the launch plan's statistics pass runs after the plain call */
        parts_free(&sp->parts);
        free(sp);
        return;
    }
    call->stats_plan = sp;
    call->stats_workspace = ws;
}

int dnn_stats_run(const Dnn *d, const DnnCall *call, const ConvPtrs *ptr, CUdeviceptr workspace, int64_t k)
{
    Parts p = {0};
    Desc pack = make(&p, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    const int64_t uids[5] = {UID_X, UID_W, UID_Y, UID_SUM, UID_SQSUM};
    void *ptrs[5] = {(void *)(uintptr_t)ptr->x, (void *)(uintptr_t)ptr->w, (void *)(uintptr_t)ptr->y,
                     (void *)(uintptr_t)ptr->sums, (void *)(uintptr_t)(ptr->sums + (CUdeviceptr)(4 * k))};
    void *ws = (void *)(uintptr_t)workspace;
    set(&p, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids);
    set(&p, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, ptrs);
    set(&p, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    finalize(&p, pack);
    if (p.s == CUDNN_STATUS_SUCCESS)
        p.s = cudnnBackendExecute((cudnnHandle_t)d->handle, ((const StatsPlan *)call->stats_plan)->plan, pack);
    cudnnStatus_t s = p.s;
    parts_free(&p);
    return (int)s;
}

void dnn_stats_free(DnnCall *call)
{
    StatsPlan *sp = call->stats_plan;
    if (sp) {
        cudnnBackendDestroyDescriptor(sp->plan);
        parts_free(&sp->parts);
        free(sp);
    }
    call->stats_plan = NULL;
}
