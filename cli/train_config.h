/*
 * ctimm-train's -c/--config FILE.yaml: train.py's YAML of argparse dest
 * names (the args.yaml timm writes: yaml.safe_dump of every argument),
 * turned into command-line words that the caller puts before the command
 * line's own, so getopt reads them first and the command line wins.
 *
 * Each key k of an option ctimm-train has becomes --k-with-dashes VALUE
 * (one word --k-with-dashes=VALUE where the value is optional); a list
 * (argparse nargs) one word of its numbers joined by commas; true a
 * bare flag; false, null and an empty list nothing (the default); a
 * mapping of an option of KEY=VALUE words one word each. A key of
 * train.py's that ctimm-train lacks is accepted only at train.py's default
 * (or null, false or empty where that default is one of those), any other
 * value of it is refused by name, and so is an unknown key. Nesting, anchors,
 * documents and size are bounded before anything is built (cli/train_config.c).
 */
#ifndef CTIMM_CLI_TRAIN_CONFIG_H
#define CTIMM_CLI_TRAIN_CONFIG_H

#include <getopt.h>
#include <stddef.h>

#include "ir/status.h"

/* A train.py argument ctimm-train does not implement, or takes and ignores. */
typedef struct TrainPyArg {
    const char *flag; /* its option without dashes (aug-repeats); the key is its dest (aug_repeats) */
    const char *dflt; /* its default as YAML flow text: 0, null, false, '', [128, 256], {} */
    const char *why;  /* why ctimm-train refuses or ignores it, a phrase */
} TrainPyArg;

/* train.py's arguments that ctimm-train lacks, and those it takes with no
 * effect, each ended by {NULL} (cli/train_py_args.c). */
extern const TrainPyArg train_py_unimplemented[];
extern const TrainPyArg train_py_no_effect[];

typedef struct TrainConfigSpec {
    /* The options, ended by {0}. An option whose val an earlier one has is
     * an alias (--dr of --decay-rate) and no key; help and config are none. */
    const struct option *longs;
    const char *const *lists;         /* those of them that take a list of numbers; NULL ends */
    const TrainPyArg *unimplemented;  /* ended by {NULL} */
    /* those that take KEY=VALUE words (--model-kwargs, argparse's
     * ParseKwargs): a mapping of scalars becomes one word per pair; NULL
     * ends, and a NULL list is none */
    const char *const *maps;
} TrainConfigSpec;

/* The words of the YAML text (len bytes, no NUL needed): a malloc'd array of
 * *n malloc'd strings and a NULL, freed with train_config_free; NULL with
 * err set when the text is refused. */
char **train_config_words(const char *text, size_t len, const TrainConfigSpec *spec, int *n, CtErr *err);
/* The same for the file at path. */
char **train_config_read(const char *path, const TrainConfigSpec *spec, int *n, CtErr *err);
void train_config_free(char **words);

#endif
