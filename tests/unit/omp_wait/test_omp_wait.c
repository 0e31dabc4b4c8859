/* test_omp_wait.c - a program that links libkiln.so (not the kiln command)
 * and sets nothing gets libgomp's spin bounded by libkiln_omp_wait.so,
 * whose initializer must run before libgomp's reads the variables.
 *
 * Deterministic evidence, as libgomp saw it: the test runs itself as a
 * child with OMP_DISPLAY_ENV=verbose, which makes libgomp print, from its
 * initializer, the GOMP_SPINCOUNT it parsed. Cases:
 *   nothing set            -> libgomp shows GOMP_SPINCOUNT = '1000' and the
 *                             shim says it set the variable;
 *   OMP_WAIT_POLICY=active -> the shim leaves it alone: libgomp shows
 *                             another count (the check can fail);
 *   GOMP_SPINCOUNT=77      -> the user's value wins.
 * Skips (77) in a build without oneDNN, where no shim is built. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/kiln.h"

static int failures;

/* Run the child with the given variable (or none) and return whether
 * libgomp's display holds `want` (the GOMP_SPINCOUNT line). */
static void check(const char *self, const char *var, const char *want, int want_set) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose %s '%s' child 2>&1",
             var ? var : "", self);
    FILE *p = popen(cmd, "r");
    if (!p) {
        fprintf(stderr, "cannot run %s\n", cmd);
        failures++;
        return;
    }
    char line[512], seen[512] = "(no GOMP_SPINCOUNT line)";
    int set = -1;
    while (fgets(line, sizeof line, p)) {
        if (strstr(line, "GOMP_SPINCOUNT ="))
            snprintf(seen, sizeof seen, "%s", line);
        if (strncmp(line, "shim_set=", 9) == 0)
            set = atoi(line + 9);
    }
    int rc = pclose(p);
    int ok = rc == 0 && strstr(seen, want) != NULL && set == want_set;
    printf("%s %-24s libgomp saw: %s", ok ? "ok  " : "FAIL", var ? var : "(nothing set)", seen);
    if (!strchr(seen, '\n'))
        printf("\n");
    if (!ok) {
        fprintf(stderr, "  want %s and shim_set=%d; got shim_set=%d, rc %d\n", want, want_set, set, rc);
        failures++;
    }
}

int main(int argc, char **argv) {
    /* use libkiln so that the program needs it */
    const char *name = kiln_status_name(KILN_OK);
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        int *set = (int *)dlsym(RTLD_DEFAULT, "kiln_omp_wait_set");
        printf("shim_set=%d\n", set ? *set : -1);
        return name ? 0 : 1;
    }
#ifndef KILN_HAVE_OMP_WAIT_SHIM
    printf("built without oneDNN: no libkiln_omp_wait.so; skipped\n");
    return 77;
#else
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = 0;
    check(self, NULL, "GOMP_SPINCOUNT = '1000'", 1);
    check(self, "OMP_WAIT_POLICY=active", "GOMP_SPINCOUNT = '", 0);
    check(self, "GOMP_SPINCOUNT=77", "GOMP_SPINCOUNT = '77'", 0);
    /* the active policy must not show the bounded count */
    {
        char cmd[8400];
        snprintf(cmd, sizeof cmd,
                 "env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active OMP_DISPLAY_ENV=verbose '%s' child 2>&1 "
                 "| grep -q \"GOMP_SPINCOUNT = '1000'\"",
                 self);
        if (system(cmd) == 0) {
            fprintf(stderr, "FAIL OMP_WAIT_POLICY=active still shows GOMP_SPINCOUNT 1000\n");
            failures++;
        }
    }
    return failures ? 1 : 0;
#endif
}
