/* kiln_backend.c - libtriton_kiln.so: a Triton Inference Server backend that
 * serves kiln plans (docs/serving.md). One engine per device is shared by the
 * model's instances; each instance owns an execution context, a stream and
 * staging buffers, and runs the batch Triton's scheduler hands it as one
 * enqueue. Uses kiln's public C API only. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kiln/kiln.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_plugin.h"
#include "kiln/kiln_runtime.h"
#include "kt_json.h"
#include "triton_api.h"

#ifdef KT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define KT_MAX_DEVICES 64
#define KT_MAX_PLUGINS 16
#define KT_DEFAULT_ONNX_BATCH 8
#define KT_MAX_CONTEXTS 16
#define KT_MAX_BUCKETS 32

/* ------------------------------------------------------------------------
 * Errors and logging */

static TRITONSERVER_Error *kt_err(TRITONSERVER_Error_Code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static TRITONSERVER_Error *kt_err(TRITONSERVER_Error_Code code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return TRITONSERVER_ErrorNew(code, msg);
}

/* A failed kiln call as a Triton error: what was being done and kiln's word. */
static TRITONSERVER_Error *kt_kerr(kiln_status st, const char *what, const char *subject) {
    TRITONSERVER_Error_Code code = TRITONSERVER_ERROR_INTERNAL;
    if (st == KILN_ERR_INVALID_ARGUMENT || st == KILN_ERR_SHAPE) code = TRITONSERVER_ERROR_INVALID_ARG;
    else if (st == KILN_ERR_NOT_FOUND || st == KILN_ERR_IO) code = TRITONSERVER_ERROR_NOT_FOUND;
    else if (st == KILN_ERR_UNSUPPORTED || st == KILN_ERR_VERSION) code = TRITONSERVER_ERROR_UNSUPPORTED;
    else if (st == KILN_ERR_DEVICE || st == KILN_ERR_OUT_OF_MEMORY) code = TRITONSERVER_ERROR_UNAVAILABLE;
    return kt_err(code, "kiln: %s '%s': %s (%s)", what, subject ? subject : "", kiln_last_error(),
                  kiln_status_name(st));
}

static void kt_log(TRITONSERVER_LogLevel level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void kt_log(TRITONSERVER_LogLevel level, const char *fmt, ...) {
    if (!TRITONSERVER_LogIsEnabled(level)) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    TRITONSERVER_Error *e = TRITONSERVER_LogMessage(level, __FILE__, __LINE__, msg);
    if (e) TRITONSERVER_ErrorDelete(e);
}

/* kiln's own log lines go to Triton's log. */
static void kt_kiln_logger(void *user, kiln_severity sev, const char *message) {
    (void)user;
    TRITONSERVER_LogLevel lv = sev == KILN_LOG_ERROR     ? TRITONSERVER_LOG_ERROR
                               : sev == KILN_LOG_WARNING ? TRITONSERVER_LOG_WARN
                               : sev == KILN_LOG_INFO    ? TRITONSERVER_LOG_INFO
                                                         : TRITONSERVER_LOG_VERBOSE;
    kt_log(lv, "kiln: %s", message);
}

static uint64_t kt_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define KT_TRY(expr)                                                                               \
    do {                                                                                           \
        TRITONSERVER_Error *kt_e_ = (expr);                                                        \
        if (kt_e_) return kt_e_;                                                                   \
    } while (0)

/* ------------------------------------------------------------------------
 * Types */

typedef struct kt_dtype_map {
    kiln_dtype k;
    TRITONSERVER_DataType t;
    const char *config; /* the model configuration's name */
} kt_dtype_map;

static const kt_dtype_map kt_dtypes[] = {
    {KILN_DTYPE_FLOAT, TRITONSERVER_TYPE_FP32, "TYPE_FP32"},
    {KILN_DTYPE_FLOAT16, TRITONSERVER_TYPE_FP16, "TYPE_FP16"},
    {KILN_DTYPE_BFLOAT16, TRITONSERVER_TYPE_BF16, "TYPE_BF16"},
    {KILN_DTYPE_DOUBLE, TRITONSERVER_TYPE_FP64, "TYPE_FP64"},
    {KILN_DTYPE_INT8, TRITONSERVER_TYPE_INT8, "TYPE_INT8"},
    {KILN_DTYPE_INT16, TRITONSERVER_TYPE_INT16, "TYPE_INT16"},
    {KILN_DTYPE_INT32, TRITONSERVER_TYPE_INT32, "TYPE_INT32"},
    {KILN_DTYPE_INT64, TRITONSERVER_TYPE_INT64, "TYPE_INT64"},
    {KILN_DTYPE_UINT8, TRITONSERVER_TYPE_UINT8, "TYPE_UINT8"},
    {KILN_DTYPE_UINT16, TRITONSERVER_TYPE_UINT16, "TYPE_UINT16"},
    {KILN_DTYPE_UINT32, TRITONSERVER_TYPE_UINT32, "TYPE_UINT32"},
    {KILN_DTYPE_UINT64, TRITONSERVER_TYPE_UINT64, "TYPE_UINT64"},
    {KILN_DTYPE_BOOL, TRITONSERVER_TYPE_BOOL, "TYPE_BOOL"},
};

static const kt_dtype_map *kt_dtype_of_kiln(kiln_dtype d) {
    for (size_t i = 0; i < sizeof kt_dtypes / sizeof kt_dtypes[0]; i++)
        if (kt_dtypes[i].k == d) return &kt_dtypes[i];
    return NULL;
}

static const kt_dtype_map *kt_dtype_of_config(const char *s) {
    for (size_t i = 0; s && i < sizeof kt_dtypes / sizeof kt_dtypes[0]; i++)
        if (!strcmp(kt_dtypes[i].config, s)) return &kt_dtypes[i];
    return NULL;
}

/* One engine input or output as the model serves it. */
typedef struct kt_io {
    char *name;
    int is_input;
    kiln_dtype dtype;
    const kt_dtype_map *map;
    size_t elem;
    int rank;                      /* the engine's rank (batch dim included) */
    int64_t dims[KILN_MAX_DIMS];   /* the engine's dims, -1 dynamic */
    int64_t maxd[KILN_MAX_DIMS];   /* inputs: the largest each dim takes over profiles */
} kt_io;

/* A plugin library loaded for one or more models (counted). */
typedef struct kt_plugin_lib {
    char *path;
    kiln_plugin_library *lib;
    int refs;
} kt_plugin_lib;

static pthread_mutex_t kt_global_mu = PTHREAD_MUTEX_INITIALIZER;  /* loads and the plugin table */
static kt_plugin_lib kt_plugin_libs[KT_MAX_PLUGINS * 4];

typedef struct kt_engine_slot {
    kiln_engine *engine;
    int refs;
} kt_engine_slot;

typedef struct kt_model {
    TRITONBACKEND_Model *tm;
    char *name;
    uint64_t version;
    char *dir;           /* the model's folder in the repository */
    char *artifact;      /* model.plan or model.onnx in the version folder */
    int is_onnx;
    int max_batch;       /* max_batch_size of the (completed) configuration; 0 = no batching */
    int n_io, n_in;
    kt_io *io;
    int threads;         /* cpu_threads: 0 = kiln's default */
    int graphs;          /* cuda_graphs */
    uint32_t build_flags;
    int opt_batch;
    int contexts;        /* graph_contexts: execution contexts an instance keeps, one per batch size */
    int n_buckets;       /* batch_buckets: batch sizes a batch is padded up to */
    int auto_buckets;    /* no batch_buckets parameter: kt_default_buckets */
    int64_t buckets[KT_MAX_BUCKETS];
    int warmup;          /* bucket_warmup: one enqueue per batch bucket's context at load */
    int zero_copy;       /* zero_copy: bind Triton's buffers in place when they fit */
    int allow_embedded;
    char *embedded_sha;  /* comma-separated allow-list, or NULL */
    int n_libs;
    kt_plugin_lib *libs[KT_MAX_PLUGINS];
    kt_json *config;     /* the configuration as Triton completed it */
    pthread_mutex_t mu;
    kt_engine_slot slots[KT_MAX_DEVICES + 1]; /* [0] the CPU, [d + 1] GPU d */
    int64_t onnx_shapes[16][KILN_MAX_DIMS];   /* ONNX builds: configured non-batch dims */
} kt_model;

/* ------------------------------------------------------------------------
 * Configuration helpers */

static const char *kt_param(const kt_json *config, const char *key) {
    kt_json *p = kt_json_get(kt_json_get(config, "parameters"), key);
    return kt_json_str(kt_json_get(p, "string_value"));
}

static int kt_param_bool(const kt_json *config, const char *key, int dflt) {
    const char *s = kt_param(config, key);
    if (!s || !*s) return dflt;
    return !strcasecmp(s, "true") || !strcmp(s, "1") || !strcasecmp(s, "on") || !strcasecmp(s, "yes");
}

static int64_t kt_config_int(const kt_json *config, const char *key, int64_t dflt) {
    int64_t v;
    return kt_json_int(kt_json_get(config, key), &v) ? dflt : v;
}

static TRITONSERVER_Error *kt_read_config(TRITONBACKEND_Model *tm, kt_json **out) {
    TRITONSERVER_Message *msg = NULL;
    KT_TRY(TRITONBACKEND_ModelConfig(tm, 1, &msg));
    const char *base = NULL;
    size_t n = 0;
    TRITONSERVER_Error *e = TRITONSERVER_MessageSerializeToJson(msg, &base, &n);
    if (!e) {
        char perr[128];
        *out = kt_json_parse(base, n, perr, sizeof perr);
        if (!*out) e = kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: model configuration JSON: %s", perr);
    }
    TRITONSERVER_MessageDelete(msg);
    return e;
}

static int kt_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *kt_join(const char *a, const char *b) {
    char *s = NULL;
    if (asprintf(&s, "%s/%s", a, b) < 0) return NULL;
    return s;
}

/* ------------------------------------------------------------------------
 * Plugins: loaded by path (relative to the model folder), counted across
 * models so two models may name the same library. */

static TRITONSERVER_Error *kt_load_plugins(kt_model *m) {
    const char *list = kt_param(m->config, "plugin_libraries");
    const char *shas = kt_param(m->config, "plugin_library_sha256");
    if (!list || !*list) return NULL;
    char *paths = strdup(list), *hashes = shas ? strdup(shas) : NULL;
    char *sp1 = NULL, *sp2 = NULL;
    TRITONSERVER_Error *err = NULL;
    char *h = hashes ? strtok_r(hashes, ",; ", &sp2) : NULL;
    pthread_mutex_lock(&kt_global_mu);
    for (char *p = strtok_r(paths, ",; ", &sp1); p && !err; p = strtok_r(NULL, ",; ", &sp1),
              h = hashes ? strtok_r(NULL, ",; ", &sp2) : NULL) {
        if (m->n_libs == KT_MAX_PLUGINS) {
            err = kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': more than %d plugin libraries",
                         m->name, KT_MAX_PLUGINS);
            break;
        }
        char *full = p[0] == '/' ? strdup(p) : kt_join(m->dir, p);
        kt_plugin_lib *slot = NULL, *free_slot = NULL;
        for (size_t i = 0; i < sizeof kt_plugin_libs / sizeof kt_plugin_libs[0]; i++) {
            if (kt_plugin_libs[i].refs && !strcmp(kt_plugin_libs[i].path, full)) slot = &kt_plugin_libs[i];
            else if (!kt_plugin_libs[i].refs && !free_slot) free_slot = &kt_plugin_libs[i];
        }
        if (slot) {
            if (h && strcmp(h, kiln_plugin_library_sha256(slot->lib)))
                err = kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                             "kiln: plugin library '%s' is loaded with SHA-256 %s, not %s", full,
                             kiln_plugin_library_sha256(slot->lib), h);
            else slot->refs++, m->libs[m->n_libs++] = slot;
            free(full);
            continue;
        }
        if (!free_slot) {
            err = kt_err(TRITONSERVER_ERROR_UNAVAILABLE, "kiln: too many plugin libraries loaded");
            free(full);
            break;
        }
        kiln_plugin_library *lib = NULL;
        kiln_status st = kiln_plugin_load_library_sha256(full, NULL, h, &lib);
        if (st != KILN_OK) {
            err = kt_kerr(st, "loading plugin library", full);
            free(full);
            break;
        }
        kt_log(TRITONSERVER_LOG_INFO, "kiln: model '%s': plugin library %s (sha256 %s)", m->name, full,
               kiln_plugin_library_sha256(lib));
        free_slot->path = full;
        free_slot->lib = lib;
        free_slot->refs = 1;
        m->libs[m->n_libs++] = free_slot;
    }
    pthread_mutex_unlock(&kt_global_mu);
    free(paths);
    free(hashes);
    return err;
}

