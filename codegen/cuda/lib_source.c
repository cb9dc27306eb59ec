/* Contract: lib_source(t) gives the CUDA C unit defining every library
 * kernel for storage type t, lib_kernel_names(t) their names. */
#include "codegen/cuda/lib_source.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "codegen/render.h"
#include "ir/ops.h"
#include "ir/status.h"

/* made at build time from codegen/cuda/lib_common.h, lib_kernels.h, ir/formulas.h and ir/counter_rng.h */
extern const char ct_lib_common_text[];
extern const char ct_lib_kernels_text[];
extern const char ct_formulas_text[];
extern const char ct_counter_rng_text[];

/* The storage types the kernels are pasted for, by LibType. */
static const struct {
    const char *type, *load, *store, *suffix, *acc, *mma; /* mma: the tensor cores' type, 16-bit only */
} storage[LIB_NTYPES] = {
    {"float", "(v)", "(f)", "_f32", "double", NULL},
    {"unsigned short", "ct_h2f(v)", "ct_f2h(f)", "_f16", "float", "f16"},
    {"unsigned short", "ct_bf2f(v)", "ct_f2bf(f)", "_bf16", "float", "bf16"},
};

void lib_source(LibType t, CtBuf *out)
{
    CT_ASSERT(t >= 0 && t < LIB_NTYPES);
    render_cuda_prelude(out);
    buf_printf(out, "#define CT_DEVICE static __device__ __forceinline__\n"
                    "#define CT_GLOBAL extern \"C\" __global__ void\n"
                    "#define CT_LOOP(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                    "i < (n); i += (long long)blockDim.x * gridDim.x)\n"
                    "#define CT_FIRST ((long long)blockIdx.x * blockDim.x + threadIdx.x)\n"
                    "#define CT_STRIDE ((long long)blockDim.x * gridDim.x)\n"
                    "#define CT_BLOCK_LOOP(i, n) for (long long i = blockIdx.x; i < (n); i += gridDim.x)\n"
                    "#define CT_TID ((long long)threadIdx.x)\n#define CT_NTHREADS ((long long)blockDim.x)\n"
                    "#define CT_SYNC() __syncthreads()\n#define CT_SHARED __shared__\n"
                    "#define CT_FENCE() __threadfence()\n#define CT_ATOMIC_INC(p) atomicAdd((p), 1u)\n"
                    "#define CT_GLOBAL16 CT_GLOBAL\n"
                    "#define CT_BOUNDS(blocks) __launch_bounds__(CT_LIB_BLOCK, blocks)\n"
                    "#define CT_V16_LD(u, p) ((u).v = CT_VEC(const ct_u4, (p)))\n"
                    "#define CT_V16_ST(p, u) (CT_VEC(ct_u4, (p)) = (u).v)\n"
                    "#ifdef CT_SIMT\n#define CT_UNROLL\n#else\n#define CT_UNROLL _Pragma(\"unroll\")\n#endif\n"
                    "#ifndef CT_SIMT\n#define CT_DYN_SHARED(T, name) extern __shared__ T name[]\n#endif\n"
                    "#define CT_LANES 32LL\n#define CT_LANE ((long long)(threadIdx.x & 31))\n"
                    "#define CT_WARP_LOOP(i, n) for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) "
                    "/ 32; i < (n); i += (long long)blockDim.x * gridDim.x / 32)\n"
                    /* xor butterflies: each step adds the same two numbers in every lane of a pair */
                    "#define CT_LANE_SUM(v) ct_lane_sum(v)\n"
                    "CT_DEVICE double ct_lane_sum(double v)\n{\n"
                    "    for (int m = 16; m > 0; m >>= 1)\n        v += __shfl_xor_sync(0xffffffffu, v, m);\n"
                    "    return v;\n}\n"
                    /* the same within `lanes` (a power of two) of aligned lanes */
                    "#define CT_SEG_SUM(v, lanes) ct_seg_sum(v, lanes)\n"
                    "CT_DEVICE double ct_seg_sum(double v, int lanes)\n{\n"
                    "    for (int m = lanes >> 1; m > 0; m >>= 1)\n        v += __shfl_xor_sync(0xffffffffu, v, m);\n"
                    "    return v;\n}\n");
    buf_printf(out, "%s\n", ct_lib_common_text);
    /* the activations' formulas, over float as the generated kernels compute */
    buf_printf(out, "enum {");
    for (int op = 0; op < CT_NOPS; op++)
        buf_printf(out, " CT_OP_%s = %d,", op_def((CtOp)op)->name, op);
    buf_printf(out, " };\n#define FX_T float\n#define FX_FN CT_DEVICE\n#define FX_EXP ct_expf\n#define FX_SQRT sqrtf\n"
                    "#define FX_ERF ct_erff\n#define FX_TANH ct_tanhf\n#define FX_POW powf\n%s\n",
               ct_formulas_text);
    buf_printf(out, "#define CRNG_FN CT_DEVICE\n%s\n", ct_counter_rng_text);
    buf_printf(out,
               "#define CT_T %s\n#define CT_LD(v) %s\n#define CT_ST(f) %s\n#define CT_SFX(name) name##%s\n"
               "#define CT_ACC %s\n",
               storage[t].type, storage[t].load, storage[t].store, storage[t].suffix, storage[t].acc);
    if (storage[t].mma)
        buf_printf(out,
                   "#define CT_MMA16 1\n#define CT_MMA16816(d, a, b) asm volatile("
                   "\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 "
                   "{%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, {%%0, %%1, %%2, %%3};\" "
                   ": \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3]) : \"r\"(a[0]), \"r\"(a[1]), "
                   "\"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]))\n",
                   storage[t].mma, storage[t].mma);
    buf_printf(out, "%s\n", ct_lib_kernels_text);
}

