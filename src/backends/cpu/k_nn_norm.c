/* k_nn_norm.c - reference normalizations: BatchNormalization (inference and training mode),
 * InstanceNormalization, LayerNormalization, GroupNormalization,
 * LpNormalization, LRN, MeanVarianceNormalization. Statistics are computed
 * in double; values go through kb_ld / kb_st so float, double and float16
 * all work. */
#include <math.h>
#include <string.h>

#include "graph/fused.h"
#include "k_nn.h"

static double ld(const kb_tensor *t, int64_t i) { return kb_ld(t->data, t->dtype, (size_t)i); }
static void st(kb_tensor *t, int64_t i, double v) { kb_st(t->data, t->dtype, (size_t)i, v); }
static bool present(const kb_run *r, int i) { return i < r->n_in && r->in[i].data; }

static int threads_for(const kb_run *r, int64_t work) {
    return r->threads > 1 && work > 32768 ? r->threads : 1;
}

/* Mean and variance (population) of n values starting at x[off]. */
static void row_stats(const kb_tensor *x, int64_t off, int64_t n, double *mean, double *var) {
    if (x->dtype == KILN_DTYPE_FLOAT) { /* the common case, without per-element dispatch */
        const float *p = (const float *)x->data + off;
        double s = 0.0, q = 0.0;
        for (int64_t i = 0; i < n; i++)
            s += p[i];
        double m = n ? s / (double)n : 0.0;
        for (int64_t i = 0; i < n; i++)
            q += (p[i] - m) * (p[i] - m);
        *mean = m;
        *var = n ? q / (double)n : 0.0;
        return;
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += ld(x, off + i);
    double m = n ? s / (double)n : 0.0, q = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = ld(x, off + i) - m;
        q += d * d;
    }
    *mean = m;
    *var = n ? q / (double)n : 0.0;
}

/* y[off + i] = x[off + i] * k + shift for n values. */
static void affine(const kb_tensor *x, kb_tensor *y, int64_t off, int64_t n, double k,
                   double shift) {
    if (x->dtype == KILN_DTYPE_FLOAT && y->dtype == KILN_DTYPE_FLOAT) {
        const float *xp = (const float *)x->data + off;
        float *yp = (float *)y->data + off;
        float kf = (float)k, sf = (float)shift;
        for (int64_t i = 0; i < n; i++)
            yp[i] = xp[i] * kf + sf;
        return;
    }
    for (int64_t i = 0; i < n; i++)
        st(y, off + i, ld(x, off + i) * k + shift);
}

typedef struct batchnorm_planes_ctx {
    const kb_tensor *x;
    const kb_tensor *sc;
    const kb_tensor *b;
    const kb_tensor *mean;
    const kb_tensor *var;
    kb_tensor *y;
    double eps;
    int64_t ch;
    int64_t size;
} batchnorm_planes_ctx;

static void batchnorm_planes(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const batchnorm_planes_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *sc = c_->sc;
    const kb_tensor *b = c_->b;
    const kb_tensor *mean = c_->mean;
    const kb_tensor *var = c_->var;
    kb_tensor *y = c_->y;
    double eps = c_->eps;
    int64_t ch = c_->ch;
    int64_t size = c_->size;
    (void)tid;
    for (int64_t pl = lo_; pl < hi_; pl++) {
        int64_t c = pl % ch;
        double k = ld(sc, c) / sqrt(ld(var, c) + eps);
        double shift = ld(b, c) - ld(mean, c) * k;
        affine(x, y, pl * size, size, k, shift);
    }
}

/* Training mode: each channel's mean and (population) variance over the
 * batch and spatial dims normalize Y; outputs 1 and 2, where present, are
 * input_mean * momentum + batch_mean * (1 - momentum), and the same of the
 * variances. */
