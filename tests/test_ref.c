/* test_ref.c: CPU tests of the scalar references in runtime/ref/ref.c (SPEC 1, 2.1, 3). */
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

#include "ref.h"

/* NOTES: expected values come from the SPEC, from hand arithmetic, or from an independent
 * computation in this file (brute-force nearest search, long-double statistics, algebraic
 * properties); never from the code under test itself. */

/* {================================================================== helpers */

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Bit-exact float equality (distinguishes -0.0, treats equal NaN payloads as equal). */
#define assert_float_bits_equal(a, b) assert_int_equal(fbits(a), fbits(b))

/* |a - b| <= tol * |b|, with a message naming both values on failure. */
static void assert_rel_close(double a, double b, double tol) {
    if (!(fabs(a - b) <= tol * fabs(b))) {
        print_error("expected %.17g, got %.17g (rel tol %g)\n", b, a, tol);
        fail();
    }
}

static const qf_dtype k_fp8_fmts[2] = {QF_DTYPE_E4M3, QF_DTYPE_E5M2};

/* Largest finite magnitude code of an FP8 format (SPEC 1 table). */
static uint8_t max_code(qf_dtype fmt) {
    return fmt == QF_DTYPE_E4M3 ? 0x7E : 0x7B;
}

/* Brute force: the positive finite code nearest to |v|, ties to the even code (even mantissa),
 * with the sign of v. Values past the largest finite one pick it (satfinite). */
static uint8_t nearest_code_bruteforce(qf_dtype fmt, float v) {
    double a = fabs((double)v), best_d = INFINITY;
    int best = -1;
    for (int c = 0; c <= max_code(fmt); c++) {
        double d = fabs(a - (double)qf_fp8_to_float_ref(fmt, (uint8_t)c));
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best_d = d;
            best = c;
        }
    }
    return (uint8_t)(best | (signbit(v) ? 0x80 : 0));
}

/* Fills n elements of dtype dt (fp32/fp16/bf16) with off + amp * uniform[-1, 1). */
static void fill_random(void *p, qf_dtype dt, int64_t n, float off, float amp, uint64_t seed) {
    for (int64_t i = 0; i < n; i++)
        store_as(p, dt, i, off + amp * qf_test_rng_uniform(&seed));
}

static size_t dt_size(qf_dtype dt) {
    return dt == QF_DTYPE_FP32 ? 4 : 2;
}

/* }================================================================== */

/* {================================================================== element conversions */

/* SPEC 1 conformance bytes for E4M3. */
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

