/* exec_run.c - the timed inference loop of `kiln exec`, measured as trtexec
 * measures: per iteration the host's enqueue time and, from events in the
 * stream, the input copies, the compute and the output copies; each stream
 * one iteration ahead of the one it waits for; several streams at once on
 * threads of their own. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec.h"

/* Iterations a stream keeps in flight: it enqueues iteration i + 1 before
 * it waits for iteration i. */
#define DEPTH 2

/* The four points an iteration's events mark in its stream. */
enum { EV_H2D, EV_COMPUTE, EV_D2H, EV_END, EV_N };

/* One timed iteration, in milliseconds from the start of timing: the host's
 * clock for the enqueue, the stream's events for the rest. */
typedef struct it_times {
    double enq_start, enq_end;
    double h2d_start, compute_start, compute_end, end;
    int stream;
} it_times;

typedef struct out_copy {
    size_t bytes;
    const void *src; /* the output in engine memory (the context's, stable across runs) */
    void *host;      /* where it is copied every iteration (owned) */
} out_copy;

/* A barrier whose count drops when a party never comes (a thread that
 * could not start), so that the others are not left waiting. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int need, arrived;
    unsigned generation;
} gate;

static void gate_open_if_full(gate *g) {
    if (g->arrived >= g->need) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    }
}

static void gate_wait(gate *g) {
    pthread_mutex_lock(&g->mu);
    unsigned gen = g->generation;
    g->arrived++;
    gate_open_if_full(g);
    while (gen == g->generation)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_drop(gate *g) {
    pthread_mutex_lock(&g->mu);
    g->need--;
    if (g->arrived > 0)
        gate_open_if_full(g);
    pthread_mutex_unlock(&g->mu);
}

/* One stream: its context, its inputs in engine memory, its events and the
 * iterations it timed. */
typedef struct stream_run {
    const exec_timing *t;
    kiln_engine *eng;
    kiln_context *ctx;
    bool own_ctx;
    int index;
    void *stream;
    const io_buf *ins, *out_io;
    int n_in;
    void **dev;         /* inputs in engine memory (the first stream's are ins[i].dev) */
    bool *copy_in;      /* inputs copied every iteration (not shape tensors, not empty) */
    out_copy *outs;
    int n_out;
    kiln_event *ev[DEPTH][EV_N];
    double host_ms[DEPTH][2]; /* the enqueue's start and end, from t0 */
    it_times *times;
    size_t n, cap;
    double end_ms;      /* host time when its last iteration was done, from t0 */
    bool ok;
    /* shared by all streams */
    gate *gate;
    struct stream_run *all; /* every stream, for the first to see whether all warmed up */
    kiln_event **base;  /* recorded by the first stream when timing starts */
    double *t0;         /* host ms when timing starts */
    bool *go;           /* set by the first stream: every stream is ready, the clock runs */
} stream_run;

static double now_ms(void) { return cli_now_s() * 1e3; }

static void sleep_ms(double ms) {
    if (ms <= 0)
        return;
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1e3);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
    nanosleep(&ts, NULL);
}

static bool fail(stream_run *s, const char *what, kiln_status st) {
    char msg[160];
    snprintf(msg, sizeof msg, "stream %d: %s", s->index, what);
    cli_kiln_error(msg, st);
    s->ok = false;
    return false;
}

/* The other streams' contexts: the same profile, input shapes, settings and
 * input values as the first, each in engine memory of its own. */
