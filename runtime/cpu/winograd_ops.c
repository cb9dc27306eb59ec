/*
 * The cpu backend's 3x3 stride-1 convolutions (one group, no dilation) by
 * Winograd's minimal filtering (Lavin and Gray, "Fast Algorithms for
 * Convolutional Neural Networks", 2015). F(m x m, 3x3) computes each m x m
 * tile of an output plane as A^T [(G g G^T) . (B^T d B)] A over the
 * (m+2) x (m+2) input patch d under it, so summed over channels the
 * convolution is (m+2)^2 GEMMs, one per point of the transformed tile,
 * [tiles, C] x [C, K], through BLAS like every convolution here. Against
 * im2col's 9 multiply-adds an output and channel pair, F(2x2, 3x3) does 4 and
 * F(4x4, 3x3) 2.25, for transforms of a few additions per element.
 *
 * The input gradient is the same convolution of dy with the kernel flipped
 * and its channel axes swapped (padding 2 - p); the weight gradient is the
 * adjoint of the forward's algebra: dU = sum over tiles (A dY A^T) . (B^T d B),
 * one GEMM a point again, then dg = G^T dU G.
 *
 * Which tile: F(4x4)'s constants (up to 8 and 1/24) give it about ten times
 * im2col's rounding error, some 1e-6 relative in f32, F(2x2)'s (0, 1, 1/2)
 * about im2col's. The forward takes F(2x2): its rounding decides which
 * activations a ReLU passes and which element a max pool picks, and on
 * test_cpu's two-sample test_resnet step F(4x4)'s flipped enough of them to
 * move the gradients by 3e-3 from the ref backend's (random noise of 1e-6 on
 * every im2col output does not). The gradients take F(4x4): their errors only
 * add, and they stay within 1e-5 of the ref backend's on that step.
 *
 * The transforms work on 16 channels at once, the SIMD lanes: activations are
 * first copied channels-last, zero-padded to whole tiles and to a multiple of
 * 16 channels, so that each of a patch's values is one contiguous load.
 * Transformed values are point-major ([points][tiles][channels]), so each
 * point's GEMM reads and writes plain matrices.
 */
#include <omp.h>
#include <string.h>

#include "runtime/cpu/conv.h"
#include "runtime/cpu/cpu.h"

enum { LANES = 16, MAX_SIDE = 6, MAX_POINTS = 36 };

/* A block's transformed inputs and GEMM results, in floats: about a core's
 * L2 cache (1 MiB on this machine's Zen 4), so that they are still there
 * when the GEMMs and the output transform read them. Whole-batch buffers
 * (tens of MB) left the transforms waiting on memory: resnet18's step was
 * 9% longer with them. */
#define WINO_BLOCK_FLOATS ((int64_t)1 << 18)
/* Tiles below which a block's GEMMs run far under the library's speed. */
#define WINO_MIN_TILES 64

/* x [N, C, H, W] (*) a 3x3 kernel -> [N, K, OH, OW], as m x m output tiles. */
typedef struct Wino {
    int64_t N, C, H, W, K, OH, OW, ph, pw;
    int nhwc;                   /* x and y stored [N, H, W, C] and [N, OH, OW, K] */
    int m, P;                   /* output tile side; points of a transformed tile, (m + 2)^2 */
    int64_t TH, TW, Cp, Kp, Wp; /* tiles down and across; lane-padded channels; padded input row */
} Wino;

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

static Wino wino_geom(int m, int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t ph, int64_t pw, int nhwc)
{
    Wino q = {.N = N, .C = C, .H = H, .W = W, .K = K, .OH = H + 2 * ph - 2, .OW = W + 2 * pw - 2, .ph = ph, .pw = pw,
              .nhwc = nhwc};
    q.m = m;
    q.P = (m + 2) * (m + 2);
    q.TH = (q.OH + m - 1) / m;
    q.TW = (q.OW + m - 1) / m;
    q.Cp = round_up(C, LANES);
    q.Kp = round_up(K, LANES);
    q.Wp = m * q.TW + 2;
    return q;
}

