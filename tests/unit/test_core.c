/* test_core.c - core: status messages, half conversions, hashing, buffers. */
#include "core/core.h"
#include "test.h"

static void test_errors(void) {
    kiln_status st = kn_error(KILN_ERR_PARSE, "bad byte at %d", 7);
    KT_CHECK(st == KILN_ERR_PARSE);
    KT_CHECK(strcmp(kiln_last_error(), "bad byte at 7") == 0);
    kn_error_wrap(st, "model '%s'", "m.onnx");
    KT_CHECK(strcmp(kiln_last_error(), "model 'm.onnx': bad byte at 7") == 0);
    KT_CHECK(strcmp(kiln_status_name(KILN_ERR_SHAPE), "KILN_ERR_SHAPE") == 0);
}

static void test_half(void) {
    const float vals[] = {0.f, 1.f, -2.5f, 65504.f, 6.103515625e-05f, 5.96046448e-08f, 0.1f};
    for (size_t i = 0; i < KN_ARRAY_LEN(vals); i++) {
        float back = kn_half_to_float(kn_float_to_half(vals[i]));
        KT_NEAR(back, vals[i], fabs(vals[i]) * 1e-3 + 1e-12);
    }
    KT_CHECK(kn_float_to_half(1e6f) == 0x7c00);          /* overflow -> inf */
    KT_CHECK(isnan(kn_half_to_float(kn_float_to_half(NAN))));
    KT_CHECK(kn_float_to_half(1.0f) == 0x3c00);
    KT_CHECK(kn_float_to_bf16(1.0f) == 0x3f80);
    KT_NEAR(kn_bf16_to_float(kn_float_to_bf16(3.14159f)), 3.140625, 1e-6);
    KT_NEAR(kn_fp8e4m3_to_float(kn_float_to_fp8e4m3(448.f)), 448.0, 0);
    KT_NEAR(kn_fp8e5m2_to_float(kn_float_to_fp8e5m2(0.5f)), 0.5, 0);
}

static void test_sha256(void) {
    char hex[65];
    kn_sha256_hex("abc", 3, hex);
    KT_CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    kn_sha256_hex("", 0, hex);
    KT_CHECK(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
    KT_CHECK(kn_hash64("abc", 3, 0) != kn_hash64("abd", 3, 0));
}

static void test_buf_map(void) {
    kn_buf b = {0};
    kn_buf_printf(&b, "%d-%s", 42, "x");
    kn_buf_json_string(&b, "a\"b\n");
    KT_CHECK(!b.failed && b.len == strlen("42-x\"a\\\"b\\u000a\""));
    kn_buf_free(&b);
    kn_strmap m = {0};
    char names[200][8];
    for (int i = 0; i < 200; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        KT_OK(kn_strmap_put(&m, names[i], i));
    }
    KT_CHECK(kn_strmap_get(&m, "t123") == 123);
    KT_CHECK(kn_strmap_get(&m, "nope") == -1);
    kn_strmap_free(&m);
}

static void test_fault_injection(void) {
    kn_fault_inject_set(2);
    void *a = kn_malloc(8);
    void *b = kn_malloc(8);
    KT_CHECK(a != NULL && b == NULL);
    KT_CHECK(strstr(kiln_last_error(), "injected") != NULL);
    kn_fault_inject_set(0);
    kn_free(a);
}

int main(void) {
    test_errors();
    test_half();
    test_sha256();
    test_buf_map();
    test_fault_injection();
    return kt_finish();
}