static void kt_unload_plugins(kt_model *m) {
    pthread_mutex_lock(&kt_global_mu);
    for (int i = 0; i < m->n_libs; i++) {
        kt_plugin_lib *s = m->libs[i];
        if (--s->refs == 0) {
            kiln_status st = kiln_plugin_deregister_library(s->lib);
            if (st != KILN_OK)
                kt_log(TRITONSERVER_LOG_WARN, "kiln: unloading plugin library %s: %s", s->path,
                       kiln_last_error());
            free(s->path);
            s->path = NULL;
            s->lib = NULL;
        }
    }
    m->n_libs = 0;
    pthread_mutex_unlock(&kt_global_mu);
}

/* ------------------------------------------------------------------------
 * Engines */

/* Make `device` current on this thread. cudaSetDevice costs more than
 * asking (it may touch the primary context); an instance's thread almost
 * always has its device current already, so ask first. */
static int kt_set_device(int device) {
#ifdef KT_HAVE_CUDA
    int cur = -1;
    if (device >= 0 && (cudaGetDevice(&cur) != cudaSuccess || cur != device) && cudaSetDevice(device) != cudaSuccess)
        return -1;
#else
    (void)device;
#endif
    return 0;
}

/* Build model.onnx for `backend` with the configured batch range, through a
 * timing cache beside it (model.onnx.<backend>.timing), and load the plan. */
static TRITONSERVER_Error *kt_build_onnx(kt_model *m, const char *backend, kiln_engine **out) {
    kiln_network *net = NULL;
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    TRITONSERVER_Error *err = NULL;
    char *cache = NULL;
    kiln_status st = kiln_onnx_parse_file(m->artifact, &net);
    if (st != KILN_OK) return kt_kerr(st, "parsing", m->artifact);
    if ((st = kiln_builder_config_create(&cfg)) != KILN_OK) { err = kt_kerr(st, "builder", m->name); goto done; }
    kiln_builder_config_set_flags(cfg, m->build_flags);
    if (m->threads > 0) kiln_builder_config_set_threads(cfg, m->threads);
    if ((st = kiln_builder_config_set_backend(cfg, backend)) != KILN_OK) { err = kt_kerr(st, "builder backend", backend); goto done; }
    if (asprintf(&cache, "%s.%s.timing", m->artifact, backend) < 0) cache = NULL;
    if (cache && (st = kiln_builder_config_set_timing_cache(cfg, cache)) != KILN_OK) {
        err = kt_kerr(st, "timing cache", cache);
        goto done;
    }
    int prof = 0;
    if ((st = kiln_builder_config_add_profile(cfg, &prof)) != KILN_OK) { err = kt_kerr(st, "profile", m->name); goto done; }
    int n_in = kiln_network_num_inputs(net);
    for (int i = 0; i < n_in && i < 16; i++) {
        const char *name = kiln_network_input_name(net, i);
        kiln_dtype dt;
        int rank = -1;
        int64_t d[KILN_MAX_DIMS], lo[KILN_MAX_DIMS], opt[KILN_MAX_DIMS], hi[KILN_MAX_DIMS];
        if ((st = kiln_network_tensor_info(net, name, &dt, &rank, d)) != KILN_OK || rank < 0) {
            err = kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': input '%s' of %s has no known rank",
                         m->name, name, m->artifact);
            goto done;
        }
        int dynamic = 0;
        for (int k = 0; k < rank; k++) {
            int64_t v = d[k];
            if (m->max_batch > 0 && k == 0) {
                lo[k] = 1, opt[k] = m->opt_batch > 0 ? m->opt_batch : m->max_batch, hi[k] = m->max_batch;
                dynamic |= v < 0;
                continue;
            }
            if (v < 0) {
                int64_t c = m->onnx_shapes[i][k];
                if (c <= 0) {
                    err = kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                                 "kiln: model '%s': input '%s' dim %d is dynamic in %s; give its size "
                                 "in the configuration's dims to build a plan",
                                 m->name, name, k, m->artifact);
                    goto done;
                }
                v = c;
                dynamic = 1;
            }
            lo[k] = opt[k] = hi[k] = v;
        }
        if (dynamic && (st = kiln_builder_config_set_shape(cfg, prof, name, rank, lo, opt, hi)) != KILN_OK) {
            err = kt_kerr(st, "profile shape of input", name);
            goto done;
        }
    }
    kt_log(TRITONSERVER_LOG_INFO, "kiln: model '%s': building %s for %s (batch up to %d)", m->name,
           m->artifact, backend, m->max_batch);
    if ((st = kiln_build_serialized(net, cfg, &plan, &size)) != KILN_OK) {
        err = kt_kerr(st, "building", m->artifact);
        goto done;
    }
    if ((st = kiln_engine_load(plan, size, out)) != KILN_OK) err = kt_kerr(st, "loading the plan built from", m->artifact);
done:
    kiln_free(plan);
    free(cache);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return err;
}

/* Load (or build) the engine for `device` (-1 = the CPU) under the model's
 * trust settings. Called with m->mu held. */
static TRITONSERVER_Error *kt_load_engine(kt_model *m, int device, kiln_engine **out) {
    if (kt_set_device(device))
        return kt_err(TRITONSERVER_ERROR_UNAVAILABLE, "kiln: model '%s': cannot use GPU %d", m->name, device);
    if (m->is_onnx) return kt_build_onnx(m, device < 0 ? "cpu" : "cuda", out);
    TRITONSERVER_Error *err = NULL;
    /* The trust switches are process-wide: set them for this load only. */
    pthread_mutex_lock(&kt_global_mu);
    kiln_status st = KILN_OK;
    if (m->embedded_sha) {
        char *list = strdup(m->embedded_sha), *sp = NULL;
        for (char *h = strtok_r(list, ",; ", &sp); h && st == KILN_OK; h = strtok_r(NULL, ",; ", &sp))
            if ((st = kiln_plugin_allow_embedded_sha256(h)) != KILN_OK) err = kt_kerr(st, "embedded_plugin_sha256", h);
        free(list);
    }
    if (!err) {
        kiln_plugin_allow_embedded_libraries(m->allow_embedded);
        st = kiln_engine_load_file(m->artifact, out);
        if (st != KILN_OK) err = kt_kerr(st, "loading plan", m->artifact);
        kiln_plugin_allow_embedded_libraries(0);
    }
    if (m->embedded_sha && kiln_plugin_allow_embedded_sha256(NULL) != KILN_OK)
        kt_log(TRITONSERVER_LOG_WARN, "kiln: emptying the embedded-plugin allow-list: %s", kiln_last_error());
    pthread_mutex_unlock(&kt_global_mu);
    return err;
}

static TRITONSERVER_Error *kt_engine_acquire(kt_model *m, int device, kiln_engine **out) {
    if (device >= KT_MAX_DEVICES)
        return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: GPU %d is past the %d this backend serves",
                      device, KT_MAX_DEVICES);
    pthread_mutex_lock(&m->mu);
    kt_engine_slot *s = &m->slots[device + 1];
    TRITONSERVER_Error *err = NULL;
    if (!s->engine) err = kt_load_engine(m, device, &s->engine);
    if (!err) s->refs++, *out = s->engine;
    pthread_mutex_unlock(&m->mu);
    return err;
}

static void kt_engine_release(kt_model *m, int device) {
    pthread_mutex_lock(&m->mu);
    kt_engine_slot *s = &m->slots[device + 1];
    if (s->refs > 0 && --s->refs == 0) {
        kt_set_device(device);
        kiln_engine_destroy(s->engine);
        s->engine = NULL;
    }
    pthread_mutex_unlock(&m->mu);
}

/* ------------------------------------------------------------------------
 * The served tensors and the configuration */

static TRITONSERVER_Error *kt_describe_io(kt_model *m, kiln_engine *e) {
    int n = kiln_engine_num_io_tensors(e);
    m->io = calloc((size_t)n, sizeof *m->io);
    if (!m->io) return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: out of memory");
    m->n_io = n;
    int profiles = kiln_engine_num_profiles(e);
    for (int i = 0; i < n; i++) {
        kt_io *t = &m->io[i];
        const char *name = kiln_engine_io_tensor_name(e, i);
        t->name = strdup(name);
        t->is_input = kiln_engine_tensor_io_mode(e, name) == KILN_IO_INPUT;
        m->n_in += t->is_input;
        t->dtype = kiln_engine_tensor_dtype(e, name);
        t->map = kt_dtype_of_kiln(t->dtype);
        t->elem = kiln_dtype_size(t->dtype);
        t->rank = kiln_engine_tensor_shape(e, name, t->dims);
        if (!t->map)
            return kt_err(TRITONSERVER_ERROR_UNSUPPORTED, "kiln: model '%s': tensor '%s' has type %s, which Triton cannot serve",
                          m->name, name, kiln_dtype_name(t->dtype));
        if (t->rank < 0)
            return kt_err(TRITONSERVER_ERROR_UNSUPPORTED, "kiln: model '%s': tensor '%s' has no known rank", m->name, name);
        if (t->is_input && kiln_engine_tensor_is_shape_input(e, name))
            return kt_err(TRITONSERVER_ERROR_UNSUPPORTED,
                          "kiln: model '%s': input '%s' is a shape tensor, which this backend does not serve",
                          m->name, name);
        if (!t->is_input) continue;
        for (int k = 0; k < t->rank; k++) t->maxd[k] = t->dims[k];
        for (int p = 0; p < profiles; p++) {
            int r = 0;
            int64_t hi[KILN_MAX_DIMS];
            if (kiln_engine_profile_shape(e, p, name, &r, NULL, NULL, hi) != KILN_OK || r != t->rank) continue;
            for (int k = 0; k < r; k++)
                if (t->dims[k] < 0 && hi[k] > t->maxd[k]) t->maxd[k] = hi[k];
        }
    }
    return NULL;
}

/* The batch sizes the plan takes: every input and output has a dynamic
 * first dim; [lo, hi] over all profiles. 0 when the plan cannot batch. */
static int kt_plan_batch_range(const kt_model *m, kiln_engine *e, int64_t *lo_out, int64_t *hi_out) {
    for (int i = 0; i < m->n_io; i++)
        if (m->io[i].rank < 1 || m->io[i].dims[0] >= 0) return 0;
    int64_t lo = INT64_MAX, hi = 0;
    for (int p = 0; p < kiln_engine_num_profiles(e); p++) {
        int64_t plo = 0, phi = INT64_MAX;
        for (int i = 0; i < m->n_io; i++) {
            if (!m->io[i].is_input) continue;
            int r = 0;
            int64_t mn[KILN_MAX_DIMS], mx[KILN_MAX_DIMS];
            if (kiln_engine_profile_shape(e, p, m->io[i].name, &r, mn, NULL, mx) != KILN_OK || r < 1) continue;
            if (mn[0] > plo) plo = mn[0];
            if (mx[0] < phi) phi = mx[0];
        }
        if (plo > phi) continue;
        if (plo < lo) lo = plo;
        if (phi > hi) hi = phi;
    }
    if (hi == 0 || hi == INT64_MAX) return 0;
    *lo_out = lo;
    *hi_out = hi;
    return 1;
}

static kt_io *kt_find_io(kt_model *m, const char *name) {
    for (int i = 0; i < m->n_io; i++)
        if (!strcmp(m->io[i].name, name)) return &m->io[i];
    return NULL;
}

static kt_json *kt_io_entry(const kt_io *t, int batching) {
    kt_json *o = kt_json_new(KT_JSON_OBJECT), *dims = kt_json_new(KT_JSON_ARRAY);
    kt_json_set(o, "name", kt_json_new_string(t->name));
    kt_json_set(o, "data_type", kt_json_new_string(t->map->config));
    for (int k = batching ? 1 : 0; k < t->rank; k++) kt_json_append(dims, kt_json_new_int(t->dims[k]));
    kt_json_set(o, "dims", dims);
    return o;
}

/* Without a batch_buckets parameter, the batch sizes an instance keeps a
 * context for (its prepared kernels, activation memory and CUDA graph):
 * 1, 2, 4, 8, then steps of 1.5x and 4/3x (12, 16, 24, 32, 48, 64, 96, ...)
 * up to max_batch_size, which is always one. A batch runs at the smallest
 * bucket that holds it, so at most a third of its rows are padding above 8,
 * and a batch size that changes between executions replays a context made
 * before instead of preparing kernels (and capturing a graph) again. */
static void kt_default_buckets(kt_model *m, int64_t max_batch) {
    if (!m->auto_buckets) return;
    m->n_buckets = 0;
    if (max_batch < 2) return;
    for (int64_t b = 1; b < max_batch && m->n_buckets < KT_MAX_CONTEXTS - 1;) {
        m->buckets[m->n_buckets++] = b;
        b = b < 8 ? 2 * b : (b & (b - 1)) == 0 ? b + b / 2 : b / 3 * 4;
    }
    m->buckets[m->n_buckets++] = max_batch;
}

