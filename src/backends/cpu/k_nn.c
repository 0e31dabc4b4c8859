/* k_nn.c - reference CPU kernels of the nn family: Gemm, MatMul (float fast
 * path, other types by plain loops), MatMulInteger, QLinearMatMul, Einsum and
 * Dropout here; in k_nn_*.c the float GEMM (gemm), convolutions (conv,
 * qconv), pooling (pool), normalizations (norm), Attention (attention), the
 * recurrent ops (rnn) and float staging of other types (stage). The kernel
 * table kb_cpu_nn is at the end. */
#include <math.h>
#include <string.h>

#include "graph/ops_tensor.h"
#include "graph/random.h"
#include "k_nn.h"

static bool present(const kb_run *r, int i) { return i < r->n_in && r->in[i].data; }

/* Types the plain-loop Gemm / MatMul handle (sums in double: integers are
 * exact up to 2^53). */
static bool is_numeric(kiln_dtype t) {
    return kb_is_real(t) || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64 ||
           t == KILN_DTYPE_UINT32 || t == KILN_DTYPE_UINT64;
}

/* ---------------- Gemm ---------------- */

/* C's element for Y[i, j] when C broadcasts (unidirectionally) to [m, n]. */
static int64_t gemm_c_index(const kb_tensor *c, int64_t i, int64_t j) {
    int64_t cm = c->rank >= 2 ? c->dims[c->rank - 2] : 1;
    int64_t cn = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
    return (cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j);
}

void kb_gemm_f32(const kn_node *node, const kb_tensor *a, const kb_tensor *b, const kb_tensor *c,
                 kb_tensor *y, int threads) {
    bool ta = kn_attr_int(node, "transA", 0) != 0, tb = kn_attr_int(node, "transB", 0) != 0;
    float alpha = kn_attr_float(node, "alpha", 1.f), beta = kn_attr_float(node, "beta", 1.f);
    int64_t m = y->dims[0], n = y->dims[1], k = ta ? a->dims[0] : a->dims[1];
    float *Y = y->data;
    bool use_c = c && c->data && beta != 0.f;
    if (use_c) {
        const float *C = c->data;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                Y[i * n + j] = beta * C[gemm_c_index(c, i, j)];
    }
    kb_sgemm(ta, tb, m, n, k, alpha, a->data, a->dims[1], b->data, b->dims[1], use_c ? 1.f : 0.f,
             Y, n, threads);
}

/* Any real type: plain loops, double accumulation. */
static void gemm_generic(const kn_node *node, const kb_tensor *a, const kb_tensor *b,
                         const kb_tensor *c, kb_tensor *y) {
    bool ta = kn_attr_int(node, "transA", 0) != 0, tb = kn_attr_int(node, "transB", 0) != 0;
    double alpha = kn_attr_float(node, "alpha", 1.f), beta = kn_attr_float(node, "beta", 1.f);
    int64_t m = y->dims[0], n = y->dims[1], k = ta ? a->dims[0] : a->dims[1];
    int64_t lda = a->dims[1], ldb = b->dims[1];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0;
            for (int64_t p = 0; p < k; p++)
                s += kb_ld(a->data, a->dtype, (size_t)(ta ? p * lda + i : i * lda + p)) *
                     kb_ld(b->data, b->dtype, (size_t)(tb ? j * ldb + p : p * ldb + j));
            double v = alpha * s;
            if (c && c->data && beta != 0.0)
                v += beta * kb_ld(c->data, c->dtype, (size_t)gemm_c_index(c, i, j));
            kb_st(y->data, y->dtype, (size_t)(i * n + j), v);
        }
}

/* float16 and bfloat16 go through float copies and the float GEMM; double
 * and integers through the plain loops (exact sums). */
static bool half_type(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

static kiln_status half_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                int n_in, const kb_tensor *out, int n_out, void **inst,
                                size_t *workspace) {
    *workspace = half_type(in[0].dtype) ? kb_stage_bytes(in, n_in, &out[0]) : 0;
    return KILN_OK;
}

