/* fast_bench.c - measures the candidate CPU math libraries for kiln's fast
 * tactics (oneDNN vs OpenBLAS + kiln-style im2col) on ResNet-50 convolutions
 * and BERT-base GEMMs, FP32. Standalone (no kiln code), so the figures in
 * docs/decisions.md can be re-taken on any machine:
 *
 *   gcc -O2 -fopenmp -o /tmp/fast_bench bench/cpu/fast_bench.c -ldnnl -lopenblas -lm
 *   /tmp/fast_bench [threads=2] [reps=30]
 *
 * Every figure is the median of `reps` timed runs after 3 warm-up runs. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                   \
    do {                                                                        \
        dnnl_status_t s_ = (x);                                                 \
        if (s_ != dnnl_success) {                                               \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, (int)s_); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

extern void openblas_set_num_threads(int);
extern char *openblas_get_config(void);

static int reps = 30;
static dnnl_engine_t eng;
static dnnl_stream_t strm;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
typedef void (*fn_t)(void *);
static double time_med(fn_t f, void *arg) {
    double t[1000];
    for (int i = 0; i < 3; i++)
        f(arg);
    for (int i = 0; i < reps; i++) {
        double t0 = now_ms();
        f(arg);
        t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmpd);
    return t[reps / 2];
}
static float *rnd(size_t n) {
    float *p = aligned_alloc(64, (n * 4 + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rand() / RAND_MAX - 0.5f;
    return p;
}

/* ---------------- convolution ---------------- */
typedef struct conv {
    int n, c, h, w, k, r, s, st, pad, oh, ow;
} conv;

typedef struct prim_run {
    dnnl_primitive_t p;
    int nargs;
    dnnl_exec_arg_t args[8];
    /* optional reorders around it */
    dnnl_primitive_t pre, post;
    dnnl_exec_arg_t pre_args[2], post_args[2];
} prim_run;

static void run_prim(void *a) {
    prim_run *r = a;
    if (r->pre)
        CK(dnnl_primitive_execute(r->pre, strm, 2, r->pre_args));
    CK(dnnl_primitive_execute(r->p, strm, r->nargs, r->args));
    if (r->post)
        CK(dnnl_primitive_execute(r->post, strm, 2, r->post_args));
    CK(dnnl_stream_wait(strm));
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md, void *h) {
    dnnl_memory_t m;
    CK(dnnl_memory_create(&m, md, eng, h ? h : DNNL_MEMORY_ALLOCATE));
    return m;
}

static const char *impl_name(dnnl_primitive_desc_t pd) {
    const char *s = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
    return s;
}

