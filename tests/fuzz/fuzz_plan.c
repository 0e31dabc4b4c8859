/* fuzz_plan.c - libFuzzer target: the plan reader (header and whole plan) on
 * arbitrary bytes. The checksum would stop most mutations at the door, so the
 * fuzzer also feeds plans whose checksum it has fixed (see plan.c's layout:
 * the last 8 bytes hash everything before them). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kiln/kiln_runtime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void try_load(const uint8_t *data, size_t size) {
    kiln_plan_info info;
    (void)kiln_plan_read_info(data, size, &info);
    kiln_engine *eng = NULL;
    if (kiln_engine_load(data, size, &eng) == KILN_OK)
        kiln_engine_destroy(eng);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    try_load(data, size);
    if (size >= 16) {
        uint8_t *copy = malloc(size);
        if (!copy)
            return 0;
        memcpy(copy, data, size);
        uint64_t h = kn_hash64(copy, size - 8, 0);
        memcpy(copy + size - 8, &h, 8);
        try_load(copy, size);
        free(copy);
    }
    return 0;
}
