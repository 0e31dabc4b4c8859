/* random.h - the random ops' numbers (RandomUniform, RandomNormal, their
 * -Like forms, Bernoulli, Multinomial), shared by the CPU reference and the
 * CUDA kernels (plain C, host and device): a counter-based generator
 * (Philox-4x32 with ten rounds), so element i of run r of a node with key k
 * is the same number on every backend and in any order of computation.
 * A node's key is its seed attribute, or one drawn when the context is
 * prepared; r counts the context's runs from 0, so each run draws new
 * numbers and a seeded node repeats its sequence from a fresh context. */
#ifndef KILN_RANDOM_H
#define KILN_RANDOM_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KN_RND_FN static __host__ __device__ __forceinline__
#else
#define KN_RND_FN static inline
#endif

enum { KN_RAND_UNIFORM, KN_RAND_NORMAL, KN_RAND_BERNOULLI, KN_RAND_MULTINOMIAL };

/* Four 32-bit words for counter (lo, hi) under key. */
KN_RND_FN void kn_philox(uint64_t key, uint64_t lo, uint64_t hi, uint32_t w[4]) {
    uint32_t c0 = (uint32_t)lo, c1 = (uint32_t)(lo >> 32), c2 = (uint32_t)hi, c3 = (uint32_t)(hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
}

/* Uniform in [0, 1) with 53 random bits: element i of run `run`. */
KN_RND_FN double kn_rand_uniform(uint64_t key, uint64_t i, uint64_t run) {
    uint32_t w[4];
    kn_philox(key, i, run, w);
    return (double)(((uint64_t)(w[0] >> 5) << 26) | (w[1] >> 6)) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller on two uniforms, the first in (0, 1]). */
KN_RND_FN double kn_rand_normal(uint64_t key, uint64_t i, uint64_t run) {
    uint32_t w[4];
    kn_philox(key, i, run, w);
    double u1 = ((double)(((uint64_t)(w[0] >> 5) << 26) | (w[1] >> 6)) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(((uint64_t)(w[2] >> 5) << 26) | (w[3] >> 6)) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

/* The key of a node's seed attribute (a float in ONNX; its integer part). */
KN_RND_FN uint64_t kn_rand_key(double seed) {
    int64_t s = (int64_t)seed;
    uint64_t k = (uint64_t)s * 0x9E3779B97F4A7C15ull;
    return k ^ (k >> 29);
}

#endif
