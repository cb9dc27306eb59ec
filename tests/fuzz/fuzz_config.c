/*
 * Fuzz target for ctimm-train's -c/--config loader (cli/train_config.h):
 * the input is the YAML text, read against a table like ctimm-train's
 * (a flag, a list option, an alias) and the real table of train.py's
 * arguments it lacks. Accepted text must give whole --option VALUE words;
 * a refusal must say why. Built with libFuzzer by tools/fuzz.sh, and with
 * tests/fuzz/fuzz_driver.c for ctest's sanitizer build. Any crash, leak,
 * sanitizer report or slow input is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/train_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct option longs[] = {
    {"batch-size", 1, 0, 'b'}, {"mean", 1, 0, 'M'},   {"scale", 1, 0, 'S'},  {"amp", 0, 0, 'a'},
    {"decay-rate", 1, 0, 'r'}, {"dr", 1, 0, 'r'},     {"data-dir", 1, 0, 'D'}, {"model", 1, 0, 'm'},
    {"lr", 1, 0, 'l'},         {"help", 0, 0, 'h'},   {"config", 1, 0, 'c'}, {"model-kwargs", 1, 0, 'k'},
    {0, 0, 0, 0}};
static const char *const lists[] = {"mean", "scale", NULL}, *const maps[] = {"model-kwargs", NULL};

static const struct option *option_named(const char *word)
{
    for (const struct option *o = longs; o->name; o++)
        if (!strncmp(word, "--", 2) && !strcmp(word + 2, o->name))
            return o;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const TrainConfigSpec spec = {longs, lists, train_py_unimplemented, maps};
    CtErr err = {{0}};
    int n = -1;
    char **w = train_config_words((const char *)data, size, &spec, &n, &err);
    if (!w) {
        if (n || !err.msg[0])
            abort();
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const struct option *o = option_named(w[i]);
        if (!o || (o->has_arg && (++i >= n || !w[i])))
            abort(); /* an option word, and its value where it takes one */
    }
    if (w[n])
        abort();
    train_config_free(w);
    return 0;
}
