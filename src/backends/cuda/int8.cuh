/* int8.cuh - the CUDA kernels of kiln's quantized layers (kiln::QConv,
 * kiln::QMatMul; graph/qlayer.h): exact int32 sums, then graph/quant.h's
 * epilogue with every product and sum rounded on its own (no FMA
 * contraction), so the result has the CPU reference's bits. A direct
 * kernel (one thread per output element): the correctness reference for
 * faster GPU INT8 tactics (cuBLASLt IMMA / FP8), not one itself. */
#ifndef KILN_CUDA_INT8_CUH
#define KILN_CUDA_INT8_CUH

#include <cuda_runtime_api.h>

#include "graph/quant.h"
#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kc_qlayer {
    int conv;                  /* 1: QConv, 0: QMatMul */
    int cl;                    /* QConv: X, Z, Y [N, H, W, C] */
    /* QConv, 2-D (a 1-D one as H = 1) */
    int64_t batch, cin, cout, group, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;
    /* QMatMul: X [batch, m, k], W [k, n] ([n, k] with tb), one per batch with wb */
    int64_t m, k, n;
    int tb, wb;
    kiln_dtype x_dt, w_dt, y_dt, z_dt; /* z_dt UNDEFINED: no residual */
    int32_t xz;
    const int32_t *wz;         /* device, one per output channel */
    const float *s;            /* device: x_scale * w_scale[c] */
    const int32_t *b;          /* device: B[c] (0 without B) */
    const float *c;            /* device: C[c] (0 without C) */
    kn_qepi e;
    float ys, yz, lo, hi, zs, zz;
} kc_qlayer;

cudaError_t kc_qlayer_run(const void *x, const void *w, const void *z, void *y,
                          const kc_qlayer *q, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
