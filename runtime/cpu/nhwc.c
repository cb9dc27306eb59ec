/*
 * The cpu backend's channels-last storage (passes/layout.c, --channels-last):
 * a 4-D value the layout pass made CT_LAYOUT_CHANNELS_LAST is stored N, H,
 * W, C, as on the GPU. The compiled elementwise kernels (KIR's layouts),
 * oneDNN's primitives, permute, to_layout, reduce_sum, batch norm, global
 * average pooling, pointwise, depthwise and Winograd's 3x3 convolutions and
 * the elementwise ops over operands of one shape and layout take it as
 * stored.
 * Every other node kernel is written for row-major values: it runs on
 * row-major copies of its channels-last operands, and its channels-last
 * outputs are transposed back from row-major scratch after it. Correct for
 * every op, at two transposes' cost where an op has no form of its own.
 */
#include <stdint.h>
#include <string.h>

#include "runtime/cpu/cpu.h"

int cpu_stored_nhwc(const Graph *g, ValueId v)
{
    const Value *val = &g->values[v];
    const int64_t *d = val->type.shape.d;
    /* with H = W = 1 or C = 1 both layouts are the same bytes */
    return val->type.shape.ndim == 4 && val->layout == CT_LAYOUT_CHANNELS_LAST && d[2] * d[3] > 1 && d[1] > 1;
}

void cpu_memory_order(const Graph *g, ValueId v, int *order)
{
    static const int nhwc[4] = {0, 2, 3, 1};
    int nhw = cpu_stored_nhwc(g, v);
    for (int k = 0; k < g->values[v].type.shape.ndim; k++)
        order[k] = nhw ? nhwc[k] : k;
}

static int floats(const Graph *g, ValueId v)
{
    CtDType t = g->values[v].type.dtype;
    return t == CT_F32 || t == CT_F16 || t == CT_BF16;
}

/* Whether every operand of n has the shape and stored layout of its first
 * input: an elementwise kernel then meets element i at offset i in each. */
static int one_layout(const Graph *g, const Node *n)
{
    const CtShape *a = &g->values[n->in[0]].type.shape;
    int nhwc = cpu_stored_nhwc(g, n->in[0]);
    for (int k = 0; k < n->nin + n->nout; k++) {
        ValueId v = k < n->nin ? n->in[k] : n->out[k - n->nin];
        if (!shape_equal(&g->values[v].type.shape, a) || cpu_stored_nhwc(g, v) != nhwc)
            return 0;
    }
    return 1;
}

/* The ops whose kernels take channels-last values as they are stored (an
 * assign copies bytes; permute, to_layout and reduce_sum on float values,
 * which their f32 kernels take, others going through the ref kernels). */
static int native(const Graph *g, const Node *n)
{
    OpFusion f = op_def(n->op)->fusion;
    if ((f == OP_ELEMENTWISE || f == OP_ACTIVATION) && n->nin && one_layout(g, n))
        return 1;
    switch (n->op) {
    case CT_OP_assign: return 1;
    case CT_OP_permute: case CT_OP_to_layout: case CT_OP_reduce_sum:
        return floats(g, n->in[0]) && floats(g, n->out[0]);
    case CT_OP_batch_norm: case CT_OP_batch_norm_grad: return cpu_batch_norm_nhwc(g, n);
    case CT_OP_conv2d: case CT_OP_conv2d_grad_input: case CT_OP_conv2d_grad_weight: return cpu_conv_nhwc(g, n);
    case CT_OP_adaptive_avg_pool2d: case CT_OP_adaptive_avg_pool2d_grad:
        return floats(g, n->in[0]) && floats(g, n->out[0]) && cpu_adaptive_pool_nhwc(g, n);
    default: return 0;
    }
}

int cpu_node_row_major(const Graph *g, const Node *n)
{
    int nhwc = 0; /* first, as every node of an NCHW program asks */
    for (int k = 0; k < n->nin + n->nout && !nhwc; k++)
        nhwc = cpu_stored_nhwc(g, k < n->nin ? n->in[k] : n->out[k - n->nin]);
    return nhwc && !native(g, n);
}

/* dst = src [N, C, H, W] of elem-byte elements moved between NCHW and
 * NHWC (to_nhwc: NCHW -> NHWC). */
static void relayout(const void *src, void *dst, const CtShape *s, size_t elem, int to_nhwc)
{
    int64_t N = s->d[0], C = s->d[1], HW = s->d[2] * s->d[3];
    if (elem == sizeof(float)) { /* bits moved as floats: no arithmetic touches them */
        CtShape m = {3, {N, to_nhwc ? HW : C, to_nhwc ? C : HW}};
        int64_t stride[3] = {C * HW, 1, to_nhwc ? HW : C};
        cpu_strided_gather(src, dst, &m, stride);
        return;
    }
    const char *a = src;
    char *b = dst;
#pragma omp parallel for if (N * C * HW > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < N * C; i++)
        for (int64_t p = 0; p < HW; p++) {
            int64_t nchw = i * HW + p, nhwc = (i / C * HW + p) * C + i % C;
            memcpy(b + (size_t)(to_nhwc ? nhwc : nchw) * elem, a + (size_t)(to_nhwc ? nchw : nhwc) * elem, elem);
        }
}

/* The bytes of v rounded up to whole cache lines. */
static size_t padded_bytes(const Graph *g, ValueId v)
{
    const Value *val = &g->values[v];
    return ((size_t)shape_numel(&val->type.shape) * ct_dtype_size(val->type.dtype) + 63) / 64 * 64;
}

void cpu_run_row_major(const Graph *g, const Node *n, void *const *in, void *const *out, const CtCollective *coll,
                       CpuNodeRunner run)
{
    void *rin[CT_MAX_IN], *rout[CT_MAX_OUT];
    size_t total = 0;
    for (int k = 0; k < n->nin; k++)
        total += cpu_stored_nhwc(g, n->in[k]) ? padded_bytes(g, n->in[k]) : 0;
    for (int k = 0; k < n->nout; k++)
        total += cpu_stored_nhwc(g, n->out[k]) ? padded_bytes(g, n->out[k]) : 0;
    /* one scratch block kept between calls: fresh pages would fault in at each */
    char *next = (char *)cpu_scratch(CPU_SCRATCH_LAYOUT, (int64_t)(total / sizeof(float)) + 16);
    next += (64 - (uintptr_t)next % 64) % 64;
    for (int k = 0; k < n->nin; k++) {
        const Value *v = &g->values[n->in[k]];
        rin[k] = in[k];
        if (cpu_stored_nhwc(g, n->in[k])) {
            rin[k] = next;
            next += padded_bytes(g, n->in[k]);
            relayout(in[k], rin[k], &v->type.shape, ct_dtype_size(v->type.dtype), 0);
        }
    }
    for (int k = 0; k < n->nout; k++) {
        rout[k] = out[k];
        if (cpu_stored_nhwc(g, n->out[k])) {
            rout[k] = next;
            next += padded_bytes(g, n->out[k]);
        }
    }
    run(g, n, rin, rout, coll);
    for (int k = 0; k < n->nout; k++)
        if (rout[k] != out[k]) {
            const Value *v = &g->values[n->out[k]];
            relayout(rout[k], out[k], &v->type.shape, ct_dtype_size(v->type.dtype), 1);
        }
}
