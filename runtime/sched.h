/*
 * Learning-rate schedules with timm's semantics (timm/scheduler/): cosine,
 * tanh, step, multistep, plateau, poly and a constant one, with warmup,
 * cycles, k-decay, noise (torch's mt19937 + Box-Muller, bit for bit) and
 * stepping per epoch or per optimizer update. sched_init is timm's
 * create_scheduler_v2 (train.py's arguments in, the total epoch count out);
 * the step functions are Scheduler.step / step_update, called where
 * train.py calls them:
 *   LR for epoch 0 (or update 0) = sched_lr() right after sched_init;
 *   resuming at epoch e>0: sched_step(e) or sched_step_update(e * updates);
 *   after each update: sched_step_update(++num_updates);
 *   after each epoch's validation: sched_step_metric(epoch + 1, metric).
 */
#ifndef CTIMM_SCHED_H
#define CTIMM_SCHED_H

#include <stddef.h>

#include "ir/status.h"

typedef enum CtSchedKind {
    CT_SCHED_NONE, /* constant lr (timm has no such scheduler; --sched none) */
    CT_SCHED_COSINE,
    CT_SCHED_TANH,
    CT_SCHED_STEP,
    CT_SCHED_MULTISTEP,
    CT_SCHED_PLATEAU,
    CT_SCHED_POLY,
} CtSchedKind;

#define SCHED_MAX_MILESTONES 32

/* train.py's scheduler flags (scheduler_kwargs); sched_args_default() gives
 * train.py's defaults. */
typedef struct SchedArgs {
    CtSchedKind kind;
    int epochs;
    double decay_epochs;                        /* step */
    int decay_milestones[SCHED_MAX_MILESTONES]; /* multistep, increasing */
    int n_milestones;
    double warmup_epochs, warmup_lr;
    int warmup_prefix;
    int cooldown_epochs, patience_epochs;
    double decay_rate; /* the power for poly */
    double min_lr;
    double noise[2]; /* --lr-noise: fractions of t_initial; one = noise from there on, two = [on, off) */
    int n_noise;     /* 0: no noise */
    double noise_pct, noise_std;
    int noise_seed; /* train.py passes --seed */
    double cycle_mul, cycle_decay;
    int cycle_limit;
    double k_decay;
    int plateau_min; /* plateau mode 'min' (a decreasing eval metric such as loss) */
    int on_updates;  /* --sched-on-updates */
} SchedArgs;

typedef struct LrSched {
    SchedArgs a;
    double base_lr;
    double t_initial, warmup_t, decay_t, cooldown_t; /* in epochs, or updates when a.on_updates */
    double milestones[SCHED_MAX_MILESTONES];
    double noise_lo, noise_hi; /* noise where noise_lo <= t < noise_hi */
    int has_noise;
    double warmup_step;
    int num_epochs; /* epochs to run: create_scheduler_v2's second result */
    double lr;      /* the current value, what the optimizer uses next */
    /* plateau: torch's ReduceLROnPlateau state and timm's noise restore */
    double best, restore_lr;
    int num_bad, cooldown_counter, has_restore;
} LrSched;

SchedArgs sched_args_default(void);

/* "cosine" ... "none" -> kind; -1 if unknown. */
int sched_kind_parse(const char *name);

/* create_scheduler_v2 with optimizer lr base_lr. updates_per_epoch is needed
 * (> 0) only with a.on_updates. Returns 0, or -1 with a message for
 * combinations timm refuses (plateau per update, ...). */
int sched_init(LrSched *s, const SchedArgs *a, double base_lr, int updates_per_epoch, CtErr *err);

/* The scheduler's value at t (timm's _get_lr, no noise; not for plateau). */
double sched_value(const LrSched *s, double t);

/* Scheduler.step(epoch, metric); isnan(metric) is timm's metric=None. Only
 * the plateau schedule reads the metric. No-op when stepping per update. */
void sched_step_metric(LrSched *s, int epoch, double metric);
void sched_step(LrSched *s, int epoch);

/* Scheduler.step_update(num_updates): no-op when stepping per epoch. */
void sched_step_update(LrSched *s, long num_updates);

static inline double sched_lr(const LrSched *s) { return s->lr; }

/* The state a checkpoint keeps: the plateau schedule's (the others are
 * functions of the epoch or update), exact decimals; SCHED_STATE_LEN bytes
 * hold it. sched_parse puts a schedule exactly where sched_format left it,
 * or returns -1 and leaves *s as it was when str is not such a state. */
#define SCHED_STATE_LEN 160
void sched_format(const LrSched *s, char *buf, size_t n);
int sched_parse(LrSched *s, const char *str);

/* timm's _calculate_noise: a torch.randn draw from a generator seeded with
 * seed, redrawn until |noise| < pct; exposed for the tests. */
double sched_noise(unsigned long long seed, double pct);

#endif
