/*
 * The kernel side of the SIMT harness (runtime/cuda_sim/simt.h): C++ text
 * put in front of a CUDA C source (after sim_abi.h) so that the host's C++
 * compiler builds it into a module the harness runs. It gives the source
 * what NVRTC gives it without headers, as CUDA defines it:
 *
 *   qualifiers   __global__ __device__ __host__ __forceinline__ __noinline__
 *                __align__(n) __launch_bounds__(...) __constant__
 *                __grid_constant__ (__restrict__ is g++'s own)
 *   built-ins    threadIdx blockIdx (uint3), blockDim gridDim (read as uint3,
 *                convertible to dim3), warpSize
 *   __shared__   per-block static storage in the section ct_sim_shared,
 *                which the harness fills with 0xFF bytes before every block
 *   barriers     __syncthreads(), __syncthreads_count/_and/_or(pred)
 *   warps        __syncwarp, __shfl_sync/_up/_down/_xor (any type of at most
 *                8 bytes), __ballot_sync __any_sync __all_sync __activemask,
 *                __reduce_add/min/max_sync (int, unsigned) and
 *                __reduce_and/or/xor_sync (unsigned)
 *   atomics      atomicAdd Sub Exch Min Max Inc Dec CAS And Or Xor over
 *                CUDA's types (and _block/_system forms): the threads of a
 *                launch take turns on one host thread, so a plain
 *                read-modify-write is atomic
 *   bits         __float_as_uint __uint_as_float __float_as_int
 *                __int_as_float __longlong_as_double __double_as_longlong,
 *                __clz __popc __ffs __brev (and ll forms), __byte_perm
 *                __umulhi __mulhi __umul64hi __mul64hi __funnelshift_l/_r
 *   math         <math.h>, and CUDA's fast or rounded forms (__expf __logf
 *                __powf __sinf rsqrtf __fdividef __saturatef __fmul_rn
 *                __float2int_rn ...), min/max over mixed types
 *   half, bf16   __half (half), __nv_bfloat16 (nv_bfloat16), __half2,
 *                __nv_bfloat162: conversions rounding to nearest even, NaN
 *                kept; arithmetic and comparisons in float
 *   vectors      char1..4 uchar short ushort int uint long ulong longlong
 *                ulonglong float double, CUDA's alignments, make_<type>
 *   loads        __ldg __ldcg __ldca __ldcs __ldlu __ldcv, __stwb __stcg
 *                __stcs __stwt: plain accesses
 *
 * Dynamic shared memory: CUDA's `extern __shared__ T s[];` cannot be made
 * by a macro here (__shared__ must be `static`, which `extern` contradicts).
 * A kernel meant for both writes CT_DYN_SHARED(T, s); with NVRTC that is
 * `#define CT_DYN_SHARED(T, name) extern __shared__ T name[]` (to be put in
 * the cuda target's prelude beside the first kernel that needs it), here it
 * is `T *const s = (T *)ct_dyn_shared()`.
 *
 * CT_SIMT is defined; __CUDA_ARCH__ and __CUDACC_RTC__ are not, so text
 * that tests them takes its host branch. The source includes no CUDA header
 * (ctimm's kernels include none: NVRTC compiles them without).
 */
#include <assert.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <utility>

#define CT_SIMT 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __constant__
#define __grid_constant__
/* static: one instance per module, which is one block at a time; used: the
 * compiler must not assume that a call into the harness leaves it unchanged */
#define __shared__ static __attribute__((section("ct_sim_shared"), used))

static CtSimCtx *ct_sim_;

/* The section always exists, so that its bounds are defined. */
static char ct_sim_shared_anchor_[1] __attribute__((section("ct_sim_shared"), used));
extern "C" char __start_ct_sim_shared[] __attribute__((visibility("hidden")));
extern "C" char __stop_ct_sim_shared[] __attribute__((visibility("hidden")));

extern "C" __attribute__((visibility("default"))) void ct_sim_bind(CtSimCtx *c)
{
    ct_sim_ = c;
    c->shared_begin = __start_ct_sim_shared;
    c->shared_end = __stop_ct_sim_shared;
}

/* Around every call into the harness: another thread ran meanwhile, so
 * nothing read from memory before the call holds after it. */
#define CT_SIM_FENCE() __asm__ __volatile__("" ::: "memory")

/* ---- built-in variables ---- */

