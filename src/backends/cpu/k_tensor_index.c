/* k_tensor_index.c - CPU reference kernels of the tensor family that index
 * by value: gathers, scatters (with reductions), NonZero, TopK, OneHot,
 * Compress, ReverseSequence and Unique. Indices are checked before any
 * output is written, so a bad index fails cleanly with the node's name. */
#include <math.h>
#include <string.h>

#include "k_tensor.h"

static size_t esize(const kb_tensor *t) { return kiln_dtype_size(t->dtype); }

static int norm_axis(const kn_node *n, const char *name, int64_t dflt, int rank) {
    int64_t a = kn_attr_int(n, name, dflt);
    return (int)(a < 0 ? a + rank : a);
}

/* Check every index of t lies in [-dim, dim) (dim may vary per element when
 * dim_of is given). */
static kiln_status check_indices(const kn_node *n, const kb_tensor *t, int64_t dim,
                                 const char *what) {
    int64_t cnt = kbt_numel(t);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t v = kbt_load_i64(t->dtype, t->data, i);
        if (v < -dim || v >= dim)
            return kn_node_error(n, KILN_ERR_RUNTIME,
                                 "%s %lld (element %lld) is out of range [-%lld, %lld)", what,
                                 (long long)v, (long long)i, (long long)dim, (long long)dim);
    }
    return KILN_OK;
}

static int64_t idx_at(const kb_tensor *t, int64_t i, int64_t dim) {
    int64_t v = kbt_load_i64(t->dtype, t->data, i);
    return v < 0 ? v + dim : v;
}

/* ---------------- gathers ---------------- */

typedef struct gather_ctx {
    const kb_tensor *x, *ix, *o;
    int64_t dim, ni;
    size_t chunk;
} gather_ctx;

/* Rows [lo, hi) of the output seen as [outer, indices] rows of `chunk` bytes. */
static void gather_rows(void *vc, int64_t lo, int64_t hi, int tid) {
    const gather_ctx *c = vc;
    for (int64_t kj = lo; kj < hi; kj++) {
        int64_t k = kj / c->ni, j = kj % c->ni;
        int64_t s = idx_at(c->ix, j, c->dim);
        memcpy((uint8_t *)c->o->data + (size_t)kj * c->chunk,
               (const uint8_t *)c->x->data + (size_t)(k * c->dim + s) * c->chunk, c->chunk);
    }
}

kiln_status kbt_gather(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1], *o = &r->out[0];
    int ax = norm_axis(r->node, "axis", 0, x->rank);
    int64_t dim = x->dims[ax], outer = 1, inner = 1, ni = kbt_numel(ix);
    KN_TRY(check_indices(r->node, ix, dim, "index"));
    for (int d = 0; d < ax; d++)
        outer *= x->dims[d];
    for (int d = ax + 1; d < x->rank; d++)
        inner *= x->dims[d];
    size_t es = esize(x), chunk = (size_t)inner * es;
    if (kbt_numel(o) == 0)
        return KILN_OK;
    int nt = r->threads > 1 && kbt_numel(o) > (1 << 16) ? r->threads : 1;
    gather_ctx c = {x, ix, o, dim, ni, chunk};
    kn_parallel_for(nt, outer * ni, 0, gather_rows, &c);
    return KILN_OK;
}

kiln_status kbt_gather_elements(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1], *o = &r->out[0];
    int ax = norm_axis(r->node, "axis", 0, x->rank);
    KN_TRY(check_indices(r->node, ix, x->dims[ax], "index"));
    int64_t xs[KILN_MAX_DIMS], total = kbt_numel(ix);
    kbt_strides(x->rank, x->dims, xs);
    size_t es = esize(x);
    for (int d = 0; d < x->rank; d++)
        if (d != ax && ix->dims[d] > x->dims[d])
            return kn_node_error(r->node, KILN_ERR_SHAPE,
                                 "indices are larger than data in dimension %d", d);
    for (int64_t i = 0; i < total; i++) {
        int64_t rem = i, off = 0;
        for (int d = x->rank - 1; d >= 0; d--) {
            int64_t c = rem % ix->dims[d];
            rem /= ix->dims[d];
            off += (d == ax ? idx_at(ix, i, x->dims[ax]) : c) * xs[d];
        }
        kbt_copy1((uint8_t *)o->data + (size_t)i * es, (const uint8_t *)x->data + (size_t)off * es,
                  es);
    }
    return KILN_OK;
}

