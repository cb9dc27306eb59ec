/* Contract: the libraries' element types as the fake computes them: read
 * exactly as a double, stored rounded to nearest even once (f16's
 * subnormals and infinities as IEEE's binary16; NaN stays NaN). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tests/fake_gpu/fake_internal.h"

size_t fg_type_size(FgType t) { return t == FG_F32 ? 4 : 2; }

static double f16_value(uint16_t h)
{
    int e = h >> 10 & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);
    return h & 0x8000 ? -v : v;
}

/* v rounded to nearest even at p significant bits, with a unit in the
 * last place of at least 2^(emin - p + 1) (subnormals). */
static double round_bits(double v, int p, int emin)
{
    if (v == 0 || !isfinite(v))
        return v;
    int e;
    frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
    int ulp = (e - 1 < emin ? emin : e - 1) - (p - 1);
    return ldexp(nearbyint(ldexp(v, -ulp)), ulp);
}

static uint16_t f16_bits(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double r = fabs(round_bits(v, 11, -14));
    if (isnan(v))
        return 0x7e00;
    if (r > 65504.0)
        return sign | 0x7c00;
    if (r < 0x1p-14)
        return sign | (uint16_t)ldexp(r, 24);
    int e;
    frexp(r, &e);
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(ldexp(r, 11 - e) - 1024);
}

static uint16_t bf16_bits(double v)
{
    float f = (float)round_bits(v, 8, -126); /* exact: float holds every bf16 */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(isnan(f) ? (u >> 16 | 0x40) : u >> 16);
}

double fg_load(const void *p, FgType t, size_t i)
{
    if (t == FG_F32) {
        float f;
        memcpy(&f, (const char *)p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    if (t == FG_F16)
        return f16_value(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void fg_store(void *p, FgType t, size_t i, double v)
{
    if (t == FG_F32) {
        float f = (float)v;
        memcpy((char *)p + 4 * i, &f, 4);
        return;
    }
    uint16_t h = t == FG_F16 ? f16_bits(v) : bf16_bits(v);
    memcpy((char *)p + 2 * i, &h, 2);
}
