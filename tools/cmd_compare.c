/* cmd_compare.c - `kiln compare`: run the same inputs through kiln and a
 * reference (ONNX Runtime through scripts/ort_reference.py, or kiln's own
 * reference kernels unfused in FP32) and report, per output, the absolute
 * and relative errors with a PASS/FAIL verdict against tolerances, as
 * Polygraphy's `run --onnxrt --trt` comparison does. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compare.h"
#include "polygraphy.h"
#include "kiln/kiln_plugin.h"

/* ---------------- options ---------------- */

void cmp_opts_init(cmp_opts *o) {
    memset(o, 0, sizeof *o);
    o->quantile = 0.99;
    o->seed = 1;
    o->stat = CMP_ELEMWISE;
}

static void tol_free(cmp_tol_list *l) {
    for (int i = 0; i < l->n; i++)
        free(l->items[i].name);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

void cmp_opts_free(cmp_opts *o) {
    cli_build_opts_free(&o->b);
    tol_free(&o->atol);
    tol_free(&o->rtol);
    npy_range_list_free(&o->ranges);
    for (int i = 0; i < o->n_lprec; i++)
        free(o->lprec[i].name);
    free(o->lprec);
    o->lprec = NULL;
    o->n_lprec = 0;
}

static bool tol_put(cmp_tol_list *l, const char *name, size_t nlen, double v) {
    for (int i = 0; i < l->n; i++)
        if (strlen(l->items[i].name) == nlen && memcmp(l->items[i].name, name, nlen) == 0) {
            l->items[i].v = v;
            return true;
        }
    cmp_tol *ni = realloc(l->items, (size_t)(l->n + 1) * sizeof *ni);
    if (!ni)
        return false;
    l->items = ni;
    if (!(ni[l->n].name = malloc(nlen + 1)))
        return false;
    memcpy(ni[l->n].name, name, nlen);
    ni[l->n].name[nlen] = '\0';
    ni[l->n].v = v;
    l->n++;
    return true;
}

/* "1e-3" or "out:1e-3,out2:1e-2" (the last ':' splits name from value). */
static bool parse_tols(const char *flag, const char *spec, cmp_tol_list *l) {
    if (!cli_need_value(flag, spec))
        return false;
    const char *p = spec;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[512];
        if (n == 0 || n >= sizeof item) {
            cli_error("%s: bad entry in '%s'", flag, spec);
            return false;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        char *colon = strrchr(item, ':');
        const char *num = colon ? colon + 1 : item;
        size_t nlen = colon ? (size_t)(colon - item) : 0;
        double v;
        if (!cli_parse_double(flag, num, 0.0, 1e300, &v))
            return false;
        if (!tol_put(l, item, nlen, v)) {
            cli_error("out of memory");
            return false;
        }
        p = comma ? comma + 1 : p + n;
    }
    return true;
}

static double tol_get(const cmp_tol_list *l, const char *name, double dflt) {
    double v = dflt;
    for (int i = 0; i < l->n; i++) {
        if (strcmp(l->items[i].name, name) == 0)
            return l->items[i].v;
        if (l->items[i].name[0] == '\0')
            v = l->items[i].v;
    }
    return v;
}

bool cmp_parse_lprec(const char *spec, cmp_opts *o) {
    const char *p = spec;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[1024];
        if (n == 0 || n >= sizeof item) {
            cli_error("--layerPrecisions: bad entry in '%s'", spec);
            return false;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        char *colon = strrchr(item, ':');
        if (!colon || colon == item) {
            cli_error("--layerPrecisions: expected layer:precision in '%s'", item);
            return false;
        }
        *colon = '\0';
        const char *prec = colon + 1;
        kiln_dtype dt;
        if (strcmp(prec, "fp32") == 0)
            dt = KILN_DTYPE_FLOAT;
        else if (strcmp(prec, "fp16") == 0)
            dt = KILN_DTYPE_FLOAT16;
        else if (strcmp(prec, "bf16") == 0)
            dt = KILN_DTYPE_BFLOAT16;
        else {
            cli_error("--layerPrecisions: '%s': precision must be fp32, fp16 or bf16", prec);
            return false;
        }
        char *name = item;
        size_t len = strlen(name);
        if (len >= 2 && name[0] == '\'' && name[len - 1] == '\'') {
            name[len - 1] = '\0';
            name++;
        }
        cmp_lprec *nl = realloc(o->lprec, (size_t)(o->n_lprec + 1) * sizeof *nl);
        if (!nl || !(nl[o->n_lprec].name = strdup(name))) {
            if (nl)
                o->lprec = nl;
            cli_error("out of memory");
            return false;
        }
        o->lprec = nl;
        nl[o->n_lprec++].dtype = dt;
        p = comma ? comma + 1 : p + n;
    }
    return true;
}

int cmp_flag(cmp_opts *o, const char *name, const char *value) {
    /* before the build flags: compare (and debug precision) keep their own list */
    if (strcmp(name, "--layerPrecisions") == 0)
        return cli_need_value(name, value) && cmp_parse_lprec(value, o) ? 1 : -1;
    int r = cli_build_flag(&o->b, name, value);
    if (r != 0)
        return r;
    long long n;
    char err[NPY_ERR_CAP];
    if (strcmp(name, "--atol") == 0)
        return parse_tols(name, value, &o->atol) ? 1 : -1;
    if (strcmp(name, "--rtol") == 0)
        return parse_tols(name, value, &o->rtol) ? 1 : -1;
    if (strcmp(name, "--check-error-stat") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        if (strcmp(value, "elemwise") == 0)
            o->stat = CMP_ELEMWISE;
        else if (strcmp(value, "max") == 0)
            o->stat = CMP_MAX;
        else if (strcmp(value, "mean") == 0)
            o->stat = CMP_MEAN;
        else if (strcmp(value, "median") == 0)
            o->stat = CMP_MEDIAN;
        else {
            cli_error("%s: expected max, mean, median or elemwise, got '%s'", name, value);
            return -1;
        }
        return 1;
    }
    if (strcmp(name, "--error-quantile") == 0)
        return cli_parse_double(name, value, 0.0, 1.0, &o->quantile) ? 1 : -1;
    if (strcmp(name, "--seed") == 0) {
        if (!cli_parse_int(name, value, 0, INT64_MAX, &n))
            return -1;
        o->seed = (uint64_t)n;
        return 1;
    }
    if (strcmp(name, "--val-range") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        if (!npy_parse_ranges(value, &o->ranges, err)) {
            cli_error("%s", err);
            return -1;
        }
        return 1;
    }
    static const struct {
        const char *flag;
        size_t off;
    } files[] = {
        {"--load-inputs", offsetof(cmp_opts, load_inputs)},
        {"--loadInputs", offsetof(cmp_opts, load_inputs)},
        {"--save-inputs", offsetof(cmp_opts, save_inputs)},
        {"--save-results", offsetof(cmp_opts, save_results)},
        {"--load-results", offsetof(cmp_opts, load_results)},
        {"--plan", offsetof(cmp_opts, plan)},
        {"--model", offsetof(cmp_opts, ref_model)},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (strcmp(name, files[i].flag) == 0) {
            if (!cli_need_value(name, value))
                return -1;
            *(const char **)((char *)o + files[i].off) = value;
            return 1;
        }
    if (strcmp(name, "--all-tensors") == 0) {
        o->all_tensors = true;
        return cli_no_value(name, value) ? 1 : -1;
    }
    if (strcmp(name, "--reference") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        if (strcmp(value, "auto") == 0)
            o->reference = CMP_REF_AUTO;
        else if (strcmp(value, "onnxruntime") == 0 || strcmp(value, "ort") == 0)
            o->reference = CMP_REF_ORT;
        else if (strcmp(value, "kiln") == 0 || strcmp(value, "ref") == 0)
            o->reference = CMP_REF_KILN;
        else {
            cli_error("%s: expected auto, onnxruntime or kiln, got '%s'", name, value);
            return -1;
        }
        return 1;
    }
    if (strcmp(name, "--verbose") == 0) {
        cli_verbose = true;
        return cli_no_value(name, value) ? 1 : -1;
    }
    if (strcmp(name, "--quiet") == 0) {
        o->quiet = true;
        return cli_no_value(name, value) ? 1 : -1;
    }
    return 0;
}

void cmp_flags_usage(FILE *f) {
    fputs("Comparison:\n"
          "  --atol=V | --atol=OUT:V,...   absolute tolerance, default or per output\n"
          "                                (default 1e-5)\n"
          "  --rtol=V | --rtol=OUT:V,...   relative tolerance (default 1e-5)\n"
          "  --check-error-stat=S      max, mean, median or elemwise (default): an output\n"
          "                            fails when that statistic of the absolute error is\n"
          "                            over atol AND the same statistic of the relative\n"
          "                            error is over rtol (elemwise: any one element)\n"
          "  --error-quantile=Q        quantile of the errors to report (default 0.99)\n"
          "  --reference=R             auto (default: onnxruntime when importable, else\n"
          "                            kiln), onnxruntime, or kiln (reference kernels,\n"
          "                            no fusion, FP32)\n"
          "  --save-results=F.npz|F.json  save the reference outputs (golden values;\n"
          "                            .json: Polygraphy's RunResults with kiln's too)\n"
          "  --load-results=F.npz|F.json  compare against saved outputs instead of running\n"
          "                            a reference (.json: polygraphy run --save-results)\n"
          "  --all-tensors             compare every intermediate tensor; report the first\n"
          "                            (in topological order) out of tolerance\n"
          "Inputs:\n"
          "  --load-inputs=F.npz | name:F.npy,...  inputs from files (default random)\n"
          "  --save-inputs=F.npz       save the inputs used\n"
          "  --seed=N                  seed of the random inputs (default 1)\n"
          "  --val-range=[lo,hi] | name:[lo,hi],...  range of random values (floats\n"
          "                            default [-1,1), integers [0,1])\n"
          "Build (as kiln exec): --shapes --fp16 --bf16 --layerPrecisions=name:fp32,...\n"
          "  --noFusion --noTiming --threads --memPoolSize --backend\n"
          "  --plan=F.kiln --model=M.onnx  run a saved plan, M as the reference model\n"
          "  --quiet --verbose\n"
          "Plugins (as kiln exec): --plugins= --staticPlugins= --dynamicPlugins=\n"
          "  --pluginNamespace=NS; a model with plugin layers uses the kiln reference\n"
          "Polygraphy's spellings: values after a space (--atol 1e-2 out:1e-3),\n"
          "  --input-shapes x:[1,3,224,224], --trt/--onnxrt (select nothing),\n"
          "  --layer-precisions l:float16, --pool-limit workspace:1G; results and\n"
          "  inputs named *.json are Polygraphy's JSON (RunResults, feed lists)\n",
          f);
}

void cli_compare_usage(FILE *f) {
    fputs("Usage: kiln compare MODEL.onnx [flags]\n"
          "       kiln compare --plan=PLAN.kiln --model=MODEL.onnx [flags]\n"
          "\n"
          "Run the same inputs through kiln and a reference and compare every output:\n"
          "shape, max/mean/median absolute and relative error, an error quantile,\n"
          "NaN/Inf counts and PASS/FAIL. Exit status: 0 when every output passes, 1\n"
          "when one fails, 2 on bad flags, 3 when a model cannot be built or run.\n"
          "\n",
          f);
    cmp_flags_usage(f);
}

/* ---------------- inputs ---------------- */

/* --load-inputs: "file.npz", "file.npy" or "name:file,...". */
static bool load_inputs_spec(const char *spec, npy_list *l) {
    char err[NPY_ERR_CAP];
    const char *p = spec;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[2048];
        if (n == 0 || n >= sizeof item) {
            cli_error("--load-inputs: bad entry in '%s'", spec);
            return false;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        char *colon = strrchr(item, ':');
        const char *file = colon ? colon + 1 : item;
        if (colon)
            *colon = '\0'; /* item is now the input name */
        npy_list got;
        if (!npy_load_file(file, &got, err)) {
            cli_error("--load-inputs: %s", err);
            return false;
        }
        bool ok = true;
        if (!colon) {
            for (int i = 0; ok && i < got.n; i++) {
                const npy_array *a = &got.items[i];
                ok = npy_list_add(l, a->name, a->dtype, a->rank, a->dims, a->data, a->bytes);
            }
        } else {
            /* name:file.npy renames the lone array; name:file.npz picks one */
            const npy_array *a = got.n == 1 ? &got.items[0] : npy_list_find(&got, item);
            if (!a) {
                cli_error("--load-inputs: '%s' has no array named '%s'", file, item);
                npy_list_free(&got);
                return false;
            }
            ok = npy_list_add(l, item, a->dtype, a->rank, a->dims, a->data, a->bytes);
        }
        npy_list_free(&got);
        if (!ok) {
            cli_error("out of memory");
            return false;
        }
        p = comma ? comma + 1 : p + n;
    }
    return true;
}

bool cmp_prepare_inputs(const cmp_opts *o, const kiln_network *net, npy_list *inputs) {
    npy_list loaded;
    memset(&loaded, 0, sizeof loaded);
    memset(inputs, 0, sizeof *inputs);
    if (o->load_inputs && pg_is_json(o->load_inputs)) { /* Polygraphy's input feeds */
        char err[NPY_ERR_CAP];
        if (!pg_load_inputs(o->load_inputs, &loaded, err, sizeof err)) {
            cli_error("--load-inputs: %s", err);
            return false;
        }
    } else if (o->load_inputs && !load_inputs_spec(o->load_inputs, &loaded))
        return false;
    uint64_t rng = o->seed;
    bool ok = true;
    for (int i = 0; ok && i < kiln_network_num_inputs(net); i++) {
        const char *name = kiln_network_input_name(net, i);
        kiln_dtype dt;
        int rank = -1;
        int64_t dims[KILN_MAX_DIMS];
        if (kiln_network_tensor_info(net, name, &dt, &rank, dims) != KILN_OK || rank < 0) {
            cli_error("input '%s': type or shape unknown", name);
            ok = false;
            break;
        }
        const npy_array *a = npy_list_find(&loaded, name);
        const cli_shape *s = cli_shape_find(&o->b.shapes, name);
        if (a) {
            if (a->dtype != dt || a->rank != rank) {
                cli_error("--load-inputs: '%s' is %s of rank %d; the model's input is %s of "
                          "rank %d", name, kiln_dtype_name(a->dtype), a->rank,
                          kiln_dtype_name(dt), rank);
                ok = false;
                break;
            }
            ok = npy_list_add(inputs, name, dt, rank, a->dims, a->data, a->bytes);
            continue;
        }
        if (s && rank <= 1 && kiln_builder_input_is_shape_tensor(net, name) == 1) {
            /* a shape tensor: --shapes gives its values (trtexec's meaning) */
            int64_t count = rank == 0 ? 1 : dims[0];
            if (rank == 1 && count < 0)
                count = dims[0] = s->n_vals;
            size_t es = kiln_dtype_size(dt);
            void *vals = calloc((size_t)(count > 0 ? count : 1), es ? es : 1);
            if (s->n_vals != count || !vals || !es) {
                cli_error("--shapes: shape tensor '%s' holds %lld value%s; '%s' gives %d (values "
                          "joined by x, e.g. %s:4x6; a scalar is one number)", name,
                          (long long)count, count == 1 ? "" : "s", s->raw, s->n_vals, name);
                free(vals);
                ok = false;
                break;
            }
            for (int64_t k = 0; k < count; k++)
                cli_elem_set(dt, vals, (size_t)k, s->vals[k]);
            ok = npy_list_add(inputs, name, dt, rank, dims, vals, (size_t)count * es);
            free(vals);
            continue;
        }
        if (s && !cli_spec_is_shape("--shapes", name, s)) {
            ok = false;
            break;
        }
        if (s) {
            if (s->rank != rank) {
                cli_error("--shapes: '%s' has rank %d, the model's input has rank %d", name,
                          s->rank, rank);
                ok = false;
                break;
            }
            memcpy(dims, s->dims, sizeof dims);
        }
        for (int d = 0; d < rank; d++)
            if (dims[d] < 0)
                dims[d] = 1;
        size_t n, es = kiln_dtype_size(dt);
        if (!npy_volume(rank, dims, &n) || es == 0) {
            cli_error("input '%s': cannot make %s values of this shape", name,
                      kiln_dtype_name(dt));
            ok = false;
            break;
        }
        void *data = calloc(n ? n : 1, es);
        if (!data) {
            cli_error("out of memory");
            ok = false;
            break;
        }
        npy_fill_random(dt, data, n, &o->ranges, name, &rng);
        ok = npy_list_add(inputs, name, dt, rank, dims, data, n * es);
        free(data);
    }
    npy_list_free(&loaded);
    if (ok && o->save_inputs) {
        char err[NPY_ERR_CAP];
        if (pg_is_json(o->save_inputs) ? !pg_save_inputs(o->save_inputs, inputs, err, sizeof err)
                                       : !npz_save_file(o->save_inputs, inputs, err)) {
            cli_error("--save-inputs: %s", err);
            ok = false;
        }
    }
    if (!ok)
        npy_list_free(inputs);
    return ok;
}

/* ---------------- running kiln ---------------- */

/* Inputs go to engine memory (device memory for a GPU engine) and outputs
 * come back to the host, so the same code serves every backend. */
static bool run_engine(kiln_engine *eng, const npy_list *inputs, npy_list *outputs) {
    kiln_context *ctx = NULL;
    kiln_status st = kiln_context_create(eng, &ctx);
    if (st != KILN_OK) {
        cli_kiln_error("creating an execution context", st);
        return false;
    }
    int n_io = kiln_engine_num_io_tensors(eng);
    void **bufs = calloc((size_t)n_io + 1, sizeof *bufs);
    bool ok = bufs != NULL;
    for (int i = 0; ok && i < n_io; i++) {
        const char *name = kiln_engine_io_tensor_name(eng, i);
        if (kiln_engine_tensor_io_mode(eng, name) != KILN_IO_INPUT)
            continue;
        const npy_array *a = npy_list_find(inputs, name);
        if (!a) {
            cli_error("no value for input '%s'", name);
            ok = false;
            break;
        }
        if (a->dtype != kiln_engine_tensor_dtype(eng, name)) {
            cli_error("input '%s': the value is %s, the engine wants %s", name,
                      kiln_dtype_name(a->dtype),
                      kiln_dtype_name(kiln_engine_tensor_dtype(eng, name)));
            ok = false;
            break;
        }
        if ((st = kiln_context_set_input_shape(ctx, name, a->rank, a->dims)) != KILN_OK) {
            cli_kiln_error(name, st);
            ok = false;
            break;
        }
        /* never zero-sized, so every kernel gets a valid pointer */
        if ((st = kiln_engine_alloc(eng, a->bytes + 64, &bufs[i])) != KILN_OK ||
            (a->bytes && (st = kiln_engine_copy(eng, bufs[i], a->data, a->bytes,
                                                KILN_COPY_TO_DEVICE)) != KILN_OK) ||
            /* shape tensors are read on the host, whatever the backend */
            (st = kiln_context_set_tensor_address(
                 ctx, name, kiln_engine_tensor_is_shape_input(eng, name) ? (void *)a->data : bufs[i])) !=
                KILN_OK) {
            cli_kiln_error(name, st);
            ok = false;
        }
    }
    if (ok && ((st = kiln_context_enqueue(ctx, NULL)) != KILN_OK ||
               (st = kiln_context_synchronize(ctx, NULL)) != KILN_OK)) {
        cli_kiln_error("inference", st);
        ok = false;
    }
    memset(outputs, 0, sizeof *outputs);
    for (int i = 0; ok && i < n_io; i++) {
        const char *name = kiln_engine_io_tensor_name(eng, i);
        if (kiln_engine_tensor_io_mode(eng, name) != KILN_IO_OUTPUT)
            continue;
        int64_t dims[KILN_MAX_DIMS];
        int rank = kiln_context_tensor_shape(ctx, name, dims);
        kiln_dtype dt = kiln_engine_tensor_dtype(eng, name);
        size_t n;
        if (rank < 0 || !npy_volume(rank, dims, &n) || kiln_dtype_size(dt) == 0) {
            cli_error("output '%s': shape or type unknown after the run: %s", name,
                      kiln_last_error());
            ok = false;
            break;
        }
        const void *data = kiln_context_tensor_address(ctx, name);
        size_t bytes = n * kiln_dtype_size(dt);
        void *host = malloc(bytes ? bytes : 1);
        if (!host || (!data && bytes)) {
            cli_error(host ? "output '%s': no data after the run" : "out of memory", name);
            free(host);
            ok = false;
            break;
        }
        if (bytes && (st = kiln_engine_copy(eng, host, data, bytes, KILN_COPY_TO_HOST)) !=
                         KILN_OK) {
            cli_kiln_error(name, st);
            free(host);
            ok = false;
            break;
        }
        ok = npy_list_add(outputs, name, dt, rank, dims, host, bytes);
        free(host);
    }
    kiln_context_destroy(ctx);
    for (int i = 0; bufs && i < n_io; i++)
        if (bufs[i])
            kiln_engine_free(eng, bufs[i]);
    free(bufs);
    if (!ok)
        npy_list_free(outputs);
    return ok;
}

bool cmp_run_kiln(const cmp_opts *o, const kiln_network *net, bool reference,
                  const npy_list *inputs, npy_list *outputs) {
    kiln_builder_config *cfg = NULL;
    kiln_status st = kiln_builder_config_create(&cfg);
    if (st != KILN_OK) {
        cli_kiln_error("builder config", st);
        return false;
    }
    uint32_t flags = o->b.flags;
    if (reference)
        flags = KILN_BUILDER_FLAG_REF_TACTICS | KILN_BUILDER_FLAG_NO_FUSION |
                KILN_BUILDER_FLAG_NO_TIMING;
    kiln_builder_config_set_flags(cfg, flags);
    kiln_builder_config_set_workspace_limit(cfg, o->b.workspace);
    kiln_builder_config_set_threads(cfg, o->b.threads);
    bool ok = true;
    if (!reference && o->b.backend &&
        (st = kiln_builder_config_set_backend(cfg, o->b.backend)) != KILN_OK) {
        cli_kiln_error("--backend", st);
        ok = false;
    }
    for (int i = 0; ok && !reference && i < o->n_lprec; i++)
        if ((st = kiln_builder_config_set_layer_precision(cfg, o->lprec[i].name,
                                                          o->lprec[i].dtype)) != KILN_OK) {
            cli_kiln_error("--layerPrecisions", st);
            ok = false;
        }
    int prof = 0;
    if (ok && (st = kiln_builder_config_add_profile(cfg, &prof)) != KILN_OK) {
        cli_kiln_error("profile", st);
        ok = false;
    }
    for (int i = 0; ok && i < inputs->n; i++) {
        const npy_array *a = &inputs->items[i];
        if ((st = kiln_builder_config_set_shape(cfg, prof, a->name, a->rank, a->dims, a->dims,
                                                a->dims)) != KILN_OK) {
            cli_kiln_error(a->name, st);
            ok = false;
        }
        /* a shape tensor (or an integer input that may be one): its values */
        if (ok && (kiln_builder_input_is_shape_tensor(net, a->name) == 1 ||
                   (!cli_dtype_is_float(a->dtype) && a->bytes <= 64 * 8))) {
            size_t n;
            if (npy_volume(a->rank, a->dims, &n) &&
                (st = kiln_builder_config_set_input_values(cfg, prof, a->name, a->dtype, n,
                                                           a->data, a->data, a->data)) !=
                    KILN_OK) {
                cli_kiln_error(a->name, st);
                ok = false;
            }
        }
    }
    void *plan = NULL;
    size_t size = 0;
    if (ok && (st = kiln_build_serialized(net, cfg, &plan, &size)) != KILN_OK) {
        cli_kiln_error(reference ? "building the reference engine" : "building the engine", st);
        ok = false;
    }
    kiln_builder_config_destroy(cfg);
    kiln_engine *eng = NULL;
    if (ok && (st = kiln_engine_load(plan, size, &eng)) != KILN_OK) {
        cli_kiln_error("loading the built plan", st);
        ok = false;
    }
    kiln_free(plan);
    if (ok)
        ok = run_engine(eng, inputs, outputs);
    kiln_engine_destroy(eng);
    return ok;
}

bool cmp_run_plan(const char *plan, const npy_list *inputs, npy_list *outputs) {
    kiln_engine *eng = NULL;
    kiln_status st = kiln_engine_load_file(plan, &eng);
    if (st != KILN_OK) {
        cli_kiln_error(plan, st);
        return false;
    }
    bool ok = run_engine(eng, inputs, outputs);
    kiln_engine_destroy(eng);
    return ok;
}

/* ---------------- subprocesses ---------------- */

const char *cmp_self_exe(void) {
    static char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

int cmp_spawn(char *const argv[], bool quiet) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (quiet) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

char **cmp_split_words(const char *s, int *n) {
    size_t len = strlen(s);
    char **w = calloc(len / 2 + 2, sizeof *w);
    char *buf = malloc(len + 1);
    *n = 0;
    if (!w || !buf) {
        free(w);
        free(buf);
        return NULL;
    }
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        size_t k = 0;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') {
            if (*p == '\'' || *p == '"') {
                char q = *p++;
                while (*p && *p != q)
                    buf[k++] = *p++;
                if (*p)
                    p++;
            } else {
                buf[k++] = *p++;
            }
        }
        buf[k] = '\0';
        w[(*n)++] = strdup(buf);
    }
    free(buf);
    return w;
}

void cmp_words_free(char **w, int n) {
    for (int i = 0; w && i < n; i++)
        free(w[i]);
    free(w);
}

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* scripts/ort_reference.py: $KILN_ORT_SCRIPT, else found walking up from
 * the executable's folder (build trees sit inside the repository). *root
 * gets the repository folder. */
static bool find_script(char *script, size_t cap, char *root, size_t rcap) {
    const char *env = getenv("KILN_ORT_SCRIPT");
    if (env && *env) {
        snprintf(script, cap, "%s", env);
        snprintf(root, rcap, ".");
        return is_file(script);
    }
    char dir[2048];
    snprintf(dir, sizeof dir, "%.2000s", cmp_self_exe());
    for (int up = 0; up < 5; up++) {
        char *slash = strrchr(dir, '/');
        if (!slash)
            break;
        *slash = '\0';
        snprintf(script, cap, "%s/scripts/ort_reference.py", dir);
        if (is_file(script)) {
            snprintf(root, rcap, "%.2000s", dir);
            return true;
        }
    }
    return false;
}

static void python_path(const char *root, char *py, size_t cap) {
    const char *env = getenv("KILN_PYTHON");
    if (env && *env) {
        snprintf(py, cap, "%s", env);
        return;
    }
    snprintf(py, cap, "%s/.venv/bin/python", root);
    if (!is_file(py))
        snprintf(py, cap, "python3");
}

int cmp_run_ort(const char *model, const npy_list *inputs, const char *const *names, int n_names,
                npy_list *outputs) {
    char script[4096], root[2048], py[4096], err[NPY_ERR_CAP];
    if (!find_script(script, sizeof script, root, sizeof root)) {
        cli_vlog("scripts/ort_reference.py not found (set KILN_ORT_SCRIPT)");
        return 3;
    }
    python_path(root, py, sizeof py);
    char tmpl[] = "/tmp/kiln-compare-XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir) {
        cli_error("cannot make a temporary folder: %s", strerror(errno));
        return 1;
    }
    char in[4200], out[4200], lst[4200];
    snprintf(in, sizeof in, "%s/inputs.npz", dir);
    snprintf(out, sizeof out, "%s/outputs.npz", dir);
    snprintf(lst, sizeof lst, "%s/names.txt", dir);
    int rc = 1;
    if (!npz_save_file(in, inputs, err)) {
        cli_error("%s", err);
        goto done;
    }
    char *argv[8] = {py, script, (char *)model, in, out, NULL, NULL, NULL};
    if (names) {
        FILE *f = fopen(lst, "w");
        if (!f) {
            cli_error("cannot write '%s'", lst);
            goto done;
        }
        for (int i = 0; i < n_names; i++)
            fprintf(f, "%s\n", names[i]);
        fclose(f);
        argv[5] = "--outputs";
        argv[6] = lst;
    }
    cli_vlog("reference: %s %s %s", py, script, model);
    int st = cmp_spawn(argv, false);
    if (st == 3 || st == 127 || st < 0) {
        rc = 3;
        goto done;
    }
    if (st != 0) {
        cli_error("onnxruntime reference failed (exit status %d)", st);
        goto done;
    }
    if (!npy_load_file(out, outputs, err)) {
        cli_error("reading the reference outputs: %s", err);
        goto done;
    }
    rc = 0;
done:
    unlink(in);
    unlink(out);
    unlink(lst);
    rmdir(dir);
    return rc;
}

