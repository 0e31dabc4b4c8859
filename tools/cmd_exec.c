/* cmd_exec.c - `kiln exec`: build an ONNX model into a plan (or load one),
 * run it on generated or loaded inputs and report the build time and a
 * performance summary. Flag names and meanings follow trtexec. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "exec.h"
#include "npy.h"

typedef struct exec_opts {
    cli_build_opts b;
    const char *save_engine, *load_engine;
    const char *load_inputs, *export_output, *export_profile, *export_layer_info;
    exec_timing run;            /* the timed runs' flags (graphs: -1 = library default) */
    bool time_deserialize;
    int device;                 /* --device: -1 = not given */
    bool skip_inference, plan_version_only, separate_profile;
    bool dump_output, dump_profile, dump_layer_info;
    uint64_t seed;
    npy_range_list ranges;  /* --val-range */
} exec_opts;

void cli_exec_usage(FILE *f) {
    fputs(
        "Usage: kiln exec [flags]\n"
        "\n"
        "Build an ONNX model into a plan (or load a plan), run it and report a\n"
        "performance summary. Flag names and meanings follow trtexec.\n"
        "\n"
        "Model and plan:\n"
        "  --onnx=FILE               ONNX model to build\n"
        "  --saveEngine=FILE         write the built plan to FILE\n"
        "  --loadEngine=FILE         load a plan instead of building\n"
        "  --getPlanVersionOnly      with --loadEngine: print the plan header (version,\n"
        "                            backend, target, libraries) and stop\n"
        "\n"
        "Build:\n"
        "  --minShapes=SPEC          minimum shapes of a profile; SPEC = name:1x3x224x224,...\n"
        "  --optShapes=SPEC          shapes the profile is tuned for\n"
        "  --maxShapes=SPEC          maximum shapes of a profile\n"
        "                            (repeat the three flags for more profiles)\n"
        "  --shapes=SPEC             shapes to run with; also the build profile when no\n"
        "                            min/opt/max shapes are given\n"
        "  --memPoolSize=workspace:N largest scratch memory per layer; N in MiB unless a\n"
        "                            B/K/M/G suffix is given (e.g. workspace:64M)\n"
        "  --threads=N               CPU threads (0 = one per core; kiln addition)\n"
        "  --backend=cpu|cuda        backend to build for (default cpu; kiln addition)\n"
        "  --fp16 --bf16 --tf32      allow FP16 / BF16 / TF32: each layer is timed in FP32\n"
        "                            and the allowed types (casts included) and keeps the\n"
        "                            fastest (kiln inspect shows the choice); to force a\n"
        "                            type: --layerPrecisions=*:fp16 --precisionConstraints=obey\n"
        "  --noTF32 --best           disallow TF32 / allow every precision\n"
        "  --fp16Accumulation        FP16 matrix products may accumulate in FP16 where it\n"
        "                            times faster (CUDA; kiln addition; float otherwise)\n"
        "  --noFusion                keep every layer as it is (kiln addition)\n"
        "  --stronglyTyped           layers run in the network's own types (no --fp16/--bf16/\n"
        "                            --tf32 or --layerPrecisions)\n"
        "  --builderOptimizationLevel=N  0 (no timing) to 5 (longest timing); default 3\n"
        "  --channelsLast            convolutions on NHWC activations on every backend (kiln\n"
        "                            addition; CUDA does it for FP16/BF16 convolutions anyway)\n"
        "  --noTiming                choose tactics by rule, time nothing (kiln addition)\n"
        "  --refTactics              every layer on its reference kernel (kiln addition)\n"
        "  --timingCacheFile=FILE    read tactic timings from FILE and write new ones to it\n"
        "  --profilingVerbosity=L    layer_names_only, detailed or none: accepted; kiln plans\n"
        "                            always carry layer names, ops and tactics\n"
        "  --sparsity=disable        accepted; enable/force are not supported\n"
        "  --int8                    allow INT8 layers: a model with Q/DQ builds them where\n"
        "                            the graph places them (with or without the flag); a\n"
        "                            model without Q/DQ is quantized by --calib\n"
        "  --fp8                     allow FP8 E4M3 layers (GPU: sm_89+): a model with float8\n"
        "                            Q/DQ builds them where it places them; a float model\n"
        "                            needs --calib (FP8 scale = threshold / 448)\n"
        "  --calib=DIR|FILE          INT8 / FP8 calibration: DIR holds batches (.npz, arrays named\n"
        "                            by input; .npy for a one-input model), FILE is a cache\n"
        "  --calibAlgo=A             entropy (default), minmax or percentile\n"
        "  --calibPercentile=P       the percentile calibrator's P (default 99.99)\n"
        "  --calibCache=FILE         where --calib=DIR writes the cache (DIR/calibration.cache)\n"
        "  --layerPrecisions=SPEC    per-layer precision, forced; SPEC = layer:fp32|fp16|bf16,...\n"
        "                            (* is every layer no other entry names)\n"
        "  --precisionConstraints=none|prefer|obey   none ignores --layerPrecisions\n"
        "  --inputIOFormats=SPEC     types the plan's inputs are bound in; SPEC =\n"
        "                            type[:chw],... one per input in order, or one for\n"
        "                            all (fp32, fp16, bf16 for float inputs)\n"
        "  --outputIOFormats=SPEC    the same for outputs (e.g. fp16:chw with --fp16:\n"
        "                            no conversion back to fp32)\n"
        "\n"
        "Inference:\n"
        "  --profile=N               optimization profile to run with (default 0)\n"
        "  --loadInputs=SPEC         input files; SPEC = name:file,... where a file is\n"
        "                            raw binary, .npy, or .npz (the array of that name)\n"
        "                            (default: random inputs, fixed seed)\n"
        "  --seed=N                  seed of the random inputs (default 1; kiln addition)\n"
        "  --val-range=[lo,hi] | name:[lo,hi],...  range of random values (floats\n"
        "                            default [-1,1), integers [0,1]; kiln addition)\n"
        "  --iterations=N            run at least N timed iterations a stream (default 10)\n"
        "  --warmUp=MS               warm up for MS milliseconds first (default 200; at\n"
        "                            least one run, which also gives the output sizes)\n"
        "  --duration=S              run for at least S seconds (default 3; 0 = just\n"
        "                            the iterations)\n"
        "  --infStreams=N            run N execution contexts at once, each on a stream\n"
        "                            and a host thread of its own (default 1; --streams=N\n"
        "                            is the same)\n"
        "  --noDataTransfers         no input copies in and output copies out in the\n"
        "                            timed iterations (by default each one copies both)\n"
        "  --useSpinWait             poll for an iteration's end instead of sleeping\n"
        "  --idleTime=MS             sleep MS milliseconds between two iterations\n"
        "  --avgRuns=N               print the average of every N consecutive iterations\n"
        "                            (default 10; printed with --verbose or when given)\n"
        "  --percentile=P[,P...]     latency percentiles to report (default 90,95,99)\n"
        "  --skipInference           build (and save) only\n"
        "  --separateProfileRun      time the layers in a separate run, not the timed one\n"
        "  --device=N                run on GPU N (sets CUDA_VISIBLE_DEVICES for this\n"
        "                            process, counting within one already set)\n"
        "  --timeDeserialize         time loading the plan (deserialization) and stop\n"
        "  --useCudaGraph            capture and replay device graphs (GPU; kiln's default)\n"
        "  --noCudaGraph             launch every layer on every run (GPU)\n"
        "\n"
        "Reports:\n"
        "  --exportOutput=FILE       write output tensors as JSON, or .npz by extension\n"
        "  --exportProfile=FILE      write per-layer times as JSON\n"
        "  --exportTimes=FILE        write every timed iteration's times as JSON\n"
        "  --exportLayerInfo=FILE    write the layers and the memory plan as JSON\n"
        "  --dumpOutput              print output tensors\n"
        "  --dumpProfile             print per-layer times\n"
        "  --dumpLayerInfo           print the layers after fusion\n"
        "  --verbose                 print the library's detailed log\n"
        "  --help                    this text\n",
        f);
}

