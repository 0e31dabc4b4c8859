/* calib.c - built-in INT8 calibration (see calib.h and docs/accuracy.md,
 * "Calibration"). The float network runs on the caller's batches with the
 * inputs of its Conv / MatMul / Gemm layers marked as outputs; each such
 * tensor gets one symmetric per-tensor scale (threshold / 127) from the
 * chosen calibrator; the weights get symmetric per-output-channel scales;
 * then QuantizeLinear -> DequantizeLinear pairs are inserted in front of the
 * layers, and the ordinary Q/DQ pass (pass_qdq.c) builds the INT8 layers. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"
#include "core/fp8.h"
#include "kiln/kiln_runtime.h"
#include "passes.h"

typedef struct kcal_batch {
    int batch;
    char *input;
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    void *data;
    size_t bytes;
} kcal_batch;

struct kcal_cfg {
    kiln_calib_algo algo;
    double pct;
    char *cache;
    int n, cap;
    kcal_batch *b;
    int n_batches; /* largest batch index + 1 */
};

void kcal_cfg_free(kcal_cfg *c) {
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        kn_free(c->b[i].input);
        kn_free(c->b[i].data);
    }
    kn_free(c->b);
    kn_free(c->cache);
    kn_free(c);
}

static kiln_status slot(kiln_builder_config *cfg, kcal_cfg **out) {
    if (!cfg)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "builder config is NULL");
    kcal_cfg **s = kbld_calib_slot(cfg);
    if (!*s) {
        *s = kn_calloc(1, sizeof **s);
        if (!*s)
            return KILN_ERR_OUT_OF_MEMORY;
        (*s)->algo = KILN_CALIB_ENTROPY;
        (*s)->pct = 99.99;
    }
    *out = *s;
    return KILN_OK;
}

KILN_API kiln_status kiln_builder_config_set_calibration(kiln_builder_config *cfg,
                                                         kiln_calib_algo algo, double percentile,
                                                         const char *cache_path) {
    if (algo != KILN_CALIB_ENTROPY && algo != KILN_CALIB_MINMAX && algo != KILN_CALIB_PERCENTILE)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "unknown calibration algorithm %d", (int)algo);
    if (algo == KILN_CALIB_PERCENTILE && !(percentile > 0 && percentile <= 100))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "calibration percentile %g is outside (0, 100]", percentile);
    kcal_cfg *c;
    KN_TRY(slot(cfg, &c));
    char *p = cache_path && *cache_path ? kn_strdup(cache_path) : NULL;
    if (cache_path && *cache_path && !p)
        return KILN_ERR_OUT_OF_MEMORY;
    kn_free(c->cache);
    c->cache = p;
    c->algo = algo;
    c->pct = algo == KILN_CALIB_PERCENTILE ? percentile : 99.99;
    return KILN_OK;
}

KILN_API kiln_status kiln_builder_config_add_calibration_batch(kiln_builder_config *cfg, int batch,
                                                               const char *input, kiln_dtype dtype,
                                                               int rank, const int64_t *dims,
                                                               const void *data) {
    if (!input || batch < 0 || rank < 0 || rank > KILN_MAX_DIMS || (rank && !dims) || !data)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "calibration batch %d of '%s': bad argument",
                        batch, input ? input : "(null)");
    size_t es = kiln_dtype_size(dtype);
    if (!es)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "calibration batch %d of '%s': bad dtype", batch,
                        input);
    size_t n = 1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "calibration batch %d of '%s': negative dimension", batch, input);
        n *= (size_t)dims[d];
    }
    kcal_cfg *c;
    KN_TRY(slot(cfg, &c));
    for (int i = 0; i < c->n; i++)
        if (c->b[i].batch == batch && strcmp(c->b[i].input, input) == 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "calibration batch %d of '%s' given twice",
                            batch, input);
    KN_TRY(kn_grow((void **)&c->b, &c->cap, c->n + 1, sizeof *c->b));
    kcal_batch *b = &c->b[c->n];
    memset(b, 0, sizeof *b);
    b->batch = batch;
    b->dtype = dtype;
    b->rank = rank;
    for (int d = 0; d < rank; d++)
        b->dims[d] = dims[d];
    b->bytes = n * es;
    b->input = kn_strdup(input);
    b->data = kn_malloc(b->bytes ? b->bytes : 1);
    if (!b->input || !b->data) {
        kn_free(b->input);
        kn_free(b->data);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    memcpy(b->data, data, b->bytes);
    c->n++;
    if (batch + 1 > c->n_batches)
        c->n_batches = batch + 1;
    return KILN_OK;
}

