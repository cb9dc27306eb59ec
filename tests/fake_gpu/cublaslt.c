/* Contract: the cuBLASLt entry points runtime/cuda/blaslt.c loads, with
 * cuBLASLt's own types (cublasLt.h), over the fake driver's memory: the
 * layouts agree with the operation's m, n and k, every operand with its
 * whole extent (leading dimension, batch stride) lies in one allocation,
 * epilogue vectors are D's rows long (a bias) or columns long (BGRADB's),
 * an auxiliary matrix D-shaped at its own leading dimension; attributes
 * come in their documented sizes. While the fake computes
 * (fake_gpu_compute), a matmul computes D and its epilogue from the
 * layouts as run_matmul says. Algorithms: four, numbered 1 to 4 in
 * their first word, algorithm i asking i MiB of workspace. */
#include <cublasLt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake_gpu/fake_internal.h"

#define ALGOS 4

struct cublasLtContext {
    int live;
};

typedef struct Desc {
    cublasComputeType_t compute;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epi;
    int bias_type; /* -1: D's */
    const void *bias, *aux;
    int64_t aux_ld, aux_stride;
} Desc;

typedef struct Layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld, stride;
    int32_t batch;
} Layout;

typedef struct Pref {
    uint64_t max_workspace;
} Pref;

static cublasStatus_t invalid(const char *fmt, const char *what)
{
    fg_violation(fmt, what);
    return CUBLAS_STATUS_INVALID_VALUE;
}

size_t cublasLtGetVersion(void) { return 130000; }

const char *cublasLtGetStatusName(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_SUCCESS         ? "CUBLAS_STATUS_SUCCESS"
           : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED"
                                              : "refused by the fake cuBLASLt (its message is above)";
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    if (!(*h = calloc(1, sizeof **h)))
        abort();
    fg_count.lt_handles++;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    free(h);
    fg_count.lt_handles--;
    return CUBLAS_STATUS_SUCCESS;
}

static void *made(size_t bytes)
{
    void *p = calloc(1, bytes);
    if (!p)
        abort();
    fg_count.lt_descriptors++;
    return p;
}

static cublasStatus_t unmade(void *p)
{
    free(p);
    fg_count.lt_descriptors--;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale)
{
    if (scale != CUDA_R_32F)
        return invalid("%s: a scale type other than float", "cublasLtMatmulDescCreate");
    Desc *desc = made(sizeof *desc);
    *desc = (Desc){.compute = compute, .ta = CUBLAS_OP_N, .tb = CUBLAS_OP_N, .epi = CUBLASLT_EPILOGUE_DEFAULT,
                   .bias_type = -1};
    *d = (cublasLtMatmulDesc_t)desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { return unmade(d); }

/* An attribute's value, checked to come in its documented size. */
#define TAKE(dst, buf, n, what)                                                                                  \
    do {                                                                                                         \
        if ((n) != sizeof(dst))                                                                                  \
            return invalid("%s given in the wrong size", what);                                                 \
        memcpy(&(dst), (buf), sizeof(dst));                                                                      \
    } while (0)

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t md, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t n)
{
    Desc *d = (Desc *)md;
    int32_t i32;
    uint32_t u32;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: TAKE(i32, buf, n, "TRANSA"); d->ta = (cublasOperation_t)i32; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: TAKE(i32, buf, n, "TRANSB"); d->tb = (cublasOperation_t)i32; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: TAKE(u32, buf, n, "EPILOGUE"); d->epi = (cublasLtEpilogue_t)u32; break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: TAKE(i32, buf, n, "BIAS_DATA_TYPE"); d->bias_type = i32; break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: TAKE(d->bias, buf, n, "BIAS_POINTER"); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: TAKE(d->aux, buf, n, "EPILOGUE_AUX_POINTER"); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: TAKE(d->aux_ld, buf, n, "EPILOGUE_AUX_LD"); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
        TAKE(d->aux_stride, buf, n, "EPILOGUE_AUX_BATCH_STRIDE");
        break;
    default: return invalid("%s: an attribute the fake does not know", "cublasLtMatmulDescSetAttribute");
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    if (!rows || !cols || ld < (int64_t)rows)
        return invalid("%s: an empty matrix, or a leading dimension below its rows", "cublasLtMatrixLayoutCreate");
    Layout *lay = made(sizeof *lay);
    *lay = (Layout){type, rows, cols, ld, 0, 1};
    *l = (cublasLtMatrixLayout_t)lay;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { return unmade(l); }

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t ml, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t n)
{
    Layout *l = (Layout *)ml;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: TAKE(l->batch, buf, n, "BATCH_COUNT"); break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: TAKE(l->stride, buf, n, "STRIDED_BATCH_OFFSET"); break;
    default: return invalid("%s: an attribute the fake does not know", "cublasLtMatrixLayoutSetAttribute");
    }
    return l->batch < 1 ? invalid("%s below 1", "BATCH_COUNT") : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = (cublasLtMatmulPreference_t)made(sizeof(Pref));
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { return unmade(p); }

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t mp,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t n)
{
    Pref *p = (Pref *)mp;
    uint32_t align;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: TAKE(p->max_workspace, buf, n, "MAX_WORKSPACE_BYTES"); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: TAKE(align, buf, n, "MIN_ALIGNMENT_*_BYTES"); break;
    default: return invalid("%s: an attribute the fake does not know", "cublasLtMatmulPreferenceSetAttribute");
    }
    return CUBLAS_STATUS_SUCCESS;
}

