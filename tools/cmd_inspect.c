/* cmd_inspect.c - `kiln inspect FILE`: show a plan's (or an ONNX model's,
 * built in memory) I/O tensors, profiles, layers after fusion with their op,
 * tactic and precision, and the memory plan. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"

void cli_inspect_usage(FILE *f) {
    fputs("Usage: kiln inspect FILE [flags]\n"
          "\n"
          "FILE is a kiln plan or an ONNX model (told apart by the plan header). A model\n"
          "is built in memory first (nothing is saved); the build flags of kiln exec\n"
          "(--minShapes/--optShapes/--maxShapes, --shapes, --memPoolSize, --threads,\n"
          "--noFusion, --noTiming, ...) apply to it.\n"
          "\n"
          "  --json       print the engine's layer report as JSON instead of tables\n"
          "  --verbose    print the library's detailed log\n"
          "  --help       this text\n",
          f);
}

static const char *io_mode_name(kiln_io_mode m) {
    return m == KILN_IO_INPUT ? "input" : m == KILN_IO_OUTPUT ? "output" : "?";
}

static void human_bytes(char *buf, size_t cap, double b) {
    if (b >= 1024.0 * 1024.0 * 1024.0)
        snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
    else if (b >= 1024.0 * 1024.0)
        snprintf(buf, cap, "%.2f MiB", b / (1024.0 * 1024.0));
    else if (b >= 1024.0)
        snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    else
        snprintf(buf, cap, "%.0f B", b);
}

static void print_plan_header(const char *path, const kiln_plan_info *info) {
    printf("Plan %s\n", path);
    printf("  format version  %u\n", info->format_version);
    printf("  built by kiln   %u.%u.%u\n", info->kiln_version / 10000,
           (info->kiln_version / 100) % 100, info->kiln_version % 100);
    printf("  backend         %s\n", info->backend);
    printf("  target          %s\n", info->target);
    printf("  libraries       %s\n", info->libraries[0] ? info->libraries : "(none)");
    printf("  size            %llu bytes\n", (unsigned long long)info->file_size);
}

static void print_io(const kiln_engine *eng) {
    int n = kiln_engine_num_io_tensors(eng);
    int n_prof = kiln_engine_num_profiles(eng);
    printf("\nI/O tensors (%d; dynamic dimensions are -1)\n", n);
    for (int i = 0; i < n; i++) {
        const char *name = kiln_engine_io_tensor_name(eng, i);
        int64_t dims[KILN_MAX_DIMS];
        int rank = kiln_engine_tensor_shape(eng, name, dims);
        char shape[160];
        if (rank < 0)
            snprintf(shape, sizeof shape, "?");
        else
            cli_format_dims(shape, sizeof shape, rank, dims);
        printf("  %-6s  %-24s %-8s %s\n", io_mode_name(kiln_engine_tensor_io_mode(eng, name)),
               name, kiln_dtype_name(kiln_engine_tensor_dtype(eng, name)), shape);
    }
    printf("\nOptimization profiles (%d)\n", n_prof);
    for (int p = 0; p < n_prof; p++) {
        for (int i = 0; i < n; i++) {
            const char *name = kiln_engine_io_tensor_name(eng, i);
            if (kiln_engine_tensor_io_mode(eng, name) != KILN_IO_INPUT)
                continue;
            int rank = 0;
            int64_t mn[KILN_MAX_DIMS], op[KILN_MAX_DIMS], mx[KILN_MAX_DIMS];
            if (kiln_engine_profile_shape(eng, p, name, &rank, mn, op, mx) != KILN_OK)
                continue;
            char a[160], b[160], c[160];
            cli_format_dims(a, sizeof a, rank, mn);
            cli_format_dims(b, sizeof b, rank, op);
            cli_format_dims(c, sizeof c, rank, mx);
            printf("  %d  %-24s min %s  opt %s  max %s\n", p, name, a, b, c);
        }
    }
}

/* Bytes of one tensor record {"dtype","shape"} of the layer report; 0 when
 * its shape is dynamic. */
static double tensor_bytes(const cj_value *t) {
    const cj_value *shape = cj_get(t, "shape");
    const char *dt = cj_str(t, "dtype", "");
    double size = 0;
    for (int d = 0; d <= KILN_DTYPE_FLOAT8E5M2FNUZ; d++)
        if (strcmp(kiln_dtype_name((kiln_dtype)d), dt) == 0)
            size = (double)kiln_dtype_size((kiln_dtype)d);
    if (!shape || shape->type != CJ_ARRAY)
        return 0;
    for (size_t i = 0; i < shape->n; i++) {
        if (shape->items[i].number < 0)
            return 0;
        size *= shape->items[i].number;
    }
    return size;
}

