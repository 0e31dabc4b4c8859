/* pass_mha.c - multi-head attention whose heads reach the score MatMul
 * through any chain of layout ops.
 *
 * kpass_attention takes the export pattern with one Transpose on each of
 * Q, K and V. Other exporters reach the heads in longer ways: torch's
 * MultiheadAttention (ViT) transposes its input to sequence-first, packs
 * the projections, then unsqueezes, transposes, squeezes and gathers Q, K
 * and V, reshapes each to [S, B*H, D], transposes and reshapes again to
 * [B, H, S, D], and scales Q and K by sqrt(scale) each. Whatever the chain,
 * Q, K and V are strided views of some tensor, and that is all this pass
 * looks at: it walks back from the score MatMul's operands through
 * Transpose, Reshape, Unsqueeze, Squeeze, Flatten, Gather of one constant
 * index, Split and scalar Mul/Div, computes each operand's strides over the
 * tensor it started from (at every profile point, from the inferred
 * shapes), and fuses when those strides are what kiln::Attention reads:
 *   - packed: Q, K, V are the three [H, D] slices of one [B, S, 3, H, D]
 *     tensor (qkv_packed), or
 *   - separate: each is a whole [B, S, H, D] tensor.
 * When the walk ends at a row-wise projection (MatMul by a constant matrix,
 * with or without a constant bias Add, or a kiln::MatMul without a
 * residual) whose input is a Transpose that keeps the last axis (the
 * sequence-first transpose), the projection reads the Transpose's input
 * instead: rows are independent, so only the view changes, and the
 * transposed copy goes.
 *
 * The attention writes Y [B, S, H, Dv]; a Transpose gives the MatMul's
 * [B, H, S, Dv] result to its readers as before, and canonicalization
 * merges it with theirs (BERT's [0, 2, 1, 3] then vanishes). Every node on
 * the way must be read only inside the pattern, so nothing else loses a
 * tensor. */
#include <stdio.h>
#include <string.h>

#include "passes.h"

#define MV_STEPS 24

/* A strided view of a contiguous tensor: element (i0, .., ir) is at
 * offset + sum(i_k * strides[k]) of it. */
typedef struct mv_view {
    int rank;
    int64_t dims[KILN_MAX_DIMS], strides[KILN_MAX_DIMS], offset;
} mv_view;

/* The layout ops from tensor t back to the tensor it views. */
typedef struct mv_path {
    int t, base;
    int n;
    int node[MV_STEPS]; /* node[0] produces t */
    int out[MV_STEPS];  /* the tensor node[i] writes on the way */
    double fac[MV_STEPS]; /* node[i]'s scalar factor (1 for a layout op) */
    double scale;       /* scalar Mul/Div met on the way */
} mv_path;

/* A projection that can read the input of the Transpose before it. */
typedef struct mv_sink {
    int top;       /* produces the viewed tensor: the bias Add or the MatMul */
    int mm;        /* the MatMul (plain or kiln::) */
    int tr;        /* the Transpose feeding it */
    int x;         /* the Transpose's input */
} mv_sink;

static bool is_view_op(const kn_node *n) {
    return ((kpass_is(n, "Transpose") || kpass_is(n, "Reshape") || kpass_is(n, "Unsqueeze") ||
             kpass_is(n, "Squeeze") || kpass_is(n, "Flatten") || kpass_is(n, "Split")) &&
            n->n_in >= 1) ||
           /* a Concat of one tensor (a KV cache's cat with no past, as GPT-2's
            * TorchScript export writes it) is that tensor */
           (kpass_is(n, "Concat") && n->n_in == 1 && n->in[0] >= 0);
}

/* Walk back from t; scalar Mul/Div are taken when scale_ok, Expand (a
 * broadcast: grouped-query heads) when expand_ok. */
static void walk_ex(const kpass *p, int t, bool scale_ok, bool expand_ok, mv_path *w) {
    const kn_net *net = p->net;
    memset(w, 0, sizeof *w);
    w->t = t;
    w->scale = 1.0;
    int cur = t;
    while (w->n < MV_STEPS) {
        int pr = kpass_producer(p, cur);
        if (pr < 0)
            break;
        const kn_node *n = &net->nodes[pr];
        int next = -1;
        int64_t idx;
        double c, fac = 1.0;
        if (is_view_op(n) || (expand_ok && kpass_is(n, "Expand") && n->n_in == 2)) {
            next = n->in[0];
        } else if (kpass_is(n, "Gather") && n->n_in == 2 && kpass_const_index(net, n->in[1], &idx)) {
            next = n->in[0];
        } else if (scale_ok && (kpass_is(n, "Mul") || kpass_is(n, "Div")) && n->n_in == 2) {
            bool div = kpass_is(n, "Div");
            if (kpass_const_scalar(net, n->in[1], &c) && c != 0.0) {
                next = n->in[0];
                fac = div ? 1.0 / c : c;
            } else if (!div && kpass_const_scalar(net, n->in[0], &c)) {
                next = n->in[1];
                fac = c;
            }
        }
        if (next < 0 || kpass_is_const(net, next))
            break;
        w->scale *= fac;
        w->fac[w->n] = fac;
        w->node[w->n] = pr;
        w->out[w->n++] = cur;
        cur = next;
    }
    w->base = cur;
}

static void walk(const kpass *p, int t, bool scale_ok, mv_path *w) { walk_ex(p, t, scale_ok, false, w); }

/* Whether node g maps each row of its input 0 to the same row of its
 * output, independently of the other rows. */
static bool row_op(const kn_net *net, const kn_node *g) {
    if (!kpass_matrix_rows(net, g) || (g->n_in > 3 && g->in[3] >= 0))
        return false; /* no residual: it is read by row index */
    if (kpass_is(g, "Gemm") || kpass_is_kiln(g, "Gemm")) {
        if (g->n_in > 2 && g->in[2] >= 0) {
            if (!kpass_is_const(net, g->in[2]))
                return false;
            const kn_tdata *c = &net->tensors[g->in[2]].value;
            if (c->rank > 2 || (c->rank == 2 && c->dims[0] != 1))
                return false;
        }
    } else if (g->n_in > 2 && g->in[2] >= 0 && !kpass_is_const(net, g->in[2])) {
        return false;
    }
    return true;
}

/* Whether the tensor `base` comes from a row-wise projection of a
 * Transpose that keeps the last axis, read by nothing else. */
static bool sinkable(const kpass *p, int base, mv_sink *s) {
    const kn_net *net = p->net;
    int top = kpass_producer(p, base);
    if (top < 0)
        return false;
    const kn_node *n = &net->nodes[top];
    int mm = -1;
    if (kpass_is(n, "Add") && n->n_in == 2) {
        for (int j = 0; j < 2 && mm < 0; j++) {
            int c = n->in[1 - j], a = n->in[j];
            if (!kpass_is_const(net, c))
                continue;
            const kn_tdata *cv = &net->tensors[c].value;
            bool rowvec = true;
            for (int d = 0; d + 1 < cv->rank; d++)
                rowvec &= cv->dims[d] == 1;
            int pa = kpass_producer(p, a);
            if (rowvec && pa >= 0 && kpass_sole_reader(p, a) == top &&
                kpass_is(&net->nodes[pa], "MatMul"))
                mm = pa;
        }
    } else if (kpass_is(n, "MatMul") || kpass_is_kiln(n, "MatMul")) {
        mm = top;
    }
    if (mm < 0)
        return false;
    const kn_node *m = &net->nodes[mm];
    if (!row_op(net, m) || !kpass_free(p, mm) || !kpass_free(p, top))
        return false;
    int tt = m->in[0], tr = kpass_producer(p, tt);
    if (tr < 0 || kpass_sole_reader(p, tt) != mm || !kpass_free(p, tr))
        return false;
    const kn_node *t = &net->nodes[tr];
    size_t np = 0;
    const int64_t *perm = kn_attr_ints(t, "perm", &np);
    int r = kpass_rank(p, tt);
    if (!kpass_is(t, "Transpose") || t->n_in != 1 || !perm || r < 2 || np != (size_t)r ||
        perm[r - 1] != r - 1)
        return false;
    s->top = top;
    s->mm = mm;
    s->tr = tr;
    s->x = t->in[0];
    return true;
}

