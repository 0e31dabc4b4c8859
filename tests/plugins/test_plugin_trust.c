/* test_plugin_trust.c - what a plan or a plugin path can make kiln run
 * (issue 28): a rejected plan loads none of its code and leaves nothing
 * registered, a plan that fails after its library loaded leaves nothing
 * either, two plans embedding two builds of one plugin each run their own,
 * a layer without a record or a plan naming another build is refused, the
 * caller's allow-list of SHA-256s decides, a bare file name is hashed and
 * loaded from the same file (never searched on LD_LIBRARY_PATH), FIFOs are
 * refused without blocking, world-writable places are warned about, and a
 * plan file rewritten or truncated under a loaded engine changes nothing.
 * Cases come from tests/bad/gen_plugin_cases.py (KT_TRUST_DIR); the
 * TrustScale builds leave their tag in $KILN_TEST_TRUST_MARKER when loaded. */
#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../unit/test.h"
#include "kiln/kiln_plugin.h"
#include "kiln/kiln_runtime.h"

#define CASE(name) KT_TRUST_DIR "/" name

static char tmpdir[256], marker[512];
static char sha_a[65], sha_b[65];

static void marker_reset(void) { unlink(marker); }

/* What the TrustScale constructors wrote since the last reset. */
static const char *marker_text(void) {
    static char buf[256];
    buf[0] = 0;
    FILE *f = fopen(marker, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

static int read_shas(void) {
    FILE *f = fopen(CASE("sha256.txt"), "r");
    if (!f)
        return 0;
    char tag[4], sha[65];
    while (fscanf(f, "%3s %64s", tag, sha) == 2)
        memcpy(tag[0] == 'a' ? sha_a : sha_b, sha, 65);
    fclose(f);
    return sha_a[0] && sha_b[0];
}

/* Run a [2, 3] TrustScale plan on x = 1..6 and return y[5] / x[5]. */
static float scale_of(kiln_engine *e) {
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0};
    kiln_context *c = NULL;
    if (!e || kiln_context_create(e, &c) != KILN_OK)
        return -1;
    float s = -1;
    if (kiln_context_set_tensor_address(c, "x", x) == KILN_OK &&
        kiln_context_set_tensor_address(c, "y", y) == KILN_OK &&
        kiln_context_enqueue(c, NULL) == KILN_OK)
        s = y[5] / x[5];
    kiln_context_destroy(c);
    return s;
}

static int trust_entries(void) {
    int n = 0;
    for (int i = 0; i < kiln_plugin_count(); i++) {
        const kiln_plugin_creator *c = kiln_plugin_at(i, NULL);
        n += c && strcmp(c->name, "TrustScale") == 0;
    }
    return n;
}

/* Deregister every TrustScale library (engines destroyed first). */
static void drop_trust(void) {
    for (int guard = 0; guard < 16; guard++) {
        const kiln_plugin_creator *c = NULL;
        for (int i = 0; i < kiln_plugin_count() && !c; i++) {
            const kiln_plugin_creator *k = kiln_plugin_at(i, NULL);
            if (k && strcmp(k->name, "TrustScale") == 0)
                c = k;
        }
        if (!c)
            return;
        KT_OK(kiln_plugin_deregister_library((kiln_plugin_library *)kiln_plugin_creator_library(c)));
    }
}

/* Rejected plans, every way: none of the library they embed runs. */
static void test_rejected(void) {
    static const struct {
        const char *file;
        kiln_status st;
        const char *text;
    } cases[] = {
        {CASE("bad_checksum.kiln"), KILN_ERR_PLAN, "checksum"},
        {CASE("bad_version.kiln"), KILN_ERR_VERSION, "format version 2"},
        {CASE("bad_table.kiln"), KILN_ERR_PLAN, "overlaps"},
        {CASE("bad_graphs.kiln"), KILN_ERR_PLAN, "graph"},
        {CASE("bad_records.kiln"), KILN_ERR_PLAN, "plugin records are malformed"},
        {CASE("no_record.kiln"), KILN_ERR_PLAN, "has no plugin record"},
        {CASE("bad_altered.kiln"), KILN_ERR_PLUGIN, "the plan was altered"},
    };
    kiln_plugin_allow_embedded_libraries(1);
    int before = kiln_plugin_count();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        marker_reset();
        kiln_engine *e = NULL;
        KT_FAILS(kiln_engine_load_file(cases[i].file, &e), cases[i].st, cases[i].text);
        KT_CHECK(e == NULL);
        if (strcmp(marker_text(), "") != 0)
            fprintf(stderr, "%s: the plan was refused but its library ran (marker '%s')\n",
                    cases[i].file, marker_text());
        KT_CHECK(strcmp(marker_text(), "") == 0);
        KT_CHECK(kiln_plugin_count() == before && trust_entries() == 0);
        kiln_engine_destroy(e);
    }
    /* the good plan they were made from loads its code once */
    marker_reset();
    kiln_engine *e = NULL;
    KT_OK(kiln_engine_load_file(CASE("trust_a.kiln"), &e));
    KT_CHECK(strcmp(marker_text(), "a\n") == 0);
    KT_NEAR(scale_of(e), 2.0f, 0);
    kiln_engine_destroy(e);
    drop_trust();
    kiln_plugin_allow_embedded_libraries(0);
}

