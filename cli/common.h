/* What the ctimm command-line tools share: number parsing and the unknown-
 * model message. Each prints one line to stderr on failure. */
#ifndef CTIMM_CLI_COMMON_H
#define CTIMM_CLI_COMMON_H

#include "models/registry.h"

/* Parses a whole decimal integer in [lo, hi] for option `opt`. */
int cli_int(const char *prog, const char *opt, const char *s, int lo, int hi, int *out);
/* The option's value, or NULL (and a message) when it is missing. */
const char *cli_value(const char *prog, int argc, char **argv, int *i);
/* Finds a model or prints the closest names and returns NULL. */
const ModelEntry *cli_model(const char *prog, const char *name);

#endif
