/* k_fast_dnnl.c - the oneDNN plumbing of the fast CPU tactics: engine,
 * activation post-ops, per-node plans of primitives built in prepare and a
 * run that only binds pointers and executes them. */
#ifdef KILN_HAVE_DNNL
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/k_fast.h"
#include "backends/cpu/k_vec.h"

kiln_status kf_check(const kn_node *n, dnnl_status_t s, const char *what) {
    if (s == dnnl_success)
        return KILN_OK;
    kiln_status st = s == dnnl_out_of_memory  ? KILN_ERR_OUT_OF_MEMORY
                     : s == dnnl_unimplemented ? KILN_ERR_UNSUPPORTED
                                               : KILN_ERR_RUNTIME;
    if (n)
        return kn_node_error(n, st, "oneDNN: %s failed (status %d)", what, (int)s);
    return kn_error(st, "oneDNN: %s failed (status %d)", what, (int)s);
}

/* The engine is created once and never changes afterwards; oneDNN engines
 * are safe to share between threads. */
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine_obj;
static dnnl_status_t engine_status;

/* oneDNN's Debian build threads through libgomp (DNNL_CPU_RUNTIME OMP, no
 * threadpool interop), which reads its wait policy once, in its
 * initializer: with neither variable set, its idle threads spin for
 * milliseconds on cores other work needs (kiln's own kernels use kiln's
 * pool, src/core/pool.c). libkiln_omp_wait.so, listed after libgomp in
 * libkiln.so's DT_NEEDED, sets GOMP_SPINCOUNT=1000 before libgomp's
 * initializer runs (src/core/omp_wait); so finding neither variable here
 * means the shim did not run (a build or copy without it), and the
 * embedding program is told once, when oneDNN is first used. */
static void engine_make(void) {
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT"))
        kn_log(KILN_LOG_WARNING,
               "oneDNN runs on libgomp, whose idle threads spin for milliseconds by default, and "
               "libkiln_omp_wait.so did not bound it: on a machine shared with other work set "
               "GOMP_SPINCOUNT=1000 (or OMP_WAIT_POLICY=passive) in the environment before the "
               "program starts");
    engine_status = dnnl_engine_create(&engine_obj, dnnl_cpu, 0);
}

kiln_status kf_engine(const kn_node *n, dnnl_engine_t *out) {
    pthread_once(&engine_once, engine_make);
    KN_TRY(kf_check(n, engine_status, "creating the CPU engine"));
    *out = engine_obj;
    return KILN_OK;
}

kb_act kf_act_from_node(const kn_node *n, const char *alpha_name, const char *beta_name,
                        float *alpha, float *beta) {
    kb_act a = kb_act_parse(kn_attr_string(n, "activation", ""));
    float da = 0.f, db = 0.f;
    switch (a) {
    case KB_ACT_LEAKY_RELU: da = 0.01f; break;
    case KB_ACT_HARD_SIGMOID: da = 0.2f; db = 0.5f; break;
    case KB_ACT_ELU: da = 1.f; break;
    case KB_ACT_CLIP: da = -INFINITY; db = INFINITY; break;
    default: break;
    }
    *alpha = kn_attr_float(n, alpha_name, da);
    *beta = kn_attr_float(n, beta_name, db);
    return a;
}

dnnl_status_t kf_append_act(dnnl_post_ops_t po, kb_act a, float alpha, float beta) {
    switch (a) {
    case KB_ACT_NONE: return dnnl_success;
    case KB_ACT_RELU: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0.f, 0.f);
    case KB_ACT_LEAKY_RELU:
        return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, alpha, 0.f);
    case KB_ACT_SIGMOID:
        return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_logistic, 0.f, 0.f);
    case KB_ACT_TANH: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_tanh, 0.f, 0.f);
    case KB_ACT_CLIP:
        return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_clip_v2, alpha, beta);
    case KB_ACT_HARD_SIGMOID: { /* clip(alpha*x + beta, 0, 1) */
        dnnl_status_t s = dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_linear, alpha, beta);
        if (s != dnnl_success)
            return s;
        return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_clip_v2, 0.f, 1.f);
    }
    case KB_ACT_HARD_SWISH:
        return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_hardswish, 0.f, 0.f);
    case KB_ACT_GELU: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_gelu_erf, 0.f, 0.f);
    case KB_ACT_GELU_TANH:
        return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_gelu_tanh, 0.f, 0.f);
    case KB_ACT_SILU: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_swish, 1.f, 0.f);
    case KB_ACT_ELU: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_elu, alpha, 0.f);
    case KB_ACT_SOFTPLUS:
        return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_soft_relu, 0.f, 0.f);
    case KB_ACT_SWISH: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_swish, alpha, 0.f);
    case KB_ACT_INVALID: break;
    }
    return dnnl_invalid_arguments;
}

