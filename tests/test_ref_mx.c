/* test_ref_mx.c: CPU tests of the MXFP8 scalar references in runtime/ref/ref_mx.c (SPEC 2.3, 3). */
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

#include "ref.h"
#include "ref_mx.h"

/* NOTES: expected values come from the SPEC, from hand arithmetic (worked in the comments), or
 * from an independent computation here (double-precision log2, brute-force nearest code, block
 * amax recomputed from y). Norm+quantize tests check the composition against the E8M0/element
 * primitives, which the first section pins to SPEC values on their own. */

/* {================================================================== helpers */

static const qf_dtype k_fmts[2] = {QF_DTYPE_E4M3, QF_DTYPE_E5M2};

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float ffrom(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Largest finite magnitude code of an FP8 format (SPEC 1 table). */
static uint8_t max_code(qf_dtype fmt) {
    return fmt == QF_DTYPE_E4M3 ? 0x7E : 0x7B;
}

/* Brute force: the finite code nearest to v (exact double), ties to the even code, past the
 * largest finite value the largest (satfinite); the sign of v. */
static uint8_t nearest_code(qf_dtype fmt, double v) {
    double a = fabs(v), best_d = INFINITY;
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

/* Independent E8M0 ceil oracle for a normal positive fp32 v: ceil(log2) in double, clamped. */
static int ceil_byte_double(float v) {
    int e = (int)ceil(log2((double)v));
    e = e < -127 ? -127 : e > 127 ? 127 : e;
    return e + 127;
}

/* max |v| over n values with stride, NaN if any is NaN (independent of qf_amax_merge). */
static float amax_of(const float *v, int64_t n, int64_t stride) {
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(v[i * stride]))
            return NAN;
        a = fabsf(v[i * stride]) > a ? fabsf(v[i * stride]) : a;
    }
    return a;
}

/* Random fp32 [n] with a magnitude 2^e per group of `group` values, e in [-12, 12]. */
static void fill_blocky(float *x, int64_t n, int64_t group, uint64_t seed) {
    float mag = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % group == 0)
            mag = ldexpf(1.0f, (int)(qf_test_rng_next(&seed) % 25) - 12);
        x[i] = mag * qf_test_rng_uniform(&seed);
    }
}

/* y of every element as the norm kernels compute it (stats from qf_norm_stats_ref). */
static void compute_y(qf_norm norm, int zcg, qf_dtype xdt, const void *x, qf_dtype gdt,
                      const void *g, const void *b, int64_t M, int64_t K, float eps, float *y) {
    float *mu = malloc((size_t)M * sizeof *mu), *rs = malloc((size_t)M * sizeof *rs);
    qf_norm_stats_ref(norm, xdt, x, M, K, eps, mu, rs);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            float gv = norm != QF_NORM_NONE ? qf_load_as_float(g, gdt, k) : 1.0f;
            float bv = norm == QF_NORM_LAYERNORM ? qf_load_as_float(b, gdt, k) : 0.0f;
            y[m * K + k] = qf_norm_apply_ref(norm, zcg, qf_load_as_float(x, xdt, m * K + k), mu[m],
                                             rs[m], gv, bv);
        }
    free(mu);
    free(rs);
}

/* Output buffers of one norm+quantize call, each followed by GUARD poisoned bytes. */
enum { GUARD = 64, POISON = 0xAB };
typedef struct nq_bufs {
    int64_t M, K, rr, rc, cr, cc;
    uint8_t *row, *col, *srow, *scol;
    float *mu, *rs;
} nq_bufs;

static uint8_t *poisoned(int64_t n) {
    uint8_t *p = malloc((size_t)n + GUARD);
    memset(p, POISON, (size_t)n + GUARD);
    return p;
}

static void bufs_init(nq_bufs *b, int64_t M, int64_t K) {
    b->M = M;
    b->K = K;
    qf_mx_scale_shape_row(M, K, &b->rr, &b->rc);
    qf_mx_scale_shape_col(M, K, &b->cr, &b->cc);
    b->row = poisoned(M * K);
    b->col = poisoned(M * K);
    b->srow = poisoned(b->rr * b->rc);
    b->scol = poisoned(b->cr * b->cc);
    b->mu = malloc((size_t)(M ? M : 1) * sizeof(float));
    b->rs = malloc((size_t)(M ? M : 1) * sizeof(float));
}

/* Asserts nothing was written past any buffer, then frees them. */
static void bufs_free(nq_bufs *b) {
    const uint8_t *ends[4] = {b->row + b->M * b->K, b->col + b->M * b->K, b->srow + b->rr * b->rc,
                              b->scol + b->cr * b->cc};
    for (int i = 0; i < 4; i++)
        for (int g = 0; g < GUARD; g++)
            assert_int_equal(ends[i][g], POISON);
    free(b->row);
    free(b->col);
    free(b->srow);
    free(b->scol);
    free(b->mu);
    free(b->rs);
}

/* Plain quantize (no norm) of fp32 x into every output of b. */
static void nq_plain(const float *x, qf_dtype fmt, qf_scale_rounding r, int b2d,
                     qf_scale_layout lay, nq_bufs *b) {
    qf_norm_quantize_mxfp8_ref(QF_NORM_NONE, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32, NULL, NULL, b->M,
                               b->K, 0.0f, NULL, NULL, fmt, r, b2d, lay, b->row, b->srow, b->col,
                               b->scol, b->mu, b->rs);
}

/* Every entry of compact [R, C] outside the leading [r, c] is 0x00. */
static void check_padding(const uint8_t *s, int64_t R, int64_t C, int64_t r, int64_t c) {
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            if (i >= r || j >= c)
                assert_int_equal(s[i * C + j], 0x00);
}

/* Checks 1x32 rowwise and 32x1 columnwise outputs (compact scales) against blocks of y. */
static void check_1d(const float *y, const nq_bufs *b, qf_dtype fmt, qf_scale_rounding r) {
    const int64_t M = b->M, K = b->K;
    for (int64_t m = 0; m < M; m++)
        for (int64_t k0 = 0; k0 < K; k0 += 32) {
            int64_t w = K - k0 < 32 ? K - k0 : 32;
            uint8_t e = qf_e8m0_from_amax_ref(amax_of(y + m * K + k0, w, 1), fmt, r);
            assert_int_equal(b->srow[m * b->rc + k0 / 32], e);
            for (int64_t k = k0; k < k0 + w; k++)
                assert_int_equal(b->row[m * K + k], qf_mx_quantize_elem_ref(y[m * K + k], e, fmt));
        }
    for (int64_t m0 = 0; m0 < M; m0 += 32)
        for (int64_t k = 0; k < K; k++) {
            int64_t h = M - m0 < 32 ? M - m0 : 32;
            uint8_t e = qf_e8m0_from_amax_ref(amax_of(y + m0 * K + k, h, K), fmt, r);
            assert_int_equal(b->scol[(m0 / 32) * b->cc + k], e);
            for (int64_t m = m0; m < m0 + h; m++)
                assert_int_equal(b->col[m * K + k], qf_mx_quantize_elem_ref(y[m * K + k], e, fmt));
        }
    check_padding(b->srow, b->rr, b->rc, M, (K + 31) / 32);
    check_padding(b->scol, b->cr, b->cc, (M + 31) / 32, K);
}

