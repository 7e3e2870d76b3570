/* test_ref_nvfp4.c: CPU tests of the NVFP4 scalar references in runtime/ref/ref_nvfp4.c: E2M1,
 * scales, quantize and the GEMM (numerics 1, 2.4). RHT, Philox and stochastic rounding:
 * test_ref_nvfp4_rht.c. */
#include "test_ref_nvfp4_util.h"

#include <float.h>
#include <math.h>

#include "qfuse.h"
#include "ref.h"
#include "ref_mx.h"
#include "ref_nvfp4.h"

/* NOTES: expected values come from the numerics contract (docs/numerics.md), from hand arithmetic
 * (worked in the comments, fp32 steps checked with correctly rounded fp32 arithmetic), or from an
 * independent computation here: brute-force nearest E2M1 value in double, a dense
 * Sylvester-Hadamard product in double, the Random123 known-answer vectors, and block scales
 * recomputed from the data. */

/* {================================================================== E2M1 */

static void test_e2m1_spec_conformance(void **state) {
    (void)state;
    /* numerics 1: from fp32 directly. 2.500004 is above the 2.5 midpoint -> 3.0; via bf16 it would
     * be 2.5 and tie down to 2.0 (code 4). */
    assert_int_equal(qf_e2m1_from_float_ref(2.500004f), 5);
    /* Midpoints go to the code with an even mantissa bit (even code). */
    static const struct { float v; uint8_t code; } ties[] = {
        {0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6},
        {-0.25f, 0x8}, {-0.75f, 0xA}, {-2.5f, 0xC}, {-5.0f, 0xE},
    };
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++)
        assert_int_equal(qf_e2m1_from_float_ref(ties[i].v), ties[i].code);
    /* Just off the midpoints. */
    assert_int_equal(qf_e2m1_from_float_ref(nextafterf(0.25f, 1.0f)), 1);
    assert_int_equal(qf_e2m1_from_float_ref(nextafterf(0.75f, 0.0f)), 1);
    assert_int_equal(qf_e2m1_from_float_ref(nextafterf(5.0f, 9.0f)), 7);
    /* Saturation (rn_sat) and signed zero. */
    assert_int_equal(qf_e2m1_from_float_ref(6.0f), 7);
    assert_int_equal(qf_e2m1_from_float_ref(1000.0f), 7);
    assert_int_equal(qf_e2m1_from_float_ref(-1000.0f), 0xF);
    assert_int_equal(qf_e2m1_from_float_ref(INFINITY), 7);
    assert_int_equal(qf_e2m1_from_float_ref(-INFINITY), 0xF);
    assert_int_equal(qf_e2m1_from_float_ref(0.0f), 0);
    assert_int_equal(qf_e2m1_from_float_ref(-0.0f), 0x8);
    assert_int_equal(qf_e2m1_from_float_ref(-0.1f), 0x8);
    /* Documented choice: NaN -> +6 (0x7), sign dropped. */
    assert_int_equal(qf_e2m1_from_float_ref(NAN), 7);
    assert_int_equal(qf_e2m1_from_float_ref(-NAN), 7);
    /* Decode: every code, sign in bit 3. */
    for (uint8_t c = 0; c < 16; c++) {
        assert_true(qf_e2m1_to_float_ref(c) == (float)e2m1_value(c));
        if ((c & 7) != 0)
            assert_int_equal(qf_e2m1_from_float_ref(qf_e2m1_to_float_ref(c)), c);
    }
}

static void test_e2m1_nearest_bruteforce(void **state) {
    (void)state;
    uint64_t seed = 11;
    for (int i = 0; i < 200000; i++) {
        float v = 7.0f * qf_test_rng_uniform(&seed);
        if (i % 4 == 0) /* values on the quarter grid hit every midpoint often */
            v = ldexpf(rintf(ldexpf(v, 2)), -2);
        assert_int_equal(qf_e2m1_from_float_ref(v), nearest_e2m1((double)v));
    }
}