kiln_status kf_inst_new(const kn_node *n, kf_inst **out) {
    dnnl_engine_t eng;
    KN_TRY(kf_engine(n, &eng));
    kf_inst *in = kn_calloc(1, sizeof *in);
    if (!in)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = kf_check(n, dnnl_stream_create(&in->stream, eng, dnnl_stream_default_flags),
                              "creating a stream");
    if (st != KILN_OK) {
        kn_free(in);
        return st;
    }
    /* oneDNN sizes its work split for the threads current at creation; a
     * run must use the same count (see kf_run) */
    in->nthr = omp_get_max_threads();
    *out = in;
    return KILN_OK;
}

void kf_inst_free(void *p) {
    kf_inst *in = p;
    if (!in)
        return;
    for (int i = 0; i < in->n_prim; i++)
        dnnl_primitive_destroy(in->prim[i].p);
    for (int i = 0; i < in->n_mem; i++)
        dnnl_memory_destroy(in->mem[i].m);
    for (int i = 0; i < in->n_owned; i++)
        kn_aligned_free(in->owned[i]);
    if (in->stream)
        dnnl_stream_destroy(in->stream);
    kn_free(in);
}

size_t kf_ws_reserve(kf_inst *in, size_t bytes) {
    size_t off = in->ws;
    in->ws += (bytes + 63u) & ~(size_t)63u;
    return off;
}

kiln_status kf_mem(const kn_node *n, kf_inst *in, const dnnl_memory_desc_t *md, kf_where where,
                   int index, size_t offset, dnnl_memory_t *out) {
    dnnl_engine_t eng;
    KN_TRY(kf_engine(n, &eng));
    if (in->n_mem == KF_MAX_MEM)
        return kn_node_error(n, KILN_ERR_INTERNAL, "too many oneDNN memories");
    dnnl_memory_t m;
    KF_TRY(n, dnnl_memory_create(&m, md, eng, DNNL_MEMORY_NONE));
    in->mem[in->n_mem].m = m;
    in->mem[in->n_mem].where = where;
    in->mem[in->n_mem].index = index;
    in->mem[in->n_mem].offset = offset;
    in->n_mem++;
    *out = m;
    return KILN_OK;
}

kiln_status kf_prim_add(const kn_node *n, kf_inst *in, dnnl_primitive_desc_t pd, kf_prim **out) {
    kf_prim *list = in->prim;
    int *count = &in->n_prim;
    if (*count == KF_MAX_PRIM) {
        dnnl_primitive_desc_destroy(pd);
        return kn_node_error(n, KILN_ERR_INTERNAL, "too many oneDNN primitives");
    }
    kf_prim *p = &list[*count];
    memset(p, 0, sizeof *p);
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t ss = smd ? dnnl_memory_desc_get_size(smd) : 0;
    dnnl_memory_t sm = NULL;
    kiln_status st = KILN_OK;
    if (ss)
        st = kf_mem(n, in, smd, KF_WS, 0, kf_ws_reserve(in, ss), &sm);
    if (st == KILN_OK)
        st = kf_check(n, dnnl_primitive_create(&p->p, pd), "creating a primitive");
    dnnl_primitive_desc_destroy(pd);
    KN_TRY(st);
    (*count)++;
    if (sm)
        kf_prim_arg(p, DNNL_ARG_SCRATCHPAD, sm);
    *out = p;
    return KILN_OK;
}

void kf_prim_arg(kf_prim *p, int arg, dnnl_memory_t m) {
    if (p->nargs < KF_MAX_ARGS)
        p->args[p->nargs++] = (dnnl_exec_arg_t){arg, m};
}