/* Sum of the constants the layers read, each counted once. */
static double weight_bytes(const cj_value *layers, size_t *count) {
    double total = 0;
    const char **seen = NULL;
    size_t n_seen = 0, cap = 0;
    for (size_t i = 0; layers && i < layers->n; i++) {
        const cj_value *ins = cj_get(&layers->items[i], "inputs");
        for (size_t j = 0; ins && ins->type == CJ_ARRAY && j < ins->n; j++) {
            const cj_value *t = &ins->items[j];
            if (strcmp(cj_str(t, "kind", ""), "constant") != 0)
                continue;
            const char *name = cj_str(t, "name", "");
            bool dup = false;
            for (size_t k = 0; k < n_seen && !dup; k++)
                dup = strcmp(seen[k], name) == 0;
            if (dup)
                continue;
            if (n_seen == cap) {
                size_t ncap = cap ? 2 * cap : 64;
                const char **ns = realloc(seen, ncap * sizeof *ns);
                if (!ns)
                    break;
                seen = ns;
                cap = ncap;
            }
            seen[n_seen++] = name;
            total += tensor_bytes(t);
        }
    }
    free(seen);
    *count = n_seen;
    return total;
}

static void print_layers_api(const kiln_engine *eng) {
    int n = kiln_engine_num_layers(eng);
    printf("\nLayers after fusion (%d)\n", n);
    printf("  %4s  %-22s %-26s %s\n", "#", "op", "tactic", "name");
    for (int i = 0; i < n; i++) {
        const char *tactic = kiln_engine_layer_tactic(eng, i);
        printf("  %4d  %-22s %-26s %s\n", i, kiln_engine_layer_op(eng, i), tactic ? tactic : "-",
               kiln_engine_layer_name(eng, i));
    }
}

/* Why a layer runs in its precision (the builder's record): "timed fp32
 * 0.16 fp16 0.36" (ms, casts included; the fastest was kept), "forced"
 * (--layerPrecisions or the flag without timing), "rule" (timing off), and
 * the TF32 decision; "-" when the builder made none. */
static void precision_choice(const cj_value *l, char *buf, size_t cap) {
    const cj_value *c = cj_get(l, "precision_choice"), *t = cj_get(l, "tf32_choice");
    size_t len = 0;
    buf[0] = '\0';
    if (c) {
        len += (size_t)snprintf(buf, cap, "%s", cj_str(c, "why", "?"));
        const cj_value *ms = cj_get(c, "ms");
        static const char *const k[3] = {"float", "float16", "bfloat16"};
        static const char *const sh[3] = {"fp32", "fp16", "bf16"};
        for (int i = 0; ms && i < 3 && len < cap; i++) {
            double v = cj_num(ms, k[i], -1);
            if (v >= 0)
                len += (size_t)snprintf(buf + len, cap - len, " %s %.3g", sh[i], v);
        }
    }
    if (t && len < cap) {
        const cj_value *ms = cj_get(t, "ms");
        len += (size_t)snprintf(buf + len, cap - len, "%stf32 %s", len ? "; " : "",
                                cj_num(t, "allow_tf32", 0) > 0 ? "on" : "off");
        if (ms && len < cap)
            snprintf(buf + len, cap - len, " (%.3g/%.3g)", cj_num(ms, "float", -1),
                     cj_num(ms, "tf32", -1));
    }
    if (!buf[0])
        snprintf(buf, cap, "-");
}

