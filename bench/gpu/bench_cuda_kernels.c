/* bench_cuda_kernels.c - kernel-level float16 timings of the CUDA backend on
 * the shapes that dominate ResNet-50 (its convolutions, batch 32, as fused
 * kiln::Conv with bias + ReLU) and BERT-base (its GEMMs, batch 32 x 128
 * tokens), each tactic timed with the backend's time_kernel (warm-up, then
 * CUDA graph replays timed with events, median), printed as TFLOP/s against the ~790 TFLOP/s dense
 * half-precision rate measured on an H200 here. Inputs are random, never
 * zeros (BENCH_TACTIC=name times that tactic only; BENCH_SUSTAIN_MS=n also
 * times each tactic in its own steady state, see sustained()). Usage: bench_cuda_kernels [reps] [mem|attn|bert64|r50nhwc|ltsearch|nms] (mem: the
 * memory-bound kernels only, attn: kiln::Attention only, bert64: BERT-base's
 * GEMMs at batch 64, r50nhwc: ResNet-50's convolutions at batch 64 channels-last, ltsearch: cuBLASLt's configurations of BERT-base's GEMMs, LTSEARCH_ENERGY=1 also at the power cap; nms: NonMaxSuppression, float32, 1000 to 20000 boxes a class; KILN_CUDA_GENERIC=1 times the generic kernels). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "backends/backend.h"
#include "graph/fused.h"

#define CEILING_TFLOPS 790.0

static cudaStream_t stream;
static int reps = 50;
static double total_best_ms;

static uint64_t rng = 88172645463325252ull;
static float rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0) * 2.f - 1.f;
}

/* A device buffer of n random float16 values scaled by s (never zero). */
static void *dev_rand(int64_t n, float s) {
    uint16_t *h = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        float v = rnd() * s;
        h[i] = kn_float_to_half(v == 0.f ? s * 0.5f : v);
    }
    void *d = NULL;
    if (cudaMalloc(&d, (size_t)n * 2) != cudaSuccess || cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "device allocation of %lld values failed\n", (long long)n);
        exit(1);
    }
    free(h);
    return d;
}

static void set_tensor(kb_tensor *t, void *d, int rank, const int64_t *dims) {
    memset(t, 0, sizeof *t);
    t->data = d;
    t->dtype = KILN_DTYPE_FLOAT16;
    t->rank = rank;
    memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
}

/* BENCH_SUSTAIN_MS: each tactic also runs back to back for that long (the
 * GPU settles at its power cap), then `reps` runs are timed as one stretch:
 * their mean is the sustained time, which follows the kernel's energy. */
static double sustain_ms;

static kiln_status sustained(const kb_kernel *k, const kb_run *r, double *ms) {
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess)
        return KILN_ERR_RUNTIME;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return KILN_ERR_RUNTIME;
    }
    kiln_status st = KILN_OK;
    double t0 = kn_now_ms();
    while (st == KILN_OK && kn_now_ms() - t0 < sustain_ms) {
        for (int i = 0; i < 20 && st == KILN_OK; i++)
            st = k->run(r);
        if (cudaStreamSynchronize(stream) != cudaSuccess)
            st = KILN_ERR_RUNTIME;
    }
    float t = 0;
    if (st == KILN_OK && cudaEventRecord(e0, stream) != cudaSuccess)
        st = KILN_ERR_RUNTIME;
    for (int i = 0; i < reps && st == KILN_OK; i++)
        st = k->run(r);
    if (st == KILN_OK && (cudaEventRecord(e1, stream) != cudaSuccess ||
                          cudaEventSynchronize(e1) != cudaSuccess ||
                          cudaEventElapsedTime(&t, e0, e1) != cudaSuccess))
        st = KILN_ERR_RUNTIME;
    *ms = (double)t / reps;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return st;
}

/* Time every tactic of (domain, op) on the node and tensors; print one row
 * per tactic, return the best ms. */
static double time_all(const char *name, const kn_node *node, kb_tensor *in, int n_in, kb_tensor *out,
                       double flops) {
    const kb_kernel *ks[16];
    int nk = kb_cuda_backend.kernels_for(node->domain, node->op_type, ks, 16);
    double best = 0;
    const char *best_t = "-";
    const char *only = getenv("BENCH_TACTIC"); /* one tactic only (for a profiler) */
    for (int i = 0; i < nk && i < 16; i++) {
        const kb_kernel *k = ks[i];
        if (only && strcmp(only, k->tactic) != 0)
            continue;
        void *inst = NULL, *ws = NULL;
        size_t wsz = 0;
        if (k->prepare && k->prepare(NULL, node, in, n_in, out, 1, &inst, &wsz) != KILN_OK) {
            printf("  %-44s %-12s declined: %s\n", name, k->tactic, kiln_last_error());
            continue;
        }
        if (wsz && cudaMalloc(&ws, wsz) != cudaSuccess) {
            printf("  %-44s %-12s workspace of %zu bytes failed\n", name, k->tactic, wsz);
            if (k->release)
                k->release(inst);
            continue;
        }
        kb_run r = {.node = node, .inst = inst, .n_in = n_in, .in = in, .n_out = 1, .out = out,
                    .workspace = ws, .workspace_size = wsz, .threads = 1, .stream = stream};
        double ms = 0, sus = 0;
        if (kb_cuda_backend.time_kernel(k, &r, reps, &ms) != KILN_OK ||
            (sustain_ms > 0 && sustained(k, &r, &sus) != KILN_OK)) {
            printf("  %-44s %-12s failed: %s\n", name, k->tactic, kiln_last_error());
        } else {
            double tf = flops / (ms * 1e-3) / 1e12;
            printf("  %-44s %-12s %9.4f ms %8.1f TFLOP/s %5.1f %%", name, k->tactic, ms, tf,
                   100.0 * tf / CEILING_TFLOPS);
            if (sus > 0)
                printf("  sustained %9.4f ms (%+.1f %%)", sus, 100.0 * (sus / ms - 1.0));
            printf("\n");
            if (best == 0 || ms < best) {
                best = ms;
                best_t = k->tactic;
            }
        }
        cudaFree(ws);
        if (k->release)
            k->release(inst);
    }
    if (best > 0)
        printf("= %-44s best %-12s %9.4f ms %8.1f TFLOP/s %5.1f %%\n", name, best_t, best,
               flops / (best * 1e-3) / 1e12, 100.0 * flops / (best * 1e-3) / 1e12 / CEILING_TFLOPS);
    return best;
}

