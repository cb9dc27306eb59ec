/*
 * Private to the cpu backend: the f32 kernels. A kernel has the ref kernel's
 * signature with f32 storage: in[k] and out[k] point at each value's dense
 * row-major elements (state, inputs, the arena or a caller's output). An
 * output may share its space with an elementwise op's input (the memory
 * plan's in-place rule), so elementwise kernels read element i before they
 * write it. Integer inputs (targets, step counts) keep their own type; the
 * kernels that take one say so in the backend's table.
 */
#ifndef CTIMM_CPU_H
#define CTIMM_CPU_H

#include "ir/collective.h"
#include "ir/formulas.h"
#include "ir/ir.h"

typedef void (*CpuKernel)(const Graph *g, const Node *n, float *const *in, float *const *out);

static inline const CtShape *cpu_in_shape(const Graph *g, const Node *n, int i) { return &g->values[n->in[i]].type.shape; }
static inline const CtShape *cpu_out_shape(const Graph *g, const Node *n, int i) { return &g->values[n->out[i]].type.shape; }
static inline int64_t cpu_in_numel(const Graph *g, const Node *n, int i) { return shape_numel(cpu_in_shape(g, n, i)); }

/* A hot kernel compiled three times, for AVX-512, AVX2 and the baseline, the
 * one for this CPU chosen when the program loads: the library is built for
 * the baseline (it may run elsewhere), which leaves its loops 4 floats wide
 * where the machine has 16. The helpers such a kernel calls are inlined
 * into each copy. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif

/* Whether node n's operands and first output are all f32 (oneDNN and the
 * fused paths run f32 only; amp's f16/bf16 nodes take the widening kernels). */
static inline int cpu_all_f32(const Graph *g, const Node *n)
{
    for (int k = 0; k < n->nin; k++)
        if (g->values[n->in[k]].type.dtype != CT_F32)
            return 0;
    return g->values[n->out[0]].type.dtype == CT_F32;
}

/* Elements below which a kernel stays on one thread: an OpenMP fork and join
 * costs a few microseconds, what a core does to some 30k floats. */
#define CPU_PARALLEL_MIN 32768

/* malloc that aborts when memory runs out (kernels have no error path). */
float *cpu_floats(int64_t n);

/* The calling thread's scratch buffer `slot` of at least n floats, kept
 * between kernel calls and valid until the thread's next call for that
 * slot; freed when the thread ends. Buffers of megabytes malloc'd and freed
 * at every call came back as fresh pages (glibc returns the heap's top to
 * the system), faulted in and cleared again each time. A convolution
 * through oneDNN (onednn.h) keeps its blocked copies in COLS, ROWS and
 * WINO_U and its scratchpad in WINO_IN: one convolution runs at a time on a
 * thread, so the two paths share the memory instead of adding to it.
 * LAYOUT holds the row-major copies of a node's channels-last operands
 * (nhwc.c), around the kernel's own slots. */
enum {
    CPU_SCRATCH_COLS,
    CPU_SCRATCH_ROWS,
    CPU_SCRATCH_ATTN,
    CPU_SCRATCH_ATTN_GRAD,
    CPU_SCRATCH_WINO_IN,
    CPU_SCRATCH_WINO_GRAD,
    CPU_SCRATCH_WINO_U,
    CPU_SCRATCH_LAYOUT,
    CPU_SCRATCH_SLOTS
};
float *cpu_scratch(int slot, int64_t n);

/* The ops with an f32 kernel: every activation (ir/formulas.h) and these. */
#define CPU_KERNELS(X)                                                                                    \
    X(conv2d) X(conv2d_grad_input) X(conv2d_grad_weight) X(linear) X(matmul) X(sdpa) X(sdpa_grad)         \
    CT_ACTIVATIONS(X) X(act_grad) X(add) X(mul)                                                          \
    X(div) X(scale_shift) X(reduce_sum) X(softmax) X(softmax_grad)                                       \
    X(layer_norm) X(layer_norm_grad) X(group_norm) X(group_norm_grad)                                    \
    X(avg_pool2d) X(max_pool2d) X(adaptive_avg_pool2d) X(avg_pool2d_grad) X(max_pool2d_grad)             \
    X(adaptive_avg_pool2d_grad) X(reshape) X(permute) X(slice) X(slice_grad) X(concat) X(expand)          \
    X(pad) X(to_layout) X(cast) X(sgd_update) X(adamw_update) X(image_normalize) X(random_erase)          \
    X(mix_images) X(gather) X(gather_grad)

#define X(op) void cpu_##op(const Graph *g, const Node *n, float *const *in, float *const *out);
CPU_KERNELS(X)
#undef X

/* C [M, N] = alpha op(A) op(B) + beta C, row-major, op transposing where ta
 * / tb: runtime/cpu/sgemm.c's library. */
void cpu_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* y = f(x) over cnt floats on the calling thread, f activation node n's. */
void cpu_act_span(const Node *n, const float *x, float *y, int64_t cnt);
/* y = f'(x) * dy over cnt floats on the calling thread, f act_grad node n's
 * activation (y may be x or dy). */
