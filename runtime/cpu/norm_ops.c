/*
 * The cpu backend's normalisations: batch_norm over x [N,C,S...] per
 * channel, layer_norm over the last dim and group_norm per sample and group
 * of channels, forward and gradient, as f32 loops with statistics and sums
 * in double (batch_norm's in one pass over a channel, about a shift; the
 * others the ref kernels' formulas), vectorised sums (several partial
 * sums: a reordering of double additions, far below f32 rounding),
 * channels, rows or planes split among OpenMP threads. layer_norm's rows
 * (a few hundred values) take their gradient's sums in f32, as torch does.
 * Synchronised batch_norm (SyncBatchNorm) sums over the ranks between
 * passes over the channels.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "ir/collective.h"
#include "runtime/cpu/cpu.h"

/* Channel c of x viewed as [N, C, S]: the sum of its values, and the sum
 * of their squared deviations from mean. */
CPU_CLONES static double channel_sum(const float *x, int64_t N, int64_t C, int64_t S, int64_t c)
{
    double sum = 0;
    for (int64_t b = 0; b < N; b++) {
        const float *p = x + (b * C + c) * S;
#pragma omp simd reduction(+ : sum)
        for (int64_t s = 0; s < S; s++)
            sum += p[s];
    }
    return sum;
}

CPU_CLONES static double channel_sqdev(const float *x, int64_t N, int64_t C, int64_t S, int64_t c, double mean)
{
    double sq = 0;
    for (int64_t b = 0; b < N; b++) {
        const float *p = x + (b * C + c) * S;
#pragma omp simd reduction(+ : sq)
        for (int64_t s = 0; s < S; s++) {
            double d = p[s] - mean;
            sq += d * d;
        }
    }
    return sq;
}

/* Channel c of x viewed as [N, C, S] (and dy, channel c's planes dys
 * apart from dy), in one pass: the sums of
 * d = x - k, of d * d and, where dy, of dy and dy * d, k being the
 * channel's first value. One pass where a mean's and then a variance's
 * read x twice (and the gradient's sums a third time): shifted by k,
 * E[d^2] - E[d]^2 does not cancel where the mean is large against the
 * spread, as it would about 0. */
typedef struct ChannelSums {
    double k, d, dd, dy, dyd;
} ChannelSums;

CPU_CLONES static ChannelSums channel_sums(const float *x, const float *dy, int64_t dys, int64_t N, int64_t C,
                                           int64_t S, int64_t c)
{
    double k = x[c * S], d = 0, dd = 0, sdy = 0, dyd = 0;
    for (int64_t b = 0; b < N; b++) {
        const float *p = x + (b * C + c) * S, *q = dy ? dy + b * dys : NULL;
        if (!q) {
#pragma omp simd reduction(+ : d, dd)
            for (int64_t s = 0; s < S; s++) {
                double v = p[s] - k;
                d += v;
                dd += v * v;
            }
            continue;
        }
#pragma omp simd reduction(+ : d, dd, sdy, dyd)
        for (int64_t s = 0; s < S; s++) {
            double v = p[s] - k;
            d += v;
            dd += v * v;
            sdy += q[s];
            dyd += (double)q[s] * v;
        }
    }
    return (ChannelSums){k, d, dd, sdy, dyd};
}

/* Mean and biased variance of the channel whose sums over cnt values are s;
 * a rounding below 0 is 0, NaN stays NaN. */
static void sums_stats(const ChannelSums *s, double cnt, double *mean, double *var)
{
    double m = s->d / cnt, v = s->dd / cnt - m * m;
    *mean = s->k + m;
    *var = v < 0 ? 0 : v;
}

/* A batch norm's y = x * scale + shift for a channel of mean and var, weight
 * w and bias b: one rounding for every kernel that computes or recomputes
 * it, so a recomputation gives the forward's y bit for bit. */
static void bn_affine(double mean, double var, double eps, float w, float b, float *scale, float *shift)
{
    double inv = 1 / sqrt(var + eps);
    *scale = (float)(inv * w);
    *shift = (float)(b - mean * inv * w);
}

