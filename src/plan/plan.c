/* plan.c - the plan file: a writer that serializes an optimized network with
 * its profiles and target identity, and a reader that checks every byte it
 * relies on before trusting it. docs/plan-format.md has the same layout.
 *
 * ---------------------------------------------------------------------------
 * Plan format version 1. All integers are little-endian and fixed width;
 * floats are IEEE-754 bit patterns (f32, f64) stored as u32/u64. "str" is a
 * u32 index into the strings section; 0xFFFFFFFF (NONE) means "no string".
 *
 * File: header | section table | sections ... | checksum
 *
 * Header, 256 bytes at offset 0 (the fields below keep their offsets in every
 * later format version, so kp_read_info can report on plans it cannot load):
 *     0   8  magic "KILNPLAN"
 *     8   4  u32 format version (1)
 *    12   4  u32 header size in bytes (256; a later version may grow it)
 *    16   4  u32 kiln version of the builder (KILN_VERSION_NUMBER)
 *    20   4  u32 builder flags (kiln_builder_flag bits)
 *    24   8  u64 total file size in bytes, checksum included
 *    32   4  u32 section count
 *    36   4  u32 reserved, 0
 *    40  16  backend, UTF-8, NUL-padded ("cpu", "cuda")
 *    56  64  target, NUL-padded ("x86_64", "sm_90")
 *   120 128  libraries bound into the plan, NUL-padded ("dnnl=3.1;openblas=0.3")
 *   248   8  u64 header hash: kn_hash64(bytes 0..247, KP_SEED_HEADER)
 * Each text field holds at least one NUL.
 *
 * Section table, at offset <header size>, <section count> entries of 24 bytes:
 *     0   4  u32 section id
 *     4   4  u32 reserved, 0
 *     8   8  u64 offset of the section from the start of the file
 *    16   8  u64 size of the section in bytes
 * Sections lie after the table, before the checksum, and do not overlap. Each
 * known id appears at most once. Readers skip ids they do not know, so a later
 * version can add sections (plugin records, embedded plugin libraries).
 *
 * Section ids and contents (a section may be longer than what is described;
 * the rest is ignored, again so that fields can be appended later):
 *   1 strings:  u32 count, then count x { u32 length, length bytes } (no NUL
 *               stored; a string may contain NUL bytes).
 *   2 graphs:   the I/O and opsets of each graph. Graph 0 is the network;
 *               graphs 1.. are the bodies of graph attributes (If, Loop, Scan),
 *               each numbered after the graph that holds it.
 *               u32 count, then per graph:
 *                 u32 tensor count, u32 node count, i32 default opset,
 *                 u32 n_inputs,  n_inputs  x u32 tensor index,
 *                 u32 n_outputs, n_outputs x u32 tensor index,
 *                 u32 n_opsets,  n_opsets  x { str domain, i32 version }
 *   3 tensors:  u32 count (the sum over graphs), then the tensors of graph 0,
 *               graph 1, ... each:
 *                 str name, u32 dtype (kiln_dtype), i32 rank (-1 unknown),
 *                 u32 flags (KN_T_INPUT 1, OUTPUT 2, CONST 4, HOST 8),
 *                 rank x i64 dim (< 0 dynamic), rank x str dim name,
 *                 when CONST: a value (below).
 *   4 nodes:    u32 count (the sum over graphs), then the nodes of graph 0,
 *               graph 1, ... each:
 *                 str name, str op_type, str domain, i32 opset, str tactic,
 *                 u32 flags (1 = dead), u32 n_in, n_in x i32 tensor (-1 absent),
 *                 u32 n_out, n_out x i32 tensor (-1 unused), u32 n_attr, then
 *                 n_attr x { str name, u32 type (kn_attr_type), payload }:
 *                   0 undefined: nothing     1 float: f32      2 int: i64
 *                   3 string: str            4 tensor: u32 present (0/1), value
 *                   5 graph: u32 graph index (NONE: no graph; else greater than
 *                     the index of the graph holding the node, used once)
 *                   6 floats: u64 n, n x f32 7 ints: u64 n, n x i64
 *                   8 strings: u64 n, n x str
 *               Tensor indices are those of the node's own graph.
 *   5 profiles: u32 n_profiles, u32 n_inputs (graph 0's input count), then per
 *               profile per input: u32 rank, rank x i64 min, rank x i64 opt,
 *               rank x i64 max, with 0 <= min <= opt <= max.
 *   6 stats:    u64 activation arena bytes, u64 sum of activation bytes,
 *               u64 largest workspace bytes, f64 build time in ms.
 *   7 weights:  the bytes of every constant. The section starts at a multiple
 *               of 64 from the file start and each value starts at a multiple
 *               of 64 inside it (zero padding between), so a page-aligned
 *               mapping of the file gives 64-byte aligned weights.
 *   8 plugins:  (optional) plugin records: each plugin layer's identity and
 *               serialized fields, and the manifest of plugin libraries (file
 *               name, SHA-256, optionally the library's bytes). Its layout is
 *               documented in src/plugin/build.c, which reads and writes it.
 *
 * A value (constant tensor or tensor attribute):
 *   u32 dtype, i32 rank (0..8), rank x i64 dim (>= 0), u64 offset inside the
 *   weights section (a multiple of 64), u64 byte count (= element count x
 *   element size; string tensors keep opaque bytes).
 *
 * Checksum, the last 8 bytes: u64 kn_hash64(every byte before it, KP_SEED_FILE).
 * ---------------------------------------------------------------------------
 */
#include <stdio.h>
#include <string.h>

#include "plan.h"

#define KP_MAGIC "KILNPLAN"
#define KP_HEADER_SIZE 256u
_Static_assert(KP_HEADER_SIZE == KP_HEADER_BYTES, "plan.h and plan.c agree on the header size");
#define KP_ENTRY_SIZE 24u
#define KP_CHECKSUM_SIZE 8u
#define KP_MAX_SECTIONS 1024u
#define KP_MAX_GRAPH_DEPTH 64
#define KP_MAX_PROFILES 4096
#define KP_NONE 0xFFFFFFFFu
#define KP_SEED_HEADER 0x4b494c4e48454144ull /* "KILNHEAD" */
#define KP_SEED_FILE 0x4b494c4e46494c45ull   /* "KILNFILE" */
#define KP_WEIGHT_ALIGN 64u

enum {
    KP_SEC_STRINGS = 1,
    KP_SEC_GRAPHS = 2,
    KP_SEC_TENSORS = 3,
    KP_SEC_NODES = 4,
    KP_SEC_PROFILES = 5,
    KP_SEC_STATS = 6,
    KP_SEC_WEIGHTS = 7,
    KP_SEC_KNOWN_MAX = 7
};

static const char *const kp_sec_names[] = {"?",     "strings",  "graphs", "tensors",
                                           "nodes", "profiles", "stats",  "weights"};

static const char *sec_name(uint32_t id) {
    return id >= 1 && id <= KP_SEC_KNOWN_MAX ? kp_sec_names[id] : "unknown";
}

#define KP_T_KNOWN_FLAGS (KN_T_INPUT | KN_T_OUTPUT | KN_T_CONST | KN_T_HOST)

/* ---- little-endian helpers ---- */

static uint32_t ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t ld_u64(const uint8_t *p) { return (uint64_t)ld_u32(p) | (uint64_t)ld_u32(p + 4) << 32; }
static void st_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void st_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u32(kn_buf *b, uint32_t v) {
    uint8_t t[4];
    st_u32(t, v);
    kn_buf_append(b, t, 4);
}
static void put_u64(kn_buf *b, uint64_t v) {
    uint8_t t[8];
    st_u64(t, v);
    kn_buf_append(b, t, 8);
}
static void put_i32(kn_buf *b, int32_t v) { put_u32(b, (uint32_t)v); }
static void put_i64(kn_buf *b, int64_t v) { put_u64(b, (uint64_t)v); }
static void put_f32(kn_buf *b, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    put_u32(b, u);
}
static void put_f64(kn_buf *b, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    put_u64(b, u);
}

/* ======================================================================= */
/* Graph rules that both sides enforce                                     */
/* ======================================================================= */

/* The runtime relies on these, so the writer refuses a network that breaks
 * them and the reader refuses a plan that does:
 *  - a tensor is listed at most once among the inputs and once among the
 *    outputs; (reader) its input/output flags agree with those lists;
 *  - no node writes a graph input or a constant, and no tensor has two
 *    producers (single assignment);
 *  - in graph 0, every node input is a graph input, a constant or the output
 *    of an earlier node, and so is every graph output. Bodies of graph
 *    attributes may read names of the enclosing graphs, so they are exempt.
 * fail() formats the message; `what` prefixes it ("plan writer", ...). */
enum { KP_IN_LIST = 1, KP_OUT_LIST = 2, KP_PRODUCED = 4 };

