/* test_ref.c: CPU tests of the scalar references in runtime/ref/ref.c and ref_fp8_current.c
 * (SPEC 1, 2.1, 2.2, 3). */
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

#include "ref.h"
#include "ref_fp8_current.h"

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

/* {================================================================== fp8_current: scale */

/* SPEC 2.2: a zero, infinite or NaN amax gives scale 1 (and scale_inv 1). */
static void test_cur_scale_zero_inf_nan(void **state) {
    (void)state;
    for (int f = 0; f < 2; f++) {
        assert_float_bits_equal(qf_fp8_current_scale_ref(0.0f, 0.0f, 0, k_fp8_fmts[f]), 1.0f);
        assert_float_bits_equal(qf_fp8_current_scale_ref(-0.0f, 0.0f, 0, k_fp8_fmts[f]), 1.0f);
        assert_float_bits_equal(qf_fp8_current_scale_ref(INFINITY, 0.0f, 0, k_fp8_fmts[f]), 1.0f);
        assert_float_bits_equal(qf_fp8_current_scale_ref(NAN, 0.0f, 0, k_fp8_fmts[f]), 1.0f);
        assert_float_bits_equal(qf_fp8_current_scale_ref(NAN, 0.0f, 1, k_fp8_fmts[f]), 1.0f);
    }
    /* TE compares `amax < eps`: a NaN amax stays NaN, so scale 1; fmaxf(NaN, 1) would give 1
     * and the scale 448. */
    assert_float_bits_equal(qf_fp8_current_scale_ref(NAN, 1.0f, 0, QF_DTYPE_E4M3), 1.0f);
    /* An infinite epsilon dominates everything and counts as an infinite a. */
    assert_float_bits_equal(qf_fp8_current_scale_ref(2.0f, INFINITY, 0, QF_DTYPE_E4M3), 1.0f);
    assert_float_bits_equal(qf_fp8_scale_inv_ref(1.0f), 1.0f);
}

/* a = max(amax, amax_epsilon) before anything else, the zero check included. */
static void test_cur_scale_epsilon(void **state) {
    (void)state;
    assert_true(qf_fp8_current_scale_ref(0.5f, 2.0f, 0, QF_DTYPE_E4M3) == 224.0f);   /* 448/2 */
    assert_true(qf_fp8_current_scale_ref(0.0f, 4.0f, 0, QF_DTYPE_E4M3) == 112.0f);   /* not 1 */
    assert_true(qf_fp8_current_scale_ref(0.0f, 4.0f, 0, QF_DTYPE_E5M2) == 14336.0f); /* 57344/4 */
    assert_true(qf_fp8_current_scale_ref(8.0f, 2.0f, 0, QF_DTYPE_E4M3) == 56.0f);    /* amax wins */
    assert_true(qf_fp8_current_scale_ref(2.0f, 2.0f, 0, QF_DTYPE_E4M3) == 224.0f);   /* equal */
    /* Epsilon 3 with amax 1: 448/3 = 149.33..., floored by power_2_scales to 128. */
    assert_true(qf_fp8_current_scale_ref(1.0f, 3.0f, 1, QF_DTYPE_E4M3) == 128.0f);
}

/* fp8_max / a correctly rounded. By hand: 448/3 = 149.333...; fp32 has quantum 2^-16 in
 * [128, 256) and 149.333... / 2^-16 = 9786709.33, so the result is 9786709 * 2^-16 =
 * 0x1.2aaaaap+7. 57344 = 128 * 448, so the E5M2 scale is the same significand times 2^7. */
static void test_cur_scale_hand(void **state) {
    (void)state;
    assert_true(qf_fp8_current_scale_ref(3.0f, 0.0f, 0, QF_DTYPE_E4M3) == 0x1.2aaaaap+7f);
    assert_true(qf_fp8_current_scale_ref(3.0f, 0.0f, 0, QF_DTYPE_E5M2) == 0x1.2aaaaap+14f);
    assert_true(qf_fp8_current_scale_ref(448.0f, 0.0f, 0, QF_DTYPE_E4M3) == 1.0f);
    assert_true(qf_fp8_current_scale_ref(448.0f, 0.0f, 0, QF_DTYPE_E5M2) == 128.0f);
    assert_true(qf_fp8_current_scale_ref(57344.0f, 0.0f, 0, QF_DTYPE_E5M2) == 1.0f);
    assert_true(qf_fp8_current_scale_ref(5.0f, 0.0f, 0, QF_DTYPE_E4M3) == 89.6f); /* as 2.1 */
    /* A huge amax still gives a normal scale: 448 / FLT_MAX = 1.3e-36 > FLT_MIN. */
    float s = qf_fp8_current_scale_ref(FLT_MAX, 0.0f, 0, QF_DTYPE_E4M3);
    assert_true(s > 0.0f && isnormal(s) && s < 1e-35f);
}

/* power_2_scales clears the mantissa (bits & 0xFF800000): the scale floors to a power of two. */
static void test_cur_scale_power_2(void **state) {
    (void)state;
    assert_true(qf_fp8_current_scale_ref(3.0f, 0.0f, 1, QF_DTYPE_E4M3) == 128.0f);   /* 149.3 */
    assert_true(qf_fp8_current_scale_ref(3.0f, 0.0f, 1, QF_DTYPE_E5M2) == 16384.0f); /* 19114.7 */
    assert_true(qf_fp8_current_scale_ref(0.3f, 0.0f, 1, QF_DTYPE_E4M3) == 1024.0f);  /* 1493.3 */
    assert_true(qf_fp8_current_scale_ref(5.0f, 0.0f, 1, QF_DTYPE_E4M3) == 64.0f);    /* 89.6 */
    assert_true(qf_fp8_current_scale_ref(7.0f, 0.0f, 1, QF_DTYPE_E4M3) == 64.0f);    /* exact */
    assert_true(qf_fp8_current_scale_ref(448.0f, 0.0f, 1, QF_DTYPE_E4M3) == 1.0f);
    assert_true(qf_fp8_current_scale_ref(1000.0f, 0.0f, 1, QF_DTYPE_E4M3) == 0.25f); /* 0.448 */
    assert_true(qf_fp8_current_scale_ref(0.0f, 0.0f, 1, QF_DTYPE_E4M3) == 1.0f);
    /* Every power-of-two scale has an exact reciprocal. */
    assert_true(qf_fp8_scale_inv_ref(128.0f) == 0x1p-7f);
}