/* Stage a half-precision run; st gets float views. */
static kiln_status half_stage(const kb_run *r, kb_staged *st) {
    if (!kb_stage_types_ok(r->in, r->n_in, &r->out[0]) ||
        r->workspace_size < kb_stage_bytes(r->in, r->n_in, &r->out[0]))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "cannot stage %s inputs",
                             kiln_dtype_name(r->in[0].dtype));
    kb_stage_in(r->in, r->n_in, &r->out[0], r->workspace, st);
    return KILN_OK;
}

static kiln_status gemm_run(const kb_run *r) {
    const kb_tensor *c = present(r, 2) ? &r->in[2] : NULL;
    if (r->in[0].dtype == KILN_DTYPE_FLOAT && (!c || c->dtype == KILN_DTYPE_FLOAT)) {
        kb_gemm_f32(r->node, &r->in[0], &r->in[1], c, &r->out[0], r->threads);
    } else if (half_type(r->in[0].dtype)) {
        kb_staged st;
        KN_TRY(half_stage(r, &st));
        kb_gemm_f32(r->node, &st.in[0], &st.in[1], c ? &st.in[2] : NULL, &st.out, r->threads);
        kb_stage_out(&st, &r->out[0]);
    } else if (is_numeric(r->in[0].dtype)) {
        gemm_generic(r->node, &r->in[0], &r->in[1], c, &r->out[0]);
    } else {
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "Gemm of %s is not supported",
                             kiln_dtype_name(r->in[0].dtype));
    }
    return KILN_OK;
}

/* ---------------- MatMul family ---------------- */

/* Shapes of a numpy matmul: matrices m x k and k x n, batch count, and the
 * element offsets of batch `bi`'s matrices in a and b. */
typedef struct mm_shape {
    int64_t m, n, k, batches;
    int br; /* output batch rank */
} mm_shape;

static mm_shape mm_shape_of(const kb_tensor *a, const kb_tensor *b, const kb_tensor *y) {
    mm_shape s;
    s.m = a->rank == 1 ? 1 : a->dims[a->rank - 2];
    s.k = a->dims[a->rank - 1];
    s.n = b->rank == 1 ? 1 : b->dims[b->rank - 1];
    s.br = y->rank - (a->rank == 1 ? 0 : 1) - (b->rank == 1 ? 0 : 1);
    s.batches = kn_numel(s.br, y->dims);
    return s;
}

static int64_t mm_offset(const mm_shape *s, const kb_tensor *t, const int64_t *ydims, int64_t bi,
                         int64_t mat) {
    int tr = t->rank > 2 ? t->rank - 2 : 0;
    int64_t coord[KILN_MAX_DIMS], off = 0;
    for (int d = s->br - 1; d >= 0; d--) {
        coord[d] = bi % ydims[d];
        bi /= ydims[d];
    }
    for (int i = 0; i < tr; i++) {
        int64_t ci = coord[s->br - tr + i];
        off = off * t->dims[i] + (t->dims[i] == 1 ? 0 : ci);
    }
    return off * mat;
}

static void matmul_generic(const kb_tensor *a, const kb_tensor *b, kb_tensor *y) {
    mm_shape s = mm_shape_of(a, b, y);
    for (int64_t bi = 0; bi < s.batches; bi++) {
        int64_t ao = mm_offset(&s, a, y->dims, bi, s.m * s.k);
        int64_t bo = mm_offset(&s, b, y->dims, bi, s.k * s.n);
        for (int64_t i = 0; i < s.m; i++)
            for (int64_t j = 0; j < s.n; j++) {
                double acc = 0.0;
                for (int64_t p = 0; p < s.k; p++)
                    acc += kb_ld(a->data, a->dtype, (size_t)(ao + i * s.k + p)) *
                           kb_ld(b->data, b->dtype, (size_t)(bo + p * s.n + j));
                kb_st(y->data, y->dtype, (size_t)((bi * s.m + i) * s.n + j), acc);
            }
    }
}

