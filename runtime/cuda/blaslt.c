/* Contract: blaslt_run computes D = epilogue(A B + C) for a prepared
 * GemmDesc (and B's sums over k for a bias gradient), all of it one
 * cublasLtMatmul on the given stream. */
#include "runtime/cuda/blaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LT_ENTRIES(X)                                                                                            \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName) X(cublasLtMatmulDescCreate)                    \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)                 \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)         \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) \
    X(cublasLtMatmul) X(cublasLtGetVersion)

/* The entry points, typed by cublasLt.h's declarations. */
typedef struct LtFns {
#define X(name) __typeof__(name) *name;
    LT_ENTRIES(X)
#undef X
} LtFns;

static const LtFns *fns(const BlasLt *b) { return b->fn; }

static int lt_fail(const BlasLt *b, CtErr *err, const char *what, cublasStatus_t s)
{
    return ct_fail(err, "cuBLASLt %s: %s (%d)", what, fns(b)->cublasLtGetStatusName(s), (int)s);
}

/* $CTIMM_LIBCUBLASLT where set (as $CTIMM_LIBCUDA for the driver: another
 * cuBLAS than the build's, or tests/fake_gpu), else the library CMake found
 * (CTIMM_CUBLASLT_PATH), else its file name on the loader's search path.
 * Never unloaded (RTLD_NODELETE): a C++ library's static state
 * (libstdc++'s exception pool, cuBLAS's own allocations) does not come back
 * when it is, and LeakSanitizer then reports it lost. */
static const char *lib_path(void)
{
    const char *env = getenv("CTIMM_LIBCUBLASLT");
    return env && *env ? env : CTIMM_CUBLASLT_PATH;
}

static void *open_lib(CtErr *err)
{
    const char *path = lib_path(), *base = strrchr(path, '/');
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib && base)
        lib = dlopen(base + 1, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib) {
        const char *why = dlerror();
        ct_fail(err, "cuBLASLt: cannot open %s: %s", path, why ? why : "dlopen failed");
    }
    return lib;
}

