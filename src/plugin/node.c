/* node.c - plugin nodes in the IR: the ONNX import of custom ops, the schema
 * whose shape inference asks the plugin (through an eager expression
 * builder), and the kernel adapter that runs a plugin on any backend. */
#include <stdio.h>
#include <string.h>

#include "plugin.h"

/* ---- identity and instances ---- */

void kpl_node_identity(const kn_node *n, const char **name, const char **version,
                       const char **ns) {
    *name = n->op_type;
    *version = kn_attr_string(n, KPL_ATTR_VERSION, "1");
    *ns = kn_attr_string(n, KPL_ATTR_NAMESPACE, "");
}

kiln_status kpl_fail(const kn_node *n, kiln_status st, const char *what) {
    const char *name, *version, *ns;
    kpl_node_identity(n, &name, &version, &ns);
    char id[512];
    kpl_identity(id, sizeof id, name, version, ns);
    (void)st;
    return kn_error(KILN_ERR_PLUGIN, "plugin %s, layer '%s': %s: %s", id, n->name, what,
                    kpl_error_text());
}

static kiln_status missing(const kn_node *n, const char *name, const char *version,
                           const char *ns) {
    char id[512], others[1024];
    kpl_identity(id, sizeof id, name, version, ns);
    kpl_list_same_name(others, sizeof others, name);
    return kn_error(KILN_ERR_PLUGIN,
                    "layer '%s' needs plugin %s, which is not registered; registered creators "
                    "named '%s': %s (load the plugin's library first: kiln_plugin_load_library, "
                    "or `kiln exec --staticPlugins=lib.so`)",
                    n->name, id, name, others);
}

kiln_status kpl_node_creator(const kn_node *n, const kiln_plugin_creator **out) {
    const char *name, *version, *ns;
    kpl_node_identity(n, &name, &version, &ns);
    /* a layer of a loaded plan runs the build it was bound to, or nothing */
    const kn_attr *bound = kn_attr_find(n, KPL_ATTR_BOUND);
    if (bound && bound->type == KN_ATTR_STRING) {
        const kiln_plugin_creator *c = kpl_find_bound(name, version, ns, bound->s);
        if (!c) {
            char id[512];
            kpl_identity(id, sizeof id, name, version, ns);
            return kn_error(KILN_ERR_PLUGIN,
                            "layer '%s' was bound to plugin %s from the library with SHA-256 "
                            "'%s', which is no longer registered",
                            n->name, id, bound->s);
        }
        *out = c;
        return KILN_OK;
    }
    const kiln_plugin_creator *c = kiln_plugin_find(name, version, ns);
    if (!c)
        return missing(n, name, version, ns);
    *out = c;
    return KILN_OK;
}

static void destroy_instance(kiln_plugin *p) {
    if (p && p->runtime && p->runtime->destroy)
        p->runtime->destroy(p->self);
}

/* The tables of an instance must be as large as version 1's and complete. */
static kiln_status check_instance(const kn_node *n, kiln_plugin *p, kiln_plugin_phase phase) {
    const char *bad = NULL;
    if (!p)
        bad = "create returned no instance";
    else if (p->abi_version == 0 || p->abi_version > KILN_PLUGIN_ABI_VERSION)
        bad = "the instance's abi_version is not one this kiln supports";
    else if (p->struct_size < sizeof(struct kiln_plugin))
        bad = "the instance's struct_size is smaller than version 1's";
    else if (!p->core || p->core->struct_size < sizeof(kiln_plugin_core))
        bad = "the core table is missing or smaller than version 1's";
    else if (!p->runtime || p->runtime->struct_size < sizeof(kiln_plugin_runtime) ||
             !p->runtime->enqueue || !p->runtime->get_fields || !p->runtime->clone ||
             !p->runtime->destroy)
        bad = "the runtime table is missing, incomplete or smaller than version 1's";
    else if (phase == KILN_PLUGIN_PHASE_BUILD &&
             (!p->build || p->build->struct_size < sizeof(kiln_plugin_build) ||
              !p->build->num_outputs || !p->build->output_dtypes || !p->build->output_shapes))
        bad = "the build table is missing, incomplete or smaller than version 1's";
    if (!bad)
        return KILN_OK;
    if (p && p->runtime && p->runtime->destroy && p->struct_size >= sizeof(struct kiln_plugin))
        destroy_instance(p);
    const char *name, *version, *ns;
    kpl_node_identity(n, &name, &version, &ns);
    char id[512];
    kpl_identity(id, sizeof id, name, version, ns);
    return kn_error(KILN_ERR_VERSION, "plugin %s, layer '%s': %s", id, n->name, bad);
}

