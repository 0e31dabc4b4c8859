/* polygraphy.c - Polygraphy's spellings in `kiln compare`, so that a
 * `polygraphy run` command line ports by changing the program name:
 * space-separated values (--atol 1e-2 out:1e-3), --input-shapes
 * name:[1,3,224,224], --trt / --onnxrt as selectors that change nothing
 * (kiln is the runner under test, the reference is chosen by --reference),
 * --layer-precisions name:float16, --precision-constraints, --pool-limit;
 * and Polygraphy's JSON results (RunResults: runners, iterations, outputs as
 * base64 .npy images) for --save-results / --load-results, and its JSON
 * input feeds for --save-inputs / --load-inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json.h"
#include "npy.h"
#include "polygraphy.h"

/* ---- base64 ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *d, size_t n) {
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        *o++ = b64[v >> 18 & 63];
        *o++ = b64[v >> 12 & 63];
        *o++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? b64[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int b64_value(char c) {
    const char *p = c ? strchr(b64, c) : NULL;
    return p ? (int)(p - b64) : -1;
}

/* Decodes s (padding optional, no whitespace); NULL when malformed. */
static unsigned char *b64_decode(const char *s, size_t *n) {
    size_t len = strlen(s);
    while (len && s[len - 1] == '=')
        len--;
    unsigned char *out = malloc(len / 4 * 3 + 3), *o = out;
    if (!out)
        return NULL;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value(s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            *o++ = (unsigned char)(acc >> bits & 0xff);
        }
    }
    *n = (size_t)(o - out);
    return out;
}

/* ---- arrays ---- */

/* An ndarray as Polygraphy writes it: {"array": base64 .npy,
 * "polygraphy_class": "ndarray"}, or wrapped in a LazyArray {"values": ...}. */
static bool read_array(const cj_value *v, const char *name, const char *file, npy_list *out,
                       char *err, size_t cap) {
    const cj_value *vals = cj_get(v, "values");
    if (vals && vals->type == CJ_OBJECT)
        v = vals; /* LazyArray */
    const char *cls = cj_str(v, "polygraphy_class", "");
    const cj_value *arr = cj_get(v, "array");
    if (strcmp(cls, "ndarray") != 0 || !arr || arr->type != CJ_STRING) {
        snprintf(err, cap, "%s: tensor '%s' is not a Polygraphy ndarray (polygraphy_class '%s')",
                 file, name, cls);
        return false;
    }
    size_t n = 0;
    unsigned char *bytes = b64_decode(arr->string, &n);
    if (!bytes) {
        snprintf(err, cap, "%s: tensor '%s': its array is not base64", file, name);
        return false;
    }
    npy_array a;
    char e2[NPY_ERR_CAP];
    bool ok = npy_decode(bytes, n, file, &a, e2);
    free(bytes);
    if (!ok) {
        snprintf(err, cap, "%s: tensor '%s': %s", file, name, e2);
        return false;
    }
    ok = npy_list_add(out, name, a.dtype, a.rank, a.dims, a.data, a.bytes);
    npy_array_free(&a);
    if (!ok)
        snprintf(err, cap, "out of memory");
    return ok;
}

static bool read_feed(const cj_value *feed, const char *file, npy_list *out, char *err,
                      size_t cap) {
    if (!feed || feed->type != CJ_OBJECT) {
        snprintf(err, cap, "%s: expected an object of name: array", file);
        return false;
    }
    for (size_t i = 0; i < feed->n; i++)
        if (!read_array(&feed->items[i], feed->items[i].key, file, out, err, cap))
            return false;
    return true;
}

static cj_value *read_json(const char *path, char *err, size_t cap) {
    void *text = NULL;
    size_t size = 0;
    if (!cli_read_file(path, &text, &size)) {
        snprintf(err, cap, "cannot read '%s'", path);
        return NULL;
    }
    char perr[256];
    cj_value *root = cj_parse(text, perr, sizeof perr);
    free(text);
    if (!root)
        snprintf(err, cap, "%s: not JSON: %s", path, perr);
    return root;
}

