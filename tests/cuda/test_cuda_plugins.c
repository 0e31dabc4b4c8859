/* test_cuda_plugins.c - the example plugins' CUDA kernels against their CPU
 * kernels: a small network per plugin and type, built once for the cpu
 * backend and once for the cuda backend, run on the same random inputs
 * (several shapes inside one profile; BEVPool with a different number of
 * points and intervals each run), the device outputs poisoned before every
 * run, and compared element by element: |got - want| <= tol * (1 + |want|),
 * tol 1e-5 for float32 and 1e-2 for float16.
 *
 * Networks:  x -> CustomAct(alpha 0.8) -> Add(., x) -> y   (the Add is a
 *            built-in CUDA kernel reading the plugin's output)
 *            BEVPool(depth, feat, ranks..., intervals) -> bev
 *
 * The plugin libraries are read from argv[1], else $KILN_TEST_PLUGIN_DIR,
 * else the build's plugins folder. Without a CUDA device it prints
 * "skipped: ..." and exits 77, which ctest reports as skipped.
 * The inputs come from a fixed seed, printed; KILN_TEST_SEED=N repeats
 * another run, KILN_TEST_SEED=time draws one from the clock. KILN_TEST_DRY=1 builds the second engine
 * for the cpu backend too (no device needed): it checks the networks, the
 * inputs and the comparison, not the CUDA kernels. */
#include "test.h"

#include <stdint.h>
#include <time.h>

#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_plugin.h"
#include "kiln/kiln_runtime.h"
#include "plugin/plugin.h"

#ifndef KT_PLUGIN_DIR
#define KT_PLUGIN_DIR "plugins"
#endif

/* ---------------- random numbers ---------------- */

static uint64_t rng_state;

static double rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static int64_t rnd_int(int64_t n) { /* 0 .. n-1 */
    int64_t v = (int64_t)(rnd() * (double)n);
    return v < n ? v : n - 1;
}

/* ---------------- tensors of one run ---------------- */

typedef struct tdata {
    const char *name;
    kiln_dtype dt;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    void *host;
    size_t bytes;
} tdata;

static size_t numel(const tdata *t) {
    size_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= (size_t)t->dims[i];
    return n;
}

static void td_alloc(tdata *t, const char *name, kiln_dtype dt, int rank, const int64_t *dims) {
    t->name = name;
    t->dt = dt;
    t->rank = rank;
    memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
    t->bytes = numel(t) * kiln_dtype_size(dt);
    t->host = calloc(1, t->bytes ? t->bytes : 1);
}

static void td_set_real(tdata *t, size_t i, double v) {
    if (t->dt == KILN_DTYPE_FLOAT16)
        ((uint16_t *)t->host)[i] = kiln_float_to_half((float)v);
    else
        ((float *)t->host)[i] = (float)v;
}

static double td_real(kiln_dtype dt, const void *p, size_t i) {
    return dt == KILN_DTYPE_FLOAT16 ? kiln_half_to_float(((const uint16_t *)p)[i])
                                    : ((const float *)p)[i];
}

/* ---------------- build and run ---------------- */

typedef struct profile_in {
    const char *name;
    int rank;
    int64_t min[KILN_MAX_DIMS], max[KILN_MAX_DIMS];
} profile_in;

static kiln_status build(kiln_network *net, const char *backend, const profile_in *pr, int n_pr,
                         void **plan, size_t *size) {
    kiln_builder_config *cfg = NULL;
    kiln_status st = kiln_builder_config_create(&cfg);
    int prof = 0;
    if (st == KILN_OK)
        st = kiln_builder_config_set_backend(cfg, backend);
    if (st == KILN_OK)
        st = kiln_builder_config_add_profile(cfg, &prof);
    if (cfg)
        kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_NO_TIMING);
    for (int i = 0; i < n_pr && st == KILN_OK; i++)
        st = kiln_builder_config_set_shape(cfg, prof, pr[i].name, pr[i].rank, pr[i].min,
                                           pr[i].max, pr[i].max);
    if (st == KILN_OK)
        st = kiln_build_serialized(net, cfg, plan, size);
    kiln_builder_config_destroy(cfg);
    return st;
}

