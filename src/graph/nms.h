/* nms.h - NonMaxSuppression's overlap test, shared by the CPU reference and
 * the CUDA kernel (plain C, host and device) so that both suppress exactly
 * the same boxes. Float arithmetic with every product rounded on its own
 * (no fused multiply-add), as the spec's reference computes it. */
#ifndef KILN_NMS_H
#define KILN_NMS_H

#include <stdbool.h>

#ifdef __CUDACC__
#define KN_NMS_FN static __host__ __device__ __forceinline__
#if defined(__CUDA_ARCH__)
#define KN_NMS_MUL(a, b) __fmul_rn((a), (b))
#else
#define KN_NMS_MUL(a, b) ((a) * (b))
#endif
#else
#define KN_NMS_FN static inline
#define KN_NMS_MUL(a, b) ((a) * (b))
#endif

/* A box's extent along x and y: corners [y1, x1, y2, x2] in any diagonal
 * order (center 0) or [x_center, y_center, width, height] (center 1). */
KN_NMS_FN void kn_nms_extent(const float *b, int center, float *x0, float *x1, float *y0, float *y1) {
    if (center) {
        float hw = b[2] / 2, hh = b[3] / 2;
        *x0 = b[0] - hw;
        *x1 = b[0] + hw;
        *y0 = b[1] - hh;
        *y1 = b[1] + hh;
        return;
    }
    *x0 = b[1] < b[3] ? b[1] : b[3];
    *x1 = b[1] < b[3] ? b[3] : b[1];
    *y0 = b[0] < b[2] ? b[0] : b[2];
    *y1 = b[0] < b[2] ? b[2] : b[0];
}

/* Whether box a suppresses box b: their intersection over union is above
 * the threshold. Boxes without area never suppress. */
KN_NMS_FN bool kn_nms_suppress(const float *a, const float *b, int center, float iou_threshold) {
    float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
    kn_nms_extent(a, center, &ax0, &ax1, &ay0, &ay1);
    kn_nms_extent(b, center, &bx0, &bx1, &by0, &by1);
    float ix0 = ax0 > bx0 ? ax0 : bx0, ix1 = ax1 < bx1 ? ax1 : bx1;
    if (ix1 <= ix0)
        return false;
    float iy0 = ay0 > by0 ? ay0 : by0, iy1 = ay1 < by1 ? ay1 : by1;
    if (iy1 <= iy0)
        return false;
    float inter = KN_NMS_MUL(ix1 - ix0, iy1 - iy0);
    if (inter <= 0)
        return false;
    float area_a = KN_NMS_MUL(ax1 - ax0, ay1 - ay0), area_b = KN_NMS_MUL(bx1 - bx0, by1 - by0);
    float uni = area_a + area_b - inter;
    if (area_a <= 0 || area_b <= 0 || uni <= 0)
        return false;
    return inter / uni > iou_threshold;
}

#endif
