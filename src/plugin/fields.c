/* fields.c - plugin field collections: made from a node's ONNX attributes by
 * the creator's schema, and their byte form in plans (written and read here,
 * every length checked on the way in).
 *
 * Byte form, version 1 (little-endian):
 *     0  4  magic "KPF1"
 *     4  4  u32 field count
 *   then per field:
 *        4  u32 name length N (1..255)
 *        N  name, UTF-8, no NUL
 *        4  u32 type (kiln_field_type)
 *        4  u32 reserved, 0
 *        8  i64 length L (elements; bytes for STRING and BYTES), 0 <= L
 *        L x element size bytes of data, elements little-endian
 * Nothing may follow the last field. */
#include <stdio.h>
#include <string.h>

#include "plugin.h"

#define KPF_MAGIC "KPF1"
#define KPF_MAX_NAME 255u

size_t kpl_field_elem_size(kiln_field_type t) {
    switch (t) {
    case KILN_FIELD_INT8: return 1;
    case KILN_FIELD_INT16: return 2;
    case KILN_FIELD_INT32: return 4;
    case KILN_FIELD_INT64: return 8;
    case KILN_FIELD_FLOAT16: return 2;
    case KILN_FIELD_BFLOAT16: return 2;
    case KILN_FIELD_FLOAT32: return 4;
    case KILN_FIELD_FLOAT64: return 8;
    case KILN_FIELD_STRING: return 1;
    case KILN_FIELD_BYTES: return 1;
    }
    return 0;
}

const char *kpl_field_type_name(kiln_field_type t) {
    static const char *const names[] = {"int8",    "int16",   "int32",  "int64",  "float16",
                                        "bfloat16", "float32", "float64", "string", "bytes"};
    return (unsigned)t < KN_ARRAY_LEN(names) ? names[t] : "unknown";
}

void kpl_fields_free(kpl_fields *f) {
    for (int i = 0; i < f->c.count; i++) {
        kn_free((void *)f->items[i].name);
        kn_free((void *)f->items[i].data);
    }
    kn_free(f->items);
    memset(f, 0, sizeof *f);
}

kiln_status kpl_fields_add(kpl_fields *f, const char *name, kiln_field_type type, int64_t length,
                           const void *data) {
    size_t es = kpl_field_elem_size(type), bytes;
    if (!es || length < 0 || kn_mul_overflow((size_t)length, es, &bytes))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "field '%s': type %d or length %lld is invalid",
                        name, (int)type, (long long)length);
    KN_TRY(kn_grow((void **)&f->items, &f->cap, f->c.count + 1, sizeof *f->items));
    char *nm = kn_strdup(name);
    void *d = kn_malloc(bytes + 1); /* +1: a string gets a NUL after its bytes */
    if (!nm || !d) {
        kn_free(nm);
        kn_free(d);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    if (bytes)
        memcpy(d, data, bytes);
    ((char *)d)[bytes] = 0;
    kiln_field *it = &f->items[f->c.count++];
    it->name = nm;
    it->type = type;
    it->length = length;
    it->data = d;
    f->c.fields = f->items;
    return KILN_OK;
}

/* ---- ONNX attributes to fields ---- */

static bool is_int_field(kiln_field_type t) { return t <= KILN_FIELD_INT64; }
static bool is_float_field(kiln_field_type t) {
    return t >= KILN_FIELD_FLOAT16 && t <= KILN_FIELD_FLOAT64;
}

static kiln_status mismatch(const kn_node *n, const kiln_plugin_creator *cr, const kn_attr *a,
                            const kiln_field_spec *sp, const char *why) {
    char id[512], len[48] = "";
    kpl_identity(id, sizeof id, cr->name, cr->version, cr->plugin_namespace);
    if (sp->length >= 0)
        snprintf(len, sizeof len, " of length %lld", (long long)sp->length);
    return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT, "attribute '%s' of plugin %s: expected %s%s, %s",
                         a->name, id, kpl_field_type_name(sp->type), len, why);
}

