/* test_int8_geom.c - the index math of the CUDA INT8 GEMM tactics
 * (src/backends/cuda/int8_geom.h), proven on the CPU: for many conv
 * geometries (1x1 and 3x3 and 7x7, strides 1 and 2, dilation, padding, odd
 * channel counts, batch 1 and more) and every chunk width that fits, the
 * chunked pack maps every byte of X' [rows, kp] to the X element (or the
 * padding) that the naive 64-bit im2col names; the epilogue's groups cover
 * every element of D and Y once, at the naive places; the stage pattern
 * keeps the order of the stages. Data from a fixed-seed LCG. */
#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/int8_geom.h"
#include "graph/quant.h"
#include "test.h"

static uint32_t lcg = 2312u;
static int64_t rnd(int64_t lo, int64_t hi) { /* [lo, hi] */
    lcg = lcg * 1664525u + 1013904223u;
    return lo + (int64_t)((lcg >> 8) % (uint32_t)(hi - lo + 1));
}

typedef struct conv_case {
    int64_t n, cin, ih, iw, kh, kw, sh, sw, dh, dw, ph, pw;
} conv_case;

static int64_t up16(int64_t v) { return (v + 15) / 16 * 16; }

/* the naive im2col of X [N, IH, IW, C] (channels-last): -1 padding pixel,
 * -2 padded column, else X's element index */
static int64_t naive_src(const conv_case *c, int64_t oh, int64_t ow, int64_t k, int64_t r,
                         int64_t kk) {
    if (kk >= k)
        return -2;
    int64_t ci = kk % c->cin, t = kk / c->cin, kx = t % c->kw, ky = t / c->kw;
    int64_t ox = r % ow, oy = (r / ow) % oh, n = r / (ow * oh);
    int64_t iy = oy * c->sh - c->ph + ky * c->dh, ix = ox * c->sw - c->pw + kx * c->dw;
    if (iy < 0 || iy >= c->ih || ix < 0 || ix >= c->iw)
        return -1;
    return ((n * c->ih + iy) * c->iw + ix) * c->cin + ci;
}

static int check_pack(const conv_case *c) {
    int64_t oh = (c->ih + 2 * c->ph - c->dh * (c->kh - 1) - 1) / c->sh + 1;
    int64_t ow = (c->iw + 2 * c->pw - c->dw * (c->kw - 1) - 1) / c->sw + 1;
    if (oh <= 0 || ow <= 0)
        return 0;
    int64_t rows = c->n * oh * ow, k = c->cin * c->kh * c->kw, kp = up16(k);
    static const uint32_t vs[3] = {16, 4, 1};
    int tried = 0;
    for (int w = 0; w < 3; w++) {
        kc_qpack_geom g;
        int ok = kc_qpack_init(&g, vs[w], rows, k, kp, c->cin, c->kh, c->kw, c->ih, c->iw, oh, ow,
                               c->sh, c->sw, c->dh, c->dw, c->ph, c->pw);
        /* a width fits exactly when it divides the channel count */
        KT_CHECK(ok == (c->cin % vs[w] == 0));
        if (!ok)
            continue;
        tried++;
        int bad = 0;
        uint32_t total = (uint32_t)rows * g.kc;
        KT_CHECK((int64_t)g.kc * vs[w] == kp);
        for (uint32_t i = 0; i < total && !bad; i++) {
            uint64_t src = 0;
            int kind = kc_qpack_src(&g, i, &src);
            int64_t r = (int64_t)i / g.kc, kk0 = ((int64_t)i % g.kc) * vs[w];
            for (uint32_t b = 0; b < vs[w]; b++) {
                int64_t want = naive_src(c, oh, ow, k, r, kk0 + b);
                int64_t got = kind < 0 ? -2 : kind == 0 ? -1 : (int64_t)src + b;
                if (want != got) {
                    printf("pack v=%u n%lld c%lld %lldx%lld k%lldx%lld s%lld d%lld p%lld: chunk %u "
                           "byte %u: %lld, naive %lld\n",
                           vs[w], (long long)c->n, (long long)c->cin, (long long)c->ih,
                           (long long)c->iw, (long long)c->kh, (long long)c->kw, (long long)c->sh,
                           (long long)c->dh, (long long)c->ph, i, b, (long long)got,
                           (long long)want);
                    bad = 1;
                    break;
                }
            }
        }
        KT_CHECK(!bad);
    }
    KT_CHECK(tried >= 1); /* width 1 always fits */
    /* the gathered pack (16 bytes a thread from the v = 1 geometry): every
     * byte the naive im2col's */
    kc_qpack_geom g1 = {0};
    int ok1 = kc_qpack_init(&g1, 1, rows, k, kp, c->cin, c->kh, c->kw, c->ih, c->iw, oh, ow, c->sh,
                            c->sw, c->dh, c->dw, c->ph, c->pw);
    KT_CHECK(ok1);
    uint32_t chunks = ok1 ? (uint32_t)rows * (uint32_t)(kp / 16) : 0;
    int gbad = 0;
    for (uint32_t i = 0; i < chunks && !gbad; i++) {
        uint64_t src[16];
        int kind[16];
        kc_qpack_gather16(&g1, i, src, kind);
        int64_t r = (int64_t)i / (kp / 16), kk0 = ((int64_t)i % (kp / 16)) * 16;
        for (int b = 0; b < 16; b++) {
            int64_t want = naive_src(c, oh, ow, k, r, kk0 + b);
            int64_t got = kind[b] < 0 ? -2 : kind[b] == 0 ? -1 : (int64_t)src[b];
            if (want != got) {
                printf("gather n%lld c%lld %lldx%lld k%lldx%lld: chunk %u byte %d: %lld, naive %lld\n",
                       (long long)c->n, (long long)c->cin, (long long)c->ih, (long long)c->iw,
                       (long long)c->kh, (long long)c->kw, i, b, (long long)got, (long long)want);
                gbad = 1;
                break;
            }
        }
    }
    KT_CHECK(!gbad);
    return tried;
}

