/* Contract: the library launches of the optimizer updates with
 * whole-tensor norms or scalar state (LAMB, LARS, NAdam, SGDP, AdamP,
 * Adafactor, Adafactor-BV, Muon); the others are elementwise kernels. */
#include "codegen/cuda/lib_build.h"

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

int lib_plan_update(Builder *b, const Node *n, size_t *scratch, CtErr *err)
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