/* The first node of net whose op a registered plugin creator implements
 * (onnxruntime cannot run it), or NULL. */
static const char *plugin_layer(const kiln_network *net) {
    for (int i = 0; net && i < kiln_network_num_nodes(net); i++) {
        const char *op = kiln_network_node_op_type(net, i);
        for (int j = 0; op && j < kiln_plugin_count(); j++) {
            const kiln_plugin_creator *c = kiln_plugin_at(j, NULL);
            if (c && c->name && strcmp(c->name, op) == 0)
                return kiln_network_node_name(net, i);
        }
    }
    return NULL;
}

bool cmp_run_reference(const cmp_opts *o, const kiln_network *net, const npy_list *inputs,
                       const char *const *names, int n_names, npy_list *outputs,
                       const char **used) {
    const char *model = o->ref_model ? o->ref_model : o->model;
    const char *plug = o->reference == CMP_REF_AUTO ? plugin_layer(net) : NULL;
    if (plug)
        cli_warn("layer '%s' is a plugin, which onnxruntime cannot run; the reference is kiln's "
                 "reference kernels (no fusion, FP32; plugin layers run the plugin's own code, "
                 "--reference=onnxruntime to insist)", plug);
    if (o->reference != CMP_REF_KILN && !plug) {
        if (!model) {
            cli_error("onnxruntime needs the ONNX model (--model with --plan)");
            return false;
        }
        int rc = cmp_run_ort(model, inputs, names, n_names, outputs);
        if (rc == 0) {
            *used = "onnxruntime";
            return true;
        }
        if (rc == 1 || o->reference == CMP_REF_ORT) {
            if (rc == 3)
                cli_error("--reference=onnxruntime: onnxruntime cannot be imported");
            return false;
        }
        cli_warn("onnxruntime is not available; the reference is kiln's reference kernels "
                 "(no fusion, FP32)");
    }
    if (!net) {
        cli_error("the kiln reference needs the ONNX model (--model)");
        return false;
    }
    *used = "kiln-reference";
    return cmp_run_kiln(o, net, true, inputs, outputs);
}

