/* k_elementwise_reduce.c - CPU reference kernels that work along axes:
 * Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax and CumSum/CumProd. Elements are
 * gathered along the axis into stack buffers, converted to double (or int64
 * for exact integer sums and extremes) and folded. */
#include <math.h>
#include <string.h>

#include "k_elementwise.h"

static int64_t numel_of(const kb_tensor *t) { return kn_numel(t->rank, t->dims); }

/* Split dims around one axis into outer x axis x inner. */
static void split3(const kb_tensor *t, int axis, int64_t *o, int64_t *r, int64_t *i) {
    *o = 1;
    *i = 1;
    for (int d = 0; d < axis; d++)
        *o *= t->dims[d];
    *r = t->rank ? t->dims[axis] : 1;
    for (int d = axis + 1; d < t->rank; d++)
        *i *= t->dims[d];
}

static kiln_status norm_axis(const kn_node *n, int64_t axis, int rank, int *out) {
    if (axis < -(int64_t)rank || axis >= (rank ? rank : 1))
        return kn_node_error(n, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d",
                             (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

/* ---------------- Reduce* ---------------- */

typedef enum red_op {
    R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_SUMSQ
} red_op;

static int red_op_of(const char *op_type) {
    static const char *const names[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                        "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                                        "ReduceLogSumExp", "ReduceSumSquare"};
    for (int i = 0; i < (int)KN_ARRAY_LEN(names); i++)
        if (strcmp(op_type, names[i]) == 0)
            return i;
    return -1;
}

/* The axes of a Reduce* node: from the axes input when present, else the
 * attribute. Empty means all axes, or a copy with noop_with_empty_axes. */
static kiln_status reduce_axes(const kn_node *n, const kb_tensor *in, int n_in, uint32_t *mask,
                               bool *noop) {
    int rank = in[0].rank;
    int64_t axes[64];
    int64_t na = 0;
    *noop = false;
    *mask = 0;
    if (n_in >= 2 && in[1].dtype != KILN_DTYPE_UNDEFINED) {
        na = numel_of(&in[1]);
        if (na > 64)
            return kn_node_error(n, KILN_ERR_SHAPE, "too many axes (%lld)", (long long)na);
        if (na > 0)
            kb_ew_load(in[1].dtype, in[1].data, na, KB_I64, axes);
    } else {
        size_t cnt;
        const int64_t *a = kn_attr_ints(n, "axes", &cnt);
        if (cnt > 64)
            return kn_node_error(n, KILN_ERR_SHAPE, "too many axes (%zu)", cnt);
        for (size_t k = 0; k < cnt; k++)
            axes[k] = a[k];
        na = (int64_t)cnt;
    }
    if (na == 0) {
        if (kn_attr_int(n, "noop_with_empty_axes", 0))
            *noop = true;
        else
            *mask = rank ? (uint32_t)((1u << rank) - 1u) : 0;
        return KILN_OK;
    }
    for (int64_t k = 0; k < na; k++) {
        int ax = 0;
        KN_TRY(norm_axis(n, axes[k], rank, &ax));
        *mask |= 1u << ax;
    }
    return KILN_OK;
}

/* Collapsed reduction geometry: kept and reduced dim groups with strides. */
typedef struct red_geom {
    int nk, nr;
    int64_t kdim[KILN_MAX_DIMS], kstr[KILN_MAX_DIMS];
    int64_t rdim[KILN_MAX_DIMS], rstr[KILN_MAX_DIMS];
    int64_t R;      /* reduced elements per output */
    int64_t rl, rs; /* innermost reduced group: length and stride */
} red_geom;

static void red_geom_init(red_geom *g, const kb_tensor *x, uint32_t mask) {
    memset(g, 0, sizeof *g);
    int64_t str[KILN_MAX_DIMS], s = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        str[d] = s;
        s *= x->dims[d];
    }
    int last = -1; /* 0 kept, 1 reduced: kind of the previous non-1 dim */
    for (int d = 0; d < x->rank; d++) {
        if (x->dims[d] == 1)
            continue;
        int red = (mask >> d) & 1u;
        int *cnt = red ? &g->nr : &g->nk;
        int64_t *gd = red ? g->rdim : g->kdim, *gs = red ? g->rstr : g->kstr;
        if (last == red && *cnt > 0) { /* adjacent in memory: merge */
            gd[*cnt - 1] *= x->dims[d];
            gs[*cnt - 1] = str[d];
        } else {
            gd[*cnt] = x->dims[d];
            gs[*cnt] = str[d];
            (*cnt)++;
        }
        last = red;
    }
    g->R = 1;
    for (int k = 0; k < g->nr; k++)
        g->R *= g->rdim[k];
    g->rl = g->nr ? g->rdim[g->nr - 1] : 1;
    g->rs = g->nr ? g->rstr[g->nr - 1] : 0;
}

static int64_t kept_offset(const red_geom *g, int64_t o) {
    int64_t off = 0;
    for (int k = g->nk - 1; k >= 0 && o; k--) {
        off += (o % g->kdim[k]) * g->kstr[k];
        o /= g->kdim[k];
    }
    return off;
}

static int64_t red_offset(const red_geom *g, int64_t q) { /* over all but the last group */
    int64_t off = 0;
    for (int k = g->nr - 2; k >= 0 && q; k--) {
        off += (q % g->rdim[k]) * g->rstr[k];
        q /= g->rdim[k];
    }
    return off;
}

static void int_range(kiln_dtype dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case KILN_DTYPE_BOOL: *lo = 0, *hi = 1; break;
    case KILN_DTYPE_INT8: *lo = INT8_MIN, *hi = INT8_MAX; break;
    case KILN_DTYPE_INT16: *lo = INT16_MIN, *hi = INT16_MAX; break;
    case KILN_DTYPE_INT32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    case KILN_DTYPE_UINT8: *lo = 0, *hi = UINT8_MAX; break;
    case KILN_DTYPE_UINT16: *lo = 0, *hi = UINT16_MAX; break;
    case KILN_DTYPE_UINT32: *lo = 0, *hi = UINT32_MAX; break;
    case KILN_DTYPE_UINT64: *lo = 0, *hi = INT64_MAX; break;
    default: *lo = INT64_MIN, *hi = INT64_MAX; break;
    }
}

static void fold_d(int op, int pass, const double *v, int64_t m, double *acc, double mx) {
    double a = *acc;
    switch (op) {
    case R_SUM: case R_MEAN: case R_LOGSUM: for (int64_t i = 0; i < m; i++) a += v[i]; break;
    case R_PROD: for (int64_t i = 0; i < m; i++) a *= v[i]; break;
    case R_MAX: for (int64_t i = 0; i < m; i++) a = (v[i] > a || v[i] != v[i]) ? v[i] : a; break;
    case R_MIN: for (int64_t i = 0; i < m; i++) a = (v[i] < a || v[i] != v[i]) ? v[i] : a; break;
    case R_L1: for (int64_t i = 0; i < m; i++) a += fabs(v[i]); break;
    case R_L2: case R_SUMSQ: for (int64_t i = 0; i < m; i++) a += v[i] * v[i]; break;
    case R_LOGSUMEXP:
        if (pass == 0)
            for (int64_t i = 0; i < m; i++) a = v[i] > a ? v[i] : a;
        else
            for (int64_t i = 0; i < m; i++) a += exp(v[i] - mx);
        break;
    }
    *acc = a;
}

static void fold_i(int op, const int64_t *v, int64_t m, int64_t *acc) {
    int64_t a = *acc;
    switch (op) {
    case R_SUM: case R_MEAN: for (int64_t i = 0; i < m; i++) a = (int64_t)((uint64_t)a + (uint64_t)v[i]); break;
    case R_PROD: for (int64_t i = 0; i < m; i++) a = (int64_t)((uint64_t)a * (uint64_t)v[i]); break;
    case R_MAX: for (int64_t i = 0; i < m; i++) a = v[i] > a ? v[i] : a; break;
    case R_MIN: for (int64_t i = 0; i < m; i++) a = v[i] < a ? v[i] : a; break;
    case R_L1: /* |INT64_MIN| and the sum wrap, as Abs and Add of int64 do */
        for (int64_t i = 0; i < m; i++)
            a = (int64_t)((uint64_t)a + (v[i] < 0 ? 0u - (uint64_t)v[i] : (uint64_t)v[i]));
        break;
    case R_SUMSQ: for (int64_t i = 0; i < m; i++) a = (int64_t)((uint64_t)a + (uint64_t)v[i] * (uint64_t)v[i]); break;
    default: break;
    }
    *acc = a;
}

/* Visit the reduced elements of output o in chunks, converted to ct. */
static void red_visit(const red_geom *g, const kb_tensor *x, int64_t base, kb_ctype ct, int op,
                      int pass, double *dacc, int64_t *iacc, double mx) {
    if (g->R == 0)
        return;
    size_t es = kiln_dtype_size(x->dtype);
    int64_t outer = g->R / g->rl;
    uint64_t raw[KB_EW_CHUNK], buf[KB_EW_CHUNK];
    for (int64_t q = 0; q < outer; q++) {
        int64_t off = base + red_offset(g, q);
        for (int64_t j = 0; j < g->rl; j += KB_EW_CHUNK) {
            int64_t m = g->rl - j < KB_EW_CHUNK ? g->rl - j : KB_EW_CHUNK;
            const uint8_t *src = (const uint8_t *)x->data + (size_t)(off + j * g->rs) * es;
            const void *p = src;
            if (g->rs != 1) {
                kb_ew_gather(src, es, g->rs, m, raw);
                p = raw;
            }
            kb_ew_load(x->dtype, p, m, ct, buf);
            if (ct == KB_F64)
                fold_d(op, pass, (const double *)buf, m, dacc, mx);
            else
                fold_i(op, (const int64_t *)buf, m, iacc);
        }
    }
}

/* Offset of reduced position t, over all reduced groups. */
static int64_t red_offset_all(const red_geom *g, int64_t t) {
    int64_t off = 0;
    for (int k = g->nr - 1; k >= 0 && t; k--) {
        off += (t % g->rdim[k]) * g->rstr[k];
        t /= g->rdim[k];
    }
    return off;
}

/* Elementwise folds for the vector path: acc[i] = f(acc[i], v[i]). */
static void vfold_d(int op, int pass, const double *v, int64_t m, double *acc, const double *mx) {
    switch (op) {
    case R_SUM: case R_MEAN: case R_LOGSUM: for (int64_t i = 0; i < m; i++) acc[i] += v[i]; break;
    case R_PROD: for (int64_t i = 0; i < m; i++) acc[i] *= v[i]; break;
    case R_MAX: for (int64_t i = 0; i < m; i++) acc[i] = (v[i] > acc[i] || v[i] != v[i]) ? v[i] : acc[i]; break;
    case R_MIN: for (int64_t i = 0; i < m; i++) acc[i] = (v[i] < acc[i] || v[i] != v[i]) ? v[i] : acc[i]; break;
    case R_L1: for (int64_t i = 0; i < m; i++) acc[i] += fabs(v[i]); break;
    case R_L2: case R_SUMSQ: for (int64_t i = 0; i < m; i++) acc[i] += v[i] * v[i]; break;
    case R_LOGSUMEXP:
        if (pass == 0)
            for (int64_t i = 0; i < m; i++) acc[i] = v[i] > acc[i] ? v[i] : acc[i];
        else
            for (int64_t i = 0; i < m; i++) acc[i] += exp(v[i] - mx[i]);
        break;
    }
}

static void vfold_i(int op, const int64_t *v, int64_t m, int64_t *acc) {
    for (int64_t i = 0; i < m; i++)
        fold_i(op, &v[i], 1, &acc[i]);
}

typedef struct reduce_vec_units_ctx {
    const red_geom *g;
    const kb_tensor *x;
    kb_tensor *y;
    int op;
    bool exact_int;
    int64_t lo;
    int64_t hi;
    int64_t ik;
    int64_t segs;
    size_t es;
    size_t ys;
    kb_ctype ct;
} reduce_vec_units_ctx;

static void reduce_vec_units(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const reduce_vec_units_ctx *c_ = vc;
    const red_geom *g = c_->g;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    int op = c_->op;
    bool exact_int = c_->exact_int;
    int64_t lo = c_->lo;
    int64_t hi = c_->hi;
    int64_t ik = c_->ik;
    int64_t segs = c_->segs;
    size_t es = c_->es;
    size_t ys = c_->ys;
    kb_ctype ct = c_->ct;
    (void)tid;
    for (int64_t u = lo_; u < hi_; u++) {
        int64_t i0 = (u % segs) * KB_EW_CHUNK, o0 = u / segs * ik + i0;
        int64_t m = ik - i0 < KB_EW_CHUNK ? ik - i0 : KB_EW_CHUNK;
        int64_t base = kept_offset(g, o0);
        uint64_t acc_[KB_EW_CHUNK], mx_[KB_EW_CHUNK], buf_[KB_EW_CHUNK];
        double *acc = (double *)acc_, *mx = (double *)mx_, *v = (double *)buf_;
        int64_t *iacc = (int64_t *)acc_, *iv = (int64_t *)buf_;
        uint8_t *dst = (uint8_t *)y->data + (size_t)o0 * ys;
        if (exact_int) {
            int64_t init = op == R_PROD ? 1 : op == R_MAX ? lo : op == R_MIN ? hi : 0;
            for (int64_t i = 0; i < m; i++)
                iacc[i] = init;
            for (int64_t t = 0; t < g->R; t++) {
                const uint8_t *src = (const uint8_t *)x->data + (size_t)(base + red_offset_all(g, t)) * es;
                kb_ew_load(x->dtype, src, m, ct, iv);
                vfold_i(op, iv, m, iacc);
            }
            if (op == R_MEAN && g->R > 0)
                for (int64_t i = 0; i < m; i++)
                    iacc[i] /= g->R;
            kb_ew_store(y->dtype, dst, m, KB_I64, iacc);
            continue;
        }
        double init = op == R_PROD ? 1.0 : op == R_MAX ? -INFINITY : op == R_MIN ? INFINITY : 0.0;
        if (x->dtype == KILN_DTYPE_FLOAT && y->dtype == KILN_DTYPE_FLOAT &&
            (op == R_SUM || op == R_MEAN || op == R_MAX || op == R_MIN)) {
            /* float in and out (an NHWC global pool): the same folds in the
             * same order, read straight from the floats */
            for (int64_t i = 0; i < m; i++)
                acc[i] = init;
            if (g->nr == 1) { /* one reduced run (H, W merged): rows at a fixed stride */
                const float *src = (const float *)x->data + base;
                float part[KB_EW_CHUNK];
                if (op == R_SUM || op == R_MEAN) {
                    /* float sums over blocks of 32 rows, the blocks added in
                     * double: the vector width of float, the drift of 32 terms */
                    int64_t i = 0;
                    for (; i + 16 <= m; i += 16) /* 16 channels in registers */
                        for (int64_t t0 = 0; t0 < g->R; t0 += 32) {
                            int64_t t1 = t0 + 32 < g->R ? t0 + 32 : g->R;
                            float blk[16] = {0};
                            for (int64_t t = t0; t < t1; t++) {
                                const float *row = src + t * g->rs + i;
                                for (int j = 0; j < 16; j++)
                                    blk[j] += row[j];
                            }
                            for (int j = 0; j < 16; j++)
                                acc[i + j] += (double)blk[j];
                        }
                    for (; i < m; i++)
                        for (int64_t t0 = 0; t0 < g->R; t0 += 32) {
                            int64_t t1 = t0 + 32 < g->R ? t0 + 32 : g->R;
                            float one = 0.f;
                            for (int64_t t = t0; t < t1; t++)
                                one += src[t * g->rs + i];
                            acc[i] += (double)one;
                        }
                } else { /* max / min are exact in float */
                    for (int64_t i = 0; i < m; i++)
                        part[i] = (float)init;
                    for (int64_t t = 0; t < g->R; t++) {
                        const float *row = src + t * g->rs;
                        if (op == R_MAX)
                            for (int64_t i = 0; i < m; i++)
                                part[i] = (row[i] > part[i] || row[i] != row[i]) ? row[i] : part[i];
                        else
                            for (int64_t i = 0; i < m; i++)
                                part[i] = (row[i] < part[i] || row[i] != row[i]) ? row[i] : part[i];
                    }
                    for (int64_t i = 0; i < m; i++)
                        acc[i] = part[i];
                }
            } else
            for (int64_t t = 0; t < g->R; t++) {
                const float *src = (const float *)x->data + base + red_offset_all(g, t);
                if (op == R_SUM || op == R_MEAN)
                    for (int64_t i = 0; i < m; i++)
                        acc[i] += (double)src[i];
                else if (op == R_MAX)
                    for (int64_t i = 0; i < m; i++)
                        acc[i] = (src[i] > acc[i] || src[i] != src[i]) ? (double)src[i] : acc[i];
                else
                    for (int64_t i = 0; i < m; i++)
                        acc[i] = (src[i] < acc[i] || src[i] != src[i]) ? (double)src[i] : acc[i];
            }
            float *yf = (float *)(void *)dst;
            for (int64_t i = 0; i < m; i++)
                yf[i] = (float)(op == R_MEAN ? (g->R ? acc[i] / (double)g->R : NAN) : acc[i]);
            continue;
        }
        int passes = op == R_LOGSUMEXP ? 2 : 1;
        for (int pass = 0; pass < passes; pass++) {
            for (int64_t i = 0; i < m; i++)
                acc[i] = (op == R_LOGSUMEXP && pass == 0) ? -INFINITY : init;
            for (int64_t t = 0; t < g->R; t++) {
                const uint8_t *src = (const uint8_t *)x->data + (size_t)(base + red_offset_all(g, t)) * es;
                kb_ew_load(x->dtype, src, m, ct, v);
                vfold_d(op, pass, v, m, acc, mx);
            }
            if (op == R_LOGSUMEXP && pass == 0)
                for (int64_t i = 0; i < m; i++)
                    mx[i] = acc[i] == -INFINITY ? 0 : acc[i];
        }
        for (int64_t i = 0; i < m; i++) {
            if (op == R_MEAN)
                acc[i] = g->R ? acc[i] / (double)g->R : NAN;
            else if (op == R_L2)
                acc[i] = sqrt(acc[i]);
            else if (op == R_LOGSUM)
                acc[i] = log(acc[i]);
            else if (op == R_LOGSUMEXP)
                acc[i] = log(acc[i]) + mx[i];
        }
        kb_ew_store(y->dtype, dst, m, KB_F64, acc);
    }
}

/* Reductions whose innermost input dim is kept: runs of Ik outputs are
 * contiguous in the input too, so whole rows are folded at once. */
static void reduce_vec(const red_geom *g, const kb_tensor *x, kb_tensor *y, int op, bool exact_int,
                       int64_t lo, int64_t hi, int threads) {
    int64_t ik = g->kdim[g->nk - 1], nout = numel_of(y);
    int64_t segs = (ik + KB_EW_CHUNK - 1) / KB_EW_CHUNK, units = nout / ik * segs;
    size_t es = kiln_dtype_size(x->dtype), ys = kiln_dtype_size(y->dtype);
    kb_ctype ct = exact_int ? KB_I64 : KB_F64;
    {
        reduce_vec_units_ctx c_ = {g, x, y, op, exact_int, lo, hi, ik, segs, es, ys, ct};
        kn_parallel_for(numel_of(x) >= KB_EW_PAR_MIN ? threads : 1, units, 0, reduce_vec_units, &c_);
    }
}

typedef struct reduce_outputs_ctx {
    red_geom g;
    const kb_tensor *x;
    kb_tensor *y;
    int op;
    bool exact_int;
    kb_ctype ct;
    size_t ys;
    int64_t lo;
    int64_t hi;
} reduce_outputs_ctx;

static void reduce_outputs(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const reduce_outputs_ctx *c_ = vc;
    red_geom g = c_->g;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    int op = c_->op;
    bool exact_int = c_->exact_int;
    kb_ctype ct = c_->ct;
    size_t ys = c_->ys;
    int64_t lo = c_->lo;
    int64_t hi = c_->hi;
    (void)tid;
    for (int64_t o = lo_; o < hi_; o++) {
        int64_t base = kept_offset(&g, o);
        uint8_t *dst = (uint8_t *)y->data + (size_t)o * ys;
        if (exact_int) {
            int64_t acc = op == R_PROD ? 1 : op == R_MAX ? lo : op == R_MIN ? hi : 0;
            red_visit(&g, x, base, ct, op, 0, NULL, &acc, 0);
            if (op == R_MEAN && g.R > 0)
                acc /= g.R;
            kb_ew_store(y->dtype, dst, 1, KB_I64, &acc);
            continue;
        }
        double acc = op == R_PROD ? 1.0 : op == R_MAX ? -INFINITY : op == R_MIN ? INFINITY : 0.0;
        double mx = 0;
        if (op == R_LOGSUMEXP) {
            mx = -INFINITY;
            red_visit(&g, x, base, ct, op, 0, &mx, NULL, 0);
            if (mx == -INFINITY) /* all -inf, or nothing: the result is -inf */
                mx = 0;
            acc = 0;
            red_visit(&g, x, base, ct, op, 1, &acc, NULL, mx);
            acc = log(acc) + mx;
        } else {
            red_visit(&g, x, base, ct, op, 0, &acc, NULL, 0);
            if (op == R_MEAN)
                acc = g.R ? acc / (double)g.R : NAN;
            else if (op == R_L2)
                acc = sqrt(acc);
            else if (op == R_LOGSUM)
                acc = log(acc);
        }
        kb_ew_store(y->dtype, dst, 1, KB_F64, &acc);
    }
}

kiln_status kb_ew_run_reduce(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    int op = red_op_of(r->node->op_type);
    int xct = kb_ew_ctype(x->dtype);
    if (op < 0)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "not a reduction");
    if (xct < 0)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "data type %s is not supported",
                             kiln_dtype_name(x->dtype));
    uint32_t mask;
    bool noop;
    KN_TRY(reduce_axes(r->node, r->in, r->n_in, &mask, &noop));
    int64_t nout = numel_of(y);
    if (noop) {
        if (nout > 0 && y->data != x->data)
            memcpy(y->data, x->data, (size_t)nout * kiln_dtype_size(y->dtype));
        return KILN_OK;
    }
    if (nout <= 0)
        return KILN_OK;
    red_geom g;
    red_geom_init(&g, x, mask);
    bool exact_int = (xct == KB_I64 || xct == KB_U64) && op != R_L2 && op != R_LOGSUM &&
                     op != R_LOGSUMEXP;
    kb_ctype ct = exact_int ? KB_I64 : KB_F64;
    size_t ys = kiln_dtype_size(y->dtype);
    int64_t work = numel_of(x), lo, hi; /* the type's range: Max/Min of nothing */
    int_range(x->dtype, &lo, &hi);
    if (g.nk > 0 && g.nr > 0 && g.kstr[g.nk - 1] == 1 && g.kdim[g.nk - 1] >= 4) {
        reduce_vec(&g, x, y, op, exact_int, lo, hi, r->threads);
        return KILN_OK;
    }
    {
        reduce_outputs_ctx c_ = {g, x, y, op, exact_int, ct, ys, lo, hi};
        kn_parallel_for(work >= KB_EW_PAR_MIN ? r->threads : 1, nout, 0, reduce_outputs, &c_);
    }
    return KILN_OK;
}

