/* dwconv.cuh - kiln's own depthwise convolution (group = C = K, one filter
 * a channel), 2-D, channels-last or channels-first, float / float16 /
 * bfloat16 with float accumulation, bias, residual Z and the activation in
 * the same pass. k_conv.c's "dw" tactic is its glue. */
#ifndef KILN_CUDA_DWCONV_CUH
#define KILN_CUDA_DWCONV_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X [N, C, H, W] -> Y [N, C, P, Q] (both NHWC in memory when channels_last);
 * W [C, 1, R, S] (or [C, R, S, 1]: the same order); symmetric pads. */
typedef struct kc_dwconv {
    int64_t n, c, h, w, p, q;
    int r, s, sh, sw, ph, pw, dh, dw;
    int channels_last;
    int rows; /* 1: one output row a thread; 2: two (3/5/7-wide windows);
                 -1: one, its filter rows unrolled (square 3x3 and 5x5) */
    int act;
    float alpha, beta;
} kc_dwconv;

/* Whether a kernel takes this geometry (the filter taps of a block's
 * channels must fit in shared memory). */
int kc_dwconv_supported(const kc_dwconv *g);

/* y = act(conv(x, w) + bias + z); bias [C] and z (Y's shape) may be NULL. */
cudaError_t kc_dwconv_run(const kc_dwconv *g, kiln_dtype dt, const void *x, const void *w,
                          const void *bias, const void *z, void *y, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
