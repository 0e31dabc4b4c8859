/* k_fast_int8.c - oneDNN INT8 tactics of kiln::QConv and kiln::QMatMul
 * ("dnnl_int8"): oneDNN computes the exact integer sums (u8 or s8 X less
 * its zero point, s8 W packed once, an s32 result in the workspace) and
 * kq_epi_apply the epilogue, so the output has the reference's bits.
 * Convolutions run on an NHWC copy of X (a byte reorder); the epilogue
 * reads the NHWC sums and writes NCHW Y.
 *
 * The sums are exact only where oneDNN's int8 kernels multiply-add in 32
 * bits (VNNI or AMX). On an AVX2 (or plain AVX-512) CPU its u8 x s8 kernels
 * sum pairs of products in 16 bits with saturation, so 255 * 127 * 2
 * overflows: there the tactic refuses every layer and the reference runs. */
#ifdef KILN_HAVE_DNNL
#include <string.h>

#include "backends/cpu/k_fast.h"
#include "graph/fused.h"
#include "k_int8.h"
#include "k_nn.h"

typedef struct kq_inst {
    kf_inst *k;
    size_t acc_off, epi_off;
    int64_t batch, cout, spatial; /* conv: Y [batch, cout, spatial]; matmul: [rows, cout] */
    int32_t *zp;                  /* X's zero point, handed to oneDNN at run time */
    bool cl;                      /* conv: Y (and Z) NHWC, as the sums */
} kq_inst;

void kq_dnnl_release(void *p) {
    kq_inst *q = p;
    if (!q)
        return;
    kf_inst_free(q->k);
    kn_aligned_free(q->zp);
    kn_free(q);
}

static bool has(const kn_tinfo *in, int n_in, int i) {
    return i < n_in && in[i].dtype != KILN_DTYPE_UNDEFINED;
}

/* A zero point oneDNN can take: absent, or a known constant (all zeros
 * when `zero`). */
static bool zp_ok(const kn_tinfo *in, int n_in, int i, bool zero) {
    if (!has(in, n_in, i))
        return true;
    const kn_tinfo *t = &in[i];
    if (!t->value)
        return false;
    int64_t n = kn_numel(t->rank, t->dims);
    if (!zero)
        return n == 1;
    for (int64_t k = 0; k < n; k++)
        if (kb_ld(t->value, t->dtype, (size_t)k) != 0.0)
            return false;
    return true;
}

/* oneDNN's effective ISA (after DNNL_MAX_CPU_ISA) has a 32-bit int8
 * multiply-add: the VNNI bit of AVX-512 (0x40) or AVX2 (0x400). */
bool kq_dnnl_exact(void) {
    static int exact = -1;
    if (exact < 0)
        exact = ((unsigned)dnnl_get_effective_cpu_isa() & 0x440u) != 0;
    return exact;
}

static bool common_ok(const kn_tinfo *in, int n_in) {
    if (n_in <= KN_QL_W || !kq_dnnl_exact())
        return false;
    kiln_dtype xt = in[KN_QL_X].dtype;
    return (xt == KILN_DTYPE_UINT8 || xt == KILN_DTYPE_INT8) && in[KN_QL_W].dtype == KILN_DTYPE_INT8 &&
           zp_ok(in, n_in, KN_QL_XZ, false) && zp_ok(in, n_in, KN_QL_WZ, true);
}

static dnnl_data_type_t dt_of(kiln_dtype t) {
    return t == KILN_DTYPE_UINT8 ? dnnl_u8 : t == KILN_DTYPE_INT8 ? dnnl_s8 : dnnl_s32;
}

/* The attribute (user scratchpad, X's zero point given at run time) and
 * the primitive descriptor of desc. */
