/* core.h - kiln's private foundation: errors, logging, allocation (with a
 * fault-injection hook), half-precision conversions, files, hashing and a
 * growable byte buffer. Depends on libc only. */
#ifndef KILN_CORE_H
#define KILN_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln.h"

#define KN_HIDDEN __attribute__((visibility("hidden")))

/* Internal dtypes beyond the public enum (src/graph/seq.h): a sequence or
 * optional value is an 8-byte handle tensor. The code carries the element
 * type: KN_DTYPE_SEQUENCE | elem, KN_DTYPE_OPTIONAL | elem, and
 * KN_DTYPE_OPTIONAL | KN_DTYPE_SEQUENCE | elem for an optional sequence. */
#define KN_DTYPE_SEQUENCE 0x100
#define KN_DTYPE_OPTIONAL 0x200
static inline bool kn_dtype_is_handle(int t) { return t > 0x100 && t < 0x400 && (t & 0xff) != 0; }
#define KN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define KN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors: set the thread's last-error message and return the status ---- */
KN_HIDDEN kiln_status kn_error(kiln_status status, const char *fmt, ...) KN_PRINTF(2, 3);
KN_HIDDEN kiln_status kn_verror(kiln_status status, const char *fmt, va_list ap);
/* Prefix the current message with "context: " (keeps status). */
KN_HIDDEN kiln_status kn_error_wrap(kiln_status status, const char *fmt, ...) KN_PRINTF(2, 3);
KN_HIDDEN void kn_error_clear(void);

/* Propagate a failure: `KN_TRY(f(x));` returns f's status when it is not OK. */
#define KN_TRY(expr)                         \
    do {                                     \
        kiln_status kn_try_st_ = (expr);     \
        if (kn_try_st_ != KILN_OK)           \
            return kn_try_st_;               \
    } while (0)

/* ---- logging ---- */
KN_HIDDEN void kn_log(kiln_severity sev, const char *fmt, ...) KN_PRINTF(2, 3);
KN_HIDDEN bool kn_log_enabled(kiln_severity sev);

/* ---- allocation: every allocation in the library goes through these so a
 * test can make the N-th one fail (KILN_FAIL_ALLOC_AT, see mem.c). They set
 * the last-error message on failure. ---- */
KN_HIDDEN void *kn_malloc(size_t size);
KN_HIDDEN void *kn_calloc(size_t n, size_t size);
KN_HIDDEN void *kn_realloc(void *p, size_t size);
/* 64-byte aligned; free with kn_aligned_free. */
KN_HIDDEN void *kn_aligned_alloc(size_t size);
KN_HIDDEN void kn_aligned_free(void *p);
KN_HIDDEN void kn_free(void *p);
KN_HIDDEN char *kn_strdup(const char *s);
KN_HIDDEN char *kn_strndup(const char *s, size_t n);
/* Grow *arr (elements of elem_size) so it holds at least need elements. */
KN_HIDDEN kiln_status kn_grow(void **arr, int *cap, int need, size_t elem_size);
/* For allocators outside this file (device memory): count one allocation
 * and say whether fault injection makes it fail (the message is set). */
KN_HIDDEN bool kn_fault_hit(size_t size);
/* Fault injection: fail the n-th allocation from now (1-based); 0 disables.
 * Returns the count of allocations made since the last call. */
KN_HIDDEN uint64_t kn_fault_inject_set(uint64_t fail_at);

/* ---- checked size arithmetic ---- */
static inline bool kn_mul_overflow(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool kn_add_overflow(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out);
}
/* The same for the int64_t arithmetic of shapes and attributes: true (and
 * *out unspecified) when the exact result does not fit, so a caller can
 * name what overflowed instead of computing with a wrapped value (signed
 * overflow is undefined behaviour in C). */
