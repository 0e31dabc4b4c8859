/* test_range.c - value ranges (pass_range.c): an attention mask that the
 * graph computes at run time but that holds one finite value everywhere is
 * dropped from kiln::Attention, and masks that can differ are kept. Each
 * case builds attention over a dynamic batch with the mask made the way
 * exporters make it, optimizes a copy, checks the mask input, and compares
 * outputs with the unoptimized graph (fixed seed, printed). */
#include <math.h>
#include <string.h>

#include "builder/builder.h"
#include "builder/passes.h"
#include "graph/fused.h"
#include "kiln/kiln_builder.h"
#include "test.h"
#include "kt_exec.h"

#include "kt_passes.h"

enum { S = 5, H = 2, D = 4, E = H * D };

static void perm(kiln_network *net, int n, const int64_t *p) {
    KT_OK(kiln_network_set_attr_ints(net, n, "perm", p, 4));
}

/* x [B, S, E] -> [B, H, S, D] (or its transpose for K) */
static void heads(kiln_network *net, const char *name, const int64_t *p) {
    char w[32], mm[32], r[32];
    snprintf(w, sizeof w, "W%s", name);
    snprintf(mm, sizeof mm, "%s_mm", name);
    snprintf(r, sizeof r, "%s_r", name);
    fconst(net, w, 2, DIMS(E, E), -0.5f, 1.f);
    node(net, mm, "MatMul", 2, IN("x", w), mm);
    node(net, r, "Reshape", 2, IN(mm, "shape4"), r);
    perm(net, node(net, name, "Transpose", 1, IN(r), name), p);
}

/* The kinds of mask the cases make. */
enum mask_kind {
    M_RANGE_GE0,    /* Where(Expand(Range(0, B) >= 0), 0, -inf): always 0 */
    M_CONST_SHAPE,  /* ConstantOfShape([B, 1, S, S]) + 0.25: always 0.25 */
    M_EXPAND_TRUE,  /* Where(Expand(true), 0, lowest): always 0 */
    M_RANGE_GE1,    /* Range(0, B) >= 1 is false for batch 0: kept */
    M_INPUT,        /* from a graph input: kept */
    M_ALL_NEG_INF,  /* Where(Expand(false), 0, -inf): every row masked, kept */
    M_PADDED,       /* Where(Expand(Range >= 0 [1,1,S,1] And keep [B,1,1,S]), 0, -inf):
                     * kept, read unexpanded as [B, 1, 1, S] */
    M_CONST_CAUSAL, /* Where(tril [1,1,S,S] And keep [B,1,1,S], 0, -inf) at a fixed S:
                     * causal=1 and the keep term as the mask */
};

static const char *const kind_names[] = {
    "Range >= 0 mask", "ConstantOfShape mask", "expanded true mask",
    "Range >= 1 mask (kept)", "input mask (kept)", "all -inf mask (kept)",
    "padding mask expanded by an all-true query term", "constant causal And padding",
};

/* keep [B, 1, 1, S] from a float input m [B, S]: m > -10 (true for the
 * test's data, but nothing a pass can prove) */
static void keep_rows(kiln_network *net) {
    KT_OK(kiln_network_add_input(net, "m", KILN_DTYPE_FLOAT, 2, DIMS(-1, S), NULL));
    fscalar(net, "m_lo", -10.f);
    node(net, "m_gt", "Greater", 2, IN("m", "m_lo"), "m_keep");
    iconst(net, "ax12", 1, DIMS(2), DIMS(1, 2));
    node(net, "m_keep4", "Unsqueeze", 2, IN("m_keep", "ax12"), "keep4");
}

/* shape [B, 1, S, S] from Shape(x) */
static void mask_shape(kiln_network *net) {
    node(net, "shp", "Shape", 1, IN("x"), "shp");
    iconst(net, "i0", 1, DIMS(1), DIMS(0));
    int g = node(net, "batch", "Gather", 2, IN("shp", "i0"), "b1");
    KT_OK(kiln_network_set_attr_int(net, g, "axis", 0));
    iconst(net, "one_s_s", 1, DIMS(3), DIMS(1, S, S));
    int c = node(net, "mshape", "Concat", 2, IN("b1", "one_s_s"), "mshape");
    KT_OK(kiln_network_set_attr_int(net, c, "axis", 0));
}

