/* pass_precision.c - reduced precision: under KILN_BUILDER_FLAG_FP16 / BF16
 * (or a per-layer constraint), float layers whose kernels take float16 /
 * bfloat16 run in it. Casts are inserted around each converted layer (fp32
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

/* Ops that only move or describe data, or make their own output type:
 * running them in reduced precision saves nothing or changes meaning. */
static bool never_converted(const kn_node *n) {
    static const char *const ops[] = {"Cast", "CastLike", "Shape", "Size", "Constant",
                                      "ConstantOfShape", "EyeLike", "RandomNormal",
                                      "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                      "Multinomial", "If", "Loop", "Scan", "Identity",
                                      "QuantizeLinear", "DequantizeLinear"};
    if (n->domain[0] && strcmp(n->domain, KN_DOMAIN_KILN) != 0)
        return true; /* plugins and foreign domains */
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
    return found;
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

/* Decide whether node i can run in `dt`: fills which inputs and outputs
 * change type. Uses the shapes at the first profile point. */
static bool plan_node(kpass *p, int i, kiln_dtype dt, bool *in_conv, bool *out_conv) {
    kn_net *net = p->net;
    const kn_node *n = &net->nodes[i];
    if (n->n_in > 64 || n->n_out > 16)
        return false;
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

kiln_status kpass_precision(kpass *p, int *changed) {
    kn_net *net = p->net;
    const kbld *b = p->b;
    kiln_dtype dflt = (b->flags & KILN_BUILDER_FLAG_FP16)   ? KILN_DTYPE_FLOAT16
                      : (b->flags & KILN_BUILDER_FLAG_BF16) ? KILN_DTYPE_BFLOAT16
                                                            : KILN_DTYPE_UNDEFINED;
    if (dflt == KILN_DTYPE_UNDEFINED && kbld_layer_precision_count(b->cfg) == 0)
        return KILN_OK;
    warn_unmatched(net, b->cfg);
    KN_TRY(kpass_need_shapes(p));
    if (p->shapes_state != 1) {
        kn_log(KILN_LOG_WARNING, "precision: shapes unknown; every layer stays in FP32");
        return KILN_OK;
    }
    int nt = net->n_tensors, nn = net->n_nodes;
    /* reduced copies of fp32 tensors, per type: [0] float16, [1] bfloat16 */
    int *alias = kn_malloc(2 * (size_t)(nt + 1) * sizeof(int));
    if (!alias)
        return KILN_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < 2 * (nt + 1); k++)
        alias[k] = -1;
    kiln_status st = KILN_OK;
    int converted = 0, kept = 0;
    bool in_conv[64], out_conv[16];
    for (int i = 0; i < nn && st == KILN_OK; i++) {
        if (net->nodes[i].dead || never_converted(&net->nodes[i]))
            continue;
        kiln_dtype want = layer_constraint(b->cfg, net->nodes[i].name);
        if (want == KILN_DTYPE_FLOAT) {
            kept++;
            continue;
        }
        kiln_dtype dt = want != KILN_DTYPE_UNDEFINED ? want : dflt;
        if (dt == KILN_DTYPE_UNDEFINED || !plan_node(p, i, dt, in_conv, out_conv))
            continue;
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
            if (t < nt)
                al[t] = t16; /* later converted readers take the reduced tensor */
        }
        kpass_touch(p, i);
        converted++;
        kn_log(KILN_LOG_VERBOSE, "precision: layer '%s' (%s) runs in %s", net->nodes[i].name,
               net->nodes[i].op_type, kiln_dtype_name(dt));
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
    if (st == KILN_OK && (converted || kept))
        kn_log(KILN_LOG_INFO, "precision: %d layer(s) in reduced precision, %d kept in FP32 by "
               "constraint", converted, kept);
    *changed += converted;
    return st;
}