static void test_pack(void) {
    static const conv_case fixed[] = {
        /* ResNet-50's shapes (small spatial sizes): stem 7x7 s2 C=3, 1x1, 3x3, 1x1 s2 */
        {2, 3, 17, 15, 7, 7, 2, 2, 1, 1, 3, 3},
        {1, 64, 5, 6, 1, 1, 1, 1, 1, 1, 0, 0},
        {2, 64, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1},
        {2, 32, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1},
        {3, 48, 6, 7, 1, 1, 2, 2, 1, 1, 0, 0},
        /* odd and small channel counts, dilation, asymmetric stride/pad */
        {1, 5, 8, 7, 3, 3, 1, 1, 1, 1, 1, 1},
        {2, 12, 9, 7, 3, 3, 2, 2, 1, 1, 1, 1},
        {1, 20, 9, 9, 3, 3, 1, 1, 2, 2, 2, 2},
        {2, 4, 6, 9, 3, 1, 1, 2, 1, 1, 1, 0},
        {1, 37, 1, 7, 1, 1, 1, 1, 1, 1, 0, 0}, /* a QMatMul as a 1x1 conv: [7, 37] */
    };
    int widths = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        widths += check_pack(&fixed[i]);
    for (int t = 0; t < 200; t++) {
        static const int64_t chans[] = {1, 3, 4, 8, 12, 16, 17, 32, 48, 64};
        conv_case c = {rnd(1, 3), chans[rnd(0, 9)], rnd(1, 9), rnd(1, 9), rnd(1, 3), rnd(1, 3),
                       rnd(1, 2), rnd(1, 2), rnd(1, 2), rnd(1, 2), rnd(0, 2), rnd(0, 2)};
        widths += check_pack(&c);
    }
    printf("pack: %d geometry/width pairs checked\n", widths);
}

static void test_too_large(void) {
    kc_qpack_geom g;
    /* rows * (kp / v) beyond 32 bits: refused, the tactic declines */
    KT_CHECK(!kc_qpack_init(&g, 1, (int64_t)1 << 26, 576, 576, 64, 3, 3, 8192, 8192, 8192, 8192,
                            1, 1, 1, 1, 1, 1));
    KT_CHECK(kc_qpack_init(&g, 16, (int64_t)1 << 26, 576, 576, 64, 3, 3, 8192, 8192, 8192, 8192,
                           1, 1, 1, 1, 1, 1));
    KT_CHECK(!kc_qpack_init(&g, 4, 10, 30, 32, 10, 1, 3, 4, 4, 4, 4, 1, 1, 1, 1, 0, 1));
    kc_qepi_geom e;
    KT_CHECK(!kc_qepi_init(&e, 4, 10, 30, 32, 0)); /* 30 channels: no groups of 4 */
    KT_CHECK(kc_qepi_init(&e, 1, 10, 30, 32, 0));
    KT_CHECK(!kc_qepi_init(&e, 1, (int64_t)1 << 30, 64, 64, 0));
}

