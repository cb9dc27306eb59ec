/*
 * The cuda backend (ct_backend_cuda, runtime/backend.h): the executor
 * behind the backend table; its options (TF32, synchronising each step,
 * outputs left on the device) come with the Program (ProgramOptions), and
 * so does its target: backend_open compiles for device 0's compute
 * capability and SM count (CtBackend.target_options), and prepare refuses
 * a program compiled for another compute capability (cuda_program_fits).
 */
#ifndef CTIMM_BACKEND_CUDA_H
#define CTIMM_BACKEND_CUDA_H

#include <stddef.h>

#include "codegen/program.h"

/* 1 when --device cuda can run here; else 0 and why (no driver, no device,
 * built without the CUDA libraries) in buf. */
int cuda_backend_usable(char *why, size_t n);

/* Device 0's free memory in bytes (0 where there is none to ask), for a
 * caller that sizes its work before building anything (ctimm-bench). */
size_t cuda_backend_free_bytes(void);

/* Whether a device of compute capability cc (major * 10 + minor), named
 * `device` in the message, can load p: a cuda program whose images are for
 * cc. Its SM count may differ (it only sizes the grids of grid-stride
 * loops). 0, or -1 saying what p was compiled for and what to do. */
int cuda_program_fits(const CtProgram *p, int cc, const char *device, CtErr *err);

struct CtExec;
/* Bytes the context's last run moved between host and device: its inputs
 * in, its outputs out, the state (uploaded before the first run and after
 * state_from_host, else 0). */
void cuda_backend_moved(const struct CtExec *e, size_t *in, size_t *out, size_t *state);

#endif
