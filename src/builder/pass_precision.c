/* pass_precision.c - reduced precision: under KILN_BUILDER_FLAG_FP16 / BF16
 * (or a per-layer constraint), float layers whose kernels take float16 /
 * bfloat16 run in it. With KILN_BUILDER_FLAG_TIMED_PRECISION the flags only
 * allow the types (TensorRT's meaning): each layer is timed in FP32 and in
 * every allowed type, the casts the choice adds at its edges included, and
 * the fastest is kept; constraints still force. Every layer the pass
 * decided carries its record (kiln_precision: "timed", "rule" or "forced";
 * kiln_precision_ms: the times of FP32, FP16 and BF16, -1 where not timed),
 * which the plan keeps and `kiln inspect` shows. Casts are inserted around each converted layer (fp32
 * to the reduced type before, back after); a tensor made by a converted
 * layer and read by another converted layer stays reduced, so back-to-back
 * casts never appear, and casts left without readers are removed by the
 * dead-code pass. Constants are converted once instead of cast per run. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "kiln/kiln_builder.h"
#include "passes.h"
#include "plugin/plugin.h"
#include "timing_cache.h"

/* Ops that only move or describe data, or make their own output type:
 * running them in reduced precision saves nothing or changes meaning. */
static bool never_converted(const kn_node *n) {
    static const char *const ops[] = {"Cast", "CastLike", "Shape", "Size", "Constant",
                                      "ConstantOfShape", "EyeLike", "RandomNormal",
                                      "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                      "Multinomial", "If", "Loop", "Scan", "Identity",
                                      "QuantizeLinear", "DequantizeLinear"};
    if (n->domain[0] && strcmp(n->domain, KN_DOMAIN_KILN) != 0 && !kpl_is_node(n))
        return true; /* foreign domains (plugins say what they take: plugin_plan) */
    for (size_t i = 0; i < KN_ARRAY_LEN(ops); i++)
        if (strcmp(n->op_type, ops[i]) == 0)
            return true;
    return false;
}

/* The constraint on a layer: its own name, or any layer fused into it
 * (fused names join the originals with " + "). FLOAT wins over a reduced
 * type when parts disagree. */
static kiln_dtype layer_constraint(const kiln_builder_config *cfg, const char *name) {
    if (kbld_layer_precision_count(cfg) == 0)
        return KILN_DTYPE_UNDEFINED;
    kiln_dtype whole = kbld_layer_precision(cfg, name), found = KILN_DTYPE_UNDEFINED;
    if (whole != KILN_DTYPE_UNDEFINED)
        return whole;
    /* "*" (trtexec's spelling) constrains every layer no entry names */
    kiln_dtype all = kbld_layer_precision(cfg, "*");
    const char *p = name;
    char part[512];
    while (*p) {
        const char *sep = strstr(p, " + ");
        size_t n = sep ? (size_t)(sep - p) : strlen(p);
        if (n < sizeof part) {
            memcpy(part, p, n);
            part[n] = '\0';
            kiln_dtype d = kbld_layer_precision(cfg, part);
            if (d == KILN_DTYPE_FLOAT)
                return d;
            if (d != KILN_DTYPE_UNDEFINED)
                found = d;
        }
        p = sep ? sep + 3 : p + n;
    }
    return found != KILN_DTYPE_UNDEFINED ? found : all;
}

/* Ops whose outputs take their data input's type and whose other inputs
 * are indices, shapes or counts: they need no inference to follow a reduced
 * type (their shape inputs are often computed at shape time, with no value
 * the pass could hand to inference). */
static bool follows_type(const kn_node *n) {
    static const char *const ops[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
                                      "Concat", "Split", "Slice", "Expand", "Tile", "Gather",
                                      "Dropout"};
    if (n->domain[0])
        return false;
    for (size_t i = 0; i < KN_ARRAY_LEN(ops); i++)
        if (strcmp(n->op_type, ops[i]) == 0)
            return true;
    return false;
}

/* Whether plugin node i takes `dt` for every float input and output, as its
 * supports_format and output_dtypes say (fills in_conv / out_conv). */
