/* elementwise.cuh - launchers of the CUDA elementwise family: programs of
 * unary/binary steps with broadcasting (plain ops and kiln::ElementwiseChain),
 * Where, Cast, the fused-op epilogue and BatchNormalization. Each checks its
 * arguments, launches on `stream` and returns the launch's error. */
#ifndef KILN_CUDA_ELEMENTWISE_CUH
#define KILN_CUDA_ELEMENTWISE_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kc_program.integer: the arithmetic a program runs in (the CPU's compute
 * types: float for float32/float16/bfloat16, int64 for signed integers and
 * bool, uint64 for unsigned integers, double for float64). */
enum { KC_PATH_F32 = 0, KC_PATH_I64 = 1, KC_PATH_U64 = 2, KC_PATH_F64 = 3 };
/* Op codes past kc_types.h's kc_op: the bitwise ops, integer paths only
 * (unary codes stay below KC_ADD, binary ones above KC_BINARY_END). */
enum { KC_BITWISE_NOT = KC_UNARY_END + 1 };
enum { KC_SHL = KC_BINARY_END + 1, KC_SHR, KC_BIT_AND, KC_BIT_OR, KC_BIT_XOR };

/* Run an elementwise program over p->bc.total output elements. */
cudaError_t kc_ew_run(const kc_program *p, cudaStream_t stream);
/* out = cond ? x : y with broadcasting (bc has 3 inputs); elements of esize bytes. */
cudaError_t kc_where(const void *cond, const void *x, const void *y, void *out, size_t esize,
                     const kc_bcast *bc, cudaStream_t stream);
/* y = (yt)x over n elements. Float to integer truncates toward zero and
 * saturates (NaN gives 0); to bool is "not zero"; to float8 rounds to
 * nearest even and, with saturate, clamps to the largest finite value. */
cudaError_t kc_cast(const void *x, kiln_dtype xt, void *y, kiln_dtype yt, int64_t n, int saturate,
                    cudaStream_t stream);
/* In place over n elements of y (float, float16 or bfloat16):
 * y = act(y + bias[(i / inner) % channels] + z[i]); bias and z may be NULL. */
cudaError_t kc_epilogue(void *y, kiln_dtype dt, int64_t n, const void *bias, int64_t channels,
                        int64_t inner, const void *z, int act, float alpha, float beta,
                        cudaStream_t stream);
/* Batched 2-D transpose with an optional epilogue, through shared-memory
 * tiles: dst[b][c][r] = act(src[b][r][c] + bias[c] + z[b][c][r]) for
 * r < rows, c < cols, b < batch; bias and z may be NULL, act 0 for none.
 * NCHW <-> NHWC is this with rows x cols = C x HW (or HW x C). */
cudaError_t kc_transpose_epilogue(const void *src, void *dst, kiln_dtype dt, int64_t batch,
                                  int64_t rows, int64_t cols, const void *bias, const void *z,
                                  int act, float alpha, float beta, cudaStream_t stream);
/* BatchNormalization (inference): y = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + b[c]
 * for c = (i / inner) % channels; x and y of dt, the four vectors of pt. */
cudaError_t kc_batchnorm(const void *x, void *y, kiln_dtype dt, int64_t n, int64_t channels,
                         int64_t inner, const void *scale, const void *bias, const void *mean,
                         const void *var, kiln_dtype pt, float eps, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
