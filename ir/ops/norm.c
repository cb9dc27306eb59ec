/*
 * Normalisations.
 * batch_norm: x [N,C,...], weight [C], bias [C], running_mean [C],
 *   running_var [C]. Eval: one output normalised by the running stats.
 *   Train (iattr training=1): outputs y (normalised by the batch's biased
 *   variance), new running_mean and new running_var, the latter updated with
 *   the unbiased variance and `momentum`, exactly as PyTorch; the model writes
 *   them back with assign nodes. iattr sync=1 (SyncBatchNorm, set by the
 *   train step for --sync-bn): the batch statistics span every rank's batch
 *   through the run's collective (ir/collective.h), and so does its
 *   gradient's dx.
 * layer_norm: x [..., D], weight [D], bias [D], over the last dim, computed
 *   in f32 whatever the operands' dtypes (weight and bias share one); y in
 *   iattr dtype's (the builders' x's). Under amp that is
 *   torch.autocast's layer_norm(x.float()), or its cast(...) to the low
 *   dtype, as one op: the casts around it never written (passes/amp.c).
 * group_norm: x [N,C,...], then as F.group_norm's optional affine a weight
 *   [C] and, after it, a bias [C], iattr groups: each sample's C / groups
 *   channels of a group (with all their positions) normalised together by
 *   their mean and biased variance, then the channels' affine (weight 1 and
 *   bias 0 where absent). Without the affine, x [1, O, K] in O groups is
 *   F.batch_norm(x, training=True)'s standardisation (weight
 *   standardisation, frontend's nn_std_conv2d).
 * Their gradients: batch_norm_grad(x, weight, running_mean, running_var, dy)
 * (in training the batch's statistics, computed again, and the running
 * ones unread: the vjp gives it the forward's updated ones),
 * layer_norm_grad(x, weight, dy) -> dx, dweight, dbias (dy in y's dtype, dx in
 * x's, dweight and dbias in weight's), and
 * group_norm_grad(x, weight, dy) -> dx, dweight, dbias or, for a group_norm
 * without weight, group_norm_grad(x, dy) -> dx; in training BN
 * differentiates through the batch statistics, as PyTorch does.
 */
#include <math.h>
#include <stdlib.h>

#include "ir/collective.h"
#include "ops_impl.h"

static int infer_batch_norm(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    const CtShape *x = in_shape(g, n, 0);
    if (x->ndim < 2)
        return ct_fail(err, "input must have a channel dim (at least 2 dims)");
    CtShape c = {1, {x->d[1]}};
    for (int i = 1; i < 5; i++)
        if (require_shape(g, n, i, &c, err))
            return -1;
    out[0] = *in_type(g, n, 0);
    if (!n->iattr[0])
        return 1;
    if (shape_numel(x) / x->d[1] < 2)
        return ct_fail(err, "training needs more than one value per channel, got input %s",
                       shape_str(x, (char[96]){0}, 96));
    out[1] = *in_type(g, n, 3);
    out[2] = *in_type(g, n, 4);
    return 3;
}

/* The batch's statistics of x viewed as [N, C, S]: a malloc'd [2C + 1],
 * the channels' means, then the count of values a channel has, then their
 * biased variances. With ranks (SyncBatchNorm) they span every rank's
 * batch: the sums with the count, then the squared deviations from that
 * mean, are summed over the ranks (two passes, as on one rank); all NaN
 * when the collective failed. */
static double *batch_stats(const double *x, int64_t N, int64_t C, int64_t S, const CtCollective *ranks)
{
    double *st = calloc((size_t)(2 * C + 1), sizeof *st), *var = st + C + 1;
    CT_ASSERT(st != NULL);
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++)
                st[c] += x[(b * C + c) * S + s];
    st[C] = (double)(N * S);
    int failed = ct_collective_sum(ranks, st, C + 1);
    for (int64_t c = 0; c < C; c++)
        st[c] /= st[C];
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) {
                double d = x[(b * C + c) * S + s] - st[c];
                var[c] += d * d;
            }
    failed = failed || ct_collective_sum(ranks, var, C);
    for (int64_t c = 0; c < C; c++)
        var[c] /= st[C];
    for (int64_t i = 0; i < 2 * C + 1 && failed; i++)
        st[i] = NAN;
    return st;
}

