/* ops_fused.c - op schemas of kiln's fused ops (domain "kiln", see fused.h):
 * each infers like its base ONNX op, then checks what the epilogue adds. */
#include <string.h>

#include "fused.h"
#include "graph.h"

/* Run the base op's inference on the first n_in inputs. */
static kiln_status infer_as(kn_infer *c, const char *base, int n_in) {
    const kn_op_schema *s = kn_op_find("", base);
    if (!s)
        return kn_node_error(c->node, KILN_ERR_INTERNAL, "no schema for base op %s", base);
    kn_infer sub = *c;
    sub.n_in = n_in < c->n_in ? n_in : c->n_in;
    sub.n_out = 1;
    return s->infer(&sub);
}

/* Whether t broadcasts (unidirectionally, numpy rules) to y's shape. */
static bool broadcasts_to(const kn_tinfo *t, const kn_tinfo *y) {
    if (t->rank > y->rank)
        return false;
    for (int i = 1; i <= t->rank; i++) {
        int64_t d = t->dims[t->rank - i];
        if (d != 1 && d != y->dims[y->rank - i])
            return false;
    }
    return true;
}

/* The reference kernels compute in float; float16, bfloat16 and double pass
 * through float copies. */
static kiln_status need_real(kn_infer *c) {
    for (int i = 0; i < c->n_in; i++) {
        kiln_dtype t = kn_has_in(c, i) ? c->in[i].dtype : KILN_DTYPE_FLOAT;
        if (t != KILN_DTYPE_FLOAT && t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16 &&
            t != KILN_DTYPE_DOUBLE)
            return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "input %d has type %s, not a float type",
                                 i, kiln_dtype_name(t));
    }
    if (c->n_in > 4)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "too many inputs (%d)", c->n_in);
    return KILN_OK;
}

void kn_mask_strides(int rank, const int64_t *dims, int64_t strides[4]) {
    int64_t stride = 1;
    for (int i = 0; i < 4; i++)
        strides[i] = 0;
    for (int i = 1; i <= rank && i <= 4; i++) {
        int64_t d = dims[rank - i];
        strides[4 - i] = d == 1 ? 0 : stride;
        stride *= d;
    }
}

int64_t kn_mask_batches(int rank, const int64_t *dims) {
    return rank >= 4 && dims[rank - 4] > 1 ? dims[rank - 4] : 1;
}

/* [N, S..., C] <-> [N, C, S...]: to_first moves the last dim to 1, else
 * dim 1 to the end. */
void kn_dims_channels(int rank, const int64_t *in, int64_t *out, bool to_first) {
    if (rank < 2) {
        memcpy(out, in, sizeof(int64_t) * (size_t)(rank > 0 ? rank : 0));
        return;
    }
    out[0] = in[0];
    if (to_first) {
        out[1] = in[rank - 1];
        for (int d = 2; d < rank; d++)
            out[d] = in[d - 1];
    } else {
        for (int d = 2; d < rank; d++)
            out[d - 1] = in[d];
        out[rank - 1] = in[1];
    }
}

/* A channels-last node (attribute channels_last = 1) infers as its base op
 * on channels-first views of the inputs listed in `mask` (bit i: input i
 * is an activation or weight in channels-last order); output 0 is turned
 * back to channels-last. */
static kiln_status infer_channels_last(kn_infer *c, const char *base, int n_in, unsigned mask) {
    int n = n_in < c->n_in ? n_in : c->n_in;
    kn_tinfo tmp[4];
    if (n > 4)
        return kn_node_error(c->node, KILN_ERR_INTERNAL, "too many inputs");
    for (int i = 0; i < n; i++) {
        tmp[i] = c->in[i];
        if ((mask >> i & 1u) && kn_has_in(c, i)) {
            if (tmp[i].rank < 3)
                return kn_node_error(c->node, KILN_ERR_SHAPE,
                                     "channels-last input %d has rank %d (3 to 5 expected)", i,
                                     tmp[i].rank);
            kn_dims_channels(tmp[i].rank, c->in[i].dims, tmp[i].dims, true);
        }
    }
    kn_infer sub = *c;
    sub.in = tmp;
    KN_TRY(infer_as(&sub, base, n));
    int64_t d[KILN_MAX_DIMS];
    kn_dims_channels(c->out[0].rank, c->out[0].dims, d, false);
    memcpy(c->out[0].dims, d, sizeof(int64_t) * (size_t)c->out[0].rank);
    return KILN_OK;
}

