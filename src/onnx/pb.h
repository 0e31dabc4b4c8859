/* pb.h - a zero-copy reader of the protobuf wire format for the ONNX reader.
 * Messages are byte ranges of one buffer; strings and bytes are slices of it.
 * Every length is checked against the enclosing message, nesting is limited,
 * and failures name the field path and byte offset. */
#ifndef KILN_ONNX_PB_H
#define KILN_ONNX_PB_H

#include "core/core.h"

/* Wire types (protobuf encoding guide). Groups (3, 4) are refused: ONNX never
 * uses them and skipping one would need recursion. */
enum { KX_WT_VARINT = 0, KX_WT_I64 = 1, KX_WT_LEN = 2, KX_WT_I32 = 5 };

/* Deepest message nesting accepted (a subgraph costs three levels). */
#define KX_PB_MAX_DEPTH 96
/* Field numbers below this are counted for "name[i]" in messages. */
#define KX_PB_MAX_FIELD 32

typedef struct kx_str {
    const char *p;
    size_t n;
} kx_str;

typedef struct kx_pb_fdesc {
    const char *name;   /* NULL: not used by kiln (skipped, named "field N") */
    int repeated;
} kx_pb_fdesc;

typedef struct kx_pb_mdesc {
    const char *name;           /* "NodeProto" */
    unsigned n_fields;          /* fields[0..n_fields) indexed by field number */
    const kx_pb_fdesc *fields;
} kx_pb_mdesc;

/* One parse: the whole buffer and the path of the message being read. */
typedef struct kx_pb {
    const uint8_t *buf;
    size_t size;
    int depth;
    size_t path_len;
    char path[768];
} kx_pb;

/* A cursor over one message. */
typedef struct kx_pb_msg {
    size_t pos, end;            /* absolute offsets in kx_pb.buf */
    const kx_pb_mdesc *desc;
    uint32_t count[KX_PB_MAX_FIELD];
} kx_pb_msg;

/* One field as read from the wire. */
typedef struct kx_pb_field {
    uint32_t num;       /* 0 when the message has no more fields */
    uint32_t wt;
    uint64_t v;         /* value of VARINT, I64 and I32 fields */
    size_t off, len;    /* LEN: payload offset (absolute) and length */
    size_t tag_off;     /* offset of the tag */
    uint32_t index;     /* occurrence of this field number in the message */
} kx_pb_field;

/* Start reading the whole buffer as message `desc`; the path becomes its name. */
KN_HIDDEN void kx_pb_init(kx_pb *pb, const void *data, size_t size, const kx_pb_mdesc *desc,
                          kx_pb_msg *root);
/* Restart a cursor at the first field of its message. */
KN_HIDDEN void kx_pb_rewind(kx_pb_msg *m, size_t start);
/* Read the next field. At the end of the message f->num is 0. */
KN_HIDDEN kiln_status kx_pb_next(kx_pb *pb, kx_pb_msg *m, kx_pb_field *f);
/* Descend into the LEN field f as a message of type desc: checks the wire
 * type and depth, appends ".name[i]" to the path. *saved must be handed to
 * kx_pb_leave. */
KN_HIDDEN kiln_status kx_pb_enter(kx_pb *pb, const kx_pb_msg *parent, const kx_pb_field *f,
                                  const kx_pb_mdesc *desc, kx_pb_msg *child, size_t *saved);
KN_HIDDEN void kx_pb_leave(kx_pb *pb, size_t saved);

/* KILN_ERR_PARSE "<path>.<field>[i]: <message>" (field may be NULL: "<path>: "). */
KN_HIDDEN kiln_status kx_pb_error(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                                  const char *fmt, ...) KN_PRINTF(4, 5);
/* Like kx_pb_error with another status (UNSUPPORTED, IO...). */
KN_HIDDEN kiln_status kx_pb_fail(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                                 kiln_status st, const char *fmt, ...) KN_PRINTF(5, 6);

/* Check a field's wire type; fails naming the field and offset. */
KN_HIDDEN kiln_status kx_pb_want(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                                 uint32_t wt);
/* The LEN field's payload as a slice. Checks the wire type. */
KN_HIDDEN kiln_status kx_pb_bytes(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                                  kx_str *out);
/* An integer field (int32/int64/uint64/enum: VARINT). */
KN_HIDDEN kiln_status kx_pb_int(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                                int64_t *out);

/* Repeated scalar fields arrive packed (one LEN field) or unpacked (one field
 * per value); elem_wt is VARINT, I32 or I64. kx_pb_rep_count adds the number
 * of values f carries to *count, checking the packed payload is whole. */
KN_HIDDEN kiln_status kx_pb_rep_count(const kx_pb *pb, const kx_pb_msg *m, const kx_pb_field *f,
                                      uint32_t elem_wt, size_t *count);
/* Visit the values of f (already counted): fn(user, k, raw) for each, raw is
 * the varint or the fixed-width bits. */
typedef void (*kx_pb_rep_fn)(void *user, size_t k, uint64_t raw);
KN_HIDDEN void kx_pb_rep_each(const kx_pb *pb, const kx_pb_field *f, uint32_t elem_wt,
                              size_t first, kx_pb_rep_fn fn, void *user);

static inline float kx_pb_f32(uint64_t raw) {
    uint32_t u = (uint32_t)raw;
    float x;
    __builtin_memcpy(&x, &u, 4);
    return x;
}
static inline double kx_pb_f64(uint64_t raw) {
    double x;
    __builtin_memcpy(&x, &raw, 8);
    return x;
}

#endif