/* ---------------- ArgMax / ArgMin ---------------- */

typedef struct argmax_units_ctx {
    const kb_tensor *x;
    int64_t *out;
    bool is_max;
    bool last;
    int64_t R;
    int64_t I;
    size_t es;
} argmax_units_ctx;

static void argmax_units(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const argmax_units_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    int64_t *out = c_->out;
    bool is_max = c_->is_max;
    bool last = c_->last;
    int64_t R = c_->R;
    int64_t I = c_->I;
    size_t es = c_->es;
    (void)tid;
    for (int64_t u = lo_; u < hi_; u++) {
        int64_t o = u / I, i = u % I;
        const uint8_t *base = (const uint8_t *)x->data + (size_t)(o * R * I + i) * es;
        uint64_t raw[KB_EW_CHUNK];
        double v[KB_EW_CHUNK];
        double best = 0;
        int64_t bi = 0;
        for (int64_t j = 0; j < R; j += KB_EW_CHUNK) {
            int64_t m = R - j < KB_EW_CHUNK ? R - j : KB_EW_CHUNK;
            kb_ew_gather(base + (size_t)(j * I) * es, es, I, m, raw);
            kb_ew_load(x->dtype, raw, m, KB_F64, v);
            for (int64_t k = 0; k < m; k++) {
                double a = v[k];
                bool take = j + k == 0 ||
                            (is_max ? (last ? a >= best : a > best) : (last ? a <= best : a < best));
                if (take) {
                    best = a;
                    bi = j + k;
                }
            }
        }
        out[u] = bi;
    }
}