static bool plugin_plan(kpass *p, int i, kiln_dtype dt, bool *in_conv, bool *out_conv) {
    const kn_node *n = &p->net->nodes[i];
    kiln_plugin *pl = NULL;
    if (kpl_node_create(n, KILN_PLUGIN_PHASE_BUILD, NULL, &pl) != KILN_OK) {
        kn_error_clear();
        return false;
    }
    kiln_tensor_desc d[80];
    kiln_dtype din[64], dout[16];
    bool ok = pl->build->supports_format != NULL, any = false;
    memset(d, 0, sizeof d);
    for (int j = 0; j < n->n_in && ok; j++) {
        in_conv[j] = false;
        const kn_tinfo *ti = n->in[j] >= 0 ? kpass_shape(p, 0, n->in[j]) : NULL;
        if (n->in[j] >= 0 && !ti) {
            ok = false;
            break;
        }
        if (ti) {
            d[j].dtype = ti->dtype;
            d[j].rank = ti->rank < 0 ? 0 : ti->rank;
            memcpy(d[j].dims, ti->dims, sizeof d[j].dims);
            if (ti->dtype == KILN_DTYPE_FLOAT) {
                d[j].dtype = dt;
                in_conv[j] = any = true;
            }
        }
        din[j] = d[j].dtype;
        ok = n->in[j] < 0 || pl->build->supports_format(pl->self, j, d, n->n_in, n->n_out);
    }
    if (ok && any) {
        kpl_error_clear();
        ok = pl->build->output_dtypes(pl->self, din, n->n_in, dout, n->n_out) == KILN_OK;
    }
    for (int j = 0; j < n->n_out && ok && any; j++) {
        out_conv[j] = false;
        const kn_tinfo *ti = n->out[j] >= 0 ? kpass_shape(p, 0, n->out[j]) : NULL;
        if (!ti)
            continue;
        kiln_tensor_desc *o = &d[n->n_in + j];
        o->dtype = dout[j];
        o->rank = ti->rank < 0 ? 0 : ti->rank;
        memcpy(o->dims, ti->dims, sizeof o->dims);
        if (ti->dtype == KILN_DTYPE_FLOAT)
            ok = dout[j] == dt; /* a float output must follow its inputs */
        else
            ok = dout[j] == ti->dtype;
        out_conv[j] = ti->dtype == KILN_DTYPE_FLOAT;
        ok = ok && pl->build->supports_format(pl->self, n->n_in + j, d, n->n_in, n->n_out);
    }
    pl->runtime->destroy(pl->self);
    kpl_error_clear();
    return ok && any;
}

/* Decide whether node i can run in `dt`: fills which inputs and outputs
 * change type. Uses the shapes at the first profile point. */