static kiln_status batchnorm_training(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1], *b = &r->in[2], *mean = &r->in[3],
                    *var = &r->in[4];
    kb_tensor *y = &r->out[0];
    double eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    double mom = kn_attr_float(r->node, "momentum", 0.9f);
    int64_t n = x->dims[0], ch = x->dims[1], size = kn_numel(x->rank - 2, x->dims + 2);
    for (int64_t c = 0; c < ch; c++) {
        double s = 0.0, q = 0.0, cnt = (double)(n * size);
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < size; k++)
                s += ld(x, (i * ch + c) * size + k);
        double m = cnt > 0 ? s / cnt : 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < size; k++) {
                double d = ld(x, (i * ch + c) * size + k) - m;
                q += d * d;
            }
        double v = cnt > 0 ? q / cnt : 0.0;
        double kf = ld(sc, c) / sqrt(v + eps), shift = ld(b, c) - m * kf;
        for (int64_t i = 0; i < n; i++)
            affine(x, y, (i * ch + c) * size, size, kf, shift);
        if (r->n_out > 1 && r->out[1].data)
            st(&r->out[1], c, ld(mean, c) * mom + m * (1.0 - mom));
        if (r->n_out > 2 && r->out[2].data)
            st(&r->out[2], c, ld(var, c) * mom + v * (1.0 - mom));
    }
    return KILN_OK;
}

kiln_status kb_nn_batchnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1], *b = &r->in[2], *mean = &r->in[3],
                    *var = &r->in[4];
    kb_tensor *y = &r->out[0];
    if (kn_attr_int(r->node, "training_mode", 0) != 0)
        return batchnorm_training(r);
    double eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    int64_t ch = x->dims[1], size = kn_numel(x->rank - 2, x->dims + 2);
    if (kb_numel(sc) != ch) { /* spatial=0 (opsets 7, 8): one value per activation */
        ch *= size;
        size = 1;
    }
    int64_t planes = x->dims[0] * ch;
    int nth = threads_for(r, planes * size);
    {
        batchnorm_planes_ctx c_ = {x, sc, b, mean, var, y, eps, ch, size};
        kn_parallel_for(nth, planes, 0, batchnorm_planes, &c_);
    }
    return KILN_OK;
}

typedef struct instancenorm_planes_ctx {
    const kb_tensor *x;
    const kb_tensor *sc;
    const kb_tensor *b;
    kb_tensor *y;
    double eps;
    int64_t ch;
    int64_t size;
} instancenorm_planes_ctx;

static void instancenorm_planes(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const instancenorm_planes_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *sc = c_->sc;
    const kb_tensor *b = c_->b;
    kb_tensor *y = c_->y;
    double eps = c_->eps;
    int64_t ch = c_->ch;
    int64_t size = c_->size;
    (void)tid;
    for (int64_t pl = lo_; pl < hi_; pl++) {
        double m, v;
        row_stats(x, pl * size, size, &m, &v);
        double k = ld(sc, pl % ch) / sqrt(v + eps), shift = ld(b, pl % ch);
        affine(x, y, pl * size, size, k, shift - m * k);
    }
}

kiln_status kb_nn_instancenorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1], *b = &r->in[2];
    kb_tensor *y = &r->out[0];
    double eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    int64_t ch = x->dims[1], size = kn_numel(x->rank - 2, x->dims + 2);
    int64_t planes = x->dims[0] * ch;
    int nth = threads_for(r, planes * size);
    {
        instancenorm_planes_ctx c_ = {x, sc, b, y, eps, ch, size};
        kn_parallel_for(nth, planes, 0, instancenorm_planes, &c_);
    }
    return KILN_OK;
}

/* Index into t (broadcast to the trailing `rank` dims `dims`) of element j
 * of a block with those dims. */
static int64_t bcast_index(const kb_tensor *t, int64_t j, int rank, const int64_t *dims) {
    int64_t off = 0, mul = 1;
    for (int d = rank - 1; d >= 0 && rank - 1 - d < t->rank; d--) {
        int64_t cj = j % dims[d];
        j /= dims[d];
        int td = t->rank - (rank - d);
        if (t->dims[td] != 1)
            off += cj * mul;
        mul *= t->dims[td];
    }
    return off;
}

typedef struct layernorm_rows_ctx {
    const kb_tensor *x;
    const kb_tensor *sc;
    const kb_tensor *b;
    kb_tensor *y;
    kb_tensor *mo;
    kb_tensor *io;
    double eps;
    int in_rank;
    const int64_t *in_dims;
    int64_t inner;
    bool sc_flat;
    bool b_flat;
    bool fast;
} layernorm_rows_ctx;

