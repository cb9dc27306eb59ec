/* ctimm-gpu-probe: one line per primitive the cuda backend uses, PASS or
 * FAIL with the library's own error text, so that the first minutes on a
 * GPU say which layer is broken before a whole model is run on it: the
 * driver, NVRTC (a small kernel and the f16 library kernels' module), async
 * copies (pinned and pageable), each cuBLASLt GEMM dtype x epilogue (on
 * the candidate timed fastest, and that choice stored and read back;
 * with CTIMM_LIB_CHOICE=heuristic on the heuristic's first, untimed) and
 * each cuDNN convolution direction x layout x dtype the plans make (every
 * result against the cuda-sim's reading of the same descriptor, in double),
 * and a CUDA graph capturing a kernel, a GEMM and a convolution, replayed
 * twice to the eager run's bits.
 *
 *   ctimm-gpu-probe [--tf32]     exit 0: all passed; 1: a primitive failed
 *                                (or no usable device: the first line says why)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/driver.h"
#include "runtime/tensor.h"

#if defined(CTIMM_HAVE_CUDA_LIBS) && defined(CTIMM_HAVE_NVRTC)
#include "codegen/cuda/lib_source.h"
#include "codegen/nvrtc.h"
#include "runtime/cuda/blaslt.h"
#include "runtime/cuda/dnn.h"
#include "runtime/cuda_sim/calls.h"

static const char *prog = "ctimm-gpu-probe";

typedef struct Probe {
    CudaDriver drv;
    CudaDeviceInfo info;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    BlasLt lt;
    Dnn dnn;
    KernelCache cache;
    NvrtcCompiler nc;
    CUmodule mod;
    CUfunction affine; /* y = 2x + 1 */
    int have_lt, have_dnn, have_cache, allow_tf32, failed;
    int timed; /* CTIMM_LIB_CHOICE: GEMMs on their timed choice, else on the heuristic's first */
    char device[192];
} Probe;

static void report(Probe *p, const char *name, int rc, const char *what)
{
    printf("%s %-44s %s\n", rc ? "FAIL" : "PASS", name, what);
    fflush(stdout);
    p->failed |= rc != 0;
}

static int cu(Probe *p, CUresult r, CtErr *err, const char *what)
{
    char text[256];
    return r == CU_SUCCESS ? 0 : ct_fail(err, "%s: %s", what, cuda_error_text(&p->drv, r, text, sizeof text));
}

/* Device buffers of one case, freed together. */
enum { MAX_BUFS = 8 };
typedef struct Bufs {
    CUdeviceptr d[MAX_BUFS];
    int n;
} Bufs;

static CUdeviceptr upload(Probe *p, Bufs *b, const void *host, size_t bytes, CtErr *err)
{
    CUdeviceptr d = 0;
    if (cu(p, p->drv.MemAlloc(&d, bytes ? bytes : 1), err, "cuMemAlloc"))
        return 0;
    b->d[b->n++] = d;
    if (host && cu(p, p->drv.MemcpyHtoDAsync(d, host, bytes, p->s), err, "cuMemcpyHtoDAsync")) {
        return 0;
    }
    return d;
}

static void bufs_free(Probe *p, Bufs *b)
{
    for (int i = 0; i < b->n; i++)
        p->drv.MemFree(b->d[i]);
    b->n = 0;
}

static int download(Probe *p, void *host, CUdeviceptr d, size_t bytes, CtErr *err)
{
    return cu(p, p->drv.StreamSynchronize(p->s), err, "running it") ||
           cu(p, p->drv.MemcpyDtoHAsync(host, d, bytes, p->s), err, "cuMemcpyDtoHAsync") ||
           cu(p, p->drv.StreamSynchronize(p->s), err, "the download");
}

/* n random elements of dtype dt in [-1, 1), deterministic. */
static void *random_elems(CtDType dt, int64_t n, unsigned seed)
{
    float *f = malloc(sizeof *f * (size_t)(n + 1));
    void *out = malloc(ct_dtype_size(dt) * (size_t)(n + 1));
    CT_ASSERT(f && out);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
    elems_from_f32(f, dt, n, out);
    free(f);
    return out;
}

/* ||a - b|| / ||b|| of two dtype-dt arrays; fails on a zero or non-finite result. */
static int compare(const void *got, const void *want, CtDType dt, int64_t n, double tol, char *msg, size_t len)
{
    float *a = malloc(sizeof *a * (size_t)(n + 1)), *b = malloc(sizeof *b * (size_t)(n + 1));
    CT_ASSERT(a && b);
    elems_to_f32(got, dt, n, a);
    elems_to_f32(want, dt, n, b);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    free(a);
    free(b);
    double e = den > 0 ? sqrt(num / den) : INFINITY;
    snprintf(msg, len, "rel err %.2e (tol %.0e)", e, tol);
    return e <= tol ? 0 : -1;
}

