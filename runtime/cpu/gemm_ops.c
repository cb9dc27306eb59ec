/*
 * The cpu backend's GEMM ops, through cblas_sgemm (f32 in, f32 accumulate):
 * conv2d x [N,C,H,W] * w [O,C/groups,KH,KW] and both its gradients by
 * im2col / col2im per (sample, group), 1x1 stride-1 unpadded convs straight
 * on the activations; depthwise convs (one input and one output channel a
 * group) directly (runtime/cpu/depthwise_ops.c), 3x3 stride-1 ones by
 * Winograd's algorithm (runtime/cpu/winograd_ops.c). On channels-last
 * values, pointwise convs as one GEMM over the pixels, depthwise ones
 * directly (runtime/cpu/depthwise_nhwc.c), and Winograd's as on NCHW.
 * Linear, matmul (batched, or with a shared right matrix as one GEMM); sdpa
 * and its gradient per head.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ir/host_math.h"
#include "ir/ops/attention_geom.h"
#include "runtime/cpu/conv.h"
#include "runtime/cpu/cpu.h"

/* col [CG*KH*KW, OH*OW] (rows ld apart) from channels ch0..ch1 of the CG
 * of one sample's group at x. Each row's in-range columns are one copy
 * loop, its padding zeros. */
CPU_CLONES static void im2col(const ConvGeom *c, const float *x, float *col, int64_t ld, int64_t ch0, int64_t ch1)
{
    const int64_t *a = c->a, P = ld, sw = a[STRIDE_W];
    for (int64_t ch = ch0; ch < ch1; ch++)
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
                        for (int64_t ow = 0; ow < c->OW; ow++)
                            r[ow] = 0;
                        continue;
                    }
                    /* loops, not memset/memcpy: the pads are a few columns and
                     * small images' rows a few dozen, less than a call costs */
                    for (int64_t ow = 0; ow < lo; ow++)
                        r[ow] = 0;
                    for (int64_t ow = hi; ow < c->OW; ow++)
                        r[ow] = 0;
                    const float *src = xp + ih * c->W; /* input column ow * sw + off */
                    if (sw != 1)
                        for (int64_t ow = lo; ow < hi; ow++)
                            r[ow] = src[ow * sw + off];
                    else
                        for (int64_t ow = lo; ow < hi; ow++)
                            r[ow] = src[ow + off];
                }
            }
}

/* The adjoint of im2col: adds col's entries into dx (one sample's group),
 * channels ch0..ch1. */