typedef struct engines {
    kiln_engine *cpu, *cuda;
    kiln_context *cpu_ctx, *cuda_ctx;
} engines;

static const char *second_backend = "cuda";

static bool engines_make(kiln_network *net, const profile_in *pr, int n_pr, engines *e) {
    memset(e, 0, sizeof *e);
    const char *names[2] = {"cpu", second_backend};
    kiln_engine **eng[2] = {&e->cpu, &e->cuda};
    kiln_context **ctx[2] = {&e->cpu_ctx, &e->cuda_ctx};
    for (int b = 0; b < 2; b++) {
        void *plan = NULL;
        size_t size = 0;
        kiln_status st = build(net, names[b], pr, n_pr, &plan, &size);
        KT_OK(st);
        if (st != KILN_OK)
            return false;
        KT_OK(kiln_engine_load(plan, size, eng[b]));
        kiln_free(plan);
        if (!*eng[b])
            return false;
        KT_CHECK(strcmp(kiln_engine_backend(*eng[b]), names[b]) == 0);
        KT_OK(kiln_context_create(*eng[b], ctx[b]));
        if (!*ctx[b])
            return false;
    }
    /* the plugin layer runs through the adapter on both */
    bool found = false;
    for (int l = 0; l < kiln_engine_num_layers(e->cuda); l++)
        found |= strcmp(kiln_engine_layer_tactic(e->cuda, l), "plugin") == 0;
    KT_CHECK(found);
    return true;
}

static void engines_free(engines *e) {
    kiln_context_destroy(e->cpu_ctx);
    kiln_context_destroy(e->cuda_ctx);
    kiln_engine_destroy(e->cpu);
    kiln_engine_destroy(e->cuda);
}

static int n_runs, n_compared;

/* Run both engines on `in`, compare output `out` (its dims and type set by
 * the caller; host memory allocated here). */
static void run_compare(engines *e, tdata *in, int n_in, tdata *out, double tol,
                        const char *label) {
    kiln_status st = KILN_OK;
    void *dev[16] = {0}, *dev_out = NULL;
    void *cpu_out = calloc(1, out->bytes ? out->bytes : 1);
    void *gpu_out = malloc(out->bytes ? out->bytes : 1);
    for (int i = 0; i < n_in; i++) {
        KT_OK(kiln_context_set_input_shape(e->cpu_ctx, in[i].name, in[i].rank, in[i].dims));
        KT_OK(kiln_context_set_tensor_address(e->cpu_ctx, in[i].name, in[i].host));
        KT_OK(kiln_context_set_input_shape(e->cuda_ctx, in[i].name, in[i].rank, in[i].dims));
        KT_OK(st = kiln_engine_alloc(e->cuda, in[i].bytes ? in[i].bytes : 4, &dev[i]));
        if (st != KILN_OK)
            goto done;
        KT_OK(kiln_engine_copy(e->cuda, dev[i], in[i].host, in[i].bytes, KILN_COPY_TO_DEVICE));
        KT_OK(kiln_context_set_tensor_address(e->cuda_ctx, in[i].name, dev[i]));
    }
    KT_OK(kiln_context_set_tensor_address(e->cpu_ctx, out->name, cpu_out));
    KT_OK(st = kiln_engine_alloc(e->cuda, out->bytes ? out->bytes : 4, &dev_out));
    if (st != KILN_OK)
        goto done;
    memset(gpu_out, 0xff, out->bytes); /* NaN poison: every element must be written */
    KT_OK(kiln_engine_copy(e->cuda, dev_out, gpu_out, out->bytes, KILN_COPY_TO_DEVICE));
    KT_OK(kiln_context_set_tensor_address(e->cuda_ctx, out->name, dev_out));
    KT_OK(kiln_context_enqueue(e->cpu_ctx, NULL));
    KT_OK(st = kiln_context_enqueue(e->cuda_ctx, NULL));
    KT_OK(kiln_context_synchronize(e->cuda_ctx, NULL));
    if (st != KILN_OK)
        goto done;
    KT_OK(kiln_engine_copy(e->cuda, gpu_out, dev_out, out->bytes, KILN_COPY_TO_HOST));
    int64_t dims[KILN_MAX_DIMS];
    int rank = kiln_context_tensor_shape(e->cuda_ctx, out->name, dims);
    KT_CHECK(rank == out->rank);
    for (int d = 0; d < rank && d < out->rank; d++)
        KT_CHECK(dims[d] == out->dims[d]);
    size_t n = numel(out), bad = 0, worst_i = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double want = td_real(out->dt, cpu_out, i), got = td_real(out->dt, gpu_out, i);
        double err = fabs(got - want) / (1.0 + fabs(want));
        if (!(err <= tol))
            bad++;
        if (!(err <= worst)) {
            worst = isnan(err) ? INFINITY : err;
            worst_i = i;
        }
    }
    if (bad)
        fprintf(stderr, "%s: %zu of %zu elements off, worst %g at %zu (cpu %g, cuda %g), tol %g\n",
                label, bad, n, worst, worst_i, td_real(out->dt, cpu_out, worst_i),
                td_real(out->dt, gpu_out, worst_i), tol);
    else
        printf("  %-44s %8zu elements, worst error %.3g (tol %g)\n", label, n, worst, tol);
    KT_CHECK(bad == 0);
    n_runs++;
    n_compared += (int)n;
