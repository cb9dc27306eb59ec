/*
 * The library kernels: the non-elementwise ops that are neither GEMM nor
 * convolution (data movement, reductions, softmax, norms, the loss) and
 * depthwise convolutions over channels-last values, as
 * text that is valid C and CUDA C. NVRTC compiles it for the cuda backend
 * (codegen/cuda/lib_source.c: embedded at build time, once per storage
 * type); tests/test_lib_kernels.c includes it as host C and compares every
 * kernel with the ref backend. What it needs from its includer:
 *
 *   CT_GLOBAL        a kernel's head: `extern "C" __global__ void` or `void`
 *   CT_LOOP(i, n)    each of n work items once: a grid-stride loop, or a loop
 *   CT_FIRST, CT_STRIDE
 *                    that loop's first item and its step (0 and 1 on the host)
 *   CT_BLOCK_LOOP(i, n)
 *                    each of n work items by a whole block: a block-stride
 *                    loop, or a loop; inside it thread CT_TID of the block's
 *                    CT_NTHREADS (0 of 1 on the host) takes its share,
 *                    CT_SYNC() is the block's barrier (or nothing) and
 *                    CT_SHARED makes a variable the block's (or a local)
 *   CT_FENCE()       a store's visibility to the whole device before what
 *                    follows (__threadfence(), or nothing)
 *   CT_ATOMIC_INC(p) *p + 1 stored atomically, the old value returned
 *                    (unsigned int)
 *   CT_WARP_LOOP(i, n)
 *                    each of n work items by a whole warp (CT_LANES threads,
 *                    or 1): a warp-stride loop, or a loop; inside it lane
 *                    CT_LANE takes its share, and CT_LANE_SUM(v) gives
 *                    every lane the sum of the warp's v (double),
 *                    CT_SEG_SUM(v, lanes) the sum over its aligned
 *                    `lanes` lanes (a power of two)
 *   CT_T, CT_LD(v), CT_ST(f), CT_SFX(name), CT_ACC
 *                    the storage type, its load as float and store from
 *                    float, the name suffix (_f32, _f16, _bf16), and the
 *                    type of the attention gradient's dO . v sums (double
 *                    for f32, float for the 16-bit types)
 *   CT_GLOBAL16      CT_GLOBAL, for the kernels of the 16-bit types alone
 *   CT_BOUNDS(b)     between CT_GLOBAL and the name: the kernel's registers
 *                    held to what b blocks of CT_LIB_BLOCK threads an SM
 *                    leave each (__launch_bounds__), or nothing
 *   CT_UNROLL        before a loop of fixed count to unroll (nothing on the host)
 *   CT_MMA16, CT_MMA16816(d, a, b)
 *                    defined for the 16-bit types where their tensor cores'
 *                    mma.sync m16n8k16 (f32 += 16-bit x 16-bit) is wanted
 *   CT_INF           infinity as a double
 *   ct_u4, CT_V16_LD(u, p), CT_V16_ST(p, u)
 *                    16 bytes as four unsigned ints, and a 16-byte access
 *                    between the union u (its member v) and address p
 *   CT_DYN_SHARED(T, s)
 *                    s: the launch's dynamic shared memory as T[] (on the
 *                    host, at least CT_ATT_SMEM_MOST floats)
 *   lib_common.h     CtIndex and ct_offsets, before this text
 *   ir/formulas.h    over float numbers (fx_act), and the op kinds CT_OP_*
 *   ir/counter_rng.h random erasing's fill
 *
 * Most kernels take one work item per output element, row or channel,
 * with the inner sums serial in double (the ref kernels' formulas, so f32
 * results agree closely). group_norm's groups hold a whole feature map or
 * more, so a block takes each, its sums in double reduced over the block
 * in a fixed order (the same bits on every run); a warp takes each of
 * layer_norm's rows. Long sums of few outputs (reduce_sum's, batch
 * norm's, layer_norm's dweight) are column sums (ct_col_tile): each block's
 * partial sums into scratch, the last block of each column of outputs
 * adding them in order, in one launch. Attention runs in
 * tiles through shared memory (FlashAttention's online softmax, float
 * sums) up to head dim CT_ATT_D. Every tensor is addressed through
 * strides, so either layout (NCHW or NHWC) works; a kernel over a
 * channels-last tensor walks it in memory order where it can.
 */

/* The memory-bound kernels that move the most bytes (copies, the
 * activations and adds after library calls, batch norm's elementwise
 * passes; layer norm's lanes likewise along a row) take CT_ELEMENTS
 * (lib_common.h) of CT_LOOP's work items a thread at a time, CT_STRIDE
 * apart as CT_LOOP's (so still coalesced), all their loads before any of
 * their stores. Item u of the group at i is CT_ITEM(i, u). */
#define CT_GROUP_LOOP(i, n) for (long long i = CT_FIRST; i < (n); i += CT_ELEMENTS * CT_STRIDE)
#define CT_ITEM(i, u) ((i) + (u) * CT_STRIDE)

/* Batch norm's passes over channels-last tensors take CT_VW channels of a
 * row as a work item, in one 16-byte access of each operand (CtV16). */
#define CT_VW (16 / (int)sizeof(CT_T))
typedef union CT_SFX(CtV16) {
    ct_u4 v;
    CT_T e[16 / sizeof(CT_T)];
} CT_SFX(CtV16);
typedef union CT_SFX(CtF4) {
    ct_u4 v;
    float f[4];
} CT_SFX(CtF4);

/* Whether ix's first offsets and its dims [0, nd)'s strides are multiples
 * of CT_VW in both tensors. */
CT_DEVICE int CT_SFX(ct_steps_vec)(const CtIndex *ix, long long nd)
{
    if (ix->base0 % CT_VW || ix->base1 % CT_VW)
        return 0;
    for (long long d = 0; d < nd; d++)
        if (ix->st0[d] % CT_VW || ix->st1[d] % CT_VW)
            return 0;
    return 1;
}

/* Whether ix's innermost dim is contiguous in both tensors and CT_VW
 * elements of it can be a work item: its length, the other dims' strides
 * and the first offsets multiples of CT_VW. */
CT_DEVICE int CT_SFX(ct_last_vec)(const CtIndex *ix)
{
    long long last = ix->nd - 1;
    return ix->nd >= 1 && ix->st0[last] == 1 && ix->st1[last] == 1 && ix->dim[last] % CT_VW == 0 &&
           CT_SFX(ct_steps_vec)(ix, last);
}

/* Whether ct_copy can take CT_VW elements a work item: ct_last_vec, x and
 * y 16-byte aligned (a slice or a concat input along any but the last dim:
 * ViT's class token). */
CT_DEVICE int CT_SFX(ct_copy_vec)(const CtIndex *ix, const void *const *p)
{
    return CT_SFX(ct_last_vec)(ix) && ct_aligned16(p, 2);
}

/* y[o1(i)] = x[o0(i)] over ix: permute, to_layout, slice, expand, a concat
 * input, the inner part of slice_grad and of pad; in 16-byte accesses
 * where ct_copy_vec holds, one set of index divisions for CT_VW elements. */
CT_GLOBAL CT_SFX(ct_copy)(const CT_T *x, CT_T *y, CtIndex ix)
{
    const void *ptrs[2] = {x, y};
    if (CT_SFX(ct_copy_vec)(&ix, ptrs)) {
        CT_LOOP(i, ix.n / CT_VW)
        {
            long long a, b;
            CT_SFX(CtV16) v;
            ct_offsets(&ix, i * CT_VW, &a, &b);
            CT_V16_LD(v, x + a);
            CT_V16_ST(y + b, v);
        }
        return;
    }
    CT_GROUP_LOOP(i, ix.n)
    {
        long long a[CT_ELEMENTS], b[CT_ELEMENTS];
        CT_T v[CT_ELEMENTS];
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < ix.n) {
                ct_offsets(&ix, CT_ITEM(i, u), &a[u], &b[u]);
                v[u] = x[a[u]];
            }
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < ix.n)
                y[b[u]] = v[u];
    }
}

CT_GLOBAL CT_SFX(ct_fill)(CT_T *y, long long n, float v)
{
    CT_LOOP(i, n)
    y[i] = CT_ST(v);
}

/* An activation, elementwise (a library call's epilogue that the library
 * does not compute): act its op kind, approx gelu's tanh form. */
CT_GLOBAL CT_SFX(ct_act)(const CT_T *x, CT_T *y, long long n, int act, int approx)
{
    if (((unsigned long long)x | (unsigned long long)y) % 16 == 0) { /* 16 bytes an item, the tail one at a time */
        long long nv = n / CT_VW;
        CT_GROUP_LOOP(i, nv)
        {
            CT_SFX(CtV16) v[CT_ELEMENTS];
            CT_UNROLL
            for (int t = 0; t < CT_ELEMENTS; t++)
                if (CT_ITEM(i, t) < nv)
                    CT_V16_LD(v[t], x + CT_ITEM(i, t) * CT_VW);
            CT_UNROLL
            for (int t = 0; t < CT_ELEMENTS; t++)
                if (CT_ITEM(i, t) < nv) {
                    CT_UNROLL
                    for (int u = 0; u < CT_VW; u++)
                        v[t].e[u] = CT_ST(fx_act(act, approx, CT_LD(v[t].e[u])));
                    CT_V16_ST(y + CT_ITEM(i, t) * CT_VW, v[t]);
                }
        }
        CT_LOOP(i, n - nv * CT_VW)
        y[nv * CT_VW + i] = CT_ST(fx_act(act, approx, CT_LD(x[nv * CT_VW + i])));
        return;
    }
    CT_GROUP_LOOP(i, n)
    {
        float v[CT_ELEMENTS];
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < n)
                v[u] = CT_LD(x[CT_ITEM(i, u)]);
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < n)
                y[CT_ITEM(i, u)] = CT_ST(fx_act(act, approx, v[u]));
    }
}

/* y = a + b, b broadcast: ix walks y's dims with a's strides (which y
 * shares) and b's (0 on broadcast dims). */
CT_GLOBAL CT_SFX(ct_add)(const CT_T *a, const CT_T *b, CT_T *y, CtIndex ix)
{
    CT_GROUP_LOOP(i, ix.n)
    {
        long long oa[CT_ELEMENTS], ob;
        float va[CT_ELEMENTS], vb[CT_ELEMENTS];
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < ix.n) {
                ct_offsets(&ix, CT_ITEM(i, u), &oa[u], &ob);
                va[u] = CT_LD(a[oa[u]]), vb[u] = CT_LD(b[ob]);
            }
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < ix.n)
                y[oa[u]] = CT_ST(va[u] + vb[u]);
    }
}

/* Under amp a kernel's operands may mix 16-bit storage (CT_T) with f32 (the
 * CT_WIDE_* bits of its `wide` argument): element i of one, as float. */
CT_DEVICE float CT_SFX(ct_ldw)(const void *p, long long i, int wide)
{
    return wide ? ((const float *)p)[i] : (float)CT_LD(((const CT_T *)p)[i]);
}

CT_DEVICE void CT_SFX(ct_stw)(void *p, long long i, int wide, float f)
{
    if (wide)
        ((float *)p)[i] = f;
    else
        ((CT_T *)p)[i] = CT_ST(f);
}

/* f as an operand stored as CT_T, or as float where wide, would hold it. */
CT_DEVICE float CT_SFX(ct_rndw)(float f, int wide) { return wide ? f : (float)CT_LD(CT_ST(f)); }

/* CT_VW elements from element i of p (CT_T, or float where wide) as
 * floats, in 16-byte accesses (i a multiple of CT_VW, p 16-byte aligned),
 * and stored back. */
CT_DEVICE void CT_SFX(ct_ldv)(const void *p, long long i, int wide, float *v)
{
    if (wide && sizeof(CT_T) != sizeof(float)) {
        CT_UNROLL
        for (int h = 0; h < CT_VW / 4; h++) {
            CT_SFX(CtF4) u;
            CT_V16_LD(u, (const float *)p + i + 4 * h);
            CT_UNROLL
            for (int k = 0; k < 4; k++)
                v[4 * h + k] = u.f[k];
        }
        return;
    }
    CT_SFX(CtV16) u;
    CT_V16_LD(u, (const CT_T *)p + i);
    CT_UNROLL
    for (int k = 0; k < CT_VW; k++)
        v[k] = (float)CT_LD(u.e[k]);
}

CT_DEVICE void CT_SFX(ct_stv)(void *p, long long i, int wide, const float *v)
{
    if (wide && sizeof(CT_T) != sizeof(float)) {
        CT_UNROLL
        for (int h = 0; h < CT_VW / 4; h++) {
            CT_SFX(CtF4) u;
            CT_UNROLL
            for (int k = 0; k < 4; k++)
                u.f[k] = v[4 * h + k];
            CT_V16_ST((float *)p + i + 4 * h, u);
        }
        return;
    }
    CT_SFX(CtV16) u;
    CT_UNROLL
    for (int k = 0; k < CT_VW; k++)
        u.e[k] = CT_ST(v[k]);
    CT_V16_ST((CT_T *)p + i, u);
}

/* The run of ix's indices from r (before end) that step only its innermost
 * dim: r's offset (ix's st0 strides) into *o, that dim's st0 stride into
 * *s, and the run's length returned; a loop over a range of ix divides
 * once a run, not once an index (64-bit division is slow on a GPU). */
CT_DEVICE long long CT_SFX(ct_run)(const CtIndex *ix, long long r, long long end, long long *o, long long *s)
{
    long long last = ix->nd ? ix->dim[ix->nd - 1] : 1, n = last - r % last, unused;
    ct_offsets(ix, r, o, &unused);
    *s = ix->nd ? ix->st0[ix->nd - 1] : 0;
    return n < end - r ? n : end - r;
}

/* The sum in double of x (times f, of x's strides, unless f is NULL) over
 * indices [r, end) of red from offset o0, in index order; each operand is
 * stored as CT_T, or as float where its bit of `wide` is set (CT_WIDE_X
 * for x, CT_WIDE_W for f, CT_WIDE_Y for side, CT_WIDE_R for scale: under
 * amp a f32 gradient's product with the 16-bit activation it came from,
 * that activation read as stored). sv: the side output's scale. */
CT_DEVICE double CT_SFX(ct_sum_range)(const void *x, const void *f, long long o0, int wide, const CtIndex *red,
                                      long long r, long long end, void *side, float sv)
{
    const int wx = wide & CT_WIDE_X, wf = wide & CT_WIDE_W, ws = wide & CT_WIDE_Y;
    double s = 0;
    while (r < end) {
        long long o, st, n = CT_SFX(ct_run)(red, r, end, &o, &st);
        o += o0;
        for (long long t = 0; t < n; t++) {
            float v = CT_SFX(ct_ldw)(x, o + t * st, wx);
            s += f ? (double)v * CT_SFX(ct_ldw)(f, o + t * st, wf) : (double)v;
            if (side)
                CT_SFX(ct_stw)(side, o + t * st, ws, v * sv);
        }
        r += n;
    }
    return s;
}

/* A reduction's side output (side NULL: none): side = x * scale stored
 * beside the sum, element for element (x's strides), scale of the sum's
 * shape and strides (layer scale's gradient dy * gamma, computed where
 * gamma's gradient sums dy * x: one pass over dy for both). The scale for
 * the output at y's offset yo. */
CT_DEVICE float CT_SFX(ct_side_scale)(const void *side, const void *scale, long long yo, int wide)
{
    return side ? CT_SFX(ct_ldw)(scale, yo, wide & CT_WIDE_R) : 0.0f;
}

/* Sums of many terms for each of a few outputs (batch norm's statistics,
 * layer norm's weight gradients, reduce_sum over long reductions) in one
 * launch, in tiles: a column of the outputs (tx work items, each 16 bytes
 * of outputs where the kernel's layout allows, else one output) by a slice
 * of the reduction, tile t being column t % cols of slice t / cols (a
 * slice's tiles side by side). A tile's threads are `lanes` row lanes of
 * each of its work items, the seg lanes of a warp on one work item side by
 * side (so that a warp reads tx x 16 bytes of each of seg rows); lane ry
 * of slice s walks rows s * lanes + ry, slices * lanes apart. A column is
 * tx = CT_COL_TX (lib_common.h) work items where neighbouring outputs are
 * neighbours in memory (sxc, the step between them, 1), else one output
 * (whose rows are then neighbours). Each tile's sums over its lanes, in a
 * fixed order, go to part; the last tile of each column to finish (counted
 * in the program's counters) adds the column's slices in order and
 * finishes its outputs: each value the same bits on every run. */
CT_DEVICE CtColTile CT_SFX(ct_col_tile)(long long outs, long long sxc, int vec)
{
    CtColTile t;
    t.w = vec ? CT_VW : 1;
    t.items = outs / t.w;
    t.tx = vec || sxc == 1 ? (CT_LANES < CT_COL_TX ? CT_LANES : CT_COL_TX) : 1;
    t.seg = CT_LANES / t.tx;
    t.lanes = CT_NTHREADS / t.tx;
    t.cols = (t.items + t.tx - 1) / t.tx;
    return t;
}

/* This thread's work item in column col (-1: none), its row lane's first
 * row in slice s, and the step between its rows. */
CT_DEVICE long long CT_SFX(ct_col_item)(const CtColTile *t, long long col, long long s, long long slices,
                                        long long *r0, long long *step)
{
    long long item = col * t->tx + CT_LANE / t->seg;
    *r0 = s * t->lanes + CT_TID / CT_LANES * t->seg + CT_LANE % t->seg;
    *step = slices * t->lanes;
    return item < t->items ? item : -1;
}

/* The tile's sums over its row lanes, in a fixed order (the seg lanes of a
 * warp, then the warps in order, through red), into part[(c * nsum + j) *
 * slices + s] for slice s. */
CT_DEVICE void CT_SFX(ct_col_sums)(const CtColTile *t, const double *acc, int nsum, double *red, double *part,
                                       long long col, long long s, long long slices, long long C)
{
    long long warp = CT_TID / CT_LANES, ix = CT_LANE / t->seg, nw = CT_NTHREADS / CT_LANES;
    CT_UNROLL
    for (int k = 0; k < 4 * CT_VW; k++)
        if (k < nsum * CT_VW) {
            double v = CT_SEG_SUM(acc[k], t->seg);
            if (CT_LANE % t->seg == 0)
                red[(warp * t->tx + ix) * 4 * CT_VW + k] = v;
        }
    CT_SYNC();
    for (long long k = CT_TID; k < t->tx * nsum * t->w; k += CT_NTHREADS) {
        long long u, j = ct_divmod(k, t->w, &u), i = ct_divmod(j, nsum, &j), item = col * t->tx + i;
        if (item >= t->items)
            continue;
        double v = 0;
        for (long long wi = 0; wi < nw; wi++)
            v += red[(wi * t->tx + i) * 4 * CT_VW + j * CT_VW + u];
        part[((item * t->w + u) * nsum + j) * slices + s] = v;
    }
}

/* The last tile's totals of its column's channels (c0 the first, K of
 * them, each nsum sums over the slices, read past the caches as other
 * blocks wrote them): tot[k * nsum + j], P threads a total, each adding
 * every P-th slice, CT_COL_TAIL loads at a time (a total can be hundreds of
 * slices, each load L2's latency), then the P parts in order (through
 * red). */
#define CT_COL_TAIL 16
CT_DEVICE void CT_SFX(ct_col_totals)(const double *part, long long c0, long long K, int nsum, long long slices,
                                    long long C, double *red, double *tot)
{
    long long n = K * nsum, P = CT_NTHREADS / n > 0 ? CT_NTHREADS / n : 1, sub = CT_TID % P;
    for (long long p = CT_TID / P; p < n; p += CT_NTHREADS / P) {
        const volatile double *src = part + (c0 * nsum + p) * slices;
        double s = 0;
        if (c0 + p / nsum < C)
            for (long long k = sub; k < slices; k += CT_COL_TAIL * P) {
                double v[CT_COL_TAIL];
                CT_UNROLL
                for (int t = 0; t < CT_COL_TAIL; t++)
                    v[t] = k + t * P < slices ? src[k + t * P] : 0;
                CT_UNROLL
                for (int t = 0; t < CT_COL_TAIL; t++)
                    s += v[t];
            }
        if (P == 1)
            tot[p] = s;
        else
            red[CT_TID] = s;
    }
    CT_SYNC();
    if (P > 1) {
        if (sub == 0 && CT_TID / P < n) {
            double s = 0;
            for (long long k = 0; k < P; k++)
                s += red[CT_TID + k];
            tot[CT_TID / P] = s;
        }
        CT_SYNC();
    }
}

/* A tile's end: its sums into part (ct_col_sums), each thread's stores
 * made visible to the device before the block counts the tile in
 * cnt[col] (the program's counters, zero before the launch; the last tile
 * leaves it zero again); whether it was its column's last to finish, whose
 * totals (ct_col_totals) are then at red + CT_LIB_BLOCK. */
CT_DEVICE int CT_SFX(ct_col_end)(const CtColTile *t, const double *acc, int nsum, double *red, double *part,
                                 unsigned *cnt, long long col, long long s, long long slices, long long outs,
                                 int *flag)
{
    CT_SFX(ct_col_sums)(t, acc, nsum, red, part, col, s, slices, outs);
    CT_FENCE();
    CT_SYNC();
    if (CT_TID == 0)
        *flag = CT_ATOMIC_INC(cnt + col) == (unsigned)(slices - 1);
    CT_SYNC();
    if (!*flag)
        return 0;
    if (CT_TID == 0)
        cnt[col] = 0;
    CT_SFX(ct_col_totals)(part, col * t->tx * t->w, t->tx * t->w, nsum, slices, outs, red, red + CT_LIB_BLOCK);
    return 1;
}

/* The shared memory of a statistics kernel: each warp's sums of its work
 * items, and the totals after them. */
#define CT_COL_RED (CT_LIB_BLOCK / 32 * CT_COL_TX * 4 * CT_VW)

/* y[o] = sum of x (times f unless it is NULL: reduce_sum's factor, of x's
 * layout) over the reduced dims: `out` walks the kept dims (x's and y's
 * strides), `red` the reduced ones (x's strides); y is stored as x is
 * (CT_WIDE_X). One output a work item, where the outputs are many next to
 * the reduction's length. */
CT_GLOBAL CT_SFX(ct_reduce_sum)(const void *x, const void *f, void *y, int wide, CtIndex out, CtIndex red, void *side,
                                const void *scale)
{
    CT_LOOP(j, out.n)
    {
        long long xo, yo;
        ct_offsets(&out, j, &xo, &yo);
        float sv = CT_SFX(ct_side_scale)(side, scale, yo, wide);
        CT_SFX(ct_stw)(y, yo, wide & CT_WIDE_X, (float)CT_SFX(ct_sum_range)(x, f, xo, wide, &red, 0, red.n, side, sv));
    }
}

/* Whether a pass over rows of `len` elements (rows: the rows' offsets in
 * two tensors, s0 and s1 the elements' strides along a row) can take CT_VW
 * elements of a row a work item: the elements contiguous in both, len and
 * every row's offsets multiples of CT_VW, the buffers (the np of p, null
 * ones aside) 16-byte aligned. Batch norm's channels-last passes (a row a
 * pixel), layer norm's rows. */
CT_DEVICE int CT_SFX(ct_rows_vec)(const CtIndex *rows, long long len, long long s0, long long s1,
                                  const void *const *p, int np)
{
    return s0 == 1 && s1 == 1 && len % CT_VW == 0 && CT_SFX(ct_steps_vec)(rows, rows->nd) && ct_aligned16(p, np);
}

/* Whether reduce_sum's first stage can take CT_VW outputs of a chunk a
 * work item: ct_last_vec of the outputs (a bias or layer scale's gradient
 * over the rows of [rows, C], a global average pool of [N, H, W, C]), the
 * reduced dims' first offset and strides multiples of CT_VW, the buffers
 * (the np of p, null ones aside) 16-byte aligned. */
CT_DEVICE int CT_SFX(ct_sum_vec)(const CtIndex *out, const CtIndex *red, const void *const *p, int np)
{
    if (!CT_SFX(ct_last_vec)(out) || red->base0 % CT_VW)
        return 0;
    for (long long d = 0; d < red->nd; d++)
        if (red->st0[d] % CT_VW)
            return 0;
    return ct_aligned16(p, np);
}

/* batch_norm's output from x in channel c: x * coef[2c] + coef[2c + 1],
 * then res added where res is not NULL (r its element) and the
 * activation act (an op, -1: none) applied, each part but the last
 * rounded to the storage type as the graph's own nodes would store it
 * (the caller stores the last). */
CT_DEVICE float CT_SFX(ct_bn_y)(float x, const double *coef, long long c, const void *res, float r, int act,
                                int approx)
{
    float v = (float)(x * coef[2 * c] + coef[2 * c + 1]);
    if (res)
        v = CT_LD(CT_ST(v)) + r;
    if (act >= 0)
        v = fx_act(act, approx, CT_LD(CT_ST(v)));
    return v;
}

/* A column sum's map (coef NULL: none): each x loaded becomes batch
 * norm's stored output, y = act(x * coef[2c] + coef[2c + 1]) rounded to
 * CT_T, the walk's first output being channel c0 (each next one the
 * next channel), and the walk sums y and stores it as its side output: a
 * squeeze-excitation's batch norm and its global average pool in one pass
 * (lib_launch.c's lib_bn_pool_cols). */
typedef struct CT_SFX(CtBnMap) {
    const double *coef;
    long long c0;
    int act, approx;
} CT_SFX(CtBnMap);

/* reduce_sum where the reduction is long next to the outputs (a bias
 * gradient: [B*N, C] summed over its rows; a global average pool), column
 * sums (ct_col_tile: `out` walks the outputs, `red` the reduction). Row
 * lane ry's sum of work item j0 (its first output, at x's offset xo0, the
 * side output's scale from y's yo0; the loads mapped by m) over the reduced
 * indices from r0, step apart, `rows` indices' loads at a time (a
 * constant: CT_SUM_ROWS where f is given, CT_SUM_ROWS_X where it is NULL),
 * each output's sum in index order: acc[u] output j0 + u's (the first
 * output alone off the vector path, ct_sum_vec).
 *
 * The loads in flight: at one block an SM (the kernel's registers: over
 * 200 at 16 bits on sm_90) the ~25 KiB an H200 wants (ct_bn_walk's count)
 * are 100 bytes a lane. With f, 4 rows of x and f are 128; x alone at 4
 * rows was 64, so the sums of x alone (bias gradients, pools, the
 * squeeze's pool through its batch norm) take 6 rows, 96 bytes: what the
 * registers allow beside f's walk in the same kernel (ptxas: 236 at 16
 * bits; 7 rows 248, 8 spill). The rows of a lane are summed in order
 * however many are loaded at a time: the same bits. */
