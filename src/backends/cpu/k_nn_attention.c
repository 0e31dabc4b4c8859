/* k_nn_attention.c - reference Attention (opset 23, real types): scaled dot
 * products per query row, optional softcap, attention mask (bool or additive)
 * and causal mask aligned to the past cache, softmax, weighted sum of values;
 * grouped-query heads; present key/value caches; the QK output (modes 0, 3). */
#include <math.h>
#include <string.h>

#include "k_nn.h"

kiln_status kb_nn_attention_geom(const kn_node *node, const kb_tensor *in, int n_in,
                                 kn_attention *a) {
    kn_tinfo ti[7];
    if (n_in > 7)
        n_in = 7;
    /* by type: prepare may see a past cache before it is bound (no data) */
    kb_tinfo_types(in, n_in, ti);
    return kn_attention_geom(node, n_in, ti, a);
}

kiln_status kb_nn_attention_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                    int n_in, const kb_tensor *out, int n_out, void **inst,
                                    size_t *workspace) {
    kn_attention a;
    KN_TRY(kb_nn_attention_geom(node, in, n_in, &a));
    *workspace = (size_t)(a.batch * a.q_heads * a.total) * sizeof(double);
    return KILN_OK;
}

/* Element offsets of rows: each row is contiguous over its head size in
 * both layouts. Values are read and written through kb_ld / kb_st, so every
 * real type works (computed in double). */
typedef struct att_io {
    const kn_attention *a;
    const kb_tensor *q, *k, *v, *pk, *pv;
    kb_tensor *y;
} att_io;

static int64_t q_row(const att_io *t, int64_t b, int64_t h, int64_t i) {
    const kn_attention *a = t->a;
    return a->rank3 ? (b * a->q_seq + i) * a->q_heads * a->head + h * a->head
                    : ((b * a->q_heads + h) * a->q_seq + i) * a->head;
}

/* Row j of the present keys (past cache first) or values: its tensor and offset. */
static const kb_tensor *kv_row(const att_io *t, bool value, int64_t b, int64_t h, int64_t j,
                               int64_t *off) {
    const kn_attention *a = t->a;
    int64_t size = value ? a->v_head : a->head;
    if (j < a->past) {
        *off = ((b * a->kv_heads + h) * a->past + j) * size;
        return value ? t->pv : t->pk;
    }
    j -= a->past;
    *off = a->rank3 ? (b * a->kv_seq + j) * a->kv_heads * size + h * size
                    : ((b * a->kv_heads + h) * a->kv_seq + j) * size;
    return value ? t->v : t->k;
}

static int64_t y_row(const att_io *t, int64_t b, int64_t h, int64_t i) {
    const kn_attention *a = t->a;
    return a->rank3 ? (b * a->q_seq + i) * a->q_heads * a->v_head + h * a->v_head
                    : ((b * a->q_heads + h) * a->q_seq + i) * a->v_head;
}

static double ld(const kb_tensor *t, int64_t i) { return kb_ld(t->data, t->dtype, (size_t)i); }

/* Additive bias of the attention mask at (b, h, i, j): right-aligned
 * broadcasting to [batch, q_heads, q_seq, total]; keys past the mask's last
 * dim are masked. */
static double mask_bias(const kb_tensor *m, const kn_attention *a, int64_t b, int64_t h,
                        int64_t i, int64_t j) {
    if (!m)
        return 0.0;
    int64_t last = m->dims[m->rank - 1];
    if (j >= last)
        return -INFINITY;
    const int64_t coord[4] = {b, h, i, j};
    int64_t off = 0;
    for (int d = 0; d < m->rank; d++) {
        int64_t md = m->dims[d], c = coord[4 - m->rank + d];
        off = off * md + (md == 1 ? 0 : c);
    }
    if (m->dtype == KILN_DTYPE_BOOL)
        return ((const uint8_t *)m->data)[off] ? 0.0 : -INFINITY;
    return kb_ld(m->data, m->dtype, (size_t)off);
}

