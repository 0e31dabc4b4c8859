/* test_host_place.c - layers placed on the host in a device plan (issue 32):
 * one network whose layers read and make strings and sequences, and one op
 * the device is made to lack, built for a device backend and for the cpu,
 * run on the same inputs, outputs compared exactly. The device plan must
 * place those layers on the host (tactic host:...), put kiln::ToHost /
 * kiln::ToDevice reformats where values cross, and never let a host layer
 * touch device memory or a device layer host memory. A second network has
 * an If on a run-time condition whose branch holds a sequence: the whole If
 * is placed on the host (the device's If declines it), both conditions.
 *
 * The device is first a pseudo-device (pseudo_device.h: the CPU's reference
 * kernels, but its memory is kept unreadable, mprotect PROT_NONE, except
 * while one of its own kernels or copies runs, so a host layer reading
 * device memory crashes the test; Hardmax made missing), registered as
 * kb_test_backend, so the builder's
 * placement and the executor's host arena run in every build; then, when
 * the build has CUDA and a device is there, the cuda backend itself. */
#include "test.h"

#include <stdint.h>

#include "backends/backend.h"
#include "graph/control.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_runtime.h"

#define IN(...) ((const char *const[]){__VA_ARGS__})
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

#include "pseudo_device.h"

/* ---------------- the network ---------------- */

/* X [2, 3] float and S [3] string in; out:
 *   Y  = Hardmax(X * X) + X         (Hardmax: no device kernel)
 *   SU = StringNormalizer(S, UPPER) (a string in and out)
 *   XS = Cast(X, to string)         (a device value made a string)
 *   E  = SequenceAt(SequenceConstruct(X * X, Y), 1) (a sequence between)
 *   N  = SequenceLength(...)        (an int64 from a host value) */
static kiln_network *make_net(void) {
    kiln_network *g = NULL;
    KT_OK(kiln_network_create(&g));
    if (!g)
        return NULL;
    int idx = -1;
    KT_OK(kiln_network_add_input(g, "X", KILN_DTYPE_FLOAT, 2, DIMS(2, 3), NULL));
    KT_OK(kiln_network_add_input(g, "S", KILN_DTYPE_STRING, 1, DIMS(3), NULL));
    const int64_t one = 1;
    KT_OK(kiln_network_add_constant(g, "one", KILN_DTYPE_INT64, 0, NULL, &one, sizeof one));
    KT_OK(kiln_network_add_node(g, "sq", "Mul", "", 17, 2, IN("X", "X"), 1, IN("a"), NULL));
    KT_OK(kiln_network_add_node(g, "hard", "Hardmax", "", 17, 1, IN("a"), 1, IN("b"), NULL));
    KT_OK(kiln_network_add_node(g, "add", "Add", "", 17, 2, IN("b", "X"), 1, IN("Y"), NULL));
    KT_OK(kiln_network_add_node(g, "norm", "StringNormalizer", "", 17, 1, IN("S"), 1, IN("SU"),
                                &idx));
    KT_OK(kiln_network_set_attr_string(g, idx, "case_change_action", "UPPER"));
    KT_OK(kiln_network_add_node(g, "tostr", "Cast", "", 17, 1, IN("X"), 1, IN("XS"), &idx));
    KT_OK(kiln_network_set_attr_int(g, idx, "to", KILN_DTYPE_STRING));
    KT_OK(kiln_network_add_node(g, "seq", "SequenceConstruct", "", 17, 2, IN("a", "Y"), 1,
                                IN("sq_seq"), NULL));
    KT_OK(kiln_network_add_node(g, "at", "SequenceAt", "", 17, 2, IN("sq_seq", "one"), 1, IN("e"),
                                NULL));
    KT_OK(kiln_network_add_node(g, "neg", "Neg", "", 17, 1, IN("e"), 1, IN("E"), NULL));
    KT_OK(kiln_network_add_node(g, "len", "SequenceLength", "", 17, 1, IN("sq_seq"), 1, IN("N"),
                                NULL));
    for (int k = 0; k < 5; k++)
        KT_OK(kiln_network_mark_output(g, IN("Y", "SU", "XS", "E", "N")[k]));
    return g;
}

/* ---------------- running ---------------- */

typedef struct result {
    float y[6], e[6];
    int64_t n;
    char su[3][32], xs[6][32];
    int host_layers, to_host, to_device;
    int c_on_device; /* the If's condition bound in device memory */
} result;

static bool on_device(const char *backend) { return strcmp(backend, "cpu") != 0; }

/* Output `name` (bytes) into dst: copied from the device, or read where the
 * engine keeps it (strings live on the host). */
