/* test_tools_api.c - the public tensor-file and comparison API
 * (include/kiln/kiln_tools.h) through its public names only: .npy and .npz
 * round trips of every dtype, bad images and files refused with a status
 * and a message naming the file (truncations, hostile archives of
 * tests/bad/inputs, a directory, the input budget), bad arguments, and
 * kiln_compare_tensors' statistics, NaN/Inf rules and verdicts. Runs in
 * tests/ (ctest's working directory). Deterministic: no randomness. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/kiln_tools.h"

static int failures, checks;

#define CHECK(cond, ...)                                         \
    do {                                                         \
        checks++;                                                \
        if (!(cond)) {                                           \
            failures++;                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fputc('\n', stderr);                                 \
        }                                                        \
    } while (0)

static kiln_host_tensor view(const char *name, kiln_dtype dt, int rank, const int64_t *dims,
                             void *data, size_t bytes) {
    kiln_host_tensor t;
    memset(&t, 0, sizeof t);
    t.name = (char *)name;
    t.dtype = dt;
    t.rank = rank;
    for (int i = 0; i < rank; i++)
        t.dims[i] = dims[i];
    t.data = data;
    t.bytes = bytes;
    return t;
}

static void test_roundtrip(void) {
    static const kiln_dtype types[] = {
        KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT,  KILN_DTYPE_DOUBLE, KILN_DTYPE_INT8,
        KILN_DTYPE_INT16,   KILN_DTYPE_INT32,  KILN_DTYPE_INT64,  KILN_DTYPE_UINT8,
        KILN_DTYPE_UINT16,  KILN_DTYPE_UINT32, KILN_DTYPE_UINT64, KILN_DTYPE_BOOL,
        KILN_DTYPE_BFLOAT16};
    int64_t dims[3] = {2, 3, 4};
    kiln_tensor_list list = {0};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        size_t es = kiln_dtype_size(types[k]), n = 24;
        unsigned char *data = malloc(n * es);
        for (size_t i = 0; i < n; i++)
            kiln_tensor_set_f64(types[k], data, i, (double)(i % 2));
        char name[32];
        snprintf(name, sizeof name, "t%zu", k);
        kiln_host_tensor t = view(name, types[k], 3, dims, data, n * es);
        void *img = NULL;
        size_t size = 0;
        CHECK(kiln_npy_encode(&t, &img, &size) == KILN_OK, "encode %s: %s",
              kiln_dtype_name(types[k]), kiln_last_error());
        kiln_host_tensor back;
        CHECK(kiln_npy_decode(img, size, "mem.npy", &back) == KILN_OK, "decode %s: %s",
              kiln_dtype_name(types[k]), kiln_last_error());
        CHECK(back.dtype == types[k] && back.rank == 3 && back.dims[2] == 4 &&
                  back.bytes == n * es && memcmp(back.data, data, n * es) == 0,
              "round trip of %s", kiln_dtype_name(types[k]));
        /* every truncation is refused with the file named */
        for (size_t cut = 0; cut < size; cut += 7) {
            kiln_host_tensor bad;
            kiln_status st = kiln_npy_decode(img, cut, "cut.npy", &bad);
            CHECK(st == KILN_ERR_PARSE && strstr(kiln_last_error(), "cut.npy"),
                  "truncated to %zu: %s %s", cut, kiln_status_name(st), kiln_last_error());
        }
        kiln_host_tensor_free(&back);
        CHECK(kiln_tensor_list_add(&list, name, types[k], 3, dims, data, n * es) == KILN_OK,
              "list add");
        kiln_free(img);
        free(data);
    }
    /* .npz in memory and on disk */
    void *zip = NULL;
    size_t zsize = 0;
    CHECK(kiln_npz_encode(&list, &zip, &zsize) == KILN_OK, "npz encode: %s", kiln_last_error());
    kiln_tensor_list back = {0};
    CHECK(kiln_npz_decode(zip, zsize, "mem.npz", &back) == KILN_OK, "npz decode: %s",
          kiln_last_error());
    CHECK(back.n == list.n, "npz entries %d of %d", back.n, list.n);
    for (int i = 0; i < back.n && i < list.n; i++) {
        const kiln_host_tensor *f = kiln_tensor_list_find(&back, list.items[i].name);
        CHECK(f && f->bytes == list.items[i].bytes &&
                  memcmp(f->data, list.items[i].data, f->bytes) == 0,
              "npz entry %s", list.items[i].name);
    }
    CHECK(kiln_tensor_list_find(&back, "nope") == NULL, "find a missing name");
    kiln_tensor_list_free(&back);
    kiln_status st = kiln_npz_decode(zip, zsize / 2, "half.npz", &back);
    CHECK(st == KILN_ERR_PARSE && strstr(kiln_last_error(), "half.npz"), "half an npz: %s",
          kiln_last_error());
    kiln_free(zip);

    char path[] = "/tmp/kiln_tools_api_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    CHECK(kiln_npz_save_file(path, &list) == KILN_OK, "npz save: %s", kiln_last_error());
    CHECK(kiln_tensors_load_file(path, &back) == KILN_OK && back.n == list.n, "npz load: %s",
          kiln_last_error());
    kiln_tensor_list_free(&back);
    /* a lone .npy is named by its stem */
    char npy[64];
    snprintf(npy, sizeof npy, "%s_input0.npy", path);
    CHECK(kiln_npy_save_file(npy, &list.items[1]) == KILN_OK, "npy save: %s", kiln_last_error());
    CHECK(kiln_tensors_load_file(npy, &back) == KILN_OK && back.n == 1 &&
              strstr(back.items[0].name, "_input0") && !strstr(back.items[0].name, ".npy"),
          "npy load: %s", kiln_last_error());
    kiln_tensor_list_free(&back);
    /* the input budget */
    setenv("KILN_MAX_INPUT_BYTES", "64", 1);
    st = kiln_tensors_load_file(path, &back);
    CHECK(st != KILN_OK && strstr(kiln_last_error(), "budget"), "budget: %s %s",
          kiln_status_name(st), kiln_last_error());
    unsetenv("KILN_MAX_INPUT_BYTES");
    unlink(npy);
    unlink(path);
    kiln_tensor_list_free(&list);
    CHECK(list.n == 0 && list.items == NULL, "free zeroes the list");
}