/* Rows of C floats a block of a channels-last pass, about 4096 floats. */
static int64_t row_block(int64_t C) { return C >= 4096 ? 1 : 4096 / C; }

/* SyncBatchNorm's statistics over every rank's batch (ir/ops/norm.c's
 * batch_stats): a malloc'd [2C + 1], the means, the count of values a
 * channel has, the biased variances; NaN when the collective failed. The
 * channels' sums run on the threads, the collectives between them on one. */
CPU_CLONES static double *sync_stats(const float *x, int64_t N, int64_t C, int64_t S, const CtCollective *coll)
{
    double *st = malloc(sizeof *st * (size_t)(2 * C + 1)), *var = st + C + 1;
    CT_ASSERT(st != NULL);
#pragma omp parallel for if (N * C * S > CPU_PARALLEL_MIN)
    for (int64_t c = 0; c < C; c++)
        st[c] = channel_sum(x, N, C, S, c);
    st[C] = (double)(N * S);
    int failed = ct_collective_sum(coll, st, C + 1);
#pragma omp parallel for if (N * C * S > CPU_PARALLEL_MIN)
    for (int64_t c = 0; c < C; c++) {
        st[c] /= st[C];
        var[c] = channel_sqdev(x, N, C, S, c, st[c]);
    }
    failed = failed || ct_collective_sum(coll, var, C);
    for (int64_t c = 0; c < C; c++)
        var[c] = failed ? NAN : var[c] / st[C];
    for (int64_t c = 0; c <= C && failed; c++)
        st[c] = NAN;
    return st;
}

static int synced(const Node *n, const CtCollective *coll)
{
    return n->iattr[0] && n->iattr[1] && ct_collective_world(coll) > 1;
}

int cpu_batch_norm_nhwc(const Graph *g, const Node *n)
{
    int grad = n->op == CT_OP_batch_norm_grad;
    return (grad || n->op == CT_OP_batch_norm) && !n->iattr[1] && cpu_stored_nhwc(g, n->in[0]) &&
           cpu_stored_nhwc(g, n->out[0]) && (!grad || cpu_stored_nhwc(g, n->in[4]));
}

/* Channels-last x [R, C] (R = N*H*W rows) and dy (NULL: none): each
 * channel's ChannelSums about its first value, the rows split among the
 * threads, each summing whole rows into its own [4, C] doubles. */
CPU_CLONES static void rows_channel_sums(const float *x, const float *dy, int64_t R, int64_t C, ChannelSums *out)
{
    int T = omp_get_max_threads();
    double *part = calloc((size_t)(T * 4 * C), sizeof *part);
    CT_ASSERT(part != NULL);
#pragma omp parallel if (R * C > CPU_PARALLEL_MIN)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        double *d = part + (int64_t)t * 4 * C, *dd = d + C, *sdy = dd + C, *dyd = sdy + C;
        for (int64_t r = R * t / nt; r < R * (t + 1) / nt; r++) {
            const float *xr = x + r * C, *qr = dy ? dy + r * C : NULL;
            if (!qr) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++) {
                    double v = (double)xr[c] - x[c];
                    d[c] += v;
                    dd[c] += v * v;
                }
                continue;
            }
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                double v = (double)xr[c] - x[c];
                d[c] += v;
                dd[c] += v * v;
                sdy[c] += qr[c];
                dyd[c] += (double)qr[c] * v;
            }
        }
    }
    for (int64_t c = 0; c < C; c++) {
        out[c] = (ChannelSums){x[c], 0, 0, 0, 0};
        for (int t = 0; t < T; t++) {
            const double *p = part + (int64_t)t * 4 * C;
            out[c].d += p[c];
            out[c].dd += p[C + c];
            out[c].dy += p[2 * C + c];
            out[c].dyd += p[3 * C + c];
        }
    }
    free(part);
}

/* cpu_batch_norm_epilogue on channels-last x [R, C]: y = act(x * a + b
 * (+ residual)) a block of rows at a time, the activation over the block. */
