/* test_cuda_control.c - If, Loop and Scan on the CUDA backend (issue 32):
 * small networks built once for the cpu backend and once for the cuda
 * backend, run on the same inputs, outputs compared element by element
 * (|got - want| <= 1e-5 (1 + |want|)) and shapes exactly, and the
 * control-flow layers checked to run the CUDA tactic. Cases:
 *   - If on a run-time condition (a graph input), both values, its
 *     branches reading the main graph's input;
 *   - Loop with a trip count, a condition computed on the device from the
 *     iteration number (an early exit), a loop-carried value and a scan
 *     output, reading the main graph's input;
 *   - an If nested in a Loop's body, its condition computed from the
 *     iteration number (a host value of the body);
 *   - Scan over the rows of an input (state and scan output), one reversed.
 * Each case also runs on a pseudo-device backend (below), so that
 * control.c's device paths are checked without a GPU.
 * Each CUDA context runs twice (the second run after the first's results,
 * with graphs left on: the plan must not capture). Without a CUDA device it
 * prints "skipped: ..." and exits 77; KILN_TEST_DRY=1 builds the second
 * engine for the cpu backend too (checks the networks and the comparison,
 * not the CUDA kernels). */
#include "test.h"

#include <math.h>
#include <stdint.h>

#include "backends/backend.h"
#include "graph/control.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_runtime.h"
#include "runtime/exec.h"

#define IN(...) ((const char *const[]){__VA_ARGS__})
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static const char *second = "cuda";

/* ---------------- networks ---------------- */

static kn_net *new_net(void) {
    kn_net *g = NULL;
    KT_OK(kn_net_new(&g));
    return g;
}

static int op(kn_net *g, const char *name, const char *type, int n_in, const char *const *in,
              const char *out) {
    int idx = -1;
    const char *outs[1] = {out};
    KT_OK(kiln_network_add_node(g, name, type, "", 16, n_in, in, 1, outs, &idx));
    return idx;
}

static void fscalar(kn_net *g, const char *name, float v) {
    KT_OK(kiln_network_add_constant(g, name, KILN_DTYPE_FLOAT, 0, NULL, &v, sizeof v));
}

static void iscalar(kn_net *g, const char *name, int64_t v) {
    KT_OK(kiln_network_add_constant(g, name, KILN_DTYPE_INT64, 0, NULL, &v, sizeof v));
}

/* Give node nd of g the subgraph attribute `name` (takes body). */
static void attach(kn_net *g, int nd, const char *name, kn_net *body) {
    kn_node *n = &g->nodes[nd];
    kn_attr *a = realloc(n->attrs, (size_t)(n->n_attr + 1) * sizeof *a);
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

/* ---------------- engines ---------------- */

typedef struct tval {
    const char *name;
    kiln_dtype dt;
    int rank;
    int64_t dims[KILN_MAX_DIMS];
    const void *data;
} tval;

static size_t tv_bytes(const tval *t) {
    return (size_t)kn_numel(t->rank, t->dims) * kiln_dtype_size(t->dt);
}

/* A plan of net for backend; a bool input (a condition) gets the values
 * 0..1 in the profile, its own value as opt. */
static kiln_engine *engine_for(kn_net *net, const char *backend, const tval *in, int n_in) {
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    kiln_engine *e = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    if (!cfg)
        return NULL;
    KT_OK(kiln_builder_config_set_backend(cfg, backend));
    kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_NO_TIMING);
    int prof = 0;
    KT_OK(kiln_builder_config_add_profile(cfg, &prof));
    for (int i = 0; i < n_in; i++)
        if (in[i].dt == KILN_DTYPE_BOOL) {
            const uint8_t lo = 0, hi = 1;
            KT_OK(kiln_builder_config_set_input_values(cfg, prof, in[i].name, KILN_DTYPE_BOOL, 1,
                                                       &lo, in[i].data, &hi));
        }
    kiln_status st = kiln_build_serialized(net, cfg, &plan, &size);
    KT_OK(st);
    kiln_builder_config_destroy(cfg);
    if (st != KILN_OK)
        return NULL;
    KT_OK(kiln_engine_load(plan, size, &e));
    kiln_free(plan);
    return e;
}

