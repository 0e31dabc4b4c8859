/* bev_pool_cuda.h - the CUDA side of BEVPool, called from bev_pool.c when the
 * engine passes a stream (no CUDA types here). */
#ifndef KILN_PLUGIN_BEV_POOL_CUDA_H
#define KILN_PLUGIN_BEV_POOL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One call's tensors (device pointers) and sizes. */
typedef struct bev_pool_cuda_args {
    const void *depth, *feat;                 /* float or float16 */
    const int32_t *ranks_depth, *ranks_feat, *ranks_bev, *starts, *lengths;
    void *out;                                /* [B, C, cells], same type */
    int64_t n_points, n_intervals, channels;
    int64_t cells;                            /* bev_h * bev_w */
    int64_t n_cells;                          /* B * cells */
    int64_t n_depth, n_pix;                   /* elements of depth; pixels of feat */
    int half;
} bev_pool_cuda_args;

/* Zero the output and sum every interval into its cell, enqueued on `stream`
 * (a cudaStream_t). No atomics: one thread per (interval, channel). Returns 0,
 * or -1 with a message in err. */
int bev_pool_cuda(const bev_pool_cuda_args *a, void *stream, char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif
#endif
