/* cuda_backend.c - the CUDA backend as a kb_backend: device description,
 * device memory and copies on the caller's stream, kernel timing with CUDA
 * events, the kernel registry, and the per-thread cuBLASLt / cuDNN handles.
 *
 * Handles are per host thread: cuDNN handles must not be used by two threads
 * at once and carry the stream they run on, and kb_run gives a kernel no
 * context object to hang them on. A thread's handles are created by the
 * first prepare() (or time_kernel) on that thread, so the steady-state run
 * path never creates one, and destroyed by a pthread key destructor when the
 * thread exits. A thread that runs without ever preparing gets its handle on
 * its first run, once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc_common.h"
#include "tensor.cuh"

/* ---------------- errors ---------------- */

static kiln_status fail(const kn_node *node, kiln_status st, const char *what, const char *msg) {
    if (node)
        return kn_node_error(node, st, "%s: %s", what, msg);
    return kn_error(st, "CUDA backend: %s: %s", what, msg);
}

kiln_status kc_cuda_fail(const kn_node *node, cudaError_t e, const char *what) {
    (void)cudaGetLastError(); /* clear a sticky launch error */
    kiln_status st = e == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY
                     : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
                         ? KILN_ERR_DEVICE
                         : KILN_ERR_RUNTIME;
    return fail(node, st, what, cudaGetErrorString(e));
}

kiln_status kc_cublas_fail(const kn_node *node, cublasStatus_t s, const char *what) {
    kiln_status st = s == CUBLAS_STATUS_NOT_SUPPORTED  ? KILN_ERR_UNSUPPORTED
                     : s == CUBLAS_STATUS_ALLOC_FAILED ? KILN_ERR_OUT_OF_MEMORY
                                                       : KILN_ERR_RUNTIME;
    char msg[96];
    snprintf(msg, sizeof msg, "cuBLASLt status %d", (int)s);
    return fail(node, st, what, msg);
}

kiln_status kc_cudnn_fail(const kn_node *node, cudnnStatus_t s, const char *what) {
    /* cuDNN 9's detailed codes (3001..) share the category's hundreds */
    bool unsupported = (int)CUDNN_STATUS_CATEGORY(s) == (int)CUDNN_STATUS_NOT_SUPPORTED;
    kiln_status st = unsupported                     ? KILN_ERR_UNSUPPORTED
                     : s == CUDNN_STATUS_ALLOC_FAILED ? KILN_ERR_OUT_OF_MEMORY
                                                      : KILN_ERR_RUNTIME;
    return fail(node, st, what, cudnnGetErrorString(s));
}

/* ---------------- per-thread handles ---------------- */

typedef struct kc_handles {
    cublasLtHandle_t lt;
    cudnnHandle_t dnn;
} kc_handles;

static pthread_key_t handles_key;
static pthread_once_t handles_once = PTHREAD_ONCE_INIT;
static int handles_key_ok;

static void handles_destroy(void *p) {
    kc_handles *h = p;
    if (!h)
        return;
    if (h->lt)
        cublasLtDestroy(h->lt);
    if (h->dnn)
        cudnnDestroy(h->dnn);
    kn_free(h);
}

static void handles_key_make(void) {
    handles_key_ok = pthread_key_create(&handles_key, handles_destroy) == 0;
}

static kiln_status thread_handles(const kn_node *node, kc_handles **out) {
    pthread_once(&handles_once, handles_key_make);
    if (!handles_key_ok)
        return fail(node, KILN_ERR_INTERNAL, "library handles", "no thread-local key");
    kc_handles *h = pthread_getspecific(handles_key);
    if (!h) {
        h = kn_calloc(1, sizeof *h);
        if (!h)
            return KILN_ERR_OUT_OF_MEMORY;
        if (pthread_setspecific(handles_key, h) != 0) {
            kn_free(h);
            return fail(node, KILN_ERR_INTERNAL, "library handles", "pthread_setspecific failed");
        }
    }
    *out = h;
    return KILN_OK;
}

