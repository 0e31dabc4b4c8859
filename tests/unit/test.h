/* test.h - a minimal test harness for kiln's C tests: checks that report
 * file and line, and a closing "N passed, N failed" line. */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"

static int kt_pass, kt_fail;

#define KT_CHECK(cond)                                                              \
    do {                                                                            \
        if (cond) {                                                                 \
            kt_pass++;                                                              \
        } else {                                                                    \
            kt_fail++;                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

/* A kiln call that must succeed; prints the last error when it does not. */
#define KT_OK(call)                                                                  \
    do {                                                                             \
        kiln_status kt_st_ = (call);                                                 \
        if (kt_st_ == KILN_OK) {                                                     \
            kt_pass++;                                                               \
        } else {                                                                     \
            kt_fail++;                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call, \
                    kiln_status_name(kt_st_), kiln_last_error());                    \
        }                                                                            \
    } while (0)

/* A kiln call that must fail with `status` and a message containing `text`. */
#define KT_FAILS(call, status, text)                                                   \
    do {                                                                               \
        kiln_status kt_st_ = (call);                                                   \
        if (kt_st_ == (status) && strstr(kiln_last_error(), (text))) {                 \
            kt_pass++;                                                                 \
        } else {                                                                       \
            kt_fail++;                                                                 \
            fprintf(stderr, "%s:%d: %s: expected %s with \"%s\", got %s: %s\n", __FILE__, \
                    __LINE__, #call, kiln_status_name(status), (text),                  \
                    kiln_status_name(kt_st_), kiln_last_error());                      \
        }                                                                              \
    } while (0)

#define KT_NEAR(a, b, tol)                                                              \
    do {                                                                                \
        double kt_a_ = (a), kt_b_ = (b);                                                \
        if (fabs(kt_a_ - kt_b_) <= (tol)) {                                             \
            kt_pass++;                                                                  \
        } else {                                                                        \
            kt_fail++;                                                                  \
            fprintf(stderr, "%s:%d: %s = %g, expected %g (tol %g)\n", __FILE__, __LINE__, \
                    #a, kt_a_, kt_b_, (double)(tol));                                   \
        }                                                                               \
    } while (0)

/* The seed of a test's random inputs: KILN_TEST_SEED when set (a number,
 * or "time" for one from the clock), else the test's fixed default, so that
 * CI runs repeat. Printed either way, so that any run can be repeated. Never
 * 0 (a xorshift generator would stay at 0). */
static inline uint64_t kt_seed(const char *what, uint64_t fixed) {
    const char *env = getenv("KILN_TEST_SEED");
    uint64_t s = fixed;
    if (env && strcmp(env, "time") == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
    } else if (env && env[0]) {
        s = strtoull(env, NULL, 0);
    }
    if (s == 0)
        s = fixed;
    printf("%s: seed %llu (KILN_TEST_SEED=%llu repeats it)\n", what, (unsigned long long)s,
           (unsigned long long)s);
    return s;
}

/* Print the closing line and return the exit status for main. */
static inline int kt_finish(void) {
    printf("%d passed, %d failed\n", kt_pass, kt_fail);
    return kt_fail ? 1 : 0;
}

#endif
