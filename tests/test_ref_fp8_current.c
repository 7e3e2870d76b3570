/* test_ref_fp8_current.c: CPU tests of the current-scaling references in
 * runtime/ref/ref_fp8_current.c: scale, quantize and argument errors (numerics 2.2). Norm shapes
 * against fp64 and TE: test_ref_fp8_current_norm.c. */
#include "test_ref_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

/* NOTES: expected values come from the numerics contract (docs/numerics.md), from hand arithmetic,
 * or from an independent computation in this file (brute-force nearest search, long-double
 * statistics, algebraic properties); never from the code under test itself. */

/* {================================================================== fp8_current: scale */

/* numerics 2.2: a zero, infinite or NaN amax gives scale 1 (and scale_inv 1). */
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

/* 1e-40 is an fp32 subnormal; 448 / 1e-40 = 4.48e42 overflows fp32: FLT_MAX, not inf (numerics
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

/* A layernorm source of fp32 x [M, K], gamma and beta [K], eps 1e-5, statistics computed. */
static qf_fp8_current_src layernorm_src(const float *x, const float *g, const float *beta,
                                        int64_t M, int64_t K) {
    return qf_norm_src_make(QF_NORM_LAYERNORM, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32, g, beta, M, K,
                            1e-5f, NULL, NULL);
}

/* numerics 2.2: an all-zero tensor gives scale 1 and all-zero data (rowwise and columnwise), also
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
    const qf_fp8_current_src src = layernorm_src(x, g, beta, 2, 4);
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
    qf_fp8_current_src src = layernorm_src(x, g, beta, 1, 4);
    src.mu_in = &mu_in;
    src.rsigma_in = &rs_in;
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
    return layernorm_src(k_err_x, k_err_g, k_err_g, 1, 4);
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

int main(void) {
    const struct CMUnitTest tests[] = {
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
        cmocka_unit_test(test_cur_errors_src),
        cmocka_unit_test(test_cur_errors_opts_out),
        cmocka_unit_test(test_cur_errors_amax_plain),
    };
    return cmocka_run_group_tests_name("ref_fp8_current", tests, NULL, NULL);
}
