/* cmd_doctor.c - `kiln doctor PLAN`: will this plan run on this machine, with
 * these plugin libraries? Runs the deployment checks in a fresh child process
 * (so a crashing plugin is reported, not fatal), one row per check with what
 * was observed, what it means and what to do, and stops at the first failure
 * with a non-zero exit status. docs/plugin-guide.md lists every message. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "kiln/kiln_plugin.h"
#include "plugins_cli.h"

void cli_doctor_usage(FILE *f) {
    fprintf(f,
            "Usage: kiln doctor PLAN [--plugins=A.so,B.so] [--manifest=M.json] [--golden=DIR]\n"
            "                        [--tolerance=T] [--allowEmbeddedPlugins] [--iterations=N]\n"
            "                        [--allowEmbeddedPluginSha256=H1,H2] [--pluginNamespace=NS]\n"
            "\n"
            "Diagnose a deployment in a fresh process: plan version and target against this\n"
            "runtime and machine, plan and library SHA-256 against the manifest (kiln\n"
            "manifest), each library's loading (missing dependency, unresolved symbol, entry\n"
            "point, ABI version), the creators it registers, the plugin identities the plan\n"
            "needs, the plan's loading and, with --golden, a smoke run: DIR holds NAME.bin\n"
            "(raw data) for inputs and expected outputs, and optionally shapes.txt with lines\n"
            "NAME:1x3x224x224 for dynamic inputs. Outputs must be finite and within\n"
            "T*(1+|expected|) of the golden values (default 1e-3); first-run and steady-state\n"
            "p95 latencies are reported. One row per check: observation | meaning | next\n"
            "action. Exit status 1 at the first failure, 0 when every check passes.\n"
            "A library given with --plugins is hashed from the file that is loaded, and with\n"
            "--manifest one that differs from the manifest is refused before it runs. With\n"
            "--allowEmbeddedPlugins and a manifest, only the embedded libraries the manifest\n"
            "lists may load; --allowEmbeddedPluginSha256 names the allowed SHA-256s itself.\n"
            "--pluginNamespace=NS loads the --plugins libraries into that namespace. The plan\n"
            "header row reads the whole file: a truncated plan fails there, naming the offset.\n");
}

typedef struct dopts {
    const char *plan, *plugins, *manifest, *golden;
    double tol;
    int iterations;
    int allow_embedded;
    const char *allow_sha; /* --allowEmbeddedPluginSha256 */
} dopts;

static void row(const char *status, const char *check, const char *meaning, const char *next,
                const char *fmt, ...) CLI_PRINTF(5, 6);
