/* timing_cache.c - the tactic timing cache: (layer signature -> fastest
 * tactic, time) for one device and library versions, kept in memory during a
 * build and optionally in a file so rebuilds skip timing.
 *
 * File format (text, one record a line):
 *   kiln-timing-cache 1
 *   key <backend>|<target>|<libraries>
 *   <signature, 16 hex digits> <tactic> <milliseconds>
 * A file whose key differs (another device or library version) is ignored
 * with a warning; a damaged file is ignored with a warning naming the line. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timing_cache.h"

void kbld_tcache_free(kbld_tcache *c) {
    kn_free(c->e);
    memset(c, 0, sizeof *c);
}

const char *kbld_tcache_get(const kbld_tcache *c, uint64_t sig, double *ms) {
    for (int i = 0; i < c->n; i++)
        if (c->e[i].sig == sig) {
            if (ms)
                *ms = c->e[i].ms;
            return c->e[i].tactic;
        }
    return NULL;
}

kiln_status kbld_tcache_put(kbld_tcache *c, uint64_t sig, const char *tactic, double ms) {
    int at = -1;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].sig == sig)
            at = i;
    if (at < 0) {
        KN_TRY(kn_grow((void **)&c->e, &c->cap, c->n + 1, sizeof *c->e));
        at = c->n++;
    }
    c->e[at].sig = sig;
    snprintf(c->e[at].tactic, sizeof c->e[at].tactic, "%s", tactic);
    c->e[at].ms = ms;
    c->dirty = true;
    return KILN_OK;
}

kiln_status kbld_tcache_load(kbld_tcache *c, const char *path, const char *key) {
    snprintf(c->key, sizeof c->key, "%s", key);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) {
            kn_log(KILN_LOG_INFO, "timing cache '%s' does not exist yet: it will be written",
                   path);
            return KILN_OK;
        }
        return kn_error(KILN_ERR_IO, "cannot open timing cache '%s'", path);
    }
    char line[512];
    int lineno = 0;
    bool ok = true;
    kbld_tcache tmp = {0};
    while (ok && fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = 0;
        if (lineno == 1) {
            ok = strcmp(line, "kiln-timing-cache 1") == 0;
        } else if (lineno == 2) {
            if (strncmp(line, "key ", 4) != 0) {
                ok = false;
            } else if (strcmp(line + 4, key) != 0) {
                kn_log(KILN_LOG_WARNING,
                       "timing cache '%s' was made for '%s', not this device '%s': ignoring it",
                       path, line + 4, key);
                fclose(f);
                kbld_tcache_free(&tmp);
                return KILN_OK;
            }
        } else if (line[0]) {
            uint64_t sig;
            char tactic[64];
            double ms;
            if (sscanf(line, "%16" SCNx64 " %63s %lf", &sig, tactic, &ms) != 3 || ms < 0)
                ok = false;
            else if (kbld_tcache_put(&tmp, sig, tactic, ms) != KILN_OK) {
                fclose(f);
                kbld_tcache_free(&tmp);
                return KILN_ERR_OUT_OF_MEMORY;
            }
        }
    }
    fclose(f);
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
