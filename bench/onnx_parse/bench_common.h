/* bench_common.h - clock, peak RSS and a byte checksum shared by the two
 * ONNX parse benchmark programs. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long peak_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Read every byte once (what a builder does when it copies weights out). */
static uint64_t checksum(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t s = 0, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, b + i, 8);
        s += w;
    }
    for (; i < n; i++)
        s += b[i];
    return s;
}

/* Current resident anonymous (heap) and file-backed (mapped file) KiB. */
static void rss_split(long *anon_kb, long *file_kb) {
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    *anon_kb = *file_kb = -1;
    while (f && fgets(line, sizeof line, f)) {
        sscanf(line, "RssAnon: %ld", anon_kb);
        sscanf(line, "RssFile: %ld", file_kb);
    }
    if (f)
        fclose(f);
}

static void report(const char *who, double parse_ms, double touch_ms, long rss_parse_kb,
                   size_t n_init, size_t bytes, uint64_t sum, int touched) {
    long anon, file;
    rss_split(&anon, &file);
    printf("%s: parse %.1f ms, peak RSS after parse %ld KiB; %zu initializers, %zu weight bytes",
           who, parse_ms, rss_parse_kb, n_init, bytes);
    if (touched)
        printf("; read all weights %.1f ms (sum %016llx), peak RSS %ld KiB", touch_ms,
               (unsigned long long)sum, peak_rss_kb());
    printf("; now RssAnon %ld KiB, RssFile %ld KiB\n", anon, file);
}

#endif
