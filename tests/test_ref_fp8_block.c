/* test_ref_fp8_block.c: CPU tests of the FP8 block-scaling references in
 * runtime/ref/ref_fp8_block.c (numerics 2.5): the block scale, the GEMM_READY layouts, 1x128 /
 * 128x1 / 128x128 quantization with partial blocks, NaN and zero blocks, the fused norm,
 * dequantization, the block-scaled GEMM and argument errors. */
#include "test_ref_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

#include "ref_fp8_block.h"

/* NOTES: expected values come from the numerics contract (docs/numerics.md 2.5, 1), from hand
 * arithmetic, or from an independent computation in this file (frexp for the power-of-two floor,
 * brute-force nearest E4M3 codes, loops over the layouts written out from TE's shapes); never
 * from the code under test itself. */

#define BF16_MAX 0x1.fep+127f /* bf16 0x7F7F: (2 - 2^-7) * 2^127 = 3.3895314e38 */

/* {================================================================== independent oracle */

/* The scale of numerics 2.5 for a finite amax > 0 written another way: 448/a in fp32, an
 * infinite quotient replaced by vinf, the power-of-two floor taken with frexpf. */
static float want_scale(float amax, int pow2, float vinf) {
    if (!(amax > 0.0f) || isinf(amax))
        return 1.0f;
    float s = 448.0f / amax;
    if (isinf(s))
        s = vinf;
    if (pow2) {
        int e;
        frexpf(s, &e); /* s = f * 2^e, f in [0.5, 1) */
        s = ldexpf(1.0f, e - 1);
    }
    return s;
}

/* Expected byte of v in a block with scale s: brute-force nearest E4M3 of fl(v * s). */
static uint8_t want_code(float v, float s) {
    const float p = v * s;
    return isnan(p) ? 0x7F : nearest_code(QF_DTYPE_E4M3, (double)p);
}

/* Buffers of one call: data copies and scale matrices sized from TE's shapes written out here. */
typedef struct blk_bufs {
    int64_t M, K, rr, rc, cr, cc; /* row scale [rr, rc], col scale [cr, cc] */
    uint8_t *row, *col;
    float *rs, *cs, *mu, *rsigma;
    qf_fp8_block_out out;
} blk_bufs;

static void bufs_init(blk_bufs *b, int64_t M, int64_t K, int block_2d) {
    const int64_t bm = (M + 127) / 128, bk = (K + 127) / 128;
    *b = (blk_bufs){.M = M, .K = K};
    b->rr = block_2d ? bm : bk;
    b->rc = block_2d ? (bk + 3) / 4 * 4 : (M + 3) / 4 * 4;
    b->cr = block_2d ? bk : bm;
    b->cc = block_2d ? (bm + 3) / 4 * 4 : (K + 3) / 4 * 4;
    b->row = poisoned(M * K), b->col = poisoned(M * K);
    b->rs = malloc((size_t)(b->rr * b->rc) * 4), b->cs = malloc((size_t)(b->cr * b->cc) * 4);
    for (int64_t i = 0; i < b->rr * b->rc; i++)
        b->rs[i] = -7.0f;
    for (int64_t i = 0; i < b->cr * b->cc; i++)
        b->cs[i] = -7.0f;
    b->mu = malloc((size_t)M * 4), b->rsigma = malloc((size_t)M * 4);
    b->out = (qf_fp8_block_out){b->row, b->rs, b->col, b->cs, b->mu, b->rsigma};
}

static void bufs_free(blk_bufs *b) {
    free(b->row), free(b->col), free(b->rs), free(b->cs), free(b->mu), free(b->rsigma);
}

/* Plain quantize of fp32 x [M, K] into b; asserts QF_OK. */
static void quant(blk_bufs *b, const float *x, int64_t M, int64_t K, float eps, int pow2,
                  int block_2d) {
    bufs_init(b, M, K, block_2d);
    const qf_fp8_block_opts o = {eps, pow2, block_2d};
    assert_int_equal(qf_quantize_fp8_block_ref(QF_DTYPE_FP32, x, M, K, &o, &b->out), QF_OK);
}