/* ---------------- comparison ---------------- */

static const char *stat_name(cmp_stat s) {
    static const char *const n[] = {"elemwise", "max", "mean", "median"};
    return n[s];
}

static bool cmp_silent_flag;

void cmp_set_silent(bool silent) { cmp_silent_flag = silent; }

/* The statistic the verdict used (not elemwise). */
static double pick(const kiln_compare_result *r, cmp_stat st, bool rel) {
    if (st == CMP_MAX)
        return rel ? r->max_rel : r->max_abs;
    if (st == CMP_MEAN)
        return rel ? r->mean_rel : r->mean_abs;
    return rel ? r->median_rel : r->median_abs;
}

/* The report of one output; the numbers are kiln_compare_tensors' (the
 * library's, shared with Python's kiln.compare). */
bool cmp_tensor(const cmp_opts *o, const char *name, const npy_array *got, const npy_array *ref,
                bool quiet) {
    quiet = quiet || cmp_silent_flag;
    kiln_compare_options co = {tol_get(&o->atol, name, 1e-5), tol_get(&o->rtol, name, 1e-5),
                               (kiln_compare_stat)o->stat, o->quantile};
    double atol = co.atol, rtol = co.rtol;
    char gd[128], rd[128];
    cli_format_dims(gd, sizeof gd, got->rank, got->dims);
    cli_format_dims(rd, sizeof rd, ref->rank, ref->dims);
    kiln_compare_result r;
    if (kiln_compare_tensors(got, ref, &co, &r) != KILN_OK) {
        if (!cmp_silent_flag)
            cli_error("FAIL '%s': %s", name, kiln_last_error());
        return false;
    }
    if (!r.same_shape) {
        if (!cmp_silent_flag)
            cli_error("FAIL '%s': shape %s from kiln, %s from the reference", name,
                      got->rank ? gd : "scalar", ref->rank ? rd : "scalar");
        return false;
    }
    size_t n = r.count;
    if (!quiet) {
        cli_info("Output '%s' (%s %s, reference %s):", name, kiln_dtype_name(got->dtype),
                 got->rank ? gd : "scalar", kiln_dtype_name(ref->dtype));
        if (r.finite_got)
            cli_info("    kiln:      mean=%.6g min=%.6g max=%.6g (finite values)", r.mean_got,
                     r.min_got, r.max_got);
        if (r.finite_ref)
            cli_info("    reference: mean=%.6g min=%.6g max=%.6g (finite values)", r.mean_ref,
                     r.min_ref, r.max_ref);
        cli_info("    abs error: max=%.6g mean=%.6g median=%.6g q%g=%.6g", r.max_abs, r.mean_abs,
                 r.median_abs, o->quantile, r.quantile_abs);
        cli_info("    rel error: max=%.6g mean=%.6g median=%.6g q%g=%.6g", r.max_rel, r.mean_rel,
                 r.median_rel, o->quantile, r.quantile_rel);
        cli_info("    NaN: kiln %zu, reference %zu; Inf: kiln %zu, reference %zu", r.nan_got,
                 r.nan_ref, r.inf_got, r.inf_ref);
        if (n && r.max_abs > 0)
            cli_info("    largest abs error at element %zu: kiln %.9g, reference %.9g",
                     r.worst_index, r.worst_got, r.worst_ref);
    }
    if (r.passed) {
        if (!quiet)
            cli_info("    PASS '%s' (%s: atol=%g rtol=%g)", name, stat_name(o->stat), atol, rtol);
    } else if (o->stat == CMP_ELEMWISE) {
        if (!cmp_silent_flag)
            cli_error("FAIL '%s': %zu of %zu elements are over both atol=%g and rtol=%g (max "
                      "abs error %.6g, max rel error %.6g)",
                      name, r.mismatches, n, atol, rtol, r.max_abs, r.max_rel);
    } else {
        if (!cmp_silent_flag)
            cli_error("FAIL '%s': %s abs error %.6g > atol=%g and %s rel error %.6g > rtol=%g",
                      name, stat_name(o->stat), pick(&r, o->stat, false), atol,
                      stat_name(o->stat), pick(&r, o->stat, true), rtol);
    }
    return r.passed;
}