#define CT_SUM_ROWS 4
#define CT_SUM_ROWS_X 6
CT_DEVICE void CT_SFX(ct_sum_walk)(const void *x, const void *f, int wide, const CtIndex *red, void *side,
                                   const void *scale, const CT_SFX(CtBnMap) *m, int vec, long long xo0, long long yo0,
                                   long long r0, long long step, int rows, double *acc)
{
    const int wx = wide & CT_WIDE_X, wf = wide & CT_WIDE_W, ws = wide & CT_WIDE_Y;
    float sv[16 / sizeof(CT_T)];
    double mc[2 * (16 / sizeof(CT_T))]; /* the map's coefficients of the item's channels, read once */
    if (m->coef) {
        CT_UNROLL
        for (int u = 0; u < CT_VW; u++)
            if (vec || u == 0) {
                sv[u] = 1.0f;
                mc[2 * u] = m->coef[2 * (m->c0 + u)];
                mc[2 * u + 1] = m->coef[2 * (m->c0 + u) + 1];
            }
    } else if (side && vec)
        CT_SFX(ct_ldv)(scale, yo0, wide & CT_WIDE_R, sv);
    else
        sv[0] = CT_SFX(ct_side_scale)(side, scale, yo0, wide);
    for (long long r = r0; r < red->n; r += rows * step) {
        float xv[CT_SUM_ROWS_X][16 / sizeof(CT_T)], fv[CT_SUM_ROWS_X][16 / sizeof(CT_T)];
        long long o[CT_SUM_ROWS_X];
        CT_UNROLL
        for (int t = 0; t < CT_SUM_ROWS_X; t++)
            if (t < rows && r + t * step < red->n) {
                long long unused;
                ct_offsets(red, r + t * step, &o[t], &unused);
                o[t] += xo0;
                if (vec) {
                    CT_SFX(ct_ldv)(x, o[t], wx, xv[t]);
                    if (f)
                        CT_SFX(ct_ldv)(f, o[t], wf, fv[t]);
                } else {
                    xv[t][0] = CT_SFX(ct_ldw)(x, o[t], wx);
                    fv[t][0] = f ? CT_SFX(ct_ldw)(f, o[t], wf) : 0.0f;
                }
                if (m->coef) {
                    CT_UNROLL
                    for (int u = 0; u < CT_VW; u++)
                        if (vec || u == 0)
                            xv[t][u] = CT_LD(CT_ST(CT_SFX(ct_bn_y)(xv[t][u], mc, u, NULL, 0.0f, m->act, m->approx)));
                }
            }
        CT_UNROLL
        for (int t = 0; t < CT_SUM_ROWS_X; t++)
            if (t < rows && r + t * step < red->n) {
                float sd[16 / sizeof(CT_T)];
                CT_UNROLL
                for (int u = 0; u < CT_VW; u++)
                    if (vec || u == 0) {
                        acc[u] += f ? (double)xv[t][u] * fv[t][u] : (double)xv[t][u];
                        sd[u] = xv[t][u] * sv[u];
                    }
                if (side && vec)
                    CT_SFX(ct_stv)(side, o[t], ws, sd);
                else if (side)
                    CT_SFX(ct_stw)(side, o[t], ws, sd[0]);
            }
    }
}

/* In one launch: each output's sum of x (times f unless it is NULL, of x's
 * strides; with side = x * scale stored as the walk passes unless side is
 * NULL: lib_launch.c's lib_reduce_sum_side) divided by div (1 for a sum,
 * the window's size for a global average pool), into y (CT_T, or float
 * where wide & CT_WIDE_X). part (out.n slices doubles) in scratch, cnt
 * out.n counters (a column's at most). Where coef is not NULL, x is a
 * batch norm's input, whose output (CtBnMap: coef, act and approx; the
 * outputs of `out` are [N, C], C channels) is the side output (x's
 * strides) and what is summed. */
CT_GLOBAL CT_SFX(ct_reduce_sum_cols)(const void *x, const void *f, int wide, double *part, unsigned *cnt, void *y,
                                     CtIndex out, CtIndex red, long long slices, void *side, const void *scale,
                                     double div, const double *coef, long long C, int act, int approx)
{
    CT_SHARED double red_[CT_COL_RED];
    CT_SHARED int last;
    const void *ptrs[4] = {x, f, side, scale};
    CtColTile t = CT_SFX(ct_col_tile)(out.n, out.nd ? out.st0[out.nd - 1] : 0, CT_SFX(ct_sum_vec)(&out, &red, ptrs, 4));
    CT_BLOCK_LOOP(tile, t.cols * slices)
    {
        long long col, r0, step, xo0, yo0, s = ct_divmod(tile, t.cols, &col);
        long long item = CT_SFX(ct_col_item)(&t, col, s, slices, &r0, &step);
        double acc[4 * CT_VW] = {0};
        if (item >= 0) {
            CT_SFX(CtBnMap) m = {coef, coef ? item * t.w % C : 0, act, approx};
            ct_offsets(&out, item * t.w, &xo0, &yo0);
            if (f)
                CT_SFX(ct_sum_walk)(x, f, wide, &red, side, scale, &m, t.w > 1, xo0, yo0, r0, step, CT_SUM_ROWS, acc);
            else
                CT_SFX(ct_sum_walk)(x, 0, wide, &red, side, scale, &m, t.w > 1, xo0, yo0, r0, step, CT_SUM_ROWS_X,
                                    acc);
        }
        if (CT_SFX(ct_col_end)(&t, acc, 1, red_, part, cnt, col, s, slices, out.n, &last)) {
            long long K = t.tx * t.w, c0 = col * K;
            const double *tot = red_ + CT_LIB_BLOCK;
            for (long long k = CT_TID; k < K && c0 + k < out.n; k += CT_NTHREADS) {
                long long unused, yo;
                ct_offsets(&out, c0 + k, &unused, &yo);
                CT_SFX(ct_stw)(y, yo, wide & CT_WIDE_X, (float)(tot[k] / div));
            }
        }
        CT_SYNC();
    }
}

/* The window's maximum position (offset from the plane's base); NaN wins,
 * as in PyTorch. */
CT_DEVICE long long CT_SFX(ct_window_argmax)(const CT_T *x, long long sh, long long sw, CtWindow r)
{
    long long best = r.h0 * sh + r.w0 * sw;
    for (long long h = r.h0; h < r.h1; h++)
        for (long long w = r.w0; w < r.w1; w++) {
            float v = CT_LD(x[h * sh + w * sw]);
            if (v > CT_LD(x[best]) || v != v)
                best = h * sh + w * sw;
        }
    return best;
}

/* Whether a pooling walk ix over [N, H, W, C] (p.c_last) can take CT_VW
 * channels a work item: the channels contiguous in both tensors, C, the
 * other strides, the window's steps a and b and the first offsets
 * multiples of CT_VW, the buffers (the np of ptr, null ones aside) 16-byte
 * aligned. Its index math then serves CT_VW elements, in 16-byte accesses:
 * an element a work item, resnet's max pool gradient did all of it (the
 * position's divisions, the reaching windows', each window's bounds) for
 * every 2-byte store. */
CT_DEVICE int CT_SFX(ct_pool_vec)(const CtIndex *ix, const CtPool *p, long long a, long long b, const void *const *ptr,
                                  int np)
{
    return p->c_last && ix->nd == 4 && CT_SFX(ct_last_vec)(ix) && a % CT_VW == 0 && b % CT_VW == 0 &&
           ct_aligned16(ptr, np);
}

/* ct_window_argmax for CT_VW channels at once: each channel's maximum as
 * stored (best) and its position in the window (at: row * kw + column
 * from the clipped corner). */
CT_DEVICE void CT_SFX(ct_window_max_vec)(const CT_T *x, long long sh, long long sw, CtWindow r, long long kw,
                                         CT_SFX(CtV16) * best, unsigned char *at)
{
    float bv[16 / sizeof(CT_T)];
    CT_V16_LD(*best, x + r.h0 * sh + r.w0 * sw);
    CT_UNROLL
    for (int u = 0; u < CT_VW; u++) {
        bv[u] = CT_LD(best->e[u]);
        at[u] = 0;
    }
    for (long long h = r.h0; h < r.h1; h++)
        for (long long w = r.w0; w < r.w1; w++) {
            CT_SFX(CtV16) v;
            CT_V16_LD(v, x + h * sh + w * sw);
            CT_UNROLL
            for (int u = 0; u < CT_VW; u++) {
                float f = CT_LD(v.e[u]);
                if (f > bv[u] || f != f) {
                    bv[u] = f, best->e[u] = v.e[u];
                    at[u] = (unsigned char)((h - r.h0) * kw + w - r.w0);
                }
            }
        }
}

/* ct_pool, or with am ct_pool_argmax's bytes, CT_VW channels a work item
 * (ct_pool_vec). */
CT_DEVICE void CT_SFX(ct_pool_vec_items)(const CT_T *x, CT_T *y, unsigned char *am, const CtIndex *out, long long sh,
                                         long long sw, CtPool p)
{
    CT_LOOP(i, out->n / CT_VW)
    {
        long long xo, yo, e = i * CT_VW;
        CtWindow r = ct_pool_item(out, &p, e, &xo, &yo);
        CT_SFX(CtV16) v;
        if (p.mode == 1) {
            unsigned char at[16 / sizeof(CT_T)];
            CT_SFX(ct_window_max_vec)(x + xo, sh, sw, r, p.kw, &v, at);
            if (am) {
                CT_UNROLL
                for (int u = 0; u < CT_VW; u++)
                    am[e + u] = at[u];
            }
        } else {
            double acc[16 / sizeof(CT_T)] = {0};
            for (long long h = r.h0; h < r.h1; h++)
                for (long long w = r.w0; w < r.w1; w++) {
                    CT_SFX(CtV16) t;
                    CT_V16_LD(t, x + xo + h * sh + w * sw);
                    CT_UNROLL
                    for (int u = 0; u < CT_VW; u++)
                        acc[u] += CT_LD(t.e[u]);
                }
            CT_UNROLL
            for (int u = 0; u < CT_VW; u++)
                v.e[u] = CT_ST((float)(acc[u] / r.divisor));
        }
        if (y)
            CT_V16_ST(y + yo, v);
    }
}

/* Pooling, one output element a work item: `out` walks [N, C, OH, OW] (or
 * [N, OH, OW, C]: p.c_last) with x's strides on N, C (0 on OH, OW) and y's
 * on all; sh, sw step x's rows and columns. */
CT_GLOBAL CT_SFX(ct_pool)(const CT_T *x, CT_T *y, CtIndex out, long long sh, long long sw, CtPool p)
{
    const void *ptrs[2] = {x, y};
    if (CT_SFX(ct_pool_vec)(&out, &p, sh, sw, ptrs, 2)) {
        CT_SFX(ct_pool_vec_items)(x, y, NULL, &out, sh, sw, p);
        return;
    }
    CT_LOOP(i, out.n)
    {
        long long xo, yo;
        CtWindow r = ct_pool_item(&out, &p, i, &xo, &yo);
        if (p.mode == 1) {
            y[yo] = x[xo + CT_SFX(ct_window_argmax)(x + xo, sh, sw, r)];
            continue;
        }
        double acc = 0;
        for (long long h = r.h0; h < r.h1; h++)
            for (long long w = r.w0; w < r.w1; w++)
                acc += CT_LD(x[xo + h * sh + w * sw]);
        y[yo] = CT_ST((float)(acc / r.divisor));
    }
}

/* Max pooling's argmax, for its gradient: where in its window (row
 * * kw + column, from the window's clipped corner) output element i of the
 * forward's walk (ct_pool's `out`, x's strides) takes its maximum, into
 * am[i], so that the gradient finds it without searching the window again. */
CT_GLOBAL CT_SFX(ct_pool_argmax)(const CT_T *x, unsigned char *am, CtIndex out, long long sh, long long sw, CtPool p)
{
    const void *ptrs[1] = {x};
    if (CT_SFX(ct_pool_vec)(&out, &p, sh, sw, ptrs, 1)) {
        CT_SFX(ct_pool_vec_items)(x, NULL, am, &out, sh, sw, p);
        return;
    }
    CT_LOOP(i, out.n)
    {
        long long xo, yo, m;
        CtWindow r = ct_pool_item(&out, &p, i, &xo, &yo);
        long long col, row = ct_divmod(CT_SFX(ct_window_argmax)(x + xo, sh, sw, r), sh, &col); /* sh > (W-1) sw */
        am[i] = (unsigned char)((row - r.h0) * p.kw + ct_divmod(col, sw, &m) - r.w0);
    }
}

/* Pooling's gradient, one input element a work item (a gather over the
 * windows that hold it, so no atomics): `in` walks [N, C, H, W] (or [N, H,
 * W, C]: p.c_last) with dy's strides on N, C (0 on H, W) and dx's on all;
 * x (max only) shares dx's strides; dh, dw step dy, sh, sw step x and dx.
 * Max pooling takes each window's argmax from am (ct_pool_argmax's, in the
 * order dy's elements are walked there) where it is not NULL. */
/* ct_pool_grad CT_VW channels a work item (ct_pool_vec), max pooling's
 * from am alone. */
CT_DEVICE void CT_SFX(ct_pool_grad_vec)(const unsigned char *am, const CT_T *dy, CT_T *dx, const CtIndex *in,
                                        long long dh, long long dw, CtPool p)
{
    CT_LOOP(i, in->n / CT_VW)
    {
        CtPoolAt a = ct_pool_at(in, &p, i * CT_VW);
        double acc[16 / sizeof(CT_T)] = {0};
        for (long long oh = a.oh0; oh < a.oh1; oh++)
            for (long long ow = a.ow0; ow < a.ow1; ow++) {
                CtWindow r = ct_window(&p, oh, ow);
                if (a.h < r.h0 || a.h >= r.h1 || a.w < r.w0 || a.w >= r.w1)
                    continue;
                CT_SFX(CtV16) g;
                CT_V16_LD(g, dy + a.yo + oh * dh + ow * dw);
                const unsigned char *at = am + ((a.nc * p.OH + oh) * p.OW + ow) * in->dim[3] + a.c;
                long long k = (a.h - r.h0) * p.kw + a.w - r.w0;
                CT_UNROLL
                for (int u = 0; u < CT_VW; u++)
                    if (p.mode != 1)
                        acc[u] += CT_LD(g.e[u]) / r.divisor;
                    else if (at[u] == k)
                        acc[u] += CT_LD(g.e[u]);
            }
        CT_SFX(CtV16) v;
        CT_UNROLL
        for (int u = 0; u < CT_VW; u++)
            v.e[u] = CT_ST((float)acc[u]);
        CT_V16_ST(dx + a.xo, v);
    }
}

CT_GLOBAL CT_SFX(ct_pool_grad)(const CT_T *x, const unsigned char *am, const CT_T *dy, CT_T *dx, CtIndex in,
                               long long dh, long long dw, long long sh, long long sw, CtPool p)
{
    const void *ptrs[2] = {dy, dx};
    if ((p.mode != 1 || am) && CT_SFX(ct_pool_vec)(&in, &p, dh, dw, ptrs, 2)) {
        CT_SFX(ct_pool_grad_vec)(am, dy, dx, &in, dh, dw, p);
        return;
    }
    long long inner = p.c_last ? in.dim[3] : 1;
    CT_LOOP(i, in.n)
    {
        CtPoolAt a = ct_pool_at(&in, &p, i);
        long long plane = a.xo - a.h * sh - a.w * sw;
        double acc = 0;
        for (long long oh = a.oh0; oh < a.oh1; oh++)
            for (long long ow = a.ow0; ow < a.ow1; ow++) {
                CtWindow r = ct_window(&p, oh, ow);
                if (a.h < r.h0 || a.h >= r.h1 || a.w < r.w0 || a.w >= r.w1)
                    continue;
                float g = CT_LD(dy[a.yo + oh * dh + ow * dw]);
                if (p.mode != 1)
                    acc += g / r.divisor;
                else if (am ? am[((a.nc * p.OH + oh) * p.OW + ow) * inner + a.c] == (a.h - r.h0) * p.kw + a.w - r.w0
                            : CT_SFX(ct_window_argmax)(x + plane, sh, sw, r) == a.h * sh + a.w * sw)
                    acc += g;
            }
        dx[a.xo] = CT_ST((float)acc);
    }
}

/* Depthwise convolution over channels-last values (groups = channels, a
 * filter [C, 1, R, S]), the forward and the input gradient by one kernel:
 * output [N, P, Q, C] from input [N, H, W, C] and the taps wt [R, S, C]
 * (the filter laid out so in scratch, so that neighbouring threads read
 * neighbouring channels of a tap). Tap (r, s) of output (p, q) reads input
 * row (p * ah + oh + r * th) / bh and column (q * aw + ow + s * tw) / bw,
 * where those divide and fall inside: the forward's a = stride, b = 1,
 * o = -pad, t = dilation; the input gradient's (from dy, into dx) a = 1,
 * b = stride, o = pad, t = -dilation. A work item is CT_DW_QT neighbouring
 * outputs of a row in one channel; sums in CT_ACC, from the bias (C
 * values, or NULL), over r then s; then activation `act` (an op kind, -1
 * none: inference's convolution with its batch norm folded in, then SiLU)
 * of each sum as stored, so the same bits as its own pass would store.
 * Sizes fit an int (lib_dw_conv_fits).
 *
 * Where the columns step by one (a = b = 1, t = +-1: the stride-1
 * forward and input gradient, ConvNeXt's and most of EfficientNet's), a
 * filter row's S weights and the CT_DW_QT + S - 1 columns under the
 * item's outputs are each loaded once into registers and every product
 * taken from them (unrolled to CT_DW_MAXS, so the indices are constants):
 * a load a product became a load for about two. Elsewhere each product
 * loads its column, divided only where b is not 1.
 *
 * The body of two kernels: ct_dw_conv (no activation: training's) and
 * ct_dw_conv_act, so that the activation's registers (bf16 on sm_90: 84
 * against 48, 3 blocks a multiprocessor against 5) are not the plain
 * convolution's. */
CT_DEVICE void CT_SFX(ct_dw_conv_body)(const CT_T *x, const CT_T *wt, const CT_T *bias, CT_T *y, int N, int H, int W,
                                       int C, int P, int Q, int R, int S, int ah, int aw, int bh, int bw, int oh,
                                       int ow, int th, int tw, int act, int approx)
{
    const int QB = (Q + CT_DW_QT - 1) / CT_DW_QT, slide = aw == 1 && bw == 1 && (tw == 1 || tw == -1);
    CT_LOOP(i, (long long)N * P * QB * C)
    {
        unsigned e = (unsigned)i;
        const int c = (int)(e % (unsigned)C);
        e /= (unsigned)C;
        const int q0 = (int)(e % (unsigned)QB) * CT_DW_QT;
        e /= (unsigned)QB;
        const int p = (int)(e % (unsigned)P), n = (int)(e / (unsigned)P);
        CT_ACC acc[CT_DW_QT];
        CT_UNROLL
        for (int j = 0; j < CT_DW_QT; j++)
            acc[j] = bias ? (CT_ACC)CT_LD(bias[c]) : (CT_ACC)0;
        for (int r = 0; r < R; r++) {
            int hi = p * ah + oh + r * th;
            if (hi < 0 || (bh != 1 && hi % bh))
                continue;
            hi = bh == 1 ? hi : hi / bh;
            if (hi >= H)
                continue;
            const CT_T *xr = x + ((long long)n * H + hi) * W * C + c, *wr = wt + r * S * C + c;
            if (slide) { /* output j, tap s: column w0 + u, u = j + s (t = 1) or j + S - 1 - s (t = -1) */
                const int w0 = q0 + ow - (tw > 0 ? 0 : S - 1);
                CT_ACC wv[CT_DW_MAXS];
                CT_UNROLL
                for (int u = 0; u < CT_DW_MAXS; u++)
                    wv[u] = u < S ? (CT_ACC)CT_LD(wr[(tw > 0 ? u : S - 1 - u) * C]) : (CT_ACC)0;
                CT_UNROLL
                for (int u = 0; u < CT_DW_QT + CT_DW_MAXS - 1; u++) {
                    const int wi = w0 + u, in = u < CT_DW_QT + S - 1 && wi >= 0 && wi < W;
                    const CT_ACC xv = in ? (CT_ACC)CT_LD(xr[(long long)wi * C]) : (CT_ACC)0;
                    CT_UNROLL
                    for (int j = 0; j < CT_DW_QT; j++)
                        if (u - j >= 0 && u - j < CT_DW_MAXS && in && u - j < S)
                            acc[j] += xv * wv[u - j];
                }
                continue;
            }
            for (int s = 0; s < S; s++) {
                const CT_ACC wv = (CT_ACC)CT_LD(wr[s * C]);
                CT_UNROLL
                for (int j = 0; j < CT_DW_QT; j++) {
                    int wi = (q0 + j) * aw + ow + s * tw;
                    if (q0 + j >= Q || wi < 0 || (bw != 1 && wi % bw))
                        continue;
                    wi = bw == 1 ? wi : wi / bw;
                    if (wi < W)
                        acc[j] += (CT_ACC)CT_LD(xr[(long long)wi * C]) * wv;
                }
            }
        }
        CT_T *yr = y + (((long long)n * P + p) * Q + q0) * C + c;
        CT_UNROLL
        for (int j = 0; j < CT_DW_QT; j++)
            if (q0 + j < Q)
                yr[(long long)j * C] =
                    act < 0 ? CT_ST((float)acc[j]) : CT_ST(fx_act(act, approx, CT_LD(CT_ST((float)acc[j]))));
    }
}

CT_GLOBAL CT_SFX(ct_dw_conv)(const CT_T *x, const CT_T *wt, const CT_T *bias, CT_T *y, int N, int H, int W, int C,
                             int P, int Q, int R, int S, int ah, int aw, int bh, int bw, int oh, int ow, int th, int tw)
{
    CT_SFX(ct_dw_conv_body)(x, wt, bias, y, N, H, W, C, P, Q, R, S, ah, aw, bh, bw, oh, ow, th, tw, -1, 0);
}

/* Bounded: sm_90 ptxas gives 55 registers at 16 bits (84 unbounded), 62 at f32 (94), no spill. */
CT_GLOBAL CT_BOUNDS(4) CT_SFX(ct_dw_conv_act)(const CT_T *x, const CT_T *wt, const CT_T *bias, CT_T *y, int N,
                                              int H, int W, int C, int P, int Q, int R, int S, int ah, int aw, int bh,
                                              int bw, int oh, int ow, int th, int tw, int act, int approx)
{
    CT_SFX(ct_dw_conv_body)(x, wt, bias, y, N, H, W, C, P, Q, R, S, ah, aw, bh, bw, oh, ow, th, tw, act, approx);
}

/* Its filter gradient, the first of two stages: work item (k, r, c) sums,
 * over output rows [k * rows, (k + 1) * rows) of the N * P and all their
 * columns, dy[n, p, q, c] times the input under each tap s of filter row r
 * (the forward's rows and columns: p * sh - ph + r * dh, q * sw - pw + s *
 * dw), in CT_ACC, into part[((k * R + r) * S + s) * C + c] as float (half
 * the bytes of double: one wave of work items' partial sums is as large
 * at every stage, and at a late one, many channels over few rows, 40% of
 * what the stage reads); S at most CT_DW_MAXS, each a register. Where the columns step by one (sw = dw =
 * 1), the S inputs under a column's taps stay in registers from one
 * column to the next, which loads the one new input, CT_ELEMENTS columns'
 * loads at a time (with one column's two 2-byte loads in flight a thread,
 * an SM kept some 4 KiB in flight). Where bpart is not NULL, the items of
 * filter row 0 also sum their rows of dy, every row (the bias gradient's
 * partial sums), into bpart[k * C + c]: from the loads the taps' sums
 * make where they make them. Bounded to four blocks an SM (two full waves
 * of the launch's SM_THREADS) where the sums are float, three where
 * double: sm_90's ptxas gives 63 and 76 registers, no spill, against 72
 * and 94 (three blocks and two) unbounded. */
CT_GLOBAL CT_BOUNDS(sizeof(CT_ACC) == 8 ? 3 : 4)
    CT_SFX(ct_dw_conv_grad_w)(const CT_T *x, const CT_T *dy, float *part, float *bpart, int N, int H, int W, int C,
                              int P, int Q, int R, int S, int sh, int sw, int ph, int pw, int dh, int dw, int chunks,
                              int rows)
{
    const int slide = sw == 1 && dw == 1;
    CT_LOOP(i, (long long)chunks * R * C)
    {
        unsigned e = (unsigned)i;
        const int c = (int)(e % (unsigned)C);
        e /= (unsigned)C;
        const int r = (int)(e % (unsigned)R), k = (int)(e / (unsigned)R), bsum = bpart && r == 0;
        const int row1 = (k + 1) * rows < N * P ? (k + 1) * rows : N * P;
        CT_ACC acc[CT_DW_MAXS], gs = 0;
        CT_UNROLL
        for (int s = 0; s < CT_DW_MAXS; s++)
            acc[s] = 0;
        for (int row = k * rows; row < row1; row++) {
            const int n = row / P, hi = (row - n * P) * sh - ph + r * dh, in_h = hi >= 0 && hi < H;
            const CT_T *gr = dy + (long long)row * Q * C + c;
            if (bsum && !(slide && in_h))
                for (int q = 0; q < Q; q++)
                    gs += (CT_ACC)CT_LD(gr[(long long)q * C]);
            if (!in_h)
                continue;
            const CT_T *xr = x + ((long long)n * H + hi) * W * C + c;
            if (slide) { /* win[s]: the input under tap s of column q, column q - pw + s */
                CT_ACC win[CT_DW_MAXS];
                CT_UNROLL
                for (int s = 0; s < CT_DW_MAXS; s++) {
                    const int wi = s - pw - 1; /* column -1's taps: the first column shifts them in place */
                    win[s] = s > 0 && s < S && wi >= 0 && wi < W ? (CT_ACC)CT_LD(xr[(long long)wi * C]) : (CT_ACC)0;
                }
                for (int q0 = 0; q0 < Q; q0 += CT_ELEMENTS) {
                    CT_T in[CT_ELEMENTS], gq[CT_ELEMENTS]; /* as stored: f32's half the registers of CT_ACC */
                    CT_UNROLL
                    for (int j = 0; j < CT_ELEMENTS; j++) {
                        const int q = q0 + j, wi = q - pw + S - 1;
                        in[j] = q < Q && wi >= 0 && wi < W ? xr[(long long)wi * C] : CT_ST(0.0f);
                        gq[j] = q < Q ? gr[(long long)q * C] : CT_ST(0.0f);
                    }
                    CT_UNROLL
                    for (int j = 0; j < CT_ELEMENTS; j++) {
                        const int q = q0 + j;
                        if (q >= Q)
                            break;
                        const CT_ACC xin = (CT_ACC)CT_LD(in[j]), g = (CT_ACC)CT_LD(gq[j]);
                        /* a select per register, not a store at S - 1, which compilers index (local memory) */
                        CT_UNROLL
                        for (int s = 0; s < CT_DW_MAXS; s++)
                            win[s] = s + 1 < CT_DW_MAXS && s + 1 < S ? win[s + 1 < CT_DW_MAXS ? s + 1 : s] : xin;
                        CT_UNROLL
                        for (int s = 0; s < CT_DW_MAXS; s++) {
                            const int ws = q - pw + s;
                            if (s < S && ws >= 0 && ws < W)
                                acc[s] += win[s] * g;
                        }
                        if (bsum)
                            gs += g;
                    }
                }
                continue;
            }
            for (int q = 0; q < Q; q++) {
                const CT_ACC g = (CT_ACC)CT_LD(gr[(long long)q * C]);
                CT_UNROLL
                for (int s = 0; s < CT_DW_MAXS; s++) {
                    int wi = q * sw - pw + s * dw;
                    if (s < S && wi >= 0 && wi < W)
                        acc[s] += (CT_ACC)CT_LD(xr[(long long)wi * C]) * g;
                }
            }
        }
        CT_UNROLL
        for (int s = 0; s < CT_DW_MAXS; s++)
            if (s < S)
                part[(((long long)k * R + r) * S + s) * C + c] = (float)acc[s];
        if (bsum)
            bpart[(long long)k * C + c] = (float)gs;
    }
}

