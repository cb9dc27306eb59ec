/* Contract: the CUDA driver entry points runtime/cuda/driver.h loads, over
 * host memory, checking what fake_gpu.h lists; the shared state of
 * fake_internal.h. */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS and MAP_NORESERVE */
#include <ctype.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fake_gpu/fake_internal.h"

#define DEVICE_BASE (1ull << 44)
#define DEVICE_END (1ull << 45)
#define DEVICE_GIB 80 /* an H100's, unless $FAKE_GPU_MEMORY_GIB says */
#define MAX_DYNAMIC_SHARED (48u << 10) /* without cuFuncSetAttribute, which the executor never calls */

FakeGpuCounts fg_count;
static char violation[1024];

void fg_violation(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fake GPU: %s\n", msg);
    if (!violation[0])
        snprintf(violation, sizeof violation, "%s", msg);
}

const char *fake_gpu_violation(void) { return violation[0] ? violation : NULL; }
void fake_gpu_reset_violation(void) { violation[0] = '\0'; }

/* ---- the clock ---- */

typedef struct Cost {
    char prefix[64];
    double us;
} Cost;
static Cost costs[32];
static int ncosts;
static double now_us;

void fake_gpu_set_cost(const char *prefix, double us)
{
    for (int i = 0; i < ncosts; i++)
        if (!strcmp(costs[i].prefix, prefix)) {
            costs[i].us = us;
            return;
        }
    if (ncosts < (int)(sizeof costs / sizeof costs[0])) {
        snprintf(costs[ncosts].prefix, sizeof costs[ncosts].prefix, "%s", prefix);
        costs[ncosts++].us = us;
    }
}

static double cost(const char *name)
{
    size_t best = 0;
    double us = 1.0;
    for (int i = 0; i < ncosts; i++) {
        size_t n = strlen(costs[i].prefix);
        if (n >= best && !strncmp(name, costs[i].prefix, n))
            best = n, us = costs[i].us;
    }
    return us;
}

static char refused[4][48];

void fake_gpu_refuse(const char *what, int refuse)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(refused[i], what))
            refused[i][0] = '\0';
    for (int i = 0; refuse && i < 4; i++)
        if (!refused[i][0]) {
            snprintf(refused[i], sizeof refused[i], "%s", what);
            return;
        }
}

int fg_refused(const char *what)
{
    for (int i = 0; i < 4; i++)
        if (refused[i][0] && !strcmp(refused[i], what))
            return 1;
    return 0;
}

/* ---- memory ---- */

typedef struct Alloc {
    CUdeviceptr base;
    size_t bytes;
    unsigned char *host;
    unsigned char *map; /* the mapping behind host, map_bytes long, its last page a guard */
    size_t map_bytes;
    int live;
} Alloc;
static Alloc *allocs;
static int nallocs, cap_allocs;
static CUdeviceptr next_base = DEVICE_BASE;

int fg_is_device(unsigned long long p) { return p >= DEVICE_BASE && p < DEVICE_END; }

static Alloc *find_alloc(CUdeviceptr p)
{
    for (int i = nallocs - 1; i >= 0; i--)
        if (p >= allocs[i].base && p < allocs[i].base + (allocs[i].bytes ? allocs[i].bytes : 1))
            return &allocs[i];
    return NULL;
}

/* What the bytes between an allocation's end and its guard page hold: all
 * ones is a NaN in f32, f16 and bf16, so a read of them shows in the
 * values, and a write shows here. */
#define TAIL 0xff

/* An allocation's host bytes, rounded to 16 (the widest access, and the
 * alignment the kernels' vector paths test). */
static size_t host_span(size_t bytes) { return (bytes + 15) / 16 * 16; }

static void tail_check(const char *name)
{
    for (int i = 0; i < nallocs; i++) {
        Alloc *a = &allocs[i];
        size_t span = host_span(a->bytes);
        for (size_t at = a->bytes; a->live && at < span; at++)
            if (a->host[at] != TAIL) {
                fg_violation("%s wrote byte %zu past the end of a %zu-byte allocation (in its 16-byte rounding)",
                             name, at - a->bytes, a->bytes);
                memset(a->host + a->bytes, TAIL, span - a->bytes);
                break;
            }
    }
}

