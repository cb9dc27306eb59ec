/*
 * The collective that allreduce_mean's reference kernel and synchronised
 * batch_norm's kernels (ref and cpu) call: kernels take
 * no context, and a process belongs to one data-parallel group (MPI_Init is
 * once a process), so the owner of the communicator (runtime/dist.h)
 * installs it here once, before running a graph with that op, and removes it
 * when the communicator goes. With none installed allreduce_mean is a copy:
 * a world of one rank.
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

/* NULL removes it. The pointer must stay valid until then. */
void ct_collective_install(const CtCollective *c);
const CtCollective *ct_collective(void);

/* The ranks in the installed collective's world (1 without one). */
int ct_collective_world(void);
/* Sums buf over the ranks in place (nothing to do in a world of one);
 * -1 when the collective failed: the caller poisons its outputs with NaN. */
int ct_collective_sum(double *buf, int64_t n);

#endif
