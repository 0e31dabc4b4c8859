/* k_fast_conv.c - 1-D and 2-D convolution (ONNX Conv and kiln::Conv) through
 * oneDNN: constant weights packed once per shape in prepare (others on every
 * run), bias, residual (binary add post-op read in place, else a sum
 * post-op on a copy in dst) and activation (eltwise post-ops) fused into the
 * primitive. */
#ifdef KILN_HAVE_DNNL
#include <string.h>

#include "backends/cpu/k_fast.h"
#include "graph/fused.h"

typedef struct conv_state {
    bool plain;     /* compute on NCHW as is (no layout reorders) */
    kb_act act;
    float alpha, beta;
} conv_state;

/* Geometry of a convolution mapped onto 2-D (a 1-D one gets H = 1). */
typedef struct conv_geo {
    int64_t k[2], s[2], d[2], pb[2], pe[2];
    int64_t group;
} conv_geo;

static bool is_fused(const kn_node *n) { return strcmp(n->domain, KN_DOMAIN_KILN) == 0; }

/* Fill g from the node's attributes for spatial sizes x (input), w (kernel)
 * and y (output), nsp of them; false when the attributes do not fit. */
static bool conv_geom(const kn_node *n, int nsp, const int64_t *x, const int64_t *w,
                      const int64_t *y, conv_geo *g) {
    size_t ns = 0, nd = 0, np = 0, nk = 0;
    const int64_t *st = kn_attr_ints(n, "strides", &ns);
    const int64_t *dl = kn_attr_ints(n, "dilations", &nd);
    const int64_t *pd = kn_attr_ints(n, "pads", &np);
    const int64_t *ks = kn_attr_ints(n, "kernel_shape", &nk);
    const char *ap = kn_attr_string(n, "auto_pad", "NOTSET");
    if ((st && ns != (size_t)nsp) || (dl && nd != (size_t)nsp) || (pd && np != 2u * (size_t)nsp) ||
        (ks && nk != (size_t)nsp))
        return false;
    g->group = kn_attr_int(n, "group", 1);
    if (g->group < 1)
        return false;
    for (int i = 0; i < 2; i++) {
        g->k[i] = 1, g->s[i] = 1, g->d[i] = 1, g->pb[i] = 0, g->pe[i] = 0;
    }
    int off = 2 - nsp;
    for (int i = 0; i < nsp; i++) {
        int j = i + off;
        g->k[j] = w[i];
        if (ks && ks[i] != w[i])
            return false;
        if (st)
            g->s[j] = st[i];
        if (dl)
            g->d[j] = dl[i];
        if (g->s[j] < 1 || g->d[j] < 1)
            return false;
        int64_t range = (w[i] - 1) * g->d[j] + 1;
        if (strcmp(ap, "NOTSET") == 0) {
            if (pd) {
                g->pb[j] = pd[i];
                g->pe[j] = pd[i + nsp];
            }
        } else if (strcmp(ap, "VALID") == 0) {
            /* pads stay 0 */
        } else if (strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0) {
            int64_t total = (y[i] - 1) * g->s[j] + range - x[i];
            if (total < 0)
                total = 0;
            int64_t small = total / 2;
            bool upper = ap[5] == 'U';
            g->pb[j] = upper ? small : total - small;
            g->pe[j] = total - g->pb[j];
        } else {
            return false;
        }
        if (g->pb[j] < 0 || g->pe[j] < 0)
            return false;
        if (x[i] + g->pb[j] + g->pe[j] < range)
            return false;
        if ((x[i] + g->pb[j] + g->pe[j] - range) / g->s[j] + 1 != y[i])
            return false;
    }
    return true;
}

/* A channels-last node's tensors seen channels-first (dims only). */
static void cf_view(const kn_node *n, const kn_tinfo *t, kn_tinfo *v) {
    *v = *t;
    if (kn_attr_int(n, "channels_last", 0))
        kn_dims_channels(t->rank, t->dims, v->dims, true);
}

