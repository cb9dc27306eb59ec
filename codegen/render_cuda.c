/* Kernel IR as CUDA C for NVRTC: no headers (the f16/bf16 conversions are
 * the hardware's cvt instructions on the device and bit-level functions of
 * the same rounding on the cuda-sim), one `extern "C" __global__` function
 * per kernel taking its buffers in order, each loop a grid-stride loop over
 * the flat index; a long loop's main part takes chunks of elements in 16-byte
 * accesses where its operands allow, else CT_ELEMENTS elements a thread an
 * iteration. The loops of a multi-tensor launch are independent, so they run
 * one after another in every thread without a barrier. */
#include "codegen/render.h"

#include <stdio.h>
#include <stdlib.h>

#include "codegen/cuda/lib_common.h"

void render_cuda_prelude(CtBuf *out)
{
    /* cvt rounds to nearest even and keeps subnormals, as the functions do:
     * the same bits but for a NaN's payload; bf16's needs sm_80. CT_VEC is a
     * vector access, which faults on the device where it is misaligned and
     * traps on the cuda-sim, whose host would not fault. */
    buf_printf(out,
               "#define CT_INF __longlong_as_double(0x7ff0000000000000LL)\n"
               "struct __align__(8) ct_u2 { unsigned int x, y; };\n"
               "struct __align__(16) ct_u4 { unsigned int x, y, z, w; };\n"
               "#ifdef CT_SIMT\n"
               "#define CT_VEC(T, p) (*(T *)((unsigned long long)(p) %% sizeof(T) ? (__trap(), (p)) : (p)))\n"
               "#else\n"
               "#define CT_VEC(T, p) (*(T *)(p))\n"
               "#endif\n"
               "static __device__ __forceinline__ unsigned short ct_f2h(float f)\n"
               "{\n"
               "#ifndef CT_SIMT\n"
               "    unsigned short h;\n"
               "    asm(\"cvt.rn.f16.f32 %%0, %%1;\" : \"=h\"(h) : \"f\"(f));\n"
               "    return h;\n"
               "#else\n"
               "    unsigned int x = __float_as_uint(f), ax = x & 0x7fffffffu;\n"
               "    unsigned short sign = (unsigned short)((x >> 16) & 0x8000);\n"
               "    if (ax > 0x7f800000u) return sign | 0x7e00;\n"
               "    if (ax >= 0x477ff000u) return sign | 0x7c00;\n"
               "    if (ax < 0x38800000u) return sign | (unsigned short)nearbyintf(__uint_as_float(ax) * 16777216.0f);\n"
               "    ax += 0xc8000fffu + ((ax >> 13) & 1);\n"
               "    return sign | (unsigned short)(ax >> 13);\n"
               "#endif\n"
               "}\n"
               "static __device__ __forceinline__ float ct_h2f(unsigned short h)\n"
               "{\n"
               "#ifndef CT_SIMT\n"
               "    float f;\n"
               "    asm(\"cvt.f32.f16 %%0, %%1;\" : \"=f\"(f) : \"h\"(h));\n"
               "    return f;\n"
               "#else\n"
               "    unsigned int e = (h >> 10) & 0x1f, m = h & 0x3ff;\n"
               "    float v;\n"
               "    if (e == 0) v = ldexpf((float)m, -24);\n"
               "    else if (e == 31) v = m ? __uint_as_float(0x7fc00000u) : __uint_as_float(0x7f800000u);\n"
               "    else v = __uint_as_float(((e + 112) << 23) | (m << 13));\n"
               "    return h & 0x8000 ? -v : v;\n"
               "#endif\n"
               "}\n"
               "static __device__ __forceinline__ unsigned short ct_f2bf(float f)\n"
               "{\n"
               "#if !defined(CT_SIMT) && __CUDA_ARCH__ >= 800\n"
               "    unsigned short h;\n"
               "    asm(\"cvt.rn.bf16.f32 %%0, %%1;\" : \"=h\"(h) : \"f\"(f));\n"
               "    return h;\n"
               "#else\n"
               "    unsigned int x = __float_as_uint(f);\n"
               "    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40);\n"
               "    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);\n"
               "#endif\n"
               "}\n"
               "static __device__ __forceinline__ float ct_bf2f(unsigned short h)\n"
               "{\n"
               "    return __uint_as_float((unsigned int)h << 16);\n"
               "}\n"
               "#define ct_expf expf\n"
               "#define ct_tanhf tanhf\n"
               "#define ct_erff erff\n");
}

