/* test_attention_views.c - kiln::Attention and RotaryEmbedding reading
 * strided operand views (graph/fused.h, graph/rotary.h): the CPU kernels
 * against a naive computation over packed grouped-query projections and
 * heads-first K/V, and the views pass (pass_views.c) taking the Split and
 * Transpose copies out of a llama-style block without changing its outputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"
#include "builder/passes.h"
#include "graph/fused.h"
#include "kiln/kiln_builder.h"
#include "test.h"
#include "kt_exec.h"
#include "kt_passes.h"

enum { B = 2, SQ = 5, HQ = 4, HKV = 2, D = 8, HX = HQ + 2 * HKV };

static int add_node(kiln_network *net, const char *name, const char *op, const char *domain,
                    int opset, int n_in, const char *const *in, const char *out) {
    int idx = -1;
    const char *outs[1] = {out};
    KT_OK(kiln_network_add_node(net, name, op, domain, opset, n_in, in, 1, outs, &idx));
    return idx;
}

static void fill(float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        v[i] = frand();
}

/* softmax(scale Q K^T + M) V for one (b, h, i), Q/K/V read through views. */
static void naive_row(const float *q, const kn_att_view *qv, const float *k, const kn_att_view *kv,
                      const float *v, const kn_att_view *vv, const float *mask, int causal,
                      float scale, int64_t b, int64_t h, int64_t i, double *out) {
    int64_t sk = kv->s, kh = h / (qv->h / kv->h);
    double p[64], mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < sk; j++) {
        double dot = 0;
        for (int64_t d = 0; d < qv->d; d++)
            dot += (double)q[qv->off + b * qv->sb + i * qv->ss + h * qv->sh + d] *
                   k[kv->off + b * kv->sb + j * kv->ss + kh * kv->sh + d];
        p[j] = scale * dot + (mask ? mask[b * sk + j] : 0.0);
        if (causal && j > i + sk - qv->s)
            p[j] = -INFINITY;
        mx = p[j] > mx ? p[j] : mx;
    }
    for (int64_t j = 0; j < sk; j++)
        sum += p[j] = exp(p[j] - mx);
    for (int64_t e = 0; e < vv->d; e++) {
        double acc = 0;
        for (int64_t j = 0; j < sk; j++)
            acc += p[j] * v[vv->off + b * vv->sb + j * vv->ss + kh * vv->sh + e];
        out[e] = acc / sum;
    }
}

/* One kiln::Attention over (a) one packed [B, S, Hq + 2 Hkv, D] tensor
 * read three ways, or (b) packed Q with heads-first K/V caches of another
 * length, causal; the reference kernel against naive_row. */