static void row(const char *status, const char *check, const char *meaning, const char *next,
                const char *fmt, ...) {
    char obs[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(obs, sizeof obs, fmt, ap);
    va_end(ap);
    printf("[%s] %-18s %s | %s | %s\n", status, check, obs, meaning, next);
    fflush(stdout);
}

#define FAIL(check, meaning, next, ...)                  \
    do {                                                 \
        row("FAIL", check, meaning, next, __VA_ARGS__);  \
        return 1;                                        \
    } while (0)

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* The manifest's library entry with this file name, or NULL. */
static const cj_value *manifest_lib(const cj_value *m, const char *file) {
    const cj_value *libs = m ? cj_get(m, "libraries") : NULL;
    for (size_t i = 0; libs && i < libs->n; i++)
        if (strcmp(cj_str(&libs->items[i], "file", ""), file) == 0)
            return &libs->items[i];
    return NULL;
}

static int check_library(const char *path, const cj_value *manifest) {
    char check[64];
    snprintf(check, sizeof check, "library %.40s", base_name(path));
    const cj_value *ml = manifest_lib(manifest, base_name(path));
    const char *want = ml ? cj_str(ml, "sha256", "") : NULL;
    /* One file, resolved and opened once: what is hashed is what is loaded,
     * and a library that is not the manifest's is refused before any of its
     * code runs. */
    int before = kiln_plugin_count();
    kiln_plugin_library *lib = NULL;
    kiln_status st = kiln_plugin_load_library_sha256(path, cli_plugin_namespace(), want, &lib);
    if (st != KILN_OK) {
        const char *e = kiln_last_error();
        if (st == KILN_ERR_IO)
            FAIL(check, "the library file is not there, not readable or not a regular file",
                 "copy the library to this path (kiln manifest lists the files to ship)", "%s",
                 e);
        if (strstr(e, "not the expected") || st == KILN_ERR_INVALID_ARGUMENT)
            FAIL(check, "the library differs from the one the manifest was made with",
                 "ship the library named in the manifest, or rebuild the plan and manifest with "
                 "this one", "%s", e);
    }
    if (st == KILN_OK) {
        const char *sha = kiln_plugin_library_sha256(lib);
        char *real = realpath(path, NULL);
        if (manifest && !ml)
            row("WARN", check, "the manifest does not list this library",
                "check that this is the library the plan was built with",
                "%s: sha256 %.16s...", real ? real : path, sha);
        else if (ml)
            row("PASS", check, "the library loaded is the one the manifest lists",
                "nothing to do", "%s: sha256 %.16s... matches the manifest",
                real ? real : path, sha);
        else
            row("INFO", check, "the library loaded has this SHA-256 (no manifest to compare)",
                "pass --manifest to check it", "%s: sha256 %.16s...", real ? real : path, sha);
        free(real);
    }
    if (st != KILN_OK) {
        const char *e = kiln_last_error();
        if (strstr(e, "missing dependency"))
            FAIL("library loads", "the OS loader cannot find a library this plugin links against",
                 "install the missing library or add its folder to LD_LIBRARY_PATH (`ldd LIB` "
                 "lists what is missing)", "%s", e);
        if (strstr(e, "unresolved symbol"))
            FAIL("library loads", "the plugin needs a symbol that no loaded library defines: it "
                 "was built against other library versions",
                 "rebuild the plugin against the libraries on this machine, or install the "
                 "versions it was built with", "%s", e);
        if (strstr(e, "no entry point"))
            FAIL("library loads", "the file is not a kiln plugin library, or its entry point is "
                 "not exported", "export kiln_plugin_get_creators (extern \"C\", default "
                 "visibility)", "%s", e);
        if (st == KILN_ERR_VERSION)
            FAIL("library loads", "the plugin was built against a plugin ABI this kiln does not "
                 "know", "rebuild the plugin against this kiln's kiln_plugin.h, or upgrade kiln",
                 "%s", e);
        if (strstr(e, "already registered"))
            FAIL("library loads", "two libraries provide the same (name, version, namespace)",
                 "ship one of them, or load one with another namespace", "%s", e);
        FAIL("library loads", "the library could not be loaded",
             "read the loader's message; `ldd` and `nm -D` show dependencies and symbols", "%s",
             e);
    }
    int added = kiln_plugin_count() - before;
    row("PASS", "library loads", "dlopen, entry point and ABI version are fine", "nothing to do",
        "%s loaded", base_name(path));
    if (added <= 0)
        FAIL("creators", "the library registers no plugin creators",
             "check the library's kiln_plugin_get_creators", "%s registered 0 creators", path);
    char names[512] = "";
    size_t at = 0;
    for (int i = 0; i < kiln_plugin_count() && at + 1 < sizeof names; i++) {
        const kiln_plugin_creator *c = kiln_plugin_at(i, NULL);
        if (c && kiln_plugin_creator_library(c) == lib) {
            int w = snprintf(names + at, sizeof names - at, "%s%s/%s/'%s'", at ? ", " : "",
                             c->name, c->version, c->plugin_namespace ? c->plugin_namespace : "");
            at += w > 0 ? (size_t)w : 0;
        }
    }
    row("PASS", "creators", "these identities are now registered", "nothing to do",
        "%d creator(s): %s", added, names);
    return 0;
}

static int check_plan_static(const dopts *o, const void *plan, size_t size, cj_value *manifest) {
    kiln_plan_info info;
    kiln_status st = kiln_plan_read_info(plan, size, &info);
    if (st != KILN_OK)
        FAIL("plan header", "the file is not a kiln plan, or its header is damaged",
             "copy the plan again or rebuild it with kiln exec --saveEngine", "%s",
             kiln_last_error());
    /* the whole file is read (cli_read_file): a header that reads is not
     * enough, the bytes it promises must be there */
    if (info.file_size > size)
        FAIL("plan header", "the plan is truncated: the file ends before the size its header "
             "records",
             "copy the whole plan again (compare its size and SHA-256 with the source's)",
             "the file ends at byte offset %zu; the header says the plan is %llu bytes (%llu "
             "missing)", size, (unsigned long long)info.file_size,
             (unsigned long long)(info.file_size - size));
    if (info.file_size < size)
        FAIL("plan header", "the file is longer than the plan its header describes",
             "copy the plan again; something was appended to it",
             "the plan ends at byte offset %llu; the file has %zu bytes",
             (unsigned long long)info.file_size, size);
    char *sections = NULL; /* the section table must fit the bytes read */
    st = kiln_plan_plugins_json(plan, size, &sections);
    kiln_free(sections);
    if (st != KILN_OK)
        FAIL("plan header", "the plan's section table does not fit the file",
             "copy the plan again or rebuild it with kiln exec --saveEngine", "%s",
             kiln_last_error());
    row("PASS", "plan header", "the file is a whole kiln plan", "nothing to do",
        "format %u, %llu bytes, backend %s", info.format_version,
        (unsigned long long)info.file_size, info.backend);
    unsigned pv = info.kiln_version;
    if (pv / 100 != KILN_VERSION_NUMBER / 100)
        FAIL("plan version", "a plan loads only in the kiln major.minor that built it",
             "rebuild the plan with this kiln, or deploy the kiln that built it",
             "built by kiln %u.%u.%u, this runtime is kiln %s", pv / 10000, pv / 100 % 100,
             pv % 100, kiln_version_string());
    row("PASS", "plan version", "this runtime reads plans of that version", "nothing to do",
        "built by kiln %u.%u.%u, runtime kiln %s", pv / 10000, pv / 100 % 100, pv % 100,
        kiln_version_string());
    char target[64], libs[128];
    st = kiln_backend_describe(info.backend, target, sizeof target, libs, sizeof libs);
    if (st != KILN_OK)
        FAIL("target", "this machine cannot run the plan's backend",
             "run on a machine with that device, or rebuild the plan for this one", "%s",
             kiln_last_error());
    if (strcmp(target, info.target) != 0)
        FAIL("target", "plans are bound to the device architecture they were built for",
             "rebuild the plan on this machine (kiln exec --onnx ... --saveEngine)",
             "plan built for '%s', this machine is '%s'", info.target, target);
    if (strcmp(libs, info.libraries) != 0)
        row("WARN", "target", "the plan's tactics were timed with other library versions",
            "results stay correct; rebuild for best speed", "plan '%s', machine '%s'",
            info.libraries, libs);
    else
        row("PASS", "target", "the plan was built for this machine", "nothing to do",
            "%s on %s", info.backend, target);
    if (manifest) {
        char sha[65];
        kiln_sha256_hex(plan, size, sha);
        const cj_value *mp = cj_get(manifest, "plan");
        const char *want = mp ? cj_str(mp, "sha256", "") : "";
        if (strcmp(sha, want) != 0)
            FAIL("plan sha256", "this is not the plan the manifest describes",
                 "deploy the manifest's plan, or make a new manifest (kiln manifest)",
                 "plan %.16s..., manifest %.16s...", sha, want);
        row("PASS", "plan sha256", "the plan is the one the manifest describes",
            "nothing to do", "%.16s...", sha);
    }
    return 0;
}

static int check_manifest_libs(const cj_value *manifest) {
    const cj_value *libs = manifest ? cj_get(manifest, "libraries") : NULL;
    for (size_t i = 0; libs && i < libs->n; i++) {
        const cj_value *l = &libs->items[i];
        if (strcmp(cj_str(l, "packaging", "external"), "external") != 0)
            continue;
        const char *sha = cj_str(l, "sha256", "");
        bool found = false;
        for (int k = 0; k < kiln_plugin_count() && !found; k++) {
            const kiln_plugin_library *lib = kiln_plugin_creator_library(kiln_plugin_at(k, NULL));
            found = lib && strcmp(kiln_plugin_library_sha256(lib), sha) == 0;
        }
        if (!found)
            FAIL("manifest libraries", "the manifest says this library must be installed",
                 "pass it with --plugins (and ship it with the plan)",
                 "'%s' (sha256 %.16s...) was not given", cj_str(l, "file", "?"), sha);
    }
    if (libs)
        row("PASS", "manifest libraries", "every external library of the manifest is loaded",
            "nothing to do", "%zu librar%s", libs->n, libs->n == 1 ? "y" : "ies");
    return 0;
}

static int check_identities(const dopts *o, const void *plan, size_t size) {
    char *json = NULL;
    kiln_status st = kiln_plan_plugins_json(plan, size, &json);
    if (st != KILN_OK)
        FAIL("plugin records", "the plan's plugin records are damaged", "rebuild the plan",
             "%s", kiln_last_error());
    char err[256];
    cj_value *v = cj_parse(json, err, sizeof err);
    kiln_free(json);
    if (!v)
        FAIL("plugin records", "the plan's plugin records do not parse", "rebuild the plan",
             "%s", err);
    const cj_value *libs = cj_get(v, "libraries"), *recs = cj_get(v, "plugins");
    size_t n = recs ? recs->n : 0, missing = 0;
    for (size_t i = 0; i < n; i++) {
        const cj_value *r = &recs->items[i];
        const char *name = cj_str(r, "name", ""), *ver = cj_str(r, "version", ""),
                   *ns = cj_str(r, "namespace", "");
        if (kiln_plugin_find(name, ver, ns))
            continue;
        int li = (int)cj_num(r, "library", -1);
        const cj_value *l = li >= 0 && libs && (size_t)li < libs->n ? &libs->items[li] : NULL;
        bool embedded = l && strcmp(cj_str(l, "packaging", ""), "embedded") == 0;
        if (embedded && (o->allow_embedded || o->allow_sha))
            continue; /* the plan brings it; the load check below proves it */
        missing++;
        char same[512] = "";
        size_t at = 0;
        for (int k = 0; k < kiln_plugin_count() && at + 1 < sizeof same; k++) {
            const kiln_plugin_creator *c = kiln_plugin_at(k, NULL);
            if (c && strcmp(c->name, name) == 0) {
                int w = snprintf(same + at, sizeof same - at, "%s(version '%s', namespace '%s')",
                                 at ? ", " : "", c->version,
                                 c->plugin_namespace ? c->plugin_namespace : "");
                at += w > 0 ? (size_t)w : 0;
            }
        }
        if (embedded)
            row("FAIL", "plugin identities", "the plan embeds the library that provides it, but "
                "embedded libraries load only when allowed",
                "pass --allowEmbeddedPlugins if you trust this plan, or --plugins the library",
                "layer '%s' needs '%s' (version '%s', namespace '%s') from embedded '%s'",
                cj_str(r, "layer", ""), name, ver, ns, cj_str(l, "file", ""));
        else
            row("FAIL", "plugin identities", "the plan needs a plugin no loaded library provides",
                l ? "pass the library the plan was built with in --plugins (see kiln manifest)"
                  : "register the plugin in the application before loading the plan",
                "layer '%s' needs '%s' (version '%s', namespace '%s')%s%s%s, not registered; "
                "registered with that name: %s", cj_str(r, "layer", ""), name, ver, ns,
                l ? " from library '" : "", l ? cj_str(l, "file", "") : "", l ? "'" : "",
                at ? same : "none");
        cj_free(v);
        return 1;
    }
    row("PASS", "plugin identities", "every plugin the plan needs is available", "nothing to do",
        "%zu plugin layer(s), %zu missing", n, missing);
    cj_free(v);
    return 0;
}

/* Permission for the plan's embedded libraries: the SHA-256s given, else
 * with --allowEmbeddedPlugins those of the manifest's embedded libraries (the
 * trust decision comes from outside the plan), else the blanket switch. */
static int allow_embedded(const dopts *o, const cj_value *manifest) {
    if (o->allow_sha) {
        if (!cli_plugin_allow_sha_list(o->allow_sha))
            FAIL("embedded libraries", "--allowEmbeddedPluginSha256 is not a list of SHA-256s",
                 "give 64 hex digits per library (kiln manifest lists them)", "'%s'",
                 o->allow_sha);
        row("PASS", "embedded libraries", "only embedded libraries with these SHA-256s may load",
            "nothing to do", "%s", o->allow_sha);
        return 0;
    }
    if (!o->allow_embedded)
        return 0;
    kiln_plugin_allow_embedded_libraries(1);
    const cj_value *libs = manifest ? cj_get(manifest, "libraries") : NULL;
    int listed = 0;
    for (size_t i = 0; libs && i < libs->n; i++) {
        const cj_value *l = &libs->items[i];
        if (strcmp(cj_str(l, "packaging", ""), "embedded") != 0)
            continue;
        if (kiln_plugin_allow_embedded_sha256(cj_str(l, "sha256", "")) != KILN_OK)
            FAIL("embedded libraries", "the manifest's SHA-256 of an embedded library is "
                 "malformed", "regenerate the manifest with kiln manifest", "%s",
                 kiln_last_error());
        listed++;
    }
    if (listed)
        row("PASS", "embedded libraries", "only the embedded libraries the manifest lists may "
            "load", "nothing to do", "%d SHA-256(s) from the manifest", listed);
    return 0;
}

static double pctl(double *v, int n, double p) {
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    int k = (int)ceil(p / 100.0 * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* The dims of `name` in dir/shapes.txt, lines "name:AxBxC". */
static bool golden_shape(const char *dir, const char *name, int rank, int64_t *dims) {
    char path[4096];
    snprintf(path, sizeof path, "%s/shapes.txt", dir);
    void *text = NULL;
    size_t size = 0;
    if (access(path, R_OK) != 0 || !cli_read_file(path, &text, &size))
        return false;
    bool found = false;
    size_t nl = strlen(name);
    for (char *line = text, *end = (char *)text + size; !found && line < end;) {
        char *eol = memchr(line, '\n', (size_t)(end - line));
        char *next = eol ? eol + 1 : end;
        if (eol)
            *eol = 0;
        char *colon = strrchr(line, ':'); /* cli_read_file ends the text with a NUL */
        if (colon && (size_t)(colon - line) == nl && strncmp(line, name, nl) == 0) {
            char *p = colon + 1;
            int r = 0;
            while (r < rank && *p) {
                dims[r++] = strtoll(p, &p, 10);
                if (*p == 'x')
                    p++;
                else
                    break;
            }
            found = r == rank;
        }
        line = next;
    }
    free(text);
    return found;
}

static int smoke_run(const dopts *o, kiln_engine *eng) {
    kiln_context *ctx = NULL;
    kiln_status st = kiln_context_create(eng, &ctx);
    if (st != KILN_OK)
        FAIL("smoke run", "an execution context could not be made", "see the message",
             "%s", kiln_last_error());
    int n_io = kiln_engine_num_io_tensors(eng);
    void *bufs[64] = {0}, *devs[64] = {0};
    size_t sizes[64] = {0};
    int rc = 0;
    for (int i = 0; i < n_io && i < 64 && !rc; i++) {
        const char *name = kiln_engine_io_tensor_name(eng, i);
        if (kiln_engine_tensor_io_mode(eng, name) != KILN_IO_INPUT)
            continue;
        int64_t dims[KILN_MAX_DIMS];
        int rank = kiln_engine_tensor_shape(eng, name, dims);
        bool dynamic = false;
        for (int d = 0; d < rank; d++)
            dynamic |= dims[d] < 0;
        if (dynamic && !golden_shape(o->golden, name, rank, dims)) {
            int r = 0;
            int64_t opt[KILN_MAX_DIMS];
            if (kiln_engine_profile_shape(eng, 0, name, &r, NULL, opt, NULL) == KILN_OK)
                memcpy(dims, opt, sizeof opt);
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.bin", o->golden, name);
        size_t want = cli_volume(rank, dims) * kiln_dtype_size(kiln_engine_tensor_dtype(eng, name));
        if (!cli_read_file(path, &bufs[i], &sizes[i])) {
            row("FAIL", "golden inputs", "the golden folder lacks an input",
                "write NAME.bin for every input (raw data of the engine's type)",
                "no '%s'", path);
            rc = 1;
        } else if (sizes[i] != want) {
            row("FAIL", "golden inputs", "the golden input does not fit the input's shape",
                "give its shape in shapes.txt (NAME:1x3x224x224) or fix the file",
                "'%s' has %zu bytes, the shape needs %zu", path, sizes[i], want);
            rc = 1;
        } else if ((st = kiln_context_set_input_shape(ctx, name, rank, dims)) != KILN_OK ||
                   /* engine memory (the device's for a GPU plan); shape tensors stay on the host */
                   (!kiln_engine_tensor_is_shape_input(eng, name) &&
                    ((st = kiln_engine_alloc(eng, sizes[i] + 64, &devs[i])) != KILN_OK ||
                     (sizes[i] && (st = kiln_engine_copy(eng, devs[i], bufs[i], sizes[i],
                                                         KILN_COPY_TO_DEVICE)) != KILN_OK))) ||
                   (st = kiln_context_set_tensor_address(ctx, name, devs[i] ? devs[i] : bufs[i])) !=
                       KILN_OK) {
            row("FAIL", "golden inputs", "the input shape is outside the plan's profile",
                "use a shape inside the profile", "%s", kiln_last_error());
            rc = 1;
        }
    }
    if (!rc)
        row("PASS", "golden inputs", "every input has golden data", "nothing to do",
            "read from %s", o->golden);
    double t0 = cli_now_s();
    if (!rc && (st = kiln_context_enqueue(ctx, NULL)) == KILN_OK)
        st = kiln_context_synchronize(ctx, NULL);
    double first = (cli_now_s() - t0) * 1e3;
    if (!rc && st != KILN_OK) {
        row("FAIL", "first run", "the plan fails when it runs (a plugin's message names it)",
            "fix the layer named in the message; rerun with --verbose", "%s", kiln_last_error());
        rc = 1;
    }
    if (!rc)
        row("PASS", "first run", "the plan runs", "nothing to do", "%.3f ms", first);
    for (int i = 0; i < n_io && i < 64 && !rc; i++) {
        const char *name = kiln_engine_io_tensor_name(eng, i);
        if (kiln_engine_tensor_io_mode(eng, name) != KILN_IO_OUTPUT)
            continue;
        int64_t dims[KILN_MAX_DIMS];
        int rank = kiln_context_tensor_shape(ctx, name, dims);
        kiln_dtype dt = kiln_engine_tensor_dtype(eng, name);
        size_t count = rank >= 0 ? cli_volume(rank, dims) : 0;
        const void *out = kiln_context_tensor_address(ctx, name);
        void *host = malloc(count * kiln_dtype_size(dt) + 1);
        if (out && host && kiln_engine_copy(eng, host, out, count * kiln_dtype_size(dt),
                                            KILN_COPY_TO_HOST) != KILN_OK)
            count = 0;
        size_t bad = 0;
        for (size_t k = 0; cli_dtype_is_float(dt) && k < count; k++)
            bad += !isfinite(cli_elem_get(dt, host, k));
        if (bad) {
            row("FAIL", "outputs finite", "the plan produces NaN or Inf",
                "find the layer with kiln compare --all-tensors; check FP16 ranges and plugins",
                "output '%s': %zu of %zu values are not finite", name, bad, count);
            rc = 1;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.bin", o->golden, name);
        void *gold = NULL;
        size_t gsize = 0;
        if (!rc && access(path, R_OK) == 0 && cli_read_file(path, &gold, &gsize)) {
            double worst = 0;
            size_t at = 0;
            if (gsize != count * kiln_dtype_size(dt)) {
                row("FAIL", "outputs vs golden", "the golden output has another size",
                    "regenerate the golden outputs for these inputs",
                    "'%s' has %zu bytes, the output %zu", path, gsize, count * kiln_dtype_size(dt));
                rc = 1;
            }
            for (size_t k = 0; !rc && k < count; k++) {
                double a = cli_elem_get(dt, host, k), b = cli_elem_get(dt, gold, k);
                double e = fabs(a - b) / (1.0 + fabs(b));
                if (e > worst) {
                    worst = e;
                    at = k;
                }
            }
            if (!rc && worst > o->tol) {
                row("FAIL", "outputs vs golden", "the outputs differ from the golden ones",
                    "check precision flags and plugin versions; kiln compare finds the layer",
                    "output '%s': worst error %.3g at element %zu > tolerance %.3g", name, worst,
                    at, o->tol);
                rc = 1;
            } else if (!rc) {
                row("PASS", "outputs vs golden", "outputs match the golden ones", "nothing to do",
                    "output '%s': worst error %.3g <= %.3g", name, worst, o->tol);
            }
            free(gold);
        } else if (!rc) {
            row("PASS", "outputs finite", "no golden output to compare; values are finite",
                "add NAME.bin for outputs to compare", "output '%s': %zu values", name, count);
        }
        free(host);
    }
    if (!rc) {
        int n = o->iterations > 0 ? o->iterations : 20;
        double *ms = calloc((size_t)n, sizeof *ms);
        for (int k = 0; ms && k < n && st == KILN_OK; k++) {
            double s = cli_now_s();
            st = kiln_context_enqueue(ctx, NULL);
            if (st == KILN_OK)
                st = kiln_context_synchronize(ctx, NULL);
            ms[k] = (cli_now_s() - s) * 1e3;
        }
        if (st != KILN_OK) {
            row("FAIL", "steady state", "a later run failed", "see the message", "%s",
                kiln_last_error());
            rc = 1;
        } else if (ms) {
            double p95 = pctl(ms, n, 95), p50 = pctl(ms, n, 50);
            row("PASS", "steady state", "latency after the first run", "nothing to do",
                "first run %.3f ms, then p50 %.3f ms, p95 %.3f ms over %d runs", first, p50, p95,
                n);
        }
        free(ms);
    }
    kiln_context_destroy(ctx);
    for (int i = 0; i < 64; i++) {
        free(bufs[i]);
        if (devs[i])
            kiln_engine_free(eng, devs[i]);
    }
    return rc;
}

static int diagnose(const dopts *o) {
    cj_value *manifest = NULL;
    if (o->manifest) {
        void *text = NULL;
        size_t n = 0;
        char err[256];
        if (!cli_read_file(o->manifest, &text, &n))
            FAIL("manifest", "the manifest cannot be read", "give the file kiln manifest wrote",
                 "cannot read '%s'", o->manifest);
        char *z = realloc(text, n + 1);
        if (z)
            z[n] = 0;
        manifest = z ? cj_parse(z, err, sizeof err) : NULL;
        free(z);
        if (!manifest)
            FAIL("manifest", "the manifest is not JSON", "regenerate it with kiln manifest",
                 "'%s': %s", o->manifest, z ? err : "out of memory");
        row("PASS", "manifest", "the manifest was read", "nothing to do", "built for kiln %s",
            cj_str(manifest, "kiln_version", "?"));
    }
    void *plan = NULL;
    size_t size = 0;
    int rc = 0;
    if (!cli_read_file(o->plan, &plan, &size)) {
        row("FAIL", "plan file", "the plan cannot be read", "check the path and permissions",
            "cannot read '%s'", o->plan);
        cj_free(manifest);
        return 1;
    }
    rc = check_plan_static(o, plan, size, manifest);
    if (o->plugins && !rc) {
        char *copy = strdup(o->plugins);
        for (char *s = NULL, *p = strtok_r(copy, ",", &s); p && !rc; p = strtok_r(NULL, ",", &s))
            rc = check_library(p, manifest);
        free(copy);
    }
    if (!rc && manifest)
        rc = check_manifest_libs(manifest);
    if (!rc)
        rc = check_identities(o, plan, size);
    if (!rc)
        rc = allow_embedded(o, manifest);
    if (!rc) {
        kiln_engine *eng = NULL;
        kiln_status st = kiln_engine_load(plan, size, &eng);
        if (st != KILN_OK) {
            row("FAIL", "plan loads", "the runtime refuses the plan", "act on the message",
                "%s", kiln_last_error());
            rc = 1;
        } else {
            row("PASS", "plan loads", "an engine was made from the plan", "nothing to do",
                "%d layers, %d I/O tensors", kiln_engine_num_layers(eng),
                kiln_engine_num_io_tensors(eng));
            if (o->golden)
                rc = smoke_run(o, eng);
            else
                row("SKIP", "smoke run", "no golden data given",
                    "pass --golden=DIR to run the plan on known inputs", "-");
            kiln_engine_destroy(eng);
        }
    }
    free(plan);
    cj_free(manifest);
    if (!rc)
        printf("doctor: every check passed\n");
    return rc;
}

int cli_cmd_doctor(int argc, char **argv) {
    dopts o = {0};
    o.tol = 1e-3;
    o.iterations = 20;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--plugins=", 10) == 0)
            o.plugins = a + 10;
        else if (strncmp(a, "--manifest=", 11) == 0)
            o.manifest = a + 11;
        else if (strncmp(a, "--golden=", 9) == 0)
            o.golden = a + 9;
        else if (strncmp(a, "--tolerance=", 12) == 0)
            o.tol = atof(a + 12);
        else if (strncmp(a, "--iterations=", 13) == 0)
            o.iterations = atoi(a + 13);
        else if (strcmp(a, "--allowEmbeddedPlugins") == 0)
            o.allow_embedded = 1;
        else if (strncmp(a, "--allowEmbeddedPluginSha256=", 28) == 0)
            o.allow_sha = a + 28;
        else if (strncmp(a, "--pluginNamespace", 17) == 0 && (a[17] == '=' || !a[17])) {
            if (cli_plugin_namespace_flag("--pluginNamespace", a[17] ? a + 18 : NULL) < 0)
                return 2;
        } else if (strcmp(a, "--verbose") == 0)
            cli_install_logger(true);
        else if (strcmp(a, "--help") == 0) {
            cli_doctor_usage(stdout);
            return 0;
        } else if ((strcmp(a, "--plugins") == 0 || strcmp(a, "--manifest") == 0 ||
                    strcmp(a, "--golden") == 0) && i + 1 < argc) {
            const char *v = argv[++i];
            if (a[2] == 'p')
                o.plugins = v;
            else if (a[2] == 'm')
                o.manifest = v;
            else
                o.golden = v;
        } else if (a[0] != '-' && !o.plan)
            o.plan = a;
        else {
            cli_error("kiln doctor: unknown argument '%s' (see kiln help doctor)", a);
            return 2;
        }
    }
    if (!o.plan) {
        cli_error("kiln doctor: give a plan file (see kiln help doctor)");
        return 2;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) /* no child: diagnose here */
        return diagnose(&o);
    if (pid == 0) {
        int rc = diagnose(&o);
        fflush(stdout);
        _exit(rc ? 1 : 0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) {
        cli_error("kiln doctor: lost the diagnosis process");
        return 1;
    }
    if (WIFSIGNALED(status)) {
        row("FAIL", "crash", "the runtime or a plugin crashed during the last check above",
            "run the failing step under gdb; rebuild the plugin with -fsanitize=address",
            "the diagnosis process died of signal %d", WTERMSIG(status));
        return 1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