static void read_out(kiln_engine *e, kiln_context *c, const char *name, void *dst, size_t bytes,
                     bool dev) {
    const void *a = kiln_context_tensor_address(c, name);
    KT_CHECK(a != NULL);
    if (!a)
        return;
    if (dev)
        KT_OK(kiln_engine_copy(e, dst, a, bytes, KILN_COPY_TO_HOST));
    else
        memcpy(dst, a, bytes);
}

static void read_strings(kiln_context *c, const char *name, char (*dst)[32], int n) {
    const char *const *s = kiln_context_tensor_address(c, name);
    KT_CHECK(s != NULL);
    for (int i = 0; s && i < n; i++)
        snprintf(dst[i], 32, "%s", s[i] ? s[i] : "(null)");
}

static bool run_on(const char *backend, result *res) {
    memset(res, 0, sizeof *res);
    kiln_network *g = make_net();
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_builder_config_set_backend(cfg, backend));
    kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_NO_TIMING);
    kiln_status st = g && cfg ? kiln_build_serialized(g, cfg, &plan, &size) : KILN_ERR_INTERNAL;
    KT_OK(st);
    if (st == KILN_OK)
        KT_OK(st = kiln_engine_load(plan, size, &e));
    if (st == KILN_OK)
        KT_OK(st = kiln_context_create(e, &c));
    bool dev = on_device(backend);
    for (int i = 0; st == KILN_OK && i < kiln_engine_num_layers(e); i++) {
        const char *op = kiln_engine_layer_op(e, i), *tac = kiln_engine_layer_tactic(e, i);
        printf("  %s layer %d: %-22s %-12s %s\n", backend, i, op, tac ? tac : "-",
               kiln_engine_layer_name(e, i));
        res->host_layers += tac && strncmp(tac, "host:", 5) == 0;
        res->to_host += strstr(op, "ToHost") != NULL;
        res->to_device += strstr(op, "ToDevice") != NULL;
    }
    float x[6] = {-1.5f, 0.25f, 2.0f, -0.75f, 3.0f, 0.5f};
    const char *s[3] = {"ab", "Kiln", "x1"};
    void *dx = NULL;
    if (st == KILN_OK && dev) {
        KT_OK(st = kiln_engine_alloc(e, sizeof x, &dx));
        if (st == KILN_OK)
            KT_OK(st = kiln_engine_copy(e, dx, x, sizeof x, KILN_COPY_TO_DEVICE));
    }
    if (st == KILN_OK) {
        KT_OK(kiln_context_set_tensor_address(c, "X", dev ? dx : x));
        KT_OK(kiln_context_set_tensor_address(c, "S", (void *)s));
        if (dev) /* strings are host pointers: device memory is refused, naming the input */
            KT_FAILS(kiln_context_set_tensor_address(c, "S", dx), KILN_ERR_INVALID_ARGUMENT,
                     "'S'");
        KT_OK(kiln_context_set_tensor_address(c, "S", (void *)s));
    }
    for (int r = 0; st == KILN_OK && r < 2; r++) /* twice: the second on prepared state */
        KT_OK(st = kiln_context_enqueue(c, NULL));
    if (st == KILN_OK) {
        read_out(e, c, "Y", res->y, sizeof res->y, dev);
        read_out(e, c, "E", res->e, sizeof res->e, dev);
        read_out(e, c, "N", &res->n, sizeof res->n, dev);
        read_strings(c, "SU", res->su, 3);
        read_strings(c, "XS", res->xs, 6);
    }
    if (dx)
        kiln_engine_free(e, dx);
    kiln_context_destroy(c);
    kiln_engine_destroy(e);
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(g);
    return st == KILN_OK;
}

/* hardmax_on_host: the pseudo-device is made to lack Hardmax; CUDA has it */
static void compare(const char *backend, const result *want, bool hardmax_on_host) {
    result got;
    printf("%s:\n", backend);
    if (!run_on(backend, &got))
        return;
    for (int i = 0; i < 6; i++) {
        KT_CHECK(got.y[i] == want->y[i]);
        KT_CHECK(got.e[i] == want->e[i]);
        KT_CHECK(strcmp(got.xs[i], want->xs[i]) == 0);
    }
    for (int i = 0; i < 3; i++)
        KT_CHECK(strcmp(got.su[i], want->su[i]) == 0);
    KT_CHECK(got.n == 2 && want->n == 2);
    /* StringNormalizer, Cast to string, SequenceConstruct and SequenceAt on
     * the host (SequenceLength is a shape-time value), and Hardmax where the
     * device lacks it; X, a and Y copied to the host once each, e back, and
     * b (Hardmax's output) back where Hardmax ran on the host */
    printf("%s: %d layers on the host, %d ToHost, %d ToDevice\n", backend, got.host_layers,
           got.to_host, got.to_device);
    KT_CHECK(got.host_layers == 4 + hardmax_on_host);
    KT_CHECK(got.to_host == 3);
    KT_CHECK(got.to_device == 1 + hardmax_on_host);
}