static void test_attention_kernel(void) {
    for (int form = 0; form < 2; form++) {
        const int64_t sk = form ? 7 : SQ;
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "p", KILN_DTYPE_FLOAT, 4, DIMS(B, SQ, HX, D), NULL));
        if (form) {
            KT_OK(kiln_network_add_input(net, "kc", KILN_DTYPE_FLOAT, 4, DIMS(B, HKV, sk, D), NULL));
            KT_OK(kiln_network_add_input(net, "vc", KILN_DTYPE_FLOAT, 4, DIMS(B, HKV, sk, D), NULL));
        } else {
            KT_OK(kiln_network_add_input(net, "m", KILN_DTYPE_FLOAT, 4, DIMS(B, 1, 1, SQ), NULL));
        }
        int a = form ? add_node(net, "att", "Attention", KN_DOMAIN_KILN, 1, 3, IN("p", "kc", "vc"), "y")
                     : add_node(net, "att", "Attention", KN_DOMAIN_KILN, 1, 4, IN("p", "p", "p", "m"), "y");
        const int64_t lay[2][3] = {{0, 0, 0}, {0, 1, 1}}, off[2][3] = {{0, HQ, HQ + HKV}, {0, 0, 0}},
                      hs[3] = {HQ, HKV, HKV};
        KT_OK(kiln_network_set_attr_ints(net, a, "layouts", lay[form], 3));
        KT_OK(kiln_network_set_attr_ints(net, a, "head_offsets", off[form], 3));
        KT_OK(kiln_network_set_attr_ints(net, a, "heads", form ? DIMS(HQ, 0, 0) : hs, 3));
        KT_OK(kiln_network_set_attr_float(net, a, "scale", 0.35f));
        KT_OK(kiln_network_set_attr_int(net, a, "causal", form));
        KT_OK(kiln_network_mark_output(net, "y"));
        float p[B * SQ * HX * D], kc[B * HKV * 7 * D], vc[B * HKV * 7 * D], m[B * SQ];
        fill(p, B * SQ * HX * D);
        fill(kc, B * HKV * sk * D);
        fill(vc, B * HKV * sk * D);
        fill(m, B * SQ);
        const void *data[3] = {p, form ? (const void *)kc : m, vc};
        int rank[3] = {4, 4, 4};
        int64_t dims[3][KILN_MAX_DIMS] = {{B, SQ, HX, D}, {B, HKV, sk, D}, {B, HKV, sk, D}};
        if (!form)
            memcpy(dims[1], DIMS(B, 1, 1, SQ), 4 * sizeof(int64_t));
        kt_exec e;
        kiln_status st = kt_exec_run(&e, net, data, rank, (const int64_t (*)[KILN_MAX_DIMS])dims);
        KT_OK(st);
        if (st == KILN_OK) {
            kn_tinfo yt;
            const float *y = kt_exec_output(&e, 0, &yt);
            KT_CHECK(yt.rank == 4 && yt.dims[0] == B && yt.dims[1] == SQ && yt.dims[2] == HQ &&
                     yt.dims[3] == D);
            kn_att_view q = {B, SQ, HQ, D, 0, SQ * HX * D, HX * D, D}, kv, vv;
            if (form) {
                kv = (kn_att_view){B, sk, HKV, D, 0, HKV * sk * D, D, sk * D};
                vv = kv;
            } else {
                kv = (kn_att_view){B, SQ, HKV, D, HQ * D, SQ * HX * D, HX * D, D};
                vv = kv;
                vv.off = (HQ + HKV) * D;
            }
            double worst = 0, row[D];
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < HQ; h++)
                    for (int64_t i = 0; i < SQ; i++) {
                        naive_row(p, &q, form ? kc : p, &kv, form ? vc : p, &vv, form ? NULL : m,
                                  form, 0.35f, b, h, i, row);
                        for (int64_t c = 0; c < D; c++) {
                            double dd = fabs(row[c] - y[((b * SQ + i) * HQ + h) * D + c]);
                            worst = dd > worst ? dd : worst;
                        }
                    }
            if (worst > 1e-5)
                fprintf(stderr, "  attention views form %d: differs by %g\n", form, worst);
            KT_CHECK(worst <= 1e-5);
        }
        kt_exec_free(&e);
        kiln_network_destroy(net);
    }
}

/* RotaryEmbedding on heads [2, 4) of packed rows [B, S, 8 * D], written as
 * [B, S, 2 * D] and heads-first [B, 2, S, D], against a naive rotation. */
static void test_rotary_kernel(void) {
    for (int first = 0; first < 2; first++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(B, SQ, HX * D), NULL));
        KT_OK(kiln_network_add_input(net, "cos", KILN_DTYPE_FLOAT, 3, DIMS(1, SQ, D / 2), NULL));
        KT_OK(kiln_network_add_input(net, "sin", KILN_DTYPE_FLOAT, 3, DIMS(1, SQ, D / 2), NULL));
        int r = add_node(net, "rope", "RotaryEmbedding", "", 23, 3, IN("x", "cos", "sin"), "y");
        KT_OK(kiln_network_set_attr_int(net, r, "num_heads", 2));
        KT_OK(kiln_network_set_attr_int(net, r, "kiln_row_heads", HX));
        KT_OK(kiln_network_set_attr_int(net, r, "kiln_head_offset", 2));
        if (first)
            KT_OK(kiln_network_set_attr_int(net, r, "kiln_heads_first_out", 1));
        KT_OK(kiln_network_mark_output(net, "y"));
        float x[B * SQ * HX * D], cs[SQ * D / 2], sn[SQ * D / 2];
        fill(x, B * SQ * HX * D);
        fill(cs, SQ * D / 2);
        fill(sn, SQ * D / 2);
        const void *data[3] = {x, cs, sn};
        int rank[3] = {3, 3, 3};
        int64_t dims[3][KILN_MAX_DIMS] = {{B, SQ, HX * D}, {1, SQ, D / 2}, {1, SQ, D / 2}};
        kt_exec e;
        kiln_status st = kt_exec_run(&e, net, data, rank, (const int64_t (*)[KILN_MAX_DIMS])dims);
        KT_OK(st);
        if (st == KILN_OK) {
            kn_tinfo yt;
            const float *y = kt_exec_output(&e, 0, &yt);
            KT_CHECK(first ? yt.rank == 4 && yt.dims[1] == 2 && yt.dims[2] == SQ && yt.dims[3] == D
                           : yt.rank == 3 && yt.dims[2] == 2 * D);
            double worst = 0;
            for (int64_t b = 0; b < B; b++)
                for (int64_t s = 0; s < SQ; s++)
                    for (int64_t h = 0; h < 2; h++)
                        for (int64_t c = 0; c < D; c++) {
                            const float *xr = x + (b * SQ + s) * HX * D + (2 + h) * D;
                            int64_t i = c % (D / 2);
                            double cv = cs[s * D / 2 + i], sv = sn[s * D / 2 + i];
                            double want = c < D / 2 ? cv * xr[c] - sv * xr[c + D / 2]
                                                    : sv * xr[c - D / 2] + cv * xr[c];
                            int64_t at = first ? ((b * 2 + h) * SQ + s) * D + c
                                               : (b * SQ + s) * 2 * D + h * D + c;
                            double dd = fabs(want - y[at]);
                            worst = dd > worst ? dd : worst;
                        }
            if (worst > 1e-5)
                fprintf(stderr, "  rotary views (heads first %d): differs by %g\n", first, worst);
            KT_CHECK(worst <= 1e-5);
        }
        kt_exec_free(&e);
        kiln_network_destroy(net);
    }
}