/* ---------------- calibrators ---------------- */

double kcal_threshold_minmax(double amax) { return amax; }

void kcal_hist_add(double *hist, int nbins, double amax, const float *x, size_t n) {
    double k = amax > 0 ? nbins / amax : 0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)x[i]);
        if (!(a > 0))
            continue; /* NaN, or a zero: exact at any scale (ReLU's half of
                       * the values would otherwise pull the entropy
                       * threshold down) */
        double f = a * k;
        int j = f >= nbins ? nbins - 1 : (int)f;
        hist[j] += 1;
    }
}

double kcal_threshold_percentile(const double *hist, int nbins, double amax, double pct) {
    double total = 0;
    for (int i = 0; i < nbins; i++)
        total += hist[i];
    if (total <= 0)
        return amax;
    double want = pct / 100.0 * total, cum = 0;
    for (int i = 0; i < nbins; i++) {
        cum += hist[i];
        if (cum >= want)
            return (i + 1) * (amax / nbins);
    }
    return amax;
}

double kcal_threshold_entropy(const double *hist, int nbins, double amax, int levels) {
    if (nbins <= levels)
        return amax;
    double *p = kn_malloc(sizeof(double) * (size_t)nbins);
    double *q = kn_malloc(sizeof(double) * (size_t)nbins);
    if (!p || !q) {
        kn_free(p);
        kn_free(q);
        return amax;
    }
    double tail = 0; /* counts at or past bin i */
    for (int j = levels; j < nbins; j++)
        tail += hist[j];
    double best = INFINITY;
    int best_i = nbins;
    for (int i = levels; i <= nbins; i++) {
        /* P: the first i bins, the outliers summed into the last */
        double ps = 0;
        for (int j = 0; j < i; j++)
            p[j] = hist[j];
        p[i - 1] += tail;
        for (int j = 0; j < i; j++)
            ps += p[j];
        if (i < nbins)
            tail -= hist[i];
        if (ps <= 0)
            continue;
        /* Q: the first i bins (no outliers) merged into `levels` levels and
         * spread back evenly over the bins that were not empty */
        double qs = 0;
        for (int k = 0; k < levels; k++) {
            int a = (int)((int64_t)k * i / levels), e = (int)((int64_t)(k + 1) * i / levels);
            double sum = 0;
            int nz = 0;
            for (int j = a; j < e; j++) {
                sum += hist[j];
                nz += hist[j] != 0;
            }
            for (int j = a; j < e; j++)
                q[j] = hist[j] != 0 ? sum / nz : 0;
            qs += sum;
        }
        if (qs <= 0)
            continue;
        /* Q smoothed where P has mass and Q none (the outliers' bin): such
         * a bin gets a small share eps, taken evenly from Q's other bins,
         * so that a clipped tail costs a finite divergence */
        int zeros = 0, nonzero = 0;
        for (int j = 0; j < i; j++) {
            zeros += p[j] > 0 && q[j] <= 0;
            nonzero += q[j] > 0;
        }
        const double eps = 1e-4;
        double take = nonzero ? eps * zeros / nonzero : 0;
        double kl = 0;
        for (int j = 0; j < i; j++) {
            if (p[j] <= 0)
                continue;
            double pj = p[j] / ps, qj = q[j] > 0 ? q[j] / qs - take : eps;
            if (qj <= 0)
                qj = eps;
            kl += pj * log(pj / qj);
        }
        if (kl < best) {
            best = kl;
            best_i = i;
        }
    }
    kn_free(p);
    kn_free(q);
    return best_i * (amax / nbins);
}

/* ---------------- the layers to quantize ---------------- */

typedef struct target {
    int node;
    int act[2];  /* activation inputs (tensor indices; -1 none) */
    int weight;  /* constant weight tensor, or -1 (MatMul of two activations) */
    int axis;    /* the weight's output-channel axis (-1: per tensor) */
} target;

