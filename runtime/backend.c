#include "runtime/backend.h"

#include <string.h>


static const CtBackend *const backends[] = {&ct_backend_ref, &ct_backend_cpu, &ct_backend_cuda};

const CtBackend *backend_find(const char *name)
{
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

int backend_check(const CtBackend *be, const Graph *g, CtErr *err)
{
    for (int i = 0; i < g->nnodes; i++)
        if (!be->supports(g, &g->nodes[i]))
            return ct_fail(err, "the %s backend cannot run node %d (%s at '%s')", be->name, i,
                           op_def(g->nodes[i].op)->name, g->nodes[i].scope);
    return 0;
}
