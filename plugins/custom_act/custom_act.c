/* custom_act.c - example plugin "CustomAct": the tanh form of GELU with a
 * configurable slope, y = x * 0.5 * (1 + tanh(alpha * (x + 0.044715 x^3))),
 * on float32 and float16 tensors. CPU kernels here; CUDA kernels in
 * custom_act_cuda.cu when the library is built with CUDA (KILN_PLUGIN_CUDA),
 * used when enqueue gets a stream. Built against include/kiln/kiln_plugin.h
 * only (and the CUDA runtime for the .cu file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_plugin.h"
#include "../common/plugin_half.h"
#ifdef KILN_PLUGIN_CUDA
#include "custom_act_cuda.h"
#endif

#define EXPORT __attribute__((visibility("default")))

static const kiln_plugin_host *host;
static char plugin_ns[128];

static kiln_status fail(kiln_status st, const char *msg) {
    if (host)
        host->set_error(msg);
    return st;
}

/* ---- the instance ---- */

typedef struct act {
    kiln_plugin pub;
    float alpha;
    kiln_field field;        /* what get_fields hands out */
} act;

static const kiln_plugin_core core_v1;
static const kiln_plugin_build build_v1;
static const kiln_plugin_runtime runtime_v1;

static kiln_status make(float alpha, kiln_plugin_phase phase, kiln_plugin **out) {
    act *a = calloc(1, sizeof *a);
    if (!a)
        return fail(KILN_ERR_OUT_OF_MEMORY, "CustomAct: out of memory");
    a->alpha = alpha;
    a->pub.abi_version = KILN_PLUGIN_ABI_VERSION;
    a->pub.struct_size = sizeof a->pub;
    a->pub.self = a;
    a->pub.core = &core_v1;
    a->pub.build = phase == KILN_PLUGIN_PHASE_BUILD ? &build_v1 : NULL;
    a->pub.runtime = &runtime_v1;
    *out = &a->pub;
    return KILN_OK;
}

static int32_t num_outputs(void *self) { return 1; }

static kiln_status output_dtypes(void *self, const kiln_dtype *in, int32_t n_in, kiln_dtype *out,
                                 int32_t n_out) {
    if (n_in != 1 || n_out != 1)
        return fail(KILN_ERR_INVALID_ARGUMENT, "CustomAct takes one input and one output");
    if (in[0] != KILN_DTYPE_FLOAT && in[0] != KILN_DTYPE_FLOAT16)
        return fail(KILN_ERR_UNSUPPORTED, "CustomAct: the input must be float or float16");
    out[0] = in[0];
    return KILN_OK;
}

static kiln_status output_shapes(void *self, const kiln_dims_expr *in, int32_t n_in,
                                 kiln_dims_expr *out, int32_t n_out, const kiln_expr_builder *eb) {
    if (n_in != 1 || n_out != 1)
        return fail(KILN_ERR_INVALID_ARGUMENT, "CustomAct takes one input and one output");
    out[0] = in[0];
    return KILN_OK;
}

static int32_t supports_format(void *self, int32_t pos, const kiln_tensor_desc *d, int32_t n_in,
                               int32_t n_out) {
    if (d[pos].layout != KILN_LAYOUT_LINEAR)
        return 0;
    if (pos == 0)
        return d[0].dtype == KILN_DTYPE_FLOAT || d[0].dtype == KILN_DTYPE_FLOAT16;
    return d[pos].dtype == d[0].dtype;
}

