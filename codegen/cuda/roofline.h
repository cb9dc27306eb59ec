/*
 * The roofline of a cuda launch plan: for each step, the floating-point
 * work it must do and the bytes it must move at the least, and the time
 * those take on a device at its peak rates, so that what to write first is
 * chosen before device time is spent (`ctimm-compile --roofline h200`).
 *
 * FLOPs are 2 x the multiply-accumulates of the step's nodes: the stats
 * pass's counts (passes/stats.h, attention counted as its matmuls) for the
 * forward ops, and for the backward ops that have no such count the
 * matmuls they imply (a convolution's gradients as many as the forward,
 * attention's gradient its five matmuls with the scores recomputed).
 * Bytes are every value a step reads from memory (made by another step, an
 * input or the state), once, and every value it stores (read by another
 * step, a graph output, or assigned to the state): what one pass over its
 * operands would move, with no re-reads; a reshape the memory plan placed
 * at its input's address (a view, no launch) moves nothing. A step's floor is the larger of
 * FLOPs over the peak for its kind (tensor cores for GEMMs, convolutions
 * and attention in f16/bf16, TF32 where allowed, else plain f32) and bytes
 * over the memory bandwidth.
 */
#ifndef CTIMM_ROOFLINE_H
#define CTIMM_ROOFLINE_H

#include "codegen/cuda/launch_plan.h"
#include "ir/buf.h"

typedef struct RooflineDevice {
    const char *name;
    double bytes_per_s;  /* memory */
    double tensor16;     /* dense f16/bf16 tensor-core FLOP/s */
    double tf32;         /* dense TF32 tensor-core FLOP/s */
    double f32;          /* f32 FLOP/s without tensor cores */
} RooflineDevice;

/* The device named ("h200", "h100"); fails naming the known ones. */
int roofline_device(const char *name, RooflineDevice *d, CtErr *err);
/* The known device whose name a GPU's contains, case aside ("NVIDIA H200"
 * is h200); -1 where none does. */
int roofline_device_of(const char *gpu, RooflineDevice *d);

typedef struct RooflineStep {
    double flops, bytes, floor_s;
    int compute_bound;
} RooflineStep;

/* Step s of plan lp over graph g (the graph the plan was made from). */
RooflineStep roofline_step(const LaunchPlan *lp, const Graph *g, int s, const RooflineDevice *d, int allow_tf32);

/* Every step's floor in seconds, into floor_s[lp->nsteps]. */
void roofline_floors(const LaunchPlan *lp, const Graph *g, const RooflineDevice *d, int allow_tf32, double *floor_s);

/* The multiply-accumulates of node n as the roofline counts them. */
int64_t roofline_macs(const Graph *g, const Node *n);

/* Every step's line, the totals, then the ten steps of the highest floor. */
void roofline_report(const LaunchPlan *lp, const Graph *g, const RooflineDevice *d, int allow_tf32, CtBuf *out);

#endif