/* A plan whose engine fails after its library loaded leaves it unregistered. */
static void test_failed_plan(void) {
    kiln_plugin_allow_embedded_libraries(1);
    setenv("KILN_TEST_TRUST_FAIL_CREATE", "1", 1);
    int before = kiln_plugin_count();
    kiln_engine *e = NULL;
    KT_FAILS(kiln_engine_load_file(CASE("trust_a.kiln"), &e), KILN_ERR_PLUGIN,
             "runtime create refused");
    KT_CHECK(e == NULL && kiln_plugin_count() == before && trust_entries() == 0);
    KT_CHECK(kiln_plugin_find("TrustScale", "1", "") == NULL);
    unsetenv("KILN_TEST_TRUST_FAIL_CREATE");
    kiln_plugin_allow_embedded_libraries(0);
}

/* Two plans, two builds of one identity: each engine runs its own. */
static void test_two_builds(void) {
    kiln_plugin_allow_embedded_libraries(1);
    marker_reset();
    kiln_engine *ea = NULL, *eb = NULL, *e = NULL;
    KT_OK(kiln_engine_load_file(CASE("trust_a.kiln"), &ea));
    KT_OK(kiln_engine_load_file(CASE("trust_b.kiln"), &eb));
    KT_CHECK(strcmp(marker_text(), "a\nb\n") == 0);
    KT_NEAR(scale_of(ea), 2.0f, 0);
    KT_NEAR(scale_of(eb), 3.0f, 0);
    KT_CHECK(trust_entries() == 2);
    /* a layer with no record does not pick up a build another plan brought */
    KT_FAILS(kiln_engine_load_file(CASE("no_record.kiln"), &e), KILN_ERR_PLAN,
             "has no plugin record");
    /* a plan naming build a as an external library gets exactly that build */
    KT_OK(kiln_engine_load_file(CASE("trust_a_ext.kiln"), &e));
    KT_NEAR(scale_of(e), 2.0f, 0);
    kiln_engine_destroy(e);
    e = NULL;
    KT_CHECK(strcmp(marker_text(), "a\nb\n") == 0); /* nothing new was loaded */
    /* with only build b registered, it is refused rather than run with b */
    kiln_engine_destroy(ea);
    const kiln_plugin_library *la = NULL;
    for (int i = 0; i < kiln_plugin_count(); i++) {
        const kiln_plugin_library *l = kiln_plugin_creator_library(kiln_plugin_at(i, NULL));
        if (l && strcmp(kiln_plugin_library_sha256(l), sha_a) == 0)
            la = l;
    }
    KT_CHECK(la != NULL);
    if (la)
        KT_OK(kiln_plugin_deregister_library((kiln_plugin_library *)la));
    KT_FAILS(kiln_engine_load_file(CASE("trust_a_ext.kiln"), &e), KILN_ERR_PLUGIN,
             "which is not registered");
    KT_CHECK(e == NULL);
    KT_NEAR(scale_of(eb), 3.0f, 0);
    kiln_engine_destroy(eb);
    drop_trust();
    /* the application's own registration wins, and no code of the plan runs */
    kiln_plugin_library *lib = NULL;
    KT_OK(kiln_plugin_load_library(KT_TRUST_B, NULL, &lib));
    marker_reset();
    KT_OK(kiln_engine_load_file(CASE("trust_a.kiln"), &e));
    KT_NEAR(scale_of(e), 3.0f, 0);
    KT_CHECK(strcmp(marker_text(), "") == 0 && trust_entries() == 1);
    kiln_engine_destroy(e);
    if (lib)
        KT_OK(kiln_plugin_deregister_library(lib));
    kiln_plugin_allow_embedded_libraries(0);
}