static bool kept_float(const kiln_builder_config *cfg, const char *name) {
    kiln_dtype t = kbld_layer_precision(cfg, name ? name : "");
    if (t == KILN_DTYPE_UNDEFINED)
        t = kbld_layer_precision(cfg, "*");
    return t == KILN_DTYPE_FLOAT || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

static bool is_float_const(const kn_net *net, int t) {
    return t >= 0 && (net->tensors[t].flags & KN_T_CONST) &&
           net->tensors[t].value.dtype == KILN_DTYPE_FLOAT;
}

static bool is_op(const kn_node *n, const char *op) {
    return !n->dead && (!n->domain || !*n->domain) && strcmp(n->op_type, op) == 0;
}

static kiln_status find_targets(const kn_net *net, const kiln_builder_config *cfg, target **out,
                                int *count) {
    target *t = kn_calloc((size_t)net->n_nodes + 1, sizeof *t);
    if (!t)
        return KILN_ERR_OUT_OF_MEMORY;
    int n = 0;
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *nd = &net->nodes[i];
        bool conv = is_op(nd, "Conv"), mm = is_op(nd, "MatMul"), gemm = is_op(nd, "Gemm");
        if (!(conv || mm || gemm) || nd->n_in < 2 || nd->in[0] < 0 || nd->in[1] < 0)
            continue;
        if (kept_float(cfg, nd->name)) {
            kn_log(KILN_LOG_INFO, "calibration: layer '%s' stays in float (layer precision)", nd->name);
            continue;
        }
        if (net->tensors[nd->in[0]].flags & KN_T_CONST)
            continue;
        if (gemm && kn_attr_int(nd, "transA", 0) != 0)
            continue;
        target g = {i, {nd->in[0], -1}, -1, -1};
        int w = nd->in[1];
        if (is_float_const(net, w)) {
            int r = net->tensors[w].value.rank;
            g.weight = w;
            if (conv)
                g.axis = r >= 2 ? 0 : -1;
            else if (gemm)
                g.axis = r == 2 ? (kn_attr_int(nd, "transB", 0) ? 0 : 1) : -1;
            else
                g.axis = r >= 2 ? r - 1 : -1;
        } else if (mm && !(net->tensors[w].flags & KN_T_CONST)) {
            g.act[1] = w;
        } else {
            continue;
        }
        t[n++] = g;
    }
    *out = t;
    *count = n;
    return KILN_OK;
}

/* ---------------- statistics ---------------- */

static const kcal_batch *batch_of(const kcal_cfg *c, int b, const char *input) {
    for (int i = 0; i < c->n; i++)
        if (c->b[i].batch == b && strcmp(c->b[i].input, input) == 0)
            return &c->b[i];
    return NULL;
}

static bool is_input(const kn_net *net, int t) { return (net->tensors[t].flags & KN_T_INPUT) != 0; }

typedef struct run {
    kiln_engine *eng;
    kiln_context *ctx;
    int n_bufs;
    void **bufs;
} run;

static void run_free_bufs(run *r) {
    for (int i = 0; i < r->n_bufs; i++)
        if (r->bufs[i])
            kiln_engine_free(r->eng, r->bufs[i]);
    r->n_bufs = 0;
}

/* Build the float network with the activations as outputs. */
static kiln_status stats_engine(const kn_net *net, const kiln_builder_config *cfg,
                                const kcal_cfg *c, const int *acts, int n_acts, run *r) {
    kn_net *cl = NULL;
    KN_TRY(kn_net_clone(net, &cl));
    kiln_status st = KILN_OK;
    for (int a = 0; a < n_acts && st == KILN_OK; a++)
        if (!is_input(net, acts[a]))
            st = kiln_network_mark_output(cl, net->tensors[acts[a]].name);
    kiln_builder_config *tc = NULL;
    if (st == KILN_OK)
        st = kiln_builder_config_create(&tc);
    if (st == KILN_OK)
        st = kiln_builder_config_set_backend(tc, kbld_cfg_backend(cfg));
    int prof = 0;
    if (st == KILN_OK) {
        kiln_builder_config_set_flags(tc, KILN_BUILDER_FLAG_NO_TIMING);
        kiln_builder_config_set_threads(tc, kbld_cfg_threads(cfg));
        st = kiln_builder_config_add_profile(tc, &prof);
    }
    /* one profile spanning the batches' shapes */
    for (int i = 0; i < net->n_inputs && st == KILN_OK; i++) {
        const char *name = net->tensors[net->inputs[i]].name;
        int64_t mn[KILN_MAX_DIMS], mx[KILN_MAX_DIMS], op[KILN_MAX_DIMS];
        int rank = -1;
        for (int b = 0; b < c->n_batches && st == KILN_OK; b++) {
            const kcal_batch *x = batch_of(c, b, name);
            if (!x) {
                st = kn_error(KILN_ERR_INVALID_ARGUMENT,
                              "calibration: batch %d has no data for input '%s'", b, name);
                break;
            }
            if (rank < 0) {
                rank = x->rank;
                for (int d = 0; d < rank; d++)
                    mn[d] = mx[d] = op[d] = x->dims[d];
            } else if (x->rank != rank) {
                st = kn_error(KILN_ERR_INVALID_ARGUMENT,
                              "calibration: batches of input '%s' differ in rank", name);
            } else {
                for (int d = 0; d < rank; d++) {
                    mn[d] = x->dims[d] < mn[d] ? x->dims[d] : mn[d];
                    mx[d] = x->dims[d] > mx[d] ? x->dims[d] : mx[d];
                }
            }
        }
        if (st == KILN_OK && rank >= 0)
            st = kiln_builder_config_set_shape(tc, prof, name, rank, mn, op, mx);
    }
    void *plan = NULL;
    size_t size = 0;
    if (st == KILN_OK)
        st = kiln_build_serialized(cl, tc, &plan, &size);
    kiln_builder_config_destroy(tc);
    kn_net_free(cl);
    if (st == KILN_OK)
        st = kiln_engine_load(plan, size, &r->eng);
    kiln_free(plan);
    if (st == KILN_OK)
        st = kiln_context_create(r->eng, &r->ctx);
    if (st != KILN_OK)
        return kn_error_wrap(st, "calibration: building the float network failed");
    return KILN_OK;
}