typedef struct argmax_cols_ctx {
    const kb_tensor *x;
    int64_t *out;
    bool is_max;
    bool last;
    int64_t R;
    int64_t I;
    size_t es;
    int64_t segs;
} argmax_cols_ctx;

static void argmax_cols(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const argmax_cols_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    int64_t *out = c_->out;
    bool is_max = c_->is_max;
    bool last = c_->last;
    int64_t R = c_->R;
    int64_t I = c_->I;
    size_t es = c_->es;
    int64_t segs = c_->segs;
    (void)tid;
    for (int64_t u = lo_; u < hi_; u++) {
        int64_t o = u / segs, i0 = (u % segs) * KB_EW_CHUNK;
        int64_t m = I - i0 < KB_EW_CHUNK ? I - i0 : KB_EW_CHUNK;
        double best[KB_EW_CHUNK], v[KB_EW_CHUNK];
        int64_t *bi = out + o * I + i0;
        for (int64_t j = 0; j < R; j++) {
            const uint8_t *src = (const uint8_t *)x->data + (size_t)((o * R + j) * I + i0) * es;
            kb_ew_load(x->dtype, src, m, KB_F64, j == 0 ? best : v);
            if (j == 0) {
                for (int64_t k = 0; k < m; k++)
                    bi[k] = 0;
                continue;
            }
            for (int64_t k = 0; k < m; k++) {
                double a = v[k];
                if (is_max ? (last ? a >= best[k] : a > best[k])
                           : (last ? a <= best[k] : a < best[k])) {
                    best[k] = a;
                    bi[k] = j;
                }
            }
        }
    }
}

