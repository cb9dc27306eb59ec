/*
 * Data movement: reshape (row-major, same element count), permute (dims
 * reordered), slice (one dim, start:end:step), concat (along one dim) and
 * expand (size-1 dims broadcast, new leading dims allowed; torch.expand),
 * pad (constant padding of H and W; negative amounts crop).
 * to_layout changes only a value's memory layout (NCHW <-> NHWC): the
 * logical tensor, and so the ref kernel, is the identity.
 * Their attribute is one list (OpDef.list_attr): the target shape for
 * reshape/expand, the source dim of each output dim for permute.
 */
#include "ops_impl.h"

static int infer_reshape(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtShape *x = in_shape(g, n, 0);
    int nd = (int)n->iattr[0];
    if (nd < 0 || nd > CT_MAX_DIMS)
        return ct_fail(err, "ndim %d out of range", nd);
    CtShape s = shape_make(nd, &n->iattr[1]);
    char a[96], b[96];
    for (int i = 0; i < nd; i++)
        if (s.d[i] < 0)
            return ct_fail(err, "negative dim in %s", shape_str(&s, a, sizeof a));
    if (shape_numel(&s) != shape_numel(x))
        return ct_fail(err, "cannot reshape %s to %s", shape_str(x, a, sizeof a), shape_str(&s, b, sizeof b));
    out[0].dtype = in_type(g, n, 0)->dtype;
    out[0].shape = s;
    return 1;
}

static void copy_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    for (int64_t i = 0; i < count; i++)
        out[0][i] = in[0][i];
}

static void reshape_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    din[0] = emit_reshape(e, dout[0], emit_shape(e, n->in[0]));
}

/* Element i of the output is element i of the input: reshape's, where
 * both are row-major, and cast's and expand's (a broadcast read). */
static void identity_scalar(const Node *n, Sx *s) { s->out[0] = sx_in(s, 0); }

const OpDef op_reshape = {.name = "reshape", .min_in = 1, .max_in = 1, .vjp = reshape_vjp,
                          .list_attr = "shape",
                          .infer = infer_reshape, .ref = copy_ref, .fusion = OP_VIEW, .scalar = identity_scalar,
                          .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW, .cost = op_cost_none};

static int infer_permute(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtShape *x = in_shape(g, n, 0);
    if (n->iattr[0] != x->ndim)
        return ct_fail(err, "permutation has %lld dims, input has %d", (long long)n->iattr[0], x->ndim);
    int seen[CT_MAX_DIMS] = {0};
    out[0] = *in_type(g, n, 0);
    for (int i = 0; i < x->ndim; i++) {
        int64_t p = n->iattr[1 + i];
        if (p < 0 || p >= x->ndim || seen[p]++)
            return ct_fail(err, "not a permutation of %d dims", x->ndim);
        out[0].shape.d[i] = x->d[p];
    }
    return 1;
}

static void permute_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0), *y = out_shape(g, n, 0);
    int64_t xstride[CT_MAX_DIMS], stride[CT_MAX_DIMS];
    int64_t s = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        xstride[i] = s;
        s *= x->d[i];
    }
    for (int i = 0; i < y->ndim; i++)
        stride[i] = xstride[n->iattr[1 + i]];
    strided_gather(in[0], out[0], y, stride);
}

static void permute_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int64_t inv[CT_MAX_DIMS];
    for (int i = 0; i < n->iattr[0]; i++)
        inv[n->iattr[1 + i]] = i;
    din[0] = emit_permute(e, dout[0], (int)n->iattr[0], inv);
}

const OpDef op_permute = {.name = "permute", .min_in = 1, .max_in = 1, .vjp = permute_vjp,
                          .list_attr = "perm",
                          .infer = infer_permute, .ref = permute_ref, .fusion = OP_DATA, .amp = OP_AMP_FOLLOW,
                          .layout = OP_LAYOUT_NCHW, .cost = op_cost_none};

enum { SL_DIM, SL_START, SL_END, SL_STEP };