bool pg_is_json(const char *path) {
    size_t n = path ? strlen(path) : 0;
    return n > 5 && strcmp(path + n - 5, ".json") == 0;
}

bool pg_load_results(const char *path, npy_list *out, char *runner, size_t runner_cap,
                     char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    cj_value *root = read_json(path, err, cap);
    if (!root)
        return false;
    bool ok = false;
    const cj_value *lst = cj_get(root, "lst");
    if (strcmp(cj_str(root, "polygraphy_class", ""), "RunResults") != 0 || !lst ||
        lst->type != CJ_ARRAY || lst->n == 0) {
        snprintf(err, cap, "%s: not Polygraphy results (a RunResults object with runners)", path);
        goto done;
    }
    /* the reference: the first runner that is not kiln's own, else the first */
    const cj_value *pick = NULL;
    for (size_t i = 0; i < lst->n && !pick; i++) {
        const cj_value *e = &lst->items[i];
        if (e->type == CJ_ARRAY && e->n == 2 && e->items[0].type == CJ_STRING &&
            strncmp(e->items[0].string, "kiln-runner", 11) != 0)
            pick = e;
    }
    if (!pick)
        pick = &lst->items[0];
    if (pick->type != CJ_ARRAY || pick->n != 2 || pick->items[0].type != CJ_STRING ||
        pick->items[1].type != CJ_ARRAY || pick->items[1].n == 0) {
        snprintf(err, cap, "%s: a runner entry is not [name, [iteration results]]", path);
        goto done;
    }
    snprintf(runner, runner_cap, "%s", pick->items[0].string);
    if (pick->items[1].n > 1)
        cli_warn("--load-results: %s: runner '%s' has %zu iterations; the first is compared",
                 path, runner, pick->items[1].n);
    ok = read_feed(cj_get(&pick->items[1].items[0], "outputs"), path, out, err, cap);
done:
    cj_free(root);
    if (!ok)
        npy_list_free(out);
    return ok;
}

bool pg_load_inputs(const char *path, npy_list *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    cj_value *root = read_json(path, err, cap);
    if (!root)
        return false;
    bool ok = false;
    /* a list of feeds (one per iteration); the first is used */
    if (root->type != CJ_ARRAY || root->n == 0)
        snprintf(err, cap, "%s: Polygraphy inputs are a list of feeds (name: array)", path);
    else
        ok = read_feed(&root->items[0], path, out, err, cap);
    cj_free(root);
    if (!ok)
        npy_list_free(out);
    return ok;
}

/* ---- writing ---- */

/* results wrap each array in a LazyArray (as Polygraphy writes them); input
 * feeds hold plain ndarrays */
static bool write_feed(FILE *f, const npy_list *l, const char *indent, bool lazy, char *err,
                       size_t cap) {
    fprintf(f, "{");
    for (int i = 0; i < l->n; i++) {
        void *img = NULL;
        size_t n = 0;
        char e2[NPY_ERR_CAP];
        if (!npy_encode(&l->items[i], &img, &n, e2)) {
            snprintf(err, cap, "tensor '%s': %s", l->items[i].name, e2);
            return false;
        }
        char *enc = b64_encode(img, n);
        free(img);
        if (!enc) {
            snprintf(err, cap, "out of memory");
            return false;
        }
        fprintf(f, "%s\n%s    ", i ? "," : "", indent);
        cli_json_string(f, l->items[i].name);
        if (lazy)
            fprintf(f, ": {\"values\": {\"array\": \"%s\", \"polygraphy_class\": \"ndarray\"}, "
                       "\"polygraphy_class\": \"LazyArray\"}",
                    enc);
        else
            fprintf(f, ": {\"array\": \"%s\", \"polygraphy_class\": \"ndarray\"}", enc);
        free(enc);
    }
    fprintf(f, "\n%s}", indent);
    return true;
}

static void stamp(char *buf, size_t cap) {
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, cap, "%m/%d/%y-%H:%M:%S", &tm);
}

