/* Contract: lib_launches(n) gives the library kernel launches that compute
 * node n's outputs from its inputs, with physical strides, or fails naming
 * what is not supported. */
#include "codegen/cuda/lib_launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops.h"
#include "ir/ops/attention_geom.h"

/* Row-major strides of dims d[0..nd). */
static void dense_strides(int nd, const int64_t *d, int64_t *st)
{
    int64_t k = 1;
    for (int i = nd - 1; i >= 0; i--) {
        st[i] = k;
        k *= d[i];
    }
}

static CtIndex index_make(int nd, const int64_t *dim, const int64_t *st0, const int64_t *st1)
{
    CtIndex ix;
    memset(&ix, 0, sizeof ix);
    ix.n = 1;
    ix.nd = nd;
    for (int i = 0; i < nd; i++) {
        ix.dim[i] = dim[i];
        ix.st0[i] = st0[i];
        ix.st1[i] = st1 ? st1[i] : 0;
        ix.n *= dim[i];
    }
    return ix;
}

/* The index over every dim of shape s but `skip` (-1: none), with strides
 * a and b of those dims. */
static CtIndex index_without(const CtShape *s, int skip, const int64_t *a, const int64_t *b)
{
    int64_t dim[CT_MAX_DIMS], sa[CT_MAX_DIMS], sb[CT_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < s->ndim; i++)
        if (i != skip)
            dim[nd] = s->d[i], sa[nd] = a[i], sb[nd] = b ? b[i] : 0, nd++;
    return index_make(nd, dim, sa, sb);
}

/* ix with its dims of size 1 dropped and each pair of neighbouring dims
 * that both tensors step through contiguously (a dim's stride the next
 * one's times its size) merged into one: the same offsets for every index,
 * with fewer divisions a work item (none for one dim). Only for the
 * kernels that read no dim of their index but through ct_offsets. */
static CtIndex collapsed(CtIndex ix)
{
    CtIndex c = ix;
    c.nd = 0;
    for (long long d = 0; d < ix.nd; d++) {
        if (ix.dim[d] == 1 && ix.nd > 1)
            continue;
        long long k = c.nd - 1;
        if (k >= 0 && c.st0[k] == ix.st0[d] * ix.dim[d] && c.st1[k] == ix.st1[d] * ix.dim[d]) {
            c.dim[k] *= ix.dim[d];
            c.st0[k] = ix.st0[d], c.st1[k] = ix.st1[d];
            continue;
        }
        c.dim[c.nd] = ix.dim[d], c.st0[c.nd] = ix.st0[d], c.st1[c.nd] = ix.st1[d];
        c.nd++;
    }
    if (c.nd == 0) /* every dim of size 1 */
        c.nd = 1, c.dim[0] = 1, c.st0[0] = c.st1[0] = 0;
    return c;
}

typedef struct Builder {
    const Graph *g;
    LibLaunch *l;
    int n;
    int sms; /* the device's multiprocessors, which column sums size their tiles to */
} Builder;

static LibLaunch *begin(Builder *b, const char *kernel, CtDType t, long long items)
{
    LibLaunch *l = &b->l[b->n++];
    CT_ASSERT(b->n <= LIB_MAX_LAUNCHES);
    memset(l, 0, sizeof *l);
    snprintf(l->kernel, sizeof l->kernel, "%s_%s", kernel, ct_dtype_name(t));
    l->items = items;
    return l;
}

static LibArg *arg(LibLaunch *l, LibArgKind kind)
{
    CT_ASSERT(l->nargs < LIB_MAX_ARGS);
    LibArg *a = &l->arg[l->nargs++];
    a->kind = kind;
    return a;
}

static void a_val(LibLaunch *l, ValueId v) { arg(l, LA_VALUE)->v = v; }
static void a_i64(LibLaunch *l, long long i) { arg(l, LA_I64)->i = i; }
static void a_i32(LibLaunch *l, int i) { arg(l, LA_I32)->i = i; }
static void a_f32(LibLaunch *l, double f) { arg(l, LA_F32)->f = (float)f; }
static void a_f64(LibLaunch *l, double d) { arg(l, LA_F64)->d = d; }
static void a_index(LibLaunch *l, CtIndex ix) { arg(l, LA_INDEX)->ix = ix; }
static void a_scratch(LibLaunch *l, size_t off) { arg(l, LA_SCRATCH)->i = (long long)off; }
static void a_counters(LibLaunch *l, int64_t n) { arg(l, LA_COUNTERS)->i = n; }

static const Value *val(const Builder *b, ValueId v) { return &b->g->values[v]; }
static int same_strides(const Builder *b, ValueId x, ValueId y)
{
    return val(b, x)->layout == val(b, y)->layout || val(b, x)->type.shape.ndim != 4;
}

/* Whether ix's first offsets and its dims [0, nd)'s strides are multiples
 * of vw in both tensors (lib_kernels.h's ct_steps_vec). */
static int steps_vec(const CtIndex *ix, int64_t nd, int64_t vw)
{
    int vec = ix->base0 % vw == 0 && ix->base1 % vw == 0;
    for (int64_t d = 0; d < nd; d++)
        vec &= ix->st0[d] % vw == 0 && ix->st1[d] % vw == 0;
    return vec;
}

/* Whether ix's innermost dim is contiguous in both tensors, its length, the
 * other dims' strides and the first offsets multiples of vw (lib_kernels.h's
 * ct_last_vec). */
static int last_vec(const CtIndex *ix, int64_t vw)
{
    int64_t last = ix->nd - 1;
    return ix->nd >= 1 && ix->st0[last] == 1 && ix->st1[last] == 1 && ix->dim[last] % vw == 0 &&
           steps_vec(ix, last, vw);
}

/* ix's dims in the order of its second tensor's memory (strides st1 from
 * the largest; a stable sort): a copy writes y's bytes in order, and y's
 * innermost run (a channels-last slice's channels) is the index's last dim. */
static CtIndex dst_order(CtIndex ix)
{
    for (long long d = 1; d < ix.nd; d++)
        for (long long k = d; k > 0 && ix.st1[k - 1] < ix.st1[k]; k--) {
            long long dim = ix.dim[k], s0 = ix.st0[k], s1 = ix.st1[k];
            ix.dim[k] = ix.dim[k - 1], ix.st0[k] = ix.st0[k - 1], ix.st1[k] = ix.st1[k - 1];
            ix.dim[k - 1] = dim, ix.st0[k - 1] = s0, ix.st1[k - 1] = s1;
        }
    return ix;
}

/* y = x through the index `ix`: one copy launch, in y's memory order, of
 * CT_VW elements a work item where the layout lets the kernel take them
 * (lib_kernels.h's ct_copy_vec, which checks the addresses too). */
static void copy(Builder *b, ValueId x, ValueId y, CtIndex ix)
{
    CtDType t = val(b, y)->type.dtype;
    CtIndex c = collapsed(dst_order(ix));
    int64_t vw = 16 / (int64_t)ct_dtype_size(t);
    LibLaunch *l = begin(b, "ct_copy", t, last_vec(&c, vw) ? c.n / vw : c.n);
    a_val(l, x);
    a_val(l, y);
    a_index(l, c);
}

/* reshape: the flat row-major order is kept; one side must be row-major. */
static int plan_reshape(Builder *b, const Node *n, CtErr *err)
{
    const Value *x = val(b, n->in[0]), *y = val(b, n->out[0]);
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS], dense[CT_MAX_DIMS];
    value_strides(x, sx);
    value_strides(y, sy);
    if (y->layout != CT_LAYOUT_CHANNELS_LAST || y->type.shape.ndim != 4) {
        dense_strides(x->type.shape.ndim, x->type.shape.d, dense);
        copy(b, n->in[0], n->out[0], index_make(x->type.shape.ndim, x->type.shape.d, sx, dense));
    } else if (x->layout != CT_LAYOUT_CHANNELS_LAST || x->type.shape.ndim != 4) {
        dense_strides(y->type.shape.ndim, y->type.shape.d, dense);
        copy(b, n->in[0], n->out[0], index_make(y->type.shape.ndim, y->type.shape.d, dense, sy));
    } else {
        return ct_fail(err, "reshape between two channels_last shapes has no kernel");
    }
    return 0;
}

/* The storage a kernel of operands v (-1: none; CT_WIDE_X, _W, _Y and _R in
 * order) is instantiated for: their 16-bit dtype, if any, else f32; the
 * f32 ones' bits into *wide. */
static CtDType mixed_storage(const Builder *b, const ValueId v[4], int *wide)
{
    static const int bit[4] = {CT_WIDE_X, CT_WIDE_W, CT_WIDE_Y, CT_WIDE_R};
    CtDType t = CT_F32;
    for (int k = 0; k < 4; k++)
        if (v[k] >= 0 && val(b, v[k])->type.dtype != CT_F32)
            t = val(b, v[k])->type.dtype;
    *wide = 0;
    for (int k = 0; k < 4 && t != CT_F32; k++)
        if (v[k] >= 0 && val(b, v[k])->type.dtype == CT_F32)
            *wide |= bit[k];
    return t;
}

/* Whether operands v (-1: none) fit one mixed_storage: each f32, f16 or
 * bf16, the 16-bit ones of one dtype. */
static int one_storage(const Builder *b, const ValueId v[4])
{
    CtDType low = CT_F32;
    for (int k = 0; k < 4; k++) {
        CtDType t = v[k] >= 0 ? val(b, v[k])->type.dtype : CT_F32;
        if ((t != CT_F32 && t != CT_F16 && t != CT_BF16) || (t != CT_F32 && low != CT_F32 && t != low))
            return 0;
        low = t != CT_F32 ? t : low;
    }
    return 1;
}

/* The index of to_layout or permute n over its output, reading its input
 * with strides sx. */
static CtIndex relayout_index(const Builder *b, const Node *n, const int64_t *sx)
{
    const Value *y = val(b, n->out[0]);
    const CtShape *ys = &y->type.shape;
    int64_t sy[CT_MAX_DIMS], st[CT_MAX_DIMS];
    value_strides(y, sy);
    for (int i = 0; i < ys->ndim; i++)
        st[i] = n->op == CT_OP_permute ? sx[n->iattr[1 + i]] : sx[i];
    return index_make(ys->ndim, ys->d, st, sy);
}

int lib_cast_copy_fits(const Graph *g, const Node *cast, const Node *n)
{
    Builder b = {g, NULL, 0, 0};
    return cast->op == CT_OP_cast && (n->op == CT_OP_to_layout || n->op == CT_OP_permute) &&
           n->in[0] == cast->out[0] && one_storage(&b, (ValueId[4]){cast->in[0], -1, n->out[0], -1}) &&
           val(&b, cast->in[0])->type.shape.ndim <= CT_MAXD;
}

int lib_cast_copy(const Graph *g, const Node *cast, const Node *n, LibLaunch *l, int *count, CtErr *err)
{
    Builder b = {g, l, 0, 0};
    int wide;
    CtDType st = mixed_storage(&b, (ValueId[4]){cast->in[0], -1, n->out[0], -1}, &wide);
    int64_t sx[CT_MAX_DIMS];
    value_strides(val(&b, cast->in[0]), sx);
    LibLaunch *k = begin(&b, "ct_copy_cast", st, shape_numel(&val(&b, n->out[0])->type.shape));
    a_val(k, cast->in[0]);
    a_val(k, n->out[0]);
    a_i32(k, wide);
    a_index(k, collapsed(relayout_index(&b, n, sx)));
    *count = b.n;
    return 0;
}

