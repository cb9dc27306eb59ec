/*
 * Translation units: a graph's generated kernels split into a few source
 * files, and the thread pool that compiles them (through the kernel cache,
 * by whatever compiler the caller's callback runs: codegen/host_compile.h,
 * codegen/nvrtc.h).
 *
 * A kernel whose text (under a common name) is that of an earlier launch's
 * is not rendered again: the launch runs the earlier one (fn). A model's
 * repeated blocks make most kernels such repeats: resnet50d's training step
 * under --amp has 339 launches with a kernel and 60 distinct ones, which
 * NVRTC compiles in a fifth of the time.
 *
 * The split depends on the kernels alone, never on the machine (its core
 * count), so a unit's source, and so its cache key, is the same wherever
 * the graph is compiled: a cache filled on one machine hits on another.
 * Units are contiguous runs of distinct kernels in launch order, of about
 * UNIT_LOOPS loops each (a loop is one step of the fused graph: a plain
 * kernel has one, a multi-tensor optimizer launch one per parameter), so a
 * graph of W loops has ceil(W / UNIT_LOOPS) units, and a graph of at most
 * UNIT_LOOPS loops stays one unit. Each unit is a whole translation unit:
 * the prelude, then its kernels.
 *
 * Why loops: compile time follows them in both compilers, and kernels do
 * not. Measured on resnet50's training step as host C (cc -O3, one core):
 * 152 one-loop kernels 2.2 s, the SGD launches of 54 and 107 loops 1.1 s
 * and 2.3 s (14-20 ms a loop); vit_base_patch32_384's --amp step by NVRTC:
 * 343 one-loop kernels 8.9 s, its 50-loop optimizer launch 1.4 s (26-27 ms
 * a loop). Dealt by kernel count (2 units of 77), resnet50's second unit
 * would hold both optimizer launches: 4.4 s of the 5.5.
 *
 * Why UNIT_LOOPS = 96: a unit costs a fixed 0.06-0.07 s (starting cc with
 * its headers and linker, or an NVRTC program, and the prelude), under 5%
 * of a unit of 96 loops (about 1.5 s in cc, 2.5 s in NVRTC); measured, the
 * total CPU time of a cold compile did not change from 32 to 192 loops a
 * unit (resnet50's step in cc 4.9-5.3 s, vit_base's in NVRTC 9.8-10.8 s),
 * nor did the wall time on 2 cores beyond the noise, except where an odd
 * number of units left one core idle at the end. 96 still gives resnet50's
 * step (313 loops) 4 units and vit_base's (393) 5, about 2 s each on a
 * many-core host, and keeps small graphs whole: test_resnet's training
 * step, the graph of the ctimm-compile cache test, is one unit; test_vit's
 * two. bench/NOTES.md has the numbers.
 *
 * The pool: min(units, online CPUs) threads, the calling thread one of
 * them, each taking the next unit not yet taken; one unit needs no thread.
 */
#ifndef CTIMM_UNITS_H
#define CTIMM_UNITS_H

#include "codegen/kir.h"
#include "ir/buf.h"

#define UNIT_LOOPS 96

typedef struct KernelUnits {
    int n;          /* units */
    int nkernels;   /* launches with a kernel */
    int ndistinct;  /* distinct kernels: those rendered and compiled */
    int nlaunches;
    int *fn;        /* per launch: the launch whose kernel ct_k<fn> it runs, -1 for a launch without one */
    int *unit;      /* per launch: the unit holding ct_k<fn>, -1 for a launch without one */
    CtBuf *src;     /* per unit: the prelude, then its distinct kernels in launch order */
} KernelUnits;

/* The split itself: items 0..n-1 of weights w[] (each >= 1) into contiguous
 * runs of about `target` each; unit[i] gets item i's run, runs numbered
 * from 0 in order, none empty. Returns the number of runs (0 when n is 0). */
int units_split(const int *w, int n, int target, int *unit);

/* Splits the kernels of launches k[0..nlaunches) (a launch with nloops == 0
 * has none) into units of about `loops_per_unit` loops (UNIT_LOOPS but in
 * tests) and renders each, CUDA C when cuda, else host C. */
void units_make(const KirKernel *k, int nlaunches, int loops_per_unit, int cuda, KernelUnits *u);
void units_free(KernelUnits *u);

/* Compiles unit `unit` (its source) into the caller's per-unit slot; 0, or
 * -1 with err, or CT_INTERRUPTED (the caller's stop flag ended it). Called
 * from several threads at once, for different units. */
typedef int (*UnitCompileFn)(void *ctx, int unit, const char *source, CtErr *err);

/* Runs compile on every unit, in parallel (above). 0 when all succeeded;
 * CT_INTERRUPTED with its message when a unit was interrupted (the user
 * asked to stop: that outranks any unit's error); else -1 with the message
 * of the lowest-numbered unit that failed. After a failure no further unit
 * is started; every thread is joined before this returns, so compile's
 * results are all in place (or known failed). */
int units_compile(const KernelUnits *u, UnitCompileFn compile, void *ctx, CtErr *err);

#endif