static double tolerance(CtDType dt, int tf32) { return dt == CT_F32 ? (tf32 ? 5e-3 : 1e-4) : 1e-2; }

static const char *dname(CtDType dt) { return dt == CT_F32 ? "f32" : dt == CT_F16 ? "f16" : "bf16"; }

/* ---- driver, NVRTC, copies ---- */

static int open_device(Probe *p, CtErr *err)
{
    if (cuda_driver_open(&p->drv, err) || cuda_device_info(&p->drv, 0, &p->info, err))
        return -1;
    if (cu(p, p->drv.DeviceGet(&p->dev, 0), err, "cuDeviceGet") ||
        cu(p, p->drv.DevicePrimaryCtxRetain(&p->ctx, p->dev), err, "the primary context") ||
        cu(p, p->drv.CtxSetCurrent(p->ctx), err, "cuCtxSetCurrent") ||
        cu(p, p->drv.StreamCreate(&p->s, 1), err, "cuStreamCreate"))
        return -1;
    snprintf(p->device, sizeof p->device, "sm_%d%d %s", p->info.major, p->info.minor, p->info.name);
    return 0;
}

static const char affine_src[] = "extern \"C\" __global__ void probe_affine(const float *x, float *y, int n)\n"
                                 "{\n"
                                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                 "    if (i < n)\n"
                                 "        y[i] = 2.0f * x[i] + 1.0f;\n"
                                 "}\n";

enum { NA = 100000 };

static int launch_affine(Probe *p, CUdeviceptr x, CUdeviceptr y, CtErr *err)
{
    int n = NA;
    void *params[] = {&x, &y, &n};
    return cu(p, p->drv.LaunchKernel(p->affine, (NA + 255) / 256, 1, 1, 256, 1, 1, 0, p->s, params, NULL), err,
              "cuLaunchKernel");
}

static int probe_nvrtc_kernel(Probe *p, char *msg, size_t len, CtErr *err)
{
    NvrtcImage img;
    int sm = p->info.major * 10 + p->info.minor;
    if (nvrtc_compile(&p->nc, &p->cache, affine_src, sm, &img, err) ||
        cu(p, p->drv.ModuleLoadData(&p->mod, img.data), err, "cuModuleLoadData") ||
        cu(p, p->drv.ModuleGetFunction(&p->affine, p->mod, "probe_affine"), err, "cuModuleGetFunction"))
        return -1;
    float *x = random_elems(CT_F32, NA, 1), *y = malloc(sizeof *y * NA), *want = malloc(sizeof *want * NA);
    CT_ASSERT(y && want);
    for (int i = 0; i < NA; i++)
        want[i] = 2.0f * x[i] + 1.0f;
    Bufs b = {0};
    CUdeviceptr dx = upload(p, &b, x, sizeof *x * NA, err), dy = dx ? upload(p, &b, NULL, sizeof *y * NA, err) : 0;
    int rc = !dx || !dy || launch_affine(p, dx, dy, err) || download(p, y, dy, sizeof *y * NA, err);
    if (!rc && (rc = memcmp(y, want, sizeof *y * NA) != 0))
        ct_fail(err, "the kernel's results differ from the host's");
    snprintf(msg, len, "NVRTC %s, %s %zu bytes", p->nc.version, img.is_ptx ? "PTX" : "cubin", img.size);
    bufs_free(p, &b);
    free(x);
    free(y);
    free(want);
    return rc ? -1 : 0;
}

static int probe_lib_module(Probe *p, char *msg, size_t len, CtErr *err)
{
    CtBuf src = {0};
    NvrtcImage img;
    CUmodule m = NULL;
    CUfunction f;
    lib_source(LIB_F16, &src);
    int rc = nvrtc_compile(&p->nc, &p->cache, src.s, p->info.major * 10 + p->info.minor, &img, err) ||
             cu(p, p->drv.ModuleLoadData(&m, img.data), err, "cuModuleLoadData") ||
             cu(p, p->drv.ModuleGetFunction(&f, m, "ct_copy_f16"), err, "ct_copy_f16");
    if (!rc)
        snprintf(msg, len, "%zu bytes of CUDA C, %s %zu bytes", src.len, img.is_ptx ? "PTX" : "cubin", img.size);
    if (m)
        p->drv.ModuleUnload(m);
    buf_free(&src);
    return rc ? -1 : 0;
}

