/* test_ops_tfidf.c - TfIdfVectorizer's reference kernel run through the
 * executor against ONNX Runtime 1.32's outputs (the values below), and the
 * errors its shape inference gives for malformed nodes, each naming the
 * node and the problem. */
#include "test.h" /* first: kt_exec.h relies on its <string.h> */
#include "kt_exec.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define NDIMS(...) (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

/* A node's attributes; NULL lists and empty strings are left out. */
typedef struct tf_attrs {
    const char *mode;
    int64_t min_n, max_n, skip;
    const int64_t *counts, *pool, *idx;
    const float *w;
    size_t n_counts, n_pool, n_idx, n_w;
} tf_attrs;

/* One TfIdfVectorizer in a network of its own, input X. */
typedef struct tf_net {
    kiln_network *net;
    int node;
    const void *data;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    kiln_dtype dt;
    kt_exec e;
} tf_net;

static void tf_new(tf_net *k, kiln_dtype dt, int rank, const int64_t *dims, const void *data,
                   const tf_attrs *a) {
    memset(k, 0, sizeof *k);
    k->data = data;
    k->rank = rank;
    k->dt = dt;
    memcpy(k->dims, dims, sizeof(int64_t) * (size_t)rank);
    KT_OK(kiln_network_create(&k->net));
    KT_OK(kiln_network_add_input(k->net, "X", dt, rank, dims, NULL));
    static const char *const in[] = {"X"}, *const out[] = {"Y"};
    KT_OK(kiln_network_add_node(k->net, "n0", "TfIdfVectorizer", "", 9, 1, in, 1, out, &k->node));
    KT_OK(kiln_network_mark_output(k->net, "Y"));
    if (a->mode[0])
        KT_OK(kiln_network_set_attr_string(k->net, k->node, "mode", a->mode));
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "min_gram_length", a->min_n));
    KT_OK(kiln_network_set_attr_int(k->net, k->node, "max_gram_length", a->max_n));
    if (a->skip >= -1) /* -2: left out */
        KT_OK(kiln_network_set_attr_int(k->net, k->node, "max_skip_count", a->skip));
    if (a->counts)
        KT_OK(kiln_network_set_attr_ints(k->net, k->node, "ngram_counts", a->counts, a->n_counts));
    if (a->pool)
        KT_OK(kiln_network_set_attr_ints(k->net, k->node, "pool_int64s", a->pool, a->n_pool));
    if (a->idx)
        KT_OK(kiln_network_set_attr_ints(k->net, k->node, "ngram_indexes", a->idx, a->n_idx));
    if (a->w)
        KT_OK(kiln_network_set_attr_floats(k->net, k->node, "weights", a->w, a->n_w));
}

static kiln_status tf_run(tf_net *k) {
    const void *data[1] = {k->data};
    return kt_exec_run(&k->e, k->net, data, &k->rank, (const int64_t(*)[KILN_MAX_DIMS])k->dims);
}

static void tf_free(tf_net *k) {
    kt_exec_free(&k->e);
    kiln_network_destroy(k->net);
    memset(k, 0, sizeof *k);
}

/* Run and compare Y with want (exactly: counts and one rounding of them). */
static void tf_expect(tf_net *k, const char *what, int rank, const int64_t *dims, const float *want) {
    kiln_status st = tf_run(k);
    KT_OK(st);
    if (st != KILN_OK)
        return;
    kn_tinfo ti;
    const float *y = kt_exec_output(&k->e, 0, &ti);
    bool shape_ok = ti.dtype == KILN_DTYPE_FLOAT && ti.rank == rank &&
                    memcmp(ti.dims, dims, sizeof(int64_t) * (size_t)rank) == 0;
    if (!shape_ok) {
        kt_fail++;
        fprintf(stderr, "%s: wrong output type or shape\n", what);
        return;
    }
    int64_t n = kn_numel(rank, dims);
    for (int64_t i = 0; i < n; i++)
        if (y[i] != want[i]) {
            kt_fail++;
            fprintf(stderr, "%s: element %lld is %.9g, expected %.9g\n", what, (long long)i, y[i],
                    want[i]);
            return;
        }
    kt_pass++;
}