static void batch_norm_ref(const Graph *g, const Node *n, double *const *in, double *const *out,
                           const CtCollective *coll)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t N = x->d[0], C = x->d[1], S = shape_numel(x) / (N * C);
    double momentum = n->fattr[0], eps = n->fattr[1];
    double *st = n->iattr[0] ? batch_stats(in[0], N, C, S, n->iattr[1] ? coll : NULL) : NULL;
    for (int64_t c = 0; c < C; c++) {
        double mean = in[3][c], var = in[4][c];
        if (st) {
            double count = st[C];
            mean = st[c];
            var = st[C + 1 + c];
            out[1][c] = (1 - momentum) * in[3][c] + momentum * mean;
            out[2][c] = (1 - momentum) * in[4][c] + momentum * var * count / (count - 1);
        }
        double inv = 1 / sqrt(var + eps);
        for (int64_t b = 0; b < N; b++)
            for (int64_t s = 0; s < S; s++) {
                int64_t i = (b * C + c) * S + s;
                out[0][i] = (in[0][i] - mean) * inv * in[1][c] + in[2][c];
            }
    }
    free(st);
}

static void batch_norm_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    if (dout[0] < 0)
        return;
    /* in training the gradient takes the batch's statistics, not the
     * running ones it is given: the node's updated ones, so that the state
     * is read by the forward only, whose assigns then write it in place */
    int training = (int)n->iattr[0];
    ValueId in[5] = {n->in[0], n->in[1], training ? n->out[1] : n->in[3], training ? n->out[2] : n->in[4], dout[0]};
    if (emit(e, CT_OP_batch_norm_grad, 5, in, n->iattr, 2, &n->fattr[1], 1, 0) < 0)
        return;
    for (int k = 0; k < 3; k++)
        din[k] = need[k] ? emit_last(e)->out[k] : -1;
}

/* A norm's affine weight is a parameter; fvcore counts one more op per
 * element for it. */
static int has_affine(const Graph *g, const Node *n) { return g->values[n->in[1]].role == CT_ROLE_PARAM; }

/* fvcore's aten::batch_norm: per element 2 (affine) or 1 in eval; in
 * training, normalised by the batch's statistics, 5 or 4. */
static OpCost batch_norm_cost(const Graph *g, const Node *n, unsigned flags)
{
    int per = n->iattr[0] ? (has_affine(g, n) ? 5 : 4) : (has_affine(g, n) ? 2 : 1);
    return (OpCost){shape_numel(in_shape(g, n, 0)) * per, 0};
}

const OpDef op_batch_norm = {
    .name = "batch_norm",
    .min_in = 5,
    .max_in = 5,
    .iattr = {"training", "sync"},
    .fattr = {"momentum", "eps"},
    .infer = infer_batch_norm,
    .ref_ranks = batch_norm_ref,
    .vjp = batch_norm_vjp,
    .nondiff = 1u << 3 | 1u << 4,
    .fusion = OP_LIBRARY,
    /* torch.autocast lists batch_norm in no cast policy: it runs in its
     * input's dtype (cuDNN's with f32 statistics), the affine weights and
     * running statistics staying f32 */
    .amp = OP_AMP_DEST,
    .amp_keep = 0x1fu,
    .layout = OP_LAYOUT_EITHER,
    .cost = batch_norm_cost,
};

static int infer_batch_norm_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err) || require_shape(g, n, 4, in_shape(g, n, 0), err))
        return -1;
    if (in_type(g, n, 4)->dtype != in_type(g, n, 0)->dtype)
        return ct_fail(err, "dy must have x's dtype");
    const CtShape *x = in_shape(g, n, 0);
    if (x->ndim < 2)
        return ct_fail(err, "input must have a channel dim (at least 2 dims)");
    CtShape c = {1, {x->d[1]}};
    for (int i = 1; i < 4; i++)
        if (require_shape(g, n, i, &c, err))
            return -1;
    out[0] = *in_type(g, n, 0);
    out[1] = out[2] = *in_type(g, n, 1);
    return 3;
}

