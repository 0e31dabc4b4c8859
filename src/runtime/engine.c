/* engine.c - the public runtime: loading plans into immutable engines,
 * execution contexts (shapes, addresses, profiles, profiling), layer info. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "exec.h"
#include "graph/seq.h"
#include "kiln/kiln_runtime.h"
#include "plan/plan.h"
#include "plugin/plugin.h"

struct kiln_engine {
    const kb_backend *be;
    kn_net *net;
    kp_meta meta;
    kx_program prog;
    int n_io;
    int *io;              /* tensor indices: inputs then outputs */
};

struct kiln_context {
    kiln_engine *e;
    kx_ctx c;
    int profile;
    kn_seq **inseq;       /* per graph input: the list given (sequence/optional inputs) */
    void **inhandle;      /* per graph input: the 8 handle bytes bound to it */
};

/* A private copy of a plan file, shared by the engine's borrowed weights.
 * Not a mapping: a mapped file that is rewritten changes the weights under a
 * running engine, and one that is truncated kills it (SIGBUS). */
typedef struct file_blob {
    kn_blob base;
    uint8_t *data;
} file_blob;

static void file_blob_release(kn_blob *b) {
    file_blob *f = (file_blob *)b;
    kn_aligned_free(f->data);
    kn_free(f);
}

KILN_API kiln_status kiln_plan_read_info(const void *data, size_t size, kiln_plan_info *info) {
    if (!data || !info)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_plan_read_info: NULL argument");
    return kp_read_info(data, size, info);
}

KILN_API kiln_status kiln_backend_describe(const char *backend, char *target, size_t target_cap,
                                          char *libraries, size_t libraries_cap) {
    if (!backend || !target || !libraries || !target_cap || !libraries_cap)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_backend_describe: NULL argument");
    const kb_backend *be = kb_backend_get(backend);
    if (!be)
        return kn_error(KILN_ERR_DEVICE, "backend '%s' is not available in this build of kiln",
                        backend);
    return be->describe(target, target_cap, libraries, libraries_cap);
}

/* The checks that bind a plan to this process: backend, target, version. */
static kiln_status check_target(const kiln_plan_info *info, const kb_backend **be_out) {
    char target[64], libs[128];
    const kb_backend *be = kb_backend_get(info->backend);
    if (!be)
        return kn_error(KILN_ERR_VERSION,
                        "the plan was built for the '%s' backend, which this build of kiln cannot "
                        "run",
                        info->backend);
    KN_TRY(be->describe(target, sizeof target, libs, sizeof libs));
    *be_out = be;
    if (strcmp(info->target, target) != 0)
        return kn_error(KILN_ERR_VERSION,
                        "the plan was built for target '%s' but this machine is '%s': rebuild the "
                        "plan here",
                        info->target, target);
    if (info->kiln_version / 100 != KILN_VERSION_NUMBER / 100)
        return kn_error(KILN_ERR_VERSION,
                        "the plan was built by kiln %u.%u.%u; this is kiln %s: rebuild the plan",
                        info->kiln_version / 10000, info->kiln_version / 100 % 100,
                        info->kiln_version % 100, kiln_version_string());
    if (strcmp(info->libraries, libs) != 0)
        kn_log(KILN_LOG_WARNING, "plan built with libraries '%s'; this process has '%s'",
               info->libraries, libs);
    return KILN_OK;
}

/* Every field of every layer the plan carries, against what the layer can
 * take, before any kernel or library sees it: the plan's checksum proves
 * only that the bytes are as written, not that they were written by a
 * builder, so the network is put through the builder's own checks again:
 * shape inference (each op's attribute and shape rules, every size held
 * to what kiln plans) at each profile's min, opt and max shapes, and each
 * layer's tactic against its kernel's supports() at the opt shapes of
 * profile 0, where the builder chose it. */
static kiln_status engine_check_layers(const kiln_engine *e) {
    static const char *const point[] = {"min", "opt", "max"};
    int n_points = e->meta.n_profiles > 0 ? 3 * e->meta.n_profiles : 1; /* no inputs: one */
    for (int k = 0; k < n_points; k++) {
        int p = k / 3, w = k % 3;
        const kp_profile *pr = e->meta.n_profiles > 0 ? &e->meta.profiles[p] : NULL;
        const int64_t (*at[3])[KILN_MAX_DIMS] = {pr ? pr->min : NULL, pr ? pr->opt : NULL,
                                                 pr ? pr->max : NULL};
        kiln_status st = kx_program_check(&e->prog, pr ? pr->rank : NULL, at[w], k == 1 || !pr);
        if (st == KILN_ERR_OUT_OF_MEMORY)
            return st;
        if (st != KILN_OK)
            return kn_error_wrap(KILN_ERR_PLAN, "layer check at profile %d's %s shapes", p,
                                 point[w]);
    }
    return KILN_OK;
}

