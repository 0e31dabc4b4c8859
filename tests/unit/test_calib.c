/* test_calib.c - INT8 calibration (src/builder/calib.c): the min-max,
 * percentile and entropy calibrators on known distributions (normal,
 * uniform, normal with one far outlier; samples from a seeded xorshift
 * generator), the histogram, and the C API end to end: a Conv / Relu /
 * MatMul network calibrated from batches builds kiln::QConv / kiln::QMatMul
 * layers, writes a cache whose min-max scales are max|x| / 127, rebuilds
 * from the cache into the same plan, and keeps a layer named in the layer
 * precisions in float. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builder/calib.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

static uint64_t rs;
static double uni(void) { /* (0, 1) */
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return ((double)(rs >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2 * log(uni())) * cos(6.283185307179586 * uni()); }

enum { N = 1000000 };
static float xs[N + 1];

static void thresholds(const float *x, size_t n, double *mm, double *p9999, double *p99,
                       double *ent) {
    double amax = 0;
    for (size_t i = 0; i < n; i++)
        amax = fabs(x[i]) > amax ? fabs(x[i]) : amax;
    static double h[KCAL_BINS];
    memset(h, 0, sizeof h);
    kcal_hist_add(h, KCAL_BINS, amax, x, n);
    double tot = 0;
    for (int i = 0; i < KCAL_BINS; i++)
        tot += h[i];
    KT_CHECK(tot == (double)n);
    *mm = kcal_threshold_minmax(amax);
    *p9999 = kcal_threshold_percentile(h, KCAL_BINS, amax, 99.99);
    *p99 = kcal_threshold_percentile(h, KCAL_BINS, amax, 99.0);
    *ent = kcal_threshold_entropy(h, KCAL_BINS, amax, KCAL_LEVELS);
    printf("  amax %.4f  p99.99 %.4f  p99 %.4f  entropy %.4f\n", amax, *p9999, *p99, *ent);
}

static void test_calibrators(void) {
    double mm, p4, p2, en, amax = 0;
    printf("normal(0, 1), %d samples\n", N);
    for (int i = 0; i < N; i++) {
        xs[i] = (float)gauss();
        amax = fabs(xs[i]) > amax ? fabs(xs[i]) : amax;
    }
    thresholds(xs, N, &mm, &p4, &p2, &en);
    KT_CHECK(mm == amax);
    /* |x| quantiles of the standard normal: 3.8906 (99.99%), 2.5758 (99%);
     * the bin width is amax / 2048 (about 0.0025) */
    KT_NEAR(p4, 3.8906, 0.08);
    KT_NEAR(p2, 2.5758, 0.02);
    /* entropy clips the tail: well inside the max, well past the bulk */
    KT_CHECK(en > 2.0 && en < 4.5 && en < mm);

    printf("uniform(-1, 1)\n");
    for (int i = 0; i < N; i++)
        xs[i] = (float)(2 * uni() - 1);
    thresholds(xs, N, &mm, &p4, &p2, &en);
    KT_NEAR(p4, 0.9999, 0.002);
    KT_NEAR(p2, 0.99, 0.002);
    /* nothing to clip in a flat distribution: the entropy threshold is near the max */
    KT_CHECK(en > 0.9 * mm);

    printf("normal(0, 1) and one outlier at 1000\n");
    for (int i = 0; i < N; i++)
        xs[i] = (float)gauss();
    xs[N - 1] = 1000.0f;
    thresholds(xs, N, &mm, &p4, &p2, &en);
    KT_CHECK(mm == 1000.0);
    /* the bins are 1000/2048 wide now: percentiles land in the first bins;
     * entropy takes its smallest candidate (128 bins), far from the outlier */
    KT_CHECK(p4 < 5.0);
    KT_NEAR(en, 128 * 1000.0 / 2048, 1e-9);

    /* histogram: past amax into the last bin, NaN and zeros skipped */
    double h[4] = {0};
    float v[6] = {0.1f, -0.6f, 2.0f, 0.99f, NAN, 0.0f};
    kcal_hist_add(h, 4, 1.0, v, 6);
    KT_CHECK(h[0] == 1 && h[1] == 0 && h[2] == 1 && h[3] == 2);
}

