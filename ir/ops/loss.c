/*
 * Losses over logits [B, C], each a scalar mean over the batch, and their
 * gradients (op_grad(logits, target, dloss) -> dlogits), computed with
 * log-sum-exp so large logits stay finite.
 * cross_entropy(logits, target i64 [B]), fattr smoothing: timm's
 *   LabelSmoothingCrossEntropy; smoothing 0 is nn.CrossEntropyLoss.
 * soft_target_cross_entropy(logits, target [B, C]): timm's
 *   SoftTargetCrossEntropy, for mixup/cutmix targets.
 * binary_cross_entropy(logits, target), fattr smoothing, threshold,
 *   pos_weight; iattr sum_classes: timm's BinaryCrossEntropy. The target is
 *   i64 [B] class indices, made one-hot with smoothing/C off and
 *   1 - smoothing + smoothing/C on, or [B, C] probabilities (mixup/cutmix's,
 *   taken as they are); either is binarised by `threshold` when it is >= 0.
 *   Each element's loss is BCE-with-logits, its positive term weighted by
 *   pos_weight when that is > 0 (torch's pos_weight; 0: none, which a node
 *   built without the attribute has); the loss is their mean over all B*C
 *   elements, or with sum_classes (--bce-sum) each row's sum, averaged over
 *   the batch.
 * jsd_cross_entropy(logits [S*B, C], target i64 [S*B]), iattr num_splits
 *   (S), fattr smoothing, alpha: timm's JsdCrossEntropy (AugMix's
 *   --jsd-loss), the logits S splits of B rows (clean first, as
 *   --aug-splits batches them): the cross entropy of the first split with
 *   the first B targets (label-smoothed when smoothing > 0), plus alpha/S
 *   times the sum over splits of KL(M || p_i) per sample averaged over B
 *   (F.kl_div's batchmean), p_i the splits' softmax and M their mean,
 *   clamped to [1e-7, 1] before its log (the clamp's gradient is torch's).
 *   log p_i is taken as the log-softmax, so a probability that underflows
 *   to 0 adds nothing, as torch's xlogy.
 * Targets outside [0, C) are rejected before a graph runs (the runtime checks
 * its inputs); kernels assume valid ones.
 */
#include <math.h>

#include "ops_impl.h"

static int infer_loss(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, 2, err))
        return -1;
    const CtShape *x = in_shape(g, n, 0);
    int jsd = n->op == CT_OP_jsd_cross_entropy || n->op == CT_OP_jsd_cross_entropy_grad;
    if (jsd && (n->iattr[0] < 2 || n->iattr[0] > CT_JSD_MAX_SPLITS || x->d[0] % n->iattr[0]))
        return ct_fail(err, "jsd_cross_entropy: num_splits %lld must be in [2, %d] and divide the batch %lld",
                       (long long)n->iattr[0], CT_JSD_MAX_SPLITS, (long long)x->d[0]);
    const CtType *t = in_type(g, n, 1);
    int bce = n->op == CT_OP_binary_cross_entropy || n->op == CT_OP_binary_cross_entropy_grad;
    if (n->op == CT_OP_soft_target_cross_entropy || n->op == CT_OP_soft_target_cross_entropy_grad ||
        (bce && ct_dtype_is_float(t->dtype))) {
        if (require_shape(g, n, 1, x, err))
            return -1;
    } else if (t->dtype != CT_I64 || t->shape.ndim != 1 || t->shape.d[0] != x->d[0]) {
        return ct_fail(err, "target must be i64 [%lld] class indices", (long long)x->d[0]);
    }
    out[0] = (CtType){{0}, in_type(g, n, 0)->dtype};
    return 1;
}

static int infer_loss_grad(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (infer_loss(g, n, out, err) < 0 || require_shape(g, n, 2, &(CtShape){0}, err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static double log_sum_exp(const double *x, int64_t C)
{
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; c++)
        m = x[c] > m ? x[c] : m;
    for (int64_t c = 0; c < C; c++)
        s += exp(x[c] - m);
    return m + log(s);
}

static void cross_entropy_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t B = x->d[0], C = x->d[1];
    double s = n->fattr[0], total = 0;
    for (int64_t b = 0; b < B; b++) {
        const double *row = in[0] + b * C;
        double lse = log_sum_exp(row, C), mean_logp = 0;
        for (int64_t c = 0; c < C; c++)
            mean_logp += (row[c] - lse) / (double)C;
        /* no smoothing term at s = 0 (nn.CrossEntropyLoss): 0 * -inf, a -inf logit's, is NaN */
        total += (1 - s) * (lse - row[(int64_t)in[1][b]]) - (s != 0 ? s * mean_logp : 0);
    }
    out[0][0] = total / (double)B;
}

static void cross_entropy_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t B = x->d[0], C = x->d[1];
    double s = n->fattr[0], scale = in[2][0] / (double)B;
    for (int64_t b = 0; b < B; b++) {
        const double *row = in[0] + b * C;
        double lse = log_sum_exp(row, C);
        for (int64_t c = 0; c < C; c++)
            out[0][b * C + c] = scale * (exp(row[c] - lse) - s / (double)C - (c == (int64_t)in[1][b] ? 1 - s : 0));
    }
}