/* layout: 0 plain nchw src/dst, 1 any (blocked) src/dst, 2 nhwc */
static double bench_conv(const conv *c, int layout, int with_reorders, char *impl, float *x,
                        float *wt, float *b, float *y) {
    dnnl_dims_t sd = {c->n, c->c, c->h, c->w}, wd = {c->k, c->c, c->r, c->s}, bd = {c->k},
                dd = {c->n, c->k, c->oh, c->ow}, strides = {c->st, c->st},
                pads = {c->pad, c->pad};
    dnnl_memory_desc_t smd, wmd, bmd, dmd, s_user, w_user, d_user;
    dnnl_format_tag_t tag = layout == 0 ? dnnl_nchw : layout == 1 ? dnnl_format_tag_any : dnnl_nhwc;
    CK(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, tag));
    CK(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, tag));
    CK(dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_x));
    CK(dnnl_memory_desc_init_by_tag(&s_user, 4, sd, dnnl_f32, layout == 2 ? dnnl_nhwc : dnnl_nchw));
    CK(dnnl_memory_desc_init_by_tag(&d_user, 4, dd, dnnl_f32, layout == 2 ? dnnl_nhwc : dnnl_nchw));
    CK(dnnl_memory_desc_init_by_tag(&w_user, 4, wd, dnnl_f32, dnnl_oihw));
    dnnl_convolution_desc_t cd;
    CK(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                          &smd, &wmd, &bmd, &dmd, strides, pads, pads));
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    CK(dnnl_primitive_attr_create(&attr));
    CK(dnnl_post_ops_create(&po));
    CK(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0.f, 0.f));
    CK(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_primitive_desc_t pd;
    CK(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
    snprintf(impl, 64, "%s", impl_name(pd));
    const dnnl_memory_desc_t *psrc = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *pw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *pdst = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    /* weights reordered once, untimed */
    dnnl_memory_t wu = mem(&w_user, wt), wp = mem(pw, NULL);
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t rp;
    CK(dnnl_reorder_primitive_desc_create(&rpd, &w_user, eng, pw, eng, NULL));
    CK(dnnl_primitive_create(&rp, rpd));
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, wu}, {DNNL_ARG_TO, wp}};
    CK(dnnl_primitive_execute(rp, strm, 2, ra));
    CK(dnnl_stream_wait(strm));
    prim_run r;
    memset(&r, 0, sizeof r);
    dnnl_memory_t su = mem(&s_user, x), du = mem(&d_user, y);
    dnnl_memory_t sp = mem(psrc, NULL), dp = mem(pdst, NULL);
    CK(dnnl_primitive_create(&r.p, pd));
    r.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, sp};
    r.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wp};
    r.args[2] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem(&bmd, b)};
    r.args[3] = (dnnl_exec_arg_t){DNNL_ARG_DST, dp};
    r.nargs = 4;
    if (layout == 1 && with_reorders) {
        dnnl_primitive_desc_t a, z;
        CK(dnnl_reorder_primitive_desc_create(&a, &s_user, eng, psrc, eng, NULL));
        CK(dnnl_reorder_primitive_desc_create(&z, pdst, eng, &d_user, eng, NULL));
        CK(dnnl_primitive_create(&r.pre, a));
        CK(dnnl_primitive_create(&r.post, z));
        r.pre_args[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, su};
        r.pre_args[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, sp};
        r.post_args[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, dp};
        r.post_args[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, du};
    }
    return time_med(run_prim, &r); /* leaks a little per shape: fine for a bench */
}

typedef struct im2col_run {
    const conv *c;
    float *x, *w, *b, *y, *col;
} im2col_run;

/* kiln-style im2col + sgemm per image, then bias+relu epilogue. */
static void run_im2col(void *a) {
    im2col_run *r = a;
    const conv *c = r->c;
    int kk = c->c * c->r * c->s, ohw = c->oh * c->ow;
    for (int n = 0; n < c->n; n++) {
        const float *xn = r->x + (size_t)n * c->c * c->h * c->w;
        float *yn = r->y + (size_t)n * c->k * ohw;
        const float *B = xn;
        if (!(c->r == 1 && c->s == 1 && c->st == 1 && c->pad == 0)) {
            for (int ci = 0; ci < c->c; ci++)
                for (int kr = 0; kr < c->r; kr++)
                    for (int ks = 0; ks < c->s; ks++) {
                        float *dst = r->col + ((size_t)(ci * c->r + kr) * c->s + ks) * ohw;
                        for (int oy = 0; oy < c->oh; oy++) {
                            int iy = oy * c->st - c->pad + kr;
                            for (int ox = 0; ox < c->ow; ox++) {
                                int ix = ox * c->st - c->pad + ks;
                                dst[oy * c->ow + ox] =
                                    (iy >= 0 && iy < c->h && ix >= 0 && ix < c->w)
                                        ? xn[((size_t)ci * c->h + iy) * c->w + ix]
                                        : 0.f;
                            }
                        }
                    }
            B = r->col;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->k, ohw, kk, 1.f, r->w, kk, B, ohw,
                    0.f, yn, ohw);
        for (int k = 0; k < c->k; k++) {
            float bb = r->b[k], *p = yn + (size_t)k * ohw;
            for (int i = 0; i < ohw; i++) {
                float v = p[i] + bb;
                p[i] = v > 0.f ? v : 0.f;
            }
        }
    }
}

