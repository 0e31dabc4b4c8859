/* run_node_tests.c - ONNX node conformance: every case folder of ONNX's node
 * tests (model.onnx + test_data_set_N/{input,output}_K.pb) is parsed, built
 * into a plan, loaded, run and compared, each in its own forked process with a
 * time limit (scaled by the build and the machine's load; a case that runs
 * past it is rerun once alone), and checked against the list of cases
 * expected to pass.
 *
 * Usage: run_node_tests [--data DIR] [--expected FILE] [--known FILE] [--results FILE]
 *                       [--update] [--filter TEXT] [--jobs N] [--timeout S]
 *                       [--timing] [--no-dtype-check] [--verbose]
 * Exit status: 0 when every case in the expected list passes and (with
 * --known) every case that does not pass is listed there and no listed one
 * passes (or the data is missing: "skipped"), 1 when not, 2 on a usage or
 * I/O error. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_runtime.h"
#include "onnx/onnx.h"
#include "../cuda/pseudo_device.h"

/* A sanitizer build (gcc says so with __SANITIZE_*__, clang with
 * __has_feature): slower, and it reserves address space a memory limit
 * would refuse. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RNT_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define RNT_SANITIZER 1
#endif
#endif

#define DEFAULT_DATA "/usr/share/libonnx-testdata/data/node"
#define RTOL 1e-3
#define ATOL 1e-5
#define REASON_MAX 480

typedef enum outcome { OUT_PASSED, OUT_FAILED, OUT_UNSUPPORTED } outcome;
static const char *const outcome_name[] = {"passed", "failed", "unsupported"};

typedef struct options {
    const char *data, *expected, *results, *filter, *known;
    int update, jobs, timing, verbose, no_dtype_check;
    double timeout_s;
    long mem_limit_mb;
    const char *backend; /* NULL: the CPU */
} options;

/* ======================================================================= */
/* One case, run inside a child process                                    */
/* ======================================================================= */

typedef struct case_result {
    outcome out;
    char reason[REASON_MAX];
} case_result;

