/* test_plugins.c - plugins that misbehave on purpose, for tests/plugins:
 * "FailEnqueue" (enqueue reports a fault), "Unstable" (its fields change on
 * every instance, so a plan could not recreate it) and "HalfOnly" (y = 2x on
 * float16 only, so the builder must insert reformat layers around it).
 * Built against include/kiln/kiln_plugin.h only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_plugin.h"
#include "../../../plugins/common/plugin_half.h"

#define EXPORT __attribute__((visibility("default")))

static const kiln_plugin_host *host;
static int generation; /* Unstable: instances made so far */

enum { FAIL_ENQUEUE, UNSTABLE, HALF_ONLY };

typedef struct inst {
    kiln_plugin pub;
    int kind;
    int32_t gen;
    kiln_field field;
} inst;

static const kiln_plugin_core cores[3] = {
    {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_core), "FailEnqueue", "1", ""},
    {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_core), "Unstable", "1", ""},
    {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_core), "HalfOnly", "1", ""},
};
static const kiln_plugin_build build_v1;
static const kiln_plugin_runtime runtime_v1;

static kiln_status make(int kind, kiln_plugin_phase phase, kiln_plugin **out) {
    inst *p = calloc(1, sizeof *p);
    if (!p)
        return KILN_ERR_OUT_OF_MEMORY;
    p->kind = kind;
    p->gen = ++generation;
    p->pub = (kiln_plugin){KILN_PLUGIN_ABI_VERSION, sizeof p->pub, p, &cores[kind],
                           phase == KILN_PLUGIN_PHASE_BUILD ? &build_v1 : NULL, &runtime_v1};
    *out = &p->pub;
    return KILN_OK;
}

static int32_t num_outputs(void *self) { return 1; }

static kiln_status output_dtypes(void *self, const kiln_dtype *in, int32_t n_in, kiln_dtype *out,
                                 int32_t n_out) {
    out[0] = in[0];
    return KILN_OK;
}

static kiln_status output_shapes(void *self, const kiln_dims_expr *in, int32_t n_in,
                                 kiln_dims_expr *out, int32_t n_out, const kiln_expr_builder *eb) {
    out[0] = in[0];
    return KILN_OK;
}

static int32_t supports_format(void *self, int32_t pos, const kiln_tensor_desc *d, int32_t n_in,
                               int32_t n_out) {
    const inst *p = self;
    kiln_dtype want = p->kind == HALF_ONLY ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_FLOAT;
    return d[pos].dtype == want && d[pos].layout == KILN_LAYOUT_LINEAR;
}

static kiln_status enqueue(void *self, const kiln_tensor_desc *in, const void *const *inputs,
                           int32_t n_in, const kiln_tensor_desc *out, void *const *outputs,
                           int32_t n_out, void *workspace, void *stream) {
    const inst *p = self;
    int64_t n = 1;
    for (int d = 0; d < in[0].rank; d++)
        n *= in[0].dims[d];
    if (p->kind == FAIL_ENQUEUE) {
        host->set_error("simulated device fault in FailEnqueue");
        return KILN_ERR_RUNTIME;
    }
    if (p->kind == HALF_ONLY) {
        if (in[0].dtype != KILN_DTYPE_FLOAT16) {
            host->set_error("HalfOnly got a type other than float16");
            return KILN_ERR_UNSUPPORTED;
        }
        const uint16_t *x = inputs[0];
        uint16_t *y = outputs[0];
        for (int64_t i = 0; i < n; i++)
            y[i] = float_to_half(2.0f * half_to_float(x[i]));
        return KILN_OK;
    }
    memcpy(outputs[0], inputs[0], (size_t)n * 4);
    return KILN_OK;
}

static kiln_status get_fields(void *self, kiln_field_collection *out) {
    inst *p = self;
    out->count = 0;
    out->fields = NULL;
    if (p->kind == UNSTABLE) { /* a new value per instance: not a faithful serialization */
        p->field = (kiln_field){"generation", KILN_FIELD_INT32, 1, &p->gen};
        out->count = 1;
        out->fields = &p->field;
    }
    return KILN_OK;
}

static kiln_status clone(void *self, kiln_plugin **out) {
    const inst *p = self;
    return make(p->kind, p->pub.build ? KILN_PLUGIN_PHASE_BUILD : KILN_PLUGIN_PHASE_RUNTIME, out);
}

static void destroy(void *self) { free(self); }

static const kiln_plugin_build build_v1 = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_build),
                                           num_outputs, output_dtypes, output_shapes,
                                           supports_format, NULL, NULL};
static const kiln_plugin_runtime runtime_v1 = {KILN_PLUGIN_ABI_VERSION,
                                               sizeof(kiln_plugin_runtime), NULL, enqueue,
                                               get_fields, clone, destroy};

static const kiln_field_spec unstable_fields[] = {{"generation", KILN_FIELD_INT32, 1, 0}};

static kiln_status create(void *self, const char *layer, const kiln_field_collection *fields,
                          kiln_plugin_phase phase, kiln_plugin **out) {
    return make((int)(intptr_t)self, phase, out);
}

static const kiln_plugin_creator c_fail = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_creator),
                                           "FailEnqueue", "1", "", NULL, 0,
                                           (void *)(intptr_t)FAIL_ENQUEUE, create};
static const kiln_plugin_creator c_unstable = {KILN_PLUGIN_ABI_VERSION,
                                               sizeof(kiln_plugin_creator), "Unstable", "1", "",
                                               unstable_fields, 1, (void *)(intptr_t)UNSTABLE,
                                               create};
static const kiln_plugin_creator c_half = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_creator),
                                           "HalfOnly", "1", "", NULL, 0,
                                           (void *)(intptr_t)HALF_ONLY, create};
static const kiln_plugin_creator *const creators[] = {&c_fail, &c_unstable, &c_half};

EXPORT kiln_status kiln_plugin_get_creators(const kiln_plugin_host *h, uint32_t host_abi,
                                            const char *ns,
                                            const kiln_plugin_creator *const **out,
                                            int32_t *count) {
    host = h;
    *out = creators;
    *count = 3;
    return KILN_OK;
}