/* The second stage: dw[c, 0, r, s] (the filter's strides s0, s2, s3) from
 * the chunks' sums, a warp an output: lane l adds chunks l, l + CT_LANES,
 * ... in order in double, then the lanes' sums meet in CT_LANE_SUM's fixed
 * order (the same bits on every run); where db is not NULL, db[c] from
 * bpart's likewise, by the warps of tap 0. A thread an output, as before,
 * summed its chunks a load at a time on a few warps where the channels are
 * few and the chunks many (efficientnet_b0's first filter gradient at b256
 * on 132 SMs: 288 outputs of 2607 chunks each, some 9 warps on the whole
 * device); the lanes' loads hit 32 sectors for 128 bytes, of sums that
 * the first stage has just left in L2 (at most some 7.5 MB). */
CT_GLOBAL CT_SFX(ct_dw_conv_grad_w_sum)(const float *part, CT_T *dw, const float *bpart, CT_T *db, int C, int R,
                                        int S, int chunks, long long s0, long long s2, long long s3)
{
    CT_WARP_LOOP(i, (long long)C * R * S)
    {
        const int c = (int)(i % C), t = (int)(i / C), r = t / S, s = t - r * S;
        double sum = 0;
        for (int k = (int)CT_LANE; k < chunks; k += (int)CT_LANES)
            sum += part[((long long)k * R * S + t) * C + c];
        sum = CT_LANE_SUM(sum);
        if (CT_LANE == 0)
            dw[c * s0 + r * s2 + s * s3] = CT_ST((float)sum);
        if (db && t == 0) {
            double b = 0;
            for (int k = (int)CT_LANE; k < chunks; k += (int)CT_LANES)
                b += bpart[(long long)k * C + c];
            b = CT_LANE_SUM(b);
            if (CT_LANE == 0)
                db[c] = CT_ST((float)b);
        }
    }
}

/* Softmax along one dim of length D: `rows` walks the other dims (x's and
 * y's strides); sx, sy step along the dim. */
CT_GLOBAL CT_SFX(ct_softmax)(const CT_T *x, CT_T *y, CtIndex rows, long long D, long long sx, long long sy)
{
    CT_LOOP(r, rows.n)
    {
        long long xo, yo;
        ct_offsets(&rows, r, &xo, &yo);
        float m = CT_LD(x[xo]);
        for (long long i = 1; i < D; i++) {
            float v = CT_LD(x[xo + i * sx]);
            m = v > m ? v : m;
        }
        double sum = 0;
        for (long long i = 0; i < D; i++)
            sum += exp((double)CT_LD(x[xo + i * sx]) - m);
        for (long long i = 0; i < D; i++)
            y[yo + i * sy] = CT_ST((float)(exp((double)CT_LD(x[xo + i * sx]) - m) / sum));
    }
}

/* dx = y * (dy - sum(dy * y)) along the dim; y and dy share strides (st0). */
CT_GLOBAL CT_SFX(ct_softmax_grad)(const CT_T *y, const CT_T *dy, CT_T *dx, CtIndex rows, long long D, long long sy,
                                  long long sd)
{
    CT_LOOP(r, rows.n)
    {
        long long yo, xo;
        double dot = 0;
        ct_offsets(&rows, r, &yo, &xo);
        for (long long i = 0; i < D; i++)
            dot += (double)CT_LD(dy[yo + i * sy]) * CT_LD(y[yo + i * sy]);
        for (long long i = 0; i < D; i++)
            dx[xo + i * sd] = CT_ST((float)(CT_LD(y[yo + i * sy]) * (CT_LD(dy[yo + i * sy]) - dot)));
    }
}

/* The sum of every thread's v, given to all the block's threads: a tree in
 * red[CT_LIB_BLOCK] (the block's), added in the same order on every run. */
CT_DEVICE double CT_SFX(ct_block_sum)(double v, double *red)
{
    long long t = CT_TID, n = CT_NTHREADS, h = 1;
    while (h < n)
        h <<= 1;
    CT_SYNC(); /* every thread has read the last sum out of red[0] */
    red[t] = v;
    CT_SYNC();
    for (h >>= 1; h > 0; h >>= 1) {
        if (t < h && t + h < n)
            red[t] += red[t + h];
        CT_SYNC();
    }
    return red[0];
}

/* layer_norm over a dim of D (the last), a row a warp: `rows` walks the
 * other dims (x's strides, then y's or dx's), sx and sy (sd) step along a
 * row, w and b dense [D]. A row's sums are its lanes', in double, added
 * across the warp by CT_LANE_SUM (every lane gets the same bits). Under amp
 * some operands are f32 while others are 16-bit (x f32 and y bf16, say: the
 * casts around the norm folded into it): the 16-bit ones are CT_T, and the
 * bits of `wide` mark the f32 ones, CT_WIDE_X for x and dx, CT_WIDE_W for
 * w, b, dw and db, CT_WIDE_Y for y and dy. */

/* y[o1(i)] = x[o0(i)] converted over ix, each stored as CT_T or as float
 * where its CT_WIDE_X (x) or CT_WIDE_Y (y) bit is set: a cast and the
 * layout change after it in one pass (the input batch's cast to the AMP
 * dtype and its to_layout to channels-last). */
CT_GLOBAL CT_SFX(ct_copy_cast)(const void *x, void *y, int wide, CtIndex ix)
{
    CT_GROUP_LOOP(i, ix.n)
    {
        long long a[CT_ELEMENTS], b[CT_ELEMENTS];
        float v[CT_ELEMENTS];
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < ix.n) {
                ct_offsets(&ix, CT_ITEM(i, u), &a[u], &b[u]);
                v[u] = CT_SFX(ct_ldw)(x, a[u], wide & CT_WIDE_X);
            }
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < ix.n)
                CT_SFX(ct_stw)(y, b[u], wide & CT_WIDE_Y, v[u]);
    }
}

/* y = x converted, element for element (a cast that no kernel took into
 * its epilogue), each stored as CT_T or as float where its CT_WIDE_X (x)
 * or CT_WIDE_Y (y) bit is set. */
CT_GLOBAL CT_SFX(ct_cast)(const void *x, void *y, int wide, long long n)
{
    CT_LOOP(i, n)
    CT_SFX(ct_stw)(y, i, wide & CT_WIDE_Y, CT_SFX(ct_ldw)(x, i, wide & CT_WIDE_X));
}

/* Element i of layer_norm's input: x's, or with res (not NULL) x's plus
 * res's rounded as x is stored, the residual stream's add before the norm. */
CT_DEVICE float CT_SFX(ct_ln_in)(const void *x, const void *res, long long i, int wx, int wr)
{
    float v = CT_SFX(ct_ldw)(x, i, wx);
    return res ? CT_SFX(ct_rndw)(v + CT_SFX(ct_ldw)(res, i, wr), wx) : v;
}

/* The mean and 1/sqrt(biased variance + eps) of the row at xo of x (plus
 * res: ct_ln_in), two passes as the ref kernel. */
CT_DEVICE void CT_SFX(ct_row_stats)(const void *x, const void *res, long long xo, int wx, int wr, long long D,
                                    long long sx, float eps, double *mean, double *inv)
{
    double s = 0, q = 0;
    for (long long i = CT_LANE; i < D; i += CT_LANES)
        s += CT_SFX(ct_ln_in)(x, res, xo + i * sx, wx, wr);
    *mean = CT_LANE_SUM(s) / (double)D;
    for (long long i = CT_LANE; i < D; i += CT_LANES) {
        double d = CT_SFX(ct_ln_in)(x, res, xo + i * sx, wx, wr) - *mean;
        q += d * d;
    }
    *inv = 1 / sqrt(CT_LANE_SUM(q) / (double)D + eps);
}

/* Layer norm's rows in registers: where a row is contiguous in x and y (and
 * the other operands), its length D a multiple of CT_VW and at most
 * CT_LN_MOST, every row's offsets multiples of CT_VW and the buffers (the
 * np of p, null ones aside) 16-byte aligned, a warp takes ct_ln_tile's
 * rows at a time: slot j (of CT_LN_GROUPS) of a lane holds group
 * CT_LANE % t.lanes + (j % t.gpl) * t.lanes of the lane's row j / t.gpl
 * (ct_ln_row), read from memory once, in 16-byte accesses (two for an f32
 * operand of a 16-bit kernel), all the slots' loads before any row's sums. */
#define CT_LN_GROUPS (CT_LN_MOST / CT_LANES / (16 / (int)sizeof(CT_T)))
CT_DEVICE int CT_SFX(ct_ln_vec)(const CtIndex *rows, long long D, long long sx, long long sy, const void *const *p,
                                int np)
{
    return D <= CT_LN_MOST && CT_SFX(ct_rows_vec)(rows, D, sx, sy, p, np);
}

/* The row of warp item w's that the lane holds in the slots j of
 * j / t.gpl == kr; the group of the row in slot j (ng or more: none). */
CT_DEVICE long long CT_SFX(ct_ln_row)(CtLnTile t, long long w, int kr)
{
    return w * t.rows + (long long)kr * (CT_LANES / t.lanes) + CT_LANE / t.lanes;
}
CT_DEVICE int CT_SFX(ct_ln_group)(CtLnTile t, int j) { return (int)CT_LANE % t.lanes + j % t.gpl * t.lanes; }
/* Slot j's group where it holds one of held row kr's ng, else -1. */
CT_DEVICE int CT_SFX(ct_ln_slot)(CtLnTile t, int j, int kr, int ng)
{
    int g = CT_SFX(ct_ln_group)(t, j);
    return j / t.gpl == kr && g < ng ? g : -1;
}

/* The mean and 1/sqrt(biased variance + eps) of the held row kr (v[j]:
 * the slots of j / t.gpl == kr), two passes, each lane's terms in its
 * groups' order, then the row's lanes' sums (CT_SEG_SUM); every lane of
 * the warp takes part. The same bits as a row a warp: the lanes past a
 * row's groups added zeros. */
CT_DEVICE void CT_SFX(ct_held_stats)(float v[][16 / sizeof(CT_T)], CtLnTile t, int kr, int ng, long long D,
                                     float eps, double *mean, double *inv)
{
    double s = 0, q = 0;
    CT_UNROLL
    for (int j = 0; j < CT_LN_GROUPS; j++)
        if (CT_SFX(ct_ln_slot)(t, j, kr, ng) >= 0) {
            CT_UNROLL
            for (int u = 0; u < CT_VW; u++)
                s += v[j][u];
        }
    *mean = CT_SEG_SUM(s, t.lanes) / (double)D;
    CT_UNROLL
    for (int j = 0; j < CT_LN_GROUPS; j++)
        if (CT_SFX(ct_ln_slot)(t, j, kr, ng) >= 0) {
            CT_UNROLL
            for (int u = 0; u < CT_VW; u++) {
                double d = v[j][u] - *mean;
                q += d * d;
            }
        }
    *inv = 1 / sqrt(CT_SEG_SUM(q, t.lanes) / (double)D + eps);
}

/* ct_layer_norm on rows in registers (ct_ln_vec). */
CT_DEVICE void CT_SFX(ct_layer_norm_vec)(const void *x, const void *w, const void *b, void *y, int wide,
                                         const void *res, void *sum, CT_T *low, const CtIndex *rows, long long D,
                                         float eps)
{
    const int wx = wide & CT_WIDE_X, ww = wide & CT_WIDE_W, wy = wide & CT_WIDE_Y, wr = wide & CT_WIDE_R;
    const int ng = (int)(D / CT_VW);
    const CtLnTile t = ct_ln_tile(ng, (int)CT_LANES, CT_LN_GROUPS, CT_LN_ROWS);
    CT_WARP_LOOP(it, (rows->n + t.rows - 1) / t.rows)
    {
        float v[CT_LN_GROUPS][16 / sizeof(CT_T)] = {{0}}; /* a row past the last: its sums are not used */
        CT_UNROLL
        for (int kr = 0; kr < CT_LN_ROWS; kr++) {
            long long r = CT_SFX(ct_ln_row)(t, it, kr), xo, yo;
            if (kr >= t.k || r >= rows->n)
                break;
            ct_offsets(rows, r, &xo, &yo);
            CT_UNROLL
            for (int j = 0; j < CT_LN_GROUPS; j++) {
                int g = CT_SFX(ct_ln_slot)(t, j, kr, ng);
                if (g < 0)
                    continue;
                CT_SFX(ct_ldv)(x, xo + g * CT_VW, wx, v[j]);
                if (res) {
                    float rv[16 / sizeof(CT_T)];
                    CT_SFX(ct_ldv)(res, xo + g * CT_VW, wr, rv);
                    CT_UNROLL
                    for (int u = 0; u < CT_VW; u++)
                        v[j][u] = CT_SFX(ct_rndw)(v[j][u] + rv[u], wx);
                }
            }
        }
        CT_UNROLL
        for (int kr = 0; kr < CT_LN_ROWS; kr++) {
            if (kr >= t.k)
                break;
            long long r = CT_SFX(ct_ln_row)(t, it, kr), xo, yo;
            double mean, inv;
            CT_SFX(ct_held_stats)(v, t, kr, ng, D, eps, &mean, &inv);
            if (r >= rows->n)
                continue;
            ct_offsets(rows, r, &xo, &yo);
            CT_UNROLL
            for (int j = 0; j < CT_LN_GROUPS; j++) {
                int g = CT_SFX(ct_ln_slot)(t, j, kr, ng);
                if (g < 0)
                    continue;
                float wv[16 / sizeof(CT_T)], bv[16 / sizeof(CT_T)], out[16 / sizeof(CT_T)];
                CT_SFX(ct_ldv)(w, g * CT_VW, ww, wv);
                CT_SFX(ct_ldv)(b, g * CT_VW, ww, bv);
                CT_UNROLL
                for (int u = 0; u < CT_VW; u++)
                    out[u] = (float)((v[j][u] - mean) * inv * wv[u] + bv[u]);
                if (sum)
                    CT_SFX(ct_stv)(sum, xo + g * CT_VW, wx, v[j]);
                CT_SFX(ct_stv)(y, yo + g * CT_VW, wy, out);
                if (low)
                    CT_SFX(ct_stv)(low, yo + g * CT_VW, 0, out);
            }
        }
    }
}

/* With res (x's strides, stored as CT_T or as float where CT_WIDE_R; NULL:
 * none) the norm is of x + res, stored into sum (x's dtype and strides;
 * NULL: not stored): the residual add before a pre-norm block's norm. An
 * element is stored after its lane loaded it, so sum may be x and y res,
 * element for element. y again as CT_T into low (y's strides; NULL: not
 * stored): a float y (autocast's) and its cast for a 16-bit reader, low
 * perhaps x, element for element. */
CT_GLOBAL CT_SFX(ct_layer_norm)(const void *x, const void *w, const void *b, void *y, int wide, const void *res,
                                void *sum, CT_T *low, CtIndex rows, long long D, long long sx, long long sy, float eps)
{
    const void *ptrs[7] = {x, w, b, y, res, sum, low};
    if (CT_SFX(ct_ln_vec)(&rows, D, sx, sy, ptrs, 7)) {
        CT_SFX(ct_layer_norm_vec)(x, w, b, y, wide, res, sum, low, &rows, D, eps);
        return;
    }
    const int wx = wide & CT_WIDE_X, ww = wide & CT_WIDE_W, wy = wide & CT_WIDE_Y, wr = wide & CT_WIDE_R;
    CT_WARP_LOOP(r, rows.n)
    {
        long long xo, yo;
        double mean, inv;
        ct_offsets(&rows, r, &xo, &yo);
        CT_SFX(ct_row_stats)(x, res, xo, wx, wr, D, sx, eps, &mean, &inv);
        for (long long i = CT_LANE; i < D; i += CT_ELEMENTS * CT_LANES) { /* loads first, as CT_GROUP_LOOP's */
            float xv[CT_ELEMENTS], wv[CT_ELEMENTS], bv[CT_ELEMENTS];
            CT_UNROLL
            for (int u = 0; u < CT_ELEMENTS; u++)
                if (i + u * CT_LANES < D) {
                    long long c = i + u * CT_LANES;
                    xv[u] = CT_SFX(ct_ln_in)(x, res, xo + c * sx, wx, wr);
                    wv[u] = CT_SFX(ct_ldw)(w, c, ww), bv[u] = CT_SFX(ct_ldw)(b, c, ww);
                }
            CT_UNROLL
            for (int u = 0; u < CT_ELEMENTS; u++)
                if (i + u * CT_LANES < D) {
                    long long c = i + u * CT_LANES;
                    float out = (float)((xv[u] - mean) * inv * wv[u] + bv[u]);
                    if (sum)
                        CT_SFX(ct_stw)(sum, xo + c * sx, wx, xv[u]);
                    CT_SFX(ct_stw)(y, yo + c * sy, wy, out);
                    if (low)
                        CT_SFX(ct_stw)(low, yo + c * sy, 0, out);
                }
        }
    }
}

/* ct_layer_norm_grad_x on rows in registers (ct_ln_vec), up to `most` rows
 * a lane (a constant at each call: the registers the kernel takes). Once
 * the row's sums have it, dy * w replaces dy in the registers, rounded to
 * float: the last pass loads neither w nor dy again. */
CT_DEVICE void CT_SFX(ct_layer_norm_grad_x_vec)(const void *x, const void *w, const void *dy, void *dx, int wide,
                                                const void *res, CT_T *low, float *stats, const CtIndex *rows,
                                                long long D, float eps, const int most)
{
    const int wx = wide & CT_WIDE_X, ww = wide & CT_WIDE_W, wy = wide & CT_WIDE_Y;
    const int ng = (int)(D / CT_VW);
    const CtLnTile t = ct_ln_tile(ng, (int)CT_LANES, CT_LN_GROUPS, most);
    CT_WARP_LOOP(it, (rows->n + t.rows - 1) / t.rows)
    {
        /* a row past the last: its sums are not used */
        float xv[CT_LN_GROUPS][16 / sizeof(CT_T)] = {{0}}, gv[CT_LN_GROUPS][16 / sizeof(CT_T)] = {{0}};
        CT_UNROLL
        for (int kr = 0; kr < most; kr++) {
            long long r = CT_SFX(ct_ln_row)(t, it, kr), xo, o;
            if (kr >= t.k || r >= rows->n)
                break;
            ct_offsets(rows, r, &xo, &o);
            CT_UNROLL
            for (int j = 0; j < CT_LN_GROUPS; j++) {
                int g = CT_SFX(ct_ln_slot)(t, j, kr, ng);
                if (g < 0)
                    continue;
                CT_SFX(ct_ldv)(x, xo + g * CT_VW, wx, xv[j]);
                CT_SFX(ct_ldv)(dy, xo + g * CT_VW, wy, gv[j]);
            }
        }
        CT_UNROLL
        for (int kr = 0; kr < most; kr++) {
            if (kr >= t.k)
                break;
            long long r = CT_SFX(ct_ln_row)(t, it, kr), xo, o;
            double mean, inv, mg = 0, mgx = 0;
            CT_SFX(ct_held_stats)(xv, t, kr, ng, D, eps, &mean, &inv);
            CT_UNROLL
            for (int j = 0; j < CT_LN_GROUPS; j++) {
                int g = CT_SFX(ct_ln_slot)(t, j, kr, ng);
                if (g < 0)
                    continue;
                float wv[16 / sizeof(CT_T)];
                CT_SFX(ct_ldv)(w, g * CT_VW, ww, wv);
                CT_UNROLL
                for (int u = 0; u < CT_VW; u++) {
                    double gi = (double)gv[j][u] * wv[u];
                    mg += gi;
                    mgx += gi * (xv[j][u] - mean) * inv;
                    gv[j][u] = (float)gi;
                }
            }
            mg = CT_SEG_SUM(mg, t.lanes) / (double)D;
            mgx = CT_SEG_SUM(mgx, t.lanes) / (double)D;
            if (r >= rows->n)
                continue;
            ct_offsets(rows, r, &xo, &o);
            CT_UNROLL
            for (int j = 0; j < CT_LN_GROUPS; j++) {
                int g = CT_SFX(ct_ln_slot)(t, j, kr, ng);
                if (g < 0)
                    continue;
                float rv[16 / sizeof(CT_T)], out[16 / sizeof(CT_T)];
                if (res)
                    CT_SFX(ct_ldv)(res, o + g * CT_VW, wx, rv);
                CT_UNROLL
                for (int u = 0; u < CT_VW; u++) {
                    double xhat = (xv[j][u] - mean) * inv;
                    out[u] = (float)(inv * (gv[j][u] - mg - xhat * mgx));
                    if (res)
                        out[u] = CT_SFX(ct_rndw)(out[u], wx) + rv[u];
                }
                CT_SFX(ct_stv)(dx, o + g * CT_VW, wx, out);
                if (low) {
                    CT_SFX(CtV16) lv;
                    CT_UNROLL
                    for (int u = 0; u < CT_VW; u++)
                        lv.e[u] = CT_ST(CT_SFX(ct_rndw)(out[u], wx));
                    CT_V16_ST(low + o + g * CT_VW, lv);
                }
            }
            if (CT_LANE % t.lanes == 0) {
                stats[2 * r] = (float)mean;
                stats[2 * r + 1] = (float)inv;
            }
        }
    }
}

/* layer_norm's dx; x and dy share strides. Each row's mean and 1/std go to
 * stats[2r], stats[2r+1] for the weight kernels. With res (dx's dtype and
 * strides; NULL: none) dx holds dx + res, the residual stream's gradient,
 * and with low (CT_T, dx's strides; NULL: none) that sum cast too, each
 * rounded as the nodes would store them. */
CT_DEVICE void CT_SFX(ct_ln_grad_x)(const void *x, const void *w, const void *dy, void *dx, int wide, const void *res,
                                     CT_T *low, float *stats, CtIndex rows, long long D, long long sx, long long sd,
                                     float eps, const int most)
{
    const void *ptrs[6] = {x, w, dy, dx, res, low};
    if (CT_SFX(ct_ln_vec)(&rows, D, sx, sd, ptrs, 6)) {
        CT_SFX(ct_layer_norm_grad_x_vec)(x, w, dy, dx, wide, res, low, stats, &rows, D, eps, most);
        return;
    }
    const int wx = wide & CT_WIDE_X, ww = wide & CT_WIDE_W, wy = wide & CT_WIDE_Y;
    CT_WARP_LOOP(r, rows.n)
    {
        long long xo, o;
        double mean, inv, mg = 0, mgx = 0;
        ct_offsets(&rows, r, &xo, &o);
        CT_SFX(ct_row_stats)(x, NULL, xo, wx, 0, D, sx, eps, &mean, &inv);
        for (long long i = CT_LANE; i < D; i += CT_LANES) {
            double gi = (double)CT_SFX(ct_ldw)(dy, xo + i * sx, wy) * CT_SFX(ct_ldw)(w, i, ww);
            mg += gi;
            mgx += gi * (CT_SFX(ct_ldw)(x, xo + i * sx, wx) - mean) * inv;
        }
        mg = CT_LANE_SUM(mg) / (double)D;
        mgx = CT_LANE_SUM(mgx) / (double)D;
        for (long long i = CT_LANE; i < D; i += CT_ELEMENTS * CT_LANES) {
            float xv[CT_ELEMENTS], gv[CT_ELEMENTS], wv[CT_ELEMENTS];
            CT_UNROLL
            for (int u = 0; u < CT_ELEMENTS; u++)
                if (i + u * CT_LANES < D) {
                    long long c = i + u * CT_LANES;
                    xv[u] = CT_SFX(ct_ldw)(x, xo + c * sx, wx), gv[u] = CT_SFX(ct_ldw)(dy, xo + c * sx, wy);
                    wv[u] = CT_SFX(ct_ldw)(w, c, ww);
                }
            CT_UNROLL
            for (int u = 0; u < CT_ELEMENTS; u++)
                if (i + u * CT_LANES < D) {
                    long long at = o + (i + u * CT_LANES) * sd;
                    double xhat = (xv[u] - mean) * inv;
                    float v = (float)(inv * ((double)gv[u] * wv[u] - mg - xhat * mgx));
                    if (res)
                        v = CT_SFX(ct_rndw)(v, wx) + CT_SFX(ct_ldw)(res, at, wx);
                    CT_SFX(ct_stw)(dx, at, wx, v);
                    if (low)
                        low[at] = CT_ST(CT_SFX(ct_rndw)(v, wx));
                }
        }
        if (CT_LANE == 0) {
            stats[2 * r] = (float)mean;
            stats[2 * r + 1] = (float)inv;
        }
    }
}

/* Where ct_ln_tile gives rows in registers k > 1 rows a lane (lib_launch_norm.c
 * says which), ct_layer_norm_grad_x_rows takes them; the rest, one a lane
 * at fewer registers. */
CT_GLOBAL CT_SFX(ct_layer_norm_grad_x)(const void *x, const void *w, const void *dy, void *dx, int wide,
                                       const void *res, CT_T *low, float *stats, CtIndex rows, long long D,
                                       long long sx, long long sd, float eps)
{
    CT_SFX(ct_ln_grad_x)(x, w, dy, dx, wide, res, low, stats, rows, D, sx, sd, eps, 1);
}
CT_GLOBAL CT_SFX(ct_layer_norm_grad_x_rows)(const void *x, const void *w, const void *dy, void *dx, int wide,
                                            const void *res, CT_T *low, float *stats, CtIndex rows, long long D,
                                            long long sx, long long sd, float eps)
{
    CT_SFX(ct_ln_grad_x)(x, w, dy, dx, wide, res, low, stats, rows, D, sx, sd, eps, CT_LN_ROWS);
}