/* Offsets (in elements of data) addressed by each index tuple of GatherND /
 * ScatterND; checks ranges. tuples: count of tuples; k: tuple length; b:
 * batch dims. */
static kiln_status nd_offsets(const kn_node *n, const kb_tensor *x, const kb_tensor *ix, int b,
                              int64_t tuples, int64_t k, int64_t per_batch, int64_t *off) {
    int64_t xs[KILN_MAX_DIMS];
    kbt_strides(x->rank, x->dims, xs);
    const int64_t *iv = ix->data;
    int64_t batch_stride = b > 0 ? xs[b - 1] : 0;
    for (int64_t t = 0; t < tuples; t++) {
        int64_t o = (per_batch ? t / per_batch : 0) * batch_stride;
        for (int64_t j = 0; j < k; j++) {
            int64_t dim = x->dims[b + j], v = iv[t * k + j];
            if (v < -dim || v >= dim)
                return kn_node_error(n, KILN_ERR_RUNTIME,
                                     "index %lld of tuple %lld is out of range [-%lld, %lld)",
                                     (long long)v, (long long)t, (long long)dim, (long long)dim);
            o += (v < 0 ? v + dim : v) * xs[b + j];
        }
        off[t] = o;
    }
    return KILN_OK;
}

kiln_status kbt_nd_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                           const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    const kb_tensor *ix = &in[1];
    int64_t k = ix->rank ? ix->dims[ix->rank - 1] : 1;
    *workspace = (size_t)((k ? kbt_numel(ix) / k : 0) + 1) * sizeof(int64_t);
    return KILN_OK;
}

kiln_status kbt_gather_nd(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1], *o = &r->out[0];
    int b = (int)kn_attr_int(r->node, "batch_dims", 0);
    int64_t k = ix->dims[ix->rank - 1], tuples = k ? kbt_numel(ix) / k : 0, slice = 1,
            per_batch = 1;
    for (int d = b + (int)k; d < x->rank; d++)
        slice *= x->dims[d];
    for (int d = b; d < ix->rank - 1; d++)
        per_batch *= ix->dims[d];
    size_t es = esize(x), chunk = (size_t)slice * es;
    int64_t *off = r->workspace;
    if (tuples && !off)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "no workspace");
    KN_TRY(nd_offsets(r->node, x, ix, b, tuples, k, per_batch, off));
    for (int64_t t = 0; t < tuples; t++)
        memcpy((uint8_t *)o->data + (size_t)t * chunk, (const uint8_t *)x->data + (size_t)off[t] * es,
               chunk);
    return KILN_OK;
}

/* ---------------- scatters ---------------- */

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static kiln_status reduction_of(const kn_node *n, kiln_dtype t, int *red) {
    const char *s = kn_attr_string(n, "reduction", "none");
    *red = strcmp(s, "none") == 0  ? RED_NONE
           : strcmp(s, "add") == 0 ? RED_ADD
           : strcmp(s, "mul") == 0 ? RED_MUL
           : strcmp(s, "max") == 0 ? RED_MAX
           : strcmp(s, "min") == 0 ? RED_MIN
                                   : -1;
    if (*red < 0)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "reduction '%s' is not supported", s);
    if (*red != RED_NONE && !kbt_is_numeric(t) && t != KILN_DTYPE_BOOL)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "reduction '%s' on type %s", s,
                             kiln_dtype_name(t));
    return KILN_OK;
}

