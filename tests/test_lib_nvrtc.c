/* The library kernels' CUDA C units (codegen/cuda/lib_source.c), one a
 * storage type, compile with NVRTC for sm_90 (no GPU needed; built with
 * the CUDA toolkit), and each cubin defines every kernel lib_launch*.c
 * names, for its type alone (the tensor cores' in the 16-bit two). The
 * compiles take ~110 s of CPU (NVRTC's optimizer split over the cores), and
 * NVRTC is not instrumented, so the sanitizer build checks the sources
 * only. */
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
    static const char *const suffix[LIB_NTYPES] = {"f32", "f16", "bf16"};
    CtBuf src[LIB_NTYPES] = {{0}};
    for (int t = 0; t < LIB_NTYPES; t++) {
        lib_source((LibType)t, &src[t]);
        CHECK(src[t].s && strstr(src[t].s, "ct_bn_grad_apply"));
    }
    CHECK(strstr(src[LIB_F32].s, "CT_SFX(name) name##_f32") && !strstr(src[LIB_F32].s, "name##_bf16") &&
          strstr(src[LIB_BF16].s, "CT_SFX(name) name##_bf16") && !strstr(src[LIB_BF16].s, "name##_f32"));
#ifdef COMPILE
    NvrtcCompiler nc;
    KernelCache cache;
    CtErr err;
    CacheOptions opt = {.no_cache = 1};
    CHECKF(nvrtc_init(&nc, &err) == 0, "%s", err.msg);
    CHECKF(cache_open(&cache, &opt, &err) == 0, "%s", err.msg);
    for (int t = 0; t < LIB_NTYPES; t++) {
        NvrtcImage img;
        int rc = nvrtc_compile(&nc, &cache, src[t].s, 90, &img, &err);
        CHECKF(rc == 0 && !img.is_ptx, "%s: %s", suffix[t], rc ? err.msg : "PTX where a cubin was asked for");
        if (rc)
            continue;
        /* its own type's kernels, no other's */
        for (size_t k = 0; k < sizeof kernels / sizeof *kernels; k++)
            for (int u = 0; u < LIB_NTYPES; u++) {
                char name[64];
                snprintf(name, sizeof name, "%s_%s", kernels[k], suffix[u]);
                CHECKF(has_symbol(img.data, img.size, name) == (u == t), "%s %s in the %s cubin", name,
                       u == t ? "not" : "also", suffix[t]);
            }
        for (size_t k = 0; k < sizeof kernels16 / sizeof *kernels16; k++) { /* the tensor cores' */
            char name[64];
            snprintf(name, sizeof name, "%s_%s", kernels16[k], suffix[t]);
            CHECKF(has_symbol(img.data, img.size, name) == (t != LIB_F32), "%s %s in the %s cubin", name,
                   t != LIB_F32 ? "not" : "also", suffix[t]);
        }
        printf("test_lib_nvrtc: %zu-byte %s cubin for sm_90 from %zu bytes of CUDA C\n", img.size, suffix[t],
               src[t].len);
    }
    cache_close(&cache);
#else
    printf("test_lib_nvrtc: built without NVRTC or with the sanitizers; the sources are not compiled\n");
#endif
    for (int t = 0; t < LIB_NTYPES; t++)
        buf_free(&src[t]);
    return check_done("test_lib_nvrtc");
}