static void batch_norm_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out,
                                const CtCollective *coll)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t N = x->d[0], C = x->d[1], S = shape_numel(x) / (N * C);
    int training = (int)n->iattr[0];
    const CtCollective *ranks = training && n->iattr[1] ? coll : NULL;
    const double *dy = in[4];
    double *st = training ? batch_stats(in[0], N, C, S, ranks) : NULL, M = st ? st[C] : (double)(N * S);
    double *sums = malloc(sizeof *sums * (size_t)(3 * C)), *inv = sums + 2 * C; /* db, dw, 1/std */
    CT_ASSERT(sums != NULL);
    for (int64_t c = 0; c < C; c++) {
        double mean = st ? st[c] : in[2][c], var = st ? st[C + 1 + c] : in[3][c], db = 0, dw = 0;
        inv[c] = 1 / sqrt(var + n->fattr[0]);
        for (int64_t b = 0; b < N; b++)
            for (int64_t s = 0; s < S; s++) {
                int64_t i = (b * C + c) * S + s;
                db += dy[i];
                dw += dy[i] * (in[0][i] - mean) * inv[c];
            }
        out[1][c] = sums[c] = dw;
        out[2][c] = sums[C + c] = db;
    }
    /* SyncBatchNorm: dx through every rank's statistics takes the sums over
     * all ranks; the weight's and bias's gradients stay this rank's, which
     * the gradient all-reduce averages like any other */
    if (ct_collective_sum(ranks, sums, 2 * C))
        for (int64_t c = 0; c < 2 * C; c++)
            sums[c] = NAN;
    for (int64_t c = 0; c < C; c++) {
        double mean = st ? st[c] : in[2][c], dw = sums[c], db = sums[C + c];
        for (int64_t b = 0; b < N; b++)
            for (int64_t s = 0; s < S; s++) {
                int64_t i = (b * C + c) * S + s;
                double xhat = (in[0][i] - mean) * inv[c];
                out[0][i] = training ? in[1][c] * inv[c] / M * (M * dy[i] - db - xhat * dw) : dy[i] * in[1][c] * inv[c];
            }
    }
    free(st);
    free(sums);
}

const OpDef op_batch_norm_grad = {
    .name = "batch_norm_grad",
    .min_in = 5,
    .max_in = 5,
    .iattr = {"training", "sync"},
    .fattr = {"eps"},
    .infer = infer_batch_norm_grad,
    .ref_ranks = batch_norm_grad_ref,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_DEST,
    .amp_keep = 0xfu, /* dy cast to x's dtype, the rest as they are */
    .layout = OP_LAYOUT_EITHER,
    .layout_contig_out = ~1u, /* the weight's and bias's gradients */
};

static int infer_layer_norm(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    const CtShape *x = in_shape(g, n, 0);
    if (x->ndim < 1)
        return ct_fail(err, "input must have at least one dim");
    CtShape d = {1, {x->d[x->ndim - 1]}};
    if (require_float(g, n, 1, 1, err) || require_shape(g, n, 1, &d, err) || require_shape(g, n, 2, &d, err))
        return -1;
    if (in_type(g, n, 2)->dtype != in_type(g, n, 1)->dtype)
        return ct_fail(err, "weight and bias must share a dtype");
    int64_t dt = n->iattr[0];
    if (dt < 0 || dt >= CT_NDTYPE || !ct_dtype_is_float((CtDType)dt))
        return ct_fail(err, "dtype %lld: y's must be a float dtype", (long long)dt);
    out[0] = (CtType){*x, (CtDType)dt};
    return 1;
}

/* Mean and 1/sqrt(biased variance + eps) of one row of D values. */
static void row_stats(const double *x, int64_t D, double eps, double *mean, double *inv)
{
    double m = 0, var = 0;
    for (int64_t i = 0; i < D; i++)
        m += x[i];
    m /= (double)D;
    for (int64_t i = 0; i < D; i++)
        var += (x[i] - m) * (x[i] - m);
    *mean = m;
    *inv = 1 / sqrt(var / (double)D + eps);
}

static void layer_norm_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t D = x->d[x->ndim - 1], rows = shape_numel(x) / D;
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = in[0] + r * D;
        double mean, inv;
        row_stats(xr, D, n->fattr[0], &mean, &inv);
        for (int64_t i = 0; i < D; i++)
            out[0][r * D + i] = (xr[i] - mean) * inv * in[1][i] + in[2][i];
    }
}