static void bench_convs(int nthr) {
    static const struct {
        const char *name;
        int c, h, k, r, st, pad;
    } shapes[] = {
        {"stem 7x7/2 3->64 @224", 3, 224, 64, 7, 2, 3},
        {"1x1 64->256 @56", 64, 56, 256, 1, 1, 0},
        {"1x1 256->64 @56", 256, 56, 64, 1, 1, 0},
        {"3x3 64->64 @56", 64, 56, 64, 3, 1, 1},
        {"3x3/2 128->128 @56", 128, 56, 128, 3, 2, 1},
        {"1x1/2 256->512 @56 (ds)", 256, 56, 512, 1, 2, 0},
        {"3x3 256->256 @14", 256, 14, 256, 3, 1, 1},
        {"1x1 1024->256 @14", 1024, 14, 256, 1, 1, 0},
        {"3x3 512->512 @7", 512, 7, 512, 3, 1, 1},
        {"1x1 512->2048 @7", 512, 7, 2048, 1, 1, 0},
    };
    printf("\n## Convolution (FP32, bias+ReLU fused, %d threads, median ms)\n\n", nthr);
    printf("| shape | batch | GFLOP | dnnl nchw | dnnl blocked (conv only) | dnnl blocked + reorders | "
           "dnnl nhwc | im2col+OpenBLAS | dnnl nchw impl | dnnl blocked impl |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    int batches[2] = {1, 8};
    for (int bi = 0; bi < 2; bi++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            conv c = {batches[bi], shapes[i].c, shapes[i].h, shapes[i].h, shapes[i].k, shapes[i].r,
                      shapes[i].r, shapes[i].st, shapes[i].pad, 0, 0};
            c.oh = (c.h + 2 * c.pad - c.r) / c.st + 1;
            c.ow = c.oh;
            size_t xs = (size_t)c.n * c.c * c.h * c.w, ws = (size_t)c.k * c.c * c.r * c.s,
                   ys = (size_t)c.n * c.k * c.oh * c.ow;
            float *x = rnd(xs), *w = rnd(ws), *b = rnd((size_t)c.k), *y = rnd(ys);
            float *col = rnd((size_t)c.c * c.r * c.s * c.oh * c.ow);
            double gf = 2.0 * ys * c.c * c.r * c.s * 1e-9;
            char i0[64], i1[64], i2[64];
            double t0 = bench_conv(&c, 0, 0, i0, x, w, b, y);
            double t1 = bench_conv(&c, 1, 0, i1, x, w, b, y);
            double t2 = bench_conv(&c, 1, 1, i1, x, w, b, y);
            double t3 = bench_conv(&c, 2, 0, i2, x, w, b, y);
            im2col_run ir = {&c, x, w, b, y, col};
            double t4 = time_med(run_im2col, &ir);
            printf("| %s | %d | %.2f | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %s |\n", shapes[i].name,
                   c.n, gf, t0, t1, t2, t3, t4, i0, i1);
            fflush(stdout);
            free(x), free(w), free(b), free(y), free(col);
        }
}

/* ---------------- GEMM ---------------- */
typedef struct gemm_run {
    int m, n, k;
    float *a, *b, *c;
} gemm_run;
static void run_cblas(void *p) {
    gemm_run *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, g->n, g->k, 1.f, g->a, g->k, g->b,
                g->n, 0.f, g->c, g->n);
}
static void run_dnnl_sgemm(void *p) {
    gemm_run *g = p;
    CK(dnnl_sgemm('N', 'N', g->m, g->n, g->k, 1.f, g->a, g->k, g->b, g->n, 0.f, g->c, g->n));
}

/* oneDNN matmul; packed: weights in the layout the primitive wants
 * (reordered once), else plain row-major ab. */
