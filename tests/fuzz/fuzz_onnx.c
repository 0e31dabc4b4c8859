/* fuzz_onnx.c - libFuzzer target: the ONNX reader on arbitrary bytes. */
#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln_onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static void quiet(void *user, kiln_severity sev, const char *msg) {
    (void)user;
    (void)sev;
    (void)msg;
}

/* Warnings about accepted-but-odd inputs would flood the output and slow
 * the fuzzer; failures are what it looks for. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    kiln_set_logger(quiet, NULL, KILN_LOG_ERROR);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_network *net = NULL;
    if (kiln_onnx_parse_memory(data, size, NULL, &net) == KILN_OK)
        kiln_network_destroy(net);
    return 0;
}