CPU_CLONES static void batch_norm_nhwc(const Graph *g, const Node *n, float *const *in, float *const *out,
                                       const float *residual, const Node *act, float *y)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t C = x->d[1], R = shape_numel(x) / C;
    int training = (int)n->iattr[0];
    double momentum = n->fattr[0], eps = n->fattr[1], cnt = (double)R;
    ChannelSums *sums = training ? malloc(sizeof *sums * (size_t)C) : NULL;
    float *a = cpu_floats(2 * C), *b = a + C;
    if (training)
        rows_channel_sums(in[0], NULL, R, C, sums);
    for (int64_t c = 0; c < C; c++) {
        double mean = in[3][c], var = in[4][c];
        if (training) {
            sums_stats(&sums[c], cnt, &mean, &var);
            out[1][c] = (float)((1 - momentum) * in[3][c] + momentum * mean);
            out[2][c] = (float)((1 - momentum) * in[4][c] + momentum * var * cnt / (cnt - 1));
        }
        bn_affine(mean, var, eps, in[1][c], in[2][c], &a[c], &b[c]);
    }
    int64_t block = row_block(C);
#pragma omp parallel for if (R * C > CPU_PARALLEL_MIN)
    for (int64_t r0 = 0; r0 < R; r0 += block) {
        int64_t r1 = r0 + block < R ? r0 + block : R;
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = in[0] + r * C, *rr = residual ? residual + r * C : NULL;
            float *yr = y + r * C;
            if (rr) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++)
                    yr[c] = xr[c] * a[c] + b[c] + rr[c];
            } else {
#pragma omp simd
                for (int64_t c = 0; c < C; c++)
                    yr[c] = xr[c] * a[c] + b[c];
            }
        }
        if (act)
            cpu_act_span(act, y + r0 * C, y + r0 * C, (r1 - r0) * C);
    }
    free(a);
    free(sums);
}

CPU_CLONES void cpu_batch_norm_epilogue(const Graph *g, const Node *n, float *const *in, float *const *out,
                                        const CtCollective *coll, const float *residual, const Node *act, float *y)
{
    if (cpu_batch_norm_nhwc(g, n)) {
        batch_norm_nhwc(g, n, in, out, residual, act, y);
        return;
    }
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t N = x->d[0], C = x->d[1], S = shape_numel(x) / (N * C);
    int training = (int)n->iattr[0];
    double momentum = n->fattr[0], eps = n->fattr[1];
    double *st = synced(n, coll) ? sync_stats(in[0], N, C, S, coll) : NULL;
#pragma omp parallel for if (N * C * S > CPU_PARALLEL_MIN)
    for (int64_t c = 0; c < C; c++) {
        double mean = in[3][c], var = in[4][c];
        if (training) {
            double cnt = st ? st[C] : (double)(N * S);
            if (st) {
                mean = st[c];
                var = st[C + 1 + c];
            } else {
                ChannelSums sums = channel_sums(in[0], NULL, 0, N, C, S, c);
                sums_stats(&sums, cnt, &mean, &var);
            }
            out[1][c] = (float)((1 - momentum) * in[3][c] + momentum * mean);
            out[2][c] = (float)((1 - momentum) * in[4][c] + momentum * var * cnt / (cnt - 1));
        }
        float scale, shift;
        bn_affine(mean, var, eps, in[1][c], in[2][c], &scale, &shift);
        for (int64_t b = 0; b < N; b++) {
            const float *xp = in[0] + (b * C + c) * S, *rp = residual ? residual + (b * C + c) * S : NULL;
            float *yp = y + (b * C + c) * S;
            if (rp)
                for (int64_t s = 0; s < S; s++)
                    yp[s] = xp[s] * scale + shift + rp[s];
            else
                for (int64_t s = 0; s < S; s++)
                    yp[s] = xp[s] * scale + shift;
            if (act)
                cpu_act_span(act, yp, yp, S);
        }
    }
    free(st);
}

void cpu_batch_norm(const Graph *g, const Node *n, float *const *in, float *const *out, const CtCollective *coll)
{
    cpu_batch_norm_epilogue(g, n, in, out, coll, NULL, NULL, out[0]);
}

