/*
 * Private to runtime/cpu/onednn_*.c: the process's one oneDNN CPU engine,
 * and the calls every primitive's run makes. Built only with
 * CTIMM_HAVE_DNNL.
 */
#ifndef CTIMM_CPU_ONEDNN_LIB_H
#define CTIMM_CPU_ONEDNN_LIB_H

#include <oneapi/dnnl/dnnl.h>

#include "ir/ir.h"
#include "ir/status.h"

/* The engine, created at the first call; NULL with err where there is none. */
dnnl_engine_t onednn_engine(CtErr *err);
/* A memory object over p, and running a primitive: kernels have no error
 * path, a failure in either is a bug. */
dnnl_memory_t onednn_wrap(const dnnl_memory_desc_t *md, void *p);
void onednn_exec(dnnl_primitive_t p, dnnl_stream_t s, int nargs, const dnnl_exec_arg_t *args);
/* The calling thread's scratch slot as the memory md describes. */
float *onednn_scratch(const dnnl_memory_desc_t *md, int slot);

/* The memory of 4-D value v as ctimm stores it: NCHW, or NHWC where it is
 * channels-last (runtime/cpu/nhwc.c); any: the primitive's choice. */
dnnl_status_t onednn_md4(dnnl_memory_desc_t *md, const Graph *g, ValueId v, int any);

/* A oneDNN call in a create function: on failure, err says which and the
 * function goes to its `fail` label. */
#define DN(call)                                                                                                       \
    do {                                                                                                               \
        dnnl_status_t st_ = (call);                                                                                    \
        if (st_ != dnnl_success) {                                                                                     \
            ct_fail(err, "oneDNN: %s failed (status %d)", #call, (int)st_);                                            \
            goto fail;                                                                                                 \
        }                                                                                                              \
    } while (0)

#endif