/* layer_norm's dweight and dbias over all rows, column sums (ct_col_tile:
 * the columns the outputs, the rows the reduction) from the stats
 * ct_layer_norm_grad_x left: dw = sum dy (x - mean) inv, db = sum dy.
 * Row lane ry's sums of work item c0 (its first column) over row n - 1 -
 * r0 and every step-th before it, last to first (ct_bn_walk's order, for
 * the L2: ct_layer_norm_grad_x has just read the last rows), CT_SUM_ROWS
 * rows' loads at a time, each column's sums in that order: acc[u] and
 * acc[CT_VW + u] column c0 + u's (the first column alone off the vector
 * path, where the rows are not in registers for ct_layer_norm_grad_x
 * either: ct_ln_vec). */
CT_DEVICE void CT_SFX(ct_ln_w_walk)(const void *x, const void *dy, int wide, const float *stats, const CtIndex *rows,
                                    long long sx, int vec, long long c0, long long r0, long long step, double *acc)
{
    const int wx = wide & CT_WIDE_X, wy = wide & CT_WIDE_Y;
    for (long long r = rows->n - 1 - r0; r >= 0; r -= CT_SUM_ROWS * step) {
        float xv[CT_SUM_ROWS][16 / sizeof(CT_T)], gv[CT_SUM_ROWS][16 / sizeof(CT_T)];
        CT_UNROLL
        for (int t = 0; t < CT_SUM_ROWS; t++)
            if (r - t * step >= 0) {
                long long xo, unused;
                ct_offsets(rows, r - t * step, &xo, &unused);
                if (vec) {
                    CT_SFX(ct_ldv)(x, xo + c0, wx, xv[t]);
                    CT_SFX(ct_ldv)(dy, xo + c0, wy, gv[t]);
                } else {
                    xv[t][0] = CT_SFX(ct_ldw)(x, xo + c0 * sx, wx);
                    gv[t][0] = CT_SFX(ct_ldw)(dy, xo + c0 * sx, wy);
                }
            }
        CT_UNROLL
        for (int t = 0; t < CT_SUM_ROWS; t++)
            if (r - t * step >= 0) {
                float mean = stats[2 * (r - t * step)], inv = stats[2 * (r - t * step) + 1];
                CT_UNROLL
                for (int u = 0; u < CT_VW; u++)
                    if (vec || u == 0) {
                        double g = gv[t][u];
                        acc[u] += g * (xv[t][u] - mean) * inv;
                        acc[CT_VW + u] += g;
                    }
            }
    }
}

/* In one launch: part (2 D slices doubles) in scratch, cnt D counters (a
 * column's at most), dw and db stored as CT_T or as float where wide. */
CT_GLOBAL CT_SFX(ct_layer_norm_grad_w)(const void *x, const void *dy, int wide, const float *stats, double *part,
                                       unsigned *cnt, void *dw, void *db, CtIndex rows, long long D, long long sx,
                                       long long slices)
{
    CT_SHARED double red[CT_COL_RED];
    CT_SHARED int last;
    const void *ptrs[2] = {x, dy};
    CtColTile t = CT_SFX(ct_col_tile)(D, sx, CT_SFX(ct_ln_vec)(&rows, D, sx, 1, ptrs, 2));
    const int ww = wide & CT_WIDE_W;
    CT_BLOCK_LOOP(tile, t.cols * slices)
    {
        long long col, r0, step, s = ct_divmod(tile, t.cols, &col);
        long long item = CT_SFX(ct_col_item)(&t, col, s, slices, &r0, &step);
        double acc[4 * CT_VW] = {0};
        if (item >= 0)
            CT_SFX(ct_ln_w_walk)(x, dy, wide, stats, &rows, sx, t.w > 1, item * t.w, r0, step, acc);
        if (CT_SFX(ct_col_end)(&t, acc, 2, red, part, cnt, col, s, slices, D, &last)) {
            long long K = t.tx * t.w, c0 = col * K;
            const double *tot = red + CT_LIB_BLOCK;
            for (long long k = CT_TID; k < K && c0 + k < D; k += CT_NTHREADS) {
                CT_SFX(ct_stw)(dw, c0 + k, ww, (float)tot[2 * k]);
                CT_SFX(ct_stw)(db, c0 + k, ww, (float)tot[2 * k + 1]);
            }
        }
        CT_SYNC();
    }
}

/* group_norm's work items are the groups: `rows` walks [N, groups] to each
 * one's first element, `inner` its [C / groups, S...] values (strides of x,
 * then of y or dx); a value's channel in its group is its index over
 * inner.n / cg, cg channels a group. */

/* The mean and 1/sqrt(biased variance + eps) of the group at x, two passes
 * as the ref kernel. */
CT_DEVICE void CT_SFX(ct_group_stats)(const CT_T *x, const CtIndex *inner, float eps, double *red, double *mean,
                                      double *inv)
{
    long long a, unused;
    double s = 0, q = 0;
    for (long long j = CT_TID; j < inner->n; j += CT_NTHREADS) {
        ct_offsets(inner, j, &a, &unused);
        s += CT_LD(x[a]);
    }
    *mean = CT_SFX(ct_block_sum)(s, red) / (double)inner->n;
    for (long long j = CT_TID; j < inner->n; j += CT_NTHREADS) {
        ct_offsets(inner, j, &a, &unused);
        double d = CT_LD(x[a]) - *mean;
        q += d * d;
    }
    *inv = 1 / sqrt(CT_SFX(ct_block_sum)(q, red) / (double)inner->n + eps);
}

/* group_norm, a group a block: w and b dense [C], or NULL (1 and 0). */
CT_GLOBAL CT_SFX(ct_group_norm)(const CT_T *x, const CT_T *w, const CT_T *b, CT_T *y, CtIndex rows, CtIndex inner,
                                long long cg, float eps)
{
    CT_SHARED double red[CT_LIB_BLOCK];
    CT_BLOCK_LOOP(r, rows.n)
    {
        long long xo, yo, c0 = r % rows.dim[1] * cg, S = inner.n / cg;
        double mean, inv;
        ct_offsets(&rows, r, &xo, &yo);
        CT_SFX(ct_group_stats)(x + xo, &inner, eps, red, &mean, &inv);
        for (long long j = CT_TID; j < inner.n; j += CT_NTHREADS) {
            long long a, o, c = c0 + j / S;
            ct_offsets(&inner, j, &a, &o);
            double wc = w ? (double)CT_LD(w[c]) : 1, bc = b ? (double)CT_LD(b[c]) : 0;
            y[yo + o] = CT_ST((float)((CT_LD(x[xo + a]) - mean) * inv * wc + bc));
        }
    }
}

/* group_norm's dx, a group a block: layer_norm's formulas over the group,
 * the weight per channel (NULL: 1); x and dy share strides (st0). Each group's mean
 * and 1/std go to stats[2r], stats[2r+1] for ct_group_norm_grad_w. */
CT_GLOBAL CT_SFX(ct_group_norm_grad_x)(const CT_T *x, const CT_T *w, const CT_T *dy, CT_T *dx, double *stats,
                                       CtIndex rows, CtIndex inner, long long cg, float eps)
{
    CT_SHARED double red[CT_LIB_BLOCK];
    CT_BLOCK_LOOP(r, rows.n)
    {
        long long xo, o, a, d, c0 = r % rows.dim[1] * cg, S = inner.n / cg;
        double mean, inv, mg = 0, mgx = 0;
        ct_offsets(&rows, r, &xo, &o);
        CT_SFX(ct_group_stats)(x + xo, &inner, eps, red, &mean, &inv);
        for (long long j = CT_TID; j < inner.n; j += CT_NTHREADS) {
            ct_offsets(&inner, j, &a, &d);
            double g = (double)CT_LD(dy[xo + a]) * (w ? (double)CT_LD(w[c0 + j / S]) : 1);
            mg += g;
            mgx += g * (CT_LD(x[xo + a]) - mean) * inv;
        }
        mg = CT_SFX(ct_block_sum)(mg, red) / (double)inner.n;
        mgx = CT_SFX(ct_block_sum)(mgx, red) / (double)inner.n;
        for (long long j = CT_TID; j < inner.n; j += CT_NTHREADS) {
            ct_offsets(&inner, j, &a, &d);
            double xhat = (CT_LD(x[xo + a]) - mean) * inv;
            double g = (double)CT_LD(dy[xo + a]) * (w ? (double)CT_LD(w[c0 + j / S]) : 1);
            dx[o + d] = CT_ST((float)(inv * (g - mg - xhat * mgx)));
        }
        if (CT_TID == 0) {
            stats[2 * r] = mean;
            stats[2 * r + 1] = inv;
        }
    }
}

/* group_norm's dweight and dbias, a channel a block, from the stats
 * ct_group_norm_grad_x left: `outer` walks [N, S...] with x's and dy's
 * strides, sxc steps between channels, cg channels a group. */
CT_GLOBAL CT_SFX(ct_group_norm_grad_w)(const CT_T *x, const CT_T *dy, const double *stats, CT_T *dw, CT_T *db,
                                       CtIndex outer, long long C, long long sxc, long long cg)
{
    CT_SHARED double red[CT_LIB_BLOCK];
    CT_BLOCK_LOOP(c, C)
    {
        long long a, unused;
        double sw = 0, sb = 0;
        for (long long j = CT_TID; j < outer.n; j += CT_NTHREADS) {
            long long r = j / (outer.n / outer.dim[0]) * (C / cg) + c / cg; /* the group of j's sample */
            ct_offsets(&outer, j, &a, &unused);
            double g = CT_LD(dy[a + c * sxc]);
            sw += g * (CT_LD(x[a + c * sxc]) - stats[2 * r]) * stats[2 * r + 1];
            sb += g;
        }
        sw = CT_SFX(ct_block_sum)(sw, red);
        sb = CT_SFX(ct_block_sum)(sb, red);
        if (CT_TID == 0) {
            dw[c] = CT_ST((float)sw);
            db[c] = CT_ST((float)sb);
        }
    }
}

/* batch_norm and its gradient in two launches each, for either layout but
 * made for channels-last, where a channel's values are C apart: work items
 * pair a channel with rows (the other dims, walked by `rows`: x's strides,
 * then y's or dx's), the channel fastest, so that neighbouring threads
 * read neighbouring channels of one row. sxc steps between x's channels
 * (dy shares x's strides), syc between y's or dx's.
 *
 * First the sums of each channel in double, with its coefficients after
 * them in the same launch (column sums, ct_col_tile: the channels are the
 * outputs, the rows the reduction): x and x^2 (ct_bn_stats), for the
 * gradient also dy and dy x (ct_bn_grad_stats). An eval forward has no
 * sums: ct_bn_coef takes the running statistics. Then the elementwise pass
 * (ct_bn_apply, ct_bn_grad_apply).
 *
 * A batch_norm_grad whose dy is the act_grad of the batch norm's
 * activation, which only it reads (passes/fuse.h's
 * fuse_bn_act_grad_steps), runs with it as one: the forward's statistics
 * again, then the gradient's kernels given the forward's coefficients
 * `fwd` and the activation: where they read dy they take act'(z) dy,
 * z = x * fwd[2c] + fwd[2c + 1], each rounded to the storage type as the
 * nodes would have stored them (ct_bn_dz); neither is written (relu's
 * gradient from z is its gradient from relu(z)). */
CT_DEVICE float CT_SFX(ct_bn_dz)(float x, float dy, const double *fwd, long long c, int act, int approx)
{
    if (!fwd)
        return dy;
    float z = CT_LD(CT_ST((float)(x * fwd[2 * c] + fwd[2 * c + 1])));
    return CT_LD(CT_ST(fx_act_grad(act, approx, z, dy)));
}

/* Where a batch_norm_grad's dy comes from when no node's output holds
 * it, each part rounded to the storage type as the nodes would store it:
 *   - hw 0, a set: a residual block's gradient sum, which other steps read
 *     too (launch_plan.c's bn_sum_grad_step): dy = act'(z) (a + b) (act -1:
 *     the sum alone; a, b and z in x's strides), computed by the
 *     statistics kernel, which stores it for its apply pass and dy's other
 *     readers;
 *   - hw > 0: a squeeze-excitation's gradient, read by nothing else
 *     (bn_excite_grad_step): dy s + p / hw, s = a and p = b per sample and
 *     channel ([N, C]; a NULL: p / hw alone, a global pool's gradient),
 *     recomputed by each pass where it reads dy (then act'(z), ct_bn_dz).
 * Each pass's rows are the [N, hw] pixels in order. */
typedef struct CT_SFX(CtBnDy) {
    const CT_T *a, *b, *z;
    long long hw;
} CT_SFX(CtBnDy);

/* An excitation's dy (e->hw > 0) at row `row`, channel c of C, from the
 * loaded dy (unread where e->a is NULL). */
CT_DEVICE float CT_SFX(ct_bn_excite)(const CT_SFX(CtBnDy) *e, float dy, long long row, long long C, long long c)
{
    long long nc = row / e->hw * C + c;
    float p = CT_LD(CT_ST(CT_LD(e->b[nc]) / (float)e->hw));
    return e->a ? CT_LD(CT_ST(CT_LD(CT_ST(dy * CT_LD(e->a[nc]))) + p)) : p;
}

/* Row lane ry's sums of work item c0 (its first channel) over row n - 1 -
 * r0 and every step-th before it, last to first, CT_BN_ROWS rows' loads
 * at a time, each channel's sums in that order:
 * acc[j * CT_VW + u] sum j of channel c0 + u (the first channel alone off
 * the vector path). grad a constant, which leaves the forward's kernel
 * the registers of two sums, not four. Each lane keeps 8 x 16 bytes in
 * flight (16 x 16 for the gradient): the tiles are few, 2-8 an SM of an
 * H200 (lib_build.h's lib_col_plan), and what its 4.8 TB/s at HBM's
 * latency needs is some 25 KiB an SM.
 *
 * Backwards because of the L2 (50 MB on an H200): the elementwise pass
 * after this one reads first row to last, so the rows this one reads last
 * are what it finds in the cache; and a step before that wrote x (or dy)
 * first row to last left its last rows there. Read forwards, a tensor
 * over the cache's size comes from memory whole both times. */
#define CT_BN_ROWS 8
CT_DEVICE void CT_SFX(ct_bn_walk)(const CT_T *x, const CT_T *dy, const double *fwd, const CT_SFX(CtBnDy) *e,
                                  int act, int approx, const CtIndex *rows, long long C, long long sxc, int vec,
                                  long long c0, long long r0, long long step, int grad, double *acc)
{
    for (long long r = rows->n - 1 - r0; r >= 0; r -= CT_BN_ROWS * step) {
        CT_SFX(CtV16) xv[CT_BN_ROWS], dv[CT_BN_ROWS];
        CT_UNROLL
        for (int t = 0; t < CT_BN_ROWS; t++)
            if (r - t * step >= 0) {
                long long xo, o;
                ct_offsets(rows, r - t * step, &xo, &o);
                if (vec) {
                    CT_V16_LD(xv[t], x + xo + c0);
                    if (grad && dy)
                        CT_V16_LD(dv[t], dy + xo + c0);
                } else {
                    xv[t].e[0] = x[xo + c0 * sxc];
                    if (grad && dy)
                        dv[t].e[0] = dy[xo + c0 * sxc];
                }
            }
        CT_UNROLL
        for (int t = 0; t < CT_BN_ROWS; t++)
            if (r - t * step >= 0) {
                CT_UNROLL
                for (int u = 0; u < CT_VW; u++)
                    if (vec || u == 0) {
                        double v = CT_LD(xv[t].e[u]);
                        acc[u] += v;
                        acc[CT_VW + u] += v * v;
                        if (grad) {
                            float g = dy ? CT_LD(dv[t].e[u]) : 0.0f;
                            if (e->hw)
                                g = CT_SFX(ct_bn_excite)(e, g, r - t * step, C, c0 + u);
                            double d = CT_SFX(ct_bn_dz)((float)v, g, fwd, c0 + u, act, approx);
                            acc[2 * CT_VW + u] += d;
                            acc[3 * CT_VW + u] += d * v;
                        }
                    }
            }
    }
}

/* ct_bn_walk's gradient sums where dy is a sum computed from sm (into
 * dy), backwards as it: two rows' loads at a time, 8 x 16 bytes a lane, half of
 * ct_bn_walk's (with four, ct_bn_grad_stats spills at bf16 on sm_90;
 * with two it takes 240 registers: one block an SM, as with 212 before). */
#define CT_BN_SUM_ROWS 2
CT_DEVICE void CT_SFX(ct_bn_walk_sum)(const CT_T *x, CT_T *dy, const CT_SFX(CtBnDy) *sm, int act, int approx,
                                      const CtIndex *rows, long long sxc, int vec, long long c0, long long r0,
                                      long long step, double *acc)
{
    for (long long r = rows->n - 1 - r0; r >= 0; r -= CT_BN_SUM_ROWS * step) {
        CT_SFX(CtV16) xv[CT_BN_SUM_ROWS], av[CT_BN_SUM_ROWS], bv[CT_BN_SUM_ROWS], zv[CT_BN_SUM_ROWS];
        long long at[CT_BN_SUM_ROWS];
        CT_UNROLL
        for (int t = 0; t < CT_BN_SUM_ROWS; t++)
            if (r - t * step >= 0) {
                long long o;
                ct_offsets(rows, r - t * step, &at[t], &o);
                at[t] += vec ? c0 : c0 * sxc;
                if (vec) {
                    CT_V16_LD(xv[t], x + at[t]);
                    CT_V16_LD(av[t], sm->a + at[t]);
                    CT_V16_LD(bv[t], sm->b + at[t]);
                    if (act >= 0)
                        CT_V16_LD(zv[t], sm->z + at[t]);
                } else {
                    xv[t].e[0] = x[at[t]];
                    av[t].e[0] = sm->a[at[t]];
                    bv[t].e[0] = sm->b[at[t]];
                    if (act >= 0)
                        zv[t].e[0] = sm->z[at[t]];
                }
            }
        CT_UNROLL
        for (int t = 0; t < CT_BN_SUM_ROWS; t++)
            if (r - t * step >= 0) {
                CT_SFX(CtV16) dv;
                CT_UNROLL
                for (int u = 0; u < CT_VW; u++)
                    if (vec || u == 0) {
                        float d = CT_LD(CT_ST(CT_LD(av[t].e[u]) + CT_LD(bv[t].e[u])));
                        if (act >= 0)
                            d = CT_LD(CT_ST(fx_act_grad(act, approx, CT_LD(zv[t].e[u]), d)));
                        dv.e[u] = CT_ST(d);
                        double v = CT_LD(xv[t].e[u]);
                        acc[u] += v;
                        acc[CT_VW + u] += v * v;
                        acc[2 * CT_VW + u] += d;
                        acc[3 * CT_VW + u] += d * v;
                    }
                if (vec)
                    CT_V16_ST(dy + at[t], dv);
                else
                    dy[at[t]] = dv.e[0];
            }
    }
}

/* The batch's mean and biased variance from sums s of x and x^2 over
 * `count` values (E[x^2] - E[x]^2 in double, from inputs of at most f32). */
CT_DEVICE void CT_SFX(ct_bn_moments)(const double *s, long long count, double *mean, double *var)
{
    *mean = s[0] / (double)count;
    double v = s[1] / (double)count - *mean * *mean;
    *var = v < 0 ? 0 : v; /* rounding can take it below 0; NaN stays NaN */
}

/* Tile `tile` of a statistics kernel: its walk and its end (ct_col_end:
 * nsum 2, or 4 for the gradient, grad); whether it was its column's last,
 * the column in *col. */
CT_DEVICE int CT_SFX(ct_bn_tile_run)(const CT_T *x, CT_T *dy, const double *fwd, const CT_SFX(CtBnDy) *sm,
                                     int act, int approx, const CtIndex *rows, long long C, long long sxc,
                                     const CtColTile *t, long long tile, long long slices, double *part,
                                     unsigned *cnt, double *red, int *flag, int grad, long long *col)
{
    long long r0, step, s = ct_divmod(tile, t->cols, col), item = CT_SFX(ct_col_item)(t, *col, s, slices, &r0, &step);
    double acc[4 * CT_VW] = {0};
    if (item >= 0 && sm->a && !sm->hw)
        CT_SFX(ct_bn_walk_sum)(x, dy, sm, act, approx, rows, sxc, t->w > 1, item * t->w, r0, step, acc);
    else if (item >= 0)
        CT_SFX(ct_bn_walk)(x, dy, fwd, sm, act, approx, rows, C, sxc, t->w > 1, item * t->w, r0, step, grad, acc);
    return CT_SFX(ct_col_end)(t, acc, grad ? 4 : 2, red, part, cnt, *col, s, slices, C, flag);
}

/* Channel c's coefficients from its sums s (x, x^2) over n values: y = x *
 * coef[2c] + coef[2c + 1] normalises by the batch's statistics, and the
 * running stats get PyTorch's update (unbiased variance) in nrm and nrv
 * (which may be rm and rv: each read before its write; NULL: not
 * written). The parameters and running stats are CT_T, or f32 where wide
 * (under AMP). */
CT_DEVICE void CT_SFX(ct_bn_finish)(const double *s, long long n, long long c, const void *w, const void *b,
                                    const void *rm, const void *rv, void *nrm, void *nrv, int wide, double *coef,
                                    float momentum, float eps)
{
    double mean, var;
    CT_SFX(ct_bn_moments)(s, n, &mean, &var);
    if (nrm) {
        double rmc = CT_SFX(ct_ldw)(rm, c, wide), rvc = CT_SFX(ct_ldw)(rv, c, wide);
        CT_SFX(ct_stw)(nrm, c, wide, (float)((1 - momentum) * rmc + momentum * mean));
        CT_SFX(ct_stw)(nrv, c, wide, (float)((1 - momentum) * rvc + momentum * var * (double)n / (double)(n - 1)));
    }
    double scale = CT_SFX(ct_ldw)(w, c, wide) / sqrt(var + eps);
    coef[2 * c] = scale;
    coef[2 * c + 1] = CT_SFX(ct_ldw)(b, c, wide) - mean * scale;
}

/* batch_norm's statistics in training, each column's coefficients by its
 * last tile (ct_bn_finish); part (2 C slices doubles) and coef in scratch,
 * cnt C counters (a column's at most). Where sums is not NULL, the sums
 * alone instead, as f32 (x's in sums[c], x^2's in sums[C + c]: cuDNN's
 * GenStats outputs, which ct_bn_coef_sums takes): a convolution's
 * statistics where cuDNN does not make them in its epilogue (w, b, the
 * running stats and coef unread). */
CT_GLOBAL CT_SFX(ct_bn_stats)(const CT_T *x, double *part, unsigned *cnt, const void *w, const void *b,
                              const void *rm, const void *rv, void *nrm, void *nrv, int wide, double *coef,
                              CtIndex rows, long long C, long long sxc, long long slices, float momentum, float eps,
                              float *sums)
{
    CT_SHARED double red[CT_COL_RED];
    CT_SHARED int last;
    const void *ptrs[1] = {x};
    CtColTile t = CT_SFX(ct_col_tile)(C, sxc, CT_SFX(ct_rows_vec)(&rows, C, sxc, sxc, ptrs, 1));
    CT_BLOCK_LOOP(tile, t.cols * slices)
    {
        long long col;
        CT_SFX(CtBnDy) none = {0, 0, 0, 0};
        if (CT_SFX(ct_bn_tile_run)(x, 0, 0, &none, -1, 0, &rows, C, sxc, &t, tile, slices, part, cnt, red, &last, 0,
                                   &col)) {
            long long K = t.tx * t.w, c0 = col * K;
            const double *tot = red + CT_LIB_BLOCK;
            for (long long k = CT_TID; k < K && c0 + k < C; k += CT_NTHREADS)
                if (sums) {
                    sums[c0 + k] = (float)tot[2 * k];
                    sums[C + c0 + k] = (float)tot[2 * k + 1];
                } else {
                    CT_SFX(ct_bn_finish)(tot + 2 * k, rows.n, c0 + k, w, b, rm, rv, nrm, nrv, wide, coef, momentum,
                                         eps);
                }
        }
        CT_SYNC();
    }
}

/* A training batch_norm's coefficients (ct_bn_finish) from its sums over
 * `count` values, made by its convolution's step (ct_bn_stats' f32 sums,
 * or cuDNN's GenStats): a thread a channel. */
CT_GLOBAL CT_SFX(ct_bn_coef_sums)(const float *sums, const void *w, const void *b, const void *rm, const void *rv,
                                  void *nrm, void *nrv, int wide, double *coef, long long count, long long C,
                                  float momentum, float eps)
{
    CT_LOOP(c, C)
    {
        double s[2] = {sums[c], sums[C + c]};
        CT_SFX(ct_bn_finish)(s, count, c, w, b, rm, rv, nrm, nrv, wide, coef, momentum, eps);
    }
}

/* An eval batch_norm's coefficients, from the running statistics, in the
 * parameters' dtype. */
CT_GLOBAL CT_SFX(ct_bn_coef)(const CT_T *w, const CT_T *b, const CT_T *rm, const CT_T *rv, double *coef, long long C,
                             float eps)
{
    CT_LOOP(c, C)
    {
        double scale = CT_LD(w[c]) / sqrt((double)CT_LD(rv[c]) + eps);
        coef[2 * c] = scale;
        coef[2 * c + 1] = CT_LD(b[c]) - CT_LD(rm[c]) * scale;
    }
}

/* batch_norm_grad's statistics, each column's by its last tile: dw, db and
 * dx = coef[3c] dy + coef[3c + 1] x + coef[3c + 2], through the batch's
 * statistics in training, else the running ones; as ct_bn_stats, part 4 C
 * slices doubles. dy from sa, sb, sz and shw where they say (CtBnDy;
 * a sum: stored here, fwd NULL); dw and db where not NULL. */
CT_GLOBAL CT_SFX(ct_bn_grad_stats)(const CT_T *x, CT_T *dy, const double *fwd, int act, int approx, const CT_T *sa,
                                   const CT_T *sb, const CT_T *sz, long long shw, double *part, unsigned *cnt,
                                   const void *w, const void *rm, const void *rv, void *dw, void *db, int wide,
                                   double *coef, CtIndex rows, long long C, long long sxc, long long slices,
                                   int training, float eps)
{
    CT_SHARED double red[CT_COL_RED];
    CT_SHARED int last;
    const void *ptrs[5] = {x, dy, sa, sb, sz};
    CT_SFX(CtBnDy) sm = {sa, sb, sz, shw};
    CtColTile t = CT_SFX(ct_col_tile)(C, sxc, CT_SFX(ct_rows_vec)(&rows, C, sxc, sxc, ptrs, 5));
    CT_BLOCK_LOOP(tile, t.cols * slices)
    {
        long long col;
        if (CT_SFX(ct_bn_tile_run)(x, dy, fwd, &sm, act, approx, &rows, C, sxc, &t, tile, slices, part, cnt, red,
                                   &last, 1, &col)) {
            long long K = t.tx * t.w, c0 = col * K;
            const double *tot = red + CT_LIB_BLOCK;
            double M = (double)rows.n;
            for (long long k = CT_TID; k < K && c0 + k < C; k += CT_NTHREADS) {
                long long c = c0 + k;
                double mean = CT_SFX(ct_ldw)(rm, c, wide), var = CT_SFX(ct_ldw)(rv, c, wide);
                if (training)
                    CT_SFX(ct_bn_moments)(tot + 4 * k, rows.n, &mean, &var);
                double sb = tot[4 * k + 2], sxy = tot[4 * k + 3];
                double inv = 1 / sqrt(var + eps), sw = (sxy - mean * sb) * inv, wc = CT_SFX(ct_ldw)(w, c, wide);
                if (dw) {
                    CT_SFX(ct_stw)(dw, c, wide, (float)sw);
                    CT_SFX(ct_stw)(db, c, wide, (float)sb);
                }
                coef[3 * c] = wc * inv;
                coef[3 * c + 1] = -wc * inv / M * sw * inv;
                coef[3 * c + 2] = -wc * inv / M * sb + wc * inv / M * sw * inv * mean;
            }
        }
        CT_SYNC();
    }
}