/* amax of the 32x32 tile (tm, tk) of y [M, K], partial tiles included. */
static float tile_amax(const float *y, int64_t M, int64_t K, int64_t tm, int64_t tk) {
    float a = 0.0f;
    for (int64_t m = tm * 32; m < M && m < tm * 32 + 32; m++) {
        float r = amax_of(y + m * K + tk * 32, K - tk * 32 < 32 ? K - tk * 32 : 32, 1);
        if (isnan(r))
            return NAN;
        a = r > a ? r : a;
    }
    return a;
}

/* Checks 2D outputs: each tile's byte in all its row and column entries, data of both copies. */
static void check_2d(const float *y, const nq_bufs *b, qf_dtype fmt, qf_scale_rounding r) {
    const int64_t M = b->M, K = b->K;
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            uint8_t e = qf_e8m0_from_amax_ref(tile_amax(y, M, K, m / 32, k / 32), fmt, r);
            assert_int_equal(b->srow[m * b->rc + k / 32], e);
            assert_int_equal(b->scol[(m / 32) * b->cc + k], e);
            assert_int_equal(b->row[m * K + k], qf_mx_quantize_elem_ref(y[m * K + k], e, fmt));
        }
    assert_memory_equal(b->row, b->col, (size_t)(M * K));
    check_padding(b->srow, b->rr, b->rc, M, (K + 31) / 32);
    check_padding(b->scol, b->cr, b->cc, (M + 31) / 32, K);
}

/* }================================================================== */

/* {================================================================== E8M0 (SPEC 2.3) */

/* SPEC 2.3 block amax examples, ceil rounding: fl(amax * fl(1/fp8_max)) then ceil(log2). */
static void test_e8m0_ceil_spec(void **state) {
    (void)state;
    const qf_scale_rounding C = QF_SCALE_ROUNDING_CEIL;
    volatile float rcp = 1.0f / 448.0f;
    assert_true(448.0f * rcp == 1.0f); /* why 448 stays at 2^0: the fp32 product is exactly 1 */
    assert_int_equal(qf_e8m0_from_amax_ref(150.0f, QF_DTYPE_E4M3, C), 126); /* 0.33 -> 2^-1 */
    assert_int_equal(qf_e8m0_from_amax_ref(500.0f, QF_DTYPE_E4M3, C), 128); /* 1.12 -> 2^1 */
    assert_int_equal(qf_e8m0_from_amax_ref(448.0f, QF_DTYPE_E4M3, C), 127);
    assert_int_equal(qf_e8m0_from_amax_ref(57344.0f, QF_DTYPE_E5M2, C), 127);
    assert_int_equal(qf_e8m0_from_amax_ref(448.0f, QF_DTYPE_E5M2, C), 120); /* 2^-7 exactly */
    assert_int_equal(qf_e8m0_from_amax_ref(500.0f, QF_DTYPE_E5M2, C), 121); /* 0.0087 -> 2^-6 */
    assert_int_equal(qf_e8m0_from_amax_ref(0.0f, QF_DTYPE_E4M3, C), 0x00);
    assert_int_equal(qf_e8m0_from_amax_ref(-0.0f, QF_DTYPE_E4M3, C), 0x00);
    assert_int_equal(qf_e8m0_from_amax_ref(NAN, QF_DTYPE_E4M3, C), 0xFF);
    assert_int_equal(qf_e8m0_from_amax_ref(NAN, QF_DTYPE_E5M2, C), 0xFF);
    assert_int_equal(qf_e8m0_from_amax_ref(INFINITY, QF_DTYPE_E4M3, C), 254);
    /* FLT_MAX / 448 ~ 2^128 / 2^8.807 = 2^119.19 -> 2^120 */
    assert_int_equal(qf_e8m0_from_amax_ref(FLT_MAX, QF_DTYPE_E4M3, C), 247);
    /* 2^-120 / 448 ~ 2^-128.8 (an fp32 subnormal) clamps to byte 0; 2^-118 / 448 ~ 2^-126.8
     * lies in (2^-127, 2^-126): its exact ceil is -126, byte 1 */
    assert_int_equal(qf_e8m0_from_amax_ref(ldexpf(1.0f, -120), QF_DTYPE_E4M3, C), 0);
    assert_int_equal(qf_e8m0_from_amax_ref(ldexpf(1.0f, -118), QF_DTYPE_E4M3, C), 1);
    assert_int_equal(qf_e8m0_from_amax_ref(FLT_TRUE_MIN, QF_DTYPE_E4M3, C), 0);
}

/* The rounding primitive: SPEC 2.3 values, every power of two, its neighbours, and random normal
 * values against ceil(log2) in double. */
static void test_e8m0_ceil_log2_primitive(void **state) {
    (void)state;
    assert_int_equal(qf_e8m0_ceil_log2_ref(1.0f), 127);
    assert_int_equal(qf_e8m0_ceil_log2_ref(1.125f), 128);
    assert_int_equal(qf_e8m0_ceil_log2_ref(5.0f), 130);
    assert_int_equal(qf_e8m0_ceil_log2_ref(ldexpf(1.0f, -127)), 0);
    assert_int_equal(qf_e8m0_ceil_log2_ref(ldexpf(1.0f, -140)), 0);
    assert_int_equal(qf_e8m0_ceil_log2_ref(FLT_TRUE_MIN), 0);
    assert_int_equal(qf_e8m0_ceil_log2_ref(ldexpf(1.0f, -126)), 1);
    assert_int_equal(qf_e8m0_ceil_log2_ref(ffrom(0x00400001u)), 1); /* just above 2^-127 */
    assert_int_equal(qf_e8m0_ceil_log2_ref(nextafterf(1.0f, 0.0f)), 127);
    assert_int_equal(qf_e8m0_ceil_log2_ref(nextafterf(1.0f, 2.0f)), 128);
    assert_int_equal(qf_e8m0_ceil_log2_ref(ldexpf(1.0f, 127)), 254);
    assert_int_equal(qf_e8m0_ceil_log2_ref(ldexpf(1.5f, 127)), 254); /* 2^128 clamps */
    assert_int_equal(qf_e8m0_ceil_log2_ref(INFINITY), 254);
    assert_int_equal(qf_e8m0_ceil_log2_ref(0.0f), 0x00);
    assert_int_equal(qf_e8m0_ceil_log2_ref(NAN), 0xFF);
    for (int e = -126; e <= 127; e++) {
        float p = ldexpf(1.0f, e);
        assert_int_equal(qf_e8m0_ceil_log2_ref(p), e + 127);
        assert_int_equal(qf_e8m0_ceil_log2_ref(nextafterf(p, INFINITY)), e == 127 ? 254 : e + 128);
        if (e > -126)
            assert_int_equal(qf_e8m0_ceil_log2_ref(nextafterf(p, 0.0f)), e + 127);
    }
    uint64_t seed = 3;
    for (int i = 0; i < 100000; i++) {
        uint64_t r = qf_test_rng_next(&seed);
        float v = ffrom((uint32_t)((r % 254) + 1) << 23 | ((uint32_t)(r >> 40) & 0x7FFFFFu));
        assert_int_equal(qf_e8m0_ceil_log2_ref(v), ceil_byte_double(v));
    }
}

