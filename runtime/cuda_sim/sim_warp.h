/*
 * The warp operations of the SIMT harness, as CUDA defines them (PTX's
 * shfl.sync, vote.sync, redux.sync): which lanes an operation joins, and
 * what each lane receives once all of them have arrived. No scheduling
 * here: runtime/cuda_sim/sim_launch.c suspends the lanes and calls
 * sim_warp_complete when none can go on.
 */
#ifndef CTIMM_SIM_WARP_H
#define CTIMM_SIM_WARP_H

#include "ir/status.h"

/* Where a thread is: running (or ready to), waiting at a warp operation or
 * at its block's barrier, or exited. */
enum SimState { SIM_READY, SIM_AT_WARP, SIM_AT_BARRIER, SIM_EXITED };

/* A thread's record: its state, and the operation it waits at. */
typedef struct SimLane {
    int state;
    int op;    /* enum CtSimWarpOp or CtSimBarrierOp */
    unsigned int mask;
    int arg, width;
    unsigned long long val, res;
} SimLane;

/* What a source lane that does not take part gives (CUDA leaves it
 * undefined): every bit set, NaN as a float or double, -1 as an integer. */
#define SIM_WARP_POISON (~0ull)

/* The name of a warp operation, for messages: "__shfl_xor_sync". */
const char *sim_warp_op_name(int op);

/* A warp operation's arguments that CUDA leaves undefined: width not a
 * power of two in [1, 32], or the calling lane outside its mask. */
int sim_warp_check(int op, unsigned int mask, int width, int lane, CtErr *err);

/* Completes the operations of one warp (lanes[0..n), n <= 32) that every
 * live lane they name has reached: each such lane gets res and the mask of
 * them is returned. An operation is the lanes of one mask (live lanes
 * only; the caller's own lane included) at the same operation with the
 * same mask; lanes of one mask at different operations, or with different
 * masks, fail (-1, err naming the lanes). */
long long sim_warp_complete(SimLane *lanes, int n, CtErr *err);

#endif
