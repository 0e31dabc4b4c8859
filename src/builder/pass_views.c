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

/* ---------------- operands through any chain of layout ops ----------------
 * torch's MultiheadAttention (torchvision's ViT) reaches its heads from the
 * packed projection P [S, B, 3E] (its input transposed sequence-first) by
 * Reshape, Unsqueeze, Transpose, Squeeze and a Gather of one constant
 * index per operand (aten::select: a strided view, like Slice + Squeeze),
 * then Reshape [S, B*H, D], Transpose, Reshape [B, H, S, D]. Each of those
 * is a view, so the operand's strides over P are computed (at every
 * profile point, from the inferred shapes) through the whole chain. A dim
 * may be the merge of dims that are not adjacent in memory (B*H), so a dim
 * is a list of atoms (size, stride). When P is a row-wise projection of a
 * Transpose keeping the last axis, the projection may read the
 * Transpose's input instead (its rows are independent), which lays P out
 * batch-first: then the operands are heads of P's rows, the form above. */
#define CV_STEPS 16
#define CV_ATOMS 24

typedef struct cv_atoms {
    int rank, n;
    int first[KILN_MAX_DIMS + 1]; /* dim d is atoms [first[d], first[d + 1]) */
    int64_t size[CV_ATOMS], stride[CV_ATOMS];
    int64_t off;
} cv_atoms;

typedef struct cv_walk {
    int n, base;
    int node[CV_STEPS], out[CV_STEPS]; /* node[0] writes the operand */
} cv_walk;

static bool cv_view_op(const kpass *p, const kn_node *n) {
    int64_t idx;
    if (n->n_in < 1 || n->in[0] < 0 || n->n_out < 1)
        return false;
    if (kpass_is(n, "Transpose") || kpass_is(n, "Reshape") || kpass_is(n, "Squeeze") ||
        kpass_is(n, "Unsqueeze") || kpass_is(n, "Flatten"))
        return true;
    return kpass_is(n, "Gather") && n->n_in == 2 && kpass_const_index(p->net, n->in[1], &idx);
}

static void cv_walk_back(const kpass *p, int t, cv_walk *w) {
    w->n = 0;
    int cur = t;
    while (w->n < CV_STEPS) {
        int pr = prod(p, cur);
        if (pr < 0 || !cv_view_op(p, &p->net->nodes[pr]) ||
            kpass_is_const(p->net, p->net->nodes[pr].in[0]))
            break;
        w->node[w->n] = pr;
        w->out[w->n++] = cur;
        cur = p->net->nodes[pr].in[0];
    }
    w->base = cur;
}

/* Atoms of dims[] (rank r) with the given strides, one a dim (false for
 * an empty dim). */
static bool cv_init(cv_atoms *v, int r, const int64_t *dims, const int64_t *strides) {
    memset(v, 0, sizeof *v);
    v->rank = r;
    for (int d = 0; d < r; d++) {
        v->first[d] = v->n;
        if (dims[d] < 1)
            return false;
        if (dims[d] != 1) {
            v->size[v->n] = dims[d];
            v->stride[v->n++] = strides[d];
        }
    }
    v->first[r] = v->n;
    return true;
}

/* The same atoms regrouped into dims[] (rank r), splitting an atom where a
 * dim boundary falls inside it. */
static bool cv_regroup(cv_atoms *v, int r, const int64_t *dims) {
    cv_atoms o;
    memset(&o, 0, sizeof o);
    o.rank = r;
    o.off = v->off;
    int a = 0;
    int64_t left = a < v->n ? v->size[0] : 0; /* of atom a not yet taken */
    for (int d = 0; d < r; d++) {
        o.first[d] = o.n;
        int64_t need = dims[d];
        if (need < 0)
            return false;
        while (need > 1) {
            if (a >= v->n || o.n >= CV_ATOMS)
                return false;
            if (left <= need) {
                if (need % left)
                    return false;
                /* the rest of atom a: `left` values, stride as its inner part */
                o.size[o.n] = left;
                o.stride[o.n++] = v->stride[a];
                need /= left;
                a++;
                left = a < v->n ? v->size[a] : 0;
            } else {
                if (left % need)
                    return false;
                o.size[o.n] = need;
                o.stride[o.n++] = v->stride[a] * (left / need);
                left /= need;
                need = 1;
            }
        }
    }
    o.first[r] = o.n;
    if (a != v->n)
        return false;
    *v = o;
    return true;
}

