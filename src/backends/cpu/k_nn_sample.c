/* k_nn_sample.c - the reference CPU kernels of the ops that sample an image
 * at computed points: GridSample (each output position takes its taps along
 * y and x from graph/grid_sample.h once, then every channel sums its
 * weighted reads) and RoiAlign (graph/roi_align.h), in double. */
#include "graph/grid_sample.h"
#include "graph/roi_align.h"
#include "k_nn.h"

typedef struct grid_sample_points_ctx {
    const kb_tensor *x;
    const kb_tensor *grid;
    kb_tensor *y;
    kn_grid_sample g;
    int64_t plane;
    int64_t oplane;
} grid_sample_points_ctx;

static void grid_sample_points(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const grid_sample_points_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *grid = c_->grid;
    kb_tensor *y = c_->y;
    kn_grid_sample g = c_->g;
    int64_t plane = c_->plane;
    int64_t oplane = c_->oplane;
    (void)tid;
    for (int64_t p = lo_; p < hi_; p++) {
        const int64_t n = p / oplane, o = p % oplane;
        kn_gs_taps tx, ty;
        kn_gs_axis(kb_ld(grid->data, grid->dtype, (size_t)(2 * p)), g.w, g.mode, g.padding,
                   g.align_corners, &tx);
        kn_gs_axis(kb_ld(grid->data, grid->dtype, (size_t)(2 * p + 1)), g.h, g.mode, g.padding,
                   g.align_corners, &ty);
        for (int64_t c = 0; c < g.c; c++) {
            const int64_t base = (n * g.c + c) * plane;
            double acc = 0.0;
            for (int a = 0; a < ty.n; a++) {
                if (ty.idx[a] < 0)
                    continue;
                double row = 0.0;
                for (int b = 0; b < tx.n; b++)
                    if (tx.idx[b] >= 0)
                        row += tx.w[b] *
                               kb_ld(x->data, x->dtype, (size_t)(base + ty.idx[a] * g.w + tx.idx[b]));
                acc += ty.w[a] * row;
            }
            kb_st(y->data, y->dtype, (size_t)((n * g.c + c) * oplane + o), acc);
        }
    }
}

kiln_status kb_nn_grid_sample_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *grid = &r->in[1];
    kb_tensor *y = &r->out[0];
    kn_grid_sample g;
    kn_tinfo ti[2];
    kb_tinfo_of(r->in, 2, ti);
    KN_TRY(kn_grid_sample_geom(r->node, &ti[0], &ti[1], &g));
    const int64_t plane = g.h * g.w, oplane = g.ho * g.wo, total = g.n * oplane;
    int nth = r->threads > 1 && total * g.c > 32768 ? r->threads : 1;
    {
        grid_sample_points_ctx c_ = {x, grid, y, g, plane, oplane};
        kn_parallel_for(nth, total, 0, grid_sample_points, &c_);
    }
    return KILN_OK;
}

/* RoiAlign: each region's bins sample X's plane of its image and channel
 * (graph/roi_align.h); a batch index outside X fails with the region. */
#define KB_RA_LD(plane, i) kb_ld(x->data, x->dtype, (size_t)((plane) + (i)))

typedef struct roi_align_rois_ctx {
    const kb_tensor *x;
    const kb_tensor *rois;
    const kb_tensor *idx;
    kb_tensor *y;
    kn_roi_align g;
    int64_t plane;
} roi_align_rois_ctx;

static void roi_align_rois(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const roi_align_rois_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    const kb_tensor *rois = c_->rois;
    const kb_tensor *idx = c_->idx;
    kb_tensor *y = c_->y;
    kn_roi_align g = c_->g;
    int64_t plane = c_->plane;
    (void)tid;
    for (int64_t k = lo_; k < hi_; k++) {
        double roi[4];
        for (int j = 0; j < 4; j++)
            roi[j] = kb_ld(rois->data, rois->dtype, (size_t)(k * 4 + j));
        kn_roi_box box;
        if (!kn_roi_box_of(roi, g.scale, g.half_pixel, g.oh, g.ow, g.sampling, &box))
            continue; /* refused before the loop */
        const int64_t b = (int64_t)kb_ld(idx->data, idx->dtype, (size_t)k);
        for (int64_t c = 0; c < g.c; c++) {
            const int64_t base = (b * g.c + c) * plane;
            for (int64_t ph = 0; ph < g.oh; ph++)
                for (int64_t pw = 0; pw < g.ow; pw++) {
                    double v;
                    KN_ROI_BIN(KB_RA_LD, base, &box, ph, pw, g.h, g.w, g.mode, v);
                    kb_st(y->data, y->dtype, (size_t)(((k * g.c + c) * g.oh + ph) * g.ow + pw), v);
                }
        }
    }
}

kiln_status kb_nn_roi_align_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *rois = &r->in[1], *idx = &r->in[2];
    kb_tensor *y = &r->out[0];
    kn_roi_align g;
    kn_tinfo ti[3];
    kb_tinfo_of(r->in, 3, ti);
    KN_TRY(kn_roi_align_geom(r->node, &ti[0], &ti[1], &ti[2], &g));
    for (int64_t k = 0; k < g.rois; k++) {
        int64_t b = (int64_t)kb_ld(idx->data, idx->dtype, (size_t)k);
        if (b < 0 || b >= g.n)
            return kn_node_error(r->node, KILN_ERR_RUNTIME,
                                 "region %lld has batch index %lld; X has %lld images", (long long)k,
                                 (long long)b, (long long)g.n);
        double roi[4];
        for (int j = 0; j < 4; j++)
            roi[j] = kb_ld(rois->data, rois->dtype, (size_t)(k * 4 + j));
        kn_roi_box box;
        if (!kn_roi_box_of(roi, g.scale, g.half_pixel, g.oh, g.ow, g.sampling, &box))
            return kn_node_error(r->node, KILN_ERR_RUNTIME,
                                 "region %lld [%g, %g, %g, %g] (spatial_scale %g) is not finite or its "
                                 "bins would take more than %d samples a side or %d in all",
                                 (long long)k, roi[0], roi[1], roi[2], roi[3], g.scale, KN_ROI_MAX_GRID,
                                 KN_ROI_MAX_SAMPLES);
    }
    const int64_t plane = g.h * g.w, bins = g.oh * g.ow;
    int nth = r->threads > 1 && g.rois * g.c * bins > 4096 ? r->threads : 1;
    {
        roi_align_rois_ctx c_ = {x, rois, idx, y, g, plane};
        kn_parallel_for(nth, g.rois, 0, roi_align_rois, &c_);
    }
    return KILN_OK;
}