/* Run engine e on inputs in (device copies where it is not the host's, a
 * shape-tensor input from host memory) into host buffers out[k] of cap
 * bytes, with their shapes; `runs` runs, the outputs poisoned before each. */
static bool run_engine(kiln_engine *e, const tval *in, int n_in, const char *const *outs, int n_out,
                       void **out, size_t cap, int *rank, int64_t (*dims)[KILN_MAX_DIMS], int runs) {
    bool dev = strcmp(kiln_engine_backend(e), "cpu") != 0, ok = true;
    kiln_context *c = NULL;
    KT_OK(kiln_context_create(e, &c));
    if (!c)
        return false;
    void *din[8] = {0}, *dout[8] = {0};
    for (int i = 0; i < n_in && ok; i++) {
        KT_OK(kiln_context_set_input_shape(c, in[i].name, in[i].rank, in[i].dims));
        const void *p = in[i].data;
        if (dev && !kiln_engine_tensor_is_shape_input(e, in[i].name)) {
            KT_OK(kiln_engine_alloc(e, tv_bytes(&in[i]) + 4, &din[i]));
            KT_OK(kiln_engine_copy(e, din[i], in[i].data, tv_bytes(&in[i]), KILN_COPY_TO_DEVICE));
            p = din[i];
        }
        ok = p && kiln_context_set_tensor_address(c, in[i].name, (void *)p) == KILN_OK;
    }
    for (int k = 0; k < n_out && ok; k++) {
        if (dev)
            KT_OK(kiln_engine_alloc(e, cap, &dout[k]));
        ok = kiln_context_set_tensor_address(c, outs[k], dev ? dout[k] : out[k]) == KILN_OK;
    }
    KT_CHECK(ok);
    for (int r = 0; r < runs && ok; r++) {
        for (int k = 0; k < n_out; k++) {
            memset(out[k], 0xff, cap); /* NaN in every float */
            if (dev)
                KT_OK(kiln_engine_copy(e, dout[k], out[k], cap, KILN_COPY_TO_DEVICE));
        }
        kiln_status st = kiln_context_enqueue(c, NULL);
        KT_OK(st);
        if (st == KILN_OK)
            st = kiln_context_synchronize(c, NULL);
        ok = st == KILN_OK;
        for (int k = 0; k < n_out && ok; k++) {
            rank[k] = kiln_context_tensor_shape(c, outs[k], dims[k]);
            if (dev)
                KT_OK(kiln_engine_copy(e, out[k], dout[k], cap, KILN_COPY_TO_HOST));
        }
    }
    for (int i = 0; i < 8; i++) {
        if (din[i])
            kiln_engine_free(e, din[i]);
        if (dout[i])
            kiln_engine_free(e, dout[i]);
    }
    kiln_context_destroy(c);
    return ok;
}


/* ---------------- a pseudo-device backend ----------------
 * The CPU's kernels and host memory, but a backend of its own: the executor
 * and control.c take their device paths (constants and host values copied
 * to "device" memory, values staged, conditions read back), and every copy
 * is checked against the places of its source and destination. So the
 * device paths of control.c run in every build, GPU or not; test_cuda's
 * CUDA engines then check the CUDA kernels themselves. */

enum { FD_MAX = 1 << 14 };
static struct {
    uintptr_t lo, hi;
} fd_blocks[FD_MAX];
static int fd_n, fd_bad_copies, fd_copies, fd_syncs;

static bool fd_is_dev(const void *p) {
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < fd_n; i++)
        if (a >= fd_blocks[i].lo && a < fd_blocks[i].hi)
            return true;
    return false;
}