/* Order matters: nothing a plan carries is loaded or run until all of it is
 * validated. The header binds it to this process, kp_read checks the format
 * version, the section table, the checksum and every section, and only then
 * are its plugin layers bound (the first point where a library the plan
 * embeds may be loaded) and its kernels made. A plan that fails after that
 * leaves none of the libraries loaded for it registered. */
static kiln_status engine_from(const void *data, size_t size, kn_blob *owner, kiln_engine **out) {
    kiln_plan_info info;
    const kb_backend *be = NULL;
    KN_TRY(kp_read_info(data, size, &info));
    KN_TRY(check_target(&info, &be));
    kiln_engine *e = kn_calloc(1, sizeof *e);
    if (!e)
        return KILN_ERR_OUT_OF_MEMORY;
    e->be = be;
    kiln_status st = kp_read(data, size, owner, &e->net, &e->meta);
    if (st != KILN_OK) {
        kn_free(e);
        return st;
    }
    kpl_loaded loaded = {0};
    bool plugins = kpl_net_has_plugins(e->net);
    if (plugins)
        kpl_plan_lock(); /* held until the kernels hold their libraries */
    st = kpl_plan_bind(data, size, e->net, &loaded); /* the records are read even without layers */
    e->n_io = e->net->n_inputs + e->net->n_outputs;
    e->io = st == KILN_OK ? kn_calloc((size_t)e->n_io + 1, sizeof *e->io) : NULL;
    if (st == KILN_OK && !e->io)
        st = KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; st == KILN_OK && i < e->net->n_inputs; i++)
        e->io[i] = e->net->inputs[i];
    for (int i = 0; st == KILN_OK && i < e->net->n_outputs; i++)
        e->io[e->net->n_inputs + i] = e->net->outputs[i];
    if (st == KILN_OK)
        st = kx_program_init_on(&e->prog, e->net, 0, be);
    if (st == KILN_OK && (st = engine_check_layers(e)) != KILN_OK)
        kx_program_fini(&e->prog);
    if (st != KILN_OK) {
        kp_meta_free(&e->meta);
        kn_net_free(e->net);
        kn_free(e->io);
        kn_free(e);
    }
    kpl_loaded_release(&loaded, st == KILN_OK);
    if (plugins)
        kpl_plan_unlock();
    if (st == KILN_OK)
        *out = e;
    return st;
}

