#include "runtime/sched.h"

#include <math.h>

double sched_lr(const LrSchedule *s, double t)
{
    if (s->warmup_epochs > 0 && t < s->warmup_epochs)
        return s->warmup_lr + t * (s->base_lr - s->warmup_lr) / s->warmup_epochs;
    if (s->kind == CT_SCHED_NONE || s->t_initial <= 0)
        return s->base_lr;
    if (t >= s->t_initial)
        return s->min_lr;
    return s->min_lr + 0.5 * (s->base_lr - s->min_lr) * (1 + cos(3.14159265358979323846 * t / s->t_initial));
}
