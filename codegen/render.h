/*
 * Renderers of kernel IR (codegen/kir.h): host C (render_c.c: a function
 * `void ct_k<launch>(void *const *args)` per kernel, args[b] the memory of
 * buffer b, OpenMP loops the compiler can vectorise) and CUDA C
 * (render_cuda.c: `extern "C" __global__ void ct_k<launch>(b0, b1, ...)`,
 * grid-stride loops). A translation unit is one prelude (includes, the
 * f16/bf16 conversions, rounding to nearest even as runtime/tensor.c does)
 * and any number of kernels. The loop bodies are the same text in both
 * (render_body.c); only the wrappers differ.
 */
#ifndef CTIMM_RENDER_H
#define CTIMM_RENDER_H

#include "codegen/kir.h"
#include "ir/buf.h"

/* ir/host_math.h's text (made at build time by cmake/embed_text.cmake) */
extern const char ct_host_math_text[];

void render_c_prelude(CtBuf *out);
void render_c_kernel(const KirKernel *k, CtBuf *out);

void render_cuda_prelude(CtBuf *out);
void render_cuda_kernel(const KirKernel *k, CtBuf *out);

/* One translation unit holding every elementwise launch of plan p (the
 * prelude, then the kernels in launch order), in KIR_F32: CUDA C with
 * layouts, else host C as the cpu backend runs it (with layouts too);
 * *nkernels gets their count. For reading (--dump-kernels): the backends
 * compile a graph as several units (codegen/units.h). */
int render_graph(const Graph *g, const FusePlan *p, int cuda, CtBuf *out, int *nkernels, CtErr *err);

/* Shared by both: the storage type of a dtype ("float", "unsigned short",
 * ...) and the statements of one loop's body for element `i`; with run,
 * element t of a run from i0 (i = i0 + t), the views' offsets p<j> at i0
 * set by render_run_bases. */
const char *render_storage_type(CtDType t);
void render_body(const KirKernel *k, const KirLoop *l, const char *indent, int run, CtBuf *out);
/* Parts of the body for element i<x> (its offsets o<j><x>, its loads and
 * other values v<j><x>, its stores): so that several elements' loads can
 * come before any of their stores, or be made by the caller (the CUDA
 * vector accesses, which set the loads' v<j><x> themselves). */
enum { RENDER_OFFSETS = 1, RENDER_VALUES = 2, RENDER_STORES = 4, RENDER_LOADS = 8, RENDER_ALL = 15 };
void render_body_part(const KirKernel *k, const KirLoop *l, const char *indent, const char *x, int part, CtBuf *out);

/* The length of the runs of loop l's flat index over which every view's
 * offset steps by its innermost stride (a multiple of each broadcast or
 * permuted view's innermost dim, dividing the loop), at least
 * RENDER_MIN_RUN; 0: none. The host C loops over runs, each view's offset
 * worked out once per run, not its divisions once per element. */
#define RENDER_MIN_RUN 16
int64_t render_run(const KirLoop *l);
void render_run_bases(const KirLoop *l, const char *indent, CtBuf *out);
/* Statements setting `name`<j><x> to view v's offset at flat index `at`
 * (an expression). */
void render_view_offset(const KirView *v, int j, const char *name, const char *x, const char *at, const char *indent,
                        CtBuf *out);

#endif
