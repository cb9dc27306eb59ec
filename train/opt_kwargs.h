/*
 * train.py's --opt-kwargs KEY=VALUE ... (utils.ParseKwargs: each VALUE a
 * Python literal, else a string), which train.py splats into
 * create_optimizer_v2 after optimizer_kwargs(args), and so into the
 * optimizer class. Each key is a field of OptimSpec for the optimizers
 * whose timm class takes it (one row a key in opt_kwargs.c). Refused by
 * name: a key train.py passes itself (lr, weight_decay, momentum; eps and
 * betas when --opt-eps / --opt-betas are given), as timm stops with "got
 * multiple values"; a key the optimizer's class does not take (timm's
 * TypeError); a value ctimm does not implement (caution=True ...). As
 * create_optimizer_v2 does, eps is dropped for an optimizer without one
 * (sgd, lion ...) and betas for one without betas.
 */
#ifndef CTIMM_TRAIN_OPT_KWARGS_H
#define CTIMM_TRAIN_OPT_KWARGS_H

#include "ir/status.h"
#include "passes/autodiff.h"

/* The most --opt-kwargs words a command line takes. */
enum { CT_MAX_OPT_KWARGS = 16 };

/* The words kv[0..n) applied to *o, the defaults of --opt `opt`
 * (optim_defaults); eps_given, betas_given: --opt-eps, --opt-betas given. */
int opt_kwargs_apply(const char *opt, const char *const *kv, int n, int eps_given, int betas_given, OptimSpec *o,
                     CtErr *err);

#endif
