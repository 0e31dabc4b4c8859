/* attrs.c - node attribute lookup and update. */
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
