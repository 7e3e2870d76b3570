/* test_ref_dequant.c: the values of quantized copies (qf_mx_dequant_ref, qf_nvfp4_dequant_ref)
 * and the fp64 GEMM of dequantized operands (qf_gemm_f64_ref): each copy the quantizer
 * references write dequantizes back to its input within the format's rounding, rowwise and
 * columnwise (MXFP8's columnwise copy in place, NVFP4's transposed); 32x32 weight blocks give the
 * same values in both copies; and the dgrad and wgrad GEMMs built from the columnwise copies
 * (numerics 6) equal the fp64 products of the dequantized inputs. */
#include "test_util.h"

#include <math.h>

#include "ref_mx.h"
#include "ref_nvfp4.h"

enum { M = 64, K = 96, N = 32 };

/* ||a - x|| / ||x||: a copy's values against the fp32 tensor they quantize. */
static double rel_to(const double *a, const float *x, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - x[i]) * (a[i] - x[i]);
        den += (double)x[i] * x[i];
    }
    return sqrt(num / den);
}

/* out[i, j] = sum_l u[i * ui + l * ul] v[l * vl + j * vj] over l < L, in l order: a product read
 * with explicit strides, the independent check of the transposes. out [I, J]. */
static void strided_product(const double *u, int64_t ui, int64_t ul, const double *v, int64_t vl,
                            int64_t vj, int64_t I, int64_t J, int64_t L, double *out) {
    for (int64_t i = 0; i < I; i++)
        for (int64_t j = 0; j < J; j++) {
            double s = 0.0;
            for (int64_t l = 0; l < L; l++)
                s += u[i * ui + l * ul] * v[l * vl + j * vj];
            out[i * J + j] = s;
        }
}

static void fill(float *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++)
        x[i] = 4.0f * qf_test_rng_uniform(&seed);
}

/* MXFP8 x [M, K] -> both copies (compact scales), 1x32 or 32x32 blocks. */
typedef struct mx_copies {
    uint8_t row[M * K], col[M * K], srow[128 * 4], scol[4 * 128];
} mx_copies;

static void mx_quantize(const float *x, int block_2d, mx_copies *q) {
    memset(q, 0, sizeof *q);
    qf_norm_quantize_mxfp8_ref(QF_NORM_NONE, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32, NULL, NULL, M, K,
                               0.0f, NULL, NULL, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, block_2d,
                               QF_SCALE_LAYOUT_COMPACT, q->row, q->srow, q->col, q->scol, NULL,
                               NULL);
}

static void test_mx_copies(void **state) {
    (void)state;
    static float x[M * K];
    static mx_copies q;
    static double r[M * K], c[M * K];
    fill(x, M * K, 1);
    for (int b2 = 0; b2 < 2; b2++) {
        mx_quantize(x, b2, &q);
        qf_mx_dequant_ref(QF_DTYPE_E4M3, 0, q.row, q.srow, M, K, r);
        qf_mx_dequant_ref(QF_DTYPE_E4M3, 1, q.col, q.scol, M, K, c);
        /* E4M3 keeps 3 fraction bits: rounding is at most 1/16 of each value, less on average */
        assert_true(rel_to(r, x, M * K) < 0.04);
        assert_true(rel_to(c, x, M * K) < 0.04);
        if (b2)
            assert_memory_equal(r, c, sizeof r); /* one scale per 32x32 tile: the same values */
    }
}

/* dgrad and wgrad from the copies (numerics 6): with dy [M, N] and W [N, K] (a weight),
 * dx = dy . W reduces over N: dy's rowwise copy [M, N] and W's columnwise copy (blocks down N,
 * stored [N, K]) transposed to K-major; dW = dy^T . x reduces over M: the columnwise copies of dy
 * [M, N] and x [M, K], both transposed. Each equals the fp64 product of the copies' values. */