/* Present cache output: the past rows, then the new keys (or values). */
static void write_present(const att_io *t, bool value, kb_tensor *dst) {
    const kn_attention *a = t->a;
    int64_t size = value ? a->v_head : a->head;
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t h = 0; h < a->kv_heads; h++)
            for (int64_t j = 0; j < a->total; j++) {
                int64_t off, to = ((b * a->kv_heads + h) * a->total + j) * size;
                const kb_tensor *src = kv_row(t, value, b, h, j, &off);
                for (int64_t e = 0; e < size; e++)
                    kb_st(dst->data, dst->dtype, (size_t)(to + e), ld(src, off + e));
            }
}

typedef struct attention_jobs_ctx {
    const kb_run *r;
    kn_attention a;
    att_io t;
    const kb_tensor *mask;
    kb_tensor *qk;
    int64_t group;
} attention_jobs_ctx;

static void attention_jobs(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const attention_jobs_ctx *c_ = vc;
    const kb_run *r = c_->r;
    kn_attention a = c_->a;
    att_io t = c_->t;
    const kb_tensor *mask = c_->mask;
    kb_tensor *qk = c_->qk;
    int64_t group = c_->group;
    (void)tid;
    for (int64_t job = lo_; job < hi_; job++) {
        int64_t b = job / a.q_heads, h = job % a.q_heads, kvh = h / group;
        double *p = (double *)r->workspace + job * a.total;
        for (int64_t i = 0; i < a.q_seq; i++) {
            int64_t qo = q_row(&t, b, h, i);
            int64_t qk_off = ((b * a.q_heads + h) * a.q_seq + i) * a.total;
            bool any = false; /* a key this query may attend */
            double mx = -INFINITY;
            for (int64_t j = 0; j < a.total; j++) {
                int64_t ko;
                const kb_tensor *kt = kv_row(&t, false, b, kvh, j, &ko);
                double dot = 0.0;
                for (int64_t d = 0; d < a.head; d++)
                    dot += ld(t.q, qo + d) * ld(kt, ko + d);
                double s = a.scale * dot;
                if (a.softcap > 0.f)
                    s = a.softcap * tanh(s / a.softcap);
                double bias = mask_bias(mask, &a, b, h, i, j);
                if (a.causal && j > i + a.past)
                    bias = -INFINITY;
                if (qk && a.qk_mode == 0)
                    kb_st(qk->data, qk->dtype, (size_t)(qk_off + j), s);
                p[j] = s + bias;
                if (bias != -INFINITY) {
                    any = true;
                    if (p[j] > mx)
                        mx = p[j];
                }
            }
            double sum = 0.0;
            for (int64_t j = 0; j < a.total; j++) {
                p[j] = any && p[j] != -INFINITY ? exp(p[j] - mx) : 0.0;
                sum += p[j];
            }
            for (int64_t j = 0; j < a.total; j++) {
                p[j] = sum > 0.0 ? p[j] / sum : 0.0;
                if (qk && a.qk_mode == 3)
                    kb_st(qk->data, qk->dtype, (size_t)(qk_off + j), p[j]);
            }
            int64_t yo = y_row(&t, b, h, i);
            for (int64_t e = 0; e < a.v_head; e++) {
                double acc = 0.0;
                for (int64_t j = 0; j < a.total; j++) {
                    if (p[j] == 0.0)
                        continue;
                    int64_t vo;
                    const kb_tensor *vt = kv_row(&t, true, b, kvh, j, &vo);
                    acc += p[j] * ld(vt, vo + e);
                }
                kb_st(t.y->data, t.y->dtype, (size_t)(yo + e), acc);
            }
        }
    }
}