kiln_status kc_cublaslt_handle(const kn_node *node, cublasLtHandle_t *out) {
    kc_handles *h;
    KN_TRY(thread_handles(node, &h));
    if (!h->lt)
        KC_CUBLAS(node, cublasLtCreate(&h->lt));
    *out = h->lt;
    return KILN_OK;
}

/* The thread's cuDNN handle, set to `stream` (NULL: the legacy default
 * stream) whenever it is handed out: prepare() passes NULL, so work it gives
 * cuDNN (cudnnFind...) never lands on a stream that an earlier run set and
 * its owner has destroyed since (a context's stream, a tactic timing's
 * stream); a run passes its own stream, and never sets the legacy stream in
 * between, which cuDNN may touch and which would break a graph capture. */
kiln_status kc_cudnn_handle(const kn_node *node, cudaStream_t stream, cudnnHandle_t *out) {
    kc_handles *h;
    KN_TRY(thread_handles(node, &h));
    if (!h->dnn)
        KC_CUDNN(node, cudnnCreate(&h->dnn));
    KC_CUDNN(node, cudnnSetStream(h->dnn, stream));
    *out = h->dnn;
    return KILN_OK;
}

/* ---------------- shapes ---------------- */

void kc_strides(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= dims[d];
    }
}

kiln_status kc_bcast_init(const kn_node *node, kc_bcast *bc, int n_in, const kb_tensor *const *in,
                          const kb_tensor *out) {
    return kc_bcast_init_rows(node, bc, n_in, in, out, NULL);
}

kiln_status kc_bcast_init_rows(const kn_node *node, kc_bcast *bc, int n_in,
                               const kb_tensor *const *in, const kb_tensor *out,
                               const int64_t *rows) {
    memset(bc, 0, sizeof *bc);
    if (n_in < 1 || n_in > KC_EW_MAX_IN)
        return kn_node_error(node, KILN_ERR_UNSUPPORTED, "%d inputs (the CUDA kernel takes 1 to %d)",
                             n_in, KC_EW_MAX_IN);
    int rank = out->rank;
    int64_t dims[KC_MAX_DIMS], st[KC_EW_MAX_IN][KC_MAX_DIMS];
    for (int d = 0; d < rank; d++)
        dims[d] = out->dims[d];
    for (int k = 0; k < n_in; k++) {
        const kb_tensor *t = in[k];
        if (t->rank > rank)
            return kn_node_error(node, KILN_ERR_SHAPE, "input %d has rank %d above the output's %d",
                                 k, t->rank, rank);
        int64_t s = 1;
        for (int d = rank - 1; d >= 0; d--) {
            int td = d - (rank - t->rank);
            int64_t n = td >= 0 ? t->dims[td] : 1;
            if (n != 1 && n != dims[d])
                return kn_node_error(node, KILN_ERR_SHAPE,
                                     "input %d does not broadcast to the output in dim %d", k, d);
            st[k][d] = n == 1 ? 0 : s;
            /* a column range of wider rows: the row stride is the row's */
            s *= td == t->rank - 1 && rows && rows[k] > 0 ? rows[k] : n;
        }
    }
    /* drop dims of size 1, merge a dim into the next inner one when every
     * input's strides are contiguous across the pair */
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1)
            continue;
        if (r > 0) {
            bool merge = true;
            for (int k = 0; k < n_in && merge; k++)
                merge = bc->stride[k][r - 1] == st[k][d] * dims[d];
            if (merge) {
                bc->dims[r - 1] *= dims[d];
                for (int k = 0; k < n_in; k++)
                    bc->stride[k][r - 1] = st[k][d];
                continue;
            }
        }
        bc->dims[r] = dims[d];
        for (int k = 0; k < n_in; k++)
            bc->stride[k][r] = st[k][d];
        r++;
    }
    if (r == 0) {
        bc->dims[0] = 1;
        r = 1;
    }
    bc->rank = r;
    bc->n_in = n_in;
    bc->total = kn_numel(out->rank, out->dims);
    return KILN_OK;
}

