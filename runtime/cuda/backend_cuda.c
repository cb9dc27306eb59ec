/* Contract: ct_backend_cuda runs a Program on the GPU through the executor
 * (runtime/cuda/executor.h), one device context and one built program per
 * backend context, the state resident on the device between syncs;
 * without the CUDA libraries at build time it says so instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
struct CtExec {
    CudaExec *ex;
    CudaProgram *pr;
    const CtProgram *p;
    CtState *state;
};

static void cuda_free(CtExec *e)
{
    if (e->pr)
        cuda_program_free(e->pr);
    if (e->ex)
        cuda_exec_close(e->ex);
    free(e);
}

/* The device context and the program's modules, launch plan and memory,
 * made once; the state is uploaded before the first run. */
static int cuda_prepare(const CtProgram *p, CtState *state, CtExec **out, CtErr *err)
{
    CudaExecOptions o = {.graphs = !p->opt.sync_each, .allow_tf32 = p->opt.allow_tf32,
                         .sync_each = p->opt.sync_each, .outputs_on_device = p->opt.outputs_on_device};
    CtExec *e = calloc(1, sizeof *e);
    CT_ASSERT(e != NULL);
    *e = (CtExec){.p = p, .state = state};
    if (cuda_exec_open(&o, &e->ex, err) || cuda_program_build(e->ex, &p->g, state, &e->pr, err)) {
        cuda_free(e);
        return -1;
    }
    *out = e;
    return 0;
}

static int cuda_run(CtExec *e, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    return cuda_program_run(e->pr, &e->p->g, e->state, inputs, ninputs, outputs, err);
}

static int cuda_to_host(CtExec *e, CtErr *err) { return cuda_program_state_to_host(e->pr, e->state, err); }

static int cuda_from_host(CtExec *e, CtErr *err)
{
    cuda_program_state_changed(e->pr);
    return 0;
}

void cuda_backend_moved(const CtExec *e, size_t *in, size_t *out, size_t *state)
{
    cuda_program_moved(e->pr, in, out, state);
}
#else
static int cuda_prepare(const CtProgram *p, CtState *state, CtExec **out, CtErr *err)
{
    return ct_fail(err, "this ctimm was built without NVRTC, cuBLASLt and cuDNN: the cuda backend cannot run");
}

static int cuda_run(CtExec *e, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    return ct_fail(err, "the cuda backend cannot run here");
}

static int cuda_to_host(CtExec *e, CtErr *err) { return ct_fail(err, "the cuda backend cannot run here"); }
static int cuda_from_host(CtExec *e, CtErr *err) { return ct_fail(err, "the cuda backend cannot run here"); }
static void cuda_free(CtExec *e) {}

void cuda_backend_moved(const CtExec *e, size_t *in, size_t *out, size_t *state) { *in = *out = *state = 0; }
#endif

const CtBackend ct_backend_cuda = {.name = "cuda", .target = CT_TARGET_CUDA, .supports = cuda_supports,
                                   .prepare = cuda_prepare, .run = cuda_run, .state_to_host = cuda_to_host,
                                   .state_from_host = cuda_from_host, .free = cuda_free};
