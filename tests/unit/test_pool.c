/* test_pool.c - kiln's CPU thread pool (src/core/pool.c): every iteration
 * runs exactly once under both schedules and any thread count, thread ids
 * stay below the count, a loop started inside a loop runs serially, and
 * application threads calling at once each get correct results. */
#include <pthread.h>
#include <stdatomic.h>

#include "test.h"

#include "core/core.h"

typedef struct count_job {
    _Atomic int *hits; /* per iteration */
    int threads;
    _Atomic int bad_tid;
    _Atomic int calls;
} count_job;

static void count_fn(void *vc, int64_t lo, int64_t hi, int tid) {
    count_job *c = vc;
    if (tid < 0 || tid >= c->threads)
        atomic_fetch_add(&c->bad_tid, 1);
    atomic_fetch_add(&c->calls, 1);
    for (int64_t i = lo; i < hi; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

/* Run [0, n) on `threads` with `grain`; true when each iteration ran once. */
static bool exactly_once(int threads, int64_t n, int64_t grain) {
    _Atomic int *hits = calloc((size_t)(n ? n : 1), sizeof *hits);
    count_job c = {hits, threads < 1 ? 1 : threads, 0, 0};
    kn_parallel_for(threads, n, grain, count_fn, &c);
    bool ok = atomic_load(&c.bad_tid) == 0;
    for (int64_t i = 0; i < n; i++)
        ok = ok && atomic_load(&hits[i]) == 1;
    if (!ok)
        fprintf(stderr, "threads %d n %lld grain %lld: wrong\n", threads, (long long)n,
                (long long)grain);
    free(hits);
    return ok;
}

/* ---- nested loops: the inner loop runs in its caller, with tid 0 ---- */
typedef struct nest_job {
    int64_t inner_n;
    _Atomic int64_t sum;
    _Atomic int inner_bad_tid;
} nest_job;

static void inner_fn(void *vc, int64_t lo, int64_t hi, int tid) {
    nest_job *c = vc;
    if (tid != 0)
        atomic_fetch_add(&c->inner_bad_tid, 1);
    for (int64_t i = lo; i < hi; i++)
        atomic_fetch_add(&c->sum, i);
}

static void outer_fn(void *vc, int64_t lo, int64_t hi, int tid) {
    nest_job *c = vc;
    for (int64_t i = lo; i < hi; i++)
        kn_parallel_for(4, c->inner_n, 0, inner_fn, c);
}

/* ---- application threads calling at once ---- */
typedef struct app_arg {
    uint64_t seed;
    int ok;
} app_arg;

typedef struct sum_job {
    const int32_t *v;
    int64_t *part; /* per thread */
} sum_job;

static void sum_fn(void *vc, int64_t lo, int64_t hi, int tid) {
    sum_job *c = vc;
    int64_t s = 0;
    for (int64_t i = lo; i < hi; i++)
        s += c->v[i];
    c->part[tid] += s;
}

static void *app_main(void *varg) {
    app_arg *a = varg;
    uint64_t x = a->seed;
    enum { N = 5000 };
    int32_t *v = malloc(N * sizeof *v);
    int64_t part[8];
    a->ok = v != NULL;
    for (int round = 0; v && round < 300; round++) {
        int64_t n = 0, want = 0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        n = (int64_t)(x % N) + 1;
        for (int64_t i = 0; i < n; i++) {
            v[i] = (int32_t)((x >> (i % 32)) & 1023);
            want += v[i];
        }
        int threads = 1 + (int)(x % 8);
        memset(part, 0, sizeof part);
        sum_job c = {v, part};
        kn_parallel_for(threads, n, round % 2 ? 7 : 0, sum_fn, &c);
        int64_t got = 0;
        for (int t = 0; t < 8; t++)
            got += part[t];
        if (got != want)
            a->ok = 0;
    }
    free(v);
    return NULL;
}

int main(void) {
    uint64_t seed = kt_seed("test_pool", 28);
    /* sizes around the thread counts, empty and one-iteration loops */
    const int threads[] = {1, 2, 3, 4, 7, 16, 64};
    const int64_t sizes[] = {0, 1, 2, 3, 5, 63, 64, 65, 1000, 100003};
    const int64_t grains[] = {0, 1, 3, 64};
    for (size_t t = 0; t < KN_ARRAY_LEN(threads); t++)
        for (size_t s = 0; s < KN_ARRAY_LEN(sizes); s++)
            for (size_t g = 0; g < KN_ARRAY_LEN(grains); g++)
                KT_CHECK(exactly_once(threads[t], sizes[s], grains[g]));
    /* a static loop is cut into a few contiguous blocks a thread (4) */
    {
        _Atomic int hits[100] = {0};
        count_job c = {hits, 4, 0, 0};
        kn_parallel_for(4, 100, 0, count_fn, &c);
        KT_CHECK(atomic_load(&c.calls) == 16);
        count_job d = {hits, 4, 0, 0};
        kn_parallel_for(4, 100, 25, count_fn, &d); /* dynamic: one call a grain */
        KT_CHECK(atomic_load(&d.calls) == 4);
    }
    /* many loops back to back (workers go to sleep and wake between some) */
    for (int i = 0; i < 2000; i++)
        if (!exactly_once(2 + i % 5, 1 + i % 97, i % 3))
            KT_CHECK(0);
    KT_CHECK(1);
    /* more threads than the machine has, then fewer */
    KT_CHECK(exactly_once(200, 5000, 0));
    KT_CHECK(exactly_once(3, 5000, 0));
    /* nested: 8 outer iterations each running a whole inner loop */
    {
        nest_job c = {1000, 0, 0};
        kn_parallel_for(4, 8, 0, outer_fn, &c);
        KT_CHECK(atomic_load(&c.sum) == 8 * (999 * 1000 / 2));
        KT_CHECK(atomic_load(&c.inner_bad_tid) == 0);
    }
    /* 12 application threads at once, more than some pools' worth */
    {
        enum { APPS = 12 };
        pthread_t th[APPS];
        app_arg args[APPS];
        for (int i = 0; i < APPS; i++) {
            args[i].seed = seed * 2654435761u + (uint64_t)i + 1;
            args[i].ok = 0;
            KT_CHECK(pthread_create(&th[i], NULL, app_main, &args[i]) == 0);
        }
        for (int i = 0; i < APPS; i++) {
            pthread_join(th[i], NULL);
            KT_CHECK(args[i].ok);
        }
    }
    printf("pool threads started: %d\n", kn_pool_threads_started());
    KT_CHECK(kn_pool_threads_started() > 0);
    return kt_finish();
}
