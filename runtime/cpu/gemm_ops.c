/*
 * The cpu backend's GEMM ops, through cblas_sgemm (f32 in, f32 accumulate):
 * conv2d x [N,C,H,W] * w [O,C/groups,KH,KW] and both its gradients by
 * im2col / col2im per (sample, group), 1x1 stride-1 unpadded convs straight
 * on the activations; depthwise convs (one input and one output channel a
 * group) directly, a plane at a time, as one-channel GEMMs would only add
 * the im2col copy; linear, matmul (batched, or with a shared right matrix
 * as one GEMM); sdpa and its gradient per head.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu.h"

enum { STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, GROUPS };

/* One convolution's geometry, for one group. */
typedef struct ConvGeom {
    int64_t N, C, H, W, O, CG, OG, KH, KW, OH, OW, groups;
    const int64_t *a;
    int pointwise; /* 1x1, stride 1, no padding: the input is its own column matrix */
} ConvGeom;

static ConvGeom conv_geom(const CtShape *x, const CtShape *w, const CtShape *y, const int64_t *a)
{
    ConvGeom c = {x->d[0], x->d[1], x->d[2], x->d[3], w->d[0], w->d[1], 0, w->d[2], w->d[3], y->d[2], y->d[3],
                  a[GROUPS], a, 0};
    c.OG = c.O / c.groups;
    c.pointwise = c.KH == 1 && c.KW == 1 && a[STRIDE_H] == 1 && a[STRIDE_W] == 1 && a[PAD_H] == 0 && a[PAD_W] == 0;
    return c;
}

/* The output columns ow whose input column ow * stride + off is in [0, W). */
static void valid_cols(const ConvGeom *c, int64_t off, int64_t *lo, int64_t *hi)
{
    int64_t s = c->a[STRIDE_W];
    *lo = off >= 0 ? 0 : (-off + s - 1) / s;
    *hi = c->W - 1 - off >= 0 ? (c->W - 1 - off) / s + 1 : 0;
    *hi = *hi < c->OW ? *hi : c->OW;
    *lo = *lo < *hi ? *lo : *hi;
}

/* col [CG*KH*KW, OH*OW] from the CG channels of one sample's group at x.
 * Each row's in-range columns are one copy (a memcpy at stride 1), its
 * padding zeros. */
static void im2col(const ConvGeom *c, const float *x, float *col)
{
    const int64_t *a = c->a, P = c->OH * c->OW, sw = a[STRIDE_W];
    for (int64_t ch = 0; ch < c->CG; ch++)
        for (int64_t kh = 0; kh < c->KH; kh++)
            for (int64_t kw = 0; kw < c->KW; kw++) {
                float *row = col + ((ch * c->KH + kh) * c->KW + kw) * P;
                const float *xp = x + ch * c->H * c->W;
                int64_t off = kw * a[DIL_W] - a[PAD_W], lo, hi;
                valid_cols(c, off, &lo, &hi);
                for (int64_t oh = 0; oh < c->OH; oh++) {
                    int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
                    float *r = row + oh * c->OW;
                    if (ih < 0 || ih >= c->H) {
                        memset(r, 0, (size_t)c->OW * sizeof *r);
                        continue;
                    }
                    memset(r, 0, (size_t)lo * sizeof *r);
                    memset(r + hi, 0, (size_t)(c->OW - hi) * sizeof *r);
                    const float *src = xp + ih * c->W; /* input column ow * sw + off */
                    if (sw != 1)
                        for (int64_t ow = lo; ow < hi; ow++)
                            r[ow] = src[ow * sw + off];
                    else if (hi > lo)
                        memcpy(r + lo, src + lo + off, (size_t)(hi - lo) * sizeof *r);
                }
            }
}

