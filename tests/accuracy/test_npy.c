/* test_npy.c - the .npy/.npz code as the CLI sees it (the library's,
 * include/kiln/kiln_tools.h, under tools/npy.h's names) on its own: encode and
 * decode every dtype, .npz archives, every truncation and many corruptions
 * of valid files rejected with a message naming file and byte, and seeded
 * random inputs that stay in their ranges; with the catalog's folder as
 * argument, the hostile archives and non-regular files of tests/bad/inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"

static int failures, checks;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        checks++;                                                         \
        if (!(cond)) {                                                    \
            failures++;                                                   \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

static const kiln_dtype all_types[] = {
    KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT,  KILN_DTYPE_DOUBLE, KILN_DTYPE_INT8,
    KILN_DTYPE_INT16,   KILN_DTYPE_INT32,  KILN_DTYPE_INT64,  KILN_DTYPE_UINT8,
    KILN_DTYPE_UINT16,  KILN_DTYPE_UINT32, KILN_DTYPE_UINT64, KILN_DTYPE_BOOL,
    KILN_DTYPE_BFLOAT16,
};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

/* A tensor of dtype dt, shape 2x3 (or a scalar), filled with a pattern. */
static npy_array make(kiln_dtype dt, int rank) {
    npy_array a;
    memset(&a, 0, sizeof a);
    a.name = "t";
    a.dtype = dt;
    a.rank = rank;
    a.dims[0] = 2;
    a.dims[1] = 3;
    size_t n = rank ? 6 : 1;
    a.bytes = n * kiln_dtype_size(dt);
    a.data = calloc(1, a.bytes + 1);
    for (size_t i = 0; i < n; i++)
        npy_set(dt, a.data, i, dt == KILN_DTYPE_BOOL ? (double)(i % 2) : (double)i - 2.0);
    return a;
}

static void test_roundtrip(void) {
    char err[NPY_ERR_CAP];
    for (size_t k = 0; k < N_TYPES; k++)
        for (int rank = 0; rank <= 2; rank += 2) {
            npy_array a = make(all_types[k], rank), b;
            void *buf = NULL;
            size_t size = 0;
            CHECK(npy_encode(&a, &buf, &size, err), "encode %s: %s",
                  kiln_dtype_name(a.dtype), err);
            CHECK(size % 64 == a.bytes % 64, "header of %s not padded to 64",
                  kiln_dtype_name(a.dtype));
            bool ok = npy_decode(buf, size, "mem.npy", &b, err);
            CHECK(ok, "decode %s: %s", kiln_dtype_name(a.dtype), err);
            if (ok) {
                CHECK(b.dtype == a.dtype && b.rank == a.rank && b.bytes == a.bytes &&
                          memcmp(b.data, a.data, a.bytes) == 0,
                      "round trip of %s rank %d differs", kiln_dtype_name(a.dtype), rank);
                npy_array_free(&b);
            }
            free(buf);
            free(a.data);
        }
}

