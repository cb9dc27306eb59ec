/*
 * Which library kernels (codegen/cuda/lib_kernels.h) run a node, and with
 * what arguments: a pure function of the graph, built on the host and
 * tested without a GPU (tests/test_lib_kernels.c runs the same launches on
 * the host build of the kernels against the ref backend). The executor
 * turns each LibLaunch into one cuLaunchKernel: value arguments become the
 * device addresses of those values, scratch the executor's scratch buffer
 * (at least scratch_bytes), counters the program's zeroed counters (at
 * least the launch plan's `counters`), kept places the program's kept
 * region (kept_bytes), the rest are passed by value.
 *
 * Activations and adds have launches too, for the epilogue nodes of a GEMM
 * or convolution step that cuBLASLt or cuDNN does not compute (an
 * elementwise pass over the call's output, in the call's layout).
 *
 * Strides are physical: a channels_last 4-D value [N,C,H,W] is stored NHWC,
 * so its strides are (H*W*C, 1, W*C, C); everything else is row-major.
 */
#ifndef CTIMM_LIB_LAUNCH_H
#define CTIMM_LIB_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/cuda/lib_common.h"
#include "ir/ir.h"
#include "passes/fuse.h"

typedef enum LibArgKind {
    LA_VALUE, LA_SCRATCH, LA_NULL, LA_I64, LA_I32, LA_F32, LA_F64, LA_INDEX, LA_POOL, LA_COUNTERS, LA_KEPT
} LibArgKind;

typedef struct LibArg {
    LibArgKind kind;
    ValueId v;   /* LA_VALUE */
    long long i; /* LA_I64, LA_I32; LA_SCRATCH: its byte offset into the scratch buffer; LA_COUNTERS: how many
                  * of the program's counters the kernel uses (unsigned ints, zero before every launch, which
                  * leaves them zero: batch norm's statistics count each column's finished blocks there);
                  * LA_KEPT: its byte offset into the program's kept region (a training batch norm's
                  * coefficients, from its forward to the steps that run it again) */
    float f;     /* LA_F32 */
    double d;    /* LA_F64: an attribute whose float rounding would show (bf16 rounding after it) */
    CtIndex ix;  /* LA_INDEX */
    CtPool pool; /* LA_POOL */
} LibArg;

#define LIB_MAX_ARGS 24
/* muon_update's: 6 and 3 a Newton-Schulz iteration, for up to 10 */
#define LIB_MAX_LAUNCHES 36

typedef struct LibLaunch {
    char kernel[48];  /* "ct_softmax_f32": the kernel's name in the compiled module */
    LibArg arg[LIB_MAX_ARGS];
    int nargs;
    long long items;  /* work items: the loop count the grid should cover (a kernel taking a block an
                       * item, CT_BLOCK_LOOP: CT_LIB_BLOCK times its items) */
    size_t shared;    /* bytes of dynamic shared memory a block (CT_DYN_SHARED), at most 48 KiB */
} LibLaunch;

/* One launch's kernelParams (cuLaunchKernel's convention: params[k]
 * points at argument k) in store: scalars, indices and pooling windows by
 * value from l, each pointer argument (LA_VALUE, LA_SCRATCH, LA_COUNTERS,
 * LA_KEPT, LA_NULL) the address ptr[k] the caller placed it at (0 for
 * LA_NULL). */
typedef union LibArgStore {
    unsigned long long p;
    long long i;
    int i32;
    float f;
    double d;
    CtIndex ix;
    CtPool pool;
} LibArgStore;
void lib_params(const LibLaunch *l, const unsigned long long *ptr, LibArgStore *store, void **params);

/* Whether op has library kernels here. */
int lib_supports(CtOp op);

/* The launches of node n, in order, into l[0..*count), for a device of
 * `sms` multiprocessors (long sums cut their rows into tiles enough for
 * it); *scratch gets the scratch bytes they need. Fails naming the op for
 * what is not supported (an op without kernels, more dims than CtIndex
 * holds, mixed layouts a kernel does not take). */
int lib_launches(const Graph *g, int sms, const Node *n, LibLaunch *l, int *count, size_t *scratch, CtErr *err);

/* Where a training batch norm's coefficients are kept, from its forward
 * to the steps that run it again (a recomputation, its gradient with its
 * activation's): `at` a byte offset into the program's kept region (-1:
 * not kept, the step's scratch holds them), `ready` whether a step before
 * this one stored them there (the forward's own, the same x, weight and
 * bias: the same coefficients), so that this one computes no statistics.
 * `sums` (-1: none): the byte of the kept region where the step of the
 * convolution that makes x stores x's sums (lib_bn_conv_sums), from which
 * the norm's coefficients come. */
typedef struct LibBnCoef {
    long long at;
    int ready;
    long long sums;
} LibBnCoef;

/* A residual that is another training batch norm's output, computed in
 * the apply pass from that norm's x (-1: none) and the coefficients its
 * forward kept at `at` in the kept region. */
