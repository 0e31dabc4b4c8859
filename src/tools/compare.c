/* compare.c - the output comparison of the accuracy tools (kiln_tools.h):
 * per-element absolute and relative errors of one output against its
 * reference, their statistics and the atol/rtol verdict. `kiln compare`,
 * `kiln debug` and the Python package's kiln.compare all call this. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tools/npy.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Quantile q of sorted values: linear interpolation between ranks. */
static double quantile(const double *v, size_t n, double q) {
    if (n == 0)
        return 0;
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    double f = pos - (double)lo;
    if (isinf(v[lo]) || isinf(v[hi]))
        return f > 0 ? v[hi] : v[lo];
    return v[lo] + (v[hi] - v[lo]) * f;
}

/* max, mean, median and quantile q of v (sorted in place). */
static void stats_of(double *v, size_t n, double q, double *mx, double *mean, double *med,
                     double *qv) {
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    qsort(v, n, sizeof *v, cmp_double);
    *mx = n ? v[n - 1] : 0;
    *mean = n ? sum / (double)n : 0;
    *med = quantile(v, n, 0.5);
    *qv = quantile(v, n, q);
}

static bool numeric(kiln_dtype dt) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_DOUBLE: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: case KILN_DTYPE_INT8: case KILN_DTYPE_UINT8: case KILN_DTYPE_BOOL:
    case KILN_DTYPE_INT16: case KILN_DTYPE_UINT16: case KILN_DTYPE_INT32: case KILN_DTYPE_UINT32:
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT64: return true;
    default: return false;
    }
}

static kiln_status check_side(const kiln_host_tensor *t, const char *side) {
    const char *nm = t->name ? t->name : "";
    if (t->rank < 0 || t->rank > KILN_MAX_DIMS)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "compare: %s tensor '%s': rank %d", side, nm,
                        t->rank);
    if (!numeric(t->dtype))
        return kn_error(KILN_ERR_UNSUPPORTED, "compare: %s tensor '%s': data type %s is not "
                        "numeric", side, nm, kiln_dtype_name(t->dtype));
    size_t n;
    if (!npy_volume(t->rank, t->dims, &n) || n > SIZE_MAX / kiln_dtype_size(t->dtype) ||
        t->bytes < n * kiln_dtype_size(t->dtype) || (n && !t->data))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "compare: %s tensor '%s': %zu bytes of data do not cover its shape", side,
                        nm, t->bytes);
    return KILN_OK;
}

KILN_API kiln_status kiln_compare_tensors(const kiln_host_tensor *got, const kiln_host_tensor *ref,
                                          const kiln_compare_options *o,
                                          kiln_compare_result *res) {
    if (!got || !ref || !o || !res)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_compare_tensors: NULL argument");
    if (!(o->atol >= 0) || !(o->rtol >= 0) || !(o->quantile >= 0 && o->quantile <= 1) ||
        (int)o->stat < KILN_COMPARE_ELEMWISE || (int)o->stat > KILN_COMPARE_MEDIAN)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_compare_tensors: atol %g, rtol %g, quantile %g or stat %d out of "
                        "range", o->atol, o->rtol, o->quantile, (int)o->stat);
    KN_TRY(check_side(got, "the compared"));
    KN_TRY(check_side(ref, "the reference"));
    memset(res, 0, sizeof *res);
    res->same_shape = got->rank == ref->rank &&
                      (got->rank == 0 ||
                       memcmp(got->dims, ref->dims, (size_t)got->rank * sizeof *got->dims) == 0);
    if (!res->same_shape) {
        kn_error_clear();
        return KILN_OK; /* passed 0 */
    }
    size_t n;
    npy_volume(got->rank, got->dims, &n);
    double *ab = malloc((n ? n : 1) * sizeof *ab), *re = malloc((n ? n : 1) * sizeof *re);
    if (!ab || !re) {
        free(ab);
        free(re);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "compare '%s': out of memory (%zu elements)",
                        got->name ? got->name : "", n);
    }
    double atol = o->atol, rtol = o->rtol;
    double sum_g = 0, sum_r = 0, min_g = INFINITY, max_g = -INFINITY, min_r = INFINITY,
           max_r = -INFINITY, worst_abs = -1;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double g = npy_get(got->dtype, got->data, i), r = npy_get(ref->dtype, ref->data, i);
        if (isfinite(g)) {
            res->finite_got++;
            sum_g += g;
            min_g = g < min_g ? g : min_g;
            max_g = g > max_g ? g : max_g;
        }
        if (isfinite(r)) {
            res->finite_ref++;
            sum_r += r;
            min_r = r < min_r ? r : min_r;
            max_r = r > max_r ? r : max_r;
        }
        res->nan_got += isnan(g) != 0;
        res->nan_ref += isnan(r) != 0;
        res->inf_got += isinf(g) != 0;
        res->inf_ref += isinf(r) != 0;
        double a, rel;
        if ((isnan(g) && isnan(r)) || (isinf(g) && isinf(r) && (g > 0) == (r > 0))) {
            a = rel = 0; /* the same special value */
        } else if (isnan(g) || isnan(r) || isinf(g) || isinf(r)) {
            a = rel = INFINITY;
        } else {
            a = fabs(g - r);
            rel = a == 0 ? 0 : r == 0 ? INFINITY : a / fabs(r);
        }
        ab[i] = a;
        re[i] = rel;
        if (a > atol && rel > rtol)
            res->mismatches++;
        if (a > worst_abs) {
            worst_abs = a;
            worst = i;
        }
    }
    res->count = n;
    res->worst_index = worst;
    res->worst_got = n ? npy_get(got->dtype, got->data, worst) : 0;
    res->worst_ref = n ? npy_get(ref->dtype, ref->data, worst) : 0;
    if (res->finite_got) {
        res->mean_got = sum_g / (double)res->finite_got;
        res->min_got = min_g;
        res->max_got = max_g;
    }
    if (res->finite_ref) {
        res->mean_ref = sum_r / (double)res->finite_ref;
        res->min_ref = min_r;
        res->max_ref = max_r;
    }
    stats_of(ab, n, o->quantile, &res->max_abs, &res->mean_abs, &res->median_abs,
             &res->quantile_abs);
    stats_of(re, n, o->quantile, &res->max_rel, &res->mean_rel, &res->median_rel,
             &res->quantile_rel);
    free(ab);
    free(re);
    switch (o->stat) {
    case KILN_COMPARE_ELEMWISE: res->passed = res->mismatches == 0; break;
    case KILN_COMPARE_MAX: res->passed = !(res->max_abs > atol && res->max_rel > rtol); break;
    case KILN_COMPARE_MEAN: res->passed = !(res->mean_abs > atol && res->mean_rel > rtol); break;
    default: res->passed = !(res->median_abs > atol && res->median_rel > rtol); break;
    }
    kn_error_clear();
    return KILN_OK;
}