/* The weight's gradient (sum dy * xhat) and the bias's (sum dy) of channel
 * c from its sums s, about mean, written to out[1], out[2]. */
static void bn_grad_wb(const ChannelSums *s, double mean, double inv, int64_t c, float *const *out, double *dw,
                       double *db)
{
    *dw = (s->dyd - (mean - s->k) * s->dy) * inv;
    *db = s->dy;
    out[1][c] = (float)*dw;
    out[2][c] = (float)*db;
}

/* Channel c's dx from the sums db, dw over M values (every rank's with sync):
 * training: dx = w*inv/M * (M*dy - db - xhat*dw) = a*dy + b*x + k; eval:
 * a*dy, x left out (0 * x would be NaN where x is not finite, as torch's
 * eval dx is not). dy: channel c's first plane, the others dys apart. */
CPU_CLONES static void bn_grad_dx(const float *x, const float *dy, int64_t dys, int64_t N, int64_t C, int64_t S,
                                  int64_t c, int training, double M, double w, double mean, double inv, double dw,
                                  double db, float *dx)
{
    double a = w * inv, bx = -w * inv / M * dw * inv, k = -w * inv / M * db + w * inv / M * dw * inv * mean;
    for (int64_t b = 0; b < N; b++) {
        const float *xp = x + (b * C + c) * S, *dp = dy + b * dys;
        float *o = dx + (b * C + c) * S;
        for (int64_t s = 0; s < S; s++)
            o[s] = (float)(training ? a * dp[s] + bx * xp[s] + k : a * dp[s]);
    }
}

/* Channel c of cpu_batch_norm_grad n on NCHW values, not synchronised: in
 * its inputs, with dy as channel c's first plane and the others dys apart. */
static void bn_grad_channel(const Node *n, float *const *in, const float *dy, int64_t dys, int64_t N, int64_t C,
                            int64_t S, int64_t c, float *const *out)
{
    int training = (int)n->iattr[0];
    double mean = in[2][c], var = in[3][c], dw, db;
    ChannelSums sums = channel_sums(in[0], dy, dys, N, C, S, c);
    if (training)
        sums_stats(&sums, (double)(N * S), &mean, &var);
    double inv = 1 / sqrt(var + n->fattr[0]);
    bn_grad_wb(&sums, mean, inv, c, out, &dw, &db);
    bn_grad_dx(in[0], dy, dys, N, C, S, c, training, (double)(N * S), in[1][c], mean, inv, dw, db, out[0]);
}

/* cpu_batch_norm_grad on channels-last x and dy [R, C]. */
CPU_CLONES static void batch_norm_grad_nhwc(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t C = x->d[1], R = shape_numel(x) / C;
    int training = (int)n->iattr[0];
    double eps = n->fattr[0], M = (double)R;
    ChannelSums *sums = malloc(sizeof *sums * (size_t)C);
    double *ka = malloc(sizeof *ka * (size_t)(3 * C)), *kb = ka + C, *kk = kb + C;
    CT_ASSERT(sums && ka);
    rows_channel_sums(in[0], in[4], R, C, sums);
    for (int64_t c = 0; c < C; c++) { /* bn_grad_dx's coefficients */
        double mean = in[2][c], var = in[3][c], dw, db, w = in[1][c];
        if (training)
            sums_stats(&sums[c], M, &mean, &var);
        double inv = 1 / sqrt(var + eps);
        bn_grad_wb(&sums[c], mean, inv, c, out, &dw, &db);
        ka[c] = w * inv;
        kb[c] = training ? -w * inv / M * dw * inv : 0;
        kk[c] = training ? -w * inv / M * db + w * inv / M * dw * inv * mean : 0;
    }
#pragma omp parallel for if (R * C > CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *xr = in[0] + r * C, *dr = in[4] + r * C;
        float *o = out[0] + r * C;
        if (training) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                o[c] = (float)(ka[c] * dr[c] + kb[c] * xr[c] + kk[c]);
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                o[c] = (float)(ka[c] * dr[c]);
        }
    }
    free(ka);
    free(sums);
}