void *fg_host(CUdeviceptr p, size_t bytes, const char *what)
{
    Alloc *a = find_alloc(p);
    if (!a || !a->live) {
        fg_violation("%s: 0x%llx is %s", what, (unsigned long long)p, a ? "in freed memory" : "in no allocation");
        return NULL;
    }
    if (p - a->base + bytes > a->bytes) {
        fg_violation("%s: %zu bytes at 0x%llx run %zu bytes past the end of a %zu-byte allocation", what, bytes,
                     (unsigned long long)p, (size_t)(p - a->base + bytes - a->bytes), a->bytes);
        return NULL;
    }
    return a->host + (p - a->base);
}

/* ---- contexts, streams, capture ---- */

typedef struct Captured {
    FgOp *ops;
    int nops, cap;
} Captured;

struct CUstream_st {
    int capturing, invalid;
    Captured *capture;
};
struct CUctx_st {
    int retained;
};
static struct CUctx_st primary;
static _Thread_local CUcontext current;
static _Thread_local CUstream capturing_stream;

int fg_capturing(void) { return capturing_stream != NULL; }

void fg_invalidate_capture(const char *why, int breach)
{
    if (capturing_stream && !capturing_stream->invalid) {
        capturing_stream->invalid = 1;
        if (breach)
            fg_violation("a capture into a graph %s", why);
    }
}

int fg_stream_ok(CUstream s, const char *what)
{
    if (current != &primary || !primary.retained) {
        fg_violation("%s without the device's context current on the calling thread", what);
        return 0;
    }
    if (!s) {
        fg_violation("%s on the legacy default stream, which no capture sees", what);
        return 0;
    }
    return 1;
}

/* Waiting, allocating or freeing while this thread captures: refused, as
 * the driver refuses it, and the capture is invalidated. */
static CUresult not_in_capture(const char *what)
{
    if (!fg_capturing())
        return CU_SUCCESS;
    char why[128];
    snprintf(why, sizeof why, "met %s", what);
    fg_invalidate_capture(why, 1);
    return FG_ERROR_CAPTURE_UNSUPPORTED;
}

static int ctx_ok(const char *what)
{
    if (current == &primary && primary.retained)
        return 1;
    fg_violation("%s without the device's context current on the calling thread", what);
    return 0;
}

struct CUevent_st {
    int recorded;
    double at_us;
};

static void tail_check(const char *name);

static void run_op(const FgOp *op)
{
    switch (op->kind) {
    case FG_COPY: memmove(op->dst, op->src, op->bytes); break;
    case FG_FILL: memset(op->dst, op->value, op->bytes); break;
    case FG_CALL: op->call(op->arg); break;
    case FG_EVENT: op->event->recorded = 1, op->event->at_us = now_us; return;
    case FG_NOP: break;
    }
    tail_check(op->name);
    now_us += cost(op->name);
}

static void ops_free(FgOp *ops, int n)
{
    for (int i = 0; i < n; i++)
        free(ops[i].arg);
    free(ops);
}

FgOp fg_nop(const char *name)
{
    FgOp op = {.kind = FG_NOP};
    snprintf(op.name, sizeof op.name, "%s", name);
    return op;
}

void fg_enqueue(CUstream s, const FgOp *op)
{
    if (!s->capturing) {
        run_op(op);
        free(op->arg);
        return;
    }
    Captured *g = s->capture;
    if (g->nops == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->ops = realloc(g->ops, sizeof *g->ops * (size_t)g->cap);
        if (!g->ops)
            abort();
    }
    g->ops[g->nops++] = *op;
}

/* ---- the entry points ---- */

CUresult cuInit(unsigned flags) { return flags ? FG_ERROR_INVALID_VALUE : CU_SUCCESS; }
CUresult cuDriverGetVersion(int *v) { return *v = 13000, CU_SUCCESS; }

CUresult cuGetErrorName(CUresult e, const char **s)
{
    static char buf[32];
    snprintf(buf, sizeof buf, "CUDA_ERROR_%d", e);
    *s = buf;
    return CU_SUCCESS;
}