/* 1e-40 is an fp32 subnormal; 448 / 1e-40 = 4.48e42 overflows fp32: FLT_MAX, not inf (SPEC
 * 2.2, as TE PR #786 for 2.1). With power_2_scales FLT_MAX = (2 - 2^-23) * 2^127 -> 2^127.
 * scale_inv of FLT_MAX: 1 / ((2 - 2^-23) 2^127) = 2^-128 (1 + 2^-24 + ...); the subnormal
 * quantum there is 2^-149, so the excess 2^-152 rounds away: exactly 2^-128. */
static void test_cur_scale_tiny_amax(void **state) {
    (void)state;
    const float tiny = 1e-40f;
    assert_int_equal(fpclassify(tiny), FP_SUBNORMAL);
    for (int f = 0; f < 2; f++) {
        assert_true(qf_fp8_current_scale_ref(tiny, 0.0f, 0, k_fp8_fmts[f]) == FLT_MAX);
        assert_true(qf_fp8_current_scale_ref(1e-38f, 0.0f, 0, k_fp8_fmts[f]) == FLT_MAX);
        assert_true(qf_fp8_current_scale_ref(tiny, 0.0f, 1, k_fp8_fmts[f]) == 0x1p127f);
    }
    /* The smallest subnormal with epsilon 1e-3 above it: epsilon decides. */
    assert_float_bits_equal(qf_fp8_current_scale_ref(0x1p-149f, 1e-3f, 0, QF_DTYPE_E4M3),
                            qf_fp8_current_scale_ref(1e-3f, 0.0f, 0, QF_DTYPE_E4M3));
    assert_true(qf_fp8_scale_inv_ref(FLT_MAX) == 0x1p-128f);
    assert_true(qf_fp8_scale_inv_ref(0x1p127f) == 0x1p-127f);
}

/* q is the fp32 nearest to n / d (d > 0, q finite and positive): n - c*d is exact in double for
 * q and its two fp32 neighbours (24 x 24-bit products, then Sterbenz), and |n/d - c| =
 * |n - c*d| / d, so the nearest c has the smallest residual. (No ties: n/d is never a midpoint
 * when n has 3 significant bits.) */
static void assert_nearest_quotient(float q, double n, float d) {
    const double r = fabs(n - (double)q * (double)d);
    const float lo = nextafterf(q, 0.0f), hi = nextafterf(q, INFINITY);
    if (!(r <= fabs(n - (double)lo * (double)d) && r <= fabs(n - (double)hi * (double)d))) {
        print_error("%a is not the nearest fp32 to %.17g / %a\n", (double)q, n, (double)d);
        fail();
    }
}

/* scale = fp8_max / a and scale_inv = 1 / scale are correctly rounded: by hand for 448/3
 * (1 / 0x1.2aaaaap+7 = 0.0066964286... = 0x1.b6db6ep-8, from exact rational arithmetic), and
 * for 4000 amaxes from 2^-100 to 2^100 against the exact residual test above. */
static void test_cur_scale_inv_correctly_rounded(void **state) {
    (void)state;
    assert_true(qf_fp8_scale_inv_ref(0x1.2aaaaap+7f) == 0x1.b6db6ep-8f);
    assert_true(qf_fp8_scale_inv_ref(112.0f) == 0x1.24924ap-7f); /* 1/112 */
    uint64_t seed = 77;
    for (int i = 0; i < 4000; i++) {
        uint64_t r = qf_test_rng_next(&seed);
        float a = ldexpf(1.0f + (float)((r >> 8) & 0xFFFFFF) / 16777216.0f, (int)(r % 201) - 100);
        qf_dtype fmt = k_fp8_fmts[(r >> 40) & 1];
        float s = qf_fp8_current_scale_ref(a, 0.0f, 0, fmt);
        assert_nearest_quotient(s, (double)qf_fp8_max(fmt), a);
        assert_nearest_quotient(qf_fp8_scale_inv_ref(s), 1.0, s);
        float p = qf_fp8_current_scale_ref(a, 0.0f, 1, fmt);
        assert_true(p <= s && p > 0.5f * s && frexpf(p, &(int){0}) == 0.5f); /* 2^floor(log2 s) */
    }
}

/* }================================================================== */

/* {================================================================== fp8_current: quantize */

/* Outputs of one current-scaling call, poisoned (0xCD bytes, -1 scalars) so that an unwritten
 * entry shows. b->out points into b itself: pass cur_bufs by pointer only. */
typedef struct cur_bufs {
    uint8_t row[8], col[8];
    float amax, scale, scale_inv, mu[2], rsigma[2];
    qf_fp8_current_out out;
} cur_bufs;

static void cur_bufs_init(cur_bufs *b) {
    memset(b->row, 0xCD, sizeof b->row);
    memset(b->col, 0xCD, sizeof b->col);
    b->amax = b->scale = b->scale_inv = -1.0f;
    b->mu[0] = b->mu[1] = b->rsigma[0] = b->rsigma[1] = -1.0f;
    b->out =
        (qf_fp8_current_out){b->row, b->col, &b->amax, &b->scale, &b->scale_inv, b->mu, b->rsigma};
}

/* Plain quantize of x [M, K] (M * K <= 8) into fresh buffers; asserts QF_OK. */
static void cur_plain(cur_bufs *b, qf_dtype xdt, const void *x, int64_t M, int64_t K, qf_dtype fmt,
                      float amax_epsilon, int power_2_scales) {
    const qf_fp8_current_opts o = {fmt, amax_epsilon, power_2_scales};
    cur_bufs_init(b);
    assert_int_equal(qf_quantize_fp8_current_ref(xdt, x, M, K, &o, &b->out), QF_OK);
}