static kiln_status matmul_run(const kb_run *r) {
    const kb_tensor *a = &r->in[0], *b = &r->in[1];
    if (a->dtype == KILN_DTYPE_FLOAT && b->dtype == KILN_DTYPE_FLOAT) {
        kb_matmul_f32(a, b, &r->out[0], r->threads);
    } else if (half_type(a->dtype) && a->dtype == b->dtype) {
        kb_staged st;
        KN_TRY(half_stage(r, &st));
        kb_matmul_f32(&st.in[0], &st.in[1], &st.out, r->threads);
        kb_stage_out(&st, &r->out[0]);
    } else if (is_numeric(a->dtype) && a->dtype == b->dtype) {
        matmul_generic(a, b, &r->out[0]);
    } else {
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "MatMul of %s is not supported",
                             kiln_dtype_name(a->dtype));
    }
    return KILN_OK;
}

static bool is_8bit(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

/* Zero point or scale of row/column i: a scalar or one value per row/column. */
static double per_index(const kb_tensor *t, int64_t i, double dflt) {
    if (!t || !t->data)
        return dflt;
    return kb_ld(t->data, t->dtype, (size_t)(kb_numel(t) == 1 ? 0 : i));
}

/* Integer matmul core: acc[i, j] = sum (a - za[i]) (b - zb[j]). */
static int64_t int_dot(const kb_tensor *a, const kb_tensor *b, const mm_shape *s, int64_t ao,
                       int64_t bo, int64_t i, int64_t j, int64_t za, int64_t zb) {
    int64_t acc = 0;
    for (int64_t p = 0; p < s->k; p++) {
        int64_t av = (int64_t)kb_ld(a->data, a->dtype, (size_t)(ao + i * s->k + p)) - za;
        int64_t bv = (int64_t)kb_ld(b->data, b->dtype, (size_t)(bo + p * s->n + j)) - zb;
        acc += av * bv;
    }
    return acc;
}

static kiln_status matmul_integer_run(const kb_run *r) {
    const kb_tensor *a = &r->in[0], *b = &r->in[1];
    const kb_tensor *za = present(r, 2) ? &r->in[2] : NULL, *zb = present(r, 3) ? &r->in[3] : NULL;
    if (!is_8bit(a->dtype) || !is_8bit(b->dtype))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "MatMulInteger needs 8-bit inputs");
    kb_tensor *y = &r->out[0];
    mm_shape s = mm_shape_of(a, b, y);
    int32_t *Y = y->data;
    for (int64_t bi = 0; bi < s.batches; bi++) {
        int64_t ao = mm_offset(&s, a, y->dims, bi, s.m * s.k);
        int64_t bo = mm_offset(&s, b, y->dims, bi, s.k * s.n);
        for (int64_t i = 0; i < s.m; i++)
            for (int64_t j = 0; j < s.n; j++)
                Y[(bi * s.m + i) * s.n + j] = (int32_t)int_dot(
                    a, b, &s, ao, bo, i, j, (int64_t)per_index(za, i, 0), (int64_t)per_index(zb, j, 0));
    }
    return KILN_OK;
}

static kiln_status qlinear_matmul_run(const kb_run *r) {
    const kb_tensor *a = &r->in[0], *as = &r->in[1], *az = &r->in[2];
    const kb_tensor *b = &r->in[3], *bs = &r->in[4], *bz = &r->in[5];
    const kb_tensor *ys = &r->in[6], *yz = &r->in[7];
    kb_tensor *y = &r->out[0];
    if (!is_8bit(a->dtype) || !is_8bit(b->dtype) || !is_8bit(y->dtype))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "QLinearMatMul needs 8-bit tensors");
    mm_shape s = mm_shape_of(a, b, y);
    double lo = y->dtype == KILN_DTYPE_UINT8 ? 0.0 : -128.0;
    double hi = y->dtype == KILN_DTYPE_UINT8 ? 255.0 : 127.0;
    double yscale = per_index(ys, 0, 1.0), yzero = per_index(yz, 0, 0.0);
    for (int64_t bi = 0; bi < s.batches; bi++) {
        int64_t ao = mm_offset(&s, a, y->dims, bi, s.m * s.k);
        int64_t bo = mm_offset(&s, b, y->dims, bi, s.k * s.n);
        for (int64_t i = 0; i < s.m; i++)
            for (int64_t j = 0; j < s.n; j++) {
                int64_t acc = int_dot(a, b, &s, ao, bo, i, j, (int64_t)per_index(az, i, 0),
                                      (int64_t)per_index(bz, j, 0));
                /* the scales multiply in float, as the ONNX definition does */
                float scale = (float)per_index(as, i, 1.0) * (float)per_index(bs, j, 1.0) /
                              (float)yscale;
                double v = nearbyint((double)((float)acc * scale)) + yzero;
                v = v < lo ? lo : (v > hi ? hi : v);
                kb_st(y->data, y->dtype, (size_t)((bi * s.m + i) * s.n + j), v);
            }
    }
    return KILN_OK;
}