/* SPEC 1 conformance bytes for E5M2. */
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
            assert_int_equal(qf_fp8_from_float_ref(fmt, v), nearest_code_bruteforce(fmt, v));
        }
        for (int c = 0; c < max_code(fmt); c++) {
            float lo = qf_fp8_to_float_ref(fmt, (uint8_t)c);
            float mid = (lo + qf_fp8_to_float_ref(fmt, (uint8_t)(c + 1))) * 0.5f; /* exact */
            float cand[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
            for (int j = 0; j < 3; j++) {
                assert_int_equal(qf_fp8_from_float_ref(fmt, cand[j]),
                                 nearest_code_bruteforce(fmt, cand[j]));
                assert_int_equal(qf_fp8_from_float_ref(fmt, -cand[j]),
                                 nearest_code_bruteforce(fmt, -cand[j]));
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

/* {================================================================== scale update */

/* One tensor, E4M3 unless said: runs the update and returns nothing; state is in the arrays. */
typedef struct su_state {
    float amax, hist[4], scale, scale_inv;
    uint8_t fmt;
} su_state;

static void su_run(su_state *s, float margin, qf_amax_compute ac) {
    qf_fp8_scale_update_ref(1, 4, &s->amax, s->hist, &s->scale, &s->scale_inv, &s->fmt, margin, ac);
}

static su_state su_make(float amax, float h0, float h1, float h2, float h3, float scale) {
    su_state s = {amax, {h0, h1, h2, h3}, scale, 1.0f / scale, QF_DTYPE_E4M3};
    return s;
}

static void test_scale_update_zero_amax(void **state) {
    (void)state;
    su_state s = su_make(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 2.0f);
    s.scale_inv = 0.75f; /* deliberately inconsistent: proves scale_inv is not rewritten */
    su_run(&s, 0.0f, QF_AMAX_COMPUTE_MAX);
    assert_true(s.hist[0] == 1.0f && s.hist[1] == 2.0f && s.hist[2] == 3.0f && s.hist[3] == 4.0f);
    assert_true(s.scale == 2.0f && s.scale_inv == 0.75f && s.amax == 0.0f);
}

/* TE PR #786: 448 / 1e-38 overflows; the scale must be FLT_MAX, not inf. */
static void test_scale_update_tiny_amax(void **state) {
    (void)state;
    su_state s = su_make(1e-38f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f);
    su_run(&s, 0.0f, QF_AMAX_COMPUTE_MAX);
    assert_true(s.scale == FLT_MAX);
    assert_true(s.scale_inv == 1.0f / FLT_MAX && s.scale_inv > 0.0f);
    assert_true(s.hist[0] == 1e-38f && s.amax == 0.0f);
}

static void test_scale_update_inf_amax(void **state) {
    (void)state;
    su_state s = su_make(INFINITY, 1.0f, 2.0f, 3.0f, 4.0f, 3.0f);
    su_run(&s, 0.0f, QF_AMAX_COMPUTE_MAX);
    assert_true(s.hist[0] == INFINITY && s.hist[1] == 1.0f && s.hist[2] == 2.0f &&
                s.hist[3] == 3.0f);
    assert_true(s.scale == 3.0f && s.scale_inv == 1.0f / 3.0f && s.amax == 0.0f);
}

/* A NaN amax is recorded and keeps the scale while it is in the history (max), not with
 * most_recent once a finite amax arrives. */
static void test_scale_update_nan_amax(void **state) {
    (void)state;
    su_state s = su_make(NAN, 1.0f, 0.0f, 0.0f, 0.0f, 3.0f);
    su_run(&s, 0.0f, QF_AMAX_COMPUTE_MAX);
    assert_true(isnan(s.hist[0]) && s.hist[1] == 1.0f);
    assert_true(s.scale == 3.0f && s.amax == 0.0f);
    s.amax = 2.0f;
    su_run(&s, 0.0f, QF_AMAX_COMPUTE_MAX);
    assert_true(s.scale == 3.0f && isnan(s.hist[1]));
    s.amax = 2.0f;
    su_run(&s, 0.0f, QF_AMAX_COMPUTE_MOST_RECENT);
    assert_true(s.scale == 224.0f);
}

/* H = 4: newest at index 0, oldest dropped; max over the window. */
static void test_scale_update_roll(void **state) {
    (void)state;
    su_state s = su_make(0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f);
    const float steps[6] = {7.0f, 2.0f, 3.0f, 4.0f, 5.0f, 1.0f};
    const float want_scale[6] = {64.0f, 64.0f, 64.0f, 64.0f, 89.6f, 89.6f}; /* 448/7, 448/5 */
    for (int i = 0; i < 6; i++) {
        s.amax = steps[i];
        su_run(&s, 0.0f, QF_AMAX_COMPUTE_MAX);
        for (int j = 0; j < 4; j++)
            assert_true(s.hist[j] == (i - j >= 0 ? steps[i - j] : 0.0f));
        assert_true(s.scale == want_scale[i]);
        assert_true(s.amax == 0.0f);
    }
}

static void test_scale_update_max_vs_most_recent(void **state) {
    (void)state;
    su_state a = su_make(1.0f, 8.0f, 0.0f, 0.0f, 0.0f, 1.0f), b = a;
    su_run(&a, 0.0f, QF_AMAX_COMPUTE_MAX);
    su_run(&b, 0.0f, QF_AMAX_COMPUTE_MOST_RECENT);
    assert_true(a.scale == 56.0f);  /* 448 / 8 */
    assert_true(b.scale == 448.0f); /* 448 / 1 */
    assert_true(a.hist[1] == 8.0f && b.hist[1] == 8.0f);
}

static void test_scale_update_margin(void **state) {
    (void)state;
    su_state s0 = su_make(3.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f), s1 = s0, sh = s0;
    su_run(&s0, 0.0f, QF_AMAX_COMPUTE_MAX);
    su_run(&s1, 1.0f, QF_AMAX_COMPUTE_MAX);
    su_run(&sh, 0.5f, QF_AMAX_COMPUTE_MAX);
    assert_true(s1.scale == s0.scale * 0.5f);
    assert_true(s0.scale == 448.0f / 3.0f);
    assert_rel_close(sh.scale, 448.0 / sqrt(2.0) / 3.0, 1e-6);
}

/* n = 3 in one call: per-tensor formats, scale_inv == 1/scale, amax reset, untouched slot. */
static void test_scale_update_multi(void **state) {
    (void)state;
    float amax[3] = {2.0f, 3.0f, 0.0f}, hist[3] = {0.0f, 0.0f, 5.0f};
    float scale[3] = {1.0f, 1.0f, 4.0f}, scale_inv[3] = {1.0f, 1.0f, 0.25f};
    const uint8_t fmt[3] = {QF_DTYPE_E5M2, QF_DTYPE_E4M3, QF_DTYPE_E5M2};
    qf_fp8_scale_update_ref(3, 1, amax, hist, scale, scale_inv, fmt, 0.0f, QF_AMAX_COMPUTE_MAX);
    assert_true(scale[0] == 28672.0f); /* 57344 / 2 */
    assert_true(scale[1] == 448.0f / 3.0f);
    assert_true(scale[2] == 4.0f && hist[2] == 5.0f);
    for (int t = 0; t < 3; t++) {
        assert_true(scale_inv[t] == 1.0f / scale[t]);
        assert_true(amax[t] == 0.0f);
    }
    assert_true(hist[0] == 2.0f && hist[1] == 3.0f);
}

/* }================================================================== */

/* {================================================================== norm + quantize */

/* Runs the fused reference on random data and checks every output element against the
 * elementwise definition, for one (norm, zcg, dtype, gdt, fmt) combination. */
static void check_nq_case(qf_norm norm, int zcg, qf_dtype xdt, qf_dtype gdt, qf_dtype fmt) {
    enum { M = 5, K = 37 };
    float x[M * K], gamma[K], beta[K]; /* fp32-sized: room for any input dtype */
    uint8_t row[M * K], col[K * M];
    float mu[M], rs[M], mu_o[M], rs_o[M], amax = -1.0f, scale = 3.5f;
    fill_random(x, xdt, M * K, 0.5f, 4.0f, 100 + (uint64_t)norm * 8 + (uint64_t)xdt);
    fill_random(gamma, gdt, K, zcg ? 0.0f : 1.0f, 0.3f, 200);
    fill_random(beta, gdt, K, 0.0f, 0.5f, 300);
    qf_norm_stats_ref(norm, xdt, x, M, K, 1e-5f, mu, rs);
    qf_norm_quantize_fp8_ref(norm, zcg, xdt, x, gdt, gamma, beta, M, K, 1e-5f, NULL, NULL, scale,
                             fmt, row, col, mu_o, rs_o, &amax);
    float want_amax = 0.0f;
    for (int m = 0; m < M; m++) {
        if (norm != QF_NORM_NONE) {
            assert_float_bits_equal(mu_o[m], mu[m]);
            assert_float_bits_equal(rs_o[m], rs[m]);
        }
        for (int k = 0; k < K; k++) {
            float y =
                qf_norm_apply_ref(norm, zcg, qf_load_as_float(x, xdt, m * K + k), mu[m], rs[m],
                                  qf_load_as_float(gamma, gdt, k), qf_load_as_float(beta, gdt, k));
            assert_int_equal(row[m * K + k], qf_fp8_from_float_ref(fmt, y * scale));
            assert_int_equal(col[k * M + m], row[m * K + k]);
            want_amax = fabsf(y) > want_amax ? fabsf(y) : want_amax;
        }
    }
    assert_float_bits_equal(amax, want_amax);
}

static void test_nq_matches_elementwise(void **state) {
    (void)state;
    const qf_dtype dts[3] = {QF_DTYPE_FP32, QF_DTYPE_FP16, QF_DTYPE_BF16};
    for (int n = 0; n < QF_NORM_COUNT; n++)
        for (int d = 0; d < 3; d++)
            for (int zcg = 0; zcg < 2; zcg++) {
                check_nq_case((qf_norm)n, zcg, dts[d], dts[d], QF_DTYPE_E4M3);
                check_nq_case((qf_norm)n, zcg, dts[d], QF_DTYPE_FP32, QF_DTYPE_E5M2);
            }
}

/* mu_in / rsigma_in replace the computed statistics and are what mu_out / rsigma_out report. */
static void test_nq_uses_given_stats(void **state) {
    (void)state;
    const float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, g[4] = {1, 1, 1, 1}, b[4] = {0, 0, 0, 0};
    const float mu_in = 1.0f, rs_in = 2.0f;
    uint8_t row[4];
    float mu_o, rs_o, amax;
    qf_norm_quantize_fp8_ref(QF_NORM_LAYERNORM, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32, g, b, 1, 4,
                             1e-5f, &mu_in, &rs_in, 1.0f, QF_DTYPE_E4M3, row, NULL, &mu_o, &rs_o,
                             &amax);
    assert_true(mu_o == 1.0f && rs_o == 2.0f);
    assert_true(amax == 6.0f); /* (4 - 1) * 2 */
    assert_int_equal(row[0], 0x00);
    assert_int_equal(row[1], 0x40); /* 2.0 */
    assert_int_equal(row[3], 0x4C); /* 6.0 = 1.5 * 2^2 */
}

/* A NaN in x reaches amax (never silently dropped) and encodes as 0x7F; other rows' bytes and
 * the col copy stay in agreement. */
static void test_nq_nan_propagates(void **state) {
    (void)state;
    float x[2 * 3] = {1.0f, NAN, -2.0f, 0.5f, 0.25f, -4.0f};
    uint16_t xb[2 * 3];
    for (int i = 0; i < 6; i++)
        xb[i] = qf_float_to_bf16(x[i]);
    uint8_t row[6], col[6];
    float amax = 0.0f;
    qf_norm_quantize_fp8_ref(QF_NORM_NONE, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32, NULL, NULL, 2, 3,
                             0.0f, NULL, NULL, 1.0f, QF_DTYPE_E4M3, row, col, NULL, NULL, &amax);
    assert_true(isnan(amax));
    assert_int_equal(row[1], 0x7F);
    assert_int_equal(col[1 * 2 + 0], 0x7F);
    assert_int_equal(row[5], 0xC8); /* -4.0 */
    amax = 0.0f;
    qf_norm_quantize_fp8_ref(QF_NORM_RMSNORM, 0, QF_DTYPE_BF16, xb, QF_DTYPE_FP32,
                             (const float[3]){1, 1, 1}, NULL, 2, 3, 1e-5f, NULL, NULL, 1.0f,
                             QF_DTYPE_E5M2, row, NULL, NULL, NULL, &amax);
    assert_true(isnan(amax)); /* the NaN row's rsigma is NaN too: every y of row 0 */
    assert_int_equal(row[0], 0x7F);
}

/* QF_NORM_NONE ignores gamma/beta (NULL) and quantizes x * scale directly. */
static void test_nq_none_plain_quantize(void **state) {
    (void)state;
    const uint16_t x[4] = {0x3C00, 0xC000, 0x7BFF, 0x0001}; /* fp16 1, -2, 65504, 2^-24 */
    uint8_t row[4], col[4];
    float amax;
    qf_norm_quantize_fp8_ref(QF_NORM_NONE, 1, QF_DTYPE_FP16, x, QF_DTYPE_FP16, NULL, NULL, 2, 2,
                             0.0f, NULL, NULL, 2.0f, QF_DTYPE_E4M3, row, col, NULL, NULL, &amax);
    assert_int_equal(row[0], 0x40); /* 2 */
    assert_int_equal(row[1], 0xC8); /* -4 */
    assert_int_equal(row[2], 0x7E); /* 131008 saturates */
    assert_int_equal(row[3], 0x00); /* 2^-23 underflows */
    assert_int_equal(col[1], row[2]);
    assert_int_equal(col[2], row[1]);
    assert_true(amax == 65504.0f);
}

/* }================================================================== */

/* {================================================================== GEMM */

enum { GM = 2, GN = 3, GK = 4 };

static void gemm_random_operands(uint8_t *a, uint8_t *b, uint64_t seed) {
    for (int i = 0; i < GM * GK; i++)
        a[i] = qf_e4m3_from_float_ref(8.0f * qf_test_rng_uniform(&seed));
    for (int i = 0; i < GN * GK; i++)
        b[i] = qf_e4m3_from_float_ref(8.0f * qf_test_rng_uniform(&seed));
}

/* Linearity in each scale, and swapping operands transposes the result. */
static void test_gemm_linearity(void **state) {
    (void)state;
    uint8_t a[GM * GK], b[GN * GK];
    double y1[GM * GN], y2[GM * GN], y3[GM * GN], yt[GN * GM];
    gemm_random_operands(a, b, 9);
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, a, 0.75f, QF_DTYPE_E4M3, b, 0.5f, NULL, GM, GN, GK, y1);
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, a, 1.5f, QF_DTYPE_E4M3, b, 0.5f, NULL, GM, GN, GK, y2);
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, a, 0.75f, QF_DTYPE_E4M3, b, 1.0f, NULL, GM, GN, GK, y3);
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, b, 0.5f, QF_DTYPE_E4M3, a, 0.75f, NULL, GN, GM, GK, yt);
    int nonzero = 0;
    for (int m = 0; m < GM; m++)
        for (int n = 0; n < GN; n++) {
            assert_true(y2[m * GN + n] == 2.0 * y1[m * GN + n]);
            assert_true(y3[m * GN + n] == 2.0 * y1[m * GN + n]);
            assert_true(yt[n * GM + m] == y1[m * GN + n]);
            nonzero += y1[m * GN + n] != 0.0;
        }
    assert_true(nonzero > 0);
}

