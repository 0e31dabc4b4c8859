/* pass_views.c - kiln::Attention and RotaryEmbedding read their operands
 * through strided views, so that a Split or Transpose that only re-lays a
 * tensor out is no copy (graph/fused.h, graph/rotary.h):
 *
 *   - an attention operand [B, S, H, D] that is Transpose([0, 2, 1, 3]) of
 *     a heads-first [B, H, S, D] tensor (a past cache's Concat, which is
 *     also the present output) is read heads-first in place (layout 1);
 *   - an attention operand, or a RotaryEmbedding's 3-D X [B, S, H * D],
 *     that is (through Reshapes keeping B and S) one part of a Split along
 *     the last axis of X [B, S, W] (the horizontally fused Q/K/V GEMM,
 *     grouped-query widths included) reads heads [off, off + H) of X's
 *     rows of W / D heads in place;
 *   - a RotaryEmbedding on Transpose(T [B, S, H, D], [0, 2, 1, 3]) reads T
 *     as rows (or T's own Split source, as above) and writes its output
 *     heads-first, as the Transpose did.
 *
 * Every shape condition holds at every profile point. It runs once, after
 * the causal-mask passes (which read Sk from K's [B, S, H, D] shape); what
 * the old layout chain leaves unread, dead code removes. */
#include <stdio.h>
#include <string.h>

#include "graph/rotary.h"
#include "passes.h"

static int prod(const kpass *p, int t) {
    if (t < 0)
        return -1;
    int i = p->net->tensors[t].producer;
    return i >= 0 && !p->net->nodes[i].dead ? i : -1;
}

/* Node i is Transpose(perm [0, 2, 1, 3]). */
static bool swap12(const kpass *p, int i) {
    if (i < 0 || !kpass_is(&p->net->nodes[i], "Transpose") || p->net->nodes[i].n_in != 1)
        return false;
    size_t np = 0;
    const int64_t *perm = kn_attr_ints(&p->net->nodes[i], "perm", &np);
    return perm && np == 4 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3;
}

/* Elements per (b, s) of t (rank 3 or 4) at point k, or -1. */
static int64_t per_token(const kn_tinfo *t) {
    if (!t || t->rank < 3 || t->rank > 4)
        return -1;
    return t->rank == 3 ? t->dims[2] : t->dims[2] * t->dims[3];
}

/* Where a [B, S, H, D] or [B, S, H * D] tensor t (head size d) lies in a
 * Split part: t follows back through Reshapes keeping B and S to output j
 * of a Split along the last axis of X [B, S, W] (at every profile point,
 * W and the part's offset multiples of d). Gives X, the part's first head
 * on X's rows and the heads per row. */
typedef struct view_src {
    int x;
    int64_t h0, hx;
} view_src;

static bool split_source(const kpass *p, int t, int64_t d, view_src *src) {
    const kn_net *net = p->net;
    if (d < 1 || p->n_points < 1)
        return false;
    int cur = t;
    for (int depth = 0; depth < 8; depth++) {
        int pr = prod(p, cur);
        if (pr < 0)
            return false;
        const kn_node *n = &net->nodes[pr];
        if (kpass_is(n, "Reshape") && n->n_in >= 1 && n->in[0] >= 0) {
            for (int k = 0; k < p->n_points; k++) {
                const kn_tinfo *a = kpass_shape(p, k, t), *u = kpass_shape(p, k, n->in[0]);
                if (per_token(a) < 0 || per_token(u) != per_token(a) || u->dims[0] != a->dims[0] ||
                    u->dims[1] != a->dims[1])
                    return false;
            }
            cur = n->in[0];
            continue;
        }
        if (!kpass_is(n, "Split") || n->n_in < 1 || n->in[0] < 0)
            return false;
        int j = -1;
        for (int o = 0; o < n->n_out; o++)
            if (n->out[o] == cur)
                j = o;
        if (j < 0)
            return false;
        int64_t axis = kn_attr_int(n, "axis", 0);
        int64_t h0 = -1, hx = -1;
        for (int k = 0; k < p->n_points; k++) {
            const kn_tinfo *a = kpass_shape(p, k, t), *x = kpass_shape(p, k, n->in[0]);
            if (!x || x->rank != 3 || (axis != 2 && axis != -1) || x->dims[0] != a->dims[0] ||
                x->dims[1] != a->dims[1] || x->dims[2] % d != 0)
                return false;
            int64_t off = 0;
            for (int o = 0; o < j; o++) {
                const kn_tinfo *po = n->out[o] >= 0 ? kpass_shape(p, k, n->out[o]) : NULL;
                if (!po || po->rank != 3)
                    return false;
                off += po->dims[2];
            }
            if (off % d != 0 || (h0 >= 0 && (off / d != h0 || x->dims[2] / d != hx)))
                return false;
            h0 = off / d;
            hx = x->dims[2] / d;
        }
        src->x = n->in[0];
        src->h0 = h0;
        src->hx = hx;
        return true;
    }
    return false;
}

