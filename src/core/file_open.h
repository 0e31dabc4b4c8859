/* file_open.h - the one way kiln opens a file it is about to read: only a
 * regular file, checked without blocking. libc only, so that the command line
 * tool (which sees no other internal symbol) shares it with the library. */
#ifndef KILN_FILE_OPEN_H
#define KILN_FILE_OPEN_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* Returned by kn_open_regular for a path that exists but is not a regular
 * file (a FIFO, a device such as /dev/zero, a directory, a socket). */
#define KN_OPEN_NOT_REGULAR (-1)

/* Open `path` read-only. O_NONBLOCK keeps open() from waiting for a writer
 * on a FIFO; fstat then refuses anything but a regular file (a device would
 * never end a read loop); O_NONBLOCK is cleared again for ordinary reads.
 * Returns 0 with *fd (the caller closes it) and *size (the size at open), or
 * KN_OPEN_NOT_REGULAR, or an errno value. Never blocks. */
static inline int kn_open_regular(const char *path, int *fd, uint64_t *size) {
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0)
        return errno ? errno : EIO;
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno ? errno : EIO;
        close(f);
        return e;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 0) {
        close(f);
        return KN_OPEN_NOT_REGULAR;
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno ? errno : EIO;
        close(f);
        return e;
    }
    *fd = f;
    *size = (uint64_t)st.st_size;
    return 0;
}

#endif