CUresult cuGetErrorString(CUresult e, const char **s)
{
    *s = e == FG_ERROR_CAPTURE_UNSUPPORTED   ? "operation not permitted when stream is capturing"
         : e == FG_ERROR_CAPTURE_INVALIDATED ? "operation failed due to a previous error during capture"
                                             : "refused by the fake GPU (its message is above)";
    return CU_SUCCESS;
}

CUresult cuDeviceGetCount(int *n) { return *n = 1, CU_SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { return ordinal ? FG_ERROR_INVALID_VALUE : (*d = 0, CU_SUCCESS); }

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    snprintf(name, (size_t)len, "ctimm fake GPU");
    return d ? FG_ERROR_INVALID_VALUE : CU_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
    switch (attr) {
    case CU_ATTR_COMPUTE_MAJOR: *v = FAKE_GPU_CC / 10; break;
    case CU_ATTR_COMPUTE_MINOR: *v = FAKE_GPU_CC % 10; break;
    case CU_ATTR_SM_COUNT: *v = 4; break;
    default: return FG_ERROR_INVALID_VALUE;
    }
    return d ? FG_ERROR_INVALID_VALUE : CU_SUCCESS;
}

static size_t memory_set;

void fake_gpu_set_memory(size_t bytes) { memory_set = bytes; }

static size_t device_bytes(void)
{
    const char *s = getenv("FAKE_GPU_MEMORY_GIB");
    long gib = s && *s ? strtol(s, NULL, 10) : DEVICE_GIB;
    return memory_set ? memory_set : (size_t)(gib > 0 ? gib : DEVICE_GIB) << 30;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) { return *bytes = device_bytes(), d ? FG_ERROR_INVALID_VALUE : 0; }

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    primary.retained++;
    fg_count.contexts = primary.retained;
    *c = &primary;
    return d ? FG_ERROR_INVALID_VALUE : CU_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    if (primary.retained <= 0) {
        fg_violation("the primary context released more often than retained");
        return FG_ERROR_INVALID_CONTEXT;
    }
    fg_count.contexts = --primary.retained;
    return d ? FG_ERROR_INVALID_VALUE : CU_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c)
{
    if (c && (c != &primary || !primary.retained)) {
        fg_violation("cuCtxSetCurrent of a context not retained");
        return FG_ERROR_INVALID_CONTEXT;
    }
    current = c;
    return CU_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    if (!ctx_ok("cuMemGetInfo"))
        return FG_ERROR_INVALID_CONTEXT;
    *total = device_bytes();
    *free_bytes = *total - fg_count.device_bytes;
    return CU_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
    CUresult r = not_in_capture("cuMemAlloc");
    if (r || !ctx_ok("cuMemAlloc"))
        return r ? r : FG_ERROR_INVALID_CONTEXT;
    if (!bytes || bytes > device_bytes() - fg_count.device_bytes)
        return bytes ? FG_ERROR_OUT_OF_MEMORY : FG_ERROR_INVALID_VALUE;
    if (nallocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 64;
        allocs = realloc(allocs, sizeof *allocs * (size_t)cap_allocs);
        if (!allocs)
            abort();
    }
    /* reserved, not committed: a benchmark-sized plan's tens of GiB cost
     * only the pages a copy touches. The host bytes end where a page no
     * access may touch begins, but for the rounding that keeps them 16-byte
     * aligned (the widest load any kernel makes, and the alignment the
     * kernels' vector paths test): a kernel or a computed library call that
     * runs past the allocation's end faults there; the rounding's bytes are
     * TAIL, checked after every operation (tail_check). The device address
     * stays 256-byte aligned, as cuMemAlloc's. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE), span = host_span(bytes);
    size_t pages = (span + page - 1) / page * page;
    unsigned char *map = mmap(NULL, pages + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                              -1, 0);
    if (map == MAP_FAILED)
        return FG_ERROR_OUT_OF_MEMORY;
    if (mprotect(map + pages, page, PROT_NONE))
        abort();
    /* a gap of unmapped device addresses after each: one past the end is no other allocation */
    allocs[nallocs++] = (Alloc){next_base, bytes, map + pages - span, map, pages + page, 1};
    memset(map + pages - span + bytes, TAIL, span - bytes);
    *p = next_base;
    next_base += (bytes + (2u << 20) - 1) / (1u << 20) * (1u << 20);
    fg_count.allocations++;
    fg_count.device_bytes += bytes;
    return CU_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
    CUresult r = not_in_capture("cuMemFree");
    if (r || !ctx_ok("cuMemFree"))
        return r ? r : FG_ERROR_INVALID_CONTEXT;
    Alloc *a = find_alloc(p);
    if (!a || !a->live || a->base != p) {
        fg_violation("cuMemFree of 0x%llx, %s", (unsigned long long)p,
                     !a ? "no allocation" : !a->live ? "freed already" : "not an allocation's start");
        return FG_ERROR_INVALID_VALUE;
    }
    munmap(a->map, a->map_bytes);
    a->host = a->map = NULL;
    a->live = 0;
    fg_count.allocations--;
    fg_count.device_bytes -= a->bytes;
    return CU_SUCCESS;
}

