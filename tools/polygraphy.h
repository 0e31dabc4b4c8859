/* polygraphy.h - Polygraphy's command-line spellings and JSON files in
 * `kiln compare` (tools/polygraphy.c). */
#ifndef KILN_CLI_POLYGRAPHY_H
#define KILN_CLI_POLYGRAPHY_H

#include <stdbool.h>
#include <stddef.h>

#include "npy.h"

/* argv with Polygraphy's spellings turned into kiln's: "--atol 1e-2 o:1e-3"
 * -> "--atol=1e-2,o:1e-3", "--input-shapes x:[1,3,224,224]" ->
 * "--shapes=x:1x3x224x224", "--layer-precisions l:float16" ->
 * "--layerPrecisions=l:fp16", "--save-results F" -> "--save-results=F", ...;
 * --trt and --onnxrt are dropped (kiln is the runner, --reference picks the
 * reference). A new NULL-terminated array of *out_argc strings. */
char **pg_normalize_args(int argc, char **argv, int *out_argc);

/* Whether a results or inputs path is Polygraphy JSON (ends in .json). */
bool pg_is_json(const char *path);

/* Polygraphy RunResults JSON (polygraphy run --save-results): the outputs
 * of the first iteration of the first runner that is not kiln's own (else
 * the first runner); *runner gets its name. */
bool pg_load_results(const char *path, npy_list *out, char *runner, size_t runner_cap,
                     char *err, size_t cap);
/* Polygraphy's input JSON (--save-inputs): the first feed of the list. */
bool pg_load_inputs(const char *path, npy_list *out, char *err, size_t cap);

typedef struct pg_runner {
    const char *name;          /* e.g. "onnxrt-runner", "kiln-runner" */
    const npy_list *outputs;
} pg_runner;
/* Write RunResults JSON that `polygraphy run --load-results` reads: one
 * iteration per runner, arrays as base64 .npy images. */
bool pg_save_results(const char *path, const pg_runner *runners, int n, char *err, size_t cap);
bool pg_save_inputs(const char *path, const npy_list *inputs, char *err, size_t cap);

#endif