/* Asserts every scale matrix entry outside the leading [r, c] of [R, C] is 1.0f (padding). */
static void check_pad_one(const float *s, int64_t R, int64_t C, int64_t r, int64_t c) {
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            if (i >= r || j >= c)
                assert_float_bits_equal(s[i * C + j], 1.0f);
}

/* }================================================================== */

/* {================================================================== scale */

/* numerics 2.5: amax 448 gives scale 1; 0, inf and NaN give 1. */
static void test_blk_scale_special(void **state) {
    (void)state;
    for (int p = 0; p < 2; p++) {
        assert_float_bits_equal(qf_fp8_block_scale_ref(448.0f, 0.0f, p, QF_DTYPE_BF16), 1.0f);
        assert_float_bits_equal(qf_fp8_block_scale_ref(0.0f, 0.0f, p, QF_DTYPE_BF16), 1.0f);
        assert_float_bits_equal(qf_fp8_block_scale_ref(INFINITY, 0.0f, p, QF_DTYPE_BF16), 1.0f);
        assert_float_bits_equal(qf_fp8_block_scale_ref(NAN, 0.0f, p, QF_DTYPE_FP16), 1.0f);
        assert_float_bits_equal(qf_fp8_block_scale_ref(NAN, 1.0f, p, QF_DTYPE_FP32), 1.0f);
    }
}

/* amax 1e-38: 448/a overflows fp32, so the scale is the input dtype's largest finite value
 * (bf16 0x7F7F, not FLT_MAX as current scaling), then 2^127 with power_2_scales. */
static void test_blk_scale_infinite(void **state) {
    (void)state;
    assert_true(isinf(448.0f / 1e-38f)); /* the premise */
    assert_float_bits_equal(qf_fp8_block_scale_ref(1e-38f, 0.0f, 0, QF_DTYPE_BF16), BF16_MAX);
    assert_int_equal(qf_f32_bits(BF16_MAX), 0x7F7F0000u);
    assert_float_bits_equal(qf_fp8_block_scale_ref(1e-38f, 0.0f, 1, QF_DTYPE_BF16), 0x1p127f);
    assert_float_bits_equal(qf_fp8_block_scale_ref(1e-38f, 0.0f, 0, QF_DTYPE_FP16), 65504.0f);
    assert_float_bits_equal(qf_fp8_block_scale_ref(1e-38f, 0.0f, 1, QF_DTYPE_FP16), 32768.0f);
    assert_float_bits_equal(qf_fp8_block_scale_ref(1e-38f, 0.0f, 0, QF_DTYPE_FP32), FLT_MAX);
    /* fp8_current keeps FLT_MAX for the same amax (numerics 2.2) */
    assert_float_bits_equal(qf_fp8_current_scale_ref(1e-38f, 0.0f, 0, QF_DTYPE_E4M3), FLT_MAX);
    /* scale_inv of 2^127 is 2^-127 (a subnormal), exact */
    assert_float_bits_equal(qf_fp8_scale_inv_ref(0x1p127f), 0x1p-127f);
}

/* power_2_scales off: 448/a correctly rounded; on: its power-of-two floor. Hand values: 448/3 =
 * 0x1.2aaaaap+7 (as fp8_current), floor 128; 448/5 = 89.6, floor 64; 448/0.75 = 597.33, 512. */
