/* What the fake driver (driver.c) shares with the fake libraries
 * (cudnn.c, cublaslt.c): device memory, streams, capture and the clock. */
#ifndef CTIMM_FAKE_INTERNAL_H
#define CTIMM_FAKE_INTERNAL_H

#include <stddef.h>

#include "runtime/cuda/driver.h"
#include "runtime/tensor.h"
#include "tests/fake_gpu/fake_gpu.h"

enum {
    FG_ERROR_INVALID_VALUE = 1,
    FG_ERROR_OUT_OF_MEMORY = 2,
    FG_ERROR_INVALID_PTX = 218,
    FG_ERROR_INVALID_CONTEXT = 201,
    FG_ERROR_INVALID_HANDLE = 400,
    FG_ERROR_NOT_FOUND = 500,
    FG_ERROR_CAPTURE_UNSUPPORTED = 900,
    FG_ERROR_CAPTURE_INVALIDATED = 901,
};

/* A breach: kept (the first one) and said on stderr. */
void fg_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The host memory behind device bytes [p, p + bytes) of one live
 * allocation; NULL, a breach naming `what`, where they are not. */
void *fg_host(CUdeviceptr p, size_t bytes, const char *what);
/* Whether p is in the device's address range (a pointer, not a number). */
int fg_is_device(unsigned long long p);

/* s is a live stream and the calling thread has the context current. */
int fg_stream_ok(CUstream s, const char *what);
/* The calling thread is capturing into a graph (calls that allocate,
 * free or wait are refused, and end the capture's hope). */
int fg_capturing(void);
/* The capture fails at its end; a breach (the executor's fault) is kept
 * as the violation, a refusal the test asked for (fake_gpu_refuse's
 * "capture") is not. */
void fg_invalidate_capture(const char *why, int breach);

/* One operation on stream s: run now (time passes), or recorded into the
 * graph being captured, which then owns it. A copy moves real bytes. A
 * fill is checked, and done only while the fake computes (a fill of the
 * whole activation block, as the twins' timing makes, would commit every
 * page of a benchmark-sized plan). A call runs `call` on its own copy of
 * the arguments (`arg`, arg_bytes, malloc'ed: the op owns it), read when
 * it runs, as a device reads a launch's arguments as captured. */
typedef struct FgOp {
    enum { FG_NOP, FG_COPY, FG_FILL, FG_EVENT, FG_CALL } kind;
    char name[48];
    void *dst;
    const void *src;
    size_t bytes;
    unsigned char value; /* FG_FILL */
    CUevent event;
    void (*call)(const void *arg);
    void *arg;
    size_t arg_bytes;
} FgOp;
void fg_enqueue(CUstream s, const FgOp *op);
FgOp fg_nop(const char *name);

/* A runner is set (fake_gpu_compute): kernels and library calls compute. */
int fg_computing(void);

/* Element i of an array of dt (f32, f16, bf16) read as a double, and
 * stored rounded to nearest even once: the project's own conversions
 * (runtime/tensor.h), compiled into the fake. */
static inline double fg_load(const void *p, CtDType dt, size_t i)
{
    double v;
    elems_to_double((const char *)p + i * ct_dtype_size(dt), dt, 1, &v);
    return v;
}

static inline void fg_store(void *p, CtDType dt, size_t i, double v)
{
    elems_from_double(&v, dt, 1, (char *)p + i * ct_dtype_size(dt));
}

/* Whether the test asked that `what` be refused (fake_gpu_refuse). */
int fg_refused(const char *what);

/* A forward convolution and its output's channel sums and sums of
 * squares (f32), as the graph API's plan (cudnn_graph.c) describes it:
 * run on handle h's stream by the fake cuDNN's convolution (cudnn.c). 0,
 * or -1 where the handle's stream is not usable. */
typedef struct FgConvStats {
    int n, c, h, w, k, r, s, pad_h, pad_w, u, v, dil_h, dil_w, groups;
    int x_nhwc, w_nhwc, y_nhwc;
    CtDType x_type, w_type, y_type;
    CUdeviceptr xp, wp, yp, sump, sqp;
} FgConvStats;
int fg_dnn_conv_stats(void *h, const FgConvStats *c);

/* Counters the libraries keep. */
extern FakeGpuCounts fg_count;

#endif
