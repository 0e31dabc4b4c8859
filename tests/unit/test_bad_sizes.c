/* test_bad_sizes.c - the bad-input catalog for sizes (tests/bad/onnx/size_*
 * and ub_*.onnx, tests/bad/plans/size_*.plan, made by
 * tests/bad/gen_size_cases.py): shapes that overflow or that no memory can
 * hold, absurd attributes whose arithmetic overflowed, and resealed plans
 * with absurd layer fields or profile dims, each with the exact error it
 * must give at build, at run or at load. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "graph/graph.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

typedef struct bad_case {
    const char *file;
    kiln_status status;
    const char *text;
} bad_case;

#define TOO_BIG "(float): more elements or bytes than kiln plans (2^48 of each at most)"

static const bad_case builds[] = {
    {"bad/onnx/size_expand.onnx", KILN_ERR_SHAPE,
     "node 'expand' (Expand): output 'y' would be 2147483648x2147483648 " TOO_BIG},
    {"bad/onnx/size_constant_of_shape.onnx", KILN_ERR_SHAPE,
     "node 'fill' (ConstantOfShape): output 'c' would be 2147483648x2147483648 " TOO_BIG},
    {"bad/onnx/size_range.onnx", KILN_ERR_SHAPE,
     "node 'range' (Range): output 'r' would be 4611686018427387904 (int64): more elements"},
    {"bad/onnx/size_conv_transpose_output_padding.onnx", KILN_ERR_SHAPE,
     "node 'convt' (ConvTranspose): output 'y' would be 1x1x1073741826x1073741826 " TOO_BIG},
    {"bad/onnx/size_relu_input.onnx", KILN_ERR_SHAPE,
     "input 'x' would be 2147483648x2147483648x4 " TOO_BIG},
    {"bad/onnx/size_tile.onnx", KILN_ERR_SHAPE,
     "node 'tile' (Tile): output 'y' would be 1099511627776x4398046511104 " TOO_BIG},
    {"bad/onnx/ub_conv_group.onnx", KILN_ERR_SHAPE,
     "node 'conv' (Conv): channels do not fit: input 4, weights 1x4, group 4611686018427387904"},
    {"bad/onnx/ub_conv_pads.onnx", KILN_ERR_SHAPE,
     "node 'conv' (Conv): pads of spatial dim 0 (4611686018427387904, 4611686018427387904) are "
     "over the limit of 2147483647"},
    {"bad/onnx/ub_conv_dilations.onnx", KILN_ERR_SHAPE,
     "node 'conv' (Conv): kernel, stride and dilation must be at most 2147483647 (dim 0: 3, 1, "
     "4611686018427387904)"},
    {"bad/onnx/ub_conv_transpose_output_padding.onnx", KILN_ERR_SHAPE,
     "node 'convt' (ConvTranspose): output_padding of spatial dim 0 is 1099511627776"},
    {"bad/onnx/ub_maxpool_strides.onnx", KILN_ERR_SHAPE,
     "node 'pool' (MaxPool): kernel, stride and dilation must be at most 2147483647"},
    {"bad/onnx/ub_reshape.onnx", KILN_ERR_SHAPE,
     "node 'reshape' (Reshape): shape ?x1099511627776x1099511627776 has more elements than a "
     "tensor can"},
    {"bad/onnx/ub_pad.onnx", KILN_ERR_SHAPE,
     "node 'pad' (Pad): pads of axis 0 (4611686018427387904, 4611686018427387904) make more "
     "elements than a tensor can hold"},
    {"bad/onnx/ub_resize.onnx", KILN_ERR_SHAPE,
     "node 'resize' (Resize): scale 1e+30 makes axis 2 of 2 too large"},
    {"bad/onnx/ub_split.onnx", KILN_ERR_SHAPE, "node 'split' (Split): split sizes overflow"},
    {"bad/onnx/ub_depth_to_space.onnx", KILN_ERR_SHAPE,
     "node 'd2s' (DepthToSpace): need a 4-D input and blocksize in [1, 2147483647], got "
     "1099511627776"},
    {"bad/onnx/ub_onehot.onnx", KILN_ERR_SHAPE,
     "node 'onehot' (OneHot): depth 1e+30 is not in [1, 2^48]"},
    {"bad/onnx/ub_range_span.onnx", KILN_ERR_SHAPE, "node 'range' (Range): range is too long"},
    {"bad/onnx/ub_mel_bins.onnx", KILN_ERR_SHAPE,
     "node 'mel' (MelWeightMatrix): a [9, 4611686018427387904] weight matrix is larger than a "
     "tensor can be"},
};

#define AT_LOAD "cannot load plan 'bad/plans/"
static const bad_case loads[] = {
    {"bad/plans/size_conv_pads_2e40.plan", KILN_ERR_PLAN,
     "layer check at profile 0's min shapes: node 'conv' (Conv): pads of spatial dim 0 "
     "(1099511627776, 1099511627776) are over the limit"},
    {"bad/plans/size_conv_pads_2e48.plan", KILN_ERR_PLAN,
     "node 'conv' (Conv): pads of spatial dim 0 (281474976710656, 281474976710656) are over"},
    {"bad/plans/size_conv_pads_2e56.plan", KILN_ERR_PLAN,
     "node 'conv' (Conv): pads of spatial dim 0 (72057594037927936, 72057594037927936) are over"},
    {"bad/plans/size_conv_strides.plan", KILN_ERR_PLAN,
     "node 'conv' (Conv): kernel, stride and dilation must be at most 2147483647 (dim 1: 3, "
     "1099511627776, 1)"},
    {"bad/plans/size_conv_group.plan", KILN_ERR_PLAN,
     "node 'conv' (Conv): channels do not fit: input 2, weights 2x1, group 1099511627776"},
    {"bad/plans/size_tactic.plan", KILN_ERR_PLAN,
     "layer check at profile 0's opt shapes: node 'pool' (MaxPool): the plan's tactic 'dnnl' "
     "(cpu) does not take this layer at the shapes it was chosen for"},
    {"bad/plans/size_profile_dims.plan", KILN_ERR_PLAN,
     "layer check at profile 0's max shapes: input 'x' would be 17592186044416x2x8x8 " TOO_BIG},
};

/* Parse and build with the default profile: the first failure is the answer. */
static kiln_status parse_and_build(const char *file) {
    kiln_network *net = NULL;
    kiln_status st = kiln_onnx_parse_file(file, &net);
    if (st != KILN_OK)
        return st;
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    st = kiln_builder_config_create(&cfg);
    if (st == KILN_OK)
        st = kiln_build_serialized(net, cfg, &plan, &size);
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return st;
}

