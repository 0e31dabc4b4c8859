/* ops_tensor.h - parameter decoding shared by the tensor family's shape
 * inference (ops_tensor.c) and its kernels (backends/cpu/k_tensor*.c), so
 * that both read attributes and value inputs the same way. */
#ifndef KILN_OPS_TENSOR_H
#define KILN_OPS_TENSOR_H

#include <string.h>

#include "graph.h"
#include "random.h"

/* The random ops (graph/random.h): what to draw, and the output type
 * (UNDEFINED: the input's). */
typedef struct kn_random {
    int kind;
    double a, b;        /* uniform: low, high; normal: mean, scale */
    int64_t samples;    /* Multinomial's sample_size */
    bool from_input;    /* the shape comes from input 0 */
    bool has_seed;
    double seed;
    kiln_dtype dtype;
} kn_random;
KN_HIDDEN kiln_status kn_random_decode(const kn_node *n, kn_random *p);
/* The generator key: from the seed attribute, else a new one each call. */
KN_HIDDEN uint64_t kn_random_key(const kn_random *p);

/* Shape's [start, end) window over a rank-`rank` input, clamped (opset 15's
 * start and end attributes; end never before start). */
KN_HIDDEN void kn_shape_window(const kn_node *n, int rank, int64_t *start, int64_t *end);

/* Per-axis window of Slice: output dim d reads input index start[d] + i*step[d]
 * for i in [0, count[d]). Axes not sliced get start 0, step 1, count dim. */
typedef struct kn_slice_plan {
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS], count[KILN_MAX_DIMS];
} kn_slice_plan;
/* in[1..4] are starts/ends/axes/steps (opset >= 10, values needed), or the
 * attributes of opset 1. */
KN_HIDDEN kiln_status kn_slice_decode(const kn_node *n, const kn_tinfo *in, int n_in,
                                      kn_slice_plan *p);

/* Pad: begin/end amounts per axis (may be negative) and the mode. */
enum { KN_PAD_CONSTANT, KN_PAD_REFLECT, KN_PAD_EDGE, KN_PAD_WRAP };
typedef struct kn_pad_plan {
    int64_t begin[KILN_MAX_DIMS], end[KILN_MAX_DIMS];
    int mode;
} kn_pad_plan;
KN_HIDDEN kiln_status kn_pad_decode(const kn_node *n, const kn_tinfo *in, int n_in,
                                    kn_pad_plan *p);
/* CenterCropPad (opset 18) as a constant-zero pad with negative amounts
 * where it crops. */
KN_HIDDEN kiln_status kn_center_crop_pad_decode(const kn_node *n, const kn_tinfo *in, int n_in,
                                                kn_pad_plan *p);

/* Resize / Upsample: everything a kernel needs beside the data. */
enum { KN_RS_NEAREST, KN_RS_LINEAR, KN_RS_CUBIC };
enum {
    KN_CT_HALF_PIXEL, KN_CT_HALF_PIXEL_SYMMETRIC, KN_CT_PYTORCH_HALF_PIXEL, KN_CT_ALIGN_CORNERS,
    KN_CT_ASYMMETRIC, KN_CT_TF_HALF_PIXEL_FOR_NN, KN_CT_TF_CROP_AND_RESIZE
};
enum {
    KN_NM_ROUND_PREFER_FLOOR, KN_NM_ROUND_PREFER_CEIL, KN_NM_FLOOR, KN_NM_CEIL,
    KN_NM_SIMPLE /* opset < 11 and Upsample: ceil when shrinking, else floor */
};
typedef struct kn_resize_plan {
    int rank;
    int64_t out[KILN_MAX_DIMS];     /* output dims */
    double scale[KILN_MAX_DIMS];    /* per axis, used by the coordinate transform */
    double roi_start[KILN_MAX_DIMS], roi_end[KILN_MAX_DIMS];
    int mode, coord, nearest;
    double cubic_a, extrapolation;
    bool exclude_outside, antialias;
} kn_resize_plan;
KN_HIDDEN kiln_status kn_resize_decode(const kn_node *n, const kn_tinfo *in, int n_in,
                                       kn_resize_plan *p);

/* Split: sizes of the n_out parts along `axis` (normalised). */
KN_HIDDEN kiln_status kn_split_decode(const kn_node *n, const kn_tinfo *in, int n_in, int n_out,
                                      int *axis, int64_t *sizes);

/* A kn_tinfo describing a tensor whose values are at `data` (for kernels
 * that reuse the decoders above). */
static inline kn_tinfo kn_tinfo_of(kiln_dtype dtype, int rank, const int64_t *dims,
                                   const void *data) {
    kn_tinfo t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.rank = rank;
    for (int i = 0; i < rank && i < KILN_MAX_DIMS; i++)
        t.dims[i] = dims[i];
    t.value = data;
    return t;
}

#endif
