/* cli.h - shared pieces of the kiln command line: flag parsing, shape lists,
 * file reading, output helpers and the subcommand entry points. The tool sees
 * only the public headers (include/kiln/). */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/kiln.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_runtime.h"

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

/* ---- messages: info/warning lines on stdout as "[I] ...", errors on stderr ---- */
extern bool cli_verbose;
void cli_info(const char *fmt, ...) CLI_PRINTF(1, 2);
void cli_warn(const char *fmt, ...) CLI_PRINTF(1, 2);
void cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
void cli_vlog(const char *fmt, ...) CLI_PRINTF(1, 2);
/* Report a failed kiln call: "what: KILN_ERR_X: last error". */
void cli_kiln_error(const char *what, kiln_status st);
/* Route the library's log messages through the tool's printer. */
void cli_install_logger(bool verbose);

/* ---- flags ---- */
/* Split "--name=value" / "--name". Returns false when arg is not a long flag.
 * *name points into a static buffer, *value into arg (NULL when no '='). */
bool cli_split_flag(const char *arg, const char **name, const char **value);
/* Parse helpers: on failure they print "--flag: ..." and return false. */
bool cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
bool cli_parse_double(const char *flag, const char *s, double lo, double hi, double *out);
/* A size with an optional base-2 suffix B/K/M/G; without one the unit is
 * `default_unit` bytes (trtexec's memPoolSize uses MiB). */
bool cli_parse_size(const char *flag, const char *s, uint64_t default_unit, uint64_t *out);
/* The flag needs a value: prints a message and returns false when it has none. */
bool cli_need_value(const char *flag, const char *value);
bool cli_no_value(const char *flag, const char *value);

/* ---- shape lists: "name:1x3x224x224,name2:8x128" ---- */
#define CLI_MAX_VALUES 64
typedef struct cli_shape {
    char *name;
    int rank;                    /* -1 when the entries are not a shape */
    int64_t dims[KILN_MAX_DIMS];
    /* the entries as numbers: the values of a shape tensor, in trtexec's
     * syntax (joined by x: "4x6", "-1", "0.5"); dims_ok when they are also
     * a shape (non-negative integers) */
    bool dims_ok;
    int n_vals;
    double vals[CLI_MAX_VALUES];
    char raw[128];
} cli_shape;

typedef struct cli_shape_list {
    int n;
    cli_shape *items;
} cli_shape_list;

/* Append the entries of `spec` to *list. A later entry for the same name
 * replaces an earlier one. Input names may contain ':' (the last ':' splits
 * name from dims) and may be quoted with single quotes. */
bool cli_parse_shapes(const char *flag, const char *spec, cli_shape_list *list);
const cli_shape *cli_shape_find(const cli_shape_list *list, const char *name);
void cli_shape_list_free(cli_shape_list *list);
/* "1x3x224x224"; dynamic dims print as -1. Writes at most cap bytes. */
void cli_format_dims(char *buf, size_t cap, int rank, const int64_t *dims);

/* Whether `spec`, given for a loaded engine's input that is read on the
 * host (kiln_engine_tensor_is_shape_input) of network shape
 * net_rank/net_dims, holds the input's values rather than its shape: it is
 * not a shape, or not one of the input's rank, or (1-D) not its own length.
 * (Building from ONNX the CLI knows: kiln_builder_input_is_shape_tensor.) */
bool cli_is_value_spec(kiln_dtype dtype, int net_rank, const int64_t *net_dims,
                       const cli_shape *spec);
/* Prints "FLAG: 'input:raw' is not a shape ..." and returns false when spec
 * holds numbers that are no shape (negatives, fractions). */
bool cli_spec_is_shape(const char *flag, const char *input, const cli_shape *s);
/* After a build from ONNX (cli_build_plan): whether input `name` was a shape
 * tensor of the network (its --shapes gave values). */
bool cli_built_shape_tensor(const char *name);
/* Find "name:file" for `name` in a --loadInputs spec (*file malloc'd). */
bool cli_find_input_file(const char *spec, const char *name, char **file, bool *found);

/* A build profile: min/opt/max shape lists. */
typedef struct cli_profile {
    cli_shape_list min, opt, max;
} cli_profile;

