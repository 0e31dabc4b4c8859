/* onnx_write.c - writing a kiln network as an ONNX model (protobuf): nodes
 * with attributes (subgraphs included), initializers as raw_data, inputs
 * and outputs with their types and dims, opset imports. Enough to round-trip
 * what onnx.c reads; `kiln debug reduce` writes its subgraphs with it.
 *
 * Protobuf on the wire: each field is a key varint (field_number << 3 |
 * wire_type) then its value: wire type 0 a varint (int64 as its 64-bit two's
 * complement), 5 four little-endian bytes (float), 2 a varint length then
 * that many bytes (strings, bytes, nested messages, packed repeated
 * scalars). Field numbers, from onnx.proto:
 *   ModelProto: ir_version 1, producer_name 2, producer_version 3, graph 7,
 *     opset_import 8 (OperatorSetIdProto: domain 1, version 2)
 *   GraphProto: node 1, name 2, initializer 5, input 11, output 12
 *   NodeProto: input 1, output 2, name 3, op_type 4, attribute 5, domain 7
 *   AttributeProto: name 1, f 2, i 3, s 4, t 5, g 6, floats 7, ints 8,
 *     strings 9, type 20
 *   TensorProto: dims 1, data_type 2, name 8, raw_data 9
 *   ValueInfoProto: name 1, type 2; TypeProto: tensor_type 1;
 *   TypeProto.Tensor: elem_type 1, shape 2; TensorShapeProto: dim 1;
 *   Dimension: dim_value 1, dim_param 2 */
#include <stdio.h>
#include <string.h>

#include "graph/control.h"
#include "graph/graph.h"
#include "kiln/kiln_onnx.h"

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} wbuf;

static void wb_free(wbuf *b) {
    kn_free(b->p);
    memset(b, 0, sizeof *b);
}