static void test_e2m1_packing(void **state) {
    (void)state;
    uint8_t b[2] = {0, 0};
    /* numerics 1: [1.0, 2.0] -> 0x42 (element 0 low nibble: code 2; element 1 high nibble: code 4).
     */
    qf_e2m1_set_ref(b, 0, qf_e2m1_from_float_ref(1.0f));
    qf_e2m1_set_ref(b, 1, qf_e2m1_from_float_ref(2.0f));
    assert_int_equal(b[0], 0x42);
    qf_e2m1_set_ref(b, 2, 0xF);
    qf_e2m1_set_ref(b, 3, 0x9);
    assert_int_equal(b[1], 0x9F);
    qf_e2m1_set_ref(b, 2, 0x1); /* overwrite keeps the other nibble */
    assert_int_equal(b[1], 0x91);
    assert_int_equal(b[0], 0x42);
    assert_int_equal(qf_e2m1_get_ref(b, 0), 2);
    assert_int_equal(qf_e2m1_get_ref(b, 1), 4);
    assert_int_equal(qf_e2m1_get_ref(b, 2), 1);
    assert_int_equal(qf_e2m1_get_ref(b, 3), 9);
}

/* }================================================================== */

/* {================================================================== scales */

static void test_global_scale(void **state) {
    (void)state;
    /* vllm #20578: amax of [-8, 1] is 8 -> S_enc = 2688 / 8 = 336 exactly. */
    assert_true(qf_nvfp4_global_enc_ref(8.0f) == 336.0f);
    assert_true(qf_nvfp4_global_dec_ref(336.0f) == 1.0f / 336.0f);
    /* compressed-tensors #595: amax 0 -> 1 (finite). */
    assert_true(qf_nvfp4_global_enc_ref(0.0f) == 1.0f);
    assert_true(qf_nvfp4_global_enc_ref(2688.0f) == 1.0f);
    /* Capped at FLT_MAX: 2688 / 1e-38 overflows fp32. */
    assert_true(qf_nvfp4_global_enc_ref(1e-38f) == FLT_MAX);
    assert_true(qf_nvfp4_global_enc_ref(FLT_TRUE_MIN) == FLT_MAX);
    /* Documented choices (TE): inf amax -> quotient 0 -> 1; NaN amax -> fminf -> FLT_MAX. */
    assert_true(qf_nvfp4_global_enc_ref(INFINITY) == 1.0f);
    assert_true(qf_nvfp4_global_enc_ref(NAN) == FLT_MAX);
}

static void test_block_scale_and_enc(void **state) {
    (void)state;
    /* fl(1/6) = 0.16666667163; fl(336 * that) = 56 exactly; 8 * 56 = 448 -> E4M3 0x7E. */
    assert_int_equal(qf_nvfp4_block_scale_ref(8.0f, 336.0f), 0x7E);
    /* 1 * 56 = 56 = 1.75 * 2^5 -> E4M3 exponent field 12, mantissa 110 -> 0x66. */
    assert_int_equal(qf_nvfp4_block_scale_ref(1.0f, 336.0f), 0x66);
    /* Model-Optimizer #1397: zero block -> finite byte 0x00, never NaN; overflow saturates. */
    assert_int_equal(qf_nvfp4_block_scale_ref(0.0f, 336.0f), 0x00);
    assert_int_equal(qf_nvfp4_block_scale_ref(0.0f, 1.0f), 0x00);
    assert_int_equal(qf_nvfp4_block_scale_ref(1e30f, 336.0f), 0x7E);
    assert_int_equal(qf_nvfp4_block_scale_ref(NAN, 336.0f), 0x7F);
    /* enc: fl(448 * fl(1/336)) = 1.33333337, 1 / that = 0.75 exactly (fp32). */
    const float s_dec = qf_nvfp4_global_dec_ref(336.0f);
    assert_true(qf_nvfp4_elem_enc_ref(0x7E, s_dec) == 0.75f);
    assert_true(qf_nvfp4_elem_enc_ref(0x66, s_dec) == 6.0f);
    /* Zero scale: 1/0 = inf -> FLT_MAX, and 0 * FLT_MAX = 0 -> code 0. */
    assert_true(qf_nvfp4_elem_enc_ref(0x00, s_dec) == FLT_MAX);
    assert_int_equal(qf_e2m1_from_float_ref(0.0f * qf_nvfp4_elem_enc_ref(0x00, s_dec)), 0);
    /* GEMM alpha: amax 2688 each -> 2688^2 / 7225344 = 1; 448 each -> 1/36 rounded. */
    assert_true(qf_nvfp4_gemm_alpha_ref(2688.0f, 2688.0f) == 1.0f);
    assert_true(qf_nvfp4_gemm_alpha_ref(0.0f, 5.0f) == 0.0f);
    assert_true(fabs((double)qf_nvfp4_gemm_alpha_ref(448.0f, 448.0f) - 1.0 / 36.0) < 1e-8);
}

