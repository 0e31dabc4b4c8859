/* k_fast.c - the CPU backend's library-backed tactics (oneDNN), gathered
 * from the k_fast_*.c files into one table, and the versions of the math
 * libraries that a CPU plan is bound to. docs/decisions.md ("CPU math
 * library") has the measurements behind the choice of library per op. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/k_fast.h"

#ifdef KILN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#ifdef KILN_HAVE_DNNL
#define FAST(op, dom, tac, sup, ini, fin, prep) \
    {op, dom, tac, sup, ini, fin, prep, kf_inst_free, kf_run}

const kb_kernel kb_cpu_fast[] = {
    /* reorders NCHW to the primitive's preferred layout and back */
    FAST("Conv", "", "dnnl", kf_conv_supports, kf_conv_init_any, kf_conv_fini, kf_conv_prepare),
    FAST("Conv", "kiln", "dnnl", kf_conv_supports, kf_conv_init_any, kf_conv_fini,
         kf_conv_prepare),
    /* plain NCHW throughout (oneDNN picks a GEMM-based kernel) */
    FAST("Conv", "", "dnnl_nchw", kf_conv_supports, kf_conv_init_nchw, kf_conv_fini,
         kf_conv_prepare),
    FAST("Conv", "kiln", "dnnl_nchw", kf_conv_supports, kf_conv_init_nchw, kf_conv_fini,
         kf_conv_prepare),
    /* one sgemm call and kiln's epilogue (k_fast_sgemm.c); before the
     * primitive's entries, so that dnnl_packed stays the default */
    {"MatMul", "", "sgemm", kf_sgemm_supports, NULL, NULL, kf_sgemm_prepare, kf_sgemm_release,
     kf_sgemm_run},
    {"MatMul", "kiln", "sgemm", kf_sgemm_supports, NULL, NULL, kf_sgemm_prepare,
     kf_sgemm_release, kf_sgemm_run},
#ifdef KILN_HAVE_OPENBLAS
    {"MatMul", "", "blas", kf_sgemm_supports, NULL, NULL, kf_blas_prepare, kf_sgemm_release,
     kf_sgemm_run},
    {"MatMul", "kiln", "blas", kf_sgemm_supports, NULL, NULL, kf_blas_prepare, kf_sgemm_release,
     kf_sgemm_run},
#endif
    FAST("MatMul", "", "dnnl", kf_matmul_supports, NULL, NULL, kf_matmul_prepare),
    FAST("MatMul", "kiln", "dnnl", kf_matmul_supports, NULL, NULL, kf_matmul_prepare),
    FAST("MatMul", "", "dnnl_packed", kf_matmul_supports, NULL, NULL,
         kf_matmul_prepare_packed),
    FAST("MatMul", "kiln", "dnnl_packed", kf_matmul_supports, NULL, NULL,
         kf_matmul_prepare_packed),
    FAST("Gemm", "", "dnnl", kf_gemm_supports, NULL, NULL, kf_gemm_prepare),
    FAST("Gemm", "kiln", "dnnl", kf_gemm_supports, NULL, NULL, kf_gemm_prepare),
    FAST("Gemm", "", "dnnl_packed", kf_gemm_supports, NULL, NULL, kf_gemm_prepare_packed),
    FAST("Gemm", "kiln", "dnnl_packed", kf_gemm_supports, NULL, NULL,
         kf_gemm_prepare_packed),
    FAST("Softmax", "", "dnnl", kf_softmax_supports, NULL, NULL, kf_softmax_prepare),
    FAST("LayerNormalization", "", "dnnl", kf_layernorm_supports, NULL, NULL,
         kf_layernorm_prepare),
    FAST("MaxPool", "", "dnnl", kf_pool_supports, NULL, NULL, kf_pool_prepare),
    FAST("AveragePool", "", "dnnl", kf_pool_supports, NULL, NULL, kf_pool_prepare),
    /* channels-last pools of the layout pass's regions, on NHWC as they are */
    FAST("MaxPool", "kiln", "dnnl", kf_pool_supports, NULL, NULL, kf_pool_prepare),
    FAST("AveragePool", "kiln", "dnnl", kf_pool_supports, NULL, NULL, kf_pool_prepare),
    FAST("GlobalAveragePool", "", "dnnl", kf_pool_supports, NULL, NULL, kf_pool_prepare),
    FAST("GlobalMaxPool", "", "dnnl", kf_pool_supports, NULL, NULL, kf_pool_prepare),
    /* the reference's blocked attention on oneDNN's sgemm */
    {"Attention", "kiln", "dnnl", kf_attention_supports, NULL, NULL, kf_attention_prepare, NULL,
     kf_attention_run},
};
const size_t kb_cpu_fast_count = KN_ARRAY_LEN(kb_cpu_fast);
#else
const kb_kernel kb_cpu_fast[] = {{"", "", "", NULL, NULL, NULL, NULL, NULL, NULL}};
const size_t kb_cpu_fast_count = 0;
#endif

/* Written once, then only read. */
static pthread_once_t versions_once = PTHREAD_ONCE_INIT;
static char versions[128];

static void versions_make(void) {
    size_t len = 0;
    versions[0] = '\0';
#ifdef KILN_HAVE_DNNL
    const dnnl_version_t *v = dnnl_version();
    len += (size_t)snprintf(versions + len, sizeof versions - len, "dnnl=%d.%d.%d", v->major,
                            v->minor, v->patch);
#endif
#ifdef KILN_HAVE_OPENBLAS
    /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." -> "0.3.21" */
    const char *cfg = openblas_get_config();
    char ver[32] = "unknown";
    if (cfg && strncmp(cfg, "OpenBLAS ", 9) == 0) {
        size_t i = 0;
        for (const char *p = cfg + 9; *p && *p != ' ' && i + 1 < sizeof ver; p++)
            ver[i++] = *p;
        ver[i] = '\0';
    }
    if (len < sizeof versions)
        snprintf(versions + len, sizeof versions - len, "%sopenblas=%s", len ? ";" : "", ver);
#endif
    (void)len;
}

const char *kb_cpu_library_versions(void) {
    pthread_once(&versions_once, versions_make);
    return versions;
}
