/* onnx_tensor.c - TensorProto to kn_tdata: raw_data (borrowed from a mapped
 * model when possible), the typed repeated fields, and external data files
 * that must stay inside the model's folder. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

enum {
    F_DIMS = 1, F_DATA_TYPE = 2, F_SEGMENT = 3, F_FLOAT = 4, F_INT32 = 5, F_STRING = 6,
    F_INT64 = 7, F_NAME = 8, F_RAW = 9, F_DOUBLE = 10, F_UINT64 = 11, F_EXTERNAL = 13,
    F_LOCATION = 14
};

typedef struct tensor_fields {
    int64_t dims[KILN_MAX_DIMS];
    size_t n_dims;
    int64_t dtype;
    int64_t location;
    kx_str name, raw;
    int has_raw, has_segment;
    size_t n_ext;
    size_t count[12]; /* values seen per typed field number (4..11) */
} tensor_fields;

static const char *typed_name(uint32_t f) {
    switch (f) {
    case F_FLOAT: return "float_data";
    case F_INT32: return "int32_data";
    case F_STRING: return "string_data";
    case F_INT64: return "int64_data";
    case F_DOUBLE: return "double_data";
    case F_UINT64: return "uint64_data";
    }
    return "?";
}

static uint32_t typed_wire(uint32_t f) {
    switch (f) {
    case F_FLOAT: return KX_WT_I32;
    case F_DOUBLE: return KX_WT_I64;
    case F_STRING: return KX_WT_LEN;
    default: return KX_WT_VARINT;
    }
}

/* The typed field ONNX keeps values of dtype dt in when raw_data is absent. */
static uint32_t typed_field(kiln_dtype dt) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_COMPLEX64: return F_FLOAT;
    case KILN_DTYPE_INT64: return F_INT64;
    case KILN_DTYPE_DOUBLE: case KILN_DTYPE_COMPLEX128: return F_DOUBLE;
    case KILN_DTYPE_UINT32: case KILN_DTYPE_UINT64: return F_UINT64;
    case KILN_DTYPE_STRING: return F_STRING;
    default: return F_INT32; /* int32, int16/8, uint16/8, bool, float16, bfloat16, float8 */
    }
}

typedef struct dims_sink {
    int64_t *dims;
} dims_sink;

static void put_dim(void *user, size_t k, uint64_t raw) {
    dims_sink *s = user;
    if (k < KILN_MAX_DIMS)
        s->dims[k] = (int64_t)raw;
}

/* Values land as the low `width` bytes of each wire value (little endian):
 * int32_data holds float16 bits in its low 16 bits, int8 in its low 8, and so on. */
typedef struct value_sink {
    uint8_t *dst;
    size_t width, cap;
} value_sink;

static void put_value(void *user, size_t k, uint64_t raw) {
    value_sink *s = user;
    if (k < s->cap)
        memcpy(s->dst + k * s->width, &raw, s->width);
}

static void tensor_label(const tensor_fields *tf, char *buf, size_t cap) {
    if (tf->name.n)
        snprintf(buf, cap, "tensor '%.*s'", (int)(tf->name.n > 200 ? 200 : tf->name.n),
                 tf->name.p);
    else
        snprintf(buf, cap, "tensor");
}

