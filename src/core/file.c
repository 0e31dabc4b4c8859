/* file.c - opening (regular files only, never blocking), mapping, reading and
 * writing whole files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "file_open.h"

kiln_status kn_file_open(const char *path, int *fd, size_t *size) {
    int f = -1;
    uint64_t sz = 0;
    int e = kn_open_regular(path, &f, &sz);
    if (e == KN_OPEN_NOT_REGULAR)
        return kn_error(KILN_ERR_IO, "'%s' is not a regular file (a FIFO, device or directory "
                        "is not read)", path);
    if (e != 0)
        return kn_error(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(e));
    if (sz > (uint64_t)SIZE_MAX / 2) {
        close(f);
        return kn_error(KILN_ERR_IO, "'%s' is too large (%llu bytes)", path,
                        (unsigned long long)sz);
    }
    *fd = f;
    *size = (size_t)sz;
    return KILN_OK;
}

kiln_status kn_file_read_fd(int fd, const char *path, size_t size, uint8_t **data) {
    uint8_t *b = kn_malloc(size + 1);
    if (!b)
        return KILN_ERR_OUT_OF_MEMORY;
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, b + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = n < 0 ? errno : 0;
            kn_free(b);
            if (n == 0)
                return kn_error(KILN_ERR_IO, "'%s' ended at byte %zu of %zu (it changed while "
                                "being read)", path, got, size);
            return kn_error(KILN_ERR_IO, "cannot read '%s' at byte %zu: %s", path, got,
                            strerror(err));
        }
        got += (size_t)n;
    }
    b[size] = 0;
    *data = b;
    return KILN_OK;
}

/* Not a mapping any more: a private copy (kn_file_read_private). A file
 * mapped while it is used faults (SIGBUS) on the first page past its new end
 * when it is truncated, and shows every later write: an ONNX model or its
 * external data rewritten during a build crashed the process. The copy
 * costs the file's size in memory, which building needs for the weights
 * anyway (docs/decisions.md, "ONNX files are read, not mapped"). */
kiln_status kn_file_map(const char *path, kn_mapped *out) {
    memset(out, 0, sizeof *out);
    uint8_t *b = NULL;
    size_t size = 0;
    KN_TRY(kn_file_read_private(path, &b, &size));
    if (size == 0) {
        kn_aligned_free(b);
        return KILN_OK;
    }
    out->data = b;
    out->size = size;
    out->base_ = b;
    out->len_ = size;
    return KILN_OK;
}

void kn_file_unmap(kn_mapped *m) {
    if (m && m->base_)
        kn_aligned_free(m->base_);
    if (m)
        memset(m, 0, sizeof *m);
}

kiln_status kn_file_read(const char *path, uint8_t **data, size_t *size) {
    int fd = -1;
    size_t n = 0;
    KN_TRY(kn_file_open(path, &fd, &n));
    uint8_t *b = NULL;
    kiln_status st = kn_file_read_fd(fd, path, n, &b);
    close(fd);
    if (st != KILN_OK)
        return st;
    *data = b;
    *size = n;
    return KILN_OK;
}

kiln_status kn_file_write(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return kn_error(KILN_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    size_t w = size ? fwrite(data, 1, size, f) : 0;
    int bad = (w != size) | (fclose(f) != 0);
    if (bad)
        return kn_error(KILN_ERR_IO, "cannot write '%s' (%zu bytes)", path, size);
    return KILN_OK;
}

/* A private copy of a whole regular file in 64-byte aligned memory, read with
 * pread from one descriptor. Opening never blocks (O_NONBLOCK, then fstat
 * refuses a FIFO, device or directory), at most the size fstat reported is
 * read, and a file that shrinks or grows while it is read is refused: the
 * copy is exactly one state of the file. Used where the bytes are kept for
 * as long as an object lives (plans), so that whatever happens to the file
 * later cannot reach them. */
kiln_status kn_file_read_private(const char *path, uint8_t **data, size_t *size) {
    int fd = -1;
    size_t n = 0;
    KN_TRY(kn_file_open(path, &fd, &n));
    uint8_t *b = kn_aligned_alloc(n ? n : 1);
    if (!b) {
        close(fd);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    size_t got = 0;
    kiln_status rc = KILN_OK;
    while (got < n && rc == KILN_OK) {
        ssize_t r = pread(fd, b + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = kn_error(KILN_ERR_IO, "cannot read '%s' at byte %zu: %s", path, got,
                          strerror(errno));
        else if (r == 0)
            rc = kn_error(KILN_ERR_IO, "'%s' ended at byte %zu of %zu: it changed while being "
                          "read", path, got, n);
        else
            got += (size_t)r;
    }
    uint8_t extra;
    if (rc == KILN_OK && pread(fd, &extra, 1, (off_t)n) > 0)
        rc = kn_error(KILN_ERR_IO, "'%s' grew past %zu bytes while being read", path, n);
    close(fd);
    if (rc != KILN_OK) {
        kn_aligned_free(b);
        return rc;
    }
    *data = b;
    *size = n;
    return KILN_OK;
}
