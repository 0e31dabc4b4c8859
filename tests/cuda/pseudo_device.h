/* pseudo_device.h - a pseudo-device backend for tests (test_host_place.c,
 * run_node_tests --backend pseudo-device): the CPU's reference kernels, but
 * memory of its own that the host cannot read (mprotect PROT_NONE) except
 * while one of its kernels or copies runs, so a layer placed on the host
 * that reads device memory crashes, and every copy and every device
 * layer's pointers are checked against where they point (pd_bad counts
 * what is wrong). Register it as kb_test_backend to build and load plans
 * for it. Single-threaded use only. */
#ifndef KILN_TEST_PSEUDO_DEVICE_H
#define KILN_TEST_PSEUDO_DEVICE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/backend.h"
#include "runtime/exec.h"

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
 * does) and there is none for the ONNX ops named in pd_missing (NULL
 * ends it; a caller may point it at its own list). */
static const char *const pd_missing_none[] = {NULL};
static const char *const *pd_missing = pd_missing_none;

static const kb_backend pd_backend;

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
    if (k && kx_ctl_syncs(k) && kx_ctl_needs_host(&pd_backend, n, in, n_in, out, n_out))
        return false; /* as the CUDA control kernels decline it */
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
    /* value inputs (an If's condition, Pad's pads) may be host memory: a
     * graph input that is a shape tensor is bound there, and device
     * kernels read them from .host */
    const kn_op_schema *sch = kn_op_find(r->node->domain, r->node->op_type);
    uint32_t values = sch ? sch->value_inputs : 0;
    for (int j = 0; j < r->n_in + r->n_out; j++) {
        const kb_tensor *t = j < r->n_in ? &r->in[j] : &r->out[j - r->n_in];
        if (j < r->n_in && ((j < 32 && (values >> j & 1u)) || t->data == t->host))
            continue; /* a shape tensor bound on the host is its own host value */
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
    for (size_t i = 0; pd_missing[i]; i++)
        if (!domain[0] && strcmp(op_type, pd_missing[i]) == 0)
            return NULL;
    /* the ops of host-only values have no device kernel (as on CUDA) */
    if (!domain[0] && (strncmp(op_type, "Sequence", 8) == 0 || strncmp(op_type, "Optional", 8) == 0 ||
                       strcmp(op_type, "SplitToSequence") == 0 ||
                       strcmp(op_type, "ConcatFromSequence") == 0 ||
                       strcmp(op_type, "StringNormalizer") == 0))
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

#endif
