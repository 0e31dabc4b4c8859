/* k_spectral.c - the CUDA spectral family's kb_kernel glue: DFT (opsets 17
 * and 20), STFT, MelWeightMatrix and Det (kernels in spectral.cu). The
 * geometry is shape inference's (graph/spectral.h), read from the host
 * values of dft_length, axis, frame_step, frame_length and the five
 * MelWeightMatrix scalars (value inputs, kept on the host by the executor). */
#include <string.h>

#include "kc_common.h"
#include "spectral.cuh"

#define SP_MAX_IN 5

/* The kernel's inputs as shape inference sees them, with their host values
 * (NULL where kiln keeps none: the signal, the window, X). */
static kiln_status sp_tinfo(const kn_node *node, const kb_tensor *in, int n_in, int most,
                            kn_tinfo *ti) {
    if (n_in > most)
        return kn_node_error(node, KILN_ERR_SHAPE, "takes at most %d inputs, got %d", most, n_in);
    kb_tinfo_types(in, n_in, ti);
    return KILN_OK;
}

static bool sp_real(kiln_dtype t) { return kc_is_float(t) || t == KILN_DTYPE_DOUBLE; }

static bool sp_supports_real(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                             int n_out) {
    return n_in >= 1 && n_out == 1 && sp_real(in[0].dtype) && out[0].dtype == in[0].dtype;
}

static kiln_status sp_ws_check(const kb_run *r, size_t need) {
    if (r->workspace_size < need)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small (%zu < %zu)",
                             r->workspace_size, need);
    return KILN_OK;
}

/* ---------------- DFT ---------------- */

static kiln_status dft_geom(const kn_node *node, const kb_tensor *in, int n_in, kn_dft *g) {
    kn_tinfo ti[SP_MAX_IN];
    KN_TRY(sp_tinfo(node, in, n_in, 3, ti));
    return kn_dft_setup(node, ti, n_in, g);
}

static kiln_status dft_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    kn_dft g;
    KN_TRY(dft_geom(node, in, n_in, &g));
    *workspace = kc_twiddle_bytes(in[0].dtype, g.n);
    return KILN_OK;
}

static kiln_status dft_run(const kb_run *r) {
    kn_dft g;
    KN_TRY(dft_geom(r->node, r->in, r->n_in, &g));
    KN_TRY(sp_ws_check(r, kc_twiddle_bytes(r->in[0].dtype, g.n)));
    KC_CUDA(r->node, kc_dft(r->in[0].data, r->out[0].data, r->in[0].dtype, &g, r->workspace,
                            kc_stream(r)));
    return KILN_OK;
}

/* ---------------- STFT ---------------- */

static kiln_status stft_geom(const kn_node *node, const kb_tensor *in, int n_in, kn_stft *g) {
    kn_tinfo ti[SP_MAX_IN];
    KN_TRY(sp_tinfo(node, in, n_in, 4, ti));
    return kn_stft_setup(node, ti, n_in, g);
}

static kiln_status stft_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                                const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    kn_stft g;
    KN_TRY(stft_geom(node, in, n_in, &g));
    *workspace = kc_twiddle_bytes(in[0].dtype, g.n);
    return KILN_OK;
}

static kiln_status stft_run(const kb_run *r) {
    kn_stft g;
    KN_TRY(stft_geom(r->node, r->in, r->n_in, &g));
    KN_TRY(sp_ws_check(r, kc_twiddle_bytes(r->in[0].dtype, g.n)));
    const void *w = kc_present(r->in, r->n_in, 2) ? r->in[2].data : NULL;
    KC_CUDA(r->node, kc_stft(r->in[0].data, w, r->out[0].data, r->in[0].dtype, &g, r->workspace,
                             kc_stream(r)));
    return KILN_OK;
}

/* ---------------- MelWeightMatrix ---------------- */

static bool mel_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                         int n_out) {
    return n_in == 5 && n_out == 1 && kn_mel_out_type(out[0].dtype);
}

static kiln_status mel_run(const kb_run *r) {
    kn_tinfo ti[SP_MAX_IN];
    kn_mel g;
    KN_TRY(sp_tinfo(r->node, r->in, r->n_in, 5, ti));
    KN_TRY(kn_mel_setup(r->node, ti, r->n_in, &g));
    KC_CUDA(r->node, kc_mel(r->out[0].data, r->out[0].dtype, &g, kc_stream(r)));
    return KILN_OK;
}

/* ---------------- Det ---------------- */

static kiln_status det_geom(const kn_node *node, const kb_tensor *in, int n_in, int64_t *batch,
                            int64_t *m) {
    kn_tinfo ti;
    if (n_in != 1)
        return kn_node_error(node, KILN_ERR_SHAPE, "takes one input, got %d", n_in);
    KN_TRY(sp_tinfo(node, in, 1, 1, &ti));
    return kn_det_setup(node, &ti, batch, m);
}

static kiln_status det_prepare(const void *state, const kn_node *node, const kb_tensor *in, int n_in,
                               const kb_tensor *out, int n_out, void **inst, size_t *workspace) {
    int64_t batch, m;
    KN_TRY(det_geom(node, in, n_in, &batch, &m));
    *workspace = kc_det_workspace(batch, m);
    return KILN_OK;
}

static kiln_status det_run(const kb_run *r) {
    int64_t batch, m;
    KN_TRY(det_geom(r->node, r->in, r->n_in, &batch, &m));
    KN_TRY(sp_ws_check(r, kc_det_workspace(batch, m)));
    KC_CUDA(r->node, kc_det(r->in[0].data, r->out[0].data, r->in[0].dtype, batch, m, r->workspace,
                            kc_stream(r)));
    return KILN_OK;
}

#define K_SP(op, sup, prep, run) {op, "", "cuda", sup, NULL, NULL, prep, NULL, run}

const kb_kernel kb_cuda_spectral[] = {
    K_SP("DFT", sp_supports_real, dft_prepare, dft_run),
    K_SP("STFT", sp_supports_real, stft_prepare, stft_run),
    K_SP("MelWeightMatrix", mel_supports, NULL, mel_run),
    K_SP("Det", sp_supports_real, det_prepare, det_run),
};
const size_t kb_cuda_spectral_count = KN_ARRAY_LEN(kb_cuda_spectral);
