/* int8_geom.h - the index math of the INT8 GEMM tactics' kernels (int8.cu,
 * k_int8.c): plain C, host and device, so that the layout math is tested on
 * the CPU (tests/unit/test_int8_geom.c) against the naive 64-bit formulas.
 *
 * The pack (im2col) works on chunks of v bytes (v = 16, 4 or 1): X is
 * channels-last [N, IH, IW, C] (a QMatMul's X [rows, K] as a 1x1 conv of
 * N = rows pixels), a row of X' [rows, kp] is the output pixel's taps
 * (ky, kx) in order, each C contiguous channels, then zero columns up to
 * kp. With C % v == 0 a chunk never straddles two taps, so one 32-bit
 * index i = r * (kp / v) + j names it and every division is 32-bit.
 * The epilogue works on groups of v output channels (v = 4 or 1) of a row
 * r of D [rows, np]. */
#ifndef KILN_CUDA_INT8_GEOM_H
#define KILN_CUDA_INT8_GEOM_H

#include <stdint.h>

#ifdef __CUDACC__
#define KC_HD static __host__ __device__ __forceinline__
#else
#define KC_HD static inline
#endif

typedef struct kc_qpack_geom {
    uint32_t v;            /* bytes a chunk */
    uint32_t kc;           /* chunks a row of X' (kp / v) */
    uint32_t kt;           /* chunks that hold data (k / v); the rest are 0 */
    uint32_t cc;           /* chunks a tap (C / v) */
    uint32_t kw, oh, ow, ih, iw, cin;
    int32_t sh, sw, dh, dw, ph, pw;
} kc_qpack_geom;

/* What chunk i of X' holds: 1, X's bytes from *src on; 0, a padded pixel
 * (X's zero point); -1, padded columns (0). */
KC_HD int kc_qpack_src(const kc_qpack_geom *g, uint32_t i, uint64_t *src) {
    uint32_t r = i / g->kc, j = i - r * g->kc;
    if (j >= g->kt)
        return -1;
    uint32_t t = j / g->cc, c = (j - t * g->cc) * g->v;
    uint32_t ky = t / g->kw, kx = t - ky * g->kw;
    uint32_t p = r / g->ow, ox = r - p * g->ow;
    uint32_t n = p / g->oh, oy = p - n * g->oh;
    int32_t iy = (int32_t)oy * g->sh - g->ph + (int32_t)ky * g->dh;
    int32_t ix = (int32_t)ox * g->sw - g->pw + (int32_t)kx * g->dw;
    if (iy < 0 || iy >= (int32_t)g->ih || ix < 0 || ix >= (int32_t)g->iw)
        return 0;
    *src = (((uint64_t)n * g->ih + (uint32_t)iy) * g->iw + (uint32_t)ix) * g->cin + c;
    return 1;
}

/* The geometry for chunks of v bytes; 0 when v does not divide C (and so
 * k and kp) or the chunk count does not fit 32 bits. */
KC_HD int kc_qpack_init(kc_qpack_geom *g, uint32_t v, int64_t rows, int64_t k, int64_t kp,
                        int64_t cin, int64_t kh, int64_t kw, int64_t ih, int64_t iw, int64_t oh,
                        int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t ph,
                        int64_t pw) {
    if (v == 0 || cin <= 0 || cin % v || k != cin * kh * kw || kp % v || rows <= 0 ||
        rows * (kp / v) > (int64_t)UINT32_MAX || ih * iw > (int64_t)INT32_MAX ||
        oh * ow > (int64_t)INT32_MAX || ih + ph + kh * dh > (int64_t)INT32_MAX / 2 ||
        iw + pw + kw * dw > (int64_t)INT32_MAX / 2 || oh * sh > (int64_t)INT32_MAX / 2 ||
        ow * sw > (int64_t)INT32_MAX / 2)
        return 0;
    g->v = v;
    g->kc = (uint32_t)(kp / v);
    g->kt = (uint32_t)(k / v);
    g->cc = (uint32_t)(cin / v);
    g->kw = (uint32_t)kw, g->oh = (uint32_t)oh, g->ow = (uint32_t)ow;
    g->ih = (uint32_t)ih, g->iw = (uint32_t)iw, g->cin = (uint32_t)cin;
    g->sh = (int32_t)sh, g->sw = (int32_t)sw, g->dh = (int32_t)dh, g->dw = (int32_t)dw;
    g->ph = (int32_t)ph, g->pw = (int32_t)pw;
    return 1;
}

typedef struct kc_qepi_geom {
    uint32_t v;    /* channels a thread (4 or 1) */
    uint32_t cv;   /* groups a row (cols / v) */
    uint32_t cols, np;
    uint32_t sp;   /* NCHW Y: pixels an image (oh * ow); 0: Y is [rows, cols] */
} kc_qepi_geom;

KC_HD int kc_qepi_init(kc_qepi_geom *g, uint32_t v, int64_t rows, int64_t cols, int64_t np,
                       int64_t sp) {
    if (v == 0 || cols <= 0 || cols % v || rows <= 0 || rows * (cols / v) > (int64_t)UINT32_MAX ||
        np > (int64_t)UINT32_MAX || sp < 0 || sp > (int64_t)UINT32_MAX)
        return 0;
    g->v = v;
    g->cv = (uint32_t)(cols / v);
    g->cols = (uint32_t)cols;
    g->np = (uint32_t)np;
    g->sp = (uint32_t)sp;
    return 1;
}

/* Group i: its row r, first channel c, the place of D[r, c] and of Y[r, c]
 * (NCHW Y: channel c of image r / sp at pixel r % sp; the next channel of
 * the group is sp further on). */
KC_HD void kc_qepi_index(const kc_qepi_geom *g, uint32_t i, uint32_t *r, uint32_t *c, uint64_t *di,
                         uint64_t *yi) {
    uint32_t rr = i / g->cv, cc = (i - rr * g->cv) * g->v;
    *r = rr, *c = cc;
    *di = (uint64_t)rr * g->np + cc;
    if (g->sp) {
        uint32_t n = rr / g->sp, s = rr - n * g->sp;
        *yi = ((uint64_t)n * g->cols + cc) * g->sp + s;
    } else {
        *yi = (uint64_t)rr * g->cols + cc;
    }
}

/* The epilogue's stage list (graph/quant.h's KN_QS_* codes, 1..5) as one
 * word, 3 bits a stage, first stage lowest; 0 ends the list. */
KC_HD uint32_t kc_qepi_pattern(int n, const int *stage) {
    uint32_t p = 0;
    for (int i = n - 1; i >= 0; i--)
        p = (p << 3) | ((uint32_t)stage[i] & 7u);
    return p;
}
#define KC_QP1(a) ((uint32_t)(a))
#define KC_QP2(a, b) ((uint32_t)(a) | (uint32_t)(b) << 3)
#define KC_QP3(a, b, c) ((uint32_t)(a) | (uint32_t)(b) << 3 | (uint32_t)(c) << 6)

#endif