static void test_scale_shapes(void **state) {
    (void)state;
    int64_t r, c;
    qf_nvfp4_scale_shape_row(32, 48, &r, &c);
    assert_true(r == 128 && c == 4);
    qf_nvfp4_scale_shape_col(32, 48, &r, &c);
    assert_true(r == 128 && c == 4);
    qf_nvfp4_scale_shape_row(144, 1024, &r, &c);
    assert_true(r == 256 && c == 64);
    qf_nvfp4_scale_shape_col(144, 1024, &r, &c);
    assert_true(r == 1024 && c == 12);
    qf_nvfp4_scale_shape_row(16, 80, &r, &c);
    assert_true(r == 128 && c == 8);
}

/* }================================================================== */

/* {================================================================== quantize */

/* M = K = 16, x[0][0] = -8, x[0][1] = 1, the rest 0 (the vllm #20578 case of the numerics contract,
 * in a tensor). */
static void test_quantize_by_hand(void **state) {
    (void)state;
    float x[256] = {0};
    x[0] = -8.0f;
    x[1] = 1.0f;
    nv_bufs b;
    bufs_init(&b, 16, 16);
    qf_nvfp4_opts o = opts_default();
    assert_int_equal(quant_plain(x, &o, &b), QF_OK);
    assert_true(b.amax_row == 8.0f && b.amax_col == 8.0f);
    /* Rowwise: S_enc 336, block 0 sf 0x7E, enc 0.75: -8 * 0.75 = -6 -> 0xF; 1 * 0.75 = 0.75 is the
     * 0.5/1.0 midpoint -> even code 2. Byte 0 = 0x2F; all other rows are zero blocks. */
    assert_int_equal(b.out.row[0], 0x2F);
    for (int i = 1; i < 128; i++)
        assert_int_equal(b.out.row[i], 0x00);
    assert_int_equal(b.out.scale_row[0], 0x7E);
    for (int i = 1; i < b.rr * b.rc; i++)
        assert_int_equal(b.out.scale_row[i], 0x00);
    /* Columnwise [16, 8]: column 0 block {-8, 0, ...}: sf 0x7E, -6 -> 0xF. Column 1 block {1, 0,
     * ...}: sf 0x66, enc 6, 1 * 6 = 6 -> 7. */
    assert_int_equal(b.out.col[0], 0x0F);
    assert_int_equal(b.out.col[8], 0x07);
    for (int i = 0; i < 128; i++)
        if (i != 0 && i != 8)
            assert_int_equal(b.out.col[i], 0x00);
    assert_int_equal(b.out.scale_col[0], 0x7E);
    assert_int_equal(b.out.scale_col[4], 0x66);
    for (int i = 0; i < b.cr * b.cc; i++)
        if (i != 0 && i != 4)
            assert_int_equal(b.out.scale_col[i], 0x00);
    bufs_free(&b);
}

static void test_all_zero_tensor(void **state) {
    (void)state;
    float x[32 * 32] = {0};
    x[5] = -0.0f;
    nv_bufs b;
    bufs_init(&b, 32, 32);
    qf_nvfp4_opts o = opts_default();
    for (int rht = 0; rht < 2; rht++) {
        o.rht = rht;
        assert_int_equal(quant_plain(x, &o, &b), QF_OK);
        assert_true(b.amax_row == 0.0f && b.amax_col == 0.0f);
        for (int i = 0; i < 32 * 16; i++) {
            assert_int_equal(b.out.row[i] & 0x77, 0x00); /* +-0 only */
            assert_int_equal(b.out.col[i] & 0x77, 0x00);
        }
        for (int i = 0; i < b.rr * b.rc; i++)
            assert_int_equal(b.out.scale_row[i], 0x00); /* finite, never 0x7F */
        for (int i = 0; i < b.cr * b.cc; i++)
            assert_int_equal(b.out.scale_col[i], 0x00);
    }
    bufs_free(&b);
}