/* A loop's main part takes chunks of elements in 16-byte accesses, or
 * CT_ELEMENTS elements a thread an iteration (lib_common.h says why), the
 * rest one at a time. Only loops of CUDA_GROUPED_FROM elements or more have
 * a main part: the launch plan's grid (LP_BLOCKS_PER_SM blocks of 256
 * threads an SM: some 1.1 M threads on an H200) gives a shorter loop's
 * threads one element each, and the copies would only lengthen NVRTC's
 * work. */
#define CUDA_GROUPED_FROM (1LL << 20)

/* How a chunk of V elements from i0 (a multiple of V) reads a view. */
typedef enum VecRead {
    VR_VECTOR,  /* V elements from o(i0), a multiple of V: one access */
    VR_ONE,     /* one element for all V (a broadcast along the chunk) */
    VR_STRIDED, /* o(i0) + t * stride: the chunk lies in the view's innermost dim */
    VR_EACH,    /* each element's offset of its own */
} VecRead;

static VecRead vec_read(const KirView *v, int V, int64_t *stride)
{
    *stride = 1;
    if (v->ndim == 0)
        return VR_VECTOR;
    if (v->ndim == 1 && v->stride[0] == 0)
        return VR_ONE;
    int64_t inner = v->size[v->ndim - 1];
    *stride = v->stride[v->ndim - 1];
    if (inner % V)
        return VR_EACH;
    if (*stride == 0)
        return VR_ONE;
    if (*stride != 1)
        return VR_STRIDED;
    for (int d = 0; d < v->ndim - 1; d++)
        if (v->stride[d] % V)
            return VR_STRIDED;
    return VR_VECTOR;
}

/* Elements a chunk: 16 bytes of the widest operand accessed in order (a
 * store, or a load whose view's innermost stride is 1), at most 8; 0 for a
 * loop with 8-byte operands, which keeps CT_ELEMENTS. */
static int vec_width(const KirKernel *k, const KirLoop *l)
{
    size_t most = 0;
    for (int j = 0; j < l->nins; j++) {
        const KirInstr *in = &l->ins[j];
        if (in->op != KIR_LOAD && in->op != KIR_STORE)
            continue;
        size_t s = ct_dtype_size(k->bufs[in->buf].dtype);
        if (s > 4)
            return 0;
        const KirView *v = in->op == KIR_LOAD ? &l->views[in->view] : NULL;
        if ((!v || v->ndim == 0 || v->stride[v->ndim - 1] == 1) && s > most)
            most = s;
    }
    return most == 0 ? 0 : most == 1 ? 8 : (int)(16 / most);
}

/* The access type of V elements of s bytes (4, 8 or 16 bytes), and its
 * 32-bit word q as an expression of variable `var`. */
static const char *vec_type(int V, size_t s)
{
    int words = V * (int)s / 4;
    return words == 1 ? "unsigned int" : words == 2 ? "ct_u2" : "ct_u4";
}

static void vec_word(int V, size_t s, const char *var, int q, CtBuf *out)
{
    if (V * (int)s == 4)
        buf_printf(out, "%s", var);
    else
        buf_printf(out, "%s.%c", var, "xyzw"[q]);
}