static double bench_matmul(const gemm_run *g, int packed, char *impl) {
    dnnl_dims_t ad = {g->m, g->k}, bd = {g->k, g->n}, cd = {g->m, g->n}, biasd = {1, g->n};
    dnnl_memory_desc_t amd, bmd, cmd, bu, biasmd;
    CK(dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_f32, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&bu, 2, bd, dnnl_f32, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, packed ? dnnl_format_tag_any : dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_f32, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&biasmd, 2, biasd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    CK(dnnl_matmul_desc_init(&md, &amd, &bmd, &biasmd, &cmd));
    dnnl_primitive_desc_t pd;
    CK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
    snprintf(impl, 64, "%s", impl_name(pd));
    const dnnl_memory_desc_t *pw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t wu = mem(&bu, g->b), wp = mem(pw, NULL);
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t rp;
    CK(dnnl_reorder_primitive_desc_create(&rpd, &bu, eng, pw, eng, NULL));
    CK(dnnl_primitive_create(&rp, rpd));
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, wu}, {DNNL_ARG_TO, wp}};
    CK(dnnl_primitive_execute(rp, strm, 2, ra));
    CK(dnnl_stream_wait(strm));
    prim_run r;
    memset(&r, 0, sizeof r);
    float *bias = rnd((size_t)g->n);
    CK(dnnl_primitive_create(&r.p, pd));
    r.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem(&amd, g->a)};
    r.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wp};
    r.args[2] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem(&biasmd, bias)};
    r.args[3] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem(&cmd, g->c)};
    r.nargs = 4;
    return time_med(run_prim, &r);
}

static void bench_gemms(int nthr) {
    static const int kn[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
    printf("\n## GEMM C[M,N] = A[M,K] B[K,N] (FP32, %d threads, median ms; matmul has bias)\n\n",
           nthr);
    printf("| M | K | N | GFLOP | OpenBLAS sgemm | dnnl_sgemm | dnnl matmul plain | dnnl matmul "
           "packed B | GFLOP/s best | impl plain | impl packed |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    int ms[2] = {128, 1024};
    for (int mi = 0; mi < 2; mi++)
        for (size_t i = 0; i < sizeof kn / sizeof kn[0]; i++) {
            gemm_run g = {ms[mi], kn[i][1], kn[i][0], NULL, NULL, NULL};
            g.a = rnd((size_t)g.m * g.k);
            g.b = rnd((size_t)g.k * g.n);
            g.c = rnd((size_t)g.m * g.n);
            double gf = 2.0 * g.m * g.n * g.k * 1e-9;
            double t0 = time_med(run_cblas, &g), t1 = time_med(run_dnnl_sgemm, &g);
            char i2[64], i3[64];
            double t2 = bench_matmul(&g, 0, i2), t3 = bench_matmul(&g, 1, i3);
            double best = t0;
            if (t1 < best) best = t1;
            if (t2 < best) best = t2;
            if (t3 < best) best = t3;
            printf("| %d | %d | %d | %.2f | %.3f | %.3f | %.3f | %.3f | %.0f | %s | %s |\n", g.m, g.k,
                   g.n, gf, t0, t1, t2, t3, gf / best * 1e3, i2, i3);
            fflush(stdout);
            free(g.a), free(g.b), free(g.c);
        }
}

int main(int argc, char **argv) {
    int nthr = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2)
        reps = atoi(argv[2]);
    if (reps < 1 || reps > 1000)
        reps = 30;
    omp_set_num_threads(nthr);
    openblas_set_num_threads(nthr);
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d (%s), OpenBLAS: %s, threads %d, reps %d\n", v->major, v->minor,
           v->patch, v->hash ? v->hash : "?", openblas_get_config(), nthr, reps);
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    srand(1);
    const char *what = getenv("FAST_BENCH_ONLY");
    if (!what || strcmp(what, "gemm") != 0)
        bench_convs(nthr);
    if (!what || strcmp(what, "conv") != 0)
        bench_gemms(nthr);
    return 0;
}