/* OCP floor rule: floor(log2(amax)) - emax (8 for E4M3, 15 for E5M2), clamped. */
static void test_e8m0_floor(void **state) {
    (void)state;
    const qf_scale_rounding F = QF_SCALE_ROUNDING_FLOOR;
    assert_int_equal(qf_e8m0_from_amax_ref(448.0f, QF_DTYPE_E4M3, F), 127); /* 8 - 8 */
    assert_int_equal(qf_e8m0_from_amax_ref(500.0f, QF_DTYPE_E4M3, F), 127);
    assert_int_equal(qf_e8m0_from_amax_ref(511.9f, QF_DTYPE_E4M3, F), 127);
    assert_int_equal(qf_e8m0_from_amax_ref(512.0f, QF_DTYPE_E4M3, F), 128);
    assert_int_equal(qf_e8m0_from_amax_ref(1.0f, QF_DTYPE_E4M3, F), 119);     /* 0 - 8 */
    assert_int_equal(qf_e8m0_from_amax_ref(57344.0f, QF_DTYPE_E5M2, F), 127); /* 15 - 15 */
    assert_int_equal(qf_e8m0_from_amax_ref(65535.0f, QF_DTYPE_E5M2, F), 127);
    assert_int_equal(qf_e8m0_from_amax_ref(1.0f, QF_DTYPE_E5M2, F), 112);
    assert_int_equal(qf_e8m0_from_amax_ref(FLT_MAX, QF_DTYPE_E4M3, F), 246); /* 127 - 8 */
    assert_int_equal(qf_e8m0_from_amax_ref(ldexpf(1.0f, -119), QF_DTYPE_E4M3, F), 0);
    assert_int_equal(qf_e8m0_from_amax_ref(ldexpf(1.0f, -118), QF_DTYPE_E4M3, F), 1);
    assert_int_equal(qf_e8m0_from_amax_ref(FLT_TRUE_MIN, QF_DTYPE_E4M3, F), 0);
    assert_int_equal(qf_e8m0_from_amax_ref(0.0f, QF_DTYPE_E4M3, F), 0x00);
    assert_int_equal(qf_e8m0_from_amax_ref(NAN, QF_DTYPE_E4M3, F), 0xFF);
    assert_int_equal(qf_e8m0_from_amax_ref(INFINITY, QF_DTYPE_E5M2, F), 254);
    /* log2(fp8_max) = emax + 0.807 for both formats, so ceil(log2 a - emax - 0.807) is the floor
     * byte or one above it, never anything else. */
    uint64_t seed = 4;
    for (int i = 0; i < 20000; i++) {
        float a = ldexpf(1.0f + 0.5f * (qf_test_rng_uniform(&seed) + 1.0f),
                         (int)(qf_test_rng_next(&seed) % 200) - 100);
        for (int f = 0; f < 2; f++) {
            int c = qf_e8m0_from_amax_ref(a, k_fmts[f], QF_SCALE_ROUNDING_CEIL);
            int fl = qf_e8m0_from_amax_ref(a, k_fmts[f], F);
            assert_true(c == fl || c == fl + 1);
        }
    }
}

/* Floor can saturate where ceil cannot: amax 500 -> floor byte 127, 500 * 2^0 > 448. */
static void test_e8m0_floor_saturates(void **state) {
    (void)state;
    uint8_t bf = qf_e8m0_from_amax_ref(500.0f, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_FLOOR);
    uint8_t bc = qf_e8m0_from_amax_ref(500.0f, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL);
    assert_int_equal(bf, 127);
    assert_int_equal(bc, 128);
    assert_int_equal(qf_mx_quantize_elem_ref(500.0f, bf, QF_DTYPE_E4M3), 0x7E); /* 448: clipped */
    assert_int_equal(qf_mx_quantize_elem_ref(-500.0f, bf, QF_DTYPE_E4M3), 0xFE);
    /* ceil: 500 * 2^-1 = 250, between 240 and 256 -> 256 (0x78), i.e. 512 after scaling */
    assert_int_equal(qf_mx_quantize_elem_ref(500.0f, bc, QF_DTYPE_E4M3), 0x78);
    assert_true(qf_e4m3_to_float_ref(0x78) * qf_e8m0_to_float_ref(bc) == 512.0f);
}

static void test_e8m0_to_float(void **state) {
    (void)state;
    assert_true(qf_e8m0_to_float_ref(127) == 1.0f);
    assert_true(qf_e8m0_to_float_ref(128) == 2.0f);
    assert_true(qf_e8m0_to_float_ref(120) == 0.0078125f);
    assert_int_equal(fbits(qf_e8m0_to_float_ref(0)), 0x00400000u);   /* 2^-127: subnormal */
    assert_int_equal(fbits(qf_e8m0_to_float_ref(1)), 0x00800000u);   /* 2^-126 */
    assert_int_equal(fbits(qf_e8m0_to_float_ref(254)), 0x7F000000u); /* 2^127 */
    assert_true(isnan(qf_e8m0_to_float_ref(0xFF)));
    for (int b = 0; b < 255; b++)
        assert_true((double)qf_e8m0_to_float_ref((uint8_t)b) == ldexp(1.0, b - 127));
}

/* Zero block, NaN block, and the extreme scale bytes (2^-127 subnormal, 2^127). */
static void test_mx_elem_specials(void **state) {
    (void)state;
    for (int f = 0; f < 2; f++) {
        uint8_t z = qf_e8m0_from_amax_ref(0.0f, k_fmts[f], QF_SCALE_ROUNDING_CEIL);
        assert_int_equal(z, 0x00);
        assert_int_equal(qf_mx_quantize_elem_ref(0.0f, z, k_fmts[f]), 0x00); /* 0 * 2^127 */
        assert_int_equal(qf_mx_quantize_elem_ref(-0.0f, z, k_fmts[f]), 0x80);
        for (int i = 0; i < 4; i++) {
            const float xs[4] = {0.0f, 1.0f, -448.0f, NAN};
            assert_int_equal(qf_mx_quantize_elem_ref(xs[i], 0xFF, k_fmts[f]), 0x7F);
        }
    }
    assert_true(isnan(qf_fp8_to_float_ref(QF_DTYPE_E5M2, 0x7F)));
    /* byte 254: FLT_MAX * 2^-127 = 2 (1 - 2^-24) -> 2.0 (0x40); 2^-127 must not flush to 0 */
    assert_int_equal(qf_mx_quantize_elem_ref(FLT_MAX, 254, QF_DTYPE_E4M3), 0x40);
    assert_int_equal(qf_mx_quantize_elem_ref(INFINITY, 254, QF_DTYPE_E4M3), 0x7E);
    /* byte 0: 2^-130 * 2^127 = 0.125 (0x20) */
    assert_int_equal(qf_mx_quantize_elem_ref(ldexpf(1.0f, -130), 0, QF_DTYPE_E4M3), 0x20);
    assert_int_equal(qf_mx_quantize_elem_ref(3.0f, 128, QF_DTYPE_E4M3), 0x3C); /* 1.5 */
    assert_int_equal(qf_mx_quantize_elem_ref(3.0f, 128, QF_DTYPE_E5M2), 0x3E); /* 1.5 */
}

