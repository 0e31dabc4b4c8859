/* embed_bench.c - a plain C program that embeds libkiln.so (no Python, no
 * wait-policy variables of its own): it builds an ONNX model with one float
 * input for the given shape, then answers commands on stdin, one a line:
 * "N" runs the network N times and prints the N times in ms on one line;
 * "q" quits. bench/cpu/busy_bench.py drives it beside ONNX Runtime.
 *
 *   cc -O2 -Iinclude -o /tmp/embed_bench bench/cpu/embed_bench.c -Lbuild -lkiln \
 *      -Wl,-rpath,$PWD/build
 *   /tmp/embed_bench MODEL.onnx INPUT 1x3x96x96 THREADS [INPUT.f32]
 *
 * The input is read from INPUT.f32 (raw little-endian float32, as many as
 * the shape holds) or else is uniform in [-1, 1) from a fixed xorshift
 * generator; the first line printed is "ready", then the first output's
 * elements (for a check against ONNX Runtime) as "out v0 v1 ...". */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_runtime.h"

static int die(const char *what) {
    fprintf(stderr, "embed_bench: %s: %s\n", what, kiln_last_error());
    exit(1);
}

#define CHECK(call, what)         \
    do {                          \
        if ((call) != KILN_OK)    \
            die(what);            \
    } while (0)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL INPUT SHAPE(1x3x96x96) THREADS [INPUT.f32]\n", argv[0]);
        return 2;
    }
    const char *model = argv[1], *input = argv[2];
    int threads = atoi(argv[4]);
    uint64_t seed = 1;
    int64_t dims[8];
    int rank = 0;
    for (char *s = argv[3]; *s && rank < 8;) {
        dims[rank++] = strtoll(s, &s, 10);
        if (*s == 'x')
            s++;
    }
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)dims[i];
    float *x = malloc(n * sizeof *x);
    if (!x)
        return 1;
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        x[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    if (argc > 5) {
        FILE *f = fopen(argv[5], "rb");
        if (!f || fread(x, sizeof *x, n, f) != n) {
            fprintf(stderr, "embed_bench: cannot read %zu floats from %s\n", n, argv[5]);
            return 1;
        }
        fclose(f);
    }

    kiln_network *net = NULL;
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t plan_size = 0;
    CHECK(kiln_onnx_parse_file(model, &net), "parse");
    CHECK(kiln_builder_config_create(&cfg), "config");
    kiln_builder_config_set_threads(cfg, threads);
    int prof = 0;
    CHECK(kiln_builder_config_add_profile(cfg, &prof), "profile");
    CHECK(kiln_builder_config_set_shape(cfg, prof, input, rank, dims, dims, dims), "shape");
    CHECK(kiln_build_serialized(net, cfg, &plan, &plan_size), "build");
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_engine *eng = NULL;
    CHECK(kiln_engine_load(plan, plan_size, &eng), "load");
    kiln_free(plan);
    kiln_context *ctx = NULL;
    CHECK(kiln_context_create(eng, &ctx), "context");
    kiln_context_set_threads(ctx, threads);
    CHECK(kiln_context_set_input_shape(ctx, input, rank, dims), "input shape");
    CHECK(kiln_context_set_tensor_address(ctx, input, x), "bind input");
    float *out = NULL;
    size_t out_n = 0;
    for (int i = 0; i < kiln_engine_num_io_tensors(eng); i++) {
        const char *name = kiln_engine_io_tensor_name(eng, i);
        if (kiln_engine_tensor_io_mode(eng, name) != KILN_IO_OUTPUT)
            continue;
        int64_t od[8];
        int orank = kiln_context_tensor_shape(ctx, name, od);
        if (orank < 0)
            die("output shape");
        size_t on = 1;
        for (int j = 0; j < orank; j++)
            on *= (size_t)od[j];
        float *buf = calloc(on ? on : 1, sizeof(float));
        if (!buf)
            return 1;
        CHECK(kiln_context_set_tensor_address(ctx, name, buf), "bind output");
        if (!out) {
            out = buf;
            out_n = on;
        }
    }
    CHECK(kiln_context_enqueue(ctx, NULL), "run");
    printf("ready\nout");
    for (size_t i = 0; i < out_n && i < 4096; i++)
        printf(" %.9g", out[i]);
    printf("\n");
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == 'q')
            break;
        int runs = atoi(line);
        for (int r = 0; r < runs; r++) {
            double t0 = now_ms();
            CHECK(kiln_context_enqueue(ctx, NULL), "run");
            printf("%s%.4f", r ? " " : "", now_ms() - t0);
        }
        printf("\n");
        fflush(stdout);
    }
    kiln_context_destroy(ctx);
    kiln_engine_destroy(eng);
    return 0;
}