KILN_API kiln_status kiln_engine_load(const void *data, size_t size, kiln_engine **out) {
    if (!data || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_load: NULL argument");
    kiln_status st = engine_from(data, size, NULL, out);
    return st == KILN_OK ? st : kn_error_wrap(st, "cannot load plan");
}

KILN_API kiln_status kiln_engine_load_file(const char *path, kiln_engine **out) {
    if (!path || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_load_file: NULL argument");
    file_blob *fb = kn_calloc(1, sizeof *fb);
    if (!fb)
        return KILN_ERR_OUT_OF_MEMORY;
    size_t size = 0;
    kiln_status st = kn_file_read_private(path, &fb->data, &size);
    if (st != KILN_OK) {
        kn_free(fb);
        return kn_error_wrap(st, "cannot load plan '%s'", path);
    }
    fb->base.refs = 1;
    fb->base.release = file_blob_release;
    st = engine_from(fb->data, size, &fb->base, out);
    kn_blob_unref(&fb->base); /* the engine holds its own references */
    return st == KILN_OK ? st : kn_error_wrap(st, "cannot load plan '%s'", path);
}

KILN_API void kiln_engine_destroy(kiln_engine *e) {
    if (!e)
        return;
    kx_program_fini(&e->prog);
    kp_meta_free(&e->meta);
    kn_net_free(e->net);
    kn_free(e->io);
    kn_free(e);
}

KILN_API int kiln_engine_num_io_tensors(const kiln_engine *e) { return e ? e->n_io : 0; }

KILN_API const char *kiln_engine_io_tensor_name(const kiln_engine *e, int index) {
    return e && index >= 0 && index < e->n_io ? e->net->tensors[e->io[index]].name : NULL;
}

/* Position of an I/O tensor in e->io, or -1. */
static int io_index(const kiln_engine *e, const char *name) {
    if (!e || !name)
        return -1;
    for (int i = 0; i < e->n_io; i++)
        if (strcmp(e->net->tensors[e->io[i]].name, name) == 0)
            return i;
    return -1;
}

KILN_API kiln_io_mode kiln_engine_tensor_io_mode(const kiln_engine *e, const char *name) {
    int i = io_index(e, name);
    if (i < 0)
        return KILN_IO_NONE;
    return i < e->net->n_inputs ? KILN_IO_INPUT : KILN_IO_OUTPUT;
}

KILN_API kiln_dtype kiln_engine_tensor_dtype(const kiln_engine *e, const char *name) {
    int i = io_index(e, name);
    if (i < 0)
        return KILN_DTYPE_UNDEFINED;
    kiln_dtype t = e->net->tensors[e->io[i]].dtype;
    return kn_dtype_is_handle((int)t) ? kn_handle_elem(t) : t;
}

KILN_API int kiln_engine_tensor_shape(const kiln_engine *e, const char *name, int64_t *dims) {
    int i = io_index(e, name);
    if (i < 0)
        return -1;
    const kn_tensor *t = &e->net->tensors[e->io[i]];
    if (dims && t->rank > 0)
        memcpy(dims, t->dims, (size_t)t->rank * sizeof(int64_t));
    return t->rank;
}

KILN_API int kiln_engine_num_profiles(const kiln_engine *e) { return e ? e->meta.n_profiles : 0; }

KILN_API kiln_status kiln_engine_profile_shape(const kiln_engine *e, int profile, const char *input,
                                               int *rank, int64_t *min, int64_t *opt,
                                               int64_t *max) {
    if (!e)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (profile < 0 || profile >= e->meta.n_profiles)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "profile %d does not exist (the plan has %d)",
                        profile, e->meta.n_profiles);
    int i = io_index(e, input);
    if (i < 0 || i >= e->net->n_inputs)
        return kn_error(KILN_ERR_NOT_FOUND, "'%s' is not an input of the engine",
                        input ? input : "(null)");
    const kp_profile *p = &e->meta.profiles[profile];
    size_t n = (size_t)p->rank[i] * sizeof(int64_t);
    if (rank)
        *rank = p->rank[i];
    if (min && n)
        memcpy(min, p->min[i], n);
    if (opt && n)
        memcpy(opt, p->opt[i], n);
    if (max && n)
        memcpy(max, p->max[i], n);
    return KILN_OK;
}

KILN_API int kiln_engine_num_layers(const kiln_engine *e) { return e ? e->net->n_nodes : 0; }

KILN_API const char *kiln_engine_layer_name(const kiln_engine *e, int layer) {
    return e && layer >= 0 && layer < e->net->n_nodes ? e->net->nodes[layer].name : NULL;
}

KILN_API const char *kiln_engine_layer_op(const kiln_engine *e, int layer) {
    return e && layer >= 0 && layer < e->net->n_nodes ? e->net->nodes[layer].op_type : NULL;
}

KILN_API const char *kiln_engine_layer_tactic(const kiln_engine *e, int layer) {
    if (!e || layer < 0 || layer >= e->net->n_nodes)
        return NULL;
    if (e->prog.steps[layer].host)
        return "host";
    if (e->prog.steps[layer].alias)
        return "alias"; /* shares its input's memory; nothing runs */
    if (e->prog.steps[layer].on_host) /* "host:<cpu tactic>": placed on the host */
        return e->net->nodes[e->prog.steps[layer].node].tactic;
    return e->prog.steps[layer].k->tactic;
}

static void json_tensor(kn_buf *b, const kiln_engine *e, int t) {
    const kn_tensor *tt = &e->net->tensors[t];
    kn_buf_printf(b, "{\"name\":");
    kn_buf_json_string(b, tt->name);
    kn_buf_printf(b, ",\"dtype\":\"%s\",\"shape\":[", kiln_dtype_name(tt->dtype));
    for (int d = 0; d < tt->rank; d++)
        kn_buf_printf(b, "%s%lld", d ? "," : "", (long long)tt->dims[d]);
    kn_buf_printf(b, "],\"kind\":\"%s\"}",
                  (tt->flags & KN_T_CONST)    ? "constant"
                  : (tt->flags & KN_T_INPUT)  ? "input"
                  : (tt->flags & KN_T_OUTPUT) ? "output"
                                              : "activation");
}

KILN_API kiln_status kiln_engine_layer_info_json(const kiln_engine *e, char **json) {
    if (!e || !json)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_layer_info_json: NULL argument");
    kn_buf b = {0};
    kn_buf_printf(&b, "{\"backend\":");
    kn_buf_json_string(&b, e->meta.backend);
    kn_buf_printf(&b, ",\"target\":");
    kn_buf_json_string(&b, e->meta.target);
    kn_buf_printf(&b, ",\"libraries\":");
    kn_buf_json_string(&b, e->meta.libraries);
    kn_buf_printf(&b,
                  ",\"memory\":{\"activation_arena_bytes\":%llu,\"activation_sum_bytes\":%llu,"
                  "\"workspace_bytes\":%llu},\"build_ms\":%.1f,\"layers\":[",
                  (unsigned long long)e->meta.arena_bytes,
                  (unsigned long long)e->meta.activation_sum_bytes,
                  (unsigned long long)e->meta.workspace_bytes, e->meta.build_ms);
    for (int i = 0; i < e->net->n_nodes; i++) {
        const kn_node *n = &e->net->nodes[i];
        kn_buf_printf(&b, "%s{\"name\":", i ? "," : "");
        kn_buf_json_string(&b, n->name);
        kn_buf_printf(&b, ",\"op\":");
        kn_buf_json_string(&b, n->op_type);
        kn_buf_printf(&b, ",\"domain\":");
        kn_buf_json_string(&b, n->domain);
        kn_buf_printf(&b, ",\"tactic\":");
        kn_buf_json_string(&b, kiln_engine_layer_tactic(e, i));
        kn_buf_printf(&b, ",\"precision\":");
        int o = n->n_out > 0 ? n->out[0] : -1;
        kn_buf_json_string(&b, o >= 0 ? kiln_dtype_name(e->net->tensors[o].dtype) : "");
        const char *why = kn_attr_string(n, "kiln_precision", NULL);
        if (why) { /* the builder's precision decision (pass_precision.c) */
            kn_buf_printf(&b, ",\"precision_choice\":{\"why\":");
            kn_buf_json_string(&b, why);
            size_t nms = 0;
            const float *ms = kn_attr_floats(n, "kiln_precision_ms", &nms);
            if (ms && nms == 3)
                kn_buf_printf(&b, ",\"ms\":{\"float\":%.6g,\"float16\":%.6g,\"bfloat16\":%.6g}",
                              (double)ms[0], (double)ms[1], (double)ms[2]);
            kn_buf_printf(&b, "}");
        }
        size_t n32 = 0;
        const float *t32 = kn_attr_floats(n, "kiln_precision_tf32_ms", &n32);
        if (t32 && n32 == 2)
            kn_buf_printf(&b, ",\"tf32_choice\":{\"why\":\"timed\",\"ms\":{\"float\":%.6g,"
                          "\"tf32\":%.6g},\"allow_tf32\":%d}", (double)t32[0], (double)t32[1],
                          (int)kn_attr_int(n, "allow_tf32", 0));
        const char *qinfo = kn_attr_string(n, "quant_info", NULL);
        if (qinfo) { /* quantized layers (builder/pass_qdq.c): precision and scales */
            kn_buf_printf(&b, ",\"quant\":");
            kn_buf_json_string(&b, qinfo);
        }
        kn_buf_printf(&b, ",\"inputs\":[");
        int first = 1;
        for (int j = 0; j < n->n_in; j++) {
            if (n->in[j] < 0)
                continue;
            kn_buf_printf(&b, "%s", first ? "" : ",");
            json_tensor(&b, e, n->in[j]);
            first = 0;
        }
        kn_buf_printf(&b, "],\"outputs\":[");
        first = 1;
        for (int j = 0; j < n->n_out; j++) {
            if (n->out[j] < 0)
                continue;
            kn_buf_printf(&b, "%s", first ? "" : ",");
            json_tensor(&b, e, n->out[j]);
            first = 0;
        }
        kn_buf_printf(&b, "]}");
    }
    kn_buf_printf(&b, "]}");
    kn_buf_append(&b, "", 1);
    if (b.failed) {
        kn_buf_free(&b);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing layer info");
    }
    *json = (char *)b.data;
    return KILN_OK;
}

/* ---------------- contexts ---------------- */

KILN_API kiln_status kiln_context_create(kiln_engine *e, kiln_context **out) {
    if (!e || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_create: NULL argument");
    kiln_context *c = kn_calloc(1, sizeof *c);
    if (!c)
        return KILN_ERR_OUT_OF_MEMORY;
    c->e = e;
    kiln_status st = kx_ctx_init(&c->c, &e->prog);
    if (st != KILN_OK) {
        kn_free(c);
        return st;
    }
    /* inputs whose shapes are fixed by the only profile need no call */
    if (e->meta.n_profiles == 1) {
        const kp_profile *p = &e->meta.profiles[0];
        for (int k = 0; k < e->net->n_inputs; k++)
            if (p->rank[k] == 0 ||
                memcmp(p->min[k], p->max[k], (size_t)p->rank[k] * sizeof(int64_t)) == 0)
                (void)kx_ctx_set_input_shape(&c->c, k, p->rank[k], p->min[k]);
    }
    *out = c;
    return KILN_OK;
}

KILN_API void kiln_context_destroy(kiln_context *c) {
    if (!c)
        return;
    kx_ctx_fini(&c->c);
    for (int k = 0; c->inseq && k < c->e->net->n_inputs; k++) {
        kn_seq_unref(c->inseq[k]);
        kn_free(c->inhandle[k]);
    }
    kn_free(c->inseq);
    kn_free(c->inhandle);
    kn_free(c);
}

KILN_API kiln_status kiln_context_set_profile(kiln_context *c, int profile) {
    if (!c)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "context is NULL");
    if (profile < 0 || profile >= c->e->meta.n_profiles)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "profile %d does not exist (the plan has %d)",
                        profile, c->e->meta.n_profiles);
    if (profile != c->profile) { /* shapes set for another profile no longer apply */
        for (int k = 0; k < c->e->net->n_inputs; k++)
            c->c.in_rank[k] = -1;
        c->c.shapes_ok = false;
        c->c.prepared = false;
    }
    c->profile = profile;
    return KILN_OK;
}