static kiln_status scan_fields(kx_onnx *cx, kx_pb_msg *m, tensor_fields *tf) {
    kx_pb *pb = &cx->pb;
    kx_pb_field f;
    memset(tf, 0, sizeof *tf);
    tf->name.p = tf->raw.p = "";
    for (;;) {
        KN_TRY(kx_pb_next(pb, m, &f));
        if (!f.num)
            return KILN_OK;
        switch (f.num) {
        case F_DIMS: {
            size_t first = tf->n_dims;
            KN_TRY(kx_pb_rep_count(pb, m, &f, KX_WT_VARINT, &tf->n_dims));
            dims_sink s = {tf->dims};
            kx_pb_rep_each(pb, &f, KX_WT_VARINT, first, put_dim, &s);
            break;
        }
        case F_DATA_TYPE: KN_TRY(kx_pb_int(pb, m, &f, &tf->dtype)); break;
        case F_SEGMENT: tf->has_segment = 1; break;
        case F_FLOAT: case F_INT32: case F_STRING: case F_INT64: case F_DOUBLE: case F_UINT64:
            KN_TRY(kx_pb_rep_count(pb, m, &f, typed_wire(f.num), &tf->count[f.num]));
            break;
        case F_NAME: KN_TRY(kx_pb_bytes(pb, m, &f, &tf->name)); break;
        case F_RAW:
            KN_TRY(kx_pb_bytes(pb, m, &f, &tf->raw));
            tf->has_raw = 1;
            break;
        case F_EXTERNAL:
            KN_TRY(kx_pb_want(pb, m, &f, KX_WT_LEN));
            tf->n_ext++;
            break;
        case F_LOCATION: KN_TRY(kx_pb_int(pb, m, &f, &tf->location)); break;
        default: break; /* doc_string and unknown fields */
        }
    }
}

/* ---- external data ---- */

void kx_map_blob_release(kn_blob *b) {
    kx_map_blob *mb = (kx_map_blob *)b;
    kn_file_unmap(&mb->map);
    kn_free(mb);
}

void kx_onnx_ext_close(kx_onnx *cx) {
    for (int i = 0; i < cx->n_ext; i++) {
        kn_free(cx->ext[i].location);
        kn_blob_unref(&cx->ext[i].mb->blob);
    }
    kn_free(cx->ext);
    cx->ext = NULL;
    cx->n_ext = cx->cap_ext = 0;
}

/* Strict unsigned decimal ("0", "4096"); returns 0 on success. */
static int parse_u64(kx_str s, uint64_t *out) {
    if (s.n == 0 || s.n > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s.p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* A location must be relative and its ".." parts must not climb out of the
 * folder; symbolic links are checked after resolving (see open_external). */
static kiln_status check_location(kx_onnx *cx, kx_pb_msg *m, const char *label, const char *loc) {
    if (!*loc)
        return kx_pb_error(&cx->pb, m, NULL, "%s: external data has an empty location", label);
    if (loc[0] == '/')
        return kx_pb_error(&cx->pb, m, NULL,
                           "%s: external data location '%s' is an absolute path; it must be "
                           "relative to the model's folder",
                           label, loc);
    int depth = 0;
    for (const char *p = loc; *p;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0)
                return kx_pb_error(&cx->pb, m, NULL,
                                   "%s: external data location '%s' leaves the model's folder",
                                   label, loc);
        } else if (n && !(n == 1 && p[0] == '.')) {
            depth++;
        }
        p += n + (e ? 1 : 0);
    }
    return KILN_OK;
}