static kiln_status fd_alloc(size_t bytes, void **out) {
    if (fd_n == FD_MAX)
        return KILN_ERR_OUT_OF_MEMORY;
    void *p = kn_aligned_alloc(bytes ? bytes : 1);
    if (!p)
        return KILN_ERR_OUT_OF_MEMORY;
    fd_blocks[fd_n].lo = (uintptr_t)p;
    fd_blocks[fd_n].hi = (uintptr_t)p + (bytes ? bytes : 1);
    fd_n++;
    *out = p;
    return KILN_OK;
}

static void fd_free(void *p) {
    for (int i = 0; p && i < fd_n; i++)
        if (fd_blocks[i].lo == (uintptr_t)p) {
            fd_blocks[i] = fd_blocks[--fd_n];
            break;
        }
    kn_aligned_free(p);
}

static kiln_status fd_copy(void *dst, const void *src, size_t bytes, kb_copy_kind kind,
                           void *stream) {
    (void)stream;
    if (!bytes)
        return KILN_OK;
    bool sd = fd_is_dev(src), dd = fd_is_dev(dst);
    bool ok = kind == KB_COPY_H2D ? !sd && dd : kind == KB_COPY_D2H ? sd && !dd : sd && dd;
    fd_copies++;
    if (!ok) {
        if (fd_bad_copies++ < 5)
            printf("FAIL pseudo-device: a %s copy of %zu bytes from %s to %s memory\n",
                   kind == KB_COPY_H2D ? "H2D" : kind == KB_COPY_D2H ? "D2H" : "D2D", bytes,
                   sd ? "device" : "host", dd ? "device" : "host");
    }
    memmove(dst, src, bytes);
    return KILN_OK;
}

static kiln_status fd_zero(void *dst, size_t bytes, void *stream) {
    (void)stream;
    if (bytes && !fd_is_dev(dst))
        fd_bad_copies++;
    memset(dst, 0, bytes);
    return KILN_OK;
}

static kiln_status fd_sync(void *stream) {
    (void)stream;
    fd_syncs++;
    return KILN_OK;
}

static bool fd_is_device_ptr(const void *p) { return fd_is_dev(p); }

extern const kb_backend fd_backend;

static kiln_status fd_ctl_prepare(const void *state, const kn_node *node, const kb_tensor *in,
                                  int n_in, const kb_tensor *out, int n_out, void **inst,
                                  size_t *workspace) {
    (void)state, (void)out, (void)n_out;
    return kx_ctl_prepare(&fd_backend, node, in, n_in, inst, workspace);
}

static const kb_kernel fd_control[] = {
    {"If", "", "ref", NULL, NULL, NULL, fd_ctl_prepare, kx_ctl_release, kx_ctl_run_if},
    {"Loop", "", "ref", NULL, NULL, NULL, fd_ctl_prepare, kx_ctl_release, kx_ctl_run_loop},
    {"Scan", "", "ref", NULL, NULL, NULL, fd_ctl_prepare, kx_ctl_release, kx_ctl_run_scan},
};

static const kb_kernel *fd_control_of(const char *domain, const char *op_type) {
    for (size_t i = 0; !domain[0] && i < KN_ARRAY_LEN(fd_control); i++)
        if (strcmp(fd_control[i].op_type, op_type) == 0)
            return &fd_control[i];
    return NULL;
}

static int fd_kernels_for(const char *domain, const char *op_type, const kb_kernel **out, int cap) {
    const kb_kernel *k = fd_control_of(domain, op_type);
    if (k) {
        if (cap > 0)
            out[0] = k;
        return 1;
    }
    return kb_cpu_backend.kernels_for(domain, op_type, out, cap);
}

static const kb_kernel *fd_kernel_find(const char *domain, const char *op_type,
                                       const char *tactic) {
    const kb_kernel *k = fd_control_of(domain, op_type);
    return k ? k : kb_cpu_backend.kernel_find(domain, op_type, tactic);
}