static kiln_status put_ints(const kn_node *n, const kiln_plugin_creator *cr, const kn_attr *a,
                            const kiln_field_spec *sp, const int64_t *v, size_t cnt,
                            kpl_fields *out) {
    size_t es = kpl_field_elem_size(sp->type);
    uint8_t *buf = kn_malloc(cnt * es + 1);
    if (!buf)
        return KILN_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < cnt; i++) {
        int64_t x = v[i];
        bool ok = true;
        switch (sp->type) {
        case KILN_FIELD_INT8: ok = x >= INT8_MIN && x <= INT8_MAX; { int8_t y = (int8_t)x; memcpy(buf + i, &y, 1); } break;
        case KILN_FIELD_INT16: ok = x >= INT16_MIN && x <= INT16_MAX; { int16_t y = (int16_t)x; memcpy(buf + 2 * i, &y, 2); } break;
        case KILN_FIELD_INT32: ok = x >= INT32_MIN && x <= INT32_MAX; { int32_t y = (int32_t)x; memcpy(buf + 4 * i, &y, 4); } break;
        default: memcpy(buf + 8 * i, &x, 8); break;
        }
        if (!ok) {
            kn_free(buf);
            char why[128];
            snprintf(why, sizeof why, "element %zu (%lld) does not fit", i, (long long)x);
            return mismatch(n, cr, a, sp, why);
        }
    }
    kiln_status st = kpl_fields_add(out, sp->name, sp->type, (int64_t)cnt, buf);
    kn_free(buf);
    return st;
}

static kiln_status put_floats(const kiln_field_spec *sp, const double *v, size_t cnt,
                              kpl_fields *out) {
    size_t es = kpl_field_elem_size(sp->type);
    uint8_t *buf = kn_malloc(cnt * es + 1);
    if (!buf)
        return KILN_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < cnt; i++) {
        switch (sp->type) {
        case KILN_FIELD_FLOAT16: { uint16_t h = kn_float_to_half((float)v[i]); memcpy(buf + 2 * i, &h, 2); } break;
        case KILN_FIELD_BFLOAT16: { uint16_t h = kn_float_to_bf16((float)v[i]); memcpy(buf + 2 * i, &h, 2); } break;
        case KILN_FIELD_FLOAT32: { float f = (float)v[i]; memcpy(buf + 4 * i, &f, 4); } break;
        default: memcpy(buf + 8 * i, &v[i], 8); break;
        }
    }
    kiln_status st = kpl_fields_add(out, sp->name, sp->type, (int64_t)cnt, buf);
    kn_free(buf);
    return st;
}

static bool dtype_is_int(kiln_dtype d) {
    return d == KILN_DTYPE_INT8 || d == KILN_DTYPE_INT16 || d == KILN_DTYPE_INT32 ||
           d == KILN_DTYPE_INT64 || d == KILN_DTYPE_UINT8 || d == KILN_DTYPE_UINT16 ||
           d == KILN_DTYPE_UINT32 || d == KILN_DTYPE_UINT64 || d == KILN_DTYPE_BOOL;
}
static bool dtype_is_float(kiln_dtype d) {
    return d == KILN_DTYPE_FLOAT || d == KILN_DTYPE_FLOAT16 || d == KILN_DTYPE_BFLOAT16 ||
           d == KILN_DTYPE_DOUBLE;
}

