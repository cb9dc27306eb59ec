/*
 * Optimizer updates whose rule is not elementwise: each reads norms, cosine
 * similarities or factored means over the whole parameter before any output
 * is known. Same conventions as ir/ops/optim.c (lr a runtime scalar, `step`
 * the i64 count of updates before this one, optional last input `apply`);
 * the ref kernels (the cpu backend runs them through run_via_ref) and the
 * cuda backend's library kernels (codegen/cuda/lib_kernels.h).
 *
 * sgdp_update(p, g, buf, lr), fattr momentum, weight_decay, delta, wd_ratio,
 *   eps; iattr nesterov: timm SGDP, dampening 0.
 * adamp_update(p, g, m, v, lr, step), fattr beta1, beta2, eps, weight_decay,
 *   delta, wd_ratio; iattr nesterov: timm AdamP.
 *   Both project the update of a param of >= 2 dims (timm's projection):
 *   when every |cosine similarity| of g and p over the rows of the channel
 *   view [d0, -1] is below delta / sqrt(row length), or else over the whole
 *   tensor, the update loses its component along p / (|p| + eps) of that
 *   view, and weight decay is scaled by wd_ratio.
 * adafactor_update(p, g, second moments..., [m], lr, step), fattr eps,
 *   clip_threshold, decay_rate, beta1, weight_decay; iattr dim_col,
 *   dim_row (-1: not factored), has_m: timm Adafactor with an external lr
 *   (relative_step off). Factored, the second moments are the row state
 *   (p's shape without dim_row) and the column state (without dim_col);
 *   else one tensor shaped like p.
 * adafactorbv_update(p, g, second moments..., [m], lr, step), fattr eps,
 *   clip_threshold (<= 0: none), decay_rate, momentum, weight_decay,
 *   beta2_cap, max_lr (> 0: timm's corrected_weight_decay, the decay
 *   scaled by lr / max_lr); iattr dim_col, dim_row, has_m, m_bf16, unscaled_wd,
 *   decay_offset: timm AdafactorBigVision; its row/column states keep the
 *   reduced dim as 1; with m_bf16 the momentum is kept rounded to bfloat16
 *   as timm's default momentum_dtype does.
 * muon_update(p, g, buf, lr), fattr momentum, weight_decay, eps,
 *   safety_factor, lr_scale; iattr nesterov, ns_steps, preset (0
 *   original, 1 quintic, 2 polar_express, 3 polar_express_safer): timm
 *   Muon's update of a param it orthogonalizes (>= 2 dims, conv weights
 *   flattened to [out, -1]), Newton-Schulz in bfloat16 as timm's: every
 *   matrix product rounded once to bf16 from an unrounded sum (an f32
 *   accumulator's; torch's CPU gemm for small matrices accumulates in bf16
 *   and differs). lr_scale: timm's adjust_lr_fn of the flattened shape.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

/* Second-moment and momentum tensors of an update op, and whether its
 * last input is `apply`. */
typedef struct NormLayout {
    int nstate, lr, apply, factored;
} NormLayout;

static NormLayout norm_layout(const Node *n)
{
    NormLayout l = {1, 0, 0, 0};
    switch (n->op) {
    case CT_OP_adamp_update: l.nstate = 2; break;
    case CT_OP_adafactor_update:
    case CT_OP_adafactorbv_update:
        l.factored = n->iattr[0] >= 0;
        l.nstate = (l.factored ? 2 : 1) + (n->iattr[2] != 0);
        break;
    default: break;
    }
    int step = n->op != CT_OP_sgdp_update && n->op != CT_OP_muon_update;
    l.lr = 2 + l.nstate;
    l.apply = n->nin == l.lr + 1 + step + 1;
    return l;
}

/* s with dim d removed (keep: left as 1). */
static CtShape reduced(CtShape s, int d, int keep)
{
    if (keep) {
        s.d[d] = 1;
        return s;
    }
    for (int k = d; k + 1 < s.ndim; k++)
        s.d[k] = s.d[k + 1];
    s.ndim--;
    return s;
}