/* Random blocks: each element is the code nearest to x * 2^-E (brute force in double, ties to
 * even), so decoded * 2^E is within half an FP8 ulp of x; ceil never clips; |q| <= fp8_max. */
static void test_mx_block_nearest(void **state) {
    (void)state;
    uint64_t seed = 5;
    float x[32];
    for (int f = 0; f < 2; f++)
        for (int r = 0; r < 2; r++)
            for (int blk = 0; blk < 150; blk++) {
                fill_blocky(x, 32, 32, qf_test_rng_next(&seed));
                x[blk % 32] *= 1.0f + (float)(blk % 7); /* vary the amax position and size */
                uint8_t e =
                    qf_e8m0_from_amax_ref(amax_of(x, 32, 1), k_fmts[f], (qf_scale_rounding)r);
                assert_true(e > 0 && e < 0xFF);
                for (int i = 0; i < 32; i++) {
                    double xs = ldexp((double)x[i], 127 - e); /* exact */
                    uint8_t q = qf_mx_quantize_elem_ref(x[i], e, k_fmts[f]);
                    assert_int_equal(q, nearest_code(k_fmts[f], xs));
                    assert_true(fabsf(qf_fp8_to_float_ref(k_fmts[f], q)) <= qf_fp8_max(k_fmts[f]));
                    if (r == QF_SCALE_ROUNDING_CEIL)
                        assert_true(fabs(xs) <= qf_fp8_max(k_fmts[f]));
                }
            }
}

/* }================================================================== */

/* {================================================================== layouts */

static void test_swizzle_offsets(void **state) {
    (void)state;
    assert_int_equal(qf_mx_swizzle_offset_ref(0, 0, 4), 0);
    assert_int_equal(qf_mx_swizzle_offset_ref(0, 1, 4), 1);
    assert_int_equal(qf_mx_swizzle_offset_ref(0, 3, 4), 3);
    assert_int_equal(qf_mx_swizzle_offset_ref(1, 0, 4), 16);
    assert_int_equal(qf_mx_swizzle_offset_ref(32, 0, 4), 4);
    assert_int_equal(qf_mx_swizzle_offset_ref(64, 0, 4), 8);
    assert_int_equal(qf_mx_swizzle_offset_ref(96, 0, 4), 12);
    assert_int_equal(qf_mx_swizzle_offset_ref(31, 3, 4), 31 * 16 + 3);
    assert_int_equal(qf_mx_swizzle_offset_ref(127, 3, 4), 511); /* last byte of tile 0 */
    assert_int_equal(qf_mx_swizzle_offset_ref(128, 0, 4), 512);
    assert_int_equal(qf_mx_swizzle_offset_ref(0, 4, 8), 512);
    assert_int_equal(qf_mx_swizzle_offset_ref(128, 0, 8), 1024); /* tile (1, 0) of 2 per row */
    assert_int_equal(qf_mx_swizzle_offset_ref(129, 5, 8), 1536 + 16 + 1);
}

/* For R = 256, C = 8 every byte lands exactly once, where the offset formula says: the low and
 * high bytes of each entry's index are swizzled separately and read back. */
static void test_swizzle_permutation(void **state) {
    (void)state;
    enum { R = 256, C = 8, N = R * C };
    uint8_t lo[N], hi[N], slo[N], shi[N];
    int seen[N] = {0};
    for (int i = 0; i < N; i++) {
        lo[i] = (uint8_t)(i & 0xFF);
        hi[i] = (uint8_t)(i >> 8);
    }
    memset(slo, 0xFF, N);
    memset(shi, 0xFF, N); /* index 0xFFFF: a position nothing wrote */
    qf_mx_swizzle_ref(lo, R, C, slo);
    qf_mx_swizzle_ref(hi, R, C, shi);
    for (int p = 0; p < N; p++) {
        int idx = slo[p] | shi[p] << 8;
        assert_true(idx < N);
        assert_int_equal(seen[idx]++, 0);
        assert_int_equal(qf_mx_swizzle_offset_ref(idx / C, idx % C, C), p);
    }
}

static void check_shapes(int64_t M, int64_t K, int64_t rr, int64_t rc, int64_t cr, int64_t cc) {
    int64_t a, b;
    qf_mx_scale_shape_row(M, K, &a, &b);
    assert_int_equal(a, rr);
    assert_int_equal(b, rc);
    qf_mx_scale_shape_col(M, K, &a, &b);
    assert_int_equal(a, cr);
    assert_int_equal(b, cc);
}

/* SPEC 2.3: rowwise [roundup(M,128), roundup(cdiv(K,32),4)], colwise [roundup(cdiv(M,32),4),
 * roundup(K,128)], worked by hand. */
static void test_mx_scale_shapes(void **state) {
    (void)state;
    check_shapes(1, 1, 128, 4, 4, 128);
    check_shapes(993, 8192, 1024, 256, 32, 8192); /* cdiv(993,32) = 32 */
    check_shapes(33, 33, 128, 4, 4, 128);
    check_shapes(128, 4096, 128, 128, 4, 4096);
    check_shapes(4097, 129, 4224, 8, 132, 256); /* cdiv(129,32) = 5, cdiv(4097,32) = 129 */
    check_shapes(0, 32, 0, 4, 0, 128);
}

/* }================================================================== */

/* {================================================================== norm + MXFP8 quantize */

/* Layernorm by hand. Given mu 1, rsigma 2: y = [0, 2, 4, 6], amax 6 -> 6/448 in (2^-7, 2^-6)
 * -> byte 121; y * 2^6 = 0, 128, 256, 384 -> 0x00, 0x70, 0x78, 0x7C. Computed: mu 2.5,
 * rsigma 1/sqrt(1.25), y = +-1.342, +-0.447: amax/448 in (2^-9, 2^-8) -> 119; y * 2^8 =
 * -343.5 -> -352 (0xFB), -114.5 -> -112 (0xEE). */