static void check_epi(uint32_t v, int64_t rows, int64_t cols, int64_t sp) {
    kc_qepi_geom g;
    int64_t np = up16(cols);
    int ok = kc_qepi_init(&g, v, rows, cols, np, sp);
    KT_CHECK(ok == (cols % v == 0));
    if (!ok)
        return;
    uint8_t *seen_y = calloc((size_t)(rows * cols), 1), *seen_d = calloc((size_t)(rows * np), 1);
    int bad = 0;
    uint32_t total = (uint32_t)(rows * (cols / v));
    for (uint32_t i = 0; i < total && !bad; i++) {
        uint32_t r, c;
        uint64_t di, yi;
        kc_qepi_index(&g, i, &r, &c, &di, &yi);
        for (uint32_t j = 0; j < v; j++) {
            int64_t cc = c + j;
            int64_t wy = sp ? ((r / sp) * cols + cc) * sp + r % sp : (int64_t)r * cols + cc;
            /* a group's channels are contiguous in Y only when Y is row-major */
            int64_t gy = sp ? (int64_t)yi + (int64_t)j * sp : (int64_t)yi + j;
            int64_t gd = (int64_t)di + j;
            if (r >= rows || cc >= cols || gy != wy || gd != (int64_t)r * np + cc ||
                seen_y[wy]++ || seen_d[gd]++) {
                printf("epilogue v=%u rows %lld cols %lld sp %lld: group %u lane %u wrong\n", v,
                       (long long)rows, (long long)cols, (long long)sp, i, j);
                bad = 1;
                break;
            }
        }
    }
    for (int64_t i = 0; i < rows * cols && !bad; i++)
        bad = seen_y[i] != 1;
    KT_CHECK(!bad);
    free(seen_y);
    free(seen_d);
}

static void test_epi(void) {
    check_epi(4, 64 * 49, 64, 0);
    check_epi(4, 7, 48, 0);
    check_epi(4, 5, 30, 0);
    check_epi(1, 5, 30, 0);
    check_epi(1, 3 * 56, 11, 56); /* NCHW Y: 3 images of 56 pixels */
    check_epi(1, 1, 13, 1);
    for (int t = 0; t < 50; t++) {
        int64_t sp = rnd(1, 30), n = rnd(1, 4), cols = rnd(1, 70);
        check_epi(1, n * sp, cols, rnd(0, 1) ? sp : 0);
        check_epi(4, n * sp, cols / 4 * 4 + 4, 0);
    }
}

static void test_pattern(void) {
    int st[3] = {KN_QS_QDQ, KN_QS_ADD, KN_QS_RELU};
    uint32_t p = kc_qepi_pattern(3, st);
    KT_CHECK(p == KC_QP3(KN_QS_QDQ, KN_QS_ADD, KN_QS_RELU));
    KT_CHECK((p & 7u) == KN_QS_QDQ && ((p >> 3) & 7u) == KN_QS_ADD && ((p >> 6) & 7u) == KN_QS_RELU);
    KT_CHECK((p >> 9) == 0);
    KT_CHECK(kc_qepi_pattern(0, st) == 0);
    int two[2] = {KN_QS_ADD, KN_QS_RELU};
    KT_CHECK(kc_qepi_pattern(2, two) == KC_QP2(KN_QS_ADD, KN_QS_RELU));
    KT_CHECK(kc_qepi_pattern(1, two + 1) == KC_QP1(KN_QS_RELU));
    int all[KN_QL_MAX_STAGES];
    for (int i = 0; i < KN_QL_MAX_STAGES; i++)
        all[i] = 1 + i % 5;
    uint32_t q = kc_qepi_pattern(KN_QL_MAX_STAGES, all);
    for (int i = 0; i < KN_QL_MAX_STAGES; i++)
        KT_CHECK(((q >> (3 * i)) & 7u) == (uint32_t)all[i]);
}

