/* test_ref_fp8_current_norm.c: CPU tests of norm + current-scaling FP8 quantize in
 * runtime/ref/ref_fp8_current.c on random shapes: against fp64 statistics, fused against two-step,
 * single rounding against TE's path (numerics 2.2). */
#include "test_ref_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

/* NOTES: expected values come from the numerics contract (docs/numerics.md), from hand arithmetic,
 * or from an independent computation in this file (brute-force nearest search, long-double
 * statistics, algebraic properties); never from the code under test itself. */

/* {================================================================== fp8_current: norm shapes */

/* A bf16 activation x [M, K] with bf16 gamma/beta [K] (gamma around 1, or around 0 when zcg). */
typedef struct cur_data {
    int64_t M, K;
    uint16_t *x, *gamma, *beta;
} cur_data;

static cur_data cur_data_make(int64_t M, int64_t K, int zcg, uint64_t seed) {
    cur_data d = {M, K, malloc((size_t)(M * K) * 2), malloc((size_t)K * 2), malloc((size_t)K * 2)};
    fill_random(d.x, QF_DTYPE_BF16, M * K, 0.3f, 3.0f, seed);
    fill_random(d.gamma, QF_DTYPE_BF16, K, zcg ? 0.0f : 1.0f, 0.5f, seed + 1);
    fill_random(d.beta, QF_DTYPE_BF16, K, 0.0f, 0.5f, seed + 2);
    return d;
}

static void cur_data_free(cur_data *d) {
    free(d->x);
    free(d->gamma);
    free(d->beta);
}

static qf_fp8_current_src cur_src(const cur_data *d, qf_norm norm, int zcg) {
    return qf_norm_src_make(norm, zcg, QF_DTYPE_BF16, d->x, QF_DTYPE_BF16, d->gamma, d->beta, d->M,
                            d->K, 1e-5f, NULL, NULL);
}

/* Every output of a current-scaling call on an [M, K] tensor, heap-allocated. */
typedef struct cur_res {
    uint8_t *row, *col;
    float amax, scale, scale_inv, *mu, *rsigma;
    qf_fp8_current_out out;
} cur_res;

static void cur_res_init(cur_res *r, int64_t M, int64_t K) {
    r->row = malloc((size_t)(M * K));
    r->col = malloc((size_t)(M * K));
    r->mu = malloc((size_t)M * sizeof(float));
    r->rsigma = malloc((size_t)M * sizeof(float));
    r->out =
        (qf_fp8_current_out){r->row, r->col, &r->amax, &r->scale, &r->scale_inv, r->mu, r->rsigma};
}

static void cur_res_free(cur_res *r) {
    free(r->row);
    free(r->col);
    free(r->mu);
    free(r->rsigma);
}

/* Half the FP8 spacing at magnitude w: 2^(max(floor(log2 w), emin) - mbits - 1). */
static double fp8_half_ulp(qf_dtype fmt, double w) {
    const int mbits = fmt == QF_DTYPE_E4M3 ? 3 : 2, emin = fmt == QF_DTYPE_E4M3 ? -6 : -14;
    int e = emin;
    if (w > 0.0) {
        (void)frexp(w, &e); /* w = f * 2^e, f in [0.5, 1): floor(log2 w) = e - 1 */
        e = e - 1 > emin ? e - 1 : emin;
    }
    return ldexp(1.0, e - mbits - 1);
}

/* Row m's statistics in long double, two passes (independent of qf_norm_stats_ref). */
static void stats_ld(const cur_data *d, qf_norm norm, int64_t m, long double *mu, long double *rs) {
    long double s = 0, ss = 0;
    for (int64_t k = 0; norm == QF_NORM_LAYERNORM && k < d->K; k++)
        s += qf_bf16_to_float(d->x[m * d->K + k]);
    *mu = s / d->K;
    for (int64_t k = 0; k < d->K; k++) {
        long double v = qf_bf16_to_float(d->x[m * d->K + k]) - *mu;
        ss += v * v;
    }
    *rs = 1.0L / sqrtl(ss / d->K + (long double)1e-5f);
}

/* y in long double for element (m, k), and the bound on |fl32(y) - y| the test allows:
 * tol = 2^-20 * ((|x| + |mu|) * rs * |g| + |b|), i.e. 16 fp32 ulps of the largest term (mu and
 * rsigma are rounded to fp32, then x - mu, the product and the fma round once each). */