kiln_status kf_attr(const kn_node *n, dnnl_post_ops_t po, dnnl_primitive_attr_t *out) {
    dnnl_primitive_attr_t a;
    KF_TRY(n, dnnl_primitive_attr_create(&a));
    kiln_status st = kf_check(n, dnnl_primitive_attr_set_scratchpad_mode(a, dnnl_scratchpad_mode_user),
                              "setting the scratchpad mode");
    if (st == KILN_OK && po)
        st = kf_check(n, dnnl_primitive_attr_set_post_ops(a, po), "setting post-ops");
    if (st != KILN_OK) {
        dnnl_primitive_attr_destroy(a);
        return st;
    }
    *out = a;
    return KILN_OK;
}

kiln_status kf_make_pd(const kn_node *n, const void *desc, dnnl_post_ops_t po, const char *what,
                       dnnl_primitive_desc_t *pd) {
    dnnl_primitive_attr_t attr = NULL;
    kiln_status st = kf_attr(n, po, &attr);
    if (po)
        dnnl_post_ops_destroy(po);
    KN_TRY(st);
    dnnl_engine_t eng;
    st = kf_engine(n, &eng);
    if (st == KILN_OK)
        st = kf_check(n, dnnl_primitive_desc_create(pd, desc, attr, eng, NULL), what);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

kiln_status kf_reorder_add(const kn_node *n, kf_inst *in, const dnnl_memory_desc_t *src_md,
                           dnnl_memory_t src, const dnnl_memory_desc_t *dst_md, dnnl_memory_t dst) {
    dnnl_engine_t eng;
    KN_TRY(kf_engine(n, &eng));
    dnnl_primitive_attr_t attr;
    KN_TRY(kf_attr(n, NULL, &attr));
    dnnl_primitive_desc_t pd;
    dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, src_md, eng, dst_md, eng, attr);
    dnnl_primitive_attr_destroy(attr);
    KN_TRY(kf_check(n, s, "creating a reorder"));
    kf_prim *p;
    KN_TRY(kf_prim_add(n, in, pd, &p));
    kf_prim_arg(p, DNNL_ARG_FROM, src);
    kf_prim_arg(p, DNNL_ARG_TO, dst);
    return KILN_OK;
}

kiln_status kf_pack(const kn_node *n, kf_inst *in, const dnnl_memory_desc_t *user_md, int index,
                    const void *host, const dnnl_memory_desc_t *md, dnnl_memory_t *out) {
    dnnl_engine_t eng;
    KN_TRY(kf_engine(n, &eng));
    size_t bytes = dnnl_memory_desc_get_size(md);
    if (!host) { /* not known before the run: reorder on every run */
        dnnl_memory_t src, dst;
        KN_TRY(kf_mem(n, in, user_md, KF_IN, index, 0, &src));
        KN_TRY(kf_mem(n, in, md, KF_WS, 0, kf_ws_reserve(in, bytes), &dst));
        KN_TRY(kf_reorder_add(n, in, user_md, src, md, dst));
        *out = dst;
        return KILN_OK;
    }
    if (in->n_owned == (int)KN_ARRAY_LEN(in->owned) || in->n_mem == KF_MAX_MEM)
        return kn_node_error(n, KILN_ERR_INTERNAL, "too many packed weights");
    void *buf = kn_aligned_alloc(bytes ? bytes : 64);
    if (!buf)
        return KILN_ERR_OUT_OF_MEMORY;
    in->owned[in->n_owned++] = buf;
    dnnl_memory_t m;
    KF_TRY(n, dnnl_memory_create(&m, md, eng, buf));
    in->mem[in->n_mem].m = m;
    in->mem[in->n_mem].where = KF_OWNED;
    in->mem[in->n_mem].index = 0;
    in->mem[in->n_mem].offset = 0;
    in->n_mem++;
    *out = m;
    const void *data = host;
    if (dnnl_memory_desc_equal(user_md, md)) {
        memcpy(buf, data, bytes);
        return KILN_OK;
    }
    /* a one-off reorder with its own (library-managed) scratchpad */
    dnnl_memory_t src = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    kiln_status st = kf_check(n, dnnl_memory_create(&src, user_md, eng, (void *)data),
                              "wrapping the weights");
    if (st == KILN_OK)
        st = kf_check(n, dnnl_reorder_primitive_desc_create(&pd, user_md, eng, md, eng, NULL),
                      "creating the weight reorder");
    if (st == KILN_OK)
        st = kf_check(n, dnnl_primitive_create(&p, pd), "creating the weight reorder");
    if (st == KILN_OK) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, m}};
        st = kf_check(n, dnnl_primitive_execute(p, in->stream, 2, args), "reordering weights");
        if (st == KILN_OK)
            st = kf_check(n, dnnl_stream_wait(in->stream), "reordering weights");
    }
    if (p)
        dnnl_primitive_destroy(p);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (src)
        dnnl_memory_destroy(src);
    return st;
}

