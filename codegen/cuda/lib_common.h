/*
 * What the library kernels (codegen/cuda/lib_kernels.h) and the host code
 * that plans and makes their launches (codegen/cuda/lib_launch.h, the
 * executor) share, in text that is valid C and CUDA C: the host includes
 * this file; NVRTC gets it as text (lib_common_text.c, made at build time)
 * before the kernels.
 *
 * CtIndex walks n elements of a tensor view: element i is decomposed over
 * dim[0..nd) in row-major order, and each of two tensors gets the offset
 * base + sum(idx[d] * st[d]) with its own strides (so one index serves a
 * read in one layout and a write in another). Up to CT_MAXD dims.
 */
#ifndef CT_LIB_COMMON_H
#define CT_LIB_COMMON_H

#ifndef CT_DEVICE
#define CT_DEVICE static inline
#endif

#define CT_MAXD 6
/* Threads of a library kernel's block (the launch plan's LP_BLOCK), which the
 * kernels that reduce within a block size their shared memory to. */
#define CT_LIB_BLOCK 256
/* Threads of a warp, which the kernels taking a work item a warp
 * (CT_WARP_LOOP) count their items in. */
#define CT_LIB_LANES 32
/* Elements a thread of a memory-bound kernel (the library's, and the
 * generated ones' long loops: codegen/render_cuda.c) takes at a time, all
 * their loads before any of their stores: a thread with one load in flight
 * keeps, at 2048 threads an SM and 2-byte elements, 4 KiB an SM in flight,
 * where an H200's bandwidth at HBM's latency needs some 25 KiB. */
#define CT_ELEMENTS 4
/* Depthwise convolution (lib_kernels.h's ct_dw_conv*): the outputs of a
 * row a work item takes, and the widest filter the kernels hold a row of
 * in registers (lib_dw_conv_fits refuses wider ones). */
#define CT_DW_QT 4
#define CT_DW_MAXS 7
/* layer_norm's kernels and ct_cast: the bits of their `wide` argument, the
 * operands stored as f32 in a kernel of 16-bit storage (lib_kernels.h). */
#define CT_WIDE_X 1
#define CT_WIDE_W 2
#define CT_WIDE_Y 4
#define CT_WIDE_R 8 /* layer_norm's residual */
#define CT_MAX_HEAD 256 /* attention's head dim, at most (the fallback kernels' row accumulators) */
#define CT_LN_MOST 1024 /* layer norm's rows held in registers, at most this long (lib_kernels.h's ct_ln_vec) */
/* Layer norm's rows in registers (lib_kernels.h's ct_ln_vec): a row's ng
 * groups of 16 bytes go to `lanes` lanes of a warp of `warp`, the fewest
 * that cover them as a power of two (at most the warp), gpl groups a lane;
 * a warp takes warp / lanes rows side by side, and each lane holds the
 * groups of k of them (slots / gpl, at most `most`, itself at most
 * CT_LN_ROWS: `slots` is a lane's registers for a row of CT_LN_MOST), all
 * loaded before any row is reduced. At a row a warp, rows of 96 bf16
 * elements (ConvNeXt's first stage: 12 groups) kept 20 of a warp's 32
 * lanes idle and 3 KiB an SM in flight (16 warps: two blocks of 256
 * threads at 92 registers), where an H200 at HBM's latency needs some 25;
 * now 24 lanes hold 8 rows, four loads a lane: 24 KiB at the same 16 warps
 * (120 registers). The gradient's dx holds x and dy: taking up to
 * CT_LN_ROWS rows a lane it needs 142 registers (one block, 8 warps an SM:
 * 24 KiB in flight at the widths where k > 1), so rows that fill a lane's
 * slots (k = 1: ViT's 768, ConvNeXt's last stage) go to a kernel of one
 * row a lane at 128 registers: 16 warps, 48 KiB at 768, where one kernel
 * for both had 8 warps and 24 KiB. */
#define CT_LN_ROWS 4
typedef struct CtLnTile {
    int lanes, gpl, k, rows; /* rows: a warp's, k * warp / lanes */
} CtLnTile;

CT_DEVICE CtLnTile ct_ln_tile(long long ng, int warp, int slots, int most)
{
    CtLnTile t = {1, 0, 0, 0};
    while (t.lanes < ng && t.lanes < warp)
        t.lanes *= 2;
    t.gpl = (int)((ng + t.lanes - 1) / t.lanes);
    t.k = slots / t.gpl < most ? slots / t.gpl : most;
    t.rows = warp / t.lanes * t.k;
    return t;
}
/* The column sums (lib_kernels.h's ct_col_tile: batch norm's statistics,
 * layer norm's weight gradients, long reductions): a tile is CT_COL_TX
 * work items of a row (16 bytes of outputs each on the vector path: 128
 * bytes, a warp's 32 lanes reading 4 rows of it at a time) by the row
 * lanes of a block; CtColTile is its geometry. */