/* ---------------- the command ---------------- */

/* Every tensor a node produces, in node (topological) order, after the
 * graph's outputs; *n gets the count. Names are borrowed from net. */
static const char **all_tensor_names(const kiln_network *net, int *n) {
    int cap = kiln_network_num_outputs(net) + 1;
    for (int i = 0; i < kiln_network_num_nodes(net); i++)
        cap += kiln_network_node_num_outputs(net, i);
    const char **names = calloc((size_t)cap, sizeof *names);
    *n = 0;
    if (!names)
        return NULL;
    for (int i = 0; i < kiln_network_num_nodes(net); i++)
        for (int j = 0; j < kiln_network_node_num_outputs(net, i); j++) {
            const char *t = kiln_network_node_output(net, i, j);
            if (t && *t)
                names[(*n)++] = t;
        }
    return names;
}

static int node_of(const kiln_network *net, const char *tensor) {
    for (int i = 0; i < kiln_network_num_nodes(net); i++)
        for (int j = 0; j < kiln_network_node_num_outputs(net, i); j++)
            if (strcmp(kiln_network_node_output(net, i, j), tensor) == 0)
                return i;
    return -1;
}

static int compare_main(int argc, char **argv);

int cli_cmd_compare(int argc, char **argv) {
    /* Polygraphy's spellings (--atol 1e-2, --input-shapes x:[1,3], --trt) */
    int pg_argc = 0;
    char **pg_argv = pg_normalize_args(argc, argv, &pg_argc);
    if (!pg_argv)
        return compare_main(argc, argv);
    int rc = compare_main(pg_argc, pg_argv);
    for (int i = 0; i < pg_argc; i++)
        free(pg_argv[i]);
    free(pg_argv);
    return rc;
}

