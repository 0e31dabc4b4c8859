/* attention_onnx.cuh - ONNX Attention (opset 23) on the GPU: the general
 * kernels behind k_attention_onnx.c (the fused BERT/ViT path is
 * kiln::Attention, attention.cuh). */
#ifndef KILN_CUDA_ATTENTION_ONNX_CUH
#define KILN_CUDA_ATTENTION_ONNX_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The geometry of graph/ops_nn.h's kn_attention and the tensors' types. */
typedef struct kc_onnx_attn {
    int rank3;                      /* Q, K, V are [batch, seq, heads * size] */
    int64_t batch, q_heads, kv_heads, q_seq, kv_seq, past, total, head, v_head;
    float scale, softcap;
    int causal, qk_mode;
    kiln_dtype q_dt, k_dt, v_dt, pk_dt, pv_dt, y_dt, qk_dt;
    kiln_dtype mask_dt;             /* UNDEFINED: no mask */
    int mask_rank;
    int64_t mask_dims[4];
} kc_onnx_attn;

/* Y (and the QK output when qk != NULL) from Q, K, V, the mask and the past
 * caches (NULL when absent); scores: batch * q_heads * q_seq * total floats
 * of workspace. */
cudaError_t kc_onnx_attention(const void *q, const void *k, const void *v, const void *mask,
                              const void *past_k, const void *past_v, void *y, void *qk,
                              float *scores, const kc_onnx_attn *a, cudaStream_t stream);
/* A present cache: the past rows, then the new keys (value = 0) or values. */
cudaError_t kc_onnx_attention_present(const void *kv, const void *past, void *present,
                                      kiln_dtype present_dt, int value, const kc_onnx_attn *a,
                                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
