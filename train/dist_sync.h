/*
 * What timm's train.py does across the ranks of a data-parallel run besides
 * the graph's gradient all-reduce (runtime/dist.h): rank 0's state shared
 * at the start, validation metrics summed over the ranks, BN running
 * statistics reduced or broadcast after each epoch (--dist-bn), and the
 * --dist-check-params check. Each is a no-op in a world of one.
 */
#ifndef CTIMM_TRAIN_DIST_SYNC_H
#define CTIMM_TRAIN_DIST_SYNC_H

#include "runtime/dist.h"
#include "runtime/state.h"
#include "train/meter.h"

/* Every rank starts from rank 0's state (DDP's broadcast at wrapping); the
 * RNG counter of dropout and drop-path then moves apart per rank (timm
 * seeds rank r with seed + r), far enough that no two ranks draw alike. */
int train_share_state(CtDist *d, CtState *s, CtErr *err);

/* The meter summed over the ranks: the metrics of every rank's share. */
int train_reduce_meter(CtDist *d, EvalMeter *m, CtErr *err);

/* timm's distribute_bn: every running_mean / running_var in s (the EMA's
 * copies too) averaged over the ranks (reduce) or set to rank 0's. */
int train_sync_bn(CtDist *d, CtState *s, int reduce, CtErr *err);

/* Fails naming the ranks whose parameters or optimizer state differ from
 * rank 0's. */
int train_check_params(CtDist *d, const CtState *s, CtErr *err);

#endif
