/* ops_tfidf.c - the op schema of TfIdfVectorizer (opset 9): attribute
 * checks, shape inference and the tables its kernels share
 * (graph/tfidf.h). Semantics are those of ONNX Runtime and ONNX's
 * reference implementation; string n-grams are not supported. */
#include <stdint.h>
#include <string.h>

#include "tfidf.h"

/* An int attribute the op requires. */
static kiln_status tf_int(const kn_node *node, const char *name, int64_t *out) {
    const kn_attr *a = kn_attr_find(node, name);
    if (!a || a->type != KN_ATTR_INT)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT, "attribute %s (an int) is required", name);
    *out = a->i;
    return KILN_OK;
}

static kiln_status tf_mode(const kn_node *node, int *mode) {
    const kn_attr *a = kn_attr_find(node, "mode");
    if (!a || a->type != KN_ATTR_STRING || !a->s)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "attribute mode (TF, IDF or TFIDF) is required");
    if (strcmp(a->s, "TF") == 0)
        *mode = KN_TFIDF_TF;
    else if (strcmp(a->s, "IDF") == 0)
        *mode = KN_TFIDF_IDF;
    else if (strcmp(a->s, "TFIDF") == 0)
        *mode = KN_TFIDF_TFIDF;
    else
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT, "mode '%s' is not TF, IDF or TFIDF",
                             a->s);
    return KILN_OK;
}

/* Where the grams of size k + 1 end in the pool. */
static int64_t tf_size_end(const int64_t *counts, int64_t n_sizes, int64_t pool_len, int64_t k) {
    return k + 1 < n_sizes ? counts[k + 1] : pool_len;
}

/* ngram_counts: non-decreasing offsets into the pool, each size's items a
 * whole number of grams; counts the grams of every size into g->n_grams. */
static kiln_status tf_counts(const kn_node *node, const int64_t *counts, kn_tfidf *g) {
    for (int64_t k = 0; k < g->n_sizes; k++) {
        if (counts[k] < 0 || counts[k] > g->pool_len)
            return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                                 "ngram_counts[%lld] = %lld is outside pool_int64s (%lld items)",
                                 (long long)k, (long long)counts[k], (long long)g->pool_len);
        if (k > 0 && counts[k] < counts[k - 1])
            return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                                 "ngram_counts must not decrease: [%lld] = %lld after [%lld] = %lld",
                                 (long long)k, (long long)counts[k], (long long)(k - 1),
                                 (long long)counts[k - 1]);
    }
    g->n_grams = 0;
    for (int64_t k = 0; k < g->n_sizes; k++) {
        int64_t first = counts[k], end = tf_size_end(counts, g->n_sizes, g->pool_len, k);
        if ((end - first) % (k + 1) != 0)
            return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                                 "the %lld items of %lld-grams (pool_int64s[%lld:%lld]) are not "
                                 "whole %lld-grams",
                                 (long long)(end - first), (long long)(k + 1), (long long)first,
                                 (long long)end, (long long)(k + 1));
        g->n_grams += (end - first) / (k + 1);
    }
    return KILN_OK;
}

/* ngram_indexes (one column a gram) and weights (one a gram); sets
 * out_size and has_weights. */
static kiln_status tf_columns(const kn_node *node, kn_tfidf *g) {
    size_t n_idx, n_w;
    const int64_t *idx = kn_attr_ints(node, "ngram_indexes", &n_idx);
    if (!idx || n_idx == 0)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "attribute ngram_indexes (ints, one a pool n-gram) is required");
    if ((int64_t)n_idx != g->n_grams)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "ngram_indexes has %zu entries but the pool holds %lld n-grams (one "
                             "output column a gram)",
                             n_idx, (long long)g->n_grams);
    int64_t most = -1;
    for (size_t i = 0; i < n_idx; i++) {
        if (idx[i] < 0 || idx[i] >= INT32_MAX)
            return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                                 "ngram_indexes[%zu] = %lld is not an output column in [0, 2^31 - 1)",
                                 i, (long long)idx[i]);
        most = idx[i] > most ? idx[i] : most;
    }
    g->out_size = most + 1;
    const float *w = kn_attr_floats(node, "weights", &n_w);
    g->has_weights = w && n_w > 0;
    if (!g->has_weights)
        return KILN_OK;
    if (n_w != n_idx)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "weights has %zu entries, ngram_indexes %zu: there must be one a gram",
                             n_w, n_idx);
    return KILN_OK;
}

