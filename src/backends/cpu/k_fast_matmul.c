/* k_fast_matmul.c - MatMul, kiln::MatMul, Gemm and kiln::Gemm through the
 * oneDNN matmul primitive: batch dims folded into M when B has none, bias
 * and activation as post-ops, and (tactic "dnnl_packed") B in the
 * primitive's preferred layout: packed once per shape when constant. */
#ifdef KILN_HAVE_DNNL
#include <string.h>

#include "backends/cpu/k_fast.h"
#include "graph/fused.h"

static bool is_fused(const kn_node *n) { return strcmp(n->domain, KN_DOMAIN_KILN) == 0; }

static int64_t numel(int rank, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= d[i];
    return n;
}

/* Row-major strides of dims. */
static void plain_strides(int nd, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i] > 0 ? dims[i] : 1;
    }
}

static kiln_status md_plain(const kn_node *n, dnnl_memory_desc_t *md, int nd, const int64_t *dims) {
    dnnl_dims_t d, s;
    for (int i = 0; i < nd; i++)
        d[i] = dims[i];
    plain_strides(nd, d, s);
    KF_TRY(n, dnnl_memory_desc_init_by_strides(md, nd, d, dnnl_f32, s));
    return KILN_OK;
}

/* ---------------- MatMul ---------------- */

bool kf_matmul_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    if (n_in < 2 || n_out < 1)
        return false;
    const kn_tinfo *a = &in[0], *b = &in[1], *y = &out[0];
    if (a->dtype != KILN_DTYPE_FLOAT || b->dtype != KILN_DTYPE_FLOAT || y->dtype != KILN_DTYPE_FLOAT)
        return false;
    if (a->rank < 2 || b->rank < 2 || y->rank != (a->rank > b->rank ? a->rank : b->rank))
        return false;
    int nd = y->rank;
    int64_t k = a->dims[a->rank - 1], nn = b->dims[b->rank - 1];
    if (b->dims[b->rank - 2] != k || y->dims[nd - 1] != nn || y->dims[nd - 2] != a->dims[a->rank - 2])
        return false;
    for (int i = 0; i < nd - 2; i++) { /* batch dims: equal to Y's or 1 */
        int ia = i - (nd - a->rank), ib = i - (nd - b->rank);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if ((da != y->dims[i] && da != 1) || (db != y->dims[i] && db != 1))
            return false;
    }
    if (numel(y->rank, y->dims) <= 0 || k <= 0)
        return false;
    bool fused = is_fused(n);
    if (!fused && n_in > 2)
        return false;
    if (fused) {
        if (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED) {
            const kn_tinfo *bias = &in[2];
            if (bias->dtype != KILN_DTYPE_FLOAT || bias->rank < 1 || bias->rank > nd ||
                bias->dims[bias->rank - 1] != nn || numel(bias->rank, bias->dims) != nn)
                return false;
        }
        if (n_in > 3 && in[3].dtype != KILN_DTYPE_UNDEFINED && /* residual Z: Y's shape */
            (in[3].dtype != KILN_DTYPE_FLOAT || in[3].rank != y->rank ||
             memcmp(in[3].dims, y->dims, sizeof(int64_t) * (size_t)y->rank) != 0))
            return false;
        float al, be;
        if (kf_act_from_node(n, "alpha", "beta", &al, &be) == KB_ACT_INVALID)
            return false;
    }
    return true;
}