static void test_blk_scale_pow2(void **state) {
    (void)state;
    assert_float_bits_equal(qf_fp8_block_scale_ref(3.0f, 0.0f, 0, QF_DTYPE_BF16), 0x1.2aaaaap+7f);
    assert_float_bits_equal(qf_fp8_block_scale_ref(3.0f, 0.0f, 1, QF_DTYPE_BF16), 128.0f);
    assert_float_bits_equal(qf_fp8_block_scale_ref(5.0f, 0.0f, 0, QF_DTYPE_BF16), 89.6f);
    assert_float_bits_equal(qf_fp8_block_scale_ref(5.0f, 0.0f, 1, QF_DTYPE_BF16), 64.0f);
    assert_float_bits_equal(qf_fp8_block_scale_ref(0.75f, 0.0f, 1, QF_DTYPE_BF16), 512.0f);
    uint64_t seed = 17;
    for (int i = 0; i < 2000; i++) { /* the frexp oracle over many magnitudes */
        const float a = ldexpf(1.0f + 0.5f * qf_test_rng_uniform(&seed), (i % 200) - 100);
        for (int p = 0; p < 2; p++)
            assert_float_bits_equal(qf_fp8_block_scale_ref(a, 0.0f, p, QF_DTYPE_BF16),
                                    want_scale(a, p, BF16_MAX));
    }
}

/* a = max(amax, epsilon) before the zero check: a zero block under epsilon 4 gets 448/4. */
static void test_blk_scale_epsilon(void **state) {
    (void)state;
    assert_float_bits_equal(qf_fp8_block_scale_ref(0.0f, 4.0f, 0, QF_DTYPE_BF16), 112.0f);
    assert_float_bits_equal(qf_fp8_block_scale_ref(0.0f, 4.0f, 1, QF_DTYPE_BF16), 64.0f);
    assert_float_bits_equal(qf_fp8_block_scale_ref(8.0f, 2.0f, 0, QF_DTYPE_BF16), 56.0f);
    /* epsilon keeps a tiny amax off the infinite quotient: 448 / 0.25 */
    assert_float_bits_equal(qf_fp8_block_scale_ref(1e-38f, 0.25f, 0, QF_DTYPE_BF16), 1792.0f);
}

/* }================================================================== */

/* {================================================================== quantize */

/* A block whose amax is 448 has scale 1: its bytes are the plain E4M3 conversion; a zero block
 * has scale_inv 1 and zero data (numerics 1, 2.5). */
static void test_blk_amax_448_and_zero(void **state) {
    (void)state;
    float x[2 * 256] = {0};
    uint64_t seed = 3;
    for (int k = 0; k < 128; k++)
        x[k] = 400.0f * qf_test_rng_uniform(&seed);
    x[77] = -448.0f;
    blk_bufs b;
    for (int p = 0; p < 2; p++) {
        quant(&b, x, 2, 256, 0.0f, p, 0);
        for (int k = 0; k < 128; k++)
            assert_int_equal(b.row[k], nearest_code(QF_DTYPE_E4M3, x[k]));
        assert_int_equal(b.row[77], 0xFE);
        for (int i = 0; i < 2; i++)
            for (int m = 0; m < 2; m++) /* [kb][m]: block 0 of row 0 is x's; the rest zero */
                assert_float_bits_equal(b.rs[i * b.rc + m], 1.0f);
        for (int k = 128; k < 512; k++)
            assert_int_equal(b.row[k], 0x00);
        bufs_free(&b);
    }
}

/* M = 5, K = 130 (a partial last block of 2 along K, one partial block of 5 along M): every
 * byte, every scale_inv in its GEMM_READY place, padding 1.0; power_2_scales on and off. */
static void test_blk_partial_1d(void **state) {
    (void)state;
    enum { M = 5, K = 130 };
    float x[M * K];
    fill_blocky(x, M * K, 16, 6, 21);
    for (int p = 0; p < 2; p++) {
        blk_bufs b;
        quant(&b, x, M, K, 0.0f, p, 0);
        assert_true(b.rr == 2 && b.rc == 8 && b.cr == 1 && b.cc == 132);
        for (int m = 0; m < M; m++)
            for (int kb = 0; kb < 2; kb++) {
                const int w = kb ? 2 : 128;
                const float s = want_scale(amax_of(x + m * K + kb * 128, w, 1), p, BF16_MAX);
                assert_float_bits_equal(b.rs[kb * 8 + m], 1.0f / s);
                for (int k = kb * 128; k < kb * 128 + w; k++)
                    assert_int_equal(b.row[m * K + k], want_code(x[m * K + k], s));
            }
        check_pad_one(b.rs, 2, 8, 2, M);
        for (int k = 0; k < K; k++) { /* 128x1 blocks: one per column, 5 rows */
            const float s = want_scale(amax_of(x + k, M, K), p, BF16_MAX);
            assert_float_bits_equal(b.cs[k], 1.0f / s);
            for (int m = 0; m < M; m++)
                assert_int_equal(b.col[k * M + m], want_code(x[m * K + k], s));
        }
        check_pad_one(b.cs, 1, 132, 1, K);
        assert_int_equal(b.row[M * K], POISON); /* nothing past the data */
        bufs_free(&b);
    }
}

