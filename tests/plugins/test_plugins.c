/* test_plugins.c - the plugin ABI end to end on the CPU: loading libraries
 * (and every way that fails), duplicates, ONNX custom ops with wrong
 * identities or fields, the builder's checks, plans with plugin records,
 * embedded libraries, and the example plugins against numpy references with
 * dynamic shapes (models from gen_plugin_models.py). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/test.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_plugin.h"
#include "kiln/kiln_runtime.h"
#include "plan/plan.h"
#include "plugin/plugin.h"

#define ACT_LIB KT_PLUGIN_DIR "/libkiln_plugin_custom_act.so"
#define BEV_LIB KT_PLUGIN_DIR "/libkiln_plugin_bev_pool.so"
#define TEST_LIB KT_LIB_DIR "/libkiln_test_plugins.so"

static kiln_plugin_library *act_lib, *bev_lib, *test_lib;

/* ---- model cases ---- */

typedef struct tcase {
    int n;
    struct {
        int out;
        char name[64];
        kiln_dtype dtype;
        int rank;
        int64_t dims[KILN_MAX_DIMS];
        void *data;
        size_t bytes;
    } t[16];
} tcase;

static void case_free(tcase *c) {
    for (int i = 0; i < c->n; i++)
        free(c->t[i].data);
    c->n = 0;
}

static int case_load(const char *model, int i, tcase *c) {
    char path[512];
    snprintf(path, sizeof path, KT_MODEL_DIR "/%s.case%d.txt", model, i);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    memset(c, 0, sizeof *c);
    char kind[8], fn[256];
    int dt;
    while (c->n < 16 && fscanf(f, "%7s %63s %d %d", kind, c->t[c->n].name, &dt, &c->t[c->n].rank) == 4) {
        size_t n = 1;
        for (int d = 0; d < c->t[c->n].rank; d++) {
            long long v;
            if (fscanf(f, "%lld", &v) != 1)
                break;
            c->t[c->n].dims[d] = v;
            n *= (size_t)v;
        }
        if (fscanf(f, "%255s", fn) != 1)
            break;
        c->t[c->n].out = strcmp(kind, "out") == 0;
        c->t[c->n].dtype = (kiln_dtype)dt;
        c->t[c->n].bytes = n * kiln_dtype_size((kiln_dtype)dt);
        c->t[c->n].data = calloc(1, c->t[c->n].bytes + 1);
        snprintf(path, sizeof path, KT_MODEL_DIR "/%s", fn);
        FILE *b = fopen(path, "rb");
        if (b) {
            if (fread(c->t[c->n].data, 1, c->t[c->n].bytes, b) != c->t[c->n].bytes)
                fprintf(stderr, "short read of %s\n", path);
            fclose(b);
        }
        c->n++;
    }
    fclose(f);
    return 1;
}

