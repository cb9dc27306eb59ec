#include "runtime/scaler.h"

#include <math.h>
#include <stdio.h>

LossScaler scaler_default(void)
{
    return (LossScaler){.scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 2000};
}

void scaler_update(LossScaler *s, int finite)
{
    if (!finite) {
        s->scale *= s->backoff_factor;
        s->growth_tracker = 0;
        return;
    }
    if (++s->growth_tracker == s->growth_interval) {
        s->scale *= s->growth_factor;
        s->growth_tracker = 0;
    }
}

int scaler_exhausted(const LossScaler *s) { return s->scale < ldexp(1.0, -24); }

void scaler_format(const LossScaler *s, char *buf, size_t n)
{
    snprintf(buf, n, "%.17g,%d", s->scale, s->growth_tracker);
}

int scaler_parse(LossScaler *s, const char *str)
{
    double scale;
    int tracker;
    if (sscanf(str, "%lf,%d", &scale, &tracker) != 2)
        return -1;
    s->scale = scale;
    s->growth_tracker = tracker;
    return 0;
}