static int infer_norm_update(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    NormLayout l = norm_layout(n);
    int step = n->op != CT_OP_sgdp_update && n->op != CT_OP_muon_update, base = l.lr + 1 + step;
    if (n->nin != base && n->nin != base + 1)
        return ct_fail(err, "%s takes %d inputs (+ apply), got %d", op_def(n->op)->name, base, n->nin);
    if (require_float(g, n, 0, -1, err) || require_shape(g, n, 1, in_shape(g, n, 0), err))
        return -1;
    const CtShape *ps = in_shape(g, n, 0);
    int first = 2;
    if (l.factored) {
        int dc = (int)n->iattr[0], dr = (int)n->iattr[1], keep = n->op == CT_OP_adafactorbv_update;
        if (dc >= ps->ndim || dr < 0 || dr >= ps->ndim || dc == dr || (!keep && dc > dr))
            return ct_fail(err, "%s: factored dims %d, %d of a %d-dim param", op_def(n->op)->name, dc, dr, ps->ndim);
        CtShape row = reduced(*ps, dr, keep), col = reduced(*ps, dc, keep);
        if (require_shape(g, n, 2, &row, err) || require_shape(g, n, 3, &col, err))
            return -1;
        first = 4;
    }
    for (int k = first; k < 2 + l.nstate; k++)
        if (require_shape(g, n, k, ps, err))
            return -1;
    for (int k = l.lr; k < n->nin; k++) {
        if (require_shape(g, n, k, &(CtShape){0}, err))
            return -1;
        int is_step = step && k == l.lr + 1;
        if (is_step != (in_type(g, n, k)->dtype == CT_I64))
            return ct_fail(err, is_step ? "step must be an i64 scalar" : "input %d must be a float scalar", k);
    }
    out[0] = *in_type(g, n, 0);
    for (int k = 0; k < l.nstate; k++)
        out[1 + k] = *in_type(g, n, 2 + k);
    return 1 + l.nstate;
}

/* With apply == 0: every output is its input unchanged; returns 1. */
static int norm_skipped(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    NormLayout l = norm_layout(n);
    if (!l.apply || in[n->nin - 1][0] != 0)
        return 0;
    memcpy(out[0], in[0], sizeof(double) * (size_t)shape_numel(in_shape(g, n, 0)));
    for (int k = 0; k < l.nstate; k++)
        memcpy(out[1 + k], in[2 + k], sizeof(double) * (size_t)shape_numel(in_shape(g, n, 2 + k)));
    return 1;
}

/* timm's projection of the update u (in place) of p given its gradient:
 * returns the weight-decay ratio (wd_ratio when projected, else 1). */
static double project(const CtShape *s, const double *p, const double *g, double *u, double delta, double wd_ratio,
                      double eps)
{
    int64_t count = shape_numel(s);
    if (s->ndim < 2)
        return 1;
    for (int layer = 0; layer < 2; layer++) {
        int64_t rows = layer ? 1 : s->d[0], len = count / rows;
        double limit = delta / sqrt((double)len), worst = 0;
        for (int64_t r = 0; r < rows; r++) {
            const double *pr = p + r * len, *gr = g + r * len;
            double gp = 0, gg = 0, pp = 0;
            for (int64_t i = 0; i < len; i++)
                gp += gr[i] * pr[i], gg += gr[i] * gr[i], pp += pr[i] * pr[i];
            /* torch's cosine_similarity: each norm clamped to eps */
            double cs = fabs(gp / (fmax(sqrt(gg), eps) * fmax(sqrt(pp), eps)));
            if (!(cs <= worst)) /* NaN wins, as torch's max */
                worst = cs;
        }
        if (!(worst < limit))
            continue;
        for (int64_t r = 0; r < rows; r++) {
            const double *pr = p + r * len;
            double *ur = u + r * len, pp = 0, pu = 0;
            for (int64_t i = 0; i < len; i++)
                pp += pr[i] * pr[i];
            double nrm = sqrt(pp) + eps;
            for (int64_t i = 0; i < len; i++)
                pu += pr[i] / nrm * ur[i];
            for (int64_t i = 0; i < len; i++)
                ur[i] -= pr[i] / nrm * pu;
        }
        return wd_ratio;
    }
    return 1;
}