static void set_reason(case_result *r, outcome out, const char *fmt, ...) KN_PRINTF(3, 4);
static void set_reason(case_result *r, outcome out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
    for (char *p = r->reason; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    r->out = out;
}

/* snprintf into a path buffer; paths here are far shorter than PATH_MAX. */
static void path_fmt(char *buf, size_t cap, const char *fmt, ...) KN_PRINTF(3, 4);
static void path_fmt(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static int read_pb(const char *path, kn_tdata *t, char *name, size_t cap) {
    uint8_t *data = NULL;
    size_t size = 0;
    if (kn_file_read(path, &data, &size) != KILN_OK)
        return -1;
    kiln_status st = kx_onnx_read_tensor(data, size, t, name, cap);
    kn_free(data);
    return st == KILN_OK ? 0 : -1;
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Element k of a value as double (float-like types only). */
static double elem_double(kiln_dtype dt, const void *p, size_t k) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_COMPLEX64: {
        float f;
        memcpy(&f, (const char *)p + 4 * k, 4);
        return f;
    }
    case KILN_DTYPE_DOUBLE: case KILN_DTYPE_COMPLEX128: {
        double d;
        memcpy(&d, (const char *)p + 8 * k, 8);
        return d;
    }
    case KILN_DTYPE_FLOAT16: {
        uint16_t h;
        memcpy(&h, (const char *)p + 2 * k, 2);
        return kn_half_to_float(h);
    }
    case KILN_DTYPE_BFLOAT16: {
        uint16_t h;
        memcpy(&h, (const char *)p + 2 * k, 2);
        return kn_bf16_to_float(h);
    }
    case KILN_DTYPE_FLOAT8E4M3FN:
        return kn_fp8e4m3_to_float(((const uint8_t *)p)[k]);
    case KILN_DTYPE_FLOAT8E5M2:
        return kn_fp8e5m2_to_float(((const uint8_t *)p)[k]);
    default:
        return 0;
    }
}

static int is_float_type(kiln_dtype dt) {
    switch (dt) {
    case KILN_DTYPE_FLOAT: case KILN_DTYPE_DOUBLE: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: case KILN_DTYPE_FLOAT8E4M3FN: case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_COMPLEX64: case KILN_DTYPE_COMPLEX128:
        return 1;
    default:
        return 0;
    }
}

static void shape_text(int rank, const int64_t *dims, char *buf, size_t cap) {
    size_t len = 0;
    len += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

/* Compare one output; 0 when equal within tolerance, else sets r. */
/* Diagnosis only (--no-dtype-check): compare the bytes as the expected dtype
 * even when the engine reports another one. */
static int no_dtype_check;
/* The case's expected outputs are draws of ONNX's Python generator
 * (test_bernoulli*), which no other generator reproduces: their type and
 * shape are compared, and each value must be 0 or 1. 2: Dropout in training
 * mode (test_training_dropout*, not the zero-ratio ones), whose kept
 * elements numpy's generator picks: a float value must be 0 or, where
 * numpy kept the element (the expected value is not 0), equal to the
 * expected x / (1 - ratio); a mask value 0 or 1. The draws' statistics are
 * tested in tests/unit (test_dropout_train). */
static int random_draws;

static int compare_output(case_result *r, int set, const char *name, kiln_dtype got_dt,
                          int got_rank, const int64_t *got_dims, const void *got,
                          const kn_tdata *want) {
    char gs[160], ws[160];
    if (got_dt != want->dtype && !no_dtype_check) {
        set_reason(r, OUT_FAILED, "set %d output '%s': dtype %s, expected %s", set, name,
                   kiln_dtype_name(got_dt), kiln_dtype_name(want->dtype));
        return -1;
    }
    int same = got_rank == want->rank;
    for (int i = 0; same && i < got_rank; i++)
        same = got_dims[i] == want->dims[i];
    if (!same) {
        shape_text(got_rank, got_dims, gs, sizeof gs);
        shape_text(want->rank, want->dims, ws, sizeof ws);
        set_reason(r, OUT_FAILED, "set %d output '%s': shape %s, expected %s", set, name, gs, ws);
        return -1;
    }
    if (want->nbytes == 0)
        return 0;
    if (!got) {
        set_reason(r, OUT_FAILED, "set %d output '%s': no data after the run", set, name);
        return -1;
    }
    if (random_draws) {
        size_t es = kiln_dtype_size(want->dtype), n = es ? want->nbytes / es : 0;
        for (size_t k = 0; k < n; k++) {
            double g = is_float_type(want->dtype) ? elem_double(want->dtype, got, k)
                                                  : (double)(((const unsigned char *)got)[k * es] != 0);
            if (random_draws == 2 && is_float_type(want->dtype)) {
                double w = elem_double(want->dtype, want->data, k);
                if (g == 0.0 || w == 0.0 || fabs(g - w) <= 1e-5 + 1e-3 * fabs(w))
                    continue;
                set_reason(r, OUT_FAILED,
                           "set %d output '%s': element %zu is %.9g, neither 0 nor the kept %.9g",
                           set, name, k, g, w);
                return -1;
            }
            if (g != 0.0 && g != 1.0) {
                set_reason(r, OUT_FAILED, "set %d output '%s': element %zu is %.9g, not 0 or 1", set, name,
                           k, g);
                return -1;
            }
        }
        return 0;
    }
    if (want->dtype == KILN_DTYPE_STRING) { /* one `const char *` per element */
        const char *const *g = got, *const *w = want->data;
        size_t n = want->nbytes / sizeof(char *);
        for (size_t k = 0; k < n; k++)
            if (!g[k] || strcmp(g[k], w[k]) != 0) {
                set_reason(r, OUT_FAILED, "set %d output '%s': element %zu is \"%s\", expected \"%s\"",
                           set, name, k, g[k] ? g[k] : "(null)", w[k]);
                return -1;
            }
        return 0;
    }
    if (!is_float_type(want->dtype)) {
        if (memcmp(got, want->data, want->nbytes) == 0)
            return 0;
        size_t es = kiln_dtype_size(want->dtype), n = es ? want->nbytes / es : 0, bad = 0,
               first = 0;
        for (size_t k = 0; k < n; k++)
            if (memcmp((const char *)got + k * es, (const char *)want->data + k * es, es)) {
                if (!bad++)
                    first = k;
            }
        long long g = 0, w = 0;
        if (es <= 8) {
            memcpy(&g, (const char *)got + first * es, es);
            memcpy(&w, (const char *)want->data + first * es, es);
        }
        set_reason(r, OUT_FAILED,
                   "set %d output '%s' (%s): element %zu is %lld, expected %lld; %zu of %zu "
                   "elements differ",
                   set, name, kiln_dtype_name(want->dtype), first, g, w, bad, n);
        return -1;
    }
    size_t es = kiln_dtype_size(want->dtype);
    if (want->dtype == KILN_DTYPE_COMPLEX64 || want->dtype == KILN_DTYPE_COMPLEX128)
        es /= 2;
    size_t n = want->nbytes / es, bad = 0, first = 0;
    double fg = 0, fw = 0;
    /* bfloat16 keeps 8 significant bits: rtol 1e-3 is finer than one unit
     * in its last place (up to 2^-7 of the value), and ONNX's stored data
     * rounds a float toward zero where kiln rounds to nearest-even (the
     * spec names no rounding): its outputs compare within one such unit */
    double rtol = want->dtype == KILN_DTYPE_BFLOAT16 ? 1.0 / 128.0 : RTOL;
    for (size_t k = 0; k < n; k++) {
        double g = elem_double(want->dtype, got, k), w = elem_double(want->dtype, want->data, k);
        int ok;
        if (isnan(w) || isnan(g))
            ok = isnan(w) && isnan(g);
        else if (isinf(w) || isinf(g))
            ok = g == w;
        else
            ok = fabs(g - w) <= ATOL + rtol * fabs(w);
        if (!ok && !bad++) {
            first = k;
            fg = g;
            fw = w;
        }
    }
    if (!bad)
        return 0;
    set_reason(r, OUT_FAILED,
               "set %d output '%s' (%s): element %zu is %.9g, expected %.9g (rtol %g, atol %g); "
               "%zu of %zu elements differ",
               set, name, kiln_dtype_name(want->dtype), first, fg, fw, rtol, ATOL, bad, n);
    return -1;
}

typedef struct case_data {
    int n_in, n_out;
    kn_tdata in[32], out[32];
    char in_name[32][256], out_name[32][256];
    /* sequence and optional values (kind set), read with kx_onnx_read_value */
    kx_onnx_value vin[32], vout[32];
} case_data;

static void case_data_free(case_data *d) {
    for (int i = 0; i < d->n_in; i++) {
        kn_tdata_free(&d->in[i]);
        kx_onnx_value_free(&d->vin[i]);
    }
    for (int i = 0; i < d->n_out; i++) {
        kn_tdata_free(&d->out[i]);
        kx_onnx_value_free(&d->vout[i]);
    }
    d->n_in = d->n_out = 0;
}

/* The kind of the model's k-th input (out: output) as its value file is
 * written: 0 a tensor, else KX_VALUE_SEQUENCE / KX_VALUE_OPTIONAL. */
static int value_kind(const kiln_network *net, int out, int k) {
    if (!net || k >= (out ? kiln_network_num_outputs(net) : kiln_network_num_inputs(net)))
        return 0;
    const char *nm = out ? kiln_network_output_name(net, k) : kiln_network_input_name(net, k);
    kiln_dtype dt;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    if (!nm || kiln_network_tensor_info(net, nm, &dt, &rank, dims) != KILN_OK ||
        !kn_dtype_is_handle((int)dt))
        return 0;
    return ((int)dt & KN_DTYPE_OPTIONAL) ? KX_VALUE_OPTIONAL : KX_VALUE_SEQUENCE;
}

static int read_value_pb(const char *path, int kind, kx_onnx_value *v, char *name, size_t cap) {
    size_t size = 0;
    uint8_t *data = NULL;
    if (kn_file_read(path, &data, &size) != KILN_OK)
        return -1;
    kiln_status st = kx_onnx_read_value(data, size, kind, v);
    kn_free(data);
    if (st != KILN_OK)
        return -1;
    snprintf(name, cap, "%s", v->name);
    return 0;
}

/* Read test_data_set_<set>/{input,output}_K.pb; -1 with a reason on failure,
 * 1 when the set does not exist. */
static int load_set(const char *dir, int set, case_data *d, case_result *r,
                    const kiln_network *net) {
    char path[4096];
    path_fmt(path, sizeof path, "%s/test_data_set_%d", dir, set);
    if (!file_exists(path))
        return 1;
    memset(d, 0, sizeof *d);
    for (int k = 0; k < 32; k++) {
        path_fmt(path, sizeof path, "%s/test_data_set_%d/input_%d.pb", dir, set, k);
        if (!file_exists(path))
            break;
        int kind = value_kind(net, 0, k);
        if (kind ? read_value_pb(path, kind, &d->vin[k], d->in_name[k], sizeof d->in_name[k])
                 : read_pb(path, &d->in[k], d->in_name[k], sizeof d->in_name[k]) != 0) {
            set_reason(r, OUT_FAILED, "cannot read %s: %s", path, kiln_last_error());
            return -1;
        }
        d->n_in = k + 1;
    }
    for (int k = 0; k < 32; k++) {
        path_fmt(path, sizeof path, "%s/test_data_set_%d/output_%d.pb", dir, set, k);
        if (!file_exists(path))
            break;
        int kind = value_kind(net, 1, k);
        if (kind ? read_value_pb(path, kind, &d->vout[k], d->out_name[k], sizeof d->out_name[k])
                 : read_pb(path, &d->out[k], d->out_name[k], sizeof d->out_name[k]) != 0) {
            set_reason(r, OUT_FAILED, "cannot read %s: %s", path, kiln_last_error());
            return -1;
        }
        d->n_out = k + 1;
    }
    return 0;
}

/* The engine's K-th tensor of the given mode. */
static const char *io_name(const kiln_engine *e, kiln_io_mode mode, int k) {
    int seen = 0;
    for (int i = 0; i < kiln_engine_num_io_tensors(e); i++) {
        const char *nm = kiln_engine_io_tensor_name(e, i);
        if (kiln_engine_tensor_io_mode(e, nm) == mode && seen++ == k)
            return nm;
    }
    return NULL;
}

/* Name of the engine tensor for data item k: the .pb's own name when the
 * engine has such a tensor of that mode, else the k-th of that mode. */
static const char *match_io(const kiln_engine *e, kiln_io_mode mode, const char *pb_name, int k) {
    if (pb_name[0] && kiln_engine_tensor_io_mode(e, pb_name) == mode)
        return pb_name;
    return io_name(e, mode, k);
}

/* ONNX's test data from before numpy knew bfloat16 stores bfloat16 tensors as
 * uint16 bit patterns (data_type 4); read them as the bfloat16 they are. */
static int bf16_as_u16(kiln_dtype engine, kiln_dtype data) {
    return engine == KILN_DTYPE_BFLOAT16 && data == KILN_DTYPE_UINT16;
}

static void null_logger(void *user, kiln_severity sev, const char *msg) {
    (void)user; (void)sev; (void)msg;
}

/* One profile from data set 0: inputs with a dynamic or unknown dim get its
 * shape as min = opt = max, and small inputs give their values too (the
 * builder uses those of shape tensors only). */
static kiln_status add_profile(kiln_network *net, kiln_builder_config *cfg, const case_data *d) {
    int prof = -1;
    int n = kiln_network_num_inputs(net);
    for (int i = 0; i < n; i++) {
        const char *nm = kiln_network_input_name(net, i);
        kiln_dtype dt;
        int rank;
        int64_t dims[KILN_MAX_DIMS];
        if (kiln_network_tensor_info(net, nm, &dt, &rank, dims) != KILN_OK)
            continue;
        int dynamic = rank < 0;
        for (int k = 0; k < rank; k++)
            dynamic |= dims[k] < 0;
        const kn_tdata *t = NULL;
        for (int k = 0; k < d->n_in; k++)
            if (strcmp(d->in_name[k], nm) == 0)
                t = &d->in[k];
        if (!t && i < d->n_in)
            t = &d->in[i];
        if (!t || kn_dtype_is_handle((int)dt))
            continue;
        if (prof < 0)
            KN_TRY(kiln_builder_config_add_profile(cfg, &prof));
        if (dynamic)
            KN_TRY(kiln_builder_config_set_shape(cfg, prof, nm, t->rank, t->dims, t->dims, t->dims));
        /* an input that is a shape tensor (Reshape's shape, Slice's starts...)
         * needs its values at build time, as TensorRT's shape-tensor
         * profiles do; the builder ignores values of other inputs */
        int64_t cnt = kn_numel(t->rank, t->dims);
        if (cnt >= 0 && cnt <= 4096 && kiln_dtype_size(t->dtype) > 0)
            KN_TRY(kiln_builder_config_set_input_values(cfg, prof, nm, t->dtype, (size_t)cnt,
                                                        t->data, t->data, t->data));
    }
    return KILN_OK;
}

static void run_case(const char *dir, const options *o, case_result *r) {
    char path[4096];
    kiln_network *net = NULL;
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t plan_size = 0;
    kiln_engine *eng = NULL;
    kiln_context *ctx = NULL;
    case_data d;
    memset(&d, 0, sizeof d);
    /* a GPU engine reads and writes device memory: inputs are copied there,
     * outputs back into host buffers (string tensors, host pointers, stay
     * on the host) */
    void *dev_in[32] = {0}, *host_out = NULL;
    bool on_device = false;
    r->out = OUT_PASSED;
    r->reason[0] = 0;
    const char *base = strrchr(dir, '/');
    random_draws = strncmp(base ? base + 1 : dir, "test_bernoulli", 14) == 0;
    if (strncmp(base ? base + 1 : dir, "test_training_dropout", 21) == 0 &&
        !strstr(base ? base + 1 : dir, "zero_ratio"))
        random_draws = 2;

    path_fmt(path, sizeof path, "%s/model.onnx", dir);
    kiln_status st = kiln_onnx_parse_file(path, &net);
    if (st != KILN_OK) {
        set_reason(r, st == KILN_ERR_UNSUPPORTED ? OUT_UNSUPPORTED : OUT_FAILED, "parse: %s: %s",
                   kiln_status_name(st), kiln_last_error());
        return;
    }
    if (load_set(dir, 0, &d, r, net) != 0) {
        if (!r->reason[0])
            set_reason(r, OUT_FAILED, "no test_data_set_0");
        /* Data kiln cannot read (string tensors) usually belongs to a model
         * kiln cannot build either; let the builder say so. */
        if (kiln_builder_config_create(&cfg) == KILN_OK &&
            kiln_build_serialized(net, cfg, &plan, &plan_size) == KILN_ERR_UNSUPPORTED)
            set_reason(r, OUT_UNSUPPORTED, "build: KILN_ERR_UNSUPPORTED: %s", kiln_last_error());
        goto done;
    }
    if ((st = kiln_builder_config_create(&cfg)) != KILN_OK) {
        set_reason(r, OUT_FAILED, "builder config: %s", kiln_last_error());
        goto done;
    }
    kiln_builder_config_set_threads(cfg, 1);
    if (o->backend && (st = kiln_builder_config_set_backend(cfg, o->backend)) != KILN_OK) {
        set_reason(r, OUT_FAILED, "backend: %s", kiln_last_error());
        goto done;
    }
    if (!o->timing)
        kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_NO_TIMING);
    if ((st = add_profile(net, cfg, &d)) != KILN_OK) {
        set_reason(r, OUT_FAILED, "profile: %s: %s", kiln_status_name(st), kiln_last_error());
        goto done;
    }
    st = kiln_build_serialized(net, cfg, &plan, &plan_size);
    if (st != KILN_OK) {
        set_reason(r, st == KILN_ERR_UNSUPPORTED ? OUT_UNSUPPORTED : OUT_FAILED, "build: %s: %s",
                   kiln_status_name(st), kiln_last_error());
        goto done;
    }
    if ((st = kiln_engine_load(plan, plan_size, &eng)) != KILN_OK) {
        set_reason(r, OUT_FAILED, "load: %s: %s", kiln_status_name(st), kiln_last_error());
        goto done;
    }
    on_device = strcmp(kiln_engine_backend(eng), "cpu") != 0;
    if ((st = kiln_context_create(eng, &ctx)) != KILN_OK) {
        set_reason(r, OUT_FAILED, "context: %s: %s", kiln_status_name(st), kiln_last_error());
        goto done;
    }
    for (int set = 0;; set++) {
        if (set > 0) {
            case_data_free(&d);
            int rc = load_set(dir, set, &d, r, net);
            if (rc == 1)
                break;
            if (rc < 0)
                goto done;
        }
        for (int k = 0; k < d.n_in; k++) {
            const char *nm = match_io(eng, KILN_IO_INPUT, d.in_name[k], k);
            if (!nm) {
                set_reason(r, OUT_FAILED, "set %d: input_%d.pb ('%s') matches no engine input",
                           set, k, d.in_name[k]);
                goto done;
            }
            kiln_dtype dt = kiln_engine_tensor_dtype(eng, nm);
            if (d.vin[k].kind) { /* a sequence or optional */
                const kx_onnx_value *v = &d.vin[k];
                int ranks[64];
                const int64_t *dp[64];
                const void *pp[64];
                for (int i = 0; i < v->n && i < 64; i++) {
                    ranks[i] = v->items[i].rank;
                    dp[i] = v->items[i].dims;
                    pp[i] = v->items[i].data ? v->items[i].data : (const void *)"";
                }
                st = v->kind == KX_VALUE_OPTIONAL && v->is_none
                         ? kiln_context_set_optional_none(ctx, nm)
                         : kiln_context_set_sequence_input(ctx, nm, v->n < 64 ? v->n : 64, ranks,
                                                           dp, pp);
                if (st != KILN_OK) {
                    set_reason(r, OUT_FAILED, "set %d input '%s': %s: %s", set, nm,
                               kiln_status_name(st), kiln_last_error());
                    goto done;
                }
                continue;
            }
            if (bf16_as_u16(dt, d.in[k].dtype))
                d.in[k].dtype = KILN_DTYPE_BFLOAT16;
            if (dt != d.in[k].dtype) {
                set_reason(r, OUT_FAILED, "set %d input '%s': engine wants %s, data is %s", set,
                           nm, kiln_dtype_name(dt), kiln_dtype_name(d.in[k].dtype));
                goto done;
            }
            void *addr = d.in[k].data;
            /* strings are host pointers on every backend: bound as they are */
            if (on_device && !kiln_engine_tensor_is_shape_input(eng, nm) &&
                dt != KILN_DTYPE_STRING) {
                kiln_engine_free(eng, dev_in[k]);
                dev_in[k] = NULL;
                size_t nb = d.in[k].nbytes ? d.in[k].nbytes : 1;
                if ((st = kiln_engine_alloc(eng, nb, &dev_in[k])) != KILN_OK ||
                    (d.in[k].nbytes && (st = kiln_engine_copy(eng, dev_in[k], d.in[k].data, nb,
                                                              KILN_COPY_TO_DEVICE)) != KILN_OK)) {
                    set_reason(r, OUT_FAILED, "set %d input '%s': device copy: %s", set, nm,
                               kiln_last_error());
                    goto done;
                }
                addr = dev_in[k];
            }
            if ((st = kiln_context_set_input_shape(ctx, nm, d.in[k].rank, d.in[k].dims)) !=
                    KILN_OK ||
                (st = kiln_context_set_tensor_address(ctx, nm, addr)) != KILN_OK) {
                set_reason(r, OUT_FAILED, "set %d input '%s': %s: %s", set, nm,
                           kiln_status_name(st), kiln_last_error());
                goto done;
            }
        }
        if ((st = kiln_context_enqueue(ctx, NULL)) != KILN_OK) {
            set_reason(r, OUT_FAILED, "run (set %d): %s: %s", set, kiln_status_name(st),
                       kiln_last_error());
            goto done;
        }
        int n_eng_out = 0;
        for (int i = 0; i < kiln_engine_num_io_tensors(eng); i++)
            n_eng_out += kiln_engine_tensor_io_mode(eng, kiln_engine_io_tensor_name(eng, i)) ==
                         KILN_IO_OUTPUT;
        if (n_eng_out != d.n_out) {
            set_reason(r, OUT_FAILED, "set %d: the engine has %d outputs, the test data %d", set,
                       n_eng_out, d.n_out);
            goto done;
        }
        for (int k = 0; k < d.n_out; k++) {
            const char *nm = match_io(eng, KILN_IO_OUTPUT, d.out_name[k], k);
            if (d.vout[k].kind) { /* a sequence or optional: count, then each element */
                const kx_onnx_value *v = &d.vout[k];
                int64_t want = v->is_none ? 0 : v->n;
                int64_t got_n = nm ? kiln_context_sequence_length(ctx, nm) : -1;
                if (got_n != want) {
                    set_reason(r, OUT_FAILED, "set %d output '%s': %lld elements, expected %lld%s%s",
                               set, nm ? nm : d.out_name[k], (long long)got_n, (long long)want,
                               got_n < 0 ? ": " : "", got_n < 0 ? kiln_last_error() : "");
                    goto done;
                }
                for (int64_t i = 0; i < want; i++) {
                    kiln_dtype edt;
                    int erank;
                    int64_t edims[KILN_MAX_DIMS];
                    const void *ep;
                    if (kiln_context_sequence_element(ctx, nm, i, &edt, &erank, edims, &ep) !=
                        KILN_OK) {
                        set_reason(r, OUT_FAILED, "set %d output '%s' element %lld: %s", set, nm,
                                   (long long)i, kiln_last_error());
                        goto done;
                    }
                    kn_tdata *w = &v->items[i];
                    if (bf16_as_u16(edt, w->dtype))
                        w->dtype = KILN_DTYPE_BFLOAT16;
                    if (compare_output(r, set, nm, edt, erank, edims, ep, w) != 0)
                        goto done;
                }
                continue;
            }
            int64_t dims[KILN_MAX_DIMS];
            int rank = nm ? kiln_context_tensor_shape(ctx, nm, dims) : -1;
            if (rank < 0) {
                set_reason(r, OUT_FAILED, "set %d output %d ('%s'): no shape: %s", set, k,
                           nm ? nm : d.out_name[k], kiln_last_error());
                goto done;
            }
            kiln_dtype odt = kiln_engine_tensor_dtype(eng, nm);
            if (bf16_as_u16(odt, d.out[k].dtype))
                d.out[k].dtype = KILN_DTYPE_BFLOAT16;
            const void *got = kiln_context_tensor_address(ctx, nm);
            if (on_device && got && odt != KILN_DTYPE_STRING) {
                size_t nb = kiln_dtype_size(odt);
                for (int i = 0; i < rank; i++)
                    nb *= (size_t)dims[i];
                free(host_out);
                host_out = malloc(nb ? nb : 1);
                if (!host_out || (nb && kiln_engine_copy(eng, host_out, got, nb,
                                                         KILN_COPY_TO_HOST) != KILN_OK)) {
                    set_reason(r, OUT_FAILED, "set %d output '%s': copy to the host: %s", set, nm,
                               kiln_last_error());
                    goto done;
                }
                got = host_out;
            }
            if (compare_output(r, set, nm, odt, rank, dims, got, &d.out[k]) != 0)
                goto done;
        }
    }
done:
    if (r->out == OUT_PASSED && pd_bad)
        set_reason(r, OUT_FAILED, "pseudo-device: %d copies or layers on the wrong memory",
                   pd_bad);
    case_data_free(&d);
    for (int k = 0; k < 32; k++)
        if (dev_in[k])
            kiln_engine_free(eng, dev_in[k]);
    free(host_out);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(eng);
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
}

/* ======================================================================= */
/* The parent: cases, children, time limits, results                      */
/* ======================================================================= */

typedef struct case_entry {
    char *name;
    outcome out;
    char *reason;
    double ms;
    double timed_out_s; /* > 0: the limit it ran past, in the parallel run */
} case_entry;

typedef struct job {
    pid_t pid;
    int fd;
    int idx;
    double start_ms;
    double limit_s; /* this case's limit, fixed when it starts */
    char buf[REASON_MAX + 16];
    size_t len;
} job;

/* ---- time limits: the base limit is for a release build on an idle
 * machine; a case gets it times the build's factor times the machine's load
 * when the case starts ---- */

/* Sanitizer builds run several times slower (shadow memory, checks, the
 * leak scan at exit). KILN_TEST_TIMEOUT_SCALE multiplies on top (valgrind, a
 * slow emulator). */
static double build_factor(void) {
    double f = 1;
#ifdef RNT_SANITIZER
    f = 5;
#endif
    const char *env = getenv("KILN_TEST_TIMEOUT_SCALE");
    if (env && atof(env) > 0)
        f *= atof(env);
    return f;
}

/* CPUs this process may run on (its affinity), at least 1. */
static int usable_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* How much slower than alone a case may run now: the runnable load (the
 * one-minute average, our own jobs included) over the CPUs we have, at
 * least 1 and at most 8 (past that a hang should still be caught). */
static double load_factor(void) {
    double avg[1];
    if (getloadavg(avg, 1) != 1)
        return 1;
    double f = avg[0] / usable_cpus();
    return f < 1 ? 1 : f > 8 ? 8 : f;
}

static double case_limit_s(const options *o) { return o->timeout_s * build_factor() * load_factor(); }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_case(const void *a, const void *b) {
    return strcmp(((const case_entry *)a)->name, ((const case_entry *)b)->name);
}

static char **list_cases(const char *dir, const char *filter, int *count) {
    DIR *dp = opendir(dir);
    if (!dp)
        return NULL;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.')
            continue;
        if (filter && !strstr(de->d_name, filter))
            continue;
        char path[4096];
        path_fmt(path, sizeof path, "%s/%s/model.onnx", dir, de->d_name);
        if (!file_exists(path))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            names = realloc(names, (size_t)cap * sizeof *names);
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(dp);
    if (n)
        qsort(names, (size_t)n, sizeof *names, cmp_str);
    *count = n;
    return names ? names : calloc(1, sizeof *names);
}

static void child_main(const char *dir, const options *o, int fd) {
    if (!o->verbose) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
            close(devnull);
        }
        kiln_set_logger(null_logger, NULL, KILN_LOG_ERROR);
    }
