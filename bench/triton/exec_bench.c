/* exec_bench.c - the kiln Triton backend's own time per execution, without
 * Triton: this program is a stand-in server. It implements the parts of
 * Triton's C API that libtriton_kiln.so calls (src/triton/triton_api.h),
 * loads the backend with dlopen, makes one model and one instance of a plan
 * (the backend's own load path: auto-complete, buckets, warm-up), and calls
 * TRITONBACKEND_ModelInstanceExecute in a loop with K requests of batch 1,
 * each input in its own host buffer (as Triton's HTTP and gRPC front ends
 * hand them). Then it runs the same work through kiln's API alone on a
 * context and stream of its own: the same gathers into pinned staging, one
 * copy in, the enqueue, one copy out and the split into per-request
 * buffers ("kiln + copies"), and the enqueue alone ("kiln"). The backend's
 * overhead per execution is its time less kiln + copies. Every response is
 * checked against the kiln run on the same inputs.
 *
 *   triton_exec_bench --backend build/triton/backends/kiln/libtriton_kiln.so \
 *       --plan model.plan [--kind gpu|cpu] [--requests K] [--iters N] [--warm W]
 *       [--param key=value ...] [--pinned] [--json FILE]
 *
 * --requests K: requests per execution (the batch Triton's batcher formed);
 * they run at the backend's bucket for K rows (1, 2, 4, 8, 12, 16, 24, ...),
 * and so does the kiln run. --pinned hands the inputs in pinned host memory
 * (TRITONSERVER_MEMORY_CPU_PINNED, as from Triton's pinned pool). Exit 0
 * when every response matched, 1 otherwise, 2 on a usage or load error.
 * Deterministic inputs (a fixed seed). See docs/serving.md. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kiln/kiln.h"
#include "kiln/kiln_runtime.h"
#include "triton_api.h"

#define EB_MAX_IO 32
#define EB_MAX_PARAMS 32

#define EXPORT __attribute__((visibility("default")))

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------
 * The stand-in server's objects */

struct TRITONSERVER_Error {
    TRITONSERVER_Error_Code code;
    char *msg;
};
struct TRITONSERVER_Message {
    char *json;
};
struct TRITONBACKEND_Backend {
    int unused;
};
struct TRITONBACKEND_Model {
    char *name, *repo;
    char *config; /* JSON */
    void *state;
};
struct TRITONBACKEND_ModelInstance {
    TRITONBACKEND_Model *model;
    TRITONSERVER_InstanceGroupKind kind;
    void *state;
    /* statistics, summed over requests (ns) */
    uint64_t n_req, n_fail, in_ns, infer_ns, out_ns, n_exec, batch_rows;
};
struct TRITONBACKEND_Input {
    const char *name;
    TRITONSERVER_DataType dt;
    int64_t shape[KILN_MAX_DIMS];
    uint32_t rank;
    void *data;
    uint64_t bytes;
    TRITONSERVER_MemoryType mt;
};
struct TRITONBACKEND_Output {
    char name[128];
    TRITONSERVER_DataType dt;
    int64_t shape[KILN_MAX_DIMS];
    uint32_t rank;
    void *buf;
    uint64_t bytes;
};
struct TRITONBACKEND_Response {
    TRITONBACKEND_Request *req;
    int n_out;
    struct TRITONBACKEND_Output out[EB_MAX_IO];
};
struct TRITONBACKEND_Request {
    int n_in, n_out;
    struct TRITONBACKEND_Input in[EB_MAX_IO];
    const char *out_names[EB_MAX_IO];
    int released, sent;
    TRITONSERVER_Error *err;      /* what the backend sent */
    struct TRITONBACKEND_Response *sent_resp; /* kept to check, then freed */
};

static int eb_verbose;

