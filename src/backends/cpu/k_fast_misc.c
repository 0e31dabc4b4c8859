/* k_fast_misc.c - the lighter ops where oneDNN's vectorised kernels beat the
 * reference loops: Softmax, LayerNormalization, and pooling (MaxPool,
 * AveragePool, GlobalAveragePool, GlobalMaxPool), all on plain row-major
 * tensors so no reorders are needed; kiln::MaxPool / kiln::AveragePool on
 * NHWC ones (the layout pass's channels-last regions). */
#ifdef KILN_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/k_fast.h"
#include "backends/cpu/k_nn.h"
#include "graph/fused.h"

static int64_t prod(const int64_t *d, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++)
        n *= d[i];
    return n;
}

static kiln_status md_plain(const kn_node *n, dnnl_memory_desc_t *md, int nd, const int64_t *dims) {
    dnnl_dims_t d, s;
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; i--) {
        d[i] = dims[i];
        s[i] = st;
        if (kn_mul_i64(st, dims[i] > 0 ? dims[i] : 1, &st))
            return kn_node_error(n, KILN_ERR_SHAPE, "the strides of a %d-D tensor overflow", nd);
    }
    KF_TRY(n, dnnl_memory_desc_init_by_strides(md, nd, d, dnnl_f32, s));
    return KILN_OK;
}

/* Only output 0 is wanted. */
static bool only_first_output(const kn_node *n) {
    for (int i = 1; i < n->n_out; i++)
        if (n->out[i] >= 0)
            return false;
    return true;
}

static bool all_float(const kn_tinfo *t, int count) {
    for (int i = 0; i < count; i++)
        if (t[i].dtype != KILN_DTYPE_UNDEFINED && t[i].dtype != KILN_DTYPE_FLOAT)
            return false;
    return true;
}

/* Wrap a single primitive desc into a fresh instance: memories for src
 * (input 0) and dst (output 0) plus any extra inputs given as (arg, index, md). */
typedef struct extra_arg {
    int arg, index;
    dnnl_memory_desc_t md;
} extra_arg;

static kiln_status single(const kn_node *n, dnnl_primitive_desc_t pd, const dnnl_memory_desc_t *src,
                          const dnnl_memory_desc_t *dst, const extra_arg *extra, int n_extra,
                          void **inst, size_t *workspace) {
    kf_inst *ki;
    kiln_status st = kf_inst_new(n, &ki);
    if (st != KILN_OK) {
        dnnl_primitive_desc_destroy(pd);
        return st;
    }
    dnnl_memory_t sm, dm, em[4];
    st = kf_mem(n, ki, src, KF_IN, 0, 0, &sm);
    if (st == KILN_OK)
        st = kf_mem(n, ki, dst, KF_OUT, 0, 0, &dm);
    for (int i = 0; i < n_extra && st == KILN_OK; i++)
        st = kf_mem(n, ki, &extra[i].md, KF_IN, extra[i].index, 0, &em[i]);
    kf_prim *p = NULL;
    if (st == KILN_OK)
        st = kf_prim_add(n, ki, pd, &p);
    else
        dnnl_primitive_desc_destroy(pd);
    if (st != KILN_OK) {
        kf_inst_free(ki);
        return st;
    }
    kf_prim_arg(p, DNNL_ARG_SRC, sm);
    kf_prim_arg(p, DNNL_ARG_DST, dm);
    for (int i = 0; i < n_extra; i++)
        kf_prim_arg(p, extra[i].arg, em[i]);
    *inst = ki;
    *workspace = ki->ws;
    return KILN_OK;
}

static kiln_status make_pd(const kn_node *n, const void *desc, dnnl_primitive_desc_t *pd,
                           const char *what) {
    return kf_make_pd(n, desc, NULL, what, pd);
}

/* ---------------- Softmax ---------------- */

/* The view oneDNN computes on: opset >= 13 normalises along one axis of the
 * tensor; earlier opsets along the 2-D view [d0*..*d(axis-1), rest]. */
