/* test_plugin_shapes.c - a hostile plugin's output-shape expressions (the
 * kiln_expr_builder of include/kiln/kiln_plugin.h): INT64_MIN / -1 (which
 * traps), division by zero, overflow, negative and absurd dims, a shape past
 * what kiln plans, an op outside kiln_dim_op, a pointer kiln never handed
 * out, and running the builder out of expressions. Each build must fail
 * with an error naming the layer and the dimension, never crash. The plugin
 * is registered in-process; one global picks what its output_shapes does. */
#include "test.h"

#include "graph/graph.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_plugin.h"
#include "plugin/plugin.h"

enum {
    M_SAME,      /* y = x: the control, builds */
    M_MIN_DIV,   /* floordiv(INT64_MIN, -1) */
    M_DIV_ZERO,  /* ceildiv(x0, 0) */
    M_OVERFLOW,  /* x0 * 2^62 */
    M_NEGATIVE,  /* 1 - 5 */
    M_ABSURD,    /* 2^50 */
    M_TOO_BIG,   /* [2^30, 2^30]: each fits, the product does not */
    M_BAD_OP,    /* op 99 */
    M_FORGED,    /* a pointer to the plugin's own memory */
    M_EXHAUST,   /* 5000 constants */
    M_COUNT
};
static int g_mode;

static const kiln_plugin_core core_v1 = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_core),
                                         "HostileShape", "1", ""};
static const kiln_plugin_build build_v1;
static const kiln_plugin_runtime runtime_v1;

static kiln_status make(kiln_plugin_phase phase, kiln_plugin **out) {
    kiln_plugin *p = calloc(1, sizeof *p);
    if (!p)
        return KILN_ERR_OUT_OF_MEMORY;
    *p = (kiln_plugin){KILN_PLUGIN_ABI_VERSION, sizeof *p, p, &core_v1,
                       phase == KILN_PLUGIN_PHASE_BUILD ? &build_v1 : NULL, &runtime_v1};
    *out = p;
    return KILN_OK;
}

static int32_t num_outputs(void *self) { return 1; }

static kiln_status output_dtypes(void *self, const kiln_dtype *in, int32_t n_in, kiln_dtype *out,
                                 int32_t n_out) {
    out[0] = in[0];
    return KILN_OK;
}

static int64_t forged_memory[8];

static kiln_status output_shapes(void *self, const kiln_dims_expr *in, int32_t n_in,
                                 kiln_dims_expr *out, int32_t n_out, const kiln_expr_builder *eb) {
    void *c = eb->ctx;
    out[0] = in[0];
    const kiln_dim_expr *x0 = in[0].d[0];
    switch (g_mode) {
    case M_MIN_DIV:
        out[0].d[0] = eb->operation(c, KILN_DIM_FLOOR_DIV, eb->constant(c, INT64_MIN),
                                    eb->constant(c, -1));
        break;
    case M_DIV_ZERO: out[0].d[0] = eb->operation(c, KILN_DIM_CEIL_DIV, x0, eb->constant(c, 0)); break;
    case M_OVERFLOW:
        out[0].d[0] = eb->operation(c, KILN_DIM_PROD, x0, eb->constant(c, (int64_t)1 << 62));
        break;
    case M_NEGATIVE:
        out[0].d[0] = eb->operation(c, KILN_DIM_SUB, eb->constant(c, 1), eb->constant(c, 5));
        break;
    case M_ABSURD: out[0].d[0] = eb->constant(c, (int64_t)1 << 50); break;
    case M_TOO_BIG:
        out[0].d[0] = eb->constant(c, (int64_t)1 << 30);
        out[0].d[1] = eb->constant(c, (int64_t)1 << 30);
        break;
    case M_BAD_OP: out[0].d[0] = eb->operation(c, (kiln_dim_op)99, x0, x0); break;
    case M_FORGED:
        out[0].d[0] = (const kiln_dim_expr *)(void *)forged_memory;
        /* the builder's own queries must not read it either */
        if (eb->is_constant(c, out[0].d[0]) || eb->constant_value(c, out[0].d[0]) != -1)
            return KILN_ERR_INTERNAL;
        break;
    case M_EXHAUST: {
        const kiln_dim_expr *e = x0;
        for (int i = 0; i < 5000; i++)
            e = eb->operation(c, KILN_DIM_SUM, e, eb->constant(c, 0));
        out[0].d[0] = e;
        break;
    }
    default: break;
    }
    return KILN_OK;
}