/* ---------------- registry ---------------- */

static const kb_table kc_tables[] = {
    {kb_cuda_elementwise, &kb_cuda_elementwise_count},
    {kb_cuda_tensor, &kb_cuda_tensor_count},
    {kb_cuda_nn, &kb_cuda_nn_count},
    {kb_cuda_blas, &kb_cuda_blas_count},
    {kb_cuda_conv_graph, &kb_cuda_conv_graph_count}, /* before the legacy table: an untimed
                                                       * build keeps the last-registered conv */
    {kb_cuda_conv, &kb_cuda_conv_count},
    {kb_cuda_index, &kb_cuda_index_count},
    {kb_cuda_shape, &kb_cuda_shape_count},
    {kb_cuda_nn2, &kb_cuda_nn2_count},
    {kb_cuda_seq, &kb_cuda_seq_count},
    {kb_cuda_int8, &kb_cuda_int8_count}, /* k_int8.c: kiln::QConv, kiln::QMatMul */
    {kb_cuda_fp8, &kb_cuda_fp8_count},   /* k_fp8.c: kiln::FP8Conv, kiln::FP8MatMul */
    {kb_cuda_attn_onnx, &kb_cuda_attn_onnx_count},
    {kb_cuda_spectral, &kb_cuda_spectral_count},
    {kb_cuda_tfidf, &kb_cuda_tfidf_count},
    {kb_cuda_rotary, &kb_cuda_rotary_count},
    {kb_cuda_control, &kb_cuda_control_count},
};

int kb_cuda_kernels_for(const char *domain, const char *op_type, const kb_kernel **out, int cap) {
    return kb_tables_kernels_for(kc_tables, KN_ARRAY_LEN(kc_tables), domain, op_type, out, cap);
}

const kb_kernel *kb_cuda_kernel_find(const char *domain, const char *op_type, const char *tactic) {
    return kb_tables_find(kc_tables, KN_ARRAY_LEN(kc_tables), domain, op_type, tactic);
}

/* ---------------- the backend ---------------- */

static kiln_status cuda_describe(char *target, size_t tcap, char *libs, size_t lcap) {
    int count = 0, dev = 0, major = 0, minor = 0, rt = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return kn_error(KILN_ERR_DEVICE, "the CUDA backend has no device: %s",
                        e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device is visible");
    }
    KC_CUDA(NULL, cudaGetDevice(&dev));
    KC_CUDA(NULL, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    KC_CUDA(NULL, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    KC_CUDA(NULL, cudaRuntimeGetVersion(&rt));
    size_t dnn = cudnnGetVersion();    /* major*10000 + minor*100 + patch */
    size_t lt = cublasLtGetVersion();  /* major*10000 + minor*100 + patch */
    snprintf(target, tcap, "sm_%d%d", major, minor);
    snprintf(libs, lcap, "cuda=%d.%d;cudnn=%zu.%zu;cublasLt=%zu.%zu", rt / 1000, (rt % 1000) / 10,
             dnn / 10000, (dnn % 10000) / 100, lt / 10000, (lt % 10000) / 100);
    return KILN_OK;
}

static kiln_status cuda_alloc(size_t bytes, void **out) {
    void *p = NULL;
    if (kn_fault_hit(bytes)) /* device allocations take part in fault injection */
        return KILN_ERR_OUT_OF_MEMORY;
    KC_CUDA(NULL, cudaMalloc(&p, bytes ? bytes : 256));
    *out = p;
    return KILN_OK;
}

static void cuda_free(void *p) {
    if (p)
        (void)cudaFree(p);
}

static kiln_status cuda_host_alloc(size_t bytes, void **out) {
    void *p = NULL;
    if (kn_fault_hit(bytes))
        return KILN_ERR_OUT_OF_MEMORY;
    KC_CUDA(NULL, cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocDefault));
    *out = p;
    return KILN_OK;
}

static void cuda_host_free(void *p) {
    if (p)
        (void)cudaFreeHost(p);
}

static kiln_status cuda_copy(void *dst, const void *src, size_t bytes, kb_copy_kind kind,
                             void *stream) {
    if (!bytes)
        return KILN_OK;
    enum cudaMemcpyKind k = kind == KB_COPY_H2D   ? cudaMemcpyHostToDevice
                            : kind == KB_COPY_D2H ? cudaMemcpyDeviceToHost
                                                  : cudaMemcpyDeviceToDevice;
    KC_CUDA(NULL, cudaMemcpyAsync(dst, src, bytes, k, (cudaStream_t)stream));
    return KILN_OK;
}

static kiln_status cuda_memset_zero(void *dst, size_t bytes, void *stream) {
    if (bytes)
        KC_CUDA(NULL, cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)stream));
    return KILN_OK;
}