typedef CtSimDim uint3;

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(CtSimDim d) : x(d.x), y(d.y), z(d.z) {}
    constexpr operator CtSimDim() const { return CtSimDim{x, y, z}; }
};

#define threadIdx (static_cast<const CtSimDim &>(ct_sim_->thread_idx))
#define blockIdx (static_cast<const CtSimDim &>(ct_sim_->block_idx))
#define blockDim (static_cast<const CtSimDim &>(ct_sim_->block_dim))
#define gridDim (static_cast<const CtSimDim &>(ct_sim_->grid_dim))
static const int warpSize = 32;

static inline void *ct_dyn_shared(void) { return ct_sim_->dyn_shared; }
#define CT_DYN_SHARED(T, name) T *const name = (T *)ct_dyn_shared()

/* ---- barriers and warps ---- */

static inline int ct_sim_barrier_(int op, int pred)
{
    CT_SIM_FENCE();
    int r = ct_sim_->barrier(ct_sim_, op, pred != 0);
    CT_SIM_FENCE();
    return r;
}
static inline void __syncthreads(void) { ct_sim_barrier_(CT_SIM_SYNC, 0); }
static inline int __syncthreads_count(int pred) { return ct_sim_barrier_(CT_SIM_SYNC_COUNT, pred); }
static inline int __syncthreads_and(int pred) { return ct_sim_barrier_(CT_SIM_SYNC_AND, pred); }
static inline int __syncthreads_or(int pred) { return ct_sim_barrier_(CT_SIM_SYNC_OR, pred); }
static inline void __threadfence(void) { CT_SIM_FENCE(); }
static inline void __threadfence_block(void) { CT_SIM_FENCE(); }
static inline void __threadfence_system(void) { CT_SIM_FENCE(); }

[[noreturn]] static inline void __trap(void)
{
    ct_sim_->trap(ct_sim_);
    __builtin_unreachable();
}

template <class T> static inline unsigned long long ct_sim_bits_(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a warp exchange moves at most 8 bytes");
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}

template <class T> static inline T ct_sim_warp_(int op, unsigned int mask, T v, int arg, int width)
{
    CT_SIM_FENCE();
    unsigned long long b = ct_sim_->warp(ct_sim_, op, mask, ct_sim_bits_(v), arg, width);
    CT_SIM_FENCE();
    T r;
    memcpy(&r, &b, sizeof r);
    return r;
}

static inline void __syncwarp(unsigned int mask = 0xffffffffu) { ct_sim_warp_(CT_SIM_SYNCWARP, mask, 0, 0, 32); }
template <class T> static inline T __shfl_sync(unsigned int mask, T v, int src, int width = 32)
{
    return ct_sim_warp_(CT_SIM_SHFL_IDX, mask, v, src, width);
}
template <class T> static inline T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = 32)
{
    return ct_sim_warp_(CT_SIM_SHFL_UP, mask, v, (int)delta, width);
}
template <class T> static inline T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = 32)
{
    return ct_sim_warp_(CT_SIM_SHFL_DOWN, mask, v, (int)delta, width);
}
template <class T> static inline T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = 32)
{
    return ct_sim_warp_(CT_SIM_SHFL_XOR, mask, v, lane_mask, width);
}
static inline unsigned int __ballot_sync(unsigned int mask, int pred)
{
    return ct_sim_warp_(CT_SIM_BALLOT, mask, (unsigned int)(pred != 0), 0, 32);
}
static inline int __any_sync(unsigned int mask, int pred) { return ct_sim_warp_(CT_SIM_ANY, mask, pred != 0, 0, 32); }
static inline int __all_sync(unsigned int mask, int pred) { return ct_sim_warp_(CT_SIM_ALL, mask, pred != 0, 0, 32); }
static inline unsigned int __activemask(void) { return ct_sim_->active(ct_sim_); }
/* the reductions: unsigned and int forms of add, min, max; unsigned and, or, xor */
#define CT_SIM_REDUCE(NAME, T, OP)                                                                      \
    static inline T NAME(unsigned int mask, T v) { return ct_sim_warp_(OP, mask, v, 0, 32); }
