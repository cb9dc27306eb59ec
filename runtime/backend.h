/*
 * Backends: every backend runs the same graph behind this small table
 * (ref and cpu now; cuda later). supports() says whether a node can run, so a
 * caller learns up front, with the node named, what a backend cannot do.
 */
#ifndef CTIMM_BACKEND_H
#define CTIMM_BACKEND_H

#include <signal.h>

#include "runtime/state.h"
#include "runtime/tensor.h"

typedef struct CtBackend {
    const char *name;
    int (*supports)(const Graph *g, const Node *n);
    /* inputs: one per input value of g, in value order. outputs: one per
     * graph output, allocated here and owned by the caller. Assign nodes
     * update `state` in place. 0, -1 with err, or CT_INTERRUPTED when the
     * stop flag ended a kernel compile (backend_set_stop_flag). */
    int (*run)(const Graph *g, CtState *state, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err);
} CtBackend;

extern const CtBackend ct_backend_ref;
extern const CtBackend ct_backend_cpu; /* runtime/cpu: f32 graphs, BLAS for GEMM and convolution */
extern const CtBackend ct_backend_cuda; /* runtime/cuda: the GPU (runtime/cuda/backend_cuda.h) */

/* The caller's stop flag, raised by its SIGINT/SIGTERM handler: a kernel
 * compile under way in the cpu backend (cc, a child process that would
 * otherwise run on) is ended, its process group killed and its files
 * removed, and that run returns CT_INTERRUPTED. A run that compiles nothing
 * is not affected (the caller stops between steps); the cuda backend's
 * NVRTC compiles in process and is not stopped. Before the first run;
 * process-wide, as the backends' compiled graphs are; NULL: none. */
void backend_set_stop_flag(const volatile sig_atomic_t *stop);

/* NULL when no backend has this name. */
const CtBackend *backend_find(const char *name);
/* Fails naming the first node the backend cannot run. */
int backend_check(const CtBackend *be, const Graph *g, CtErr *err);

#endif
