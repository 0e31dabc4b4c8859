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
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t job = 0; job < jobs; job++) {
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
    return KILN_OK;
}