const kb_backend fd_backend = {
    .name = "pseudo-device",
    .kernels_for = fd_kernels_for,
    .kernel_find = fd_kernel_find,
    .alloc = fd_alloc,
    .free = fd_free,
    .copy = fd_copy,
    .memset_zero = fd_zero,
    .sync = fd_sync,
    .is_device_ptr = fd_is_device_ptr,
};

/* Run net on the pseudo-device: graph inputs in "device" memory (shape
 * tensors in host memory), outputs read back into out[k] (cap bytes). */
static bool run_pseudo(kn_net *net, const tval *in, int n_in, void **out, size_t cap, int *rank,
                       int64_t (*dims)[KILN_MAX_DIMS]) {
    kx_program p;
    kx_ctx c;
    void *din[8] = {0};
    if (kn_net_toposort(net) != KILN_OK || kx_program_init_on(&p, net, 1, &fd_backend) != KILN_OK) {
        printf("FAIL pseudo-device program: %s\n", kiln_last_error());
        kt_fail++;
        return false;
    }
    KT_CHECK(p.no_graphs);
    bool ok = kx_ctx_init(&c, &p) == KILN_OK;
    for (int i = 0; ok && i < n_in; i++) {
        int k = -1;
        for (int j = 0; j < net->n_inputs; j++)
            if (strcmp(net->tensors[net->inputs[j]].name, in[i].name) == 0)
                k = j;
        ok = k >= 0 && kx_ctx_set_input_shape(&c, k, in[i].rank, in[i].dims) == KILN_OK;
        int t = ok ? net->inputs[k] : 0;
        const void *ptr = in[i].data;
        if (ok && !(net->tensors[t].flags & KN_T_HOST)) {
            ok = fd_alloc(tv_bytes(&in[i]), &din[i]) == KILN_OK;
            if (ok)
                memcpy(din[i], in[i].data, tv_bytes(&in[i]));
            ptr = din[i];
        }
        if (ok)
            kx_ctx_bind(&c, t, (void *)ptr);
    }
    for (int r = 0; ok && r < 2; r++) /* twice: the second on prepared bodies */
        ok = kx_ctx_run(&c) == KILN_OK;
    if (!ok) {
        printf("FAIL pseudo-device run: %s\n", kiln_last_error());
        kt_fail++;
    }
    for (int k = 0; ok && k < net->n_outputs; k++) {
        int t = net->outputs[k];
        rank[k] = c.ti[t].rank;
        memcpy(dims[k], c.ti[t].dims, sizeof dims[k]);
        size_t bytes = (size_t)kn_numel(c.ti[t].rank, c.ti[t].dims) * kiln_dtype_size(c.ti[t].dtype);
        if (bytes > cap || !fd_is_dev(c.addr[t]))
            ok = false;
        else
            memcpy(out[k], c.addr[t], bytes);
    }
    for (int i = 0; i < 8; i++)
        if (din[i])
            fd_free(din[i]);
    kx_ctx_fini(&c);
    kx_program_fini(&p);
    KT_CHECK(ok);
    return ok;
}

static int n_cases, n_compared;

/* Build net for the cpu and the second backend, run both on `in`, compare
 * the float outputs `outs`. `control` names the control-flow op whose layer
 * must take the CUDA tactic. */
