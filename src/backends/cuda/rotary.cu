/* rotary.cu - RotaryEmbedding kernels: one thread per (token, head, pair)
 * of rotated dims, one per element of the dims that pass through. */
#include "kc_dev.cuh"
#include "rotary.cuh"

__device__ __forceinline__ int64_t rot_at(const kc_rotary &g, int64_t b, int64_t s, int64_t h) {
    return g.x_off + b * g.x_sb + s * g.x_ss + h * g.x_sh;
}

__device__ __forceinline__ int64_t rot_y_at(const kc_rotary &g, int64_t b, int64_t s, int64_t h) {
    return b * g.y_sb + s * g.y_ss + h * g.y_sh;
}

__global__ void rotary_kernel(const kc_rotary g, kiln_dtype dt, const void *x, const void *cs,
                              const void *sn, const void *pos, kiln_dtype pt, void *y) {
    const int64_t half = g.rot / 2, rest = g.head - g.rot, per_head = half + rest;
    const int64_t total = g.batch * g.seq * g.heads * per_head;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = i % per_head, t = i / per_head;
        int64_t h = t % g.heads, bs = t / g.heads, s = bs % g.seq, b = bs / g.seq;
        int64_t base = rot_at(g, b, s, h), yb = rot_y_at(g, b, s, h);
        if (j >= half) { /* a dim past the rotated ones */
            int64_t d = g.rot + (j - half);
            kc_st_f(y, dt, yb + d, kc_ld_f(x, dt, base + d));
            continue;
        }
        int64_t row = g.pos_mode == 0   ? (g.cache_batch == 1 ? 0 : b) * g.seq + s
                      : g.pos_mode == 2 ? kc_ld_i(pos, pt, 0) + s
                                        : kc_ld_i(pos, pt, b * g.seq + s);
        int64_t i1 = g.interleaved ? 2 * j : j, i2 = g.interleaved ? 2 * j + 1 : j + half;
        float c = 0.f, sv = 0.f, x1 = kc_ld_f(x, dt, base + i1), x2 = kc_ld_f(x, dt, base + i2);
        if (row >= 0 && row < g.cache_rows) {
            c = kc_ld_f(cs, dt, row * g.cache_stride + j);
            sv = kc_ld_f(sn, dt, row * g.cache_stride + j);
        }
        kc_st_f(y, dt, yb + i1, c * x1 - sv * x2);
        kc_st_f(y, dt, yb + i2, sv * x1 + c * x2);
    }
}

extern "C" cudaError_t kc_rotary_run(const kc_rotary *g, kiln_dtype dt, const void *x,
                                     const void *cos_cache, const void *sin_cache, const void *pos,
                                     kiln_dtype pt, void *y, cudaStream_t stream) {
    if (!g || g->rot < 0 || g->rot % 2 != 0 || g->rot > g->head || g->rot / 2 > g->cache_stride ||
        g->pos_mode < 0 || g->pos_mode > 2)
        return cudaErrorInvalidValue;
    int64_t total = g->batch * g->seq * g->heads * (g->head - g->rot / 2);
    if (total <= 0)
        return cudaSuccess;
    if (!x || !cos_cache || !sin_cache || !y || (g->pos_mode != 0 && !pos))
        return cudaErrorInvalidValue;
    rotary_kernel<<<kc_blocks(total, KC_THREADS), KC_THREADS, 0, stream>>>(*g, dt, x, cos_cache,
                                                                          sin_cache, pos, pt, y);
    return cudaGetLastError();
}
