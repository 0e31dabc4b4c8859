/* bev_pool.c - example plugin "BEVPool": bird's-eye-view pooling as in
 * BEVDet / BEVFusion (bev_pool_v2). Each camera pixel's feature vector is
 * weighted by the probability of each depth bin, and the weighted features of
 * every (pixel, depth) point that falls in the same BEV grid cell are summed.
 * The points are precomputed and sorted by cell; a cell's points form one
 * interval (start, length). CPU kernels for float32 and float16 (float32
 * accumulation) here; CUDA kernels in bev_pool_cuda.cu when the library is
 * built with CUDA (KILN_PLUGIN_CUDA), used when enqueue gets a stream.
 *
 * Inputs:  0 depth            [B, N, D, H, W]  float / float16
 *          1 feat             [B, N, H, W, C]  same type
 *          2 ranks_depth      [P] int32: flat index into depth
 *          3 ranks_feat       [P] int32: flat pixel index into feat (x C)
 *          4 ranks_bev        [P] int32: flat cell index b*H_bev*W_bev + y*W_bev + x
 *          5 interval_starts  [K] int32
 *          6 interval_lengths [K] int32
 * Output:  0 bev              [B, C, H_bev, W_bev], cells no point reaches are 0.
 * Fields:  bev_h, bev_w (int32). P and K are dynamic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_plugin.h"
#include "../common/plugin_half.h"
#ifdef KILN_PLUGIN_CUDA
#include "bev_pool_cuda.h"
#endif

#define EXPORT __attribute__((visibility("default")))

static const kiln_plugin_host *host;
static char plugin_ns[128];

static kiln_status fail(kiln_status st, const char *msg) {
    if (host)
        host->set_error(msg);
    return st;
}

typedef struct bev {
    kiln_plugin pub;
    int32_t hw[2];           /* bev_h, bev_w */
    kiln_field fields[2];
} bev;

static const kiln_plugin_core core_v1;
static const kiln_plugin_build build_v1;
static const kiln_plugin_runtime runtime_v1;

static kiln_status make(int32_t h, int32_t w, kiln_plugin_phase phase, kiln_plugin **out) {
    bev *b = calloc(1, sizeof *b);
    if (!b)
        return fail(KILN_ERR_OUT_OF_MEMORY, "BEVPool: out of memory");
    b->hw[0] = h;
    b->hw[1] = w;
    b->pub.abi_version = KILN_PLUGIN_ABI_VERSION;
    b->pub.struct_size = sizeof b->pub;
    b->pub.self = b;
    b->pub.core = &core_v1;
    b->pub.build = phase == KILN_PLUGIN_PHASE_BUILD ? &build_v1 : NULL;
    b->pub.runtime = &runtime_v1;
    *out = &b->pub;
    return KILN_OK;
}

static int32_t num_outputs(void *self) { return 1; }

static kiln_status output_dtypes(void *self, const kiln_dtype *in, int32_t n_in, kiln_dtype *out,
                                 int32_t n_out) {
    if (n_in != 7 || n_out != 1)
        return fail(KILN_ERR_INVALID_ARGUMENT, "BEVPool takes 7 inputs and gives 1 output");
    if ((in[0] != KILN_DTYPE_FLOAT && in[0] != KILN_DTYPE_FLOAT16) || in[1] != in[0])
        return fail(KILN_ERR_UNSUPPORTED,
                    "BEVPool: depth and feat must both be float or both float16");
    for (int i = 2; i < 7; i++)
        if (in[i] != KILN_DTYPE_INT32)
            return fail(KILN_ERR_UNSUPPORTED, "BEVPool: ranks and intervals must be int32");
    out[0] = in[0];
    return KILN_OK;
}

