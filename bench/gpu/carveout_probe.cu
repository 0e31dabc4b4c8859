/* carveout_probe.cu - does an SM's switch between a large L1 and a large
 * shared memory cost time between two kernels of a CUDA graph, and which
 * request avoids it?
 *
 * Kernel A streams 8192 rows of 768 halves through registers (a LayerNorm's
 * traffic, no shared memory); kernel B needs 200 KB of dynamic shared memory
 * a block (a cuBLASLt GEMM's footprint) and does little else. A graph of N
 * pairs A, B is timed against a graph of N A's followed by N B's: the same
 * work, 2N - 1 switches between A and B against one. The difference over
 * 2N - 2 is the cost of a switch. Variants:
 *   default       both kernels as they are;
 *   func          A with cudaFuncAttributePreferredSharedMemoryCarveout 100;
 *   node          every kernel node of the captured graph with the kernel
 *                 node attribute (what kiln's cuda_graph_end does);
 *   cluster       B launched in clusters of 2 (as the nvjet GEMMs), default
 *                 carveout, and then with node attributes;
 *   gemm          B is BERT-base's QKV GEMM through cuBLASLt (8192 x 768 ->
 *                 2304, float16, bias epilogue, the heuristic's first
 *                 algorithm), as kiln runs it after a LayerNorm.
 * Usage: carveout_probe [reps] */
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

#define ROWS 8192
#define INNER 768
#define BSMEM (200 * 1024)