static kiln_status make_pd(const kn_node *n, const void *desc, bool zp, const char *what,
                           dnnl_primitive_desc_t *pd) {
    dnnl_primitive_attr_t attr;
    KN_TRY(kf_attr(n, NULL, &attr));
    kiln_status st = KILN_OK;
    if (zp) {
        const int32_t rt = DNNL_RUNTIME_S32_VAL;
        st = kf_check(n, dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &rt),
                      "setting the source zero point");
    }
    dnnl_engine_t eng;
    if (st == KILN_OK)
        st = kf_engine(n, &eng);
    if (st == KILN_OK)
        st = kf_check(n, dnnl_primitive_desc_create(pd, desc, attr, eng, NULL), what);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

/* X's zero point as a one-element s32 memory the primitive reads. */
static kiln_status zp_arg(const kn_node *n, kq_inst *q, const kb_tensor *in, int n_in, kf_prim *p) {
    if (n_in <= KN_QL_XZ || !in[KN_QL_XZ].host)
        return KILN_OK;
    q->zp = kn_aligned_alloc(64);
    if (!q->zp)
        return KILN_ERR_OUT_OF_MEMORY;
    q->zp[0] = (int32_t)kb_ld(in[KN_QL_XZ].host, in[KN_QL_XZ].dtype, 0);
    dnnl_engine_t eng;
    KN_TRY(kf_engine(n, &eng));
    dnnl_memory_desc_t md;
    dnnl_dims_t one = {1};
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&md, 1, one, dnnl_s32, dnnl_x));
    kf_inst *k = q->k;
    if (k->n_mem == KF_MAX_MEM)
        return kn_node_error(n, KILN_ERR_INTERNAL, "too many oneDNN memories");
    dnnl_memory_t m;
    KF_TRY(n, dnnl_memory_create(&m, &md, eng, q->zp));
    k->mem[k->n_mem].m = m;
    k->mem[k->n_mem].where = KF_OWNED;
    k->mem[k->n_mem].index = 0;
    k->mem[k->n_mem].offset = 0;
    k->n_mem++;
    kf_prim_arg(p, DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, m);
    return KILN_OK;
}

static bool xz_nonzero(const kb_tensor *in, int n_in) {
    return n_in > KN_QL_XZ && in[KN_QL_XZ].host &&
           kb_ld(in[KN_QL_XZ].host, in[KN_QL_XZ].dtype, 0) != 0.0;
}

/* ---------------- convolution ---------------- */

bool kq_dnnl_conv_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                           int n_out) {
    if (n_out < 1 || !common_ok(in, n_in))
        return false;
    int r = in[KN_QL_X].rank;
    if (kq_channels_last(node) && r != 4)
        return false;
    return (r == 3 || r == 4) && in[KN_QL_W].rank == r && out[0].rank == r;
}