#ifndef RNT_SANITIZER
    if (o->mem_limit_mb > 0) {
        struct rlimit rl;
        /* RLIMIT_DATA counts private writable memory, not reserved address
         * space, so a GPU runtime's large reservations do not trip it. */
        rl.rlim_cur = rl.rlim_max = (rlim_t)o->mem_limit_mb << 20;
        setrlimit(RLIMIT_DATA, &rl);
    }
#endif
    case_result r;
    run_case(dir, o, &r);
    char line[REASON_MAX + 16];
    int len = snprintf(line, sizeof line, "%d %s", (int)r.out, r.reason);
    if (len > (int)sizeof line - 1)
        len = (int)sizeof line - 1;
    ssize_t w = write(fd, line, (size_t)len);
    (void)w;
    close(fd);
    /* exit, not _exit: a sanitizer build reports leaks at exit and changes
     * the status, which the parent turns into a failure. */
    exit(0);
}

static int start_job(job *j, const options *o, const char *name, int idx) {
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        char dir[4096];
        path_fmt(dir, sizeof dir, "%s/%s", o->data, name);
        child_main(dir, o, fds[1]);
    }
    close(fds[1]);
    j->pid = pid;
    j->fd = fds[0];
    j->idx = idx;
    j->start_ms = now_ms();
    j->limit_s = case_limit_s(o);
    j->len = 0;
    return 0;
}

