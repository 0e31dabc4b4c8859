/* timing_cache.c - the tactic timing cache: (layer signature -> fastest
 * tactic, time) for one device and library versions, kept in memory during a
 * build and optionally in a file so rebuilds skip timing.
 *
 * File format (text, one record a line):
 *   kiln-timing-cache 1
 *   key <backend>|<target>|<libraries>
 *   <signature, 16 hex digits> <tactic> <milliseconds>
 * A file whose key differs (another device or library version) is ignored
 * with a warning; a damaged file (a record that does not parse, a tactic
 * name over 31 bytes, a NUL byte) is ignored with a warning naming the line.
 * Only a regular file is read, and at most its size (kn_file_read); entries
 * are indexed by signature, so loading is linear in the file. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "timing_cache.h"

void kbld_tcache_free(kbld_tcache *c) {
    kn_free(c->e);
    kn_free(c->slot);
    memset(c, 0, sizeof *c);
}

static size_t slot_of(const kbld_tcache *c, uint64_t sig) {
    uint64_t h = sig * 0x9e3779b97f4a7c15u; /* signatures are hashes, but not always good ones */
    return (size_t)(h >> 20) & (c->nslot - 1);
}

/* Index into c->e of sig, or -1. */
static int find(const kbld_tcache *c, uint64_t sig) {
    if (!c->nslot)
        return -1;
    for (size_t s = slot_of(c, sig);; s = (s + 1) & (c->nslot - 1)) {
        int v = c->slot[s];
        if (v == 0)
            return -1;
        if (c->e[v - 1].sig == sig)
            return v - 1;
    }
}

/* Keep the index at most half full. */
static kiln_status reindex(kbld_tcache *c, size_t need) {
    if (need * 2 <= c->nslot)
        return KILN_OK;
    size_t n = c->nslot ? c->nslot : 64;
    while (n < need * 2)
        n *= 2;
    int *slot = kn_calloc(n, sizeof *slot);
    if (!slot)
        return KILN_ERR_OUT_OF_MEMORY;
    kn_free(c->slot);
    c->slot = slot;
    c->nslot = n;
    for (int i = 0; i < c->n; i++) {
        size_t s = slot_of(c, c->e[i].sig);
        while (c->slot[s])
            s = (s + 1) & (n - 1);
        c->slot[s] = i + 1;
    }
    return KILN_OK;
}

const char *kbld_tcache_get(const kbld_tcache *c, uint64_t sig, double *ms) {
    int i = find(c, sig);
    if (i < 0)
        return NULL;
    if (ms)
        *ms = c->e[i].ms;
    return c->e[i].tactic;
}

kiln_status kbld_tcache_put(kbld_tcache *c, uint64_t sig, const char *tactic, double ms) {
    if (strlen(tactic) >= sizeof c->e[0].tactic) {
        /* a cut name would name no tactic: such a layer is timed every build */
        kn_log(KILN_LOG_VERBOSE, "timing cache: tactic name '%.40s...' is longer than %zu "
               "bytes: not cached", tactic, sizeof c->e[0].tactic - 1);
        return KILN_OK;
    }
    int at = find(c, sig);
    if (at < 0) {
        KN_TRY(reindex(c, (size_t)c->n + 1));
        KN_TRY(kn_grow((void **)&c->e, &c->cap, c->n + 1, sizeof *c->e));
        at = c->n++;
        size_t s = slot_of(c, sig);
        while (c->slot[s])
            s = (s + 1) & (c->nslot - 1);
        c->slot[s] = at + 1;
    }
    c->e[at].sig = sig;
    snprintf(c->e[at].tactic, sizeof c->e[at].tactic, "%s", tactic);
    c->e[at].ms = ms;
    c->dirty = true;
    return KILN_OK;
}

/* One record line: 16 hex digits, a tactic name that fits an entry, a
 * non-negative time, nothing else. */
