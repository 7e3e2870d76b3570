/* test_ref_nvfp4.c: CPU tests of the NVFP4 scalar references in runtime/ref/ref_nvfp4.c (SPEC 1, 2.4). */
#include "test_util.h"

#include <float.h>
#include <math.h>

#include "qfuse.h"
#include "ref.h"
#include "ref_mx.h"
#include "ref_nvfp4.h"

/* NOTES: expected values come from the SPEC, from hand arithmetic (worked in the comments, fp32
 * steps checked with correctly rounded fp32 arithmetic), or from an independent computation here:
 * brute-force nearest E2M1 value in double, a dense Sylvester-Hadamard product in double, the
 * Random123 known-answer vectors, and block scales recomputed from the data. */

/* {================================================================== helpers */

/* E2M1 magnitudes, typed in from the SPEC 1 table (independent of the reference's table). */
static const double k_grid[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

/* Brute force: nearest grid code to v (exact double), ties to the even code, sign of v. */
static uint8_t nearest_e2m1(double v) {
    double a = fabs(v), best_d = INFINITY;
    int best = 0;
    for (int c = 0; c < 8; c++) {
        double d = fabs(a - k_grid[c]);
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best_d = d;
            best = c;
        }
    }
    return (uint8_t)(best | (signbit(v) ? 0x8 : 0));
}

static double e2m1_value(uint8_t code) {
    return (code & 0x8) ? -k_grid[code & 7] : k_grid[code & 7];
}

enum { GUARD = 64, POISON = 0xAB };

static uint8_t *poisoned(int64_t n) {
    uint8_t *p = malloc((size_t)n + GUARD);
    memset(p, POISON, (size_t)n + GUARD);
    return p;
}

/* Output buffers of one quantize call (poisoned, with guard bytes). */
typedef struct nv_bufs {
    int64_t M, K, rr, rc, cr, cc;
    float amax_row, amax_col;
    qf_nvfp4_out out;
} nv_bufs;

static void bufs_init(nv_bufs *b, int64_t M, int64_t K) {
    b->M = M;
    b->K = K;
    qf_nvfp4_scale_shape_row(M, K, &b->rr, &b->rc);
    qf_nvfp4_scale_shape_col(M, K, &b->cr, &b->cc);
    memset(&b->out, 0, sizeof b->out);
    b->out.row = poisoned(M * K / 2);
    b->out.col = poisoned(M * K / 2);
    b->out.scale_row = poisoned(b->rr * b->rc);
    b->out.scale_col = poisoned(b->cr * b->cc);
    b->out.amax_row = &b->amax_row;
    b->out.amax_col = &b->amax_col;
    b->amax_row = b->amax_col = -1.0f;
}

static void bufs_free(nv_bufs *b) {
    const uint8_t *ends[4] = {b->out.row + b->M * b->K / 2, b->out.col + b->M * b->K / 2,
                              b->out.scale_row + b->rr * b->rc, b->out.scale_col + b->cr * b->cc};
    for (int i = 0; i < 4; i++)
        for (int g = 0; g < GUARD; g++)
            assert_int_equal(ends[i][g], POISON);
    free(b->out.row);
    free(b->out.col);
    free(b->out.scale_row);
    free(b->out.scale_col);
}

static qf_nvfp4_opts opts_default(void) {
    qf_nvfp4_opts o = {.rowwise = 1, .columnwise = 1, .rht_mask = QF_NVFP4_RHT_MASK_DEFAULT,
                       .layout = QF_SCALE_LAYOUT_COMPACT};
    return o;
}

/* Plain quantize (no norm) of fp32 x [M, K]. */
static qf_status quant_plain(const float *x, const qf_nvfp4_opts *o, nv_bufs *b) {
    qf_nvfp4_src s = {.norm = QF_NORM_NONE, .xdt = QF_DTYPE_FP32, .gdt = QF_DTYPE_FP32, .x = x,
                      .M = b->M, .K = b->K};
    return qf_quantize_nvfp4_ref(&s, o, &b->out);
}

