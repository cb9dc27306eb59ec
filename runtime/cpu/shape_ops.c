/*
 * The cpu backend's data movement: reshape and f32->f32 cast as copies
 * (the logical tensor is unchanged), permute, to_layout and expand as
 * strided gathers (permute and to_layout in their values' stored layouts,
 * nhwc.c's), slice / slice_grad / concat as block copies, pad as row copies
 * between runs of its value.
 */
#include <string.h>

#include "runtime/cpu/cpu.h"

static void copy(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    if (out[0] != in[0])
        memcpy(out[0], in[0], (size_t)cpu_in_numel(g, n, 0) * sizeof(float));
}

void cpu_reshape(const Graph *g, const Node *n, float *const *in, float *const *out) { copy(g, n, in, out); }
void cpu_cast(const Graph *g, const Node *n, float *const *in, float *const *out) { copy(g, n, in, out); }

/* A transposing gather: out's innermost dim reads in at stride s0 != 1 while
 * out's dim a reads it at stride 1 (NCHW <-> NHWC). Copied in 8 x 8 tiles
 * transposed in registers (vector extensions: each clone lowers the
 * shuffles to its own unpack and lane permutes), so every load and store is
 * a run of 8 floats; the edges one float at a time. The other dims split
 * among threads. */
typedef float v8f __attribute__((vector_size(32)));