kiln_status kpl_node_create(const kn_node *n, kiln_plugin_phase phase,
                            const kiln_plugin_creator **cr_out, kiln_plugin **out) {
    const kiln_plugin_creator *cr;
    KN_TRY(kpl_node_creator(n, &cr));
    const kn_attr *a = kn_attr_find(n, KPL_ATTR_FIELDS);
    kpl_fields f;
    memset(&f, 0, sizeof f);
    if (a && a->type == KN_ATTR_STRING) {
        kiln_status st = kpl_fields_read(a->s, a->s_len, &f);
        if (st != KILN_OK)
            return kn_node_error(n, st, "stored plugin fields: %s", kiln_last_error());
    }
    kiln_plugin *p = NULL;
    kpl_error_clear();
    kiln_status st = cr->create(cr->self, n->name, &f.c, phase, &p);
    kpl_fields_free(&f);
    if (st != KILN_OK)
        return kpl_fail(n, st, phase == KILN_PLUGIN_PHASE_BUILD ? "create (build phase) failed"
                                                                : "create (runtime phase) failed");
    KN_TRY(check_instance(n, p, phase));
    if (cr_out)
        *cr_out = cr;
    *out = p;
    return KILN_OK;
}

/* ---- ONNX import ---- */

static kiln_status set_bytes_attr(kn_node *n, const char *name, const void *data, size_t len) {
    KN_TRY(kn_node_set_string(n, name, ""));
    kn_attr *a = (kn_attr *)kn_attr_find(n, name);
    char *s = kn_malloc(len + 1);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    if (len)
        memcpy(s, data, len);
    s[len] = 0;
    kn_free(a->s);
    a->s = s;
    a->s_len = len;
    return KILN_OK;
}

/* The identity attributes may be strings or ints ("1" or 1). */
static const char *identity_attr(const kn_node *n, const char *name, const char *dflt, char *buf,
                                 size_t cap) {
    const kn_attr *a = kn_attr_find(n, name);
    if (!a)
        return dflt;
    if (a->type == KN_ATTR_INT) {
        snprintf(buf, cap, "%lld", (long long)a->i);
        return buf;
    }
    return a->type == KN_ATTR_STRING && a->s ? a->s : dflt;
}