static kiln_status graph_check(const kn_net *net, uint32_t g, bool check_flags, kiln_status st,
                               const char *what) {
    uint8_t *mark = kn_calloc((size_t)net->n_tensors + 1, 1);
    if (!mark)
        return KILN_ERR_OUT_OF_MEMORY;
    char msg[640];
    msg[0] = 0;
    for (int i = 0; i < net->n_inputs && !msg[0]; i++) {
        int t = net->inputs[i];
        if (mark[t] & KP_IN_LIST)
            snprintf(msg, sizeof msg, "tensor '%s' is listed twice as an input",
                     net->tensors[t].name);
        mark[t] |= KP_IN_LIST;
    }
    for (int i = 0; i < net->n_outputs && !msg[0]; i++) {
        int t = net->outputs[i];
        if (mark[t] & KP_OUT_LIST)
            snprintf(msg, sizeof msg, "tensor '%s' is listed twice as an output",
                     net->tensors[t].name);
        mark[t] |= KP_OUT_LIST;
    }
    for (int t = 0; check_flags && t < net->n_tensors && !msg[0]; t++) {
        const kn_tensor *x = &net->tensors[t];
        if (!(x->flags & KN_T_INPUT) != !(mark[t] & KP_IN_LIST))
            snprintf(msg, sizeof msg, "tensor %d '%s' is %sflagged as an input but is %sin the "
                     "input list", t, x->name, x->flags & KN_T_INPUT ? "" : "not ",
                     mark[t] & KP_IN_LIST ? "" : "not ");
        else if (!(x->flags & KN_T_OUTPUT) != !(mark[t] & KP_OUT_LIST))
            snprintf(msg, sizeof msg, "tensor %d '%s' is %sflagged as an output but is %sin the "
                     "output list", t, x->name, x->flags & KN_T_OUTPUT ? "" : "not ",
                     mark[t] & KP_OUT_LIST ? "" : "not ");
    }
    for (int i = 0; i < net->n_nodes && !msg[0]; i++) {
        const kn_node *n = &net->nodes[i];
        for (int j = 0; g == 0 && j < n->n_in && !msg[0]; j++) {
            int t = n->in[j];
            if (t >= 0 && !(mark[t] & (KP_IN_LIST | KP_PRODUCED)) &&
                !(net->tensors[t].flags & KN_T_CONST))
                snprintf(msg, sizeof msg, "node %d '%s' (%s) reads tensor '%s' before any node "
                         "produces it", i, n->name, n->op_type, net->tensors[t].name);
        }
        for (int j = 0; j < n->n_out && !msg[0]; j++) {
            int t = n->out[j];
            if (t < 0)
                continue;
            if ((mark[t] & KP_IN_LIST) || (net->tensors[t].flags & KN_T_CONST))
                snprintf(msg, sizeof msg, "node %d '%s' (%s) writes tensor '%s', a graph %s", i,
                         n->name, n->op_type, net->tensors[t].name,
                         mark[t] & KP_IN_LIST ? "input" : "constant");
            else if (mark[t] & KP_PRODUCED)
                snprintf(msg, sizeof msg, "node %d '%s' (%s) writes tensor '%s', which an "
                         "earlier node writes too", i, n->name, n->op_type,
                         net->tensors[t].name);
            mark[t] |= KP_PRODUCED;
        }
    }
    for (int i = 0; g == 0 && i < net->n_outputs && !msg[0]; i++) {
        int t = net->outputs[i];
        if (!(mark[t] & (KP_IN_LIST | KP_PRODUCED)) && !(net->tensors[t].flags & KN_T_CONST))
            snprintf(msg, sizeof msg, "graph output '%s' is not produced by any node",
                     net->tensors[t].name);
    }
    kn_free(mark);
    if (msg[0])
        return kn_error(st, "%s: graph %u: %s", what, g, msg);
    return KILN_OK;
}

/* Profiles as the runtime uses them: at least one when the network has
 * inputs; each input's rank as the network says (when known); static dims
 * fixed (min = opt = max = the dim); 0 <= min <= opt <= max. */
static kiln_status profile_check(const kn_net *net, int n_profiles, const kp_profile *profiles,
                                 kiln_status st, const char *what) {
    if (net->n_inputs > 0 && n_profiles < 1)
        return kn_error(st, "%s: the network has inputs but no optimization profile", what);
    for (int p = 0; p < n_profiles; p++) {
        const kp_profile *pr = &profiles[p];
        if (pr->n_inputs != net->n_inputs)
            return kn_error(st, "%s: profile %d covers %d inputs, the network has %d", what, p,
                            pr->n_inputs, net->n_inputs);
        for (int i = 0; i < pr->n_inputs; i++) {
            const kn_tensor *t = &net->tensors[net->inputs[i]];
            if (pr->rank[i] < 0 || pr->rank[i] > KILN_MAX_DIMS ||
                (t->rank >= 0 && pr->rank[i] != t->rank))
                return kn_error(st, "%s: profile %d gives input '%s' rank %d; the network says %d",
                                what, p, t->name, pr->rank[i], t->rank);
            for (int d = 0; d < pr->rank[i]; d++) {
                int64_t lo = pr->min[i][d], mid = pr->opt[i][d], hi = pr->max[i][d];
                if (lo < 0 || lo > mid || mid > hi)
                    return kn_error(st, "%s: profile %d input '%s' dimension %d needs 0 <= min <= "
                                    "opt <= max (%lld, %lld, %lld)", what, p, t->name, d,
                                    (long long)lo, (long long)mid, (long long)hi);
                if (t->rank >= 0 && t->dims[d] >= 0 && (lo != t->dims[d] || hi != t->dims[d]))
                    return kn_error(st, "%s: profile %d input '%s' dimension %d is %lld in the "
                                    "network; the profile gives %lld..%lld", what, p, t->name, d,
                                    (long long)t->dims[d], (long long)lo, (long long)hi);
            }
        }
    }
    return KILN_OK;
}

/* ======================================================================= */
/* Writer                                                                  */
/* ======================================================================= */

typedef struct kp_wr {
    kn_buf strings;         /* the string records, without the count */
    uint32_t n_strings;
    kn_strmap interned;     /* NUL-free strings already stored (keys borrowed) */
    kn_buf graphs, tensors, nodes;
    /* Constants are not copied until the file is assembled: each one's bytes
     * and place in the weights section are listed, so a large model needs
     * memory for the plan once, not for the plan and a copy of its weights. */
    struct kp_wval { const void *data; size_t nbytes; size_t off; } *wvals;
    int n_wvals, cap_wvals;
    size_t wlen;            /* weights section length so far */
    uint32_t n_tensors, n_nodes;
    const kn_net **queue;   /* graphs in plan order (breadth first) */
    uint32_t n_graph_done;  /* graphs written so far */
    int n_queue, cap_queue;
} kp_wr;

static kiln_status wr_string(kp_wr *w, const char *s, size_t len, uint32_t *index) {
    if (!s) {
        *index = KP_NONE;
        return KILN_OK;
    }
    bool plain = strlen(s) == len; /* no NUL inside: safe to share through the map */
    if (plain) {
        int k = kn_strmap_get(&w->interned, s);
        if (k >= 0) {
            *index = (uint32_t)k;
            return KILN_OK;
        }
    }
    if (len > UINT32_MAX || w->n_strings >= KP_NONE - 1 || w->n_strings > INT32_MAX - 1)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: too many or too long strings");
    put_u32(&w->strings, (uint32_t)len);
    kn_buf_append(&w->strings, s, len);
    if (plain)
        KN_TRY(kn_strmap_put(&w->interned, s, (int)w->n_strings));
    *index = w->n_strings++;
    return KILN_OK;
}

static kiln_status wr_str(kp_wr *w, kn_buf *b, const char *s) {
    uint32_t k;
    KN_TRY(wr_string(w, s, s ? strlen(s) : 0, &k));
    put_u32(b, k);
    return KILN_OK;
}

static kiln_status wr_value(kp_wr *w, kn_buf *b, const kn_tdata *v) {
    if (v->rank < 0 || v->rank > KILN_MAX_DIMS)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: constant of rank %d", v->rank);
    if (v->nbytes && !v->data)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: constant of %zu bytes has no data",
                        v->nbytes);
    put_u32(b, (uint32_t)v->dtype);
    put_i32(b, v->rank);
    for (int i = 0; i < v->rank; i++)
        put_i64(b, v->dims[i]);
    size_t off = (w->wlen + KP_WEIGHT_ALIGN - 1) & ~(size_t)(KP_WEIGHT_ALIGN - 1);
    if (off < w->wlen || v->nbytes > SIZE_MAX - off)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "plan writer: the weights exceed the address space");
    KN_TRY(kn_grow((void **)&w->wvals, &w->cap_wvals, w->n_wvals + 1, sizeof *w->wvals));
    w->wvals[w->n_wvals].data = v->data;
    w->wvals[w->n_wvals].nbytes = v->nbytes;
    w->wvals[w->n_wvals].off = off;
    w->n_wvals++;
    w->wlen = off + v->nbytes;
    put_u64(b, (uint64_t)off);
    put_u64(b, (uint64_t)v->nbytes);
    return KILN_OK;
}

