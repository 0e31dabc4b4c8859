/* attrs.c - node attribute lookup and update, and the check that every
 * attribute of a standard ONNX node has the type its name takes (and a flag
 * is 0 or 1) before anything reads it. */
#include <string.h>

#include "graph.h"

const kn_attr *kn_attr_find(const kn_node *n, const char *name) {
    for (int i = 0; i < n->n_attr; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

int64_t kn_attr_int(const kn_node *n, const char *name, int64_t dflt) {
    const kn_attr *a = kn_attr_find(n, name);
    if (!a)
        return dflt;
    if (a->type == KN_ATTR_FLOAT)
        return (int64_t)a->f;
    return a->i;
}

float kn_attr_float(const kn_node *n, const char *name, float dflt) {
    const kn_attr *a = kn_attr_find(n, name);
    if (!a)
        return dflt;
    if (a->type == KN_ATTR_INT)
        return (float)a->i;
    return a->f;
}

const char *kn_attr_string(const kn_node *n, const char *name, const char *dflt) {
    const kn_attr *a = kn_attr_find(n, name);
    return a && a->s ? a->s : dflt;
}

const int64_t *kn_attr_ints(const kn_node *n, const char *name, size_t *count) {
    const kn_attr *a = kn_attr_find(n, name);
    if (!a || a->type != KN_ATTR_INTS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->ints;
}

const float *kn_attr_floats(const kn_node *n, const char *name, size_t *count) {
    const kn_attr *a = kn_attr_find(n, name);
    if (!a || a->type != KN_ATTR_FLOATS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->floats;
}

/* Find or append the attribute `name`, cleared, with its name set. */
static kiln_status slot(kn_node *n, const char *name, kn_attr **out) {
    for (int i = 0; i < n->n_attr; i++) {
        if (strcmp(n->attrs[i].name, name) == 0) {
            char *keep = n->attrs[i].name;
            n->attrs[i].name = NULL;
            kn_attr_free(&n->attrs[i]);
            n->attrs[i].name = keep;
            *out = &n->attrs[i];
            return KILN_OK;
        }
    }
    char *nm = kn_strdup(name);
    if (!nm)
        return KILN_ERR_OUT_OF_MEMORY;
    kn_attr *na = kn_realloc(n->attrs, (size_t)(n->n_attr + 1) * sizeof *na);
    if (!na) {
        kn_free(nm);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    n->attrs = na;
    memset(&na[n->n_attr], 0, sizeof *na);
    na[n->n_attr].name = nm;
    *out = &na[n->n_attr++];
    return KILN_OK;
}

kiln_status kn_node_set_int(kn_node *n, const char *name, int64_t v) {
    kn_attr *a;
    KN_TRY(slot(n, name, &a));
    a->type = KN_ATTR_INT;
    a->i = v;
    return KILN_OK;
}

kiln_status kn_node_set_float(kn_node *n, const char *name, float v) {
    kn_attr *a;
    KN_TRY(slot(n, name, &a));
    a->type = KN_ATTR_FLOAT;
    a->f = v;
    return KILN_OK;
}

kiln_status kn_node_set_string(kn_node *n, const char *name, const char *v) {
    kn_attr *a;
    KN_TRY(slot(n, name, &a));
    a->type = KN_ATTR_STRING;
    if (!(a->s = kn_strdup(v)))
        return KILN_ERR_OUT_OF_MEMORY;
    a->s_len = strlen(v);
    return KILN_OK;
}

kiln_status kn_node_set_ints(kn_node *n, const char *name, const int64_t *v, size_t count) {
    kn_attr *a;
    KN_TRY(slot(n, name, &a));
    a->type = KN_ATTR_INTS;
    if (!(a->ints = kn_malloc(count * sizeof *v + 1)))
        return KILN_ERR_OUT_OF_MEMORY;
    if (count)
        memcpy(a->ints, v, count * sizeof *v);
    a->n = count;
    return KILN_OK;
}

kiln_status kn_node_set_floats(kn_node *n, const char *name, const float *v, size_t count) {
    kn_attr *a;
    KN_TRY(slot(n, name, &a));
    a->type = KN_ATTR_FLOATS;
    if (!(a->floats = kn_malloc(count * sizeof *v + 1)))
        return KILN_ERR_OUT_OF_MEMORY;
    if (count)
        memcpy(a->floats, v, count * sizeof *v);
    a->n = count;
    return KILN_OK;
}

/* ---------------- attribute types ----------------
 * What an attribute of the default ONNX domain holds follows from its name
 * across the whole operator set (an "axis" is always an INT, "perm" always
 * INTS, "mode" always a STRING); flags are INTs that must be 0 or 1. The
 * readers (kn_attr_int & co.) quietly take a wrong type as a default or a
 * conversion, so a node whose attribute has another type is refused here,
 * naming the node, the attribute and both types. A FLOAT attribute given as
 * an INT is taken (kn_attr_float converts exactly). Names not listed (and
 * "value", whose type differs between ops) are left to each op. */

typedef struct attr_rule {
    const char *name;
    kn_attr_type type;
    bool flag; /* INT that must be 0 or 1 */
} attr_rule;

static const attr_rule k_rules[] = {
    /* flags */
    {"transA", KN_ATTR_INT, true}, {"transB", KN_ATTR_INT, true},
    {"keepdims", KN_ATTR_INT, true}, {"select_last_index", KN_ATTR_INT, true},
    {"noop_with_empty_axes", KN_ATTR_INT, true}, {"exclusive", KN_ATTR_INT, true},
    {"reverse", KN_ATTR_INT, true}, {"ceil_mode", KN_ATTR_INT, true},
    {"count_include_pad", KN_ATTR_INT, true}, {"allowzero", KN_ATTR_INT, true},
    {"largest", KN_ATTR_INT, true}, {"sorted", KN_ATTR_INT, true},
    {"upper", KN_ATTR_INT, true}, {"detect_negative", KN_ATTR_INT, true},
    {"detect_positive", KN_ATTR_INT, true}, {"training_mode", KN_ATTR_INT, true},
    {"exclude_outside", KN_ATTR_INT, true}, {"onesided", KN_ATTR_INT, true},
    {"inverse", KN_ATTR_INT, true}, {"periodic", KN_ATTR_INT, true},
    {"align_corners", KN_ATTR_INT, true}, {"center_point_box", KN_ATTR_INT, true},
    {"linear_before_reset", KN_ATTR_INT, true}, {"input_forget", KN_ATTR_INT, true},
    {"new_axis", KN_ATTR_INT, true}, {"saturate", KN_ATTR_INT, true},
    {"fmod", KN_ATTR_INT, true}, {"storage_order", KN_ATTR_INT, true},
    {"is_causal", KN_ATTR_INT, true}, {"interleaved", KN_ATTR_INT, true},
    /* integers */
    {"axis", KN_ATTR_INT, false}, {"group", KN_ATTR_INT, false},
    {"to", KN_ATTR_INT, false}, {"blocksize", KN_ATTR_INT, false},
    {"batch_dims", KN_ATTR_INT, false}, {"dtype", KN_ATTR_INT, false},
    {"output_datatype", KN_ATTR_INT, false}, {"num_outputs", KN_ATTR_INT, false},
    {"stash_type", KN_ATTR_INT, false}, {"hidden_size", KN_ATTR_INT, false},
    {"p", KN_ATTR_INT, false}, {"k", KN_ATTR_INT, false},
    /* integer lists */
    {"axes", KN_ATTR_INTS, false}, {"perm", KN_ATTR_INTS, false},
    {"pads", KN_ATTR_INTS, false}, {"strides", KN_ATTR_INTS, false},
    {"kernel_shape", KN_ATTR_INTS, false}, {"dilations", KN_ATTR_INTS, false},
    {"output_padding", KN_ATTR_INTS, false}, {"output_shape", KN_ATTR_INTS, false},
    {"split", KN_ATTR_INTS, false}, {"starts", KN_ATTR_INTS, false},
    {"ends", KN_ATTR_INTS, false},
    /* floats */
    {"alpha", KN_ATTR_FLOAT, false}, {"beta", KN_ATTR_FLOAT, false},
    {"gamma", KN_ATTR_FLOAT, false}, {"epsilon", KN_ATTR_FLOAT, false},
    {"momentum", KN_ATTR_FLOAT, false}, {"lambd", KN_ATTR_FLOAT, false},
    {"ratio", KN_ATTR_FLOAT, false}, {"cubic_coeff_a", KN_ATTR_FLOAT, false},
    {"extrapolation_value", KN_ATTR_FLOAT, false},
    /* strings */
    {"mode", KN_ATTR_STRING, false}, {"auto_pad", KN_ATTR_STRING, false},
    {"equation", KN_ATTR_STRING, false}, {"reduction", KN_ATTR_STRING, false},
    {"direction", KN_ATTR_STRING, false}, {"approximate", KN_ATTR_STRING, false},
    {"coordinate_transformation_mode", KN_ATTR_STRING, false},
    {"nearest_mode", KN_ATTR_STRING, false}, {"padding_mode", KN_ATTR_STRING, false},
};

const char *kn_attr_type_name(kn_attr_type t) {
    switch (t) {
    case KN_ATTR_FLOAT: return "FLOAT";
    case KN_ATTR_INT: return "INT";
    case KN_ATTR_STRING: return "STRING";
    case KN_ATTR_TENSOR: return "TENSOR";
    case KN_ATTR_GRAPH: return "GRAPH";
    case KN_ATTR_FLOATS: return "FLOATS";
    case KN_ATTR_INTS: return "INTS";
    case KN_ATTR_STRINGS: return "STRINGS";
    default: return "UNDEFINED";
    }
}

static const attr_rule *rule_of(const char *name) {
    for (size_t i = 0; i < KN_ARRAY_LEN(k_rules); i++)
        if (strcmp(k_rules[i].name, name) == 0)
            return &k_rules[i];
    return NULL;
}

kiln_status kn_node_check_attrs(const kn_node *n) {
    /* kiln's fused ops are made by the passes; plugins check their own fields */
    if (n->domain[0] != 0 && strcmp(n->domain, "ai.onnx") != 0)
        return KILN_OK;
    for (int i = 0; i < n->n_attr; i++) {
        const kn_attr *a = &n->attrs[i];
        const attr_rule *r = rule_of(a->name);
        if (!r)
            continue;
        bool ok = a->type == r->type || (r->type == KN_ATTR_FLOAT && a->type == KN_ATTR_INT);
        if (!ok)
            return kn_node_error(n, KILN_ERR_PARSE, "attribute '%s' has type %s; %s takes an %s",
                                 a->name, kn_attr_type_name(a->type), n->op_type,
                                 kn_attr_type_name(r->type));
        if (r->flag && a->i != 0 && a->i != 1)
            return kn_node_error(n, KILN_ERR_PARSE, "attribute '%s' is %lld; it is a flag and "
                                 "must be 0 or 1", a->name, (long long)a->i);
    }
    return KILN_OK;
}

kiln_status kn_net_check_attrs(const kn_net *net) {
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_attr; k++)
            if (n->attrs[k].type == KN_ATTR_GRAPH && n->attrs[k].graph) {
                kiln_status st = kn_net_check_attrs(n->attrs[k].graph);
                if (st != KILN_OK)
                    return kn_error_wrap(st, "in subgraph '%s' of node '%s' (%s)",
                                         n->attrs[k].name, n->name, n->op_type);
            }
        KN_TRY(kn_node_check_attrs(n));
    }
    return KILN_OK;
}
