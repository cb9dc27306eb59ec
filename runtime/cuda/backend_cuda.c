/* Contract: ct_backend_cuda runs a graph on the GPU through the executor
 * (runtime/cuda/executor.h), compiling each distinct graph once per
 * process; without the CUDA libraries at build time it says so instead. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ir/graph_hash.h"
#include "ir/ops.h"
#include "passes/fuse.h"
#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/lib_launch.h"
#ifdef CTIMM_HAVE_CUDA_LIBS
#include "runtime/cuda/executor.h"
#endif

/* What the launch plan has a kernel or library call for. */
static int cuda_supports(const Graph *g, const Node *n)
{
    switch (n->op) {
    case CT_OP_conv2d: case CT_OP_conv2d_grad_input: case CT_OP_conv2d_grad_weight: case CT_OP_linear:
    case CT_OP_matmul: case CT_OP_assign:
        return 1;
    default:
        return lib_supports(n->op) || fuse_is_elementwise(g, n);
    }
}

int cuda_backend_usable(char *why, size_t n)
{
    CudaDriver d;
    CtErr err;
    if (cuda_driver_open(&d, &err)) {
        snprintf(why, n, "%s", err.msg);
        return 0;
    }
    CudaDeviceInfo info;
    memset(&info, 0, sizeof info);
    int ok = cuda_device_info(&d, 0, &info, &err) == 0;
    if (!ok)
        snprintf(why, n, "%s", err.msg);
#ifndef CTIMM_HAVE_CUDA_LIBS
    else
        snprintf(why, n, "found %s (sm_%d%d), but this ctimm was built without NVRTC, cuBLASLt and cuDNN", info.name,
                 info.major, info.minor);
    ok = 0;
#endif
    cuda_driver_close(&d);
    return ok;
}

size_t cuda_backend_free_bytes(void)
{
    CudaDriver d;
    CtErr err;
    CUdevice dev;
    CUcontext ctx;
    size_t free_bytes = 0, total = 0;
    if (cuda_driver_open(&d, &err))
        return 0;
    if (d.DeviceGet(&dev, 0) == CU_SUCCESS && d.DevicePrimaryCtxRetain(&ctx, dev) == CU_SUCCESS) {
        if (d.CtxSetCurrent(ctx) != CU_SUCCESS || d.MemGetInfo(&free_bytes, &total) != CU_SUCCESS)
            free_bytes = 0;
        d.DevicePrimaryCtxRelease(dev);
    }
    cuda_driver_close(&d);
    return free_bytes;
}

#ifdef CTIMM_HAVE_CUDA_LIBS
typedef struct Memo {
    XXH128_hash_t key;
    CudaProgram *pr;
    struct Memo *next;
} Memo;

/* The process's device and its programs: a run is called once per step
 * with no place to keep them (as the cpu backend's compiled graphs). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static CudaExec *exec_g;
static Memo *memo;
static CudaExecOptions options = {.graphs = 1};

void cuda_backend_configure(int allow_tf32, int graphs, int sync_each, int resident)
{
    pthread_mutex_lock(&mu);
    options = (CudaExecOptions){.allow_tf32 = allow_tf32, .graphs = graphs, .sync_each = sync_each,
                                .resident = resident};
    pthread_mutex_unlock(&mu);
}

static int cuda_run(const Graph *g, CtState *state, const CtTensor *inputs, int ninputs, CtTensor *outputs,
                    CtErr *err)
{
    if (backend_check(&ct_backend_cuda, g, err))
        return -1;
    XXH128_hash_t key = graph_content_hash(g);
    int rc = -1;
    pthread_mutex_lock(&mu);
    if (!exec_g && cuda_exec_open(&options, &exec_g, err))
        goto unlock;
    CudaProgram *pr = NULL;
    for (Memo *m = memo; m && !pr; m = m->next)
        if (XXH128_isEqual(m->key, key))
            pr = m->pr;
    if (!pr) {
        if (cuda_program_build(exec_g, g, &pr, err))
            goto unlock;
        Memo *m = malloc(sizeof *m);
        CT_ASSERT(m != NULL);
        *m = (Memo){key, pr, memo};
        memo = m;
    }
    rc = cuda_program_run(pr, g, state, inputs, ninputs, outputs, err);
unlock:
    pthread_mutex_unlock(&mu);
    return rc;
}
#else
void cuda_backend_configure(int allow_tf32, int graphs, int sync_each, int resident) {}

static int cuda_run(const Graph *g, CtState *state, const CtTensor *inputs, int ninputs, CtTensor *outputs,
                    CtErr *err)
{
    return ct_fail(err, "this ctimm was built without NVRTC, cuBLASLt and cuDNN: the cuda backend cannot run");
}
#endif

const CtBackend ct_backend_cuda = {.name = "cuda", .supports = cuda_supports, .run = cuda_run};
