/* Kernel IR as CUDA C for NVRTC: no headers (the f16/bf16 conversions are
 * bit-level device functions, the same rounding as the host's), one
 * `extern "C" __global__` function per kernel taking its buffers in order,
 * each loop a grid-stride loop over the flat index (CT_ELEMENTS
 * elements a thread an iteration in its main part). The loops of a
 * multi-tensor launch are independent, so they run one after another in
 * every thread without a barrier. */
#include "codegen/render.h"

#include <stdio.h>

#include "codegen/cuda/lib_common.h"

void render_cuda_prelude(CtBuf *out)
{
    buf_printf(out,
               "#define CT_INF __longlong_as_double(0x7ff0000000000000LL)\n"
               "static __device__ __forceinline__ unsigned short ct_f2h(float f)\n"
               "{\n"
               "    unsigned int x = __float_as_uint(f), ax = x & 0x7fffffffu;\n"
               "    unsigned short sign = (unsigned short)((x >> 16) & 0x8000);\n"
               "    if (ax > 0x7f800000u) return sign | 0x7e00;\n"
               "    if (ax >= 0x477ff000u) return sign | 0x7c00;\n"
               "    if (ax < 0x38800000u) return sign | (unsigned short)nearbyintf(__uint_as_float(ax) * 16777216.0f);\n"
               "    ax += 0xc8000fffu + ((ax >> 13) & 1);\n"
               "    return sign | (unsigned short)(ax >> 13);\n"
               "}\n"
               "static __device__ __forceinline__ float ct_h2f(unsigned short h)\n"
               "{\n"
               "    unsigned int e = (h >> 10) & 0x1f, m = h & 0x3ff;\n"
               "    float v;\n"
               "    if (e == 0) v = ldexpf((float)m, -24);\n"
               "    else if (e == 31) v = m ? __uint_as_float(0x7fc00000u) : __uint_as_float(0x7f800000u);\n"
               "    else v = __uint_as_float(((e + 112) << 23) | (m << 13));\n"
               "    return h & 0x8000 ? -v : v;\n"
               "}\n"
               "static __device__ __forceinline__ unsigned short ct_f2bf(float f)\n"
               "{\n"
               "    unsigned int x = __float_as_uint(f);\n"
               "    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40);\n"
               "    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);\n"
               "}\n"
               "static __device__ __forceinline__ float ct_bf2f(unsigned short h)\n"
               "{\n"
               "    return __uint_as_float((unsigned int)h << 16);\n"
               "}\n"
               "#define ct_expf expf\n"
               "#define ct_tanhf tanhf\n"
               "#define ct_erff erff\n");
}

/* A loop's main part takes CT_ELEMENTS elements a thread an iteration
 * (lib_common.h says why), the rest one at a time. Only loops of
 * CUDA_GROUPED_FROM elements or more have the main part: the launch plan's
 * grid (LP_BLOCKS_PER_SM blocks of 256 threads an SM: some 1.1 M threads
 * on an H200) gives a shorter loop's threads one element each, and the
 * copies would only lengthen NVRTC's work. */
#define CUDA_GROUPED_FROM (1LL << 20)

void render_cuda_kernel(const KirKernel *k, CtBuf *out)
{
    buf_printf(out, "\nextern \"C\" __global__ void ct_k%d(", k->launch);
    for (int b = 0; b < k->nbufs; b++)
        buf_printf(out, "%s%s%s *b%d", b ? ", " : "", k->bufs[b].written ? "" : "const ",
                   render_storage_type(k->bufs[b].dtype), b);
    buf_printf(out, ")\n{\n    const long long step = (long long)blockDim.x * gridDim.x;\n");
    for (int j = 0; j < k->nloops; j++) {
        const KirLoop *l = &k->loops[j];
        long long n = (long long)l->numel;
        buf_printf(out, "    {\n        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n");
        if (n >= CUDA_GROUPED_FROM) {
            buf_printf(out, "        for (; i + %d * step < %lldLL; i += %d * step) {\n", CT_ELEMENTS - 1, n,
                       CT_ELEMENTS);
            char x[CT_ELEMENTS][8];
            for (int u = 0; u < CT_ELEMENTS; u++) {
                snprintf(x[u], sizeof x[u], "_%d", u);
                buf_printf(out, "            const long long i%s = i + %d * step;\n", x[u], u);
                render_body_part(k, l, "            ", x[u], RENDER_OFFSETS | RENDER_VALUES, out);
            }
            for (int u = 0; u < CT_ELEMENTS; u++)
                render_body_part(k, l, "            ", x[u], RENDER_STORES, out);
            buf_printf(out, "        }\n");
        }
        buf_printf(out, "        for (; i < %lldLL; i += step) {\n", n);
        render_body(k, l, "            ", 0, out);
        buf_printf(out, "        }\n    }\n");
    }
    buf_printf(out, "}\n");
}