EXPORT TRITONSERVER_Error *TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char *msg) {
    TRITONSERVER_Error *e = calloc(1, sizeof *e);
    if (!e) abort();
    e->code = code;
    e->msg = strdup(msg ? msg : "");
    return e;
}
EXPORT void TRITONSERVER_ErrorDelete(TRITONSERVER_Error *e) {
    if (e) free(e->msg), free(e);
}
EXPORT const char *TRITONSERVER_ErrorMessage(TRITONSERVER_Error *e) { return e ? e->msg : ""; }
EXPORT bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level) {
    return level != TRITONSERVER_LOG_VERBOSE || eb_verbose;
}
EXPORT TRITONSERVER_Error *TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char *file, const int line,
                                                   const char *msg) {
    (void)file, (void)line;
    fprintf(stderr, "[%s] %s\n", level == TRITONSERVER_LOG_ERROR ? "E" : level == TRITONSERVER_LOG_WARN ? "W"
                                 : level == TRITONSERVER_LOG_INFO  ? "I" : "V", msg);
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message **m, const char *base,
                                                                     size_t n) {
    *m = calloc(1, sizeof **m);
    if (!*m || !((*m)->json = strndup(base, n))) abort();
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONSERVER_MessageDelete(TRITONSERVER_Message *m) {
    if (m) free(m->json), free(m);
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message *m, const char **base,
                                                               size_t *n) {
    *base = m->json;
    *n = strlen(m->json);
    return NULL;
}

EXPORT TRITONSERVER_Error *TRITONBACKEND_ApiVersion(uint32_t *major, uint32_t *minor) {
    *major = KT_BACKEND_API_MAJOR;
    *minor = KT_BACKEND_API_MINOR;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_BackendName(TRITONBACKEND_Backend *b, const char **name) {
    (void)b;
    *name = "kiln";
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelName(TRITONBACKEND_Model *m, const char **name) {
    *name = m->name;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelVersion(TRITONBACKEND_Model *m, uint64_t *v) {
    (void)m;
    *v = 1;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelRepository(TRITONBACKEND_Model *m, TRITONBACKEND_ArtifactType *t,
                                                         const char **loc) {
    *t = TRITONBACKEND_ARTIFACT_FILESYSTEM;
    *loc = m->repo;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelConfig(TRITONBACKEND_Model *m, const uint32_t v,
                                                     TRITONSERVER_Message **out) {
    (void)v;
    return TRITONSERVER_MessageNewFromSerializedJson(out, m->config, strlen(m->config));
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model *m, bool *ac) {
    (void)m;
    *ac = true;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model *m, const uint32_t v,
                                                        TRITONSERVER_Message *msg) {
    (void)v;
    free(m->config);
    m->config = strdup(msg->json);
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelState(TRITONBACKEND_Model *m, void **s) {
    *s = m->state;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelSetState(TRITONBACKEND_Model *m, void *s) {
    m->state = s;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance *i, const char **name) {
    (void)i;
    *name = "bench_0";
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance *i,
                                                           TRITONSERVER_InstanceGroupKind *k) {
    *k = i->kind;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance *i, int32_t *d) {
    (void)i;
    *d = 0;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance *i,
                                                            TRITONBACKEND_Model **m) {
    *m = i->model;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance *i, void **s) {
    *s = i->state;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance *i, void *s) {
    i->state = s;
    return NULL;
}
/* As Triton does: compute_input = compute_start - exec_start, compute_infer
 * = compute_end - compute_start, compute_output = exec_end - compute_end. */
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance *i,
                                                                       TRITONBACKEND_Request *r, const bool ok,
                                                                       const uint64_t es, const uint64_t cs,
                                                                       const uint64_t ce, const uint64_t ee) {
    (void)r;
    if (!ok) {
        i->n_fail++;
        return NULL;
    }
    i->n_req++;
    i->in_ns += cs - es;
    i->infer_ns += ce - cs;
    i->out_ns += ee - ce;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance *i,
                                                                            const uint64_t bs, const uint64_t es,
                                                                            const uint64_t cs, const uint64_t ce,
                                                                            const uint64_t ee) {
    (void)es, (void)cs, (void)ce, (void)ee;
    i->n_exec++;
    i->batch_rows += bs;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request *r, uint32_t *n) {
    *n = (uint32_t)r->n_in;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_RequestInput(TRITONBACKEND_Request *r, const char *name,
                                                      TRITONBACKEND_Input **in) {
    for (int k = 0; k < r->n_in; k++)
        if (!strcmp(r->in[k].name, name)) {
            *in = &r->in[k];
            return NULL;
        }
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_NOT_FOUND, "no such input");
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_RequestInputByIndex(TRITONBACKEND_Request *r, const uint32_t idx,
                                                             TRITONBACKEND_Input **in) {
    if (idx >= (uint32_t)r->n_in) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "input index");
    *in = &r->in[idx];
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request *r, uint32_t *n) {
    *n = (uint32_t)r->n_out;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request *r, const uint32_t idx,
                                                           const char **name) {
    if (idx >= (uint32_t)r->n_out) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "output index");
    *name = r->out_names[idx];
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_RequestRelease(TRITONBACKEND_Request *r, uint32_t flags) {
    (void)flags;
    r->released = 1;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_InputProperties(TRITONBACKEND_Input *in, const char **name,
                                                         TRITONSERVER_DataType *dt, const int64_t **shape,
                                                         uint32_t *rank, uint64_t *bytes, uint32_t *nbuf) {
    if (name) *name = in->name;
    if (dt) *dt = in->dt;
    if (shape) *shape = in->shape;
    if (rank) *rank = in->rank;
    if (bytes) *bytes = in->bytes;
    if (nbuf) *nbuf = 1;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_InputBuffer(TRITONBACKEND_Input *in, const uint32_t idx, const void **buf,
                                                     uint64_t *bytes, TRITONSERVER_MemoryType *mt, int64_t *mid) {
    if (idx != 0) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "buffer index");
    *buf = in->data;
    *bytes = in->bytes;
    *mt = in->mt;
    *mid = 0;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ResponseNew(TRITONBACKEND_Response **resp, TRITONBACKEND_Request *r) {
    *resp = calloc(1, sizeof **resp);
    if (!*resp) abort();
    (*resp)->req = r;
    return NULL;
}
static void response_free(TRITONBACKEND_Response *resp) {
    if (!resp) return;
    for (int k = 0; k < resp->n_out; k++) free(resp->out[k].buf);
    free(resp);
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response *resp) {
    response_free(resp);
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response *resp, TRITONBACKEND_Output **out,
                                                        const char *name, const TRITONSERVER_DataType dt,
                                                        const int64_t *shape, const uint32_t rank) {
    if (resp->n_out == EB_MAX_IO || rank > KILN_MAX_DIMS)
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "too many outputs");
    struct TRITONBACKEND_Output *o = &resp->out[resp->n_out++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dt = dt;
    o->rank = rank;
    memcpy(o->shape, shape, rank * sizeof *shape);
    *out = o;
    return NULL;
}
/* Host memory from malloc (16-aligned or better), as the HTTP and gRPC
 * front ends give it. */
EXPORT TRITONSERVER_Error *TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output *o, void **buf, const uint64_t bytes,
                                                      TRITONSERVER_MemoryType *mt, int64_t *mid) {
    free(o->buf);
    o->buf = malloc(bytes ? bytes : 1);
    if (!o->buf) abort();
    o->bytes = bytes;
    *buf = o->buf;
    *mt = TRITONSERVER_MEMORY_CPU;
    *mid = 0;
    return NULL;
}
EXPORT TRITONSERVER_Error *TRITONBACKEND_ResponseSend(TRITONBACKEND_Response *resp, const uint32_t flags,
                                                      TRITONSERVER_Error *err) {
    (void)flags;
    TRITONBACKEND_Request *r = resp->req;
    r->sent++;
    TRITONSERVER_ErrorDelete(r->err);
    r->err = err ? TRITONSERVER_ErrorNew(err->code, err->msg) : NULL;
    response_free(r->sent_resp);
    r->sent_resp = resp;
    return NULL;
}

/* ------------------------------------------------------------------------
 * The bench */

typedef TRITONSERVER_Error *(*eb_fn1)(void *);
typedef TRITONSERVER_Error *(*eb_exec_fn)(TRITONBACKEND_ModelInstance *, TRITONBACKEND_Request **, const uint32_t);

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "exec_bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static void kcheck(kiln_status st, const char *what) {
    if (st != KILN_OK) die("%s: %s (%s)", what, kiln_last_error(), kiln_status_name(st));
}

static void tcheck(TRITONSERVER_Error *e, const char *what) {
    if (e) die("%s: %s", what, e->msg);
}

static TRITONSERVER_DataType tdtype(kiln_dtype d) {
    switch (d) {
    case KILN_DTYPE_FLOAT: return TRITONSERVER_TYPE_FP32;
    case KILN_DTYPE_FLOAT16: return TRITONSERVER_TYPE_FP16;
    case KILN_DTYPE_BFLOAT16: return TRITONSERVER_TYPE_BF16;
    case KILN_DTYPE_DOUBLE: return TRITONSERVER_TYPE_FP64;
    case KILN_DTYPE_INT8: return TRITONSERVER_TYPE_INT8;
    case KILN_DTYPE_INT16: return TRITONSERVER_TYPE_INT16;
    case KILN_DTYPE_INT32: return TRITONSERVER_TYPE_INT32;
    case KILN_DTYPE_INT64: return TRITONSERVER_TYPE_INT64;
    case KILN_DTYPE_UINT8: return TRITONSERVER_TYPE_UINT8;
    case KILN_DTYPE_UINT16: return TRITONSERVER_TYPE_UINT16;
    case KILN_DTYPE_UINT32: return TRITONSERVER_TYPE_UINT32;
    case KILN_DTYPE_UINT64: return TRITONSERVER_TYPE_UINT64;
    case KILN_DTYPE_BOOL: return TRITONSERVER_TYPE_BOOL;
    default: return TRITONSERVER_TYPE_INVALID;
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t e = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t m = x & 0x7fffffu;
    if (e <= 0) return (uint16_t)sign; /* tiny values: zero (inputs are in [-1, 1]) */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | ((uint32_t)e << 10) | ((m + 0x1000u) >> 13));
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, x;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    if (e == 31) x = sign | 0x7f800000u | (m << 13);
    else x = sign | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Deterministic values every plan takes: floats in [-1, 1]; integers 0 or
 * 1 (valid token ids and masks); bools 0 or 1. */
static void fill(void *p, kiln_dtype d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float f = (float)(rng() % 2001) / 1000.f - 1.f;
        int v = (int)(rng() & 1);
        switch (d) {
        case KILN_DTYPE_FLOAT: ((float *)p)[i] = f; break;
        case KILN_DTYPE_FLOAT16: ((uint16_t *)p)[i] = f32_to_f16(f); break;
        case KILN_DTYPE_DOUBLE: ((double *)p)[i] = f; break;
        case KILN_DTYPE_INT64: ((int64_t *)p)[i] = v; break;
        case KILN_DTYPE_INT32: ((int32_t *)p)[i] = v; break;
        default: memset((char *)p + i * kiln_dtype_size(d), v, kiln_dtype_size(d)); break;
        }
    }
}

/* The largest |a - b| over n elements (0 when the bytes are equal; INF for
 * differing bytes of a type compared exactly). */
static double max_diff(const void *a, const void *b, kiln_dtype d, size_t n) {
    if (!memcmp(a, b, n * kiln_dtype_size(d))) return 0;
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double x, y;
        if (d == KILN_DTYPE_FLOAT) x = ((const float *)a)[i], y = ((const float *)b)[i];
        else if (d == KILN_DTYPE_FLOAT16) x = f16_to_f32(((const uint16_t *)a)[i]), y = f16_to_f32(((const uint16_t *)b)[i]);
        else if (d == KILN_DTYPE_DOUBLE) x = ((const double *)a)[i], y = ((const double *)b)[i];
        else return INFINITY;
        if (isnan(x) != isnan(y)) return INFINITY;
        if (fabs(x - y) > m) m = fabs(x - y);
    }
    return m;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct eb_times {
    double median_us, mean_us, p99_us;
} eb_times;

static eb_times summarize(uint64_t *t, int n) {
    eb_times s = {0, 0, 0};
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)t[i];
    qsort(t, (size_t)n, sizeof *t, cmp_u64);
    s.median_us = (double)t[n / 2] / 1e3;
    s.mean_us = sum / n / 1e3;
    s.p99_us = (double)t[(int)((n - 1) * 0.99)] / 1e3;
    return s;
}

/* The backend's default bucket for `rows` (kt_default_buckets): 1, 2, 4, 8,
 * then 1.5x and 4/3x steps, and max_batch. */
static int64_t default_bucket(int64_t rows, int64_t max_batch) {
    for (int64_t b = 1; b < max_batch;) {
        if (b >= rows) return b;
        b = b < 8 ? 2 * b : (b & (b - 1)) == 0 ? b + b / 2 : b / 3 * 4;
    }
    return max_batch;
}

typedef struct eb_io {
    const char *name;
    kiln_dtype dt;
    int rank;
    int64_t dims[KILN_MAX_DIMS]; /* one request's shape: batch 1 */
    size_t row_bytes, row_elems;
} eb_io;

static void usage(void) {
    fprintf(stderr,
            "usage: triton_exec_bench --backend LIB --plan PLAN [--kind gpu|cpu] [--requests K] [--iters N]\n"
            "       [--warm W] [--param key=value]... [--pinned] [--verbose] [--json FILE]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *lib = NULL, *plan = NULL, *kind = NULL, *json = NULL;
    const char *params[EB_MAX_PARAMS];
    int n_params = 0, K = 1, iters = 2000, warm = 200, pinned = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--backend") && v) lib = v, i++;
        else if (!strcmp(a, "--plan") && v) plan = v, i++;
        else if (!strcmp(a, "--kind") && v) kind = v, i++;
        else if (!strcmp(a, "--requests") && v) K = atoi(v), i++;
        else if (!strcmp(a, "--iters") && v) iters = atoi(v), i++;
        else if (!strcmp(a, "--warm") && v) warm = atoi(v), i++;
        else if (!strcmp(a, "--json") && v) json = v, i++;
        else if (!strcmp(a, "--param") && v && n_params < EB_MAX_PARAMS) params[n_params++] = v, i++;
        else if (!strcmp(a, "--pinned")) pinned = 1;
        else if (!strcmp(a, "--verbose")) eb_verbose = 1;
        else usage();
    }
    if (!lib || !plan || K < 1 || K > 4096 || iters < 1 || warm < 0) usage();

    /* the plan, through kiln's API: tensors, backend, the reference runs */
    kiln_engine *eng = NULL;
    kcheck(kiln_engine_load_file(plan, &eng), "loading the plan");
    int gpu = strcmp(kiln_engine_backend(eng), "cpu") != 0;
    if (kind && strcmp(kind, gpu ? "gpu" : "cpu"))
        die("the plan is for the %s backend: --kind %s", kiln_engine_backend(eng), gpu ? "gpu" : "cpu");
    int n_io = kiln_engine_num_io_tensors(eng), n_in = 0;
    if (n_io > EB_MAX_IO) die("more than %d inputs and outputs", EB_MAX_IO);
    eb_io io[EB_MAX_IO];
    int64_t max_batch = 0;
    for (int i = 0; i < n_io; i++) {
        eb_io *t = &io[i];
        t->name = kiln_engine_io_tensor_name(eng, i);
        t->dt = kiln_engine_tensor_dtype(eng, t->name);
        t->rank = kiln_engine_tensor_shape(eng, t->name, t->dims);
        if (tdtype(t->dt) == TRITONSERVER_TYPE_INVALID || t->rank < 1 || t->dims[0] >= 0)
            die("tensor '%s': this bench serves plans whose every tensor has a dynamic batch dim and a "
                "Triton type", t->name);
        if (kiln_engine_tensor_io_mode(eng, t->name) == KILN_IO_INPUT) {
            n_in++;
            int r = 0;
            int64_t opt[KILN_MAX_DIMS], hi[KILN_MAX_DIMS];
            kcheck(kiln_engine_profile_shape(eng, 0, t->name, &r, NULL, opt, hi), "profile 0");
            for (int k = 1; k < t->rank; k++) t->dims[k] = opt[k];
            if (max_batch == 0 || hi[0] < max_batch) max_batch = hi[0];
        }
        t->dims[0] = 1;
    }
    if (K > max_batch) die("--requests %d is past the plan's largest batch %lld", K, (long long)max_batch);

    /* the model repository the backend reads: DIR/bench/1/model.plan */
    char repo[] = "/tmp/kiln_exec_benchXXXXXX";
    if (!mkdtemp(repo)) die("mkdtemp");
    char path[4096], abs_plan[4096];
    if (!realpath(plan, abs_plan)) die("realpath %s", plan);
    snprintf(path, sizeof path, "%s/bench", repo);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/bench/1", repo);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/bench/1/model.plan", repo);
    if (symlink(abs_plan, path)) die("symlink %s", path);
    char config[8192];
    size_t o = (size_t)snprintf(config, sizeof config,
                                "{\"name\":\"bench\",\"backend\":\"kiln\",\"instance_group\":[{\"kind\":\"%s\","
                                "\"count\":1}],\"parameters\":{",
                                gpu ? "KIND_GPU" : "KIND_CPU");
    for (int p = 0; p < n_params; p++) {
        const char *eq = strchr(params[p], '=');
        if (!eq) die("--param %s: key=value", params[p]);
        o += (size_t)snprintf(config + o, sizeof config - o, "%s\"%.*s\":{\"string_value\":\"%s\"}", p ? "," : "",
                              (int)(eq - params[p]), params[p], eq + 1);
    }
    snprintf(config + o, sizeof config - o, "}}");

    /* the backend, as the server loads it */
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) die("dlopen %s: %s", lib, dlerror());
    eb_fn1 init = (eb_fn1)dlsym(h, "TRITONBACKEND_Initialize");
    eb_fn1 model_init = (eb_fn1)dlsym(h, "TRITONBACKEND_ModelInitialize");
    eb_fn1 model_fini = (eb_fn1)dlsym(h, "TRITONBACKEND_ModelFinalize");
    eb_fn1 inst_init = (eb_fn1)dlsym(h, "TRITONBACKEND_ModelInstanceInitialize");
    eb_fn1 inst_fini = (eb_fn1)dlsym(h, "TRITONBACKEND_ModelInstanceFinalize");
    eb_fn1 fini = (eb_fn1)dlsym(h, "TRITONBACKEND_Finalize");
    eb_exec_fn exec = (eb_exec_fn)dlsym(h, "TRITONBACKEND_ModelInstanceExecute");
    if (!init || !model_init || !model_fini || !inst_init || !inst_fini || !fini || !exec)
        die("%s lacks a TRITONBACKEND_ entry point", lib);
    struct TRITONBACKEND_Backend backend = {0};
    char model_dir[4200];
    snprintf(model_dir, sizeof model_dir, "%s/bench", repo);
    struct TRITONBACKEND_Model model = {"bench", model_dir, strdup(config), NULL};
    struct TRITONBACKEND_ModelInstance inst;
    memset(&inst, 0, sizeof inst);
    inst.model = &model;
    inst.kind = gpu ? TRITONSERVER_INSTANCEGROUPKIND_GPU : TRITONSERVER_INSTANCEGROUPKIND_CPU;
    tcheck(init(&backend), "TRITONBACKEND_Initialize");
    uint64_t t_load = now_ns();
    tcheck(model_init(&model), "TRITONBACKEND_ModelInitialize");
    tcheck(inst_init(&inst), "TRITONBACKEND_ModelInstanceInitialize");
    double load_ms = (double)(now_ns() - t_load) / 1e6;

    /* K requests of batch 1, each input in its own buffer */
    TRITONBACKEND_Request *reqs = calloc((size_t)K, sizeof *reqs);
    TRITONBACKEND_Request **rp = calloc((size_t)K, sizeof *rp);
    if (!reqs || !rp) die("out of memory");
    for (int i = 0; i < n_io; i++) {
        eb_io *t = &io[i];
        t->row_elems = 1;
        for (int k = 1; k < t->rank; k++) t->row_elems *= (size_t)t->dims[k];
        t->row_bytes = t->row_elems * kiln_dtype_size(t->dt);
    }
    for (int r = 0; r < K; r++) {
        TRITONBACKEND_Request *q = &reqs[r];
        rp[r] = q;
        for (int i = 0; i < n_io; i++) {
            eb_io *t = &io[i];
            if (i >= n_in) {
                q->out_names[q->n_out++] = t->name;
                continue;
            }
            struct TRITONBACKEND_Input *in = &q->in[q->n_in++];
            in->name = t->name;
            in->dt = tdtype(t->dt);
            in->rank = (uint32_t)t->rank;
            memcpy(in->shape, t->dims, (size_t)t->rank * sizeof *t->dims);
            in->bytes = t->row_bytes;
            if (pinned) kcheck(kiln_engine_alloc_host(eng, t->row_bytes, &in->data), "pinned input");
            else if (!(in->data = malloc(t->row_bytes ? t->row_bytes : 1))) die("out of memory");
            in->mt = pinned ? TRITONSERVER_MEMORY_CPU_PINNED : TRITONSERVER_MEMORY_CPU;
            fill(in->data, t->dt, t->row_elems);
        }
    }

    /* kiln alone: a context and stream of its own at the same bucket */
    int64_t rows = default_bucket(K, max_batch);
    for (int p = 0; p < n_params; p++)
        if (!strncmp(params[p], "batch_buckets=", 14)) { /* the configured buckets instead */
            const char *s = params[p] + 14;
            rows = K;
            if (strcmp(s, "none")) {
                char *list = strdup(s), *sp = NULL;
                for (char *b = strtok_r(list, ",; ", &sp); b; b = strtok_r(NULL, ",; ", &sp))
                    if (atol(b) >= K) {
                        rows = atol(b);
                        break;
                    }
                free(list);
            }
        }
    kiln_context *ctx = NULL;
    void *stream = NULL;
    kcheck(kiln_context_create(eng, &ctx), "context");
    for (int p = 0; p < n_params; p++) /* the instance's thread count, as the backend sets it */
        if (!strncmp(params[p], "cpu_threads=", 12) && atoi(params[p] + 12) > 0)
            kiln_context_set_threads(ctx, atoi(params[p] + 12));
        else if (!strncmp(params[p], "cuda_graphs=", 12))
            kiln_context_set_graphs(ctx, !strcmp(params[p] + 12, "true") || !strcmp(params[p] + 12, "1"));
    if (gpu) kcheck(kiln_engine_stream_create(eng, &stream), "stream");
    void *dev[EB_MAX_IO] = {0}, *stage[EB_MAX_IO] = {0}, *host_out[EB_MAX_IO] = {0};
    size_t out_bytes[EB_MAX_IO] = {0};
    for (int i = 0; i < n_in; i++) {
        eb_io *t = &io[i];
        int64_t d[KILN_MAX_DIMS];
        memcpy(d, t->dims, sizeof d);
        d[0] = rows;
        kcheck(kiln_context_set_input_shape(ctx, t->name, t->rank, d), "input shape");
        size_t bytes = t->row_bytes * (size_t)rows;
        kcheck(kiln_engine_alloc(eng, bytes, &dev[i]), "input memory");
        if (gpu) kcheck(kiln_engine_alloc_host(eng, bytes, &stage[i]), "pinned staging");
        memset(gpu ? stage[i] : dev[i], 0, bytes);
        if (gpu) kcheck(kiln_engine_copy(eng, dev[i], stage[i], bytes, KILN_COPY_TO_DEVICE), "zeros");
        kcheck(kiln_context_set_tensor_address(ctx, t->name, dev[i]), "binding");
    }
    for (int i = n_in; i < n_io; i++) {
        int64_t d[KILN_MAX_DIMS];
        int r = kiln_context_tensor_shape(ctx, io[i].name, d);
        if (r < 0) die("output '%s': %s", io[i].name, kiln_last_error());
        io[i].row_bytes = kiln_dtype_size(io[i].dt);
        for (int k = 1; k < r; k++) io[i].row_bytes *= (size_t)d[k];
        io[i].row_elems = io[i].row_bytes / kiln_dtype_size(io[i].dt);
        out_bytes[i] = io[i].row_bytes * (size_t)K;
        if (gpu) kcheck(kiln_engine_alloc_host(eng, out_bytes[i] ? out_bytes[i] : 1, &stage[i]), "pinned staging");
        if (!(host_out[i] = malloc(out_bytes[i] ? out_bytes[i] : 1))) die("out of memory");
    }
    /* timed: each iteration runs the backend's execution, then the same
     * work through kiln, then kiln's enqueue alone, so that the machine's
     * load drifts alike over the three */
    uint64_t *tb = calloc((size_t)iters, sizeof *tb), *tk = calloc((size_t)iters, sizeof *tk),
             *tc = calloc((size_t)iters, sizeof *tc);
    if (!tb || !tk || !tc) die("out of memory");
    for (int it = -warm; it < iters; it++) {
        if (it == 0) inst.n_req = inst.n_fail = inst.in_ns = inst.infer_ns = inst.out_ns = inst.n_exec = 0;
        for (int r = 0; r < K; r++) reqs[r].released = reqs[r].sent = 0;
        uint64_t t0 = now_ns();
        tcheck(exec(&inst, rp, (uint32_t)K), "TRITONBACKEND_ModelInstanceExecute");
        uint64_t t1 = now_ns();
        if (it >= 0) tb[it] = t1 - t0;
        for (int r = 0; r < K; r++) {
            if (!reqs[r].released || reqs[r].sent != 1) die("request %d: released %d, %d responses", r,
                                                            reqs[r].released, reqs[r].sent);
            if (reqs[r].err) die("request %d failed: %s", r, reqs[r].err->msg);
        }
        for (int pass = 0; pass < 2; pass++) { /* 0: with the copies, 1: the enqueue alone */
            t0 = now_ns();
            if (!pass) /* the gather, as the backend does it */
                for (int i = 0; i < n_in; i++) {
                    for (int r = 0; r < K; r++)
                        memcpy((char *)(gpu ? stage[i] : dev[i]) + (size_t)r * io[i].row_bytes, reqs[r].in[i].data,
                               io[i].row_bytes);
                    if (gpu)
                        kcheck(kiln_engine_copy_async(eng, dev[i], stage[i], io[i].row_bytes * (size_t)K,
                                                      KILN_COPY_TO_DEVICE, stream), "copy in");
                }
            kcheck(kiln_context_enqueue(ctx, stream), "enqueue");
            if (!pass)
                for (int i = n_in; gpu && i < n_io; i++)
                    kcheck(kiln_engine_copy_async(eng, stage[i], kiln_context_tensor_address(ctx, io[i].name),
                                                  out_bytes[i], KILN_COPY_TO_HOST, stream), "copy out");
            kcheck(kiln_context_synchronize(ctx, stream), "synchronize");
            if (!pass)
                for (int i = n_in; i < n_io; i++) /* the split into responses */
                    for (int r = 0; r < K; r++)
                        memcpy((char *)host_out[i] + (size_t)r * io[i].row_bytes,
                               (char *)(gpu ? stage[i] : kiln_context_tensor_address(ctx, io[i].name)) +
                                   (size_t)r * io[i].row_bytes,
                               io[i].row_bytes);
            t1 = now_ns();
            if (it >= 0) (pass ? tc : tk)[it] = t1 - t0;
        }
    }

    /* the responses of the last execution against kiln's outputs */
    int bad = 0;
    double worst = 0;
    for (int r = 0; r < K; r++) {
        TRITONBACKEND_Response *resp = reqs[r].sent_resp;
        for (int i = n_in; i < n_io; i++) {
            struct TRITONBACKEND_Output *got = NULL;
            for (int k = 0; resp && k < resp->n_out; k++)
                if (!strcmp(resp->out[k].name, io[i].name)) got = &resp->out[k];
            if (!got || got->bytes != io[i].row_bytes || got->shape[0] != 1) {
                fprintf(stderr, "request %d: output '%s' missing or of %llu bytes (want %zu)\n", r, io[i].name,
                        got ? (unsigned long long)got->bytes : 0ull, io[i].row_bytes);
                bad++;
                continue;
            }
            double d = max_diff(got->buf, (char *)host_out[i] + (size_t)r * io[i].row_bytes, io[i].dt,
                                io[i].row_elems);
            if (d > worst) worst = d;
            if (d > 1e-3) {
                fprintf(stderr, "request %d: output '%s' differs from kiln's by %g\n", r, io[i].name, d);
                bad++;
            }
        }
    }

    eb_times B = summarize(tb, iters), KC = summarize(tk, iters), KE = summarize(tc, iters);
    double n_req = inst.n_req ? (double)inst.n_req : 1;
    double s_in = (double)inst.in_ns / n_req / 1e3, s_inf = (double)inst.infer_ns / n_req / 1e3,
           s_out = (double)inst.out_ns / n_req / 1e3;
    printf("plan %s (%s), %d request%s of batch 1 an execution (bucket %lld), inputs in %s memory, %d executions\n",
           plan, kiln_engine_backend(eng), K, K == 1 ? "" : "s", (long long)rows, pinned ? "pinned" : "pageable",
           iters);
    printf("load (model + instance, warm-up included): %.1f ms\n", load_ms);
    printf("%-34s %10s %10s %10s\n", "per execution, us", "median", "mean", "p99");
    printf("%-34s %10.1f %10.1f %10.1f\n", "backend (ModelInstanceExecute)", B.median_us, B.mean_us, B.p99_us);
    printf("%-34s %10.1f %10.1f %10.1f\n", "kiln + copies (same work)", KC.median_us, KC.mean_us, KC.p99_us);
    printf("%-34s %10.1f %10.1f %10.1f\n", "kiln enqueue + sync alone", KE.median_us, KE.mean_us, KE.p99_us);
    printf("backend over kiln + copies: %.1f us an execution, %.1f us a request (median); over kiln alone %.1f us\n",
           B.median_us - KC.median_us, (B.median_us - KC.median_us) / K, B.median_us - KE.median_us);
    printf("statistics the backend reported, per request: compute_input %.1f, compute_infer %.1f, compute_output "
           "%.1f us (%llu requests, %llu failed)\n",
           s_in, s_inf, s_out, (unsigned long long)inst.n_req, (unsigned long long)inst.n_fail);
    printf("responses: %d of %d outputs wrong (largest difference %g)\n", bad, K * (n_io - n_in), worst);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) die("cannot write %s", json);
        fprintf(f,
                "{\"plan\": \"%s\", \"backend\": \"%s\", \"requests\": %d, \"bucket\": %lld, \"pinned\": %d, "
                "\"iters\": %d, \"load_ms\": %.3f,\n \"backend_us\": {\"median\": %.3f, \"mean\": %.3f, \"p99\": %.3f},\n"
                " \"kiln_copies_us\": {\"median\": %.3f, \"mean\": %.3f, \"p99\": %.3f},\n"
                " \"kiln_us\": {\"median\": %.3f, \"mean\": %.3f, \"p99\": %.3f},\n"
                " \"overhead_us\": %.3f, \"stats_us\": {\"compute_input\": %.3f, \"compute_infer\": %.3f, "
                "\"compute_output\": %.3f}, \"wrong\": %d}\n",
                plan, kiln_engine_backend(eng), K, (long long)rows, pinned, iters, load_ms, B.median_us, B.mean_us,
                B.p99_us, KC.median_us, KC.mean_us, KC.p99_us, KE.median_us, KE.mean_us, KE.p99_us,
                B.median_us - KC.median_us, s_in, s_inf, s_out, bad);
        fclose(f);
    }

    /* teardown, as the server does it */
    for (int r = 0; r < K; r++) {
        response_free(reqs[r].sent_resp);
        TRITONSERVER_ErrorDelete(reqs[r].err);
        for (int i = 0; i < reqs[r].n_in; i++) {
            if (pinned) kiln_engine_free_host(eng, reqs[r].in[i].data);
            else free(reqs[r].in[i].data);
        }
    }
    for (int i = 0; i < n_io; i++) {
        if (dev[i]) kiln_engine_free(eng, dev[i]);
        if (gpu && stage[i]) kiln_engine_free_host(eng, stage[i]);
        free(host_out[i]);
    }
    kiln_context_destroy(ctx);
    if (stream) kiln_engine_stream_destroy(eng, stream);
    tcheck(inst_fini(&inst), "TRITONBACKEND_ModelInstanceFinalize");
    tcheck(model_fini(&model), "TRITONBACKEND_ModelFinalize");
    tcheck(fini(&backend), "TRITONBACKEND_Finalize");
    kiln_engine_destroy(eng);
    free(model.config);
    free(reqs);
    free(rp);
    free(tb);
    free(tk);
    free(tc);
    unlink(path);
    snprintf(path, sizeof path, "%s/bench/1", repo);
    rmdir(path);
    snprintf(path, sizeof path, "%s/bench", repo);
    rmdir(path);
    rmdir(repo);
    return bad ? 1 : 0;
}
