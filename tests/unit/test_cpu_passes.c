/* test_cpu_passes.c - the CPU-side passes of issue 35: per-channel affine
 * steps folded into the convolution after them (affine-conv), standalone
 * BatchNormalization as Mul + Add joining the elementwise chain (bn-split),
 * each compared with the unoptimized network through the executor; and the
 * tactic choice under load (kbld_tactic_pick, and a build through a fake
 * per-tactic timing hook: no real timing, deterministic). */
#include <math.h>
#include <string.h>

#include "builder/builder.h"
#include "builder/passes.h"
#include "graph/fused.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_runtime.h"
#include "test.h"
#include "kt_exec.h"

#include "kt_passes.h"

/* Conv name: x[.,cin,.,.] -> y, k x k kernel, pads `pad`, `group` groups. */
static void add_conv(kiln_network *net, const char *name, const char *x, const char *y, int cin,
                     int cout, int k, int pad, int group, bool bias) {
    char w[64], b[64];
    snprintf(w, sizeof w, "%s_W", name);
    snprintf(b, sizeof b, "%s_B", name);
    fconst(net, w, 4, DIMS(cout, cin / group, k, k), -0.5f, 1.f);
    if (bias)
        fconst(net, b, 1, DIMS(cout), -0.5f, 1.f);
    int idx = node(net, name, "Conv", bias ? 3 : 2, IN(x, w, b), y);
    KT_OK(kiln_network_set_attr_ints(net, idx, "pads", (const int64_t[]){pad, pad, pad, pad}, 4));
    KT_OK(kiln_network_set_attr_ints(net, idx, "kernel_shape", (const int64_t[]){k, k}, 2));
    if (group != 1)
        KT_OK(kiln_network_set_attr_int(net, idx, "group", group));
}

static void add_bn(kiln_network *net, const char *name, const char *x, const char *y, int c) {
    char g[64], be[64], mu[64], var[64];
    snprintf(g, sizeof g, "%s_g", name);
    snprintf(be, sizeof be, "%s_beta", name);
    snprintf(mu, sizeof mu, "%s_mean", name);
    snprintf(var, sizeof var, "%s_var", name);
    fconst(net, g, 1, DIMS(c), 0.5f, 1.f);
    fconst(net, be, 1, DIMS(c), -0.5f, 1.f);
    fconst(net, mu, 1, DIMS(c), -0.5f, 1.f);
    fconst(net, var, 1, DIMS(c), 0.5f, 1.f);
    int bn = node(net, name, "BatchNormalization", 5, IN(x, g, be, mu, var), y);
    KT_OK(kiln_network_set_attr_float(net, bn, "epsilon", 1e-3f));
}

/* Mul by a per-channel [C,1,1] constant, then Add of one, then an unpadded
 * 1x1 Conv (and a grouped 3x3 one): both fold into the weights and bias;
 * the network becomes one convolution per conv. */
static void test_affine_before_unpadded_conv(void) {
    for (int grouped = 0; grouped < 2; grouped++) {
        kiln_network *net;
        KT_OK(kiln_network_create(&net));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(1, 4, 5, 5), NULL));
        fconst(net, "s", 3, DIMS(4, 1, 1), 0.5f, 1.f);
        fconst(net, "t", 3, DIMS(4, 1, 1), -0.5f, 1.f);
        node(net, "mul", "Mul", 2, IN("x", "s"), "a");
        node(net, "add", "Add", 2, IN("t", "a"), "b"); /* constant on the left */
        add_conv(net, "conv", "b", "y", 4, 6, grouped ? 3 : 1, 0, grouped ? 2 : 1, true);
        KT_OK(kiln_network_mark_output(net, "y"));
        kn_net *o = optimized(net, 0, 1, 1, 1);
        if (o) {
            CHECK_OR_DUMP(o->n_nodes == 1 && count_op(o, "", "Mul") == 0 &&
                              count_op(o, "", "Add") == 0,
                          o);
            compare(net, o, grouped ? "mul+add before grouped conv" : "mul+add before 1x1 conv", 1);
            kn_net_free(o);
        }
        kiln_network_destroy(net);
    }
}

