/* pass_cast.c - a Cast read only by another Cast becomes one Cast when
 * that changes no value:
 *   Cast(Cast(x: integer or bool, to t1), to t2)  ->  Cast(x, to t2)
 * The pair appears when a model casts a mask or ids to float32 and the
 * precision pass then casts that to float16 for a layer in reduced
 * precision (BERT's attention mask: int64 -> float32 -> float16).
 *
 * Integers convert to a float type by rounding to nearest, so the pair
 * equals the single Cast whenever the first step is exact (t1 holds every
 * value of x's type). One more case is exact: any integer through float32
 * or float64 to float16. An integer that float32 cannot hold exactly has
 * |x| >= 2^24, far past float16's largest finite value (65504), so both
 * routes give the same infinity, and every smaller integer goes through
 * float32 unchanged. To bfloat16 (whose range is float32's) that argument
 * fails, so int32/int64 through float32 to bfloat16 stay two Casts: a
 * value rounded once to 24 bits and again to 8 can land on the other side
 * of a tie. Targets are float types only. */
#include <string.h>

#include "passes.h"

/* Significant bits of an integer type's values (sign excluded), 0 when t
 * is not an integer or bool. */
static int int_bits(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_BOOL: return 1;
    case KILN_DTYPE_INT8: return 7;
    case KILN_DTYPE_UINT8: return 8;
    case KILN_DTYPE_INT16: return 15;
    case KILN_DTYPE_UINT16: return 16;
    case KILN_DTYPE_INT32: return 31;
    case KILN_DTYPE_UINT32: return 32;
    case KILN_DTYPE_INT64: return 63;
    case KILN_DTYPE_UINT64: return 64;
    default: return 0;
    }
}

/* Significand bits of a float type (the implicit bit included), 0 otherwise. */
static int float_bits(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT16: return 11;
    case KILN_DTYPE_BFLOAT16: return 8;
    case KILN_DTYPE_FLOAT: return 24;
    case KILN_DTYPE_DOUBLE: return 53;
    default: return 0;
    }
}

/* Whether Cast(Cast(x, t1), t2) equals Cast(x, t2) for x of type t0. */
bool kpass_cast_pair_exact(kiln_dtype t0, kiln_dtype t1, kiln_dtype t2) {
    int ib = int_bits(t0), f1 = float_bits(t1);
    if (!ib || !f1 || !float_bits(t2))
        return false;
    if (ib <= f1)
        return true; /* the first step is exact */
    return t2 == KILN_DTYPE_FLOAT16 && f1 >= 24;
}

static bool live_cast(const kn_node *n) {
    return !n->dead && kpass_is(n, "Cast") && n->n_in >= 1 && n->in[0] >= 0 && n->n_out == 1 &&
           n->out[0] >= 0;
}

/* Only types are read: the pass runs where shapes are unknown too (types
 * then come from the tensors as declared). */
kiln_status kpass_cast_pairs(kpass *p, int *changed) {
    kn_net *net = p->net;
    if (!kpass_any(p, live_cast))
        return KILN_OK;
    KN_TRY(kpass_need_shapes(p));
    for (int i = 0; i < p->n_nodes; i++) {
        kn_node *b = &net->nodes[i];
        if (!live_cast(b) || !kpass_free(p, i))
            continue;
        int u = b->in[0], a = kpass_producer(p, u);
        if (a < 0 || !live_cast(&net->nodes[a]) || kpass_sole_reader(p, u) != i ||
            kpass_graph_io(net, u))
            continue;
        int x = net->nodes[a].in[0];
        kiln_dtype t0 = kpass_dtype(p, x), t1 = kpass_dtype(p, u),
                   t2 = (kiln_dtype)kn_attr_int(b, "to", 0);
        if (!kpass_cast_pair_exact(t0, t1, t2))
            continue;
        b->in[0] = x;
        KN_TRY(kpass_join_name(&net->nodes[i], net->nodes[a].name));
        kn_log(KILN_LOG_VERBOSE, "cast pairs: '%s' casts %s to %s directly", net->nodes[i].name,
               kiln_dtype_name(t0), kiln_dtype_name(t2));
        kpass_kill(p, a);
        kpass_touch(p, i);
        (*changed)++;
    }
    return KILN_OK;
}
