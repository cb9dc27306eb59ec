/*
 * Learning-rate schedules with timm's semantics (timm/scheduler/), stepped
 * per epoch: the value at epoch t (fractions allowed, for per-update steps).
 */
#ifndef CTIMM_SCHED_H
#define CTIMM_SCHED_H

typedef enum CtSchedKind { CT_SCHED_NONE, CT_SCHED_COSINE } CtSchedKind;

typedef struct LrSchedule {
    CtSchedKind kind;
    double base_lr, min_lr;
    double warmup_lr, warmup_epochs; /* linear warmup from warmup_lr over warmup_epochs */
    double t_initial;                /* cosine period in epochs */
} LrSchedule;

/* timm's CosineLRScheduler (one cycle, no noise, no k-decay, warmup not a
 * prefix) and the constant schedule. */
double sched_lr(const LrSchedule *s, double epoch);

#endif