/* The caller's allow-list decides, not the hash inside the plan. */
static void test_allow_list(void) {
    kiln_engine *e = NULL;
    int before = kiln_plugin_count();
    KT_OK(kiln_plugin_allow_embedded_sha256(sha_a));
    marker_reset();
    KT_FAILS(kiln_engine_load_file(CASE("trust_b.kiln"), &e), KILN_ERR_PLUGIN,
             "not on the caller's allow-list");
    kiln_plugin_allow_embedded_libraries(1); /* the list still decides */
    KT_FAILS(kiln_engine_load_file(CASE("trust_b.kiln"), &e), KILN_ERR_PLUGIN,
             "not on the caller's allow-list");
    KT_CHECK(strcmp(marker_text(), "") == 0 && kiln_plugin_count() == before);
    kiln_plugin_allow_embedded_libraries(0);
    KT_OK(kiln_engine_load_file(CASE("trust_a.kiln"), &e));
    KT_NEAR(scale_of(e), 2.0f, 0);
    KT_CHECK(strcmp(marker_text(), "a\n") == 0);
    kiln_engine_destroy(e);
    e = NULL;
    drop_trust();
    KT_FAILS(kiln_plugin_allow_embedded_sha256("0123"), KILN_ERR_INVALID_ARGUMENT,
             "not a SHA-256");
    KT_OK(kiln_plugin_allow_embedded_sha256(NULL));
    KT_FAILS(kiln_engine_load_file(CASE("trust_a.kiln"), &e), KILN_ERR_PLUGIN, "is not allowed");
    char upper[65];
    for (int i = 0; i < 65; i++)
        upper[i] = (char)toupper((unsigned char)sha_b[i]);
    KT_OK(kiln_plugin_allow_embedded_sha256(upper));
    KT_OK(kiln_engine_load_file(CASE("trust_b.kiln"), &e));
    KT_NEAR(scale_of(e), 3.0f, 0);
    kiln_engine_destroy(e);
    drop_trust();
    KT_OK(kiln_plugin_allow_embedded_sha256(NULL));
}

static char logged[4096];
static void capture(void *user, kiln_severity sev, const char *msg) {
    (void)user, (void)sev;
    size_t n = strlen(logged);
    snprintf(logged + n, sizeof logged - n, "%s\n", msg);
}

static int copy_file(const char *from, const char *to, mode_t mode) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    char buf[1 << 14];
    size_t n;
    int ok = in && out;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    if (in)
        fclose(in);
    if (out)
        ok &= fclose(out) == 0;
    return ok && chmod(to, mode) == 0;
}

/* A bare name is a file in the working folder: hashed and loaded from it. */
static void test_paths(void) {
    char here[PATH_MAX];
    KT_CHECK(getcwd(here, sizeof here) != NULL);
    const char *ldp = getenv("LD_LIBRARY_PATH");
    if (!ldp || !strstr(ldp, "shadow"))
        printf("note: LD_LIBRARY_PATH does not hold the shadow build (run through ctest)\n");
    KT_CHECK(chdir(CASE("cwd")) == 0);
    marker_reset();
    kiln_plugin_library *lib = NULL;
    KT_OK(kiln_plugin_load_library("libtrust_shadow.so", NULL, &lib));
    KT_CHECK(lib && strcmp(kiln_plugin_library_sha256(lib), sha_b) == 0);
    KT_CHECK(strcmp(marker_text(), "b\n") == 0); /* the code that ran is the file hashed */
    kiln_engine *e = NULL;
    KT_OK(kiln_engine_load_file(CASE("trust_a_ext.kiln"), &e)); /* the caller's build runs */
    KT_NEAR(scale_of(e), 3.0f, 0);
    kiln_engine_destroy(e);
    if (lib)
        KT_OK(kiln_plugin_deregister_library(lib));
    /* the expected SHA-256 is checked before any code of the file runs */
    marker_reset();
    lib = NULL;
    KT_FAILS(kiln_plugin_load_library_sha256("libtrust_shadow.so", NULL, sha_a, &lib),
             KILN_ERR_PLUGIN, "not the expected");
    KT_CHECK(lib == NULL && strcmp(marker_text(), "") == 0 && trust_entries() == 0);
    KT_OK(kiln_plugin_load_library_sha256("libtrust_shadow.so", NULL, sha_b, &lib));
    KT_CHECK(strcmp(marker_text(), "b\n") == 0);
    if (lib)
        KT_OK(kiln_plugin_deregister_library(lib));
    KT_CHECK(chdir(here) == 0);

    /* a FIFO is refused without blocking */
    char p[512];
    snprintf(p, sizeof p, "%s/fifo.so", tmpdir);
    KT_CHECK(mkfifo(p, 0600) == 0);
    lib = NULL;
    KT_FAILS(kiln_plugin_load_library(p, NULL, &lib), KILN_ERR_IO, "not a regular file");
    unlink(p);

    /* world-writable file, world-writable folder: a warning each */
    char dir[512], file[600];
    snprintf(dir, sizeof dir, "%s/open", tmpdir);
    KT_CHECK(mkdir(dir, 0700) == 0 && chmod(dir, 0777) == 0);
    snprintf(file, sizeof file, "%s/libtrust_ww.so", dir);
    KT_CHECK(copy_file(KT_TRUST_A, file, 0644));
    kiln_set_logger(capture, NULL, KILN_LOG_WARNING);
    logged[0] = 0;
    lib = NULL;
    KT_OK(kiln_plugin_load_library(file, NULL, &lib));
    KT_CHECK(strstr(logged, "lies in world-writable folder") != NULL);
    if (lib)
        KT_OK(kiln_plugin_deregister_library(lib));
    KT_CHECK(chmod(dir, 0700) == 0 && chmod(file, 0666) == 0);
    logged[0] = 0;
    lib = NULL;
    KT_OK(kiln_plugin_load_library(file, NULL, &lib));
    KT_CHECK(strstr(logged, "is world-writable") != NULL &&
             strstr(logged, "world-writable folder") == NULL);
    if (lib)
        KT_OK(kiln_plugin_deregister_library(lib));
    kiln_set_logger(NULL, NULL, KILN_LOG_WARNING);
    unlink(file);
    rmdir(dir);
}