static void layernorm_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const layernorm_rows_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *sc = c_->sc;
    const kb_tensor *b = c_->b;
    kb_tensor *y = c_->y;
    kb_tensor *mo = c_->mo;
    kb_tensor *io = c_->io;
    double eps = c_->eps;
    int in_rank = c_->in_rank;
    const int64_t *in_dims = c_->in_dims;
    int64_t inner = c_->inner;
    bool sc_flat = c_->sc_flat;
    bool b_flat = c_->b_flat;
    bool fast = c_->fast;
    (void)tid;
    for (int64_t o = lo_; o < hi_; o++) {
        double m, v;
        row_stats(x, o * inner, inner, &m, &v);
        double inv = 1.0 / sqrt(v + eps);
        if (fast) {
            const float *xp = (const float *)x->data + o * inner, *sp = sc->data;
            const float *bp = b ? b->data : NULL;
            float *yp = (float *)y->data + o * inner;
            float mf = (float)m, invf = (float)inv;
            for (int64_t j = 0; j < inner; j++)
                yp[j] = (xp[j] - mf) * invf * sp[j] + (bp ? bp[j] : 0.f);
        } else {
            for (int64_t j = 0; j < inner; j++) {
                double s = ld(sc, sc_flat ? j : bcast_index(sc, j, in_rank, in_dims));
                double bb = b ? ld(b, b_flat ? j : bcast_index(b, j, in_rank, in_dims)) : 0.0;
                st(y, o * inner + j, (ld(x, o * inner + j) - m) * inv * s + bb);
            }
        }
        if (mo)
            st(mo, o, m);
        if (io)
            st(io, o, inv);
    }
}

kiln_status kb_nn_layernorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1];
    const kb_tensor *b = present(r, 2) ? &r->in[2] : NULL;
    kb_tensor *y = &r->out[0];
    kb_tensor *mo = r->n_out > 1 && r->out[1].data ? &r->out[1] : NULL;
    kb_tensor *io = r->n_out > 2 && r->out[2].data ? &r->out[2] : NULL;
    int64_t axis = kn_attr_int(r->node, "axis", -1);
    if (axis < 0)
        axis += x->rank;
    if (axis < 0 || axis >= x->rank)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "axis out of range");
    double eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    int in_rank = x->rank - (int)axis;
    const int64_t *in_dims = x->dims + axis;
    int64_t inner = kn_numel(in_rank, in_dims), outer = kn_numel((int)axis, x->dims);
    bool sc_flat = kb_numel(sc) == inner, b_flat = b && kb_numel(b) == inner;
    /* all float with per-element scale and bias: no per-element dispatch */
    bool fast = x->dtype == KILN_DTYPE_FLOAT && y->dtype == KILN_DTYPE_FLOAT &&
                sc->dtype == KILN_DTYPE_FLOAT && sc_flat &&
                (!b || (b_flat && b->dtype == KILN_DTYPE_FLOAT));
    int nth = threads_for(r, outer * inner);
    {
        layernorm_rows_ctx c_ = {x, sc, b, y, mo, io, eps, in_rank, in_dims, inner, sc_flat, b_flat, fast};
        kn_parallel_for(nth, outer, 0, layernorm_rows, &c_);
    }
    return KILN_OK;
}

/* One row of kiln::LayerNorm's sum: the source row of X and each addend's
 * row (all float: read through pointers, no per-element dispatch). */
typedef struct ln_row {
    const kb_tensor *x;
    int64_t xoff;
    int n_add;
    const kb_tensor *const *add;
    int64_t aoff[KN_LN_MAX_ADD];
    bool fast;
} ln_row;

/* Element j of the row's sum, in the same order every time it is asked. */
static double ln_row_at(const ln_row *w, int64_t j) {
    if (w->fast) {
        double e = ((const float *)w->x->data)[w->xoff + j];
        for (int k = 0; k < w->n_add; k++)
            e += ((const float *)w->add[k]->data)[w->aoff[k] + j];
        return e;
    }
    double e = ld(w->x, w->xoff + j);
    for (int k = 0; k < w->n_add; k++)
        e += ld(w->add[k], w->aoff[k] + j);
    return e;
}