static int plan_data(Builder *b, const Node *n, CtErr *err)
{
    const Value *x = val(b, n->in[0]), *y = val(b, n->out[0]);
    const CtShape *ys = &y->type.shape;
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS], st[CT_MAX_DIMS];
    value_strides(x, sx);
    value_strides(y, sy);
    const int64_t *a = n->iattr;
    switch (n->op) {
    case CT_OP_reshape:
        return plan_reshape(b, n, err);
    case CT_OP_to_layout: case CT_OP_permute:
        copy(b, n->in[0], n->out[0], relayout_index(b, n, sx));
        return 0;
    case CT_OP_slice: {
        memcpy(st, sx, sizeof st);
        st[a[0]] *= a[3];
        CtIndex ix = index_make(ys->ndim, ys->d, st, sy);
        ix.base0 = a[1] * sx[a[0]];
        copy(b, n->in[0], n->out[0], ix);
        return 0;
    }
    case CT_OP_slice_grad: {
        LibLaunch *l = begin(b, "ct_fill", y->type.dtype, shape_numel(ys));
        a_val(l, n->out[0]);
        a_i64(l, shape_numel(ys));
        a_f32(l, 0);
        memcpy(st, sy, sizeof st);
        st[a[0]] *= a[3];
        CtIndex ix = index_make(x->type.shape.ndim, x->type.shape.d, sx, st);
        ix.base1 = a[1] * sy[a[0]];
        copy(b, n->in[0], n->out[0], ix);
        return 0;
    }
    case CT_OP_pad: {
        /* the value where no input element lands, then the kept block of x
         * (rows [i0, i1), columns [j0, j1) of y) copied over it */
        int64_t i0 = a[0] > 0 ? a[0] : 0, i1 = ys->d[2] - (a[1] > 0 ? a[1] : 0);
        int64_t j0 = a[2] > 0 ? a[2] : 0, j1 = ys->d[3] - (a[3] > 0 ? a[3] : 0);
        int64_t rows = i1 > i0 ? i1 - i0 : 0, cols = j1 > j0 ? j1 - j0 : 0;
        if (rows < ys->d[2] || cols < ys->d[3]) {
            LibLaunch *l = begin(b, "ct_fill", y->type.dtype, shape_numel(ys));
            a_val(l, n->out[0]);
            a_i64(l, shape_numel(ys));
            a_f32(l, n->fattr[0]);
        }
        if (rows && cols) {
            CtIndex ix = index_make(4, (int64_t[]){ys->d[0], ys->d[1], rows, cols}, sx, sy);
            ix.base0 = (i0 - a[0]) * sx[2] + (j0 - a[2]) * sx[3];
            ix.base1 = i0 * sy[2] + j0 * sy[3];
            copy(b, n->in[0], n->out[0], ix);
        }
        return 0;
    }
    case CT_OP_concat: {
        int64_t at = 0;
        for (int k = 0; k < n->nin; k++) {
            const Value *xk = val(b, n->in[k]);
            value_strides(xk, sx);
            CtIndex ix = index_make(xk->type.shape.ndim, xk->type.shape.d, sx, sy);
            ix.base1 = at * sy[a[0]];
            copy(b, n->in[k], n->out[0], ix);
            at += xk->type.shape.d[a[0]];
        }
        return 0;
    }
    default:
        return ct_fail(err, "no library kernel for %s", op_def(n->op)->name);
    }
}

/* Column sums (lib_kernels.h's ct_col_tile) of `outs` outputs, w of them
 * a work item (where the kernel's vector path is expected), sxc between
 * neighbouring outputs, nsum sums each, over `len` rows, on b's device:
 * its columns, and the slices of the rows, a block's row lanes a tile:
 * some COL_TILES tiles an SM (each lane with 8 or 16 loads of 16 bytes in
 * flight: 32-64 KiB an SM at one block an SM, where an H200's bandwidth at
 * HBM's latency needs some 25), at most a slice a lane's row, and at most
 * COL_TAIL partial sums a column for its last tile to add alone (128 KiB:
 * ~1-2 us on one SM) unless that leaves fewer than COL_FILL tiles an SM: a
 * batch norm of 64 channels, one column, would otherwise stream its
 * 400-800 MB (resnet50's first at batch 256) through 64 SMs. The kernel's
 * counters: outs at most (a column an output). */
enum { COL_TILES = 8, COL_FILL = 2, COL_TAIL = 16384 }; /* tiles an SM; partial sums */
typedef struct ColPlan {
    int64_t cols, slices;
} ColPlan;

static ColPlan col_plan(const Builder *b, int64_t len, int64_t outs, int64_t w, int64_t sxc, int64_t nsum)
{
    int64_t tx = w > 1 || sxc == 1 ? CT_COL_TX : 1, lanes = CT_LIB_BLOCK / tx, sms = b->sms > 0 ? b->sms : 1;
    ColPlan c = {(outs / w + tx - 1) / tx, 0};
    int64_t s = (COL_TILES * sms + c.cols - 1) / c.cols, most = (len + lanes - 1) / lanes;
    int64_t tail = COL_TAIL / (tx * w * nsum), fill = (COL_FILL * sms + c.cols - 1) / c.cols;
    tail = tail > fill ? tail : fill;
    s = s < tail ? s : tail;
    s = s < most ? s : most;
    c.slices = s > 1 ? s : 1;
    return c;
}

/* Input i of node n, or NULL for i < 0. */
static void a_in_or_null(LibLaunch *l, const Node *n, int i)
{
    if (i >= 0)
        a_val(l, n->in[i]);
    else
        arg(l, LA_NULL);
}

/* A reduction's side output and its scale, or two NULLs. */
static void a_side(LibLaunch *l, ValueId side, ValueId scale)
{
    if (side >= 0) {
        a_val(l, side);
        a_val(l, scale);
    } else {
        arg(l, LA_NULL);
        arg(l, LA_NULL);
    }
}

/* The work items a row of `len` elements (s0, s1 their strides along it)
 * makes in a kernel of storage t: 16 bytes of the row each where
 * lib_kernels.h's ct_rows_vec takes them from the layout (the kernel then
 * checks the addresses), else one element each. */
static int64_t row_items(const CtIndex *rows, int64_t len, int64_t s0, int64_t s1, CtDType t)
{
    int64_t vw = 16 / (int64_t)ct_dtype_size(t);
    int vec = s0 == 1 && s1 == 1 && len % vw == 0 && steps_vec(rows, rows->nd, vw);
    return vec ? len / vw : len;
}

/* The outputs a work item of a sum of x over red into out (storage st):
 * 16 bytes of them where the layout allows (lib_kernels.h's ct_sum_vec;
 * the kernel checks the addresses), else one. */
static int64_t sum_vec_width(const CtIndex *out, const CtIndex *red, CtDType st)
{
    int64_t vw = 16 / (int64_t)ct_dtype_size(st);
    int vec = last_vec(out, vw) && red->base0 % vw == 0;
    for (int d = 0; d < red->nd; d++)
        vec &= red->st0[d] % vw == 0;
    return vec ? vw : 1;
}

/* Whether a sum of x over red into out takes one stage (ct_reduce_sum: an
 * output a work item, each a serial walk of the reduction): where the
 * reduction is short (SUM_SHORT terms), or the outputs' work items alone
 * are more than half the threads an H200 holds (SUM_ITEMS: 132 SMs x
 * 2048); else column sums (sum_cols). */
enum { SUM_ITEMS = 262144, SUM_SHORT = 16 };

static int sum_one_stage(const CtIndex *out, const CtIndex *red, CtDType st)
{
    return red->n <= SUM_SHORT || out->n / sum_vec_width(out, red, st) > SUM_ITEMS / 2;
}

/* The column sums (ct_reduce_sum_cols) of x (times f, unless f < 0; with
 * the side output unless side < 0) over red for each output of out,
 * divided by div, into y, in one launch. */
static void sum_cols(Builder *b, ValueId x, ValueId f, ValueId y, int wide, CtDType st, CtIndex out, CtIndex red,
                     ValueId side, ValueId scale, double div, size_t *scratch)
{
    int64_t vw = sum_vec_width(&out, &red, st);
    ColPlan cp = col_plan(b, red.n, out.n, vw, out.nd ? out.st0[out.nd - 1] : 0, 1);
    *scratch = sizeof(double) * (size_t)(cp.slices * out.n);
    LibLaunch *l = begin(b, "ct_reduce_sum_cols", st, cp.cols * cp.slices * CT_LIB_BLOCK);
    a_val(l, x);
    if (f >= 0)
        a_val(l, f);
    else
        arg(l, LA_NULL);
    a_i32(l, wide);
    arg(l, LA_SCRATCH);
    a_counters(l, out.n);
    a_val(l, y);
    a_index(l, out);
    a_index(l, red);
    a_i64(l, cp.slices);
    a_side(l, side, scale);
    a_f64(l, div);
}

/* reduce_sum: one stage (ct_reduce_sum, an output a work item) where
 * sum_one_stage says, else column sums (sum_cols). With a side output
 * (side >= 0): side = x * scale stored as the sums walk x
 * (lib_reduce_sum_side). */
static int plan_reduce(Builder *b, const Node *n, ValueId side, ValueId scale, size_t *scratch, CtErr *err)
{
    const Value *x = val(b, n->in[0]), *y = val(b, n->out[0]);
    if (n->nin > 1 && !same_strides(b, n->in[0], n->in[1]))
        return ct_fail(err, "reduce_sum of a product of two layouts has no kernel");
    const CtShape *xs = &x->type.shape;
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS], kd[CT_MAX_DIMS], ks0[CT_MAX_DIMS], ks1[CT_MAX_DIMS];
    int64_t rd[CT_MAX_DIMS], rs[CT_MAX_DIMS];
    int nk = 0, nr = 0, yd = 0;
    value_strides(x, sx);
    value_strides(y, sy);
    for (int i = 0; i < xs->ndim; i++) {
        int reduced = (n->iattr[0] >> i) & 1;
        if (reduced)
            rd[nr] = xs->d[i], rs[nr++] = sx[i];
        else
            kd[nk] = xs->d[i], ks0[nk] = sx[i], ks1[nk++] = sy[yd];
        if (!reduced || n->iattr[1])
            yd++;
    }
    CtIndex out = collapsed(index_make(nk, kd, ks0, ks1)), red = collapsed(index_make(nr, rd, rs, NULL));
    /* x (and y, which has x's dtype), the factor, the side output, its scale */
    const ValueId v[4] = {n->in[0], n->nin > 1 ? n->in[1] : -1, side, scale};
    int wide;
    CtDType st = mixed_storage(b, v, &wide);
    if (sum_one_stage(&out, &red, st)) {
        LibLaunch *l = begin(b, "ct_reduce_sum", st, out.n);
        a_val(l, n->in[0]);
        a_in_or_null(l, n, n->nin > 1 ? 1 : -1); /* the product's factor */
        a_val(l, n->out[0]);
        a_i32(l, wide);
        a_index(l, out);
        a_index(l, red);
        a_side(l, side, scale);
        return 0;
    }
    sum_cols(b, n->in[0], n->nin > 1 ? n->in[1] : -1, n->out[0], wide, st, out, red, side, scale, 1, scratch);
    return 0;
}

/* softmax and its gradient, a row a work item, over dim `dim`: rows walk
 * the other dims. */
static int plan_rows(Builder *b, const Node *n, CtErr *err)
{
    ValueId x = n->in[0], y = n->out[0];
    const CtShape *xs = &val(b, x)->type.shape;
    int dim = (int)n->iattr[0];
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS];
    value_strides(val(b, x), sx);
    value_strides(val(b, y), sy);
    CtIndex rows = collapsed(index_without(xs, dim, sx, sy));
    CtDType t = val(b, y)->type.dtype;
    LibLaunch *l;
    if (n->op == CT_OP_softmax) {
        l = begin(b, "ct_softmax", t, rows.n);
        a_val(l, x);
        a_val(l, y);
    } else {
        if (!same_strides(b, n->in[0], n->in[1]))
            return ct_fail(err, "softmax_grad of y and dy in two layouts has no kernel");
        l = begin(b, "ct_softmax_grad", t, rows.n);
        a_val(l, x);
        a_val(l, n->in[1]);
        a_val(l, y);
    }
    a_index(l, rows);
    a_i64(l, xs->d[dim]);
    a_i64(l, sx[dim]);
    a_i64(l, sy[dim]);
    return 0;
}

/* layer_norm's kernels: the storage they are instantiated for (the 16-bit
 * dtype among x, w, y or dy, and the prologue's residual `res` (-1: none),
 * else f32) and the CT_WIDE_* bits of the operands stored as f32 beside it. */
static CtDType norm_storage(Builder *b, const Node *n, ValueId res, int *wide)
{
    int grad = n->op == CT_OP_layer_norm_grad;
    const ValueId v[4] = {n->in[0], n->in[1], grad ? n->in[2] : n->out[0], res};
    return mixed_storage(b, v, wide);
}

