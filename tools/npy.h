/* npy.h - tensors in and out of files for the kiln command line: NumPy .npy
 * (format versions 1, 2 and 3), .npz archives (zip, stored or deflated) and
 * raw binary; plus seeded random inputs with per-input value ranges.
 * Parsing never trusts the file: every failure fills `err` with the file
 * name, the byte offset and what is wrong. */
#ifndef KILN_CLI_NPY_H
#define KILN_CLI_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

/* One named tensor, C order, little-endian. */
typedef struct npy_array {
    char *name;       /* malloc'd; for a lone .npy, the file's stem */
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    void *data;       /* malloc'd, never NULL (at least 1 byte) */
    size_t bytes;
} npy_array;

typedef struct npy_list {
    int n, cap;
    npy_array *items;
} npy_list;

#define NPY_ERR_CAP 512

/* Decode one .npy image held in memory. `file` names it in messages.
 * bfloat16: kiln writes descr '<V2' and reads '<V2', '|V2' and 'bfloat16'
 * as bfloat16 (NumPy has no bfloat16; ml_dtypes' arrays save as '<V2'). */
bool npy_decode(const void *buf, size_t size, const char *file, npy_array *out, char *err);
/* Encode a tensor as a version-1 .npy image (version 2 when the header
 * needs it). *buf is malloc'd. */
bool npy_encode(const npy_array *a, void **buf, size_t *size, char *err);

/* Decode a .npz (zip) image: every member ending in .npy becomes an entry
 * named without that suffix. Stored and deflated members (deflate needs a
 * build with zlib), zip64 sizes and offsets. Members may not overlap or
 * repeat a name, each expands to at most what its compressed bytes can
 * hold, and all together to at most npy_input_budget(). */
bool npz_decode(const void *buf, size_t size, const char *file, npy_list *out, char *err);
/* Encode entries as an uncompressed .npz image (members "<name>.npy"). */
bool npz_encode(const npy_list *l, void **buf, size_t *size, char *err);

/* How many bytes the arrays of one .npz may expand to: KILN_MAX_INPUT_BYTES
 * when set (a decimal byte count), else half the machine's memory. */
size_t npy_input_budget(void);

/* Files: .npz -> every entry; .npy -> one entry named by the stem. Only
 * regular files are read (a FIFO or device is refused without blocking). */
bool npy_load_file(const char *path, npy_list *out, char *err);
bool npy_save_file(const char *path, const npy_array *a, char *err);
bool npz_save_file(const char *path, const npy_list *l, char *err);

/* Entries. npy_list_add copies name and data. */
bool npy_list_add(npy_list *l, const char *name, kiln_dtype dtype, int rank, const int64_t *dims,
                  const void *data, size_t bytes);
const npy_array *npy_list_find(const npy_list *l, const char *name);
void npy_array_free(npy_array *a);
void npy_list_free(npy_list *l);

/* Element count of a shape (0 when a dim is 0); false on overflow. */
bool npy_volume(int rank, const int64_t *dims, size_t *n);

/* ---- random inputs ---- */
/* A value range for one input ("" name = every input): --val-range. */
typedef struct npy_range {
    char *name;
    double lo, hi;
} npy_range;

typedef struct npy_range_list {
    int n;
    npy_range *items;
} npy_range_list;

/* Parse "name:[lo,hi],name2:[lo,hi]" or "[lo,hi]" (all inputs); appends. */
bool npy_parse_ranges(const char *spec, npy_range_list *l, char *err);
void npy_range_list_free(npy_range_list *l);

/* Fill `data` (n elements of dtype) with seeded uniform values. Floats go in
 * [lo, hi) (default [-1, 1)); integers in [lo, hi] (default [0, 1], so that
 * index-like, mask and flag inputs stay valid); bool 0/1. `state` advances. */
void npy_fill_random(kiln_dtype dtype, void *data, size_t n, const npy_range_list *ranges,
                     const char *name, uint64_t *state);

/* Element access as double, and store a double as dtype (fp16/bf16 round
 * to nearest even). */
double npy_get(kiln_dtype dt, const void *p, size_t i);
void npy_set(kiln_dtype dt, void *p, size_t i, double v);

#endif