/* ---------------- Einsum ---------------- */

typedef struct einsum_outputs_ctx {
    const kb_run *r;
    kn_einsum e;
    const int64_t (*stride)[KN_EINSUM_LABELS];
    const int *sum_lab;
    int n_sum;
    int64_t sum_count;
    kb_tensor *y;
} einsum_outputs_ctx;

static void einsum_outputs(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const einsum_outputs_ctx *c_ = vc;
    const kb_run *r = c_->r;
    kn_einsum e = c_->e;
    const int64_t (*stride)[KN_EINSUM_LABELS] = c_->stride;
    const int *sum_lab = c_->sum_lab;
    int n_sum = c_->n_sum;
    int64_t sum_count = c_->sum_count;
    kb_tensor *y = c_->y;
    (void)tid;
    for (int64_t o = lo_; o < hi_; o++) {
        int64_t base[KN_EINSUM_MAX_IN] = {0}, rest = o;
        for (int q = e.out_rank - 1; q >= 0; q--) {
            int l = e.out_label[q];
            int64_t c = rest % e.size[l];
            rest /= e.size[l];
            for (int i = 0; i < r->n_in; i++)
                base[i] += c * stride[i][l];
        }
        double acc = 0.0;
        int64_t sc[KN_EINSUM_LABELS] = {0};
        for (int64_t t = 0; t < sum_count; t++) {
            double prod = 1.0;
            for (int i = 0; i < r->n_in; i++) {
                int64_t off = base[i];
                for (int q = 0; q < n_sum; q++)
                    off += sc[q] * stride[i][sum_lab[q]];
                prod *= kb_ld(r->in[i].data, r->in[i].dtype, (size_t)off);
            }
            acc += prod;
            for (int q = n_sum - 1; q >= 0; q--) {
                if (++sc[q] < e.size[sum_lab[q]])
                    break;
                sc[q] = 0;
            }
        }
        kb_st(y->data, y->dtype, (size_t)o, acc);
    }
}

/* Plain loops over the output index space and, inside, the summed labels.
 * A label repeated within one operand takes the diagonal (its strides add). */
static kiln_status einsum_run(const kb_run *r) {
    int rank[KN_EINSUM_MAX_IN];
    int64_t dims[KN_EINSUM_MAX_IN][KILN_MAX_DIMS];
    if (r->n_in > KN_EINSUM_MAX_IN)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "too many inputs");
    for (int i = 0; i < r->n_in; i++) {
        if (!kb_is_real(r->in[i].dtype) && r->in[i].dtype != KILN_DTYPE_INT32 &&
            r->in[i].dtype != KILN_DTYPE_INT64)
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "Einsum of %s is not supported",
                                 kiln_dtype_name(r->in[i].dtype));
        rank[i] = r->in[i].rank;
        memcpy(dims[i], r->in[i].dims, sizeof dims[i]);
    }
    kn_einsum e;
    KN_TRY(kn_einsum_parse(r->node, r->n_in, rank, (const int64_t(*)[KILN_MAX_DIMS])dims, &e));
    /* per input, per label: element stride (0 where the dim broadcasts) */
    int64_t stride[KN_EINSUM_MAX_IN][KN_EINSUM_LABELS];
    memset(stride, 0, sizeof stride);
    for (int i = 0; i < r->n_in; i++) {
        int64_t s = 1;
        for (int d = rank[i] - 1; d >= 0; d--) {
            if (dims[i][d] != 1)
                stride[i][e.label[i][d]] += s;
            s *= dims[i][d];
        }
    }
    bool in_out[KN_EINSUM_LABELS] = {false};
    for (int q = 0; q < e.out_rank; q++)
        in_out[e.out_label[q]] = true;
    int sum_lab[KN_EINSUM_LABELS], n_sum = 0;
    int64_t sum_count = 1;
    for (int l = 0; l < KN_EINSUM_LABELS; l++)
        if (e.size[l] >= 0 && !in_out[l]) {
            sum_lab[n_sum++] = l;
            sum_count *= e.size[l];
        }
    kb_tensor *y = &r->out[0];
    int64_t total = kb_numel(y);
    int nth = r->threads > 1 && total * sum_count > 32768 ? r->threads : 1;
    {
        einsum_outputs_ctx c_ = {r, e, stride, sum_lab, n_sum, sum_count, y};
        kn_parallel_for(nth, total, 0, einsum_outputs, &c_);
    }
    return KILN_OK;
}