static void sgdp_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t count = shape_numel(s);
    double lr = in[3][0], mom = n->fattr[0], wd = n->fattr[1];
    if (norm_skipped(g, n, in, out))
        return;
    for (int64_t i = 0; i < count; i++) {
        double buf = mom * in[2][i] + in[1][i];
        out[1][i] = buf;
        out[0][i] = n->iattr[0] ? in[1][i] + mom * buf : buf; /* the update, projected next */
    }
    double ratio = project(s, in[0], in[1], out[0], n->fattr[2], n->fattr[3], n->fattr[4]);
    double keep = wd != 0 ? 1 - lr * wd * ratio / (1 - mom) : 1;
    for (int64_t i = 0; i < count; i++)
        out[0][i] = in[0][i] * keep - lr * out[0][i];
}

const OpDef op_sgdp_update = {.name = "sgdp_update", .min_in = 4, .max_in = 5, .iattr = {"nesterov"},
                              .fattr = {"momentum", "weight_decay", "delta", "wd_ratio", "eps"},
                              .infer = infer_norm_update, .ref = sgdp_update_ref, .fusion = OP_LIBRARY,
                              .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static void adamp_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t count = shape_numel(s);
    double lr = in[4][0], t = in[5][0] + 1, b1 = n->fattr[0], b2 = n->fattr[1], eps = n->fattr[2];
    double wd = n->fattr[3], bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    if (norm_skipped(g, n, in, out))
        return;
    for (int64_t i = 0; i < count; i++) {
        double gi = in[1][i], m = b1 * in[2][i] + (1 - b1) * gi, v = b2 * in[3][i] + (1 - b2) * gi * gi;
        double denom = sqrt(v) / sqrt(bc2) + eps;
        out[1][i] = m;
        out[2][i] = v;
        out[0][i] = (n->iattr[0] ? b1 * m + (1 - b1) * gi : m) / denom;
    }
    double ratio = project(s, in[0], in[1], out[0], n->fattr[4], n->fattr[5], eps);
    double keep = wd > 0 ? 1 - lr * wd * ratio : 1;
    for (int64_t i = 0; i < count; i++)
        out[0][i] = in[0][i] * keep - lr / bc1 * out[0][i];
}

const OpDef op_adamp_update = {.name = "adamp_update", .min_in = 6, .max_in = 7, .iattr = {"nesterov"},
                               .fattr = {"beta1", "beta2", "eps", "weight_decay", "delta", "wd_ratio"},
                               .infer = infer_norm_update, .ref = adamp_update_ref, .fusion = OP_LIBRARY,
                               .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

/* Element i of a tensor of shape s, its index once dim d is reduced away
 * (or kept as 1: the same row-major offset). */
static int64_t drop_index(const CtShape *s, int64_t i, int d)
{
    int64_t inner = 1;
    for (int k = d + 1; k < s->ndim; k++)
        inner *= s->d[k];
    return i / (inner * s->d[d]) * inner + i % inner;
}

/* bfloat16 rounding (nearest, ties to even) of an f32 value */
static double round_bf16(double x)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u)
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* torch's lerp: a + w (b - a) */
static double lerp(double a, double b, double w) { return w < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w); }

/* Both Adafactors: the second moments (in place in out[1..]) and the
 * preconditioned, clipped update u = g / sqrt(second moment); w: the
 * weight (1 - beta2) of this step, sqeps: eps added to g^2; clip: the
 * update's RMS limit (<= 0: none). */
