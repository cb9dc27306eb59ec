/*
 * The CUDA driver API, loaded at run time: libcuda.so.1 (or $CTIMM_LIBCUDA)
 * is opened with dlopen and every entry point the cuda backend uses is
 * looked up into one table, so a single ctimm binary runs on machines with
 * and without a GPU and is never linked against libcuda. The types are the
 * driver API's own, declared here so that building needs no CUDA headers.
 *
 * cuda_driver_open fails with a message that says what is missing (no
 * driver library, a stub library, a missing entry point, no device, the
 * driver's error string) and leaves nothing open; callers then fall back to
 * the cpu backend (runtime/cuda/backend_cuda.h says whether --device cuda
 * can run).
 */
#ifndef CTIMM_CUDA_DRIVER_H
#define CTIMM_CUDA_DRIVER_H

#include <stddef.h>

#include "ir/status.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum { CU_SUCCESS = 0, CU_ERROR_STUB_LIBRARY = 34, CU_ERROR_NO_DEVICE = 100 };
enum { CU_ATTR_COMPUTE_MAJOR = 75, CU_ATTR_COMPUTE_MINOR = 76, CU_ATTR_SM_COUNT = 16 };

/* X(name, symbol, return, parameters): the table, in one place. */
#define CUDA_DRIVER_ENTRIES(X)                                                                                    \
    X(Init, "cuInit", (unsigned flags))                                                                          \
    X(DriverGetVersion, "cuDriverGetVersion", (int *version))                                                    \
    X(GetErrorName, "cuGetErrorName", (CUresult e, const char **s))                                              \
    X(GetErrorString, "cuGetErrorString", (CUresult e, const char **s))                                          \
    X(DeviceGetCount, "cuDeviceGetCount", (int *n))                                                              \
    X(DeviceGet, "cuDeviceGet", (CUdevice * d, int ordinal))                                                     \
    X(DeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice d))                                       \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", (int *v, int attr, CUdevice d))                                \
    X(DeviceTotalMem, "cuDeviceTotalMem_v2", (size_t * bytes, CUdevice d))                                       \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext * c, CUdevice d))                           \
    X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice d))                                     \
    X(CtxSetCurrent, "cuCtxSetCurrent", (CUcontext c))                                                           \
    X(MemGetInfo, "cuMemGetInfo_v2", (size_t * free_bytes, size_t * total_bytes))                                \
    X(MemAlloc, "cuMemAlloc_v2", (CUdeviceptr * p, size_t bytes))                                                \
    X(MemFree, "cuMemFree_v2", (CUdeviceptr p))                                                                  \
    X(MemAllocHost, "cuMemAllocHost_v2", (void **p, size_t bytes))                                               \
    X(MemFreeHost, "cuMemFreeHost", (void *p))                                                                   \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", (CUdeviceptr dst, const void *src, size_t bytes, CUstream s))     \
    X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s))     \
    X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *dst, CUdeviceptr src, size_t bytes, CUstream s))           \
    X(MemsetD8Async, "cuMemsetD8Async", (CUdeviceptr dst, unsigned char v, size_t n, CUstream s))                \
    X(ModuleLoadData, "cuModuleLoadData", (CUmodule * m, const void *image))                                     \
    X(ModuleUnload, "cuModuleUnload", (CUmodule m))                                                              \
    X(ModuleGetFunction, "cuModuleGetFunction", (CUfunction * f, CUmodule m, const char *name))                  \
    X(LaunchKernel, "cuLaunchKernel",                                                                            \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,              \
       unsigned shared, CUstream s, void **params, void **extra))                                                \
    X(StreamCreate, "cuStreamCreate", (CUstream * s, unsigned flags))                                            \
    X(StreamDestroy, "cuStreamDestroy_v2", (CUstream s))                                                         \
    X(StreamSynchronize, "cuStreamSynchronize", (CUstream s))                                                    \
    X(StreamBeginCapture, "cuStreamBeginCapture_v2", (CUstream s, int mode))                                     \
    X(StreamEndCapture, "cuStreamEndCapture", (CUstream s, CUgraph * g))                                         \
    X(GraphInstantiate, "cuGraphInstantiateWithFlags", (CUgraphExec * e, CUgraph g, unsigned long long flags))   \
    X(GraphLaunch, "cuGraphLaunch", (CUgraphExec e, CUstream s))                                                 \
    X(GraphExecDestroy, "cuGraphExecDestroy", (CUgraphExec e))                                                   \
    X(GraphDestroy, "cuGraphDestroy", (CUgraph g))                                                               \
    X(EventCreate, "cuEventCreate", (CUevent * e, unsigned flags))                                               \
    X(EventRecord, "cuEventRecord", (CUevent e, CUstream s))                                                     \
    X(EventSynchronize, "cuEventSynchronize", (CUevent e))                                                       \
    X(EventElapsedTime, "cuEventElapsedTime", (float *ms, CUevent start, CUevent end))                          \
    X(EventDestroy, "cuEventDestroy_v2", (CUevent e))

typedef struct CudaDriver {
    void *lib;
#define X(name, sym, params) CUresult(*name) params;
    CUDA_DRIVER_ENTRIES(X)
#undef X
    int version;           /* cuDriverGetVersion: 1000 * major + 10 * minor */
    int ndevices;
} CudaDriver;

/* Opens the driver and initialises it; 0, or -1 with the reason. */
int cuda_driver_open(CudaDriver *d, CtErr *err);
void cuda_driver_close(CudaDriver *d);

/* One device: its name, sm_XX, SM count and memory, for messages and codegen targets. */
typedef struct CudaDeviceInfo {
    char name[128];
    int major, minor, sms;
    size_t total_bytes;
} CudaDeviceInfo;

int cuda_device_info(const CudaDriver *d, int ordinal, CudaDeviceInfo *info, CtErr *err);

/* The driver's name and text for a result, for messages. */
const char *cuda_error_text(const CudaDriver *d, CUresult r, char *buf, size_t n);

#endif