/* A llama-style block after fusion: one packed grouped-query projection
 * split into Q, K, V, rotary on Q (rows) and K (heads-first), and with
 * `past`, K and V joined to caches heads-first (the present outputs) and
 * transposed back for the attention. The views pass leaves no Split (no
 * past) and no transpose of the caches (past), outputs unchanged. */
static void test_views_pass(void) {
    for (int past = 0; past < 2; past++) {
        rng_state = 99u;
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, SQ, 16), NULL));
        if (past) {
            KT_OK(kiln_network_add_input(net, "pk", KILN_DTYPE_FLOAT, 4, DIMS(-1, HKV, 3, D), NULL));
            KT_OK(kiln_network_add_input(net, "pv", KILN_DTYPE_FLOAT, 4, DIMS(-1, HKV, 3, D), NULL));
        }
        fconst(net, "w", 2, DIMS(16, HX * D), -0.5f, 1.f);
        fconst(net, "cos", 3, DIMS(1, SQ, D / 2), -1.f, 2.f);
        fconst(net, "sin", 3, DIMS(1, SQ, D / 2), -1.f, 2.f);
        iconst(net, "parts", 1, DIMS(3), DIMS(HQ * D, HKV * D, HKV * D));
        iconst(net, "qshape", 1, DIMS(4), DIMS(0, 0, HQ, D));
        iconst(net, "kvshape", 1, DIMS(4), DIMS(0, 0, HKV, D));
        iconst(net, "qrows", 1, DIMS(3), DIMS(0, 0, HQ * D));
        node(net, "proj", "MatMul", 2, IN("x", "w"), "qkv");
        const char *parts[3] = {"q0", "k0", "v0"};
        int sp = -1;
        KT_OK(kiln_network_add_node(net, "split", "Split", "", 18, 2, IN("qkv", "parts"), 3, parts, &sp));
        KT_OK(kiln_network_set_attr_int(net, sp, "axis", -1));
        node(net, "qh", "Reshape", 2, IN("q0", "qshape"), "q1");
        node(net, "kh", "Reshape", 2, IN("k0", "kvshape"), "k1");
        node(net, "vh", "Reshape", 2, IN("v0", "kvshape"), "v1");
        node(net, "qr", "Reshape", 2, IN("q1", "qrows"), "q2");
        int rq = add_node(net, "rope_q", "RotaryEmbedding", "", 23, 3, IN("q2", "cos", "sin"), "q3");
        KT_OK(kiln_network_set_attr_int(net, rq, "num_heads", HQ));
        node(net, "qb", "Reshape", 2, IN("q3", "qshape"), "q");
        int t = node(net, "kt", "Transpose", 1, IN("k1"), "k2");
        KT_OK(kiln_network_set_attr_ints(net, t, "perm", DIMS(0, 2, 1, 3), 4));
        add_node(net, "rope_k", "RotaryEmbedding", "", 23, 3, IN("k2", "cos", "sin"), "k3");
        const char *kin = "k1", *vin = "v1";
        if (past) {
            t = node(net, "vt", "Transpose", 1, IN("v1"), "v2");
            KT_OK(kiln_network_set_attr_ints(net, t, "perm", DIMS(0, 2, 1, 3), 4));
            int c = node(net, "ck", "Concat", 2, IN("pk", "k3"), "present_k");
            KT_OK(kiln_network_set_attr_int(net, c, "axis", 2));
            c = node(net, "cv", "Concat", 2, IN("pv", "v2"), "present_v");
            KT_OK(kiln_network_set_attr_int(net, c, "axis", 2));
            t = node(net, "kb", "Transpose", 1, IN("present_k"), "k");
            KT_OK(kiln_network_set_attr_ints(net, t, "perm", DIMS(0, 2, 1, 3), 4));
            t = node(net, "vb", "Transpose", 1, IN("present_v"), "v");
            KT_OK(kiln_network_set_attr_ints(net, t, "perm", DIMS(0, 2, 1, 3), 4));
            kin = "k";
            vin = "v";
        } else {
            t = node(net, "kb", "Transpose", 1, IN("k3"), "k");
            KT_OK(kiln_network_set_attr_ints(net, t, "perm", DIMS(0, 2, 1, 3), 4));
            kin = "k";
        }
        int a = add_node(net, "att", "Attention", KN_DOMAIN_KILN, 1, 3, IN("q", kin, vin), "y");
        KT_OK(kiln_network_set_attr_float(net, a, "scale", 0.35f));
        KT_OK(kiln_network_mark_output(net, "y"));
        if (past) {
            KT_OK(kiln_network_mark_output(net, "present_k"));
            KT_OK(kiln_network_mark_output(net, "present_v"));
        }
        kn_net *o = optimized(net, 0, 1, 2, 4);
        if (o) {
            const kn_node *at = find_op(o, KN_DOMAIN_KILN, "Attention");
            KT_CHECK(at && kn_attr_find(at, "layouts"));
            /* no past: Q, K and V all read the projection; past: V's part is
             * still copied for its cache (a Slice of that part alone), its
             * Transpose the only one left */
            CHECK_OR_DUMP(count_op(o, "", "Split") == 0, o);
            CHECK_OR_DUMP(count_op(o, "", "Slice") == past, o);
            CHECK_OR_DUMP(count_op(o, "", "Transpose") == past, o);
            compare(net, o, past ? "views, past caches" : "views, packed projection", 3);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* torch's MultiheadAttention: the input transposed sequence-first, one
 * packed projection [S, B, 3E], unflattened, unsqueezed, transposed so the
 * 3 leads, squeezed, and Q, K, V taken by Gathers of indices 0, 1, 2 (the
 * select), each reshaped to [S, B*H, D], transposed and reshaped to
 * [B, H, S, D]. The views pass reads all three from the projection, which
 * reads its input untransposed: no Gather and no Transpose stays. */
static void test_views_select_chain(void) {
    enum { E = 16, H = 2, HD = E / H };
    rng_state = 7u;
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, SQ, E), NULL));
    fconst(net, "w", 2, DIMS(E, 3 * E), -0.5f, 1.f);
    iconst(net, "unflat", 1, DIMS(4), DIMS(0, 0, 3, E));
    iconst(net, "ax0", 1, DIMS(1), DIMS(0));
    iconst(net, "ax3", 1, DIMS(1), DIMS(3));
    iconst(net, "rows", 1, DIMS(3), DIMS(SQ, -1, HD));
    iconst(net, "bhsd", 1, DIMS(4), DIMS(-1, H, SQ, HD));
    int t = node(net, "seq_first", "Transpose", 1, IN("x"), "xt");
    KT_OK(kiln_network_set_attr_ints(net, t, "perm", DIMS(1, 0, 2), 3));
    node(net, "in_proj", "MatMul", 2, IN("xt", "w"), "proj");
    node(net, "unflatten", "Reshape", 2, IN("proj", "unflat"), "p4");
    node(net, "unsq", "Unsqueeze", 2, IN("p4", "ax0"), "p5");
    t = node(net, "lead3", "Transpose", 1, IN("p5"), "p5t");
    KT_OK(kiln_network_set_attr_ints(net, t, "perm", DIMS(3, 1, 2, 0, 4), 5));
    node(net, "sq", "Squeeze", 2, IN("p5t", "ax3"), "p4t");
    static const char *const idx[3] = {"i0", "i1", "i2"}, *const nm[3] = {"q", "k", "v"};
    for (int j = 0; j < 3; j++) {
        int64_t v = j;
        iconst(net, idx[j], 0, NULL, &v);
        char a[32], b[32], c[32], d[32], e[32];
        snprintf(a, sizeof a, "%s_sel", nm[j]);
        snprintf(b, sizeof b, "%s_rows", nm[j]);
        snprintf(c, sizeof c, "%s_bh", nm[j]);
        snprintf(d, sizeof d, "%s_bhsd", nm[j]);
        snprintf(e, sizeof e, "%s", nm[j]);
        node(net, a, "Gather", 2, IN("p4t", idx[j]), a);
        node(net, b, "Reshape", 2, IN(a, "rows"), b);
        t = node(net, c, "Transpose", 1, IN(b), c);
        KT_OK(kiln_network_set_attr_ints(net, t, "perm", DIMS(1, 0, 2), 3));
        node(net, d, "Reshape", 2, IN(c, "bhsd"), d);
        t = node(net, e, "Transpose", 1, IN(d), e);
        KT_OK(kiln_network_set_attr_ints(net, t, "perm", DIMS(0, 2, 1, 3), 4));
    }
    int a = add_node(net, "att", "Attention", KN_DOMAIN_KILN, 1, 3, IN("q", "k", "v"), "y");
    KT_OK(kiln_network_set_attr_float(net, a, "scale", 0.35f));
    KT_OK(kiln_network_mark_output(net, "y"));
    kn_net *o = optimized(net, 0, 1, 2, 4);
    if (o) {
        const kn_node *at = find_op(o, KN_DOMAIN_KILN, "Attention");
        KT_CHECK(at && kn_attr_find(at, "head_offsets"));
        CHECK_OR_DUMP(count_op(o, "", "Gather") == 0, o);
        CHECK_OR_DUMP(count_op(o, "", "Transpose") == 0, o);
        compare(net, o, "views, select chain", 3);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* A gated MLP: one packed GEMM, Split into gate and up, SiLU(gate) * up.
 * The elementwise chain reads both halves as column views of the product:
 * no Split stays, and the outputs do not change. */
static void test_chain_views(void) {
    enum { E = 16, F = 24 };
    rng_state = 11u;
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, SQ, E), NULL));
    fconst(net, "w", 2, DIMS(E, 2 * F), -0.5f, 1.f);
    iconst(net, "halves", 1, DIMS(2), DIMS(F, F));
    node(net, "gate_up", "MatMul", 2, IN("x", "w"), "gu");
    const char *parts[2] = {"g", "u"};
    int sp = -1;
    KT_OK(kiln_network_add_node(net, "split", "Split", "", 18, 2, IN("gu", "halves"), 2, parts, &sp));
    KT_OK(kiln_network_set_attr_int(net, sp, "axis", -1));
    node(net, "sig", "Sigmoid", 1, IN("g"), "sg");
    node(net, "silu", "Mul", 2, IN("g", "sg"), "act");
    node(net, "gated", "Mul", 2, IN("act", "u"), "y");
    KT_OK(kiln_network_mark_output(net, "y"));
    kn_net *o = optimized(net, 0, 1, 2, 4);
    if (o) {
        const kn_node *c = find_op(o, KN_DOMAIN_KILN, "ElementwiseChain");
        KT_CHECK(c && kn_attr_find(c, "views"));
        CHECK_OR_DUMP(count_op(o, "", "Split") == 0, o);
        CHECK_OR_DUMP(count_op(o, "", "Slice") == 0, o);
        compare(net, o, "views, gated MLP chain", 3);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* Views that do not fit the inputs are refused with the node named. */
static void test_views_bad(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "p", KILN_DTYPE_FLOAT, 4, DIMS(B, SQ, HX, D), NULL));
    int a = add_node(net, "att", "Attention", KN_DOMAIN_KILN, 1, 3, IN("p", "p", "p"), "y");
    KT_OK(kiln_network_set_attr_ints(net, a, "head_offsets", DIMS(0, HQ, HX - 1), 3));
    KT_OK(kiln_network_set_attr_ints(net, a, "heads", DIMS(HQ, HKV, HKV), 3));
    KT_OK(kiln_network_mark_output(net, "y"));
    float p[B * SQ * HX * D] = {0};
    const void *data[1] = {p};
    int rank[1] = {4};
    int64_t dims[1][KILN_MAX_DIMS] = {{B, SQ, HX, D}};
    kt_exec e;
    KT_FAILS(kt_exec_run(&e, net, data, rank, (const int64_t (*)[KILN_MAX_DIMS])dims),
             KILN_ERR_SHAPE, "att");
    kt_exec_free(&e);
    kiln_network_destroy(net);
}

int main(void) {
    printf("seed %u (fixed)\n", rng_state);
    test_attention_kernel();
    test_rotary_kernel();
    test_views_pass();
    test_views_select_chain();
    test_chain_views();
    test_views_bad();
    return kt_finish();
}
