/*
 * Counter-based random numbers for the input ops (ir/ops/image.c) and
 * dropout's masks (ir/ops/elementwise.c): a value
 * is a pure function of (seed, index), so every backend, every thread and
 * every element order draws the same numbers with no generator state. The
 * same text compiles as C and as CUDA C (codegen/cuda/lib_source.c gives
 * NVRTC this file before the library kernels), so the ref, cpu and cuda
 * kernels fill random erasing's boxes alike. SplitMix64's finaliser mixes the counter; a normal value is
 * Box-Muller's cosine branch of two 53-bit uniforms.
 */
#ifndef CTIMM_COUNTER_RNG_H
#define CTIMM_COUNTER_RNG_H

/* How its functions are declared: the CUDA includer defines CRNG_FN
 * (codegen/cuda/lib_source.c); C gets static inline. */
#ifndef CRNG_FN
#include <math.h>
#define CRNG_FN static inline
#endif

CRNG_FN unsigned long long crng_mix(unsigned long long z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]: never 0, so the logarithm below is finite. */
CRNG_FN double crng_uniform(unsigned long long seed, unsigned long long i)
{
    unsigned long long bits = crng_mix(crng_mix(seed + 0x9E3779B97F4A7C15ull) + (i + 1) * 0xD1B54A32D192ED03ull);
    return (double)((bits >> 11) + 1) * (1.0 / 9007199254740992.0); /* 2^-53 */
}

/* Dropout's and drop_path's draw in [0, 1) for element (or sample) i of
 * stochastic node `node` at the graph's RNG counter: the mask depends on
 * (counter, node, i) alone, so the backward pass regenerates it and every
 * step (the counter) draws a new one. */
CRNG_FN double crng_mask_uniform(unsigned long long counter, unsigned long long node, unsigned long long i)
{
    unsigned long long key = crng_mix(crng_mix(counter + 0x632BE59BD9B4E019ull) ^ (node * 0x9E3779B97F4A7C15ull));
    return (double)(crng_mix(key + (i + 1) * 0xD1B54A32D192ED03ull) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal value number i of the stream `seed`. */
CRNG_FN double crng_normal(unsigned long long seed, unsigned long long i)
{
    double u1 = crng_uniform(seed, 2 * i), u2 = crng_uniform(seed, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