/* 1D, both copies, against primitives; padding and guards. */
static void test_layout_and_padding(void **state) {
    (void)state;
    const int64_t M = 48, K = 80;
    float *x = malloc(M * K * sizeof *x), *t = malloc(M * K * sizeof *t);
    fill_blocky(x, M * K, 16, 8, 3);
    nv_bufs b;
    bufs_init(&b, M, K);
    qf_nvfp4_opts o = opts_default();
    assert_int_equal(quant_plain(x, &o, &b), QF_OK);
    assert_true(b.amax_row == amax_of(x, M * K, 1) && b.amax_col == b.amax_row);
    check_copy_1d(x, M, K, b.out.row, b.out.scale_row, b.rc, b.amax_row);
    check_padding(b.out.scale_row, b.rr, b.rc, M, K / 16);
    transpose(x, M, K, t);
    check_copy_1d(t, K, M, b.out.col, b.out.scale_col, b.cc, b.amax_col);
    check_padding(b.out.scale_col, b.cr, b.cc, K, M / 16);
    /* Only the columnwise copy requested: the rowwise buffers are left untouched. */
    nv_bufs c;
    bufs_init(&c, M, K);
    o.rowwise = 0;
    assert_int_equal(quant_plain(x, &o, &c), QF_OK);
    assert_int_equal(c.out.row[0], POISON);
    assert_int_equal(c.out.scale_row[0], POISON);
    assert_memory_equal(c.out.col, b.out.col, (size_t)(M * K / 2));
    assert_true(c.amax_row == b.amax_row);
    bufs_free(&c);
    bufs_free(&b);
    free(x);
    free(t);
}

static void test_2d_tiles_share_scales(void **state) {
    (void)state;
    const int64_t M = 32, K = 48;
    float *x = malloc(M * K * sizeof *x);
    fill_blocky(x, M * K, 7, 8, 5); /* groups of 7: rows of one tile have different magnitudes */
    nv_bufs b;
    bufs_init(&b, M, K);
    qf_nvfp4_opts o = opts_default();
    o.block_2d = 1;
    assert_int_equal(quant_plain(x, &o, &b), QF_OK);
    const float s_enc = qf_nvfp4_global_enc_ref(amax_of(x, M * K, 1));
    const float s_dec = qf_nvfp4_global_dec_ref(s_enc);
    int differs_from_1d = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            float ta = 0.0f;
            for (int64_t i = m - m % 16; i < m - m % 16 + 16; i++)
                ta = fmaxf(ta, amax_of(x + i * K + (k - k % 16), 16, 1));
            uint8_t sf = qf_nvfp4_block_scale_ref(ta, s_enc);
            assert_int_equal(b.out.scale_row[m * b.rc + k / 16], sf);
            assert_int_equal(b.out.scale_col[k * b.cc + m / 16], sf);
            uint8_t q = nearest_e2m1((double)(x[m * K + k] * qf_nvfp4_elem_enc_ref(sf, s_dec)));
            assert_int_equal(qf_e2m1_get_ref(b.out.row, m * K + k), q);
            assert_int_equal(qf_e2m1_get_ref(b.out.col, k * M + m), q);
            differs_from_1d |= sf != qf_nvfp4_block_scale_ref(
                                         amax_of(x + m * K + (k - k % 16), 16, 1), s_enc);
        }
    assert_true(differs_from_1d); /* the data really makes 2D differ from 1D */
    check_padding(b.out.scale_row, b.rr, b.rc, M, K / 16);
    check_padding(b.out.scale_col, b.cr, b.cc, K, M / 16);
    bufs_free(&b);
    free(x);
}

static void test_swizzled_matches_compact(void **state) {
    (void)state;
    const int64_t M = 144, K = 96;
    float *x = malloc(M * K * sizeof *x);
    fill_blocky(x, M * K, 16, 8, 9);
    nv_bufs a, s;
    bufs_init(&a, M, K);
    bufs_init(&s, M, K);
    qf_nvfp4_opts o = opts_default();
    assert_int_equal(quant_plain(x, &o, &a), QF_OK);
    o.layout = QF_SCALE_LAYOUT_SWIZZLED;
    assert_int_equal(quant_plain(x, &o, &s), QF_OK);
    assert_memory_equal(a.out.row, s.out.row, (size_t)(M * K / 2));
    assert_memory_equal(a.out.col, s.out.col, (size_t)(M * K / 2));
    for (int64_t i = 0; i < a.rr; i++)
        for (int64_t j = 0; j < a.rc; j++)
            assert_int_equal(s.out.scale_row[qf_mx_swizzle_offset_ref(i, j, a.rc)],
                             a.out.scale_row[i * a.rc + j]);
    for (int64_t i = 0; i < a.cr; i++)
        for (int64_t j = 0; j < a.cc; j++)
            assert_int_equal(s.out.scale_col[qf_mx_swizzle_offset_ref(i, j, a.cc)],
                             a.out.scale_col[i * a.cc + j]);
    bufs_free(&a);
    bufs_free(&s);
    free(x);
}

