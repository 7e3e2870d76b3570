/* test_ref.c: CPU tests of the element conversions and norm statistics of runtime/ref/ref.c
 * (numerics 1, 3). Per-tensor FP8 (scale update, norm + quantize, GEMM): test_ref_fp8_delayed.c. */
#include "test_ref_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

/* NOTES: expected values come from the numerics contract (docs/numerics.md), from hand arithmetic,
 * or from an independent computation in this file (brute-force nearest search, long-double
 * statistics, algebraic properties); never from the code under test itself. */

/* {================================================================== element conversions */

/* numerics 1 conformance bytes for E4M3. */
static void test_e4m3_conformance(void **state) {
    (void)state;
    assert_int_equal(qf_e4m3_from_float_ref(464.0f), 0x7E); /* tie 448/480: even, and saturate */
    assert_int_equal(qf_e4m3_from_float_ref(465.0f), 0x7E); /* rounds to 480: saturates */
    assert_int_equal(qf_e4m3_from_float_ref(1000.0f), 0x7E);
    assert_int_equal(qf_e4m3_from_float_ref(-1000.0f), 0xFE);
    assert_int_equal(qf_e4m3_from_float_ref(448.0f), 0x7E);
    assert_int_equal(qf_e4m3_from_float_ref(INFINITY), 0x7E);
    assert_int_equal(qf_e4m3_from_float_ref(-INFINITY), 0xFE);
    assert_int_equal(qf_e4m3_from_float_ref(NAN), 0x7F);
    assert_int_equal(qf_e4m3_from_float_ref(-NAN), 0x7F); /* cvt.rn.satfinite drops NaN sign */
    /* 1.0625 is the tie between 1.0 (0x38) and 1.125 (0x39); 1.0625001 is above it, but
     * rounding through bf16/fp16 first would land exactly on the tie and give 0x38. */
    assert_int_equal(qf_e4m3_from_float_ref(1.0625001f), 0x39);
    assert_int_equal(qf_e4m3_from_float_ref(1.0625f), 0x38);
    assert_int_equal(qf_e4m3_from_float_ref(1.0f), 0x38);
    assert_int_equal(qf_e4m3_from_float_ref(0.0f), 0x00);
    assert_int_equal(qf_e4m3_from_float_ref(-0.0f), 0x80);
}

/* numerics 1 conformance bytes for E5M2. */
static void test_e5m2_conformance(void **state) {
    (void)state;
    float h = qf_fp16_to_float(qf_float_to_fp16(1.125f)); /* an fp16 input, widened */
    assert_true(h == 1.125f);
    assert_int_equal(qf_e5m2_from_float_ref(h), 0x3C); /* tie 1.0/1.25 -> even (1.0) */
    assert_int_equal(qf_e5m2_from_float_ref(1e6f), 0x7B);
    assert_int_equal(qf_e5m2_from_float_ref(-1e6f), 0xFB);
    assert_int_equal(qf_e5m2_from_float_ref(57344.0f), 0x7B);
    assert_int_equal(qf_e5m2_from_float_ref(61440.0f), 0x7B); /* tie 57344/65536(inf) */
    assert_int_equal(qf_e5m2_from_float_ref(INFINITY), 0x7B);
    assert_int_equal(qf_e5m2_from_float_ref(-INFINITY), 0xFB);
    assert_int_equal(qf_e5m2_from_float_ref(NAN), 0x7F);
    assert_int_equal(qf_e5m2_from_float_ref(-NAN), 0x7F);
    assert_int_equal(qf_e5m2_from_float_ref(-0.0f), 0x80);
    assert_int_equal(qf_fp8_from_float_ref(QF_DTYPE_E5M2, 1.0f), 0x3C);
    assert_int_equal(qf_fp8_from_float_ref(QF_DTYPE_E4M3, 1.0f), 0x38);
    assert_true(qf_fp8_max(QF_DTYPE_E4M3) == 448.0f);
    assert_true(qf_fp8_max(QF_DTYPE_E5M2) == 57344.0f);
}

