/* loss.cuh - launchers of NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss (loss.cu; glue in k_nn2.c). */
#ifndef KILN_CUDA_LOSS_CUH
#define KILN_CUDA_LOSS_CUH

#include <cuda_runtime_api.h>

#include "graph/loss.h"
#include "kc_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kc_loss {
    kn_loss g;
    kiln_dtype dt;        /* the input's, the weight's and the outputs' type */
    kiln_dtype target_dt; /* int32 or int64 */
    int softmax;          /* SoftmaxCrossEntropyLoss: log-softmax over the classes first */
} kc_loss;

/* Workspace bytes kc_loss_run needs: the samples' losses and weights in
 * double when the loss is reduced. */
size_t kc_loss_workspace(const kc_loss *p);

/* y: the loss (the target's shape, or one value); log_prob (may be NULL):
 * the log-softmax, x's shape (softmax only); weight may be NULL. A target
 * outside [0, classes) that is not the ignore_index counts as ignored. */
cudaError_t kc_loss_run(const void *x, const void *target, const void *weight, void *y, void *log_prob,
                        void *workspace, const kc_loss *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
