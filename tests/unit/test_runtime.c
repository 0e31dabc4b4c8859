/* test_runtime.c - builder + runtime through the public API: profiles and
 * dynamic batch, shape errors, missing addresses, plan files, data-dependent
 * outputs (and whether output shapes are known before a run), input/output
 * types, several contexts on one engine in parallel threads, and streams and
 * events. */
#include <pthread.h>
#include <unistd.h>

#include "core/core.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

/* y = Relu(x @ W + b), x: [batch, 4], W: [4, 3], b: [3] */
static const float W[12] = {0.5f, -1.f, 2.f, 1.f, 0.25f, -0.5f, -1.5f, 1.f, 0.f, 0.75f, 0.5f, 1.f};
static const float B[3] = {0.1f, -0.2f, 0.3f};

static kiln_network *make_mlp(void) {
    kiln_network *net = NULL;
    if (kiln_network_create(&net) != KILN_OK)
        return NULL;
    int64_t xd[2] = {-1, 4}, wd[2] = {4, 3}, bd[1] = {3};
    const char *names[2] = {"batch", NULL};
    const char *mm_in[2] = {"x", "W"}, *mm_out[1] = {"xw"};
    const char *add_in[2] = {"xw", "b"}, *add_out[1] = {"z"};
    const char *relu_in[1] = {"z"}, *relu_out[1] = {"y"};
    if (kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, xd, names) ||
        kiln_network_add_constant(net, "W", KILN_DTYPE_FLOAT, 2, wd, W, sizeof W) ||
        kiln_network_add_constant(net, "b", KILN_DTYPE_FLOAT, 1, bd, B, sizeof B) ||
        kiln_network_add_node(net, "mm", "MatMul", "", 17, 2, mm_in, 1, mm_out, NULL) ||
        kiln_network_add_node(net, "add", "Add", "", 17, 2, add_in, 1, add_out, NULL) ||
        kiln_network_add_node(net, "relu", "Relu", "", 17, 1, relu_in, 1, relu_out, NULL) ||
        kiln_network_mark_output(net, "y")) {
        kiln_network_destroy(net);
        return NULL;
    }
    return net;
}

static void mlp_ref(const float *x, int batch, float *y) {
    for (int r = 0; r < batch; r++)
        for (int c = 0; c < 3; c++) {
            float s = B[c];
            for (int k = 0; k < 4; k++)
                s += x[r * 4 + k] * W[k * 3 + c];
            y[r * 3 + c] = s > 0 ? s : 0;
        }
}

static kiln_status build_mlp(void **plan, size_t *size) {
    kiln_network *net = make_mlp();
    kiln_builder_config *cfg = NULL;
    if (!net)
        return KILN_ERR_INTERNAL;
    kiln_status st = kiln_builder_config_create(&cfg);
    int p = 0;
    int64_t mn[2] = {1, 4}, op[2] = {2, 4}, mx[2] = {8, 4};
    if (st == KILN_OK)
        st = kiln_builder_config_add_profile(cfg, &p);
    if (st == KILN_OK)
        st = kiln_builder_config_set_shape(cfg, p, "x", 2, mn, op, mx);
    if (st == KILN_OK)
        st = kiln_build_serialized(net, cfg, plan, size);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return st;
}

static int run_check(kiln_context *ctx, int batch, unsigned seed) {
    float x[8 * 4], y[8 * 3], want[8 * 3];
    for (int i = 0; i < batch * 4; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((seed >> 16) % 2000) / 500.f - 2.f;
    }
    mlp_ref(x, batch, want);
    int64_t dims[2] = {batch, 4};
    if (kiln_context_set_input_shape(ctx, "x", 2, dims) != KILN_OK ||
        kiln_context_set_tensor_address(ctx, "x", x) != KILN_OK ||
        kiln_context_set_tensor_address(ctx, "y", y) != KILN_OK ||
        kiln_context_enqueue(ctx, NULL) != KILN_OK)
        return 0;
    for (int i = 0; i < batch * 3; i++)
        if (fabsf(y[i] - want[i]) > 1e-5f)
            return 0;
    return 1;
}

