/* fuzz_plugin_fields.c - libFuzzer target: the decoder of plugin fields (the
 * bytes a plan stores for each plugin layer, src/plugin/fields.c). Whatever
 * it accepts must write back to the same bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kpl_fields f;
    if (kpl_fields_read(data, size, &f) != KILN_OK)
        return 0;
    kn_buf b;
    memset(&b, 0, sizeof b);
    kpl_fields_write(&f.c, &b);
    if (!b.failed && (b.len != size || memcmp(b.data, data, size) != 0))
        abort(); /* accepted bytes that do not round-trip */
    kn_buf_free(&b);
    kpl_fields_free(&f);
    return 0;
}