static kiln_status wr_queue(kp_wr *w, const kn_net *g) {
    KN_TRY(kn_grow((void **)&w->queue, &w->cap_queue, w->n_queue + 1, sizeof *w->queue));
    w->queue[w->n_queue++] = g;
    return KILN_OK;
}

static kiln_status wr_attr(kp_wr *w, const kn_attr *a) {
    kn_buf *b = &w->nodes;
    KN_TRY(wr_str(w, b, a->name));
    put_u32(b, (uint32_t)a->type);
    switch (a->type) {
    case KN_ATTR_UNDEFINED:
        break;
    case KN_ATTR_FLOAT:
        put_f32(b, a->f);
        break;
    case KN_ATTR_INT:
        put_i64(b, a->i);
        break;
    case KN_ATTR_STRING: {
        uint32_t k;
        KN_TRY(wr_string(w, a->s, a->s ? a->s_len : 0, &k));
        put_u32(b, k);
        break;
    }
    case KN_ATTR_TENSOR:
        put_u32(b, a->tensor ? 1 : 0);
        if (a->tensor)
            KN_TRY(wr_value(w, b, a->tensor));
        break;
    case KN_ATTR_GRAPH:
        if (!a->graph) {
            put_u32(b, KP_NONE);
        } else {
            /* Graphs are numbered in the order they are queued, and nodes are
             * written in queue order, so the index is known now. */
            put_u32(b, (uint32_t)w->n_queue);
            KN_TRY(wr_queue(w, a->graph));
        }
        break;
    case KN_ATTR_FLOATS:
        put_u64(b, a->floats ? a->n : 0);
        for (size_t i = 0; a->floats && i < a->n; i++)
            put_f32(b, a->floats[i]);
        break;
    case KN_ATTR_INTS:
        put_u64(b, a->ints ? a->n : 0);
        for (size_t i = 0; a->ints && i < a->n; i++)
            put_i64(b, a->ints[i]);
        break;
    case KN_ATTR_STRINGS:
        put_u64(b, a->strings ? a->n : 0);
        for (size_t i = 0; a->strings && i < a->n; i++)
            KN_TRY(wr_str(w, b, a->strings[i]));
        break;
    default:
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: attribute '%s' has type %d",
                        a->name, (int)a->type);
    }
    return KILN_OK;
}

static kiln_status wr_tensors(kp_wr *w, const kn_net *g, const uint8_t *mark) {
    kn_buf *tb = &w->tensors;
    for (int i = 0; i < g->n_tensors; i++) {
        const kn_tensor *t = &g->tensors[i];
        if (t->rank < -1 || t->rank > KILN_MAX_DIMS)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: tensor '%s' has rank %d",
                            t->name, t->rank);
        KN_TRY(wr_str(w, tb, t->name));
        put_u32(tb, (uint32_t)t->dtype);
        put_i32(tb, t->rank);
        put_u32(tb, (t->flags & (KN_T_CONST | KN_T_HOST)) |
                        (mark[i] & KP_IN_LIST ? (uint32_t)KN_T_INPUT : 0u) |
                        (mark[i] & KP_OUT_LIST ? (uint32_t)KN_T_OUTPUT : 0u));
        for (int d = 0; d < t->rank; d++)
            put_i64(tb, t->dims[d]);
        for (int d = 0; d < t->rank; d++)
            KN_TRY(wr_str(w, tb, t->dim_names[d]));
        if (t->flags & KN_T_CONST)
            KN_TRY(wr_value(w, tb, &t->value));
        w->n_tensors++;
    }
    return KILN_OK;
}

static kiln_status wr_graph(kp_wr *w, const kn_net *g) {
    kn_buf *b = &w->graphs;
    if (g->n_tensors < 0 || g->n_nodes < 0 || g->n_inputs < 0 || g->n_outputs < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: negative count in a graph");
    put_u32(b, (uint32_t)g->n_tensors);
    put_u32(b, (uint32_t)g->n_nodes);
    put_i32(b, g->opset);
    put_u32(b, (uint32_t)g->n_inputs);
    for (int i = 0; i < g->n_inputs; i++)
        put_u32(b, (uint32_t)g->inputs[i]);
    put_u32(b, (uint32_t)g->n_outputs);
    for (int i = 0; i < g->n_outputs; i++)
        put_u32(b, (uint32_t)g->outputs[i]);
    put_u32(b, (uint32_t)(g->n_opsets > 0 ? g->n_opsets : 0));
    for (int i = 0; i < g->n_opsets; i++) {
        KN_TRY(wr_str(w, b, g->opset_domains[i]));
        put_i32(b, g->opset_versions[i]);
    }

    /* Input and output flags are written as the lists say. */
    KN_TRY(graph_check(g, w->n_graph_done, false, KILN_ERR_INVALID_ARGUMENT, "plan writer"));
    uint8_t *mark = kn_calloc((size_t)g->n_tensors + 1, 1);
    if (!mark)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < g->n_inputs; i++)
        mark[g->inputs[i]] |= KP_IN_LIST;
    for (int i = 0; i < g->n_outputs; i++)
        mark[g->outputs[i]] |= KP_OUT_LIST;
    kiln_status st = wr_tensors(w, g, mark);
    kn_free(mark);
    KN_TRY(st);
    w->n_graph_done++;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        kn_buf *nb = &w->nodes;
        KN_TRY(wr_str(w, nb, n->name ? n->name : ""));
        KN_TRY(wr_str(w, nb, n->op_type ? n->op_type : ""));
        KN_TRY(wr_str(w, nb, n->domain ? n->domain : ""));
        put_i32(nb, n->opset);
        KN_TRY(wr_str(w, nb, n->tactic));
        put_u32(nb, n->dead ? 1u : 0u);
        put_u32(nb, (uint32_t)n->n_in);
        for (int j = 0; j < n->n_in; j++)
            put_i32(nb, n->in[j]);
        put_u32(nb, (uint32_t)n->n_out);
        for (int j = 0; j < n->n_out; j++)
            put_i32(nb, n->out[j]);
        put_u32(nb, (uint32_t)n->n_attr);
        for (int j = 0; j < n->n_attr; j++)
            KN_TRY(wr_attr(w, &n->attrs[j]));
        w->n_nodes++;
    }
    return KILN_OK;
}

static void wr_profiles(kn_buf *b, const kp_meta *meta, int n_inputs) {
    int np = meta ? meta->n_profiles : 0;
    put_u32(b, (uint32_t)np);
    put_u32(b, (uint32_t)n_inputs);
    for (int p = 0; p < np; p++) {
        const kp_profile *pr = &meta->profiles[p];
        for (int i = 0; i < n_inputs; i++) {
            put_u32(b, (uint32_t)pr->rank[i]);
            for (int d = 0; d < pr->rank[i]; d++)
                put_i64(b, pr->min[i][d]);
            for (int d = 0; d < pr->rank[i]; d++)
                put_i64(b, pr->opt[i][d]);
            for (int d = 0; d < pr->rank[i]; d++)
                put_i64(b, pr->max[i][d]);
        }
    }
}

static kiln_status wr_check_meta(const kn_net *net, const kp_meta *meta) {
    if (meta && (strnlen(meta->backend, sizeof meta->backend) == sizeof meta->backend ||
                 strnlen(meta->target, sizeof meta->target) == sizeof meta->target ||
                 strnlen(meta->libraries, sizeof meta->libraries) == sizeof meta->libraries))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: backend, target or libraries "
                                                   "text fills its field with no NUL");
    if (meta && (meta->n_profiles < 0 || (meta->n_profiles > 0 && !meta->profiles)))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: bad profile count %d",
                        meta->n_profiles);
    return profile_check(net, meta ? meta->n_profiles : 0, meta ? meta->profiles : NULL,
                         KILN_ERR_INVALID_ARGUMENT, "plan writer");
}

static void wr_free(kp_wr *w) {
    kn_buf_free(&w->strings);
    kn_strmap_free(&w->interned);
    kn_buf_free(&w->graphs);
    kn_buf_free(&w->tensors);
    kn_buf_free(&w->nodes);
    kn_free(w->wvals);
    kn_free(w->queue);
}

static void copy_field(uint8_t *dst, size_t cap, const char *s) {
    size_t n = s ? strnlen(s, cap - 1) : 0;
    memcpy(dst, s ? s : "", n);
}