/* Run batch b; *host[a] is activation a's values (float, *count[a] of them;
 * kn_free'd by the caller unless it is the batch's own data: owned[a]). */
static kiln_status run_batch(const kn_net *net, const kcal_cfg *c, run *r, int b, const int *acts,
                             int n_acts, float **host, size_t *count, bool *owned) {
    int nio = kiln_engine_num_io_tensors(r->eng);
    r->bufs = kn_calloc((size_t)nio + 1, sizeof(void *));
    if (!r->bufs)
        return KILN_ERR_OUT_OF_MEMORY;
    r->n_bufs = nio;
    kiln_status st = KILN_OK;
    for (int a = 0; a < n_acts; a++) {
        host[a] = NULL;
        owned[a] = true;
    }
    for (int i = 0; i < nio && st == KILN_OK; i++) {
        const char *name = kiln_engine_io_tensor_name(r->eng, i);
        if (kiln_engine_tensor_io_mode(r->eng, name) != KILN_IO_INPUT)
            continue;
        const kcal_batch *x = batch_of(c, b, name);
        if (!x) {
            st = kn_error(KILN_ERR_INVALID_ARGUMENT,
                          "calibration: batch %d has no data for input '%s'", b, name);
            break;
        }
        if (x->dtype != kiln_engine_tensor_dtype(r->eng, name)) {
            st = kn_error(KILN_ERR_INVALID_ARGUMENT,
                          "calibration: batch %d of input '%s' has the wrong type", b, name);
            break;
        }
        st = kiln_context_set_input_shape(r->ctx, name, x->rank, x->dims);
        if (st == KILN_OK)
            st = kiln_engine_alloc(r->eng, x->bytes ? x->bytes : 1, &r->bufs[i]);
        if (st == KILN_OK)
            st = kiln_engine_copy(r->eng, r->bufs[i], x->data, x->bytes, KILN_COPY_TO_DEVICE);
        if (st == KILN_OK)
            st = kiln_context_set_tensor_address(r->ctx, name, r->bufs[i]);
    }
    for (int i = 0; i < nio && st == KILN_OK; i++) {
        const char *name = kiln_engine_io_tensor_name(r->eng, i);
        if (kiln_engine_tensor_io_mode(r->eng, name) == KILN_IO_INPUT)
            continue;
        int64_t dims[KILN_MAX_DIMS];
        int rank = kiln_context_tensor_shape(r->ctx, name, dims);
        if (rank < 0) {
            st = kn_error(KILN_ERR_INTERNAL, "calibration: no shape for '%s'", name);
            break;
        }
        size_t n = 1;
        for (int d = 0; d < rank; d++)
            n *= (size_t)(dims[d] > 0 ? dims[d] : 0);
        size_t bytes = n * kiln_dtype_size(kiln_engine_tensor_dtype(r->eng, name));
        st = kiln_engine_alloc(r->eng, bytes ? bytes : 1, &r->bufs[i]);
        if (st == KILN_OK)
            st = kiln_context_set_tensor_address(r->ctx, name, r->bufs[i]);
    }
    if (st == KILN_OK)
        st = kiln_context_enqueue(r->ctx, NULL);
    if (st == KILN_OK)
        st = kiln_context_synchronize(r->ctx, NULL);
    for (int a = 0; a < n_acts && st == KILN_OK; a++) {
        const char *name = net->tensors[acts[a]].name;
        count[a] = 0;
        owned[a] = false;
        if (is_input(net, acts[a])) {
            const kcal_batch *x = batch_of(c, b, name);
            if (x->dtype == KILN_DTYPE_FLOAT) {
                host[a] = x->data;
                count[a] = x->bytes / sizeof(float);
                owned[a] = true;
            }
            continue;
        }
        if (kiln_engine_tensor_dtype(r->eng, name) != KILN_DTYPE_FLOAT)
            continue;
        int64_t dims[KILN_MAX_DIMS];
        int rank = kiln_context_tensor_shape(r->ctx, name, dims);
        size_t n = 1;
        for (int d = 0; d < rank; d++)
            n *= (size_t)(dims[d] > 0 ? dims[d] : 0);
        host[a] = kn_malloc(n * sizeof(float) + 1);
        if (!host[a]) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        count[a] = n;
        void *dev = kiln_context_tensor_address(r->ctx, name);
        st = kiln_engine_copy(r->eng, host[a], dev, n * sizeof(float), KILN_COPY_TO_HOST);
    }
    run_free_bufs(r);
    kn_free(r->bufs);
    r->bufs = NULL;
    return st;
}