static kiln_status matmul_build(const kn_node *n, const kb_tensor *in, int n_in,
                                const kb_tensor *out, kf_inst *inst, bool packed) {
    const kb_tensor *a = &in[0], *b = &in[1], *y = &out[0];
    int nd = y->rank;
    bool b_batched = false;
    for (int i = 0; i < b->rank - 2; i++)
        if (b->dims[i] != 1)
            b_batched = true;
    int64_t ad[KILN_MAX_DIMS], bd[KILN_MAX_DIMS], yd[KILN_MAX_DIMS], biasd[KILN_MAX_DIMS];
    int md_nd;
    int64_t k = a->dims[a->rank - 1], nn = y->dims[nd - 1];
    if (!b_batched) { /* fold every batch dim of A into M */
        md_nd = 2;
        int64_t m = numel(nd - 1, y->dims);
        ad[0] = m, ad[1] = k;
        bd[0] = k, bd[1] = nn;
        yd[0] = m, yd[1] = nn;
    } else {
        md_nd = nd;
        for (int i = 0; i < nd; i++) {
            int ia = i - (nd - a->rank), ib = i - (nd - b->rank);
            ad[i] = ia >= 0 ? a->dims[ia] : 1;
            bd[i] = ib >= 0 ? b->dims[ib] : 1;
            yd[i] = y->dims[i];
        }
    }
    for (int i = 0; i < md_nd; i++)
        biasd[i] = i == md_nd - 1 ? nn : 1;
    bool has_bias = is_fused(n) && n_in > 2 && in[2].dtype == KILN_DTYPE_FLOAT;
    bool has_z = is_fused(n) && n_in > 3 && in[3].dtype == KILN_DTYPE_FLOAT;
    float al = 0.f, be = 0.f;
    kb_act act = is_fused(n) ? kf_act_from_node(n, "alpha", "beta", &al, &be) : KB_ACT_NONE;

    dnnl_memory_desc_t a_md, b_u, b_c, y_md, bias_md;
    KN_TRY(md_plain(n, &a_md, md_nd, ad));
    KN_TRY(md_plain(n, &b_u, md_nd, bd));
    KN_TRY(md_plain(n, &y_md, md_nd, yd));
    KN_TRY(md_plain(n, &bias_md, md_nd, biasd));
    b_c = b_u;
    if (packed) {
        dnnl_dims_t d;
        for (int i = 0; i < md_nd; i++)
            d[i] = bd[i];
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&b_c, md_nd, d, dnnl_f32, dnnl_format_tag_any));
    }
    dnnl_matmul_desc_t mmd;
    KF_TRY(n, dnnl_matmul_desc_init(&mmd, &a_md, &b_c, has_bias ? &bias_md : NULL, &y_md));
    dnnl_post_ops_t po;
    KF_TRY(n, dnnl_post_ops_create(&po));
    kiln_status st = KILN_OK;
    if (has_z) /* the residual: Z is copied into Y, which the sum post-op adds */
        st = kf_check(n, dnnl_post_ops_append_sum(po, 1.f), "adding the residual");
    if (kf_defer_act(act)) { /* after the primitive, in kiln's vector loop */
        inst->post_act = act;
        inst->post_n = numel(nd, y->dims);
        act = KB_ACT_NONE;
    }
    if (st == KILN_OK)
        st = kf_check(n, kf_append_act(po, act, al, be), "adding the activation");
    if (st != KILN_OK) {
        dnnl_post_ops_destroy(po);
        return st;
    }
    dnnl_primitive_desc_t pd;
    KN_TRY(kf_make_pd(n, &mmd, po, "creating the matmul", &pd));
    dnnl_memory_desc_t b_p = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t am, bm, ym, biasm = NULL;
    st = kf_mem(n, inst, &a_md, KF_IN, 0, 0, &am);
    if (st == KILN_OK)
        st = packed ? kf_pack(n, inst, &b_u, 1, b->host, &b_p, &bm)
                    : kf_mem(n, inst, &b_u, KF_IN, 1, 0, &bm);
    if (st == KILN_OK)
        st = kf_mem(n, inst, &y_md, KF_OUT, 0, 0, &ym);
    if (st == KILN_OK && has_bias)
        st = kf_mem(n, inst, &bias_md, KF_IN, 2, 0, &biasm);
    if (st == KILN_OK && has_z) {
        dnnl_memory_t zm;
        st = kf_mem(n, inst, &y_md, KF_IN, 3, 0, &zm);
        if (st == KILN_OK)
            st = kf_reorder_add(n, inst, &y_md, zm, &y_md, ym);
    }
    if (st != KILN_OK) {
        dnnl_primitive_desc_destroy(pd);
        return st;
    }
    kf_prim *p;
    KN_TRY(kf_prim_add(n, inst, pd, &p));
    kf_prim_arg(p, DNNL_ARG_SRC, am);
    kf_prim_arg(p, DNNL_ARG_WEIGHTS, bm);
    if (biasm)
        kf_prim_arg(p, DNNL_ARG_BIAS, biasm);
    kf_prim_arg(p, DNNL_ARG_DST, ym);
    return KILN_OK;
}

