/*
 * Which of a step's two ways runs. The faster, timed once per shape and
 * kept: a depthwise convolution's library kernels against its cuDNN twin
 * (codegen/cuda/launch_plan.h). The executor times each way on the
 * device; this keeps the winner in the store of measurements it keeps the
 * libraries' algorithm choices in (ir/cache.h, opened first_wins), so a
 * later process on the same device, cuDNN and library image times nothing
 * and every process runs what the first one chose. No CUDA here: the
 * store and the rule are tested on the host (tests/test_twin_choice.c).
 */
#ifndef CTIMM_TWIN_CHOICE_H
#define CTIMM_TWIN_CHOICE_H

#include <stdint.h>

#include "ir/cache.h"

/* Which way a depthwise step with a twin runs, from CTIMM_DWCONV: "auto"
 * (or unset) the faster as timed on the device (where the libraries'
 * choices are timed, lib_choice_timed; else, and on the cuda-sim, the
 * library's kernels), "lib" the library's kernels, "cudnn" the twin.
 * Fails naming another value. */
typedef enum TwinMode { TWIN_AUTO, TWIN_LIB, TWIN_CUDNN } TwinMode;
int twin_mode(TwinMode *mode, CtErr *err);

/* Where the statistics a forward convolution's step makes for its batch
 * norm (conv_desc.h's `stats`) come from, from CTIMM_CONV_STATS: "cudnn"
 * (or unset) the call itself, through cuDNN's graph API, where cuDNN has
 * an engine for it (the cuda-sim's calls always do); "kernel" the
 * library's statistics pass after the plain call. Fails naming another
 * value. */
typedef enum ConvStatsMode { STATS_CUDNN, STATS_KERNEL } ConvStatsMode;
int conv_stats_mode(ConvStatsMode *mode, CtErr *err);

/* As stored: which way won and what each took (ms a run, the means the
 * timer gave). */
typedef struct TwinChoice {
    int32_t twin; /* 1: the twin, 0: the library's kernels */
    float ms[2];  /* the library's kernels, the twin */
} TwinChoice;

/* Way 0 (the library's kernels) or 1 (the twin) timed: its mean time a run into *ms. */
typedef int (*TwinTimeFn)(void *ctx, int way, float *ms, CtErr *err);

/* The choice stored under `parts` in c, else both ways timed by `time`
 * (library first) and the faster stored: the twin only where strictly
 * faster. Fails with the timer's error, or on a stored entry of another
 * size. */
int twin_choose(KernelCache *c, const CacheKeyParts *parts, TwinTimeFn time, void *ctx, TwinChoice *out,
                CtErr *err);

#endif