static bool stream_setup(stream_run *s, kiln_context *first) {
    const exec_timing *t = s->t;
    kiln_status st;
    s->dev = calloc((size_t)s->n_in + 1, sizeof *s->dev);
    s->copy_in = calloc((size_t)s->n_in + 1, sizeof *s->copy_in);
    if (!s->dev || !s->copy_in)
        return fail(s, "inputs", KILN_ERR_OUT_OF_MEMORY);
    for (int i = 0; i < s->n_in; i++)
        s->copy_in[i] =
            s->ins[i].bytes && !kiln_engine_tensor_is_shape_input(s->eng, s->ins[i].name);
    if (!first) {
        for (int i = 0; i < s->n_in; i++)
            s->dev[i] = s->ins[i].dev;
        return true;
    }
    if ((st = kiln_context_create(s->eng, &s->ctx)) != KILN_OK)
        return fail(s, "creating an execution context", st);
    s->own_ctx = true;
    if ((st = kiln_context_set_profile(s->ctx, t->profile_index)) != KILN_OK)
        return fail(s, "setting the profile", st);
    if (t->graphs >= 0)
        kiln_context_set_graphs(s->ctx, t->graphs);
    kiln_context_set_threads(s->ctx, t->threads);
    for (int i = 0; i < s->n_in; i++) {
        const io_buf *b = &s->ins[i];
        if ((st = kiln_context_set_input_shape(s->ctx, b->name, b->rank, b->dims)) != KILN_OK)
            return fail(s, b->name, st);
        if (kiln_engine_tensor_is_shape_input(s->eng, b->name)) {
            st = kiln_context_set_tensor_address(s->ctx, b->name, b->data);
        } else {
            size_t alloc = (b->bytes + 63) / 64 * 64 + 64;
            if ((st = kiln_engine_alloc(s->eng, alloc, &s->dev[i])) == KILN_OK && b->bytes)
                st = kiln_engine_copy(s->eng, s->dev[i], b->data, b->bytes, KILN_COPY_TO_DEVICE);
            if (st == KILN_OK)
                st = kiln_context_set_tensor_address(s->ctx, b->name, s->dev[i]);
        }
        if (st != KILN_OK)
            return fail(s, b->name, st);
    }
    return true;
}

/* Output sizes and addresses, known after a run; a pinned host buffer
 * each, for the copies out. */
static bool outputs_setup(stream_run *s) {
    const io_buf *outs = s->out_io;
    s->outs = calloc((size_t)s->n_out + 1, sizeof *s->outs);
    if (!s->outs)
        return fail(s, "outputs", KILN_ERR_OUT_OF_MEMORY);
    for (int i = 0; i < s->n_out; i++) {
        out_copy *o = &s->outs[i];
        int64_t dims[KILN_MAX_DIMS];
        int rank = kiln_context_tensor_shape(s->ctx, outs[i].name, dims);
        if (rank < 0)
            return fail(s, outs[i].name, KILN_ERR_SHAPE);
        o->bytes = cli_volume(rank, dims) * kiln_dtype_size(outs[i].dtype);
        o->src = kiln_context_tensor_address(s->ctx, outs[i].name);
        if (o->bytes && !o->src)
            return fail(s, outs[i].name, KILN_ERR_RUNTIME);
        kiln_status st = kiln_engine_alloc_host(s->eng, o->bytes + 1, &o->host);
        if (st != KILN_OK)
            return fail(s, outs[i].name, st);
    }
    return true;
}

static bool record(stream_run *s, kiln_event *ev) {
    kiln_status st = kiln_event_record(ev, s->stream);
    return st == KILN_OK || fail(s, "recording an event", st);
}

/* Enqueue one iteration in slot k: inputs in, the run, outputs out, with an
 * event before each part and one at the end. */