/* ---------------- Dropout (inference: identity) ---------------- */

/* Dropout's instance: the generator's key (the seed attribute's, else one
 * drawn per context) and the runs so far, so each run draws anew. */
typedef struct dropout_inst {
    uint64_t key, run;
} dropout_inst;

static kiln_status dropout_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                   int n_in, const kb_tensor *out, int n_out, void **inst,
                                   size_t *workspace) {
    (void)state, (void)in, (void)n_in, (void)out, (void)n_out;
    dropout_inst *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kn_random p = {0};
    p.has_seed = kn_attr_find(node, "seed") != NULL;
    p.seed = (double)kn_attr_int(node, "seed", 0);
    s->key = kn_random_key(&p);
    *inst = s;
    *workspace = 0;
    return KILN_OK;
}

static void dropout_release(void *inst) { kn_free(inst); }

static kiln_status dropout_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    if (present(r, 2) && kb_ld(r->in[2].data, r->in[2].dtype, 0) != 0.0) {
        double ratio = present(r, 1) ? kb_ld(r->in[1].data, r->in[1].dtype, 0) : 0.5;
        if (!(ratio >= 0.0 && ratio < 1.0))
            return kn_node_error(r->node, KILN_ERR_RUNTIME, "ratio %g is not in [0, 1)", ratio);
        if (ratio != 0.0) { /* training: element i kept when its draw is >= ratio */
            dropout_inst *s = r->inst;
            double scale = 1.0 / (1.0 - ratio);
            kb_tensor *mask = r->n_out > 1 && r->out[1].data ? &r->out[1] : NULL;
            for (int64_t i = 0; i < kb_numel(x); i++) {
                bool keep = kn_rand_uniform(s->key, (uint64_t)i, s->run) >= ratio;
                kb_st(r->out[0].data, r->out[0].dtype, (size_t)i,
                      keep ? kb_ld(x->data, x->dtype, (size_t)i) * scale : 0.0);
                if (mask)
                    kb_st(mask->data, mask->dtype, (size_t)i, keep ? 1.0 : 0.0);
            }
            s->run++;
            return KILN_OK;
        }
    }
    size_t bytes = (size_t)kb_numel(x) * kiln_dtype_size(x->dtype);
    if (r->out[0].data != x->data && bytes)
        memmove(r->out[0].data, x->data, bytes);
    if (r->n_out > 1 && r->out[1].data) {
        kb_tensor *mask = &r->out[1];
        for (int64_t i = 0; i < kb_numel(mask); i++)
            kb_st(mask->data, mask->dtype, (size_t)i, 1.0);
    }
    return KILN_OK;
}

/* ---------------- supports ---------------- */

static bool sup_real(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                     int n_out) {
    return n_in >= 1 && kb_is_real(in[0].dtype);
}

static bool sup_numeric(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    return n_in >= 2 && is_numeric(in[0].dtype) && in[1].dtype == in[0].dtype;
}

static bool sup_pool(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                     int n_out) {
    kiln_dtype t = in[0].dtype;
    if (strcmp(node->op_type, "MaxPool") == 0 || strcmp(node->op_type, "GlobalMaxPool") == 0)
        return kb_is_real(t) || t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8;
    return kb_is_real(t);
}