kiln_status kp_write(const kn_net *net, const kp_meta *meta, void **out, size_t *size) {
    if (!net || !out || !size)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kp_write: NULL argument");
    KN_TRY(wr_check_meta(net, meta));

    kp_wr w;
    memset(&w, 0, sizeof w);
    kiln_status st = wr_queue(&w, net);
    for (int g = 0; st == KILN_OK && g < w.n_queue; g++)
        st = wr_graph(&w, w.queue[g]);
    if (st != KILN_OK) {
        wr_free(&w);
        return st;
    }

    /* Section bodies in file order. */
    enum { NSEC_MAX = 8 };
    kn_buf body[NSEC_MAX];
    memset(body, 0, sizeof body);
    const uint32_t ids[NSEC_MAX] = {KP_SEC_STRINGS,  KP_SEC_GRAPHS, KP_SEC_TENSORS,
                                    KP_SEC_NODES,    KP_SEC_PROFILES, KP_SEC_STATS,
                                    KP_SEC_WEIGHTS,  KP_SEC_PLUGINS};
    const int NSEC = meta && meta->plugin_section_size ? 8 : 7;
    if (NSEC == 8)
        kn_buf_append(&body[7], meta->plugin_section, meta->plugin_section_size);
    put_u32(&body[0], w.n_strings);
    kn_buf_append(&body[0], w.strings.data, w.strings.len);
    put_u32(&body[1], (uint32_t)w.n_queue);
    kn_buf_append(&body[1], w.graphs.data, w.graphs.len);
    put_u32(&body[2], w.n_tensors);
    kn_buf_append(&body[2], w.tensors.data, w.tensors.len);
    put_u32(&body[3], w.n_nodes);
    kn_buf_append(&body[3], w.nodes.data, w.nodes.len);
    wr_profiles(&body[4], meta, net->n_inputs);
    put_u64(&body[5], meta ? meta->arena_bytes : 0);
    put_u64(&body[5], meta ? meta->activation_sum_bytes : 0);
    put_u64(&body[5], meta ? meta->workspace_bytes : 0);
    put_f64(&body[5], meta ? meta->build_ms : 0.0);
    bool failed = w.strings.failed || w.graphs.failed || w.tensors.failed || w.nodes.failed;
    for (int i = 0; i < NSEC; i++)
        failed |= body[i].failed;

    /* Layout: header, table, sections (8-aligned, weights 64-aligned), checksum. */
    uint64_t off[NSEC_MAX], len[NSEC_MAX];
    size_t pos = KP_HEADER_SIZE + (size_t)NSEC * KP_ENTRY_SIZE;
    for (int i = 0; i < NSEC; i++) {
        size_t align = ids[i] == KP_SEC_WEIGHTS ? KP_WEIGHT_ALIGN : 8;
        pos = (pos + align - 1) & ~(align - 1);
        off[i] = pos;
        len[i] = ids[i] == KP_SEC_WEIGHTS ? w.wlen : body[i].len;
        pos += (size_t)len[i];
    }
    pos = (pos + 7) & ~(size_t)7;
    size_t total = pos + KP_CHECKSUM_SIZE;
    uint8_t *h = failed || total < pos ? NULL : kn_calloc(1, total);
    if (h) {
        for (int i = 0; i < NSEC; i++) {
            if (ids[i] != KP_SEC_WEIGHTS && body[i].len)
                memcpy(h + off[i], body[i].data, body[i].len);
            if (ids[i] != KP_SEC_WEIGHTS)
                continue;
            for (int k = 0; k < w.n_wvals; k++)
                if (w.wvals[k].nbytes)
                    memcpy(h + off[i] + w.wvals[k].off, w.wvals[k].data, w.wvals[k].nbytes);
        }
    }
    for (int i = 0; i < NSEC_MAX; i++)
        kn_buf_free(&body[i]);
    wr_free(&w);
    if (!h)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing a plan of %zu bytes",
                        total);

    memcpy(h, KP_MAGIC, 8);
    st_u32(h + 8, KP_FORMAT_VERSION);
    st_u32(h + 12, KP_HEADER_SIZE);
    st_u32(h + 16, KILN_VERSION_NUMBER);
    st_u32(h + 20, meta ? meta->flags : 0);
    st_u64(h + 24, (uint64_t)total);
    st_u32(h + 32, (uint32_t)NSEC);
    copy_field(h + 40, 16, meta ? meta->backend : "");
    copy_field(h + 56, 64, meta ? meta->target : "");
    copy_field(h + 120, 128, meta ? meta->libraries : "");
    st_u64(h + 248, kn_hash64(h, 248, KP_SEED_HEADER));
    for (int i = 0; i < NSEC; i++) {
        uint8_t *e = h + KP_HEADER_SIZE + (size_t)i * KP_ENTRY_SIZE;
        st_u32(e, ids[i]);
        st_u64(e + 8, off[i]);
        st_u64(e + 16, len[i]);
    }
    st_u64(h + pos, kn_hash64(h, pos, KP_SEED_FILE));
    *out = h;
    *size = total;
    return KILN_OK;
}

/* ======================================================================= */
/* Reader                                                                  */
/* ======================================================================= */

/* A bounds-checked cursor over one section. */
typedef struct kp_cur {
    const uint8_t *base;   /* file start */
    size_t pos, end;       /* absolute byte offsets */
    const char *sec;
} kp_cur;

typedef struct kp_rd {
    const uint8_t *base;
    size_t size;
    kn_blob *owner;
    uint64_t sec_off[KP_SEC_KNOWN_MAX + 1], sec_size[KP_SEC_KNOWN_MAX + 1];
    bool sec_found[KP_SEC_KNOWN_MAX + 1];
    uint32_t n_str;
    uint64_t *str_off;     /* absolute offset of each string's bytes */
    uint32_t *str_len;
    /* per graph */
    uint32_t n_graphs;
    kn_net **nets;
    bool *claimed;
    int *depth;
} kp_rd;

static kiln_status cur_fail(const kp_cur *c, size_t at, const char *fmt, ...) KN_PRINTF(3, 4);
static kiln_status cur_fail(const kp_cur *c, size_t at, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kn_error(KILN_ERR_PLAN, "plan damaged: section '%s' at byte %zu: %s", c->sec, at, msg);
}

static kiln_status cur_take(kp_cur *c, size_t n, const uint8_t **p) {
    if (n > c->end - c->pos)
        return kn_error(KILN_ERR_PLAN,
                        "plan damaged: section '%s': a field at byte %zu needs %zu bytes but the "
                        "section ends at byte %zu",
                        c->sec, c->pos, n, c->end);
    *p = c->base + c->pos;
    c->pos += n;
    return KILN_OK;
}

static kiln_status get_u32(kp_cur *c, uint32_t *v) {
    const uint8_t *p = NULL;
    KN_TRY(cur_take(c, 4, &p));
    *v = ld_u32(p);
    return KILN_OK;
}
static kiln_status get_i32(kp_cur *c, int32_t *v) {
    uint32_t u;
    KN_TRY(get_u32(c, &u));
    *v = (int32_t)u;
    return KILN_OK;
}
static kiln_status get_u64(kp_cur *c, uint64_t *v) {
    const uint8_t *p = NULL;
    KN_TRY(cur_take(c, 8, &p));
    *v = ld_u64(p);
    return KILN_OK;
}
static kiln_status get_i64(kp_cur *c, int64_t *v) {
    uint64_t u;
    KN_TRY(get_u64(c, &u));
    *v = (int64_t)u;
    return KILN_OK;
}

/* A count of items of at least `min_bytes` each must fit in what is left of
 * the section; this bounds every allocation by the file size. */
static kiln_status get_count(kp_cur *c, bool wide, size_t min_bytes, const char *what,
                             size_t *count) {
    size_t at = c->pos;
    uint64_t n;
    if (wide) {
        KN_TRY(get_u64(c, &n));
    } else {
        uint32_t n32;
        KN_TRY(get_u32(c, &n32));
        n = n32;
    }
    size_t left = c->end - c->pos;
    if (n > INT32_MAX || (min_bytes && n > left / min_bytes))
        return cur_fail(c, at, "%s count %llu cannot fit in the %zu bytes left in the section",
                        what, (unsigned long long)n, left);
    *count = (size_t)n;
    return KILN_OK;
}

/* A string index; NONE allowed only when `optional`. *s gets a fresh copy. */
static kiln_status get_str(const kp_rd *r, kp_cur *c, bool optional, const char *what, char **s,
                           size_t *len) {
    size_t at = c->pos;
    uint32_t k;
    KN_TRY(get_u32(c, &k));
    if (k == KP_NONE && optional) {
        *s = NULL;
        if (len)
            *len = 0;
        return KILN_OK;
    }
    if (k >= r->n_str)
        return cur_fail(c, at, "%s refers to string %u but the plan has %u strings", what, k,
                        r->n_str);
    *s = kn_strndup((const char *)r->base + r->str_off[k], r->str_len[k]);
    if (!*s)
        return KILN_ERR_OUT_OF_MEMORY;
    if (len)
        *len = r->str_len[k];
    return KILN_OK;
}

