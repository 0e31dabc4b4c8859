/* compare.h - what `kiln compare` shares with `kiln debug`: its options,
 * input preparation, running a network through kiln and through a reference
 * (ONNX Runtime, or kiln's reference kernels), and the output comparison
 * with Polygraphy's statistics. */
#ifndef KILN_CLI_COMPARE_H
#define KILN_CLI_COMPARE_H

#include "cli.h"
#include "npy.h"

typedef enum cmp_stat { CMP_ELEMWISE = 0, CMP_MAX, CMP_MEAN, CMP_MEDIAN } cmp_stat;
typedef enum cmp_ref { CMP_REF_AUTO = 0, CMP_REF_ORT, CMP_REF_KILN } cmp_ref;

/* A per-output value ("" name = the default). */
typedef struct cmp_tol {
    char *name;
    double v;
} cmp_tol;

typedef struct cmp_tol_list {
    int n;
    cmp_tol *items;
} cmp_tol_list;

/* A layer precision constraint (--layerPrecisions). */
typedef struct cmp_lprec {
    char *name;
    kiln_dtype dtype;
} cmp_lprec;

typedef struct cmp_opts {
    cli_build_opts b;           /* build flags: --fp16, --shapes, --noFusion, ... */
    const char *model;          /* ONNX model kiln builds (positional) */
    const char *ref_model;      /* --model: the reference's model (default: model) */
    const char *plan;           /* --plan: run this plan instead of building */
    cmp_tol_list atol, rtol;
    cmp_stat stat;
    double quantile;
    uint64_t seed;
    npy_range_list ranges;
    const char *load_inputs;    /* --load-inputs: .npz / .npy / name:file,... */
    const char *save_inputs;
    const char *save_results;   /* reference outputs, .npz */
    const char *load_results;
    bool all_tensors;
    cmp_ref reference;
    int n_lprec;
    cmp_lprec *lprec;
    bool quiet;                 /* only the verdict lines */
} cmp_opts;

void cmp_opts_init(cmp_opts *o);
void cmp_opts_free(cmp_opts *o);
/* Handle one flag of compare (build flags included): 1 handled, 0 not a
 * compare flag, -1 bad value (message printed). */
int cmp_flag(cmp_opts *o, const char *name, const char *value);
/* --layerPrecisions=name:fp32,name2:fp16 (appends; later entries win). */
bool cmp_parse_lprec(const char *spec, cmp_opts *o);
/* The compare flags, for usage texts. */
void cmp_flags_usage(FILE *f);

/* Inputs for every network input: loaded, else seeded random with the
 * --val-range ranges. Shapes from --shapes, the loaded array, or the
 * network (dynamic dims 1). */
bool cmp_prepare_inputs(const cmp_opts *o, const kiln_network *net, npy_list *inputs);

/* Build `net` with o's flags (or, reference = true, every layer on its
 * reference kernel, unfused, FP32), run it on `inputs` and collect every
 * output. */
bool cmp_run_kiln(const cmp_opts *o, const kiln_network *net, bool reference,
                  const npy_list *inputs, npy_list *outputs);
/* Run a plan file on the inputs. */
bool cmp_run_plan(const char *plan, const npy_list *inputs, npy_list *outputs);
/* ONNX Runtime on the model file through scripts/ort_reference.py; `names`
 * (may be NULL) selects the tensors to return. Returns 0 on success, 3 when
 * onnxruntime is not available, 1 on failure (message printed). */
int cmp_run_ort(const char *model, const npy_list *inputs, const char *const *names, int n_names,
                npy_list *outputs);
/* The reference outputs by o->reference (auto: ORT when importable, else
 * kiln's reference) for the model o->ref_model (else o->model); `net` is
 * that model parsed (for kiln's reference). *used names the one used. */
bool cmp_run_reference(const cmp_opts *o, const kiln_network *net, const npy_list *inputs,
                       const char *const *names, int n_names, npy_list *outputs,
                       const char **used);

/* Compare one tensor; prints a report unless quiet. Returns true on pass. */
bool cmp_tensor(const cmp_opts *o, const char *name, const npy_array *got, const npy_array *ref,
                bool quiet);

/* Silence cmp_tensor's verdict lines (debug tools run many comparisons). */
void cmp_set_silent(bool silent);

/* Run a command (argv[0] a path), output to /dev/null when quiet; returns
 * its exit status, or -1 when it could not run. */
int cmp_spawn(char *const argv[], bool quiet);
/* Split a command line into words (single and double quotes, no escapes);
 * free with cmp_words_free. */
char **cmp_split_words(const char *s, int *n);
void cmp_words_free(char **w, int n);
/* Path of this executable (static buffer). */
const char *cmp_self_exe(void);

/* ---- subcommands ---- */
int cli_cmd_compare(int argc, char **argv);
void cli_compare_usage(FILE *f);
int cli_cmd_debug(int argc, char **argv);
void cli_debug_usage(FILE *f);

#endif
