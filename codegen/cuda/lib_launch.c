/* Contract: lib_launches(n) gives the library kernel launches that compute
 * node n's outputs from its inputs, with physical strides, or fails naming
 * what is not supported. This file builds those of data movement,
 * reductions, softmax, losses, pooling, attention and the inputs' ops, and
 * dispatches the norms (lib_launch_norm.c) and the optimizers' updates
 * (lib_launch_optim.c). */
#include "codegen/cuda/lib_build.h"

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
CtDType lib_mixed_storage(const Builder *b, const ValueId v[4], int *wide)
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
int lib_one_storage(const Builder *b, const ValueId v[4])
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
           n->in[0] == cast->out[0] && lib_one_storage(&b, (ValueId[4]){cast->in[0], -1, n->out[0], -1}) &&
           val(&b, cast->in[0])->type.shape.ndim <= CT_MAXD;
}

int lib_cast_copy(const Graph *g, const Node *cast, const Node *n, LibLaunch *l, int *count, CtErr *err)
{
    Builder b = {g, l, 0, 0};
    int wide;
    CtDType st = lib_mixed_storage(&b, (ValueId[4]){cast->in[0], -1, n->out[0], -1}, &wide);
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
ColPlan lib_col_plan(const Builder *b, int64_t len, int64_t outs, int64_t w, int64_t sxc, int64_t nsum)
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
 * divided by div, into y, in one launch, its partial sums in scratch from
 * byte `at` (*scratch: where they end). With map (NULL: none), x is a
 * batch norm's input and side its output, which is summed
 * (lib_bn_pool_cols). */
static void sum_cols(Builder *b, ValueId x, ValueId f, ValueId y, int wide, CtDType st, CtIndex out, CtIndex red,
                     ValueId side, ValueId scale, double div, const LibBnMap *map, size_t at, size_t *scratch)
{
    int64_t vw = sum_vec_width(&out, &red, st);
    ColPlan cp = lib_col_plan(b, red.n, out.n, vw, out.nd ? out.st0[out.nd - 1] : 0, 1);
    *scratch = at + sizeof(double) * (size_t)(cp.slices * out.n);
    LibLaunch *l = begin(b, "ct_reduce_sum_cols", st, cp.cols * cp.slices * CT_LIB_BLOCK);
    a_val(l, x);
    if (f >= 0)
        a_val(l, f);
    else
        arg(l, LA_NULL);
    a_i32(l, wide);
    a_scratch(l, at);
    a_counters(l, out.n);
    a_val(l, y);
    a_index(l, out);
    a_index(l, red);
    a_i64(l, cp.slices);
    if (map) {
        a_val(l, side);
        arg(l, LA_NULL);
    } else {
        a_side(l, side, scale);
    }
    a_f64(l, div);
    if (map)
        a_place(l, map->coef);
    else
        arg(l, LA_NULL);
    a_i64(l, map ? map->C : 0);
    a_i32(l, map ? map->act : -1);
    a_i32(l, map ? map->approx : 0);
}

/* A global average pool of x ([N, C, H, W]) into y ([N, C, 1, 1]) as a
 * sum over the pixels for each sample and channel: `out` walks [N, C] (x's
 * and y's strides), `red` [H, W] (x's); whether it takes column sums
 * (sum_one_stage: not when the pixels are few, or the outputs many). */
static int global_pool_cols(const Builder *b, ValueId x, ValueId y, CtIndex *out, CtIndex *red)
{
    const CtShape *xs = &val(b, x)->type.shape;
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS];
    value_strides(val(b, x), sx);
    value_strides(val(b, y), sy);
    int64_t kd[2] = {xs->d[0], xs->d[1]}, ks0[2] = {sx[0], sx[1]}, ks1[2] = {sy[0], sy[1]};
    int64_t rd[2] = {xs->d[2], xs->d[3]}, rs[2] = {sx[2], sx[3]};
    *out = collapsed(index_make(2, kd, ks0, ks1));
    *red = collapsed(index_make(2, rd, rs, NULL));
    return !sum_one_stage(out, red, val(b, y)->type.dtype);
}