static kiln_status output_shapes(void *self, const kiln_dims_expr *in, int32_t n_in,
                                 kiln_dims_expr *out, int32_t n_out, const kiln_expr_builder *eb) {
    const bev *b = self;
    if (n_in != 7 || n_out != 1 || in[0].rank != 5 || in[1].rank != 5)
        return fail(KILN_ERR_SHAPE, "BEVPool: depth and feat must be 5-D ([B,N,D,H,W], "
                                    "[B,N,H,W,C])");
    out[0].rank = 4;
    out[0].d[0] = in[0].d[0];
    out[0].d[1] = in[1].d[4];
    out[0].d[2] = eb->constant(eb->ctx, b->hw[0]);
    out[0].d[3] = eb->constant(eb->ctx, b->hw[1]);
    return KILN_OK;
}

static int32_t supports_format(void *self, int32_t pos, const kiln_tensor_desc *d, int32_t n_in,
                               int32_t n_out) {
    if (d[pos].layout != KILN_LAYOUT_LINEAR)
        return 0;
    if (pos == 0)
        return d[0].dtype == KILN_DTYPE_FLOAT || d[0].dtype == KILN_DTYPE_FLOAT16;
    if (pos == 1 || pos == 7)
        return d[pos].dtype == d[0].dtype;
    return d[pos].dtype == KILN_DTYPE_INT32;
}

static int64_t numel(const kiln_tensor_desc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->rank; i++)
        n *= d->dims[i];
    return n;
}

static float ld(const void *p, int64_t i, int half) {
    return half ? half_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static kiln_status enqueue(void *self, const kiln_tensor_desc *in, const void *const *inputs,
                           int32_t n_in, const kiln_tensor_desc *out, void *const *outputs,
                           int32_t n_out, void *workspace, void *stream) {
    const bev *b = self;
    if (n_in != 7 || n_out != 1)
        return fail(KILN_ERR_INVALID_ARGUMENT, "BEVPool takes 7 inputs and gives 1 output");
    int half = in[0].dtype == KILN_DTYPE_FLOAT16;
    int64_t C = in[1].dims[4], n_depth = numel(&in[0]), n_pix = numel(&in[1]) / (C ? C : 1);
    int64_t P = numel(&in[2]), K = numel(&in[5]);
    int64_t cells = b->hw[0] * (int64_t)b->hw[1], n_cells = in[0].dims[0] * cells;
    const int32_t *rd = inputs[2], *rf = inputs[3], *rb = inputs[4], *st = inputs[5],
                  *len = inputs[6];
    if (numel(&in[3]) != P || numel(&in[4]) != P || numel(&in[6]) != K)
        return fail(KILN_ERR_SHAPE, "BEVPool: the three ranks must have the same length, and so "
                                    "must the interval starts and lengths");
    if (stream) { /* a GPU engine passes device pointers and its stream */
#ifdef KILN_PLUGIN_CUDA
        bev_pool_cuda_args a = {inputs[0], inputs[1], rd, rf, rb, st, len, outputs[0], P, K, C,
                                cells, n_cells, n_depth, n_pix, half};
        char msg[256];
        if (numel(&out[0]) != n_cells * C)
            return fail(KILN_ERR_SHAPE, "BEVPool: the output is not [B, C, bev_h, bev_w]");
        if (bev_pool_cuda(&a, stream, msg, sizeof msg) != 0)
            return fail(KILN_ERR_RUNTIME, msg);
        return KILN_OK;
#else
        return fail(KILN_ERR_UNSUPPORTED, "BEVPool: this build of the plugin has no CUDA kernels "
                                          "(built without CUDA); build the plan for the cpu "
                                          "backend");
#endif
    }
    size_t out_n = (size_t)numel(&out[0]);
    float *acc = workspace; /* float accumulation of one cell's C channels */
    if (half)
        memset(outputs[0], 0, out_n * 2);
    else
        memset(outputs[0], 0, out_n * 4);
    for (int64_t k = 0; k < K; k++) {
        int64_t s = st[k], l = len[k];
        if (s < 0 || l <= 0 || s > P - l) {
            char msg[200];
            snprintf(msg, sizeof msg, "BEVPool: interval %lld (start %lld, length %lld) lies "
                     "outside the %lld points", (long long)k, (long long)s, (long long)l,
                     (long long)P);
            return fail(KILN_ERR_RUNTIME, msg);
        }
        int64_t cell = rb[s];
        if (cell < 0 || cell >= n_cells)
            return fail(KILN_ERR_RUNTIME, "BEVPool: a BEV rank is outside the grid");
        for (int64_t c = 0; c < C; c++)
            acc[c] = 0.f;
        for (int64_t i = s; i < s + l; i++) {
            if (rd[i] < 0 || rd[i] >= n_depth || rf[i] < 0 || rf[i] >= n_pix)
                return fail(KILN_ERR_RUNTIME, "BEVPool: a depth or feature rank is out of range");
            float w = ld(inputs[0], rd[i], half);
            int64_t f0 = (int64_t)rf[i] * C;
            for (int64_t c = 0; c < C; c++)
                acc[c] += w * ld(inputs[1], f0 + c, half);
        }
        int64_t bi = cell / cells, hw = cell % cells;
        for (int64_t c = 0; c < C; c++) {
            size_t o = (size_t)((bi * C + c) * cells + hw);
            if (half)
                ((uint16_t *)outputs[0])[o] = float_to_half(acc[c]);
            else
                ((float *)outputs[0])[o] = acc[c];
        }
    }
    return KILN_OK;
}

static size_t workspace_size(void *self, const kiln_tensor_desc *in, int32_t n_in,
                             const kiln_tensor_desc *out, int32_t n_out) {
    return (size_t)(n_in > 1 && in[1].dims[4] > 0 ? in[1].dims[4] : 1) * sizeof(float);
}

static kiln_status get_fields(void *self, kiln_field_collection *out) {
    bev *b = self;
    b->fields[0] = (kiln_field){"bev_h", KILN_FIELD_INT32, 1, &b->hw[0]};
    b->fields[1] = (kiln_field){"bev_w", KILN_FIELD_INT32, 1, &b->hw[1]};
    out->count = 2;
    out->fields = b->fields;
    return KILN_OK;
}

static kiln_status clone(void *self, kiln_plugin **out) {
    const bev *b = self;
    return make(b->hw[0], b->hw[1],
                b->pub.build ? KILN_PLUGIN_PHASE_BUILD : KILN_PLUGIN_PHASE_RUNTIME, out);
}

static void destroy(void *self) { free(self); }

static const kiln_plugin_core core_v1 = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_core),
                                         "BEVPool", "1", plugin_ns};