/* Random fp32 with a magnitude 2^e per group of `group` values, e in [-8, 8]. */
static void fill_blocky(float *x, int64_t n, int64_t group, uint64_t seed) {
    float mag = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % group == 0)
            mag = ldexpf(1.0f, (int)(qf_test_rng_next(&seed) % 17) - 8);
        x[i] = mag * qf_test_rng_uniform(&seed);
    }
}

/* max |v| (no NaN in these tests). */
static float amax_of(const float *v, int64_t n, int64_t stride) {
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++)
        a = fabsf(v[i * stride]) > a ? fabsf(v[i * stride]) : a;
    return a;
}

/* Every entry of compact [R, C] outside the leading [r, c] is 0x00. */
static void check_padding(const uint8_t *s, int64_t R, int64_t C, int64_t r, int64_t c) {
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            if (i >= r || j >= c)
                assert_int_equal(s[i * C + j], 0x00);
}

/* Checks one copy: v [R, C] quantized with 1x16 blocks (compact scales, stride SC), RN. */
static void check_copy_1d(const float *v, int64_t R, int64_t C, const uint8_t *data,
                          const uint8_t *scale, int64_t SC, float amax) {
    const float s_enc = qf_nvfp4_global_enc_ref(amax);
    const float s_dec = qf_nvfp4_global_dec_ref(s_enc);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c0 = 0; c0 < C; c0 += 16) {
            uint8_t sf = qf_nvfp4_block_scale_ref(amax_of(v + r * C + c0, 16, 1), s_enc);
            assert_int_equal(scale[r * SC + c0 / 16], sf);
            float enc = qf_nvfp4_elem_enc_ref(sf, s_dec);
            for (int64_t k = c0; k < c0 + 16; k++)
                assert_int_equal(qf_e2m1_get_ref(data, r * C + k),
                                 nearest_e2m1((double)(v[r * C + k] * enc)));
        }
}

static void transpose(const float *x, int64_t M, int64_t K, float *t) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++)
            t[k * M + m] = x[m * K + k];
}

/* }================================================================== */

/* {================================================================== E2M1 */

static void test_e2m1_spec_conformance(void **state) {
    (void)state;
    /* SPEC 1: from fp32 directly. 2.500004 is above the 2.5 midpoint -> 3.0; via bf16 it would be
     * 2.5 and tie down to 2.0 (code 4). */
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
    /* SPEC 1: [1.0, 2.0] -> 0x42 (element 0 low nibble: code 2; element 1 high nibble: code 4). */
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

/* M = K = 16, x[0][0] = -8, x[0][1] = 1, the rest 0 (SPEC vllm #20578 case in a tensor). */
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
    fill_blocky(x, M * K, 16, 3);
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
    fill_blocky(x, M * K, 7, 5); /* groups of 7: rows of one tile have different magnitudes */
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
    fill_blocky(x, M * K, 16, 9);
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

/* Layernorm with given statistics == quantizing the normalized values directly (SPEC 3). */
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

/* {================================================================== RHT */

/* Dense 16x16 Sylvester Hadamard built by the Kronecker recursion H2n = [[H, H], [H, -H]]. */
static void hadamard16(double h[16][16]) {
    h[0][0] = 1.0;
    for (int n = 1; n < 16; n *= 2)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                h[i][j + n] = h[i][j];
                h[i + n][j] = h[i][j];
                h[i + n][j + n] = -h[i][j];
            }
}

/* 0.25 * H * diag(s) * x in double. */
static void rht_dense(const float *x, uint16_t mask, double *y) {
    double h[16][16];
    hadamard16(h);
    for (int n = 0; n < 16; n++) {
        double acc = 0.0;
        for (int k = 0; k < 16; k++)
            acc += h[n][k] * ((mask >> k) & 1 ? -1.0 : 1.0) * (double)x[k];
        y[n] = 0.25 * acc;
    }
}