/* ---- argument parsing ---- */

static bool parse_percentiles(const char *flag, const char *value, exec_opts *o) {
    if (!cli_need_value(flag, value))
        return false;
    o->run.n_percentiles = 0;
    const char *p = value;
    while (*p) {
        char buf[32];
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 0 || n >= sizeof buf) {
            cli_error("%s: bad list '%s' (expected e.g. 90,95,99)", flag, value);
            return false;
        }
        if (o->run.n_percentiles == EXEC_MAX_PERCENTILES) {
            cli_error("%s: at most %d percentiles", flag, EXEC_MAX_PERCENTILES);
            return false;
        }
        memcpy(buf, p, n);
        buf[n] = '\0';
        if (!cli_parse_double(flag, buf, 0.0, 100.0, &o->run.percentiles[o->run.n_percentiles]))
            return false;
        o->run.n_percentiles++;
        p = comma ? comma + 1 : p + n;
    }
    return true;
}

/* Returns 0 to go on, else the exit code (help: 0 via *stop). */
static int parse_args(int argc, char **argv, exec_opts *o, bool *stop) {
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *name, *value;
        if (strcmp(arg, "-h") == 0) {
            cli_exec_usage(stdout);
            *stop = true;
            return 0;
        }
        if (!cli_split_flag(arg, &name, &value)) {
            cli_error("unexpected argument '%s' (flags look like --name=value; see kiln exec "
                      "--help)",
                      arg);
            return 2;
        }
        int r = cli_build_flag(&o->b, name, value);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        long long n;
        bool ok = true;
        if (strcmp(name, "--help") == 0) {
            cli_exec_usage(stdout);
            *stop = true;
            return 0;
        } else if (strcmp(name, "--onnx") == 0) {
            ok = cli_need_value(name, value);
            o->b.onnx = value;
        } else if (strcmp(name, "--saveEngine") == 0) {
            ok = cli_need_value(name, value);
            o->save_engine = value;
        } else if (strcmp(name, "--loadEngine") == 0) {
            ok = cli_need_value(name, value);
            o->load_engine = value;
        } else if (strcmp(name, "--loadInputs") == 0) {
            ok = cli_need_value(name, value);
            o->load_inputs = value;
            o->b.load_inputs = value; /* also a shape tensor's values for the build */
        } else if (strcmp(name, "--exportOutput") == 0) {
            ok = cli_need_value(name, value);
            o->export_output = value;
        } else if (strcmp(name, "--exportProfile") == 0) {
            ok = cli_need_value(name, value);
            o->export_profile = value;
        } else if (strcmp(name, "--exportTimes") == 0) {
            ok = cli_need_value(name, value);
            o->run.export_times = value;
        } else if (strcmp(name, "--infStreams") == 0 || strcmp(name, "--streams") == 0) {
            ok = cli_parse_int(name, value, 1, 256, &n);
            o->run.streams = (int)n;
        } else if (strcmp(name, "--avgRuns") == 0) {
            ok = cli_parse_int(name, value, 1, 1000000, &n);
            o->run.avg_runs = (int)n;
            o->run.avg_runs_given = true;
        } else if (strcmp(name, "--idleTime") == 0) {
            ok = cli_parse_double(name, value, 0.0, 1e6, &o->run.idle_ms);
        } else if (strcmp(name, "--exportLayerInfo") == 0) {
            ok = cli_need_value(name, value);
            o->export_layer_info = value;
        } else if (strcmp(name, "--iterations") == 0) {
            ok = cli_parse_int(name, value, 1, 1000000000LL, &n);
            o->run.iterations = n;
        } else if (strcmp(name, "--warmUp") == 0) {
            ok = cli_parse_double(name, value, 0.0, 1e9, &o->run.warmup_ms);
        } else if (strcmp(name, "--duration") == 0) {
            ok = cli_parse_double(name, value, 0.0, 1e7, &o->run.duration_s);
        } else if (strcmp(name, "--profile") == 0) {
            ok = cli_parse_int(name, value, 0, 1 << 20, &n);
            o->run.profile_index = (int)n;
        } else if (strcmp(name, "--val-range") == 0) {
            char err[NPY_ERR_CAP];
            ok = cli_need_value(name, value) && npy_parse_ranges(value, &o->ranges, err);
            if (!ok && value && *value)
                cli_error("%s", err);
        } else if (strcmp(name, "--seed") == 0) {
            ok = cli_parse_int(name, value, 0, INT64_MAX, &n);
            o->seed = (uint64_t)n;
        } else if (strcmp(name, "--percentile") == 0) {
            ok = parse_percentiles(name, value, o);
        } else if (strcmp(name, "--skipInference") == 0) {
            ok = cli_no_value(name, value);
            o->skip_inference = true;
        } else if (strcmp(name, "--getPlanVersionOnly") == 0) {
            ok = cli_no_value(name, value);
            o->plan_version_only = true;
        } else if (strcmp(name, "--separateProfileRun") == 0) {
            ok = cli_no_value(name, value);
            o->separate_profile = true;
        } else if (strcmp(name, "--dumpOutput") == 0) {
            ok = cli_no_value(name, value);
            o->dump_output = true;
        } else if (strcmp(name, "--dumpProfile") == 0) {
            ok = cli_no_value(name, value);
            o->dump_profile = true;
        } else if (strcmp(name, "--dumpLayerInfo") == 0) {
            ok = cli_no_value(name, value);
            o->dump_layer_info = true;
        } else if (strcmp(name, "--verbose") == 0) {
            ok = cli_no_value(name, value);
            cli_verbose = true;
        } else if (strcmp(name, "--useCudaGraph") == 0 || strcmp(name, "--noCudaGraph") == 0) {
            ok = cli_no_value(name, value);
            o->run.graphs = strcmp(name, "--useCudaGraph") == 0;
        } else if (strcmp(name, "--noDataTransfers") == 0) {
            ok = cli_no_value(name, value);
            o->run.transfers = false;
        } else if (strcmp(name, "--useSpinWait") == 0) {
            ok = cli_no_value(name, value);
            o->run.spin_wait = true;
        } else if (strcmp(name, "--timeDeserialize") == 0) {
            ok = cli_no_value(name, value);
            o->time_deserialize = true;
        } else if (strcmp(name, "--device") == 0) {
            ok = cli_parse_int(name, value, 0, 1023, &n);
            o->device = (int)n;
        } else {
            cli_error("unknown flag '%s' (see kiln exec --help)", name);
            return 2;
        }
        if (!ok)
            return 2;
    }
    if (o->b.onnx && o->load_engine) {
        cli_error("give either --onnx or --loadEngine, not both");
        return 2;
    }
    if (!o->b.onnx && !o->load_engine) {
        cli_error("nothing to run: give --onnx=model.onnx or --loadEngine=plan.kiln");
        return 2;
    }
    if (o->plan_version_only && !o->load_engine) {
        cli_error("--getPlanVersionOnly needs --loadEngine=plan.kiln");
        return 2;
    }
    if (o->save_engine && !o->b.onnx) {
        cli_error("--saveEngine needs --onnx (a loaded plan is already saved)");
        return 2;
    }
    for (int k = 0; k < o->b.n_profiles; k++) {
        const cli_profile *p = &o->b.profiles[k];
        if (p->min.n == 0 && p->opt.n == 0 && p->max.n == 0)
            continue;
        if (p->min.n == 0 || p->max.n == 0 || p->opt.n == 0)
            cli_warn("profile %d: not all of --minShapes/--optShapes/--maxShapes given; the "
                     "missing ones are filled from the others",
                     k);
    }
    return 0;
}