int winograd_applies(const ConvGeom *c)
{
    const int64_t *a = c->a;
    return c->KH == 3 && c->KW == 3 && c->groups == 1 && a[STRIDE_H] == 1 && a[STRIDE_W] == 1 && a[DIL_H] == 1 &&
           a[DIL_W] == 1 && a[PAD_H] >= 0 && a[PAD_H] <= 2 && a[PAD_W] >= 0 && a[PAD_W] <= 2 && c->C >= LANES &&
           c->O >= LANES && c->OH >= 4 && c->OW >= 4;
}

/* The 1-D transforms, on 16 lanes: o = T x for the matrices of F(2, 3)
 * (points 0, 1, -1, infinity) and F(4, 3) (0, 1, -1, 2, -2, infinity). The
 * constants of G are multiplied by, not divided by: a division costs several
 * multiplications, and the kernels' transforms would be a tenth of a
 * training step with them. */
typedef float Lanes[LANES];
enum Kind { BT, G, AT, A, GT }; /* B^T, G, A^T, A, G^T */

static inline void bt4(Lanes *o, const Lanes *d)
{
    for (int l = 0; l < LANES; l++) {
        o[0][l] = d[0][l] - d[2][l];
        o[1][l] = d[1][l] + d[2][l];
        o[2][l] = d[2][l] - d[1][l];
        o[3][l] = d[1][l] - d[3][l];
    }
}

static inline void g4(Lanes *o, const Lanes *g)
{
    for (int l = 0; l < LANES; l++) {
        o[0][l] = g[0][l];
        o[1][l] = (g[0][l] + g[1][l] + g[2][l]) * 0.5f;
        o[2][l] = (g[0][l] - g[1][l] + g[2][l]) * 0.5f;
        o[3][l] = g[2][l];
    }
}

static inline void at4(Lanes *o, const Lanes *x)
{
    for (int l = 0; l < LANES; l++) {
        o[0][l] = x[0][l] + x[1][l] + x[2][l];
        o[1][l] = x[1][l] - x[2][l] - x[3][l];
    }
}

static inline void a4(Lanes *o, const Lanes *y)
{
    for (int l = 0; l < LANES; l++) {
        o[0][l] = y[0][l];
        o[1][l] = y[0][l] + y[1][l];
        o[2][l] = y[0][l] - y[1][l];
        o[3][l] = -y[1][l];
    }
}

static inline void gt4(Lanes *o, const Lanes *v)
{
    for (int l = 0; l < LANES; l++) {
        o[0][l] = v[0][l] + (v[1][l] + v[2][l]) * 0.5f;
        o[1][l] = (v[1][l] - v[2][l]) * 0.5f;
        o[2][l] = (v[1][l] + v[2][l]) * 0.5f + v[3][l];
    }
}

static inline void bt6(Lanes *o, const Lanes *d)
{
    for (int l = 0; l < LANES; l++) {
        float d0 = d[0][l], d1 = d[1][l], d2 = d[2][l], d3 = d[3][l], d4 = d[4][l], d5 = d[5][l];
        o[0][l] = 4 * d0 - 5 * d2 + d4;
        o[1][l] = -4 * (d1 + d2) + d3 + d4;
        o[2][l] = 4 * (d1 - d2) - d3 + d4;
        o[3][l] = 2 * (d3 - d1) - d2 + d4;
        o[4][l] = 2 * (d1 - d3) - d2 + d4;
        o[5][l] = 4 * d1 - 5 * d3 + d5;
    }
}

#define C1_6 (1.0f / 6)
#define C1_12 (1.0f / 12)
#define C1_24 (1.0f / 24)

static inline void g6(Lanes *o, const Lanes *g)
{
    for (int l = 0; l < LANES; l++) {
        float g0 = g[0][l], g1 = g[1][l], g2 = g[2][l];
        o[0][l] = g0 * 0.25f;
        o[1][l] = -(g0 + g1 + g2) * C1_6;
        o[2][l] = -(g0 - g1 + g2) * C1_6;
        o[3][l] = g0 * C1_24 + g1 * C1_12 + g2 * C1_6;
        o[4][l] = g0 * C1_24 - g1 * C1_12 + g2 * C1_6;
        o[5][l] = g2;
    }
}