/* The same [H, D] (dims 2 and 3 of a rank-4 t) at every profile point. */
static bool static_heads(const kpass *p, int t, int64_t *h, int64_t *d) {
    *h = *d = -1;
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *a = kpass_shape(p, k, t);
        if (!a || a->rank != 4 || (*h >= 0 && (a->dims[2] != *h || a->dims[3] != *d)))
            return false;
        *h = a->dims[2];
        *d = a->dims[3];
    }
    return *h > 0 && *d > 0;
}

/* A new alias Reshape of `from` to `shape` (rank n, 0 keeping a dim). */
static kiln_status add_view(kpass *p, int from, const int64_t *shape, int n, const char *name,
                            const char *what, int *out) {
    kn_net *net = p->net;
    int sh, node;
    char nm[300];
    KN_TRY(kpass_add_i64(net, "view_dims", shape, n, &sh));
    KN_TRY(kn_net_new_tensor(net, what, out));
    int in2[2] = {from, sh};
    snprintf(nm, sizeof nm, "%s %s", name, what);
    KN_TRY(kn_net_add_node(net, nm, "Reshape", "", 14, 2, in2, 1, out, &node));
    kpass_touch(p, node);
    return KILN_OK;
}

/* Packed rows X [B, S, W] as heads [B, S, W / d, d], one view per X and d
 * in this pass run (Q, K and V of one projection share it). */
#define VIEW_CACHE 64
typedef struct view_entry {
    int x, view;
    int64_t d;
} view_entry;
typedef struct view_cache {
    int n;
    view_entry e[VIEW_CACHE];
} view_cache;

static kiln_status heads_view(kpass *p, view_cache *vc, const view_src *src, int64_t d,
                              const char *name, int *view) {
    for (int i = 0; i < vc->n; i++)
        if (vc->e[i].x == src->x && vc->e[i].d == d) {
            *view = vc->e[i].view;
            return KILN_OK;
        }
    const int64_t shape[4] = {0, 0, src->hx, d};
    KN_TRY(add_view(p, src->x, shape, 4, name, "packed_heads", view));
    if (vc->n < VIEW_CACHE)
        vc->e[vc->n++] = (view_entry){src->x, *view, d};
    return KILN_OK;
}