bool kf_conv_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                      int n_out) {
    if (n_in < 2 || n_out < 1)
        return false;
    bool cl = kn_attr_int(n, "channels_last", 0) != 0;
    if (cl && in[0].rank != 4)
        return false;
    kn_tinfo xv, wv, yv;
    cf_view(n, &in[0], &xv);
    cf_view(n, &in[1], &wv);
    cf_view(n, &out[0], &yv);
    const kn_tinfo *x = &xv, *w = &wv, *y = &yv;
    if (x->dtype != KILN_DTYPE_FLOAT || w->dtype != KILN_DTYPE_FLOAT || y->dtype != KILN_DTYPE_FLOAT)
        return false;
    if ((x->rank != 3 && x->rank != 4) || w->rank != x->rank || y->rank != x->rank)
        return false;
    if (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED &&
        (in[2].dtype != KILN_DTYPE_FLOAT || in[2].rank != 1 || in[2].dims[0] != w->dims[0]))
        return false;
    bool fused = is_fused(n);
    if (!fused && n_in > 3)
        return false;
    if (fused) {
        if (n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED) {
            if (in[3].dtype != KILN_DTYPE_FLOAT || in[3].rank != out[0].rank ||
                memcmp(in[3].dims, out[0].dims, sizeof(int64_t) * (size_t)out[0].rank) != 0)
                return false;
        }
        float a, b;
        if (kf_act_from_node(n, "alpha", "beta", &a, &b) == KB_ACT_INVALID)
            return false;
    }
    int nsp = x->rank - 2;
    conv_geo g;
    if (!conv_geom(n, nsp, x->dims + 2, w->dims + 2, y->dims + 2, &g))
        return false;
    if (x->dims[0] != y->dims[0] || y->dims[1] != w->dims[0])
        return false;
    if (w->dims[0] % g.group != 0 || w->dims[1] * g.group != x->dims[1])
        return false;
    for (int i = 0; i < x->rank; i++)
        if (x->dims[i] <= 0 || w->dims[i] <= 0 || y->dims[i] <= 0)
            return false;
    return true;
}

static kiln_status conv_init(const kn_node *n, void **state, bool plain) {
    conv_state *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    s->plain = plain;
    s->act = KB_ACT_NONE;
    if (is_fused(n))
        s->act = kf_act_from_node(n, "alpha", "beta", &s->alpha, &s->beta);
    if (s->act == KB_ACT_INVALID) {
        kn_free(s);
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "unknown activation '%s'",
                             kn_attr_string(n, "activation", ""));
    }
    *state = s;
    return KILN_OK;
}

kiln_status kf_conv_init_any(const kn_node *n, void **state) { return conv_init(n, state, false); }
kiln_status kf_conv_init_nchw(const kn_node *n, void **state) { return conv_init(n, state, true); }
void kf_conv_fini(void *state) { kn_free(state); }