static kiln_status enqueue(void *self, const kiln_tensor_desc *in, const void *const *inputs,
                           int32_t n_in, const kiln_tensor_desc *out, void *const *outputs,
                           int32_t n_out, void *workspace, void *stream) {
    const act *a = self;
    if (n_in != 1 || n_out != 1)
        return fail(KILN_ERR_INVALID_ARGUMENT, "CustomAct takes one input and one output");
    int64_t n = 1;
    for (int d = 0; d < in[0].rank; d++)
        n *= in[0].dims[d];
    if (stream) { /* a GPU engine passes device pointers and its stream */
#ifdef KILN_PLUGIN_CUDA
        if (in[0].dtype != KILN_DTYPE_FLOAT && in[0].dtype != KILN_DTYPE_FLOAT16)
            return fail(KILN_ERR_UNSUPPORTED, "CustomAct: enqueue got a type it does not support");
        char msg[256];
        if (custom_act_cuda(inputs[0], outputs[0], n, in[0].dtype == KILN_DTYPE_FLOAT16, a->alpha,
                            stream, msg, sizeof msg) != 0)
            return fail(KILN_ERR_RUNTIME, msg);
        return KILN_OK;
#else
        return fail(KILN_ERR_UNSUPPORTED, "CustomAct: this build of the plugin has no CUDA "
                                          "kernels (built without CUDA); build the plan for the "
                                          "cpu backend");
#endif
    }
    const float k = 0.044715f, alpha = a->alpha;
    if (in[0].dtype == KILN_DTYPE_FLOAT) {
        const float *x = inputs[0];
        float *y = outputs[0];
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            y[i] = v * 0.5f * (1.0f + tanhf(alpha * (v + k * v * v * v)));
        }
    } else if (in[0].dtype == KILN_DTYPE_FLOAT16) {
        const uint16_t *x = inputs[0];
        uint16_t *y = outputs[0];
        for (int64_t i = 0; i < n; i++) {
            float v = half_to_float(x[i]);
            y[i] = float_to_half(v * 0.5f * (1.0f + tanhf(alpha * (v + k * v * v * v))));
        }
    } else {
        return fail(KILN_ERR_UNSUPPORTED, "CustomAct: enqueue got a type it does not support");
    }
    return KILN_OK;
}

static kiln_status get_fields(void *self, kiln_field_collection *out) {
    act *a = self;
    a->field.name = "alpha";
    a->field.type = KILN_FIELD_FLOAT32;
    a->field.length = 1;
    a->field.data = &a->alpha;
    out->count = 1;
    out->fields = &a->field;
    return KILN_OK;
}

static kiln_status clone(void *self, kiln_plugin **out) {
    const act *a = self;
    return make(a->alpha, a->pub.build ? KILN_PLUGIN_PHASE_BUILD : KILN_PLUGIN_PHASE_RUNTIME, out);
}

static void destroy(void *self) { free(self); }

static const kiln_plugin_core core_v1 = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_core),
                                         "CustomAct", "1", plugin_ns};
static const kiln_plugin_build build_v1 = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_build),
                                           num_outputs, output_dtypes, output_shapes,
                                           supports_format, NULL, NULL};
static const kiln_plugin_runtime runtime_v1 = {KILN_PLUGIN_ABI_VERSION,
                                               sizeof(kiln_plugin_runtime), NULL, enqueue,
                                               get_fields, clone, destroy};

/* ---- the creator ---- */

static const kiln_field_spec fields_v1[] = {
    {"alpha", KILN_FIELD_FLOAT32, 1, 0}, /* default sqrt(2/pi), the GELU constant */
};

static kiln_status create(void *self, const char *layer, const kiln_field_collection *fields,
                          kiln_plugin_phase phase, kiln_plugin **out) {
    float alpha = 0.7978845608f;
    for (int i = 0; fields && i < fields->count; i++) {
        const kiln_field *f = &fields->fields[i];
        if (strcmp(f->name, "alpha") != 0)
            continue;
        if (f->type != KILN_FIELD_FLOAT32 || f->length != 1) {
            char msg[256];
            snprintf(msg, sizeof msg, "CustomAct layer '%s': field 'alpha' must be one float32",
                     layer);
            return fail(KILN_ERR_INVALID_ARGUMENT, msg);
        }
        memcpy(&alpha, f->data, sizeof alpha);
    }
    return make(alpha, phase, out);
}

static kiln_plugin_creator creator = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_creator),
                                      "CustomAct", "1", plugin_ns, fields_v1, 1, NULL, create};
static const kiln_plugin_creator *const creators[] = {&creator};

EXPORT kiln_status kiln_plugin_get_creators(const kiln_plugin_host *h, uint32_t host_abi,
                                            const char *ns,
                                            const kiln_plugin_creator *const **out,
                                            int32_t *count) {
    host = h;
    snprintf(plugin_ns, sizeof plugin_ns, "%s", ns ? ns : "");
    *out = creators;
    *count = 1;
    return KILN_OK;
}