CT_SIM_REDUCE(__reduce_add_sync, unsigned int, CT_SIM_REDUCE_ADD)
CT_SIM_REDUCE(__reduce_add_sync, int, CT_SIM_REDUCE_ADD)
CT_SIM_REDUCE(__reduce_min_sync, unsigned int, CT_SIM_REDUCE_MIN_U)
CT_SIM_REDUCE(__reduce_min_sync, int, CT_SIM_REDUCE_MIN_I)
CT_SIM_REDUCE(__reduce_max_sync, unsigned int, CT_SIM_REDUCE_MAX_U)
CT_SIM_REDUCE(__reduce_max_sync, int, CT_SIM_REDUCE_MAX_I)
CT_SIM_REDUCE(__reduce_and_sync, unsigned int, CT_SIM_REDUCE_AND)
CT_SIM_REDUCE(__reduce_or_sync, unsigned int, CT_SIM_REDUCE_OR)
CT_SIM_REDUCE(__reduce_xor_sync, unsigned int, CT_SIM_REDUCE_XOR)

/* ---- bit casts and integer intrinsics ---- */

template <class To, class From> static inline To ct_sim_cast_(From v)
{
    static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
    To r;
    memcpy(&r, &v, sizeof r);
    return r;
}
static inline unsigned int __float_as_uint(float x) { return ct_sim_cast_<unsigned int>(x); }
static inline float __uint_as_float(unsigned int x) { return ct_sim_cast_<float>(x); }
static inline int __float_as_int(float x) { return ct_sim_cast_<int>(x); }
static inline float __int_as_float(int x) { return ct_sim_cast_<float>(x); }
static inline double __longlong_as_double(long long x) { return ct_sim_cast_<double>(x); }
static inline long long __double_as_longlong(double x) { return ct_sim_cast_<long long>(x); }
static inline int __double2hiint(double x) { return (int)(__double_as_longlong(x) >> 32); }
static inline int __double2loint(double x) { return (int)__double_as_longlong(x); }
static inline double __hiloint2double(int hi, int lo)
{
    return __longlong_as_double((long long)(((unsigned long long)(unsigned int)hi << 32) | (unsigned int)lo));
}

static inline int __clz(int x) { return x ? __builtin_clz((unsigned int)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned int __brev(unsigned int x)
{
    unsigned int r = 0;
    for (int i = 0; i < 32; i++, x >>= 1)
        r = (r << 1) | (x & 1);
    return r;
}
static inline unsigned long long __brevll(unsigned long long x)
{
    return ((unsigned long long)__brev((unsigned int)x) << 32) | __brev((unsigned int)(x >> 32));
}
static inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s)
{
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned int r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned int)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
static inline unsigned int __umulhi(unsigned int a, unsigned int b)
{
    return (unsigned int)(((unsigned long long)a * b) >> 32);
}
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
static inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int s)
{
    return (unsigned int)((((unsigned long long)hi << 32 | lo) << (s & 31)) >> 32);
}
static inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int s)
{
    return (unsigned int)(((unsigned long long)hi << 32 | lo) >> (s & 31));
}

/* ---- math ---- */

/* CUDA's fast forms are the plain functions here; glibc declares the same
 * names (its internal aliases of them), so they are macros, not functions */
