/* file.c - mapping, reading and writing whole files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

kiln_status kn_file_map(const char *path, kn_mapped *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kn_error(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kn_error(KILN_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return KILN_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
        return kn_error(KILN_ERR_IO, "cannot map '%s': %s", path, strerror(err));
    out->data = p;
    out->size = (size_t)st.st_size;
    out->base_ = p;
    out->len_ = (size_t)st.st_size;
    return KILN_OK;
}

void kn_file_unmap(kn_mapped *m) {
    if (m && m->base_)
        munmap(m->base_, m->len_);
    if (m)
        memset(m, 0, sizeof *m);
}

kiln_status kn_file_read(const char *path, uint8_t **data, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return kn_error(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    kn_buf b = {0};
    uint8_t chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        kn_buf_append(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        kn_buf_free(&b);
        return kn_error(KILN_ERR_IO, "cannot read '%s'", path);
    }
    if (b.failed) {
        kn_buf_free(&b);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    *data = b.data;
    *size = b.len;
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