static kn_net *net;

static kn_node *new_node(const char *op, const char *domain, int n_in) {
    int in[4], out[1];
    for (int i = 0; i < n_in; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "i%d", i);
        if (kn_net_tensor(net, nm, &in[i]) != KILN_OK)
            exit(1);
    }
    if (kn_net_tensor(net, "o", &out[0]) != KILN_OK)
        exit(1);
    int idx;
    if (kn_net_add_node(net, "bench", op, domain, 1, n_in, in, 1, out, &idx) != KILN_OK)
        exit(1);
    return &net->nodes[idx];
}

/* kiln::Conv + bias + ReLU, float16, NCHW. */
static bool conv_nhwc; /* conv() builds channels-last nodes (NHWC, KRSC), as the layout pass does */

static void conv(const char *name, int64_t n, int64_t c, int64_t h, int64_t k, int64_t r, int64_t s,
                 int64_t pad, int64_t count) {
    int64_t p = (h + 2 * pad - r) / s + 1;
    kn_node *nd = new_node("Conv", KN_DOMAIN_KILN, 3);
    int64_t pads[4] = {pad, pad, pad, pad}, st[2] = {s, s};
    if (kn_node_set_ints(nd, "pads", pads, 4) || kn_node_set_ints(nd, "strides", st, 2) ||
        kn_node_set_string(nd, "activation", "Relu") ||
        (conv_nhwc && kn_node_set_int(nd, "channels_last", 1)))
        exit(1);
    kb_tensor in[3], out[1];
    void *x = dev_rand(n * c * h * h, 1.f), *w = dev_rand(k * c * r * r, 0.1f), *b = dev_rand(k, 1.f),
         *y = dev_rand(n * k * p * p, 1.f);
    if (conv_nhwc) {
        set_tensor(&in[0], x, 4, (int64_t[]){n, h, h, c});
        set_tensor(&in[1], w, 4, (int64_t[]){k, r, r, c});
        set_tensor(&out[0], y, 4, (int64_t[]){n, p, p, k});
    } else {
        set_tensor(&in[0], x, 4, (int64_t[]){n, c, h, h});
        set_tensor(&in[1], w, 4, (int64_t[]){k, c, r, r});
        set_tensor(&out[0], y, 4, (int64_t[]){n, k, p, p});
    }
    set_tensor(&in[2], b, 1, (int64_t[]){k});
    double flops = 2.0 * (double)n * k * c * r * r * p * p;
    char label[96];
    snprintf(label, sizeof label, "%s x%lld", name, (long long)count);
    total_best_ms += count * time_all(label, nd, in, 3, out, flops);
    cudaFree(x);
    cudaFree(w);
    cudaFree(b);
    cudaFree(y);
}

/* How gemm_v() lays out the product: kiln::MatMul with B as [k, n] (NN),
 * or kiln::Gemm with B as [n, k] and transB (TN, the weight layout of a
 * framework's linear layer); RES adds a residual of Y's shape (kiln::MatMul's Z). */
enum { GEMM_NN = 0, GEMM_TN = 1, GEMM_RES = 2 };

/* [batch..., m, k] x [k, n] (+ bias, activation) as kiln::MatMul, or a
 * batched MatMul when bb > 1; `how` as above for the unbatched fused case. */
static void gemm_v(const char *name, int64_t batch, int64_t m, int64_t kd, int64_t n, bool bb,
                   const char *act, int64_t count, int how) {
    bool fused = act != NULL, tn = (how & GEMM_TN) && fused && !bb, res = (how & GEMM_RES) && fused && !tn;
    int n_in = fused ? (res ? 4 : 3) : 2;
    kn_node *nd = new_node(tn ? "Gemm" : "MatMul", fused ? KN_DOMAIN_KILN : "", n_in);
    if (fused && kn_node_set_string(nd, "activation", act))
        exit(1);
    if (tn && kn_node_set_int(nd, "transB", 1))
        exit(1);
    kb_tensor in[4], out[1];
    void *a = dev_rand(batch * m * kd, 1.f), *b = dev_rand((bb ? batch : 1) * kd * n, 0.05f),
         *bias = dev_rand(n, 1.f), *y = dev_rand(batch * m * n, 1.f),
         *z = res ? dev_rand(batch * m * n, 1.f) : NULL;
    if (tn)
        set_tensor(&in[0], a, 2, (int64_t[]){batch * m, kd});
    else
        set_tensor(&in[0], a, 3, (int64_t[]){batch, m, kd});
    if (bb)
        set_tensor(&in[1], b, 3, (int64_t[]){batch, kd, n});
    else if (tn)
        set_tensor(&in[1], b, 2, (int64_t[]){n, kd});
    else
        set_tensor(&in[1], b, 2, (int64_t[]){kd, n});
    set_tensor(&in[2], bias, 1, (int64_t[]){n});
    if (res)
        set_tensor(&in[3], z, 3, (int64_t[]){batch, m, n});
    if (tn)
        set_tensor(&out[0], y, 2, (int64_t[]){batch * m, n});
    else
        set_tensor(&out[0], y, 3, (int64_t[]){batch, m, n});
    double flops = 2.0 * (double)batch * m * n * kd;
    char label[96];
    snprintf(label, sizeof label, "%s%s%s x%lld", name, tn ? " [TN]" : "", res ? " +res" : "",
             (long long)count);
    total_best_ms += count * time_all(label, nd, in, n_in, out, flops);
    cudaFree(a);
    cudaFree(b);
    cudaFree(bias);
    cudaFree(y);
    cudaFree(z);
}

