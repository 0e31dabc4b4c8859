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
    /* element (b, s, h, d) of X lies at x_off + b * x_sb + s * x_ss + h * x_sh + d,
     * of Y at b * y_sb + s * y_ss + h * y_sh + d (the layouts above, or a view
     * the builder set: see kn_rotary_geometry) */
    int64_t x_off, x_sb, x_ss, x_sh, y_sb, y_ss, y_sh;
} kn_rotary;

/* The node's geometry for inputs of these ranks and dims (indexed by the
 * node's input slots, n_in of them; rank -1 for an absent input).
 * Errors name the node. kiln's own attributes, which the builder sets on a
 * 3-D X with num_heads H so that the op reads a packed projection in place
 * (pass_views.c): kiln_row_heads (each row of X holds that many heads of
 * size D = width / kiln_row_heads, default H) and kiln_head_offset (the op
 * rotates heads [offset, offset + H) of them, default 0): Y is then
 * [B, S, H * D]; kiln_heads_first_out 1 writes Y as [B, H, S, D] instead. */
KN_HIDDEN kiln_status kn_rotary_geometry(const kn_node *n, int n_in, const int *rank,
                                         const int64_t (*dims)[KILN_MAX_DIMS], kn_rotary *g);

/* Element offset of (b, s, h, d) in X. */
static inline int64_t kn_rotary_at(const kn_rotary *g, int64_t b, int64_t s, int64_t h,
                                   int64_t d) {
    return g->x_off + b * g->x_sb + s * g->x_ss + h * g->x_sh + d;
}
/* Element offset of (b, s, h, d) in Y. */
static inline int64_t kn_rotary_y_at(const kn_rotary *g, int64_t b, int64_t s, int64_t h,
                                     int64_t d) {
    return b * g->y_sb + s * g->y_ss + h * g->y_sh + d;
}
#endif
