/* attention_onnx.cu - ONNX Attention (opset 23), general kernels: one warp a
 * query row (batch, head, row). Scores go through a float workspace row of
 * `total` keys (past cache first); float arithmetic throughout, as the CPU
 * reference's order of steps: scale, softcap, QK output (mode 0), the mask
 * (bool: keep or -inf; real: added; keys past its last dim masked) and the
 * causal mask aligned to the past cache, softmax (a row with every key
 * masked gives zeros), QK output (mode 3), weighted sum of values. Grouped
 * query heads share KV head h / (q_heads / kv_heads). */
#include "attention_onnx.cuh"
#include "kc_dev.cuh"

#define OA_WARPS 4

__device__ __forceinline__ int64_t oa_q_row(const kc_onnx_attn &a, int64_t b, int64_t h, int64_t i) {
    return a.rank3 ? (b * a.q_seq + i) * a.q_heads * a.head + h * a.head
                   : ((b * a.q_heads + h) * a.q_seq + i) * a.head;
}

/* Row j of the present keys or values: which tensor (past or new) and its offset. */
__device__ __forceinline__ int64_t oa_kv_row(const kc_onnx_attn &a, int value, int64_t b, int64_t h,
                                             int64_t j, int *from_past) {
    const int64_t size = value ? a.v_head : a.head;
    *from_past = j < a.past;
    if (j < a.past)
        return ((b * a.kv_heads + h) * a.past + j) * size;
    j -= a.past;
    return a.rank3 ? (b * a.kv_seq + j) * a.kv_heads * size + h * size
                   : ((b * a.kv_heads + h) * a.kv_seq + j) * size;
}

__device__ __forceinline__ float oa_mask(const kc_onnx_attn &a, const void *m, int64_t b, int64_t h,
                                         int64_t i, int64_t j) {
    if (!m)
        return 0.f;
    if (j >= a.mask_dims[a.mask_rank - 1])
        return -INFINITY;
    const int64_t coord[4] = {b, h, i, j};
    int64_t off = 0;
    for (int d = 0; d < a.mask_rank; d++) {
        const int64_t md = a.mask_dims[d], c = coord[4 - a.mask_rank + d];
        off = off * md + (md == 1 ? 0 : c);
    }
    if (a.mask_dt == KILN_DTYPE_BOOL)
        return ((const uint8_t *)m)[off] ? 0.f : -INFINITY;
    return kc_ld_f(m, a.mask_dt, off);
}

