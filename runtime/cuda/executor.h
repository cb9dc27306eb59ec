/*
 * The CUDA executor: runs a graph's launch plan (runtime/cuda/launch_plan.h)
 * on the device. Built only with NVRTC, cuBLASLt and cuDNN
 * (CTIMM_HAVE_CUDA_LIBS); the driver itself is loaded with dlopen.
 *
 * CudaExec is the device: the primary context (shared with cuBLASLt and
 * cuDNN), one stream, the library handles, NVRTC and the kernel cache.
 * CudaProgram is one graph compiled for it: the generated kernels as one
 * module per translation unit (codegen/units.h, compiled in parallel) and
 * the library kernels as one more (cuModuleLoadData of cached cubins), the
 * cuBLASLt and cuDNN calls prepared once, and device memory: one block for
 * the activations (the plan's arena and spill), one for the graph inputs,
 * one for the persistent state, the library kernels' scratch and the
 * libraries' workspace; out of memory says what the plan needs against
 * what the device has free, before anything is allocated.
 *
 * The state is uploaded before the first run and after
 * cuda_program_state_changed, downloaded only by
 * cuda_program_state_to_host: between them it stays on the device. A run
 * uploads the inputs, enqueues every step on the stream (checked call by
 * call, a failure naming its step and kernel) and downloads the outputs;
 * it counts what it moved (cuda_program_moved). With graphs on, the second run
 * captures the steps as a CUDA graph and every later run replays it: the
 * inputs (learning rate and loss scale among them) sit at fixed device
 * addresses, so the graph never changes. With sync_each, every step is
 * followed by a synchronisation, so a fault names the step that made it.
 */
#ifndef CTIMM_EXECUTOR_H
#define CTIMM_EXECUTOR_H

#include "runtime/state.h"
#include "runtime/tensor.h"

typedef struct CudaExecOptions {
    int graphs;     /* capture and replay CUDA graphs */
    int allow_tf32; /* f32 GEMMs and convolutions on TF32 tensor cores (timm's benchmark does) */
    int sync_each;  /* synchronise after every step (debugging; no graphs) */
    int outputs_on_device; /* the outputs are not downloaded (left unset): for a caller that reads none, as
                            * ctimm-bench's timed steps, which then time what timm's benchmark.py times */
} CudaExecOptions;

typedef struct CudaExec CudaExec;
typedef struct CudaProgram CudaProgram;

/* Device 0; fails with the reason (no driver, no device, a library that
 * cannot start) and leaves nothing open. */
int cuda_exec_open(const CudaExecOptions *opt, CudaExec **ex, CtErr *err);
void cuda_exec_close(CudaExec *ex);
/* "NVIDIA H200 (sm_90, 132 SMs, 143 GiB)" */
const char *cuda_exec_device(const CudaExec *ex);

/* g's program on the device, its state tensors bound by name in state's
 * block (the caller's; a training state may hold more than g reads). */
int cuda_program_build(CudaExec *ex, const Graph *g, const CtState *state, CudaProgram **pr, CtErr *err);
void cuda_program_free(CudaProgram *pr);

/* One run of g (the graph the program was built from): inputs in value
 * order; outputs allocated here, owned by the caller; the state (the one
 * the program was built over) updated on the device. */
int cuda_program_run(CudaProgram *pr, const Graph *g, CtState *state, const CtTensor *inputs, int ninputs,
                     CtTensor *outputs, CtErr *err);
/* The device's state into state. */
int cuda_program_state_to_host(CudaProgram *pr, CtState *state, CtErr *err);
/* The host changed the state: the next run uploads it first. */
void cuda_program_state_changed(CudaProgram *pr);
/* Bytes the last run moved: inputs in, outputs out, state either way. */
void cuda_program_moved(const CudaProgram *pr, size_t *in, size_t *out, size_t *state);

#endif