int lib_bn_pool_cols(Builder *b, ValueId x, ValueId y, ValueId pool, const LibBnMap *map, size_t at, size_t *scratch)
{
    CtIndex out, red;
    const CtShape *ps = &val(b, pool)->type.shape;
    if (ps->ndim != 4 || ps->d[2] != 1 || ps->d[3] != 1 || !global_pool_cols(b, y, pool, &out, &red))
        return 0;
    if (map)
        sum_cols(b, x, -1, pool, 0, val(b, pool)->type.dtype, out, red, y, -1,
                 (double)(val(b, y)->type.shape.d[2] * val(b, y)->type.shape.d[3]), map, at, scratch);
    return 1;
}

/* reduce_sum: one stage (ct_reduce_sum, an output a work item) where
 * sum_one_stage says, else column sums (sum_cols). With a side output
 * (side >= 0): side = x * scale stored as the sums walk x
 * (lib_reduce_sum_side). */
int lib_plan_reduce(Builder *b, const Node *n, ValueId side, ValueId scale, size_t *scratch, CtErr *err)
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
    CtDType st = lib_mixed_storage(b, v, &wide);
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
    sum_cols(b, n->in[0], n->nin > 1 ? n->in[1] : -1, n->out[0], wide, st, out, red, side, scale, 1, NULL, 0, scratch);
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
           lib_one_storage(&b, (ValueId[4]){r->in[0], r->nin > 1 ? r->in[1] : -1, side, scale}) &&
           same_walk(&b, side, r->in[0]) &&
           same_walk(&b, scale, r->out[0]) && (r->nin < 2 || same_strides(&b, r->in[0], r->in[1]));
}

int lib_reduce_sum_side(const Graph *g, int sms, const Node *r, ValueId side, ValueId scale, LibLaunch *l, int *count,
                        size_t *scratch, CtErr *err)
{
    Builder b = {g, l, 0, sms};
    *count = 0;
    *scratch = 0;
    if (lib_plan_reduce(&b, r, side, scale, scratch, err))
        return -1;
    *count = b.n;
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
    CtIndex out, red;
    if (adaptive && !grad && p.OH == 1 && p.OW == 1 && global_pool_cols(b, x, y, &out, &red)) {
        sum_cols(b, x, -1, y, 0, t, out, red, -1, -1, (double)(p.H * p.W), NULL, 0, scratch);
        return 0;
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
        if (!row_major_bytes(val(b, n->in[i])))
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
    if (lib_dw_conv_fits(g, n))
        return lib_dw_conv(g, sms, n, NULL, l, count, scratch, err);
    if (!lib_supports(n->op))
        return ct_fail(err, "no library kernel for %s", op_def(n->op)->name);
    for (int k = 0; k < n->nin; k++)
        if (g->values[n->in[k]].type.shape.ndim > CT_MAXD)
            return ct_fail(err, "%s: more than %d dims", op_def(n->op)->name, CT_MAXD);
    int rc;
    switch (n->op) {
    case CT_OP_reduce_sum: rc = lib_plan_reduce(&b, n, -1, -1, scratch, err); break;
    case CT_OP_softmax: case CT_OP_softmax_grad: rc = plan_rows(&b, n, err); break;
    case CT_OP_layer_norm: case CT_OP_layer_norm_grad: case CT_OP_batch_norm: case CT_OP_batch_norm_grad:
    case CT_OP_group_norm: case CT_OP_group_norm_grad:
        rc = lib_plan_norm(&b, n, scratch, err);
        break;
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
        rc = lib_plan_update(&b, n, scratch, err);
        break;
    case CT_OP_gather: case CT_OP_gather_grad: rc = plan_gather(&b, n, err); break;
    case CT_OP_dropout: case CT_OP_drop_path: rc = plan_dropout(&b, n, err); break;
    default: rc = op_def(n->op)->fusion == OP_ACTIVATION ? plan_epilogue(&b, n, err) : plan_data(&b, n, err); break;
    }
    *count = b.n;
    return rc;
}
