/* test_train_ops.c - training-mode ops run at inference on the CPU (issue
 * 32): Dropout with training_mode true (a seeded draw: kept elements scaled
 * by 1/(1-ratio), the mask agreeing, the kept fraction near 1-ratio, a new
 * draw per run and the same one from a fresh context) and
 * BatchNormalization with training_mode=1 (batch statistics, the running
 * mean and variance with a momentum). The ONNX node cases check Dropout's
 * outputs only loosely (their draws are numpy's); this checks the draws.
 * Inputs are fixed; expected values are computed here. */
#include <math.h>
#include <string.h>

#include "builder/builder.h"
#include "kiln/kiln_builder.h"
#include "test.h"
#include "kt_exec.h"

#include "kt_passes.h"

enum { N = 4000 };

static kn_net *dropout_net(float ratio, int64_t seed) {
    kn_net *net = NULL;
    KT_OK(kn_net_new(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 1, DIMS(N), NULL));
    fscalar(net, "r", ratio);
    uint8_t t = 1;
    KT_OK(kiln_network_add_constant(net, "t", KILN_DTYPE_BOOL, 0, NULL, &t, 1));
    const char *outs[2] = {"y", "mask"};
    int idx = -1;
    KT_OK(kiln_network_add_node(net, "drop", "Dropout", "", 13, 3, IN("x", "r", "t"), 2, outs,
                                &idx));
    KT_OK(kiln_network_set_attr_int(net, idx, "seed", seed));
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kiln_network_mark_output(net, "mask"));
    return net;
}

/* Runs the net `runs` times in one context; the masks of each run. */
static void dropout_runs(kn_net *net, const float *x, int runs, uint8_t (*masks)[N], float ratio) {
    kt_exec e;
    int rank[1] = {1};
    int64_t dims[1][KILN_MAX_DIMS] = {{N}};
    const void *data[1] = {x};
    KT_OK(kt_exec_run(&e, net, data, rank, (const int64_t (*)[KILN_MAX_DIMS])dims));
    for (int run = 0; run < runs; run++) {
        if (run > 0)
            KT_OK(kx_ctx_run(&e.c));
        kn_tinfo ti;
        const float *y = kt_exec_output(&e, 0, &ti);
        const uint8_t *m = kt_exec_output(&e, 1, &ti);
        KT_CHECK(y && m && ti.dtype == KILN_DTYPE_BOOL);
        if (!y || !m)
            break;
        int kept = 0, bad = 0;
        for (int i = 0; i < N; i++) {
            kept += m[i] != 0;
            float want = m[i] ? x[i] / (1.f - ratio) : 0.f;
            bad += fabsf(y[i] - want) > 1e-5f * fabsf(want) + 1e-6f;
            masks[run][i] = m[i];
        }
        KT_CHECK(bad == 0);
        /* N draws: the kept count's standard deviation is under 32 */
        double expect = (1.0 - ratio) * N;
        KT_CHECK(fabs(kept - expect) < 160);
        if (fabs(kept - expect) >= 160)
            printf("  kept %d of %d at ratio %g\n", kept, N, ratio);
    }
    kt_exec_free(&e);
}

static void test_dropout(void) {
    static float x[N];
    static uint8_t a[2][N], b[2][N], c[1][N];
    for (int i = 0; i < N; i++)
        x[i] = 1.f + (float)(i % 17) * 0.25f;
    kn_net *net = dropout_net(0.25f, 7);
    dropout_runs(net, x, 2, a, 0.25f);
    kn_net_free(net);
    net = dropout_net(0.25f, 7);
    dropout_runs(net, x, 2, b, 0.25f);
    kn_net_free(net);
    KT_CHECK(memcmp(a[0], b[0], N) == 0 && memcmp(a[1], b[1], N) == 0); /* seeded: repeats */
    KT_CHECK(memcmp(a[0], a[1], N) != 0);                               /* a new draw per run */
    net = dropout_net(0.75f, 8);
    dropout_runs(net, x, 1, c, 0.75f);
    kn_net_free(net);
    KT_CHECK(memcmp(a[0], c[0], N) != 0); /* another seed, another draw */
}

