/* Contract: the library launches of a depthwise convolution over
 * channels-last values, forward, input gradient and filter gradient
 * (lib_kernels.h's ct_dw_conv*), where lib_dw_conv_fits; the launch plan
 * takes them instead of cuDNN's call (launch_plan.c). */
#include <limits.h>

#include "codegen/cuda/lib_build.h"

enum { STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, GROUPS };

/* The threads an SM holds: the filter gradient's first stage is sized to
 * one wave of them. */
enum { SM_THREADS = 2048 };

/* The convolution's input and output activations (the forward's x and y;
 * dy and dx for the input gradient; x and dy for the filter's) and its
 * filter value (the weight, or the filter gradient). */
typedef struct DwOperands {
    ValueId in, out, filter;
} DwOperands;

static int dw_operands(const Node *n, DwOperands *o)
{
    switch (n->op) {
    case CT_OP_conv2d: *o = (DwOperands){n->in[0], n->out[0], n->in[1]}; return 1;
    case CT_OP_conv2d_grad_input: *o = (DwOperands){n->in[0], n->out[0], n->in[1]}; return 1;
    case CT_OP_conv2d_grad_weight: *o = (DwOperands){n->in[0], n->in[1], n->out[0]}; return 1;
    default: return 0;
    }
}

static int nhwc(const Graph *g, ValueId v)
{
    const Value *val = &g->values[v];
    return val->type.shape.ndim == 4 && val->layout == CT_LAYOUT_CHANNELS_LAST;
}

int lib_dw_conv_fits(const Graph *g, const Node *n)
{
    DwOperands o;
    if (!dw_operands(n, &o) || !nhwc(g, o.in) || !nhwc(g, o.out))
        return 0;
    const CtShape *f = &g->values[o.filter].type.shape, *a = &g->values[o.in].type.shape;
    const CtShape *b = &g->values[o.out].type.shape;
    CtDType t = g->values[o.in].type.dtype;
    int same = g->values[o.out].type.dtype == t && g->values[o.filter].type.dtype == t &&
               (n->op != CT_OP_conv2d || n->nin < 3 || g->values[n->in[2]].type.dtype == t);
    int64_t C = f->d[0];
    return same && n->iattr[GROUPS] == C && f->d[1] == 1 && a->d[1] == C && b->d[1] == C && f->d[3] <= CT_DW_MAXS &&
           shape_numel(a) < INT_MAX && shape_numel(b) < INT_MAX && n->iattr[DIL_H] * f->d[2] < INT_MAX / 4 &&
           n->iattr[DIL_W] * f->d[3] < INT_MAX / 4;
}

/* The taps [R, S, C] into scratch from the filter [C, 1, R, S] (its own
 * strides), for ct_dw_conv's coalesced reads. */
static void taps_copy(Builder *b, ValueId filter)
{
    const Value *f = &b->g->values[filter];
    const int64_t *d = f->type.shape.d;
    int64_t st[4], dim[3] = {d[2], d[3], d[0]}, from[3], to[3] = {d[3] * d[0], d[0], 1};
    value_strides(f, st);
    from[0] = st[2], from[1] = st[3], from[2] = st[0];
    LibLaunch *l = begin(b, "ct_copy", f->type.dtype, d[0] * d[2] * d[3]);
    a_val(l, filter);
    a_scratch(l, 0);
    a_index(l, index_make(3, dim, from, to));
}

int lib_dw_conv_next_fits(const Graph *g, const Node *n, const Node *next)
{
    const Value *y = &g->values[next->out[0]];
    if (n->op == CT_OP_conv2d_grad_weight) { /* dy summed over N, H, W: [C] (or [1, C, 1, 1]) */
        const Value *dy = &g->values[n->in[1]];
        return next->op == CT_OP_reduce_sum && next->nin == 1 && next->in[0] == n->in[1] && next->iattr[0] == 0xd &&
               y->type.dtype == dy->type.dtype && shape_numel(&y->type.shape) == dy->type.shape.d[1];
    }
    const Value *c = &g->values[n->out[0]];
    return n->op == CT_OP_conv2d && op_def(next->op)->fusion == OP_ACTIVATION && next->nin == 1 &&
           next->in[0] == n->out[0] && y->type.dtype == c->type.dtype && y->layout == c->layout &&
           shape_equal(&y->type.shape, &c->type.shape);
}

