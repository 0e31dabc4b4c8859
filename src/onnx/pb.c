/* pb.c - the protobuf wire-format reader behind the ONNX importer.
 *
 * Encoding, as read here: a message is a run of fields; each field starts
 * with a varint tag (field_number << 3 | wire_type) followed by
 *   wire type 0 (VARINT): a base-128 varint, low 7 bits first, at most 10 bytes;
 *   wire type 1 (I64):    8 bytes little endian (fixed64, double);
 *   wire type 2 (LEN):    a varint byte count, then that many bytes (strings,
 *                         bytes, sub-messages, packed repeated scalars);
 *   wire type 5 (I32):    4 bytes little endian (fixed32, float).
 * Nothing is copied: LEN payloads are reported as offsets into the buffer. */
#include <stdio.h>
#include <string.h>

#include "pb.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ONNX reader assumes a little-endian host"
#endif

void kx_pb_init(kx_pb *pb, const void *data, size_t size, const kx_pb_mdesc *desc,
                kx_pb_msg *root) {
    memset(pb, 0, sizeof *pb);
    pb->buf = data;
    pb->size = data ? size : 0;
    pb->path_len = (size_t)snprintf(pb->path, sizeof pb->path, "%s", desc->name);
    memset(root, 0, sizeof *root);
    root->pos = 0;
    root->end = pb->size;
    root->desc = desc;
}

void kx_pb_rewind(kx_pb_msg *m, size_t start) {
    m->pos = start;
    memset(m->count, 0, sizeof m->count);
}

/* "name", "name[3]" or "field 17" for error messages. */
static void field_label(const kx_pb_msg *m, const kx_pb_field *f, char *buf, size_t cap) {
    const kx_pb_mdesc *d = m ? m->desc : NULL;
    if (d && f->num < d->n_fields && d->fields[f->num].name) {
        if (d->fields[f->num].repeated)
            snprintf(buf, cap, "%s[%u]", d->fields[f->num].name, f->index);
        else
            snprintf(buf, cap, "%s", d->fields[f->num].name);
    } else {
        snprintf(buf, cap, "field %u", f->num);
    }
}

static kiln_status vfail(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                         kiln_status st, const char *fmt, va_list ap) {
    char msg[1024], label[96];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (f && f->num) {
        field_label(m, f, label, sizeof label);
        return kn_error(st, "%s.%s: %s", pb->path, label, msg);
    }
    return kn_error(st, "%s: %s", pb->path, msg);
}

kiln_status kx_pb_error(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                        const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kiln_status st = vfail(pb, m, f, KILN_ERR_PARSE, fmt, ap);
    va_end(ap);
    return st;
}

kiln_status kx_pb_fail(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                       kiln_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st = vfail(pb, m, f, st, fmt, ap);
    va_end(ap);
    return st;
}

/* Where a read that overruns message m stops: the buffer's end or m's. */
static kiln_status overrun(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                           const char *what, size_t at) {
    if (m->end >= pb->size)
        return kx_pb_error(pb, m, f, "%s at offset %zu runs past the end of the buffer (size %zu)",
                           what, at, pb->size);
    return kx_pb_error(pb, m, f,
                       "%s at offset %zu runs past the end of its message (which ends at offset "
                       "%zu)",
                       what, at, m->end);
}

/* Decode a varint at *pos (< end). */
static int varint(const uint8_t *b, size_t *pos, size_t end, uint64_t *out) {
    uint64_t v = 0;
    size_t p = *pos;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return -1; /* truncated */
        uint8_t c = b[p++];
        if (shift == 63 && c > 1)
            return -2; /* more than 64 bits */
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *pos = p;
            *out = v;
            return 0;
        }
    }
    return -2;
}

static kiln_status read_varint(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                               const char *what, size_t *pos, uint64_t *out) {
    size_t at = *pos;
    int r = varint(pb->buf, pos, m->end, out);
    if (r == -1) {
        char w[64];
        snprintf(w, sizeof w, "%s varint", what);
        return overrun(pb, m, f, w, at);
    }
    if (r == -2)
        return kx_pb_error(pb, m, f, "%s varint at offset %zu is longer than 10 bytes", what, at);
    return KILN_OK;
}

kiln_status kx_pb_next(kx_pb *pb, kx_pb_msg *m, kx_pb_field *f) {
    memset(f, 0, sizeof *f);
    if (m->pos >= m->end)
        return KILN_OK;
    size_t at = m->pos, pos = m->pos;
    uint64_t tag;
    KN_TRY(read_varint(pb, m, NULL, "field tag", &pos, &tag));
    uint64_t num = tag >> 3;
    if (num == 0 || num > 0x1fffffff)
        return kx_pb_error(pb, m, NULL, "field tag at offset %zu has invalid field number %llu",
                           at, (unsigned long long)num);
    f->num = (uint32_t)num;
    f->wt = (uint32_t)(tag & 7);
    f->tag_off = at;
    f->index = f->num < KX_PB_MAX_FIELD ? m->count[f->num] : 0;
    switch (f->wt) {
    case KX_WT_VARINT:
        KN_TRY(read_varint(pb, m, f, "value", &pos, &f->v));
        break;
    case KX_WT_I64:
    case KX_WT_I32: {
        size_t w = f->wt == KX_WT_I64 ? 8 : 4;
        if (m->end - pos < w)
            return overrun(pb, m, f, w == 8 ? "8-byte value" : "4-byte value", pos);
        uint64_t v = 0;
        memcpy(&v, pb->buf + pos, w);
        f->v = v;
        pos += w;
        break;
    }
    case KX_WT_LEN: {
        size_t lat = pos;
        uint64_t len;
        KN_TRY(read_varint(pb, m, f, "length", &pos, &len));
        if (len > m->end - pos) {
            char w[64];
            snprintf(w, sizeof w, "length %llu", (unsigned long long)len);
            return overrun(pb, m, f, w, lat);
        }
        f->off = pos;
        f->len = (size_t)len;
        pos += (size_t)len;
        break;
    }
    case 3:
    case 4:
        return kx_pb_error(pb, m, f, "wire type %u (group) at offset %zu is not supported", f->wt,
                           at);
    default:
        return kx_pb_error(pb, m, f, "invalid wire type %u at offset %zu", f->wt, at);
    }
    if (f->num < KX_PB_MAX_FIELD)
        m->count[f->num]++;
    m->pos = pos;
    return KILN_OK;
}

