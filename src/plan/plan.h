/* plan.h - writing and reading kiln plan files. The byte layout is described
 * in plan.c, where it is read and written, and in docs/plan-format.md.
 * A plan holds the optimized network (tensors, constants, nodes with their
 * attributes and chosen tactics), the I/O list, the optimization profiles, a
 * memory report and the identity of the target it was built for. */
#ifndef KILN_PLAN_H
#define KILN_PLAN_H

#include "graph/graph.h"
#include "kiln/kiln_runtime.h"

#define KP_FORMAT_VERSION 1u
/* Bytes of the fixed header; kp_read_info needs this many. */
#define KP_HEADER_BYTES 256u

/* min/opt/max shape of each graph input (in net->inputs order). */
typedef struct kp_profile {
    int n_inputs;
    int *rank;                       /* per input */
    int64_t (*min)[KILN_MAX_DIMS];
    int64_t (*opt)[KILN_MAX_DIMS];
    int64_t (*max)[KILN_MAX_DIMS];
} kp_profile;

typedef struct kp_meta {
    char backend[16];                /* "cpu", "cuda" */
    char target[64];                 /* "x86_64", "sm_90" */
    char libraries[128];             /* "dnnl=2.6;openblas=0.3.21" */
    uint32_t flags;                  /* builder flags used */
    int n_profiles;
    kp_profile *profiles;
    uint64_t arena_bytes;            /* activation arena at the largest profile shapes */
    uint64_t activation_sum_bytes;   /* all activations side by side, same shapes */
    uint64_t workspace_bytes;        /* largest per-layer workspace */
    double build_ms;
    /* Plugin records (src/plugin/build.c documents the bytes), written as
     * section KP_SEC_PLUGINS when plugin_section_size > 0. Borrowed by
     * kp_write; kp_read leaves them empty (kp_section finds them). */
    const uint8_t *plugin_section;
    size_t plugin_section_size;
} kp_meta;

/* Section id of the plugin records (optional; older readers skip it). */
#define KP_SEC_PLUGINS 8u

/* Find section `id` of a plan whose header and section table are sound
 * (kp_read_info's checks plus the table's bounds). *sec = NULL and *sec_size
 * = 0 when the plan has no such section. */
KN_HIDDEN kiln_status kp_section(const void *data, size_t size, uint32_t id, const uint8_t **sec,
                                 size_t *sec_size);

/* Allocate n_profiles profiles of n_inputs each (zeroed). */
KN_HIDDEN kiln_status kp_meta_alloc_profiles(kp_meta *m, int n_profiles, int n_inputs);
KN_HIDDEN void kp_meta_free(kp_meta *m);

/* Serialize. *out is kn_malloc'd (free with kn_free / kiln_free). */
KN_HIDDEN kiln_status kp_write(const kn_net *net, const kp_meta *meta, void **out, size_t *size);

/* Parse and check a whole plan: magic, format version, sizes, section table,
 * checksum, every index and string bound. Constants are copied into aligned
 * memory, or, when owner is not NULL and the data is 64-byte aligned in
 * memory, borrowed from it (the network takes a reference on owner).
 * Version and target are checked by the caller (runtime) so that it can say
 * which one differs. On failure nothing is allocated and the message names
 * the section and byte offset. */
KN_HIDDEN kiln_status kp_read(const void *data, size_t size, kn_blob *owner, kn_net **net,
                              kp_meta *meta);

/* Header only: needs the first 256 bytes (or more). Checks the magic and the
 * header hash and fills info for ANY format version, so that a tool can say
 * which version a plan has even when this kiln cannot load it; kp_read is the
 * one that refuses other versions (KILN_ERR_VERSION). */
KN_HIDDEN kiln_status kp_read_info(const void *data, size_t size, kiln_plan_info *info);

/* Recompute, in place, the header hash and the whole-file checksum of a plan
 * of `size` bytes (at least KP_HEADER_BYTES + 8; smaller buffers are left
 * alone). For fuzzers and tests that forge plans so that the checks behind
 * the checksum get exercised; the reader never calls it. */
KN_HIDDEN void kp_reseal(void *data, size_t size);

#endif