static kiln_status prepare_with(kiln_status (*build)(const kn_node *, const kb_tensor *, int,
                                                     const kb_tensor *, kf_inst *, bool),
                                const kn_node *n, const kb_tensor *in, int n_in,
                                const kb_tensor *out, int n_out, void **inst, size_t *workspace,
                                bool packed) {
    if (n_in < 2 || n_out < 1)
        return kn_node_error(n, KILN_ERR_INTERNAL, "matrix product without operands");
    kf_inst *ki;
    KN_TRY(kf_inst_new(n, &ki));
    kiln_status st = build(n, in, n_in, out, ki, packed);
    if (st != KILN_OK) {
        kf_inst_free(ki);
        return st;
    }
    *inst = ki;
    *workspace = ki->ws;
    return KILN_OK;
}

kiln_status kf_matmul_prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                              const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    return prepare_with(matmul_build, n, in, n_in, out, n_out, inst, workspace, false);
}

kiln_status kf_matmul_prepare_packed(const void *state, const kn_node *n, const kb_tensor *in,
                                     int n_in, const kb_tensor *out, int n_out, void **inst,
                                     size_t *workspace) {
    return prepare_with(matmul_build, n, in, n_in, out, n_out, inst, workspace, true);
}

/* ---------------- Gemm ---------------- */

/* How Gemm's C joins the product. */
typedef enum gemm_c { GEMM_C_NONE, GEMM_C_BIAS, GEMM_C_SUM } gemm_c;

static gemm_c gemm_c_mode(const kn_node *n, bool has_c, int64_t c_rank, const int64_t *c_dims,
                          int64_t nn) {
    float alpha = kn_attr_float(n, "alpha", 1.f), beta = kn_attr_float(n, "beta", 1.f);
    if (!has_c || beta == 0.f)
        return GEMM_C_NONE;
    bool row = (c_rank == 1 && c_dims[0] == nn) || (c_rank == 2 && c_dims[0] == 1 && c_dims[1] == nn);
    return row && alpha == 1.f && beta == 1.f ? GEMM_C_BIAS : GEMM_C_SUM;
}

bool kf_gemm_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                      int n_out) {
    if (n_in < 2 || n_out < 1)
        return false;
    const kn_tinfo *a = &in[0], *b = &in[1], *y = &out[0];
    if (a->dtype != KILN_DTYPE_FLOAT || b->dtype != KILN_DTYPE_FLOAT || y->dtype != KILN_DTYPE_FLOAT)
        return false;
    if (a->rank != 2 || b->rank != 2 || y->rank != 2)
        return false;
    bool ta = kn_attr_int(n, "transA", 0) != 0, tb = kn_attr_int(n, "transB", 0) != 0;
    int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
    int64_t kb = tb ? b->dims[1] : b->dims[0], nn = tb ? b->dims[0] : b->dims[1];
    if (k != kb || y->dims[0] != m || y->dims[1] != nn || m <= 0 || nn <= 0 || k <= 0)
        return false;
    if (n_in > 2 && in[2].dtype != KILN_DTYPE_UNDEFINED) {
        const kn_tinfo *c = &in[2];
        if (c->dtype != KILN_DTYPE_FLOAT || c->rank > 2)
            return false;
        int64_t cm = c->rank == 2 ? c->dims[0] : 1;
        int64_t cn = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
        if ((cm != m && cm != 1) || (cn != nn && cn != 1))
            return false;
    }
    if (n_in > 3)
        return false;
    if (is_fused(n)) {
        float al, be;
        if (kf_act_from_node(n, "alpha_act", "beta_act", &al, &be) == KB_ACT_INVALID)
            return false;
    }
    return true;
}

