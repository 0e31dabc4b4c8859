/* kiln_omp_wait.c - libkiln_omp_wait.so: bounds libgomp's spin for oneDNN's
 * threads in any program that links libkiln.so, before libgomp reads it.
 *
 * libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, in its ELF
 * initializer; by default an idle thread spins ~300000 pause loops
 * (milliseconds) on cores other work needs. This object has no dependency
 * of its own and is listed in libkiln.so's DT_NEEDED after libgomp; the
 * loader initializes later-listed siblings first, so this initializer runs
 * before libgomp's (docs/decisions.md, "oneDNN's libgomp spin in embedding
 * programs"). It sets GOMP_SPINCOUNT to 1000 (KILN_SPIN_COUNT's default,
 * src/core/pool.c) only when the user set neither variable. Built only
 * when oneDNN (threaded by OpenMP) is linked. */
#include <stdlib.h>

/* 1 when this initializer set GOMP_SPINCOUNT, 0 when the user had set
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT (tests/unit/test_omp_wait.c reads it). */
__attribute__((visibility("default"))) int kiln_omp_wait_set;

__attribute__((constructor)) static void kiln_omp_wait_init(void) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return;
    if (setenv("GOMP_SPINCOUNT", "1000", 0) == 0)
        kiln_omp_wait_set = 1;
}