static void gemm(const char *name, int64_t batch, int64_t m, int64_t kd, int64_t n, bool bb,
                 const char *act, int64_t count) {
    gemm_v(name, batch, m, kd, n, bb, act, count, GEMM_NN);
}

#define COPY_GBS 4300.0 /* device-to-device copy rate measured on an H200 here (KINDS.md) */

/* A memory-bound kernel: time its (only) tactic, print GB/s over the bytes it must move. */
static void bw(const char *name, kn_node *nd, kb_tensor *in, int n_in, kb_tensor *out, double bytes) {
    const kb_kernel *ks[4];
    int nk = kb_cuda_backend.kernels_for(nd->domain, nd->op_type, ks, 4);
    for (int i = 0; i < nk && i < 4; i++) {
        void *inst = NULL;
        size_t wsz = 0;
        void *state = NULL;
        if (ks[i]->init && ks[i]->init(nd, &state) != KILN_OK) {
            printf("  %-44s init failed: %s\n", name, kiln_last_error());
            continue;
        }
        if (ks[i]->prepare && ks[i]->prepare(state, nd, in, n_in, out, 1, &inst, &wsz) != KILN_OK) {
            printf("  %-44s declined: %s\n", name, kiln_last_error());
            continue;
        }
        kb_run r = {.node = nd, .state = state, .inst = inst, .n_in = n_in, .in = in, .n_out = 1,
                    .out = out, .threads = 1, .stream = stream};
        double ms = 0;
        if (kb_cuda_backend.time_kernel(ks[i], &r, reps, &ms) == KILN_OK)
            printf("= %-44s %-12s %9.4f ms %8.0f GB/s %5.1f %% of copy\n", name, ks[i]->tactic, ms,
                   bytes / (ms * 1e-3) / 1e9, 100.0 * bytes / (ms * 1e-3) / 1e9 / COPY_GBS);
        else
            printf("  %-44s failed: %s\n", name, kiln_last_error());
        if (ks[i]->release)
            ks[i]->release(inst);
        if (ks[i]->fini)
            ks[i]->fini(state);
    }
}

static void memory_bound_at(int64_t T) {
    printf("\nmemory-bound kernels, float16, BERT-base %lld tokens (GB/s over bytes read + written)\n",
           (long long)T);
    const int64_t H = 768;
    kb_tensor in[3], out[1];
    void *x = dev_rand(T * 4 * H, 1.f), *y = dev_rand(T * 4 * H, 1.f), *g = dev_rand(H, 1.f),
         *b = dev_rand(H, 1.f), *res = dev_rand(T * H, 1.f);
    kn_node *nd = new_node("LayerNormalization", "", 3);
    set_tensor(&in[0], x, 2, (int64_t[]){T, H});
    set_tensor(&in[1], g, 1, (int64_t[]){H});
    set_tensor(&in[2], b, 1, (int64_t[]){H});
    set_tensor(&out[0], y, 2, (int64_t[]){T, H});
    char lname[64];
    snprintf(lname, sizeof lname, "LayerNormalization [%lld,768]", (long long)T);
    bw(lname, nd, in, 3, out, 2.0 * T * H * 2);
    nd = new_node("Add", "", 2);
    set_tensor(&in[1], res, 2, (int64_t[]){T, H});
    snprintf(lname, sizeof lname, "Add residual [%lld,768]", (long long)T);
    bw(lname, nd, in, 2, out, 3.0 * T * H * 2);
    set_tensor(&in[1], b, 1, (int64_t[]){H});
    snprintf(lname, sizeof lname, "Add bias [%lld,768] + [768]", (long long)T);
    bw(lname, nd, in, 2, out, 2.0 * T * H * 2);
    set_tensor(&in[0], x, 4, (int64_t[]){32, 12, 128, 128});
    set_tensor(&in[1], res, 4, (int64_t[]){32, 1, 1, 128});
    set_tensor(&out[0], y, 4, (int64_t[]){32, 12, 128, 128});
    bw("Add mask [32,12,128,128] + [32,1,1,128]", nd, in, 2, out, 2.0 * 384 * 128 * 128 * 2);
    nd = new_node("Gelu", "", 1);
    set_tensor(&in[0], x, 2, (int64_t[]){T, 4 * H});
    set_tensor(&out[0], y, 2, (int64_t[]){T, 4 * H});
    snprintf(lname, sizeof lname, "Gelu [%lld,3072]", (long long)T);
    bw(lname, nd, in, 1, out, 2.0 * T * 4 * H * 2);
    nd = new_node("Softmax", "", 1);
    nd->opset = 13; /* last axis; opset 1 would coerce the rows to [384, 16384] */
    set_tensor(&in[0], x, 3, (int64_t[]){384, 128, 128});
    set_tensor(&out[0], y, 3, (int64_t[]){384, 128, 128});
    bw("Softmax [384,128,128]", nd, in, 1, out, 2.0 * 384 * 128 * 128 * 2);
    nd = new_node("Transpose", "", 1);
    if (kn_node_set_ints(nd, "perm", (int64_t[]){0, 2, 1, 3}, 4))
        exit(1);
    set_tensor(&in[0], x, 4, (int64_t[]){T / 128, 128, 12, 64});
    set_tensor(&out[0], y, 4, (int64_t[]){T / 128, 12, 128, 64});
    snprintf(lname, sizeof lname, "Transpose heads [%lld,128,12,64]", (long long)(T / 128));
    bw(lname, nd, in, 1, out, 2.0 * T * H * 2);
    nd = new_node("Identity", "", 1);
    set_tensor(&in[0], x, 2, (int64_t[]){T, 4 * H});
    set_tensor(&out[0], y, 2, (int64_t[]){T, 4 * H});
    snprintf(lname, sizeof lname, "Identity (cudaMemcpyAsync) [%lld,3072]", (long long)T);
    bw(lname, nd, in, 1, out, 2.0 * T * 4 * H * 2);
    cudaFree(x);
    cudaFree(y);
    cudaFree(g);
    cudaFree(b);
    cudaFree(res);
}