static void compare(const char *what, kn_net *net, const char *control, const tval *in, int n_in,
                    const char *const *outs, int n_out) {
    n_cases++;
    KT_OK(kn_net_resolve_captures(net, 0));
    kiln_engine *ec = engine_for(net, "cpu", in, n_in), *eg = engine_for(net, second, in, n_in);
    if (!ec || !eg) {
        printf("FAIL %s: no engine\n", what);
        kt_fail++;
        kiln_engine_destroy(ec);
        kiln_engine_destroy(eg);
        return;
    }
    if (strcmp(second, "cuda") == 0) {
        bool found = false;
        for (int l = 0; l < kiln_engine_num_layers(eg); l++)
            if (strcmp(kiln_engine_layer_op(eg, l), control) == 0) {
                found = true;
                KT_CHECK(strcmp(kiln_engine_layer_tactic(eg, l), "cuda") == 0);
            }
        if (!found)
            printf("FAIL %s: no %s layer in the CUDA plan\n", what, control);
        KT_CHECK(found);
    }
    enum { CAP = 4096 };
    void *a[8], *b[8];
    int ra[8], rb[8];
    int64_t da[8][KILN_MAX_DIMS], db[8][KILN_MAX_DIMS];
    for (int k = 0; k < n_out; k++) {
        a[k] = calloc(1, CAP);
        b[k] = calloc(1, CAP);
    }
    bool ok = run_engine(ec, in, n_in, outs, n_out, a, CAP, ra, da, 1) &&
              run_engine(eg, in, n_in, outs, n_out, b, CAP, rb, db, 2);
    KT_CHECK(ok);
    for (int pass = 0; pass < 2 && ok; pass++) {
        const char *other = second;
        if (pass == 1) { /* the same against the pseudo-device */
            other = "pseudo-device";
            if (!run_pseudo(net, in, n_in, b, CAP, rb, db))
                break;
        }
    for (int k = 0; ok && k < n_out; k++) {
        bool same = ra[k] == rb[k] && ra[k] >= 0 &&
                    memcmp(da[k], db[k], (size_t)ra[k] * sizeof da[k][0]) == 0;
        if (!same) {
            printf("FAIL %s: output '%s' has rank %d on cpu, %d on %s (or dims differ)\n", what,
                   outs[k], ra[k], rb[k], other);
            kt_fail++;
            continue;
        }
        int64_t n = kn_numel(ra[k], da[k]);
        int bad = 0;
        for (int64_t i = 0; i < n && (size_t)i * 4 < CAP; i++) {
            float x = ((float *)a[k])[i], y = ((float *)b[k])[i];
            if (!(fabsf(x - y) <= 1e-5f * (1.f + fabsf(x)))) {
                if (bad++ < 3)
                    printf("FAIL %s: output '%s'[%lld]: cpu %g, %s %g\n", what, outs[k],
                           (long long)i, (double)x, other, (double)y);
            }
        }
        if (bad)
            kt_fail++;
        else
            kt_pass++;
        n_compared += (int)n;
    }
    }
    for (int k = 0; k < n_out; k++) {
        free(a[k]);
        free(b[k]);
    }
    kiln_engine_destroy(ec);
    kiln_engine_destroy(eg);
}

/* ---------------- cases ---------------- */

static const float xs[12] = {1, -2, 3.5f, 0, 0.25f, -1.5f, 2, 7, -3, 0.5f, 1.25f, -0.75f};

/* y = If(c, x + 1, x * 2), c a graph input, x [3, 4]. */
static void case_if(void) {
    for (int v = 0; v < 2; v++) {
        kn_net *net = new_net();
        KT_OK(kiln_network_add_input(net, "c", KILN_DTYPE_BOOL, 0, NULL, NULL));
        KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, DIMS(3, 4), NULL));
        int nf = op(net, "if", "If", 1, IN("c"), "y");
        kn_net *t = new_net(), *e = new_net();
        fscalar(t, "one", 1.f);
        op(t, "add", "Add", 2, IN("x", "one"), "yt");
        KT_OK(kiln_network_mark_output(t, "yt"));
        fscalar(e, "two", 2.f);
        op(e, "mul", "Mul", 2, IN("x", "two"), "ye");
        op(e, "relu", "Relu", 1, IN("ye"), "ye2");
        KT_OK(kiln_network_mark_output(e, "ye2"));
        attach(net, nf, "then_branch", t);
        attach(net, nf, "else_branch", e);
        KT_OK(kiln_network_mark_output(net, "y"));
        uint8_t c = (uint8_t)v;
        tval in[2] = {{"c", KILN_DTYPE_BOOL, 0, {0}, &c}, {"x", KILN_DTYPE_FLOAT, 2, {3, 4}, xs}};
        compare(v ? "If, run-time condition true" : "If, run-time condition false", net, "If", in,
                2, IN("y"), 1);
        kn_net_free(net);
    }
}

