/* Contract: ct_backend_cuda runs a cuda Program on the GPU through the
 * executor (runtime/cuda/executor.h), one device context and one loaded
 * program per backend context, the state resident on the device between
 * syncs; a program compiled for another compute capability, or a build
 * without the CUDA libraries, is refused saying so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/cuda/driver.h"
#ifdef CTIMM_HAVE_CUDA_LIBS
#include "runtime/cuda/executor.h"
#endif

#define NO_LIBS "this ctimm was built without NVRTC, cuBLASLt and cuDNN: the cuda backend cannot run"

int cuda_program_fits(const CtProgram *p, int cc, const char *device, CtErr *err)
{
    if (p->target != CT_TARGET_CUDA)
        return ct_fail(err, "the program was not compiled for the cuda target");
    if (p->opt.cuda_sim)
        return ct_fail(err, "the program holds CUDA C sources for the SIMT harness (--backend cuda-sim), not images a "
                            "device loads");
    if (p->opt.cuda_cc != cc)
        return ct_fail(err,
                       "the program's kernels were compiled for sm_%d and cannot load on %s: compile it for sm_%d "
                       "(ProgramOptions.cuda_cc %d, or 0 for the device's through backend_open)",
                       p->opt.cuda_cc, device, cc, cc);
    return 0;
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
    CudaLoaded *ld;
    CtState *state;
};

/* Device 0's compute capability and SM count, where o leaves them 0. */
static int cuda_target_options(ProgramOptions *o, CtErr *err)
{
    CudaDriver d;
    CudaDeviceInfo info;
    if (cuda_driver_open(&d, err))
        return -1;
    int rc = cuda_device_info(&d, 0, &info, err);
    cuda_driver_close(&d);
    if (rc)
        return -1;
    if (!o->cuda_cc)
        o->cuda_cc = info.major * 10 + info.minor;
    if (!o->cuda_sms)
        o->cuda_sms = info.sms;
    return 0;
}

static void cuda_free(CtExec *e)
{
    if (e->ld)
        cuda_loaded_free(e->ld);
    if (e->ex)
        cuda_exec_close(e->ex);
    free(e);
}

/* The device context and the program's modules, library calls and
 * memory, made once; the state is uploaded before the first run. */
static int cuda_prepare(const CtProgram *p, CtState *state, CtExec **out, CtErr *err)
{
    /* CTIMM_CUDA_PROFILE: a diagnostic for any tool's run, so not a compile option */
    const char *prof = getenv("CTIMM_CUDA_PROFILE");
    CudaExecOptions o = {.graphs = !p->opt.sync_each, .allow_tf32 = p->opt.allow_tf32,
                         .sync_each = p->opt.sync_each, .outputs_on_device = p->opt.outputs_on_device,
                         .inputs_fixed = p->opt.inputs_fixed,
                         .profile = prof && *prof && strcmp(prof, "0")};
    CtExec *e = calloc(1, sizeof *e);
    CT_ASSERT(e != NULL);
    *e = (CtExec){.state = state};
    if (cuda_exec_open(&o, &e->ex, err) || cuda_program_fits(p, cuda_exec_cc(e->ex), cuda_exec_device(e->ex), err) ||
        cuda_load(e->ex, p, state, &e->ld, err)) {
        cuda_free(e);
        return -1;
    }
    *out = e;
    return 0;
}

static int cuda_run(CtExec *e, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    return cuda_loaded_run(e->ld, e->state, inputs, ninputs, outputs, err);
}

static int cuda_to_host(CtExec *e, CtErr *err) { return cuda_loaded_state_to_host(e->ld, e->state, err); }

static int cuda_from_host(CtExec *e, CtErr *err)
{
    cuda_loaded_state_changed(e->ld);
    return 0;
}

void cuda_backend_moved(const CtExec *e, size_t *in, size_t *out, size_t *state)
{
    cuda_loaded_moved(e->ld, in, out, state);
}

static size_t cuda_device_bytes(const CtExec *e) { return cuda_loaded_device_bytes(e->ld); }
#else
static int cuda_target_options(ProgramOptions *o, CtErr *err) { return ct_fail(err, NO_LIBS); }

static int cuda_prepare(const CtProgram *p, CtState *state, CtExec **out, CtErr *err)
{
    return ct_fail(err, NO_LIBS);
}

static int cuda_run(CtExec *e, const CtTensor *inputs, int ninputs, CtTensor *outputs, CtErr *err)
{
    return ct_fail(err, "the cuda backend cannot run here");
}

static int cuda_to_host(CtExec *e, CtErr *err) { return ct_fail(err, "the cuda backend cannot run here"); }
static int cuda_from_host(CtExec *e, CtErr *err) { return ct_fail(err, "the cuda backend cannot run here"); }
static void cuda_free(CtExec *e) {}

void cuda_backend_moved(const CtExec *e, size_t *in, size_t *out, size_t *state) { *in = *out = *state = 0; }
static size_t cuda_device_bytes(const CtExec *e) { return 0; }
#endif

const CtBackend ct_backend_cuda = {.name = "cuda", .target = CT_TARGET_CUDA, .target_options = cuda_target_options,
                                   .supports = launch_plan_supports,
                                   .prepare = cuda_prepare, .run = cuda_run, .state_to_host = cuda_to_host,
                                   .state_from_host = cuda_from_host, .free = cuda_free,
                                   .device_bytes = cuda_device_bytes};
