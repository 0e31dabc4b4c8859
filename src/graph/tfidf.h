/* tfidf.h - TfIdfVectorizer: the n-gram matching, counting and weighting
 * shared by shape inference, the CPU reference and the CUDA kernel. The
 * functions up to the host-only section are plain C for the host and the
 * device, so both backends count the same n-grams into the same columns. */
#ifndef KILN_TFIDF_H
#define KILN_TFIDF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KN_TF_FN static __host__ __device__ __forceinline__
#else
#define KN_TF_FN static inline
#endif

/* The weighting (attribute mode). */
enum { KN_TFIDF_TF = 1, KN_TFIDF_IDF = 2, KN_TFIDF_TFIDF = 3 };

/* A TfIdfVectorizer node, and its input's geometry once known. The pool
 * holds the n-grams of size 1, 2, ..., n_sizes back to back (those of size
 * k + 1 from item ngram_counts[k]), numbered 0, 1, ... in pool order; n-gram
 * i counts into column ngram_indexes[i] of its row, out_size columns a row.
 * Only sizes in [min_n, max_n] are looked for. The input is rows x len
 * items (a 1-D input is one row) of int32 or int64. */
typedef struct kn_tfidf {
    int64_t rows, len;   /* 0 until the input is known */
    int64_t out_size;    /* max(ngram_indexes) + 1 */
    int64_t min_n, max_n, max_skip;
    int64_t n_sizes;     /* ngram_counts' length */
    int64_t pool_len;    /* pool_int64s' length */
    int64_t n_grams;     /* n-grams in the pool = ngram_indexes' length */
    int mode;            /* KN_TFIDF_* */
    int has_weights;
    int x64;             /* the input is int64 (else int32) */
} kn_tfidf;

/* The node's tables, all in one block (kn_tfidf_tables writes it on the
 * host; the CUDA backend copies the block to the device as it is):
 *   size  [3 * max_n] int64: for gram size n at 3 (n - 1): its first pool
 *         item, how many of its grams are looked for (0 below min_n), the
 *         number of its first gram
 *   pool  [pool_len]  int64: pool_int64s
 *   order [n_grams]   int64: the grams of each size sorted (as tuples of
 *         int64, first item first): order[first number + k] is the index,
 *         within its size, of the k-th smallest
 *   col   [n_grams]   int64: ngram_indexes
 *   w     [out_size]  float, when there are weights: each column's weight,
 *         that of the n-grams counted into it (0 where none are)
 * The weights belong to the n-grams (weights[i] to n-gram i, as the spec
 * and ONNX Runtime have it; ONNX's Python reference reads weights[column]
 * instead, which differs unless ngram_indexes is the identity), and a
 * column's n-grams must share one weight, so a column is weighted once. */
typedef struct kn_tfidf_tab {
    const int64_t *size, *pool, *order, *col;
    const float *w; /* NULL without weights */
} kn_tfidf_tab;

KN_TF_FN size_t kn_tfidf_bytes(const kn_tfidf *g) {
    size_t words = (size_t)(3 * g->max_n + g->pool_len + 2 * g->n_grams);
    return words * sizeof(int64_t) + (g->has_weights ? (size_t)g->out_size * sizeof(float) : 0);
}

/* The tables in a block of kn_tfidf_bytes(g) bytes, 8-byte aligned. */
KN_TF_FN kn_tfidf_tab kn_tfidf_tab_at(const kn_tfidf *g, const void *block) {
    kn_tfidf_tab t;
    const int64_t *p = (const int64_t *)block;
    t.size = p;
    t.pool = t.size + 3 * g->max_n;
    t.order = t.pool + g->pool_len;
    t.col = t.order + g->n_grams;
    t.w = g->has_weights ? (const float *)(const void *)(t.col + g->n_grams) : NULL;
    return t;
}

KN_TF_FN int64_t kn_tfidf_item(const void *x, int x64, int64_t i) {
    return x64 ? ((const int64_t *)x)[i] : (int64_t)((const int32_t *)x)[i];
}

/* A gram of n items against the input's items at, at + step, ...: < 0, 0
 * or > 0 as the gram sorts before, equal to or after them. */
KN_TF_FN int kn_tfidf_cmp(const int64_t *gram, int64_t n, const void *x, int x64, int64_t at,
                          int64_t step) {
    for (int64_t k = 0; k < n; k++) {
        int64_t a = gram[k], b = kn_tfidf_item(x, x64, at + k * step);
        if (a != b)
            return a < b ? -1 : 1;
    }
    return 0;
}

/* The number of the pool's gram of size n equal to the input's n items
 * from `at`, `step` apart, or -1: a binary search over the size's order
 * (the pool holds no gram twice, so there is at most one). */