/* Everything needed to turn an ONNX file into an engine. */
typedef struct cli_build_opts {
    const char *onnx;
    int n_profiles;
    cli_profile *profiles;
    cli_shape_list shapes;      /* --shapes: run shapes; also the profile when none given */
    uint64_t workspace;         /* bytes, 0 = no limit */
    uint32_t flags;             /* kiln_builder_flag bits */
    int threads;                /* 0 = one per core */
    const char *backend;        /* NULL = default */
    const char *timing_cache;   /* --timingCacheFile, NULL = none */
    int n_layer_prec;           /* --layerPrecisions */
    struct cli_layer_prec {
        char *layer;
        kiln_dtype dtype;
    } *layer_prec;
    bool no_constraints;        /* --precisionConstraints=none */
    int opt_level;              /* --builderOptimizationLevel + 1; 0 = not given */
    int n_io_types[2];          /* --inputIOFormats [0], --outputIOFormats [1] */
    const char *load_inputs;    /* --loadInputs: a shape tensor's values when no spec gives them */
    kiln_dtype *io_types[2];    /* one type per I/O in order, or one for every one */
    const char *calib;          /* --calib: a folder of batches or a cache file */
    const char *calib_cache;    /* --calibCache: where a folder's scales are written */
    int calib_algo;             /* --calibAlgo (kiln_calib_algo) */
    double calib_pct;           /* --calibPercentile, 0 = default */
} cli_build_opts;

/* Handle one of the build flags (--minShapes/--optShapes/--maxShapes/--shapes,
 * --memPoolSize, --threads, --fp16, --bf16, --tf32/--noTF32, --best,
 * --noFusion, --noTiming, --refTactics, --backend, --timingCacheFile,
 * --layerPrecisions, --precisionConstraints, --inputIOFormats,
 * --outputIOFormats). Returns 1 if handled, 0 if the
 * flag is not a build flag, -1 on a bad value (message printed). */
int cli_build_flag(cli_build_opts *o, const char *name, const char *value);
void cli_build_opts_free(cli_build_opts *o);

/* Parse, configure and build: *plan (free with kiln_free) of *size bytes;
 * *build_s is the build time in seconds (parse + build). Prints errors. */
bool cli_build_plan(const cli_build_opts *o, void **plan, size_t *size, double *build_s);

/* ---- files ---- */
/* Read a whole regular file (malloc'd, caller frees; one NUL byte after the
 * data), at most the size it had when opened. A FIFO, device or directory
 * is refused without blocking. Prints an error naming the file. */
bool cli_read_file(const char *path, void **data, size_t *size);
/* The same, refusing (before reading) a file of more than `max` bytes. */
bool cli_read_file_max(const char *path, size_t max, void **data, size_t *size);
/* Read at most `cap` bytes from the start of a file. Returns the count or -1. */
long cli_read_head(const char *path, void *buf, size_t cap);
bool cli_write_file(const char *path, const void *data, size_t size);

/* ---- timing ---- */
double cli_now_s(void);
/* qsort's comparison of two doubles, ascending. */
int cli_cmp_double(const void *a, const void *b);

/* ---- data types ---- */
/* Element value as double (for printing), and a float stored as dtype. */
double cli_elem_get(kiln_dtype dt, const void *p, size_t i);
void cli_elem_set(kiln_dtype dt, void *p, size_t i, double v);
bool cli_dtype_is_float(kiln_dtype dt);
size_t cli_volume(int rank, const int64_t *dims);

/* ---- JSON output ---- */
/* Write s as a JSON string literal (with quotes). */
void cli_json_string(FILE *f, const char *s);
/* Write a number; NaN/inf as NaN, Infinity, -Infinity (as Python's json). */
void cli_json_number(FILE *f, double v, bool integer);

/* ---- subcommands ---- */
int cli_cmd_exec(int argc, char **argv);
int cli_cmd_inspect(int argc, char **argv);
void cli_exec_usage(FILE *f);
void cli_inspect_usage(FILE *f);
/* Sets a short OpenMP spin (GOMP_SPINCOUNT) when the user set no wait policy
 * and executes the program again so that libgomp sees it (tools/omp_wait.c);
 * returns when nothing needs doing or the exec failed. */
void cli_omp_wait_policy(char **argv);

#endif