__global__ void __launch_bounds__(128) kern_a(const uint4 *x, uint4 *y) {
    const int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint4 *xr = x + (size_t)row * (INNER / 8);
    uint4 v[3];
    for (int j = 0; j < 3; j++)
        v[j] = xr[lane + 32 * j];
    float s = 0.f;
    for (int j = 0; j < 3; j++) {
        const __half2 *h = reinterpret_cast<const __half2 *>(&v[j]);
        for (int e = 0; e < 4; e++)
            s += __low2float(h[e]) + __high2float(h[e]);
    }
    for (int o = 16; o; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    uint4 *yr = y + (size_t)row * (INNER / 8);
    for (int j = 0; j < 3; j++) {
        uint4 w = v[j];
        w.x ^= __float_as_uint(s) & 1u;
        yr[lane + 32 * j] = w;
    }
}

__global__ void __launch_bounds__(128) kern_b(float *out) {
    extern __shared__ float sm[];
    for (int i = threadIdx.x; i < BSMEM / 4; i += 128)
        sm[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0)
        out[blockIdx.x] = sm[(blockIdx.x * 977) % (BSMEM / 4)];
}

static struct {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    void *w, *bias, *c, *ws;
    size_t wsz;
} G;

static void gemm_setup(void) {
    const int M = ROWS, N = 2304, K = INNER;
    if (cublasLtCreate(&G.h) != CUBLAS_STATUS_SUCCESS)
        exit(1);
    CK(cudaMalloc(&G.w, (size_t)K * N * 2));
    CK(cudaMemset(G.w, 0, (size_t)K * N * 2));
    CK(cudaMalloc(&G.bias, (size_t)N * 2));
    CK(cudaMemset(G.bias, 0, (size_t)N * 2));
    CK(cudaMalloc(&G.c, (size_t)M * N * 2));
    G.wsz = 32u << 20;
    CK(cudaMalloc(&G.ws, G.wsz));
    cublasLtMatmulDescCreate(&G.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(G.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
    cudaDataType_t bt = CUDA_R_16F;
    cublasLtMatmulDescSetAttribute(G.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    cublasLtMatmulDescSetAttribute(G.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &G.bias, sizeof G.bias);
    /* row-major Y[M,N] = X[M,K] W[K,N] as column-major Y^T = W^T X^T */
    cublasLtMatrixLayoutCreate(&G.la, CUDA_R_16F, N, K, N);
    cublasLtMatrixLayoutCreate(&G.lb, CUDA_R_16F, K, M, K);
    cublasLtMatrixLayoutCreate(&G.lc, CUDA_R_16F, N, M, N);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &G.wsz, sizeof G.wsz);
    cublasLtMatmulHeuristicResult_t r;
    int got = 0;
    if (cublasLtMatmulAlgoGetHeuristic(G.h, G.op, G.la, G.lb, G.lc, G.lc, pref, 1, &r, &got) !=
            CUBLAS_STATUS_SUCCESS ||
        got < 1) {
        fprintf(stderr, "no cuBLASLt algorithm\n");
        exit(1);
    }
    G.algo = r.algo;
    cublasLtMatmulPreferenceDestroy(pref);
}

static void launch_gemm(const uint4 *x, cudaStream_t s) {
    const float one = 1.f, zero = 0.f;
    if (cublasLtMatmul(G.h, G.op, &one, G.w, G.la, x, G.lb, &zero, G.c, G.lc, G.c, G.lc, &G.algo, G.ws, G.wsz, s) !=
        CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasLtMatmul failed\n");
        exit(1);
    }
}

static void launch_b(float *out, cudaStream_t s, bool cluster) {
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3(264);
    c.blockDim = dim3(128);
    c.dynamicSmemBytes = BSMEM;
    c.stream = s;
    cudaLaunchAttribute at[1];
    if (cluster) {
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = 2;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        c.attrs = at;
        c.numAttrs = 1;
    }
    CK(cudaLaunchKernelEx(&c, kern_b, out));
}

static int set_nodes(cudaGraph_t g) {
    size_t n = 0;
    CK(cudaGraphGetNodes(g, NULL, &n));
    cudaGraphNode_t *nodes = (cudaGraphNode_t *)malloc(n * sizeof *nodes);
    CK(cudaGraphGetNodes(g, nodes, &n));
    cudaKernelNodeAttrValue v = {};
    v.sharedMemCarveout = cudaSharedmemCarveoutMaxShared;
    int ok = 0;
    for (size_t i = 0; i < n; i++) {
        cudaGraphNodeType t;
        CK(cudaGraphNodeGetType(nodes[i], &t));
        if (t == cudaGraphNodeTypeKernel) {
            cudaError_t e = cudaGraphKernelNodeSetAttribute(nodes[i], cudaKernelNodeAttributePreferredSharedMemoryCarveout, &v);
            if (e == cudaSuccess)
                ok++;
            else
                fprintf(stderr, "node %zu: %s\n", i, cudaGetErrorString(e));
            (void)cudaGetLastError();
        }
    }
    free(nodes);
    return ok;
}

/* ms a replay of the graph: N pairs interleaved, or N A's then N B's */
static float time_graph(bool interleave, bool nodes, bool cluster, bool gemm, const uint4 *x, uint4 *y,
                        float *out, cudaStream_t s, int n, int reps, int *set) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; i++) {
        if (interleave) {
            kern_a<<<ROWS / 4, 128, 0, s>>>(x, y);
            if (gemm)
                launch_gemm(y, s);
            else
                launch_b(out, s, cluster);
        } else
            kern_a<<<ROWS / 4, 128, 0, s>>>(x, y);
    }
    if (!interleave)
        for (int i = 0; i < n; i++) {
            if (gemm)
                launch_gemm(y, s);
            else
                launch_b(out, s, cluster);
        }
    CK(cudaStreamEndCapture(s, &g));
    *set = nodes ? set_nodes(g) : 0;
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++)
        CK(cudaGraphLaunch(ge, s));
    float best = 1e30f;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best)
            best = ms;
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return best;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20, n = 24;
    uint4 *x, *y;
    float *out;
    CK(cudaMalloc(&x, (size_t)ROWS * INNER * 2));
    CK(cudaMalloc(&y, (size_t)ROWS * INNER * 2));
    CK(cudaMalloc(&out, 4096));
    CK(cudaMemset(x, 0, (size_t)ROWS * INNER * 2));
    CK(cudaFuncSetAttribute(kern_b, cudaFuncAttributeMaxDynamicSharedMemorySize, BSMEM));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct {
        const char *name;
        int func, nodes, cluster, gemm;
    } v[] = {{"default", 0, 0, 0, 0},      {"func", 1, 0, 0, 0},         {"node", 0, 1, 0, 0},
             {"cluster", 0, 0, 1, 0},      {"cluster+node", 0, 1, 1, 0}, {"cluster+func", 1, 0, 1, 0},
             {"gemm", 0, 0, 0, 1},         {"gemm+node", 0, 1, 0, 1},    {"gemm+func", 1, 0, 0, 1}};
    gemm_setup();
    printf("%d pairs; best of %d replays; the cost of one switch = (interleaved - grouped) / %d\n", n, reps,
           2 * n - 2);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        CK(cudaFuncSetAttribute(kern_a, cudaFuncAttributePreferredSharedMemoryCarveout,
                                v[i].func ? cudaSharedmemCarveoutMaxShared : cudaSharedmemCarveoutDefault));
        int set1 = 0, set2 = 0;
        float ti = time_graph(true, v[i].nodes, v[i].cluster, v[i].gemm, x, y, out, s, n, reps, &set1);
        float tg = time_graph(false, v[i].nodes, v[i].cluster, v[i].gemm, x, y, out, s, n, reps, &set2);
        printf("%-14s interleaved %8.1f us  grouped %8.1f us  a switch %6.2f us  (node attributes set: %d, %d)\n",
               v[i].name, ti * 1e3, tg * 1e3, (ti - tg) * 1e3 / (2 * n - 2), set1, set2);
    }
    return 0;
}