/* s_final, scan = Loop(M, true, s0) with body s = s * 0.5 + x (x read from
 * the main graph), scan out Sigmoid(s), cond_out = i < limit computed on
 * the device; nested: s = If(i < limit, s + x, s - x) instead and
 * cond_out stays true. */
static void case_loop(int64_t m, int64_t limit, bool nested) {
    kn_net *net = new_net();
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 1, DIMS(6), NULL));
    KT_OK(kiln_network_add_input(net, "s0", KILN_DTYPE_FLOAT, 1, DIMS(6), NULL));
    iscalar(net, "M", m);
    uint8_t t = 1;
    KT_OK(kiln_network_add_constant(net, "cond0", KILN_DTYPE_BOOL, 0, NULL, &t, 1));
    const char *louts[2] = {"s_final", "scan"};
    int nl = -1;
    KT_OK(kiln_network_add_node(net, "loop", "Loop", "", 16, 3, IN("M", "cond0", "s0"), 2, louts,
                                &nl));
    kn_net *b = new_net();
    KT_OK(kiln_network_add_input(b, "i", KILN_DTYPE_INT64, 0, NULL, NULL));
    KT_OK(kiln_network_add_input(b, "c_in", KILN_DTYPE_BOOL, 0, NULL, NULL));
    KT_OK(kiln_network_add_input(b, "s_in", KILN_DTYPE_FLOAT, 1, DIMS(6), NULL));
    iscalar(b, "limit", limit);
    if (nested) {
        op(b, "less", "Less", 2, IN("i", "limit"), "inner_c");
        int nf = op(b, "inner_if", "If", 1, IN("inner_c"), "s_out");
        kn_net *tb = new_net(), *eb = new_net();
        op(tb, "add", "Add", 2, IN("s_in", "x"), "s_t");
        KT_OK(kiln_network_mark_output(tb, "s_t"));
        op(eb, "sub", "Sub", 2, IN("s_in", "x"), "s_e");
        KT_OK(kiln_network_mark_output(eb, "s_e"));
        attach(b, nf, "then_branch", tb);
        attach(b, nf, "else_branch", eb);
        op(b, "keep", "Identity", 1, IN("c_in"), "c_out");
    } else {
        op(b, "less", "Less", 2, IN("i", "limit"), "c_out");
        fscalar(b, "half", 0.5f);
        op(b, "mul", "Mul", 2, IN("s_in", "half"), "s_h");
        op(b, "add", "Add", 2, IN("s_h", "x"), "s_out");
    }
    op(b, "sig", "Sigmoid", 1, IN("s_out"), "scan_out");
    KT_OK(kiln_network_mark_output(b, "c_out"));
    KT_OK(kiln_network_mark_output(b, "s_out"));
    KT_OK(kiln_network_mark_output(b, "scan_out"));
    attach(net, nl, "body", b);
    KT_OK(kiln_network_mark_output(net, "s_final"));
    KT_OK(kiln_network_mark_output(net, "scan"));
    tval in[2] = {{"x", KILN_DTYPE_FLOAT, 1, {6}, xs}, {"s0", KILN_DTYPE_FLOAT, 1, {6}, xs + 6}};
    char what[128];
    snprintf(what, sizeof what, "Loop M %lld, %s %lld", (long long)m,
             nested ? "nested If on i <" : "cond i <", (long long)limit);
    compare(what, net, "Loop", in, 2, IN("s_final", "scan"), 2);
    kn_net_free(net);
}