/* A layer_norm_grad's epilogue (lib_layer_norm_grad_step): the residual
 * added to dx (-1: none) into `out`, that sum cast into `low` (-1: none).
 * A layer_norm's prologue (lib_layer_norm_fused): its input the sum of x and
 * res (-1: none), stored into `out` (-1: not stored); its output cast into
 * `low` (-1: none): lib_layer_norm_fused. */
typedef struct LnEpi {
    ValueId res, out, low, x;
} LnEpi;

/* layer_norm over the last dim, a row a warp (with the prologue's parts:
 * epi, NULL: none). Its gradient: dx a row a warp (with epi's parts),
 * each row's mean and 1/std (two floats) into scratch; then dweight and
 * dbias as column sums, their slices' sums (two doubles a slice and
 * column) after the stats. */
static int plan_layer_norm(Builder *b, const Node *n, const LnEpi *epi, size_t *scratch, CtErr *err)
{
    int grad = n->op == CT_OP_layer_norm_grad, wide;
    ValueId x = n->in[0], y = epi && grad ? epi->out : n->out[0];
    const CtShape *xs = &val(b, x)->type.shape;
    int dim = xs->ndim - 1;
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS], D = xs->d[dim];
    if (grad && !same_strides(b, x, n->in[2]))
        return ct_fail(err, "layer_norm_grad of x and dy in two layouts has no kernel");
    value_strides(val(b, x), sx);
    value_strides(val(b, y), sy);
    CtIndex rows = collapsed(index_without(xs, dim, sx, sy));
    CtDType t = norm_storage(b, n, epi && !grad ? epi->res : -1, &wide);
    /* a warp a row, or where the rows are in registers (lib_kernels.h's
     * ct_ln_vec) ct_ln_tile's rows a warp: dx's at k > 1 rows a lane from
     * its own kernel (lib_common.h) */
    int64_t vw = 16 / (int64_t)ct_dtype_size(t), items = D <= CT_LN_MOST ? row_items(&rows, D, sx[dim], sy[dim], t) : D;
    int64_t warps = rows.n;
    const char *kernel = grad ? "ct_layer_norm_grad_x" : "ct_layer_norm";
    if (items < D) {
        CtLnTile tile = ct_ln_tile(items, CT_LIB_LANES, (int)(CT_LN_MOST / CT_LIB_LANES / vw), CT_LN_ROWS);
        warps = (rows.n + tile.rows - 1) / tile.rows;
        if (grad && tile.k > 1)
            kernel = "ct_layer_norm_grad_x_rows";
    }
    LibLaunch *l = begin(b, kernel, t, warps * CT_LIB_LANES);
    for (int k = 0; k < 3; k++) /* x (the prologue's), w, and b or dy */
        a_val(l, k == 0 && epi && !grad ? epi->x : n->in[k]);
    a_val(l, y);
    a_i32(l, wide);
    ValueId ptrs[3] = {epi ? epi->res : -1, epi ? (grad ? epi->low : epi->out) : -1, epi ? epi->low : -1};
    for (int k = 0; k < 3 - grad; k++) /* res, and low or sum, then the forward's low */
        if (ptrs[k] >= 0)
            a_val(l, ptrs[k]);
        else
            arg(l, LA_NULL);
    if (grad)
        arg(l, LA_SCRATCH);
    a_index(l, rows);
    a_i64(l, D);
    a_i64(l, sx[dim]);
    a_i64(l, sy[dim]);
    a_f32(l, n->fattr[0]);
    if (!grad)
        return 0;
    /* the weights' column sums take 16 bytes of a row a work item where the rows are in registers */
    ColPlan cp = col_plan(b, rows.n, D, items == D ? 1 : D / items, sx[dim], 2);
    size_t stats = 2 * sizeof(float) * (size_t)rows.n;
    *scratch = stats + 2 * sizeof(double) * (size_t)(cp.slices * D);
    l = begin(b, "ct_layer_norm_grad_w", t, cp.cols * cp.slices * CT_LIB_BLOCK);
    a_val(l, x);
    a_val(l, n->in[2]);
    a_i32(l, wide);
    arg(l, LA_SCRATCH);
    a_scratch(l, stats);
    a_counters(l, D);
    a_val(l, n->out[1]);
    a_val(l, n->out[2]);
    a_index(l, rows);
    a_i64(l, D);
    a_i64(l, sx[dim]);
    a_i64(l, cp.slices);
    return 0;
}

/* group_norm and its gradient: a block a group (ct_group_norm, and
 * ct_group_norm_grad_x leaving each group's statistics in scratch), then,
 * with a weight, a block a channel (ct_group_norm_grad_w). An absent weight
 * or bias is a null pointer. */
static int plan_group_norm(Builder *b, const Node *n, size_t *scratch, CtErr *err)
{
    int grad = n->op == CT_OP_group_norm_grad, weight = grad ? n->nin == 3 : n->nin > 1;
    ValueId x = n->in[0], y = n->out[0], dy = grad ? n->in[n->nin - 1] : -1;
    const CtShape *xs = &val(b, x)->type.shape;
    CtDType t = val(b, y)->type.dtype;
    if (weight && val(b, n->in[1])->type.dtype != t)
        return ct_fail(err, "%s of x and weight in two dtypes has no kernel", op_def(n->op)->name);
    if (grad && !same_strides(b, x, dy))
        return ct_fail(err, "group_norm_grad of x and dy in two layouts has no kernel");
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS], G = n->iattr[0], cg = xs->d[1] / G;
    value_strides(val(b, x), sx);
    value_strides(val(b, y), sy);
    CtShape group = *xs; /* a sample's group: [cg, S...] after its N dim */
    group.d[1] = cg;
    CtIndex rows = index_make(2, (int64_t[]){xs->d[0], G}, (int64_t[]){sx[0], cg * sx[1]},
                              (int64_t[]){sy[0], cg * sy[1]});
    LibLaunch *l = begin(b, grad ? "ct_group_norm_grad_x" : "ct_group_norm", t, rows.n * CT_LIB_BLOCK);
    a_val(l, x);
    if (weight)
        a_val(l, n->in[1]);
    else
        arg(l, LA_NULL);
    if (grad)
        a_val(l, dy);
    else if (n->nin > 2)
        a_val(l, n->in[2]);
    else
        arg(l, LA_NULL);
    a_val(l, y);
    if (grad)
        arg(l, LA_SCRATCH);
    a_index(l, rows);
    a_index(l, index_without(&group, 0, sx, sy));
    a_i64(l, cg);
    a_f32(l, n->fattr[0]);
    if (!grad)
        return 0;
    *scratch = 2 * sizeof(double) * (size_t)rows.n;
    if (!weight)
        return 0;
    l = begin(b, "ct_group_norm_grad_w", t, xs->d[1] * CT_LIB_BLOCK);
    a_val(l, x);
    a_val(l, dy);
    arg(l, LA_SCRATCH);
    a_val(l, n->out[1]);
    a_val(l, n->out[2]);
    a_index(l, index_without(xs, 1, sx, NULL));
    a_i64(l, xs->d[1]);
    a_i64(l, sx[1]);
    a_i64(l, cg);
    return 0;
}

/* gather and gather_grad: one launch over the output's elements, x as
 * [O, T, I] and y as [O, K, I], both dense (the op is NCHW-only). */
static int plan_gather(Builder *b, const Node *n, CtErr *err)
{
    int grad = n->op == CT_OP_gather_grad;
    const Value *x = val(b, grad ? n->out[0] : n->in[0]), *y = val(b, n->out[0]);
    if ((x->layout == CT_LAYOUT_CHANNELS_LAST && x->type.shape.ndim == 4) ||
        (y->layout == CT_LAYOUT_CHANNELS_LAST && y->type.shape.ndim == 4))
        return ct_fail(err, "%s in channels_last memory has no kernel", op_def(n->op)->name);
    const CtShape *xs = &x->type.shape;
    int64_t dim = n->iattr[0], O = 1, I = 1, K = shape_numel(&val(b, n->in[1])->type.shape);
    for (int i = 0; i < dim; i++)
        O *= xs->d[i];
    for (int i = (int)dim + 1; i < xs->ndim; i++)
        I *= xs->d[i];
    int i32 = val(b, n->in[1])->type.dtype == CT_I32;
    LibLaunch *l = begin(b, grad ? "ct_gather_grad" : "ct_gather", y->type.dtype,
                         O * (grad ? xs->d[dim] : K) * I);
    a_val(l, n->in[0]);
    if (!i32)
        arg(l, LA_NULL);
    a_val(l, n->in[1]);
    if (i32)
        arg(l, LA_NULL);
    a_val(l, n->out[0]);
    a_i64(l, O);
    a_i64(l, xs->d[dim]);
    a_i64(l, K);
    a_i64(l, I);
    return 0;
}

/* The parts of a batch norm's epilogue its apply pass computes before the
 * store: a residual add (-1: none) and an activation (an op, -1: none),
 * the value it stores (out) and the step's first node it leaves (tail). */
typedef struct BnEpi {
    ValueId residual, out;
    int act, approx, tail;
} BnEpi;

/* Where a launch's pointer argument points: an offset into scratch
 * (LA_SCRATCH) or into the program's kept region (LA_KEPT). */
typedef struct Place {
    LibArgKind kind;
    size_t off;
} Place;

static void a_place(LibLaunch *l, Place p) { arg(l, p.kind)->i = (long long)p.off; }

/* A batch_norm run again for lib_bn_act_grad (its running statistics not
 * written), or the batch_norm_grad it runs with the activation's gradient:
 * its scratch from byte `base`, the forward's coefficients at `fwd`. */
typedef struct BnAct {
    size_t base;
    Place fwd;
    int act, approx;
    ValueId dy; /* the act_grad's dy, read in place of the batch_norm_grad's */
    /* lib_kernels.h's CtBnDy (-1: none): where sum, dy (the batch_norm_grad's)
     * is act'(z) (a + b), stored by the statistics kernel; where hw > 0, dy
     * (perhaps -1) s + p / hw, s = a, p = b, computed by each pass */
    int sum;
    ValueId a, b, z;
    long long hw;
} BnAct;

static void a_val_or_null(LibLaunch *l, ValueId v)
{
    if (v >= 0)
        a_val(l, v);
    else
        arg(l, LA_NULL);
}

/* ct_bn_grad_stats' and ct_bn_grad_apply's forward coefficients and
 * activation, then CtBnDy's a, b, z (the statistics', stats) and hw:
 * the apply pass's where an excitation's. */
static void a_fwd(LibLaunch *l, const BnAct *fa, int stats)
{
    if (fa && !fa->sum)
        a_place(l, fa->fwd);
    else
        arg(l, LA_NULL);
    a_i32(l, fa ? fa->act : -1);
    a_i32(l, fa ? fa->approx : 0);
    int from = fa && (fa->hw || (fa->sum && stats));
    const ValueId v[3] = {from ? fa->a : -1, from ? fa->b : -1, from ? fa->z : -1};
    for (int k = 0; k < (stats ? 3 : 2); k++)
        a_val_or_null(l, v[k]);
    a_i64(l, from ? fa->hw : 0);
}

/* batch_norm and its gradient (lib_kernels.h): the statistics kernel (each
 * tile's sums of each channel into scratch, then each column's
 * coefficients by its last tile), or for an eval forward the coefficients
 * from the running statistics; then the elementwise pass (with epi's
 * parts, NULL: none; for a gradient, fa's activation, NULL: none). The
 * eval coefficients' kernel takes the parameters' dtype, the others x's,
 * reading the parameters as f32 where they are (under AMP). A training
 * forward with kc (NULL, or kc->at < 0: none) keeps its coefficients in
 * the kept region at kc->at, where kc->ready says they are already (the
 * batch norm run again: no statistics). *scratch gets the bytes from fa's
 * base. */