/* Shape inference of the net's node, called directly, must fail with
 * `status` and a message containing `text`; so must a run. */
static void tf_fails(tf_net *k, kiln_status status, const char *text) {
    const kn_node *node = &k->net->nodes[k->node];
    const kn_op_schema *s = kn_op_find("", "TfIdfVectorizer");
    KT_CHECK(s != NULL);
    if (s) {
        kn_tinfo in, out;
        memset(&in, 0, sizeof in);
        memset(&out, 0, sizeof out);
        in.dtype = k->dt;
        in.rank = k->rank;
        memcpy(in.dims, k->dims, sizeof in.dims);
        kn_infer ic = {node, 1, &in, 1, &out};
        KT_FAILS(s->infer(&ic), status, text);
    }
    KT_FAILS(tf_run(k), status, text);
}

/* ---------------- values ---------------- */

/* The pool of ONNX's node tests: unigrams 2 3 5 4, bigrams (5 6) (7 8) (6 7). */
static const int64_t onnx_counts[] = {0, 4};
static const int64_t onnx_pool[] = {2, 3, 5, 4, 5, 6, 7, 8, 6, 7};
static const int64_t onnx_idx[] = {0, 1, 2, 3, 4, 5, 6};
static const int64_t onnx_x[12] = {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8};

/* Three sizes: unigrams 1 4 9, bigrams (1 4) (4 1) (9 9), trigram (1 4 1);
 * columns permuted, column 3 shared by (4 1) and (9 9), one weight each. */
static const int64_t mix_counts[] = {0, 3, 9};
static const int64_t mix_pool[] = {1, 4, 9, 1, 4, 4, 1, 9, 9, 1, 4, 1};
static const int64_t mix_idx[] = {2, 0, 5, 1, 3, 3, 4};
static const float mix_w[] = {0.5f, 1.25f, 2.0f, 0.75f, 1.5f, 1.5f, 0.1f};
static const int32_t mix_x[16] = {1, 4, 1, 4, 9, 9, 1, 4, 4, 1, 1, 9, 9, 9, 2, 1};

static tf_attrs onnx_attrs(const char *mode, int64_t min_n, int64_t skip) {
    tf_attrs a = {mode, min_n, 2, skip, onnx_counts, onnx_pool, onnx_idx, NULL, 2, 10, 7, 0};
    return a;
}

static tf_attrs mix_attrs(const char *mode, bool weights) {
    tf_attrs a = {mode, 1, 3, 1, mix_counts, mix_pool, mix_idx, weights ? mix_w : NULL, 3, 12, 7, 7};
    return a;
}