static const char *wt_name(uint32_t wt) {
    switch (wt) {
    case KX_WT_VARINT: return "varint";
    case KX_WT_I64: return "fixed64";
    case KX_WT_LEN: return "length-delimited";
    case KX_WT_I32: return "fixed32";
    }
    return "?";
}

kiln_status kx_pb_want(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f, uint32_t wt) {
    if (f->wt == wt)
        return KILN_OK;
    return kx_pb_error(pb, m, f, "wire type %u (%s) at offset %zu where %s (%u) was expected",
                       f->wt, wt_name(f->wt), f->tag_off, wt_name(wt), wt);
}

kiln_status kx_pb_enter(kx_pb *pb, const kx_pb_msg *parent, const kx_pb_field *f,
                        const kx_pb_mdesc *desc, kx_pb_msg *child, size_t *saved) {
    KN_TRY(kx_pb_want(pb, parent, f, KX_WT_LEN));
    if (pb->depth >= KX_PB_MAX_DEPTH)
        return kx_pb_error(pb, parent, f, "messages nest deeper than %d levels (at offset %zu)",
                           KX_PB_MAX_DEPTH, f->tag_off);
    char label[96];
    field_label(parent, f, label, sizeof label);
    *saved = pb->path_len;
    size_t room = sizeof pb->path - pb->path_len;
    int n = snprintf(pb->path + pb->path_len, room, ".%s", label);
    if (n > 0)
        pb->path_len += (size_t)n < room ? (size_t)n : room - 1;
    pb->depth++;
    memset(child, 0, sizeof *child);
    child->pos = f->off;
    child->end = f->off + f->len;
    child->desc = desc;
    return KILN_OK;
}

void kx_pb_leave(kx_pb *pb, size_t saved) {
    pb->path_len = saved;
    pb->path[saved] = 0;
    pb->depth--;
}

kiln_status kx_pb_bytes(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f, kx_str *out) {
    KN_TRY(kx_pb_want(pb, m, f, KX_WT_LEN));
    out->p = (const char *)pb->buf + f->off;
    out->n = f->len;
    return KILN_OK;
}

kiln_status kx_pb_int(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f, int64_t *out) {
    KN_TRY(kx_pb_want(pb, m, f, KX_WT_VARINT));
    *out = (int64_t)f->v;
    return KILN_OK;
}

kiln_status kx_pb_rep_count(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                            uint32_t elem_wt, size_t *count) {
    if (f->wt == elem_wt) {
        (*count)++;
        return KILN_OK;
    }
    if (f->wt != KX_WT_LEN)
        return kx_pb_want(pb, m, f, elem_wt);
    if (elem_wt == KX_WT_VARINT) {
        size_t pos = f->off, end = f->off + f->len, n = 0;
        while (pos < end) {
            uint64_t v;
            size_t at = pos;
            int r = varint(pb->buf, &pos, end, &v);
            if (r != 0)
                return kx_pb_error(pb, m, f,
                                   "packed varint at offset %zu is %s (packed run %zu bytes at "
                                   "offset %zu)",
                                   at, r == -1 ? "cut off" : "longer than 10 bytes", f->len,
                                   f->off);
            n++;
        }
        *count += n;
        return KILN_OK;
    }
    size_t w = elem_wt == KX_WT_I64 ? 8 : 4;
    if (f->len % w)
        return kx_pb_error(pb, m, f,
                           "packed run of %zu-byte values at offset %zu has %zu bytes, not a "
                           "multiple of %zu",
                           w, f->off, f->len, w);
    *count += f->len / w;
    return KILN_OK;
}

void kx_pb_rep_each(const kx_pb *pb, const kx_pb_field *f, uint32_t elem_wt, size_t first,
                    kx_pb_rep_fn fn, void *user) {
    if (f->wt == elem_wt) {
        fn(user, first, f->v);
        return;
    }
    size_t pos = f->off, end = f->off + f->len, k = first;
    if (elem_wt == KX_WT_VARINT) {
        uint64_t v;
        while (pos < end && varint(pb->buf, &pos, end, &v) == 0)
            fn(user, k++, v);
        return;
    }
    size_t w = elem_wt == KX_WT_I64 ? 8 : 4;
    for (; pos + w <= end; pos += w) {
        uint64_t v = 0;
        memcpy(&v, pb->buf + pos, w);
        fn(user, k++, v);
    }
}
