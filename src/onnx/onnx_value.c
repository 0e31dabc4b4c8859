/* onnx_value.c - SequenceProto and OptionalProto values of ONNX's test data
 * (the conformance runner's sequence and optional inputs and outputs). */
#include "onnx.h"
#include "onnx_internal.h"

#include <string.h>

void kx_onnx_value_free(kx_onnx_value *v) {
    if (!v)
        return;
    for (int i = 0; i < v->n; i++)
        kn_tdata_free(&v->items[i]);
    kn_free(v->items);
    v->items = NULL;
    v->n = 0;
}

static void copy_name(kx_onnx_value *v, const kx_pb *pb, const kx_pb_field *f) {
    size_t n = f->len < sizeof v->name - 1 ? f->len : sizeof v->name - 1;
    memcpy(v->name, pb->buf + f->off, n);
    v->name[n] = 0;
}

static kiln_status push_tensor(kx_onnx *cx, kx_pb_msg *m, const kx_pb_field *f, kx_onnx_value *v) {
    kx_pb_msg t;
    size_t saved;
    KN_TRY(kx_pb_enter(&cx->pb, m, f, &kx_d_tensor, &t, &saved));
    kn_tdata d;
    kiln_status st = kx_onnx_tensor(cx, &t, &d, NULL);
    kx_pb_leave(&cx->pb, saved);
    KN_TRY(st);
    kn_tdata *items = kn_realloc(v->items, (size_t)(v->n + 1) * sizeof *items);
    if (!items) {
        kn_tdata_free(&d);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "sequence value: out of memory");
    }
    v->items = items;
    v->items[v->n++] = d;
    return KILN_OK;
}

/* The fields of a SequenceProto (seq) or OptionalProto message m. */
static kiln_status read_msg(kx_onnx *cx, kx_pb_msg *m, int seq, kx_onnx_value *v, int depth) {
    kx_pb *pb = &cx->pb;
    for (;;) {
        kx_pb_field f;
        KN_TRY(kx_pb_next(pb, m, &f));
        if (!f.num)
            return KILN_OK;
        switch (f.num) {
        case 1:
            if (f.wt == KX_WT_LEN && depth == 0)
                copy_name(v, pb, &f);
            break;
        case 2: break;
        case 3:
            if (!seq)
                v->is_none = 0;
            KN_TRY(push_tensor(cx, m, &f, v));
            break;
        case 5:
            if (!seq && depth == 0) { /* an optional's sequence */
                kx_pb_msg s;
                size_t saved;
                KN_TRY(kx_pb_enter(pb, m, &f, &kx_d_sequence, &s, &saved));
                v->is_none = 0;
                v->elem_is_seq = 1;
                kiln_status st = read_msg(cx, &s, 1, v, depth + 1);
                kx_pb_leave(pb, saved);
                KN_TRY(st);
                break;
            }
            return kx_pb_fail(pb, m, &f, KILN_ERR_UNSUPPORTED,
                              "kiln holds sequences of tensors and optionals of a tensor or "
                              "sequence only");
        case 4: case 6: case 7:
            return kx_pb_fail(pb, m, &f, KILN_ERR_UNSUPPORTED,
                              "kiln holds sequences of tensors and optionals of a tensor or "
                              "sequence only");
        default: break;
        }
    }
}

kiln_status kx_onnx_read_value(const void *data, size_t size, int kind, kx_onnx_value *out) {
    if (!out || (!data && size) || (kind != KX_VALUE_SEQUENCE && kind != KX_VALUE_OPTIONAL))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kx_onnx_read_value: bad argument");
    kx_onnx_value v;
    memset(&v, 0, sizeof v);
    v.kind = kind;
    v.is_none = kind == KX_VALUE_OPTIONAL;
    kx_onnx cx;
    memset(&cx, 0, sizeof cx);
    cx.flags = KX_ONNX_STRINGS;
    kx_pb_msg m;
    kx_pb_init(&cx.pb, data, size, kind == KX_VALUE_SEQUENCE ? &kx_d_sequence : &kx_d_optional,
               &m);
    kiln_status st = read_msg(&cx, &m, kind == KX_VALUE_SEQUENCE, &v, 0);
    kx_onnx_ext_close(&cx);
    if (st != KILN_OK) {
        kx_onnx_value_free(&v);
        return st;
    }
    *out = v;
    return KILN_OK;
}
