/* log.c - the process-wide logger; calls to the sink are serialised. */
#include <pthread.h>
#include <stdio.h>

#include "core.h"

static pthread_mutex_t kn_log_lock = PTHREAD_MUTEX_INITIALIZER;
static kiln_log_fn kn_log_sink;
static void *kn_log_user;
static volatile int kn_log_max = KILN_LOG_WARNING;

KILN_API void kiln_set_logger(kiln_log_fn fn, void *user, kiln_severity max_severity) {
    pthread_mutex_lock(&kn_log_lock);
    kn_log_sink = fn;
    kn_log_user = user;
    kn_log_max = (int)max_severity;
    pthread_mutex_unlock(&kn_log_lock);
}

bool kn_log_enabled(kiln_severity sev) { return (int)sev <= kn_log_max; }

void kn_log(kiln_severity sev, const char *fmt, ...) {
    static const char *const tags[] = {"E", "W", "I", "V"};
    char msg[2048];
    va_list ap;
    if (!kn_log_enabled(sev))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&kn_log_lock);
    if (kn_log_sink)
        kn_log_sink(kn_log_user, sev, msg);
    else
        fprintf(stderr, "[kiln %s] %s\n", tags[(unsigned)sev & 3u], msg);
    pthread_mutex_unlock(&kn_log_lock);
}