/* The adjoint of im2col: adds col's entries into dx (one sample's group). */
static void col2im(const ConvGeom *c, const float *col, float *dx)
{
    const int64_t *a = c->a, P = c->OH * c->OW, sw = a[STRIDE_W];
    for (int64_t ch = 0; ch < c->CG; ch++)
        for (int64_t kh = 0; kh < c->KH; kh++)
            for (int64_t kw = 0; kw < c->KW; kw++) {
                const float *row = col + ((ch * c->KH + kh) * c->KW + kw) * P;
                float *xp = dx + ch * c->H * c->W;
                int64_t off = kw * a[DIL_W] - a[PAD_W], lo, hi;
                valid_cols(c, off, &lo, &hi);
                for (int64_t oh = 0; oh < c->OH; oh++) {
                    int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
                    if (ih < 0 || ih >= c->H)
                        continue;
                    const float *r = row + oh * c->OW;
                    float *dst = xp + ih * c->W;
                    if (sw == 1 && hi > lo) {
                        float *restrict d = dst + lo + off;
                        const float *restrict q = r + lo;
                        for (int64_t j = 0; j < hi - lo; j++)
                            d[j] += q[j];
                    } else if (sw != 1) {
                        for (int64_t ow = lo; ow < hi; ow++)
                            dst[ow * sw + off] += r[ow];
                    }
                }
            }
}

/* Depthwise plane kernels: x, dx [H, W]; y, dy [OH, OW]; w, dw [KH, KW].
 * mode 0: y += w (*) x; 1: dx += w (*)^T dy; 2: dw += dy . x per tap. */
static void depthwise_plane(const ConvGeom *c, int mode, const float *w, float *dw, float *x, float *y)
{
    const int64_t *a = c->a, sw = a[STRIDE_W];
    for (int64_t kh = 0; kh < c->KH; kh++)
        for (int64_t kw = 0; kw < c->KW; kw++) {
            int64_t off = kw * a[DIL_W] - a[PAD_W], lo, hi;
            valid_cols(c, off, &lo, &hi);
            float wv = mode == 2 ? 0 : w[kh * c->KW + kw];
            double acc = 0;
            for (int64_t oh = 0; oh < c->OH; oh++) {
                int64_t ih = oh * a[STRIDE_H] - a[PAD_H] + kh * a[DIL_H];
                if (ih < 0 || ih >= c->H)
                    continue;
                int64_t base = ih * c->W + off; /* x's index of output column 0 (before lo: out of the row) */
                float *yr = y + oh * c->OW;
                if (sw == 1) { /* contiguous rows: loops the compiler vectorises */
                    float *restrict xs = x + base + lo, *restrict ys = yr + lo;
                    int64_t len = hi - lo;
                    if (mode == 0)
                        for (int64_t j = 0; j < len; j++)
                            ys[j] += wv * xs[j];
                    else if (mode == 1)
                        for (int64_t j = 0; j < len; j++)
                            xs[j] += wv * ys[j];
                    else { /* eight partial sums: a dot product the compiler may vectorise */
                        float part[8] = {0};
                        int64_t j = 0;
                        for (; j + 8 <= len; j += 8)
                            for (int q = 0; q < 8; q++)
                                part[q] += ys[j + q] * xs[j + q];
                        for (; j < len; j++)
                            part[0] += ys[j] * xs[j];
                        for (int q = 0; q < 8; q++)
                            acc += part[q];
                    }
                } else if (mode == 0) {
                    for (int64_t ow = lo; ow < hi; ow++)
                        yr[ow] += wv * x[base + ow * sw];
                } else if (mode == 1) {
                    for (int64_t ow = lo; ow < hi; ow++)
                        x[base + ow * sw] += wv * yr[ow];
                } else {
                    float part = 0;
                    for (int64_t ow = lo; ow < hi; ow++)
                        part += yr[ow] * x[base + ow * sw];
                    acc += part;
                }
            }
            if (mode == 2)
                dw[kh * c->KW + kw] += (float)acc;
        }
}

static int depthwise(const ConvGeom *c) { return c->CG == 1 && c->OG == 1 && !c->pointwise; }