static inline void at6(Lanes *o, const Lanes *x)
{
    for (int l = 0; l < LANES; l++) {
        float x0 = x[0][l], x1 = x[1][l], x2 = x[2][l], x3 = x[3][l], x4 = x[4][l], x5 = x[5][l];
        o[0][l] = x0 + x1 + x2 + x3 + x4;
        o[1][l] = x1 - x2 + 2 * (x3 - x4);
        o[2][l] = x1 + x2 + 4 * (x3 + x4);
        o[3][l] = x1 - x2 + 8 * (x3 - x4) + x5;
    }
}

static inline void a6(Lanes *o, const Lanes *y)
{
    for (int l = 0; l < LANES; l++) {
        float y0 = y[0][l], y1 = y[1][l], y2 = y[2][l], y3 = y[3][l];
        o[0][l] = y0;
        o[1][l] = y0 + y1 + y2 + y3;
        o[2][l] = y0 - y1 + y2 - y3;
        o[3][l] = y0 + 2 * y1 + 4 * y2 + 8 * y3;
        o[4][l] = y0 - 2 * y1 + 4 * y2 - 8 * y3;
        o[5][l] = y3;
    }
}

static inline void gt6(Lanes *o, const Lanes *v)
{
    for (int l = 0; l < LANES; l++) {
        float v0 = v[0][l], v1 = v[1][l], v2 = v[2][l], v3 = v[3][l], v4 = v[4][l], v5 = v[5][l];
        o[0][l] = v0 * 0.25f - (v1 + v2) * C1_6 + (v3 + v4) * C1_24;
        o[1][l] = (v2 - v1) * C1_6 + (v3 - v4) * C1_12;
        o[2][l] = (v3 + v4 - v1 - v2) * C1_6 + v5;
    }
}

/* The sides of a 1-D transform of F(m x m): in and out. */
static inline void kind_sides(int m, enum Kind k, int *ri, int *ro)
{
    int a = m + 2;
    *ri = k == G ? 3 : k == A ? m : a;
    *ro = k == GT ? 3 : k == AT ? m : a;
}

static inline void line(int m, enum Kind k, Lanes *o, const Lanes *x)
{
    switch (k) {
    case BT: m == 2 ? bt4(o, x) : bt6(o, x); break;
    case G: m == 2 ? g4(o, x) : g6(o, x); break;
    case AT: m == 2 ? at4(o, x) : at6(o, x); break;
    case A: m == 2 ? a4(o, x) : a6(o, x); break;
    case GT: m == 2 ? gt4(o, x) : gt6(o, x); break;
    }
}

/* o [ro x ro] = T x T^T for x [ri x ri] (row-major points), T the 1-D
 * transform k of F(m x m): down each column, then along each row. Always
 * inlined into the per-tile loops, where m and k are constants. */
static inline __attribute__((always_inline)) void tile2d(int m, enum Kind k, const Lanes *x, Lanes *o)
{
    int ri, ro;
    kind_sides(m, k, &ri, &ro);
    Lanes col[MAX_SIDE], out[MAX_SIDE], r[MAX_SIDE][MAX_SIDE];
    for (int c = 0; c < ri; c++) {
        for (int i = 0; i < ri; i++)
            memcpy(col[i], x[i * ri + c], sizeof(Lanes));
        line(m, k, out, col);
        for (int i = 0; i < ro; i++)
            memcpy(r[i][c], out[i], sizeof(Lanes));
    }
    for (int i = 0; i < ro; i++)
        line(m, k, o + i * ro, r[i]);
}

/* A block of tiles, transformed and multiplied together: samples n0 ..
 * n0 + cnt, tile rows ty0 .. ty1 of each (all of them when cnt > 1). */
typedef struct Block {
    int64_t n0, cnt, ty0, ty1, tiles;
} Block;

typedef struct Blocking {
    int64_t per_sample, rows, count; /* blocks a sample (0: a block holds samples), tile rows or samples a block */
} Blocking;

static Blocking blocking(const Wino *q)
{
    int64_t tb = WINO_BLOCK_FLOATS / (q->P * (q->Cp + q->Kp)), plane = q->TH * q->TW;
    tb = tb > WINO_MIN_TILES ? tb : WINO_MIN_TILES;
    Blocking b;
    if (plane >= tb) {
        b.rows = tb / q->TW > 1 ? tb / q->TW : 1;
        b.per_sample = (q->TH + b.rows - 1) / b.rows;
        b.count = q->N * b.per_sample;
    } else {
        b.rows = tb / plane < q->N ? tb / plane : q->N;
        b.per_sample = 0;
        b.count = (q->N + b.rows - 1) / b.rows;
    }
    return b;
}

