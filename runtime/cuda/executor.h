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
 * A run uploads the inputs and the state, enqueues every step on the
 * stream (checked call by call, a failure naming its step and kernel), and
 * downloads the outputs and the state. With graphs on, the second run
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
    int resident;   /* the state stays on the device after a program's first upload and the outputs are
                     * not downloaded (left unset): for a caller that reads neither, as ctimm-bench's timed
                     * steps, which then time what timm's benchmark.py times (weights on the GPU) */
} CudaExecOptions;

typedef struct CudaExec CudaExec;
typedef struct CudaProgram CudaProgram;

/* Device 0; fails with the reason (no driver, no device, a library that
 * cannot start) and leaves nothing open. */
int cuda_exec_open(const CudaExecOptions *opt, CudaExec **ex, CtErr *err);
void cuda_exec_close(CudaExec *ex);
/* "NVIDIA H200 (sm_90, 132 SMs, 143 GiB)" */
const char *cuda_exec_device(const CudaExec *ex);

int cuda_program_build(CudaExec *ex, const Graph *g, CudaProgram **pr, CtErr *err);
void cuda_program_free(CudaProgram *pr);

/* One run of g (the graph the program was built from): inputs in value
 * order; outputs allocated here, owned by the caller; state updated in
 * place. */
int cuda_program_run(CudaProgram *pr, const Graph *g, CtState *state, const CtTensor *inputs, int ninputs,
                     CtTensor *outputs, CtErr *err);

#endif