CPU_CLONES void cpu_batch_norm_grad(const Graph *g, const Node *n, float *const *in, float *const *out,
                                    const CtCollective *coll)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t N = x->d[0], C = x->d[1], S = shape_numel(x) / (N * C);
    double eps = n->fattr[0];
    if (cpu_batch_norm_nhwc(g, n)) {
        batch_norm_grad_nhwc(g, n, in, out);
        return;
    }
    if (!synced(n, coll)) { /* a channel at a time: its x and dy read twice, for the sums and dx */
#pragma omp parallel for if (N * C * S > CPU_PARALLEL_MIN)
        for (int64_t c = 0; c < C; c++)
            bn_grad_channel(n, in, in[4] + c * S, C * S, N, C, S, c, out);
        return;
    }
    /* SyncBatchNorm: dx takes the sums over all ranks (ir/ops/norm.c) */
    double *st = sync_stats(in[0], N, C, S, coll), *sums = malloc(sizeof *sums * (size_t)(2 * C));
    CT_ASSERT(sums != NULL);
#pragma omp parallel for if (N * C * S > CPU_PARALLEL_MIN)
    for (int64_t c = 0; c < C; c++) {
        ChannelSums cs = channel_sums(in[0], in[4] + c * S, C * S, N, C, S, c);
        bn_grad_wb(&cs, st[c], 1 / sqrt(st[C + 1 + c] + eps), c, out, &sums[c], &sums[C + c]);
    }
    if (ct_collective_sum(coll, sums, 2 * C))
        for (int64_t c = 0; c < 2 * C; c++)
            sums[c] = NAN;
#pragma omp parallel for if (N * C * S > CPU_PARALLEL_MIN)
    for (int64_t c = 0; c < C; c++)
        bn_grad_dx(in[0], in[4] + c * S, C * S, N, C, S, c, 1, st[C], in[1][c], st[c], 1 / sqrt(st[C + 1 + c] + eps),
                   sums[c], sums[C + c], out[0]);
    free(st);
    free(sums);
}

/* cpu_batch_norm_act_grad on channels-last values: dy = act'(x * a + b) *
 * dz (the forward's a, b) a block of rows at a time, y in the thread's
 * scratch, into dy's own memory (which may be dz's), then
 * batch_norm_grad_nhwc on it. Recomputing dy for the gradient's sums and
 * again for dx instead measured slower: the activation's gradient is
 * arithmetic-bound. */
CPU_CLONES static void batch_norm_act_grad_nhwc(const Graph *g, const Node *bn, const Node *act, const Node *n,
                                                const float *bias, float *const *in, float *dy, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t C = x->d[1], R = shape_numel(x) / C, block = row_block(C);
    ChannelSums *xs = malloc(sizeof *xs * (size_t)C);
    float *a = cpu_floats(2 * C), *b = a + C;
    CT_ASSERT(xs != NULL);
    rows_channel_sums(in[0], NULL, R, C, xs);
    for (int64_t c = 0; c < C; c++) { /* as batch_norm_nhwc's */
        double mean, var;
        sums_stats(&xs[c], (double)R, &mean, &var);
        bn_affine(mean, var, bn->fattr[1], in[1][c], bias[c], &a[c], &b[c]);
    }
#pragma omp parallel for if (R * C > CPU_PARALLEL_MIN)
    for (int64_t r0 = 0; r0 < R; r0 += block) {
        int64_t r1 = r0 + block < R ? r0 + block : R;
        float *y = cpu_scratch(CPU_SCRATCH_COLS, block * C);
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = in[0] + r * C;
            float *yr = y + (r - r0) * C;
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                yr[c] = xr[c] * a[c] + b[c];
        }
        cpu_act_grad_span(act, y, in[4] + r0 * C, dy + r0 * C, (r1 - r0) * C);
    }
    float *gin[5] = {in[0], in[1], in[2], in[3], dy};
    batch_norm_grad_nhwc(g, n, gin, out);
    free(a);
    free(xs);
}

