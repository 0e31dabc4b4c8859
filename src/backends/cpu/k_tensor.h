/* k_tensor.h - helpers shared by the tensor family's CPU kernels
 * (k_tensor*.c): element loads and stores by data type, strided copies and a
 * stable sort. The kernels themselves are registered in k_tensor.c. */
#ifndef KILN_K_TENSOR_H
#define KILN_K_TENSOR_H

#include "backends/backend.h"
#include "graph/ops_tensor.h"

/* Whether the type is a floating type kbt_load / kbt_store handle as reals. */
KN_HIDDEN bool kbt_is_float(kiln_dtype t);
/* Whether arithmetic (reductions, interpolation) is defined for the type. */
KN_HIDDEN bool kbt_is_numeric(kiln_dtype t);
/* Element i of p as a double / as an int64 (floats truncate). */
KN_HIDDEN double kbt_load(kiln_dtype t, const void *p, int64_t i);
KN_HIDDEN int64_t kbt_load_i64(kiln_dtype t, const void *p, int64_t i);
/* Store v into element i of p: integers round to nearest and saturate. */
KN_HIDDEN void kbt_store(kiln_dtype t, void *p, int64_t i, double v);
KN_HIDDEN void kbt_store_i64(kiln_dtype t, void *p, int64_t i, int64_t v);
/* Whether element i is zero (false for -0.0 being nonzero: -0.0 is zero). */
KN_HIDDEN bool kbt_is_zero(kiln_dtype t, const void *p, int64_t i);

/* Copy one element of es bytes. */
static inline void kbt_copy1(void *dst, const void *src, size_t es) {
    switch (es) {
    case 1: *(uint8_t *)dst = *(const uint8_t *)src; break;
    case 2: *(uint16_t *)dst = *(const uint16_t *)src; break;
    case 4: *(uint32_t *)dst = *(const uint32_t *)src; break;
    case 8: *(uint64_t *)dst = *(const uint64_t *)src; break;
    default: memcpy(dst, src, es); break;
    }
}

/* dst (contiguous, dims[0..rank)) gets src[off + sum(i_d * strides[d])],
 * strides in elements (may be 0 or negative). rank may be up to 16. */
KN_HIDDEN void kbt_strided_copy(void *dst, const void *src, size_t es, int rank,
                                const int64_t *dims, const int64_t *strides, int64_t off,
                                int threads);
/* Row-major element strides of a shape. */
KN_HIDDEN void kbt_strides(int rank, const int64_t *dims, int64_t *strides);
/* A kn_tinfo view of a kernel tensor (value = its data). */
KN_HIDDEN kn_tinfo kbt_info(const kb_tensor *t);
/* Elements of a kernel tensor. */
static inline int64_t kbt_numel(const kb_tensor *t) { return kn_numel(t->rank, t->dims); }

/* Stable merge sort of a[0..n) with tmp[0..n) scratch; cmp < 0 orders x first. */
typedef int (*kbt_cmp)(const void *ctx, int64_t x, int64_t y);
KN_HIDDEN void kbt_sort(int64_t *a, int64_t *tmp, int64_t n, kbt_cmp cmp, const void *ctx);

/* Kernels defined in the helper files. */
KN_HIDDEN kiln_status kbt_gather(const kb_run *r);
KN_HIDDEN kiln_status kbt_gather_elements(const kb_run *r);
KN_HIDDEN kiln_status kbt_gather_nd(const kb_run *r);
KN_HIDDEN kiln_status kbt_nd_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                     int n_in, const kb_tensor *out, int n_out, void **inst,
                                     size_t *workspace);
KN_HIDDEN kiln_status kbt_scatter_nd(const kb_run *r);
KN_HIDDEN kiln_status kbt_scatter_elements(const kb_run *r);
KN_HIDDEN kiln_status kbt_nonzero(const kb_run *r);
KN_HIDDEN kiln_status kbt_topk(const kb_run *r);
KN_HIDDEN kiln_status kbt_topk_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                       int n_in, const kb_tensor *out, int n_out, void **inst,
                                       size_t *workspace);
KN_HIDDEN kiln_status kbt_onehot(const kb_run *r);
KN_HIDDEN kiln_status kbt_compress(const kb_run *r);
KN_HIDDEN kiln_status kbt_reverse_sequence(const kb_run *r);
KN_HIDDEN kiln_status kbt_unique(const kb_run *r);
KN_HIDDEN kiln_status kbt_unique_prepare(const void *state, const kn_node *node,
                                         const kb_tensor *in, int n_in, const kb_tensor *out,
                                         int n_out, void **inst, size_t *workspace);
KN_HIDDEN kiln_status kbt_resize(const kb_run *r);
/* Resize's taps, shared with the CUDA backend (which uploads them): the most
 * taps an axis can need, and axis d's table (cnt[o]: taps used, -1 outside
 * (extrapolate); idx / wt [o * cap + j]); fails when cap is too small. */
KN_HIDDEN int64_t kbt_resize_max_taps(const kn_node *n, int64_t in, int64_t out);
KN_HIDDEN kiln_status kbt_resize_taps(const kn_node *n, const kn_resize_plan *p, int d, int64_t in,
                                      int64_t out, int64_t cap, int64_t *cnt, int64_t *idx,
                                      double *wt);
KN_HIDDEN kiln_status kbt_resize_prepare(const void *state, const kn_node *node,
                                         const kb_tensor *in, int n_in, const kb_tensor *out,
                                         int n_out, void **inst, size_t *workspace);

#endif
