/* Contract: cuDNN's graph API (cudnnBackend*) as this project reads its
 * documentation, for the one graph runtime/cuda/dnn_stats.c builds: a
 * forward convolution and GenStats (sum and sum of squares a channel) over
 * its output. Descriptors keep their attributes; finalizing checks each
 * type's required ones (a tensor's dims, strides, type, uid and alignment;
 * the convolution's output shape from its input and filter; GenStats over
 * the convolution's y into two [1, C, 1, 1] f32 tensors; an operation graph
 * of exactly those two operations); a descriptor set as another's
 * attribute must be finalized and alive as long as the other is used. The
 * heuristics rank one engine, deterministic; its plan asks 4 KiB of
 * workspace. Executing a plan checks the variant pack's pointers against
 * the tensors and the workspace, then runs the fake cuDNN's convolution
 * with the sums (fg_dnn_conv_stats). "graph" refused (fake_gpu_refuse):
 * the plan does not finalize (no engine for it here); "graph run": it
 * does, but executing it answers NOT_SUPPORTED. */
#include <cudnn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake_gpu/fake_internal.h"

enum { MAX_ATTRS = 12, ATTR_BYTES = 64, PLAN_WORKSPACE = 4096 };

typedef struct Attr {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t n;
    unsigned char v[ATTR_BYTES];
} Attr;

typedef struct Desc {
    unsigned magic;
    cudnnBackendDescriptorType_t type;
    int finalized;
    Attr a[MAX_ATTRS];
    int na;
    struct Desc *graph; /* an engine configuration's, an engine's, a plan's: the operation graph */
} Desc;

#define DESC_MAGIC 0x6e6e6475u

static Desc *live(void *p, const char *call)
{
    Desc *d = p;
    if (!d || d->magic != DESC_MAGIC) {
        fg_violation("%s: not a live backend descriptor", call);
        return NULL;
    }
    return d;
}

static size_t type_bytes(cudnnBackendAttributeType_t t)
{
    switch (t) {
    case CUDNN_TYPE_INT64: case CUDNN_TYPE_VOID_PTR: case CUDNN_TYPE_BACKEND_DESCRIPTOR: case CUDNN_TYPE_HANDLE:
        return 8;
    default:
        return 4; /* the enums, float */
    }
}

static const Attr *attr(const Desc *d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n)
{
    for (int i = 0; i < d->na; i++)
        if (d->a[i].name == name)
            return d->a[i].type == type && (n < 0 || d->a[i].n == n) ? &d->a[i] : NULL;
    return NULL;
}

static int64_t i64(const Attr *a, int k) { return ((const int64_t *)(const void *)a->v)[k]; }
static int32_t e32(const Attr *a) { return *(const int32_t *)(const void *)a->v; }

/* Descriptor attribute `name` of d: one finalized, live descriptor of `type`. */
static Desc *child(const Desc *d, cudnnBackendAttributeName_t name, cudnnBackendDescriptorType_t type)
{
    const Attr *a = attr(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1);
    Desc *c = a ? *(Desc *const *)(const void *)a->v : NULL;
    return c && c->magic == DESC_MAGIC && c->type == type && c->finalized ? c : NULL;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out)
{
    Desc *d = calloc(1, sizeof *d);
    if (!d)
        abort();
    d->magic = DESC_MAGIC;
    d->type = type;
    *out = d;
    fg_count.dnn_descriptors++;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t p)
{
    Desc *d = live(p, "cudnnBackendDestroyDescriptor");
    if (!d)
        return CUDNN_STATUS_BAD_PARAM;
    d->magic = 0;
    free(d);
    fg_count.dnn_descriptors--;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t n, const void *v)
{
    Desc *d = live(p, "cudnnBackendSetAttribute");
    if (!d || d->finalized || n < 1 || (size_t)n * type_bytes(type) > ATTR_BYTES || !v)
        return CUDNN_STATUS_BAD_PARAM;
    int i = 0;
    while (i < d->na && d->a[i].name != name)
        i++;
    if (i == MAX_ATTRS)
        return CUDNN_STATUS_BAD_PARAM;
    d->na += i == d->na;
    d->a[i] = (Attr){.name = name, .type = type, .n = n};
    memcpy(d->a[i].v, v, (size_t)n * type_bytes(type));
    return CUDNN_STATUS_SUCCESS;
}