/* Contexts an instance keeps: graph_contexts, else one per bucket. */
static int kt_context_count(const kt_model *m) {
    if (m->contexts > 0) return m->contexts;
    if (m->max_batch < 1 || m->n_buckets < 1) return 1;
    return m->n_buckets < KT_MAX_CONTEXTS ? m->n_buckets : KT_MAX_CONTEXTS;
}

/* Fill what the configuration leaves out from the plan (inputs, outputs,
 * max_batch_size, a dynamic batcher) and hand it back to Triton. */
static TRITONSERVER_Error *kt_autocomplete(kt_model *m, kiln_engine *e) {
    kt_json *c = m->config;
    int changed = 0;
    int64_t lo, hi;
    int can_batch = kt_plan_batch_range(m, e, &lo, &hi);
    kt_json *inputs = kt_json_get(c, "input"), *outputs = kt_json_get(c, "output");
    int has_inputs = inputs && inputs->count > 0;
    int64_t mb = kt_config_int(c, "max_batch_size", 0);
    if (mb == 0 && !has_inputs && can_batch) {
        kt_json_set(c, "max_batch_size", kt_json_new_int(hi));
        mb = hi;
        changed = 1;
    }
    if (!inputs) kt_json_set(c, "input", kt_json_new(KT_JSON_ARRAY)), inputs = kt_json_get(c, "input");
    if (!outputs) kt_json_set(c, "output", kt_json_new(KT_JSON_ARRAY)), outputs = kt_json_get(c, "output");
    for (int i = 0; i < m->n_io; i++) {
        kt_io *t = &m->io[i];
        kt_json *list = t->is_input ? inputs : outputs;
        int found = 0;
        for (size_t j = 0; j < list->count; j++)
            if (kt_json_str(kt_json_get(list->items[j], "name")) &&
                !strcmp(kt_json_str(kt_json_get(list->items[j], "name")), t->name))
                found = 1;
        if (!found) kt_json_append(list, kt_io_entry(t, mb > 0)), changed = 1;
    }
    if (mb > 1 && !kt_json_get(c, "dynamic_batching") && !kt_json_get(c, "sequence_batching")) {
        kt_json_set(c, "dynamic_batching", kt_json_new(KT_JSON_OBJECT));
        changed = 1;
    }
    /* the batcher forms the batch sizes the instances keep contexts for
     * (the buckets above 1), so that batches need no padding rows */
    kt_json *db = kt_json_get(c, "dynamic_batching");
    kt_json *pref = kt_json_get(db, "preferred_batch_size");
    kt_default_buckets(m, mb);
    if (db && mb > 1 && m->n_buckets > 1 && (!pref || pref->count == 0)) {
        pref = kt_json_new(KT_JSON_ARRAY);
        for (int b = 0; b < m->n_buckets; b++)
            if (m->buckets[b] > 1 && m->buckets[b] <= mb) kt_json_append(pref, kt_json_new_int(m->buckets[b]));
        kt_json_set(db, "preferred_batch_size", pref);
        changed = 1;
    }
    if (!changed) return NULL;
    char *text = kt_json_write(c);
    if (!text) return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: out of memory");
    TRITONSERVER_Message *msg = NULL;
    TRITONSERVER_Error *err = TRITONSERVER_MessageNewFromSerializedJson(&msg, text, strlen(text));
    free(text);
    if (err) return err;
    err = TRITONBACKEND_ModelSetConfig(m->tm, 1, msg);
    TRITONSERVER_MessageDelete(msg);
    if (err) return err;
    kt_json_free(m->config);
    m->config = NULL;
    return kt_read_config(m->tm, &m->config);
}

/* Does profile range [lo, hi] (over all profiles) of dim k of input t take v? */
static int kt_dim_ok(kiln_engine *e, const kt_io *t, int k, int64_t v) {
    if (t->dims[k] >= 0) return v == t->dims[k];
    for (int p = 0; p < kiln_engine_num_profiles(e); p++) {
        int r = 0;
        int64_t mn[KILN_MAX_DIMS], mx[KILN_MAX_DIMS];
        if (kiln_engine_profile_shape(e, p, t->name, &r, mn, NULL, mx) == KILN_OK && r == t->rank &&
            v >= mn[k] && v <= mx[k])
            return 1;
    }
    return 0;
}

static void kt_fmt_dims(char *buf, size_t cap, const int64_t *d, int n) {
    size_t o = 0;
    buf[0] = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int k = 0; k < n && o < cap; k++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", k ? "," : "", (long long)d[k]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Check one configured input or output against the plan. */
static TRITONSERVER_Error *kt_check_entry(kt_model *m, kiln_engine *e, const kt_json *entry, int is_input) {
    const char *name = kt_json_str(kt_json_get(entry, "name"));
    const char *kind = is_input ? "input" : "output";
    if (!name) return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': an %s has no name", m->name, kind);
    kt_io *t = kt_find_io(m, name);
    if (!t || t->is_input != is_input)
        return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': configured %s '%s' is not an %s of the plan %s",
                      m->name, kind, name, kind, m->artifact);
    const char *dt = kt_json_str(kt_json_get(entry, "data_type"));
    const kt_dtype_map *cm = kt_dtype_of_config(dt);
    if (!cm || cm->k != t->dtype)
        return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': %s '%s' is configured as %s but the plan takes %s",
                      m->name, kind, name, dt ? dt : "(none)", t->map->config);
    if (kt_json_get(entry, "reshape"))
        return kt_err(TRITONSERVER_ERROR_UNSUPPORTED, "kiln: model '%s': %s '%s': reshape is not supported", m->name, kind, name);
    kt_json *dims = kt_json_get(entry, "dims");
    int64_t cd[KILN_MAX_DIMS + 1];
    int n = dims ? (int)dims->count : 0;
    for (int k = 0; k < n && k <= KILN_MAX_DIMS; k++)
        if (kt_json_int(dims->items[k], &cd[k]))
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': %s '%s': dims are not integers", m->name, kind, name);
    int off = m->max_batch > 0 ? 1 : 0;
    char want[160], got[160];
    kt_fmt_dims(want, sizeof want, t->dims + off, t->rank - off);
    kt_fmt_dims(got, sizeof got, cd, n > KILN_MAX_DIMS ? KILN_MAX_DIMS : n);
    if (n != t->rank - off)
        return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                      "kiln: model '%s': %s '%s' is configured with dims %s (%d dims%s) but the plan's %s is %s",
                      m->name, kind, name, got, n, off ? " after the batch dim" : "", kind, want);
    for (int k = 0; k < n; k++) {
        int64_t v = cd[k];
        int ok;
        if (!is_input) ok = v < 0 ? t->dims[k + off] < 0 : (t->dims[k + off] < 0 || t->dims[k + off] == v);
        else ok = v < 0 ? t->dims[k + off] < 0 : kt_dim_ok(e, t, k + off, v);
        if (!ok)
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                          "kiln: model '%s': %s '%s' is configured with dims %s but the plan takes %s "
                          "(dim %d: %lld is not in any optimization profile)",
                          m->name, kind, name, got, want, k, (long long)v);
    }
    return NULL;
}

static TRITONSERVER_Error *kt_validate(kt_model *m, kiln_engine *e) {
    int64_t lo = 0, hi = 0;
    int can_batch = kt_plan_batch_range(m, e, &lo, &hi);
    if (m->max_batch > 0 && !can_batch)
        return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                      "kiln: model '%s': max_batch_size %d is configured but the plan %s has no dynamic "
                      "batch dimension on every input and output",
                      m->name, m->max_batch, m->artifact);
    if (m->max_batch > 0 && m->max_batch > hi)
        return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                      "kiln: model '%s': max_batch_size %d is larger than the plan's largest batch %lld",
                      m->name, m->max_batch, (long long)hi);
    const char *lists[2] = {"input", "output"};
    for (int l = 0; l < 2; l++) {
        kt_json *list = kt_json_get(m->config, lists[l]);
        for (size_t j = 0; list && j < list->count; j++) KT_TRY(kt_check_entry(m, e, list->items[j], l == 0));
    }
    for (int i = 0; i < m->n_io; i++) {
        if (!m->io[i].is_input) continue;
        kt_json *list = kt_json_get(m->config, "input");
        int found = 0;
        for (size_t j = 0; list && j < list->count; j++) {
            const char *n = kt_json_str(kt_json_get(list->items[j], "name"));
            found |= n && !strcmp(n, m->io[i].name);
        }
        if (!found)
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': the plan's input '%s' is not in the configuration",
                          m->name, m->io[i].name);
    }
    return NULL;
}

/* Triton runs the configuration's model_warmup samples itself, through this
 * backend, after the instances are made (and counts them in the model's
 * statistics). A sample the plan cannot take would fail there with a
 * request's error; check each one here first, so that the load fails naming
 * the sample, the tensor and what the plan takes. */
static TRITONSERVER_Error *kt_check_model_warmup(kt_model *m, kiln_engine *e) {
    kt_json *list = kt_json_get(m->config, "model_warmup");
    int off = m->max_batch > 0 ? 1 : 0;
    for (size_t w = 0; list && w < list->count; w++) {
        kt_json *smp = list->items[w];
        const char *sname = kt_json_str(kt_json_get(smp, "name"));
        char what[256];
        snprintf(what, sizeof what, "kiln: model '%s': model_warmup sample '%s'", m->name, sname ? sname : "");
        int64_t bs = 0;
        if (kt_json_get(smp, "batch_size") && (kt_json_int(kt_json_get(smp, "batch_size"), &bs) || bs < 0))
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "%s: batch_size is not a count", what);
        kt_json *inputs = kt_json_get(smp, "inputs");
        for (size_t j = 0; inputs && j < inputs->count; j++) {
            kt_json *v = inputs->items[j];
            const char *name = v->key;
            kt_io *t = name ? kt_find_io(m, name) : NULL;
            if (!t || !t->is_input)
                return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "%s: '%s' is not an input of the plan %s", what,
                              name ? name : "", m->artifact);
            const char *dt = kt_json_str(kt_json_get(v, "data_type"));
            const kt_dtype_map *cm = kt_dtype_of_config(dt);
            if (!cm || cm->k != t->dtype)
                return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "%s: input '%s' is given as %s but the plan takes %s",
                              what, name, dt ? dt : "(no data_type)", t->map->config);
            kt_json *dims = kt_json_get(v, "dims");
            int n = dims ? (int)dims->count : 0;
            int64_t d[KILN_MAX_DIMS + 1];
            for (int k = 0; k < n && k <= KILN_MAX_DIMS; k++)
                if (kt_json_int(dims->items[k], &d[k]))
                    return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "%s: input '%s': dims are not integers", what, name);
            char want[160], got[160];
            kt_fmt_dims(want, sizeof want, t->dims + off, t->rank - off);
            kt_fmt_dims(got, sizeof got, d, n > KILN_MAX_DIMS ? KILN_MAX_DIMS : n);
            if (n != t->rank - off)
                return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "%s: input '%s' has dims %s (%d dims%s) but the plan takes %s",
                              what, name, got, n, off ? " after the batch dim" : "", want);
            size_t bytes = t->elem;
            for (int k = 0; k < n; k++) {
                if (d[k] < 0 || !kt_dim_ok(e, t, k + off, d[k]))
                    return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                                  "%s: input '%s' has dims %s but the plan takes %s (dim %d: %lld is not in any "
                                  "optimization profile)",
                                  what, name, got, want, k, (long long)d[k]);
                bytes *= (size_t)d[k];
            }
            if (!off && kt_json_get(smp, "batch_size") && bs > 1)
                return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                              "%s: batch_size %lld for a model without batching (max_batch_size 0): give the "
                              "whole shape in dims", what, (long long)bs);
            const char *file = kt_json_str(kt_json_get(v, "input_data_file"));
            if (file) {
                char path[4096];
                struct stat st;
                snprintf(path, sizeof path, "%s/warmup/%s", m->dir, file);
                if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
                    return kt_err(TRITONSERVER_ERROR_NOT_FOUND, "%s: input '%s': input_data_file %s does not exist",
                                  what, name, path);
                if ((size_t)st.st_size != bytes)
                    return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                                  "%s: input '%s': input_data_file %s has %lld bytes; dims %s of %s need %zu",
                                  what, name, path, (long long)st.st_size, got, t->map->config + 5, bytes);
            }
        }
        for (int i = 0; i < m->n_io; i++) {
            if (!m->io[i].is_input) continue;
            int found = 0;
            for (size_t j = 0; inputs && j < inputs->count; j++)
                found |= inputs->items[j]->key && !strcmp(inputs->items[j]->key, m->io[i].name);
            if (!found)
                return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "%s: the plan's input '%s' is not given", what,
                              m->io[i].name);
        }
    }
    return NULL;
}

/* The device of the first GPU instance group, -1 for a CPU one. ONNX
 * models and CUDA plans load their first engine there. */
