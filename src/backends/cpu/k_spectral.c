/* k_spectral.c - reference CPU kernels of DFT, STFT, MelWeightMatrix and Det
 * (graph/spectral.h), in double: DFT and STFT as direct sums over a twiddle
 * table in the workspace, Det by LU with partial pivoting. */
#include <string.h>

#include "graph/spectral.h"
#include "k_nn.h"

/* The kernel's inputs as shape inference sees them, values included (CPU
 * tensors are host memory either way). An absent input has no type; a
 * present one may have no data yet in prepare (a graph input not bound). */
static void sp_tinfo(const kb_tensor *in, int n_in, kn_tinfo *ti) {
    kb_tinfo_types(in, n_in, ti);
    for (int i = 0; i < n_in; i++)
        if (!ti[i].value)
            ti[i].value = in[i].data;
}

#define SP_MAX_IN 5

static kiln_status sp_check_inputs(const kn_node *node, int n_in, int most) {
    if (n_in > most)
        return kn_node_error(node, KILN_ERR_SHAPE, "takes at most %d inputs, got %d", most, n_in);
    return KILN_OK;
}

/* cos and sin of 2*pi*m/n for m < n, into tw[0..n) and tw[n..2n). */
static void sp_twiddles(double *tw, int64_t n) {
    for (int64_t m = 0; m < n; m++)
        kn_dft_twiddle(m, n, &tw[m], &tw[n + m]);
}

/* ---------------- DFT ---------------- */

static kiln_status dft_geom(const kn_node *node, const kb_tensor *in, int n_in, kn_dft *g) {
    kn_tinfo ti[SP_MAX_IN];
    KN_TRY(sp_check_inputs(node, n_in, 3));
    sp_tinfo(in, n_in, ti);
    return kn_dft_setup(node, ti, n_in, g);
}

static kiln_status dft_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    kn_dft g;
    KN_TRY(dft_geom(node, in, n_in, &g));
    *workspace = (size_t)g.n * 2 * sizeof(double);
    return KILN_OK;
}

static kiln_status dft_run(const kb_run *r) {
    kn_dft g;
    KN_TRY(dft_geom(r->node, r->in, r->n_in, &g));
    if (r->workspace_size < (size_t)g.n * 2 * sizeof(double))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small for the twiddles");
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    double *tw = r->workspace;
    sp_twiddles(tw, g.n);
    const int64_t taps = kn_dft_taps(&g);
    const double scale = g.inverse ? 1.0 / (double)g.n : 1.0;
    for (int64_t o = 0; o < g.outer; o++)
        for (int64_t k = 0; k < g.out_len; k++)
            for (int64_t i = 0; i < g.inner; i++) {
                double re = 0.0, im = 0.0;
                int64_t m = 0;
                for (int64_t t = 0; t < taps; t++) {
                    size_t at = (size_t)(((o * g.len + t) * g.inner + i) * g.cin);
                    double xr = kb_ld(x->data, x->dtype, at);
                    double xi = g.cin == 2 ? kb_ld(x->data, x->dtype, at + 1) : 0.0;
                    double c = tw[m], s = tw[g.n + m];
                    if (g.inverse) { /* e^{+2 pi i kt/n} */
                        re += xr * c - xi * s;
                        im += xi * c + xr * s;
                    } else { /* e^{-2 pi i kt/n} */
                        re += xr * c + xi * s;
                        im += xi * c - xr * s;
                    }
                    m = kn_dft_step(m, k, g.n);
                }
                size_t to = (size_t)(((o * g.out_len + k) * g.inner + i) * 2);
                kb_st(y->data, y->dtype, to, re * scale);
                kb_st(y->data, y->dtype, to + 1, im * scale);
            }
    return KILN_OK;
}

/* ---------------- STFT ---------------- */

static kiln_status stft_geom(const kn_node *node, const kb_tensor *in, int n_in, kn_stft *g) {
    kn_tinfo ti[SP_MAX_IN];
    KN_TRY(sp_check_inputs(node, n_in, 4));
    sp_tinfo(in, n_in, ti);
    return kn_stft_setup(node, ti, n_in, g);
}

static kiln_status stft_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                                const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    kn_stft g;
    KN_TRY(stft_geom(node, in, n_in, &g));
    *workspace = (size_t)g.n * 2 * sizeof(double);
    return KILN_OK;
}