done:
    for (int i = 0; i < n_in; i++)
        if (dev[i])
            kiln_engine_free(e->cuda, dev[i]);
    if (dev_out)
        kiln_engine_free(e->cuda, dev_out);
    free(cpu_out);
    free(gpu_out);
}

/* Turn the hand-built nodes that name plugins into plugin nodes (the ONNX
 * reader does this for files). */
static bool import_plugins(kiln_network *net) {
    kiln_status st = kpl_import((kn_net *)net, false, true);
    KT_OK(st);
    return st == KILN_OK;
}

/* ---------------- CustomAct ---------------- */

static void test_custom_act(kiln_dtype dt) {
    const char *tname = dt == KILN_DTYPE_FLOAT16 ? "float16" : "float32";
    double tol = dt == KILN_DTYPE_FLOAT16 ? 1e-2 : 1e-5;
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    if (!net)
        return;
    int64_t dyn[2] = {-1, -1};
    int node = -1;
    const char *ins[1] = {"x"}, *outs[1] = {"a"}, *add_in[2] = {"a", "x"}, *add_out[1] = {"y"};
    KT_OK(kiln_network_add_input(net, "x", dt, 2, dyn, NULL));
    KT_OK(kiln_network_add_node(net, "act", "CustomAct", "kiln.plugins", 1, 1, ins, 1, outs,
                                &node));
    KT_OK(kiln_network_set_attr_float(net, node, "alpha", 0.8f));
    KT_OK(kiln_network_add_node(net, "residual", "Add", "", 17, 2, add_in, 1, add_out, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    engines e;
    memset(&e, 0, sizeof e);
    profile_in pr = {"x", 2, {1, 1}, {512, 4096}};
    if (import_plugins(net) && engines_make(net, &pr, 1, &e)) {
        static const int64_t shapes[][2] = {{2, 5}, {3, 17}, {1, 1}, {64, 1000}, {512, 4096}};
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            tdata x, y;
            td_alloc(&x, "x", dt, 2, shapes[s]);
            td_alloc(&y, "y", dt, 2, shapes[s]);
            for (size_t i = 0; i < numel(&x); i++)
                td_set_real(&x, i, (rnd() * 2 - 1) * 6); /* through both tails of tanh */
            char label[128];
            snprintf(label, sizeof label, "CustomAct %s [%lld, %lld]", tname,
                     (long long)shapes[s][0], (long long)shapes[s][1]);
            run_compare(&e, &x, 1, &y, tol, label);
            free(x.host);
            free(y.host);
        }
    }
    engines_free(&e);
    kiln_network_destroy(net);
}

/* ---------------- BEVPool ---------------- */

enum { BN = 2, BD = 4, BH = 3, BW = 5, BC = 24, BEV_H = 16, BEV_W = 12 };

typedef struct point {
    int32_t rd, rf, rb;
    int64_t order;
} point;

static int by_cell(const void *a, const void *b) {
    const point *p = a, *q = b;
    if (p->rb != q->rb)
        return p->rb < q->rb ? -1 : 1;
    return p->order < q->order ? -1 : p->order > q->order;
}

/* Inputs for B batches and P points, sorted by cell, one interval per cell
 * (as bev_pool_v2's preprocessing gives them). */
static void bev_inputs(kiln_dtype dt, int64_t B, int64_t P, tdata in[7]) {
    int64_t ddims[5] = {B, BN, BD, BH, BW}, fdims[5] = {B, BN, BH, BW, BC};
    td_alloc(&in[0], "depth", dt, 5, ddims);
    td_alloc(&in[1], "feat", dt, 5, fdims);
    for (size_t i = 0; i < numel(&in[0]); i++)
        td_set_real(&in[0], i, rnd());
    for (size_t i = 0; i < numel(&in[1]); i++)
        td_set_real(&in[1], i, rnd() * 4 - 2);
    point *pts = calloc((size_t)P, sizeof *pts);
    for (int64_t p = 0; p < P; p++) {
        int64_t b = rnd_int(B), n = rnd_int(BN), d = rnd_int(BD), pix = rnd_int(BH * BW);
        pts[p].rd = (int32_t)(((b * BN + n) * BD + d) * BH * BW + pix);
        pts[p].rf = (int32_t)((b * BN + n) * BH * BW + pix);
        /* a few busy cells so some intervals are long */
        int64_t cell = rnd() < 0.3 ? rnd_int(4) : rnd_int(BEV_H * BEV_W);
        pts[p].rb = (int32_t)(b * BEV_H * BEV_W + cell);
        pts[p].order = p;
    }
    qsort(pts, (size_t)P, sizeof *pts, by_cell);
    int64_t K = 0;
    for (int64_t p = 0; p < P; p++)
        K += p == 0 || pts[p].rb != pts[p - 1].rb;
    int64_t pd[1] = {P}, kd[1] = {K};
    const char *names[5] = {"ranks_depth", "ranks_feat", "ranks_bev", "interval_starts",
                            "interval_lengths"};
    for (int i = 0; i < 5; i++)
        td_alloc(&in[2 + i], names[i], KILN_DTYPE_INT32, 1, i < 3 ? pd : kd);
    int32_t *rd = in[2].host, *rf = in[3].host, *rb = in[4].host, *st = in[5].host,
            *len = in[6].host;
    int64_t k = -1;
    for (int64_t p = 0; p < P; p++) {
        rd[p] = pts[p].rd;
        rf[p] = pts[p].rf;
        rb[p] = pts[p].rb;
        if (p == 0 || pts[p].rb != pts[p - 1].rb) {
            st[++k] = (int32_t)p;
            len[k] = 0;
        }
        len[k]++;
    }
    free(pts);
}

static void test_bev_pool(kiln_dtype dt) {
    const char *tname = dt == KILN_DTYPE_FLOAT16 ? "float16" : "float32";
    double tol = dt == KILN_DTYPE_FLOAT16 ? 1e-2 : 1e-5;
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    if (!net)
        return;
    int64_t ddims[5] = {-1, BN, BD, BH, BW}, fdims[5] = {-1, BN, BH, BW, BC}, p1[1] = {-1};
    const char *ins[7] = {"depth", "feat", "ranks_depth", "ranks_feat", "ranks_bev",
                          "interval_starts", "interval_lengths"};
    const char *outs[1] = {"bev"};
    KT_OK(kiln_network_add_input(net, "depth", dt, 5, ddims, NULL));
    KT_OK(kiln_network_add_input(net, "feat", dt, 5, fdims, NULL));
    for (int i = 2; i < 7; i++)
        KT_OK(kiln_network_add_input(net, ins[i], KILN_DTYPE_INT32, 1, p1, NULL));
    int node = -1;
    KT_OK(kiln_network_add_node(net, "bev_pool", "BEVPool", "kiln.plugins", 1, 7, ins, 1, outs,
                                &node));
    KT_OK(kiln_network_set_attr_int(net, node, "bev_h", BEV_H));
    KT_OK(kiln_network_set_attr_int(net, node, "bev_w", BEV_W));
    KT_OK(kiln_network_mark_output(net, "bev"));
    const int64_t max_p = 20000;
    profile_in pr[7] = {
        {"depth", 5, {1, BN, BD, BH, BW}, {2, BN, BD, BH, BW}},
        {"feat", 5, {1, BN, BH, BW, BC}, {2, BN, BH, BW, BC}},
    };
    for (int i = 2; i < 7; i++) {
        pr[i].name = ins[i];
        pr[i].rank = 1;
        pr[i].min[0] = 1;
        pr[i].max[0] = max_p;
    }
    engines e;
    memset(&e, 0, sizeof e);
    if (import_plugins(net) && engines_make(net, pr, 7, &e)) {
        static const int64_t runs[][2] = {{1, 1}, {1, 37}, {2, 500}, {2, 3000}, {1, 20000},
                                          {2, 7}};
        for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
            tdata in[7], out;
            bev_inputs(dt, runs[r][0], runs[r][1], in);
            int64_t odims[4] = {runs[r][0], BC, BEV_H, BEV_W};
            td_alloc(&out, "bev", dt, 4, odims);
            char label[128];
            snprintf(label, sizeof label, "BEVPool %s B=%lld P=%lld K=%lld", tname,
                     (long long)runs[r][0], (long long)runs[r][1], (long long)in[5].dims[0]);
            run_compare(&e, in, 7, &out, tol, label);
            for (int i = 0; i < 7; i++)
                free(in[i].host);
            free(out.host);
        }
    }
    engines_free(&e);
    kiln_network_destroy(net);
}