CPU_CLONES void cpu_batch_norm_act_grad(const Graph *g, const Node *bn, const Node *act, const Node *n,
                                        const float *bias, float *const *in, float *dy, float *const *out)
{
    if (cpu_batch_norm_nhwc(g, n)) {
        batch_norm_act_grad_nhwc(g, bn, act, n, bias, in, dy, out);
        return;
    }
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t N = x->d[0], C = x->d[1], S = shape_numel(x) / (N * C);
#pragma omp parallel for if (N * C * S > CPU_PARALLEL_MIN)
    for (int64_t c = 0; c < C; c++) {
        /* the forward's y, as cpu_batch_norm_epilogue computes it, and dy = act'(y) * dz over it */
        float *dyc = cpu_scratch(CPU_SCRATCH_COLS, N * S), scale, shift;
        double mean, var;
        ChannelSums xs = channel_sums(in[0], NULL, 0, N, C, S, c);
        sums_stats(&xs, (double)(N * S), &mean, &var);
        bn_affine(mean, var, bn->fattr[1], in[1][c], bias[c], &scale, &shift);
        for (int64_t b = 0; b < N; b++) {
            const float *xp = in[0] + (b * C + c) * S;
            float *yp = dyc + b * S;
            for (int64_t s = 0; s < S; s++)
                yp[s] = xp[s] * scale + shift;
            cpu_act_grad_span(act, yp, in[4] + (b * C + c) * S, yp, S);
        }
        bn_grad_channel(n, in, dyc, S, N, C, S, c, out); /* cpu_batch_norm_grad's channel, on that dy */
    }
}

/* Mean and 1/sqrt(biased variance + eps) of each of n <= ROWS rows of D
 * values. A row's sums, then its square root and division, are a chain of
 * latencies that a short row (a ConvNeXt stage's 24 or 48 channels) does
 * not hide: the rows' sums interleave, and the square roots of all of them
 * are one vector operation. */
#define ROWS 8

CPU_CLONES static void rows_stats(const float *x, int64_t n, int64_t D, double eps, double *mean, double *inv)
{
    double var[ROWS] = {0};
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * D;
        double m = 0;
#pragma omp simd reduction(+ : m)
        for (int64_t i = 0; i < D; i++)
            m += xr[i];
        mean[r] = m / (double)D;
    }
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * D;
        double m = mean[r], v = 0;
#pragma omp simd reduction(+ : v)
        for (int64_t i = 0; i < D; i++)
            v += (xr[i] - m) * (xr[i] - m);
        var[r] = v;
    }
#pragma omp simd
    for (int64_t r = 0; r < ROWS; r++)
        inv[r] = 1 / sqrt(var[r] / (double)D + eps);
}

/* The row statistics in double, each row's elementwise part in f32 (as
 * torch computes it): half the vector work of doubles, over the short rows
 * of a ConvNeXt (96 to 768 channels) the step's layer norms ran 3x slower
 * than torch's. */
CPU_CLONES void cpu_layer_norm(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t D = x->d[x->ndim - 1], rows = shape_numel(x) / D;
    const float *w = in[1], *b = in[2];
#pragma omp parallel for if (rows * D > CPU_PARALLEL_MIN)
    for (int64_t r0 = 0; r0 < rows; r0 += ROWS) {
        int64_t nr = rows - r0 < ROWS ? rows - r0 : ROWS;
        double mean[ROWS], inv[ROWS];
        rows_stats(in[0] + r0 * D, nr, D, n->fattr[0], mean, inv);
        for (int64_t r = r0; r < r0 + nr; r++) {
            const float *xr = in[0] + r * D, m = (float)mean[r - r0], s = (float)inv[r - r0];
            float *y = out[0] + r * D;
#pragma omp simd
            for (int64_t i = 0; i < D; i++)
                y[i] = (xr[i] - m) * s * w[i] + b[i];
        }
    }
}

/* The weight and bias gradients sum over rows: each of a fixed number of
 * row chunks sums its own (whatever the thread count, so results do not
 * depend on it), then the chunks are added in order, in double. */
#define LN_CHUNKS 32

