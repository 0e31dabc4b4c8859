/* k_nn_pool.c - reference pooling: MaxPool (with Indices), AveragePool, LpPool
 * over any number of spatial dims, and the global pools. Values are read and
 * written through kb_ld / kb_st, so every real and integer type works. */
#include <math.h>
#include <string.h>

#include "k_nn.h"

typedef enum pool_kind { POOL_MAX, POOL_AVG, POOL_LP } pool_kind;

typedef struct pool_args {
    pool_kind kind;
    kn_window w;
    bool include_pad;     /* AveragePool count_include_pad */
    bool col_major;       /* MaxPool storage_order = 1 */
    double p;             /* LpPool */
    int64_t in_size, out_size, ksize;
} pool_args;

/* Pool one output position of one plane. */
static double pool_one(const pool_args *a, const void *x, kiln_dtype dt, int64_t plane_off,
                       const int64_t *oc, int64_t *arg) {
    const kn_window *w = &a->w;
    int nsp = w->nsp;
    int64_t kc[KN_WIN_MAX] = {0};
    double acc = a->kind == POOL_MAX ? -INFINITY : 0.0;
    int64_t count = 0, best = -1;
    for (int64_t k = 0; k < a->ksize; k++) {
        int64_t off = 0, cm_off = 0, cm_mul = 1;
        bool inside = true, in_padded = true;
        for (int d = 0; d < nsp; d++) {
            int64_t pos = oc[d] * w->stride[d] - w->pad0[d] + kc[d] * w->dil[d];
            if (pos < 0 || pos >= w->in[d])
                inside = false;
            if (pos < -w->pad0[d] || pos >= w->in[d] + w->pad1[d])
                in_padded = false;
            off = off * w->in[d] + pos;
            cm_off += pos * cm_mul;
            cm_mul *= w->in[d];
        }
        if (inside) {
            double v = kb_ld(x, dt, (size_t)(plane_off + off));
            if (a->kind == POOL_MAX) {
                if (v > acc || best < 0) {
                    acc = v;
                    best = a->col_major ? cm_off : off;
                }
            } else if (a->kind == POOL_AVG) {
                acc += v;
            } else {
                acc += pow(fabs(v), a->p);
            }
            count++;
        } else if (in_padded && a->include_pad) {
            count++;
        }
        for (int d = nsp - 1; d >= 0; d--) {
            if (++kc[d] < w->kernel[d])
                break;
            kc[d] = 0;
        }
    }
    if (arg)
        *arg = best < 0 ? plane_off : plane_off + best;
    if (a->kind == POOL_AVG)
        return count ? acc / (double)count : 0.0;
    if (a->kind == POOL_LP)
        return pow(acc, 1.0 / a->p);
    return acc;
}

typedef struct pool_planes_ctx {
    pool_args a;
    const kb_tensor *x;
    kb_tensor *y;
    int64_t *idx;
} pool_planes_ctx;

static void pool_planes(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const pool_planes_ctx *c_ = vc;
    pool_args a = c_->a;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    int64_t *idx = c_->idx;
    (void)tid;
    for (int64_t pl = lo_; pl < hi_; pl++) {
        int64_t oc[KN_WIN_MAX] = {0};
        for (int64_t o = 0; o < a.out_size; o++) {
            int64_t arg;
            double v = pool_one(&a, x->data, x->dtype, pl * a.in_size, oc, idx ? &arg : NULL);
            kb_st(y->data, y->dtype, (size_t)(pl * a.out_size + o), v);
            if (idx)
                idx[pl * a.out_size + o] = arg;
            for (int d = a.w.nsp - 1; d >= 0; d--) {
                if (++oc[d] < a.w.out[d])
                    break;
                oc[d] = 0;
            }
        }
    }
}

kiln_status kb_nn_pool_run(const kb_run *r) {
    const kn_node *node = r->node;
    const kb_tensor *x = &r->in[0];
    pool_args a;
    memset(&a, 0, sizeof a);
    a.kind = strcmp(node->op_type, "MaxPool") == 0   ? POOL_MAX
             : strcmp(node->op_type, "LpPool") == 0 ? POOL_LP
                                                     : POOL_AVG;
    size_t nk;
    const int64_t *ks = kn_attr_ints(node, "kernel_shape", &nk);
    if (!ks || nk != (size_t)(x->rank - 2))
        return kn_node_error(node, KILN_ERR_SHAPE, "kernel_shape must have %d values",
                             x->rank - 2);
    KN_TRY(kn_window_forward(node, x->rank - 2, x->dims + 2, ks,
                             kn_attr_int(node, "ceil_mode", 0) != 0, &a.w));
    a.include_pad = kn_attr_int(node, "count_include_pad", 0) != 0;
    a.col_major = kn_attr_int(node, "storage_order", 0) == 1;
    a.p = (double)kn_attr_int(node, "p", 2);
    a.in_size = a.out_size = a.ksize = 1;
    for (int d = 0; d < a.w.nsp; d++) {
        a.in_size *= a.w.in[d];
        a.out_size *= a.w.out[d];
        a.ksize *= a.w.kernel[d];
    }
    kb_tensor *y = &r->out[0];
    int64_t *idx = r->n_out > 1 && r->out[1].data ? r->out[1].data : NULL;
    int64_t planes = x->dims[0] * x->dims[1];
    int nth = r->threads > 1 && planes * a.out_size * a.ksize > 32768 ? r->threads : 1;
    {
        pool_planes_ctx c_ = {a, x, y, idx};
        kn_parallel_for(nth, planes, 0, pool_planes, &c_);
    }
    return KILN_OK;
}