/* pinned -> device -> device -> pageable, and pageable -> device -> pinned */
static int probe_copies(Probe *p, char *msg, size_t len, CtErr *err)
{
    size_t bytes = (size_t)64 << 20;
    void *pinned = NULL;
    unsigned char *page = malloc(bytes), *back = malloc(bytes);
    CT_ASSERT(page && back);
    Bufs b = {0};
    int rc = cu(p, p->drv.MemAllocHost(&pinned, bytes), err, "cuMemAllocHost");
    if (!rc) {
        for (size_t i = 0; i < bytes; i++)
            ((unsigned char *)pinned)[i] = (unsigned char)(i * 7 + 3);
        CUdeviceptr d1 = upload(p, &b, pinned, bytes, err), d2 = d1 ? upload(p, &b, NULL, bytes, err) : 0;
        rc = !d1 || !d2 || cu(p, p->drv.MemcpyDtoDAsync(d2, d1, bytes, p->s), err, "cuMemcpyDtoDAsync") ||
             download(p, back, d2, bytes, err);
        if (!rc && (rc = memcmp(back, pinned, bytes) != 0))
            ct_fail(err, "pinned -> device -> device -> pageable changed the bytes");
        for (size_t i = 0; !rc && i < bytes; i++)
            page[i] = (unsigned char)(i * 13 + 1);
        if (!rc) {
            rc = cu(p, p->drv.MemcpyHtoDAsync(d1, page, bytes, p->s), err, "cuMemcpyHtoDAsync (pageable)") ||
                 download(p, pinned, d1, bytes, err);
            if (!rc && (rc = memcmp(pinned, page, bytes) != 0))
                ct_fail(err, "pageable -> device -> pinned changed the bytes");
        }
        p->drv.MemFreeHost(pinned);
    }
    snprintf(msg, len, "64 MiB each way, on one non-blocking stream");
    bufs_free(p, &b);
    free(page);
    free(back);
    return rc ? -1 : 0;
}

/* ---- cuBLASLt ---- */

typedef enum { G_PLAIN, G_BIAS, G_BIAS_RELU, G_BIAS_GELU_AUX, G_RESIDUAL, G_BATCHED, G_LINEAR, G_BGRAD } GemmCase;
static const char *const gemm_case_name[] = {"", "+bias", "+bias+relu", "+bias+gelu(aux)", "+residual",
                                             "batched", "linear (A^T)", "weight gradient (B^T)+bias gradient"};

/* Column-major D[m, n] = A[m, k] B[k, n] with the case's epilogue. */
static GemmDesc gemm_case(GemmCase k, CtDType dt)
{
    GemmDesc d = {.m = 96, .n = 80, .k = 64, .batch = 1, .ab_type = dt, .d_type = dt, .bias_type = dt,
                  .a = 0, .b = 1, .epi = {.bias = -1, .residual = -1, .aux = -1, .bgrad = -1, .d = 2}};
    d.lda = d.m, d.ldb = d.k, d.ldc = d.m;
    if (k == G_BIAS || k == G_BIAS_RELU || k == G_BIAS_GELU_AUX)
        d.epi.bias = 3;
    d.epi.act = k == G_BIAS_RELU ? GEMM_ACT_RELU : k == G_BIAS_GELU_AUX ? GEMM_ACT_GELU_TANH : GEMM_ACT_NONE;
    if (k == G_BIAS_GELU_AUX)
        d.epi.aux = 4;
    if (k == G_RESIDUAL)
        d.epi.residual = 5;
    if (k == G_BATCHED)
        d.batch = 3, d.stride_a = d.m * d.k, d.stride_b = d.k * d.n, d.stride_c = d.m * d.n;
    if (k == G_LINEAR)
        d.trans_a = 1, d.lda = d.k;
    if (k == G_BGRAD) /* dW = x^T dy as the launch plan gives it: dy is B, read transposed, summed over k */
        d.trans_b = 1, d.ldb = d.n, d.epi.bgrad = 3;
    return d;
}

/* call's candidates timed on scratch buffers of d's sizes, the fastest
 * first (blaslt_choose, the choice in the probe's store), as the executor
 * does before a program's first run. */
static int choose_gemm(Probe *p, const GemmDesc *d, BlasLtCall *call, CtErr *err)
{
    if (!p->timed) /* CTIMM_LIB_CHOICE=heuristic: the heuristic's order as prepared */
        return 0;
    Bufs b = {0};
    size_t na, nb, nd, nbias = sizeof(float) * (size_t)(d->m > d->n ? d->m : d->n), ws = (size_t)32 << 20;
    blaslt_operand_bytes(d, &na, &nb, &nd);
    GemmScratch sc = {.a = upload(p, &b, NULL, na, err), .b = upload(p, &b, NULL, nb, err),
                      .d = upload(p, &b, NULL, nd, err), .aux = upload(p, &b, NULL, nd, err),
                      .bias = upload(p, &b, NULL, nbias, err), .workspace = upload(p, &b, NULL, ws, err),
                      .workspace_bytes = ws};
    int rc = err->msg[0] ? -1 : blaslt_choose(&p->lt, call, d, &p->drv, p->s, &sc, &p->cache, p->device, err);
    bufs_free(p, &b);
    return rc;
}

