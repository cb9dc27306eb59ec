#include "ir/ops.h"

#include <string.h>

#include "ir/ops/ops_impl.h"

static const OpDef *const defs[] = {
#define OP(name) &op_##name,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof defs / sizeof defs[0] == CT_NOPS, "every op in ops.def needs an OpDef");

const OpDef *op_def(CtOp op) { return defs[op]; }

int op_from_name(const char *name)
{
    for (int i = 0; i < CT_NOPS; i++)
        if (strcmp(defs[i]->name, name) == 0)
            return i;
    return -1;
}