static void adafactor_precondition(const Graph *g, const Node *n, double *const *in, double *const *out, double w,
                                   double sqeps, double clip, double *u)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t count = shape_numel(s);
    if (n->iattr[0] < 0) {
        for (int64_t i = 0; i < count; i++) {
            double gi = in[1][i];
            out[1][i] = lerp(in[2][i], gi * gi + sqeps, w);
            u[i] = gi / sqrt(out[1][i]);
        }
    } else {
        int dc = (int)n->iattr[0], dr = (int)n->iattr[1];
        CtShape rs = reduced(*s, dr, 1), cs = reduced(*s, dc, 1), rcs = reduced(rs, dc, 1);
        int64_t nr = shape_numel(&rs), nc = shape_numel(&cs), nrc = shape_numel(&rcs);
        memset(out[1], 0, sizeof(double) * (size_t)nr);
        memset(out[2], 0, sizeof(double) * (size_t)nc);
        for (int64_t i = 0; i < count; i++) {
            double q = in[1][i] * in[1][i] + sqeps;
            out[1][drop_index(s, i, dr)] += q / (double)s->d[dr];
            out[2][drop_index(s, i, dc)] += q / (double)s->d[dc];
        }
        for (int64_t j = 0; j < nr; j++)
            out[1][j] = lerp(in[2][j], out[1][j], w);
        for (int64_t j = 0; j < nc; j++)
            out[2][j] = lerp(in[3][j], out[2][j], w);
        double *rc = calloc((size_t)nrc, sizeof(double));
        CT_ASSERT(rc != NULL);
        for (int64_t j = 0; j < nr; j++)
            rc[drop_index(&rs, j, dc)] += out[1][j] / (double)rs.d[dc];
        for (int64_t i = 0; i < count; i++) {
            int64_t r = drop_index(s, i, dr);
            double row = out[1][r] / rc[drop_index(&rs, r, dc)];
            u[i] = in[1][i] / sqrt(row) / sqrt(out[2][drop_index(s, i, dc)]);
        }
        free(rc);
    }
    if (clip > 0) {
        double sq = 0;
        for (int64_t i = 0; i < count; i++)
            sq += u[i] * u[i];
        double rms = sqrt(sq) / sqrt((double)count), by = rms / clip;
        if (!(by <= 1)) /* clamp(min=1): NaN stays NaN */
            for (int64_t i = 0; i < count; i++)
                u[i] /= by;
    }
}

static void adafactor_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    NormLayout l = norm_layout(n);
    int64_t count = shape_numel(in_shape(g, n, 0));
    double lr = in[l.lr][0], t = in[l.lr + 1][0] + 1, eps = n->fattr[0], beta1 = n->fattr[3], wd = n->fattr[4];
    if (norm_skipped(g, n, in, out))
        return;
    double beta2t = 1 - pow(t, n->fattr[2]);
    double *u = out[0]; /* the update, until the last loop */
    adafactor_precondition(g, n, in, out, 1 - beta2t, eps, n->fattr[1], u);
    int m = l.nstate; /* the momentum's output, when has_m */
    for (int64_t i = 0; i < count; i++) {
        u[i] *= lr;
        if (n->iattr[2])
            u[i] = out[m][i] = lerp(in[1 + m][i], u[i], 1 - beta1);
        double p = in[0][i];
        if (wd != 0)
            p += p * (-wd * lr);
        out[0][i] = p - u[i];
    }
}

const OpDef op_adafactor_update = {.name = "adafactor_update", .min_in = 5, .max_in = 8,
                                   .iattr = {"dim_col", "dim_row", "has_m"},
                                   .fattr = {"eps", "clip_threshold", "decay_rate", "beta1", "weight_decay"},
                                   .infer = infer_norm_update, .ref = adafactor_update_ref, .fusion = OP_LIBRARY,
                                   .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};