/* ---------------- an If whose branch holds a sequence ----------------
 * Y = If(C, then: ConcatFromSequence(SequenceConstruct(X, X)), else:
 * Concat(Neg(X), X)) + 1, X [2, 3] on the device, C a run-time condition
 * (read when the If runs, so a device input unless the engine reports it a
 * shape input): the device cannot run the branch, so the whole If goes to
 * the host, X (and a device C) crossing over and the If's output back. */

static void attach(kn_net *g, int nd, const char *name, kn_net *body) {
    kn_node *n = &g->nodes[nd];
    kn_attr *a = kn_realloc(n->attrs, (size_t)(n->n_attr + 1) * sizeof *a);
    KT_CHECK(a != NULL);
    if (!a)
        return;
    n->attrs = a;
    memset(&a[n->n_attr], 0, sizeof *a);
    a[n->n_attr].name = kn_strdup(name);
    a[n->n_attr].type = KN_ATTR_GRAPH;
    a[n->n_attr].graph = body;
    n->n_attr++;
}

static kiln_network *make_if_net(void) {
    kiln_network *g = NULL, *t = NULL, *e = NULL;
    KT_OK(kiln_network_create(&g));
    KT_OK(kiln_network_create(&t));
    KT_OK(kiln_network_create(&e));
    if (!g || !t || !e)
        return NULL;
    KT_OK(kiln_network_add_input(g, "C", KILN_DTYPE_BOOL, 0, NULL, NULL));
    KT_OK(kiln_network_add_input(g, "X", KILN_DTYPE_FLOAT, 2, DIMS(2, 3), NULL));
    const float one = 1.f;
    KT_OK(kiln_network_add_constant(g, "one", KILN_DTYPE_FLOAT, 0, NULL, &one, sizeof one));
    int nf = -1;
    KT_OK(kiln_network_add_node(g, "if", "If", "", 17, 1, IN("C"), 1, IN("r"), &nf));
    KT_OK(kiln_network_add_node(g, "plus", "Add", "", 17, 2, IN("r", "one"), 1, IN("Y"), NULL));
    int idx = -1;
    KT_OK(kiln_network_add_node(t, "pair", "SequenceConstruct", "", 17, 2, IN("X", "X"), 1,
                                IN("pair_seq"), NULL));
    KT_OK(kiln_network_add_node(t, "join", "ConcatFromSequence", "", 17, 1, IN("pair_seq"), 1,
                                IN("rt"), &idx));
    KT_OK(kiln_network_set_attr_int(t, idx, "axis", 0));
    KT_OK(kiln_network_mark_output(t, "rt"));
    KT_OK(kiln_network_add_node(e, "neg", "Neg", "", 17, 1, IN("X"), 1, IN("nx"), NULL));
    KT_OK(kiln_network_add_node(e, "cat", "Concat", "", 17, 2, IN("nx", "X"), 1, IN("re"), &idx));
    KT_OK(kiln_network_set_attr_int(e, idx, "axis", 0));
    KT_OK(kiln_network_mark_output(e, "re"));
    attach(g, nf, "then_branch", t);
    attach(g, nf, "else_branch", e);
    KT_OK(kiln_network_mark_output(g, "Y"));
    KT_OK(kn_net_resolve_captures(g, 0));
    return g;
}

