/*
 * The data-parallel communicator: which rank this process is, in a world of
 * how many, and the collectives the trainer needs (all-reduce, broadcast,
 * barrier, a cross-rank check that buffers are identical). This module is
 * the only one that talks to MPI (Open MPI); nothing else includes mpi.h.
 * A build without MPI has the world of one rank alone: dist_init refuses a
 * launch of several, saying what to install.
 *
 * Start-up: a process started by an MPI launcher (mpirun/mpiexec, or a
 * scheduler's PMIx) joins MPI's world; a torchrun-style environment (RANK,
 * WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) set there must agree
 * with MPI's ranks. Without an MPI launcher, WORLD_SIZE > 1 (torchrun
 * --no_python, or a scheduler's variables) makes the ranks meet at
 * MASTER_ADDR:MASTER_PORT (runtime/rendezvous.h: Open MPI's ompi-server,
 * then MPI_Comm_connect/accept). Anything else is a world of one rank,
 * without touching MPI.
 *
 * The collectives here work on host memory (the cpu backend's gradients
 * pass through allreduce_mean's kernel, given dist_collective). A GPU
 * backend keeps this as the bootstrap (ranks, local rank for the device,
 * the broadcast of an NCCL unique id) and runs its collectives on an NCCL
 * communicator made from it.
 *
 * Failures: the communicator's errors are returned (MPI_ERRORS_RETURN); one
 * inside a graph's collective is kept and returned by the next call here. A
 * rank that dies ends the job: the launcher (mpirun, torchrun) kills the
 * others; a rank that hangs, or dies without such a launcher, is caught by
 * the watchdog (dist_set_timeout).
 */
#ifndef CTIMM_DIST_H
#define CTIMM_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "ir/collective.h"
#include "ir/status.h"

typedef struct CtDist CtDist;

/* 1 when a launcher started this process as a rank: an MPI launcher, or a
 * torchrun-style one (WORLD_SIZE > 1). */
int dist_launched(void);
/* The world this process is in, as above. On failure *out is NULL, or,
 * when MPI was joined but the world is unusable, a communicator to leave
 * with dist_abort (the other ranks may be waiting in it). A torchrun-style
 * launch waits up to 5 minutes for its ranks to start. */
int dist_init(CtDist **out, CtErr *err);
/* Leaves the world normally (every rank must get here), and frees d. */
void dist_finish(CtDist *d);
/* Ends every rank of the world now with exit status `status`, after this
 * rank's message is out: the way out of a run that failed on some ranks
 * only, where waiting for the others would hang. Does not return. */
void dist_abort(CtDist *d, int status) __attribute__((noreturn));

/* Exit status of a rank that the watchdog ended. */
#define DIST_TIMEOUT_STATUS 3
/* Starts a watchdog thread (world > 1, seconds > 0) that ends this process
 * with DIST_TIMEOUT_STATUS, after a line on stderr, when a collective here
 * has waited `seconds` for the other ranks: a rank that hangs, or one that
 * died where no launcher ends the others (a torchrun-style world without
 * torchrun), would otherwise hold every rank forever. torch's process
 * groups time out the same way (30 minutes by default). */
int dist_set_timeout(CtDist *d, double seconds, CtErr *err);

int dist_rank(const CtDist *d);
int dist_world_size(const CtDist *d);
/* The rank among those on this machine (a GPU's index). */
int dist_local_rank(const CtDist *d);

/* Sums buf over the ranks, in place. */
int dist_allreduce_sum(CtDist *d, double *buf, size_t n, CtErr *err);
/* Rank `root`'s n bytes at buf to every rank. */
int dist_broadcast(CtDist *d, void *buf, size_t n, int root, CtErr *err);
int dist_barrier(CtDist *d, CtErr *err);
/* Fails, naming the ranks that differ from rank 0, unless the XXH3-64 hash
 * of the n chunks (chunk[i], size[i] bytes) is the same on every rank.
 * `what` names the data in the message. */
int dist_check_identical(CtDist *d, const void *const *chunk, const size_t *size, int n, const char *what,
                         CtErr *err);

/* The collective of d's ranks that a program's allreduce_mean and
 * synchronised batch norm reduce over (ProgramOptions.collective), valid
 * until dist_finish. A failure inside it is kept and returned by the next
 * call here. */
const CtCollective *dist_collective(CtDist *d);

#endif