void cpu_conv2d(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    ConvGeom c = conv_geom(cpu_in_shape(g, n, 0), cpu_in_shape(g, n, 1), cpu_out_shape(g, n, 0), n->iattr);
    if (depthwise(&c)) {
        int64_t P = c.OH * c.OW, K = c.KH * c.KW;
        for (int64_t b = 0; b < c.N; b++)
            for (int64_t ch = 0; ch < c.C; ch++) {
                float *y = out[0] + (b * c.C + ch) * P, bias = n->nin == 3 ? in[2][ch] : 0;
                for (int64_t p = 0; p < P; p++)
                    y[p] = bias;
                depthwise_plane(&c, 0, in[1] + ch * K, NULL, in[0] + (b * c.C + ch) * c.H * c.W, y);
            }
        return;
    }
    int64_t P = c.OH * c.OW, Kc = c.CG * c.KH * c.KW;
    float *col = c.pointwise ? NULL : cpu_floats(Kc * P);
    for (int64_t b = 0; b < c.N; b++)
        for (int64_t gi = 0; gi < c.groups; gi++) {
            const float *x = in[0] + (b * c.C + gi * c.CG) * c.H * c.W;
            float *y = out[0] + (b * c.O + gi * c.OG) * P;
            float beta = 0;
            if (n->nin == 3) {
                for (int64_t o = 0; o < c.OG; o++)
                    for (int64_t p = 0; p < P; p++)
                        y[o * P + p] = in[2][gi * c.OG + o];
                beta = 1;
            }
            if (!c.pointwise)
                im2col(&c, x, col);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c.OG, (int)P, (int)Kc, 1.0f,
                        in[1] + gi * c.OG * Kc, (int)Kc, c.pointwise ? x : col, (int)P, beta, y, (int)P);
        }
    free(col);
}

void cpu_conv2d_grad_input(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    ConvGeom c = conv_geom(cpu_out_shape(g, n, 0), cpu_in_shape(g, n, 1), cpu_in_shape(g, n, 0), n->iattr);
    if (depthwise(&c)) {
        int64_t P = c.OH * c.OW, K = c.KH * c.KW;
        memset(out[0], 0, (size_t)(c.N * c.C * c.H * c.W) * sizeof(float));
        for (int64_t b = 0; b < c.N; b++)
            for (int64_t ch = 0; ch < c.C; ch++)
                depthwise_plane(&c, 1, in[1] + ch * K, NULL, out[0] + (b * c.C + ch) * c.H * c.W,
                                in[0] + (b * c.C + ch) * P);
        return;
    }
    int64_t P = c.OH * c.OW, Kc = c.CG * c.KH * c.KW;
    float *col = c.pointwise ? NULL : cpu_floats(Kc * P);
    if (!c.pointwise)
        memset(out[0], 0, (size_t)(c.N * c.C * c.H * c.W) * sizeof(float));
    for (int64_t b = 0; b < c.N; b++)
        for (int64_t gi = 0; gi < c.groups; gi++) {
            const float *dy = in[0] + (b * c.O + gi * c.OG) * P;
            float *dx = out[0] + (b * c.C + gi * c.CG) * c.H * c.W;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)Kc, (int)P, (int)c.OG, 1.0f,
                        in[1] + gi * c.OG * Kc, (int)Kc, dy, (int)P, 0.0f, c.pointwise ? dx : col, (int)P);
            if (!c.pointwise)
                col2im(&c, col, dx);
        }
    free(col);
}

void cpu_conv2d_grad_weight(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    ConvGeom c = conv_geom(cpu_in_shape(g, n, 0), cpu_out_shape(g, n, 0), cpu_in_shape(g, n, 1), n->iattr);
    if (depthwise(&c)) {
        int64_t P = c.OH * c.OW, K = c.KH * c.KW;
        memset(out[0], 0, (size_t)(c.C * K) * sizeof(float));
        for (int64_t b = 0; b < c.N; b++)
            for (int64_t ch = 0; ch < c.C; ch++)
                depthwise_plane(&c, 2, NULL, out[0] + ch * K, in[0] + (b * c.C + ch) * c.H * c.W,
                                in[1] + (b * c.C + ch) * P);
        return;
    }
    int64_t P = c.OH * c.OW, Kc = c.CG * c.KH * c.KW;
    float *col = c.pointwise ? NULL : cpu_floats(Kc * P);
    for (int64_t b = 0; b < c.N; b++)
        for (int64_t gi = 0; gi < c.groups; gi++) {
            const float *x = in[0] + (b * c.C + gi * c.CG) * c.H * c.W;
            const float *dy = in[1] + (b * c.O + gi * c.OG) * P;
            if (!c.pointwise)
                im2col(&c, x, col);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c.OG, (int)Kc, (int)P, 1.0f, dy, (int)P,
                        c.pointwise ? x : col, (int)P, b ? 1.0f : 0.0f, out[0] + gi * c.OG * Kc, (int)Kc);
        }
    free(col);
}