static float bf16_round(double v) {
    return qf_bf16_to_float(qf_float_to_bf16((float)v));
}

/* Dyadic inputs (multiples of 2^-10 below 1): fp32 partial sums are exact, so the fp32 order
 * does not matter and the result equals the dense double product exactly after bf16 rounding. */
static void test_rht_dense_exact(void **state) {
    (void)state;
    uint64_t seed = 77;
    const uint16_t masks[3] = {QF_NVFP4_RHT_MASK_DEFAULT, 0x0000, 0x1234};
    for (int trial = 0; trial < 300; trial++) {
        float x[16], y[16];
        double r[16];
        for (int k = 0; k < 16; k++)
            x[k] = ldexpf((float)((int64_t)(qf_test_rng_next(&seed) % 2047) - 1023), -10);
        uint16_t mask = masks[trial % 3];
        qf_rht16_ref(x, mask, y);
        rht_dense(x, mask, r);
        for (int n = 0; n < 16; n++)
            assert_true(y[n] == bf16_round(r[n]));
    }
}

/* General fp32: within one bf16 ulp of the double result plus the fp32 summation error bound. */
static void test_rht_dense_random(void **state) {
    (void)state;
    uint64_t seed = 78;
    for (int trial = 0; trial < 2000; trial++) {
        float x[16], y[16];
        double r[16], sa = 0.0;
        for (int k = 0; k < 16; k++) {
            x[k] = ldexpf(qf_test_rng_uniform(&seed), (int)(qf_test_rng_next(&seed) % 9) - 4);
            sa += fabs((double)x[k]);
        }
        qf_rht16_ref(x, QF_NVFP4_RHT_MASK_DEFAULT, y);
        rht_dense(x, QF_NVFP4_RHT_MASK_DEFAULT, r);
        for (int n = 0; n < 16; n++) {
            double tol = ldexp(fabs(r[n]), -8) + 0.25 * 16.0 * ldexp(sa, -24);
            assert_true(fabs((double)y[n] - r[n]) <= tol);
        }
    }
}

/* H H = 16 I: with no signs the transform is its own inverse; with signs s, x = s * RHT0(RHT_s x)
 * (RHT0: all signs +1), which also pins the signs to the input side (y = 0.25 H D x). */
static void test_rht_twice(void **state) {
    (void)state;
    uint64_t seed = 79;
    for (int trial = 0; trial < 1000; trial++) {
        float x[16], y[16], z[16];
        uint16_t mask = trial % 2 ? QF_NVFP4_RHT_MASK_DEFAULT : 0;
        double ya = 0.0;
        for (int k = 0; k < 16; k++)
            x[k] = qf_test_rng_uniform(&seed);
        qf_rht16_ref(x, mask, y);
        for (int k = 0; k < 16; k++)
            ya += fabs((double)y[k]);
        qf_rht16_ref(y, 0, z);
        for (int k = 0; k < 16; k++) {
            double back = (mask >> k) & 1 ? -(double)z[k] : (double)z[k];
            /* bf16 RNE is off by at most 2^-8 relative. First rounding: 0.25 * sum |y| * 2^-8;
             * second: |z| * 2^-8; fp32 sums: tiny. */
            double tol = 0.25 * ldexp(ya, -8) + ldexp(fabs(back), -8) + 1e-6;
            assert_true(fabs(back - (double)x[k]) <= tol);
        }
    }
    /* A pattern where the sign side matters: x = e_0, mask bit 0 -> y = -0.25 * (row 0 of H)
     * = all -0.25; the inverse restores +1 only with the sign applied after H. */
    float e[16] = {1.0f}, y[16], z[16];
    qf_rht16_ref(e, 0x0001, y);
    for (int n = 0; n < 16; n++)
        assert_true(y[n] == -0.25f);
    qf_rht16_ref(y, 0, z);
    assert_true(z[0] == -1.0f);
    for (int n = 1; n < 16; n++)
        assert_true(z[n] == 0.0f);
}