static void print_report(const kiln_engine *eng, const cj_value *root) {
    const cj_value *layers = cj_get(root, "layers");
    if (!layers || layers->type != CJ_ARRAY) {
        print_layers_api(eng);
        return;
    }
    printf("\nLayers after fusion (%zu)\n", layers->n);
    printf("  %4s  %-22s %-26s %-9s %-30s %s\n", "#", "op", "tactic", "precision", "chosen",
           "name");
    for (size_t i = 0; i < layers->n; i++) {
        const cj_value *l = &layers->items[i];
        const char *domain = cj_str(l, "domain", "");
        char op[96];
        /* ops of kiln's own domain (fused layers) show as domain::op */
        if (domain[0] && strcmp(domain, "ai.onnx") != 0)
            snprintf(op, sizeof op, "%s::%s", domain, cj_str(l, "op", "?"));
        else
            snprintf(op, sizeof op, "%s", cj_str(l, "op", "?"));
        char why[160];
        precision_choice(l, why, sizeof why);
        printf("  %4zu  %-22s %-26s %-9s %-30s %s\n", i, op, cj_str(l, "tactic", "-"),
               cj_str(l, "precision", "-"), why, cj_str(l, "name", ""));
        if (cj_str(l, "quant", NULL)) /* a quantized layer's types and scales */
            printf("  %4s  %s\n", "", cj_str(l, "quant", ""));
    }
    const cj_value *mem = cj_get(root, "memory");
    printf("\nMemory\n");
    if (mem) {
        char a[32], s[32], w[32];
        double arena = cj_num(mem, "activation_arena_bytes", -1);
        double sum = cj_num(mem, "activation_sum_bytes", -1);
        double ws = cj_num(mem, "workspace_bytes", -1);
        human_bytes(a, sizeof a, arena);
        human_bytes(s, sizeof s, sum);
        human_bytes(w, sizeof w, ws);
        if (arena >= 0)
            printf("  activation arena     %-12s (%.0f bytes, at the largest profile shapes)\n", a,
                   arena);
        if (sum >= 0)
            printf("  all activations      %-12s (%.0f bytes side by side)%s\n", s, sum,
                   "");
        if (arena >= 0 && sum > 0)
            printf("  arena / sum          %.1f%% (reuse saves %.1f%%)\n", 100.0 * arena / sum,
                   100.0 - 100.0 * arena / sum);
        if (ws >= 0)
            printf("  workspace            %-12s (largest layer scratch)\n", w);
    } else {
        printf("  (the engine's report has no memory section)\n");
    }
    size_t n_weights = 0;
    double wb = weight_bytes(layers, &n_weights);
    char wbuf[32];
    human_bytes(wbuf, sizeof wbuf, wb);
    printf("  weights              %-12s (%zu constants)\n", wbuf, n_weights);
    double build_ms = cj_num(root, "build_ms", -1);
    if (build_ms >= 0)
        printf("\nBuild time %.3f s\n", build_ms / 1e3);
}

/* ---- attention the builder did not fuse ----
 * While a model is built, the builder logs (verbose) each Softmax that
 * looks like attention but did not become kiln::Attention, and each
 * attention op it did not map, with the check that stopped it. The build
 * here keeps those lines (the last one per node) and prints the ones whose
 * node is still a layer of its own in the plan. */
#define MISS_MAX 256

typedef struct miss_log {
    int n;
    char *node[MISS_MAX], *line[MISS_MAX];
    bool verbose;
} miss_log;

static miss_log g_miss; /* the tool's one capture; reset per command */

/* "attention: <what> '<node>' not fused: <reason>" (or "not mapped") */
static void keep_miss(const char *message) {
    static const char *const prefix = "attention: ";
    if (strncmp(message, prefix, strlen(prefix)) != 0 ||
        (!strstr(message, "' not fused: ") && !strstr(message, "' not mapped: ")))
        return;
    const char *q0 = strchr(message, '\''), *q1 = q0 ? strstr(q0 + 1, "' not ") : NULL;
    if (!q0 || !q1)
        return;
    size_t len = (size_t)(q1 - q0 - 1);
    for (int i = 0; i < g_miss.n; i++)
        if (strlen(g_miss.node[i]) == len && strncmp(g_miss.node[i], q0 + 1, len) == 0) {
            char *l = strdup(message + strlen(prefix));
            if (l) {
                free(g_miss.line[i]);
                g_miss.line[i] = l;
            }
            return;
        }
    if (g_miss.n == MISS_MAX)
        return;
    char *node = malloc(len + 1), *line = strdup(message + strlen(prefix));
    if (!node || !line) {
        free(node);
        free(line);
        return;
    }
    memcpy(node, q0 + 1, len);
    node[len] = 0;
    g_miss.node[g_miss.n] = node;
    g_miss.line[g_miss.n++] = line;
}

static void capture_sink(void *user, kiln_severity sev, const char *message) {
    (void)user;
    if (sev == KILN_LOG_VERBOSE)
        keep_miss(message);
    if (sev > (g_miss.verbose ? KILN_LOG_VERBOSE : KILN_LOG_WARNING))
        return;
    switch (sev) {
    case KILN_LOG_ERROR: cli_error("%s", message); break;
    case KILN_LOG_WARNING: cli_warn("%s", message); break;
    case KILN_LOG_INFO: cli_info("%s", message); break;
    default: cli_vlog("%s", message); break;
    }
}

static void free_misses(void) {
    for (int i = 0; i < g_miss.n; i++) {
        free(g_miss.node[i]);
        free(g_miss.line[i]);
    }
    g_miss.n = 0;
}

/* Whether some layer of the plan is node `name` alone (not a kiln:: fused
 * op, the name as it was: a Softmax, an attention op, or a mask's Where
 * the causal rewrite left). */
static bool still_a_layer(const kiln_engine *eng, const char *name) {
    int n = kiln_engine_num_layers(eng);
    for (int i = 0; i < n; i++) {
        const char *op = kiln_engine_layer_op(eng, i), *ln = kiln_engine_layer_name(eng, i);
        if (op && ln && !strstr(op, "kiln") && strcmp(ln, name) == 0)
            return true;
    }
    return false;
}