static kiln_status conv_build(const kn_node *n, const kb_tensor *in, int n_in, const kb_tensor *out,
                              kq_inst *q) {
    kb_conv cv;
    KN_TRY(kq_conv_geom(n, in, &cv));
    bool cl = kq_channels_last(n);
    if (cl && cv.w.nsp != 2)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "channels-last 2-D convolutions only");
    const kn_window *w = &cv.w;
    int nsp = w->nsp;
    if (nsp != 1 && nsp != 2)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "1-D or 2-D convolutions only");
    int o = 2 - nsp; /* a 1-D convolution has H = 1 */
    int64_t kh = nsp == 2 ? w->kernel[0] : 1, kw = w->kernel[nsp - 1];
    int64_t ih = nsp == 2 ? w->in[0] : 1, iw = w->in[nsp - 1];
    int64_t oh = nsp == 2 ? w->out[0] : 1, ow = w->out[nsp - 1];
    dnnl_dims_t strides = {1, 1}, dil = {0, 0}, pl = {0, 0}, pr = {0, 0};
    for (int i = 0; i < nsp; i++) {
        strides[i + o] = w->stride[i];
        dil[i + o] = w->dil[i] - 1;
        pl[i + o] = w->pad0[i];
        pr[i + o] = w->pad1[i];
    }
    int64_t g = cv.group, m = cv.cout, c = cv.cin;
    dnnl_dims_t xd = {cv.batch, c, ih, iw}, yd = {cv.batch, m, oh, ow};
    dnnl_data_type_t xt = dt_of(in[KN_QL_X].dtype);
    dnnl_memory_desc_t x_u, x_c, y_c, w_u, w_any;
    if (g == 1) {
        dnnl_dims_t wd = {m, c, kh, kw};
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_u, 4, wd, dnnl_s8, dnnl_oihw));
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_s8, dnnl_format_tag_any));
    } else {
        dnnl_dims_t wd = {g, m / g, c / g, kh, kw};
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_u, 5, wd, dnnl_s8, dnnl_goihw));
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_any, 5, wd, dnnl_s8, dnnl_format_tag_any));
    }
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&x_u, 4, xd, xt, cl ? dnnl_nhwc : dnnl_nchw));
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&x_c, 4, xd, xt, dnnl_nhwc));
    KF_TRY(n, dnnl_memory_desc_init_by_tag(&y_c, 4, yd, dnnl_s32, dnnl_nhwc));
    dnnl_convolution_desc_t cd;
    KF_TRY(n, dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                         dnnl_convolution_direct, &x_c, &w_any,
                                                         NULL, &y_c, strides, dil, pl, pr));
    bool zp = xz_nonzero(in, n_in);
    dnnl_primitive_desc_t pd;
    KN_TRY(make_pd(n, &cd, zp, "creating the INT8 convolution", &pd));
    dnnl_memory_desc_t w_p = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    kf_inst *k = q->k;
    dnnl_memory_t xm, xc, wm, ym;
    kiln_status st = kf_pack(n, k, &w_u, KN_QL_W, in[KN_QL_W].host, &w_p, &wm);
    if (st == KILN_OK)
        st = kf_mem(n, k, &x_u, KF_IN, KN_QL_X, 0, &xm);
    xc = xm;
    if (st == KILN_OK && !cl)
        st = kf_mem(n, k, &x_c, KF_WS, 0, kf_ws_reserve(k, dnnl_memory_desc_get_size(&x_c)), &xc);
    if (st == KILN_OK && !cl)
        st = kf_reorder_add(n, k, &x_u, xm, &x_c, xc);
    if (st == KILN_OK) {
        q->acc_off = kf_ws_reserve(k, dnnl_memory_desc_get_size(&y_c));
        st = kf_mem(n, k, &y_c, KF_WS, 0, q->acc_off, &ym);
    }
    if (st != KILN_OK) {
        dnnl_primitive_desc_destroy(pd);
        return st;
    }
    kf_prim *p;
    KN_TRY(kf_prim_add(n, k, pd, &p));
    kf_prim_arg(p, DNNL_ARG_SRC, xc);
    kf_prim_arg(p, DNNL_ARG_WEIGHTS, wm);
    kf_prim_arg(p, DNNL_ARG_DST, ym);
    if (zp)
        KN_TRY(zp_arg(n, q, in, n_in, p));
    q->epi_off = kf_ws_reserve(k, kq_epi_bytes(m));
    q->batch = cv.batch;
    q->cout = m;
    q->spatial = oh * ow;
    q->cl = cl;
    (void)out;
    return KILN_OK;
}

/* What supports() checks, again on the tensors prepare sees (a plan's
 * tactic is bound without it). */
static kiln_status prep_check(const kn_node *n, const kb_tensor *in, int n_in) {
    kn_tinfo ti[KN_QL_N_IN];
    int k = n_in < KN_QL_N_IN ? n_in : KN_QL_N_IN;
    kb_tinfo_types(in, k, ti);
    if (!kq_dnnl_exact())
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "tactic dnnl_int8 needs a CPU with VNNI or AMX (this one's oneDNN "
                             "ISA 0x%x sums int8 products in 16 bits); rebuild the plan here",
                             (unsigned)dnnl_get_effective_cpu_isa());
    if (!common_ok(ti, k))
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "oneDNN INT8 needs int8 W without zero points and a constant X zero "
                             "point");
    return KILN_OK;
}

