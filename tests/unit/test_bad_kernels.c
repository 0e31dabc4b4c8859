/* test_bad_kernels.c - int64 values read from tensors and attributes whose
 * arithmetic overflowed inside the CPU reference kernels (undefined
 * behaviour, found with the UBSan build): the models of
 * tests/bad/gen_size_cases.py named ubk_*. Each is built and run with x all
 * `fill` (int64; for a float x its bits); it gives exactly the values
 * below (integer data arithmetic wraps, as the elementwise integer ops do)
 * or fails with the error below, which names the node. In a
 * -DKILN_SANITIZE=ON build any signed overflow left aborts; the two cases of
 * doubles converted out of range need -fsanitize=float-cast-overflow. */
#include <stdbool.h>

#include "test.h"

#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_runtime.h"

#define I64_MIN INT64_MIN
#define I64_MAX INT64_MAX
#define P61 ((int64_t)1 << 61)

typedef struct kcase {
    const char *file;
    int64_t fill;     /* every element of input x */
    const char *err;  /* the error, or NULL for the values */
    int n;
    int64_t want[9];
} kcase;

static const kcase cases[] = {
    {"ubk_range_step", 0, NULL, 4, {I64_MIN, I64_MIN + P61, I64_MIN + 2 * P61, I64_MIN + 3 * P61}},
    {"ubk_cumsum", 0, NULL, 2, {I64_MAX, I64_MIN}},
    {"ubk_eyelike", 5, NULL, 9, {0}},
    {"ubk_eyelike_min", 5, NULL, 9, {0}},
    {"ubk_eyelike_one", 5, NULL, 9, {0, 1, 0, 0, 0, 1, 0, 0, 0}},
    {"ubk_eyelike_neg", 5, NULL, 9, {0, 0, 0, 1, 0, 0, 0, 1, 0}},
    {"ubk_slice_steps", 0, NULL, 1, {3}},
    {"ubk_slice_axes", 0, NULL, 1, {3}},
    {"ubk_gathernd", 0, "node 'gathernd' (GatherND): index -9223372036854775808 of tuple 0 is "
                        "out of range [-4, 4)", 0, {0}},
    {"ubk_scatter_elements", 0, "node 'scatter' (ScatterElements): index -9223372036854775808 "
                                "(element 0) is out of range [-4, 4)", 0, {0}},
    {"ubk_onehot_index", 0, NULL, 4, {0, 0, 0, 0}},
    {"ubk_trilu", 7, NULL, 4, {0, 0, 0, 0}},
    {"ubk_reducesum", 0, NULL, 1, {I64_MIN}},
    {"ubk_reduceprod", 0, NULL, 1, {0}},
    {"ubk_reducel1", 0, NULL, 1, {I64_MIN}},
    {"ubk_reducesumsquare", 0, NULL, 1, {0}},
    {"ubk_scatternd_add", 0, NULL, 1, {I64_MIN}},
    {"ubk_scatter_elements_mul", 0, NULL, 1, {0}},
    {"ubk_maxunpool", 0, "node 'unpool' (MaxUnpool): index 9223372036854775807 is outside the "
                         "output", 0, {0}},
    /* all scores 0, boxes apart: both kept, in index order */
    {"ubk_nms_max_boxes", 0, NULL, 6, {0, 0, 0, 0, 0, 1}},
    /* x all 0 (the float bits of 0): every output 0, NaN coordinates take
     * the extrapolation value 0 */
    {"ubk_resize_roi", 0, NULL, 9, {0}},
    {"ubk_roi_align_huge", 0, "node 'roi' (RoiAlign): region 0 [0, 0, 1e+30, 1e+30] (spatial_scale 1) "
                              "is not finite or its bins would take more than 4096 samples a side "
                              "or 1048576 in all", 0, {0}},
    {"ubk_roi_align_nan", 0, "node 'roi' (RoiAlign): region 0 [0, 0, nan, 1] (spatial_scale 1) "
                             "is not finite or its bins would take more than 4096 samples a side "
                             "or 1048576 in all", 0, {0}},
    {"ubk_roi_align_big", 0, "node 'roi' (RoiAlign): region 0 [0, 0, 1e+12, 1] (spatial_scale 1) "
                             "is not finite or its bins would take more than 4096 samples a side "
                             "or 1048576 in all", 0, {0}},
    {"ubk_reverse_sequence", 0, "node 'reverse' (ReverseSequence): sequence length "
                                "9223372036854775807 of batch 0 is outside [0, 2]", 0, {0}},
};

/* Build and run one case; the first error's status, or KILN_OK with y. */
static kiln_status run_case(const kcase *c, int64_t *y, int *ny) {
    char path[256];
    snprintf(path, sizeof path, "bad/onnx/%s.onnx", c->file);
    kiln_network *net = NULL;
    kiln_status st = kiln_onnx_parse_file(path, &net);
    if (st != KILN_OK)
        return st;
    kiln_dtype dt;
    int rank = 0;
    int64_t dims[8];
    st = kiln_network_tensor_info(net, "x", &dt, &rank, dims);
    kiln_builder_config *cfg = NULL;
    if (st == KILN_OK)
        st = kiln_builder_config_create(&cfg);
    void *plan = NULL;
    size_t size = 0;
    if (st == KILN_OK)
        st = kiln_build_serialized(net, cfg, &plan, &size);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_engine *eng = NULL;
    if (st == KILN_OK)
        st = kiln_engine_load(plan, size, &eng);
    kiln_free(plan);
    kiln_context *ctx = NULL;
    if (st == KILN_OK)
        st = kiln_context_create(eng, &ctx);
    int64_t x[16];
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    for (int64_t i = 0; i < n && i < 16; i++)
        x[i] = c->fill;
    if (st == KILN_OK)
        st = kiln_context_set_input_shape(ctx, "x", rank, dims);
    if (st == KILN_OK)
        st = kiln_context_set_tensor_address(ctx, "x", x);
    int64_t ydims[8];
    int yrank = st == KILN_OK ? kiln_context_tensor_shape(ctx, "y", ydims) : -1;
    int64_t yn = 1;
    for (int d = 0; d < yrank; d++)
        yn *= ydims[d];
    if (st == KILN_OK && (yrank < 0 || yn > 9))
        st = KILN_ERR_SHAPE;
    if (st == KILN_OK)
        st = kiln_context_set_tensor_address(ctx, "y", y);
    if (st == KILN_OK)
        st = kiln_context_enqueue(ctx, NULL);
    *ny = (int)yn;
    kiln_context_destroy(ctx);
    kiln_engine_destroy(eng);
    return st;
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const kcase *c = &cases[i];
        int64_t y[9] = {0};
        int ny = 0;
        kiln_status st = run_case(c, y, &ny);
        bool ok;
        if (c->err) {
            ok = st != KILN_OK && strstr(kiln_last_error(), c->err) != NULL;
        } else {
            ok = st == KILN_OK && ny == c->n;
            for (int j = 0; ok && j < c->n; j++)
                ok = y[j] == c->want[j];
        }
        if (!ok) {
            fprintf(stderr, "%s: %s: %s; got %d values:", c->file, kiln_status_name(st),
                    st == KILN_OK ? "" : kiln_last_error(), ny);
            for (int j = 0; j < ny && j < 9; j++)
                fprintf(stderr, " %lld", (long long)y[j]);
            fprintf(stderr, "\n");
        }
        KT_CHECK(ok);
    }
    return kt_finish();
}