static kiln_status cuda_sync(void *stream) {
    KC_CUDA(NULL, cudaStreamSynchronize((cudaStream_t)stream));
    return KILN_OK;
}

static void sort_floats(float *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

static kiln_status time_runs(const kb_kernel *k, const kb_run *r, int reps, cudaEvent_t *ev,
                             double *ms) {
    cudaStream_t s = kc_stream(r);
    float times[64];
    if (reps < 1)
        reps = 1;
    if (reps > 64)
        reps = 64;
    for (int w = 0; w < 2; w++) /* warm-up: module load, library plans */
        KN_TRY(k->run(r));
    KC_CUDA(r->node, cudaStreamSynchronize(s));
    for (int i = 0; i < reps; i++) {
        KC_CUDA(r->node, cudaEventRecord(ev[0], s));
        KN_TRY(k->run(r));
        KC_CUDA(r->node, cudaEventRecord(ev[1], s));
        KC_CUDA(r->node, cudaEventSynchronize(ev[1]));
        KC_CUDA(r->node, cudaEventElapsedTime(&times[i], ev[0], ev[1]));
    }
    sort_floats(times, reps);
    *ms = times[reps / 2];
    return KILN_OK;
}

/* Tactic timing as a plan runs: `per` runs of the kernel captured into one
 * CUDA graph on a stream of the timing's own, the graph replayed `reps`
 * times, each replay timed; *ms is the median replay over `per`. A launch's
 * host work (cuBLASLt's set-up, tensor maps) stays out of the time, as it
 * stays out of a plan's graph replay, and the runs follow one another with
 * no idle gap (docs/decisions.md, "Tactic timing"). *done is false when the
 * kernel cannot be captured (it synchronizes, say): the caller then times
 * it launch by launch. */
static kiln_status time_graph(const kb_kernel *k, const kb_run *r0, int reps, cudaEvent_t *ev,
                              double *ms, bool *done) {
    *done = false;
    cudaStream_t s = NULL;
    KC_CUDA(r0->node, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    kb_run r = *r0;
    r.stream = s;
    kiln_status st = KILN_OK;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    float first = 0, times[64];
    int per = 1;
    if (reps < 1)
        reps = 1;
    if (reps > 64)
        reps = 64;
    /* warm-up (module load, library plans), then one launch timed alone to
     * size the graph: short kernels get several runs a replay */
    for (int w = 0; w < 2 && st == KILN_OK; w++)
        st = k->run(&r);
    if (st == KILN_OK && (cudaEventRecord(ev[0], s) != cudaSuccess || (st = k->run(&r)) != KILN_OK ||
                          cudaEventRecord(ev[1], s) != cudaSuccess ||
                          cudaEventSynchronize(ev[1]) != cudaSuccess ||
                          cudaEventElapsedTime(&first, ev[0], ev[1]) != cudaSuccess))
        st = st != KILN_OK ? st : kc_cuda_fail(r0->node, cudaGetLastError(), "timing a tactic");
    if (st == KILN_OK) {
        per = first < 0.05f ? 8 : first < 1.f ? 4 : 1;
        if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
            kiln_status rs = KILN_OK;
            for (int i = 0; i < per && rs == KILN_OK; i++)
                rs = k->run(&r);
            cudaError_t ce = cudaStreamEndCapture(s, &g); /* always end the capture */
            if (rs != KILN_OK || ce != cudaSuccess || !g || kc_graph_memsets_as_kernels(g, NULL, 0) != KILN_OK ||
                cudaGraphInstantiate(&ge, g, 0) != cudaSuccess)
                ge = NULL;
        }
        if (!ge) { /* not capturable: no error, the caller times it launch by launch */
            (void)cudaGetLastError();
            kn_error_clear();
        }
    }
    if (st == KILN_OK && ge && cudaGraphLaunch(ge, s) == cudaSuccess &&
        cudaStreamSynchronize(s) == cudaSuccess) {
        int i = 0;
        for (; i < reps; i++) {
            if (cudaEventRecord(ev[0], s) != cudaSuccess || cudaGraphLaunch(ge, s) != cudaSuccess ||
                cudaEventRecord(ev[1], s) != cudaSuccess ||
                cudaEventSynchronize(ev[1]) != cudaSuccess ||
                cudaEventElapsedTime(&times[i], ev[0], ev[1]) != cudaSuccess)
                break;
        }
        if (i == reps) {
            sort_floats(times, reps);
            *ms = times[reps / 2] / (float)per;
            *done = true;
        } else {
            st = kc_cuda_fail(r0->node, cudaGetLastError(), "timing a tactic's graph");
        }
    }
    if (ge)
        cudaGraphExecDestroy(ge);
    if (g)
        cudaGraphDestroy(g);
    cudaError_t se = cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    if (st == KILN_OK && se != cudaSuccess)
        st = kc_cuda_fail(r0->node, se, "timing a tactic");
    return st;
}

static kiln_status cuda_time_kernel(const kb_kernel *k, const kb_run *r, int reps, double *ms) {
    cudaEvent_t ev[2] = {NULL, NULL};
    KC_CUDA(r->node, cudaEventCreate(&ev[0]));
    cudaError_t e = cudaEventCreate(&ev[1]);
    if (e != cudaSuccess) {
        cudaEventDestroy(ev[0]);
        return kc_cuda_fail(r->node, e, "cudaEventCreate");
    }
    bool done = false;
    kiln_status st = time_graph(k, r, reps, ev, ms, &done);
    if (st == KILN_OK && !done)
        st = time_runs(k, r, reps, ev, ms);
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    return st;
}

/* ---------------- streams and graphs ---------------- */

static kiln_status cuda_stream_create(void **out) {
    cudaStream_t s = NULL;
    KC_CUDA(NULL, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = s;
    return KILN_OK;
}

static void cuda_stream_destroy(void *s) {
    if (s)
        (void)cudaStreamDestroy((cudaStream_t)s);
}

/* ---------------- events ---------------- */

/* Blocking-sync events: a thread that waits on one sleeps instead of
 * spinning (a caller that wants to spin polls event_query). */
static kiln_status cuda_event_create(void **out) {
    cudaEvent_t ev = NULL;
    KC_CUDA(NULL, cudaEventCreateWithFlags(&ev, cudaEventBlockingSync));
    *out = ev;
    return KILN_OK;
}

static void cuda_event_destroy(void *ev) {
    if (ev)
        (void)cudaEventDestroy((cudaEvent_t)ev);
}

static kiln_status cuda_event_record(void *ev, void *stream) {
    KC_CUDA(NULL, cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream));
    return KILN_OK;
}

static kiln_status cuda_event_query(void *ev, bool *done) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *done = false;
        return KILN_OK;
    }
    KC_CUDA(NULL, e);
    *done = true;
    return KILN_OK;
}