kiln_status kb_nn_attention_run(const kb_run *r) {
    kn_attention a;
    KN_TRY(kb_nn_attention_geom(r->node, r->in, r->n_in, &a));
#define IN(i) (r->n_in > (i) && r->in[i].data ? &r->in[i] : NULL)
    const kb_tensor *mask = IN(3), *pk = IN(4), *pv = IN(5);
#undef IN
    for (int i = 0; i < r->n_in && i < 6; i++)
        if (r->in[i].data && !kb_is_real(r->in[i].dtype) &&
            !(i == 3 && r->in[i].dtype == KILN_DTYPE_BOOL))
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                                 "Attention input %d of type %s is not supported", i,
                                 kiln_dtype_name(r->in[i].dtype));
    if (r->workspace_size < (size_t)(a.batch * a.q_heads * a.total) * sizeof(double))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    att_io t = {&a, &r->in[0], &r->in[1], &r->in[2], pk, pv, &r->out[0]};
    kb_tensor *qk = r->n_out > 3 && r->out[3].data ? &r->out[3] : NULL;
    if (r->n_out > 1 && r->out[1].data)
        write_present(&t, false, &r->out[1]);
    if (r->n_out > 2 && r->out[2].data)
        write_present(&t, true, &r->out[2]);
    int64_t jobs = a.batch * a.q_heads, group = a.q_heads / a.kv_heads;
    int nth = r->threads > 1 && jobs * a.q_seq * a.total * a.head > 32768 ? r->threads : 1;
    {
        attention_jobs_ctx c_ = {r, a, t, mask, qk, group};
        kn_parallel_for(nth, jobs, 0, attention_jobs, &c_);
    }
    return KILN_OK;
}

/* ---------------- com.microsoft MultiHeadAttention and Attention ----------------
 * The forms the builder maps onto kiln::Attention (pass_attention.c), as
 * plain references so that such a model also builds without fusion:
 * MultiHeadAttention with 3-D query [B, S, E], key [B, L, E], value
 * [B, L, Ev], optional key_padding_mask (input 4, int32 [B, L]: 0 adds
 * mask_filter_value) and attention_bias (input 5, broadcast to
 * [B, H, S, L]); Attention with input [B, S, In], weights [In, 3E], bias
 * [3E], optional raw mask_index (input 3, int32 [B, S]) and attention_bias
 * (input 5). scale defaults to 1/sqrt(head size). Computed in double. */

typedef struct ms_att {
    int64_t b, s, l, h, d, dv;
    const double *q, *k, *v; /* [B, S, H*D], [B, L, H*D], [B, L, H*Dv] */
    const kb_tensor *pad, *bias;
    double scale, filter;
} ms_att;

static void ms_core(const ms_att *m, kb_tensor *y, double *p) {
    int64_t e = m->h * m->d, ev = m->h * m->dv;
    for (int64_t b = 0; b < m->b; b++)
        for (int64_t h = 0; h < m->h; h++)
            for (int64_t i = 0; i < m->s; i++) {
                const double *qr = m->q + (b * m->s + i) * e + h * m->d;
                double mx = -INFINITY;
                for (int64_t j = 0; j < m->l; j++) {
                    const double *kr = m->k + (b * m->l + j) * e + h * m->d;
                    double dot = 0.0;
                    for (int64_t c = 0; c < m->d; c++)
                        dot += qr[c] * kr[c];
                    double s = dot * m->scale;
                    if (m->pad && ((const int32_t *)m->pad->data)[b * m->l + j] == 0)
                        s += m->filter;
                    if (m->bias) {
                        const kb_tensor *t = m->bias;
                        const int64_t coord[4] = {b, h, i, j};
                        int64_t off = 0;
                        for (int d = 0; d < t->rank; d++) {
                            int64_t td = t->dims[d], cd = coord[4 - t->rank + d];
                            off = off * td + (td == 1 ? 0 : cd);
                        }
                        s += kb_ld(t->data, t->dtype, (size_t)off);
                    }
                    p[j] = s;
                    mx = s > mx ? s : mx;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < m->l; j++) {
                    p[j] = mx == -INFINITY ? 0.0 : exp(p[j] - mx);
                    sum += p[j];
                }
                for (int64_t c = 0; c < m->dv; c++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < m->l; j++)
                        acc += p[j] * m->v[(b * m->l + j) * ev + h * m->dv + c];
                    kb_st(y->data, y->dtype, (size_t)((b * m->s + i) * ev + h * m->dv + c),
                          sum > 0.0 ? acc / sum : 0.0);
                }
            }
}