/* The loads of a chunk: v<j>_<t> for element t of every load j. */
static void vec_loads(const KirKernel *k, const KirLoop *l, int V, const char *type, const char *ind, CtBuf *out)
{
    for (int j = 0; j < l->nins; j++) {
        const KirInstr *in = &l->ins[j];
        if (in->op != KIR_LOAD)
            continue;
        CtDType dt = k->bufs[in->buf].dtype;
        size_t s = ct_dtype_size(dt);
        const char *conv = dt == CT_F16 ? "ct_h2f" : dt == CT_BF16 ? "ct_bf2f" : "";
        int64_t stride;
        VecRead r = vec_read(&l->views[in->view], V, &stride);
        if (r == VR_VECTOR) {
            char var[16];
            snprintf(var, sizeof var, "w%d", j);
            buf_printf(out, "%sconst %s %s = CT_VEC(const %s, b%d + o%d);\n", ind, vec_type(V, s), var,
                       vec_type(V, s), in->buf, in->view);
            for (int t = 0; t < V; t++) {
                int q = t * (int)s / 4, shift = t * (int)s % 4 * 8;
                buf_printf(out, "%sconst %s v%d_%d = (%s)", ind, type, j, t, type);
                if (s == 4)
                    buf_printf(out, "%s(", dt == CT_F32 ? "__uint_as_float" : "(int)");
                else
                    buf_printf(out, "%s((%s)(", conv, s == 2 ? "unsigned short" : "unsigned char");
                vec_word(V, s, var, q, out);
                buf_printf(out, s == 4 ? ");\n" : " >> %d));\n", shift);
            }
            continue;
        }
        for (int t = 0; t < V; t++) {
            buf_printf(out, "%sconst %s v%d_%d = ", ind, type, j, t);
            if (r == VR_ONE && t > 0)
                buf_printf(out, "v%d_0;\n", j);
            else if (r == VR_EACH)
                buf_printf(out, "(%s)%s(b%d[o%d_%d]);\n", type, conv, in->buf, in->view, t);
            else
                buf_printf(out, "(%s)%s(b%d[o%d + %lldLL]);\n", type, conv, in->buf, in->view,
                           (long long)(r == VR_ONE ? 0 : t * stride));
        }
    }
}

/* The stores of a chunk: each V values packed into one access. */
static void vec_stores(const KirKernel *k, const KirLoop *l, int V, const char *ind, CtBuf *out)
{
    for (int j = 0; j < l->nins; j++) {
        const KirInstr *in = &l->ins[j];
        if (in->op != KIR_STORE)
            continue;
        CtDType dt = k->bufs[in->buf].dtype;
        size_t s = ct_dtype_size(dt);
        int words = V * (int)s / 4;
        const char *type = vec_type(V, s);
        buf_printf(out, "%s{\n%s    %s s;\n", ind, ind, type);
        for (int q = 0; q < words; q++) {
            buf_printf(out, "%s    ", ind);
            vec_word(V, s, "s", q, out);
            buf_printf(out, " = ");
            for (int t = q * 4 / (int)s; t < (q + 1) * 4 / (int)s; t++) {
                int shift = t * (int)s % 4 * 8;
                buf_printf(out, "%s", shift ? " | " : "");
                switch (dt) {
                case CT_F32: buf_printf(out, "__float_as_uint((float)v%d_%d)", in->a, t); break;
                case CT_I32: buf_printf(out, "(unsigned int)(int)v%d_%d", in->a, t); break;
                case CT_F16: case CT_BF16:
                    buf_printf(out, "(unsigned int)%s((float)v%d_%d)", dt == CT_F16 ? "ct_f2h" : "ct_f2bf", in->a, t);
                    break;
                default: buf_printf(out, "(unsigned int)(%s)v%d_%d", render_storage_type(dt), in->a, t); break;
                }
                if (shift)
                    buf_printf(out, " << %d", shift);
            }
            buf_printf(out, ";\n");
        }
        buf_printf(out, "%s    CT_VEC(%s, b%d + i0) = s;\n%s}\n", ind, type, in->buf, ind);
    }
}

/* Whether every buffer loop l accesses in vectors is aligned to its
 * access: an expression, 0 when it is. */