static int kt_first_device(const kt_json *config, int gpu_usable) {
    kt_json *groups = kt_json_get(config, "instance_group");
    for (size_t i = 0; groups && i < groups->count; i++) {
        const char *kind = kt_json_str(kt_json_get(groups->items[i], "kind"));
        kt_json *gpus = kt_json_get(groups->items[i], "gpus");
        int64_t d = 0;
        if (kind && !strcmp(kind, "KIND_CPU")) return -1;
        if (kind && !strcmp(kind, "KIND_GPU")) {
            if (gpus && gpus->count && !kt_json_int(gpus->items[0], &d)) return (int)d;
            return 0;
        }
    }
    return gpu_usable ? 0 : -1;
}

static int kt_cuda_usable(void) {
    char t[64], l[128];
    return kiln_backend_describe("cuda", t, sizeof t, l, sizeof l) == KILN_OK;
}

static void kt_model_free(kt_model *m) {
    if (!m) return;
    for (int d = -1; d < KT_MAX_DEVICES; d++) {
        kt_engine_slot *s = &m->slots[d + 1];
        if (s->engine) {
            kt_set_device(d);
            kiln_engine_destroy(s->engine);
        }
    }
    kt_unload_plugins(m);
    for (int i = 0; i < m->n_io; i++) free(m->io[i].name);
    free(m->io);
    kt_json_free(m->config);
    free(m->name);
    free(m->dir);
    free(m->artifact);
    free(m->embedded_sha);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static TRITONSERVER_Error *kt_model_setup(kt_model *m) {
    TRITONBACKEND_ArtifactType at;
    const char *loc = NULL, *name = NULL;
    KT_TRY(TRITONBACKEND_ModelName(m->tm, &name));
    m->name = strdup(name);
    KT_TRY(TRITONBACKEND_ModelVersion(m->tm, &m->version));
    KT_TRY(TRITONBACKEND_ModelRepository(m->tm, &at, &loc));
    if (at != TRITONBACKEND_ARTIFACT_FILESYSTEM)
        return kt_err(TRITONSERVER_ERROR_UNSUPPORTED, "kiln: model '%s': only file-system repositories are supported", m->name);
    m->dir = strdup(loc);
    KT_TRY(kt_read_config(m->tm, &m->config));

    /* parameters */
    const char *s;
    if ((s = kt_param(m->config, "cpu_threads"))) m->threads = atoi(s);
    m->graphs = kt_param_bool(m->config, "cuda_graphs", 1);
    m->warmup = kt_param_bool(m->config, "bucket_warmup", 1);
    m->zero_copy = kt_param_bool(m->config, "zero_copy", 1);
    m->allow_embedded = kt_param_bool(m->config, "allow_embedded_plugins", 0);
    if ((s = kt_param(m->config, "embedded_plugin_sha256")) && *s) m->embedded_sha = strdup(s);
    if ((s = kt_param(m->config, "precision"))) {
        if (!strcasecmp(s, "fp16")) m->build_flags |= KILN_BUILDER_FLAG_FP16;
        else if (!strcasecmp(s, "bf16")) m->build_flags |= KILN_BUILDER_FLAG_BF16;
        else if (strcasecmp(s, "fp32"))
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': precision '%s' is not fp32, fp16 or bf16", m->name, s);
    }
    if ((s = kt_param(m->config, "opt_batch_size"))) m->opt_batch = atoi(s);
    m->contexts = 0; /* 0: as many as the batch buckets (kt_default_buckets) */
    if ((s = kt_param(m->config, "graph_contexts"))) m->contexts = atoi(s);
    if (m->contexts < 1 || m->contexts > KT_MAX_CONTEXTS) {
        if (s)
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': graph_contexts must be 1 to %d",
                          m->name, KT_MAX_CONTEXTS);
        m->contexts = 0;
    }
    m->auto_buckets = 1;
    if ((s = kt_param(m->config, "batch_buckets")) && *s) {
        m->auto_buckets = 0;
        if (!strcasecmp(s, "none")) s = "";
    }
    if (s && *s && !m->auto_buckets) {
        char *list = strdup(s), *sp = NULL;
        for (char *b = strtok_r(list, ",; ", &sp); b; b = strtok_r(NULL, ",; ", &sp)) {
            long v = atol(b);
            if (v < 1 || m->n_buckets == KT_MAX_BUCKETS || (m->n_buckets && v <= m->buckets[m->n_buckets - 1])) {
                free(list);
                return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                              "kiln: model '%s': batch_buckets '%s': up to %d increasing batch sizes >= 1",
                              m->name, s, KT_MAX_BUCKETS);
            }
            m->buckets[m->n_buckets++] = v;
        }
        free(list);
    }
    if (m->threads < 0)
        return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': cpu_threads must be >= 0", m->name);

    /* the artifact: <model>/<version>/<default_model_filename | model.plan | model.onnx> */
    char vdir[4096];
    snprintf(vdir, sizeof vdir, "%s/%llu", m->dir, (unsigned long long)m->version);
    const char *fname = kt_json_str(kt_json_get(m->config, "default_model_filename"));
    if (fname && *fname) {
        m->artifact = kt_join(vdir, fname);
    } else {
        m->artifact = kt_join(vdir, "model.plan");
        if (!kt_file_exists(m->artifact)) {
            char *onnx = kt_join(vdir, "model.onnx");
            if (kt_file_exists(onnx)) free(m->artifact), m->artifact = onnx;
            else free(onnx);
        }
    }
    if (!kt_file_exists(m->artifact))
        return kt_err(TRITONSERVER_ERROR_NOT_FOUND, "kiln: model '%s': no model.plan or model.onnx in %s", m->name, vdir);
    size_t al = strlen(m->artifact);
    m->is_onnx = al > 5 && !strcmp(m->artifact + al - 5, ".onnx");

    KT_TRY(kt_load_plugins(m));

    m->max_batch = (int)kt_config_int(m->config, "max_batch_size", 0);
    int device = kt_first_device(m->config, kt_cuda_usable());
    if (m->is_onnx) {
        /* The batch range and fixed sizes of dynamic dims come from the configuration. */
        kt_json *inputs = kt_json_get(m->config, "input");
        if (m->max_batch == 0 && (!inputs || inputs->count == 0)) m->max_batch = KT_DEFAULT_ONNX_BATCH;
        kiln_network *net = NULL;
        kiln_status st = kiln_onnx_parse_file(m->artifact, &net);
        if (st != KILN_OK) return kt_kerr(st, "parsing", m->artifact);
        for (int i = 0; i < kiln_network_num_inputs(net) && i < 16; i++) {
            const char *in = kiln_network_input_name(net, i);
            for (size_t j = 0; inputs && j < inputs->count; j++) {
                const char *n = kt_json_str(kt_json_get(inputs->items[j], "name"));
                kt_json *dims = kt_json_get(inputs->items[j], "dims");
                if (!n || strcmp(n, in) || !dims) continue;
                int off = m->max_batch > 0 ? 1 : 0;
                for (size_t k = 0; k < dims->count && k + (size_t)off < KILN_MAX_DIMS; k++)
                    (void)kt_json_int(dims->items[k], &m->onnx_shapes[i][k + (size_t)off]);
            }
        }
        kiln_network_destroy(net);
    } else {
        kiln_plan_info info;
        FILE *f = fopen(m->artifact, "rb");
        unsigned char head[4096];
        size_t n = f ? fread(head, 1, sizeof head, f) : 0;
        if (f) fclose(f);
        kiln_status st = kiln_plan_read_info(head, n, &info);
        if (st != KILN_OK) return kt_kerr(st, "reading plan header", m->artifact);
        if (!strcmp(info.backend, "cpu")) device = -1;
        else if (device < 0) device = 0;
    }
    kiln_engine *e = NULL;
    KT_TRY(kt_engine_acquire(m, device, &e));
    TRITONSERVER_Error *err = kt_describe_io(m, e);
    bool autocomplete = false;
    if (!err) err = TRITONBACKEND_ModelAutoCompleteConfig(m->tm, &autocomplete);
    if (!err && autocomplete) err = kt_autocomplete(m, e);
    if (!err) {
        m->max_batch = (int)kt_config_int(m->config, "max_batch_size", 0);
        kt_default_buckets(m, m->max_batch);
        err = kt_validate(m, e);
    }
    if (!err) err = kt_check_model_warmup(m, e);
    /* On success the model keeps its reference to this first engine, so the
     * instances on that device share it instead of loading it again; the
     * engines go with the model (kt_model_free). */
    if (err) kt_engine_release(m, device);
    else
        kt_log(TRITONSERVER_LOG_INFO, "kiln: model '%s' version %llu: %s, %d inputs, %d outputs, max_batch_size %d",
               m->name, (unsigned long long)m->version, m->artifact, m->n_in, m->n_io - m->n_in, m->max_batch);
    return err;
}

/* ------------------------------------------------------------------------
 * Backend and model entry points */

TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *backend) {
    uint32_t major = 0, minor = 0;
    KT_TRY(TRITONBACKEND_ApiVersion(&major, &minor));
    if (major != KT_BACKEND_API_MAJOR || minor < KT_BACKEND_API_MINOR)
        return kt_err(TRITONSERVER_ERROR_UNSUPPORTED,
                      "kiln: the server's backend API is %u.%u; this backend needs %u.%u or a later minor",
                      major, minor, KT_BACKEND_API_MAJOR, KT_BACKEND_API_MINOR);
    kiln_set_logger(kt_kiln_logger, NULL,
                    TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE) ? KILN_LOG_INFO : KILN_LOG_WARNING);
    const char *name = "kiln";
    (void)TRITONBACKEND_BackendName(backend, &name);
    kt_log(TRITONSERVER_LOG_INFO, "kiln: backend '%s' (kiln %s, backend API %u.%u)", name, kiln_version_string(),
           major, minor);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_Finalize(TRITONBACKEND_Backend *backend) {
    (void)backend;
    kiln_set_logger(NULL, NULL, KILN_LOG_WARNING);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model *model) {
    kt_model *m = calloc(1, sizeof *m);
    if (!m) return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: out of memory");
    m->tm = model;
    pthread_mutex_init(&m->mu, NULL);
    TRITONSERVER_Error *err = kt_model_setup(m);
    if (!err) err = TRITONBACKEND_ModelSetState(model, m);
    if (err) kt_model_free(m);
    return err;
}

TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *model) {
    void *state = NULL;
    KT_TRY(TRITONBACKEND_ModelState(model, &state));
    kt_model_free(state);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Instances */

typedef struct kt_buf {
    void *dev;      /* inputs: engine memory (device memory, or host memory of a CPU engine) */
    void *host;     /* GPU engines: pinned host staging (inputs: of the same size; outputs: only this) */
    size_t cap;
} kt_buf;

/* An output of a GPU batch on its way back: the batch's output lands in the
 * output's pinned staging with one copy, then each response takes its rows. */
typedef struct kt_scatter {
    void *dst;      /* the response's buffer (host memory) */
    int io;         /* the output (index of m->io) */
    size_t off, bytes;
} kt_scatter;

/* One output of the batch being run (GPU engines). */
typedef struct kt_obatch {
    const void *src; /* the engine's output tensor */
    size_t bytes;    /* the batch's rows of it */
    int to_host;     /* some response takes it in host memory */
} kt_obatch;

/* An output of a one-request batch made before the enqueue, so that kiln
 * can write into the response's buffer (zero copy). */
typedef struct kt_preout {
    int made;       /* the response has this output, with buffer dst */
    int direct;     /* dst is bound to the context: kiln writes it */
    void *dst;
    TRITONSERVER_MemoryType mt;
    size_t bytes;
} kt_preout;

/* One execution context of an instance. A context keeps one CUDA graph (for
 * its last shapes), so an instance that keeps several (graph_contexts) runs
 * each batch size on its own context and replays its graph. */
typedef struct kt_ctx_slot {
    kiln_context *ctx;
    int64_t rows;       /* the batch it last ran; -1 none yet */
    int profile;
    uint64_t last_use;
    void **bound;       /* per I/O tensor: the address the context has now */
} kt_ctx_slot;

typedef struct kt_req kt_req;

typedef struct kt_instance {
    kt_model *m;
    TRITONBACKEND_ModelInstance *ti;
    char *name;
    int device;     /* -1: the CPU */
    int gpu;        /* the engine is a GPU engine */
    kiln_engine *e;
    kt_ctx_slot ctxs[KT_MAX_CONTEXTS];
    int n_ctxs;
    uint64_t tick;
    void *stream;
    kt_buf *bufs;   /* one per input (indices of m->io) */
    int max_rows;   /* rows the staging buffers hold */
    kt_req *reqs;   /* an execution's requests (Triton runs one at a time an instance) */
    uint32_t cap_reqs;
    kiln_event *ev[4];  /* GPU engines: before copy-in, after it, after compute, after copy-out */
    kt_obatch *ob;      /* one per m->io */
    kt_preout *pre;     /* one per m->io */
    kt_scatter *sc;     /* a batch's responses' output rows (grown once to the largest batch) */
    size_t n_sc, cap_sc;
} kt_instance;

static void kt_instance_free(kt_instance *in) {
    if (!in) return;
    if (in->e) {
        kt_set_device(in->device);
        for (int i = 0; in->bufs && i < in->m->n_io; i++) {
            if (in->bufs[i].dev) kiln_engine_free(in->e, in->bufs[i].dev);
            if (in->bufs[i].host) kiln_engine_free_host(in->e, in->bufs[i].host);
        }
        for (int c = 0; c < in->n_ctxs; c++) {
            kiln_context_destroy(in->ctxs[c].ctx);
            free(in->ctxs[c].bound);
        }
        for (int k = 0; k < 4; k++)
            if (in->ev[k]) kiln_event_destroy(in->ev[k]);
        if (in->stream) kiln_engine_stream_destroy(in->e, in->stream);
        kt_engine_release(in->m, in->device);
    }
    free(in->bufs);
    free(in->ob);
    free(in->pre);
    free(in->sc);
    free(in->reqs);
    free(in->name);
    free(in);
}

static TRITONSERVER_Error *kt_new_context(kt_instance *in) {
    kt_ctx_slot *c = &in->ctxs[in->n_ctxs];
    c->bound = calloc((size_t)in->m->n_io, sizeof *c->bound);
    if (!c->bound) return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: out of memory");
    kiln_status st = kiln_context_create(in->e, &c->ctx);
    if (st != KILN_OK) {
        free(c->bound);
        c->bound = NULL;
        return kt_kerr(st, "creating an execution context for", in->name);
    }
    if (in->m->threads > 0) kiln_context_set_threads(c->ctx, in->m->threads);
    kiln_context_set_graphs(c->ctx, in->m->graphs);
    c->rows = -1;
    c->profile = 0;
    in->n_ctxs++;
    return NULL;
}

/* The context for a batch of `rows`: the one that ran that batch last, else
 * a new one while fewer than graph_contexts exist, else the least recently
 * used. */
static TRITONSERVER_Error *kt_context_for(kt_instance *in, int64_t rows, kt_ctx_slot **out) {
    kt_ctx_slot *best = NULL;
    for (int c = 0; c < in->n_ctxs; c++)
        if (in->ctxs[c].rows == rows) best = &in->ctxs[c];
    if (!best) {
        for (int c = 0; c < in->n_ctxs; c++)
            if (in->ctxs[c].rows < 0) best = &in->ctxs[c];
    }
    if (!best && in->n_ctxs < kt_context_count(in->m)) {
        KT_TRY(kt_new_context(in));
        best = &in->ctxs[in->n_ctxs - 1];
    }
    if (!best) {
        best = &in->ctxs[0];
        for (int c = 1; c < in->n_ctxs; c++)
            if (in->ctxs[c].last_use < best->last_use) best = &in->ctxs[c];
    }
    best->rows = rows;
    best->last_use = ++in->tick;
    *out = best;
    return NULL;
}

static TRITONSERVER_Error *kt_instance_setup(kt_instance *in) {
    kt_model *m = in->m;
    TRITONSERVER_InstanceGroupKind kind;
    KT_TRY(TRITONBACKEND_ModelInstanceKind(in->ti, &kind));
    int32_t dev = 0;
    if (kind == TRITONSERVER_INSTANCEGROUPKIND_GPU) {
        KT_TRY(TRITONBACKEND_ModelInstanceDeviceId(in->ti, &dev));
        in->device = dev;
#ifndef KT_HAVE_CUDA
        return kt_err(TRITONSERVER_ERROR_UNSUPPORTED,
                      "kiln: instance '%s': KIND_GPU needs a backend built with CUDA (KILN_CUDA=ON)", in->name);
#endif
    } else if (kind == TRITONSERVER_INSTANCEGROUPKIND_CPU) {
        in->device = -1;
    } else {
        return kt_err(TRITONSERVER_ERROR_UNSUPPORTED, "kiln: instance '%s': only KIND_CPU and KIND_GPU are supported", in->name);
    }
    if (!m->is_onnx) {
        /* a plan runs on the backend it was built for */
        kiln_plan_info info;
        unsigned char head[4096];
        FILE *f = fopen(m->artifact, "rb");
        size_t n = f ? fread(head, 1, sizeof head, f) : 0;
        if (f) fclose(f);
        if (kiln_plan_read_info(head, n, &info) == KILN_OK) {
            int plan_gpu = strcmp(info.backend, "cpu") != 0;
            if (plan_gpu != (in->device >= 0))
                return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                              "kiln: instance '%s': the plan %s was built for the %s backend; use instance_group "
                              "kind %s (or serve model.onnx, built at load for each kind)",
                              in->name, m->artifact, info.backend, plan_gpu ? "KIND_GPU" : "KIND_CPU");
        }
    }
    kiln_engine *e = NULL;
    KT_TRY(kt_engine_acquire(m, in->device, &e));
    in->e = e;
    in->gpu = strcmp(kiln_engine_backend(e), "cpu") != 0;
    kt_set_device(in->device);
    kiln_status st;
    KT_TRY(kt_new_context(in));
    if (in->gpu && (st = kiln_engine_stream_create(e, &in->stream)) != KILN_OK)
        return kt_kerr(st, "creating a stream for", in->name);
    in->max_rows = m->max_batch > 0 ? m->max_batch : 1;
    /* ragged batches may be padded up to a profile's smallest batch */
    int64_t lo = 0, hi = 0;
    if (m->max_batch > 0 && kt_plan_batch_range(m, e, &lo, &hi) && hi > in->max_rows) in->max_rows = (int)hi;
    in->bufs = calloc((size_t)m->n_io, sizeof *in->bufs);
    in->ob = calloc((size_t)m->n_io, sizeof *in->ob);
    in->pre = calloc((size_t)m->n_io, sizeof *in->pre);
    if (!in->bufs || !in->ob || !in->pre) return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: out of memory");
    for (int k = 0; in->gpu && k < 4; k++)
        if ((st = kiln_event_create(e, &in->ev[k])) != KILN_OK) return kt_kerr(st, "creating an event for", in->name);
    for (int i = 0; i < m->n_io; i++) {
        kt_io *t = &m->io[i];
        if (!t->is_input) continue;
        size_t bytes = t->elem;
        for (int k = m->max_batch > 0 ? 1 : 0; k < t->rank; k++) bytes *= (size_t)(t->maxd[k] > 0 ? t->maxd[k] : 1);
        if (m->max_batch > 0) bytes *= (size_t)in->max_rows;
        in->bufs[i].cap = bytes;
        if ((st = kiln_engine_alloc(e, bytes, &in->bufs[i].dev)) != KILN_OK)
            return kt_kerr(st, "allocating staging memory for input", t->name);
        if (in->gpu && (st = kiln_engine_alloc_host(e, bytes, &in->bufs[i].host)) != KILN_OK)
            return kt_kerr(st, "allocating pinned staging memory for input", t->name);
    }
    kt_log(TRITONSERVER_LOG_INFO, "kiln: instance '%s' on %s %d (%s engine)", in->name,
           in->device < 0 ? "CPU" : "GPU", in->device < 0 ? 0 : in->device, kiln_engine_backend(e));
    return NULL;
}

static TRITONSERVER_Error *kt_instance_warmup(kt_instance *in);

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance *instance) {
    TRITONBACKEND_Model *tm = NULL;
    void *ms = NULL;
    const char *name = NULL;
    KT_TRY(TRITONBACKEND_ModelInstanceModel(instance, &tm));
    KT_TRY(TRITONBACKEND_ModelState(tm, &ms));
    KT_TRY(TRITONBACKEND_ModelInstanceName(instance, &name));
    kt_instance *in = calloc(1, sizeof *in);
    if (!in) return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: out of memory");
    in->m = ms;
    in->ti = instance;
    in->name = strdup(name);
    in->device = -1;
    TRITONSERVER_Error *err = kt_instance_setup(in);
    if (!err) err = kt_instance_warmup(in);
    if (!err) err = TRITONBACKEND_ModelInstanceSetState(instance, in);
    if (err) kt_instance_free(in);
    return err;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance *instance) {
    void *state = NULL;
    KT_TRY(TRITONBACKEND_ModelInstanceState(instance, &state));
    kt_instance_free(state);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Execution */

/* One request as the batch sees it. */
struct kt_req {
    TRITONBACKEND_Request *r;
    TRITONBACKEND_Response *resp;
    TRITONSERVER_Error *err;    /* set: the request fails with it */
    int64_t rows;               /* its batch size (1 without batching) */
    int64_t row0;               /* its first row in the gathered batch */
    TRITONBACKEND_Input *inputs[64];
    const int64_t *shapes[64];
    uint32_t ranks[64];
    uint32_t nbufs[64];         /* its buffers of each input (TRITONBACKEND_InputProperties) */
};

/* Copy n bytes of Triton memory into engine memory at dst: host memory for a
 * CPU engine; for a GPU engine only a source in device memory comes here
 * (host sources are gathered into pinned staging, kt_flush_in). */
static TRITONSERVER_Error *kt_copy_in(kt_instance *in, void *dst, const void *src, TRITONSERVER_MemoryType mt,
                                      size_t n) {
    if (!in->gpu) {
        if (mt != TRITONSERVER_MEMORY_GPU) { memcpy(dst, src, n); return NULL; }
#ifdef KT_HAVE_CUDA
        if (cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) == cudaSuccess) return NULL;
#endif
        return kt_err(TRITONSERVER_ERROR_UNSUPPORTED, "kiln: instance '%s': input in GPU memory for a CPU engine", in->name);
    }
    kiln_status st = kiln_engine_copy_async(in->e, dst, src, n, KILN_COPY_ON_DEVICE, in->stream);
    return st == KILN_OK ? NULL : kt_kerr(st, "copying an input for", in->name);
}

static TRITONSERVER_Error *kt_copy_out(kt_instance *in, void *dst, TRITONSERVER_MemoryType mt,
                                       const void *src, size_t n) {
    kiln_status st;
    if (!in->gpu) {
        if (mt != TRITONSERVER_MEMORY_GPU) { memcpy(dst, src, n); return NULL; }
#ifdef KT_HAVE_CUDA
        if (cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) == cudaSuccess) return NULL;
#endif
        return kt_err(TRITONSERVER_ERROR_UNSUPPORTED, "kiln: instance '%s': output in GPU memory for a CPU engine", in->name);
    }
    st = kiln_engine_copy_async(in->e, dst, src, n,
                                mt == TRITONSERVER_MEMORY_GPU ? KILN_COPY_ON_DEVICE : KILN_COPY_TO_HOST, in->stream);
    return st == KILN_OK ? NULL : kt_kerr(st, "copying an output for", in->name);
}

/* Make b hold `bytes`: engine memory when `dev`, pinned host memory when
 * `host`. Buffers only grow (to the largest batch seen) and stay with the
 * instance; no batch runs while one is replaced (each ends synchronized). */
static TRITONSERVER_Error *kt_reserve(kt_instance *in, kt_buf *b, size_t bytes, int dev, int host, const char *what) {
    if (bytes <= b->cap && (!dev || b->dev) && (!host || b->host)) return NULL;
    if (bytes < b->cap) bytes = b->cap;
    kiln_status st;
    if (b->dev) kiln_engine_free(in->e, b->dev);
    if (b->host) kiln_engine_free_host(in->e, b->host);
    b->dev = b->host = NULL;
    b->cap = 0;
    if (dev && (st = kiln_engine_alloc(in->e, bytes, &b->dev)) != KILN_OK) return kt_kerr(st, "allocating staging memory for", what);
    if (host && (st = kiln_engine_alloc_host(in->e, bytes, &b->host)) != KILN_OK)
        return kt_kerr(st, "allocating pinned staging memory for", what);
    b->cap = bytes;
    kt_log(TRITONSERVER_LOG_VERBOSE, "kiln: instance '%s': staging for '%s' grown to %zu bytes", in->name, what, bytes);
    return NULL;
}

/* GPU engines: send the gathered bytes [*lo, *hi) of b's pinned staging to the
 * device with one copy. */
static TRITONSERVER_Error *kt_flush_in(kt_instance *in, kt_buf *b, size_t *lo, size_t *hi) {
    if (*hi > *lo) {
        kiln_status st = kiln_engine_copy_async(in->e, (char *)b->dev + *lo, (char *)b->host + *lo, *hi - *lo,
                                                KILN_COPY_TO_DEVICE, in->stream);
        if (st != KILN_OK) return kt_kerr(st, "copying an input for", in->name);
    }
    *lo = *hi;
    return NULL;
}