/* Layernorm with given statistics == quantizing the normalized values directly (numerics 3). */
static void test_norm_composition(void **state) {
    (void)state;
    const int64_t M = 32, K = 64;
    uint16_t *x = malloc(M * K * sizeof *x), g[64], bt[64];
    float *y = malloc(M * K * sizeof *y), mu[32], rs[32], mu_o[32], rs_o[32];
    uint64_t seed = 21;
    for (int64_t i = 0; i < M * K; i++)
        x[i] = qf_float_to_bf16(3.0f * qf_test_rng_uniform(&seed) + 0.5f);
    for (int k = 0; k < K; k++) {
        g[k] = qf_float_to_bf16(qf_test_rng_uniform(&seed));
        bt[k] = qf_float_to_bf16(0.1f * qf_test_rng_uniform(&seed));
    }
    for (int m = 0; m < M; m++) {
        mu[m] = 0.5f + 0.01f * (float)m;
        rs[m] = 0.9f + 0.003f * (float)m;
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++)
            y[m * K + k] = qf_norm_apply_ref(QF_NORM_LAYERNORM, 1, qf_bf16_to_float(x[m * K + k]),
                                             mu[m], rs[m], qf_bf16_to_float(g[k]),
                                             qf_bf16_to_float(bt[k]));
    nv_bufs a, b;
    bufs_init(&a, M, K);
    bufs_init(&b, M, K);
    qf_nvfp4_opts o = opts_default();
    o.rht = 1;
    qf_nvfp4_src s = {.norm = QF_NORM_LAYERNORM, .zcg = 1, .xdt = QF_DTYPE_BF16,
                      .gdt = QF_DTYPE_BF16, .x = x, .gamma = g, .beta = bt, .M = M, .K = K,
                      .mu_in = mu, .rsigma_in = rs};
    a.out.mu = mu_o;
    a.out.rsigma = rs_o;
    assert_int_equal(qf_quantize_nvfp4_ref(&s, &o, &a.out), QF_OK);
    assert_memory_equal(mu_o, mu, sizeof mu);
    assert_memory_equal(rs_o, rs, sizeof rs);
    assert_int_equal(quant_plain(y, &o, &b), QF_OK);
    assert_memory_equal(a.out.row, b.out.row, (size_t)(M * K / 2));
    assert_memory_equal(a.out.col, b.out.col, (size_t)(M * K / 2));
    assert_memory_equal(a.out.scale_row, b.out.scale_row, (size_t)(a.rr * a.rc));
    assert_memory_equal(a.out.scale_col, b.out.scale_col, (size_t)(a.cr * a.cc));
    assert_true(a.amax_row == b.amax_row && a.amax_col == b.amax_col);
    bufs_free(&a);
    bufs_free(&b);
    free(x);
    free(y);
}

static void test_errors(void **state) {
    (void)state;
    float x[32 * 32] = {0};
    nv_bufs b;
    bufs_init(&b, 32, 32);
    qf_nvfp4_opts o = opts_default();
    qf_nvfp4_src s = {.norm = QF_NORM_NONE, .xdt = QF_DTYPE_FP32, .x = x, .M = 17, .K = 32};
    assert_int_equal(qf_quantize_nvfp4_ref(&s, &o, &b.out), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "M (17) and K (32) must be multiples of 16"));
    s.M = 32;
    s.K = 24;
    assert_int_equal(qf_quantize_nvfp4_ref(&s, &o, &b.out), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "K (24)"));
    s.K = 32;
    o.block_2d = o.rht = 1;
    assert_int_equal(qf_quantize_nvfp4_ref(&s, &o, &b.out), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "exclusive"));
    o = opts_default();
    qf_nvfp4_out none = {0};
    assert_int_equal(qf_quantize_nvfp4_ref(&s, &o, &none), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "needs its data and scale buffers"));
    s.norm = QF_NORM_RMSNORM;
    assert_int_equal(qf_quantize_nvfp4_ref(&s, &o, &b.out), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "gamma"));
    /* Nothing was written by the failed calls. */
    assert_int_equal(b.out.row[0], POISON);
    assert_int_equal(b.out.scale_row[0], POISON);
    bufs_free(&b);
}

