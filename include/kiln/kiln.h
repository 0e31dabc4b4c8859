/* kiln.h - the base of kiln's public C API: status codes and messages, the
 * logger, data types and version. Every other public header includes this. */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#define KILN_NODISCARD __attribute__((warn_unused_result))
#else
#define KILN_API
#define KILN_NODISCARD
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
/* major*10000 + minor*100 + patch */
#define KILN_VERSION_NUMBER (KILN_VERSION_MAJOR * 10000 + KILN_VERSION_MINOR * 100 + KILN_VERSION_PATCH)

/* The most dimensions a tensor may have. */
#define KILN_MAX_DIMS 8

/* Result of every call that can fail. KILN_OK is 0. On failure the thread's
 * last-error message (kiln_last_error) says what failed and on what.
 * Added in 0.1. */
typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARGUMENT = 1, /* a NULL, out-of-range or malformed argument */
    KILN_ERR_PARSE = 2,            /* an ONNX file or other input could not be decoded */
    KILN_ERR_UNSUPPORTED = 3,      /* an op, data type or attribute kiln does not support */
    KILN_ERR_SHAPE = 4,            /* shapes do not fit: wrong input shape, out of profile */
    KILN_ERR_OUT_OF_MEMORY = 5,
    KILN_ERR_IO = 6,               /* a file could not be opened, read or written */
    KILN_ERR_PLAN = 7,             /* a plan is damaged, truncated or foreign */
    KILN_ERR_VERSION = 8,          /* built by another kiln version or for another target */
    KILN_ERR_DEVICE = 9,           /* a device is missing or failed */
    KILN_ERR_PLUGIN = 10,          /* a plugin is missing or failed */
    KILN_ERR_NOT_FOUND = 11,       /* a named tensor, input or object does not exist */
    KILN_ERR_RUNTIME = 12,         /* execution failed */
    KILN_ERR_INTERNAL = 13         /* a bug in kiln */
} kiln_status;

/* Short constant name of a status ("KILN_ERR_PARSE"). Never NULL. Added in 0.1. */
KILN_API const char *kiln_status_name(kiln_status status);

/* The message of the last failure on the calling thread, or "" if none.
 * Borrowed: valid until the next kiln call on this thread. Added in 0.1. */
KILN_API const char *kiln_last_error(void);

/* Tensor element types. Numbering follows ONNX TensorProto.DataType so that
 * values read from a model map one to one. Added in 0.1. */
typedef enum kiln_dtype {
    KILN_DTYPE_UNDEFINED = 0,
    KILN_DTYPE_FLOAT = 1,
    KILN_DTYPE_UINT8 = 2,
    KILN_DTYPE_INT8 = 3,
    KILN_DTYPE_UINT16 = 4,
    KILN_DTYPE_INT16 = 5,
    KILN_DTYPE_INT32 = 6,
    KILN_DTYPE_INT64 = 7,
    KILN_DTYPE_STRING = 8, /* CPU only: a buffer of `const char *`, one NUL-terminated UTF-8
                              string per element; an output's strings stay valid until the
                              context runs again or is destroyed. Added in 0.2. */
    KILN_DTYPE_BOOL = 9,
    KILN_DTYPE_FLOAT16 = 10,
    KILN_DTYPE_DOUBLE = 11,
    KILN_DTYPE_UINT32 = 12,
    KILN_DTYPE_UINT64 = 13,
    KILN_DTYPE_COMPLEX64 = 14,
    KILN_DTYPE_COMPLEX128 = 15,
    KILN_DTYPE_BFLOAT16 = 16,
    KILN_DTYPE_FLOAT8E4M3FN = 17,
    KILN_DTYPE_FLOAT8E4M3FNUZ = 18,
    KILN_DTYPE_FLOAT8E5M2 = 19,
    KILN_DTYPE_FLOAT8E5M2FNUZ = 20
} kiln_dtype;

/* Bytes per element; 0 for UNDEFINED, STRING and unknown values. Added in 0.1. */
KILN_API size_t kiln_dtype_size(kiln_dtype dtype);
/* Lower-case name ("float", "float16", "int64"); "?" for unknown values. Added in 0.1. */
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);

/* Conversions between float and the 16-bit float formats (IEEE half and
 * bfloat16, as raw bits), rounding to nearest even. Added in 0.1. */
KILN_API float kiln_half_to_float(uint16_t bits);
KILN_API uint16_t kiln_float_to_half(float value);
KILN_API float kiln_bfloat16_to_float(uint16_t bits);
KILN_API uint16_t kiln_float_to_bfloat16(float value);

/* Log severities; a logger receives messages up to its chosen severity. */
typedef enum kiln_severity {
    KILN_LOG_ERROR = 0,
    KILN_LOG_WARNING = 1,
    KILN_LOG_INFO = 2,
    KILN_LOG_VERBOSE = 3
} kiln_severity;

/* A log sink. `message` is borrowed for the call; one line, no trailing newline.
 * May be called from any thread; kiln serialises calls to it. */
typedef void (*kiln_log_fn)(void *user, kiln_severity severity, const char *message);

/* Replace the process-wide logger. fn NULL restores the default (stderr).
 * Messages above max_severity are dropped before formatting. Added in 0.1. */
KILN_API void kiln_set_logger(kiln_log_fn fn, void *user, kiln_severity max_severity);

/* Library version as "0.1.0". Never NULL. Added in 0.1. */
KILN_API const char *kiln_version_string(void);

/* Free memory that a kiln call handed to the caller (a serialized plan, for
 * example). Accepts NULL. Added in 0.1. */
KILN_API void kiln_free(void *ptr);

#ifdef __cplusplus
}
#endif
#endif