static bool plan_node(kpass *p, int i, kiln_dtype dt, bool *in_conv, bool *out_conv) {
    kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    if (n->n_in > 64 || n->n_out > 16)
        return false;
    if (kpl_is_node(n))
        return plugin_plan(p, i, dt, in_conv, out_conv);
    const kn_op_schema *sch = kn_op_find(n->domain, n->op_type);
    if (!sch || !sch->infer)
        return false;
    kn_tinfo in[64], out[16];
    void *tmp[64] = {0};
    bool any = false, ok = true;
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    for (int j = 0; j < n->n_in && ok; j++) {
        in_conv[j] = false;
        int t = n->in[j];
        if (t < 0)
            continue;
        const kn_tinfo *ti = kpass_shape(p, 0, t);
        if (!ti) {
            ok = false;
            break;
        }
        in[j] = *ti;
        in[j].value = NULL;
        bool value_input = j < 32 && (sch->value_inputs & (1u << j));
        if (kpass_is_const(net, t) && (value_input || ti->dtype != KILN_DTYPE_FLOAT)) {
            in[j].value = kn_tdata_aligned(&net->tensors[t].value, &tmp[j]);
            ok = in[j].value || net->tensors[t].value.nbytes == 0;
        }
        if (ti->dtype == KILN_DTYPE_FLOAT && !value_input) {
            in_conv[j] = true;
            in[j].dtype = dt;
            any = true;
        }
    }
    if (ok && any && follows_type(n)) { /* outputs as inferred, in the input's new type */
        for (int j = 0; j < n->n_out && ok; j++) {
            const kn_tinfo *ti = n->out[j] >= 0 ? kpass_shape(p, 0, n->out[j]) : NULL;
            if (n->out[j] >= 0 && !ti)
                ok = false;
            else if (ti) {
                out[j] = *ti;
                out[j].value = NULL;
                if (out[j].dtype == KILN_DTYPE_FLOAT)
                    out[j].dtype = dt;
            }
        }
        /* every float data input must change with the others (Concat) */
        for (int j = 0; j < n->n_in && ok; j++)
            if (n->in[j] >= 0 && in[j].dtype == KILN_DTYPE_FLOAT)
                ok = false;
    } else if (ok && any) {
        kn_infer c = {n, n->n_in, in, n->n_out, out};
        ok = sch->infer(&c) == KILN_OK;
        kn_error_clear();
    }
    for (int j = 0; j < n->n_out && ok && any; j++) {
        out_conv[j] = false;
        int t = n->out[j];
        const kn_tinfo *ti = t >= 0 ? kpass_shape(p, 0, t) : NULL;
        if (ti && ti->dtype == KILN_DTYPE_FLOAT) {
            if (out[j].dtype != dt) {
                ok = false; /* a float output that would not follow its inputs */
                break;
            }
            out_conv[j] = true;
        }
    }
    if (ok && any) {
        /* a kernel must say it takes these types: one with no supports()
         * check may only know float, unless the op only moves bytes */
        const kb_backend *be = p->b->be ? p->b->be : &kb_cpu_backend;
        const kb_kernel *cand[KB_MAX_CANDIDATES];
        int nc = be->kernels_for(n->domain, n->op_type, cand, KB_MAX_CANDIDATES);
        bool found = false;
        for (int c = 0; c < nc && c < KB_MAX_CANDIDATES && !found; c++)
            found = cand[c]->supports ? cand[c]->supports(n, in, n->n_in, out, n->n_out)
                                      : follows_type(n); /* byte copies take any type */
        ok = found;
    }
    for (int j = 0; j < n->n_in; j++)
        kn_aligned_free(tmp[j]);
    return ok && any;
}

/* A constant converted to dt (a new tensor). */
static kiln_status convert_const(kn_net *net, int t, kiln_dtype dt, int *out) {
    const kn_tdata *v = &net->tensors[t].value;
    kn_tdata nv;
    KN_TRY(kn_tdata_alloc(&nv, dt, v->rank, v->dims));
    int64_t n = kpass_numel(v), clamped = 0;
    uint16_t *d = nv.data;
    for (int64_t k = 0; k < n; k++) {
        float f = (float)kpass_value_at(v, k);
        /* finite values beyond float16's range become its largest finite
         * value, not infinities: masks written as (1 - m) * FLT_MIN would
         * otherwise give 0 * -inf = NaN (what TensorRT does too) */
        if (dt == KILN_DTYPE_FLOAT16 && f == f && f != INFINITY && f != -INFINITY &&
            (f > 65504.f || f < -65504.f)) {
            f = f > 0 ? 65504.f : -65504.f;
            clamped++;
        }
        d[k] = dt == KILN_DTYPE_FLOAT16 ? kn_float_to_half(f) : kn_float_to_bf16(f);
    }
    if (clamped)
        kn_log(KILN_LOG_WARNING, "precision: %lld value(s) of constant '%s' are outside the "
               "float16 range; clamped to +-65504", (long long)clamped, net->tensors[t].name);
    char hint[256];
    snprintf(hint, sizeof hint, "%s_%s", net->tensors[t].name,
             dt == KILN_DTYPE_FLOAT16 ? "fp16" : "bf16");
    return kpass_add_const(net, hint, &nv, out);
}

/* Constraints naming no layer are most likely typos: say so. */
static void warn_unmatched(const kn_net *net, const kiln_builder_config *cfg) {
    for (int e = 0; e < kbld_layer_precision_count(cfg); e++) {
        const char *want = kbld_layer_precision_name(cfg, e);
        size_t wl = strlen(want);
        if (strcmp(want, "*") == 0)
            continue;
        bool found = false;
        for (int i = 0; i < net->n_nodes && !found; i++) {
            const char *nm = net->nodes[i].name, *q = nm;
            while (!found && (q = strstr(q, want)) != NULL) {
                bool start = q == nm || (q - nm >= 3 && memcmp(q - 3, " + ", 3) == 0);
                bool end = q[wl] == '\0' || strncmp(q + wl, " + ", 3) == 0;
                found = start && end;
                q++;
            }
        }
        if (!found)
            kn_log(KILN_LOG_WARNING, "precision: no layer named '%s'; its constraint is ignored",
                   want);
    }
}

