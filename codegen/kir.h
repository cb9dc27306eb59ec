/*
 * Kernel IR: one fused launch (passes/fuse.h) as flat loops, one per step
 * of the launch (several for a multi-tensor optimizer launch). A loop runs
 * i over its step's elements in memory order; its body is straight-line SSA:
 * loads (with the index math of a broadcast or layout change, as a view),
 * scalar arithmetic in the loop's compute type, stores of the values the
 * plan materialises and of sources into assign destinations. Every load of
 * a loop comes before its first store, so an output may share memory with
 * an input element for element. The renderers (render_c.c, render_cuda.c)
 * print it as host C or CUDA C; nothing here knows either language.
 *
 * Numbers follow the ref backend: every node's result is rounded to its
 * dtype unless that is the compute type (KIR_ROUND), as the node-by-node
 * backends store it. KIR_EXACT computes in f64, as the ref kernels do, so
 * a fused kernel gives their results bit for bit (a check of the lowering);
 * KIR_F32 computes in f32, as torch does on both devices and as the cuda
 * and cpu backends run (twice the vector width of f64 on the host, and exp,
 * tanh, erf in f32 vectorise), except loops that compute an integer or f64
 * value (step counters stay exact) or hold an Adam update (torch takes its
 * bias corrections in double).
 */
#ifndef CTIMM_KIR_H
#define CTIMM_KIR_H

#include <stdint.h>

#include "ir/ir.h"
#include "passes/fuse.h"
#include "passes/plan.h"

typedef enum KirOp {
    KIR_LOAD,   /* buf[view(i)], converted from the buffer's dtype */
    KIR_CONST,  /* imm */
    KIR_ADD, KIR_SUB, KIR_MUL, KIR_DIV, KIR_POW,
    KIR_NEG, KIR_EXP, KIR_SQRT, KIR_ERF, KIR_TANH,
    KIR_LT, KIR_LE, /* 1 or 0 */
    KIR_SELECT, /* a != 0 ? b : c */
    KIR_ROUND,  /* a rounded to dtype */
    KIR_STORE,  /* buf[i] = a, converted to the buffer's dtype */
} KirOp;

typedef struct KirInstr {
    KirOp op;
    int a, b, c;    /* operands: earlier instructions of the loop */
    double imm;     /* KIR_CONST */
    int buf, view;  /* KIR_LOAD, KIR_STORE (stores use the identity view) */
    CtDType dtype;  /* KIR_ROUND */
} KirInstr;

/* Where element i reads: i decomposed over size[] (outermost first) and
 * dotted with stride[]; ndim 0 is element i itself. */
typedef struct KirView {
    int ndim;
    int64_t size[CT_MAX_DIMS], stride[CT_MAX_DIMS];
} KirView;

typedef struct KirLoop {
    int64_t numel;
    CtDType compute; /* CT_F32 or CT_F64 */
    KirInstr *ins;
    int nins, cap_ins;
    KirView *views;
    int nviews, cap_views;
} KirLoop;

/* A kernel argument: one value's memory. */
typedef struct KirBuf {
    ValueId value;
    CtDType dtype;
    int written;
} KirBuf;

typedef struct KirKernel {
    int launch; /* the plan's launch id; the kernel is named ct_k<launch> */
    KirBuf *bufs;
    int nbufs, cap_bufs;
    KirLoop *loops;
    int nloops;
} KirKernel;

typedef enum KirPrecision { KIR_F32, KIR_EXACT } KirPrecision;

/* What the kernel is for: its precision, and whether memory follows the
 * values' layouts (channels-last values stored N, H, W, C: the cuda and cpu
 * backends) or every value is row-major in its logical shape (the ref
 * backend, whose to_layout is a copy). */
typedef struct KirOptions {
    KirPrecision precision;
    int layouts;
} KirOptions;

/* Lowers the steps of launch `launch` of plan p (elementwise steps only);
 * fails for a launch that is a library call or a copy. */
int kir_lower(const Graph *g, const FusePlan *p, int launch, KirOptions opt, KirKernel *k, CtErr *err);
void kir_free(KirKernel *k);
/* The values kernel k stores over memory the plan gives to a value it loads
 * at other elements (overlapping other than element for element with the
 * same element size): mark[w] = 1, for the executor to place them apart.
 * With `concurrent` k's loops run at once (one CUDA grid, a batched
 * update's), not one after the other as the plan orders them: a store of
 * one loop over any value another loop loads clashes too. kir_clashes
 * gives each such pair, the loaded value and the stored one, to fn. */
void kir_mark_clashes(const Graph *g, const MemPlan *plan, const KirKernel *k, int concurrent, char *mark);
typedef void (*KirClashFn)(void *ctx, ValueId load, ValueId store);
void kir_clashes(const Graph *g, const MemPlan *plan, const KirKernel *k, int concurrent, KirClashFn fn, void *ctx);
/* Whether launch `launch` of p is elementwise work kir_lower takes. */
int kir_lowerable(const FusePlan *p, int launch);

#endif