static kiln_status load(const char *file) {
    kiln_engine *e = NULL;
    kiln_status st = kiln_engine_load_file(file, &e);
    kiln_engine_destroy(e);
    if (st == KILN_OK)
        return st;
    /* every message names the plan's file first */
    char want[128];
    snprintf(want, sizeof want, AT_LOAD "%s", file + strlen("bad/plans/"));
    return strstr(kiln_last_error(), want) ? st : KILN_ERR_INTERNAL;
}

/* size_shape_input: y = Expand(x [1], s), s a shape-tensor input whose
 * values the profile gives as min, opt and max. */
static kiln_status build_shape_input(const int64_t *max_values, void **plan, size_t *size) {
    kiln_network *net = NULL;
    kiln_builder_config *cfg = NULL;
    int p = 0;
    const int64_t one[1] = {1}, two[1] = {2}, small[2] = {1, 1}, mid[2] = {2, 2};
    kiln_status st = kiln_onnx_parse_file("bad/onnx/size_shape_input.onnx", &net);
    if (st == KILN_OK)
        st = kiln_builder_config_create(&cfg);
    if (st == KILN_OK)
        st = kiln_builder_config_add_profile(cfg, &p);
    if (st == KILN_OK)
        st = kiln_builder_config_set_shape(cfg, p, "x", 1, one, one, one);
    if (st == KILN_OK)
        st = kiln_builder_config_set_shape(cfg, p, "s", 1, two, two, two);
    if (st == KILN_OK)
        st = kiln_builder_config_set_input_values(cfg, p, "s", KILN_DTYPE_INT64, 2, small, mid,
                                                  max_values);
    if (st == KILN_OK)
        st = kiln_build_serialized(net, cfg, plan, size);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return st;
}

/* A plan whose profile allows s up to [4, 4], run with s = [2^31, 2^31]:
 * the run's own inference refuses the size before any memory is planned. */