static int compare_main(int argc, char **argv) {
    cmp_opts o;
    cmp_opts_init(&o);
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        const char *name, *value;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            cli_compare_usage(stdout);
            cmp_opts_free(&o);
            return 0;
        }
        if (!cli_split_flag(argv[i], &name, &value)) {
            if (o.model) {
                cli_error("unexpected argument '%s' (one model; flags look like --name=value)",
                          argv[i]);
                goto out;
            }
            o.model = argv[i];
            continue;
        }
        int r = cmp_flag(&o, name, value);
        if (r < 0)
            goto out;
        if (r == 0) {
            cli_error("unknown flag '%s' (see kiln compare --help)", name);
            goto out;
        }
    }
    if (o.plan && o.model && !o.ref_model) {
        o.ref_model = o.model; /* kiln compare --plan=p.kiln model.onnx */
        o.model = NULL;
    }
    if (o.plan && o.model) {
        cli_error("give the model once: --plan=PLAN --model=MODEL");
        goto out;
    }
    if (!o.model && !o.plan) {
        cli_error("nothing to compare: give MODEL.onnx (or --plan=PLAN.kiln --model=MODEL.onnx)");
        goto out;
    }
    if (o.plan && o.all_tensors) {
        cli_error("--all-tensors needs the model built here, not a --plan");
        goto out;
    }
    cli_install_logger(cli_verbose);
    rc = 3; /* errors; 1 is kept for a comparison that fails */
    kiln_network *net = NULL, *ref_net = NULL;
    npy_list inputs, got, ref;
    memset(&inputs, 0, sizeof inputs);
    memset(&got, 0, sizeof got);
    memset(&ref, 0, sizeof ref);
    const char **names = NULL;
    int n_names = 0;
    kiln_status st;
    if (o.model && (st = kiln_onnx_parse_file(o.model, &net)) != KILN_OK) {
        cli_kiln_error(o.model, st);
        goto done;
    }
    if (o.ref_model && (st = kiln_onnx_parse_file(o.ref_model, &ref_net)) != KILN_OK) {
        cli_kiln_error(o.ref_model, st);
        goto done;
    }
    const kiln_network *in_net = net ? net : ref_net; /* whose inputs to make */
    if (o.all_tensors) {
        names = all_tensor_names(net, &n_names);
        for (int i = 0; names && i < n_names; i++)
            if ((st = kiln_network_mark_output(net, names[i])) != KILN_OK) {
                cli_kiln_error(names[i], st);
                goto done;
            }
        for (int i = 0; ref_net && names && i < n_names; i++)
            if (kiln_network_mark_output(ref_net, names[i]) != KILN_OK)
                cli_vlog("reference model has no tensor '%s'", names[i]);
    }
    if (!in_net && !o.load_inputs) {
        cli_error("--plan without --model needs --load-inputs");
        goto done;
    }
    if (in_net && !cmp_prepare_inputs(&o, in_net, &inputs))
        goto done;
    if (!in_net && pg_is_json(o.load_inputs)) {
        char err[NPY_ERR_CAP];
        if (!pg_load_inputs(o.load_inputs, &inputs, err, sizeof err)) {
            cli_error("--load-inputs: %s", err);
            goto done;
        }
    } else if (!in_net && !load_inputs_spec(o.load_inputs, &inputs))
        goto done;
    for (int i = 0; i < inputs.n; i++) {
        char dims[128];
        cli_format_dims(dims, sizeof dims, inputs.items[i].rank, inputs.items[i].dims);
        cli_vlog("input '%s': %s %s", inputs.items[i].name,
                 kiln_dtype_name(inputs.items[i].dtype), dims);
    }
    double t0 = cli_now_s();
    bool ok = o.plan ? cmp_run_plan(o.plan, &inputs, &got)
                     : cmp_run_kiln(&o, net, false, &inputs, &got);
    if (!ok)
        goto done;
    cli_info("kiln ran in %.3f s", cli_now_s() - t0);
    const char *used = "saved results";
    t0 = cli_now_s();
    char pg_runner_name[256] = "";
    if (o.load_results && pg_is_json(o.load_results)) { /* polygraphy run --save-results */
        char err[NPY_ERR_CAP];
        if (!pg_load_results(o.load_results, &ref, pg_runner_name, sizeof pg_runner_name, err,
                             sizeof err)) {
            cli_error("--load-results: %s", err);
            goto done;
        }
        cli_info("reference: runner '%s' of %s (Polygraphy results)", pg_runner_name,
                 o.load_results);
    } else if (o.load_results) {
        char err[NPY_ERR_CAP];
        if (!npy_load_file(o.load_results, &ref, err)) {
            cli_error("--load-results: %s", err);
            goto done;
        }
    } else if (!cmp_run_reference(&o, ref_net ? ref_net : net, &inputs, names, n_names, &ref,
                                  &used)) {
        goto done;
    }
    cli_info("reference (%s) ready in %.3f s", used, cli_now_s() - t0);
    if (o.save_results && pg_is_json(o.save_results)) { /* Polygraphy's RunResults */
        char err[NPY_ERR_CAP];
        /* the reference first (what a later --load-results compares with),
           then kiln's outputs, as `polygraphy run --trt --onnxrt` saves both */
        pg_runner runners[2] = {
            {strcmp(used, "onnxruntime") == 0 ? "onnxrt-runner"
             : strcmp(used, "saved results") == 0 ? "loaded-runner" : "kiln-reference-runner",
             &ref},
            {"kiln-runner", &got}};
        if (!pg_save_results(o.save_results, runners, 2, err, sizeof err)) {
            cli_error("--save-results: %s", err);
            goto done;
        }
        cli_info("Saved the reference's and kiln's outputs to %s (Polygraphy RunResults JSON)",
                 o.save_results);
    } else if (o.save_results) {
        char err[NPY_ERR_CAP];
        if (!npz_save_file(o.save_results, &ref, err)) {
            cli_error("--save-results: %s", err);
            goto done;
        }
        cli_info("Saved the reference outputs to %s", o.save_results);
    }
    int fails = 0, compared = 0;
    const char *first_fail = NULL;
    if (o.all_tensors) {
        /* every intermediate in topological order: one line each */
        for (int i = 0; i < n_names; i++) {
            const npy_array *g = npy_list_find(&got, names[i]);
            const npy_array *r = npy_list_find(&ref, names[i]);
            if (!g || !r) {
                cli_warn("tensor '%s': missing from %s; not compared", names[i],
                         g ? "the reference" : "kiln's outputs");
                continue;
            }
            compared++;
            bool pass = cmp_tensor(&o, names[i], g, r, true);
            int node = node_of(net, names[i]);
            if (!o.quiet)
                cli_info("  %s  %-40s (%s '%s')", pass ? "PASS" : "FAIL", names[i],
                         node >= 0 ? kiln_network_node_op_type(net, node) : "?",
                         node >= 0 ? kiln_network_node_name(net, node) : "?");
            if (!pass && !first_fail)
                first_fail = names[i];
            fails += !pass;
        }
        if (first_fail) {
            int node = node_of(net, first_fail);
            cli_error("First tensor out of tolerance (topological order): '%s', produced by "
                      "node '%s' (%s)",
                      first_fail, node >= 0 ? kiln_network_node_name(net, node) : "?",
                      node >= 0 ? kiln_network_node_op_type(net, node) : "?");
            cmp_tensor(&o, first_fail, npy_list_find(&got, first_fail),
                       npy_list_find(&ref, first_fail), false);
        }
    } else {
        for (int i = 0; i < got.n; i++) {
            const npy_array *r = npy_list_find(&ref, got.items[i].name);
            if (!r) {
                cli_error("FAIL '%s': the reference has no output of that name",
                          got.items[i].name);
                fails++;
                continue;
            }
            compared++;
            fails += !cmp_tensor(&o, got.items[i].name, &got.items[i], r, o.quiet);
        }
    }
    if (fails == 0 && compared > 0) {
        cli_info("PASSED: kiln compare: %d tensor(s) within tolerance (kiln vs %s)", compared,
                 used);
        rc = 0;
    } else {
        cli_error("FAILED: kiln compare: %d of %d tensor(s) out of tolerance (kiln vs %s)", fails,
                  compared, used);
        rc = 1;
    }
done:
    free(names);
    npy_list_free(&inputs);
    npy_list_free(&got);
    npy_list_free(&ref);
    kiln_network_destroy(net);
    kiln_network_destroy(ref_net);
out:
    cmp_opts_free(&o);
    return rc;
}
