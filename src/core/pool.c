/* pool.c - kiln's CPU thread pool: kn_parallel_for splits a loop over
 * worker threads that wait for work by spinning briefly and then sleeping on
 * a condition variable, so idle threads leave busy cores to others. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/core.h"

/* Workers a pool may have, and pools at once (application threads running
 * kiln concurrently); past either bound a loop runs with fewer threads. */
#define KN_POOL_MAX_WORKERS 254
#define KN_POOL_MAX 16
/* Pause loops before a waiting thread sleeps: tens of microseconds, about
 * what a sleep and a wake-up cost, so a wait never costs much more than
 * twice the better of spinning and sleeping chosen in hindsight. */
#define KN_POOL_DEFAULT_SPIN 1000
/* Static loops are cut into this many blocks a thread, so that a thread
 * preempted in the middle of its share holds up only a quarter of it. */
#define KN_POOL_STATIC_SPLIT 4
#define KN_POOL_LOW 0xffffffu /* the low 24 bits of gen, limit and claim */

typedef struct kn_pool kn_pool;

typedef struct kn_worker {
    kn_pool *pool;
    int tid; /* 1.. */
    uint64_t start_gen; /* gen when started: jobs after it are the worker's */
    pthread_t th;
} kn_worker;

struct kn_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers sleep here for the next job */
    pthread_cond_t done; /* the caller sleeps here for the last worker */
    int sleeping;        /* workers in pthread_cond_wait(wake); under mu */
    bool caller_sleeping; /* under mu */
    bool stop;            /* under mu */
    bool busy;            /* taken by a caller; under g_reg_mu */
    int n_workers;
    kn_worker workers[KN_POOL_MAX_WORKERS];
    /* The job, split into nblocks blocks that threads claim in turn, so the
     * join waits only for blocks, never for a worker that has not woken up
     * (on a busy machine a descheduled worker's share is taken by the
     * others). Each word carries the job number in its top 40 bits:
     *   gen    = seq << 24 | threads   (wakes workers; tid >= threads skip)
     *   limit  = seq << 24 | nblocks
     *   claim  = seq << 24 | next block to hand out
     * A worker reads fn, ctx, n and grain only after it claimed a block of
     * the job (a CAS on claim), and the caller rewrites them only once every
     * block of the job has finished, so a late worker never sees a half
     * written job or runs a block of one that is over. */
    _Atomic uint64_t gen, limit, claim;
    _Atomic uint64_t finished; /* blocks of this job done */
    uint64_t seq;              /* the caller's job count */
    kn_range_fn fn;
    void *ctx;
    int64_t n, grain; /* grain 0: nblocks equal static blocks */
};

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static kn_pool *g_pools[KN_POOL_MAX];
static int g_n_pools;
static _Atomic int g_started;
static int g_spin = -1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local int t_in_loop; /* this thread runs a loop's iterations */
static _Thread_local kn_pool *t_last; /* the pool this thread used last */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A child after fork has none of the parent's workers: forget the pools
 * (their memory is lost; the child gets new ones). */
static void after_fork_child(void) {
    pthread_mutex_init(&g_reg_mu, NULL);
    g_n_pools = 0;
    t_last = NULL;
}

static void pool_setup(void) {
    const char *s = getenv("KILN_SPIN_COUNT");
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : -1;
    g_spin = s && end != s && *end == 0 && v >= 0 && v <= 100000000 ? (int)v : KN_POOL_DEFAULT_SPIN;
    pthread_atfork(NULL, NULL, after_fork_child);
}

int kn_pool_threads_started(void) { return atomic_load(&g_started); }

/* Iterations of [0, n) that thread tid of nth takes under the static schedule. */
static void static_block(int64_t n, int nth, int tid, int64_t *lo, int64_t *hi) {
    int64_t q = n / nth, r = n % nth;
    *lo = q * tid + (tid < r ? tid : r);
    *hi = *lo + q + (tid < r ? 1 : 0);
}

/* Claim and run blocks of job `seq` until none is left; signal the caller
 * when this thread finished the job's last block. */
static void run_blocks(kn_pool *p, uint64_t seq, int tid) {
    for (;;) {
        uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
        if (c >> 24 != seq)
            return; /* the job is over (all claimed, another published) */
        uint64_t lim = atomic_load_explicit(&p->limit, memory_order_acquire);
        if (lim >> 24 != seq || (c & KN_POOL_LOW) >= (lim & KN_POOL_LOW))
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        int64_t b = (int64_t)(c & KN_POOL_LOW), nb = (int64_t)(lim & KN_POOL_LOW), lo, hi;
        if (p->grain > 0) {
            lo = b * p->grain;
            hi = p->n - lo < p->grain ? p->n : lo + p->grain;
        } else {
            static_block(p->n, (int)nb, (int)b, &lo, &hi);
        }
        if (lo < hi)
            p->fn(p->ctx, lo, hi, tid);
        if (atomic_fetch_add_explicit(&p->finished, 1, memory_order_acq_rel) + 1 == (uint64_t)nb) {
            pthread_mutex_lock(&p->mu);
            if (p->caller_sleeping)
                pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker_main(void *arg) {
    kn_worker *w = arg;
    kn_pool *p = w->pool;
    uint64_t seen = w->start_gen;
    t_in_loop = 1; /* loops started from inside an iteration run serially */
    for (;;) {
        uint64_t g = seen;
        for (int i = 0; i < g_spin; i++) {
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen)
                break;
            cpu_relax();
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            p->sleeping++;
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !p->stop)
                pthread_cond_wait(&p->wake, &p->mu);
            p->sleeping--;
            bool stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop)
                return NULL;
        }
        seen = g;
        if (w->tid >= (int)(g & KN_POOL_LOW))
            continue; /* a smaller job than this pool: nothing for this one */
        run_blocks(p, g >> 24, w->tid);
    }
}

