/* mem.c - allocation wrappers with a fault-injection hook: a test sets the
 * N-th allocation from now to fail (kn_fault_inject_set, or the environment
 * variable KILN_FAIL_ALLOC_AT read once) and walks N over a whole operation. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static _Atomic uint64_t kn_alloc_count;
static _Atomic uint64_t kn_alloc_fail_at;
static atomic_int kn_env_read;

static bool kn_should_fail(size_t size) {
    if (!atomic_exchange(&kn_env_read, 1)) {
        const char *e = getenv("KILN_FAIL_ALLOC_AT");
        if (e && *e)
            atomic_store(&kn_alloc_fail_at, strtoull(e, NULL, 10));
    }
    uint64_t n = atomic_fetch_add(&kn_alloc_count, 1) + 1;
    uint64_t at = atomic_load(&kn_alloc_fail_at);
    if (at != 0 && n == at) {
        kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes (injected fault #%llu)",
                 size, (unsigned long long)n);
        return true;
    }
    return false;
}

bool kn_fault_hit(size_t size) { return kn_should_fail(size); }

uint64_t kn_fault_inject_set(uint64_t fail_at) {
    atomic_store(&kn_env_read, 1);
    uint64_t made = atomic_exchange(&kn_alloc_count, 0);
    atomic_store(&kn_alloc_fail_at, fail_at);
    return made;
}

static void *kn_oom(size_t size) {
    kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", size);
    return NULL;
}

void *kn_malloc(size_t size) {
    if (kn_should_fail(size))
        return NULL;
    void *p = malloc(size ? size : 1);
    return p ? p : kn_oom(size);
}

void *kn_calloc(size_t n, size_t size) {
    size_t total;
    if (kn_mul_overflow(n, size, &total))
        return kn_oom(SIZE_MAX);
    if (kn_should_fail(total))
        return NULL;
    void *p = calloc(n ? n : 1, size ? size : 1);
    return p ? p : kn_oom(total);
}

void *kn_realloc(void *p, size_t size) {
    if (kn_should_fail(size))
        return NULL;
    void *q = realloc(p, size ? size : 1);
    return q ? q : kn_oom(size);
}

void *kn_aligned_alloc(size_t size) {
    if (kn_should_fail(size))
        return NULL;
    void *p = NULL;
    size_t rounded = (size + 63u) & ~(size_t)63u;
    if (rounded < size || posix_memalign(&p, 64, rounded ? rounded : 64) != 0)
        return kn_oom(size);
    return p;
}

void kn_aligned_free(void *p) { free(p); }
void kn_free(void *p) { free(p); }

KILN_API void kiln_free(void *ptr) { free(ptr); }

char *kn_strndup(const char *s, size_t n) {
    char *d = kn_malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *kn_strdup(const char *s) { return kn_strndup(s, strlen(s)); }

kiln_status kn_grow(void **arr, int *cap, int need, size_t elem_size) {
    if (need <= *cap)
        return KILN_OK;
    int nc = *cap ? *cap : 8;
    while (nc < need) {
        if (nc > (1 << 29))
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "array too large (%d elements)", need);
        nc *= 2;
    }
    size_t bytes;
    if (kn_mul_overflow((size_t)nc, elem_size, &bytes))
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "array too large");
    void *p = kn_realloc(*arr, bytes);
    if (!p)
        return KILN_ERR_OUT_OF_MEMORY;
    memset((char *)p + (size_t)*cap * elem_size, 0, (size_t)(nc - *cap) * elem_size);
    *arr = p;
    *cap = nc;
    return KILN_OK;
}
