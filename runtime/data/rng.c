#include "runtime/data/rng.h"

#include <math.h>

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

CtRng rng_for(uint64_t seed, uint64_t epoch, uint64_t index)
{
    uint64_t x = seed;
    x = splitmix(&x) ^ epoch;
    x = splitmix(&x) ^ index;
    CtRng r;
    for (int i = 0; i < 4; i++)
        r.s[i] = splitmix(&x);
    return r;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(CtRng *r)
{
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rng_uniform(CtRng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }
double rng_range(CtRng *r, double lo, double hi) { return lo + (hi - lo) * rng_uniform(r); }

uint64_t rng_below(CtRng *r, uint64_t n)
{
    /* rejection keeps the draw exactly uniform */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, v;
    do
        v = rng_u64(r);
    while (v >= limit);
    return v % n;
}

double rng_normal(CtRng *r)
{
    double u = 1 - rng_uniform(r), v = rng_uniform(r);
    return sqrt(-2 * log(u)) * cos(2 * 3.14159265358979323846 * v);
}

double rng_gamma(CtRng *r, double shape)
{
    /* below 1: Gamma(shape + 1) * U^(1 / shape) */
    double boost = 1;
    if (shape < 1) {
        boost = pow(1 - rng_uniform(r), 1 / shape);
        shape += 1;
    }
    double d = shape - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double x = rng_normal(r), v = 1 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = 1 - rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v * boost;
    }
}