static void test_nq_layernorm_by_hand(void **state) {
    (void)state;
    const float x[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, b[4] = {0, 0, 0, 0};
    const float mu_in = 1.0f, rs_in = 2.0f;
    const uint8_t want_given[4] = {0x00, 0x70, 0x78, 0x7C}, want_comp[4] = {0xFB, 0xEE, 0x6E, 0x7B};
    for (int given = 0; given < 2; given++) {
        nq_bufs o;
        bufs_init(&o, 1, 4);
        qf_norm_quantize_mxfp8_ref(QF_NORM_LAYERNORM, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32, g, b, 1,
                                   4, 0.0f, given ? &mu_in : NULL, given ? &rs_in : NULL,
                                   QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0,
                                   QF_SCALE_LAYOUT_COMPACT, o.row, o.srow, NULL, NULL, o.mu, o.rs);
        assert_int_equal(o.srow[0], given ? 121 : 119);
        assert_memory_equal(o.row, given ? want_given : want_comp, 4);
        assert_true(o.mu[0] == (given ? 1.0f : 2.5f));
        assert_true(given ? o.rs[0] == 2.0f : fabs(o.rs[0] - 0.894427191) < 1e-7);
        check_padding(o.srow, o.rr, o.rc, 1, 1);
        assert_int_equal(o.col[0], POISON); /* not requested: untouched */
        bufs_free(&o);
    }
}

/* Statistics handed in equal to the computed ones give identical bytes; different ones are used
 * (and reported) as given. */
static void test_nq_given_vs_computed_stats(void **state) {
    (void)state;
    enum { M = 40, K = 70 };
    uint16_t x[M * K];
    float g[K], bt[K], mu[M], rs[M];
    uint64_t seed = 6;
    for (int i = 0; i < M * K; i++)
        x[i] = qf_float_to_bf16(2.0f + 3.0f * qf_test_rng_uniform(&seed));
    for (int k = 0; k < K; k++) {
        g[k] = qf_test_rng_uniform(&seed);
        bt[k] = 0.1f * qf_test_rng_uniform(&seed);
    }
    qf_norm_stats_ref(QF_NORM_LAYERNORM, QF_DTYPE_BF16, x, M, K, 1e-5f, mu, rs);
    nq_bufs a, b;
    bufs_init(&a, M, K);
    bufs_init(&b, M, K);
    qf_norm_quantize_mxfp8_ref(QF_NORM_LAYERNORM, 1, QF_DTYPE_BF16, x, QF_DTYPE_FP32, g, bt, M, K,
                               1e-5f, NULL, NULL, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0,
                               QF_SCALE_LAYOUT_COMPACT, a.row, a.srow, a.col, a.scol, a.mu, a.rs);
    qf_norm_quantize_mxfp8_ref(QF_NORM_LAYERNORM, 1, QF_DTYPE_BF16, x, QF_DTYPE_FP32, g, bt, M, K,
                               1e-5f, mu, rs, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0,
                               QF_SCALE_LAYOUT_COMPACT, b.row, b.srow, b.col, b.scol, b.mu, b.rs);
    assert_memory_equal(a.mu, mu, sizeof mu);
    assert_memory_equal(a.rs, rs, sizeof rs);
    assert_memory_equal(a.row, b.row, M * K);
    assert_memory_equal(a.col, b.col, M * K);
    assert_memory_equal(a.srow, b.srow, (size_t)(a.rr * a.rc));
    assert_memory_equal(a.scol, b.scol, (size_t)(a.cr * a.cc));
    for (int m = 0; m < M; m++)
        rs[m] *= 4.0f; /* y scales by exactly 4 (up to beta): the bytes must move */
    qf_norm_quantize_mxfp8_ref(QF_NORM_LAYERNORM, 1, QF_DTYPE_BF16, x, QF_DTYPE_FP32, g, bt, M, K,
                               1e-5f, mu, rs, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0,
                               QF_SCALE_LAYOUT_COMPACT, b.row, b.srow, b.col, b.scol, b.mu, b.rs);
    assert_memory_equal(b.rs, rs, sizeof rs);
    assert_memory_not_equal(a.srow, b.srow, (size_t)(a.rr * a.rc));
    bufs_free(&a);
    bufs_free(&b);
}

/* Partial blocks (K = 33, M = 33): the last block holds the elements that exist; every padding
 * scale entry is 0x00 over a 0xAB poison, and nothing is written past any buffer. */
static void test_nq_partial_blocks_padding(void **state) {
    (void)state;
    enum { M = 33, K = 33 };
    float x[M * K];
    fill_blocky(x, M * K, 11, 7);
    x[5 * K + 32] = 300.0f; /* alone in row 5's second block; in column 32's first block */
    for (int f = 0; f < 2; f++)
        for (int r = 0; r < 2; r++) {
            nq_bufs o;
            bufs_init(&o, M, K);
            nq_plain(x, k_fmts[f], (qf_scale_rounding)r, 0, QF_SCALE_LAYOUT_COMPACT, &o);
            check_1d(x, &o, k_fmts[f], (qf_scale_rounding)r);
            if (f == 0 && r == 0) { /* 300/448 in (2^-1, 1): byte 127; 300 -> 288 (0x79) */
                assert_int_equal(o.srow[5 * o.rc + 1], 127);
                assert_int_equal(o.row[5 * K + 32], 0x79);
            }
            bufs_free(&o);
        }
}

/* Rowwise data of 1D is per-row block-by-block quantization of y, columnwise per column over 32
 * rows, for each norm and input dtype (M = 70: bands 32, 32, 6; K = 100: blocks 32, 32, 32, 4). */
static void test_nq_1d_matches_blocks(void **state) {
    (void)state;
    enum { M = 70, K = 100 };
    const qf_dtype dts[3] = {QF_DTYPE_FP32, QF_DTYPE_FP16, QF_DTYPE_BF16};
    float xf[M * K], g[K], bt[K], y[M * K];
    uint16_t xh[M * K];
    fill_blocky(xf, M * K, 13, 8);
    fill_blocky(g, K, K, 9);
    fill_blocky(bt, K, K, 10);
    for (int n = 0; n < QF_NORM_COUNT; n++)
        for (int d = 0; d < 3; d++) {
            const void *x = xf;
            if (dts[d] != QF_DTYPE_FP32) {
                for (int i = 0; i < M * K; i++)
                    xh[i] =
                        dts[d] == QF_DTYPE_FP16 ? qf_float_to_fp16(xf[i]) : qf_float_to_bf16(xf[i]);
                x = xh;
            }
            compute_y((qf_norm)n, d == 1, dts[d], x, QF_DTYPE_FP32, g, bt, M, K, 1e-5f, y);
            nq_bufs o;
            bufs_init(&o, M, K);
            qf_norm_quantize_mxfp8_ref((qf_norm)n, d == 1, dts[d], x, QF_DTYPE_FP32, g, bt, M, K,
                                       1e-5f, NULL, NULL, k_fmts[d & 1], QF_SCALE_ROUNDING_CEIL, 0,
                                       QF_SCALE_LAYOUT_COMPACT, o.row, o.srow, o.col, o.scol, o.mu,
                                       o.rs);
            check_1d(y, &o, k_fmts[d & 1], QF_SCALE_ROUNDING_CEIL);
            bufs_free(&o);
        }
}

/* 2D: one byte per 32x32 tile in every row and column entry it covers, row and col data
 * identical; the tile amax is >= each of its 1x32 block amaxes, so the 2D byte is never below
 * the 1D one and, with one large value per tile, above it for the other rows. */
static void test_nq_2d_tiles(void **state) {
    (void)state;
    enum { M = 70, K = 100 };
    float x[M * K];
    fill_blocky(x, M * K, 7, 11);
    for (int i = 0; i < M * K; i++)
        x[i] = ldexpf(x[i], -13); /* |x| < 0.5 everywhere ... */
    x[3 * K + 40] = 400.0f;       /* ... but here, in tile (0, 1) */
    nq_bufs t, d;
    bufs_init(&t, M, K);
    bufs_init(&d, M, K);
    for (int r = 0; r < 2; r++) {
        nq_plain(x, QF_DTYPE_E4M3, (qf_scale_rounding)r, 1, QF_SCALE_LAYOUT_COMPACT, &t);
        check_2d(x, &t, QF_DTYPE_E4M3, (qf_scale_rounding)r);
    }
    nq_plain(x, QF_DTYPE_E5M2, QF_SCALE_ROUNDING_CEIL, 1, QF_SCALE_LAYOUT_COMPACT, &t);
    check_2d(x, &t, QF_DTYPE_E5M2, QF_SCALE_ROUNDING_CEIL);
    nq_plain(x, QF_DTYPE_E5M2, QF_SCALE_ROUNDING_CEIL, 0, QF_SCALE_LAYOUT_COMPACT, &d);
    for (int m = 0; m < M; m++)
        for (int kb = 0; kb < 4; kb++)
            assert_true(t.srow[m * t.rc + kb] >= d.srow[m * d.rc + kb]);
    for (int m = 0; m < 32; m++) /* 400 / 57344 in (2^-8, 2^-7): byte 120 across the tile */
        assert_int_equal(t.srow[m * t.rc + 1], 120);
    assert_true(d.srow[10 * d.rc + 1] < 120);
    bufs_free(&t);
    bufs_free(&d);
}

/* A NaN y makes exactly its blocks NaN: its 1x32 row block and 32x1 column block (1D), or its
 * tile (2D); every other scale stays finite and no other element is NaN. */
static void test_nq_nan_only_its_blocks(void **state) {
    (void)state;
    enum { M = 64, K = 64, NM = 40, NK = 37 };
    float x[M * K];
    fill_blocky(x, M * K, 32, 12);
    x[NM * K + NK] = NAN;
    for (int b2d = 0; b2d < 2; b2d++) {
        nq_bufs o;
        bufs_init(&o, M, K);
        nq_plain(x, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, b2d, QF_SCALE_LAYOUT_COMPACT, &o);
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) {
                int in_row = m == NM || (b2d && m / 32 == NM / 32);
                int in_col = k == NK || (b2d && k / 32 == NK / 32);
                int row_nan = k / 32 == NK / 32 && in_row;
                int col_nan = m / 32 == NM / 32 && in_col;
                assert_int_equal(o.srow[m * o.rc + k / 32] == 0xFF, row_nan);
                assert_int_equal(o.scol[(m / 32) * o.cc + k] == 0xFF, col_nan);
                assert_int_equal(o.row[m * K + k] == 0x7F, row_nan);
                assert_int_equal(o.col[m * K + k] == 0x7F, col_nan);
            }
        bufs_free(&o);
    }
}