KN_TF_FN int64_t kn_tfidf_find(const kn_tfidf_tab *t, int64_t n, const void *x, int x64, int64_t at,
                               int64_t step) {
    const int64_t *s = t->size + 3 * (n - 1);
    int64_t lo = 0, hi = s[1];
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2, j = t->order[s[2] + mid];
        int c = kn_tfidf_cmp(t->pool + s[0] + j * n, n, x, x64, at, step);
        if (c == 0)
            return s[2] + j;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* One more count (atomic on the device, where threads share a row). */
KN_TF_FN void kn_tfidf_add(uint32_t *c) {
#ifdef __CUDA_ARCH__
    atomicAdd((unsigned int *)c, 1u);
#else
    (*c)++;
#endif
}

/* Count the n-grams that start at item `start` of row `row` into
 * counts[row * out_size + column]: for each skip distance d = 1 ..
 * max_skip + 1, the items start, start + d, start + 2d, ... taken n at a
 * time for every size n in [min_n, max_n] that fits in the row. A unigram
 * is the same at every distance, so it counts at d = 1 only (as ONNX
 * Runtime and ONNX's reference count it); distances that leave the row
 * after one item gather nothing more. */
KN_TF_FN void kn_tfidf_count_at(const kn_tfidf *g, const kn_tfidf_tab *t, const void *x, int64_t row,
                                int64_t start, uint32_t *counts) {
    const int64_t at = row * g->len + start, room = g->len - start;
    const int64_t lo_skip = g->min_n > 2 ? g->min_n : 2;
    uint32_t *c = counts + row * g->out_size;
    for (int64_t d = 1; d - 1 <= g->max_skip && (d == 1 || (d < room && lo_skip <= g->max_n)); d++)
        for (int64_t n = d == 1 ? g->min_n : lo_skip; n <= g->max_n && (n - 1) * d < room; n++) {
            int64_t id = kn_tfidf_find(t, n, x, g->x64, at, d);
            if (id >= 0)
                kn_tfidf_add(&c[t->col[id]]);
        }
}

/* What column col shows for a count: TF the count; IDF the column's weight
 * (1 without weights) when the count is not 0, else 0; TFIDF the count
 * times the column's weight (the count without weights). One rounding,
 * float(count) * w, so both backends agree to the bit (ONNX Runtime adds
 * w once a count, which may differ from it in the last bit). */
KN_TF_FN float kn_tfidf_value(const kn_tfidf *g, const kn_tfidf_tab *t, int64_t col, uint32_t count) {
    const float c = (float)count;
    switch (g->mode) {
    case KN_TFIDF_IDF:
        return count ? (t->w ? t->w[col] : 1.0f) : 0.0f;
    case KN_TFIDF_TFIDF:
        return t->w ? c * t->w[col] : c;
    default:
        return c;
    }
}

/* Element i of the output, which holds its count as uint32 until now,
 * becomes its float value in place. */
KN_TF_FN void kn_tfidf_finish(const kn_tfidf *g, const kn_tfidf_tab *t, uint32_t *y, int64_t i) {
    float v = kn_tfidf_value(g, t, i % g->out_size, y[i]);
#ifdef __CUDA_ARCH__
    y[i] = __float_as_uint(v);
#else
    memcpy(&y[i], &v, sizeof v);
#endif
}

/* ---------------- host only: the node's attributes and tables ---------------- */

#ifndef __CUDACC__
#include "graph.h"

/* The node's attributes into g (rows, len and x64 left 0), every rule
 * checked with a message naming the node: mode TF, IDF or TFIDF; 1 <=
 * min_gram_length <= max_gram_length <= the sizes ngram_counts describes;
 * max_skip_count >= 0; ngram_counts non-decreasing within pool_int64s,
 * each size's items whole grams; one ngram_indexes entry (>= 0) a gram;
 * weights, when given, one a gram. pool_strings is refused (string
 * n-grams are not supported). Duplicate grams, and grams of one column
 * with different weights, are found by kn_tfidf_tables. */
KN_HIDDEN kiln_status kn_tfidf_attrs(const kn_node *node, kn_tfidf *g);
/* kn_tfidf_attrs, then the input x: int32 or int64, [C] or [N, C] (a
 * string input is refused as unsupported). */
KN_HIDDEN kiln_status kn_tfidf_setup(const kn_node *node, const kn_tinfo *x, kn_tfidf *g);
/* The input part of kn_tfidf_setup on g's attributes: checks the input's
 * type and rank and sets rows, len and x64 (the kernels' run calls it on
 * a copy of their state's g). */
KN_HIDDEN kiln_status kn_tfidf_bind(const kn_node *node, kiln_dtype dtype, int rank,
                                    const int64_t *dims, kn_tfidf *g);
/* Write the tables of g (from kn_tfidf_attrs) into block, kn_tfidf_bytes(g)
 * bytes, 8-byte aligned; fails naming the node and the grams when a size's
 * grams repeat one, or (modes IDF and TFIDF) when grams counted into one
 * column have different weights. */
KN_HIDDEN kiln_status kn_tfidf_tables(const kn_node *node, const kn_tfidf *g, void *block);
#endif

#endif
