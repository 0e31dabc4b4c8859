/* kiln_tools.h - what the accuracy tools (`kiln compare`, `kiln debug`,
 * `kiln exec --loadInputs/--exportOutput`, the Python package's
 * kiln.compare) are made of: named host tensors, NumPy .npy/.npz reading and
 * writing, and the output comparison with its error statistics. The command
 * line and Python are thin shells over these functions.
 *
 * Parsing never trusts a file: every length, offset and size read from it is
 * checked before use, an .npz expands to at most kiln_tensor_input_budget()
 * bytes, and a failure's message (kiln_last_error) names the file, the byte
 * offset and what is wrong (docs/security.md). */
#ifndef KILN_TOOLS_H
#define KILN_TOOLS_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One named tensor on the host, C order, little-endian. Every pointer is
 * malloc'd by kiln and owned by the tensor: free with kiln_host_tensor_free.
 * data is never NULL for a tensor kiln made (at least 1 byte). Added in 0.2. */
typedef struct kiln_host_tensor {
    char *name;       /* for a lone .npy file, the file's stem; may be NULL */
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    void *data;
    size_t bytes;
} kiln_host_tensor;

/* A growable list of named tensors, in insertion (or file) order. Start from
 * a zeroed struct; free with kiln_tensor_list_free. Added in 0.2. */
typedef struct kiln_tensor_list {
    int n, cap;
    kiln_host_tensor *items;
} kiln_tensor_list;

/* Element count of a shape (0 when a dim is 0). KILN_ERR_INVALID_ARGUMENT
 * for a negative dim, a rank outside 0..KILN_MAX_DIMS or an overflow.
 * Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_tensor_volume(int rank, const int64_t *dims, size_t *n);

/* Append a tensor to a list, copying name, dims and `bytes` of data.
 * Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_tensor_list_add(kiln_tensor_list *list, const char *name,
                                                         kiln_dtype dtype, int rank,
                                                         const int64_t *dims, const void *data,
                                                         size_t bytes);
/* The first entry called `name`, or NULL. Borrowed from the list. Added in 0.2. */
KILN_API const kiln_host_tensor *kiln_tensor_list_find(const kiln_tensor_list *list,
                                                       const char *name);
/* Free what a tensor or list owns and zero it. Accept NULL. Added in 0.2. */
KILN_API void kiln_host_tensor_free(kiln_host_tensor *tensor);
KILN_API void kiln_tensor_list_free(kiln_tensor_list *list);

/* Element i of a buffer of dtype as a double (fp16/bf16 widened; NaN for a
 * dtype without a numeric value), and the reverse: store v as dtype (fp16 /
 * bf16 round to nearest even; integers saturate at 64 bits and wrap below,
 * NaN stores 0). Added in 0.2. */
KILN_API double kiln_tensor_get_f64(kiln_dtype dtype, const void *data, size_t i);
KILN_API void kiln_tensor_set_f64(kiln_dtype dtype, void *data, size_t i, double v);

/* ---- .npy / .npz ---- */

/* How many bytes one file's arrays may expand to: the environment variable
 * KILN_MAX_INPUT_BYTES when set (a decimal byte count), else half the
 * machine's memory. Added in 0.2. */
KILN_API size_t kiln_tensor_input_budget(void);