static void test_bad_files(void) {
    kiln_tensor_list l = {0};
    kiln_status st = kiln_tensors_load_file("/nonexistent/x.npz", &l);
    CHECK(st == KILN_ERR_IO && strstr(kiln_last_error(), "/nonexistent/x.npz"), "missing: %s",
          kiln_last_error());
    st = kiln_tensors_load_file(".", &l);
    CHECK(st == KILN_ERR_IO && strstr(kiln_last_error(), "regular"), "directory: %s",
          kiln_last_error());
    static const char *const hostile[] = {"bad/inputs/npz_duplicate.npz", "bad/inputs/npz_overlap.npz",
                                          "bad/inputs/npz_past_end.npz", "bad/inputs/npz_nul_name.npz",
                                          "bad/inputs/npz_budget.npz"};
    setenv("KILN_MAX_INPUT_BYTES", "1000000", 1); /* npz_budget.npz: 16 MiB over 1 MB */
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        if (access(hostile[i], R_OK) != 0) {
            CHECK(0, "missing test file %s (run from tests/)", hostile[i]);
            continue;
        }
        st = kiln_tensors_load_file(hostile[i], &l);
        CHECK(st != KILN_OK && strstr(kiln_last_error(), hostile[i]) && l.n == 0,
              "%s: %s %s", hostile[i], kiln_status_name(st), kiln_last_error());
    }
    unsetenv("KILN_MAX_INPUT_BYTES");
    /* not a .npy at all */
    kiln_host_tensor t;
    st = kiln_npy_decode("hello, world", 12, "text.npy", &t);
    CHECK(st == KILN_ERR_PARSE && strstr(kiln_last_error(), "text.npy"), "text: %s",
          kiln_last_error());
    /* bad arguments */
    CHECK(kiln_npy_decode(NULL, 5, "x", &t) == KILN_ERR_INVALID_ARGUMENT, "NULL data");
    CHECK(kiln_tensors_load_file(NULL, &l) == KILN_ERR_INVALID_ARGUMENT, "NULL path");
    float f[4] = {0};
    int64_t d4[1] = {4}, dneg[1] = {-1};
    kiln_host_tensor shortt = view("s", KILN_DTYPE_FLOAT, 1, d4, f, 8);
    void *img;
    size_t size;
    CHECK(kiln_npy_encode(&shortt, &img, &size) == KILN_ERR_INVALID_ARGUMENT,
          "data shorter than the shape: %s", kiln_last_error());
    kiln_host_tensor str = view("s", KILN_DTYPE_STRING, 1, d4, f, 16);
    CHECK(kiln_npy_encode(&str, &img, &size) == KILN_ERR_UNSUPPORTED, "string dtype: %s",
          kiln_last_error());
    kiln_tensor_list dup = {0};
    CHECK(kiln_tensor_list_add(&dup, "a", KILN_DTYPE_FLOAT, 1, d4, f, 16) == KILN_OK &&
              kiln_tensor_list_add(&dup, "a", KILN_DTYPE_FLOAT, 1, d4, f, 16) == KILN_OK,
          "list add");
    CHECK(kiln_npz_encode(&dup, &img, &size) == KILN_ERR_INVALID_ARGUMENT &&
              strstr(kiln_last_error(), "'a'"),
          "duplicate names: %s", kiln_last_error());
    kiln_tensor_list_free(&dup);
    size_t n = 7;
    CHECK(kiln_tensor_volume(1, dneg, &n) == KILN_ERR_INVALID_ARGUMENT && n == 7, "negative dim");
    int64_t huge[3] = {INT64_MAX, INT64_MAX, 4};
    CHECK(kiln_tensor_volume(3, huge, &n) == KILN_ERR_INVALID_ARGUMENT, "overflow");
    CHECK(kiln_tensor_volume(1, d4, &n) == KILN_OK && n == 4, "volume");
    CHECK(kiln_tensor_list_add(NULL, "a", KILN_DTYPE_FLOAT, 1, d4, f, 16) ==
              KILN_ERR_INVALID_ARGUMENT,
          "add to NULL");
    kiln_host_tensor_free(NULL);
    kiln_tensor_list_free(NULL);
}