/* ---------------- strides ----------------
 * Between the projection and the score MatMul a dim may be the merge of
 * dims that are not adjacent in memory ([S, B*H, D] in torch's
 * MultiheadAttention, where B and H are far apart): no single stride
 * describes it, though the chain as a whole is a permutation. So a dim is
 * kept as a list of atoms, each a size and a stride, outermost first; a
 * Reshape regroups the atoms (splitting one where a new dim boundary falls
 * inside it), and only the final views must have one atom a dim. */

#define MV_ATOMS 24

typedef struct mv_atoms {
    int rank, n;
    int first[KILN_MAX_DIMS + 1]; /* dim d is atoms [first[d], first[d + 1]) */
    int64_t size[MV_ATOMS], stride[MV_ATOMS];
    int64_t offset;
} mv_atoms;

static int64_t dim_of(const mv_atoms *v, int d) {
    int64_t n = 1;
    for (int a = v->first[d]; a < v->first[d + 1]; a++)
        n *= v->size[a];
    return n;
}

static void contiguous(mv_atoms *v, int rank, const int64_t *dims) {
    memset(v, 0, sizeof *v);
    v->rank = rank;
    int64_t st = 1;
    for (int d = rank - 1; d >= 0; d--)
        st *= dims[d];
    for (int d = 0; d < rank; d++) {
        v->first[d] = v->n;
        st /= dims[d] ? dims[d] : 1;
        if (dims[d] != 1) {
            v->size[v->n] = dims[d];
            v->stride[v->n++] = st;
        }
    }
    v->first[rank] = v->n;
}

static void permute(mv_atoms *v, const int64_t *perm) {
    mv_atoms o = *v;
    o.n = 0;
    for (int d = 0; d < v->rank; d++) {
        o.first[d] = o.n;
        for (int a = v->first[perm[d]]; a < v->first[perm[d] + 1]; a++) {
            o.size[o.n] = v->size[a];
            o.stride[o.n++] = v->stride[a];
        }
    }
    o.first[v->rank] = o.n;
    *v = o;
}

/* The atoms regrouped into `dims` (row-major order kept); false when a
 * boundary would cut an atom unevenly. */
static bool regroup(mv_atoms *v, int rank, const int64_t *dims) {
    if (rank > KILN_MAX_DIMS || kn_numel(rank, dims) <= 0)
        return false;
    int64_t size[MV_ATOMS], stride[MV_ATOMS];
    int n = v->n, last[KILN_MAX_DIMS];
    memcpy(size, v->size, sizeof size);
    memcpy(stride, v->stride, sizeof stride);
    /* from the innermost dim: take atoms from the end, splitting one when
     * the dim ends inside it */
    int64_t osize[MV_ATOMS], ostride[MV_ATOMS];
    int on = 0;
    for (int d = rank - 1; d >= 0; d--) {
        int64_t need = dims[d];
        last[d] = on;
        while (need > 1) {
            if (n == 0 || on == MV_ATOMS)
                return false;
            int64_t sz = size[n - 1], st = stride[n - 1];
            if (need % sz == 0) {
                osize[on] = sz;
                ostride[on++] = st;
                need /= sz;
                n--;
            } else if (sz % need == 0) {
                osize[on] = need;
                ostride[on++] = st;
                size[n - 1] = sz / need;
                stride[n - 1] = st * need;
                need = 1;
            } else {
                return false;
            }
        }
    }
    if (n != 0)
        return false;
    /* osize holds the atoms innermost first; dim d took those from last[d]
     * up to where dim d - 1 began (last[d - 1]; the end for dim 0) */
    v->rank = rank;
    v->n = on;
    for (int a = 0; a < on; a++) {
        v->size[a] = osize[on - 1 - a];
        v->stride[a] = ostride[on - 1 - a];
    }
    for (int d = 0; d < rank; d++)
        v->first[d] = d == 0 ? 0 : on - last[d - 1];
    v->first[rank] = on;
    return true;
}

static void remove_atom(mv_atoms *v, int at) {
    for (int a = at; a + 1 < v->n; a++) {
        v->size[a] = v->size[a + 1];
        v->stride[a] = v->stride[a + 1];
    }
    v->n--;
    for (int d = 0; d <= v->rank; d++)
        if (v->first[d] > at)
            v->first[d]--;
}

static void drop_dim(mv_atoms *v, int d) {
    int a0 = v->first[d], a1 = v->first[d + 1], k = a1 - a0;
    for (int a = a0; a + k < v->n; a++) {
        v->size[a] = v->size[a + k];
        v->stride[a] = v->stride[a + k];
    }
    v->n -= k;
    for (int e = d; e < v->rank; e++)
        v->first[e] = v->first[e + 1] - k;
    v->rank--;
}

/* Apply path node n (which produces `out`) to v at profile point k. */
static bool apply(const kpass *p, int k, const kn_node *n, int out, mv_atoms *v) {
    const kn_tinfo *o = kpass_shape(p, k, out);
    if (!o)
        return false;
    if (kpass_is(n, "Transpose")) {
        size_t np = 0;
        const int64_t *perm = kn_attr_ints(n, "perm", &np);
        int64_t rev[KILN_MAX_DIMS];
        if (!perm) {
            for (int d = 0; d < v->rank; d++)
                rev[d] = v->rank - 1 - d;
            perm = rev;
        } else if (np != (size_t)v->rank) {
            return false;
        }
        for (int d = 0; d < v->rank; d++)
            if (perm[d] < 0 || perm[d] >= v->rank)
                return false;
        permute(v, perm);
    } else if (kpass_is(n, "Gather")) {
        int64_t a = kn_attr_int(n, "axis", 0), idx;
        if (a < 0)
            a += v->rank;
        if (a < 0 || a >= v->rank || !kpass_const_index(p->net, n->in[1], &idx))
            return false;
        if (idx < 0)
            idx += dim_of(v, (int)a);
        if (idx < 0 || idx >= dim_of(v, (int)a))
            return false;
        for (int at = v->first[a + 1] - 1; at >= v->first[a]; at--) {
            v->offset += (idx % v->size[at]) * v->stride[at];
            idx /= v->size[at];
        }
        drop_dim(v, (int)a);
    } else if (kpass_is(n, "Split")) {
        int64_t a = kn_attr_int(n, "axis", 0), start = 0;
        if (a < 0)
            a += v->rank;
        if (a < 0 || a >= v->rank || o->rank != v->rank)
            return false;
        int j = 0;
        while (j < n->n_out && n->out[j] != out) {
            const kn_tinfo *prev = n->out[j] >= 0 ? kpass_shape(p, k, n->out[j]) : NULL;
            if (!prev || prev->rank != v->rank)
                return false;
            start += prev->dims[a];
            j++;
        }
        int64_t len = o->dims[a];
        if (j == n->n_out || v->first[a + 1] == v->first[a])
            return false;
        /* a slice of the dim's outermost atom */
        int at = v->first[a];
        int64_t inner = dim_of(v, (int)a) / v->size[at];
        if (start % inner || len % inner)
            return false;
        v->offset += start / inner * v->stride[at];
        v->size[at] = len / inner;
        if (v->size[at] == 1)
            remove_atom(v, at);
    } else if (kpass_is(n, "Expand")) {
        /* a broadcast: each dim grown from 1 gets one atom of stride 0;
         * new leading dims likewise */
        if (o->rank < v->rank || o->rank > KILN_MAX_DIMS)
            return false;
        while (v->rank < o->rank) {
            for (int d = v->rank; d >= 0; d--)
                v->first[d + 1] = v->first[d];
            v->first[0] = 0;
            v->rank++;
        }
        for (int d = 0; d < v->rank; d++) {
            int64_t have = dim_of(v, d);
            if (have == o->dims[d])
                continue;
            if (have != 1 || v->n == MV_ATOMS)
                return false;
            int at = v->first[d];
            for (int a = v->n; a > at; a--) {
                v->size[a] = v->size[a - 1];
                v->stride[a] = v->stride[a - 1];
            }
            v->size[at] = o->dims[d];
            v->stride[at] = 0;
            v->n++;
            for (int e = d + 1; e <= v->rank; e++)
                v->first[e]++;
        }
    } else if (kpass_is(n, "Mul") || kpass_is(n, "Div") || kpass_is(n, "Concat")) {
        /* a scalar factor, or a Concat of one tensor: the view is unchanged */
    } else if (!regroup(v, o->rank, o->dims)) { /* Reshape, Unsqueeze, Squeeze, Flatten */
        return false;
    }
    if (v->rank != o->rank)
        return false;
    for (int d = 0; d < v->rank; d++)
        if (dim_of(v, d) != o->dims[d])
            return false;
    return true;
}