static void test_mx_dgrad_wgrad_from_copies(void **state) {
    (void)state;
    static float dy[M * N], w[N * K], x[M * K];
    static uint8_t dyr[M * N], dyc[M * N], dys_r[128 * 4], dys_c[4 * 128];
    static uint8_t wr[N * K], wc[N * K], ws_r[128 * 4], ws_c[4 * 128];
    static mx_copies xq;
    static double a[M * N], b[N * K], bt[K * N], y[M * K], want[M * K];
    fill(dy, M * N, 2), fill(w, N * K, 3), fill(x, M * K, 4);
    qf_norm_quantize_mxfp8_ref(QF_NORM_NONE, 0, QF_DTYPE_FP32, dy, QF_DTYPE_FP32, NULL, NULL, M, N,
                               0.0f, NULL, NULL, QF_DTYPE_E5M2, QF_SCALE_ROUNDING_CEIL, 0,
                               QF_SCALE_LAYOUT_COMPACT, dyr, dys_r, dyc, dys_c, NULL, NULL);
    qf_norm_quantize_mxfp8_ref(QF_NORM_NONE, 0, QF_DTYPE_FP32, w, QF_DTYPE_FP32, NULL, NULL, N, K,
                               0.0f, NULL, NULL, QF_DTYPE_E4M3, QF_SCALE_ROUNDING_CEIL, 0,
                               QF_SCALE_LAYOUT_COMPACT, wr, ws_r, wc, ws_c, NULL, NULL);
    mx_quantize(x, 0, &xq);
    /* dgrad: y[m, k] = sum_n dy[m, n] W[n, k] */
    qf_mx_dequant_ref(QF_DTYPE_E5M2, 0, dyr, dys_r, M, N, a);
    qf_mx_dequant_ref(QF_DTYPE_E4M3, 1, wc, ws_c, N, K, b);
    qf_transpose_f64_ref(b, N, K, bt);
    qf_gemm_f64_ref(a, bt, 1.0, NULL, M, K, N, y);
    strided_product(a, N, 1, b, K, 1, M, K, N, want); /* a [M, N] . b [N, K] */
    assert_memory_equal(y, want, sizeof(double) * M * K);
    /* wgrad: dW[n, k] = sum_m dy[m, n] x[m, k], from the columnwise copies */
    static double dyv[M * N], xv[M * K], dyt[N * M], xt[K * M], dw[N * K], dw_want[N * K];
    qf_mx_dequant_ref(QF_DTYPE_E5M2, 1, dyc, dys_c, M, N, dyv);
    qf_mx_dequant_ref(QF_DTYPE_E4M3, 1, xq.col, xq.scol, M, K, xv);
    qf_transpose_f64_ref(dyv, M, N, dyt);
    qf_transpose_f64_ref(xv, M, K, xt);
    qf_gemm_f64_ref(dyt, xt, 1.0, NULL, N, K, M, dw);
    strided_product(dyv, 1, N, xv, K, 1, N, K, M, dw_want); /* dy^T [N, M] . x [M, K] */
    assert_memory_equal(dw, dw_want, sizeof dw);
    /* and both are the products of the tensors themselves, to the formats' precision */
    static float dx32[M * K];
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            double s = 0.0;
            for (int n = 0; n < N; n++)
                s += (double)dy[m * N + n] * w[n * K + k];
            dx32[m * K + k] = (float)s;
        }
    assert_true(rel_to(y, dx32, M * K) < 0.1);
}

static void test_nvfp4_copies(void **state) {
    (void)state;
    static float x[M * K], xt[K * M];
    static uint8_t row[M * K / 2], col[K * M / 2], srow[128 * 8], scol[128 * 4];
    static double r[M * K], c[K * M];
    float amax_row = 0.0f, amax_col = 0.0f;
    fill(x, M * K, 5);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            xt[k * M + m] = x[m * K + k];
    const qf_nvfp4_src src = qf_norm_src_make(QF_NORM_NONE, 0, QF_DTYPE_FP32, x, QF_DTYPE_FP32,
                                              NULL, NULL, M, K, 0.0f, NULL, NULL);
    const qf_nvfp4_opts o = {.rowwise = 1, .columnwise = 1, .layout = QF_SCALE_LAYOUT_COMPACT};
    const qf_nvfp4_out out = {.row = row, .scale_row = srow, .col = col, .scale_col = scol,
                              .amax_row = &amax_row, .amax_col = &amax_col};
    assert_int_equal(qf_quantize_nvfp4_ref(&src, &o, &out), QF_OK);
    qf_nvfp4_dequant_ref(row, srow, M, K, r);
    qf_nvfp4_dequant_ref(col, scol, K, M, c);
    /* the copies' values times their global decode scale: x, and x^T, to E2M1's precision */
    const double dr = qf_nvfp4_global_dec_ref(qf_nvfp4_global_enc_ref(amax_row));
    const double dc = qf_nvfp4_global_dec_ref(qf_nvfp4_global_enc_ref(amax_col));
    for (int i = 0; i < M * K; i++)
        r[i] *= dr, c[i] *= dc;
    assert_true(rel_to(r, x, M * K) < 0.12);
    assert_true(rel_to(c, xt, M * K) < 0.12);
    /* the GEMM reference is the fp64 product of the values with alpha folded in */
    static double y1[M * M], y2[M * M], ra[M * K];
    qf_gemm_nvfp4_ref(row, srow, amax_row, row, srow, amax_row, NULL, M, M, K, y1);
    qf_nvfp4_dequant_ref(row, srow, M, K, ra);
    qf_gemm_f64_ref(ra, ra, (double)qf_nvfp4_gemm_alpha_ref(amax_row, amax_row), NULL, M, M, K,
                    y2);
    assert_memory_equal(y1, y2, sizeof y1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mx_copies),
        cmocka_unit_test(test_mx_dgrad_wgrad_from_copies),
        cmocka_unit_test(test_nvfp4_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
