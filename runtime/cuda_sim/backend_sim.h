/*
 * The cuda-sim backend (`--backend cuda-sim`, ct_backend_cuda_sim in
 * runtime/backend.h): the cuda backend's programs run on the host, their
 * kernels through the SIMT harness (runtime/cuda_sim/simt.h) and their
 * cuBLASLt/cuDNN calls from the same descriptors (calls.h), so that GPU
 * kernels and launch plans are tested without a GPU. Not a fast path: a
 * tool for the tests and for ctimm-run's parity checks.
 */
#ifndef CTIMM_BACKEND_SIM_H
#define CTIMM_BACKEND_SIM_H

#include <stddef.h>

struct CtExec;

/* Bytes the last run moved: inputs in, outputs out, state either way (as
 * cuda_backend_moved counts them on a device). */
void cuda_sim_moved(const struct CtExec *e, size_t *in, size_t *out, size_t *state);

#endif