int lib_dw_conv(const Graph *g, int sms, const Node *n, const Node *next, LibLaunch *l, int *count, size_t *scratch,
                CtErr *err)
{
    Builder b = {g, l, 0, sms};
    DwOperands o;
    *count = 0;
    *scratch = 0;
    if (!lib_dw_conv_fits(g, n) || !dw_operands(n, &o))
        return ct_fail(err, "%s: not a depthwise convolution over channels-last values", op_def(n->op)->name);
    if (next && !lib_dw_conv_next_fits(g, n, next))
        return ct_fail(err, "%s: %s is not an activation of its output alone or the sum of its dy", op_def(n->op)->name,
                       op_def(next->op)->name);
    const int64_t *a = n->iattr;
    const CtShape *x = &g->values[n->op == CT_OP_conv2d_grad_input ? o.out : o.in].type.shape;
    const CtShape *y = &g->values[n->op == CT_OP_conv2d_grad_input ? o.in : o.out].type.shape;
    const CtShape *f = &g->values[o.filter].type.shape;
    CtDType t = g->values[o.in].type.dtype;
    int N = (int)x->d[0], C = (int)x->d[1], H = (int)x->d[2], W = (int)x->d[3], P = (int)y->d[2], Q = (int)y->d[3];
    int R = (int)f->d[2], S = (int)f->d[3];
    if (n->op == CT_OP_conv2d_grad_weight) {
        int64_t want = (int64_t)(sms > 0 ? sms : 1) * SM_THREADS, per = (int64_t)R * C;
        int64_t chunks = (want + per - 1) / per, rows = (int64_t)N * P;
        chunks = chunks < rows ? chunks : rows;
        int64_t len = (rows + chunks - 1) / chunks;
        chunks = (rows + len - 1) / len;
        /* the partial sums, then the bias gradient's */
        size_t part = (size_t)(chunks * per * S) * sizeof(float), bpart = (size_t)(chunks * C) * sizeof(float);
        LibLaunch *s1 = begin(&b, "ct_dw_conv_grad_w", t, chunks * per);
        a_val(s1, o.in);
        a_val(s1, o.out);
        a_scratch(s1, 0);
        if (next)
            a_scratch(s1, part);
        else
            arg(s1, LA_NULL);
        const int sizes[] = {N, H, W, C, P, Q, R, S, (int)a[STRIDE_H], (int)a[STRIDE_W], (int)a[PAD_H], (int)a[PAD_W],
                             (int)a[DIL_H], (int)a[DIL_W], (int)chunks, (int)len};
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
            a_i32(s1, sizes[k]);
        int64_t st[4];
        value_strides(&g->values[o.filter], st);
        LibLaunch *s2 = begin(&b, "ct_dw_conv_grad_w_sum", t, (int64_t)C * R * S * CT_LIB_LANES); /* a warp each */
        a_scratch(s2, 0);
        a_val(s2, o.filter);
        if (next) {
            a_scratch(s2, part);
            a_val(s2, next->out[0]);
        } else {
            arg(s2, LA_NULL);
            arg(s2, LA_NULL);
        }
        const int dims[] = {C, R, S, (int)chunks};
        for (size_t k = 0; k < sizeof dims / sizeof *dims; k++)
            a_i32(s2, dims[k]);
        a_i64(s2, st[0]);
        a_i64(s2, st[2]);
        a_i64(s2, st[3]);
        *scratch = part + (next ? bpart : 0);
        *count = b.n;
        return 0;
    }
    taps_copy(&b, o.filter);
    int grad = n->op == CT_OP_conv2d_grad_input;
    /* the kernel's input is dy [N, P, Q, C] for the gradient, its output dx [N, H, W, C] */
    int in_h = grad ? P : H, in_w = grad ? Q : W, out_h = grad ? H : P, out_w = grad ? W : Q;
    int QB = (out_w + CT_DW_QT - 1) / CT_DW_QT;
    LibLaunch *k = begin(&b, next ? "ct_dw_conv_act" : "ct_dw_conv", t, (int64_t)N * out_h * QB * C);
    a_val(k, o.in);
    a_scratch(k, 0);
    if (!grad && n->nin == 3)
        a_val(k, n->in[2]);
    else
        arg(k, LA_NULL);
    a_val(k, next ? next->out[0] : o.out);
    int sh = (int)a[STRIDE_H], sw = (int)a[STRIDE_W], ph = (int)a[PAD_H], pw = (int)a[PAD_W];
    int dh = (int)a[DIL_H], dw = (int)a[DIL_W];
    const int sizes[] = {N, in_h, in_w, C, out_h, out_w, R, S, grad ? 1 : sh, grad ? 1 : sw, grad ? sh : 1,
                         grad ? sw : 1, grad ? ph : -ph, grad ? pw : -pw, grad ? -dh : dh, grad ? -dw : dw};
    for (size_t j = 0; j < sizeof sizes / sizeof *sizes; j++)
        a_i32(k, sizes[j]);
    if (next) {
        a_i32(k, (int)next->op);
        a_i32(k, next->op == CT_OP_gelu && next->iattr[0]);
    }
    *scratch = (size_t)shape_numel(f) * ct_dtype_size(t);
    *count = b.n;
    return 0;
}
