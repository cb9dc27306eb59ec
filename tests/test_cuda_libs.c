/* cuBLASLt and cuDNN without a GPU (built with the CUDA toolkit and cuDNN,
 * CTIMM_HAVE_CUDA_LIBS): when the driver cannot be opened, creating either
 * library's handle (or, where cuBLASLt creates one without a device,
 * preparing a GEMM on it) fails with a message naming the library, and
 * nothing aborts; cuBLASLt, which blaslt_open loads itself, has every entry
 * point it needs; a GEMM's operands span the bytes its timing scratch
 * holds; CTIMM_LIB_CHOICE is read as documented. On a GPU machine the
 * handles open; tests/gpu checks what they compute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/cuda/driver.h"
#ifdef CTIMM_HAVE_CUDA_LIBS
#include "runtime/cuda/blaslt.h"
#include "runtime/cuda/dnn.h"
#endif

#ifdef __SANITIZE_ADDRESS__
/* cublasLtCreate keeps 192 bytes when it fails for want of a device: its
 * leak, not ours (LeakSanitizer reads this hook at exit). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libcublasLt.so\n"; }
#endif

int main(void)
{
#ifdef CTIMM_HAVE_CUDA_LIBS
    CudaDriver drv;
    CtErr err;
    int gpu = cuda_driver_open(&drv, &err) == 0;
    if (gpu)
        cuda_driver_close(&drv);
    Dnn dnn;
    int rc = dnn_open(&dnn, NULL, &err);
    if (gpu) {
        CHECKF(rc == 0, "%s", err.msg);
        if (rc == 0)
            dnn_close(&dnn);
    } else {
        CHECKF(rc != 0 && strstr(err.msg, "cuDNN"), "%s", rc ? err.msg : "a cuDNN handle without a GPU");
        printf("test_cuda_libs: no GPU: %s\n", err.msg);
    }
    BlasLt lt;
    rc = blaslt_open(&lt, &err);
    if (rc == 0) {
        GemmDesc d = {.m = 64, .n = 64, .k = 64, .lda = 64, .ldb = 64, .ldc = 64, .batch = 1, .ab_type = CT_F16,
                      .d_type = CT_F16, .bias_type = CT_F16, .epi = {.bias = -1, .residual = -1, .aux = -1, .bgrad = -1}};
        BlasLtCall call;
        rc = blaslt_prepare(&lt, &d, 0, 1 << 20, &call, &err);
        if (rc == 0)
            blaslt_call_free(&call);
        blaslt_close(&lt);
    }
    if (gpu) {
        CHECKF(rc == 0, "%s", err.msg);
    } else {
        CHECKF(rc != 0 && strstr(err.msg, "cuBLASLt"), "%s", rc ? err.msg : "a cuBLASLt GEMM without a GPU");
        /* the library it opens itself, and every entry point, are there */
        CHECKF(!strstr(err.msg, "cannot open") && !strstr(err.msg, "lacks"), "%s", err.msg);
        printf("test_cuda_libs: no GPU: %s\n", err.msg);
    }
    /* the bytes a timed choice's scratch holds (blaslt_choose): A of a
     * linear read transposed (k x m stored, ld k), B and D batched with
     * their strides, the last item's span whole */
    GemmDesc lin = {.m = 32, .n = 10, .k = 16, .trans_a = 1, .lda = 16, .ldb = 16, .ldc = 32, .batch = 1,
                    .ab_type = CT_BF16, .d_type = CT_F32};
    size_t a, b, dst;
    blaslt_operand_bytes(&lin, &a, &b, &dst);
    CHECKF(a == 16 * 32 * 2 && b == 16 * 10 * 2 && dst == 32 * 10 * 4, "%zu %zu %zu", a, b, dst);
    GemmDesc bat = {.m = 4, .n = 5, .k = 7, .lda = 4, .ldb = 7, .ldc = 4, .batch = 6, .stride_a = 28,
                    .stride_b = 35, .stride_c = 20, .ab_type = CT_F16, .d_type = CT_F16};
    blaslt_operand_bytes(&bat, &a, &b, &dst);
    CHECKF(a == 6 * 28 * 2 && b == 6 * 35 * 2 && dst == 6 * 20 * 2, "%zu %zu %zu", a, b, dst);
    /* CTIMM_LIB_CHOICE: timed unless "heuristic"; another value refused, naming itself */
    static const struct {
        const char *value;
        int rc, timed;
    } choice[] = {{NULL, 0, 1}, {"", 0, 1}, {"timed", 0, 1}, {"heuristic", 0, 0}, {"fastest", -1, 0}};
    for (size_t i = 0; i < sizeof choice / sizeof *choice; i++) {
        if (choice[i].value)
            setenv("CTIMM_LIB_CHOICE", choice[i].value, 1);
        else
            unsetenv("CTIMM_LIB_CHOICE");
        int timed = -1;
        err.msg[0] = '\0';
        rc = lib_choice_timed(&timed, &err);
        CHECKF(rc == choice[i].rc && (rc || timed == choice[i].timed), "CTIMM_LIB_CHOICE=%s: rc %d, timed %d (%s)",
               choice[i].value ? choice[i].value : "(unset)", rc, timed, err.msg);
        if (rc)
            CHECKF(strstr(err.msg, "CTIMM_LIB_CHOICE=fastest") != NULL, "%s", err.msg);
    }
    unsetenv("CTIMM_LIB_CHOICE");
#else
    printf("test_cuda_libs: built without cuBLASLt/cuDNN; nothing to check\n");
#endif
    return check_done("test_cuda_libs");
}
