/* shape.cuh - launchers of the CUDA shape family (k_shape.c is their glue):
 * Resize / Upsample, Range, OneHot, EyeLike, GatherND, ScatterND /
 * ScatterElements, ReverseSequence, TopK, Hardmax, MaxUnpool, NonZero,
 * Compress and Unique. Arithmetic follows the CPU reference kernels (k_tensor*.c):
 * values in double, integers in int64, stores to integer types round to
 * nearest and saturate. Index tensors read on the device that are out of
 * range read zeros (gathers) or are skipped (scatters); the glue checks
 * indices known on the host. */
#ifndef KILN_CUDA_SHAPE_CUH
#define KILN_CUDA_SHAPE_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Resize: per axis d a table of taps for each output coordinate o, in one
 * device buffer at the byte offsets below: cnt[o] (int64; <= 0: the output
 * gets the extrapolation value), idx[o * cap + j] (int64 source index) and
 * w[o * cap + j] (double weight). Nearest copies the first tap's element;
 * otherwise the output is the weighted sum over the product of the axes' taps. */
typedef struct kc_resize {
    int rank, nearest;
    kiln_dtype dt;
    size_t es;
    int64_t total;
    int64_t out_dims[KC_MAX_DIMS], x_strides[KC_MAX_DIMS], cap[KC_MAX_DIMS];
    int64_t cnt_at[KC_MAX_DIMS], idx_at[KC_MAX_DIMS], w_at[KC_MAX_DIMS];
    uint64_t extra;   /* the extrapolation value's bytes, in x's type */
} kc_resize;
cudaError_t kc_resize_run(const void *x, void *y, const void *tables, const kc_resize *p,
                          cudaStream_t stream);

/* Range: y[i] = start + i * delta for i < n, in double for real types
 * (fs, fd) and in int64 for integer types (is, id). */
cudaError_t kc_range(void *y, kiln_dtype dt, int64_t n, double fs, double fd, int64_t is,
                     int64_t id, cudaStream_t stream);

/* EyeLike: y [rows, cols] of es-byte elements all zero but y[i, i + k],
 * which get the low es bytes of `one`. */
cudaError_t kc_eyelike(void *y, size_t es, uint64_t one, int64_t rows, int64_t cols, int64_t k,
                       cudaStream_t stream);

/* OneHot: y [outer, depth, inner] gets vals[1] where the index
 * ix[outer, inner] (negative counting from depth) equals the depth
 * coordinate, else vals[0]; vals holds two es-byte elements on the device. */
cudaError_t kc_onehot(const void *ix, kiln_dtype idt, const void *vals, void *y, size_t es,
                      int64_t outer, int64_t depth, int64_t inner, cudaStream_t stream);

/* GatherND / ScatterND: tuple t of k int64 indices addresses data dims
 * dims[0..k) (strides in elements) inside batch t / per_batch (batch_stride
 * elements apart; per_batch 0: no batch); a slice of `slice` elements
 * follows each addressed point. */
typedef struct kc_nd {
    int k;
    int64_t dims[KC_MAX_DIMS], strides[KC_MAX_DIMS];
    int64_t tuples, slice, per_batch, batch_stride;
} kc_nd;
cudaError_t kc_gather_nd(const void *x, const int64_t *ix, void *y, size_t es, const kc_nd *p,
                         cudaStream_t stream);

/* Scatter reductions, as the ONNX attribute names them. */
enum { KC_RED_NONE, KC_RED_ADD, KC_RED_MUL, KC_RED_MAX, KC_RED_MIN };
/* y (already holding the data) gets updates u [tuples, slice] at the
 * tuples' offsets, combined by `red`. Without a reduction, which of two
 * updates of one element wins is unspecified (ONNX leaves it undefined). */
cudaError_t kc_scatter_nd(void *y, const int64_t *ix, const void *u, kiln_dtype dt, int red,
                          const kc_nd *p, cudaStream_t stream);
/* ScatterElements: update e (of idx_dims' shape) goes to y at its own
 * coordinates with the one along `axis` replaced by idx[e]. */
typedef struct kc_scatter_el {
    int rank, axis;
    int64_t idx_dims[KC_MAX_DIMS], y_strides[KC_MAX_DIMS];
    int64_t axis_len, total;
} kc_scatter_el;
cudaError_t kc_scatter_elements(void *y, const void *ix, kiln_dtype idt, const void *u,
                                kiln_dtype dt, int red, const kc_scatter_el *p,
                                cudaStream_t stream);

/* ReverseSequence: x [T, B, inner] (batch_axis 1) or [B, T, inner]
 * (batch_axis 0); the first lens[b] steps of batch b reversed (lengths
 * outside [0, T] are clamped). */
cudaError_t kc_reverse_sequence(const void *x, void *y, size_t es, const void *lens,
                                kiln_dtype ldt, int64_t T, int64_t B, int64_t inner,
                                int batch_axis, cudaStream_t stream);

