/* trust_plugin.c - "TrustScale" (y = TRUST_SCALE * x on float32), built twice
 * with different scales and tags (two builds of one plugin identity) for the
 * plugin-trust tests. Its constructor appends "<tag>\n" to the file named by
 * KILN_TEST_TRUST_MARKER, so a test can tell whether, and which, code of it
 * ran; with KILN_TEST_TRUST_FAIL_CREATE set its runtime-phase create fails
 * (a plan that fails after its library loaded). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_plugin.h"

#ifndef TRUST_SCALE
#define TRUST_SCALE 2.0f
#endif
#ifndef TRUST_TAG
#define TRUST_TAG "a"
#endif

#define EXPORT __attribute__((visibility("default")))

static const kiln_plugin_host *host;

__attribute__((constructor)) static void mark_loaded(void) {
    const char *path = getenv("KILN_TEST_TRUST_MARKER");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (f) {
        fprintf(f, "%s\n", TRUST_TAG);
        fclose(f);
    }
}

static const kiln_plugin_core core_v1 = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_core),
                                         "TrustScale", "1", ""};
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

static int32_t num_outputs(void *self) {
    (void)self;
    return 1;
}

static kiln_status output_dtypes(void *self, const kiln_dtype *in, int32_t n_in, kiln_dtype *out,
                                 int32_t n_out) {
    (void)self, (void)n_in, (void)n_out;
    out[0] = in[0];
    return KILN_OK;
}

static kiln_status output_shapes(void *self, const kiln_dims_expr *in, int32_t n_in,
                                 kiln_dims_expr *out, int32_t n_out, const kiln_expr_builder *eb) {
    (void)self, (void)n_in, (void)n_out, (void)eb;
    out[0] = in[0];
    return KILN_OK;
}

static int32_t supports_format(void *self, int32_t pos, const kiln_tensor_desc *d, int32_t n_in,
                               int32_t n_out) {
    (void)self, (void)n_in, (void)n_out;
    return d[pos].dtype == KILN_DTYPE_FLOAT && d[pos].layout == KILN_LAYOUT_LINEAR;
}

static kiln_status enqueue(void *self, const kiln_tensor_desc *in, const void *const *inputs,
                           int32_t n_in, const kiln_tensor_desc *out, void *const *outputs,
                           int32_t n_out, void *workspace, void *stream) {
    (void)self, (void)n_in, (void)out, (void)n_out, (void)workspace, (void)stream;
    int64_t n = 1;
    for (int d = 0; d < in[0].rank; d++)
        n *= in[0].dims[d];
    const float *x = inputs[0];
    float *y = outputs[0];
    for (int64_t i = 0; i < n; i++)
        y[i] = TRUST_SCALE * x[i];
    return KILN_OK;
}

static kiln_status get_fields(void *self, kiln_field_collection *out) {
    (void)self;
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
    (void)self, (void)layer, (void)fields;
    if (phase == KILN_PLUGIN_PHASE_RUNTIME && getenv("KILN_TEST_TRUST_FAIL_CREATE")) {
        host->set_error("TrustScale: runtime create refused (KILN_TEST_TRUST_FAIL_CREATE)");
        return KILN_ERR_PLUGIN;
    }
    return make(phase, out);
}

static const kiln_plugin_creator creator = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_creator),
                                            "TrustScale", "1", "", NULL, 0, NULL, create};
static const kiln_plugin_creator *const creators[] = {&creator};

EXPORT kiln_status kiln_plugin_get_creators(const kiln_plugin_host *h, uint32_t host_abi,
                                            const char *ns,
                                            const kiln_plugin_creator *const **out,
                                            int32_t *count) {
    (void)host_abi, (void)ns;
    host = h;
    *out = creators;
    *count = 1;
    return KILN_OK;
}
