/*
 * Optimizer updates of one parameter; lr is a runtime scalar input so a
 * schedule never recompiles the graph, and the results are written back
 * with assign nodes. Every update op reads
 *   (p, g, state tensors shaped like p..., [scalar state], lr, [step i64 []],
 *    [extra], [apply])
 * and returns (p', state'...). `step` is the number of updates before this
 * one. The optional last input `apply` (a scalar, 1 or 0): at 0 the outputs
 * are the state unchanged, which is how a step whose gradients are not
 * finite is skipped (GradScaler's rule) without leaving the graph.
 *
 * Decoupled weight decay (p *= 1 - lr * wd) takes lr^2 / max_lr for lr where
 * an op's fattr max_lr is > 0: timm's corrected_weight_decay, max_lr the lr
 * the optimizer was built with (max_lr 0: lr itself).
 *
 * timm's caution (adamw_update rule 0, adamx_update but rule 1,
 * lion_update, adan_update, sgd_update decoupled with momentum,
 * rmsprop_update tf with momentum: their last iattr, caution) takes two nodes with the
 * whole-tensor mean between them: with caution 1 the op returns only the
 * mask, 1 where the update direction u and g agree in sign (u g > 0), else
 * 0; with caution 2 it reads one more scalar input after the others
 * (before apply), that mask's mean clamped to at least 1e-3, and moves p by
 * u * mask / mean instead of u (passes/train_step.c's optim_caution_mean).
 *
 * sgd_update(p, g, buf, lr), fattr momentum, weight_decay, max_lr; iattr
 *   nesterov, decoupled: torch.optim.SGD with dampening 0, or with decoupled
 *   timm's SGDW (p *= 1 - lr * wd first, no decay in the gradient). A zero
 *   momentum buffer gives exactly torch's first step (buf = d), so no step
 *   count is needed.
 * adamw_update(p, g, m, v, lr, step), fattr beta1, beta2, eps, weight_decay,
 *   max_lr; iattr rule: 0 torch AdamW, 1 torch Adam (L2 decay), 2 torch RAdam (L2
 *   decay, variance rectification), 3 timm AdaBelief (decoupled decay, v of
 *   (g - m)^2 + eps, rectify off). amsgrad off.
 * nadam_update(p, g, m, v, mu_product [], lr, step), fattr beta1, beta2,
 *   eps, weight_decay -> p', m', v', mu_product': torch NAdam (L2 decay,
 *   momentum_decay 4e-3, torch's default, fixed for want of an attribute);
 *   iattr legacy: torch < 2.0's mu_product * mu * mu_next for the next
 *   product (torch >= 2.0: mu_product * mu_next).
 * lamb_update(p, g, m, v, lr, step, [clip_sq]), fattr beta1, beta2, eps,
 *   weight_decay, max_lr; iattr trust_clip, always_adapt, has_clip, decoupled: timm
 *   Lamb with bias correction and grad averaging; decoupled (lambw): p
 *   decays by lr * weight_decay before the update instead of adding
 *   weight_decay * p to it. With has_clip, input clip_sq is
 *   (global grad norm / max_grad_norm)^2 and g is divided by
 *   max(sqrt(clip_sq), 1). The trust ratio takes the norms of p and of the
 *   update over this whole tensor.
 * lars_update(p, g, buf, lr), fattr momentum, weight_decay, trust_coeff,
 *   eps; iattr nesterov, trust_clip, always_adapt: timm Lars, dampening 0.
 * rmsprop_update(p, g, square_avg, buf, lr), fattr alpha, eps,
 *   weight_decay, momentum, max_lr; iattr tf: 0 torch RMSprop (eps outside
 *   the sqrt), 1 timm RMSpropTF (eps inside, lr inside the momentum buffer,
 *   square_avg starts at ones: the caller's initialisation); decoupled:
 *   timm RMSpropTF's decoupled_decay. Not centered.
 * adagrad_update(p, g, sum, lr), fattr eps, weight_decay: torch Adagrad,
 *   lr_decay 0.
 * lion_update(p, g, m, lr), fattr beta1, beta2, weight_decay, max_lr: timm Lion
 *   (decoupled decay, p -= lr * sign(lerp(m, g, 1 - beta1)), m lerps to g
 *   by 1 - beta2).
 * adamx_update(p, g, m, v, lr, step), fattr beta1, beta2, eps,
 *   weight_decay, clip_exp, max_lr; iattr rule: 0 timm NAdamW (decoupled decay,
 *   the Nesterov lerp of m' towards g in the step), 1 torch Adamax (L2
 *   decay, v the infinity norm max(beta2 v, |g| + eps)), 2 timm ADOPT with
 *   L2 decay, 3 with decoupled decay (the first step only sets v = g^2; then
 *   g / max(sqrt(v), eps), clipped to +-(step - 1)^clip_exp unless iattr
 *   no_clip, drives m, and v updates after), 4 timm LaProp: then the
 *   input after step is the running average of lr (exp_avg_lr_1, updated
 *   for this step by the caller): m accumulates lr (1 - beta1) g / denom,
 *   p moves by (lr / that average) m, then decays by lr * wd.
 * madgrad_update(p, g, grad_sum_sq, s, x0, lr, step), fattr momentum,
 *   weight_decay, eps; iattr decoupled: timm MADGRAD (dual averaging with
 *   a cube-root denominator; x0 is p at the first step when momentum != 0).
 * adan_update(p, g, m, diff, n, pre, lr, step) -> p', m', diff', n', pre',
 *   fattr beta1, beta2, beta3, eps, weight_decay; iattr no_prox: timm
 *   Adan. pre is the previous step's gradient, pre' this one's (pre itself
 *   on a skipped step); at the first step the difference is 0.
 * all_finite(x) -> scalar 1 when every element of x is finite, else 0.
 * grad_accumulate(acc, g, update) -> (total, acc'): --grad-accum-steps'
 *   gradient accumulation across steps: total = acc + g, the gradient the
 *   update reads; acc' = 0 on the step that updates (update != 0, a float
 *   scalar), else total (torch's p.grad summed by each backward until
 *   zero_grad). A select, not a product, so a non-finite total never
 *   poisons the next group.
 */
