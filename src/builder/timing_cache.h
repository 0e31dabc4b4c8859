/* timing_cache.h - tactic timing cache (timing_cache.c has the file format). */
#ifndef KILN_TIMING_CACHE_H
#define KILN_TIMING_CACHE_H

#include "core/core.h"

typedef struct kbld_tcache_entry {
    uint64_t sig;
    char tactic[32];
    double ms;
} kbld_tcache_entry;

typedef struct kbld_tcache {
    char key[256];   /* backend|target|libraries */
    int n, cap;
    kbld_tcache_entry *e;
    /* index of e by signature: open addressing, nslot a power of two (or
     * 0), each slot 0 (empty) or 1 + an index into e */
    int *slot;
    size_t nslot;
    bool dirty;
} kbld_tcache;

/* Load `path` when it exists and was made for `key`; otherwise start empty. */
KN_HIDDEN kiln_status kbld_tcache_load(kbld_tcache *c, const char *path, const char *key);
KN_HIDDEN kiln_status kbld_tcache_save(const kbld_tcache *c, const char *path);
/* The tactic recorded for a signature (and its time), or NULL. */
KN_HIDDEN const char *kbld_tcache_get(const kbld_tcache *c, uint64_t sig, double *ms);
KN_HIDDEN kiln_status kbld_tcache_put(kbld_tcache *c, uint64_t sig, const char *tactic, double ms);
KN_HIDDEN void kbld_tcache_free(kbld_tcache *c);

#endif
