/* spectral.h - DFT, STFT, MelWeightMatrix and Det: the rules shared by shape
 * inference, the CPU reference and the CUDA kernels. The functions up to the
 * host-only section are plain C for the host and the device, so both
 * backends take the same twiddles, frequency bins and pivots. */
#ifndef KILN_SPECTRAL_H
#define KILN_SPECTRAL_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KN_SP_FN static __host__ __device__ __forceinline__
#else
#define KN_SP_FN static inline
#endif

/* ---------------- DFT and STFT ---------------- */

/* A DFT along one axis: the input seen as [outer, len, inner, cin] (cin 1:
 * real, 2: complex), the output as [outer, out_len, inner, 2]. Samples past
 * len are zeros and samples past n are not read (ONNX's dft_length pads or
 * truncates); an inverse transform is scaled by 1/n. */
typedef struct kn_dft {
    int64_t axis; /* in [0, rank - 2] */
    int64_t outer, len, inner;
    int64_t cin;
    int64_t n;       /* the transform's size (dft_length) */
    int64_t out_len; /* n, or n/2 + 1 when onesided */
    int inverse;
} kn_dft;

/* The STFT of signal [batch, len, cin]: frame f starts at sample f * step;
 * its samples t < min(win, n) are weighted by the window (ones without one)
 * and transformed at size n into [batch, frames, bins, 2]. Samples past the
 * signal's end are zeros (a window longer than the signal's rest, as ONNX's
 * reference pads). */
typedef struct kn_stft {
    int64_t batch, len, cin;
    int64_t step, n, win; /* win: the window's length, or n without one */
    int64_t frames, bins;
} kn_stft;

/* Twiddle m of a size-n transform: cos and sin of 2*pi*m/n. Every product
 * k*t is reduced mod n first (kn_dft_step), so the angle never grows and
 * both backends index one table the same way. */
KN_SP_FN void kn_dft_twiddle(int64_t m, int64_t n, double *c, double *s) {
    const double two_pi = 6.28318530717958647692;
    double a = two_pi * (double)m / (double)n;
    *c = cos(a);
    *s = sin(a);
}

/* The next twiddle index of bin k: m = k*t mod n for t = 0, 1, 2, ... */
KN_SP_FN int64_t kn_dft_step(int64_t m, int64_t k, int64_t n) {
    m += k;
    return m >= n ? m - n : m;
}

/* How many input samples a transform reads: those before both ends. */
KN_SP_FN int64_t kn_dft_taps(const kn_dft *g) { return g->len < g->n ? g->len : g->n; }
KN_SP_FN int64_t kn_stft_taps(const kn_stft *g) { return g->win < g->n ? g->win : g->n; }

/* ---------------- MelWeightMatrix ---------------- */

/* The mel filter bank: the mel edges and step as ONNX's reference computes
 * them (kn_mel_edges), then num_mel_bins + 2 frequency bins, each
 * floor((dft_length + 1) * hz / sample_rate), into [dft_length/2 + 1,
 * num_mel_bins] triangles. */
typedef struct kn_mel {
    int64_t nmel, dft_length, sample_rate, nspec;
    double low_mel, mel_step;
} kn_mel;

/* a * b and a + b rounded once each, never fused into an FMA (nvcc fuses
 * by default), so the device finds the host's bins. */
KN_SP_FN double kn_sp_mul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
KN_SP_FN double kn_sp_add(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}

/* numpy's floor_divide of two doubles (npy_divmod): the quotient of
 * a - fmod(a, b), rounded to the nearest integer when floor would be off by
 * one, so that an exact multiple is not floored below itself. */
KN_SP_FN double kn_floor_div(double a, double b) {
    double mod = fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0.0 && ((b < 0) != (mod < 0)))
        div -= 1.0;
    if (div == 0.0)
        return copysign(0.0, a / b);
    double f = floor(div);
    return div - f > 0.5 ? f + 1.0 : f;
}