static int32_t supports_format(void *self, int32_t pos, const kiln_tensor_desc *d, int32_t n_in,
                               int32_t n_out) {
    return d[pos].dtype == KILN_DTYPE_FLOAT && d[pos].layout == KILN_LAYOUT_LINEAR;
}

static kiln_status enqueue(void *self, const kiln_tensor_desc *in, const void *const *inputs,
                           int32_t n_in, const kiln_tensor_desc *out, void *const *outputs,
                           int32_t n_out, void *workspace, void *stream) {
    int64_t n = 1;
    for (int d = 0; d < in[0].rank; d++)
        n *= in[0].dims[d];
    memcpy(outputs[0], inputs[0], (size_t)n * sizeof(float));
    return KILN_OK;
}

static kiln_status get_fields(void *self, kiln_field_collection *out) {
    out->count = 0;
    out->fields = NULL;
    return KILN_OK;
}

static kiln_status clone(void *self, kiln_plugin **out) {
    const kiln_plugin *p = self;
    return make(p->build ? KILN_PLUGIN_PHASE_BUILD : KILN_PLUGIN_PHASE_RUNTIME, out);
}

static void destroy(void *self) { free(self); }

static const kiln_plugin_build build_v1 = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_build),
                                           num_outputs, output_dtypes, output_shapes,
                                           supports_format, NULL, NULL};
static const kiln_plugin_runtime runtime_v1 = {KILN_PLUGIN_ABI_VERSION,
                                               sizeof(kiln_plugin_runtime), NULL, enqueue,
                                               get_fields, clone, destroy};

static kiln_status create(void *self, const char *layer, const kiln_field_collection *fields,
                          kiln_plugin_phase phase, kiln_plugin **out) {
    return make(phase, out);
}

static const kiln_plugin_creator creator = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_creator),
                                            "HostileShape", "1", "", NULL, 0, NULL, create};

/* x [2, 3] -> HostileShape 'hostile' -> y, built under mode `mode`. */
static kiln_status build_mode(int mode) {
    g_mode = mode;
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    const int64_t dims[2] = {2, 3};
    const char *in[1] = {"x"}, *out[1] = {"y"};
    kiln_status st = kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, dims, NULL);
    if (st == KILN_OK)
        st = kiln_network_add_node(net, "hostile", "HostileShape", "", 17, 1, in, 1, out, NULL);
    if (st == KILN_OK)
        st = kiln_network_mark_output(net, "y");
    if (st == KILN_OK)
        st = kpl_import(net, false, true);
    kiln_builder_config *cfg = NULL;
    if (st == KILN_OK)
        st = kiln_builder_config_create(&cfg);
    void *plan = NULL;
    size_t size = 0;
    if (st == KILN_OK)
        st = kiln_build_serialized(net, cfg, &plan, &size);
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return st;
}

int main(void) {
    KT_OK(kiln_plugin_register(&creator, "static"));
    static const char *const want[M_COUNT] = {
        NULL,
        "output 0 dimension 0 cannot be evaluated",
        "output 0 dimension 0 cannot be evaluated (a division by zero",
        "output 0 dimension 0 cannot be evaluated",
        "output 0 dimension 0 is negative: -4",
        "output 0 dimension 0 is over the limit of 2^48: 1125899906842624",
        "output 0 shape has more elements or bytes than kiln plans",
        "output 0 dimension 0 is missing",
        "output 0 dimension 0 is not an expression kiln made",
        "output 0 dimension 0 is missing",
    };
    KT_OK(build_mode(M_SAME));
    for (int m = 1; m < M_COUNT; m++) {
        kiln_status st = build_mode(m);
        const char *msg = kiln_last_error();
        bool ok = st == KILN_ERR_SHAPE && strstr(msg, want[m]) && strstr(msg, "hostile");
        if (!ok)
            fprintf(stderr, "mode %d: %s: %s\n", m, kiln_status_name(st), msg);
        KT_CHECK(ok);
    }
    KT_OK(kiln_plugin_deregister("HostileShape", "1", ""));
    return kt_finish();
}