static double elem(kiln_dtype dt, const void *p, size_t i) {
    if (dt == KILN_DTYPE_FLOAT16)
        return kn_half_to_float(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Build `model` with one profile spanning every case's input shapes. */
static kiln_status build_model(const char *model, uint32_t parse_flags, int n_cases, void **plan,
                               size_t *size) {
    char path[512];
    snprintf(path, sizeof path, KT_MODEL_DIR "/%s.onnx", model);
    kiln_network *net = NULL;
    kiln_status st = kiln_onnx_parse_file_ex(path, parse_flags, &net);
    if (st != KILN_OK)
        return st;
    kiln_builder_config *cfg = NULL;
    st = kiln_builder_config_create(&cfg);
    int prof = 0;
    if (st == KILN_OK)
        st = kiln_builder_config_add_profile(cfg, &prof);
    kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_NO_TIMING);
    tcase c0;
    if (st == KILN_OK && n_cases > 0 && case_load(model, 0, &c0)) {
        for (int t = 0; t < c0.n && st == KILN_OK; t++) {
            if (c0.t[t].out)
                continue;
            int64_t mn[KILN_MAX_DIMS], mx[KILN_MAX_DIMS];
            memcpy(mn, c0.t[t].dims, sizeof mn);
            memcpy(mx, c0.t[t].dims, sizeof mx);
            for (int k = 1; k < n_cases; k++) {
                tcase ck;
                if (!case_load(model, k, &ck))
                    continue;
                for (int d = 0; d < c0.t[t].rank; d++) {
                    if (ck.t[t].dims[d] < mn[d])
                        mn[d] = ck.t[t].dims[d];
                    if (ck.t[t].dims[d] > mx[d])
                        mx[d] = ck.t[t].dims[d];
                }
                case_free(&ck);
            }
            st = kiln_builder_config_set_shape(cfg, prof, c0.t[t].name, c0.t[t].rank, mn, mx, mx);
        }
        case_free(&c0);
    } else if (st == KILN_OK) { /* test models: x is [N, 4] or [N] */
        int64_t mn[2] = {1, 4}, mx[2] = {8, 4};
        const char *in = kiln_network_input_name(net, 0);
        int rank = strcmp(model, "override") == 0 ? 1 : 2;
        if (rank == 1)
            mx[0] = 8;
        st = kiln_builder_config_set_shape(cfg, prof, in, rank, mn, mx, mx);
    }
    if (st == KILN_OK)
        st = kiln_build_serialized(net, cfg, plan, size);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return st;
}

/* Run every case of `model` on the engine and compare with the reference. */
static void run_cases(kiln_engine *eng, const char *model, int n_cases, double tol) {
    kiln_context *ctx = NULL;
    KT_OK(kiln_context_create(eng, &ctx));
    if (!ctx)
        return;
    for (int k = 0; k < n_cases; k++) {
        tcase c;
        if (!case_load(model, k, &c)) {
            KT_CHECK(!"case missing");
            continue;
        }
        for (int t = 0; t < c.n; t++)
            if (!c.t[t].out) {
                KT_OK(kiln_context_set_input_shape(ctx, c.t[t].name, c.t[t].rank, c.t[t].dims));
                KT_OK(kiln_context_set_tensor_address(ctx, c.t[t].name, c.t[t].data));
            }
        void *outs[16] = {0};
        for (int t = 0; t < c.n; t++)
            if (c.t[t].out) {
                outs[t] = calloc(1, c.t[t].bytes + 1);
                KT_OK(kiln_context_set_tensor_address(ctx, c.t[t].name, outs[t]));
            }
        KT_OK(kiln_context_enqueue(ctx, NULL));
        for (int t = 0; t < c.n; t++) {
            if (!c.t[t].out)
                continue;
            int64_t dims[KILN_MAX_DIMS];
            int rank = kiln_context_tensor_shape(ctx, c.t[t].name, dims);
            KT_CHECK(rank == c.t[t].rank);
            for (int d = 0; d < rank && d < c.t[t].rank; d++)
                KT_CHECK(dims[d] == c.t[t].dims[d]);
            size_t n = c.t[t].bytes / kiln_dtype_size(c.t[t].dtype);
            double worst = 0;
            for (size_t i = 0; i < n; i++) {
                double a = elem(c.t[t].dtype, outs[t], i), b = elem(c.t[t].dtype, c.t[t].data, i);
                double e = fabs(a - b) / (1.0 + fabs(b));
                if (!(e <= worst))
                    worst = isnan(e) ? INFINITY : e;
            }
            if (worst > tol)
                fprintf(stderr, "%s case %d output %s: worst error %g > %g\n", model, k,
                        c.t[t].name, worst, tol);
            KT_CHECK(worst <= tol);
            free(outs[t]);
        }
        case_free(&c);
    }
    kiln_context_destroy(ctx);
}

static void test_numeric(const char *model, double tol) {
    void *plan = NULL;
    size_t size = 0;
    KT_OK(build_model(model, 0, 4, &plan, &size));
    if (!plan)
        return;
    kiln_engine *eng = NULL;
    KT_OK(kiln_engine_load(plan, size, &eng));
    if (eng)
        run_cases(eng, model, 4, tol);
    kiln_engine_destroy(eng);
    kiln_free(plan);
}

/* The verbose log shows the plugin's output shapes as the formulas it gave. */
static int saw_formula;
static void capture(void *user, kiln_severity sev, const char *msg) {
    if (strstr(msg, "layer 'bev_pool' (plugin 'BEVPool'): output 0 shape [in0[0], in1[4], 6, 7]"))
        saw_formula = 1;
}

static void test_formula(void) {
    kiln_set_logger(capture, NULL, KILN_LOG_VERBOSE);
    void *plan = NULL;
    size_t size = 0;
    KT_OK(build_model("bev_pool", 0, 4, &plan, &size));
    kiln_free(plan);
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    KT_CHECK(saw_formula);
}

/* ---- loading ---- */

static void test_loading(void) {
    int before = kiln_plugin_count();
    KT_OK(kiln_plugin_load_library(ACT_LIB, NULL, &act_lib));
    KT_OK(kiln_plugin_load_library(BEV_LIB, NULL, &bev_lib));
    KT_OK(kiln_plugin_load_library(TEST_LIB, NULL, &test_lib));
    KT_CHECK(kiln_plugin_count() == before + 5);
    const kiln_plugin_creator *c = kiln_plugin_find("CustomAct", "1", "");
    KT_CHECK(c && c->n_fields == 1 && strcmp(c->fields[0].name, "alpha") == 0);
    KT_CHECK(kiln_plugin_find("CustomAct", NULL, NULL) == c);
    KT_CHECK(kiln_plugin_find("CustomAct", "2", "") == NULL);
    KT_CHECK(kiln_plugin_creator_library(c) == act_lib);
    KT_CHECK(strlen(kiln_plugin_library_sha256(act_lib)) == 64);
    KT_CHECK(strcmp(kiln_plugin_library_path(act_lib), ACT_LIB) == 0);
    const char *src = NULL;
    KT_CHECK(kiln_plugin_at(0, &src) != NULL && src != NULL);
    KT_CHECK(kiln_plugin_at(kiln_plugin_count(), NULL) == NULL);

    /* the same library again: refused, naming both sources, nothing added */
    kiln_plugin_library *again = NULL;
    KT_FAILS(kiln_plugin_load_library(ACT_LIB, NULL, &again), KILN_ERR_PLUGIN,
             "is already registered from");
    KT_CHECK(strstr(kiln_last_error(), "'CustomAct' (version '1', namespace '')") != NULL);
    KT_CHECK(again == NULL && kiln_plugin_count() == before + 5);
    /* a library whose second creator clashes leaves nothing registered: the
     * test library registered three; re-registering any one refuses all */
    KT_FAILS(kiln_plugin_load_library(TEST_LIB, NULL, &again), KILN_ERR_PLUGIN, "FailEnqueue");
    KT_CHECK(kiln_plugin_count() == before + 5);

    /* broken libraries: each says which step failed */
    kiln_plugin_library *bad = NULL;
    KT_FAILS(kiln_plugin_load_library(KT_LIB_DIR "/libkiln_broken_no_entry.so", NULL, &bad),
             KILN_ERR_PLUGIN, "no entry point");
    KT_CHECK(strstr(kiln_last_error(), KILN_PLUGIN_ENTRY_POINT) != NULL);
    KT_FAILS(kiln_plugin_load_library(KT_LIB_DIR "/libkiln_broken_missing_dep.so", NULL, &bad),
             KILN_ERR_PLUGIN, "missing dependency 'libkiln_test_dep.so'");
    KT_FAILS(kiln_plugin_load_library(KT_LIB_DIR "/libkiln_broken_unresolved.so", NULL, &bad),
             KILN_ERR_PLUGIN, "unresolved symbol 'kiln_test_symbol_nobody_defines'");
    KT_FAILS(kiln_plugin_load_library(KT_LIB_DIR "/libkiln_broken_future_abi.so", NULL, &bad),
             KILN_ERR_VERSION, "plugin ABI version 99");
    KT_FAILS(kiln_plugin_load_library(KT_LIB_DIR "/no_such_plugin.so", NULL, &bad), KILN_ERR_IO,
             "no_such_plugin.so");
    KT_CHECK(bad == NULL && kiln_plugin_count() == before + 5);
}

/* Registered in the process (no library): a plugin named like a built-in. */
static kiln_status neg3_enqueue(void *self, const kiln_tensor_desc *in, const void *const *inputs,
                                int32_t n_in, const kiln_tensor_desc *out, void *const *outputs,
                                int32_t n_out, void *ws, void *stream) {
    int64_t n = in[0].dims[0];
    for (int64_t i = 0; i < n; i++)
        ((float *)outputs[0])[i] = 3.0f * ((const float *)inputs[0])[i];
    return KILN_OK;
}
static int32_t one(void *self) { return 1; }
static kiln_status same_dt(void *self, const kiln_dtype *in, int32_t ni, kiln_dtype *out, int32_t no) {
    out[0] = in[0];
    return KILN_OK;
}
static kiln_status same_shape(void *self, const kiln_dims_expr *in, int32_t ni, kiln_dims_expr *out,
                              int32_t no, const kiln_expr_builder *eb) {
    out[0] = in[0];
    return KILN_OK;
}
static kiln_status no_fields(void *self, kiln_field_collection *out) {
    out->count = 0;
    out->fields = NULL;
    return KILN_OK;
}
static kiln_plugin neg3_inst;
static kiln_status neg3_clone(void *self, kiln_plugin **out) {
    *out = &neg3_inst;
    return KILN_OK;
}
static void neg3_destroy(void *self) {}
static const kiln_plugin_core neg3_core = {1, sizeof(kiln_plugin_core), "Neg", "1", ""};
static const kiln_plugin_build neg3_build = {1, sizeof(kiln_plugin_build), one, same_dt,
                                             same_shape, NULL, NULL, NULL};
static const kiln_plugin_runtime neg3_rt = {1, sizeof(kiln_plugin_runtime), NULL, neg3_enqueue,
                                            no_fields, neg3_clone, neg3_destroy};
static kiln_plugin neg3_inst = {1, sizeof(kiln_plugin), NULL, &neg3_core, &neg3_build, &neg3_rt};
static kiln_status neg3_create(void *self, const char *layer, const kiln_field_collection *f,
                               kiln_plugin_phase phase, kiln_plugin **out) {
    *out = &neg3_inst;
    return KILN_OK;
}
static const kiln_plugin_creator neg3 = {1, sizeof(kiln_plugin_creator), "Neg", "1", "", NULL, 0,
                                         NULL, neg3_create};

static void test_override(void) {
    KT_OK(kiln_plugin_register(&neg3, "test_plugins.c"));
    KT_FAILS(kiln_plugin_register(&neg3, "again"), KILN_ERR_PLUGIN, "from test_plugins.c");
    float x[3] = {1, -2, 4}, y[3];
    for (int mode = 0; mode < 2; mode++) {
        void *plan = NULL;
        size_t size = 0;
        KT_OK(build_model("override", mode ? KILN_ONNX_PLUGINS_OVERRIDE_BUILTINS : 0, 0, &plan,
                          &size));
        kiln_engine *eng = NULL;
        kiln_context *ctx = NULL;
        KT_OK(kiln_engine_load(plan, size, &eng));
        KT_OK(kiln_context_create(eng, &ctx));
        int64_t d = 3;
        KT_OK(kiln_context_set_input_shape(ctx, "x", 1, &d));
        KT_OK(kiln_context_set_tensor_address(ctx, "x", x));
        KT_OK(kiln_context_set_tensor_address(ctx, "y", y));
        KT_OK(kiln_context_enqueue(ctx, NULL));
        KT_CHECK(y[1] == (mode ? -6.0f : 2.0f));
        KT_CHECK(strcmp(kiln_engine_layer_op(eng, 0), "Neg") == 0);
        kiln_context_destroy(ctx);
        kiln_engine_destroy(eng);
        kiln_free(plan);
    }
    KT_OK(kiln_plugin_deregister("Neg", "1", ""));
    KT_FAILS(kiln_plugin_deregister("Neg", "1", ""), KILN_ERR_NOT_FOUND, "'Neg'");
}

static void test_bad_nodes(void) {
    kiln_network *net = NULL;
    KT_FAILS(kiln_onnx_parse_file(KT_MODEL_DIR "/custom_act_badns.onnx", &net),
             KILN_ERR_UNSUPPORTED, "namespace 'nope'");
    KT_CHECK(strstr(kiln_last_error(), "registered creators named 'CustomAct': (version '1', "
                                       "namespace ''") != NULL);
    KT_FAILS(kiln_onnx_parse_file(KT_MODEL_DIR "/custom_act_badver.onnx", &net),
             KILN_ERR_UNSUPPORTED, "'CustomAct' (version '2', namespace '')");
    KT_FAILS(kiln_onnx_parse_file(KT_MODEL_DIR "/custom_act_badfield.onnx", &net),
             KILN_ERR_INVALID_ARGUMENT, "attribute 'alpha' of plugin 'CustomAct'");
    KT_CHECK(strstr(kiln_last_error(), "expected float32") && strstr(kiln_last_error(), "node 'act'"));
    KT_FAILS(kiln_onnx_parse_file(KT_MODEL_DIR "/custom_act_unknown.onnx", &net),
             KILN_ERR_INVALID_ARGUMENT, "attribute 'beta' is not a field");
    /* BEVPool's required fields */
    KT_CHECK(net == NULL);
}

static void test_builder_checks(void) {
    void *plan = NULL;
    size_t size = 0;
    KT_FAILS(build_model("unstable", 0, 0, &plan, &size), KILN_ERR_PLUGIN,
             "serialization is not stable");
    KT_CHECK(strstr(kiln_last_error(), "'Unstable' (version '1', namespace '')") &&
             strstr(kiln_last_error(), "field 'generation' differs"));

    /* a failing enqueue: the error names the plugin and the layer */
    KT_OK(build_model("failenqueue", 0, 0, &plan, &size));
    kiln_engine *eng = NULL;
    kiln_context *ctx = NULL;
    KT_OK(kiln_engine_load(plan, size, &eng));
    KT_OK(kiln_context_create(eng, &ctx));
    float x[8] = {0}, y[8];
    int64_t d[2] = {2, 4};
    KT_OK(kiln_context_set_input_shape(ctx, "x", 2, d));
    KT_OK(kiln_context_set_tensor_address(ctx, "x", x));
    KT_OK(kiln_context_set_tensor_address(ctx, "y", y));
    KT_FAILS(kiln_context_enqueue(ctx, NULL), KILN_ERR_PLUGIN,
             "plugin 'FailEnqueue' (version '1', namespace ''), layer 'failenqueue': enqueue "
             "failed: simulated device fault");
    /* the engine holds the library */
    KT_FAILS(kiln_plugin_deregister_library(test_lib), KILN_ERR_PLUGIN, "still used");
    kiln_context_destroy(ctx);
    kiln_engine_destroy(eng);
    kiln_free(plan);

    /* a float16-only plugin between float neighbours: reformat layers */
    KT_OK(build_model("halfonly", 0, 0, &plan, &size));
    KT_OK(kiln_engine_load(plan, size, &eng));
    int reformats = 0;
    for (int i = 0; eng && i < kiln_engine_num_layers(eng); i++)
        reformats += strncmp(kiln_engine_layer_name(eng, i), "reformat ", 9) == 0;
    KT_CHECK(reformats == 2);
    tcase c;
    if (eng && case_load("halfonly", 0, &c)) {
        KT_OK(kiln_context_create(eng, &ctx));
        KT_OK(kiln_context_set_input_shape(ctx, "x", 2, c.t[0].dims));
        KT_OK(kiln_context_set_tensor_address(ctx, "x", c.t[0].data));
        float out[12];
        KT_OK(kiln_context_set_tensor_address(ctx, "y", out));
        KT_OK(kiln_context_enqueue(ctx, NULL));
        for (int i = 0; i < 12; i++)
            KT_NEAR(out[i], ((float *)c.t[1].data)[i], 1e-2);
        kiln_context_destroy(ctx);
        case_free(&c);
    }
    kiln_engine_destroy(eng);
    kiln_free(plan);
}

/* ---- plans ---- */

static void test_plans(void) {
    void *plan = NULL;
    size_t size = 0;
    KT_OK(build_model("custom_act", 0, 4, &plan, &size));
    if (!plan)
        return;
    char *json = NULL;
    KT_OK(kiln_plan_plugins_json(plan, size, &json));
    KT_CHECK(json && strstr(json, "\"name\": \"CustomAct\"") &&
             strstr(json, "libkiln_plugin_custom_act.so") && strstr(json, "\"external\""));
    kiln_free(json);
    /* the process without the plugin: refused before any work */
    KT_OK(kiln_plugin_deregister_library(act_lib));
    act_lib = NULL;
    kiln_engine *eng = NULL;
    KT_FAILS(kiln_engine_load(plan, size, &eng), KILN_ERR_PLUGIN,
             "layer 'act' needs plugin 'CustomAct' (version '1', namespace '') from library "
             "'libkiln_plugin_custom_act.so', which is not registered; registered creators named "
             "'CustomAct': none");
    KT_CHECK(eng == NULL);
    kiln_free(plan);

    /* embedded: the library's bytes travel in the plan */
    KT_OK(kiln_plugin_load_library(ACT_LIB, NULL, &act_lib));
    KT_OK(kiln_plugin_library_set_embedded(act_lib, 1));
    KT_OK(build_model("custom_act", 0, 4, &plan, &size));
    KT_OK(kiln_plugin_library_set_embedded(act_lib, 0));
    KT_OK(kiln_plugin_deregister_library(act_lib));
    act_lib = NULL;
    KT_FAILS(kiln_engine_load(plan, size, &eng), KILN_ERR_PLUGIN, "is not allowed");
    /* a plan whose embedded bytes were changed (and resealed) */
    void *forged = malloc(size);
    memcpy(forged, plan, size);
    const uint8_t *sec = NULL;
    size_t sec_size = 0;
    KT_OK(kp_section(forged, size, KP_SEC_PLUGINS, &sec, &sec_size));
    if (sec) {
        size_t at = (size_t)(sec - (const uint8_t *)forged) + sec_size / 2; /* inside the library */
        ((uint8_t *)forged)[at] ^= 0x5a;
        kp_reseal(forged, size);
    }
    kiln_plugin_allow_embedded_libraries(1);
    KT_FAILS(kiln_engine_load(forged, size, &eng), KILN_ERR_PLUGIN, "the plan was altered");
    free(forged);
    KT_CHECK(kiln_plugin_find("CustomAct", "1", "") == NULL);
    KT_OK(kiln_engine_load(plan, size, &eng));
    if (eng) {
        const kiln_plugin_creator *c = kiln_plugin_find("CustomAct", "1", "");
        KT_CHECK(c != NULL);
        run_cases(eng, "custom_act", 4, 1e-5);
        kiln_plugin_library *emb = (kiln_plugin_library *)kiln_plugin_creator_library(c);
        KT_CHECK(emb && strstr(kiln_plugin_library_path(emb), "embedded"));
        KT_FAILS(kiln_plugin_deregister_library(emb), KILN_ERR_PLUGIN, "still used");
        kiln_engine_destroy(eng);
        KT_OK(kiln_plugin_deregister_library(emb));
    }
    kiln_plugin_allow_embedded_libraries(0);
    kiln_free(plan);
    KT_OK(kiln_plugin_load_library(ACT_LIB, NULL, &act_lib));
}

/* ---- field byte form ---- */

static void test_fields(void) {
    kpl_fields f;
    memset(&f, 0, sizeof f);
    int8_t i8[2] = {-1, 2};
    int64_t i64[3] = {1, -2, 1ll << 40};
    double f64 = 2.5;
    uint16_t h = 0x3c00;
    KT_OK(kpl_fields_add(&f, "a", KILN_FIELD_INT8, 2, i8));
    KT_OK(kpl_fields_add(&f, "b", KILN_FIELD_INT64, 3, i64));
    KT_OK(kpl_fields_add(&f, "c", KILN_FIELD_FLOAT64, 1, &f64));
    KT_OK(kpl_fields_add(&f, "d", KILN_FIELD_FLOAT16, 1, &h));
    KT_OK(kpl_fields_add(&f, "e", KILN_FIELD_STRING, 5, "hello"));
    KT_OK(kpl_fields_add(&f, "z", KILN_FIELD_BYTES, 0, ""));
    kn_buf b;
    memset(&b, 0, sizeof b);
    kpl_fields_write(&f.c, &b);
    kpl_fields g;
    KT_OK(kpl_fields_read(b.data, b.len, &g));
    KT_CHECK(g.c.count == 6 && g.items[1].length == 3 &&
             ((const int64_t *)g.items[1].data)[2] == (1ll << 40) &&
             strcmp(g.items[4].data, "hello") == 0);
    kpl_fields_free(&g);
    /* every truncation and a trailing byte are refused */
    int refused = 0;
    for (size_t n = 0; n < b.len; n++)
        refused += kpl_fields_read(b.data, n, &g) == KILN_ERR_PLAN;
    KT_CHECK(refused == (int)b.len);
    kn_buf_append(&b, "x", 1);
    KT_FAILS(kpl_fields_read(b.data, b.len, &g), KILN_ERR_PLAN, "unexpected bytes");
    b.data[8] ^= 0xff; /* the first name's length now runs past the end */
    KT_FAILS(kpl_fields_read(b.data, b.len, &g), KILN_ERR_PLAN, "field 0");
    kn_buf_free(&b);
    kpl_fields_free(&f);
}

/* ---- ONNX attributes to fields, by schema ---- */

static const kiln_field_spec conv_schema[] = {
    {"h", KILN_FIELD_FLOAT16, 2, 0},   {"bf", KILN_FIELD_BFLOAT16, 1, 0},
    {"d", KILN_FIELD_FLOAT64, -1, 0},  {"i8", KILN_FIELD_INT8, -1, 0},
    {"i32", KILN_FIELD_INT32, 1, 0},   {"s", KILN_FIELD_STRING, -1, 0},
    {"t", KILN_FIELD_INT16, -1, 0},    {"req", KILN_FIELD_INT64, 1, 1},
};
static const kiln_plugin_creator conv_creator = {1, sizeof(kiln_plugin_creator), "Conv9", "2",
                                                 "ns", conv_schema, 8, NULL, neg3_create};

static kn_node *conv_node(kn_net **net) {
    int x, y, idx;
    if (kn_net_new(net) != KILN_OK || kn_net_tensor(*net, "x", &x) != KILN_OK ||
        kn_net_tensor(*net, "y", &y) != KILN_OK ||
        kn_net_add_node(*net, "c9", "Conv9", "my.domain", 1, 1, &x, 1, &y, &idx) != KILN_OK)
        return NULL;
    return &(*net)->nodes[idx];
}

static void test_field_conversion(void) {
    kn_net *net = NULL;
    kn_node *n = conv_node(&net);
    float h[2] = {1.5f, -2.0f};
    int64_t i8[3] = {-128, 0, 127}, one = 7;
    KT_OK(kn_node_set_floats(n, "h", h, 2));
    KT_OK(kn_node_set_float(n, "bf", 3.0f));
    KT_OK(kn_node_set_floats(n, "d", h, 2));
    KT_OK(kn_node_set_ints(n, "i8", i8, 3));
    KT_OK(kn_node_set_int(n, "i32", one));
    KT_OK(kn_node_set_string(n, "s", "text"));
    KT_OK(kn_node_set_int(n, "req", 42));
    kn_tdata t; /* a tensor attribute becomes a typed array */
    int64_t dims[1] = {3};
    KT_OK(kn_tdata_alloc(&t, KILN_DTYPE_INT32, 1, dims));
    ((int32_t *)t.data)[2] = -5;
    KT_OK(kn_node_set_int(n, "t", 0));
    kn_attr *ta = (kn_attr *)kn_attr_find(n, "t");
    ta->type = KN_ATTR_TENSOR;
    ta->tensor = malloc(sizeof *ta->tensor);
    *ta->tensor = t;
    kpl_fields f;
    KT_OK(kpl_fields_from_node(n, &conv_creator, &f));
    KT_CHECK(f.c.count == 8);
    for (int i = 0; i < f.c.count; i++) {
        const kiln_field *x = &f.items[i];
        if (!strcmp(x->name, "h"))
            KT_CHECK(x->type == KILN_FIELD_FLOAT16 && x->length == 2 &&
                     ((const uint16_t *)x->data)[0] == 0x3e00);
        if (!strcmp(x->name, "bf"))
            KT_CHECK(x->type == KILN_FIELD_BFLOAT16 && ((const uint16_t *)x->data)[0] == 0x4040);
        if (!strcmp(x->name, "d"))
            KT_CHECK(x->type == KILN_FIELD_FLOAT64 && ((const double *)x->data)[1] == -2.0);
        if (!strcmp(x->name, "i8"))
            KT_CHECK(x->length == 3 && ((const int8_t *)x->data)[0] == -128);
        if (!strcmp(x->name, "i32"))
            KT_CHECK(x->type == KILN_FIELD_INT32 && ((const int32_t *)x->data)[0] == 7);
        if (!strcmp(x->name, "s"))
            KT_CHECK(x->type == KILN_FIELD_STRING && x->length == 4);
        if (!strcmp(x->name, "t"))
            KT_CHECK(x->type == KILN_FIELD_INT16 && x->length == 3 &&
                     ((const int16_t *)x->data)[2] == -5);
    }
    kpl_fields_free(&f);
    /* each mismatch names the node, the attribute and the expected type */
    int64_t big[1] = {300}, two[2] = {1, 2};
    KT_OK(kn_node_set_ints(n, "i8", big, 1));
    KT_FAILS(kpl_fields_from_node(n, &conv_creator, &f), KILN_ERR_INVALID_ARGUMENT,
             "node 'c9' (my.domain::Conv9): attribute 'i8' of plugin 'Conv9' (version '2', namespace 'ns'): "
             "expected int8");
    KT_CHECK(strstr(kiln_last_error(), "(300) does not fit") != NULL);
    KT_OK(kn_node_set_ints(n, "i8", i8, 3));
    KT_OK(kn_node_set_ints(n, "i32", two, 2));
    KT_FAILS(kpl_fields_from_node(n, &conv_creator, &f), KILN_ERR_INVALID_ARGUMENT,
             "got 2 element(s) where the schema wants 1");
    KT_OK(kn_node_set_string(n, "i32", "seven"));
    KT_FAILS(kpl_fields_from_node(n, &conv_creator, &f), KILN_ERR_INVALID_ARGUMENT,
             "attribute 'i32' of plugin 'Conv9' (version '2', namespace 'ns'): expected int32");
    KT_OK(kn_node_set_int(n, "i32", 1));
    KT_OK(kn_node_set_floats(n, "h", h, 1));
    KT_FAILS(kpl_fields_from_node(n, &conv_creator, &f), KILN_ERR_INVALID_ARGUMENT,
             "attribute 'h' of plugin 'Conv9' (version '2', namespace 'ns'): expected float16 of "
             "length 2, got 1 element(s)");
    kn_net_free(net);
    net = NULL;
    n = conv_node(&net); /* no attributes: the required field is missing */
    KT_FAILS(kpl_fields_from_node(n, &conv_creator, &f), KILN_ERR_INVALID_ARGUMENT,
             "needs field 'req' (int64)");
    kn_net_free(net);
}

/* ---- the registry under threads ---- */

static kiln_plugin_creator thread_creators[4][50];
static char thread_names[4][50][16];

static void *registry_worker(void *arg) {
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < 50; i++) {
        kiln_plugin_creator *c = &thread_creators[t][i];
        snprintf(thread_names[t][i], sizeof thread_names[t][i], "T%d_%d", t, i);
        *c = neg3;
        c->name = thread_names[t][i];
        if (kiln_plugin_register(c, "thread") != KILN_OK)
            return (void *)1;
        if (kiln_plugin_find(c->name, "1", "") != c || kiln_plugin_find("CustomAct", "1", "") == NULL)
            return (void *)1;
        (void)kiln_plugin_count();
    }
    for (int i = 0; i < 50; i++)
        if (kiln_plugin_deregister(thread_names[t][i], "1", "") != KILN_OK)
            return (void *)1;
    return NULL;
}