/* The strided view: each dim one atom once adjacent atoms that are
 * contiguous with each other are merged. */
static bool to_view(const mv_atoms *v, mv_view *out) {
    out->rank = v->rank;
    out->offset = v->offset;
    for (int d = 0; d < v->rank; d++) {
        int a0 = v->first[d], a1 = v->first[d + 1];
        out->dims[d] = dim_of(v, d);
        out->strides[d] = a1 > a0 ? v->stride[a1 - 1] : 0;
        for (int a = a1 - 1; a > a0; a--)
            if (v->stride[a - 1] != v->stride[a] * v->size[a])
                return false;
    }
    return true;
}

/* The atoms of path w's view at profile point k over its base (over the
 * sunk projection's rows when s is given). */
static bool atoms_at(const kpass *p, int k, const mv_path *w, const mv_sink *s, mv_atoms *v) {
    const kn_tinfo *b = kpass_shape(p, k, w->base);
    if (!b || b->rank < 1)
        return false;
    if (s) {
        /* the projection of x: x's rows, the projection's columns */
        const kn_tinfo *x = kpass_shape(p, k, s->x);
        if (!x || x->rank != b->rank)
            return false;
        int64_t dims[KILN_MAX_DIMS];
        memcpy(dims, x->dims, sizeof dims);
        dims[x->rank - 1] = b->dims[b->rank - 1];
        contiguous(v, x->rank, dims);
        size_t np = 0;
        permute(v, kn_attr_ints(&p->net->nodes[s->tr], "perm", &np));
        for (int d = 0; d < b->rank; d++)
            if (dim_of(v, d) != b->dims[d])
                return false;
    } else {
        contiguous(v, b->rank, b->dims);
    }
    for (int i = w->n - 1; i >= 0; i--)
        if (!apply(p, k, &p->net->nodes[w->node[i]], w->out[i], v))
            return false;
    return true;
}

/* The strided view path w gives at profile point k. */
static bool view_at(const kpass *p, int k, const mv_path *w, const mv_sink *s, mv_view *out) {
    mv_atoms v;
    return atoms_at(p, k, w, s, &v) && to_view(&v, out);
}

/* ---------------- the match ----------------
 * From each Softmax: the score side (pass_attention.c: scale, masks,
 * fill), then what reads the probabilities (the context MatMul, maybe
 * behind SDPA's guard Where(IsNaN(P), 0, P), which kiln::Attention keeps:
 * a row with every key at -inf gives zeros), then Q, K and V walked back
 * through layout ops, scalar scales and (K, V) the Expand that repeats
 * grouped heads. Q, K and V are read in place when the three are slices of
 * one packed projection; otherwise each operand takes the longest part of
 * its walk whose start is a whole tensor in [B, S, H, D] (read in place),
 * [B, H, S, D] or, for K, [B, H, D, S] (transposed to [B, S, H, D] by a
 * Transpose that canonicalization merges with the ones before it). The
 * part of a walk not taken stays in the graph, and dead code removes what
 * nothing reads any more. */

enum { LB, LS, LH, LD }; /* logical dims, in kiln::Attention's order */
static const int layouts[3][4] = {{LB, LS, LH, LD}, {LB, LH, LS, LD}, {LB, LH, LD, LS}};
static const int64_t to_bshd[3][4] = {{0, 1, 2, 3}, {0, 2, 1, 3}, {0, 3, 1, 2}};
static const char *const layout_names[3] = {"[B, S, H, D]", "[B, H, S, D]", "[B, H, D, S]"};

/* One of Q, K, V: its walk and the part the attention takes. */
typedef struct opnd {
    mv_path w;        /* the whole walk */
    int n, base;      /* the part taken (w.node[0 .. n)) and the tensor under it */
    int layout;       /* index in layouts[] */
    int64_t size[4];  /* logical sizes at point 0; H counts the base's heads */
    int64_t group;    /* query heads per base head (K, V of grouped-query attention) */
    double scale;     /* the scalar factors in the part taken */
    int64_t shape[4]; /* the base viewed in its layout (0 copies a dim, -1 infers one) */
    bool reshape;     /* false: the base has that shape already */
} opnd;

typedef struct mha {
    kpass_scores sc;
    int ctx;               /* O = P V */
    int guard[2];          /* IsNaN and Where after the Softmax, or -1 */
    mv_path q, k, v;       /* the whole walks */
    opnd o[3];             /* separate operands */
    mv_sink sink;
    bool sunk, packed;
    int64_t h, d, dv, s, sk; /* heads, head dims, query and key lengths (-1: not static) */
    bool lead;             /* the base's dims 0 and 1 are [B, S] everywhere */
    char why[200];
} mha;

/* Q [B, H, Sq, D], K [B, H, D, Sk], V [B, H, Sk, Dv] views at point k. */
typedef struct qkv_views {
    mv_view q, k, v;
} qkv_views;

static bool fits(int64_t dim, int64_t stride, int64_t want) { return dim == 1 || stride == want; }

/* Q, K, V as the three slices of one [B, S, 3, H, D] tensor. */
static bool packed_at(const qkv_views *x, int64_t numel) {
    const mv_view *q = &x->q, *k = &x->k, *v = &x->v;
    int64_t b = q->dims[0], h = q->dims[1], s = q->dims[2], d = q->dims[3], e = h * d;
    if (k->dims[3] != s || v->dims[2] != s || v->dims[3] != d || numel != b * s * 3 * e)
        return false;
    return fits(b, q->strides[0], s * 3 * e) && fits(h, q->strides[1], d) &&
           fits(s, q->strides[2], 3 * e) && fits(d, q->strides[3], 1) && q->offset == 0 &&
           fits(b, k->strides[0], s * 3 * e) && fits(h, k->strides[1], d) &&
           fits(d, k->strides[2], 1) && fits(s, k->strides[3], 3 * e) && k->offset == e &&
           fits(b, v->strides[0], s * 3 * e) && fits(h, v->strides[1], d) &&
           fits(s, v->strides[2], 3 * e) && fits(d, v->strides[3], 1) && v->offset == 2 * e;
}

static int64_t base_numel(const kpass *p, int k, int base) {
    const kn_tinfo *b = kpass_shape(p, k, base);
    return b ? kn_numel(b->rank, b->dims) : -1;
}

/* Logical sizes and strides of view v (Q, V: [B, H, S, D]; K when kt:
 * [B, H, D, S]). The head dim may end in atoms of stride 0 (an Expand
 * repeating grouped heads): their product goes to *group, and the head
 * size counts the heads under them. */
static bool logical(const mv_atoms *v, bool kt, int64_t *size, int64_t *stride, int64_t *group) {
    static const int qmap[4] = {0, 2, 1, 3}, kmap[4] = {0, 3, 1, 2}; /* logical -> view dim */
    if (v->rank != 4)
        return false;
    *group = 1;
    for (int x = 0; x < 4; x++) {
        int vd = (kt ? kmap : qmap)[x], a0 = v->first[vd], a1 = v->first[vd + 1];
        if (x == LH)
            while (a1 > a0 && v->stride[a1 - 1] == 0) {
                *group *= v->size[a1 - 1];
                a1--;
            }
        size[x] = 1;
        for (int a = a0; a < a1; a++)
            size[x] *= v->size[a];
        stride[x] = a1 > a0 ? v->stride[a1 - 1] : 0;
        for (int a = a1 - 1; a > a0; a--)
            if (v->stride[a - 1] != v->stride[a] * v->size[a])
                return false;
        if (a1 > a0 && stride[x] == 0)
            return false; /* a broadcast elsewhere than over grouped heads */
    }
    return true;
}