/* The 8-bit MaxPool's threads: every output byte once, each thread's
 * window the naive one (the X bytes at (n, iy, ix, c..c+v-1)). */
static int check_qpool(uint32_t v, int64_t n, int64_t c, int64_t ih, int64_t iw, int64_t k,
                       int64_t s, int64_t d, int64_t p) {
    int64_t oh = (ih + 2 * p - d * (k - 1) - 1) / s + 1, ow = (iw + 2 * p - d * (k - 1) - 1) / s + 1;
    if (oh <= 0 || ow <= 0)
        return 0;
    kc_qpool_geom g;
    int full = kc_qpool_full(ih, oh, k, s, d, p) && kc_qpool_full(iw, ow, k, s, d, p);
    int ok = kc_qpool_init(&g, v, n, c, ih, iw, oh, ow, k, k, s, s, d, d, p, p);
    KT_CHECK(ok == (c % v == 0 && full));
    if (!ok)
        return 0;
    uint8_t *seen = calloc((size_t)(n * oh * ow * c), 1);
    int bad = 0;
    uint32_t total = (uint32_t)(n * oh * ow * (c / v));
    for (uint32_t i = 0; i < total && !bad; i++) {
        uint64_t yo;
        uint32_t co, base;
        int32_t y0, x0;
        kc_qpool_index(&g, i, &yo, &co, &base, &y0, &x0);
        int64_t cg = i % (c / v), pix = i / (c / v), ox = pix % ow, oy = (pix / ow) % oh,
                nn = pix / (ow * oh);
        if ((int64_t)yo != pix * c + cg * v || (int64_t)co != cg * v ||
            (int64_t)base != nn * ih * iw || y0 != oy * s - p || x0 != ox * s - p)
            bad = 1;
        for (uint32_t j = 0; j < v && !bad; j++)
            bad = seen[yo + j]++ != 0;
        /* the window's X byte of (iy, ix) as the kernel forms it */
        int64_t iy = y0 + (k - 1) * d, ix = x0;
        if (!bad && iy >= 0 && iy < ih && ix >= 0 && ix < iw)
            bad = (int64_t)(((uint64_t)base + (uint64_t)iy * g.iw + (uint64_t)ix) * g.c + co) !=
                  ((nn * ih + iy) * iw + ix) * c + cg * v;
    }
    for (int64_t i = 0; i < n * oh * ow * c && !bad; i++)
        bad = seen[i] != 1;
    if (bad)
        printf("qpool v=%u n%lld c%lld %lldx%lld k%lld s%lld d%lld p%lld wrong\n", v, (long long)n,
               (long long)c, (long long)ih, (long long)iw, (long long)k, (long long)s, (long long)d,
               (long long)p);
    KT_CHECK(!bad);
    free(seen);
    return 1;
}

static void test_qpool(void) {
    int done = 0;
    done += check_qpool(16, 2, 64, 12, 11, 3, 2, 1, 1); /* the ResNet stem's pool */
    done += check_qpool(4, 1, 12, 7, 9, 3, 2, 1, 1);
    done += check_qpool(1, 3, 5, 6, 6, 2, 1, 2, 1);
    KT_CHECK(done == 3);
    /* a window of padding only: refused (the general kernel runs it) */
    KT_CHECK(!kc_qpool_full(4, 5, 2, 1, 1, 2));
    KT_CHECK(kc_qpool_full(4, 3, 3, 1, 1, 1));
    kc_qpool_geom g;
    KT_CHECK(!kc_qpool_init(&g, 16, 2, 24, 8, 8, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1)); /* 24 % 16 */
    KT_CHECK(kc_qpool_init(&g, 4, 2, 24, 8, 8, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1));
    for (int t = 0; t < 100; t++) {
        static const uint32_t vs[3] = {16, 4, 1};
        static const int64_t chans[] = {1, 3, 4, 8, 16, 32, 48, 64};
        check_qpool(vs[rnd(0, 2)], rnd(1, 3), chans[rnd(0, 7)], rnd(1, 9), rnd(1, 9), rnd(1, 3),
                    rnd(1, 2), rnd(1, 2), rnd(0, 2));
    }
}

int main(void) {
    test_qpool();
    test_pack();
    test_too_large();
    test_epi();
    test_pattern();
    return kt_finish();
}