CPU_CLONES void cpu_layer_norm_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t D = x->d[x->ndim - 1], rows = shape_numel(x) / D;
    int64_t chunks = rows < LN_CHUNKS ? rows : LN_CHUNKS;
    const float *w = in[1];
    float *part = calloc((size_t)(2 * D * chunks + 1), sizeof *part);
    CT_ASSERT(part != NULL);
#pragma omp parallel for if (rows * D > CPU_PARALLEL_MIN)
    for (int64_t k = 0; k < chunks; k++) {
        float *dw = part + 2 * D * k, *db = dw + D;
        int64_t end = rows * (k + 1) / chunks;
        for (int64_t r0 = rows * k / chunks; r0 < end; r0 += ROWS) {
            int64_t nr = end - r0 < ROWS ? end - r0 : ROWS;
            double means[ROWS], invs[ROWS];
            rows_stats(in[0] + r0 * D, nr, D, n->fattr[0], means, invs);
            for (int64_t r = r0; r < r0 + nr; r++) {
                const float *xr = in[0] + r * D, *dy = in[2] + r * D;
                float mean = (float)means[r - r0], inv = (float)invs[r - r0], mg = 0, mgx = 0;
                float *dx = out[0] + r * D;
#pragma omp simd reduction(+ : mg, mgx)
                for (int64_t i = 0; i < D; i++) {
                    float xhat = (xr[i] - mean) * inv, gi = dy[i] * w[i];
                    mg += gi;
                    mgx += gi * xhat;
                    dw[i] += dy[i] * xhat;
                    db[i] += dy[i];
                }
                mg /= (float)D;
                mgx /= (float)D;
#pragma omp simd
                for (int64_t i = 0; i < D; i++)
                    dx[i] = inv * (dy[i] * w[i] - mg - (xr[i] - mean) * inv * mgx);
            }
        }
    }
    for (int64_t i = 0; i < D; i++) {
        double dw = 0, db = 0;
        for (int64_t k = 0; k < chunks; k++) {
            dw += part[2 * D * k + i];
            db += part[2 * D * k + D + i];
        }
        out[1][i] = (float)dw;
        out[2][i] = (float)db;
    }
    free(part);
}

/* group_norm's x [N, C, S...] as N * C planes of S values, a row of
 * per_group planes per sample and group. Every pass goes over the planes,
 * so one image in one group still spreads over the threads; a row's plane
 * sums are added in order, whatever the thread count. */
typedef struct GnDims {
    int64_t planes, S, C, per_group, rows;
} GnDims;

static GnDims gn_dims(const Graph *g, const Node *n)
{
    const CtShape *x = cpu_in_shape(g, n, 0);
    int64_t C = x->d[1], planes = x->d[0] * C, per_group = C / n->iattr[0], S = 1;
    for (int k = 2; k < x->ndim; k++)
        S *= x->d[k];
    return (GnDims){planes, S, C, per_group, planes / per_group};
}

/* Sum of the row's plane sums part[r * per_group ...]. */
static double gn_row_sum(const GnDims *d, const double *part, int64_t r)
{
    double sum = 0;
    for (int64_t k = 0; k < d->per_group; k++)
        sum += part[r * d->per_group + k];
    return sum;
}

/* Each row's mean and 1/sqrt(biased variance + eps) into st[2r], st[2r+1],
 * in two passes as the ref kernel; part: scratch of one double a plane. A
 * plane is channel p of x viewed as [1, planes, S]. */
CPU_CLONES static void gn_stats(const float *x, const GnDims *d, double eps, double *part, double *st)
{
    double D = (double)(d->per_group * d->S);
#pragma omp parallel for if (d->planes * d->S > CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < d->planes; p++)
        part[p] = channel_sum(x, 1, d->planes, d->S, p);
    for (int64_t r = 0; r < d->rows; r++)
        st[2 * r] = gn_row_sum(d, part, r) / D;
#pragma omp parallel for if (d->planes * d->S > CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < d->planes; p++)
        part[p] = channel_sqdev(x, 1, d->planes, d->S, p, st[2 * (p / d->per_group)]);
    for (int64_t r = 0; r < d->rows; r++)
        st[2 * r + 1] = 1 / sqrt(gn_row_sum(d, part, r) / D + eps);
}