/* ---- plan header ---- */

static void print_version_number(const char *label, uint32_t v) {
    cli_info("%s%u.%u.%u", label, v / 10000, (v / 100) % 100, v % 100);
}

static int plan_version_only(const char *path) {
    unsigned char head[4096];
    long n = cli_read_head(path, head, sizeof head);
    if (n < 0)
        return 1;
    kiln_plan_info info;
    kiln_status st = kiln_plan_read_info(head, (size_t)n, &info);
    if (st != KILN_OK) {
        cli_kiln_error(path, st);
        return 1;
    }
    cli_info("Plan: %s", path);
    cli_info("Plan format version: %u", info.format_version);
    print_version_number("Built by kiln: ", info.kiln_version);
    cli_info("This kiln: %s%s", kiln_version_string(),
             info.kiln_version == KILN_VERSION_NUMBER ? "" : " (differs: the plan will not load)");
    cli_info("Backend: %s", info.backend);
    cli_info("Target: %s", info.target);
    cli_info("Libraries: %s", info.libraries[0] ? info.libraries : "(none)");
    cli_info("Plan size: %llu bytes", (unsigned long long)info.file_size);
    return 0;
}

/* ---- inputs ---- */

static uint64_t rng_next(uint64_t *s) {
    /* splitmix64: small, fast and good enough for test inputs */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_random(io_buf *b, uint64_t *state) {
    size_t n = cli_volume(b->rank, b->dims);
    bool is_float = cli_dtype_is_float(b->dtype);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(state);
        /* floats in [-1, 1); integers 0 or 1, valid as indices, masks and flags */
        double v = is_float ? (double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0
                            : (double)(r >> 63);
        cli_elem_set(b->dtype, b->data, i, v);
    }
}

/* Find "name:file" for `name` in the --loadInputs spec. *file is malloc'd. */
bool cli_find_input_file(const char *spec, const char *name, char **file, bool *found) {
    *found = false;
    const char *p = spec;
    while (*p) {
        const char *nm = p, *nm_end, *f;
        if (*p == '\'') {
            nm = p + 1;
            nm_end = strchr(nm, '\'');
            if (!nm_end || nm_end[1] != ':') {
                cli_error("--loadInputs: unterminated quoted name in '%s'", spec);
                return false;
            }
            f = nm_end + 2;
        } else {
            nm_end = strchr(p, ':');
            const char *comma = strchr(p, ',');
            if (!nm_end || (comma && comma < nm_end)) {
                cli_error("--loadInputs: expected name:file in '%s'", spec);
                return false;
            }
            f = nm_end + 1;
        }
        const char *comma = strchr(f, ',');
        size_t flen = comma ? (size_t)(comma - f) : strlen(f);
        if ((size_t)(nm_end - nm) == strlen(name) && memcmp(nm, name, strlen(name)) == 0) {
            if (*found) {
                cli_error("--loadInputs: input '%s' is given twice", name);
                free(*file);
                *file = NULL;
                *found = false;
                return false;
            }
            *file = malloc(flen + 1);
            if (!*file) {
                cli_error("out of memory");
                return false;
            }
            memcpy(*file, f, flen);
            (*file)[flen] = '\0';
            *found = true;
        }
        p = comma ? comma + 1 : f + flen;
    }
    return true;
}

/* Every name in the spec must be an input of the engine. */
static bool check_input_names(const char *flag, const kiln_engine *eng, const char **names,
                              int n) {
    for (int i = 0; i < n; i++) {
        if (kiln_engine_tensor_io_mode(eng, names[i]) != KILN_IO_INPUT) {
            cli_error("%s: the engine has no input named '%s'", flag, names[i]);
            return false;
        }
    }
    return true;
}

static bool check_load_inputs_names(const char *spec, const kiln_engine *eng) {
    const char *p = spec;
    while (*p) {
        const char *nm = p, *nm_end;
        if (*p == '\'') {
            nm = p + 1;
            nm_end = strchr(nm, '\'');
        } else {
            nm_end = strchr(p, ':');
        }
        if (!nm_end)
            break; /* find_input_file reports the malformed spec */
        char *one = strndup(nm, (size_t)(nm_end - nm));
        if (!one) {
            cli_error("out of memory");
            return false;
        }
        bool known = check_input_names("--loadInputs", eng, (const char **)&one, 1);
        free(one);
        if (!known)
            return false;
        const char *comma = strchr(nm_end, ',');
        if (!comma)
            break;
        p = comma + 1;
    }
    return true;
}

/* A .npy file, or the entry named like the input in a .npz (or its only
 * entry): type and shape must match the input's. */
static bool load_input_npy(const char *file, io_buf *b) {
    npy_list l;
    char err[NPY_ERR_CAP];
    if (!npy_load_file(file, &l, err)) {
        cli_error("--loadInputs: %s", err);
        return false;
    }
    const npy_array *a = npy_list_find(&l, b->name);
    if (!a && l.n == 1)
        a = &l.items[0];
    bool ok = a != NULL;
    if (!ok)
        cli_error("--loadInputs: '%s' has no array named '%s' (%d arrays)", file, b->name, l.n);
    char want[128], got[128];
    cli_format_dims(want, sizeof want, b->rank, b->dims);
    if (ok && (a->dtype != b->dtype || a->rank != b->rank ||
               memcmp(a->dims, b->dims, (size_t)b->rank * sizeof *b->dims) != 0)) {
        cli_format_dims(got, sizeof got, a->rank, a->dims);
        cli_error("--loadInputs: '%s' holds %s %s; input '%s' is %s %s%s",
                  file, kiln_dtype_name(a->dtype), got, b->name, kiln_dtype_name(b->dtype), want,
                  a->dtype != b->dtype
                      ? " (write the file in the input's type, e.g. numpy's astype)"
                      : " (run at the file's shape with --shapes, or give a file of the input's "
                        "run shape)");
        ok = false;
    }
    if (ok) {
        memcpy(b->data, a->data, b->bytes);
        cli_info("Loaded input '%s' from %s", b->name, file);
    }
    npy_list_free(&l);
    return ok;
}

static bool load_input(const char *spec, io_buf *b, bool *loaded) {
    char *file = NULL;
    bool found;
    *loaded = false;
    if (!cli_find_input_file(spec, b->name, &file, &found))
        return false;
    if (!found)
        return true;
    size_t flen = strlen(file);
    if (flen > 4 && (strcmp(file + flen - 4, ".npy") == 0 || strcmp(file + flen - 4, ".npz") == 0)) {
        bool ok = load_input_npy(file, b);
        *loaded = ok;
        free(file);
        return ok;
    }
    void *data;
    size_t size;
    /* a raw file must hold exactly the input's bytes: a larger one is not read */
    bool ok = cli_read_file_max(file, b->bytes, &data, &size);
    if (ok && size != b->bytes) {
        char dims[128];
        cli_format_dims(dims, sizeof dims, b->rank, b->dims);
        cli_error("--loadInputs: '%s' has %zu bytes, input '%s' (%s %s) needs %zu", file, size,
                  b->name, kiln_dtype_name(b->dtype), dims, b->bytes);
        free(data);
        ok = false;
    }
    if (ok) {
        memcpy(b->data, data, size);
        free(data);
        cli_info("Loaded input '%s' from %s", b->name, file);
        *loaded = true;
    }
    free(file);
    return ok;
}

/* Shape to run input `name` with: --shapes, else the profile's opt shape. */
static bool run_shape(const exec_opts *o, kiln_engine *eng, io_buf *b) {
    const cli_shape *s = cli_shape_find(&o->b.shapes, b->name);
    int rank = kiln_engine_tensor_shape(eng, b->name, b->dims);
    if (rank < 0) {
        cli_error("input '%s': the engine does not know its shape", b->name);
        return false;
    }
    /* a shape tensor: what --shapes (else, when building here, the profile's
       opt shapes) gives for it are its values */
    const cli_shape *v = s;
    if (!v && o->b.onnx && o->run.profile_index < o->b.n_profiles)
        v = cli_shape_find(&o->b.profiles[o->run.profile_index].opt, b->name);
    /* built here: the network said which inputs are shape tensors; a loaded
       plan: a host-read input given numbers that are not its shape */
    bool values = o->b.onnx ? cli_built_shape_tensor(b->name)
                            : kiln_engine_tensor_is_shape_input(eng, b->name) &&
                                  cli_is_value_spec(b->dtype, rank, b->dims, v);
    if (values && v) {
        int64_t count = rank == 0 ? 1 : b->dims[0];
        if (rank == 1 && count < 0) { /* a dynamic length: as many as given */
            b->dims[0] = v->n_vals;
            count = v->n_vals;
        }
        if (rank > 1 || v->n_vals != count) {
            cli_error("--shapes: shape tensor '%s' holds %lld value%s; '%s' gives %d (values "
                      "joined by x, e.g. %s:4x6; a scalar is one number)", b->name,
                      (long long)count, count == 1 ? "" : "s", v->raw, v->n_vals, b->name);
            return false;
        }
        b->values = v;
        b->rank = rank;
        return true;
    }
    if (s && !cli_spec_is_shape("--shapes", b->name, s))
        return false;
    if (s) {
        if (s->rank != rank) {
            cli_error("--shapes: '%s' has rank %d, the engine's input has rank %d", b->name,
                      s->rank, rank);
            return false;
        }
        memcpy(b->dims, s->dims, sizeof b->dims);
        b->rank = rank;
        return true;
    }
    b->rank = rank;
    bool dynamic = false;
    for (int d = 0; d < rank; d++)
        dynamic |= b->dims[d] < 0;
    if (!dynamic)
        return true;
    int prank = 0;
    int64_t opt[KILN_MAX_DIMS];
    kiln_status st = kiln_engine_profile_shape(eng, o->run.profile_index, b->name, &prank, NULL,
                                               opt, NULL);
    if (st != KILN_OK) {
        cli_kiln_error(b->name, st);
        return false;
    }
    memcpy(b->dims, opt, sizeof opt);
    b->rank = prank;
    return true;
}

static bool setup_inputs(const exec_opts *o, kiln_engine *eng, kiln_context *ctx, io_buf *ins,
                         int n_in) {
    uint64_t rng = o->seed;
    for (int i = 0; i < n_in; i++) {
        io_buf *b = &ins[i];
        if (!run_shape(o, eng, b))
            return false;
        kiln_status st = kiln_context_set_input_shape(ctx, b->name, b->rank, b->dims);
        if (st != KILN_OK) {
            char what[300], dims[128];
            cli_format_dims(dims, sizeof dims, b->rank, b->dims);
            snprintf(what, sizeof what, "setting the shape of input '%s' to %s", b->name, dims);
            cli_kiln_error(what, st);
            return false;
        }
        size_t es = kiln_dtype_size(b->dtype);
        if (es == 0) {
            cli_error("input '%s' has data type %s, which exec cannot fill", b->name,
                      kiln_dtype_name(b->dtype));
            return false;
        }
        b->bytes = cli_volume(b->rank, b->dims) * es;
        /* never zero-sized, so every kernel gets a valid pointer; pinned host
           memory for a GPU engine (fast copies), 64-byte aligned for the CPU */
        size_t alloc = (b->bytes + 63) / 64 * 64 + 64;
        if (kiln_engine_alloc_host(eng, alloc, &b->data) != KILN_OK)
            b->data = NULL;
        if (!b->data) {
            cli_error("out of memory for input '%s' (%zu bytes)", b->name, b->bytes);
            return false;
        }
        memset(b->data, 0, alloc);
        bool loaded = false;
        if (o->load_inputs && !load_input(o->load_inputs, b, &loaded))
            return false;
        if (!loaded && b->values) {
            for (int k = 0; k < b->values->n_vals; k++)
                cli_elem_set(b->dtype, b->data, (size_t)k, b->values->vals[k]);
        } else if (!loaded && o->ranges.n) {
            npy_fill_random(b->dtype, b->data, cli_volume(b->rank, b->dims), &o->ranges, b->name,
                            &rng);
        } else if (!loaded) {
            fill_random(b, &rng);
        }
        char dims[128];
        cli_format_dims(dims, sizeof dims, b->rank, b->dims);
        if (b->values) {
            char vals[128];
            snprintf(vals, sizeof vals, "%s", b->values->raw);
            cli_info("Input '%s': %s %s, shape tensor with values %s", b->name,
                     kiln_dtype_name(b->dtype), dims, vals);
        } else {
            cli_info("Input '%s': %s %s%s", b->name, kiln_dtype_name(b->dtype), dims,
                     loaded ? "" : " (random)");
        }
        /* engine memory: device memory on a GPU backend, host memory on the CPU;
           the values are copied there once, before any timing */
        if ((st = kiln_engine_alloc(eng, alloc, &b->dev)) != KILN_OK ||
            (b->bytes && (st = kiln_engine_copy(eng, b->dev, b->data, b->bytes,
                                                KILN_COPY_TO_DEVICE)) != KILN_OK) ||
            /* shape tensors are read on the host, whatever the backend */
            (st = kiln_context_set_tensor_address(
                 ctx, b->name, kiln_engine_tensor_is_shape_input(eng, b->name) ? b->data : b->dev)) !=
                KILN_OK) {
            cli_kiln_error(b->name, st);
            return false;
        }
    }
    return true;
}

/* ---- outputs ---- */

static bool collect_outputs(const kiln_engine *eng, kiln_context *ctx, io_buf *outs,
                            int n_out) {
    for (int i = 0; i < n_out; i++) {
        io_buf *b = &outs[i];
        b->rank = kiln_context_tensor_shape(ctx, b->name, b->dims);
        if (b->rank < 0) {
            cli_error("output '%s': shape unknown: %s", b->name, kiln_last_error());
            return false;
        }
        if (kiln_dtype_size(b->dtype) == 0) {
            cli_error("output '%s': the engine reports data type '%s'; its values cannot be read",
                      b->name, kiln_dtype_name(b->dtype));
            return false;
        }
        const void *addr = kiln_context_tensor_address(ctx, b->name);
        b->bytes = cli_volume(b->rank, b->dims) * kiln_dtype_size(b->dtype);
        if (!addr && b->bytes) {
            cli_error("output '%s': no data after the run: %s", b->name, kiln_last_error());
            return false;
        }
        if (kiln_engine_alloc_host(eng, b->bytes + 1, &b->data) != KILN_OK)
            b->data = NULL;
        if (!b->data) {
            cli_error("out of memory for output '%s' (%zu bytes)", b->name, b->bytes);
            return false;
        }
        kiln_status st = b->bytes ? kiln_engine_copy(eng, b->data, addr, b->bytes,
                                                     KILN_COPY_TO_HOST)
                                  : KILN_OK;
        if (st != KILN_OK) {
            cli_kiln_error(b->name, st);
            return false;
        }
    }
    return true;
}

static void write_value(FILE *f, const io_buf *b, size_t i) {
    if (b->dtype == KILN_DTYPE_INT64)
        fprintf(f, "%lld", (long long)((const int64_t *)b->data)[i]);
    else if (b->dtype == KILN_DTYPE_UINT64)
        fprintf(f, "%llu", (unsigned long long)((const uint64_t *)b->data)[i]);
    else
        cli_json_number(f, cli_elem_get(b->dtype, b->data, i), !cli_dtype_is_float(b->dtype));
}

/* Outputs as a .npz archive, one array per output. */
static bool export_outputs_npz(const char *path, const io_buf *outs, int n_out) {
    npy_list l;
    memset(&l, 0, sizeof l);
    char err[NPY_ERR_CAP];
    bool ok = true;
    for (int i = 0; ok && i < n_out; i++)
        ok = npy_list_add(&l, outs[i].name, outs[i].dtype, outs[i].rank, outs[i].dims,
                          outs[i].data, outs[i].bytes);
    if (!ok)
        cli_error("--exportOutput: out of memory");
    else if (!(ok = npz_save_file(path, &l, err)))
        cli_error("--exportOutput: %s", err);
    else
        cli_info("Wrote %d output tensor(s) to %s", n_out, path);
    npy_list_free(&l);
    return ok;
}

static bool export_outputs(const char *path, const io_buf *outs, int n_out) {
    size_t plen = strlen(path);
    if (plen > 4 && strcmp(path + plen - 4, ".npz") == 0)
        return export_outputs_npz(path, outs, n_out);
    FILE *f = fopen(path, "w");
    if (!f) {
        cli_error("--exportOutput: cannot create '%s'", path);
        return false;
    }
    fputs("[\n", f);
    for (int i = 0; i < n_out; i++) {
        const io_buf *b = &outs[i];
        char dims[128];
        cli_format_dims(dims, sizeof dims, b->rank, b->dims);
        fputs(i ? ",\n  { \"name\": " : "  { \"name\": ", f);
        cli_json_string(f, b->name);
        fputs(", \"dtype\": ", f);
        cli_json_string(f, kiln_dtype_name(b->dtype));
        fputs(", \"dimensions\": ", f);
        cli_json_string(f, b->rank ? dims : "");
        fputs(", \"shape\": [", f);
        for (int d = 0; d < b->rank; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)b->dims[d]);
        fputs("],\n    \"values\": [", f);
        size_t n = cli_volume(b->rank, b->dims);
        for (size_t k = 0; k < n; k++) {
            if (k)
                fputs(k % 8 ? ", " : ",\n      ", f);
            write_value(f, b, k);
        }
        fputs("] }", f);
    }
    fputs("\n]\n", f);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok)
        cli_error("--exportOutput: cannot write '%s'", path);
    else
        cli_info("Wrote %d output tensor(s) to %s", n_out, path);
    return ok;
}

