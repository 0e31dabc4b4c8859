/* status.c - status names and the per-thread last-error message. */
#include <stdio.h>
#include <string.h>

#include "core.h"

static _Thread_local char kn_last_msg[2048];

KILN_API const char *kiln_status_name(kiln_status status) {
    switch (status) {
    case KILN_OK: return "KILN_OK";
    case KILN_ERR_INVALID_ARGUMENT: return "KILN_ERR_INVALID_ARGUMENT";
    case KILN_ERR_PARSE: return "KILN_ERR_PARSE";
    case KILN_ERR_UNSUPPORTED: return "KILN_ERR_UNSUPPORTED";
    case KILN_ERR_SHAPE: return "KILN_ERR_SHAPE";
    case KILN_ERR_OUT_OF_MEMORY: return "KILN_ERR_OUT_OF_MEMORY";
    case KILN_ERR_IO: return "KILN_ERR_IO";
    case KILN_ERR_PLAN: return "KILN_ERR_PLAN";
    case KILN_ERR_VERSION: return "KILN_ERR_VERSION";
    case KILN_ERR_DEVICE: return "KILN_ERR_DEVICE";
    case KILN_ERR_PLUGIN: return "KILN_ERR_PLUGIN";
    case KILN_ERR_NOT_FOUND: return "KILN_ERR_NOT_FOUND";
    case KILN_ERR_RUNTIME: return "KILN_ERR_RUNTIME";
    case KILN_ERR_INTERNAL: return "KILN_ERR_INTERNAL";
    }
    return "KILN_ERR_UNKNOWN";
}

KILN_API const char *kiln_last_error(void) { return kn_last_msg; }

kiln_status kn_verror(kiln_status status, const char *fmt, va_list ap) {
    vsnprintf(kn_last_msg, sizeof kn_last_msg, fmt, ap);
    return status;
}

kiln_status kn_error(kiln_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kn_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

kiln_status kn_error_wrap(kiln_status status, const char *fmt, ...) {
    char prefix[512], old[sizeof kn_last_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, kn_last_msg, sizeof old);
    snprintf(kn_last_msg, sizeof kn_last_msg, "%s: %.1500s", prefix, old);
    return status;
}

void kn_error_clear(void) { kn_last_msg[0] = 0; }

KILN_API const char *kiln_version_string(void) {
#define KN_STR2(x) #x
#define KN_STR(x) KN_STR2(x)
    return KN_STR(KILN_VERSION_MAJOR) "." KN_STR(KILN_VERSION_MINOR) "." KN_STR(KILN_VERSION_PATCH);
}
