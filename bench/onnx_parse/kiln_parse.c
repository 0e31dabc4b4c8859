/* kiln_parse.c - parse an ONNX model with kiln_onnx_parse_file (the mapped,
 * zero-copy reader); reads the weights back through the network IR.
 * usage: kiln_parse model.onnx [--touch] */
#include "bench_common.h"
#include "graph/graph.h"
#include "kiln/kiln_onnx.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s model.onnx [--touch]\n", argv[0]);
        return 2;
    }
    int touch = argc > 2 && strcmp(argv[2], "--touch") == 0;
    kiln_network *net = NULL;
    double t0 = now_ms();
    kiln_status st = kiln_onnx_parse_file(argv[1], &net);
    double t1 = now_ms();
    long rss = peak_rss_kb();
    if (st != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
    size_t n = 0, bytes = 0;
    uint64_t sum = 0;
    for (int i = 0; i < net->n_tensors; i++)
        if (net->tensors[i].flags & KN_T_CONST) {
            n++;
            bytes += net->tensors[i].value.nbytes;
            if (touch)
                sum += checksum(net->tensors[i].value.data, net->tensors[i].value.nbytes);
        }
    double t2 = now_ms();
    report("kiln", t1 - t0, t2 - t1, rss, n, bytes, sum, touch);
    kiln_network_destroy(net);
    return 0;
}
