/* k_nn_gemm.c - the reference float GEMM (cache-blocked loops, OpenMP over
 * output tiles), batched MatMul with numpy broadcasting, and the epilogue
 * that fused kernels apply to GEMM and convolution results. */
#include <string.h>

#include "k_nn.h"

/* Tile sizes: a tile of C (TM x TN) is owned by one thread; TK bounds the
 * slice of B that is reused across the tile's rows so it stays in cache. */
enum { TM = 64, TN = 256, TK = 256 };

static inline float a_at(const float *a, int64_t lda, bool ta, int64_t i, int64_t p) {
    return ta ? a[p * lda + i] : a[i * lda + p];
}

/* C[i0:i1, j0:j1] += alpha * op(A)[i0:i1, k0:k1] B[k0:k1, j0:j1], B not transposed. */
static void tile_nn(bool ta, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k0,
                    int64_t k1, float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc) {
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4) { /* four rows share each loaded row of B */
        float *c0 = c + i * ldc, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
        for (int64_t p = k0; p < k1; p++) {
            const float *bp = b + p * ldb;
            float a0 = alpha * a_at(a, lda, ta, i, p), a1 = alpha * a_at(a, lda, ta, i + 1, p);
            float a2 = alpha * a_at(a, lda, ta, i + 2, p), a3 = alpha * a_at(a, lda, ta, i + 3, p);
#pragma omp simd
            for (int64_t j = j0; j < j1; j++) {
                float bv = bp[j];
                c0[j] += a0 * bv;
                c1[j] += a1 * bv;
                c2[j] += a2 * bv;
                c3[j] += a3 * bv;
            }
        }
    }
    for (; i < i1; i++) {
        float *ci = c + i * ldc;
        for (int64_t p = k0; p < k1; p++) {
            const float *bp = b + p * ldb;
            float av = alpha * a_at(a, lda, ta, i, p);
#pragma omp simd
            for (int64_t j = j0; j < j1; j++)
                ci[j] += av * bp[j];
        }
    }
}

/* Same with B stored transposed (n x k): dot products along k. */
static void tile_nt(bool ta, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k0,
                    int64_t k1, float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc) {
    for (int64_t i = i0; i < i1; i++) {
        float *ci = c + i * ldc;
        for (int64_t j = j0; j < j1; j++) {
            const float *bj = b + j * ldb;
            float s = 0.f;
            if (!ta) {
                const float *ai = a + i * lda;
#pragma omp simd reduction(+ : s)
                for (int64_t p = k0; p < k1; p++)
                    s += ai[p] * bj[p];
            } else {
                for (int64_t p = k0; p < k1; p++)
                    s += a[p * lda + i] * bj[p];
            }
            ci[j] += alpha * s;
        }
    }
}

typedef struct sgemm_tiles_ctx {
    bool ta;
    bool tb;
    int64_t m;
    int64_t n;
    int64_t k;
    int64_t nt;
    float alpha;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float beta;
    float *c;
    int64_t ldc;
} sgemm_tiles_ctx;

static void sgemm_tiles(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const sgemm_tiles_ctx *c_ = vc;
    bool ta = c_->ta;
    bool tb = c_->tb;
    int64_t m = c_->m;
    int64_t n = c_->n;
    int64_t k = c_->k;
    int64_t nt = c_->nt;
    float alpha = c_->alpha;
    const float *a = c_->a;
    int64_t lda = c_->lda;
    const float *b = c_->b;
    int64_t ldb = c_->ldb;
    float beta = c_->beta;
    float *c = c_->c;
    int64_t ldc = c_->ldc;
    (void)tid;
    for (int64_t t = lo_; t < hi_; t++) {
        int64_t i0 = (t / nt) * TM, j0 = (t % nt) * TN;
        int64_t i1 = i0 + TM < m ? i0 + TM : m, j1 = j0 + TN < n ? j0 + TN : n;
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = j0; j < j1; j++)
                c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
        for (int64_t k0 = 0; k0 < k; k0 += TK) {
            int64_t k1 = k0 + TK < k ? k0 + TK : k;
            if (tb)
                tile_nt(ta, i0, i1, j0, j1, k0, k1, alpha, a, lda, b, ldb, c, ldc);
            else
                tile_nn(ta, i0, i1, j0, j1, k0, k1, alpha, a, lda, b, ldb, c, ldc);
        }
    }
}

void kb_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
              int threads) {
    if (m <= 0 || n <= 0)
        return;
    int64_t mt = (m + TM - 1) / TM, nt = (n + TN - 1) / TN;
    int64_t tiles = mt * nt;
    int nth = threads > 1 && (double)m * (double)n * (double)k > 65536.0 ? threads : 1;
    {
        sgemm_tiles_ctx c_ = {ta, tb, m, n, k, nt, alpha, a, lda, b, ldb, beta, c, ldc};
        kn_parallel_for(nth, tiles, 1, sgemm_tiles, &c_);
    }
}

