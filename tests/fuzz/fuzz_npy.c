/* fuzz_npy.c - libFuzzer target: the library's .npy and .npz readers
 * (src/tools/npy.c, public as kiln_npy_decode / kiln_npz_decode) on
 * arbitrary bytes. Every input must be rejected with a
 * message or decoded; nothing may crash, leak or read out of bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tools/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[NPY_ERR_CAP];
    npy_array a;
    if (npy_decode(data, size, "fuzz.npy", &a, err)) {
        /* what decodes must encode again */
        void *buf = NULL;
        size_t n = 0;
        a.name = NULL;
        if (npy_encode(&a, &buf, &n, err))
            free(buf);
        npy_array_free(&a);
    }
    npy_list l;
    if (npz_decode(data, size, "fuzz.npz", &l, err))
        npy_list_free(&l);
    return 0;
}