static Block block_at(const Wino *q, const Blocking *b, int64_t i)
{
    Block k;
    if (b->per_sample) {
        k.n0 = i / b->per_sample;
        k.cnt = 1;
        k.ty0 = i % b->per_sample * b->rows;
        k.ty1 = k.ty0 + b->rows < q->TH ? k.ty0 + b->rows : q->TH;
    } else {
        k.n0 = i * b->rows;
        k.cnt = q->N - k.n0 < b->rows ? q->N - k.n0 : b->rows;
        k.ty0 = 0;
        k.ty1 = q->TH;
    }
    k.tiles = k.cnt * (k.ty1 - k.ty0) * q->TW;
    return k;
}

/* dst [cnt][r1 - r0][Wp][Cp] = rows r0 .. r1 of the padded planes of
 * samples n0 .. n0 + cnt of src [N, C, H, W] (nhwc: [N, H, W, C]),
 * channels-last: input row r - ph, column c - pw at padded (r, c); zero
 * outside the input and in the lanes past C. */
CPU_CLONES static void pack_channels_last(const float *src, int nhwc, int64_t n0, int64_t cnt, int64_t C, int64_t H,
                                          int64_t W, int64_t Cp, int64_t r0, int64_t r1, int64_t Wp, int64_t ph,
                                          int64_t pw, float *dst)
{
    int64_t rows = r1 - r0;
#pragma omp parallel for collapse(2) if (cnt * rows * Wp * Cp > CPU_PARALLEL_MIN)
    for (int64_t j = 0; j < cnt; j++)
        for (int64_t r = 0; r < rows; r++) {
            float *row = dst + (j * rows + r) * Wp * Cp;
            int64_t ih = r0 + r - ph;
            memset(row, 0, sizeof *row * (size_t)(Wp * Cp));
            if (ih < 0 || ih >= H)
                continue;
            if (nhwc) {
                const float *s = src + ((n0 + j) * H + ih) * W * C;
                if (Cp == C)
                    memcpy(row + pw * Cp, s, sizeof *row * (size_t)(W * C));
                else
                    for (int64_t iw = 0; iw < W; iw++)
                        memcpy(row + (iw + pw) * Cp, s + iw * C, sizeof *row * (size_t)C);
                continue;
            }
            for (int64_t c0 = 0; c0 < C; c0 += LANES) {
                int64_t cw = C - c0 < LANES ? C - c0 : LANES;
                const float *s = src + ((n0 + j) * C + c0) * H * W + ih * W;
                for (int64_t iw = 0; iw < W; iw++) {
                    float *d = row + (iw + pw) * Cp + c0;
                    for (int64_t l = 0; l < cw; l++)
                        d[l] = s[l * H * W + iw];
                }
            }
        }
}

/* Tile t of block k: its sample in the block, tile row in the block and
 * tile column. */
static void tile_pos(const Wino *q, const Block *k, int64_t t, int64_t *j, int64_t *ty, int64_t *tx)
{
    int64_t per = (k->ty1 - k->ty0) * q->TW;
    *j = t / per;
    *ty = t % per / q->TW;
    *tx = t % q->TW;
}

/* n points of 16 lanes from (gather) or to (scatter) memory: point p at
 * base + (p / side) * rs + (p % side) * cs. */
static inline void gather(Lanes *x, const float *base, int side, int n, int64_t rs, int64_t cs)
{
    for (int p = 0; p < n; p++)
        memcpy(x[p], base + p / side * rs + p % side * cs, sizeof(Lanes));
}

static inline void scatter(const Lanes *x, float *base, int n, int64_t s)
{
    for (int p = 0; p < n; p++)
        memcpy(base + p * s, x[p], sizeof(Lanes));
}

/* Tile t of block k from src, a channels-last buffer [cnt][rows][width][ch]
 * (the tile's patch at row m*ty, column m*tx): the (m+2)-square input patch
 * d to B^T d B (kind BT), or the m-square gradient tile dY to A dY A^T (A),
 * into dst [P][tiles][ch]. */