typedef struct layernorm_fused_rows_ctx {
    const kb_tensor *x;
    const kb_tensor *sc;
    const kb_tensor *b;
    const kb_tensor *ids;
    kb_tensor *y;
    bool gather;
    int64_t h;
    int64_t v_rows;
    const kb_tensor *const *add;
    const int64_t *add_rows;
    int n_add;
    bool fast;
    double eps;
    kb_tensor *sum;
} layernorm_fused_rows_ctx;

static void layernorm_fused_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const layernorm_fused_rows_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *sc = c_->sc;
    const kb_tensor *b = c_->b;
    const kb_tensor *ids = c_->ids;
    kb_tensor *y = c_->y;
    bool gather = c_->gather;
    int64_t h = c_->h;
    int64_t v_rows = c_->v_rows;
    const kb_tensor *const *add = c_->add;
    const int64_t *add_rows = c_->add_rows;
    int n_add = c_->n_add;
    bool fast = c_->fast;
    double eps = c_->eps;
    kb_tensor *sum = c_->sum;
    (void)tid;
    for (int64_t o = lo_; o < hi_; o++) {
        ln_row w = {x, o * h, n_add, add, {0}, fast};
        if (gather) {
            int64_t src = (int64_t)ld(ids, o);
            w.xoff = (src < 0 ? src + v_rows : src) * h;
        }
        for (int k = 0; k < n_add; k++)
            w.aoff[k] = (o % add_rows[k]) * h;
        double s = 0.0;
        for (int64_t j = 0; j < h; j++)
            s += ln_row_at(&w, j);
        double m = h ? s / (double)h : 0.0, q = 0.0;
        for (int64_t j = 0; j < h; j++) {
            double d = ln_row_at(&w, j) - m;
            q += d * d;
        }
        double inv = 1.0 / sqrt((h ? q / (double)h : 0.0) + eps);
        if (fast) {
            float *yp = (float *)y->data + o * h;
            const float *sp = sc->data, *bp = b ? b->data : NULL;
            for (int64_t j = 0; j < h; j++)
                yp[j] = (float)((ln_row_at(&w, j) - m) * inv * sp[j] + (bp ? bp[j] : 0.0));
            if (sum)
                for (int64_t j = 0; j < h; j++)
                    ((float *)sum->data)[o * h + j] = (float)ln_row_at(&w, j);
        } else {
            for (int64_t j = 0; j < h; j++)
                st(y, o * h + j, (ln_row_at(&w, j) - m) * inv * ld(sc, j) + (b ? ld(b, j) : 0.0));
            if (sum)
                for (int64_t j = 0; j < h; j++)
                    st(sum, o * h + j, ln_row_at(&w, j));
        }
    }
}

/* kiln::LayerNorm (graph/fused.h): rows of X, or of a [V, H] table picked
 * by Ids, plus suffix-broadcast addends, normalized over H. Each pass over
 * a row forms its sum again, in double as the statistics are, so the
 * kernel needs no buffer; the Sum output (when asked) gets it rounded. */
