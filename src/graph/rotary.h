/* rotary.h - rotary position embeddings: the geometry that shape inference
 * and every backend's RotaryEmbedding kernel share (ONNX opset 23 and
 * com.microsoft spell the op with different input orders). */
#ifndef KILN_ROTARY_H
#define KILN_ROTARY_H

#include "graph.h"

#define KN_MS_DOMAIN "com.microsoft"

/* Positions: none (the caches are per token [B, S, R/2]), one id per token
 * ([B, S] ids into [P, R/2] caches), or one offset (com.microsoft's [1]
 * position_ids: token s is at offset + s). */
enum { KN_ROT_POS_NONE = 0, KN_ROT_POS_IDS = 1, KN_ROT_POS_OFFSET = 2 };

typedef struct kn_rotary {
    int x, cos, sin, pos;          /* input slots (pos -1: absent) */
    int64_t batch, seq, heads, head;
    int64_t rot;                   /* rotated dims per head (even, <= head) */
    int64_t cache_rows;            /* P, or S without positions */
    int64_t cache_batch;           /* without positions: 1 (shared) or B */
    int64_t cache_stride;          /* last dim of the caches (>= rot / 2) */
    int pos_mode;
    bool interleaved;              /* pairs (2i, 2i+1) instead of halves */
    bool heads_first;              /* X is [B, H, S, D]; else [B, S, H * D] */
} kn_rotary;

/* The node's geometry for inputs of these ranks and dims (indexed by the
 * node's input slots, n_in of them; rank -1 for an absent input).
 * Errors name the node. */
KN_HIDDEN kiln_status kn_rotary_geometry(const kn_node *n, int n_in, const int *rank,
                                         const int64_t (*dims)[KILN_MAX_DIMS], kn_rotary *g);

/* Element offset of (b, s, h, d) in X and Y. */
static inline int64_t kn_rotary_at(const kn_rotary *g, int64_t b, int64_t s, int64_t h,
                                   int64_t d) {
    return g->heads_first ? ((b * g->heads + h) * g->seq + s) * g->head + d
                          : ((b * g->seq + s) * g->heads + h) * g->head + d;
}
#endif