static void wb_put(wbuf *b, const void *data, size_t n) {
    if (b->oom || n == 0)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *np = kn_realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void wb_varint(wbuf *b, uint64_t v) {
    uint8_t tmp[10];
    size_t k = 0;
    do {
        tmp[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[k] |= 0x80;
        k++;
    } while (v);
    wb_put(b, tmp, k);
}

static void wb_key(wbuf *b, int field, int wt) { wb_varint(b, (uint64_t)field << 3 | (uint64_t)wt); }

static void wb_int(wbuf *b, int field, int64_t v) {
    wb_key(b, field, 0);
    wb_varint(b, (uint64_t)v);
}

static void wb_bytes(wbuf *b, int field, const void *data, size_t n) {
    wb_key(b, field, 2);
    wb_varint(b, n);
    wb_put(b, data, n);
}

static void wb_str(wbuf *b, int field, const char *s) { wb_bytes(b, field, s, strlen(s)); }

/* A nested message: append and free it. */
static void wb_msg(wbuf *b, int field, wbuf *sub) {
    if (sub->oom)
        b->oom = true;
    wb_bytes(b, field, sub->p, sub->n);
    wb_free(sub);
}

static void wb_float(wbuf *b, int field, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    wb_key(b, field, 5);
    wb_put(b, le, 4);
}

/* ---------------- messages ---------------- */

/* hidden: trailing inputs not written (captures, see graph/control.h) */
static kiln_status write_graph(wbuf *out, const kn_net *net, const char *name, int hidden);

static void write_tensor(wbuf *b, const char *name, const kn_tdata *v) {
    wbuf dims = {0};
    for (int d = 0; d < v->rank; d++)
        wb_varint(&dims, (uint64_t)v->dims[d]);
    if (v->rank)
        wb_msg(b, 1, &dims);
    wb_int(b, 2, (int64_t)v->dtype);
    if (name)
        wb_str(b, 8, name);
    /* raw_data is little-endian, row-major: the same bytes kiln keeps */
    wb_bytes(b, 9, v->data, v->nbytes);
}

/* guessed: the element type inferred for a tensor whose type the network
 * does not record (UNDEFINED when unknown). */
static void write_value_info(wbuf *b, const kn_tensor *t, const kn_tinfo *guessed) {
    wb_str(b, 1, t->name);
    /* a declared type without a rank (a graph output read without its
     * shape) takes the inferred rank too: ONNX's checker wants a shape on
     * graph outputs */
    bool no_rank = t->dtype != KILN_DTYPE_UNDEFINED && t->rank < 0 && guessed &&
                   guessed->dtype != KILN_DTYPE_UNDEFINED && guessed->rank >= 0;
    if (t->dtype == KILN_DTYPE_UNDEFINED || no_rank) {
        if (!guessed || guessed->dtype == KILN_DTYPE_UNDEFINED)
            return; /* type unknown: readers infer it */
        /* type and rank; dims unknown (they may depend on dynamic inputs) */
        wbuf tt = {0}, type = {0}, shape = {0};
        wb_int(&tt, 1, (int64_t)(no_rank ? t->dtype : guessed->dtype));
        for (int d = 0; d < guessed->rank; d++) {
            wb_key(&shape, 1, 2);
            wb_varint(&shape, 0);
        }
        wb_key(&tt, 2, 2);
        wb_varint(&tt, shape.n);
        wb_put(&tt, shape.p, shape.n);
        if (shape.oom)
            tt.oom = true;
        wb_free(&shape);
        wb_msg(&type, 1, &tt);
        wb_msg(b, 2, &type);
        return;
    }
    wbuf tt = {0}, shape = {0};
    wb_int(&tt, 1, (int64_t)t->dtype);
    if (t->rank >= 0) {
        for (int d = 0; d < t->rank; d++) {
            wbuf dim = {0};
            if (t->dims[d] >= 0)
                wb_int(&dim, 1, t->dims[d]);
            else if (t->dim_names[d])
                wb_str(&dim, 2, t->dim_names[d]);
            wb_msg(&shape, 1, &dim);
        }
        /* a scalar still has a (empty) shape */
        wb_key(&tt, 2, 2);
        wb_varint(&tt, shape.n);
        wb_put(&tt, shape.p, shape.n);
        if (shape.oom)
            tt.oom = true;
        wb_free(&shape);
    }
    wbuf type = {0};
    wb_msg(&type, 1, &tt);
    wb_msg(b, 2, &type);
}

static kiln_status write_attr(wbuf *b, const kn_attr *a, const kn_node *n, int captures) {
    wb_str(b, 1, a->name);
    switch (a->type) {
    case KN_ATTR_FLOAT: wb_float(b, 2, a->f); break;
    case KN_ATTR_INT: wb_int(b, 3, a->i); break;
    case KN_ATTR_STRING: wb_bytes(b, 4, a->s ? a->s : "", a->s_len); break;
    case KN_ATTR_TENSOR: {
        wbuf t = {0};
        write_tensor(&t, NULL, a->tensor);
        wb_msg(b, 5, &t);
        break;
    }
    case KN_ATTR_GRAPH: {
        wbuf g = {0};
        kiln_status st = write_graph(&g, a->graph, a->name, captures);
        if (st != KILN_OK) {
            wb_free(&g);
            return st;
        }
        wb_msg(b, 6, &g);
        break;
    }
    case KN_ATTR_FLOATS: {
        wbuf l = {0};
        for (size_t k = 0; k < a->n; k++) {
            uint32_t u;
            memcpy(&u, &a->floats[k], 4);
            uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16),
                             (uint8_t)(u >> 24)};
            wb_put(&l, le, 4);
        }
        wb_key(b, 7, 2);
        wb_varint(b, l.n);
        wb_put(b, l.p, l.n);
        if (l.oom)
            b->oom = true;
        wb_free(&l);
        break;
    }
    case KN_ATTR_INTS: {
        wbuf l = {0};
        for (size_t k = 0; k < a->n; k++)
            wb_varint(&l, (uint64_t)a->ints[k]);
        wb_key(b, 8, 2);
        wb_varint(b, l.n);
        wb_put(b, l.p, l.n);
        if (l.oom)
            b->oom = true;
        wb_free(&l);
        break;
    }
    case KN_ATTR_STRINGS:
        for (size_t k = 0; k < a->n; k++)
            wb_str(b, 9, a->strings[k]);
        break;
    default:
        return kn_node_error(n, KILN_ERR_UNSUPPORTED, "attribute '%s': type %d cannot be written",
                             a->name, (int)a->type);
    }
    wb_int(b, 20, (int64_t)a->type);
    return KILN_OK;
}

/* A control-flow node's captured outer values (graph/control.h) are
 * written back as ONNX has them: outer-scope reads by name, not inputs. */
