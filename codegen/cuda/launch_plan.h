/*
 * The cuda backend's launch plan: everything the executor does for one run
 * of a graph, decided on the host by the compile stage (program_compile,
 * codegen/cuda/cuda_program.h) before any device work, so that it is tested
 * without a GPU. From the fusion plan (passes/fuse.h), in step order:
 *
 *   LP_KERNEL  a generated elementwise kernel ct_k<launch> (codegen/kir.h),
 *              its buffers in parameter order, grid x block (grid-stride
 *              loops: enough blocks to cover the largest loop, at most
 *              LP_BLOCKS_PER_SM per multiprocessor); a multi-tensor launch
 *              appears once, at its first step
 *   LP_GEMM    one cuBLASLt call (codegen/cuda/gemm_desc.h)
 *   LP_CONV    one cuDNN call (codegen/cuda/conv_desc.h)
 *   LP_LIB     library kernel launches (codegen/cuda/lib_launch.h)
 *   LP_COPY    a device-to-device copy (an assign no kernel took)
 * A convolution of NHWC activations whose filter is stored KCRS (the
 * parameters keep timm's layout) gets an NHWC copy of the filter in the
 * scratch buffer, made by a copy kernel: cuDNN's NHWC tensor-core kernels
 * want the filter in the activations' format.
 * A view (reshapes of row-major values) is copied by library kernels, as
 * the cpu backend copies it: the memory plan gives its output a place of
 * its own.
 * A GEMM or convolution step's epilogue nodes that the library does not
 * compute follow as LP_LIB launches in the same LpStep (`lib`).
 *
 * A depthwise convolution over channels-last values (lib_dw_conv_fits:
 * groups = channels, taps at most 7 wide) is a library step of the
 * library's kernels, its filter gradient in two deterministic stages,
 * where cuDNN's deterministic algorithms for it were the slowest steps
 * measured (bench/NOTES.md, session 21). The step also carries its cuDNN
 * `twin`, the same work as a cuDNN call and launches after it, and the
 * executor runs whichever CTIMM_DWCONV says (runtime/cuda/twin_choice.h): by default the
 * one that timed faster on the device, once per shape, the winner kept
 * with the libraries' algorithm choices. A depthwise forward storing its
 * activation (inference's folded SiLU) has no twin: cuDNN's output would
 * need a place the plan did not give it.
 *
 * Memory: graph inputs and persistent state live in their own device
 * blocks; every other value has an offset in one device block of
 * `device_bytes`: the memory plan's arena (passes/plan.h, over the graph
 * in step order), then a spill area for what the arena does not hold
 * (graph outputs, values nothing reads, and a kernel's stored value that
 * the last plan still puts over memory the same kernel reads at other
 * elements). The memory plan frees a value after its last reader node, but
 * a library step spanning several fusion steps still reads it while it
 * stores what the later nodes make, and a generated kernel's loops run at
 * once, not in node order: where the plan put the two in one place, the
 * step or kernel asks for the smaller to live longer (passes/plan.h's
 * PlanHints), and the plan is made again with all asked so far, up to
 * LP_ROUNDS plans; a spanning step whose values are still in one place in
 * the last runs as its parts, a kernel's stored value goes to the spill
 * area (convnext_tiny's bf16 channels-last inference at batch 256 spilled
 * 674 MiB of activations before the kernels asked, 33 MB of longer
 * lifetimes after).
 *
 * A library step's assign (batch_norm's new running statistics) stores its
 * source straight into the destination: `alias`.
 *
 * A training batch_norm keeps its coefficients (scale and shift a channel)
 * in a region of its own from its forward to the steps that run it again:
 * remat's recomputation of it (whose running mean input is the forward's
 * updated one, passes/remat.c) and the fused gradient of it and its
 * activation take them instead of summing x again (`bn_coef`).
 *
 * A training batch_norm in f16/bf16 channels-last whose x is the output of
 * the forward convolution alone in the step before it (not depthwise)
 * takes its statistics from that step (keep_bn_sums, conv_stats): the
 * call sums y's channels and their squares into a place of the kept
 * region (conv.stats: cuDNN's graph API, a convolution with GenStats), or,
 * where cuDNN has no engine for that (or CTIMM_CONV_STATS=kernel), the
 * step's `fallback`, the statistics pass, does after the plain call; the
 * norm's step then computes its coefficients from the sums
 * (ct_bn_coef_sums) and its apply pass is the only read of x left.
 *
 * A batch_norm_grad and the act_grad of its batch norm's activation it
 * reads (and the batch norm before them, where recomputed for them alone:
 * fuse_bn_act_grad_steps, where lib_bn_act_grad_fits) run as one LP_LIB
 * step (lib_bn_act_grad) that spans those fusion steps.
 *
 * A batch norm and its activation whose output a global average pool
 * takes in the next step (a squeeze-excitation's squeeze) run with the
 * pool as one LP_LIB step (lib_bn_pool_fits): the norm's elementwise pass
 * is the pool's column sums, storing the activation as it sums it.
 *
 * A residual add (an elementwise kernel of its own: x + r, r perhaps cast)
 * and the layer_norm of its sum after it run as one LP_LIB step spanning
 * both (lib_layer_norm_fused), where what it stores is clear of x and r.
 *
 * A weight gradient's GEMM whose next fusion step is the bias gradient
 * (gemm_bias_grad) computes it in its epilogue and spans that step; the
 * reduction's own launches are kept as `fallback`, for a cuBLASLt with no
 * algorithm for that epilogue.
 *
 * With CTIMM_CUDA_STEPS=plain in the environment no library step spans
 * another or takes a layer norm gradient's adds, and no batch norm keeps
 * its coefficients or takes its convolution's sums: each node runs as it
 * would alone (a device's failing
 * parity test told apart from the fusions, bench/gpu_check.sh).
 *
 * A step whose node has no kernel yet is LP_UNSUPPORTED, naming the op:
 * the backend refuses such graphs before running (the CLIs fall back).
 */