static void free_host(int n_acts, float **host, bool *owned) {
    for (int a = 0; a < n_acts; a++) {
        if (!owned[a])
            kn_free(host[a]);
        host[a] = NULL;
        owned[a] = true;
    }
}

static kiln_status collect(const kn_net *net, const kiln_builder_config *cfg, const kcal_cfg *c,
                           const int *acts, int n_acts, double *thr) {
    run r = {0};
    kiln_status st = stats_engine(net, cfg, c, acts, n_acts, &r);
    double *amax = kn_calloc((size_t)n_acts + 1, sizeof *amax);
    double *hist = kn_calloc((size_t)n_acts * KCAL_BINS + 1, sizeof *hist);
    float **host = kn_calloc((size_t)n_acts + 1, sizeof *host);
    size_t *count = kn_calloc((size_t)n_acts + 1, sizeof *count);
    bool *owned = kn_calloc((size_t)n_acts + 1, sizeof *owned);
    bool *seen = kn_calloc((size_t)n_acts + 1, sizeof *seen);
    if (st == KILN_OK && (!amax || !hist || !host || !count || !owned || !seen))
        st = KILN_ERR_OUT_OF_MEMORY;
    int passes = c->algo == KILN_CALIB_MINMAX ? 1 : 2;
    for (int pass = 0; pass < passes && st == KILN_OK; pass++) {
        for (int b = 0; b < c->n_batches && st == KILN_OK; b++) {
            st = run_batch(net, c, &r, b, acts, n_acts, host, count, owned);
            for (int a = 0; a < n_acts && st == KILN_OK; a++) {
                if (!host[a])
                    continue;
                seen[a] = true;
                if (pass == 0) {
                    for (size_t i = 0; i < count[a]; i++) {
                        double v = fabs((double)host[a][i]);
                        if (v > amax[a] && v <= DBL_MAX)
                            amax[a] = v;
                    }
                } else {
                    kcal_hist_add(hist + (size_t)a * KCAL_BINS, KCAL_BINS, amax[a], host[a], count[a]);
                }
            }
            free_host(n_acts, host, owned);
        }
    }
    for (int a = 0; a < n_acts && st == KILN_OK; a++) {
        double *h = hist + (size_t)a * KCAL_BINS;
        if (!seen[a])
            thr[a] = -1;
        else if (amax[a] <= 0)
            thr[a] = 1; /* all zeros: any scale represents them */
        else if (c->algo == KILN_CALIB_MINMAX)
            thr[a] = kcal_threshold_minmax(amax[a]);
        else if (c->algo == KILN_CALIB_PERCENTILE)
            thr[a] = kcal_threshold_percentile(h, KCAL_BINS, amax[a], c->pct);
        else
            thr[a] = kcal_threshold_entropy(h, KCAL_BINS, amax[a], KCAL_LEVELS);
    }
    kn_free(amax);
    kn_free(hist);
    kn_free(host);
    kn_free(count);
    kn_free(owned);
    kn_free(seen);
    kiln_context_destroy(r.ctx);
    kiln_engine_destroy(r.eng);
    return st;
}

/* ---------------- the cache ---------------- */

static const char *algo_name(kiln_calib_algo a) {
    return a == KILN_CALIB_MINMAX ? "minmax" : a == KILN_CALIB_PERCENTILE ? "percentile" : "entropy";
}

/* The header's mark of a cache of FP8 scales (threshold / 448), which an
 * INT8 build must not read as its own (threshold / 127), nor the reverse. */
#define KCAL_FP8_MARK " fp8-e4m3"