/* dst[i] = dst[i] (red) src[i] for i in [0, cnt). */
static void reduce_into(kiln_dtype t, int red, void *dst, const void *src, int64_t cnt) {
    size_t es = kiln_dtype_size(t);
    if (red == RED_NONE) {
        memcpy(dst, src, (size_t)cnt * es);
        return;
    }
    bool fl = kbt_is_float(t);
    for (int64_t i = 0; i < cnt; i++) {
        if (fl) {
            double a = kbt_load(t, dst, i), b = kbt_load(t, src, i);
            double v = red == RED_ADD ? a + b : red == RED_MUL ? a * b : red == RED_MAX ? (a > b ? a : b) : (a < b ? a : b);
            kbt_store(t, dst, i, v);
        } else {
            int64_t a = kbt_load_i64(t, dst, i), b = kbt_load_i64(t, src, i);
            int64_t v = red == RED_ADD   ? (int64_t)((uint64_t)a + (uint64_t)b)
                        : red == RED_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
                        : red == RED_MAX ? (a > b ? a : b)
                                         : (a < b ? a : b);
            kbt_store_i64(t, dst, i, v);
        }
    }
}

kiln_status kbt_scatter_nd(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1], *u = &r->in[2], *o = &r->out[0];
    int red;
    KN_TRY(reduction_of(r->node, x->dtype, &red));
    int64_t k = ix->dims[ix->rank - 1], tuples = 1, slice = 1;
    for (int d = 0; d < ix->rank - 1; d++)
        tuples *= ix->dims[d];
    for (int d = (int)k; d < x->rank; d++)
        slice *= x->dims[d];
    size_t es = esize(x);
    int64_t *off = r->workspace;
    if (tuples && !off)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "no workspace");
    KN_TRY(nd_offsets(r->node, x, ix, 0, tuples, k, 0, off));
    if (o->data != x->data)
        memcpy(o->data, x->data, (size_t)kbt_numel(x) * es);
    for (int64_t t = 0; t < tuples; t++)
        reduce_into(x->dtype, red, (uint8_t *)o->data + (size_t)off[t] * es,
                    (const uint8_t *)u->data + (size_t)(t * slice) * es, slice);
    return KILN_OK;
}

kiln_status kbt_scatter_elements(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ix = &r->in[1], *u = &r->in[2], *o = &r->out[0];
    int red;
    KN_TRY(reduction_of(r->node, x->dtype, &red));
    int ax = norm_axis(r->node, "axis", 0, x->rank);
    KN_TRY(check_indices(r->node, ix, x->dims[ax], "index"));
    for (int d = 0; d < x->rank; d++)
        if (d != ax && ix->dims[d] > x->dims[d])
            return kn_node_error(r->node, KILN_ERR_SHAPE,
                                 "indices are larger than data in dimension %d", d);
    size_t es = esize(x);
    int64_t xs[KILN_MAX_DIMS], total = kbt_numel(ix);
    kbt_strides(x->rank, x->dims, xs);
    if (o->data != x->data)
        memcpy(o->data, x->data, (size_t)kbt_numel(x) * es);
    for (int64_t i = 0; i < total; i++) {
        int64_t rem = i, off = 0;
        for (int d = x->rank - 1; d >= 0; d--) {
            int64_t c = rem % ix->dims[d];
            rem /= ix->dims[d];
            off += (d == ax ? idx_at(ix, i, x->dims[ax]) : c) * xs[d];
        }
        reduce_into(x->dtype, red, (uint8_t *)o->data + (size_t)off * es,
                    (const uint8_t *)u->data + (size_t)i * es, 1);
    }
    return KILN_OK;
}

/* ---------------- NonZero, Compress ---------------- */

kiln_status kbt_nonzero(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *o = &r->out[0];
    int64_t total = kbt_numel(x), nnz = 0;
    for (int64_t i = 0; i < total; i++)
        nnz += !kbt_is_zero(x->dtype, x->data, i);
    int rank = x->rank;
    int64_t *out = o->data, k = 0;
    for (int64_t i = 0; i < total; i++) {
        if (kbt_is_zero(x->dtype, x->data, i))
            continue;
        int64_t rem = i;
        for (int d = rank - 1; d >= 0; d--) {
            out[d * nnz + k] = rem % x->dims[d];
            rem /= x->dims[d];
        }
        if (rank == 0)
            out[k] = 0;
        k++;
    }
    o->dims[1] = nnz;
    return KILN_OK;
}