static kiln_status open_external(kx_onnx *cx, kx_pb_msg *m, const char *label, const char *loc,
                                 kx_map_blob **out) {
    for (int i = 0; i < cx->n_ext; i++)
        if (strcmp(cx->ext[i].location, loc) == 0) {
            *out = cx->ext[i].mb;
            return KILN_OK;
        }
    if (!cx->base_dir)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: %s keeps its data in external file '%s', but the model was given "
                        "without a folder to find it in (base_dir is NULL)",
                        cx->pb.path, label, loc);
    KN_TRY(check_location(cx, m, label, loc));
    char full[PATH_MAX], real_base[PATH_MAX], real_full[PATH_MAX];
    if ((size_t)snprintf(full, sizeof full, "%s/%s", cx->base_dir, loc) >= sizeof full)
        return kn_error(KILN_ERR_IO, "%s: %s: external data path '%s/%s' is too long", cx->pb.path,
                        label, cx->base_dir, loc);
    if (!realpath(cx->base_dir, real_base))
        return kn_error(KILN_ERR_IO, "%s: %s: cannot resolve the model's folder '%s': %s",
                        cx->pb.path, label, cx->base_dir, strerror(errno));
    if (!realpath(full, real_full))
        return kn_error(KILN_ERR_IO, "%s: %s: cannot open external data file '%s': %s",
                        cx->pb.path, label, full, strerror(errno));
    size_t nb = strlen(real_base);
    int inside = strcmp(real_base, "/") == 0 ||
                 (strncmp(real_full, real_base, nb) == 0 && real_full[nb] == '/');
    if (!inside)
        return kx_pb_error(&cx->pb, m, NULL,
                           "%s: external data location '%s' resolves to '%s', outside the "
                           "model's folder '%s'",
                           label, loc, real_full, real_base);
    KN_TRY(kn_grow((void **)&cx->ext, &cx->cap_ext, cx->n_ext + 1, sizeof *cx->ext));
    kx_map_blob *mb = kn_calloc(1, sizeof *mb);
    char *dup = kn_strdup(loc);
    if (!mb || !dup) {
        kn_free(mb);
        kn_free(dup);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln_status st = kn_file_map(real_full, &mb->map);
    if (st != KILN_OK) {
        kn_free(mb);
        kn_free(dup);
        return kn_error_wrap(st, "%s: %s", cx->pb.path, label);
    }
    mb->blob.refs = 1;
    mb->blob.release = kx_map_blob_release;
    cx->ext[cx->n_ext].location = dup;
    cx->ext[cx->n_ext].mb = mb;
    cx->n_ext++;
    *out = mb;
    return KILN_OK;
}

static kiln_status load_external(kx_onnx *cx, kx_pb_msg *m, kn_tdata *v, const char *label) {
    kx_pb *pb = &cx->pb;
    kx_str loc = {"", 0}, off_s = {"", 0}, len_s = {"", 0};
    int has_loc = 0, has_off = 0, has_len = 0;
    kx_pb_msg e;
    kx_pb_field f, g;
    kx_pb_rewind(m, m->pos);
    for (;;) {
        KN_TRY(kx_pb_next(pb, m, &f));
        if (!f.num)
            break;
        if (f.num != F_EXTERNAL)
            continue;
        size_t saved;
        KN_TRY(kx_pb_enter(pb, m, &f, &kx_d_entry, &e, &saved));
        kx_str key = {"", 0}, val = {"", 0}; /* a missing value reads as "" */
        kiln_status st = KILN_OK;
        for (;;) {
            if ((st = kx_pb_next(pb, &e, &g)) != KILN_OK || !g.num)
                break;
            if (g.num == 1)
                st = kx_pb_bytes(pb, &e, &g, &key);
            else if (g.num == 2)
                st = kx_pb_bytes(pb, &e, &g, &val);
            if (st != KILN_OK)
                break;
        }
        kx_pb_leave(pb, saved);
        KN_TRY(st);
        if (key.n == 8 && memcmp(key.p, "location", 8) == 0)
            loc = val, has_loc = 1;
        else if (key.n == 6 && memcmp(key.p, "offset", 6) == 0)
            off_s = val, has_off = 1;
        else if (key.n == 6 && memcmp(key.p, "length", 6) == 0)
            len_s = val, has_len = 1;
    }
    if (!has_loc)
        return kx_pb_error(pb, m, NULL, "%s: data_location is EXTERNAL but external_data has no "
                                        "'location' entry", label);
    if (loc.n >= PATH_MAX || (loc.n && memchr(loc.p, 0, loc.n)))
        return kx_pb_error(pb, m, NULL, "%s: external data location is not a valid path", label);
    char path[PATH_MAX];
    if (loc.n)
        memcpy(path, loc.p, loc.n);
    path[loc.n] = 0;
    uint64_t off = 0, len = 0;
    if (has_off && parse_u64(off_s, &off))
        return kx_pb_error(pb, m, NULL, "%s: external data offset '%.*s' is not a number", label,
                           (int)(off_s.n > 40 ? 40 : off_s.n), off_s.p);
    if (has_len && parse_u64(len_s, &len))
        return kx_pb_error(pb, m, NULL, "%s: external data length '%.*s' is not a number", label,
                           (int)(len_s.n > 40 ? 40 : len_s.n), len_s.p);
    kx_map_blob *mb = NULL;
    KN_TRY(open_external(cx, m, label, path, &mb));
    size_t fsize = mb->map.size;
    if (off > fsize)
        return kx_pb_error(pb, m, NULL,
                           "%s: external data offset %llu is past the end of '%s' (size %zu)",
                           label, (unsigned long long)off, path, fsize);
    if (!has_len)
        len = fsize - off;
    if (len > fsize - off)
        return kx_pb_error(pb, m, NULL,
                           "%s: external data at offset %llu, length %llu runs past the end of "
                           "'%s' (size %zu)",
                           label, (unsigned long long)off, (unsigned long long)len, path, fsize);
    if (len != v->nbytes)
        return kx_pb_error(pb, m, NULL,
                           "%s: external data holds %llu bytes, but its %s shape needs %zu",
                           label, (unsigned long long)len, kiln_dtype_name(v->dtype), v->nbytes);
    if (v->nbytes) {
        v->data = (void *)(mb->map.data + off);
        v->blob = &mb->blob;
        kn_blob_ref(v->blob);
    }
    return KILN_OK;
}

