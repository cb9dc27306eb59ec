/*
 * The cuda backend (ct_backend_cuda, runtime/backend.h): the executor
 * behind the backend table, one device and one compiled program per
 * distinct graph for the life of the process.
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

/* Before the first run: f32 GEMMs and convolutions on TF32 tensor cores
 * (timm's benchmark allows it; off by default, as the parity tests need),
 * CUDA graph replay (on by default), a synchronisation after every step so
 * that a fault names its step (debugging; off), and resident state with
 * the outputs left on the device (runtime/cuda/executor.h; ctimm-bench). */
void cuda_backend_configure(int allow_tf32, int graphs, int sync_each, int resident);

#endif