static inline __attribute__((always_inline)) void patch_tile(const Wino *q, const Block *k, int m, enum Kind kind,
                                                              const float *src, int64_t rows, int64_t width,
                                                              int64_t ch, int64_t t, float *dst)
{
    int a = m + 2, side = kind == BT ? a : m;
    int64_t j, ty, tx;
    tile_pos(q, k, t, &j, &ty, &tx);
    const float *base = src + ((j * rows + m * ty) * width + m * tx) * ch;
    for (int64_t c0 = 0; c0 < ch; c0 += LANES) {
        Lanes x[MAX_POINTS], o[MAX_POINTS];
        gather(x, base + c0, side, side * side, width * ch, ch);
        tile2d(m, kind, x, o);
        scatter(o, dst + t * ch + c0, a * a, k->tiles * ch);
    }
}

/* patch_tile for every tile of block k: the input transform (BT, src the
 * block's padded input rows) or the gradient's (A, src dy's rows). */
CPU_CLONES static void patch_transform(const Wino *q, const Block *k, enum Kind kind, const float *src, int64_t rows,
                                       int64_t width, int64_t ch, float *dst)
{
#pragma omp parallel for if (k->tiles * q->P * ch > CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < k->tiles; t++) {
        if (kind == BT)
            q->m == 2 ? patch_tile(q, k, 2, BT, src, rows, width, ch, t, dst)
                      : patch_tile(q, k, 4, BT, src, rows, width, ch, t, dst);
        else
            q->m == 2 ? patch_tile(q, k, 2, A, src, rows, width, ch, t, dst)
                      : patch_tile(q, k, 4, A, src, rows, width, ch, t, dst);
    }
}

static inline __attribute__((always_inline)) void weight_tile(int m, const float *w, int64_t k, int64_t K, int64_t C,
                                                               int64_t c0, int64_t Cp, int64_t sk, int64_t sc,
                                                               int flip, float *u)
{
    int a = m + 2;
    Lanes g[9], o[MAX_POINTS];
    for (int e = 0; e < 9; e++)
        for (int l = 0; l < LANES; l++)
            g[e][l] = c0 + l < C ? w[k * sk + (c0 + l) * sc + (flip ? 8 - e : e)] : 0;
    tile2d(m, G, g, o);
    scatter(o, u + k * Cp + c0, a * a, K * Cp);
}

/* u [P][K][Cp] = G g G^T for the kernel g(k, c)[e] = w[k*sk + c*sc + e] of
 * each output channel k < K and input channel c < C, e = 3i + j, or (flip)
 * w[k*sk + c*sc + 8 - e], rotated half a turn; lanes past C zero. */
CPU_CLONES static void weight_transform(int m, const float *w, int64_t K, int64_t C, int64_t Cp, int64_t sk,
                                        int64_t sc, int flip, float *u)
{
#pragma omp parallel for if (K * MAX_POINTS * Cp > CPU_PARALLEL_MIN)
    for (int64_t k = 0; k < K; k++)
        for (int64_t c0 = 0; c0 < Cp; c0 += LANES) {
            if (m == 2)
                weight_tile(2, w, k, K, C, c0, Cp, sk, sc, flip, u);
            else
                weight_tile(4, w, k, K, C, c0, Cp, sk, sc, flip, u);
        }
}

