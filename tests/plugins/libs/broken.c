/* broken.c - plugin libraries that must fail to load, one per build flavour:
 * BROKEN_NO_ENTRY exports no entry point, BROKEN_MISSING_DEP needs a library
 * that is not installed, BROKEN_UNRESOLVED needs a symbol nothing defines,
 * BROKEN_FUTURE_ABI declares a creator of a future ABI version. */
#include "kiln/kiln_plugin.h"

#define EXPORT __attribute__((visibility("default")))

#if defined(BROKEN_MISSING_DEP)
int kiln_test_dep_value(void);
#elif defined(BROKEN_UNRESOLVED)
int kiln_test_symbol_nobody_defines(void);
#endif

__attribute__((unused)) static kiln_status create(void *self, const char *layer, const kiln_field_collection *fields,
                          kiln_plugin_phase phase, kiln_plugin **out) {
    return KILN_ERR_UNSUPPORTED;
}

__attribute__((unused)) static const kiln_plugin_creator creator = {
#if defined(BROKEN_FUTURE_ABI)
    99u,
#else
    KILN_PLUGIN_ABI_VERSION,
#endif
    sizeof(kiln_plugin_creator), "Broken", "1", "", 0, 0, 0, create};
#if !defined(BROKEN_NO_ENTRY)
static const kiln_plugin_creator *const creators[] = {&creator};
#endif

#if defined(BROKEN_NO_ENTRY)
EXPORT int kiln_plugin_something_else(void) { return 1; }
#else
EXPORT kiln_status kiln_plugin_get_creators(const kiln_plugin_host *h, uint32_t host_abi,
                                            const char *ns,
                                            const kiln_plugin_creator *const **out,
                                            int32_t *count) {
#if defined(BROKEN_MISSING_DEP)
    if (kiln_test_dep_value() != 42)
        return KILN_ERR_PLUGIN;
#elif defined(BROKEN_UNRESOLVED)
    if (kiln_test_symbol_nobody_defines() != 42)
        return KILN_ERR_PLUGIN;
#endif
    *out = creators;
    *count = 1;
    return KILN_OK;
}
#endif