int blaslt_open(BlasLt *b, CtErr *err)
{
    memset(b, 0, sizeof *b);
    if (!(b->lib = open_lib(err)))
        return -1;
    LtFns *f = calloc(1, sizeof *f);
    CT_ASSERT(f != NULL);
    b->fn = f;
#define X(name)                                                                                                  \
    if (!(*(void **)&f->name = dlsym(b->lib, #name))) {                                                          \
        blaslt_close(b);                                                                                         \
        return ct_fail(err, "cuBLASLt: %s lacks %s (too old a cuBLAS?)", lib_path(), #name);                     \
    }
    LT_ENTRIES(X)
#undef X
    cublasLtHandle_t h = NULL;
    cublasStatus_t s = f->cublasLtCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        lt_fail(b, err, "could not create a handle (is there a GPU and its driver?)", s);
        blaslt_close(b);
        return -1;
    }
    b->handle = h;
    return 0;
}

void blaslt_close(BlasLt *b)
{
    if (b->handle)
        fns(b)->cublasLtDestroy((cublasLtHandle_t)b->handle);
    free(b->fn);
    if (b->lib)
        dlclose(b->lib);
    memset(b, 0, sizeof *b);
}

static cudaDataType_t data_type(CtDType t)
{
    switch (t) {
    case CT_F16: return CUDA_R_16F;
    case CT_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

static cublasLtEpilogue_t epilogue(const EpiDesc *e)
{
    int bias = e->bias >= 0;
    if (e->bgrad >= 0)
        return CUBLASLT_EPILOGUE_BGRADB;
    switch (e->act) {
    case GEMM_ACT_RELU: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case GEMM_ACT_GELU_TANH:
        if (e->aux >= 0)
            return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* The alignment every operand pointer has (A, B, C, D, and the bias and
 * aux pointers too): the executor's addresses are block bases (cuMemAlloc:
 * 256 bytes) plus the plan's arena and input offsets (multiples of
 * PLAN_ALIGN, 256) or a state tensor's offset in its CtState, which
 * runtime/state.c rounds to 64 bytes only; a value aliased into the state
 * has its state tensor's address, and no operand starts inside a value. So
 * 64, not cuBLASLt's default preference of 256, which would admit kernels
 * that assume more than a state operand has. */
#define OPERAND_ALIGN 64u

/* A column-major rows x cols layout with leading dimension ld, batched. */
static cublasStatus_t layout(const LtFns *f, cublasLtMatrixLayout_t *l, CtDType t, int64_t rows, int64_t cols,
                             int64_t ld, int64_t batch, int64_t stride)
{
    cublasStatus_t s = f->cublasLtMatrixLayoutCreate(l, data_type(t), (uint64_t)rows, (uint64_t)cols, ld);
    if (s != CUBLAS_STATUS_SUCCESS || batch == 1)
        return s;
    int count = (int)batch;
    s = f->cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = f->cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                sizeof stride);
    return s;
}

/* The heuristic's candidates for c's descriptors, best first, that fit in
 * max_workspace and in the operands' alignment: into c (none found is not
 * an error here). 0, or -1 with cuBLASLt's status in *s. */
static int choose_algos(const BlasLt *b, BlasLtCall *c, size_t max_workspace, cublasStatus_t *s)
{
    const LtFns *f = fns(b);
    cublasLtMatmulPreference_t pref;
    if ((*s = f->cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS)
        return -1;
    uint64_t ws = max_workspace;
    uint32_t align = OPERAND_ALIGN;
    const cublasLtMatmulPreferenceAttributes_t aligned[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    *s = f->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    for (int i = 0; i < 4 && *s == CUBLAS_STATUS_SUCCESS; i++)
        *s = f->cublasLtMatmulPreferenceSetAttribute(pref, aligned[i], &align, sizeof align);
    cublasLtMatmulHeuristicResult_t res[BLASLT_ALGOS];
    int found = 0;
    if (*s == CUBLAS_STATUS_SUCCESS)
        *s = f->cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)b->handle, c->op, c->layout[0], c->layout[1],
                                            c->layout[2], c->layout[2], pref, BLASLT_ALGOS, res, &found);
    f->cublasLtMatmulPreferenceDestroy(pref);
    if (*s != CUBLAS_STATUS_SUCCESS)
        return -1;
    _Static_assert(sizeof c->algo[0] == sizeof res[0].algo, "cublasLtMatmulAlgo_t is 64 bytes");
    for (int i = 0; i < found; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > max_workspace)
            continue;
        memcpy(c->algo[c->nalgo], &res[i].algo, sizeof c->algo[0]);
        c->algo_workspace[c->nalgo++] = res[i].workspaceSize;
        if (res[i].workspaceSize > c->workspace)
            c->workspace = res[i].workspaceSize;
    }
    return 0;
}

int blaslt_prepare(const BlasLt *b, const GemmDesc *d, int allow_tf32, size_t max_workspace, BlasLtCall *c,
                   CtErr *err)
{
    const LtFns *f = fns(b);
    memset(c, 0, sizeof *c);
    c->lt = b;
    cublasComputeType_t ct = d->ab_type == CT_F32 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t op;
    cublasStatus_t s = f->cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS)
        return lt_fail(b, err, "matmul descriptor", s);
    c->op = op;
    cublasOperation_t ta = d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = epilogue(&d->epi);
    s = f->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = f->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = f->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (s == CUBLAS_STATUS_SUCCESS && d->bias_type != d->d_type) {
        cudaDataType_t bt = data_type(d->bias_type);
        s = f->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    }
    if (s == CUBLAS_STATUS_SUCCESS && d->epi.aux >= 0) {
        int64_t ld = d->m; /* the aux matrix is D-shaped */
        s = f->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
    }
    /* batched, each item's aux apart, as D's: the default stride 0 lands them all on the first's */
    if (s == CUBLAS_STATUS_SUCCESS && d->epi.aux >= 0 && d->batch > 1)
        s = f->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &d->stride_c,
                                              sizeof d->stride_c);
    /* the heuristic reads the epilogue pointers' alignment off their values
     * (cublasLt.h): stand-ins aligned as the real ones, which blaslt_run sets */
    void *stand_in = (void *)(uintptr_t)OPERAND_ALIGN;
    if (s == CUBLAS_STATUS_SUCCESS && (d->epi.bias >= 0 || d->epi.bgrad >= 0))
        s = f->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &stand_in, sizeof stand_in);
    if (s == CUBLAS_STATUS_SUCCESS && d->epi.aux >= 0)
        s = f->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &stand_in,
                                              sizeof stand_in);
    if (s != CUBLAS_STATUS_SUCCESS)
        goto fail_desc;
    /* A is m x k (k x m stored when transposed), B k x n, C = D m x n */
    s = layout(f, (cublasLtMatrixLayout_t *)&c->layout[0], d->ab_type, d->trans_a ? d->k : d->m,
               d->trans_a ? d->m : d->k, d->lda, d->batch, d->stride_a);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout(f, (cublasLtMatrixLayout_t *)&c->layout[1], d->ab_type, d->trans_b ? d->n : d->k,
                   d->trans_b ? d->k : d->n, d->ldb, d->batch, d->stride_b);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout(f, (cublasLtMatrixLayout_t *)&c->layout[2], d->d_type, d->m, d->n, d->ldc, d->batch, d->stride_c);
    if (s != CUBLAS_STATUS_SUCCESS)
        goto fail_desc;
    c->has_c = d->epi.residual >= 0;
    c->tf32 = allow_tf32;
    c->max_workspace = max_workspace;
    if (choose_algos(b, c, max_workspace, &s))
        goto fail_desc;
    if (c->nalgo < 1) {
        blaslt_call_free(c);
        return ct_fail(err, "cuBLASLt has no algorithm for a %lldx%lldx%lld GEMM (batch %lld) with this epilogue",
                       (long long)d->m, (long long)d->n, (long long)d->k, (long long)d->batch);
    }
    return 0;
