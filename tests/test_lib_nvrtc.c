/* The library kernels' CUDA C unit (codegen/cuda/lib_source.c) compiles
 * with NVRTC for sm_90 (no GPU needed; built with the CUDA toolkit), and
 * the cubin defines every kernel lib_launch*.c name, for f32, f16 and bf16
 * storage (the tensor cores' for the 16-bit two). The compile takes ~75 s on 2 cores (NVRTC's
 * optimizer split over them), and NVRTC is not instrumented, so the sanitizer build checks the
 * source only. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "codegen/cuda/lib_source.h"
#if defined(CTIMM_HAVE_NVRTC) && !defined(__SANITIZE_ADDRESS__)
#define COMPILE 1
#include "codegen/nvrtc.h"

static const char *const kernels[] = {
    "ct_copy", "ct_copy_cast", "ct_fill", "ct_act", "ct_add", "ct_cast", "ct_pool", "ct_pool_argmax", "ct_pool_grad",
    "ct_reduce_sum", "ct_reduce_sum_cols", "ct_softmax", "ct_softmax_grad", "ct_layer_norm",
    "ct_layer_norm_grad_x", "ct_layer_norm_grad_x_rows", "ct_layer_norm_grad_w",
    "ct_group_norm", "ct_group_norm_grad_x", "ct_group_norm_grad_w", "ct_bn_stats", "ct_bn_grad_stats", "ct_bn_coef",
    "ct_bn_apply", "ct_bn_grad_apply", "ct_cross_entropy_rows", "ct_mean_loss",
    "ct_cross_entropy_grad", "ct_sdpa", "ct_sdpa_grad_q", "ct_sdpa_grad_kv", "ct_attn", "ct_attn_delta",
    "ct_attn_grad_q", "ct_attn_grad_kv", "ct_gather", "ct_gather_grad"};
/* the kernels of the 16-bit types alone (CT_GLOBAL16) */
static const char *const kernels16[] = {"ct_attn_tc", "ct_attn_tc_grad_q", "ct_attn_tc_grad_kv"};

/* Whether the image holds `name` followed by a NUL (a symbol name). */
static int has_symbol(const unsigned char *img, size_t n, const char *name)
{
    size_t len = strlen(name) + 1;
    for (size_t i = 0; i + len <= n; i++)
        if (!memcmp(img + i, name, len))
            return 1;
    return 0;
}
#endif

int main(void)
{
    CtBuf src = {0};
    lib_source(&src);
    CHECK(src.s && strstr(src.s, "ct_bn_grad_apply") && strstr(src.s, "CT_SFX(name) name##_bf16"));
#ifdef COMPILE
    NvrtcCompiler nc;
    KernelCache cache;
    NvrtcImage img;
    CtErr err;
    CacheOptions opt = {.no_cache = 1};
    CHECKF(nvrtc_init(&nc, &err) == 0, "%s", err.msg);
    CHECKF(cache_open(&cache, &opt, &err) == 0, "%s", err.msg);
    int rc = nvrtc_compile(&nc, &cache, src.s, 90, &img, &err);
    CHECKF(rc == 0 && !img.is_ptx, "%s", rc ? err.msg : "PTX where a cubin was asked for");
    if (rc == 0)
        for (size_t k = 0; k < sizeof kernels / sizeof *kernels; k++)
            for (int t = 0; t < 3; t++) {
                char name[64];
                snprintf(name, sizeof name, "%s_%s", kernels[k], t == 0 ? "f32" : t == 1 ? "f16" : "bf16");
                CHECKF(has_symbol(img.data, img.size, name), "%s not in the cubin", name);
            }
    for (size_t k = 0; rc == 0 && k < sizeof kernels16 / sizeof *kernels16; k++) /* the tensor cores' */
        for (int t = 1; t < 3; t++) {
            char name[64];
            snprintf(name, sizeof name, "%s_%s", kernels16[k], t == 1 ? "f16" : "bf16");
            CHECKF(has_symbol(img.data, img.size, name), "%s not in the cubin", name);
        }
    if (rc == 0)
        printf("test_lib_nvrtc: %zu-byte cubin for sm_90 from %zu bytes of CUDA C\n", img.size, src.len);
    cache_close(&cache);
#else
    printf("test_lib_nvrtc: built without NVRTC or with the sanitizers; the source is not compiled\n");
#endif
    buf_free(&src);
    return check_done("test_lib_nvrtc");
}