static void test_npz(void) {
    char err[NPY_ERR_CAP];
    npy_list l, back;
    memset(&l, 0, sizeof l);
    for (size_t k = 0; k < N_TYPES; k++) {
        npy_array a = make(all_types[k], 2);
        char name[32];
        snprintf(name, sizeof name, "arr_%s", kiln_dtype_name(a.dtype));
        CHECK(npy_list_add(&l, name, a.dtype, a.rank, a.dims, a.data, a.bytes), "add");
        free(a.data);
    }
    void *buf = NULL;
    size_t size = 0;
    CHECK(npz_encode(&l, &buf, &size, err), "npz encode: %s", err);
    bool ok = npz_decode(buf, size, "mem.npz", &back, err);
    CHECK(ok, "npz decode: %s", err);
    if (ok) {
        CHECK(back.n == l.n, "npz has %d entries, wrote %d", back.n, l.n);
        for (int i = 0; i < l.n; i++) {
            const npy_array *b = npy_list_find(&back, l.items[i].name);
            CHECK(b && b->dtype == l.items[i].dtype && b->bytes == l.items[i].bytes &&
                      memcmp(b->data, l.items[i].data, b->bytes) == 0,
                  "npz entry %s differs", l.items[i].name);
        }
        npy_list_free(&back);
    }
    /* every truncation is rejected, with the file named */
    int rejected = 0;
    for (size_t n = 0; n < size; n++) {
        npy_list t;
        err[0] = '\0';
        if (npz_decode(buf, n, "cut.npz", &t, err))
            npy_list_free(&t);
        else
            rejected += strstr(err, "cut.npz") != NULL;
    }
    CHECK((size_t)rejected == size,
          "only %d of %zu truncations rejected with a message", rejected, size);
    /* flipped bytes: never a crash; damaged data is caught by the CRC */
    uint8_t *copy = malloc(size);
    for (size_t p = 0; p < size; p++) {
        memcpy(copy, buf, size);
        copy[p] ^= 0x5a;
        npy_list t;
        if (npz_decode(copy, size, "flip.npz", &t, err))
            npy_list_free(&t);
    }
    free(copy);
    /* a deflated member claiming more than deflate can expand to (what the
     * fuzzer found: 4 GiB asked of a few bytes) is refused before any
     * allocation */
    copy = malloc(size);
    memcpy(copy, buf, size);
    int patched = 0;
    for (size_t p = 0; p + 46 <= size; p++)
        if (memcmp(copy + p, "PK\001\002", 4) == 0) {
            copy[p + 10] = 8, copy[p + 11] = 0;                       /* method: deflate */
            memcpy(copy + p + 24, "\000\000\000\377", 4);           /* usize: 4 GiB */
            patched++;
            break;
        }
    npy_list t;
    err[0] = '\0';
    ok = patched && npz_decode(copy, size, "claim.npz", &t, err);
    if (ok)
        npy_list_free(&t);
    CHECK(patched && !ok && strstr(err, "implausible size") != NULL,
          "a 4 GiB deflate claim was not refused: %s", err);
    free(copy);
    free(buf);
    npy_list_free(&l);
}

static void test_malformed_npy(void) {
    char err[NPY_ERR_CAP];
    npy_array a = make(KILN_DTYPE_FLOAT, 2), b;
    void *buf = NULL;
    size_t size = 0;
    CHECK(npy_encode(&a, &buf, &size, err), "encode");
    for (size_t n = 0; n < size; n++) {
        err[0] = '\0';
        bool ok = npy_decode(buf, n, "cut.npy", &b, err);
        CHECK(!ok && strstr(err, "cut.npy") && strstr(err, "byte"),
              "truncated to %zu bytes: %s", n, ok ? "accepted" : err);
        if (ok)
            npy_array_free(&b);
    }
    uint8_t *copy = malloc(size);
    for (size_t p = 0; p < size; p++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(copy, buf, size);
            copy[p] ^= (uint8_t)(1u << bit);
            if (npy_decode(copy, size, "flip.npy", &b, err))
                npy_array_free(&b);
        }
    free(copy);
    free(buf);
    free(a.data);
}

static void test_random(void) {
    char err[NPY_ERR_CAP];
    npy_range_list r;
    memset(&r, 0, sizeof r);
    CHECK(npy_parse_ranges("ids:[3,7],x:[-0.5,0.25]", &r, err), "ranges: %s", err);
    CHECK(!npy_parse_ranges("x:[2,1]", &r, err) && strstr(err, "lo <= hi"), "lo > hi: %s", err);
    int64_t ids[1000], other[1000];
    float x[1000];
    uint64_t s = 42;
    npy_fill_random(KILN_DTYPE_INT64, ids, 1000, &r, "ids", &s);
    npy_fill_random(KILN_DTYPE_INT64, other, 1000, &r, "other", &s);
    npy_fill_random(KILN_DTYPE_FLOAT, x, 1000, &r, "x", &s);
    bool seen[8] = {0}, ok = true, ok2 = true, ok3 = true;
    for (int i = 0; i < 1000; i++) {
        ok &= ids[i] >= 3 && ids[i] <= 7;
        if (ids[i] >= 0 && ids[i] < 8)
            seen[ids[i]] = true;
        ok2 &= other[i] == 0 || other[i] == 1;
        ok3 &= x[i] >= -0.5f && x[i] < 0.25f;
    }
    CHECK(ok && seen[3] && seen[7], "integer range [3,7] not kept or not covered");
    CHECK(ok2, "integers default to [0,1] (valid indices)");
    CHECK(ok3, "float range");
    uint64_t s1 = 7, s2 = 7;
    float a1[16], a2[16];
    npy_fill_random(KILN_DTYPE_FLOAT, a1, 16, NULL, "y", &s1);
    npy_fill_random(KILN_DTYPE_FLOAT, a2, 16, NULL, "y", &s2);
    CHECK(memcmp(a1, a2, sizeof a1) == 0, "same seed, same values");
    npy_range_list_free(&r);
}