/* Input 3, the residual Z of kiln::Conv and kiln::MatMul, has Y's shape. */
static kiln_status check_residual(const kn_infer *c) {
    if (!kn_has_in(c, 3))
        return KILN_OK;
    const kn_tinfo *z = &c->in[3], *y = &c->out[0];
    if (z->rank != y->rank || memcmp(z->dims, y->dims, sizeof(int64_t) * (size_t)y->rank))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "the residual Z must have the output's shape");
    return KILN_OK;
}

static kiln_status infer_fused_conv(kn_infer *c) {
    KN_TRY(need_real(c));
    if (kn_attr_int(c->node, "channels_last", 0))
        KN_TRY(infer_channels_last(c, "Conv", 3, 0x3u));
    else
        KN_TRY(infer_as(c, "Conv", 3));
    return check_residual(c);
}

static kiln_status infer_fused_gemm(kn_infer *c) {
    KN_TRY(need_real(c));
    return infer_as(c, "Gemm", 3);
}

static kiln_status infer_fused_matmul(kn_infer *c) {
    KN_TRY(need_real(c));
    KN_TRY(infer_as(c, "MatMul", 2));
    if (kn_has_in(c, 2) && !broadcasts_to(&c->in[2], &c->out[0]))
        return kn_node_error(c->node, KILN_ERR_SHAPE, "bias does not broadcast to the output");
    return check_residual(c);
}

kiln_status kn_attention_views(const kn_node *n, int n_in, const int *rank,
                               const int64_t (*dims)[KILN_MAX_DIMS], kn_att_view v[3]) {
    memset(v, 0, 3 * sizeof *v);
    if (kn_attr_int(n, "qkv_packed", 0)) { /* X [B, S, 3, H, D]: Q, K, V interleaved */
        if (n_in < 1 || rank[0] != 5 || dims[0][2] != 3 || (n_in > 1 && rank[1] >= 0) ||
            (n_in > 2 && rank[2] >= 0))
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "qkv_packed takes one [B, S, 3, H, D] input (K and V absent)");
        const int64_t *x = dims[0];
        for (int i = 0; i < 3; i++)
            v[i] = (kn_att_view){x[0], x[1], x[3], x[4], i * x[3] * x[4], x[1] * 3 * x[3] * x[4],
                                 3 * x[3] * x[4], x[4]};
        return KILN_OK;
    }
    if (n_in < 3 || rank[0] < 0 || rank[1] < 0 || rank[2] < 0)
        return kn_node_error(n, KILN_ERR_SHAPE, "needs Q, K and V");
    size_t nl = 0, no = 0, nh = 0;
    const int64_t *lay = kn_attr_ints(n, "layouts", &nl);
    const int64_t *off = kn_attr_ints(n, "head_offsets", &no);
    const int64_t *hs = kn_attr_ints(n, "heads", &nh);
    if ((lay && nl != 3) || (off && no != 3) || (hs && nh != 3))
        return kn_node_error(n, KILN_ERR_SHAPE, "layouts, head_offsets and heads take 3 values");
    for (int i = 0; i < 3; i++) {
        if (rank[i] != 4)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "Q, K, V must be [B, S, H, D] (ranks %d, %d, %d)", rank[0],
                                 rank[1], rank[2]);
        const int64_t *x = dims[i];
        int64_t l = lay ? lay[i] : 0, h0 = off ? off[i] : 0;
        if (l != 0 && l != 1)
            return kn_node_error(n, KILN_ERR_SHAPE, "layout %lld of input %d is not 0 or 1",
                                 (long long)l, i);
        int64_t hx = l ? x[1] : x[2], s = l ? x[2] : x[1], d = x[3];
        int64_t h = hs && hs[i] > 0 ? hs[i] : hx - h0;
        if (h0 < 0 || h < 1 || h0 + h > hx)
            return kn_node_error(n, KILN_ERR_SHAPE,
                                 "input %d: heads [%lld, %lld) outside its %lld heads", i,
                                 (long long)h0, (long long)(h0 + h), (long long)hx);
        if (l)
            v[i] = (kn_att_view){x[0], s, h, d, h0 * s * d, hx * s * d, d, s * d};
        else
            v[i] = (kn_att_view){x[0], s, h, d, h0 * d, s * hx * d, hx * d, d};
    }
    return KILN_OK;
}

