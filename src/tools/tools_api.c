/* tools_api.c - the public form of the tensor-file code (kiln_tools.h): each
 * call runs the internal function (npy.c) and moves its message into the
 * thread's last error with a status for the kind of failure. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tools/npy.h"

static kiln_status status_of(bool reading) {
    switch (npy_last_kind()) {
    case NPY_FAIL_MEMORY: return KILN_ERR_OUT_OF_MEMORY;
    case NPY_FAIL_IO: return KILN_ERR_IO;
    default: return reading ? KILN_ERR_PARSE : KILN_ERR_INVALID_ARGUMENT;
    }
}

static kiln_status done(bool ok, bool reading, const char *err) {
    if (ok) {
        kn_error_clear();
        return KILN_OK;
    }
    return kn_error(status_of(reading), "%s", err[0] ? err : "failed");
}

/* A tensor whose data covers exactly its shape. */
static kiln_status check_tensor(const kiln_host_tensor *t, const char *what) {
    const char *nm = t->name ? t->name : "";
    size_t n;
    if (t->rank < 0 || t->rank > KILN_MAX_DIMS || !npy_volume(t->rank, t->dims, &n))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: tensor '%s': bad rank %d or shape", what,
                        nm, t->rank);
    size_t es = kiln_dtype_size(t->dtype);
    if (es == 0 || t->dtype == KILN_DTYPE_STRING) /* a string tensor holds pointers */
        return kn_error(KILN_ERR_UNSUPPORTED, "%s: tensor '%s': data type %s has no .npy form",
                        what, nm, kiln_dtype_name(t->dtype));
    if (n > SIZE_MAX / es || n * es != t->bytes || (!t->data && t->bytes))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: tensor '%s': %zu bytes of data for a shape of %zu elements of %s",
                        what, nm, t->bytes, n, kiln_dtype_name(t->dtype));
    return KILN_OK;
}

KILN_API kiln_status kiln_tensor_volume(int rank, const int64_t *dims, size_t *n) {
    if (!n || rank < 0 || rank > KILN_MAX_DIMS || (rank && !dims))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_volume: bad rank %d or NULL", rank);
    if (!npy_volume(rank, dims, n))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_tensor_volume: a negative dim or an element count over SIZE_MAX");
    return KILN_OK;
}

KILN_API kiln_status kiln_tensor_list_add(kiln_tensor_list *list, const char *name,
                                          kiln_dtype dtype, int rank, const int64_t *dims,
                                          const void *data, size_t bytes) {
    if (!list || !name || rank < 0 || rank > KILN_MAX_DIMS || (rank && !dims) ||
        (bytes && !data))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_list_add: NULL or bad rank %d",
                        rank);
    if (!npy_list_add(list, name, dtype, rank, dims, data, bytes))
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "tensor '%s': out of memory (%zu bytes)", name,
                        bytes);
    return KILN_OK;
}

KILN_API const kiln_host_tensor *kiln_tensor_list_find(const kiln_tensor_list *list,
                                                       const char *name) {
    if (!list || !name)
        return NULL;
    for (int i = 0; i < list->n; i++)
        if (list->items[i].name && strcmp(list->items[i].name, name) == 0)
            return &list->items[i];
    return NULL;
}

KILN_API void kiln_host_tensor_free(kiln_host_tensor *tensor) { npy_array_free(tensor); }
KILN_API void kiln_tensor_list_free(kiln_tensor_list *list) { npy_list_free(list); }

KILN_API double kiln_tensor_get_f64(kiln_dtype dtype, const void *data, size_t i) {
    return data ? npy_get(dtype, data, i) : 0;
}

KILN_API void kiln_tensor_set_f64(kiln_dtype dtype, void *data, size_t i, double v) {
    if (data)
        npy_set(dtype, data, i, v);
}

KILN_API size_t kiln_tensor_input_budget(void) { return npy_input_budget(); }

KILN_API kiln_status kiln_npy_decode(const void *data, size_t size, const char *file,
                                     kiln_host_tensor *out) {
    if ((!data && size) || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_npy_decode: NULL argument");
    char err[NPY_ERR_CAP] = "";
    static const uint8_t empty[1];
    npy_array a;
    bool ok = npy_decode(data ? data : empty, size, file ? file : "<npy>", &a, err);
    if (ok)
        *out = a;
    return done(ok, true, err);
}

KILN_API kiln_status kiln_npy_encode(const kiln_host_tensor *tensor, void **data, size_t *size) {
    if (!tensor || !data || !size)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_npy_encode: NULL argument");
    KN_TRY(check_tensor(tensor, "kiln_npy_encode"));
    char err[NPY_ERR_CAP] = "";
    return done(npy_encode(tensor, data, size, err), false, err);
}

KILN_API kiln_status kiln_npz_decode(const void *data, size_t size, const char *file,
                                     kiln_tensor_list *out) {
    if ((!data && size) || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_npz_decode: NULL argument");
    char err[NPY_ERR_CAP] = "";
    static const uint8_t empty[1];
    return done(npz_decode(data ? data : empty, size, file ? file : "<npz>", out, err), true, err);
}

/* Names an .npz can hold: present, unique, non-empty. */
static kiln_status check_list(const kiln_tensor_list *l, const char *what) {
    if (!l || l->n < 0 || (l->n && !l->items))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL list", what);
    for (int i = 0; i < l->n; i++) {
        const kiln_host_tensor *t = &l->items[i];
        if (!t->name || !t->name[0])
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: entry %d has no name", what, i);
        KN_TRY(check_tensor(t, what));
        for (int j = 0; j < i; j++)
            if (strcmp(l->items[j].name, t->name) == 0)
                return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: tensor '%s' appears twice", what,
                                t->name);
    }
    return KILN_OK;
}

KILN_API kiln_status kiln_npz_encode(const kiln_tensor_list *list, void **data, size_t *size) {
    KN_TRY(check_list(list, "kiln_npz_encode"));
    if (!data || !size)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_npz_encode: NULL argument");
    char err[NPY_ERR_CAP] = "";
    return done(npz_encode(list, data, size, err), false, err);
}

KILN_API kiln_status kiln_tensors_load_file(const char *path, kiln_tensor_list *out) {
    if (!path || !out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensors_load_file: NULL argument");
    char err[NPY_ERR_CAP] = "";
    return done(npy_load_file(path, out, err), true, err);
}

KILN_API kiln_status kiln_npy_save_file(const char *path, const kiln_host_tensor *tensor) {
    if (!path || !tensor)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_npy_save_file: NULL argument");
    KN_TRY(check_tensor(tensor, "kiln_npy_save_file"));
    char err[NPY_ERR_CAP] = "";
    return done(npy_save_file(path, tensor, err), false, err);
}

KILN_API kiln_status kiln_npz_save_file(const char *path, const kiln_tensor_list *list) {
    KN_TRY(check_list(list, "kiln_npz_save_file"));
    if (!path)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_npz_save_file: NULL path");
    char err[NPY_ERR_CAP] = "";
    return done(npz_save_file(path, list, err), false, err);
}