/* One GEMM on the device from host operands, with the candidate timed
 * fastest; D (and aux, or the bias gradient) downloaded into dst (aux_out). */
static int run_gemm(Probe *p, const GemmDesc *d, void *const host[5], void *dst, void *aux_out, CUstream s,
                    Bufs *b, GemmPtrs *ptrs, BlasLtCall *call, CtErr *err)
{
    size_t nbg = (size_t)d->n * ct_dtype_size(d->bias_type);
    size_t es = ct_dtype_size(d->ab_type), ed = ct_dtype_size(d->d_type);
    size_t na = (size_t)(d->m * d->k * d->batch), nb = (size_t)(d->k * d->n * d->batch),
           nd = (size_t)(d->m * d->n * d->batch);
    if (blaslt_prepare(&p->lt, d, p->allow_tf32, (size_t)32 << 20, call, err) || choose_gemm(p, d, call, err))
        return -1;
    CUdeviceptr ws = upload(p, b, NULL, call->workspace, err);
    *ptrs = (GemmPtrs){upload(p, b, host[0], na * es, err), upload(p, b, host[1], nb * es, err),
                       upload(p, b, NULL, nd * ed, err),
                       d->epi.residual >= 0 ? upload(p, b, host[3], nd * ed, err) : 0,
                       d->epi.bias >= 0    ? upload(p, b, host[2], (size_t)d->m * ct_dtype_size(d->bias_type), err)
                       : d->epi.bgrad >= 0 ? upload(p, b, NULL, nbg, err)
                                           : 0,
                       d->epi.aux >= 0 ? upload(p, b, NULL, nd * ed, err) : 0};
    if (err->msg[0] || blaslt_run(&p->lt, call, ptrs, ws, s, err) || download(p, dst, ptrs->d, nd * ed, err) ||
        (aux_out && d->epi.aux >= 0 && download(p, aux_out, ptrs->aux, nd * ed, err)) ||
        (aux_out && d->epi.bgrad >= 0 && download(p, aux_out, ptrs->bias, nbg, err)))
        return -1;
    return 0;
}

static int probe_gemm(Probe *p, GemmCase k, CtDType dt, char *msg, size_t len, CtErr *err)
{
    GemmDesc d = gemm_case(k, dt);
    int64_t nd = d.m * d.n * d.batch;
    void *host[5] = {random_elems(dt, d.m * d.k * d.batch, 11), random_elems(dt, d.k * d.n * d.batch, 12),
                     random_elems(dt, d.m, 13), random_elems(dt, nd, 14), NULL};
    size_t bytes = ct_dtype_size(dt) * (size_t)nd;
    void *got = malloc(bytes), *want = malloc(bytes), *aux = malloc(bytes), *aux_want = malloc(bytes);
    CT_ASSERT(got && want && aux && aux_want);
    Bufs b = {0};
    GemmPtrs ptrs;
    BlasLtCall call = {0};
    int side = d.epi.aux >= 0 || d.epi.bgrad >= 0; /* aux, or the bias gradient in its place */
    int rc = run_gemm(p, &d, host, got, side ? aux : NULL, p->s, &b, &ptrs, &call, err);
    if (!rc) {
        sim_gemm(&d, host[0], host[1], want, d.epi.residual >= 0 ? host[3] : NULL,
                 d.epi.bias >= 0 ? host[2] : d.epi.bgrad >= 0 ? aux_want : NULL, d.epi.aux >= 0 ? aux_want : NULL);
        double tol = tolerance(dt, p->allow_tf32);
        rc = compare(got, want, dt, nd, tol, msg, len);
        if (!rc && side && compare(aux, aux_want, dt, d.epi.aux >= 0 ? nd : d.n, tol, msg, len))
            rc = -1, strncat(msg, d.epi.aux >= 0 ? " in aux" : " in the bias gradient", len - strlen(msg) - 1);
        if (rc)
            ct_fail(err, "%s", msg);
    }
    if (call.op)
        blaslt_call_free(&call);
    bufs_free(p, &b);
    for (int i = 0; i < 4; i++)
        free(host[i]);
    free(got);
    free(want);
    free(aux);
    free(aux_want);
    return rc;
}