static void drain(job *j) {
    for (;;) {
        if (j->len >= sizeof j->buf - 1)
            return;
        ssize_t n = read(j->fd, j->buf + j->len, sizeof j->buf - 1 - j->len);
        if (n <= 0)
            return;
        j->len += (size_t)n;
    }
}

static void finish_job(job *j, case_entry *c, int status, int timed_out) {
    drain(j);
    close(j->fd);
    j->buf[j->len] = 0;
    c->ms = now_ms() - j->start_ms;
    char reason[REASON_MAX + 64];
    c->timed_out_s = timed_out ? j->limit_s : 0;
    if (timed_out) {
        c->out = OUT_FAILED;
        snprintf(reason, sizeof reason, "timed out after %.3g s", j->limit_s);
    } else if (WIFSIGNALED(status)) {
        c->out = OUT_FAILED;
        snprintf(reason, sizeof reason, "crashed: signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    } else if (j->len < 1 || j->buf[0] < '0' || j->buf[0] > '2') {
        c->out = OUT_FAILED;
        snprintf(reason, sizeof reason, "exited with status %d without a result",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        c->out = OUT_FAILED;
        snprintf(reason, sizeof reason,
                 "exited with status %d after reporting '%s %.200s' (a sanitizer report? run "
                 "with --verbose --filter %s)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                 outcome_name[j->buf[0] - '0'], j->len > 2 ? j->buf + 2 : "", c->name);
    } else {
        c->out = (outcome)(j->buf[0] - '0');
        snprintf(reason, sizeof reason, "%s", j->len > 2 ? j->buf + 2 : "");
    }
    c->reason = strdup(reason);
    j->pid = 0;
}

/* Kept in a global so that forked children, which exit normally to let
 * LeakSanitizer check the case, still see it as reachable. */
job *g_jobs; /* not static: a store to a write-only static may be dropped */

/* Runs cases[idx[0..n-1]] (every case when idx is NULL), n_jobs at a time. */
static void run_all(case_entry *cases, const int *idx, int n, int n_jobs, const options *o) {
    job *jobs = g_jobs = calloc((size_t)n_jobs, sizeof *jobs);
    int next = 0, running = 0, done = 0;
    double t0 = now_ms();
    while (next < n || running) {
        for (int s = 0; s < n_jobs && next < n; s++) {
            if (jobs[s].pid)
                continue;
            int ci = idx ? idx[next] : next;
            if (start_job(&jobs[s], o, cases[ci].name, ci) != 0) {
                cases[ci].out = OUT_FAILED;
                free(cases[ci].reason);
                cases[ci].reason = strdup("cannot fork");
                next++;
                done++;
                continue;
            }
            next++;
            running++;
        }
        struct pollfd pf[64];
        int np = 0;
        for (int s = 0; s < n_jobs && np < 64; s++)
            if (jobs[s].pid) {
                pf[np].fd = jobs[s].fd;
                pf[np].events = POLLIN;
                np++;
            }
        poll(pf, (nfds_t)np, 20);
        for (int s = 0; s < n_jobs; s++) {
            job *j = &jobs[s];
            if (!j->pid)
                continue;
            int status = 0, timed_out = 0;
            pid_t w = waitpid(j->pid, &status, WNOHANG);
            if (w == 0 && now_ms() - j->start_ms > j->limit_s * 1e3) {
                kill(j->pid, SIGKILL);
                waitpid(j->pid, &status, 0);
                timed_out = 1;
                w = j->pid;
            }
            if (w == 0) {
                drain(j);
                continue;
            }
            case_entry *c = &cases[j->idx];
            free(c->reason);
            finish_job(j, c, status, timed_out);
            running--;
            done++;
            if (o->verbose)
                fprintf(stderr, "[%d/%d] %s %s%s%s\n", done, n, c->name, outcome_name[c->out],
                        c->reason[0] ? ": " : "", c->reason);
            else if (done % 100 == 0)
                fprintf(stderr, "[%d/%d] %.0f s\n", done, n, (now_ms() - t0) / 1e3);
        }
    }
    free(jobs);
    g_jobs = NULL;
}

/* A case that ran past its limit beside other jobs is run once more alone
 * (a loaded machine, not the case, is the usual cause); only a second
 * timeout, or another failure then, counts. */
static void rerun_timeouts(case_entry *cases, int n, const options *o) {
    int *idx = calloc((size_t)n + 1, sizeof *idx), m = 0;
    for (int i = 0; i < n; i++)
        if (cases[i].timed_out_s > 0)
            idx[m++] = i;
    for (int k = 0; k < m; k++) {
        case_entry *c = &cases[idx[k]];
        double first = c->timed_out_s;
        printf("rerun alone: %s timed out after %.3g s beside other jobs\n", c->name, first);
        run_all(cases, &idx[k], 1, 1, o);
        printf("rerun alone: %s %s%s%s (%.1f s)\n", c->name, outcome_name[c->out],
               c->reason[0] ? ": " : "", c->reason, c->ms / 1e3);
        if (c->timed_out_s > 0) {
            char buf[REASON_MAX + 96];
            snprintf(buf, sizeof buf, "timed out after %.3g s beside other jobs and after %.3g s alone",
                     first, c->timed_out_s);
            free(c->reason);
            c->reason = strdup(buf);
        }
    }
    free(idx);
}

/* ---- the expected list ---- */

static char **read_list(const char *path, int *count) {
    *count = 0;
    FILE *f = fopen(path, "r");
    char **names = calloc(1, sizeof *names);
    if (!f)
        return names;
    char line[1024];
    int cap = 1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, " \t\r\n#")] = 0;
        if (!line[0])
            continue;
        if (*count == cap) {
            cap *= 2;
            names = realloc(names, (size_t)cap * sizeof *names);
        }
        names[(*count)++] = strdup(line);
    }
    fclose(f);
    qsort(names, (size_t)*count, sizeof *names, cmp_str);
    return names;
}

