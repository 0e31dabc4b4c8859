/* loss.h - NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss's rules,
 * shared by the CPU reference and the CUDA kernels (plain C, host and
 * device). The geometry (kn_loss, filled by kn_loss_geom in ops_nn.c) views
 * the input as [n, classes, inner] and the target as [n, inner]. */
#ifndef KILN_LOSS_H
#define KILN_LOSS_H

#include <stdint.h>

#ifdef __CUDACC__
#define KN_LOSS_FN static __host__ __device__ __forceinline__
#else
#define KN_LOSS_FN static inline
#endif

enum { KN_LOSS_NONE = 0, KN_LOSS_SUM = 1, KN_LOSS_MEAN = 2 };

typedef struct kn_loss {
    int64_t n, classes, inner; /* input [n, classes, inner...], target [n, inner...] */
    int reduction;             /* KN_LOSS_* */
    int has_ignore;            /* ignore_index given */
    int64_t ignore;
    int weighted;              /* a weight per class is given */
} kn_loss;

/* Whether a sample of target t takes part: not the ignored index, and a
 * class in [0, classes). The CPU reports any other target as an error;
 * the CUDA kernels, which cannot stop a run, give it no loss and no weight. */
KN_LOSS_FN int kn_loss_counts(const kn_loss *g, int64_t t) {
    return !(g->has_ignore && t == g->ignore) && t >= 0 && t < g->classes;
}

/* The reduced loss from the sum of the samples' losses and the sum of their
 * weights (a weight of 1 a sample without `weight`): "mean" divides by the
 * weights of the samples that take part, as ONNX Runtime and PyTorch do,
 * so ignored samples count in neither sum. */
KN_LOSS_FN double kn_loss_reduce(const kn_loss *g, double loss_sum, double weight_sum) {
    return g->reduction == KN_LOSS_MEAN ? loss_sum / weight_sum : loss_sum;
}

#endif