kiln_status kn_tfidf_attrs(const kn_node *node, kn_tfidf *g) {
    memset(g, 0, sizeof *g);
    const kn_attr *ps = kn_attr_find(node, "pool_strings");
    if (ps && ps->n > 0)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "pool_strings (string n-grams) is not supported; kiln takes "
                             "pool_int64s with an int32 or int64 input");
    KN_TRY(tf_mode(node, &g->mode));
    KN_TRY(tf_int(node, "min_gram_length", &g->min_n));
    KN_TRY(tf_int(node, "max_gram_length", &g->max_n));
    KN_TRY(tf_int(node, "max_skip_count", &g->max_skip));
    if (g->min_n < 1 || g->max_n < g->min_n)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "gram lengths must satisfy 1 <= min_gram_length <= max_gram_length "
                             "(got %lld and %lld)",
                             (long long)g->min_n, (long long)g->max_n);
    if (g->max_skip < 0)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT, "max_skip_count must be >= 0, got %lld",
                             (long long)g->max_skip);
    size_t n_pool, n_counts;
    const int64_t *pool = kn_attr_ints(node, "pool_int64s", &n_pool);
    const int64_t *counts = kn_attr_ints(node, "ngram_counts", &n_counts);
    if (!pool || n_pool == 0)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "attribute pool_int64s (the n-grams, non-empty) is required");
    if (!counts || n_counts == 0)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "attribute ngram_counts (where each gram size starts in the pool) is "
                             "required");
    g->pool_len = (int64_t)n_pool;
    g->n_sizes = (int64_t)n_counts;
    if (g->max_n > g->n_sizes)
        return kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                             "max_gram_length %lld is longer than the %lld gram sizes ngram_counts "
                             "describes",
                             (long long)g->max_n, (long long)g->n_sizes);
    KN_TRY(tf_counts(node, counts, g));
    return tf_columns(node, g);
}

kiln_status kn_tfidf_setup(const kn_node *node, const kn_tinfo *x, kn_tfidf *g) {
    KN_TRY(kn_tfidf_attrs(node, g));
    return kn_tfidf_bind(node, x->dtype, x->rank, x->dims, g);
}

kiln_status kn_tfidf_bind(const kn_node *node, kiln_dtype dtype, int rank, const int64_t *dims,
                          kn_tfidf *g) {
    if (dtype == KILN_DTYPE_UNDEFINED)
        return kn_node_error(node, KILN_ERR_SHAPE, "input 0 is required");
    if (dtype == KILN_DTYPE_STRING)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "string input is not supported (int32 or int64 items only)");
    if (dtype != KILN_DTYPE_INT32 && dtype != KILN_DTYPE_INT64)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "the input must be int32 or int64, not %s",
                             kiln_dtype_name(dtype));
    if (rank != 1 && rank != 2)
        return kn_node_error(node, KILN_ERR_SHAPE, "the input must be [C] or [N, C], got rank %d",
                             rank);
    g->x64 = dtype == KILN_DTYPE_INT64;
    g->rows = rank == 2 ? dims[0] : 1;
    g->len = dims[rank - 1];
    /* the kernels count in uint32: a column takes at most one count per
     * start, skip distance and gram size of its row */
    double dists = g->max_skip < g->len ? (double)g->max_skip + 1.0 : (double)g->len;
    if ((double)g->len * dists * (double)(g->max_n - g->min_n + 1) > 4294967295.0)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED,
                             "rows of %lld items with max_skip_count %lld and %lld gram sizes could "
                             "count one column more than 2^32 - 1 times",
                             (long long)g->len, (long long)g->max_skip,
                             (long long)(g->max_n - g->min_n + 1));
    return KILN_OK;
}