/* Past this many gathered bytes, the pinned staging goes to the device
 * while the next bytes are gathered: the copy engine's transfer overlaps the
 * host's memcpy (a ResNet-50 batch of 13 is 3.9 MB: about 0.4 ms of memcpy
 * and 0.1 ms of transfer, which would otherwise follow each other). Smaller
 * batches go with one copy, as before. */
#define KT_FLUSH_CHUNK ((size_t)1 << 20)
/* A pinned input piece at least this large goes to the device directly. */
#define KT_PINNED_DIRECT ((size_t)64 << 10)

/* GPU engines: append n host bytes at *hi of b's pinned staging, sending
 * each full chunk to the device as it fills. */
static TRITONSERVER_Error *kt_gather_host(kt_instance *in, kt_buf *b, const void *src, size_t n, size_t *lo,
                                          size_t *hi) {
    const char *p = src;
    while (n) {
        size_t room = KT_FLUSH_CHUNK - (*hi - *lo), take = n < room ? n : room;
        memcpy((char *)b->host + *hi, p, take);
        *hi += take, p += take, n -= take;
        if (*hi - *lo >= KT_FLUSH_CHUNK) KT_TRY(kt_flush_in(in, b, lo, hi));
    }
    return NULL;
}

/* Check one request against the plan: every input present, of the plan's
 * type, of a shape it can take, with exactly the bytes that shape needs. */
static TRITONSERVER_Error *kt_check_request(kt_instance *in, kt_req *q) {
    kt_model *m = in->m;
    int batching = m->max_batch > 0;
    int ii = 0;
    q->rows = 1;
    for (int i = 0; i < m->n_io; i++) {
        kt_io *t = &m->io[i];
        if (!t->is_input) continue;
        TRITONBACKEND_Input *inp = NULL;
        TRITONSERVER_Error *e = TRITONBACKEND_RequestInput(q->r, t->name, &inp);
        if (e) {
            TRITONSERVER_ErrorDelete(e);
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': the request has no input '%s'", m->name, t->name);
        }
        TRITONSERVER_DataType dt;
        const int64_t *shape;
        uint32_t rank, nbuf;
        uint64_t bytes;
        KT_TRY(TRITONBACKEND_InputProperties(inp, NULL, &dt, &shape, &rank, &bytes, &nbuf));
        if (dt != t->map->t)
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': input '%s' must be %s", m->name, t->name,
                          t->map->config + 5);
        /* the shapes as text only for an error message: not per request */
        char got[160], want[160];
#define KT_SHAPES_TEXT()                                                                           \
    (kt_fmt_dims(got, sizeof got, shape, (int)(rank > KILN_MAX_DIMS ? KILN_MAX_DIMS : rank)),        \
     kt_fmt_dims(want, sizeof want, t->dims, t->rank))
        if ((int)rank != t->rank) {
            KT_SHAPES_TEXT();
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': input '%s' has shape %s; the plan takes %s",
                          m->name, t->name, got, want);
        }
        size_t need = t->elem;
        for (uint32_t k = 0; k < rank; k++) {
            if (shape[k] < 0 || (batching && k == 0 && (shape[0] < 1 || shape[0] > m->max_batch)) ||
                (!(batching && k == 0) && !kt_dim_ok(in->e, t, (int)k, shape[k]))) {
                KT_SHAPES_TEXT();
                return kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                              "kiln: model '%s': input '%s' has shape %s; the plan takes %s (dim %u out of range%s)",
                              m->name, t->name, got, want, k, batching && k == 0 ? " of max_batch_size" : "");
            }
            need *= (size_t)shape[k];
        }
        if (bytes != need) {
            KT_SHAPES_TEXT();
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': input '%s' has %llu bytes; shape %s needs %zu",
                          m->name, t->name, (unsigned long long)bytes, got, need);
        }
#undef KT_SHAPES_TEXT
        if (batching) {
            if (ii == 0) q->rows = shape[0];
            else if (shape[0] != q->rows)
                return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s': input '%s' has batch %lld, others %lld",
                              m->name, t->name, (long long)shape[0], (long long)q->rows);
        }
        if (ii < 64) q->inputs[ii] = inp, q->shapes[ii] = shape, q->ranks[ii] = rank, q->nbufs[ii] = nbuf;
        ii++;
    }
    return NULL;
}

static int kt_same_sample_shape(const kt_model *m, const kt_req *a, const kt_req *b) {
    int off = m->max_batch > 0 ? 1 : 0;
    for (int i = 0; i < m->n_in && i < 64; i++)
        for (uint32_t k = (uint32_t)off; k < a->ranks[i]; k++)
            if (a->shapes[i][k] != b->shapes[i][k]) return 0;
    return 1;
}

/* A profile for `rows` rows of these sample shapes: one that takes them as
 * they are, else the one needing the least padding (*run_rows > rows). */
static int kt_pick_profile(kt_instance *in, const kt_req *q0, int64_t rows, int64_t *run_rows) {
    kt_model *m = in->m;
    int best = -1;
    int64_t best_rows = INT64_MAX;
    int off = m->max_batch > 0 ? 1 : 0;
    for (int p = 0; p < kiln_engine_num_profiles(in->e); p++) {
        int64_t blo = 1, bhi = INT64_MAX;
        int ok = 1, ii = 0;
        for (int i = 0; i < m->n_io && ok; i++) {
            kt_io *t = &m->io[i];
            if (!t->is_input) continue;
            int r = 0;
            int64_t mn[KILN_MAX_DIMS], mx[KILN_MAX_DIMS];
            if (kiln_engine_profile_shape(in->e, p, t->name, &r, mn, NULL, mx) != KILN_OK || r != t->rank) {
                /* static input: no profile entry; its shape was checked already */
                ii++;
                continue;
            }
            for (int k = off; k < r; k++)
                if (q0->shapes[ii][k] < mn[k] || q0->shapes[ii][k] > mx[k]) ok = 0;
            if (off) {
                if (mn[0] > blo) blo = mn[0];
                if (mx[0] < bhi) bhi = mx[0];
            }
            ii++;
        }
        if (!ok || (off && (rows > bhi || blo > bhi))) continue;
        int64_t rr = off && rows < blo ? blo : rows;
        if (rr < best_rows && rr <= in->max_rows) best = p, best_rows = rr;
        if (rr == rows) break;
    }
    *run_rows = best_rows;
    return best;
}

static void kt_fail_group(kt_req *qs, int n, TRITONSERVER_Error *err) {
    for (int i = 0; i < n; i++)
        if (!qs[i].err) qs[i].err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
}

/* Memory the instance's engine can use in place: host memory for a CPU
 * engine; the instance's GPU for a GPU engine, and only without CUDA graphs
 * (a graph is captured for the addresses it ran with, so a new address each
 * request would capture again, which costs more than the copy it saves).
 * Aligned to 16 bytes for a CPU engine: kiln's CPU kernels load and store
 * unaligned vectors, but C code may assume the element's own alignment, and
 * 16 covers every type (the HTTP and gRPC front ends' output buffers come
 * from malloc, 16-aligned; their inputs sit in the request's bytes, often
 * not). 256 for a GPU engine, as the CUDA allocator aligns. */
static int kt_mem_usable(const kt_instance *in, const void *p, TRITONSERVER_MemoryType mt, int64_t mid) {
    if (!in->m->zero_copy || !p) return 0;
    if (!in->gpu) return mt != TRITONSERVER_MEMORY_GPU && ((uintptr_t)p & 15) == 0;
    return !in->m->graphs && mt == TRITONSERVER_MEMORY_GPU && mid == in->device && ((uintptr_t)p & 255) == 0;
}

/* Whether input ii of requests qs[0..n) lies in one piece of memory the
 * engine can use in place, in batch order: every request's buffers, one
 * after the other (one request with one buffer, or a batch whose buffers
 * Triton or the clients' shared memory laid end to end), `need` bytes in
 * all. *addr is its start then. */
static int kt_direct_input(kt_instance *in, kt_req *qs, int n, int ii, size_t need, void **addr) {
    if (!in->m->zero_copy || (in->gpu && in->m->graphs) || need == 0) return 0;
    const char *first = NULL, *next = NULL;
    size_t total = 0;
    for (int r = 0; r < n; r++) {
        uint32_t nbuf = qs[r].nbufs[ii];
        TRITONSERVER_Error *e = NULL;
        for (uint32_t k = 0; k < nbuf; k++) {
            const void *src = NULL;
            uint64_t sz = 0;
            TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
            int64_t mid = 0;
            if ((e = TRITONBACKEND_InputBuffer(qs[r].inputs[ii], k, &src, &sz, &mt, &mid))) break;
            if (sz == 0) continue;
            if (first ? (const char *)src != next || (mt == TRITONSERVER_MEMORY_GPU) != in->gpu
                      : !kt_mem_usable(in, src, mt, mid))
                return 0;
            if (!first) first = src;
            next = (const char *)src + sz;
            total += sz;
        }
        if (e) {
            TRITONSERVER_ErrorDelete(e);
            return 0;
        }
    }
    if (!first || total != need) return 0;
    *addr = (void *)first;
    return 1;
}

/* A one-request batch: make the response's outputs before the enqueue
 * (their shapes are known: kiln_context_output_shapes_exact) and mark those
 * whose buffers the engine can write in place. */
static TRITONSERVER_Error *kt_premake_outputs(kt_instance *in, kiln_context *ctx, kt_req *q, int batching) {
    kt_model *m = in->m;
    uint32_t n_out = 0;
    KT_TRY(TRITONBACKEND_RequestOutputCount(q->r, &n_out));
    for (uint32_t o = 0; o < n_out; o++) {
        const char *oname = NULL;
        KT_TRY(TRITONBACKEND_RequestOutputName(q->r, o, &oname));
        kt_io *t = kt_find_io(m, oname);
        if (!t || t->is_input)
            return kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s' has no output '%s'", m->name, oname);
        kt_preout *p = &in->pre[t - m->io];
        if (p->made) continue;
        int64_t dims[KILN_MAX_DIMS];
        int rank = kiln_context_tensor_shape(ctx, t->name, dims);
        if (rank < 0) return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: output '%s': %s", t->name, kiln_last_error());
        size_t bytes = t->elem;
        for (int k = 0; k < rank; k++) bytes *= (size_t)dims[k];
        if (batching && rank > 0) dims[0] = q->rows;
        TRITONBACKEND_Output *out = NULL;
        KT_TRY(TRITONBACKEND_ResponseOutput(q->resp, &out, t->name, t->map->t, dims, (uint32_t)rank));
        p->mt = TRITONSERVER_MEMORY_CPU;
        int64_t mid = 0;
        KT_TRY(TRITONBACKEND_OutputBuffer(out, &p->dst, bytes, &p->mt, &mid));
        p->made = 1;
        p->bytes = bytes;
        p->direct = bytes > 0 && kt_mem_usable(in, p->dst, p->mt, mid);
    }
    return NULL;
}

/* Run requests qs[0..n) (same sample shapes, rows within the limit) as one
 * enqueue and fill their responses. */
