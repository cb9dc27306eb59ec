/*
 * f32 exp, tanh and erf that a compiler can vectorise: straight-line code,
 * both sides of every range split computed and one chosen, no calls. libm's
 * are one scalar call per element (its vector variants need -ffast-math),
 * and GELU/SiLU over every activation of a training step made them a third
 * of a ConvNeXt step. Used by the cpu backend's kernels and, as text, by the
 * generated host kernels (host_math_text.c is made from this file at build
 * time), so both compute the same values.
 *
 * Accuracy (tests/test_host_math.c, against libm in double over the whole
 * f32 range): within a few ulp, or 3e-8 absolute where erf is near 1;
 * infinities and NaN propagate as libm's do. The polynomials are least-squares
 * fits with the error levelled (tools/fit_host_math.py): exp's on
 * [-ln2/2, ln2/2] after the usual reduction by powers of two; tanh's on
 * |x| < 0.625, beyond which 1 - 2/(exp(2|x|) + 1) is exact enough; erf's
 * on |x| < 0.9, and beyond erfc(x) = t exp(-x^2 + P(t)), t = 1/(1 + x/2).
 */
#ifndef CTIMM_HOST_MATH_H
#define CTIMM_HOST_MATH_H

#include <math.h>
#include <string.h>

static inline float ct_pow2i(int n)
{
    unsigned int b = (unsigned int)(n + 127) << 23;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static inline float ct_expf(float x)
{
    float c = x > 88.7228394f ? 88.7228394f : x < -103.972084f ? -103.972084f : x;
    /* round to nearest by the 1.5 * 2^23 trick: no libm call, vectorises */
    float n = (c * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = c - n * 0.693359375f - n * -2.12194440e-4f;
    float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
               1.6666665459e-1f) * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    /* 2^n in two factors: n from -150 to 128 overflows one exponent field */
    int ni = (int)n, h = ni / 2;
    y = y * ct_pow2i(h) * ct_pow2i(ni - h);
    y = x > 88.7228394f ? (float)INFINITY : y;
    return x != x ? x + x : y;
}

static inline float ct_tanhf(float x)
{
    float a = x < 0 ? -x : x, z = x * x;
    float small = x * (1.0f + z * ((((-6.11045629e-3f * z + 2.10079515e-2f) * z - 5.38535523e-2f) * z + 1.33327905e-1f) * z -
                                   3.33333292e-1f));
    float big = 1.0f - 2.0f / (ct_expf(2.0f * a) + 1.0f);
    big = x < 0 ? -big : big;
    return a < 0.625f ? small : big;
}

static inline float ct_erff(float x)
{
    float a = x < 0 ? -x : x, z = x * x;
    float small = x * (((((-6.08892531e-4f * z + 5.01166921e-3f) * z - 2.67786980e-2f) * z + 1.12821346e-1f) * z -
                        3.76125226e-1f) * z + 1.12837915f);
    float t = 1.0f / (1.0f + 0.5f * a);
    float q = (((((8.77425196e-2f * t + 4.00594490e-3f) * t - 4.96092216e-1f) * t + 3.87877199e-1f) * t +
                2.64421206e-1f) * t + 1.02029899f) * t - 1.26702392f;
    float big = 1.0f - t * ct_expf(q - z);
    big = x < 0 ? -big : big;
    return a < 0.9f ? small : big;
}

#endif
