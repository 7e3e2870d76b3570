/* test_ref_mx.c: CPU tests of the MXFP8 scalar references in runtime/ref/ref_mx.c: E8M0 scales,
 * elements, scale layouts and the block-scaled GEMM (numerics 2.3, 3). Norm + quantize:
 * test_ref_mx_quantize.c. */
#include "test_ref_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

#include "ref.h"
#include "ref_mx.h"

/* NOTES: expected values come from the numerics contract (docs/numerics.md), from hand arithmetic
 * (worked in the comments), or from an independent computation here (double-precision log2,
 * brute-force nearest code, block amax recomputed from y). Norm+quantize tests check the
 * composition against the E8M0/element primitives, which the first section pins to the numerics
 * contract's values on their own. */

/* {================================================================== helpers */

/* Independent E8M0 ceil oracle for a normal positive fp32 v: ceil(log2) in double, clamped. */
static int ceil_byte_double(float v) {
    int e = (int)ceil(log2((double)v));
    e = e < -127 ? -127 : e > 127 ? 127 : e;
    return e + 127;
}

/* }================================================================== */

/* {================================================================== E8M0 (numerics 2.3) */

/* numerics 2.3 block amax examples, ceil rounding: fl(amax * fl(1/fp8_max)) then ceil(log2). */
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

/* The rounding primitive: numerics 2.3 values, every power of two, its neighbours, and random
 * normal values against ceil(log2) in double. */
static void test_e8m0_ceil_log2_primitive(void **state) {
    (void)state;
    assert_int_equal(qf_e8m0_ceil_log2_ref(1.0f), 127);
    assert_int_equal(qf_e8m0_ceil_log2_ref(1.125f), 128);
    assert_int_equal(qf_e8m0_ceil_log2_ref(5.0f), 130);
    assert_int_equal(qf_e8m0_ceil_log2_ref(ldexpf(1.0f, -127)), 0);
    assert_int_equal(qf_e8m0_ceil_log2_ref(ldexpf(1.0f, -140)), 0);
    assert_int_equal(qf_e8m0_ceil_log2_ref(FLT_TRUE_MIN), 0);
    assert_int_equal(qf_e8m0_ceil_log2_ref(ldexpf(1.0f, -126)), 1);
    assert_int_equal(qf_e8m0_ceil_log2_ref(qf_f32_from_bits(0x00400001u)),
                     1); /* just above 2^-127 */
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
        float v =
            qf_f32_from_bits((uint32_t)((r % 254) + 1) << 23 | ((uint32_t)(r >> 40) & 0x7FFFFFu));
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
            int c = qf_e8m0_from_amax_ref(a, k_fp8_fmts[f], QF_SCALE_ROUNDING_CEIL);
            int fl = qf_e8m0_from_amax_ref(a, k_fp8_fmts[f], F);
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
    assert_int_equal(qf_f32_bits(qf_e8m0_to_float_ref(0)), 0x00400000u);   /* 2^-127: subnormal */
    assert_int_equal(qf_f32_bits(qf_e8m0_to_float_ref(1)), 0x00800000u);   /* 2^-126 */
    assert_int_equal(qf_f32_bits(qf_e8m0_to_float_ref(254)), 0x7F000000u); /* 2^127 */
    assert_true(isnan(qf_e8m0_to_float_ref(0xFF)));
    for (int b = 0; b < 255; b++)
        assert_true((double)qf_e8m0_to_float_ref((uint8_t)b) == ldexp(1.0, b - 127));
}

/* Zero block, NaN block, and the extreme scale bytes (2^-127 subnormal, 2^127). */
static void test_mx_elem_specials(void **state) {
    (void)state;
    for (int f = 0; f < 2; f++) {
        uint8_t z = qf_e8m0_from_amax_ref(0.0f, k_fp8_fmts[f], QF_SCALE_ROUNDING_CEIL);
        assert_int_equal(z, 0x00);
        assert_int_equal(qf_mx_quantize_elem_ref(0.0f, z, k_fp8_fmts[f]), 0x00); /* 0 * 2^127 */
        assert_int_equal(qf_mx_quantize_elem_ref(-0.0f, z, k_fp8_fmts[f]), 0x80);
        for (int i = 0; i < 4; i++) {
            const float xs[4] = {0.0f, 1.0f, -448.0f, NAN};
            assert_int_equal(qf_mx_quantize_elem_ref(xs[i], 0xFF, k_fp8_fmts[f]), 0x7F);
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
                fill_blocky(x, 32, 32, 12, qf_test_rng_next(&seed));
                x[blk % 32] *= 1.0f + (float)(blk % 7); /* vary the amax position and size */
                uint8_t e =
                    qf_e8m0_from_amax_ref(amax_of(x, 32, 1), k_fp8_fmts[f], (qf_scale_rounding)r);
                assert_true(e > 0 && e < 0xFF);
                for (int i = 0; i < 32; i++) {
                    double xs = ldexp((double)x[i], 127 - e); /* exact */
                    uint8_t q = qf_mx_quantize_elem_ref(x[i], e, k_fp8_fmts[f]);
                    assert_int_equal(q, nearest_code(k_fp8_fmts[f], xs));
                    assert_true(fabsf(qf_fp8_to_float_ref(k_fp8_fmts[f], q)) <=
                                qf_fp8_max(k_fp8_fmts[f]));
                    if (r == QF_SCALE_ROUNDING_CEIL)
                        assert_true(fabs(xs) <= qf_fp8_max(k_fp8_fmts[f]));
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

/* numerics 2.3: rowwise [roundup(M,128), roundup(cdiv(K,32),4)], colwise [roundup(cdiv(M,32),4),
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
        random_fp8(k_fp8_fmts[f], b, N * K, 21);
        memset(as, 0xFF, sizeof as);
        memset(bs, 0xFF, sizeof bs);
        for (int r = 0; r < 128; r++)
            for (int kb = 0; kb < 3; kb++)
                as[r * SC + kb] = bs[r * SC + kb] = 127;
        qf_gemm_mxfp8_ref(QF_DTYPE_E4M3, a, as, k_fp8_fmts[f], b, bs, NULL, M, N, K, y);
        qf_gemm_fp8_ref(QF_DTYPE_E4M3, a, 1.0f, k_fp8_fmts[f], b, 1.0f, NULL, M, N, K, want);
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
        cmocka_unit_test(test_gemm_unit_scales),
        cmocka_unit_test(test_gemm_block_scale_linearity),
        cmocka_unit_test(test_gemm_nan_scale_and_bias),
    };
    return cmocka_run_group_tests_name("ref_mx", tests, NULL, NULL);
}