bool pg_save_results(const char *path, const pg_runner *runners, int n, char *err, size_t cap) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, cap, "cannot write '%s'", path);
        return false;
    }
    char when[32];
    stamp(when, sizeof when);
    bool ok = true;
    fprintf(f, "{\n    \"lst\": [");
    for (int r = 0; r < n && ok; r++) {
        char full[256];
        snprintf(full, sizeof full, "%s-N0-%s", runners[r].name, when);
        fprintf(f, "%s\n        [\n            ", r ? "," : "");
        cli_json_string(f, full);
        fprintf(f, ",\n            [\n                {\n                    \"outputs\": ");
        ok = write_feed(f, runners[r].outputs, "                    ", true, err, cap);
        fprintf(f, ",\n                    \"runtime\": null,\n                    "
                   "\"runner_name\": ");
        snprintf(full, sizeof full, "%s-N0", runners[r].name);
        cli_json_string(f, full);
        fprintf(f, ",\n                    \"polygraphy_class\": \"IterationResult\"\n"
                   "                }\n            ]\n        ]");
    }
    fprintf(f, "\n    ],\n    \"polygraphy_class\": \"RunResults\"\n}\n");
    if (fclose(f) != 0 && ok) {
        snprintf(err, cap, "writing '%s' failed", path);
        ok = false;
    }
    return ok;
}

bool pg_save_inputs(const char *path, const npy_list *inputs, char *err, size_t cap) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, cap, "cannot write '%s'", path);
        return false;
    }
    fprintf(f, "[\n    ");
    bool ok = write_feed(f, inputs, "    ", false, err, cap);
    fprintf(f, "\n]\n");
    if (fclose(f) != 0 && ok) {
        snprintf(err, cap, "writing '%s' failed", path);
        ok = false;
    }
    return ok;
}

/* ---- command-line spellings ---- */

static bool is_number(const char *s) {
    char *end;
    if (!*s)
        return false;
    strtod(s, &end);
    return *end == '\0';
}

/* [name:]number, Polygraphy's per-output tolerance */
static bool is_tolerance(const char *s) {
    const char *colon = strrchr(s, ':');
    return s[0] != '-' && is_number(colon ? colon + 1 : s);
}

static bool is_shape_entry(const char *s) {
    const char *colon = strrchr(s, ':');
    return s[0] != '-' && colon && colon[1] == '[' && s[strlen(s) - 1] == ']';
}

static bool is_value(const char *s) { return s[0] != '-' || is_number(s); }

/* name:[1,3,224,224] -> name:1x3x224x224 ([] is a scalar: "name:") */
static void append_shape(char *buf, size_t cap, const char *s) {
    size_t len = strlen(buf);
    const char *colon = strrchr(s, ':');
    snprintf(buf + len, cap - len, "%s%.*s:", len ? "," : "", (int)(colon - s), s);
    len = strlen(buf);
    for (const char *p = colon + 2; *p && *p != ']' && len + 2 < cap; p++)
        if (*p != ' ')
            buf[len++] = *p == ',' ? 'x' : *p;
    buf[len] = '\0';
}

/* Polygraphy's type names in --layer-precisions */
static const char *kiln_precision(const char *t) {
    if (strcmp(t, "float32") == 0 || strcmp(t, "float") == 0)
        return "fp32";
    if (strcmp(t, "float16") == 0 || strcmp(t, "half") == 0)
        return "fp16";
    if (strcmp(t, "bfloat16") == 0)
        return "bf16";
    return t;
}

static char *joined(const char *flag, const char *value) {
    size_t n = strlen(flag) + strlen(value) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s=%s", flag, value);
    return s;
}