int main(int argc, char **argv) {
    char target[64] = "", libs[256] = "";
    const char *dry = getenv("KILN_TEST_DRY");
    if (dry && strcmp(dry, "1") == 0)
        second_backend = "cpu";
    if (kiln_backend_describe(second_backend, target, sizeof target, libs, sizeof libs) !=
        KILN_OK) {
        printf("skipped: no CUDA device (%s)\n", kiln_last_error());
        return 77;
    }
    const char *env = getenv("KILN_TEST_PLUGIN_DIR");
    const char *dir = argc > 1 ? argv[1] : env && env[0] ? env : KT_PLUGIN_DIR;
    printf("%s target %s (%s), plugins from %s\n", second_backend, target, libs, dir);
    rng_state = kt_seed("test_cuda_plugins", 20261202u);
    char path[1024];
    kiln_plugin_library *act = NULL, *bev = NULL;
    snprintf(path, sizeof path, "%s/libkiln_plugin_custom_act.so", dir);
    KT_OK(kiln_plugin_load_library(path, NULL, &act));
    snprintf(path, sizeof path, "%s/libkiln_plugin_bev_pool.so", dir);
    KT_OK(kiln_plugin_load_library(path, NULL, &bev));
    if (act && bev) {
        test_custom_act(KILN_DTYPE_FLOAT);
        test_custom_act(KILN_DTYPE_FLOAT16);
        test_bev_pool(KILN_DTYPE_FLOAT);
        test_bev_pool(KILN_DTYPE_FLOAT16);
    }
    if (act)
        KT_OK(kiln_plugin_deregister_library(act));
    if (bev)
        KT_OK(kiln_plugin_deregister_library(bev));
    printf("%d runs compared, %d elements\n", n_runs, n_compared);
    return kt_finish();
}