static void test_values(void) {
    tf_net k;
    tf_attrs a = onnx_attrs("TF", 1, 5);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(12), onnx_x, &a);
    tf_expect(&k, "ONNX uni- and bigrams, skip 5", 1, DIMS(7), (const float[]){0, 3, 1, 0, 1, 3, 1});
    tf_free(&k);
    a = onnx_attrs("TF", 2, 0);
    tf_new(&k, KILN_DTYPE_INT64, 2, DIMS(2, 6), onnx_x, &a);
    tf_expect(&k, "ONNX batch of bigrams, skip 0", 2, DIMS(2, 7),
              (const float[]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1});
    tf_free(&k);

    static const struct {
        const char *mode;
        bool w;
        float want[12];
    } mix[] = {
        {"TF", false, {3, 3, 3, 2, 1, 2, 1, 0, 3, 5, 0, 3}},
        {"IDF", false, {1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1}},
        {"TFIDF", false, {3, 3, 3, 2, 1, 2, 1, 0, 3, 5, 0, 3}},
        {"TF", true, {3, 3, 3, 2, 1, 2, 1, 0, 3, 5, 0, 3}},
        {"IDF", true, {1.25f, 0.75f, 0.5f, 1.5f, 0.1f, 2, 1.25f, 0, 0.5f, 1.5f, 0, 2}},
        {"TFIDF", true, {3.75f, 2.25f, 1.5f, 3, 0.1f, 4, 1.25f, 0, 1.5f, 7.5f, 0, 6}},
    };
    for (size_t i = 0; i < sizeof mix / sizeof mix[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "sizes 1-3, int32 [2, 8], %s%s", mix[i].mode,
                 mix[i].w ? " with weights" : "");
        a = mix_attrs(mix[i].mode, mix[i].w);
        tf_new(&k, KILN_DTYPE_INT32, 2, DIMS(2, 8), mix_x, &a);
        tf_expect(&k, what, 2, DIMS(2, 6), mix[i].want);
        tf_free(&k);
    }

    static const int64_t x1[12] = {1, 4, 1, 4, 9, 9, 1, 4, 1, 9, 4, 1};
    a = mix_attrs("TFIDF", true);
    a.min_n = 2;
    a.skip = 2;
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(12), x1, &a);
    tf_expect(&k, "sizes 2-3, skip 2, int64 [12]", 1, DIMS(6), (const float[]){0, 3.75f, 0, 7.5f, 0.3f, 0});
    tf_free(&k);

    static const int64_t none[1] = {0};
    a = mix_attrs("TF", false);
    tf_new(&k, KILN_DTYPE_INT64, 2, DIMS(2, 0), none, &a);
    tf_expect(&k, "rows of no items", 2, DIMS(2, 6), (const float[12]){0});
    tf_free(&k);
    tf_new(&k, KILN_DTYPE_INT64, 2, DIMS(0, 4), none, &a);
    tf_expect(&k, "no rows", 2, DIMS(0, 6), NULL);
    tf_free(&k);
}

/* ---------------- errors ---------------- */