static kn_pool *pool_new(void) {
    kn_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->wake, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    return p;
}

/* Start workers until the pool has `want` (or thread creation fails). Only
 * the pool's current caller does this, between jobs. */
static void pool_grow(kn_pool *p, int want) {
    if (want > KN_POOL_MAX_WORKERS)
        want = KN_POOL_MAX_WORKERS;
    while (p->n_workers < want) {
        kn_worker *w = &p->workers[p->n_workers];
        w->pool = p;
        w->tid = p->n_workers + 1;
        w->start_gen = atomic_load_explicit(&p->gen, memory_order_relaxed);
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0)
            return;
        /* kernels keep their big buffers in the workspace, not on the stack */
        pthread_attr_setstacksize(&attr, 8u << 20);
        int rc = pthread_create(&w->th, &attr, worker_main, w);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            return;
        p->n_workers++;
        atomic_fetch_add(&g_started, 1);
    }
}

/* An idle pool for this caller: the one it used last when free, else any
 * free one, else a new one; NULL when KN_POOL_MAX are all busy. */
static kn_pool *pool_take(void) {
    pthread_mutex_lock(&g_reg_mu);
    kn_pool *p = NULL;
    if (t_last && !t_last->busy)
        p = t_last;
    for (int i = 0; !p && i < g_n_pools; i++)
        if (!g_pools[i]->busy)
            p = g_pools[i];
    if (!p && g_n_pools < KN_POOL_MAX && (p = pool_new()) != NULL)
        g_pools[g_n_pools++] = p;
    if (p)
        p->busy = true;
    pthread_mutex_unlock(&g_reg_mu);
    t_last = p ? p : t_last;
    return p;
}

static void pool_give(kn_pool *p) {
    pthread_mutex_lock(&g_reg_mu);
    p->busy = false;
    pthread_mutex_unlock(&g_reg_mu);
}

/* In the caller alone. Like an OpenMP region of one thread, this does not
 * count as a running loop: a loop inside it may still use the pool. */
static void run_serial(int64_t n, kn_range_fn fn, void *ctx) { fn(ctx, 0, n, 0); }

void kn_parallel_for(int threads, int64_t n, int64_t grain, kn_range_fn fn, void *ctx) {
    if (n <= 0)
        return;
    pthread_once(&g_once, pool_setup);
    int64_t useful = grain > 0 ? (n + grain - 1) / grain : n;
    if (threads > useful)
        threads = (int)useful;
    if (threads <= 1 || t_in_loop) {
        run_serial(n, fn, ctx);
        return;
    }
    kn_pool *p = pool_take();
    if (!p) {
        run_serial(n, fn, ctx);
        return;
    }
    pool_grow(p, threads - 1);
    if (threads > p->n_workers + 1)
        threads = p->n_workers + 1;
    if (threads <= 1) {
        pool_give(p);
        run_serial(n, fn, ctx);
        return;
    }
    /* blocks: a few a thread for static loops, one a grain for dynamic
     * ones (grains doubled until the count fits the 24 bits it travels in) */
    int64_t nblocks;
    if (grain > 0) {
        while ((n + grain - 1) / grain > (int64_t)KN_POOL_LOW)
            grain *= 2;
        nblocks = (n + grain - 1) / grain;
    } else {
        nblocks = (int64_t)threads * KN_POOL_STATIC_SPLIT;
        if (nblocks > n)
            nblocks = n;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    p->seq = (p->seq + 1) & (((uint64_t)1 << 40) - 1);
    uint64_t tag = p->seq << 24;
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    atomic_store_explicit(&p->limit, tag | (uint64_t)nblocks, memory_order_release);
    atomic_store_explicit(&p->claim, tag, memory_order_release);
    atomic_store_explicit(&p->gen, tag | (uint64_t)threads, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleeping)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    t_in_loop = 1;
    run_blocks(p, p->seq, 0);
    t_in_loop = 0;

    /* the caller took blocks until none was left; the last ones may still
     * be running on workers */
    bool done = false;
    for (int i = 0; i < g_spin && !done; i++) {
        done = atomic_load_explicit(&p->finished, memory_order_acquire) == (uint64_t)nblocks;
        if (!done)
            cpu_relax();
    }
    if (!done) {
        pthread_mutex_lock(&p->mu);
        p->caller_sleeping = true;
        while (atomic_load_explicit(&p->finished, memory_order_acquire) != (uint64_t)nblocks)
            pthread_cond_wait(&p->done, &p->mu);
        p->caller_sleeping = false;
        pthread_mutex_unlock(&p->mu);
    }
    pool_give(p);
}

/* When libkiln.so is unloaded (dlclose) its workers must not outlive their
 * code: wake them to stop and wait for them. At process exit the same. */
__attribute__((destructor)) static void pool_shutdown(void) {
    pthread_mutex_lock(&g_reg_mu);
    for (int i = 0; i < g_n_pools; i++) {
        kn_pool *p = g_pools[i];
        if (p->busy)
            continue; /* a loop still running at exit: leave it be */
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int j = 0; j < p->n_workers; j++)
            pthread_join(p->workers[j].th, NULL);
        p->n_workers = 0;
    }
    pthread_mutex_unlock(&g_reg_mu);
}