static kiln_status write_cache(const char *path, const kcal_cfg *c, const kn_net *net,
                               const int *acts, int n_acts, const float *scale, bool fp8) {
    FILE *f = fopen(path, "w");
    if (!f)
        return kn_error(KILN_ERR_IO, "cannot write calibration cache '%s': %s", path, strerror(errno));
    fprintf(f, "# kiln calibration cache 1: %s", algo_name(c->algo));
    if (c->algo == KILN_CALIB_PERCENTILE)
        fprintf(f, " %g", c->pct);
    fprintf(f, "%s\n", fp8 ? KCAL_FP8_MARK : "");
    for (int a = 0; a < n_acts; a++)
        if (scale[a] > 0)
            fprintf(f, "%s: %.9g\n", net->tensors[acts[a]].name, (double)scale[a]);
    if (fclose(f) != 0)
        return kn_error(KILN_ERR_IO, "cannot write calibration cache '%s'", path);
    kn_log(KILN_LOG_INFO, "calibration cache written to '%s'", path);
    return KILN_OK;
}

static kiln_status read_cache(const char *path, const kn_net *net, const int *acts, int n_acts,
                              float *scale, bool fp8) {
    size_t len = 0;
    uint8_t *raw = NULL;
    kiln_status st = kn_file_read(path, &raw, &len);
    char *text = (char *)raw;
    if (st != KILN_OK)
        return kn_error_wrap(st, "cannot read calibration cache '%s'", path);
    int line = 0;
    for (char *s = text; s && *s;) {
        char *e = strchr(s, '\n');
        if (e)
            *e = 0;
        line++;
        if (line == 1 && strncmp(s, "# kiln calibration cache", 24) == 0 &&
            (strstr(s, KCAL_FP8_MARK) != NULL) != fp8) {
            kn_free(text);
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "calibration cache '%s' holds %s scales; this build is %s", path,
                            fp8 ? "INT8" : "FP8", fp8 ? "FP8" : "INT8");
        }
        size_t l = strlen(s);
        while (l && (s[l - 1] == '\r' || s[l - 1] == ' ' || s[l - 1] == '\t'))
            s[--l] = 0;
        if (l && s[0] != '#') {
            char *colon = strrchr(s, ':');
            char *end = NULL;
            double v = colon ? strtod(colon + 1, &end) : 0;
            if (!colon || end == colon + 1 || (end && *end) || !(v > 0) || !isfinite(v)) {
                kn_free(text);
                return kn_error(KILN_ERR_PARSE,
                                "calibration cache '%s' line %d: expected 'tensor: scale'", path, line);
            }
            *colon = 0;
            for (int a = 0; a < n_acts; a++)
                if (strcmp(net->tensors[acts[a]].name, s) == 0)
                    scale[a] = (float)v;
        }
        s = e ? e + 1 : NULL;
    }
    kn_free(text);
    return KILN_OK;
}

/* ---------------- the rewrite ---------------- */

static kiln_status scalar_const(kn_net *net, const char *hint, kiln_dtype dt, double v, int *t) {
    kn_tdata d = {0};
    KN_TRY(kn_tdata_alloc(&d, dt, 0, NULL));
    if (dt == KILN_DTYPE_FLOAT)
        *(float *)d.data = (float)v;
    else
        *(int8_t *)d.data = (int8_t)v;
    return kpass_add_const(net, hint, &d, t);
}

/* Q -> DQ of tensor x with scale s (int8 or, fp8, float8e4m3fn; zero
 * point 0; FP8 saturating, opset 19): the DQ's output. */
static kiln_status add_qdq(kn_net *net, int x, float s, bool fp8, int *y) {
    char hint[256];
    snprintf(hint, sizeof hint, "%s_calib", net->tensors[x].name);
    int ts, tz, tq, td, qi;
    KN_TRY(scalar_const(net, hint, KILN_DTYPE_FLOAT, s, &ts));
    /* int8 0 and float8 +0 are both the byte 0 */
    KN_TRY(scalar_const(net, hint, fp8 ? KILN_DTYPE_FLOAT8E4M3FN : KILN_DTYPE_INT8, 0, &tz));
    KN_TRY(kn_net_new_tensor(net, hint, &tq));
    KN_TRY(kn_net_new_tensor(net, hint, &td));
    int in[3] = {x, ts, tz};
    char name[300];
    snprintf(name, sizeof name, "%s_q", hint);
    KN_TRY(kn_net_add_node(net, name, "QuantizeLinear", "", fp8 ? 19 : 13, 3, in, 1, &tq, &qi));
    if (fp8)
        KN_TRY(kn_node_set_int(&net->nodes[qi], "saturate", 1));
    int in2[3] = {tq, ts, tz};
    snprintf(name, sizeof name, "%s_dq", hint);
    KN_TRY(kn_net_add_node(net, name, "DequantizeLinear", "", fp8 ? 19 : 13, 3, in2, 1, &td, NULL));
    *y = td;
    return KILN_OK;
}

