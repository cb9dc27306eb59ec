/* A graph of one node run on the ref and the cpu backends: the tests of the
 * input ops (ir/ops/image.c) check what the host draws through the pixels
 * the graph makes of them, and that both backends make the same. */
#ifndef CTIMM_TEST_ONE_NODE_H
#define CTIMM_TEST_ONE_NODE_H

#include "check.h"
#include "runtime/backend.h"

/* Node op (attributes iattr[niattr], fattr[nfattr]) over inputs in[nin];
 * its f32 output 0 from the cpu backend into out (numel floats). Fails the
 * test where either backend fails or they differ by more than tol. */
static inline void one_node_f32(CtOp op, int nin, const CtTensor *in, const int64_t *iattr, int niattr,
                                const double *fattr, int nfattr, float *out, int64_t numel, double tol)
{
    Graph g;
    CtErr err = {{0}};
    graph_init(&g);
    Node n = {.op = op, .nin = nin};
    for (int k = 0; k < nin; k++)
        n.in[k] = graph_add_value(&g, in[k].type, CT_ROLE_INPUT, NULL);
    for (int k = 0; k < niattr; k++)
        n.iattr[k] = iattr[k];
    for (int k = 0; k < nfattr; k++)
        n.fattr[k] = fattr[k];
    int at = graph_add_node(&g, &n, "one", &err);
    CHECKF(at >= 0, "%s", err.msg);
    if (at < 0) {
        graph_free(&g);
        return;
    }
    graph_mark_output(&g, g.nodes[at].out[0]);
    CtTensor r, c;
    int ok_ref = backend_run_once(&ct_backend_ref, &g, NULL, in, nin, &r, NULL, &err) == 0;
    CHECKF(ok_ref, "ref: %s", err.msg);
    int ok_cpu = backend_run_once(&ct_backend_cpu, &g, NULL, in, nin, &c, NULL, &err) == 0;
    CHECKF(ok_cpu, "cpu: %s", err.msg);
    if (ok_ref && ok_cpu) {
        double worst = 0;
        for (int64_t i = 0; i < numel; i++) {
            double d = fabs((double)((float *)r.data)[i] - ((float *)c.data)[i]);
            worst = d > worst || d != d ? d : worst;
        }
        CHECKF(worst <= tol, "%s: ref and cpu differ by %g", op_def(op)->name, worst);
        memcpy(out, c.data, sizeof *out * (size_t)numel);
    }
    if (ok_ref)
        tensor_free(&r);
    if (ok_cpu)
        tensor_free(&c);
    graph_free(&g);
}

#endif