KILN_API kiln_status kiln_context_set_input_shape(kiln_context *c, const char *name, int rank,
                                                  const int64_t *dims) {
    if (!c || !name || (rank > 0 && !dims))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_input_shape: NULL argument");
    const kiln_engine *e = c->e;
    int i = io_index(e, name);
    if (i < 0 || i >= e->net->n_inputs)
        return kn_error(KILN_ERR_NOT_FOUND, "'%s' is not an input of the engine", name);
    if (c->profile >= e->meta.n_profiles)
        return kn_error(KILN_ERR_PLAN, "the plan has no optimization profile %d", c->profile);
    const kp_profile *p = &e->meta.profiles[c->profile];
    if (rank != p->rank[i])
        return kn_error(KILN_ERR_SHAPE, "input '%s' has rank %d; a shape of rank %d was given", name,
                        p->rank[i], rank);
    for (int d = 0; d < rank; d++) {
        if (dims[d] < p->min[i][d] || dims[d] > p->max[i][d]) {
            char got[160], lo[160], hi[160];
            kn_shape_str(rank, dims, got, sizeof got);
            kn_shape_str(rank, p->min[i], lo, sizeof lo);
            kn_shape_str(rank, p->max[i], hi, sizeof hi);
            return kn_error(KILN_ERR_SHAPE,
                            "input '%s': shape %s is outside optimization profile %d (min %s, "
                            "max %s) at dimension %d",
                            name, got, c->profile, lo, hi, d);
        }
    }
    return kx_ctx_set_input_shape(&c->c, i, rank, dims);
}