static case_entry *find_case(case_entry *cases, int n, const char *name) {
    case_entry key = {(char *)name, OUT_PASSED, NULL, 0, 0};
    return bsearch(&key, cases, (size_t)n, sizeof *cases, cmp_case);
}

static int in_list(char **list, int n, const char *name) {
    return bsearch(&name, list, (size_t)n, sizeof *list, cmp_str) != NULL;
}

static int write_list(const char *path, char **old, int n_old, case_entry *cases, int n) {
    /* Keep listed cases that were not run (a --filter run); replace the rest
     * with this run's passing cases. */
    char tmp[4096];
    path_fmt(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    char **all = calloc((size_t)(n_old + n) + 1, sizeof *all);
    int k = 0;
    for (int i = 0; i < n_old; i++)
        if (!find_case(cases, n, old[i]))
            all[k++] = old[i];
    for (int i = 0; i < n; i++)
        if (cases[i].out == OUT_PASSED)
            all[k++] = cases[i].name;
    qsort(all, (size_t)k, sizeof *all, cmp_str);
    fprintf(f, "# ONNX node conformance cases that kiln passes (one per line).\n"
               "# Generated by: run_node_tests --update; do not edit by hand.\n");
    for (int i = 0; i < k; i++)
        fprintf(f, "%s\n", all[i]);
    free(all);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return -1;
    return k;
}

/* ---- the known failures ----
 * Each line of the file: BACKEND CASE REASON, BACKEND "all", "cpu" or
 * "cuda" (the --backend name), REASON the rest of the line; '#' starts a
 * comment line. Every case of this backend that does not pass must be
 * listed (else UNEXPLAINED), and every listed case must still fail (else
 * STALE); either makes the exit status 1. */

typedef struct known_entry {
    char *name, *reason;
} known_entry;

static int cmp_known(const void *a, const void *b) {
    return strcmp(((const known_entry *)a)->name, ((const known_entry *)b)->name);
}

/* The entries of `path` for `backend`; -1 (with a message) on a bad file. */
static int read_known(const char *path, const char *backend, known_entry **out) {
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[2048];
    int n = 0, cap = 0, lineno = 0, bad = 0;
    known_entry *k = NULL;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = 0;
        char *p = line + strspn(line, " \t");
        if (!*p || *p == '#')
            continue;
        char *be = p;
        p += strcspn(p, " \t");
        if (*p)
            *p++ = 0;
        p += strspn(p, " \t");
        char *name = p;
        p += strcspn(p, " \t");
        if (*p)
            *p++ = 0;
        p += strspn(p, " \t");
        if (!*name || !*p) {
            fprintf(stderr, "%s:%d: want BACKEND CASE REASON\n", path, lineno);
            bad = 1;
            continue;
        }
        if (strcmp(be, "all") != 0 && strcmp(be, backend) != 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            known_entry *g = realloc(k, (size_t)cap * sizeof *k);
            if (!g)
                break;
            k = g;
        }
        k[n].name = strdup(name);
        k[n].reason = strdup(p);
        n++;
    }
    fclose(f);
    if (bad) {
        for (int i = 0; i < n; i++) {
            free(k[i].name);
            free(k[i].reason);
        }
        free(k);
        return -1;
    }
    if (n)
        qsort(k, (size_t)n, sizeof *k, cmp_known);
    *out = k;
    return n;
}