static void soft_target_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t B = x->d[0], C = x->d[1];
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        double lse = log_sum_exp(in[0] + b * C, C);
        for (int64_t c = 0; c < C; c++)
            total -= in[1][b * C + c] * (in[0][b * C + c] - lse);
    }
    out[0][0] = total / (double)B;
}

static void soft_target_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t B = x->d[0], C = x->d[1];
    double scale = in[2][0] / (double)B;
    for (int64_t b = 0; b < B; b++) {
        double lse = log_sum_exp(in[0] + b * C, C), tsum = 0;
        for (int64_t c = 0; c < C; c++)
            tsum += in[1][b * C + c];
        for (int64_t c = 0; c < C; c++)
            out[0][b * C + c] = scale * (exp(in[0][b * C + c] - lse) * tsum - in[1][b * C + c]);
    }
}

/* The target of row b, class c: given, or the smoothed one-hot of the
 * label; binarised by the threshold when there is one. */
static double bce_target(const Graph *g, const Node *n, const double *target, int64_t b, int64_t c, int64_t C)
{
    double v;
    if (ct_dtype_is_float(in_type(g, n, 1)->dtype)) {
        v = target[b * C + c];
    } else {
        double off = n->fattr[0] / (double)C;
        v = c == (int64_t)target[b] ? 1 - n->fattr[0] + off : off;
    }
    return n->fattr[1] >= 0 ? (v > n->fattr[1] ? 1 : 0) : v;
}

/* The elements the loss averages over: all B*C, or B with sum_classes. */
static double bce_count(const Node *n, int64_t B, int64_t C) { return (double)(n->iattr[0] ? B : B * C); }

/* torch's binary_cross_entropy_with_logits with pos_weight w:
 * (1 - t) x + (1 + (w - 1) t) softplus(-x), softplus taken stably. */
static void bce_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t B = x->d[0], C = x->d[1];
    double w = n->fattr[2] > 0 ? n->fattr[2] : 1, total = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            double v = in[0][b * C + c], t = bce_target(g, n, in[1], b, c, C);
            total += (1 - t) * v + (1 + (w - 1) * t) * ((v < 0 ? -v : 0) + log1p(exp(-fabs(v))));
        }
    out[0][0] = total / bce_count(n, B, C);
}

/* d/dx: (1 - t) - (1 + (w - 1) t) sigmoid(-x); sigmoid(x) - t at w = 1. */
static void bce_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int64_t B = x->d[0], C = x->d[1];
    double w = n->fattr[2] > 0 ? n->fattr[2] : 1, scale = in[2][0] / bce_count(n, B, C);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            double v = in[0][b * C + c], t = bce_target(g, n, in[1], b, c, C);
            out[0][b * C + c] = scale * ((1 - t) - (1 + (w - 1) * t) / (1 + exp(v)));
        }
}

/* Sample b of a JSD loss: for split i, row r[i] of x and its log-sum-exp. */
typedef struct JsdRows {
    const double *r[CT_JSD_MAX_SPLITS];
    double lse[CT_JSD_MAX_SPLITS];
} JsdRows;

static JsdRows jsd_rows(const double *x, int64_t b, int64_t B, int64_t C, int S)
{
    JsdRows j;
    for (int i = 0; i < S; i++) {
        j.r[i] = x + (i * B + b) * C;
        j.lse[i] = log_sum_exp(j.r[i], C);
    }
    return j;
}

/* Class c's mixture M_c of the S softmaxes, clamped as timm clamps it. */
static double jsd_mixture(const JsdRows *j, int64_t c, int S, double *m)
{
    double s = 0;
    for (int i = 0; i < S; i++)
        s += exp(j->r[i][c] - j->lse[i]);
    *m = s / S;
    return *m < 1e-7 ? 1e-7 : *m > 1 ? 1 : *m;
}

