/* pc_parse.c - parse an ONNX model with protobuf-c code generated from
 * Debian's onnx.proto (onnx__model_proto__unpack over a mapped file).
 * usage: pc_parse model.onnx [--touch] */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_common.h"
#include "onnx.pb-c.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s model.onnx [--touch]\n", argv[0]);
        return 2;
    }
    int touch = argc > 2 && strcmp(argv[2], "--touch") == 0;
    double t0 = now_ms();
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(argv[1]);
        return 1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, (size_t)st.st_size, p);
    double t1 = now_ms();
    long rss = peak_rss_kb();
    if (!m || !m->graph) {
        fprintf(stderr, "%s: cannot unpack\n", argv[1]);
        return 1;
    }
    size_t bytes = 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < m->graph->n_initializer; i++)
        bytes += m->graph->initializer[i]->raw_data.len;
    if (touch)
        for (size_t i = 0; i < m->graph->n_initializer; i++)
            sum += checksum(m->graph->initializer[i]->raw_data.data,
                            m->graph->initializer[i]->raw_data.len);
    double t2 = now_ms();
    report("protobuf-c", t1 - t0, t2 - t1, rss, m->graph->n_initializer, bytes, sum, touch);
    onnx__model_proto__free_unpacked(m, NULL);
    munmap(p, (size_t)st.st_size);
    return 0;
}
