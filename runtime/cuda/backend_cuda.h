/*
 * The cuda backend (ct_backend_cuda, runtime/backend.h): the executor
 * behind the backend table; its options (TF32, synchronising each step,
 * outputs left on the device) come with the Program (ProgramOptions).
 */
#ifndef CTIMM_BACKEND_CUDA_H
#define CTIMM_BACKEND_CUDA_H

#include <stddef.h>

/* 1 when --device cuda can run here; else 0 and why (no driver, no device,
 * built without the CUDA libraries) in buf. */
int cuda_backend_usable(char *why, size_t n);

/* Device 0's free memory in bytes (0 where there is none to ask), for a
 * caller that sizes its work before building anything (ctimm-bench). */
size_t cuda_backend_free_bytes(void);

struct CtExec;
/* Bytes the context's last run moved between host and device: its inputs
 * in, its outputs out, the state (uploaded before the first run and after
 * state_from_host, else 0). */
void cuda_backend_moved(const struct CtExec *e, size_t *in, size_t *out, size_t *state);

#endif
