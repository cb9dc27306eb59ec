#include "runtime/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void tensor_alloc(CtTensor *t, CtType type)
{
    t->type = type;
    size_t n = (size_t)shape_numel(&type.shape) * ct_dtype_size(type.dtype);
    t->data = calloc(n ? n : 1, 1);
    CT_ASSERT(t->data != NULL);
}

void tensor_free(CtTensor *t)
{
    free(t->data);
    t->data = NULL;
}

size_t tensor_nbytes(const CtTensor *t)
{
    return (size_t)shape_numel(&t->type.shape) * ct_dtype_size(t->type.dtype);
}

static double round_f16(double x);
static double round_bf16(double x);

/* float -> IEEE half bits, round to nearest even, overflow to infinity. */
static uint16_t f16_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return sign | 0x7e00;
    if (ax >= 0x477ff000u) /* 65520 and up: past half an ulp above 65504 */
        return sign | 0x7c00;
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half, in units of 2^-24 (exact product) */
        float a;
        memcpy(&a, &ax, 4);
        return sign | (uint16_t)nearbyintf(a * 16777216.0f);
    }
    /* rebias the exponent (127 -> 15) and round the 13 dropped bits to even */
    ax += 0xc8000fffu + ((ax >> 13) & 1);
    return sign | (uint16_t)(ax >> 13);
}

static float f16_float(uint16_t h)
{
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0) {
        v = ldexpf((float)m, -24);
    } else if (e == 31) {
        v = m ? NAN : INFINITY;
    } else {
        uint32_t x = ((e + 112) << 23) | (m << 13);
        memcpy(&v, &x, 4);
    }
    return h & 0x8000 ? -v : v;
}

/* float -> bfloat16 bits (float's top half), round to nearest even. */
static uint16_t bf16_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static float bf16_float(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float v;
    memcpy(&v, &x, 4);
    return v;
}

void elems_to_f32(const void *src, CtDType dt, int64_t n, float *dst)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = dt == CT_F16 ? f16_float(h[i]) : dt == CT_BF16 ? bf16_float(h[i]) : ((const float *)src)[i];
}

void elems_from_f32(const float *src, CtDType dt, int64_t n, void *dst)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) {
        if (dt == CT_F16)
            h[i] = f16_bits(src[i]);
        else if (dt == CT_BF16)
            h[i] = bf16_bits(src[i]);
        else
            ((float *)dst)[i] = src[i];
    }
}

int elems_to_double(const void *src, CtDType dt, int64_t n, double *dst)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case CT_F32: dst[i] = ((const float *)src)[i]; break;
        case CT_F64: dst[i] = ((const double *)src)[i]; break;
        case CT_I32: dst[i] = ((const int32_t *)src)[i]; break;
        case CT_I64: dst[i] = (double)((const int64_t *)src)[i]; break;
        case CT_U8: dst[i] = ((const uint8_t *)src)[i]; break;
        case CT_F16: dst[i] = f16_float(((const uint16_t *)src)[i]); break;
        case CT_BF16: dst[i] = bf16_float(((const uint16_t *)src)[i]); break;
        default: return -1;
        }
    }
    return 0;
}

int elems_from_double(const double *src, CtDType dt, int64_t n, void *dst)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case CT_F32: ((float *)dst)[i] = (float)src[i]; break;
        case CT_F64: ((double *)dst)[i] = src[i]; break;
        case CT_I32: ((int32_t *)dst)[i] = (int32_t)llround(src[i]); break;
        case CT_I64: ((int64_t *)dst)[i] = llround(src[i]); break;
        case CT_U8: ((uint8_t *)dst)[i] = (uint8_t)llround(src[i]); break;
        /* rounded in double first: float's own rounding would round twice */
        case CT_F16: ((uint16_t *)dst)[i] = f16_bits((float)round_f16(src[i])); break;
        case CT_BF16: ((uint16_t *)dst)[i] = bf16_bits((float)round_bf16(src[i])); break;
        default: return -1;
        }
    }
    return 0;
}

/* x rounded to nearest-even in a binary format with `bits` significant
 * bits, smallest normal exponent emin (of frexp) and largest finite value
 * vmax, overflowing to infinity as IEEE rounding does. */
static double round_format(double x, int bits, int emin, double vmax)
{
    if (isnan(x) || isinf(x) || x == 0)
        return x;
    double a = fabs(x);
    int e;
    frexp(a, &e);
    if (e < emin)
        e = emin;
    double q = ldexp(1.0, e - bits), r = nearbyint(a / q) * q;
    return copysign(r > vmax ? INFINITY : r, x);
}

/* IEEE half: 11 significant bits, normals from 2^-14; bfloat16: 8 bits,
 * float32's exponent range. */
static double round_f16(double x) { return round_format(x, 11, -13, 65504.0); }
static double round_bf16(double x) { return round_format(x, 8, -125, ldexp(255.0, 120)); }

void elems_round(double *x, CtDType dt, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        switch (dt) {
        case CT_F32: x[i] = (float)x[i]; break;
        case CT_F64: break;
        case CT_F16: x[i] = round_f16(x[i]); break;
        case CT_BF16: x[i] = round_bf16(x[i]); break;
        default: x[i] = nearbyint(x[i]); break;
        }
}