static kiln_status cuda_event_sync(void *ev) {
    KC_CUDA(NULL, cudaEventSynchronize((cudaEvent_t)ev));
    return KILN_OK;
}

static kiln_status cuda_event_elapsed(void *a, void *b, float *ms) {
    KC_CUDA(NULL, cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b));
    return KILN_OK;
}

/* The memset nodes of a captured graph (cuBLASLt clears part of its
 * workspace before some GEMM kernels) become kernel nodes that write the
 * same bytes. On the H200 a memset node costs 5-6 us in a replay, against
 * under 1 us for a small kernel: the GPU idles about 2 us before the memset
 * and 3-4 us after it (24 times a BERT-base batch;
 * bench/results/2026-11-30-gpu-session10.md). Only memsets of up to 1 MiB,
 * with plain edges, are replaced; KILN_GRAPH_MEMSETS=keep leaves them all
 * (for comparisons).
 *
 * With the capture's steps, a memset that opens a step and clears part of
 * that step's workspace also leaves the chain: it follows the last earlier
 * step that had a workspace, and the step's first kernel gets the edge from
 * the step before. On a BERT layer the memset then runs beside the
 * LayerNorm before the QKV and FFN1 GEMMs instead of between it and the
 * GEMM. Steps without a workspace never touch it (the runtime hands none
 * out), so nothing else in between can see the bytes change.
 * KILN_GRAPH_MEMSETS=chain replaces them but keeps them in place. */