#ifndef CTIMM_LAUNCH_PLAN_H
#define CTIMM_LAUNCH_PLAN_H

#include "codegen/cuda/conv_desc.h"
#include "codegen/cuda/lib_launch.h"
#include "codegen/kir.h"
#include "ir/buf.h"
#include "passes/plan.h"

#define LP_BLOCK CT_LIB_BLOCK /* codegen/cuda/lib_common.h */
#define LP_BLOCKS_PER_SM 32
#define LP_ROUNDS 8 /* launch_plan's memory plans at most, the last asking nothing */

typedef enum LpKind { LP_KERNEL, LP_GEMM, LP_CONV, LP_LIB, LP_COPY, LP_UNSUPPORTED } LpKind;

typedef struct LpStep {
    LpKind kind;
    int fuse_step;          /* the step of the fusion plan */
    int span;               /* the fusion plan's steps after it this one runs too (lib_bn_act_grad's two, a
                             * GEMM's bias gradient) */
    int launch;             /* LP_KERNEL: the kernel ct_k<launch> */
    unsigned grid, block;   /* LP_KERNEL */
    GemmDesc gemm;          /* LP_GEMM */
    ConvDesc conv;          /* LP_CONV */
    int mirrored;           /* LP_CONV: the call's filter is an NHWC copy in scratch (below) */
    LibLaunch mirror;       /* the copy: weight -> scratch before the call, scratch -> dweight after a
                             * backward-filter one */
    LibLaunch *lib;         /* LP_LIB, and the epilogue left by LP_GEMM/LP_CONV */
    int nlib;
    LibLaunch *fallback;    /* LP_GEMM with gemm.epi.bgrad: the spanned reduction's launches, run after the
                             * call in its place where the library refuses that epilogue; a twin's launches
                             * after its call; LP_CONV with conv.stats: the statistics pass, after a call
                             * that does not make them */
    int nfallback;
    int twin;               /* LP_LIB: a depthwise convolution whose `lib` may instead run as the cuDNN call
                             * `conv` (with `mirror` where `mirrored`) and then `fallback` */
    ValueId copy_src, copy_dst; /* LP_COPY */
    ValueId unstored;       /* LP_LIB: a batch norm's output it leaves unstored, computed from the norm's x
                             * by the step whose residual it is (launch_plan.h's bn_res), or -1 */
    const char *op;         /* LP_UNSUPPORTED: the op without a kernel */
} LpStep;

typedef struct LaunchPlan {
    int sms;              /* the device's multiprocessors it was made for */
    int plain;            /* made with CTIMM_CUDA_STEPS=plain: no step spanning others, no kept coefficients */
    FusePlan fuse;
    Graph og;             /* g's nodes in step order (owns its arrays; no names) */
    MemPlan mem;          /* over og */
    KirKernel *k;         /* per launch id; nloops == 0 where the launch is not elementwise */
    int nk;
    LpStep *steps;
    int nsteps;
    size_t *offset;       /* per value: its offset in the device block, or PLAN_NONE (input, state) */
    ValueId *alias;       /* per value: the state it is stored into in place (an assign its step took), or -1 */
    size_t device_bytes;  /* the arena, then the spill area */
    size_t scratch_bytes; /* the library kernels' scratch, the most any step needs */
    size_t counters;      /* the library kernels' counters (LA_COUNTERS: unsigned ints, zeroed once at load),
                           * the most any launch uses */
    LibBnCoef *bn_coef;   /* per node of g: where a training batch norm's coefficients are kept (LA_KEPT) */
    size_t kept_bytes;    /* the kept region: each training batch norm's 2 C doubles, and 2 C floats of
                           * each whose convolution's step sums its x */
    int unsupported;      /* LP_UNSUPPORTED steps */
    struct LpAsks *asks;  /* while launch_plan plans, the lifetimes its fused steps ask of the memory plan
                           * for its next round; NULL in the plan it returns */
    int *bn_res;          /* while launch_plan plans, per fusion step: the step whose batch norm's output
                           * is this step's batch norm's residual, computed by its apply pass; -2: the step
                           * whose output that is, its statistics alone; -1: neither. NULL after */
} LaunchPlan;

/* Whether the plan has a kernel or library call for node n: the cuda
 * backend's supports() (runtime/backend.h). */
int launch_plan_supports(const Graph *g, const Node *n);

/* The plan of graph g for a device of `sms` multiprocessors. */
int launch_plan(const Graph *g, int sms, LaunchPlan *lp, CtErr *err);
void launch_plan_free(LaunchPlan *lp);

/* What step s runs, for reports: its kind and library kernels (a twin's
 * call and launches where `twin`), then the first `nops` of its fused ops
 * ("cuDNN conv fwd (conv2d)"). */
void lp_step_label(const LaunchPlan *lp, const Graph *g, int s, int nops, int twin, CtBuf *out);

/* Blocks of LP_BLOCK threads for `items` work items of a grid-stride loop. */
unsigned lp_grid(long long items, int sms);

/* An independent check: every node in exactly one step's work (a kernel's
 * fused step, a library call and its epilogue, launches, a copy),
 * every value a step touches placed inside the device block or in the
 * input/state blocks, no two values live at once overlapping, every
 * kernel with loops. */
int launch_plan_check(const Graph *g, const LaunchPlan *lp, CtErr *err);

#endif
