/*
 * Backends: ref, cpu and cuda run the same compiled Program
 * (codegen/program.h) behind this table. A backend is a context made once
 * per program (prepare) over the caller's state: it binds every state value
 * there, once, and keeps what a step needs (the arena, the device copies)
 * from run to run. A run moves only its inputs in and outputs out; the
 * state is the backend's between explicit syncs: state_to_host before the
 * host reads it (checkpoint, EMA, logging), state_from_host after the host
 * changed it (a loaded checkpoint, a broadcast). ref and cpu work on the
 * caller's state in place, so both syncs are free there.
 *
 * supports() says whether a node can run, so a caller learns up front, with
 * the node named, what a backend cannot do.
 */
#ifndef CTIMM_BACKEND_H
#define CTIMM_BACKEND_H

#include "codegen/program.h"
#include "runtime/state.h"
#include "runtime/tensor.h"

typedef struct CtExec CtExec;

typedef struct CtBackend {
    const char *name;
    CtTarget target; /* what program_compile makes for it */
    /* Optional (NULL: none): before backend_open compiles, fills the
     * target's fields of o that the caller left 0 (ProgramOptions.cuda_cc,
     * cuda_sms) from the device the backend runs on. Fails, with the
     * reason, where there is no such device: the compile would be for
     * nothing. */
    int (*target_options)(ProgramOptions *o, CtErr *err);
    int (*supports)(const Graph *g, const Node *n);
    /* The context of program p over state (the caller's, which outlives
     * it; a superset of p's state values, bound by name). 0 or -1. */
    int (*prepare)(const CtProgram *p, CtState *state, CtExec **out, CtErr *err);
    /* inputs: one per input value of the program's graph, in value order.
     * outputs: one per graph output, allocated here and owned by the
     * caller. Assign nodes update the state. */
    int (*run)(CtExec *e, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err);
    int (*state_to_host)(CtExec *e, CtErr *err);
    int (*state_from_host)(CtExec *e, CtErr *err);
    void (*free)(CtExec *e);
    /* Optional (NULL: not a host backend): the threads its host kernels
     * run on, OpenMP's pool, which the OpenMP build of OpenBLAS shares. */
    int (*host_threads)(void);
    /* Optional (NULL: none): one line on what prepare chose for this
     * context by measuring (the cpu backend: which convolutions run on
     * oneDNN), for the tools' logs; NULL when there is nothing to say. */
    const char *(*note)(const CtExec *e);
    /* Optional (NULL: a host backend): the bytes of device memory the
     * context allocated (activations, inputs, state, scratch, the
     * libraries' workspace), all when prepared, so also its peak: the
     * kind of bytes PyTorch's torch.cuda.max_memory_allocated counts. */
    size_t (*device_bytes)(const CtExec *e);
} CtBackend;

extern const CtBackend ct_backend_ref;
extern const CtBackend ct_backend_cpu; /* runtime/cpu: f32 graphs, BLAS for GEMM and convolution */
extern const CtBackend ct_backend_cuda; /* runtime/cuda: the GPU (runtime/cuda/backend_cuda.h) */
/* runtime/cuda_sim: the cuda backend's programs on the host, kernels through the SIMT harness (backend_sim.h) */
extern const CtBackend ct_backend_cuda_sim;

/* NULL when no backend has this name. */
const CtBackend *backend_find(const char *name);
/* Fails naming the first node the backend cannot run. */
int backend_check(const CtBackend *be, const Graph *g, CtErr *err);

/* A compiled program with its context: what a caller that runs a graph
 * many times holds (backend_open, then backend_step per step). */
typedef struct CtRunner {
    const CtBackend *be;
    CtProgram *prog;
    CtExec *exec;
} CtRunner;

/* Checks g against be, compiles it (o may be NULL; the target's options
 * the caller left 0 filled in by be->target_options) and prepares it over
 * state: 0, -1 or CT_INTERRUPTED (o->stop ended a compile). Nothing stays
 * open on failure. */
int backend_open(CtRunner *r, const CtBackend *be, const Graph *g, CtState *state, const ProgramOptions *o,
                 CtErr *err);
static inline int backend_step(CtRunner *r, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    return r->be->run(r->exec, inputs, ninputs, outputs, err);
}
void backend_close(CtRunner *r);

/* Once: open (with o, which may be NULL), one step, the state back to the
 * host, close. For tests and tools that run a graph once. */
int backend_run_once(const CtBackend *be, const Graph *g, CtState *state, const CtTensor *inputs, int ninputs,
                     CtTensor *outputs, const ProgramOptions *o, CtErr *err);

#endif