static kiln_status write_node(wbuf *b, const kn_net *net, const kn_node *n) {
    int captures = (int)kn_attr_int(n, KN_CAPTURES_ATTR, 0);
    if (captures < 0 || captures > n->n_in)
        captures = 0;
    for (int j = 0; j < n->n_in - captures; j++)
        wb_str(b, 1, n->in[j] >= 0 ? net->tensors[n->in[j]].name : "");
    for (int j = 0; j < n->n_out; j++)
        wb_str(b, 2, n->out[j] >= 0 ? net->tensors[n->out[j]].name : "");
    if (n->name && *n->name)
        wb_str(b, 3, n->name);
    wb_str(b, 4, n->op_type);
    for (int k = 0; k < n->n_attr; k++) {
        if (strcmp(n->attrs[k].name, KN_CAPTURES_ATTR) == 0)
            continue;
        wbuf a = {0};
        kiln_status st = write_attr(&a, &n->attrs[k], n, captures);
        if (st != KILN_OK) {
            wb_free(&a);
            return st;
        }
        wb_msg(b, 5, &a);
    }
    if (n->domain && *n->domain)
        wb_str(b, 7, n->domain);
    return KILN_OK;
}

/* Element types of tensors the network leaves untyped (graph outputs read
 * from ONNX carry no type in kiln's IR): run the op schemas' inference in
 * node order from the inputs (dynamic dims as 1) and constants. Best effort:
 * a node whose inference needs a value kiln does not have stays unknown. */
static kn_tinfo *guess_types(const kn_net *net) {
    kn_tinfo *ti = kn_calloc((size_t)net->n_tensors + 1, sizeof *ti);
    void **tmp = kn_calloc((size_t)net->n_tensors + 1, sizeof *tmp);
    if (!ti || !tmp) {
        kn_free(ti);
        kn_free(tmp);
        return NULL;
    }
    for (int t = 0; t < net->n_tensors; t++) {
        const kn_tensor *x = &net->tensors[t];
        if (x->flags & KN_T_CONST) {
            ti[t].dtype = x->value.dtype;
            ti[t].rank = x->value.rank;
            memcpy(ti[t].dims, x->value.dims, sizeof ti[t].dims);
            ti[t].value = kn_tdata_aligned(&x->value, &tmp[t]);
        } else if ((x->flags & KN_T_INPUT) && x->rank >= 0) {
            ti[t].dtype = x->dtype;
            ti[t].rank = x->rank;
            for (int d = 0; d < x->rank; d++)
                ti[t].dims[d] = x->dims[d] < 0 ? 1 : x->dims[d];
        }
    }
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        const kn_op_schema *sch = kn_op_find(n->domain, n->op_type);
        if (!sch || !sch->infer || n->n_in > 64 || n->n_out > 16)
            continue;
        kn_tinfo in[64], outs[16];
        bool ok = true;
        memset(in, 0, sizeof in);
        memset(outs, 0, sizeof outs);
        for (int j = 0; j < n->n_in && ok; j++)
            if (n->in[j] >= 0) {
                in[j] = ti[n->in[j]];
                /* inference takes shapes within kiln's bounds (kn_check_size) */
                ok = in[j].dtype != KILN_DTYPE_UNDEFINED &&
                     kn_shape_fits(in[j].dtype, in[j].rank, in[j].dims, NULL);
            }
        if (!ok)
            continue;
        kn_infer c = {n, n->n_in, in, n->n_out, outs};
        if (sch->infer(&c) != KILN_OK) {
            kn_error_clear();
            continue;
        }
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0) {
                ti[n->out[j]] = outs[j];
                ti[n->out[j]].value = NULL;
                ti[n->out[j]].data_dependent = false;
            }
        /* Shape's value is its input's dims (dynamic ones as 1): later ops
         * (ConstantOfShape, Reshape, Expand) need it to infer */
        int o0 = n->n_out > 0 ? n->out[0] : -1;
        if (o0 >= 0 && !n->domain[0] && strcmp(n->op_type, "Shape") == 0 && n->n_in > 0 &&
            n->in[0] >= 0 && !tmp[o0] && ti[o0].dtype == KILN_DTYPE_INT64 && ti[o0].rank == 1) {
            const kn_tinfo *x = &ti[n->in[0]];
            int64_t lo = kn_attr_int(n, "start", 0), hi = kn_attr_int(n, "end", x->rank);
            lo = lo < 0 ? lo + x->rank : lo;
            hi = hi < 0 ? hi + x->rank : hi;
            lo = lo < 0 ? 0 : lo > x->rank ? x->rank : lo;
            hi = hi < lo ? lo : hi > x->rank ? x->rank : hi;
            int64_t *v = kn_aligned_alloc(sizeof(int64_t) * KILN_MAX_DIMS);
            if (v && ti[o0].dims[0] == hi - lo) {
                for (int64_t d = lo; d < hi; d++)
                    v[d - lo] = x->dims[d];
                tmp[o0] = v;
                ti[o0].value = v;
            } else {
                kn_aligned_free(v);
            }
        }
    }
    for (int t = 0; t < net->n_tensors; t++) {
        ti[t].value = NULL;
        kn_aligned_free(tmp[t]);
    }
    kn_free(tmp);
    return ti;
}