static void dump_outputs(const io_buf *outs, int n_out) {
    for (int i = 0; i < n_out; i++) {
        const io_buf *b = &outs[i];
        char dims[128];
        cli_format_dims(dims, sizeof dims, b->rank, b->dims);
        printf("[I] Output '%s' (%s %s):", b->name, kiln_dtype_name(b->dtype), dims);
        size_t n = cli_volume(b->rank, b->dims);
        for (size_t k = 0; k < n; k++) {
            fputc(k % 8 ? ' ' : '\n', stdout);
            write_value(stdout, b, k);
        }
        fputc('\n', stdout);
    }
}

/* ---- layers and profiles ---- */

static void dump_layers(const kiln_engine *eng) {
    int n = kiln_engine_num_layers(eng);
    cli_info("Layers after fusion: %d", n);
    for (int i = 0; i < n; i++) {
        const char *tactic = kiln_engine_layer_tactic(eng, i);
        cli_info("  %4d  %-20s %-28s %s", i, kiln_engine_layer_op(eng, i),
                 tactic ? tactic : "-", kiln_engine_layer_name(eng, i));
    }
}

static bool export_layer_info(const char *path, const kiln_engine *eng) {
    char *json = NULL;
    kiln_status st = kiln_engine_layer_info_json(eng, &json);
    if (st != KILN_OK) {
        cli_kiln_error("--exportLayerInfo", st);
        return false;
    }
    bool ok = cli_write_file(path, json, strlen(json));
    kiln_free(json);
    if (ok)
        cli_info("Wrote layer information to %s", path);
    return ok;
}