/* s_final, ys = Scan(s0, X) over X [5, 3] (rows; reversed when rev), body
 * s = s + x_t, y = Tanh(s) * w with w read from the main graph. */
static void case_scan(bool rev) {
    kn_net *net = new_net();
    KT_OK(kiln_network_add_input(net, "s0", KILN_DTYPE_FLOAT, 1, DIMS(3), NULL));
    KT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_FLOAT, 2, DIMS(4, 3), NULL));
    const float w[3] = {0.5f, -1.f, 2.f};
    KT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_FLOAT, 1, DIMS(3), w, sizeof w));
    const char *souts[2] = {"s_final", "ys"};
    int ns = -1;
    KT_OK(kiln_network_add_node(net, "scan", "Scan", "", 16, 2, IN("s0", "X"), 2, souts, &ns));
    KT_OK(kn_node_set_int(&net->nodes[ns], "num_scan_inputs", 1));
    if (rev) {
        const int64_t dir[1] = {1};
        KT_OK(kn_node_set_ints(&net->nodes[ns], "scan_input_directions", dir, 1));
    }
    kn_net *b = new_net();
    KT_OK(kiln_network_add_input(b, "s_in", KILN_DTYPE_FLOAT, 1, DIMS(3), NULL));
    KT_OK(kiln_network_add_input(b, "x_t", KILN_DTYPE_FLOAT, 1, DIMS(3), NULL));
    op(b, "add", "Add", 2, IN("s_in", "x_t"), "s_out");
    op(b, "tanh", "Tanh", 1, IN("s_out"), "th");
    op(b, "mul", "Mul", 2, IN("th", "w"), "y");
    KT_OK(kiln_network_mark_output(b, "s_out"));
    KT_OK(kiln_network_mark_output(b, "y"));
    attach(net, ns, "body", b);
    KT_OK(kiln_network_mark_output(net, "s_final"));
    KT_OK(kiln_network_mark_output(net, "ys"));
    tval in[2] = {{"s0", KILN_DTYPE_FLOAT, 1, {3}, xs + 9}, {"X", KILN_DTYPE_FLOAT, 2, {4, 3}, xs}};
    compare(rev ? "Scan, reversed" : "Scan", net, "Scan", in, 2, IN("s_final", "ys"), 2);
    kn_net_free(net);
}

int main(void) {
    char target[64], libs[128];
    const char *dry = getenv("KILN_TEST_DRY");
#ifdef KILN_HAVE_CUDA
    bool have = kb_cuda_backend.describe(target, sizeof target, libs, sizeof libs) == KILN_OK;
#else
    bool have = false;
    snprintf(target, sizeof target, "none");
    snprintf(libs, sizeof libs, "no CUDA in this build");
#endif
    if (dry && *dry && strcmp(dry, "0") != 0) {
        second = "cpu";
        printf("dry run: the second engine is a cpu one\n");
    } else if (!have) {
        printf("skipped: no CUDA device (%s)\n", kiln_last_error());
        return 77;
    } else {
        printf("device %s, %s\n", target, libs);
    }
    case_if();
    case_loop(5, 10, false); /* runs its trip count */
    case_loop(6, 2, false);  /* the device condition ends it after 3 */
    case_loop(4, 2, true);   /* an If in the body, on a host value */
    case_scan(false);
    case_scan(true);
    printf("cases %d, elements compared %d; pseudo-device: %d copies (%d of the wrong kind), "
           "%d waits\n",
           n_cases, n_compared, fd_copies, fd_bad_copies, fd_syncs);
    KT_CHECK(fd_bad_copies == 0 && fd_copies > 0);
    printf("%d passed, %d failed\n", kt_pass, kt_fail);
    return kt_fail ? 1 : 0;
}