/* A second choice for the same GEMM reads the first's from the store,
 * times nothing and puts the same algorithm first. */
static int probe_gemm_choice(Probe *p, CtDType dt, char *msg, size_t len, CtErr *err)
{
    GemmDesc d = gemm_case(G_BIAS_GELU_AUX, dt);
    BlasLtCall call[2] = {{0}};
    CacheStats before = cache_stats(&p->cache), mid = before;
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        rc = blaslt_prepare(&p->lt, &d, p->allow_tf32, (size_t)32 << 20, &call[i], err) ||
             choose_gemm(p, &d, &call[i], err);
        if (i == 0)
            mid = cache_stats(&p->cache);
    }
    CacheStats after = cache_stats(&p->cache);
    if (!rc && (after.compiles != mid.compiles || after.mem_hits != mid.mem_hits + 1))
        rc = ct_fail(err, "the second choice was not read from the store (%llu timings, %llu hits more)",
                     (unsigned long long)(after.compiles - mid.compiles),
                     (unsigned long long)(after.mem_hits - mid.mem_hits));
    if (!rc && memcmp(call[0].algo[0], call[1].algo[0], sizeof call[0].algo[0]))
        rc = ct_fail(err, "the stored choice is not the one put first");
    if (!rc)
        snprintf(msg, len, "of %d candidates, %s", call[0].nalgo,
                 mid.compiles > before.compiles ? "timed, then read back" : "read from the store twice");
    for (int i = 0; i < 2; i++)
        if (call[i].op)
            blaslt_call_free(&call[i]);
    return rc ? -1 : 0;
}

/* ---- cuDNN ---- */

typedef enum { C_PLAIN, C_BIAS_RELU, C_BIAS_RESIDUAL, C_DEPTHWISE, C_STATS } ConvCase;
static const char *const conv_case_name[] = {"", " +bias+relu", " +bias+residual", " depthwise",
                                             " +batch norm sums"};

static ConvDesc conv_case(ConvDir dir, ConvCase k, int nhwc, CtDType dt)
{
    ConvDesc c = {.dir = dir, .n = 4, .c = 16, .h = 12, .w = 12, .k = 32, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1,
                  .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1, .x_nhwc = nhwc,
                  .w_nhwc = nhwc, .y_nhwc = nhwc, .x_type = dt, .w_type = dt, .y_type = dt, .bias_type = dt,
                  .x = 0, .wt = 1, .y = 2, .epi = {.bias = -1, .residual = -1, .aux = -1, .bgrad = -1, .d = 2}};
    if (k == C_DEPTHWISE)
        c.k = c.c, c.groups = c.c;
    if (k == C_BIAS_RELU || k == C_BIAS_RESIDUAL)
        c.epi.bias = 3;
    if (k == C_BIAS_RELU)
        c.epi.act = GEMM_ACT_RELU;
    if (k == C_BIAS_RESIDUAL)
        c.epi.residual = 4;
    if (k == C_STATS)
        c.stats = 0;
    else
        c.stats = -1;
    if (dir != CONV_FWD)
        c.epi.d = dir == CONV_BWD_DATA ? c.x : c.wt;
    c.p = (c.h + 2 * c.pad_h - c.r) / c.stride_h + 1;
    c.q = (c.w + 2 * c.pad_w - c.s) / c.stride_w + 1;
    return c;
}

/* One convolution on the device; its output (y, x or w by direction) downloaded into out. */
static int run_conv(Probe *p, const ConvDesc *c, void *const host[5], void *out, Bufs *b, ConvPtrs *ptrs,
                    DnnCall *call, CtErr *err)
{
    size_t e = ct_dtype_size(c->x_type);
    size_t nx = (size_t)(c->n * c->c * c->h * c->w), nw = (size_t)(c->k * c->c / c->groups * c->r * c->s),
           ny = (size_t)(c->n * c->k * c->p * c->q);
    if (dnn_prepare(&p->dnn, c, p->allow_tf32, (size_t)256 << 20, &p->cache, p->device, NULL, call, err))
        return -1;
    CUdeviceptr ws = upload(p, b, NULL, call->algo.workspace, err);
    *ptrs = (ConvPtrs){upload(p, b, host[0], nx * e, err), upload(p, b, host[1], nw * e, err),
                       upload(p, b, host[2], ny * e, err),
                       c->epi.bias >= 0 ? upload(p, b, host[3], (size_t)c->k * ct_dtype_size(c->bias_type), err) : 0,
                       c->epi.residual >= 0 ? upload(p, b, host[4], ny * e, err) : 0,
                       c->stats >= 0 ? upload(p, b, NULL, 2 * sizeof(float) * (size_t)c->k, err) : 0};
    CUdeviceptr o = c->dir == CONV_FWD ? ptrs->y : c->dir == CONV_BWD_DATA ? ptrs->x : ptrs->w;
    size_t no = c->dir == CONV_FWD ? ny : c->dir == CONV_BWD_DATA ? nx : nw;
    if (err->msg[0] || dnn_run(&p->dnn, call, c, ptrs, ws, err) || download(p, out, o, no * e, err))
        return -1;
    if (call->stats_plan && download(p, (char *)out + no * e, ptrs->sums, 2 * sizeof(float) * (size_t)c->k, err))
        return -1;
    return 0;
}

