/* seq.h - sequence and optional values: a reference-counted list that is
 * never changed after it is made, reached through an 8-byte handle tensor
 * of an internal dtype (KN_DTYPE_SEQUENCE / KN_DTYPE_OPTIONAL | element
 * type, core.h), so that the planner, Identity, If and Loop move it like
 * any tensor (docs/decisions.md, issue 32). CPU only: the buffers are host
 * memory. */
#ifndef KILN_SEQ_H
#define KILN_SEQ_H

#include <string.h>

#include "graph/graph.h"

/* One element tensor, shared by reference between lists. */
typedef struct kn_selem {
    int refs;
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    size_t nbytes;
    void *data; /* kn_aligned_alloc, nbytes (at least 1) */
} kn_selem;

enum { KN_SEQ_KIND_SEQUENCE = 1, KN_SEQ_KIND_OPTIONAL = 2 };

/* A sequence (n items) or an optional (none, one item, or inner: a
 * sequence). elem: the element dtype (for an optional of a sequence, the
 * sequence's own element dtype). serial: unique per list made, so a context
 * can tell a new list from an old one at a reused address. */
typedef struct kn_seq {
    int refs;
    int kind;
    kiln_dtype elem;
    bool none;
    uint64_t serial;
    int n;
    kn_selem **items;
    struct kn_seq *inner;
} kn_seq;

/* Handle dtypes: element type and kind of the value a dtype code names. */
static inline kiln_dtype kn_handle_elem(kiln_dtype t) { return (kiln_dtype)((int)t & 0xff); }
static inline bool kn_handle_is_seq(kiln_dtype t) { return ((int)t & 0x300) == KN_DTYPE_SEQUENCE; }
static inline bool kn_handle_is_opt(kiln_dtype t) { return ((int)t & KN_DTYPE_OPTIONAL) != 0; }
static inline kiln_dtype kn_seq_dtype(kiln_dtype elem) {
    return (kiln_dtype)(KN_DTYPE_SEQUENCE | (int)elem);
}

/* A new list holding nothing (refs 1), n item slots zeroed. */
KN_HIDDEN kiln_status kn_seq_new(int kind, kiln_dtype elem, int n, kn_seq **out);
KN_HIDDEN void kn_seq_ref(kn_seq *s);
KN_HIDDEN void kn_seq_unref(kn_seq *s);
/* A new element: a copy of data (nbytes of dtype and shape). */
KN_HIDDEN kiln_status kn_selem_new(kiln_dtype dtype, int rank, const int64_t *dims,
                                   const void *data, kn_selem **out);
KN_HIDDEN void kn_selem_ref(kn_selem *e);
KN_HIDDEN void kn_selem_unref(kn_selem *e);
/* The dtype code of a list (the handle's dtype). */
KN_HIDDEN kiln_dtype kn_seq_code(const kn_seq *s);
/* Type and shape facts of a list into ti (dtype, rank 0 and the seq fields). */
KN_HIDDEN void kn_seq_tinfo(const kn_seq *s, kn_tinfo *ti);

/* The list a handle tensor's bytes point to (NULL when none). */
static inline kn_seq *kn_handle_get(const void *data) {
    kn_seq *s = NULL;
    if (data)
        memcpy(&s, data, sizeof s);
    return s;
}
static inline void kn_handle_put(void *data, kn_seq *s) { memcpy(data, &s, sizeof s); }

/* Fold element shape e into a bound (elementwise largest; a rank that
 * differs makes the bound unknown). first: the bound is empty. */
KN_HIDDEN void kn_seq_bound_add(kn_tinfo *ti, int rank, const int64_t *dims, bool first);

/* Fails naming the node when an op that does not take sequence or optional
 * values has one as input or output (after its inference). */
KN_HIDDEN kiln_status kn_check_handles(const kn_infer *c);

#endif