typedef struct epilogue_rows_ctx {
    const kb_epilogue *ep;
    float *y;
    const float *res;
    int64_t len;
    int64_t channels;
} epilogue_rows_ctx;

static void epilogue_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const epilogue_rows_ctx *c_ = vc;
    const kb_epilogue *ep = c_->ep;
    float *y = c_->y;
    const float *res = c_->res;
    int64_t len = c_->len;
    int64_t channels = c_->channels;
    (void)tid;
    for (int64_t r = lo_; r < hi_; r++) {
        float *yr = y + r * len;
        float bv = ep->bias ? ep->bias[r % channels] : 0.f;
        const float *rr = res ? res + r * len : NULL;
        for (int64_t j = 0; j < len; j++) {
            float v = yr[j] + bv;
            if (rr)
                v += rr[j];
            yr[j] = kb_act_apply(ep->act, v, ep->alpha, ep->beta);
        }
    }
}

void kb_epilogue_rows(const kb_epilogue *ep, float *y, const float *res, int64_t rows, int64_t len,
                      int64_t channels, int threads) {
    if (!ep || (!ep->bias && !res && ep->act == KB_ACT_NONE))
        return;
    int nth = threads > 1 && rows * len > 16384 ? threads : 1;
    {
        epilogue_rows_ctx c_ = {ep, y, res, len, channels};
        kn_parallel_for(nth, rows, 0, epilogue_rows, &c_);
    }
}

/* Offset of the matrix at batch coordinates `coord` (of the output's batch
 * rank br) in a tensor whose batch dims are dims[0:rank] (right-aligned,
 * size-1 dims broadcast). */
static int64_t batch_offset(const int64_t *coord, int br, const int64_t *dims, int rank,
                            int64_t mat) {
    int64_t off = 0;
    for (int i = 0; i < rank; i++) {
        int64_t ci = coord[br - rank + i];
        off = off * dims[i] + (dims[i] == 1 ? 0 : ci);
    }
    return off * mat;
}

typedef struct matmul_batches_ctx {
    const kb_tensor *a;
    const kb_tensor *b;
    kb_tensor *y;
    int64_t m;
    int64_t n;
    int64_t k;
    int abr;
    int bbr;
    int br;
    const float *A;
    const float *B;
    float *Y;
    bool outer;
    int threads;
} matmul_batches_ctx;

static void matmul_batches(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const matmul_batches_ctx *c_ = vc;
    const kb_tensor *a = c_->a;
    const kb_tensor *b = c_->b;
    kb_tensor *y = c_->y;
    int64_t m = c_->m;
    int64_t n = c_->n;
    int64_t k = c_->k;
    int abr = c_->abr;
    int bbr = c_->bbr;
    int br = c_->br;
    const float *A = c_->A;
    const float *B = c_->B;
    float *Y = c_->Y;
    bool outer = c_->outer;
    int threads = c_->threads;
    (void)tid;
    for (int64_t bi = lo_; bi < hi_; bi++) {
        int64_t coord[KILN_MAX_DIMS], rest = bi;
        for (int d = br - 1; d >= 0; d--) {
            coord[d] = rest % y->dims[d];
            rest /= y->dims[d];
        }
        const float *ab = A + batch_offset(coord, br, a->dims, abr, m * k);
        const float *bb = B + batch_offset(coord, br, b->dims, bbr, k * n);
        kb_sgemm(false, false, m, n, k, 1.f, ab, k, bb, n, 0.f, Y + bi * m * n, n,
                 outer ? 1 : threads);
    }
}

void kb_matmul_f32(const kb_tensor *a, const kb_tensor *b, kb_tensor *y, int threads) {
    int64_t m = a->rank == 1 ? 1 : a->dims[a->rank - 2], k = a->dims[a->rank - 1];
    int64_t n = b->rank == 1 ? 1 : b->dims[b->rank - 1];
    int abr = a->rank > 2 ? a->rank - 2 : 0, bbr = b->rank > 2 ? b->rank - 2 : 0;
    int br = y->rank - (a->rank == 1 ? 0 : 1) - (b->rank == 1 ? 0 : 1);
    int64_t batches = kn_numel(br, y->dims);
    const float *A = a->data, *B = b->data;
    float *Y = y->data;
    bool outer = batches >= 2 * threads && m * n * k < (1 << 18);
    int nth = outer && threads > 1 ? threads : 1;
    {
        matmul_batches_ctx c_ = {a, b, y, m, n, k, abr, bbr, br, A, B, Y, outer, threads};
        kn_parallel_for(nth, batches, 0, matmul_batches, &c_);
    }
}