/* The weight w as int8 (symmetric, per output channel along axis, or per
 * tensor; amax / 127) or, fp8, as float8e4m3fn (amax / 448, rounded to
 * nearest even) behind a DequantizeLinear: the DQ's output. */
static kiln_status quant_weight(kn_net *net, int w, int axis, bool fp8, int *y) {
    const kiln_dtype qt = fp8 ? KILN_DTYPE_FLOAT8E4M3FN : KILN_DTYPE_INT8;
    const float qmax = fp8 ? 448.0f : 127.0f;
    const kn_tdata *v = &net->tensors[w].value;
    int rank = v->rank;
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < rank; d++)
        dims[d] = v->dims[d];
    int64_t n = kn_numel(rank, dims);
    int64_t nch = axis >= 0 ? dims[axis] : 1, inner = 1;
    for (int d = axis + 1; axis >= 0 && d < rank; d++)
        inner *= dims[d];
    void *tmp = NULL;
    const float *x = kn_tdata_aligned(v, &tmp);
    kn_tdata q = {0}, sc = {0}, zp = {0};
    kiln_status st = kn_tdata_alloc(&q, qt, rank, dims);
    int64_t cd[1] = {nch};
    if (st == KILN_OK)
        st = kn_tdata_alloc(&sc, KILN_DTYPE_FLOAT, axis >= 0 ? 1 : 0, cd);
    if (st == KILN_OK)
        st = kn_tdata_alloc(&zp, qt, axis >= 0 ? 1 : 0, cd);
    if (st != KILN_OK || !x) {
        kn_free(tmp);
        kn_tdata_free(&q);
        kn_tdata_free(&sc);
        kn_tdata_free(&zp);
        return st != KILN_OK ? st : KILN_ERR_OUT_OF_MEMORY;
    }
    float *s = sc.data;
    int8_t *qv = q.data;
    memset(zp.data, 0, (size_t)nch);
    for (int64_t c = 0; c < nch; c++)
        s[c] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = axis >= 0 ? (i / inner) % nch : 0;
        float a = fabsf(x[i]);
        s[c] = a > s[c] ? a : s[c];
    }
    for (int64_t c = 0; c < nch; c++)
        s[c] = s[c] > 0 ? s[c] / qmax : 1.0f;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = axis >= 0 ? (i / inner) % nch : 0;
        if (fp8) {
            ((uint8_t *)qv)[i] = kn_f8_from_float(x[i] / s[c], KN_F8_E4M3FN, 1);
            continue;
        }
        float r = rintf(x[i] / s[c]);
        qv[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    kn_free(tmp);
    char hint[256];
    snprintf(hint, sizeof hint, "%s_calib", net->tensors[w].name);
    int tq, ts, tz, td;
    KN_TRY(kpass_add_const(net, hint, &q, &tq));
    KN_TRY(kpass_add_const(net, hint, &sc, &ts));
    KN_TRY(kpass_add_const(net, hint, &zp, &tz));
    KN_TRY(kn_net_new_tensor(net, hint, &td));
    int in[3] = {tq, ts, tz}, idx;
    char name[300];
    snprintf(name, sizeof name, "%s_dq", hint);
    KN_TRY(kn_net_add_node(net, name, "DequantizeLinear", "", fp8 ? 19 : 13, 3, in, 1, &td, &idx));
    if (axis >= 0)
        KN_TRY(kn_node_set_int(&net->nodes[idx], "axis", axis));
    *y = td;
    return KILN_OK;
}

static bool has_qdq(const kn_net *net) {
    for (int i = 0; i < net->n_nodes; i++) {
        const kn_node *n = &net->nodes[i];
        if (is_op(n, "QuantizeLinear") || is_op(n, "DequantizeLinear") || is_op(n, "QLinearConv") ||
            is_op(n, "QLinearMatMul") || is_op(n, "ConvInteger") || is_op(n, "MatMulInteger"))
            return true;
    }
    return false;
}