#define __expf expf
#define __exp10f exp10f
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __powf powf
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __sincosf sincosf
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline double rcbrt(double x) { return 1.0 / cbrt(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float fdividef(float a, float b) { return a / b; }
/* NaN gives 0, as on the device */
static inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __drcp_rn(double x) { return 1.0 / x; }
static inline double __dsqrt_rn(double x) { return sqrt(x); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned int __float2uint_rn(float x) { return (unsigned int)nearbyintf(x); }
static inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
static inline int __double2int_rn(double x) { return (int)nearbyint(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned int x) { return (float)x; }
static inline float __ll2float_rn(long long x) { return (float)x; }
static inline float __double2float_rn(double x) { return (float)x; }

/* CUDA's min and max take any two arithmetic types; floating point ones
 * keep the number against a NaN (fmin/fmax). */
template <class A, class B, class C = typename std::common_type<A, B>::type> static inline C min(A a, B b)
{
    if constexpr (std::is_floating_point<C>::value)
        return fmin((C)a, (C)b);
    else
        return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B, class C = typename std::common_type<A, B>::type> static inline C max(A a, B b)
{
    if constexpr (std::is_floating_point<C>::value)
        return fmax((C)a, (C)b);
    else
        return (C)a < (C)b ? (C)b : (C)a;
}

/* ---- half and bfloat16 ---- */

/* float -> IEEE half, rounding to nearest even; NaN stays a (quiet) NaN. */
static inline unsigned short ct_sim_f2h_(float f)
{
    unsigned int x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* at least 65520: rounds to infinity */
        return (unsigned short)(sign | 0x7c00u);
    if (ax < 0x38800000u) /* below 2^-14: a subnormal half, exact in float arithmetic */
        return (unsigned short)(sign | (unsigned int)nearbyintf(__uint_as_float(ax) * 16777216.0f));
    unsigned int r = ax - 0x38000000u; /* rebias the exponent by 112 */
    r += 0xfffu + ((r >> 13) & 1);
    return (unsigned short)(sign | (r >> 13));
}
static inline float ct_sim_h2f_(unsigned short h)
{
    unsigned int e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float v = e == 0 ? ldexpf((float)m, -24)
              : e == 31 ? __uint_as_float(0x7f800000u | (m << 13))
                        : __uint_as_float(((e + 112) << 23) | (m << 13));
    return h & 0x8000u ? -v : v;
}
static inline unsigned short ct_sim_f2bf_(float f)
{
    unsigned int x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((x >> 16) | 0x40u);
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}
static inline float ct_sim_bf2f_(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }

struct __half_raw {
    unsigned short x;
};
struct __nv_bfloat16_raw {
    unsigned short x;
};

/* A 16-bit float stored as bits, read as float: the operators of CUDA's
 * __half compute in float and round once when stored back. */
#define CT_SIM_HALF_TYPE(T, RAW, TO, FROM)                                                              \
    struct __align__(2) T {                                                                             \
        unsigned short __x;                                                                             \
        T() = default;                                                                                  \
        constexpr T(RAW r) : __x(r.x) {}                                                                \
        template <class N, class = typename std::enable_if<std::is_arithmetic<N>::value>::type>          \
        T(N v) : __x(TO((float)v)) {}                                                                   \
        operator float() const { return FROM(__x); }                                                    \
        operator RAW() const { return RAW{__x}; }                                                       \
        T &operator+=(float v) { return *this = T(FROM(__x) + v); }                                     \
        T &operator-=(float v) { return *this = T(FROM(__x) - v); }                                     \
        T &operator*=(float v) { return *this = T(FROM(__x) * v); }                                     \
        T &operator/=(float v) { return *this = T(FROM(__x) / v); }                                     \
    };
CT_SIM_HALF_TYPE(__half, __half_raw, ct_sim_f2h_, ct_sim_h2f_)
CT_SIM_HALF_TYPE(__nv_bfloat16, __nv_bfloat16_raw, ct_sim_f2bf_, ct_sim_bf2f_)
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;

struct __align__(4) __half2 {
    __half x, y;
};
struct __align__(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

static inline float __half2float(__half h) { return ct_sim_h2f_(h.__x); }
static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline __half __double2half(double d) { return __half((float)d); } /* via float: rounds twice */
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }
static inline __half __short_as_half(short s) { return __half(__half_raw{(unsigned short)s}); }
static inline float __bfloat162float(__nv_bfloat16 h) { return ct_sim_bf2f_(h.__x); }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16((float)d); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
static inline __nv_bfloat16 __short_as_bfloat16(short s) { return __nv_bfloat16(__nv_bfloat16_raw{(unsigned short)s}); }

/* CUDA's half intrinsics, for both 16-bit types: each rounds its float result once. */
#define CT_SIM_HALF_OPS(T)                                                                              \
    static inline T __hadd(T a, T b) { return T((float)a + (float)b); }                                 \
    static inline T __hsub(T a, T b) { return T((float)a - (float)b); }                                 \
    static inline T __hmul(T a, T b) { return T((float)a * (float)b); }                                 \
    static inline T __hdiv(T a, T b) { return T((float)a / (float)b); }                                 \
    static inline T __hneg(T a) { return T(-(float)a); }                                                \
    static inline T __habs(T a) { return T(fabsf((float)a)); }                                          \
    static inline T __hfma(T a, T b, T c) { return T(fmaf((float)a, (float)b, (float)c)); }             \
    static inline T __hmax(T a, T b) { return T(fmaxf((float)a, (float)b)); }                           \
    static inline T __hmin(T a, T b) { return T(fminf((float)a, (float)b)); }                           \
    static inline bool __heq(T a, T b) { return (float)a == (float)b; }                                 \
    static inline bool __hne(T a, T b) { return (float)a != (float)b; }                                 \
    static inline bool __hlt(T a, T b) { return (float)a < (float)b; }                                  \
    static inline bool __hle(T a, T b) { return (float)a <= (float)b; }                                 \
    static inline bool __hgt(T a, T b) { return (float)a > (float)b; }                                  \
    static inline bool __hge(T a, T b) { return (float)a >= (float)b; }                                 \
    static inline bool __hisnan(T a) { return isnan((float)a); }                                        \
    static inline int __hisinf(T a) { return isinf((float)a) ? ((float)a < 0 ? -1 : 1) : 0; }
CT_SIM_HALF_OPS(__half)
CT_SIM_HALF_OPS(__nv_bfloat16)

/* ---- vector types (CUDA's alignments) ---- */

#define CT_SIM_VEC1(T, N, A)                                                                            \
    struct __align__(A) N##1 { T x; };                                                                  \
    static inline N##1 make_##N##1(T x) { return N##1{x}; }
#define CT_SIM_VEC2(T, N, A)                                                                            \
    struct __align__(A) N##2 { T x, y; };                                                               \
    static inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define CT_SIM_VEC3(T, N)                                                                               \
    struct N##3 { T x, y, z; };                                                                         \
    static inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define CT_SIM_VEC4(T, N, A)                                                                            \
    struct __align__(A) N##4 { T x, y, z, w; };                                                         \
    static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
#define CT_SIM_VEC(T, N, A1, A2, A4) CT_SIM_VEC1(T, N, A1) CT_SIM_VEC2(T, N, A2) CT_SIM_VEC3(T, N) CT_SIM_VEC4(T, N, A4)
CT_SIM_VEC(signed char, char, 1, 2, 4)
CT_SIM_VEC(unsigned char, uchar, 1, 2, 4)
CT_SIM_VEC(short, short, 2, 4, 8)
CT_SIM_VEC(unsigned short, ushort, 2, 4, 8)
CT_SIM_VEC(int, int, 4, 8, 16)
CT_SIM_VEC(long, long, 8, 16, 16)
CT_SIM_VEC(unsigned long, ulong, 8, 16, 16)
CT_SIM_VEC(long long, longlong, 8, 16, 16)
CT_SIM_VEC(unsigned long long, ulonglong, 8, 16, 16)
CT_SIM_VEC(float, float, 4, 8, 16)
CT_SIM_VEC(double, double, 8, 16, 16)
/* uint3 is the built-ins' type (CtSimDim) */
CT_SIM_VEC1(unsigned int, uint, 4)
CT_SIM_VEC2(unsigned int, uint, 8)
CT_SIM_VEC4(unsigned int, uint, 16)
static inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }

static inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
static inline __half2 __float2half2_rn(float a) { return __half2{__half(a), __half(a)}; }
static inline __half2 __float22half2_rn(float2 f) { return __half2{__half(f.x), __half(f.y)}; }
static inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
static inline float __low2float(__half2 h) { return (float)h.x; }
static inline float __high2float(__half2 h) { return (float)h.y; }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
    return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)};
}
static inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{(float)h.x, (float)h.y}; }
static inline float __low2float(__nv_bfloat162 h) { return (float)h.x; }
static inline float __high2float(__nv_bfloat162 h) { return (float)h.y; }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }

/* ---- atomics: one host thread runs every CUDA thread, switching only in the harness ---- */

#define CT_SIM_ATOMIC(NAME, T, NEW)                                                                     \
    static inline T NAME(T *p, T v)                                                                     \
    {                                                                                                   \
        T o = *p;                                                                                       \
        *p = (NEW);                                                                                     \
        return o;                                                                                       \
    }
/* integer sums wrap as on the device: computed unsigned */
CT_SIM_ATOMIC(atomicAdd, int, (int)((unsigned int)o + (unsigned int)v))
CT_SIM_ATOMIC(atomicAdd, unsigned int, o + v)
CT_SIM_ATOMIC(atomicAdd, unsigned long long, o + v)
CT_SIM_ATOMIC(atomicAdd, float, o + v)
CT_SIM_ATOMIC(atomicAdd, double, o + v)
CT_SIM_ATOMIC(atomicAdd, __half, __half((float)o + (float)v))
CT_SIM_ATOMIC(atomicAdd, __nv_bfloat16, __nv_bfloat16((float)o + (float)v))
CT_SIM_ATOMIC(atomicAdd, __half2, __floats2half2_rn((float)o.x + (float)v.x, (float)o.y + (float)v.y))
CT_SIM_ATOMIC(atomicAdd, __nv_bfloat162, __floats2bfloat162_rn((float)o.x + (float)v.x, (float)o.y + (float)v.y))
CT_SIM_ATOMIC(atomicAdd, float2, make_float2(o.x + v.x, o.y + v.y))
CT_SIM_ATOMIC(atomicAdd, float4, make_float4(o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w))
CT_SIM_ATOMIC(atomicSub, int, (int)((unsigned int)o - (unsigned int)v))
CT_SIM_ATOMIC(atomicSub, unsigned int, o - v)
CT_SIM_ATOMIC(atomicExch, int, v)
CT_SIM_ATOMIC(atomicExch, unsigned int, v)
CT_SIM_ATOMIC(atomicExch, unsigned long long, v)
CT_SIM_ATOMIC(atomicExch, float, v)
CT_SIM_ATOMIC(atomicMin, int, v < o ? v : o)
CT_SIM_ATOMIC(atomicMin, unsigned int, v < o ? v : o)
CT_SIM_ATOMIC(atomicMin, long long, v < o ? v : o)
CT_SIM_ATOMIC(atomicMin, unsigned long long, v < o ? v : o)
CT_SIM_ATOMIC(atomicMax, int, v > o ? v : o)
CT_SIM_ATOMIC(atomicMax, unsigned int, v > o ? v : o)
CT_SIM_ATOMIC(atomicMax, long long, v > o ? v : o)
CT_SIM_ATOMIC(atomicMax, unsigned long long, v > o ? v : o)
CT_SIM_ATOMIC(atomicInc, unsigned int, o >= v ? 0u : o + 1)
CT_SIM_ATOMIC(atomicDec, unsigned int, o == 0 || o > v ? v : o - 1)
CT_SIM_ATOMIC(atomicAnd, int, o & v)
CT_SIM_ATOMIC(atomicAnd, unsigned int, o & v)
CT_SIM_ATOMIC(atomicAnd, unsigned long long, o & v)
CT_SIM_ATOMIC(atomicOr, int, o | v)
CT_SIM_ATOMIC(atomicOr, unsigned int, o | v)
CT_SIM_ATOMIC(atomicOr, unsigned long long, o | v)
CT_SIM_ATOMIC(atomicXor, int, o ^ v)
CT_SIM_ATOMIC(atomicXor, unsigned int, o ^ v)
CT_SIM_ATOMIC(atomicXor, unsigned long long, o ^ v)
#define CT_SIM_ATOMIC_CAS(T)                                                                            \
    static inline T atomicCAS(T *p, T cmp, T v)                                                         \
    {                                                                                                   \
        T o = *p;                                                                                       \
        if (o == cmp)                                                                                   \
            *p = v;                                                                                     \
        return o;                                                                                       \
    }
