/* light_bench.c - times kiln's reference kernels against the oneDNN tactics
 * for the lighter ops of ResNet-50 and BERT-base (Softmax, LayerNormalization,
 * MaxPool, GlobalAveragePool), FP32, through the kernel interface, to decide
 * which of them deserve a library tactic. ref and dnnl runs alternate so that
 * load on a shared machine hits both alike.
 *
 *   ninja -C build-fast kiln_internal
 *   gcc -O2 -fopenmp -Iinclude -Isrc -o /tmp/light_bench bench/cpu/light_bench.c \
 *       build-fast/libkiln_internal.a -ldnnl -lopenblas -lm -lpthread -ldl
 *   /tmp/light_bench [threads=2] [reps=30]
 *
 * When the build found CUDA, libkiln_internal.a holds the CUDA backend too:
 * add -lstdc++ -L/usr/local/cuda/lib -lcudart -lcublasLt -lcudnn
 * -Wl,-rpath,/usr/local/cuda/lib (the test targets' link line). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct prepared {
    const kb_kernel *k;
    void *state, *inst, *ws;
    size_t wsz;
} prepared;

static int prep(prepared *p, const char *op, const char *tactic, const kn_node *n,
                const kb_tensor *in, int n_in, const kb_tensor *out) {
    memset(p, 0, sizeof *p);
    p->k = kb_cpu_kernel_find("", op, tactic);
    if (!p->k)
        return -1;
    if (p->k->init && p->k->init(n, &p->state) != KILN_OK)
        return -1;
    if (p->k->prepare && p->k->prepare(p->state, n, in, n_in, out, 1, &p->inst, &p->wsz) != KILN_OK)
        return -1;
    p->ws = p->wsz ? kn_aligned_alloc(p->wsz) : NULL;
    return 0;
}

static double run_once(prepared *p, const kn_node *n, const kb_tensor *in, int n_in, kb_tensor *out,
                       int threads) {
    kb_run r = {.node = n, .state = p->state, .inst = p->inst, .n_in = n_in, .in = in,
                .n_out = 1, .out = out, .workspace = p->ws, .workspace_size = p->wsz,
                .threads = threads};
    double t0 = kn_now_ms();
    if (p->k->run(&r) != KILN_OK) {
        fprintf(stderr, "run failed: %s\n", kiln_last_error());
        exit(1);
    }
    return kn_now_ms() - t0;
}

static void unprep(prepared *p) {
    if (p->inst && p->k->release)
        p->k->release(p->inst);
    if (p->state && p->k->fini)
        p->k->fini(p->state);
    kn_aligned_free(p->ws);
}

static kb_tensor tensor(int rank, const int64_t *dims) {
    kb_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = KILN_DTYPE_FLOAT;
    t.rank = rank;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    int64_t n = kn_numel(rank, dims);
    float *p = kn_aligned_alloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)((i * 7919) % 2001) / 1000.f - 1.f;
    t.data = p;
    return t;
}

static int reps = 30, threads = 2;

static void bench(const char *label, const char *op, kn_net *net, int node, int n_in, kb_tensor *in,
                  kb_tensor *out) {
    const kn_node *n = &net->nodes[node];
    prepared a, b;
    if (prep(&a, op, "ref", n, in, n_in, out) || prep(&b, op, "dnnl", n, in, n_in, out)) {
        printf("| %s | (not available: %s) |\n", label, kiln_last_error());
        return;
    }
    double ta[1000], tb[1000];
    for (int i = 0; i < 3; i++)
        run_once(&a, n, in, n_in, out, threads), run_once(&b, n, in, n_in, out, threads);
    for (int i = 0; i < reps; i++) {
        ta[i] = run_once(&a, n, in, n_in, out, threads);
        tb[i] = run_once(&b, n, in, n_in, out, threads);
    }
    qsort(ta, (size_t)reps, sizeof(double), cmpd);
    qsort(tb, (size_t)reps, sizeof(double), cmpd);
    printf("| %s | %.3f | %.3f | %.1fx |\n", label, ta[reps / 2], tb[reps / 2],
           ta[reps / 2] / tb[reps / 2]);
    fflush(stdout);
    unprep(&a);
    unprep(&b);
}

static int add_node(kn_net *net, const char *op, int opset, int n_in) {
    int ins[3], outs[1], idx;
    char name[8];
    for (int i = 0; i < n_in; i++) {
        snprintf(name, sizeof name, "i%d", i);
        if (kn_net_tensor(net, name, &ins[i]) != KILN_OK)
            exit(1);
    }
    if (kn_net_tensor(net, "o", &outs[0]) != KILN_OK ||
        kn_net_add_node(net, op, op, "", opset, n_in, ins, 1, outs, &idx) != KILN_OK)
        exit(1);
    return idx;
}

int main(int argc, char **argv) {
    if (argc > 1)
        threads = atoi(argv[1]);
    if (argc > 2)
        reps = atoi(argv[2]);
    if (threads < 1 || reps < 1 || reps > 1000)
        return 2;
    printf("threads %d, median of %d alternating runs, ms\n\n", threads, reps);
    printf("| op and shape | ref | dnnl | ref/dnnl |\n|---|---|---|---|\n");
    for (int batch = 1; batch <= 8; batch *= 8) {
        char label[96];
        kn_net *net;
        if (kn_net_new(&net) != KILN_OK)
            return 1;
        {
            int64_t d[4] = {batch, 12, 128, 128};
            kb_tensor x = tensor(4, d), y = tensor(4, d);
            int nd = add_node(net, "Softmax", 13, 1);
            snprintf(label, sizeof label, "Softmax %dx12x128x128 (BERT attention)", batch);
            bench(label, "Softmax", net, nd, 1, &x, &y);
        }
        {
            int64_t d[3] = {batch, 128, 768}, c[1] = {768};
            kb_tensor in[3] = {tensor(3, d), tensor(1, c), tensor(1, c)}, y = tensor(3, d);
            int nd = add_node(net, "LayerNormalization", 17, 3);
            snprintf(label, sizeof label, "LayerNormalization %dx128x768", batch);
            bench(label, "LayerNormalization", net, nd, 3, in, &y);
        }
        {
            int64_t d[4] = {batch, 64, 112, 112}, o[4] = {batch, 64, 56, 56};
            kb_tensor x = tensor(4, d), y = tensor(4, o);
            int nd = add_node(net, "MaxPool", 12, 1);
            kn_node *n = &net->nodes[nd];
            if (kn_node_set_ints(n, "kernel_shape", (int64_t[]){3, 3}, 2) ||
                kn_node_set_ints(n, "strides", (int64_t[]){2, 2}, 2) ||
                kn_node_set_ints(n, "pads", (int64_t[]){1, 1, 1, 1}, 4))
                return 1;
            snprintf(label, sizeof label, "MaxPool 3x3/2 %dx64x112x112 (ResNet stem)", batch);
            bench(label, "MaxPool", net, nd, 1, &x, &y);
        }
        {
            int64_t d[4] = {batch, 2048, 7, 7}, o[4] = {batch, 2048, 1, 1};
            kb_tensor x = tensor(4, d), y = tensor(4, o);
            int nd = add_node(net, "GlobalAveragePool", 1, 1);
            snprintf(label, sizeof label, "GlobalAveragePool %dx2048x7x7", batch);
            bench(label, "GlobalAveragePool", net, nd, 1, &x, &y);
        }
        kn_net_free(net);
    }
    return 0;
}
