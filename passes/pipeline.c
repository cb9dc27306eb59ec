#include <string.h>

#include "passes/passes.h"

static const PassDef passes[] = {
    {"bn_fold", bn_fold, 1, 0},
    {"layout", layout_channels_last, 0, 1},
};

const PassDef *pass_find(const char *name)
{
    for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++)
        if (strcmp(passes[i].name, name) == 0)
            return &passes[i];
    return NULL;
}

int pass_count(void) { return (int)(sizeof passes / sizeof passes[0]); }
const PassDef *pass_at(int i) { return &passes[i]; }
