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

int elems_to_double(const void *src, CtDType dt, int64_t n, double *dst)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case CT_F32: dst[i] = ((const float *)src)[i]; break;
        case CT_F64: dst[i] = ((const double *)src)[i]; break;
        case CT_I32: dst[i] = ((const int32_t *)src)[i]; break;
        case CT_I64: dst[i] = (double)((const int64_t *)src)[i]; break;
        case CT_U8: dst[i] = ((const uint8_t *)src)[i]; break;
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