/* With statistics computed here a NaN in x poisons its row's mu/rsigma, so the whole row (every
 * row block, and its band's column blocks) is NaN; with given statistics only its blocks are. */
static void test_nq_nan_with_layernorm(void **state) {
    (void)state;
    enum { M = 64, K = 64, NM = 40, NK = 37 };
    float x[M * K], g[K], bt[K], mu[M], rs[M];
    fill_blocky(x, M * K, 32, 13);
    for (int k = 0; k < K; k++) {
        g[k] = 1.0f;
        bt[k] = 0.0f;
    }
    for (int m = 0; m < M; m++) {
        mu[m] = 0.5f;
        rs[m] = 2.0f;
    }
    x[NM * K + NK] = NAN;
    for (int given = 0; given < 2; given++) {
        nq_bufs o;
        bufs_init(&o, M, K);
        qf_norm_quantize_mxfp8_ref(QF_NORM_LAYERNORM, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32, g, bt, M,
                                   K, 1e-5f, given ? mu : NULL, given ? rs : NULL, QF_DTYPE_E4M3,
                                   QF_SCALE_ROUNDING_CEIL, 0, QF_SCALE_LAYOUT_COMPACT, o.row,
                                   o.srow, o.col, o.scol, NULL, NULL);
        for (int kb = 0; kb < 2; kb++)
            assert_int_equal(o.srow[NM * o.rc + kb] == 0xFF, !given || kb == NK / 32);
        for (int k = 0; k < K; k++)
            assert_int_equal(o.scol[(NM / 32) * o.cc + k] == 0xFF, !given || k == NK);
        assert_int_not_equal(o.srow[(NM - 1) * o.rc + 1], 0xFF);
        assert_int_not_equal(o.scol[0 * o.cc + NK], 0xFF);
        bufs_free(&o);
    }
}

/* Zero rows (none and rmsnorm: y = 0) give scale 0x00 and zero data, never NaN. */
static void test_nq_zero_block(void **state) {
    (void)state;
    enum { M = 32, K = 64 };
    float x[M * K] = {0}, g[K];
    for (int k = 0; k < K; k++)
        g[k] = 1.0f;
    for (int n = 0; n < 2; n++) {
        nq_bufs o;
        bufs_init(&o, M, K);
        qf_norm_quantize_mxfp8_ref(n ? QF_NORM_RMSNORM : QF_NORM_NONE, 0, QF_DTYPE_FP32, x,
                                   QF_DTYPE_FP32, g, NULL, M, K, 1e-5f, NULL, NULL, QF_DTYPE_E4M3,
                                   QF_SCALE_ROUNDING_CEIL, 0, QF_SCALE_LAYOUT_COMPACT, o.row,
                                   o.srow, o.col, o.scol, NULL, NULL);
        for (int i = 0; i < M * K; i++) {
            assert_int_equal(o.row[i], 0x00);
            assert_int_equal(o.col[i], 0x00);
        }
        for (int i = 0; i < o.rr * o.rc; i++)
            assert_int_equal(o.srow[i], 0x00);
        for (int i = 0; i < o.cr * o.cc; i++)
            assert_int_equal(o.scol[i], 0x00);
        bufs_free(&o);
    }
}

/* M = 1, K = 2, x = [1, 448] by hand. Rowwise: one block, amax 448 -> 127 at (0, 0) = offset 0;
 * data 0x38, 0x7E. Columnwise: column 0 amax 1 -> 1/448 in (2^-9, 2^-8) -> 119, column 1 -> 127;
 * swizzled as the transpose [128, 4]: (k, 0) at offset k*16. Data: 1 * 2^8 = 256 -> 0x78. */
