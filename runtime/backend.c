#include "runtime/backend.h"

#include <string.h>

static const CtBackend *const backends[] = {&ct_backend_ref, &ct_backend_cpu, &ct_backend_cuda, &ct_backend_cuda_sim};

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

int backend_open(CtRunner *r, const CtBackend *be, const Graph *g, CtState *state, const ProgramOptions *o,
                 CtErr *err)
{
    *r = (CtRunner){.be = be};
    ProgramOptions t = o ? *o : (ProgramOptions){0};
    if (backend_check(be, g, err) || (be->target_options && be->target_options(&t, err)))
        return -1;
    int rc = program_compile(g, be->target, &t, &r->prog, err);
    if (rc)
        return rc;
    if (be->prepare(r->prog, state, &r->exec, err)) {
        program_free(r->prog);
        r->prog = NULL;
        return -1;
    }
    return 0;
}

void backend_close(CtRunner *r)
{
    if (r->exec)
        r->be->free(r->exec);
    program_free(r->prog);
    *r = (CtRunner){0};
}

int backend_run_once(const CtBackend *be, const Graph *g, CtState *state, const CtTensor *inputs, int ninputs,
                     CtTensor *outputs, const ProgramOptions *o, CtErr *err)
{
    CtRunner r;
    int rc = backend_open(&r, be, g, state, o, err);
    if (rc)
        return rc;
    rc = backend_step(&r, inputs, ninputs, outputs, err);
    if (rc == 0 && be->state_to_host(r.exec, err)) {
        for (int k = 0; k < g->noutputs; k++)
            tensor_free(&outputs[k]);
        rc = -1;
    }
    backend_close(&r);
    return rc;
}