static void assert_bytes(const uint8_t *got, const uint8_t *want, int n) {
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            print_error("byte %d: got 0x%02X, want 0x%02X\n", i, got[i], want[i]);
            fail();
        }
}

/* SPEC 2.2: an all-zero tensor gives scale 1 and all-zero data (rowwise and columnwise), also
 * after a layernorm of constant rows (x - mu = 0, beta 0: y = 0) and for M = 0. An epsilon still
 * sets the scale (448/4 = 112), the data stays zero. */
static void test_cur_quantize_all_zero(void **state) {
    (void)state;
    const uint16_t zeros[2 * 4] = {0}; /* bf16 +0 */
    const uint8_t zbytes[8] = {0};
    cur_bufs b;
    cur_plain(&b, QF_DTYPE_BF16, zeros, 2, 4, QF_DTYPE_E4M3, 0.0f, 0);
    assert_true(b.amax == 0.0f && b.scale == 1.0f && b.scale_inv == 1.0f);
    assert_bytes(b.row, zbytes, 8);
    assert_bytes(b.col, zbytes, 8);
    assert_true(b.mu[0] == -1.0f && b.rsigma[0] == -1.0f); /* plain: no statistics written */
    cur_plain(&b, QF_DTYPE_BF16, zeros, 2, 4, QF_DTYPE_E5M2, 4.0f, 0);
    assert_true(b.amax == 0.0f && b.scale == 14336.0f); /* 57344 / 4 */
    assert_bytes(b.row, zbytes, 8);
    cur_plain(&b, QF_DTYPE_BF16, zeros, 0, 4, QF_DTYPE_E4M3, 0.0f, 0);
    assert_true(b.amax == 0.0f && b.scale == 1.0f && b.row[0] == 0xCD);

    const float x[2 * 4] = {2.5f, 2.5f, 2.5f, 2.5f, -7.0f, -7.0f, -7.0f, -7.0f};
    const float g[4] = {1.5f, -2.0f, 0.25f, 3.0f}, beta[4] = {0};
    const qf_fp8_current_src src = {.norm = QF_NORM_LAYERNORM,
                                    .xdt = QF_DTYPE_FP32,
                                    .gdt = QF_DTYPE_FP32,
                                    .x = x,
                                    .gamma = g,
                                    .beta = beta,
                                    .M = 2,
                                    .K = 4,
                                    .eps = 1e-5f};
    const qf_fp8_current_opts o = {QF_DTYPE_E4M3, 0.0f, 0};
    cur_bufs_init(&b);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, &o, &b.out), QF_OK);
    assert_true(b.amax == 0.0f && b.scale == 1.0f && b.scale_inv == 1.0f);
    assert_true(b.mu[0] == 2.5f && b.mu[1] == -7.0f);
    assert_bytes(b.row, zbytes, 8);
    assert_bytes(b.col, zbytes, 8);
}

/* An inf in x makes amax inf, so scale 1: the inf saturates (0x7E, E5M2 0x7B) and the other
 * elements are cast unscaled. A NaN makes amax NaN (never dropped), scale 1, the NaN -> 0x7F. */
static void test_cur_quantize_inf_nan(void **state) {
    (void)state;
    float x[2 * 3] = {1.0f, INFINITY, -2.0f, 0.5f, 0.25f, -4.0f};
    const uint8_t want[6] = {0x38, 0x7E, 0xC0, 0x30, 0x28, 0xC8}; /* E4M3 1, 448, -2, .5, .25, -4 */
    const uint8_t want_col[6] = {0x38, 0x30, 0x7E, 0x28, 0xC0, 0xC8}; /* [3, 2] transpose */
    cur_bufs b;
    cur_plain(&b, QF_DTYPE_FP32, x, 2, 3, QF_DTYPE_E4M3, 0.0f, 0);
    assert_true(b.amax == INFINITY && b.scale == 1.0f && b.scale_inv == 1.0f);
    assert_bytes(b.row, want, 6);
    assert_bytes(b.col, want_col, 6);
    cur_plain(&b, QF_DTYPE_FP32, x, 2, 3, QF_DTYPE_E5M2, 0.0f, 1);
    assert_true(b.scale == 1.0f && b.row[1] == 0x7B && b.row[5] == 0xC4); /* E5M2 -4 */
    x[1] = NAN;
    cur_plain(&b, QF_DTYPE_FP32, x, 2, 3, QF_DTYPE_E4M3, 0.0f, 0);
    assert_true(isnan(b.amax) && b.scale == 1.0f && b.scale_inv == 1.0f);
    assert_int_equal(b.row[1], 0x7F);
    assert_int_equal(b.col[2], 0x7F);
    assert_int_equal(b.row[5], 0xC8);
}

/* amax_epsilon 2 dominates amax 1: scale 448/2 = 224, so 1 -> 224 = 1.75 * 2^7 (0x76) and
 * 0.5 -> 112 = 1.75 * 2^6 (0x6E); the amax output stays the tensor's own (1). Without the
 * epsilon: scale 448, bytes 448 (0x7E) and 224 (0x76). */
static void test_cur_quantize_epsilon(void **state) {
    (void)state;
    const float x[2] = {1.0f, 0.5f};
    cur_bufs b;
    cur_plain(&b, QF_DTYPE_FP32, x, 1, 2, QF_DTYPE_E4M3, 2.0f, 0);
    assert_true(b.amax == 1.0f && b.scale == 224.0f);
    assert_nearest_quotient(b.scale_inv, 1.0, 224.0f);
    assert_bytes(b.row, (const uint8_t[2]){0x76, 0x6E}, 2);
    cur_plain(&b, QF_DTYPE_FP32, x, 1, 2, QF_DTYPE_E4M3, 0.0f, 0);
    assert_true(b.amax == 1.0f && b.scale == 448.0f);
    assert_bytes(b.row, (const uint8_t[2]){0x7E, 0x76}, 2);
}

