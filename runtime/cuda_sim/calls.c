/* Contract: sim_gemm and sim_conv compute what cuBLASLt and cuDNN compute
 * for a descriptor, reading and writing exactly the elements the
 * descriptor names. */
#include "runtime/cuda_sim/calls.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/tensor.h"

/* n elements of storage p as doubles (malloc'd): every operand is read
 * once this way, not element by element. */
static double *widen(const void *p, CtDType t, int64_t n)
{
    double *d = malloc(sizeof *d * (size_t)(n + 1));
    CT_ASSERT(d != NULL);
    if (p)
        elems_to_double(p, t, n, d);
    return d;
}

static void st(void *p, CtDType t, int64_t i, double v)
{
    elems_round(&v, t, 1);
    elems_from_double(&v, t, 1, (char *)p + (size_t)i * ct_dtype_size(t));
}

static double act(GemmAct a, double v)
{
    if (a == GEMM_ACT_RELU)
        return v > 0 ? v : v == v ? 0 : v;
    if (a == GEMM_ACT_GELU_TANH)
        return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    return v;
}

/* Elements from an operand's start to one past the last it reads:
 * `rows` x `cols` column-major with leading dimension ld, `batch` of them
 * `stride` apart. */
static int64_t extent(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride)
{
    return (batch - 1) * stride + (cols - 1) * ld + rows;
}

void sim_gemm(const GemmDesc *d, const void *a, const void *b, void *dst, const void *residual, void *bias,
              void *aux)
{
    double *A = widen(a, d->ab_type, d->trans_a ? extent(d->k, d->m, d->lda, d->batch, d->stride_a)
                                                : extent(d->m, d->k, d->lda, d->batch, d->stride_a));
    double *B = widen(b, d->ab_type, d->trans_b ? extent(d->n, d->k, d->ldb, d->batch, d->stride_b)
                                                : extent(d->k, d->n, d->ldb, d->batch, d->stride_b));
    double *C = residual ? widen(residual, d->d_type, extent(d->m, d->n, d->ldc, d->batch, d->stride_c)) : NULL;
    int bgrad = d->epi.bgrad >= 0;
    double *bs = bias && !bgrad ? widen(bias, d->bias_type, d->m) : NULL;
    for (int64_t t = 0; t < d->batch; t++)
        for (int64_t j = 0; j < d->n; j++)
            for (int64_t i = 0; i < d->m; i++) {
                double s = 0;
                for (int64_t l = 0; l < d->k; l++) {
                    int64_t ia = t * d->stride_a + (d->trans_a ? l + i * d->lda : i + l * d->lda);
                    int64_t ib = t * d->stride_b + (d->trans_b ? j + l * d->ldb : l + j * d->ldb);
                    s += A[ia] * B[ib];
                }
                int64_t ic = t * d->stride_c + i + j * d->ldc;
                s += (C ? C[ic] : 0) + (bs ? bs[i] : 0);
                if (aux)
                    st(aux, d->d_type, ic, s);
                st(dst, d->d_type, ic, act(d->epi.act, s));
            }
    for (int64_t j = 0; bgrad && j < d->n; j++) { /* B's column j summed over k */
        double s = 0;
        for (int64_t l = 0; l < d->k; l++)
            s += B[d->trans_b ? j + l * d->ldb : l + j * d->ldb];
        st(bias, d->bias_type, j, s);
    }
    free(A);
    free(B);
    free(C);
    free(bs);
}

/* Element offsets of [n, c, h, w] in NCHW or NHWC. */
static int64_t at4(int nhwc, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h, int64_t w)
{
    return nhwc ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

void sim_conv(const ConvDesc *c, void *x, void *w, void *y, const void *bias, const void *residual, float *sums)
{
    int64_t cg = c->c / c->groups, kg = c->k / c->groups;
    int64_t nx = c->n * c->c * c->h * c->w, nw = c->k * cg * c->r * c->s, ny = c->n * c->k * c->p * c->q;
    int fwd = c->dir == CONV_FWD;
    /* the operands the direction reads as doubles; its output summed in one */
    double *X = widen(c->dir == CONV_BWD_DATA ? NULL : x, c->x_type, nx);
    double *Wt = widen(c->dir == CONV_BWD_FILTER ? NULL : w, c->w_type, nw);
    double *Y = widen(fwd ? NULL : y, c->y_type, ny);
    double *Z = fwd && residual ? widen(residual, c->y_type, ny) : NULL;
    double *bs = fwd && bias ? widen(bias, c->bias_type, c->k) : NULL;
    double *acc = fwd ? Y : c->dir == CONV_BWD_DATA ? X : Wt;
    memset(acc, 0, sizeof *acc * (size_t)(fwd ? ny : c->dir == CONV_BWD_DATA ? nx : nw));
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t k = 0; k < c->k; k++)
            for (int64_t p = 0; p < c->p; p++)
                for (int64_t q = 0; q < c->q; q++) {
                    int64_t yi = at4(c->y_nhwc, c->k, c->p, c->q, n, k, p, q), g = k / kg;
                    double dy = fwd ? 0 : Y[yi], s = 0;
                    for (int64_t r = 0; r < c->r; r++) {
                        int64_t h = p * c->stride_h - c->pad_h + r * c->dil_h;
                        for (int64_t t = 0; t < c->s && h >= 0 && h < c->h; t++) {
                            int64_t v = q * c->stride_w - c->pad_w + t * c->dil_w;
                            if (v < 0 || v >= c->w)
                                continue;
                            /* the group's channels: a fixed stride apart in either format */
                            int64_t xi = at4(c->x_nhwc, c->c, c->h, c->w, n, g * cg, h, v);
                            int64_t wi = at4(c->w_nhwc, cg, c->r, c->s, k, 0, r, t);
                            int64_t xs = c->x_nhwc ? 1 : c->h * c->w, ws = c->w_nhwc ? 1 : c->r * c->s;
                            for (int64_t ci = 0; ci < cg; ci++, xi += xs, wi += ws) {
                                if (fwd)
                                    s += X[xi] * Wt[wi];
                                else if (c->dir == CONV_BWD_DATA)
                                    X[xi] += dy * Wt[wi];
                                else
                                    Wt[wi] += dy * X[xi];
                            }
                        }
                    }
                    if (fwd)
                        Y[yi] = act(c->epi.act, s + (Z ? Z[yi] : 0) + (bs ? bs[k] : 0));
                }
    int64_t nacc = fwd ? ny : c->dir == CONV_BWD_DATA ? nx : nw;
    CtDType t = fwd ? c->y_type : c->dir == CONV_BWD_DATA ? c->x_type : c->w_type;
    elems_round(acc, t, nacc);
    elems_from_double(acc, t, nacc, fwd ? y : c->dir == CONV_BWD_DATA ? x : w);
    for (int64_t k = 0; fwd && sums && k < c->k; k++) {
        double s = 0, sq = 0;
        for (int64_t i = 0; i < c->n * c->p * c->q; i++) {
            double v = Y[c->y_nhwc ? i * c->k + k : (i / (c->p * c->q) * c->k + k) * c->p * c->q + i % (c->p * c->q)];
            s += v;
            sq += v * v;
        }
        sums[k] = (float)s;
        sums[c->k + k] = (float)sq;
    }
    free(X);
    free(Wt);
    free(Y);
    free(Z);
    free(bs);
}