static long double y_ld(const cur_data *d, qf_norm norm, int zcg, int64_t m, int64_t k,
                        long double mu, long double rs, double *tol) {
    long double x = qf_bf16_to_float(d->x[m * d->K + k]);
    long double g = (long double)qf_bf16_to_float(d->gamma[k]) + (zcg ? 1 : 0);
    long double b = norm == QF_NORM_LAYERNORM ? qf_bf16_to_float(d->beta[k]) : 0.0f;
    *tol = ldexp((double)((fabsl(x) + fabsl(mu)) * rs * fabsl(g) + fabsl(b)), -20);
    return (x - mu) * rs * g + b;
}

/* Stats and amax of the source in long double; checks r's mu, rsigma (rel 1e-5, numerics 3). */
static long double check_stats_amax_ld(const cur_data *d, qf_norm norm, int zcg, const cur_res *r) {
    long double amax = 0;
    for (int64_t m = 0; m < d->M; m++) {
        long double mu, rs;
        double tol;
        stats_ld(d, norm, m, &mu, &rs);
        if (norm == QF_NORM_LAYERNORM)
            assert_rel_close(r->mu[m], (double)mu, 1e-5);
        assert_rel_close(r->rsigma[m], (double)rs, 1e-5);
        for (int64_t k = 0; k < d->K; k++)
            amax = fmaxl(amax, fabsl(y_ld(d, norm, zcg, m, k, mu, rs, &tol)));
    }
    return amax;
}

/* Each byte of r decodes to within half an FP8 spacing (at |v| + s*tol) plus s*tol of the
 * exact v = y * s (s: r's scale, tol: y_ld's bound on fp32's error); col is row transposed.
 * Returns the count of nonzero bytes. */
static int64_t check_bytes_ld(const cur_data *d, qf_norm norm, int zcg, qf_dtype fmt,
                              const cur_res *r) {
    const int64_t M = d->M, K = d->K;
    int64_t nonzero = 0;
    for (int64_t m = 0; m < M; m++) {
        long double mu, rs;
        stats_ld(d, norm, m, &mu, &rs);
        for (int64_t k = 0; k < K; k++) {
            double tol, v = (double)(y_ld(d, norm, zcg, m, k, mu, rs, &tol) * r->scale);
            double slack = tol * r->scale, dec = qf_fp8_to_float_ref(fmt, r->row[m * K + k]);
            if (!(fabs(dec - v) <= fp8_half_ulp(fmt, fabs(v) + slack) + slack)) {
                print_error("[%lld, %lld]: decoded %.9g, exact %.9g\n", (long long)m, (long long)k,
                            dec, v);
                fail();
            }
            assert_int_equal(r->col[k * M + m], r->row[m * K + k]);
            nonzero += r->row[m * K + k] != 0;
        }
    }
    return nonzero;
}

/* The fused reference against an independent long-double computation, within stated bounds:
 * mu, rsigma, amax and scale within rel 1e-5 (numerics 3); scale_inv * scale == 1 within 2^-23;
 * the bytes as check_bytes_ld says. */
static void check_cur_vs_fp64(const cur_data *d, qf_norm norm, int zcg, qf_dtype fmt) {
    const qf_fp8_current_src src = cur_src(d, norm, zcg);
    const qf_fp8_current_opts o = {fmt, 0.0f, 0};
    cur_res r;
    cur_res_init(&r, d->M, d->K);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, &o, &r.out), QF_OK);
    long double amax = check_stats_amax_ld(d, norm, zcg, &r);
    assert_rel_close(r.amax, (double)amax, 1e-5);
    assert_rel_close(r.scale, (double)(qf_fp8_max(fmt) / amax), 1e-5);
    assert_rel_close((double)r.scale_inv * r.scale, 1.0, 0x1p-23);
    assert_true(check_bytes_ld(d, norm, zcg, fmt, &r) > d->M * d->K / 2); /* not trivial data */
    cur_res_free(&r);
}

/* Odd shapes of numerics 3 and TE's test_cast_current_scaling: 5 x 160 and 7 x 769 (odd K). */
static void test_cur_nq_vs_fp64(void **state) {
    (void)state;
    const int64_t shapes[2][2] = {{5, 160}, {7, 769}};
    for (int s = 0; s < 2; s++)
        for (int zcg = 0; zcg < 2; zcg++) {
            cur_data d = cur_data_make(shapes[s][0], shapes[s][1], zcg, 500 + (uint64_t)s);
            for (int f = 0; f < 2; f++) {
                check_cur_vs_fp64(&d, QF_NORM_LAYERNORM, zcg, k_fp8_fmts[f]);
                check_cur_vs_fp64(&d, QF_NORM_RMSNORM, zcg, k_fp8_fmts[f]);
            }
            cur_data_free(&d);
        }
}

/* y [M, K] fp32 as an unfused norm writes it (qf_norm_stats_ref, then qf_norm_apply_ref);
 * bf16 != 0 rounds each value to bf16 too (TE's norm output). Returns a malloc'ed array. */