/* out + k * os = column k of the 8 rows at in + j * is. */
static inline __attribute__((always_inline)) void transpose8(const float *in, int64_t is, float *out, int64_t os)
{
    v8f r[8], t[8], u[8];
    for (int j = 0; j < 8; j++)
        memcpy(&r[j], in + j * is, sizeof r[j]);
    for (int j = 0; j < 8; j += 2) {
        t[j] = __builtin_shufflevector(r[j], r[j + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[j + 1] = __builtin_shufflevector(r[j], r[j + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int j = 0; j < 8; j += 4)
        for (int h = 0; h < 2; h++) {
            u[j + 2 * h] = __builtin_shufflevector(t[j + h], t[j + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
            u[j + 2 * h + 1] = __builtin_shufflevector(t[j + h], t[j + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        }
    /* u[k], k < 4: column k of rows 0..3 in its low half, column k + 4 in
     * its high half; u[k + 4] the same of rows 4..7 */
    for (int k = 0; k < 4; k++) {
        v8f lo = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        v8f hi = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
        memcpy(out + k * os, &lo, sizeof lo);
        memcpy(out + (k + 4) * os, &hi, sizeof hi);
    }
}

CPU_CLONES static void gather_transposed(const float *in, float *out, const CtShape *y, const int64_t *stride, int a)
{
    int nd = y->ndim;
    int64_t ostride[CT_MAX_DIMS] = {0}, s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ostride[d] = s;
        s *= y->d[d];
    }
    int64_t A = y->d[a], J = y->d[nd - 1], s0 = stride[nd - 1], oa = ostride[a];
    int64_t A8 = A - A % 8, J8 = J - J % 8;
    int64_t outer = shape_numel(y) / (A * J);
#pragma omp parallel for if (shape_numel(y) > CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < outer; r++) {
        int64_t src = 0, dst = 0, rest = r;
        for (int d = nd - 2; d >= 0; d--) { /* r over the dims other than a and the innermost */
            if (d == a)
                continue;
            int64_t i = rest % y->d[d];
            rest /= y->d[d];
            src += i * stride[d];
            dst += i * ostride[d];
        }
        for (int64_t i = 0; i < A8; i += 8)
            for (int64_t j = 0; j < J8; j += 8)
                transpose8(in + src + i + j * s0, s0, out + dst + i * oa + j, oa);
        for (int64_t i = 0; i < A; i++)
            for (int64_t j = i < A8 ? J8 : 0; j < J; j++)
                out[dst + i * oa + j] = in[src + i + j * s0];
    }
}

/* out[o] = in[sum idx_d * stride_d] over out's shape: the two innermost
 * dims as loops (a row's start one add from the last), blocks of the outer
 * dims split among threads. */
CPU_CLONES void cpu_strided_gather(const float *in, float *out, const CtShape *y, const int64_t *stride)
{
    int nd = y->ndim;
    int64_t cnt = shape_numel(y);
    if (nd == 0) {
        out[0] = in[0];
        return;
    }
    int64_t inner = y->d[nd - 1], s0 = stride[nd - 1];
    for (int a = 0; a < nd - 1 && s0 != 1 && inner > 1; a++)
        if (stride[a] == 1 && y->d[a] > 1) {
            gather_transposed(in, out, y, stride, a);
            return;
        }
    int64_t mid = nd >= 2 ? y->d[nd - 2] : 1, sm = nd >= 2 ? stride[nd - 2] : 0;
    int64_t outer = inner > 0 && mid > 0 ? cnt / (inner * mid) : 0;
#pragma omp parallel for if (cnt > CPU_PARALLEL_MIN)
    for (int64_t blk = 0; blk < outer; blk++) {
        int64_t base = 0, rest = blk;
        for (int d = nd - 3; d >= 0; d--) {
            base += rest % y->d[d] * stride[d];
            rest /= y->d[d];
        }
        for (int64_t r = 0; r < mid; r++) {
            const float *src = in + base + r * sm;
            float *dst = out + (blk * mid + r) * inner;
            if (s0 == 1 && inner >= 64)
                memcpy(dst, src, (size_t)inner * sizeof *out);
            else if (s0 == 1) /* a head's few floats: a call to memcpy would cost more than the copy */
                for (int64_t j = 0; j < inner; j++)
                    dst[j] = src[j];
            else
                for (int64_t j = 0; j < inner; j++)
                    dst[j] = src[j * s0];
        }
    }
}

/* y = x read through perm of x's dims (NULL: none), each value in its
 * stored layout: the loops run over y's memory order, and adjacent ones
 * that are adjacent in x too read as one (NHWC's H and W: the transposing
 * gather's tiles then span whole images; a permute that only relabels
 * channels-last memory: one copy). */
static void gather_stored(const Graph *g, ValueId xv, ValueId yv, const int64_t *perm, const float *in, float *out)
{
    const CtShape *y = &g->values[yv].type.shape;
    int64_t xmem[CT_MAX_DIMS], stride[CT_MAX_DIMS] = {0};
    int order[CT_MAX_DIMS];
    value_strides(&g->values[xv], xmem);
    cpu_memory_order(g, yv, order);
    CtShape m = {0};
    for (int k = 0; k < y->ndim; k++) {
        int d = order[k];
        int64_t st = xmem[perm ? perm[d] : d];
        if (m.ndim && stride[m.ndim - 1] == st * y->d[d]) {
            m.d[m.ndim - 1] *= y->d[d];
            stride[m.ndim - 1] = st;
            continue;
        }
        m.d[m.ndim] = y->d[d];
        stride[m.ndim++] = st;
    }
    if (m.ndim == 1 && stride[0] == 1) {
        if (out != in)
            memcpy(out, in, (size_t)m.d[0] * sizeof *out);
        return;
    }
    cpu_strided_gather(in, out, &m, stride);
}

void cpu_permute(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    gather_stored(g, n->in[0], n->out[0], &n->iattr[1], in[0], out[0]);
}

void cpu_to_layout(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    gather_stored(g, n->in[0], n->out[0], NULL, in[0], out[0]);
}

void cpu_expand(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0), *y = cpu_out_shape(g, n, 0);
    int64_t stride[CT_MAX_DIMS] = {0}, s = 1;
    for (int i = y->ndim - 1; i >= 0; i--) {
        int j = i - (y->ndim - x->ndim);
        int64_t d = j >= 0 ? x->d[j] : 1;
        stride[i] = d == 1 ? 0 : s;
        s *= d;
    }
    cpu_strided_gather(in[0], out[0], y, stride);
}

enum { SL_DIM, SL_START, SL_END, SL_STEP };

/* Slice (grad = 0) or its gradient (grad = 1) between the full tensor
 * `full` and the sliced one `part`. */
static void slice_move(const int64_t *a, const CtShape *full, const CtShape *part, const float *src, float *dst,
                       int grad)
{
    int64_t outer, inner, dim = a[SL_DIM], D = full->d[dim], OD = part->d[dim];
    shape_split_at_dim(full, dim, &outer, &inner);
    if (grad)
        memset(dst, 0, (size_t)shape_numel(full) * sizeof *dst);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < OD; j++) {
            int64_t fi = (o * D + a[SL_START] + j * a[SL_STEP]) * inner, pi = (o * OD + j) * inner;
            if (grad)
                memcpy(dst + fi, src + pi, (size_t)inner * sizeof *dst);
            else
                memcpy(dst + pi, src + fi, (size_t)inner * sizeof *dst);
        }
}

void cpu_slice(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    slice_move(n->iattr, cpu_in_shape(g, n, 0), cpu_out_shape(g, n, 0), in[0], out[0], 0);
}

void cpu_slice_grad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    slice_move(n->iattr, cpu_out_shape(g, n, 0), cpu_in_shape(g, n, 0), in[0], out[0], 1);
}

void cpu_concat(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *y = cpu_out_shape(g, n, 0);
    int64_t dim = n->iattr[0], outer, inner, at = 0;
    shape_split_at_dim(y, dim, &outer, &inner);
    for (int k = 0; k < n->nin; k++) {
        int64_t D = cpu_in_shape(g, n, k)->d[dim];
        for (int64_t o = 0; o < outer; o++)
            memcpy(out[0] + (o * y->d[dim] + at) * inner, in[k] + o * D * inner, (size_t)(D * inner) * sizeof(float));
        at += D;
    }
}

enum { PAD_TOP, PAD_BOTTOM, PAD_LEFT, PAD_RIGHT };

static void fill(float *dst, int64_t n, float v)
{
    for (int64_t j = 0; j < n; j++)
        dst[j] = v;
}

/* Each output row: the value, then columns [j0, j1) from the input row
 * i - top (where it exists), then the value. */
void cpu_pad(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *x = cpu_in_shape(g, n, 0), *y = cpu_out_shape(g, n, 0);
    const int64_t *a = n->iattr;
    int64_t H = x->d[2], W = x->d[3], OH = y->d[2], OW = y->d[3];
    int64_t j0 = a[PAD_LEFT] > 0 ? a[PAD_LEFT] : 0, j1 = W + a[PAD_LEFT] < OW ? W + a[PAD_LEFT] : OW;
    float v = (float)n->fattr[0];
    j1 = j1 > j0 ? j1 : j0;
#pragma omp parallel for if (shape_numel(y) > CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < x->d[0] * x->d[1]; p++)
        for (int64_t i = 0; i < OH; i++) {
            float *dst = out[0] + (p * OH + i) * OW;
            int64_t h = i - a[PAD_TOP];
            if (h < 0 || h >= H || j1 == j0) {
                fill(dst, OW, v);
                continue;
            }
            fill(dst, j0, v);
            memcpy(dst + j0, in[0] + (p * H + h) * W + j0 - a[PAD_LEFT], (size_t)(j1 - j0) * sizeof *dst);
            fill(dst + j1, OW - j1, v);
        }
}
