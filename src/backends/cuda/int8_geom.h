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

/* The gathered pack (any C; the stem's C = 3 above all): a thread writes
 * 16 bytes of X' (chunk i of the kp / 16 of a row), each byte found on its
 * own from the v = 1 geometry g (kc_qpack_init with v = 1), the divisions
 * done once for the first byte and the taps then stepped: byte b of the
 * chunk gets src[b] (X's byte) and kind[b], as kc_qpack_src's result. */
KC_HD void kc_qpack_gather16(const kc_qpack_geom *g, uint32_t i, uint64_t *src, int *kind) {
    uint32_t c16 = g->kc / 16u;
    uint32_t r = i / c16, j = (i - r * c16) * 16u;
    uint32_t p = r / g->ow, ox = r - p * g->ow;
    uint32_t n = p / g->oh, oy = p - n * g->oh;
    int32_t y0 = (int32_t)oy * g->sh - g->ph, x0 = (int32_t)ox * g->sw - g->pw;
    uint64_t img = (uint64_t)n * g->ih;
    /* column j = (ky * kw + kx) * C + c */
    uint32_t t = j / g->cin, c = j - t * g->cin;
    uint32_t ky = t / g->kw, kx = t - ky * g->kw;
    for (int b = 0; b < 16; b++, j++) {
        src[b] = 0;
        if (j >= g->kt) {
            kind[b] = -1;
            continue;
        }
        int32_t iy = y0 + (int32_t)ky * g->dh, ix = x0 + (int32_t)kx * g->dw;
        kind[b] = iy >= 0 && iy < (int32_t)g->ih && ix >= 0 && ix < (int32_t)g->iw;
        if (kind[b])
            src[b] = ((img + (uint32_t)iy) * g->iw + (uint32_t)ix) * g->cin + c;
        if (++c == g->cin) {
            c = 0;
            if (++kx == g->kw)
                kx = 0, ky++;
        }
    }
}

/* An 8-bit channels-last 2-D MaxPool (kiln::MaxPool of an INT8 region):
 * X [N, IH, IW, C] to Y [N, OH, OW, C], a thread a group of v channels
 * (v = 16, 4 or 1 bytes) of one output pixel, thread i = (pixel, group)
 * with the group fastest. Every window must hold an X pixel (then the max
 * of its bytes is the reference's: padding never wins). */
typedef struct kc_qpool_geom {
    uint32_t v, cv; /* bytes a thread, groups a pixel (C / v) */
    uint32_t c, ih, iw, oh, ow, kh, kw;
    int32_t sh, sw, dh, dw, ph, pw;
} kc_qpool_geom;

/* Whether every window along a dim (in, out, kernel, stride, dilation,
 * pad before) holds an input position. */
KC_HD int kc_qpool_full(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t p) {
    for (int64_t o = 0; o < out; o++) {
        int hit = 0;
        for (int64_t t = 0; t < k && !hit; t++) {
            int64_t pos = o * s - p + t * d;
            hit = pos >= 0 && pos < in;
        }
        if (!hit)
            return 0;
    }
    return 1;
}

/* 0 when v does not divide C, the index math does not fit 32 bits, or a
 * window holds only padding. */
KC_HD int kc_qpool_init(kc_qpool_geom *g, uint32_t v, int64_t n, int64_t c, int64_t ih,
                        int64_t iw, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh,
                        int64_t sw, int64_t dh, int64_t dw, int64_t ph, int64_t pw) {
    if (v == 0 || n <= 0 || c <= 0 || c % v || ih <= 0 || iw <= 0 || oh <= 0 || ow <= 0 ||
        kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 ||
        n * oh * ow * (c / v) > (int64_t)UINT32_MAX || n * ih * iw > (int64_t)UINT32_MAX ||
        ih + ph + kh * dh > (int64_t)INT32_MAX / 2 || iw + pw + kw * dw > (int64_t)INT32_MAX / 2 ||
        oh * sh > (int64_t)INT32_MAX / 2 || ow * sw > (int64_t)INT32_MAX / 2 ||
        !kc_qpool_full(ih, oh, kh, sh, dh, ph) || !kc_qpool_full(iw, ow, kw, sw, dw, pw))
        return 0;
    g->v = v, g->cv = (uint32_t)(c / v), g->c = (uint32_t)c;
    g->ih = (uint32_t)ih, g->iw = (uint32_t)iw, g->oh = (uint32_t)oh, g->ow = (uint32_t)ow;
    g->kh = (uint32_t)kh, g->kw = (uint32_t)kw;
    g->sh = (int32_t)sh, g->sw = (int32_t)sw, g->dh = (int32_t)dh, g->dw = (int32_t)dw;
    g->ph = (int32_t)ph, g->pw = (int32_t)pw;
    return 1;
}

/* Thread i: Y's byte offset of its group, the group's offset in a pixel,
 * the image's first X pixel, and the window's first row and column (may
 * be negative). X's bytes of the group at (iy, ix) of the window are at
 * (base + iy * iw + ix) * c + co. */
KC_HD void kc_qpool_index(const kc_qpool_geom *g, uint32_t i, uint64_t *yo, uint32_t *co,
                          uint32_t *base, int32_t *y0, int32_t *x0) {
    uint32_t cg = i % g->cv, p = i / g->cv;
    uint32_t ox = p % g->ow, q = p / g->ow;
    uint32_t oy = q % g->oh, n = q / g->oh;
    *co = cg * g->v;
    *yo = (uint64_t)p * g->c + *co;
    *base = n * g->ih * g->iw;
    *y0 = (int32_t)oy * g->sh - g->ph;
    *x0 = (int32_t)ox * g->sw - g->pw;
}

#endif