static void ms_load(const kb_tensor *t, double *dst) {
    int64_t n = kb_numel(t);
    for (int64_t i = 0; i < n; i++)
        dst[i] = kb_ld(t->data, t->dtype, (size_t)i);
}

#define MS_IN(r, i) ((r)->n_in > (i) && (r)->in[i].data ? &(r)->in[i] : NULL)

static bool ms_has(const kb_run *r, int i) { return r->n_in > i && r->in[i].data; }

static kiln_status ms_check_pad(const kb_run *r, const kb_tensor *pad, int64_t b, int64_t l) {
    if (pad && (pad->dtype != KILN_DTYPE_INT32 || pad->rank != 2 || pad->dims[0] != b ||
                pad->dims[1] != l))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                             "only a raw int32 [B, L] key mask is supported (got rank %d)", pad->rank);
    return KILN_OK;
}

kiln_status kb_ms_mha_run(const kb_run *r) {
    const kb_tensor *q = &r->in[0], *k = MS_IN(r, 1), *v = MS_IN(r, 2);
    int64_t h = kn_attr_int(r->node, "num_heads", 0);
    if (!k || !v || q->rank != 3 || k->rank != 3 || v->rank != 3 || h < 1 || q->dims[2] % h ||
        v->dims[2] % h || k->dims[2] != q->dims[2] || ms_has(r, 3) || ms_has(r, 6))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                             "MultiHeadAttention: only 3-D query, key and value (E divisible by "
                             "num_heads), without packed bias or past, are supported");
    ms_att m = {q->dims[0], q->dims[1], k->dims[1], h, q->dims[2] / h, v->dims[2] / h, NULL, NULL,
                NULL, MS_IN(r, 4), MS_IN(r, 5), 0, kn_attr_float(r->node, "mask_filter_value", -10000.f)};
    KN_TRY(ms_check_pad(r, m.pad, m.b, m.l));
    const kn_attr *sa = kn_attr_find(r->node, "scale");
    m.scale = sa ? kn_attr_float(r->node, "scale", 1.f) : 1.0 / sqrt((double)m.d);
    int64_t nq = kb_numel(q), nk = kb_numel(k), nv = kb_numel(v);
    double *w = kn_malloc(sizeof(double) * (size_t)(nq + nk + nv + m.l + 1));
    if (!w)
        return KILN_ERR_OUT_OF_MEMORY;
    ms_load(q, w);
    ms_load(k, w + nq);
    ms_load(v, w + nq + nk);
    m.q = w, m.k = w + nq, m.v = w + nq + nk;
    ms_core(&m, &r->out[0], w + nq + nk + nv);
    kn_free(w);
    return KILN_OK;
}