/* Before a padded conv only the scale folds: the shift would be wrong at the
 * zero border, so the Add stays (here Sub by a scalar and Div by channel). */
static void test_affine_before_padded_conv(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(1, 3, 6, 6), NULL));
    fconst(net, "t", 0, NULL, 0.25f, 0.5f);
    fconst(net, "d", 4, DIMS(1, 3, 1, 1), 0.5f, 1.f);
    node(net, "sub", "Sub", 2, IN("x", "t"), "a");
    node(net, "div", "Div", 2, IN("a", "d"), "b");
    add_conv(net, "conv", "b", "y", 3, 4, 3, 1, 1, false);
    KT_OK(kiln_network_mark_output(net, "y"));
    kn_net *o = optimized(net, 0, 1, 1, 1);
    if (o) {
        /* Div folded (scale), Sub kept (shift before padding) */
        CHECK_OR_DUMP(count_op(o, "", "Div") == 0 && count_op(o, "", "Sub") == 1 &&
                          count_op(o, "", "Conv") + count_op(o, KN_DOMAIN_KILN, "Conv") == 1,
                      o);
        compare(net, o, "sub+div before padded conv", 1);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* A BN straight before an unpadded conv folds into it whole (as Mul + Add);
 * a second reader of the BN input does not stop it. */
static void test_bn_before_conv(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(1, 4, 5, 5), NULL));
    add_bn(net, "bn", "x", "b", 4);
    add_conv(net, "conv", "b", "y", 4, 3, 1, 0, 1, true);
    node(net, "neg", "Neg", 1, IN("x"), "y2");
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kiln_network_mark_output(net, "y2"));
    kn_net *o = optimized(net, 0, 1, 1, 1);
    if (o) {
        CHECK_OR_DUMP(count_op(o, "", "BatchNormalization") == 0 && count_op(o, "", "Mul") == 0 &&
                          count_op(o, "", "Add") == 0 && o->n_nodes == 2,
                      o);
        compare(net, o, "bn before 1x1 conv", 1);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* DenseNet's BN -> Relu -> Conv: the BN cannot fold (a Relu stands
 * between), so it joins the Relu as one elementwise chain; no standalone BN
 * layer. Also at a dynamic batch. */
static void test_bn_relu_chain(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(-1, 4, 6, 6), NULL));
    add_bn(net, "bn", "x", "b", 4);
    node(net, "relu", "Relu", 1, IN("b"), "r");
    add_conv(net, "conv", "r", "y", 4, 5, 3, 1, 1, true);
    KT_OK(kiln_network_mark_output(net, "y"));
    kn_net *o = optimized(net, 0, 1, 2, 4);
    if (o) {
        CHECK_OR_DUMP(o->n_nodes == 2 && count_op(o, "", "BatchNormalization") == 0 &&
                          count_op(o, KN_DOMAIN_KILN, "ElementwiseChain") == 1,
                      o);
        compare(net, o, "bn+relu chain (batch 1)", 1);
        compare(net, o, "bn+relu chain (batch 3)", 3);
        kn_net_free(o);
    }
    /* fusion off: the BN stays a BN */
    o = optimized(net, KILN_BUILDER_FLAG_NO_FUSION, 1, 2, 4);
    if (o) {
        CHECK_OR_DUMP(count_op(o, "", "BatchNormalization") == 1, o);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* A BN after a conv still folds into that conv (pass_conv_bn.c, first);
 * a BN on a rank-2 input, and one whose input is a graph input read twice,
 * still compute the same. */
static void test_bn_other_ranks(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, DIMS(3, 5), NULL));
    add_bn(net, "bn", "x", "b", 5);
    node(net, "sig", "Sigmoid", 1, IN("b"), "y");
    node(net, "abs", "Abs", 1, IN("x"), "y2");
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kiln_network_mark_output(net, "y2"));
    kn_net *o = optimized(net, 0, 1, 1, 1);
    if (o) {
        CHECK_OR_DUMP(count_op(o, "", "BatchNormalization") == 0, o);
        compare(net, o, "rank-2 bn", 1);
        kn_net_free(o);
    }
    kiln_network_destroy(net);

    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(1, 3, 6, 6), NULL));
    add_conv(net, "conv", "x", "c", 3, 4, 3, 1, 1, true);
    add_bn(net, "bn", "c", "y", 4);
    KT_OK(kiln_network_mark_output(net, "y"));
    o = optimized(net, 0, 1, 1, 1);
    if (o) {
        CHECK_OR_DUMP(o->n_nodes == 1 && count_op(o, "", "Mul") == 0, o);
        compare(net, o, "conv+bn", 1);
        kn_net_free(o);
    }
    kiln_network_destroy(net);
}