CPU_CLONES void cpu_group_norm(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    GnDims d = gn_dims(g, n);
    double *part = malloc(sizeof *part * (size_t)(d.planes + 2 * d.rows)), *st = part + d.planes;
    CT_ASSERT(part != NULL);
    gn_stats(in[0], &d, n->fattr[0], part, st);
#pragma omp parallel for if (d.planes * d.S > CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < d.planes; p++) {
        int64_t c = p % d.C, r = p / d.per_group;
        double mean = st[2 * r], scale = st[2 * r + 1] * (n->nin > 1 ? in[1][c] : 1), shift = n->nin > 2 ? in[2][c] : 0;
        const float *xp = in[0] + p * d.S;
        float *yp = out[0] + p * d.S;
        for (int64_t s = 0; s < d.S; s++)
            yp[s] = (float)((xp[s] - mean) * scale + shift);
    }
    free(part);
}

/* Plane p's sum of dy into sdy[p] and of dy * (x - mean) into sdx[p]. */
CPU_CLONES static void gn_plane_grad_sums(const float *x, const float *dy, int64_t S, int64_t p, double mean,
                                          double *sdy, double *sdx)
{
    const float *xp = x + p * S, *dp = dy + p * S;
    double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (int64_t s = 0; s < S; s++) {
        a += dp[s];
        b += dp[s] * (xp[s] - mean);
    }
    sdy[p] = a;
    sdx[p] = b;
}

/* layer_norm_grad's formulas over a row: with g = dy * w, mg and mgx the
 * row's means of g and g * xhat, dx = inv (g - mg - xhat mgx); the weight's
 * and bias's gradients sum each channel's planes over the samples. Without
 * a weight (inputs x, dy) w is 1 and dx the only output. */
CPU_CLONES void cpu_group_norm_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    GnDims d = gn_dims(g, n);
    const float *w = n->nin == 3 ? in[1] : NULL, *dy = in[n->nin - 1];
    double D = (double)(d.per_group * d.S);
    double *sdy = malloc(sizeof *sdy * (size_t)(2 * d.planes + 4 * d.rows)), *sdx = sdy + d.planes;
    double *st = sdx + d.planes, *mg = st + 2 * d.rows; /* per row: mean, 1/std; mg, mgx */
    CT_ASSERT(sdy != NULL);
    gn_stats(in[0], &d, n->fattr[0], sdy, st);
#pragma omp parallel for if (d.planes * d.S > CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < d.planes; p++)
        gn_plane_grad_sums(in[0], dy, d.S, p, st[2 * (p / d.per_group)], sdy, sdx);
    for (int64_t r = 0; r < d.rows; r++) {
        double a = 0, b = 0;
        for (int64_t p = r * d.per_group; p < (r + 1) * d.per_group; p++) {
            a += (w ? w[p % d.C] : 1) * sdy[p];
            b += (w ? w[p % d.C] : 1) * sdx[p];
        }
        mg[2 * r] = a / D;
        mg[2 * r + 1] = b * st[2 * r + 1] / D;
    }
    for (int64_t c = 0; w && c < d.C; c++) {
        double dw = 0, db = 0;
        for (int64_t p = c; p < d.planes; p += d.C) {
            dw += sdx[p] * st[2 * (p / d.per_group) + 1];
            db += sdy[p];
        }
        out[1][c] = (float)dw;
        out[2][c] = (float)db;
    }
#pragma omp parallel for if (d.planes * d.S > CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < d.planes; p++) {
        int64_t r = p / d.per_group;
        double mean = st[2 * r], inv = st[2 * r + 1], wc = w ? w[p % d.C] : 1, m = mg[2 * r], mx = mg[2 * r + 1];
        const float *xp = in[0] + p * d.S, *dp = dy + p * d.S;
        float *o = out[0] + p * d.S;
        for (int64_t s = 0; s < d.S; s++)
            o[s] = (float)(inv * (dp[s] * wc - m - (xp[s] - mean) * inv * mx));
    }
    free(sdy);
}