/* B = identity (E4M3 1.0 = 0x38, E5M2 1.0 = 0x3C on the diagonal) reproduces decoded A. */
static void test_gemm_identity(void **state) {
    (void)state;
    uint8_t a[GM * GK], b[GN * GK], id[GK * GK] = {0}, id5[GK * GK] = {0};
    double y[GM * GK];
    gemm_random_operands(a, b, 10);
    for (int k = 0; k < GK; k++) {
        id[k * GK + k] = 0x38;
        id5[k * GK + k] = 0x3C;
    }
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, a, 1.0f, QF_DTYPE_E4M3, id, 1.0f, NULL, GM, GK, GK, y);
    for (int i = 0; i < GM * GK; i++)
        assert_true(y[i] == (double)qf_e4m3_to_float_ref(a[i]));
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, a, 0.25f, QF_DTYPE_E5M2, id5, 1.0f, NULL, GM, GK, GK, y);
    for (int i = 0; i < GM * GK; i++)
        assert_true(y[i] == 0.25 * (double)qf_e4m3_to_float_ref(a[i]));
}

static void test_gemm_bias(void **state) {
    (void)state;
    uint8_t a[GM * GK], b[GN * GK];
    double y0[GM * GN], yb[GM * GN];
    const double bias[GN] = {0.5, -3.0, 1024.0};
    gemm_random_operands(a, b, 11);
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, a, 1.0f, QF_DTYPE_E4M3, b, 1.0f, NULL, GM, GN, GK, y0);
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, a, 1.0f, QF_DTYPE_E4M3, b, 1.0f, bias, GM, GN, GK, yb);
    for (int m = 0; m < GM; m++)
        for (int n = 0; n < GN; n++) /* E4M3 products of |v| <= 8 sum exactly in double */
            assert_true(yb[m * GN + n] == y0[m * GN + n] + bias[n]);
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
        cmocka_unit_test(test_scale_update_zero_amax),
        cmocka_unit_test(test_scale_update_tiny_amax),
        cmocka_unit_test(test_scale_update_inf_amax),
        cmocka_unit_test(test_scale_update_nan_amax),
        cmocka_unit_test(test_scale_update_roll),
        cmocka_unit_test(test_scale_update_max_vs_most_recent),
        cmocka_unit_test(test_scale_update_margin),
        cmocka_unit_test(test_scale_update_multi),
        cmocka_unit_test(test_nq_matches_elementwise),
        cmocka_unit_test(test_nq_uses_given_stats),
        cmocka_unit_test(test_nq_nan_propagates),
        cmocka_unit_test(test_nq_none_plain_quantize),
        cmocka_unit_test(test_gemm_linearity),
        cmocka_unit_test(test_gemm_identity),
        cmocka_unit_test(test_gemm_bias),
    };
    return cmocka_run_group_tests_name("ref", tests, NULL, NULL);
}