static void *normalize_out(const cur_data *d, qf_norm norm, int zcg, int bf16) {
    const int64_t M = d->M, K = d->K;
    float *mu = malloc((size_t)M * sizeof *mu), *rs = malloc((size_t)M * sizeof *rs);
    void *y = malloc((size_t)(M * K) * sizeof(float));
    qf_norm_stats_ref(norm, QF_DTYPE_BF16, d->x, M, K, 1e-5f, mu, rs);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            float v =
                qf_norm_apply_ref(norm, zcg, qf_bf16_to_float(d->x[m * K + k]), mu[m], rs[m],
                                  qf_bf16_to_float(d->gamma[k]), qf_bf16_to_float(d->beta[k]));
            store_as(y, bf16 ? QF_DTYPE_BF16 : QF_DTYPE_FP32, m * K + k, v);
        }
    free(mu);
    free(rs);
    return y;
}

static void assert_res_equal(const cur_res *a, const cur_res *b, int64_t n) {
    assert_float_bits_equal(a->amax, b->amax);
    assert_float_bits_equal(a->scale, b->scale);
    assert_float_bits_equal(a->scale_inv, b->scale_inv);
    assert_memory_equal(a->row, b->row, (size_t)n);
    assert_memory_equal(a->col, b->col, (size_t)n);
}

/* Chunked two-step use (the header's recipe): amax per 3-row chunk, merged; one scale; then
 * qf_norm_quantize_fp8_ref per chunk with the chunk's statistics. Rowwise bytes only. */
static void two_step_chunked(const cur_data *d, qf_norm norm, int zcg, const qf_fp8_current_opts *o,
                             uint8_t *row, float *scale) {
    const int64_t M = d->M, K = d->K, chunk = 3;
    float *mu = malloc((size_t)M * sizeof *mu), *rs = malloc((size_t)M * sizeof *rs), a = 0.0f;
    for (int64_t m0 = 0; m0 < M; m0 += chunk) {
        qf_fp8_current_src s = cur_src(d, norm, zcg);
        s.x = d->x + m0 * K, s.M = M - m0 < chunk ? M - m0 : chunk;
        float ca;
        assert_int_equal(qf_fp8_current_amax_ref(&s, &ca, mu + m0, rs + m0), QF_OK);
        a = qf_amax_merge(a, ca);
    }
    *scale = qf_fp8_current_scale_ref(a, o->amax_epsilon, o->power_2_scales, o->fmt);
    for (int64_t m0 = 0; m0 < M; m0 += chunk)
        qf_norm_quantize_fp8_ref(norm, zcg, QF_DTYPE_BF16, d->x + m0 * K, QF_DTYPE_BF16, d->gamma,
                                 d->beta, M - m0 < chunk ? M - m0 : chunk, K, 1e-5f,
                                 norm == QF_NORM_LAYERNORM ? mu + m0 : NULL, rs + m0, *scale,
                                 o->fmt, row + m0 * K, NULL, NULL, NULL, NULL);
    free(mu);
    free(rs);
}

/* The fused reference is byte-identical to (1) normalizing into an fp32 buffer, then the plain
 * current-scaling quantize of that buffer, and (2) the chunked two-step API. */
static void check_cur_two_step(const cur_data *d, qf_norm norm, int zcg,
                               const qf_fp8_current_opts *o) {
    const int64_t n = d->M * d->K;
    const qf_fp8_current_src src = cur_src(d, norm, zcg);
    cur_res fused, plain;
    cur_res_init(&fused, d->M, d->K);
    cur_res_init(&plain, d->M, d->K);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, o, &fused.out), QF_OK);
    float *y = normalize_out(d, norm, zcg, 0);
    assert_int_equal(qf_quantize_fp8_current_ref(QF_DTYPE_FP32, y, d->M, d->K, o, &plain.out),
                     QF_OK);
    assert_res_equal(&fused, &plain, n);
    float scale;
    two_step_chunked(d, norm, zcg, o, plain.row, &scale);
    assert_float_bits_equal(scale, fused.scale);
    assert_memory_equal(plain.row, fused.row, (size_t)n);
    free(y);
    cur_res_free(&fused);
    cur_res_free(&plain);
}

static void test_cur_nq_fused_vs_two_step(void **state) {
    (void)state;
    const int64_t shapes[2][2] = {{5, 160}, {7, 769}};
    const qf_fp8_current_opts opts[3] = {
        {QF_DTYPE_E4M3, 0.0f, 0}, {QF_DTYPE_E5M2, 0.0f, 1}, {QF_DTYPE_E4M3, 100.0f, 1}};
    for (int s = 0; s < 2; s++)
        for (int zcg = 0; zcg < 2; zcg++) {
            cur_data d = cur_data_make(shapes[s][0], shapes[s][1], zcg, 600 + (uint64_t)s);
            for (int i = 0; i < 3; i++) {
                check_cur_two_step(&d, QF_NORM_LAYERNORM, zcg, &opts[i]);
                check_cur_two_step(&d, QF_NORM_RMSNORM, zcg, &opts[i]);
            }
            cur_data_free(&d);
        }
}