KILN_API int kiln_context_tensor_shape(kiln_context *c, const char *name, int64_t *dims) {
    if (!c || !name) {
        kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_tensor_shape: NULL argument");
        return -1;
    }
    int i = io_index(c->e, name);
    if (i < 0) {
        kn_error(KILN_ERR_NOT_FOUND, "'%s' is not an input or output of the engine", name);
        return -1;
    }
    if (!c->c.shapes_ok && kx_ctx_infer(&c->c) != KILN_OK)
        return -1;
    const kn_tinfo *t = &c->c.ti[c->e->io[i]];
    if (dims && t->rank > 0)
        memcpy(dims, t->dims, (size_t)t->rank * sizeof(int64_t));
    return t->rank;
}

KILN_API int kiln_context_output_shapes_exact(kiln_context *c) {
    if (!c) {
        kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_output_shapes_exact: NULL argument");
        return -1;
    }
    if (!c->c.shapes_ok && kx_ctx_infer(&c->c) != KILN_OK)
        return -1;
    /* a data-dependent shape changes what comes after it as well */
    return c->c.has_data_dependent ? 0 : 1;
}

KILN_API kiln_status kiln_context_set_tensor_address(kiln_context *c, const char *name,
                                                     void *data) {
    if (!c || !name)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_tensor_address: NULL argument");
    int i = io_index(c->e, name);
    if (i < 0)
        return kn_error(KILN_ERR_NOT_FOUND, "'%s' is not an input or output of the engine", name);
    if (i < c->e->net->n_inputs && kn_dtype_is_handle((int)c->e->net->tensors[c->e->io[i]].dtype))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "input '%s' is a %s: give it with kiln_context_set_sequence_input or "
                        "kiln_context_set_optional_none, not an address",
                        name, kiln_dtype_name(c->e->net->tensors[c->e->io[i]].dtype));
    const kb_backend *be = c->c.p->be;
    if (data && (c->c.p->net->tensors[c->e->io[i]].flags & KN_T_HOST) && be->is_device_ptr &&
        be->is_device_ptr(data))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "input '%s' is a shape tensor: its values are read on the host, so its "
                        "address must be host memory, not %s device memory "
                        "(kiln_engine_tensor_is_shape_input)", name, be->name);
    if (data && c->c.p->net->tensors[c->e->io[i]].dtype == KILN_DTYPE_STRING &&
        be->is_device_ptr && be->is_device_ptr(data))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "'%s' is a string tensor: strings are host pointers and stay on the "
                        "host on every backend, so its address must be host memory, not %s "
                        "device memory",
                        name, be->name);
    kx_ctx_bind(&c->c, c->e->io[i], data);
    return KILN_OK;
}

KILN_API int kiln_engine_tensor_is_shape_input(const kiln_engine *e, const char *name) {
    int i = e && name ? io_index(e, name) : -1;
    if (i < 0)
        return 0;
    int t = e->io[i];
    return (e->prog.net->tensors[t].flags & KN_T_INPUT) && (e->prog.net->tensors[t].flags & KN_T_HOST);
}

KILN_API void *kiln_context_tensor_address(kiln_context *c, const char *name) {
    int i = c ? io_index(c->e, name) : -1;
    if (i < 0)
        return NULL;
    int t = c->e->io[i];
    return c->c.user[t] ? c->c.user[t] : c->c.addr[t];
}

KILN_API kiln_status kiln_context_enqueue(kiln_context *c, void *stream) {
    if (!c)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "context is NULL");
    c->c.stream = stream; /* the CPU backend runs synchronously and ignores it */
    return kx_ctx_run(&c->c);
}