static void test_fp16_bf16_values(void) {
    uint16_t h[4], b[4];
    const double v[4] = {1.5, -2.0, 65504.0, 1e6};
    for (int i = 0; i < 4; i++) {
        npy_set(KILN_DTYPE_FLOAT16, h, (size_t)i, v[i]);
        npy_set(KILN_DTYPE_BFLOAT16, b, (size_t)i, v[i]);
    }
    CHECK(h[0] == 0x3e00 && h[1] == 0xc000 && h[2] == 0x7bff && h[3] == 0x7c00,
          "fp16 encodings %04x %04x %04x %04x", h[0], h[1], h[2], h[3]);
    CHECK(b[0] == 0x3fc0 && b[1] == 0xc000, "bf16 encodings %04x %04x", b[0], b[1]);
    CHECK(npy_get(KILN_DTYPE_FLOAT16, h, 3) == INFINITY, "fp16 overflow is inf");
}

/* A file of the catalog (tests/bad/inputs, made by gen_input_cases.py)
 * must fail to load with `text` in the message. */
static void expect_refused(const char *dir, const char *file, const char *text) {
    char path[1024], err[NPY_ERR_CAP] = "";
    snprintf(path, sizeof path, "%s/%s", dir, file);
    npy_list l;
    bool ok = npy_load_file(path, &l, err);
    if (ok)
        npy_list_free(&l);
    CHECK(!ok && strstr(err, text) != NULL, "%s: expected an error with \"%s\", got %s", file,
          text, ok ? "success" : err);
}

/* Hostile archives and files that are not regular (each once overlapped,
 * over-read, blocked or read without end). */
static void test_hostile_inputs(const char *dir) {
    char err[NPY_ERR_CAP] = "", path[1024];
    expect_refused(dir, "npz_overlap.npz", "member 'a1.npy' overlaps member 'a0.npy'");
    expect_refused(dir, "npz_nul_name.npz", "member name holds a NUL byte");
    expect_refused(dir, "npz_duplicate.npz", "member 'x.npy' appears twice");
    expect_refused(dir, "npz_past_end.npz", "run past the end of the file");
    /* a 1030-byte member name is read whole */
    snprintf(path, sizeof path, "%s/npz_long_name.npz", dir);
    npy_list l;
    bool ok = npy_load_file(path, &l, err);
    CHECK(ok && l.n == 1 && strlen(l.items[0].name) == 1026 && l.items[0].rank == 2,
          "long member name: %s", ok ? "wrong entry" : err);
    if (ok)
        npy_list_free(&l);
    /* an honest 16 MiB member over a 1 MB budget */
    setenv("KILN_MAX_INPUT_BYTES", "1000000", 1);
    expect_refused(dir, "npz_budget.npz", "over the input memory budget of 1000000 bytes");
    unsetenv("KILN_MAX_INPUT_BYTES");
    snprintf(path, sizeof path, "%s/npz_budget.npz", dir);
    ok = npy_load_file(path, &l, err);
    CHECK(ok && l.n == 1 && l.items[0].bytes == (size_t)16 << 20, "budget default: %s",
          ok ? "wrong entry" : err);
    if (ok)
        npy_list_free(&l);
    /* not regular files: refused at once (a FIFO without a writer would
     * block open(); ctest's timeout catches a regression) */
    char fifo[] = "/tmp/kiln_test_npy_XXXXXX";
    CHECK(mkdtemp(fifo) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/in.npz", fifo);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    CHECK(!npy_load_file(path, &l, err) && strstr(err, "not a regular file"), "FIFO: %s", err);
    unlink(path);
    rmdir(fifo);
    CHECK(!npy_load_file("/dev/zero", &l, err) && strstr(err, "not a regular file"),
          "/dev/zero: %s", err);
    CHECK(!npy_load_file(dir, &l, err) && strstr(err, "not a regular file"), "a folder: %s", err);
}

int main(int argc, char **argv) {
    test_roundtrip();
    test_npz();
    test_malformed_npy();
    test_random();
    test_fp16_bf16_values();
    if (argc > 1)
        test_hostile_inputs(argv[1]);
    printf("test_npy: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