static kiln_status stft_run(const kb_run *r) {
    kn_stft g;
    KN_TRY(stft_geom(r->node, r->in, r->n_in, &g));
    if (r->workspace_size < (size_t)g.n * 2 * sizeof(double))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small for the twiddles");
    const kb_tensor *x = &r->in[0];
    const kb_tensor *w = r->n_in > 2 && r->in[2].data ? &r->in[2] : NULL;
    kb_tensor *y = &r->out[0];
    double *tw = r->workspace;
    sp_twiddles(tw, g.n);
    const int64_t taps = kn_stft_taps(&g);
    for (int64_t b = 0; b < g.batch; b++)
        for (int64_t f = 0; f < g.frames; f++)
            for (int64_t k = 0; k < g.bins; k++) {
                double re = 0.0, im = 0.0;
                int64_t m = 0;
                for (int64_t t = 0; t < taps && f * g.step + t < g.len; t++) {
                    size_t at = (size_t)((b * g.len + f * g.step + t) * g.cin);
                    double wt = w ? kb_ld(w->data, w->dtype, (size_t)t) : 1.0;
                    double xr = kb_ld(x->data, x->dtype, at) * wt;
                    double xi = g.cin == 2 ? kb_ld(x->data, x->dtype, at + 1) * wt : 0.0;
                    double c = tw[m], s = tw[g.n + m];
                    re += xr * c + xi * s;
                    im += xi * c - xr * s;
                    m = kn_dft_step(m, k, g.n);
                }
                size_t to = (size_t)(((b * g.frames + f) * g.bins + k) * 2);
                kb_st(y->data, y->dtype, to, re);
                kb_st(y->data, y->dtype, to + 1, im);
            }
    return KILN_OK;
}

/* ---------------- MelWeightMatrix ---------------- */

static kiln_status mel_run(const kb_run *r) {
    kn_tinfo ti[SP_MAX_IN];
    kn_mel g;
    KN_TRY(sp_check_inputs(r->node, r->n_in, 5));
    sp_tinfo(r->in, r->n_in, ti);
    KN_TRY(kn_mel_setup(r->node, ti, r->n_in, &g));
    kb_tensor *y = &r->out[0];
    for (int64_t i = 0; i < g.nmel; i++) {
        int64_t b0 = kn_mel_bin(&g, i), b1 = kn_mel_bin(&g, i + 1), b2 = kn_mel_bin(&g, i + 2);
        for (int64_t j = 0; j < g.nspec; j++)
            kb_st(y->data, y->dtype, (size_t)(j * g.nmel + i), kn_mel_weight(j, b0, b1, b2));
    }
    return KILN_OK;
}

/* ---------------- Det ---------------- */

static kiln_status det_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    kn_tinfo ti;
    int64_t batch, m;
    if (n_in != 1)
        return kn_node_error(node, KILN_ERR_SHAPE, "takes one input, got %d", n_in);
    sp_tinfo(in, 1, &ti);
    KN_TRY(kn_det_setup(node, &ti, &batch, &m));
    *workspace = (size_t)(m * m) * sizeof(double);
    return KILN_OK;
}

/* The determinant of the m x m matrix in a (overwritten by its LU). */
static double det_lu(double *a, int64_t m) {
    double sign = 1.0;
    for (int64_t k = 0; k < m; k++) {
        int64_t p = kn_det_pivot(a, m, k);
        if (a[p * m + k] == 0.0)
            return 0.0;
        if (p != k) {
            for (int64_t j = 0; j < m; j++) {
                double t = a[k * m + j];
                a[k * m + j] = a[p * m + j];
                a[p * m + j] = t;
            }
            sign = -sign;
        }
        for (int64_t i = k + 1; i < m; i++)
            for (int64_t j = k + 1; j < m; j++)
                kn_det_update(a, m, k, i, j);
    }
    double det = sign;
    for (int64_t k = 0; k < m; k++)
        det *= a[k * m + k];
    return det;
}

static kiln_status det_run(const kb_run *r) {
    kn_tinfo ti;
    int64_t batch, m;
    sp_tinfo(r->in, 1, &ti);
    KN_TRY(kn_det_setup(r->node, &ti, &batch, &m));
    if (r->workspace_size < (size_t)(m * m) * sizeof(double))
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small for the matrix");
    const kb_tensor *x = &r->in[0];
    double *a = r->workspace;
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t e = 0; e < m * m; e++)
            a[e] = kb_ld(x->data, x->dtype, (size_t)(b * m * m + e));
        kb_st(r->out[0].data, r->out[0].dtype, (size_t)b, det_lu(a, m));
    }
    return KILN_OK;
}

static bool sup_real_in0(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return n_in >= 1 && kb_is_real(in[0].dtype);
}

#define SP_REF(op, sup, prep, run) {op, "", "ref", sup, NULL, NULL, prep, NULL, run}

const kb_kernel kb_cpu_spectral[] = {
    SP_REF("DFT", sup_real_in0, dft_prepare, dft_run),
    SP_REF("STFT", sup_real_in0, stft_prepare, stft_run),
    SP_REF("MelWeightMatrix", NULL, NULL, mel_run),
    SP_REF("Det", sup_real_in0, det_prepare, det_run),
};
const size_t kb_cpu_spectral_count = KN_ARRAY_LEN(kb_cpu_spectral);
