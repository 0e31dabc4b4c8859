/* k_nms.c - NonMaxSuppression's reference CPU kernel: per batch and class,
 * the boxes above the score threshold by falling score (ties: lower box
 * index first), each kept unless a kept box overlaps it more than the IoU
 * threshold (graph/nms.h), until max_output_boxes_per_class are kept. */
#include <stdlib.h>

#include "graph/nms.h"
#include "k_nn.h"

typedef struct nms_cand {
    float score;
    int64_t idx;
} nms_cand;

/* Falling score, NaN first (as TopK orders, which the CUDA kernel sorts
 * with), equal scores by box index. */
static int nms_order(const void *a, const void *b) {
    const nms_cand *x = a, *y = b;
    bool xn = x->score != x->score, yn = y->score != y->score;
    if (xn != yn)
        return xn ? -1 : 1;
    if (!xn && x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static bool nms_present(const kb_run *r, int i) {
    return i < r->n_in && r->in[i].data && r->in[i].dtype != KILN_DTYPE_UNDEFINED &&
           kb_numel(&r->in[i]) > 0;
}

kiln_status kb_nn_nms_run(const kb_run *r) {
    const kb_tensor *boxes = &r->in[0], *scores = &r->in[1];
    kb_tensor *y = &r->out[0];
    const int64_t B = boxes->dims[0], N = boxes->dims[1], C = scores->dims[1];
    if (boxes->rank != 3 || scores->rank != 3 || boxes->dims[2] != 4 || scores->dims[0] != B ||
        scores->dims[2] != N)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "boxes must be [B, N, 4] and scores [B, C, N]");
    /* max_output_boxes_per_class is int64: read exactly (through a double,
     * INT64_MAX became 2^63, an undefined conversion) */
    int64_t max_out = 0;
    if (nms_present(r, 2)) {
        if (r->in[2].dtype == KILN_DTYPE_INT64)
            max_out = *(const int64_t *)r->in[2].data;
        else if (!kn_double_to_i64(kb_ld(r->in[2].data, r->in[2].dtype, 0), INT64_MIN, INT64_MAX,
                                   &max_out))
            max_out = 0;
    }
    float iou = nms_present(r, 3) ? (float)kb_ld(r->in[3].data, r->in[3].dtype, 0) : 0.f;
    bool has_score = nms_present(r, 4);
    float score_thr = has_score ? (float)kb_ld(r->in[4].data, r->in[4].dtype, 0) : 0.f;
    int center = (int)kn_attr_int(r->node, "center_point_box", 0);
    int64_t *out = y->data, rows = 0, cap = y->dims[0];
    if (max_out <= 0 || N == 0) {
        y->dims[0] = 0;
        return KILN_OK;
    }
    nms_cand *cand = malloc((size_t)N * sizeof *cand);
    int64_t *kept = malloc((size_t)N * sizeof *kept);
    if (!cand || !kept) {
        free(cand);
        free(kept);
        return kn_node_error(r->node, KILN_ERR_OUT_OF_MEMORY, "candidates of %lld boxes", (long long)N);
    }
    const float *bx = boxes->data, *sc = scores->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            const float *s = sc + (b * C + c) * N, *bb = bx + b * N * 4;
            int64_t n = 0, k = 0;
            for (int64_t i = 0; i < N; i++)
                if (!has_score || s[i] > score_thr)
                    cand[n++] = (nms_cand){s[i], i};
            qsort(cand, (size_t)n, sizeof *cand, nms_order);
            for (int64_t i = 0; i < n && k < max_out; i++) {
                bool keep = true;
                for (int64_t j = 0; j < k && keep; j++)
                    keep = !kn_nms_suppress(bb + cand[i].idx * 4, bb + kept[j] * 4, center, iou);
                if (!keep)
                    continue;
                kept[k++] = cand[i].idx;
                if (rows >= cap) {
                    free(cand);
                    free(kept);
                    return kn_node_error(r->node, KILN_ERR_INTERNAL, "more than %lld selected boxes",
                                         (long long)cap);
                }
                out[rows * 3] = b;
                out[rows * 3 + 1] = c;
                out[rows * 3 + 2] = cand[i].idx;
                rows++;
            }
        }
    free(cand);
    free(kept);
    y->dims[0] = rows;
    return KILN_OK;
}