KILN_API void kiln_context_set_threads(kiln_context *c, int threads) {
    if (!c || threads < 0 || threads == c->c.threads)
        return;
    c->c.threads = threads;
    c->c.prepared = false; /* kernels made for another thread count */
}

KILN_API void kiln_context_set_graphs(kiln_context *c, int enabled) {
    if (!c)
        return;
    c->c.use_graphs = enabled != 0;
    if (!enabled)
        kx_ctx_drop_graph(&c->c);
}

KILN_API kiln_status kiln_context_synchronize(kiln_context *c, void *stream) {
    if (!c)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "context is NULL");
    return c->e->be->sync(stream);
}

KILN_API const char *kiln_engine_backend(const kiln_engine *e) { return e ? e->be->name : NULL; }

KILN_API kiln_status kiln_engine_alloc(const kiln_engine *e, size_t bytes, void **out) {
    if (!e || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_alloc: NULL argument");
    return e->be->alloc(bytes, out);
}

KILN_API void kiln_engine_free(const kiln_engine *e, void *p) {
    if (e && p)
        e->be->free(p);
}

KILN_API kiln_status kiln_engine_alloc_host(const kiln_engine *e, size_t bytes, void **out) {
    if (!e || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_alloc_host: NULL argument");
    if (e->be->host_alloc)
        return e->be->host_alloc(bytes, out);
    void *p = kn_aligned_alloc(bytes ? bytes : 64);
    if (!p)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "host buffer of %zu bytes", bytes);
    *out = p;
    return KILN_OK;
}

KILN_API void kiln_engine_free_host(const kiln_engine *e, void *p) {
    if (!e || !p)
        return;
    if (e->be->host_free)
        e->be->host_free(p);
    else
        kn_aligned_free(p);
}

static kb_copy_kind copy_kind(kiln_copy_direction dir) {
    return dir == KILN_COPY_TO_DEVICE ? KB_COPY_H2D
           : dir == KILN_COPY_TO_HOST ? KB_COPY_D2H
                                      : KB_COPY_D2D;
}

KILN_API kiln_status kiln_engine_copy(const kiln_engine *e, void *dst, const void *src,
                                      size_t bytes, kiln_copy_direction dir) {
    if (!e || (bytes && (!dst || !src)))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_copy: NULL argument");
    KN_TRY(e->be->copy(dst, src, bytes, copy_kind(dir), NULL));
    return e->be->sync(NULL);
}

/* ---- streams and events ---- */

struct kiln_event {
    const kb_backend *be;
    void *ev;        /* the backend's event; NULL: host time (CPU) */
    double host_ms;  /* CPU: the monotonic time when recorded */
    bool recorded;
};

KILN_API kiln_status kiln_engine_stream_create(const kiln_engine *e, void **stream) {
    if (!e || !stream)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_stream_create: NULL argument");
    *stream = NULL;
    return e->be->stream_create ? e->be->stream_create(stream) : KILN_OK;
}

KILN_API void kiln_engine_stream_destroy(const kiln_engine *e, void *stream) {
    if (e && stream && e->be->stream_destroy)
        e->be->stream_destroy(stream);
}

KILN_API kiln_status kiln_engine_copy_async(const kiln_engine *e, void *dst, const void *src,
                                            size_t bytes, kiln_copy_direction dir, void *stream) {
    if (!e || (bytes && (!dst || !src)))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_copy_async: NULL argument");
    if ((unsigned)dir > KILN_COPY_ON_DEVICE)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_copy_async: direction %d",
                        (int)dir);
    return e->be->copy(dst, src, bytes, copy_kind(dir), stream);
}

KILN_API kiln_status kiln_event_create(const kiln_engine *e, kiln_event **out) {
    if (!e || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_event_create: NULL argument");
    *out = NULL;
    kiln_event *ev = kn_calloc(1, sizeof *ev);
    if (!ev)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "an event");
    ev->be = e->be;
    if (e->be->event_create) {
        kiln_status st = e->be->event_create(&ev->ev);
        if (st != KILN_OK) {
            kn_free(ev);
            return st;
        }
    }
    *out = ev;
    return KILN_OK;
}

KILN_API void kiln_event_destroy(kiln_event *ev) {
    if (!ev)
        return;
    if (ev->ev)
        ev->be->event_destroy(ev->ev);
    kn_free(ev);
}

KILN_API kiln_status kiln_event_record(kiln_event *ev, void *stream) {
    if (!ev)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_event_record: event is NULL");
    if (ev->ev)
        KN_TRY(ev->be->event_record(ev->ev, stream));
    else
        ev->host_ms = kn_now_ms();
    ev->recorded = true;
    return KILN_OK;
}

