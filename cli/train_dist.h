/* ctimm-train's data-parallel parts (runtime/dist.h): starting the ranks,
 * and what timm's train.py does across them besides the graph's gradient
 * all-reduce: validation metrics summed over the ranks, BN running
 * statistics reduced or broadcast after each epoch (--dist-bn), and the
 * --dist-check-params check. Each prints nothing; errors come back in err. */
#ifndef CTIMM_TRAIN_DIST_H
#define CTIMM_TRAIN_DIST_H

#include "cli/eval.h"
#include "runtime/dist.h"
#include "runtime/state.h"

/* --nproc-per-node N outside an MPI launcher: replaces this process by
 * mpiexec starting this command as N ranks on this machine (torchrun
 * --nproc_per_node N). Returns only on failure, with err set. */
int train_launch(int argc, char **argv, int n, CtErr *err);

/* The meter summed over the ranks: the metrics of every rank's share. */
int train_reduce_meter(CtDist *d, EvalMeter *m, CtErr *err);

/* timm's distribute_bn: every running_mean / running_var in s (the EMA's
 * copies too) averaged over the ranks (reduce) or set to rank 0's. */
int train_sync_bn(CtDist *d, CtState *s, int reduce, CtErr *err);

/* Fails naming the ranks whose parameters or optimizer state differ from
 * rank 0's. */
int train_check_params(CtDist *d, const CtState *s, CtErr *err);

#endif