kiln_status kbt_compress(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *cond = &r->in[1];
    kb_tensor *o = &r->out[0];
    const kn_attr *a = kn_attr_find(r->node, "axis");
    size_t es = esize(x);
    int64_t len = cond->dims[0];
    int64_t outer = 1, dim, inner = 1;
    int ax = 0;
    if (a) {
        ax = (int)(a->i < 0 ? a->i + x->rank : a->i);
        for (int d = 0; d < ax; d++)
            outer *= x->dims[d];
        for (int d = ax + 1; d < x->rank; d++)
            inner *= x->dims[d];
        dim = x->dims[ax];
    } else {
        dim = kbt_numel(x);
    }
    int64_t lim = len < dim ? len : dim, sel = 0;
    for (int64_t j = 0; j < lim; j++)
        sel += !kbt_is_zero(cond->dtype, cond->data, j);
    size_t chunk = (size_t)inner * es;
    for (int64_t k = 0; k < outer; k++) {
        int64_t w = 0;
        for (int64_t j = 0; j < lim; j++) {
            if (kbt_is_zero(cond->dtype, cond->data, j))
                continue;
            memcpy((uint8_t *)o->data + (size_t)(k * sel + w) * chunk,
                   (const uint8_t *)x->data + (size_t)(k * dim + j) * chunk, chunk);
            w++;
        }
    }
    if (a)
        o->dims[ax] = sel;
    else
        o->dims[0] = sel;
    return KILN_OK;
}

/* ---------------- TopK ---------------- */

typedef struct topk_ctx {
    kiln_dtype t;
    const void *base;   /* first element of the slice */
    int64_t stride;     /* elements between neighbours along the axis */
    bool largest;
} topk_ctx;

static int topk_cmp(const void *vctx, int64_t a, int64_t b) {
    const topk_ctx *c = vctx;
    double x = kbt_load(c->t, c->base, a * c->stride), y = kbt_load(c->t, c->base, b * c->stride);
    if (isnan(x) || isnan(y)) /* NaN ranks above every number */
        return isnan(x) && !isnan(y) ? (c->largest ? -1 : 1)
               : isnan(y) && !isnan(x) ? (c->largest ? 1 : -1)
                                       : (a < b ? -1 : a > b);
    if (x != y)
        return (x > y) == c->largest ? -1 : 1;
    return a < b ? -1 : a > b;
}

kiln_status kbt_topk_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                             const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    int ax = norm_axis(node, "axis", -1, in[0].rank);
    *workspace = (size_t)(2 * in[0].dims[ax] + 1) * sizeof(int64_t);
    return KILN_OK;
}

kiln_status kbt_topk(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *ov = &r->out[0], *oi = r->n_out > 1 ? &r->out[1] : NULL;
    int ax = norm_axis(r->node, "axis", -1, x->rank);
    int64_t n = x->dims[ax], k = ov->dims[ax], outer = 1, inner = 1;
    for (int d = 0; d < ax; d++)
        outer *= x->dims[d];
    for (int d = ax + 1; d < x->rank; d++)
        inner *= x->dims[d];
    if (!kbt_is_numeric(x->dtype))
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "type %s is not supported",
                             kiln_dtype_name(x->dtype));
    int64_t *idx = r->workspace, *tmp = idx + n;
    if (n && !idx)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "no workspace");
    size_t es = esize(x);
    topk_ctx c = {x->dtype, NULL, inner, kn_attr_int(r->node, "largest", 1) != 0};
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            c.base = (const uint8_t *)x->data + (size_t)(o * n * inner + i) * es;
            for (int64_t j = 0; j < n; j++)
                idx[j] = j;
            kbt_sort(idx, tmp, n, topk_cmp, &c);
            for (int64_t j = 0; j < k; j++) {
                int64_t at = o * k * inner + j * inner + i;
                if (ov->data)
                    kbt_copy1((uint8_t *)ov->data + (size_t)at * es,
                              (const uint8_t *)c.base + (size_t)(idx[j] * inner) * es, es);
                if (oi && oi->data)
                    ((int64_t *)oi->data)[at] = idx[j];
            }
        }
    return KILN_OK;
}

