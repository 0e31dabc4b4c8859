/* k_tfidf.c - the CUDA TfIdfVectorizer's kb_kernel glue (kernels in
 * tfidf.cu). The node's tables (graph/tfidf.h: the pool, each gram size's
 * sorted order, the columns and weights) depend on its attributes alone, so
 * init builds them on the host once per engine and copies them to the
 * device, where every context reads them. */
#include <string.h>

#include "kc_common.h"
#include "tfidf.cuh"

typedef struct tf_state {
    kn_tfidf g;
    void *tables; /* device memory */
} tf_state;

static void tf_fini(void *state) {
    tf_state *s = state;
    if (!s)
        return;
    if (s->tables)
        (void)cudaFree(s->tables);
    kn_free(s);
}

static kiln_status tf_init(const kn_node *node, void **state) {
    tf_state *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    void *host = NULL;
    size_t bytes = 0;
    kiln_status st = kn_tfidf_attrs(node, &s->g);
    if (st == KILN_OK) {
        bytes = kn_tfidf_bytes(&s->g);
        host = kn_malloc(bytes);
        st = host ? kn_tfidf_tables(node, &s->g, host) : KILN_ERR_OUT_OF_MEMORY;
    }
    cudaError_t e = cudaSuccess;
    if (st == KILN_OK && (e = cudaMalloc(&s->tables, bytes)) == cudaSuccess)
        e = cudaMemcpy(s->tables, host, bytes, cudaMemcpyHostToDevice);
    if (st == KILN_OK && e != cudaSuccess)
        st = kc_cuda_fail(node, e, "the n-gram tables");
    kn_free(host);
    if (st != KILN_OK) {
        tf_fini(s);
        return st;
    }
    *state = s;
    return KILN_OK;
}

static bool tf_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    return n_in == 1 && n_out == 1 &&
           (in[0].dtype == KILN_DTYPE_INT32 || in[0].dtype == KILN_DTYPE_INT64) &&
           (in[0].rank == 1 || in[0].rank == 2) && out[0].dtype == KILN_DTYPE_FLOAT;
}

static kiln_status tf_run(const kb_run *r) {
    const tf_state *s = r->state;
    if (!s || r->n_in != 1 || r->n_out != 1)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run without init, or not one input and output");
    const kb_tensor *x = &r->in[0];
    kn_tfidf g = s->g;
    KN_TRY(kn_tfidf_bind(r->node, x->dtype, x->rank, x->dims, &g));
    KC_CUDA(r->node, kc_tfidf(x->data, r->out[0].data, &g, s->tables, kc_stream(r)));
    return KILN_OK;
}

const kb_kernel kb_cuda_tfidf[] = {
    {"TfIdfVectorizer", "", "cuda", tf_supports, tf_init, tf_fini, NULL, NULL, tf_run},
};
const size_t kb_cuda_tfidf_count = KN_ARRAY_LEN(kb_cuda_tfidf);
