/* test_threads.c - the CPU backend's default thread count: KILN_NUM_THREADS
 * when set, else the CPUs of the process's affinity mask (cut to a cgroup
 * CPU quota, which this test cannot set). Each check runs in a forked child,
 * since the count is probed once a process. */
#define _GNU_SOURCE
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

#include "backends/backend.h"

/* The child's kb_cpu_default_threads(), after `setup` ran in it; -1 when the
 * child could not report. */
static int child_threads(void (*setup)(void)) {
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        setup();
        int n = kb_cpu_default_threads();
        ssize_t w = write(fds[1], &n, sizeof n);
        _exit(w == (ssize_t)sizeof n ? 0 : 1);
    }
    close(fds[1]);
    int n = -1, status = 0;
    if (pid < 0 || read(fds[0], &n, sizeof n) != (ssize_t)sizeof n)
        n = -1;
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, &status, 0);
    return n;
}

static void env_three(void) { setenv("KILN_NUM_THREADS", "3", 1); }
static void env_none(void) { unsetenv("KILN_NUM_THREADS"); }
static void env_bad(void) { setenv("KILN_NUM_THREADS", "zero", 1); }

/* Pinned to the first CPU of the current mask. */
static void one_cpu(void) {
    unsetenv("KILN_NUM_THREADS");
    cpu_set_t set, one;
    CPU_ZERO(&one);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            CPU_SET(c, &one);
            break;
        }
    sched_setaffinity(0, sizeof one, &one);
}

int main(void) {
    cpu_set_t set;
    KT_CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    int mine = CPU_COUNT(&set);
    KT_CHECK(child_threads(env_three) == 3);
    int dflt = child_threads(env_none);
    KT_CHECK(dflt >= 1 && dflt <= mine); /* a cgroup quota may cut it further */
    KT_CHECK(child_threads(env_bad) == dflt);
    KT_CHECK(child_threads(one_cpu) == 1);
    printf("default threads %d (affinity %d CPUs, %ld online)\n", dflt, mine,
           sysconf(_SC_NPROCESSORS_ONLN));
    return kt_finish();
}
