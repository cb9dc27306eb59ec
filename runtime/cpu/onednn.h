/*
 * Private to the cpu backend: its convolutions and pooling through oneDNN
 * (the library PyTorch runs its CPU convolutions through), built where
 * Debian's libdnnl-dev is (CTIMM_HAVE_DNNL). A conv2d, conv2d_grad_input or
 * conv2d_grad_weight node on f32 NCHW values becomes one oneDNN primitive in
 * the layouts oneDNN picks for it (channel-blocked, its fast kernels),
 * with reorders from and to ctimm's NCHW / OIHW buffers around it: the
 * blocked copies live in the calling thread's scratch (cpu.h), the slots the
 * own kernels' im2col and Winograd buffers use, so a step's memory grows
 * only by what oneDNN needs beyond those. Which convolutions (and pooling
 * nodes) run here is conv_choice.h's decision.
 *
 * A forward convolution may take its library step's epilogue (passes/fuse.h:
 * a residual add, then an activation) as oneDNN post-ops: a sum into the
 * destination and eltwise ops, applied while each output block is still in
 * registers, before the reorder back to NCHW, so neither the convolution's
 * own output nor the sum is written to memory.
 *
 * Pooling (avg_pool2d, max_pool2d and their gradients) runs on ctimm's NCHW
 * buffers as they are, oneDNN's JIT kernels reading that layout. Its max
 * pooling's backward reads the forward's argmax workspace: max_pool2d_grad
 * (x, dy) runs the forward again into scratch, then the backward.
 */
#ifndef CTIMM_CPU_ONEDNN_H
#define CTIMM_CPU_ONEDNN_H

#include "ir/ir.h"
#include "ir/status.h"

typedef struct OnednnConv OnednnConv;

/* "2.6.3", the library's own version, for cache keys and log lines. */
const char *onednn_version(void);
/* Node n of g as a oneDNN primitive, followed by the nepi nodes epi (an add
 * of n's output and a residual of its shape, an activation of the previous
 * one's output; nepi 0: none), or -1 with the reason (oneDNN has no
 * implementation of this geometry or post-op). */
int onednn_conv_create(const Graph *g, const Node *n, const Node *epi, int nepi, OnednnConv **out, CtErr *err);
/* Runs it on the node's operands, as the node's cpu kernel would, storing
 * the last epilogue node's output in out[0]; residual is the add's other
 * operand (NULL without one), equal to out[0] or apart from it, and out[0]
 * apart from the node's inputs unless onednn_conv_dst_private(c). */
void onednn_conv_run(OnednnConv *c, float *const *in, const float *residual, float *const *out);
/* Whether the output of `from` (a forward convolution without a residual)
 * may pass to the source of `to` as it is, in the channel-blocked layout
 * both run it in, nbytes long there (a value of nbytes, whose memory then
 * holds the blocked form). */
int onednn_conv_blocked_match(const OnednnConv *from, const OnednnConv *to, size_t nbytes);
/* From now on c's output (dst 1) or source (dst 0) is in that blocked
 * layout in the caller's memory: no reorder to or from NCHW. */
void onednn_conv_keep_blocked(OnednnConv *c, int dst);
/* Whether c computes into a copy of its own and writes out[0] only at the
 * end, after every read: then out[0] may overlap any operand. */
int onednn_conv_dst_private(const OnednnConv *c);
void onednn_conv_free(OnednnConv *c);

typedef struct OnednnPool OnednnPool;

/* Pooling node n of g (f32, 4-D) as oneDNN primitives, or -1 with the
 * reason (a geometry whose windows oneDNN counts otherwise). */
int onednn_pool_create(const Graph *g, const Node *n, OnednnPool **out, CtErr *err);
/* Runs it on the node's operands into out[0], apart from them. */
void onednn_pool_run(OnednnPool *p, float *const *in, float *const *out);
void onednn_pool_free(OnednnPool *p);

#endif