static int probe_conv(Probe *p, ConvDir dir, ConvCase k, int nhwc, CtDType dt, char *msg, size_t len, CtErr *err)
{
    ConvDesc c = conv_case(dir, k, nhwc, dt);
    int64_t nx = c.n * c.c * c.h * c.w, nw = c.k * c.c / c.groups * c.r * c.s, ny = c.n * c.k * c.p * c.q;
    void *host[5] = {random_elems(dt, nx, 21), random_elems(dt, nw, 22), random_elems(dt, ny, 23),
                     random_elems(dt, c.k, 24), random_elems(dt, ny, 25)};
    int64_t no = dir == CONV_FWD ? ny : dir == CONV_BWD_DATA ? nx : nw;
    void *got = malloc(ct_dtype_size(dt) * (size_t)no + 2 * sizeof(float) * (size_t)c.k);
    float *sums = malloc(2 * sizeof(float) * (size_t)c.k);
    CT_ASSERT(got && sums);
    Bufs b = {0};
    ConvPtrs ptrs;
    DnnCall call = {0};
    int rc = run_conv(p, &c, host, got, &b, &ptrs, &call, err);
    if (!rc) {
        /* sim_conv writes the direction's output over its own operand */
        sim_conv(&c, host[0], host[1], host[2], c.epi.bias >= 0 ? host[3] : NULL,
                 c.epi.residual >= 0 ? host[4] : NULL, c.stats >= 0 ? sums : NULL);
        void *want = dir == CONV_FWD ? host[2] : dir == CONV_BWD_DATA ? host[0] : host[1];
        char more[160] = "";
        if ((rc = compare(got, want, dt, no, tolerance(dt, p->allow_tf32), msg, len)))
            ct_fail(err, "%s", msg);
        else if (call.stats_plan && (rc = compare((char *)got + ct_dtype_size(dt) * (size_t)no, sums, CT_F32,
                                                  2 * c.k, tolerance(dt, p->allow_tf32), more, sizeof more)))
            ct_fail(err, "the sums: %s", more);
        else
            snprintf(msg + strlen(msg), len - strlen(msg), ", algo %d%s%s", (int)call.algo.algo,
                     call.fused ? " fused" : "",
                     c.stats < 0        ? ""
                     : call.stats_plan ? "; graph plan, sums within tolerance"
                                       : "; no graph engine (the statistics pass runs)");
    }
    free(sums);
    if (call.conv)
        dnn_call_free(&call);
    bufs_free(p, &b);
    for (int i = 0; i < 5; i++)
        free(host[i]);
    free(got);
    return rc;
}

/* ---- a CUDA graph: a kernel, a GEMM and a convolution captured, replayed twice ---- */