/* Gram a against gram b, n items each from grams. */
static int tf_gram_cmp(const int64_t *grams, int64_t n, int64_t a, int64_t b) {
    const int64_t *p = grams + a * n, *q = grams + b * n;
    for (int64_t k = 0; k < n; k++)
        if (p[k] != q[k])
            return p[k] < q[k] ? -1 : 1;
    return 0;
}

/* Sort idx[0, cnt) by their grams of n items, stably: a bottom-up merge
 * sort through tmp. */
static void tf_sort(const int64_t *grams, int64_t n, int64_t *idx, int64_t *tmp, int64_t cnt) {
    for (int64_t w = 1; w < cnt; w *= 2) {
        for (int64_t lo = 0; lo < cnt; lo += 2 * w) {
            int64_t mid = lo + w < cnt ? lo + w : cnt, hi = lo + 2 * w < cnt ? lo + 2 * w : cnt;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = tf_gram_cmp(grams, n, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
            while (i < mid)
                tmp[k++] = idx[i++];
            while (j < hi)
                tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)cnt * sizeof *idx);
    }
}

/* Each looked-for size's grams sorted into order (size says where), a
 * repeated gram refused. */
static kiln_status tf_orders(const kn_node *node, const kn_tfidf *g, const int64_t *pool,
                             const int64_t *counts, int64_t *size, int64_t *order) {
    int64_t most = 1, id = 0;
    for (int64_t k = 0; k < g->max_n; k++) {
        int64_t grams = (tf_size_end(counts, g->n_sizes, g->pool_len, k) - counts[k]) / (k + 1);
        most = grams > most ? grams : most;
    }
    int64_t *tmp = kn_malloc((size_t)most * sizeof *tmp);
    if (!tmp)
        return KILN_ERR_OUT_OF_MEMORY;
    memset(order, 0, (size_t)g->n_grams * sizeof *order); /* sizes never looked for */
    kiln_status st = KILN_OK;
    for (int64_t k = 0; k < g->max_n && st == KILN_OK; k++) {
        const int64_t n = k + 1, first = counts[k];
        const int64_t grams = (tf_size_end(counts, g->n_sizes, g->pool_len, k) - first) / n;
        const int64_t looked = n >= g->min_n ? grams : 0;
        size[3 * k] = first;
        size[3 * k + 1] = looked;
        size[3 * k + 2] = id;
        int64_t *o = order + id;
        for (int64_t j = 0; j < looked; j++)
            o[j] = j;
        tf_sort(pool + first, n, o, tmp, looked);
        for (int64_t j = 1; j < looked && st == KILN_OK; j++)
            if (tf_gram_cmp(pool + first, n, o[j - 1], o[j]) == 0)
                st = kn_node_error(node, KILN_ERR_INVALID_ARGUMENT,
                                   "%lld-grams %lld and %lld of the pool are the same (n-grams "
                                   "%lld and %lld); each must be there once",
                                   (long long)n, (long long)o[j - 1], (long long)o[j],
                                   (long long)(id + o[j - 1]), (long long)(id + o[j]));
        id += grams;
    }
    kn_free(tmp);
    return st;
}

/* Each column's weight into wcol: that of the looked-for grams counted
 * into it (0 where there are none). Grams sharing a column with different
 * weights are refused where the weights matter (IDF, TFIDF): ONNX Runtime
 * adds each gram's own weight (TFIDF) or keeps the last one it meets
 * (IDF), which kiln's one weight a column cannot repeat. */