CT_SIM_ATOMIC_CAS(int)
CT_SIM_ATOMIC_CAS(unsigned int)
CT_SIM_ATOMIC_CAS(unsigned long long)
CT_SIM_ATOMIC_CAS(unsigned short)
/* one block at a time, one device: every scope is the same */
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicSub_block atomicSub
#define atomicSub_system atomicSub
#define atomicExch_block atomicExch
#define atomicExch_system atomicExch
#define atomicMin_block atomicMin
#define atomicMin_system atomicMin
#define atomicMax_block atomicMax
#define atomicMax_system atomicMax
#define atomicCAS_block atomicCAS
#define atomicCAS_system atomicCAS

/* ---- cache-hinted loads and stores: plain accesses here ---- */

template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
template <class T> static inline T __ldca(const T *p) { return *p; }
template <class T> static inline T __ldcs(const T *p) { return *p; }
template <class T> static inline T __ldlu(const T *p) { return *p; }
template <class T> static inline T __ldcv(const T *p) { return *p; }
template <class T> static inline void __stwb(T *p, T v) { *p = v; }
template <class T> static inline void __stcg(T *p, T v) { *p = v; }
template <class T> static inline void __stcs(T *p, T v) { *p = v; }
template <class T> static inline void __stwt(T *p, T v) { *p = v; }

/* ---- launch entries: kernel(args...) from cuLaunchKernel's kernelParams ---- */

template <class... A, size_t... I> static inline void ct_sim_call_(void (*k)(A...), void **p, std::index_sequence<I...>)
{
    (void)p;
    k(*static_cast<typename std::remove_cv<typename std::remove_reference<A>::type>::type *>(p[I])...);
}
template <class... A> static inline void ct_sim_call(void (*k)(A...), void **p)
{
    ct_sim_call_(k, p, std::index_sequence_for<A...>{});
}
