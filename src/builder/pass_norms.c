/* pass_norms.c - normalizations as exporters spell them out become one
 * LayerNormalization or RMSNormalization over the last axis (which the
 * layernorm pass may then join with the sum before it):
 *   RMSNorm   x * 1 / Sqrt(ReduceMean(x^2) + eps)          (Llama, T5)
 *             with Div(1, .), Reciprocal, Div(x, Sqrt(.)) or Pow(., -0.5),
 *             x^2 as Pow(x, 2) or x * x, then an optional Mul by a constant
 *             weight of the row's width;
 *   LayerNorm d = x - ReduceMean(x); d / Sqrt(ReduceMean(d^2) + eps)
 *             (or d * Reciprocal / Pow(., -0.5)), then optional Mul by a
 *             constant gamma and Add of a constant beta.
 * ReduceMean over the last axis (axes as attribute or constant input, kept
 * dims); every intermediate has one reader (d two, both in the pattern)
 * and is not a graph output. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

#define NORM_MAX_NODES 12

typedef struct nmatch {
    int n;
    int nodes[NORM_MAX_NODES];
    int x;        /* normalized input */
    int y;        /* result tensor (the last node's output) */
    int scale;    /* constant weight tensor or -1 */
    int bias;     /* constant bias tensor or -1 (LayerNorm) */
    double eps;
} nmatch;

static void push(nmatch *m, int node) {
    if (m->n < NORM_MAX_NODES)
        m->nodes[m->n++] = node;
}

static bool near(double v, double want) { return fabs(v - want) <= 1e-6 * fabs(want) + 1e-12; }

/* Node i is binary `op` reading t and a constant scalar; returns the scalar's slot or -1. */
static int with_scalar(const kpass *p, int i, const char *op, int t, double *v) {
    if (i < 0)
        return -1;
    const kn_node *n = &p->net->nodes[i];
    if (!kpass_is(n, op) || n->n_in != 2 || n->n_out < 1)
        return -1;
    for (int s = 0; s < 2; s++)
        if (n->in[1 - s] == t && kpass_const_scalar(p->net, n->in[s], v))
            return s;
    return -1;
}

/* Output of node i (its only output slot in use). */
static int out0(const kpass *p, int i) { return p->net->nodes[i].out[0]; }

/* ReduceMean node i of t over the last axis with kept dims. */
static bool mean_last(const kpass *p, int i, int t) {
    const kn_net *net = p->net;
    if (i < 0)
        return false;
    const kn_node *n = &net->nodes[i];
    if (!kpass_is(n, "ReduceMean") || n->n_in < 1 || n->in[0] != t || n->n_out != 1 ||
        kn_attr_int(n, "keepdims", 1) != 1)
        return false;
    int rank = kpass_rank(p, t);
    if (rank < 1)
        return false;
    int64_t axis;
    size_t na = 0;
    const int64_t *axes = kn_attr_ints(n, "axes", &na);
    if (n->n_in >= 2 && n->in[1] >= 0) {
        const kn_tdata *v = kpass_is_const(net, n->in[1]) ? &net->tensors[n->in[1]].value : NULL;
        if (!v || kpass_numel(v) != 1)
            return false;
        axis = kpass_value_int(v, 0);
    } else if (axes && na == 1) {
        axis = axes[0];
    } else {
        return false;
    }
    return axis == -1 || axis == rank - 1;
}

/* t squared, read only by `reader`: Pow(x, 2) or x * x. */
static int square_of(const kpass *p, int t, int reader, int *x) {
    int i = kpass_producer(p, t);
    if (i < 0 || kpass_sole_reader(p, t) != reader)
        return -1;
    const kn_node *n = &p->net->nodes[i];
    double v;
    if (kpass_is(n, "Pow") && n->n_in == 2 && kpass_const_scalar(p->net, n->in[1], &v) &&
        near(v, 2.0)) {
        *x = n->in[0];
        return i;
    }
    if (kpass_is(n, "Mul") && n->n_in == 2 && n->in[0] == n->in[1]) {
        *x = n->in[0];
        return i;
    }
    return -1;
}