/* Whether the logical dims are a whole tensor in layout l. */
static bool fits_layout(int l, const int64_t *size, const int64_t *stride, int64_t offset,
                        int64_t numel) {
    int64_t want = 1;
    for (int pos = 3; pos >= 0; pos--) {
        int x = layouts[l][pos];
        if (!fits(size[x], stride[x], want))
            return false;
        want *= size[x];
    }
    return offset == 0 && numel == want;
}

/* The first n steps of walk w, ending at their base. */
static mv_path prefix(const mv_path *w, int n) {
    mv_path t = *w;
    t.n = n;
    t.base = n < w->n ? w->out[n] : w->base;
    return t;
}

static bool sizes_at(const kpass *p, int k, const opnd *o, bool kt, int64_t *size, int64_t *group) {
    mv_path t = prefix(&o->w, o->n);
    mv_atoms v;
    int64_t stride[4];
    return atoms_at(p, k, &t, NULL, &v) && logical(&v, kt, size, stride, group);
}

/* Whether the first n steps of walk w give operand j (0 Q, 1 K, 2 V) a
 * base in one layout at every profile point, H and D the same at each. */
static bool take_prefix(const kpass *p, const mv_path *w, int n, int j, opnd *o) {
    mv_path t = prefix(w, n);
    o->w = *w;
    o->n = n;
    o->base = t.base;
    o->scale = 1.0;
    for (int i = 0; i < n; i++)
        o->scale *= w->fac[i];
    for (int l = 0; l < (j == 1 ? 3 : 2); l++) {
        bool ok = true;
        for (int k = 0; k < p->n_points && ok; k++) {
            mv_atoms v;
            int64_t size[4], stride[4], g;
            ok = atoms_at(p, k, &t, NULL, &v) && logical(&v, j == 1, size, stride, &g) &&
                 fits_layout(l, size, stride, v.offset, base_numel(p, k, t.base));
            if (ok && k == 0) {
                memcpy(o->size, size, sizeof o->size);
                o->group = g;
            } else if (ok) {
                ok = g == o->group && size[LH] == o->size[LH] && size[LD] == o->size[LD];
            }
        }
        if (ok) {
            o->layout = l;
            return true;
        }
    }
    return false;
}

/* The Reshape that views o's base in its layout: static dims as they are,
 * a dim equal to the base's at the same position as 0, one other as -1. */
static bool base_shape(const kpass *p, opnd *o, bool kt) {
    const int *L = layouts[o->layout];
    int free_dims = 0;
    bool same = true;
    for (int pos = 0; pos < 4; pos++) {
        int x = L[pos];
        bool fixed = true, copy = true;
        for (int k = 0; k < p->n_points; k++) {
            int64_t sz[4], g;
            const kn_tinfo *b = kpass_shape(p, k, o->base);
            if (!sizes_at(p, k, o, kt, sz, &g) || !b)
                return false;
            fixed = fixed && sz[x] == o->size[x];
            copy = copy && b->rank > pos && b->dims[pos] == sz[x];
            same = same && b->rank == 4 && b->dims[pos] == sz[x];
        }
        if (fixed && o->size[x] == 0)
            return false;
        o->shape[pos] = fixed ? o->size[x] : copy ? 0 : -1;
        free_dims += !fixed && !copy;
    }
    o->reshape = !same;
    return free_dims <= 1;
}

/* Whether tensor t is no graph output and every reader of it is in set[]
 * or is `extra`. */
static bool read_within(const kpass *p, int t, const int *set, int n, int extra) {
    if (t >= p->n_tensors || p->is_output[t])
        return false;
    for (int r = p->rd_start[t]; r < p->rd_start[t + 1]; r++) {
        int rd = p->rd_node[r];
        bool in = rd == extra;
        for (int q = 0; q < n && !in; q++)
            in = set[q] == rd;
        if (!in)
            return false;
    }
    return true;
}

/* The nodes in set[] are free and their outputs read only within set[]
 * (or by `extra`). */
static bool closed(const kpass *p, const int *set, int n, int extra) {
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &p->net->nodes[set[i]];
        if (!kpass_free(p, set[i]))
            return false;
        for (int j = 0; j < nd->n_out; j++)
            if (nd->out[j] >= 0 && !read_within(p, nd->out[j], set, n, extra))
                return false;
    }
    return true;
}

static bool add_unique(int *set, int *n, int cap, int v) {
    if (v < 0)
        return true;
    for (int i = 0; i < *n; i++)
        if (set[i] == v)
            return true;
    if (*n >= cap)
        return false;
    set[(*n)++] = v;
    return true;
}

#define MHA_SET (3 * MV_STEPS + 12)

/* What reads the probabilities: the context MatMul, directly or behind
 * Where(IsNaN(P), 0, P). NULL when found, else the reason. */
static const char *context(const kpass *p, int si, mha *m) {
    const kn_net *net = p->net;
    int pout = net->nodes[si].out[0], in = pout;
    if (p->is_output[pout])
        return "the probabilities are a graph output";
    int nr = p->rd_start[pout + 1] - p->rd_start[pout];
    if (nr == 2) {
        int isn = -1, wh = -1;
        for (int r = p->rd_start[pout]; r < p->rd_start[pout + 1]; r++) {
            int rd = p->rd_node[r];
            const kn_node *n = &net->nodes[rd];
            if (kpass_is(n, "IsNaN") && n->n_in == 1)
                isn = rd;
            else if (kpass_is(n, "Where") && n->n_in == 3 && n->in[2] == pout)
                wh = rd;
        }
        double c;
        if (isn < 0 || wh < 0 || !kpass_free(p, isn) || !kpass_free(p, wh) ||
            kpass_sole_reader(p, net->nodes[isn].out[0]) != wh ||
            net->nodes[wh].in[0] != net->nodes[isn].out[0] ||
            !kpass_const_scalar(net, net->nodes[wh].in[1], &c) || c != 0.0)
            return "the probabilities have two readers that are not SDPA's NaN guard "
                   "Where(IsNaN(P), 0, P)";
        m->guard[0] = isn;
        m->guard[1] = wh;
        in = net->nodes[wh].out[0];
    } else if (nr != 1) {
        return "the probabilities are read outside the attention";
    }
    m->ctx = kpass_sole_reader(p, in);
    if (m->ctx < 0 || !kpass_is(&net->nodes[m->ctx], "MatMul") || net->nodes[m->ctx].in[0] != in)
        return "the probabilities are not the left operand of a MatMul read by nothing else";
    if (!kpass_free(p, m->ctx))
        return "the context MatMul was rewritten already";
    return NULL;
}

/* The packed form: Q, K and V slices of one [B, S, 3, H, D] tensor. NULL
 * when it holds (set[] filled), else the reason. */
