/*
 * Device time per step of a cuda program's eager runs, for finding the
 * slow kernels on a GPU with no profiler at hand (CTIMM_CUDA_PROFILE=1 in
 * the environment of any tool that runs --device cuda): an event is
 * recorded on the stream before every step and after the last, and the
 * gaps are summed over the runs after the first (which loads modules and
 * warms the libraries). The report, on stderr when the program is freed,
 * sums the steps by what they run (kind, library kernels, first op) and
 * lists the slowest single steps, each beside its roofline floor on the
 * device (cuda_program_floors: an H200 or H100) and its time over it,
 * then the steps that lose the most time above their floors: where the
 * kernels fall furthest short of the hardware, not only where the time
 * goes. Last, the depthwise steps timed both ways at load, each way's time
 * and which runs. Timing every step needs the steps
 * enqueued one by one, so a profiled program is never captured as a
 * graph: the launch gaps are in the figures.
 */
#ifndef CTIMM_STEP_PROFILE_H
#define CTIMM_STEP_PROFILE_H

#include "codegen/program.h"
#include "runtime/cuda/driver.h"

typedef struct StepProfile {
    const CudaDriver *drv;
    CUevent *ev; /* nsteps + 1 */
    double *ms;  /* per step, summed over the counted runs */
    const unsigned char *twin; /* per step, 1 where it ran its cuDNN twin (launch_plan.h); NULL: none did */
    const float *twin_ms;      /* per step, two: its library kernels' and its twin's time a run as timed at
                                * load (twin_choice.h), 0 where not timed; NULL: none was */
    int nsteps, runs, counted;
} StepProfile;

int step_profile_open(StepProfile *sp, const CudaDriver *drv, int nsteps, CtErr *err);
/* Step s is about to be enqueued (s == nsteps: the last has been). */
int step_profile_mark(StepProfile *sp, int s, CUstream stream, CtErr *err);
/* After the run's stream has synchronised: its gaps added (from the second run on). */
int step_profile_collect(StepProfile *sp, CtErr *err);
/* The report into out (nothing before a run was counted) of the steps of
 * lp over g, beside their floors (floor_s, in seconds) on `device`; NULL
 * floors: a device without a roofline, the times alone. */
void step_profile_report(const StepProfile *sp, const LaunchPlan *lp, const Graph *g, const double *floor_s,
                         const char *device, CtBuf *out);
void step_profile_close(StepProfile *sp);

#endif