/* ---------------- Concat in place (runtime/exec.c) ---------------- */

/* Whether tensor `name` of the executed net lies at `bytes` into tensor
 * `owner` in the arena. */
static bool at_offset(const kt_exec *e, const char *name, const char *owner, size_t bytes) {
    int t = kn_net_find(e->net, name), o = kn_net_find(e->net, owner);
    if (t < 0 || o < 0 || e->c.offset[t] == SIZE_MAX || e->c.offset[o] == SIZE_MAX)
        return false;
    return e->c.offset[t] == e->c.offset[o] + bytes;
}

static int n_inplace(const kt_exec *e) {
    int k = 0;
    for (int si = 0; si < e->p.n_steps; si++)
        k += e->c.inplace[si];
    return k;
}

/* DenseNet's pattern: c1 = Concat(x0, f(x0)), c2 = Concat(c1, g(c1)) along
 * the channels at batch 1: the producers write into c2's bytes (c1 itself a
 * slice of it), no Concat runs, and the outputs equal a run with the
 * copies (KILN_NO_CONCAT_IN_PLACE). At batch 2 the slices are not
 * contiguous: the Concats run. A slice off the 256-byte alignment (3
 * channels of 3x3) keeps its copy. */
static void test_concat_in_place(void) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(-1, 3, 8, 8), NULL));
    add_conv(net, "c0", "x", "x0", 3, 4, 1, 0, 1, true);
    add_conv(net, "f", "x0", "f0", 4, 4, 3, 1, 1, true);
    int n1 = node(net, "cat1", "Concat", 2, IN("x0", "f0"), "c1");
    KT_OK(kiln_network_set_attr_int(net, n1, "axis", 1));
    node(net, "relu", "Relu", 1, IN("c1"), "r1");
    add_conv(net, "g", "r1", "g0", 8, 4, 3, 1, 1, true);
    int n2 = node(net, "cat2", "Concat", 2, IN("c1", "g0"), "c2");
    KT_OK(kiln_network_set_attr_int(net, n2, "axis", -3));
    add_conv(net, "h", "c2", "y", 12, 2, 1, 0, 1, true);
    KT_OK(kiln_network_mark_output(net, "y"));
    kn_net *ref = NULL;
    KT_OK(kn_net_toposort(net));
    KT_OK(kn_net_clone(net, &ref));
    for (int64_t batch = 1; ref && batch <= 2; batch++) {
        run_in ri;
        float *bufs[4] = {0};
        make_inputs(ref, &ri, bufs, batch);
        kt_exec a, b;
        setenv("KILN_NO_CONCAT_IN_PLACE", "1", 1);
        kiln_status sa = kt_exec_run(&a, ref, ri.data, ri.rank, (const int64_t (*)[KILN_MAX_DIMS])ri.dims);
        unsetenv("KILN_NO_CONCAT_IN_PLACE");
        kiln_status sb = kt_exec_run(&b, ref, ri.data, ri.rank, (const int64_t (*)[KILN_MAX_DIMS])ri.dims);
        KT_OK(sa);
        KT_OK(sb);
        if (sa == KILN_OK && sb == KILN_OK) {
            KT_CHECK(n_inplace(&a) == 0);
            size_t ch = 4 * 8 * 8 * sizeof(float);
            if (batch == 1) {
                KT_CHECK(n_inplace(&b) == 2);
                KT_CHECK(at_offset(&b, "x0", "c2", 0) && at_offset(&b, "f0", "c2", ch) &&
                         at_offset(&b, "c1", "c2", 0) && at_offset(&b, "g0", "c2", 2 * ch));
            } else {
                KT_CHECK(n_inplace(&b) == 0);
            }
            kn_tinfo ta, tb;
            const float *ya = kt_exec_output(&a, 0, &ta), *yb = kt_exec_output(&b, 0, &tb);
            int64_t nn = kn_numel(ta.rank, ta.dims);
            bool same = ya && yb && kn_numel(tb.rank, tb.dims) == nn;
            for (int64_t i = 0; same && i < nn; i++)
                same = ya[i] == yb[i];
            KT_CHECK(same);
            if (!same)
                fprintf(stderr, "  concat in place, batch %lld: outputs differ\n", (long long)batch);
        }
        kt_exec_free(&a);
        kt_exec_free(&b);
        for (int k = 0; k < 4; k++)
            free(bufs[k]);
    }
    kn_net_free(ref);
    kiln_network_destroy(net);

    /* 3 channels of 3x3 floats: 108 bytes, off the alignment: a copy */
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(1, 2, 3, 3), NULL));
    add_conv(net, "a", "x", "a0", 2, 3, 1, 0, 1, true);
    add_conv(net, "b", "x", "b0", 2, 3, 1, 0, 1, true);
    int n3 = node(net, "cat", "Concat", 2, IN("a0", "b0"), "c");
    KT_OK(kiln_network_set_attr_int(net, n3, "axis", 1));
    node(net, "sig", "Sigmoid", 1, IN("c"), "y");
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kn_net_toposort(net));
    ref = NULL;
    KT_OK(kn_net_clone(net, &ref));
    if (ref) {
        run_in ri;
        float *bufs[4] = {0};
        make_inputs(ref, &ri, bufs, 1);
        kt_exec b;
        KT_OK(kt_exec_run(&b, ref, ri.data, ri.rank, (const int64_t (*)[KILN_MAX_DIMS])ri.dims));
        KT_CHECK(n_inplace(&b) == 0);
        kt_exec_free(&b);
        for (int k = 0; k < 4; k++)
            free(bufs[k]);
        kn_net *o = optimized(net, 0, 1, 1, 1);
        if (o) {
            compare(net, o, "unaligned concat", 1);
            kn_net_free(o);
        }
        kn_net_free(ref);
    }
    kiln_network_destroy(net);
}