/* numerics 2.2's note: qfuse rounds y once, from fp32; TE writes the norm output in bf16 and casts
 * that, rounding twice. Where the bytes differ, that rounding is the only cause.
 * By hand: rmsnorm of x = {1, 1} with eps 0 has rsigma 1/sqrt(1) = 1 exactly, so y = gamma =
 * {448, 1.0625001} (fp32 gamma). amax 448 -> scale 1 both ways. qfuse: 1.0625001 is just above
 * the midpoint 1.0625 of 1.0 and 1.125 -> 0x39 (numerics 1 conformance byte). TE: bf16(1.0625001)
 * = 1.0625 (7 fraction bits), now a tie -> even 1.0 = 0x38. */
static void test_cur_nq_single_rounding_vs_te(void **state) {
    (void)state;
    const uint16_t x[2] = {0x3F80, 0x3F80}; /* bf16 1.0 */
    const float g[2] = {448.0f, 1.0625001f};
    const qf_fp8_current_src src = {.norm = QF_NORM_RMSNORM,
                                    .xdt = QF_DTYPE_BF16,
                                    .gdt = QF_DTYPE_FP32,
                                    .x = x,
                                    .gamma = g,
                                    .M = 1,
                                    .K = 2,
                                    .eps = 0.0f};
    const qf_fp8_current_opts o = {QF_DTYPE_E4M3, 0.0f, 0};
    cur_bufs q, te;
    cur_bufs_init(&q);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, &o, &q.out), QF_OK);
    assert_true(q.rsigma[0] == 1.0f && q.amax == 448.0f && q.scale == 1.0f);
    assert_bytes(q.row, (const uint8_t[2]){0x7E, 0x39}, 2);
    const uint16_t y_bf16[2] = {qf_float_to_bf16(448.0f), qf_float_to_bf16(1.0625001f)};
    assert_int_equal(y_bf16[1], 0x3F88); /* 1.0625 */
    cur_plain(&te, QF_DTYPE_BF16, y_bf16, 1, 2, QF_DTYPE_E4M3, 0.0f, 0);
    assert_true(te.amax == 448.0f && te.scale == 1.0f);
    assert_bytes(te.row, (const uint8_t[2]){0x7E, 0x38}, 2);
}

/* On a real layernorm (7 x 769, bf16 x) the two paths of the test above disagree on some bytes
 * (that rounding being the only difference); TE's amax is the bf16-rounded one (rounding is
 * monotonic: the max of the rounded values is the rounded max). */
static void test_cur_nq_te_path_differs(void **state) {
    (void)state;
    const qf_fp8_current_opts o = {QF_DTYPE_E4M3, 0.0f, 0};
    cur_data d = cur_data_make(7, 769, 0, 700);
    const qf_fp8_current_src src = cur_src(&d, QF_NORM_LAYERNORM, 0);
    cur_res a, b;
    cur_res_init(&a, 7, 769);
    cur_res_init(&b, 7, 769);
    assert_int_equal(qf_norm_quantize_fp8_current_ref(&src, &o, &a.out), QF_OK);
    uint16_t *yb = normalize_out(&d, QF_NORM_LAYERNORM, 0, 1);
    assert_int_equal(qf_quantize_fp8_current_ref(QF_DTYPE_BF16, yb, 7, 769, &o, &b.out), QF_OK);
    assert_float_bits_equal(b.amax, qf_bf16_to_float(qf_float_to_bf16(a.amax)));
    int64_t differ = 0;
    for (int64_t i = 0; i < 7 * 769; i++)
        differ += a.row[i] != b.row[i];
    print_message("fp8_current 7 x 769: %lld of %d bytes differ from norm -> bf16 -> cast (as "
                  "expected: the fused path rounds once)\n",
                  (long long)differ, 7 * 769);
    assert_true(differ > 0);
    free(yb);
    cur_res_free(&a);
    cur_res_free(&b);
    cur_data_free(&d);
}

/* }================================================================== */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cur_nq_vs_fp64),
        cmocka_unit_test(test_cur_nq_fused_vs_two_step),
        cmocka_unit_test(test_cur_nq_single_rounding_vs_te),
        cmocka_unit_test(test_cur_nq_te_path_differs),
    };
    return cmocka_run_group_tests_name("ref_fp8_current_norm", tests, NULL, NULL);
}
