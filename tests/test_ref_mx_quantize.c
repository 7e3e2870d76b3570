/* test_ref_mx_quantize.c: CPU tests of norm + MXFP8 quantize in runtime/ref/ref_mx.c: by hand, 1D
 * blocks and 2D tiles, padding, NaN, swizzled scales, and a GEMM of quantized operands
 * (numerics 2.3, 3). */
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
typedef struct nq_bufs {
    int64_t M, K, rr, rc, cr, cc;
    uint8_t *row, *col, *srow, *scol;
    float *mu, *rs;
} nq_bufs;

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
    fill_blocky(x, M * K, 11, 12, 7);
    x[5 * K + 32] = 300.0f; /* alone in row 5's second block; in column 32's first block */
    for (int f = 0; f < 2; f++)
        for (int r = 0; r < 2; r++) {
            nq_bufs o;
            bufs_init(&o, M, K);
            nq_plain(x, k_fp8_fmts[f], (qf_scale_rounding)r, 0, QF_SCALE_LAYOUT_COMPACT, &o);
            check_1d(x, &o, k_fp8_fmts[f], (qf_scale_rounding)r);
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
    fill_blocky(xf, M * K, 13, 12, 8);
    fill_blocky(g, K, K, 12, 9);
    fill_blocky(bt, K, K, 12, 10);
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
                                       1e-5f, NULL, NULL, k_fp8_fmts[d & 1], QF_SCALE_ROUNDING_CEIL,
                                       0, QF_SCALE_LAYOUT_COMPACT, o.row, o.srow, o.col, o.scol,
                                       o.mu, o.rs);
            check_1d(y, &o, k_fp8_fmts[d & 1], QF_SCALE_ROUNDING_CEIL);
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
    fill_blocky(x, M * K, 7, 12, 11);
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
    fill_blocky(x, M * K, 32, 12, 12);
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
    fill_blocky(x, M * K, 32, 12, 13);
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
    fill_blocky(x, M * K, 29, 12, 14);
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
    fill_blocky(x, M * K, 9, 12, 15);
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

/* {================================================================== quantize, then GEMM */

/* Quantize then multiply: |gemm - exact| within the sum of per-element quantization errors
 * (half an E4M3 ulp, 2^-4 relative, or half the smallest subnormal step 2^(E-10)): checks that
 * the GEMM applies 2^+E where the quantizer applied 2^-E. */
static void test_gemm_after_quantize(void **state) {
    (void)state;
    enum { M = 4, N = 3, K = 96 };
    float x[M * K], w[N * K];
    fill_blocky(x, M * K, 32, 12, 26);
    fill_blocky(w, N * K, 32, 12, 27);
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
        cmocka_unit_test(test_gemm_after_quantize),
    };
    return cmocka_run_group_tests_name("ref_mx_quantize", tests, NULL, NULL);
}