static kiln_status attention_views(kpass *p, int i, view_cache *vc, int *changed) {
    kn_net *net = p->net;
    const kn_node *a = &net->nodes[i];
    if (kn_attr_int(a, "qkv_packed", 0) || a->n_in < 3 || kn_attr_find(a, "layouts") ||
        kn_attr_find(a, "head_offsets") || kn_attr_find(a, "heads"))
        return KILN_OK;
    int64_t lay[3] = {0, 0, 0}, off[3] = {0, 0, 0}, hs[3] = {0, 0, 0};
    int in[3];
    bool any = false;
    for (int j = 0; j < 3; j++) {
        in[j] = net->nodes[i].in[j];
        int64_t h, d;
        if (in[j] < 0 || !static_heads(p, in[j], &h, &d))
            continue;
        int pr = prod(p, in[j]);
        view_src src;
        if (swap12(p, pr) && kpass_rank(p, net->nodes[pr].in[0]) == 4) {
            in[j] = net->nodes[pr].in[0]; /* [B, H, S, D] as it lies */
            lay[j] = 1;
            any = true;
        } else if (split_source(p, in[j], d, &src)) {
            KN_TRY(heads_view(p, vc, &src, d, net->nodes[i].name, &in[j]));
            off[j] = src.h0;
            hs[j] = h;
            any = true;
        }
    }
    if (!any)
        return KILN_OK;
    kn_node *an = &net->nodes[i];
    for (int j = 0; j < 3; j++)
        KN_TRY(kpass_set_input(an, j, in[j]));
    KN_TRY(kn_node_set_ints(an, "layouts", lay, 3));
    KN_TRY(kn_node_set_ints(an, "head_offsets", off, 3));
    KN_TRY(kn_node_set_ints(an, "heads", hs, 3));
    kpass_touch(p, i);
    kn_log(KILN_LOG_VERBOSE,
           "views: '%s' reads Q, K, V in place (layouts %lld %lld %lld, head offsets %lld %lld "
           "%lld)",
           an->name, (long long)lay[0], (long long)lay[1], (long long)lay[2], (long long)off[0],
           (long long)off[1], (long long)off[2]);
    (*changed)++;
    return KILN_OK;
}

/* The rotary geometry of node i at profile point 0. */
static bool rotary_at0(const kpass *p, int i, kn_rotary *g) {
    const kn_node *n = &p->net->nodes[i];
    int rank[8];
    int64_t dims[8][KILN_MAX_DIMS];
    memset(dims, 0, sizeof dims);
    int n_in = n->n_in < 8 ? n->n_in : 8;
    for (int j = 0; j < n_in; j++) {
        const kn_tinfo *t = n->in[j] >= 0 ? kpass_shape(p, 0, n->in[j]) : NULL;
        rank[j] = t ? t->rank : -1;
        if (t)
            memcpy(dims[j], t->dims, sizeof dims[j]);
    }
    return kn_rotary_geometry(n, n_in, rank, (const int64_t (*)[KILN_MAX_DIMS])dims, g) == KILN_OK;
}

static kiln_status rotary_views(kpass *p, int i, int *changed) {
    kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    kn_rotary g;
    if (n->n_out != 1 || kn_attr_find(n, "kiln_row_heads") ||
        kn_attr_find(n, "kiln_head_offset") || kn_attr_find(n, "kiln_heads_first_out") ||
        !rotary_at0(p, i, &g))
        return KILN_OK;
    int x = n->in[g.x], nx = -1;
    view_src src;
    bool found, heads_out = false;
    if (g.heads_first) { /* X = Transpose(T [B, S, H, D]): T's rows, Y written heads-first */
        int t = prod(p, x);
        int64_t h, d;
        if (n->domain[0] || !swap12(p, t) || !static_heads(p, net->nodes[t].in[0], &h, &d) ||
            h != g.heads || d != g.head)
            return KILN_OK;
        int tin = net->nodes[t].in[0];
        found = split_source(p, tin, d, &src);
        if (!found) {
            const int64_t rows[3] = {0, 0, h * d};
            KN_TRY(add_view(p, tin, rows, 3, net->nodes[i].name, "rotary_rows", &nx));
        }
        heads_out = true;
    } else {
        found = split_source(p, x, g.head, &src);
        if (!found)
            return KILN_OK;
    }
    kn_node *rn = &net->nodes[i];
    KN_TRY(kpass_set_input(rn, g.x, found ? src.x : nx));
    KN_TRY(kn_node_set_int(rn, "num_heads", g.heads));
    if (found) {
        KN_TRY(kn_node_set_int(rn, "kiln_row_heads", src.hx));
        KN_TRY(kn_node_set_int(rn, "kiln_head_offset", src.h0));
    }
    if (heads_out)
        KN_TRY(kn_node_set_int(rn, "kiln_heads_first_out", 1));
    kpass_touch(p, i);
    kn_log(KILN_LOG_VERBOSE, "views: RotaryEmbedding '%s' reads %s in place%s", rn->name,
           found ? "heads of a packed projection" : "[B, S, H * D] rows",
           heads_out ? ", writing [B, H, S, D]" : "");
    (*changed)++;
    return KILN_OK;
}

