/* attention.cuh - the fused multi-head attention kernels behind
 * kiln::Attention (graph/fused.h): Y = softmax(scale * Q K^T + M) V per batch
 * and head, on [B, S, H, D] tensors read and written in place. */
#ifndef KILN_CUDA_ATTENTION_CUH
#define KILN_CUDA_ATTENTION_CUH

#include <cuda_runtime_api.h>

#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kc_attn {
    int64_t b, h, sq, sk, d, dv;
    float scale;
    kiln_dtype dt;          /* Q, K, V and Y */
    kiln_dtype mask_dt;     /* UNDEFINED: no mask */
    int64_t mstride[4];     /* mask element strides over [B, H, Sq, Sk], 0 = broadcast */
    int64_t mbatch;         /* mask batches (mask_batch_mod: a divisor of b); batch b
                               reads mask batch b % mbatch (0 or 1: b itself) */
    int64_t qrow, krow, vrow; /* elements between tokens: H*D, or 3*H*D when packed */
    int64_t qbatch, kbatch, vbatch; /* elements between batches; 0: sq (sk) rows */
    int64_t qhead, khead, vhead;    /* elements between heads; 0: d (dv), a head's row beside
                                       the next (heads-first K/V: sk * d; every kernel but
                                       wgmma's reads them, which falls back to mma1's) */
    int64_t group;          /* query heads per K/V head (grouped-query attention; 0 or 1:
                               none): query head h reads K/V head h / group */
    int kernel;             /* KC_ATT_*: which kernel (falls back when shapes refuse) */
    float softcap;          /* > 0: scores become softcap * tanh(scores / softcap) before
                               the mask (the general kernel only; the others refuse it) */
    int causal;             /* 1: key j of query row i is masked where j > i + sk - sq
                               (aligned to the last key), by position, besides the mask */
} kc_attn;

enum {
    KC_ATT_DIRECT = 0,
    KC_ATT_STAGED = 1,
    KC_ATT_GENERAL = 2,
    KC_ATT_MMA = 3,
    KC_ATT_MMA_WIDE = 4,
    KC_ATT_MMA1 = 5,      /* single pass over at most 128 keys, 64 query rows a block */
    KC_ATT_MMA1_WIDE = 6, /* the same, 128 query rows a block */
    KC_ATT_WGMMA = 7,     /* Hopper's wgmma (attention_wgmma.cu), 64 query rows a block */
    KC_ATT_WGMMA_WIDE = 8, /* the same, 128 query rows a block */
    KC_ATT_WGMMA_PIPE = 9  /* the same, persistent blocks with two stages */
};

/* Whether the tensor-core kernel takes these shapes (float16/bfloat16, head
 * dims multiples of 16 up to 128, keys up to 512); otherwise the general
 * kernel runs. */
int kc_attn_uses_tensor_cores(const kc_attn *a);
/* Whether the mma.sync kernel takes these shapes (float16/bfloat16, d = dv
 * in {32, 64, 128}); it also wants 16-byte aligned rows, else the general
 * kernel runs. */
int kc_attn_mma_shapes(const kc_attn *a);
/* Whether the single-pass mma.sync kernel takes these shapes (as the mma
 * kernel, with d = dv in {32, 64} and at most 128 keys). */
int kc_attn_mma1_shapes(const kc_attn *a);
/* Whether the wgmma kernel takes these shapes (float16/bfloat16, d = dv =
 * 64, at most 128 keys); it also wants a device of compute capability 9.0
 * (kc_attn_wgmma_device), 16-byte aligned rows and a mask that is one row
 * per batch or none, else the mma.sync kernels run. */
int kc_attn_wgmma_shapes(const kc_attn *a);
int kc_attn_wgmma_device(void);
cudaError_t kc_attention_wgmma_setup(void);
cudaError_t kc_attention_wgmma(const void *q, const void *k, const void *v, const void *mask, void *y,
                               const kc_attn *a, int kind, cudaStream_t stream);
/* The shared-memory opt-in of the tensor-core kernel; call before launching
 * (not during graph capture). */
cudaError_t kc_attention_setup(void);
cudaError_t kc_attention(const void *q, const void *k, const void *v, const void *mask, void *y,
                         const kc_attn *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* The mask's element offset of batch b (mask batch b % mbatch). */
__device__ __forceinline__ int64_t kc_attn_mask_b(const kc_attn &a, int64_t b) {
    return (a.mbatch > 1 ? b % a.mbatch : b) * a.mstride[0];
}
#endif
#endif