CUresult cuMemAllocHost_v2(void **p, size_t bytes)
{
    CUresult r = not_in_capture("cuMemAllocHost");
    if (r || !ctx_ok("cuMemAllocHost"))
        return r ? r : FG_ERROR_INVALID_CONTEXT;
    if (!(*p = malloc(bytes ? bytes : 1)))
        return FG_ERROR_OUT_OF_MEMORY;
    fg_count.host_allocations++;
    return CU_SUCCESS;
}

CUresult cuMemFreeHost(void *p)
{
    CUresult r = not_in_capture("cuMemFreeHost");
    if (r)
        return r;
    free(p);
    fg_count.host_allocations--;
    return CU_SUCCESS;
}

static CUresult copy(CUstream s, const char *what, void *dst, const void *src, size_t bytes)
{
    if (!fg_stream_ok(s, what))
        return FG_ERROR_INVALID_HANDLE;
    if (!dst || !src)
        return FG_ERROR_INVALID_VALUE;
    FgOp op = {.kind = FG_COPY, .dst = dst, .src = src, .bytes = bytes};
    snprintf(op.name, sizeof op.name, "memcpy");
    fg_enqueue(s, &op);
    return CU_SUCCESS;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream s)
{
    return copy(s, "cuMemcpyHtoDAsync", fg_host(dst, bytes, "cuMemcpyHtoDAsync's destination"), src, bytes);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s)
{
    return copy(s, "cuMemcpyDtoDAsync", fg_host(dst, bytes, "cuMemcpyDtoDAsync's destination"),
                fg_host(src, bytes, "cuMemcpyDtoDAsync's source"), bytes);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream s)
{
    return copy(s, "cuMemcpyDtoHAsync", dst, fg_host(src, bytes, "cuMemcpyDtoHAsync's source"), bytes);
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
    void *p = fg_host(dst, n, "cuMemsetD8Async");
    if (!fg_stream_ok(s, "cuMemsetD8Async"))
        return FG_ERROR_INVALID_HANDLE;
    if (!p)
        return FG_ERROR_INVALID_VALUE;
    FgOp op = fg_nop("memset");
    if (fg_computing()) {
        op.kind = FG_FILL;
        op.dst = p;
        op.value = v;
        op.bytes = n;
    }
    fg_enqueue(s, &op);
    return CU_SUCCESS;
}

/* ---- modules: PTX, each entry's parameter sizes read off its text ---- */

typedef struct CUfunc_st {
    char name[64];
    int nparams;
    size_t *size;         /* per parameter, in bytes */
    unsigned max_threads; /* its .maxntid's product (__launch_bounds__), or 0 */
} Func;

struct CUmod_st {
    Func *fn;
    int nfn;
};

