/* roi_align.h - RoiAlign's geometry, shared by the CPU reference and the
 * CUDA kernel (plain C, host and device): where a region's bins and their
 * sample points fall, and the four input positions and weights of a sample's
 * bilinear read. Double arithmetic on both sides. */
#ifndef KILN_ROI_ALIGN_H
#define KILN_ROI_ALIGN_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KN_RA_FN static __host__ __device__ __forceinline__
#else
#define KN_RA_FN static inline
#endif

/* One region: its start, the size of a bin and the samples a bin takes
 * along each axis. */
typedef struct kn_roi_box {
    double y0, x0, bin_h, bin_w;
    int64_t grid_h, grid_w;
} kn_roi_box;

/* The most samples a bin takes along one axis, and in all: a region whose
 * bins would take more (only a region thousands of times taller or wider
 * than its output, or not finite) is refused instead of looping for hours
 * (and converting a huge ceil() to int64 is undefined). */
#define KN_ROI_MAX_GRID 4096
#define KN_ROI_MAX_SAMPLES (1 << 20)

/* roi = [x1, y1, x2, y2] in input coordinates before spatial_scale;
 * half_pixel shifts by half a pixel (coordinate_transformation_mode), else a
 * region is at least one pixel wide; sampling 0 takes ceil(bin size) samples.
 * False (box unset) when a coordinate or bin size is not finite or the sample
 * grid is beyond KN_ROI_MAX_GRID a side or KN_ROI_MAX_SAMPLES a bin. */
KN_RA_FN bool kn_roi_box_of(const double *roi, double scale, bool half_pixel, int64_t oh, int64_t ow,
                            int64_t sampling, kn_roi_box *b) {
    double off = half_pixel ? 0.5 : 0.0;
    double x0 = roi[0] * scale - off, y0 = roi[1] * scale - off;
    double w = roi[2] * scale - off - x0, h = roi[3] * scale - off - y0;
    if (!half_pixel) {
        w = w > 1.0 ? w : 1.0;
        h = h > 1.0 ? h : 1.0;
    }
    double bh = h / (double)oh, bw = w / (double)ow;
    if (!isfinite(x0) || !isfinite(y0) || !isfinite(bh) || !isfinite(bw))
        return false;
    double gh = sampling > 0 ? (double)sampling : ceil(bh);
    double gw = sampling > 0 ? (double)sampling : ceil(bw);
    gh = gh > 0.0 ? gh : 0.0;
    gw = gw > 0.0 ? gw : 0.0;
    if (gh > (double)KN_ROI_MAX_GRID || gw > (double)KN_ROI_MAX_GRID || gh * gw > (double)KN_ROI_MAX_SAMPLES)
        return false;
    b->y0 = y0;
    b->x0 = x0;
    b->bin_h = bh;
    b->bin_w = bw;
    b->grid_h = (int64_t)gh;
    b->grid_w = (int64_t)gw;
    return true;
}

/* The bilinear read of point (y, x) on an h x w plane: four positions and
 * weights; a point more than a pixel outside reads nothing (all weights 0). */
KN_RA_FN void kn_roi_sample(double y, double x, int64_t h, int64_t w, int64_t *pos, double *wt) {
    if (y < -1.0 || y > (double)h || x < -1.0 || x > (double)w) {
        for (int k = 0; k < 4; k++) {
            pos[k] = 0;
            wt[k] = 0.0;
        }
        return;
    }
    y = y > 0 ? y : 0;
    x = x > 0 ? x : 0;
    int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;
    if (yl >= h - 1) {
        yh = yl = h - 1;
        y = (double)yl;
    } else {
        yh = yl + 1;
    }
    if (xl >= w - 1) {
        xh = xl = w - 1;
        x = (double)xl;
    } else {
        xh = xl + 1;
    }
    double ly = y - (double)yl, lx = x - (double)xl, hy = 1.0 - ly, hx = 1.0 - lx;
    pos[0] = yl * w + xl;
    pos[1] = yl * w + xh;
    pos[2] = yh * w + xl;
    pos[3] = yh * w + xh;
    wt[0] = hy * hx;
    wt[1] = hy * lx;
    wt[2] = ly * hx;
    wt[3] = ly * lx;
}

/* One output value: the average (mode 0) of a bin's samples, or (mode 1)
 * the largest weighted corner over them, as the spec's reference computes
 * max; `plane` is the region's image and channel. LD(plane, i) reads one
 * value as double. */
#define KN_ROI_BIN(LD, plane, b, ph, pw, h, w, mode, out)                                     \
    do {                                                                                      \
        double acc_ = 0.0;                                                                    \
        bool first_ = true;                                                                   \
        for (int64_t iy_ = 0; iy_ < (b)->grid_h; iy_++) {                                     \
            double y_ = (b)->y0 + (double)(ph) * (b)->bin_h +                                 \
                        ((double)iy_ + 0.5) * (b)->bin_h / (double)(b)->grid_h;               \
            for (int64_t ix_ = 0; ix_ < (b)->grid_w; ix_++) {                                 \
                double x_ = (b)->x0 + (double)(pw) * (b)->bin_w +                             \
                            ((double)ix_ + 0.5) * (b)->bin_w / (double)(b)->grid_w;           \
                int64_t p_[4];                                                                \
                double wt_[4];                                                                \
                kn_roi_sample(y_, x_, (h), (w), p_, wt_);                                     \
                if ((mode) == 0) {                                                            \
                    for (int k_ = 0; k_ < 4; k_++)                                            \
                        acc_ += wt_[k_] * LD((plane), p_[k_]);                                \
                } else {                                                                      \
                    for (int k_ = 0; k_ < 4; k_++) {                                          \
                        double v_ = wt_[k_] * LD((plane), p_[k_]);                            \
                        if (first_ || v_ > acc_)                                              \
                            acc_ = v_;                                                        \
                        first_ = false;                                                       \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        int64_t n_ = (b)->grid_h * (b)->grid_w;                                               \
        (out) = (mode) == 0 ? acc_ / (double)(n_ > 0 ? n_ : 1) : acc_;                         \
    } while (0)

#endif