/* The columnwise copy of x [M, K] is the rowwise quantization of x^T with 1x128 blocks: bytes
 * and the whole scale matrix (same shape, [cdiv(M,128), roundup(K,4)]). */
static void test_blk_col_is_row_of_transpose(void **state) {
    (void)state;
    enum { M = 300, K = 200 };
    float *x = malloc(M * K * 4), *xt = malloc(M * K * 4);
    fill_blocky(x, M * K, 64, 10, 5);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            xt[k * M + m] = x[m * K + k];
    blk_bufs a, t;
    quant(&a, x, M, K, 0.0f, 1, 0);
    quant(&t, xt, K, M, 0.0f, 1, 0);
    assert_true(a.cr == t.rr && a.cc == t.rc);
    assert_memory_equal(a.col, t.row, M * K);
    assert_memory_equal(a.cs, t.rs, (size_t)(a.cr * a.cc) * 4);
    bufs_free(&a), bufs_free(&t), free(x), free(xt);
}

/* 128x128 weight tiles: one scale per tile (its amax over up to 128 x 128 elements), written to
 * the rowwise [cdiv(M,128), roundup(cdiv(K,128),4)] entry [i][j] and the columnwise
 * [cdiv(K,128), roundup(cdiv(M,128),4)] entry [j][i]; both copies use it (col = row^T). */
static void test_blk_tiles_2d(void **state) {
    (void)state;
    enum { M = 200, K = 300 };
    float *x = malloc(M * K * 4);
    fill_blocky(x, M * K, 100, 8, 9);
    blk_bufs b;
    quant(&b, x, M, K, 0.0f, 1, 1);
    assert_true(b.rr == 2 && b.rc == 4 && b.cr == 3 && b.cc == 4);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            float a = 0.0f;
            for (int m = i * 128; m < M && m < i * 128 + 128; m++)
                for (int k = j * 128; k < K && k < j * 128 + 128; k++)
                    a = fabsf(x[m * K + k]) > a ? fabsf(x[m * K + k]) : a;
            const float s = want_scale(a, 1, BF16_MAX);
            assert_float_bits_equal(b.rs[i * 4 + j], 1.0f / s);
            assert_float_bits_equal(b.cs[j * 4 + i], 1.0f / s);
            for (int m = i * 128; m < M && m < i * 128 + 128; m += 7)
                for (int k = j * 128; k < K && k < j * 128 + 128; k += 5)
                    assert_int_equal(b.row[m * K + k], want_code(x[m * K + k], s));
        }
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            assert_int_equal(b.col[k * M + m], b.row[m * K + k]);
    check_pad_one(b.rs, 2, 4, 2, 3);
    check_pad_one(b.cs, 3, 4, 3, 2);
    bufs_free(&b), free(x);
}

/* A NaN makes its own block's amax NaN: scale 1 there (scale_inv 1), the NaN element 0x7F and
 * the others cast unscaled; the other blocks of the row keep their scales. */