static void kt_run_group(kt_instance *in, kt_req *qs, int n, uint64_t *compute_start, uint64_t *compute_end) {
    kt_model *m = in->m;
    int batching = m->max_batch > 0;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) qs[i].row0 = rows, rows += qs[i].rows;
    int64_t want = rows;
    for (int b = 0; batching && b < m->n_buckets; b++)
        if (m->buckets[b] >= rows && m->buckets[b] <= in->max_rows) { want = m->buckets[b]; break; }
    int64_t run_rows = rows;
    int p = kt_pick_profile(in, &qs[0], batching ? want : 1, &run_rows);
    if (p < 0 && want != rows) p = kt_pick_profile(in, &qs[0], rows, &run_rows);
    if (p < 0) {
        kt_fail_group(qs, n, kt_err(TRITONSERVER_ERROR_INVALID_ARG,
                                    "kiln: model '%s': no optimization profile takes a batch of %lld with these shapes",
                                    m->name, (long long)rows));
        return;
    }
    if (!batching) run_rows = 1;
    kiln_status st;
    kt_ctx_slot *cs = NULL;
    TRITONSERVER_Error *cerr = kt_context_for(in, run_rows, &cs);
    if (cerr) {
        kt_fail_group(qs, n, cerr);
        return;
    }
    kiln_context *ctx = cs->ctx;
    if (p != cs->profile) {
        if ((st = kiln_context_set_profile(ctx, p)) != KILN_OK) {
            kt_fail_group(qs, n, kt_kerr(st, "choosing optimization profile for", in->name));
            return;
        }
        cs->profile = p;
    }
    /* inputs: shapes, then the data (gathered, padded) */
    int n_direct_in = 0, n_direct_out = 0;
    uint64_t t_in = kt_now_ns();
    /* the copy-in's device time serves only the verbose log's batch line:
     * its event is recorded only then (one record and one query less) */
    int verbose = TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE);
    if (in->gpu && verbose && (st = kiln_event_record(in->ev[0], in->stream)) != KILN_OK) {
        kt_fail_group(qs, n, kt_kerr(st, "recording an event for", in->name));
        return;
    }
    int ii = 0;
    for (int i = 0; i < m->n_io; i++) {
        kt_io *t = &m->io[i];
        if (!t->is_input) continue;
        int64_t dims[KILN_MAX_DIMS];
        memcpy(dims, qs[0].shapes[ii], (size_t)t->rank * sizeof(int64_t));
        if (batching) dims[0] = run_rows;
        if ((st = kiln_context_set_input_shape(ctx, t->name, t->rank, dims)) != KILN_OK) {
            kt_fail_group(qs, n, kt_kerr(st, "setting the shape of input", t->name));
            return;
        }
        size_t row_bytes = t->elem;
        for (int k = batching ? 1 : 0; k < t->rank; k++) row_bytes *= (size_t)dims[k];
        kt_buf *b = &in->bufs[i];
        void *addr = b->dev;
        uint32_t nbuf = 0;
        /* zero copy: the batch's bytes already lie in one piece of memory
         * the engine reads, in batch order, without padding rows */
        int direct = run_rows == rows && kt_direct_input(in, qs, n, ii, row_bytes * (size_t)rows, &addr);
        n_direct_in += direct;
        if (!direct) {
            /* Every request's rows land in one staging buffer, in batch order;
             * a GPU engine gathers host inputs into its pinned twin and sends
             * them with one copy (a piece already in device memory is copied
             * on the device, splitting the host copy around it). */
            size_t need = row_bytes * (size_t)run_rows, lo = 0, hi = 0;
            TRITONSERVER_Error *ge = kt_reserve(in, b, need, 1, in->gpu, t->name);
            if (ge) {
                kt_fail_group(qs, n, ge);
                return;
            }
            addr = b->dev;
            for (int r = 0; r < n; r++) {
                TRITONBACKEND_Input *inp = qs[r].inputs[ii];
                size_t off = (size_t)qs[r].row0 * row_bytes;
                nbuf = qs[r].nbufs[ii];
                for (uint32_t k = 0; k < nbuf; k++) {
                    const void *src;
                    uint64_t sz;
                    TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
                    int64_t mid = 0;
                    TRITONSERVER_Error *e = TRITONBACKEND_InputBuffer(inp, k, &src, &sz, &mt, &mid);
                    if (!e && off + sz > need)
                        e = kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: input '%s' overruns its staging buffer", t->name);
                    if (!e && !in->gpu) {
                        e = kt_copy_in(in, (char *)b->dev + off, src, mt, sz);
                    } else if (!e && (mt == TRITONSERVER_MEMORY_GPU ||
                                      (mt == TRITONSERVER_MEMORY_CPU_PINNED && sz >= KT_PINNED_DIRECT))) {
                        /* device memory: a copy on the device; a large piece
                         * of pinned host memory (Triton's pinned pool): sent
                         * as it is, without the memcpy into the staging (the
                         * buffer lives until the request is released, after
                         * the batch's sync); small pieces are gathered, as a
                         * copy each would cost more than the memcpy */
                        e = kt_flush_in(in, b, &lo, &hi);
                        if (!e && mt == TRITONSERVER_MEMORY_GPU) e = kt_copy_in(in, (char *)b->dev + off, src, mt, sz);
                        else if (!e && sz &&
                                 (st = kiln_engine_copy_async(in->e, (char *)b->dev + off, src, sz, KILN_COPY_TO_DEVICE,
                                                              in->stream)) != KILN_OK)
                            e = kt_kerr(st, "copying an input for", in->name);
                        lo = hi = off + sz;
                    } else if (!e) {
                        if (off != hi) {
                            e = kt_flush_in(in, b, &lo, &hi);
                            lo = hi = off;
                        }
                        if (!e) e = kt_gather_host(in, b, src, sz, &lo, &hi);
                    }
                    if (e) {
                        kt_fail_group(qs, n, e);
                        return;
                    }
                    off += sz;
                }
            }
            if (run_rows > rows) { /* padding rows of a ragged batch: zeros */
                size_t off = (size_t)rows * row_bytes, pad = (size_t)(run_rows - rows) * row_bytes;
                if (!in->gpu) {
                    memset((char *)b->dev + off, 0, pad);
                } else {
                    TRITONSERVER_Error *e = NULL;
                    if (off != hi) {
                        e = kt_flush_in(in, b, &lo, &hi);
                        lo = hi = off;
                    }
                    if (e) {
                        kt_fail_group(qs, n, e);
                        return;
                    }
                    memset((char *)b->host + off, 0, pad);
                    hi = off + pad;
                }
            }
            TRITONSERVER_Error *fe = in->gpu ? kt_flush_in(in, b, &lo, &hi) : NULL;
            if (fe) {
                kt_fail_group(qs, n, fe);
                return;
            }
        }
        if (addr != cs->bound[i]) {
            if ((st = kiln_context_set_tensor_address(ctx, t->name, addr)) != KILN_OK) {
                kt_fail_group(qs, n, kt_kerr(st, "binding input", t->name));
                return;
            }
            cs->bound[i] = addr;
        }
        ii++;
    }
    /* outputs of a one-request batch: the response's buffers are made now,
     * and those in memory the engine writes are bound, so kiln writes the
     * response in place. Every output is bound afresh each batch (to NULL,
     * the context's own memory, when not in place). */
    int pre = m->zero_copy && n == 1 && run_rows == rows && (!in->gpu || !m->graphs);
    for (int i = 0; i < m->n_io; i++) in->pre[i].made = in->pre[i].direct = 0;
    if (pre && kiln_context_output_shapes_exact(ctx) == 1) {
        kt_req *q = &qs[0];
        if ((q->err = kt_premake_outputs(in, ctx, q, batching))) return;
    }
    for (int i = 0; i < m->n_io; i++) {
        kt_io *t = &m->io[i];
        if (t->is_input) continue;
        void *want_addr = in->pre[i].direct ? in->pre[i].dst : NULL;
        n_direct_out += in->pre[i].direct;
        if (want_addr != cs->bound[i]) {
            if ((st = kiln_context_set_tensor_address(ctx, t->name, want_addr)) != KILN_OK) {
                kt_fail_group(qs, n, kt_kerr(st, "binding output", t->name));
                return;
            }
            cs->bound[i] = want_addr;
        }
    }
    /* compute: a GPU engine's times come from events around the copies and
     * the enqueue, so that compute is the plan's work alone */
    uint64_t t_c0 = kt_now_ns();
    st = KILN_OK;
    if (in->gpu) st = kiln_event_record(in->ev[1], in->stream);
    if (st == KILN_OK) st = kiln_context_enqueue(ctx, in->stream);
    if (st == KILN_OK && in->gpu) st = kiln_event_record(in->ev[2], in->stream);
    else if (st == KILN_OK) st = kiln_context_synchronize(ctx, in->stream);
    uint64_t t_c1 = kt_now_ns();
    if (st != KILN_OK) {
        kt_fail_group(qs, n, kt_kerr(st, "running", m->name));
        /* nothing of this batch may still read the staging buffers */
        if (in->gpu && kiln_context_synchronize(ctx, in->stream) != KILN_OK)
            kt_log(TRITONSERVER_LOG_ERROR, "kiln: instance '%s': %s", in->name, kiln_last_error());
        return;
    }
    /* outputs: the responses' buffers are made while a GPU engine computes;
     * each output then comes back with one copy of the batch's rows into
     * pinned staging, and each response takes its rows from there after the
     * batch's one synchronization (a response buffer in device memory gets a
     * copy on the device) */
    for (int i = 0; i < m->n_io; i++) in->ob[i].to_host = 0;
    in->n_sc = 0;
    for (int r = 0; r < n; r++) {
        kt_req *q = &qs[r];
        uint32_t n_out = 0;
        if (!q->err) q->err = TRITONBACKEND_RequestOutputCount(q->r, &n_out);
        for (uint32_t o = 0; o < n_out && !q->err; o++) {
            const char *oname = NULL;
            if ((q->err = TRITONBACKEND_RequestOutputName(q->r, o, &oname))) break;
            kt_io *t = kt_find_io(m, oname);
            if (!t || t->is_input) {
                q->err = kt_err(TRITONSERVER_ERROR_INVALID_ARG, "kiln: model '%s' has no output '%s'", m->name, oname);
                break;
            }
            int io = (int)(t - m->io);
            int64_t dims[KILN_MAX_DIMS];
            int rank = kiln_context_tensor_shape(ctx, t->name, dims);
            void *src = kiln_context_tensor_address(ctx, t->name);
            if (rank < 0 || !src) {
                q->err = kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: output '%s': %s", t->name, kiln_last_error());
                break;
            }
            size_t row_bytes = t->elem;
            for (int k = batching ? 1 : 0; k < rank; k++) row_bytes *= (size_t)dims[k];
            if (batching) dims[0] = q->rows;
            size_t bytes = row_bytes * (size_t)(batching ? q->rows : 1);
            size_t off = (size_t)q->row0 * row_bytes;
            void *dst = NULL;
            TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
            int64_t mid = 0;
            if (in->pre[io].made) { /* made before the enqueue (one request) */
                dst = in->pre[io].dst;
                mt = in->pre[io].mt;
                if (in->pre[io].bytes != bytes) {
                    q->err = kt_err(TRITONSERVER_ERROR_INTERNAL,
                                    "kiln: output '%s' has %zu bytes after the run, %zu before", t->name, bytes,
                                    in->pre[io].bytes);
                    break;
                }
                if (dst == src) continue; /* kiln wrote the response in place */
            } else {
                TRITONBACKEND_Output *out = NULL;
                if ((q->err = TRITONBACKEND_ResponseOutput(q->resp, &out, t->name, t->map->t, dims, (uint32_t)rank)))
                    break;
                if ((q->err = TRITONBACKEND_OutputBuffer(out, &dst, bytes, &mt, &mid))) break;
            }
            if (!in->gpu || mt == TRITONSERVER_MEMORY_GPU) {
                q->err = kt_copy_out(in, dst, mt, (char *)src + off, bytes);
                continue;
            }
            if (in->n_sc == in->cap_sc) {
                size_t cap = in->cap_sc ? 2 * in->cap_sc : 64;
                kt_scatter *sc = realloc(in->sc, cap * sizeof *sc);
                if (!sc) {
                    q->err = kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: out of memory");
                    break;
                }
                in->sc = sc;
                in->cap_sc = cap;
            }
            in->sc[in->n_sc++] = (kt_scatter){dst, io, off, bytes};
            kt_obatch *ob = &in->ob[io];
            ob->src = src;
            ob->bytes = row_bytes * (size_t)(batching ? rows : 1);
            ob->to_host = 1;
        }
    }
    if (!in->gpu) {
        uint64_t t_end = kt_now_ns();
        *compute_start = t_c0;
        *compute_end = t_c1;
        kt_log(TRITONSERVER_LOG_VERBOSE,
               "kiln: '%s' batch of %lld: copy-in %.1f us, compute %.1f us, copy-out %.1f us; in place: %d of %d "
               "inputs, %d of %d outputs",
               in->name, (long long)rows, (double)(t_c0 - t_in) / 1e3, (double)(t_c1 - t_c0) / 1e3,
               (double)(t_end - t_c1) / 1e3, n_direct_in, m->n_in, n_direct_out, m->n_io - m->n_in);
        return;
    }
    TRITONSERVER_Error *oe = NULL;
    for (int i = 0; i < m->n_io && !oe; i++) {
        kt_obatch *ob = &in->ob[i];
        if (!ob->to_host) continue;
        oe = kt_reserve(in, &in->bufs[i], ob->bytes, 0, 1, m->io[i].name);
        if (!oe && (st = kiln_engine_copy_async(in->e, in->bufs[i].host, ob->src, ob->bytes, KILN_COPY_TO_HOST,
                                                in->stream)) != KILN_OK)
            oe = kt_kerr(st, "copying an output for", in->name);
    }
    if (!oe && (st = kiln_event_record(in->ev[3], in->stream)) != KILN_OK) oe = kt_kerr(st, "recording an event for", in->name);
    /* the batch's one synchronization */
    if ((st = kiln_context_synchronize(ctx, in->stream)) != KILN_OK && !oe) oe = kt_kerr(st, "running", m->name);
    uint64_t t_end = kt_now_ns();
    if (oe) {
        kt_fail_group(qs, n, oe);
        return;
    }
    for (size_t k = 0; k < in->n_sc; k++) {
        kt_scatter *sc = &in->sc[k];
        memcpy(sc->dst, (char *)in->bufs[sc->io].host + sc->off, sc->bytes);
    }
    /* the device's times, placed on the host's clock: the copy-out ended by
     * the synchronization's return */
    double ms_in = 0, ms_c = 0, ms_out = 0;
    if ((verbose && kiln_event_elapsed_ms(in->ev[0], in->ev[1], &ms_in) != KILN_OK) ||
        kiln_event_elapsed_ms(in->ev[1], in->ev[2], &ms_c) != KILN_OK ||
        kiln_event_elapsed_ms(in->ev[2], in->ev[3], &ms_out) != KILN_OK) {
        *compute_start = t_c0; /* no device times: the host's view */
        *compute_end = t_end;
        return;
    }
    uint64_t ns_c = (uint64_t)(ms_c * 1e6), ns_out = (uint64_t)(ms_out * 1e6);
    uint64_t ce = t_end > ns_out ? t_end - ns_out : t_end;
    uint64_t c0 = ce > ns_c ? ce - ns_c : ce;
    if (c0 < t_in) c0 = t_in;
    if (ce < c0) ce = c0;
    *compute_start = c0;
    *compute_end = ce;
    kt_log(TRITONSERVER_LOG_VERBOSE,
           "kiln: '%s' batch of %lld: copy-in %.1f us, compute %.1f us, copy-out %.1f us; in place: %d of %d "
           "inputs, %d of %d outputs",
           in->name, (long long)rows, ms_in * 1e3, ms_c * 1e3, ms_out * 1e3, n_direct_in, m->n_in, n_direct_out,
           m->n_io - m->n_in);
}