/* Each kernel is a line `CT_GLOBAL CT_SFX(name)(` in lib_kernels.h (or
 * `CT_GLOBAL CT_BOUNDS(b) CT_SFX(name)(`), which lib_source pastes for one
 * storage type; CT_GLOBAL16 ones (under CT_MMA16) for the types with
 * tensor cores alone. */
static struct {
    pthread_once_t once;
    char name[512][48];
    const char *table[LIB_NTYPES][512];
    int n[LIB_NTYPES];
} lib_names = {.once = PTHREAD_ONCE_INIT};

static void find_names(void)
{
    static const char *const heads[] = {"\nCT_GLOBAL ", "\nCT_GLOBAL16 "};
    int used = 0;
    for (int t = 0; t < LIB_NTYPES; t++)
        for (int h = 0; h < 2; h++) {
            if (h == 1 && !storage[t].mma)
                continue;
            for (const char *p = strstr(ct_lib_kernels_text, heads[h]); p; p = strstr(p + 1, heads[h])) {
                const char *name = strstr(p, "CT_SFX(") + strlen("CT_SFX(");
                CT_ASSERT(used < 512);
                char *at = lib_names.name[used++];
                snprintf(at, sizeof lib_names.name[0], "%.*s%s", (int)strcspn(name, ")"), name, storage[t].suffix);
                lib_names.table[t][lib_names.n[t]++] = at;
            }
        }
}

const char *const *lib_kernel_names(LibType t, int *n)
{
    CT_ASSERT(t >= 0 && t < LIB_NTYPES);
    pthread_once(&lib_names.once, find_names);
    *n = lib_names.n[t];
    return lib_names.table[t];
}

int lib_kernel_type(const char *name)
{
    pthread_once(&lib_names.once, find_names);
    for (int t = 0; t < LIB_NTYPES; t++)
        for (int k = 0; k < lib_names.n[t]; k++)
            if (!strcmp(lib_names.table[t][k], name))
                return t;
    return -1;
}
