#include "runtime/data/rng.h"

#include <math.h>
#include <stdlib.h>

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

/* MT19937 (Matsumoto and Nishimura), seeded as init_genrand: what torch's
 * CPU generator runs after manual_seed(seed). */
typedef struct Mt19937 {
    uint32_t s[624];
    int i;
} Mt19937;

static void mt_seed(Mt19937 *m, uint32_t seed)
{
    m->s[0] = seed;
    for (int j = 1; j < 624; j++)
        m->s[j] = 1812433253u * (m->s[j - 1] ^ (m->s[j - 1] >> 30)) + (uint32_t)j;
    m->i = 624;
}

static uint32_t mt_next(Mt19937 *m)
{
    if (m->i >= 624) {
        for (int j = 0; j < 624; j++) {
            uint32_t y = (m->s[j] & 0x80000000u) | (m->s[(j + 1) % 624] & 0x7fffffffu);
            m->s[j] = m->s[(j + 397) % 624] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
        }
        m->i = 0;
    }
    uint32_t y = m->s[m->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

int torch_randperm(uint64_t seed, size_t n, size_t *out)
{
    /* torch's randperm_cpu: a swap of each place with a later one picked by
     * random() % (n - i); larger n takes another path there */
    if (n >= UINT32_MAX / 20)
        return -1;
    Mt19937 *m = malloc(sizeof *m);
    if (!m)
        return -1;
    mt_seed(m, (uint32_t)seed);
    for (size_t i = 0; i < n; i++)
        out[i] = i;
    for (size_t i = 0; i + 1 < n; i++) {
        size_t z = i + mt_next(m) % (n - i), t = out[i];
        out[i] = out[z];
        out[z] = t;
    }
    free(m);
    return 0;
}