static kiln_status import_node(kn_node *n, bool override_builtins, bool strict) {
    if (kpl_is_node(n))
        return KILN_OK;
    bool builtin = kn_op_find(n->domain, n->op_type) != NULL;
    if (builtin && !override_builtins)
        return KILN_OK;
    char vb[32], nb[32];
    const char *version = identity_attr(n, KPL_ATTR_VERSION, "1", vb, sizeof vb);
    bool ns_given = kn_attr_find(n, KPL_ATTR_NAMESPACE) != NULL;
    const char *ns = identity_attr(n, KPL_ATTR_NAMESPACE, "", nb, sizeof nb);
    const kiln_plugin_creator *cr = kiln_plugin_find(n->op_type, version, ns);
    if (!cr && !ns_given && n->domain[0]) /* the node's domain as a namespace hint */
        cr = kiln_plugin_find(n->op_type, version, n->domain);
    if (!cr) {
        if (builtin || !strict) /* not strict: the reader's own op check reports it, or not */
            return KILN_OK;
        char id[512], others[1024];
        kpl_identity(id, sizeof id, n->op_type, version, ns);
        kpl_list_same_name(others, sizeof others, n->op_type);
        return kn_node_error(n, KILN_ERR_UNSUPPORTED,
                             "op type '%s' of domain '%s' (opset %d) is not supported: it is "
                             "not a built-in op and no plugin %s%s%s%s is registered; "
                             "registered creators named '%s': %s",
                             n->op_type, n->domain[0] ? n->domain : "ai.onnx", n->opset, id,
                             ns_given || !n->domain[0] ? "" : " (nor in namespace '",
                             ns_given || !n->domain[0] ? "" : n->domain,
                             ns_given || !n->domain[0] ? "" : "')", n->op_type, others);
    }
    if (builtin)
        kn_log(KILN_LOG_INFO, "node '%s': plugin '%s' (version '%s', namespace '%s') overrides the "
                              "built-in op", n->name, cr->name, cr->version, cr->plugin_namespace ? cr->plugin_namespace : "");
    kpl_fields f;
    KN_TRY(kpl_fields_from_node(n, cr, &f));
    kn_buf b;
    memset(&b, 0, sizeof b);
    kpl_fields_write(&f.c, &b);
    kpl_fields_free(&f);
    if (b.failed) {
        kn_buf_free(&b);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    /* the node keeps only the identity and the fields */
    for (int k = 0; k < n->n_attr; k++)
        kn_attr_free(&n->attrs[k]);
    n->n_attr = 0;
    char *dom = kn_strdup(KPL_DOMAIN);
    kiln_status st = dom ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (st == KILN_OK) {
        kn_free(n->domain);
        n->domain = dom;
        n->opset = 1;
        st = kn_node_set_string(n, KPL_ATTR_VERSION, cr->version);
    }
    if (st == KILN_OK)
        st = kn_node_set_string(n, KPL_ATTR_NAMESPACE, cr->plugin_namespace ? cr->plugin_namespace : "");
    if (st == KILN_OK)
        st = set_bytes_attr(n, KPL_ATTR_FIELDS, b.data, b.len);
    kn_buf_free(&b);
    return st;
}

kiln_status kpl_import(kn_net *net, bool override_builtins, bool strict) {
    for (int i = 0; i < net->n_nodes; i++) {
        kn_node *n = &net->nodes[i];
        for (int k = 0; k < n->n_attr; k++)
            if (n->attrs[k].type == KN_ATTR_GRAPH && n->attrs[k].graph) {
                kiln_status st = kpl_import(n->attrs[k].graph, override_builtins, strict);
                if (st != KILN_OK) /* worded as the reader's own op check */
                    return kn_error_wrap(st, "in subgraph '%s' of node '%s' (%s)",
                                         n->attrs[k].name, n->name, n->op_type);
            }
        KN_TRY(import_node(n, override_builtins, strict));
    }
    return KILN_OK;
}

/* ---- shape inference: an eager expression builder ----
 * Inference runs on concrete shapes, so every expression has a value; it
 * also keeps its symbolic form (input dimensions, constants, operations) so
 * the verbose log can show the formula a plugin gave. */
enum { EB_CONST = -1, EB_INPUT = -2 };

struct kiln_dim_expr {
    int64_t v;
    int known;
    int op;                         /* kiln_dim_op, EB_CONST or EB_INPUT */
    int in, dim;                    /* EB_INPUT: which input dimension */
    const struct kiln_dim_expr *a, *b;
};

typedef struct eb_pool {
    struct kiln_dim_expr e[1024];
    int n;
} eb_pool;

/* Whether e is an expression this pool handed out. A plugin passes back
 * pointers kiln gave it; anything else (a stale, forged or foreign pointer)
 * is treated as missing rather than read. */
static bool eb_valid(const eb_pool *p, const kiln_dim_expr *e) {
    uintptr_t a = (uintptr_t)e, lo = (uintptr_t)&p->e[0], hi = (uintptr_t)&p->e[p->n];
    return e && a >= lo && a < hi && (a - lo) % sizeof p->e[0] == 0;
}

/* Dims a plugin may give an output: kiln plans at most 2^48 elements. */
#define EB_DIM_MAX ((int64_t)1 << 48)

static struct kiln_dim_expr *eb_new(eb_pool *p, int64_t v, int known) {
    if (p->n >= (int)KN_ARRAY_LEN(p->e))
        return NULL;
    struct kiln_dim_expr *e = &p->e[p->n++];
    memset(e, 0, sizeof *e);
    e->v = v;
    e->known = known;
    e->op = EB_CONST;
    return e;
}

static const kiln_dim_expr *eb_constant(void *ctx, int64_t value) { return eb_new(ctx, value, 1); }

static const kiln_dim_expr *eb_input(eb_pool *p, int in, int dim, int64_t value) {
    struct kiln_dim_expr *e = eb_new(p, value, 1);
    if (e) {
        e->op = EB_INPUT;
        e->in = in;
        e->dim = dim;
    }
    return e;
}

/* "in0[1] * 2" style text of an expression. */
static void eb_text(const kiln_dim_expr *e, char *buf, size_t cap, int depth) {
    static const char *const ops[] = {"+", "-", "*", "floordiv", "ceildiv", "min", "max"};
    if (!e || depth > 16) {
        snprintf(buf, cap, "?");
    } else if (e->op == EB_CONST) {
        snprintf(buf, cap, "%lld", (long long)e->v);
    } else if (e->op == EB_INPUT) {
        snprintf(buf, cap, "in%d[%d]", e->in, e->dim);
    } else {
        char a[256], b[256];
        eb_text(e->a, a, sizeof a, depth + 1);
        eb_text(e->b, b, sizeof b, depth + 1);
        if (e->op <= KILN_DIM_PROD)
            snprintf(buf, cap, "(%.100s %s %.100s)", a, ops[e->op], b);
        else
            snprintf(buf, cap, "%s(%.100s, %.100s)", (unsigned)e->op < 7 ? ops[e->op] : "?", a, b);
    }
}

/* An operation on two expressions of this pool. Its value is unknown (and
 * the output dimension using it is refused) on a division by zero, a result
 * that does not fit int64_t (INT64_MIN / -1 included, which traps), or an
 * operand that is missing, unknown or not from this pool; an op outside
 * kiln_dim_op gives NULL. */
static const kiln_dim_expr *eb_operation(void *ctx, kiln_dim_op op, const kiln_dim_expr *a,
                                         const kiln_dim_expr *b) {
    eb_pool *pool = ctx;
    if ((int)op < KILN_DIM_SUM || (int)op > KILN_DIM_MAX)
        return NULL;
    bool va = eb_valid(pool, a), vb = eb_valid(pool, b);
    struct kiln_dim_expr *e = eb_new(pool, 0, 0);
    if (!e)
        return NULL;
    e->op = (int)op;
    e->a = va ? a : NULL;
    e->b = vb ? b : NULL;
    if (!va || !vb || !a->known || !b->known)
        return e;
    int64_t x = a->v, y = b->v, r = 0;
    bool ok = true;
    switch (op) {
    case KILN_DIM_SUM: ok = !__builtin_add_overflow(x, y, &r); break;
    case KILN_DIM_SUB: ok = !__builtin_sub_overflow(x, y, &r); break;
    case KILN_DIM_PROD: ok = !__builtin_mul_overflow(x, y, &r); break;
    case KILN_DIM_FLOOR_DIV:
        ok = y != 0 && !(x == INT64_MIN && y == -1);
        if (ok)
            r = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
        break;
    case KILN_DIM_CEIL_DIV:
        ok = y != 0 && !(x == INT64_MIN && y == -1);
        if (ok)
            r = x / y + ((x % y != 0) && ((x < 0) == (y < 0)));
        break;
    case KILN_DIM_MIN: r = x < y ? x : y; break;
    case KILN_DIM_MAX: r = x > y ? x : y; break;
    default: ok = false; break;
    }
    e->v = r;
    e->known = ok;
    return e;
}

static int32_t eb_is_constant(void *ctx, const kiln_dim_expr *e) {
    return eb_valid(ctx, e) && e->known;
}
static int64_t eb_value(void *ctx, const kiln_dim_expr *e) {
    return eb_valid(ctx, e) && e->known ? e->v : -1;
}

static kiln_status plugin_infer(kn_infer *c) {
    const kn_node *n = c->node;
    kiln_plugin *p = NULL;
    KN_TRY(kpl_node_create(n, KILN_PLUGIN_PHASE_BUILD, NULL, &p));
    kiln_status st = KILN_OK;
    int32_t nout = p->build->num_outputs(p->self);
    eb_pool *pool = NULL;
    kiln_dtype din[64], dout[16];
    kiln_dims_expr ein[64], eout[16];
    if (nout != c->n_out || c->n_in > 64 || c->n_out > 16) {
        st = kn_node_error(n, KILN_ERR_SHAPE, "the plugin has %d output(s), the node %d (and at "
                                              "most 64 inputs, 16 outputs)", nout, c->n_out);
        goto done;
    }
    for (int j = 0; j < c->n_in; j++)
        din[j] = c->in[j].dtype;
    memset(dout, 0, sizeof dout);
    kpl_error_clear();
    if ((st = p->build->output_dtypes(p->self, din, c->n_in, dout, c->n_out)) != KILN_OK) {
        st = kpl_fail(n, st, "output_dtypes failed");
        goto done;
    }
    if (!(pool = kn_calloc(1, sizeof *pool))) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    kiln_expr_builder eb = {KILN_PLUGIN_ABI_VERSION, sizeof eb, pool, eb_constant, eb_operation,
                            eb_is_constant, eb_value};
    memset(ein, 0, sizeof ein);
    memset(eout, 0, sizeof eout);
    for (int j = 0; j < c->n_in; j++) {
        ein[j].rank = kn_has_in(c, j) ? c->in[j].rank : 0;
        for (int d = 0; d < ein[j].rank; d++)
            ein[j].d[d] = eb_input(pool, j, d, c->in[j].dims[d]);
    }
    kpl_error_clear();
    if ((st = p->build->output_shapes(p->self, ein, c->n_in, eout, c->n_out, &eb)) != KILN_OK) {
        st = kpl_fail(n, st, "output_shapes failed");
        goto done;
    }
    for (int j = 0; j < c->n_out; j++) {
        if (eout[j].rank < 0 || eout[j].rank > KILN_MAX_DIMS) {
            st = kn_node_error(n, KILN_ERR_SHAPE, "the plugin gave output %d rank %d", j,
                               eout[j].rank);
            goto done;
        }
        c->out[j].dtype = dout[j];
        c->out[j].rank = eout[j].rank;
        for (int d = 0; d < eout[j].rank; d++) {
            const kiln_dim_expr *e = eout[j].d[d];
            if (!eb_valid(pool, e) || !e->known || e->v < 0 || e->v > EB_DIM_MAX) {
                char val[32];
                snprintf(val, sizeof val, "%lld", eb_valid(pool, e) ? (long long)e->v : 0LL);
                st = kn_node_error(n, KILN_ERR_SHAPE,
                                   "the plugin's expression for output %d dimension %d %s%s%s", j,
                                   d,
                                   !e ? "is missing"
                                   : !eb_valid(pool, e) ? "is not an expression kiln made"
                                   : !e->known ? "cannot be evaluated (a division by zero, an "
                                                 "overflow or too many expressions)"
                                   : e->v < 0 ? "is negative: "
                                              : "is over the limit of 2^48: ",
                                   eb_valid(pool, e) && e->known ? val : "",
                                   "");
                goto done;
            }
            c->out[j].dims[d] = e->v;
        }
        size_t bytes = 0;
        if (!kn_shape_fits(dout[j], eout[j].rank, c->out[j].dims, &bytes)) {
            st = kn_node_error(n, KILN_ERR_SHAPE, "the plugin's output %d shape has more "
                                                  "elements or bytes than kiln plans (2^48)", j);
            goto done;
        }
        if (kn_log_enabled(KILN_LOG_VERBOSE)) {
            char text[1024], one[256];
            size_t at = 0;
            text[0] = 0;
            for (int d = 0; d < eout[j].rank && at + 1 < sizeof text; d++) {
                eb_text(eout[j].d[d], one, sizeof one, 0);
                int w = snprintf(text + at, sizeof text - at, "%s%s", d ? ", " : "", one);
                at += w > 0 ? (size_t)w : 0;
            }
            kn_log(KILN_LOG_VERBOSE, "layer '%s' (plugin '%s'): output %d shape [%s]", n->name,
                   n->op_type, j, text);
        }
    }
done:
    kn_free(pool);
    destroy_instance(p);
    return st;
}

const kn_op_schema kpl_schema = {"*", KPL_DOMAIN, plugin_infer, 0};

/* ---- the kernel adapter ---- */

typedef struct kpl_state {
    const kiln_plugin_creator *cr;
    kiln_plugin *rt;    /* runtime-phase instance made from the node's fields */
} kpl_state;

static kiln_status k_init(const kn_node *n, void **state) {
    kpl_state *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kpl_node_create(n, KILN_PLUGIN_PHASE_RUNTIME, &s->cr, &s->rt);
    if (st != KILN_OK) {
        kn_free(s);
        return st;
    }
    kpl_acquire(s->cr);
    *state = s;
    return KILN_OK;
}

static void k_fini(void *state) {
    kpl_state *s = state;
    if (!s)
        return;
    destroy_instance(s->rt);
    kpl_release(s->cr);
    kn_free(s);
}

static void to_desc(const kb_tensor *t, kiln_tensor_desc *d) {
    memset(d, 0, sizeof *d);
    d->dtype = t->dtype;
    d->layout = KILN_LAYOUT_LINEAR;
    d->rank = t->rank;
    memcpy(d->dims, t->dims, sizeof d->dims);
}

static kiln_status descs(const kn_node *n, const kb_tensor *in, int n_in, const kb_tensor *out,
                         int n_out, kiln_tensor_desc *din, kiln_tensor_desc *dout) {
    if (n_in > 64 || n_out > 16)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "a plugin layer takes at most 64 inputs "
                                                      "and 16 outputs");
    for (int j = 0; j < n_in; j++)
        to_desc(&in[j], &din[j]);
    for (int j = 0; j < n_out; j++)
        to_desc(&out[j], &dout[j]);
    return KILN_OK;
}