#include <math.h>

#include "ops_impl.h"
#include "sx_algebra.h"

/* Where an update op's inputs sit: `nstate` tensors shaped like p after
 * (p, g), `nscalar` f32 scalar states, then lr, the step when `step`, one
 * more scalar when `extra`, and apply when `apply`. */
typedef struct UpdLayout {
    int nstate, nscalar, step, extra, lr, apply;
    int caution; /* the caution attribute: 0, 1 (the mask), 2 (its mean the last extra input) */
} UpdLayout;

static int caution_mode(const Node *n)
{
    switch (n->op) {
    case CT_OP_adamw_update: return (int)n->iattr[1];
    case CT_OP_adamx_update: return (int)n->iattr[2];
    case CT_OP_lion_update: return (int)n->iattr[0];
    case CT_OP_adan_update: return (int)n->iattr[1];
    case CT_OP_sgd_update:
    case CT_OP_rmsprop_update: return (int)n->iattr[2];
    default: return 0;
    }
}

static UpdLayout upd_layout(const Node *n)
{
    UpdLayout l = {1, 0, 0, 0, 0, 0, caution_mode(n)};
    switch (n->op) {
    case CT_OP_adamw_update: l.nstate = 2, l.step = 1; break;
    case CT_OP_nadam_update: l.nstate = 2, l.nscalar = 1, l.step = 1; break;
    case CT_OP_lamb_update: l.nstate = 2, l.step = 1, l.extra = n->iattr[2] != 0; break;
    case CT_OP_rmsprop_update: l.nstate = 2; break;
    case CT_OP_adamx_update: l.nstate = 2, l.step = 1, l.extra = n->iattr[0] == 4; break;
    case CT_OP_madgrad_update: l.nstate = 3, l.step = 1; break;
    case CT_OP_adan_update: l.nstate = 4, l.step = 1; break;
    default: break;
    }
    l.extra += l.caution == 2;
    l.lr = 2 + l.nstate + l.nscalar;
    l.apply = n->nin == l.lr + 1 + l.step + l.extra + 1;
    return l;
}

static int infer_update(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    UpdLayout l = upd_layout(n);
    int base = l.lr + 1 + l.step + l.extra;
    if (n->nin != base && n->nin != base + 1)
        return ct_fail(err, "%s takes %d inputs (+ apply), got %d", op_def(n->op)->name, base, n->nin);
    if (require_float(g, n, 0, -1, err))
        return -1;
    for (int k = 1; k < 2 + l.nstate; k++)
        if (require_shape(g, n, k, in_shape(g, n, 0), err))
            return -1;
    for (int k = 2 + l.nstate; k < n->nin; k++) {
        if (require_shape(g, n, k, &(CtShape){0}, err))
            return -1;
        int is_step = l.step && k == l.lr + 1;
        if (is_step != (in_type(g, n, k)->dtype == CT_I64))
            return ct_fail(err, is_step ? "step must be an i64 scalar" : "input %d must be a float scalar", k);
    }
    if (l.caution == 1) {
        out[0] = *in_type(g, n, 0);
        return 1;
    }
    for (int k = 0; k <= l.nstate; k++)
        out[k] = *in_type(g, n, 0);
    for (int k = 0; k < l.nscalar; k++)
        out[1 + l.nstate + k] = *in_type(g, n, 2 + l.nstate + k);
    return 1 + l.nstate + l.nscalar;
}

