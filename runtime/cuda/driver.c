#include "runtime/cuda/driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cuda_error_text(const CudaDriver *d, CUresult r, char *buf, size_t n)
{
    const char *name = NULL, *text = NULL;
    if (d->GetErrorName)
        d->GetErrorName(r, &name);
    if (d->GetErrorString)
        d->GetErrorString(r, &text);
    snprintf(buf, n, "%s (%d): %s", name ? name : "CUDA error", r, text ? text : "no description");
    return buf;
}

int cuda_driver_open(CudaDriver *d, CtErr *err)
{
    memset(d, 0, sizeof *d);
    const char *path = getenv("CTIMM_LIBCUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!d->lib) {
        const char *why = dlerror();
        return ct_fail(err, "no CUDA driver: %s", why ? why : path);
    }
#define X(name, sym, params)                                                                                     \
    *(void **)&d->name = dlsym(d->lib, sym);                                                                     \
    if (!d->name) {                                                                                              \
        cuda_driver_close(d);                                                                                    \
        return ct_fail(err, "the CUDA driver %s lacks %s (too old a driver?)", path, sym);                       \
    }
    CUDA_DRIVER_ENTRIES(X)
#undef X
    char buf[256];
    CUresult r = d->Init(0);
    if (r == CU_ERROR_STUB_LIBRARY) {
        cuda_driver_close(d);
        return ct_fail(err, "%s is the CUDA toolkit's stub, not a driver: this machine has no GPU driver", path);
    }
    if (r != CU_SUCCESS) {
        cuda_error_text(d, r, buf, sizeof buf);
        cuda_driver_close(d);
        return ct_fail(err, "cuInit failed: %s", buf);
    }
    d->DriverGetVersion(&d->version);
    r = d->DeviceGetCount(&d->ndevices);
    if (r != CU_SUCCESS || d->ndevices < 1) {
        if (r != CU_SUCCESS)
            cuda_error_text(d, r, buf, sizeof buf);
        cuda_driver_close(d);
        return r != CU_SUCCESS ? ct_fail(err, "cuDeviceGetCount failed: %s", buf) : ct_fail(err, "no CUDA device");
    }
    return 0;
}

void cuda_driver_close(CudaDriver *d)
{
    if (d->lib)
        dlclose(d->lib);
    memset(d, 0, sizeof *d);
}

int cuda_device_info(const CudaDriver *d, int ordinal, CudaDeviceInfo *info, CtErr *err)
{
    CUdevice dev;
    char buf[256];
    CUresult r = d->DeviceGet(&dev, ordinal);
    if (r == CU_SUCCESS)
        r = d->DeviceGetName(info->name, (int)sizeof info->name, dev);
    if (r == CU_SUCCESS)
        r = d->DeviceGetAttribute(&info->major, CU_ATTR_COMPUTE_MAJOR, dev);
    if (r == CU_SUCCESS)
        r = d->DeviceGetAttribute(&info->minor, CU_ATTR_COMPUTE_MINOR, dev);
    if (r == CU_SUCCESS)
        r = d->DeviceGetAttribute(&info->sms, CU_ATTR_SM_COUNT, dev);
    if (r == CU_SUCCESS)
        r = d->DeviceTotalMem(&info->total_bytes, dev);
    return r == CU_SUCCESS ? 0 : ct_fail(err, "device %d: %s", ordinal, cuda_error_text(d, r, buf, sizeof buf));
}
