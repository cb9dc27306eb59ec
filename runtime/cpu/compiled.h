/*
 * The cpu backend's fused path (compiled.c): a graph runs as the steps of
 * its fusion plan (passes/fuse.h). Elementwise launches are host kernels
 * rendered from kernel IR and compiled into a shared object per translation
 * unit (codegen/units.h: a few per graph, compiled in parallel) through the
 * kernel cache (codegen/); library steps, copies and views run
 * node by node on backend.c's kernels. The memory plan is made over the
 * nodes in step order, so it matches what runs.
 */
#ifndef CTIMM_CPU_COMPILED_H
#define CTIMM_CPU_COMPILED_H

#include "runtime/state.h"
#include "runtime/tensor.h"

/* The backend's run (runtime/backend.h) on the fused path: 0 when done, -1
 * with err on failure, CT_INTERRUPTED when the stop flag ended its compile
 * (backend_set_stop_flag), CPU_FUSED_UNAVAILABLE when there is no C
 * compiler (the caller runs node by node instead). */
#define CPU_FUSED_UNAVAILABLE 1
int cpu_run_fused(const Graph *g, CtState *state, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err);

/* backend.c: one node as the node-by-node path runs it (its f32 kernel,
 * widened for f16/bf16, or its ref kernel; an assign copies). */
void cpu_run_node(const Graph *g, const Node *n, void *const *in, void *const *out);

#endif