static void broadcast2d(const kf_inst *in, const float *c, float *y) {
    for (int64_t i = 0; i < in->pm; i++) {
        const float *row = c + (in->cm > 1 ? i * in->cn : 0);
        float *yr = y + i * in->pn;
        if (in->cn > 1)
            memcpy(yr, row, (size_t)in->pn * sizeof(float));
        else
            for (int64_t j = 0; j < in->pn; j++)
                yr[j] = row[0];
    }
}

bool kf_defer_act(kb_act act) {
    return (act == KB_ACT_GELU || act == KB_ACT_GELU_TANH) && kv_have_avx2();
}

typedef struct post_ctx {
    float *y;
    kb_act act;
    int64_t n;
} post_ctx;

/* Blocks [lo, hi) of 1024 floats of the deferred activation. */
static void post_rows(void *vc, int64_t lo, int64_t hi, int tid) {
    const post_ctx *c = vc;
    (void)tid;
    int64_t a = lo * 1024, b = hi * 1024 < c->n ? hi * 1024 : c->n;
    if (b > a)
        kv_gelu(c->y + a, (size_t)(b - a), c->act == KB_ACT_GELU_TANH);
}

kiln_status kf_run(const kb_run *r) {
    kf_inst *in = r->inst;
    if (!in)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "not prepared");
    if (r->workspace_size < in->ws)
        return kn_node_error(r->node, KILN_ERR_INTERNAL, "workspace too small");
    for (int i = 0; i < in->n_mem; i++) {
        void *h;
        switch (in->mem[i].where) {
        case KF_IN: h = r->in[in->mem[i].index].data; break;
        case KF_OUT: h = r->out[in->mem[i].index].data; break;
        case KF_WS: h = (uint8_t *)r->workspace + in->mem[i].offset; break;
        default: continue;
        }
        KF_TRY(r->node, dnnl_memory_set_data_handle(in->mem[i].m, h));
    }
    if (in->prefill == KF_PREFILL_BROADCAST2D)
        broadcast2d(in, r->in[in->prefill_in].data, r->out[0].data);
    /* oneDNN's OpenMP build splits work for the thread count current when a
     * primitive was created; running under another count leaves work undone
     * in some kernels. So a run uses the prepare-time count: r->threads takes
     * effect when the caller's OpenMP thread count was set to it around
     * prepare. */
    int prev = omp_get_max_threads();
    if (prev != in->nthr)
        omp_set_num_threads(in->nthr);
    kiln_status st = KILN_OK;
    for (int i = 0; i < in->n_prim && st == KILN_OK; i++)
        st = kf_check(r->node,
                      dnnl_primitive_execute(in->prim[i].p, in->stream, in->prim[i].nargs,
                                             in->prim[i].args),
                      "executing");
    if (st == KILN_OK)
        st = kf_check(r->node, dnnl_stream_wait(in->stream), "waiting for the stream");
    if (prev != in->nthr)
        omp_set_num_threads(prev);
    if (st == KILN_OK && in->post_act != KB_ACT_NONE) {
        post_ctx c = {r->out[0].data, in->post_act, in->post_n};
        int nth = r->threads > 1 && in->post_n > 32768 ? r->threads : 1;
        kn_parallel_for(nth, (in->post_n + 1023) / 1024, 0, post_rows, &c);
    }
    return st;
}
#endif /* KILN_HAVE_DNNL */
