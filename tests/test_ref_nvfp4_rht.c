/* test_ref_nvfp4_rht.c: CPU tests of the NVFP4 random Hadamard transform, Philox and stochastic
 * rounding references in runtime/ref/ref_nvfp4.c (numerics 2.4). */
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
    fill_blocky(x, M * K, 16, 8, 31);
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
    fill_blocky(x, M * K, 16, 8, 55);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rht_dense_exact),
        cmocka_unit_test(test_rht_dense_random),
        cmocka_unit_test(test_rht_twice),
        cmocka_unit_test(test_rht_seed_mask),
        cmocka_unit_test(test_rht_pipeline),
        cmocka_unit_test(test_philox_kat),
        cmocka_unit_test(test_sr_rule),
        cmocka_unit_test(test_sr_unbiased),
        cmocka_unit_test(test_sr_reproducible),
    };
    return cmocka_run_group_tests_name("ref_nvfp4_rht", tests, NULL, NULL);
}
