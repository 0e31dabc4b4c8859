/* test_host_place.c - layers placed on the host in a device plan (issue 32):
 * one network whose layers read and make strings and sequences, and one op
 * the device is made to lack, built for a device backend and for the cpu,
 * run on the same inputs, outputs compared exactly. The device plan must
 * place those layers on the host (tactic host:...), put kiln::ToHost /
 * kiln::ToDevice reformats where values cross, and never let a host layer
 * touch device memory or a device layer host memory.
 *
 * The device is first a pseudo-device (below: the CPU's reference kernels,
 * but its memory is kept unreadable, mprotect PROT_NONE, except while one
 * of its own kernels or copies runs, so a host layer reading device memory
 * crashes the test), registered as kb_test_backend, so the builder's
 * placement and the executor's host arena run in every build; then, when
 * the build has CUDA and a device is there, the cuda backend itself. */
#include "test.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/backend.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_runtime.h"

#define IN(...) ((const char *const[]){__VA_ARGS__})
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* ---------------- the pseudo-device ---------------- */

enum { PD_MAX = 4096, PD_WRAP = 256 };
static struct {
    uintptr_t lo, hi;
    size_t map;
} pd_blocks[PD_MAX];
static int pd_n, pd_bad, pd_copies, pd_syncs, pd_dev_runs;

static bool pd_is_dev(const void *p) {
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < pd_n; i++)
        if (a >= pd_blocks[i].lo && a < pd_blocks[i].hi)
            return true;
    return false;
}