static int probe_graph(Probe *p, char *msg, size_t len, CtErr *err)
{
    GemmDesc gd = gemm_case(G_BIAS_GELU_AUX, CT_F16);
    ConvDesc cd = conv_case(CONV_FWD, C_BIAS_RELU, 1, CT_F16);
    int64_t ngd = gd.m * gd.n, ncy = cd.n * cd.k * cd.p * cd.q;
    void *gh[5] = {random_elems(CT_F16, gd.m * gd.k, 31), random_elems(CT_F16, gd.k * gd.n, 32),
                   random_elems(CT_F16, gd.m, 33), NULL, NULL};
    void *ch[5] = {random_elems(CT_F16, cd.n * cd.c * cd.h * cd.w, 41), random_elems(CT_F16, cd.k * cd.c * 9, 42),
                   random_elems(CT_F16, ncy, 43), random_elems(CT_F16, cd.k, 44), NULL};
    float *x = random_elems(CT_F32, NA, 51), *y[2] = {malloc(sizeof(float) * NA), malloc(sizeof(float) * NA)};
    size_t gb = 2 * (size_t)ngd, cb = 2 * (size_t)ncy;
    void *g_out[2] = {malloc(gb), malloc(gb)}, *c_out[2] = {malloc(cb), malloc(cb)}, *aux = malloc(gb);
    CT_ASSERT(y[0] && y[1] && g_out[0] && g_out[1] && c_out[0] && c_out[1] && aux);
    Bufs gbufs = {0}, cbufs = {0}, kb = {0};
    GemmPtrs gp;
    ConvPtrs cp;
    BlasLtCall gcall = {0};
    DnnCall ccall = {0};
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    /* eager: each once */
    int rc = run_gemm(p, &gd, gh, g_out[0], aux, p->s, &gbufs, &gp, &gcall, err) ||
             run_conv(p, &cd, ch, c_out[0], &cbufs, &cp, &ccall, err);
    CUdeviceptr dx = rc ? 0 : upload(p, &kb, x, sizeof(float) * NA, err);
    CUdeviceptr dy = dx ? upload(p, &kb, NULL, sizeof(float) * NA, err) : 0;
    rc = rc || !dy || launch_affine(p, dx, dy, err) || download(p, y[0], dy, sizeof(float) * NA, err);
    /* the outputs cleared, then the three captured and replayed twice */
    CUdeviceptr gws = gbufs.d[0], cws = cbufs.d[0];
    if (!rc) {
        memset(g_out[1], 0, gb);
        memset(c_out[1], 0, cb);
        memset(y[1], 0, sizeof(float) * NA);
        rc = cu(p, p->drv.MemcpyHtoDAsync(gp.d, g_out[1], gb, p->s), err, "clearing") ||
             cu(p, p->drv.MemcpyHtoDAsync(cp.y, c_out[1], cb, p->s), err, "clearing") ||
             cu(p, p->drv.MemcpyHtoDAsync(dy, y[1], sizeof(float) * NA, p->s), err, "clearing") ||
             cu(p, p->drv.StreamSynchronize(p->s), err, "clearing") ||
             cu(p, p->drv.StreamBeginCapture(p->s, 1), err, "cuStreamBeginCapture");
    }
    if (!rc) {
        int in = launch_affine(p, dx, dy, err) || blaslt_run(&p->lt, &gcall, &gp, gws, p->s, err) ||
                 dnn_run(&p->dnn, &ccall, &cd, &cp, cws, err);
        CUresult r = p->drv.StreamEndCapture(p->s, &graph);
        rc = in || cu(p, r, err, "cuStreamEndCapture") ||
             cu(p, p->drv.GraphInstantiate(&exec, graph, 0), err, "cuGraphInstantiate");
    }
    for (int t = 0; t < 2 && !rc; t++)
        rc = cu(p, p->drv.GraphLaunch(exec, p->s), err, "cuGraphLaunch");
    rc = rc || download(p, y[1], dy, sizeof(float) * NA, err) || download(p, g_out[1], gp.d, gb, err) ||
         download(p, c_out[1], cp.y, cb, err);
    if (!rc && (memcmp(y[0], y[1], sizeof(float) * NA) || memcmp(g_out[0], g_out[1], gb) ||
                memcmp(c_out[0], c_out[1], cb)))
        rc = ct_fail(err, "the replays differ from the eager run (kernel %d, GEMM %d, conv %d)",
                     memcmp(y[0], y[1], sizeof(float) * NA) != 0, memcmp(g_out[0], g_out[1], gb) != 0,
                     memcmp(c_out[0], c_out[1], cb) != 0);
    snprintf(msg, len, "kernel + cuBLASLt f16 GEMM + cuDNN NHWC f16 conv, 2 replays bit-equal to eager");
    if (exec)
        p->drv.GraphExecDestroy(exec);
    if (graph)
        p->drv.GraphDestroy(graph);
    if (gcall.op)
        blaslt_call_free(&gcall);
    if (ccall.conv)
        dnn_call_free(&ccall);
    bufs_free(p, &gbufs);
    bufs_free(p, &cbufs);
    bufs_free(p, &kb);
    for (int i = 0; i < 5; i++)
        free(gh[i]), free(ch[i]);
    free(x);
    for (int i = 0; i < 2; i++)
        free(y[i]), free(g_out[i]), free(c_out[i]);
    free(aux);
    return rc ? -1 : 0;
}

