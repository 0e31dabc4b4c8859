/* tfidf.cu - the TfIdfVectorizer kernels (launcher in tfidf.cuh), on
 * graph/tfidf.h's rules, so the grams found and the columns counted are the
 * CPU reference's. */
#include "graph/tfidf.h"
#include "kc_dev.cuh"
#include "tfidf.cuh"

/* A thread a (row, start): every n-gram from that item, at every skip
 * distance, one atomic addition each into its row's counts. */
__global__ void tfidf_count_kernel(const void *x, uint32_t *counts, const kn_tfidf g,
                                   const void *tables) {
    const kn_tfidf_tab t = kn_tfidf_tab_at(&g, tables);
    const int64_t total = g.rows * g.len;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        kn_tfidf_count_at(&g, &t, x, i / g.len, i % g.len, counts);
}

/* A thread an output element: its count becomes its float value. */
__global__ void tfidf_finish_kernel(uint32_t *y, const kn_tfidf g, const void *tables) {
    const kn_tfidf_tab t = kn_tfidf_tab_at(&g, tables);
    const int64_t total = g.rows * g.out_size;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        kn_tfidf_finish(&g, &t, y, i);
}

extern "C" cudaError_t kc_tfidf(const void *x, void *y, const kn_tfidf *g, const void *tables,
                                cudaStream_t stream) {
    const int64_t outputs = g->rows * g->out_size, starts = g->rows * g->len;
    if (outputs <= 0)
        return cudaSuccess;
    if (!y || !tables || (starts > 0 && !x) || g->len < 0)
        return cudaErrorInvalidValue;
    cudaError_t e = cudaMemsetAsync(y, 0, (size_t)outputs * sizeof(uint32_t), stream);
    if (e != cudaSuccess)
        return e;
    if (starts > 0) {
        tfidf_count_kernel<<<kc_blocks(starts, KC_THREADS), KC_THREADS, 0, stream>>>(
            x, (uint32_t *)y, *g, tables);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    tfidf_finish_kernel<<<kc_blocks(outputs, KC_THREADS), KC_THREADS, 0, stream>>>((uint32_t *)y,
                                                                                  *g, tables);
    return cudaGetLastError();
}