/* Device memory is readable only while the device works on it. */
static void pd_open(bool open) {
    for (int i = 0; i < pd_n; i++)
        mprotect((void *)pd_blocks[i].lo, pd_blocks[i].map, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

static kiln_status pd_alloc(size_t bytes, void **out) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t map = ((bytes ? bytes : 1) + page - 1) / page * page;
    if (pd_n == PD_MAX)
        return KILN_ERR_OUT_OF_MEMORY;
    void *p = mmap(NULL, map, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return KILN_ERR_OUT_OF_MEMORY;
    pd_blocks[pd_n].lo = (uintptr_t)p;
    pd_blocks[pd_n].hi = (uintptr_t)p + (bytes ? bytes : 1);
    pd_blocks[pd_n].map = map;
    pd_n++;
    *out = p;
    return KILN_OK;
}

static void pd_free(void *p) {
    for (int i = 0; p && i < pd_n; i++)
        if (pd_blocks[i].lo == (uintptr_t)p) {
            munmap(p, pd_blocks[i].map);
            pd_blocks[i] = pd_blocks[--pd_n];
            return;
        }
}

static kiln_status pd_copy(void *dst, const void *src, size_t bytes, kb_copy_kind kind,
                           void *stream) {
    (void)stream;
    if (!bytes)
        return KILN_OK;
    bool sd = pd_is_dev(src), dd = pd_is_dev(dst);
    bool ok = kind == KB_COPY_H2D ? !sd && dd : kind == KB_COPY_D2H ? sd && !dd : sd && dd;
    pd_copies++;
    if (!ok && pd_bad++ < 5)
        printf("FAIL pseudo-device: a %s copy of %zu bytes from %s to %s memory\n",
               kind == KB_COPY_H2D ? "H2D" : kind == KB_COPY_D2H ? "D2H" : "D2D", bytes,
               sd ? "device" : "host", dd ? "device" : "host");
    pd_open(true);
    memmove(dst, src, bytes);
    pd_open(false);
    return KILN_OK;
}

static kiln_status pd_zero(void *dst, size_t bytes, void *stream) {
    (void)stream;
    if (bytes && !pd_is_dev(dst))
        pd_bad++;
    pd_open(true);
    memset(dst, 0, bytes);
    pd_open(false);
    return KILN_OK;
}

static kiln_status pd_sync(void *stream) {
    (void)stream;
    pd_syncs++;
    return KILN_OK;
}

static bool pd_is_device_ptr(const void *p) { return pd_is_dev(p); }

static kiln_status pd_describe(char *target, size_t tcap, char *libs, size_t lcap) {
    snprintf(target, tcap, "pseudo");
    snprintf(libs, lcap, "none");
    return KILN_OK;
}

/* Its kernels: the CPU reference of each op, run with device memory
 * opened; they take no string, sequence or optional (as no device kernel
 * does) and there is none for the ops in `pd_missing`. */
static const char *const pd_missing[] = {"Hardmax"};

typedef struct pd_box {
    const kb_kernel *k;
    void *p;
} pd_box;

static const kb_kernel *pd_ref(const kn_node *n) {
    const kb_kernel *k = kb_cpu_backend.kernel_find(n->domain, n->op_type, "ref");
    if (!k && kb_cpu_backend.kernels_for(n->domain, n->op_type, &k, 1) < 1)
        k = NULL;
    return k;
}

static bool host_type(kiln_dtype t) { return t == KILN_DTYPE_STRING || kn_dtype_is_handle((int)t); }

static bool pd_supports(const kn_node *n, const kn_tinfo *in, int n_in, const kn_tinfo *out,
                        int n_out) {
    for (int j = 0; j < n_in; j++)
        if (host_type(in[j].dtype))
            return false;
    for (int j = 0; j < n_out; j++)
        if (host_type(out[j].dtype))
            return false;
    const kb_kernel *k = pd_ref(n);
    return k && (!k->supports || k->supports(n, in, n_in, out, n_out));
}

static kiln_status pd_init(const kn_node *n, void **state) {
    pd_box *b = kn_calloc(1, sizeof *b);
    if (!b)
        return KILN_ERR_OUT_OF_MEMORY;
    b->k = pd_ref(n);
    kiln_status st = b->k && b->k->init ? b->k->init(n, &b->p) : KILN_OK;
    if (st != KILN_OK)
        kn_free(b);
    else
        *state = b;
    return st;
}

static void pd_fini(void *state) {
    pd_box *b = state;
    if (b->k->fini && b->p)
        b->k->fini(b->p);
    kn_free(b);
}

static kiln_status pd_prepare(const void *state, const kn_node *n, const kb_tensor *in, int n_in,
                              const kb_tensor *out, int n_out, void **inst, size_t *ws) {
    const pd_box *sb = state;
    pd_box *ib = kn_calloc(1, sizeof *ib);
    if (!ib)
        return KILN_ERR_OUT_OF_MEMORY;
    ib->k = sb->k;
    *ws = 0;
    pd_open(true);
    kiln_status st = sb->k->prepare ? sb->k->prepare(sb->p, n, in, n_in, out, n_out, &ib->p, ws)
                                    : KILN_OK;
    pd_open(false);
    if (st != KILN_OK)
        kn_free(ib);
    else
        *inst = ib;
    return st;
}

static void pd_release(void *inst) {
    pd_box *ib = inst;
    if (ib->k->release && ib->p)
        ib->k->release(ib->p);
    kn_free(ib);
}

static kiln_status pd_run(const kb_run *r) {
    const pd_box *sb = r->state, *ib = r->inst;
    for (int j = 0; j < r->n_in + r->n_out; j++) {
        const kb_tensor *t = j < r->n_in ? &r->in[j] : &r->out[j - r->n_in];
        if (t->data && !pd_is_dev(t->data) && pd_bad++ < 5)
            printf("FAIL pseudo-device: layer '%s' (%s) got host memory for %s %d\n",
                   r->node->name, r->node->op_type, j < r->n_in ? "input" : "output",
                   j < r->n_in ? j : j - r->n_in);
    }
    kb_run q = *r;
    q.state = sb->p;
    q.inst = ib->p;
    q.stream = NULL;
    pd_dev_runs++;
    pd_open(true);
    kiln_status st = sb->k->run(&q);
    pd_open(false);
    return st;
}

static struct {
    kb_kernel k;
    char op[64], dom[64];
} pd_wrap[PD_WRAP];
static int pd_n_wrap;

static const kb_kernel *pd_kernel(const char *domain, const char *op_type) {
    for (size_t i = 0; i < KN_ARRAY_LEN(pd_missing); i++)
        if (!domain[0] && strcmp(op_type, pd_missing[i]) == 0)
            return NULL;
    const kb_kernel *any;
    if (kb_cpu_backend.kernels_for(domain, op_type, &any, 1) < 1)
        return NULL;
    for (int i = 0; i < pd_n_wrap; i++)
        if (strcmp(pd_wrap[i].op, op_type) == 0 && strcmp(pd_wrap[i].dom, domain) == 0)
            return &pd_wrap[i].k;
    if (pd_n_wrap == PD_WRAP || strlen(op_type) >= 64 || strlen(domain) >= 64)
        return NULL;
    int i = pd_n_wrap++;
    snprintf(pd_wrap[i].op, sizeof pd_wrap[i].op, "%s", op_type);
    snprintf(pd_wrap[i].dom, sizeof pd_wrap[i].dom, "%s", domain);
    pd_wrap[i].k = (kb_kernel){pd_wrap[i].op, pd_wrap[i].dom, "ref", pd_supports, pd_init,
                               pd_fini, pd_prepare, pd_release, pd_run};
    return &pd_wrap[i].k;
}

static int pd_kernels_for(const char *domain, const char *op_type, const kb_kernel **out, int cap) {
    const kb_kernel *k = pd_kernel(domain, op_type);
    if (k && cap > 0)
        out[0] = k;
    return k ? 1 : 0;
}

static const kb_kernel *pd_kernel_find(const char *domain, const char *op_type,
                                       const char *tactic) {
    return strcmp(tactic, "ref") == 0 ? pd_kernel(domain, op_type) : NULL;
}

static kiln_status pd_time(const kb_kernel *k, const kb_run *r, int reps, double *ms) {
    (void)k, (void)r, (void)reps;
    *ms = 1.0;
    return KILN_OK;
}

static const kb_backend pd_backend = {
    .name = "pseudo-device",
    .describe = pd_describe,
    .kernels_for = pd_kernels_for,
    .kernel_find = pd_kernel_find,
    .alloc = pd_alloc,
    .free = pd_free,
    .copy = pd_copy,
    .memset_zero = pd_zero,
    .sync = pd_sync,
    .time_kernel = pd_time,
    .is_device_ptr = pd_is_device_ptr,
};

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

static void compare(const char *backend, const result *want) {
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
    /* Hardmax, StringNormalizer, Cast to string, SequenceConstruct and
     * SequenceAt on the host (SequenceLength is a shape-time value), X, a and
     * Y copied to the host once each, b and e back */
    printf("%s: %d layers on the host, %d ToHost, %d ToDevice\n", backend, got.host_layers,
           got.to_host, got.to_device);
    KT_CHECK(got.host_layers == 5);
    KT_CHECK(got.to_host == 3);
    KT_CHECK(got.to_device == 2);
}

int main(void) {
    result want;
    printf("cpu:\n");
    KT_CHECK(run_on("cpu", &want));
    KT_CHECK(want.host_layers == 0 && want.to_host == 0 && want.to_device == 0);
    KT_CHECK(strcmp(want.su[1], "KILN") == 0);
    kb_test_backend = &pd_backend;
    compare("pseudo-device", &want);
    printf("pseudo-device: %d copies, %d waits, %d device layer runs, %d wrong places\n",
           pd_copies, pd_syncs, pd_dev_runs, pd_bad);
    KT_CHECK(pd_bad == 0 && pd_copies > 0 && pd_dev_runs > 0);
    kb_test_backend = NULL;
#ifdef KILN_HAVE_CUDA
    char target[64], libs[128];
    if (kb_cuda_backend.describe(target, sizeof target, libs, sizeof libs) == KILN_OK) {
        printf("device %s, %s\n", target, libs);
        compare("cuda", &want);
    } else {
        printf("cuda: skipped, no CUDA device (%s)\n", kiln_last_error());
    }
#else
    printf("cuda: not in this build\n");
#endif
    printf("%d passed, %d failed\n", kt_pass, kt_fail);
    return kt_fail ? 1 : 0;
}