typedef struct LibBnRes {
    ValueId x;
    long long at;
} LibBnRes;

/* The launches of library step st, whose first node is a batch_norm, with
 * the parts of the step's epilogue its elementwise pass takes before the
 * store (a residual add of its output's shape, dtype and layout, then an
 * activation; none whose input the plan materialises), as lib_launches;
 * *tail gets the first node of the step left to their own launches. The
 * coefficients where kc says. Where gap is not NULL (lib_bn_pool_fits),
 * the elementwise pass is also gap's global average pool of the output.
 * Where res.x is not -1 (lib_bn_res_fits), the residual is computed from
 * it; where stats_only, the norm (alone in its step) computes its
 * statistics and coefficients and leaves its output to the pass of the
 * step whose residual it is. */
int lib_batch_norm_step(const Graph *g, int sms, const FusePlan *p, const FuseStep *st, LibBnCoef kc,
                        const Node *gap, LibBnRes res, int stats_only, LibLaunch *l, int *count, size_t *scratch,
                        int *tail, CtErr *err);
/* Whether library step st, a batch_norm and its epilogue, can take the
 * output of training batch norm rbn, its residual, from rbn's x through
 * the coefficients rbn's forward keeps where rkc says (a downsampling
 * shortcut's: rbn's x in its output's dtype and layout), so that rbn's
 * output is never stored. */
int lib_bn_res_fits(const Graph *g, const FusePlan *p, const FuseStep *st, const Node *rbn, LibBnCoef rkc);
/* Whether library step st, a batch_norm forward and its epilogue (no
 * residual add), can take adaptive_avg_pool2d gap, a global average pool
 * of the epilogue's output, into its elementwise pass: the norm's output
 * of its input's dtype and layout, the pool's of its dtype, whose sums take
 * column sums (a squeeze-excitation's pool at batch 256: its [N, C] means
 * over up to 12544 pixels, which then read the output back no more). */
int lib_bn_pool_fits(const Graph *g, const FusePlan *p, const FuseStep *st, const Node *gap);

/* Whether training batch norm bn's statistics can come from the step of
 * the convolution that makes its x (cuDNN's GenStats in the call's
 * epilogue, else lib_bn_conv_sums' launch after it): x in f16 or bf16,
 * channels-last, of at least two rows. */
int lib_bn_conv_sums_fits(const Graph *g, const Node *bn);
/* The launch that makes training batch norm bn's sums where cuDNN's call
 * does not: x's channels' sums and sums of squares, f32, at kept byte
 * kc.sums (C then C), as lib_launches (any dtype and layout; the launch
 * plan asks it where lib_bn_conv_sums_fits). */
int lib_bn_conv_sums(const Graph *g, int sms, const Node *bn, LibBnCoef kc, LibLaunch *l, int *count,
                     size_t *scratch, CtErr *err);

/* The launches of library step st, whose first node is a layer_norm_grad,
 * with at most `most` parts of its epilogue in the kernel (the residual
 * added to dx, then that sum cast to the kernel's 16-bit storage; each of
 * dx's shape and layout, dx f32 for the cast), as lib_batch_norm_step.
 * The caller's `most` keeps the stored values clear of x and dy, which the
 * weight's kernels read after. */
int lib_layer_norm_grad_step(const Graph *g, int sms, const FusePlan *p, const FuseStep *st, int most, LibLaunch *l,
                             int *count, size_t *scratch, int *tail, CtErr *err);

/* The launch of layer_norm ln with its prologue and epilogue, as
 * lib_launches: its input x + res, computed by the kernel (res -1: x
 * alone, ln's), stored into sum (-1: not stored), the residual stream's
 * add before a pre-norm block's norm; its output stored again into low
 * (-1: not), cast to its 16-bit operands' dtype, in the output's element
 * order (the caller's to see), autocast's f32 norm and the cast a 16-bit
 * reader takes.
 * Where lib_layer_norm_res_fits: x in the sum's dtype, res in the 16-bit
 * dtype of the norm's operands (if any) or f32, both of the sum's shape
 * and strides. Where lib_layer_norm_low_fits: the norm's operands 16-bit,
 * its output f32, low of their dtype and its size. */
int lib_layer_norm_res_fits(const Graph *g, const Node *ln, ValueId x, ValueId res);
int lib_layer_norm_low_fits(const Graph *g, const Node *ln, ValueId low);
int lib_layer_norm_fused(const Graph *g, const Node *ln, ValueId x, ValueId res, ValueId sum, ValueId low,
                         LibLaunch *l, int *count, CtErr *err);

/* The launch of to_layout or permute n of cast's output, the cast done in
 * the same pass (ct_copy_cast): n's output converted from cast's input.
 * Where lib_cast_copy_fits: f32 to or from f16/bf16. */