static const char *match_packed(const kpass *p, int si, mha *m, int *set, int *n_set) {
    m->sunk = sinkable(p, m->q.base, &m->sink);
    const mv_sink *sk = m->sunk ? &m->sink : NULL;
    m->lead = true;
    for (int k = 0; k < p->n_points; k++) {
        qkv_views x;
        if (!view_at(p, k, &m->q, sk, &x.q) || !view_at(p, k, &m->k, sk, &x.k) ||
            !view_at(p, k, &m->v, sk, &x.v))
            return "Q, K, V come from one tensor but not as strided views of it";
        int64_t h = x.q.dims[1], d = x.q.dims[3], s = x.q.dims[2];
        if (x.k.dims[0] != x.q.dims[0] || x.v.dims[0] != x.q.dims[0] || x.k.dims[1] != h ||
            x.v.dims[1] != h || x.k.dims[2] != d)
            return "Q, K, V of one tensor disagree on batch, heads or head size";
        if (k == 0) {
            m->h = h, m->d = d, m->dv = x.v.dims[3], m->s = s, m->sk = x.k.dims[3];
        } else if (m->h != h || m->d != d || m->dv != x.v.dims[3]) {
            return "heads or head size differ between profile points";
        } else {
            m->s = m->s == s ? s : -1;
            m->sk = m->sk == x.k.dims[3] ? m->sk : -1;
        }
        if (!packed_at(&x, base_numel(p, k, m->q.base)))
            return "Q, K, V of one tensor are not its [B, S, 3, H, D] slices";
        const kn_tinfo *bt = kpass_shape(p, k, sk ? sk->x : m->q.base);
        m->lead &= bt && bt->rank >= 3 && bt->dims[0] == x.q.dims[0] && bt->dims[1] == s;
    }
    if (!m->lead && (m->s < 0 || m->sk < 0))
        return "no reshape says [B, S, 3, H, D] at every profile point";
    int n = 0;
    bool ok = add_unique(set, &n, MHA_SET, si) && add_unique(set, &n, MHA_SET, m->sc.scores) &&
              add_unique(set, &n, MHA_SET, m->sc.add) && add_unique(set, &n, MHA_SET, m->sc.add2) &&
              add_unique(set, &n, MHA_SET, m->sc.scale_node) &&
              add_unique(set, &n, MHA_SET, m->sc.fill) && add_unique(set, &n, MHA_SET, m->guard[0]) &&
              add_unique(set, &n, MHA_SET, m->guard[1]) && add_unique(set, &n, MHA_SET, m->sc.split) &&
              add_unique(set, &n, MHA_SET, m->sc.merge);
    const mv_path *paths[3] = {&m->q, &m->k, &m->v};
    for (int j = 0; j < 3 && ok; j++)
        for (int i = 0; i < paths[j]->n && ok; i++)
            ok = add_unique(set, &n, MHA_SET, paths[j]->node[i]);
    if (!ok || !closed(p, set, n, m->ctx))
        return "a layout op between the packed tensor and the attention is read elsewhere";
    if (m->sunk && !read_within(p, m->q.base, set, n, -1))
        return "the packed projection is read outside the attention";
    *n_set = n;
    return NULL;
}

static const char *match(const kpass *p, int si, mha *m, int *set, int *n_set) {
    const kn_net *net = p->net;
    memset(m, 0, sizeof *m);
    m->guard[0] = m->guard[1] = -1;
    if (!kpass_attn_scores(p, si, &m->sc))
        return m->sc.why;
    const char *why = context(p, si, m);
    if (why)
        return why;
    const kn_node *sc = &net->nodes[m->sc.scores];
    int a = sc->in[0], bk = sc->in[1], vt = net->nodes[m->ctx].in[1];
    if (kpass_rank(p, a) != 4 || kpass_rank(p, bk) != 4 || kpass_rank(p, vt) != 4)
        return "Q, K^T or V is not of rank 4 at every profile point";
    walk_ex(p, a, true, false, &m->q);
    walk_ex(p, bk, true, true, &m->k);
    walk_ex(p, vt, false, true, &m->v);
    if (m->q.n && m->k.n && m->v.n && m->q.base == m->k.base && m->k.base == m->v.base) {
        why = match_packed(p, si, m, set, n_set);
        if (!why) {
            m->packed = true;
            return NULL;
        }
        m->sunk = false;
    }
    /* separate operands */
    const mv_path *paths[3] = {&m->q, &m->k, &m->v};
    static const char *const names[3] = {"Q", "K", "V"};
    for (int j = 0; j < 3; j++) {
        int n = paths[j]->n;
        while (n >= 0 && !take_prefix(p, paths[j], n, j, &m->o[j]))
            n--;
        if (n < 0) {
            snprintf(m->why, sizeof m->why,
                     "%s is no whole [B, H, S, D] tensor at every profile point (heads or head "
                     "size vary, or its shape is unknown)", names[j]);
            return m->why;
        }
        if (!base_shape(p, &m->o[j], j == 1)) {
            snprintf(m->why, sizeof m->why,
                     "%s's base in %s layout has more than one dim that varies on its own", names[j],
                     layout_names[m->o[j].layout]);
            return m->why;
        }
    }
    const opnd *q = &m->o[0], *k = &m->o[1], *v = &m->o[2];
    if (q->group != 1)
        return "Q repeats its heads";
    if (k->size[LH] != v->size[LH] || k->group != v->group || k->size[LH] * k->group != q->size[LH])
        return "K and V do not have the same heads, or not a divisor of Q's";
    if (k->size[LD] != q->size[LD])
        return "Q and K head sizes differ";
    for (int pt = 0; pt < p->n_points; pt++) {
        int64_t sq[4], sk[4], sv[4], g;
        if (!sizes_at(p, pt, q, false, sq, &g) || !sizes_at(p, pt, k, true, sk, &g) ||
            !sizes_at(p, pt, v, false, sv, &g))
            return "Q, K or V has no known shape at some profile point";
        if (sq[LB] != sk[LB] || sq[LB] != sv[LB])
            return "Q, K and V batches differ (a broadcast batch)";
        if (sk[LS] != sv[LS])
            return "K and V lengths differ";
    }
    int n = 0;
    bool ok = add_unique(set, &n, MHA_SET, si) && add_unique(set, &n, MHA_SET, m->sc.scores) &&
              add_unique(set, &n, MHA_SET, m->sc.add) && add_unique(set, &n, MHA_SET, m->sc.add2) &&
              add_unique(set, &n, MHA_SET, m->sc.scale_node) &&
              add_unique(set, &n, MHA_SET, m->sc.fill) && add_unique(set, &n, MHA_SET, m->guard[0]) &&
              add_unique(set, &n, MHA_SET, m->guard[1]) && add_unique(set, &n, MHA_SET, m->sc.split) &&
              add_unique(set, &n, MHA_SET, m->sc.merge);
    if (!ok || !closed(p, set, n, m->ctx))
        return "an intermediate of the scores is read outside the attention";
    *n_set = n;
    return NULL;
}

/* A Reshape of `from` to [B, S, (3,) H, D] written to a fresh tensor. */
static kiln_status heads_view(kpass *p, const mha *m, int from, int64_t seq, int64_t hd,
                              bool packed, const char *name, int *out) {
    kn_net *net = p->net;
    int64_t shape[5], n = 0;
    shape[n++] = m->lead ? 0 : -1;
    shape[n++] = m->lead ? 0 : seq;
    if (packed)
        shape[n++] = 3;
    shape[n++] = m->h;
    shape[n++] = hd;
    int sh, node;
    KN_TRY(kpass_add_i64(net, "heads_shape", shape, n, &sh));
    KN_TRY(kn_net_new_tensor(net, "heads", out));
    int in2[2] = {from, sh};
    KN_TRY(kn_net_add_node(net, name, "Reshape", "", 14, 2, in2, 1, out, &node));
    return KILN_OK;
}

/* Operand o as kiln::Attention reads it: [B, S, H, D], its base viewed in
 * its layout and transposed when that is not the attention's. */
static kiln_status operand_input(kpass *p, const opnd *o, const char *name, int *out) {
    kn_net *net = p->net;
    char nm[600];
    int t = o->base, node;
    if (o->reshape) {
        int sh, r;
        KN_TRY(kpass_add_i64(net, "heads_shape", o->shape, 4, &sh));
        KN_TRY(kn_net_new_tensor(net, "heads", &r));
        int in2[2] = {t, sh};
        snprintf(nm, sizeof nm, "%s heads", name);
        KN_TRY(kn_net_add_node(net, nm, "Reshape", "", 14, 2, in2, 1, &r, &node));
        t = r;
    }
    if (o->layout != 0) {
        int tr;
        KN_TRY(kn_net_new_tensor(net, "heads_bshd", &tr));
        snprintf(nm, sizeof nm, "%s heads to [B, S, H, D]", name);
        KN_TRY(kn_net_add_node(net, nm, "Transpose", "", 13, 1, &t, 1, &tr, &node));
        KN_TRY(kn_node_set_ints(&net->nodes[node], "perm", to_bshd[o->layout], 4));
        t = tr;
    }
    *out = t;
    return KILN_OK;
}

static bool is_softmax(const kn_node *n) { return kpass_is(n, "Softmax"); }

/* Whether Softmax node si looks like attention (scores of rank 4 over the
 * last axis): the ones whose miss is worth a log line. */