/* the public types, and the sequence and optional handles (core.h) */
static bool dtype_known(uint32_t d) {
    return d <= KILN_DTYPE_FLOAT8E5M2FNUZ ||
           (kn_dtype_is_handle((int)d) && (d & 0xffu) <= KILN_DTYPE_FLOAT8E5M2FNUZ);
}

/* A value record: validated against the weights section, then borrowed from
 * the owner (aligned in memory) or copied into aligned memory. */
static kiln_status get_value(const kp_rd *r, kp_cur *c, kn_tdata *v, const char *what) {
    size_t at = c->pos;
    uint32_t dtype;
    int32_t rank;
    int64_t dims[KILN_MAX_DIMS];
    uint64_t off, nbytes;
    KN_TRY(get_u32(c, &dtype));
    KN_TRY(get_i32(c, &rank));
    if (!dtype_known(dtype) || dtype == KILN_DTYPE_UNDEFINED)
        return cur_fail(c, at, "%s has data type %u, not one kiln knows", what, dtype);
    if (rank < 0 || rank > KILN_MAX_DIMS)
        return cur_fail(c, at, "%s has rank %d, outside 0..%d", what, (int)rank, KILN_MAX_DIMS);
    uint64_t numel = 1;
    bool overflow = false;
    for (int i = 0; i < rank; i++) {
        KN_TRY(get_i64(c, &dims[i]));
        if (dims[i] < 0)
            return cur_fail(c, at, "%s has negative dimension %lld", what, (long long)dims[i]);
        if (__builtin_mul_overflow(numel, (uint64_t)dims[i], &numel))
            overflow = true;
    }
    KN_TRY(get_u64(c, &off));
    KN_TRY(get_u64(c, &nbytes));
    uint64_t esize = kiln_dtype_size((kiln_dtype)dtype), want = 0;
    if (esize && (overflow || __builtin_mul_overflow(numel, esize, &want)))
        return cur_fail(c, at, "%s: its shape holds more elements than memory can", what);
    if (esize && want != nbytes)
        return cur_fail(c, at, "%s: %llu %s elements need %llu bytes but the record says %llu",
                        what, (unsigned long long)numel, kiln_dtype_name((kiln_dtype)dtype),
                        (unsigned long long)want, (unsigned long long)nbytes);
    uint64_t wsize = r->sec_size[KP_SEC_WEIGHTS];
    if (off % KP_WEIGHT_ALIGN)
        return cur_fail(c, at, "%s: weights offset %llu is not a multiple of %u", what,
                        (unsigned long long)off, KP_WEIGHT_ALIGN);
    if (off > wsize || nbytes > wsize - off)
        return cur_fail(c, at,
                        "%s: its %llu bytes at offset %llu lie outside the weights section "
                        "(%llu bytes)",
                        what, (unsigned long long)nbytes, (unsigned long long)off,
                        (unsigned long long)wsize);
    const uint8_t *src = r->base + r->sec_off[KP_SEC_WEIGHTS] + off;
    memset(v, 0, sizeof *v);
    if (r->owner && ((uintptr_t)src & (KP_WEIGHT_ALIGN - 1)) == 0) {
        v->data = (void *)(uintptr_t)src;
        v->blob = r->owner;
        kn_blob_ref(r->owner);
    } else {
        v->data = kn_aligned_alloc(nbytes ? (size_t)nbytes : 1);
        if (!v->data)
            return KILN_ERR_OUT_OF_MEMORY;
        if (nbytes)
            memcpy(v->data, src, (size_t)nbytes);
    }
    v->dtype = (kiln_dtype)dtype;
    v->rank = rank;
    for (int i = 0; i < rank; i++)
        v->dims[i] = dims[i];
    v->nbytes = (size_t)nbytes;
    return KILN_OK;
}

static kiln_status rd_strings(kp_rd *r) {
    kp_cur c = {r->base, (size_t)r->sec_off[KP_SEC_STRINGS],
                (size_t)(r->sec_off[KP_SEC_STRINGS] + r->sec_size[KP_SEC_STRINGS]), "strings"};
    size_t n;
    KN_TRY(get_count(&c, false, 4, "string", &n));
    r->str_off = kn_calloc(n + 1, sizeof *r->str_off);
    r->str_len = kn_calloc(n + 1, sizeof *r->str_len);
    if (!r->str_off || !r->str_len)
        return KILN_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) {
        uint32_t len;
        const uint8_t *p = NULL;
        KN_TRY(get_u32(&c, &len));
        KN_TRY(cur_take(&c, len, &p));
        r->str_off[i] = (uint64_t)(p - r->base);
        r->str_len[i] = len;
    }
    r->n_str = (uint32_t)n;
    return KILN_OK;
}

static kiln_status rd_index_list(kp_cur *c, int n_tensors, int **list, int *count, int *cap,
                                 const char *what, uint32_t g) {
    size_t n;
    KN_TRY(get_count(c, false, 4, what, &n));
    *list = kn_calloc(n + 1, sizeof(int));
    if (!*list)
        return KILN_ERR_OUT_OF_MEMORY;
    *cap = (int)n + 1;
    for (size_t i = 0; i < n; i++) {
        size_t at = c->pos;
        uint32_t t;
        KN_TRY(get_u32(c, &t));
        if (t >= (uint32_t)n_tensors)
            return cur_fail(c, at, "graph %u: %s %zu is tensor %u but the graph has %d tensors", g,
                            what, i, t, n_tensors);
        (*list)[i] = (int)t;
    }
    *count = (int)n;
    return KILN_OK;
}

/* The graphs section: allocate every graph with its tensor and node arrays
 * (zeroed, so that kn_net_free can run at any point) and its I/O lists. */
static kiln_status rd_graphs(kp_rd *r, size_t *tensor_total, size_t *node_total) {
    kp_cur c = {r->base, (size_t)r->sec_off[KP_SEC_GRAPHS],
                (size_t)(r->sec_off[KP_SEC_GRAPHS] + r->sec_size[KP_SEC_GRAPHS]), "graphs"};
    size_t n;
    KN_TRY(get_count(&c, false, 24, "graph", &n));
    if (n == 0)
        return cur_fail(&c, c.pos - 4, "the plan holds no graph");
    r->nets = kn_calloc(n, sizeof *r->nets);
    r->claimed = kn_calloc(n, sizeof *r->claimed);
    r->depth = kn_calloc(n, sizeof *r->depth);
    if (!r->nets || !r->claimed || !r->depth)
        return KILN_ERR_OUT_OF_MEMORY;
    r->n_graphs = (uint32_t)n;
    uint64_t tsum = 0, nsum = 0;
    for (size_t g = 0; g < n; g++) {
        KN_TRY(kn_net_new(&r->nets[g]));
        kn_net *net = r->nets[g];
        size_t at = c.pos, nt, nn;
        /* Each tensor record is at least 16 bytes and each node 36 bytes; the
         * real check against the sections comes later, this bounds the memory. */
        KN_TRY(get_count(&c, false, 0, "tensor", &nt));
        KN_TRY(get_count(&c, false, 0, "node", &nn));
        tsum += nt;
        nsum += nn;
        if (tsum > r->sec_size[KP_SEC_TENSORS] / 16 || nsum > r->sec_size[KP_SEC_NODES] / 36)
            return cur_fail(&c, at, "graph %zu brings the totals to %llu tensors and %llu nodes, "
                                    "more than the tensors and nodes sections can hold",
                            g, (unsigned long long)tsum, (unsigned long long)nsum);
        net->tensors = kn_calloc(nt + 1, sizeof *net->tensors);
        net->nodes = kn_calloc(nn + 1, sizeof *net->nodes);
        if (!net->tensors || !net->nodes)
            return KILN_ERR_OUT_OF_MEMORY;
        net->cap_tensors = (int)nt + 1;
        net->cap_nodes = (int)nn + 1;
        for (size_t i = 0; i < nt; i++) {
            net->tensors[i].rank = -1;
            net->tensors[i].producer = -1;
        }
        net->n_tensors = (int)nt;
        net->n_nodes = (int)nn;
        int32_t opset;
        KN_TRY(get_i32(&c, &opset));
        net->opset = opset;
        KN_TRY(rd_index_list(&c, (int)nt, &net->inputs, &net->n_inputs, &net->cap_inputs, "input",
                             (uint32_t)g));
        KN_TRY(rd_index_list(&c, (int)nt, &net->outputs, &net->n_outputs, &net->cap_outputs,
                             "output", (uint32_t)g));
        size_t no;
        KN_TRY(get_count(&c, false, 8, "opset", &no));
        net->opset_domains = kn_calloc(no + 1, sizeof(char *));
        net->opset_versions = kn_calloc(no + 1, sizeof(int));
        if (!net->opset_domains || !net->opset_versions)
            return KILN_ERR_OUT_OF_MEMORY;
        net->n_opsets = (int)no;
        for (size_t i = 0; i < no; i++) {
            int32_t v;
            KN_TRY(get_str(r, &c, false, "opset domain", &net->opset_domains[i], NULL));
            KN_TRY(get_i32(&c, &v));
            net->opset_versions[i] = v;
        }
    }
    *tensor_total = (size_t)tsum;
    *node_total = (size_t)nsum;
    return KILN_OK;
}