#define KC_MEMSET_NODE_MAX ((size_t)1 << 20)

/* The last step whose last node is `node` (a step that enqueued nothing
 * ends where the one before it did), or -1. */
static ptrdiff_t step_ending_at(const kc_step_mark *marks, size_t n, cudaGraphNode_t node) {
    for (size_t i = n; i-- > 0;)
        if (marks[i].leaf == node)
            return (ptrdiff_t)i;
    return -1;
}

/* Where the memset node `node` (bytes [lo, hi), its only dependency `pred`)
 * may start instead: *to, the last node of an earlier step with a
 * workspace. False when it stays where it is. */
static bool memset_move(const kc_step_mark *marks, size_t n, cudaGraphNode_t pred, uintptr_t lo, uintptr_t hi,
                        cudaGraphNode_t *to) {
    ptrdiff_t i = marks ? step_ending_at(marks, n, pred) : -1;
    if (i < 0 || (size_t)i + 1 >= n)
        return false;
    const kc_step_mark *own = &marks[i + 1]; /* the step the memset opens */
    uintptr_t ws = (uintptr_t)own->ws;
    if (!own->ws_bytes || lo < ws || hi > ws + own->ws_bytes)
        return false; /* not (only) its workspace: an output, say */
    ptrdiff_t j = i;
    while (j >= 0 && !marks[j].ws_bytes)
        j--;
    /* right after the last user already, no single node to follow, or no
     * earlier user at all: a second root would make the graph fork at its
     * start, and in session 11's trace the chain then began about 17 us
     * later than in a single-chain graph */
    if (j == i || j < 0 || !marks[j].leaf)
        return false;
    *to = marks[j].leaf;
    return true;
}

