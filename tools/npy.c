/* npy.c - seeded random inputs and --val-range parsing for the kiln command
 * line (see npy.h). The .npy/.npz code itself is in the library
 * (src/tools/npy.c, include/kiln/kiln_tools.h). */
#include "npy.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool fail(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err)
        vsnprintf(err, NPY_ERR_CAP, fmt, ap);
    va_end(ap);
    return false;
}

static char *dupstr(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* ---------------- random inputs ---------------- */

bool npy_parse_ranges(const char *spec, npy_range_list *l, char *err) {
    const char *p = spec;
    while (*p) {
        const char *lb = strchr(p, '[');
        if (!lb)
            return fail(err, "--val-range: expected name:[lo,hi] in '%s'", spec);
        const char *rb = strchr(lb, ']');
        if (!rb)
            return fail(err, "--val-range: missing ']' in '%s'", spec);
        size_t nlen = (size_t)(lb - p);
        if (nlen && p[nlen - 1] == ':')
            nlen--;
        else if (nlen)
            return fail(err, "--val-range: expected ':' before '[' in '%s'", spec);
        char num[128];
        size_t blen = (size_t)(rb - lb - 1);
        if (blen >= sizeof num)
            return fail(err, "--val-range: range too long in '%s'", spec);
        memcpy(num, lb + 1, blen);
        num[blen] = '\0';
        char *end;
        double lo = strtod(num, &end);
        if (end == num || *end != ',')
            return fail(err, "--val-range: expected [lo,hi] with two numbers in '%s'", spec);
        const char *hs = end + 1;
        double hi = strtod(hs, &end);
        if (end == hs || *end != '\0' || !isfinite(lo) || !isfinite(hi) || lo > hi)
            return fail(err, "--val-range: expected [lo,hi] with lo <= hi in '%s'", spec);
        npy_range *ni = realloc(l->items, (size_t)(l->n + 1) * sizeof *ni);
        if (!ni)
            return fail(err, "out of memory");
        l->items = ni;
        if (nlen >= 2 && p[0] == '\'' && p[nlen - 1] == '\'') {
            p++;
            nlen -= 2;
        }
        ni[l->n].name = dupstr(p, nlen);
        ni[l->n].lo = lo;
        ni[l->n].hi = hi;
        if (!ni[l->n].name)
            return fail(err, "out of memory");
        l->n++;
        p = rb + 1;
        if (*p == ',')
            p++;
        else if (*p)
            return fail(err, "--val-range: expected ',' after ']' in '%s'", spec);
    }
    return true;
}

void npy_range_list_free(npy_range_list *l) {
    for (int i = 0; i < l->n; i++)
        free(l->items[i].name);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bool is_float(kiln_dtype dt) {
    return dt == KILN_DTYPE_FLOAT || dt == KILN_DTYPE_DOUBLE || dt == KILN_DTYPE_FLOAT16 ||
           dt == KILN_DTYPE_BFLOAT16;
}

void npy_fill_random(kiln_dtype dtype, void *data, size_t n, const npy_range_list *ranges,
                     const char *name, uint64_t *state) {
    bool fl = is_float(dtype);
    double lo = fl ? -1.0 : 0.0, hi = 1.0;
    for (int i = 0; ranges && i < ranges->n; i++) /* the named range wins over the default */
        if (ranges->items[i].name[0] == '\0' || strcmp(ranges->items[i].name, name) == 0) {
            lo = ranges->items[i].lo;
            hi = ranges->items[i].hi;
            if (ranges->items[i].name[0])
                break;
        }
    if (dtype == KILN_DTYPE_BOOL) {
        lo = lo < 0 ? 0 : lo > 1 ? 1 : lo;
        hi = hi < 0 ? 0 : hi > 1 ? 1 : hi;
    }
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix(state) >> 11) * (1.0 / 9007199254740992.0);
        double v;
        if (fl) {
            v = lo + (hi - lo) * u;
        } else {
            double ilo = ceil(lo), ihi = floor(hi);
            if (ihi < ilo)
                ihi = ilo;
            v = ilo + floor(u * (ihi - ilo + 1.0));
            if (v > ihi)
                v = ihi;
        }
        npy_set(dtype, data, i, v);
    }
}
