/*
 * The launch builders' shared parts, for the files that make library
 * launches and for them only: lib_launch.c (data movement, reductions,
 * losses, pooling, attention, the inputs' ops, and lib_launches'
 * dispatch), lib_launch_norm.c (layer, group and batch norm, alone and in
 * the fused steps), lib_launch_optim.c (the optimizers' updates). A
 * Builder appends a node's launches; the setters add each launch's
 * arguments in its kernel's order (lib_kernels.h).
 */
#ifndef CTIMM_LIB_BUILD_H
#define CTIMM_LIB_BUILD_H

#include <stdio.h>
#include <string.h>

#include "codegen/cuda/lib_launch.h"
#include "ir/ops.h"

/* The index over dims dim[0..nd), tensor 0's strides st0 and tensor 1's
 * st1 (NULL: zeros). */
static inline CtIndex index_make(int nd, const int64_t *dim, const int64_t *st0, const int64_t *st1)
{
    CtIndex ix;
    memset(&ix, 0, sizeof ix);
    ix.n = 1;
    ix.nd = nd;
    for (int i = 0; i < nd; i++) {
        ix.dim[i] = dim[i];
        ix.st0[i] = st0[i];
        ix.st1[i] = st1 ? st1[i] : 0;
        ix.n *= dim[i];
    }
    return ix;
}

/* The index over every dim of shape s but `skip` (-1: none), with strides
 * a and b of those dims. */
static inline CtIndex index_without(const CtShape *s, int skip, const int64_t *a, const int64_t *b)
{
    int64_t dim[CT_MAX_DIMS], sa[CT_MAX_DIMS], sb[CT_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < s->ndim; i++)
        if (i != skip)
            dim[nd] = s->d[i], sa[nd] = a[i], sb[nd] = b ? b[i] : 0, nd++;
    return index_make(nd, dim, sa, sb);
}

/* ix with its dims of size 1 dropped and each pair of neighbouring dims
 * that both tensors step through contiguously (a dim's stride the next
 * one's times its size) merged into one: the same offsets for every index,
 * with fewer divisions a work item (none for one dim). Only for the
 * kernels that read no dim of their index but through ct_offsets. */
static inline CtIndex collapsed(CtIndex ix)
{
    CtIndex c = ix;
    c.nd = 0;
    for (long long d = 0; d < ix.nd; d++) {
        if (ix.dim[d] == 1 && ix.nd > 1)
            continue;
        long long k = c.nd - 1;
        if (k >= 0 && c.st0[k] == ix.st0[d] * ix.dim[d] && c.st1[k] == ix.st1[d] * ix.dim[d]) {
            c.dim[k] *= ix.dim[d];
            c.st0[k] = ix.st0[d], c.st1[k] = ix.st1[d];
            continue;
        }
        c.dim[c.nd] = ix.dim[d], c.st0[c.nd] = ix.st0[d], c.st1[c.nd] = ix.st1[d];
        c.nd++;
    }
    if (c.nd == 0) /* every dim of size 1 */
        c.nd = 1, c.dim[0] = 1, c.st0[0] = c.st1[0] = 0;
    return c;
}

/* The launches of one node or fused step, appended to l (up to
 * LIB_MAX_LAUNCHES): n so far. */
typedef struct Builder {
    const Graph *g;
    LibLaunch *l;
    int n;
    int sms; /* the device's multiprocessors, which column sums size their tiles to */
} Builder;

/* A new launch of kernel `kernel` for storage t (its name's suffix) over
 * `items` work items; its arguments follow, in the kernel's order. */
static inline LibLaunch *begin(Builder *b, const char *kernel, CtDType t, long long items)
{
    LibLaunch *l = &b->l[b->n++];
    CT_ASSERT(b->n <= LIB_MAX_LAUNCHES);
    memset(l, 0, sizeof *l);
    snprintf(l->kernel, sizeof l->kernel, "%s_%s", kernel, ct_dtype_name(t));
    l->items = items;
    return l;
}

static inline LibArg *arg(LibLaunch *l, LibArgKind kind)
{
    CT_ASSERT(l->nargs < LIB_MAX_ARGS);
    LibArg *a = &l->arg[l->nargs++];
    a->kind = kind;
    return a;
}