static bool parse_record(const char *line, uint64_t *sig, char *tactic, size_t cap, double *ms) {
    const char *p = line;
    uint64_t v = 0;
    int digits = 0;
    for (; digits < 16; digits++, p++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
              : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10 : -1;
        if (d < 0)
            break;
        v = v << 4 | (uint64_t)d;
    }
    if (digits == 0 || *p != ' ')
        return false;
    while (*p == ' ')
        p++;
    size_t n = strcspn(p, " \t");
    if (n == 0 || n >= cap)
        return false;
    memcpy(tactic, p, n);
    tactic[n] = 0;
    p += n;
    char *end = NULL;
    errno = 0;
    double t = strtod(p, &end);
    if (end == p || errno != 0 || !(t >= 0) || t > 1e12)
        return false;
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end)
        return false;
    *sig = v;
    *ms = t;
    return true;
}

kiln_status kbld_tcache_load(kbld_tcache *c, const char *path, const char *key) {
    snprintf(c->key, sizeof c->key, "%s", key);
    if (access(path, F_OK) != 0 && errno == ENOENT) {
        kn_log(KILN_LOG_INFO, "timing cache '%s' does not exist yet: it will be written", path);
        return KILN_OK;
    }
    uint8_t *text = NULL;
    size_t size = 0;
    kiln_status st = kn_file_read(path, &text, &size);
    if (st != KILN_OK)
        return kn_error_wrap(st, "timing cache");
    /* kn_file_read ends the text with a 0; a 0 inside it is damage */
    bool ok = memchr(text, 0, size) == NULL;
    int lineno = 0;
    kbld_tcache tmp = {0};
    char *line = (char *)text, *end = (char *)text + size;
    while (ok && line < end) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        char *next = nl ? nl + 1 : end;
        if (nl)
            *nl = 0;
        line[strcspn(line, "\r")] = 0;
        lineno++;
        if (lineno == 1) {
            ok = strcmp(line, "kiln-timing-cache 1") == 0;
        } else if (lineno == 2) {
            if (strncmp(line, "key ", 4) != 0) {
                ok = false;
            } else if (strcmp(line + 4, key) != 0) {
                kn_log(KILN_LOG_WARNING,
                       "timing cache '%s' was made for '%.200s', not this device '%s': "
                       "ignoring it", path, line + 4, key);
                kn_free(text);
                return KILN_OK;
            }
        } else if (line[0]) {
            uint64_t sig;
            char tactic[sizeof tmp.e[0].tactic];
            double ms;
            if (!parse_record(line, &sig, tactic, sizeof tactic, &ms)) {
                ok = false;
            } else if (kbld_tcache_put(&tmp, sig, tactic, ms) != KILN_OK) {
                kn_free(text);
                kbld_tcache_free(&tmp);
                return KILN_ERR_OUT_OF_MEMORY;
            }
        }
        line = next;
    }
    kn_free(text);
    if (!ok || lineno < 2) {
        kn_log(KILN_LOG_WARNING, "timing cache '%s' is damaged at line %d: ignoring it", path,
               lineno);
        kbld_tcache_free(&tmp);
        return KILN_OK;
    }
    kbld_tcache_free(c);
    *c = tmp;
    c->dirty = false;
    snprintf(c->key, sizeof c->key, "%s", key);
    kn_log(KILN_LOG_INFO, "timing cache '%s': %d entries", path, c->n);
    return KILN_OK;
}

kiln_status kbld_tcache_save(const kbld_tcache *c, const char *path) {
    kn_buf b = {0};
    kn_buf_printf(&b, "kiln-timing-cache 1\nkey %s\n", c->key);
    for (int i = 0; i < c->n; i++)
        kn_buf_printf(&b, "%016" PRIx64 " %s %.6f\n", c->e[i].sig, c->e[i].tactic, c->e[i].ms);
    if (b.failed) {
        kn_buf_free(&b);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    /* write beside and rename, so a reader never sees half a file */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    kiln_status st = kn_file_write(tmp, b.data, b.len);
    kn_buf_free(&b);
    if (st == KILN_OK && rename(tmp, path) != 0)
        st = kn_error(KILN_ERR_IO, "cannot write timing cache '%s'", path);
    return st;
}