static kiln_status memset_as_kernel(cudaGraph_t g, cudaGraphNode_t node, kc_step_mark *marks, size_t n_marks,
                                    int *moved) {
    struct cudaMemsetParams mp;
    kc_memset_node m;
    struct cudaKernelNodeParams kp;
    size_t nin = 0, nout = 0;
    if (cudaGraphMemsetNodeGetParams(node, &mp) != cudaSuccess ||
        mp.width * mp.height * mp.elementSize > KC_MEMSET_NODE_MAX || !kc_memset_node_params(&m, &mp, &kp) ||
        cudaGraphNodeGetDependencies(node, NULL, NULL, &nin) != cudaSuccess ||
        cudaGraphNodeGetDependentNodes(node, NULL, NULL, &nout) != cudaSuccess) {
        (void)cudaGetLastError(); /* the memset node stays */
        return KILN_OK;
    }
    cudaGraphNode_t *in = kn_malloc((nin + nout + 1) * sizeof *in);
    cudaGraphEdgeData *ed = kn_calloc(nin + nout + 1, sizeof *ed);
    if (!in || !ed) {
        kn_free(in);
        kn_free(ed);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "CUDA graph: the edges of a memset node");
    }
    cudaGraphNode_t *out = in + nin;
    /* no call with a count of 0: CUDA answered "invalid argument" for a memset
     * node at a graph's start or end (test_graph_memsets) */
    bool plain = (!nin || cudaGraphNodeGetDependencies(node, in, ed, &nin) == cudaSuccess) &&
                 (!nout || cudaGraphNodeGetDependentNodes(node, out, ed + nin, &nout) == cudaSuccess);
    for (size_t i = 0; plain && i < nin + nout; i++) /* a programmatic or typed edge: the node stays */
        if (ed[i].type != cudaGraphDependencyTypeDefault || ed[i].from_port || ed[i].to_port)
            plain = false;
    cudaError_t e = cudaSuccess;
    if (plain) {
        const uintptr_t lo = (uintptr_t)mp.dst;
        const uintptr_t hi = lo + (mp.height > 1 ? (mp.height - 1) * mp.pitch : 0) + mp.width * mp.elementSize;
        cudaGraphNode_t to = NULL, k = NULL;
        bool move = nin == 1 && nout > 0 && memset_move(marks, n_marks, in[0], lo, hi, &to);
        if (move)
            e = cudaGraphAddKernelNode(&k, g, &to, 1, &kp);
        else
            e = cudaGraphAddKernelNode(&k, g, nin ? in : NULL, nin, &kp);
        for (size_t i = 0; e == cudaSuccess && i < nout; i++) {
            e = cudaGraphAddDependencies(g, &k, &out[i], NULL, 1);
            if (e == cudaSuccess && move) /* the step's work still follows the step before */
                e = cudaGraphAddDependencies(g, &in[0], &out[i], NULL, 1);
        }
        /* a step that ended with this memset now ends with its kernel: the
         * next step's memset finds its step by that node */
        for (size_t i = 0; e == cudaSuccess && i < n_marks; i++)
            if (marks[i].leaf == node)
                marks[i].leaf = k;
        if (e == cudaSuccess)
            e = cudaGraphDestroyNode(node);
        if (e == cudaSuccess && move)
            (*moved)++;
    } else {
        (void)cudaGetLastError();
    }
    kn_free(in);
    kn_free(ed);
    if (e != cudaSuccess)
        return kc_cuda_fail(NULL, e, "replacing a memset node of a CUDA graph");
    return KILN_OK;
}

kiln_status kc_graph_memsets_as_kernels(cudaGraph_t g, kc_step_mark *marks, size_t n_marks) {
    const char *env = getenv("KILN_GRAPH_MEMSETS");
    if (env && strcmp(env, "keep") == 0)
        return KILN_OK;
    if (env && strcmp(env, "chain") == 0)
        marks = NULL;
    size_t n = 0;
    KC_CUDA(NULL, cudaGraphGetNodes(g, NULL, &n));
    if (n == 0)
        return KILN_OK;
    cudaGraphNode_t *nodes = kn_malloc(n * sizeof *nodes);
    if (!nodes)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "CUDA graph: %zu node handles", n);
    cudaError_t e = cudaGraphGetNodes(g, nodes, &n);
    kiln_status st = e == cudaSuccess ? KILN_OK : kc_cuda_fail(NULL, e, "cudaGraphGetNodes");
    int replaced = 0, moved = 0;
    for (size_t i = 0; st == KILN_OK && i < n; i++) {
        enum cudaGraphNodeType t;
        e = cudaGraphNodeGetType(nodes[i], &t);
        if (e != cudaSuccess)
            st = kc_cuda_fail(NULL, e, "cudaGraphNodeGetType");
        else if (t == cudaGraphNodeTypeMemset) {
            st = memset_as_kernel(g, nodes[i], marks, marks ? n_marks : 0, &moved);
            replaced++;
        }
    }
    kn_free(nodes);
    if (st == KILN_OK && marks && replaced)
        kn_log(KILN_LOG_VERBOSE, "CUDA graph: %d memset node(s), %d moved beside the steps before them", replaced,
               moved);
    return st;
}