kiln_status kb_nn_layernorm_fused_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1];
    const kb_tensor *b = present(r, 2) ? &r->in[2] : NULL;
    const kb_tensor *ids = present(r, 3) ? &r->in[3] : NULL;
    kb_tensor *y = &r->out[0];
    kb_tensor *sum = r->n_out > 1 && r->out[1].data ? &r->out[1] : NULL;
    bool gather = kn_attr_int(r->node, "gather", 0) != 0;
    if (sum && kb_numel(sum) != kb_numel(y))
        return kn_node_error(r->node, KILN_ERR_SHAPE, "the Sum output does not have Y's size");
    if (gather != (ids != NULL) || (gather && x->rank != 2))
        return kn_node_error(r->node, KILN_ERR_SHAPE, "gather needs a [V, H] table and Ids");
    int64_t h = y->rank ? y->dims[y->rank - 1] : 1, rows = h ? kb_numel(y) / h : 0;
    int64_t v_rows = x->rank ? kb_numel(x) / (h ? h : 1) : 1;
    const kb_tensor *add[KN_LN_MAX_ADD];
    int64_t add_rows[KN_LN_MAX_ADD];
    int n_add = 0;
    for (int i = 4; i < r->n_in && n_add < KN_LN_MAX_ADD; i++)
        if (present(r, i)) {
            add[n_add] = &r->in[i];
            add_rows[n_add++] = h ? kb_numel(&r->in[i]) / h : 1;
        }
    if (gather) { /* every id checked before any row is written */
        for (int64_t o = 0; o < rows; o++) {
            int64_t id = (int64_t)ld(ids, o);
            if (id < -v_rows || id >= v_rows)
                return kn_node_error(r->node, KILN_ERR_INVALID_ARGUMENT,
                                     "id %lld at position %lld is outside the table's %lld rows",
                                     (long long)id, (long long)o, (long long)v_rows);
        }
    }
    bool fast = x->dtype == KILN_DTYPE_FLOAT && y->dtype == KILN_DTYPE_FLOAT &&
                sc->dtype == KILN_DTYPE_FLOAT && (!b || b->dtype == KILN_DTYPE_FLOAT);
    for (int k = 0; k < n_add; k++)
        fast = fast && add[k]->dtype == KILN_DTYPE_FLOAT;
    fast = fast && (!sum || sum->dtype == KILN_DTYPE_FLOAT);
    double eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    int nth = threads_for(r, rows * h);
    {
        layernorm_fused_rows_ctx c_ = {x, sc, b, ids, y, gather, h, v_rows, add, add_rows, n_add, fast, eps, sum};
        kn_parallel_for(nth, rows, 0, layernorm_fused_rows, &c_);
    }
    return KILN_OK;
}

typedef struct rmsnorm_rows_ctx {
    const kb_tensor *x;
    const kb_tensor *sc;
    kb_tensor *y;
    double eps;
    int in_rank;
    const int64_t *in_dims;
    int64_t inner;
    bool sc_flat;
} rmsnorm_rows_ctx;

static void rmsnorm_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const rmsnorm_rows_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *sc = c_->sc;
    kb_tensor *y = c_->y;
    double eps = c_->eps;
    int in_rank = c_->in_rank;
    const int64_t *in_dims = c_->in_dims;
    int64_t inner = c_->inner;
    bool sc_flat = c_->sc_flat;
    (void)tid;
    for (int64_t o = lo_; o < hi_; o++) {
        double q = 0.0;
        for (int64_t j = 0; j < inner; j++) {
            double v = ld(x, o * inner + j);
            q += v * v;
        }
        double inv = 1.0 / sqrt((inner ? q / (double)inner : 0.0) + eps);
        for (int64_t j = 0; j < inner; j++) {
            double s = ld(sc, sc_flat ? j : bcast_index(sc, j, in_rank, in_dims));
            st(y, o * inner + j, ld(x, o * inner + j) * inv * s);
        }
    }
}

kiln_status kb_nn_rmsnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1];
    kb_tensor *y = &r->out[0];
    int64_t axis = kn_attr_int(r->node, "axis", -1);
    if (axis < 0)
        axis += x->rank;
    if (axis < 0 || axis >= x->rank)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "axis out of range");
    double eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    int in_rank = x->rank - (int)axis;
    const int64_t *in_dims = x->dims + axis;
    int64_t inner = kn_numel(in_rank, in_dims), outer = kn_numel((int)axis, x->dims);
    bool sc_flat = kb_numel(sc) == inner;
    int nth = threads_for(r, outer * inner);
    {
        rmsnorm_rows_ctx c_ = {x, sc, y, eps, in_rank, in_dims, inner, sc_flat};
        kn_parallel_for(nth, outer, 0, rmsnorm_rows, &c_);
    }
    return KILN_OK;
}

typedef struct groupnorm_blocks_ctx {
    const kb_tensor *x;
    const kb_tensor *sc;
    const kb_tensor *b;
    kb_tensor *y;
    double eps;
    int64_t groups;
    int64_t size;
    int64_t cpg;
    bool sc_per_channel;
    bool b_per_channel;
    int64_t len;
} groupnorm_blocks_ctx;