/* Work item i of an elementwise pass over R rows of C channels: its row
 * (returned) and channel. The channel is the fastest where it is x's
 * fastest dim (channels-last), else the slowest, so that neighbouring
 * threads read neighbouring memory either way. */
CT_DEVICE long long CT_SFX(ct_bn_item)(long long i, long long R, long long C, long long sxc, long long *c)
{
    long long r;
    if (sxc == 1)
        return ct_divmod(i, C, c);
    *c = ct_divmod(i, R, &r);
    return r;
}

/* Each channel's y = x * coef[2c] + coef[2c + 1], then res (NULL: none;
 * y's strides) added and the activation act (an op, -1: none) applied,
 * each part's result rounded to the storage type as the graph's own nodes
 * would store it. Where rcoef is not NULL, res is another batch norm's x
 * and the residual its output, res * rcoef[2c] + rcoef[2c + 1] (a
 * downsampling shortcut's, never stored). */
CT_DEVICE float CT_SFX(ct_bn_res)(float r, const double *rcoef, long long c)
{
    return rcoef ? CT_LD(CT_ST((float)(r * rcoef[2 * c] + rcoef[2 * c + 1]))) : r;
}

CT_GLOBAL CT_SFX(ct_bn_apply)(const CT_T *x, const double *coef, const CT_T *res, const double *rcoef, CT_T *y,
                              CtIndex rows, long long C, long long sxc, long long syc, int act, int approx)
{
    const void *ptrs[3] = {x, res, y};
    if (CT_SFX(ct_rows_vec)(&rows, C, sxc, syc, ptrs, 3)) {
        long long groups = C / CT_VW, n = rows.n * groups;
        CT_GROUP_LOOP(i, n) /* CT_ELEMENTS items' loads, then their stores */
        {
            long long c0[CT_ELEMENTS], yo[CT_ELEMENTS];
            CT_SFX(CtV16) xv[CT_ELEMENTS], rv[CT_ELEMENTS], yv;
            CT_UNROLL
            for (int t = 0; t < CT_ELEMENTS; t++)
                if (CT_ITEM(i, t) < n) {
                    long long g, xo;
                    ct_offsets(&rows, ct_divmod(CT_ITEM(i, t), groups, &g), &xo, &yo[t]);
                    c0[t] = g * CT_VW;
                    CT_V16_LD(xv[t], x + xo + c0[t]);
                    if (res)
                        CT_V16_LD(rv[t], res + yo[t] + c0[t]);
                }
            CT_UNROLL
            for (int t = 0; t < CT_ELEMENTS; t++)
                if (CT_ITEM(i, t) < n) {
                    CT_UNROLL
                    for (int u = 0; u < CT_VW; u++)
                        yv.e[u] = CT_ST(CT_SFX(ct_bn_y)(
                            CT_LD(xv[t].e[u]), coef, c0[t] + u, res,
                            res ? CT_SFX(ct_bn_res)(CT_LD(rv[t].e[u]), rcoef, c0[t] + u) : 0.0f, act, approx));
                    CT_V16_ST(y + yo[t] + c0[t], yv);
                }
        }
        return;
    }
    CT_GROUP_LOOP(i, rows.n * C)
    {
        long long c[CT_ELEMENTS], xo[CT_ELEMENTS], yo[CT_ELEMENTS];
        float xv[CT_ELEMENTS], rv[CT_ELEMENTS];
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < rows.n * C) {
                ct_offsets(&rows, CT_SFX(ct_bn_item)(CT_ITEM(i, u), rows.n, C, sxc, &c[u]), &xo[u], &yo[u]);
                xv[u] = CT_LD(x[xo[u] + c[u] * sxc]);
                rv[u] = res ? CT_SFX(ct_bn_res)(CT_LD(res[yo[u] + c[u] * syc]), rcoef, c[u]) : 0.0f;
            }
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < rows.n * C)
                y[yo[u] + c[u] * syc] = CT_ST(CT_SFX(ct_bn_y)(xv[u], coef, c[u], res, rv[u], act, approx));
    }
}

/* dx from the gradient's coefficients (ct_bn_grad_stats), dy from ea, eb
 * and ehw where ehw > 0 (an excitation, CtBnDy). Where za is not NULL
 * (fwd and act given), the activation's output act(z) too, in dx's
 * strides: the batch norm run again for another reader (a convolution's
 * weight gradient), stored where x is read anyway. */
CT_GLOBAL CT_SFX(ct_bn_grad_apply)(const CT_T *x, const CT_T *dy, const double *fwd, int act, int approx,
                                   const CT_T *ea, const CT_T *eb, long long ehw, const double *coef, CT_T *dx,
                                   CT_T *za, CtIndex rows, long long C, long long sxc, long long sdc, int training)
{
    CT_SFX(CtBnDy) e = {ea, eb, 0, ehw};
    const void *ptrs[4] = {x, dy, dx, za};
    if (CT_SFX(ct_rows_vec)(&rows, C, sxc, sdc, ptrs, 4)) {
        long long groups = C / CT_VW, n = rows.n * groups;
        CT_GROUP_LOOP(i, n) /* CT_ELEMENTS items' loads, then their stores */
        {
            long long c0[CT_ELEMENTS], o[CT_ELEMENTS], row[CT_ELEMENTS];
            CT_SFX(CtV16) xv[CT_ELEMENTS], dv[CT_ELEMENTS], out;
            CT_UNROLL
            for (int t = 0; t < CT_ELEMENTS; t++)
                if (CT_ITEM(i, t) < n) {
                    long long g, xo;
                    row[t] = ct_divmod(CT_ITEM(i, t), groups, &g);
                    ct_offsets(&rows, row[t], &xo, &o[t]);
                    c0[t] = g * CT_VW;
                    if (training)
                        CT_V16_LD(xv[t], x + xo + c0[t]);
                    if (dy)
                        CT_V16_LD(dv[t], dy + xo + c0[t]);
                }
            CT_UNROLL
            for (int t = 0; t < CT_ELEMENTS; t++)
                if (CT_ITEM(i, t) < n) {
                    CT_SFX(CtV16) zo;
                    CT_UNROLL
                    for (int u = 0; u < CT_VW; u++) {
                        long long c = c0[t] + u, k = 3 * c;
                        float xf = training ? CT_LD(xv[t].e[u]) : 0.0f, gd = dy ? CT_LD(dv[t].e[u]) : 0.0f;
                        if (ehw)
                            gd = CT_SFX(ct_bn_excite)(&e, gd, row[t], C, c);
                        double gr = CT_SFX(ct_bn_dz)(xf, gd, fwd, c, act, approx);
                        out.e[u] =
                            CT_ST((float)(training ? coef[k] * gr + coef[k + 1] * xf + coef[k + 2] : coef[k] * gr));
                        if (za)
                            zo.e[u] = CT_ST(CT_SFX(ct_bn_y)(xf, fwd, c, NULL, 0.0f, act, approx));
                    }
                    CT_V16_ST(dx + o[t] + c0[t], out);
                    if (za)
                        CT_V16_ST(za + o[t] + c0[t], zo);
                }
        }
        return;
    }
    CT_GROUP_LOOP(i, rows.n * C)
    {
        long long c[CT_ELEMENTS], o[CT_ELEMENTS];
        float gv[CT_ELEMENTS], xv[CT_ELEMENTS];
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < rows.n * C) {
                long long xo, row = CT_SFX(ct_bn_item)(CT_ITEM(i, u), rows.n, C, sxc, &c[u]);
                ct_offsets(&rows, row, &xo, &o[u]);
                xv[u] = training ? CT_LD(x[xo + c[u] * sxc]) : 0.0f;
                gv[u] = dy ? CT_LD(dy[xo + c[u] * sxc]) : 0.0f;
                if (ehw)
                    gv[u] = CT_SFX(ct_bn_excite)(&e, gv[u], row, C, c[u]);
                gv[u] = CT_SFX(ct_bn_dz)(xv[u], gv[u], fwd, c[u], act, approx);
            }
        CT_UNROLL
        for (int u = 0; u < CT_ELEMENTS; u++)
            if (CT_ITEM(i, u) < rows.n * C) {
                double g = gv[u];
                long long k = 3 * c[u];
                /* eval leaves x out: 0 * x is NaN where x is not finite */
                dx[o[u] + c[u] * sdc] =
                    CT_ST((float)(training ? coef[k] * g + coef[k + 1] * xv[u] + coef[k + 2] : coef[k] * g));
                if (za)
                    za[o[u] + c[u] * sdc] = CT_ST(CT_SFX(ct_bn_y)(xv[u], fwd, c[u], NULL, 0.0f, act, approx));
            }
    }
}

/* A row of C logits' maximum *m and sum of exp(x - *m), which every
 * softmax-based loss and its gradient start from. */
CT_DEVICE void CT_SFX(ct_row_max_sum)(const CT_T *row, long long C, float *m, double *sum)
{
    *m = CT_LD(row[0]);
    *sum = 0;
    for (long long c = 1; c < C; c++)
        *m = CT_LD(row[c]) > *m ? CT_LD(row[c]) : *m;
    for (long long c = 0; c < C; c++)
        *sum += exp((double)CT_LD(row[c]) - *m);
}

/* cross_entropy with label smoothing s, per row into rowloss (dense [B, C]
 * logits); ct_mean_loss then averages the rows in order. */
CT_GLOBAL CT_SFX(ct_cross_entropy_rows)(const CT_T *x, const long long *t, float *rowloss, long long B, long long C,
                                        float s)
{
    CT_LOOP(b, B)
    {
        const CT_T *row = x + b * C;
        float m;
        double sum, mean_x = 0;
        CT_SFX(ct_row_max_sum)(row, C, &m, &sum);
        for (long long c = 0; c < C; c++)
            mean_x += CT_LD(row[c]);
        double lse = m + log(sum);
        mean_x /= (double)C;
        /* no smoothing term at s = 0: 0 * -inf, a -inf logit's, is NaN */
        rowloss[b] = (float)((1 - s) * (lse - CT_LD(row[t[b]])) - (s != 0 ? s * (mean_x - lse) : 0));
    }
}

CT_GLOBAL CT_SFX(ct_mean_loss)(const float *rowloss, CT_T *loss, long long B)
{
    CT_LOOP(unused, 1)
    {
        double total = 0;
        for (long long b = 0; b < B; b++)
            total += rowloss[b];
        loss[0] = CT_ST((float)(total / (double)B));
    }
}

/* dlogits = dloss / B * (softmax - (1 - s) onehot - s / C), one row a work item. */
CT_GLOBAL CT_SFX(ct_cross_entropy_grad)(const CT_T *x, const long long *t, const CT_T *dloss, CT_T *dx, long long B,
                                        long long C, float s)
{
    CT_LOOP(b, B)
    {
        const CT_T *row = x + b * C;
        float m;
        double sum, scale = (double)CT_LD(dloss[0]) / (double)B;
        CT_SFX(ct_row_max_sum)(row, C, &m, &sum);
        for (long long c = 0; c < C; c++) {
            double p = exp((double)CT_LD(row[c]) - m) / sum;
            dx[b * C + c] = CT_ST((float)(scale * (p - (c == t[b] ? 1 - s : 0) - s / (double)C)));
        }
    }
}

/* BinaryCrossEntropy's target of row b, class c: the probabilities p
 * [B, C] (mixup's) when given, else the label's smoothed one-hot; binarised
 * above `threshold` when it is >= 0. */
CT_DEVICE double CT_SFX(ct_bce_target)(const long long *labels, const CT_T *p, long long b, long long c, long long C,
                                       float s, float threshold)
{
    double off = s / (double)C;
    double v = p ? (double)CT_LD(p[b * C + c]) : c == labels[b] ? 1 - s + off : off;
    return threshold >= 0 ? (v > threshold ? 1 : 0) : v;
}

/* BCE with logits (positive term weighted by pw when > 0), row b's mean
 * over its classes into rowloss[b] (so ct_mean_loss gives the mean over all
 * B * C), or its sum with csum (--bce-sum: the batch mean of row sums). */
CT_GLOBAL CT_SFX(ct_bce_rows)(const CT_T *x, const long long *labels, const CT_T *p, float *rowloss, long long B,
                              long long C, float s, float threshold, float pw, long long csum)
{
    double w = pw > 0 ? pw : 1;
    CT_LOOP(b, B)
    {
        double total = 0;
        for (long long c = 0; c < C; c++) {
            double v = CT_LD(x[b * C + c]), t = CT_SFX(ct_bce_target)(labels, p, b, c, C, s, threshold);
            total += (1 - t) * v + (1 + (w - 1) * t) * ((v < 0 ? -v : 0) + log1p(exp(-fabs(v))));
        }
        rowloss[b] = (float)(csum ? total : total / (double)C);
    }
}

/* dlogits = dloss / (B * C, or B with csum) * ((1 - t) - (1 + (w - 1) t)
 * sigmoid(-x)), one row a work item. */
CT_GLOBAL CT_SFX(ct_bce_grad)(const CT_T *x, const long long *labels, const CT_T *p, const CT_T *dloss, CT_T *dx,
                              long long B, long long C, float s, float threshold, float pw, long long csum)
{
    double w = pw > 0 ? pw : 1;
    CT_LOOP(b, B)
    {
        double scale = (double)CT_LD(dloss[0]) / (double)(csum ? B : B * C);
        for (long long c = 0; c < C; c++) {
            double v = CT_LD(x[b * C + c]), t = CT_SFX(ct_bce_target)(labels, p, b, c, C, s, threshold);
            dx[b * C + c] = CT_ST((float)(scale * ((1 - t) - (1 + (w - 1) * t) / (1 + exp(v)))));
        }
    }
}

/* jsd_cross_entropy (ir/ops/loss.c): sample b's S rows (split i's is row
 * i * B + b) and their log-sum-exps; S <= 8, CT_JSD_MAX_SPLITS. */
CT_DEVICE void CT_SFX(ct_jsd_lse)(const CT_T *x, long long b, long long B, long long C, long long S, double *lse)
{
    for (long long i = 0; i < S; i++) {
        float m;
        double sum;
        CT_SFX(ct_row_max_sum)(x + (i * B + b) * C, C, &m, &sum);
        lse[i] = m + log(sum);
    }
}

/* Class c's mixture of the S softmaxes into *m, returned clamped to [1e-7, 1]. */
CT_DEVICE double CT_SFX(ct_jsd_mixture)(const CT_T *x, long long b, long long B, long long C, long long S,
                                         const double *lse, long long c, double *m)
{
    double s = 0;
    for (long long i = 0; i < S; i++)
        s += exp((double)CT_LD(x[(i * B + b) * C + c]) - lse[i]);
    *m = s / (double)S;
    return *m < 1e-7 ? 1e-7 : *m > 1 ? 1 : *m;
}

/* Sample b's loss into rowloss[b]: the first split's cross entropy with
 * smoothing s plus alpha / S times its S KL(M || p_i) terms; ct_mean_loss
 * averages over the B samples. */
CT_GLOBAL CT_SFX(ct_jsd_rows)(const CT_T *x, const long long *t, float *rowloss, long long B, long long C, long long S,
                              float s, float alpha)
{
    CT_LOOP(b, B)
    {
        double lse[8], mean_logp = 0, kl = 0, m;
        CT_SFX(ct_jsd_lse)(x, b, B, C, S, lse);
        for (long long c = 0; c < C; c++) {
            mean_logp += ((double)CT_LD(x[b * C + c]) - lse[0]) / (double)C;
            double lm = log(CT_SFX(ct_jsd_mixture)(x, b, B, C, S, lse, c, &m));
            for (long long i = 0; i < S; i++) {
                double lp = (double)CT_LD(x[(i * B + b) * C + c]) - lse[i];
                kl += exp(lp) * (lp - lm);
            }
        }
        double ce = (1 - s) * (lse[0] - (double)CT_LD(x[b * C + t[b]])) - (s != 0 ? s * mean_logp : 0);
        rowloss[b] = (float)(ce + alpha / (double)S * kl);
    }
}

/* Sample b's S rows of dlogits (ir/ops/loss.c's jsd_grad_ref): two passes
 * over the classes, the first for each split's <p_i, g_i>. */
CT_GLOBAL CT_SFX(ct_jsd_grad)(const CT_T *x, const long long *t, const CT_T *dloss, CT_T *dx, long long B, long long C,
                              long long S, float s, float alpha)
{
    CT_LOOP(b, B)
    {
        double lse[8], dot[8], m, k = alpha / (double)S, scale = (double)CT_LD(dloss[0]) / (double)B;
        CT_SFX(ct_jsd_lse)(x, b, B, C, S, lse);
        for (long long i = 0; i < S; i++)
            dot[i] = 0;
        for (int pass = 0; pass < 2; pass++)
            for (long long c = 0; c < C; c++) {
                double mc = CT_SFX(ct_jsd_mixture)(x, b, B, C, S, lse, c, &m);
                double through = m >= 1e-7 && m <= 1 ? m / mc : 0;
                for (long long i = 0; i < S; i++) {
                    long long at = (i * B + b) * C + c;
                    double lp = (double)CT_LD(x[at]) - lse[i], p = exp(lp), g = k * (lp + 1 - log(mc) - through);
                    if (!pass) {
                        dot[i] += p * g;
                        continue;
                    }
                    double d = p * (g - dot[i]);
                    if (i == 0)
                        d += p - s / (double)C - (c == t[b] ? 1 - s : 0);
                    dx[at] = CT_ST((float)(scale * d));
                }
            }
    }
}

/* The optimizer updates that are no elementwise expression (ir/ops/optim.c:
 * their ref kernels' formulas, in double). `apply` (NULL: none) is
 * GradScaler's skip: at 0 every output is its state unchanged. Outputs may
 * be their state's buffers: each work item reads then writes one index. */
CT_DEVICE int CT_SFX(ct_upd_applies)(const CT_T *apply) { return !apply || (double)CT_LD(apply[0]) != 0; }

/* The lr of decoupled weight decay: lr, or timm's corrected lr^2 / max_lr
 * where max_lr > 0 (ir/ops/optim.c). */
CT_DEVICE double CT_SFX(ct_decay_lr)(const CT_T *lr, double max_lr)
{
    double l = (double)CT_LD(lr[0]);
    return max_lr > 0 ? l * l / max_lr : l;
}

/* Sums of squares over chunks of `chunk` elements, one work item a chunk
 * (a fixed order, the same bits every run): part[2c] of (k a)^2, part[2c+1]
 * of b^2, b from bt (the storage type), bf (float scratch) or bd (double
 * scratch); k is 1, or with lr (decoupled decay) 1 - ct_decay_lr wd. */
CT_GLOBAL CT_SFX(ct_sq_partials)(const CT_T *a, const CT_T *lr, float wd, double max_lr, const CT_T *bt,
                                 const float *bf, const double *bd, double *part, long long n, long long chunk,
                                 long long nchunks)
{
    CT_LOOP(c, nchunks)
    {
        double sa = 0, sb = 0, ka = lr ? 1 - CT_SFX(ct_decay_lr)(lr, max_lr) * wd : 1;
        long long end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (long long i = c * chunk; i < end; i++) {
            double x = (double)ka * CT_LD(a[i]), y = bt ? (double)CT_LD(bt[i]) : bf ? (double)bf[i] : bd[i];
            sa += x * x;
            sb += y * y;
        }
        part[2 * c] = sa;
        part[2 * c + 1] = sb;
    }
}

/* lamb_update, launch 1 of 4: m', v' and the update u (before the trust
 * ratio) into u; then ct_sq_partials, ct_lamb_ratio, ct_lamb_apply. */
CT_GLOBAL CT_SFX(ct_lamb_moments)(const CT_T *p, const CT_T *g, const CT_T *m, const CT_T *v, const CT_T *lr,
                                  const long long *step, const CT_T *clip_sq, const CT_T *apply, CT_T *m1, CT_T *v1,
                                  float *u, long long n, float b1, float b2, float eps, float wd, long long decoupled)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            m1[i] = m[i];
            v1[i] = v[i];
            continue;
        }
        double t = (double)step[0] + 1, bc1 = 1 - pow((double)b1, t), bc2 = 1 - pow((double)b2, t), clip = 1;
        if (clip_sq && !(sqrt((double)CT_LD(clip_sq[0])) <= 1)) /* timm's clamp_(min=1.0): NaN stays NaN */
            clip = sqrt((double)CT_LD(clip_sq[0]));
        double keep = decoupled ? 1 - (double)CT_LD(lr[0]) * wd : 1, g1 = (double)CT_LD(g[i]) / clip;
        double mm = b1 * (double)CT_LD(m[i]) + (1 - (double)b1) * g1;
        double vv = b2 * (double)CT_LD(v[i]) + (1 - (double)b2) * g1 * g1;
        u[i] = (float)(mm / bc1 / (sqrt(vv) / sqrt(bc2) + eps) + (decoupled ? 0 : wd * keep * (double)CT_LD(p[i])));
        m1[i] = CT_ST((float)mm);
        v1[i] = CT_ST((float)vv);
    }
}

/* timm's trust-ratio guard: 1 unless both norms are positive. */
CT_DEVICE double CT_SFX(ct_trust_or_one)(double w, double u, double ratio) { return w > 0 && u > 0 ? ratio : 1; }

/* lamb_update's trust ratio into ratio[0], from the partial sums of (p
 * decayed)^2 and u^2. */
CT_GLOBAL CT_SFX(ct_lamb_ratio)(const double *part, long long nchunks, double *ratio, float wd, long long trust_clip,
                                long long always_adapt)
{
    CT_LOOP(unused, 1)
    {
        double w2 = 0, u2 = 0, r = 1;
        for (long long c = 0; c < nchunks; c++)
            w2 += part[2 * c], u2 += part[2 * c + 1];
        if (wd != 0 || always_adapt) {
            r = CT_SFX(ct_trust_or_one)(w2, u2, sqrt(w2) / sqrt(u2));
            if (trust_clip && r > 1)
                r = 1;
        }
        ratio[0] = r;
    }
}

CT_GLOBAL CT_SFX(ct_lamb_apply)(const CT_T *p, const float *u, const double *ratio, const CT_T *lr, const CT_T *apply,
                                CT_T *p1, long long n, float wd, long long decoupled, double max_lr)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            p1[i] = p[i];
            continue;
        }
        double l = (double)CT_LD(lr[0]), keep = decoupled ? 1 - CT_SFX(ct_decay_lr)(lr, max_lr) * wd : 1;
        p1[i] = CT_ST((float)((double)CT_LD(p[i]) * keep - l * ratio[0] * (double)u[i]));
    }
}

/* lars_update's trust ratio into ratio[0] from the partial sums of p^2 and g^2. */
CT_GLOBAL CT_SFX(ct_lars_ratio)(const double *part, long long nchunks, const CT_T *lr, double *ratio, float wd,
                                float coeff, float eps, long long trust_clip, long long always_adapt)
{
    CT_LOOP(unused, 1)
    {
        double w2 = 0, g2 = 0, r = 1, l = (double)CT_LD(lr[0]);
        for (long long c = 0; c < nchunks; c++)
            w2 += part[2 * c], g2 += part[2 * c + 1];
        if (wd != 0 || always_adapt) {
            double wn = sqrt(w2), gn = sqrt(g2);
            r = CT_SFX(ct_trust_or_one)(wn, gn, coeff * wn / (gn + wn * wd + eps));
            if (trust_clip) /* timm's clamp(ratio / lr, max=1.0): NaN stays NaN */
                r = r / l > 1 ? 1 : r / l;
        }
        ratio[0] = r;
    }
}

CT_GLOBAL CT_SFX(ct_lars_apply)(const CT_T *p, const CT_T *g, const CT_T *buf, const CT_T *lr, const CT_T *apply,
                                const double *ratio, CT_T *p1, CT_T *buf1, long long n, float mom, float wd,
                                long long nesterov)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            p1[i] = p[i];
            buf1[i] = buf[i];
            continue;
        }
        double pp = (double)CT_LD(p[i]), d = ((double)CT_LD(g[i]) + wd * pp) * ratio[0], b = d;
        if (mom != 0) {
            b = mom * (double)CT_LD(buf[i]) + d;
            d = nesterov ? d + mom * b : b;
        }
        p1[i] = CT_ST((float)(pp - (double)CT_LD(lr[0]) * d));
        buf1[i] = CT_ST((float)b);
    }
}

/* nadam_update (torch NAdam, momentum_decay 4e-3): this step's mu products
 * from the input product mu_prod (torch keeps it in float32; legacy: torch <
 * 2.0's rule for the next one). */
CT_DEVICE void CT_SFX(ct_nadam_products)(double mu_prod, double b1, double t, long long legacy, double *mu,
                                         double *mu_next, double *prod, double *prod_next)
{
    *mu = b1 * (1 - 0.5 * pow(0.96, t * 4e-3));
    *mu_next = b1 * (1 - 0.5 * pow(0.96, (t + 1) * 4e-3));
    *prod = (float)(mu_prod * *mu);
    *prod_next = legacy ? (float)(*prod * *mu) * *mu_next : *prod * *mu_next;
}

/* Every element's update; ct_nadam_product then writes mu_prod' (a launch
 * of its own: the product may be stored where this one reads it). */
CT_GLOBAL CT_SFX(ct_nadam_update)(const CT_T *p, const CT_T *g, const CT_T *m, const CT_T *v, const CT_T *mu_prod,
                                  const CT_T *lr, const long long *step, const CT_T *apply, CT_T *p1, CT_T *m1,
                                  CT_T *v1, long long n, float b1, float b2, float eps, float wd, long long legacy)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            p1[i] = p[i];
            m1[i] = m[i];
            v1[i] = v[i];
            continue;
        }
        double t = (double)step[0] + 1, l = (double)CT_LD(lr[0]), bc2 = 1 - pow((double)b2, t), mu, mu_next, prod,
               prod_next;
        CT_SFX(ct_nadam_products)((double)CT_LD(mu_prod[0]), b1, t, legacy, &mu, &mu_next, &prod, &prod_next);
        double pp = (double)CT_LD(p[i]), g1 = (double)CT_LD(g[i]) + wd * pp;
        double mm = b1 * (double)CT_LD(m[i]) + (1 - (double)b1) * g1;
        double vv = b2 * (double)CT_LD(v[i]) + (1 - (double)b2) * g1 * g1, denom = sqrt(vv / bc2) + eps;
        p1[i] = CT_ST(
            (float)(pp - l * (1 - mu) / (1 - prod) * g1 / denom - l * mu_next / (1 - prod_next) * mm / denom));
        m1[i] = CT_ST((float)mm);
        v1[i] = CT_ST((float)vv);
    }
}