/* ---- the decoder ---- */

/* Fill an allocated v from the typed field `which`. */
static void fill_typed(kx_onnx *cx, kx_pb_msg *m, uint32_t which, kn_tdata *v) {
    int complex = v->dtype == KILN_DTYPE_COMPLEX64 || v->dtype == KILN_DTYPE_COMPLEX128;
    size_t width = kiln_dtype_size(v->dtype) / (complex ? 2 : 1);
    value_sink s = {v->data, width, v->nbytes / width};
    uint32_t wt = typed_wire(which);
    size_t k = 0;
    kx_pb_field f;
    kx_pb_rewind(m, m->pos);
    while (kx_pb_next(&cx->pb, m, &f) == KILN_OK && f.num) {
        if (f.num != which)
            continue;
        size_t before = k;
        kx_pb_rep_count(&cx->pb, m, &f, wt, &k); /* checked by scan_fields */
        if (f.wt == KX_WT_LEN && wt != KX_WT_VARINT && (wt == KX_WT_I32 ? 4 : 8) == width) {
            size_t n = k - before;
            if (k <= s.cap)
                memcpy(s.dst + before * width, cx->pb.buf + f.off, n * width);
        } else {
            kx_pb_rep_each(&cx->pb, &f, wt, before, put_value, &s);
        }
    }
}

/* A string tensor (read by kx_onnx_read_tensor only: a network keeps no
 * string constants): one block holding numel `const char *` pointers, then
 * the NUL-terminated strings they point to. */