/* The grad role under hybrid is E5M2 (scale 57344 / amax), weight (and grad under e4m3) E4M3.
 * x = {3, 1, -1, 1e-6}, amax 3. By hand:
 *   E4M3 scale 0x1.2aaaaap+7 = 149.333328: 3 -> 448 - 2^-16, an fp32 tie (quantum 2^-15 there),
 *   even -> 448 (0x7E); 1 -> 149.33, nearest of 144/160 is 144 = 1.125 * 2^7 (0x71); -1 -> 0xF1;
 *   1e-6 -> 1.49e-4, under half the smallest subnormal 2^-9: 0x00.
 *   E5M2 scale 0x1.2aaaaap+14 = 19114.666: 3 -> 57344 - 2^-9, a tie (quantum 2^-8), even ->
 *   57344 (0x7B); 1 -> 19114.67, nearest of 16384/20480 is 20480 = 1.25 * 2^14 (0x75); -1 ->
 *   0xF5; 1e-6 -> 0.0191147, nearest of 2^-6/1.25 * 2^-6 is 0.01953125 (0x25): kept, where E4M3
 *   flushed it. */
static void test_cur_quantize_grad_e5m2(void **state) {
    (void)state;
    const float x[4] = {3.0f, 1.0f, -1.0f, 1e-6f};
    cur_bufs b;
    cur_plain(&b, QF_DTYPE_FP32, x, 1, 4, QF_DTYPE_E4M3, 0.0f, 0);
    assert_true(b.amax == 3.0f && b.scale == 0x1.2aaaaap+7f && b.scale_inv == 0x1.b6db6ep-8f);
    assert_bytes(b.row, (const uint8_t[4]){0x7E, 0x71, 0xF1, 0x00}, 4);
    assert_bytes(b.col, b.row, 4); /* [4, 1]: the transpose has the same order */
    cur_plain(&b, QF_DTYPE_FP32, x, 1, 4, QF_DTYPE_E5M2, 0.0f, 0);
    assert_true(b.amax == 3.0f && b.scale == 0x1.2aaaaap+14f && b.scale_inv == 0x1.b6db6ep-15f);
    assert_bytes(b.row, (const uint8_t[4]){0x7B, 0x75, 0xF5, 0x25}, 4);
    assert_bytes(b.col, b.row, 4);
}

/* amax 1e-40 (subnormal) -> scale FLT_MAX, scale_inv 2^-128. By hand: 1e-40f = 71362 * 2^-149;
 * times FLT_MAX = 71362 (2 - 2^-23) 2^-22 = 0.034028, between 0x10 (2^-5) and 0x11 (1.125 *
 * 2^-5 = 0.03515625), above their midpoint 0.033203125: 0x11. With power_2_scales, scale 2^127:
 * 71362 * 2^-22 = 0.017014, above the 0x08/0x09 midpoint 0.0166015625: 0x09. */
static void test_cur_quantize_tiny_amax(void **state) {
    (void)state;
    const float x[3] = {1e-40f, 0.0f, -1e-40f};
    cur_bufs b;
    cur_plain(&b, QF_DTYPE_FP32, x, 1, 3, QF_DTYPE_E4M3, 0.0f, 0);
    assert_true(b.amax == 1e-40f && b.scale == FLT_MAX && b.scale_inv == 0x1p-128f);
    assert_bytes(b.row, (const uint8_t[3]){0x11, 0x00, 0x91}, 3);
    cur_plain(&b, QF_DTYPE_FP32, x, 1, 3, QF_DTYPE_E4M3, 0.0f, 1);
    assert_true(b.scale == 0x1p127f && b.scale_inv == 0x1p-127f);
    assert_bytes(b.row, (const uint8_t[3]){0x09, 0x00, 0x89}, 3);
}

/* The kernel's own mu/rsigma are what the reference normalizes with. layernorm of {1, 2, 3, 4}
 * with mu 1, rsigma 2, g 1, b 0: y = {0, 2, 4, 6}, amax 6, scale 448/6 = 0x1.2aaaaap+6 (the
 * significand of 448/3); y * scale = 0, 149.33 (-> 144, 0x71), 298.67 (nearest of 288/320 is
 * 288 = 1.125 * 2^8, 0x79), 448 - 2^-16 (a tie, even -> 448, 0x7E). */
static void test_cur_nq_given_stats(void **state) {
    (void)state;
    const float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, g[4] = {1, 1, 1, 1}, beta[4] = {0};
    const float mu_in = 1.0f, rs_in = 2.0f;
    const qf_fp8_current_src src = {.norm = QF_NORM_LAYERNORM,
                                    .xdt = QF_DTYPE_FP32,
                                    .gdt = QF_DTYPE_FP32,
                                    .x = x,
                                    .gamma = g,
                                    .beta = beta,
                                    .M = 1,
                                    .K = 4,
                                    .eps = 1e-5f,
                                    .mu_in = &mu_in,
                                    .rsigma_in = &rs_in};
    const qf_fp8_current_opts o = {QF_DTYPE_E4M3, 0.0f, 0};
    cur_bufs b;
    cur_bufs_init(&b);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, &o, &b.out), QF_OK);
    assert_true(b.mu[0] == 1.0f && b.rsigma[0] == 2.0f);
    assert_true(b.amax == 6.0f && b.scale == 0x1.2aaaaap+6f);
    assert_bytes(b.row, (const uint8_t[4]){0x00, 0x71, 0x79, 0x7E}, 4);
    float amax = -1.0f, mu = -1.0f, rs = -1.0f;
    assert_int_equal(qf_fp8_current_amax_ref(&src, &amax, &mu, &rs), QF_OK);
    assert_true(amax == 6.0f && mu == 1.0f && rs == 2.0f);
}

/* }================================================================== */

/* {================================================================== fp8_current: norm shapes */

/* A bf16 activation x [M, K] with bf16 gamma/beta [K] (gamma around 1, or around 0 when zcg). */
typedef struct cur_data {
    int64_t M, K;
    uint16_t *x, *gamma, *beta;
} cur_data;