#define CT_COL_TX 8
typedef struct CtColTile {
    long long w, items, tx, seg, lanes, cols; /* w: outputs a work item; items: work items a row */
} CtColTile;
/* The tiled attention kernels: the largest head dim they take, and their
 * tiles at head dim D: query rows a tile and as many keys (the backward's
 * dk and dv take half as many keys at a time), 32 up to D = 64, else 16.
 * CT_ATT_SMEM(D) is the floats of dynamic shared memory the backward
 * takes (ct_attn_grad_q's, the most of its kernels), CT_ATT_SMEM_FWD(D)
 * the forward's (no dO rows, but the rows' softmax parts, two floats a
 * thread); each at most CT_ATT_SMEM_MOST (CT_ATT_SMEM(64)),
 * 45 KiB, under the 48 KiB a launch may have without the driver's opt-in
 * to more. */
#define CT_ATT_D 128
#define CT_ATT_ROWS(D) ((D) <= 64 ? 32LL : 16LL)
#define CT_ATT_SMEM(D) \
    (4 * CT_ATT_ROWS(D) * ((D) + 1) + CT_ATT_ROWS(D) * (CT_ATT_ROWS(D) + 1) + CT_ATT_ROWS(D) * (D) + 3 * CT_ATT_ROWS(D))
#define CT_ATT_SMEM_FWD(D) (CT_ATT_SMEM(D) - CT_ATT_ROWS(D) * ((D) + 1) + 2 * CT_LIB_BLOCK)
#define CT_ATT_SMEM_MOST CT_ATT_SMEM(64)
/* The forward on tensor cores (16-bit storage, head dims a multiple of
 * 16): keys a tile, the 16-bit elements after each shared row, and its
 * shared memory in bytes (a tile of k rows and one of v rows). */
#define CT_TC_KEYS 64
#define CT_TC_PAD 8
#define CT_TC_SMEM(D) (2 * CT_TC_KEYS * ((D) + CT_TC_PAD) * 2)
/* Its backward: the largest head dim (its fragments' registers), and
 * ct_attn_tc_grad_kv's shared memory in bytes (a tile of q rows, one of dO
 * rows and their statistics; ct_attn_tc_grad_q's is CT_TC_SMEM). */
#define CT_TC_GRAD_D 64
#define CT_TC_GRAD_SMEM(D) (CT_TC_SMEM(D) + 3 * CT_TC_KEYS * 4)

/* The forward's shared memory (lib_kernels.h's ct_att_carve): q, k and v
 * rows, the scores, the output rows, each row's running maximum, sum of
 * exponentials and rescaling factor, and the parts of a tile's maxima and
 * sums (CT_LIB_BLOCK each). */
typedef struct CtAttShared {
    float *qs, *ks, *vs, *ss, *os, *mx, *sum, *alpha, *pmax, *psum;
} CtAttShared;

/* Where head bh's rows lie in attention's operands (ir/ops/attention_geom.h):
 * the first q, k, v and y (or dy) row's element offset and the rows'
 * strides; dq, dk and dv as q, k and v. Separate [B,H,N,D] operands, or
 * (packed) one qkv [B,N,3,H,D] given as q, k and v alike and y [B,N,H,D]. */
typedef struct CtAttHead {
    long long q, k, v, o, lq, lkv, lo;
} CtAttHead;

CT_DEVICE CtAttHead ct_att_head(long long bh, long long N, long long M, long long H, long long D, int packed)
{
    CtAttHead a;
    if (packed) {
        long long b = bh / H, HD = H * D;
        a.q = b * N * 3 * HD + (bh - b * H) * D, a.k = a.q + HD, a.v = a.q + 2 * HD;
        a.o = b * N * HD + (bh - b * H) * D, a.lq = a.lkv = 3 * HD, a.lo = HD;
    } else {
        a.q = a.o = bh * N * D, a.k = a.v = bh * M * D, a.lq = a.lkv = a.lo = D;
    }
    return a;
}

/* Whether the np buffers of p (null ones aside) are 16-byte aligned: the
 * vector paths' check at launch (lib_kernels.h's ct_rows_vec and the like). */
CT_DEVICE int ct_aligned16(const void *const *p, int np)
{
    unsigned long long a = 0;
    for (int k = 0; k < np; k++)
        a |= (unsigned long long)p[k] % 16;
    return a == 0;
}

typedef struct CtIndex {
    long long n;
    long long nd;
    long long dim[CT_MAXD];
    long long st0[CT_MAXD], st1[CT_MAXD];
    long long base0, base1;
} CtIndex;

/* a / b, and a % b into *rem, for a >= 0 and b > 0: in 32 bits where both
 * fit, as they do in all but the largest tensors, since a GPU divides 64-bit
 * integers in a software routine several times as long; index math is
 * most of what the copies and the elementwise library kernels do. */
CT_DEVICE long long ct_divmod(long long a, long long b, long long *rem)
{
    if ((((unsigned long long)a | (unsigned long long)b) >> 32) == 0) {
        unsigned q = (unsigned)a / (unsigned)b;
        *rem = (long long)((unsigned)a - q * (unsigned)b);
        return (long long)q;
    }
    long long q = a / b;
    *rem = a - q * b;
    return q;
}

