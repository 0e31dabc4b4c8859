/* tfidf.cuh - the launcher of the CUDA TfIdfVectorizer (k_tfidf.c is its
 * glue), on the rules of graph/tfidf.h, as the CPU reference
 * (backends/cpu/k_tfidf.c) computes it: a thread a (row, start) counts the
 * n-grams that start there with atomic uint32 additions into the output's
 * own memory, then a thread an element turns its count into the float
 * value. The counts are exact integers on both sides, so the outputs are
 * equal to the bit. */
#ifndef KILN_CUDA_TFIDF_CUH
#define KILN_CUDA_TFIDF_CUH

#include <cuda_runtime_api.h>

#include "graph/tfidf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y [rows, out_size] float = the weighted n-gram counts of x [rows, len]
 * (int32, or int64 when g->x64); tables: the block of kn_tfidf_tables in
 * device memory. */
cudaError_t kc_tfidf(const void *x, void *y, const kn_tfidf *g, const void *tables,
                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