/* From the mean of squares `ms` (the output of ReduceMean node mi): Add
 * eps, then the inverse root applied to `v` (x or d). Appends the nodes and
 * returns the normalized tensor, or -1. */
static int inv_root(const kpass *p, int ms, int v, nmatch *m) {
    const kn_net *net = p->net;
    int a = kpass_sole_reader(p, ms);
    if (with_scalar(p, a, "Add", ms, &m->eps) < 0 || !(m->eps >= 0.0))
        return -1;
    int av = out0(p, a);
    int r = kpass_sole_reader(p, av);
    if (r < 0)
        return -1;
    push(m, a);
    const kn_node *rn = &net->nodes[r];
    double e;
    int inv = -1; /* tensor holding 1 / sqrt(.) */
    if (with_scalar(p, r, "Pow", av, &e) == 1 && near(e, -0.5)) {
        push(m, r);
        inv = out0(p, r);
    } else if (kpass_is(rn, "Sqrt") && rn->n_in == 1) {
        push(m, r);
        int sv = out0(p, r);
        int q = kpass_sole_reader(p, sv);
        if (q < 0)
            return -1;
        const kn_node *qn = &net->nodes[q];
        double one;
        if (kpass_is(qn, "Div") && qn->n_in == 2 && qn->in[1] == sv && qn->in[0] == v) {
            push(m, q); /* v / sqrt(.) */
            return out0(p, q);
        }
        if (kpass_is(qn, "Reciprocal") && qn->n_in == 1) {
            push(m, q);
            inv = out0(p, q);
        } else if (with_scalar(p, q, "Div", sv, &one) == 0 && near(one, 1.0)) {
            push(m, q);
            inv = out0(p, q);
        } else {
            return -1;
        }
    } else {
        return -1;
    }
    int mu = kpass_sole_reader(p, inv);
    if (mu < 0)
        return -1;
    const kn_node *mn = &net->nodes[mu];
    if (!kpass_is(mn, "Mul") || mn->n_in != 2 ||
        !((mn->in[0] == v && mn->in[1] == inv) || (mn->in[1] == v && mn->in[0] == inv)))
        return -1;
    push(m, mu);
    return out0(p, mu);
}

/* Constant c whose values repeat along rows of t's last dim (h values, or
 * leading ones then h). */
static bool row_const(const kpass *p, int c, int64_t h) {
    if (!kpass_is_const(p->net, c))
        return false;
    const kn_tdata *v = &p->net->tensors[c].value;
    if (v->dtype != KILN_DTYPE_FLOAT || kpass_numel(v) != h || v->rank < 1 ||
        v->dims[v->rank - 1] != h)
        return false;
    return true;
}

/* Static last dim of t, or -1. */
static int64_t last_dim(const kpass *p, int t) {
    int64_t h = -1;
    for (int k = 0; k < p->n_points; k++) {
        const kn_tinfo *s = kpass_shape(p, k, t);
        if (!s || s->rank < 1 || (h >= 0 && s->dims[s->rank - 1] != h))
            return -1;
        h = s->dims[s->rank - 1];
    }
    return h;
}

/* Optional Mul(y, weight) and (LayerNorm) Add(., bias) after the core. */
static void affine_tail(const kpass *p, nmatch *m, int64_t h, bool bias) {
    const kn_net *net = p->net;
    int mu = kpass_sole_reader(p, m->y);
    if (mu >= 0 && kpass_is(&net->nodes[mu], "Mul") && net->nodes[mu].n_in == 2) {
        const kn_node *n = &net->nodes[mu];
        int c = n->in[0] == m->y ? n->in[1] : n->in[0];
        if (n->in[0] != n->in[1] && row_const(p, c, h)) {
            push(m, mu);
            m->scale = c;
            m->y = out0(p, mu);
        }
    }
    if (!bias)
        return;
    int ad = kpass_sole_reader(p, m->y);
    if (ad >= 0 && kpass_is(&net->nodes[ad], "Add") && net->nodes[ad].n_in == 2) {
        const kn_node *n = &net->nodes[ad];
        int c = n->in[0] == m->y ? n->in[1] : n->in[0];
        if (n->in[0] != n->in[1] && row_const(p, c, h)) {
            push(m, ad);
            m->bias = c;
            m->y = out0(p, ad);
        }
    }
}