fail_desc:
    blaslt_call_free(c);
    return lt_fail(b, err, "GEMM set-up", s);
}

/* Statuses that say a candidate cannot run this GEMM, having launched
 * nothing: the next one may. */
static int try_next(cublasStatus_t r)
{
    return r == CUBLAS_STATUS_NOT_SUPPORTED || r == CUBLAS_STATUS_INVALID_VALUE || r == CUBLAS_STATUS_ARCH_MISMATCH;
}

/* One cublasLtMatmul with candidate i. */
static cublasStatus_t matmul(const BlasLt *b, const BlasLtCall *c, int i, const GemmPtrs *p, CUdeviceptr workspace,
                             CUstream s)
{
    const float one = 1.0f, zero = 0.0f;
    const void *cptr = (const void *)(uintptr_t)(c->has_c ? p->residual : p->d);
    return fns(b)->cublasLtMatmul((cublasLtHandle_t)b->handle, c->op, &one, (const void *)(uintptr_t)p->a,
                                  c->layout[0], (const void *)(uintptr_t)p->b, c->layout[1], c->has_c ? &one : &zero,
                                  cptr, c->layout[2], (void *)(uintptr_t)p->d, c->layout[2],
                                  (const cublasLtMatmulAlgo_t *)c->algo[i], (void *)(uintptr_t)workspace,
                                  c->algo_workspace[i], (cudaStream_t)s);
}