static kiln_status rd_tensor(kp_rd *r, kp_cur *c, kn_net *net, int i, uint32_t g) {
    kn_tensor *t = &net->tensors[i];
    size_t at = c->pos;
    uint32_t dtype, flags;
    int32_t rank;
    KN_TRY(get_str(r, c, false, "tensor name", &t->name, NULL));
    KN_TRY(get_u32(c, &dtype));
    KN_TRY(get_i32(c, &rank));
    KN_TRY(get_u32(c, &flags));
    if (!dtype_known(dtype))
        return cur_fail(c, at, "graph %u tensor %d '%s' has data type %u, not one kiln knows", g,
                        i, t->name, dtype);
    if (rank < -1 || rank > KILN_MAX_DIMS)
        return cur_fail(c, at, "graph %u tensor %d '%s' has rank %d, outside -1..%d", g, i,
                        t->name, (int)rank, KILN_MAX_DIMS);
    if (flags & ~(uint32_t)KP_T_KNOWN_FLAGS)
        return cur_fail(c, at, "graph %u tensor %d '%s' has unknown flags 0x%x", g, i, t->name,
                        flags);
    t->dtype = (kiln_dtype)dtype;
    t->rank = rank;
    t->flags = flags;
    for (int d = 0; d < rank; d++)
        KN_TRY(get_i64(c, &t->dims[d]));
    for (int d = 0; d < rank; d++)
        KN_TRY(get_str(r, c, true, "dimension name", &t->dim_names[d], NULL));
    if (flags & KN_T_CONST) {
        char what[320];
        snprintf(what, sizeof what, "constant '%.256s'", t->name);
        KN_TRY(get_value(r, c, &t->value, what));
    }
    if (t->name[0]) {
        int prev = kn_strmap_get(&net->names, t->name);
        if (prev >= 0)
            return cur_fail(c, at, "graph %u tensor %d has the name '%s' of tensor %d", g, i,
                            t->name, prev);
        KN_TRY(kn_strmap_put(&net->names, t->name, i));
    }
    return KILN_OK;
}

static kiln_status rd_attr(kp_rd *r, kp_cur *c, kn_attr *a, uint32_t g, const kn_node *n) {
    size_t at = c->pos;
    uint32_t type;
    KN_TRY(get_str(r, c, false, "attribute name", &a->name, NULL));
    KN_TRY(get_u32(c, &type));
    size_t cnt;
    switch (type) {
    case KN_ATTR_UNDEFINED:
        break;
    case KN_ATTR_FLOAT: {
        uint32_t u;
        KN_TRY(get_u32(c, &u));
        memcpy(&a->f, &u, 4);
        break;
    }
    case KN_ATTR_INT:
        KN_TRY(get_i64(c, &a->i));
        break;
    case KN_ATTR_STRING:
        KN_TRY(get_str(r, c, true, "string attribute", &a->s, &a->s_len));
        break;
    case KN_ATTR_TENSOR: {
        uint32_t present;
        KN_TRY(get_u32(c, &present));
        if (present > 1)
            return cur_fail(c, at, "node '%s' attribute '%s': tensor flag %u is not 0 or 1",
                            n->name, a->name, present);
        if (present) {
            if (!(a->tensor = kn_calloc(1, sizeof *a->tensor)))
                return KILN_ERR_OUT_OF_MEMORY;
            char what[320];
            snprintf(what, sizeof what, "attribute '%.128s' of node '%.128s'", a->name, n->name);
            KN_TRY(get_value(r, c, a->tensor, what));
        }
        break;
    }
    case KN_ATTR_GRAPH: {
        uint32_t k;
        KN_TRY(get_u32(c, &k));
        if (k == KP_NONE)
            break;
        if (k <= g || k >= r->n_graphs)
            return cur_fail(c, at, "node '%s' attribute '%s' refers to graph %u; it must lie in "
                                   "%u..%u",
                            n->name, a->name, k, g + 1, r->n_graphs - 1);
        if (r->claimed[k])
            return cur_fail(c, at, "node '%s' attribute '%s' refers to graph %u, already used",
                            n->name, a->name, k);
        if (r->depth[g] + 1 > KP_MAX_GRAPH_DEPTH)
            return cur_fail(c, at, "graphs nest deeper than %d", KP_MAX_GRAPH_DEPTH);
        r->claimed[k] = true;
        r->depth[k] = r->depth[g] + 1;
        a->graph = r->nets[k];
        break;
    }
    case KN_ATTR_FLOATS:
        KN_TRY(get_count(c, true, 4, "float", &cnt));
        if (!(a->floats = kn_malloc(cnt * sizeof(float) + 1)))
            return KILN_ERR_OUT_OF_MEMORY;
        for (size_t i = 0; i < cnt; i++) {
            uint32_t u;
            KN_TRY(get_u32(c, &u));
            memcpy(&a->floats[i], &u, 4);
        }
        a->n = cnt;
        break;
    case KN_ATTR_INTS:
        KN_TRY(get_count(c, true, 8, "int", &cnt));
        if (!(a->ints = kn_malloc(cnt * sizeof(int64_t) + 1)))
            return KILN_ERR_OUT_OF_MEMORY;
        for (size_t i = 0; i < cnt; i++)
            KN_TRY(get_i64(c, &a->ints[i]));
        a->n = cnt;
        break;
    case KN_ATTR_STRINGS:
        KN_TRY(get_count(c, true, 4, "string", &cnt));
        if (!(a->strings = kn_calloc(cnt + 1, sizeof(char *))))
            return KILN_ERR_OUT_OF_MEMORY;
        a->n = cnt; /* entries stay NULL until read, which kn_attr_free accepts */
        for (size_t i = 0; i < cnt; i++)
            KN_TRY(get_str(r, c, true, "strings attribute", &a->strings[i], NULL));
        break;
    default:
        return cur_fail(c, at, "node '%s' attribute '%s' has type %u, not one kiln knows",
                        n->name, a->name, type);
    }
    a->type = (kn_attr_type)type;
    return KILN_OK;
}

static kiln_status rd_node_io(kp_cur *c, int n_tensors, int **list, int *count, const kn_node *n,
                              const char *what) {
    size_t cnt;
    KN_TRY(get_count(c, false, 4, what, &cnt));
    *list = kn_calloc(cnt + 1, sizeof(int));
    if (!*list)
        return KILN_ERR_OUT_OF_MEMORY;
    *count = (int)cnt;
    for (size_t j = 0; j < cnt; j++) {
        size_t at = c->pos;
        int32_t t;
        KN_TRY(get_i32(c, &t));
        if (t < -1 || t >= n_tensors)
            return cur_fail(c, at, "node '%s' (%s) %s %zu is tensor %d; the graph has %d tensors",
                            n->name, n->op_type, what, j, (int)t, n_tensors);
        (*list)[j] = t;
    }
    return KILN_OK;
}

static kiln_status rd_node(kp_rd *r, kp_cur *c, kn_net *net, int i, uint32_t g) {
    kn_node *n = &net->nodes[i];
    size_t at = c->pos;
    uint32_t flags;
    int32_t opset;
    KN_TRY(get_str(r, c, false, "node name", &n->name, NULL));
    KN_TRY(get_str(r, c, false, "node op_type", &n->op_type, NULL));
    KN_TRY(get_str(r, c, false, "node domain", &n->domain, NULL));
    KN_TRY(get_i32(c, &opset));
    n->opset = opset;
    KN_TRY(get_str(r, c, true, "node tactic", &n->tactic, NULL));
    KN_TRY(get_u32(c, &flags));
    if (flags > 1)
        return cur_fail(c, at, "graph %u node %d '%s' has unknown flags 0x%x", g, i, n->name,
                        flags);
    n->dead = (int)flags;
    KN_TRY(rd_node_io(c, net->n_tensors, &n->in, &n->n_in, n, "input"));
    KN_TRY(rd_node_io(c, net->n_tensors, &n->out, &n->n_out, n, "output"));
    size_t na;
    KN_TRY(get_count(c, false, 8, "attribute", &na));
    if (na) {
        if (!(n->attrs = kn_calloc(na, sizeof *n->attrs)))
            return KILN_ERR_OUT_OF_MEMORY;
        n->n_attr = (int)na; /* zeroed entries are safe to free */
        for (size_t j = 0; j < na; j++)
            KN_TRY(rd_attr(r, c, &n->attrs[j], g, n));
    }
    for (int j = 0; j < n->n_out; j++)
        if (n->out[j] >= 0)
            net->tensors[n->out[j]].producer = i;
    return KILN_OK;
}

