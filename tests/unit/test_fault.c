/* test_fault.c - fault injection: make the N-th allocation fail, for every N
 * over a whole build and over a whole load + run, and check that each failure
 * returns an error, leaves nothing half-made (LeakSanitizer checks leaks in
 * the sanitizer build) and that the process can go on. */
#include "core/core.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

static kiln_status make_net(kiln_network **out) {
    static const float w[16] = {1, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4, 0.5f, 0.25f, 0, 1};
    static const float b[4] = {0.5f, -0.5f, 1, 0};
    kiln_network *net = NULL;
    int64_t xd[2] = {-1, 4}, wd[2] = {4, 4}, bd[1] = {4};
    const char *n0_in[2] = {"x", "w"}, *n0_out[1] = {"h"};
    const char *n1_in[2] = {"h", "b"}, *n1_out[1] = {"z"};
    const char *n2_in[1] = {"z"}, *n2_out[1] = {"r"};
    const char *n3_in[1] = {"r"}, *n3_out[1] = {"y"};
    KN_TRY(kiln_network_create(&net));
    kiln_status st = kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, xd, NULL);
    if (!st) st = kiln_network_add_constant(net, "w", KILN_DTYPE_FLOAT, 2, wd, w, sizeof w);
    if (!st) st = kiln_network_add_constant(net, "b", KILN_DTYPE_FLOAT, 1, bd, b, sizeof b);
    if (!st) st = kiln_network_add_node(net, "mm", "MatMul", "", 17, 2, n0_in, 1, n0_out, NULL);
    if (!st) st = kiln_network_add_node(net, "add", "Add", "", 17, 2, n1_in, 1, n1_out, NULL);
    if (!st) st = kiln_network_add_node(net, "relu", "Relu", "", 17, 1, n2_in, 1, n2_out, NULL);
    if (!st) st = kiln_network_add_node(net, "sm", "Softmax", "", 17, 1, n3_in, 1, n3_out, NULL);
    if (!st) st = kiln_network_mark_output(net, "y");
    if (st) {
        kiln_network_destroy(net);
        return st;
    }
    *out = net;
    return KILN_OK;
}

static const char *g_backend = "cpu";

static kiln_status build(const kiln_network *net, void **plan, size_t *size) {
    kiln_builder_config *cfg = NULL;
    KN_TRY(kiln_builder_config_create(&cfg));
    int p = 0;
    int64_t mn[2] = {1, 4}, op[2] = {2, 4}, mx[2] = {4, 4};
    kiln_status st = kiln_builder_config_set_backend(cfg, g_backend);
    if (!st) st = kiln_builder_config_add_profile(cfg, &p);
    if (!st) st = kiln_builder_config_set_shape(cfg, p, "x", 2, mn, op, mx);
    if (!st) st = kiln_build_serialized(net, cfg, plan, size);
    kiln_builder_config_destroy(cfg);
    return st;
}

/* Inputs and outputs live in engine memory (device memory on a GPU). */
static kiln_status load_run(const void *plan, size_t size, float *y) {
    kiln_engine *eng = NULL;
    kiln_context *ctx = NULL;
    float x[12] = {1, 0, -1, 2, 0.5f, 0.5f, 0.5f, 0.5f, -2, 1, 0, 3};
    int64_t d[2] = {3, 4};
    void *dx = NULL, *dy = NULL;
    KN_TRY(kiln_engine_load(plan, size, &eng));
    kiln_status st = kiln_engine_alloc(eng, sizeof x, &dx);
    if (!st) st = kiln_engine_alloc(eng, sizeof x, &dy);
    if (!st) st = kiln_engine_copy(eng, dx, x, sizeof x, KILN_COPY_TO_DEVICE);
    if (!st) st = kiln_context_create(eng, &ctx);
    if (!st) st = kiln_context_set_input_shape(ctx, "x", 2, d);
    if (!st) st = kiln_context_set_tensor_address(ctx, "x", dx);
    if (!st) st = kiln_context_set_tensor_address(ctx, "y", dy);
    if (!st) st = kiln_context_enqueue(ctx, NULL);
    if (!st) st = kiln_engine_copy(eng, y, dy, sizeof x, KILN_COPY_TO_HOST);
    kiln_context_destroy(ctx);
    kiln_engine_free(eng, dx);
    kiln_engine_free(eng, dy);
    kiln_engine_destroy(eng);
    return st;
}

