/* test_cpu_vec.c - the CPU backend's vectorized loops (k_vec.h) against the
 * scalar reference (libm in double): exp of softmax rows, max, scale and
 * both GELU forms, at lengths that leave every tail size, and the same
 * calls through the forced scalar path. Fixed seed. */
#include "backends/cpu/k_vec.h"
#include "test.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float urand(float lo, float hi) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rng >> 40) / 16777216.0);
}

static double gelu_ref(double x, bool tanh_form) {
    if (tanh_form)
        return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    return 0.5 * x * erfc(-x / sqrt(2.0)); /* 1 + erf cancels in the tail */
}

static void check_exp(size_t n) {
    float row[300], src[300];
    double want = 0.0;
    float mx = 3.5f;
    for (size_t j = 0; j < n; j++) {
        src[j] = row[j] = j % 7 == 3 ? -INFINITY : urand(-100.f, 3.5f);
        if (j % 11 == 5)
            src[j] = row[j] = urand(-0.5f, 3.5f); /* near the max: largest terms */
        want += src[j] == -INFINITY ? 0.0 : exp((double)(src[j] - mx));
    }
    float sum = kv_exp_shift_sum(row, n, mx);
    double worst = 0.0;
    for (size_t j = 0; j < n; j++) {
        /* the argument as the kernel forms it: src - mx rounded to float */
        double e = src[j] == -INFINITY ? 0.0 : exp((double)(src[j] - mx));
        double err = fabs(row[j] - e);
        double tol = e * 2.5e-7 + 2e-38; /* 2 ulp, or the flush of a subnormal */
        if (err > tol && err - tol > worst)
            worst = err - tol;
        if (src[j] == -INFINITY)
            KT_CHECK(row[j] == 0.f);
    }
    KT_CHECK(worst == 0.0);
    KT_CHECK(fabs(sum - want) <= 1e-6 * want + 1e-30);
}

static void check_gelu(size_t n, bool tanh_form, float range) {
    float x[300], src[300];
    for (size_t j = 0; j < n; j++)
        src[j] = x[j] = urand(-range, range);
    if (n > 2)
        src[0] = x[0] = 0.f, src[1] = x[1] = -0.f;
    kv_gelu(x, n, tanh_form);
    int bad = 0;
    for (size_t j = 0; j < n; j++) {
        double e = gelu_ref(src[j], tanh_form);
        if (!(fabs(x[j] - e) <= 3e-7 * fabs(src[j]) + 1e-7)) {
            if (bad++ < 3)
                fprintf(stderr, "gelu(%s) %.9g: %.9g, want %.9g\n", tanh_form ? "tanh" : "erf",
                        src[j], x[j], e);
        }
    }
    KT_CHECK(bad == 0);
}

static void run_all(void) {
    for (size_t n = 1; n <= 40; n++)
        check_exp(n);
    check_exp(128);
    check_exp(300);
    for (int f = 0; f < 2; f++)
        for (size_t n = 1; n <= 40; n++) {
            check_gelu(n, f, 4.f);
            check_gelu(n, f, 30.f);
        }
    check_gelu(300, false, 12.f);
    check_gelu(300, true, 12.f);
    /* the far tails: GELU -> x above, -> 0 below with its relative accuracy
     * kept to the rounding of z^2 in float (the reference's 1 + erff(x)
     * cancels to 0 there) */
    float t[4] = {-9.f, -5.f, 6.f, 50.f};
    kv_gelu(t, 4, false);
    if (kv_have_avx2()) {
        KT_CHECK(fabs(t[0] - gelu_ref(-9.0, false)) <= 1e-5 * fabs(gelu_ref(-9.0, false)) + 1e-37);
        KT_CHECK(fabs(t[1] - gelu_ref(-5.0, false)) <= 1e-5 * fabs(gelu_ref(-5.0, false)));
    }
    KT_CHECK(t[2] == 6.f && t[3] == 50.f);
    float row[37];
    for (int j = 0; j < 37; j++)
        row[j] = urand(-5.f, 5.f);
    row[29] = 7.25f;
    KT_CHECK(kv_max(row, 37) == 7.25f);
    float all_inf[9];
    for (int j = 0; j < 9; j++)
        all_inf[j] = -INFINITY;
    KT_CHECK(kv_max(all_inf, 9) == -INFINITY);
    float s[19];
    for (int j = 0; j < 19; j++)
        s[j] = (float)j;
    kv_scale(s, 19, 0.5f);
    KT_CHECK(s[18] == 9.f && s[1] == 0.5f);
}

int main(void) {
    printf("AVX2 path: %s\n", kv_have_avx2() ? "yes" : "no (scalar only)");
    run_all();
    kv_force_scalar(true);
    run_all();
    kv_force_scalar(false);
    return kt_finish();
}