/* Build the plan: [x reorder] [residual into dst] conv [dst reorder]. */
static kiln_status conv_build(const conv_state *cs, const kn_node *n, const kb_tensor *in,
                              int n_in, const kb_tensor *out, kf_inst *inst) {
    /* channels-last nodes (the layout pass's): NHWC activations, OHWI weights */
    bool cl = kn_attr_int(n, "channels_last", 0) != 0;
    kb_tensor xv = in[0], wv = in[1], yv = out[0];
    if (cl) {
        kn_dims_channels(4, in[0].dims, xv.dims, true);
        kn_dims_channels(4, in[1].dims, wv.dims, true);
        kn_dims_channels(4, out[0].dims, yv.dims, true);
    }
    const kb_tensor *x = &xv, *w = &wv, *y = &yv;
    bool has_b = n_in > 2 && in[2].dtype == KILN_DTYPE_FLOAT;
    bool has_z = n_in > 3 && in[3].dtype == KILN_DTYPE_FLOAT;
    int nsp = x->rank - 2;
    conv_geo g;
    if (!conv_geom(n, nsp, x->dims + 2, w->dims + 2, y->dims + 2, &g))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "convolution geometry not supported");
    int64_t xh = nsp == 2 ? x->dims[2] : 1, xw = x->dims[x->rank - 1];
    int64_t yh = nsp == 2 ? y->dims[2] : 1, yw = y->dims[y->rank - 1];
    int64_t m = w->dims[0], c = x->dims[1];
    dnnl_dims_t xd = {x->dims[0], c, xh, xw}, yd = {y->dims[0], m, yh, yw}, bd = {m};
    dnnl_dims_t strides = {g.s[0], g.s[1]}, dil = {g.d[0] - 1, g.d[1] - 1};
    dnnl_dims_t pl = {g.pb[0], g.pb[1]}, pr = {g.pe[0], g.pe[1]};
    dnnl_memory_desc_t x_u, y_u, w_u, w_any, b_md, x_c, y_c;
    if (g.group == 1) {
        dnnl_dims_t wd = {m, c, g.k[0], g.k[1]};
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_u, 4, wd, dnnl_f32, cl ? dnnl_ohwi : dnnl_oihw));
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    } else {
        dnnl_dims_t wd = {g.group, m / g.group, c / g.group, g.k[0], g.k[1]};
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_u, 5, wd, dnnl_f32, cl ? dnnl_gohwi : dnnl_goihw));
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_any, 5, wd, dnnl_f32, dnnl_format_tag_any));
    }
    dnnl_format_tag_t user_tag = cl ? dnnl_nhwc : dnnl_nchw;
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&x_u, 4, xd, dnnl_f32, user_tag));
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&y_u, 4, yd, dnnl_f32, user_tag));
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_x));
    dnnl_format_tag_t act_tag = cs->plain ? user_tag : dnnl_format_tag_any;
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&x_c, 4, xd, dnnl_f32, act_tag));
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&y_c, 4, yd, dnnl_f32, act_tag));

    dnnl_convolution_desc_t cd;
    KF_TRY(n, dnnl_dilated_convolution_forward_desc_init(
                  &cd, dnnl_forward_inference, dnnl_convolution_direct, &x_c, &w_any,
                  has_b ? &b_md : NULL, &y_c, strides, dil, pl, pr));
    /* The residual: when dst is written in the caller's layout (plain
     * tactics, and channels-last nodes, whose NHWC oneDNN takes as it
     * comes), a binary add post-op reads it where it is; otherwise a sum
     * post-op adds what dst holds, so the residual is first copied there. */
    bool binary = has_z && (cs->plain || cl);
    dnnl_primitive_desc_t pd = NULL;
    kiln_status st = KILN_OK;
    for (;;) {
        dnnl_post_ops_t po;
        KF_TRY(n, dnnl_post_ops_create(&po));
        if (has_z && binary)
            st = kf_check(n, dnnl_post_ops_append_binary(po, dnnl_binary_add, &y_u),
                          "adding the residual");
        else if (has_z)
            st = kf_check(n, dnnl_post_ops_append_sum(po, 1.f), "adding the residual");
        if (st == KILN_OK)
            st = kf_check(n, kf_append_act(po, cs->act, cs->alpha, cs->beta),
                          "adding the activation");
        if (st != KILN_OK) {
            dnnl_post_ops_destroy(po);
            return st;
        }
        st = kf_make_pd(n, &cd, po, "creating the convolution", &pd);
        if (binary && (st != KILN_OK ||
                       !dnnl_memory_desc_equal(
                           dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), &y_u))) {
            if (pd)
                dnnl_primitive_desc_destroy(pd);
            pd = NULL;
            binary = false, st = KILN_OK; /* no such kernel: the sum form */
            continue;
        }
        KN_TRY(st);
        break;
    }
    dnnl_memory_desc_t x_p = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    dnnl_memory_desc_t w_p = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_desc_t y_p = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);

    dnnl_memory_t xm, xc, wm, bm = NULL, ym, yc;
    st = kf_pack(n, inst, &w_u, 1, w->host, &w_p, &wm);
    if (st == KILN_OK)
        st = kf_mem(n, inst, &x_u, KF_IN, 0, 0, &xm);
    if (st == KILN_OK)
        st = kf_mem(n, inst, &y_u, KF_OUT, 0, 0, &ym);
    if (st == KILN_OK && has_b)
        st = kf_mem(n, inst, &b_md, KF_IN, 2, 0, &bm);
    xc = xm, yc = ym;
    if (st == KILN_OK && !dnnl_memory_desc_equal(&x_p, &x_u)) {
        st = kf_mem(n, inst, &x_p, KF_WS, 0, kf_ws_reserve(inst, dnnl_memory_desc_get_size(&x_p)),
                    &xc);
        if (st == KILN_OK)
            st = kf_reorder_add(n, inst, &x_u, xm, &x_p, xc);
    }
    if (st == KILN_OK && !dnnl_memory_desc_equal(&y_p, &y_u))
        st = kf_mem(n, inst, &y_p, KF_WS, 0, kf_ws_reserve(inst, dnnl_memory_desc_get_size(&y_p)),
                    &yc);
    dnnl_memory_t zm = NULL;
    if (st == KILN_OK && has_z)
        st = kf_mem(n, inst, &y_u, KF_IN, 3, 0, &zm);
    if (st == KILN_OK && has_z && !binary) /* the sum post-op adds what dst holds */
        st = kf_reorder_add(n, inst, &y_u, zm, &y_p, yc);
    if (st != KILN_OK) {
        dnnl_primitive_desc_destroy(pd);
        return st;
    }
    kf_prim *p;
    KN_TRY(kf_prim_add(n, inst, pd, &p));
    kf_prim_arg(p, DNNL_ARG_SRC, xc);
    kf_prim_arg(p, DNNL_ARG_WEIGHTS, wm);
    if (bm)
        kf_prim_arg(p, DNNL_ARG_BIAS, bm);
    kf_prim_arg(p, DNNL_ARG_DST, yc);
    if (binary)
        kf_prim_arg(p, DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, zm);
    if (yc != ym)
        KN_TRY(kf_reorder_add(n, inst, &y_p, yc, &y_u, ym));
    return KILN_OK;
}

kiln_status kf_conv_prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                            const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    if (n_in < 2 || n_out < 1)
        return kn_node_error(n, KILN_ERR_INTERNAL, "convolution without weights");
    kf_inst *ki;
    KN_TRY(kf_inst_new(n, &ki));
    kiln_status st = conv_build(state, n, in, n_in, out, ki);
    if (st != KILN_OK) {
        kf_inst_free(ki);
        return st;
    }
    *inst = ki;
    *workspace = ki->ws;
    return KILN_OK;
}
#endif /* KILN_HAVE_DNNL */