kiln_status kb_ew_run_argmax(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    if (kb_ew_ctype(x->dtype) < 0)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "data type %s is not supported",
                             kiln_dtype_name(x->dtype));
    int axis = 0;
    KN_TRY(norm_axis(r->node, kn_attr_int(r->node, "axis", 0), x->rank, &axis));
    bool is_max = strcmp(r->node->op_type, "ArgMax") == 0;
    bool last = kn_attr_int(r->node, "select_last_index", 0) != 0;
    int64_t O, R, I;
    split3(x, axis, &O, &R, &I);
    if (R == 0 && O * I > 0)
        return kn_node_error(r->node, KILN_ERR_SHAPE, "cannot take the %s over an empty axis",
                             r->node->op_type);
    size_t es = kiln_dtype_size(x->dtype);
    int64_t *out = y->data;
    if (I > 1) { /* compare whole contiguous rows of m columns */
        int64_t segs = (I + KB_EW_CHUNK - 1) / KB_EW_CHUNK;
        {
            argmax_cols_ctx c_ = {x, out, is_max, last, R, I, es, segs};
            kn_parallel_for(O * I * R >= KB_EW_PAR_MIN ? r->threads : 1, O * segs, 0, argmax_cols, &c_);
        }
        return KILN_OK;
    }
    int64_t units = O * I;
    {
        argmax_units_ctx c_ = {x, out, is_max, last, R, I, es};
        kn_parallel_for(O * I * R >= KB_EW_PAR_MIN ? r->threads : 1, units, 0, argmax_units, &c_);
    }
    return KILN_OK;
}