static void test_blk_nan(void **state) {
    (void)state;
    float x[256];
    uint64_t seed = 8;
    for (int k = 0; k < 256; k++)
        x[k] = 2.0f * qf_test_rng_uniform(&seed);
    x[200] = NAN;
    blk_bufs b;
    quant(&b, x, 1, 256, 0.0f, 1, 0);
    const float s0 = want_scale(amax_of(x, 128, 1), 1, BF16_MAX);
    assert_true(s0 > 1.0f);
    assert_float_bits_equal(b.rs[0], 1.0f / s0);
    assert_float_bits_equal(b.rs[4], 1.0f); /* [1][0]: block 1, row 0 */
    assert_int_equal(b.row[200], 0x7F);
    for (int k = 128; k < 256; k++)
        if (k != 200)
            assert_int_equal(b.row[k], nearest_code(QF_DTYPE_E4M3, x[k]));
    assert_int_equal(b.row[5], want_code(x[5], s0));
    bufs_free(&b);
}

/* amax_epsilon raises a small block's amax: a block of amax 1e-3 under epsilon 0.5 has scale
 * 448/0.5 = 896 (power of two 512), not 448/1e-3. */
static void test_blk_epsilon_quantize(void **state) {
    (void)state;
    float x[128];
    for (int k = 0; k < 128; k++)
        x[k] = 1e-3f * (float)(k % 9 - 4) / 4.0f;
    blk_bufs b;
    quant(&b, x, 1, 128, 0.5f, 1, 0);
    assert_float_bits_equal(b.rs[0], 1.0f / 512.0f);
    for (int k = 0; k < 128; k++)
        assert_int_equal(b.row[k], want_code(x[k], 512.0f));
    bufs_free(&b);
    quant(&b, x, 1, 128, 0.0f, 1, 0);
    assert_float_bits_equal(b.rs[0], 1.0f / want_scale(1e-3f, 1, BF16_MAX));
    bufs_free(&b);
}

/* The fused norm quantizes y = norm(x) exactly as the plain quantizer quantizes y given as fp32
 * (statistics from qf_norm_stats_ref, y from qf_norm_apply_ref: the norm arithmetic every
 * family shares), for both copies and both geometries; mu and rsigma are those statistics. */
static void test_blk_norm_matches_plain(void **state) {
    (void)state;
    enum { M = 131, K = 260 };
    uint16_t *x = malloc(M * K * 2), g[K], be[K];
    fill_random(x, QF_DTYPE_BF16, M * K, 0.3f, 3.0f, 41);
    fill_random(g, QF_DTYPE_BF16, K, 1.0f, 0.5f, 42);
    fill_random(be, QF_DTYPE_BF16, K, 0.0f, 0.2f, 43);
    float mu[M], rs[M], *y = malloc(M * K * 4);
    qf_norm_stats_ref(QF_NORM_LAYERNORM, QF_DTYPE_BF16, x, M, K, 1e-5f, mu, rs);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            y[m * K + k] = qf_norm_apply_ref(QF_NORM_LAYERNORM, 1, qf_bf16_to_float(x[m * K + k]),
                                             mu[m], rs[m], qf_bf16_to_float(g[k]),
                                             qf_bf16_to_float(be[k]));
    const qf_norm_src src = qf_norm_src_make(QF_NORM_LAYERNORM, 1, QF_DTYPE_BF16, x,
                                             QF_DTYPE_BF16, g, be, M, K, 1e-5f, NULL, NULL);
    for (int d2 = 0; d2 < 2; d2++) {
        blk_bufs f, p;
        bufs_init(&f, M, K, d2);
        const qf_fp8_block_opts o = {0.0f, 1, d2};
        assert_int_equal(qf_norm_quantize_fp8_block_ref(&src, &o, &f.out), QF_OK);
        quant(&p, y, M, K, 0.0f, 1, d2);
        assert_memory_equal(f.row, p.row, M * K);
        assert_memory_equal(f.col, p.col, M * K);
        assert_memory_equal(f.rs, p.rs, (size_t)(f.rr * f.rc) * 4);
        assert_memory_equal(f.cs, p.cs, (size_t)(f.cr * f.cc) * 4);
        assert_memory_equal(f.mu, mu, sizeof mu);
        assert_memory_equal(f.rsigma, rs, sizeof rs);
        bufs_free(&f), bufs_free(&p);
    }
    free(x), free(y);
}

/* }================================================================== */

/* {================================================================== layouts, dequantize, GEMM */