static kiln_status write_graph(wbuf *out, const kn_net *net, const char *name, int hidden) {
    for (int i = 0; i < net->n_nodes; i++) {
        if (net->nodes[i].dead)
            continue;
        wbuf nb = {0};
        kiln_status st = write_node(&nb, net, &net->nodes[i]);
        if (st != KILN_OK) {
            wb_free(&nb);
            return st;
        }
        wb_msg(out, 1, &nb);
    }
    wb_str(out, 2, name && *name ? name : "kiln");
    for (int t = 0; t < net->n_tensors; t++) {
        const kn_tensor *x = &net->tensors[t];
        if (!(x->flags & KN_T_CONST))
            continue;
        if (x->value.dtype == KILN_DTYPE_STRING || kiln_dtype_size(x->value.dtype) == 0)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "constant '%s': %s tensors cannot be written", x->name,
                            kiln_dtype_name(x->value.dtype));
        wbuf tb = {0};
        write_tensor(&tb, x->name, &x->value);
        wb_msg(out, 5, &tb);
    }
    for (int k = 0; k < net->n_inputs - hidden; k++) {
        wbuf vb = {0};
        write_value_info(&vb, &net->tensors[net->inputs[k]], NULL);
        wb_msg(out, 11, &vb);
    }
    kn_tinfo *guess = NULL;
    for (int k = 0; k < net->n_outputs && !guess; k++)
        if (net->tensors[net->outputs[k]].dtype == KILN_DTYPE_UNDEFINED ||
            net->tensors[net->outputs[k]].rank < 0)
            guess = guess_types(net);
    for (int k = 0; k < net->n_outputs; k++) {
        wbuf vb = {0};
        write_value_info(&vb, &net->tensors[net->outputs[k]],
                         guess ? &guess[net->outputs[k]] : NULL);
        wb_msg(out, 12, &vb);
    }
    kn_free(guess);
    return out->oom ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

/* The opset of the default domain: recorded, else the newest any node asks. */
static int default_opset(const kn_net *net) {
    for (int k = 0; k < net->n_opsets; k++)
        if (!net->opset_domains[k][0] || strcmp(net->opset_domains[k], "ai.onnx") == 0)
            return net->opset_versions[k];
    if (net->opset > 0)
        return net->opset;
    int v = 0;
    for (int i = 0; i < net->n_nodes; i++)
        if (!net->nodes[i].domain[0] && net->nodes[i].opset > v)
            v = net->nodes[i].opset;
    return v > 0 ? v : 17;
}

static kiln_status write_model(wbuf *b, const kn_net *net) {
    int op = default_opset(net);
    /* the IR version that introduced the opset in use */
    int ir = op <= 8 ? 3 : op <= 10 ? 5 : op <= 12 ? 7 : op <= 18 ? 8 : op <= 20 ? 9 : 10;
    wb_int(b, 1, ir);
    wb_str(b, 2, "kiln");
    wb_str(b, 3, kiln_version_string());
    wbuf g = {0};
    kiln_status st = write_graph(&g, net, "kiln", 0);
    if (st != KILN_OK) {
        wb_free(&g);
        return st;
    }
    wb_msg(b, 7, &g);
    wbuf os = {0};
    wb_int(&os, 2, op);
    wb_msg(b, 8, &os);
    for (int k = 0; k < net->n_opsets; k++) {
        const char *d = net->opset_domains[k];
        if (!d[0] || strcmp(d, "ai.onnx") == 0)
            continue;
        wbuf o = {0};
        wb_str(&o, 1, d);
        wb_int(&o, 2, net->opset_versions[k]);
        wb_msg(b, 8, &o);
    }
    return b->oom ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

KILN_API kiln_status kiln_onnx_write_file(const kiln_network *net, const char *path) {
    if (!net || !path)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_onnx_write_file: NULL argument");
    wbuf b = {0};
    kiln_status st = write_model(&b, net);
    if (st != KILN_OK) {
        wb_free(&b);
        return kn_error_wrap(st, "writing '%s'", path);
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        wb_free(&b);
        return kn_error(KILN_ERR_IO, "cannot create '%s'", path);
    }
    bool ok = fwrite(b.p, 1, b.n, f) == b.n;
    ok = fclose(f) == 0 && ok;
    wb_free(&b);
    if (!ok)
        return kn_error(KILN_ERR_IO, "cannot write '%s'", path);
    return KILN_OK;
}