CT_GLOBAL CT_SFX(ct_nadam_product)(const CT_T *mu_prod, const long long *step, const CT_T *apply, CT_T *mu_prod1,
                                   float b1, long long legacy)
{
    CT_LOOP(unused, 1)
    {
        double mu, mu_next, prod, prod_next;
        CT_SFX(ct_nadam_products)((double)CT_LD(mu_prod[0]), b1, (double)step[0] + 1, legacy, &mu, &mu_next, &prod,
                                  &prod_next);
        mu_prod1[0] = CT_SFX(ct_upd_applies)(apply) ? CT_ST((float)prod) : mu_prod[0];
    }
}

/* sgdp_update / adamp_update (ir/ops/optim_norm.c): the momentum state
 * and the update u (into scratch) per element; then ct_proj_rows,
 * ct_proj_decide and ct_sgdp_apply / ct_adamp_apply project u as timm's
 * _projection does. */
CT_GLOBAL CT_SFX(ct_sgdp_moments)(const CT_T *g, const CT_T *buf, const CT_T *apply, CT_T *buf1, float *u, long long n,
                                  float mom, long long nesterov)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            buf1[i] = buf[i];
            continue;
        }
        double gi = (double)CT_LD(g[i]), b = mom * (double)CT_LD(buf[i]) + gi;
        u[i] = (float)(nesterov ? gi + mom * b : b);
        buf1[i] = CT_ST((float)b);
    }
}

CT_GLOBAL CT_SFX(ct_adamp_moments)(const CT_T *g, const CT_T *m, const CT_T *v, const long long *step,
                                   const CT_T *apply, CT_T *m1, CT_T *v1, float *u, long long n, float b1, float b2,
                                   float eps, long long nesterov)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            m1[i] = m[i];
            v1[i] = v[i];
            continue;
        }
        double t = (double)step[0] + 1, bc2 = 1 - pow((double)b2, t), gi = (double)CT_LD(g[i]);
        double mm = b1 * (double)CT_LD(m[i]) + (1 - (double)b1) * gi;
        double vv = b2 * (double)CT_LD(v[i]) + (1 - (double)b2) * gi * gi;
        u[i] = (float)((nesterov ? b1 * mm + (1 - (double)b1) * gi : mm) / (sqrt(vv) / sqrt(bc2) + eps));
        m1[i] = CT_ST((float)mm);
        v1[i] = CT_ST((float)vv);
    }
}

/* Row r of the channel view [rows, len]: its sums g.p, g.g, p.p and p.u into
 * st[4r..4r+4) (the layer view's are their totals). */
CT_GLOBAL CT_SFX(ct_proj_rows)(const CT_T *p, const CT_T *g, const float *u, double *st, long long rows,
                               long long len)
{
    CT_LOOP(r, rows)
    {
        double gp = 0, gg = 0, pp = 0, pu = 0;
        for (long long i = r * len; i < (r + 1) * len; i++) {
            double pi = (double)CT_LD(p[i]), gi = (double)CT_LD(g[i]);
            gp += gi * pi, gg += gi * gi, pp += pi * pi, pu += pi * (double)u[i];
        }
        st[4 * r] = gp, st[4 * r + 1] = gg, st[4 * r + 2] = pp, st[4 * r + 3] = pu;
    }
}

/* Which view timm's _projection takes (it tries the channel view, then the
 * layer view): d[0] = 0 none, 1 channel, 2 layer; with the layer view d[1]
 * its |p| + eps and d[2] its p.u. torch's cosine_similarity clamps each norm
 * to eps; a NaN similarity projects nothing (torch's max keeps NaN). */
CT_GLOBAL CT_SFX(ct_proj_decide)(const double *st, long long rows, long long len, long long project, double *d,
                                 float delta, float eps)
{
    CT_LOOP(unused, 1)
    {
        double tot[4] = {0, 0, 0, 0};
        d[0] = 0;
        for (int view = 0; view < 2 && project && d[0] == 0; view++) {
            long long nr = view ? 1 : rows, l = view ? rows * len : len;
            double worst = 0;
            for (long long r = 0; r < nr; r++) {
                const double *x = view ? tot : st + 4 * r;
                if (view == 0)
                    for (int k = 0; k < 4; k++)
                        tot[k] += st[4 * r + k];
                double cs = fabs(x[0] / (fmax(sqrt(x[1]), (double)eps) * fmax(sqrt(x[2]), (double)eps)));
                if (!(cs <= worst))
                    worst = cs;
            }
            if (worst < delta / sqrt((double)l)) {
                d[0] = view + 1;
                d[1] = sqrt(tot[2]) + eps;
                d[2] = tot[3];
            }
        }
    }
}

/* u less its component along p / (|p| + eps) of the view d[0] chose. */
CT_DEVICE double CT_SFX(ct_projected)(const double *st, const double *d, double pi, double ui, long long i,
                                      long long len, float eps)
{
    if (d[0] == 0)
        return ui;
    double nrm = d[0] == 2 ? d[1] : sqrt(st[4 * (i / len) + 2]) + eps, pu = d[0] == 2 ? d[2] : st[4 * (i / len) + 3];
    return ui - pi / nrm * (pu / nrm);
}

CT_GLOBAL CT_SFX(ct_sgdp_apply)(const CT_T *p, const float *u, const double *st, const double *d, const CT_T *lr,
                                const CT_T *apply, CT_T *p1, long long n, long long len, float mom, float wd,
                                float wd_ratio, float eps)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            p1[i] = p[i];
            continue;
        }
        double l = (double)CT_LD(lr[0]), pi = (double)CT_LD(p[i]), ratio = d[0] != 0 ? wd_ratio : 1;
        double keep = wd != 0 ? 1 - l * wd * ratio / (1 - (double)mom) : 1;
        p1[i] = CT_ST((float)(pi * keep - l * CT_SFX(ct_projected)(st, d, pi, (double)u[i], i, len, eps)));
    }
}

CT_GLOBAL CT_SFX(ct_adamp_apply)(const CT_T *p, const float *u, const double *st, const double *d, const CT_T *lr,
                                 const long long *step, const CT_T *apply, CT_T *p1, long long n, long long len,
                                 float b1, float wd, float wd_ratio, float eps)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            p1[i] = p[i];
            continue;
        }
        double l = (double)CT_LD(lr[0]), pi = (double)CT_LD(p[i]), ratio = d[0] != 0 ? wd_ratio : 1;
        double keep = wd > 0 ? 1 - l * wd * ratio : 1, bc1 = 1 - pow((double)b1, (double)step[0] + 1);
        p1[i] = CT_ST((float)(pi * keep - l / bc1 * CT_SFX(ct_projected)(st, d, pi, (double)u[i], i, len, eps)));
    }
}

/* adafactor_update / adafactorbv_update (ir/ops/optim_norm.c). ct_af_coef
 * puts this step's weight w of the new second moment in c[0] (1 - beta2 of
 * step t: Adafactor's t^decay_rate; big_vision's 1 - min(cap, 1 -
 * decay_step^-decay_rate), its power in f32 as timm's f32 step); then the
 * second moments: unfactored (ct_af_full), or the row and column means of
 * g^2 + eps (ct_af_mean, once each), the rows' mean over the column dim
 * (ct_af_rowcol) and the update (ct_af_factored); the update's RMS clip
 * (ct_sq_partials, ct_af_clip: c[1], the divisor); the momentum and the
 * parameter (ct_af_apply). A row of the reduction over dim d of size D with
 * `inner` elements after it: element j of the reduced tensor gathers
 * elements (j / inner) (inner D) + k inner + j % inner, k < D. */
CT_GLOBAL CT_SFX(ct_af_coef)(const long long *step, double *c, float decay_rate, float beta2_cap,
                             long long decay_offset, long long bv)
{
    CT_LOOP(unused, 1)
    {
        double t = (double)step[0] + 1;
        if (!bv) {
            c[0] = pow(t, (double)decay_rate);
        } else {
            double ds = decay_offset ? fmax(t - (double)decay_offset, 1) : t;
            c[0] = 1 - fmin((double)beta2_cap, 1 - (double)powf((float)ds, -decay_rate));
        }
    }
}

/* torch's lerp: a + w (b - a) */
CT_DEVICE double CT_SFX(ct_lerp)(double a, double b, double w)
{
    return w < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w);
}

CT_GLOBAL CT_SFX(ct_af_full)(const CT_T *g, const CT_T *v, const double *c, const CT_T *apply, CT_T *v1, double *u,
                             long long n, float sqeps)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            v1[i] = v[i];
            continue;
        }
        double gi = (double)CT_LD(g[i]), vv = CT_SFX(ct_lerp)((double)CT_LD(v[i]), gi * gi + sqeps, c[0]);
        u[i] = gi / sqrt(vv);
        v1[i] = CT_ST((float)vv);
    }
}

/* The state of the reduction over a dim (D, inner): lerp toward the mean of
 * g^2 + eps; its new values also in double at w (for ct_af_rowcol, ct_af_factored). */
CT_GLOBAL CT_SFX(ct_af_mean)(const CT_T *g, const CT_T *r, const double *c, const CT_T *apply, CT_T *r1, double *w,
                             long long nr, long long D, long long inner, float sqeps)
{
    CT_LOOP(j, nr)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            r1[j] = r[j];
            continue;
        }
        double sum = 0;
        long long base = j / inner * inner * D + j % inner;
        for (long long k = 0; k < D; k++) {
            double gi = (double)CT_LD(g[base + k * inner]);
            sum += (gi * gi + sqeps) / (double)D;
        }
        w[j] = CT_SFX(ct_lerp)((double)CT_LD(r[j]), sum, c[0]);
        r1[j] = CT_ST((float)w[j]);
    }
}

/* The row state's mean over the column dim (D, inner of the row state's shape). */
CT_GLOBAL CT_SFX(ct_af_rowcol)(const double *row, double *rc, long long nrc, long long D, long long inner)
{
    CT_LOOP(j, nrc)
    {
        double sum = 0;
        long long base = j / inner * inner * D + j % inner;
        for (long long k = 0; k < D; k++)
            sum += row[base + k * inner] / (double)D;
        rc[j] = sum;
    }
}

/* u = g / sqrt(row / its column mean) / sqrt(col); (Dr, ir): the row dim of
 * p, (Dc, ic): its column dim, (Dc, irc): the column dim of the row state. */
CT_DEVICE long long CT_SFX(ct_af_drop)(long long i, long long D, long long inner)
{
    return i / (inner * D) * inner + i % inner;
}

CT_GLOBAL CT_SFX(ct_af_factored)(const CT_T *g, const double *row, const double *col, const double *rc,
                                 const CT_T *apply, double *u, long long n, long long Dr, long long ir, long long Dc,
                                 long long ic, long long irc)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply))
            continue;
        long long r = CT_SFX(ct_af_drop)(i, Dr, ir);
        double rr = row[r] / rc[CT_SFX(ct_af_drop)(r, Dc, irc)];
        u[i] = (double)CT_LD(g[i]) / sqrt(rr) / sqrt(col[CT_SFX(ct_af_drop)(i, Dc, ic)]);
    }
}

/* c[1]: the update's divisor, max(1, RMS / clip) (clip <= 0: 1; NaN stays NaN). */
CT_GLOBAL CT_SFX(ct_af_clip)(const double *part, long long nchunks, long long n, double *c, float clip)
{
    CT_LOOP(unused, 1)
    {
        double sq = 0;
        for (long long k = 0; k < nchunks; k++)
            sq += part[2 * k + 1];
        double by = clip > 0 ? sqrt(sq) / sqrt((double)n) / clip : 1;
        c[1] = by <= 1 ? 1 : by;
    }
}

/* The momentum (m: NULL without; bf16: kept rounded to bfloat16) and p';
 * Adafactor: u lr toward m, p (1 - wd lr) less it; big_vision: u toward m,
 * p keep less it times lr. */
CT_DEVICE double CT_SFX(ct_af_bf16)(double x)
{
    union {
        float f;
        unsigned int b;
    } v;
    v.f = (float)x;
    if ((v.b & 0x7f800000u) != 0x7f800000u)
        v.b = (v.b + 0x7fffu + ((v.b >> 16) & 1u)) & 0xffff0000u;
    return v.f;
}

CT_GLOBAL CT_SFX(ct_af_apply)(const CT_T *p, const double *u, const double *c, const CT_T *m, const CT_T *lr,
                              const CT_T *apply, CT_T *p1, CT_T *m1, long long n, double mom, float wd, long long bv,
                              long long m_bf16, long long unscaled_wd, double max_lr)
{
    CT_LOOP(i, n)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            p1[i] = p[i];
            if (m)
                m1[i] = m[i];
            continue;
        }
        double l = (double)CT_LD(lr[0]), pi = (double)CT_LD(p[i]), ui = u[i] / c[1];
        if (!bv) {
            ui *= l;
            if (m)
                m1[i] = CT_ST((float)(ui = CT_SFX(ct_lerp)((double)CT_LD(m[i]), ui, 1 - (double)mom)));
            if (wd != 0)
                pi += pi * (-(double)wd * l);
            p1[i] = CT_ST((float)(pi - ui));
            continue;
        }
        if (m) {
            double mi = (double)CT_LD(m[i]);
            ui = m_bf16 ? CT_SFX(ct_af_bf16)(CT_SFX(ct_lerp)(mi, CT_SFX(ct_af_bf16)(ui), 1 - (double)mom))
                        : CT_SFX(ct_lerp)(mi, ui, 1 - (double)mom);
            m1[i] = CT_ST((float)ui);
        }
        double keep = 1;
        if (wd != 0 && max_lr > 0) /* timm's corrected_weight_decay */
            keep = unscaled_wd ? 1 - l / max_lr * wd : 1 - l * l / max_lr * wd;
        else if (wd != 0)
            keep = unscaled_wd ? 1 - (double)wd : 1 - l * wd;
        p1[i] = CT_ST((float)(pi * keep - ui * l));
    }
}

/* muon_update (ir/ops/optim_norm.c): the momentum in f32 as torch's lerp
 * and the Newton-Schulz input X rounded to bfloat16, stored [m, n] (m <= n:
 * the [rows, cols] view, transposed when rows > cols); ct_sq_partials and
 * ct_muon_norm its norm; ct_muon_scale X / norm; per iteration three
 * ct_muon_gemm (A = X X^T, B = b A + c A A, X = a X + B X, each product
 * summed in double and rounded to bfloat16 once, as a bf16 gemm with an f32
 * accumulator); ct_muon_apply the parameter. */
CT_GLOBAL CT_SFX(ct_muon_moments)(const CT_T *g, const CT_T *buf, const CT_T *apply, CT_T *buf1, double *x,
                                  long long rows, long long cols, double mom, long long nesterov)
{
    CT_LOOP(i, rows * cols)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            buf1[i] = buf[i];
            continue;
        }
        float w = (float)(1 - mom), wm = (float)mom, gi = CT_LD(g[i]), b = CT_LD(buf[i]);
        float nb = w < 0.5f ? b + w * (gi - b) : gi - (gi - b) * (1 - w);
        float u = !nesterov ? nb : wm < 0.5f ? gi + wm * (nb - gi) : nb - (nb - gi) * (1 - wm);
        long long r = i / cols, c = i % cols;
        x[rows > cols ? c * rows + r : i] = CT_SFX(ct_af_bf16)(u);
        buf1[i] = CT_ST(nb);
    }
}

/* nrm[0]: bf16(max(bf16(bf16(|X|) safety), eps)). */
CT_GLOBAL CT_SFX(ct_muon_norm)(const double *part, long long nchunks, double *nrm, double eps, double safety)
{
    CT_LOOP(unused, 1)
    {
        double sq = 0;
        for (long long k = 0; k < nchunks; k++)
            sq += part[2 * k + 1];
        double v = CT_SFX(ct_af_bf16)(CT_SFX(ct_af_bf16)(sqrt(sq)) * safety);
        nrm[0] = CT_SFX(ct_af_bf16)(v < eps ? eps : v);
    }
}

CT_GLOBAL CT_SFX(ct_muon_scale)(double *x, const double *nrm, long long n)
{
    CT_LOOP(i, n)
    x[i] = CT_SFX(ct_af_bf16)(x[i] / nrm[0]);
}

/* out [M, N] = bf16(alpha a b + beta c): a [M, K], b [K, N] (bt: [N, K]). */
CT_GLOBAL CT_SFX(ct_muon_gemm)(const double *a, const double *b, const double *c, double *out, long long M,
                               long long N, long long K, long long bt, double alpha, double beta)
{
    CT_LOOP(idx, M * N)
    {
        long long i = idx / N, j = idx % N;
        double s = 0;
        for (long long l = 0; l < K; l++)
            s += a[i * K + l] * (bt ? b[j * K + l] : b[l * N + j]);
        out[idx] = CT_SFX(ct_af_bf16)(alpha * s + (c ? beta * c[idx] : 0));
    }
}

CT_GLOBAL CT_SFX(ct_muon_apply)(const CT_T *p, const double *x, const CT_T *lr, const CT_T *apply, CT_T *p1,
                                long long rows, long long cols, double lr_scale, float wd)
{
    CT_LOOP(i, rows * cols)
    {
        if (!CT_SFX(ct_upd_applies)(apply)) {
            p1[i] = p[i];
            continue;
        }
        long long r = i / cols, c = i % cols;
        double l = (double)CT_LD(lr[0]), xi = x[rows > cols ? c * rows + r : i];
        p1[i] = CT_ST((float)((double)CT_LD(p[i]) * (1 - l * wd) - l * lr_scale * xi));
    }
}

/* dropout and drop_path (ir/ops/elementwise.c): ix walks x's logical
 * elements (x's strides, y's); the draw is element i's, or with per > 1
 * its sample's (i / per, drop_path), from the graph's RNG counter. */
CT_GLOBAL CT_SFX(ct_dropout)(const CT_T *x, const long long *counter, CT_T *y, CtIndex ix, long long per,
                             long long node, float p)
{
    CT_LOOP(i, ix.n)
    {
        long long a, o;
        ct_offsets(&ix, i, &a, &o);
        double u = crng_mask_uniform((unsigned long long)counter[0], (unsigned long long)node,
                                     (unsigned long long)(i / per));
        y[o] = CT_ST(u < p ? 0.0f : (float)((double)CT_LD(x[a]) / (1 - (double)p)));
    }
}

/* all_finite: y (1, from ct_fill) becomes 0 where any element of x is not
 * finite; every writer writes the same 0, so the race is benign. */
CT_GLOBAL CT_SFX(ct_all_finite)(const CT_T *x, float *y, long long n)
{
    CT_LOOP(i, n)
    if (!isfinite(CT_LD(x[i])))
        y[0] = 0;
}

/* SoftTargetCrossEntropy (mixup's targets t [B, C]): row b's
 * -sum_c t (x - lse) into rowloss[b], for ct_mean_loss. */
CT_GLOBAL CT_SFX(ct_soft_ce_rows)(const CT_T *x, const CT_T *t, float *rowloss, long long B, long long C)
{
    CT_LOOP(b, B)
    {
        const CT_T *row = x + b * C, *tr = t + b * C;
        float m;
        double sum, loss = 0;
        CT_SFX(ct_row_max_sum)(row, C, &m, &sum);
        double lse = m + log(sum);
        for (long long c = 0; c < C; c++)
            loss -= (double)CT_LD(tr[c]) * ((double)CT_LD(row[c]) - lse);
        rowloss[b] = (float)loss;
    }
}

/* dlogits = dloss / B * (softmax * sum_c t - t), one row a work item. */
CT_GLOBAL CT_SFX(ct_soft_ce_grad)(const CT_T *x, const CT_T *t, const CT_T *dloss, CT_T *dx, long long B, long long C)
{
    CT_LOOP(b, B)
    {
        const CT_T *row = x + b * C, *tr = t + b * C;
        float m;
        double sum, tsum = 0, scale = (double)CT_LD(dloss[0]) / (double)B;
        CT_SFX(ct_row_max_sum)(row, C, &m, &sum);
        for (long long c = 0; c < C; c++)
            tsum += CT_LD(tr[c]);
        for (long long c = 0; c < C; c++) {
            double p = exp((double)CT_LD(row[c]) - m) / sum;
            dx[b * C + c] = CT_ST((float)(scale * (p * tsum - CT_LD(tr[c]))));
        }
    }
}

/* Attention without the fused library (q [BH, N, D], k and v [BH, M, D],
 * dense; D <= CT_MAX_HEAD), with an optional additive bias on the scores:
 * head bh's bias [N, M] starts at bias + bh / H * sb + bh % H * sh (a
 * broadcast dim's stride 0), bias NULL for none. */

/* Query row r's bias row, or NULL. */
CT_DEVICE const CT_T *CT_SFX(ct_sdpa_bias_row)(const CT_T *bias, long long r, long long N, long long M, long long H,
                                               long long sb, long long sh)
{
    long long bh = r / N;
    return bias ? bias + bh / H * sb + bh % H * sh + r % N * M : 0;
}

/* Score j of query row Q: Q . K_j * scale + A[j], K's rows lk apart. */
CT_DEVICE double CT_SFX(ct_sdpa_score)(const CT_T *Q, const CT_T *K, const CT_T *A, long long j, long long D,
                                       long long lk, float scale)
{
    double s = 0;
    for (long long d = 0; d < D; d++)
        s += (double)CT_LD(Q[d]) * CT_LD(K[j * lk + d]);
    return s * scale + (A ? (double)CT_LD(A[j]) : 0.0);
}

/* One query row a work item, two passes over the keys (the scores'
 * maximum, then the weighted sum of v); the row's logsumexp to stats[r]
 * unless it is NULL. */
CT_GLOBAL CT_SFX(ct_sdpa)(const CT_T *q, const CT_T *k, const CT_T *v, const CT_T *bias, CT_T *y, float *stats,
                          long long rows, long long N, long long M, long long D, float scale, long long H, long long sb,
                          long long sh, int packed)
{
    CT_LOOP(r, rows)
    {
        const CtAttHead at = ct_att_head(r / N, N, M, H, D, packed);
        const long long i = r % N, lk = at.lkv;
        const CT_T *Q = q + at.q + i * at.lq, *K = k + at.k, *V = v + at.v;
        const CT_T *A = CT_SFX(ct_sdpa_bias_row)(bias, r, N, M, H, sb, sh);
        float acc[CT_MAX_HEAD];
        double m = -CT_INF, l = 0;
        for (long long j = 0; j < M; j++) {
            double s = CT_SFX(ct_sdpa_score)(Q, K, A, j, D, lk, scale);
            m = s > m ? s : m;
        }
        m = m == -CT_INF ? 0 : m;
        for (long long d = 0; d < D; d++)
            acc[d] = 0;
        for (long long j = 0; j < M; j++) {
            float p = (float)exp(CT_SFX(ct_sdpa_score)(Q, K, A, j, D, lk, scale) - m);
            l += p;
            for (long long d = 0; d < D; d++)
                acc[d] += p * CT_LD(V[j * lk + d]);
        }
        for (long long d = 0; d < D; d++)
            y[at.o + i * at.lo + d] = CT_ST((float)(acc[d] / l));
        if (stats)
            stats[r] = (float)(m + log(l));
    }
}

/* Attention's dq, one query row a work item: with P the attention weights
 * from the row's statistics st[3r..3r+2] (ct_attn_delta's base, sum and
 * dot = dO . O = rowsum(dP * P)), dP = dy v^T and dS = P (dP - dot),
 * dq = scale * sum_j dS_j k_j; dS to dbias [BH, N, M] unless it is NULL. */
CT_GLOBAL CT_SFX(ct_sdpa_grad_q)(const CT_T *q, const CT_T *k, const CT_T *v, const CT_T *dy, const CT_T *bias,
                                 CT_T *dq, CT_T *dbias, const float *stats, long long rows, long long N, long long M,
                                 long long D, float scale, long long H, long long sb, long long sh, int packed)
{
    CT_LOOP(r, rows)
    {
        const CtAttHead at = ct_att_head(r / N, N, M, H, D, packed);
        const long long i = r % N, lk = at.lkv;
        const CT_T *Q = q + at.q + i * at.lq, *K = k + at.k, *V = v + at.v, *G = dy + at.o + i * at.lo;
        const CT_T *A = CT_SFX(ct_sdpa_bias_row)(bias, r, N, M, H, sb, sh);
        const float *st = stats + 3 * r;
        float acc[CT_MAX_HEAD];
        for (long long d = 0; d < D; d++)
            acc[d] = 0;
        for (long long j = 0; j < M; j++) {
            double dp = 0;
            for (long long d = 0; d < D; d++)
                dp += (double)CT_LD(G[d]) * CT_LD(V[j * lk + d]);
            double dsb = exp(CT_SFX(ct_sdpa_score)(Q, K, A, j, D, lk, scale) - st[0]) / st[1] * (dp - st[2]);
            float ds = (float)(dsb * scale);
            if (dbias)
                dbias[r * M + j] = CT_ST((float)dsb);
            for (long long d = 0; d < D; d++)
                acc[d] += ds * CT_LD(K[j * lk + d]);
        }
        for (long long d = 0; d < D; d++)
            dq[at.q + i * at.lq + d] = CT_ST(acc[d]);
    }
}

/* Attention's dk and dv, one key row a work item, from ct_attn_delta's
 * stats: dv_j = sum_i P dy_i, dk_j = scale * sum_i P (dP - dot_i) q_i. */
CT_GLOBAL CT_SFX(ct_sdpa_grad_kv)(const CT_T *q, const CT_T *k, const CT_T *v, const CT_T *dy, const CT_T *bias,
                                  CT_T *dk, CT_T *dv, const float *stats, long long rows, long long N, long long M,
                                  long long D, float scale, long long H, long long sb, long long sh, int packed)
{
    CT_LOOP(r, rows)
    {
        long long h = r / M, j = r % M;
        const CtAttHead at = ct_att_head(h, N, M, H, D, packed);
        const long long lq = at.lq, lo = at.lo, kj = at.k + j * at.lkv, vj = at.v + j * at.lkv;
        const CT_T *Kj = k + kj, *Vj = v + vj, *Q = q + at.q, *G = dy + at.o;
        const CT_T *A = CT_SFX(ct_sdpa_bias_row)(bias, h * N, N, M, H, sb, sh);
        const float *st = stats + 3 * h * N;
        float ak[CT_MAX_HEAD], av[CT_MAX_HEAD];
        for (long long d = 0; d < D; d++)
            ak[d] = av[d] = 0;
        for (long long i = 0; i < N; i++) {
            double dp = 0;
            for (long long d = 0; d < D; d++)
                dp += (double)CT_LD(G[i * lo + d]) * CT_LD(Vj[d]);
            double s = CT_SFX(ct_sdpa_score)(Q + i * lq, Kj, A ? A + i * M + j : 0, 0, D, 0, scale);
            double p = exp(s - st[3 * i]) / st[3 * i + 1];
            float ds = (float)(p * (dp - st[3 * i + 2]) * scale);
            for (long long d = 0; d < D; d++) {
                av[d] += (float)p * CT_LD(G[i * lo + d]);
                ak[d] += ds * CT_LD(Q[i * lq + d]);
            }
        }
        for (long long d = 0; d < D; d++) {
            dk[kj + d] = CT_ST(ak[d]);
            dv[vj + d] = CT_ST(av[d]);
        }
    }
}

