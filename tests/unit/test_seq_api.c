/* test_seq_api.c - sequence and optional values through the public C API:
 * a sequence input and a sequence output (SequenceInsert), an optional
 * input with and without its element (OptionalGetElement), and the errors
 * of bad use. The models are ONNX's node-test models (skipped when the
 * test data is not installed). */
#include "test.h"

#include <unistd.h>

#include "kiln/kiln_builder.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_runtime.h"

#define NODE_DIR "/usr/share/libonnx-testdata/data/node/"

static kiln_engine *load(const char *name) {
    char path[512];
    snprintf(path, sizeof path, NODE_DIR "%s/model.onnx", name);
    kiln_network *net = NULL;
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    kiln_engine *e = NULL;
    KT_OK(kiln_onnx_parse_file(path, &net));
    KT_OK(kiln_builder_config_create(&cfg));
    if (net && cfg) {
        kiln_builder_config_set_threads(cfg, 1);
        kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_NO_TIMING);
        KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    }
    if (plan)
        KT_OK(kiln_engine_load(plan, size, &e));
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return e;
}

static void test_insert(void) {
    kiln_engine *e = load("test_sequence_insert_at_back");
    if (!e)
        return;
    KT_CHECK(kiln_engine_tensor_kind(e, "sequence") == KILN_TENSOR_KIND_SEQUENCE);
    KT_CHECK(kiln_engine_tensor_kind(e, "tensor") == KILN_TENSOR_KIND_TENSOR);
    KT_CHECK(kiln_engine_tensor_kind(e, "output_sequence") == KILN_TENSOR_KIND_SEQUENCE);
    KT_CHECK(kiln_engine_tensor_kind(e, "nothing") == -1);
    KT_CHECK(kiln_engine_tensor_element_kind(e, "sequence") == KILN_TENSOR_KIND_TENSOR);
    KT_CHECK(kiln_engine_tensor_element_kind(e, "nothing") == -1);
    KT_CHECK(kiln_engine_tensor_dtype(e, "sequence") == KILN_DTYPE_INT64);
    kiln_context *c = NULL;
    KT_OK(kiln_context_create(e, &c));
    if (!c) {
        kiln_engine_destroy(e);
        return;
    }
    int64_t a[3] = {1, 2, 3}, b[2] = {4, 5}, t[3] = {7, 8, 9};
    int64_t da[1] = {3}, db[1] = {2};
    int ranks[2] = {1, 1};
    const int64_t *dims[2] = {da, db};
    const void *data[2] = {a, b};
    KT_FAILS(kiln_context_set_tensor_address(c, "sequence", a), KILN_ERR_INVALID_ARGUMENT,
             "kiln_context_set_sequence_input");
    KT_FAILS(kiln_context_set_optional_none(c, "sequence"), KILN_ERR_INVALID_ARGUMENT,
             "not an optional");
    KT_OK(kiln_context_set_sequence_input(c, "sequence", 2, ranks, dims, data));
    KT_OK(kiln_context_set_tensor_address(c, "tensor", t));
    for (int run = 0; run < 2; run++) {
        KT_OK(kiln_context_enqueue(c, NULL));
        KT_CHECK(kiln_context_sequence_length(c, "output_sequence") == 3);
        kiln_dtype dt;
        int rank = -1;
        int64_t d[KILN_MAX_DIMS];
        const void *p = NULL;
        KT_OK(kiln_context_sequence_element(c, "output_sequence", 2, &dt, &rank, d, &p));
        KT_CHECK(dt == KILN_DTYPE_INT64 && rank == 1 && d[0] == 3);
        KT_CHECK(p && memcmp(p, t, sizeof t) == 0);
        KT_OK(kiln_context_sequence_element(c, "output_sequence", 1, &dt, &rank, d, &p));
        KT_CHECK(rank == 1 && d[0] == 2 && p && memcmp(p, b, sizeof b) == 0);
        KT_FAILS(kiln_context_sequence_element(c, "output_sequence", 3, &dt, &rank, d, &p),
                 KILN_ERR_INVALID_ARGUMENT, "no element 3");
        /* the second run: a new list of one element (the shapes follow it) */
        KT_OK(kiln_context_set_sequence_input(c, "sequence", 1, ranks + 1, dims + 1, data + 1));
        if (run == 0) {
            KT_OK(kiln_context_enqueue(c, NULL));
            KT_CHECK(kiln_context_sequence_length(c, "output_sequence") == 2);
            KT_OK(kiln_context_set_sequence_input(c, "sequence", 2, ranks, dims, data));
        }
    }
    KT_CHECK(kiln_context_sequence_length(c, "tensor") == -1);
    KT_CHECK(kiln_context_optional_has_element(c, "output_sequence") == -1); /* not an optional */
    KT_CHECK(kiln_context_optional_has_element(c, "tensor") == -1);
    kiln_context_destroy(c);
    kiln_engine_destroy(e);
}

static void test_optional(void) {
    kiln_engine *e = load("test_optional_get_element");
    if (!e)
        return;
    KT_CHECK(kiln_engine_tensor_kind(e, "optional_input") == KILN_TENSOR_KIND_OPTIONAL);
    KT_CHECK(kiln_engine_tensor_element_kind(e, "optional_input") == KILN_TENSOR_KIND_TENSOR);
    kiln_context *c = NULL;
    KT_OK(kiln_context_create(e, &c));
    if (!c) {
        kiln_engine_destroy(e);
        return;
    }
    float x[4] = {1, 2, 3, 4};
    int64_t d4[1] = {4};
    int r1 = 1;
    const int64_t *dims = d4;
    const void *data = x;
    KT_FAILS(kiln_context_set_sequence_input(c, "optional_input", 2, NULL, NULL, NULL),
             KILN_ERR_INVALID_ARGUMENT, "optional");
    KT_OK(kiln_context_set_sequence_input(c, "optional_input", 1, &r1, &dims, &data));
    KT_OK(kiln_context_enqueue(c, NULL));
    const float *y = kiln_context_tensor_address(c, "output");
    KT_CHECK(y && y[0] == 1 && y[3] == 4);
    KT_OK(kiln_context_set_optional_none(c, "optional_input"));
    KT_FAILS(kiln_context_enqueue(c, NULL), KILN_ERR_RUNTIME, "holds no element");
    kiln_context_destroy(c);
    kiln_engine_destroy(e);
}