CT_DEVICE void ct_offsets(const CtIndex *ix, long long i, long long *o0, long long *o1)
{
    if (ix->nd == 1) { /* no division: i < n, the one dim's size */
        *o0 = ix->base0 + i * ix->st0[0];
        *o1 = ix->base1 + i * ix->st1[0];
        return;
    }
    long long a = ix->base0, b = ix->base1;
    for (long long d = ix->nd - 1; d >= 0; d--) {
        long long k;
        i = ct_divmod(i, ix->dim[d], &k);
        a += k * ix->st0[d];
        b += k * ix->st1[d];
    }
    *o0 = a;
    *o1 = b;
}

/* A 2-D pooling window, PyTorch's rule (ir/ops/pool_window.h): mode 0
 * average, 1 max, 2 adaptive average (window i of the output spans
 * [floor(i*H/OH), ceil((i+1)*H/OH))). The pooling kernels' work items run
 * over [N, C, H, W], or with c_last over [N, H, W, C] (a channels-last
 * tensor's memory order, so that neighbouring threads read neighbouring
 * channels). */
typedef struct CtPool {
    long long kh, kw, sh, sw, ph, pw, count_pad, mode;
    long long H, W, OH, OW;
    long long c_last;
} CtPool;

typedef struct CtWindow {
    long long h0, h1, w0, w1;
    float divisor;
} CtWindow;

CT_DEVICE CtWindow ct_window(const CtPool *p, long long oh, long long ow)
{
    CtWindow r;
    if (p->mode == 2) {
        long long m;
        r.h0 = ct_divmod(oh * p->H, p->OH, &m), r.h1 = ct_divmod((oh + 1) * p->H + p->OH - 1, p->OH, &m);
        r.w0 = ct_divmod(ow * p->W, p->OW, &m), r.w1 = ct_divmod((ow + 1) * p->W + p->OW - 1, p->OW, &m);
        r.divisor = (float)((r.h1 - r.h0) * (r.w1 - r.w0));
        return r;
    }
    long long h0 = oh * p->sh - p->ph, w0 = ow * p->sw - p->pw;
    long long h1 = h0 + p->kh < p->H + p->ph ? h0 + p->kh : p->H + p->ph;
    long long w1 = w0 + p->kw < p->W + p->pw ? w0 + p->kw : p->W + p->pw;
    float padded = (float)((h1 - h0) * (w1 - w0));
    r.h0 = h0 < 0 ? 0 : h0;
    r.w0 = w0 < 0 ? 0 : w0;
    r.h1 = h1 > p->H ? p->H : h1;
    r.w1 = w1 > p->W ? p->W : w1;
    r.divisor = p->count_pad ? padded : (float)((r.h1 - r.h0) * (r.w1 - r.w0));
    return r;
}

/* Output element i of a pooling walk (lib_kernels.h's ct_pool): its
 * offsets in x and y, and its window. */
CT_DEVICE CtWindow ct_pool_item(const CtIndex *out, const CtPool *p, long long i, long long *xo, long long *yo)
{
    long long inner = p->c_last ? out->dim[3] : 1, ow, oh, m;
    ct_divmod(ct_divmod(ct_divmod(i, inner, &m), p->OW, &ow), p->OH, &oh);
    ct_offsets(out, i, xo, yo);
    return ct_window(p, oh, ow);
}

/* Input element i of pooling's gradient walk `in` (lib_kernels.h's
 * ct_pool_grad): its image (c_last), else its image's plane, its channel
 * (c_last; else 0), row and column, its offsets in dy and dx, and the
 * output windows that can reach it (rows [oh0, oh1), columns [ow0, ow1)). */
typedef struct CtPoolAt {
    long long nc, c, h, w, yo, xo, oh0, oh1, ow0, ow1;
} CtPoolAt;

CT_DEVICE CtPoolAt ct_pool_at(const CtIndex *in, const CtPool *p, long long i)
{
    CtPoolAt a;
    long long m, inner = p->c_last ? in->dim[3] : 1;
    a.nc = ct_divmod(ct_divmod(ct_divmod(i, inner, &a.c), p->W, &a.w), p->H, &a.h);
    ct_offsets(in, i, &a.yo, &a.xo);
    a.oh0 = 0, a.oh1 = p->OH, a.ow0 = 0, a.ow1 = p->OW;
    if (p->mode != 2) { /* only the windows that can reach (h, w); none starts below 0 */
        long long h0 = a.h + p->ph - p->kh + p->sh, w0 = a.w + p->pw - p->kw + p->sw;
        a.oh0 = h0 > 0 ? ct_divmod(h0, p->sh, &m) : 0, a.oh1 = ct_divmod(a.h + p->ph, p->sh, &m) + 1;
        a.ow0 = w0 > 0 ? ct_divmod(w0, p->sw, &m) : 0, a.ow1 = ct_divmod(a.w + p->pw, p->sw, &m) + 1;
        a.oh1 = a.oh1 > p->OH ? p->OH : a.oh1, a.ow1 = a.ow1 > p->OW ? p->OW : a.ow1;
    }
    return a;
}

#endif
