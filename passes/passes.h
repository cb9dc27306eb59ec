/*
 * The graph-to-graph passes and the pipeline that runs them by name
 * (`ctimm-compile --passes LIST`, `--dump-ir-after PASS`). Each pass is one
 * file in passes/ with its contract at the top; each takes a verified graph
 * and leaves a verified graph in `out` (the input is not changed).
 */
#ifndef CTIMM_PASSES_H
#define CTIMM_PASSES_H

#include "ir/ir.h"

int bn_fold(const Graph *g, Graph *out, CtErr *err);
int layout_channels_last(const Graph *g, Graph *out, CtErr *err);
/* On a forward graph, before autodiff (the backward follows its dtypes). */
int amp_cast(const Graph *g, CtDType low, Graph *out, CtErr *err);

typedef struct PassDef {
    const char *name;
    int (*run)(const Graph *g, Graph *out, CtErr *err);
    int eval_only; /* runs on eval graphs only (skipped for training graphs) */
    int opt_in;    /* runs only when asked for (--channels-last, or named in --passes) */
} PassDef;

const PassDef *pass_find(const char *name);
/* The passes in pipeline order: pass_at(0..pass_count()-1). */
int pass_count(void);
const PassDef *pass_at(int i);

#endif
