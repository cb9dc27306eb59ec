#include "runtime/cuda/step_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/buf.h"

static int ev_check(const StepProfile *sp, CUresult r, CtErr *err, const char *what)
{
    char text[256];
    return r == CU_SUCCESS ? 0 : ct_fail(err, "%s: %s", what, cuda_error_text(sp->drv, r, text, sizeof text));
}

int step_profile_open(StepProfile *sp, const CudaDriver *drv, int nsteps, CtErr *err)
{
    *sp = (StepProfile){.drv = drv, .nsteps = nsteps};
    sp->ev = calloc((size_t)nsteps + 1, sizeof *sp->ev);
    sp->ms = calloc((size_t)nsteps + 1, sizeof *sp->ms);
    CT_ASSERT(sp->ev && sp->ms);
    for (int s = 0; s <= nsteps; s++)
        if (ev_check(sp, drv->EventCreate(&sp->ev[s], 0), err, "cuEventCreate"))
            return -1;
    return 0;
}

int step_profile_mark(StepProfile *sp, int s, CUstream stream, CtErr *err)
{
    return ev_check(sp, sp->drv->EventRecord(sp->ev[s], stream), err, "cuEventRecord");
}

int step_profile_collect(StepProfile *sp, CtErr *err)
{
    if (sp->runs++ == 0)
        return 0;
    for (int s = 0; s < sp->nsteps; s++) {
        float ms = 0;
        if (ev_check(sp, sp->drv->EventElapsedTime(&ms, sp->ev[s], sp->ev[s + 1]), err, "cuEventElapsedTime"))
            return -1;
        sp->ms[s] += ms;
    }
    sp->counted++;
    return 0;
}

typedef struct Row {
    char *what;
    double ms, floor_ms;
    int steps, first;
} Row;

static int by_time(const void *a, const void *b)
{
    double x = ((const Row *)a)->ms, y = ((const Row *)b)->ms;
    return (x < y) - (x > y);
}

static int by_time_over(const void *a, const void *b)
{
    const Row *p = a, *q = b;
    double x = p->ms - p->floor_ms, y = q->ms - q->floor_ms;
    return (x < y) - (x > y);
}

/* A row's floor and its time over it, with floors. */
static void floor_cols(CtBuf *out, const double *floor_s, const Row *r)
{
    if (!floor_s)
        return;
    buf_printf(out, "  floor %8.3f ms ", r->floor_ms);
    if (r->floor_ms > 0)
        buf_printf(out, "%7.1fx", r->ms / r->floor_ms);
    else
        buf_printf(out, "%8s", "-");
}

void step_profile_report(const StepProfile *sp, const LaunchPlan *lp, const Graph *g, const double *floor_s,
                         const char *device, CtBuf *out)
{
    if (sp->counted == 0)
        return;
    int n = sp->nsteps, nkinds = 0;
    Row *kinds = calloc((size_t)n + 1, sizeof *kinds), *steps = calloc((size_t)n + 1, sizeof *steps);
    CT_ASSERT(kinds && steps);
    double total = 0, total_floor = 0;
    for (int s = 0; s < n; s++) {
        CtBuf kind = {0}, full = {0};
        double ms = sp->ms[s] / sp->counted, fl = floor_s ? floor_s[s] * 1e3 : 0;
        total += ms;
        total_floor += fl;
        int twin = sp->twin && sp->twin[s];
        lp_step_label(lp, g, s, 1, twin, &kind);
        lp_step_label(lp, g, s, 6, twin, &full);
        steps[s] = (Row){.what = full.s, .ms = ms, .floor_ms = fl, .steps = 1, .first = s};
        int k = 0;
        while (k < nkinds && strcmp(kinds[k].what, kind.s))
            k++;
        if (k == nkinds)
            kinds[nkinds++] = (Row){.what = kind.s, .first = s};
        else
            buf_free(&kind);
        kinds[k].ms += ms;
        kinds[k].floor_ms += fl;
        kinds[k].steps++;
    }
    qsort(kinds, (size_t)nkinds, sizeof *kinds, by_time);
    qsort(steps, (size_t)n, sizeof *steps, by_time);
    buf_printf(out, "ctimm: cuda profile, the mean of %d runs (eager, an event pair per step): %.3f ms in %d steps",
               sp->counted, total, n);
    if (floor_s)
        buf_printf(out, ", their roofline floor on %s %.3f ms (%.1f%% of the time)", device, total_floor,
                   100 * total_floor / (total > 0 ? total : 1));
    buf_printf(out, "; by what they run:\n");
    for (int k = 0; k < nkinds && k < 25; k++) {
        buf_printf(out, "  %9.3f ms %5.1f%% %5d steps", kinds[k].ms, 100 * kinds[k].ms / (total > 0 ? total : 1),
                   kinds[k].steps);
        floor_cols(out, floor_s, &kinds[k]);
        buf_printf(out, "  %s\n", kinds[k].what);
    }
    buf_printf(out, "ctimm: cuda profile: the slowest steps:\n");
    for (int s = 0; s < n && s < 12; s++) {
        buf_printf(out, "  %9.3f ms", steps[s].ms);
        floor_cols(out, floor_s, &steps[s]);
        buf_printf(out, "  step %d: %s\n", steps[s].first, steps[s].what);
    }
    if (floor_s) {
        qsort(steps, (size_t)n, sizeof *steps, by_time_over);
        buf_printf(out, "ctimm: cuda profile: the most time over the floor:\n");
        for (int s = 0; s < n && s < 12; s++) {
            buf_printf(out, "  %9.3f ms over", steps[s].ms - steps[s].floor_ms);
            floor_cols(out, floor_s, &steps[s]);
            buf_printf(out, "  step %d: %s\n", steps[s].first, steps[s].what);
        }
    }
    for (int s = 0, said = 0; sp->twin_ms && s < n; s++) {
        if (sp->twin_ms[2 * s] <= 0)
            continue;
        if (!said++)
            buf_printf(out, "ctimm: cuda profile: depthwise steps timed both ways at load (ms a run):\n");
        CtBuf what = {0};
        lp_step_label(lp, g, s, 2, 0, &what);
        buf_printf(out, "  library %8.3f  cuDNN twin %8.3f  runs the %-7s step %d: %s\n", sp->twin_ms[2 * s],
                   sp->twin_ms[2 * s + 1], sp->twin && sp->twin[s] ? "twin" : "library", s, what.s);
        buf_free(&what);
    }
    for (int k = 0; k < nkinds; k++)
        free(kinds[k].what);
    for (int s = 0; s < n; s++)
        free(steps[s].what);
    free(kinds);
    free(steps);
}

void step_profile_close(StepProfile *sp)
{
    for (int s = 0; sp->ev && s <= sp->nsteps; s++)
        if (sp->ev[s])
            sp->drv->EventDestroy(sp->ev[s]);
    free(sp->ev);
    free(sp->ms);
    memset(sp, 0, sizeof *sp);
}