static kiln_compare_result cmp(const kiln_host_tensor *g, const kiln_host_tensor *r, double atol,
                               double rtol, kiln_compare_stat stat) {
    kiln_compare_options o = {atol, rtol, stat, 0.99};
    kiln_compare_result res;
    memset(&res, 0xff, sizeof res);
    kiln_status st = kiln_compare_tensors(g, r, &o, &res);
    CHECK(st == KILN_OK, "compare: %s", kiln_last_error());
    return res;
}

static void test_compare(void) {
    int64_t d5[1] = {5};
    double ref[5] = {1.0, 2.0, NAN, INFINITY, 0.0};
    double got[5] = {1.0, 2.0, NAN, INFINITY, 1e-3};
    kiln_host_tensor r = view("out", KILN_DTYPE_DOUBLE, 1, d5, ref, sizeof ref);
    kiln_host_tensor g = view("out", KILN_DTYPE_DOUBLE, 1, d5, got, sizeof got);
    kiln_compare_result s = cmp(&r, &r, 1e-6, 1e-6, KILN_COMPARE_ELEMWISE);
    CHECK(s.passed && s.same_shape && s.count == 5 && s.max_abs == 0 && s.mismatches == 0 &&
              s.nan_got == 1 && s.inf_ref == 1 && s.finite_got == 3,
          "same values: passed %d max %g nan %zu", s.passed, s.max_abs, s.nan_got);
    s = cmp(&g, &r, 1e-6, 1e-6, KILN_COMPARE_ELEMWISE);
    CHECK(!s.passed && s.mismatches == 1 && s.worst_index == 4 && fabs(s.max_abs - 1e-3) < 1e-12 &&
              isinf(s.max_rel) && s.worst_got == 1e-3 && s.worst_ref == 0,
          "one off: passed %d mismatches %zu worst %zu", s.passed, s.mismatches, s.worst_index);
    s = cmp(&g, &r, 1e-2, 1e-6, KILN_COMPARE_ELEMWISE);
    CHECK(s.passed, "atol holds");
    s = cmp(&g, &r, 1e-6, 1e-6, KILN_COMPARE_MEDIAN);
    CHECK(s.passed && s.median_abs == 0, "median verdict: median %g", s.median_abs);
    s = cmp(&g, &r, 1e-6, 1e-6, KILN_COMPARE_MAX);
    CHECK(!s.passed, "max verdict");
    CHECK(fabs(s.mean_abs - 1e-3 / 5) < 1e-12, "mean abs %g", s.mean_abs);
    /* a NaN against a number, and opposite infinities, are infinite errors */
    double nan1[5] = {NAN, 2.0, NAN, -INFINITY, 0.0};
    kiln_host_tensor n1 = view("out", KILN_DTYPE_DOUBLE, 1, d5, nan1, sizeof nan1);
    s = cmp(&n1, &r, 1, 1, KILN_COMPARE_ELEMWISE);
    CHECK(!s.passed && s.mismatches == 2 && isinf(s.max_abs) && s.worst_index == 0,
          "NaN and -Inf: mismatches %zu worst %zu", s.mismatches, s.worst_index);
    /* mixed dtypes: float16 against float */
    int64_t d3[1] = {3};
    uint16_t h[3] = {kiln_float_to_half(0.5f), kiln_float_to_half(1.0f), kiln_float_to_half(-2.0f)};
    float fl[3] = {0.5f, 1.0f, -2.001f};
    kiln_host_tensor th = view("h", KILN_DTYPE_FLOAT16, 1, d3, h, sizeof h);
    kiln_host_tensor tf = view("h", KILN_DTYPE_FLOAT, 1, d3, fl, sizeof fl);
    s = cmp(&th, &tf, 1e-2, 1e-2, KILN_COMPARE_ELEMWISE);
    CHECK(s.passed && s.worst_index == 2 && s.mean_got < 0, "fp16 vs fp32: worst %zu",
          s.worst_index);
    /* a shape mismatch is a failed result, not an error */
    int64_t d4[1] = {4};
    kiln_host_tensor r4 = view("out", KILN_DTYPE_DOUBLE, 1, d4, ref, 4 * sizeof(double));
    s = cmp(&g, &r4, 1, 1, KILN_COMPARE_ELEMWISE);
    CHECK(!s.passed && !s.same_shape && s.count == 0, "shape mismatch");
    /* empty tensors pass */
    int64_t d0[1] = {0};
    kiln_host_tensor e = view("e", KILN_DTYPE_FLOAT, 1, d0, fl, 0);
    s = cmp(&e, &e, 0, 0, KILN_COMPARE_MAX);
    CHECK(s.passed && s.count == 0, "empty");
    /* bad arguments */
    kiln_compare_options o = {1e-5, 1e-5, KILN_COMPARE_ELEMWISE, 0.99};
    kiln_compare_result res;
    kiln_host_tensor shortt = view("out", KILN_DTYPE_DOUBLE, 1, d5, ref, 3 * sizeof(double));
    CHECK(kiln_compare_tensors(&shortt, &r, &o, &res) == KILN_ERR_INVALID_ARGUMENT &&
              strstr(kiln_last_error(), "'out'"),
          "short data: %s", kiln_last_error());
    kiln_host_tensor str = view("s", KILN_DTYPE_STRING, 1, d5, ref, sizeof ref);
    CHECK(kiln_compare_tensors(&str, &r, &o, &res) == KILN_ERR_UNSUPPORTED, "string");
    o.quantile = 2;
    CHECK(kiln_compare_tensors(&g, &r, &o, &res) == KILN_ERR_INVALID_ARGUMENT, "quantile 2");
    o.quantile = 0.5;
    o.atol = NAN;
    CHECK(kiln_compare_tensors(&g, &r, &o, &res) == KILN_ERR_INVALID_ARGUMENT, "atol NaN");
    o.atol = 0;
    o.stat = (kiln_compare_stat)9;
    CHECK(kiln_compare_tensors(&g, &r, &o, &res) == KILN_ERR_INVALID_ARGUMENT, "stat 9");
    CHECK(kiln_compare_tensors(NULL, &r, &o, &res) == KILN_ERR_INVALID_ARGUMENT, "NULL");
}

int main(void) {
    test_roundtrip();
    test_bad_files();
    test_compare();
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