static void groupnorm_blocks(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const groupnorm_blocks_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *sc = c_->sc;
    const kb_tensor *b = c_->b;
    kb_tensor *y = c_->y;
    double eps = c_->eps;
    int64_t groups = c_->groups;
    int64_t size = c_->size;
    int64_t cpg = c_->cpg;
    bool sc_per_channel = c_->sc_per_channel;
    bool b_per_channel = c_->b_per_channel;
    int64_t len = c_->len;
    (void)tid;
    for (int64_t bl = lo_; bl < hi_; bl++) {
        double m, v;
        row_stats(x, bl * len, len, &m, &v);
        double inv = 1.0 / sqrt(v + eps);
        int64_t g = bl % groups;
        for (int64_t cc = 0; cc < cpg; cc++) {
            double s = ld(sc, sc_per_channel ? g * cpg + cc : g);
            double sh = ld(b, b_per_channel ? g * cpg + cc : g);
            int64_t off = bl * len + cc * size;
            for (int64_t i = 0; i < size; i++)
                st(y, off + i, (ld(x, off + i) - m) * inv * s + sh);
        }
    }
}

kiln_status kb_nn_groupnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *sc = &r->in[1], *b = &r->in[2];
    kb_tensor *y = &r->out[0];
    double eps = kn_attr_float(r->node, "epsilon", 1e-5f);
    int64_t groups = kn_attr_int(r->node, "num_groups", 1), ch = x->dims[1];
    int64_t size = kn_numel(x->rank - 2, x->dims + 2), cpg = ch / groups;
    /* one value per channel (opset 21) or per group (opset 18), each input on its own */
    bool sc_per_channel = kb_numel(sc) == ch, b_per_channel = kb_numel(b) == ch;
    int64_t blocks = x->dims[0] * groups, len = cpg * size;
    int nth = threads_for(r, blocks * len);
    {
        groupnorm_blocks_ctx c_ = {x, sc, b, y, eps, groups, size, cpg, sc_per_channel, b_per_channel, len};
        kn_parallel_for(nth, blocks, 0, groupnorm_blocks, &c_);
    }
    return KILN_OK;
}

typedef struct lpnorm_rows_ctx {
    const kb_tensor *x;
    kb_tensor *y;
    int64_t p;
    int64_t len;
    int64_t inner;
} lpnorm_rows_ctx;

static void lpnorm_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const lpnorm_rows_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    int64_t p = c_->p;
    int64_t len = c_->len;
    int64_t inner = c_->inner;
    (void)tid;
    for (int64_t o = lo_; o < hi_; o++) {
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i;
            double s = 0.0;
            for (int64_t k = 0; k < len; k++) {
                double v = ld(x, base + k * inner);
                s += p == 1 ? fabs(v) : v * v;
            }
            double norm = p == 1 ? s : sqrt(s);
            for (int64_t k = 0; k < len; k++)
                st(y, base + k * inner, norm > 0.0 ? ld(x, base + k * inner) / norm : 0.0);
        }
    }
}

kiln_status kb_nn_lpnorm_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    int64_t axis = kn_attr_int(r->node, "axis", -1), p = kn_attr_int(r->node, "p", 2);
    if (axis < 0)
        axis += x->rank;
    if (axis < 0 || axis >= x->rank)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "axis out of range");
    int64_t len = x->dims[axis], inner = kn_numel(x->rank - (int)axis - 1, x->dims + axis + 1);
    int64_t outer = kn_numel((int)axis, x->dims);
    int nth = threads_for(r, outer * len * inner);
    {
        lpnorm_rows_ctx c_ = {x, y, p, len, inner};
        kn_parallel_for(nth, outer, 0, lpnorm_rows, &c_);
    }
    return KILN_OK;
}

typedef struct lrn_planes_ctx {
    const kb_tensor *x;
    kb_tensor *y;
    double alpha;
    double beta;
    double bias;
    int64_t size;
    int64_t ch;
    int64_t sp;
    int64_t lo;
    int64_t hi;
} lrn_planes_ctx;