static size_t type_size(const char *t)
{
    if (!strncmp(t, ".u64", 4) || !strncmp(t, ".s64", 4) || !strncmp(t, ".b64", 4) || !strncmp(t, ".f64", 4))
        return 8;
    if (!strncmp(t, ".u32", 4) || !strncmp(t, ".s32", 4) || !strncmp(t, ".b32", 4) || !strncmp(t, ".f32", 4))
        return 4;
    if (!strncmp(t, ".u16", 4) || !strncmp(t, ".s16", 4) || !strncmp(t, ".b16", 4) || !strncmp(t, ".f16", 4))
        return 2;
    if (!strncmp(t, ".u8", 3) || !strncmp(t, ".s8", 3) || !strncmp(t, ".b8", 3))
        return 1;
    return 0;
}

/* The parameter list after ".entry NAME(": ".param [.align N] .TYPE NAME[ [COUNT] ]," up to ")"; NULL,
 * or where it could not be read. */
static const char *parse_params(const char *p, Func *f)
{
    while (*p && *p != ')') {
        const char *q = strstr(p, ".param");
        const char *close = strchr(p, ')');
        if (!q || (close && close < q))
            break;
        q += 6;
        while (isspace((unsigned char)*q))
            q++;
        if (!strncmp(q, ".align", 6)) {
            q += 6;
            while (isspace((unsigned char)*q) || isdigit((unsigned char)*q))
                q++;
        }
        size_t sz = type_size(q);
        if (!sz)
            return q;
        const char *end = q;
        while (*end && *end != ',' && *end != ')' && *end != '\n')
            end++;
        const char *br = memchr(q, '[', (size_t)(end - q));
        if (br)
            sz *= (size_t)strtoul(br + 1, NULL, 10);
        if (!(f->size = realloc(f->size, sizeof *f->size * (size_t)(f->nparams + 1))))
            abort();
        f->size[f->nparams++] = sz;
        p = end;
    }
    return NULL;
}

static void module_free(CUmodule m)
{
    for (int i = 0; i < m->nfn; i++)
        free(m->fn[i].size);
    free(m->fn);
    free(m);
}

CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    CUresult r = not_in_capture("cuModuleLoadData");
    if (r || !ctx_ok("cuModuleLoadData"))
        return r ? r : FG_ERROR_INVALID_CONTEXT;
    const char *ptx = image;
    if (memcmp(ptx, "\177ELF", 4) == 0 || !strstr(ptx, ".version")) {
        fg_violation("cuModuleLoadData: the fake GPU takes PTX only (compile for sm_%d)", FAKE_GPU_CC);
        return FG_ERROR_INVALID_PTX;
    }
    CUmodule mod = calloc(1, sizeof *mod);
    if (!mod)
        abort();
    for (const char *p = strstr(ptx, ".entry "); p; p = strstr(p + 1, ".entry ")) {
        mod->fn = realloc(mod->fn, sizeof *mod->fn * (size_t)(mod->nfn + 1));
        if (!mod->fn)
            abort();
        Func *f = &mod->fn[mod->nfn++];
        memset(f, 0, sizeof *f);
        const char *name = p + 7, *paren = strchr(name, '('), *bad = paren ? NULL : name;
        if (!bad && paren - name >= (long)sizeof f->name)
            bad = name;
        if (!bad)
            bad = parse_params(paren + 1, f);
        if (bad) {
            fg_violation("cuModuleLoadData: an entry the fake cannot read at \"%.40s\"", bad);
            module_free(mod);
            return FG_ERROR_INVALID_PTX;
        }
        memcpy(f->name, name, (size_t)(paren - name));
        /* between the parameters and the body: ".maxntid X, Y, Z" where bounded */
        const char *close = strchr(paren, ')'), *body = close ? strchr(close, '{') : NULL;
        const char *bound = close ? strstr(close, ".maxntid") : NULL;
        if (bound && body && bound < body) {
            unsigned d[3] = {1, 1, 1};
            if (sscanf(bound, ".maxntid %u , %u , %u", &d[0], &d[1], &d[2]) < 1) {
                fg_violation("cuModuleLoadData: a bound the fake cannot read at \"%.40s\"", bound);
                module_free(mod);
                return FG_ERROR_INVALID_PTX;
            }
            f->max_threads = d[0] * d[1] * d[2];
        }
    }
    fg_count.modules++;
    *m = mod;
    return CU_SUCCESS;
}

