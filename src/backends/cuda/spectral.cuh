/* spectral.cuh - launchers of the CUDA spectral family (k_spectral.c is their
 * glue): DFT, STFT, MelWeightMatrix and Det, on the geometry and rules of
 * graph/spectral.h, as the CPU references (backends/cpu/k_spectral.c)
 * compute them. DFT and STFT sum directly over a twiddle table (a thread an
 * output value; float accumulation for float, float16 and bfloat16, double
 * for double); Det runs LU with partial pivoting in double, a block a
 * matrix. */
#ifndef KILN_CUDA_SPECTRAL_CUH
#define KILN_CUDA_SPECTRAL_CUH

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "graph/spectral.h"
#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace bytes of a size-n twiddle table for data of type dt. */
size_t kc_twiddle_bytes(kiln_dtype dt, int64_t n);

/* y [outer, out_len, inner, 2] = the DFT of x [outer, len, inner, cin];
 * ws holds kc_twiddle_bytes(dt, g->n). */
cudaError_t kc_dft(const void *x, void *y, kiln_dtype dt, const kn_dft *g, void *ws,
                   cudaStream_t stream);

/* y [batch, frames, bins, 2] = the STFT of x [batch, len, cin] with the
 * window w (NULL: ones); ws holds kc_twiddle_bytes(dt, g->n). */
cudaError_t kc_stft(const void *x, const void *w, void *y, kiln_dtype dt, const kn_stft *g, void *ws,
                    cudaStream_t stream);

/* y [nspec, nmel] of any numeric type: the mel filter bank. */
cudaError_t kc_mel(void *y, kiln_dtype dt, const kn_mel *g, cudaStream_t stream);

/* Det: blocks working at once (each with an m x m double matrix in the
 * workspace) and the workspace bytes they take. */
int64_t kc_det_blocks(int64_t batch, int64_t m);
size_t kc_det_workspace(int64_t batch, int64_t m);
/* y [batch] = det of each m x m matrix of x; ws holds kc_det_workspace. */
cudaError_t kc_det(const void *x, void *y, kiln_dtype dt, int64_t batch, int64_t m, void *ws,
                   cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