KILN_API int kiln_event_done(kiln_event *ev) {
    if (!ev || !ev->recorded) {
        kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_event_done: %s",
                 ev ? "the event was never recorded" : "event is NULL");
        return -1;
    }
    bool done = true;
    if (ev->ev && ev->be->event_query(ev->ev, &done) != KILN_OK)
        return -1;
    return done ? 1 : 0;
}

KILN_API kiln_status kiln_event_synchronize(kiln_event *ev) {
    if (!ev || !ev->recorded)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_event_synchronize: %s",
                        ev ? "the event was never recorded" : "event is NULL");
    return ev->ev ? ev->be->event_sync(ev->ev) : KILN_OK;
}

KILN_API kiln_status kiln_event_elapsed_ms(const kiln_event *a, const kiln_event *b, double *ms) {
    if (!a || !b || !ms)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_event_elapsed_ms: NULL argument");
    if (!a->recorded || !b->recorded)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_event_elapsed_ms: an event was never recorded");
    if (a->be != b->be)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_event_elapsed_ms: events of two backends (%s, %s)", a->be->name,
                        b->be->name);
    if (!a->ev) {
        *ms = b->host_ms - a->host_ms;
        return KILN_OK;
    }
    float f = 0.f;
    KN_TRY(a->be->event_elapsed(a->ev, b->ev, &f));
    *ms = f;
    return KILN_OK;
}

KILN_API void kiln_context_set_profiling(kiln_context *c, int enabled) {
    if (c)
        c->c.profiling = enabled != 0;
}

KILN_API kiln_status kiln_context_layer_time(const kiln_context *c, int layer, double *total_ms,
                                             uint64_t *runs) {
    if (!c)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "context is NULL");
    if (layer < 0 || layer >= c->e->prog.n_steps)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "no layer %d", layer);
    if (total_ms)
        *total_ms = c->c.step_ms[layer];
    if (runs)
        *runs = c->c.runs;
    return KILN_OK;
}

/* ---------------- sequence and optional I/O ---------------- */

KILN_API int kiln_engine_tensor_kind(const kiln_engine *e, const char *name) {
    int i = io_index(e, name);
    if (i < 0)
        return -1;
    kiln_dtype t = e->net->tensors[e->io[i]].dtype;
    if (!kn_dtype_is_handle((int)t))
        return KILN_TENSOR_KIND_TENSOR;
    return kn_handle_is_opt(t) ? KILN_TENSOR_KIND_OPTIONAL : KILN_TENSOR_KIND_SEQUENCE;
}

KILN_API int kiln_engine_tensor_element_kind(const kiln_engine *e, const char *name) {
    int i = io_index(e, name);
    if (i < 0)
        return -1;
    int t = (int)e->net->tensors[e->io[i]].dtype;
    return kn_dtype_is_handle(t) && kn_handle_is_opt((kiln_dtype)t) && (t & KN_DTYPE_SEQUENCE)
               ? KILN_TENSOR_KIND_SEQUENCE
               : KILN_TENSOR_KIND_TENSOR;
}

/* Graph input k of a sequence or optional kind named `name`, or an error. */
static kiln_status handle_input(kiln_context *c, const char *name, const char *fn, int *k) {
    if (!c || !name)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    int i = io_index(c->e, name);
    if (i < 0 || i >= c->e->net->n_inputs)
        return kn_error(KILN_ERR_NOT_FOUND, "'%s' is not an input of the engine", name);
    if (!kn_dtype_is_handle((int)c->e->net->tensors[c->e->io[i]].dtype))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "input '%s' is a tensor, not a sequence or optional", name);
    if (!c->inseq) {
        int n = c->e->net->n_inputs;
        c->inseq = kn_calloc((size_t)n + 1, sizeof *c->inseq);
        c->inhandle = kn_calloc((size_t)n + 1, sizeof *c->inhandle);
        if (!c->inseq || !c->inhandle) {
            kn_free(c->inseq);
            kn_free(c->inhandle);
            c->inseq = NULL;
            c->inhandle = NULL;
            return KILN_ERR_OUT_OF_MEMORY;
        }
    }
    if (!c->inhandle[i] && !(c->inhandle[i] = kn_calloc(1, sizeof(kn_seq *))))
        return KILN_ERR_OUT_OF_MEMORY;
    *k = i;
    return KILN_OK;
}

static void bind_list(kiln_context *c, int k, kn_seq *s) {
    kn_seq_unref(c->inseq[k]);
    c->inseq[k] = s;
    kn_handle_put(c->inhandle[k], s);
    kx_ctx_bind(&c->c, c->e->io[k], c->inhandle[k]);
    c->c.shapes_ok = false; /* a new list: its facts decide shapes */
    c->c.prepared = false;
}

