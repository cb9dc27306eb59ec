/*
 * The CUDA executor: runs a compiled cuda Program (codegen/program.h: its
 * launch plan and kernel images, codegen/cuda/cuda_program.h) on the
 * device. It compiles nothing and runs no pass. Built only with cuBLASLt
 * and cuDNN (CTIMM_HAVE_CUDA_LIBS); the driver itself is loaded with
 * dlopen.
 *
 * CudaExec is the device: the primary context (shared with cuBLASLt and
 * cuDNN), one stream, the library handles and the store of cuDNN's and
 * cuBLASLt's algorithm choices (runtime/cuda/dnn.h, blaslt.h) and of the
 * ways depthwise steps run (twin_choice.h). CudaLoaded is one program loaded
 * on it: one module per image (cuModuleLoadData), the cuBLASLt and cuDNN
 * calls prepared once from the plan's descriptors, and device memory: one
 * block for the activations (the plan's arena and spill), one for the
 * graph inputs, one for the persistent state, the library kernels' scratch
 * and the libraries' workspace, and pinned host memory the inputs pass
 * through; out of memory says what the plan needs against what the device
 * has free, before anything is allocated (where the depthwise twins'
 * workspace is what does not fit, the twins go instead: their steps run
 * the library's kernels). Last, each depthwise step with a
 * cuDNN twin (launch_plan.h) is given its way (CTIMM_DWCONV): timed both
 * ways on that memory before the first run where the choices are timed.
 *
 * The state is uploaded before the first run and after
 * cuda_loaded_state_changed, downloaded only by cuda_loaded_state_to_host:
 * between them it stays on the device. A run uploads the inputs, enqueues
 * every step on the stream (checked call by call, a failure naming its
 * step and kernel) and downloads the outputs, every copy on that one
 * stream, and waits for it once; it counts what it moved
 * (cuda_loaded_moved). With graphs on, the second run captures the steps
 * as a CUDA graph and every later run replays it: the inputs (learning
 * rate and loss scale among them) sit at fixed device addresses, so the
 * graph never changes. A step that cannot be captured (a library call
 * that is not capture-safe) is said once on stderr and runs eagerly from
 * then on. With sync_each, every step is followed by a synchronisation, so
 * a fault names the step that made it.
 */
#ifndef CTIMM_EXECUTOR_H
#define CTIMM_EXECUTOR_H

#include "codegen/program.h"
#include "runtime/state.h"
#include "runtime/tensor.h"

typedef struct CudaExecOptions {
    int graphs;     /* capture and replay CUDA graphs */
    int allow_tf32; /* f32 GEMMs and convolutions on TF32 tensor cores (timm's benchmark does) */
    int sync_each;  /* synchronise after every step (debugging; no graphs) */
    int profile;    /* time every step (runtime/cuda/step_profile.h; no graphs), reported when freed */
    int outputs_on_device; /* the outputs are not downloaded (left unset): for a caller that reads none, as
                            * ctimm-bench's timed steps, which then time what timm's benchmark.py times */
    int inputs_fixed; /* every run's inputs are the first's: uploaded once (ProgramOptions.inputs_fixed) */
} CudaExecOptions;

typedef struct CudaExec CudaExec;
typedef struct CudaLoaded CudaLoaded;

/* Device 0; fails with the reason (no driver, no device, a library that
 * cannot start) and leaves nothing open. */
int cuda_exec_open(const CudaExecOptions *opt, CudaExec **ex, CtErr *err);
void cuda_exec_close(CudaExec *ex);
/* "NVIDIA H200 (sm_90, 132 SMs, 143 GiB)" */
const char *cuda_exec_device(const CudaExec *ex);
/* The device's compute capability, major * 10 + minor: 90 for sm_90. */
int cuda_exec_cc(const CudaExec *ex);

/* Program p (the cuda target's, for this device's compute capability: the
 * caller checks, runtime/cuda/backend_cuda.h) on the device, its state
 * tensors bound by name in state's block (the caller's; a training state
 * may hold more than p reads). p outlives what this makes. */
int cuda_load(CudaExec *ex, const CtProgram *p, const CtState *state, CudaLoaded **out, CtErr *err);
void cuda_loaded_free(CudaLoaded *ld);

/* One run: inputs in value order; outputs allocated here, owned by the
 * caller; the state (the one the program was loaded over) updated on the
 * device. */
int cuda_loaded_run(CudaLoaded *ld, CtState *state, const CtTensor *inputs, int ninputs, CtTensor *outputs,
                    CtErr *err);
/* The device's state into state. */
int cuda_loaded_state_to_host(CudaLoaded *ld, CtState *state, CtErr *err);
/* The host changed the state: the next run uploads it first. */
void cuda_loaded_state_changed(CudaLoaded *ld);
/* Bytes the last run moved: inputs in, outputs out, state either way. */
void cuda_loaded_moved(const CudaLoaded *ld, size_t *in, size_t *out, size_t *state);
/* The device memory the program holds, all of it allocated at load. */
size_t cuda_loaded_device_bytes(const CudaLoaded *ld);

#endif