static bool attention_like(const kpass *p, int si) {
    const kn_node *sm = &p->net->nodes[si];
    return kpass_is(sm, "Softmax") && sm->n_in == 1 && kpass_rank(p, sm->in[0]) == 4 &&
           kpass_free(p, si);
}

static kiln_status fuse(kpass *p, int si, mha *m, const int *set, int n_set) {
    kn_net *net = p->net;
    if (m->sunk) {
        /* the projection reads the rows in their own order */
        kn_node *mm = &net->nodes[m->sink.mm];
        mm->in[0] = m->sink.x;
        kpass_touch(p, m->sink.mm);
        kpass_touch(p, m->sink.top);
        kpass_kill(p, m->sink.tr);
    }
    char name[512];
    int ins[3] = {-1, -1, -1}, mask;
    snprintf(name, sizeof name, "%s", net->nodes[m->sc.scores].name);
    KN_TRY(kpass_scores_mask(p, &m->sc, name, &mask));
    double scale = m->sc.scale;
    if (m->packed) {
        snprintf(name, sizeof name, "%s heads", net->nodes[m->sc.scores].name);
        KN_TRY(heads_view(p, m, m->q.base, m->s, m->d, true, name, &ins[0]));
        scale *= m->q.scale * m->k.scale;
    } else {
        for (int j = 0; j < 3; j++)
            KN_TRY(operand_input(p, &m->o[j], name, &ins[j]));
        scale *= m->o[0].scale * m->o[1].scale;
    }
    /* the context MatMul becomes the attention, writing [B, S, H, Dv] */
    int o = net->nodes[m->ctx].out[0], yt, tn;
    KN_TRY(kpass_to_attention(p, m->ctx, m->sc.scores, si, ins, mask, (float)scale));
    if (m->packed)
        KN_TRY(kn_node_set_int(&net->nodes[m->ctx], "qkv_packed", 1));
    if (mask >= 0 && m->sc.split >= 0) /* a per-window mask: batch b reads mask batch b % G */
        KN_TRY(kn_node_set_int(&net->nodes[m->ctx], "mask_batch_mod", 1));
    snprintf(name, sizeof name, "%s_bshd", net->tensors[o].name);
    KN_TRY(kn_net_new_tensor(net, name, &yt));
    kpass_set_output(net, m->ctx, 0, yt);
    snprintf(name, sizeof name, "%s (heads first)", net->nodes[m->ctx].name);
    KN_TRY(kn_net_add_node(net, name, "Transpose", "", 13, 1, &yt, 1, &o, &tn));
    KN_TRY(kn_node_set_ints(&net->nodes[tn], "perm", (const int64_t[]){0, 2, 1, 3}, 4));
    for (int k = 0; k < n_set; k++)
        kpass_kill(p, set[k]);
    const kn_node *an = &net->nodes[m->ctx];
    char layout[160] = "";
    if (!m->packed)
        snprintf(layout, sizeof layout, "Q %s, K %s, V %s%s", layout_names[m->o[0].layout],
                 layout_names[m->o[1].layout], layout_names[m->o[2].layout],
                 m->o[1].group > 1 ? ", grouped K/V heads" : "");
    kn_log(KILN_LOG_VERBOSE, "attention: '%s' is one layer (scale %g, %s, %s mask%s%s)", an->name,
           (double)kn_attr_float(an, "scale", 1.f), m->packed ? "packed Q, K, V" : layout,
           mask < 0 ? "no" : m->sc.split >= 0 ? "with a per-window" : "with", m->guard[0] >= 0 ? ", NaN guard kept" : "",
           m->sunk ? ", projection reads its input untransposed" : "");
    return KILN_OK;
}

kiln_status kpass_attention(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool ready;
    KN_TRY(kpass_attn_ops(p, changed));
    KN_TRY(kpass_shapes_if(p, is_softmax, &ready));
    if (!ready)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        mha m;
        int set[MHA_SET], n_set = 0;
        if (net->nodes[i].dead || !is_softmax(&net->nodes[i]))
            continue;
        const char *why = match(p, i, &m, set, &n_set);
        if (why) {
            if (attention_like(p, i))
                kn_log(KILN_LOG_VERBOSE, "attention: Softmax '%s' not fused: %s",
                       net->nodes[i].name, why);
            continue;
        }
        KN_TRY(fuse(p, i, &m, set, n_set));
        (*changed)++;
    }
    return KILN_OK;
}

/* ---------------- row-wise ops between permutes ----------------
 * After the attention, torch's MultiheadAttention permutes the heads back
 * to sequence-first ([S, B, H, D]), reshapes to [S*B, E], applies its
 * output projection and permutes the result back to [B, S, E]: two
 * transposed copies around a projection that treats every row alone.
 * When the row order the projection sees, followed by the reordering after
 * it, is the identity (checked row by row at every profile point), the
 * projection reads the rows in their first order and the copies go. The
 * same rewrite takes a Gemm between a Reshape to rows and one back (GPT-2's
 * Conv1D layers): as a MatMul on the whole tensor its bias, activation and
 * residual join its epilogue.
 *   Z = after(G(before(Y)))  ->  Z = Reshape(G(Reshape(Y, [-1, E])),
 *                                            Y's leading dims + [E']). */

/* Offset of row r of a view whose last dim is one atom: the leading atoms
 * are the row number's mixed-radix digits. */
static int64_t row_offset(const mv_atoms *v, int64_t r) {
    int64_t off = v->offset;
    for (int a = v->first[v->rank - 1] - 1; a >= 0; a--) {
        off += (r % v->size[a]) * v->stride[a];
        r /= v->size[a];
    }
    return off;
}

/* A view whose last dim is exactly the base's rows of `cols` elements
 * (its atoms merged into one); the last dim becomes that one atom. */
static bool whole_rows(mv_atoms *v, int64_t cols) {
    int r = v->rank;
    if (r < 1 || v->offset % cols)
        return false;
    int a0 = v->first[r - 1], a1 = v->first[r];
    for (int a = a1 - 1; a > a0; a--)
        if (v->stride[a - 1] != v->stride[a] * v->size[a])
            return false;
    if (a1 == a0 || dim_of(v, r - 1) != cols || v->stride[a1 - 1] != 1)
        return false;
    v->size[a0] = cols;
    v->stride[a0] = 1;
    v->n = a0 + 1;
    v->first[r] = v->n;
    return true;
}

#define ROWS_MAX (1 << 24)

static bool rows_identity(const kpass *p, const mv_path *before, const mv_path *after,
                          int64_t e, int64_t e2) {
    for (int k = 0; k < p->n_points; k++) {
        mv_atoms va, vz;
        if (!atoms_at(p, k, before, NULL, &va) || !atoms_at(p, k, after, NULL, &vz) || !whole_rows(&va, e) ||
            !whole_rows(&vz, e2))
            return false;
        const kn_tinfo *z = kpass_shape(p, k, after->t);
        int64_t rows = kn_numel(z->rank, z->dims) / e2;
        if (rows <= 0 || rows > ROWS_MAX)
            return false;
        for (int64_t i = 0; i < rows; i++) {
            int64_t oz = row_offset(&vz, i);
            if (oz % e2 || row_offset(&va, oz / e2) != i * e)
                return false;
        }
    }
    return true;
}

/* Shape(y) without its last `tail` dims, then `cols`: a fresh tensor. */
static kiln_status lead_shape(kpass *p, int y, int tail, int64_t cols, const char *what,
                              int *out) {
    kn_net *net = p->net;
    char name[600];
    int sy, c, node, yr = kpass_rank(p, y);
    KN_TRY(kn_net_new_tensor(net, "lead_shape", &sy));
    snprintf(name, sizeof name, "%s leading dims", what);
    KN_TRY(kn_net_add_node(net, name, "Shape", "", 15, 1, &y, 1, &sy, &node));
    KN_TRY(kn_node_set_int(&net->nodes[node], "end", yr - tail));
    KN_TRY(kpass_add_i64(net, "cols", &cols, 1, &c));
    KN_TRY(kn_net_new_tensor(net, "rows_shape", out));
    int in2[2] = {sy, c};
    snprintf(name, sizeof name, "%s shape", what);
    KN_TRY(kn_net_add_node(net, name, "Concat", "", 13, 2, in2, 1, out, &node));
    return kn_node_set_int(&net->nodes[node], "axis", 0);
}