static int plan_batch_norm(Builder *b, const Node *n, const BnEpi *epi, const BnAct *fa, const LibBnCoef *kc,
                           size_t *scratch, CtErr *err)
{
    int grad = n->op == CT_OP_batch_norm_grad, training = (int)n->iattr[0];
    ValueId x = n->in[0], y = n->out[0];
    const CtShape *xs = &val(b, x)->type.shape;
    CtDType t = val(b, y)->type.dtype, pt = val(b, n->in[1])->type.dtype;
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS], C = xs->d[1];
    value_strides(val(b, x), sx);
    value_strides(val(b, y), sy);
    ValueId dy = fa ? fa->dy : grad ? n->in[4] : -1;
    if (grad && dy >= 0 && !same_strides(b, x, dy))
        return ct_fail(err, "batch_norm_grad of x and dy in two layouts has no kernel");
    if (training && n->iattr[1])
        return ct_fail(err, "%s synchronised across ranks (--sync-bn) needs NCCL, which the cuda backend has not yet",
                       op_def(n->op)->name);
    for (int k = 2; k < (grad ? 4 : 5); k++)
        if (val(b, n->in[k])->type.dtype != pt || (pt != t && pt != CT_F32))
            return ct_fail(err, "%s of %s values with %s parameters and statistics has no kernel",
                           op_def(n->op)->name, ct_dtype_name(t), ct_dtype_name(val(b, n->in[k])->type.dtype));
    CtIndex rows = collapsed(index_without(xs, 1, sx, sy));
    int64_t items = row_items(&rows, C, sx[1], sy[1], t), nsum = grad ? 4 : 2, sums = grad || training;
    ColPlan cp = col_plan(b, rows.n, C, items == C ? 1 : C / items, sx[1], nsum);
    int keep = kc && kc->at >= 0, ready = keep && kc->ready;
    size_t base = fa ? fa->base : 0, part = sums && !ready ? sizeof(double) * (size_t)(nsum * cp.slices * C) : 0;
    Place coef = keep ? (Place){LA_KEPT, (size_t)kc->at} : (Place){LA_SCRATCH, base + part};
    *scratch = part + (keep ? 0 : sizeof(double) * (size_t)((grad ? 3 : 2) * C)); /* the coefficients */
    LibLaunch *l;
    if (sums && !ready) {
        l = begin(b, grad ? "ct_bn_grad_stats" : "ct_bn_stats", t, cp.cols * cp.slices * CT_LIB_BLOCK);
        a_val(l, x);
        if (grad) {
            a_val_or_null(l, dy);
            a_fwd(l, fa, 1);
        }
        a_scratch(l, base);
        a_counters(l, C);
        for (int k = 1; k < (grad ? 4 : 5); k++) /* w, b, rm, rv; the gradient's w, rm, rv */
            a_val(l, n->in[k]);
        for (int k = 1; k < 3; k++) /* the running stats' updates (not for a forward run again), or dw and db */
            if (k < n->nout && (grad || !fa))
                a_val(l, n->out[k]);
            else
                arg(l, LA_NULL);
        a_i32(l, pt != t);
        a_place(l, coef);
        a_index(l, rows);
        a_i64(l, C);
        a_i64(l, sx[1]);
        a_i64(l, cp.slices);
        if (grad)
            a_i32(l, training);
        else
            a_f32(l, n->fattr[0]);
        a_f32(l, n->fattr[grad ? 0 : 1]);
    } else if (!sums) {
        l = begin(b, "ct_bn_coef", pt, C);
        for (int k = 1; k < 5; k++)
            a_val(l, n->in[k]);
        a_scratch(l, base);
        a_i64(l, C);
        a_f32(l, n->fattr[1]);
    }
    l = begin(b, grad ? "ct_bn_grad_apply" : "ct_bn_apply", t, rows.n * C);
    a_val(l, x);
    if (grad) {
        a_val_or_null(l, dy);
        a_fwd(l, fa, 0);
    }
    a_place(l, coef);
    if (!grad) {
        if (epi && epi->residual >= 0)
            a_val(l, epi->residual);
        else
            arg(l, LA_NULL);
    }
    a_val(l, epi ? epi->out : y);
    a_index(l, rows);
    a_i64(l, C);
    a_i64(l, sx[1]);
    a_i64(l, sy[1]);
    if (grad) {
        a_i32(l, training);
    } else {
        a_i32(l, epi ? epi->act : -1);
        a_i32(l, epi ? epi->approx : 0);
    }
    return 0;
}

/* Whether values v and w have one shape, dtype and layout. */
static int same_storage(const Builder *b, ValueId v, ValueId w)
{
    const Value *a = val(b, v), *c = val(b, w);
    return shape_equal(&a->type.shape, &c->type.shape) && a->type.dtype == c->type.dtype && a->layout == c->layout;
}

int lib_batch_norm_step(const Graph *g, int sms, const FusePlan *p, const FuseStep *st, LibBnCoef kc, LibLaunch *l,
                        int *count, size_t *scratch, int *tail, CtErr *err)
{
    Builder b = {g, l, 0, sms};
    const Node *bn = &g->nodes[p->nodes[st->first]];
    BnEpi e = {.residual = -1, .out = bn->out[0], .act = -1, .tail = 1};
    for (; e.tail < st->n && !p->materialised[e.out] && e.act < 0; e.tail++) {
        const Node *n = &g->nodes[p->nodes[st->first + e.tail]];
        if (op_def(n->op)->fusion == OP_ACTIVATION && n->in[0] == e.out && same_storage(&b, n->out[0], e.out)) {
            e.act = n->op;
            e.approx = n->op == CT_OP_gelu && n->iattr[0];
        } else if (n->op == CT_OP_add && e.residual < 0 && (n->in[0] == e.out) != (n->in[1] == e.out) &&
                   same_storage(&b, n->in[0], n->in[1]) && same_storage(&b, n->out[0], e.out)) {
            e.residual = n->in[0] == e.out ? n->in[1] : n->in[0];
        } else {
            break;
        }
        e.out = n->out[0];
    }
    *count = 0;
    *scratch = 0;
    *tail = e.tail;
    if (bn->op != CT_OP_batch_norm)
        return ct_fail(err, "a step of %s is not batch norm's", op_def(bn->op)->name);
    if (plan_batch_norm(&b, bn, &e, NULL, &kc, scratch, err))
        return -1;
    *count = b.n;
    return 0;
}

int lib_layer_norm_grad_step(const Graph *g, int sms, const FusePlan *p, const FuseStep *st, int most, LibLaunch *l,
                             int *count, size_t *scratch, int *tail, CtErr *err)
{
    Builder b = {g, l, 0, sms};
    const Node *n = &g->nodes[p->nodes[st->first]];
    LnEpi e = {.res = -1, .out = n->out[0], .low = -1, .x = -1};
    int wide;
    CtDType t = norm_storage(&b, n, -1, &wide);
    *tail = 1;
    if (most > 0 && st->n > 1 && !p->materialised[e.out]) {
        const Node *add = &g->nodes[p->nodes[st->first + 1]];
        ValueId res = add->in[0] == e.out ? add->in[1] : add->in[0];
        if (add->op == CT_OP_add && same_storage(&b, res, e.out) && same_storage(&b, add->out[0], e.out)) {
            e.res = res;
            e.out = add->out[0];
            *tail = 2;
        }
    }
    if (*tail == 2 && most > 1 && st->n > 2) { /* the sum cast to the kernel's 16-bit storage */
        const Node *cast = &g->nodes[p->nodes[st->first + 2]];
        const Value *c = val(&b, cast->out[0]);
        if (cast->op == CT_OP_cast && c->type.dtype == t && val(&b, e.out)->type.dtype == CT_F32 && t != CT_F32 &&
            c->layout == val(&b, e.out)->layout) {
            e.low = cast->out[0];
            *tail = 3;
        }
    }
    *count = 0;
    if (plan_layer_norm(&b, n, &e, scratch, err))
        return -1;
    *count = b.n;
    return 0;
}

int lib_layer_norm_res_fits(const Graph *g, const Node *ln, ValueId x, ValueId res)
{
    Builder b = {g, NULL, 0, 0};
    int wide;
    CtDType t = norm_storage(&b, ln, -1, &wide), r = val(&b, res)->type.dtype; /* one 16-bit dtype, if any */
    const CtShape *s = &val(&b, ln->in[0])->type.shape;
    return (r == t || r == CT_F32 || t == CT_F32) && val(&b, x)->type.dtype == val(&b, ln->in[0])->type.dtype &&
           shape_equal(&val(&b, x)->type.shape, s) && shape_equal(&val(&b, res)->type.shape, s) &&
           same_strides(&b, x, ln->in[0]) && same_strides(&b, res, ln->in[0]);
}

int lib_layer_norm_fused(const Graph *g, const Node *ln, ValueId x, ValueId res, ValueId sum, ValueId low,
                         LibLaunch *l, int *count, CtErr *err)
{
    Builder b = {g, l, 0, 0};
    LnEpi e = {.res = res, .out = sum, .low = low, .x = x};
    *count = 0;
    if (plan_layer_norm(&b, ln, &e, NULL, err))
        return -1;
    *count = b.n;
    return 0;
}

int lib_layer_norm_low_fits(const Graph *g, const Node *ln, ValueId low)
{
    Builder b = {g, NULL, 0, 0};
    int wide;
    CtDType t = norm_storage(&b, ln, -1, &wide);
    const Value *y = val(&b, ln->out[0]), *l = val(&b, low);
    return t != CT_F32 && y->type.dtype == CT_F32 && l->type.dtype == t &&
           shape_numel(&y->type.shape) == shape_numel(&l->type.shape);
}

/* v's strides over its dims longer than 1 are u's (a [1, C, 1, 1] value is
 * the same memory in either layout). */
static int same_walk(const Builder *b, ValueId v, ValueId u)
{
    const CtShape *s = &val(b, v)->type.shape;
    int64_t sv[CT_MAX_DIMS], su[CT_MAX_DIMS];
    if (!shape_equal(s, &val(b, u)->type.shape))
        return 0;
    value_strides(val(b, v), sv);
    value_strides(val(b, u), su);
    for (int i = 0; i < s->ndim; i++)
        if (s->d[i] > 1 && sv[i] != su[i])
            return 0;
    return 1;
}

int lib_reduce_sum_side_fits(const Graph *g, const Node *r, ValueId side, ValueId scale)
{
    Builder b = {g, NULL, 0, 0};
    return r->op == CT_OP_reduce_sum && r->iattr[1] &&
           one_storage(&b, (ValueId[4]){r->in[0], r->nin > 1 ? r->in[1] : -1, side, scale}) &&
           same_walk(&b, side, r->in[0]) &&
           same_walk(&b, scale, r->out[0]) && (r->nin < 2 || same_strides(&b, r->in[0], r->in[1]));
}

int lib_reduce_sum_side(const Graph *g, int sms, const Node *r, ValueId side, ValueId scale, LibLaunch *l, int *count,
                        size_t *scratch, CtErr *err)
{
    Builder b = {g, l, 0, sms};
    *count = 0;
    *scratch = 0;
    if (plan_reduce(&b, r, side, scale, scratch, err))
        return -1;
    *count = b.n;
    return 0;
}

int lib_bn_act_grad_fits(const Graph *g, const Node *bn, const Node *act)
{
    Builder b = {g, NULL, 0, 0};
    CtDType t = val(&b, bn->in[0])->type.dtype;
    return val(&b, bn->out[0])->type.dtype == t && val(&b, act->in[1])->type.dtype == t &&
           same_strides(&b, bn->in[0], act->in[1]);
}

/* lib_bn_act_grad's launches with its dy from fa (fa.dy and its CtBnDy). */
static int bn_act_grad(const Graph *g, int sms, const Node *bn, const Node *n, LibBnCoef kc, BnAct fa, LibLaunch *l,
                       int *count, size_t *scratch, CtErr *err)
{
    Builder b = {g, l, 0, sms};
    size_t fwd_bytes = 0, grad_bytes;
    int64_t C = val(&b, bn->in[0])->type.shape.d[1];
    *count = 0;
    if (kc.at >= 0) { /* the forward's coefficients, kept by its step, which ran before this one */
        fa.fwd = (Place){LA_KEPT, (size_t)kc.at};
    } else {
        if (plan_batch_norm(&b, bn, NULL, &(BnAct){.act = -1}, NULL, &fwd_bytes, err))
            return -1;
        b.n--; /* the forward's statistics, not its output */
        fa.fwd = (Place){LA_SCRATCH, fwd_bytes - sizeof(double) * (size_t)(2 * C)};
    }
    fa.base = fwd_bytes;
    if (plan_batch_norm(&b, n, NULL, &fa, NULL, &grad_bytes, err))
        return -1;
    *scratch = fwd_bytes + grad_bytes;
    *count = b.n;
    return 0;
}