static void memory_bound(void) { memory_bound_at(4096); }

/* kiln::Attention on BERT-base heads (12 x 64, 128 tokens) with its padding
 * mask, batch 64 and batch 1 (KILN_ATTENTION_GENERIC=1 times the general
 * kernel). FLOPs: the two products, 4 * B * H * S * S * D. */
static void attention(void) {
    printf("\nkiln::Attention, float16, BERT-base heads, mask [B,1,1,128]\n");
    for (int k = 0; k < 2; k++) {
        int64_t B = k == 0 ? 64 : 1, S = 128, H = 12, D = 64;
        void *q = dev_rand(B * S * H * D, 1.f), *kk = dev_rand(B * S * H * D, 1.f),
             *v = dev_rand(B * S * H * D, 1.f), *m = dev_rand(B * S, 1.f),
             *y = dev_rand(B * S * H * D, 1.f);
        kb_tensor in[4], out[1];
        set_tensor(&in[0], q, 4, (int64_t[]){B, S, H, D});
        set_tensor(&in[1], kk, 4, (int64_t[]){B, S, H, D});
        set_tensor(&in[2], v, 4, (int64_t[]){B, S, H, D});
        set_tensor(&in[3], m, 4, (int64_t[]){B, 1, 1, S});
        set_tensor(&out[0], y, 4, (int64_t[]){B, S, H, D});
        kn_node *nd = new_node("Attention", KN_DOMAIN_KILN, 4);
        if (kn_node_set_float(nd, "scale", 0.125f))
            exit(1);
        char name[64];
        snprintf(name, sizeof name, "attention batch %lld", (long long)B);
        time_all(name, nd, in, 4, out, 4.0 * B * H * S * S * D);
        cudaFree(q);
        cudaFree(kk);
        cudaFree(v);
        cudaFree(m);
        cudaFree(y);
    }
}

/* NonMaxSuppression, float32: one class of n boxes (sides 10 to 60 scattered
 * over a 1000 x 1000 field, so overlaps chain), uniform scores, IoU 0.5, no
 * score threshold (every box a candidate), max_output_boxes_per_class n
 * (the whole walk) and 100. run() waits for the count, so time_kernel times
 * it launch by launch. KILN_CUDA_GENERIC=1 times the one-at-a-time walk in
 * place of the bit matrix. */
