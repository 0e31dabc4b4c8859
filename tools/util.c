/* util.c - helpers for the kiln command line: message printing, whole-file
 * reads and writes, a monotonic clock, element access for every data type
 * and JSON value writing. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/core/file_open.h"

#include "cli.h"
#include "npy.h"

bool cli_verbose;

/* One whole line at a time: kiln exec's streams may print from threads. */
static void vprint(FILE *f, const char *tag, const char *fmt, va_list ap) {
    flockfile(f);
    fputs(tag, f);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
    funlockfile(f);
}

void cli_info(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprint(stdout, "[I] ", fmt, ap);
    va_end(ap);
}

void cli_vlog(const char *fmt, ...) {
    if (!cli_verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprint(stdout, "[V] ", fmt, ap);
    va_end(ap);
}

void cli_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    vprint(stderr, "[W] ", fmt, ap);
    va_end(ap);
}

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    vprint(stderr, "[E] ", fmt, ap);
    va_end(ap);
}

void cli_kiln_error(const char *what, kiln_status st) {
    const char *msg = kiln_last_error();
    cli_error("%s: %s%s%s", what, kiln_status_name(st), msg && *msg ? ": " : "", msg ? msg : "");
}

static void log_sink(void *user, kiln_severity sev, const char *message) {
    (void)user;
    switch (sev) {
    case KILN_LOG_ERROR: cli_error("%s", message); break;
    case KILN_LOG_WARNING: cli_warn("%s", message); break;
    case KILN_LOG_INFO: cli_info("%s", message); break;
    default: cli_vlog("%s", message); break;
    }
}

void cli_install_logger(bool verbose) {
    cli_verbose = verbose;
    kiln_set_logger(log_sink, NULL, verbose ? KILN_LOG_VERBOSE : KILN_LOG_WARNING);
}

/* ---- files ---- */

/* Open a file to read: only a regular file, checked without blocking (the
 * library's kn_open_regular). Prints the error. */
static bool open_regular(const char *path, int *fd, size_t *size) {
    uint64_t n = 0;
    int e = kn_open_regular(path, fd, &n);
    if (e == KN_OPEN_NOT_REGULAR) {
        cli_error("'%s' is not a regular file (a FIFO, device or directory is not read)", path);
        return false;
    }
    if (e != 0) {
        cli_error("cannot open '%s': %s", path, strerror(e));
        return false;
    }
    if (n >= SIZE_MAX / 2) {
        close(*fd);
        cli_error("'%s' is too large", path);
        return false;
    }
    *size = (size_t)n;
    return true;
}

/* Read up to cap bytes of fd; the count read, or -1 on an error (printed). */
static long read_up_to(int fd, const char *path, unsigned char *buf, size_t cap) {
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            cli_error("cannot read '%s': %s", path, strerror(errno));
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long)got;
}

bool cli_read_file(const char *path, void **data, size_t *size) {
    return cli_read_file_max(path, SIZE_MAX, data, size);
}

bool cli_read_file_max(const char *path, size_t max, void **data, size_t *size) {
    int fd = -1;
    size_t n = 0;
    if (!open_regular(path, &fd, &n))
        return false;
    if (n > max) {
        close(fd);
        cli_error("'%s' has %zu bytes, more than the %zu expected", path, n, max);
        return false;
    }
    /* at most the size at open: what the file holds bounds what is allocated */
    unsigned char *buf = malloc(n + 1);
    long got = buf ? read_up_to(fd, path, buf, n) : -1;
    close(fd);
    if (!buf)
        cli_error("cannot read '%s': out of memory (%zu bytes)", path, n);
    else if (got >= 0 && (size_t)got != n)
        cli_error("'%s' ended at byte %ld of %zu (it changed while being read)", path, got, n);
    if (!buf || got < 0 || (size_t)got != n) {
        free(buf);
        return false;
    }
    buf[n] = 0;
    *data = buf;
    *size = n;
    return true;
}

long cli_read_head(const char *path, void *buf, size_t cap) {
    int fd = -1;
    size_t n = 0;
    if (!open_regular(path, &fd, &n))
        return -1;
    long got = read_up_to(fd, path, buf, cap < n ? cap : n);
    close(fd);
    return got;
}

bool cli_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        cli_error("cannot create '%s': %s", path, strerror(errno));
        return false;
    }
    bool ok = fwrite(data, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    if (!ok)
        cli_error("cannot write '%s': %s", path, strerror(errno));
    return ok;
}

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- element access ---- */

bool cli_dtype_is_float(kiln_dtype dt) {
    return dt == KILN_DTYPE_FLOAT || dt == KILN_DTYPE_DOUBLE || dt == KILN_DTYPE_FLOAT16 ||
           dt == KILN_DTYPE_BFLOAT16;
}

/* One element conversion for the whole CLI: npy.c's (range-checked casts). */
double cli_elem_get(kiln_dtype dt, const void *p, size_t i) { return npy_get(dt, p, i); }

void cli_elem_set(kiln_dtype dt, void *p, size_t i, double v) { npy_set(dt, p, i, v); }

size_t cli_volume(int rank, const int64_t *dims) {
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i] > 0 ? (size_t)dims[i] : 0;
    return n;
}

/* ---- JSON output ---- */

void cli_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

void cli_json_number(FILE *f, double v, bool integer) {
    if (isnan(v))
        fputs("NaN", f);
    else if (isinf(v))
        fputs(v > 0 ? "Infinity" : "-Infinity", f);
    else if (integer)
        fprintf(f, "%.0f", v);
    else
        fprintf(f, "%.9g", v);
}