static int infer_slice(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtShape *x = in_shape(g, n, 0);
    const int64_t *a = n->iattr;
    if (a[SL_DIM] < 0 || a[SL_DIM] >= x->ndim)
        return ct_fail(err, "dim %lld out of range for %d dims", (long long)a[SL_DIM], x->ndim);
    if (a[SL_STEP] < 1 || a[SL_START] < 0 || a[SL_END] > x->d[a[SL_DIM]] || a[SL_START] >= a[SL_END])
        return ct_fail(err, "slice %lld:%lld:%lld is empty or outside dim of size %lld", (long long)a[SL_START],
                       (long long)a[SL_END], (long long)a[SL_STEP], (long long)x->d[a[SL_DIM]]);
    out[0] = *in_type(g, n, 0);
    out[0].shape.d[a[SL_DIM]] = (a[SL_END] - a[SL_START] + a[SL_STEP] - 1) / a[SL_STEP];
    return 1;
}

static void slice_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0), *y = out_shape(g, n, 0);
    const int64_t *a = n->iattr;
    int64_t outer, inner;
    shape_split_at_dim(x, a[SL_DIM], &outer, &inner);
    int64_t D = x->d[a[SL_DIM]], OD = y->d[a[SL_DIM]];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < OD; j++)
            for (int64_t i = 0; i < inner; i++)
                out[0][(o * OD + j) * inner + i] = in[0][(o * D + a[SL_START] + j * a[SL_STEP]) * inner + i];
}

static void slice_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int64_t a[5] = {n->iattr[0], n->iattr[1], n->iattr[2], n->iattr[3], emit_shape(e, n->in[0]).d[n->iattr[0]]};
    din[0] = emit(e, CT_OP_slice_grad, 1, dout, a, 5, NULL, 0, 0);
}

const OpDef op_slice = {.name = "slice", .min_in = 1, .max_in = 1, .iattr = {"dim", "start", "end", "step"},
                        .infer = infer_slice, .ref = slice_ref, .vjp = slice_vjp, .fusion = OP_DATA,
                        .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW, .cost = op_cost_none};

/* slice_grad(dy): dy placed back where the slice took it from, zeros
 * elsewhere; iattr as slice's plus the sliced dim's full size. */
static int infer_slice_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtShape *dy = in_shape(g, n, 0);
    const int64_t *a = n->iattr;
    if (a[SL_DIM] < 0 || a[SL_DIM] >= dy->ndim || a[SL_STEP] < 1 || a[SL_START] < 0 || a[SL_END] > a[4] ||
        a[SL_START] >= a[SL_END] || dy->d[a[SL_DIM]] != (a[SL_END] - a[SL_START] + a[SL_STEP] - 1) / a[SL_STEP])
        return ct_fail(err, "slice %lld:%lld:%lld of %lld does not give dy's shape", (long long)a[SL_START],
                       (long long)a[SL_END], (long long)a[SL_STEP], (long long)a[4]);
    out[0] = *in_type(g, n, 0);
    out[0].shape.d[a[SL_DIM]] = a[4];
    return 1;
}

static void slice_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = out_shape(g, n, 0), *y = in_shape(g, n, 0);
    const int64_t *a = n->iattr;
    int64_t outer, inner;
    shape_split_at_dim(x, a[SL_DIM], &outer, &inner);
    int64_t D = x->d[a[SL_DIM]], OD = y->d[a[SL_DIM]];
    for (int64_t i = 0; i < shape_numel(x); i++)
        out[0][i] = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < OD; j++)
            for (int64_t i = 0; i < inner; i++)
                out[0][(o * D + a[SL_START] + j * a[SL_STEP]) * inner + i] = in[0][(o * OD + j) * inner + i];
}