/* Attention in tiles, FlashAttention's way, for head dims up to CT_ATT_D
 * (the kernels above take the rest): a block takes R = CT_ATT_ROWS(D)
 * query rows of one head (a work item: head bh's query tile w) and walks
 * the keys R at a time through shared memory, keeping each row's running
 * maximum and sum of exponentials (the online softmax). Sums in float, in
 * the same order on every run. Shared rows are D + 1 floats apart, so the
 * threads of a warp reading one column of different rows hit different
 * banks. The gradient recomputes the weights from each row's logsumexp
 * (the forward's) and dO . O (ct_attn_delta), then takes dq a query tile a
 * block and dk, dv a key tile a block, so that no two blocks add into one
 * output. */

/* Rows [0, n) of X [.., D] (ld apart) into s [rows][D + 1] as float, zeros past n. */
CT_DEVICE void CT_SFX(ct_att_load)(const CT_T *X, long long ld, long long n, long long D, long long rows, float *s)
{
    for (int e = (int)CT_TID; e < rows * D; e += (int)CT_NTHREADS) {
        int r = e / (int)D, d = e - r * (int)D;
        s[r * (D + 1) + d] = r < n ? CT_LD(X[r * ld + d]) : 0.0f;
    }
}

CT_DEVICE float CT_SFX(ct_att_dot)(const float *a, const float *b, long long D)
{
    float s = 0;
    for (int d = 0; d < (int)D; d++)
        s += a[d] * b[d];
    return s;
}

/* The four dots of rows a0, a1 with rows b0, b1 into out (a0.b0, a0.b1,
 * a1.b0, a1.b1), each summed in ct_att_dot's order: a load from shared
 * memory serves two multiply-adds instead of one. */
CT_DEVICE void CT_SFX(ct_att_dot22)(const float *a0, const float *a1, const float *b0, const float *b1, int D,
                                    float *out)
{
    float s00 = 0, s01 = 0, s10 = 0, s11 = 0;
    for (int d = 0; d < D; d++) {
        float x0 = a0[d], x1 = a1[d], y0 = b0[d], y1 = b1[d];
        s00 += x0 * y0, s01 += x0 * y1, s10 += x1 * y0, s11 += x1 * y1;
    }
    out[0] = s00, out[1] = s01, out[2] = s10, out[3] = s11;
}

/* o[r][d] = o[r][d] * (alpha ? alpha[r] : 1) + sum_j w[r][j] x[j][d] over
 * the first nc of j, for rows [0, R) (w's rows C + 1 apart, x's P, o's D),
 * four rows of one column a work item, so that a load of x serves four
 * multiply-adds; each sum in j's order. */
CT_DEVICE void CT_SFX(ct_att_accum4)(float *o, const float *alpha, const float *w, const float *x, int R, int C,
                                      int D, int P, int nc)
{
    const int qr = R / 4;
    for (int e = (int)CT_TID; e < qr * D; e += (int)CT_NTHREADS) {
        int r = e / D, d = e - r * D;
        float acc[4];
        for (int b = 0; b < 4; b++)
            acc[b] = alpha ? o[(r + b * qr) * D + d] * alpha[r + b * qr] : o[(r + b * qr) * D + d];
        for (int j = 0; j < nc; j++) {
            float v = x[j * P + d];
            for (int b = 0; b < 4; b++)
                acc[b] += w[(r + b * qr) * (C + 1) + j] * v;
        }
        for (int b = 0; b < 4; b++)
            o[(r + b * qr) * D + d] = acc[b];
    }
}

/* The larger of m and parts[0..n), in that order (NaN never wins). */
CT_DEVICE float CT_SFX(ct_att_max)(float m, const float *parts, int n)
{
    for (int k = 0; k < n; k++)
        m = parts[k] > m ? parts[k] : m;
    return m;
}

/* A row's maximum as the exponentials' offset: 0 for a row whose scores
 * are all -inf so far (their weights 0, not NaN, until a finite one comes;
 * a row all -inf ends as 0 / 0, NaN, as ref's softmax gives). */
CT_DEVICE float CT_SFX(ct_att_base)(float m) { return m == -(float)CT_INF ? 0.0f : m; }

/* The forward's shared memory s at head dim D, laid out as CtAttShared. */
CT_DEVICE CtAttShared CT_SFX(ct_att_carve)(float *s, long long D)
{
    long long R = CT_ATT_ROWS(D);
    CtAttShared a;
    a.qs = s, a.ks = a.qs + R * (D + 1), a.vs = a.ks + R * (D + 1), a.ss = a.vs + R * (D + 1);
    a.os = a.ss + R * (R + 1), a.mx = a.os + R * D, a.sum = a.mx + R, a.alpha = a.sum + R;
    a.pmax = a.alpha + R, a.psum = a.pmax + CT_LIB_BLOCK;
    return a;
}

/* The online softmax of query rows [0, nr) (q in a->qs) over the M keys of
 * K and V [M, D] (rows lk apart), bias rows A [nr, M] or NULL: leaves os [R][D] =
 * sum_j exp(s_j - base) v_j and sum[r] = sum_j exp(s_j - base), base =
 * ct_att_base(mx[r]). ks, vs, ss and alpha are the block's scratch. */
CT_DEVICE void CT_SFX(ct_att_rows)(const CtAttShared *a, const CT_T *K, const CT_T *V, long long lk, const CT_T *A,
                                   long long nr, long long M, long long D, float scale)
{
    const float *qs = a->qs;
    float *ks = a->ks, *vs = a->vs, *ss = a->ss, *os = a->os, *mx = a->mx, *sum = a->sum, *alpha = a->alpha;
    float *pmax = a->pmax, *psum = a->psum;
    const long long R = CT_ATT_ROWS(D), C = R, P = D + 1;
    const int G = CT_NTHREADS >= R ? (int)(CT_NTHREADS / R) : 1; /* threads a row in the softmax */
    for (int e = (int)CT_TID; e < R * D; e += (int)CT_NTHREADS)
        os[e] = 0;
    for (int r = (int)CT_TID; r < R; r += (int)CT_NTHREADS)
        mx[r] = -(float)CT_INF, sum[r] = 0;
    for (long long j0 = 0; j0 < M; j0 += C) {
        long long nc = M - j0 < C ? M - j0 : C;
        CT_SYNC(); /* the last tile's readers are done */
        CT_SFX(ct_att_load)(K + j0 * lk, lk, nc, D, C, ks);
        CT_SFX(ct_att_load)(V + j0 * lk, lk, nc, D, C, vs);
        CT_SYNC();
        for (int e = (int)CT_TID; e < R * C / 4; e += (int)CT_NTHREADS) { /* rows r, r + R/2, keys j, j + C/2 */
            int hr = (int)R / 2, hc = (int)C / 2, r = e / hc, j = e - r * hc;
            float acc[4];
            CT_SFX(ct_att_dot22)(qs + r * P, qs + (r + hr) * P, ks + j * P, ks + (j + hc) * P, (int)D, acc);
            for (int b = 0; b < 4; b++) {
                int rb = r + (b >> 1) * hr, jb = j + (b & 1) * hc;
                float s = -(float)CT_INF;
                if (rb < nr && jb < nc)
                    s = acc[b] * scale + (A ? CT_LD(A[rb * M + j0 + jb]) : 0.0f);
                ss[rb * (C + 1) + jb] = s;
            }
        }
        CT_SYNC();
        /* each row's maximum and sum of exponentials by G threads, each
         * over every G-th key, their parts then taken in order: every
         * thread of the block has a share of the exponentials */
        for (int e = (int)CT_TID; e < R * G; e += (int)CT_NTHREADS) {
            int r = e / G, g = e - r * G;
            float m = -(float)CT_INF, *srow = ss + r * (C + 1);
            for (int j = g; j < (int)nc; j += G)
                m = srow[j] > m ? srow[j] : m; /* NaN never wins: it reaches the sum instead */
            pmax[e] = m;
        }
        CT_SYNC();
        for (int e = (int)CT_TID; e < R * G; e += (int)CT_NTHREADS) {
            int r = e / G, g = e - r * G;
            float base = CT_SFX(ct_att_base)(CT_SFX(ct_att_max)(mx[r], pmax + r * G, G)), l = 0;
            float *srow = ss + r * (C + 1);
            for (int j = g; j < (int)C; j += G)
                l += srow[j] = expf(srow[j] - base);
            psum[e] = l;
        }
        CT_SYNC();
        for (int r = (int)CT_TID; r < R; r += (int)CT_NTHREADS) {
            float m = CT_SFX(ct_att_max)(mx[r], pmax + r * G, G), l = 0;
            for (int g = 0; g < G; g++)
                l += psum[r * G + g];
            alpha[r] = expf(mx[r] - CT_SFX(ct_att_base)(m));
            sum[r] = sum[r] * alpha[r] + l;
            mx[r] = m;
        }
        CT_SYNC();
        CT_SFX(ct_att_accum4)(os, alpha, ss, vs, (int)R, (int)C, (int)D, (int)P, (int)nc);
    }
    CT_SYNC();
}

/* Head bh's bias rows from query row i0, or NULL. */
CT_DEVICE const CT_T *CT_SFX(ct_att_bias)(const CT_T *bias, long long bh, long long i0, long long M, long long H,
                                          long long sb, long long sh)
{
    return bias ? bias + bh / H * sb + bh % H * sh + i0 * M : 0;
}

/* Work item w's forward (query tile w % tiles of head w / tiles, tiles =
 * ceil(N / R)) in the shared memory a: its q rows loaded, then
 * ct_att_rows over every key. *row0 gets the tile's first query row
 * counted over all heads, *nr its rows, *at its head's rows, *i0 the
 * tile's first row in the head. */
CT_DEVICE void CT_SFX(ct_att_tile)(const CtAttShared *a, const CT_T *q, const CT_T *k, const CT_T *v,
                                   const CT_T *bias, long long w, long long N, long long M, long long D, float scale,
                                   long long H, long long sb, long long sh, int packed, long long *row0, long long *nr,
                                   CtAttHead *at, long long *i0)
{
    long long R = CT_ATT_ROWS(D), tiles = (N + R - 1) / R, bh = w / tiles;
    *i0 = w % tiles * R;
    *nr = N - *i0 < R ? N - *i0 : R;
    *row0 = bh * N + *i0;
    *at = ct_att_head(bh, N, M, H, D, packed);
    CT_SYNC(); /* the last work item's readers of qs and os are done */
    CT_SFX(ct_att_load)(q + at->q + *i0 * at->lq, at->lq, *nr, D, R, a->qs);
    CT_SFX(ct_att_rows)(a, k + at->k, v + at->v, at->lkv, CT_SFX(ct_att_bias)(bias, bh, *i0, M, H, sb, sh), *nr, M, D,
                        scale);
}

/* Attention's forward, a query tile a work item; each row's logsumexp to
 * stats[r] unless it is NULL. */
CT_GLOBAL CT_SFX(ct_attn)(const CT_T *q, const CT_T *k, const CT_T *v, const CT_T *bias, CT_T *y, float *stats,
                          long long BH, long long N, long long M, long long D, float scale, long long H, long long sb,
                          long long sh, int packed)
{
    CT_DYN_SHARED(float, ct_smem);
    const CtAttShared a = CT_SFX(ct_att_carve)(ct_smem, D);
    const long long R = CT_ATT_ROWS(D);
    CT_BLOCK_LOOP(w, BH * ((N + R - 1) / R))
    {
        long long row0, nr, i0;
        CtAttHead at;
        CT_SFX(ct_att_tile)(&a, q, k, v, bias, w, N, M, D, scale, H, sb, sh, packed, &row0, &nr, &at, &i0);
        for (int e = (int)CT_TID; e < nr * D; e += (int)CT_NTHREADS) {
            int r = e / (int)D;
            y[at.o + (i0 + r) * at.lo + e - r * D] = CT_ST(a.os[e] / a.sum[r]);
        }
        for (int r = (int)CT_TID; stats && r < nr; r += (int)CT_NTHREADS)
            stats[row0 + r] = CT_SFX(ct_att_base)(a.mx[r]) + logf(a.sum[r]);
    }
}

/* The backward's statistics of each query row, a warp a row, into st
 * [rows][3] for the gradient kernels (which take the weights as exp(s -
 * base) / sum): the logsumexp its forward left in stats [rows] as the base,
 * a sum of 1, and dO . O (which is the row's sum_j P_j dP_j) from y and
 * dy, so that none of them runs the forward again. */
CT_GLOBAL CT_SFX(ct_attn_delta)(const CT_T *y, const CT_T *dy, const float *stats, float *st, long long rows,
                                long long N, long long M, long long D, long long H, int packed)
{
    CT_WARP_LOOP(r, rows)
    {
        const CtAttHead at = ct_att_head(r / N, N, M, H, D, packed);
        const long long o = at.o + r % N * at.lo;
        double dot = 0;
        for (long long d = CT_LANE; d < D; d += CT_LANES)
            dot += (double)CT_LD(dy[o + d]) * CT_LD(y[o + d]);
        dot = CT_LANE_SUM(dot);
        if (CT_LANE == 0)
            st[3 * r] = stats[r], st[3 * r + 1] = 1.0f, st[3 * r + 2] = (float)dot;
    }
}

/* Weights P and dS = P (dP - dO . O) of query rows r0, r1 (q and dO rows
 * in q and g, P floats apart; stats in st, 3 a row) and keys c0, c1 (k, v)
 * into p[b] and ds[b], b = 2 * (row) + (key), a[b] their biases (0 for
 * none): the scores in ct_att_dot22's 2x2 block, dP = dO . v likewise in
 * CT_ACC, double for f32 storage (dP - dO . O cancels, which float sums
 * over long rows leave at 1e-5 of dq), float for f16 and bf16, whose own
 * rounding is far coarser. */
CT_DEVICE void CT_SFX(ct_att_ds22)(const float *q, const float *g, const float *k, const float *v, const float *st,
                                   int r0, int r1, int c0, int c1, int P, const float *a, int D, float scale, float *p,
                                   float *ds)
{
    float s[4];
    CT_ACC t00 = 0, t01 = 0, t10 = 0, t11 = 0;
    const float *g0 = g + r0 * P, *g1 = g + r1 * P, *v0 = v + c0 * P, *v1 = v + c1 * P;
    CT_SFX(ct_att_dot22)(q + r0 * P, q + r1 * P, k + c0 * P, k + c1 * P, D, s);
    for (int d = 0; d < D; d++) {
        CT_ACC x0 = g0[d], x1 = g1[d], y0 = v0[d], y1 = v1[d];
        t00 += x0 * y0, t01 += x0 * y1, t10 += x1 * y0, t11 += x1 * y1;
    }
    CT_ACC t[4] = {t00, t01, t10, t11};
    for (int b = 0; b < 4; b++) {
        const float *sr = st + 3 * (b < 2 ? r0 : r1);
        p[b] = expf(s[b] * scale + a[b] - sr[0]) / sr[1];
        ds[b] = (float)(p[b] * (t[b] - sr[2]));
    }
}

/* Rows [0, nr) of the stats at row0 into st [R][3]; the rows past them
 * get a base of 0 and a sum of 1, so that their (unused) weights are finite. */
CT_DEVICE void CT_SFX(ct_att_stats_load)(const float *stats, long long row0, long long nr, long long R, float *st)
{
    for (int e = (int)CT_TID; e < 3 * R; e += (int)CT_NTHREADS)
        st[e] = e < 3 * nr ? stats[3 * row0 + e] : (float)(e % 3 == 1);
}

/* dv[j][d] += sum_i w[j][i] g[i][d] and dk[j][d] += sum_i u[j][i] q[i][d]
 * over the first nr of i, for keys [0, C) (w's and u's rows R + 1 apart,
 * g's and q's P, dv's and dk's D): four keys of one column a work item, so
 * that a load of g or q serves four multiply-adds; each sum in i's order. */
CT_DEVICE void CT_SFX(ct_att_accum_kv)(float *dv, float *dk, const float *w, const float *u, const float *g,
                                       const float *q, int C, int R, int D, int P, int nr)
{
    const int qc = C / 4;
    for (int e = (int)CT_TID; e < qc * D; e += (int)CT_NTHREADS) {
        int j = e / D, d = e - j * D;
        float av[4], ak[4];
        for (int b = 0; b < 4; b++)
            av[b] = dv[(j + b * qc) * D + d], ak[b] = dk[(j + b * qc) * D + d];
        for (int i = 0; i < nr; i++) {
            float x = g[i * P + d], y = q[i * P + d];
            for (int b = 0; b < 4; b++) {
                av[b] += w[(j + b * qc) * (R + 1) + i] * x;
                ak[b] += u[(j + b * qc) * (R + 1) + i] * y;
            }
        }
        for (int b = 0; b < 4; b++)
            dv[(j + b * qc) * D + d] = av[b], dk[(j + b * qc) * D + d] = ak[b];
    }
}

/* Attention's dq (and dS to dbias [BH, N, M] unless NULL), a query tile a
 * work item, from ct_attn_delta's stats. */
CT_GLOBAL CT_SFX(ct_attn_grad_q)(const CT_T *q, const CT_T *k, const CT_T *v, const CT_T *dy, const CT_T *bias,
                                 CT_T *dq, CT_T *dbias, const float *stats, long long BH, long long N, long long M,
                                 long long D, float scale, long long H, long long sb, long long sh, int packed)
{
    const long long R = CT_ATT_ROWS(D), C = R, P = D + 1, tiles = (N + R - 1) / R;
    CT_DYN_SHARED(float, ct_smem);
    float *qs = ct_smem, *gs = qs + R * P, *ks = gs + R * P, *vs = ks + C * P, *ss = vs + C * P;
    float *dqs = ss + R * (C + 1), *st = dqs + R * D;
    CT_BLOCK_LOOP(w, BH * tiles)
    {
        long long bh = w / tiles, i0 = w % tiles * R, nr = N - i0 < R ? N - i0 : R, row0 = bh * N + i0;
        const CtAttHead at = ct_att_head(bh, N, M, H, D, packed);
        const long long lk = at.lkv;
        const CT_T *K = k + at.k, *V = v + at.v, *A = CT_SFX(ct_att_bias)(bias, bh, i0, M, H, sb, sh);
        CT_SYNC();
        CT_SFX(ct_att_load)(q + at.q + i0 * at.lq, at.lq, nr, D, R, qs);
        CT_SFX(ct_att_load)(dy + at.o + i0 * at.lo, at.lo, nr, D, R, gs);
        for (int e = (int)CT_TID; e < R * D; e += (int)CT_NTHREADS)
            dqs[e] = 0;
        CT_SFX(ct_att_stats_load)(stats, row0, nr, R, st);
        for (long long j0 = 0; j0 < M; j0 += C) {
            long long nc = M - j0 < C ? M - j0 : C;
            CT_SYNC();
            CT_SFX(ct_att_load)(K + j0 * lk, lk, nc, D, C, ks);
            CT_SFX(ct_att_load)(V + j0 * lk, lk, nc, D, C, vs);
            CT_SYNC();
            for (int e = (int)CT_TID; e < R * C / 4; e += (int)CT_NTHREADS) { /* rows r, r + R/2, keys j, j + C/2 */
                int hr = (int)R / 2, hc = (int)C / 2, r = e / hc, j = e - r * hc;
                float a[4], p[4], ds[4];
                for (int b = 0; b < 4; b++) {
                    int rb = r + (b >> 1) * hr, jb = j + (b & 1) * hc;
                    a[b] = A && rb < nr && jb < nc ? CT_LD(A[rb * M + j0 + jb]) : 0.0f;
                }
                CT_SFX(ct_att_ds22)(qs, gs, ks, vs, st, r, r + hr, j, j + hc, (int)P, a, (int)D, scale, p, ds);
                for (int b = 0; b < 4; b++) {
                    int rb = r + (b >> 1) * hr, jb = j + (b & 1) * hc, in = rb < nr && jb < nc;
                    if (in && dbias)
                        dbias[(row0 + rb) * M + j0 + jb] = CT_ST(ds[b]);
                    ss[rb * (C + 1) + jb] = in ? ds[b] * scale : 0.0f;
                }
            }
            CT_SYNC();
            CT_SFX(ct_att_accum4)(dqs, 0, ss, ks, (int)R, (int)C, (int)D, (int)P, (int)nc);
        }
        CT_SYNC(); /* other threads summed the rows stored here */
        for (int e = (int)CT_TID; e < nr * D; e += (int)CT_NTHREADS) {
            int r = e / (int)D;
            dq[at.q + (i0 + r) * at.lq + e - r * D] = CT_ST(dqs[e]);
        }
    }
}

/* Attention's dk and dv, a tile of R / 2 keys a work item, walking the
 * queries R at a time: dv_j = sum_i P_ij dO_i, dk_j = scale *
 * sum_i dS_ij q_i. */
CT_GLOBAL CT_SFX(ct_attn_grad_kv)(const CT_T *q, const CT_T *k, const CT_T *v, const CT_T *dy, const CT_T *bias,
                                  CT_T *dk, CT_T *dv, const float *stats, long long BH, long long N, long long M,
                                  long long D, float scale, long long H, long long sb, long long sh, int packed)
{
    const long long R = CT_ATT_ROWS(D), C = R / 2, P = D + 1, tiles = (M + C - 1) / C;
    CT_DYN_SHARED(float, ct_smem);
    float *ks = ct_smem, *vs = ks + C * P, *qs = vs + C * P, *gs = qs + R * P, *ps = gs + R * P;
    float *dss = ps + C * (R + 1), *dks = dss + C * (R + 1), *dvs = dks + C * D, *st = dvs + C * D;
    CT_BLOCK_LOOP(w, BH * tiles)
    {
        long long bh = w / tiles, j0 = w % tiles * C, nc = M - j0 < C ? M - j0 : C;
        const CtAttHead at = ct_att_head(bh, N, M, H, D, packed);
        const long long lk = at.lkv;
        const CT_T *A = CT_SFX(ct_att_bias)(bias, bh, 0, M, H, sb, sh);
        CT_SYNC();
        CT_SFX(ct_att_load)(k + at.k + j0 * lk, lk, nc, D, C, ks);
        CT_SFX(ct_att_load)(v + at.v + j0 * lk, lk, nc, D, C, vs);
        for (int e = (int)CT_TID; e < C * D; e += (int)CT_NTHREADS)
            dks[e] = dvs[e] = 0;
        for (long long i0 = 0; i0 < N; i0 += R) {
            long long nr = N - i0 < R ? N - i0 : R, row0 = bh * N + i0;
            CT_SYNC();
            CT_SFX(ct_att_load)(q + at.q + i0 * at.lq, at.lq, nr, D, R, qs);
            CT_SFX(ct_att_load)(dy + at.o + i0 * at.lo, at.lo, nr, D, R, gs);
            CT_SFX(ct_att_stats_load)(stats, row0, nr, R, st);
            CT_SYNC();
            for (int e = (int)CT_TID; e < C * R / 4; e += (int)CT_NTHREADS) { /* keys j, j + C/2, rows i, i + R/2 */
                int hc = (int)C / 2, hr = (int)R / 2, j = e / hr, i = e - j * hr;
                float a[4], p[4], ds[4];
                for (int b = 0; b < 4; b++) {
                    int ib = i + (b >> 1) * hr, jb = j + (b & 1) * hc;
                    a[b] = A && ib < nr && jb < nc ? CT_LD(A[(i0 + ib) * M + j0 + jb]) : 0.0f;
                }
                CT_SFX(ct_att_ds22)(qs, gs, ks, vs, st, i, i + hr, j, j + hc, (int)P, a, (int)D, scale, p, ds);
                for (int b = 0; b < 4; b++) {
                    int ib = i + (b >> 1) * hr, jb = j + (b & 1) * hc, in = ib < nr && jb < nc;
                    ps[jb * (R + 1) + ib] = in ? p[b] : 0.0f;
                    dss[jb * (R + 1) + ib] = in ? ds[b] * scale : 0.0f;
                }
            }
            CT_SYNC();
            CT_SFX(ct_att_accum_kv)(dvs, dks, ps, dss, gs, qs, (int)C, (int)R, (int)D, (int)P, (int)nr);
        }
        CT_SYNC(); /* other threads summed the keys stored here */
        for (int e = (int)CT_TID; e < nc * D; e += (int)CT_NTHREADS) {
            int j = e / (int)D, d = e - j * (int)D;
            dk[at.k + (j0 + j) * lk + d] = CT_ST(dks[e]);
            dv[at.v + (j0 + j) * lk + d] = CT_ST(dvs[e]);
        }
    }
}

#ifdef CT_MMA16
/* Attention's forward on tensor cores, for the 16-bit storage types and
 * head dims D % 16 == 0 up to CT_ATT_D (FlashAttention-2's way): a block
 * takes 16 query rows a warp of one head, their q in mma fragments, and
 * walks the keys CT_TC_KEYS at a time through shared memory (k and v rows
 * in the storage type, D + CT_TC_PAD apart so that a fragment's loads
 * miss each other's banks); each warp keeps its rows' scores, running
 * maxima, sums and outputs in registers. m16n8k16's fragments: lane
 * 4 g + t holds rows g and g + 8, columns 2 t, 2 t + 1 (and 2 t + 8, 2 t +
 * 9 of A); a register packs two elements, the lower column first. */

/* d (16x8, f32) += a (16x16) b (16x8): mma.sync, or on the cuda-sim the
 * same sums, each lane reading the fragments it needs from the warp's
 * registers put in shared memory (two warp barriers, where a shuffle a
 * register would take thirty-two). */