static void test_rht_seed_mask(void **state) {
    (void)state;
    for (uint64_t seed = 0; seed < 8; seed++) {
        uint16_t m = qf_nvfp4_rht_mask_from_seed_ref(seed);
        for (int k = 0; k < 16; k++) { /* independent: Philox with ctr {k/4, 0, 0, 0} directly */
            const uint32_t ctr[4] = {(uint32_t)(k / 4), 0, 0, 0};
            const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
            uint32_t out[4];
            qf_philox4x32_10_ref(ctr, key, out);
            assert_int_equal((m >> k) & 1, out[k % 4] & 1);
        }
        assert_int_equal(m, qf_nvfp4_rht_mask_from_seed_ref(seed));
    }
    assert_int_not_equal(qf_nvfp4_rht_mask_from_seed_ref(1), qf_nvfp4_rht_mask_from_seed_ref(2));
}

/* Columnwise copy with RHT: groups of 16 tokens per column, amax after the transform; the rowwise
 * copy is unaffected. */
static void test_rht_pipeline(void **state) {
    (void)state;
    const int64_t M = 32, K = 32;
    float *x = malloc(M * K * sizeof *x), *t = malloc(M * K * sizeof *t);
    fill_blocky(x, M * K, 16, 31);
    nv_bufs a, b;
    bufs_init(&a, M, K);
    bufs_init(&b, M, K);
    qf_nvfp4_opts o = opts_default();
    o.rht = 1;
    o.rht_mask = 0x5A5A;
    assert_int_equal(quant_plain(x, &o, &a), QF_OK);
    o.rht = 0;
    assert_int_equal(quant_plain(x, &o, &b), QF_OK);
    assert_memory_equal(a.out.row, b.out.row, (size_t)(M * K / 2));
    assert_memory_equal(a.out.scale_row, b.out.scale_row, (size_t)(a.rr * a.rc));
    for (int64_t k = 0; k < K; k++)
        for (int64_t m0 = 0; m0 < M; m0 += 16) {
            float g[16];
            double r[16];
            for (int i = 0; i < 16; i++)
                g[i] = x[(m0 + i) * K + k];
            rht_dense(g, 0x5A5A, r);
            for (int i = 0; i < 16; i++)
                t[k * M + m0 + i] = bf16_round(r[i]);
        }
    /* Same data through the fp32 reference transform: for this data (magnitudes shared by each
     * 16-row group, so no catastrophic cancellation) it matches the dense double product
     * rounded to bf16 exactly, so the columnwise source is pinned independently. */
    float *use = malloc(M * K * sizeof *use);
    for (int64_t k = 0; k < K; k++)
        for (int64_t m0 = 0; m0 < M; m0 += 16) {
            float g[16];
            for (int i = 0; i < 16; i++)
                g[i] = x[(m0 + i) * K + k];
            qf_rht16_ref(g, 0x5A5A, use + k * M + m0);
        }
    assert_memory_equal(use, t, (size_t)(M * K) * sizeof *t);
    assert_true(a.amax_col == amax_of(use, M * K, 1));
    assert_true(a.amax_col != b.amax_col);
    check_copy_1d(use, K, M, a.out.col, a.out.scale_col, a.cc, a.amax_col);
    bufs_free(&a);
    bufs_free(&b);
    free(x);
    free(t);
    free(use);
}

/* }================================================================== */

/* {================================================================== Philox and SR */

static void test_philox_kat(void **state) {
    (void)state;
    /* Random123 kat_vectors, philox4x32 with 10 rounds. */
    static const uint32_t v[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        qf_philox4x32_10_ref(&v[i][0], &v[i][4], out);
        for (int j = 0; j < 4; j++)
            assert_int_equal(out[j], v[i][6 + j]);
    }
    /* The SR word layout: index i -> word i % 4 of counter {i/4, 0, offset lo, offset hi}. */
    const uint32_t ctr[4] = {0x12345678u / 4, 0, 0x9abcdef0u, 0x11u};
    const uint32_t key[2] = {0xdeadbeefu, 0x01234567u};
    uint32_t out[4];
    qf_philox4x32_10_ref(ctr, key, out);
    assert_int_equal(qf_nvfp4_sr_bits_ref(0x01234567deadbeefull, 0x000000119abcdef0ull,
                                          0x12345678u),
                     out[0x12345678u % 4]);
}

