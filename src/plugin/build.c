/* build.c - plugins in the builder (the fields round trip, format
 * negotiation with reformat layers) and in plans (the plugin-records section
 * with its library manifest and embedded libraries, checked at load before
 * any other work).
 *
 * Plugin-records section (plan section id KP_SEC_PLUGINS), version 1,
 * little-endian; "str" is u32 length + bytes (no NUL):
 *     4  u32 section version (1)
 *     4  u32 library count L
 *   L x  library: str file name (no folder), 64 bytes SHA-256 in hex,
 *                 u32 packaging (0 external, 1 embedded), u64 byte count E
 *                 (0 when external), E bytes of the library file
 *     4  u32 record count R
 *   R x  record: str layer name, str plugin name, str version, str namespace,
 *                i32 library index (-1: registered directly, not from a
 *                library), u64 field bytes F, F bytes (fields.c's byte form)
 * Readers check every length against the section's end. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"
#include "plugin.h"

/* ---- the fields round trip ---- */

static kiln_status fields_bytes(const kn_node *n, kiln_plugin *p, const char *when, kn_buf *out) {
    kiln_field_collection c = {0, NULL};
    kpl_error_clear();
    kiln_status st = p->runtime->get_fields(p->self, &c);
    if (st != KILN_OK)
        return kpl_fail(n, st, when);
    kpl_fields_write(&c, out);
    return out->failed ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

/* Name the first field that differs between two byte forms. */
static void first_difference(const kn_buf *a, const kn_buf *b, char *buf, size_t cap) {
    kpl_fields fa, fb;
    snprintf(buf, cap, "the bytes differ");
    if (kpl_fields_read(a->data, a->len, &fa) != KILN_OK)
        return;
    if (kpl_fields_read(b->data, b->len, &fb) != KILN_OK) {
        kpl_fields_free(&fa);
        return;
    }
    if (fa.c.count != fb.c.count)
        snprintf(buf, cap, "%d field(s) before, %d after", fa.c.count, fb.c.count);
    for (int i = 0; i < fa.c.count && i < fb.c.count; i++) {
        const kiln_field *x = &fa.items[i], *y = &fb.items[i];
        size_t bytes = (size_t)x->length * kpl_field_elem_size(x->type);
        if (strcmp(x->name, y->name) || x->type != y->type || x->length != y->length ||
            memcmp(x->data, y->data, bytes)) {
            snprintf(buf, cap, "field '%s' differs", x->name);
            break;
        }
    }
    kpl_fields_free(&fa);
    kpl_fields_free(&fb);
}

/* get_fields -> create(RUNTIME) -> get_fields must give the same fields, or
 * a plan could not recreate the layer. Stores the fields in the node. */
static kiln_status round_trip(kn_node *n) {
    const kiln_plugin_creator *cr;
    kiln_plugin *bp = NULL, *rp = NULL;
    KN_TRY(kpl_node_create(n, KILN_PLUGIN_PHASE_BUILD, &cr, &bp));
    kn_buf a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    kpl_fields fa;
    memset(&fa, 0, sizeof fa);
    kiln_status st = fields_bytes(n, bp, "get_fields (build instance) failed", &a);
    if (st == KILN_OK)
        st = kpl_fields_read(a.data, a.len, &fa);
    if (st == KILN_OK) {
        kpl_error_clear();
        st = cr->create(cr->self, n->name, &fa.c, KILN_PLUGIN_PHASE_RUNTIME, &rp);
        if (st != KILN_OK)
            st = kpl_fail(n, st, "create (runtime phase) from the build instance's fields failed");
        else if (!rp || !rp->runtime || !rp->runtime->get_fields)
            st = kpl_fail(n, KILN_ERR_PLUGIN, "create (runtime phase) gave no usable instance");
    }
    if (st == KILN_OK)
        st = fields_bytes(n, rp, "get_fields (runtime instance) failed", &b);
    if (st == KILN_OK && (a.len != b.len || memcmp(a.data, b.data, a.len) != 0)) {
        char diff[300], id[512];
        const char *name, *version, *ns;
        kpl_node_identity(n, &name, &version, &ns);
        kpl_identity(id, sizeof id, name, version, ns);
        first_difference(&a, &b, diff, sizeof diff);
        st = kn_error(KILN_ERR_PLUGIN,
                      "plugin %s, layer '%s': its serialization is not stable: the fields of an "
                      "instance created from get_fields differ from get_fields of the build "
                      "instance (%s), so a plan could not recreate this layer; fix the plugin's "
                      "get_fields/create",
                      id, n->name, diff);
    }
    if (st == KILN_OK) { /* what the plan stores is what recreates the layer */
        kn_attr *at = (kn_attr *)kn_attr_find(n, KPL_ATTR_FIELDS);
        char *s = at ? kn_malloc(a.len + 1) : NULL;
        if (!at || !s) {
            kn_free(s);
            st = at ? KILN_ERR_OUT_OF_MEMORY : kn_node_error(n, KILN_ERR_INTERNAL, "no fields");
        } else {
            memcpy(s, a.data, a.len);
            s[a.len] = 0;
            kn_free(at->s);
            at->s = s;
            at->s_len = a.len;
        }
    }
    if (rp && rp->runtime && rp->runtime->destroy)
        rp->runtime->destroy(rp->self);
    bp->runtime->destroy(bp->self);
    kpl_fields_free(&fa);
    kn_buf_free(&a);
    kn_buf_free(&b);
    return st;
}

/* ---- format negotiation ---- */

static const kiln_dtype candidates[] = {KILN_DTYPE_FLOAT,  KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16,
                                        KILN_DTYPE_DOUBLE, KILN_DTYPE_INT32,   KILN_DTYPE_INT64,
                                        KILN_DTYPE_INT8,   KILN_DTYPE_UINT8,   KILN_DTYPE_BOOL};

static void desc_of(const kn_tinfo *t, kiln_tensor_desc *d) {
    memset(d, 0, sizeof *d);
    d->dtype = t->dtype;
    d->layout = KILN_LAYOUT_LINEAR;
    d->rank = t->rank < 0 ? 0 : t->rank;
    memcpy(d->dims, t->dims, sizeof d->dims);
}

/* Insert Cast(src -> dst, to) named `name`. */
static kiln_status add_cast(kn_net *net, const char *name, int src, int dst, kiln_dtype to) {
    int idx;
    KN_TRY(kn_net_add_node(net, name, "Cast", "", net->opset > 0 ? net->opset : 17, 1, &src, 1,
                           &dst, &idx));
    return kn_node_set_int(&net->nodes[idx], "to", (int64_t)to);
}

static kiln_status negotiate(kn_net *net, int ni, const kn_tinfo *ti) {
    kn_node *n = &net->nodes[ni];
    if (n->n_in > 64 || n->n_out > 16)
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "too many inputs or outputs");
    kiln_plugin *p = NULL;
    KN_TRY(kpl_node_create(n, KILN_PLUGIN_PHASE_BUILD, NULL, &p));
    const char *name, *version, *ns;
    kpl_node_identity(n, &name, &version, &ns);
    char id[512];
    kpl_identity(id, sizeof id, name, version, ns);
    int n_in = n->n_in, n_out = n->n_out;
    kiln_tensor_desc d[80];
    kiln_dtype want_in[64], orig_out[16], dts[64], outs[16];
    kiln_status st = KILN_OK;
    memset(d, 0, sizeof d);
    for (int j = 0; j < n_in; j++) {
        kn_tinfo none;
        memset(&none, 0, sizeof none);
        desc_of(n->in[j] >= 0 ? &ti[n->in[j]] : &none, &d[j]);
        dts[j] = d[j].dtype;
    }
    for (int j = 0; j < n_out; j++)
        orig_out[j] = n->out[j] >= 0 ? ti[n->out[j]].dtype : KILN_DTYPE_UNDEFINED;
    /* inputs: the neighbour's type when the plugin takes it, else the first it takes */
    for (int j = 0; j < n_in && st == KILN_OK; j++) {
        want_in[j] = d[j].dtype;
        if (n->in[j] < 0 || !p->build->supports_format ||
            p->build->supports_format(p->self, j, d, n_in, n_out))
            continue;
        bool found = false;
        for (size_t k = 0; k < KN_ARRAY_LEN(candidates) && !found; k++) {
            d[j].dtype = candidates[k];
            found = p->build->supports_format(p->self, j, d, n_in, n_out) != 0;
        }
        if (!found)
            st = kn_error(KILN_ERR_UNSUPPORTED,
                          "plugin %s, layer '%s': supports_format accepts no type at input %d "
                          "(given %s)",
                          id, n->name, j, kiln_dtype_name(want_in[j]));
        else
            want_in[j] = d[j].dtype;
    }
    if (st == KILN_OK) {
        for (int j = 0; j < n_in; j++)
            dts[j] = want_in[j];
        kpl_error_clear();
        if ((st = p->build->output_dtypes(p->self, dts, n_in, outs, n_out)) != KILN_OK)
            st = kpl_fail(n, st, "output_dtypes failed");
    }
    for (int j = 0; j < n_out && st == KILN_OK; j++) {
        int t = n->out[j];
        kn_tinfo none;
        memset(&none, 0, sizeof none);
        desc_of(t >= 0 ? &ti[t] : &none, &d[n_in + j]);
        d[n_in + j].dtype = outs[j];
        if (p->build->supports_format &&
            !p->build->supports_format(p->self, n_in + j, d, n_in, n_out))
            st = kn_error(KILN_ERR_UNSUPPORTED,
                          "plugin %s, layer '%s': output %d has type %s (from output_dtypes) but "
                          "supports_format refuses it",
                          id, n->name, j, kiln_dtype_name(outs[j]));
    }
    if (st == KILN_OK && p->build->configure) {
        kpl_error_clear();
        if ((st = p->build->configure(p->self, d, n_in, d + n_in, n_out)) != KILN_OK)
            st = kpl_fail(n, st, "configure failed");
    }
    p->runtime->destroy(p->self);
    KN_TRY(st);
    /* reformat layers where the plugin's choice differs from its neighbours' */
    char nm[600];
    for (int j = 0; j < n_in; j++) {
        n = &net->nodes[ni];
        int src = n->in[j];
        if (src < 0 || want_in[j] == ti[src].dtype)
            continue;
        int dst;
        char hint[300];
        snprintf(hint, sizeof hint, "%.200s.reformat", net->tensors[src].name);
        KN_TRY(kn_net_new_tensor(net, hint, &dst));
        snprintf(nm, sizeof nm, "reformat %.200s to %s for %.200s", net->tensors[src].name,
                 kiln_dtype_name(want_in[j]), net->nodes[ni].name);
        KN_TRY(add_cast(net, nm, src, dst, want_in[j]));
        net->nodes[ni].in[j] = dst;
        kn_log(KILN_LOG_WARNING, "plugin %s, layer '%s': input %d is %s but the plugin takes %s: "
                                 "inserted '%s'",
               id, net->nodes[ni].name, j, kiln_dtype_name(ti[src].dtype),
               kiln_dtype_name(want_in[j]), nm);
    }
    for (int j = 0; j < n_out; j++) {
        int t = net->nodes[ni].out[j];
        if (t < 0 || outs[j] == orig_out[j] || orig_out[j] == KILN_DTYPE_UNDEFINED)
            continue;
        int mid;
        char hint[300];
        snprintf(hint, sizeof hint, "%.200s.reformat", net->tensors[t].name);
        KN_TRY(kn_net_new_tensor(net, hint, &mid));
        net->nodes[ni].out[j] = mid;
        net->tensors[mid].producer = ni;
        snprintf(nm, sizeof nm, "reformat %.200s to %s after %.200s", net->tensors[t].name,
                 kiln_dtype_name(orig_out[j]), net->nodes[ni].name);
        KN_TRY(add_cast(net, nm, mid, t, orig_out[j]));
        kn_log(KILN_LOG_WARNING, "plugin %s, layer '%s': output %d is %s but its neighbours take "
                                 "%s: inserted '%s'",
               id, net->nodes[ni].name, j, kiln_dtype_name(outs[j]), kiln_dtype_name(orig_out[j]),
               nm);
    }
    return KILN_OK;
}