static void lrn_planes(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const lrn_planes_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    double alpha = c_->alpha;
    double beta = c_->beta;
    double bias = c_->bias;
    int64_t size = c_->size;
    int64_t ch = c_->ch;
    int64_t sp = c_->sp;
    int64_t lo = c_->lo;
    int64_t hi = c_->hi;
    (void)tid;
    for (int64_t pl = lo_; pl < hi_; pl++) {
        int64_t n = pl / ch, c = pl % ch;
        int64_t c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi >= ch ? ch - 1 : c + hi;
        for (int64_t i = 0; i < sp; i++) {
            double sq = 0.0;
            for (int64_t cc = c0; cc <= c1; cc++) {
                double v = ld(x, (n * ch + cc) * sp + i);
                sq += v * v;
            }
            st(y, pl * sp + i, ld(x, pl * sp + i) / pow(bias + alpha / (double)size * sq, beta));
        }
    }
}

kiln_status kb_nn_lrn_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    double alpha = kn_attr_float(r->node, "alpha", 1e-4f), beta = kn_attr_float(r->node, "beta", 0.75f);
    double bias = kn_attr_float(r->node, "bias", 1.0f);
    int64_t size = kn_attr_int(r->node, "size", 1);
    int64_t ch = x->dims[1], sp = kn_numel(x->rank - 2, x->dims + 2);
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo; /* floor and ceil of (size-1)/2 */
    int64_t planes = x->dims[0] * ch;
    int nth = threads_for(r, planes * sp * size);
    {
        lrn_planes_ctx c_ = {x, y, alpha, beta, bias, size, ch, sp, lo, hi};
        kn_parallel_for(nth, planes, 0, lrn_planes, &c_);
    }
    return KILN_OK;
}

/* MVN reduces over any set of axes: each element belongs to the group given
 * by its coordinates on the kept axes. Workspace: sum and sum of squares of
 * the centred values per group, in double. */
static void mvn_axes(const kn_node *node, int rank, bool *reduce) {
    size_t na;
    const int64_t *axes = kn_attr_ints(node, "axes", &na);
    static const int64_t dflt[] = {0, 2, 3};
    if (!axes) {
        axes = dflt;
        na = 3;
    }
    memset(reduce, 0, sizeof(bool) * KILN_MAX_DIMS);
    for (size_t i = 0; i < na; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a >= 0 && a < rank)
            reduce[a] = true;
    }
}

static int64_t mvn_groups(const kb_tensor *x, const bool *reduce) {
    int64_t g = 1;
    for (int d = 0; d < x->rank; d++)
        if (!reduce[d])
            g *= x->dims[d];
    return g;
}

static int64_t mvn_group_of(const kb_tensor *x, const bool *reduce, int64_t idx) {
    int64_t g = 0, mul = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        int64_t c = idx % x->dims[d];
        idx /= x->dims[d];
        if (!reduce[d]) {
            g += c * mul;
            mul *= x->dims[d];
        }
    }
    return g;
}

kiln_status kb_nn_mvn_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                              int n_in, const kb_tensor *out, int n_out, void **inst,
                              size_t *workspace) {
    bool reduce[KILN_MAX_DIMS];
    mvn_axes(node, in[0].rank, reduce);
    *workspace = (size_t)mvn_groups(&in[0], reduce) * 3 * sizeof(double);
    return KILN_OK;
}

kiln_status kb_nn_mvn_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    bool reduce[KILN_MAX_DIMS];
    mvn_axes(r->node, x->rank, reduce);
    int64_t groups = mvn_groups(x, reduce), n = kb_numel(x);
    if (r->workspace_size < (size_t)groups * 3 * sizeof(double))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    double *mean = r->workspace, *sq = mean + groups, *cnt = sq + groups;
    memset(mean, 0, sizeof(double) * (size_t)groups * 3);
    for (int64_t i = 0; i < n; i++) {
        int64_t g = mvn_group_of(x, reduce, i);
        mean[g] += ld(x, i);
        cnt[g] += 1.0;
    }
    for (int64_t g = 0; g < groups; g++)
        mean[g] = cnt[g] > 0 ? mean[g] / cnt[g] : 0.0;
    for (int64_t i = 0; i < n; i++) {
        int64_t g = mvn_group_of(x, reduce, i);
        double d = ld(x, i) - mean[g];
        sq[g] += d * d;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t g = mvn_group_of(x, reduce, i);
        double sd = sqrt(cnt[g] > 0 ? sq[g] / cnt[g] : 0.0);
        st(y, i, (ld(x, i) - mean[g]) / (sd + 1e-9));
    }
    return KILN_OK;
}
