/* fuzz_onnx.c - libFuzzer target: the ONNX reader on arbitrary bytes. */
#include <stddef.h>
#include <stdint.h>

#include "kiln/kiln_onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_network *net = NULL;
    if (kiln_onnx_parse_memory(data, size, NULL, &net) == KILN_OK)
        kiln_network_destroy(net);
    return 0;
}