/* Walk N over every allocation of op(); returns how many N were tried. */
#define WALK(label, call, cleanup)                                                        \
    do {                                                                                  \
        int n_fail = 0, n_tried = 0;                                                      \
        for (uint64_t n = 1; n < 100000; n++) {                                           \
            kn_fault_inject_set(n);                                                       \
            kiln_status st_ = (call);                                                     \
            uint64_t made = kn_fault_inject_set(0);                                       \
            n_tried++;                                                                    \
            if (st_ == KILN_OK) {                                                         \
                cleanup;                                                                  \
                if (made < n)                                                             \
                    break; /* the fault was never reached: all allocations walked */     \
            } else if (st_ != KILN_ERR_OUT_OF_MEMORY) {                                   \
                n_fail++;                                                                 \
                fprintf(stderr, "%s: allocation %llu failed -> %s: %s\n", label,          \
                        (unsigned long long)n, kiln_status_name(st_), kiln_last_error()); \
            }                                                                             \
        }                                                                                 \
        printf("%s: walked %d allocation failures\n", label, n_tried);                    \
        KT_CHECK(n_fail == 0);                                                            \
        KT_CHECK(n_tried > 10);                                                           \
    } while (0)

int main(void) {
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    kiln_network *net = NULL;
    KT_OK(make_net(&net));
    if (!net)
        return kt_finish();
    void *plan = NULL;
    size_t size = 0;
    KT_OK(build(net, &plan, &size));
    float want[12] = {0}, y[12];
    KT_OK(load_run(plan, size, want));

    void *p2 = NULL;
    size_t s2 = 0;
    WALK("build", build(net, &p2, &s2), (kiln_free(p2), p2 = NULL));
    WALK("load+run", load_run(plan, size, y), (void)0);
    /* after all that, the same objects still work and give the same answer */
    KT_OK(load_run(plan, size, y));
    KT_CHECK(memcmp(y, want, sizeof y) == 0);

    kiln_network *parsed = NULL;
    const char *model = "/usr/share/libonnx-testdata/data/node/test_softmax_axis_1/model.onnx";
    FILE *f = fopen(model, "rb");
    if (f) {
        fclose(f);
        WALK("parse", kiln_onnx_parse_file(model, &parsed),
             (kiln_network_destroy(parsed), parsed = NULL));
    } else {
        printf("parse walk skipped: %s not found\n", model);
    }
    kiln_free(plan);
    plan = NULL;

    /* the same walks on the CUDA backend, where device allocations count too */
    char target[64], libs[128];
    if (kiln_backend_describe("cuda", target, sizeof target, libs, sizeof libs) == KILN_OK) {
        g_backend = "cuda";
        KT_OK(build(net, &plan, &size));
        float want_gpu[12];
        KT_OK(load_run(plan, size, want_gpu));
        for (int i = 0; i < 12; i++)
            KT_NEAR(want_gpu[i], want[i], 1e-5);
        WALK("build (cuda)", build(net, &p2, &s2), (kiln_free(p2), p2 = NULL));
        WALK("load+run (cuda)", load_run(plan, size, y), (void)0);
        KT_OK(load_run(plan, size, y));
        KT_CHECK(memcmp(y, want_gpu, sizeof y) == 0);
        kiln_free(plan);
    } else {
        printf("cuda walks skipped: %s\n", kiln_last_error());
    }
    kiln_network_destroy(net);
    return kt_finish();
}