const OpDef op_slice_grad = {.name = "slice_grad", .min_in = 1, .max_in = 1,
                             .iattr = {"dim", "start", "end", "step", "size"},
                             .infer = infer_slice_grad, .ref = slice_grad_ref, .fusion = OP_DATA,
                             .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static int infer_concat(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtType *t0 = in_type(g, n, 0);
    int64_t dim = n->iattr[0];
    if (dim < 0 || dim >= t0->shape.ndim)
        return ct_fail(err, "dim %lld out of range for %d dims", (long long)dim, t0->shape.ndim);
    out[0] = *t0;
    for (int k = 1; k < n->nin; k++) {
        const CtType *t = in_type(g, n, k);
        int ok = t->dtype == t0->dtype && t->shape.ndim == t0->shape.ndim;
        for (int i = 0; ok && i < t0->shape.ndim; i++)
            ok = i == dim || t->shape.d[i] == t0->shape.d[i];
        if (!ok)
            return ct_fail(err, "input %d does not match input 0 outside dim %lld", k, (long long)dim);
        out[0].shape.d[dim] += t->shape.d[dim];
    }
    return 1;
}

static void concat_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *y = out_shape(g, n, 0);
    int64_t dim = n->iattr[0], outer, inner;
    shape_split_at_dim(y, dim, &outer, &inner);
    int64_t at = 0;
    for (int k = 0; k < n->nin; k++) {
        int64_t D = in_shape(g, n, k)->d[dim];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < D * inner; j++)
                out[0][(o * y->d[dim] + at) * inner + j] = in[k][o * D * inner + j];
        at += D;
    }
}

static void concat_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int64_t dim = n->iattr[0], at = 0;
    for (int k = 0; k < n->nin; k++) {
        int64_t size = emit_shape(e, n->in[k]).d[dim];
        if (need[k])
            din[k] = emit(e, CT_OP_slice, 1, dout, (int64_t[]){dim, at, at + size, 1}, 4, NULL, 0, 0);
        at += size;
    }
}

const OpDef op_concat = {.name = "concat", .min_in = 2, .max_in = CT_MAX_IN, .iattr = {"dim"},
                         .infer = infer_concat, .ref = concat_ref, .vjp = concat_vjp, .fusion = OP_DATA,
                         .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW, .cost = op_cost_none};

static int infer_expand(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtShape *x = in_shape(g, n, 0);
    int nd = (int)n->iattr[0];
    char a[96], b[96];
    if (nd < x->ndim || nd > CT_MAX_DIMS)
        return ct_fail(err, "cannot expand %d dims to %d", x->ndim, nd);
    CtShape s = shape_make(nd, &n->iattr[1]);
    for (int i = 0; i < nd; i++) {
        int j = i - (nd - x->ndim);
        if (j >= 0 && x->d[j] != 1 && x->d[j] != s.d[i])
            return ct_fail(err, "cannot expand %s to %s", shape_str(x, a, sizeof a), shape_str(&s, b, sizeof b));
    }
    out[0].dtype = in_type(g, n, 0)->dtype;
    out[0].shape = s;
    return 1;
}

static void expand_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    din[0] = emit_sum_to(e, dout[0], emit_shape(e, n->in[0]));
}

static int infer_to_layout(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (n->iattr[0] != CT_LAYOUT_CONTIG && n->iattr[0] != CT_LAYOUT_CHANNELS_LAST)
        return ct_fail(err, "unknown layout %lld", (long long)n->iattr[0]);
    if (in_shape(g, n, 0)->ndim != 4)
        return ct_fail(err, "layouts apply to 4-D tensors");
    return infer_like_input0(g, n, out, err);
}

/* The gradient goes back to the input's layout. */
static void to_layout_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int64_t back = e->g->values[n->in[0]].layout;
    din[0] = emit(e, CT_OP_to_layout, 1, dout, &back, 1, NULL, 0, 0);
    if (din[0] >= 0)
        e->g->values[din[0]].layout = (CtLayout)back;
}

const OpDef op_to_layout = {.name = "to_layout", .min_in = 1, .max_in = 1, .iattr = {"layout"},
                            .infer = infer_to_layout, .ref = copy_ref, .vjp = to_layout_vjp, .fusion = OP_DATA,
                            .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_EITHER, .cost = op_cost_none};