static kiln_status rd_tensors_nodes(kp_rd *r, size_t tensor_total, size_t node_total) {
    kp_cur tc = {r->base, (size_t)r->sec_off[KP_SEC_TENSORS],
                 (size_t)(r->sec_off[KP_SEC_TENSORS] + r->sec_size[KP_SEC_TENSORS]), "tensors"};
    kp_cur nc = {r->base, (size_t)r->sec_off[KP_SEC_NODES],
                 (size_t)(r->sec_off[KP_SEC_NODES] + r->sec_size[KP_SEC_NODES]), "nodes"};
    uint32_t nt, nn;
    KN_TRY(get_u32(&tc, &nt));
    KN_TRY(get_u32(&nc, &nn));
    if (nt != tensor_total)
        return cur_fail(&tc, tc.pos - 4, "%u tensors, but the graphs hold %zu", nt, tensor_total);
    if (nn != node_total)
        return cur_fail(&nc, nc.pos - 4, "%u nodes, but the graphs hold %zu", nn, node_total);
    for (uint32_t g = 0; g < r->n_graphs; g++) {
        if (g > 0 && !r->claimed[g])
            return kn_error(KILN_ERR_PLAN, "plan damaged: graph %u is not the body of any "
                                           "earlier node's graph attribute", g);
        kn_net *net = r->nets[g];
        for (int i = 0; i < net->n_tensors; i++)
            KN_TRY(rd_tensor(r, &tc, net, i, g));
        for (int i = 0; i < net->n_nodes; i++)
            KN_TRY(rd_node(r, &nc, net, i, g));
        KN_TRY(graph_check(net, g, true, KILN_ERR_PLAN, "plan damaged"));
    }
    return KILN_OK;
}

static kiln_status rd_profiles(kp_rd *r, kp_meta *m) {
    kp_cur c = {r->base, (size_t)r->sec_off[KP_SEC_PROFILES],
                (size_t)(r->sec_off[KP_SEC_PROFILES] + r->sec_size[KP_SEC_PROFILES]), "profiles"};
    size_t np, ni;
    KN_TRY(get_count(&c, false, 0, "profile", &np));
    size_t at = c.pos;
    KN_TRY(get_count(&c, false, 0, "profile input", &ni));
    if (ni != (size_t)r->nets[0]->n_inputs)
        return cur_fail(&c, at, "profiles cover %zu inputs, the network has %d", ni,
                        r->nets[0]->n_inputs);
    size_t cells;
    if (np > KP_MAX_PROFILES)
        return cur_fail(&c, at - 4, "%zu profiles, more than the %d kiln allows", np,
                        KP_MAX_PROFILES);
    if (kn_mul_overflow(np, ni, &cells) || (ni && cells > (c.end - c.pos) / 4))
        return cur_fail(&c, at, "%zu profiles of %zu inputs cannot fit in the section", np, ni);
    if (np == 0)
        return profile_check(r->nets[0], 0, NULL, KILN_ERR_PLAN, "plan damaged: section 'profiles'");
    KN_TRY(kp_meta_alloc_profiles(m, (int)np, (int)ni));
    for (size_t p = 0; p < np; p++) {
        kp_profile *pr = &m->profiles[p];
        for (size_t i = 0; i < ni; i++) {
            at = c.pos;
            uint32_t rank;
            KN_TRY(get_u32(&c, &rank));
            if (rank > KILN_MAX_DIMS)
                return cur_fail(&c, at, "profile %zu input %zu has rank %u", p, i, rank);
            pr->rank[i] = (int)rank;
            for (uint32_t d = 0; d < rank; d++)
                KN_TRY(get_i64(&c, &pr->min[i][d]));
            for (uint32_t d = 0; d < rank; d++)
                KN_TRY(get_i64(&c, &pr->opt[i][d]));
            for (uint32_t d = 0; d < rank; d++)
                KN_TRY(get_i64(&c, &pr->max[i][d]));
        }
    }
    return profile_check(r->nets[0], m->n_profiles, m->profiles, KILN_ERR_PLAN,
                         "plan damaged: section 'profiles'");
}

static kiln_status rd_stats(kp_rd *r, kp_meta *m) {
    kp_cur c = {r->base, (size_t)r->sec_off[KP_SEC_STATS],
                (size_t)(r->sec_off[KP_SEC_STATS] + r->sec_size[KP_SEC_STATS]), "stats"};
    uint64_t bits;
    KN_TRY(get_u64(&c, &m->arena_bytes));
    KN_TRY(get_u64(&c, &m->activation_sum_bytes));
    KN_TRY(get_u64(&c, &m->workspace_bytes));
    KN_TRY(get_u64(&c, &bits));
    memcpy(&m->build_ms, &bits, 8);
    return KILN_OK;
}

/* ---- header ---- */

static kiln_status text_field(const uint8_t *h, size_t off, size_t cap, const char *what,
                              char *dst) {
    if (!memchr(h + off, 0, cap))
        return kn_error(KILN_ERR_PLAN, "plan damaged: header field '%s' at byte %zu has no NUL",
                        what, off);
    memcpy(dst, h + off, cap);
    return KILN_OK;
}

/* Magic, header hash and the text fields; any format version. */
static kiln_status rd_header(const void *data, size_t size, kiln_plan_info *info,
                             uint32_t *flags, uint32_t *header_size, uint32_t *n_sections) {
    const uint8_t *h = data;
    if (!data && size)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan: NULL data");
    if (size < 8 || memcmp(h, KP_MAGIC, 8) != 0)
        return kn_error(KILN_ERR_PLAN, "not a kiln plan: the file does not start with \"%s\"%s",
                        KP_MAGIC, size < 8 ? " (it has fewer than 8 bytes)" : "");
    if (size < KP_HEADER_SIZE)
        return kn_error(KILN_ERR_PLAN,
                        "plan truncated: the header needs %u bytes but the file has %zu bytes",
                        KP_HEADER_SIZE, size);
    uint64_t want = ld_u64(h + 248), got = kn_hash64(h, 248, KP_SEED_HEADER);
    if (want != got)
        return kn_error(KILN_ERR_PLAN,
                        "plan damaged: header hash at byte 248 is %016llx, the header's bytes "
                        "hash to %016llx",
                        (unsigned long long)want, (unsigned long long)got);
    kiln_plan_info in;
    memset(&in, 0, sizeof in);
    in.format_version = ld_u32(h + 8);
    in.kiln_version = ld_u32(h + 16);
    in.file_size = ld_u64(h + 24);
    KN_TRY(text_field(h, 40, 16, "backend", in.backend));
    KN_TRY(text_field(h, 56, 64, "target", in.target));
    KN_TRY(text_field(h, 120, 128, "libraries", in.libraries));
    uint32_t hs = ld_u32(h + 12);
    if (hs < KP_HEADER_SIZE)
        return kn_error(KILN_ERR_PLAN, "plan damaged: header size at byte 12 is %u, below %u", hs,
                        KP_HEADER_SIZE);
    if (in.file_size < (uint64_t)hs + KP_CHECKSUM_SIZE)
        return kn_error(KILN_ERR_PLAN,
                        "plan damaged: file size at byte 24 is %llu, smaller than the header",
                        (unsigned long long)in.file_size);
    if (info)
        *info = in;
    if (flags)
        *flags = ld_u32(h + 20);
    if (header_size)
        *header_size = hs;
    if (n_sections)
        *n_sections = ld_u32(h + 32);
    return KILN_OK;
}

kiln_status kp_read_info(const void *data, size_t size, kiln_plan_info *info) {
    if (!info)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kp_read_info: NULL info");
    return rd_header(data, size, info, NULL, NULL, NULL);
}