/* ---------------- OneHot, ReverseSequence ---------------- */

kiln_status kbt_onehot(const kb_run *r) {
    const kb_tensor *ix = &r->in[0], *vals = &r->in[2], *o = &r->out[0];
    int64_t depth = (int64_t)kbt_load(r->in[1].dtype, r->in[1].data, 0);
    int ax = norm_axis(r->node, "axis", -1, o->rank);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++)
        outer *= o->dims[d];
    for (int d = ax + 1; d < o->rank; d++)
        inner *= o->dims[d];
    size_t es = esize(o);
    const uint8_t *off = vals->data, *on = (const uint8_t *)vals->data + es;
    int64_t total = kbt_numel(o);
    for (int64_t i = 0; i < total; i++)
        kbt_copy1((uint8_t *)o->data + (size_t)i * es, off, es);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t b = 0; b < inner; b++) {
            int64_t v = kbt_load_i64(ix->dtype, ix->data, a * inner + b);
            if (v < 0)
                v += depth;
            if (v < 0 || v >= depth)
                continue;
            kbt_copy1((uint8_t *)o->data + (size_t)((a * depth + v) * inner + b) * es, on, es);
        }
    return KILN_OK;
}

kiln_status kbt_reverse_sequence(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *lens = &r->in[1], *o = &r->out[0];
    int ba = norm_axis(r->node, "batch_axis", 1, x->rank);
    int64_t T = x->dims[ba == 0 ? 1 : 0], B = x->dims[ba], inner = 1;
    for (int d = 2; d < x->rank; d++)
        inner *= x->dims[d];
    size_t es = esize(x), chunk = (size_t)inner * es;
    for (int64_t b = 0; b < B; b++) {
        int64_t len = kbt_load_i64(lens->dtype, lens->data, b);
        if (len < 0 || len > T)
            return kn_node_error(r->node, KILN_ERR_RUNTIME,
                                 "sequence length %lld of batch %lld is outside [0, %lld]",
                                 (long long)len, (long long)b, (long long)T);
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t len = kbt_load_i64(lens->dtype, lens->data, b);
        for (int64_t t = 0; t < T; t++) {
            int64_t s = t < len ? len - 1 - t : t;
            int64_t od = ba == 1 ? t * B + b : b * T + t, sd = ba == 1 ? s * B + b : b * T + s;
            memcpy((uint8_t *)o->data + (size_t)od * chunk,
                   (const uint8_t *)x->data + (size_t)sd * chunk, chunk);
        }
    }
    return KILN_OK;
}

/* ---------------- Unique ---------------- */

typedef struct uniq_ctx {
    kiln_dtype t;
    const void *x;
    int64_t outer, dim, inner;   /* item j is x[o, j, i] for all o, i */
} uniq_ctx;