static kiln_status tf_weights(const kn_node *node, const kn_tfidf *g, const int64_t *size,
                              const int64_t *col, const float *w, float *wcol) {
    uint8_t *seen = kn_calloc((size_t)g->out_size, 1);
    int64_t *owner = kn_malloc((size_t)g->out_size * sizeof *owner);
    kiln_status st = seen && owner ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (st == KILN_OK)
        memset(wcol, 0, (size_t)g->out_size * sizeof *wcol);
    for (int64_t k = g->min_n - 1; k < g->max_n && st == KILN_OK; k++) {
        for (int64_t id = size[3 * k + 2]; id < size[3 * k + 2] + size[3 * k + 1]; id++) {
            const int64_t c = col[id];
            if (!seen[c]) {
                seen[c] = 1;
                owner[c] = id;
                wcol[c] = w[id];
            } else if (g->mode != KN_TFIDF_TF && memcmp(&wcol[c], &w[id], sizeof *w) != 0) {
                st = kn_node_error(node, KILN_ERR_UNSUPPORTED,
                                   "n-grams %lld and %lld share output column %lld with different "
                                   "weights (%g and %g); kiln weights a column once, so its "
                                   "n-grams must have one weight",
                                   (long long)owner[c], (long long)id, (long long)c,
                                   (double)wcol[c], (double)w[id]);
                break;
            }
        }
    }
    kn_free(seen);
    kn_free(owner);
    return st;
}

kiln_status kn_tfidf_tables(const kn_node *node, const kn_tfidf *g, void *block) {
    size_t n_pool, n_counts, n_idx, n_w;
    const int64_t *pool = kn_attr_ints(node, "pool_int64s", &n_pool);
    const int64_t *counts = kn_attr_ints(node, "ngram_counts", &n_counts);
    const int64_t *idx = kn_attr_ints(node, "ngram_indexes", &n_idx);
    const float *w = kn_attr_floats(node, "weights", &n_w);
    if ((int64_t)n_pool != g->pool_len || (int64_t)n_counts != g->n_sizes ||
        (int64_t)n_idx != g->n_grams || (g->has_weights && (int64_t)n_w != g->n_grams))
        return kn_node_error(node, KILN_ERR_INTERNAL, "the tables do not match the attributes");
    int64_t *size = block;
    int64_t *pl = size + 3 * g->max_n, *order = pl + g->pool_len, *col = order + g->n_grams;
    memcpy(pl, pool, n_pool * sizeof *pl);
    memcpy(col, idx, n_idx * sizeof *col);
    KN_TRY(tf_orders(node, g, pool, counts, size, order));
    if (g->has_weights)
        KN_TRY(tf_weights(node, g, size, col, w, (float *)(void *)(col + g->n_grams)));
    return KILN_OK;
}

/* X [C] -> Y [max(ngram_indexes) + 1], X [N, C] -> Y [N, that], float. */
static kiln_status infer_tfidf(kn_infer *c) {
    kn_tfidf g;
    if (c->n_in != 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "takes one input, got %d", c->n_in);
    KN_TRY(kn_tfidf_setup(c->node, &c->in[0], &g));
    /* duplicate grams, and columns with two weights, show in the tables */
    void *block = kn_malloc(kn_tfidf_bytes(&g));
    if (!block)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kn_tfidf_tables(c->node, &g, block);
    kn_free(block);
    KN_TRY(st);
    c->out[0].dtype = KILN_DTYPE_FLOAT;
    c->out[0].rank = c->in[0].rank;
    c->out[0].dims[0] = g.rows;
    c->out[0].dims[c->out[0].rank - 1] = g.out_size;
    return KILN_OK;
}

const kn_op_schema kn_ops_tfidf[] = {
    {"TfIdfVectorizer", "", infer_tfidf, 0},
};
const size_t kn_ops_tfidf_count = KN_ARRAY_LEN(kn_ops_tfidf);
