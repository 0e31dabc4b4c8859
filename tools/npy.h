/* npy.h - tensors in and out of files for the kiln command line. The
 * .npy/.npz code is the library's (include/kiln/kiln_tools.h); these are
 * the command line's names for it, with its conventions (bool results, a
 * message buffer `err` that gets kiln's message: the file name, the byte
 * offset and what is wrong). The seeded random inputs with per-input value
 * ranges (--val-range) are the command line's own (npy.c). */
#ifndef KILN_CLI_NPY_H
#define KILN_CLI_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/kiln.h"
#include "kiln/kiln_tools.h"

/* One named tensor, C order, little-endian (name and data malloc'd). */
typedef kiln_host_tensor npy_array;
typedef kiln_tensor_list npy_list;

#define NPY_ERR_CAP 512

static inline bool npy_ok_(kiln_status st, char *err) {
    if (st != KILN_OK && err)
        snprintf(err, NPY_ERR_CAP, "%s", kiln_last_error());
    return st == KILN_OK;
}

static inline bool npy_decode(const void *buf, size_t size, const char *file, npy_array *out,
                              char *err) {
    return npy_ok_(kiln_npy_decode(buf, size, file, out), err);
}
static inline bool npy_encode(const npy_array *a, void **buf, size_t *size, char *err) {
    return npy_ok_(kiln_npy_encode(a, buf, size), err);
}
static inline bool npz_decode(const void *buf, size_t size, const char *file, npy_list *out,
                              char *err) {
    return npy_ok_(kiln_npz_decode(buf, size, file, out), err);
}
static inline bool npz_encode(const npy_list *l, void **buf, size_t *size, char *err) {
    return npy_ok_(kiln_npz_encode(l, buf, size), err);
}
static inline size_t npy_input_budget(void) { return kiln_tensor_input_budget(); }
/* .npz -> every entry; .npy -> one entry named by the stem. */
static inline bool npy_load_file(const char *path, npy_list *out, char *err) {
    return npy_ok_(kiln_tensors_load_file(path, out), err);
}
static inline bool npy_save_file(const char *path, const npy_array *a, char *err) {
    return npy_ok_(kiln_npy_save_file(path, a), err);
}
static inline bool npz_save_file(const char *path, const npy_list *l, char *err) {
    return npy_ok_(kiln_npz_save_file(path, l), err);
}
/* Copies name and data. */
static inline bool npy_list_add(npy_list *l, const char *name, kiln_dtype dtype, int rank,
                                const int64_t *dims, const void *data, size_t bytes) {
    return kiln_tensor_list_add(l, name, dtype, rank, dims, data, bytes) == KILN_OK;
}
static inline const npy_array *npy_list_find(const npy_list *l, const char *name) {
    return kiln_tensor_list_find(l, name);
}
static inline void npy_array_free(npy_array *a) { kiln_host_tensor_free(a); }
static inline void npy_list_free(npy_list *l) { kiln_tensor_list_free(l); }
/* Element count of a shape (0 when a dim is 0); false on overflow. */
static inline bool npy_volume(int rank, const int64_t *dims, size_t *n) {
    return kiln_tensor_volume(rank, dims, n) == KILN_OK;
}
/* Element access as double, and store a double as dtype. */
static inline double npy_get(kiln_dtype dt, const void *p, size_t i) {
    return kiln_tensor_get_f64(dt, p, i);
}
static inline void npy_set(kiln_dtype dt, void *p, size_t i, double v) {
    kiln_tensor_set_f64(dt, p, i, v);
}

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

#endif