static void vec_misalignment(const KirKernel *k, const KirLoop *l, int V, CtBuf *out)
{
    int *need = calloc((size_t)k->nbufs, sizeof *need);
    CT_ASSERT(need != NULL);
    for (int j = 0; j < l->nins; j++) {
        const KirInstr *in = &l->ins[j];
        int64_t stride;
        if (in->op == KIR_STORE || (in->op == KIR_LOAD && vec_read(&l->views[in->view], V, &stride) == VR_VECTOR))
            need[in->buf] = V * (int)ct_dtype_size(k->bufs[in->buf].dtype);
    }
    const char *sep = "";
    for (int b = 0; b < k->nbufs; b++)
        if (need[b]) {
            buf_printf(out, "%s((unsigned long long)b%d & %dULL)", sep, b, need[b] - 1);
            sep = " | ";
        }
    free(need);
}

/* The main part in chunks of V elements, each thread's from element i on;
 * i then past the chunks. */
static void render_vector_part(const KirKernel *k, const KirLoop *l, int V, const char *ind, CtBuf *out)
{
    long long chunks = (long long)l->numel / V;
    const char *type = l->compute == CT_F32 ? "float" : "double";
    char in2[32], at[32], x[8];
    snprintf(in2, sizeof in2, "%s    ", ind);
    buf_printf(out, "%sfor (long long c = i; c < %lldLL; c += step) {\n", ind, chunks);
    buf_printf(out, "%sconst long long i0 = c * %d;\n", in2, V);
    for (int j = 0; j < l->nviews; j++) {
        int64_t stride;
        if (vec_read(&l->views[j], V, &stride) != VR_EACH) {
            render_view_offset(&l->views[j], j, "o", "", "i0", in2, out);
            continue;
        }
        for (int t = 0; t < V; t++) {
            snprintf(at, sizeof at, "i0 + %d", t);
            snprintf(x, sizeof x, "_%d", t);
            render_view_offset(&l->views[j], j, "o", x, at, in2, out);
        }
    }
    vec_loads(k, l, V, type, in2, out);
    for (int t = 0; t < V; t++) {
        snprintf(x, sizeof x, "_%d", t);
        render_body_part(k, l, in2, x, RENDER_VALUES, out);
    }
    vec_stores(k, l, V, in2, out);
    buf_printf(out, "%s}\n%si += %lldLL;\n", ind, ind, chunks * V);
}

/* The main part in groups of CT_ELEMENTS elements step apart. */
static void render_grouped_part(const KirKernel *k, const KirLoop *l, const char *ind, CtBuf *out)
{
    char in2[32], x[CT_ELEMENTS][8];
    snprintf(in2, sizeof in2, "%s    ", ind);
    buf_printf(out, "%sfor (; i + %d * step < %lldLL; i += %d * step) {\n", ind, CT_ELEMENTS - 1,
               (long long)l->numel, CT_ELEMENTS);
    for (int u = 0; u < CT_ELEMENTS; u++) {
        snprintf(x[u], sizeof x[u], "_%d", u);
        buf_printf(out, "%sconst long long i%s = i + %d * step;\n", in2, x[u], u);
        render_body_part(k, l, in2, x[u], RENDER_ALL & ~RENDER_STORES, out);
    }
    for (int u = 0; u < CT_ELEMENTS; u++)
        render_body_part(k, l, in2, x[u], RENDER_STORES, out);
    buf_printf(out, "%s}\n", ind);
}

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
        int V = n >= CUDA_GROUPED_FROM ? vec_width(k, l) : 0;
        buf_printf(out, "    {\n        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n");
        if (V) {
            /* the buffers' addresses are known at launch only (a view may
             * start inside another value's memory) */
            buf_printf(out, "        if ((");
            vec_misalignment(k, l, V, out);
            buf_printf(out, ") == 0) {\n");
            render_vector_part(k, l, V, "            ", out);
            buf_printf(out, "        } else {\n");
            render_grouped_part(k, l, "            ", out);
            buf_printf(out, "        }\n");
        } else if (n >= CUDA_GROUPED_FROM) {
            render_grouped_part(k, l, "        ", out);
        }
        buf_printf(out, "        for (; i < %lldLL; i += step) {\n", n);
        render_body(k, l, "            ", 0, out);
        buf_printf(out, "        }\n    }\n");
    }
    buf_printf(out, "}\n");
}