/* With apply == 0: every output is its input state unchanged; returns 1. */
static int update_skipped(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    UpdLayout l = upd_layout(n);
    if (!l.apply || in[n->nin - 1][0] != 0)
        return 0;
    int64_t count = shape_numel(in_shape(g, n, 0));
    for (int64_t i = 0; i < count; i++) {
        out[0][i] = in[0][i];
        for (int k = 0; k < l.nstate; k++)
            out[1 + k][i] = in[2 + k][i];
    }
    for (int k = 0; k < l.nscalar; k++)
        out[1 + l.nstate + k][0] = in[2 + l.nstate + k][0];
    return 1;
}

/* With an `apply` input (the last): the new state where apply != 0, else
 * the state unchanged. */
static int applied(Sx *s, const Node *n, int fresh, int old)
{
    return upd_layout(n).apply ? sx_select(s, sx_in(s, n->nin - 1), fresh, old) : fresh;
}

/* a - b */
static int sx_minus(Sx *s, int a, int b) { return sx_add(s, a, sx_mul(s, sx_const(s, -1), b)); }

/* caution 2's input: the mask's mean, the last before apply */
static int caution_mean(Sx *s, const Node *n) { return sx_in(s, n->nin - 1 - upd_layout(n).apply); }

/* caution 1: the op's one output, the mask of direction u against g; returns 1 */
static int caution_masked(Sx *s, const Node *n, int u, int g)
{
    if (caution_mode(n) != 1)
        return 0;
    s->out[0] = sx_lt(s, sx_const(s, 0), sx_mul(s, u, g));
    return 1;
}

/* direction u as caution 2 takes it (fx_cautious), else u */
static int cautious(Sx *s, const Node *n, int u, int g)
{
    return caution_mode(n) == 2 ? fx_cautious(s, u, g, caution_mean(s, n)) : u;
}

/* p * (1 - lr * wd): decoupled weight decay, torch's param.mul_(1 - lr * wd) */
static int decayed(Sx *s, int p, int lr, double wd)
{
    return wd == 0 ? p : sx_mul(s, p, sx_minus(s, sx_const(s, 1), sx_mul(s, lr, sx_const(s, wd))));
}

/* The lr decoupled weight decay takes: lr, or timm's corrected lr^2 / max_lr. */
static int decay_lr(Sx *s, int lr, double max_lr)
{
    return max_lr > 0 ? sx_div(s, sx_mul(s, lr, lr), sx_const(s, max_lr)) : lr;
}

static void sgd_update_scalar(const Node *n, Sx *s)
{
    int dec = (int)n->iattr[1], p = sx_in(s, 0), g = sx_in(s, 1), buf = sx_in(s, 2), lr = sx_in(s, 3), p1, buf1;
    int pd = dec ? decayed(s, p, decay_lr(s, lr, n->fattr[2]), n->fattr[1]) : p;
    fx_sgd(s, pd, g, buf, lr, n->fattr[0], dec ? 0 : n->fattr[1], (int)n->iattr[0], &p1, &buf1);
    if (caution_mode(n)) {
        int u = fx_sgd_dir(s, g, buf1, n->fattr[0], (int)n->iattr[0]);
        if (caution_masked(s, n, u, g))
            return;
        p1 = sx_minus(s, pd, sx_mul(s, lr, cautious(s, n, u, g)));
    }
    s->out[0] = applied(s, n, p1, p);
    s->out[1] = applied(s, n, buf1, buf);
}