static void cv_permute(cv_atoms *v, const int64_t *perm) {
    cv_atoms o = *v;
    o.n = 0;
    for (int d = 0; d < v->rank; d++) {
        int s = (int)perm[d];
        o.first[d] = o.n;
        for (int x = v->first[s]; x < v->first[s + 1]; x++) {
            o.size[o.n] = v->size[x];
            o.stride[o.n++] = v->stride[x];
        }
    }
    o.first[v->rank] = o.n;
    *v = o;
}

/* Element idx of dim ax (an offset), the dim removed. */
static void cv_take(cv_atoms *v, int ax, int64_t idx) {
    for (int x = v->first[ax + 1] - 1; x >= v->first[ax]; x--) {
        v->off += (idx % v->size[x]) * v->stride[x];
        idx /= v->size[x];
    }
    int drop = v->first[ax + 1] - v->first[ax];
    memmove(v->size + v->first[ax], v->size + v->first[ax + 1],
            sizeof(int64_t) * (size_t)(v->n - v->first[ax + 1]));
    memmove(v->stride + v->first[ax], v->stride + v->first[ax + 1],
            sizeof(int64_t) * (size_t)(v->n - v->first[ax + 1]));
    v->n -= drop;
    for (int d = ax; d < v->rank; d++)
        v->first[d] = v->first[d + 1] - drop;
    v->rank--;
}

/* Node nd (one of cv_view_op) applied to v at point k, writing `out`. */
static bool cv_apply(const kpass *p, int k, const kn_node *nd, int out, cv_atoms *v) {
    const kn_tinfo *o = kpass_shape(p, k, out), *in = kpass_shape(p, k, nd->in[0]);
    if (!o || !in || in->rank != v->rank)
        return false;
    if (kpass_is(nd, "Transpose")) {
        size_t np = 0;
        const int64_t *pa = kn_attr_ints(nd, "perm", &np);
        int64_t perm[KILN_MAX_DIMS];
        if (pa && np != (size_t)v->rank)
            return false;
        for (int d = 0; d < v->rank; d++) {
            perm[d] = pa ? pa[d] : v->rank - 1 - d;
            if (perm[d] < 0 || perm[d] >= v->rank)
                return false;
        }
        cv_permute(v, perm);
    } else if (kpass_is(nd, "Gather")) {
        int64_t idx, ax = kn_attr_int(nd, "axis", 0);
        if (!kpass_const_index(p->net, nd->in[1], &idx))
            return false;
        if (ax < 0)
            ax += v->rank;
        if (ax < 0 || ax >= v->rank)
            return false;
        if (idx < 0)
            idx += in->dims[ax];
        if (idx < 0 || idx >= in->dims[ax])
            return false;
        cv_take(v, (int)ax, idx);
    } else if (!cv_regroup(v, o->rank, o->dims)) { /* Reshape, Squeeze, Unsqueeze, Flatten */
        return false;
    }
    if (v->rank != o->rank)
        return false;
    for (int d = 0; d < v->rank; d++) {
        int64_t sz = 1;
        for (int x = v->first[d]; x < v->first[d + 1]; x++)
            sz *= v->size[x];
        if (sz != o->dims[d])
            return false;
    }
    return true;
}

/* How the base of a walk lies in memory: its logical dims `dims` (as the
 * graph says) at strides `strides`, over a tensor of dims `mem` (rank 3:
 * [B, S, W] when the operand reads heads of its rows). */
typedef struct cv_base {
    int rank;
    int64_t dims[KILN_MAX_DIMS], strides[KILN_MAX_DIMS], mem[KILN_MAX_DIMS];
} cv_base;

