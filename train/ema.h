/*
 * The model EMA of timm's ModelEmaV3, on the host side: the decay of each
 * update (the update itself is in the compiled step, passes/autodiff), the
 * EMA started as a copy of the model, and the eval graph's view of it. The
 * EMA lives in the training state as "ema.<name>" beside each <name>.
 */
#ifndef CTIMM_TRAIN_EMA_H
#define CTIMM_TRAIN_EMA_H

#include "runtime/state.h"

/* ModelEmaV3.get_decay(step) for update number `step` (from 1): 0 at the
 * first (a copy of the model), then `decay`, or with warmup
 * 1 - (1 + s)^(-2/3) up to it (warmup_gamma 1, warmup_power 2/3). */
double ema_decay(double decay, int warmup, long step);

/* ModelEmaV3's deepcopy: every "ema.<name>" state value set to <name>'s. */
void ema_from_model(CtState *s);

/* view (a state made for the eval graph) filled from s for validating the
 * EMA: each value from "ema.<name>", else from <name> (what the EMA does
 * not average); a value whose dtype differs from the source's is left. */
void ema_view(CtState *view, const CtState *s);

#endif