/* Subnormals, smallest values and the subnormal/normal boundary. */
static void test_fp8_subnormals(void **state) {
    (void)state;
    assert_int_equal(qf_e4m3_from_float_ref(ldexpf(1.0f, -9)), 0x01);
    assert_int_equal(qf_e4m3_from_float_ref(ldexpf(1.0f, -10)), 0x00); /* tie 0/2^-9: even */
    assert_int_equal(qf_e4m3_from_float_ref(-ldexpf(1.0f, -10)), 0x80);
    assert_int_equal(qf_e4m3_from_float_ref(ldexpf(3.0f, -10)), 0x02); /* tie 1/2: even */
    assert_int_equal(qf_e4m3_from_float_ref(ldexpf(1.0f, -10) * 1.0001f), 0x01);
    assert_int_equal(qf_e4m3_from_float_ref(ldexpf(7.0f, -9)), 0x07);   /* largest subnormal */
    assert_int_equal(qf_e4m3_from_float_ref(ldexpf(15.0f, -10)), 0x08); /* tie 7/8: even */
    assert_int_equal(qf_e4m3_from_float_ref(ldexpf(1.0f, -6)), 0x08);   /* smallest normal */
    assert_int_equal(qf_e4m3_from_float_ref(FLT_MIN), 0x00);
    assert_int_equal(qf_e4m3_from_float_ref(-FLT_TRUE_MIN), 0x80);
    assert_int_equal(qf_e5m2_from_float_ref(ldexpf(1.0f, -16)), 0x01);
    assert_int_equal(qf_e5m2_from_float_ref(ldexpf(1.0f, -17)), 0x00);
    assert_int_equal(qf_e5m2_from_float_ref(ldexpf(3.0f, -17)), 0x02);
    assert_int_equal(qf_e5m2_from_float_ref(ldexpf(1.0f, -14)), 0x04); /* smallest normal */
    assert_true(qf_e4m3_to_float_ref(0x01) == ldexpf(1.0f, -9));
    assert_true(qf_e5m2_to_float_ref(0x01) == ldexpf(1.0f, -16));
    assert_true(qf_e4m3_to_float_ref(0x7E) == 448.0f);
    assert_true(qf_e5m2_to_float_ref(0x7B) == 57344.0f);
    assert_true(isinf(qf_e5m2_to_float_ref(0xFC)) && qf_e5m2_to_float_ref(0xFC) < 0);
    assert_true(isnan(qf_e4m3_to_float_ref(0xFF)) && isnan(qf_e5m2_to_float_ref(0x7D)));
    assert_float_bits_equal(qf_e4m3_to_float_ref(0x80), -0.0f);
}

/* Every non-NaN code decodes and re-encodes to itself; decoded magnitudes increase with code. */
static void test_fp8_roundtrip_all_codes(void **state) {
    (void)state;
    for (int f = 0; f < 2; f++) {
        qf_dtype fmt = k_fp8_fmts[f];
        float prev = -1.0f;
        for (int c = 0; c < 256; c++) {
            float v = qf_fp8_to_float_ref(fmt, (uint8_t)c);
            if (isnan(v))
                continue;
            if (isinf(v)) { /* E5M2 inf codes saturate on the way back */
                assert_int_equal(qf_fp8_from_float_ref(fmt, v), (c & 0x80) | max_code(fmt));
                continue;
            }
            assert_int_equal(qf_fp8_from_float_ref(fmt, v), c);
            if (c <= max_code(fmt)) {
                assert_true(v > prev);
                prev = v;
            }
        }
        assert_true(prev == qf_fp8_max(fmt));
    }
}

/* The encoded byte is the brute-force nearest code: random floats over the whole range, every
 * midpoint between adjacent codes (ties) and their fp32 neighbours. */