/* Check this run's outcomes against the known failures: 0 when they agree,
 * 1 when a case fails unlisted or a listed case passes, 2 on a bad file. */
static int check_known(const options *o, case_entry *cases, int n) {
    const char *backend = o->backend ? o->backend : "cpu";
    known_entry *k = NULL;
    int nk = read_known(o->known, backend, &k);
    if (nk < 0)
        return 2;
    int listed = 0, unexplained = 0, stale = 0;
    for (int i = 0; i < n; i++) {
        known_entry key = {cases[i].name, NULL};
        known_entry *e = nk ? bsearch(&key, k, (size_t)nk, sizeof *k, cmp_known) : NULL;
        if (cases[i].out == OUT_PASSED) {
            if (e) {
                stale++;
                printf("STALE: %s passes on %s; take it off %s\n", cases[i].name, backend,
                       o->known);
            }
            continue;
        }
        if (e) {
            listed++;
            printf("known failure: %s %s: %s\n    why: %s\n", cases[i].name,
                   outcome_name[cases[i].out], cases[i].reason ? cases[i].reason : "", e->reason);
        } else {
            unexplained++;
            printf("UNEXPLAINED: %s %s: %s (not in %s for %s)\n", cases[i].name,
                   outcome_name[cases[i].out], cases[i].reason ? cases[i].reason : "", o->known,
                   backend);
        }
    }
    for (int j = 0; j < nk && !o->filter; j++) {
        if (!find_case(cases, n, k[j].name))
            printf("known failure not in the data: %s\n", k[j].name);
    }
    printf("known failures (%s, %s): %d listed, %d fail as listed, %d unexplained, %d stale\n",
           o->known, backend, nk, listed, unexplained, stale);
    for (int j = 0; j < nk; j++) {
        free(k[j].name);
        free(k[j].reason);
    }
    free(k);
    return unexplained || stale ? 1 : 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: run_node_tests [--data DIR] [--expected FILE] [--known FILE] [--results FILE]\n"
            "                      [--update]\n"
            "                      [--filter TEXT] [--jobs N] [--timeout S] [--mem-limit-mb M]\n"
            "                      [--timing] [--no-dtype-check] [--verbose] [--backend NAME]\n"
            "Runs every ONNX node test case in DIR (default " DEFAULT_DATA ") through kiln:\n"
            "parse, build (rule-chosen tactics unless --timing), load, run, compare\n"
            "(floats: rtol %g, atol %g, NaN equals NaN; others exact; uint16 test data for\n"
            "a bfloat16 tensor is read as bfloat16 bits). Each case runs in\n"
            "its own process with a time limit: --timeout S (default 20) times 5 in a\n"
            "sanitizer build, times KILN_TEST_TIMEOUT_SCALE when set, times the machine's\n"
            "load over its CPUs when the case starts (1 to 8); a case that runs past it is\n"
            "run once more alone before it counts as failed.\n"
            "--expected FILE: fail when a listed case does not pass; --update rewrites FILE\n"
            "with the cases that pass. --known FILE (lines: BACKEND CASE REASON): fail when a\n"
            "case of this backend does not pass and is not listed, or passes and is listed.\n"
            "--no-dtype-check (diagnosis only) compares values\n"
            "even when the engine reports a different output dtype. --backend cuda builds\n"
            "for the GPU (inputs and outputs are copied to and from device memory);\n"
            "--backend pseudo-device for a device of the CPU's reference kernels whose\n"
            "memory the host cannot read (tests/cuda/pseudo_device.h: placement checks).\n",
            RTOL, ATOL);
}