void cpu_act_grad_span(const Node *n, const float *x, const float *dy, float *y, int64_t cnt);
/* The same split among threads. */
void cpu_act_parallel(const Node *n, const float *x, float *y, int64_t cnt);
/* linear node n into out, then activation node act (NULL: none) of it
 * into y, each block of rows while it is in cache. */
void cpu_linear_act(const Graph *g, const Node *n, const Node *act, float *const *in, float *out, float *y);
/* batch_norm_grad n (training, not synchronised) of the gradient at the
 * output of act_grad node act, whose input is batch_norm bn of the same x
 * recomputed for the backward. NCHW: the three in one pass a channel, y =
 * bn(x) and dy = act'(y) * dz kept in the thread's scratch, never written
 * out; channels-last: y a block of rows at a time in the scratch, dy into
 * dy (act's output's memory) and batch_norm_grad from there. in: n's
 * inputs, with dz in dy's place; bias: bn's; out: n's outputs, none of them
 * over in[0] or in[4] (except dx exactly over dz: a channel's dz is read
 * before its dx). */
void cpu_batch_norm_act_grad(const Graph *g, const Node *bn, const Node *act, const Node *n, const float *bias,
                             float *const *in, float *dy, float *const *out);
/* Whether conv2d n's forward runs the stem kernel (few input channels, NCHW
 * values), which takes an activation as cpu_conv2d_act below. */
int cpu_conv2d_stem(const Graph *g, const Node *n);
/* out = conv2d n of in, y = act(out), band by band of output rows while
 * they are in cache (out may be y: the activation then runs in place); for
 * n that cpu_conv2d_stem takes, y not over in[0]. */
void cpu_conv2d_act(const Graph *g, const Node *n, const Node *act, float *const *in, float *out, float *y);

/* nhwc.c: channels-last values, stored N, H, W, C (value_strides). Whether
 * v is stored so (its two layouts differ in bytes), and its logical dims
 * outermost first in memory. */
int cpu_stored_nhwc(const Graph *g, ValueId v);
void cpu_memory_order(const Graph *g, ValueId v, int *order);
/* Whether node n's kernel needs row-major copies of its channels-last
 * operands; cpu_run_row_major runs it through them. */
int cpu_node_row_major(const Graph *g, const Node *n);
typedef void (*CpuNodeRunner)(const Graph *g, const Node *n, void *const *in, void *const *out,
                              const CtCollective *coll);
void cpu_run_row_major(const Graph *g, const Node *n, void *const *in, void *const *out, const CtCollective *coll,
                       CpuNodeRunner run);
/* Whether batch_norm or batch_norm_grad node n runs on its channels-last
 * operands as stored (not synchronised across ranks; norm_ops.c). */
int cpu_batch_norm_nhwc(const Graph *g, const Node *n);
/* Whether convolution node n (either direction) is pointwise, one group,
 * on channels-last x and y, which it takes as stored: a GEMM over the rows
 * of channels (gemm_ops.c). */
int cpu_conv_nhwc(const Graph *g, const Node *n);
/* Whether adaptive_avg_pool2d(_grad) node n is a global pool of a
 * channels-last x, which it takes as stored (pool_ops.c). */
int cpu_adaptive_pool_nhwc(const Graph *g, const Node *n);
/* out[o] = in[sum idx_d * stride_d] over out's row-major shape y (shape_ops.c). */
void cpu_strided_gather(const float *in, float *out, const CtShape *y, const int64_t *stride);

/* The ops that reduce over the data-parallel ranks (batch norm
 * synchronised across them): their kernels take the collective of the
 * program's run as well (ir/collective.h; NULL: a world of one rank), as
 * their ref kernels do (OpDef.ref_ranks). */
#define CPU_RANK_KERNELS(X) X(batch_norm) X(batch_norm_grad)

typedef void (*CpuRankKernel)(const Graph *g, const Node *n, float *const *in, float *const *out,
                              const CtCollective *coll);

#define X(op)                                                                                                   \
    void cpu_##op(const Graph *g, const Node *n, float *const *in, float *const *out, const CtCollective *coll);
CPU_RANK_KERNELS(X)
#undef X

/* batch_norm node n, then its library step's epilogue (passes/fuse.h): y =
 * act(normalised x + residual) (residual, act: NULL where the step has
 * none), each plane while it is in cache; y apart from x, equal to
 * residual or apart from it. out[0], the normalised x alone, is not
 * written. */
void cpu_batch_norm_epilogue(const Graph *g, const Node *n, float *const *in, float *const *out,
                             const CtCollective *coll, const float *residual, const Node *act, float *y);

/* sdpa keeping its weights softmax(q k^T * scale + bias) [B*H, N, M] in saved, and
 * sdpa_grad reading them from there instead of recomputing them (saved
 * NULL: as cpu_sdpa and cpu_sdpa_grad). */
void cpu_sdpa_saving(const Graph *g, const Node *n, float *const *in, float *const *out, float *saved);
void cpu_sdpa_grad_saved(const Graph *g, const Node *n, float *const *in, float *const *out, const float *saved);

#endif