static kiln_status string_tensor(kx_onnx *cx, kx_pb_msg *m, size_t start, const tensor_fields *tf,
                                 const char *label, kn_tdata *out) {
    kx_pb *pb = &cx->pb;
    size_t numel = 1;
    for (size_t i = 0; i < tf->n_dims; i++)
        if (tf->dims[i] < 0 || kn_mul_overflow(numel, (size_t)tf->dims[i], &numel))
            return kx_pb_error(pb, m, NULL, "%s: bad dimension", label);
    if (tf->has_raw || tf->location != 0 || tf->count[F_STRING] != numel)
        return kx_pb_error(pb, m, NULL, "%s: a string tensor of %zu elements has %zu strings",
                           label, numel, tf->count[F_STRING]);
    size_t total = numel * sizeof(char *);
    kx_pb_field f;
    m->pos = start;
    for (;;) { /* the strings' lengths */
        KN_TRY(kx_pb_next(pb, m, &f));
        if (!f.num)
            break;
        if (f.num == F_STRING) {
            kx_str sv;
            KN_TRY(kx_pb_bytes(pb, m, &f, &sv));
            total += sv.n + 1;
        }
    }
    char *block = kn_aligned_alloc(total ? total : 1);
    if (!block)
        return KILN_ERR_OUT_OF_MEMORY;
    char **ptr = (char **)block, *at = block + numel * sizeof(char *);
    size_t k = 0;
    m->pos = start;
    for (;;) {
        kiln_status st = kx_pb_next(pb, m, &f);
        if (st != KILN_OK) {
            kn_aligned_free(block);
            return st;
        }
        if (!f.num)
            break;
        if (f.num == F_STRING) {
            kx_str sv;
            if ((st = kx_pb_bytes(pb, m, &f, &sv)) != KILN_OK) {
                kn_aligned_free(block);
                return st;
            }
            ptr[k++] = at;
            if (sv.n)
                memcpy(at, sv.p, sv.n);
            at[sv.n] = 0;
            at += sv.n + 1;
        }
    }
    memset(out, 0, sizeof *out);
    out->dtype = KILN_DTYPE_STRING;
    out->rank = (int)tf->n_dims;
    memcpy(out->dims, tf->dims, tf->n_dims * sizeof tf->dims[0]);
    out->data = block;
    out->nbytes = numel * sizeof(char *);
    return KILN_OK;
}