/* kiln::Attention: Q [B, Sq, H, D], K [B, Sk, Hkv, D], V [B, Sk, Hkv, Dv]
 * (Hkv dividing H; each a view of its input, kn_attention_views), an
 * optional additive mask broadcastable to [B, H, Sq, Sk] -> Y [B, Sq, H, Dv]. */
static kiln_status infer_attention(kn_infer *c) {
    KN_TRY(need_real(c));
    int rank[3];
    int64_t dims[3][KILN_MAX_DIMS];
    memset(dims, 0, sizeof dims);
    for (int i = 0; i < 3; i++) {
        rank[i] = i < c->n_in && kn_has_in(c, i) ? c->in[i].rank : -1;
        if (rank[i] >= 0)
            memcpy(dims[i], c->in[i].dims, sizeof dims[i]);
    }
    kn_att_view vw[3];
    KN_TRY(kn_attention_views(c->node, c->n_in < 3 ? c->n_in : 3, rank,
                              (const int64_t (*)[KILN_MAX_DIMS])dims, vw));
    kn_tinfo qkv[3];
    for (int i = 0; i < 3; i++) {
        qkv[i] = c->in[rank[i] >= 0 ? i : 0];
        qkv[i].rank = 4;
        qkv[i].dims[0] = vw[i].b;
        qkv[i].dims[1] = vw[i].s;
        qkv[i].dims[2] = vw[i].h;
        qkv[i].dims[3] = vw[i].d;
    }
    const kn_tinfo *q = &qkv[0], *k = &qkv[1], *v = &qkv[2];
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "Q, K, V types differ");
    if (k->dims[0] != q->dims[0] || v->dims[0] != q->dims[0] || v->dims[2] != k->dims[2] ||
        k->dims[3] != q->dims[3] || v->dims[1] != k->dims[1])
        return kn_node_error(c->node, KILN_ERR_SHAPE, "Q, K, V shapes do not match");
    /* grouped-query attention: query head h reads K/V head h / (Hq / Hkv) */
    if (k->dims[2] < 1 || q->dims[2] % k->dims[2] != 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "K/V heads (%lld) do not divide the query heads (%lld)",
                             (long long)k->dims[2], (long long)q->dims[2]);
    if (kn_has_in(c, 3)) {
        const kn_tinfo *m = &c->in[3];
        int64_t full[4] = {q->dims[0], q->dims[2], q->dims[1], k->dims[1]};
        bool mod = kn_attr_int(c->node, "mask_batch_mod", 0) != 0;
        if (m->rank > 4)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "mask rank %d > 4", m->rank);
        for (int i = 1; i <= m->rank; i++) {
            int64_t d = m->dims[m->rank - i];
            if (i == 4 && mod && d >= 1 && full[0] % d == 0)
                continue; /* batch b reads mask batch b % d */
            if (d != 1 && d != full[4 - i])
                return kn_node_error(c->node, KILN_ERR_SHAPE,
                                     mod ? "mask does not broadcast to [B, H, Sq, Sk] (its batch "
                                           "dim dividing B)"
                                         : "mask does not broadcast to [B, H, Sq, Sk]");
        }
    }
    c->out[0].dtype = q->dtype;
    c->out[0].rank = 4;
    c->out[0].dims[0] = q->dims[0];
    c->out[0].dims[1] = q->dims[1];
    c->out[0].dims[2] = q->dims[2];
    c->out[0].dims[3] = v->dims[3];
    return KILN_OK;
}

/* com.microsoft MultiHeadAttention and Attention, known so that models
 * ONNX Runtime's transformer optimizer wrote load: the builder maps the
 * forms kiln::Attention computes onto it (pass_attention.c); no kernel runs
 * them as they are. Only output 0 is inferred (present states stay
 * unknown). MultiHeadAttention: 3-D query [B, S, E] and value [B, L, Ev]
 * -> [B, S, Ev]. Attention: input [B, S, In], weights [In, 3E] (or
 * qkv_hidden_sizes) -> [B, S, E_v]. */
static kiln_status infer_ms_mha(kn_infer *c) {
    if (c->n_in < 1 || !kn_has_in(c, 0) || c->in[0].rank != 3)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "query must be [B, S, E] (rank %d)",
                             c->n_in > 0 && kn_has_in(c, 0) ? c->in[0].rank : -1);
    c->out[0] = c->in[0];
    if (c->n_in > 2 && kn_has_in(c, 2) && c->in[2].rank == 3)
        c->out[0].dims[2] = c->in[2].dims[2];
    else if (c->n_in > 2 && kn_has_in(c, 2) && c->in[2].rank == 4) /* [B, H, L, Dv] */
        c->out[0].dims[2] = c->in[2].dims[1] * c->in[2].dims[3];
    return KILN_OK;
}