int lib_bn_act_grad(const Graph *g, int sms, const Node *bn, const Node *act, const Node *n, LibBnCoef kc,
                    LibLaunch *l, int *count, size_t *scratch, CtErr *err)
{
    BnAct fa = {.act = (int)act->iattr[0], .approx = (int)act->iattr[1], .dy = act->in[1]};
    return bn_act_grad(g, sms, bn, n, kc, fa, l, count, scratch, err);
}

/* Whether v is [N, C, 1, 1] of x's N, C and dtype, its elements in row-major order. */
static int per_channel(const Builder *b, ValueId v, ValueId x)
{
    const Value *p = val(b, v), *q = val(b, x);
    const CtShape *s = &p->type.shape, *xs = &q->type.shape;
    return s->ndim == 4 && xs->ndim == 4 && s->d[0] == xs->d[0] && s->d[1] == xs->d[1] && s->d[2] == 1 &&
           s->d[3] == 1 && p->type.dtype == q->type.dtype && value_row_major(p);
}

int lib_bn_excite_grad_fits(const Graph *g, const Node *bn, const Node *act, const Node *mul, const Node *gap)
{
    Builder b = {g, NULL, 0, 0};
    ValueId x = bn->in[0];
    if (!lib_bn_act_grad_fits(g, bn, act) || !per_channel(&b, gap->in[0], x) ||
        !same_storage(&b, gap->out[0], act->in[1]))
        return 0;
    return !mul || (same_storage(&b, mul->out[0], x) &&
                    ((same_storage(&b, mul->in[0], x) && per_channel(&b, mul->in[1], x)) ||
                     (same_storage(&b, mul->in[1], x) && per_channel(&b, mul->in[0], x))));
}

int lib_bn_excite_grad(const Graph *g, int sms, const Node *bn, const Node *act, const Node *n, LibBnCoef kc,
                       const Node *mul, const Node *gap, LibLaunch *l, int *count, size_t *scratch, CtErr *err)
{
    const CtShape *xs = &g->values[bn->in[0]].type.shape;
    int big = mul && g->values[mul->in[1]].type.shape.d[2] != 1;
    BnAct fa = {.act = (int)act->iattr[0], .approx = (int)act->iattr[1], .dy = mul ? mul->in[big] : -1,
                .a = mul ? mul->in[!big] : -1, .b = gap->in[0], .z = -1, .hw = xs->d[2] * xs->d[3]};
    return bn_act_grad(g, sms, bn, n, kc, fa, l, count, scratch, err);
}

int lib_bn_sum_grad_fits(const Graph *g, const Node *n, const Node *add, const Node *act)
{
    Builder b = {g, NULL, 0, 0};
    ValueId x = n->in[0];
    return same_storage(&b, add->in[0], x) && same_storage(&b, add->in[1], x) && same_storage(&b, add->out[0], x) &&
           same_storage(&b, n->in[4], x) && (!act || same_storage(&b, act->in[0], x));
}

int lib_bn_sum_grad(const Graph *g, int sms, const Node *n, const Node *add, const Node *act, LibLaunch *l,
                    int *count, size_t *scratch, CtErr *err)
{
    Builder b = {g, l, 0, sms};
    BnAct fa = {.act = act ? (int)act->iattr[0] : -1, .approx = act ? (int)act->iattr[1] : 0, .dy = n->in[4],
                .sum = 1, .a = add->in[0], .b = add->in[1], .z = act ? act->in[0] : -1};
    *count = 0;
    if (plan_batch_norm(&b, n, NULL, &fa, NULL, scratch, err))
        return -1;
    *count = b.n;
    return 0;
}

static int plan_loss(Builder *b, const Node *n, size_t *scratch)
{
    /* each loss's kernels: per row into scratch then their mean, or its
     * gradient (dloss, dx); the attributes they take */
    static const struct {
        CtOp op;
        const char *rows, *grad;
        int nfattr;
    } kinds[] = {
        {CT_OP_cross_entropy, "ct_cross_entropy_rows", "ct_cross_entropy_grad", 1},
        {CT_OP_soft_target_cross_entropy, "ct_soft_ce_rows", "ct_soft_ce_grad", 0},
        {CT_OP_binary_cross_entropy, "ct_bce_rows", "ct_bce_grad", 3},
        {CT_OP_jsd_cross_entropy, "ct_jsd_rows", "ct_jsd_grad", 2},
    };
    const CtShape *xs = &val(b, n->in[0])->type.shape;
    long long B = xs->d[0], C = xs->d[1];
    int k = 0;
    while (n->op != kinds[k].op && n->op != kinds[k].op + 1) /* a loss's gradient is the next op (ir/ops/loss.c) */
        k++;
    int grad = n->op == kinds[k].op + 1, jsd = kinds[k].op == CT_OP_jsd_cross_entropy;
    if (jsd) /* a work item a sample, over its splits */
        B /= n->iattr[0];
    LibLaunch *l = begin(b, grad ? kinds[k].grad : kinds[k].rows, val(b, n->in[0])->type.dtype, B);
    a_val(l, n->in[0]);
    if (kinds[k].op == CT_OP_binary_cross_entropy) { /* the target: i64 labels, or probabilities of x's dtype */
        int probs = ct_dtype_is_float(val(b, n->in[1])->type.dtype);
        if (probs)
            arg(l, LA_NULL);
        a_val(l, n->in[1]);
        if (!probs)
            arg(l, LA_NULL);
    } else {
        a_val(l, n->in[1]);
    }
    if (grad) {
        a_val(l, n->in[2]);
        a_val(l, n->out[0]);
    } else {
        arg(l, LA_SCRATCH);
        *scratch = (size_t)B * sizeof(float);
    }
    a_i64(l, B);
    a_i64(l, C);
    if (jsd)
        a_i64(l, n->iattr[0]);
    for (int f = 0; f < kinds[k].nfattr; f++)
        a_f32(l, n->fattr[f]);
    if (kinds[k].op == CT_OP_binary_cross_entropy)
        a_i64(l, n->iattr[0]);
    if (!grad) {
        l = begin(b, "ct_mean_loss", val(b, n->out[0])->type.dtype, 1);
        arg(l, LA_SCRATCH);
        a_val(l, n->out[0]);
        a_i64(l, B);
    }
    return 0;
}

static void a_pool(LibLaunch *l, CtPool p)
{
    LibArg *a = arg(l, LA_POOL);
    a->pool = p;
}

/* Pooling and its gradients: x [N,C,H,W] -> y [N,C,OH,OW]. Max pooling's
 * gradient first finds each window's argmax (a byte an output element, in
 * scratch) where the window has at most 256 positions, so that each input
 * element reads a byte a window that holds it instead of searching it. */
/* The work items of pooling's walk ix (storage t; a, b the window's
 * steps): CT_VW channels each where lib_kernels.h's ct_pool_vec takes them
 * from the layout (the kernel then checks the addresses), else an element
 * each. */
static int64_t pool_items(const CtIndex *ix, const CtPool *p, int64_t a, int64_t b, CtDType t)
{
    int64_t vw = 16 / (int64_t)ct_dtype_size(t);
    int vec = p->c_last && ix->nd == 4 && last_vec(ix, vw) && a % vw == 0 && b % vw == 0;
    return vec ? ix->n / vw : ix->n;
}

static int plan_pool(Builder *b, const Node *n, size_t *scratch, CtErr *err)
{
    int grad = n->op == CT_OP_avg_pool2d_grad || n->op == CT_OP_max_pool2d_grad ||
               n->op == CT_OP_adaptive_avg_pool2d_grad;
    int max = n->op == CT_OP_max_pool2d || n->op == CT_OP_max_pool2d_grad;
    int adaptive = n->op == CT_OP_adaptive_avg_pool2d || n->op == CT_OP_adaptive_avg_pool2d_grad;
    ValueId x = grad ? n->out[0] : n->in[0], y = grad ? n->in[max ? 1 : 0] : n->out[0];
    const CtShape *xs = &val(b, x)->type.shape, *ys = &val(b, y)->type.shape;
    const int64_t *a = n->iattr;
    CtPool p = {.mode = adaptive ? 2 : max, .H = xs->d[2], .W = xs->d[3], .OH = ys->d[2], .OW = ys->d[3]};
    if (!adaptive)
        p.kh = a[0], p.kw = a[1], p.sh = a[2], p.sw = a[3], p.ph = a[4], p.pw = a[5], p.count_pad = !max && a[7];
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS];
    value_strides(val(b, x), sx);
    value_strides(val(b, y), sy);
    CtDType t = val(b, n->out[0])->type.dtype;
    /* channels-last: the work items in memory order, [N, H, W, C] */
    p.c_last = val(b, x)->layout == CT_LAYOUT_CHANNELS_LAST && val(b, y)->layout == CT_LAYOUT_CHANNELS_LAST;
    int o[4] = {0, 1, 2, 3};
    if (p.c_last)
        o[1] = 2, o[2] = 3, o[3] = 1;
    if (max && grad && !same_strides(b, n->in[0], x))
        return ct_fail(err, "max_pool2d_grad with x and dx in two layouts has no kernel");
    if (adaptive && !grad && p.OH == 1 && p.OW == 1) { /* a global average: reduce_sum's column sums where long */
        int64_t kd[2] = {xs->d[0], xs->d[1]}, ks0[2] = {sx[0], sx[1]}, ks1[2] = {sy[0], sy[1]};
        int64_t rd[2] = {p.H, p.W}, rs[2] = {sx[2], sx[3]};
        CtIndex out = collapsed(index_make(2, kd, ks0, ks1)), red = collapsed(index_make(2, rd, rs, NULL));
        if (!sum_one_stage(&out, &red, t)) {
            sum_cols(b, x, -1, y, 0, t, out, red, -1, -1, (double)(p.H * p.W), scratch);
            return 0;
        }
    }
    int argmax = grad && max && p.kh * p.kw <= 256;
    if (!grad || argmax) { /* the forward's walk over y */
        int64_t st0[4] = {sx[0], sx[1], 0, 0}, d[4], s0[4], s1[4];
        for (int k = 0; k < 4; k++)
            d[k] = ys->d[o[k]], s0[k] = st0[o[k]], s1[k] = sy[o[k]];
        CtIndex out = index_make(4, d, s0, s1);
        LibLaunch *l = begin(b, argmax ? "ct_pool_argmax" : "ct_pool", t, pool_items(&out, &p, sx[2], sx[3], t));
        a_val(l, grad ? n->in[0] : x);
        if (argmax)
            arg(l, LA_SCRATCH);
        else
            a_val(l, y);
        a_index(l, out);
        a_i64(l, sx[2]);
        a_i64(l, sx[3]);
        a_pool(l, p);
        *scratch = argmax ? (size_t)shape_numel(ys) : 0;
        if (!grad)
            return 0;
    }
    int64_t st0[4] = {sy[0], sy[1], 0, 0}, d[4], s0[4], s1[4];
    for (int k = 0; k < 4; k++)
        d[k] = xs->d[o[k]], s0[k] = st0[o[k]], s1[k] = sx[o[k]];
    CtIndex in = index_make(4, d, s0, s1);
    /* max pooling's gradient without the argmax bytes searches each window (an element a work item) */
    LibLaunch *l = begin(b, "ct_pool_grad", t, max && !argmax ? in.n : pool_items(&in, &p, sy[2], sy[3], t));
    if (max)
        a_val(l, n->in[0]);
    else
        arg(l, LA_NULL);
    arg(l, argmax ? LA_SCRATCH : LA_NULL);
    a_val(l, y);
    a_val(l, x);
    a_index(l, in);
    a_i64(l, sy[2]);
    a_i64(l, sy[3]);
    a_i64(l, sx[2]);
    a_i64(l, sx[3]);
    a_pool(l, p);
    return 0;
}

/* Attention's kernels: operands in either form of ir/ops/attention_geom.h
 * (packed: qkv passed as q, k and v alike, dqkv as dq, dk and dv; the
 * kernels' ct_att_head finds the heads), and a bias [B or 1, H or 1, N, M].
 * Their trailing arguments: their work items (the fallback kernels': rows;
 * the tiled ones': heads), the query and key counts, the head dim, the
 * scale, the heads and the bias's strides over B and H (0 where it
 * broadcasts; all 0 without a bias), and the form. */