char **pg_normalize_args(int argc, char **argv, int *out_argc) {
    char **out = calloc((size_t)argc + 1, sizeof *out);
    if (!out)
        return NULL;
    int n = 0;
    /* Polygraphy flag -> kiln flag, and how many values it takes (1, or
     * -1: all that follow and fit) */
    static const struct {
        const char *pg, *kiln;
        int many;
    } map[] = {
        {"--atol", "--atol", -1},          {"--abs-tol", "--atol", -1},
        {"--rtol", "--rtol", -1},          {"--rel-tol", "--rtol", -1},
        {"--input-shapes", "--shapes", -1}, {"--inputs", "--shapes", -1},
        {"--val-range", "--val-range", -1}, {"--layer-precisions", "--layerPrecisions", -1},
        {"--precision-constraints", "--precisionConstraints", 1},
        {"--pool-limit", "--memPoolSize", -1}, {"--memory-pool-limit", "--memPoolSize", -1},
        {"--check-error-stat", "--check-error-stat", 1},
        {"--error-quantile", "--error-quantile", 1},
        {"--save-results", "--save-results", 1}, {"--save-outputs", "--save-results", 1},
        {"--load-results", "--load-results", -1}, {"--load-outputs", "--load-results", -1},
        {"--save-inputs", "--save-inputs", 1},  {"--save-input-data", "--save-inputs", 1},
        {"--load-inputs", "--load-inputs", -1}, {"--load-input-data", "--load-inputs", -1},
        {"--seed", "--seed", 1},           {"--model", "--model", 1},
        {"--plan", "--plan", 1},           {"--reference", "--reference", 1},
        {"--threads", "--threads", 1},     {"--backend", "--backend", 1},
    };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--trt") == 0 || strcmp(a, "--onnxrt") == 0) {
            /* selectors: kiln is the runner under test, the reference is
             * onnxruntime when it can be imported (--reference chooses) */
            cli_vlog("%s: accepted as in Polygraphy; nothing to select (kiln runs the model, "
                     "--reference picks what it is compared with)", a);
            continue;
        }
        int m = -1;
        for (size_t k = 0; k < sizeof map / sizeof map[0] && m < 0; k++)
            if (strcmp(a, map[k].pg) == 0)
                m = (int)k;
        bool shapes = m >= 0 && strcmp(map[m].kiln, "--shapes") == 0;
        if (m < 0 && strchr(a, '=') && (strncmp(a, "--input-shapes=", 15) == 0 ||
                                         strncmp(a, "--inputs=", 9) == 0)) {
            /* --input-shapes=name:[1,3] */
            char buf[2048] = "";
            const char *v = strchr(a, '=') + 1;
            if (is_shape_entry(v)) {
                append_shape(buf, sizeof buf, v);
                out[n++] = joined("--shapes", buf);
            } else {
                out[n++] = joined("--shapes", v);
            }
            continue;
        }
        if (m < 0 || i + 1 >= argc) {
            out[n++] = strdup(a);
            continue;
        }
        char buf[4096] = "";
        int took = 0;
        while (i + 1 < argc && (map[m].many > 0 ? took < map[m].many : true)) {
            const char *v = argv[i + 1];
            bool fits = strcmp(map[m].kiln, "--atol") == 0 || strcmp(map[m].kiln, "--rtol") == 0
                            ? is_tolerance(v)
                        : shapes ? is_shape_entry(v)
                                 : is_value(v);
            /* after the first value, a multi-valued flag takes only more of
             * its kind: a model path ends --load-results' list */
            if (!fits || (took > 0 && map[m].many < 0 && !shapes &&
                          strcmp(map[m].kiln, "--atol") != 0 &&
                          strcmp(map[m].kiln, "--rtol") != 0 && !strchr(v, ':')))
                break;
            size_t len = strlen(buf);
            if (shapes) {
                append_shape(buf, sizeof buf, v);
            } else if (strcmp(map[m].kiln, "--layerPrecisions") == 0) {
                const char *colon = strrchr(v, ':');
                snprintf(buf + len, sizeof buf - len, "%s%.*s:%s", len ? "," : "",
                         colon ? (int)(colon - v) : (int)strlen(v), v,
                         colon ? kiln_precision(colon + 1) : "");
            } else {
                snprintf(buf + len, sizeof buf - len, "%s%s", len ? "," : "", v);
            }
            i++;
            took++;
        }
        if (!took) {
            out[n++] = strdup(a); /* no value: kiln's own flag parsing says so */
            continue;
        }
        if (strcmp(map[m].kiln, "--load-results") == 0 && strchr(buf, ',')) {
            cli_warn("--load-results: several files given; kiln compares against the first");
            *strchr(buf, ',') = '\0';
        }
        out[n++] = joined(map[m].kiln, buf);
    }
    out[n] = NULL;
    *out_argc = n;
    return out;
}