static void layer_norm_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    ValueId in[3] = {n->in[0], n->in[1], dout[0]};
    if (emit(e, CT_OP_layer_norm_grad, 3, in, NULL, 0, n->fattr, 1, 0) < 0)
        return;
    for (int k = 0; k < 3; k++)
        din[k] = need[k] ? emit_last(e)->out[k] : -1;
}

/* fvcore's aten::layer_norm: per element 5 (affine) or 4. */
static OpCost affine_norm_cost(const Graph *g, const Node *n, unsigned flags)
{
    return (OpCost){shape_numel(in_shape(g, n, 0)) * (has_affine(g, n) ? 5 : 4), 0};
}

const OpDef op_layer_norm = {
    .name = "layer_norm",
    .min_in = 3,
    .max_in = 3,
    .iattr = {"dtype"},
    .fattr = {"eps"},
    .infer = infer_layer_norm,
    .ref = layer_norm_ref,
    .vjp = layer_norm_vjp,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_F32_IO,
    .layout = OP_LAYOUT_NCHW,
    .cost = affine_norm_cost,
};

static int infer_layer_norm_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err) || require_shape(g, n, 2, in_shape(g, n, 0), err))
        return -1;
    const CtShape *x = in_shape(g, n, 0);
    if (x->ndim < 1 || require_shape(g, n, 1, &(CtShape){1, {x->d[x->ndim - 1]}}, err))
        return -1;
    out[0] = *in_type(g, n, 0);
    out[1] = out[2] = *in_type(g, n, 1);
    return 3;
}

static void layer_norm_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t D = x->d[x->ndim - 1], rows = shape_numel(x) / D;
    for (int64_t i = 0; i < D; i++)
        out[1][i] = out[2][i] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = in[0] + r * D, *dy = in[2] + r * D;
        double mean, inv, mg = 0, mgx = 0;
        row_stats(xr, D, n->fattr[0], &mean, &inv);
        for (int64_t i = 0; i < D; i++) {
            double xhat = (xr[i] - mean) * inv, gi = dy[i] * in[1][i];
            mg += gi;
            mgx += gi * xhat;
            out[1][i] += dy[i] * xhat;
            out[2][i] += dy[i];
        }
        mg /= (double)D;
        mgx /= (double)D;
        for (int64_t i = 0; i < D; i++)
            out[0][r * D + i] = inv * (dy[i] * in[1][i] - mg - (xr[i] - mean) * inv * mgx);
    }
}

const OpDef op_layer_norm_grad = {
    .name = "layer_norm_grad",
    .min_in = 3,
    .max_in = 3,
    .fattr = {"eps"},
    .infer = infer_layer_norm_grad,
    .ref = layer_norm_grad_ref,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_NCHW,
};

/* What group_norm and its gradient require of x (input 0), the groups and
 * the weight (input 1) where `weight`. */
static int check_groups(const Graph *g, const Node *n, int weight, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    const CtShape *x = in_shape(g, n, 0);
    if (x->ndim < 2)
        return ct_fail(err, "input must have a channel dim (at least 2 dims)");
    if (n->iattr[0] < 1 || x->d[1] < n->iattr[0] || x->d[1] % n->iattr[0])
        return ct_fail(err, "%lld channels do not split into %lld groups", (long long)x->d[1],
                       (long long)n->iattr[0]);
    return weight ? require_shape(g, n, 1, &(CtShape){1, {x->d[1]}}, err) : 0;
}

static int infer_group_norm(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (check_groups(g, n, n->nin > 1, err) || (n->nin > 2 && require_shape(g, n, 2, in_shape(g, n, 1), err)))
        return -1;
    return infer_like_input0(g, n, out, err);
}

/* x [N, C, S...] seen as N * groups rows of D = C / groups * S values: a
 * group's channels are adjacent in row-major order. */
typedef struct GroupRows {
    int64_t rows, D, groups, per_group, S;
} GroupRows;

static GroupRows group_rows(const Graph *g, const Node *n)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t C = x->d[1], G = n->iattr[0], S = 1;
    for (int k = 2; k < x->ndim; k++)
        S *= x->d[k];
    return (GroupRows){x->d[0] * G, C / G * S, G, C / G, S};
}