static bool report_profile(const exec_opts *o, const kiln_engine *eng, const kiln_context *ctx) {
    int n = kiln_engine_num_layers(eng);
    double *ms = calloc((size_t)n + 1, sizeof *ms);
    uint64_t runs = 0;
    double total = 0;
    if (!ms) {
        cli_error("out of memory");
        return false;
    }
    for (int i = 0; i < n; i++) {
        uint64_t r = 0;
        kiln_status st = kiln_context_layer_time(ctx, i, &ms[i], &r);
        if (st != KILN_OK) {
            cli_kiln_error("reading layer times", st);
            free(ms);
            return false;
        }
        if (r > runs)
            runs = r;
        total += ms[i];
    }
    double denom_runs = runs ? (double)runs : 1.0;
    if (o->dump_profile) {
        cli_info("=== Profile (%llu runs) ===", (unsigned long long)runs);
        cli_info("  %10s %10s %7s  %-20s %s", "Time(ms)", "Avg(ms)", "Time%", "Op", "Layer");
        for (int i = 0; i < n; i++)
            cli_info("  %10.3f %10.4f %6.1f%%  %-20s %s", ms[i], ms[i] / denom_runs,
                     total > 0 ? 100.0 * ms[i] / total : 0.0, kiln_engine_layer_op(eng, i),
                     kiln_engine_layer_name(eng, i));
        cli_info("  %10.3f %10.4f %6.1f%%  %s", total, total / denom_runs, 100.0, "Total");
    }
    bool ok = true;
    if (o->export_profile) {
        FILE *f = fopen(o->export_profile, "w");
        if (!f) {
            cli_error("--exportProfile: cannot create '%s'", o->export_profile);
            free(ms);
            return false;
        }
        fprintf(f, "[\n  { \"count\": %llu }", (unsigned long long)runs);
        for (int i = 0; i < n; i++) {
            const char *tactic = kiln_engine_layer_tactic(eng, i);
            fputs(",\n  { \"name\": ", f);
            cli_json_string(f, kiln_engine_layer_name(eng, i));
            fputs(", \"op\": ", f);
            cli_json_string(f, kiln_engine_layer_op(eng, i));
            fputs(", \"tactic\": ", f);
            cli_json_string(f, tactic ? tactic : "");
            fprintf(f, ", \"timeMs\": %.6f, \"averageMs\": %.6f, \"percentage\": %.3f }", ms[i],
                    ms[i] / denom_runs, total > 0 ? 100.0 * ms[i] / total : 0.0);
        }
        fputs("\n]\n", f);
        ok = !ferror(f);
        ok = fclose(f) == 0 && ok;
        if (!ok)
            cli_error("--exportProfile: cannot write '%s'", o->export_profile);
        else
            cli_info("Wrote the profile of %d layers over %llu runs to %s", n,
                     (unsigned long long)runs, o->export_profile);
    }
    free(ms);
    return ok;
}