static kiln_status from_tensor(const kn_node *n, const kiln_plugin_creator *cr, const kn_attr *a,
                               const kiln_field_spec *sp, kpl_fields *out) {
    const kn_tdata *t = a->tensor;
    int64_t cnt = kn_numel(t->rank, t->dims);
    if (cnt < 0)
        return mismatch(n, cr, a, sp, "the tensor has a negative dimension");
    if (sp->type == KILN_FIELD_BYTES)
        return kpl_fields_add(out, sp->name, sp->type, (int64_t)t->nbytes, t->data);
    void *tmp = NULL;
    const void *p = kn_tdata_aligned(t, &tmp);
    if (!p && t->nbytes)
        return KILN_ERR_OUT_OF_MEMORY;
    kn_tinfo ti;
    memset(&ti, 0, sizeof ti);
    ti.dtype = t->dtype;
    ti.value = p;
    kiln_status st;
    if (is_int_field(sp->type) && dtype_is_int(t->dtype)) {
        int64_t *v = kn_malloc((size_t)cnt * 8 + 8);
        if (!v) {
            kn_aligned_free(tmp);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        for (int64_t i = 0; i < cnt; i++)
            v[i] = kn_value_int(&ti, i);
        st = put_ints(n, cr, a, sp, v, (size_t)cnt, out);
        kn_free(v);
    } else if (is_float_field(sp->type) && dtype_is_float(t->dtype)) {
        double *v = kn_malloc((size_t)cnt * 8 + 8);
        if (!v) {
            kn_aligned_free(tmp);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        for (int64_t i = 0; i < cnt; i++)
            v[i] = kn_value_double(&ti, i);
        st = put_floats(sp, v, (size_t)cnt, out);
        kn_free(v);
    } else {
        char why[128];
        snprintf(why, sizeof why, "got a tensor of %s", kiln_dtype_name(t->dtype));
        st = mismatch(n, cr, a, sp, why);
    }
    kn_aligned_free(tmp);
    return st;
}

static const char *attr_type_name(kn_attr_type t) {
    static const char *const names[] = {"undefined", "float",  "int",   "string", "tensor",
                                        "graph",     "floats", "ints",  "strings"};
    return (unsigned)t < KN_ARRAY_LEN(names) ? names[t] : "unknown";
}

static kiln_status one_field(const kn_node *n, const kiln_plugin_creator *cr, const kn_attr *a,
                             const kiln_field_spec *sp, kpl_fields *out) {
    int64_t have = 0;
    switch (a->type) {
    case KN_ATTR_INT: case KN_ATTR_FLOAT: have = 1; break;
    case KN_ATTR_INTS: case KN_ATTR_FLOATS: have = (int64_t)a->n; break;
    case KN_ATTR_STRING: have = (int64_t)a->s_len; break;
    case KN_ATTR_TENSOR: have = a->tensor ? kn_numel(a->tensor->rank, a->tensor->dims) : -1; break;
    default: break;
    }
    char why[160];
    if (sp->length >= 0 && have != sp->length && sp->type != KILN_FIELD_STRING &&
        sp->type != KILN_FIELD_BYTES) {
        snprintf(why, sizeof why, "got %lld element(s) where the schema wants %lld",
                 (long long)have, (long long)sp->length);
        return mismatch(n, cr, a, sp, why);
    }
    snprintf(why, sizeof why, "got an attribute of type %s", attr_type_name(a->type));
    if (a->type == KN_ATTR_TENSOR && a->tensor)
        return from_tensor(n, cr, a, sp, out);
    if (is_int_field(sp->type)) {
        if (a->type == KN_ATTR_INT)
            return put_ints(n, cr, a, sp, &a->i, 1, out);
        if (a->type == KN_ATTR_INTS)
            return put_ints(n, cr, a, sp, a->ints, a->n, out);
        return mismatch(n, cr, a, sp, why);
    }
    if (is_float_field(sp->type)) {
        if (a->type == KN_ATTR_FLOAT) {
            double d = a->f;
            return put_floats(sp, &d, 1, out);
        }
        if (a->type == KN_ATTR_FLOATS) {
            double *v = kn_malloc(a->n * sizeof *v + 8);
            if (!v)
                return KILN_ERR_OUT_OF_MEMORY;
            for (size_t i = 0; i < a->n; i++)
                v[i] = a->floats[i];
            kiln_status st = put_floats(sp, v, a->n, out);
            kn_free(v);
            return st;
        }
        return mismatch(n, cr, a, sp, why);
    }
    if (sp->type == KILN_FIELD_STRING || sp->type == KILN_FIELD_BYTES) {
        if (a->type != KN_ATTR_STRING)
            return mismatch(n, cr, a, sp, why);
        if (sp->length >= 0 && have != sp->length) {
            snprintf(why, sizeof why, "got %lld byte(s) where the schema wants %lld",
                     (long long)have, (long long)sp->length);
            return mismatch(n, cr, a, sp, why);
        }
        return kpl_fields_add(out, sp->name, sp->type, (int64_t)a->s_len, a->s ? a->s : "");
    }
    return mismatch(n, cr, a, sp, "the schema's field type is unknown");
}

static bool is_identity_attr(const char *name) {
    return strcmp(name, KPL_ATTR_VERSION) == 0 || strcmp(name, KPL_ATTR_NAMESPACE) == 0 ||
           strcmp(name, KPL_ATTR_FIELDS) == 0 || strcmp(name, KPL_ATTR_WORKSPACE) == 0;
}

kiln_status kpl_fields_from_node(const kn_node *n, const kiln_plugin_creator *cr,
                                 kpl_fields *out) {
    kpl_fields f;
    memset(&f, 0, sizeof f);
    char id[512];
    kpl_identity(id, sizeof id, cr->name, cr->version, cr->plugin_namespace);
    for (int k = 0; k < n->n_attr; k++) {
        const kn_attr *a = &n->attrs[k];
        if (is_identity_attr(a->name))
            continue;
        const kiln_field_spec *sp = NULL;
        for (int s = 0; s < cr->n_fields; s++)
            if (cr->fields[s].name && strcmp(cr->fields[s].name, a->name) == 0)
                sp = &cr->fields[s];
        kiln_status st;
        if (!sp)
            st = kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                               "attribute '%s' is not a field of plugin %s (its schema has %d "
                               "field(s); `kiln plugins list` shows them)",
                               a->name, id, cr->n_fields);
        else
            st = one_field(n, cr, a, sp, &f);
        if (st != KILN_OK) {
            kpl_fields_free(&f);
            return st;
        }
    }
    for (int s = 0; s < cr->n_fields; s++) {
        const kiln_field_spec *sp = &cr->fields[s];
        if (!sp->required || !sp->name)
            continue;
        bool found = false;
        for (int i = 0; i < f.c.count; i++)
            found |= strcmp(f.items[i].name, sp->name) == 0;
        if (!found) {
            kpl_fields_free(&f);
            return kn_node_error(n, KILN_ERR_INVALID_ARGUMENT,
                                 "plugin %s needs field '%s' (%s): the node has no attribute of "
                                 "that name",
                                 id, sp->name, kpl_field_type_name(sp->type));
        }
    }
    *out = f;
    return KILN_OK;
}

/* ---- byte form ---- */

static void put_u32(kn_buf *b, uint32_t v) {
    uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    kn_buf_append(b, t, 4);
}
static void put_u64(kn_buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static uint32_t ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t ld_u64(const uint8_t *p) { return (uint64_t)ld_u32(p) | (uint64_t)ld_u32(p + 4) << 32; }

void kpl_fields_write(const kiln_field_collection *c, kn_buf *b) {
    kn_buf_append(b, KPF_MAGIC, 4);
    int32_t count = c && c->count > 0 && c->fields ? c->count : 0;
    put_u32(b, (uint32_t)count);
    for (int i = 0; i < count; i++) {
        const kiln_field *f = &c->fields[i];
        const char *nm = f->name ? f->name : "";
        size_t nl = strlen(nm);
        put_u32(b, (uint32_t)nl);
        kn_buf_append(b, nm, nl);
        put_u32(b, (uint32_t)f->type);
        put_u32(b, 0);
        int64_t len = f->length < 0 ? 0 : f->length;
        put_u64(b, (uint64_t)len);
        size_t bytes = (size_t)len * kpl_field_elem_size(f->type);
        if (bytes && f->data)
            kn_buf_append(b, f->data, bytes); /* little-endian hosts only (static check in core) */
    }
}

kiln_status kpl_fields_read(const void *data, size_t size, kpl_fields *out) {
    const uint8_t *p = data;
    if (!p && size)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plugin fields: NULL data");
    if (size < 8 || memcmp(p, KPF_MAGIC, 4) != 0)
        return kn_error(KILN_ERR_PLAN, "plugin fields: %zu bytes without the \"KPF1\" header",
                        size);
    uint32_t count = ld_u32(p + 4);
    size_t at = 8;
    /* the smallest field takes 21 bytes: this bounds every allocation by size */
    if (count > (size - at) / 21)
        return kn_error(KILN_ERR_PLAN, "plugin fields: %u fields cannot fit in %zu bytes", count,
                        size);
    kpl_fields f;
    memset(&f, 0, sizeof f);
    kiln_status st = KILN_OK;
    for (uint32_t i = 0; i < count && st == KILN_OK; i++) {
        if (size - at < 4) {
            st = kn_error(KILN_ERR_PLAN, "plugin fields: field %u: name length at byte %zu is past "
                                         "the end (%zu bytes)", i, at, size);
            break;
        }
        uint32_t nl = ld_u32(p + at);
        at += 4;
        if (nl == 0 || nl > KPF_MAX_NAME || size - at < (size_t)nl + 16) {
            st = kn_error(KILN_ERR_PLAN, "plugin fields: field %u: name of %u bytes at byte %zu "
                                         "is empty, too long or past the end",
                          i, nl, at);
            break;
        }
        if (memchr(p + at, 0, nl)) {
            st = kn_error(KILN_ERR_PLAN, "plugin fields: field %u: name at byte %zu holds a NUL",
                          i, at);
            break;
        }
        char name[KPF_MAX_NAME + 1];
        memcpy(name, p + at, nl);
        name[nl] = 0;
        at += nl;
        uint32_t type = ld_u32(p + at), reserved = ld_u32(p + at + 4);
        uint64_t len = ld_u64(p + at + 8);
        if (reserved != 0) { /* found by fuzz_plugin_fields: kept bytes must round-trip */
            st = kn_error(KILN_ERR_PLAN, "plugin fields: field '%s': reserved word at byte %zu is "
                                         "%u, not 0", name, at + 4, reserved);
            break;
        }
        at += 16;
        size_t es = kpl_field_elem_size((kiln_field_type)type);
        if (!es || type > KILN_FIELD_BYTES) {
            st = kn_error(KILN_ERR_PLAN, "plugin fields: field '%s' has unknown type %u", name,
                          type);
            break;
        }
        if (len > (uint64_t)(size - at) / es) {
            st = kn_error(KILN_ERR_PLAN, "plugin fields: field '%s': %llu elements of %zu bytes "
                                         "at byte %zu are past the end (%zu bytes)",
                          name, (unsigned long long)len, es, at, size);
            break;
        }
        for (int k = 0; k < f.c.count; k++)
            if (strcmp(f.items[k].name, name) == 0) {
                st = kn_error(KILN_ERR_PLAN, "plugin fields: field '%s' appears twice", name);
                break;
            }
        if (st == KILN_OK)
            st = kpl_fields_add(&f, name, (kiln_field_type)type, (int64_t)len, p + at);
        at += (size_t)len * es;
    }
    if (st == KILN_OK && at != size)
        st = kn_error(KILN_ERR_PLAN, "plugin fields: %zu unexpected bytes after the last field",
                      size - at);
    if (st != KILN_OK) {
        kpl_fields_free(&f);
        return st;
    }
    *out = f;
    return KILN_OK;
}
