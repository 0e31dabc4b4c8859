/* test_precision_choice.c - the precision choice under
 * KILN_BUILDER_FLAG_TIMED_PRECISION (what `kiln exec --fp16` sets), checked
 * through a fake timing hook so the result does not depend on the machine:
 * each layer keeps the faster of FP32 and FP16, casts at its edges counted;
 * constraints force; timing off follows the rule; the plan records the
 * decision and the times (kiln_engine_layer_info_json "precision_choice").
 * Without the flag FP16 forces, as the 0.1 API did. */
#include <string.h>

#include "builder/builder.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

/* fake times (ms) per layer name and type; casts cost `cast_ms` */
static double cast_ms = 0.5;
static int cast_calls;

static kiln_status fake_time(const kn_node *n, const kn_tinfo *in, const kn_tinfo *out,
                             double *ms) {
    (void)out;
    bool f16 = n->n_in > 0 && in[0].dtype == KILN_DTYPE_FLOAT16;
    if (strcmp(n->op_type, "Cast") == 0) {
        cast_calls++;
        *ms = cast_ms;
    } else if (strcmp(n->name, "mm_fast16") == 0) {
        *ms = f16 ? 1.0 : 10.0;
    } else if (strcmp(n->name, "act_slow16") == 0) {
        *ms = f16 ? 5.0 : 1.0;
    } else {
        *ms = f16 ? 2.0 : 2.0; /* a tie keeps FP32 */
    }
    return KILN_OK;
}

