/* Kernel IR as host C: a prelude with the f16/bf16 conversions (bit for
 * bit runtime/tensor.c's: round to nearest even, overflow to infinity) and
 * ir/host_math.h (the cpu backend's exp/tanh/erf, vectorisable), and
 * per kernel one function whose loops are `omp parallel for simd` over the
 * flat index, parallel only when a loop is long enough to pay for it (the
 * `if` names `parallel`: short loops are still vectorised); a loop with
 * broadcast or permuted views runs over runs of the index along which every
 * offset steps evenly (render_run), in parallel, each run a simd loop. */
#include "codegen/render.h"

void render_c_prelude(CtBuf *out)
{
    buf_printf(out,
               "#include <math.h>\n"
               "#include <string.h>\n"
               "#define CT_INF ((double)INFINITY)\n"
               "static inline unsigned short ct_f2h(float f)\n"
               "{\n"
               "    unsigned int x, ax;\n"
               "    memcpy(&x, &f, 4);\n"
               "    unsigned short sign = (unsigned short)((x >> 16) & 0x8000);\n"
               "    ax = x & 0x7fffffffu;\n"
               "    if (ax > 0x7f800000u) return sign | 0x7e00;\n"
               "    if (ax >= 0x477ff000u) return sign | 0x7c00;\n"
               "    if (ax < 0x38800000u) { float a; memcpy(&a, &ax, 4); return sign | (unsigned short)nearbyintf(a * 16777216.0f); }\n"
               "    ax += 0xc8000fffu + ((ax >> 13) & 1);\n"
               "    return sign | (unsigned short)(ax >> 13);\n"
               "}\n"
               "static inline float ct_h2f(unsigned short h)\n"
               "{\n"
               "    unsigned int e = (h >> 10) & 0x1f, m = h & 0x3ff, x;\n"
               "    float v;\n"
               "    if (e == 0) v = ldexpf((float)m, -24);\n"
               "    else if (e == 31) v = m ? NAN : INFINITY;\n"
               "    else { x = ((e + 112) << 23) | (m << 13); memcpy(&v, &x, 4); }\n"
               "    return h & 0x8000 ? -v : v;\n"
               "}\n"
               "static inline unsigned short ct_f2bf(float f)\n"
               "{\n"
               "    unsigned int x;\n"
               "    memcpy(&x, &f, 4);\n"
               "    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40);\n"
               "    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);\n"
               "}\n"
               "static inline float ct_bf2f(unsigned short h)\n"
               "{\n"
               "    unsigned int x = (unsigned int)h << 16;\n"
               "    float v;\n"
               "    memcpy(&v, &x, 4);\n"
               "    return v;\n"
               "}\n");
    buf_printf(out, "%s", ct_host_math_text);
}

void render_c_kernel(const KirKernel *k, CtBuf *out)
{
    buf_printf(out, "\nvoid ct_k%d(void *const *args)\n{\n", k->launch);
    for (int b = 0; b < k->nbufs; b++) {
        const char *t = render_storage_type(k->bufs[b].dtype), *c = k->bufs[b].written ? "" : "const ";
        buf_printf(out, "    %s%s *b%d = (%s%s *)args[%d];\n", c, t, b, c, t, b);
    }
    for (int j = 0; j < k->nloops; j++) {
        const KirLoop *l = &k->loops[j];
        int64_t run = render_run(l);
        buf_printf(out, "    {\n        const long long n = %lldLL;\n", (long long)l->numel);
        if (run) {
            buf_printf(out, "#pragma omp parallel for if (parallel: n > 32768)\n");
            buf_printf(out, "        for (long long i0 = 0; i0 < n; i0 += %lldLL) {\n", (long long)run);
            render_run_bases(l, "            ", out);
            buf_printf(out, "#pragma omp simd\n");
            buf_printf(out, "            for (long long t = 0; t < %lldLL; t++) {\n", (long long)run);
            buf_printf(out, "                const long long i = i0 + t;\n");
            render_body(k, l, "                ", 1, out);
            buf_printf(out, "            }\n        }\n    }\n");
            continue;
        }
        buf_printf(out, "#pragma omp parallel for simd if (parallel: n > 32768)\n");
        buf_printf(out, "        for (long long i = 0; i < n; i++) {\n");
        render_body(k, l, "            ", 0, out);
        buf_printf(out, "        }\n    }\n");
    }
    buf_printf(out, "}\n");
}
