/* fuzz_plan.c - libFuzzer target: the plan reader (header and whole plan) on
 * arbitrary bytes. The checksum would stop most mutations at the door, so the
 * fuzzer also feeds each input again with its header hash and checksum
 * recomputed (kp_reseal), so mutations reach the section parsers. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"
#include "kiln/kiln_runtime.h"

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
        kp_reseal(copy, size); /* fix the header hash and checksum after mutation */
        try_load(copy, size);
        free(copy);
    }
    return 0;
}
