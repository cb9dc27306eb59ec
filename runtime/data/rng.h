/*
 * The data pipeline's random numbers: a small xoshiro256** generator seeded
 * per sample from (seed, epoch, sample index), so an augmented batch does not
 * depend on which worker thread made it or how many there are.
 */
#ifndef CTIMM_DATA_RNG_H
#define CTIMM_DATA_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct CtRng {
    uint64_t s[4];
} CtRng;

/* A generator for one (seed, epoch, index) triple. */
CtRng rng_for(uint64_t seed, uint64_t epoch, uint64_t index);
uint64_t rng_u64(CtRng *r);
/* Uniform in [0, 1). */
double rng_uniform(CtRng *r);
/* Uniform in [lo, hi). */
double rng_range(CtRng *r, double lo, double hi);
/* Uniform integer in [0, n). */
uint64_t rng_below(CtRng *r, uint64_t n);
/* Standard normal. */
double rng_normal(CtRng *r);
/* Gamma(shape, 1), shape > 0 (Marsaglia and Tsang). */
double rng_gamma(CtRng *r, double shape);
/* torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on the
 * CPU into out[n] (torch's own MT19937 and swaps). -1: n too large for that
 * path (2^32 / 20 and up), or out of memory. */
int torch_randperm(uint64_t seed, size_t n, size_t *out);

#endif
