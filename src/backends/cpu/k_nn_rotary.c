/* k_nn_rotary.c - reference RotaryEmbedding (ONNX opset 23 and
 * com.microsoft): each head's first R dims rotate by the cached angle of the
 * token's position, as halves or as interleaved pairs; the rest pass
 * through. Geometry from graph/rotary.h, shared with the CUDA kernel: X and
 * Y are read and written through its strides (a view of a packed
 * projection, a heads-first Y). */
#include <string.h>

#include "graph/rotary.h"
#include "k_nn.h"

static kiln_status rotary_geometry(const kb_run *r, kn_rotary *g) {
    int rank[8];
    int64_t dims[8][KILN_MAX_DIMS];
    int n_in = r->n_in < 8 ? r->n_in : 8;
    for (int i = 0; i < n_in; i++) {
        rank[i] = r->in[i].data || r->in[i].dtype != KILN_DTYPE_UNDEFINED ? r->in[i].rank : -1;
        memcpy(dims[i], r->in[i].dims, sizeof dims[i]);
    }
    return kn_rotary_geometry(r->node, n_in, rank, (const int64_t (*)[KILN_MAX_DIMS])dims, g);
}

/* Cache row of token (b, s), or -1 when its position is outside the caches. */
static int64_t cache_row(const kn_rotary *g, const kb_tensor *pos, int64_t b, int64_t s) {
    int64_t row;
    if (g->pos_mode == KN_ROT_POS_NONE)
        return (g->cache_batch == 1 ? 0 : b) * g->seq + s;
    if (g->pos_mode == KN_ROT_POS_OFFSET)
        row = (int64_t)kb_ld(pos->data, pos->dtype, 0) + s;
    else
        row = (int64_t)kb_ld(pos->data, pos->dtype, (size_t)(b * g->seq + s));
    return row >= 0 && row < g->cache_rows ? row : -1;
}

typedef struct rotary_tokens_ctx {
    kn_rotary g;
    const kb_tensor *x;
    const kb_tensor *cs;
    const kb_tensor *sn;
    const kb_tensor *pos;
    kb_tensor *y;
    int64_t half;
} rotary_tokens_ctx;

static void rotary_tokens(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const rotary_tokens_ctx *c_ = vc;
    kn_rotary g = c_->g;
    const kb_tensor *x = c_->x;
    const kb_tensor *cs = c_->cs;
    const kb_tensor *sn = c_->sn;
    const kb_tensor *pos = c_->pos;
    kb_tensor *y = c_->y;
    int64_t half = c_->half;
    (void)tid;
    for (int64_t t = lo_; t < hi_; t++) {
        int64_t b = t / g.seq, s = t % g.seq, row = cache_row(&g, pos, b, s) * g.cache_stride;
        for (int64_t h = 0; h < g.heads; h++) {
            int64_t base = kn_rotary_at(&g, b, s, h, 0), yb = kn_rotary_y_at(&g, b, s, h, 0);
            for (int64_t i = 0; i < half; i++) {
                int64_t i1 = g.interleaved ? 2 * i : i, i2 = g.interleaved ? 2 * i + 1 : i + half;
                double c = kb_ld(cs->data, cs->dtype, (size_t)(row + i));
                double sv = kb_ld(sn->data, sn->dtype, (size_t)(row + i));
                double x1 = kb_ld(x->data, x->dtype, (size_t)(base + i1));
                double x2 = kb_ld(x->data, x->dtype, (size_t)(base + i2));
                kb_st(y->data, y->dtype, (size_t)(yb + i1), c * x1 - sv * x2);
                kb_st(y->data, y->dtype, (size_t)(yb + i2), sv * x1 + c * x2);
            }
            for (int64_t d = g.rot; d < g.head; d++)
                kb_st(y->data, y->dtype, (size_t)(yb + d),
                      kb_ld(x->data, x->dtype, (size_t)(base + d)));
        }
    }
}

kiln_status kb_nn_rotary_run(const kb_run *r) {
    kn_rotary g;
    KN_TRY(rotary_geometry(r, &g));
    const kb_tensor *x = &r->in[g.x], *cs = &r->in[g.cos], *sn = &r->in[g.sin];
    const kb_tensor *pos = g.pos >= 0 ? &r->in[g.pos] : NULL;
    kb_tensor *y = &r->out[0];
    for (int64_t b = 0; b < g.batch; b++) /* every position checked before a value is written */
        for (int64_t s = 0; s < g.seq; s++)
            if (cache_row(&g, pos, b, s) < 0)
                return kn_node_error(r->node, KILN_ERR_INVALID_ARGUMENT,
                                     "position of token (%lld, %lld) is outside the caches' %lld "
                                     "rows",
                                     (long long)b, (long long)s, (long long)g.cache_rows);
    int64_t half = g.rot / 2, tokens = g.batch * g.seq;
    int nth = r->threads > 1 && kb_numel(y) > 32768 ? r->threads : 1;
    {
        rotary_tokens_ctx c_ = {g, x, cs, sn, pos, y, half};
        kn_parallel_for(nth, tokens, 0, rotary_tokens, &c_);
    }
    return KILN_OK;
}