static bool issue(stream_run *s, int k) {
    kiln_status st;
    s->host_ms[k][0] = now_ms() - *s->t0;
    if (s->t->transfers && !record(s, s->ev[k][EV_H2D]))
        return false;
    if (s->t->transfers)
        for (int i = 0; i < s->n_in; i++)
            if (s->copy_in[i] && (st = kiln_engine_copy_async(s->eng, s->dev[i], s->ins[i].data,
                                                              s->ins[i].bytes, KILN_COPY_TO_DEVICE,
                                                              s->stream)) != KILN_OK)
                return fail(s, s->ins[i].name, st);
    if (!record(s, s->ev[k][EV_COMPUTE]))
        return false;
    if ((st = kiln_context_enqueue(s->ctx, s->stream)) != KILN_OK)
        return fail(s, "inference", st);
    if (!record(s, s->ev[k][EV_D2H]))
        return false;
    if (s->t->transfers && s->outs)
        for (int i = 0; i < s->n_out; i++) {
            out_copy *o = &s->outs[i];
            if (o->bytes && (st = kiln_engine_copy_async(s->eng, o->host, o->src, o->bytes,
                                                         KILN_COPY_TO_HOST, s->stream)) != KILN_OK)
                return fail(s, s->out_io[i].name, st);
        }
    if (s->t->transfers && !record(s, s->ev[k][EV_END]))
        return false;
    s->host_ms[k][1] = now_ms() - *s->t0;
    return true;
}

/* Without transfers an iteration's events are its compute's two ends. */
static kiln_event *slot_event(const stream_run *s, int k, int e) {
    if (!s->t->transfers)
        e = e == EV_H2D ? EV_COMPUTE : e == EV_END ? EV_D2H : e;
    return s->ev[k][e];
}

static bool wait_slot(stream_run *s, int k) {
    kiln_event *ev = slot_event(s, k, EV_END);
    if (s->t->spin_wait) {
        int d;
        while ((d = kiln_event_done(ev)) == 0)
            ;
        return d == 1 || fail(s, "waiting for an iteration", KILN_ERR_RUNTIME);
    }
    kiln_status st = kiln_event_synchronize(ev);
    return st == KILN_OK || fail(s, "waiting for an iteration", st);
}

/* Wait for the iteration in slot k and keep its times. */
static bool collect(stream_run *s, int k) {
    if (!wait_slot(s, k))
        return false;
    double at[EV_N];
    for (int e = 0; e < EV_N; e++) {
        kiln_status st = kiln_event_elapsed_ms(*s->base, slot_event(s, k, e), &at[e]);
        if (st != KILN_OK)
            return fail(s, "reading an event's time", st);
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        it_times *nt = realloc(s->times, cap * sizeof *nt);
        if (!nt)
            return fail(s, "timing trace", KILN_ERR_OUT_OF_MEMORY);
        s->times = nt;
        s->cap = cap;
    }
    it_times *it = &s->times[s->n++];
    it->enq_start = s->host_ms[k][0];
    it->enq_end = s->host_ms[k][1];
    it->h2d_start = at[EV_H2D];
    it->compute_start = at[EV_COMPUTE];
    it->compute_end = at[EV_D2H];
    it->end = at[EV_END];
    it->stream = s->index;
    return true;
}

/* Untimed iterations, each waited for, until warmup_ms have passed; at
 * least one, which also gives the outputs' sizes. */
static bool warm_up(stream_run *s) {
    double start = now_ms(), zero = 0;
    double *t0 = s->t0;
    s->t0 = &zero;
    int runs = 0;
    bool ok = true;
    do {
        ok = issue(s, 0) && wait_slot(s, 0);
        runs++;
    } while (ok && now_ms() - start < s->t->warmup_ms);
    s->t0 = t0;
    if (ok && s->index == 0)
        cli_info("Warm-up: %d iteration(s) in %.3f ms%s", runs, now_ms() - start,
                 s->t->streams > 1 ? " (first stream)" : "");
    return ok && outputs_setup(s);
}

/* Timed iterations: enqueue one ahead, wait for the older, until the
 * stream has run at least `iterations` and `duration_s` has passed. */
static bool timed(stream_run *s) {
    const exec_timing *t = s->t;
    long long issued = 0, done = 0;
    for (;;) {
        bool more = issued < t->iterations || now_ms() - *s->t0 < t->duration_s * 1e3;
        if (issued - done == DEPTH || (!more && done < issued)) {
            if (!collect(s, (int)(done % DEPTH)))
                return false;
            done++;
            continue;
        }
        if (!more)
            break;
        if (issued > 0)
            sleep_ms(t->idle_ms);
        if (!issue(s, (int)(issued % DEPTH)))
            return false;
        issued++;
    }
    s->end_ms = now_ms() - *s->t0;
    return true;
}

