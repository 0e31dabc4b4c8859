/* custom_act_cuda.h - the CUDA side of CustomAct, called from custom_act.c
 * when the engine passes a stream (no CUDA types here, so the C file needs
 * no CUDA headers). */
#ifndef KILN_PLUGIN_CUSTOM_ACT_CUDA_H
#define KILN_PLUGIN_CUSTOM_ACT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = x * 0.5 * (1 + tanh(alpha * (x + 0.044715 x^3))) over n elements of
 * device memory, float32 (is_half = 0) or float16 (is_half = 1), enqueued on
 * `stream` (a cudaStream_t). Returns 0, or -1 with a message in err. */
int custom_act_cuda(const void *x, void *y, int64_t n, int is_half, float alpha, void *stream,
                    char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif
#endif
