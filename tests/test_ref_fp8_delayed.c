/* test_ref_fp8_delayed.c: CPU tests of the per-tensor FP8 references in runtime/ref/ref.c:
 * delayed-scaling update, norm + FP8 quantize and the FP8 GEMM (numerics 2.1, 3). */
#include "test_ref_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

/* NOTES: expected values come from the numerics contract (docs/numerics.md), from hand arithmetic,
 * or from an independent computation in this file (brute-force nearest search, long-double
 * statistics, algebraic properties); never from the code under test itself. */

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
    return cmocka_run_group_tests_name("ref_fp8_delayed", tests, NULL, NULL);
}