static kiln_status gemm_build(const kn_node *n, const kb_tensor *in, int n_in,
                              const kb_tensor *out, kf_inst *inst, bool packed) {
    const kb_tensor *a = &in[0], *b = &in[1];
    bool ta = kn_attr_int(n, "transA", 0) != 0, tb = kn_attr_int(n, "transB", 0) != 0;
    float alpha = kn_attr_float(n, "alpha", 1.f), beta = kn_attr_float(n, "beta", 1.f);
    int64_t m = out[0].dims[0], nn = out[0].dims[1], k = ta ? a->dims[0] : a->dims[1];
    bool has_c = n_in > 2 && in[2].dtype == KILN_DTYPE_FLOAT;
    const kb_tensor *c = has_c ? &in[2] : NULL;
    gemm_c mode = gemm_c_mode(n, has_c, c ? c->rank : 0, c ? c->dims : NULL, nn);
    float al = 0.f, be = 0.f;
    kb_act act = is_fused(n) ? kf_act_from_node(n, "alpha_act", "beta_act", &al, &be)
                             : KB_ACT_NONE;

    /* A' is [m, k] read through strides; so is B' [k, n] */
    dnnl_dims_t ad = {m, k}, as = {ta ? 1 : k, ta ? m : 1};
    dnnl_dims_t bd = {k, nn}, bs = {tb ? 1 : nn, tb ? k : 1};
    dnnl_dims_t yd = {m, nn}, biasd = {1, nn};
    dnnl_memory_desc_t a_md, b_u, b_c, y_md, bias_md;
    KF_TRY(n, dnnl_memory_desc_init_by_strides(&a_md, 2, ad, dnnl_f32, as));
    KF_TRY(n, dnnl_memory_desc_init_by_strides(&b_u, 2, bd, dnnl_f32, bs));
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&y_md, 2, yd, dnnl_f32, dnnl_ab));
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&bias_md, 2, biasd, dnnl_f32, dnnl_ab));
    b_c = b_u;
    if (packed)
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&b_c, 2, bd, dnnl_f32, dnnl_format_tag_any));
    dnnl_matmul_desc_t mmd;
    KF_TRY(n, dnnl_matmul_desc_init(&mmd, &a_md, &b_c, mode == GEMM_C_BIAS ? &bias_md : NULL,
                                    &y_md));
    dnnl_post_ops_t po;
    KF_TRY(n, dnnl_post_ops_create(&po));
    kiln_status st = KILN_OK;
    if (alpha != 1.f)
        st = kf_check(n, dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_linear, alpha, 0.f),
                      "scaling by alpha");
    if (st == KILN_OK && mode == GEMM_C_SUM) /* Y was filled with C before the product */
        st = kf_check(n, dnnl_post_ops_append_sum(po, beta), "adding beta * C");
    if (kf_defer_act(act)) { /* after the primitive, in kiln's vector loop */
        inst->post_act = act;
        inst->post_n = m * nn;
        act = KB_ACT_NONE;
    }
    if (st == KILN_OK)
        st = kf_check(n, kf_append_act(po, act, al, be), "adding the activation");
    if (st != KILN_OK) {
        dnnl_post_ops_destroy(po);
        return st;
    }
    dnnl_primitive_desc_t pd;
    KN_TRY(kf_make_pd(n, &mmd, po, "creating the matmul", &pd));
    dnnl_memory_desc_t b_p = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t am, bm, ym, biasm = NULL;
    st = kf_mem(n, inst, &a_md, KF_IN, 0, 0, &am);
    if (st == KILN_OK)
        st = packed ? kf_pack(n, inst, &b_u, 1, b->host, &b_p, &bm)
                    : kf_mem(n, inst, &b_u, KF_IN, 1, 0, &bm);
    if (st == KILN_OK)
        st = kf_mem(n, inst, &y_md, KF_OUT, 0, 0, &ym);
    if (st == KILN_OK && mode == GEMM_C_BIAS)
        st = kf_mem(n, inst, &bias_md, KF_IN, 2, 0, &biasm);
    if (st != KILN_OK) {
        dnnl_primitive_desc_destroy(pd);
        return st;
    }
    if (mode == GEMM_C_SUM) {
        inst->prefill = KF_PREFILL_BROADCAST2D;
        inst->prefill_in = 2;
        inst->pm = m, inst->pn = nn;
        inst->cm = c->rank == 2 ? c->dims[0] : 1;
        inst->cn = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
    }
    kf_prim *p;
    KN_TRY(kf_prim_add(n, inst, pd, &p));
    kf_prim_arg(p, DNNL_ARG_SRC, am);
    kf_prim_arg(p, DNNL_ARG_WEIGHTS, bm);
    if (biasm)
        kf_prim_arg(p, DNNL_ARG_BIAS, biasm);
    kf_prim_arg(p, DNNL_ARG_DST, ym);
    return KILN_OK;
}

kiln_status kf_gemm_prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                            const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    return prepare_with(gemm_build, n, in, n_in, out, n_out, inst, workspace, false);
}

kiln_status kf_gemm_prepare_packed(const void *state, const kn_node *n, const kb_tensor *in,
                                   int n_in, const kb_tensor *out, int n_out, void **inst,
                                   size_t *workspace) {
    return prepare_with(gemm_build, n, in, n_in, out, n_out, inst, workspace, true);
}
#endif /* KILN_HAVE_DNNL */
