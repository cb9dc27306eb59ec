/* Contract: sim_warp_complete gives each lane of a completed warp
 * operation what CUDA's intrinsic returns to it, and poison where CUDA
 * leaves the value undefined (a source lane that does not take part). */
#include "runtime/cuda_sim/sim_warp.h"

#include "runtime/cuda_sim/sim_abi.h"

static const char *const op_names[CT_SIM_NWARP_OPS] = {
    [CT_SIM_SHFL_IDX] = "__shfl_sync",         [CT_SIM_SHFL_UP] = "__shfl_up_sync",
    [CT_SIM_SHFL_DOWN] = "__shfl_down_sync",   [CT_SIM_SHFL_XOR] = "__shfl_xor_sync",
    [CT_SIM_BALLOT] = "__ballot_sync",         [CT_SIM_ANY] = "__any_sync",
    [CT_SIM_ALL] = "__all_sync",               [CT_SIM_SYNCWARP] = "__syncwarp",
    [CT_SIM_REDUCE_ADD] = "__reduce_add_sync", [CT_SIM_REDUCE_MIN_U] = "__reduce_min_sync",
    [CT_SIM_REDUCE_MAX_U] = "__reduce_max_sync", [CT_SIM_REDUCE_MIN_I] = "__reduce_min_sync",
    [CT_SIM_REDUCE_MAX_I] = "__reduce_max_sync", [CT_SIM_REDUCE_AND] = "__reduce_and_sync",
    [CT_SIM_REDUCE_OR] = "__reduce_or_sync",   [CT_SIM_REDUCE_XOR] = "__reduce_xor_sync",
};

const char *sim_warp_op_name(int op) { return op >= 0 && op < CT_SIM_NWARP_OPS ? op_names[op] : "?"; }

int sim_warp_check(int op, unsigned int mask, int width, int lane, CtErr *err)
{
    if (width < 1 || width > 32 || (width & (width - 1)))
        return ct_fail(err, "%s with width %d (CUDA takes a power of two from 1 to 32)", sim_warp_op_name(op), width);
    if (!(mask >> lane & 1u))
        return ct_fail(err, "%s by lane %d, which its mask 0x%08x leaves out", sim_warp_op_name(op), lane, mask);
    return 0;
}

/* The lane whose value lane i's shuffle reads (PTX shfl.sync): offsets and
 * lane masks count mod 32; a source past the end of i's segment of width
 * lanes (before its start, for up) gives i its own value. */
static int shfl_source(const SimLane *l, int i)
{
    int w = l->width, b = l->arg & 31, lo = i & ~(w - 1), hi = lo + w - 1, j;
    switch (l->op) {
    case CT_SIM_SHFL_IDX:
        return lo + (b & (w - 1));
    case CT_SIM_SHFL_UP:
        j = i - b;
        return j >= lo ? j : i;
    case CT_SIM_SHFL_DOWN:
        j = i + b;
        return j <= hi ? j : i;
    default: /* xor: an earlier segment may be read, a later one not */
        j = i ^ b;
        return j <= hi ? j : i;
    }
}

/* Every lane of g (all at operation op) gets its result. */
static void compute(SimLane *l, int n, unsigned int g, int op)
{
    if (op <= CT_SIM_SHFL_XOR) {
        for (int i = 0; i < n; i++)
            if (g >> i & 1u) {
                int j = shfl_source(&l[i], i);
                l[i].res = g >> j & 1u ? l[j].val : SIM_WARP_POISON;
            }
        return;
    }
    unsigned int votes = 0, acc = 0;
    int first = 1;
    for (int i = 0; i < n; i++) {
        if (!(g >> i & 1u))
            continue;
        unsigned int v = (unsigned int)l[i].val;
        votes |= (unsigned int)(l[i].val != 0) << i;
        if (first)
            acc = v;
        else if (op == CT_SIM_REDUCE_ADD)
            acc += v;
        else if (op == CT_SIM_REDUCE_MIN_U)
            acc = v < acc ? v : acc;
        else if (op == CT_SIM_REDUCE_MAX_U)
            acc = v > acc ? v : acc;
        else if (op == CT_SIM_REDUCE_MIN_I)
            acc = (int)v < (int)acc ? v : acc;
        else if (op == CT_SIM_REDUCE_MAX_I)
            acc = (int)v > (int)acc ? v : acc;
        else if (op == CT_SIM_REDUCE_AND)
            acc &= v;
        else if (op == CT_SIM_REDUCE_OR)
            acc |= v;
        else if (op == CT_SIM_REDUCE_XOR)
            acc ^= v;
        first = 0;
    }
    unsigned long long r = op == CT_SIM_BALLOT ? votes
                           : op == CT_SIM_ANY  ? votes != 0
                           : op == CT_SIM_ALL  ? votes == g
                           : op == CT_SIM_SYNCWARP ? 0
                                                   : acc;
    for (int i = 0; i < n; i++)
        if (g >> i & 1u)
            l[i].res = r;
}

long long sim_warp_complete(SimLane *lanes, int n, CtErr *err)
{
    unsigned int live = 0, waiting = 0, done = 0;
    for (int i = 0; i < n; i++) {
        live |= (unsigned int)(lanes[i].state != SIM_EXITED) << i;
        waiting |= (unsigned int)(lanes[i].state == SIM_AT_WARP) << i;
    }
    for (int i = 0; i < n; i++) {
        if (!(waiting >> i & 1u) || done >> i & 1u)
            continue;
        const SimLane *a = &lanes[i];
        unsigned int g = a->mask & live;
        if ((g & waiting) != g)
            continue; /* a lane of the mask is still elsewhere */
        for (int j = 0; j < n; j++)
            if (g >> j & 1u && (lanes[j].op != a->op || lanes[j].mask != a->mask))
                return ct_fail(err, "lanes %d and %d of a warp meet at different warp operations: %s with mask "
                                    "0x%08x and %s with mask 0x%08x", i, j, sim_warp_op_name(a->op), a->mask,
                               sim_warp_op_name(lanes[j].op), lanes[j].mask);
        compute(lanes, n, g, a->op);
        done |= g;
    }
    return done;
}
