/* test_inputs.c - files kiln is pointed at that are not regular files: a
 * FIFO (open() would wait for a writer forever), /dev/zero (a read loop
 * would never end) and a folder, as an ONNX model, its external data, a
 * plan, a timing cache and a plugin library; each is refused at once with
 * an error naming the path. ctest gives this a time limit, so a regression
 * that blocks fails instead of hanging. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_onnx.h"
#include "kiln/kiln_plugin.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

static char dir[64], fifo[128];

static void test_core_open(void) {
    int fd = -1;
    size_t size = 0;
    uint8_t *data = NULL;
    kn_mapped m;
    const char *paths[3] = {fifo, "/dev/zero", dir};
    for (int i = 0; i < 3; i++) {
        KT_FAILS(kn_file_open(paths[i], &fd, &size), KILN_ERR_IO, "is not a regular file");
        KT_FAILS(kn_file_read(paths[i], &data, &size), KILN_ERR_IO, "is not a regular file");
        KT_FAILS(kn_file_map(paths[i], &m), KILN_ERR_IO, "is not a regular file");
        KT_CHECK(strstr(kiln_last_error(), paths[i]) != NULL);
    }
    /* a regular file: blocking again, the whole file, one NUL after it */
    char path[160];
    snprintf(path, sizeof path, "%s/plain", dir);
    KT_OK(kn_file_write(path, "abc", 3));
    KT_OK(kn_file_open(path, &fd, &size));
    KT_CHECK(size == 3);
    if (fd >= 0) {
        KT_CHECK(fcntl(fd, F_GETFL) >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
        KT_CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        close(fd);
    }
    KT_OK(kn_file_read(path, &data, &size));
    KT_CHECK(size == 3 && data && memcmp(data, "abc", 4) == 0);
    kn_free(data);
    KT_FAILS(kn_file_read("/nonexistent/kiln", &data, &size), KILN_ERR_IO, "cannot open");
    unlink(path);
}

static void test_public_api(void) {
    kiln_network *net = NULL;
    KT_FAILS(kiln_onnx_parse_file(fifo, &net), KILN_ERR_IO, "is not a regular file");
    KT_FAILS(kiln_onnx_parse_file("/dev/zero", &net), KILN_ERR_IO, "is not a regular file");
    kiln_engine *eng = NULL;
    KT_FAILS(kiln_engine_load_file(fifo, &eng), KILN_ERR_IO, "is not a regular file");
    KT_FAILS(kiln_engine_load_file("/dev/zero", &eng), KILN_ERR_IO, "is not a regular file");
    kiln_plugin_library *lib = NULL;
    KT_FAILS(kiln_plugin_load_library("/dev/zero", NULL, &lib), KILN_ERR_IO, "is not a regular file");
    KT_FAILS(kiln_plugin_load_library(fifo, NULL, &lib), KILN_ERR_IO, "is not a regular file");

    /* the timing cache of a build */
    KT_OK(kiln_network_create(&net));
    int64_t d[1] = {4};
    const char *in[1] = {"x"}, *out[1] = {"y"};
    KT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 1, d, NULL));
    KT_OK(kiln_network_add_node(net, "relu", "Relu", "", 17, 1, in, 1, out, NULL));
    KT_OK(kiln_network_mark_output(net, "y"));
    kiln_builder_config *cfg = NULL;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_builder_config_set_timing_cache(cfg, fifo));
    void *plan = NULL;
    size_t size = 0;
    KT_FAILS(kiln_build_serialized(net, cfg, &plan, &size), KILN_ERR_IO, "is not a regular file");
    kiln_free(plan);
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
}

/* A model whose weight lives in external file weights.bin, a FIFO here. */
static void test_external_fifo(void) {
    char model[160], weights[160];
    snprintf(model, sizeof model, "%s/external_weights.onnx", dir);
    snprintf(weights, sizeof weights, "%s/weights.bin", dir);
    uint8_t *data = NULL;
    size_t size = 0;
    KT_OK(kn_file_read("bad/inputs/external_weights.onnx", &data, &size));
    if (!data)
        return;
    KT_OK(kn_file_write(model, data, size));
    kn_free(data);
    KT_CHECK(mkfifo(weights, 0600) == 0);
    kiln_network *net = NULL;
    KT_FAILS(kiln_onnx_parse_file(model, &net), KILN_ERR_IO, "is not a regular file");
    KT_CHECK(strstr(kiln_last_error(), "weights.bin") != NULL);
    kiln_network_destroy(net);
    /* with a regular file there, the same model parses */
    unlink(weights);
    float ones[4] = {1, 1, 1, 1};
    KT_OK(kn_file_write(weights, ones, sizeof ones));
    net = NULL;
    KT_OK(kiln_onnx_parse_file(model, &net));
    kiln_network_destroy(net);
    unlink(weights);
    unlink(model);
}

int main(void) {
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    snprintf(dir, sizeof dir, "/tmp/kiln_test_inputs_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    if (mkfifo(fifo, 0600) != 0) {
        perror("mkfifo");
        return 1;
    }
    test_core_open();
    test_public_api();
    test_external_fifo();
    unlink(fifo);
    rmdir(dir);
    return kt_finish();
}
