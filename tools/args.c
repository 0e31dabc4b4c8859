/* args.c - flag parsing for the kiln command line: "--name=value" splitting,
 * numbers, sizes with suffixes, shape lists and the flags that steer a build. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

#include "cli.h"
#include "npy.h"

bool cli_split_flag(const char *arg, const char **name, const char **value) {
    static char buf[128];
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
        return false;
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    if (n >= sizeof buf)
        n = sizeof buf - 1;
    memcpy(buf, arg, n);
    buf[n] = '\0';
    *name = buf;
    *value = eq ? eq + 1 : NULL;
    return true;
}

bool cli_need_value(const char *flag, const char *value) {
    if (value && *value)
        return true;
    cli_error("%s needs a value (%s=...)", flag, flag);
    return false;
}

bool cli_no_value(const char *flag, const char *value) {
    if (!value)
        return true;
    cli_error("%s takes no value (got '%s')", flag, value);
    return false;
}

bool cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    if (!cli_need_value(flag, s))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0') {
        cli_error("%s: expected an integer, got '%s'", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        cli_error("%s: %lld is out of range [%lld, %lld]", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_double(const char *flag, const char *s, double lo, double hi, double *out) {
    if (!cli_need_value(flag, s))
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v)) {
        cli_error("%s: expected a number, got '%s'", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        cli_error("%s: %g is out of range [%g, %g]", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_size(const char *flag, const char *s, uint64_t default_unit, uint64_t *out) {
    if (!cli_need_value(flag, s))
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    uint64_t unit = default_unit;
    if (errno || end == s || !isfinite(v) || v < 0) {
        cli_error("%s: expected a size such as 512, 64M or 2G, got '%s'", flag, s);
        return false;
    }
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'B': unit = 1; break;
        case 'K': unit = 1ull << 10; break;
        case 'M': unit = 1ull << 20; break;
        case 'G': unit = 1ull << 30; break;
        default:
            cli_error("%s: unknown size suffix in '%s' (use B, K, M or G)", flag, s);
            return false;
        }
        if (end[1] != '\0') {
            cli_error("%s: unexpected text after the size in '%s'", flag, s);
            return false;
        }
    }
    double bytes = v * (double)unit;
    if (bytes > 9.0e18) {
        cli_error("%s: size '%s' is too large", flag, s);
        return false;
    }
    *out = (uint64_t)bytes;
    return true;
}

/* ---- shape lists ---- */

/* "1x3x224x224", "" or "scalar" (0-D); also the values of a shape tensor in
 * trtexec's syntax, numbers joined by 'x' ("4x6", "-1", "0.5", "1x1x2.5x2.5"):
 * every entry is kept as a number, and as a dimension when all are
 * non-negative integers (dims_ok). */