typedef kiln_status (*build_fn)(const kn_node *n, const kb_tensor *in, int n_in,
                                const kb_tensor *out, kq_inst *q);

static kiln_status prepare(build_fn fn, const kn_node *n, const kb_tensor *in, int n_in,
                           const kb_tensor *out, void **inst, size_t *workspace) {
    KN_TRY(prep_check(n, in, n_in));
    kq_inst *q = kn_calloc(1, sizeof *q);
    if (!q)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kf_inst_new(n, &q->k);
    if (st == KILN_OK)
        st = fn(n, in, n_in, out, q);
    if (st != KILN_OK) {
        kq_dnnl_release(q);
        return st;
    }
    *inst = q;
    *workspace = q->k->ws;
    return KILN_OK;
}

kiln_status kq_dnnl_conv_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                 int n_in, const kb_tensor *out, int n_out, void **inst,
                                 size_t *workspace) {
    (void)state, (void)n_out;
    return prepare(conv_build, node, in, n_in, out, inst, workspace);
}

/* The oneDNN primitives, then the epilogue setup; *acc gets the sums. */
static kiln_status run_sums(const kb_run *r, kq_epi *e, const int32_t **acc) {
    const kq_inst *q = r->inst;
    if (!q)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "not prepared");
    kb_run sub = *r;
    sub.inst = q->k;
    KN_TRY(kf_run(&sub));
    uint8_t *ws = r->workspace;
    KN_TRY(kq_epi_setup(r, q->cout, ws + q->epi_off, e));
    *acc = (const int32_t *)(ws + q->acc_off);
    return KILN_OK;
}

kiln_status kq_dnnl_conv_run(const kb_run *r) {
    kq_epi e;
    const int32_t *acc;
    KN_TRY(run_sums(r, &e, &acc));
    const kq_inst *q = r->inst;
    int64_t s = q->spatial, m = q->cout;
    if (q->cl) /* NHWC sums into NHWC Y: rows of channels */
        kq_epi_apply(&e, acc, 1, m, 0, m, q->batch * s, r->out[0].data, 0, 1, m, r->threads);
    else
        for (int64_t b = 0; b < q->batch; b++)
            kq_epi_apply(&e, acc + b * s * m, 1, m, 0, m, s, r->out[0].data, b * m * s, s, 1,
                         r->threads);
    return KILN_OK;
}

/* ---------------- matmul ---------------- */

bool kq_dnnl_matmul_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                             int n_out) {
    if (n_out < 1 || !common_ok(in, n_in))
        return false;
    const kn_tinfo *x = &in[KN_QL_X], *w = &in[KN_QL_W];
    if (x->rank < 2 || w->rank < 2 || x->rank > 4)
        return false;
    if (w->rank == 2 || kn_numel(w->rank - 2, w->dims) == 1)
        return true;
    /* W batched like X */
    return w->rank == x->rank && memcmp(w->dims, x->dims, sizeof(int64_t) * (size_t)(x->rank - 2)) == 0 &&
           kn_attr_int(node, "trans_b", 0) == 0;
}

