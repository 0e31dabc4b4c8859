/* test_scale.c - work that must stay linear in the size of its input: a
 * chain of 10^5 Identity nodes (the canonicalize pass replaces reads once
 * per node) builds and runs, and a timing cache of 2 * 10^5 entries loads.
 * Each was quadratic once (94 s and 28.7 s); ctest gives this a limit that a
 * linear build meets with a wide margin and a quadratic one does not. */
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "builder/timing_cache.h"
#include "core/core.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

enum { CHAIN = 100000, CACHE_ENTRIES = 200000 };

/* x -> Identity x CHAIN -> Neg -> y: the build leaves one Neg. */
static void test_identity_chain(void) {
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    if (!net)
        return;
    int64_t d[1] = {5};
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 1, d, NULL));
    char a[32], b[32], name[32];
    snprintf(a, sizeof a, "x");
    kiln_status st = KILN_OK;
    for (int i = 0; i < CHAIN && st == KILN_OK; i++) {
        snprintf(b, sizeof b, "t%d", i);
        snprintf(name, sizeof name, "id%d", i);
        const char *in[1] = {a}, *out[1] = {b};
        st = kiln_network_add_node(net, name, "Identity", "", 17, 1, in, 1, out, NULL);
        memcpy(a, b, sizeof a);
    }
    KT_OK(st);
    const char *in[1] = {a}, *out[1] = {"y"};
    KT_OK(kiln_network_add_node(net, "neg", "Neg", "", 17, 1, in, 1, out, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    void *plan = NULL;
    size_t size = 0;
    double t0 = kn_now_ms();
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    double ms = kn_now_ms() - t0;
    printf("identity chain of %d: built in %.0f ms\n", CHAIN, ms);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_engine *eng = NULL;
    if (plan)
        KT_OK(kiln_engine_load(plan, size, &eng));
    kiln_free(plan);
    if (!eng)
        return;
    KT_CHECK(kiln_engine_num_layers(eng) == 1);
    kiln_context *ctx = NULL;
    KT_OK(kiln_context_create(eng, &ctx));
    float x[5] = {1.f, -2.f, 3.5f, 0.f, -0.25f}, y[5] = {0};
    if (ctx) {
        KT_OK(kiln_context_set_tensor_address(ctx, "x", x));
        KT_OK(kiln_context_set_tensor_address(ctx, "y", y));
        KT_OK(kiln_context_enqueue(ctx, NULL));
        for (int i = 0; i < 5; i++)
            KT_CHECK(y[i] == -x[i]);
    }
    kiln_context_destroy(ctx);
    kiln_engine_destroy(eng);
}

/* Identities that fan out and join again: a = I(x), b = I(a), c = I(a),
 * d = I(b), y = d + c + b (the reads of b, c and d move to x in turn, some
 * of them twice through one node). */
static void test_identity_fan(void) {
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    if (!net)
        return;
    int64_t d[1] = {3};
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 1, d, NULL));
    const char *ids[4][2] = {{"x", "a"}, {"a", "b"}, {"a", "c"}, {"b", "d"}};
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "id%d", i);
        KT_OK(kiln_network_add_node(net, name, "Identity", "", 17, 1, &ids[i][0], 1, &ids[i][1],
                                    NULL));
    }
    const char *s1[2] = {"d", "c"}, *o1[1] = {"dc"}, *s2[2] = {"dc", "b"}, *o2[1] = {"y"};
    KT_OK(kiln_network_add_node(net, "add1", "Add", "", 17, 2, s1, 1, o1, NULL));
    KT_OK(kiln_network_add_node(net, "add2", "Add", "", 17, 2, s2, 1, o2, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    void *plan = NULL;
    size_t size = 0;
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_engine *eng = NULL;
    if (plan)
        KT_OK(kiln_engine_load(plan, size, &eng));
    kiln_free(plan);
    if (!eng)
        return;
    kiln_context *ctx = NULL;
    KT_OK(kiln_context_create(eng, &ctx));
    float x[3] = {1.f, -2.f, 0.5f}, y[3] = {0};
    if (ctx) {
        KT_OK(kiln_context_set_tensor_address(ctx, "x", x));
        KT_OK(kiln_context_set_tensor_address(ctx, "y", y));
        KT_OK(kiln_context_enqueue(ctx, NULL));
        for (int i = 0; i < 3; i++)
            KT_CHECK(y[i] == 3.f * x[i]);
    }
    kiln_context_destroy(ctx);
    kiln_engine_destroy(eng);
}

/* A timing cache file of CACHE_ENTRIES distinct signatures loads, and every
 * entry is found again with its tactic and time. */
static void test_timing_cache(void) {
    char path[] = "/tmp/kiln_test_scale_XXXXXX";
    int fd = mkstemp(path);
    KT_CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    const char *key = "cpu|test|none";
    kn_buf b = {0};
    kn_buf_printf(&b, "kiln-timing-cache 1\nkey %s\n", key);
    uint64_t sig = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < CACHE_ENTRIES; i++) {
        sig = sig * 6364136223846793005u + 1442695040888963407u;
        kn_buf_printf(&b, "%016" PRIx64 " tactic%d %d.5\n", sig, i % 7, i % 1000);
    }
    KT_CHECK(!b.failed);
    KT_OK(kn_file_write(path, b.data, b.len));
    kn_buf_free(&b);
    kbld_tcache c = {0};
    double t0 = kn_now_ms();
    KT_OK(kbld_tcache_load(&c, path, key));
    printf("timing cache of %d entries: loaded in %.0f ms\n", CACHE_ENTRIES, kn_now_ms() - t0);
    KT_CHECK(c.n == CACHE_ENTRIES);
    sig = 0x9e3779b97f4a7c15u;
    int found = 0;
    for (int i = 0; i < CACHE_ENTRIES; i++) {
        sig = sig * 6364136223846793005u + 1442695040888963407u;
        double ms = -1;
        const char *t = kbld_tcache_get(&c, sig, &ms);
        char want[16];
        snprintf(want, sizeof want, "tactic%d", i % 7);
        found += t && strcmp(t, want) == 0 && ms == i % 1000 + 0.5;
    }
    KT_CHECK(found == CACHE_ENTRIES);
    KT_CHECK(kbld_tcache_get(&c, 12345, NULL) == NULL);
    kbld_tcache_free(&c);
    unlink(path);
}

int main(void) {
    test_identity_fan();
    test_identity_chain();
    test_timing_cache();
    return kt_finish();
}