static bool parse_dims(const char *flag, const char *name, const char *s, cli_shape *sh) {
    sh->rank = 0;
    sh->n_vals = 0;
    sh->dims_ok = true;
    snprintf(sh->raw, sizeof sh->raw, "%.120s", s);
    if (*s == '\0' || strcmp(s, "scalar") == 0) /* a scalar: "name:" or "name:scalar" */
        return true;
    const char *p = s;
    for (;;) {
        if (sh->n_vals == CLI_MAX_VALUES) {
            cli_error("%s: '%s' has more than %d entries", flag, name, CLI_MAX_VALUES);
            return false;
        }
        /* an entry runs to the next 'x' (so "0x10" is 0 and 10, never hexadecimal) */
        const char *e = p;
        while (*e && *e != 'x' && *e != 'X')
            e++;
        char tmp[64], *end = NULL;
        double v = 0;
        bool ok = e > p && (size_t)(e - p) < sizeof tmp;
        if (ok) {
            memcpy(tmp, p, (size_t)(e - p));
            tmp[e - p] = '\0';
            errno = 0;
            v = strtod(tmp, &end);
            ok = end != tmp && *end == '\0' && !errno && isfinite(v) &&
                 !strpbrk(tmp, "xXpP"); /* decimal only */
        }
        if (!ok) {
            cli_error("%s: bad dimension list '%s' for '%s' (expected e.g. 1x3x224x224; the "
                      "values of a shape tensor are numbers joined by x, e.g. 4x6 or -1 or 0.5)",
                      flag, s, name);
            return false;
        }
        end = (char *)e;
        sh->vals[sh->n_vals++] = v;
        bool dim = v >= 0 && v == (double)(long long)v && v < 9.0e18;
        if (!dim || sh->rank == KILN_MAX_DIMS)
            sh->dims_ok = false;
        else
            sh->dims[sh->rank++] = (int64_t)v;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    if (!sh->dims_ok)
        sh->rank = -1;
    return true;
}

bool cli_spec_is_shape(const char *flag, const char *input, const cli_shape *s) {
    if (!s || s->dims_ok)
        return true;
    cli_error("%s: '%s:%s' is not a shape (numbers such as -1 or 0.5 are the values of a shape "
              "tensor, and '%s' is not one: its values decide no tensor's shape; give its data "
              "with --loadInputs=%s:FILE)",
              flag, input, s->raw, input, input);
    return false;
}

static bool shape_list_put(cli_shape_list *list, const char *name, size_t name_len,
                           const cli_shape *sh) {
    for (int i = 0; i < list->n; i++) {
        if (strlen(list->items[i].name) == name_len &&
            memcmp(list->items[i].name, name, name_len) == 0) {
            char *keep = list->items[i].name;
            list->items[i] = *sh;
            list->items[i].name = keep;
            return true;
        }
    }
    cli_shape *items = realloc(list->items, (size_t)(list->n + 1) * sizeof *items);
    char *copy = malloc(name_len + 1);
    if (!items || !copy) {
        free(copy);
        if (items)
            list->items = items;
        cli_error("out of memory");
        return false;
    }
    memcpy(copy, name, name_len);
    copy[name_len] = '\0';
    list->items = items;
    list->items[list->n] = *sh;
    list->items[list->n].name = copy;
    list->n++;
    return true;
}

bool cli_parse_shapes(const char *flag, const char *spec, cli_shape_list *list) {
    if (!cli_need_value(flag, spec))
        return false;
    const char *p = spec;
    while (*p) {
        const char *name = p, *name_end, *dims;
        if (*p == '\'') { /* quoted name: 'a:b,c':1x2 */
            name = p + 1;
            name_end = strchr(name, '\'');
            if (!name_end || name_end[1] != ':') {
                cli_error("%s: unterminated quoted name in '%s'", flag, spec);
                return false;
            }
            dims = name_end + 2;
        } else {
            /* the entry runs to the next ',', and its last ':' ends the name */
            const char *comma = strchr(p, ',');
            const char *end = comma ? comma : p + strlen(p);
            const char *colon = NULL;
            for (const char *q = p; q < end; q++)
                if (*q == ':')
                    colon = q;
            if (!colon || colon == p) {
                cli_error("%s: expected name:dims in '%.*s'", flag, (int)(end - p), p);
                return false;
            }
            name_end = colon;
            dims = colon + 1;
        }
        const char *comma = strchr(dims, ',');
        size_t dlen = comma ? (size_t)(comma - dims) : strlen(dims);
        char dbuf[256];
        if (dlen >= sizeof dbuf) {
            cli_error("%s: dimension list too long in '%s'", flag, spec);
            return false;
        }
        memcpy(dbuf, dims, dlen);
        dbuf[dlen] = '\0';
        char nbuf[256];
        size_t nlen = (size_t)(name_end - name);
        snprintf(nbuf, sizeof nbuf, "%.*s", (int)nlen, name);
        cli_shape sh = {0};
        if (!parse_dims(flag, nbuf, dbuf, &sh))
            return false;
        if (!shape_list_put(list, name, nlen, &sh))
            return false;
        p = comma ? comma + 1 : dims + dlen;
    }
    return true;
}

const cli_shape *cli_shape_find(const cli_shape_list *list, const char *name) {
    for (int i = 0; i < list->n; i++)
        if (strcmp(list->items[i].name, name) == 0)
            return &list->items[i];
    return NULL;
}

void cli_shape_list_free(cli_shape_list *list) {
    for (int i = 0; i < list->n; i++)
        free(list->items[i].name);
    free(list->items);
    list->items = NULL;
    list->n = 0;
}

void cli_format_dims(char *buf, size_t cap, int rank, const int64_t *dims) {
    size_t used = 0;
    if (cap == 0)
        return;
    buf[0] = '\0';
    if (rank == 0) {
        snprintf(buf, cap, "scalar");
        return;
    }
    for (int i = 0; i < rank && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%lld", i ? "x" : "", (long long)dims[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* ---- build flags ---- */

/* The type a trtexec type name (len characters at s) stands for, or UNDEFINED. */
static kiln_dtype type_named(const char *s, size_t len) {
    static const struct {
        const char *name;
        kiln_dtype dtype;
    } types[] = {{"fp32", KILN_DTYPE_FLOAT},  {"fp16", KILN_DTYPE_FLOAT16},
                 {"bf16", KILN_DTYPE_BFLOAT16}, {"int64", KILN_DTYPE_INT64},
                 {"int32", KILN_DTYPE_INT32}, {"int8", KILN_DTYPE_INT8},
                 {"uint8", KILN_DTYPE_UINT8}, {"bool", KILN_DTYPE_BOOL}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strlen(types[i].name) == len && strncmp(s, types[i].name, len) == 0)
            return types[i].dtype;
    return KILN_DTYPE_UNDEFINED;
}

/* --inputIOFormats / --outputIOFormats=type:fmt[,type:fmt...] as trtexec:
 * one entry per network input (output) in order, or one for every one.
 * Types fp32, fp16, bf16, int64, int32, int8, uint8, bool; the format must be
 * the linear one (chw), which may be left out. */
static bool parse_io_formats(cli_build_opts *o, const char *flag, const char *spec, int side) {
    if (!cli_need_value(flag, spec))
        return false;
    free(o->io_types[side]);
    o->io_types[side] = NULL;
    o->n_io_types[side] = 0;
    for (const char *p = spec; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        size_t tlen = colon ? (size_t)(colon - p) : len;
        kiln_dtype dt = type_named(p, tlen);
        if (dt == KILN_DTYPE_UNDEFINED) {
            cli_error("%s: unknown type '%.*s' (use fp32, fp16, bf16, int64, int32, int8, uint8 "
                      "or bool)", flag, (int)tlen, p);
            return false;
        }
        if (colon) {
            size_t flen = len - tlen - 1;
            if (flen != 3 || strncmp(colon + 1, "chw", 3) != 0) {
                cli_error("%s: format '%.*s' is not supported: kiln binds linear tensors only "
                          "(chw)", flag, (int)flen, colon + 1);
                return false;
            }
        }
        kiln_dtype *t = realloc(o->io_types[side], (size_t)(o->n_io_types[side] + 1) * sizeof *t);
        if (!t) {
            cli_error("%s: out of memory", flag);
            return false;
        }
        o->io_types[side] = t;
        t[o->n_io_types[side]++] = dt;
        p += len;
        if (*p == ',' && *++p == '\0') {
            cli_error("%s: empty entry at the end of '%s'", flag, spec);
            return false;
        }
    }
    if (o->n_io_types[side] == 0) {
        cli_error("%s: no type given", flag);
        return false;
    }
    return true;
}

/* --layerPrecisions=name:fp32,name2:fp16 (the last ':' of an entry ends the
 * name; a name may be quoted with single quotes). A later entry for the same
 * layer replaces an earlier one. */
static bool parse_layer_precisions(cli_build_opts *o, const char *flag, const char *spec) {
    if (!cli_need_value(flag, spec))
        return false;
    const char *p = spec;
    while (*p) {
        const char *name = p, *name_end, *val;
        if (*p == '\'') {
            name = p + 1;
            name_end = strchr(name, '\'');
            if (!name_end || name_end[1] != ':') {
                cli_error("%s: unterminated quoted name in '%s'", flag, spec);
                return false;
            }
            val = name_end + 2;
        } else {
            const char *comma = strchr(p, ',');
            const char *end = comma ? comma : p + strlen(p);
            name_end = NULL;
            for (const char *q = p; q < end; q++)
                if (*q == ':')
                    name_end = q;
            if (!name_end || name_end == p) {
                cli_error("%s: expected layer:precision in '%.*s'", flag, (int)(end - p), p);
                return false;
            }
            val = name_end + 1;
        }
        const char *comma = strchr(val, ',');
        size_t vlen = comma ? (size_t)(comma - val) : strlen(val);
        kiln_dtype dt = type_named(val, vlen);
        if (dt != KILN_DTYPE_FLOAT && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16)
            dt = KILN_DTYPE_UNDEFINED; /* a precision is one of the float types */
        if (dt == KILN_DTYPE_UNDEFINED) {
            cli_error("%s: unknown precision '%.*s' (use fp32, fp16 or bf16)", flag, (int)vlen,
                      val);
            return false;
        }
        size_t nlen = (size_t)(name_end - name);
        struct cli_layer_prec *lp =
            realloc(o->layer_prec, (size_t)(o->n_layer_prec + 1) * sizeof *lp);
        char *copy = malloc(nlen + 1);
        if (lp)
            o->layer_prec = lp;
        if (!lp || !copy) {
            free(copy);
            cli_error("out of memory");
            return false;
        }
        memcpy(copy, name, nlen);
        copy[nlen] = '\0';
        o->layer_prec[o->n_layer_prec].layer = copy;
        o->layer_prec[o->n_layer_prec].dtype = dt;
        o->n_layer_prec++;
        p = comma ? comma + 1 : val + vlen;
    }
    return true;
}

/* The k-th occurrence of --minShapes (or opt/max) fills profile k. */
static cli_shape_list *profile_slot(cli_build_opts *o, int which) {
    for (int k = 0; k < o->n_profiles; k++) {
        cli_profile *p = &o->profiles[k];
        cli_shape_list *l = which == 0 ? &p->min : which == 1 ? &p->opt : &p->max;
        if (l->n == 0)
            return l;
    }
    cli_profile *ps = realloc(o->profiles, (size_t)(o->n_profiles + 1) * sizeof *ps);
    if (!ps) {
        cli_error("out of memory");
        return NULL;
    }
    o->profiles = ps;
    memset(&ps[o->n_profiles], 0, sizeof *ps);
    cli_profile *p = &ps[o->n_profiles++];
    return which == 0 ? &p->min : which == 1 ? &p->opt : &p->max;
}

int cli_build_flag(cli_build_opts *o, const char *name, const char *value) {
    static const char *const prof_flags[] = {"--minShapes", "--optShapes", "--maxShapes"};
    for (int w = 0; w < 3; w++) {
        if (strcmp(name, prof_flags[w]) == 0) {
            if (!cli_need_value(name, value))
                return -1;
            cli_shape_list *l = profile_slot(o, w);
            return l && cli_parse_shapes(name, value, l) ? 1 : -1;
        }
    }
    if (strcmp(name, "--shapes") == 0)
        return cli_parse_shapes(name, value, &o->shapes) ? 1 : -1;
    if (strcmp(name, "--memPoolSize") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        /* pool:size[,pool:size...] */
        const char *p = value;
        while (*p) {
            const char *colon = strchr(p, ':');
            const char *comma = strchr(p, ',');
            if (!colon || (comma && comma < colon)) {
                cli_error("%s: expected pool:size (e.g. workspace:1024), got '%s'", name, value);
                return -1;
            }
            size_t plen = (size_t)(colon - p);
            char size_buf[64];
            size_t slen = comma ? (size_t)(comma - colon - 1) : strlen(colon + 1);
            if (slen >= sizeof size_buf) {
                cli_error("%s: size too long in '%s'", name, value);
                return -1;
            }
            memcpy(size_buf, colon + 1, slen);
            size_buf[slen] = '\0';
            uint64_t bytes;
            if (!cli_parse_size(name, size_buf, 1ull << 20, &bytes))
                return -1;
            if (plen == 9 && strncmp(p, "workspace", 9) == 0) {
                o->workspace = bytes;
            } else if ((plen == 7 && strncmp(p, "dlaSRAM", 7) == 0) ||
                       (plen == 12 && strncmp(p, "dlaLocalDRAM", 12) == 0) ||
                       (plen == 13 && strncmp(p, "dlaGlobalDRAM", 13) == 0) ||
                       (plen == 15 && strncmp(p, "tacticSharedMem", 15) == 0)) {
                cli_warn("%s: pool '%.*s' does not exist on kiln; ignored", name, (int)plen, p);
            } else {
                cli_error("%s: unknown memory pool '%.*s' (kiln has: workspace)", name,
                          (int)plen, p);
                return -1;
            }
            p = comma ? comma + 1 : colon + 1 + slen;
        }
        return 1;
    }
    if (strcmp(name, "--timingCacheFile") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        o->timing_cache = value;
        return 1;
    }
    if (strcmp(name, "--layerPrecisions") == 0)
        return parse_layer_precisions(o, name, value) ? 1 : -1;
    if (strcmp(name, "--inputIOFormats") == 0 || strcmp(name, "--outputIOFormats") == 0)
        return parse_io_formats(o, name, value, name[2] == 'o') ? 1 : -1;
    if (strcmp(name, "--precisionConstraints") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        if (strcmp(value, "none") != 0 && strcmp(value, "prefer") != 0 &&
            strcmp(value, "obey") != 0) {
            cli_error("%s: expected none, prefer or obey, got '%s'", name, value);
            return -1;
        }
        o->no_constraints = strcmp(value, "none") == 0;
        return 1;
    }
    if (strcmp(name, "--builderOptimizationLevel") == 0) {
        long long t;
        if (!cli_parse_int(name, value, 0, 5, &t))
            return -1;
        o->opt_level = (int)t + 1; /* 0 means "not given" in a zeroed struct */
        return 1;
    }
    if (strcmp(name, "--threads") == 0) {
        long long t;
        if (!cli_parse_int(name, value, 0, 4096, &t))
            return -1;
        o->threads = (int)t;
        return 1;
    }
    if (strcmp(name, "--backend") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        if (strcmp(value, "cpu") != 0 && strcmp(value, "cuda") != 0) {
            cli_error("%s: unknown backend '%s' (use cpu or cuda)", name, value);
            return -1;
        }
        o->backend = value;
        return 1;
    }
    if (strcmp(name, "--profilingVerbosity") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        if (strcmp(value, "layer_names_only") && strcmp(value, "detailed") && strcmp(value, "none")) {
            cli_error("%s: unknown level '%s' (use layer_names_only, detailed or none)", name, value);
            return -1;
        }
        if (strcmp(value, "none") == 0)
            cli_warn("%s=none: kiln plans always carry their layers' names, ops and tactics", name);
        return 1;
    }
    if (strcmp(name, "--sparsity") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        if (strcmp(value, "disable") == 0)
            return 1;
        cli_error("%s=%s: structured-sparsity tactics are not supported (use disable)", name,
                  value);
        return -1;
    }
    if (strcmp(name, "--int8") == 0) { /* explicit quantization: the Q/DQ in the model */
        if (!cli_no_value(name, value))
            return -1;
        o->flags |= KILN_BUILDER_FLAG_INT8;
        return 1;
    }
    if (strcmp(name, "--fp8") == 0) { /* FP8 E4M3: Q/DQ in the model, or --calib */
        if (!cli_no_value(name, value))
            return -1;
        o->flags |= KILN_BUILDER_FLAG_FP8;
        return 1;
    }
    if (strcmp(name, "--calib") == 0 || strcmp(name, "--calibCache") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        if (name[7])
            o->calib_cache = value;
        else
            o->calib = value;
        return 1;
    }
    if (strcmp(name, "--calibAlgo") == 0) {
        if (!cli_need_value(name, value))
            return -1;
        if (strcmp(value, "entropy") == 0)
            o->calib_algo = KILN_CALIB_ENTROPY;
        else if (strcmp(value, "minmax") == 0)
            o->calib_algo = KILN_CALIB_MINMAX;
        else if (strcmp(value, "percentile") == 0)
            o->calib_algo = KILN_CALIB_PERCENTILE;
        else {
            cli_error("%s: unknown calibrator '%s' (use entropy, minmax or percentile)", name, value);
            return -1;
        }
        return 1;
    }
    if (strcmp(name, "--calibPercentile") == 0) {
        char *end = NULL;
        double v = value ? strtod(value, &end) : 0;
        if (!value || end == value || *end || !(v > 0 && v <= 100)) {
            cli_error("%s: expected a percentile in (0, 100], e.g. 99.99", name);
            return -1;
        }
        o->calib_pct = v;
        return 1;
    }
    static const char *const lowp[] = {"--int4"};
    for (size_t i = 0; i < sizeof lowp / sizeof lowp[0]; i++)
        if (strcmp(name, lowp[i]) == 0) {
            cli_error("%s: quantized precisions are not supported yet; kiln builds FP32, TF32, FP16 "
                      "and BF16 (--fp16, --bf16, --tf32, --best)",
                      name);
            return -1;
        }
    static const struct {
        const char *flag;
        uint32_t set, clear;
    } bools[] = {
        {"--fp16", KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_TIMED_PRECISION, 0},
        {"--bf16", KILN_BUILDER_FLAG_BF16 | KILN_BUILDER_FLAG_TIMED_PRECISION, 0},
        {"--tf32", KILN_BUILDER_FLAG_TF32 | KILN_BUILDER_FLAG_TIMED_PRECISION, 0},
        {"--noTF32", 0, KILN_BUILDER_FLAG_TF32},
        {"--best", KILN_BUILDER_FLAG_FP16 | KILN_BUILDER_FLAG_BF16 | KILN_BUILDER_FLAG_TF32 |
                       KILN_BUILDER_FLAG_TIMED_PRECISION, 0},
        {"--noFusion", KILN_BUILDER_FLAG_NO_FUSION, 0},
        {"--channelsLast", KILN_BUILDER_FLAG_CHANNELS_LAST, 0},
        {"--stronglyTyped", KILN_BUILDER_FLAG_STRONGLY_TYPED, 0},
        {"--fp16Accumulation", KILN_BUILDER_FLAG_FP16_ACCUMULATION, 0},
        {"--noTiming", KILN_BUILDER_FLAG_NO_TIMING, 0},
        {"--refTactics", KILN_BUILDER_FLAG_REF_TACTICS, 0},
    };
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        if (strcmp(name, bools[i].flag) == 0) {
            if (!cli_no_value(name, value))
                return -1;
            o->flags = (o->flags | bools[i].set) & ~bools[i].clear;
            return 1;
        }
    }
    return 0;
}

void cli_build_opts_free(cli_build_opts *o) {
    for (int k = 0; k < o->n_profiles; k++) {
        cli_shape_list_free(&o->profiles[k].min);
        cli_shape_list_free(&o->profiles[k].opt);
        cli_shape_list_free(&o->profiles[k].max);
    }
    free(o->profiles);
    o->profiles = NULL;
    o->n_profiles = 0;
    for (int i = 0; i < o->n_layer_prec; i++)
        free(o->layer_prec[i].layer);
    free(o->layer_prec);
    o->layer_prec = NULL;
    o->n_layer_prec = 0;
    for (int side = 0; side < 2; side++) {
        free(o->io_types[side]);
        o->io_types[side] = NULL;
        o->n_io_types[side] = 0;
    }
    cli_shape_list_free(&o->shapes);
}

/* ---- building ---- */

/* Shapes of one network input within one profile: the given ones, completed
 * the way trtexec does (a missing opt takes max, else min; missing min and
 * max take opt), or, with none given, --shapes, or the network's shape with
 * dynamic dims set to 1. */
static bool input_profile_shape(const cli_build_opts *o, int k, const char *name, int net_rank,
                                const int64_t *net_dims, int *rank, int64_t *mn, int64_t *op,
                                int64_t *mx) {
    const cli_shape *smin = NULL, *sopt = NULL, *smax = NULL;
    const char *fl = "--minShapes/--optShapes/--maxShapes"; /* the flags that gave them */
    if (k < o->n_profiles) {
        smin = cli_shape_find(&o->profiles[k].min, name);
        sopt = cli_shape_find(&o->profiles[k].opt, name);
        smax = cli_shape_find(&o->profiles[k].max, name);
    }
    if (!smin && !sopt && !smax) {
        const cli_shape *s = cli_shape_find(&o->shapes, name);
        if (s && !cli_spec_is_shape("--shapes", name, s))
            return false;
        if (s) {
            fl = "--shapes";
            smin = sopt = smax = s;
        } else {
            bool dynamic = false;
            for (int d = 0; d < net_rank; d++)
                dynamic |= net_dims[d] < 0;
            *rank = net_rank;
            for (int d = 0; d < net_rank; d++)
                mn[d] = op[d] = mx[d] = net_dims[d] < 0 ? 1 : net_dims[d];
            if (dynamic)
                cli_warn("dynamic input '%s' has no shape given (--minShapes/--optShapes/"
                         "--maxShapes or --shapes); using 1 for its dynamic dimensions",
                         name);
            return true;
        }
    }
    if (!cli_spec_is_shape("--minShapes", name, smin) ||
        !cli_spec_is_shape("--optShapes", name, sopt) ||
        !cli_spec_is_shape("--maxShapes", name, smax))
        return false;
    if (!sopt)
        sopt = smax ? smax : smin;
    if (!smin)
        smin = sopt;
    if (!smax)
        smax = sopt;
    if (smin->rank != sopt->rank || smax->rank != sopt->rank) {
        cli_error("%s: profile %d: the min/opt/max shapes of '%s' have different ranks", fl, k,
                  name);
        return false;
    }
    if (net_rank >= 0 && sopt->rank != net_rank) {
        cli_error("%s: profile %d: the shape of '%s' has rank %d, the model's input has rank %d",
                  fl, k, name, sopt->rank, net_rank);
        return false;
    }
    *rank = sopt->rank;
    for (int d = 0; d < sopt->rank; d++) {
        mn[d] = smin->dims[d];
        op[d] = sopt->dims[d];
        mx[d] = smax->dims[d];
        if (mn[d] > op[d] || op[d] > mx[d]) {
            cli_error("%s: profile %d: input '%s' dimension %d needs min <= opt <= max "
                      "(got %lld, %lld, %lld)",
                      fl, k, name, d, (long long)mn[d], (long long)op[d], (long long)mx[d]);
            return false;
        }
    }
    return true;
}

bool cli_is_value_spec(kiln_dtype dtype, int net_rank, const int64_t *net_dims,
                       const cli_shape *spec) {
    (void)dtype;
    if (!spec || net_rank < 0 || net_rank > 1)
        return false;
    if (!spec->dims_ok || spec->rank != net_rank)
        return true; /* not a shape of this input: its values */
    if (net_rank == 1 && net_dims[0] >= 0)
        return spec->dims[0] != net_dims[0]; /* its own length is its shape */
    return false;
}

/* The inputs of the last network configured that are shape tensors. */
static char **g_shape_inputs;
static int g_n_shape_inputs;

bool cli_built_shape_tensor(const char *name) {
    for (int i = 0; i < g_n_shape_inputs; i++)
        if (strcmp(g_shape_inputs[i], name) == 0)
            return true;
    return false;
}

static void note_shape_input(const char *name) {
    char **grown = realloc(g_shape_inputs, (size_t)(g_n_shape_inputs + 1) * sizeof *grown);
    if (!grown)
        return;
    g_shape_inputs = grown;
    if ((g_shape_inputs[g_n_shape_inputs] = strdup(name)) != NULL)
        g_n_shape_inputs++;
}

/* The values of shape tensor `name` from its --loadInputs file (a .npy, a
 * .npz's array of that name or its only one, or raw bytes of the input's
 * type); *found false when the spec names no file for it. `count` is the
 * input's element count, or -1 when its length is dynamic. */
static bool values_from_file(const char *spec, const char *name, kiln_dtype dt, int64_t count,
                             cli_shape *out, bool *found) {
    char *file = NULL;
    *found = false;
    if (!spec || !cli_find_input_file(spec, name, &file, found))
        return !spec;
    if (!*found)
        return true;
    memset(out, 0, sizeof *out);
    snprintf(out->raw, sizeof out->raw, "(from %.100s)", file);
    bool ok = false;
    size_t len = strlen(file);
    if (len > 4 && (strcmp(file + len - 4, ".npy") == 0 || strcmp(file + len - 4, ".npz") == 0)) {
        npy_list l;
        char err[NPY_ERR_CAP];
        if (!npy_load_file(file, &l, err)) {
            cli_error("--loadInputs: %s", err);
            free(file);
            return false;
        }
        const npy_array *a = npy_list_find(&l, name);
        if (!a && l.n == 1)
            a = &l.items[0];
        size_t n = 0;
        if (!a)
            cli_error("--loadInputs: '%s' has no array named '%s'", file, name);
        else if (a->dtype != dt)
            cli_error("--loadInputs: '%s' holds %s; shape tensor '%s' is %s (write the file "
                      "with that type, e.g. numpy's astype)", file, kiln_dtype_name(a->dtype),
                      name, kiln_dtype_name(dt));
        else if (!npy_volume(a->rank, a->dims, &n) || n > CLI_MAX_VALUES ||
                 (count >= 0 && (int64_t)n != count))
            cli_error("--loadInputs: '%s' holds %zu values; shape tensor '%s' holds %lld", file,
                      n, name, (long long)count);
        else {
            for (size_t k = 0; k < n; k++)
                out->vals[k] = npy_get(dt, a->data, k);
            out->n_vals = (int)n;
            ok = true;
        }
        npy_list_free(&l);
    } else {
        void *data = NULL;
        size_t size = 0, es = kiln_dtype_size(dt);
        if (cli_read_file_max(file, (size_t)CLI_MAX_VALUES * (es ? es : 1), &data, &size)) {
            if (!es || size % es || (count >= 0 && size != (size_t)count * es))
                cli_error("--loadInputs: '%s' has %zu bytes; shape tensor '%s' holds %lld "
                          "values of %s", file, size, name, (long long)count,
                          kiln_dtype_name(dt));
            else {
                for (size_t k = 0; k < size / es; k++)
                    out->vals[k] = npy_get(dt, data, k);
                out->n_vals = (int)(size / es);
                ok = true;
            }
            free(data);
        }
    }
    if (ok)
        cli_info("shape tensor '%s': values from %s", name, file);
    free(file);
    return ok;
}

/* Store v->vals as n elements of dt in buf. */
static bool pack_values(const cli_shape *v, kiln_dtype dt, size_t n, void *buf) {
    if (dt != KILN_DTYPE_INT64 && dt != KILN_DTYPE_INT32 && dt != KILN_DTYPE_FLOAT &&
        dt != KILN_DTYPE_DOUBLE && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16 &&
        dt != KILN_DTYPE_INT8 && dt != KILN_DTYPE_UINT8 && dt != KILN_DTYPE_BOOL)
        return false;
    for (size_t i = 0; i < n; i++)
        cli_elem_set(dt, buf, i, v->vals[i]);
    return true;
}

/* A shape-tensor input (kiln_builder_input_is_shape_tensor; as in trtexec,
 * the shapes given for it are its values): its values at min/opt/max from
 * --minShapes/--optShapes/--maxShapes, else --shapes, else --loadInputs. */
static bool shape_tensor_profile(const cli_build_opts *o, kiln_builder_config *cfg, int index,
                                 int k, const char *name, kiln_dtype dt, int net_rank,
                                 const int64_t *nd) {
    const cli_shape *smin = NULL, *sopt = NULL, *smax = NULL;
    const char *fl[3] = {"--minShapes", "--optShapes", "--maxShapes"};
    if (k < o->n_profiles) {
        smin = cli_shape_find(&o->profiles[k].min, name);
        sopt = cli_shape_find(&o->profiles[k].opt, name);
        smax = cli_shape_find(&o->profiles[k].max, name);
    }
    if (!smin && !sopt && !smax) {
        smin = sopt = smax = cli_shape_find(&o->shapes, name);
        fl[0] = fl[1] = fl[2] = "--shapes";
    }
    int64_t count = net_rank == 0 ? 1 : (net_rank == 1 && nd[0] >= 0) ? nd[0] : -1;
    cli_shape file;
    if (!smin && !sopt && !smax) {
        bool found = false;
        if (!values_from_file(o->load_inputs, name, dt, count, &file, &found))
            return false;
        if (!found) {
            char eg[64];
            snprintf(eg, sizeof eg, "%s", dt == KILN_DTYPE_FLOAT || dt == KILN_DTYPE_DOUBLE
                                               ? "1x1x2x2" : "4x6");
            cli_error("input '%s' is a shape tensor (its values decide other tensors' shapes): "
                      "give its values with --shapes=%s:%s (numbers joined by x; a scalar is "
                      "one number), a range with --minShapes/--optShapes/--maxShapes, or a file "
                      "with --loadInputs=%s:FILE", name, name, eg, name);
            return false;
        }
        smin = sopt = smax = &file;
        fl[0] = fl[1] = fl[2] = "--loadInputs";
    }
    if (!sopt)
        sopt = smax ? smax : smin;
    if (!smin)
        smin = sopt;
    if (!smax)
        smax = sopt;
    const cli_shape *v[3] = {smin, sopt, smax};
    if (count < 0)
        count = sopt->n_vals;
    if (net_rank > 1 || count > CLI_MAX_VALUES) {
        cli_error("input '%s' is a shape tensor of rank %d (%lld values): give its values with "
                  "--loadInputs=%s:FILE", name, net_rank, (long long)count, name);
        return false;
    }
    unsigned char buf[3][CLI_MAX_VALUES * 8];
    size_t n = (size_t)count;
    for (int w = 0; w < 3; w++) {
        if (v[w]->n_vals != (int)n) {
            cli_error("%s: shape tensor '%s' holds %zu value%s; '%s' gives %d (values joined by "
                      "x, e.g. %s:4x6; a scalar is one number)", fl[w], name, n,
                      n == 1 ? "" : "s", v[w]->raw, v[w]->n_vals, name);
            return false;
        }
        if (!pack_values(v[w], dt, n, buf[w])) {
            cli_error("%s: shape tensor '%s' has type %s, whose values the command line cannot "
                      "give (use --loadInputs)", fl[w], name, kiln_dtype_name(dt));
            return false;
        }
    }
    int64_t shp[1] = {(int64_t)n};
    kiln_status st = kiln_builder_config_set_shape(cfg, index, name, net_rank, shp, shp, shp);
    if (st == KILN_OK)
        st = kiln_builder_config_set_input_values(cfg, index, name, dt, n, buf[0], buf[1],
                                                  buf[2]);
    if (st != KILN_OK) {
        char what[300];
        snprintf(what, sizeof what, "%s: profile %d, shape tensor '%s'", fl[1], k, name);
        cli_kiln_error(what, st);
        return false;
    }
    if (cli_verbose)
        cli_vlog("profile %d: shape tensor %s values min %s opt %s max %s", k, name, smin->raw,
                 sopt->raw, smax->raw);
    return true;
}

static bool names_exist(const kiln_network *net, const cli_shape_list *l, const char *flag) {
    for (int i = 0; i < l->n; i++) {
        bool found = false;
        for (int j = 0; j < kiln_network_num_inputs(net) && !found; j++)
            found = strcmp(kiln_network_input_name(net, j), l->items[i].name) == 0;
        if (!found) {
            cli_error("%s: the model has no input named '%s'", flag, l->items[i].name);
            return false;
        }
    }
    return true;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* --calib: a folder is calibration data (each .npz one batch, its arrays
 * named by input; each .npy one batch of a one-input network), in file-name
 * order, and its scales go to --calibCache or DIR/calibration.cache; a file
 * is a calibration cache to reuse. */
static bool configure_calib(const cli_build_opts *o, const kiln_network *net,
                            kiln_builder_config *cfg) {
    if (!o->calib) {
        if (o->flags & KILN_BUILDER_FLAG_INT8)
            cli_warn("--int8 without --calib: INT8 layers come from the model's own Q/DQ only "
                     "(--calib=DIR|FILE quantizes a float model)");
        return true;
    }
    if (!(o->flags & (KILN_BUILDER_FLAG_INT8 | KILN_BUILDER_FLAG_FP8))) {
        cli_error("--calib needs --int8 or --fp8");
        return false;
    }
    struct stat sb;
    if (stat(o->calib, &sb) != 0) {
        cli_error("--calib=%s: %s", o->calib, strerror(errno));
        return false;
    }
    double pct = o->calib_pct > 0 ? o->calib_pct : 99.99;
    kiln_status st;
    if (!S_ISDIR(sb.st_mode)) {
        if ((st = kiln_builder_config_set_calibration(cfg, (kiln_calib_algo)o->calib_algo, pct,
                                                      o->calib)) != KILN_OK) {
            cli_kiln_error("--calib", st);
            return false;
        }
        cli_info("Calibration: scales from the cache %s", o->calib);
        return true;
    }
    char cache[4096];
    if (o->calib_cache)
        snprintf(cache, sizeof cache, "%s", o->calib_cache);
    else
        snprintf(cache, sizeof cache, "%s/calibration.cache", o->calib);
    if ((st = kiln_builder_config_set_calibration(cfg, (kiln_calib_algo)o->calib_algo, pct,
                                                  cache)) != KILN_OK) {
        cli_kiln_error("--calib", st);
        return false;
    }
    DIR *d = opendir(o->calib);
    if (!d) {
        cli_error("--calib=%s: %s", o->calib, strerror(errno));
        return false;
    }
    int n = 0, cap = 0;
    char **names = NULL;
    bool ok = true;
    for (struct dirent *e; (e = readdir(d)) != NULL && ok;) {
        if (!ends_with(e->d_name, ".npz") && !ends_with(e->d_name, ".npy"))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(names, sizeof *names * (size_t)cap);
            ok = nn != NULL;
            if (ok)
                names = nn;
        }
        if (ok && !(names[n] = strdup(e->d_name)))
            ok = false;
        if (ok)
            n++;
    }
    closedir(d);
    if (ok && n == 0) {
        cli_error("--calib=%s: the folder has no .npy or .npz files", o->calib);
        ok = false;
    }
    if (ok)
        qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int i = 0; i < n && ok; i++) {
        char path[4096], err[NPY_ERR_CAP];
        snprintf(path, sizeof path, "%s/%s", o->calib, names[i]);
        npy_list l = {0};
        if (!npy_load_file(path, &l, err)) {
            cli_error("--calib: %s", err);
            ok = false;
            break;
        }
        bool single = ends_with(names[i], ".npy");
        if (single && kiln_network_num_inputs(net) != 1) {
            cli_error("--calib: %s: a .npy batch needs a one-input network (use .npz files with "
                      "arrays named by input)", path);
            ok = false;
        }
        for (int k = 0; k < l.n && ok; k++) {
            const npy_array *a = &l.items[k];
            const char *in = single ? kiln_network_input_name(net, 0) : a->name;
            st = kiln_builder_config_add_calibration_batch(cfg, i, in, a->dtype, a->rank, a->dims,
                                                           a->data);
            if (st != KILN_OK) {
                cli_kiln_error(path, st);
                ok = false;
            }
        }
        npy_list_free(&l);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (ok)
        cli_info("Calibration: %d batches from %s; cache %s", n, o->calib, cache);
    return ok;
}

static bool configure(const cli_build_opts *o, const kiln_network *net, kiln_builder_config *cfg) {
    kiln_status st;
    if (!configure_calib(o, net, cfg))
        return false;
    kiln_builder_config_set_flags(cfg, o->flags);
    kiln_builder_config_set_workspace_limit(cfg, o->workspace);
    kiln_builder_config_set_threads(cfg, o->threads);
    if (o->opt_level > 0 &&
        (st = kiln_builder_config_set_optimization_level(cfg, o->opt_level - 1)) != KILN_OK) {
        cli_kiln_error("--builderOptimizationLevel", st);
        return false;
    }
    if (o->backend && (st = kiln_builder_config_set_backend(cfg, o->backend)) != KILN_OK) {
        cli_kiln_error("--backend", st);
        return false;
    }
    if (o->timing_cache && (st = kiln_builder_config_set_timing_cache(cfg, o->timing_cache)) !=
                               KILN_OK) {
        cli_kiln_error("--timingCacheFile", st);
        return false;
    }
    if (o->n_layer_prec && o->no_constraints)
        cli_warn("--layerPrecisions is ignored with --precisionConstraints=none");
    for (int i = 0; i < o->n_layer_prec && !o->no_constraints; i++) {
        st = kiln_builder_config_set_layer_precision(cfg, o->layer_prec[i].layer,
                                                     o->layer_prec[i].dtype);
        if (st != KILN_OK) {
            cli_kiln_error("--layerPrecisions", st);
            return false;
        }
    }
    for (int side = 0; side < 2; side++) {
        const char *flag = side ? "--outputIOFormats" : "--inputIOFormats";
        int n = o->n_io_types[side], have = side ? kiln_network_num_outputs(net)
                                                 : kiln_network_num_inputs(net);
        if (n > 1 && n != have) {
            cli_error("%s gives %d types; the network has %d %s%s (give one for each, in order, "
                      "or one for all)", flag, n, have, side ? "output" : "input",
                      have == 1 ? "" : "s");
            return false;
        }
        for (int k = 0; k < n; k++)
            /* one entry for several tensors applies to each of its kind */
            if ((st = kiln_builder_config_set_io_type(cfg, side, n == 1 && have > 1 ? -1 : k,
                                                      o->io_types[side][k])) != KILN_OK) {
                cli_kiln_error(flag, st);
                return false;
            }
    }
    if (!names_exist(net, &o->shapes, "--shapes"))
        return false;
    for (int i = 0; i < g_n_shape_inputs; i++)
        free(g_shape_inputs[i]);
    g_n_shape_inputs = 0;
    for (int k = 0; k < o->n_profiles; k++)
        if (!names_exist(net, &o->profiles[k].min, "--minShapes") ||
            !names_exist(net, &o->profiles[k].opt, "--optShapes") ||
            !names_exist(net, &o->profiles[k].max, "--maxShapes"))
            return false;
    int n_profiles = o->n_profiles > 0 ? o->n_profiles : 1;
    for (int k = 0; k < n_profiles; k++) {
        int index;
        if ((st = kiln_builder_config_add_profile(cfg, &index)) != KILN_OK) {
            cli_kiln_error("adding an optimization profile", st);
            return false;
        }
        for (int i = 0; i < kiln_network_num_inputs(net); i++) {
            const char *name = kiln_network_input_name(net, i);
            kiln_dtype dt;
            int net_rank = -1, rank;
            int64_t nd[KILN_MAX_DIMS], mn[KILN_MAX_DIMS], op[KILN_MAX_DIMS], mx[KILN_MAX_DIMS];
            if ((st = kiln_network_tensor_info(net, name, &dt, &net_rank, nd)) != KILN_OK) {
                cli_kiln_error(name, st);
                return false;
            }
            if (k == 0 && kiln_builder_input_is_shape_tensor(net, name) == 1)
                note_shape_input(name);
            if (cli_built_shape_tensor(name)) {
                if (!shape_tensor_profile(o, cfg, index, k, name, dt, net_rank, nd))
                    return false;
                continue;
            }
            if (!input_profile_shape(o, k, name, net_rank, nd, &rank, mn, op, mx))
                return false;
            if ((st = kiln_builder_config_set_shape(cfg, index, name, rank, mn, op, mx)) !=
                KILN_OK) {
                char what[300];
                snprintf(what, sizeof what, "profile %d, input '%s'", k, name);
                cli_kiln_error(what, st);
                return false;
            }
            if (cli_verbose) {
                char a[128], b[128], c[128];
                cli_format_dims(a, sizeof a, rank, mn);
                cli_format_dims(b, sizeof b, rank, op);
                cli_format_dims(c, sizeof c, rank, mx);
                cli_vlog("profile %d: %s min %s opt %s max %s", k, name, a, b, c);
            }
        }
    }
    return true;
}

bool cli_build_plan(const cli_build_opts *o, void **plan, size_t *size, double *build_s) {
    kiln_network *net = NULL;
    kiln_builder_config *cfg = NULL;
    bool ok = false;
    double t0 = cli_now_s();
    kiln_status st = kiln_onnx_parse_file(o->onnx, &net);
    if (st != KILN_OK) {
        cli_kiln_error(o->onnx, st);
        return false;
    }
    cli_info("Parsed %s: %d inputs, %d outputs, %d nodes", o->onnx,
             kiln_network_num_inputs(net), kiln_network_num_outputs(net),
             kiln_network_num_nodes(net));
    if ((st = kiln_builder_config_create(&cfg)) != KILN_OK) {
        cli_kiln_error("creating the builder config", st);
        goto done;
    }
    if (!configure(o, net, cfg))
        goto done;
    if ((st = kiln_build_serialized(net, cfg, plan, size)) != KILN_OK) {
        cli_kiln_error("building the engine", st);
        if (st == KILN_ERR_SHAPE)
            cli_error("(the shapes of a build come from --shapes, or --minShapes/--optShapes/"
                      "--maxShapes for a range; a shape tensor's values too)");
        goto done;
    }
    *build_s = cli_now_s() - t0;
    ok = true;
done:
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return ok;
}
