/* test_dd_order.c - two data-dependent counts in one network, each read by
 * one input of a layer: a TopK's input gathered at one NonZero's indices,
 * its K = min(5, count of another NonZero of the same mask) (RetinaNet's
 * per-level candidates). When the first NonZero has run and the second not
 * yet, the TopK must not be inferred from one true count and one upper
 * bound (K 8 over 3 values). */
#include "kiln/kiln_builder.h"
#include "kiln/kiln_network.h"
#include "kiln/kiln_runtime.h"
#include "test.h"

static kiln_network *make_net(void) {
    kiln_network *net = NULL;
    if (kiln_network_create(&net) != KILN_OK)
        return NULL;
    int64_t xd[1] = {8}, one[1] = {1};
    const float zero = 0.f;
    const int64_t minus1 = -1, five = 5, idx1 = 1;
    int cat = -1, rmin = -1;
    kiln_status st = KILN_OK;
    st = st ? st : kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT, 1, xd, NULL);
    st = st ? st : kiln_network_add_constant(net, "zero", KILN_DTYPE_FLOAT, 0, NULL, &zero, sizeof zero);
    st = st ? st : kiln_network_add_constant(net, "flat", KILN_DTYPE_INT64, 1, one, &minus1, sizeof minus1);
    st = st ? st : kiln_network_add_constant(net, "five", KILN_DTYPE_INT64, 1, one, &five, sizeof five);
    st = st ? st : kiln_network_add_constant(net, "one", KILN_DTYPE_INT64, 1, one, &idx1, sizeof idx1);
    /* the values: x where x > 0 */
    st = st ? st : kiln_network_add_node(net, "pos", "Greater", "", 13, 2, (const char *[]){"x", "zero"}, 1, (const char *[]){"pos"}, NULL);
    st = st ? st : kiln_network_add_node(net, "nz_a", "NonZero", "", 13, 1, (const char *[]){"pos"}, 1, (const char *[]){"ia2"}, NULL);
    st = st ? st : kiln_network_add_node(net, "ia", "Reshape", "", 13, 2, (const char *[]){"ia2", "flat"}, 1, (const char *[]){"ia"}, NULL);
    st = st ? st : kiln_network_add_node(net, "vals", "Gather", "", 13, 2, (const char *[]){"x", "ia"}, 1, (const char *[]){"vals"}, NULL);
    /* K: the count of the same mask again (-x < 0), at most 5 */
    st = st ? st : kiln_network_add_node(net, "neg", "Neg", "", 13, 1, (const char *[]){"x"}, 1, (const char *[]){"nx"}, NULL);
    st = st ? st : kiln_network_add_node(net, "lt", "Less", "", 13, 2, (const char *[]){"nx", "zero"}, 1, (const char *[]){"lt"}, NULL);
    st = st ? st : kiln_network_add_node(net, "nz_b", "NonZero", "", 13, 1, (const char *[]){"lt"}, 1, (const char *[]){"ib"}, NULL);
    st = st ? st : kiln_network_add_node(net, "shape", "Shape", "", 13, 1, (const char *[]){"ib"}, 1, (const char *[]){"sb"}, NULL);
    st = st ? st : kiln_network_add_node(net, "count", "Gather", "", 13, 2, (const char *[]){"sb", "one"}, 1, (const char *[]){"cnt"}, NULL);
    st = st ? st : kiln_network_add_node(net, "cat", "Concat", "", 13, 2, (const char *[]){"five", "cnt"}, 1, (const char *[]){"kc"}, &cat);
    st = st ? st : kiln_network_set_attr_int(net, cat, "axis", 0);
    st = st ? st : kiln_network_add_node(net, "kmin", "ReduceMin", "", 13, 1, (const char *[]){"kc"}, 1, (const char *[]){"k"}, &rmin);
    st = st ? st : kiln_network_set_attr_int(net, rmin, "keepdims", 1);
    st = st ? st : kiln_network_add_node(net, "topk", "TopK", "", 11, 2, (const char *[]){"vals", "k"}, 2, (const char *[]){"top", "at"}, NULL);
    st = st ? st : kiln_network_mark_output(net, "top");
    if (st != KILN_OK) {
        kiln_network_destroy(net);
        return NULL;
    }
    return net;
}

/* One run: x with `npos` positive entries; top must be the min(5, npos)
 * largest, descending. */
static void run_once(kiln_context *ctx, const float *x, const float *want, int nwant) {
    float top[8] = {0};
    KT_OK(kiln_context_set_tensor_address(ctx, "x", (void *)x));
    KT_OK(kiln_context_set_tensor_address(ctx, "top", top));
    KT_OK(kiln_context_enqueue(ctx, NULL));
    int64_t dims[8] = {0};
    int rank = kiln_context_tensor_shape(ctx, "top", dims);
    KT_CHECK(rank == 1 && dims[0] == nwant);
    for (int i = 0; i < nwant; i++)
        KT_CHECK(top[i] == want[i]);
}

int main(void) {
    kiln_set_logger(NULL, NULL, KILN_LOG_ERROR);
    kiln_network *net = make_net();
    KT_CHECK(net != NULL);
    if (!net)
        return kt_finish();
    kiln_builder_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    KT_OK(kiln_builder_config_create(&cfg));
    KT_OK(kiln_build_serialized(net, cfg, &plan, &size));
    kiln_builder_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_engine *eng = NULL;
    if (plan)
        KT_OK(kiln_engine_load(plan, size, &eng));
    kiln_free(plan);
    if (!eng)
        return kt_finish();
    kiln_context *ctx = NULL;
    KT_OK(kiln_context_create(eng, &ctx));
    if (ctx) {
        const float x3[8] = {-1.f, 2.f, -3.f, 0.5f, 0.f, 4.f, -2.f, -0.5f};
        const float w3[3] = {4.f, 2.f, 0.5f};
        run_once(ctx, x3, w3, 3); /* K = 3 of 3 */
        const float x7[8] = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, -1.f};
        const float w7[5] = {7.f, 6.f, 5.f, 4.f, 3.f};
        run_once(ctx, x7, w7, 5); /* K = 5 of 7 */
        const float x0[8] = {-1.f, -2.f, -3.f, -4.f, -5.f, -6.f, -7.f, -8.f};
        run_once(ctx, x0, NULL, 0); /* nothing positive: K = 0 */
        run_once(ctx, x3, w3, 3);
        kiln_context_destroy(ctx);
    }
    kiln_engine_destroy(eng);
    return kt_finish();
}