const OpDef op_sgd_update = {.name = "sgd_update", .min_in = 4, .max_in = 6,
                             .iattr = {"nesterov", "decoupled", "caution"},
                             .fattr = {"momentum", "weight_decay", "max_lr"}, .infer = infer_update, .ref = sx_ref,
                             .fusion = OP_ELEMENTWISE, .scalar = sgd_update_scalar, .batch_from = 3,
                             .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static void adamw_update_scalar(const Node *n, Sx *s)
{
    double b1 = n->fattr[0], b2 = n->fattr[1];
    int rule = (int)n->iattr[0], p = sx_in(s, 0), m = sx_in(s, 2), v = sx_in(s, 3), p1, m1, v1;
    int t = sx_add(s, sx_in(s, 5), sx_const(s, 1));
    int rect = rule == 2 ? fx_radam_rect(s, b2, t) : 0; /* read by rule 2 alone */
    int lr = sx_in(s, 4), c = caution_mode(n);
    fx_adam(s, p, sx_in(s, 1), m, v, lr, decay_lr(s, lr, n->fattr[4]), fx_bias_correction(s, b1, t),
            fx_bias_correction(s, b2, t), rect, rule, b1, b2, n->fattr[2], n->fattr[3], c == 2,
            c == 2 ? caution_mean(s, n) : 0, &p1, &m1, &v1);
    s->f64 = 1; /* torch takes the bias corrections in double */
    if (caution_masked(s, n, m1, sx_in(s, 1)))
        return;
    s->out[0] = applied(s, n, p1, p);
    s->out[1] = applied(s, n, m1, m);
    s->out[2] = applied(s, n, v1, v);
}

const OpDef op_adamw_update = {.name = "adamw_update", .min_in = 6, .max_in = 8, .iattr = {"rule", "caution"},
                               .fattr = {"beta1", "beta2", "eps", "weight_decay", "max_lr"}, .infer = infer_update,
                               .ref = sx_ref, .fusion = OP_ELEMENTWISE, .scalar = adamw_update_scalar,
                               .batch_from = 4, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static void nadam_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double lr = in[5][0], t = in[6][0] + 1, b1 = n->fattr[0], b2 = n->fattr[1], eps = n->fattr[2];
    double wd = n->fattr[3], bc2 = 1 - pow(b2, t), decay = 4e-3;
    double mu = b1 * (1 - 0.5 * pow(0.96, t * decay)), mu_next = b1 * (1 - 0.5 * pow(0.96, (t + 1) * decay));
    /* torch keeps mu_product as a float32 tensor */
    double prod = (float)(in[4][0] * mu), prod_next = n->iattr[0] ? (float)(prod * mu) * mu_next : prod * mu_next;
    if (update_skipped(g, n, in, out))
        return;
    for (int64_t i = 0; i < count; i++) {
        double p = in[0][i], g1 = in[1][i] + wd * p;
        double m = b1 * in[2][i] + (1 - b1) * g1, v = b2 * in[3][i] + (1 - b2) * g1 * g1;
        double denom = sqrt(v / bc2) + eps;
        out[0][i] = p - lr * (1 - mu) / (1 - prod) * g1 / denom - lr * mu_next / (1 - prod_next) * m / denom;
        out[1][i] = m;
        out[2][i] = v;
    }
    out[3][0] = prod;
}

const OpDef op_nadam_update = {.name = "nadam_update", .min_in = 7, .max_in = 8, .iattr = {"legacy"},
                               .fattr = {"beta1", "beta2", "eps", "weight_decay"}, .infer = infer_update,
                               .ref = nadam_update_ref, .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW,
                               .layout = OP_LAYOUT_NCHW};

/* timm's trust-ratio guard: 1 unless both norms are positive. */
static double trust_or_one(double w_norm, double u_norm, double ratio)
{
    return w_norm > 0 && u_norm > 0 ? ratio : 1;
}

static void lamb_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double lr = in[4][0], t = in[5][0] + 1, b1 = n->fattr[0], b2 = n->fattr[1], eps = n->fattr[2];
    double wd = n->fattr[3], bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t), clip = 1;
    if (n->iattr[2] && !(sqrt(in[6][0]) <= 1)) /* timm's clamp_(min=1.0): NaN stays NaN */
        clip = sqrt(in[6][0]);
    if (update_skipped(g, n, in, out))
        return;
    /* decoupled: p decays before the trust ratio reads its norm */
    int decoupled = n->iattr[3] != 0;
    double dlr = n->fattr[4] > 0 ? lr * lr / n->fattr[4] : lr, w2 = 0, u2 = 0, keep = decoupled ? 1 - dlr * wd : 1;
    for (int64_t i = 0; i < count; i++) {
        double g1 = in[1][i] / clip, p = in[0][i] * keep;
        double m = b1 * in[2][i] + (1 - b1) * g1, v = b2 * in[3][i] + (1 - b2) * g1 * g1;
        double u = m / bc1 / (sqrt(v) / sqrt(bc2) + eps) + (decoupled ? 0 : wd * p);
        out[0][i] = u; /* the update, until the trust ratio is known */
        out[1][i] = m;
        out[2][i] = v;
        w2 += p * p;
        u2 += u * u;
    }
    double ratio = 1;
    if (wd != 0 || n->iattr[1]) {
        ratio = trust_or_one(w2, u2, sqrt(w2) / sqrt(u2));
        if (n->iattr[0] && ratio > 1)
            ratio = 1;
    }
    for (int64_t i = 0; i < count; i++)
        out[0][i] = in[0][i] * keep - lr * ratio * out[0][i];
}

const OpDef op_lamb_update = {.name = "lamb_update", .min_in = 6, .max_in = 8,
                              .iattr = {"trust_clip", "always_adapt", "has_clip", "decoupled"},
                              .fattr = {"beta1", "beta2", "eps", "weight_decay", "max_lr"}, .infer = infer_update,
                              .ref = lamb_update_ref, .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW,
                              .layout = OP_LAYOUT_NCHW};