/* x [B, 2, 6, 6] -> Conv 3x3 (4 ch) -> Relu -> Flatten -> MatMul [144, 5] -> y */
static kiln_network *make_net(void) {
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    const char *dn[4] = {"B", NULL, NULL, NULL};
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){-1, 2, 6, 6}, dn));
    float w[4 * 2 * 9], b[4], m[144 * 5];
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        w[i] = (float)(gauss() * 0.3);
    for (int i = 0; i < 4; i++)
        b[i] = (float)(0.1 * gauss());
    for (int i = 0; i < 144 * 5; i++)
        m[i] = (float)(gauss() * 0.1);
    KT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_FLOAT, 4, (int64_t[]){4, 2, 3, 3}, w, sizeof w));
    KT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_FLOAT, 1, (int64_t[]){4}, b, sizeof b));
    KT_OK(kiln_network_add_constant(net, "m", KILN_DTYPE_FLOAT, 2, (int64_t[]){144, 5}, m, sizeof m));
    int n;
    KT_OK(kiln_network_add_node(net, "conv", "Conv", "", 17, 3, (const char *[]){"x", "w", "b"}, 1,
                                (const char *[]){"c"}, &n));
    KT_OK(kiln_network_set_attr_ints(net, n, "pads", (int64_t[]){1, 1, 1, 1}, 4));
    KT_OK(kiln_network_add_node(net, "relu", "Relu", "", 17, 1, (const char *[]){"c"}, 1,
                                (const char *[]){"r"}, NULL));
    KT_OK(kiln_network_add_node(net, "flat", "Flatten", "", 17, 1, (const char *[]){"r"}, 1,
                                (const char *[]){"f"}, NULL));
    KT_OK(kiln_network_add_node(net, "fc", "MatMul", "", 17, 2, (const char *[]){"f", "m"}, 1,
                                (const char *[]){"y"}, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

static float data[3][2 * 2 * 36];

static kiln_builder_config *make_cfg(const char *cache, bool batches, const char *keep) {
    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_INT8 | KILN_BUILDER_FLAG_NO_TIMING);
    kiln_builder_config_set_threads(cfg, 1);
    int p;
    KT_OK(kiln_builder_config_add_profile(cfg, &p));
    int64_t s[4] = {2, 2, 6, 6};
    KT_OK(kiln_builder_config_set_shape(cfg, p, "x", 4, s, s, s));
    KT_OK(kiln_builder_config_set_calibration(cfg, KILN_CALIB_MINMAX, 0, cache));
    for (int b = 0; batches && b < 3; b++)
        KT_OK(kiln_builder_config_add_calibration_batch(cfg, b, "x", KILN_DTYPE_FLOAT, 4, s, data[b]));
    if (keep)
        KT_OK(kiln_builder_config_set_layer_precision(cfg, keep, KILN_DTYPE_FLOAT));
    return cfg;
}

static int count_q(const void *plan, size_t size) {
    kiln_engine *e = NULL;
    KT_OK(kiln_engine_load(plan, size, &e));
    int q = 0;
    for (int i = 0; e && i < kiln_engine_num_layers(e); i++) {
        const char *op = kiln_engine_layer_op(e, i);
        q += strstr(op, "QConv") || strstr(op, "QMatMul");
    }
    kiln_engine_destroy(e);
    return q;
}

static char *info(const void *plan, size_t size) {
    kiln_engine *e = NULL;
    char *j = NULL;
    KT_OK(kiln_engine_load(plan, size, &e));
    if (e)
        KT_OK(kiln_engine_layer_info_json(e, &j));
    kiln_engine_destroy(e);
    return j;
}

static void test_api(void) {
    kiln_network *net = make_net();
    double amax = 0;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 144; i++) {
            data[b][i] = (float)gauss();
            amax = fabs(data[b][i]) > amax ? fabs(data[b][i]) : amax;
        }
    char cache[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(cache, sizeof cache, "%s/kiln_test_calib_%d.cache", tmp && *tmp ? tmp : "/tmp",
             (int)getpid());
    remove(cache);
    /* from batches: the cache is written */
    kiln_builder_config *cfg = make_cfg(cache, true, NULL);
    void *p1 = NULL, *p2 = NULL, *p3 = NULL;
    size_t s1 = 0, s2 = 0, s3 = 0;
    KT_OK(kiln_build_serialized(net, cfg, &p1, &s1));
    kiln_builder_config_destroy(cfg);
    KT_CHECK(p1 && count_q(p1, s1) == 2);
    FILE *f = fopen(cache, "r");
    KT_CHECK(f != NULL);
    char line[256];
    double sx = 0, sf = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "x: ", 3) == 0)
            sx = strtod(line + 3, NULL);
        if (strncmp(line, "f: ", 3) == 0)
            sf = strtod(line + 3, NULL);
    }
    if (f)
        fclose(f);
    KT_NEAR(sx, (float)(amax / 127.0), 1e-9);
    KT_CHECK(sf > 0);
    /* from the cache: the same plan */
    cfg = make_cfg(cache, false, NULL);
    KT_OK(kiln_build_serialized(net, cfg, &p2, &s2));
    kiln_builder_config_destroy(cfg);
    /* the plans record build times, so compare what they describe: every
     * layer, its tactic, types and quantization scales */
    char *j1 = info(p1, s1), *j2 = info(p2, s2);
    const char *l1 = j1 ? strstr(j1, "\"layers\"") : NULL, *l2 = j2 ? strstr(j2, "\"layers\"") : NULL;
    KT_CHECK(l1 && l2 && strcmp(l1, l2) == 0 && strstr(l1, "QConv") && strstr(l1, "x 0.0"));
    if (getenv("KT_VERBOSE") && j1)
        printf("%s\n%s\n", j1, j2 ? j2 : "");
    kiln_free(j1);
    kiln_free(j2);
    /* the MatMul kept in float */
    cfg = make_cfg(cache, false, "fc");
    KT_OK(kiln_build_serialized(net, cfg, &p3, &s3));
    kiln_builder_config_destroy(cfg);
    KT_CHECK(p3 && count_q(p3, s3) == 1);
    /* a damaged cache line is an error naming the file */
    f = fopen(cache, "w");
    if (f) {
        fputs("x 0.5\n", f);
        fclose(f);
    }
    cfg = make_cfg(cache, false, NULL);
    void *p4 = NULL;
    size_t s4 = 0;
    KT_FAILS(kiln_build_serialized(net, cfg, &p4, &s4), KILN_ERR_PARSE, "kiln_test_calib_");
    kiln_builder_config_destroy(cfg);
    /* a batch without the input's data */
    kiln_builder_config *c2 = NULL;
    KT_OK(kiln_builder_config_create(&c2));
    kiln_builder_config_set_flags(c2, KILN_BUILDER_FLAG_INT8);
    KT_OK(kiln_builder_config_add_calibration_batch(c2, 1, "x", KILN_DTYPE_FLOAT, 4,
                                                    (int64_t[]){2, 2, 6, 6}, data[0]));
    KT_FAILS(kiln_build_serialized(net, c2, &p4, &s4), KILN_ERR_INVALID_ARGUMENT, "batch 0");
    kiln_builder_config_destroy(c2);
    KT_FAILS(kiln_builder_config_set_calibration(NULL, KILN_CALIB_MINMAX, 0, NULL),
             KILN_ERR_INVALID_ARGUMENT, "NULL");
    KT_FAILS(kiln_builder_config_set_calibration(cfg = make_cfg(NULL, false, NULL),
                                                 KILN_CALIB_PERCENTILE, 120, NULL),
             KILN_ERR_INVALID_ARGUMENT, "percentile");
    kiln_builder_config_destroy(cfg);
    remove(cache);
    kiln_free(p1);
    kiln_free(p2);
    kiln_free(p3);
    kiln_network_destroy(net);
}

int main(void) {
    rs = kt_seed("test_calib", 30);
    test_calibrators();
    test_api();
    return kt_finish();
}