/* ---------------- tactic choice ---------------- */

static void test_tactic_pick(void) {
    /* candidates: 0 = ref, 1 = fast A, 2 = default (registered last) */
    const double m = KBLD_TACTIC_MARGIN;
    /* ref 5% faster in both rounds: under the margin, the default stays */
    double a[] = {0.95, 1.2, 1.0, 0.95, 1.2, 1.0};
    KT_CHECK(kbld_tactic_pick(3, 2, a, 2, m) == 2);
    /* ref 2x faster in round 1 only (load hit the others): default */
    double b[] = {0.5, 1.2, 1.0, 1.3, 1.2, 1.0};
    KT_CHECK(kbld_tactic_pick(3, 2, b, 2, m) == 2);
    /* ref 2x faster in both rounds: ref */
    double c[] = {0.5, 1.2, 1.0, 0.5, 1.2, 1.0};
    KT_CHECK(kbld_tactic_pick(3, 2, c, 2, m) == 0);
    /* two beat the default by the margin: the one with the better worst round */
    double d[] = {0.8, 0.6, 1.0, 0.7, 0.85, 1.0};
    KT_CHECK(kbld_tactic_pick(3, 2, d, 2, m) == 0);
    /* the default could not run: the fastest that ran every round */
    double e[] = {2.0, 1.0, -1, 2.0, -1, -1};
    KT_CHECK(kbld_tactic_pick(3, 2, e, 2, m) == 0);
    double f[] = {-1, -1, -1, -1, -1, -1};
    KT_CHECK(kbld_tactic_pick(3, 2, f, 2, m) == -1);
    /* one candidate */
    double g[] = {3.0, 3.0};
    KT_CHECK(kbld_tactic_pick(1, 2, g, 0, m) == 0);
}