static void make_mask(kiln_network *net, enum mask_kind k) {
    float zero = 0.f;
    if (k == M_INPUT) {
        KT_OK(kiln_network_add_input(net, "am_in", KILN_DTYPE_FLOAT, 4, DIMS(-1, 1, S, S), NULL));
        node(net, "am_id", "Identity", 1, IN("am_in"), "am");
        return;
    }
    if (k == M_CONST_CAUSAL) {
        keep_rows(net);
        bool tril[S * S];
        for (int i = 0; i < S; i++)
            for (int j = 0; j < S; j++)
                tril[i * S + j] = j <= i;
        KT_OK(kiln_network_add_constant(net, "tril", KILN_DTYPE_BOOL, 4, DIMS(1, 1, S, S), tril,
                                        sizeof tril));
        node(net, "causal_and", "And", 2, IN("tril", "keep4"), "keepx");
        float z = 0.f;
        KT_OK(kiln_network_add_constant(net, "mz", KILN_DTYPE_FLOAT, 0, NULL, &z, sizeof z));
        fscalar(net, "mneg", -INFINITY);
        node(net, "mwhere", "Where", 3, IN("keepx", "mz", "mneg"), "am");
        return;
    }
    mask_shape(net);
    if (k == M_PADDED) {
        keep_rows(net);
        int64_t z = 0, one = 1, s_ = S;
        KT_OK(kiln_network_add_constant(net, "q0", KILN_DTYPE_INT64, 0, NULL, &z, sizeof z));
        KT_OK(kiln_network_add_constant(net, "q1", KILN_DTYPE_INT64, 0, NULL, &one, sizeof one));
        KT_OK(kiln_network_add_constant(net, "qs", KILN_DTYPE_INT64, 0, NULL, &s_, sizeof s_));
        node(net, "qrange", "Range", 3, IN("q0", "qs", "q1"), "qr");
        iconst(net, "ax013", 1, DIMS(3), DIMS(0, 1, 3));
        node(net, "qr4", "Unsqueeze", 2, IN("qr", "ax013"), "qr4");
        node(net, "qvalid", "GreaterOrEqual", 2, IN("qr4", "q0"), "qv");
        node(net, "pad_and", "And", 2, IN("qv", "keep4"), "keep");
        node(net, "keep_x", "Expand", 2, IN("keep", "mshape"), "keepx");
        float z2 = 0.f;
        KT_OK(kiln_network_add_constant(net, "mz", KILN_DTYPE_FLOAT, 0, NULL, &z2, sizeof z2));
        fscalar(net, "mneg", -INFINITY);
        node(net, "mwhere", "Where", 3, IN("keepx", "mz", "mneg"), "am");
        return;
    }
    if (k == M_CONST_SHAPE) {
        node(net, "cos", "ConstantOfShape", 1, IN("mshape"), "am0"); /* float 0 */
        fscalar(net, "quarter", 0.25f);
        node(net, "am_add", "Add", 2, IN("am0", "quarter"), "am");
        return;
    }
    if (k == M_RANGE_GE0 || k == M_RANGE_GE1) {
        int64_t z = 0, one = 1;
        KT_OK(kiln_network_add_constant(net, "r0", KILN_DTYPE_INT64, 0, NULL, &z, sizeof z));
        KT_OK(kiln_network_add_constant(net, "r1", KILN_DTYPE_INT64, 0, NULL, &one, sizeof one));
        iconst(net, "i00", 1, DIMS(1), DIMS(0));
        node(net, "bsc", "Squeeze", 2, IN("b1", "i00"), "bsc");
        node(net, "range", "Range", 3, IN("r0", "bsc", "r1"), "ar");
        iconst(net, "ax123", 1, DIMS(3), DIMS(1, 2, 3));
        node(net, "ar4", "Unsqueeze", 2, IN("ar", "ax123"), "ar4");
        node(net, "cmp", "GreaterOrEqual", 2, IN("ar4", k == M_RANGE_GE0 ? "r0" : "r1"), "keep");
    } else {
        bool t = k == M_EXPAND_TRUE;
        KT_OK(kiln_network_add_constant(net, "tf", KILN_DTYPE_BOOL, 0, NULL, &t, 1));
        node(net, "keep_id", "Identity", 1, IN("tf"), "keep");
    }
    node(net, "keep_x", "Expand", 2, IN("keep", "mshape"), "keepx");
    KT_OK(kiln_network_add_constant(net, "mz", KILN_DTYPE_FLOAT, 0, NULL, &zero, sizeof zero));
    fscalar(net, "mneg", k == M_EXPAND_TRUE ? -3.4028234663852886e38f : -INFINITY);
    node(net, "mwhere", "Where", 3, IN("keepx", "mz", "mneg"), "am");
}

