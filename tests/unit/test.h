/* test.h - a minimal test harness for kiln's C tests: checks that report
 * file and line, and a closing "N passed, N failed" line. */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Print the closing line and return the exit status for main. */
static inline int kt_finish(void) {
    printf("%d passed, %d failed\n", kt_pass, kt_fail);
    return kt_fail ? 1 : 0;
}

#endif
