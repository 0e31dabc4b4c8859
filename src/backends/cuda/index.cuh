/* index.cuh - launchers of the CUDA index family: ArgMax / ArgMin, CumSum /
 * CumProd, Trilu and GatherElements (k_index.c is their glue). Semantics
 * follow the CPU reference kernels: values compared and accumulated in double
 * (int64 sums in int64), ties to the first index unless select_last. */
#ifndef KILN_CUDA_INDEX_CUH
#define KILN_CUDA_INDEX_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x viewed as [outer, n, inner]; y (int64) as [outer, inner]. */
cudaError_t kc_argext(const void *x, kiln_dtype dt, int64_t *y, int64_t outer, int64_t n,
                      int64_t inner, int max, int select_last, cudaStream_t stream);
/* Scan along n of [outer, n, inner]; y has x's type. */
cudaError_t kc_cumulative(const void *x, void *y, kiln_dtype dt, int64_t outer, int64_t n,
                          int64_t inner, int prod, int exclusive, int reverse, cudaStream_t stream);
/* [mats, rows, cols] of es-byte elements: keep j - i >= k (upper) or <= k. */
cudaError_t kc_trilu(const void *x, void *y, size_t es, int64_t mats, int64_t rows, int64_t cols,
                     int64_t k, int upper, cudaStream_t stream);
/* GatherElements over `axis`; shapes and strides in elements. */
typedef struct kc_gather_el {
    int rank, axis;
    int64_t idx_dims[KC_MAX_DIMS];
    int64_t x_strides[KC_MAX_DIMS];
    int64_t axis_len;
    int64_t total;
} kc_gather_el;
cudaError_t kc_gather_elements(const void *x, void *y, size_t es, const void *idx,
                               kiln_dtype idt, const kc_gather_el *g, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