/* A stream from start to end. The barrier is passed twice whatever
 * happens, so that no stream waits for one that failed. */
static void *stream_main(void *arg) {
    stream_run *s = arg;
    bool ok = s->ok;
    if (ok) {
        kiln_status st = kiln_engine_stream_create(s->eng, &s->stream);
        ok = st == KILN_OK || fail(s, "creating a stream", st);
    }
    for (int k = 0; ok && k < DEPTH; k++)
        for (int e = 0; ok && e < EV_N; e++) {
            kiln_status st = kiln_event_create(s->eng, &s->ev[k][e]);
            ok = st == KILN_OK || fail(s, "creating an event", st);
        }
    ok = ok && warm_up(s);
    if (ok && s->index == 0 && s->t->profile) /* layer times of the timed runs only */
        kiln_context_set_profiling(s->ctx, 1);
    s->ok = ok;
    gate_wait(s->gate);
    if (s->index == 0) { /* every stream is idle: timing starts */
        bool all_ok = true;
        for (int k = 0; k < s->t->streams; k++)
            all_ok &= s->all[k].ok;
        kiln_status st = all_ok ? kiln_event_record(*s->base, NULL) : KILN_OK;
        if (all_ok && st == KILN_OK)
            st = kiln_event_synchronize(*s->base);
        if (st != KILN_OK)
            fail(s, "starting the clock", st);
        *s->t0 = now_ms();
        *s->go = all_ok && st == KILN_OK;
    }
    gate_wait(s->gate);
    if (s->ok && *s->go)
        s->ok = timed(s);
    return NULL;
}

static void stream_free(stream_run *s) {
    for (int k = 0; k < DEPTH; k++)
        for (int e = 0; e < EV_N; e++)
            kiln_event_destroy(s->ev[k][e]);
    kiln_engine_stream_destroy(s->eng, s->stream);
    if (s->outs)
        for (int i = 0; i < s->n_out; i++)
            kiln_engine_free_host(s->eng, s->outs[i].host);
    free(s->outs);
    if (s->own_ctx) {
        kiln_context_destroy(s->ctx);
        if (s->dev)
            for (int i = 0; i < s->n_in; i++)
                kiln_engine_free(s->eng, s->dev[i]);
    }
    free(s->dev);
    free(s->copy_in);
    free(s->times);
}

/* ---- the summary ---- */