static void test_fp8_nearest_bruteforce(void **state) {
    (void)state;
    uint64_t seed = 42;
    for (int f = 0; f < 2; f++) {
        qf_dtype fmt = k_fp8_fmts[f];
        for (int i = 0; i < 20000; i++) {
            uint64_t r = qf_test_rng_next(&seed);
            int e = (int)(r % 48) - 30; /* 2^-30 .. 2^17: underflow through overflow */
            float v = ldexpf(1.0f + (float)((r >> 8) & 0xFFFFFF) / 16777216.0f, e);
            v = (r >> 40) & 1 ? -v : v;
            assert_int_equal(qf_fp8_from_float_ref(fmt, v), nearest_code(fmt, v));
        }
        for (int c = 0; c < max_code(fmt); c++) {
            float lo = qf_fp8_to_float_ref(fmt, (uint8_t)c);
            float mid = (lo + qf_fp8_to_float_ref(fmt, (uint8_t)(c + 1))) * 0.5f; /* exact */
            float cand[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
            for (int j = 0; j < 3; j++) {
                assert_int_equal(qf_fp8_from_float_ref(fmt, cand[j]), nearest_code(fmt, cand[j]));
                assert_int_equal(qf_fp8_from_float_ref(fmt, -cand[j]), nearest_code(fmt, -cand[j]));
            }
        }
    }
}

/* bf16 conversions: hand-checked ties and specials, and every non-NaN code round-trips. */
static void test_bf16_conversions(void **state) {
    (void)state;
    assert_int_equal(qf_float_to_bf16(1.0f), 0x3F80);
    assert_int_equal(qf_float_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3F80); /* tie: even */
    assert_int_equal(qf_float_to_bf16(1.0f + ldexpf(3.0f, -8)), 0x3F82); /* tie: even */
    assert_int_equal(qf_float_to_bf16(1.0f + ldexpf(1.0f, -8) * 1.01f), 0x3F81);
    assert_int_equal(qf_float_to_bf16(-2.0f), 0xC000);
    assert_int_equal(qf_float_to_bf16(FLT_MAX), 0x7F80); /* rounds past the largest: inf */
    assert_true(isnan(qf_bf16_to_float(qf_float_to_bf16(NAN))));
    /* A NaN whose payload sits only in the low 16 bits must not truncate to inf. */
    uint32_t snan = 0x7F800001u;
    float fs;
    memcpy(&fs, &snan, sizeof fs);
    assert_true(isnan(qf_bf16_to_float(qf_float_to_bf16(fs))));
    for (uint32_t c = 0; c < 65536; c++) {
        float v = qf_bf16_to_float((uint16_t)c);
        if (!isnan(v))
            assert_int_equal(qf_float_to_bf16(v), c);
    }
}

/* fp16 conversions: hand-checked ties and specials, round-trips, and random floats land on the
 * nearest fp16 (checked against both neighbours in double). */
static void test_fp16_conversions(void **state) {
    (void)state;
    assert_int_equal(qf_float_to_fp16(1.0f), 0x3C00);
    assert_int_equal(qf_float_to_fp16(65504.0f), 0x7BFF);
    assert_int_equal(qf_float_to_fp16(65519.0f), 0x7BFF);
    assert_int_equal(qf_float_to_fp16(65520.0f), 0x7C00); /* tie 65504/65536: even -> inf */
    assert_int_equal(qf_float_to_fp16(-1e6f), 0xFC00);
    assert_int_equal(qf_float_to_fp16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(qf_float_to_fp16(ldexpf(1.0f, -25)), 0x0000); /* tie: even */
    assert_int_equal(qf_float_to_fp16(ldexpf(3.0f, -25)), 0x0002); /* tie: even */
    assert_int_equal(qf_float_to_fp16(-0.0f), 0x8000);
    assert_true(isnan(qf_fp16_to_float(qf_float_to_fp16(NAN))));
    assert_true(qf_fp16_to_float(0x7C00) == INFINITY);
    for (uint32_t c = 0; c < 65536; c++) {
        float v = qf_fp16_to_float((uint16_t)c);
        if (!isnan(v))
            assert_int_equal(qf_float_to_fp16(v), c);
    }
    uint64_t seed = 7;
    for (int i = 0; i < 20000; i++) {
        uint64_t r = qf_test_rng_next(&seed);
        float v = ldexpf(1.0f + (float)((r >> 8) & 0xFFFFFF) / 16777216.0f, (int)(r % 40) - 26);
        uint16_t h = qf_float_to_fp16(v); /* v > 0 and < 65504: finite, so h +- 1 are neighbours */
        double d = fabs((double)qf_fp16_to_float(h) - v);
        if (h > 0)
            assert_true(d <= fabs((double)qf_fp16_to_float((uint16_t)(h - 1)) - v));
        if (h < 0x7BFF)
            assert_true(d <= fabs((double)qf_fp16_to_float((uint16_t)(h + 1)) - v));
    }
}

static void test_load_as_float(void **state) {
    (void)state;
    const float f32[3] = {1.5f, -2.25f, 3e-5f};
    const uint16_t f16[3] = {0x3C00, 0xC000, 0x3555}; /* 1, -2, 0.333251953125 */
    const uint16_t b16[3] = {0x3F80, 0xC040, 0x4049}; /* 1, -3, 3.140625 */
    assert_true(qf_load_as_float(f32, QF_DTYPE_FP32, 2) == 3e-5f);
    assert_true(qf_load_as_float(f16, QF_DTYPE_FP16, 1) == -2.0f);
    assert_true(qf_load_as_float(f16, QF_DTYPE_FP16, 2) == 0.333251953125f);
    assert_true(qf_load_as_float(b16, QF_DTYPE_BF16, 1) == -3.0f);
    assert_true(qf_load_as_float(b16, QF_DTYPE_BF16, 2) == 3.140625f);
}

static void test_amax_merge(void **state) {
    (void)state;
    assert_true(qf_amax_merge(0.0f, -3.0f) == 3.0f);
    assert_true(qf_amax_merge(5.0f, 2.0f) == 5.0f);
    assert_true(qf_amax_merge(1.0f, -INFINITY) == INFINITY);
    assert_true(isnan(qf_amax_merge(NAN, 1.0f)));
    assert_true(isnan(qf_amax_merge(1.0f, NAN)));
    assert_true(isnan(qf_amax_merge(INFINITY, -NAN)));
}

/* }================================================================== */

/* {================================================================== norm */

/* TE PR #364: eps inside the square root; x = [1e-3]*4, eps 1e-5 -> 0.301511. */
static void test_rmsnorm_te364(void **state) {
    (void)state;
    const float x[4] = {1e-3f, 1e-3f, 1e-3f, 1e-3f};
    float mu = -1.0f, rs = 0.0f;
    qf_norm_stats_ref(QF_NORM_RMSNORM, QF_DTYPE_FP32, x, 1, 4, 1e-5f, &mu, &rs);
    assert_true(mu == 0.0f);
    float y = qf_norm_apply_ref(QF_NORM_RMSNORM, 0, x[0], mu, rs, 1.0f, 0.0f);
    assert_true(fabsf(y - 0.301511f) <= 1e-6f);
    /* with eps outside the root the value would be ~1: proves where eps went */
    assert_true(fabsf(y - 1.0f) > 0.5f);
}

/* Layernorm of [1, 2, 3, 4]: mu 2.5, var 1.25 by hand. */
static void test_layernorm_stats_hand(void **state) {
    (void)state;
    const float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float mu, rs;
    qf_norm_stats_ref(QF_NORM_LAYERNORM, QF_DTYPE_FP32, x, 1, 4, 0.0f, &mu, &rs);
    assert_true(mu == 2.5f);
    assert_rel_close(rs, 0.894427190999915878563669467, 1e-7); /* 1/sqrt(1.25) */
    float y = qf_norm_apply_ref(QF_NORM_LAYERNORM, 0, 4.0f, mu, rs, 2.0f, 0.5f);
    assert_rel_close(y, 1.5 * 0.894427190999915878563669467 * 2.0 + 0.5, 1e-6);
}

/* Naive one-pass long-double statistics of row m, compared with the reference. */
static void check_stats_naive(qf_norm norm, qf_dtype dt, const void *x, int64_t M, int64_t K,
                              float eps) {
    float *mu = malloc((size_t)M * sizeof *mu), *rs = malloc((size_t)M * sizeof *rs);
    qf_norm_stats_ref(norm, dt, x, M, K, eps, mu, rs);
    for (int64_t m = 0; m < M; m++) {
        long double s = 0, ss = 0;
        for (int64_t k = 0; k < K; k++) {
            long double v = qf_load_as_float(x, dt, m * K + k);
            s += v;
            ss += v * v;
        }
        long double mean = norm == QF_NORM_LAYERNORM ? s / K : 0;
        long double var = ss / K - mean * mean; /* rmsnorm: mean(x^2) */
        assert_rel_close(mu[m], (double)mean, 1e-6);
        assert_rel_close(rs[m], (double)(1.0L / sqrtl(var + eps)), 1e-6);
    }
    free(mu);
    free(rs);
}

static void test_norm_stats_naive(void **state) {
    (void)state;
    const qf_dtype dts[3] = {QF_DTYPE_FP32, QF_DTYPE_FP16, QF_DTYPE_BF16};
    for (int d = 0; d < 3; d++) {
        void *x = malloc(3 * 100 * dt_size(dts[d]));
        fill_random(x, dts[d], 300, 3.0f, 1.0f, 11 + (uint64_t)d);
        check_stats_naive(QF_NORM_LAYERNORM, dts[d], x, 3, 100, 1e-5f);
        check_stats_naive(QF_NORM_RMSNORM, dts[d], x, 3, 100, 1e-6f);
        free(x);
    }
}

/* K = 1 (by hand) and the odd K = 769 of ROCm aiter #5044 (x [7, 769]). */
static void test_norm_odd_k(void **state) {
    (void)state;
    const float x1 = 3.0f, g = 1.5f, b = -0.25f;
    float mu, rs;
    qf_norm_stats_ref(QF_NORM_LAYERNORM, QF_DTYPE_FP32, &x1, 1, 1, 1e-5f, &mu, &rs);
    assert_true(mu == 3.0f);
    assert_rel_close(rs, 1.0 / sqrt((double)1e-5f), 1e-7); /* var 0: 1/sqrt(eps) */
    assert_true(qf_norm_apply_ref(QF_NORM_LAYERNORM, 0, x1, mu, rs, g, b) == b);
    qf_norm_stats_ref(QF_NORM_RMSNORM, QF_DTYPE_FP32, &x1, 1, 1, 0.0f, &mu, &rs);
    assert_rel_close(rs, 1.0 / 3.0, 1e-7);
    assert_rel_close(qf_norm_apply_ref(QF_NORM_RMSNORM, 0, x1, mu, rs, g, b), 1.5, 1e-7);

    uint16_t *x = malloc(7 * 769 * sizeof *x);
    fill_random(x, QF_DTYPE_BF16, 7 * 769, -0.5f, 2.0f, 5);
    check_stats_naive(QF_NORM_LAYERNORM, QF_DTYPE_BF16, x, 7, 769, 1e-5f);
    check_stats_naive(QF_NORM_RMSNORM, QF_DTYPE_BF16, x, 7, 769, 1e-5f);
    free(x);
}

/* TE PR #1690: g = fl(gamma) + 1 in fp32; a bf16-rounded g would be 1.0078125. */
static void test_zero_centered_gamma(void **state) {
    (void)state;
    const float gamma = 0.0050048828125f; /* 41 * 2^-13: exact in bf16 */
    assert_true(qf_bf16_to_float(qf_float_to_bf16(gamma)) == gamma);
    float y_ln = qf_norm_apply_ref(QF_NORM_LAYERNORM, 1, 1.0f, 0.0f, 1.0f, gamma, 0.0f);
    float y_rms = qf_norm_apply_ref(QF_NORM_RMSNORM, 1, 1.0f, 0.0f, 1.0f, gamma, 0.0f);
    assert_true(y_ln == 1.0050048828125f);
    assert_true(y_rms == 1.0050048828125f);
    assert_true(qf_norm_apply_ref(QF_NORM_RMSNORM, 0, 1.0f, 0.0f, 1.0f, gamma, 0.0f) == gamma);
    assert_true(qf_norm_apply_ref(QF_NORM_NONE, 1, -7.0f, 2.0f, 3.0f, gamma, 9.0f) == -7.0f);
}

/* The layernorm fma is one rounding: x - mu and the product are rounded, the fma is not. */
static void test_layernorm_fma_order(void **state) {
    (void)state;
    /* (x - mu) * rs = t = 1 + 2^-12 exactly; t * g with g = t is 1 + 2^-11 + 2^-24, which
     * fp32 cannot hold (a tie, rounded down to 1 + 2^-11). With b = -(1 + 2^-11) the fma gives
     * 2^-24; a separate multiply then add would give 0. */
    float t = 1.0f + ldexpf(1.0f, -12), b = -(1.0f + ldexpf(1.0f, -11));
    float y = qf_norm_apply_ref(QF_NORM_LAYERNORM, 0, t, 0.0f, 1.0f, t, b);
    assert_true(y == ldexpf(1.0f, -24));
}

/* rmsnorm rounds x * rsigma before the gamma multiply. With x = rsigma = 1 - 2^-9 and g = fl(0.1)
 * the two association orders differ in the last bit (expected values from an independent fp32
 * emulation). */
static void test_rmsnorm_op_order(void **state) {
    (void)state;
    const float x = 1.0f - ldexpf(1.0f, -9), g = 0.1f;
    assert_true(g == 0x1.99999ap-4f);
    float y = qf_norm_apply_ref(QF_NORM_RMSNORM, 0, x, 0.0f, x, g, 0.0f);
    assert_true(y == 0x1.980066p-4f); /* (x * rs) * g; x * (rs * g) would be 0x1.980068p-4 */
}

/* }================================================================== */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_conformance),
        cmocka_unit_test(test_e5m2_conformance),
        cmocka_unit_test(test_fp8_subnormals),
        cmocka_unit_test(test_fp8_roundtrip_all_codes),
        cmocka_unit_test(test_fp8_nearest_bruteforce),
        cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_fp16_conversions),
        cmocka_unit_test(test_load_as_float),
        cmocka_unit_test(test_amax_merge),
        cmocka_unit_test(test_rmsnorm_te364),
        cmocka_unit_test(test_layernorm_stats_hand),
        cmocka_unit_test(test_norm_stats_naive),
        cmocka_unit_test(test_norm_odd_k),
        cmocka_unit_test(test_zero_centered_gamma),
        cmocka_unit_test(test_layernorm_fma_order),
        cmocka_unit_test(test_rmsnorm_op_order),
    };
    return cmocka_run_group_tests_name("ref", tests, NULL, NULL);
}