/* ---- timing ---- */

/* One inference outside the timed runs (--separateProfileRun): enqueue,
 * then wait for it. */
static bool run_once(kiln_context *ctx) {
    kiln_status st = kiln_context_enqueue(ctx, NULL);
    if (st == KILN_OK)
        st = kiln_context_synchronize(ctx, NULL);
    if (st != KILN_OK) {
        cli_kiln_error("inference", st);
        return false;
    }
    return true;
}

/* ---- the command ---- */

/* --device=N as trtexec's: the process sees GPU N alone, as its device 0.
 * Within a CUDA_VISIBLE_DEVICES the caller already set, N counts its
 * entries. Must run before anything touches CUDA. */
static bool select_device(int n) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char pick[128];
    if (vis && *vis) {
        const char *p = vis;
        for (int i = 0; i < n && p; i++) {
            p = strchr(p, ',');
            if (p)
                p++;
        }
        size_t len = p ? strcspn(p, ",") : 0;
        if (!p || len == 0 || len >= sizeof pick) {
            cli_error("--device=%d: CUDA_VISIBLE_DEVICES=%s lists no device %d (counting from 0)",
                      n, vis, n);
            return false;
        }
        memcpy(pick, p, len);
        pick[len] = '\0';
    } else {
        snprintf(pick, sizeof pick, "%d", n);
    }
    if (setenv("CUDA_VISIBLE_DEVICES", pick, 1) != 0) {
        cli_error("--device=%d: cannot set CUDA_VISIBLE_DEVICES", n);
        return false;
    }
    cli_info("Device %d selected (CUDA_VISIBLE_DEVICES=%s)", n, pick);
    return true;
}

