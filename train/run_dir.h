/*
 * A training run's output folder, as timm's get_outdir(..., inc=True)
 * picks it: a run never writes over an earlier one's files.
 */
#ifndef CTIMM_TRAIN_RUN_DIR_H
#define CTIMM_TRAIN_RUN_DIR_H

#include <stddef.h>

#include "ir/status.h"

/* The run's folder in got: `want` (made with its parents) when it is new or
 * empty, else the first of want-1, want-2, ... not there yet, so a resumed
 * run gets a new one too. mkdir claims the folder, so two runs started
 * together get two. */
int run_dir_new(const char *want, char *got, size_t n, CtErr *err);

#endif