/* The steps of the capture in progress on this thread (captures are
 * thread-local), from cuda_graph_step; cap_broken when one could not be
 * recorded, and then no memset moves. */
static _Thread_local kc_step_mark *cap_marks;
static _Thread_local size_t cap_n, cap_cap;
static _Thread_local bool cap_broken;

static void cap_reset(void) {
    kn_free(cap_marks);
    cap_marks = NULL;
    cap_n = cap_cap = 0;
    cap_broken = false;
}

/* Capture is thread-local: other threads may keep calling CUDA meanwhile. */
static kiln_status cuda_graph_begin(void *s) {
    cap_reset();
    KC_CUDA(NULL, cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeThreadLocal));
    return KILN_OK;
}

static kiln_status cuda_graph_step(void *s, const void *ws, size_t ws_bytes) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t *deps = NULL;
    size_t nd = 0;
    if (cap_broken)
        return KILN_OK;
    if (cudaStreamGetCaptureInfo((cudaStream_t)s, &cs, NULL, NULL, &deps, NULL, &nd) != cudaSuccess ||
        cs != cudaStreamCaptureStatusActive) {
        (void)cudaGetLastError(); /* graph_end reports a broken capture */
        cap_broken = true;
        return KILN_OK;
    }
    if (cap_n == cap_cap) {
        size_t nc = cap_cap ? 2 * cap_cap : 256;
        kc_step_mark *m = kn_realloc(cap_marks, nc * sizeof *m);
        if (!m) { /* no marks, no moves: the graph is still right */
            cap_broken = true;
            return KILN_OK;
        }
        cap_marks = m;
        cap_cap = nc;
    }
    cap_marks[cap_n++] = (kc_step_mark){nd == 1 ? deps[0] : NULL, ws_bytes ? ws : NULL, ws_bytes};
    return KILN_OK;
}

/* The captured graph, instantiated: *out is a cudaGraphExec_t. */
static kiln_status cuda_graph_end(void *s, void **out) {
    cudaGraph_t g = NULL;
    cudaError_t ce = cudaStreamEndCapture((cudaStream_t)s, &g);
    if (ce != cudaSuccess) {
        cap_reset();
        return kc_cuda_fail(NULL, ce, "cudaStreamEndCapture");
    }
    kiln_status st = kc_graph_memsets_as_kernels(g, cap_broken ? NULL : cap_marks, cap_broken ? 0 : cap_n);
    cap_reset();
    if (st != KILN_OK) {
        (void)cudaGraphDestroy(g);
        return st;
    }
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    (void)cudaGraphDestroy(g);
    if (e != cudaSuccess)
        return kc_cuda_fail(NULL, e, "cudaGraphInstantiate");
    *out = exec;
    return KILN_OK;
}

static kiln_status cuda_graph_launch(void *graph, void *s) {
    KC_CUDA(NULL, cudaGraphLaunch((cudaGraphExec_t)graph, (cudaStream_t)s));
    return KILN_OK;
}

static void cuda_graph_destroy(void *graph) {
    if (graph)
        (void)cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

/* Device (or managed) memory by the driver's account; plain host memory,
 * registered or not, is readable from the host. */
static bool cuda_is_device_ptr(const void *p) {
    struct cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* an unknown pointer is host memory; clear the error */
        return false;
    }
    return a.type == cudaMemoryTypeDevice;
}

const kb_backend kb_cuda_backend = {
    .name = "cuda",
    .describe = cuda_describe,
    .kernels_for = kb_cuda_kernels_for,
    .kernel_find = kb_cuda_kernel_find,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .memset_zero = cuda_memset_zero,
    .sync = cuda_sync,
    .time_kernel = cuda_time_kernel,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .graph_begin = cuda_graph_begin,
    .graph_step = cuda_graph_step,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .is_device_ptr = cuda_is_device_ptr,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .event_elapsed = cuda_event_elapsed,
};
