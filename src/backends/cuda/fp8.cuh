/* fp8.cuh - the CUDA kernels of kiln's FP8 layers (kiln::FP8Conv,
 * kiln::FP8MatMul; graph/qlayer.h, graph/fp8layer.h):
 *   - a direct kernel, one thread per output element, summing the E4M3
 *     products in FP32 in the CPU reference's order (ascending reduction
 *     index), each operation rounded on its own: the CPU's bits;
 *   - the pieces of the cuBLASLt tactic (k_fp8.c): X packed (an im2col for
 *     a convolution) into X' [rows, kp] E4M3, zero-padded to kp, and the
 *     epilogue that turns the FP32 GEMM result D [rows, np] into Y with
 *     graph/fp8layer.h's arithmetic (tensor cores sum in their own order:
 *     a tolerance, not bits; see fp8layer.h). */
#ifndef KILN_CUDA_FP8_CUH
#define KILN_CUDA_FP8_CUH

#include <cuda_runtime_api.h>

#include "graph/quant.h"
#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kc_f8layer {
    int conv;                  /* 1: FP8Conv (NCHW; 1-D as H = 1), 0: FP8MatMul */
    int64_t batch, cin, cout, group, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;
    int64_t m, k, n;           /* FP8MatMul: X [batch, m, k], W [k, n] ([n, k] with tb) */
    int tb, wb;                /* wb: one W per batch */
    kiln_dtype y_dt, z_dt;     /* y float or float8e4m3fn; z_dt UNDEFINED: no residual */
    int saturate;
    const float *s;            /* device: x_scale * w_scale[c] */
    const float *c;            /* device: C[c] (0 without C) */
    kn_qepi e;
    float ys, zs;
} kc_f8layer;

/* Y from X and W (E4M3 codes) by the direct kernel. */
cudaError_t kc_f8_direct(const uint8_t *x, const uint8_t *w, const void *z, void *y,
                         const kc_f8layer *q, cudaStream_t stream);

/* The GEMM form: rows (output pixels / rows of X), cols = output channels,
 * k the true reduction length, kp and np padded to 16. */
typedef struct kc_f8gemm {
    int64_t rows, cols, k, kp, np;
} kc_f8gemm;

/* X into X' [rows, kp] (im2col in (ci, ky, kx) order for a convolution;
 * zeros in the padding and past k). */
cudaError_t kc_f8_pack(const uint8_t *x, uint8_t *xp, const kc_f8layer *q, const kc_f8gemm *g,
                       cudaStream_t stream);
/* D [rows, np] (FP32 sums) into Y. */
cudaError_t kc_f8_epilogue(const float *d, const void *z, void *y, const kc_f8layer *q,
                           const kc_f8gemm *g, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