static inline __attribute__((always_inline)) void output_tile(const Wino *q, const Block *k, int m, const float *mm,
                                                               int64_t t, const float *bias, float *y)
{
    int a = m + 2;
    int64_t j, ty, tx;
    tile_pos(q, k, t, &j, &ty, &tx);
    ty += k->ty0;
    int64_t rows = q->OH - m * ty < m ? q->OH - m * ty : m, cols = q->OW - m * tx < m ? q->OW - m * tx : m;
    for (int64_t k0 = 0; k0 < q->K; k0 += LANES) {
        Lanes x[MAX_POINTS], o[16];
        gather(x, mm + t * q->Kp + k0, a * a, a * a, 0, k->tiles * q->Kp);
        tile2d(m, AT, x, o);
        int64_t kw = q->K - k0 < LANES ? q->K - k0 : LANES;
        if (q->nhwc) {
            float *yp = y + (((k->n0 + j) * q->OH + m * ty) * q->OW + m * tx) * q->K + k0;
            for (int64_t i = 0; i < rows; i++)
                for (int64_t c = 0; c < cols; c++)
                    for (int64_t l = 0; l < kw; l++)
                        yp[(i * q->OW + c) * q->K + l] = o[i * m + c][l] + (bias ? bias[k0 + l] : 0);
            continue;
        }
        for (int64_t l = 0; l < kw; l++) {
            float b = bias ? bias[k0 + l] : 0, *yp = y + ((k->n0 + j) * q->K + k0 + l) * q->OH * q->OW;
            yp += m * ty * q->OW + m * tx;
            for (int64_t i = 0; i < rows; i++)
                for (int64_t c = 0; c < cols; c++)
                    yp[i * q->OW + c] = o[i * m + c][l] + b;
        }
    }
}

/* Block k's tiles of y = A^T mm A (+ bias), mm [P][tiles][Kp]. */
CPU_CLONES static void output_transform(const Wino *q, const Block *k, const float *mm, const float *bias, float *y)
{
#pragma omp parallel for if (k->tiles * q->P * q->Kp > CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < k->tiles; t++) {
        if (q->m == 2)
            output_tile(q, k, 2, mm, t, bias, y);
        else
            output_tile(q, k, 4, mm, t, bias, y);
    }
}

static inline __attribute__((always_inline)) void weight_grad_tile(int m, const float *du, int64_t k, int64_t K,
                                                                    int64_t C, int64_t c0, int64_t Cp, float *dw)
{
    int a = m + 2;
    Lanes x[MAX_POINTS], g[9];
    gather(x, du + k * Cp + c0, a * a, a * a, 0, K * Cp);
    tile2d(m, GT, x, g);
    int64_t cw = C - c0 < LANES ? C - c0 : LANES;
    for (int64_t l = 0; l < cw; l++)
        for (int e = 0; e < 9; e++)
            dw[(k * C + c0 + l) * 9 + e] = g[e][l];
}

/* dw [K, C, 3, 3] = G^T du G, du [P][K][Cp]. */
CPU_CLONES static void weight_grad_transform(int m, const float *du, int64_t K, int64_t C, int64_t Cp, float *dw)
{
#pragma omp parallel for if (K * MAX_POINTS * Cp > CPU_PARALLEL_MIN)
    for (int64_t k = 0; k < K; k++)
        for (int64_t c0 = 0; c0 < C; c0 += LANES) {
            if (m == 2)
                weight_grad_tile(2, du, k, K, C, c0, Cp, dw);
            else
                weight_grad_tile(4, du, k, K, C, c0, Cp, dw);
        }
}

/* Block k's x rows channels-last, transformed: v [P][tiles][Cp]. */
static void block_inputs(const Wino *q, const Block *k, const float *x, float *v)
{
    int64_t r0 = q->m * k->ty0, r1 = q->m * k->ty1 + 2;
    float *xp = cpu_scratch(CPU_SCRATCH_WINO_IN, k->cnt * (r1 - r0) * q->Wp * q->Cp);
    pack_channels_last(x, q->nhwc, k->n0, k->cnt, q->C, q->H, q->W, q->Cp, r0, r1, q->Wp, q->ph, q->pw, xp);
    patch_transform(q, k, BT, xp, r1 - r0, q->Wp, q->Cp, v);
}

/* Block k of y = x (*) the kernel whose transform is u [P][K][Cp] (+ bias),
 * its scratch the calling thread's. */
static void forward_block(const Wino *q, const Block *k, const float *x, const float *u, const float *bias, float *y)
{
    float *v = cpu_scratch(CPU_SCRATCH_COLS, q->P * k->tiles * q->Cp);
    float *m = cpu_scratch(CPU_SCRATCH_ROWS, q->P * k->tiles * q->Kp);
    if (q->Kp != q->K) /* lanes past K: never written by the GEMMs, read by the transform */
        memset(m, 0, sizeof *m * (size_t)(q->P * k->tiles * q->Kp));
    block_inputs(q, k, x, v);
#pragma omp parallel for schedule(dynamic) if (k->tiles * q->C * q->K > CPU_PARALLEL_MIN)
    for (int p = 0; p < q->P; p++)
        cpu_sgemm(0, 1, k->tiles, q->K, q->C, 1.0f, v + p * k->tiles * q->Cp, q->Cp, u + p * q->K * q->Cp, q->Cp, 0.0f,
                  m + p * k->tiles * q->Kp, q->Kp);
    output_transform(q, k, m, bias, y);
}