static bool softmax_view(const kn_node *n, int rank, const int64_t *dims, int *nd, int64_t *vd,
                         int *axis) {
    int64_t ax = kn_attr_int(n, "axis", n->opset >= 13 ? -1 : 1);
    if (ax < 0)
        ax += rank;
    if (ax < 0 || ax >= rank || rank < 1 || rank > KILN_MAX_DIMS)
        return false;
    if (n->opset >= 13) {
        *nd = rank;
        memcpy(vd, dims, sizeof(int64_t) * (size_t)rank);
        *axis = (int)ax;
    } else {
        *nd = 2;
        vd[0] = prod(dims, 0, (int)ax);
        vd[1] = prod(dims, (int)ax, rank);
        *axis = 1;
    }
    for (int i = 0; i < *nd; i++)
        if (vd[i] <= 0)
            return false;
    return true;
}

bool kf_softmax_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    int nd, axis;
    int64_t vd[KILN_MAX_DIMS];
    return n_in == 1 && n_out == 1 && in[0].dtype == KILN_DTYPE_FLOAT &&
           out[0].dtype == KILN_DTYPE_FLOAT && softmax_view(n, in[0].rank, in[0].dims, &nd, vd, &axis);
}

kiln_status kf_softmax_prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    int nd, axis;
    int64_t vd[KILN_MAX_DIMS];
    if (!softmax_view(n, in[0].rank, in[0].dims, &nd, vd, &axis))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "softmax axis not supported");
    dnnl_memory_desc_t md;
    KN_TRY(md_plain(n, &md, nd, vd));
    dnnl_softmax_v2_desc_t sd;
    KF_TRY(n, dnnl_softmax_v2_forward_desc_init(&sd, dnnl_forward_inference, dnnl_softmax_accurate,
                                                &md, &md, axis));
    dnnl_primitive_desc_t pd;
    KN_TRY(make_pd(n, &sd, &pd, "creating the softmax"));
    return single(n, pd, &md, &md, NULL, 0, inst, workspace);
}

/* ---------------- LayerNormalization ---------------- */

bool kf_layernorm_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    if (n_in < 2 || in[0].dtype != KILN_DTYPE_FLOAT || !all_float(in, n_in) ||
        out[0].dtype != KILN_DTYPE_FLOAT || !only_first_output(n))
        return false;
    int rank = in[0].rank;
    int64_t ax = kn_attr_int(n, "axis", -1);
    if (ax < 0)
        ax += rank;
    if (ax < 0 || ax >= rank)
        return false;
    int64_t rows = prod(in[0].dims, 0, (int)ax), cols = prod(in[0].dims, (int)ax, rank);
    if (rows <= 0 || cols <= 0)
        return false;
    /* scale and bias must cover the normalised dims exactly (no broadcast) */
    for (int i = 1; i < n_in && i < 3; i++)
        if (in[i].dtype != KILN_DTYPE_UNDEFINED && prod(in[i].dims, 0, in[i].rank) != cols)
            return false;
    return n_in <= 3;
}

kiln_status kf_layernorm_prepare(const void *state, const kn_node *n, const kb_tensor *in,
                                 int n_in, const kb_tensor *out, int n_out, void **inst,
                                 size_t *workspace) {
    int rank = in[0].rank;
    int64_t ax = kn_attr_int(n, "axis", -1);
    if (ax < 0)
        ax += rank;
    int64_t d[2] = {prod(in[0].dims, 0, (int)ax), prod(in[0].dims, (int)ax, rank)};
    bool has_b = n_in > 2 && in[2].dtype == KILN_DTYPE_FLOAT;
    dnnl_memory_desc_t md;
    KN_TRY(md_plain(n, &md, 2, d));
    extra_arg ex[2];
    int n_ex = 0;
    KN_TRY(md_plain(n, &ex[0].md, 1, &d[1]));
    ex[0].arg = DNNL_ARG_SCALE, ex[0].index = 1, n_ex = 1;
    if (has_b) {
        ex[1] = ex[0];
        ex[1].arg = DNNL_ARG_SHIFT, ex[1].index = 2, n_ex = 2;
    }
    dnnl_layer_normalization_desc_t ld;
    KF_TRY(n, dnnl_layer_normalization_forward_desc_init(
                  &ld, dnnl_forward_inference, &md, NULL, kn_attr_float(n, "epsilon", 1e-5f),
                  dnnl_use_scale | (has_b ? dnnl_use_shift : 0u)));
    dnnl_primitive_desc_t pd;
    KN_TRY(make_pd(n, &ld, &pd, "creating the layer normalization"));
    return single(n, pd, &md, &md, ex, n_ex, inst, workspace);
}

