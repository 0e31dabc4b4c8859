/* k_nn_sample.c - GridSample's reference CPU kernel: each output position
 * takes its taps along y and x from the shared rule (graph/grid_sample.h)
 * once, then every channel sums its weighted reads, in double. */
#include "graph/grid_sample.h"
#include "k_nn.h"

kiln_status kb_nn_grid_sample_run(const kb_run *r) {
    const kb_tensor *x = &r->in[0], *grid = &r->in[1];
    kb_tensor *y = &r->out[0];
    kn_grid_sample g;
    kn_tinfo xi = {.dtype = x->dtype, .rank = x->rank}, gi = {.dtype = grid->dtype, .rank = grid->rank};
    memcpy(xi.dims, x->dims, sizeof xi.dims);
    memcpy(gi.dims, grid->dims, sizeof gi.dims);
    KN_TRY(kn_grid_sample_geom(r->node, &xi, &gi, &g));
    const int64_t plane = g.h * g.w, oplane = g.ho * g.wo, total = g.n * oplane;
    int nth = r->threads > 1 && total * g.c > 32768 ? r->threads : 1;
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t p = 0; p < total; p++) {
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
    return KILN_OK;
}
