/*
 * The cpu backend's context (compiled.c): a cpu Program (codegen/program.h)
 * run as its fused steps, a compiled host kernel per elementwise launch
 * and node by node for the rest (or every node in order where the program
 * has no compiled kernels), over its memory plan's arena, kept from run to
 * run. backend.c holds the node kernels and the backend's table.
 */
#ifndef CTIMM_CPU_COMPILED_H
#define CTIMM_CPU_COMPILED_H

#include "runtime/backend.h"

/* runtime/backend.h's prepare, run and free for the cpu backend. */
int cpu_exec_prepare(const CtProgram *p, CtState *state, CtExec **out, CtErr *err);
int cpu_exec_run(CtExec *e, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err);
void cpu_exec_free(CtExec *e);
const char *cpu_exec_note(const CtExec *e);

/* backend.c: one node as the node-by-node path runs it (its f32 kernel,
 * widened for f16/bf16, or its ref kernel; an assign copies), the ops that
 * reduce over the ranks over coll (NULL: a world of one). */
void cpu_run_node(const Graph *g, const Node *n, void *const *in, void *const *out, const CtCollective *coll);

#endif