/* A tensor's dims [n, c, h, w] and whether its strides are NHWC's (else
 * NCHW's; -1: neither). */
static int tensor_dims(const Desc *t, int64_t dims[4])
{
    const Attr *d = attr(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4);
    const Attr *s = attr(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4);
    for (int k = 0; k < 4; k++)
        dims[k] = i64(d, k);
    int64_t C = dims[1], H = dims[2], W = dims[3];
    if (i64(s, 1) == 1 && i64(s, 3) == C && i64(s, 2) == W * C && i64(s, 0) == H * W * C)
        return 1;
    if (i64(s, 3) == 1 && i64(s, 2) == W && i64(s, 1) == H * W && i64(s, 0) == C * H * W)
        return 0;
    return -1;
}

static CtDType tensor_type(const Desc *t)
{
    int32_t dt = e32(attr(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1));
    return dt == CUDNN_DATA_HALF ? CT_F16 : dt == CUDNN_DATA_BFLOAT16 ? CT_BF16 : CT_F32;
}

static const char *check_tensor(const Desc *d)
{
    int64_t dims[4];
    const Attr *dt = attr(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1);
    if (!dt || !attr(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1) ||
        !attr(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1) ||
        !attr(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4) ||
        !attr(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4))
        return "a tensor without its type, uid, alignment, 4 dims or 4 strides";
    if (e32(dt) != CUDNN_DATA_HALF && e32(dt) != CUDNN_DATA_BFLOAT16 && e32(dt) != CUDNN_DATA_FLOAT)
        return "a tensor of a type the fake does not take";
    if (tensor_dims(d, dims) < 0)
        return "a tensor whose strides are neither NCHW's nor NHWC's";
    for (int k = 0; k < 4; k++)
        if (dims[k] < 1)
            return "a tensor dimension below 1";
    return NULL;
}

/* The convolution descriptor's 2-d geometry into conv[]: pad_h, pad_w, stride_h, stride_w, dil_h, dil_w. */
static const char *check_conv(const Desc *d, int64_t conv[6])
{
    const Attr *ct = attr(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1);
    const Attr *mode = attr(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1);
    const Attr *sd = attr(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1);
    const Attr *pre = attr(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2);
    const Attr *post = attr(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2);
    const Attr *st = attr(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2);
    const Attr *dil = attr(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2);
    if (!ct || !mode || !sd || !pre || !post || !st || !dil || e32(ct) != CUDNN_DATA_FLOAT ||
        e32(mode) != CUDNN_CROSS_CORRELATION || i64(sd, 0) != 2)
        return "a convolution without f32 compute, cross-correlation, 2 spatial dims, paddings, strides and "
               "dilations";
    for (int k = 0; k < 2; k++) {
        if (i64(pre, k) != i64(post, k) || i64(pre, k) < 0 || i64(st, k) < 1 || i64(dil, k) < 1)
            return "a convolution's uneven or negative padding, or a stride or dilation below 1";
        conv[k] = i64(pre, k), conv[2 + k] = i64(st, k), conv[4 + k] = i64(dil, k);
    }
    return NULL;
}