/* ---------------- Softmax / LogSoftmax / Hardmax ---------------- */

enum { SM_SOFTMAX, SM_LOG, SM_HARD };

/* Contiguous float rows: the common case (attention, classifier heads). */
static void softmax_row_f32(int kind, const float *x, float *y, int64_t R) {
    float mx = x[0];
    int64_t am = 0;
    for (int64_t k = 1; k < R; k++)
        if (x[k] > mx) {
            mx = x[k];
            am = k;
        }
    if (kind == SM_HARD) {
        for (int64_t k = 0; k < R; k++)
            y[k] = k == am ? 1.f : 0.f;
        return;
    }
    double sum = 0;
    if (kind == SM_SOFTMAX) {
        for (int64_t k = 0; k < R; k++) {
            y[k] = expf(x[k] - mx);
            sum += y[k];
        }
        float inv = (float)(1.0 / sum);
        for (int64_t k = 0; k < R; k++)
            y[k] *= inv;
    } else {
        for (int64_t k = 0; k < R; k++)
            sum += expf(x[k] - mx);
        float lse = (float)log(sum) + mx;
        for (int64_t k = 0; k < R; k++)
            y[k] = x[k] - lse;
    }
}

/* Float, axis not innermost: m adjacent columns of an [R, I] block at once,
 * so every access is a contiguous row segment. */