/* TopK over n of [outer, n, inner]: the k largest (or smallest) in order,
 * ties and NaNs as the CPU's stable sort (NaN above every number, equal
 * values by index). vals (x's type) and idx (int64) are [outer, k, inner];
 * either may be NULL. Slices of up to 2048 elements sort in shared memory
 * without workspace; longer ones use CUB's segmented radix sort in the
 * workspace kc_topk_workspace reports. */
cudaError_t kc_topk_workspace(int64_t outer, int64_t n, int64_t inner, size_t *bytes);
cudaError_t kc_topk(const void *x, kiln_dtype dt, void *vals, int64_t *idx, int64_t outer,
                    int64_t n, int64_t inner, int64_t k, int largest, void *ws, size_t wsz,
                    cudaStream_t stream);

/* NonMaxSuppression of boxes [B, N, 4] with scores [B, C, N] (float): y
 * [selected, 3] int64 rows (batch, class, box) in batch, class and
 * selection order, *count (host, page-locked) the rows once the stream
 * reaches it. The scores are sorted by kc_topk in the workspace; a bit
 * matrix of which candidate suppresses which (up to 16384 candidates of a
 * class, all classes' matrices within 64 MiB of the workspace) settles the
 * selection, and what it does not cover is walked a candidate at a time. */
typedef struct kc_nms_params {
    int64_t b, c, n, max_out;
    int center, has_score;
    float iou, score;
} kc_nms_params;
cudaError_t kc_nms_workspace(int64_t b, int64_t c, int64_t n, size_t *bytes);
cudaError_t kc_nms(const float *boxes, const float *scores, const kc_nms_params *p, int64_t *y, void *ws,
                   size_t wsz, int64_t *count, cudaStream_t stream);

/* Hardmax over n of [outer, n, inner]: 1 at the first maximum (the first
 * element when it is NaN; later NaNs never win), 0 elsewhere. */
cudaError_t kc_hardmax(const void *x, void *y, kiln_dtype dt, int64_t outer, int64_t n,
                       int64_t inner, cudaStream_t stream);

/* MaxUnpool: y zeroed, then y[pos(idx[i])] = x[i] for the n inputs, where an
 * index addresses the unpadded pre-pool plane (orig dims) of its (N, C)
 * plane; indices outside the output are skipped. */
typedef struct kc_unpool {
    int nsp;
    int64_t orig[KC_MAX_DIMS], out_sp[KC_MAX_DIMS];
    int64_t n, total, orig_plane, out_plane;
} kc_unpool;
cudaError_t kc_max_unpool(const void *x, const void *idx, kiln_dtype idt, void *y, size_t es,
                          const kc_unpool *p, cudaStream_t stream);

/* Whether an element is zero: every bit but the sign for real types (so -0
 * is zero and NaN is not), every bit for the others. */
typedef struct kc_zero_test {
    size_t es;
    int real;
} kc_zero_test;
/* NonZero: y [max(rank, 1), n] int64 (its true width nnz, row d at d * nnz)
 * of x with `rank` dims; *count (host memory, page-locked) gets nnz once
 * the stream reaches it. */
cudaError_t kc_nonzero_workspace(int64_t n, size_t *bytes);
cudaError_t kc_nonzero(const void *x, kc_zero_test zt, int rank, const int64_t *dims, int64_t *y,
                       void *ws, size_t wsz, int64_t *count, cudaStream_t stream);
/* Compress: y [outer, sel, inner] of x [outer, dim, inner] keeping the j <
 * lim whose cond[j] is nonzero; *count gets sel (as above). */
cudaError_t kc_compress_workspace(int64_t lim, size_t *bytes);
cudaError_t kc_compress(const void *x, void *y, size_t es, const void *cond, kc_zero_test zt,
                        int64_t lim, int64_t outer, int64_t dim, int64_t inner, void *ws,
                        size_t wsz, int64_t *count, cudaStream_t stream);

/* Unique of n elements taken as a flat list (no axis): values compared as
 * the CPU compares them (reals as doubles, -0 equal to 0; integers as
 * int64, uint64 unsigned), NaNs all equal to one another (the CPU's order
 * for NaN is that of its sort). Groups in ascending order (sorted) or by
 * first occurrence; y, first (int64), inverse (int64, n) and counts
 * (int64) may each be NULL. *count (page-locked host memory) gets the
 * number of groups once the stream reaches it. */
cudaError_t kc_unique_workspace(int64_t n, size_t *bytes);
cudaError_t kc_unique(const void *x, kiln_dtype dt, int64_t n, int sorted, void *y,
                      int64_t *first, int64_t *inverse, int64_t *counts, void *ws, size_t wsz,
                      int64_t *count, cudaStream_t stream);
/* Unique along an axis: items are the slices [outer, ., inner] of x
 * [outer, n, inner], compared element by element in order as above; y is
 * [outer, groups, inner]; first, inverse (n) and counts index items. */
cudaError_t kc_unique_axis_workspace(int64_t n, size_t *bytes);
cudaError_t kc_unique_axis(const void *x, kiln_dtype dt, int64_t outer, int64_t n, int64_t inner,
                           int sorted, void *y, int64_t *first, int64_t *inverse, int64_t *counts,
                           void *ws, size_t wsz, int64_t *count, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