__global__ void __launch_bounds__(OA_WARPS * 32)
    onnx_attention_kernel(const void *__restrict__ q, const void *__restrict__ k,
                          const void *__restrict__ v, const void *__restrict__ mask,
                          const void *__restrict__ pk, const void *__restrict__ pv, void *y,
                          void *qk, float *scores, const kc_onnx_attn a, int64_t rows) {
    const int lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * OA_WARPS + threadIdx.x / 32;
    if (row >= rows)
        return;
    const int64_t i = row % a.q_seq, h = row / a.q_seq % a.q_heads, b = row / (a.q_seq * a.q_heads);
    const int64_t kvh = h / (a.q_heads / a.kv_heads);
    const int64_t qo = oa_q_row(a, b, h, i), qk_off = row * a.total;
    float *p = scores + row * a.total;
    float mx = -INFINITY;
    int any = 0;
    for (int64_t j = lane; j < a.total; j += 32) {
        int past = 0;
        const int64_t ko = oa_kv_row(a, 0, b, kvh, j, &past);
        const void *kt = past ? pk : k;
        const kiln_dtype kd = past ? a.pk_dt : a.k_dt;
        float dot = 0.f;
        for (int64_t d = 0; d < a.head; d++)
            dot += kc_ld_f(q, a.q_dt, qo + d) * kc_ld_f(kt, kd, ko + d);
        float s = a.scale * dot;
        if (a.softcap > 0.f)
            s = a.softcap * tanhf(s / a.softcap);
        float bias = oa_mask(a, mask, b, h, i, j);
        if (a.causal && j > i + a.past)
            bias = -INFINITY;
        if (qk && a.qk_mode == 0)
            kc_st_f(qk, a.qk_dt, qk_off + j, s);
        p[j] = s + bias;
        if (bias != -INFINITY) {
            any = 1;
            mx = fmaxf(mx, p[j]);
        }
    }
    mx = kc_warp_max(mx);
    any = __any_sync(0xffffffffu, any);
    float sum = 0.f;
    for (int64_t j = lane; j < a.total; j += 32) {
        const float e = any && p[j] != -INFINITY ? __expf(p[j] - mx) : 0.f;
        p[j] = e;
        sum += e;
    }
    sum = kc_warp_sum(sum);
    for (int64_t j = lane; j < a.total; j += 32) {
        p[j] = sum > 0.f ? p[j] / sum : 0.f;
        if (qk && a.qk_mode == 3)
            kc_st_f(qk, a.qk_dt, qk_off + j, p[j]);
    }
    __syncwarp();
    const int64_t yo = a.rank3 ? (b * a.q_seq + i) * a.q_heads * a.v_head + h * a.v_head
                               : ((b * a.q_heads + h) * a.q_seq + i) * a.v_head;
    for (int64_t e = lane; e < a.v_head; e += 32) {
        float acc = 0.f;
        for (int64_t j = 0; j < a.total; j++) {
            const float pj = p[j];
            if (pj == 0.f)
                continue;
            int past = 0;
            const int64_t vo = oa_kv_row(a, 1, b, kvh, j, &past);
            acc += pj * kc_ld_f(past ? pv : v, past ? a.pv_dt : a.v_dt, vo + e);
        }
        kc_st_f(y, a.y_dt, yo + e, acc);
    }
}

__global__ void onnx_present_kernel(const void *kv, kiln_dtype kv_dt, const void *past,
                                    kiln_dtype past_dt, void *present, kiln_dtype dt, int value,
                                    const kc_onnx_attn a, int64_t n) {
    const int64_t size = value ? a.v_head : a.head;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
         x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = x % size, j = x / size % a.total, h = x / (size * a.total) % a.kv_heads,
                      b = x / (size * a.total * a.kv_heads);
        int from_past = 0;
        const int64_t off = oa_kv_row(a, value, b, h, j, &from_past);
        kc_st_f(present, dt, x,
                kc_ld_f(from_past ? past : kv, from_past ? past_dt : kv_dt, off + e));
    }
}

extern "C" cudaError_t kc_onnx_attention(const void *q, const void *k, const void *v,
                                         const void *mask, const void *past_k, const void *past_v,
                                         void *y, void *qk, float *scores, const kc_onnx_attn *a,
                                         cudaStream_t stream) {
    if (!a || a->kv_heads < 1 || a->q_heads % a->kv_heads ||
        (mask && (a->mask_rank < 1 || a->mask_rank > 4)))
        return cudaErrorInvalidValue;
    const int64_t rows = a->batch * a->q_heads * a->q_seq;
    if (rows <= 0)
        return cudaSuccess;
    const int64_t blocks = (rows + OA_WARPS - 1) / OA_WARPS;
    if (blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    onnx_attention_kernel<<<(unsigned)blocks, OA_WARPS * 32, 0, stream>>>(
        q, k, v, mask, past_k, past_v, y, qk, scores, *a, rows);
    return cudaGetLastError();
}

extern "C" cudaError_t kc_onnx_attention_present(const void *kv, const void *past, void *present,
                                                 kiln_dtype present_dt, int value,
                                                 const kc_onnx_attn *a, cudaStream_t stream) {
    const int64_t n = a->batch * a->kv_heads * a->total * (value ? a->v_head : a->head);
    if (n <= 0)
        return cudaSuccess;
    onnx_present_kernel<<<kc_blocks(n, KC_THREADS), KC_THREADS, 0, stream>>>(
        kv, value ? a->v_dt : a->k_dt, past, value ? a->pv_dt : a->pk_dt, present, present_dt,
        value, *a, n);
    return cudaGetLastError();
}