/* Y for condition c on backend; the layer counts into res. */
static bool run_if(const char *backend, uint8_t c, float *y, result *res) {
    memset(res, 0, sizeof *res);
    kiln_network *g = make_if_net();
    kiln_builder_config *cfg = NULL;
    void *plan = NULL, *dx = NULL, *dy = NULL, *dc = NULL;
    size_t size = 0;
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_builder_config_set_backend(cfg, backend));
    kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_NO_TIMING);
    int prof = 0;
    const uint8_t lo = 0, hi = 1;
    KT_OK(kiln_builder_config_add_profile(cfg, &prof));
    KT_OK(kiln_builder_config_set_input_values(cfg, prof, "C", KILN_DTYPE_BOOL, 1, &lo, &c, &hi));
    kiln_status st = g && cfg ? kiln_build_serialized(g, cfg, &plan, &size) : KILN_ERR_INTERNAL;
    KT_OK(st);
    if (st == KILN_OK)
        KT_OK(st = kiln_engine_load(plan, size, &e));
    if (st == KILN_OK)
        KT_OK(st = kiln_context_create(e, &ctx));
    bool dev = on_device(backend);
    for (int i = 0; st == KILN_OK && i < kiln_engine_num_layers(e); i++) {
        const char *op = kiln_engine_layer_op(e, i), *tac = kiln_engine_layer_tactic(e, i);
        res->host_layers += tac && strncmp(tac, "host:", 5) == 0;
        res->to_host += strstr(op, "ToHost") != NULL;
        res->to_device += strstr(op, "ToDevice") != NULL;
    }
    float x[6] = {-1.5f, 0.25f, 2.0f, -0.75f, 3.0f, 0.5f};
    if (st == KILN_OK && dev) {
        KT_OK(st = kiln_engine_alloc(e, sizeof x, &dx));
        if (st == KILN_OK)
            KT_OK(st = kiln_engine_copy(e, dx, x, sizeof x, KILN_COPY_TO_DEVICE));
        if (st == KILN_OK)
            KT_OK(st = kiln_engine_alloc(e, 12 * sizeof(float), &dy));
        res->c_on_device = kiln_engine_tensor_is_shape_input(e, "C") != 1;
        if (st == KILN_OK && res->c_on_device)
            KT_OK(st = kiln_engine_alloc(e, 1, &dc));
        if (st == KILN_OK && res->c_on_device)
            KT_OK(st = kiln_engine_copy(e, dc, &c, 1, KILN_COPY_TO_DEVICE));
    }
    if (st == KILN_OK) {
        KT_OK(kiln_context_set_tensor_address(ctx, "C", dc ? dc : &c));
        KT_OK(kiln_context_set_tensor_address(ctx, "X", dev ? dx : x));
        KT_OK(kiln_context_set_tensor_address(ctx, "Y", dev ? dy : y));
    }
    for (int r = 0; st == KILN_OK && r < 2; r++)
        KT_OK(st = kiln_context_enqueue(ctx, NULL));
    if (st == KILN_OK && dev)
        KT_OK(kiln_engine_copy(e, y, dy, 12 * sizeof(float), KILN_COPY_TO_HOST));
    if (dx)
        kiln_engine_free(e, dx);
    if (dy)
        kiln_engine_free(e, dy);
    if (dc)
        kiln_engine_free(e, dc);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(g);
    return st == KILN_OK;
}

static void compare_if(const char *backend) {
    for (uint8_t c = 0; c < 2; c++) {
        float want[12], got[12];
        result rw, rg;
        KT_CHECK(run_if("cpu", c, want, &rw));
        if (!run_if(backend, c, got, &rg))
            continue;
        for (int i = 0; i < 12; i++)
            KT_CHECK(got[i] == want[i]);
        printf("%s: If(%d) with a sequence in a branch: %d layer(s) on the host, %d ToHost, %d "
               "ToDevice\n",
               backend, c, rg.host_layers, rg.to_host, rg.to_device);
        KT_CHECK(rg.host_layers == 1 && rg.to_host == 1 + rg.c_on_device && rg.to_device == 1);
        KT_CHECK(want[0] == (c ? -0.5f : 2.5f));
    }
}

int main(void) {
    result want;
    printf("cpu:\n");
    KT_CHECK(run_on("cpu", &want));
    KT_CHECK(want.host_layers == 0 && want.to_host == 0 && want.to_device == 0);
    KT_CHECK(strcmp(want.su[1], "KILN") == 0);
    static const char *const missing[] = {"Hardmax", NULL};
    pd_missing = missing;
    kb_test_backend = &pd_backend;
    compare("pseudo-device", &want, true);
    compare_if("pseudo-device");
    printf("pseudo-device: %d copies, %d waits, %d device layer runs, %d wrong places\n",
           pd_copies, pd_syncs, pd_dev_runs, pd_bad);
    KT_CHECK(pd_bad == 0 && pd_copies > 0 && pd_dev_runs > 0);
    kb_test_backend = NULL;
#ifdef KILN_HAVE_CUDA
    char target[64], libs[128];
    if (kb_cuda_backend.describe(target, sizeof target, libs, sizeof libs) == KILN_OK) {
        printf("device %s, %s\n", target, libs);
        compare("cuda", &want, false);
        compare_if("cuda");
    } else {
        printf("cuda: skipped, no CUDA device (%s)\n", kiln_last_error());
    }
#else
    printf("cuda: not in this build\n");
#endif
    printf("%d passed, %d failed\n", kt_pass, kt_fail);
    return kt_fail ? 1 : 0;
}