/* x[4,8] -> MatMul mm_fast16 (W [8,8]) -> Relu act_slow16 -> Sigmoid tail -> y */
static kiln_network *make_net(void) {
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    int64_t xd[2] = {4, 8}, wd[2] = {8, 8};
    float w[64];
    for (int i = 0; i < 64; i++)
        w[i] = (float)((i * 37) % 17) / 17.f - 0.5f;
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, xd, NULL));
    KT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_FLOAT, 2, wd, w, sizeof w));
    const char *mm_in[2] = {"x", "W"}, *mm_out[1] = {"h"};
    KT_OK(kiln_network_add_node(net, "mm_fast16", "MatMul", "", 17, 2, mm_in, 1, mm_out, NULL));
    const char *r_in[1] = {"h"}, *r_out[1] = {"r"};
    KT_OK(kiln_network_add_node(net, "act_slow16", "Relu", "", 17, 1, r_in, 1, r_out, NULL));
    const char *s_in[1] = {"r"}, *s_out[1] = {"y"};
    KT_OK(kiln_network_add_node(net, "tail", "Sigmoid", "", 17, 1, s_in, 1, s_out, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

/* The layer report of a build with these flags (and one optional layer
 * precision); malloc'd, NULL on failure. */
static char *build_report(kiln_network *net, uint32_t flags, const char *layer, kiln_dtype dt) {
    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    kiln_builder_config_set_flags(cfg, flags | KILN_BUILDER_FLAG_NO_FUSION);
    if (layer)
        KT_OK(kiln_builder_config_set_layer_precision(cfg, layer, dt));
    void *plan = NULL;
    size_t size = 0;
    char *json = NULL;
    kiln_status st = kiln_build_serialized(net, cfg, &plan, &size);
    KT_OK(st);
    kiln_engine *e = NULL;
    if (st == KILN_OK && kiln_engine_load(plan, size, &e) == KILN_OK)
        KT_OK(kiln_engine_layer_info_json(e, &json));
    kiln_engine_destroy(e);
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    return json;
}

/* The layer object of `name` in the report: its precision and, when
 * recorded, why and the FP32 / FP16 times. */
typedef struct layer_rec {
    char precision[32], why[32];
    double ms32, ms16;
    bool found, has_choice;
} layer_rec;

static layer_rec find_layer(const char *json, const char *name) {
    layer_rec r;
    memset(&r, 0, sizeof r);
    r.ms32 = r.ms16 = -2;
    char key[128];
    snprintf(key, sizeof key, "{\"name\":\"%s\"", name);
    const char *p = json ? strstr(json, key) : NULL;
    if (!p)
        return r;
    r.found = true;
    const char *end = strstr(p + 1, "{\"name\":\"");
    const char *q = strstr(p, "\"precision\":\"");
    if (q && (!end || q < end))
        sscanf(q + 13, "%31[^\"]", r.precision);
    q = strstr(p, "\"precision_choice\":{\"why\":\"");
    if (q && (!end || q < end)) {
        r.has_choice = true;
        sscanf(q + 27, "%31[^\"]", r.why);
        const char *m = strstr(q, "\"float\":"), *h = strstr(q, "\"float16\":");
        if (m && (!end || m < end))
            r.ms32 = atof(m + 8);
        if (h && (!end || h < end))
            r.ms16 = atof(h + 10);
    }
    return r;
}

/* The recorded choice is never the slower of the two measured candidates. */
static void check_never_slower(const layer_rec *r) {
    KT_CHECK(r->has_choice && strcmp(r->why, "timed") == 0);
    bool chose16 = strcmp(r->precision, "float16") == 0;
    KT_CHECK(r->ms32 >= 0 && r->ms16 >= 0);
    KT_CHECK(chose16 ? r->ms16 < r->ms32 : r->ms32 <= r->ms16);
}

int main(void) {
    kiln_network *net = make_net();
    kbld_time_hook = fake_time;

    /* allowed FP16, timed: the MatMul wins in FP16 even with the cast into
     * it (1 + 0.5 < 10), the Relu stays FP32 (5 > 1, and FP32 pays the
     * cast back from the MatMul's FP16 output: 1 + 0.5 < 5), the tie stays FP32 */
    char *js = build_report(net, KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_TIMED_PRECISION, NULL,
                            KILN_DTYPE_UNDEFINED);
    layer_rec mm = find_layer(js, "mm_fast16"), act = find_layer(js, "act_slow16"),
              tail = find_layer(js, "tail");
    KT_CHECK(mm.found && strcmp(mm.precision, "float16") == 0);
    KT_CHECK(act.found && strcmp(act.precision, "float") == 0);
    KT_CHECK(tail.found && strcmp(tail.precision, "float") == 0);
    check_never_slower(&mm);
    check_never_slower(&act);
    check_never_slower(&tail);
    KT_CHECK(fabs(mm.ms32 - 10.0) < 1e-6 && fabs(mm.ms16 - 1.5) < 1e-6); /* cast in counted */
    KT_CHECK(fabs(act.ms32 - 1.5) < 1e-6 && fabs(act.ms16 - 5.0) < 1e-6); /* cast back counted */
    KT_CHECK(cast_calls > 0);
    free(js);

    /* casts that cost more than FP16 saves keep the MatMul in FP32 */
    cast_ms = 20;
    js = build_report(net, KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_TIMED_PRECISION, NULL,
                      KILN_DTYPE_UNDEFINED);
    mm = find_layer(js, "mm_fast16");
    KT_CHECK(strcmp(mm.precision, "float") == 0);
    check_never_slower(&mm);
    free(js);
    cast_ms = 0.5;

    /* a constraint forces the slower type, and says so */
    js = build_report(net, KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_TIMED_PRECISION,
                      "act_slow16", KILN_DTYPE_FLOAT16);
    act = find_layer(js, "act_slow16");
    KT_CHECK(strcmp(act.precision, "float16") == 0 && strcmp(act.why, "forced") == 0);
    mm = find_layer(js, "mm_fast16");
    KT_CHECK(strcmp(mm.precision, "float16") == 0 && strcmp(mm.why, "timed") == 0);
    free(js);
    /* "*" forces every layer */
    js = build_report(net, KILN_BUILDER_FLAG_TIMED_PRECISION, "*", KILN_DTYPE_FLOAT16);
    tail = find_layer(js, "tail");
    KT_CHECK(strcmp(tail.precision, "float16") == 0 && strcmp(tail.why, "forced") == 0);
    free(js);

    /* timing off: the rule (FP32 on the CPU backend), nothing timed */
    cast_calls = 0;
    js = build_report(net,
                      KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_TIMED_PRECISION |
                          KILN_BUILDER_FLAG_NO_TIMING,
                      NULL, KILN_DTYPE_UNDEFINED);
    mm = find_layer(js, "mm_fast16");
    KT_CHECK(strcmp(mm.precision, "float") == 0 && strcmp(mm.why, "rule") == 0);
    KT_CHECK(mm.ms32 == -2); /* no times recorded */
    KT_CHECK(cast_calls == 0);
    free(js);

    /* the 0.1 meaning without TIMED_PRECISION: FP16 forces every layer */
    js = build_report(net, KILN_BUILDER_FLAG_FP16, NULL, KILN_DTYPE_UNDEFINED);
    act = find_layer(js, "act_slow16");
    KT_CHECK(strcmp(act.precision, "float16") == 0 && strcmp(act.why, "forced") == 0);
    free(js);

    /* measured for real (no hook): whatever the machine, the record holds
     * both times and the kept type is the faster */
    kbld_time_hook = NULL;
    js = build_report(net, KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_TIMED_PRECISION, NULL,
                      KILN_DTYPE_UNDEFINED);
    const char *names[3] = {"mm_fast16", "act_slow16", "tail"};
    for (int i = 0; i < 3; i++) {
        layer_rec r = find_layer(js, names[i]);
        check_never_slower(&r);
    }
    free(js);
    kiln_network_destroy(net);
    return kt_finish();
}