static void nms_bench(void) {
    printf("\nNonMaxSuppression, float32, one class, IoU 0.5, no score threshold%s\n",
           getenv("KILN_CUDA_GENERIC") ? " (KILN_CUDA_GENERIC: the serial walk)" : "");
    const kb_kernel *k = kb_cuda_backend.kernel_find("", "NonMaxSuppression", "cuda");
    if (!k) {
        printf("  no NonMaxSuppression kernel\n");
        return;
    }
    static const int64_t sizes[] = {1000, 5000, 20000};
    for (int t = 0; t < 6; t++) {
        const int64_t n = sizes[t / 2], max_out = t % 2 ? 100 : n;
        const float iou = 0.5f;
        float *hb = malloc((size_t)n * 16), *hs = malloc((size_t)n * 4);
        void *db = NULL, *ds = NULL, *dm = NULL, *di = NULL, *dy = NULL, *ws = NULL, *inst = NULL;
        size_t wsz = 0;
        if (!hb || !hs)
            exit(1);
        for (int64_t i = 0; i < n; i++) {
            const float x = (rnd() + 1) * 500, y = (rnd() + 1) * 500;
            hb[i * 4] = y;
            hb[i * 4 + 1] = x;
            hb[i * 4 + 2] = y + 10 + (rnd() + 1) * 25;
            hb[i * 4 + 3] = x + 10 + (rnd() + 1) * 25;
            hs[i] = (rnd() + 1) / 2;
        }
        if (cudaMalloc(&db, (size_t)n * 16) != cudaSuccess || cudaMalloc(&ds, (size_t)n * 4) != cudaSuccess ||
            cudaMalloc(&dm, 8) != cudaSuccess || cudaMalloc(&di, 4) != cudaSuccess ||
            cudaMalloc(&dy, (size_t)n * 24) != cudaSuccess ||
            cudaMemcpy(db, hb, (size_t)n * 16, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(ds, hs, (size_t)n * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(stderr, "device allocation for %lld boxes failed\n", (long long)n);
            exit(1);
        }
        kb_tensor in[4], out[1];
        memset(in, 0, sizeof in);
        memset(out, 0, sizeof out);
        in[0] = (kb_tensor){.data = db, .dtype = KILN_DTYPE_FLOAT, .rank = 3, .dims = {1, n, 4}};
        in[1] = (kb_tensor){.data = ds, .dtype = KILN_DTYPE_FLOAT, .rank = 3, .dims = {1, 1, n}};
        in[2] = (kb_tensor){.data = dm, .dtype = KILN_DTYPE_INT64, .rank = 1, .dims = {1}, .host = &max_out};
        in[3] = (kb_tensor){.data = di, .dtype = KILN_DTYPE_FLOAT, .rank = 1, .dims = {1}, .host = &iou};
        out[0] = (kb_tensor){.data = dy, .dtype = KILN_DTYPE_INT64, .rank = 2, .dims = {n, 3}};
        kn_node *nd = new_node("NonMaxSuppression", "", 4);
        nd->opset = 11;
        char name[64];
        snprintf(name, sizeof name, "NMS %lld boxes, max %lld", (long long)n, (long long)max_out);
        double ms = 0;
        if (k->prepare && k->prepare(NULL, nd, in, 4, out, 1, &inst, &wsz) != KILN_OK) {
            printf("  %-44s declined: %s\n", name, kiln_last_error());
        } else if (wsz && cudaMalloc(&ws, wsz) != cudaSuccess) {
            printf("  %-44s workspace of %zu bytes failed\n", name, wsz);
        } else {
            kb_run r = {.node = nd, .inst = inst, .n_in = 4, .in = in, .n_out = 1, .out = out,
                        .workspace = ws, .workspace_size = wsz, .threads = 1, .stream = stream};
            if (kb_cuda_backend.time_kernel(k, &r, reps, &ms) == KILN_OK)
                printf("= %-44s %9.4f ms  %6lld selected  workspace %.1f MiB\n", name, ms,
                       (long long)out[0].dims[0], (double)wsz / (1 << 20));
            else
                printf("  %-44s failed: %s\n", name, kiln_last_error());
        }
        if (k->release && inst)
            k->release(inst);
        cudaFree(ws);
        cudaFree(db);
        cudaFree(ds);
        cudaFree(dm);
        cudaFree(di);
        cudaFree(dy);
        free(hb);
        free(hs);
    }
}

/* ResNet-50's 53 convolutions at batch B (count = uses per net). */
static void resnet_convs(int64_t B) {
    printf("\nResNet-50 convolutions, batch %lld, %s kiln::Conv + bias + ReLU (count = uses per net)\n",
           (long long)B, conv_nhwc ? "channels-last" : "NCHW");
    total_best_ms = 0;
    conv("stem 3->64 7x7 s2 224", B, 3, 224, 64, 7, 2, 3, 1);
    conv("stem padded to 4 channels (not counted)", B, 4, 224, 64, 7, 2, 3, 0);
    conv("stem padded to 8 channels (not counted)", B, 8, 224, 64, 7, 2, 3, 0);
    conv("l1 64->64 1x1 56", B, 64, 56, 64, 1, 1, 0, 1);
    conv("l1 64->64 3x3 56", B, 64, 56, 64, 3, 1, 1, 3);
    conv("l1 64->256 1x1 56", B, 64, 56, 256, 1, 1, 0, 4);
    conv("l1 256->64 1x1 56", B, 256, 56, 64, 1, 1, 0, 2);
    conv("l2 256->128 1x1 56", B, 256, 56, 128, 1, 1, 0, 1);
    conv("l2 128->128 3x3 s2 56", B, 128, 56, 128, 3, 2, 1, 1);
    conv("l2 128->128 3x3 28", B, 128, 28, 128, 3, 1, 1, 3);
    conv("l2 128->512 1x1 28", B, 128, 28, 512, 1, 1, 0, 4);
    conv("l2 256->512 1x1 s2 56 (down)", B, 256, 56, 512, 1, 2, 0, 1);
    conv("l2 512->128 1x1 28", B, 512, 28, 128, 1, 1, 0, 3);
    conv("l3 512->256 1x1 28", B, 512, 28, 256, 1, 1, 0, 1);
    conv("l3 256->256 3x3 s2 28", B, 256, 28, 256, 3, 2, 1, 1);
    conv("l3 256->256 3x3 14", B, 256, 14, 256, 3, 1, 1, 5);
    conv("l3 256->1024 1x1 14", B, 256, 14, 1024, 1, 1, 0, 6);
    conv("l3 512->1024 1x1 s2 28 (down)", B, 512, 28, 1024, 1, 2, 0, 1);
    conv("l3 1024->256 1x1 14", B, 1024, 14, 256, 1, 1, 0, 5);
    conv("l4 1024->512 1x1 14", B, 1024, 14, 512, 1, 1, 0, 1);
    conv("l4 512->512 3x3 s2 14", B, 512, 14, 512, 3, 2, 1, 1);
    conv("l4 512->512 3x3 7", B, 512, 7, 512, 3, 1, 1, 2);
    conv("l4 512->2048 1x1 7", B, 512, 7, 2048, 1, 1, 0, 3);
    conv("l4 1024->2048 1x1 s2 14 (down)", B, 1024, 14, 2048, 1, 2, 0, 1);
    conv("l4 2048->512 1x1 7", B, 2048, 7, 512, 1, 1, 0, 2);
    printf("ResNet-50 convolutions (best tactic each, times uses): %.3f ms per batch of %lld (%.0f images/s conv-only)\n",
           total_best_ms, (long long)B, (double)B / (total_best_ms * 1e-3));

}

/* ltsearch: cuBLASLt's heuristic list beyond the tactics kiln times. For
 * one BERT-base GEMM at batch 64, laid out as kiln does (column-major
 * Y^T = W^T X^T, weights [k, n]), every algorithm the heuristic returns (up
 * to 48) is timed; printed by time with its heuristic rank. */
#define LT_CHECK(x)                                                                  \
    do {                                                                             \
        cublasStatus_t st_ = (x);                                                    \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                          \
            printf("  %s failed: %d\n", #x, (int)st_);                               \
            return;                                                                  \
        }                                                                            \
    } while (0)

typedef struct {
    double ms;
    int rank;
    int tile, stages, splitk, swizzle, id, cluster, inner, custom;
    size_t ws;
    cublasLtMatmulAlgo_t algo;
} lt_row;

/* The few NVML calls the energy pass needs, through dlopen (no nvml.h
 * here): the board's energy counter (mJ) and the SM clock. */
typedef struct nvml_api {
    void *dev;
    int (*energy)(void *dev, unsigned long long *mj);
    int (*clock)(void *dev, int type, unsigned *mhz);
} nvml_api;

static bool nvml_open(nvml_api *n) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib)
        return false;
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*handle)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    n->energy = (int (*)(void *, unsigned long long *))dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption");
    n->clock = (int (*)(void *, int, unsigned *))dlsym(lib, "nvmlDeviceGetClockInfo");
    return init && handle && n->energy && n->clock && init() == 0 && handle(0, &n->dev) == 0;
}

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int lt_row_cmp(const void *a, const void *b) {
    double x = ((const lt_row *)a)->ms, y = ((const lt_row *)b)->ms;
    return x < y ? -1 : x > y;
}

