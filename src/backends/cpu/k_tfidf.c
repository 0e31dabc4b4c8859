/* k_tfidf.c - the reference CPU kernel of TfIdfVectorizer (graph/tfidf.h):
 * each row's n-grams counted as uint32 in the output's own memory, then
 * turned into their float values in place. */
#include <string.h>

#include "backends/backend.h"
#include "graph/tfidf.h"

/* Per engine: the attributes and their tables (one block, host memory). */
typedef struct tf_state {
    kn_tfidf g;
    void *tables;
} tf_state;

static void tf_fini(void *state) {
    tf_state *s = state;
    if (!s)
        return;
    kn_free(s->tables);
    kn_free(s);
}

static kiln_status tf_init(const kn_node *node, void **state) {
    tf_state *s = kn_calloc(1, sizeof *s);
    if (!s)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kn_tfidf_attrs(node, &s->g);
    if (st == KILN_OK && !(s->tables = kn_malloc(kn_tfidf_bytes(&s->g))))
        st = KILN_ERR_OUT_OF_MEMORY;
    if (st == KILN_OK)
        st = kn_tfidf_tables(node, &s->g, s->tables);
    if (st != KILN_OK) {
        tf_fini(s);
        return st;
    }
    *state = s;
    return KILN_OK;
}

typedef struct tfidf_rows_ctx {
    const kb_tensor *x;
    kn_tfidf g;
    kn_tfidf_tab t;
    uint32_t *y;
} tfidf_rows_ctx;

static void tfidf_rows(void *vc, int64_t lo_, int64_t hi_, int tid) {
    const tfidf_rows_ctx *c_ = vc;
    const kb_tensor *x = c_->x;
    kn_tfidf g = c_->g;
    kn_tfidf_tab t = c_->t;
    uint32_t *y = c_->y;
    (void)tid;
    for (int64_t row = lo_; row < hi_; row++) {
        memset(y + row * g.out_size, 0, (size_t)g.out_size * sizeof *y);
        for (int64_t start = 0; start < g.len; start++)
            kn_tfidf_count_at(&g, &t, x->data, row, start, y);
        for (int64_t i = row * g.out_size; i < (row + 1) * g.out_size; i++)
            kn_tfidf_finish(&g, &t, y, i);
    }
}

static kiln_status tf_run(const kb_run *r) {
    const tf_state *s = r->state;
    if (!s || r->n_in != 1 || r->n_out != 1)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "run without init, or not one input and output");
    const kb_tensor *x = &r->in[0];
    kn_tfidf g = s->g;
    KN_TRY(kn_tfidf_bind(r->node, x->dtype, x->rank, x->dims, &g));
    const kn_tfidf_tab t = kn_tfidf_tab_at(&g, s->tables);
    uint32_t *y = r->out[0].data;
    const int64_t rows = g.rows;
    {
        tfidf_rows_ctx c_ = {x, g, t, y};
        kn_parallel_for(rows > 1 && rows * g.len >= 4096 ? r->threads : 1, rows, 0, tfidf_rows, &c_);
    }
    return KILN_OK;
}

static bool tf_supports(const kn_node *node, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    return n_in == 1 && n_out == 1 &&
           (in[0].dtype == KILN_DTYPE_INT32 || in[0].dtype == KILN_DTYPE_INT64) &&
           out[0].dtype == KILN_DTYPE_FLOAT;
}

const kb_kernel kb_cpu_tfidf[] = {
    {"TfIdfVectorizer", "", "ref", tf_supports, tf_init, tf_fini, NULL, NULL, tf_run},
};
const size_t kb_cpu_tfidf_count = KN_ARRAY_LEN(kb_cpu_tfidf);