static kiln_network *attention_net(enum mask_kind k) {
    kiln_network *net;
    KT_OK(kiln_network_create(&net));
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, DIMS(-1, S, E), NULL));
    iconst(net, "shape4", 1, DIMS(4), DIMS(0, 0, H, D));
    iconst(net, "shape3", 1, DIMS(3), DIMS(0, 0, E));
    heads(net, "q", DIMS(0, 2, 1, 3));
    heads(net, "kt", DIMS(0, 2, 3, 1));
    heads(net, "v", DIMS(0, 2, 1, 3));
    make_mask(net, k);
    node(net, "scores", "MatMul", 2, IN("q", "kt"), "s");
    fscalar(net, "scale", 0.5f);
    node(net, "scale_mul", "Mul", 2, IN("s", "scale"), "ss");
    node(net, "add_mask", "Add", 2, IN("ss", "am"), "sm");
    KT_OK(kiln_network_set_attr_int(net, node(net, "softmax", "Softmax", 1, IN("sm"), "p"), "axis", -1));
    node(net, "context", "MatMul", 2, IN("p", "v"), "o");
    perm(net, node(net, "o_t", "Transpose", 1, IN("o"), "ot"), DIMS(0, 2, 1, 3));
    node(net, "merge", "Reshape", 2, IN("ot", "shape3"), "y");
    KT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

static void test_masks(void) {
    for (int k = M_RANGE_GE0; k <= M_CONST_CAUSAL; k++) {
        kiln_network *net = attention_net((enum mask_kind)k);
        kn_net *o = NULL;
        KT_OK(kn_net_toposort(net));
        KT_OK(kn_net_clone(net, &o));
        if (!o) {
            kiln_network_destroy(net);
            continue;
        }
        KT_OK(optimize(o, 0, 1, 2, 4));
        const kn_node *a = find_op(o, KN_DOMAIN_KILN, "Attention");
        bool dropped = a && (a->n_in < 4 || a->in[3] < 0);
        bool want = k <= M_EXPAND_TRUE;
        KT_CHECK(a != NULL);
        KT_CHECK(dropped == want);
        if (k == M_PADDED) /* no Expand or And left: [B, 1, 1, S] reaches the attention */
            CHECK_OR_DUMP(count_op(o, "", "Expand") == 0 && count_op(o, "", "And") == 0, o);
        if (k == M_CONST_CAUSAL)
            CHECK_OR_DUMP(a && kn_attr_int(a, "causal", 0) == 1 && count_op(o, "", "And") == 0, o);
        if (!a || dropped != want) {
            fprintf(stderr, "  %s: attention %s, mask %s (wanted %s)\n", kind_names[k],
                    a ? "fused" : "not fused", dropped ? "dropped" : "kept",
                    want ? "dropped" : "kept");
            dump(o);
        }
        /* every row fully masked gives NaN in both graphs; the others compare */
        if (k != M_ALL_NEG_INF) {
            compare(net, o, kind_names[k], 3);
            compare(net, o, kind_names[k], 1);
        }
        kn_net_free(o);
        kiln_network_destroy(net);
    }
}

int main(void) {
    printf("seed %u (fixed)\n", rng_state);
    test_masks();
    if (kt_skipped)
        printf("%d numeric check(s) skipped: kernels missing\n", kt_skipped);
    return kt_finish();
}