static int elem_cmp(kiln_dtype t, const void *p, int64_t a, int64_t b) {
    if (kbt_is_float(t)) {
        double x = kbt_load(t, p, a), y = kbt_load(t, p, b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (t == KILN_DTYPE_UINT64) {
        uint64_t x = ((const uint64_t *)p)[a], y = ((const uint64_t *)p)[b];
        return x < y ? -1 : x > y;
    }
    if (kbt_is_numeric(t) || t == KILN_DTYPE_BOOL) {
        int64_t x = kbt_load_i64(t, p, a), y = kbt_load_i64(t, p, b);
        return x < y ? -1 : x > y;
    }
    size_t es = kiln_dtype_size(t);
    return memcmp((const uint8_t *)p + (size_t)a * es, (const uint8_t *)p + (size_t)b * es, es);
}

static int item_cmp(const void *vctx, int64_t a, int64_t b) {
    const uniq_ctx *c = vctx;
    for (int64_t o = 0; o < c->outer; o++)
        for (int64_t i = 0; i < c->inner; i++) {
            int64_t base = o * c->dim * c->inner + i;
            int v = elem_cmp(c->t, c->x, base + a * c->inner, base + b * c->inner);
            if (v)
                return v;
        }
    return 0;
}

static void unique_geometry(const kn_node *n, const kb_tensor *x, int64_t *outer, int64_t *dim,
                            int64_t *inner, int *ax) {
    const kn_attr *a = kn_attr_find(n, "axis");
    *outer = *inner = 1;
    *ax = -1;
    if (!a) {
        *dim = kbt_numel(x);
        return;
    }
    *ax = (int)(a->i < 0 ? a->i + x->rank : a->i);
    for (int d = 0; d < *ax; d++)
        *outer *= x->dims[d];
    for (int d = *ax + 1; d < x->rank; d++)
        *inner *= x->dims[d];
    *dim = x->dims[*ax];
}

kiln_status kbt_unique_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                               int n_in, const kb_tensor *out, int n_out, void **inst,
                               size_t *workspace) {
    int64_t outer, dim, inner;
    int ax;
    unique_geometry(node, &in[0], &outer, &dim, &inner, &ax);
    *workspace = (size_t)(5 * dim + 1) * sizeof(int64_t);
    return KILN_OK;
}

kiln_status kbt_unique(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    uniq_ctx c = {x->dtype, x->data, 1, 0, 1};
    int ax;
    unique_geometry(r->node, x, &c.outer, &c.dim, &c.inner, &ax);
    int64_t n = c.dim;
    int64_t *perm = r->workspace, *tmp = perm + n, *label = tmp + n, *first = label + n,
            *count = first + n;
    if (n && !perm)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "no workspace");
    for (int64_t j = 0; j < n; j++)
        perm[j] = j;
    kbt_sort(perm, tmp, n, item_cmp, &c);
    /* groups in sorted order; the first of each run is its first occurrence */
    int64_t nu = 0;
    for (int64_t s = 0; s < n; s++) {
        if (s == 0 || item_cmp(&c, perm[s - 1], perm[s]) != 0) {
            first[nu] = perm[s];
            count[nu] = 0;
            nu++;
        }
        label[perm[s]] = nu - 1;
        count[nu - 1]++;
    }
    if (kn_attr_int(r->node, "sorted", 1) == 0) { /* order groups by first occurrence */
        int64_t *order = tmp, *rank_of = perm; /* perm is no longer needed */
        for (int64_t g = 0; g < nu; g++)
            order[g] = -1;
        int64_t next = 0;
        for (int64_t j = 0; j < n; j++)
            if (order[label[j]] < 0)
                order[label[j]] = next++;
        /* permute first/count into the new order */
        for (int64_t g = 0; g < nu; g++)
            rank_of[order[g]] = first[g];
        for (int64_t g = 0; g < nu; g++)
            first[g] = rank_of[g];
        for (int64_t g = 0; g < nu; g++)
            rank_of[order[g]] = count[g];
        for (int64_t g = 0; g < nu; g++)
            count[g] = rank_of[g];
        for (int64_t j = 0; j < n; j++)
            label[j] = order[label[j]];
    }
    size_t es = esize(x), chunk = (size_t)c.inner * es;
    kb_tensor *y = &r->out[0];
    for (int64_t o = 0; o < c.outer; o++)
        for (int64_t g = 0; g < nu; g++)
            memcpy((uint8_t *)y->data + (size_t)(o * nu + g) * chunk,
                   (const uint8_t *)x->data + (size_t)(o * n + first[g]) * chunk, chunk);
    if (ax >= 0)
        y->dims[ax] = nu;
    else
        y->dims[0] = nu;
    if (r->n_out > 1 && r->out[1].data) {
        memcpy(r->out[1].data, first, (size_t)nu * sizeof(int64_t));
        r->out[1].dims[0] = nu;
    }
    if (r->n_out > 2 && r->out[2].data)
        memcpy(r->out[2].data, label, (size_t)n * sizeof(int64_t));
    if (r->n_out > 3 && r->out[3].data) {
        memcpy(r->out[3].data, count, (size_t)nu * sizeof(int64_t));
        r->out[3].dims[0] = nu;
    }
    return KILN_OK;
}
