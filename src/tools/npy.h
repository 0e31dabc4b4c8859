/* npy.h - the library's .npy/.npz code (src/tools/npy.c) under its internal
 * names: bool results and a caller's message buffer of NPY_ERR_CAP bytes.
 * The public form is include/kiln/kiln_tools.h (src/tools/tools_api.c wraps
 * these and moves the message to kiln_last_error). Every failure fills `err`
 * with the file name, the byte offset and what is wrong. */
#ifndef KILN_TOOLS_NPY_H
#define KILN_TOOLS_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln_tools.h"

typedef kiln_host_tensor npy_array;
typedef kiln_tensor_list npy_list;

#define NPY_ERR_CAP 512

/* Kinds of failure, for the public status (npy_last_kind after a false). */
typedef enum npy_fail_kind { NPY_FAIL_PARSE = 0, NPY_FAIL_IO, NPY_FAIL_MEMORY } npy_fail_kind;
npy_fail_kind npy_last_kind(void);

bool npy_decode(const void *buf, size_t size, const char *file, npy_array *out, char *err);
bool npy_encode(const npy_array *a, void **buf, size_t *size, char *err);
bool npz_decode(const void *buf, size_t size, const char *file, npy_list *out, char *err);
bool npz_encode(const npy_list *l, void **buf, size_t *size, char *err);
size_t npy_input_budget(void);
bool npy_load_file(const char *path, npy_list *out, char *err);
bool npy_save_file(const char *path, const npy_array *a, char *err);
bool npz_save_file(const char *path, const npy_list *l, char *err);
bool npy_list_add(npy_list *l, const char *name, kiln_dtype dtype, int rank, const int64_t *dims,
                  const void *data, size_t bytes);
const npy_array *npy_list_find(const npy_list *l, const char *name);
void npy_array_free(npy_array *a);
void npy_list_free(npy_list *l);
bool npy_volume(int rank, const int64_t *dims, size_t *n);
double npy_get(kiln_dtype dt, const void *p, size_t i);
void npy_set(kiln_dtype dt, void *p, size_t i, double v);

#endif
