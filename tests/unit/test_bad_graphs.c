/* test_bad_graphs.c - the bad-input catalog for graphs: well-formed ONNX
 * files whose graphs are wrong (tests/bad/onnx/graph_*.onnx, made by
 * tests/bad/gen_graph_cases.py; attr_*.onnx by gen_input_cases.py), each with the exact error it must give at
 * parse or build time. Damaged bytes are in test_onnx.c and test_plan.c;
 * misuse at run time (wrong shape, missing address, out of profile) is in
 * test_runtime.c. */
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

typedef struct bad_case {
    const char *file;
    kiln_status status;
    const char *text;
} bad_case;

static const bad_case cases[] = {
    {"bad/onnx/graph_cycle.onnx", KILN_ERR_PARSE, "the graph has a cycle through tensor 'b'"},
    {"bad/onnx/graph_dangling.onnx", KILN_ERR_PARSE,
     "node 'add_ghost' (Add): input 1 'ghost' is not a graph input, an initializer, nor the "
     "output of any node"},
    {"bad/onnx/graph_negative_dim.onnx", KILN_ERR_PARSE, "tensor 'x': dimension 1 is -3"},
    {"bad/onnx/graph_overflow_dims.onnx", KILN_ERR_PARSE, "tensor 'w': element count overflows"},
    {"bad/onnx/graph_short_initializer.onnx", KILN_ERR_PARSE,
     "tensor 'w': raw_data holds 16 bytes, but its float [1000000] shape needs 4000000"},
    {"bad/onnx/graph_missing_output.onnx", KILN_ERR_PARSE,
     "graph output 'nowhere' is not produced by any node"},
    {"bad/onnx/graph_double_write.onnx", KILN_ERR_PARSE,
     "node 'second' (Neg): output 'y' is already produced by node 'first'"},
    /* attribute values and types (tests/bad/gen_input_cases.py) */
    {"bad/onnx/attr_transb_7.onnx", KILN_ERR_PARSE,
     "node 'gemm' (Gemm): attribute 'transB' is 7; it is a flag and must be 0 or 1"},
    {"bad/onnx/attr_softmax_string_axis.onnx", KILN_ERR_PARSE,
     "node 'softmax' (Softmax): attribute 'axis' has type STRING; Softmax takes an INT"},
};

/* Parse and, when that works, build: the first failure is the answer. */
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

/* The same attribute checks for a network made through the API: x -> op -> y
 * with one attribute set by `set`. */
static kiln_status build_with(const char *op, kiln_status (*set)(kiln_network *, int)) {
    kiln_network *net = NULL;
    kiln_status st = kiln_network_create(&net);
    int64_t d[2] = {2, 2};
    const char *in[2] = {"x", "x"}, *out[1] = {"y"};
    int node = -1;
    if (st == KILN_OK)
        st = kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 2, d, NULL);
    if (st == KILN_OK)
        st = kiln_network_add_node(net, "n", op, "", 17, strcmp(op, "Gemm") ? 1 : 2, in, 1, out,
                                   &node);
    if (st == KILN_OK)
        st = set(net, node);
    if (st == KILN_OK)
        st = kiln_network_mark_output(net, "y");
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    if (st == KILN_OK)
        st = kiln_builder_config_create(&cfg);
    if (st == KILN_OK)
        st = kiln_build_serialized(net, cfg, &plan, &size);
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    return st;
}

static kiln_status trans_a_2(kiln_network *net, int node) {
    return kiln_network_set_attr_int(net, node, "transA", 2);
}
static kiln_status axis_float(kiln_network *net, int node) {
    return kiln_network_set_attr_float(net, node, "axis", 1.5f);
}
static kiln_status perm_int(kiln_network *net, int node) {
    return kiln_network_set_attr_int(net, node, "perm", 1);
}
static kiln_status trans_b_1(kiln_network *net, int node) {
    return kiln_network_set_attr_int(net, node, "transB", 1);
}

int main(void) {
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        KT_FAILS(parse_and_build(cases[i].file), cases[i].status, cases[i].text);
    KT_FAILS(build_with("Gemm", trans_a_2), KILN_ERR_PARSE,
             "node 'n' (Gemm): attribute 'transA' is 2; it is a flag and must be 0 or 1");
    KT_FAILS(build_with("Softmax", axis_float), KILN_ERR_PARSE,
             "attribute 'axis' has type FLOAT; Softmax takes an INT");
    KT_FAILS(build_with("Transpose", perm_int), KILN_ERR_PARSE,
             "attribute 'perm' has type INT; Transpose takes an INTS");
    KT_OK(build_with("Gemm", trans_b_1));
    return kt_finish();
}
