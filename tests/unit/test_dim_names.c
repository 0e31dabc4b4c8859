/* test_dim_names.c - named dynamic dimensions of network inputs through the
 * public C API: kiln_network_tensor_dim_name / kiln_network_set_dim_name
 * (TensorRT's ITensor::getDimensionName / setDimensionName), and the names
 * surviving an ONNX write and parse (dim_param). */
#include <stdio.h>
#include <unistd.h>

#include "kiln/kiln_network.h"
#include "kiln/kiln_onnx.h"
#include "test.h"

static const char *dim_name(const kiln_network *net, const char *t, int d) {
    const char *s = (const char *)1;
    kiln_status st = kiln_network_tensor_dim_name(net, t, d, &s);
    return st == KILN_OK ? s : "(error)";
}

int main(void) {
    kiln_network *net = NULL;
    KT_OK(kiln_network_create(&net));
    int64_t dims[3] = {-1, 3, -1};
    const char *names[3] = {"batch", "ignored", "seq"};
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 3, dims, names));
    KT_OK(kiln_network_add_node(net, "relu", "Relu", "", 17, 1, (const char *[]){"x"}, 1,
                                (const char *[]){"y"}, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));

    /* names of dynamic dims kept; a fixed dim keeps none */
    KT_CHECK(strcmp(dim_name(net, "x", 0), "batch") == 0);
    KT_CHECK(dim_name(net, "x", 1) == NULL);
    KT_CHECK(strcmp(dim_name(net, "x", 2), "seq") == 0);

    /* errors: unknown tensor, dimension out of range, NULL out */
    const char *s = NULL;
    KT_FAILS(kiln_network_tensor_dim_name(net, "nope", 0, &s), KILN_ERR_NOT_FOUND, "nope");
    KT_FAILS(kiln_network_tensor_dim_name(net, "x", 3, &s), KILN_ERR_INVALID_ARGUMENT,
             "dimension 3 is outside 0..2");
    KT_FAILS(kiln_network_tensor_dim_name(net, "x", -1, &s), KILN_ERR_INVALID_ARGUMENT, "outside");
    KT_FAILS(kiln_network_tensor_dim_name(net, "x", 0, NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");

    /* set, rename, remove */
    KT_OK(kiln_network_set_dim_name(net, "x", 2, "tokens"));
    KT_CHECK(strcmp(dim_name(net, "x", 2), "tokens") == 0);
    KT_OK(kiln_network_set_dim_name(net, "x", 2, NULL));
    KT_CHECK(dim_name(net, "x", 2) == NULL);
    KT_OK(kiln_network_set_dim_name(net, "x", 2, "seq"));
    KT_FAILS(kiln_network_set_dim_name(net, "x", 5, "z"), KILN_ERR_INVALID_ARGUMENT, "outside");
    KT_FAILS(kiln_network_set_dim_name(net, "zz", 0, "z"), KILN_ERR_NOT_FOUND, "zz");

    /* through ONNX: written as dim_param, read back by the parser */
    char path[] = "/tmp/kiln_dim_names_XXXXXX";
    int fd = mkstemp(path);
    KT_CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    KT_OK(kiln_onnx_write_file(net, path));
    kiln_network *back = NULL;
    KT_OK(kiln_onnx_parse_file(path, &back));
    if (back) {
        KT_CHECK(strcmp(dim_name(back, "x", 0), "batch") == 0);
        KT_CHECK(dim_name(back, "x", 1) == NULL);
        KT_CHECK(strcmp(dim_name(back, "x", 2), "seq") == 0);
        kiln_network_destroy(back);
    }
    unlink(path);
    kiln_network_destroy(net);
    return kt_finish();
}
