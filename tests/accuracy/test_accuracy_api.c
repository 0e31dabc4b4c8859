/* test_accuracy_api.c - the library pieces behind kiln's accuracy tools,
 * through the public API: the FP16 precision pass (casts placed, constants
 * converted, per-layer constraints), reference tactics, subgraph extraction
 * and the ONNX writer's round trip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/kiln_builder.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

#define N 16 /* elements of the 2x8 tensors */

/* x[2,8] -> Relu "relu" -> Sigmoid "sigmoid" -> Mul(c) "scale" -> y */
static kiln_network *make_net(void) {
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    int64_t dims[2] = {2, 8}, cd[1] = {8};
    float c[8];
    for (int i = 0; i < 8; i++)
        c[i] = 0.5f + 0.125f * (float)i;
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, dims, NULL));
    KT_OK(kiln_network_add_constant(net, "c", KILN_DTYPE_FLOAT, 1, cd, c, sizeof c));
    const char *x = "x", *r = "r", *s = "s", *y = "y";
    const char *mul_in[2] = {"s", "c"};
    KT_OK(kiln_network_add_node(net, "relu", "Relu", "", 17, 1, &x, 1, &r, NULL));
    KT_OK(kiln_network_add_node(net, "sigmoid", "Sigmoid", "", 17, 1, &r, 1, &s, NULL));
    KT_OK(kiln_network_add_node(net, "scale", "Mul", "", 17, 2, mul_in, 1, &y, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

typedef struct precision_spec {
    const char *layer;
    kiln_dtype dtype;
} precision_spec;

/* Build with flags (and constraints), return the engine. */
static kiln_engine *build(const kiln_network *net, uint32_t flags, const precision_spec *ps,
                          int n_ps) {
    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    kiln_builder_config_set_flags(cfg, flags | KILN_BUILDER_FLAG_NO_TIMING);
    for (int i = 0; i < n_ps; i++)
        KT_OK(kiln_builder_config_set_layer_precision(cfg, ps[i].layer, ps[i].dtype));
    int prof = 0;
    int64_t dims[2] = {2, 8};
    KT_OK(kiln_builder_config_add_profile(cfg, &prof));
    KT_OK(kiln_builder_config_set_shape(cfg, prof, "x", 2, dims, dims, dims));
    void *plan = NULL;
    size_t size = 0;
    kiln_engine *eng = NULL;
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    if (plan)
        KT_OK(kiln_engine_load(plan, size, &eng));
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    return eng;
}

static int count_op(const kiln_engine *eng, const char *op) {
    int n = 0;
    for (int i = 0; eng && i < kiln_engine_num_layers(eng); i++)
        n += strcmp(kiln_engine_layer_op(eng, i), op) == 0;
    return n;
}

static void run(kiln_engine *eng, const float *x, float *y) {
    kiln_context *ctx = NULL;
    memset(y, 0, N * sizeof *y);
    if (!eng)
        return;
    KT_OK(kiln_context_create(eng, &ctx));
    int64_t dims[2] = {2, 8};
    static float xin[N] __attribute__((aligned(64)));
    memcpy(xin, x, sizeof xin);
    KT_OK(kiln_context_set_input_shape(ctx, "x", 2, dims));
    KT_OK(kiln_context_set_tensor_address(ctx, "x", xin));
    KT_OK(kiln_context_enqueue(ctx, NULL));
    const float *out = kiln_context_tensor_address(ctx, "y");
    KT_CHECK(out != NULL);
    if (out)
        memcpy(y, out, N * sizeof *y);
    kiln_context_destroy(ctx);
}

static double max_diff(const float *a, const float *b) {
    double m = 0;
    for (int i = 0; i < N; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static void test_precision(const float *x) {
    kiln_network *net = make_net();
    float ref[N], got[N];
    kiln_engine *e32 = build(net, KILN_BUILDER_FLAG_NO_FUSION, NULL, 0);
    KT_CHECK(count_op(e32, "Cast") == 0);
    run(e32, x, ref);

    /* all three layers in FP16: one cast in, one out; the constant converted */
    kiln_engine *e16 = build(net, KILN_BUILDER_FLAG_NO_FUSION | KILN_BUILDER_FLAG_FP16, NULL, 0);
    KT_CHECK(count_op(e16, "Cast") == 2);
    KT_CHECK(e16 && kiln_engine_num_layers(e16) == 5);
    KT_CHECK(e16 && kiln_engine_tensor_dtype(e16, "y") == KILN_DTYPE_FLOAT);
    run(e16, x, got);
    double d16 = max_diff(ref, got);
    KT_CHECK(d16 > 0 && d16 < 5e-3);

    /* sigmoid kept in FP32: casts on both sides of it */
    precision_spec keep = {"sigmoid", KILN_DTYPE_FLOAT};
    kiln_engine *ek = build(net, KILN_BUILDER_FLAG_NO_FUSION | KILN_BUILDER_FLAG_FP16, &keep, 1);
    KT_CHECK(count_op(ek, "Cast") == 4);
    run(ek, x, got);
    KT_CHECK(max_diff(ref, got) < 5e-3);

    /* a constraint alone converts its layer; BF16 too */
    precision_spec one = {"scale", KILN_DTYPE_BFLOAT16};
    kiln_engine *eb = build(net, KILN_BUILDER_FLAG_NO_FUSION, &one, 1);
    KT_CHECK(count_op(eb, "Cast") == 2);
    run(eb, x, got);
    double db = max_diff(ref, got);
    KT_CHECK(db > 0 && db < 2e-2);

    /* fused layers take the constraint of any member */
    kiln_engine *ef = build(net, KILN_BUILDER_FLAG_FP16, &keep, 1);
    KT_CHECK(count_op(ef, "Cast") == 0 || kiln_engine_num_layers(ef) > 1);
    run(ef, x, got);
    KT_CHECK(max_diff(ref, got) < 5e-3);

    /* an unknown layer name is a warning, not an error */
    precision_spec none = {"no_such_layer", KILN_DTYPE_FLOAT};
    kiln_engine *eu = build(net, KILN_BUILDER_FLAG_NO_FUSION | KILN_BUILDER_FLAG_FP16, &none, 1);
    KT_CHECK(count_op(eu, "Cast") == 2);

    /* reference tactics everywhere */
    kiln_engine *er = build(net, KILN_BUILDER_FLAG_REF_TACTICS, NULL, 0);
    for (int i = 0; er && i < kiln_engine_num_layers(er); i++)
        KT_CHECK(strcmp(kiln_engine_layer_tactic(er, i), "ref") == 0);
    run(er, x, got);
    KT_CHECK(max_diff(ref, got) < 1e-6);

    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_FAILS(kiln_builder_config_set_layer_precision(cfg, "relu", KILN_DTYPE_INT8),
             KILN_ERR_INVALID_ARGUMENT, "relu");
    kiln_builder_config_destroy(cfg);
    kiln_engine_destroy(e32);
    kiln_engine_destroy(e16);
    kiln_engine_destroy(ek);
    kiln_engine_destroy(eb);
    kiln_engine_destroy(ef);
    kiln_engine_destroy(eu);
    kiln_engine_destroy(er);
    kiln_network_destroy(net);
}

static void test_extract(void) {
    kiln_network *net = make_net();
    KT_CHECK(kiln_network_node_num_inputs(net, 2) == 2);
    KT_CHECK(strcmp(kiln_network_node_input(net, 2, 1), "c") == 0);
    KT_CHECK(strcmp(kiln_network_node_output(net, 0, 0), "r") == 0);
    KT_CHECK(kiln_network_node_output(net, 0, 1) == NULL);
    int mid = 1;
    kiln_network *sub = NULL;
    KT_OK(kiln_network_extract(net, 1, &mid, &sub));
    KT_CHECK(sub && kiln_network_num_nodes(sub) == 1 && kiln_network_num_inputs(sub) == 1 &&
             kiln_network_num_outputs(sub) == 1);
    if (sub) {
        KT_CHECK(strcmp(kiln_network_input_name(sub, 0), "r") == 0);
        KT_CHECK(strcmp(kiln_network_output_name(sub, 0), "s") == 0);
        int64_t d[2] = {2, 8}, got[KILN_MAX_DIMS];
        kiln_dtype dt;
        int rank = 0;
        KT_OK(kiln_network_set_tensor_info(sub, "r", KILN_DTYPE_FLOAT, 2, d));
        KT_OK(kiln_network_tensor_info(sub, "r", &dt, &rank, got));
        KT_CHECK(dt == KILN_DTYPE_FLOAT && rank == 2 && got[1] == 8);
        KT_FAILS(kiln_network_set_tensor_info(sub, "nope", KILN_DTYPE_FLOAT, 0, NULL),
                 KILN_ERR_NOT_FOUND, "nope");
    }
    int tail[2] = {1, 2};
    kiln_network *sub2 = NULL;
    KT_OK(kiln_network_extract(net, 2, tail, &sub2));
    KT_CHECK(sub2 && kiln_network_num_nodes(sub2) == 2 && kiln_network_num_outputs(sub2) == 1);
    if (sub2)
        KT_CHECK(strcmp(kiln_network_output_name(sub2, 0), "y") == 0);
    int bad = 7;
    kiln_network *sub3 = NULL;
    KT_FAILS(kiln_network_extract(net, 1, &bad, &sub3), KILN_ERR_INVALID_ARGUMENT, "7");
    KT_CHECK(sub3 == NULL);
    kiln_network_destroy(sub);
    kiln_network_destroy(sub2);
    kiln_network_destroy(net);
}

static void test_writer(const float *x) {
    kiln_network *net = make_net();
    char path[] = "/tmp/kiln-test-writer-XXXXXX";
    int fd = mkstemp(path);
    KT_CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    KT_OK(kiln_onnx_write_file(net, path));
    kiln_network *back = NULL;
    KT_OK(kiln_onnx_parse_file(path, &back));
    unlink(path);
    if (!back) {
        kiln_network_destroy(net);
        return;
    }
    KT_CHECK(kiln_network_num_nodes(back) == kiln_network_num_nodes(net));
    for (int i = 0; i < kiln_network_num_nodes(net); i++) {
        KT_CHECK(strcmp(kiln_network_node_op_type(back, i), kiln_network_node_op_type(net, i)) ==
                 0);
        KT_CHECK(strcmp(kiln_network_node_name(back, i), kiln_network_node_name(net, i)) == 0);
        for (int j = 0; j < kiln_network_node_num_inputs(net, i); j++)
            KT_CHECK(strcmp(kiln_network_node_input(back, i, j),
                            kiln_network_node_input(net, i, j)) == 0);
    }
    KT_CHECK(strcmp(kiln_network_output_name(back, 0), "y") == 0);
    float a[N], b[N];
    kiln_engine *ea = build(net, 0, NULL, 0), *eb = build(back, 0, NULL, 0);
    run(ea, x, a);
    run(eb, x, b);
    KT_CHECK(memcmp(a, b, sizeof a) == 0);
    KT_FAILS(kiln_onnx_write_file(net, "/nonexistent-dir/x.onnx"), KILN_ERR_IO, "nonexistent");
    kiln_engine_destroy(ea);
    kiln_engine_destroy(eb);
    kiln_network_destroy(back);
    kiln_network_destroy(net);
}

int main(void) {
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 37) % 17) / 5.0f - 1.7f;
    test_precision(x);
    test_extract();
    test_writer(x);
    printf("test_accuracy_api: %d passed, %d failed\n", kt_pass, kt_fail);
    return kt_fail ? 1 : 0;
}