/* Section table: bounds, overlap, duplicates. */
static kiln_status rd_table(kp_rd *r, uint32_t hs, uint32_t n_sec, uint64_t file_size) {
    uint64_t table_end = (uint64_t)hs + (uint64_t)n_sec * KP_ENTRY_SIZE;
    if (n_sec > KP_MAX_SECTIONS)
        return kn_error(KILN_ERR_PLAN, "plan damaged: section count at byte 32 is %u (at most %u)",
                        n_sec, KP_MAX_SECTIONS);
    if (table_end > r->size)
        return kn_error(KILN_ERR_PLAN,
                        "plan truncated: the section table ends at byte %llu but the file has "
                        "%zu bytes",
                        (unsigned long long)table_end, r->size);
    uint64_t limit = file_size - KP_CHECKSUM_SIZE; /* sections end before the checksum */
    uint64_t off[KP_MAX_SECTIONS], end[KP_MAX_SECTIONS];
    uint32_t id[KP_MAX_SECTIONS];
    for (uint32_t i = 0; i < n_sec; i++) {
        const uint8_t *e = r->base + hs + (size_t)i * KP_ENTRY_SIZE;
        size_t at = hs + (size_t)i * KP_ENTRY_SIZE;
        id[i] = ld_u32(e);
        off[i] = ld_u64(e + 8);
        uint64_t sz = ld_u64(e + 16);
        const char *nm = sec_name(id[i]);
        if (off[i] < table_end || off[i] > limit || sz > limit - off[i])
            return kn_error(KILN_ERR_PLAN,
                            "plan damaged: section '%s' (id %u, table entry at byte %zu) spans "
                            "bytes %llu..%llu, outside %llu..%llu",
                            nm, id[i], at, (unsigned long long)off[i],
                            (unsigned long long)(off[i] + (sz > UINT64_MAX - off[i] ? 0 : sz)),
                            (unsigned long long)table_end, (unsigned long long)limit);
        end[i] = off[i] + sz;
        if (end[i] > r->size)
            return kn_error(KILN_ERR_PLAN,
                            "plan truncated: section '%s' ends at byte %llu but the file has %zu "
                            "bytes",
                            nm, (unsigned long long)end[i], r->size);
        if (id[i] >= 1 && id[i] <= KP_SEC_KNOWN_MAX) {
            if (r->sec_found[id[i]])
                return kn_error(KILN_ERR_PLAN,
                                "plan damaged: section '%s' appears twice (table entry at byte "
                                "%zu)", nm, at);
            r->sec_found[id[i]] = true;
            r->sec_off[id[i]] = off[i];
            r->sec_size[id[i]] = sz;
        }
        for (uint32_t j = 0; j < i; j++)
            if (off[i] < end[j] && off[j] < end[i])
                return kn_error(KILN_ERR_PLAN,
                                "plan damaged: section '%s' (bytes %llu..%llu) overlaps section "
                                "'%s' (bytes %llu..%llu)",
                                nm, (unsigned long long)off[i], (unsigned long long)end[i],
                                sec_name(id[j]), (unsigned long long)off[j],
                                (unsigned long long)end[j]);
    }
    for (uint32_t s = 1; s <= KP_SEC_KNOWN_MAX; s++)
        if (!r->sec_found[s])
            return kn_error(KILN_ERR_PLAN, "plan damaged: the section table has no '%s' section",
                            kp_sec_names[s]);
    if (r->sec_off[KP_SEC_WEIGHTS] % KP_WEIGHT_ALIGN)
        return kn_error(KILN_ERR_PLAN, "plan damaged: section 'weights' starts at byte %llu, not "
                                       "a multiple of %u",
                        (unsigned long long)r->sec_off[KP_SEC_WEIGHTS], KP_WEIGHT_ALIGN);
    return KILN_OK;
}

static void rd_free(kp_rd *r, bool keep_root) {
    kn_free(r->str_off);
    kn_free(r->str_len);
    if (r->nets) {
        /* Claimed graphs belong to their parent's attribute now. */
        for (uint32_t g = keep_root ? 1 : 0; g < r->n_graphs; g++)
            if (g == 0 || !r->claimed[g])
                kn_net_free(r->nets[g]);
    }
    kn_free(r->nets);
    kn_free(r->claimed);
    kn_free(r->depth);
}

kiln_status kp_read(const void *data, size_t size, kn_blob *owner, kn_net **net, kp_meta *meta) {
    if (!net)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kp_read: NULL net");
    kiln_plan_info info;
    uint32_t flags, hs, n_sec;
    KN_TRY(rd_header(data, size, &info, &flags, &hs, &n_sec));
    if (info.format_version != KP_FORMAT_VERSION)
        return kn_error(KILN_ERR_VERSION,
                        "plan format version %u is not supported: this kiln (%s) reads format "
                        "version %u",
                        info.format_version, kiln_version_string(), KP_FORMAT_VERSION);

    kp_rd r;
    memset(&r, 0, sizeof r);
    r.base = data;
    r.size = size;
    r.owner = owner;
    KN_TRY(rd_table(&r, hs, n_sec, info.file_size));
    if (info.file_size != size)
        return kn_error(KILN_ERR_PLAN,
                        info.file_size > size
                            ? "plan truncated: the header says the plan has %llu bytes but the "
                              "file has %zu bytes"
                            : "plan damaged: the header says the plan has %llu bytes but the file "
                              "has %zu bytes",
                        (unsigned long long)info.file_size, size);
    uint64_t want = ld_u64(r.base + size - KP_CHECKSUM_SIZE);
    uint64_t got = kn_hash64(r.base, size - KP_CHECKSUM_SIZE, KP_SEED_FILE);
    if (want != got)
        return kn_error(KILN_ERR_PLAN,
                        "plan damaged: checksum at byte %zu is %016llx but the plan's bytes hash "
                        "to %016llx",
                        size - KP_CHECKSUM_SIZE, (unsigned long long)want,
                        (unsigned long long)got);

    kp_meta m;
    memset(&m, 0, sizeof m);
    memcpy(m.backend, info.backend, sizeof m.backend);
    memcpy(m.target, info.target, sizeof m.target);
    memcpy(m.libraries, info.libraries, sizeof m.libraries);
    m.flags = flags;
    size_t tensor_total = 0, node_total = 0;
    kiln_status st = rd_strings(&r);
    if (st == KILN_OK)
        st = rd_graphs(&r, &tensor_total, &node_total);
    if (st == KILN_OK)
        st = rd_tensors_nodes(&r, tensor_total, node_total);
    if (st == KILN_OK)
        st = rd_profiles(&r, &m);
    if (st == KILN_OK)
        st = rd_stats(&r, &m);
    if (st != KILN_OK) {
        kp_meta_free(&m);
        rd_free(&r, false);
        return st;
    }
    *net = r.nets[0];
    if (meta)
        *meta = m;
    else
        kp_meta_free(&m);
    rd_free(&r, true);
    return KILN_OK;
}

kiln_status kp_section(const void *data, size_t size, uint32_t id, const uint8_t **sec,
                       size_t *sec_size) {
    kiln_plan_info info;
    uint32_t hs = 0, n_sec = 0;
    KN_TRY(rd_header(data, size, &info, NULL, &hs, &n_sec));
    *sec = NULL;
    *sec_size = 0;
    if (n_sec > KP_MAX_SECTIONS || (uint64_t)hs + (uint64_t)n_sec * KP_ENTRY_SIZE > size ||
        info.file_size != size || size < KP_CHECKSUM_SIZE)
        return kn_error(KILN_ERR_PLAN, "plan damaged or truncated: the section table does not "
                                       "fit the %zu bytes", size);
    const uint8_t *p = data;
    for (uint32_t i = 0; i < n_sec; i++) {
        const uint8_t *e = p + hs + (size_t)i * KP_ENTRY_SIZE;
        if (ld_u32(e) != id)
            continue;
        uint64_t off = ld_u64(e + 8), sz = ld_u64(e + 16);
        if (off > size - KP_CHECKSUM_SIZE || sz > size - KP_CHECKSUM_SIZE - off)
            return kn_error(KILN_ERR_PLAN, "plan damaged: section %u lies outside the file", id);
        *sec = p + off;
        *sec_size = (size_t)sz;
        return KILN_OK;
    }
    return KILN_OK;
}

void kp_reseal(void *data, size_t size) {
    uint8_t *p = data;
    if (!p || size < KP_HEADER_SIZE + KP_CHECKSUM_SIZE)
        return;
    st_u64(p + 248, kn_hash64(p, 248, KP_SEED_HEADER));
    st_u64(p + size - KP_CHECKSUM_SIZE, kn_hash64(p, size - KP_CHECKSUM_SIZE, KP_SEED_FILE));
}

/* ---- profiles in kp_meta ---- */

kiln_status kp_meta_alloc_profiles(kp_meta *m, int n_profiles, int n_inputs) {
    m->profiles = kn_calloc((size_t)n_profiles + 1, sizeof *m->profiles);
    if (!m->profiles)
        return KILN_ERR_OUT_OF_MEMORY;
    m->n_profiles = n_profiles;
    for (int p = 0; p < n_profiles; p++) {
        kp_profile *pr = &m->profiles[p];
        pr->n_inputs = n_inputs;
        pr->rank = kn_calloc((size_t)n_inputs + 1, sizeof *pr->rank);
        pr->min = kn_calloc((size_t)n_inputs + 1, sizeof *pr->min);
        pr->opt = kn_calloc((size_t)n_inputs + 1, sizeof *pr->opt);
        pr->max = kn_calloc((size_t)n_inputs + 1, sizeof *pr->max);
        if (!pr->rank || !pr->min || !pr->opt || !pr->max) {
            kp_meta_free(m);
            return KILN_ERR_OUT_OF_MEMORY;
        }
    }
    return KILN_OK;
}

void kp_meta_free(kp_meta *m) {
    for (int p = 0; m->profiles && p < m->n_profiles; p++) {
        kn_free(m->profiles[p].rank);
        kn_free(m->profiles[p].min);
        kn_free(m->profiles[p].opt);
        kn_free(m->profiles[p].max);
    }
    kn_free(m->profiles);
    m->profiles = NULL;
    m->n_profiles = 0;
}
