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

/* Dropout in training mode (glue in k_tensor.c): element i of run *run is
 * kept when draw i (graph/random.h, the CPU reference's) is >= ratio, and
 * then scaled by 1 / (1 - ratio), else 0; mask (may be NULL) gets 1 or 0.
 * Then adds 1 to *run. */
typedef struct kc_dropout {
    unsigned long long key;
    double ratio, scale;
    long long count;
    kiln_dtype x_dt, mask_dt;
} kc_dropout;

cudaError_t kc_dropout_run(const void *x, void *y, void *mask, unsigned long long *run,
                           const kc_dropout *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