/* y = x (*) the kernel whose transform is u: the blocks split among the
 * threads when there are enough of them for all, each block then on its
 * thread alone (GEMMs included: cpu_sgemm runs on the calling thread inside a
 * parallel region), else one after the other, each split among the threads. */
static void wino_forward(const Wino *q, const float *x, const float *u, const float *bias, float *y)
{
    Blocking b = blocking(q);
#pragma omp parallel for schedule(dynamic) if (b.count >= omp_get_max_threads())
    for (int64_t i = 0; i < b.count; i++) {
        Block k = block_at(q, &b, i);
        forward_block(q, &k, x, u, bias, y);
    }
}

void winograd_conv(const ConvGeom *c, const float *x, const float *w, const float *bias, float *y)
{
    Wino q = wino_geom(2, c->N, c->C, c->H, c->W, c->O, c->a[PAD_H], c->a[PAD_W], c->nhwc);
    float *u = cpu_scratch(CPU_SCRATCH_WINO_U, q.P * q.K * q.Cp);
    weight_transform(q.m, w, q.K, q.C, q.Cp, 9 * q.C, 9, 0, u);
    wino_forward(&q, x, u, bias, y);
}

void winograd_conv_grad_input(const ConvGeom *c, const float *dy, const float *w, float *dx)
{
    Wino q = wino_geom(4, c->N, c->O, c->OH, c->OW, c->C, 2 - c->a[PAD_H], 2 - c->a[PAD_W], c->nhwc);
    float *u = cpu_scratch(CPU_SCRATCH_WINO_U, q.P * q.K * q.Cp);
    weight_transform(q.m, w, q.K, q.C, q.Cp, 9, 9 * c->C, 1, u);
    wino_forward(&q, dy, u, NULL, dx);
}

/* The blocks one after the other, each split among the threads, their
 * products summed into du by the GEMMs (a sum per thread would need a
 * copy of du each). */
void winograd_conv_grad_weight(const ConvGeom *c, const float *x, const float *dy, float *dw)
{
    Wino q = wino_geom(4, c->N, c->C, c->H, c->W, c->O, c->a[PAD_H], c->a[PAD_W], c->nhwc);
    Blocking b = blocking(&q);
    float *du = cpu_scratch(CPU_SCRATCH_WINO_U, q.P * q.K * q.Cp);
    for (int64_t i = 0; i < b.count; i++) {
        Block k = block_at(&q, &b, i);
        int64_t r0 = q.m * k.ty0, r1 = q.m * k.ty1;
        float *v = cpu_scratch(CPU_SCRATCH_COLS, q.P * k.tiles * q.Cp);
        float *m = cpu_scratch(CPU_SCRATCH_ROWS, q.P * k.tiles * q.Kp);
        float *dyp = cpu_scratch(CPU_SCRATCH_WINO_GRAD, k.cnt * (r1 - r0) * q.m * q.TW * q.Kp);
        block_inputs(&q, &k, x, v);
        pack_channels_last(dy, q.nhwc, k.n0, k.cnt, q.K, q.OH, q.OW, q.Kp, r0, r1, q.m * q.TW, 0, 0, dyp);
        patch_transform(&q, &k, A, dyp, r1 - r0, q.m * q.TW, q.Kp, m);
#pragma omp parallel for schedule(dynamic) if (k.tiles * q.C * q.K > CPU_PARALLEL_MIN)
        for (int p = 0; p < q.P; p++)
            cpu_sgemm(1, 0, q.K, q.C, k.tiles, 1.0f, m + p * k.tiles * q.Kp, q.Kp, v + p * k.tiles * q.Cp, q.Cp,
                      i ? 1.0f : 0.0f, du + p * q.K * q.Cp, q.Cp);
    }
    weight_grad_transform(q.m, du, q.K, q.C, q.Cp, dw);
}