static void lars_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    double lr = in[3][0], mom = n->fattr[0], wd = n->fattr[1], coeff = n->fattr[2], eps = n->fattr[3];
    if (update_skipped(g, n, in, out))
        return;
    double ratio = 1;
    if (wd != 0 || n->iattr[2]) {
        double w2 = 0, g2 = 0;
        for (int64_t i = 0; i < count; i++) {
            w2 += in[0][i] * in[0][i];
            g2 += in[1][i] * in[1][i];
        }
        double wn = sqrt(w2), gn = sqrt(g2);
        ratio = trust_or_one(wn, gn, coeff * wn / (gn + wn * wd + eps));
        if (n->iattr[1]) /* timm's clamp(ratio / lr, max=1.0): NaN stays NaN */
            ratio = ratio / lr > 1 ? 1 : ratio / lr;
    }
    for (int64_t i = 0; i < count; i++) {
        double d = (in[1][i] + wd * in[0][i]) * ratio, buf = d;
        if (mom != 0) {
            buf = mom * in[2][i] + d;
            d = n->iattr[0] ? d + mom * buf : buf;
        }
        out[0][i] = in[0][i] - lr * d;
        out[1][i] = buf;
    }
}

const OpDef op_lars_update = {.name = "lars_update", .min_in = 4, .max_in = 5,
                              .iattr = {"nesterov", "trust_clip", "always_adapt"},
                              .fattr = {"momentum", "weight_decay", "trust_coeff", "eps"}, .infer = infer_update,
                              .ref = lars_update_ref, .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW,
                              .layout = OP_LAYOUT_NCHW};

static void rmsprop_update_scalar(const Node *n, Sx *s)
{
    double alpha = n->fattr[0], eps = n->fattr[1], wd = n->fattr[2], mom = n->fattr[3];
    int tf = (int)n->iattr[0], p = sx_in(s, 0), sq = sx_in(s, 2), buf = sx_in(s, 3), lr = sx_in(s, 4);
    int p0 = p, g1 = sx_in(s, 1);
    if (n->iattr[1]) /* decoupled: p decays before the step */
        p = decayed(s, p, decay_lr(s, lr, n->fattr[4]), wd);
    else
        g1 = sx_add(s, g1, sx_mul(s, sx_const(s, wd), p));
    int sq1 = sx_add(s, sx_mul(s, sx_const(s, alpha), sq), sx_mul(s, sx_mul(s, sx_const(s, 1 - alpha), g1), g1));
    int avg = tf ? sx_sqrt(s, sx_add(s, sq1, sx_const(s, eps))) : sx_add(s, sx_sqrt(s, sq1), sx_const(s, eps));
    int p1, buf1 = buf;
    if (mom > 0) { /* TF's form folds lr into the buffer */
        buf1 = sx_add(s, sx_mul(s, sx_const(s, mom), buf), sx_div(s, tf ? sx_mul(s, lr, g1) : g1, avg));
        if (caution_masked(s, n, buf1, g1))
            return;
        int u = cautious(s, n, buf1, g1);
        p1 = sx_minus(s, p, tf ? u : sx_mul(s, lr, u));
    } else {
        p1 = sx_minus(s, p, sx_div(s, sx_mul(s, lr, g1), avg));
    }
    s->out[0] = applied(s, n, p1, p0);
    s->out[1] = applied(s, n, sq1, sq);
    s->out[2] = applied(s, n, buf1, buf);
}