/* The index cuBLASLt reads for element (r, c) of a stored copy [R, C], by hand: VEC128 (1x128)
 * [c/128][r] in rows of roundup(R,4); BLK128x128 [r/128][c/128] in rows of
 * roundup(cdiv(C,128),4). */
static void test_blk_scale_index(void **state) {
    (void)state;
    int64_t r, c;
    qf_fp8_block_scale_shape(0, 5, 130, &r, &c);
    assert_true(r == 2 && c == 8);
    qf_fp8_block_scale_shape(1, 200, 300, &r, &c);
    assert_true(r == 2 && c == 4);
    qf_fp8_block_scale_shape(1, 300, 200, &r, &c);
    assert_true(r == 3 && c == 4);
    assert_int_equal(qf_fp8_block_scale_index(0, 5, 130, 3, 129), 1 * 8 + 3);
    assert_int_equal(qf_fp8_block_scale_index(0, 5, 130, 4, 127), 0 * 8 + 4);
    assert_int_equal(qf_fp8_block_scale_index(1, 200, 300, 150, 260), 1 * 4 + 2);
    assert_int_equal(qf_fp8_block_scale_index(1, 200, 300, 127, 128), 0 * 4 + 1);
}

/* Dequantization returns each value to within E4M3's half-ulp (2^-4 relative for normal codes,
 * a subnormal step of 2^-10 / scale below), and exactly for values E4M3 holds after scaling. */
static void test_blk_dequant(void **state) {
    (void)state;
    enum { M = 70, K = 300 };
    float *x = malloc(M * K * 4);
    double *d = malloc(M * K * 8);
    fill_blocky(x, M * K, 32, 12, 77);
    for (int d2 = 0; d2 < 2; d2++) {
        blk_bufs b;
        quant(&b, x, M, K, 0.0f, 1, d2);
        qf_fp8_block_dequant_ref(d2, b.row, b.rs, M, K, d);
        for (int i = 0; i < M * K; i++) {
            const double si = b.rs[qf_fp8_block_scale_index(d2, M, K, i / K, i % K)];
            assert_true(fabs(d[i] - x[i]) <= fabs((double)x[i]) / 16.0 + si * 0x1p-10);
        }
        qf_fp8_block_dequant_ref(d2, b.col, b.cs, K, M, d); /* the transpose's values */
        for (int m = 0; m < M; m += 3)
            for (int k = 0; k < K; k += 7) {
                const double si = b.cs[qf_fp8_block_scale_index(d2, K, M, k, m)];
                assert_true(fabs(d[k * M + m] - x[m * K + k]) <=
                            fabs((double)x[m * K + k]) / 16.0 + si * 0x1p-10);
            }
        bufs_free(&b);
    }
    free(x), free(d);
}

/* fprop X (1x128) x W (128x128) on small integers: every block has amax 4, scale 2^6, and every
 * v * 64 (v in -4..4) is an E4M3 value, so the GEMM of the block references equals the integer
 * GEMM exactly; with a bias. Then random data within the quantization error of an fp64 GEMM. */
static void test_blk_gemm(void **state) {
    (void)state;
    enum { M = 33, N = 130, K = 260 };
    float *x = malloc(M * K * 4), *w = malloc(N * K * 4);
    double *y = malloc(M * N * 8), bias[N];
    for (int i = 0; i < M * K; i++)
        x[i] = (float)((i * 7) % 9 - 4);
    for (int i = 0; i < N * K; i++)
        w[i] = (float)((i * 5) % 9 - 4);
    for (int n = 0; n < N; n++)
        bias[n] = 0.5 * n;
    blk_bufs a, b;
    quant(&a, x, M, K, 0.0f, 1, 0);
    quant(&b, w, N, K, 0.0f, 1, 1);
    qf_gemm_fp8_block_ref(a.row, a.rs, 0, b.row, b.rs, 1, bias, M, N, K, y);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = bias[n];
            for (int k = 0; k < K; k++)
                s += (double)x[m * K + k] * (double)w[n * K + k];
            assert_true(y[m * N + n] == s);
        }
    bufs_free(&a), bufs_free(&b);
    fill_random(x, QF_DTYPE_FP32, M * K, 0.0f, 1.0f, 5);
    fill_random(w, QF_DTYPE_FP32, N * K, 0.0f, 0.05f, 6);
    quant(&a, x, M, K, 0.0f, 1, 0);
    quant(&b, w, N, K, 0.0f, 1, 1);
    qf_gemm_fp8_block_ref(a.row, a.rs, 0, b.row, b.rs, 1, NULL, M, N, K, y);
    double num = 0.0, den = 0.0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += (double)x[m * K + k] * (double)w[n * K + k];
            num += (y[m * N + n] - s) * (y[m * N + n] - s), den += s * s;
        }
    assert_true(sqrt(num / den) < 0.05); /* E4M3: 3 mantissa bits per operand */
    bufs_free(&a), bufs_free(&b), free(x), free(w), free(y);
}