static cur_data cur_data_make(int64_t M, int64_t K, int zcg, uint64_t seed) {
    cur_data d = {M, K, malloc((size_t)(M * K) * 2), malloc((size_t)K * 2), malloc((size_t)K * 2)};
    fill_random(d.x, QF_DTYPE_BF16, M * K, 0.3f, 3.0f, seed);
    fill_random(d.gamma, QF_DTYPE_BF16, K, zcg ? 0.0f : 1.0f, 0.5f, seed + 1);
    fill_random(d.beta, QF_DTYPE_BF16, K, 0.0f, 0.5f, seed + 2);
    return d;
}

static void cur_data_free(cur_data *d) {
    free(d->x);
    free(d->gamma);
    free(d->beta);
}

static qf_fp8_current_src cur_src(const cur_data *d, qf_norm norm, int zcg) {
    qf_fp8_current_src s = {.norm = norm,
                            .zcg = zcg,
                            .xdt = QF_DTYPE_BF16,
                            .gdt = QF_DTYPE_BF16,
                            .x = d->x,
                            .gamma = d->gamma,
                            .beta = d->beta,
                            .M = d->M,
                            .K = d->K,
                            .eps = 1e-5f};
    return s;
}

/* Every output of a current-scaling call on an [M, K] tensor, heap-allocated. */
typedef struct cur_res {
    uint8_t *row, *col;
    float amax, scale, scale_inv, *mu, *rsigma;
    qf_fp8_current_out out;
} cur_res;

static void cur_res_init(cur_res *r, int64_t M, int64_t K) {
    r->row = malloc((size_t)(M * K));
    r->col = malloc((size_t)(M * K));
    r->mu = malloc((size_t)M * sizeof(float));
    r->rsigma = malloc((size_t)M * sizeof(float));
    r->out =
        (qf_fp8_current_out){r->row, r->col, &r->amax, &r->scale, &r->scale_inv, r->mu, r->rsigma};
}

static void cur_res_free(cur_res *r) {
    free(r->row);
    free(r->col);
    free(r->mu);
    free(r->rsigma);
}

/* Half the FP8 spacing at magnitude w: 2^(max(floor(log2 w), emin) - mbits - 1). */
static double fp8_half_ulp(qf_dtype fmt, double w) {
    const int mbits = fmt == QF_DTYPE_E4M3 ? 3 : 2, emin = fmt == QF_DTYPE_E4M3 ? -6 : -14;
    int e = emin;
    if (w > 0.0) {
        (void)frexp(w, &e); /* w = f * 2^e, f in [0.5, 1): floor(log2 w) = e - 1 */
        e = e - 1 > emin ? e - 1 : emin;
    }
    return ldexp(1.0, e - mbits - 1);
}

/* Row m's statistics in long double, two passes (independent of qf_norm_stats_ref). */
static void stats_ld(const cur_data *d, qf_norm norm, int64_t m, long double *mu, long double *rs) {
    long double s = 0, ss = 0;
    for (int64_t k = 0; norm == QF_NORM_LAYERNORM && k < d->K; k++)
        s += qf_bf16_to_float(d->x[m * d->K + k]);
    *mu = s / d->K;
    for (int64_t k = 0; k < d->K; k++) {
        long double v = qf_bf16_to_float(d->x[m * d->K + k]) - *mu;
        ss += v * v;
    }
    *rs = 1.0L / sqrtl(ss / d->K + (long double)1e-5f);
}

/* y in long double for element (m, k), and the bound on |fl32(y) - y| the test allows:
 * tol = 2^-20 * ((|x| + |mu|) * rs * |g| + |b|), i.e. 16 fp32 ulps of the largest term (mu and
 * rsigma are rounded to fp32, then x - mu, the product and the fma round once each). */
static long double y_ld(const cur_data *d, qf_norm norm, int zcg, int64_t m, int64_t k,
                        long double mu, long double rs, double *tol) {
    long double x = qf_bf16_to_float(d->x[m * d->K + k]);
    long double g = (long double)qf_bf16_to_float(d->gamma[k]) + (zcg ? 1 : 0);
    long double b = norm == QF_NORM_LAYERNORM ? qf_bf16_to_float(d->beta[k]) : 0.0f;
    *tol = ldexp((double)((fabsl(x) + fabsl(mu)) * rs * fabsl(g) + fabsl(b)), -20);
    return (x - mu) * rs * g + b;
}

/* Stats and amax of the source in long double; checks r's mu, rsigma (rel 1e-5, SPEC 3). */
static long double check_stats_amax_ld(const cur_data *d, qf_norm norm, int zcg, const cur_res *r) {
    long double amax = 0;
    for (int64_t m = 0; m < d->M; m++) {
        long double mu, rs;
        double tol;
        stats_ld(d, norm, m, &mu, &rs);
        if (norm == QF_NORM_LAYERNORM)
            assert_rel_close(r->mu[m], (double)mu, 1e-5);
        assert_rel_close(r->rsigma[m], (double)rs, 1e-5);
        for (int64_t k = 0; k < d->K; k++)
            amax = fmaxl(amax, fabsl(y_ld(d, norm, zcg, m, k, mu, rs, &tol)));
    }
    return amax;
}

/* Each byte of r decodes to within half an FP8 spacing (at |v| + s*tol) plus s*tol of the
 * exact v = y * s (s: r's scale, tol: y_ld's bound on fp32's error); col is row transposed.
 * Returns the count of nonzero bytes. */
static int64_t check_bytes_ld(const cur_data *d, qf_norm norm, int zcg, qf_dtype fmt,
                              const cur_res *r) {
    const int64_t M = d->M, K = d->K;
    int64_t nonzero = 0;
    for (int64_t m = 0; m < M; m++) {
        long double mu, rs;
        stats_ld(d, norm, m, &mu, &rs);
        for (int64_t k = 0; k < K; k++) {
            double tol, v = (double)(y_ld(d, norm, zcg, m, k, mu, rs, &tol) * r->scale);
            double slack = tol * r->scale, dec = qf_fp8_to_float_ref(fmt, r->row[m * K + k]);
            if (!(fabs(dec - v) <= fp8_half_ulp(fmt, fabs(v) + slack) + slack)) {
                print_error("[%lld, %lld]: decoded %.9g, exact %.9g\n", (long long)m, (long long)k,
                            dec, v);
                fail();
            }
            assert_int_equal(r->col[k * M + m], r->row[m * K + k]);
            nonzero += r->row[m * K + k] != 0;
        }
    }
    return nonzero;
}