static void attention_sizes(const AttnGeom *g, Builder *b, const Node *n, LibLaunch *l, long long items)
{
    const CtShape *a = g->bias_in >= 0 ? &val(b, n->in[g->bias_in])->type.shape : NULL;
    long long NM = g->N * g->M;
    a_i64(l, items);
    a_i64(l, g->N);
    a_i64(l, g->M);
    a_i64(l, g->D);
    a_f32(l, n->fattr[0]);
    a_i64(l, g->H);
    a_i64(l, a && a->d[0] != 1 ? a->d[1] * NM : 0);
    a_i64(l, a && a->d[1] != 1 ? NM : 0);
    a_i32(l, g->packed);
}

/* q, k and v (packed: qkv three times), then dy where n is the gradient. */
static void attention_operands(const AttnGeom *g, const Node *n, LibLaunch *l)
{
    a_val(l, n->in[0]);
    a_val(l, n->in[g->k_in]);
    a_val(l, n->in[g->v_in]);
    if (g->dy_in >= 0)
        a_val(l, n->in[g->dy_in]);
}

static long long tiles(long long n, long long tile) { return (n + tile - 1) / tile; }

/* CTIMM_ATTENTION=simt keeps the 16-bit types' attention on the SIMT tiles:
 * the tensor cores' fragment layout can only be checked on a device, and a
 * failing parity test there is told apart from the rest of the step
 * without a rebuild (bench/gpu_check.sh does so). */
static int tensor_core_attention(void)
{
    const char *s = getenv("CTIMM_ATTENTION");
    return !s || strcmp(s, "simt") != 0;
}

/* Head dims up to CT_ATT_D run the tiled kernels (a block a tile), the
 * rest the fallback kernels (a thread a row); the 16-bit types at head dims
 * a multiple of 16 the tensor cores' (the backward's up to CT_TC_GRAD_D).
 * The forward leaves each query row's logsumexp in its second output; the
 * backward's first launch puts it beside dO . O in the scratch, three
 * floats a row, which its dq and dk, dv launches read. */
static int plan_sdpa(Builder *b, const Node *n, size_t *scratch, CtErr *err)
{
    AttnGeom g;
    attn_geom(b->g, n, &g);
    long long BH = g.B * g.H, N = g.N, M = g.M, D = g.D;
    for (int i = 0; i < n->nin; i++)
        if (val(b, n->in[i])->layout != CT_LAYOUT_CONTIG)
            return ct_fail(err, "%s of channels_last operands has no kernel", op_def(n->op)->name);
    if (D > CT_MAX_HEAD)
        return ct_fail(err, "%s: head dim %lld over the fallback kernels' %d", op_def(n->op)->name, D, CT_MAX_HEAD);
    CtDType t = val(b, n->out[0])->type.dtype;
    int tiled = D <= CT_ATT_D;
    /* the 16-bit types' forward on tensor cores, 16 rows a warp */
    int tc = tiled && t != CT_F32 && D % 16 == 0 && tensor_core_attention(), tc_grad = tc && D <= CT_TC_GRAD_D;
    long long qitems = tiled ? CT_LIB_BLOCK * BH * tiles(N, CT_ATT_ROWS(D)) : BH * N, sized = tiled ? BH : BH * N;
    const long long tc_rows = 16 * CT_LIB_BLOCK / CT_LIB_LANES; /* a block's query rows or keys */
    long long tc_items = CT_LIB_BLOCK * BH * tiles(N, tc_rows);
    if (n->op == CT_OP_sdpa) {
        LibLaunch *l = begin(b, tc ? "ct_attn_tc" : tiled ? "ct_attn" : "ct_sdpa", t, tc ? tc_items : qitems);
        l->shared = tc ? (size_t)CT_TC_SMEM(D) : tiled ? sizeof(float) * CT_ATT_SMEM_FWD(D) : 0;
        attention_operands(&g, n, l);
        a_in_or_null(l, n, g.bias_in);
        a_val(l, n->out[0]);
        a_val(l, n->out[g.stats_out]);
        attention_sizes(&g, b, n, l, sized);
        return 0;
    }
    *scratch = 3 * sizeof(float) * (size_t)(BH * N);
    LibLaunch *l = begin(b, "ct_attn_delta", t, BH * N * CT_LIB_LANES);
    a_val(l, n->in[g.y_in]);
    a_val(l, n->in[g.dy_in]);
    a_val(l, n->in[g.stats_in]);
    arg(l, LA_SCRATCH);
    a_i64(l, BH * N);
    a_i64(l, N);
    a_i64(l, M);
    a_i64(l, D);
    a_i64(l, g.H);
    a_i32(l, g.packed);
    l = begin(b, tc_grad ? "ct_attn_tc_grad_q" : tiled ? "ct_attn_grad_q" : "ct_sdpa_grad_q", t,
              tc_grad ? tc_items : qitems);
    l->shared = tc_grad ? (size_t)CT_TC_SMEM(D) : tiled ? sizeof(float) * CT_ATT_SMEM(D) : 0;
    attention_operands(&g, n, l);
    a_in_or_null(l, n, g.bias_in);
    a_val(l, n->out[0]);
    if (g.dbias_out >= 0)
        a_val(l, n->out[g.dbias_out]);
    else
        arg(l, LA_NULL);
    arg(l, LA_SCRATCH);
    attention_sizes(&g, b, n, l, sized);
    l = begin(b, tc_grad ? "ct_attn_tc_grad_kv" : tiled ? "ct_attn_grad_kv" : "ct_sdpa_grad_kv", t,
              tc_grad ? CT_LIB_BLOCK * BH * tiles(M, tc_rows)
              : tiled ? CT_LIB_BLOCK * BH * tiles(M, CT_ATT_ROWS(D) / 2)
                      : BH * M);
    l->shared = tc_grad ? (size_t)CT_TC_GRAD_SMEM(D) : tiled ? sizeof(float) * CT_ATT_SMEM(D) : 0;
    attention_operands(&g, n, l);
    a_in_or_null(l, n, g.bias_in);
    a_val(l, n->out[g.dk_out]);
    a_val(l, n->out[g.dv_out]);
    arg(l, LA_SCRATCH);
    attention_sizes(&g, b, n, l, tiled ? BH : BH * M);
    return 0;
}

/* An activation or an add: a library step's epilogue node the library
 * call left (lib_launch.h). The output shares the first operand's layout. */
static int plan_epilogue(Builder *b, const Node *n, CtErr *err)
{
    ValueId x = n->in[0], y = n->out[0];
    const CtShape *ys = &val(b, y)->type.shape;
    if (!same_strides(b, x, y) || !shape_equal(&val(b, x)->type.shape, ys))
        return ct_fail(err, "%s: its output in another layout or shape than its input has no kernel",
                       op_def(n->op)->name);
    if (n->op == CT_OP_cast) { /* between f32 and a 16-bit dtype: that dtype's kernel */
        CtDType tx = val(b, x)->type.dtype, ty = val(b, y)->type.dtype;
        if (!ct_dtype_is_float(tx) || !ct_dtype_is_float(ty) || tx == CT_F64 || ty == CT_F64 ||
            (tx != CT_F32 && ty != CT_F32 && tx != ty))
            return ct_fail(err, "cast from %s to %s has no library kernel", ct_dtype_name(tx), ct_dtype_name(ty));
        LibLaunch *l = begin(b, "ct_cast", tx != CT_F32 ? tx : ty, shape_numel(ys));
        a_val(l, x);
        a_val(l, y);
        a_i32(l, (tx == CT_F32 ? CT_WIDE_X : 0) | (ty == CT_F32 ? CT_WIDE_Y : 0));
        a_i64(l, shape_numel(ys));
        return 0;
    }
    if (n->op != CT_OP_add) {
        LibLaunch *l = begin(b, "ct_act", val(b, y)->type.dtype, shape_numel(ys));
        a_val(l, x);
        a_val(l, y);
        a_i64(l, shape_numel(ys));
        a_i32(l, n->op);
        a_i32(l, n->op == CT_OP_gelu && n->iattr[0]);
        return 0;
    }
    int64_t sy[CT_MAX_DIMS], sb[CT_MAX_DIMS], bcast[CT_MAX_DIMS];
    const Value *bv = val(b, n->in[1]);
    value_strides(val(b, y), sy);
    value_strides(bv, sb);
    shape_broadcast_strides(&bv->type.shape, ys, bcast);
    /* b's physical strides, 0 where it is broadcast (right-aligned dims) */
    for (int d = 0, off = ys->ndim - bv->type.shape.ndim; d < ys->ndim; d++)
        bcast[d] = bcast[d] && d >= off ? sb[d - off] : 0;
    LibLaunch *l = begin(b, "ct_add", val(b, y)->type.dtype, shape_numel(ys));
    a_val(l, x);
    a_val(l, n->in[1]);
    a_val(l, y);
    a_index(l, collapsed(index_make(ys->ndim, ys->d, sy, bcast)));
    return 0;
}

/* The input ops, over the output's logical [B,C,H,W]: image_normalize
 * reads the uint8 batch [B,H,W,C] row-major; random_erase and mix_images
 * read x in the output's layout. */
static int plan_input(Builder *b, const Node *n, CtErr *err)
{
    const Value *x = val(b, n->in[0]), *y = val(b, n->out[0]);
    const CtShape *ys = &y->type.shape;
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS];
    value_strides(y, sy);
    if (n->op == CT_OP_image_normalize) {
        const int64_t *d = x->type.shape.d;
        int64_t st[4] = {d[1] * d[2] * d[3], 1, d[2] * d[3], d[3]};
        LibLaunch *l = begin(b, "ct_image_normalize", y->type.dtype, shape_numel(ys));
        a_val(l, n->in[0]);
        a_val(l, n->out[0]);
        a_index(l, index_make(4, ys->d, st, sy));
        for (int k = 0; k < 8; k++) /* mean, then std, of each of 4 channels; 0 and 1 past C */
            a_f64(l, k % 4 < ys->d[1] ? n->fattr[k] : k / 4);
        return 0;
    }
    if (!same_strides(b, n->in[0], n->out[0]))
        return ct_fail(err, "%s: its output in another layout than its input has no kernel", op_def(n->op)->name);
    value_strides(x, sx);
    int erase = n->op == CT_OP_random_erase;
    LibLaunch *l = begin(b, erase ? "ct_random_erase" : "ct_mix_images", y->type.dtype, shape_numel(ys));
    a_val(l, n->in[0]);
    a_val(l, n->in[1]);
    a_val(l, n->out[0]);
    a_index(l, index_make(4, ys->d, sx, sy));
    if (erase) {
        a_i64(l, val(b, n->in[1])->type.shape.d[1]);
        a_i32(l, (int)n->iattr[0]);
    }
    return 0;
}

/* dropout, drop_path: one pass over x's logical elements. */
static int plan_dropout(Builder *b, const Node *n, CtErr *err)
{
    const Value *x = val(b, n->in[0]), *y = val(b, n->out[0]);
    const CtShape *s = &x->type.shape;
    if (!same_strides(b, n->in[0], n->out[0]))
        return ct_fail(err, "%s: its output in another layout than its input has no kernel", op_def(n->op)->name);
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS];
    value_strides(x, sx);
    value_strides(y, sy);
    LibLaunch *l = begin(b, "ct_dropout", y->type.dtype, shape_numel(s));
    a_val(l, n->in[0]);
    a_val(l, n->in[1]);
    a_val(l, n->out[0]);
    a_index(l, index_make(s->ndim, s->d, sx, sy));
    a_i64(l, n->op == CT_OP_drop_path ? shape_numel(s) / s->d[0] : 1);
    a_i64(l, n->iattr[0]);
    a_f32(l, n->fattr[0]);
    return 0;
}

/* The optimizer updates with whole-tensor norms or scalar state
 * (lib_kernels.h): their inputs (p, g, state..., [mu_product], lr, [step],
 * [clip_sq], [apply]) in the op's order, with scratch for the partial sums
 * (chunks of UPD_CHUNK elements), the trust ratio and LAMB's update. */
#define UPD_CHUNK 4096

static void a_opt(LibLaunch *l, const Node *n, int k, int present)
{
    if (present)
        a_val(l, n->in[k]);
    else
        arg(l, LA_NULL);
}

/* ct_sq_partials over count elements in chunks of UPD_CHUNK into scratch
 * at part: of a (decayed by 1 - lr wd where lr >= 0) and of the value bt, or
 * else of the update at scratch offset 0 in float (SQ_F32) or double (SQ_F64). */