/* The channel of row r's value i. */
static int64_t group_channel(const GroupRows *gr, int64_t r, int64_t i)
{
    return r % gr->groups * gr->per_group + i / gr->S;
}

static void group_norm_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    GroupRows gr = group_rows(g, n);
    for (int64_t r = 0; r < gr.rows; r++) {
        const double *xr = in[0] + r * gr.D;
        double mean, inv;
        row_stats(xr, gr.D, n->fattr[0], &mean, &inv);
        for (int64_t i = 0; i < gr.D; i++) {
            int64_t c = group_channel(&gr, r, i);
            out[0][r * gr.D + i] = (xr[i] - mean) * inv * (n->nin > 1 ? in[1][c] : 1) + (n->nin > 2 ? in[2][c] : 0);
        }
    }
}

static void group_norm_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    if (dout[0] < 0)
        return;
    int weight = n->nin > 1;
    ValueId in[3] = {n->in[0], weight ? n->in[1] : dout[0], dout[0]};
    if (emit(e, CT_OP_group_norm_grad, weight ? 3 : 2, in, n->iattr, 1, n->fattr, 1, 0) < 0)
        return;
    for (int k = 0; k < n->nin; k++)
        din[k] = need[k] ? emit_last(e)->out[k] : -1;
}

/* fvcore's aten::group_norm: 5 an element with an affine weight, else 4. */
static OpCost group_norm_cost(const Graph *g, const Node *n, unsigned flags)
{
    return (OpCost){shape_numel(in_shape(g, n, 0)) * (n->nin > 1 ? 5 : 4), 0};
}

const OpDef op_group_norm = {
    .name = "group_norm",
    .min_in = 1,
    .max_in = 3,
    .iattr = {"groups"},
    .fattr = {"eps"},
    .infer = infer_group_norm,
    .ref = group_norm_ref,
    .vjp = group_norm_vjp,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_F32,
    .layout = OP_LAYOUT_EITHER, /* statistics per sample and group of channels, affine per channel */
    .cost = group_norm_cost,
};

/* (x, weight, dy) -> dx, dweight, dbias; (x, dy) -> dx. */
static int infer_group_norm_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    int weight = n->nin == 3;
    if (check_groups(g, n, weight, err) || require_shape(g, n, n->nin - 1, in_shape(g, n, 0), err))
        return -1;
    out[0] = *in_type(g, n, 0);
    if (!weight)
        return 1;
    out[1] = out[2] = *in_type(g, n, 1);
    return 3;
}

/* layer_norm_grad's formulas over each group's row, the weight per channel. */
static void group_norm_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    GroupRows gr = group_rows(g, n);
    int weight = n->nin == 3;
    const double *dyv = in[n->nin - 1];
    for (int64_t c = 0; weight && c < gr.groups * gr.per_group; c++)
        out[1][c] = out[2][c] = 0;
    for (int64_t r = 0; r < gr.rows; r++) {
        const double *xr = in[0] + r * gr.D, *dy = dyv + r * gr.D;
        double mean, inv, mg = 0, mgx = 0;
        row_stats(xr, gr.D, n->fattr[0], &mean, &inv);
        for (int64_t i = 0; i < gr.D; i++) {
            int64_t c = group_channel(&gr, r, i);
            double xhat = (xr[i] - mean) * inv, gi = dy[i] * (weight ? in[1][c] : 1);
            mg += gi;
            mgx += gi * xhat;
            if (weight) {
                out[1][c] += dy[i] * xhat;
                out[2][c] += dy[i];
            }
        }
        mg /= (double)gr.D;
        mgx /= (double)gr.D;
        for (int64_t i = 0; i < gr.D; i++) {
            int64_t c = group_channel(&gr, r, i);
            out[0][r * gr.D + i] = inv * (dy[i] * (weight ? in[1][c] : 1) - mg - (xr[i] - mean) * inv * mgx);
        }
    }
}

const OpDef op_group_norm_grad = {
    .name = "group_norm_grad",
    .min_in = 2,
    .max_in = 3,
    .iattr = {"groups"},
    .fattr = {"eps"},
    .infer = infer_group_norm_grad,
    .ref = group_norm_grad_ref,
    .fusion = OP_LIBRARY,
    .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_EITHER,
    .layout_contig_out = ~1u, /* the weight's and bias's gradients */
};