/* ---- choosing by time ---- */

static int type_slot(kiln_dtype dt) {
    return dt == KILN_DTYPE_FLOAT16 ? 1 : dt == KILN_DTYPE_BFLOAT16 ? 2 : 0;
}

/* A timing-cache key for node n at the per-slot types and shapes in/out
 * (salted, so it never meets tactic selection's keys). */
static uint64_t slot_signature(const kn_net *net, const kn_node *n, const kn_tinfo *in,
                               const kn_tinfo *out) {
    uint64_t h = kn_hash64("precision", 9, 7);
    h = kn_hash64(n->op_type, strlen(n->op_type), h);
    h = kn_hash64(n->domain, strlen(n->domain), h);
    for (int j = 0; j < n->n_in + n->n_out; j++) {
        int t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
        const kn_tinfo *ti = j < n->n_in ? &in[j] : &out[j - n->n_in];
        if (t < 0) {
            h = kn_hash64("-", 1, h);
            continue;
        }
        h = kn_hash64(&ti->dtype, sizeof ti->dtype, h);
        h = kn_hash64(&ti->rank, sizeof ti->rank, h);
        h = kn_hash64(ti->dims, sizeof(int64_t) * (size_t)(ti->rank > 0 ? ti->rank : 0), h);
        uint32_t c = t < net->n_tensors ? (net->tensors[t].flags & KN_T_CONST) : 0;
        h = kn_hash64(&c, sizeof c, h);
    }
    for (int a = 0; a < n->n_attr; a++) {
        const kn_attr *at = &n->attrs[a];
        if (strncmp(at->name, "kiln_precision", 14) == 0)
            continue;
        h = kn_hash64(at->name, strlen(at->name), h);
        h = kn_hash64(&at->i, sizeof at->i, h);
        h = kn_hash64(&at->f, sizeof at->f, h);
        if (at->s)
            h = kn_hash64(at->s, at->s_len, h);
        if (at->ints)
            h = kn_hash64(at->ints, at->n * sizeof(int64_t), h);
        if (at->floats)
            h = kn_hash64(at->floats, at->n * sizeof(float), h);
    }
    return h;
}

/* kbld_time_layer through the build's timing cache (not with a test hook). */
static kiln_status cached_time(kpass *p, const kn_node *n, const kn_tinfo *in,
                               const kn_tinfo *out, double *ms) {
    kbld *b = p->b;
    kbld_tcache *c = kbld_time_hook ? NULL : b->cache;
    uint64_t sig = c ? slot_signature(b->net, n, in, out) : 0;
    if (c && kbld_tcache_get(c, sig, ms))
        return KILN_OK;
    KN_TRY(kbld_time_layer(b, n, in, out, ms));
    return c ? kbld_tcache_put(c, sig, "layer", *ms) : KILN_OK;
}

static kiln_status cast_time(kpass *p, const kn_tinfo *from, kiln_dtype to, double *ms) {
    if (kbld_time_hook || !p->b->cache)
        return kbld_time_cast(p->b, from, to, ms);
    int io[2] = {-2, -2}; /* only for the key */
    kn_node c;
    memset(&c, 0, sizeof c);
    c.op_type = (char *)"Cast";
    c.domain = (char *)"";
    c.n_in = c.n_out = 1;
    c.in = &io[0];
    c.out = &io[1];
    kn_tinfo o = *from;
    o.dtype = to;
    uint64_t sig = slot_signature(p->net, &c, from, &o);
    if (kbld_tcache_get(p->b->cache, sig, ms))
        return KILN_OK;
    KN_TRY(kbld_time_cast(p->b, from, to, ms));
    return kbld_tcache_put(p->b->cache, sig, "cast", *ms);
}

/* The cost of node i in type dt (FLOAT: as it is) at the opt shapes `opt`
 * (per original tensor): its fastest tactic, plus the casts the choice
 * needs: into dt for a float input not yet available in dt (`al`), back to
 * FP32 for a converted output that is a graph output; in FP32, back from a
 * reduced type for an input a converted layer made (`made`). A cast shared
 * by several readers is counted at each (an upper bound). */