/* The epilogue's bias and aux pointers on c's descriptor. */
static cublasStatus_t set_pointers(const BlasLt *b, const BlasLtCall *c, const GemmPtrs *p)
{
    const LtFns *f = fns(b);
    void *bias = (void *)(uintptr_t)p->bias, *aux = (void *)(uintptr_t)p->aux;
    cublasStatus_t r = CUBLAS_STATUS_SUCCESS;
    if (p->bias)
        r = f->cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (r == CUBLAS_STATUS_SUCCESS && p->aux)
        r = f->cublasLtMatmulDescSetAttribute(c->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
    return r;
}

int blaslt_run(const BlasLt *b, BlasLtCall *c, const GemmPtrs *p, CUdeviceptr workspace, CUstream s, CtErr *err)
{
    if ((p->a | p->b | p->d | p->residual | p->bias | p->aux) % OPERAND_ALIGN)
        return ct_fail(err, "cuBLASLt: an operand is not %u-byte aligned, as the algorithms were chosen for",
                       OPERAND_ALIGN);
    cublasStatus_t r = set_pointers(b, c, p), first = CUBLAS_STATUS_NOT_SUPPORTED;
    if (r != CUBLAS_STATUS_SUCCESS)
        return lt_fail(b, err, "epilogue pointers", r);
    int tried = 0;
    for (int i = c->cur; i < c->nalgo; i++) {
        if ((r = matmul(b, c, i, p, workspace, s)) == CUBLAS_STATUS_SUCCESS) {
            c->cur = i;
            return 0;
        }
        if (tried++ == 0)
            first = r;
        if (!try_next(r))
            break;
    }
    char what[64];
    snprintf(what, sizeof what, "matmul (%d of %d candidates tried, the first's status)", tried, c->nalgo);
    return lt_fail(b, err, what, first);
}

void blaslt_operand_bytes(const GemmDesc *d, size_t *a, size_t *b, size_t *dst)
{
    /* a column-major rows x cols matrix with leading dimension ld spans ld * cols elements, batch items stride apart */
    int64_t span[3][3] = {{d->lda, d->trans_a ? d->m : d->k, d->stride_a},
                          {d->ldb, d->trans_b ? d->k : d->n, d->stride_b},
                          {d->ldc, d->n, d->stride_c}};
    CtDType t[3] = {d->ab_type, d->ab_type, d->d_type};
    size_t *out[3] = {a, b, dst};
    for (int i = 0; i < 3; i++)
        *out[i] = (size_t)(span[i][0] * span[i][1] + span[i][2] * (d->batch - 1)) * ct_dtype_size(t[i]);
}

/* Runs per candidate when timing: one to warm up, then these, timed together. */
enum { TIMED_RUNS = 5 };

typedef struct TimeCtx {
    const BlasLt *b;
    BlasLtCall *c;
    const CudaDriver *drv;
    CUstream s;
    GemmPtrs p;
    CUdeviceptr workspace;
} TimeCtx;

/* What the store keeps: the winning cublasLtMatmulAlgo_t (documented as
 * trivially serialisable for one cuBLASLt version, which the key holds)
 * and the workspace it needs. */
typedef struct GemmChoice {
    unsigned char algo[64];
    uint64_t workspace;
} GemmChoice;

static int cu_fail(const TimeCtx *k, CtErr *err, const char *what, CUresult r)
{
    char text[256];
    return ct_fail(err, "timing cuBLASLt's candidates: %s failed: %s", what,
                   cuda_error_text(k->drv, r, text, sizeof text));
}

/* Candidate i's mean time over TIMED_RUNS into *ms, or a status cuBLASLt
 * refused it with (*ms untouched). */
static int time_one(const TimeCtx *k, int i, CUevent ev[2], float *ms, cublasStatus_t *refused, CtErr *err)
{
    cublasStatus_t r = matmul(k->b, k->c, i, &k->p, k->workspace, k->s);
    if (r != CUBLAS_STATUS_SUCCESS) {
        *refused = r;
        return try_next(r) ? 0 : lt_fail(k->b, err, "matmul, timing a candidate", r);
    }
    CUresult e = k->drv->EventRecord(ev[0], k->s);
    for (int t = 0; t < TIMED_RUNS && r == CUBLAS_STATUS_SUCCESS && e == CU_SUCCESS; t++)
        r = matmul(k->b, k->c, i, &k->p, k->workspace, k->s);
    if (r != CUBLAS_STATUS_SUCCESS)
        return lt_fail(k->b, err, "matmul, timing a candidate", r);
    if (e == CU_SUCCESS)
        e = k->drv->EventRecord(ev[1], k->s);
    if (e == CU_SUCCESS)
        e = k->drv->EventSynchronize(ev[1]);
    if (e == CU_SUCCESS)
        e = k->drv->EventElapsedTime(ms, ev[0], ev[1]);
    if (e != CU_SUCCESS)
        return cu_fail(k, err, "an event", e);
    *ms /= TIMED_RUNS;
    return 0;
}

/* The cache's "compile": every candidate timed, the fastest kept (the
 * heuristic's order breaks ties). */
static int time_candidates(void *vctx, const CacheKeyParts *parts, void **blob, size_t *n, CtErr *err)
{
    const TimeCtx *k = vctx;
    CUevent ev[2] = {0};
    CUresult e = k->drv->EventCreate(&ev[0], 0);
    if (e == CU_SUCCESS)
        e = k->drv->EventCreate(&ev[1], 0);
    cublasStatus_t r = e == CU_SUCCESS ? set_pointers(k->b, k->c, &k->p) : CUBLAS_STATUS_SUCCESS;
    int rc = e != CU_SUCCESS ? cu_fail(k, err, "cuEventCreate", e)
             : r != CUBLAS_STATUS_SUCCESS ? lt_fail(k->b, err, "epilogue pointers, timing the candidates", r)
                                          : 0;
    int best = -1;
    float best_ms = 0;
    cublasStatus_t refused = CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < k->c->nalgo && !rc; i++) {
        float ms = -1;
        rc = time_one(k, i, ev, &ms, &refused, err);
        if (!rc && ms >= 0 && (best < 0 || ms < best_ms))
            best = i, best_ms = ms;
    }
    for (int i = 0; i < 2; i++)
        if (ev[i])
            k->drv->EventDestroy(ev[i]);
    if (rc)
        return rc;
    if (best < 0)
        return lt_fail(k->b, err, "matmul: every candidate refused, the first's status", refused);
    GemmChoice *ch = calloc(1, sizeof *ch);
    CT_ASSERT(ch != NULL);
    memcpy(ch->algo, k->c->algo[best], sizeof ch->algo);
    ch->workspace = k->c->algo_workspace[best];
    *blob = ch;
    *n = sizeof *ch;
    return 0;
}

