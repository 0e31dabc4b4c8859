/* k_vec.h - vectorized float loops of the transformer path (AVX2 + FMA when
 * the CPU has them, chosen at run time; a scalar loop otherwise): exp for
 * softmax rows and the GELU epilogue. Accuracy (tests/unit/test_cpu_vec.c
 * checks it against libm): exp within 2 ulp, GELU within 3e-7 of |x| plus
 * 1e-7 absolute, which is the reference kb_act_apply's own float error. */
#ifndef KILN_K_VEC_H
#define KILN_K_VEC_H

#include <stdbool.h>
#include <stddef.h>

#include "core/core.h"

/* Whether the vector paths run on this CPU (AVX2 and FMA), and a switch for
 * tests: kv_force_scalar(true) makes every function take its scalar path. */
KN_HIDDEN bool kv_have_avx2(void);
KN_HIDDEN void kv_force_scalar(bool on);

/* row[j] = exp(row[j] - mx) for j < n (-inf gives 0); returns the sum of
 * the results (float lanes summed in a fixed order). */
KN_HIDDEN float kv_exp_shift_sum(float *row, size_t n, float mx);
/* row[j] *= s. */
KN_HIDDEN void kv_scale(float *row, size_t n, float s);
/* The maximum of row[0..n) (n >= 1; -inf when every value is -inf). */
KN_HIDDEN float kv_max(const float *row, size_t n);
/* x[i] = GELU(x[i]) in place: the erf form 0.5 x (1 + erf(x / sqrt 2))
 * (tanh_form false) or the tanh form (true). */
KN_HIDDEN void kv_gelu(float *x, size_t n, bool tanh_form);
#endif