kiln_status kb_ms_attention_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *wt = MS_IN(r, 1), *bias = MS_IN(r, 2);
    int64_t h = kn_attr_int(r->node, "num_heads", 0);
    size_t nqs = 0;
    const int64_t *qs = kn_attr_ints(r->node, "qkv_hidden_sizes", &nqs);
    if (!wt || !bias || x->rank != 3 || wt->rank != 2 || wt->dims[0] != x->dims[2] || h < 1 ||
        wt->dims[1] % (3 * h) || kb_numel(bias) != wt->dims[1] || ms_has(r, 4) ||
        (qs && (nqs != 3 || qs[0] != qs[1] || qs[1] != qs[2])) ||
        kn_attr_int(r->node, "unidirectional", 0) || kn_attr_int(r->node, "do_rotary", 0))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                             "com.microsoft Attention: only equal Q, K, V widths without past, "
                             "unidirectional or rotary are supported");
    int64_t B = x->dims[0], S = x->dims[1], in = x->dims[2], e3 = wt->dims[1], e = e3 / 3;
    ms_att m = {B, S, S, h, e / h, e / h, NULL, NULL, NULL, MS_IN(r, 3), MS_IN(r, 5), 0,
                kn_attr_float(r->node, "mask_filter_value", -10000.f)};
    KN_TRY(ms_check_pad(r, m.pad, B, S));
    const kn_attr *sa = kn_attr_find(r->node, "scale");
    m.scale = sa ? kn_attr_float(r->node, "scale", 1.f) : 1.0 / sqrt((double)m.d);
    double *w = kn_malloc(sizeof(double) * (size_t)(4 * B * S * e + S + 1));
    if (!w)
        return KILN_ERR_OUT_OF_MEMORY;
    double *q = w, *k = w + B * S * e, *v = w + 2 * B * S * e;
    for (int64_t row = 0; row < B * S; row++)
        for (int64_t c = 0; c < e3; c++) {
            double acc = kb_ld(bias->data, bias->dtype, (size_t)c);
            for (int64_t t = 0; t < in; t++)
                acc += kb_ld(x->data, x->dtype, (size_t)(row * in + t)) *
                       kb_ld(wt->data, wt->dtype, (size_t)(t * e3 + c));
            double *dst = c < e ? q : c < 2 * e ? k : v;
            dst[row * e + c % e] = acc;
        }
    m.q = q, m.k = k, m.v = v;
    ms_core(&m, &r->out[0], w + 3 * B * S * e);
    kn_free(w);
    return KILN_OK;
}

/* com.microsoft GroupQueryAttention, its prompt form (what the builder maps
 * onto a causal kiln::Attention, as a reference so that it also builds
 * without fusion): query [B, S, Hq*D] with key and value [B, S, Hkv*D], or
 * one packed [B, S, (Hq + 2 Hkv) * D]; seqlens_k [B] int32 (valid length - 1
 * per batch); no past cache. Key j of query row i is masked where j > i or
 * j > seqlens_k[b]; query head h reads key/value head h / (Hq / Hkv). scale
 * 0 (the default) is 1/sqrt(D); softcap > 0 caps the scaled scores. Computed in double; the present outputs
 * get the new keys and values [B, Hkv, S, D]. */