/* }================================================================== */

/* {================================================================== GEMM */

/* The rowwise copy alone of fp32 v [R, K], quantized into fresh buffers b. */
static void quant_rowwise(const float *v, int64_t R, int64_t K, nv_bufs *b) {
    qf_nvfp4_opts o = opts_default();
    o.columnwise = 0;
    bufs_init(b, R, K);
    assert_int_equal(quant_plain(v, &o, b), QF_OK);
}

static void test_gemm(void **state) {
    (void)state;
    const int64_t M = 16, N = 32, K = 64;
    float *x = malloc(M * K * sizeof *x), *w = malloc(N * K * sizeof *w);
    fill_blocky(x, M * K, 16, 8, 61);
    fill_blocky(w, N * K, 16, 8, 62);
    nv_bufs qa, qb;
    quant_rowwise(x, M, K, &qa);
    quant_rowwise(w, N, K, &qb);
    double *y = malloc(M * N * sizeof *y), bias[32];
    for (int n = 0; n < N; n++)
        bias[n] = 0.125 * n;
    qf_gemm_nvfp4_ref(qa.out.row, qa.out.scale_row, qa.amax_row, qb.out.row, qb.out.scale_row,
                      qb.amax_row, bias, M, N, K, y);
    double err_sum = 0.0, mag_sum = 0.0;
    const double alpha = (double)qa.amax_row * qb.amax_row / (6.0 * 6.0 * 448.0 * 448.0);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0.0, exact = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                uint8_t ca = (uint8_t)((qa.out.row[(m * K + k) / 2] >> (4 * (k & 1))) & 0xF);
                uint8_t cb = (uint8_t)((qb.out.row[(n * K + k) / 2] >> (4 * (k & 1))) & 0xF);
                acc += e2m1_value(ca) * qf_e4m3_to_float_ref(qa.out.scale_row[m * qa.rc + k / 16]) *
                       e2m1_value(cb) * qf_e4m3_to_float_ref(qb.out.scale_row[n * qb.rc + k / 16]);
                exact += (double)x[m * K + k] * w[n * K + k];
                mag += fabs((double)x[m * K + k] * w[n * K + k]);
            }
            /* Exact composition (alpha within fp32 rounding of the double value). */
            assert_true(fabs(y[m * N + n] - bias[n] - acc * alpha) <= 1e-6 * fabs(acc * alpha) +
                                                                          1e-30);
            /* And it approximates the real product: each element is off by at most one E2M1
             * unit (half the step 4 -> 6, or the saturation at 6) times its block's decode
             * scale sf * S_dec ~ bamax / 6 (E4M3 rounding of sf: within 1/16). */
            double bound = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double ea = 1.1 * amax_of(x + m * K + k - k % 16, 16, 1) / 6.0;
                double eb = 1.1 * amax_of(w + n * K + k - k % 16, 16, 1) / 6.0;
                bound += ea * fabs(w[n * K + k]) + fabs(x[m * K + k]) * eb + ea * eb;
            }
            assert_true(fabs(y[m * N + n] - bias[n] - exact) <= bound);
            err_sum += fabs(y[m * N + n] - bias[n] - exact);
            mag_sum += mag;
        }
    /* In aggregate the errors mostly cancel (measured 0.042 for this data). */
    assert_true(err_sum <= 0.08 * mag_sum);
    bufs_free(&qa);
    bufs_free(&qb);
    free(x);
    free(w);
    free(y);
}

/* }================================================================== */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e2m1_spec_conformance),
        cmocka_unit_test(test_e2m1_nearest_bruteforce),
        cmocka_unit_test(test_e2m1_packing),
        cmocka_unit_test(test_global_scale),
        cmocka_unit_test(test_block_scale_and_enc),
        cmocka_unit_test(test_scale_shapes),
        cmocka_unit_test(test_quantize_by_hand),
        cmocka_unit_test(test_all_zero_tensor),
        cmocka_unit_test(test_layout_and_padding),
        cmocka_unit_test(test_2d_tiles_share_scales),
        cmocka_unit_test(test_swizzled_matches_compact),
        cmocka_unit_test(test_norm_composition),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_gemm),
    };
    return cmocka_run_group_tests_name("ref_nvfp4", tests, NULL, NULL);
}
