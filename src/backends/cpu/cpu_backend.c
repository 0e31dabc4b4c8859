/* cpu_backend.c - the CPU backend's kernel registry, device description and
 * default thread count. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"

static bool same_domain(const char *a, const char *b) {
    if (!a || strcmp(a, "ai.onnx") == 0)
        a = "";
    if (!b || strcmp(b, "ai.onnx") == 0)
        b = "";
    return strcmp(a, b) == 0;
}

int kb_tables_kernels_for(const kb_table *tables, size_t n_tables, const char *domain,
                          const char *op_type, const kb_kernel **out, int cap) {
    int n = 0;
    /* reference kernels first */
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < n_tables; k++)
            for (size_t i = 0; i < *tables[k].n; i++) {
                const kb_kernel *kk = &tables[k].t[i];
                if (strcmp(kk->op_type, op_type) != 0 || !same_domain(kk->domain, domain))
                    continue;
                if ((strcmp(kk->tactic, "ref") == 0) != (pass == 0))
                    continue;
                if (n < cap)
                    out[n] = kk;
                n++;
            }
    return n;
}

const kb_kernel *kb_tables_find(const kb_table *tables, size_t n_tables, const char *domain,
                                const char *op_type, const char *tactic) {
    for (size_t k = 0; k < n_tables; k++)
        for (size_t i = 0; i < *tables[k].n; i++) {
            const kb_kernel *kk = &tables[k].t[i];
            if (strcmp(kk->op_type, op_type) == 0 && same_domain(kk->domain, domain) &&
                strcmp(kk->tactic, tactic) == 0)
                return kk;
        }
    return NULL;
}

/* k_int8.c: kiln::QConv, kiln::QMatMul (reference and oneDNN INT8 tactics) */
extern const kb_kernel kb_cpu_int8[];
extern const size_t kb_cpu_int8_count;

/* k_fp8.c: kiln::FP8Conv, kiln::FP8MatMul (reference) */
extern const kb_kernel kb_cpu_fp8[];
extern const size_t kb_cpu_fp8_count;

/* src/runtime/control.c: If, Loop, Scan (bodies run by the executor) */
extern const kb_kernel kb_cpu_control[];
extern const size_t kb_cpu_control_count;

/* k_train.c: ai.onnx.preview.training's Adagrad, Momentum, Adam */
extern const kb_kernel kb_cpu_train[];
extern const size_t kb_cpu_train_count;
extern const kb_kernel kb_cpu_seq[]; /* k_seq.c: sequences and optionals */
extern const size_t kb_cpu_seq_count;

/* k_string.c: Cast to and from string, StringNormalizer */
extern const kb_kernel kb_cpu_string[];
extern const size_t kb_cpu_string_count;

static const kb_table kb_tables[] = {
    {kb_cpu_elementwise, &kb_cpu_elementwise_count},
    {kb_cpu_tensor, &kb_cpu_tensor_count},
    {kb_cpu_nn, &kb_cpu_nn_count},
    {kb_cpu_fused, &kb_cpu_fused_count},
    {kb_cpu_spectral, &kb_cpu_spectral_count},
    {kb_cpu_tfidf, &kb_cpu_tfidf_count},
    {kb_cpu_fast, &kb_cpu_fast_count},
    {kb_cpu_int8, &kb_cpu_int8_count},
    {kb_cpu_fp8, &kb_cpu_fp8_count},
    {kb_cpu_control, &kb_cpu_control_count},
    {kb_cpu_train, &kb_cpu_train_count},
    {kb_cpu_seq, &kb_cpu_seq_count},
    {kb_cpu_string, &kb_cpu_string_count},
};

int kb_cpu_kernels_for(const char *domain, const char *op_type, const kb_kernel **out, int cap) {
    return kb_tables_kernels_for(kb_tables, KN_ARRAY_LEN(kb_tables), domain, op_type, out, cap);
}

const kb_kernel *kb_cpu_kernel_find(const char *domain, const char *op_type, const char *tactic) {
    return kb_tables_find(kb_tables, KN_ARRAY_LEN(kb_tables), domain, op_type, tactic);
}

/* ---- the default thread count: the CPUs this process may actually use ---- */

/* A cgroup CPU quota as a CPU count, rounded up; 0 when none is set or none
 * can be read. v2: cpu.max holds "QUOTA PERIOD" or "max PERIOD"; v1:
 * cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us. */
static int quota_cpus(long long quota, long long period) {
    if (quota <= 0 || period <= 0)
        return 0;
    long long n = (quota + period - 1) / period;
    return n > 4096 ? 4096 : (int)n;
}

static int read_cpu_max(const char *dir) {
    char path[512], buf[64];
    snprintf(path, sizeof path, "%s/cpu.max", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    long long quota = 0, period = 0;
    int n = 0;
    if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3) != 0)
        n = sscanf(buf, "%lld %lld", &quota, &period);
    fclose(f);
    return n == 2 ? quota_cpus(quota, period) : 0;
}