static void test_sr_rule(void **state) {
    (void)state;
    /* On the grid: never moves, whatever u. */
    for (int c = 0; c < 16; c++) {
        assert_int_equal(qf_e2m1_sr_ref(qf_e2m1_to_float_ref((uint8_t)c), 0u) & 7, c & 7);
        assert_int_equal(qf_e2m1_sr_ref(qf_e2m1_to_float_ref((uint8_t)c), 0xFFFFFFFFu) & 7, c & 7);
    }
    /* 2.5 is halfway between 2 and 3: up iff u < 2^31. */
    assert_int_equal(qf_e2m1_sr_ref(2.5f, 0x7FFFFFFFu), 5);
    assert_int_equal(qf_e2m1_sr_ref(2.5f, 0x80000000u), 4);
    assert_int_equal(qf_e2m1_sr_ref(-2.5f, 0u), 0xD);
    /* 4.5: frac 0.5 / 2 = 0.25 of [4, 6] -> threshold 2^30: up (6.0, code 7) iff u < 2^30. */
    assert_int_equal(qf_e2m1_sr_ref(4.5f, 0u), 7);
    assert_int_equal(qf_e2m1_sr_ref(4.5f, 0x3FFFFFFFu), 7);
    assert_int_equal(qf_e2m1_sr_ref(4.5f, 0x40000000u), 6);
    assert_int_equal(qf_e2m1_sr_ref(4.5f, 0xFFFFFFFFu), 6);
    /* Tiny values: frac * 2^32 below 1 rounds the threshold up to 1, so only u = 0 goes up. */
    assert_int_equal(qf_e2m1_sr_ref(1e-12f, 0u), 1);
    assert_int_equal(qf_e2m1_sr_ref(1e-12f, 1u), 0);
    /* Saturation and specials. */
    assert_int_equal(qf_e2m1_sr_ref(6.5f, 0u), 7);
    assert_int_equal(qf_e2m1_sr_ref(-1e9f, 0xFFFFFFFFu), 0xF);
    assert_int_equal(qf_e2m1_sr_ref(INFINITY, 0u), 7);
    assert_int_equal(qf_e2m1_sr_ref(NAN, 0u), 7);
    assert_int_equal(qf_e2m1_sr_ref(-0.0f, 0u), 0x8);
}

/* Mean of 100000 roundings (element indices 0..99999) within 3 sigma of the value. */
static void test_sr_unbiased(void **state) {
    (void)state;
    static const struct { float v, lo, hi; } cases[] = {
        {2.3f, 2.0f, 3.0f}, {0.1f, 0.0f, 0.5f}, {-4.7f, -4.0f, -6.0f}, {1.4375f, 1.0f, 1.5f},
    };
    const int n = 100000;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double sum = 0.0;
        for (int i = 0; i < n; i++)
            sum += e2m1_value(qf_e2m1_sr_ref(cases[c].v, qf_nvfp4_sr_bits_ref(42, 7, (uint64_t)i)));
        const double p = ((double)cases[c].v - cases[c].lo) / (cases[c].hi - cases[c].lo);
        const double sigma = fabs(cases[c].hi - cases[c].lo) * sqrt(p * (1.0 - p) / n);
        assert_true(fabs(sum / n - (double)cases[c].v) <= 3.0 * sigma);
    }
}