static kiln_status matmul_build(const kn_node *n, const kb_tensor *in, int n_in,
                                const kb_tensor *out, kq_inst *q) {
    const kb_tensor *x = &in[KN_QL_X], *w = &in[KN_QL_W];
    bool tb = kn_attr_int(n, "trans_b", 0) != 0;
    int64_t kk = x->dims[x->rank - 1], mm = x->dims[x->rank - 2];
    int64_t nn = w->dims[w->rank - (tb ? 2 : 1)];
    int64_t batch = kn_numel(x->rank - 2, x->dims);
    bool wb = w->rank > 2 && kn_numel(w->rank - 2, w->dims) > 1;
    dnnl_data_type_t xt = dt_of(x->dtype);
    dnnl_memory_desc_t x_md, w_u, w_md, y_md;
    if (!wb) { /* [batch * M, K] x [K, N] */
        dnnl_dims_t xd = {batch * mm, kk}, wd = {kk, nn}, yd = {batch * mm, nn};
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&x_md, 2, xd, xt, dnnl_ab));
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_u, 2, wd, dnnl_s8, tb ? dnnl_ba : dnnl_ab));
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_md, 2, wd, dnnl_s8,
                                               w->host ? dnnl_format_tag_any : (tb ? dnnl_ba : dnnl_ab)));
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&y_md, 2, yd, dnnl_s32, dnnl_ab));
    } else {
        dnnl_dims_t xd = {batch, mm, kk}, wd = {batch, kk, nn}, yd = {batch, mm, nn};
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&x_md, 3, xd, xt, dnnl_abc));
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&w_u, 3, wd, dnnl_s8, dnnl_abc));
        w_md = w_u;
        KF_TRY(n, dnnl_memory_desc_init_by_tag(&y_md, 3, yd, dnnl_s32, dnnl_abc));
    }
    dnnl_matmul_desc_t md;
    KF_TRY(n, dnnl_matmul_desc_init(&md, &x_md, &w_md, NULL, &y_md));
    bool zp = xz_nonzero(in, n_in);
    dnnl_primitive_desc_t pd;
    KN_TRY(make_pd(n, &md, zp, "creating the INT8 matmul", &pd));
    kf_inst *k = q->k;
    dnnl_memory_t xm, wm, ym;
    kiln_status st;
    if (w->host && !wb) {
        dnnl_memory_desc_t w_p = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        st = kf_pack(n, k, &w_u, KN_QL_W, w->host, &w_p, &wm);
    } else {
        st = kf_mem(n, k, &w_u, KF_IN, KN_QL_W, 0, &wm);
    }
    if (st == KILN_OK)
        st = kf_mem(n, k, &x_md, KF_IN, KN_QL_X, 0, &xm);
    if (st == KILN_OK) {
        q->acc_off = kf_ws_reserve(k, dnnl_memory_desc_get_size(&y_md));
        st = kf_mem(n, k, &y_md, KF_WS, 0, q->acc_off, &ym);
    }
    if (st != KILN_OK) {
        dnnl_primitive_desc_destroy(pd);
        return st;
    }
    kf_prim *p;
    KN_TRY(kf_prim_add(n, k, pd, &p));
    kf_prim_arg(p, DNNL_ARG_SRC, xm);
    kf_prim_arg(p, DNNL_ARG_WEIGHTS, wm);
    kf_prim_arg(p, DNNL_ARG_DST, ym);
    if (zp)
        KN_TRY(zp_arg(n, q, in, n_in, p));
    q->epi_off = kf_ws_reserve(k, kq_epi_bytes(nn));
    q->batch = 1;
    q->cout = nn;
    q->spatial = batch * mm;
    (void)out;
    return KILN_OK;
}

kiln_status kq_dnnl_matmul_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                   int n_in, const kb_tensor *out, int n_out, void **inst,
                                   size_t *workspace) {
    (void)state, (void)n_out;
    return prepare(matmul_build, node, in, n_in, out, inst, workspace);
}

kiln_status kq_dnnl_matmul_run(const kb_run *r) {
    kq_epi e;
    const int32_t *acc;
    KN_TRY(run_sums(r, &e, &acc));
    const kq_inst *q = r->inst;
    int64_t rows = q->spatial, nn = q->cout;
    kq_epi_apply(&e, acc, 1, nn, 0, nn, rows, r->out[0].data, 0, 1, nn, r->threads);
    return KILN_OK;
}
#else
#include "k_int8.h"
bool kq_dnnl_exact(void) {
    return false;
}
#endif /* KILN_HAVE_DNNL */
