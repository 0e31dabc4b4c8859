/* k_attention_onnx.c - ONNX Attention (opset 23) on the CUDA backend:
 * grouped-query heads, 3-D or 4-D Q/K/V, bool or additive attention mask,
 * causal mask aligned to the past cache, softcap, present key/value caches
 * and the QK output (modes 0 and 3), through the general kernels of
 * attention_onnx.cu. The geometry and its checks are the CPU reference's
 * (kb_nn_attention_geom). */
#include <string.h>

#include "attention_onnx.cuh"
#include "backends/cpu/k_nn.h"
#include "kc_common.h"

static bool oa_real(kiln_dtype t) { return kc_is_float(t) || t == KILN_DTYPE_DOUBLE; }

static bool oa_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    if (n_in < 3 || n_out < 1)
        return false;
    for (int i = 0; i < n_in && i < 6; i++) {
        if (in[i].dtype == KILN_DTYPE_UNDEFINED && i >= 3)
            continue;
        if (!oa_real(in[i].dtype) && !(i == 3 && in[i].dtype == KILN_DTYPE_BOOL))
            return false;
    }
    for (int o = 0; o < n_out && o < 4; o++)
        if (out[o].dtype != KILN_DTYPE_UNDEFINED && !oa_real(out[o].dtype))
            return false;
    return true;
}

static kiln_status oa_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                              int n_in, const kb_tensor *out, int n_out, void **inst,
                              size_t *workspace) {
    kn_attention a;
    KN_TRY(kb_nn_attention_geom(node, in, n_in, &a));
    *workspace = (size_t)(a.batch * a.q_heads * a.q_seq * a.total) * sizeof(float);
    return KILN_OK;
}

static const void *oa_in(const kb_run *r, int i) {
    return r->n_in > i && r->in[i].data ? r->in[i].data : NULL;
}

static kiln_status oa_run(const kb_run *r) {
    kn_attention g;
    KN_TRY(kb_nn_attention_geom(r->node, r->in, r->n_in, &g));
    size_t need = (size_t)(g.batch * g.q_heads * g.q_seq * g.total) * sizeof(float);
    if (r->workspace_size < need)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small (%zu < %zu)",
                             r->workspace_size, need);
    kc_onnx_attn a;
    memset(&a, 0, sizeof a);
    a.rank3 = g.rank3;
    a.batch = g.batch, a.q_heads = g.q_heads, a.kv_heads = g.kv_heads, a.q_seq = g.q_seq;
    a.kv_seq = g.kv_seq, a.past = g.past, a.total = g.total, a.head = g.head, a.v_head = g.v_head;
    a.scale = g.scale, a.softcap = g.softcap, a.causal = g.causal, a.qk_mode = g.qk_mode;
    a.q_dt = r->in[0].dtype, a.k_dt = r->in[1].dtype, a.v_dt = r->in[2].dtype;
    const void *mask = oa_in(r, 3), *pk = oa_in(r, 4), *pv = oa_in(r, 5);
    a.mask_dt = mask ? r->in[3].dtype : KILN_DTYPE_UNDEFINED;
    if (mask) {
        if (r->in[3].rank < 1 || r->in[3].rank > 4)
            return kn_node_error(r->node, KILN_ERR_SHAPE, "attn_mask has rank %d (1 to 4)",
                                 r->in[3].rank);
        a.mask_rank = r->in[3].rank;
        memcpy(a.mask_dims, r->in[3].dims, sizeof(int64_t) * (size_t)a.mask_rank);
    }
    a.pk_dt = pk ? r->in[4].dtype : a.k_dt;
    a.pv_dt = pv ? r->in[5].dtype : a.v_dt;
    a.y_dt = r->out[0].dtype;
    void *qk = r->n_out > 3 && r->out[3].data ? r->out[3].data : NULL;
    a.qk_dt = qk ? r->out[3].dtype : KILN_DTYPE_UNDEFINED;
    if (qk && a.qk_mode != 0 && a.qk_mode != 3)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "qk_matmul_output_mode %d (0 or 3 only)",
                             a.qk_mode);
    cudaStream_t st = kc_stream(r);
    for (int o = 1; o <= 2; o++)
        if (r->n_out > o && r->out[o].data)
            KC_CUDA(r->node, kc_onnx_attention_present(r->in[o].data, o == 1 ? pk : pv,
                                                       r->out[o].data, r->out[o].dtype, o == 2, &a,
                                                       st));
    KC_CUDA(r->node, kc_onnx_attention(r->in[0].data, r->in[1].data, r->in[2].data, mask, pk, pv,
                                       r->out[0].data, qk, (float *)r->workspace, &a, st));
    return KILN_OK;
}

const kb_kernel kb_cuda_attn_onnx[] = {
    {"Attention", "", "cuda", oa_supports, NULL, NULL, oa_prepare, NULL, oa_run},
};
const size_t kb_cuda_attn_onnx_count = KN_ARRAY_LEN(kb_cuda_attn_onnx);