static bool cv_base_at(const kpass *p, int k, int base, const int64_t *perm, cv_base *b) {
    const kn_tinfo *t = kpass_shape(p, k, base);
    if (!t || t->rank < 1 || t->rank > KILN_MAX_DIMS)
        return false;
    b->rank = t->rank;
    memcpy(b->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    /* memory order: mem[m] = dims[inv[m]]; logical dim d is memory dim perm[d] */
    int64_t inv[KILN_MAX_DIMS];
    for (int d = 0; d < t->rank; d++)
        inv[perm ? perm[d] : d] = d;
    for (int m = 0; m < t->rank; m++)
        b->mem[m] = t->dims[inv[m]];
    int64_t ms[KILN_MAX_DIMS], acc = 1;
    for (int m = t->rank - 1; m >= 0; m--) {
        ms[m] = acc;
        acc *= b->mem[m];
    }
    for (int d = 0; d < t->rank; d++)
        b->strides[d] = ms[perm ? perm[d] : d];
    return true;
}

/* Whether walk w puts its [B, S, H, D] operand (head size d) on heads
 * [h0, h0 + H) of the rows of W / d heads of base b at point k. */
static bool cv_heads_at(const kpass *p, int k, const cv_walk *w, const cv_base *b, int64_t d,
                        int64_t *h0, int64_t *hx) {
    cv_atoms v;
    if (!cv_init(&v, b->rank, b->dims, b->strides))
        return false;
    for (int s = w->n - 1; s >= 0; s--)
        if (!cv_apply(p, k, &p->net->nodes[w->node[s]], w->out[s], &v))
            return false;
    if (v.rank != 4 || b->rank != 3)
        return false;
    int64_t size[4], stride[4];
    for (int x = 0; x < 4; x++) {
        int a0 = v.first[x], a1 = v.first[x + 1];
        size[x] = 1;
        for (int a = a0; a < a1; a++)
            size[x] *= v.size[a];
        for (int a = a1 - 1; a > a0; a--)
            if (v.stride[a - 1] != v.stride[a] * v.size[a])
                return false;
        stride[x] = a1 > a0 ? v.stride[a1 - 1] : 0;
    }
    int64_t W = b->mem[2];
    if (size[3] != d || W % d || v.off % d || size[0] != b->mem[0] || size[1] != b->mem[1])
        return false;
    bool ok = (size[3] == 1 || stride[3] == 1) && (size[2] == 1 || stride[2] == d) &&
              (size[1] == 1 || stride[1] == W) && (size[0] == 1 || stride[0] == b->mem[1] * W);
    if (!ok || v.off / d + size[2] > W / d)
        return false;
    *h0 = v.off / d;
    *hx = W / d;
    return true;
}

/* Node mm producing P is a row-wise projection of Transpose(X) keeping the
 * last axis, the Transpose read by it alone: gives the Transpose. */
static int cv_sinkable(const kpass *p, int base) {
    const kn_net *net = p->net;
    int mm = prod(p, base);
    if (mm < 0)
        return -1;
    const kn_node *m = &net->nodes[mm];
    if (!kpass_matrix_rows(net, m) || kpass_is(m, "Gemm") || kpass_is_kiln(m, "Gemm") ||
        (m->n_in > 3 && m->in[3] >= 0) || (kpass_is(m, "MatMul") && m->n_in != 2))
        return -1;
    if (m->n_in > 2 && m->in[2] >= 0) {
        if (!kpass_is_const(net, m->in[2]))
            return -1;
        const kn_tdata *c = &net->tensors[m->in[2]].value;
        for (int d = 0; d + 1 < c->rank; d++)
            if (c->dims[d] != 1)
                return -1;
    }
    int tt = m->in[0], tr = prod(p, tt);
    if (tr < 0 || kpass_sole_reader(p, tt) != mm || p->is_output[tt] || !kpass_free(p, tr))
        return -1;
    const kn_node *t = &net->nodes[tr];
    size_t np = 0;
    const int64_t *perm = kn_attr_ints(t, "perm", &np);
    int r = kpass_rank(p, tt);
    if (!kpass_is(t, "Transpose") || t->n_in != 1 || !perm || r < 2 || np != (size_t)r ||
        perm[r - 1] != r - 1 || kpass_rank(p, base) != r)
        return -1;
    return tr;
}

/* Whether every tensor on the walks (and P) is read only by walk nodes or
 * node `att`, and none is a graph output. */
static bool cv_closed(const kpass *p, const cv_walk *w, int nw, int att) {
    for (int j = 0; j < nw; j++)
        for (int s = 0; s <= w[j].n; s++) {
            int t = s < w[j].n ? w[j].out[s] : w[j].base;
            if (t >= p->n_tensors || p->is_output[t])
                return false;
            for (int r = p->rd_start[t]; r < p->rd_start[t + 1]; r++) {
                int rd = p->rd_node[r];
                bool in = rd == att || p->net->nodes[rd].dead;
                for (int q = 0; q < nw && !in; q++)
                    for (int x = 0; x < w[q].n && !in; x++)
                        in = w[q].node[x] == rd;
                if (!in)
                    return false;
            }
        }
    return true;
}

/* Q, K and V of attention i as heads of one projection's rows, through any
 * chain of views; the projection reads its input untransposed if that is
 * what makes them so. */
static kiln_status chain_views(kpass *p, int i, view_cache *vc, bool *done) {
    kn_net *net = p->net;
    *done = false;
    const kn_node *a = &net->nodes[i];
    cv_walk w[3];
    int64_t d[3], h[3];
    for (int j = 0; j < 3; j++) {
        if (a->in[j] < 0 || !static_heads(p, a->in[j], &h[j], &d[j]))
            return KILN_OK;
        cv_walk_back(p, a->in[j], &w[j]);
        if (w[j].n == 0 || w[j].base != w[0].base)
            return KILN_OK;
    }
    int base = w[0].base, tr = -1;
    int64_t h0[3] = {-1, -1, -1}, hx = -1;
    for (int pass = 0; pass < 2; pass++) {
        const int64_t *perm = NULL;
        if (pass == 1) {
            tr = cv_sinkable(p, base);
            if (tr < 0 || !cv_closed(p, w, 3, i))
                return KILN_OK;
            size_t np;
            perm = kn_attr_ints(&net->nodes[tr], "perm", &np);
        }
        bool ok = true;
        for (int k = 0; k < p->n_points && ok; k++) {
            cv_base b;
            ok = cv_base_at(p, k, base, perm, &b);
            for (int j = 0; j < 3 && ok; j++) {
                int64_t o = -1, x = -1;
                ok = cv_heads_at(p, k, &w[j], &b, d[j], &o, &x) && (k == 0 || (o == h0[j] && x == hx));
                h0[j] = o;
                hx = x;
            }
        }
        if (ok)
            break;
        if (pass == 1)
            return KILN_OK;
    }
    if (tr >= 0) { /* the projection reads its rows in their own order */
        int mm = prod(p, base);
        kn_node *m = &net->nodes[mm];
        m->in[0] = net->nodes[tr].in[0];
        kpass_touch(p, mm);
        kpass_kill(p, tr);
    }
    int64_t lay[3] = {0, 0, 0}, hs[3];
    int in[3];
    for (int j = 0; j < 3; j++) {
        view_src src = {base, h0[j], hx};
        KN_TRY(heads_view(p, vc, &src, d[j], net->nodes[i].name, &in[j]));
        hs[j] = h[j];
    }
    kn_node *an = &net->nodes[i];
    for (int j = 0; j < 3; j++)
        KN_TRY(kpass_set_input(an, j, in[j]));
    KN_TRY(kn_node_set_ints(an, "layouts", lay, 3));
    KN_TRY(kn_node_set_ints(an, "head_offsets", h0, 3));
    KN_TRY(kn_node_set_ints(an, "heads", hs, 3));
    kpass_touch(p, i);
    kn_log(KILN_LOG_VERBOSE,
           "views: '%s' reads Q, K, V in place through %d, %d, %d layout ops (head offsets %lld "
           "%lld %lld of %lld)%s",
           an->name, w[0].n, w[1].n, w[2].n, (long long)h0[0], (long long)h0[1],
           (long long)h0[2], (long long)hx, tr >= 0 ? ", projection reads its input untransposed" : "");
    *done = true;
    return KILN_OK;
}

static kiln_status attention_views(kpass *p, int i, view_cache *vc, int *changed) {
    kn_net *net = p->net;
    const kn_node *a = &net->nodes[i];
    if (kn_attr_int(a, "qkv_packed", 0) || a->n_in < 3 || kn_attr_find(a, "layouts") ||
        kn_attr_find(a, "head_offsets") || kn_attr_find(a, "heads"))
        return KILN_OK;
    bool done;
    KN_TRY(chain_views(p, i, vc, &done));
    if (done) {
        (*changed)++;
        return KILN_OK;
    }
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

/* The part of a Split along the last axis that tensor t is, when the Split
 * input X has t's dims but the last at every profile point and the part's
 * offset and width are the same at each: gives X, the offset and width. */
static bool last_axis_part(const kpass *p, int t, int *x, int64_t *off, int64_t *width) {
    const kn_net *net = p->net;
    int pr = prod(p, t);
    if (pr < 0 || !kpass_is(&net->nodes[pr], "Split") || net->nodes[pr].n_in < 1 ||
        net->nodes[pr].in[0] < 0)
        return false;
    const kn_node *n = &net->nodes[pr];
    int j = -1;
    for (int o = 0; o < n->n_out; o++)
        if (n->out[o] == t)
            j = o;
    int r = kpass_rank(p, n->in[0]);
    int64_t axis = kn_attr_int(n, "axis", 0);
    if (j < 0 || r < 1 || (axis != r - 1 && axis != -1))
        return false;
    *off = *width = -1;
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *a = kpass_shape(p, k, t), *xi = kpass_shape(p, k, n->in[0]);
        if (!a || !xi || a->rank != r || xi->rank != r)
            return false;
        for (int d = 0; d + 1 < r; d++)
            if (a->dims[d] != xi->dims[d])
                return false;
        int64_t o = 0;
        for (int q = 0; q < j; q++) {
            const kn_tinfo *po = n->out[q] >= 0 ? kpass_shape(p, k, n->out[q]) : NULL;
            if (!po || po->rank != r)
                return false;
            o += po->dims[r - 1];
        }
        if (*off >= 0 && (o != *off || a->dims[r - 1] != *width))
            return false;
        *off = o;
        *width = a->dims[r - 1];
    }
    *x = n->in[0];
    return *width > 1;
}

/* A kiln::ElementwiseChain reading parts of a Split along the last axis
 * (a gated MLP's gate and up halves of one packed GEMM) reads them as
 * column views of the Split's input; the Split then goes when nothing
 * else reads its parts. */
static kiln_status ew_chain_views(kpass *p, int i, int *changed) {
    kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    if (kn_attr_find(n, "views") || n->n_in < 1 || n->n_in > 16 || n->n_out != 1)
        return KILN_OK;
    int64_t v[32] = {0};
    int in[16];
    bool any = false;
    for (int k = 0; k < n->n_in; k++) {
        in[k] = n->in[k];
        int x;
        int64_t off, w;
        if (in[k] >= 0 && last_axis_part(p, in[k], &x, &off, &w)) {
            in[k] = x;
            v[2 * k] = off;
            v[2 * k + 1] = w;
            any = true;
        }
    }
    if (!any)
        return KILN_OK;
    kn_node *cn = &net->nodes[i];
    for (int k = 0; k < cn->n_in; k++)
        KN_TRY(kpass_set_input(cn, k, in[k]));
    KN_TRY(kn_node_set_ints(cn, "views", v, (size_t)(2 * cn->n_in)));
    kpass_touch(p, i);
    kn_log(KILN_LOG_VERBOSE, "views: ElementwiseChain '%s' reads Split parts in place", cn->name);
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

static bool is_chain(const kn_node *n) { return kpass_is_kiln(n, "ElementwiseChain"); }

/* Elementwise chains read Split parts in place (after the chains are made). */
kiln_status kpass_chain_views(kpass *p, int *changed) {
    bool ready;
    KN_TRY(kpass_shapes_if(p, is_chain, &ready));
    if (!ready)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++)
        if (kpass_free(p, i) && is_chain(&p->net->nodes[i]))
            KN_TRY(ew_chain_views(p, i, changed));
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