CT_DEVICE void CT_SFX(ct_mma)(float *d, const unsigned *a, const unsigned *b)
{
#ifdef CT_SIMT
    CT_SHARED unsigned frags[CT_LIB_BLOCK / 32][32][6];
    int lane = (int)(CT_TID & 31), g = lane >> 2, t = lane & 3;
    unsigned(*f)[6] = frags[CT_TID / 32];
    for (int e = 0; e < 4; e++)
        f[lane][e] = a[e];
    f[lane][4] = b[0], f[lane][5] = b[1];
    __syncwarp();
    for (int k = 0; k < 16; k += 2) { /* columns k, k + 1 of A, rows k, k + 1 of B */
        int hi = k >= 8, src = (k & 7) >> 1;
        unsigned r0 = f[g * 4 + src][2 * hi], r1 = f[g * 4 + src][2 * hi + 1];
        unsigned c0 = f[2 * t * 4 + src][4 + hi], c1 = f[(2 * t + 1) * 4 + src][4 + hi];
        float a00 = CT_LD((CT_T)(r0 & 0xffff)), a01 = CT_LD((CT_T)(r0 >> 16));
        float a10 = CT_LD((CT_T)(r1 & 0xffff)), a11 = CT_LD((CT_T)(r1 >> 16));
        float b00 = CT_LD((CT_T)(c0 & 0xffff)), b10 = CT_LD((CT_T)(c0 >> 16));
        float b01 = CT_LD((CT_T)(c1 & 0xffff)), b11 = CT_LD((CT_T)(c1 >> 16));
        d[0] += a00 * b00 + a01 * b10, d[1] += a00 * b01 + a01 * b11;
        d[2] += a10 * b00 + a11 * b10, d[3] += a10 * b01 + a11 * b11;
    }
    __syncwarp(); /* read before the next product's fragments are put */
#else
    CT_MMA16816(d, a, b);
#endif
}

CT_DEVICE unsigned CT_SFX(ct_pack)(CT_T lo, CT_T hi) { return (unsigned)lo | (unsigned)hi << 16; }

/* Rows [0, n) of X and of Y [., D] (lx and ly apart) into the shared
 * tiles s and u of CT_TC_KEYS rows, D + CT_TC_PAD apart; the rows past n
 * zero, so that their products are. */
CT_DEVICE void CT_SFX(ct_tc_load)(CT_T *s, const CT_T *X, long long lx, CT_T *u, const CT_T *Y, long long ly, int n,
                                  int D)
{
    const int P = D + CT_TC_PAD;
    for (int e = (int)CT_TID; e < CT_TC_KEYS * D; e += (int)CT_NTHREADS) {
        int r = e / D, d = e - r * D;
        s[r * P + d] = r < n ? X[r * lx + d] : (CT_T)0;
        u[r * P + d] = r < n ? Y[r * ly + d] : (CT_T)0;
    }
}

/* ntiles c fragments of zeros. */
CT_DEVICE void CT_SFX(ct_tc_zero)(float (*acc)[4], int ntiles)
{
    CT_UNROLL
    for (int nt = 0; nt < ntiles; nt++)
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0;
}

/* acc (16 x D in c fragments, ntiles >= D / 8 of them) += w (16 x 32, c
 * fragments, rounded to the storage type as A fragments) times the shared
 * X's first 32 rows (P apart): the products P v, P^T dO, dS k and dS^T q. */
CT_DEVICE void CT_SFX(ct_tc_accum)(float (*acc)[4], int ntiles, float (*w)[4], const CT_T *X, int P, int D)
{
    const int lane = (int)(CT_TID & 31), g = lane >> 2, t = lane & 3;
    CT_UNROLL
    for (int kk = 0; kk < 2; kk++) {
        unsigned a[4] = {CT_SFX(ct_pack)(CT_ST(w[2 * kk][0]), CT_ST(w[2 * kk][1])),
                         CT_SFX(ct_pack)(CT_ST(w[2 * kk][2]), CT_ST(w[2 * kk][3])),
                         CT_SFX(ct_pack)(CT_ST(w[2 * kk + 1][0]), CT_ST(w[2 * kk + 1][1])),
                         CT_SFX(ct_pack)(CT_ST(w[2 * kk + 1][2]), CT_ST(w[2 * kk + 1][3]))};
        const CT_T *xr = X + (16 * kk + 2 * t) * P + g;
        CT_UNROLL
        for (int nt = 0; nt < ntiles; nt++)
            if (nt < D / 8) {
                unsigned b[2] = {CT_SFX(ct_pack)(xr[8 * nt], xr[P + 8 * nt]),
                                 CT_SFX(ct_pack)(xr[8 * P + 8 * nt], xr[9 * P + 8 * nt])};
                CT_SFX(ct_mma)(acc[nt], a, b);
            }
    }
}

/* Warp `wid`'s 16 rows from row i0 of head bh (q rows Q [N, D] lq apart,
 * keys K, V [M, D] lk apart, bias rows A [N, M] or NULL) over every key: o (the unnormalised
 * output: o[nt] columns 8 nt + 2 t, + 1 of rows g, g + 8), each row's
 * maximum mx and sum of exponentials l, summed over the quad. ks, vs: the
 * block's shared key and value tiles. */
CT_DEVICE void CT_SFX(ct_att_tc_rows)(const CT_T *Q, long long lq, const CT_T *K, const CT_T *V, long long lk,
                                      const CT_T *A, CT_T *ks, CT_T *vs, long long i0, long long N, long long M, int D,
                                      float scale, float o[16][4], float mx[2], float l[2])
{
    const unsigned all = 0xffffffffu;
    const int lane = (int)(CT_TID & 31), g = lane >> 2, t = lane & 3, P = D + CT_TC_PAD, nks = D / 16;
    unsigned qa[8][4];
    CT_UNROLL
    for (int kk = 0; kk < 8; kk++) {
        CT_UNROLL
        for (int e = 0; e < 4; e++) {
            long long r = i0 + g + (e & 1) * 8;
            int c = 16 * kk + 2 * t + (e >> 1) * 8;
            qa[kk][e] = kk < nks && r < N ? CT_SFX(ct_pack)(Q[r * lq + c], Q[r * lq + c + 1]) : 0u;
        }
    }
    CT_SFX(ct_tc_zero)(o, 16);
    mx[0] = mx[1] = -(float)CT_INF, l[0] = l[1] = 0;
    for (long long j0 = 0; j0 < M; j0 += CT_TC_KEYS) {
        int nc = M - j0 < CT_TC_KEYS ? (int)(M - j0) : CT_TC_KEYS;
        CT_SYNC(); /* the last tile's readers are done */
        CT_SFX(ct_tc_load)(ks, K + j0 * lk, lk, vs, V + j0 * lk, lk, nc, D);
        CT_SYNC();
        float s[8][4];
        CT_UNROLL
        for (int nt = 0; nt < 8; nt++) { /* keys 8 nt .. 8 nt + 7 */
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0;
            const CT_T *kr = ks + (8 * nt + g) * P + 2 * t;
            CT_UNROLL
            for (int kk = 0; kk < 8; kk++)
                if (kk < nks) {
                    unsigned kb[2] = {CT_SFX(ct_pack)(kr[16 * kk], kr[16 * kk + 1]),
                                      CT_SFX(ct_pack)(kr[16 * kk + 8], kr[16 * kk + 9])};
                    CT_SFX(ct_mma)(s[nt], qa[kk], kb);
                }
            CT_UNROLL
            for (int e = 0; e < 4; e++) {
                long long r = i0 + g + (e >> 1) * 8;
                int j = 8 * nt + 2 * t + (e & 1);
                s[nt][e] = j < nc ? s[nt][e] * scale + (A && r < N ? CT_LD(A[r * M + j0 + j]) : 0.0f)
                                  : -(float)CT_INF;
            }
        }
        CT_UNROLL
        for (int h = 0; h < 2; h++) { /* row g + 8 h: the online softmax */
            float m = mx[h];
            CT_UNROLL
            for (int nt = 0; nt < 8; nt++) {
                CT_UNROLL
                for (int e = 2 * h; e < 2 * h + 2; e++)
                    m = s[nt][e] > m ? s[nt][e] : m; /* NaN never wins: it reaches the sum instead */
            }
            for (int off = 1; off < 4; off <<= 1) {
                float other = __shfl_xor_sync(all, m, off);
                m = other > m ? other : m;
            }
            float base = CT_SFX(ct_att_base)(m), alpha = expf(mx[h] - base);
            mx[h] = m, l[h] *= alpha;
            CT_UNROLL
            for (int nt = 0; nt < 16; nt++)
                o[nt][2 * h] *= alpha, o[nt][2 * h + 1] *= alpha;
            CT_UNROLL
            for (int nt = 0; nt < 8; nt++) {
                CT_UNROLL
                for (int e = 2 * h; e < 2 * h + 2; e++)
                    l[h] += s[nt][e] = expf(s[nt][e] - base);
            }
        }
        CT_SFX(ct_tc_accum)(o, 16, s, vs, P, D); /* keys 0 .. 31, then 32 .. 63 */
        CT_SFX(ct_tc_accum)(o, 16, s + 4, vs + 32 * P, P, D);
    }
    CT_UNROLL
    for (int h = 0; h < 2; h++)
        for (int off = 1; off < 4; off <<= 1)
            l[h] += __shfl_xor_sync(all, l[h], off);
}

/* Attention's forward on tensor cores, a tile of 16 rows a warp a work
 * item: y, and each row's logsumexp to stats[r] unless it is NULL. */
CT_GLOBAL16 CT_SFX(ct_attn_tc)(const CT_T *q, const CT_T *k, const CT_T *v, const CT_T *bias, CT_T *y, float *stats,
                               long long BH, long long N, long long M, long long D, float scale, long long H,
                               long long sb, long long sh, int packed)
{
    CT_DYN_SHARED(float, ct_smem);
    CT_T *ks = (CT_T *)ct_smem, *vs = ks + CT_TC_KEYS * (D + CT_TC_PAD);
    const long long R = 16 * (CT_NTHREADS / 32), tiles = (N + R - 1) / R;
    const int lane = (int)(CT_TID & 31), g = lane >> 2, t = lane & 3;
    CT_BLOCK_LOOP(w, BH * tiles)
    {
        long long bh = w / tiles, i0 = w % tiles * R + 16 * (CT_TID / 32);
        float o[16][4], mx[2], l[2];
        const CtAttHead hd = ct_att_head(bh, N, M, H, D, packed);
        CT_SFX(ct_att_tc_rows)(q + hd.q, hd.lq, k + hd.k, v + hd.v, hd.lkv, CT_SFX(ct_att_bias)(bias, bh, 0, M, H, sb, sh),
                               ks, vs, i0, N, M, (int)D, scale, o, mx, l);
        CT_UNROLL
        for (int h = 0; h < 2; h++) {
            long long r = i0 + g + 8 * h;
            CT_UNROLL
            for (int nt = 0; nt < 16; nt++) /* a fixed count, so that o stays in registers */
                if (r < N && nt < D / 8) {
                    long long at = hd.o + r * hd.lo + 8 * nt + 2 * t;
                    y[at] = CT_ST(o[nt][2 * h] / l[h]), y[at + 1] = CT_ST(o[nt][2 * h + 1] / l[h]);
                }
            if (stats && r < N && t == 0)
                stats[bh * N + r] = CT_SFX(ct_att_base)(mx[h]) + logf(l[h]);
        }
    }
}

/* Attention's backward on tensor cores, head dims D % 16 == 0 up to
 * CT_TC_GRAD_D (its fragments' registers sized for those), from the rows'
 * statistics ct_attn_delta leaves: ct_attn_tc_grad_q takes dq (and dbias) 16
 * query rows a warp, walking the keys; ct_attn_tc_grad_kv dk and dv 16 keys
 * a warp, walking the queries, the same products transposed (keys are the
 * fragments' rows). Each recomputes the scores and dP = dO v^T, as
 * FlashAttention-2's backward does, but without its atomic adds to dq: every
 * sum has one owner, so the results are the same bits on every run. */

/* a: the A fragments of rows r0 .. r0 + 15 of X [n, D] (ld apart; zero past n or D). */
CT_DEVICE void CT_SFX(ct_tc_frag)(unsigned a[4][4], const CT_T *X, long long ld, long long r0, long long n, int D)
{
    const int lane = (int)(CT_TID & 31), g = lane >> 2, t = lane & 3;
    CT_UNROLL
    for (int kk = 0; kk < 4; kk++) {
        CT_UNROLL
        for (int e = 0; e < 4; e++) {
            long long r = r0 + g + (e & 1) * 8;
            int c = 16 * kk + 2 * t + (e >> 1) * 8;
            a[kk][e] = 16 * kk < D && r < n ? CT_SFX(ct_pack)(X[r * ld + c], X[r * ld + c + 1]) : 0u;
        }
    }
}

/* c[nt] = the 16 rows of a times rows 8 nt .. 8 nt + 7 of the shared X (P
 * apart), transposed: 16 x 32 products of rows. */
CT_DEVICE void CT_SFX(ct_tc_scores)(float c[4][4], unsigned a[4][4], const CT_T *X, int P, int D)
{
    const int lane = (int)(CT_TID & 31), g = lane >> 2, t = lane & 3;
    CT_UNROLL
    for (int nt = 0; nt < 4; nt++) {
        c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0;
        const CT_T *xr = X + (8 * nt + g) * P + 2 * t;
        CT_UNROLL
        for (int kk = 0; kk < 4; kk++)
            if (16 * kk < D) {
                unsigned b[2] = {CT_SFX(ct_pack)(xr[16 * kk], xr[16 * kk + 1]),
                                 CT_SFX(ct_pack)(xr[16 * kk + 8], xr[16 * kk + 9])};
                CT_SFX(ct_mma)(c[nt], a[kk], b);
            }
    }
}

/* P = exp(s scale + a - base) / sum and dS = P (dP - dO . O) of a score
 * whose row has the statistics st (ct_attn_delta's base, sum, dO . O). */
CT_DEVICE float CT_SFX(ct_tc_ds)(float s, float dp, float a, const float *st, float scale, float *p)
{
    *p = expf(s * scale + a - st[0]) / st[1];
    return *p * (dp - st[2]);
}

/* The 16 x D sums of c fragments to rows r0 .. of Y [n, D] (ld apart). */
CT_DEVICE void CT_SFX(ct_tc_store)(CT_T *Y, long long ld, float acc[8][4], long long r0, long long n, int D)
{
    const int lane = (int)(CT_TID & 31), g = lane >> 2, t = lane & 3;
    CT_UNROLL
    for (int nt = 0; nt < 8; nt++)
        CT_UNROLL
        for (int h = 0; h < 2; h++) {
            long long r = r0 + g + 8 * h;
            if (r < n && nt < D / 8) {
                long long at = r * ld + 8 * nt + 2 * t;
                Y[at] = CT_ST(acc[nt][2 * h]), Y[at + 1] = CT_ST(acc[nt][2 * h + 1]);
            }
        }
}

/* dq = scale sum_j dS_ij k_j (and dS to dbias [BH, N, M] unless NULL),
 * 16 rows a warp, the keys CT_TC_KEYS a tile through shared memory and 32
 * at a time through registers. */
CT_GLOBAL16 CT_SFX(ct_attn_tc_grad_q)(const CT_T *q, const CT_T *k, const CT_T *v, const CT_T *dy, const CT_T *bias,
                                      CT_T *dq, CT_T *dbias, const float *stats, long long BH, long long N, long long M,
                                      long long D, float scale, long long H, long long sb, long long sh, int packed)
{
    CT_DYN_SHARED(float, ct_smem);
    const int P = (int)D + CT_TC_PAD, lane = (int)(CT_TID & 31), g = lane >> 2, t = lane & 3;
    CT_T *ks = (CT_T *)ct_smem, *vs = ks + CT_TC_KEYS * P;
    const long long R = 16 * (CT_NTHREADS / 32), tiles = (N + R - 1) / R;
    CT_BLOCK_LOOP(w, BH * tiles)
    {
        long long bh = w / tiles, i0 = w % tiles * R + 16 * (CT_TID / 32);
        const CT_T *A = CT_SFX(ct_att_bias)(bias, bh, 0, M, H, sb, sh);
        const CtAttHead hd = ct_att_head(bh, N, M, H, D, packed);
        unsigned qa[4][4], ga[4][4];
        CT_SFX(ct_tc_frag)(qa, q + hd.q, hd.lq, i0, N, (int)D);
        CT_SFX(ct_tc_frag)(ga, dy + hd.o, hd.lo, i0, N, (int)D);
        float acc[8][4], st[2][3];
        CT_SFX(ct_tc_zero)(acc, 8);
        CT_UNROLL
        for (int h = 0; h < 2; h++) { /* rows past N: a base of 0 and a sum of 1 keep their weights finite */
            long long r = i0 + g + 8 * h;
            CT_UNROLL
            for (int c = 0; c < 3; c++)
                st[h][c] = r < N ? stats[3 * (bh * N + r) + c] : (float)(c == 1);
        }
        for (long long j0 = 0; j0 < M; j0 += CT_TC_KEYS) {
            int nc = M - j0 < CT_TC_KEYS ? (int)(M - j0) : CT_TC_KEYS;
            CT_SYNC(); /* the last tile's readers are done */
            CT_SFX(ct_tc_load)(ks, k + hd.k + j0 * hd.lkv, hd.lkv, vs, v + hd.v + j0 * hd.lkv, hd.lkv, nc, (int)D);
            CT_SYNC();
            for (int c0 = 0; c0 < nc; c0 += 32) {
                float s[4][4], dp[4][4];
                CT_SFX(ct_tc_scores)(s, qa, ks + c0 * P, P, (int)D);
                CT_SFX(ct_tc_scores)(dp, ga, vs + c0 * P, P, (int)D);
                CT_UNROLL
                for (int nt = 0; nt < 4; nt++)
                    CT_UNROLL
                    for (int e = 0; e < 4; e++) {
                        long long r = i0 + g + (e >> 1) * 8, j = j0 + c0 + 8 * nt + 2 * t + (e & 1);
                        int in = r < N && j < M;
                        float p, ds = CT_SFX(ct_tc_ds)(s[nt][e], dp[nt][e], A && in ? CT_LD(A[r * M + j]) : 0.0f,
                                                       st[e >> 1], scale, &p);
                        if (in && dbias)
                            dbias[(bh * N + r) * M + j] = CT_ST(ds);
                        s[nt][e] = in ? ds * scale : 0.0f;
                    }
                CT_SFX(ct_tc_accum)(acc, 8, s, ks + c0 * P, P, (int)D);
            }
        }
        CT_SFX(ct_tc_store)(dq + hd.q, hd.lq, acc, i0, N, (int)D);
    }
}

/* dv = sum_i P_ij dO_i and dk = scale sum_i dS_ij q_i, 16 keys a warp, the
 * queries (their q and dO rows, and statistics) CT_TC_KEYS a tile through
 * shared memory and 32 at a time through registers. */
CT_GLOBAL16 CT_SFX(ct_attn_tc_grad_kv)(const CT_T *q, const CT_T *k, const CT_T *v, const CT_T *dy, const CT_T *bias,
                                       CT_T *dk, CT_T *dv, const float *stats, long long BH, long long N, long long M,
                                       long long D, float scale, long long H, long long sb, long long sh, int packed)
{
    CT_DYN_SHARED(float, ct_smem);
    const int P = (int)D + CT_TC_PAD, lane = (int)(CT_TID & 31), g = lane >> 2, t = lane & 3;
    CT_T *qs = (CT_T *)ct_smem, *gs = qs + CT_TC_KEYS * P;
    float *sts = (float *)(gs + CT_TC_KEYS * P);
    const long long C = 16 * (CT_NTHREADS / 32), tiles = (M + C - 1) / C;
    CT_BLOCK_LOOP(w, BH * tiles)
    {
        long long bh = w / tiles, j0 = w % tiles * C + 16 * (CT_TID / 32);
        const CT_T *A = CT_SFX(ct_att_bias)(bias, bh, 0, M, H, sb, sh);
        const CtAttHead hd = ct_att_head(bh, N, M, H, D, packed);
        unsigned ka[4][4], va[4][4];
        CT_SFX(ct_tc_frag)(ka, k + hd.k, hd.lkv, j0, M, (int)D);
        CT_SFX(ct_tc_frag)(va, v + hd.v, hd.lkv, j0, M, (int)D);
        float dka[8][4], dva[8][4];
        CT_SFX(ct_tc_zero)(dka, 8);
        CT_SFX(ct_tc_zero)(dva, 8);
        for (long long i0 = 0; i0 < N; i0 += CT_TC_KEYS) {
            int nr = N - i0 < CT_TC_KEYS ? (int)(N - i0) : CT_TC_KEYS;
            CT_SYNC(); /* the last tile's readers are done */
            CT_SFX(ct_tc_load)(qs, q + hd.q + i0 * hd.lq, hd.lq, gs, dy + hd.o + i0 * hd.lo, hd.lo, nr, (int)D);
            CT_SFX(ct_att_stats_load)(stats, bh * N + i0, nr, CT_TC_KEYS, sts);
            CT_SYNC();
            for (int c0 = 0; c0 < nr; c0 += 32) {
                float s[4][4], dp[4][4];
                CT_SFX(ct_tc_scores)(s, ka, qs + c0 * P, P, (int)D);
                CT_SFX(ct_tc_scores)(dp, va, gs + c0 * P, P, (int)D);
                CT_UNROLL
                for (int nt = 0; nt < 4; nt++)
                    CT_UNROLL
                    for (int e = 0; e < 4; e++) {
                        long long j = j0 + g + (e >> 1) * 8;
                        int i = c0 + 8 * nt + 2 * t + (e & 1), in = j < M && i < nr;
                        float p, ds = CT_SFX(ct_tc_ds)(s[nt][e], dp[nt][e], A && in ? CT_LD(A[(i0 + i) * M + j]) : 0.0f,
                                                       sts + 3 * i, scale, &p);
                        s[nt][e] = in ? p : 0.0f;
                        dp[nt][e] = in ? ds * scale : 0.0f;
                    }
                CT_SFX(ct_tc_accum)(dva, 8, s, gs + c0 * P, P, (int)D);
                CT_SFX(ct_tc_accum)(dka, 8, dp, qs + c0 * P, P, (int)D);
            }
        }
        CT_SFX(ct_tc_store)(dk + hd.k, hd.lkv, dka, j0, M, (int)D);
        CT_SFX(ct_tc_store)(dv + hd.v, hd.lkv, dva, j0, M, (int)D);
    }
}
#endif

/* The input ops (ir/ops/image.c). ix walks the output's logical [B,C,H,W]
 * with the input's strides and the output's, so either layout works. */

/* image_normalize: the uint8 batch [B,H,W,C] (strides as read at b,c,h,w)
 * to (x / 255 - mean_c) / std_c, in double as the ref kernel. */
CT_GLOBAL CT_SFX(ct_image_normalize)(const unsigned char *x, CT_T *y, CtIndex ix, double m0, double m1, double m2,
                                     double m3, double s0, double s1, double s2, double s3)
{
    CT_LOOP(i, ix.n)
    {
        long long a, o, c = i / (ix.dim[2] * ix.dim[3]) % ix.dim[1];
        ct_offsets(&ix, i, &a, &o);
        double m = c == 0 ? m0 : c == 1 ? m1 : c == 2 ? m2 : m3, s = c == 0 ? s0 : c == 1 ? s1 : c == 2 ? s2 : s3;
        y[o] = CT_ST((float)((x[a] / 255.0 - m) / s));
    }
}

/* random_erase: each element takes the last of its image's K boxes
 * (top, left, height, width, seed) that covers it, filled by mode (0
 * zeros, 1 one normal value per channel, 2 one per element of the box). */
CT_GLOBAL CT_SFX(ct_random_erase)(const CT_T *x, const long long *boxes, CT_T *y, CtIndex ix, long long K, int mode)
{
    CT_LOOP(i, ix.n)
    {
        long long a, o, W = ix.dim[3], H = ix.dim[2], C = ix.dim[1];
        long long q = i % W, r = i / W % H, c = i / (W * H) % C, b = i / (W * H * C);
        const long long *hit = 0;
        ct_offsets(&ix, i, &a, &o);
        for (long long k = 0; k < K; k++) {
            const long long *bx = boxes + (b * K + k) * 5;
            if (bx[2] > 0 && bx[3] > 0 && r >= bx[0] && r < bx[0] + bx[2] && q >= bx[1] && q < bx[1] + bx[3])
                hit = bx;
        }
        if (!hit) {
            y[o] = x[a];
        } else {
            unsigned long long j = mode == 1 ? (unsigned long long)c
                                             : (unsigned long long)((c * hit[2] + r - hit[0]) * hit[3] + q - hit[1]);
            y[o] = CT_ST(mode == 0 ? 0.0f : (float)crng_normal((unsigned long long)hit[4], j));
        }
    }
}

/* mix_images: image b against image B-1-b by its row of p (lam, cut, y0,
 * y1, x0, x1). */
CT_GLOBAL CT_SFX(ct_mix_images)(const CT_T *x, const float *p, CT_T *y, CtIndex ix)
{
    CT_LOOP(i, ix.n)
    {
        long long a, o, W = ix.dim[3], H = ix.dim[2], b = i / (ix.dim[1] * H * W), q = i % W, r = i / W % H;
        const float *pb = p + b * 6;
        ct_offsets(&ix, i, &a, &o);
        float own = CT_LD(x[a]), other = CT_LD(x[a + (ix.dim[0] - 1 - 2 * b) * ix.st0[0]]), v = own;
        if (pb[1] != 0)
            v = r >= pb[2] && r < pb[3] && q >= pb[4] && q < pb[5] ? other : own;
        else if (pb[0] != 1)
            v = pb[0] * own + (float)(1.0 - (double)pb[0]) * other;
        y[o] = CT_ST(v);
    }
}

/* gather and gather_grad (ir/ops/index.c) over dense x [O, T, I] and y
 * [O, K, I]; the index is i32 (i32 set, i64 NULL) or i64. */
CT_DEVICE long long CT_SFX(ct_index_at)(const int *i32, const long long *i64, long long k)
{
    return i32 ? (long long)i32[k] : i64[k];
}

/* y's elements from x's rows at the index, zeros where it is outside [0, T). */
CT_GLOBAL CT_SFX(ct_gather)(const CT_T *x, const int *i32, const long long *i64, CT_T *y, long long O, long long T,
                            long long K, long long I)
{
    CT_LOOP(j, O * K * I)
    {
        long long i = j % I, k = j / I % K, o = j / I / K, t = CT_SFX(ct_index_at)(i32, i64, k);
        y[j] = t >= 0 && t < T ? x[(o * T + t) * I + i] : CT_ST(0.0f);
    }
}

/* dx: each element sums, over k in order and in double, the dy elements
 * whose index is its row, as the ref kernel: no atomics, the same bits on
 * every run, for a scan of the whole index per element (the threads of a
 * warp read the same entries); the position tables it serves have K some
 * 10^3 to 10^5. */
CT_GLOBAL CT_SFX(ct_gather_grad)(const CT_T *dy, const int *i32, const long long *i64, CT_T *dx, long long O,
                                 long long T, long long K, long long I)
{
    CT_LOOP(j, O * T * I)
    {
        long long i = j % I, t = j / I % T, o = j / I / T;
        double s = 0;
        for (long long k = 0; k < K; k++)
            if (CT_SFX(ct_index_at)(i32, i64, k) == t)
                s += CT_LD(dy[(o * K + k) * I + i]);
        dx[j] = CT_ST((float)s);
    }
}