static void softmax_cols_f32(int kind, const float *x, float *y, int64_t R, int64_t I, int64_t m) {
    float mx[KB_EW_CHUNK], sum[KB_EW_CHUNK];
    int64_t am[KB_EW_CHUNK];
    for (int64_t k = 0; k < m; k++)
        mx[k] = x[k], am[k] = 0, sum[k] = 0;
    for (int64_t r = 1; r < R; r++)
        for (int64_t k = 0; k < m; k++)
            if (x[r * I + k] > mx[k])
                mx[k] = x[r * I + k], am[k] = r;
    if (kind == SM_HARD) {
        for (int64_t r = 0; r < R; r++)
            for (int64_t k = 0; k < m; k++)
                y[r * I + k] = r == am[k] ? 1.f : 0.f;
        return;
    }
    if (kind == SM_SOFTMAX) {
        for (int64_t r = 0; r < R; r++)
            for (int64_t k = 0; k < m; k++) {
                float e = expf(x[r * I + k] - mx[k]);
                y[r * I + k] = e;
                sum[k] += e;
            }
        for (int64_t k = 0; k < m; k++)
            sum[k] = 1.f / sum[k];
        for (int64_t r = 0; r < R; r++)
            for (int64_t k = 0; k < m; k++)
                y[r * I + k] *= sum[k];
        return;
    }
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < m; k++)
            sum[k] += expf(x[r * I + k] - mx[k]);
    for (int64_t k = 0; k < m; k++)
        sum[k] = logf(sum[k]) + mx[k];
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < m; k++)
            y[r * I + k] = x[r * I + k] - sum[k];
}