/* An optional of a sequence: kiln_engine_tensor_element_kind (an empty
 * optional against one holding an empty sequence, through
 * kiln_context_optional_has_element: tests/python/test_sequences.py). */
static void test_optional_sequence(void) {
    kiln_engine *e = load("test_optional_get_element_sequence");
    if (!e)
        return;
    KT_CHECK(kiln_engine_tensor_kind(e, "optional_input") == KILN_TENSOR_KIND_OPTIONAL);
    KT_CHECK(kiln_engine_tensor_element_kind(e, "optional_input") == KILN_TENSOR_KIND_SEQUENCE);
    KT_CHECK(kiln_engine_tensor_element_kind(e, "output") == KILN_TENSOR_KIND_TENSOR);
    kiln_engine_destroy(e);
}

/* A network made through the API: SplitToSequence, ConcatFromSequence,
 * SequenceErase, SequenceLength; and SequenceAt out of range. */
static kiln_engine *build(kiln_network *net) {
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    kiln_engine *e = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    kiln_builder_config_set_flags(cfg, KILN_BUILDER_FLAG_NO_TIMING);
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    if (plan)
        KT_OK(kiln_engine_load(plan, size, &e));
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return e;
}

static void test_split_concat(int64_t at) {
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    if (!net)
        return;
    int64_t xd[2] = {2, 5}, sd[1] = {2}, split[2] = {2, 3};
    int node = 0;
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, xd, NULL));
    KT_OK(kiln_network_add_constant(net, "s", KILN_DTYPE_INT64, 1, sd, split, sizeof split));
    KT_OK(kiln_network_add_constant(net, "at", KILN_DTYPE_INT64, 0, NULL, &at, sizeof at));
    const char *i1[] = {"x", "s"}, *o1[] = {"seq"};
    KT_OK(kiln_network_add_node(net, "split", "SplitToSequence", "", 17, 2, i1, 1, o1, &node));
    KT_OK(kiln_network_set_attr_int(net, node, "axis", 1));
    const char *i2[] = {"seq"}, *o2[] = {"y"};
    KT_OK(kiln_network_add_node(net, "concat", "ConcatFromSequence", "", 17, 1, i2, 1, o2, &node));
    KT_OK(kiln_network_set_attr_int(net, node, "axis", 1));
    const char *o3[] = {"seq2"}, *i4[] = {"seq2"}, *o4[] = {"n"};
    KT_OK(kiln_network_add_node(net, "erase", "SequenceErase", "", 17, 1, i2, 1, o3, &node));
    KT_OK(kiln_network_add_node(net, "length", "SequenceLength", "", 17, 1, i4, 1, o4, &node));
    const char *i5[] = {"seq", "at"}, *o5[] = {"z"};
    KT_OK(kiln_network_add_node(net, "pick", "SequenceAt", "", 17, 2, i5, 1, o5, &node));
    KT_OK(kiln_network_mark_output(net, "y"));
    KT_OK(kiln_network_mark_output(net, "n"));
    KT_OK(kiln_network_mark_output(net, "z"));
    kiln_engine *e = build(net);
    kiln_context *c = NULL;
    if (e)
        KT_OK(kiln_context_create(e, &c));
    if (!c) {
        if (at < 2)
            KT_CHECK(!"the network builds");
        else /* out of range already at build: the node is named */
            KT_CHECK(strstr(kiln_last_error(), "pick") != NULL);
        kiln_engine_destroy(e);
        return;
    }
    float x[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    KT_OK(kiln_context_set_tensor_address(c, "x", x));
    if (at >= 2) {
        KT_FAILS(kiln_context_enqueue(c, NULL), KILN_ERR_RUNTIME, "out of range");
        KT_CHECK(strstr(kiln_last_error(), "pick") != NULL);
    } else {
        KT_OK(kiln_context_enqueue(c, NULL));
        int64_t d[KILN_MAX_DIMS];
        KT_CHECK(kiln_context_tensor_shape(c, "y", d) == 2 && d[0] == 2 && d[1] == 5);
        const float *y = kiln_context_tensor_address(c, "y");
        KT_CHECK(y && memcmp(y, x, sizeof x) == 0);
        const int64_t *n = kiln_context_tensor_address(c, "n");
        KT_CHECK(n && *n == 1);
        KT_CHECK(kiln_context_tensor_shape(c, "z", d) == 2 && d[0] == 2 && d[1] == 3);
        const float *z = kiln_context_tensor_address(c, "z");
        KT_CHECK(z && z[0] == 2 && z[2] == 4 && z[3] == 7 && z[5] == 9);
    }
    kiln_context_destroy(c);
    kiln_engine_destroy(e);
}

int main(void) {
    test_split_concat(1);
    test_split_concat(2);
    if (access(NODE_DIR "test_sequence_insert_at_back/model.onnx", R_OK) != 0) {
        printf("the ONNX node test data is not installed: its models are skipped\n");
        return kt_finish();
    }
    test_insert();
    test_optional();
    test_optional_sequence();
    return kt_finish();
}