static void test_nq_swizzled_by_hand(void **state) {
    (void)state;
    const float x[2] = {1.0f, 448.0f};
    nq_bufs o;
    bufs_init(&o, 1, 2);
    nq_plain(x, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0, QF_SCALE_LAYOUT_SWIZZLED, &o);
    for (int p = 0; p < 512; p++) {
        assert_int_equal(o.srow[p], p == 0 ? 127 : 0);
        assert_int_equal(o.scol[p], p == 0 ? 119 : p == 16 ? 127 : 0);
    }
    assert_int_equal(o.row[0], 0x38);
    assert_int_equal(o.row[1], 0x7E);
    assert_int_equal(o.col[0], 0x78);
    assert_int_equal(o.col[1], 0x7E);
    bufs_free(&o);
}

/* Swizzled scales are the compact ones moved by the offset formula (columnwise as the transpose),
 * every byte of the padded matrix written; the data does not depend on the layout. */
static void test_nq_swizzled_matches_compact(void **state) {
    (void)state;
    enum { M = 200, K = 300 };
    float *x = malloc(M * K * sizeof *x);
    fill_blocky(x, M * K, 29, 14);
    for (int b2d = 0; b2d < 2; b2d++) {
        nq_bufs c, s;
        bufs_init(&c, M, K);
        bufs_init(&s, M, K);
        nq_plain(x, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, b2d, QF_SCALE_LAYOUT_COMPACT, &c);
        nq_plain(x, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, b2d, QF_SCALE_LAYOUT_SWIZZLED, &s);
        assert_memory_equal(c.row, s.row, M * K);
        assert_memory_equal(c.col, s.col, M * K);
        for (int64_t i = 0; i < c.rr; i++)
            for (int64_t j = 0; j < c.rc; j++)
                assert_int_equal(s.srow[qf_mx_swizzle_offset_ref(i, j, c.rc)],
                                 c.srow[i * c.rc + j]);
        for (int64_t i = 0; i < c.cr; i++)
            for (int64_t j = 0; j < c.cc; j++)
                assert_int_equal(s.scol[qf_mx_swizzle_offset_ref(j, i, c.cr)],
                                 c.scol[i * c.cc + j]);
        for (int64_t p = 0; p < s.rr * s.rc; p++)
            assert_int_not_equal(s.srow[p], POISON);
        for (int64_t p = 0; p < s.cr * s.cc; p++)
            assert_int_not_equal(s.scol[p], POISON);
        bufs_free(&c);
        bufs_free(&s);
    }
    free(x);
}

/* Each output may be NULL on its own; the ones produced do not change. M = 0 writes nothing. */
static void test_nq_optional_outputs(void **state) {
    (void)state;
    enum { M = 45, K = 50 };
    float x[M * K];
    fill_blocky(x, M * K, 9, 15);
    nq_bufs a, b;
    bufs_init(&a, M, K);
    bufs_init(&b, M, K);
    nq_plain(x, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0, QF_SCALE_LAYOUT_COMPACT, &a);
    qf_norm_quantize_mxfp8_ref(QF_NORM_NONE, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32, NULL, NULL, M, K,
                               0.0f, NULL, NULL, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0,
                               QF_SCALE_LAYOUT_SWIZZLED, NULL, NULL, b.col, NULL, NULL, NULL);
    assert_memory_equal(a.col, b.col, M * K);
    assert_int_equal(b.row[0], POISON);
    assert_int_equal(b.scol[0], POISON);
    qf_norm_quantize_mxfp8_ref(QF_NORM_NONE, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32, NULL, NULL, M, K,
                               0.0f, NULL, NULL, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0,
                               QF_SCALE_LAYOUT_COMPACT, NULL, b.srow, NULL, NULL, NULL, NULL);
    assert_memory_equal(a.srow, b.srow, (size_t)(a.rr * a.rc));
    assert_int_equal(b.row[0], POISON);
    bufs_free(&a);
    bufs_free(&b);
    nq_bufs z;
    bufs_init(&z, 0, 40);
    nq_plain(x, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 1, QF_SCALE_LAYOUT_SWIZZLED, &z);
    bufs_free(&z); /* guards intact: nothing written */
}

/* }================================================================== */

/* {================================================================== GEMM */

/* Random finite FP8 bytes (no NaN codes) with |v| <= 8. */
static void random_fp8(qf_dtype fmt, uint8_t *p, int n, uint64_t seed) {
    for (int i = 0; i < n; i++)
        p[i] = qf_fp8_from_float_ref(fmt, 8.0f * qf_test_rng_uniform(&seed));
}

/* All scale bytes 127 (2^0): the plain FP8 product of qf_gemm_fp8_ref with sa = sb = 1, while
 * the padding entries are poisoned with 0xFF (TE PR #3070: padding must never be read). */
static void test_gemm_unit_scales(void **state) {
    (void)state;
    enum { M = 3, N = 5, K = 70, SC = 4 }; /* roundup(cdiv(70,32),4) = 4; 3 blocks real */
    uint8_t a[M * K], b[N * K], as[128 * SC], bs[128 * SC];
    double y[M * N], want[M * N];
    for (int f = 0; f < 2; f++) {
        random_fp8(QF_DTYPE_E4M3, a, M * K, 20);
        random_fp8(k_fmts[f], b, N * K, 21);
        memset(as, 0xFF, sizeof as);
        memset(bs, 0xFF, sizeof bs);
        for (int r = 0; r < 128; r++)
            for (int kb = 0; kb < 3; kb++)
                as[r * SC + kb] = bs[r * SC + kb] = 127;
        qf_gemm_mxfp8_ref(QF_DTYPE_E4M3, a, as, k_fmts[f], b, bs, NULL, M, N, K, y);
        qf_gemm_fp8_ref(QF_DTYPE_E4M3, a, 1.0f, k_fmts[f], b, 1.0f, NULL, M, N, K, want);
        int nonzero = 0;
        for (int i = 0; i < M * N; i++) {
            assert_true(y[i] == want[i]);
            nonzero += y[i] != 0.0;
        }
        assert_true(nonzero > 0);
    }
}

/* y of a 1 x K by 1 x K product with the given block bytes for A (B at 127). */
static double gemm_1x1(const uint8_t *a, const uint8_t *b, int K, const uint8_t *a_bytes) {
    uint8_t as[4], bs[4] = {127, 127, 127, 127};
    double y;
    memcpy(as, a_bytes, 4);
    qf_gemm_mxfp8_ref(QF_DTYPE_E4M3, a, as, QF_DTYPE_E4M3, b, bs, NULL, 1, 1, K, &y);
    return y;
}

/* A block's scale multiplies only that block's contribution: byte + 1 doubles it, byte - 7
 * divides it by 128; with two blocks the contributions add (all exact in double). */