/* Any float type, any stride: three passes over gathered chunks. */
static void softmax_row_any(int kind, const kb_tensor *x, kb_tensor *y, int64_t start, int64_t R,
                            int64_t I) {
    size_t es = kiln_dtype_size(x->dtype);
    const uint8_t *xb = (const uint8_t *)x->data + (size_t)start * es;
    uint8_t *yb = (uint8_t *)y->data + (size_t)start * es;
    uint64_t raw[KB_EW_CHUNK];
    double v[KB_EW_CHUNK];
    double mx = -INFINITY, sum = 0;
    int64_t am = 0;
    for (int64_t j = 0; j < R; j += KB_EW_CHUNK) {
        int64_t m = R - j < KB_EW_CHUNK ? R - j : KB_EW_CHUNK;
        kb_ew_gather(xb + (size_t)(j * I) * es, es, I, m, raw);
        kb_ew_load(x->dtype, raw, m, KB_F64, v);
        for (int64_t k = 0; k < m; k++)
            if (j + k == 0 || v[k] > mx) {
                mx = v[k];
                am = j + k;
            }
    }
    if (kind != SM_HARD)
        for (int64_t j = 0; j < R; j += KB_EW_CHUNK) {
            int64_t m = R - j < KB_EW_CHUNK ? R - j : KB_EW_CHUNK;
            kb_ew_gather(xb + (size_t)(j * I) * es, es, I, m, raw);
            kb_ew_load(x->dtype, raw, m, KB_F64, v);
            for (int64_t k = 0; k < m; k++)
                sum += exp(v[k] - mx);
        }
    double lse = log(sum) + mx;
    for (int64_t j = 0; j < R; j += KB_EW_CHUNK) {
        int64_t m = R - j < KB_EW_CHUNK ? R - j : KB_EW_CHUNK;
        if (kind == SM_HARD) {
            for (int64_t k = 0; k < m; k++)
                v[k] = j + k == am ? 1.0 : 0.0;
        } else {
            kb_ew_gather(xb + (size_t)(j * I) * es, es, I, m, raw);
            kb_ew_load(x->dtype, raw, m, KB_F64, v);
            for (int64_t k = 0; k < m; k++)
                v[k] = kind == SM_SOFTMAX ? exp(v[k] - mx) / sum : v[k] - lse;
        }
        kb_ew_store(y->dtype, raw, m, KB_F64, v);
        kb_ew_scatter(yb + (size_t)(j * I) * es, es, I, m, raw);
    }
}

typedef struct softmax_rows_ctx {
    const kb_tensor *x;
    kb_tensor *y;
    int kind;
    int64_t R;
    int64_t I;
    bool fast;
} softmax_rows_ctx;

static void softmax_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const softmax_rows_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    int kind = c_->kind;
    int64_t R = c_->R;
    int64_t I = c_->I;
    bool fast = c_->fast;
    (void)tid;
    for (int64_t u = lo_; u < hi_; u++) {
        int64_t o = u / I, i = u % I;
        if (fast)
            softmax_row_f32(kind, (const float *)x->data + o * R, (float *)y->data + o * R, R);
        else
            softmax_row_any(kind, x, y, o * R * I + i, R, I);
    }
}

typedef struct softmax_cols_ctx {
    const kb_tensor *x;
    kb_tensor *y;
    int kind;
    int64_t R;
    int64_t I;
    int64_t segs;
} softmax_cols_ctx;

static void softmax_cols(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const softmax_cols_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    int kind = c_->kind;
    int64_t R = c_->R;
    int64_t I = c_->I;
    int64_t segs = c_->segs;
    (void)tid;
    for (int64_t u = lo_; u < hi_; u++) {
        int64_t o = u / segs, i0 = (u % segs) * KB_EW_CHUNK;
        int64_t m = I - i0 < KB_EW_CHUNK ? I - i0 : KB_EW_CHUNK;
        softmax_cols_f32(kind, (const float *)x->data + o * R * I + i0,
                         (float *)y->data + o * R * I + i0, R, I, m);
    }
}