static void jsd_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int S = (int)n->iattr[0];
    int64_t B = x->d[0] / S, C = x->d[1];
    double s = n->fattr[0], total = 0;
    for (int64_t b = 0; b < B; b++) {
        JsdRows j = jsd_rows(in[0], b, B, C, S);
        double mean_logp = 0, kl = 0, m;
        for (int64_t c = 0; c < C; c++) {
            mean_logp += (j.r[0][c] - j.lse[0]) / (double)C;
            double lm = log(jsd_mixture(&j, c, S, &m));
            for (int i = 0; i < S; i++) {
                double lp = j.r[i][c] - j.lse[i];
                kl += exp(lp) * (lp - lm);
            }
        }
        total += (1 - s) * (j.lse[0] - j.r[0][(int64_t)in[1][b]]) - (s != 0 ? s * mean_logp : 0) +
                 n->fattr[1] / S * kl;
    }
    out[0][0] = total / (double)B;
}

/* d/dz_i = p_i * (g_i - <p_i, g_i>), g_ic = k (log p_ic + 1 - log M~_c -
 * [M_c unclamped] M_c / M~_c), k = alpha / S; the first split adds the
 * cross entropy's gradient. */
static void jsd_grad_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *x = in_shape(g, n, 0);
    int S = (int)n->iattr[0];
    int64_t B = x->d[0] / S, C = x->d[1];
    double s = n->fattr[0], k = n->fattr[1] / S, scale = in[2][0] / (double)B;
    for (int64_t b = 0; b < B; b++) {
        JsdRows j = jsd_rows(in[0], b, B, C, S);
        double dot[CT_JSD_MAX_SPLITS] = {0}, m;
        for (int pass = 0; pass < 2; pass++)
            for (int64_t c = 0; c < C; c++) {
                double mc = jsd_mixture(&j, c, S, &m), through = m >= 1e-7 && m <= 1 ? m / mc : 0;
                for (int i = 0; i < S; i++) {
                    double lp = j.r[i][c] - j.lse[i], p = exp(lp), gi = k * (lp + 1 - log(mc) - through);
                    if (!pass) {
                        dot[i] += p * gi;
                        continue;
                    }
                    double d = p * (gi - dot[i]);
                    if (i == 0)
                        d += p - s / (double)C - (c == (int64_t)in[1][b] ? 1 - s : 0);
                    out[0][(i * B + b) * C + c] = scale * d;
                }
            }
    }
}

/* Every loss's gradient op is the next op kind in ops.def, with the same
 * attributes, and takes (logits, target, dloss). */
static void loss_vjp(Emitter *e, const Node *n, const ValueId *dout, const int *need, ValueId *din)
{
    din[0] = emit(e, n->op + 1, 3, (ValueId[]){n->in[0], n->in[1], dout[0]}, n->iattr, CT_MAX_IATTR, n->fattr,
                  CT_MAX_FATTR, 0);
}

#define LOSS_OPS(op, ref_fn, grad_ref_fn, ...)                                                                   \
    const OpDef op_##op = {.name = #op, .min_in = 2, .max_in = 2, .infer = infer_loss, .ref = ref_fn,           \
                           .vjp = loss_vjp, .nondiff = 1u << 1, .fusion = OP_REDUCTION, .amp = OP_AMP_F32,      \
                           .layout = OP_LAYOUT_NCHW, .cost = op_cost_none, __VA_ARGS__};                        \
    const OpDef op_##op##_grad = {.name = #op "_grad", .min_in = 3, .max_in = 3, .infer = infer_loss_grad,      \
                                  .ref = grad_ref_fn, .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW,              \
                                  .layout = OP_LAYOUT_NCHW, __VA_ARGS__};

LOSS_OPS(cross_entropy, cross_entropy_ref, cross_entropy_grad_ref, .fattr = {"smoothing"})
LOSS_OPS(soft_target_cross_entropy, soft_target_ref, soft_target_grad_ref)
LOSS_OPS(binary_cross_entropy, bce_ref, bce_grad_ref, .fattr = {"smoothing", "threshold", "pos_weight"},
         .iattr = {"sum_classes"})
LOSS_OPS(jsd_cross_entropy, jsd_ref, jsd_grad_ref, .fattr = {"smoothing", "alpha"}, .iattr = {"num_splits"})

_Static_assert(CT_OP_cross_entropy_grad == CT_OP_cross_entropy + 1 &&
                   CT_OP_soft_target_cross_entropy_grad == CT_OP_soft_target_cross_entropy + 1 &&
                   CT_OP_binary_cross_entropy_grad == CT_OP_binary_cross_entropy + 1 &&
                   CT_OP_jsd_cross_entropy_grad == CT_OP_jsd_cross_entropy + 1,
               "loss_vjp relies on each loss's gradient op following it in ops.def");