static void test_dynamic_batch(kiln_engine *eng) {
    kiln_context *ctx = NULL;
    KT_OK(kiln_context_create(eng, &ctx));
    KT_CHECK(kiln_engine_num_io_tensors(eng) == 2);
    KT_CHECK(kiln_engine_tensor_io_mode(eng, "x") == KILN_IO_INPUT);
    KT_CHECK(kiln_engine_tensor_io_mode(eng, "y") == KILN_IO_OUTPUT);
    int64_t d[8];
    KT_CHECK(kiln_engine_tensor_shape(eng, "x", d) == 2 && d[0] == -1 && d[1] == 4);
    KT_CHECK(run_check(ctx, 1, 1));
    KT_CHECK(run_check(ctx, 3, 2));
    KT_CHECK(run_check(ctx, 8, 3));
    KT_CHECK(kiln_context_tensor_shape(ctx, "y", d) == 2 && d[0] == 8 && d[1] == 3);
    /* out of profile, wrong rank, static dim mismatch */
    int64_t big[2] = {9, 4}, bad[2] = {2, 5}, r3[3] = {1, 4, 1};
    KT_FAILS(kiln_context_set_input_shape(ctx, "x", 2, big), KILN_ERR_SHAPE,
             "outside optimization profile 0");
    KT_FAILS(kiln_context_set_input_shape(ctx, "x", 2, bad), KILN_ERR_SHAPE, "input 'x'");
    KT_FAILS(kiln_context_set_input_shape(ctx, "x", 3, r3), KILN_ERR_SHAPE, "rank");
    KT_FAILS(kiln_context_set_input_shape(ctx, "nope", 2, bad), KILN_ERR_NOT_FOUND, "'nope'");
    kiln_context_destroy(ctx);

    /* an input with no address */
    KT_OK(kiln_context_create(eng, &ctx));
    int64_t two[2] = {2, 4};
    KT_OK(kiln_context_set_input_shape(ctx, "x", 2, two));
    KT_FAILS(kiln_context_enqueue(ctx, NULL), KILN_ERR_INVALID_ARGUMENT,
             "input 'x' has no address bound");
    kiln_context_destroy(ctx);
}

typedef struct worker {
    kiln_engine *eng;
    int ok;
    unsigned seed;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    kiln_context *ctx = NULL;
    w->ok = kiln_context_create(w->eng, &ctx) == KILN_OK;
    for (int it = 0; w->ok && it < 200; it++)
        w->ok = run_check(ctx, 1 + (int)((w->seed + (unsigned)it) % 8), w->seed * 7919u + (unsigned)it);
    kiln_context_destroy(ctx);
    return NULL;
}

static void test_threads(kiln_engine *eng) {
    pthread_t th[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i].eng = eng;
        w[i].ok = 0;
        w[i].seed = (unsigned)i + 1;
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        KT_CHECK(w[i].ok);
    }
}

/* Streams, asynchronous copies and events through the public API: on the
 * CPU a stream is NULL, a copy happens at once and an event holds the
 * host's time. */