/* RMSNorm from the square node at i. */
static bool match_rms(const kpass *p, int rm, nmatch *m) {
    const kn_node *rn = &p->net->nodes[rm];
    int x = -1;
    int sq = rn->n_in >= 1 ? square_of(p, rn->in[0], rm, &x) : -1;
    if (sq < 0 || kpass_is_const(p->net, x) || !mean_last(p, rm, rn->in[0]))
        return false;
    m->x = x;
    push(m, sq);
    push(m, rm);
    m->y = inv_root(p, out0(p, rm), x, m);
    return m->y >= 0;
}

/* LayerNorm from the ReduceMean node rm computing the mean of x. */
static bool match_ln(const kpass *p, int rm, nmatch *m) {
    const kn_net *net = p->net;
    const kn_node *rn = &net->nodes[rm];
    if (rn->n_in < 1)
        return false;
    int x = rn->in[0], mean = out0(p, rm);
    if (kpass_is_const(net, x) || !mean_last(p, rm, x))
        return false;
    int s = kpass_sole_reader(p, mean);
    if (s < 0 || !kpass_is(&net->nodes[s], "Sub") || net->nodes[s].n_in != 2 ||
        net->nodes[s].in[0] != x || net->nodes[s].in[1] != mean)
        return false;
    int d = out0(p, s);
    /* d is read by its square (x * x reads it twice) and by the final
     * division or product, nothing else */
    int slots = d < p->n_tensors ? p->rd_start[d + 1] - p->rd_start[d] : 0;
    if (d >= p->n_tensors || p->is_output[d] || slots < 2 || slots > 3)
        return false;
    int sq = -1, other = -1;
    for (int k = p->rd_start[d]; k < p->rd_start[d + 1]; k++) {
        int r = p->rd_node[k];
        if (!kpass_free(p, r))
            return false;
        const kn_node *n = &net->nodes[r];
        double v;
        bool is_sq = (kpass_is(n, "Pow") && n->n_in == 2 && n->in[0] == d &&
                      kpass_const_scalar(net, n->in[1], &v) && near(v, 2.0)) ||
                     (kpass_is(n, "Mul") && n->n_in == 2 && n->in[0] == d && n->in[1] == d);
        if (is_sq && (sq < 0 || sq == r))
            sq = r;
        else if (other < 0 || other == r)
            other = r;
        else
            return false;
    }
    if (sq < 0 || other < 0 || other == sq)
        return false;
    int v2 = kpass_sole_reader(p, out0(p, sq));
    if (!mean_last(p, v2, out0(p, sq)))
        return false;
    m->x = x;
    push(m, rm);
    push(m, s);
    push(m, sq);
    push(m, v2);
    m->y = inv_root(p, out0(p, v2), d, m);
    if (m->y < 0)
        return false;
    /* the last node must be the one other reader of d */
    return m->nodes[m->n - 1] == other;
}

