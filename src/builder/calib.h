/* calib.h - built-in INT8 calibration (implicit quantization): statistics
 * of the float network's activations on caller-given batches, min-max /
 * percentile / entropy calibrators, the text calibration cache, and the
 * rewrite that inserts Q/DQ at the inputs of Conv / MatMul / Gemm so that
 * pass_qdq.c builds the INT8 layers. */
#ifndef KILN_BUILDER_CALIB_H
#define KILN_BUILDER_CALIB_H

#include "graph/graph.h"
#include "kiln/kiln_builder.h"

/* Histogram bins of |x| over [0, amax] (TensorRT's count). */
#define KCAL_BINS 2048
/* Quantized levels the entropy calibrator maps the histogram onto. */
#define KCAL_LEVELS 128

typedef struct kcal_cfg kcal_cfg;
KN_HIDDEN void kcal_cfg_free(kcal_cfg *c);

/* The thresholds (the |x| mapped to 127). amax: the largest |x| seen. */
KN_HIDDEN double kcal_threshold_minmax(double amax);
/* hist: nbins counts of |x| in bins of width amax / nbins. The upper edge of
 * the bin where the cumulative count reaches pct percent. */
KN_HIDDEN double kcal_threshold_percentile(const double *hist, int nbins, double amax, double pct);
/* The bin edge i * width (i from levels to nbins) whose clipped distribution
 * (outliers summed into the last bin) loses the least information, in KL
 * divergence, when quantized to `levels` levels (TensorRT's entropy
 * calibrator). */
KN_HIDDEN double kcal_threshold_entropy(const double *hist, int nbins, double amax, int levels);
/* Count |x[i]| into hist (values past amax into the last bin; zeros and
 * NaN are not counted). */
KN_HIDDEN void kcal_hist_add(double *hist, int nbins, double amax, const float *x, size_t n);

/* With calibration configured on cfg and KILN_BUILDER_FLAG_INT8 set: *out is
 * a copy of net with Q/DQ inserted (scales from the cache file or from the
 * batches, which also write the cache). Else *out is NULL. */
KN_HIDDEN kiln_status kcal_apply(const kn_net *net, const kiln_builder_config *cfg, kn_net **out);

/* builder.c: the config's calibration slot. */
KN_HIDDEN kcal_cfg **kbld_calib_slot(kiln_builder_config *cfg);
KN_HIDDEN const kcal_cfg *kbld_calib(const kiln_builder_config *cfg);
KN_HIDDEN uint32_t kbld_cfg_flags(const kiln_builder_config *cfg);
KN_HIDDEN const char *kbld_cfg_backend(const kiln_builder_config *cfg);
KN_HIDDEN int kbld_cfg_threads(const kiln_builder_config *cfg);

#endif