/* The chosen algorithm first in c: moved there where the heuristic listed
 * it, else put there (the last candidate dropped where the list is full). */
static void put_first(BlasLtCall *c, const GemmChoice *ch)
{
    int at = 0;
    while (at < c->nalgo && memcmp(c->algo[at], ch->algo, sizeof ch->algo))
        at++;
    if (at == c->nalgo && c->nalgo < BLASLT_ALGOS)
        c->nalgo++;
    if (at == BLASLT_ALGOS)
        at = BLASLT_ALGOS - 1;
    memmove(c->algo[1], c->algo[0], (size_t)at * sizeof c->algo[0]);
    memmove(&c->algo_workspace[1], &c->algo_workspace[0], (size_t)at * sizeof c->algo_workspace[0]);
    memcpy(c->algo[0], ch->algo, sizeof ch->algo);
    c->algo_workspace[0] = (size_t)ch->workspace;
    c->cur = 0;
    if (c->algo_workspace[0] > c->workspace)
        c->workspace = c->algo_workspace[0];
}

int lib_choice_timed(int *timed, CtErr *err)
{
    const char *s = getenv("CTIMM_LIB_CHOICE");
    *timed = !s || !*s || !strcmp(s, "timed");
    if (!*timed && strcmp(s, "heuristic"))
        return ct_fail(err, "CTIMM_LIB_CHOICE=%s: use timed or heuristic", s);
    return 0;
}

int blaslt_choose(const BlasLt *b, BlasLtCall *c, const GemmDesc *d, const CudaDriver *drv, CUstream s,
                  const GemmScratch *sc, KernelCache *cache, const char *device, CtErr *err)
{
    char key[512], version[32], options[96];
    gemm_desc_key(d, key, sizeof key);
    snprintf(version, sizeof version, "%zu", fns(b)->cublasLtGetVersion());
    snprintf(options, sizeof options, "timed tf32=%d max_workspace=%zu align=%u", c->tf32, c->max_workspace,
             OPERAND_ALIGN);
    CacheKeyParts parts = {.source = key, .target = device, .compiler = "cublaslt", .compiler_version = version,
                           .options = options};
    int in_place = d->epi.residual >= 0;
    TimeCtx k = {b, c, drv, s,
                 {.a = sc->a, .b = sc->b, .d = sc->d, .residual = in_place ? sc->d : 0,
                  .bias = d->epi.bias >= 0 || d->epi.bgrad >= 0 ? sc->bias : 0, .aux = d->epi.aux >= 0 ? sc->aux : 0},
                 sc->workspace};
    const void *blob;
    size_t n;
    if (cache_get(cache, &parts, time_candidates, &k, &blob, &n, err))
        return -1;
    if (n != sizeof(GemmChoice))
        return ct_fail(err, "cached cuBLASLt choice for %s has %zu bytes, not %zu", key, n, sizeof(GemmChoice));
    GemmChoice ch;
    memcpy(&ch, blob, sizeof ch);
    if (ch.workspace <= c->max_workspace)
        put_first(c, &ch);
    return 0;
}

void blaslt_call_free(BlasLtCall *c)
{
    for (int i = 0; c->lt && i < 3; i++)
        if (c->layout[i])
            fns(c->lt)->cublasLtMatrixLayoutDestroy(c->layout[i]);
    if (c->op)
        fns(c->lt)->cublasLtMatmulDescDestroy(c->op);
    memset(c, 0, sizeof *c);
}
