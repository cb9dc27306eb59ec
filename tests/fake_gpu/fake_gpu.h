/*
 * A GPU that is not there, for running the cuda executor (runtime/cuda/)
 * on a machine without one: one shared library that is the CUDA driver
 * ($CTIMM_LIBCUDA), cuBLASLt ($CTIMM_LIBCUBLASLT) and, linked into the test
 * before the real library, cuDNN. Device memory is host memory at
 * addresses of its own (from 2^44), so a stray pointer never lands in it,
 * reserved and not committed, so a benchmark-sized plan fits
 * ($FAKE_GPU_MEMORY_GIB, default 80) and costs the pages copies touch;
 * each allocation's host bytes end (rounded to 16 bytes) at a page no access
 * may touch, so a computed call that runs past the end faults, said; the
 * rounding's bytes are all ones (a NaN to a float read of them), and one
 * written is a breach of the operation that wrote it.
 * Kernels and library calls compute nothing, unless the test gives a
 * runner (fake_gpu_compute): then launches run through it and the
 * libraries compute each call from their own descriptors, so the
 * executor's values can be compared with the SIMT harness's (whose
 * kernels the runner runs). Either way, what this checks is everything
 * around them that only a device would otherwise check, each breach a
 * call that fails as the driver's would and a message kept for the test:
 * - every pointer a kernel, a copy or a library call is given lies in a
 *   live allocation (a kernel's 8-byte arguments, their sizes read off the
 *   module's PTX, are pointers when they fall in the device's range), and
 *   a library operand with its whole extent (dimensions, strides, batch);
 * - cuDNN's and cuBLASLt's descriptors agree with each other (a
 *   convolution's output shape, a GEMM's m, n and k), workspaces are as
 *   large as the algorithm asked, epilogue vectors as long as D's side;
 * - calls go to the stream made for them, with the context current;
 *   nothing captured into a graph allocates, frees or waits;
 * - launches fit the device's limits (1024 threads a block, or the fewer
 *   a kernel's bounds allow, its PTX's .maxntid; a grid's y and z below
 *   65536, 48 KiB of dynamic shared memory, which is all a kernel gets
 *   without cuFuncSetAttribute);
 * - at the end nothing is left: fake_gpu_counts says what is open.
 * Time passes only as the test says: each operation costs what
 * fake_gpu_set_cost gives names starting like it (1 us otherwise), and
 * events read that clock, so a test decides which of two timed ways wins.
 */
#ifndef CTIMM_FAKE_GPU_H
#define CTIMM_FAKE_GPU_H

#include <stddef.h>

/* The device it plays: sm_91, which no NVRTC has, so images are PTX
 * (compute_90), whose kernel parameters are plain text. */
#define FAKE_GPU_CC 91

/* Names starting with prefix (kernels' names, "cudnnConvolutionForward",
 * "cublasLtMatmul", "memcpy", "memset") cost us microseconds a call; the
 * longest prefix set wins. */
void fake_gpu_set_cost(const char *prefix, double us);
/* The workspace cuDNN's algorithms ask for a depthwise convolution (groups
 * equal to channels); other convolutions ask for 4 KiB per algorithm number. */
void fake_gpu_set_depthwise_workspace(size_t bytes);

/* What a device's libraries may refuse for a shape, refused:
 * "cudnnConvolutionBiasActivationForward" (CUDNN_STATUS_NOT_SUPPORTED when
 * run), "BGRADB" (cuBLASLt's heuristic has no algorithm for that
 * epilogue), "cublasLtMatmul algo 1" (the first candidate refused when
 * run), "capture" (a cuDNN call inside a capture fails and invalidates it,
 * as a call that is not capture-safe does), "depthwise" (cuDNN has no
 * algorithm for a depthwise convolution), "graph" (no engine for the
 * graph API's convolution with GenStats: its plan does not finalize),
 * "graph run" (that plan builds, but running it is refused); 0 stops
 * refusing. */
void fake_gpu_refuse(const char *what, int refuse);
/* The device's memory (0: $FAKE_GPU_MEMORY_GIB's, or 80 GiB). */
void fake_gpu_set_memory(size_t bytes);

/* What runs a kernel the fake launches: `kernel` its name, params as
 * cuLaunchKernel's, every device pointer in them (an 8-byte word in the
 * device's range, also inside a struct argument) made the host address
 * of its bytes. 0, or -1 with why[] said. */
typedef struct FakeGpuRunner {
    void *ctx;
    int (*launch)(void *ctx, const char *kernel, const unsigned grid[3], const unsigned block[3], unsigned shared,
                  void **params, char *why, size_t nwhy);
} FakeGpuRunner;

/* From now on (NULL: no longer) launches run through r, fills fill, and
 * cuBLASLt's matmuls and cuDNN's convolutions, tensor additions and
 * activations compute their results, in double and rounded once when
 * stored, from their descriptors as the libraries document them (a
 * cuBLASLt operand column-major at its leading dimension and batch stride,
 * op() its transpose where asked; a cuDNN tensor in its format; alpha and
 * beta read). Kept by the caller while set. A runner's failure is a
 * breach. */
void fake_gpu_compute(const FakeGpuRunner *r);

typedef struct FakeGpuCounts {
    long allocations, host_allocations, modules, streams, events, graphs, graph_execs, contexts;
    long dnn_handles, dnn_descriptors, lt_handles, lt_descriptors;
    long launches, dnn_calls, dnn_finds, lt_matmuls, captures, graph_launches; /* so far */
    long dnn_graph_runs;                                       /* so far: cudnnBackendExecute's */
    size_t device_bytes;                                       /* live */
} FakeGpuCounts;

void fake_gpu_counts(FakeGpuCounts *c);
/* The first breach seen, or NULL; fake_gpu_reset_violation forgets it. */
const char *fake_gpu_violation(void);
void fake_gpu_reset_violation(void);

#endif