static void print_misses(const kiln_engine *eng, bool built) {
    int shown = 0;
    for (int i = 0; i < g_miss.n; i++)
        if (still_a_layer(eng, g_miss.node[i])) {
            if (!shown++)
                printf("\nAttention not fused (which pattern stopped where)\n");
            printf("  %s\n", g_miss.line[i]);
        }
    if (!shown && !built) {
        int n = kiln_engine_num_layers(eng);
        for (int i = 0; i < n; i++) {
            const char *op = kiln_engine_layer_op(eng, i);
            if (op && strcmp(op, "Softmax") == 0) {
                printf("\nAttention not fused: the plan keeps Softmax layers; inspect the ONNX "
                       "model to see why each was not fused\n");
                break;
            }
        }
    }
}

int cli_cmd_inspect(int argc, char **argv) {
    cli_build_opts b;
    memset(&b, 0, sizeof b);
    const char *path = NULL;
    bool as_json = false;
    int rc = 2;
    kiln_engine *eng = NULL;
    char *json = NULL;
    cj_value *root = NULL;
    for (int i = 0; i < argc; i++) {
        const char *name, *value;
        if (!cli_split_flag(argv[i], &name, &value)) {
            if (path) {
                cli_error("inspect takes one file (got '%s' and '%s')", path, argv[i]);
                goto done;
            }
            path = argv[i];
            continue;
        }
        int r = cli_build_flag(&b, name, value);
        if (r < 0)
            goto done;
        if (r > 0)
            continue;
        if (strcmp(name, "--help") == 0) {
            cli_inspect_usage(stdout);
            rc = 0;
            goto done;
        } else if (strcmp(name, "--json") == 0) {
            if (!cli_no_value(name, value))
                goto done;
            as_json = true;
        } else if (strcmp(name, "--verbose") == 0) {
            if (!cli_no_value(name, value))
                goto done;
            cli_verbose = true;
        } else {
            cli_error("unknown flag '%s' (see kiln inspect --help)", name);
            goto done;
        }
    }
    if (!path) {
        cli_error("inspect needs a file: kiln inspect model.onnx|plan.kiln");
        goto done;
    }
    rc = 1;
    cli_install_logger(cli_verbose);
    g_miss.verbose = cli_verbose;
    kiln_set_logger(capture_sink, NULL, KILN_LOG_VERBOSE);
    bool built = false;

    unsigned char head[4096];
    long n = cli_read_head(path, head, sizeof head);
    if (n < 0)
        goto done;
    kiln_plan_info info;
    kiln_status st = kiln_plan_read_info(head, (size_t)n, &info);
    if (st == KILN_OK) {
        if (!as_json)
            print_plan_header(path, &info);
        if ((st = kiln_engine_load_file(path, &eng)) != KILN_OK) {
            cli_kiln_error(path, st);
            goto done;
        }
    } else if (n >= 8 && memcmp(head, "KILNPLAN", 8) == 0) {
        /* the plan magic (docs/plan-format.md) with a header that does not read */
        cli_kiln_error(path, st);
        goto done;
    } else {
        void *plan = NULL;
        size_t size = 0;
        double build_s = 0;
        if (!as_json)
            printf("%s is not a kiln plan; building it as an ONNX model in memory (not "
                   "saved)\n",
                   path);
        fflush(stdout);
        b.onnx = path;
        built = true;
        if (!cli_build_plan(&b, &plan, &size, &build_s))
            goto done;
        st = kiln_engine_load(plan, size, &eng);
        kiln_free(plan);
        if (st != KILN_OK) {
            cli_kiln_error("loading the built plan", st);
            goto done;
        }
        if (!as_json)
            printf("Built in %.3f s; the plan would be %zu bytes\n", build_s, size);
    }
    if ((st = kiln_engine_layer_info_json(eng, &json)) != KILN_OK) {
        cli_kiln_error("reading the engine's layer report", st);
        if (as_json)
            goto done;
    }
    if (as_json) {
        printf("%s\n", json);
        rc = 0;
        goto done;
    }
    print_io(eng);
    char err[160];
    root = json ? cj_parse(json, err, sizeof err) : NULL;
    if (json && !root)
        cli_warn("the engine's layer report does not parse (%s); showing the basics", err);
    if (root)
        print_report(eng, root);
    else
        print_layers_api(eng);
    print_misses(eng, built);
    rc = 0;
done:
    free_misses();
    cli_install_logger(cli_verbose);
    cj_free(root);
    kiln_free(json);
    kiln_engine_destroy(eng);
    cli_build_opts_free(&b);
    return rc;
}