KILN_API kiln_status kiln_context_set_sequence_input(kiln_context *c, const char *name, int count,
                                                     const int *ranks,
                                                     const int64_t *const *dims,
                                                     const void *const *data) {
    int k;
    KN_TRY(handle_input(c, name, "kiln_context_set_sequence_input", &k));
    if (count < 0 || (count > 0 && (!ranks || !dims || !data)))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_context_set_sequence_input: input '%s': a bad count or a NULL array",
                        name);
    kiln_dtype code = c->e->net->tensors[c->e->io[k]].dtype, elem = kn_handle_elem(code);
    bool opt = kn_handle_is_opt(code), opt_seq = opt && ((int)code & KN_DTYPE_SEQUENCE);
    if (opt && !opt_seq && count != 1)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "input '%s' is an optional of a tensor: give 1 element (or use "
                        "kiln_context_set_optional_none), not %d", name, count);
    kn_seq *list = NULL;
    KN_TRY(kn_seq_new(KN_SEQ_KIND_SEQUENCE, elem, count, &list));
    kiln_status st = KILN_OK;
    for (int i = 0; i < count && st == KILN_OK; i++) {
        if (ranks[i] < 0 || ranks[i] > KILN_MAX_DIMS || (ranks[i] > 0 && !dims[i]) || !data[i])
            st = kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s': element %d has rank %d or no data",
                          name, i, ranks[i]);
        else
            st = kn_selem_new(elem, ranks[i], dims[i], data[i], &list->items[i]);
    }
    kn_seq *s = NULL;
    if (st == KILN_OK && opt) {
        st = kn_seq_new(KN_SEQ_KIND_OPTIONAL, elem, opt_seq ? 0 : 1, &s);
        if (st == KILN_OK && opt_seq) {
            s->inner = list;
            list = NULL;
        } else if (st == KILN_OK) {
            s->items[0] = list->items[0];
            list->items[0] = NULL;
        }
    } else if (st == KILN_OK) {
        s = list;
        list = NULL;
    }
    kn_seq_unref(list);
    if (st != KILN_OK)
        return st;
    bind_list(c, k, s);
    return KILN_OK;
}

KILN_API kiln_status kiln_context_set_optional_none(kiln_context *c, const char *name) {
    int k;
    KN_TRY(handle_input(c, name, "kiln_context_set_optional_none", &k));
    kiln_dtype code = c->e->net->tensors[c->e->io[k]].dtype;
    if (!kn_handle_is_opt(code))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s' is a sequence, not an optional",
                        name);
    kn_seq *s;
    KN_TRY(kn_seq_new(KN_SEQ_KIND_OPTIONAL, (kiln_dtype)((int)code & 0x1ff), 0, &s));
    s->none = true;
    bind_list(c, k, s);
    return KILN_OK;
}

/* The list an output holds after a run (an optional's inner sequence
 * when it has one). */
static kiln_status output_list(kiln_context *c, const char *name, kn_seq **out) {
    if (!c || !name)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "sequence output: NULL argument");
    int i = io_index(c->e, name);
    if (i < 0)
        return kn_error(KILN_ERR_NOT_FOUND, "'%s' is not an input or output of the engine", name);
    int t = c->e->io[i];
    if (!kn_dtype_is_handle((int)c->e->net->tensors[t].dtype) &&
        !kn_dtype_is_handle((int)c->c.ti[t].dtype))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "'%s' is a tensor, not a sequence or optional",
                        name);
    void *a = c->c.user[t] ? c->c.user[t] : c->c.addr[t];
    kn_seq *s = kn_handle_get(a);
    if (!s)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "'%s' holds no value: run the context first",
                        name);
    *out = s->inner ? s->inner : s;
    return KILN_OK;
}

KILN_API int64_t kiln_context_sequence_length(kiln_context *c, const char *name) {
    kn_seq *s;
    if (output_list(c, name, &s) != KILN_OK)
        return -1;
    return s->none ? 0 : s->n;
}

KILN_API int kiln_context_optional_has_element(kiln_context *c, const char *name) {
    kn_seq *inner;
    if (output_list(c, name, &inner) != KILN_OK)
        return -1;
    int i = io_index(c->e, name);
    int t = c->e->io[i];
    void *a = c->c.user[t] ? c->c.user[t] : c->c.addr[t];
    kn_seq *s = kn_handle_get(a);
    if (s->kind != KN_SEQ_KIND_OPTIONAL) {
        kn_error(KILN_ERR_INVALID_ARGUMENT, "'%s' is a sequence, not an optional", name);
        return -1;
    }
    return s->none ? 0 : 1;
}

KILN_API kiln_status kiln_context_sequence_element(kiln_context *c, const char *name, int64_t i,
                                                   kiln_dtype *dtype, int *rank, int64_t *dims,
                                                   const void **data) {
    kn_seq *s;
    KN_TRY(output_list(c, name, &s));
    if (s->none || i < 0 || i >= s->n)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "'%s' has no element %lld (it holds %d)", name,
                        (long long)i, s->none ? 0 : s->n);
    const kn_selem *e = s->items[i];
    if (dtype)
        *dtype = e->dtype;
    if (rank)
        *rank = e->rank;
    if (dims && e->rank)
        memcpy(dims, e->dims, (size_t)e->rank * sizeof *dims);
    if (data)
        *data = e->data;
    return KILN_OK;
}