static void test_gemm_block_scale_linearity(void **state) {
    (void)state;
    uint8_t a[64], b[64];
    random_fp8(QF_DTYPE_E4M3, a, 64, 22);
    random_fp8(QF_DTYPE_E4M3, b, 64, 23);
    double c0 = 0.0, c1 = 0.0; /* the two blocks' contributions, by hand */
    for (int k = 0; k < 64; k++)
        *(k < 32 ? &c0 : &c1) +=
            (double)qf_e4m3_to_float_ref(a[k]) * (double)qf_e4m3_to_float_ref(b[k]);
    assert_true(c0 != 0.0 && c1 != 0.0);
    const uint8_t unit[4] = {127, 127, 0xFF, 0xFF}, up[4] = {128, 0xFF, 0xFF, 0xFF},
                  down[4] = {120, 0xFF, 0xFF, 0xFF};
    assert_true(gemm_1x1(a, b, 32, unit) == c0);
    assert_true(gemm_1x1(a, b, 32, up) == 2.0 * c0);
    assert_true(gemm_1x1(a, b, 32, down) == c0 / 128.0);
    const uint8_t b0up[4] = {128, 127, 0, 0}, b1up[4] = {127, 128, 0, 0};
    assert_true(gemm_1x1(a, b, 64, unit) == c0 + c1);
    assert_true(gemm_1x1(a, b, 64, b0up) == 2.0 * c0 + c1);
    assert_true(gemm_1x1(a, b, 64, b1up) == c0 + 2.0 * c1);
    uint8_t as[4] = {127, 127, 0, 0}, bs[4] = {130, 127, 0, 0};
    double y;
    qf_gemm_mxfp8_ref(QF_DTYPE_E4M3, a, as, QF_DTYPE_E4M3, b, bs, NULL, 1, 1, 64, &y);
    assert_true(y == 8.0 * c0 + c1); /* B's scale counts the same way */
}

/* A NaN (0xFF) scale makes the outputs its block reaches NaN, and only those; bias is added. */
static void test_gemm_nan_scale_and_bias(void **state) {
    (void)state;
    enum { M = 2, N = 3, K = 32, SC = 4 };
    uint8_t a[M * K], b[N * K], as[128 * SC] = {0}, bs[128 * SC] = {0};
    double y0[M * N], y[M * N];
    const double bias[N] = {0.5, -3.0, 1024.0};
    random_fp8(QF_DTYPE_E4M3, a, M * K, 24);
    random_fp8(QF_DTYPE_E4M3, b, N * K, 25);
    for (int r = 0; r < 128; r++)
        as[r * SC] = bs[r * SC] = 127;
    qf_gemm_mxfp8_ref(QF_DTYPE_E4M3, a, as, QF_DTYPE_E4M3, b, bs, NULL, M, N, K, y0);
    qf_gemm_mxfp8_ref(QF_DTYPE_E4M3, a, as, QF_DTYPE_E4M3, b, bs, bias, M, N, K, y);
    for (int i = 0; i < M * N; i++) /* E4M3 products of |v| <= 8 sum exactly in double */
        assert_true(y[i] == y0[i] + bias[i % N]);
    as[1 * SC] = 0xFF; /* row 1 of A */
    qf_gemm_mxfp8_ref(QF_DTYPE_E4M3, a, as, QF_DTYPE_E4M3, b, bs, bias, M, N, K, y);
    for (int n = 0; n < N; n++) {
        assert_true(y[n] == y0[n] + bias[n]);
        assert_true(isnan(y[N + n]));
    }
}

/* Quantize then multiply: |gemm - exact| within the sum of per-element quantization errors
 * (half an E4M3 ulp, 2^-4 relative, or half the smallest subnormal step 2^(E-10)): checks that
 * the GEMM applies 2^+E where the quantizer applied 2^-E. */
static void test_gemm_after_quantize(void **state) {
    (void)state;
    enum { M = 4, N = 3, K = 96 };
    float x[M * K], w[N * K];
    fill_blocky(x, M * K, 32, 26);
    fill_blocky(w, N * K, 32, 27);
    nq_bufs qa, qb;
    bufs_init(&qa, M, K);
    bufs_init(&qb, N, K);
    nq_plain(x, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0, QF_SCALE_LAYOUT_COMPACT, &qa);
    nq_plain(w, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0, QF_SCALE_LAYOUT_COMPACT, &qb);
    double y[M * N];
    qf_gemm_mxfp8_ref(QF_DTYPE_E4M3, qa.row, qa.srow, QF_DTYPE_E4M3, qb.row, qb.srow, NULL, M, N, K,
                      y);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double exact = 0.0, bound = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double ea = ldexp(1.0, qa.srow[m * qa.rc + k / 32] - 137) + fabs(x[m * K + k]) / 16;
                double eb = ldexp(1.0, qb.srow[n * qb.rc + k / 32] - 137) + fabs(w[n * K + k]) / 16;
                exact += (double)x[m * K + k] * w[n * K + k];
                mag += fabs((double)x[m * K + k] * w[n * K + k]);
                bound += ea * fabs(w[n * K + k]) + fabs(x[m * K + k]) * eb + ea * eb;
            }
            assert_true(fabs(y[m * N + n] - exact) <= bound);
            assert_true(bound < 0.2 * mag); /* the bound itself is not vacuous */
        }
    bufs_free(&qa);
    bufs_free(&qb);
}

/* }================================================================== */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e8m0_ceil_spec),
        cmocka_unit_test(test_e8m0_ceil_log2_primitive),
        cmocka_unit_test(test_e8m0_floor),
        cmocka_unit_test(test_e8m0_floor_saturates),
        cmocka_unit_test(test_e8m0_to_float),
        cmocka_unit_test(test_mx_elem_specials),
        cmocka_unit_test(test_mx_block_nearest),
        cmocka_unit_test(test_swizzle_offsets),
        cmocka_unit_test(test_swizzle_permutation),
        cmocka_unit_test(test_mx_scale_shapes),
        cmocka_unit_test(test_nq_layernorm_by_hand),
        cmocka_unit_test(test_nq_given_vs_computed_stats),
        cmocka_unit_test(test_nq_partial_blocks_padding),
        cmocka_unit_test(test_nq_1d_matches_blocks),
        cmocka_unit_test(test_nq_2d_tiles),
        cmocka_unit_test(test_nq_nan_only_its_blocks),
        cmocka_unit_test(test_nq_nan_with_layernorm),
        cmocka_unit_test(test_nq_zero_block),
        cmocka_unit_test(test_nq_swizzled_by_hand),
        cmocka_unit_test(test_nq_swizzled_matches_compact),
        cmocka_unit_test(test_nq_optional_outputs),
        cmocka_unit_test(test_gemm_unit_scales),
        cmocka_unit_test(test_gemm_block_scale_linearity),
        cmocka_unit_test(test_gemm_nan_scale_and_bias),
        cmocka_unit_test(test_gemm_after_quantize),
    };
    return cmocka_run_group_tests_name("ref_mx", tests, NULL, NULL);
}