static void test_streams_events(kiln_engine *eng) {
    void *stream = (void *)1;
    KT_OK(kiln_engine_stream_create(eng, &stream));
    KT_CHECK(stream == NULL);
    kiln_engine_stream_destroy(eng, stream);
    KT_FAILS(kiln_engine_stream_create(eng, NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
    float src[4] = {1.f, 2.f, 3.f, 4.f}, dst[4] = {0};
    KT_OK(kiln_engine_copy_async(eng, dst, src, sizeof src, KILN_COPY_TO_DEVICE, stream));
    KT_CHECK(dst[3] == 4.f);
    KT_FAILS(kiln_engine_copy_async(eng, NULL, src, 4, KILN_COPY_TO_HOST, NULL),
             KILN_ERR_INVALID_ARGUMENT, "NULL");
    KT_FAILS(kiln_engine_copy_async(eng, dst, src, 4, (kiln_copy_direction)7, NULL),
             KILN_ERR_INVALID_ARGUMENT, "direction");
    kiln_event *a = NULL, *b = NULL;
    KT_OK(kiln_event_create(eng, &a));
    KT_OK(kiln_event_create(eng, &b));
    KT_FAILS(kiln_event_create(eng, NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
    double ms = -1;
    /* never recorded: a clear error, not a time */
    KT_CHECK(kiln_event_done(a) == -1 && strstr(kiln_last_error(), "never recorded"));
    KT_FAILS(kiln_event_synchronize(a), KILN_ERR_INVALID_ARGUMENT, "never recorded");
    KT_FAILS(kiln_event_elapsed_ms(a, b, &ms), KILN_ERR_INVALID_ARGUMENT, "never recorded");
    KT_OK(kiln_event_record(a, stream));
    usleep(2000);
    KT_OK(kiln_event_record(b, stream));
    KT_CHECK(kiln_event_done(b) == 1);
    KT_OK(kiln_event_synchronize(b));
    KT_OK(kiln_event_elapsed_ms(a, b, &ms));
    KT_CHECK(ms >= 1.5 && ms < 1000);
    KT_OK(kiln_event_elapsed_ms(b, a, &ms));
    KT_CHECK(ms <= -1.5);
    KT_FAILS(kiln_event_elapsed_ms(a, b, NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
    KT_FAILS(kiln_event_record(NULL, NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
    KT_CHECK(kiln_event_done(NULL) == -1);
    kiln_event_destroy(a);
    kiln_event_destroy(b);
    kiln_event_destroy(NULL);
}

static void test_plan_file(const void *plan, size_t size) {
    char path[] = "/tmp/kiln_test_plan_XXXXXX";
    int fd = mkstemp(path);
    KT_CHECK(fd >= 0);
    if (fd < 0)
        return;
    KT_CHECK(write(fd, plan, size) == (ssize_t)size);
    close(fd);
    kiln_engine *eng = NULL;
    KT_OK(kiln_engine_load_file(path, &eng));
    if (eng) {
        kiln_context *ctx = NULL;
        KT_OK(kiln_context_create(eng, &ctx));
        KT_CHECK(ctx && run_check(ctx, 5, 9));
        kiln_context_destroy(ctx);
        kiln_engine_destroy(eng);
    }
    unlink(path);
    kiln_plan_info info;
    KT_OK(kiln_plan_read_info(plan, size < 256 ? size : 256, &info));
    KT_CHECK(strcmp(info.backend, "cpu") == 0);
    KT_CHECK(info.kiln_version == KILN_VERSION_NUMBER);
    /* damaged plans never load */
    kiln_engine *bad = NULL;
    KT_CHECK(kiln_engine_load(plan, size / 2, &bad) != KILN_OK && bad == NULL);
    unsigned char *copy = malloc(size);
    memcpy(copy, plan, size);
    copy[size / 2] ^= 0x40;
    KT_CHECK(kiln_engine_load(copy, size, &bad) != KILN_OK && bad == NULL);
    memcpy(copy, "NOTAPLAN", 8);
    KT_FAILS(kiln_engine_load(copy, size, &bad), KILN_ERR_PLAN, "not a kiln plan");
    free(copy);
}

static void test_no_profile_and_errors(void) {
    /* dynamic input without a profile: built with 1 for the dynamic dim */
    kiln_network *net = make_mlp();
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    kiln_free(plan);
    /* a profile naming a tensor that is no input */
    int p;
    int64_t mn[2] = {1, 4};
    KT_OK(kiln_builder_config_add_profile(cfg, &p));
    KT_OK(kiln_builder_config_set_shape(cfg, p, "W", 2, mn, mn, mn));
    KT_FAILS(kiln_build_serialized(net, cfg, &plan, &size), KILN_ERR_NOT_FOUND,
             "not an input");
    kiln_builder_config_destroy(cfg);
    /* min > opt */
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_builder_config_add_profile(cfg, &p));
    int64_t a[2] = {4, 4}, b2[2] = {2, 4};
    KT_FAILS(kiln_builder_config_set_shape(cfg, p, "x", 2, a, b2, a), KILN_ERR_SHAPE,
             "min <= opt <= max");
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);

    /* an unknown op is refused naming the node */
    KT_OK(kiln_network_create(&net));
    int64_t d[1] = {4};
    const char *in[1] = {"x"}, *out[1] = {"y"};
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 1, d, NULL));
    KT_OK(kiln_network_add_node(net, "weird", "NoSuchOp", "", 17, 1, in, 1, out, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kiln_builder_config_create(&cfg));
    KT_FAILS(kiln_build_serialized(net, cfg, &plan, &size), KILN_ERR_UNSUPPORTED,
             "node 'weird' (NoSuchOp)");
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
}

/* Two profiles in one plan: each context picks one, and shapes are checked
 * against the profile it picked. */
static void test_two_profiles(void) {
    kiln_network *net = make_mlp();
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    int p0, p1;
    int64_t a[2] = {1, 4}, b[2] = {2, 4}, c[2] = {4, 4}, d[2] = {6, 4}, e[2] = {8, 4};
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_builder_config_add_profile(cfg, &p0));
    KT_OK(kiln_builder_config_set_shape(cfg, p0, "x", 2, a, a, b));
    KT_OK(kiln_builder_config_add_profile(cfg, &p1));
    KT_OK(kiln_builder_config_set_shape(cfg, p1, "x", 2, c, d, e));
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_engine *eng = NULL;
    KT_OK(kiln_engine_load(plan, size, &eng));
    kiln_free(plan);
    if (!eng)
        return;
    KT_CHECK(kiln_engine_num_profiles(eng) == 2);
    int rank = 0;
    int64_t mn[8], op[8], mx[8];
    KT_OK(kiln_engine_profile_shape(eng, 1, "x", &rank, mn, op, mx));
    KT_CHECK(rank == 2 && mn[0] == 4 && op[0] == 6 && mx[0] == 8);
    kiln_context *ctx = NULL;
    KT_OK(kiln_context_create(eng, &ctx));
    KT_CHECK(ctx && run_check(ctx, 2, 11));          /* profile 0 by default */
    KT_OK(kiln_context_set_profile(ctx, 1));
    KT_CHECK(run_check(ctx, 6, 12));
    KT_FAILS(kiln_context_set_input_shape(ctx, "x", 2, b), KILN_ERR_SHAPE,
             "outside optimization profile 1");
    KT_FAILS(kiln_context_set_profile(ctx, 2), KILN_ERR_INVALID_ARGUMENT, "profile 2");
    kiln_context_destroy(ctx);
    kiln_engine_destroy(eng);
}

static char log_seen[4096];
static void capture(void *user, kiln_severity sev, const char *msg) {
    (void)user;
    (void)sev;
    if (strlen(log_seen) + strlen(msg) + 2 < sizeof log_seen) {
        strcat(log_seen, msg);
        strcat(log_seen, "\n");
    }
}

/* A timing cache file: written by the first build, used by the second, and a
 * damaged one is ignored with a warning. */
static void test_timing_cache(void) {
    char path[] = "/tmp/kiln_tcache_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    kiln_network *net = make_mlp();
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_builder_config_set_timing_cache(cfg, path));
    kiln_set_logger(capture, NULL, KILN_LOG_INFO);
    for (int round = 0; round < 3; round++) {
        log_seen[0] = 0;
        if (round == 2) { /* damage the file */
            FILE *f = fopen(path, "w");
            fputs("garbage\n", f);
            fclose(f);
        }
        KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
        kiln_free(plan);
        plan = NULL;
        if (round == 1)
            KT_CHECK(strstr(log_seen, "0 timed") != NULL && strstr(log_seen, "timing cache '") != NULL);
        if (round == 2)
            KT_CHECK(strstr(log_seen, "is damaged at line 1") != NULL);
    }
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    FILE *f = fopen(path, "r");
    char head[64] = {0};
    KT_CHECK(f && fgets(head, sizeof head, f) && strcmp(head, "kiln-timing-cache 1\n") == 0);
    if (f)
        fclose(f);
    unlink(path);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
}

/* A shape-tensor input: reported by kiln_engine_tensor_is_shape_input (it
 * must be bound to host memory on every backend) and read from the bound
 * buffer at run time. */
static void test_shape_input(void) {
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    const char *in[2] = {"x", "shape"}, *out[1] = {"y"};
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, (const int64_t[]){2, 6}, NULL));
    KT_OK(kiln_network_add_input(net, "shape", KILN_DTYPE_INT64, 1, (const int64_t[]){2}, NULL));
    KT_OK(kiln_network_add_node(net, "reshape", "Reshape", "", 17, 2, in, 1, out, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    kiln_builder_config *cfg = NULL;
    int p;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_builder_config_add_profile(cfg, &p));
    const int64_t lo[2] = {3, 4}, hi[2] = {4, 3};
    KT_OK(kiln_builder_config_set_input_values(cfg, p, "shape", KILN_DTYPE_INT64, 2, lo, lo, hi));
    void *plan = NULL;
    size_t size = 0;
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    kiln_engine *e = NULL;
    if (plan)
        KT_OK(kiln_engine_load(plan, size, &e));
    if (e) {
        KT_CHECK(kiln_engine_tensor_is_shape_input(e, "shape") == 1);
        KT_CHECK(kiln_engine_tensor_is_shape_input(e, "x") == 0);
        KT_CHECK(kiln_engine_tensor_is_shape_input(e, "y") == 0);
        KT_CHECK(kiln_engine_tensor_is_shape_input(e, "nope") == 0);
        /* host buffers for I/O: pinned on a GPU engine, aligned memory here */
        void *h = NULL;
        KT_OK(kiln_engine_alloc_host(e, 100, &h));
        KT_CHECK(h && ((uintptr_t)h % 64) == 0);
        if (h)
            memset(h, 1, 100);
        kiln_engine_free_host(e, h);
        kiln_engine_free_host(e, NULL);
        KT_FAILS(kiln_engine_alloc_host(e, 8, NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
        kiln_context *c = NULL;
        KT_OK(kiln_context_create(e, &c));
        float x[12], y[12];
        for (int i = 0; i < 12; i++)
            x[i] = (float)i;
        int64_t dims[2];
        KT_OK(kiln_context_set_tensor_address(c, "x", x));
        KT_OK(kiln_context_set_tensor_address(c, "shape", (void *)hi));
        KT_OK(kiln_context_set_tensor_address(c, "y", y));
        KT_OK(kiln_context_enqueue(c, NULL));
        KT_CHECK(kiln_context_tensor_shape(c, "y", dims) == 2 && dims[0] == 4 && dims[1] == 3);
        KT_CHECK(y[11] == 11.f);
        kiln_context_destroy(c);
        kiln_engine_destroy(e);
    }
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
}

/* The MLP built with the given flags and I/O types (output first: -2 = not
 * set); *err gets the build's status. */
static kiln_engine *mlp_engine(uint32_t flags, kiln_dtype in_type, int in_index, kiln_dtype out_type,
                               kiln_status *err) {
    kiln_network *net = make_mlp();
    kiln_builder_config *cfg = NULL;
    kiln_engine *eng = NULL;
    void *plan = NULL;
    size_t size = 0;
    int p = 0;
    int64_t mn[2] = {1, 4}, op[2] = {2, 4}, mx[2] = {8, 4};
    kiln_status st = net ? kiln_builder_config_create(&cfg) : KILN_ERR_INTERNAL;
    if (st == KILN_OK) {
        kiln_builder_config_set_flags(cfg, flags);
        st = kiln_builder_config_add_profile(cfg, &p);
    }
    if (st == KILN_OK)
        st = kiln_builder_config_set_shape(cfg, p, "x", 2, mn, op, mx);
    if (st == KILN_OK && in_type != KILN_DTYPE_UNDEFINED)
        st = kiln_builder_config_set_io_type(cfg, 0, in_index, in_type);
    if (st == KILN_OK && out_type != KILN_DTYPE_UNDEFINED)
        st = kiln_builder_config_set_io_type(cfg, 1, -1, out_type);
    if (st == KILN_OK)
        st = kiln_build_serialized(net, cfg, &plan, &size);
    if (st == KILN_OK)
        st = kiln_engine_load(plan, size, &eng);
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    *err = st;
    return eng;
}

/* Runs the engine on 3 rows of x (converted to its input type) and returns
 * the largest difference from the FP32 reference, relative to max(1, |y|);
 * -1 when a call fails. */
static double mlp_run_error(kiln_engine *eng) {
    float x[12], want[9], y32[9];
    uint16_t x16[12], y16[9];
    for (int i = 0; i < 12; i++)
        x[i] = (float)((i * 7) % 11) / 4.f - 1.2f;
    kiln_dtype it = kiln_engine_tensor_dtype(eng, "x"), ot = kiln_engine_tensor_dtype(eng, "y");
    for (int i = 0; i < 12; i++) {
        x16[i] = it == KILN_DTYPE_FLOAT16 ? kn_float_to_half(x[i]) : kn_float_to_bf16(x[i]);
        x[i] = it == KILN_DTYPE_FLOAT16   ? kn_half_to_float(x16[i])
               : it == KILN_DTYPE_BFLOAT16 ? kn_bf16_to_float(x16[i])
                                           : x[i]; /* the reference sees what the engine gets */
    }
    mlp_ref(x, 3, want);
    kiln_context *ctx = NULL;
    int64_t dims[2] = {3, 4};
    double worst = -1;
    if (kiln_context_create(eng, &ctx) == KILN_OK &&
        kiln_context_set_input_shape(ctx, "x", 2, dims) == KILN_OK &&
        kiln_context_set_tensor_address(ctx, "x", it == KILN_DTYPE_FLOAT ? (void *)x : (void *)x16) ==
            KILN_OK &&
        kiln_context_set_tensor_address(ctx, "y", ot == KILN_DTYPE_FLOAT ? (void *)y32 : (void *)y16) ==
            KILN_OK &&
        kiln_context_enqueue(ctx, NULL) == KILN_OK) {
        worst = 0;
        for (int i = 0; i < 9; i++) {
            float got = ot == KILN_DTYPE_FLOAT     ? y32[i]
                        : ot == KILN_DTYPE_FLOAT16 ? kn_half_to_float(y16[i])
                                                   : kn_bf16_to_float(y16[i]);
            double d = fabs((double)got - want[i]) / (fabs(want[i]) > 1 ? fabs(want[i]) : 1);
            worst = d > worst ? d : worst;
        }
    }
    kiln_context_destroy(ctx);
    return worst;
}

/* Input/output types (trtexec's --inputIOFormats / --outputIOFormats): the
 * engine reports them, takes and gives data in them, and the numbers match
 * the FP32 reference at the type's precision; bad requests fail naming the
 * tensor. */
static void test_io_types(void) {
    static const struct {
        uint32_t flags;
        kiln_dtype in, out;
        double tol;
    } cases[] = {
        {KILN_BUILDER_FLAG_FP16, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT16, 5e-3},
        {KILN_BUILDER_FLAG_FP16, KILN_DTYPE_UNDEFINED, KILN_DTYPE_FLOAT16, 5e-3},
        {0, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT16, 5e-3},       /* FP32 layers, casts at the edges */
        {0, KILN_DTYPE_BFLOAT16, KILN_DTYPE_BFLOAT16, 3e-2},
        {KILN_BUILDER_FLAG_FP16, KILN_DTYPE_FLOAT, KILN_DTYPE_FLOAT, 5e-3}, /* as declared */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kiln_status st;
        kiln_engine *eng = mlp_engine(cases[c].flags, cases[c].in, 0, cases[c].out, &st);
        KT_OK(st);
        if (!eng)
            continue;
        kiln_dtype want_in = cases[c].in != KILN_DTYPE_UNDEFINED ? cases[c].in : KILN_DTYPE_FLOAT;
        KT_CHECK(kiln_engine_tensor_dtype(eng, "x") == want_in);
        KT_CHECK(kiln_engine_tensor_dtype(eng, "y") == cases[c].out);
        double err = mlp_run_error(eng);
        KT_CHECK(err >= 0 && err <= cases[c].tol);
        if (err < 0 || err > cases[c].tol)
            fprintf(stderr, "  io types case %zu: error %g (tolerance %g)\n", c, err, cases[c].tol);
        kiln_engine_destroy(eng);
    }
    /* bad requests */
    kiln_status st;
    kiln_engine *eng = mlp_engine(0, KILN_DTYPE_INT64, 0, KILN_DTYPE_UNDEFINED, &st);
    KT_CHECK(eng == NULL && st == KILN_ERR_UNSUPPORTED &&
             strstr(kiln_last_error(), "input 'x' is float") != NULL);
    kiln_engine_destroy(eng);
    eng = mlp_engine(0, KILN_DTYPE_FLOAT16, 1, KILN_DTYPE_UNDEFINED, &st);
    KT_CHECK(eng == NULL && st == KILN_ERR_INVALID_ARGUMENT &&
             strstr(kiln_last_error(), "the network has 1 input") != NULL);
    kiln_engine_destroy(eng);
    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_FAILS(kiln_builder_config_set_io_type(cfg, 1, -2, KILN_DTYPE_FLOAT16),
             KILN_ERR_INVALID_ARGUMENT, "index -2");
    KT_FAILS(kiln_builder_config_set_io_type(cfg, 0, 0, KILN_DTYPE_UNDEFINED),
             KILN_ERR_INVALID_ARGUMENT, "not a tensor type");
    kiln_builder_config_destroy(cfg);
}

/* kiln_context_output_shapes_exact: 1 when the shapes before a run are the
 * run's, 0 after a data-dependent layer (NonZero), -1 without input shapes. */
static void test_output_shapes_exact(kiln_engine *mlp) {
    kiln_context *ctx = NULL;
    KT_OK(kiln_context_create(mlp, &ctx));
    KT_CHECK(kiln_context_output_shapes_exact(NULL) == -1);
    KT_CHECK(kiln_context_output_shapes_exact(ctx) == -1); /* the batch is not set */
    int64_t two[2] = {2, 4};
    KT_OK(kiln_context_set_input_shape(ctx, "x", 2, two));
    KT_CHECK(kiln_context_output_shapes_exact(ctx) == 1);
    kiln_context_destroy(ctx);

    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    if (!net)
        return;
    int64_t xd[1] = {6};
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 1, xd, NULL));
    KT_OK(kiln_network_add_node(net, "nz", "NonZero", "", 13, 1, (const char *[]){"x"}, 1,
                                (const char *[]){"idx"}, NULL));
    KT_OK(kiln_network_add_node(net, "count", "Shape", "", 13, 1, (const char *[]){"idx"}, 1,
                                (const char *[]){"y"}, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_engine *eng = NULL;
    if (plan)
        KT_OK(kiln_engine_load(plan, size, &eng));
    kiln_free(plan);
    if (!eng)
        return;
    KT_OK(kiln_context_create(eng, &ctx));
    const float x[6] = {0, 1, 0, 2, 0, 3};
    int64_t y[2] = {0, 0};
    KT_OK(kiln_context_set_tensor_address(ctx, "x", (void *)x));
    KT_CHECK(kiln_context_output_shapes_exact(ctx) == 0); /* Shape of a data-dependent tensor */
    KT_OK(kiln_context_set_tensor_address(ctx, "y", y));
    KT_OK(kiln_context_enqueue(ctx, NULL));
    KT_CHECK(y[0] == 1 && y[1] == 3);
    KT_CHECK(kiln_context_output_shapes_exact(ctx) == 0);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(eng);
}

int main(void) {
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    void *plan = NULL;
    size_t size = 0;
    KT_OK(build_mlp(&plan, &size));
    if (!plan)
        return kt_finish();
    kiln_engine *eng = NULL;
    KT_OK(kiln_engine_load(plan, size, &eng));
    if (eng) {
        test_dynamic_batch(eng);
        test_threads(eng);
        test_streams_events(eng);
        test_output_shapes_exact(eng);
        kiln_engine_destroy(eng);
    }
    test_plan_file(plan, size);
    kiln_free(plan);
    test_no_profile_and_errors();
    test_two_profiles();
    test_timing_cache();
    test_shape_input();
    test_io_types();
    return kt_finish();
}