/* ---------------- pooling ---------------- */

typedef struct pool_geo {
    int nsp;
    dnnl_dims_t k, s, d, pb, pe;
    dnnl_alg_kind_t alg;
} pool_geo;

static bool pool_geom(const kn_node *n, const kn_tinfo *x, const kn_tinfo *y, pool_geo *g) {
    int nsp = x->rank - 2;
    if (nsp < 1 || nsp > 3 || y->rank != x->rank || x->dims[0] != y->dims[0] ||
        x->dims[1] != y->dims[1])
        return false;
    for (int i = 0; i < x->rank; i++)
        if (x->dims[i] <= 0 || y->dims[i] <= 0)
            return false;
    g->nsp = nsp;
    bool global = strncmp(n->op_type, "Global", 6) == 0;
    bool max = strstr(n->op_type, "Max") != NULL;
    if (global) {
        for (int i = 0; i < nsp; i++) {
            g->k[i] = x->dims[2 + i], g->s[i] = 1, g->d[i] = 0, g->pb[i] = 0, g->pe[i] = 0;
            if (y->dims[2 + i] != 1)
                return false;
        }
        g->alg = max ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
        return true;
    }
    size_t nk = 0, ns = 0, nd = 0, np = 0;
    const int64_t *ks = kn_attr_ints(n, "kernel_shape", &nk);
    const int64_t *st = kn_attr_ints(n, "strides", &ns);
    const int64_t *dl = kn_attr_ints(n, "dilations", &nd);
    const int64_t *pd = kn_attr_ints(n, "pads", &np);
    const char *ap = kn_attr_string(n, "auto_pad", "NOTSET");
    bool ceil = kn_attr_int(n, "ceil_mode", 0) != 0;
    bool include_pad = !max && kn_attr_int(n, "count_include_pad", 0) != 0;
    if (!ks || nk != (size_t)nsp || (st && ns != (size_t)nsp) || (dl && nd != (size_t)nsp) ||
        (pd && np != 2u * (size_t)nsp))
        return false;
    if (!max && dl) /* AveragePool gained dilations in opset 19; keep to the plain case */
        for (size_t i = 0; i < nd; i++)
            if (dl[i] != 1)
                return false;
    for (int i = 0; i < nsp; i++) {
        int64_t k = ks[i], s = st ? st[i] : 1, d = dl ? dl[i] : 1, xi = x->dims[2 + i];
        int64_t yi = y->dims[2 + i];
        if (k < 1 || s < 1 || d < 1)
            return false;
        int64_t range = (k - 1) * d + 1, pb = 0, pe = 0;
        if (strcmp(ap, "NOTSET") == 0) {
            if (pd)
                pb = pd[i], pe = pd[i + nsp];
        } else if (strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0) {
            int64_t total = (yi - 1) * s + range - xi;
            if (total < 0)
                total = 0;
            pb = ap[5] == 'U' ? total / 2 : total - total / 2;
            pe = total - pb;
        } else if (strcmp(ap, "VALID") != 0) {
            return false;
        }
        if (pb < 0 || pe < 0 || pb >= range || pe >= range)
            return false;
        /* the end padding that yields exactly the output size (ceil_mode
         * windows that start inside the input but run past its end) */
        int64_t need = (yi - 1) * s + range - xi - pb;
        if (need < 0)
            need = 0;
        if (need > pe && (!ceil || include_pad || need >= range))
            return false;
        if ((yi - 1) * s >= xi + pb) /* a window made only of padding */
            return false;
        g->k[i] = k, g->s[i] = s, g->d[i] = d - 1, g->pb[i] = pb, g->pe[i] = need;
    }
    g->alg = max ? dnnl_pooling_max
                 : (include_pad ? dnnl_pooling_avg_include_padding
                                : dnnl_pooling_avg_exclude_padding);
    return true;
}

/* kiln::MaxPool / kiln::AveragePool (the layout pass's) hold 4-D NHWC
 * tensors: t seen as NCHW dims, which oneDNN takes with the nhwc tag. */
static bool pool_cl(const kn_node *n) {
    return n->domain[0] && kn_attr_int(n, "channels_last", 0) != 0;
}