/* Decode one .npy image (format versions 1, 2 and 3; C or Fortran order;
 * little-endian or byte-order-free dtypes) held in memory. `file` names it in messages (may be
 * NULL). bfloat16 is read from descr '<V2', '|V2' and 'bfloat16' and written
 * as '<V2'. *out is set only on success (its name is NULL). KILN_ERR_PARSE
 * for an image kiln cannot decode (malformed, or a dtype it does not read),
 * KILN_ERR_OUT_OF_MEMORY. Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_npy_decode(const void *data, size_t size,
                                                    const char *file, kiln_host_tensor *out);
/* Encode a tensor as a version-1 .npy image (version 2 when the header needs
 * it). *data is the caller's: free with kiln_free. Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_npy_encode(const kiln_host_tensor *tensor, void **data,
                                                    size_t *size);

/* Decode a .npz (zip) image: every member ending in .npy becomes an entry
 * named without that suffix (other members are skipped). Stored and deflated
 * members (deflate needs a build with zlib), zip64 sizes and offsets. Members
 * may not overlap or repeat a name; each expands to at most what its
 * compressed bytes can hold, all together to at most
 * kiln_tensor_input_budget(). *out (zeroed first) is filled only on success.
 * Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_npz_decode(const void *data, size_t size,
                                                    const char *file, kiln_tensor_list *out);
/* Encode a list as an uncompressed .npz image (members "<name>.npy"); names
 * must be unique and non-empty. *data: free with kiln_free. Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_npz_encode(const kiln_tensor_list *list, void **data,
                                                    size_t *size);

/* Read a file: a zip (by its magic) or a path ending in .npz gives every
 * entry; otherwise one .npy entry named by the file's stem. Only a regular
 * file is read (a FIFO or device is refused without blocking), and at most
 * kiln_tensor_input_budget() bytes of it. *out (zeroed first) is filled only
 * on success. KILN_ERR_IO when the file cannot be read, else as the decoders.
 * Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_tensors_load_file(const char *path,
                                                           kiln_tensor_list *out);
/* Write one tensor as .npy, or a list as an uncompressed .npz. KILN_ERR_IO
 * when the file cannot be written. Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_npy_save_file(const char *path,
                                                       const kiln_host_tensor *tensor);
KILN_API KILN_NODISCARD kiln_status kiln_npz_save_file(const char *path,
                                                       const kiln_tensor_list *list);

/* ---- output comparison ---- */

/* How the verdict is taken (Polygraphy's check_error_stat). ELEMWISE: an
 * output fails when any element is over both atol and rtol. MAX / MEAN /
 * MEDIAN: when that statistic of the absolute error is over atol and the same
 * statistic of the relative error is over rtol. Added in 0.2. */
typedef enum kiln_compare_stat {
    KILN_COMPARE_ELEMWISE = 0,
    KILN_COMPARE_MAX = 1,
    KILN_COMPARE_MEAN = 2,
    KILN_COMPARE_MEDIAN = 3
} kiln_compare_stat;

typedef struct kiln_compare_options {
    double atol, rtol;          /* kiln compare's defaults: 1e-5 each */
    kiln_compare_stat stat;
    double quantile;            /* the extra quantile reported, in [0, 1]; 0.99 is usual */
} kiln_compare_options;

/* Error statistics of one output. Errors per element: abs = |got - ref|,
 * rel = abs / |ref| (0 when abs is 0, Inf when ref is 0); the same NaN, or
 * the same-signed Inf, on both sides counts as equal, any other NaN/Inf
 * difference as an infinite error. Added in 0.2. */
typedef struct kiln_compare_result {
    int passed;                 /* 1: within tolerance */
    int same_shape;             /* 0: rank or dims differ (passed 0, statistics 0) */
    size_t count;               /* elements compared */
    size_t mismatches;          /* elements over both atol and rtol */
    size_t worst_index;         /* flat (C order) index of the largest abs error */
    double worst_got, worst_ref;/* the values there (0 when count is 0) */
    double max_abs, mean_abs, median_abs, quantile_abs;
    double max_rel, mean_rel, median_rel, quantile_rel;
    size_t nan_got, nan_ref, inf_got, inf_ref;
    /* value summaries of both sides over their finite values (finite_* of them) */
    size_t finite_got, finite_ref;
    double mean_got, min_got, max_got, mean_ref, min_ref, max_ref;
} kiln_compare_result;

/* Compare `got` with `ref` element by element (both read as doubles, any
 * numeric dtypes) and fill *result. A shape mismatch is a result
 * (same_shape 0, passed 0), not an error. KILN_ERR_INVALID_ARGUMENT for NULL
 * pointers, bad options, a rank out of range or data shorter than the shape;
 * KILN_ERR_UNSUPPORTED for a non-numeric dtype; KILN_ERR_OUT_OF_MEMORY.
 * Added in 0.2. */
KILN_API KILN_NODISCARD kiln_status kiln_compare_tensors(const kiln_host_tensor *got,
                                                         const kiln_host_tensor *ref,
                                                         const kiln_compare_options *options,
                                                         kiln_compare_result *result);

#ifdef __cplusplus
}
#endif
#endif
