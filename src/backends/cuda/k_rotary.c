/* k_rotary.c - kb_kernel glue of the CUDA RotaryEmbedding (rotary.cu), ONNX
 * opset 23 and com.microsoft; geometry from graph/rotary.h as the CPU
 * reference reads it. */
#include <string.h>

#include "graph/rotary.h"
#include "kc_common.h"
#include "rotary.cuh"

static bool rotary_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                            const kn_tinfo *out, int n_out) {
    if (n_in < 3 || n_in > 4 || n_out != 1 || !kc_is_float(in[0].dtype) ||
        out[0].dtype != in[0].dtype)
        return false;
    int rank[4];
    int64_t dims[4][KILN_MAX_DIMS];
    for (int i = 0; i < n_in; i++) {
        rank[i] = in[i].dtype != KILN_DTYPE_UNDEFINED ? in[i].rank : -1;
        memcpy(dims[i], in[i].dims, sizeof dims[i]);
    }
    kn_rotary g;
    if (kn_rotary_geometry(node, n_in, rank, (const int64_t (*)[KILN_MAX_DIMS])dims, &g) != KILN_OK)
        return false;
    if (in[g.cos].dtype != in[0].dtype || in[g.sin].dtype != in[0].dtype)
        return false;
    return g.pos < 0 || in[g.pos].dtype == KILN_DTYPE_INT64 || in[g.pos].dtype == KILN_DTYPE_INT32;
}

static kiln_status rotary_run(const kb_run *r) {
    int n_in = r->n_in < 4 ? r->n_in : 4;
    int rank[4];
    int64_t dims[4][KILN_MAX_DIMS];
    for (int i = 0; i < n_in; i++) {
        rank[i] = r->in[i].dtype != KILN_DTYPE_UNDEFINED ? r->in[i].rank : -1;
        memcpy(dims[i], r->in[i].dims, sizeof dims[i]);
    }
    kn_rotary g;
    KN_TRY(kn_rotary_geometry(r->node, n_in, rank, (const int64_t (*)[KILN_MAX_DIMS])dims, &g));
    kc_rotary k;
    memset(&k, 0, sizeof k);
    k.batch = g.batch;
    k.seq = g.seq;
    k.heads = g.heads;
    k.head = g.head;
    k.rot = g.rot;
    k.cache_rows = g.cache_rows;
    k.cache_stride = g.cache_stride;
    k.cache_batch = g.cache_batch;
    k.pos_mode = g.pos_mode;
    k.interleaved = g.interleaved;
    k.heads_first = g.heads_first;
    k.x_off = g.x_off, k.x_sb = g.x_sb, k.x_ss = g.x_ss, k.x_sh = g.x_sh;
    k.y_sb = g.y_sb, k.y_ss = g.y_ss, k.y_sh = g.y_sh;
    const kb_tensor *pos = g.pos >= 0 ? &r->in[g.pos] : NULL;
    KC_CUDA(r->node, kc_rotary_run(&k, r->in[0].dtype, r->in[0].data, r->in[g.cos].data,
                                   r->in[g.sin].data, pos ? pos->data : NULL,
                                   pos ? pos->dtype : KILN_DTYPE_INT64, r->out[0].data,
                                   kc_stream(r)));
    return KILN_OK;
}

const kb_kernel kb_cuda_rotary[] = {
    {"RotaryEmbedding", "", "cuda", rotary_supports, NULL, NULL, NULL, NULL, rotary_run},
    {"RotaryEmbedding", KN_MS_DOMAIN, "cuda", rotary_supports, NULL, NULL, NULL, NULL, rotary_run},
};
const size_t kb_cuda_rotary_count = KN_ARRAY_LEN(kb_cuda_rotary);
