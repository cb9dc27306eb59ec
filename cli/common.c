#include "cli/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int cli_int(const char *prog, const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects a whole number from %d to %d, got '%s'\n", prog, opt, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

const char *cli_value(const char *prog, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

const ModelEntry *cli_model(const char *prog, const char *name)
{
    const ModelEntry *m = model_find(name);
    if (m)
        return m;
    const char *close[5];
    int n = model_suggest(name, close, 5);
    fprintf(stderr, "%s: unknown model '%s'; closest:", prog, name);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s %s", i ? "," : "", close[i]);
    fprintf(stderr, " (--list-models shows all)\n");
    return NULL;
}