static void run_time_size(void) {
    const int64_t max_ok[2] = {4, 4};
    void *plan = NULL;
    size_t size = 0;
    KT_OK(build_shape_input(max_ok, &plan, &size));
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    KT_OK(kiln_engine_load(plan, size, &e));
    KT_OK(kiln_context_create(e, &ctx));
    const int64_t xs[1] = {1}, ss[1] = {2};
    float x[1] = {3.0f}, y[16] = {0};
    int64_t s[2] = {2, 2};
    KT_OK(kiln_context_set_input_shape(ctx, "x", 1, xs));
    KT_OK(kiln_context_set_input_shape(ctx, "s", 1, ss));
    KT_OK(kiln_context_set_tensor_address(ctx, "x", x));
    KT_OK(kiln_context_set_tensor_address(ctx, "s", s));
    KT_OK(kiln_context_set_tensor_address(ctx, "y", y));
    KT_OK(kiln_context_enqueue(ctx, NULL));
    KT_CHECK(y[0] == 3.0f && y[3] == 3.0f);
    s[0] = s[1] = (int64_t)1 << 31;
    KT_FAILS(kiln_context_enqueue(ctx, NULL), KILN_ERR_SHAPE,
             "node 'expand' (Expand): output 'y' would be 2147483648x2147483648 " TOO_BIG);
    s[0] = s[1] = 2; /* and the context still works */
    y[3] = 0.0f;
    KT_OK(kiln_context_enqueue(ctx, NULL));
    KT_CHECK(y[3] == 3.0f);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    kiln_free(plan);
}

/* The bounds themselves, at their edges. */
static void limits(void) {
    const int64_t e48 = (int64_t)1 << 48;
    int64_t d[3] = {e48, 0, 0};
    size_t b = 0;
    KT_CHECK(kn_shape_fits(KILN_DTYPE_UINT8, 1, d, &b) && b == (size_t)1 << 48);
    d[0] = e48 + 1;
    KT_CHECK(!kn_shape_fits(KILN_DTYPE_UINT8, 1, d, NULL));
    d[0] = e48 / 4;
    KT_CHECK(kn_shape_fits(KILN_DTYPE_FLOAT, 1, d, NULL));
    d[0] = e48 / 4 + 1; /* 2^48 elements would fit, 2^48 + 4 bytes do not */
    KT_CHECK(!kn_shape_fits(KILN_DTYPE_FLOAT, 1, d, NULL));
    d[0] = 0, d[1] = e48; /* empty, and its strides fit */
    KT_CHECK(kn_shape_fits(KILN_DTYPE_FLOAT, 2, d, &b) && b == 0);
    d[2] = 2; /* empty, but a stride would be 2^49 */
    KT_CHECK(!kn_shape_fits(KILN_DTYPE_FLOAT, 3, d, NULL));
    d[0] = -1;
    KT_CHECK(!kn_shape_fits(KILN_DTYPE_FLOAT, 1, d, NULL));
    int64_t r;
    KT_CHECK(kn_mul_i64(INT64_MAX / 2, 2, &r) == false && r == INT64_MAX - 1);
    KT_CHECK(kn_mul_i64(INT64_MAX / 2 + 1, 2, &r));
    KT_CHECK(kn_add_i64(INT64_MAX, 1, &r) && kn_sub_i64(INT64_MIN, 1, &r));
    KT_CHECK(kn_double_to_i64(3.9, 0, 10, &r) && r == 3);
    KT_CHECK(!kn_double_to_i64(9223372036854775808.0, 0, INT64_MAX, &r));
    KT_CHECK(!kn_double_to_i64(INFINITY, 0, INT64_MAX, &r));
    KT_CHECK(!kn_double_to_i64(NAN, 0, INT64_MAX, &r));
    KT_CHECK(!kn_double_to_i64(-1.0, 0, 10, &r));
}

int main(void) {
    limits();
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    for (size_t i = 0; i < sizeof builds / sizeof builds[0]; i++)
        KT_FAILS(parse_and_build(builds[i].file), builds[i].status, builds[i].text);
    for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++)
        KT_FAILS(load(loads[i].file), loads[i].status, loads[i].text);
    /* a shape-tensor input whose profile values overflow, at build */
    const int64_t max_bad[2] = {(int64_t)1 << 31, (int64_t)1 << 31};
    void *plan = NULL;
    size_t size = 0;
    KT_FAILS(build_shape_input(max_bad, &plan, &size), KILN_ERR_SHAPE,
             "node 'expand' (Expand): output 'y' would be 2147483648x2147483648 " TOO_BIG);
    kiln_free(plan);
    run_time_size();
    return kt_finish();
}
