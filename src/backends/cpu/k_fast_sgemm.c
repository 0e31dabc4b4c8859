/* k_fast_sgemm.c - MatMul and kiln::MatMul as one library sgemm call on the
 * tensors as they lie (A's batch dims folded into M, a B without batch
 * dims), with kiln's own epilogue: the residual Z copied into Y first (the
 * sgemm adds onto it, beta 1), then bias and activation row by row, GELU
 * through the AVX2 loop of k_vec.h. Tactics "sgemm" (oneDNN's dnnl_sgemm)
 * and "blas" (OpenBLAS's cblas_sgemm, where the build has it). On AVX2
 * machines oneDNN 2.x's matmul primitive is gemm:jit, which took 18 ms for
 * BERT's 128x768x3072 product with its bias where dnnl_sgemm alone takes
 * 9.7 and OpenBLAS 7.8 (docs/decisions.md, issue 35 session 25): the
 * builder times these beside the primitive and keeps the faster.
 *
 * Threads: with one, a single call over the whole product; with more, Y's
 * columns are cut into slabs (multiples of 16) over kiln's pool, each slab
 * one single-threaded sgemm call and its own epilogue. */
#ifdef KILN_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/k_fast.h"
#include "backends/cpu/k_vec.h"
#include "graph/fused.h"

#ifdef KILN_HAVE_OPENBLAS
#include <cblas.h>
#endif

typedef struct sg_inst {
    int64_t m, k, n;
    bool blas, has_bias, has_z;
    kb_act act;
    float alpha, beta;
} sg_inst;

static int64_t numel(int rank, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= d[i];
    return n;
}

bool kf_sgemm_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                       int n_out) {
    if (!kf_matmul_supports(n, in, n_in, out, n_out))
        return false;
    for (int i = 0; i < in[1].rank - 2; i++) /* B one matrix, shared by every row of A */
        if (in[1].dims[i] != 1)
            return false;
    if (n_in > 2 && in[2].dtype == KILN_DTYPE_FLOAT && in[2].dims[in[2].rank - 1] != out[0].dims[out[0].rank - 1])
        return false;
    /* sgemm takes int dims on some builds: keep them in range */
    return numel(out[0].rank - 1, out[0].dims) < (1 << 30) && in[0].dims[in[0].rank - 1] < (1 << 30) &&
           out[0].dims[out[0].rank - 1] < (1 << 30);
}

static kiln_status prepare(const kn_node *n, const kb_tensor *in, int n_in, const kb_tensor *out,
                           void **inst, size_t *workspace, bool blas) {
    sg_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    const kb_tensor *y = &out[0];
    s->n = y->dims[y->rank - 1];
    s->m = numel(y->rank - 1, y->dims);
    s->k = in[0].dims[in[0].rank - 1];
    s->blas = blas;
    bool fused = strcmp(n->domain, KN_DOMAIN_KILN) == 0;
    s->has_bias = fused && n_in > 2 && in[2].dtype == KILN_DTYPE_FLOAT;
    s->has_z = fused && n_in > 3 && in[3].dtype == KILN_DTYPE_FLOAT;
    s->act = fused ? kf_act_from_node(n, "alpha", "beta", &s->alpha, &s->beta) : KB_ACT_NONE;
    if (s->act == KB_ACT_INVALID) {
        kn_free(s);
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "unknown activation");
    }
    *inst = s;
    *workspace = 0;
    return KILN_OK;
}

kiln_status kf_sgemm_prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                             const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)n_out;
    return prepare(n, in, n_in, out, inst, workspace, false);
}

#ifdef KILN_HAVE_OPENBLAS
kiln_status kf_blas_prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                            const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    (void)state, (void)n_out;
    return prepare(n, in, n_in, out, inst, workspace, true);
}
#endif

void kf_sgemm_release(void *inst) { kn_free(inst); }

typedef struct sg_ctx {
    const sg_inst *s;
    const float *a, *b, *bias, *z;
    float *y;
    int64_t slab; /* columns a job */
} sg_ctx;

/* Columns [c0, c0 + w) of Y: product, then the epilogue. One thread. */
static void slab(const sg_ctx *c, int64_t c0, int64_t w) {
    const sg_inst *s = c->s;
    int64_t m = s->m, n = s->n, k = s->k;
    float *y = c->y + c0;
    if (c->z)
        for (int64_t i = 0; i < m; i++)
            memcpy(y + i * n, c->z + i * n + c0, sizeof(float) * (size_t)w);
    float beta = c->z ? 1.f : 0.f;
#ifdef KILN_HAVE_OPENBLAS
    if (s->blas)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)w, (int)k, 1.f, c->a,
                    (int)k, c->b + c0, (int)n, beta, y, (int)n);
    else
#endif
        dnnl_sgemm('N', 'N', m, w, k, 1.f, c->a, k, c->b + c0, n, beta, y, n);
    if (!c->bias && s->act == KB_ACT_NONE)
        return;
    bool gelu = s->act == KB_ACT_GELU || s->act == KB_ACT_GELU_TANH;
    for (int64_t i = 0; i < m; i++) {
        float *row = y + i * n;
        if (c->bias) {
            const float *bb = c->bias + c0;
#pragma omp simd
            for (int64_t j = 0; j < w; j++)
                row[j] += bb[j];
        }
        if (gelu)
            kv_gelu(row, (size_t)w, s->act == KB_ACT_GELU_TANH);
        else
            kb_act_apply_n(s->act, row, (size_t)w, s->alpha, s->beta);
    }
}

static void slab_jobs(void *vc, int64_t lo, int64_t hi, int tid) {
    const sg_ctx *c = vc;
    (void)tid;
    for (int64_t j = lo; j < hi; j++) {
        int64_t c0 = j * c->slab, w = c->s->n - c0 < c->slab ? c->s->n - c0 : c->slab;
        slab(c, c0, w);
    }
}

kiln_status kf_sgemm_run(const kb_run *r) {
    const sg_inst *s = r->inst;
    if (!s)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "not prepared");
    sg_ctx c = {s, r->in[0].data, r->in[1].data, s->has_bias ? r->in[2].data : NULL,
                s->has_z ? r->in[3].data : NULL, r->out[0].data, s->n};
    int nth = r->threads > 1 && s->m * s->n * s->k > (1 << 18) ? r->threads : 1;
    int64_t jobs = 1;
    if (nth > 1) { /* slabs of 16-column multiples, at least one per thread */
        int64_t w = (s->n + nth - 1) / nth;
        w = (w + 15) / 16 * 16;
        c.slab = w > 0 ? w : 16;
        jobs = (s->n + c.slab - 1) / c.slab;
    }
    /* each call is one thread's work: no OpenMP team (oneDNN) and no
     * OpenBLAS threads under kiln's own */
    int prev = omp_get_max_threads();
    if (prev != 1)
        omp_set_num_threads(1);
#ifdef KILN_HAVE_OPENBLAS
    if (s->blas)
        openblas_set_num_threads(1);
#endif
    if (jobs > 1)
        kn_parallel_for(nth, jobs, 1, slab_jobs, &c);
    else
        slab(&c, 0, s->n);
    if (prev != 1)
        omp_set_num_threads(prev);
    return KILN_OK;
}
#endif /* KILN_HAVE_DNNL */