/* The forward's x, w and y: y's shape the convolution's of x and w. */
static const char *check_forward(const Desc *d)
{
    Desc *x = child(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    Desc *w = child(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    Desc *y = child(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    Desc *cv = child(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    if (!x || !w || !y || !cv || !attr(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1) ||
        !attr(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1))
        return "a forward convolution without finalized x, w, y and convolution, or float alpha and beta";
    int64_t xd[4], wd[4], yd[4], c[6];
    tensor_dims(x, xd), tensor_dims(w, wd), tensor_dims(y, yd);
    check_conv(cv, c);
    int64_t p = (xd[2] + 2 * c[0] - c[4] * (wd[2] - 1) - 1) / c[2] + 1;
    int64_t q = (xd[3] + 2 * c[1] - c[5] * (wd[3] - 1) - 1) / c[3] + 1;
    if (yd[0] != xd[0] || yd[1] != wd[0] || yd[2] != p || yd[3] != q || xd[1] % wd[1] || wd[0] % (xd[1] / wd[1]))
        return "a forward convolution whose y is not the shape of x convolved with w";
    return NULL;
}

static const char *check_stats(const Desc *d)
{
    const Attr *mode = attr(d, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1);
    const Attr *prec = attr(d, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1);
    Desc *x = child(d, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    Desc *s = child(d, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    Desc *q = child(d, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!mode || !prec || !x || !s || !q || e32(mode) != CUDNN_GENSTATS_SUM_SQSUM || e32(prec) != CUDNN_DATA_FLOAT)
        return "GenStats without SUM_SQSUM in float over finalized x, sum and sqsum tensors";
    int64_t xd[4], sd[4], qd[4];
    tensor_dims(x, xd), tensor_dims(s, sd), tensor_dims(q, qd);
    for (int k = 0; k < 4; k++)
        if (sd[k] != (k == 1 ? xd[1] : 1) || qd[k] != sd[k])
            return "GenStats' sums not [1, C, 1, 1] of its x's C";
    if (tensor_type(s) != CT_F32 || tensor_type(q) != CT_F32)
        return "GenStats' sums not f32";
    return NULL;
}

/* The graph's two operations: the forward, then GenStats over its y. */
static void graph_ops(const Desc *g, Desc **fwd, Desc **stats)
{
    const Attr *ops = attr(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2);
    *fwd = *stats = NULL;
    for (int k = 0; ops && k < 2; k++) {
        Desc *o = ((Desc *const *)(const void *)ops->v)[k];
        if (!o || o->magic != DESC_MAGIC || !o->finalized)
            continue;
        if (o->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)
            *fwd = o;
        else if (o->type == CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR)
            *stats = o;
    }
}

static const char *check_graph(const Desc *d)
{
    Desc *fwd, *stats;
    graph_ops(d, &fwd, &stats);
    if (!attr(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1))
        return "an operation graph without its handle";
    if (!fwd || !stats ||
        child(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_BACKEND_TENSOR_DESCRIPTOR) !=
            child(stats, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR))
        return "an operation graph that is not a forward convolution and GenStats over its y";
    return NULL;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t p)
{
    Desc *d = live(p, "cudnnBackendFinalize");
    if (!d || d->finalized)
        return CUDNN_STATUS_BAD_PARAM;
    const char *why = NULL;
    int64_t conv[6];
    switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: why = check_tensor(d); break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: why = check_conv(d, conv); break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: why = check_forward(d); break;
    case CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR: why = check_stats(d); break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: why = check_graph(d); break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        d->graph = child(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        why = !d->graph || !attr(d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1)
                  ? "heuristics without a finalized operation graph and a mode"
                  : NULL;
        break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
        Desc *cfg = child(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        if (!cfg || !attr(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1))
            why = "a plan without its handle and a finalized engine configuration";
        else if (fg_refused("graph"))
            return CUDNN_STATUS_NOT_SUPPORTED;
        else
            d->graph = cfg->graph;
        break;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
        const Attr *u = attr(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, -1);
        const Attr *ptr = attr(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, -1);
        why = !u || !ptr || u->n != ptr->n || !attr(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1)
                  ? "a variant pack without as many pointers as uids, and a workspace"
                  : NULL;
        break;
    }
    default: why = "a descriptor type the fake has no use for"; break;
    }
    if (why) {
        fg_violation("cudnnBackendFinalize: %s", why);
        return CUDNN_STATUS_BAD_PARAM;
    }
    d->finalized = 1;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t want, int64_t *count, void *out)
{
    Desc *d = live(p, "cudnnBackendGetAttribute");
    if (!d || !d->finalized || !count)
        return CUDNN_STATUS_BAD_PARAM;
    if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR) { /* one engine; its configuration into the caller's */
        *count = 1;
        Desc *cfg = want >= 1 ? live(*(void **)out, "the heuristics' results") : NULL;
        if (cfg) {
            cfg->graph = d->graph;
            cfg->finalized = cfg->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
        }
        return !want || (cfg && cfg->finalized) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
    }
    if (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_ENGINE &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR && want >= 1) {
        Desc *e = live(*(void **)out, "the configuration's engine");
        if (!e || e->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
            return CUDNN_STATUS_BAD_PARAM;
        e->graph = d->graph;
        e->finalized = 1;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR && name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE &&
        type == CUDNN_TYPE_NUMERICAL_NOTE) {
        *count = 0; /* deterministic, no other notes */
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE &&
        type == CUDNN_TYPE_INT64 && want >= 1) {
        *(int64_t *)out = PLAN_WORKSPACE;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    fg_violation("cudnnBackendGetAttribute: attribute %d of descriptor type %d, which the fake does not answer",
                 (int)name, (int)d->type);
    return CUDNN_STATUS_NOT_SUPPORTED;
}

/* The pointer the variant pack gives tensor t, with its bytes checked. */
static CUdeviceptr pointer(const Desc *pack, const Desc *t, const char *what)
{
    const Attr *u = attr(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, -1);
    const Attr *ptr = attr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, -1);
    int64_t uid = i64(attr(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1), 0), dims[4];
    int64_t align = i64(attr(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1), 0);
    tensor_dims(t, dims);
    for (int64_t k = 0; k < u->n; k++)
        if (i64(u, (int)k) == uid) {
            CUdeviceptr p = (CUdeviceptr)i64(ptr, (int)k);
            if (align > 0 && p % (CUdeviceptr)align)
                fg_violation("cudnnBackendExecute: %s at %#llx, not %lld-byte aligned as its tensor says", what,
                             (unsigned long long)p, (long long)align);
            size_t bytes = (size_t)(dims[0] * dims[1] * dims[2] * dims[3]) * ct_dtype_size(tensor_type(t));
            return fg_host(p, bytes, what) ? p : 0;
        }
    fg_violation("cudnnBackendExecute: no pointer for %s's uid %lld", what, (long long)uid);
    return 0;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan_p, cudnnBackendDescriptor_t pack_p)
{
    Desc *plan = live(plan_p, "cudnnBackendExecute's plan"), *pack = live(pack_p, "cudnnBackendExecute's pack");
    if (!plan || !pack || !plan->finalized || !pack->finalized ||
        plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR ||
        !plan->graph || plan->graph->magic != DESC_MAGIC) {
        fg_violation("cudnnBackendExecute: %s", "not a finalized plan (of a live graph) and variant pack");
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (fg_refused("graph run")) /* refused as a call cuDNN does not support, nothing launched */
        return CUDNN_STATUS_NOT_SUPPORTED;
    Desc *fwd, *stats;
    graph_ops(plan->graph, &fwd, &stats);
    Desc *x = child(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    Desc *w = child(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    Desc *y = child(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    Desc *cv = child(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    Desc *s = child(stats, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    Desc *q = child(stats, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!x || !w || !y || !cv || !s || !q) {
        fg_violation("cudnnBackendExecute: %s", "a descriptor of the plan's graph destroyed before the plan");
        return CUDNN_STATUS_BAD_PARAM;
    }
    const Attr *ws = attr(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1);
    CUdeviceptr wsp = (CUdeviceptr)i64(ws, 0);
    if (!wsp || !fg_host(wsp, PLAN_WORKSPACE, "the plan's workspace"))
        return CUDNN_STATUS_BAD_PARAM;
    FgConvStats c = {.xp = pointer(pack, x, "x"), .wp = pointer(pack, w, "w"), .yp = pointer(pack, y, "y"),
                     .sump = pointer(pack, s, "the sums"), .sqp = pointer(pack, q, "the sums of squares")};
    if (!c.xp || !c.wp || !c.yp || !c.sump || !c.sqp)
        return CUDNN_STATUS_BAD_PARAM;
    int64_t xd[4], wd[4], g[6];
    c.x_nhwc = tensor_dims(x, xd), c.w_nhwc = tensor_dims(w, wd), c.y_nhwc = tensor_dims(y, (int64_t[4]){0});
    check_conv(cv, g);
    c.n = (int)xd[0], c.c = (int)xd[1], c.h = (int)xd[2], c.w = (int)xd[3];
    c.k = (int)wd[0], c.r = (int)wd[2], c.s = (int)wd[3], c.groups = (int)(xd[1] / wd[1]);
    c.pad_h = (int)g[0], c.pad_w = (int)g[1], c.u = (int)g[2], c.v = (int)g[3];
    c.dil_h = (int)g[4], c.dil_w = (int)g[5];
    c.x_type = tensor_type(x), c.w_type = tensor_type(w), c.y_type = tensor_type(y);
    fg_count.dnn_graph_runs++;
    return fg_dnn_conv_stats(h, &c) ? CUDNN_STATUS_EXECUTION_FAILED : CUDNN_STATUS_SUCCESS;
}