static void test_sr_reproducible(void **state) {
    (void)state;
    const int64_t M = 32, K = 64;
    float *x = malloc(M * K * sizeof *x);
    fill_blocky(x, M * K, 16, 55);
    nv_bufs a, b, c;
    bufs_init(&a, M, K);
    bufs_init(&b, M, K);
    bufs_init(&c, M, K);
    qf_nvfp4_opts o = opts_default();
    o.sr = 1;
    o.sr_seed = 1234;
    o.sr_offset = 99;
    assert_int_equal(quant_plain(x, &o, &a), QF_OK);
    assert_int_equal(quant_plain(x, &o, &b), QF_OK);
    assert_memory_equal(a.out.row, b.out.row, (size_t)(M * K / 2));
    assert_memory_equal(a.out.col, b.out.col, (size_t)(M * K / 2));
    /* Each element is the documented function of (seed, offset, index). */
    const float s_enc = qf_nvfp4_global_enc_ref(a.amax_row);
    const float s_dec = qf_nvfp4_global_dec_ref(s_enc);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            float enc = qf_nvfp4_elem_enc_ref(a.out.scale_row[m * a.rc + k / 16], s_dec);
            uint32_t u = qf_nvfp4_sr_bits_ref(1234, 99, (uint64_t)(m * K + k));
            assert_int_equal(qf_e2m1_get_ref(a.out.row, m * K + k),
                             qf_e2m1_sr_ref(x[m * K + k] * enc, u));
            enc = qf_nvfp4_elem_enc_ref(a.out.scale_col[k * a.cc + m / 16], s_dec);
            u = qf_nvfp4_sr_bits_ref(1234, 99 ^ (UINT64_C(1) << 63), (uint64_t)(k * M + m));
            assert_int_equal(qf_e2m1_get_ref(a.out.col, k * M + m),
                             qf_e2m1_sr_ref(x[m * K + k] * enc, u));
        }
    /* Scales do not depend on SR; a different seed or offset changes the data. */
    o.sr_seed = 1235;
    assert_int_equal(quant_plain(x, &o, &c), QF_OK);
    assert_memory_equal(a.out.scale_row, c.out.scale_row, (size_t)(a.rr * a.rc));
    assert_memory_not_equal(a.out.row, c.out.row, (size_t)(M * K / 2));
    assert_memory_not_equal(a.out.col, c.out.col, (size_t)(M * K / 2));
    o.sr_seed = 1234;
    o.sr_offset = 100;
    assert_int_equal(quant_plain(x, &o, &c), QF_OK);
    assert_memory_not_equal(a.out.row, c.out.row, (size_t)(M * K / 2));
    bufs_free(&a);
    bufs_free(&b);
    bufs_free(&c);
    free(x);
}

/* }================================================================== */

/* {================================================================== GEMM */

static void test_gemm(void **state) {
    (void)state;
    const int64_t M = 16, N = 32, K = 64;
    float *x = malloc(M * K * sizeof *x), *w = malloc(N * K * sizeof *w);
    fill_blocky(x, M * K, 16, 61);
    fill_blocky(w, N * K, 16, 62);
    nv_bufs qa, qb;
    bufs_init(&qa, M, K);
    bufs_init(&qb, N, K);
    qf_nvfp4_opts o = opts_default();
    o.columnwise = 0;
    assert_int_equal(quant_plain(x, &o, &qa), QF_OK);
    assert_int_equal(quant_plain(w, &o, &qb), QF_OK);
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
        cmocka_unit_test(test_rht_dense_exact),
        cmocka_unit_test(test_rht_dense_random),
        cmocka_unit_test(test_rht_twice),
        cmocka_unit_test(test_rht_seed_mask),
        cmocka_unit_test(test_rht_pipeline),
        cmocka_unit_test(test_philox_kat),
        cmocka_unit_test(test_sr_rule),
        cmocka_unit_test(test_sr_unbiased),
        cmocka_unit_test(test_sr_reproducible),
        cmocka_unit_test(test_gemm),
    };
    return cmocka_run_group_tests_name("ref_nvfp4", tests, NULL, NULL);
}