static kiln_status infer_ms_attention(kn_infer *c) {
    if (c->n_in < 2 || !kn_has_in(c, 0) || !kn_has_in(c, 1) || c->in[0].rank != 3 ||
        c->in[1].rank != 2)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "needs input [B, S, In] and weights [In, 3E]");
    size_t n = 0;
    const int64_t *qs = kn_attr_ints(c->node, "qkv_hidden_sizes", &n);
    c->out[0] = c->in[0];
    c->out[0].dims[2] = qs && n == 3 ? qs[2] : c->in[1].dims[1] / 3;
    return KILN_OK;
}

/* com.microsoft GroupQueryAttention (known so that its prompt form loads
 * and maps onto kiln::Attention): query [B, S, Hq * D], or packed
 * [B, S, (Hq + 2 Hkv) * D] without key and value -> [B, S, Hq * D]; the
 * present key / value [B, Hkv, past + S, D] (the prompt form's reference
 * writes the new keys and values there; ONNX Runtime sizes them by
 * total_sequence_length, the same in a prompt without padding). */
static kiln_status infer_ms_gqa(kn_infer *c) {
    int64_t hq = kn_attr_int(c->node, "num_heads", 0), hkv = kn_attr_int(c->node, "kv_num_heads", 0);
    if (c->n_in < 1 || !kn_has_in(c, 0) || c->in[0].rank != 3 || hq <= 0 || hkv <= 0)
        return kn_node_error(c->node, KILN_ERR_SHAPE,
                             "needs query [B, S, num_heads * D], num_heads and kv_num_heads");
    c->out[0] = c->in[0];
    if (!(c->n_in > 1 && kn_has_in(c, 1))) {
        int64_t w = c->in[0].dims[2];
        if (w % (hq + 2 * hkv))
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "packed query width %lld is not (num_heads + 2 kv_num_heads) * D",
                                 (long long)w);
        c->out[0].dims[2] = w / (hq + 2 * hkv) * hq;
    }
    /* present key / value [B, Hkv, past + S, D] (BNSH) */
    int64_t d = c->out[0].dims[2] / hq, past = 0;
    if (c->n_in > 3 && kn_has_in(c, 3) && c->in[3].rank == 4)
        past = c->in[3].dims[2];
    for (int j = 1; j < 3 && j < c->n_out; j++) {
        c->out[j].dtype = c->in[0].dtype;
        c->out[j].rank = 4;
        c->out[j].dims[0] = c->in[0].dims[0];
        c->out[j].dims[1] = hkv;
        c->out[j].dims[2] = past + c->in[0].dims[1];
        c->out[j].dims[3] = d;
    }
    return KILN_OK;
}

bool kn_suffix_of(const kn_tinfo *r, const kn_tinfo *y) {
    int lead = 0;
    while (lead < r->rank - 1 && r->dims[lead] == 1)
        lead++;
    int n = r->rank - lead;
    if (r->rank < 1 || n > y->rank)
        return false;
    for (int i = 0; i < n; i++)
        if (r->dims[lead + i] != y->dims[y->rank - n + i])
            return false;
    return true;
}

/* kiln::LayerNorm: X, Scale, B?, Ids?, R1..R4? -> Y. Rows of X (gather 0)
 * or rows X[Ids] of a [V, H] table (gather 1), plus each R (a suffix of
 * Y's shape), normalized over the last dim H. */