kiln_status kcal_apply(const kn_net *net, const kiln_builder_config *cfg, kn_net **out) {
    *out = NULL;
    const kcal_cfg *c = kbld_calib(cfg);
    uint32_t flags = kbld_cfg_flags(cfg);
    /* FP8 when asked (FP8 takes precedence when both flags are set) */
    const bool fp8 = (flags & KILN_BUILDER_FLAG_FP8) != 0;
    if (fp8 && !c && !has_qdq(net))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "FP8 (KILN_BUILDER_FLAG_FP8, --fp8) needs scales: the network has no "
                        "Q/DQ and no calibration is configured (give batches or a calibration "
                        "cache: --calib=DIR|FILE)");
    if (!c || !(flags & (KILN_BUILDER_FLAG_INT8 | KILN_BUILDER_FLAG_FP8)))
        return KILN_OK;
    if (has_qdq(net)) {
        kn_log(KILN_LOG_WARNING, "calibration: the network is already quantized (Q/DQ); "
                                 "its own scales are used and calibration is skipped");
        return KILN_OK;
    }
    if (c->n_batches == 0 && !c->cache)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "calibration needs batches or a calibration cache file");
    target *tg = NULL;
    int n_tg = 0;
    KN_TRY(find_targets(net, cfg, &tg, &n_tg));
    /* the distinct activation tensors */
    int *acts = kn_calloc((size_t)2 * n_tg + 1, sizeof *acts);
    float *scale = kn_calloc((size_t)2 * n_tg + 1, sizeof *scale);
    double *thr = kn_calloc((size_t)2 * n_tg + 1, sizeof *thr);
    kiln_status st = acts && scale && thr ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    int n_acts = 0;
    for (int g = 0; g < n_tg && st == KILN_OK; g++)
        for (int k = 0; k < 2; k++) {
            int t = tg[g].act[k];
            if (t < 0)
                continue;
            int a = 0;
            while (a < n_acts && acts[a] != t)
                a++;
            if (a == n_acts)
                acts[n_acts++] = t;
        }
    if (st == KILN_OK && c->n_batches > 0) {
        st = collect(net, cfg, c, acts, n_acts, thr);
        for (int a = 0; a < n_acts && st == KILN_OK; a++)
            scale[a] = thr[a] > 0 ? (float)(thr[a] / (fp8 ? 448.0 : 127.0)) : 0;
        if (st == KILN_OK && c->cache)
            st = write_cache(c->cache, c, net, acts, n_acts, scale, fp8);
    } else if (st == KILN_OK) {
        st = read_cache(c->cache, net, acts, n_acts, scale, fp8);
    }
    kn_net *q = NULL;
    if (st == KILN_OK)
        st = kn_net_clone(net, &q);
    int *dq_of = kn_calloc((size_t)n_acts + 1, sizeof *dq_of);
    if (st == KILN_OK && !dq_of)
        st = KILN_ERR_OUT_OF_MEMORY;
    for (int a = 0; a < n_acts && st == KILN_OK; a++)
        dq_of[a] = -1;
    int n_q = 0;
    for (int g = 0; g < n_tg && st == KILN_OK; g++) {
        int ai[2] = {-1, -1};
        bool ok = true;
        for (int k = 0; k < 2; k++) {
            if (tg[g].act[k] < 0)
                continue;
            int a = 0;
            while (acts[a] != tg[g].act[k])
                a++;
            ai[k] = a;
            if (!(scale[a] > 0)) {
                kn_log(KILN_LOG_WARNING, "calibration: no scale for '%s'; layer '%s' stays in float",
                       net->tensors[acts[a]].name, net->nodes[tg[g].node].name);
                ok = false;
            }
        }
        if (!ok)
            continue;
        for (int k = 0; k < 2 && st == KILN_OK; k++)
            if (ai[k] >= 0 && dq_of[ai[k]] < 0)
                st = add_qdq(q, acts[ai[k]], scale[ai[k]], fp8, &dq_of[ai[k]]);
        int wd = -1;
        if (st == KILN_OK && tg[g].weight >= 0)
            st = quant_weight(q, tg[g].weight, tg[g].axis, fp8, &wd);
        if (st != KILN_OK)
            break;
        kn_node *n = &q->nodes[tg[g].node];
        n->in[0] = dq_of[ai[0]];
        n->in[1] = wd >= 0 ? wd : dq_of[ai[1]];
        n_q++;
    }
    if (st == KILN_OK)
        st = kn_net_toposort(q);
    if (st == KILN_OK)
        kn_log(KILN_LOG_INFO, "calibration (%s, %s): %d of %d layers get Q/DQ, %d activation scales",
               algo_name(c->algo), fp8 ? "FP8 E4M3" : "INT8", n_q, n_tg, n_acts);
    kn_free(tg);
    kn_free(acts);
    kn_free(scale);
    kn_free(thr);
    kn_free(dq_of);
    if (st != KILN_OK) {
        kn_net_free(q);
        return st;
    }
    *out = q;
    return KILN_OK;
}