void cpu_linear(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *w = cpu_in_shape(g, n, 1);
    int64_t K = w->d[1], N = w->d[0], R = K ? cpu_in_numel(g, n, 0) / K : 0;
    float beta = 0;
    if (n->nin == 3) {
        for (int64_t r = 0; r < R; r++)
            memcpy(out[0] + r * N, in[2], (size_t)N * sizeof(float));
        beta = 1;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)R, (int)N, (int)K, 1.0f, in[0], (int)K, in[1], (int)K,
                beta, out[0], (int)N);
}

void cpu_matmul(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *a = cpu_in_shape(g, n, 0), *b = cpu_in_shape(g, n, 1);
    int64_t M = a->d[a->ndim - 2], K = a->d[a->ndim - 1], N = b->d[b->ndim - 1];
    int64_t batch = M * K > 0 ? shape_numel(a) / (M * K) : 0;
    if (b->ndim == 2) { /* one GEMM over all rows */
        M *= batch;
        batch = 1;
    }
    for (int64_t t = 0; t < batch; t++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, in[0] + t * M * K,
                    (int)K, in[1] + t * K * N, (int)N, 0.0f, out[0] + t * M * N, (int)N);
}

/* Row-wise softmax of s [rows, cols] in place, sums in double. */
static void softmax_rows(float *s, int64_t rows, int64_t cols)
{
    for (int64_t i = 0; i < rows; i++) {
        float *r = s + i * cols, m = -INFINITY;
        double sum = 0;
        for (int64_t j = 0; j < cols; j++)
            m = r[j] > m ? r[j] : m;
        for (int64_t j = 0; j < cols; j++)
            sum += (r[j] = expf(r[j] - m));
        float inv = (float)(1 / sum);
        for (int64_t j = 0; j < cols; j++)
            r[j] *= inv;
    }
}

/* P [N, M] = softmax(Q K^T * scale) for one head. */
static void attention_weights(const float *Q, const float *K, int64_t N, int64_t M, int64_t D, float scale, float *P)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)M, (int)D, scale, Q, (int)D, K, (int)D, 0.0f,
                P, (int)M);
    softmax_rows(P, N, M);
}

void cpu_sdpa(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *q = cpu_in_shape(g, n, 0), *k = cpu_in_shape(g, n, 1);
    int64_t BH = q->d[0] * q->d[1], N = q->d[2], M = k->d[2], D = q->d[3];
    float *P = cpu_floats(N * M);
    for (int64_t h = 0; h < BH; h++) {
        attention_weights(in[0] + h * N * D, in[1] + h * M * D, N, M, D, (float)n->fattr[0], P);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, (int)D, (int)M, 1.0f, P, (int)M,
                    in[2] + h * M * D, (int)D, 0.0f, out[0] + h * N * D, (int)D);
    }
    free(P);
}

/* dv = P^T dy; dP = dy v^T; dS = P * (dP - rowsum(dP * P)) * scale;
 * dq = dS k; dk = dS^T q. */
void cpu_sdpa_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *q = cpu_in_shape(g, n, 0), *k = cpu_in_shape(g, n, 1);
    int64_t BH = q->d[0] * q->d[1], N = q->d[2], M = k->d[2], D = q->d[3];
    float scale = (float)n->fattr[0], *P = cpu_floats(N * M), *dP = cpu_floats(N * M);
    for (int64_t h = 0; h < BH; h++) {
        const float *Q = in[0] + h * N * D, *K = in[1] + h * M * D, *V = in[2] + h * M * D, *dY = in[3] + h * N * D;
        attention_weights(Q, K, N, M, D, scale, P);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)M, (int)D, (int)N, 1.0f, P, (int)M, dY, (int)D,
                    0.0f, out[2] + h * M * D, (int)D);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)M, (int)D, 1.0f, dY, (int)D, V, (int)D,
                    0.0f, dP, (int)M);
        for (int64_t i = 0; i < N; i++) {
            float *p = P + i * M, *dp = dP + i * M;
            double dot = 0;
            for (int64_t j = 0; j < M; j++)
                dot += (double)dp[j] * p[j];
            for (int64_t j = 0; j < M; j++)
                dp[j] = p[j] * (float)(dp[j] - dot) * scale;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, (int)D, (int)M, 1.0f, dP, (int)M, K, (int)D,
                    0.0f, out[0] + h * N * D, (int)D);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)M, (int)D, (int)N, 1.0f, dP, (int)M, Q, (int)D,
                    0.0f, out[1] + h * M * D, (int)D);
    }
    free(P);
    free(dP);
}
