/* omp_wait.c - the kiln command's OpenMP wait policy: idle worker threads
 * spin briefly, then sleep, instead of spinning for milliseconds on cores
 * that other work needs (docs/decisions.md, "CPU threads on a shared
 * machine" and "CPU threads: kiln's own pool"). kiln's own kernels run on
 * kiln's pool, which waits that way by itself; this is for oneDNN's
 * tactics, which run on libgomp.
 *
 * GNU OpenMP reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its own
 * initializer, which runs when libkiln.so (through oneDNN) brings it in:
 * before main, and before any initializer of libkiln.so itself. Not even the executable's .preinit_array can set them:
 * it runs before libc's initializer, which puts back the environment the
 * process started with. So when the user set neither, the command sets
 * GOMP_SPINCOUNT and executes itself again, once (the variable is then set,
 * so it does not loop). A program that embeds libkiln.so sets the same
 * variable in its environment. */
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

/* libgomp spins this many pause loops at a barrier or between parallel
 * regions before it sleeps on a futex: tens of microseconds, about what a
 * sleep and a wake-up cost, so waiting never costs much more than twice the
 * better choice made in hindsight (libgomp's own default is 300000, several
 * milliseconds). */
#define KILN_GOMP_SPINCOUNT "1000"

void cli_omp_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return;
    if (setenv("GOMP_SPINCOUNT", KILN_GOMP_SPINCOUNT, 0) != 0)
        return;
    execv("/proc/self/exe", argv);
    /* no /proc, or the exec was refused: carry on under libgomp's default */
}
