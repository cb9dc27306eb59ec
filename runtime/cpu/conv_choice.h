/*
 * Private to the cpu backend: which of a program's convolutions run through
 * oneDNN (runtime/cpu/onednn.h) and which on the own kernels (im2col + BLAS,
 * Winograd, depthwise), decided when the program is prepared; and likewise
 * its pooling nodes (avg/max pooling and their gradients), oneDNN's or the
 * own loops (runtime/cpu/pool_ops.c).
 *
 * CTIMM_CONV says how, for both: "auto" (the default) times both on each distinct
 * geometry (random operands, the best of a few runs each, the two sides
 * alternating) and keeps the faster; "onednn" takes oneDNN wherever it has
 * an implementation; "own" never. A timed choice is stored in the kernel
 * cache (ir/cache.h) as the cuda backend stores its cuDNN algorithm
 * choices, keyed by the geometry, this CPU's model, the thread count and
 * oneDNN's version, so the next process (and the next run of a training
 * job) runs the same kernels, and its numbers do not depend on what one
 * timing happened to see; within a process the choices are kept in memory
 * too, so its programs agree. Built without oneDNN, every convolution is
 * the own kernels'.
 */
#ifndef CTIMM_CPU_CONV_CHOICE_H
#define CTIMM_CPU_CONV_CHOICE_H

#include "codegen/program.h" /* FusePlan */
#include "ir/ir.h"
#include "ir/status.h"
#include "runtime/cpu/onednn.h"

typedef struct ConvChoices {
    OnednnConv **dn;   /* per node: its oneDNN primitive; NULL: the node's own kernel */
    OnednnConv **epi;  /* per node: the conv2d and its step's epilogue as one primitive; NULL: none */
    OnednnPool **pool; /* per node: a pooling node's oneDNN primitives; NULL: the own kernel */
    int nnodes;
    int convs, onednn, pools, pool_onednn, timed, cached, fused, blocked;
    char note[256];   /* one line for the logs; "" when the graph has no convolution */
} ConvChoices;

/* Fills c for graph g, whose nodes run as fp's steps in order (NULL: node
 * by node) over ptr, each value's memory as prepared (NULL where the
 * caller binds it at each run); the primitives keep nothing of g. 0, or -1
 * with err set: a bad CTIMM_CONV, or a cache that could not be opened. */
int conv_choices_make(const Graph *g, const FusePlan *fp, void *const *ptr, ConvChoices *c, CtErr *err);
/* Runs the library step of g's nodes [first, first + n) as one primitive
 * where c has one for it and the memory allows (ptr: each value's memory):
 * 1, else 0 (the caller runs its nodes one by one). */
int conv_choices_run_step(const ConvChoices *c, const Graph *g, int first, int n, void *const *ptr);
/* Runs node `node` (a convolution or pooling) through oneDNN when that is
 * its choice: 1, else 0 (the caller runs the own kernel). */
int conv_choices_run(const ConvChoices *c, int node, float *const *in, float *const *out);
void conv_choices_free(ConvChoices *c);

#endif