static kiln_status replace(kpass *p, const nmatch *m, bool ln, int64_t h) {
    kn_net *net = p->net;
    char name[1024];
    size_t len = 0;
    name[0] = 0;
    for (int k = 0; k < m->n && len < sizeof name; k++) {
        int w = snprintf(name + len, sizeof name - len, "%s%s", k ? " + " : "",
                         net->nodes[m->nodes[k]].name);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    int scale = m->scale, bias = m->bias;
    if (scale < 0 || (ln && bias < 0)) { /* ones and zeros of the row's width */
        for (int which = 0; which < 2; which++) {
            if ((which == 0 && scale >= 0) || (which == 1 && (!ln || bias >= 0)))
                continue;
            kn_tdata v;
            memset(&v, 0, sizeof v);
            v.dtype = KILN_DTYPE_FLOAT;
            v.rank = 1;
            v.dims[0] = h;
            v.nbytes = (size_t)h * sizeof(float);
            float *f = kn_malloc(v.nbytes ? v.nbytes : 1);
            if (!f)
                return KILN_ERR_OUT_OF_MEMORY;
            for (int64_t j = 0; j < h; j++)
                f[j] = which == 0 ? 1.f : 0.f;
            v.data = f;
            int t;
            KN_TRY(kpass_add_const(net, which == 0 ? "norm scale" : "norm bias", &v, &t));
            if (which == 0)
                scale = t;
            else
                bias = t;
        }
    }
    for (int k = 0; k < m->n; k++)
        kpass_kill(p, m->nodes[k]);
    int in[3] = {m->x, scale, bias}, out[1] = {m->y}, ni;
    KN_TRY(kn_net_add_node(net, name, ln ? "LayerNormalization" : "RMSNormalization", "",
                           ln ? 17 : 23, ln ? 3 : 2, in, 1, out, &ni));
    KN_TRY(kn_node_set_int(&net->nodes[ni], "axis", -1));
    KN_TRY(kn_node_set_float(&net->nodes[ni], "epsilon", (float)m->eps));
    kn_log(KILN_LOG_VERBOSE, "norms: '%s' -> %s", name, ln ? "LayerNormalization" : "RMSNormalization");
    return KILN_OK;
}

static bool any_mean(const kn_node *n) { return kpass_is(n, "ReduceMean"); }

/* A float constant of h values, all dims but the last 1 (rank <= ranky). */
static bool row_vector(const kn_net *net, int t, int64_t h, int ranky) {
    if (t < 0 || !kpass_is_const(net, t))
        return false;
    const kn_tdata *v = &net->tensors[t].value;
    if (v->dtype != KILN_DTYPE_FLOAT || v->rank < 1 || v->rank > ranky || kpass_numel(v) != h ||
        v->dims[v->rank - 1] != h)
        return false;
    return true;
}

/* A new float constant of h values: a[j] * b[j] (b NULL: 1). */
static kiln_status scaled_vec(kn_net *net, const char *hint, int a, int b, int64_t h, int *out) {
    float *fa = NULL, *fb = NULL;
    KN_TRY(kpass_const_floats(net, a, &fa));
    if (b >= 0) {
        kiln_status st = kpass_const_floats(net, b, &fb);
        if (st != KILN_OK) {
            kn_free(fa);
            return st;
        }
    }
    for (int64_t j = 0; j < h; j++)
        fa[j] *= fb ? fb[j] : 1.f;
    kn_free(fb);
    kn_tdata v;
    memset(&v, 0, sizeof v);
    v.dtype = KILN_DTYPE_FLOAT;
    v.rank = 1;
    v.dims[0] = h;
    v.nbytes = (size_t)h * sizeof(float);
    v.data = fa;
    return kpass_add_const(net, hint, &v, out);
}

/* y = Norm(x, S, B) over the last axis read only by Mul(y, w) of a
 * constant row w (a weight the decomposed match left outside, behind a
 * Cast, or an exporter's separate scale): Norm(x, S * w, B * w). */
static kiln_status fold_weight(kpass *p, int i, int *changed) {
    kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    bool ln = kpass_is(n, "LayerNormalization");
    if (!(ln || kpass_is(n, "RMSNormalization")) || n->n_in < 2 || n->out[0] < 0 ||
        (n->n_out > 1 && n->out[1] >= 0) || (n->n_out > 2 && n->out[2] >= 0))
        return KILN_OK;
    int r = kpass_rank(p, n->in[0]);
    int64_t axis = kn_attr_int(n, "axis", -1);
    if (r < 1 || (axis != -1 && axis != r - 1))
        return KILN_OK;
    int64_t h = last_dim(p, n->in[0]);
    /* one Mul reads y; Shape nodes may too (the shape-sink pass points them
     * before the Mul: the same shape, since w is a row) */
    int yt = n->out[0], m = -1;
    if (h < 1 || yt >= p->n_tensors || p->is_output[yt])
        return KILN_OK;
    for (int k = p->rd_start[yt]; k < p->rd_start[yt + 1]; k++) {
        int rd = p->rd_node[k];
        if (!kpass_free(p, rd))
            return KILN_OK;
        if (kpass_is(&net->nodes[rd], "Shape"))
            continue;
        if (m >= 0 && rd != m)
            return KILN_OK;
        m = rd;
    }
    if (m < 0 || !kpass_is(&net->nodes[m], "Mul") || net->nodes[m].n_in != 2 ||
        (net->nodes[m].in[0] == yt && net->nodes[m].in[1] == yt))
        return KILN_OK;
    const kn_node *mn = &net->nodes[m];
    int w = mn->in[0] == n->out[0] ? mn->in[1] : mn->in[0];
    bool has_b = ln && n->n_in > 2 && n->in[2] >= 0;
    if (w == n->out[0] || !row_vector(net, w, h, r) || !row_vector(net, n->in[1], h, 1) ||
        (has_b && !row_vector(net, n->in[2], h, 1)))
        return KILN_OK;
    int s2, b2 = -1;
    KN_TRY(scaled_vec(net, "norm scale", n->in[1], w, h, &s2));
    if (has_b)
        KN_TRY(scaled_vec(net, "norm bias", net->nodes[i].in[2], w, h, &b2));
    kn_node *nn = &net->nodes[i];
    nn->in[1] = s2;
    if (has_b)
        nn->in[2] = b2;
    KN_TRY(kpass_join_name(nn, net->nodes[m].name));
    int y = net->nodes[m].out[0];
    kpass_kill(p, m);
    kpass_set_output(net, i, 0, y);
    kpass_touch(p, i);
    kpass_replace_reads(p, yt, y); /* the Shape readers */
    kn_log(KILN_LOG_VERBOSE, "norms: '%s' takes the weight after it", net->nodes[i].name);
    (*changed)++;
    return KILN_OK;
}

static bool any_mean_or_norm(const kn_node *n) {
    return any_mean(n) || kpass_is(n, "LayerNormalization") || kpass_is(n, "RMSNormalization");
}

kiln_status kpass_norms(kpass *p, int *changed) {
    bool ready;
    KN_TRY(kpass_shapes_if(p, any_mean_or_norm, &ready));
    if (!ready)
        return KILN_OK;
    kn_net *net = p->net;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!kpass_free(p, i) || !kpass_is(&net->nodes[i], "ReduceMean"))
            continue;
        nmatch m;
        bool ln = false, ok = false;
        for (int form = 0; form < 2 && !ok; form++) {
            memset(&m, 0, sizeof m);
            m.scale = m.bias = -1;
            ln = form == 1;
            ok = ln ? match_ln(p, i, &m) : match_rms(p, i, &m);
        }
        if (!ok)
            continue;
        bool free_all = true;
        for (int k = 0; k < m.n; k++)
            free_all = free_all && kpass_free(p, m.nodes[k]);
        int64_t h = last_dim(p, m.x);
        kiln_dtype dt = kpass_dtype(p, m.x);
        if (!free_all || h < 1 || dt != KILN_DTYPE_FLOAT)
            continue;
        affine_tail(p, &m, h, ln);
        KN_TRY(replace(p, &m, ln, h));
        (*changed)++;
    }
    for (int i = 0; i < p->n_nodes; i++)
        if (kpass_free(p, i))
            KN_TRY(fold_weight(p, i, changed));
    return KILN_OK;
}