static const kiln_plugin_build build_v1 = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_build),
                                           num_outputs, output_dtypes, output_shapes,
                                           supports_format, NULL, workspace_size};
static const kiln_plugin_runtime runtime_v1 = {KILN_PLUGIN_ABI_VERSION,
                                               sizeof(kiln_plugin_runtime), NULL, enqueue,
                                               get_fields, clone, destroy};

static const kiln_field_spec fields_v1[] = {
    {"bev_h", KILN_FIELD_INT32, 1, 1},
    {"bev_w", KILN_FIELD_INT32, 1, 1},
};

static kiln_status create(void *self, const char *layer, const kiln_field_collection *fields,
                          kiln_plugin_phase phase, kiln_plugin **out) {
    int32_t hw[2] = {-1, -1};
    for (int i = 0; fields && i < fields->count; i++) {
        const kiln_field *f = &fields->fields[i];
        int k = strcmp(f->name, "bev_h") == 0 ? 0 : strcmp(f->name, "bev_w") == 0 ? 1 : -1;
        if (k < 0)
            continue;
        if (f->type != KILN_FIELD_INT32 || f->length != 1)
            return fail(KILN_ERR_INVALID_ARGUMENT, "BEVPool: bev_h and bev_w must be one int32");
        memcpy(&hw[k], f->data, sizeof hw[k]);
    }
    if (hw[0] <= 0 || hw[1] <= 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "BEVPool layer '%s': fields bev_h and bev_w must be positive",
                 layer);
        return fail(KILN_ERR_INVALID_ARGUMENT, msg);
    }
    return make(hw[0], hw[1], phase, out);
}

static kiln_plugin_creator creator = {KILN_PLUGIN_ABI_VERSION, sizeof(kiln_plugin_creator),
                                      "BEVPool", "1", plugin_ns, fields_v1, 2, NULL, create};
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