/* The fused reference against an independent long-double computation, within stated bounds:
 * mu, rsigma, amax and scale within rel 1e-5 (SPEC 3); scale_inv * scale == 1 within 2^-23;
 * the bytes as check_bytes_ld says. */
static void check_cur_vs_fp64(const cur_data *d, qf_norm norm, int zcg, qf_dtype fmt) {
    const qf_fp8_current_src src = cur_src(d, norm, zcg);
    const qf_fp8_current_opts o = {fmt, 0.0f, 0};
    cur_res r;
    cur_res_init(&r, d->M, d->K);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, &o, &r.out), QF_OK);
    long double amax = check_stats_amax_ld(d, norm, zcg, &r);
    assert_rel_close(r.amax, (double)amax, 1e-5);
    assert_rel_close(r.scale, (double)(qf_fp8_max(fmt) / amax), 1e-5);
    assert_rel_close((double)r.scale_inv * r.scale, 1.0, 0x1p-23);
    assert_true(check_bytes_ld(d, norm, zcg, fmt, &r) > d->M * d->K / 2); /* not trivial data */
    cur_res_free(&r);
}

/* Odd shapes of SPEC 3 and TE's test_cast_current_scaling: 5 x 160 and 7 x 769 (odd K). */
static void test_cur_nq_vs_fp64(void **state) {
    (void)state;
    const int64_t shapes[2][2] = {{5, 160}, {7, 769}};
    for (int s = 0; s < 2; s++)
        for (int zcg = 0; zcg < 2; zcg++) {
            cur_data d = cur_data_make(shapes[s][0], shapes[s][1], zcg, 500 + (uint64_t)s);
            for (int f = 0; f < 2; f++) {
                check_cur_vs_fp64(&d, QF_NORM_LAYERNORM, zcg, k_fp8_fmts[f]);
                check_cur_vs_fp64(&d, QF_NORM_RMSNORM, zcg, k_fp8_fmts[f]);
            }
            cur_data_free(&d);
        }
}

/* y [M, K] fp32 as an unfused norm writes it (qf_norm_stats_ref, then qf_norm_apply_ref);
 * bf16 != 0 rounds each value to bf16 too (TE's norm output). Returns a malloc'ed array. */
static void *normalize_out(const cur_data *d, qf_norm norm, int zcg, int bf16) {
    const int64_t M = d->M, K = d->K;
    float *mu = malloc((size_t)M * sizeof *mu), *rs = malloc((size_t)M * sizeof *rs);
    void *y = malloc((size_t)(M * K) * sizeof(float));
    qf_norm_stats_ref(norm, QF_DTYPE_BF16, d->x, M, K, 1e-5f, mu, rs);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            float v =
                qf_norm_apply_ref(norm, zcg, qf_bf16_to_float(d->x[m * K + k]), mu[m], rs[m],
                                  qf_bf16_to_float(d->gamma[k]), qf_bf16_to_float(d->beta[k]));
            store_as(y, bf16 ? QF_DTYPE_BF16 : QF_DTYPE_FP32, m * K + k, v);
        }
    free(mu);
    free(rs);
    return y;
}

static void assert_res_equal(const cur_res *a, const cur_res *b, int64_t n) {
    assert_float_bits_equal(a->amax, b->amax);
    assert_float_bits_equal(a->scale, b->scale);
    assert_float_bits_equal(a->scale_inv, b->scale_inv);
    assert_memory_equal(a->row, b->row, (size_t)n);
    assert_memory_equal(a->col, b->col, (size_t)n);
}

/* Chunked two-step use (the header's recipe): amax per 3-row chunk, merged; one scale; then
 * qf_norm_quantize_fp8_ref per chunk with the chunk's statistics. Rowwise bytes only. */
static void two_step_chunked(const cur_data *d, qf_norm norm, int zcg, const qf_fp8_current_opts *o,
                             uint8_t *row, float *scale) {
    const int64_t M = d->M, K = d->K, chunk = 3;
    float *mu = malloc((size_t)M * sizeof *mu), *rs = malloc((size_t)M * sizeof *rs), a = 0.0f;
    for (int64_t m0 = 0; m0 < M; m0 += chunk) {
        qf_fp8_current_src s = cur_src(d, norm, zcg);
        s.x = d->x + m0 * K, s.M = M - m0 < chunk ? M - m0 : chunk;
        float ca;
        assert_int_equal(qf_fp8_current_amax_ref(&s, &ca, mu + m0, rs + m0), QF_OK);
        a = qf_amax_merge(a, ca);
    }
    *scale = qf_fp8_current_scale_ref(a, o->amax_epsilon, o->power_2_scales, o->fmt);
    for (int64_t m0 = 0; m0 < M; m0 += chunk)
        qf_norm_quantize_fp8_ref(norm, zcg, QF_DTYPE_BF16, d->x + m0 * K, QF_DTYPE_BF16, d->gamma,
                                 d->beta, M - m0 < chunk ? M - m0 : chunk, K, 1e-5f,
                                 norm == QF_NORM_LAYERNORM ? mu + m0 : NULL, rs + m0, *scale,
                                 o->fmt, row + m0 * K, NULL, NULL, NULL, NULL);
    free(mu);
    free(rs);
}

/* The fused reference is byte-identical to (1) normalizing into an fp32 buffer, then the plain
 * current-scaling quantize of that buffer, and (2) the chunked two-step API. */