CUresult cuModuleUnload(CUmodule m)
{
    CUresult r = not_in_capture("cuModuleUnload");
    if (r)
        return r;
    if (!m)
        return FG_ERROR_INVALID_HANDLE;
    module_free(m);
    fg_count.modules--;
    return CU_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    if (!m)
        return FG_ERROR_INVALID_HANDLE;
    for (int i = 0; i < m->nfn; i++)
        if (!strcmp(m->fn[i].name, name)) {
            *f = &m->fn[i];
            return CU_SUCCESS;
        }
    return FG_ERROR_NOT_FOUND;
}

/* ---- launches, run through the test's runner while it computes ---- */

static const FakeGpuRunner *runner;

static void on_fault(int sig)
{
    static const char msg[] = "fake GPU: a fault while computing: a kernel or a library call ran past the end of an "
                              "allocation (into its guard page) or outside the device's memory\n";
    ssize_t said = write(2, msg, sizeof msg - 1);
    (void)said; /* a failed write leaves nothing more to say */
    signal(sig, SIG_DFL);
    raise(sig);
}

void fake_gpu_compute(const FakeGpuRunner *r)
{
    struct sigaction old;
    runner = r;
    /* said, where no one else (a sanitizer) reports faults already */
    if (r && sigaction(SIGSEGV, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
        signal(SIGSEGV, on_fault);
}
int fg_computing(void) { return runner != NULL; }

#define PARAM_ALIGN 16

/* A launch as a call's arguments: this header, each parameter's size, then
 * the parameters' bytes, each at a multiple of PARAM_ALIGN. */
typedef struct LaunchArgs {
    char name[64];
    unsigned grid[3], block[3], shared;
    int nparams;
    size_t bytes;
} LaunchArgs;

static size_t param_span(size_t bytes) { return (bytes + PARAM_ALIGN - 1) / PARAM_ALIGN * PARAM_ALIGN; }

static void run_launch(const void *arg)
{
    const LaunchArgs *a = arg;
    const size_t *size = (const size_t *)(a + 1);
    const unsigned char *given = (const unsigned char *)(size + a->nparams);
    unsigned char *bytes = aligned_alloc(PARAM_ALIGN, param_span(a->bytes + 1));
    void **params = malloc(sizeof *params * (size_t)(a->nparams + 1));
    if (!bytes || !params)
        abort();
    memcpy(bytes, given, a->bytes);
    int ok = 1;
    size_t off = 0;
    for (int i = 0; ok && i < a->nparams; off += param_span(size[i]), i++) {
        params[i] = bytes + off;
        for (size_t at = 0; ok && at + 8 <= size[i]; at += 8) {
            unsigned long long v;
            memcpy(&v, bytes + off + at, 8);
            if (!fg_is_device(v))
                continue;
            void *host = fg_host((CUdeviceptr)v, 1, a->name);
            v = (unsigned long long)(uintptr_t)host;
            memcpy(bytes + off + at, &v, 8);
            ok = host != NULL;
        }
    }
    char why[512] = "";
    if (ok && runner && runner->launch(runner->ctx, a->name, a->grid, a->block, a->shared, params, why, sizeof why))
        fg_violation("running %s: %s", a->name, why);
    free(params);
    free(bytes);
}

/* op made the launch of f with params, run when op runs. */
static void launch_op(FgOp *op, const Func *f, const unsigned grid[3], const unsigned block[3], unsigned shared,
                      void **params)
{
    size_t bytes = 0;
    for (int i = 0; i < f->nparams; i++)
        bytes += param_span(f->size[i]);
    size_t head = sizeof(LaunchArgs) + sizeof(size_t) * (size_t)f->nparams;
    LaunchArgs *a = calloc(1, head + bytes + 1);
    if (!a)
        abort();
    snprintf(a->name, sizeof a->name, "%s", f->name);
    memcpy(a->grid, grid, sizeof a->grid);
    memcpy(a->block, block, sizeof a->block);
    a->shared = shared;
    a->nparams = f->nparams;
    a->bytes = bytes;
    size_t *size = (size_t *)(a + 1);
    unsigned char *dst = (unsigned char *)(size + f->nparams);
    for (int i = 0; i < f->nparams; i++) {
        size[i] = f->size[i];
        memcpy(dst, params[i], f->size[i]);
        dst += param_span(f->size[i]);
    }
    op->kind = FG_CALL;
    op->call = run_launch;
    op->arg = a;
    op->arg_bytes = head + bytes + 1;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra)
{
    if (!fg_stream_ok(s, f ? f->name : "a launch"))
        return FG_ERROR_INVALID_HANDLE;
    if (!f || extra || !params || !gx || !gy || !gz || !bx || !by || !bz) {
        fg_violation("launching %s: %s", f ? f->name : "no function",
                     !params ? "no parameters" : extra ? "extra given" : "an empty grid or block");
        return FG_ERROR_INVALID_VALUE;
    }
    if ((unsigned long long)bx * by * bz > 1024 || bz > 64 || gy > 65535 || gz > 65535 || gx > 0x7fffffffu ||
        shared > MAX_DYNAMIC_SHARED) {
        fg_violation("launching %s: a grid of %u x %u x %u blocks of %u x %u x %u threads with %u bytes of dynamic "
                     "shared memory",
                     f->name, gx, gy, gz, bx, by, bz, shared);
        return FG_ERROR_INVALID_VALUE;
    }
    if (f->max_threads && (unsigned long long)bx * by * bz > f->max_threads) {
        fg_violation("launching %s: blocks of %u x %u x %u threads, over the %u its bounds allow", f->name, bx, by, bz,
                     f->max_threads);
        return FG_ERROR_INVALID_VALUE;
    }
    for (int i = 0; i < f->nparams; i++) {
        for (size_t at = 0; at + 8 <= f->size[i]; at += 8) { /* pointers, also inside a struct argument */
            unsigned long long v;
            memcpy(&v, (const char *)params[i] + at, 8);
            char what[128];
            snprintf(what, sizeof what, "launching %s: parameter %d (byte %zu)", f->name, i, at);
            if (fg_is_device(v) && !fg_host(v, 1, what))
                return FG_ERROR_INVALID_VALUE;
        }
    }
    fg_count.launches++;
    FgOp op = fg_nop(f->name);
    if (fg_computing())
        launch_op(&op, f, (unsigned[3]){gx, gy, gz}, (unsigned[3]){bx, by, bz}, shared, params);
    fg_enqueue(s, &op);
    return CU_SUCCESS;
}

CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    if (!ctx_ok("cuStreamCreate"))
        return FG_ERROR_INVALID_CONTEXT;
    if (flags > 1)
        return FG_ERROR_INVALID_VALUE;
    *s = calloc(1, sizeof **s);
    if (!*s)
        abort();
    fg_count.streams++;
    return CU_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream s)
{
    if (!s)
        return FG_ERROR_INVALID_HANDLE;
    if (s->capturing) {
        fg_violation("a stream destroyed while capturing");
        return FG_ERROR_CAPTURE_INVALIDATED;
    }
    free(s);
    fg_count.streams--;
    return CU_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s)
{
    CUresult r = not_in_capture("cuStreamSynchronize");
    if (r)
        return r;
    return fg_stream_ok(s, "cuStreamSynchronize") ? CU_SUCCESS : FG_ERROR_INVALID_HANDLE;
}

CUresult cuStreamBeginCapture_v2(CUstream s, int mode)
{
    if (!fg_stream_ok(s, "cuStreamBeginCapture"))
        return FG_ERROR_INVALID_HANDLE;
    if (s->capturing || fg_capturing() || mode < 0 || mode > 2) {
        fg_violation("cuStreamBeginCapture: %s", mode < 0 || mode > 2 ? "no such mode" : "already capturing");
        return FG_ERROR_INVALID_VALUE;
    }
    s->capturing = 1;
    s->invalid = 0;
    s->capture = calloc(1, sizeof *s->capture);
    if (!s->capture)
        abort();
    capturing_stream = s;
    fg_count.captures++;
    return CU_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    if (!s || !s->capturing || capturing_stream != s) {
        fg_violation("cuStreamEndCapture on a stream not capturing on this thread");
        return FG_ERROR_INVALID_VALUE;
    }
    Captured *graph = s->capture;
    s->capturing = 0;
    s->capture = NULL;
    capturing_stream = NULL;
    if (s->invalid) {
        ops_free(graph->ops, graph->nops);
        free(graph);
        *g = NULL;
        return FG_ERROR_CAPTURE_INVALIDATED;
    }
    fg_count.graphs++;
    *g = (CUgraph)graph;
    return CU_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
    if (!g || flags)
        return FG_ERROR_INVALID_VALUE;
    const Captured *src = (const Captured *)g;
    Captured *copy = calloc(1, sizeof *copy);
    if (!copy || (src->nops && !(copy->ops = malloc(sizeof *copy->ops * (size_t)src->nops))))
        abort();
    if (src->nops)
        memcpy(copy->ops, src->ops, sizeof *copy->ops * (size_t)src->nops);
    for (int i = 0; i < src->nops; i++)
        if (src->ops[i].arg) {
            if (!(copy->ops[i].arg = malloc(src->ops[i].arg_bytes)))
                abort();
            memcpy(copy->ops[i].arg, src->ops[i].arg, src->ops[i].arg_bytes);
        }
    copy->nops = copy->cap = src->nops;
    fg_count.graph_execs++;
    *e = (CUgraphExec)copy;
    return CU_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
    if (!e || !fg_stream_ok(s, "cuGraphLaunch"))
        return FG_ERROR_INVALID_HANDLE;
    const Captured *g = (const Captured *)e;
    if (s->capturing) {
        fg_violation("cuGraphLaunch into a capture");
        return FG_ERROR_CAPTURE_UNSUPPORTED;
    }
    for (int i = 0; i < g->nops; i++)
        run_op(&g->ops[i]); /* the graph keeps its ops */
    fg_count.graph_launches++;
    return CU_SUCCESS;
}

static void captured_free(void *g)
{
    ops_free(((Captured *)g)->ops, ((Captured *)g)->nops);
    free(g);
}

CUresult cuGraphExecDestroy(CUgraphExec e)
{
    if (!e)
        return FG_ERROR_INVALID_HANDLE;
    captured_free(e);
    fg_count.graph_execs--;
    return CU_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph g)
{
    if (!g)
        return FG_ERROR_INVALID_HANDLE;
    captured_free(g);
    fg_count.graphs--;
    return CU_SUCCESS;
}

CUresult cuEventCreate(CUevent *e, unsigned flags)
{
    if (!ctx_ok("cuEventCreate"))
        return FG_ERROR_INVALID_CONTEXT;
    if (flags & ~3u)
        return FG_ERROR_INVALID_VALUE;
    if (!(*e = calloc(1, sizeof **e)))
        abort();
    fg_count.events++;
    return CU_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream s)
{
    if (!e || !fg_stream_ok(s, "cuEventRecord"))
        return FG_ERROR_INVALID_HANDLE;
    FgOp op = {.kind = FG_EVENT, .event = e};
    fg_enqueue(s, &op);
    return CU_SUCCESS;
}

CUresult cuEventSynchronize(CUevent e)
{
    CUresult r = not_in_capture("cuEventSynchronize");
    if (r)
        return r;
    return e ? CU_SUCCESS : FG_ERROR_INVALID_HANDLE;
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    if (!start || !end)
        return FG_ERROR_INVALID_HANDLE;
    if (!start->recorded || !end->recorded) {
        fg_violation("cuEventElapsedTime of an event never recorded");
        return FG_ERROR_INVALID_HANDLE;
    }
    *ms = (float)((end->at_us - start->at_us) / 1000.0);
    return CU_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e)
{
    if (!e)
        return FG_ERROR_INVALID_HANDLE;
    free(e);
    fg_count.events--;
    return CU_SUCCESS;
}

void fake_gpu_counts(FakeGpuCounts *c) { *c = fg_count; }