CPU_CLONES static void col2im(const ConvGeom *c, const float *col, int64_t ld, float *dx, int64_t ch0, int64_t ch1)
{
    const int64_t *a = c->a, P = ld, sw = a[STRIDE_W];
    for (int64_t ch = ch0; ch < ch1; ch++)
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

static int depthwise(const ConvGeom *c) { return c->CG == 1 && c->OG == 1 && !c->pointwise; }

/* Columns a GEMM should have: per-sample GEMMs of a late stage's small
 * planes (25 to 400 columns) run far below the library's speed, so samples
 * are taken together up to about this many, at the cost of copying their
 * outputs into place. */
#define CONV_COLS 2048

/* Samples per GEMM (1: one GEMM per sample, straight on the activations). */
static int64_t conv_chunk(const ConvGeom *c)
{
    int64_t P = c->OH * c->OW, nb = (CONV_COLS + P - 1) / P;
    return nb < c->N ? nb : c->N;
}

/* col [Kc, nb*P] for samples b0..b0+nb of group gi: im2col, or for a
 * pointwise conv the activations' rows side by side. Samples split among
 * threads, or one sample's channels (a big plane is a GEMM of its own). */
static void gather_cols(const ConvGeom *c, const float *x, int64_t b0, int64_t nb, int64_t gi, float *col)
{
    int64_t P = c->OH * c->OW, ld = nb * P;
    if (nb == 1 && !c->pointwise) {
        const float *xs = x + (b0 * c->C + gi * c->CG) * c->H * c->W;
#pragma omp parallel for if (P * c->CG * c->KH * c->KW > CPU_PARALLEL_MIN)
        for (int64_t ch = 0; ch < c->CG; ch++)
            im2col(c, xs, col, ld, ch, ch + 1);
        return;
    }
#pragma omp parallel for if (nb > 1 && nb * P * c->CG * c->KH * c->KW > CPU_PARALLEL_MIN)
    for (int64_t j = 0; j < nb; j++) {
        const float *xs = x + ((b0 + j) * c->C + gi * c->CG) * c->H * c->W;
        if (!c->pointwise)
            im2col(c, xs, col + j * P, ld, 0, c->CG);
        else
            for (int64_t ch = 0; ch < c->CG; ch++)
                memcpy(col + ch * ld + j * P, xs + ch * P, sizeof *col * (size_t)P);
    }
}

/* m [rows, nb*P] <-> t's rows for samples b0..b0+nb of group gi, t being
 * [N, groups*rows, P]: to_t copies m out, else t's rows into m. */
static void move_rows(float *t, int64_t rows, int64_t groups, int64_t gi, int64_t P, int64_t b0, int64_t nb, float *m,
                      int to_t)
{
    for (int64_t j = 0; j < nb; j++)
        for (int64_t r = 0; r < rows; r++) {
            float *tr = t + ((b0 + j) * groups * rows + gi * rows + r) * P, *mr = m + r * nb * P + j * P;
            memcpy(to_t ? tr : mr, to_t ? mr : tr, sizeof *tr * (size_t)P);
        }
}

/* The geometry of a conv2d node or either gradient's, and (unless NULL)
 * which of its values are the convolution's input x and output y. */
static ConvGeom node_geom(const Graph *g, const Node *n, ValueId *xv, ValueId *yv)
{
    int data = n->op == CT_OP_conv2d_grad_input, wgrad = n->op == CT_OP_conv2d_grad_weight;
    ValueId x = data ? n->out[0] : n->in[0], y = n->op == CT_OP_conv2d ? n->out[0] : wgrad ? n->in[1] : n->in[0];
    ValueId w = wgrad ? n->out[0] : n->in[1];
    if (xv)
        *xv = x, *yv = y;
    return conv_geom(&g->values[x].type.shape, &g->values[w].type.shape, &g->values[y].type.shape, n->iattr);
}

int cpu_conv_nhwc(const Graph *g, const Node *n)
{
    if (n->op != CT_OP_conv2d && n->op != CT_OP_conv2d_grad_input && n->op != CT_OP_conv2d_grad_weight)
        return 0;
    ValueId x, y;
    ConvGeom c = node_geom(g, n, &x, &y);
    return ((c.pointwise && c.groups == 1) || depthwise(&c) || winograd_applies(&c)) && cpu_stored_nhwc(g, x) &&
           cpu_stored_nhwc(g, y);
}

/* A convolution cpu_conv_nhwc takes, on channels-last x [R, C] and y [R, O]
 * (R = N*H*W rows): pointwise, a linear over the rows, one GEMM each way;
 * depthwise, depthwise_nhwc.c's kernels; 3x3 stride 1, Winograd's, which
 * copy their activations channels-last anyway. */
static void conv_nhwc(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    ConvGeom c = node_geom(g, n, NULL, NULL);
    c.nhwc = 1;
    if (winograd_applies(&c)) {
        if (n->op == CT_OP_conv2d)
            winograd_conv(&c, in[0], in[1], n->nin == 3 ? in[2] : NULL, out[0]);
        else if (n->op == CT_OP_conv2d_grad_input)
            winograd_conv_grad_input(&c, in[0], in[1], out[0]);
        else
            winograd_conv_grad_weight(&c, in[0], in[1], out[0]);
        return;
    }
    if (depthwise(&c)) {
        if (n->op == CT_OP_conv2d)
            depthwise_nhwc(&c, in[0], in[1], n->nin == 3 ? in[2] : NULL, out[0]);
        else if (n->op == CT_OP_conv2d_grad_input)
            depthwise_nhwc_grad_input(&c, in[0], in[1], out[0]);
        else
            depthwise_nhwc_grad_weight(&c, in[0], in[1], out[0]);
        return;
    }
    int64_t O = c.O, C = c.C, R = c.N * c.H * c.W;
    if (n->op == CT_OP_conv2d_grad_input) {
        cpu_sgemm(0, 0, R, C, O, 1.0f, in[0], O, in[1], C, 0.0f, out[0], C);
    } else if (n->op == CT_OP_conv2d_grad_weight) {
        cpu_sgemm(1, 0, O, C, R, 1.0f, in[1], O, in[0], C, 0.0f, out[0], C);
    } else {
        if (n->nin == 3)
#pragma omp parallel for if (R * O > CPU_PARALLEL_MIN)
            for (int64_t r = 0; r < R; r++)
                memcpy(out[0] + r * O, in[2], (size_t)O * sizeof(float));
        cpu_sgemm(0, 1, R, O, C, 1.0f, in[0], C, in[1], C, n->nin == 3 ? 1.0f : 0.0f, out[0], O);
    }
}

void cpu_conv2d(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    if (cpu_conv_nhwc(g, n)) {
        conv_nhwc(g, n, in, out);
        return;
    }
    ConvGeom c = conv_geom(cpu_in_shape(g, n, 0), cpu_in_shape(g, n, 1), cpu_out_shape(g, n, 0), n->iattr);
    if (depthwise(&c)) {
        depthwise_conv(&c, in[0], in[1], n->nin == 3 ? in[2] : NULL, out[0]);
        return;
    }
    if (winograd_applies(&c)) {
        winograd_conv(&c, in[0], in[1], n->nin == 3 ? in[2] : NULL, out[0]);
        return;
    }
    if (stem_conv_applies(&c)) {
        stem_conv(&c, in[0], in[1], n->nin == 3 ? in[2] : NULL, NULL, out[0], NULL);
        return;
    }
    int64_t P = c.OH * c.OW, Kc = c.CG * c.KH * c.KW, nb = conv_chunk(&c);
    float *col = c.pointwise && nb == 1 ? NULL : cpu_scratch(CPU_SCRATCH_COLS, Kc * nb * P);
    float *ys = nb > 1 ? cpu_scratch(CPU_SCRATCH_ROWS, c.OG * nb * P) : NULL;
    for (int64_t b0 = 0; b0 < c.N; b0 += nb) {
        int64_t m = c.N - b0 < nb ? c.N - b0 : nb;
        for (int64_t gi = 0; gi < c.groups; gi++) {
            const float *x = in[0] + (b0 * c.C + gi * c.CG) * c.H * c.W;
            float *y = nb > 1 ? ys : out[0] + (b0 * c.O + gi * c.OG) * P;
            float beta = 0;
            if (n->nin == 3) {
                for (int64_t o = 0; o < c.OG; o++)
                    for (int64_t p = 0; p < m * P; p++)
                        y[o * m * P + p] = in[2][gi * c.OG + o];
                beta = 1;
            }
            if (col)
                gather_cols(&c, in[0], b0, m, gi, col);
            cpu_sgemm(0, 0, c.OG, m * P, Kc, 1.0f, in[1] + gi * c.OG * Kc, Kc, col ? col : x, m * P, beta, y, m * P);
            if (nb > 1)
                move_rows(out[0], c.OG, c.groups, gi, P, b0, m, ys, 1);
        }
    }
}

int cpu_conv2d_stem(const Graph *g, const Node *n)
{
    if (n->op != CT_OP_conv2d || cpu_stored_nhwc(g, n->in[0]) || cpu_stored_nhwc(g, n->out[0]))
        return 0;
    ConvGeom c = node_geom(g, n, NULL, NULL);
    return stem_conv_applies(&c);
}

void cpu_conv2d_act(const Graph *g, const Node *n, const Node *act, float *const *in, float *out, float *y)
{
    ConvGeom c = node_geom(g, n, NULL, NULL);
    stem_conv(&c, in[0], in[1], n->nin == 3 ? in[2] : NULL, act, out, y);
}

void cpu_conv2d_grad_input(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    if (cpu_conv_nhwc(g, n)) {
        conv_nhwc(g, n, in, out);
        return;
    }
    ConvGeom c = conv_geom(cpu_out_shape(g, n, 0), cpu_in_shape(g, n, 1), cpu_in_shape(g, n, 0), n->iattr);
    if (depthwise(&c)) {
        depthwise_conv_grad_input(&c, in[0], in[1], out[0]);
        return;
    }
    if (winograd_applies(&c)) {
        winograd_conv_grad_input(&c, in[0], in[1], out[0]);
        return;
    }
    int64_t P = c.OH * c.OW, Kc = c.CG * c.KH * c.KW, nb = conv_chunk(&c);
    float *col = c.pointwise && nb == 1 ? NULL : cpu_scratch(CPU_SCRATCH_COLS, Kc * nb * P);
    float *dys = nb > 1 ? cpu_scratch(CPU_SCRATCH_ROWS, c.OG * nb * P) : NULL;
    if (!c.pointwise)
        memset(out[0], 0, (size_t)(c.N * c.C * c.H * c.W) * sizeof(float));
    for (int64_t b0 = 0; b0 < c.N; b0 += nb) {
        int64_t m = c.N - b0 < nb ? c.N - b0 : nb;
        for (int64_t gi = 0; gi < c.groups; gi++) {
            const float *dy = in[0] + (b0 * c.O + gi * c.OG) * P;
            float *dx = out[0] + (b0 * c.C + gi * c.CG) * c.H * c.W;
            if (nb > 1)
                move_rows(in[0], c.OG, c.groups, gi, P, b0, m, dys, 0);
            cpu_sgemm(1, 0, Kc, m * P, c.OG, 1.0f, in[1] + gi * c.OG * Kc, Kc, nb > 1 ? dys : dy, m * P, 0.0f,
                      col ? col : dx, m * P);
            if (!col)
                continue;
            if (m == 1 && !c.pointwise) { /* one sample: its channels among the threads */
                float *dxs = out[0] + (b0 * c.C + gi * c.CG) * c.H * c.W;
#pragma omp parallel for if (P * Kc > CPU_PARALLEL_MIN)
                for (int64_t ch = 0; ch < c.CG; ch++)
                    col2im(&c, col, P, dxs, ch, ch + 1);
                continue;
            }
#pragma omp parallel for if (m > 1 && m * P * Kc > CPU_PARALLEL_MIN)
            for (int64_t j = 0; j < m; j++) {
                float *dxs = out[0] + ((b0 + j) * c.C + gi * c.CG) * c.H * c.W;
                if (!c.pointwise)
                    col2im(&c, col + j * P, m * P, dxs, 0, c.CG);
                else
                    for (int64_t ch = 0; ch < c.CG; ch++)
                        memcpy(dxs + ch * P, col + ch * m * P + j * P, sizeof *dxs * (size_t)P);
            }
        }
    }
}

void cpu_conv2d_grad_weight(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    if (cpu_conv_nhwc(g, n)) {
        conv_nhwc(g, n, in, out);
        return;
    }
    ConvGeom c = conv_geom(cpu_in_shape(g, n, 0), cpu_out_shape(g, n, 0), cpu_in_shape(g, n, 1), n->iattr);
    if (depthwise(&c)) {
        depthwise_conv_grad_weight(&c, in[0], in[1], out[0]);
        return;
    }
    if (winograd_applies(&c)) {
        winograd_conv_grad_weight(&c, in[0], in[1], out[0]);
        return;
    }
    int64_t P = c.OH * c.OW, Kc = c.CG * c.KH * c.KW, nb = conv_chunk(&c);
    float *col = c.pointwise && nb == 1 ? NULL : cpu_scratch(CPU_SCRATCH_COLS, Kc * nb * P);
    float *dys = nb > 1 ? cpu_scratch(CPU_SCRATCH_ROWS, c.OG * nb * P) : NULL;
    for (int64_t b0 = 0; b0 < c.N; b0 += nb) {
        int64_t m = c.N - b0 < nb ? c.N - b0 : nb;
        for (int64_t gi = 0; gi < c.groups; gi++) {
            const float *x = in[0] + (b0 * c.C + gi * c.CG) * c.H * c.W;
            const float *dy = in[1] + (b0 * c.O + gi * c.OG) * P;
            if (col)
                gather_cols(&c, in[0], b0, m, gi, col);
            if (nb > 1)
                move_rows(in[1], c.OG, c.groups, gi, P, b0, m, dys, 0);
            cpu_sgemm(0, 1, c.OG, Kc, m * P, 1.0f, nb > 1 ? dys : dy, m * P, col ? col : x, m * P, b0 ? 1.0f : 0.0f,
                      out[0] + gi * c.OG * Kc, Kc);
        }
    }
}

/* A linear whose weights are small runs as row blocks split among the
 * threads, a single-threaded GEMM each followed at once by its bias and
 * activation while the block is in cache (the whole GEMM first left them a
 * pass over memory each). Each block packs the weights again: cheap while
 * they sit in L2, not for a ViT-Base MLP's 9 MiB (its step 5-20% slower). A
 * block is about half an L2 of output, the blocks a multiple of the threads,
 * which take them in equal contiguous shares. */
#define LINEAR_BLOCKED_WEIGHTS 65536
#define LINEAR_BLOCK_OUT 65536
#define LINEAR_MIN_ROWS 16

/* rows r0..r1 of out = x w^T (+ bias). */
static void linear_rows(const float *x, const float *w, const float *bias, float *out, int64_t r0, int64_t r1,
                        int64_t K, int64_t N)
{
    if (bias) {
#pragma omp parallel for if (!omp_in_parallel() && (r1 - r0) * N > CPU_PARALLEL_MIN)
        for (int64_t r = r0; r < r1; r++)
            memcpy(out + r * N, bias, (size_t)N * sizeof *out);
    }
    cpu_sgemm(0, 1, r1 - r0, N, K, 1.0f, x + r0 * K, K, w, K, bias ? 1.0f : 0.0f, out + r0 * N, N);
}

void cpu_linear_act(const Graph *g, const Node *n, const Node *act, float *const *in, float *out, float *y)
{
    const CtShape *w = cpu_in_shape(g, n, 1);
    int64_t K = w->d[1], N = w->d[0], R = K ? cpu_in_numel(g, n, 0) / K : 0, T = omp_get_max_threads();
    const float *bias = n->nin == 3 ? in[2] : NULL;
    int64_t rows = N && LINEAR_BLOCK_OUT / N > LINEAR_MIN_ROWS ? LINEAR_BLOCK_OUT / N : LINEAR_MIN_ROWS;
    int64_t blocks = (R + rows - 1) / rows;
    blocks = (blocks + T - 1) / T * T;
    rows = blocks ? (R + blocks - 1) / blocks : 0;
    if (K * N > LINEAR_BLOCKED_WEIGHTS || blocks < 2 * T || rows < LINEAR_MIN_ROWS) {
        linear_rows(in[0], in[1], bias, out, 0, R, K, N);
        if (act)
            cpu_act_parallel(act, out, y, R * N);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t r0 = b * rows, r1 = r0 + rows < R ? r0 + rows : R;
        if (r0 >= r1)
            continue;
        linear_rows(in[0], in[1], bias, out, r0, r1, K, N);
        if (act)
            cpu_act_span(act, out + r0 * N, y + r0 * N, (r1 - r0) * N);
    }
}

void cpu_linear(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    cpu_linear_act(g, n, NULL, in, out[0], NULL);
}

void cpu_matmul(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *a = cpu_in_shape(g, n, 0), *b = cpu_in_shape(g, n, 1);
    int ta = (int)n->iattr[0], tb = (int)n->iattr[1];
    int64_t M, K, N;
    op_matmul_dims(g, n, &M, &K, &N);
    int64_t batch = M * K > 0 ? shape_numel(a) / (M * K) : 0;
    if (b->ndim == 2 && !ta) { /* one GEMM over all rows */
        M *= batch;
        batch = 1;
    }
    for (int64_t t = 0; t < batch; t++)
        cpu_sgemm(ta, tb, M, N, K, 1.0f, in[0] + t * M * K, ta ? M : K, in[1] + (b->ndim == 2 ? 0 : t * K * N),
                  tb ? K : N, 0.0f, out[0] + t * M * N, N);
}

/* Softmax of each row of s [rows, cols] in place. Each row's logsumexp
 * (ir/ops/attention_geom.h): with known (the forward's, which the gradient
 * reads back), the weights are exp(s - lse), no maximum or sum taken; else
 * computed, and stored to lse unless it is NULL. Exp and sum in blocks of
 * 16 columns: the last block padded with -inf (exp 0) in a local copy,
 * since the compiler's remainder loop takes a scalar exp a column, and with
 * ViT's rows of 101 (100 patches and the class token) those 5 columns cost
 * as much as the 96 vectorised ones. Sums in f32 over 16 lanes, far inside
 * the 1e-4 to ref. */
CPU_CLONES static void softmax_rows(float *s, int64_t rows, int64_t cols, const float *known, float *lse)
{
    enum { W = 16 };
    for (int64_t i = 0; i < rows; i++) {
        float *r = s + i * cols, m = -INFINITY, acc[W] = {0}, tail[W], sum = 0;
        if (known) {
            m = known[i];
        } else {
#pragma omp simd reduction(max : m)
            for (int64_t j = 0; j < cols; j++)
                m = r[j] > m ? r[j] : m;
            m = m == -INFINITY ? 0 : m;
        }
        int64_t j = 0;
        for (; j + W <= cols; j += W)
#pragma omp simd
            for (int l = 0; l < W; l++) {
                r[j + l] = ct_expf(r[j + l] - m);
                acc[l] += r[j + l];
            }
        if (j < cols) {
            for (int l = 0; l < W; l++)
                tail[l] = j + l < cols ? r[j + l] : -INFINITY;
#pragma omp simd
            for (int l = 0; l < W; l++) {
                tail[l] = ct_expf(tail[l] - m);
                acc[l] += tail[l];
            }
            for (int l = 0; j + l < cols; l++)
                r[j + l] = tail[l];
        }
        for (int l = 0; l < W; l++)
            sum += acc[l];
        if (known)
            continue;
        float inv = 1 / sum;
#pragma omp simd
        for (int64_t c = 0; c < cols; c++)
            r[c] *= inv;
        if (lse)
            lse[i] = m + logf(sum);
    }
}

/* One head's operands (ir/ops/attention_geom.h): its first elements, its
 * bias [N, M] or NULL, and its rows' strides. sdpa writes Y and the rows'
 * logsumexp L; sdpa_grad reads them as fY and fL. */
typedef struct Head {
    const float *Q, *K, *V, *A, *dY, *fY, *fL;
    float *dQ, *dK, *dV, *Y, *L;
    int64_t lq, lkv, lo;
} Head;

/* Head bh of node n: its inputs, and the outputs given (NULL for none). */
static Head head_of(const Graph *g, const Node *n, const AttnGeom *a, float *const *in, float *const *out,
                    int64_t bh)
{
    Head h = {.lq = a->q.row, .lkv = a->kv.row, .lo = a->o.row};
    int64_t q = attn_head(&a->q, a->H, bh), kv = attn_head(&a->kv, a->H, bh), o = attn_head(&a->o, a->H, bh);
    h.Q = in[0] + q, h.K = in[a->k_in] + a->k_off + kv, h.V = in[a->v_in] + a->v_off + kv;
    if (a->bias_in >= 0)
        h.A = in[a->bias_in] + attn_bias_head(cpu_in_shape(g, n, a->bias_in), a->H, bh);
    if (n->op == CT_OP_sdpa) {
        h.Y = out[0] + o, h.L = out[a->stats_out] + bh * a->N;
        return h;
    }
    h.dY = in[a->dy_in] + o, h.fY = in[a->y_in] + o, h.fL = in[a->stats_in] + bh * a->N;
    h.dQ = out[0] + q, h.dK = out[a->dk_out] + a->k_off + kv, h.dV = out[a->dv_out] + a->v_off + kv;
    return h;
}

/* P [N, M] = softmax(Q K^T * scale + A) for one head: sdpa's, storing the
 * rows' logsumexp, or sdpa_grad's, from it. */
static void attention_weights(const Head *h, int64_t N, int64_t M, int64_t D, float scale, float *P)
{
    if (h->A)
        memcpy(P, h->A, sizeof *P * (size_t)(N * M));
    cpu_sgemm(0, 1, N, M, D, scale, h->Q, h->lq, h->K, h->lkv, h->A ? 1.0f : 0.0f, P, M);
    softmax_rows(P, N, M, h->fL, h->L);
}

/* saved: NULL, or the weights [BH, N, M] to keep for the gradient. */
void cpu_sdpa_saving(const Graph *g, const Node *n, float *const *in, float *const *out, float *saved)
{
    AttnGeom a;
    attn_geom(g, n, &a);
    int64_t BH = a.B * a.H, N = a.N, M = a.M, D = a.D;
    /* heads split among threads, each with its own weights buffer */
#pragma omp parallel if (BH * N * M > CPU_PARALLEL_MIN)
    {
        float *scratch = saved ? NULL : cpu_scratch(CPU_SCRATCH_ATTN, N * M);
#pragma omp for
        for (int64_t bh = 0; bh < BH; bh++) {
            float *P = saved ? saved + bh * N * M : scratch;
            Head h = head_of(g, n, &a, in, out, bh);
            attention_weights(&h, N, M, D, (float)n->fattr[0], P);
            cpu_sgemm(0, 0, N, D, M, 1.0f, P, M, h.V, h.lkv, 0.0f, h.Y, h.lo);
        }
    }
}

void cpu_sdpa(const Graph *g, const Node *n, float *const *in, float *const *out) { cpu_sdpa_saving(g, n, in, out, NULL); }

/* dv = P^T dy; dP = dy v^T; dS = P * (dP - dy . y) (dy . y = rowsum(dP *
 * P)); dq = dS k * scale; dk = dS^T q * scale. One head h, its weights P, a
 * buffer dP [N, M], and dB: NULL, or where dS [N, M] goes (the bias's
 * gradient). */
CPU_CLONES static void sdpa_grad_head(const Head *h, int64_t N, int64_t M, int64_t D, float scale, const float *P,
                                      float *dP, float *dB)
{
    cpu_sgemm(1, 0, M, D, N, 1.0f, P, M, h->dY, h->lo, 0.0f, h->dV, h->lkv);
    cpu_sgemm(0, 1, N, M, D, 1.0f, h->dY, h->lo, h->V, h->lkv, 0.0f, dP, M);
    for (int64_t i = 0; i < N; i++) {
        const float *p = P + i * M, *dy = h->dY + i * h->lo, *y = h->fY + i * h->lo;
        float *dp = dP + i * M;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < D; d++)
            dot += (double)dy[d] * y[d];
        for (int64_t j = 0; j < M; j++) {
            float ds = p[j] * (float)(dp[j] - dot);
            if (dB)
                dB[i * M + j] = ds;
            dp[j] = ds * scale;
        }
    }
    cpu_sgemm(0, 0, N, D, M, 1.0f, dP, M, h->K, h->lkv, 0.0f, h->dQ, h->lq);
    cpu_sgemm(1, 0, M, D, N, 1.0f, dP, M, h->Q, h->lq, 0.0f, h->dK, h->lkv);
}

/* saved: NULL, or the weights [BH, N, M] its sdpa kept. */
void cpu_sdpa_grad_saved(const Graph *g, const Node *n, float *const *in, float *const *out, const float *saved)
{
    AttnGeom a;
    attn_geom(g, n, &a);
    int64_t BH = a.B * a.H, N = a.N, M = a.M, D = a.D;
#pragma omp parallel if (BH * N * M > CPU_PARALLEL_MIN)
    {
        float *scratch = saved ? NULL : cpu_scratch(CPU_SCRATCH_ATTN, N * M);
        float *dP = cpu_scratch(CPU_SCRATCH_ATTN_GRAD, N * M);
#pragma omp for
        for (int64_t bh = 0; bh < BH; bh++) {
            Head h = head_of(g, n, &a, in, out, bh);
            if (!saved)
                attention_weights(&h, N, M, D, (float)n->fattr[0], scratch);
            sdpa_grad_head(&h, N, M, D, (float)n->fattr[0], saved ? saved + bh * N * M : scratch, dP,
                           a.dbias_out >= 0 ? out[a.dbias_out] + bh * N * M : NULL);
        }
    }
}

void cpu_sdpa_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    cpu_sdpa_grad_saved(g, n, in, out, NULL);
}