static void run_all(Probe *p)
{
    static const CtDType dts[] = {CT_F32, CT_F16, CT_BF16};
    static const char *const dir_name[] = {"fwd", "bwd-data", "bwd-filter"};
    char name[96], msg[256];
    CtErr err = {{0}};
#define PROBE(label, call)                                                                                        \
    do {                                                                                                       \
        err.msg[0] = msg[0] = 0;                                                                               \
        int rc_ = (call);                                                                                      \
        report(p, label, rc_, rc_ ? err.msg : msg);                                                            \
    } while (0)
    PROBE("NVRTC kernel: compile, load, launch", probe_nvrtc_kernel(p, msg, sizeof msg, &err));
    PROBE("NVRTC f16 library kernels' module", probe_lib_module(p, msg, sizeof msg, &err));
    PROBE("async copies", probe_copies(p, msg, sizeof msg, &err));
    if (blaslt_open(&p->lt, &err) == 0)
        p->have_lt = 1;
    report(p, "cuBLASLt open", !p->have_lt, p->have_lt ? "" : err.msg);
    for (int t = 0; p->have_lt && t < 3; t++)
        for (GemmCase k = G_PLAIN; k <= G_BGRAD; k++) {
            snprintf(name, sizeof name, "cuBLASLt %s GEMM %s", dname(dts[t]), gemm_case_name[k]);
            PROBE(name, probe_gemm(p, k, dts[t], msg, sizeof msg, &err));
        }
    if (p->have_lt && p->timed)
        PROBE("cuBLASLt timed choice, stored and read back", probe_gemm_choice(p, CT_BF16, msg, sizeof msg, &err));
    else if (p->have_lt)
        printf("SKIP %-44s %s\n", "cuBLASLt timed choice, stored and read back", "CTIMM_LIB_CHOICE=heuristic");
    if (dnn_open(&p->dnn, p->s, &err) == 0)
        p->have_dnn = 1;
    report(p, "cuDNN open", !p->have_dnn, p->have_dnn ? "" : err.msg);
    for (int t = 0; p->have_dnn && t < 3; t++)
        for (int nhwc = 0; nhwc < 2; nhwc++) {
            for (ConvDir d = CONV_FWD; d <= CONV_BWD_FILTER; d++) {
                snprintf(name, sizeof name, "cuDNN %s %s %s", dname(dts[t]), nhwc ? "NHWC" : "NCHW", dir_name[d]);
                PROBE(name, probe_conv(p, d, C_PLAIN, nhwc, dts[t], msg, sizeof msg, &err));
            }
            for (ConvCase k = C_BIAS_RELU; k <= C_STATS; k++) {
                if (k == C_STATS && (!nhwc || dts[t] == CT_F32)) /* the launch plan asks it of these only */
                    continue;
                snprintf(name, sizeof name, "cuDNN %s %s fwd%s", dname(dts[t]), nhwc ? "NHWC" : "NCHW",
                         conv_case_name[k]);
                PROBE(name, probe_conv(p, CONV_FWD, k, nhwc, dts[t], msg, sizeof msg, &err));
            }
        }
    if (p->have_lt && p->have_dnn)
        PROBE("CUDA graph: capture + 2 replays", probe_graph(p, msg, sizeof msg, &err));
#undef PROBE
}

int main(int argc, char **argv)
{
    static Probe p;
    CtErr err = {{0}};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tf32"))
            p.allow_tf32 = 1;
        else {
            fprintf(stderr, "%s: unknown argument '%s' (usage: %s [--tf32])\n", prog, argv[i], prog);
            return 2;
        }
    }
    if (lib_choice_timed(&p.timed, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    if (open_device(&p, &err)) {
        report(&p, "driver and device", 1, err.msg);
        cuda_driver_close(&p.drv);
        return 1;
    }
    char what[256];
    snprintf(what, sizeof what, "%s, driver %d.%d, %d SMs, %zu MiB", p.device, p.drv.version / 1000,
             p.drv.version % 1000 / 10, p.info.sms, p.info.total_bytes >> 20);
    report(&p, "driver and device", 0, what);
    if (nvrtc_init(&p.nc, &err) || cache_open(&p.cache, &(CacheOptions){.memory_fallback = 1}, &err))
        report(&p, "NVRTC and the kernel cache", 1, err.msg);
    else {
        p.have_cache = 1;
        run_all(&p);
    }
    if (p.have_dnn)
        dnn_close(&p.dnn);
    if (p.have_lt)
        blaslt_close(&p.lt);
    if (p.have_cache)
        cache_close(&p.cache);
    if (p.mod)
        p.drv.ModuleUnload(p.mod);
    if (p.s)
        p.drv.StreamDestroy(p.s);
    if (p.ctx)
        p.drv.DevicePrimaryCtxRelease(p.dev);
    cuda_driver_close(&p.drv);
    printf("%s: %s\n", prog, p.failed ? "some primitives FAILED" : "every primitive passed");
    return p.failed;
}

#else

int main(void)
{
    printf("FAIL %-44s %s\n", "build",
           "this ctimm was built without the CUDA toolkit's NVRTC, cuBLASLt and cuDNN (see CMake's 'ctimm:' lines)");
    return 1;
}

#endif