static void test_errors(void) {
    static const int64_t x[6] = {0};
    tf_net k;
    tf_attrs a;

    a = onnx_attrs("BM25", 1, 0);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "node 'n0' (TfIdfVectorizer): mode 'BM25' is not TF, IDF or TFIDF");
    tf_free(&k);
    a = onnx_attrs("", 1, 0);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "attribute mode (TF, IDF or TFIDF) is required");
    tf_free(&k);
    a = onnx_attrs("TF", 1, -2);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "attribute max_skip_count (an int) is required");
    tf_free(&k);

    /* gram lengths and the skip */
    a = onnx_attrs("TF", 0, 0);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "1 <= min_gram_length <= max_gram_length (got 0 and 2)");
    tf_free(&k);
    a = onnx_attrs("TF", 2, 0);
    a.max_n = 1;
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "(got 2 and 1)");
    tf_free(&k);
    a = onnx_attrs("TF", 1, 0);
    a.max_n = 3;
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT,
             "max_gram_length 3 is longer than the 2 gram sizes ngram_counts describes");
    tf_free(&k);
    a = onnx_attrs("TF", 1, -1);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "max_skip_count must be >= 0, got -1");
    tf_free(&k);

    /* the pool and ngram_counts */
    a = onnx_attrs("TF", 1, 0);
    a.pool = NULL;
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "attribute pool_int64s (the n-grams, non-empty) is required");
    tf_free(&k);
    a = onnx_attrs("TF", 1, 0);
    a.counts = DIMS(0, 12);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "ngram_counts[1] = 12 is outside pool_int64s (10 items)");
    tf_free(&k);
    a = onnx_attrs("TF", 1, 0);
    a.counts = DIMS(4, 0);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "ngram_counts must not decrease: [1] = 0 after [0] = 4");
    tf_free(&k);
    a = onnx_attrs("TF", 1, 0);
    a.counts = DIMS(0, 3);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT,
             "the 7 items of 2-grams (pool_int64s[3:10]) are not whole 2-grams");
    tf_free(&k);
    a = onnx_attrs("TF", 1, 0);
    a.pool = DIMS(2, 3, 5, 4, 5, 6, 7, 8, 5, 6);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "2-grams 0 and 2 of the pool are the same (n-grams 4 and 6)");
    tf_free(&k);

    /* columns and weights */
    a = onnx_attrs("TF", 1, 0);
    a.n_idx = 6;
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT,
             "ngram_indexes has 6 entries but the pool holds 7 n-grams");
    tf_free(&k);
    a = onnx_attrs("TF", 1, 0);
    a.idx = DIMS(0, 1, -1, 3, 4, 5, 6);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "ngram_indexes[2] = -1 is not an output column");
    tf_free(&k);
    a = mix_attrs("TFIDF", true);
    a.n_w = 5;
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_INVALID_ARGUMENT, "weights has 5 entries, ngram_indexes 7");
    tf_free(&k);
    /* bigrams (4 1) and (9 9) share column 3: with two weights only TF runs */
    static const float two_w[] = {0.5f, 1.25f, 2.0f, 0.75f, 3.0f, 1.5f, 0.1f};
    a = mix_attrs("IDF", true);
    a.w = two_w;
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_fails(&k, KILN_ERR_UNSUPPORTED,
             "n-grams 4 and 5 share output column 3 with different weights (3 and 1.5)");
    tf_free(&k);
    a.mode = "TF";
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    tf_expect(&k, "TF ignores weights shared by a column", 1, DIMS(6), (const float[6]){0});
    tf_free(&k);

    /* strings and the input */
    a = onnx_attrs("TF", 1, 0);
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    kn_node *node = &k.net->nodes[k.node];
    kn_attr *na = kn_realloc(node->attrs, (size_t)(node->n_attr + 1) * sizeof *na);
    KT_CHECK(na != NULL);
    if (na) {
        node->attrs = na;
        memset(&na[node->n_attr], 0, sizeof *na);
        na[node->n_attr].name = kn_strdup("pool_strings");
        na[node->n_attr].type = KN_ATTR_STRINGS;
        na[node->n_attr].n = 1;
        na[node->n_attr].strings = kn_calloc(1, sizeof(char *));
        na[node->n_attr].strings[0] = kn_strdup("the");
        node->n_attr++;
        tf_fails(&k, KILN_ERR_UNSUPPORTED, "pool_strings (string n-grams) is not supported");
    }
    tf_free(&k);
    static const float xf[6] = {0};
    tf_new(&k, KILN_DTYPE_FLOAT, 1, DIMS(6), xf, &a);
    tf_fails(&k, KILN_ERR_UNSUPPORTED, "the input must be int32 or int64, not float");
    tf_free(&k);
    tf_new(&k, KILN_DTYPE_INT64, 3, DIMS(1, 2, 3), x, &a);
    tf_fails(&k, KILN_ERR_SHAPE, "the input must be [C] or [N, C], got rank 3");
    tf_free(&k);
    /* a string tensor cannot be a graph input: ask inference alone */
    tf_new(&k, KILN_DTYPE_INT64, 1, DIMS(6), x, &a);
    const kn_op_schema *s = kn_op_find("", "TfIdfVectorizer");
    if (s) {
        kn_tinfo in = {0}, out = {0};
        in.dtype = KILN_DTYPE_STRING;
        in.rank = 1;
        in.dims[0] = 6;
        kn_infer ic = {&k.net->nodes[k.node], 1, &in, 1, &out};
        KT_FAILS(s->infer(&ic), KILN_ERR_UNSUPPORTED, "string input is not supported");
    }
    tf_free(&k);
}

int main(void) {
    test_values();
    test_errors();
    return kt_finish();
}