static kiln_status layer_cost(kpass *p, int i, kiln_dtype dt, const bool *in_conv,
                              const bool *out_conv, const kn_tinfo *opt, const int *al,
                              const kiln_dtype *made, int nt, double *cost) {
    const kn_node *n = &p->net->nodes[i];
    kn_tinfo in[64], out[16];
    double total = 0, ms = 0;
    for (int j = 0; j < n->n_in; j++) {
        memset(&in[j], 0, sizeof in[j]);
        int t = n->in[j];
        if (t < 0 || t >= nt)
            continue;
        in[j] = opt[t];
        in[j].value = NULL;
        if (dt != KILN_DTYPE_FLOAT && in_conv[j]) {
            in[j].dtype = dt;
            if (!kpass_is_const(p->net, t) && al[t] < 0) {
                KN_TRY(cast_time(p, &opt[t], dt, &ms));
                total += ms;
            }
        } else if (dt == KILN_DTYPE_FLOAT && made[t] != KILN_DTYPE_UNDEFINED &&
                   opt[t].dtype == KILN_DTYPE_FLOAT) {
            kn_tinfo r = opt[t];
            r.value = NULL;
            r.dtype = made[t];
            KN_TRY(cast_time(p, &r, KILN_DTYPE_FLOAT, &ms));
            total += ms;
        }
    }
    for (int j = 0; j < n->n_out; j++) {
        memset(&out[j], 0, sizeof out[j]);
        int t = n->out[j];
        if (t < 0 || t >= nt)
            continue;
        out[j] = opt[t];
        out[j].value = NULL;
        if (dt != KILN_DTYPE_FLOAT && out_conv[j]) {
            out[j].dtype = dt;
            if (p->net->tensors[t].flags & KN_T_OUTPUT) {
                KN_TRY(cast_time(p, &out[j], KILN_DTYPE_FLOAT, &ms));
                total += ms;
            }
        }
    }
    KN_TRY(cached_time(p, n, in, out, &ms));
    *cost = total + ms;
    return KILN_OK;
}

static kiln_status record(kn_node *n, const char *why, const double *ms) {
    KN_TRY(kn_node_set_string(n, "kiln_precision", why));
    if (!ms)
        return KILN_OK;
    float f[3] = {(float)ms[0], (float)ms[1], (float)ms[2]};
    return kn_node_set_floats(n, "kiln_precision_ms", f, 3);
}