static void pool_view(const kn_node *n, const kn_tinfo *t, kn_tinfo *v) {
    *v = *t;
    if (pool_cl(n) && t->rank == 4)
        kn_dims_channels(4, t->dims, v->dims, true);
}

bool kf_pool_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                      int n_out) {
    if (n_in != 1 || n_out < 1 || (pool_cl(n) && in[0].rank != 4))
        return false;
    pool_geo g;
    kn_tinfo x, y;
    pool_view(n, &in[0], &x);
    pool_view(n, &out[0], &y);
    return in[0].dtype == KILN_DTYPE_FLOAT && out[0].dtype == KILN_DTYPE_FLOAT &&
           only_first_output(n) && kn_attr_int(n, "storage_order", 0) == 0 &&
           pool_geom(n, &x, &y, &g);
}

kiln_status kf_pool_prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                            const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    kn_tinfo x, y;
    memset(&x, 0, sizeof x), memset(&y, 0, sizeof y);
    x.dtype = in[0].dtype, x.rank = in[0].rank;
    memcpy(x.dims, in[0].dims, sizeof x.dims);
    y.dtype = out[0].dtype, y.rank = out[0].rank;
    memcpy(y.dims, out[0].dims, sizeof y.dims);
    bool cl = pool_cl(n);
    if (cl) {
        if (x.rank != 4 || y.rank != 4)
            return kn_node_error(n, KILN_ERR_UNSUPPORTED, "channels-last pooling of rank %d",
                                 x.rank);
        kn_dims_channels(4, in[0].dims, x.dims, true);
        kn_dims_channels(4, out[0].dims, y.dims, true);
    }
    pool_geo g;
    if (!pool_geom(n, &x, &y, &g))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "pooling geometry not supported");
    dnnl_memory_desc_t xm, ym;
    if (cl) {
        dnnl_dims_t xd = {x.dims[0], x.dims[1], x.dims[2], x.dims[3]};
        dnnl_dims_t yd = {y.dims[0], y.dims[1], y.dims[2], y.dims[3]};
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&xm, 4, xd, dnnl_f32, dnnl_nhwc));
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&ym, 4, yd, dnnl_f32, dnnl_nhwc));
    } else {
        KN_TRY(md_plain(n, &xm, x.rank, x.dims));
        KN_TRY(md_plain(n, &ym, y.rank, y.dims));
    }
    dnnl_pooling_v2_desc_t pdsc;
    KF_TRY(n, dnnl_pooling_v2_forward_desc_init(&pdsc, dnnl_forward_inference, g.alg, &xm, &ym,
                                                g.s, g.k, g.d, g.pb, g.pe));
    dnnl_primitive_desc_t pd;
    KN_TRY(make_pd(n, &pdsc, &pd, "creating the pooling"));
    return single(n, pd, &xm, &ym, NULL, 0, inst, workspace);
}

/* ---------------- kiln::Attention ---------------- */

static void att_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc, int threads) {
    (void)threads; /* one call per job; jobs run in parallel on kiln's pool */
    /* dnnl_sgemm forks an OpenMP team of the calling thread's count (the
     * machine's, on a pool thread or outside prepare): a job is one thread's
     * work, so the call runs in this thread alone, without waking a team
     * whose spin and join cost more than these small GEMMs. */
    int prev = omp_get_max_threads();
    if (prev != 1)
        omp_set_num_threads(1);
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (prev != 1)
        omp_set_num_threads(prev);
}

bool kf_attention_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    (void)n;
    if (n_in < 3 || n_in > 4 || n_out < 1)
        return false;
    for (int i = 0; i < n_in; i++)
        if (in[i].dtype != KILN_DTYPE_UNDEFINED && !kb_is_real(in[i].dtype))
            return false;
    return true;
}

kiln_status kf_attention_prepare(const void *state, const kn_node *n, const kb_tensor *in,
                                 int n_in, const kb_tensor *out, int n_out, void **inst,
                                 size_t *workspace) {
    *workspace = kb_attention_workspace(n, in, n_in, out);
    return KILN_OK;
}

kiln_status kf_attention_run(const kb_run *r) { return kb_attention_run(r, att_sgemm); }
#endif /* KILN_HAVE_DNNL */
