/* k_int8.h - what the CPU kernels of kiln's quantized layers (kiln::QConv,
 * kiln::QMatMul; graph/qlayer.h) share: the exact integer pieces of the
 * reference (k_nn_qconv.c), the epilogue of graph/quant.h over a block of
 * int32 sums, and the oneDNN tactics' entry points (k_fast_int8.c). */
#ifndef KILN_CPU_K_INT8_H
#define KILN_CPU_K_INT8_H

#include "backends/backend.h"
#include "graph/ops_nn.h"
#include "graph/qlayer.h"
#include "k_nn.h"

/* A zero point or scale of channel c: scalar or one per channel; dflt when
 * t is NULL or has no data. */
KN_HIDDEN double kq_per_channel(const kb_tensor *t, int64_t c, double dflt);
/* col[(c * K + kidx), o] = x[c, window position] - zp (0 in the padding). */
KN_HIDDEN void kq_im2col_i16(const kn_window *w, const void *x, kiln_dtype dt, int64_t x_off,
                             int32_t zp, int64_t channels, int64_t ksize, int64_t in_size,
                             int64_t out_size, int16_t *col, int threads);
/* acc[co, :] = sum_p (w[co, p] - wzp[co]) col[p, :] for couts channels from co0. */
KN_HIDDEN void kq_int_gemm(const void *w, kiln_dtype wt, int64_t w_off, const kb_tensor *wzp,
                           int64_t co0, int64_t couts, int64_t kdim, const int16_t *col,
                           int64_t n, int32_t *acc, int threads);

/* A quantized layer's epilogue for one run: the node's stages and the
 * per-channel values, gathered from the inputs. */
typedef struct kq_epi {
    kn_qepi e;
    kiln_dtype to;        /* Y's type */
    int64_t cout;
    float *s;             /* per channel: x_scale * w_scale[c] */
    int32_t *b;           /* per channel: B[c], 0 without B */
    float *c;             /* per channel: C[c], 0 without C */
    float ys;             /* y_scale, y_zero_point and the output range */
    double yz, lo, hi;
    const void *z;        /* the residual (Y's indexing) or NULL */
    kiln_dtype zt;
    float zs;
    double zz;
} kq_epi;

/* Workspace bytes kq_epi_setup needs for cout channels (64-byte multiple). */
KN_HIDDEN size_t kq_epi_bytes(int64_t cout);
/* Fill q from the run's inputs (graph/qlayer.h's order); ws holds
 * kq_epi_bytes(cout). */
KN_HIDDEN kiln_status kq_epi_setup(const kb_run *r, int64_t cout, void *ws, kq_epi *q);
/* Apply the epilogue to channels c0 .. c0 + nc - 1 and positions 0 .. ns - 1:
 * the sum of (c, j) is acc[(c - c0) * acs + j * ass]; Y's element (and Z's)
 * is at yoff + c * ycs + j * yss. */
KN_HIDDEN void kq_epi_apply(const kq_epi *q, const int32_t *acc, int64_t acs, int64_t ass,
                            int64_t c0, int64_t nc, int64_t ns, void *y, int64_t yoff,
                            int64_t ycs, int64_t yss, int threads);

/* Whether a kiln::QConv is channels-last (X, Z, Y [N, H, W, C]). */
KN_HIDDEN bool kq_channels_last(const kn_node *node);
/* A kiln::QConv's geometry (channels-first view of a channels-last X). */
KN_HIDDEN kiln_status kq_conv_geom(const kn_node *node, const kb_tensor *in, kb_conv *cv);

/* Reference kernels (k_int8.c). */
KN_HIDDEN kiln_status kq_qconv_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                       int n_in, const kb_tensor *out, int n_out, void **inst,
                                       size_t *workspace);
KN_HIDDEN kiln_status kq_qconv_run(const kb_run *r);
KN_HIDDEN kiln_status kq_qmatmul_prepare(const void *state, const kn_node *node,
                                         const kb_tensor *in, int n_in, const kb_tensor *out,
                                         int n_out, void **inst, size_t *workspace);
KN_HIDDEN kiln_status kq_qmatmul_run(const kb_run *r);

#ifdef KILN_HAVE_DNNL
/* oneDNN tactics (k_fast_int8.c): the integer sums by oneDNN's INT8
 * convolution / matmul (u8 or s8 X, s8 W, X's zero point), the epilogue by
 * kq_epi_apply: the same bits as the reference. */
KN_HIDDEN bool kq_dnnl_conv_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                     const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kq_dnnl_conv_prepare(const void *state, const kn_node *node,
                                           const kb_tensor *in, int n_in, const kb_tensor *out,
                                           int n_out, void **inst, size_t *workspace);
KN_HIDDEN kiln_status kq_dnnl_conv_run(const kb_run *r);
KN_HIDDEN bool kq_dnnl_matmul_supports(const kn_node *node, const kn_tinfo *in, int n_in,
                                       const kn_tinfo *out, int n_out);
KN_HIDDEN kiln_status kq_dnnl_matmul_prepare(const void *state, const kn_node *node,
                                             const kb_tensor *in, int n_in, const kb_tensor *out,
                                             int n_out, void **inst, size_t *workspace);
KN_HIDDEN kiln_status kq_dnnl_matmul_run(const kb_run *r);
KN_HIDDEN void kq_dnnl_release(void *inst);
#endif
/* oneDNN's int8 sums are exact on this CPU (VNNI or AMX): the dnnl_int8
 * tactic runs (false in a build without oneDNN) */
KN_HIDDEN bool kq_dnnl_exact(void);
#endif