typedef struct global_pool_planes_ctx {
    const kb_tensor *x;
    kb_tensor *y;
    pool_kind kind;
    double p;
    int64_t size;
} global_pool_planes_ctx;

static void global_pool_planes(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const global_pool_planes_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    pool_kind kind = c_->kind;
    double p = c_->p;
    int64_t size = c_->size;
    (void)tid;
    for (int64_t pl = lo_; pl < hi_; pl++) {
        double acc = kind == POOL_MAX ? -INFINITY : 0.0;
        for (int64_t i = 0; i < size; i++) {
            double v = kb_ld(x->data, x->dtype, (size_t)(pl * size + i));
            if (kind == POOL_MAX)
                acc = v > acc ? v : acc;
            else if (kind == POOL_LP)
                acc += pow(fabs(v), p);
            else
                acc += v;
        }
        if (kind == POOL_AVG)
            acc = size ? acc / (double)size : 0.0;
        else if (kind == POOL_LP)
            acc = pow(acc, 1.0 / p);
        kb_st(y->data, y->dtype, (size_t)pl, acc);
    }
}

kiln_status kb_nn_global_pool_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    const char *op = r->node->op_type;
    pool_kind kind = strcmp(op, "GlobalMaxPool") == 0  ? POOL_MAX
                     : strcmp(op, "GlobalLpPool") == 0 ? POOL_LP
                                                       : POOL_AVG;
    double p = (double)kn_attr_int(r->node, "p", 2);
    int64_t planes = x->dims[0] * x->dims[1], size = kn_numel(x->rank - 2, x->dims + 2);
    int nth = r->threads > 1 && planes * size > 32768 ? r->threads : 1;
    {
        global_pool_planes_ctx c_ = {x, y, kind, p, size};
        kn_parallel_for(nth, planes, 0, global_pool_planes, &c_);
    }
    return KILN_OK;
}

/* MaxUnpool: zeros, then each input value where its MaxPool Indices entry
 * points. The indices address the shape MaxPool saw (recovered from the
 * window); an explicit output_shape may differ, so each index is unravelled
 * in that shape and ravelled again in the output's. */
kiln_status kb_nn_max_unpool_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *idx = &r->in[1];
    kb_tensor *y = &r->out[0];
    int64_t n = kb_numel(x), total = kb_numel(y);
    size_t es = kiln_dtype_size(y->dtype);
    int nsp = x->rank - 2;
    if (kb_numel(idx) != n)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "indices must have the input's shape");
    size_t nk;
    const int64_t *ks = kn_attr_ints(r->node, "kernel_shape", &nk);
    if (!ks || nk != (size_t)nsp)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "kernel_shape must have %d values", nsp);
    size_t ns, np;
    const int64_t *st = kn_attr_ints(r->node, "strides", &ns);
    const int64_t *pd = kn_attr_ints(r->node, "pads", &np);
    int64_t orig[KN_WIN_MAX], orig_plane = 1, out_plane = kn_numel(nsp, y->dims + 2);
    for (int d = 0; d < nsp; d++) {
        int64_t s = st && ns == (size_t)nsp ? st[d] : 1;
        int64_t p = pd && np == (size_t)(2 * nsp) ? pd[d] + pd[d + nsp] : 0;
        orig[d] = (x->dims[2 + d] - 1) * s + ks[d] - p;
        orig_plane *= orig[d];
    }
    memset(y->data, 0, (size_t)total * es);
    for (int64_t i = 0; i < n; i++) {
        /* read exactly: an int64 index through a double rounded, and one
         * past 2^63 was an undefined conversion */
        int64_t k = -1;
        if (idx->dtype == KILN_DTYPE_INT64)
            k = ((const int64_t *)idx->data)[i];
        else if (!kn_double_to_i64(kb_ld(idx->data, idx->dtype, (size_t)i), INT64_MIN, INT64_MAX,
                                   &k))
            k = -1;
        int64_t plane = orig_plane ? k / orig_plane : 0, rest = orig_plane ? k % orig_plane : 0;
        int64_t off = 0, mul = 1;
        /* a plane past the output's would overflow plane * out_plane */
        bool inside = k >= 0 && (out_plane == 0 || plane < total / out_plane);
        for (int d = nsp - 1; d >= 0; d--) {
            int64_t c = rest % orig[d];
            rest /= orig[d];
            if (c >= y->dims[2 + d])
                inside = false;
            off += c * mul;
            mul *= y->dims[2 + d];
        }
        off += plane * out_plane;
        if (!inside || off >= total)
            return kn_node_error(r->node, KILN_ERR_RUNTIME, "index %lld is outside the output",
                                 (long long)k);
        memcpy((uint8_t *)y->data + (size_t)off * es, (const uint8_t *)x->data + (size_t)i * es, es);
    }
    return KILN_OK;
}