static void test_threads(void) {
    int before = kiln_plugin_count();
    pthread_t th[4];
    for (int t = 0; t < 4; t++)
        pthread_create(&th[t], NULL, registry_worker, (void *)(intptr_t)t);
    for (int t = 0; t < 4; t++) {
        void *r = NULL;
        pthread_join(th[t], &r);
        KT_CHECK(r == NULL);
    }
    KT_CHECK(kiln_plugin_count() == before);
}

/* ---- allocation failures: every one fails cleanly ---- */

static void test_faults(void) {
    int clean = 0, ok = 0, n;
    for (n = 1; n < 4000; n++) {
        kn_fault_inject_set((uint64_t)n);
        void *plan = NULL;
        size_t size = 0;
        kiln_engine *eng = NULL;
        kiln_context *ctx = NULL;
        kiln_status st = build_model("custom_act", 0, 1, &plan, &size);
        if (st == KILN_OK)
            st = kiln_engine_load(plan, size, &eng);
        if (st == KILN_OK)
            st = kiln_context_create(eng, &ctx);
        float x[10] = {1, 2}, y[10];
        int64_t d[2] = {2, 5}; /* case 0's shape: the profile of a one-case build */
        if (st == KILN_OK)
            st = kiln_context_set_input_shape(ctx, "x", 2, d);
        if (st == KILN_OK)
            st = kiln_context_set_tensor_address(ctx, "x", x);
        if (st == KILN_OK)
            st = kiln_context_set_tensor_address(ctx, "y", y);
        if (st == KILN_OK)
            st = kiln_context_enqueue(ctx, NULL);
        kn_fault_inject_set(0);
        kiln_context_destroy(ctx);
        kiln_engine_destroy(eng);
        kiln_free(plan);
        if (st == KILN_OK) {
            ok = 1;
            break;
        }
        if (getenv("KT_FAULT_VERBOSE"))
            fprintf(stderr, "alloc %d: %s: %s\n", n, kiln_status_name(st), kiln_last_error());
        clean += st == KILN_ERR_OUT_OF_MEMORY || st == KILN_ERR_PLUGIN || st == KILN_ERR_PARSE ||
                 st == KILN_ERR_IO;
    }
    printf("fault injection: %d failing allocations handled, run succeeded after %d\n", clean, n);
    KT_CHECK(ok);
}

int main(void) {
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    test_fields();
    test_field_conversion();
    test_loading();
    test_bad_nodes();
    test_override();
    test_numeric("custom_act", 1e-5);
    test_numeric("custom_act_fp16", 4e-3);
    test_numeric("bev_pool", 1e-5);
    test_numeric("bev_pool_fp16", 2e-2);
    test_formula();
    test_builder_checks();
    test_plans();
    test_threads();
    test_faults();
    printf("%d passed, %d failed\n", kt_pass, kt_fail);
    return kt_fail ? 1 : 0;
}
