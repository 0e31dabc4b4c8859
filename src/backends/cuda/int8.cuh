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
#include "int8_geom.h"
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

/* The GEMM tactics (k_int8.c's "imma"): Y's rows (output pixels of a
 * QConv, rows of X of a QMatMul) times its columns (output channels) as an
 * int8 x int8 -> int32 cuBLASLt product D [rows, np] = X' [rows, kp] W'^T,
 * W' [np, kp] packed at prepare. X' and W' hold int8 values: uint8 ones
 * shifted by -128 (x' = x - 128, zero point xz' = xz - 128), so that
 * sum (x - xz)(w - wz) + B = D - wz'[c] * rowsum(X') + corr[c], with
 * corr[c] = B[c] - xz' sum(W'[c]) + k xz' wz'[c] over the true k (the
 * padded columns are 0 in both). Then the direct kernel's epilogue, bit
 * for bit. */
typedef struct kc_qgemm {
    int64_t rows, cols, k, kp, np; /* M, N (= channels), true K, K and N padded to 16 */
    int32_t xzp;                   /* X's zero point in the int8 domain: a padded pixel */
    int shift;                     /* X is uint8 */
    const int32_t *corr;           /* device, cols entries */
    const int32_t *wzp;            /* device, cols entries; NULL: W' has no zero point */
    /* the pack of a channels-last X (or a QMatMul's X) in chunks of 16, 4
     * and 1 bytes (int8_geom.h; v 0: that width does not fit), the NCHW
     * QConv's im2col (no chunks) when none fits */
    kc_qpack_geom pg[3];
    /* the epilogue in groups of 4 and 1 channels (v 0: does not fit) */
    kc_qepi_geom eg[2];
    uint32_t pat;                  /* q's stage list (kc_qepi_pattern) */
} kc_qgemm;

/* X into X' [rows, kp] (an im2col for a QConv): the widest chunks that
 * g->pg and X's alignment allow, uint8 bytes flipped to int8 (x ^ 0x80 =
 * x - 128) on the way. */
cudaError_t kc_qgemm_pack(const void *x, int8_t *xp, const kc_qlayer *q, const kc_qgemm *g,
                          cudaStream_t stream);
/* rs[r] = the sum of X' row r. */
cudaError_t kc_qgemm_rowsum(const int8_t *xp, int32_t *rs, const kc_qgemm *g, cudaStream_t stream);
/* D [rows, np] (rs: row sums, NULL when g->wzp is) into Y through q's
 * epilogue: 4 channels a thread where g->eg and the pointers allow, the
 * common stage lists compiled on their own (int8.cu). */
cudaError_t kc_qgemm_epilogue(const int32_t *d, const int32_t *rs, const void *z, void *y,
                              const kc_qlayer *q, const kc_qgemm *g, cudaStream_t stream);

/* X into X' as kc_qgemm_pack's 1-byte chunks, but 16 bytes of X' a
 * thread (int8_geom.h's kc_qpack_gather16 on g->pg[2]): the pack of a
 * channel count that no wider chunk divides (the stem's C = 3). xp
 * 16-byte aligned. kc_qgemm_pack takes it on its own where it fits. */
cudaError_t kc_qgemm_pack_gather(const void *x, int8_t *xp, const kc_qgemm *g,
                                 cudaStream_t stream);

/* The fused GEMM tactics (k_int8.c's "qmma", "qmma128"): D = X' W'^T
 * (X' [rows, kp] packed or X as it is, W' [np, kp] as the IMMA tactics
 * pack it, both 16-byte aligned) on kiln's own mma.sync kernel, 128 x bn
 * tiles (bn 64 or 128), with kc_qgemm_epilogue's epilogue applied to the
 * sums in registers: Y (row-major: a QMatMul's or a channels-last QConv's)
 * is written, no int32 D. rs: X' row sums (NULL when g->wzp is). */
cudaError_t kc_qgemm_mma(const int8_t *xp, const int8_t *wp, const int32_t *rs, const void *z,
                         void *y, const kc_qlayer *q, const kc_qgemm *g, int bn,
                         cudaStream_t stream);

/* An 8-bit channels-last 2-D MaxPool (int8_geom.h's kc_qpool_geom, v bytes
 * a thread; X and Y v-byte aligned) over batch images: sgn 1 int8, 0
 * uint8. */
cudaError_t kc_qpool_max(const void *x, void *y, int sgn, const kc_qpool_geom *g, int64_t batch,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