int main(int argc, char **argv) {
    options o = {DEFAULT_DATA, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 20.0, 8192, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--data") && v) o.data = argv[++i];
        else if (!strcmp(a, "--expected") && v) o.expected = argv[++i];
        else if (!strcmp(a, "--known") && v) o.known = argv[++i];
        else if (!strcmp(a, "--results") && v) o.results = argv[++i];
        else if (!strcmp(a, "--filter") && v) o.filter = argv[++i];
        else if (!strcmp(a, "--jobs") && v) o.jobs = atoi(argv[++i]);
        else if (!strcmp(a, "--timeout") && v) o.timeout_s = atof(argv[++i]);
        else if (!strcmp(a, "--mem-limit-mb") && v) o.mem_limit_mb = atol(argv[++i]);
        else if (!strcmp(a, "--update")) o.update = 1;
        else if (!strcmp(a, "--timing")) o.timing = 1;
        else if (!strcmp(a, "--backend") && v) o.backend = argv[++i];
        else if (!strcmp(a, "--no-dtype-check")) o.no_dtype_check = 1;
        else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) o.verbose = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else { usage(stderr); return 2; }
    }
    if (o.no_dtype_check && o.update) {
        fprintf(stderr, "--no-dtype-check is for diagnosis; it cannot be used with --update\n");
        return 2;
    }
    no_dtype_check = o.no_dtype_check;
    if (o.backend && strcmp(o.backend, pd_backend.name) == 0)
        kb_test_backend = &pd_backend;
    if (o.backend) {
        /* whether the backend's device is there, asked in a child: a CUDA
         * context made in this process would not survive the forks below
         * (every case would fail with "initialization error") */
        fflush(stdout);
        pid_t probe = fork();
        if (probe == 0) {
            char tgt[64], libs[128];
            if (kiln_backend_describe(o.backend, tgt, sizeof tgt, libs, sizeof libs) != KILN_OK) {
                printf("skipped: backend '%s': %s\n", o.backend, kiln_last_error());
                fflush(stdout);
                _exit(3);
            }
            _exit(0);
        }
        int ws = 0;
        if (probe < 0 || waitpid(probe, &ws, 0) != probe) {
            fprintf(stderr, "run_node_tests: cannot probe backend '%s'\n", o.backend);
            return 2;
        }
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 3)
            return 0;
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            fprintf(stderr, "run_node_tests: probing backend '%s' crashed\n", o.backend);
            return 2;
        }
    }
    struct stat sb;
    if (stat(o.data, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        printf("skipped: ONNX node test data directory %s not found\n", o.data);
        return 0;
    }
    if (o.jobs <= 0)
        o.jobs = usable_cpus();
    if (o.jobs > 64)
        o.jobs = 64;
    if (o.timeout_s <= 0)
        o.timeout_s = 20;
    /* Each child builds and runs on one thread; jobs give the parallelism. */
    setenv("OMP_NUM_THREADS", "1", 1);

    int n = 0;
    char **names = list_cases(o.data, o.filter, &n);
    if (!names) {
        fprintf(stderr, "cannot list %s: %s\n", o.data, strerror(errno));
        return 2;
    }
    case_entry *cases = calloc((size_t)n + 1, sizeof *cases);
    for (int i = 0; i < n; i++)
        cases[i].name = names[i];
    double t0 = now_ms();
    double avg[1] = {0};
    if (getloadavg(avg, 1) != 1)
        avg[0] = 0;
    printf("time limit a case: %g s x %g (build) x %.2f (load %.2f on %d CPUs, when it "
           "starts)\n", o.timeout_s, build_factor(), load_factor(), avg[0], usable_cpus());
    run_all(cases, NULL, n, o.jobs, &o);
    rerun_timeouts(cases, n, &o);
    double total_s = (now_ms() - t0) / 1e3;

    int count[3] = {0, 0, 0};
    for (int i = 0; i < n; i++)
        count[cases[i].out]++;
    FILE *rf = o.results ? fopen(o.results, "w") : NULL;
    if (o.results && !rf)
        fprintf(stderr, "cannot write %s: %s\n", o.results, strerror(errno));
    if (rf) {
        for (int i = 0; i < n; i++)
            fprintf(rf, "%s %s%s%s\n", cases[i].name, outcome_name[cases[i].out],
                    cases[i].reason && cases[i].reason[0] ? ": " : "",
                    cases[i].reason ? cases[i].reason : "");
        fprintf(rf, "summary: passed %d / failed %d / unsupported %d of %d\n", count[0], count[1],
                count[2], n);
        fclose(rf);
    }

    int rc = 0;
    if (o.expected) {
        int n_exp = 0;
        char **exp = read_list(o.expected, &n_exp);
        int regress = 0, fresh = 0, absent = 0;
        for (int i = 0; i < n_exp; i++) {
            case_entry *c = find_case(cases, n, exp[i]);
            if (!c) {
                if (!o.filter) {
                    absent++;
                    printf("listed but not found: %s\n", exp[i]);
                }
                continue;
            }
            if (c->out != OUT_PASSED) {
                regress++;
                printf("REGRESSION: %s %s: %s\n", c->name, outcome_name[c->out], c->reason);
            }
        }
        for (int i = 0; i < n; i++)
            if (cases[i].out == OUT_PASSED && !in_list(exp, n_exp, cases[i].name)) {
                fresh++;
                if (!o.update)
                    printf("newly passing: %s\n", cases[i].name);
            }
        if (o.update) {
            int k = write_list(o.expected, exp, n_exp, cases, n);
            if (k < 0) {
                fprintf(stderr, "cannot write %s: %s\n", o.expected, strerror(errno));
                rc = 2;
            } else {
                printf("updated %s: %d cases (%d added, %d removed)\n", o.expected, k, fresh,
                       regress + absent);
            }
        } else {
            if (regress || absent)
                rc = 1;
            printf("expected list: %d cases, %d regressions, %d missing, %d newly passing%s\n",
                   n_exp, regress, absent, fresh,
                   fresh ? " (run with --update to add them)" : "");
        }
        for (int i = 0; i < n_exp; i++)
            free(exp[i]);
        free(exp);
    }
    if (o.known) {
        int k = check_known(&o, cases, n);
        if (k > rc)
            rc = k;
    }
    printf("passed %d / failed %d / unsupported %d of %d (%.1f s, %d jobs)\n", count[0], count[1],
           count[2], n, total_s, o.jobs);
    for (int i = 0; i < n; i++) {
        free(cases[i].name);
        free(cases[i].reason);
    }
    free(cases);
    free(names);
    return rc;
}
