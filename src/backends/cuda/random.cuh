/* random.cuh - launchers of the random ops (random.cu; glue in k_nn2.c):
 * graph/random.h's numbers, the CPU reference's to the last bit of the
 * draws. The run counter lives in device memory, so a captured CUDA graph
 * draws new numbers on every replay. */
#ifndef KILN_CUDA_RANDOM_CUH
#define KILN_CUDA_RANDOM_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kc_random {
    int kind;             /* KN_RAND_* (graph/ops_tensor.h) */
    double a, b;          /* uniform: low, high; normal: mean, scale */
    unsigned long long key;
    long long count;      /* output elements; Multinomial: rows */
    long long classes, samples; /* Multinomial */
    kiln_dtype x_dt, y_dt;
} kc_random;

/* Fill y (Bernoulli reads its probabilities from x, Multinomial its
 * log-probabilities [rows, classes]) for run *run, then add 1 to *run.
 * Multinomial keeps each row's maximum and exp-sum in stats (2 doubles a
 * row, device memory: kc_random_stats_bytes). */
cudaError_t kc_random_run(const void *x, void *y, unsigned long long *run, double *stats,
                          const kc_random *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
