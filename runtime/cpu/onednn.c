/* Contract: runtime/cpu/onednn_lib.h, and onednn.h's onednn_version. Built
 * only with CTIMM_HAVE_DNNL. */
#include <pthread.h>
#include <stdio.h>

#include "runtime/cpu/cpu.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/onednn_lib.h"

static dnnl_engine_t engine;
static dnnl_status_t engine_status;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_create(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

dnnl_engine_t onednn_engine(CtErr *err)
{
    pthread_once(&engine_once, engine_create);
    if (engine_status != dnnl_success) {
        ct_fail(err, "oneDNN: no CPU engine (status %d)", (int)engine_status);
        return NULL;
    }
    return engine;
}

const char *onednn_version(void)
{
    static char v[32];
    const dnnl_version_t *d = dnnl_version();
    snprintf(v, sizeof v, "%d.%d.%d", d->major, d->minor, d->patch);
    return v;
}

dnnl_memory_t onednn_wrap(const dnnl_memory_desc_t *md, void *p)
{
    dnnl_memory_t m;
    CT_ASSERT(dnnl_memory_create(&m, md, engine, p) == dnnl_success);
    return m;
}

void onednn_exec(dnnl_primitive_t p, dnnl_stream_t s, int nargs, const dnnl_exec_arg_t *args)
{
    CT_ASSERT(dnnl_primitive_execute(p, s, nargs, args) == dnnl_success);
}

float *onednn_scratch(const dnnl_memory_desc_t *md, int slot)
{
    return cpu_scratch(slot, (int64_t)(dnnl_memory_desc_get_size(md) / sizeof(float)) + 1);
}

dnnl_status_t onednn_md4(dnnl_memory_desc_t *md, const Graph *g, ValueId v, int any)
{
    const int64_t *s = g->values[v].type.shape.d;
    dnnl_dims_t d = {s[0], s[1], s[2], s[3]};
    return dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32,
                                        any ? dnnl_format_tag_any : cpu_stored_nhwc(g, v) ? dnnl_nhwc : dnnl_nchw);
}