enum { SQ_NONE, SQ_F32, SQ_F64 };

static void sq_partials(Builder *b, CtDType t, ValueId a, ValueId lr, double wd, double max_lr, ValueId bt,
                        int scratch_b, size_t part, long long count)
{
    LibLaunch *l = begin(b, "ct_sq_partials", t, (count + UPD_CHUNK - 1) / UPD_CHUNK);
    a_val(l, a);
    if (lr >= 0)
        a_val(l, lr);
    else
        arg(l, LA_NULL);
    a_f32(l, wd);
    a_f64(l, max_lr);
    if (bt >= 0)
        a_val(l, bt);
    else
        arg(l, LA_NULL);
    for (int k = SQ_F32; k <= SQ_F64; k++)
        if (scratch_b == k)
            a_scratch(l, 0);
        else
            arg(l, LA_NULL);
    a_scratch(l, part);
    a_i64(l, count);
    a_i64(l, UPD_CHUNK);
    a_i64(l, (count + UPD_CHUNK - 1) / UPD_CHUNK);
}

/* sgdp_update (p g buf lr [apply]) and adamp_update (p g m v lr step
 * [apply]): the moments and update u, each row's sums of the channel view
 * [d0, -1] (a tensor of fewer than 2 dims: one row, not projected), the
 * view timm's projection takes, the update; scratch: u, the row sums, the
 * decision. */
static int plan_projected(Builder *b, const Node *n, long long count, size_t *scratch)
{
    const CtShape *s = &val(b, n->in[0])->type.shape;
    int sgdp = n->op == CT_OP_sgdp_update, apply = n->nin == (sgdp ? 5 : 7);
    long long rows = s->ndim >= 2 ? s->d[0] : 1, len = rows ? count / rows : 0;
    size_t st = ((size_t)count * sizeof(float) + 7) / 8 * 8, d = st + 4 * (size_t)rows * sizeof(double);
    *scratch = d + 3 * sizeof(double);
    CtDType t = val(b, n->in[0])->type.dtype;
    LibLaunch *l = begin(b, sgdp ? "ct_sgdp_moments" : "ct_adamp_moments", t, count);
    a_val(l, n->in[1]);
    for (int k = 2; k < (sgdp ? 3 : 4); k++)
        a_val(l, n->in[k]);
    if (!sgdp)
        a_val(l, n->in[5]);
    a_opt(l, n, n->nin - 1, apply);
    for (int k = 1; k < n->nout; k++)
        a_val(l, n->out[k]);
    a_scratch(l, 0);
    a_i64(l, count);
    if (sgdp)
        a_f32(l, n->fattr[0]);
    else
        for (int f = 0; f < 3; f++)
            a_f32(l, n->fattr[f]);
    a_i64(l, n->iattr[0]);
    l = begin(b, "ct_proj_rows", t, rows);
    a_val(l, n->in[0]);
    a_val(l, n->in[1]);
    a_scratch(l, 0);
    a_scratch(l, st);
    a_i64(l, rows);
    a_i64(l, len);
    double delta = n->fattr[sgdp ? 2 : 4], ratio = n->fattr[sgdp ? 3 : 5], eps = n->fattr[sgdp ? 4 : 2];
    l = begin(b, "ct_proj_decide", t, 1);
    a_scratch(l, st);
    a_i64(l, rows);
    a_i64(l, len);
    a_i64(l, s->ndim >= 2);
    a_scratch(l, d);
    a_f32(l, delta);
    a_f32(l, eps);
    l = begin(b, sgdp ? "ct_sgdp_apply" : "ct_adamp_apply", t, count);
    a_val(l, n->in[0]);
    a_scratch(l, 0);
    a_scratch(l, st);
    a_scratch(l, d);
    a_val(l, n->in[sgdp ? 3 : 4]);
    if (!sgdp)
        a_val(l, n->in[5]);
    a_opt(l, n, n->nin - 1, apply);
    a_val(l, n->out[0]);
    a_i64(l, count);
    a_i64(l, len);
    a_f32(l, n->fattr[0]);
    a_f32(l, n->fattr[sgdp ? 1 : 3]);
    a_f32(l, ratio);
    a_f32(l, eps);
    return 0;
}

static long long inner_of(const CtShape *s, int d)
{
    long long inner = 1;
    for (int k = d + 1; k < s->ndim; k++)
        inner *= s->d[k];
    return inner;
}

/* adafactor_update and adafactorbv_update: (p g, second moments (row and
 * column, or one), [m], lr step [apply]) -> (p', the states'); scratch: the
 * update u (in double: bf16 momentum rounds it), the RMS partial sums, the step's coefficients, the new row and
 * column states and the rows' column mean in double. */
static int plan_adafactor(Builder *b, const Node *n, long long count, size_t *scratch)
{
    const CtShape *s = &val(b, n->in[0])->type.shape;
    int bv = n->op == CT_OP_adafactorbv_update, factored = n->iattr[0] >= 0, has_m = n->iattr[2] != 0;
    int nst = (factored ? 2 : 1) + has_m, lr = 2 + nst, apply = n->nin == lr + 3, dc = (int)n->iattr[0];
    int dr = (int)n->iattr[1];
    long long chunks = (count + UPD_CHUNK - 1) / UPD_CHUNK, Dr = factored ? s->d[dr] : 1, Dc = factored ? s->d[dc] : 1;
    long long nr = count / Dr, nc = count / Dc, nrc = nr / Dc;
    CtShape rs = *s;
    if (factored)
        rs.d[dr] = 1;
    size_t part = (size_t)count * sizeof(double), coef = part + 2 * (size_t)chunks * sizeof(double);
    size_t wr = coef + 2 * sizeof(double), wc = wr + (size_t)nr * sizeof(double), rc = wc + (size_t)nc * sizeof(double);
    *scratch = factored ? rc + (size_t)nrc * sizeof(double) : wr;
    CtDType t = val(b, n->in[0])->type.dtype;
    LibLaunch *l = begin(b, "ct_af_coef", t, 1);
    a_val(l, n->in[lr + 1]);
    a_scratch(l, coef);
    a_f32(l, n->fattr[2]);
    a_f32(l, bv ? n->fattr[5] : 0);
    a_i64(l, bv ? n->iattr[5] : 0);
    a_i64(l, bv);
    if (!factored) {
        l = begin(b, "ct_af_full", t, count);
        a_val(l, n->in[1]);
        a_val(l, n->in[2]);
        a_scratch(l, coef);
        a_opt(l, n, n->nin - 1, apply);
        a_val(l, n->out[1]);
        a_scratch(l, 0);
        a_i64(l, count);
        a_f32(l, n->fattr[0]);
    } else {
        for (int k = 0; k < 2; k++) { /* the row state (dim dr reduced), then the column state */
            l = begin(b, "ct_af_mean", t, k ? nc : nr);
            a_val(l, n->in[1]);
            a_val(l, n->in[2 + k]);
            a_scratch(l, coef);
            a_opt(l, n, n->nin - 1, apply);
            a_val(l, n->out[1 + k]);
            a_scratch(l, k ? wc : wr);
            a_i64(l, k ? nc : nr);
            a_i64(l, k ? Dc : Dr);
            a_i64(l, inner_of(s, k ? dc : dr));
            a_f32(l, n->fattr[0]);
        }
        l = begin(b, "ct_af_rowcol", t, nrc);
        a_scratch(l, wr);
        a_scratch(l, rc);
        a_i64(l, nrc);
        a_i64(l, Dc);
        a_i64(l, inner_of(&rs, dc));
        l = begin(b, "ct_af_factored", t, count);
        a_val(l, n->in[1]);
        a_scratch(l, wr);
        a_scratch(l, wc);
        a_scratch(l, rc);
        a_opt(l, n, n->nin - 1, apply);
        a_scratch(l, 0);
        a_i64(l, count);
        a_i64(l, Dr);
        a_i64(l, inner_of(s, dr));
        a_i64(l, Dc);
        a_i64(l, inner_of(s, dc));
        a_i64(l, inner_of(&rs, dc));
    }
    sq_partials(b, t, n->in[0], -1, 0, 0, -1, SQ_F64, part, count);
    l = begin(b, "ct_af_clip", t, 1);
    a_scratch(l, part);
    a_i64(l, chunks);
    a_i64(l, count);
    a_scratch(l, coef);
    a_f32(l, n->fattr[1]);
    l = begin(b, "ct_af_apply", t, count);
    a_val(l, n->in[0]);
    a_scratch(l, 0);
    a_scratch(l, coef);
    a_opt(l, n, 1 + nst, has_m);
    a_val(l, n->in[lr]);
    a_opt(l, n, n->nin - 1, apply);
    a_val(l, n->out[0]);
    if (has_m)
        a_val(l, n->out[nst]);
    else
        arg(l, LA_NULL);
    a_i64(l, count);
    a_f64(l, n->fattr[3]);
    a_f32(l, n->fattr[4]);
    a_i64(l, bv);
    a_i64(l, bv && n->iattr[3]);
    a_i64(l, bv && n->iattr[4]);
    a_f64(l, bv ? n->fattr[6] : 0);
    return 0;
}

/* muon_update (p g buf lr [apply]): the momentum and X, its norm, X scaled,
 * three products a Newton-Schulz iteration, the update; scratch: X and its
 * next, A and B [m, m], the norm's partial sums, the norm. */
#define MUON_MAX_STEPS ((LIB_MAX_LAUNCHES - 6) / 3)

static int plan_muon(Builder *b, const Node *n, long long count, size_t *scratch, CtErr *err)
{
    const CtShape *s = &val(b, n->in[0])->type.shape;
    int steps = (int)n->iattr[1], apply = n->nin == 5;
    if (steps > MUON_MAX_STEPS)
        return ct_fail(err, "muon_update: %d Newton-Schulz steps; the cuda plan takes at most %d", steps,
                       MUON_MAX_STEPS);
    long long rows = s->d[0], cols = count / rows, m = rows < cols ? rows : cols, nn = count / m;
    long long chunks = (count + UPD_CHUNK - 1) / UPD_CHUNK;
    size_t xb = (size_t)count * sizeof(double), A = 2 * xb, B = A + (size_t)(m * m) * sizeof(double);
    size_t part = B + (size_t)(m * m) * sizeof(double), nrm = part + 2 * (size_t)chunks * sizeof(double);
    *scratch = nrm + sizeof(double);
    CtDType t = val(b, n->in[0])->type.dtype;
    LibLaunch *l = begin(b, "ct_muon_moments", t, count);
    a_val(l, n->in[1]);
    a_val(l, n->in[2]);
    a_opt(l, n, 4, apply);
    a_val(l, n->out[1]);
    a_scratch(l, 0);
    a_i64(l, rows);
    a_i64(l, cols);
    a_f64(l, n->fattr[0]);
    a_i64(l, n->iattr[0]);
    sq_partials(b, t, n->in[0], -1, 0, 0, -1, SQ_F64, part, count);
    l = begin(b, "ct_muon_norm", t, 1);
    a_scratch(l, part);
    a_i64(l, chunks);
    a_scratch(l, nrm);
    a_f64(l, n->fattr[2]);
    a_f64(l, n->fattr[3]);
    l = begin(b, "ct_muon_scale", t, count);
    a_scratch(l, 0);
    a_scratch(l, nrm);
    a_i64(l, count);
    size_t x = 0, y = xb;
    for (int k = 0; k < steps; k++) {
        double abc[3];
        op_muon_coefficients((int)n->iattr[2], k, abc);
        /* A = X X^T; B = b A + c A A; Y = a X + B X */
        const struct {
            size_t a, b, c, out;
            long long M, N, K, bt;
            double alpha, beta;
        } g3[3] = {{x, x, 0, A, m, m, nn, 1, 1, 0}, {A, A, A, B, m, m, m, 0, abc[2], abc[1]},
                   {B, x, x, y, m, nn, m, 0, 1, abc[0]}};
        for (int j = 0; j < 3; j++) {
            l = begin(b, "ct_muon_gemm", t, g3[j].M * g3[j].N);
            a_scratch(l, g3[j].a);
            a_scratch(l, g3[j].b);
            if (j)
                a_scratch(l, g3[j].c);
            else
                arg(l, LA_NULL);
            a_scratch(l, g3[j].out);
            a_i64(l, g3[j].M);
            a_i64(l, g3[j].N);
            a_i64(l, g3[j].K);
            a_i64(l, g3[j].bt);
            a_f64(l, g3[j].alpha);
            a_f64(l, g3[j].beta);
        }
        size_t tmp = x;
        x = y, y = tmp;
    }
    l = begin(b, "ct_muon_apply", t, count);
    a_val(l, n->in[0]);
    a_scratch(l, x);
    a_val(l, n->in[3]);
    a_opt(l, n, 4, apply);
    a_val(l, n->out[0]);
    a_i64(l, rows);
    a_i64(l, cols);
    a_f64(l, n->fattr[4]);
    a_f32(l, n->fattr[1]);
    return 0;
}