static kiln_status infer_layernorm_fused(kn_infer *c) {
    if (c->n_in < 2 || !kn_has_in(c, 0) || !kn_has_in(c, 1) || c->n_in > 4 + KN_LN_MAX_ADD)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "needs X and Scale, at most %d addends",
                             KN_LN_MAX_ADD);
    const kn_tinfo *x = &c->in[0];
    kiln_dtype t = x->dtype;
    if (t != KILN_DTYPE_FLOAT && t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16 &&
        t != KILN_DTYPE_DOUBLE)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "X has type %s, not a float type",
                             kiln_dtype_name(t));
    if (x->rank < 1)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "X must have rank 1 or more");
    int64_t h = x->dims[x->rank - 1];
    kn_tinfo *y = &c->out[0];
    if (kn_attr_int(c->node, "gather", 0)) {
        if (x->rank != 2 || c->n_in < 4 || !kn_has_in(c, 3))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "gather takes a [V, H] table and Ids");
        const kn_tinfo *ids = &c->in[3];
        if (ids->dtype != KILN_DTYPE_INT64 && ids->dtype != KILN_DTYPE_INT32)
            return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "Ids must be int32 or int64");
        if (ids->rank + 1 > KILN_MAX_DIMS)
            return kn_node_error(c->node, KILN_ERR_SHAPE, "Ids rank %d too large", ids->rank);
        y->dtype = t;
        y->rank = ids->rank + 1;
        for (int i = 0; i < ids->rank; i++)
            y->dims[i] = ids->dims[i];
        y->dims[ids->rank] = h;
    } else {
        if (c->n_in > 3 && kn_has_in(c, 3))
            return kn_node_error(c->node, KILN_ERR_SHAPE, "Ids given without gather = 1");
        kn_same_as(y, x);
    }
    for (int i = 1; i < 3; i++) {
        if (!kn_has_in(c, i))
            continue;
        const kn_tinfo *p = &c->in[i];
        if (kn_numel(p->rank, p->dims) != h || (p->dtype != t && p->dtype != KILN_DTYPE_FLOAT))
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "%s must hold H = %lld values of X's type or float",
                                 i == 1 ? "Scale" : "B", (long long)h);
    }
    if (kn_has_in(c, 2) && c->in[2].dtype != c->in[1].dtype)
        return kn_node_error(c->node, KILN_ERR_SHAPE, "Scale and B types differ");
    for (int i = 4; i < c->n_in; i++) {
        if (!kn_has_in(c, i))
            continue;
        if (c->in[i].dtype != t || !kn_suffix_of(&c->in[i], y))
            return kn_node_error(c->node, KILN_ERR_SHAPE,
                                 "addend %d must be X's type and a suffix of Y's shape", i - 3);
    }
    if (c->n_out > 1 && kn_has_out(c, 1)) /* the sum: Y's shape, X's type */
        c->out[1] = *y;
    return KILN_OK;
}

/* kiln::MaxPool / kiln::AveragePool: the ONNX pool on a channels-last X
 * (channels_last must be 1; one output, no Indices). */
static kiln_status infer_pool_cl(kn_infer *c) {
    if (kn_attr_int(c->node, "channels_last", 0) != 1)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "kiln pools need channels_last = 1");
    if (c->n_out > 1)
        return kn_node_error(c->node, KILN_ERR_UNSUPPORTED, "no Indices output in channels-last pools");
    return infer_channels_last(c, c->node->op_type, 1, 0x1u);
}

/* kiln::ToHost / kiln::ToDevice: the reformat layers of a device plan
 * around a layer placed on the host (src/builder/place.c); Y is X. */
static kiln_status infer_reformat(kn_infer *c) {
    if (c->n_in != 1 || c->n_out != 1 || !kn_has_in(c, 0))
        return kn_node_error(c->node, KILN_ERR_INVALID_ARGUMENT, "a reformat takes one input");
    c->out[0] = c->in[0];
    c->out[0].value = NULL;
    c->out[0].data_dependent = false;
    return KILN_OK;
}

const kn_op_schema kn_ops_fused[] = {
    {"ToHost", KN_DOMAIN_KILN, infer_reformat, 0},
    {"ToDevice", KN_DOMAIN_KILN, infer_reformat, 0},
    {"Conv", KN_DOMAIN_KILN, infer_fused_conv, 0},
    {"Gemm", KN_DOMAIN_KILN, infer_fused_gemm, 0},
    {"MatMul", KN_DOMAIN_KILN, infer_fused_matmul, 0},
    {"MaxPool", KN_DOMAIN_KILN, infer_pool_cl, 0},
    {"Attention", KN_DOMAIN_KILN, infer_attention, 0},
    {"MultiHeadAttention", "com.microsoft", infer_ms_mha, 0},
    {"Attention", "com.microsoft", infer_ms_attention, 0},
    {"GroupQueryAttention", "com.microsoft", infer_ms_gqa, 0},
    {"AveragePool", KN_DOMAIN_KILN, infer_pool_cl, 0},
    {"LayerNorm", KN_DOMAIN_KILN, infer_layernorm_fused, 0},
};
const size_t kn_ops_fused_count = KN_ARRAY_LEN(kn_ops_fused);