static void lt_search(const char *name, int64_t m, int64_t k, int64_t n, cublasLtEpilogue_t epi,
                      bool residual, bool tn) {
    static cublasLtHandle_t h;
    if (!h && cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return;
    void *x = dev_rand(m * k, 1.f), *w = dev_rand(k * n, 0.05f), *bias = dev_rand(n, 1.f),
         *y = dev_rand(m * n, 1.f), *c = residual ? dev_rand(m * n, 1.f) : y;
    size_t wsmax = (size_t)64 << 20;
    void *ws = NULL;
    cudaMalloc(&ws, wsmax);
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = tn ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (tn)
        LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, (uint64_t)k, (uint64_t)n, k));
    else
        LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, (uint64_t)n, (uint64_t)k, n));
    LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, (uint64_t)k, (uint64_t)m, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16F, (uint64_t)n, (uint64_t)m, n));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &wsmax, sizeof wsmax));
    enum { NREQ = 48 };
    cublasLtMatmulHeuristicResult_t res[NREQ];
    int nres = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, NREQ, res, &nres));
    float alpha = 1.f, beta = residual ? 1.f : 0.f;
    double flops = 2.0 * (double)m * n * k;
    enum { NROWS = NREQ * 20 };
    lt_row rows[NROWS];
    int nr = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    /* each heuristic result as returned, then with other cluster shapes
     * and CTA swizzles (cublasLtMatmulAlgoCheck filters the invalid ones) */
    static const uint32_t clusters[] = {0, 2, 3, 5, 6};
    for (int i = 0; i < nres; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        for (int v = 0; v < 20 && nr < NROWS; v++) {
            cublasLtMatmulAlgo_t algo = res[i].algo;
            size_t wsz = res[i].workspaceSize;
            if (v > 0) {
                if (v > 10) { /* split-K 2..4 with each reduction scheme */
                    int32_t sk = 2 + (v - 11) / 3;
                    uint32_t rs = 1u << ((v - 11) % 3);
                    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk);
                    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &rs, sizeof rs);
                } else { /* a cluster shape and a CTA swizzle */
                    uint32_t cl = clusters[(v - 1) / 2], sw = (uint32_t)((v - 1) % 2);
                    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl);
                    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &sw, sizeof sw);
                }
                cublasLtMatmulHeuristicResult_t chk;
                if (cublasLtMatmulAlgoCheck(h, op, la, lb, ld, ld, &algo, &chk) != CUBLAS_STATUS_SUCCESS ||
                    chk.workspaceSize > wsmax)
                    continue;
                wsz = chk.workspaceSize;
            }
            bool ok = true;
            float t[40];
            for (int r = 0; r < 45 && ok; r++) {
                if (r >= 5)
                    cudaEventRecord(e0, stream);
                ok = cublasLtMatmul(h, op, &alpha, w, la, x, lb, &beta, c, ld, y, ld, &algo, ws, wsz,
                                    stream) == CUBLAS_STATUS_SUCCESS;
                if (r >= 5) {
                    cudaEventRecord(e1, stream);
                    cudaEventSynchronize(e1);
                    cudaEventElapsedTime(&t[r - 5], e0, e1);
                }
            }
            if (!ok)
                continue;
            for (int a = 1; a < 40; a++)
                for (int b2 = a; b2 > 0 && t[b2] < t[b2 - 1]; b2--) {
                    float q = t[b2];
                    t[b2] = t[b2 - 1];
                    t[b2 - 1] = q;
                }
            lt_row *rw = &rows[nr++];
            memset(rw, 0, sizeof *rw);
            rw->ms = t[20];
            rw->algo = algo;
            rw->rank = v == 0 ? i + 1 : -(i + 1);
            rw->ws = wsz;
            size_t sz;
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &rw->id, sizeof rw->id, &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &rw->tile, sizeof rw->tile, &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &rw->stages, sizeof rw->stages, &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &rw->splitk, sizeof rw->splitk, &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &rw->swizzle, sizeof rw->swizzle, &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &rw->cluster, sizeof rw->cluster, &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &rw->inner, sizeof rw->inner, &sz);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &rw->custom, sizeof rw->custom, &sz);
        }
    }
    qsort(rows, (size_t)nr, sizeof rows[0], lt_row_cmp);
    printf("\n%s%s: %d heuristic results, %d configurations ran\n", name, tn ? " [TN]" : "", nres, nr);
    /* the 10 fastest, and every heuristic result as returned (rank > 0;
     * a negative rank is that result with another cluster shape / swizzle) */
    for (int i = 0; i < nr; i++)
        if (i < 10 || rows[i].rank > 0)
            printf("  %s rank %3d  %8.4f ms %7.1f TFLOP/s  algo %d tile %d stages %d splitK %d swizzle %d cluster %d inner %d custom %d ws %zu\n",
                   i == 0 ? "=" : " ", rows[i].rank, rows[i].ms, flops / (rows[i].ms * 1e-3) / 1e12,
                   rows[i].id, rows[i].tile, rows[i].stages, rows[i].splitk, rows[i].swizzle,
                   rows[i].cluster, rows[i].inner, rows[i].custom, rows[i].ws);
    /* LTSEARCH_ENERGY=1: the builder's candidates (the heuristic's first
     * eight as returned, kiln's lt .. lt8) and the six fastest of all, each
     * run back to back in its own steady state at the power cap: 400 ms of
     * warm-up, then about 2 s measured with NVML's energy counter. The
     * first candidate runs again at the end, to show the drift. */
    nvml_api nv;
    if (getenv("LTSEARCH_ENERGY") && nvml_open(&nv)) {
        int pick[24], np = 0;
        for (int i = 0; i < nr && np < 23; i++)
            if ((rows[i].rank > 0 && rows[i].rank <= 8) || i < 6)
                pick[np++] = i;
        pick[np++] = pick[0];
        printf("  energy at the cap, back to back (per GEMM): rank, ms at full clock, then us, mJ, W, SM MHz\n");
        for (int q = 0; q < np; q++) {
            lt_row *rw = &rows[pick[q]];
            bool ok = true;
            double t0 = wall_ms();
            while (ok && wall_ms() - t0 < 400) {
                for (int r = 0; r < 20 && ok; r++)
                    ok = cublasLtMatmul(h, op, &alpha, w, la, x, lb, &beta, c, ld, y, ld, &rw->algo, ws,
                                        rw->ws, stream) == CUBLAS_STATUS_SUCCESS;
                cudaStreamSynchronize(stream);
            }
            long calls = (long)(2000.0 / rw->ms);
            unsigned long long ea = 0, eb = 0;
            unsigned mhz = 0;
            cudaEventRecord(e0, stream);
            nv.energy(nv.dev, &ea);
            for (long r = 0; r < calls && ok; r++) {
                ok = cublasLtMatmul(h, op, &alpha, w, la, x, lb, &beta, c, ld, y, ld, &rw->algo, ws, rw->ws,
                                    stream) == CUBLAS_STATUS_SUCCESS;
                if (r == calls / 2)
                    nv.clock(nv.dev, 1, &mhz);
            }
            cudaEventRecord(e1, stream);
            cudaEventSynchronize(e1);
            nv.energy(nv.dev, &eb);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            if (!ok || calls <= 0)
                continue;
            double per_us = 1e3 * ms / (double)calls, mj = (double)(eb - ea) / (double)calls;
            printf("    rank %3d  %8.4f ms  %8.2f us %8.3f mJ %6.0f W %5u MHz  tile %d stages %d splitK %d swizzle %d cluster %d\n",
                   rw->rank, rw->ms, per_us, mj, (double)(eb - ea) / ms, mhz, rw->tile, rw->stages, rw->splitk,
                   rw->swizzle, rw->cluster);
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    cudaFree(x);
    cudaFree(w);
    cudaFree(bias);
    cudaFree(y);
    if (residual)
        cudaFree(c);
    cudaFree(ws);
}

static void lt_search_bert(void) {
    printf("\ncuBLASLt heuristic search, BERT-base GEMMs at batch 64 (8192 tokens), float16\n");
    lt_search("QKV 8192x768 -> 2304 + bias", 8192, 768, 2304, CUBLASLT_EPILOGUE_BIAS, false, false);
    lt_search("attn out 8192x768 -> 768 + bias + residual", 8192, 768, 768, CUBLASLT_EPILOGUE_BIAS, true, false);
    lt_search("attn out 8192x768 -> 768 + bias", 8192, 768, 768, CUBLASLT_EPILOGUE_BIAS, false, false);
    lt_search("FFN1 8192x768 -> 3072 + bias + GELU", 8192, 768, 3072, CUBLASLT_EPILOGUE_GELU_BIAS, false, false);
    lt_search("FFN2 8192x3072 -> 768 + bias + residual", 8192, 3072, 768, CUBLASLT_EPILOGUE_BIAS, true, false);
    lt_search("FFN2 8192x3072 -> 768 + bias", 8192, 3072, 768, CUBLASLT_EPILOGUE_BIAS, false, false);
}

int main(int argc, char **argv) {
    char target[64], libs[128];
    if (argc > 1)
        reps = atoi(argv[1]) > 0 ? atoi(argv[1]) : reps;
    if (kb_cuda_backend.describe(target, sizeof target, libs, sizeof libs) != KILN_OK) {
        printf("skipped: no CUDA device (%s)\n", kiln_last_error());
        return 77;
    }
    if (cudaStreamCreate(&stream) != cudaSuccess || kn_net_new(&net) != KILN_OK)
        return 1;
    if (getenv("BENCH_SUSTAIN_MS"))
        sustain_ms = atof(getenv("BENCH_SUSTAIN_MS"));
    printf("device %s, %s; float16, median of %d after warm-up; ceiling %.0f TFLOP/s\n", target, libs,
           reps, CEILING_TFLOPS);

    if (argc > 2 && strcmp(argv[2], "attn") == 0) {
        attention();
        cudaStreamDestroy(stream);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "r50nhwc") == 0) { /* ResNet-50's convs as the plans run them */
        conv_nhwc = true;
        resnet_convs(64);
        cudaStreamDestroy(stream);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "bert64") == 0) { /* BERT-base's GEMMs at batch 64 */
        printf("\nBERT-base GEMMs, batch 64 x 128 tokens, every tactic\n");
        total_best_ms = 0;
        gemm("QKV 8192x768 -> 2304 + bias", 1, 8192, 768, 2304, false, "", 12);
        gemm_v("attn out 8192x768 -> 768 + bias", 1, 8192, 768, 768, false, "", 12, GEMM_RES);
        gemm("FFN1 8192x768 -> 3072 + bias + Gelu", 1, 8192, 768, 3072, false, "Gelu", 12);
        gemm("FFN1 8192x768 -> 3072 + bias (no act)", 1, 8192, 768, 3072, false, "", 0);
        gemm_v("FFN2 8192x3072 -> 768 + bias", 1, 8192, 3072, 768, false, "", 12, GEMM_RES);
        printf("BERT-base GEMMs as the plan runs them (best tactic each, times uses): %.3f ms per batch of 64\n",
               total_best_ms);
        /* the same products with the weights stored [n, k] (transposed) */
        total_best_ms = 0;
        gemm_v("QKV 8192x768 -> 2304 + bias", 1, 8192, 768, 2304, false, "", 12, GEMM_TN);
        gemm_v("attn out 8192x768 -> 768 + bias", 1, 8192, 768, 768, false, "", 12, GEMM_TN);
        gemm_v("FFN1 8192x768 -> 3072 + bias + Gelu", 1, 8192, 768, 3072, false, "Gelu", 12, GEMM_TN);
        gemm_v("FFN2 8192x3072 -> 768 + bias", 1, 8192, 3072, 768, false, "", 12, GEMM_TN);
        printf("BERT-base GEMMs, weights [n, k], no residual (best tactic each, times uses): %.3f ms per batch of 64\n",
               total_best_ms);
        total_best_ms = 0;
        gemm("attn out 8192x768 -> 768 + bias", 1, 8192, 768, 768, false, "", 12);
        gemm("FFN2 8192x3072 -> 768 + bias", 1, 8192, 3072, 768, false, "", 12);
        printf("attn out + FFN2 without residual (NN): %.3f ms per batch of 64\n", total_best_ms);
        memory_bound_at(8192);
        cudaStreamDestroy(stream);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "ltsearch") == 0) {
        if (getenv("LTSEARCH_ENERGY")) { /* the four shapes of the plan only */
            printf("\ncuBLASLt configurations at the power cap, BERT-base GEMMs at batch 64, float16\n");
            lt_search("QKV 8192x768 -> 2304 + bias", 8192, 768, 2304, CUBLASLT_EPILOGUE_BIAS, false, false);
            lt_search("attn out 8192x768 -> 768 + bias + residual", 8192, 768, 768, CUBLASLT_EPILOGUE_BIAS, true,
                      false);
            lt_search("FFN1 8192x768 -> 3072 + bias + GELU", 8192, 768, 3072, CUBLASLT_EPILOGUE_GELU_BIAS, false,
                      false);
            lt_search("FFN2 8192x3072 -> 768 + bias + residual", 8192, 3072, 768, CUBLASLT_EPILOGUE_BIAS, true,
                      false);
            cudaStreamDestroy(stream);
            return 0;
        }
        lt_search_bert();
        cudaStreamDestroy(stream);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "nms") == 0) { /* NonMaxSuppression at 1000, 5000, 20000 boxes */
        nms_bench();
        kn_net_free(net);
        cudaStreamDestroy(stream);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "mem") == 0) { /* the memory-bound kernels only */
        memory_bound();
        cudaStreamDestroy(stream);
        return 0;
    }
    printf("\nsquare GEMM (the ceiling check)\n");
    total_best_ms = 0;
    gemm("MatMul 8192x8192x8192", 1, 8192, 8192, 8192, false, NULL, 1);

    resnet_convs(32);

    printf("\nBERT-base GEMMs, batch 32 x 128 tokens (count = uses per net, 12 layers)\n");
    total_best_ms = 0;
    gemm("QKV 4096x768 -> 2304 + bias", 1, 4096, 768, 2304, false, "", 12);
    gemm("scores [384] 128x64 -> 128", 384, 128, 64, 128, true, NULL, 12);
    gemm("context [384] 128x128 -> 64", 384, 128, 128, 64, true, NULL, 12);
    gemm("attn out 4096x768 -> 768 + bias", 1, 4096, 768, 768, false, "", 12);
    gemm("FFN1 4096x768 -> 3072 + bias + Gelu", 1, 4096, 768, 3072, false, "Gelu", 12);
    gemm("FFN1 4096x768 -> 3072 + bias (no act)", 1, 4096, 768, 3072, false, "", 0);
    gemm("FFN2 4096x3072 -> 768 + bias", 1, 4096, 3072, 768, false, "", 12);
    printf("BERT-base GEMMs (best tactic each, times uses): %.3f ms per batch of 32 sequences\n",
           total_best_ms);
    memory_bound();
    kn_net_free(net);
    cudaStreamDestroy(stream);
    return 0;
}