kiln_status kpl_build_prepare(kn_net *net, const kn_tinfo *ti) {
    int count = net->n_nodes; /* reformat nodes are appended after these */
    for (int i = 0; i < count; i++) {
        if (!kpl_is_node(&net->nodes[i]) || net->nodes[i].dead)
            continue;
        KN_TRY(round_trip(&net->nodes[i]));
        KN_TRY(negotiate(net, i, ti));
    }
    return KILN_OK;
}

/* ---- the plugin-records section ---- */

static void put_u32(kn_buf *b, uint32_t v) {
    uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    kn_buf_append(b, t, 4);
}
static void put_u64(kn_buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static void put_str(kn_buf *b, const char *s, size_t n) {
    put_u32(b, (uint32_t)n);
    kn_buf_append(b, s, n);
}
static void put_cstr(kn_buf *b, const char *s) { put_str(b, s ? s : "", s ? strlen(s) : 0); }

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

typedef struct libref {
    const kiln_plugin_library *lib;
    const char *path;     /* as registered (a display name for embedded libraries) */
    const char *sha;
    bool embed;
} libref;

kiln_status kpl_plan_section(const kn_net *net, kn_buf *out) {
    int n_plugins = 0;
    for (int i = 0; i < net->n_nodes; i++)
        n_plugins += kpl_is_node(&net->nodes[i]);
    if (!n_plugins)
        return KILN_OK;
    libref *libs = kn_calloc((size_t)n_plugins, sizeof *libs);
    int *lib_of = kn_calloc((size_t)n_plugins, sizeof *lib_of);
    if (!libs || !lib_of) {
        kn_free(libs);
        kn_free(lib_of);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    int n_libs = 0, k = 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < net->n_nodes && st == KILN_OK; i++) {
        const kn_node *n = &net->nodes[i];
        if (!kpl_is_node(n))
            continue;
        const kiln_plugin_creator *cr;
        if ((st = kpl_node_creator(n, &cr)) != KILN_OK)
            break;
        const char *path = NULL, *sha = NULL;
        kpl_creator_origin(cr, &path, &sha, NULL);
        const kiln_plugin_library *lib = kiln_plugin_creator_library(cr);
        lib_of[k] = -1;
        if (path) {
            for (int l = 0; l < n_libs; l++)
                if (strcmp(libs[l].sha, sha) == 0)
                    lib_of[k] = l;
            if (lib_of[k] < 0) {
                libs[n_libs] = (libref){lib, path, sha, kpl_library_embedded(lib)};
                lib_of[k] = n_libs++;
            }
        }
        k++;
    }
    put_u32(out, 1);
    put_u32(out, (uint32_t)n_libs);
    for (int l = 0; l < n_libs && st == KILN_OK; l++) {
        put_cstr(out, base_name(libs[l].path));
        kn_buf_append(out, libs[l].sha, 64);
        put_u32(out, libs[l].embed ? 1u : 0u);
        if (!libs[l].embed) {
            put_u64(out, 0);
            continue;
        }
        uint8_t *data = NULL;
        size_t size = 0;
        st = kpl_library_bytes(libs[l].lib, &data, &size);
        if (st != KILN_OK)
            break;
        char sha[65];
        kn_sha256_hex(data, size, sha);
        if (strcmp(sha, libs[l].sha) != 0)
            st = kn_error(KILN_ERR_PLUGIN,
                          "plugin library '%s' changed on disk since it was loaded (SHA-256 %.16s... "
                          "now %.16s...): reload it before embedding it in a plan",
                          libs[l].path, libs[l].sha, sha);
        put_u64(out, size);
        kn_buf_append(out, data, size);
        kn_free(data);
    }
    put_u32(out, (uint32_t)n_plugins);
    k = 0;
    for (int i = 0; i < net->n_nodes && st == KILN_OK; i++) {
        const kn_node *n = &net->nodes[i];
        if (!kpl_is_node(n))
            continue;
        const char *name, *version, *ns;
        kpl_node_identity(n, &name, &version, &ns);
        const kn_attr *f = kn_attr_find(n, KPL_ATTR_FIELDS);
        put_cstr(out, n->name);
        put_cstr(out, name);
        put_cstr(out, version);
        put_cstr(out, ns);
        put_u32(out, (uint32_t)lib_of[k++]);
        put_u64(out, f ? f->s_len : 0);
        if (f && f->s_len)
            kn_buf_append(out, f->s, f->s_len);
    }
    kn_free(libs);
    kn_free(lib_of);
    if (st == KILN_OK && out->failed)
        st = KILN_ERR_OUT_OF_MEMORY;
    return st;
}

/* ---- reading the section ---- */

typedef struct rd {
    const uint8_t *p;
    size_t at, end;
    bool bad;
} rd;

static uint32_t rd_u32(rd *r) {
    if (r->bad || r->end - r->at < 4) {
        r->bad = true;
        return 0;
    }
    const uint8_t *q = r->p + r->at;
    r->at += 4;
    return (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
}
static uint64_t rd_u64(rd *r) {
    uint64_t lo = rd_u32(r);
    return lo | (uint64_t)rd_u32(r) << 32;
}
static const uint8_t *rd_bytes(rd *r, uint64_t n) {
    if (r->bad || n > r->end - r->at) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *q = r->p + r->at;
    r->at += (size_t)n;
    return q;
}
/* A string copied into buf, cut to cap-1 bytes (r->bad when malformed).
 * Returns whether it fitted whole: a cut plugin identity would name another
 * plugin, so the caller refuses one. */
static bool rd_str(rd *r, char *buf, size_t cap) {
    uint32_t n = rd_u32(r);
    const uint8_t *q = rd_bytes(r, n);
    if (!q) {
        buf[0] = 0;
        return false;
    }
    size_t m = n < cap - 1 ? n : cap - 1;
    memcpy(buf, q, m);
    buf[m] = 0;
    if (memchr(buf, 0, m))
        r->bad = true;
    return m == n;
}

typedef struct plib {
    char file[256];
    char sha[65];
    uint32_t packaging;
    const uint8_t *bytes;
    uint64_t size;
} plib;

typedef struct prec {
    char layer[256], name[128], version[64], ns[128];
    int32_t lib;
} prec;

typedef struct psec {
    int n_libs, n_recs;
    plib *libs;
    prec *recs;
} psec;

static void psec_free(psec *s) {
    kn_free(s->libs);
    kn_free(s->recs);
    memset(s, 0, sizeof *s);
}

static kiln_status psec_read(const uint8_t *data, size_t size, psec *out) {
    rd r = {data, 0, size, false};
    memset(out, 0, sizeof *out);
    uint32_t version = rd_u32(&r);
    if (!r.bad && version != 1)
        return kn_error(KILN_ERR_VERSION,
                        "the plan's plugin records have version %u; this kiln reads version 1",
                        version);
    uint32_t nl = rd_u32(&r);
    if (r.bad || nl > (size - r.at) / 80)
        return kn_error(KILN_ERR_PLAN, "plan damaged: plugin records: library count %u does not "
                                       "fit the section", nl);
    out->libs = kn_calloc((size_t)nl + 1, sizeof *out->libs);
    if (!out->libs)
        return KILN_ERR_OUT_OF_MEMORY;
    out->n_libs = (int)nl;
    for (uint32_t i = 0; i < nl && !r.bad; i++) {
        plib *l = &out->libs[i];
        rd_str(&r, l->file, sizeof l->file);
        const uint8_t *sha = rd_bytes(&r, 64);
        if (sha) {
            memcpy(l->sha, sha, 64);
            l->sha[64] = 0;
        }
        l->packaging = rd_u32(&r);
        l->size = rd_u64(&r);
        l->bytes = rd_bytes(&r, l->size);
        if (l->packaging > 1 || (l->packaging == 0 && l->size) || strchr(l->file, '/'))
            r.bad = true;
    }
    uint32_t nr = rd_u32(&r);
    if (r.bad || nr > (size - r.at) / 28) { /* 28: a record of empty strings, no fields */
        psec_free(out);
        return kn_error(KILN_ERR_PLAN, "plan damaged: plugin records are malformed (section of "
                                       "%zu bytes)", size);
    }
    out->recs = kn_calloc((size_t)nr + 1, sizeof *out->recs);
    if (!out->recs) {
        psec_free(out);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    out->n_recs = (int)nr;
    for (uint32_t i = 0; i < nr && !r.bad; i++) {
        prec *c = &out->recs[i];
        rd_str(&r, c->layer, sizeof c->layer); /* names the layer in messages only */
        if (!rd_str(&r, c->name, sizeof c->name) | !rd_str(&r, c->version, sizeof c->version) |
            !rd_str(&r, c->ns, sizeof c->ns))
            r.bad = true;
        c->lib = (int32_t)rd_u32(&r);
        rd_bytes(&r, rd_u64(&r));
        if (c->lib < -1 || c->lib >= (int32_t)nl)
            r.bad = true;
    }
    if (r.bad) {
        psec_free(out);
        return kn_error(KILN_ERR_PLAN, "plan damaged: plugin records are malformed (section of "
                                       "%zu bytes)", size);
    }
    return KILN_OK;
}

/* ---- binding a loaded plan's layers ---- */

static pthread_mutex_t plan_mu = PTHREAD_MUTEX_INITIALIZER;
void kpl_plan_lock(void) { pthread_mutex_lock(&plan_mu); }
void kpl_plan_unlock(void) { pthread_mutex_unlock(&plan_mu); }

/* A record's field (cut to cap - 1 bytes by rd_str) names s. */
static bool rec_eq(const char *field, size_t cap, const char *s) {
    size_t n = strlen(s);
    return n >= cap - 1 ? strncmp(field, s, cap - 1) == 0 && strlen(field) == cap - 1
                        : strcmp(field, s) == 0;
}

static bool rec_matches(const prec *c, const kn_node *n) {
    const char *name, *version, *ns;
    kpl_node_identity(n, &name, &version, &ns);
    return rec_eq(c->layer, sizeof c->layer, n->name) && rec_eq(c->name, sizeof c->name, name) &&
           rec_eq(c->version, sizeof c->version, version) && rec_eq(c->ns, sizeof c->ns, ns);
}

static kiln_status loaded_add(kpl_loaded *l, kiln_plugin_library *lib) {
    kiln_plugin_library **grown = kn_realloc(l->libs, (size_t)(l->n + 1) * sizeof *grown);
    if (!grown) {
        if (kiln_plugin_deregister_library(lib) != KILN_OK) /* unused until now: cannot fail */
            kn_log(KILN_LOG_WARNING, "%s", kiln_last_error());
        return KILN_ERR_OUT_OF_MEMORY;
    }
    l->libs = grown;
    l->libs[l->n++] = lib;
    return KILN_OK;
}

void kpl_loaded_release(kpl_loaded *l, bool keep) {
    for (int i = l->n - 1; i >= 0 && !keep; i--)
        if (kiln_plugin_deregister_library(l->libs[i]) != KILN_OK)
            kn_log(KILN_LOG_WARNING, "a plugin library loaded for a plan that failed stays "
                                     "registered: %s", kiln_last_error());
    kn_free(l->libs);
    memset(l, 0, sizeof *l);
}

/* Load the library a plan embeds, once its bytes match the plan's manifest
 * and the caller permits them (its allow-list, else the blanket switch). */
static kiln_status load_embedded(const plib *l, const prec *needs, kpl_loaded *loaded) {
    char id[512];
    kpl_identity(id, sizeof id, needs->name, needs->version, needs->ns);
    char sha[65];
    kn_sha256_hex(l->bytes, (size_t)l->size, sha);
    if (strcmp(sha, l->sha) != 0)
        return kn_error(KILN_ERR_PLUGIN,
                        "embedded plugin library '%s': its SHA-256 is %s but the plan's manifest "
                        "says %s: the plan was altered; refusing to load it",
                        l->file, sha, l->sha);
    switch (kpl_embedded_permit(sha)) {
    case KPL_PERMIT_YES:
        break;
    case KPL_PERMIT_NOT_LISTED:
        return kn_error(KILN_ERR_PLUGIN,
                        "layer '%s' needs plugin %s, which is not registered; the plan embeds "
                        "library '%s' (SHA-256 %s) that provides it, but that SHA-256 is not on "
                        "the caller's allow-list (kiln_plugin_allow_embedded_sha256, "
                        "--allowEmbeddedPluginSha256): refusing to load it",
                        needs->layer, id, l->file, sha);
    default:
        return kn_error(KILN_ERR_PLUGIN,
                        "layer '%s' needs plugin %s, which is not registered; the plan embeds "
                        "library '%s' that provides it, but loading libraries embedded in plans "
                        "is not allowed: call kiln_plugin_allow_embedded_libraries(1) (or allow "
                        "its SHA-256 %s with kiln_plugin_allow_embedded_sha256) if you trust "
                        "this plan, or load the library yourself",
                        needs->layer, id, l->file, sha);
    }
    kiln_plugin_library *lib = NULL;
    KN_TRY(kpl_load_bytes(l->bytes, (size_t)l->size, l->file, &lib));
    KN_TRY(loaded_add(loaded, lib));
    if (!kpl_find_bound(needs->name, needs->version, needs->ns, sha))
        return kn_error(KILN_ERR_PLUGIN,
                        "layer '%s' needs plugin %s, but the library '%s' the plan embeds for it "
                        "does not provide it",
                        needs->layer, id, l->file);
    return KILN_OK;
}

static kiln_status not_registered(const psec *s, const prec *c) {
    char id[512], others[1024];
    kpl_identity(id, sizeof id, c->name, c->version, c->ns);
    kpl_list_same_name(others, sizeof others, c->name);
    return kn_error(KILN_ERR_PLUGIN,
                    "layer '%s' needs plugin %s%s%s%s, which is not registered; registered "
                    "creators named '%s': %s",
                    c->layer, id, c->lib >= 0 ? " from library '" : "",
                    c->lib >= 0 ? s->libs[c->lib].file : "", c->lib >= 0 ? "'" : "", c->name,
                    others);
}

/* Which build a plan layer runs (sha: what KPL_ATTR_BOUND gets). */
static kiln_status resolve(const psec *s, const prec *c, kpl_loaded *loaded, char sha[65]) {
    const plib *l = c->lib >= 0 ? &s->libs[c->lib] : NULL;
    char mine_sha[65] = "";
    const kiln_plugin_creator *mine = kpl_find_caller(c->name, c->version, c->ns, mine_sha);
    if (l && l->packaging == 1) {
        if (kpl_find_bound(c->name, c->version, c->ns, l->sha)) {
            memcpy(sha, l->sha, 65); /* that very build is registered already */
            return KILN_OK;
        }
        if (mine) { /* the caller's choice, and no code from the plan */
            char id[512];
            kpl_identity(id, sizeof id, c->name, c->version, c->ns);
            kn_log(KILN_LOG_WARNING,
                   "layer '%s': the plan embeds library '%s' (sha256 %.16s...) for plugin %s, "
                   "but the application registered that plugin itself (sha256 %.16s...): "
                   "running the application's",
                   c->layer, l->file, l->sha, id, mine_sha[0] ? mine_sha : "none, direct");
            memcpy(sha, mine_sha, 65);
            return KILN_OK;
        }
        KN_TRY(load_embedded(l, c, loaded));
        memcpy(sha, l->sha, 65);
        return KILN_OK;
    }
    if (mine) {
        memcpy(sha, mine_sha, 65);
        return KILN_OK;
    }
    /* a build another plan brought serves this one only if it is the very
     * library this plan was built with */
    if (l && kpl_find_bound(c->name, c->version, c->ns, l->sha)) {
        memcpy(sha, l->sha, 65);
        return KILN_OK;
    }
    return not_registered(s, c);
}

static kiln_status bind_node(kn_node *n, const char *sha) {
    kiln_status st = kn_node_set_string(n, KPL_ATTR_BOUND, sha);
    return st == KILN_OK ? st : kn_node_error(n, st, "cannot record its plugin binding");
}

/* Layers inside graph attributes have no records: only the application's
 * own registrations serve them. */
static kiln_status bind_nested(kn_net *g, int depth) {
    if (depth > 64)
        return kn_error(KILN_ERR_PLAN, "plan damaged: graph attributes nest deeper than 64");
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_attr; k++)
            if (n->attrs[k].type == KN_ATTR_GRAPH && n->attrs[k].graph)
                KN_TRY(bind_nested(n->attrs[k].graph, depth + 1));
        if (!kpl_is_node(n) || depth == 0)
            continue;
        const char *name, *version, *ns;
        char sha[65];
        kpl_node_identity(n, &name, &version, &ns);
        if (!kpl_find_caller(name, version, ns, sha)) {
            char id[512];
            kpl_identity(id, sizeof id, name, version, ns);
            return kn_error(KILN_ERR_PLUGIN,
                            "layer '%s' (inside a graph attribute) needs plugin %s, which the "
                            "application has not registered (libraries embedded in a plan serve "
                            "only the layers its plugin records name)",
                            n->name, id);
        }
        KN_TRY(bind_node(n, sha));
    }
    return KILN_OK;
}

bool kpl_net_has_plugins(const kn_net *g) {
    for (int i = 0; g && i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (kpl_is_node(n))
            return true;
        for (int k = 0; k < n->n_attr; k++)
            if (n->attrs[k].type == KN_ATTR_GRAPH && kpl_net_has_plugins(n->attrs[k].graph))
                return true;
    }
    return false;
}

kiln_status kpl_plan_bind(const void *plan, size_t size, kn_net *net, kpl_loaded *loaded) {
    memset(loaded, 0, sizeof *loaded);
    const uint8_t *sec = NULL;
    size_t sec_size = 0;
    KN_TRY(kp_section(plan, size, KP_SEC_PLUGINS, &sec, &sec_size));
    psec s;
    memset(&s, 0, sizeof s);
    if (sec)
        KN_TRY(psec_read(sec, sec_size, &s));
    bool *used = kn_calloc((size_t)s.n_recs + 1, sizeof *used);
    if (!used) {
        psec_free(&s);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln_status st = bind_nested(net, 0);
    for (int i = 0; st == KILN_OK && i < net->n_nodes; i++) {
        kn_node *n = &net->nodes[i];
        if (!kpl_is_node(n))
            continue;
        int r = 0;
        while (r < s.n_recs && (used[r] || !rec_matches(&s.recs[r], n)))
            r++;
        if (r == s.n_recs) {
            const char *name, *version, *ns;
            kpl_node_identity(n, &name, &version, &ns);
            char id[512];
            kpl_identity(id, sizeof id, name, version, ns);
            st = kn_error(KILN_ERR_PLAN,
                          "plan damaged: plugin layer '%s' (plugin %s) has no plugin record",
                          n->name, id);
            break;
        }
        used[r] = true;
        char sha[65] = "";
        st = resolve(&s, &s.recs[r], loaded, sha);
        if (st == KILN_OK)
            st = bind_node(n, sha);
    }
    kn_free(used);
    psec_free(&s);
    if (st != KILN_OK)
        kpl_loaded_release(loaded, false);
    return st;
}

KILN_API kiln_status kiln_plan_plugins_json(const void *plan, size_t size, char **json) {
    if (!plan || !json)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_plan_plugins_json: NULL argument");
    const uint8_t *sec = NULL;
    size_t sec_size = 0;
    KN_TRY(kp_section(plan, size, KP_SEC_PLUGINS, &sec, &sec_size));
    psec s;
    memset(&s, 0, sizeof s);
    if (sec)
        KN_TRY(psec_read(sec, sec_size, &s));
    kn_buf b;
    memset(&b, 0, sizeof b);
    kn_buf_printf(&b, "{\"libraries\": [");
    for (int i = 0; i < s.n_libs; i++) {
        kn_buf_printf(&b, "%s{\"file\": ", i ? ", " : "");
        kn_buf_json_string(&b, s.libs[i].file);
        kn_buf_printf(&b, ", \"sha256\": \"%s\", \"packaging\": \"%s\", \"bytes\": %llu}",
                      s.libs[i].sha, s.libs[i].packaging ? "embedded" : "external",
                      (unsigned long long)s.libs[i].size);
    }
    kn_buf_printf(&b, "], \"plugins\": [");
    for (int i = 0; i < s.n_recs; i++) {
        const prec *c = &s.recs[i];
        kn_buf_printf(&b, "%s{\"layer\": ", i ? ", " : "");
        kn_buf_json_string(&b, c->layer);
        kn_buf_printf(&b, ", \"name\": ");
        kn_buf_json_string(&b, c->name);
        kn_buf_printf(&b, ", \"version\": ");
        kn_buf_json_string(&b, c->version);
        kn_buf_printf(&b, ", \"namespace\": ");
        kn_buf_json_string(&b, c->ns);
        kn_buf_printf(&b, ", \"library\": %d, \"registered\": %s}", c->lib,
                      kiln_plugin_find(c->name, c->version, c->ns) ? "true" : "false");
    }
    kn_buf_printf(&b, "]}");
    kn_buf_append(&b, "", 1);
    psec_free(&s);
    if (b.failed) {
        kn_buf_free(&b);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    *json = (char *)b.data;
    return KILN_OK;
}
