/* rotary.cuh - RotaryEmbedding on the GPU (ONNX opset 23 and
 * com.microsoft): float / float16 / bfloat16 X and caches, computed in
 * float. k_rotary.c is its glue; the CPU reference is k_nn_rotary.c. */
#ifndef KILN_CUDA_ROTARY_CUH
#define KILN_CUDA_ROTARY_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The geometry of graph/rotary.h's kn_rotary, as plain values. */
typedef struct kc_rotary {
    int64_t batch, seq, heads, head, rot, cache_rows, cache_stride;
    int64_t cache_batch; /* pos_mode 0: the caches' batch, 1 (shared) or batch */
    int pos_mode;     /* 0 none, 1 ids [B, S], 2 one offset */
    int interleaved;
    int heads_first;  /* X [B, H, S, D]; else [B, S, H * D] */
    /* element strides (graph/rotary.h): (b, s, h, d) of X at
     * x_off + b * x_sb + s * x_ss + h * x_sh + d, of Y at b * y_sb + s * y_ss + h * y_sh + d */
    int64_t x_off, x_sb, x_ss, x_sh, y_sb, y_ss, y_sh;
} kc_rotary;

/* y = rotary(x) with the caches (dt each) and positions (pt: int32/int64;
 * NULL for pos_mode 0). A token whose position lies outside the caches gets
 * zeros in its rotated dims (the CPU reference refuses it). */
cudaError_t kc_rotary_run(const kc_rotary *g, kiln_dtype dt, const void *x, const void *cos_cache,
                          const void *sin_cache, const void *pos, kiln_dtype pt, void *y,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