static int plan_update(Builder *b, const Node *n, size_t *scratch, CtErr *err)
{
    for (int k = 1; k < n->nin + n->nout; k++) {
        ValueId v = k < n->nin ? n->in[k] : n->out[k - n->nin];
        if (val(b, v)->type.shape.ndim == val(b, n->in[0])->type.shape.ndim && !same_strides(b, n->in[0], v))
            return ct_fail(err, "%s: a state in another layout than its param has no kernel", op_def(n->op)->name);
    }
    CtDType t = val(b, n->in[0])->type.dtype;
    long long count = shape_numel(&val(b, n->in[0])->type.shape), chunks = (count + UPD_CHUNK - 1) / UPD_CHUNK;
    size_t u_bytes = n->op == CT_OP_lamb_update ? ((size_t)count * sizeof(float) + 7) / 8 * 8 : 0;
    size_t part = u_bytes, ratio = part + 2 * (size_t)chunks * sizeof(double);
    LibLaunch *l;
    if (n->op == CT_OP_nadam_update) { /* p g m v mu lr step [apply] */
        int apply = n->nin == 8;
        l = begin(b, "ct_nadam_update", t, count);
        for (int k = 0; k < 7; k++)
            a_val(l, n->in[k]);
        a_opt(l, n, 7, apply);
        for (int k = 0; k < 3; k++)
            a_val(l, n->out[k]);
        a_i64(l, count);
        for (int f = 0; f < 4; f++)
            a_f32(l, n->fattr[f]);
        a_i64(l, n->iattr[0]);
        l = begin(b, "ct_nadam_product", t, 1);
        a_val(l, n->in[4]);
        a_val(l, n->in[6]);
        a_opt(l, n, 7, apply);
        a_val(l, n->out[3]);
        a_f32(l, n->fattr[0]);
        a_i64(l, n->iattr[0]);
        return 0;
    }
    if (n->op == CT_OP_sgdp_update || n->op == CT_OP_adamp_update)
        return plan_projected(b, n, count, scratch);
    if (n->op == CT_OP_adafactor_update || n->op == CT_OP_adafactorbv_update)
        return plan_adafactor(b, n, count, scratch);
    if (n->op == CT_OP_muon_update)
        return plan_muon(b, n, count, scratch, err);
    *scratch = ratio + sizeof(double);
    if (n->op == CT_OP_lamb_update) { /* p g m v lr step [clip] [apply] */
        int clip = n->iattr[2] != 0, apply = n->nin == 7 + clip;
        l = begin(b, "ct_lamb_moments", t, count);
        for (int k = 0; k < 6; k++)
            a_val(l, n->in[k]);
        a_opt(l, n, 6, clip);
        a_opt(l, n, n->nin - 1, apply);
        a_val(l, n->out[1]);
        a_val(l, n->out[2]);
        a_scratch(l, 0);
        a_i64(l, count);
        for (int f = 0; f < 4; f++)
            a_f32(l, n->fattr[f]);
        a_i64(l, n->iattr[3]);
        sq_partials(b, t, n->in[0], n->iattr[3] ? n->in[4] : -1, n->fattr[3], n->fattr[4], -1, SQ_F32, part, count);
        l = begin(b, "ct_lamb_ratio", t, 1);
        a_scratch(l, part);
        a_i64(l, chunks);
        a_scratch(l, ratio);
        a_f32(l, n->fattr[3]);
        a_i64(l, n->iattr[0]);
        a_i64(l, n->iattr[1]);
        l = begin(b, "ct_lamb_apply", t, count);
        a_val(l, n->in[0]);
        a_scratch(l, 0);
        a_scratch(l, ratio);
        a_val(l, n->in[4]);
        a_opt(l, n, n->nin - 1, apply);
        a_val(l, n->out[0]);
        a_i64(l, count);
        a_f32(l, n->fattr[3]);
        a_i64(l, n->iattr[3]);
        a_f64(l, n->fattr[4]);
        return 0;
    }
    int apply = n->nin == 5; /* lars: p g buf lr [apply] */
    sq_partials(b, t, n->in[0], -1, 0, 0, n->in[1], SQ_NONE, part, count);
    l = begin(b, "ct_lars_ratio", t, 1);
    a_scratch(l, part);
    a_i64(l, chunks);
    a_val(l, n->in[3]);
    a_scratch(l, ratio);
    a_f32(l, n->fattr[1]);
    a_f32(l, n->fattr[2]);
    a_f32(l, n->fattr[3]);
    a_i64(l, n->iattr[1]);
    a_i64(l, n->iattr[2]);
    l = begin(b, "ct_lars_apply", t, count);
    for (int k = 0; k < 4; k++)
        a_val(l, n->in[k]);
    a_opt(l, n, 4, apply);
    a_scratch(l, ratio);
    a_val(l, n->out[0]);
    a_val(l, n->out[1]);
    a_i64(l, count);
    a_f32(l, n->fattr[0]);
    a_f32(l, n->fattr[1]);
    a_i64(l, n->iattr[0]);
    return 0;
}

/* all_finite: 1, then 0 written where an element is not finite. */
static int plan_all_finite(Builder *b, const Node *n)
{
    long long count = shape_numel(&val(b, n->in[0])->type.shape);
    LibLaunch *l = begin(b, "ct_fill", CT_F32, 1);
    a_val(l, n->out[0]);
    a_i64(l, 1);
    a_f32(l, 1);
    l = begin(b, "ct_all_finite", val(b, n->in[0])->type.dtype, count);
    a_val(l, n->in[0]);
    a_val(l, n->out[0]);
    a_i64(l, count);
    return 0;
}

void lib_params(const LibLaunch *l, const unsigned long long *ptr, LibArgStore *store, void **params)
{
    for (int a = 0; a < l->nargs; a++) {
        const LibArg *arg = &l->arg[a];
        switch (arg->kind) {
        case LA_VALUE: case LA_SCRATCH: case LA_COUNTERS: case LA_KEPT: case LA_NULL:
            store[a].p = arg->kind == LA_NULL ? 0 : ptr[a];
            break;
        case LA_I64: store[a].i = arg->i; break;
        case LA_I32: store[a].i32 = (int)arg->i; break;
        case LA_F32: store[a].f = arg->f; break;
        case LA_F64: store[a].d = arg->d; break;
        case LA_INDEX: store[a].ix = arg->ix; break;
        case LA_POOL: store[a].pool = arg->pool; break;
        }
        params[a] = &store[a];
    }
}

int lib_supports(CtOp op)
{
    if (op_def(op)->fusion == OP_ACTIVATION || op == CT_OP_add || op == CT_OP_cast)
        return 1;
    switch (op) {
    case CT_OP_reshape: case CT_OP_to_layout: case CT_OP_permute: case CT_OP_slice: case CT_OP_slice_grad:
    case CT_OP_concat: case CT_OP_reduce_sum: case CT_OP_softmax: case CT_OP_softmax_grad: case CT_OP_layer_norm:
    case CT_OP_layer_norm_grad: case CT_OP_group_norm: case CT_OP_group_norm_grad: case CT_OP_batch_norm:
    case CT_OP_batch_norm_grad: case CT_OP_cross_entropy:
    case CT_OP_cross_entropy_grad: case CT_OP_avg_pool2d: case CT_OP_max_pool2d: case CT_OP_adaptive_avg_pool2d:
    case CT_OP_avg_pool2d_grad: case CT_OP_max_pool2d_grad: case CT_OP_adaptive_avg_pool2d_grad: case CT_OP_sdpa:
    case CT_OP_sdpa_grad: case CT_OP_image_normalize: case CT_OP_random_erase: case CT_OP_mix_images:
    case CT_OP_soft_target_cross_entropy: case CT_OP_soft_target_cross_entropy_grad: case CT_OP_all_finite:
    case CT_OP_dropout: case CT_OP_drop_path: case CT_OP_binary_cross_entropy: case CT_OP_binary_cross_entropy_grad:
    case CT_OP_jsd_cross_entropy: case CT_OP_jsd_cross_entropy_grad: case CT_OP_lamb_update: case CT_OP_lars_update:
    case CT_OP_nadam_update: case CT_OP_sgdp_update: case CT_OP_adamp_update: case CT_OP_adafactor_update:
    case CT_OP_adafactorbv_update: case CT_OP_muon_update: case CT_OP_pad: case CT_OP_gather: case CT_OP_gather_grad:
        return 1;
    default:
        return 0;
    }
}

int lib_launches(const Graph *g, int sms, const Node *n, LibLaunch *l, int *count, size_t *scratch, CtErr *err)
{
    Builder b = {g, l, 0, sms};
    *count = 0;
    *scratch = 0;
    if (!lib_supports(n->op))
        return ct_fail(err, "no library kernel for %s", op_def(n->op)->name);
    for (int k = 0; k < n->nin; k++)
        if (g->values[n->in[k]].type.shape.ndim > CT_MAXD)
            return ct_fail(err, "%s: more than %d dims", op_def(n->op)->name, CT_MAXD);
    int rc;
    switch (n->op) {
    case CT_OP_reduce_sum: rc = plan_reduce(&b, n, -1, -1, scratch, err); break;
    case CT_OP_softmax: case CT_OP_softmax_grad: rc = plan_rows(&b, n, err); break;
    case CT_OP_layer_norm: case CT_OP_layer_norm_grad: rc = plan_layer_norm(&b, n, NULL, scratch, err); break;
    case CT_OP_batch_norm: case CT_OP_batch_norm_grad:
        rc = plan_batch_norm(&b, n, NULL, NULL, NULL, scratch, err);
        break;
    case CT_OP_group_norm: case CT_OP_group_norm_grad: rc = plan_group_norm(&b, n, scratch, err); break;
    case CT_OP_cross_entropy: case CT_OP_cross_entropy_grad: case CT_OP_soft_target_cross_entropy:
    case CT_OP_soft_target_cross_entropy_grad: case CT_OP_binary_cross_entropy: case CT_OP_binary_cross_entropy_grad:
    case CT_OP_jsd_cross_entropy: case CT_OP_jsd_cross_entropy_grad:
        rc = plan_loss(&b, n, scratch);
        break;
    case CT_OP_add: case CT_OP_cast: rc = plan_epilogue(&b, n, err); break;
    case CT_OP_avg_pool2d: case CT_OP_max_pool2d: case CT_OP_adaptive_avg_pool2d: case CT_OP_avg_pool2d_grad:
    case CT_OP_max_pool2d_grad: case CT_OP_adaptive_avg_pool2d_grad: rc = plan_pool(&b, n, scratch, err); break;
    case CT_OP_sdpa: case CT_OP_sdpa_grad: rc = plan_sdpa(&b, n, scratch, err); break;
    case CT_OP_image_normalize: case CT_OP_random_erase: case CT_OP_mix_images: rc = plan_input(&b, n, err); break;
    case CT_OP_all_finite: rc = plan_all_finite(&b, n); break;
    case CT_OP_lamb_update: case CT_OP_lars_update: case CT_OP_nadam_update: case CT_OP_sgdp_update:
    case CT_OP_adamp_update: case CT_OP_adafactor_update: case CT_OP_adafactorbv_update: case CT_OP_muon_update:
        rc = plan_update(&b, n, scratch, err);
        break;
    case CT_OP_gather: case CT_OP_gather_grad: rc = plan_gather(&b, n, err); break;
    case CT_OP_dropout: case CT_OP_drop_path: rc = plan_dropout(&b, n, err); break;
    default: rc = op_def(n->op)->fusion == OP_ACTIVATION ? plan_epilogue(&b, n, err) : plan_data(&b, n, err); break;
    }
    *count = b.n;
    return rc;
}