/* --timeDeserialize: load the plan's bytes into an engine a few times, as
 * a deployment does at start-up, and report the time. */
static int time_deserialize(const void *plan, size_t size) {
    enum { RUNS = 5 };
    double ms[RUNS + 1];
    for (int i = 0; i <= RUNS; i++) { /* the first one warms up (libraries, device) */
        kiln_engine *e = NULL;
        double t0 = cli_now_s();
        kiln_status st = kiln_engine_load(plan, size, &e);
        ms[i] = (cli_now_s() - t0) * 1e3;
        kiln_engine_destroy(e);
        if (st != KILN_OK) {
            cli_kiln_error("deserializing the plan", st);
            return 1;
        }
    }
    qsort(ms + 1, RUNS, sizeof ms[0], cli_cmp_double);
    cli_info("Deserialization: first %.5g ms, then median %.5g ms, min %.5g ms, max %.5g ms over %d "
             "loads of %.4g MiB",
             ms[0], ms[1 + RUNS / 2], ms[1], ms[RUNS], RUNS, (double)size / (1024.0 * 1024.0));
    cli_info("Total deserialization time = %.5g milliseconds (median)", ms[1 + RUNS / 2]);
    return 0;
}

static bool get_engine(const exec_opts *o, kiln_engine **eng) {
    kiln_status st;
    if (o->load_engine) {
        double t0 = cli_now_s();
        if ((st = kiln_engine_load_file(o->load_engine, eng)) != KILN_OK) {
            cli_kiln_error(o->load_engine, st);
            return false;
        }
        cli_info("Engine loaded from %s in %.5g sec. (backend %s)", o->load_engine,
                 cli_now_s() - t0, kiln_engine_backend(*eng));
        return true;
    }
    void *plan = NULL;
    size_t size = 0;
    double build_s = 0;
    if (!cli_build_plan(&o->b, &plan, &size, &build_s))
        return false;
    cli_info("Engine built in %.5g sec.", build_s);
    cli_info("Created engine with size: %.4g MiB", (double)size / (1024.0 * 1024.0));
    if (o->save_engine) {
        if (!cli_write_file(o->save_engine, plan, size)) {
            kiln_free(plan);
            return false;
        }
        cli_info("Engine saved to %s", o->save_engine);
    }
    bool need_engine = !o->skip_inference || o->export_layer_info || o->dump_layer_info;
    if (need_engine && (st = kiln_engine_load(plan, size, eng)) != KILN_OK)
        cli_kiln_error("loading the built plan", st);
    kiln_free(plan);
    return !need_engine || st == KILN_OK;
}