static void check_cur_two_step(const cur_data *d, qf_norm norm, int zcg,
                               const qf_fp8_current_opts *o) {
    const int64_t n = d->M * d->K;
    const qf_fp8_current_src src = cur_src(d, norm, zcg);
    cur_res fused, plain;
    cur_res_init(&fused, d->M, d->K);
    cur_res_init(&plain, d->M, d->K);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, o, &fused.out), QF_OK);
    float *y = normalize_out(d, norm, zcg, 0);
    assert_int_equal(qf_quantize_fp8_current_ref(QF_DTYPE_FP32, y, d->M, d->K, o, &plain.out),
                     QF_OK);
    assert_res_equal(&fused, &plain, n);
    float scale;
    two_step_chunked(d, norm, zcg, o, plain.row, &scale);
    assert_float_bits_equal(scale, fused.scale);
    assert_memory_equal(plain.row, fused.row, (size_t)n);
    free(y);
    cur_res_free(&fused);
    cur_res_free(&plain);
}

static void test_cur_nq_fused_vs_two_step(void **state) {
    (void)state;
    const int64_t shapes[2][2] = {{5, 160}, {7, 769}};
    const qf_fp8_current_opts opts[3] = {
        {QF_DTYPE_E4M3, 0.0f, 0}, {QF_DTYPE_E5M2, 0.0f, 1}, {QF_DTYPE_E4M3, 100.0f, 1}};
    for (int s = 0; s < 2; s++)
        for (int zcg = 0; zcg < 2; zcg++) {
            cur_data d = cur_data_make(shapes[s][0], shapes[s][1], zcg, 600 + (uint64_t)s);
            for (int i = 0; i < 3; i++) {
                check_cur_two_step(&d, QF_NORM_LAYERNORM, zcg, &opts[i]);
                check_cur_two_step(&d, QF_NORM_RMSNORM, zcg, &opts[i]);
            }
            cur_data_free(&d);
        }
}

/* SPEC 2.2's note: qfuse rounds y once, from fp32; TE writes the norm output in bf16 and casts
 * that, rounding twice. Where the bytes differ, that rounding is the only cause.
 * By hand: rmsnorm of x = {1, 1} with eps 0 has rsigma 1/sqrt(1) = 1 exactly, so y = gamma =
 * {448, 1.0625001} (fp32 gamma). amax 448 -> scale 1 both ways. qfuse: 1.0625001 is just above
 * the midpoint 1.0625 of 1.0 and 1.125 -> 0x39 (SPEC 1 conformance byte). TE: bf16(1.0625001)
 * = 1.0625 (7 fraction bits), now a tie -> even 1.0 = 0x38. */
static void test_cur_nq_single_rounding_vs_te(void **state) {
    (void)state;
    const uint16_t x[2] = {0x3F80, 0x3F80}; /* bf16 1.0 */
    const float g[2] = {448.0f, 1.0625001f};
    const qf_fp8_current_src src = {.norm = QF_NORM_RMSNORM,
                                    .xdt = QF_DTYPE_BF16,
                                    .gdt = QF_DTYPE_FP32,
                                    .x = x,
                                    .gamma = g,
                                    .M = 1,
                                    .K = 2,
                                    .eps = 0.0f};
    const qf_fp8_current_opts o = {QF_DTYPE_E4M3, 0.0f, 0};
    cur_bufs q, te;
    cur_bufs_init(&q);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, &o, &q.out), QF_OK);
    assert_true(q.rsigma[0] == 1.0f && q.amax == 448.0f && q.scale == 1.0f);
    assert_bytes(q.row, (const uint8_t[2]){0x7E, 0x39}, 2);
    const uint16_t y_bf16[2] = {qf_float_to_bf16(448.0f), qf_float_to_bf16(1.0625001f)};
    assert_int_equal(y_bf16[1], 0x3F88); /* 1.0625 */
    cur_plain(&te, QF_DTYPE_BF16, y_bf16, 1, 2, QF_DTYPE_E4M3, 0.0f, 0);
    assert_true(te.amax == 448.0f && te.scale == 1.0f);
    assert_bytes(te.row, (const uint8_t[2]){0x7E, 0x38}, 2);
}

/* On a real layernorm (7 x 769, bf16 x) the two paths of the test above disagree on some bytes
 * (that rounding being the only difference); TE's amax is the bf16-rounded one (rounding is
 * monotonic: the max of the rounded values is the rounded max). */
static void test_cur_nq_te_path_differs(void **state) {
    (void)state;
    const qf_fp8_current_opts o = {QF_DTYPE_E4M3, 0.0f, 0};
    cur_data d = cur_data_make(7, 769, 0, 700);
    const qf_fp8_current_src src = cur_src(&d, QF_NORM_LAYERNORM, 0);
    cur_res a, b;
    cur_res_init(&a, 7, 769);
    cur_res_init(&b, 7, 769);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, &o, &a.out), QF_OK);
    uint16_t *yb = normalize_out(&d, QF_NORM_LAYERNORM, 0, 1);
    assert_int_equal(qf_quantize_fp8_current_ref(QF_DTYPE_BF16, yb, 7, 769, &o, &b.out), QF_OK);
    assert_float_bits_equal(b.amax, qf_bf16_to_float(qf_float_to_bf16(a.amax)));
    int64_t differ = 0;
    for (int64_t i = 0; i < 7 * 769; i++)
        differ += a.row[i] != b.row[i];
    print_message("fp8_current 7 x 769: %lld of %d bytes differ from norm -> bf16 -> cast\n",
                  (long long)differ, 7 * 769);
    assert_true(differ > 0);
    free(yb);
    cur_res_free(&a);
    cur_res_free(&b);
    cur_data_free(&d);
}

/* }================================================================== */

/* {================================================================== fp8_current: errors */

/* Each argument error returns QF_ERR_INVALID_ARG with its message and writes nothing. */
static void expect_cur_error(const qf_fp8_current_src *src, const qf_fp8_current_opts *o,
                             const char *msg) {
    cur_bufs b;
    cur_bufs_init(&b);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(src, o, &b.out), QF_ERR_INVALID_ARG);
    if (!strstr(qf_last_error(), msg)) {
        print_error("message '%s' lacks '%s'\n", qf_last_error(), msg);
        fail();
    }
    assert_true(b.amax == -1.0f && b.scale == -1.0f && b.row[0] == 0xCD && b.mu[0] == -1.0f);
}