static void adafactorbv_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    NormLayout l = norm_layout(n);
    int64_t count = shape_numel(in_shape(g, n, 0));
    double lr = in[l.lr][0], t = in[l.lr + 1][0] + 1, mom = n->fattr[3], wd = n->fattr[4];
    if (norm_skipped(g, n, in, out))
        return;
    int64_t off = n->iattr[5];
    double decay_step = off ? fmax(t - (double)off, 1) : t;
    /* timm keeps the step as an f32 tensor: the power in f32 */
    double beta2t = fmin(n->fattr[5], 1 - (double)powf((float)decay_step, (float)-n->fattr[2]));
    double *u = out[0];
    adafactor_precondition(g, n, in, out, 1 - beta2t, n->fattr[0], n->fattr[1], u);
    int m = l.nstate;
    double max_lr = n->fattr[6], keep = 1;
    if (wd != 0 && max_lr > 0)
        keep = n->iattr[4] ? 1 - lr / max_lr * wd : 1 - lr * lr / max_lr * wd;
    else if (wd != 0)
        keep = n->iattr[4] ? 1 - wd : 1 - lr * wd;
    for (int64_t i = 0; i < count; i++) {
        if (n->iattr[2]) {
            if (n->iattr[3])
                u[i] = out[m][i] = round_bf16(lerp(in[1 + m][i], round_bf16(u[i]), 1 - mom));
            else
                u[i] = out[m][i] = lerp(in[1 + m][i], u[i], 1 - mom);
        }
        out[0][i] = in[0][i] * keep - u[i] * lr;
    }
}

const OpDef op_adafactorbv_update = {
    .name = "adafactorbv_update", .min_in = 5, .max_in = 8,
    .iattr = {"dim_col", "dim_row", "has_m", "m_bf16", "unscaled_wd", "decay_offset"},
    .fattr = {"eps", "clip_threshold", "decay_rate", "momentum", "weight_decay", "beta2_cap", "max_lr"},
    .infer = infer_norm_update, .ref = adafactorbv_update_ref, .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW,
    .layout = OP_LAYOUT_NCHW};

/* timm's Newton-Schulz coefficient presets (muon.py's _COEFFICIENTS), in
 * the order of muon_update's iattr `preset`. */
static const double ns_original[][3] = {{3.4445, -4.7750, 2.0315}};
static const double ns_quintic[][3] = {{4.0848, -6.8946, 2.9270}, {3.9505, -6.3029, 2.6377}, {3.7418, -5.5913, 2.3037},
                                       {2.8769, -3.1427, 1.2046}, {2.8366, -3.0525, 1.2012}};
static const double ns_polar[][3] = {
    {8.237312490495555, -23.157747414558198, 16.680568411445915},
    {4.082441999064835, -2.893047735332586, 0.5252849256975648},
    {3.9263479922546582, -2.8547468034765298, 0.5318022422894988},
    {3.2982187133085143, -2.424541981026706, 0.48632008358844075},
    {2.2970369434552573, -1.63662558125903, 0.4002628455953627},
    {1.8763805351440397, -1.2347896577722228, 0.35891887501668385},
    {1.8564423485617974, -1.2132449880935525, 0.3568003487825883},
    {1.8749994008682747, -1.2499988017229169, 0.3749994008546422}};
static const double ns_polar_safer[][3] = {
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.0429299351667245, -2.808917465908704, 0.5000178451051299},
    {3.8916678022926563, -2.7724841532176825, 0.5060648178503389},
    {3.285753657755658, -2.3681294933425394, 0.46449024233003117},
    {2.3005307116270983, -1.6111665557258408, 0.3833374427545273},
    {1.8631210546382593, -1.2042160621002727, 0.3421879560523383},
    {1.8382572152247512, -1.1779263289537742, 0.3396513038637379},
    {1.8749999923301852, -1.2499999836060613, 0.374999991275876}};
static const struct {
    const double (*c)[3];
    int n;
} ns_presets[] = {{ns_original, 1}, {ns_quintic, 5}, {ns_polar, 8}, {ns_polar_safer, 8}};

void op_muon_coefficients(int preset, int step, double abc[3])
{
    const double(*c)[3] = ns_presets[preset].c;
    const double *r = c[step < ns_presets[preset].n ? step : ns_presets[preset].n - 1];
    for (int k = 0; k < 3; k++)
        abc[k] = r[k];
}