/* X [2, 2, 3]; momentum 0.5: running = input * 0.5 + batch * 0.5. */
static void test_batchnorm_training(void) {
    kn_net *net = NULL;
    KT_OK(kn_net_new(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(2, 2, 3), NULL));
    const float sc[2] = {2.f, 0.5f}, bi[2] = {1.f, -1.f}, mean[2] = {10.f, -4.f},
                var[2] = {3.f, 1.f};
    KT_OK(kiln_network_add_constant(net, "s", KILN_DTYPE_FLOAT, 1, DIMS(2), sc, sizeof sc));
    KT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_FLOAT, 1, DIMS(2), bi, sizeof bi));
    KT_OK(kiln_network_add_constant(net, "m", KILN_DTYPE_FLOAT, 1, DIMS(2), mean, sizeof mean));
    KT_OK(kiln_network_add_constant(net, "v", KILN_DTYPE_FLOAT, 1, DIMS(2), var, sizeof var));
    const char *outs[3] = {"y", "rm", "rv"};
    int idx = -1;
    KT_OK(kiln_network_add_node(net, "bn", "BatchNormalization", "", 15, 5,
                                IN("x", "s", "b", "m", "v"), 3, outs, &idx));
    KT_OK(kiln_network_set_attr_int(net, idx, "training_mode", 1));
    KT_OK(kiln_network_set_attr_float(net, idx, "momentum", 0.5f));
    KT_OK(kiln_network_set_attr_float(net, idx, "epsilon", 0.f));
    for (int k = 0; k < 3; k++)
        KT_OK(kiln_network_mark_output(net, outs[k]));
    const float x[12] = {1, 2, 3, 4, 5, 6, -1, 0, 1, 2, 2, 2};
    kt_exec e;
    int rank[1] = {3};
    int64_t dims[1][KILN_MAX_DIMS] = {{2, 2, 3}};
    const void *data[1] = {x};
    KT_OK(kt_exec_run(&e, net, data, rank, (const int64_t (*)[KILN_MAX_DIMS])dims));
    kn_tinfo ti;
    const float *y = kt_exec_output(&e, 0, &ti);
    const float *rm = kt_exec_output(&e, 1, &ti);
    const float *rv = kt_exec_output(&e, 2, &ti);
    KT_CHECK(y && rm && rv && ti.rank == 1 && ti.dims[0] == 2);
    for (int c = 0; y && rm && rv && c < 2; c++) {
        double s = 0, q = 0;
        for (int n = 0; n < 2; n++)
            for (int k = 0; k < 3; k++)
                s += x[(n * 2 + c) * 3 + k];
        double m = s / 6;
        for (int n = 0; n < 2; n++)
            for (int k = 0; k < 3; k++)
                q += (x[(n * 2 + c) * 3 + k] - m) * (x[(n * 2 + c) * 3 + k] - m);
        double v = q / 6;
        KT_NEAR(rm[c], mean[c] * 0.5 + m * 0.5, 1e-5);
        KT_NEAR(rv[c], var[c] * 0.5 + v * 0.5, 1e-5);
        for (int n = 0; n < 2; n++)
            for (int k = 0; k < 3; k++) {
                int i = (n * 2 + c) * 3 + k;
                KT_NEAR(y[i], (x[i] - m) / sqrt(v) * sc[c] + bi[c], 1e-5);
            }
    }
    kt_exec_free(&e);
    kn_net_free(net);
}

int main(void) {
    test_dropout();
    test_batchnorm_training();
    printf("%d passed, %d failed, %d skipped\n", kt_pass, kt_fail, kt_skipped);
    return kt_fail ? 1 : 0;
}