static const float k_err_x[4] = {1, 2, 3, 4}, k_err_g[4] = {1, 1, 1, 1};

/* A valid layernorm source [1, 4] that each error case breaks in one field. */
static qf_fp8_current_src err_src(void) {
    qf_fp8_current_src s = {.norm = QF_NORM_LAYERNORM,
                            .xdt = QF_DTYPE_FP32,
                            .gdt = QF_DTYPE_FP32,
                            .x = k_err_x,
                            .gamma = k_err_g,
                            .beta = k_err_g,
                            .M = 1,
                            .K = 4,
                            .eps = 1e-5f};
    return s;
}

static void test_cur_errors_src(void **state) {
    (void)state;
    const qf_fp8_current_opts o = {QF_DTYPE_E4M3, 0.0f, 0};
    qf_fp8_current_src s;
    expect_cur_error(NULL, &o, "qf_norm_quantize_fp8_current_ref: src must not be NULL");
    s = err_src(), s.x = NULL;
    expect_cur_error(&s, &o, "qf_norm_quantize_fp8_current_ref: x must not be NULL");
    s = err_src(), s.K = 0;
    expect_cur_error(&s, &o, "M (1) must be >= 0 and K (0) >= 1");
    s = err_src(), s.M = -2;
    expect_cur_error(&s, &o, "M (-2) must be >= 0");
    s = err_src(), s.norm = (qf_norm)7;
    expect_cur_error(&s, &o, "unknown norm 7");
    s = err_src(), s.beta = NULL;
    expect_cur_error(&s, &o, "the norm needs gamma (and beta)");
    s = err_src(), s.norm = QF_NORM_RMSNORM, s.gamma = NULL;
    expect_cur_error(&s, &o, "the norm needs gamma");
    s = err_src(), s.xdt = QF_DTYPE_E4M3;
    expect_cur_error(&s, &o, "x and gamma/beta must be bf16, fp16 or fp32");
    s = err_src(), s.gdt = QF_DTYPE_E2M1;
    expect_cur_error(&s, &o, "x and gamma/beta must be bf16, fp16 or fp32");
}

static void test_cur_errors_opts_out(void **state) {
    (void)state;
    const qf_fp8_current_src s = err_src();
    const qf_fp8_current_opts o = {QF_DTYPE_E4M3, 0.0f, 0};
    qf_fp8_current_opts p = o;
    expect_cur_error(&s, NULL, "opts and out must not be NULL");
    p.fmt = QF_DTYPE_BF16;
    expect_cur_error(&s, &p, "fmt (2) must be E4M3 or E5M2");
    p = o, p.amax_epsilon = -1.0f;
    expect_cur_error(&s, &p, "amax_epsilon (-1) must be >= 0");
    p = o, p.amax_epsilon = NAN;
    expect_cur_error(&s, &p, "amax_epsilon (nan) must be >= 0");
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&s, &o, NULL), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "opts and out must not be NULL"));
}

/* The amax step and the plain quantize check the same way, under their own names. */
static void test_cur_errors_amax_plain(void **state) {
    (void)state;
    const qf_fp8_current_opts o = {QF_DTYPE_E4M3, 0.0f, 0};
    qf_fp8_current_src s = err_src();
    float amax = -1.0f;
    assert_int_equal(qf_fp8_current_amax_ref(&s, NULL, NULL, NULL), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "qf_fp8_current_amax_ref: amax must not be NULL"));
    s.K = 0;
    assert_int_equal(qf_fp8_current_amax_ref(&s, &amax, NULL, NULL), QF_ERR_INVALID_ARG);
    assert_true(amax == -1.0f && strstr(qf_last_error(), "K (0)"));
    cur_bufs b;
    cur_bufs_init(&b);
    assert_int_equal(qf_quantize_fp8_current_ref(QF_DTYPE_FP32, NULL, 1, 4, &o, &b.out),
                     QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "qf_quantize_fp8_current_ref: x must not be NULL"));
    assert_int_equal(qf_quantize_fp8_current_ref(QF_DTYPE_FP16, k_err_x, 1, 4, &o, NULL),
                     QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "qf_quantize_fp8_current_ref: opts and out"));
    assert_true(b.row[0] == 0xCD && b.amax == -1.0f);
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
        cmocka_unit_test(test_cur_scale_zero_inf_nan),
        cmocka_unit_test(test_cur_scale_epsilon),
        cmocka_unit_test(test_cur_scale_hand),
        cmocka_unit_test(test_cur_scale_power_2),
        cmocka_unit_test(test_cur_scale_tiny_amax),
        cmocka_unit_test(test_cur_scale_inv_correctly_rounded),
        cmocka_unit_test(test_cur_quantize_all_zero),
        cmocka_unit_test(test_cur_quantize_inf_nan),
        cmocka_unit_test(test_cur_quantize_epsilon),
        cmocka_unit_test(test_cur_quantize_grad_e5m2),
        cmocka_unit_test(test_cur_quantize_tiny_amax),
        cmocka_unit_test(test_cur_nq_given_stats),
        cmocka_unit_test(test_cur_nq_vs_fp64),
        cmocka_unit_test(test_cur_nq_fused_vs_two_step),
        cmocka_unit_test(test_cur_nq_single_rounding_vs_te),
        cmocka_unit_test(test_cur_nq_te_path_differs),
        cmocka_unit_test(test_cur_errors_src),
        cmocka_unit_test(test_cur_errors_opts_out),
        cmocka_unit_test(test_cur_errors_amax_plain),
        cmocka_unit_test(test_gemm_linearity),
        cmocka_unit_test(test_gemm_identity),
        cmocka_unit_test(test_gemm_bias),
    };
    return cmocka_run_group_tests_name("ref", tests, NULL, NULL);
}