/* One warm-up enqueue on zeros: sample shapes q->shapes, profile p, batch
 * run_rows, on the context that batch size runs on. */
static TRITONSERVER_Error *kt_warm_one(kt_instance *in, const kt_req *q, int p, int64_t run_rows) {
    kt_model *m = in->m;
    kt_ctx_slot *cs = NULL;
    kiln_status st;
    KT_TRY(kt_context_for(in, run_rows, &cs));
    kiln_context *ctx = cs->ctx;
    if (p != cs->profile) {
        if ((st = kiln_context_set_profile(ctx, p)) != KILN_OK) return kt_kerr(st, "choosing optimization profile for", in->name);
        cs->profile = p;
    }
    int ii = 0;
    for (int i = 0; i < m->n_io; i++) {
        kt_io *t = &m->io[i];
        if (t->is_input) {
            int64_t dims[KILN_MAX_DIMS];
            memcpy(dims, q->shapes[ii], (size_t)t->rank * sizeof(int64_t));
            if (m->max_batch > 0) dims[0] = run_rows;
            if ((st = kiln_context_set_input_shape(ctx, t->name, t->rank, dims)) != KILN_OK)
                return kt_kerr(st, "setting the shape of input", t->name);
            size_t bytes = t->elem;
            for (int k = 0; k < t->rank; k++) bytes *= (size_t)dims[k];
            kt_buf *b = &in->bufs[i];
            KT_TRY(kt_reserve(in, b, bytes, 1, in->gpu, t->name));
            if (!in->gpu) {
                memset(b->dev, 0, bytes);
            } else {
                memset(b->host, 0, bytes);
                if (bytes && (st = kiln_engine_copy_async(in->e, b->dev, b->host, bytes, KILN_COPY_TO_DEVICE,
                                                          in->stream)) != KILN_OK)
                    return kt_kerr(st, "copying an input for", in->name);
            }
            if ((st = kiln_context_set_tensor_address(ctx, t->name, b->dev)) != KILN_OK)
                return kt_kerr(st, "binding input", t->name);
            cs->bound[i] = b->dev;
            ii++;
        } else if (cs->bound[i]) {
            if ((st = kiln_context_set_tensor_address(ctx, t->name, NULL)) != KILN_OK)
                return kt_kerr(st, "binding output", t->name);
            cs->bound[i] = NULL;
        }
    }
    if ((st = kiln_context_enqueue(ctx, in->stream)) != KILN_OK) return kt_kerr(st, "running", m->name);
    if ((st = kiln_context_synchronize(ctx, in->stream)) != KILN_OK) return kt_kerr(st, "running", m->name);
    /* a GPU engine's outputs come back through pinned staging: make it now
     * for this batch size, so that no request grows it (cudaFreeHost and
     * cudaHostAlloc wait for the whole device, the other instances' work
     * included) */
    for (int i = 0; in->gpu && i < m->n_io; i++) {
        kt_io *t = &m->io[i];
        if (t->is_input) continue;
        int64_t dims[KILN_MAX_DIMS];
        int rank = kiln_context_tensor_shape(ctx, t->name, dims);
        if (rank < 0) return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: output '%s': %s", t->name, kiln_last_error());
        size_t bytes = t->elem;
        for (int k = 0; k < rank; k++) bytes *= (size_t)dims[k];
        KT_TRY(kt_reserve(in, &in->bufs[i], bytes, 0, 1, t->name));
    }
    return NULL;
}

/* bucket_warmup (on by default): at load, one enqueue on zeros for each
 * batch bucket, on the context that bucket runs on, so that the kernels of
 * each batch size are made (oneDNN primitives on the CPU), its activation
 * memory planned and, on a GPU, its CUDA graph captured before the first
 * request, which would otherwise pay for all of it. Dynamic dims other than
 * the batch take the profile's opt sizes. As many buckets as the instance
 * keeps contexts (graph_contexts), smallest first; without batching one run
 * at the profile's opt shape. A failure fails the load. */
static TRITONSERVER_Error *kt_instance_warmup(kt_instance *in) {
    kt_model *m = in->m;
    if (!m->warmup) return NULL;
    int batching = m->max_batch > 0;
    int n_try = batching && m->n_buckets > 0 ? m->n_buckets : 1;
    int limit = kt_context_count(m);
    int64_t done[KT_MAX_CONTEXTS];
    int n_done = 0;
    char list[256];
    size_t lo = 0;
    list[0] = 0;
    uint64_t t0 = kt_now_ns();
    kt_req *q = calloc(1, sizeof *q);
    int64_t(*shp)[KILN_MAX_DIMS] = calloc(64, sizeof *shp);
    if (!q || !shp) {
        free(q);
        free(shp);
        return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: out of memory");
    }
    TRITONSERVER_Error *err = NULL;
    for (int b = 0; b < n_try && n_done < limit && !err; b++) {
        int64_t want = batching && m->n_buckets > 0 ? m->buckets[b] : 1;
        if (want > in->max_rows) continue;
        /* the opt sizes of the first profile whose batch range takes `want` */
        int dp = 0;
        for (int p = 0; batching && p < kiln_engine_num_profiles(in->e); p++) {
            int ok = 1;
            for (int i = 0; i < m->n_io && ok; i++) {
                int r = 0;
                int64_t mn[KILN_MAX_DIMS], mx[KILN_MAX_DIMS];
                if (m->io[i].is_input &&
                    kiln_engine_profile_shape(in->e, p, m->io[i].name, &r, mn, NULL, mx) == KILN_OK && r > 0)
                    ok = want >= mn[0] && want <= mx[0];
            }
            if (ok) {
                dp = p;
                break;
            }
        }
        int ii = 0;
        for (int i = 0; i < m->n_io && ii < 64; i++) {
            kt_io *t = &m->io[i];
            if (!t->is_input) continue;
            int r = 0;
            int64_t opt[KILN_MAX_DIMS];
            int have = kiln_engine_profile_shape(in->e, dp, t->name, &r, NULL, opt, NULL) == KILN_OK && r == t->rank;
            for (int k = 0; k < t->rank; k++) shp[ii][k] = t->dims[k] >= 0 ? t->dims[k] : have ? opt[k] : 1;
            if (batching) shp[ii][0] = want;
            q->shapes[ii] = shp[ii];
            q->ranks[ii] = (uint32_t)t->rank;
            ii++;
        }
        int64_t run_rows = want;
        int p = kt_pick_profile(in, q, batching ? want : 1, &run_rows);
        if (p < 0) continue; /* a bucket no profile serves: the batches of that size pad past it */
        if (!batching) run_rows = 1;
        int seen = 0;
        for (int k = 0; k < n_done; k++) seen |= done[k] == run_rows;
        if (seen) continue;
        err = kt_warm_one(in, q, p, run_rows);
        if (err) {
            TRITONSERVER_Error *e2 = kt_err(TRITONSERVER_ERROR_INTERNAL,
                                            "kiln: instance '%s': warm-up at batch %lld failed "
                                            "(parameter bucket_warmup: false turns it off): %s",
                                            in->name, (long long)run_rows, TRITONSERVER_ErrorMessage(err));
            TRITONSERVER_ErrorDelete(err);
            err = e2;
            break;
        }
        done[n_done++] = run_rows;
        if (lo < sizeof list)
            lo += (size_t)snprintf(list + lo, sizeof list - lo, "%s%lld", n_done > 1 ? ", " : "", (long long)run_rows);
    }
    free(q);
    free(shp);
    if (!err)
        kt_log(TRITONSERVER_LOG_INFO, "kiln: instance '%s': warm-up ran %d context%s (batch %s) in %.1f ms", in->name,
               n_done, n_done == 1 ? "" : "s", n_done ? list : "-", (double)(kt_now_ns() - t0) / 1e6);
    return err;
}

static void kt_send(kt_req *q) {
    if (q->resp) {
        TRITONSERVER_Error *e = TRITONBACKEND_ResponseSend(q->resp, KT_RESPONSE_COMPLETE_FINAL, q->err);
        if (e) {
            kt_log(TRITONSERVER_LOG_ERROR, "kiln: sending a response: %s", TRITONSERVER_ErrorMessage(e));
            TRITONSERVER_ErrorDelete(e);
        }
        q->resp = NULL;
    }
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance *instance,
                                                       TRITONBACKEND_Request **requests,
                                                       const uint32_t request_count) {
    uint64_t exec_start = kt_now_ns();
    void *state = NULL;
    KT_TRY(TRITONBACKEND_ModelInstanceState(instance, &state));
    kt_instance *in = state;
    kt_model *m = in->m;
    if (request_count > in->cap_reqs) { /* grows to the largest batch of requests, once */
        kt_req *r = realloc(in->reqs, request_count * sizeof *r);
        if (!r) return kt_err(TRITONSERVER_ERROR_INTERNAL, "kiln: out of memory");
        in->reqs = r;
        in->cap_reqs = request_count;
    }
    kt_req *qs = in->reqs;
    if (request_count) memset(qs, 0, request_count * sizeof *qs);
    kt_set_device(in->device);
    for (uint32_t i = 0; i < request_count; i++) {
        qs[i].r = requests[i];
        qs[i].err = TRITONBACKEND_ResponseNew(&qs[i].resp, requests[i]);
        if (!qs[i].err) qs[i].err = kt_check_request(in, &qs[i]);
        if (m->n_in > 64 && !qs[i].err)
            qs[i].err = kt_err(TRITONSERVER_ERROR_UNSUPPORTED, "kiln: more than 64 inputs");
    }
    /* groups of consecutive good requests with one sample shape */
    uint64_t batch_rows = 0, cstart = 0, cend = 0;
    uint32_t i = 0;
    while (i < request_count) {
        if (qs[i].err) { i++; continue; }
        uint32_t j = i + 1;
        int64_t rows = qs[i].rows;
        while (j < request_count && !qs[j].err && m->max_batch > 0 && kt_same_sample_shape(m, &qs[i], &qs[j]) &&
               rows + qs[j].rows <= m->max_batch)
            rows += qs[j].rows, j++;
        uint64_t cs = 0, ce = 0;
        kt_run_group(in, &qs[i], (int)(j - i), &cs, &ce);
        if (in->gpu && qs[i].err && kiln_context_synchronize(in->ctxs[0].ctx, in->stream) != KILN_OK)
            kt_log(TRITONSERVER_LOG_ERROR, "kiln: instance '%s': %s", in->name, kiln_last_error());
        if (!cstart) cstart = cs;
        if (ce) cend = ce;
        batch_rows += (uint64_t)rows;
        i = j;
    }
    uint64_t exec_end = kt_now_ns();
    if (!cstart) cstart = cend = exec_end;
    for (uint32_t r = 0; r < request_count; r++) {
        int ok = qs[r].err == NULL;
        kt_send(&qs[r]);
        if (qs[r].err) TRITONSERVER_ErrorDelete(qs[r].err);
        TRITONSERVER_Error *e = TRITONBACKEND_ModelInstanceReportStatistics(instance, requests[r], ok, exec_start,
                                                                            cstart, cend, exec_end);
        if (e) TRITONSERVER_ErrorDelete(e);
        e = TRITONBACKEND_RequestRelease(requests[r], KT_REQUEST_RELEASE_ALL);
        if (e) {
            kt_log(TRITONSERVER_LOG_ERROR, "kiln: releasing a request: %s", TRITONSERVER_ErrorMessage(e));
            TRITONSERVER_ErrorDelete(e);
        }
    }
    if (batch_rows) {
        TRITONSERVER_Error *e = TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, batch_rows, exec_start,
                                                                                 cstart, cend, exec_end);
        if (e) TRITONSERVER_ErrorDelete(e);
    }
    return NULL;
}