static bool sup_8bit(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                     int n_out) {
    int b = strcmp(node->op_type, "QLinearMatMul") == 0 ? 3 : 1;
    return n_in > b && is_8bit(in[0].dtype) && is_8bit(in[b].dtype);
}

static bool sup_qconv(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                      int n_out) {
    int w = strcmp(node->op_type, "QLinearConv") == 0 ? 3 : 1;
    return n_in > w && is_8bit(in[0].dtype) && is_8bit(in[w].dtype) && is_8bit(out[0].dtype) ==
                                                                          (w == 3);
}

static bool sup_any(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                    int n_out) {
    return true;
}

static bool sup_grid(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                     int n_out) {
    return n_in >= 2 && kb_is_real(in[0].dtype) && kb_is_real(in[1].dtype);
}

static bool sup_einsum(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                       int n_out) {
    for (int i = 0; i < n_in; i++)
        if (!kb_is_real(in[i].dtype) && in[i].dtype != KILN_DTYPE_INT32 &&
            in[i].dtype != KILN_DTYPE_INT64)
            return false;
    return true;
}

static bool sup_conv(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                     int n_out) {
    for (int i = 0; i < n_in && i < 3; i++)
        if (in[i].dtype != KILN_DTYPE_UNDEFINED && !kb_is_real(in[i].dtype))
            return false;
    return n_in >= 2 && n_in <= 3;
}

static bool sup_attention(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    for (int i = 0; i < n_in && i < 6; i++)
        if (in[i].dtype != KILN_DTYPE_UNDEFINED && !kb_is_real(in[i].dtype) &&
            !(i == 3 && in[i].dtype == KILN_DTYPE_BOOL))
            return false;
    return n_in < 7 || in[6].dtype == KILN_DTYPE_UNDEFINED;
}

static bool sup_recurrent(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                          int n_out) {
    for (int i = 0; i < n_in; i++) /* sequence_lens (4) is an integer input */
        if (i != 4 && in[i].dtype != KILN_DTYPE_UNDEFINED && !kb_is_real(in[i].dtype))
            return false;
    return n_in <= 8 && n_out <= 3;
}

/* X and the caches real, positions integer. */
static bool sup_rotary(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                       int n_out) {
    for (int i = 0; i < n_in; i++)
        if (in[i].dtype != KILN_DTYPE_UNDEFINED && !kb_is_real(in[i].dtype) &&
            in[i].dtype != KILN_DTYPE_INT64 && in[i].dtype != KILN_DTYPE_INT32)
            return false;
    return n_out == 1 && kb_is_real(out[0].dtype);
}

#define REF(op, sup, prep, run) {op, "", "ref", sup, NULL, NULL, prep, NULL, run}

