/*
 * The cpu backend's one GEMM. Where ctimm is built with oneDNN, a GEMM that
 * has the threads to itself runs on oneDNN's sgemm, which measured 1.1-2.5x
 * OpenBLAS's at 2 threads on the zoo's linears (most where a dim is a few
 * dozen: a ConvNeXt stage's 24 or 96 channels; bench/NOTES.md, session 12).
 * A GEMM inside a parallel region (one thread's block of a linear, one
 * Winograd point) stays on OpenBLAS, whose small single-threaded kernels
 * measured within 10% either way and test_resnet's step faster with them.
 * oneDNN 2.x's JIT GEMM kernels point rsp into a heap workspace while they
 * run: a signal handler run on such a thread writes its frame into the heap
 * (oneDNN issue #4845, fixed in 3.11). A program on this backend takes its
 * signals on a thread of their own, as the tools do (cli/common.c).
 */
#include <cblas.h>
#include <omp.h>

#include "runtime/cpu/cpu.h"

#ifdef CTIMM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

void cpu_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
#ifdef CTIMM_HAVE_DNNL
    if (!omp_in_parallel()) {
        dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        CT_ASSERT(st == dnnl_success); /* fails only for arguments no caller here passes */
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}
