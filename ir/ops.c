#include "ir/ops.h"

#include <string.h>

#include "ir/collective.h"
#include "ir/ops/ops_impl.h"

static const OpDef *const defs[] = {
#define OP(name) &op_##name,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof defs / sizeof defs[0] == CT_NOPS, "every op in ops.def needs an OpDef");

const OpDef *op_def(CtOp op) { return defs[op]; }

void op_run_ref(const Graph *g, const Node *n, double *const *in, double *const *out, const CtCollective *coll)
{
    const OpDef *d = defs[n->op];
    if (d->ref_ranks)
        d->ref_ranks(g, n, in, out, coll);
    else
        d->ref(g, n, in, out);
}

unsigned op_amp_keep(const Graph *g, const Node *n)
{
    const OpDef *d = defs[n->op];
    return d->amp_keep_of ? d->amp_keep_of(g, n) : d->amp_keep;
}

int op_from_name(const char *name)
{
    for (int i = 0; i < CT_NOPS; i++)
        if (strcmp(defs[i]->name, name) == 0)
            return i;
    return -1;
}