const kb_kernel kb_cpu_nn[] = {
    {"Conv", "", "ref", sup_conv, NULL, NULL, kb_nn_conv_prepare, kb_nn_conv_release,
     kb_nn_conv_run},
    REF("ConvTranspose", sup_conv, kb_nn_convt_prepare, kb_nn_convt_run),
    REF("ConvInteger", sup_qconv, kb_nn_convint_prepare, kb_nn_convint_run),
    REF("QLinearConv", sup_qconv, kb_nn_qlinearconv_prepare, kb_nn_qlinearconv_run),
    REF("MaxPool", sup_pool, NULL, kb_nn_pool_run),
    REF("MaxUnpool", sup_any, NULL, kb_nn_max_unpool_run),
    REF("GridSample", sup_grid, NULL, kb_nn_grid_sample_run),
    REF("HannWindow", sup_any, NULL, kb_window_run),
    REF("HammingWindow", sup_any, NULL, kb_window_run),
    REF("BlackmanWindow", sup_any, NULL, kb_window_run),
    REF("QuantizeLinear", sup_any, NULL, kb_quantize_run),
    REF("DequantizeLinear", sup_any, NULL, kb_dequantize_run),
    REF("DynamicQuantizeLinear", sup_any, NULL, kb_dynamic_quantize_run),
    REF("RoiAlign", sup_grid, NULL, kb_nn_roi_align_run),
    REF("NegativeLogLikelihoodLoss", sup_any, NULL, kb_nll_loss_run),
    {"RandomUniform", "", "ref", sup_any, NULL, NULL, kb_random_prepare, kb_random_release, kb_random_run},
    {"RandomNormal", "", "ref", sup_any, NULL, NULL, kb_random_prepare, kb_random_release, kb_random_run},
    {"RandomUniformLike", "", "ref", sup_any, NULL, NULL, kb_random_prepare, kb_random_release, kb_random_run},
    {"RandomNormalLike", "", "ref", sup_any, NULL, NULL, kb_random_prepare, kb_random_release, kb_random_run},
    {"Bernoulli", "", "ref", sup_any, NULL, NULL, kb_random_prepare, kb_random_release, kb_random_run},
    {"Multinomial", "", "ref", sup_any, NULL, NULL, kb_random_prepare, kb_random_release, kb_random_run},
    REF("SoftmaxCrossEntropyLoss", sup_any, kb_sce_loss_prepare, kb_sce_loss_run),
    REF("NonMaxSuppression", sup_any, NULL, kb_nn_nms_run),
    REF("AveragePool", sup_pool, NULL, kb_nn_pool_run),
    REF("LpPool", sup_pool, NULL, kb_nn_pool_run),
    REF("GlobalAveragePool", sup_pool, NULL, kb_nn_global_pool_run),
    REF("GlobalMaxPool", sup_pool, NULL, kb_nn_global_pool_run),
    REF("GlobalLpPool", sup_pool, NULL, kb_nn_global_pool_run),
    REF("BatchNormalization", sup_real, NULL, kb_nn_batchnorm_run),
    REF("InstanceNormalization", sup_real, NULL, kb_nn_instancenorm_run),
    REF("LayerNormalization", sup_real, NULL, kb_nn_layernorm_run),
    REF("GroupNormalization", sup_real, NULL, kb_nn_groupnorm_run),
    REF("RMSNormalization", sup_real, NULL, kb_nn_rmsnorm_run),
    REF("RotaryEmbedding", sup_rotary, NULL, kb_nn_rotary_run),
    {"RotaryEmbedding", "com.microsoft", "ref", sup_rotary, NULL, NULL, NULL, NULL,
     kb_nn_rotary_run},
    REF("LpNormalization", sup_real, NULL, kb_nn_lpnorm_run),
    REF("LRN", sup_real, NULL, kb_nn_lrn_run),
    REF("MeanVarianceNormalization", sup_real, kb_nn_mvn_prepare, kb_nn_mvn_run),
    REF("Gemm", sup_numeric, half_prepare, gemm_run),
    REF("MatMul", sup_numeric, half_prepare, matmul_run),
    REF("MatMulInteger", sup_8bit, NULL, matmul_integer_run),
    REF("QLinearMatMul", sup_8bit, NULL, qlinear_matmul_run),
    REF("Einsum", sup_einsum, NULL, einsum_run),
    REF("Attention", sup_attention, kb_nn_attention_prepare, kb_nn_attention_run),
    {"MultiHeadAttention", "com.microsoft", "ref", sup_any, NULL, NULL, NULL, NULL, kb_ms_mha_run},
    {"Attention", "com.microsoft", "ref", sup_any, NULL, NULL, NULL, NULL, kb_ms_attention_run},
    {"GroupQueryAttention", "com.microsoft", "ref", sup_any, NULL, NULL, NULL, NULL, kb_ms_gqa_run},
    {"Dropout", "", "ref", sup_any, NULL, NULL, dropout_prepare, dropout_release, dropout_run},
    REF("RNN", sup_recurrent, kb_nn_rnn_prepare, kb_nn_rnn_run),
    REF("GRU", sup_recurrent, kb_nn_rnn_prepare, kb_nn_rnn_run),
    REF("LSTM", sup_recurrent, kb_nn_rnn_prepare, kb_nn_rnn_run),
};
const size_t kb_cpu_nn_count = KN_ARRAY_LEN(kb_cpu_nn);