/* fake times per tactic and round; `ref_ms[r]` for the reference kernel,
 * 1.0 for every other; counts the calls per round */
static double ref_ms[KBLD_TACTIC_ROUNDS];
static int calls[KBLD_TACTIC_ROUNDS];
static char order[64][32];
static int n_order;

static kiln_status fake_tactic_time(const kn_node *n, const char *tactic, int round,
                                    double *ms) {
    (void)n;
    if (round >= 0 && round < KBLD_TACTIC_ROUNDS)
        calls[round]++;
    if (n_order < 64)
        snprintf(order[n_order++], sizeof order[0], "%d:%s", round, tactic);
    *ms = strcmp(tactic, "ref") == 0 ? ref_ms[round] : 1.0;
    return KILN_OK;
}

/* Build x -> Conv -> y with the fake hook; the Conv layer's tactic. */
static void conv_tactic(char *out, size_t size) {
    kiln_network *net;
    out[0] = 0;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 4, DIMS(1, 8, 8, 8), NULL));
    add_conv(net, "conv", "x", "y", 8, 8, 3, 1, 1, true);
    KT_OK(kiln_network_mark_output(net, "y"));
    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    void *plan = NULL;
    size_t sz = 0;
    memset(calls, 0, sizeof calls);
    n_order = 0;
    kiln_status st = kiln_build_serialized(net, cfg, &plan, &sz);
    KT_OK(st);
    kiln_engine *e = NULL;
    if (st == KILN_OK && kiln_engine_load(plan, sz, &e) == KILN_OK) {
        for (int i = 0; i < kiln_engine_num_layers(e); i++)
            if (strstr(kiln_engine_layer_op(e, i), "Conv"))
                snprintf(out, size, "%s", kiln_engine_layer_tactic(e, i));
    }
    kiln_engine_destroy(e);
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
}

static void test_tactic_build(void) {
    char t[64];
    kbld_tactic_time_hook = fake_tactic_time;
    /* ref looks 2x faster in round 1 only: a fast tactic is kept */
    ref_ms[0] = 0.5;
    ref_ms[1] = 1.5;
    conv_tactic(t, sizeof t);
    fprintf(stderr, "  conv tactic, ref faster in one round: '%s'\n", t);
    KT_CHECK(t[0] && strcmp(t, "ref") != 0);
    int cands = calls[0];
    KT_CHECK(cands >= 2 && calls[1] == cands); /* every candidate, every round */
    /* interleaved: round 1 is timed before any of round 2, round 2 in reverse */
    bool interleaved = n_order == 2 * cands;
    for (int i = 0; interleaved && i < cands; i++) {
        interleaved = order[i][0] == '0' && order[cands + i][0] == '1' &&
                      strcmp(order[i] + 2, order[2 * cands - 1 - i] + 2) == 0;
    }
    KT_CHECK(interleaved);
    /* ref 5% faster in both rounds: still not chosen */
    ref_ms[0] = ref_ms[1] = 0.95;
    conv_tactic(t, sizeof t);
    KT_CHECK(t[0] && strcmp(t, "ref") != 0);
    /* ref 2x faster in both rounds: chosen */
    ref_ms[0] = ref_ms[1] = 0.5;
    conv_tactic(t, sizeof t);
    KT_CHECK(strcmp(t, "ref") == 0);
    kbld_tactic_time_hook = NULL;
}

int main(void) {
    rng_state = (uint32_t)kt_seed("test_cpu_passes", 4242u);
    if (getenv("KT_VERBOSE"))
        kiln_set_logger(NULL, NULL, KILN_LOG_VERBOSE);
    test_affine_before_unpadded_conv();
    test_affine_before_padded_conv();
    test_bn_before_conv();
    test_bn_relu_chain();
    test_bn_other_ranks();
    test_concat_in_place();
    test_tactic_pick();
    test_tactic_build();
    return kt_finish();
}