static kiln_status k_prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                             const kb_tensor *out, int n_out, void **inst, size_t *ws) {
    const kpl_state *s = state;
    kiln_tensor_desc din[64], dout[16];
    KN_TRY(descs(n, in, n_in, out, n_out, din, dout));
    kiln_plugin *p = NULL;
    kpl_error_clear();
    kiln_status st = s->rt->runtime->clone(s->rt->self, &p);
    if (st != KILN_OK)
        return kpl_fail(n, st, "clone failed");
    KN_TRY(check_instance(n, p, KILN_PLUGIN_PHASE_RUNTIME));
    if (p->runtime->on_shape_change) {
        kpl_error_clear();
        st = p->runtime->on_shape_change(p->self, din, n_in, dout, n_out);
        if (st != KILN_OK) {
            destroy_instance(p);
            return kpl_fail(n, st, "on_shape_change failed");
        }
    }
    /* workspace: what the builder recorded for the largest shapes, else ask
     * a build-phase instance for these shapes */
    const kn_attr *w = kn_attr_find(n, KPL_ATTR_WORKSPACE);
    size_t bytes = 0;
    if (w && w->type == KN_ATTR_INT && w->i > 0) {
        bytes = (size_t)w->i;
    } else if (!w) {
        kiln_plugin *b = NULL;
        st = kpl_node_create(n, KILN_PLUGIN_PHASE_BUILD, NULL, &b);
        if (st != KILN_OK) {
            destroy_instance(p);
            return st;
        }
        if (b->build->workspace_size)
            bytes = b->build->workspace_size(b->self, din, n_in, dout, n_out);
        destroy_instance(b);
    }
    *inst = p;
    *ws = bytes;
    return KILN_OK;
}

static void k_release(void *inst) { destroy_instance(inst); }

static kiln_status k_run(const kb_run *r) {
    kiln_plugin *p = r->inst ? r->inst : ((const kpl_state *)r->state)->rt;
    kiln_tensor_desc din[64], dout[16];
    const void *ip[64];
    void *op[16];
    KN_TRY(descs(r->node, r->in, r->n_in, r->out, r->n_out, din, dout));
    for (int j = 0; j < r->n_in; j++)
        ip[j] = r->in[j].data;
    for (int j = 0; j < r->n_out; j++)
        op[j] = r->out[j].data;
    kpl_error_clear();
    kiln_status st = p->runtime->enqueue(p->self, din, ip, r->n_in, dout, op, r->n_out,
                                         r->workspace, r->stream);
    if (st != KILN_OK)
        return kpl_fail(r->node, st, "enqueue failed");
    return KILN_OK;
}

const kb_kernel kpl_kernel = {"*", KPL_DOMAIN, "plugin", NULL, k_init, k_fini,
                              k_prepare, k_release, k_run};