kiln_status kb_ew_run_softmax(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    const char *op = r->node->op_type;
    int kind = strcmp(op, "LogSoftmax") == 0 ? SM_LOG : strcmp(op, "Hardmax") == 0 ? SM_HARD
                                                                                    : SM_SOFTMAX;
    int ct = kb_ew_ctype(x->dtype);
    if (ct != KB_F32 && ct != KB_F64)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "data type %s is not supported",
                             kiln_dtype_name(x->dtype));
    bool legacy = r->node->opset > 0 && r->node->opset < 13;
    int axis = 0;
    KN_TRY(norm_axis(r->node, kn_attr_int(r->node, "axis", legacy ? 1 : -1), x->rank, &axis));
    int64_t O, R, I;
    split3(x, axis, &O, &R, &I);
    if (legacy) { /* coerce to 2-D: everything from axis on is one row */
        R *= I;
        I = 1;
    }
    if (x->rank == 0)
        O = R = I = 1;
    int64_t units = O * I;
    if (units <= 0 || R <= 0)
        return KILN_OK;
    if (x->dtype == KILN_DTYPE_FLOAT && I > 1) {
        int64_t segs = (I + KB_EW_CHUNK - 1) / KB_EW_CHUNK;
        {
            softmax_cols_ctx c_ = {x, y, kind, R, I, segs};
            kn_parallel_for(units * R >= KB_EW_PAR_MIN ? r->threads : 1, O * segs, 0, softmax_cols, &c_);
        }
        return KILN_OK;
    }
    bool fast = x->dtype == KILN_DTYPE_FLOAT;
    {
        softmax_rows_ctx c_ = {x, y, kind, R, I, fast};
        kn_parallel_for(units * R >= KB_EW_PAR_MIN ? r->threads : 1, units, 0, softmax_rows, &c_);
    }
    return KILN_OK;
}

/* ---------------- CumSum / CumProd ---------------- */

typedef struct cumsum_units_ctx {
    const kb_tensor *x;
    kb_tensor *y;
    bool prod;
    bool exclusive;
    bool reverse;
    int64_t R;
    int64_t I;
    kb_ctype ct;
    size_t es;
} cumsum_units_ctx;

static void cumsum_units(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const cumsum_units_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    kb_tensor *y = c_->y;
    bool prod = c_->prod;
    bool exclusive = c_->exclusive;
    bool reverse = c_->reverse;
    int64_t R = c_->R;
    int64_t I = c_->I;
    kb_ctype ct = c_->ct;
    size_t es = c_->es;
    (void)tid;
    for (int64_t u = lo_; u < hi_; u++) {
        int64_t o = u / I, i = u % I;
        int64_t first = o * R * I + i + (reverse ? (R - 1) * I : 0);
        int64_t step = reverse ? -I : I;
        const uint8_t *xb = (const uint8_t *)x->data + first * (int64_t)es;
        uint8_t *yb = (uint8_t *)y->data + first * (int64_t)es;
        uint64_t raw[KB_EW_CHUNK], v[KB_EW_CHUNK];
        double dacc = prod ? 1 : 0;
        int64_t iacc = prod ? 1 : 0;
        for (int64_t j = 0; j < R; j += KB_EW_CHUNK) {
            int64_t m = R - j < KB_EW_CHUNK ? R - j : KB_EW_CHUNK;
            kb_ew_gather(xb + j * step * (int64_t)es, es, step, m, raw);
            kb_ew_load(x->dtype, raw, m, ct, v);
            if (ct == KB_F64) {
                double *d = (double *)v;
                for (int64_t k = 0; k < m; k++) {
                    double t = d[k], next = prod ? dacc * t : dacc + t;
                    d[k] = exclusive ? dacc : next;
                    dacc = next;
                }
            } else {
                int64_t *d = (int64_t *)v;
                for (int64_t k = 0; k < m; k++) {
                    uint64_t t = (uint64_t)d[k];
                    int64_t next = (int64_t)(prod ? (uint64_t)iacc * t : (uint64_t)iacc + t);
                    d[k] = exclusive ? iacc : next;
                    iacc = next;
                }
            }
            kb_ew_store(y->dtype, raw, m, ct, v);
            kb_ew_scatter(yb + j * step * (int64_t)es, es, step, m, raw);
        }
    }
}

kiln_status kb_ew_run_cumsum(const kb_run *r) {
    const kb_tensor *x = &r->in[0];
    kb_tensor *y = &r->out[0];
    int xct = kb_ew_ctype(x->dtype);
    if (xct < 0)
        return kn_node_error(r->node, KILN_ERR_UNSUPPORTED, "data type %s is not supported",
                             kiln_dtype_name(x->dtype));
    if (r->n_in < 2 || !r->in[1].data || numel_of(&r->in[1]) != 1)
        return kn_node_error(r->node, KILN_ERR_INVALID_ARGUMENT, "axis must be a scalar tensor");
    int64_t ax64;
    kb_ew_load(r->in[1].dtype, r->in[1].data, 1, KB_I64, &ax64);
    int axis = 0;
    KN_TRY(norm_axis(r->node, ax64, x->rank, &axis));
    bool prod = strcmp(r->node->op_type, "CumProd") == 0;
    bool exclusive = kn_attr_int(r->node, "exclusive", 0) != 0;
    bool reverse = kn_attr_int(r->node, "reverse", 0) != 0;
    int64_t O, R, I;
    split3(x, axis, &O, &R, &I);
    kb_ctype ct = (xct == KB_I64 || xct == KB_U64) ? KB_I64 : KB_F64;
    size_t es = kiln_dtype_size(x->dtype);
    int64_t units = O * I;
    {
        cumsum_units_ctx c_ = {x, y, prod, exclusive, reverse, R, I, ct, es};
        kn_parallel_for(units * R >= KB_EW_PAR_MIN ? r->threads : 1, units, 0, cumsum_units, &c_);
    }
    return KILN_OK;
}