static inline void a_val(LibLaunch *l, ValueId v) { arg(l, LA_VALUE)->v = v; }
static inline void a_i64(LibLaunch *l, long long i) { arg(l, LA_I64)->i = i; }
static inline void a_i32(LibLaunch *l, int i) { arg(l, LA_I32)->i = i; }
static inline void a_f32(LibLaunch *l, double f) { arg(l, LA_F32)->f = (float)f; }
static inline void a_f64(LibLaunch *l, double d) { arg(l, LA_F64)->d = d; }
static inline void a_index(LibLaunch *l, CtIndex ix) { arg(l, LA_INDEX)->ix = ix; }
static inline void a_scratch(LibLaunch *l, size_t off) { arg(l, LA_SCRATCH)->i = (long long)off; }
static inline void a_counters(LibLaunch *l, int64_t n) { arg(l, LA_COUNTERS)->i = n; }

/* Where a launch's pointer argument points: an offset into scratch
 * (LA_SCRATCH) or into the program's kept region (LA_KEPT). */
typedef struct Place {
    LibArgKind kind;
    size_t off;
} Place;

static inline void a_place(LibLaunch *l, Place p) { arg(l, p.kind)->i = (long long)p.off; }

static inline const Value *val(const Builder *b, ValueId v) { return &b->g->values[v]; }
/* Whether 4-d value v is stored as its row-major (NCHW) form would be:
 * either layout, or one whose two layouts are the same bytes (H = W = 1,
 * or C = 1: the layout pass leaves such a value's flag as it came). */
static inline int row_major_bytes(const Value *v)
{
    const CtShape *s = &v->type.shape;
    return v->layout == CT_LAYOUT_CONTIG || s->ndim != 4 || s->d[2] * s->d[3] == 1 || s->d[1] == 1;
}

/* Whether x and y have the same strides (one layout, or not 4-d), or
 * address their elements alike (one shape, both row_major_bytes). */
static inline int same_strides(const Builder *b, ValueId x, ValueId y)
{
    const Value *a = val(b, x), *c = val(b, y);
    return a->layout == c->layout || a->type.shape.ndim != 4 ||
           (shape_equal(&a->type.shape, &c->type.shape) && row_major_bytes(a) && row_major_bytes(c));
}

/* Whether ix's first offsets and its dims [0, nd)'s strides are multiples
 * of vw in both tensors (lib_kernels.h's ct_steps_vec). */
static inline int steps_vec(const CtIndex *ix, int64_t nd, int64_t vw)
{
    int vec = ix->base0 % vw == 0 && ix->base1 % vw == 0;
    for (int64_t d = 0; d < nd; d++)
        vec &= ix->st0[d] % vw == 0 && ix->st1[d] % vw == 0;
    return vec;
}

/* A column sum's tiles (lib_kernels.h's ct_col_*): tiles of columns,
 * slices of the summed length. */
typedef struct ColPlan {
    int64_t cols, slices;
} ColPlan;

/* The storage a kernel of operands v (-1: none; CT_WIDE_X, _W, _Y and _R
 * in order) is instantiated for, the f32 ones' bits into *wide; whether
 * they fit one (lib_launch.c). */
CtDType lib_mixed_storage(const Builder *b, const ValueId v[4], int *wide);
int lib_one_storage(const Builder *b, const ValueId v[4]);
/* The tiles of a column sum of `outs` outputs over `len` (lib_launch.c). */
ColPlan lib_col_plan(const Builder *b, int64_t len, int64_t outs, int64_t w, int64_t sxc, int64_t nsum);
/* The batch norm whose output a column sum takes from its input
 * (lib_kernels.h's CtBnMap): where its coefficients are, C channels, its
 * activation. */
typedef struct LibBnMap {
    Place coef;
    int64_t C;
    int act, approx;
} LibBnMap;
/* A global average pool of y, the output of batch norm map (from x), in
 * the column sums' pass that stores y (lib_launch.c): 1 where it takes
 * column sums (the launch added where map is not NULL, its partial sums
 * in scratch from byte `at`, *scratch where they end), else 0. */
int lib_bn_pool_cols(Builder *b, ValueId x, ValueId y, ValueId pool, const LibBnMap *map, size_t at, size_t *scratch);
/* reduce_sum n, its result times `scale` into `side` where given (lib_launch.c). */
int lib_plan_reduce(Builder *b, const Node *n, ValueId side, ValueId scale, size_t *scratch, CtErr *err);
/* layer_norm, group_norm, batch_norm and their gradients alone (lib_launch_norm.c). */
int lib_plan_norm(Builder *b, const Node *n, size_t *scratch, CtErr *err);
/* The updates of the optimizers with whole-tensor norms or scalar state (lib_launch_optim.c). */
int lib_plan_update(Builder *b, const Node *n, size_t *scratch, CtErr *err);

#endif