/* Nearest-rank percentile of sorted values. */
static double percentile(const double *v, size_t n, double p) {
    if (n == 0)
        return 0;
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

typedef struct stats {
    double min, max, mean, median, sd, sum;
} stats;

/* Sorts v in place. */
static stats summarize(double *v, size_t n) {
    stats s = {0};
    if (!n)
        return s;
    qsort(v, n, sizeof *v, cli_cmp_double);
    for (size_t i = 0; i < n; i++)
        s.sum += v[i];
    s.mean = s.sum / (double)n;
    double q = 0;
    for (size_t i = 0; i < n; i++)
        q += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = sqrt(q / (double)n);
    s.min = v[0];
    s.max = v[n - 1];
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

/* The coefficient of variance of the bulk of sorted times v: the slowest
 * 1% left out, so that a few iterations the operating system preempted
 * (milliseconds, now and then, on a busy CPU) do not make a steady run look
 * unstable. *slow counts the iterations over twice the median. trtexec's
 * figure takes every iteration; on a GPU the two rarely differ. */
static double bulk_cov(const double *v, size_t n, double median, size_t *slow) {
    *slow = 0;
    for (size_t i = 0; i < n; i++)
        *slow += v[i] > 2 * median;
    size_t m = n - n / 100;
    if (m == 0)
        return 0;
    double sum = 0, q = 0;
    for (size_t i = 0; i < m; i++)
        sum += v[i];
    double mean = sum / (double)m;
    for (size_t i = 0; i < m; i++)
        q += (v[i] - mean) * (v[i] - mean);
    return mean > 0 ? sqrt(q / (double)m) / mean : 0;
}

static void print_stats(const exec_timing *t, const char *what, double *v, size_t n) {
    stats s = summarize(v, n);
    char pct[512];
    size_t used = 0;
    pct[0] = '\0';
    for (int i = 0; i < t->n_percentiles && used < sizeof pct; i++) {
        int w = snprintf(pct + used, sizeof pct - used, ", percentile(%g%%) = %.6g ms",
                         t->percentiles[i], percentile(v, n, t->percentiles[i]));
        if (w > 0)
            used += (size_t)w;
    }
    cli_info("%s: min = %.6g ms, max = %.6g ms, mean = %.6g ms, median = %.6g ms%s", what, s.min,
             s.max, s.mean, s.median, pct);
}

static double latency(const it_times *it) { return it->end - it->h2d_start; }

/* trtexec's running averages: one line a group of avg_runs iterations of a
 * stream, in the order they ran. */
static void print_averages(const exec_timing *t, const stream_run *runs, bool gpu) {
    void (*say)(const char *, ...) = t->avg_runs_given ? cli_info : cli_vlog;
    if (!t->avg_runs_given && !cli_verbose)
        return;
    for (int k = 0; k < t->streams; k++) {
        const stream_run *s = &runs[k];
        for (size_t g = 0; g + (size_t)t->avg_runs <= s->n; g += (size_t)t->avg_runs) {
            double comp = 0, host = 0, enq = 0;
            for (size_t i = g; i < g + (size_t)t->avg_runs; i++) {
                comp += s->times[i].compute_end - s->times[i].compute_start;
                host += latency(&s->times[i]);
                enq += s->times[i].enq_end - s->times[i].enq_start;
            }
            double r = t->avg_runs;
            char tag[32] = "";
            if (t->streams > 1)
                snprintf(tag, sizeof tag, "Stream %d: ", k);
            say("%sAverage on %d runs - %s latency: %.6g ms - Host latency: %.6g ms (enqueue %.6g "
                "ms)",
                tag, t->avg_runs, gpu ? "GPU" : "Compute", comp / r, host / r, enq / r);
        }
    }
}

/* --exportTimes: every iteration's times, trtexec's field names, in the
 * order they started. */
static int cmp_start(const void *a, const void *b) {
    const it_times *x = *(const it_times *const *)a, *y = *(const it_times *const *)b;
    return (x->enq_start > y->enq_start) - (x->enq_start < y->enq_start);
}

static bool export_times(const exec_timing *t, const stream_run *runs, size_t total) {
    const it_times **order = malloc((total + 1) * sizeof *order);
    if (!order) {
        cli_error("--exportTimes: out of memory");
        return false;
    }
    size_t n = 0;
    for (int k = 0; k < t->streams; k++)
        for (size_t i = 0; i < runs[k].n; i++)
            order[n++] = &runs[k].times[i];
    qsort(order, n, sizeof *order, cmp_start);
    FILE *f = fopen(t->export_times, "w");
    if (!f) {
        cli_error("--exportTimes: cannot create '%s'", t->export_times);
        free(order);
        return false;
    }
    fputs("[", f);
    for (size_t i = 0; i < n; i++) {
        const it_times *it = order[i];
        fprintf(f,
                "%s\n  { \"startEnqMs\" : %.6f, \"endEnqMs\" : %.6f, \"startH2dMs\" : %.6f, "
                "\"endH2dMs\" : %.6f, \"startComputeMs\" : %.6f, \"endComputeMs\" : %.6f, "
                "\"startD2hMs\" : %.6f, \"endD2hMs\" : %.6f, \"h2dMs\" : %.6f, \"computeMs\" : %.6f, "
                "\"d2hMs\" : %.6f, \"latencyMs\" : %.6f, \"stream\" : %d }",
                i ? "," : "", it->enq_start, it->enq_end, it->h2d_start, it->compute_start,
                it->compute_start, it->compute_end, it->compute_end, it->end,
                it->compute_start - it->h2d_start, it->compute_end - it->compute_start,
                it->end - it->compute_end, latency(it), it->stream);
    }
    fputs("\n]\n", f);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    free(order);
    if (!ok)
        cli_error("--exportTimes: cannot write '%s'", t->export_times);
    else
        cli_info("Wrote the times of %zu iterations to %s", n, t->export_times);
    return ok;
}

static bool summary(const exec_timing *t, kiln_engine *eng, const stream_run *runs) {
    size_t total = 0;
    double wall_ms = 0;
    for (int k = 0; k < t->streams; k++) {
        total += runs[k].n;
        if (runs[k].end_ms > wall_ms)
            wall_ms = runs[k].end_ms;
    }
    double *v = malloc((total + 1) * sizeof *v);
    if (!v) {
        cli_error("out of memory");
        return false;
    }
    bool gpu = strcmp(kiln_engine_backend(eng), "cpu") != 0;
    const char *compute_name = gpu ? "GPU Compute Time" : "Compute Time";
    print_averages(t, runs, gpu);
    cli_info("Timing trace has %zu queries over %.6g s", total, wall_ms * 1e-3);
    cli_info("=== Performance summary ===");
    cli_info("Throughput: %.6g qps", wall_ms > 0 ? (double)total / (wall_ms * 1e-3) : 0.0);
    /* one column of every stream's iterations at a time */
#define COLUMN(expr)                                              \
    do {                                                          \
        size_t n_ = 0;                                            \
        for (int k = 0; k < t->streams; k++)                      \
            for (size_t i = 0; i < runs[k].n; i++) {              \
                const it_times *it = &runs[k].times[i];           \
                v[n_++] = (expr);                                 \
            }                                                     \
    } while (0)
    COLUMN(latency(it));
    print_stats(t, "Latency", v, total);
    COLUMN(it->enq_end - it->enq_start);
    stats enq = summarize(v, total);
    print_stats(t, "Enqueue Time", v, total);
    COLUMN(it->compute_start - it->h2d_start);
    print_stats(t, "H2D Latency", v, total);
    COLUMN(it->compute_end - it->compute_start);
    stats comp = summarize(v, total);
    size_t slow = 0;
    double cov = bulk_cov(v, total, comp.median, &slow); /* v is sorted now */
    print_stats(t, compute_name, v, total);
    COLUMN(it->end - it->compute_end);
    print_stats(t, "D2H Latency", v, total);
#undef COLUMN
    cli_info("Total Host Walltime: %.6g s", wall_ms * 1e-3);
    cli_info("Total %s: %.6g s", compute_name, comp.sum * 1e-3);
    cli_info("Iterations: %zu%s", total, t->streams > 1 ? " (all streams)" : "");
    if (gpu && enq.mean > comp.mean)
        cli_warn("* Throughput may be bound by the enqueue time (mean %.4g ms) rather than the "
                 "GPU's compute time (mean %.4g ms): the GPU may be idle between runs.%s",
                 enq.mean, comp.mean,
                 t->graphs == 0 ? " Without --noCudaGraph the enqueue is one graph launch." : "");
    if (cov > (gpu ? 0.01 : 0.10))
        cli_warn("* %s is unstable, with coefficient of variance = %.3g%% (the slowest 1%% of "
                 "iterations left out). Possible causes: %s",
                 compute_name, 100 * cov,
                 gpu ? "clocks lowered under sustained load (power cap, heat), other streams or "
                       "processes on the device, per-layer profiling."
                     : "other work on the cores, frequency scaling, per-layer profiling.");
    if (slow)
        cli_info("%zu of %zu iterations took over twice the median %s (the slowest %.6g ms): the "
                 "%s or other work held them up; they move the mean and the maximum, hardly the "
                 "median.",
                 slow, total, compute_name, comp.max, gpu ? "host" : "operating system");
    cli_info("Explanations: Latency = H2D Latency + %s + D2H Latency of one iteration; Enqueue "
             "Time is the host's time to enqueue it; Throughput is iterations over the Total "
             "Host Walltime, from the first timed enqueue to the last iteration's end; each "
             "stream enqueues one iteration ahead.%s",
             compute_name, t->transfers ? "" : " --noDataTransfers: no H2D or D2H copies.");
    free(v);
    return !t->export_times || export_times(t, runs, total);
}

/* Every stream from setup to summary, with the shared state made. */
static bool run_streams(const exec_timing *t, kiln_engine *eng, kiln_context *ctx,
                        const io_buf *ins, int n_in, const io_buf *outs, int n_out,
                        stream_run *runs, pthread_t *threads, bool *started, kiln_event **base,
                        gate *g) {
    double t0 = 0;
    bool go = false, ok = true;
    for (int k = 0; k < t->streams; k++) {
        stream_run *s = &runs[k];
        s->t = t;
        s->eng = eng;
        s->ctx = ctx;
        s->index = k;
        s->ins = ins;
        s->n_in = n_in;
        s->out_io = outs;
        s->n_out = n_out;
        s->gate = g;
        s->all = runs;
        s->base = base;
        s->t0 = &t0;
        s->go = &go;
        s->ok = true;
        if (!stream_setup(s, k ? ctx : NULL))
            s->ok = false;
    }
    /* the first stream runs on this thread, the others on threads of their
       own; one that cannot start is dropped from the barrier, and its
       failure stops the timing */
    for (int k = 1; k < t->streams; k++) {
        started[k] = pthread_create(&threads[k], NULL, stream_main, &runs[k]) == 0;
        if (!started[k]) {
            runs[k].ok = false;
            cli_error("stream %d: cannot start a thread", k);
            gate_drop(g);
        }
    }
    stream_main(&runs[0]);
    for (int k = 1; k < t->streams; k++)
        if (started[k])
            pthread_join(threads[k], NULL);
    if (t->profile)
        kiln_context_set_profiling(ctx, 0);
    for (int k = 0; k < t->streams; k++)
        ok &= runs[k].ok;
    ok = ok && go && summary(t, eng, runs);
    for (int k = 0; k < t->streams; k++)
        stream_free(&runs[k]);
    return ok;
}

bool exec_timed_runs(const exec_timing *t, kiln_engine *eng, kiln_context *ctx, const io_buf *ins,
                     int n_in, const io_buf *outs, int n_out) {
    stream_run *runs = calloc((size_t)t->streams, sizeof *runs);
    pthread_t *threads = calloc((size_t)t->streams, sizeof *threads);
    bool *started = calloc((size_t)t->streams, sizeof *started);
    kiln_event *base = NULL;
    gate g = {.need = t->streams};
    bool ok = runs && threads && started;
    if (!ok)
        cli_error("out of memory");
    kiln_status st;
    if (ok && (st = kiln_event_create(eng, &base)) != KILN_OK) {
        cli_kiln_error("creating an event", st);
        ok = false;
    }
    bool mu = ok && pthread_mutex_init(&g.mu, NULL) == 0;
    bool cv = mu && pthread_cond_init(&g.cv, NULL) == 0;
    if (ok && !cv)
        cli_error("cannot make a thread barrier");
    ok = ok && cv &&
         run_streams(t, eng, ctx, ins, n_in, outs, n_out, runs, threads, started, &base, &g);
    if (cv)
        pthread_cond_destroy(&g.cv);
    if (mu)
        pthread_mutex_destroy(&g.mu);
    kiln_event_destroy(base);
    free(runs);
    free(threads);
    free(started);
    return ok;
}