/* out[m x n] = bf16(beta * c + alpha * a[m x k] b[k x n]) (bt: b given as
 * [n x k]); c may be NULL for beta 0. The products summed unrounded and
 * rounded once, as a bf16 gemm with an f32 accumulator does. */
static void gemm_bf16(int64_t m, int64_t n, int64_t k, const double *a, const double *b, int bt, double alpha,
                      const double *c, double beta, double *out)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++)
                s += a[i * k + l] * (bt ? b[j * k + l] : b[l * n + j]);
            out[i * n + j] = round_bf16(alpha * s + (c ? beta * c[i * n + j] : 0));
        }
}

/* timm's zeropower_via_newtonschulz in bfloat16 of x [rows x cols] (in
 * place): x / max(|x| * safety, eps), then the iterations on the wide
 * orientation (x transposed when rows > cols). */
static void newton_schulz(double *x, int64_t rows, int64_t cols, int steps, int preset, double eps, double safety)
{
    int64_t m = rows < cols ? rows : cols, n = rows < cols ? cols : rows, mn = m * n;
    double *buf = malloc(sizeof(double) * (size_t)(2 * mn + 2 * m * m));
    CT_ASSERT(buf != NULL);
    double *xa = buf, *xb = buf + mn, *A = xb + mn, *B = A + m * m, sq = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            double v = round_bf16(x[i * cols + j]);
            xa[rows > cols ? j * rows + i : i * cols + j] = v;
            sq += v * v;
        }
    double nrm = round_bf16(round_bf16(sqrt(sq)) * safety);
    nrm = round_bf16(nrm < eps ? eps : nrm);
    for (int64_t i = 0; i < mn; i++)
        xa[i] = round_bf16(xa[i] / nrm);
    for (int s = 0; s < steps; s++) {
        double abc[3];
        op_muon_coefficients(preset, s, abc);
        gemm_bf16(m, m, n, xa, xa, 1, 1, NULL, 0, A);      /* A = X X^T */
        gemm_bf16(m, m, m, A, A, 0, abc[2], A, abc[1], B); /* B = b A + c A A */
        gemm_bf16(m, n, m, B, xa, 0, 1, xa, abc[0], xb);   /* X = a X + B X */
        double *t = xa;
        xa = xb, xb = t;
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            x[i * cols + j] = xa[rows > cols ? j * rows + i : i * cols + j];
    free(buf);
}

static void muon_update_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t count = shape_numel(s), rows = s->d[0];
    double lr = in[3][0], mom = n->fattr[0], wd = n->fattr[1];
    if (norm_skipped(g, n, in, out))
        return;
    /* in f32 as torch's lerp: the bf16 rounding of the Newton-Schulz input
     * turns any other rounding here into whole ulps of bf16 */
    float w = (float)(1 - mom), wm = (float)mom;
    for (int64_t i = 0; i < count; i++) {
        float gi = (float)in[1][i], b = (float)in[2][i];
        float buf = w < 0.5f ? b + w * (gi - b) : gi - (gi - b) * (1 - w);
        out[1][i] = buf;
        out[0][i] = !n->iattr[0] ? buf : wm < 0.5f ? gi + wm * (buf - gi) : buf - (buf - gi) * (1 - wm);
    }
    newton_schulz(out[0], rows, count / rows, (int)n->iattr[1], (int)n->iattr[2], n->fattr[2], n->fattr[3]);
    double step = lr * n->fattr[4];
    for (int64_t i = 0; i < count; i++)
        out[0][i] = in[0][i] * (1 - lr * wd) - step * out[0][i];
}

const OpDef op_muon_update = {.name = "muon_update", .min_in = 4, .max_in = 5,
                              .iattr = {"nesterov", "ns_steps", "preset"},
                              .fattr = {"momentum", "weight_decay", "eps", "safety_factor", "lr_scale"},
                              .infer = infer_norm_update, .ref = muon_update_ref, .fusion = OP_LIBRARY,
                              .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_NCHW};