const OpDef op_rmsprop_update = {.name = "rmsprop_update", .min_in = 5, .max_in = 7,
                                 .iattr = {"tf", "decoupled", "caution"},
                                 .fattr = {"alpha", "eps", "weight_decay", "momentum", "max_lr"}, .infer = infer_update,
                                 .ref = sx_ref, .fusion = OP_ELEMENTWISE, .scalar = rmsprop_update_scalar,
                                 .batch_from = 4, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static void adagrad_update_scalar(const Node *n, Sx *s)
{
    int p = sx_in(s, 0), sum = sx_in(s, 2);
    int g1 = sx_add(s, sx_in(s, 1), sx_mul(s, sx_const(s, n->fattr[1]), p)), sum1 = sx_add(s, sum, sx_mul(s, g1, g1));
    int p1 = sx_minus(s, p, sx_div(s, sx_mul(s, sx_in(s, 3), g1), sx_add(s, sx_sqrt(s, sum1), sx_const(s, n->fattr[0]))));
    s->out[0] = applied(s, n, p1, p);
    s->out[1] = applied(s, n, sum1, sum);
}

const OpDef op_adagrad_update = {.name = "adagrad_update", .min_in = 4, .max_in = 5,
                                 .fattr = {"eps", "weight_decay"}, .infer = infer_update, .ref = sx_ref,
                                 .fusion = OP_ELEMENTWISE, .scalar = adagrad_update_scalar, .batch_from = 3,
                                 .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

/* torch's lerp(a, b, w) for a constant weight: a + w (b - a) below 0.5,
 * b - (b - a)(1 - w) from it */
static int lerp(Sx *s, int a, int b, double w)
{
    int d = sx_minus(s, b, a);
    return w < 0.5 ? sx_add(s, a, sx_mul(s, sx_const(s, w), d)) : sx_minus(s, b, sx_mul(s, d, sx_const(s, 1 - w)));
}

/* max(a, b) as torch's clamp(a, min=b) for a finite b: NaN stays NaN */
static int sx_max(Sx *s, int a, int b) { return sx_select(s, sx_lt(s, a, b), b, a); }

static void lion_update_scalar(const Node *n, Sx *s)
{
    double b1 = n->fattr[0], b2 = n->fattr[1];
    int p = sx_in(s, 0), g = sx_in(s, 1), m = sx_in(s, 2), lr = sx_in(s, 3), zero = sx_const(s, 0);
    int u = lerp(s, m, g, 1 - b1);
    /* torch's sign: 0 at 0, NaN at NaN */
    int sign = sx_select(s, sx_lt(s, zero, u), sx_const(s, 1),
                         sx_select(s, sx_lt(s, u, zero), sx_const(s, -1), sx_mul(s, u, zero)));
    if (caution_masked(s, n, sign, g))
        return;
    int pd = decayed(s, p, decay_lr(s, lr, n->fattr[3]), n->fattr[2]);
    s->out[0] = applied(s, n, sx_minus(s, pd, sx_mul(s, lr, cautious(s, n, sign, g))), p);
    s->out[1] = applied(s, n, lerp(s, m, g, 1 - b2), m);
}

const OpDef op_lion_update = {.name = "lion_update", .min_in = 4, .max_in = 6, .iattr = {"caution"},
                              .fattr = {"beta1", "beta2", "weight_decay", "max_lr"}, .infer = infer_update,
                              .ref = sx_ref, .fusion = OP_ELEMENTWISE, .scalar = lion_update_scalar, .batch_from = 3,
                              .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static void adamx_update_scalar(const Node *n, Sx *s)
{
    double b1 = n->fattr[0], b2 = n->fattr[1], eps = n->fattr[2], wd = n->fattr[3];
    int rule = (int)n->iattr[0], p = sx_in(s, 0), g = sx_in(s, 1), m = sx_in(s, 2), v = sx_in(s, 3);
    int lr = sx_in(s, 4), t = sx_add(s, sx_in(s, 5), sx_const(s, 1)), p1, m1, v1;
    int dlr = rule == 0 || rule >= 3 ? decay_lr(s, lr, n->fattr[5]) : lr; /* the decoupled rules' */
    s->f64 = 1; /* torch takes the bias corrections and ADOPT's clip in double */
    if (rule == 0) { /* NAdamW */
        p1 = decayed(s, p, dlr, wd);
        m1 = lerp(s, m, g, 1 - b1);
        v1 = sx_add(s, sx_mul(s, sx_const(s, b2), v), sx_mul(s, sx_mul(s, sx_const(s, 1 - b2), g), g));
        int denom = sx_add(s, sx_div(s, sx_sqrt(s, v1), sx_sqrt(s, fx_bias_correction(s, b2, t))), sx_const(s, eps));
        int step = sx_div(s, lr, fx_bias_correction(s, b1, t)), u = lerp(s, m1, g, 1 - b1);
        if (caution_masked(s, n, u, g))
            return;
        p1 = sx_minus(s, p1, sx_mul(s, step, sx_div(s, cautious(s, n, u, g), denom)));
    } else if (rule == 1) { /* Adamax */
        int g1 = sx_add(s, g, sx_mul(s, sx_const(s, wd), p)), ag = sx_select(s, sx_lt(s, g1, sx_const(s, 0)),
                                                                              sx_mul(s, sx_const(s, -1), g1), g1);
        m1 = sx_add(s, sx_mul(s, sx_const(s, b1), m), sx_mul(s, sx_const(s, 1 - b1), g1));
        v1 = sx_max(s, sx_add(s, ag, sx_const(s, eps)), sx_mul(s, sx_const(s, b2), v));
        p1 = sx_minus(s, p, sx_mul(s, sx_div(s, lr, fx_bias_correction(s, b1, t)), sx_div(s, m1, v1)));
    } else if (rule == 4) { /* LaProp */
        v1 = sx_add(s, sx_mul(s, sx_const(s, b2), v), sx_mul(s, sx_mul(s, sx_const(s, 1 - b2), g), g));
        int denom = sx_add(s, sx_sqrt(s, sx_div(s, v1, fx_bias_correction(s, b2, t))), sx_const(s, eps));
        m1 = sx_add(s, sx_mul(s, m, sx_const(s, b1)), sx_mul(s, sx_mul(s, lr, sx_const(s, 1 - b1)), sx_div(s, g, denom)));
        int avg = sx_in(s, 6), zero = sx_const(s, 0);
        if (caution_masked(s, n, m1, g))
            return;
        int rate = sx_select(s, sx_lt(s, zero, avg), sx_div(s, lr, avg), zero);
        p1 = sx_minus(s, p, sx_mul(s, rate, cautious(s, n, m1, g)));
        if (wd != 0) /* timm's _add_scaled_(param, param, -lr * wd), after the step */
            p1 = sx_add(s, p1, sx_mul(s, sx_mul(s, dlr, sx_const(s, -wd)), p1));
    } else { /* ADOPT */
        int dec = rule == 3, g1 = dec ? g : sx_add(s, g, sx_mul(s, sx_const(s, wd), p));
        int first = sx_lt(s, t, sx_const(s, 1.5)), gg = sx_mul(s, g1, g1);
        int ng = sx_div(s, g1, sx_max(s, sx_sqrt(s, v), sx_const(s, eps)));
        if (!n->iattr[1]) { /* clamp_(-c, c): max then min */
            int c = sx_op(s, SX_POW, sx_add(s, t, sx_const(s, -1)), sx_const(s, n->fattr[4]), 0);
            ng = sx_max(s, ng, sx_mul(s, sx_const(s, -1), c));
            ng = sx_select(s, sx_lt(s, c, ng), c, ng);
        }
        m1 = lerp(s, m, ng, 1 - b1);
        if (caution_masked(s, n, m1, g1))
            return;
        /* timm's _add_scaled_(param, param, -lr * wd) */
        int pd = dec && wd != 0 ? sx_add(s, p, sx_mul(s, sx_mul(s, dlr, sx_const(s, -wd)), p)) : p;
        p1 = sx_select(s, first, p, sx_minus(s, pd, sx_mul(s, lr, cautious(s, n, m1, g1))));
        m1 = sx_select(s, first, m, m1);
        v1 = sx_select(s, first, sx_add(s, v, gg),
                       sx_add(s, sx_mul(s, sx_const(s, b2), v), sx_mul(s, sx_const(s, 1 - b2), gg)));
    }
    s->out[0] = applied(s, n, p1, p);
    s->out[1] = applied(s, n, m1, m);
    s->out[2] = applied(s, n, v1, v);
}

const OpDef op_adamx_update = {.name = "adamx_update", .min_in = 6, .max_in = 9,
                               .iattr = {"rule", "no_clip", "caution"},
                               .fattr = {"beta1", "beta2", "eps", "weight_decay", "clip_exp", "max_lr"},
                               .infer = infer_update, .ref = sx_ref, .fusion = OP_ELEMENTWISE,
                               .scalar = adamx_update_scalar, .batch_from = 4, .amp = OP_AMP_FOLLOW,
                               .layout = OP_LAYOUT_NCHW};

static void madgrad_update_scalar(const Node *n, Sx *s)
{
    double mom = n->fattr[0], wd = n->fattr[1], eps = n->fattr[2];
    int p = sx_in(s, 0), g = sx_in(s, 1), gss = sx_in(s, 2), sum = sx_in(s, 3), x0 = sx_in(s, 4), lr = sx_in(s, 5);
    int t = sx_add(s, sx_in(s, 6), sx_const(s, 1));
    /* lamb = (lr + eps) sqrt(step), in double as timm's */
    int lamb = sx_mul(s, sx_add(s, lr, sx_const(s, eps)), sx_sqrt(s, t)), pd = p;
    if (wd != 0 && n->iattr[0])
        pd = decayed(s, p, lr, wd);
    else if (wd != 0)
        g = sx_add(s, g, sx_mul(s, sx_const(s, wd), p));
    int third = sx_const(s, 1.0 / 3), x;
    if (mom == 0)
        x = sx_add(s, pd, sx_div(s, sum, sx_add(s, sx_op(s, SX_POW, gss, third, 0), sx_const(s, eps))));
    else /* x0 is the param as the first step found it */
        x = sx_select(s, sx_lt(s, t, sx_const(s, 1.5)), p, x0);
    int gss1 = sx_add(s, gss, sx_mul(s, lamb, sx_mul(s, g, g)));
    int rms = sx_add(s, sx_op(s, SX_POW, gss1, third, 0), sx_const(s, eps));
    int sum1 = sx_add(s, sum, sx_mul(s, lamb, g)), z = sx_minus(s, x, sx_div(s, sum1, rms)), p1 = z;
    if (mom != 0) /* p.mul_(1 - ck).add_(z, alpha=ck), ck = 1 - momentum */
        p1 = sx_add(s, sx_mul(s, pd, sx_const(s, 1 - (1 - mom))), sx_mul(s, z, sx_const(s, 1 - mom)));
    s->out[0] = applied(s, n, p1, p);
    s->out[1] = applied(s, n, gss1, gss);
    s->out[2] = applied(s, n, sum1, sum);
    s->out[3] = mom == 0 ? x0 : applied(s, n, x, x0);
    s->f64 = 1;
}

const OpDef op_madgrad_update = {.name = "madgrad_update", .min_in = 7, .max_in = 8, .iattr = {"decoupled"},
                                 .fattr = {"momentum", "weight_decay", "eps"}, .infer = infer_update, .ref = sx_ref,
                                 .fusion = OP_ELEMENTWISE, .scalar = madgrad_update_scalar, .batch_from = 5,
                                 .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static void adan_update_scalar(const Node *n, Sx *s)
{
    double b1 = n->fattr[0], b2 = n->fattr[1], b3 = n->fattr[2], eps = n->fattr[3], wd = n->fattr[4];
    int p = sx_in(s, 0), g = sx_in(s, 1), m = sx_in(s, 2), d = sx_in(s, 3), v = sx_in(s, 4), pre = sx_in(s, 5);
    int lr = sx_in(s, 6), t = sx_add(s, sx_in(s, 7), sx_const(s, 1));
    int diff = sx_select(s, sx_lt(s, t, sx_const(s, 1.5)), sx_const(s, 0), sx_minus(s, g, pre));
    int m1 = lerp(s, m, g, 1 - b1);
    if (caution_masked(s, n, m1, g))
        return;
    int d1 = sx_add(s, sx_mul(s, sx_const(s, b2), d), sx_mul(s, sx_const(s, 1 - b2), diff));
    int u = sx_add(s, sx_mul(s, diff, sx_const(s, b2)), g);
    int v1 = sx_add(s, sx_mul(s, sx_const(s, b3), v), sx_mul(s, sx_const(s, 1 - b3), sx_mul(s, u, u)));
    int denom = sx_add(s, sx_div(s, sx_sqrt(s, v1), sx_sqrt(s, fx_bias_correction(s, b3, t))), sx_const(s, eps));
    int step = sx_div(s, lr, fx_bias_correction(s, b1, t));
    int step_diff = sx_div(s, sx_mul(s, lr, sx_const(s, b2)), fx_bias_correction(s, b2, t));
    int p1 = n->iattr[0] ? decayed(s, p, lr, wd) : p;
    p1 = sx_minus(s, p1, sx_mul(s, step, sx_div(s, cautious(s, n, m1, g), denom)));
    p1 = sx_minus(s, p1, sx_mul(s, step_diff, sx_div(s, d1, denom)));
    if (!n->iattr[0] && wd != 0)
        p1 = sx_div(s, p1, sx_add(s, sx_const(s, 1), sx_mul(s, lr, sx_const(s, wd))));
    s->out[0] = applied(s, n, p1, p);
    s->out[1] = applied(s, n, m1, m);
    s->out[2] = applied(s, n, d1, d);
    s->out[3] = applied(s, n, v1, v);
    s->out[4] = applied(s, n, g, pre);
    s->f64 = 1;
}

const OpDef op_adan_update = {.name = "adan_update", .min_in = 8, .max_in = 10, .iattr = {"no_prox", "caution"},
                              .fattr = {"beta1", "beta2", "beta3", "eps", "weight_decay"}, .infer = infer_update,
                              .ref = sx_ref, .fusion = OP_ELEMENTWISE, .scalar = adan_update_scalar,
                              .batch_from = 6, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static int infer_all_finite(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err))
        return -1;
    out[0] = (CtType){{0}, CT_F32};
    return 1;
}

static void all_finite_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    int64_t count = shape_numel(in_shape(g, n, 0));
    out[0][0] = 1;
    for (int64_t i = 0; i < count; i++)
        if (!isfinite(in[0][i]))
            out[0][0] = 0;
}

const OpDef op_all_finite = {.name = "all_finite", .min_in = 1, .max_in = 1, .infer = infer_all_finite,
                             .ref = all_finite_ref, .fusion = OP_REDUCTION, .amp = OP_AMP_FOLLOW,
                             .layout = OP_LAYOUT_NCHW};

static int infer_grad_accumulate(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_float(g, n, 0, -1, err) || require_shape(g, n, 1, in_shape(g, n, 0), err) ||
        require_shape(g, n, 2, &(CtShape){0}, err))
        return -1;
    if (in_type(g, n, 1)->dtype != in_type(g, n, 0)->dtype || !ct_dtype_is_float(in_type(g, n, 2)->dtype))
        return ct_fail(err, "grad_accumulate: the gradient must have the accumulator's dtype, update a float scalar");
    out[0] = out[1] = *in_type(g, n, 0);
    return 2;
}

static void grad_accumulate_scalar(const Node *n, Sx *s)
{
    int total = sx_add(s, sx_in(s, 0), sx_in(s, 1));
    s->out[0] = total;
    s->out[1] = sx_select(s, sx_in(s, 2), sx_const(s, 0), total);
}

const OpDef op_grad_accumulate = {.name = "grad_accumulate", .min_in = 3, .max_in = 3,
                                  .infer = infer_grad_accumulate, .ref = sx_ref, .nondiff = 7, .inplace = 2,
                                  .fusion = OP_ELEMENTWISE, .scalar = grad_accumulate_scalar, .amp = OP_AMP_FOLLOW,
                                  .layout = OP_LAYOUT_NCHW};