/* }================================================================== */

/* {================================================================== errors */

/* Bad arguments: QF_ERR_INVALID_ARG naming the function and the argument; nothing written. */
static void test_blk_errors(void **state) {
    (void)state;
    float x[4] = {1, 2, 3, 4};
    blk_bufs b;
    bufs_init(&b, 1, 4, 0);
    const qf_fp8_block_opts ok = {0.0f, 1, 0}, neg = {-1.0f, 1, 0}, nan = {NAN, 1, 0};
    assert_int_equal(qf_quantize_fp8_block_ref(QF_DTYPE_FP32, x, 1, 4, NULL, &b.out),
                     QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "qf_quantize_fp8_block_ref: opts and out"));
    assert_int_equal(qf_quantize_fp8_block_ref(QF_DTYPE_FP32, x, 1, 4, &neg, &b.out),
                     QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "amax_epsilon (-1) must be >= 0"));
    assert_int_equal(qf_quantize_fp8_block_ref(QF_DTYPE_FP32, x, 1, 4, &nan, &b.out),
                     QF_ERR_INVALID_ARG);
    assert_int_equal(qf_quantize_fp8_block_ref(QF_DTYPE_E4M3, x, 1, 4, &ok, &b.out),
                     QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "must be bf16, fp16 or fp32"));
    assert_int_equal(qf_quantize_fp8_block_ref(QF_DTYPE_FP32, x, 1, 0, &ok, &b.out),
                     QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "K (0) >= 1"));
    const qf_norm_src no_gamma = {.norm = QF_NORM_RMSNORM, .xdt = QF_DTYPE_FP32,
                                  .gdt = QF_DTYPE_FP32, .x = x, .M = 1, .K = 4};
    assert_int_equal(qf_norm_quantize_fp8_block_ref(&no_gamma, &ok, &b.out), QF_ERR_INVALID_ARG);
    assert_non_null(
        strstr(qf_last_error(), "qf_norm_quantize_fp8_block_ref: the norm needs gamma"));
    for (int i = 0; i < 4; i++)
        assert_int_equal(b.row[i], POISON);
    assert_float_bits_equal(b.rs[0], -7.0f);
    bufs_free(&b);
}

/* }================================================================== */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blk_scale_special),
        cmocka_unit_test(test_blk_scale_infinite),
        cmocka_unit_test(test_blk_scale_pow2),
        cmocka_unit_test(test_blk_scale_epsilon),
        cmocka_unit_test(test_blk_amax_448_and_zero),
        cmocka_unit_test(test_blk_partial_1d),
        cmocka_unit_test(test_blk_col_is_row_of_transpose),
        cmocka_unit_test(test_blk_tiles_2d),
        cmocka_unit_test(test_blk_nan),
        cmocka_unit_test(test_blk_epsilon_quantize),
        cmocka_unit_test(test_blk_norm_matches_plain),
        cmocka_unit_test(test_blk_scale_index),
        cmocka_unit_test(test_blk_dequant),
        cmocka_unit_test(test_blk_gemm),
        cmocka_unit_test(test_blk_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