kiln_status kx_onnx_tensor(kx_onnx *cx, kx_pb_msg *m, kn_tdata *out, kx_str *name) {
    kx_pb *pb = &cx->pb;
    size_t start = m->pos;
    tensor_fields tf;
    KN_TRY(scan_fields(cx, m, &tf));
    m->pos = start;
    char label[256];
    tensor_label(&tf, label, sizeof label);
    if (tf.has_segment)
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                          "%s: segmented tensors (TensorProto.segment) are not supported", label);
    if (tf.dtype == KILN_DTYPE_STRING && (cx->flags & KX_ONNX_STRINGS) &&
        tf.n_dims <= KILN_MAX_DIMS) {
        KN_TRY(string_tensor(cx, m, start, &tf, label, out));
        m->pos = start;
        if (name)
            *name = tf.name;
        return KILN_OK;
    }
    if (tf.dtype == KILN_DTYPE_STRING || tf.count[F_STRING])
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED,
                          "%s: string tensors are not supported", label);
    if (tf.dtype == KILN_DTYPE_UNDEFINED)
        return kx_pb_error(pb, m, NULL, "%s: data_type is missing or UNDEFINED", label);
    if (tf.dtype < 0 || tf.dtype > KILN_DTYPE_FLOAT8E5M2FNUZ ||
        kiln_dtype_size((kiln_dtype)tf.dtype) == 0)
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED, "%s: data type %lld is not supported",
                          label, (long long)tf.dtype);
    kiln_dtype dt = (kiln_dtype)tf.dtype;
    if (tf.n_dims > KILN_MAX_DIMS)
        return kx_pb_fail(pb, m, NULL, KILN_ERR_UNSUPPORTED, "%s: rank %zu is above kiln's limit %d",
                          label, tf.n_dims, KILN_MAX_DIMS);
    size_t numel = 1, nbytes;
    for (size_t i = 0; i < tf.n_dims; i++) {
        if (tf.dims[i] < 0)
            return kx_pb_error(pb, m, NULL, "%s: dimension %zu is negative (%lld)", label, i,
                               (long long)tf.dims[i]);
        if (kn_mul_overflow(numel, (size_t)tf.dims[i], &numel))
            return kx_pb_error(pb, m, NULL, "%s: element count overflows", label);
    }
    if (kn_mul_overflow(numel, kiln_dtype_size(dt), &nbytes))
        return kx_pb_error(pb, m, NULL, "%s: byte size overflows", label);
    char shape[160];
    kn_shape_str((int)tf.n_dims, tf.dims, shape, sizeof shape);

    uint32_t which = typed_field(dt);
    size_t want = numel * (dt == KILN_DTYPE_COMPLEX64 || dt == KILN_DTYPE_COMPLEX128 ? 2 : 1);
    static const uint32_t typed[] = {F_FLOAT, F_INT32, F_INT64, F_DOUBLE, F_UINT64};
    for (size_t i = 0; i < KN_ARRAY_LEN(typed); i++)
        if (tf.count[typed[i]] && (typed[i] != which || tf.has_raw || tf.location == 1))
            return kx_pb_error(pb, m, NULL,
                               "%s: %s holds %zu values, but a %s tensor keeps its values in %s",
                               label, typed_name(typed[i]), tf.count[typed[i]],
                               kiln_dtype_name(dt),
                               tf.has_raw || tf.location == 1 ? "raw_data or external data only"
                                                              : typed_name(which));

    kn_tdata v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = (int)tf.n_dims;
    memcpy(v.dims, tf.dims, sizeof v.dims);
    v.nbytes = nbytes;
    if (tf.location == 1) {
        KN_TRY(load_external(cx, m, &v, label));
        m->pos = start;
        if (!v.blob) { /* empty tensor */
            KN_TRY(kn_tdata_alloc(&v, dt, (int)tf.n_dims, tf.dims));
        }
    } else if (tf.location != 0) {
        return kx_pb_error(pb, m, NULL, "%s: data_location %lld is not DEFAULT (0) or EXTERNAL (1)",
                           label, (long long)tf.location);
    } else if (tf.has_raw) {
        if (tf.raw.n != nbytes)
            return kx_pb_error(pb, m, NULL,
                               "%s: raw_data holds %zu bytes, but its %s [%s] shape needs %zu",
                               label, tf.raw.n, kiln_dtype_name(dt), shape, nbytes);
        if (cx->blob && nbytes) {
            v.data = (void *)tf.raw.p;
            v.blob = cx->blob;
            kn_blob_ref(v.blob);
        } else {
            KN_TRY(kn_tdata_alloc(&v, dt, (int)tf.n_dims, tf.dims));
            if (nbytes)
                memcpy(v.data, tf.raw.p, nbytes);
        }
    } else {
        if (tf.count[which] != want && !(tf.count[which] == 0 && numel == 0))
            return kx_pb_error(pb, m, NULL, "%s: %s holds %zu values, but its %s [%s] shape needs %zu",
                               label, typed_name(which), tf.count[which], kiln_dtype_name(dt),
                               shape, want);
        KN_TRY(kn_tdata_alloc(&v, dt, (int)tf.n_dims, tf.dims));
        fill_typed(cx, m, which, &v);
        m->pos = start;
    }
    *out = v;
    if (name)
        *name = tf.name;
    return KILN_OK;
}

kiln_status kx_onnx_read_tensor(const void *data, size_t size, kn_tdata *out, char *name,
                                size_t cap) {
    if (!out || (!data && size))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kx_onnx_read_tensor: NULL argument");
    kx_onnx cx;
    memset(&cx, 0, sizeof cx);
    cx.flags = KX_ONNX_STRINGS;
    kx_pb_msg m;
    kx_pb_init(&cx.pb, data, size, &kx_d_tensor, &m);
    kx_str nm = {0};
    kn_tdata v;
    kiln_status st = kx_onnx_tensor(&cx, &m, &v, &nm);
    kx_onnx_ext_close(&cx);
    if (st != KILN_OK)
        return st;
    *out = v;
    if (name && cap) {
        size_t n = nm.n < cap - 1 ? nm.n : cap - 1;
        if (n)
            memcpy(name, nm.p, n);
        name[n] = 0;
    }
    return KILN_OK;
}