static inline bool kn_mul_i64(int64_t a, int64_t b, int64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool kn_add_i64(int64_t a, int64_t b, int64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static inline bool kn_sub_i64(int64_t a, int64_t b, int64_t *out) {
    return __builtin_sub_overflow(a, b, out);
}
/* A double as an int64_t when it is finite and in [lo, hi] (no undefined
 * float-to-integer conversion): false otherwise. */
static inline bool kn_double_to_i64(double v, int64_t lo, int64_t hi, int64_t *out) {
    if (!(v >= (double)lo && v <= (double)hi) || v >= 9223372036854775807.0)
        return false;
    *out = (int64_t)v;
    return true;
}

/* ---- half precision ---- */
KN_HIDDEN float kn_half_to_float(uint16_t h);
KN_HIDDEN uint16_t kn_float_to_half(float f);
KN_HIDDEN float kn_bf16_to_float(uint16_t h);
KN_HIDDEN uint16_t kn_float_to_bf16(float f);
KN_HIDDEN float kn_fp8e4m3_to_float(uint8_t v);
KN_HIDDEN uint8_t kn_float_to_fp8e4m3(float f);
KN_HIDDEN float kn_fp8e5m2_to_float(uint8_t v);
KN_HIDDEN uint8_t kn_float_to_fp8e5m2(float f);

/* ---- files ---- */
typedef struct kn_mapped {
    const uint8_t *data;
    size_t size;
    void *base_;   /* private */
    size_t len_;   /* private */
} kn_mapped;
/* Open a file to read it: only a regular file is opened, and checking it
 * never blocks (a FIFO, /dev/zero or a directory is refused with an error
 * naming the path; see kn_open_regular in file_open.h). *fd is blocking
 * again and close-on-exec; the caller closes it. *size is the size at open.
 * Every file kiln reads goes through this. */
KN_HIDDEN kiln_status kn_file_open(const char *path, int *fd, size_t *size);
/* Read exactly `size` bytes from fd (opened by kn_file_open) into a
 * kn_malloc'd buffer (size + 1 bytes, the last one 0). A file that ends
 * sooner, because it changed since it was opened, is an error naming path. */
KN_HIDDEN kiln_status kn_file_read_fd(int fd, const char *path, size_t size, uint8_t **data);
/* A whole regular file as read-only bytes that stay valid until
 * kn_file_unmap, whatever happens to the file meanwhile: a private copy (see
 * kn_file_read_private), not a mapping, so a file truncated or rewritten
 * while it is used cannot fault or change what was read. Empty files give
 * data=NULL, size=0. */
KN_HIDDEN kiln_status kn_file_map(const char *path, kn_mapped *out);
KN_HIDDEN void kn_file_unmap(kn_mapped *m);
/* Read a whole regular file into a kn_malloc'd buffer (one byte more than
 * *size, set to 0, so text can be parsed in place). At most the size the
 * file had when opened is read, so a file cannot make this allocate more
 * than it holds. */
KN_HIDDEN kiln_status kn_file_read(const char *path, uint8_t **data, size_t *size);
KN_HIDDEN kiln_status kn_file_write(const char *path, const void *data, size_t size);

/* A private copy of a whole regular file (64-byte aligned; free with
 * kn_aligned_free): opened without blocking, refused unless regular, read
 * with pread to the size fstat gave, refused if the file changes size while
 * it is read. What a long-lived object keeps of a file: later changes to the
 * file cannot reach it (a mapping would see writes and fault on truncation). */
KN_HIDDEN kiln_status kn_file_read_private(const char *path, uint8_t **data, size_t *size);

/* ---- hashing ---- */
KN_HIDDEN uint64_t kn_hash64(const void *data, size_t n, uint64_t seed);
typedef struct kn_sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t fill;
} kn_sha256;
KN_HIDDEN void kn_sha256_init(kn_sha256 *s);
KN_HIDDEN void kn_sha256_update(kn_sha256 *s, const void *data, size_t n);
KN_HIDDEN void kn_sha256_final(kn_sha256 *s, uint8_t out[32]);
/* Hex digest into out (65 bytes with the NUL). */
KN_HIDDEN void kn_sha256_hex(const void *data, size_t n, char out[65]);

/* ---- growable byte buffer (plan writer, JSON) ---- */
typedef struct kn_buf {
    uint8_t *data;
    size_t len, cap;
    bool failed; /* sticky: set when an append could not allocate */
} kn_buf;
KN_HIDDEN void kn_buf_append(kn_buf *b, const void *data, size_t n);
KN_HIDDEN void kn_buf_printf(kn_buf *b, const char *fmt, ...) KN_PRINTF(2, 3);
KN_HIDDEN void kn_buf_pad(kn_buf *b, size_t align);
KN_HIDDEN void kn_buf_free(kn_buf *b);
/* Append a JSON string literal with escapes. */
KN_HIDDEN void kn_buf_json_string(kn_buf *b, const char *s);

/* ---- time ---- */
KN_HIDDEN double kn_now_ms(void);

/* ---- small string map (name -> int), open addressing ---- */
typedef struct kn_strmap {
    const char **keys; /* borrowed */
    int *vals;
    size_t cap, count;
} kn_strmap;
KN_HIDDEN kiln_status kn_strmap_put(kn_strmap *m, const char *key, int val);
/* Returns -1 when absent. */
KN_HIDDEN int kn_strmap_get(const kn_strmap *m, const char *key);
KN_HIDDEN void kn_strmap_free(kn_strmap *m);

/* ---- CPU thread pool (pool.c) ----
 * kiln's kernels split loops over threads through this instead of OpenMP so
 * that an idle thread spins only briefly and then sleeps: on a machine whose
 * cores other work needs, a thread that spins for milliseconds at every join
 * takes the slice its descheduled partner needs (docs/architecture.md,
 * "Threads"). fn(ctx, lo, hi, tid) runs iterations [lo, hi) as thread tid
 * (0 = the caller, < threads); every iteration of [0, n) runs exactly once
 * and all have run when kn_parallel_for returns. grain 0: the loop is cut
 * into contiguous blocks, a few a thread (OpenMP's schedule(static), finer);
 * grain > 0: blocks of `grain` iterations (schedule(dynamic, grain)).
 * Threads take blocks in turn until none is left, so a thread that is not
 * running leaves its share to the others instead of holding up the join. A call from inside a
 * running loop, or with threads <= 1, runs in the caller alone with tid 0;
 * calls from several application threads at once get a pool each (up to a
 * bound, then the caller alone). The spin before sleeping is
 * KILN_SPIN_COUNT pause loops (default 1000; 0: sleep at once). */
typedef void (*kn_range_fn)(void *ctx, int64_t lo, int64_t hi, int tid);
KN_HIDDEN void kn_parallel_for(int threads, int64_t n, int64_t grain, kn_range_fn fn, void *ctx);
/* Threads the pools have started, over the life of the process (tests). */
KN_HIDDEN int kn_pool_threads_started(void);

#endif
