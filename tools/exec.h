/* exec.h - the pieces `kiln exec` shares between its flag handling
 * (cmd_exec.c) and its timed inference loop (exec_run.c). */
#ifndef KILN_EXEC_H
#define KILN_EXEC_H

#include "cli.h"

#define EXEC_MAX_PERCENTILES 8

/* One I/O buffer of the run. */
typedef struct io_buf {
    const char *name; /* borrowed from the engine */
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    void *data;       /* host copy of the values (owned; pinned for a GPU engine) */
    void *dev;        /* inputs: engine memory bound to the first context (owned) */
    const cli_shape *values; /* a shape-tensor input: its values (borrowed) */
    size_t bytes;
} io_buf;

/* How the timed runs go, with trtexec's meanings. */
typedef struct exec_timing {
    long long iterations;     /* at least this many a stream */
    double warmup_ms;         /* warm-up before timing, a stream at a time */
    double duration_s;        /* and for at least this long */
    double idle_ms;           /* --idleTime: sleep between two iterations */
    int streams;              /* --infStreams: contexts run at once, a thread each */
    int avg_runs;             /* --avgRuns: iterations a reported average covers */
    bool avg_runs_given;      /* print the averages without --verbose */
    bool transfers;           /* copy inputs in and outputs out every iteration */
    bool spin_wait;           /* --useSpinWait: poll instead of sleeping in a wait */
    bool profile;             /* per-layer times during the timed runs (first stream) */
    int n_percentiles;
    double percentiles[EXEC_MAX_PERCENTILES];
    const char *export_times; /* --exportTimes: per-iteration times as JSON */
    /* for the contexts of the other streams, set as the first one is */
    int profile_index, graphs, threads;
} exec_timing;

/* Warm up, then run the timed iterations on t->streams contexts (the first
 * is ctx, already set up with its inputs ins[0..n_in)), enqueueing each
 * stream one iteration ahead of the one it waits for, and print trtexec's
 * performance summary. outs[0..n_out) name the outputs. Prints errors. */
bool exec_timed_runs(const exec_timing *t, kiln_engine *eng, kiln_context *ctx, const io_buf *ins,
                     int n_in, const io_buf *outs, int n_out);

#endif