static int infer(const exec_opts *o, kiln_engine *eng) {
    kiln_context *ctx = NULL;
    io_buf *bufs = NULL;
    int rc = 1;
    int n_io = kiln_engine_num_io_tensors(eng), n_in = 0;
    kiln_status st;
    bufs = calloc((size_t)n_io + 1, sizeof *bufs);
    if (!bufs) {
        cli_error("out of memory");
        return 1;
    }
    for (int i = 0; i < n_io; i++) {
        bufs[i].name = kiln_engine_io_tensor_name(eng, i);
        bufs[i].dtype = kiln_engine_tensor_dtype(eng, bufs[i].name);
        if (kiln_engine_tensor_io_mode(eng, bufs[i].name) == KILN_IO_INPUT)
            n_in = i + 1;
    }
    for (int i = 0; i < o->b.shapes.n; i++) {
        const char *one = o->b.shapes.items[i].name;
        if (!check_input_names("--shapes", eng, &one, 1))
            goto done;
    }
    if (o->load_inputs && !check_load_inputs_names(o->load_inputs, eng))
        goto done;
    if (o->run.profile_index >= kiln_engine_num_profiles(eng)) {
        cli_error("--profile=%d: the engine has %d profile(s)", o->run.profile_index,
                  kiln_engine_num_profiles(eng));
        goto done;
    }
    if ((st = kiln_context_create(eng, &ctx)) != KILN_OK) {
        cli_kiln_error("creating an execution context", st);
        goto done;
    }
    if ((st = kiln_context_set_profile(ctx, o->run.profile_index)) != KILN_OK) {
        cli_kiln_error("--profile", st);
        goto done;
    }
    if (o->run.graphs >= 0)
        kiln_context_set_graphs(ctx, o->run.graphs);
    kiln_context_set_threads(ctx, o->b.threads);
    if (!setup_inputs(o, eng, ctx, bufs, n_in))
        goto done;
    bool want_profile = o->export_profile || o->dump_profile;
    exec_timing t = o->run;
    t.profile = want_profile && !o->separate_profile;
    t.threads = o->b.threads;
    if (!exec_timed_runs(&t, eng, ctx, bufs, n_in, bufs + n_in, n_io - n_in))
        goto done;
    if (want_profile && o->separate_profile) {
        kiln_context_set_profiling(ctx, 1);
        for (long long i = 0; i < o->run.iterations; i++)
            if (!run_once(ctx))
                goto done;
        kiln_context_set_profiling(ctx, 0);
    }
    if (want_profile && !report_profile(o, eng, ctx))
        goto done;
    if ((o->dump_output || o->export_output) &&
        !collect_outputs(eng, ctx, bufs + n_in, n_io - n_in))
        goto done;
    if (o->dump_output)
        dump_outputs(bufs + n_in, n_io - n_in);
    if (o->export_output && !export_outputs(o->export_output, bufs + n_in, n_io - n_in))
        goto done;
    rc = 0;
done:
    kiln_context_destroy(ctx);
    for (int i = 0; i < n_io; i++) {
        kiln_engine_free_host(eng, bufs[i].data);
        kiln_engine_free(eng, bufs[i].dev);
    }
    free(bufs);
    return rc;
}

int cli_cmd_exec(int argc, char **argv) {
    exec_opts o;
    memset(&o, 0, sizeof o);
    o.run.iterations = 10;
    o.run.warmup_ms = 200;
    o.run.duration_s = 3;
    o.seed = 1;
    o.run.graphs = -1;
    o.run.streams = 1;
    o.run.transfers = true;
    o.run.avg_runs = 10;
    o.device = -1;
    o.run.n_percentiles = 3;
    o.run.percentiles[0] = 90;
    o.run.percentiles[1] = 95;
    o.run.percentiles[2] = 99;
    bool stop = false;
    int rc = parse_args(argc, argv, &o, &stop);
    if (rc || stop) {
        cli_build_opts_free(&o.b);
        npy_range_list_free(&o.ranges);
        return rc;
    }
    cli_install_logger(cli_verbose);
    if (o.plan_version_only) {
        rc = plan_version_only(o.load_engine);
        cli_build_opts_free(&o.b);
        npy_range_list_free(&o.ranges);
        return rc;
    }
    kiln_engine *eng = NULL;
    rc = 1;
    if (o.device >= 0 && !select_device(o.device))
        goto done;
    if (o.time_deserialize) {
        void *plan = NULL;
        size_t size = 0;
        double build_s = 0;
        bool have = o.load_engine ? cli_read_file(o.load_engine, &plan, &size)
                                  : cli_build_plan(&o.b, &plan, &size, &build_s);
        rc = have ? time_deserialize(plan, size) : 1;
        if (o.load_engine)
            free(plan);
        else
            kiln_free(plan);
        goto done;
    }
    if (o.load_engine && (o.b.n_profiles || o.b.workspace || o.b.flags))
        cli_warn("build flags (shapes profiles, --memPoolSize, precision) are ignored with "
                 "--loadEngine");
    if (!get_engine(&o, &eng))
        goto done;
    if (eng && o.dump_layer_info)
        dump_layers(eng);
    if (eng && o.export_layer_info && !export_layer_info(o.export_layer_info, eng))
        goto done;
    if (o.skip_inference) {
        cli_info("Skipped inference (--skipInference).");
        rc = 0;
        goto done;
    }
    rc = infer(&o, eng);
done:
    kiln_engine_destroy(eng);
    cli_build_opts_free(&o.b);
    npy_range_list_free(&o.ranges);
    if (rc == 0)
        cli_info("PASSED: kiln exec");
    else
        cli_error("FAILED: kiln exec");
    return rc;
}
