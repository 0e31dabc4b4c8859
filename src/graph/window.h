/* window.h - HannWindow, HammingWindow and BlackmanWindow's values, shared
 * by the CPU reference and the CUDA kernel (plain C, host and device). */
#ifndef KILN_WINDOW_H
#define KILN_WINDOW_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KN_WIN_FN static __host__ __device__ __forceinline__
#else
#define KN_WIN_FN static inline
#endif

enum { KN_WINDOW_HANN = 0, KN_WINDOW_HAMMING = 1, KN_WINDOW_BLACKMAN = 2 };

/* The window of an op type: HannWindow, HammingWindow, else Blackman
 * (host code). */
static inline int kn_window_kind(const char *op) {
    return strcmp(op, "HannWindow") == 0      ? KN_WINDOW_HANN
           : strcmp(op, "HammingWindow") == 0 ? KN_WINDOW_HAMMING
                                              : KN_WINDOW_BLACKMAN;
}

/* Element n of a window of `size`: periodic windows divide by size (as for
 * spectral analysis), symmetric ones by size - 1. */
KN_WIN_FN double kn_window_value(int kind, int64_t n, int64_t size, int periodic) {
    const double pi = 3.14159265358979323846;
    double d = (double)(periodic ? size : size - 1);
    double t = (double)n / d;
    if (kind == KN_WINDOW_HANN) {
        double s = sin(pi * t);
        return s * s;
    }
    if (kind == KN_WINDOW_HAMMING) {
        const double a = 25.0 / 46.0;
        return a - (1.0 - a) * cos(2.0 * pi * t);
    }
    return 0.42 - 0.5 * cos(2.0 * pi * t) + 0.08 * cos(4.0 * pi * t);
}

#endif