static long long read_ll(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    long long v = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lld", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

static int read_cfs(const char *dir) {
    return quota_cpus(read_ll(dir, "cpu.cfs_quota_us"), read_ll(dir, "cpu.cfs_period_us"));
}

static int min_nonzero(int a, int b) { return a == 0 ? b : b == 0 ? a : a < b ? a : b; }

/* The tightest quota of this process's own cgroup (as /proc/self/cgroup
 * names it under /sys/fs/cgroup) and of the hierarchy's root as this
 * process sees it (a container's namespace root). 0: no quota. */
static int cgroup_cpus(void) {
    int best = min_nonzero(read_cpu_max("/sys/fs/cgroup"), read_cfs("/sys/fs/cgroup/cpu"));
    best = min_nonzero(best, read_cfs("/sys/fs/cgroup/cpu,cpuacct"));
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return best;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/' || strstr(c2 + 1, ".."))
            continue;
        const char *ctrl = c1 + 1, *rel = c2 + 1;
        *c2 = 0;
        char dir[512];
        if (ctrl[0] == 0) { /* v2: "0::/path" */
            snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", rel);
            best = min_nonzero(best, read_cpu_max(dir));
        } else if (strstr(ctrl, "cpu") && (strcmp(ctrl, "cpu") == 0 || strstr(ctrl, "cpu,") ||
                                           strstr(ctrl, ",cpu"))) {
            snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%s", ctrl, rel);
            best = min_nonzero(best, read_cfs(dir));
            snprintf(dir, sizeof dir, "/sys/fs/cgroup/cpu%s", rel);
            best = min_nonzero(best, read_cfs(dir));
        }
    }
    fclose(f);
    return best;
}

/* CPUs in this process's affinity mask (taskset, cpusets, a container's
 * CPU list), not every CPU online. */
static int affinity_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int g_usable_cpus;
static pthread_once_t g_usable_once = PTHREAD_ONCE_INIT;

static void probe_usable_cpus(void) {
    int n = affinity_cpus();
    int q = cgroup_cpus();
    g_usable_cpus = q > 0 && q < n ? q : n;
}

static int usable_cpus(void) {
    pthread_once(&g_usable_once, probe_usable_cpus);
    return g_usable_cpus;
}

/* KILN_NUM_THREADS when set, else the CPUs the process may use: more
 * threads than that only queue behind each other and, at a barrier, wait
 * for a partner that is not running. Probed once a process. */
int kb_cpu_default_threads(void) {
    const char *env = getenv("KILN_NUM_THREADS");
    if (env && atoi(env) > 0)
        return atoi(env);
    return usable_cpus();
}

void kb_cpu_describe(char *target, size_t target_cap, char *libs, size_t libs_cap) {
#if defined(__x86_64__)
    const char *arch = "x86_64";
#elif defined(__aarch64__)
    const char *arch = "aarch64";
#else
    const char *arch = "unknown";
#endif
    snprintf(target, target_cap, "%s", arch);
    snprintf(libs, libs_cap, "%s", kb_cpu_library_versions());
}

/* ---- the CPU backend as a kb_backend: memory is host memory ---- */

static kiln_status cpu_describe(char *target, size_t tcap, char *libs, size_t lcap) {
    kb_cpu_describe(target, tcap, libs, lcap);
    return KILN_OK;
}

static kiln_status cpu_alloc(size_t bytes, void **out) {
    void *p = kn_aligned_alloc(bytes ? bytes : 1);
    if (!p)
        return KILN_ERR_OUT_OF_MEMORY;
    *out = p;
    return KILN_OK;
}

static kiln_status cpu_copy(void *dst, const void *src, size_t bytes, kb_copy_kind kind,
                            void *stream) {
    (void)kind;
    (void)stream;
    if (bytes)
        memmove(dst, src, bytes);
    return KILN_OK;
}

static kiln_status cpu_memset_zero(void *dst, size_t bytes, void *stream) {
    (void)stream;
    if (bytes)
        memset(dst, 0, bytes);
    return KILN_OK;
}

static kiln_status cpu_sync(void *stream) {
    (void)stream;
    return KILN_OK;
}

/* The process's CPU time (every thread), in milliseconds. */
static double cpu_process_ms(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0)
        return kn_now_ms();
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* A tactic's time. At one thread it is the process's CPU time, not the
 * wall clock: on a shared machine other processes' slices fall into a
 * wall-clock interval and make the choice between two close tactics a
 * matter of load, while a one-thread kernel's CPU time is its own work.
 * With more threads the wall clock stays (CPU time would favour a tactic
 * that leaves threads idle). */
static kiln_status cpu_time_kernel(const kb_kernel *k, const kb_run *r, int reps, double *ms) {
    double times[16];
    int n = 0;
    if (reps > 16)
        reps = 16;
    double (*clock_ms)(void) = r->threads <= 1 ? cpu_process_ms : kn_now_ms;
    KN_TRY(k->run(r)); /* warm-up */
    for (int i = 0; i < reps; i++) {
        double t0 = clock_ms();
        KN_TRY(k->run(r));
        times[n++] = clock_ms() - t0;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            double t = times[j];
            times[j] = times[j - 1];
            times[j - 1] = t;
        }
    *ms = n ? times[n / 2] : 0;
    return KILN_OK;
}

const kb_backend kb_cpu_backend = {
    .name = "cpu",
    .describe = cpu_describe,
    .kernels_for = kb_cpu_kernels_for,
    .kernel_find = kb_cpu_kernel_find,
    .alloc = cpu_alloc,
    .free = kn_aligned_free,
    .copy = cpu_copy,
    .memset_zero = cpu_memset_zero,
    .sync = cpu_sync,
    .time_kernel = cpu_time_kernel,
    /* no streams, graphs, device pointers, pinned memory or events */
};

const kb_backend *kb_test_backend = NULL;

const kb_backend *kb_backend_get(const char *name) {
    if (!name || strcmp(name, "cpu") == 0)
        return &kb_cpu_backend;
    if (kb_test_backend && strcmp(name, kb_test_backend->name) == 0)
        return kb_test_backend;
#ifdef KILN_HAVE_CUDA
    if (strcmp(name, "cuda") == 0)
        return &kb_cuda_backend;
#endif
    return NULL;
}
