/* Contract: the library launches of layer_norm, group_norm, batch_norm
 * and their gradients, alone (lib_plan_norm) or with what a fused step of
 * the launch plan gives them: a batch norm's epilogue and kept
 * coefficients, a layer norm's residual add and cast, a batch norm
 * gradient's activation, residual sum or excitation (lib_launch.h). */
#include "codegen/cuda/lib_build.h"

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

/* layer_norm's kernels: the storage they are instantiated for (the 16-bit
 * dtype among x, w, y or dy, and the prologue's residual `res` (-1: none),
 * else f32) and the CT_WIDE_* bits of the operands stored as f32 beside it. */
static CtDType norm_storage(Builder *b, const Node *n, ValueId res, int *wide)
{
    int grad = n->op == CT_OP_layer_norm_grad;
    const ValueId v[4] = {n->in[0], n->in[1], grad ? n->in[2] : n->out[0], res};
    return lib_mixed_storage(b, v, wide);
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
    ColPlan cp = lib_col_plan(b, rows.n, D, items == D ? 1 : D / items, sx[dim], 2);
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


/* The parts of a batch norm's epilogue its apply pass computes before the
 * store: a residual add (-1: none) and an activation (an op, -1: none),
 * the value it stores (out) and the step's first node it leaves (tail). */
typedef struct BnEpi {
    ValueId residual, out, pool; /* pool: a global average pool of out (-1: none) */
    int act, approx, tail;
    LibBnRes res; /* the residual another batch norm's output, computed here (res.x -1: none) */
    int stats_only; /* the apply pass left to another step's (lib_bn_res_fits) */
    long long sums; /* stats_only's sums alone, f32, at this kept byte, for lib_bn_conv_sums (-1: not) */
} BnEpi;


/* A batch_norm run again for lib_bn_act_grad (its running statistics not
 * written), or the batch_norm_grad it runs with the activation's gradient:
 * its scratch from byte `base`, the forward's coefficients at `fwd`. */
typedef struct BnAct {
    size_t base;
    Place fwd;
    int act, approx;
    ValueId dy;    /* the act_grad's dy, read in place of the batch_norm_grad's */
    ValueId store; /* the activation's output, stored by the apply pass too (-1: none) */
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
 * batch norm run again: no statistics), or from the sums its convolution's
 * step made where kc->sums is not -1. *scratch gets the bytes from fa's base. */
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
    ColPlan cp = lib_col_plan(b, rows.n, C, items == C ? 1 : C / items, sx[1], nsum);
    int keep = kc && kc->at >= 0, ready = keep && kc->ready;
    int summed = kc && kc->sums >= 0 && !ready && !grad && training, sums_out = epi && epi->sums >= 0;
    size_t base = fa ? fa->base : 0;
    size_t part = sums && !ready && !summed ? sizeof(double) * (size_t)(nsum * cp.slices * C) : 0;
    Place coef = keep ? (Place){LA_KEPT, (size_t)kc->at} : (Place){LA_SCRATCH, base + part};
    *scratch = part + (keep || sums_out ? 0 : sizeof(double) * (size_t)((grad ? 3 : 2) * C)); /* the coefficients */
    LibLaunch *l;
    if (summed) {
        l = begin(b, "ct_bn_coef_sums", t, C);
        a_place(l, (Place){LA_KEPT, (size_t)kc->sums});
        for (int k = 1; k < 5; k++)
            a_val(l, n->in[k]);
        for (int k = 1; k < 3; k++)
            if (k < n->nout)
                a_val(l, n->out[k]);
            else
                arg(l, LA_NULL);
        a_i32(l, pt != t);
        a_place(l, coef);
        a_i64(l, rows.n);
        a_i64(l, C);
        a_f32(l, n->fattr[0]);
        a_f32(l, n->fattr[1]);
    } else if (sums && !ready) {
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
        for (int k = 1; k < 3; k++) /* the running stats' updates (not for a forward run again, nor with the
                                     * sums alone), or dw and db */
            if (k < n->nout && (grad || (!fa && !sums_out)))
                a_val(l, n->out[k]);
            else
                arg(l, LA_NULL);
        a_i32(l, pt != t);
        if (sums_out)
            arg(l, LA_NULL);
        else
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
        if (sums_out)
            a_place(l, (Place){LA_KEPT, (size_t)epi->sums});
        else if (!grad)
            arg(l, LA_NULL);
    } else if (!sums) {
        l = begin(b, "ct_bn_coef", pt, C);
        for (int k = 1; k < 5; k++)
            a_val(l, n->in[k]);
        a_scratch(l, base);
        a_i64(l, C);
        a_f32(l, n->fattr[1]);
    }
    if (epi && epi->pool >= 0) {
        LibBnMap map = {coef, C, epi->act, epi->approx};
        size_t end;
        if (!lib_bn_pool_cols(b, x, epi->out, epi->pool, &map, base + *scratch, &end))
            return ct_fail(err, "batch_norm's global average pool takes no column sums here");
        *scratch = end - base;
        return 0;
    }
    if (epi && epi->stats_only)
        return 0;
    l = begin(b, grad ? "ct_bn_grad_apply" : "ct_bn_apply", t, rows.n * C);
    a_val(l, x);
    if (grad) {
        a_val_or_null(l, dy);
        a_fwd(l, fa, 0);
    }
    a_place(l, coef);
    if (!grad) {
        if (epi && epi->res.x >= 0)
            a_val(l, epi->res.x);
        else if (epi && epi->residual >= 0)
            a_val(l, epi->residual);
        else
            arg(l, LA_NULL);
        if (epi && epi->res.x >= 0)
            a_place(l, (Place){LA_KEPT, (size_t)epi->res.at});
        else
            arg(l, LA_NULL);
    }
    a_val(l, epi ? epi->out : y);
    if (grad)
        a_val_or_null(l, fa ? fa->store : -1);
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

/* The parts of library step st's epilogue that its batch norm's
 * elementwise pass takes (lib_batch_norm_step). */
static BnEpi bn_epi(const Builder *b, const FusePlan *p, const FuseStep *st)
{
    const Node *bn = &b->g->nodes[p->nodes[st->first]];
    BnEpi e = {.residual = -1, .out = bn->out[0], .pool = -1, .act = -1, .tail = 1, .res = {-1, -1}, .sums = -1};
    for (; e.tail < st->n && !p->materialised[e.out] && e.act < 0; e.tail++) {
        const Node *n = &b->g->nodes[p->nodes[st->first + e.tail]];
        if (op_def(n->op)->fusion == OP_ACTIVATION && n->in[0] == e.out && same_storage(b, n->out[0], e.out)) {
            e.act = n->op;
            e.approx = n->op == CT_OP_gelu && n->iattr[0];
        } else if (n->op == CT_OP_add && e.residual < 0 && (n->in[0] == e.out) != (n->in[1] == e.out) &&
                   same_storage(b, n->in[0], n->in[1]) && same_storage(b, n->out[0], e.out)) {
            e.residual = n->in[0] == e.out ? n->in[1] : n->in[0];
        } else {
            break;
        }
        e.out = n->out[0];
    }
    return e;
}

int lib_bn_pool_fits(const Graph *g, const FusePlan *p, const FuseStep *st, const Node *gap)
{
    Builder b = {g, NULL, 0, 0};
    const Node *bn = &g->nodes[p->nodes[st->first]];
    if (bn->op != CT_OP_batch_norm || gap->op != CT_OP_adaptive_avg_pool2d)
        return 0;
    BnEpi e = bn_epi(&b, p, st);
    ValueId x = bn->in[0], pool = gap->out[0];
    return e.residual < 0 && gap->in[0] == e.out && same_storage(&b, x, e.out) &&
           val(&b, pool)->type.dtype == val(&b, x)->type.dtype && lib_bn_pool_cols(&b, x, e.out, pool, NULL, 0, NULL);
}

int lib_bn_res_fits(const Graph *g, const FusePlan *p, const FuseStep *st, const Node *rbn, LibBnCoef rkc)
{
    Builder b = {g, NULL, 0, 0};
    const Node *bn = &g->nodes[p->nodes[st->first]];
    if (bn->op != CT_OP_batch_norm || rbn->op != CT_OP_batch_norm || !rbn->iattr[0] || rbn->iattr[1] || rkc.at < 0)
        return 0;
    BnEpi e = bn_epi(&b, p, st);
    return e.residual == rbn->out[0] && e.pool < 0 && same_storage(&b, rbn->in[0], rbn->out[0]);
}

int lib_bn_conv_sums_fits(const Graph *g, const Node *bn)
{
    Builder b = {g, NULL, 0, 0};
    const Value *x = val(&b, bn->in[0]);
    CtDType t = x->type.dtype;
    return bn->op == CT_OP_batch_norm && bn->iattr[0] && !bn->iattr[1] && (t == CT_F16 || t == CT_BF16) &&
           x->type.shape.ndim == 4 && x->layout == CT_LAYOUT_CHANNELS_LAST &&
           same_storage(&b, bn->in[0], bn->out[0]) && shape_numel(&x->type.shape) / x->type.shape.d[1] > 1;
}

int lib_bn_conv_sums(const Graph *g, int sms, const Node *bn, LibBnCoef kc, LibLaunch *l, int *count,
                     size_t *scratch, CtErr *err)
{
    Builder b = {g, l, 0, sms};
    BnEpi e = {.residual = -1, .out = bn->out[0], .pool = -1, .act = -1, .tail = 1, .res = {-1, -1},
               .stats_only = 1, .sums = kc.sums};
    *count = 0;
    if (kc.sums < 0 || bn->op != CT_OP_batch_norm || !bn->iattr[0])
        return ct_fail(err, "sums asked of a convolution's step, but not for a training batch norm's statistics");
    if (plan_batch_norm(&b, bn, &e, NULL, NULL, scratch, err))
        return -1;
    *count = b.n;
    return 0;
}

int lib_batch_norm_step(const Graph *g, int sms, const FusePlan *p, const FuseStep *st, LibBnCoef kc,
                        const Node *gap, LibBnRes res, int stats_only, LibLaunch *l, int *count, size_t *scratch,
                        int *tail, CtErr *err)
{
    Builder b = {g, l, 0, sms};
    const Node *bn = &g->nodes[p->nodes[st->first]];
    BnEpi e = bn_epi(&b, p, st);
    *count = 0;
    *scratch = 0;
    *tail = e.tail;
    if (bn->op != CT_OP_batch_norm)
        return ct_fail(err, "a step of %s is not batch norm's", op_def(bn->op)->name);
    if (gap && !lib_bn_pool_fits(g, p, st, gap))
        return ct_fail(err, "a batch norm step cannot take this global average pool (lib_bn_pool_fits)");
    if (stats_only && (e.out != bn->out[0] || gap || res.x >= 0))
        return ct_fail(err, "a batch norm's apply pass left to another step, but its step has an epilogue");
    e.pool = gap ? gap->out[0] : -1;
    e.res = res;
    e.stats_only = stats_only;
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

int lib_bn_act_grad_fits(const Graph *g, const Node *bn, const Node *act, const Node *n, ValueId store)
{
    Builder b = {g, NULL, 0, 0};
    CtDType t = val(&b, bn->in[0])->type.dtype;
    return val(&b, bn->out[0])->type.dtype == t && val(&b, act->in[1])->type.dtype == t &&
           same_strides(&b, bn->in[0], act->in[1]) &&
           (store < 0 || (val(&b, store)->type.dtype == t && same_strides(&b, n->out[0], store)));
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
        if (plan_batch_norm(&b, bn, NULL, &(BnAct){.act = -1, .store = -1}, NULL, &fwd_bytes, err))
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

int lib_bn_act_grad(const Graph *g, int sms, const Node *bn, const Node *act, const Node *n, ValueId store,
                    LibBnCoef kc, LibLaunch *l, int *count, size_t *scratch, CtErr *err)
{
    BnAct fa = {.act = (int)act->iattr[0], .approx = (int)act->iattr[1], .dy = act->in[1], .store = store};
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
    if (!lib_bn_act_grad_fits(g, bn, act, NULL, -1) || !per_channel(&b, gap->in[0], x) ||
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
                .store = -1, .a = mul ? mul->in[!big] : -1, .b = gap->in[0], .z = -1, .hw = xs->d[2] * xs->d[3]};
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
                .store = -1, .sum = 1, .a = add->in[0], .b = add->in[1], .z = act ? act->in[0] : -1};
    *count = 0;
    if (plan_batch_norm(&b, n, NULL, &fa, NULL, scratch, err))
        return -1;
    *count = b.n;
    return 0;
}

int lib_plan_norm(Builder *b, const Node *n, size_t *scratch, CtErr *err)
{
    switch (n->op) {
    case CT_OP_layer_norm: case CT_OP_layer_norm_grad: return plan_layer_norm(b, n, NULL, scratch, err);
    case CT_OP_group_norm: case CT_OP_group_norm_grad: return plan_group_norm(b, n, scratch, err);
    default: return plan_batch_norm(b, n, NULL, NULL, NULL, scratch, err);
    }
}