kiln_status kpass_precision(kpass *p, int *changed) {
    kn_net *net = p->net;
    kbld *b = p->b;
    bool allow16 = (b->flags & KILN_BUILDER_FLAG_FP16) != 0,
         allowbf = (b->flags & KILN_BUILDER_FLAG_BF16) != 0;
    kiln_dtype dflt = allow16 ? KILN_DTYPE_FLOAT16 : allowbf ? KILN_DTYPE_BFLOAT16
                                                             : KILN_DTYPE_UNDEFINED;
    bool by_time = (b->flags & KILN_BUILDER_FLAG_TIMED_PRECISION) != 0;
    if (dflt == KILN_DTYPE_UNDEFINED && kbld_layer_precision_count(b->cfg) == 0)
        return KILN_OK;
    warn_unmatched(net, b->cfg);
    KN_TRY(kpass_need_shapes(p));
    if (p->shapes_state != 1) {
        kn_log(KILN_LOG_WARNING, "precision: shapes unknown; every layer stays in FP32");
        return KILN_OK;
    }
    int nt = net->n_tensors, nn = net->n_nodes;
    /* the opt shapes of profile 0, which timing runs at (as tactic selection) */
    kn_tinfo *opt = NULL;
    bool timing = by_time && dflt != KILN_DTYPE_UNDEFINED && !kbld_no_timing(b);
    if (timing)
        KN_TRY(kbld_infer(b, 0, KBLD_OPT, &opt));
    /* by rule (timing off): a reduced type where the backend is a GPU, FP32 on
     * the CPU, whose reduced kernels convert and are slower */
    bool rule_reduced = !(b->be == NULL || b->be == &kb_cpu_backend ||
                          strcmp(b->be->name, "cpu") == 0);
    /* reduced copies of fp32 tensors, per type: [0] float16, [1] bfloat16 */
    int *alias = kn_malloc(2 * (size_t)(nt + 1) * sizeof(int));
    kiln_dtype *made = kn_malloc((size_t)(nt + 1) * sizeof(kiln_dtype));
    if (!alias || !made) {
        kn_free(alias);
        kn_free(made);
        kn_free(opt);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int k = 0; k < 2 * (nt + 1); k++)
        alias[k] = -1;
    for (int k = 0; k < nt + 1; k++)
        made[k] = KILN_DTYPE_UNDEFINED;
    kiln_status st = KILN_OK;
    int converted = 0, kept = 0, timed = 0, timed_fp32 = 0;
    bool in_conv[64], out_conv[16];
    for (int i = 0; i < nn && st == KILN_OK; i++) {
        if (net->nodes[i].dead || never_converted(&net->nodes[i]))
            continue;
        kiln_dtype want = layer_constraint(b->cfg, net->nodes[i].name);
        if (want == KILN_DTYPE_FLOAT) {
            if (plan_node(p, i, KILN_DTYPE_FLOAT16, in_conv, out_conv) ||
                plan_node(p, i, KILN_DTYPE_BFLOAT16, in_conv, out_conv)) {
                kept++;
                st = record(&net->nodes[i], "forced", NULL);
            }
            continue;
        }
        kiln_dtype dt = KILN_DTYPE_UNDEFINED;
        const char *why = "forced";
        double ms[3] = {-1, -1, -1};
        if (want != KILN_DTYPE_UNDEFINED) {
            dt = want;
            if (!plan_node(p, i, dt, in_conv, out_conv)) {
                if (kpl_is_node(&net->nodes[i]))
                    kn_log(KILN_LOG_WARNING, "precision: plugin layer '%s' does not take %s "
                           "(its supports_format); it keeps its types", net->nodes[i].name,
                           kiln_dtype_name(dt));
                continue;
            }
        } else if (dflt == KILN_DTYPE_UNDEFINED) {
            continue;
        } else if (!by_time) { /* the flag forces (the C API without TIMED_PRECISION) */
            dt = dflt;
            if (!plan_node(p, i, dt, in_conv, out_conv))
                continue;
        } else {
            /* candidates: FP32 and every allowed type the layer takes */
            kiln_dtype cands[2];
            int nc = 0;
            if (allow16 && plan_node(p, i, KILN_DTYPE_FLOAT16, in_conv, out_conv))
                cands[nc++] = KILN_DTYPE_FLOAT16;
            if (allowbf && plan_node(p, i, KILN_DTYPE_BFLOAT16, in_conv, out_conv))
                cands[nc++] = KILN_DTYPE_BFLOAT16;
            if (nc == 0)
                continue;
            if (!timing) {
                why = "rule";
                dt = rule_reduced ? cands[0] : KILN_DTYPE_FLOAT;
            } else {
                why = "timed";
                double best = 0;
                kiln_status ts = layer_cost(p, i, KILN_DTYPE_FLOAT, in_conv, out_conv, opt, alias,
                                            made, nt, &best);
                if (ts != KILN_OK) { /* FP32 does not time (no tactic runs it): keep it */
                    kn_log(KILN_LOG_VERBOSE, "precision: layer '%s' not timed in FP32: %s",
                           net->nodes[i].name, kiln_last_error());
                    kn_error_clear();
                    continue;
                }
                ms[0] = best;
                dt = KILN_DTYPE_FLOAT;
                for (int c = 0; c < nc; c++) {
                    double cost = 0;
                    plan_node(p, i, cands[c], in_conv, out_conv);
                    int *al = alias + (cands[c] == KILN_DTYPE_FLOAT16 ? 0 : nt + 1);
                    ts = layer_cost(p, i, cands[c], in_conv, out_conv, opt, al, made, nt, &cost);
                    if (ts != KILN_OK) {
                        kn_log(KILN_LOG_VERBOSE, "precision: layer '%s' not timed in %s: %s",
                               net->nodes[i].name, kiln_dtype_name(cands[c]), kiln_last_error());
                        kn_error_clear();
                        continue;
                    }
                    ms[type_slot(cands[c])] = cost;
                    if (cost < best) { /* ties keep the more accurate type */
                        best = cost;
                        dt = cands[c];
                    }
                }
                timed++;
                kn_log(KILN_LOG_VERBOSE, "precision: layer '%s' (%s): FP32 %.4f ms, FP16 %.4f ms, "
                       "BF16 %.4f ms (casts included): %s", net->nodes[i].name,
                       net->nodes[i].op_type, ms[0], ms[1], ms[2], kiln_dtype_name(dt));
            }
            if (dt == KILN_DTYPE_FLOAT) {
                timed_fp32 += timing;
                st = record(&net->nodes[i], why, timing ? ms : NULL);
                continue;
            }
            plan_node(p, i, dt, in_conv, out_conv); /* the winner's slots */
        }
        int *al = alias + (dt == KILN_DTYPE_FLOAT16 ? 0 : nt + 1);
        int n_in = net->nodes[i].n_in, n_out = net->nodes[i].n_out;
        for (int j = 0; j < n_in && st == KILN_OK; j++) {
            int t = net->nodes[i].in[j];
            if (!in_conv[j] || t < 0)
                continue;
            if (al[t] < 0) {
                if (kpass_is_const(net, t)) {
                    st = convert_const(net, t, dt, &al[t]);
                } else {
                    int t16;
                    char hint[512];
                    snprintf(hint, sizeof hint, "%s_%s", net->tensors[t].name,
                             kiln_dtype_name(dt));
                    st = kn_net_new_tensor(net, hint, &t16);
                    if (st == KILN_OK)
                        st = kpass_add_cast(net, "cast", t, t16, dt);
                    if (st == KILN_OK)
                        al[t] = t16;
                }
            }
            if (st == KILN_OK)
                net->nodes[i].in[j] = al[t];
        }
        for (int j = 0; j < n_out && st == KILN_OK; j++) {
            int t = net->nodes[i].out[j];
            if (!out_conv[j] || t < 0)
                continue;
            int t16;
            char hint[512];
            snprintf(hint, sizeof hint, "%s_%s", net->tensors[t].name, kiln_dtype_name(dt));
            st = kn_net_new_tensor(net, hint, &t16);
            if (st != KILN_OK)
                break;
            kpass_set_output(net, i, j, t16);
            st = kpass_add_cast(net, "cast", t16, t, KILN_DTYPE_FLOAT);
            if (t < nt) {
                al[t] = t16; /* later converted readers take the reduced tensor */
                made[t] = dt;
            }
        }
        if (st == KILN_OK)
            st = record(&net->nodes[i], why, strcmp(why, "timed") == 0 ? ms : NULL);
        kpass_touch(p, i);
        converted++;
        kn_log(KILN_LOG_VERBOSE, "precision: layer '%s' (%s) runs in %s (%s)", net->nodes[i].name,
               net->nodes[i].op_type, kiln_dtype_name(dt), why);
    }
    /* Shape and Size read only the shape, which the reduced copy shares:
     * they take it, so no cast back to FP32 runs just for them */
    for (int i = 0; i < net->n_nodes && st == KILN_OK && converted; i++) {
        kn_node *n = &net->nodes[i];
        if (n->dead || n->domain[0] || (strcmp(n->op_type, "Shape") != 0 && strcmp(n->op_type, "Size") != 0) ||
            n->n_in < 1 || n->in[0] < 0 || n->in[0] >= nt)
            continue;
        int t = n->in[0];
        int r = alias[t] >= 0 ? alias[t] : alias[nt + 1 + t];
        if (r >= 0)
            n->in[0] = r;
    }
    kn_free(alias);
    kn_free(made);
    kn_free(opt);
    if (st == KILN_OK && (converted || kept))
        kn_log(KILN_LOG_INFO, "precision: %d layer(s) in reduced precision, %d kept in FP32 by "
               "constraint", converted, kept);
    if (st == KILN_OK && timed)
        kn_log(KILN_LOG_INFO, "precision: %d layer(s) timed in FP32 and the allowed types; %d "
               "faster in FP32 (kept), %d faster reduced", timed, timed_fp32, timed - timed_fp32);
    *changed += converted;
    return st;
}