static size_t type_size(int t) { return t == CUDA_R_16F || t == CUDA_R_16BF ? 2 : t == CUDA_R_64F ? 8 : 4; }

static int has_bias(cublasLtEpilogue_t e) { return (e & CUBLASLT_EPILOGUE_BIAS) == CUBLASLT_EPILOGUE_BIAS; }
static int has_aux(cublasLtEpilogue_t e)
{
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
           e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

/* The operation's m, n and k, from the layouts, which must agree. */
static cublasStatus_t shapes_ok(const char *call, const Desc *d, const Layout *a, const Layout *b, const Layout *c,
                                const Layout *dl)
{
    uint64_t m = d->ta == CUBLAS_OP_N ? a->rows : a->cols, k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t kb = d->tb == CUBLAS_OP_N ? b->rows : b->cols, n = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    char why[256] = "";
    if (k != kb || m != dl->rows || n != dl->cols)
        snprintf(why, sizeof why, "op(A) is %llux%llu, op(B) %llux%llu, D %llux%llu", (unsigned long long)m,
                 (unsigned long long)k, (unsigned long long)kb, (unsigned long long)n, (unsigned long long)dl->rows,
                 (unsigned long long)dl->cols);
    else if (c->rows != dl->rows || c->cols != dl->cols || c->type != dl->type)
        snprintf(why, sizeof why, "C's layout is not D's");
    else if (a->batch != dl->batch || b->batch != dl->batch || c->batch != dl->batch)
        snprintf(why, sizeof why, "batch counts %d, %d, %d, %d", a->batch, b->batch, c->batch, dl->batch);
    else if (a->type != b->type)
        snprintf(why, sizeof why, "A and B of different types");
    if (!why[0])
        return CUBLAS_STATUS_SUCCESS;
    fg_violation("%s: %s", call, why);
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* What a batched column-major matrix spans, in bytes. */
static size_t extent(uint64_t rows, uint64_t cols, int64_t ld, int64_t stride, int batch, int type)
{
    return (size_t)(ld * (int64_t)(cols - 1) + (int64_t)rows + stride * (batch - 1)) * type_size(type);
}

static int operand_ok(const char *which, const void *p, const Layout *l)
{
    char what[64];
    snprintf(what, sizeof what, "cublasLtMatmul's %s", which);
    return fg_host((CUdeviceptr)(uintptr_t)p, extent(l->rows, l->cols, l->ld, l->stride, l->batch, l->type), what) !=
           NULL;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t md, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t pref,
                                              int requested, cublasLtMatmulHeuristicResult_t res[], int *returned)
{
    cublasStatus_t s = shapes_ok("cublasLtMatmulAlgoGetHeuristic", (const Desc *)md, (const Layout *)a,
                                 (const Layout *)b, (const Layout *)c, (const Layout *)dl);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    *returned = 0;
    if (((const Desc *)md)->epi == CUBLASLT_EPILOGUE_BGRADB && fg_refused("BGRADB"))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 1; i <= ALGOS && *returned < requested; i++) {
        size_t ws = (size_t)i << 20;
        if (ws > ((const Pref *)pref)->max_workspace)
            continue;
        cublasLtMatmulHeuristicResult_t *r = &res[(*returned)++];
        memset(r, 0, sizeof *r);
        r->algo.data[0] = (uint64_t)i;
        r->workspaceSize = ws;
        r->state = CUBLAS_STATUS_SUCCESS;
        r->wavesCount = 1.0f;
    }
    return *returned ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

/* ---- computing (fake_gpu_compute) ---- */

typedef struct MatmulArgs {
    Desc d;
    Layout a, b, c, dd;
    float alpha, beta;
    CUdeviceptr A, B, C, D, bias, aux;
} MatmulArgs;

static CtDType element(int t) { return t == CUDA_R_16F ? CT_F16 : t == CUDA_R_16BF ? CT_BF16 : CT_F32; }

/* Element (row, col) of batch item i of l's matrix at p. */
static size_t at(const Layout *l, int64_t i, uint64_t row, uint64_t col)
{
    return (size_t)(i * l->stride + (int64_t)row + (int64_t)col * l->ld);
}

static double op_elem(const void *p, const Layout *l, cublasOperation_t t, int64_t i, uint64_t row, uint64_t col)
{
    return t == CUBLAS_OP_N ? fg_load(p, element(l->type), at(l, i, row, col))
                            : fg_load(p, element(l->type), at(l, i, col, row));
}

static void *operand(CUdeviceptr p, const Layout *l, const char *what)
{
    return fg_host(p, extent(l->rows, l->cols, l->ld, l->stride, l->batch, l->type), what);
}

/* D = alpha op(A) op(B) + beta C, then the epilogue: bias (per row), the
 * aux copy of that, ReLU or GELU (tanh's form, cuBLASLt's); BGRADB
 * writes op(B)'s column sums over k as the bias gradient. */
static void run_matmul(const void *arg)
{
    const MatmulArgs *m = arg;
    const Desc *d = &m->d;
    const void *A = operand(m->A, &m->a, "cublasLtMatmul's A"), *B = operand(m->B, &m->b, "cublasLtMatmul's B");
    const void *C = operand(m->C, &m->c, "cublasLtMatmul's C");
    void *D = operand(m->D, &m->dd, "cublasLtMatmul's D");
    uint64_t rows = m->dd.rows, cols = m->dd.cols, k = d->ta == CUBLAS_OP_N ? m->a.cols : m->a.rows;
    int bgrad = d->epi == CUBLASLT_EPILOGUE_BGRADB, bias_on = has_bias(d->epi) && !bgrad, aux_on = has_aux(d->epi);
    CtDType bt = element(d->bias_type >= 0 ? d->bias_type : (int)m->dd.type), dt = element(m->dd.type);
    void *bias = bgrad || bias_on ? fg_host(m->bias, (bgrad ? cols : rows) * ct_dtype_size(bt), "the bias vector")
                                  : NULL;
    Layout aux_l = {m->dd.type, rows, cols, d->aux_ld, d->aux_stride, m->dd.batch};
    void *aux = aux_on ? operand(m->aux, &aux_l, "the aux matrix") : NULL;
    if (!A || !B || !C || !D || ((bgrad || bias_on) && !bias) || (aux_on && !aux))
        return;
    int relu = d->epi == CUBLASLT_EPILOGUE_RELU || d->epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
               d->epi == CUBLASLT_EPILOGUE_RELU_AUX || d->epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    int gelu = d->epi == CUBLASLT_EPILOGUE_GELU || d->epi == CUBLASLT_EPILOGUE_GELU_BIAS ||
               d->epi == CUBLASLT_EPILOGUE_GELU_AUX || d->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    for (int64_t i = 0; i < m->dd.batch; i++)
        for (uint64_t col = 0; col < cols; col++)
            for (uint64_t row = 0; row < rows; row++) {
                double acc = 0;
                for (uint64_t j = 0; j < k; j++)
                    acc += op_elem(A, &m->a, d->ta, i, row, j) * op_elem(B, &m->b, d->tb, i, j, col);
                double x = m->alpha * acc;
                if (m->beta != 0)
                    x += m->beta * fg_load(C, element(m->c.type), at(&m->c, i, row, col));
                if (bias_on)
                    x += fg_load(bias, bt, row);
                if (aux_on)
                    fg_store(aux, dt, at(&aux_l, i, row, col), x);
                if (relu && x < 0)
                    x = 0;
                if (gelu)
                    x = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
                fg_store(D, dt, at(&m->dd, i, row, col), x);
            }
    for (uint64_t col = 0; bgrad && col < cols; col++) {
        double sum = 0;
        for (uint64_t j = 0; j < k; j++)
            sum += op_elem(B, &m->b, d->tb, 0, j, col);
        fg_store(bias, bt, col, sum);
    }
}

static void matmul_op(FgOp *op, const Desc *d, const Layout *a, const Layout *b, const Layout *c, const Layout *dd,
                      const void *alpha, const void *beta, const void *A, const void *B, const void *C, void *D)
{
    MatmulArgs *m = malloc(sizeof *m);
    if (!m)
        abort();
    *m = (MatmulArgs){*d, *a, *b, *c, *dd, *(const float *)alpha, *(const float *)beta, (CUdeviceptr)(uintptr_t)A,
                      (CUdeviceptr)(uintptr_t)B, (CUdeviceptr)(uintptr_t)C, (CUdeviceptr)(uintptr_t)D,
                      (CUdeviceptr)(uintptr_t)d->bias, (CUdeviceptr)(uintptr_t)d->aux};
    op->kind = FG_CALL;
    op->call = run_matmul;
    op->arg = m;
    op->arg_bytes = sizeof *m;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t md, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t al, const void *B, cublasLtMatrixLayout_t bl, const void *beta,
                              const void *C, cublasLtMatrixLayout_t cl, void *D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsb, cudaStream_t stream)
{
    const Desc *d = (const Desc *)md;
    const Layout *a = (const Layout *)al, *b = (const Layout *)bl, *c = (const Layout *)cl, *dd = (const Layout *)dl;
    const char *call = "cublasLtMatmul";
    if (!fg_stream_ok((CUstream)stream, call))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    cublasStatus_t s = shapes_ok(call, d, a, b, c, dd);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    if (!algo || algo->data[0] < 1 || algo->data[0] > ALGOS)
        return invalid("%s: an algorithm the heuristic never gave", call);
    if (algo->data[0] == 1 && fg_refused("cublasLtMatmul algo 1"))
        return CUBLAS_STATUS_NOT_SUPPORTED; /* launched nothing: the next candidate may run */
    size_t need = (size_t)algo->data[0] << 20;
    if (wsb < need) {
        fg_violation("cublasLtMatmul: algorithm %d given %zu bytes of workspace, needs %zu", (int)algo->data[0], wsb,
                     need);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!operand_ok("A", A, a) || !operand_ok("B", B, b) || !operand_ok("C", C, c) || !operand_ok("D", D, dd) ||
        (wsb && !fg_host((CUdeviceptr)(uintptr_t)ws, wsb, "cublasLtMatmul's workspace")))
        return CUBLAS_STATUS_INVALID_VALUE;
    int bt = d->bias_type >= 0 ? d->bias_type : (int)dd->type;
    if (d->epi == CUBLASLT_EPILOGUE_BGRADB || d->epi == CUBLASLT_EPILOGUE_BGRADA || has_bias(d->epi)) {
        uint64_t len = d->epi == CUBLASLT_EPILOGUE_BGRADB ? dd->cols : dd->rows;
        if (!fg_host((CUdeviceptr)(uintptr_t)d->bias, len * type_size(bt), "cublasLtMatmul's bias vector"))
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (has_aux(d->epi)) {
        if (d->aux_ld < (int64_t)dd->rows || (dd->batch > 1 && !d->aux_stride))
            return invalid("%s: the aux matrix's leading dimension is below D's rows, or its batch stride is unset",
                           call);
        if (!fg_host((CUdeviceptr)(uintptr_t)d->aux,
                     extent(dd->rows, dd->cols, d->aux_ld, d->aux_stride, dd->batch, (int)dd->type),
                     "cublasLtMatmul's aux matrix"))
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    fg_count.lt_matmuls++;
    FgOp op = fg_nop(call);
    if (fg_computing())
        matmul_op(&op, d, a, b, c, dd, alpha, beta, A, B, C, D);
    fg_enqueue((CUstream)stream, &op);
    return CUBLAS_STATUS_SUCCESS;
}
