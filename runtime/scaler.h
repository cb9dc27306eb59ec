/*
 * The dynamic loss scale of f16 training, with torch.cuda.amp.GradScaler's
 * rules: the loss is multiplied by `scale` (a runtime input of the graph);
 * a step whose gradients are not finite is skipped (inside the graph) and
 * halves the scale; `growth_interval` finite steps in a row double it.
 */
#ifndef CTIMM_SCALER_H
#define CTIMM_SCALER_H

#include <stddef.h>

typedef struct LossScaler {
    double scale, growth_factor, backoff_factor;
    int growth_interval, growth_tracker;
} LossScaler;

/* GradScaler's defaults: 2^16, x2, x0.5, every 2000 steps. */
LossScaler scaler_default(void);
/* After a step: `finite` is the graph's flag (0 when the step was skipped). */
void scaler_update(LossScaler *s, int finite);
/* Whether the scale has fallen below 2^-24, f16's smallest subnormal: from
 * the default 2^16 that takes at least 40 skipped steps with no run of
 * growth_interval good ones between them, so no scale makes the gradients
 * finite. GradScaler would skip steps forever; a run stops there instead. */
int scaler_exhausted(const LossScaler *s);

/* The state a checkpoint keeps ("scale,growth_tracker", exact decimals),
 * and back: scaler_parse sets those two fields of *s, or returns -1 and
 * leaves *s as it was when str is not such a pair. */
void scaler_format(const LossScaler *s, char *buf, size_t n);
int scaler_parse(LossScaler *s, const char *str);

#endif
