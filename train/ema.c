#include "train/ema.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

double ema_decay(double decay, int warmup, long step)
{
    long s = step - 1;
    if (s <= 0)
        return 0;
    if (!warmup)
        return decay;
    double d = 1 - pow(1 + (double)s, -2.0 / 3);
    return d < decay ? (d > 0 ? d : 0) : decay;
}

void ema_from_model(CtState *s)
{
    for (int i = 0; i < s->n; i++)
        if (!strncmp(s->e[i].name, "ema.", 4)) {
            int m = state_find(s, s->e[i].name + 4);
            if (m >= 0)
                memcpy(state_data(s, i), state_data(s, m), ct_dtype_size(s->e[i].type.dtype) *
                                                               (size_t)shape_numel(&s->e[i].type.shape));
        }
}

void ema_view(CtState *view, const CtState *s)
{
    for (int i = 0; i < view->n; i++) {
        char name[600];
        snprintf(name, sizeof name, "ema.%s", view->e[i].name);
        int k = state_find(s, name);
        if (k < 0)
            k = state_find(s, view->e[i].name);
        if (k >= 0)
            memcpy(state_data(view, i), state_data(s, k), s->e[k].type.dtype == view->e[i].type.dtype
                   ? ct_dtype_size(s->e[k].type.dtype) * (size_t)shape_numel(&s->e[k].type.shape) : 0);
    }
}
