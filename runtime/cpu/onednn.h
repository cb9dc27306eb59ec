/*
 * Private to the cpu backend: its convolutions through oneDNN (the library
 * PyTorch runs its CPU convolutions through), built where Debian's
 * libdnnl-dev is (CTIMM_HAVE_DNNL). A conv2d, conv2d_grad_input or
 * conv2d_grad_weight node on f32 NCHW values becomes one oneDNN primitive in
 * the layouts oneDNN picks for it (channel-blocked, its fast kernels),
 * with reorders from and to ctimm's NCHW / OIHW buffers around it: the
 * blocked copies live in the calling thread's scratch (cpu.h), the slots the
 * own kernels' im2col and Winograd buffers use, so a step's memory grows
 * only by what oneDNN needs beyond those. Which convolutions run here is
 * conv_choice.h's decision.
 */
#ifndef CTIMM_CPU_ONEDNN_H
#define CTIMM_CPU_ONEDNN_H

#include "ir/ir.h"
#include "ir/status.h"

typedef struct OnednnConv OnednnConv;

/* "2.6.3", the library's own version, for cache keys and log lines. */
const char *onednn_version(void);
/* Node n of g as a oneDNN primitive, or -1 with the reason (oneDNN has no
 * implementation of this geometry). */
int onednn_conv_create(const Graph *g, const Node *n, OnednnConv **out, CtErr *err);
/* Runs it on the node's operands, as the node's cpu kernel would. */
void onednn_conv_run(OnednnConv *c, float *const *in, float *const *out);
void onednn_conv_free(OnednnConv *c);

#endif