int lib_cast_copy_fits(const Graph *g, const Node *cast, const Node *n);
int lib_cast_copy(const Graph *g, const Node *cast, const Node *n, LibLaunch *l, int *count, CtErr *err);

/* The launches of reduce_sum r (keepdim) that also store side = x * scale,
 * x its input 0 and scale of its output's shape: layer scale's backward,
 * gamma's gradient sum(dy * x) and dy * gamma in one pass over dy. As
 * lib_launches. Where lib_reduce_sum_side_fits: side in x's strides, scale
 * in the output's, one 16-bit dtype among them at most. */
int lib_reduce_sum_side_fits(const Graph *g, const Node *r, ValueId side, ValueId scale);
int lib_reduce_sum_side(const Graph *g, int sms, const Node *r, ValueId side, ValueId scale, LibLaunch *l, int *count,
                        size_t *scratch, CtErr *err);

/* The launches of a batch_norm_grad n whose dy is the act_grad act of
 * batch_norm bn's activation, as one (fuse_bn_act_grad_steps): bn's
 * coefficients (kept by its forward's step, which runs before, where kc
 * has a place; else its statistics again, its running statistics not
 * written), then the gradient's kernels
 * recomputing the activation's input and gradient from x; neither is
 * written, but the activation's output where store is not -1 (bn run
 * again, its activation's output read by others: launch_plan.c's
 * bn_act_grad_step). As lib_launches. Where lib_bn_act_grad_fits: the
 * act_grad's input and dy in x's dtype, dy in x's strides, store (-1:
 * none) in x's dtype and the gradient dx's strides. */
int lib_bn_act_grad_fits(const Graph *g, const Node *bn, const Node *act, const Node *n, ValueId store);
int lib_bn_act_grad(const Graph *g, int sms, const Node *bn, const Node *act, const Node *n, ValueId store,
                    LibBnCoef kc, LibLaunch *l, int *count, size_t *scratch, CtErr *err);

/* The launches of a batch_norm_grad n whose dy is the sum of a residual
 * block's gradients, add's output, then the act_grad act of the block's
 * activation (NULL: none), computed and stored by its statistics kernel
 * (launch_plan.c's bn_sum_grad_step), so that it is written once and not
 * read back for the statistics. As lib_launches. Where
 * lib_bn_sum_grad_fits: the operands stored as n's x. */
int lib_bn_sum_grad_fits(const Graph *g, const Node *n, const Node *add, const Node *act);
int lib_bn_sum_grad(const Graph *g, int sms, const Node *n, const Node *add, const Node *act, LibLaunch *l,
                    int *count, size_t *scratch, CtErr *err);

/* The launches of a batch_norm_grad n whose dy is the act_grad act of
 * batch_norm bn's activation (as lib_bn_act_grad), act's dy a
 * squeeze-excitation's gradient mul + gap, read by act alone: each pass
 * computes it where it reads dy, from mul's [N, C, H, W] operand, its
 * [N, C, 1, 1] scale and the pooled gradient gap reads (mul NULL: gap's
 * output alone, a global pool's gradient; launch_plan.c's
 * bn_excite_grad_step), so that it is never written. As lib_launches.
 * Where lib_bn_excite_grad_fits: lib_bn_act_grad_fits, the scale and the
 * pooled gradient in x's dtype, their elements in row-major order. */
int lib_bn_excite_grad_fits(const Graph *g, const Node *bn, const Node *act, const Node *mul, const Node *gap);
int lib_bn_excite_grad(const Graph *g, int sms, const Node *bn, const Node *act, const Node *n, LibBnCoef kc,
                       const Node *mul, const Node *gap, LibLaunch *l, int *count, size_t *scratch, CtErr *err);

/* The launches of a depthwise convolution n (conv2d, conv2d_grad_input or
 * conv2d_grad_weight; groups = channels) over channels-last activations,
 * as lib_launches: the filter's taps copied into scratch as [R, S, C],
 * then ct_dw_conv (the forward with its own bias; or the input gradient;
 * ct_dw_conv_act where it stores the activation);
 * the filter gradient's partial sums in scratch, then their sum in order.
 * `next` (NULL: none), the node after n its kernels also compute: the
 * forward's activation (its output then stored alone), or the filter
 * gradient's bias gradient (dy's sum, in the same passes). Where
 * lib_dw_conv_fits: one storage type for all its operands, the filter at
 * most 7 taps wide, every size within an int; lib_dw_conv_next_fits: a
 * forward and an activation of its output alone, of its dtype, shape and
 * layout, or a filter gradient and reduce_sum of its dy over N, H and W
 * in dy's dtype. */
int lib_dw_conv_fits(const Graph *g, const Node *n);
int lib_dw_conv_next_fits(const Graph *g, const Node *n, const Node *next);
int lib_dw_conv(const Graph *g, int sms, const Node *n, const Node *next, LibLaunch *l, int *count, size_t *scratch,
                CtErr *err);

#endif