/* W transposed, a new constant (any element size). */
static kiln_status transposed(kn_net *net, int w, int *out) {
    const kn_tdata *v = &net->tensors[w].value;
    int64_t dims[2] = {v->dims[1], v->dims[0]};
    size_t es = kiln_dtype_size(v->dtype);
    kn_tdata t;
    KN_TRY(kn_tdata_alloc(&t, v->dtype, 2, dims));
    void *tmp = NULL;
    const uint8_t *src = kn_tdata_aligned(v, &tmp);
    if (!src) {
        kn_tdata_free(&t);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    uint8_t *dst = t.data;
    for (int64_t r = 0; r < v->dims[0]; r++)
        for (int64_t c = 0; c < v->dims[1]; c++)
            memcpy(dst + (size_t)(c * v->dims[0] + r) * es, src + (size_t)(r * v->dims[1] + c) * es, es);
    kn_aligned_free(tmp);
    return kpass_add_const(net, "weight_t", &t, out);
}

/* Rewire row op gi to read Y's rows (Y's last `tail` dims hold a row of e)
 * and write Z (Y's leading dims, then e2): a MatMul reads Y viewed as
 * [lead.., e] and writes Z; a plain Gemm (alpha 1, beta 1) becomes that
 * MatMul and a bias Add, which the epilogue passes take back; another Gemm
 * reads [rows, e] and a Reshape gives Z. */
static kiln_status rows_in_place(kpass *p, int gi, int y, int z, int tail, int64_t e, int64_t e2) {
    kn_net *net = p->net;
    kn_node *g = &net->nodes[gi];
    char what[512];
    snprintf(what, sizeof what, "%s rows", g->name);
    bool mm = kpass_is(g, "MatMul") || kpass_is_kiln(g, "MatMul");
    bool plain_gemm = kpass_is(g, "Gemm") && kn_attr_float(g, "alpha", 1.f) == 1.f &&
                      (g->n_in < 3 || g->in[2] < 0 || kn_attr_float(g, "beta", 1.f) == 1.f);
    int yv = y, node, sh;
    if (mm || plain_gemm) {
        if (tail != 1) {
            KN_TRY(lead_shape(p, y, tail, e, what, &sh));
            KN_TRY(kn_net_new_tensor(net, "rows", &yv));
            int in2[2] = {y, sh};
            KN_TRY(kn_net_add_node(net, what, "Reshape", "", 14, 2, in2, 1, &yv, &node));
        }
        g = &net->nodes[gi];
        if (mm) {
            g->in[0] = yv;
            kpass_set_output(net, gi, 0, z);
            kpass_touch(p, gi);
            return KILN_OK;
        }
        int w = g->in[1], bias = g->n_in > 2 ? g->in[2] : -1;
        if (kn_attr_int(g, "transB", 0))
            KN_TRY(transposed(net, w, &w));
        g = &net->nodes[gi];
        int mo = z;
        if (bias >= 0)
            KN_TRY(kn_net_new_tensor(net, "rows_mm", &mo));
        int in2[2] = {yv, w};
        KN_TRY(kn_net_add_node(net, net->nodes[gi].name, "MatMul", "", 13, 2, in2, 1, &mo, &node));
        if (bias >= 0) {
            int ab[2] = {mo, bias};
            snprintf(what, sizeof what, "%s bias", net->nodes[gi].name);
            KN_TRY(kn_net_add_node(net, what, "Add", "", 14, 2, ab, 1, &z, &node));
        }
        kpass_kill(p, gi);
        return KILN_OK;
    }
    int64_t rs[2] = {-1, e};
    int rows_in, gout, zshape;
    KN_TRY(kpass_add_i64(net, "rows_shape", rs, 2, &sh));
    KN_TRY(kn_net_new_tensor(net, "rows", &rows_in));
    int in2[2] = {y, sh};
    KN_TRY(kn_net_add_node(net, what, "Reshape", "", 14, 2, in2, 1, &rows_in, &node));
    KN_TRY(lead_shape(p, y, tail, e2, what, &zshape));
    KN_TRY(kn_net_new_tensor(net, "rows_out", &gout));
    net->nodes[gi].in[0] = rows_in;
    kpass_set_output(net, gi, 0, gout);
    int zin[2] = {gout, zshape};
    snprintf(what, sizeof what, "%s back to rows", net->nodes[gi].name);
    KN_TRY(kn_net_add_node(net, what, "Reshape", "", 14, 2, zin, 1, &z, &node));
    kpass_touch(p, gi);
    return KILN_OK;
}

/* Whether n may be a row op (the constant-weight test needs the net). */
static bool is_matrix_op(const kn_node *n) {
    return kpass_is(n, "Gemm") || kpass_is_kiln(n, "Gemm") || kpass_is(n, "MatMul") ||
           kpass_is_kiln(n, "MatMul");
}

kiln_status kpass_row_permutes(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool ready;
    KN_TRY(kpass_shapes_if(p, is_matrix_op, &ready));
    if (!ready)
        return KILN_OK;
    for (int gi = 0; gi < p->n_nodes; gi++) {
        const kn_node *g = &net->nodes[gi];
        if (!kpass_free(p, gi) || !row_op(net, g))
            continue;
        /* before: G's input back to a tensor Y through layout ops */
        mv_path before, after;
        walk(p, g->in[0], false, &before);
        if (before.n == 0)
            continue;
        /* after: G's output forward through sole-reader layout ops to Z */
        int z = g->out[0], steps = 0;
        for (;;) {
            int r = kpass_sole_reader(p, z);
            if (r < 0 || steps >= MV_STEPS || !is_view_op(&net->nodes[r]) ||
                kpass_is(&net->nodes[r], "Split") || net->nodes[r].in[0] != z)
                break;
            z = net->nodes[r].out[0];
            steps++;
        }
        if (steps == 0)
            continue;
        walk(p, z, false, &after);
        int y = before.base;
        if (after.base != g->out[0] || after.n != steps || kpass_rank(p, y) < 2)
            continue;
        bool ok = true;
        for (int i = 0; i < before.n && ok; i++)
            ok = kpass_free(p, before.node[i]) && kpass_sole_reader(p, before.out[i]) ==
                 (i == 0 ? gi : before.node[i - 1]) && !kpass_is(&net->nodes[before.node[i]], "Split");
        for (int i = 0; i < after.n && ok; i++)
            ok = kpass_free(p, after.node[i]);
        if (!ok)
            continue;
        const kn_tinfo *a0 = kpass_shape(p, 0, g->in[0]), *g0 = kpass_shape(p, 0, g->out[0]);
        if (!a0 || !g0)
            continue;
        /* G's rows are E = A's columns: Y's last `tail` dims */
        int64_t e = a0->dims[a0->rank - 1], e2 = g0->dims[g0->rank - 1];
        int tail = -1;
        bool same_cols = true;
        for (int k = 0; k < p->n_points && same_cols; k++) {
            const kn_tinfo *ak = kpass_shape(p, k, g->in[0]), *gk = kpass_shape(p, k, g->out[0]);
            const kn_tinfo *yk = kpass_shape(p, k, y), *zk = kpass_shape(p, k, z);
            same_cols = ak && gk && yk && zk && ak->dims[ak->rank - 1] == e &&
                        gk->dims[gk->rank - 1] == e2;
            int64_t prod = 1;
            int t = 0;
            while (same_cols && t < yk->rank && prod < e)
                prod *= yk->dims[yk->rank - 1 - t++];
            same_cols = same_cols && prod == e && (tail < 0 || tail == t) &&
                        zk->rank == yk->rank - t + 1 && zk->dims[zk->rank - 1] == e2 &&
                        memcmp(zk->dims, yk->dims, sizeof(int64_t) * (size_t)(zk->rank - 1)) == 0;
            tail = t;
        }
        if (!same_cols || !rows_identity(p, &before, &after, e, e2))
            continue;
        KN_TRY(rows_in_place(p, gi, y, z, tail, e, e2));
        for (int i = 0; i < before.n; i++)
            kpass_kill(p, before.node[i]);
        for (int i = 0; i < after.n; i++)
            kpass_kill(p, after.node[i]);
        kn_log(KILN_LOG_VERBOSE, "row-permutes: '%s' reads its rows in place (%d layout op(s) "
               "before, %d after)", net->nodes[gi].name, before.n, after.n);
        (*changed)++;
    }
    return KILN_OK;
}

/* ---------------- layout chains that move nothing ----------------
 * A chain of Transpose/Reshape/Flatten/Squeeze/Unsqueeze whose end, at
 * every profile point, reads its start's elements in their own order is a
 * Reshape (an alias, no copy): ViT's patch grid permuted to channels-first
 * by the patch GEMM, then flattened and permuted back to tokens by the
 * model, is one. */

static bool plain_view_op(const kn_node *n) {
    return is_view_op(n) && !kpass_is(n, "Split");
}

/* Whether v reads its base in order: offset 0, every atom contiguous with
 * the next. */
static bool in_order(const mv_atoms *v) {
    if (v->offset != 0)
        return false;
    for (int a = 0; a < v->n; a++)
        if (v->stride[a] != (a + 1 < v->n ? v->stride[a + 1] * v->size[a + 1] : 1))
            return false;
    return true;
}

static bool is_transpose(const kn_node *n) { return kpass_is(n, "Transpose"); }

kiln_status kpass_view_chains(kpass *p, int *changed) {
    kn_net *net = p->net;
    bool ready;
    KN_TRY(kpass_shapes_if(p, is_transpose, &ready));
    if (!ready)
        return KILN_OK;
    for (int i = 0; i < p->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        if (!kpass_free(p, i) || !plain_view_op(n) || n->n_out < 1 || n->out[0] < 0)
            continue;
        /* the chain's end: a reader that is not a layout op continues it */
        int rd = kpass_sole_reader(p, n->out[0]);
        if (rd >= 0 && plain_view_op(&net->nodes[rd]) && net->nodes[rd].in[0] == n->out[0])
            continue;
        mv_path w;
        memset(&w, 0, sizeof w);
        w.t = n->out[0];
        int cur = w.t;
        bool transposes = false;
        while (w.n < MV_STEPS) {
            int pr = kpass_producer(p, cur);
            if (pr < 0 || !plain_view_op(&net->nodes[pr]) || !kpass_free(p, pr) ||
                (cur != w.t && kpass_sole_reader(p, cur) != w.node[w.n - 1]))
                break;
            transposes |= kpass_is(&net->nodes[pr], "Transpose");
            w.node[w.n] = pr;
            w.out[w.n++] = cur;
            cur = net->nodes[pr].in[0];
        }
        w.base = cur;
        if (!transposes || w.n < 1)
            continue;
        if (w.n == 1) { /* a Transpose alone: only one that moves size-1 dims (canonicalize
                         * takes the identity) */
            size_t np = 0;
            const int64_t *pm = kn_attr_ints(&net->nodes[w.node[0]], "perm", &np);
            bool ident = pm != NULL;
            for (size_t k = 0; pm && k < np; k++)
                ident &= pm[k] == (int64_t)k;
            if (ident)
                continue;
        }
        const kn_tinfo *t0 = kpass_shape(p, 0, w.t), *b0 = kpass_shape(p, 0, w.base);
        if (!t0 || !b0 || t0->rank < 1)
            continue;
        /* a data-dependent dim is an upper bound at every profile point: it
         * would look fixed and be written into the Reshape's shape */
        if (p->dd[w.t] || p->dd[w.base])
            continue;
        bool ok = true;
        for (int k = 0; k < p->n_points && ok; k++) {
            mv_atoms v;
            ok = atoms_at(p, k, &w, NULL, &v) && in_order(&v);
        }
        if (!ok)
            continue;
        /* the shape: static dims as they are, the base's dim at the same
         * position as 0, one other as -1 */
        int64_t shape[KILN_MAX_DIMS];
        int free_dims = 0;
        for (int d = 0; d < t0->rank && ok; d++) {
            bool fixed = true, same = d < b0->rank;
            for (int k = 0; k < p->n_points; k++) {
                const kn_tinfo *tk = kpass_shape(p, k, w.t), *bk = kpass_shape(p, k, w.base);
                fixed = fixed && tk->dims[d] == t0->dims[d];
                same = same && bk && d < bk->rank && bk->dims[d] == tk->dims[d];
            }
            shape[d] = fixed ? t0->dims[d] : same ? 0 : -1;
            free_dims += !fixed && !same;
            ok = free_dims <= 1 && !(fixed && t0->dims[d] == 0);
        }
        if (!ok)
            continue;
        int sh, node, out = w.t;
        KN_TRY(kpass_add_i64(net, "view_shape", shape, t0->rank, &sh));
        char name[600];
        snprintf(name, sizeof name, "%s (in order)", net->nodes[i].name);
        int in2[2] = {w.base, sh};
        for (int k = 0; k < w.n; k++)
            kpass_kill(p, w.node[k]);
        KN_TRY(kn_net_add_node(net, name, "Reshape", "", 14, 2, in2, 1, &out, &node));
        kn_log(KILN_LOG_VERBOSE, "view-chains: %d layout op(s) ending at '%s' are one Reshape",
               w.n, name);
        (*changed)++;
    }
    return KILN_OK;
}

/* ---------------- causal masks ----------------
 * A kiln::Attention whose mask is a constant [.., S, S] of 0 on and below
 * the diagonal and at most -1e4 above it (GPT-2's export, decoder blocks),
 * with S both the query and the key count everywhere, is marked causal=1
 * and loses the mask: every kernel masks by position (a key above the
 * diagonal gets -inf instead of the constant's at most -1e4: exp of either
 * is 0 in float, and no row is fully masked). Masks computed at run time
 * are pass_causal.c's. */

static bool causal_mask(const kn_tdata *m, int64_t s) {
    if (m->rank < 2 || m->rank > 4 || m->dims[m->rank - 1] != s || m->dims[m->rank - 2] != s)
        return false;
    for (int d = 0; d + 2 < m->rank; d++)
        if (m->dims[d] != 1)
            return false;
    for (int64_t i = 0; i < s; i++)
        for (int64_t j = 0; j < s; j++) {
            double v = kpass_value_at(m, i * s + j);
            if (j <= i ? v != 0.0 : !(v <= -1e4))
                return false;
        }
    return true;
}

kiln_status kpass_attn_causal(kpass *p, int *changed) {
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        kn_node *a = &net->nodes[i];
        if (!kpass_free(p, i) || !kpass_is_kiln(a, "Attention") || a->n_in < 4 || a->in[3] < 0 ||
            !kpass_is_const(net, a->in[3]) || kn_attr_int(a, "causal", 0))
            continue;
        KN_TRY(kpass_need_shapes(p));
        if (p->shapes_state != 1)
            return KILN_OK;
        a = &net->nodes[i];
        bool packed = kn_attr_int(a, "qkv_packed", 0) != 0;
        int64_t s = -1;
        bool ok = true;
        for (int k = 0; k < p->n_points && ok; k++) {
            const kn_tinfo *q = kpass_shape(p, k, a->in[0]);
            const kn_tinfo *kt = packed ? q : (a->in[1] >= 0 ? kpass_shape(p, k, a->in[1]) : NULL);
            ok = q && kt && q->rank >= 2 && kt->rank >= 2 && q->dims[1] == kt->dims[1] &&
                 (s < 0 || q->dims[1] == s);
            if (ok)
                s = q->dims[1];
        }
        if (!ok || s < 1 || s > 4096 || !causal_mask(&net->tensors[a->in[3]].value, s))
            continue;
        KN_TRY(kn_node_set_int(a, "causal", 1));
        net->nodes[i].in[3] = -1;
        kpass_touch(p, i);
        kn_log(KILN_LOG_VERBOSE, "attention-causal: '%s' has a causal mask over %lld tokens", a->name,
               (long long)s);
        (*changed)++;
    }
    return KILN_OK;
}