/* A loaded engine keeps its own copy of the plan: rewriting or truncating
 * the file changes no output and cannot crash it. */
static void test_plan_file(unsigned seed) {
    enum { N = 16384 };
    char path[512];
    snprintf(path, sizeof path, "%s/weights.kiln", tmpdir);
    KT_CHECK(copy_file(CASE("weights.kiln"), path, 0644));
    kiln_engine *e = NULL;
    KT_OK(kiln_engine_load_file(path, &e));
    if (!e)
        return;
    static float x[N], y0[N], y1[N];
    srand(seed);
    for (int i = 0; i < N; i++)
        x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    kiln_context *c = NULL;
    KT_OK(kiln_context_create(e, &c));
    KT_OK(kiln_context_set_tensor_address(c, "x", x));
    KT_OK(kiln_context_set_tensor_address(c, "y", y0));
    KT_OK(kiln_context_enqueue(c, NULL));
    /* every byte of the file overwritten in place (NaN patterns) */
    struct stat st;
    KT_CHECK(stat(path, &st) == 0);
    int fd = open(path, O_WRONLY);
    KT_CHECK(fd >= 0);
    static uint8_t junk[1 << 16];
    memset(junk, 0xff, sizeof junk);
    for (off_t at = 0; fd >= 0 && at < st.st_size; at += (off_t)sizeof junk)
        KT_CHECK(pwrite(fd, junk, sizeof junk, at) == (ssize_t)sizeof junk);
    if (fd >= 0)
        close(fd);
    KT_OK(kiln_context_set_tensor_address(c, "y", y1));
    KT_OK(kiln_context_enqueue(c, NULL));
    KT_CHECK(memcmp(y0, y1, sizeof y0) == 0);
    /* truncated to nothing: a mapping would fault here (SIGBUS) */
    KT_CHECK(truncate(path, 0) == 0);
    memset(y1, 0, sizeof y1);
    KT_OK(kiln_context_enqueue(c, NULL));
    KT_CHECK(memcmp(y0, y1, sizeof y0) == 0);
    kiln_context_destroy(c);
    kiln_engine_destroy(e);
    unlink(path);
    /* a FIFO as a plan is refused without blocking */
    KT_CHECK(mkfifo(path, 0600) == 0);
    e = NULL;
    KT_FAILS(kiln_engine_load_file(path, &e), KILN_ERR_IO, "not a regular file");
    unlink(path);
}

/* Arguments name the groups to run (rejected, failed, builds, allow, paths,
 * plan_file); none: all. */
static int wanted(int argc, char **argv, const char *name) {
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv) {
    alarm(120); /* a loader that blocks on a FIFO fails instead of hanging */
    unsigned seed = (unsigned)time(NULL);
    const char *env_seed = getenv("KILN_TEST_SEED");
    if (env_seed)
        seed = (unsigned)strtoul(env_seed, NULL, 10);
    printf("seed %u (KILN_TEST_SEED to repeat)\n", seed);
    if (!read_shas()) {
        fprintf(stderr, "no cases in " KT_TRUST_DIR ": run tests/bad/gen_plugin_cases.py\n");
        return 1;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-trust-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(marker, sizeof marker, "%s/marker", tmpdir);
    setenv("KILN_TEST_TRUST_MARKER", marker, 1);
    if (wanted(argc, argv, "rejected"))
        test_rejected();
    if (wanted(argc, argv, "failed"))
        test_failed_plan();
    if (wanted(argc, argv, "builds"))
        test_two_builds();
    if (wanted(argc, argv, "allow"))
        test_allow_list();
    if (wanted(argc, argv, "paths"))
        test_paths();
    if (wanted(argc, argv, "plan_file"))
        test_plan_file(seed);
    unlink(marker);
    rmdir(tmpdir);
    return kt_finish();
}
