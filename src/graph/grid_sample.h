/* grid_sample.h - GridSample's sampling rule along one axis, shared by the
 * CPU reference and the CUDA kernel (plain C, host and device): where a
 * normalized coordinate lands, which input positions it reads and with what
 * weights. The mode and padding codes are KN_GS_* of graph/ops_nn.h. */
#ifndef KILN_GRID_SAMPLE_H
#define KILN_GRID_SAMPLE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KN_GS_FN static __host__ __device__ __forceinline__
#else
#define KN_GS_FN static inline
#endif

/* Up to four reads along one axis: input positions (-1 reads as zero) and
 * their weights. */
typedef struct kn_gs_taps {
    int n;
    int64_t idx[4];
    double w[4];
} kn_gs_taps;

/* Reflect x into [lo, hi] off the nearer border, as many times as it takes. */
KN_GS_FN double kn_gs_reflect(double x, double lo, double hi) {
    double range = hi - lo;
    if (range <= 0)
        return lo;
    if (x >= lo && x <= hi)
        return x;
    double d = x < lo ? lo - x : x - hi;
    double k = floor(d / range), r = d - k * range;
    bool even = fmod(k, 2.0) == 0.0;
    if (x < lo)
        return even ? lo + r : hi - r;
    return even ? hi - r : lo + r;
}

/* The input position a tap at integer i reads on an axis of size d. */
KN_GS_FN int64_t kn_gs_pixel(int64_t i, int64_t d, int padding, double lo, double hi) {
    if (padding == 1) /* border */
        return i < 0 ? 0 : i >= d ? d - 1 : i;
    if (padding == 2) { /* reflection */
        int64_t j = (int64_t)kn_gs_reflect((double)i, lo, hi); /* truncation, as the spec's reference */
        return j < 0 ? 0 : j >= d ? d - 1 : j;
    }
    return i >= 0 && i < d ? i : -1; /* zeros */
}

/* Keys' cubic convolution weights (a = -0.75) for the four taps around a
 * point t past the first inner tap (0 <= t < 1). */
KN_GS_FN void kn_gs_cubic(double t, double *c) {
    const double a = -0.75;
    double x = t + 1.0;
    c[0] = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    c[1] = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
    x = 1.0 - t;
    c[2] = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    x = 2.0 - t;
    c[3] = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
}

/* The taps of normalized coordinate g (-1 .. 1 spans the axis) on an axis of
 * size d: unnormalized by align_corners, rounded to even for nearest, moved
 * inside by border or reflection padding, then split into the mode's taps. */
KN_GS_FN void kn_gs_axis(double g, int64_t d, int mode, int padding, bool align, kn_gs_taps *t) {
    double x = align ? (g + 1.0) / 2.0 * (double)(d - 1) : ((g + 1.0) * (double)d - 1.0) / 2.0;
    if (x != x)
        x = -2.0; /* NaN: outside, on the low side */
    x = x < -1e7 ? -1e7 : x > 1e7 ? 1e7 : x; /* far outside is outside; keeps floor in range */
    if (mode == 1)
        x = rint(x);
    double lo = align ? 0.0 : -0.5, hi = align ? (double)(d - 1) : (double)d - 0.5;
    if (x < lo || x > hi) {
        /* cubic with border padding clamps each tap only (below), as ONNX
           Runtime and PyTorch do; the spec's Python reference also clamps
           the point itself, which changes results near the border */
        if (padding == 1 && mode != 2)
            x = x < 0 ? 0 : x > (double)(d - 1) ? (double)(d - 1) : x;
        else if (padding == 2)
            x = kn_gs_reflect(x, lo, hi);
    }
    if (mode == 1) { /* nearest */
        t->n = 1;
        t->idx[0] = kn_gs_pixel((int64_t)x, d, padding, lo, hi);
        t->w[0] = 1.0;
        return;
    }
    double f = floor(x);
    int64_t i0 = (int64_t)f;
    if (mode == 0) { /* linear */
        t->n = 2;
        t->idx[0] = kn_gs_pixel(i0, d, padding, lo, hi);
        t->idx[1] = kn_gs_pixel(i0 + 1, d, padding, lo, hi);
        t->w[0] = 1.0 - (x - f);
        t->w[1] = x - f;
        return;
    }
    t->n = 4; /* cubic */
    kn_gs_cubic(x - f, t->w);
    for (int k = 0; k < 4; k++)
        t->idx[k] = kn_gs_pixel(i0 - 1 + k, d, padding, lo, hi);
}

#endif