kiln_status kb_ms_gqa_run(const kb_run *r) {
    const kb_tensor *q = &r->in[0], *k = MS_IN(r, 1), *v = MS_IN(r, 2), *sl = MS_IN(r, 5);
    int64_t hq = kn_attr_int(r->node, "num_heads", 0), hkv = kn_attr_int(r->node, "kv_num_heads", 0);
    bool packed = !k;
    if (q->rank != 3 || hq < 1 || hkv < 1 || hq % hkv || !sl || sl->dtype != KILN_DTYPE_INT32 ||
        (!k) != (!v) || ms_has(r, 3) || ms_has(r, 4) || kb_numel(sl) != q->dims[0] ||
        kn_attr_int(r->node, "do_rotary", 0) || kn_attr_float(r->node, "softcap", 0.f) < 0.f ||
        kn_attr_int(r->node, "local_window_size", -1) >= 0 || kn_attr_int(r->node, "smooth_softmax", 0))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                             "GroupQueryAttention: only the prompt form (no past cache, rotary, "
                             "local window or smooth softmax) is supported");
    for (int i = 7; i < r->n_in; i++)
        if (ms_has(r, i))
            return kn_node_error(r->node, KILN_ERR_UNSUPPORTED,
                                 "GroupQueryAttention: input %d (rotary caches, position ids, "
                                 "attention bias, head sinks) is not supported", i);
    int64_t B = q->dims[0], S = q->dims[1];
    int64_t d = packed ? q->dims[2] / (hq + 2 * hkv) : q->dims[2] / hq;
    if (d < 1 || (packed ? q->dims[2] != (hq + 2 * hkv) * d : q->dims[2] != hq * d) ||
        (!packed && (k->rank != 3 || v->rank != 3 || k->dims[0] != B || k->dims[1] != S ||
                     k->dims[2] != hkv * d || v->dims[0] != B || v->dims[1] != S ||
                     v->dims[2] != hkv * d)))
        return kn_node_error(r->node, KILN_ERR_SHAPE, "GroupQueryAttention: Q, K, V do not fit");
    float sc = kn_attr_float(r->node, "scale", 0.f);
    double scale = sc != 0.f ? sc : 1.0 / sqrt((double)d);
    double softcap = kn_attr_float(r->node, "softcap", 0.f);
    /* rows of Q, K, V: element (b, s, head, c) */
    int64_t qw = packed ? (hq + 2 * hkv) * d : hq * d, kw = packed ? qw : hkv * d;
    const kb_tensor *kt = packed ? q : k, *vt = packed ? q : v;
    int64_t k0 = packed ? hq * d : 0, v0 = packed ? (hq + hkv) * d : 0;
    double *p = kn_malloc(sizeof(double) * (size_t)(S + 1));
    if (!p)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < B; b++) {
        int64_t len = (int64_t)((const int32_t *)sl->data)[b] + 1;
        for (int64_t h = 0; h < hq; h++) {
            int64_t hk = h / (hq / hkv);
            for (int64_t i = 0; i < S; i++) {
                double mx = -INFINITY;
                for (int64_t j = 0; j < S; j++) {
                    double s = -INFINITY;
                    if (j <= i && j < len) {
                        double dot = 0.0;
                        for (int64_t c = 0; c < d; c++)
                            dot += kb_ld(q->data, q->dtype, (size_t)((b * S + i) * qw + h * d + c)) *
                                   kb_ld(kt->data, kt->dtype,
                                         (size_t)((b * S + j) * kw + k0 + hk * d + c));
                        s = dot * scale;
                        if (softcap > 0.0)
                            s = softcap * tanh(s / softcap);
                    }
                    p[j] = s;
                    mx = s > mx ? s : mx;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < S; j++) {
                    p[j] = mx == -INFINITY ? 0.0 : exp(p[j] - mx);
                    sum += p[j];
                }
                for (int64_t c = 0; c < d; c++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < S; j++)
                        if (p[j] != 0.0)
                            acc += p[j] * kb_ld(vt->data, vt->dtype,
                                                (size_t)((b * S + j) * kw + v0 + hk * d + c));
                    kb_st(r->out[0].data, r->out[0].dtype, (size_t)((b * S + i) * hq * d + h * d + c),
                          sum > 0.0 ? acc / sum : 0.0);
                }
            }
        }
    }
    kn_free(p);
    /* present key / value: the new ones in [B, Hkv, S, D] */
    for (int o = 1; o < 3 && o < r->n_out; o++) {
        kb_tensor *pt = &r->out[o];
        if (!pt->data)
            continue;
        if (pt->rank != 4 || pt->dims[0] != B || pt->dims[1] != hkv || pt->dims[2] != S ||
            pt->dims[3] != d)
            return kn_node_error(r->node, KILN_ERR_SHAPE, "present output %d does not fit", o);
        const kb_tensor *src = o == 1 ? kt : vt;
        int64_t off = o == 1 ? k0 : v0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < hkv; h++)
                for (int64_t s = 0; s < S; s++)
                    for (int64_t c = 0; c < d; c++)
                        kb_st(pt->data, pt->dtype, (size_t)(((b * hkv + h) * S + s) * d + c),
                              kb_ld(src->data, src->dtype, (size_t)((b * S + s) * kw + off + h * d + c)));
    }
    return KILN_OK;
}