/* cast(x): iattr dtype; the ref backend rounds to it like every output. */
static int infer_cast(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (n->iattr[0] < 0 || n->iattr[0] >= CT_NDTYPE)
        return ct_fail(err, "unknown dtype %lld", (long long)n->iattr[0]);
    out[0] = (CtType){*in_shape(g, n, 0), (CtDType)n->iattr[0]};
    return 1;
}

static void cast_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int64_t back = e->g->values[n->in[0]].type.dtype;
    din[0] = emit(e, CT_OP_cast, 1, dout, &back, 1, NULL, 0, 0);
}

const OpDef op_cast = {.name = "cast", .min_in = 1, .max_in = 1, .iattr = {"dtype"}, .infer = infer_cast,
                       .ref = sx_ref, .vjp = cast_vjp, .fusion = OP_ELEMENTWISE, .scalar = identity_scalar,
                       .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_EITHER, .cost = op_cost_none};

const OpDef op_expand = {.name = "expand", .min_in = 1, .max_in = 1, .vjp = expand_vjp,
                         .list_attr = "shape",
                         .infer = infer_expand, .ref = sx_ref, .fusion = OP_ELEMENTWISE, .scalar = identity_scalar,
                         .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW, .cost = op_cost_none};

enum { PAD_TOP, PAD_BOTTOM, PAD_LEFT, PAD_RIGHT };

/* pad(x [N,C,H,W]): F.pad(x, (left, right, top, bottom), value=value), a
 * negative amount cropping that side: y[n,c,i,j] = x[n,c,i-top,j-left]
 * where that is inside x, else value. So pad(-top, -bottom, -left, -right)
 * with value 0 is its VJP: one op both ways, as timm's pad_same and its
 * gradient need. */
static int infer_pad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 4, err))
        return -1;
    const CtShape *x = in_shape(g, n, 0);
    const int64_t *a = n->iattr;
    for (int k = 0; k < 4; k++)
        if (a[k] < -(1 << 30) || a[k] > 1 << 30)
            return ct_fail(err, "pad amount %lld is out of range", (long long)a[k]);
    int64_t oh = x->d[2] + a[PAD_TOP] + a[PAD_BOTTOM], ow = x->d[3] + a[PAD_LEFT] + a[PAD_RIGHT];
    if (oh < 1 || ow < 1)
        return ct_fail(err, "pad %lld,%lld,%lld,%lld (top, bottom, left, right) of %lldx%lld leaves %lldx%lld",
                       (long long)a[PAD_TOP], (long long)a[PAD_BOTTOM], (long long)a[PAD_LEFT],
                       (long long)a[PAD_RIGHT], (long long)x->d[2], (long long)x->d[3], (long long)oh,
                       (long long)ow);
    out[0] = *in_type(g, n, 0);
    out[0].shape.d[2] = oh;
    out[0].shape.d[3] = ow;
    return 1;
}

static void pad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0), *y = out_shape(g, n, 0);
    int64_t H = x->d[2], W = x->d[3], OH = y->d[2], OW = y->d[3];
    for (int64_t p = 0; p < x->d[0] * x->d[1]; p++)
        for (int64_t i = 0; i < OH; i++)
            for (int64_t j = 0; j < OW; j++) {
                int64_t h = i - n->iattr[PAD_TOP], w = j - n->iattr[PAD_LEFT];
                int inside = h >= 0 && h < H && w >= 0 && w < W;
                out[0][(p * OH + i) * OW + j] = inside ? in[0][(p * H + h) * W + w] : n->fattr[0];
            }
}

static void pad_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    int64_t a[4];
    for (int k = 0; k < 4; k++)
        a[k] = -n->iattr[k];
    din[0] = emit(e, CT_OP_pad, 1, dout, a, 4, (double[]){0}, 1, 0);
}

const OpDef op_pad = {.name = "pad", .min_in = 1, .max_in = 1, .iattr = {"top", "bottom", "left", "right"},
                      .fattr = {"value"}, .infer = infer_pad, .ref = pad_ref, .vjp = pad_vjp, .fusion = OP_DATA,
                      .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_EITHER, .cost = op_cost_none};