static bool is_view_reader(const kn_node *n) {
    return kpass_is_kiln(n, "Attention") || kpass_is(n, "RotaryEmbedding") ||
           (strcmp(n->domain, KN_MS_DOMAIN) == 0 && strcmp(n->op_type, "RotaryEmbedding") == 0);
}

kiln_status kpass_attn_views(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool ready;
    KN_TRY(kpass_shapes_if(p, is_view_reader, &ready));
    if (!ready)
        return KILN_OK;
    view_cache vc;
    vc.n = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i))
            continue;
        const kn_node *n = &net->nodes[i];
        if (kpass_is_kiln(n, "Attention"))
            KN_TRY(attention_views(p, i, &vc, changed));
        else if (is_view_reader(n))
            KN_TRY(rotary_views(p, i, changed));
    }
    return KILN_OK;
}

/* A Split of which one part alone is read (what the views above leave of a
 * packed projection when a past cache still needs V copied heads-first) is
 * a Slice of that part: the other parts are not written at all. The part's
 * offset and size along the axis are the same at every profile point. */
kiln_status kpass_split_part(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        if (!kpass_free(p, i) || !kpass_is(n, "Split") || n->n_in < 1 || n->in[0] < 0 || n->n_out < 2)
            continue;
        int live = -1, n_live = 0;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && n->out[j] < p->n_tensors && p->uses[n->out[j]] > 0) {
                live = j;
                n_live++;
            }
        if (n_live != 1)
            continue;
        KN_TRY(kpass_need_shapes(p));
        if (p->shapes_state != 1)
            return KILN_OK;
        n = &net->nodes[i];
        int rank = kpass_rank(p, n->in[0]);
        int64_t axis = kn_attr_int(n, "axis", 0);
        if (rank < 1 || axis < -rank || axis >= rank)
            continue;
        if (axis < 0)
            axis += rank;
        int64_t off = -1, len = -1;
        bool ok = true;
        for (int k = 0; k < p->n_points && ok; k++) {
            int64_t o = 0;
            for (int j = 0; j < live && ok; j++) {
                const kn_tinfo *t = n->out[j] >= 0 ? kpass_shape(p, k, n->out[j]) : NULL;
                ok = t && t->rank == rank;
                if (ok)
                    o += t->dims[axis];
            }
            const kn_tinfo *t = kpass_shape(p, k, n->out[live]);
            ok = ok && t && t->rank == rank && (off < 0 || (o == off && t->dims[axis] == len));
            if (ok)
                off = o, len = t->dims[axis];
        }
        if (!ok || off < 0 || len < 1)
            continue;
        const int64_t starts[1] = {off}, ends[1] = {off + len}, axes[1] = {axis};
        int st, en, ax, node;
        KN_TRY(kpass_add_i64(net, "part_start", starts, 1, &st));
        KN_TRY(kpass_add_i64(net, "part_end", ends, 1, &en));
        KN_TRY(kpass_add_i64(net, "part_axis", axes, 1, &ax));
        int x = net->nodes[i].in[0], y = net->nodes[i].out[live];
        char nm[300];
        snprintf(nm, sizeof nm, "%s part %d", net->nodes[i].name, live);
        int in4[4] = {x, st, en, ax};
        kpass_kill(p, i);
        KN_TRY(kn_net_add_node(net, nm, "Slice", "", 13, 4, in4, 1, &y, &node));
        kpass_touch(p, node);
        kn_log(KILN_LOG_VERBOSE, "views: Split '%s' has one part read, a Slice of it", nm);
        (*changed)++;
    }
    return KILN_OK;
}