/* Frequency bin k (0 .. num_mel_bins + 1) of the filter bank. */
KN_SP_FN int64_t kn_mel_bin(const kn_mel *g, int64_t k) {
    double mel = kn_sp_add(kn_sp_mul((double)k, g->mel_step), g->low_mel);
    double hz = kn_sp_mul(700.0, pow(10.0, mel / 2595.0) - 1.0);
    double b = kn_floor_div(kn_sp_mul((double)(g->dft_length + 1), hz), (double)g->sample_rate);
    /* a bin past +-2^62 (absurd edges) is refused by kn_mel_setup, which sees
     * it clamped: the cast of an out-of-range double is undefined */
    b = b > 4.6e18 ? 4.6e18 : b < -4.6e18 ? -4.6e18 : b;
    return b == b ? (int64_t)b : (int64_t)-4.6e18;
}

/* Weight of spectrogram bin j in the triangle with bins b0 (left), b1
 * (centre) and b2 (right): the rising edge over [b0, b1] (a single 1 at b1
 * when b0 == b1), then the falling edge over [b1, b2) written over it, in
 * the order ONNX's reference writes them. */
KN_SP_FN double kn_mel_weight(int64_t j, int64_t b0, int64_t b1, int64_t b2) {
    double v = 0.0;
    if (b1 == b0) {
        if (j == b1)
            v = 1.0;
    } else if (j >= b0 && j <= b1) {
        v = (double)(j - b0) / (double)(b1 - b0);
    }
    if (b2 > b1 && j >= b1 && j < b2)
        v = (double)(b2 - j) / (double)(b2 - b1);
    return v;
}

/* ---------------- Det ---------------- */

/* The pivot row of column k of an m x m row-major matrix: the first row at
 * or below k with the largest magnitude (LAPACK's getrf takes the same). */
KN_SP_FN int64_t kn_det_pivot(const double *a, int64_t m, int64_t k) {
    int64_t p = k;
    double best = fabs(a[k * m + k]);
    for (int64_t i = k + 1; i < m; i++) {
        double v = fabs(a[i * m + k]);
        if (v > best) {
            best = v;
            p = i;
        }
    }
    return p;
}

/* One step of the elimination below pivot k: row i (> k) loses l times the
 * pivot row at column j (> k), l = a[i][k] / a[k][k]. Rounded once per
 * operation (no FMA) so the device's LU is the host's to the bit; the
 * updates of one k touch neither column k nor row k, so they may run in
 * any order. */
KN_SP_FN void kn_det_update(double *a, int64_t m, int64_t k, int64_t i, int64_t j) {
    double l = a[i * m + k] / a[k * m + k];
    a[i * m + j] = kn_sp_add(a[i * m + j], -kn_sp_mul(l, a[k * m + j]));
}

/* ---------------- host only: geometry from a node ---------------- */

#ifndef __CUDACC__
#include "graph.h"

/* DFT (opset 17: axis attribute, default 1; opset 20: axis input, default
 * -2), with dft_length (input 1) and the axis known on the host as in[i].value. */
KN_HIDDEN kiln_status kn_dft_setup(const kn_node *node, const kn_tinfo *in, int n_in, kn_dft *g);
/* STFT: frame_step (input 1) and frame_length (input 3) on the host. */
KN_HIDDEN kiln_status kn_stft_setup(const kn_node *node, const kn_tinfo *in, int n_in, kn_stft *g);
/* MelWeightMatrix: all five inputs on the host; checks that every bin the
 * triangles write lies in the spectrogram. */
KN_HIDDEN kiln_status kn_mel_setup(const kn_node *node, const kn_tinfo *in, int n_in, kn_mel *g);
/* The mel edges in the precision ONNX's reference has them (float for
 * float32, float16 and bfloat16 edges, double for double ones):
 * mel(f) = 2595 log10(1 + f / 700), step = (mel(upper) - mel(lower)) /
 * (num_mel_bins + 2). */
KN_HIDDEN void kn_mel_edges(kiln_dtype t, double lower, double upper, int64_t nmel, double *low_mel,
                            double *mel_step);
/* Whether MelWeightMatrix can write type t (every real and integer type). */
KN_HIDDEN bool kn_mel_out_type(kiln_dtype t);
/* Det over X [*, M, M]: the batch count and M. */
KN_HIDDEN kiln_status kn_det_setup(const kn_node *node, const kn_tinfo *x, int64_t *batch, int64_t *m);
#endif

#endif
