/*
 * The collective of the data-parallel ranks that allreduce_mean and
 * synchronised batch norm reduce over. It belongs to a run, not to the
 * process: the caller gives it in ProgramOptions.collective
 * (codegen/program.h; the trainer gives its communicator's, dist_collective
 * in runtime/dist.h), the program keeps it with its other run options, and
 * the ref and cpu backends hand it to the kernels of those ops:
 * OpDef.ref_ranks (ir/ops.h) in place of ref, and the cpu backend's
 * CPU_RANK_KERNELS (runtime/cpu/cpu.h). Only these few ops ever see a
 * rank, so they alone take it, rather than every kernel a context
 * argument. NULL is a world of one rank, where allreduce_mean is a copy.
 */
#ifndef CTIMM_COLLECTIVE_H
#define CTIMM_COLLECTIVE_H

#include <stdint.h>

typedef struct CtCollective {
    void *ctx;
    int world_size;
    /* Sums buf over the ranks, in place; 0, or -1 when the collective failed
     * (the owner keeps the reason for its caller: a kernel cannot return one). */
    int (*allreduce_sum)(void *ctx, double *buf, int64_t n);
} CtCollective;

/* The ranks in c's world (1 without one). */
int ct_collective_world(const CtCollective *c);
/* Sums buf over c's ranks in place (nothing to do in a world of one);
 * -1 when the collective failed: the caller poisons its outputs with NaN. */
int ct_collective_sum(const CtCollective *c, double *buf, int64_t n);

#endif
