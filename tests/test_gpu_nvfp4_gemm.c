/* test_gpu_nvfp4_gemm.c: the NVFP4 block-scaled GEMM (qf_gemm, SPEC 2.4) against the fp64
 * reference qf_gemm_nvfp4_ref: ragged shapes (partial tiles in M, N and K), bias on and off,
 * padded scale bytes poisoned two ways (y must be bit-identical), E4M3 scales over their whole
 * finite range (negative and subnormal ones included), a NaN scale reaching exactly its row or
 * column, and the TFLOP/s at 8192^3 next to bf16 cuBLASLt measured in the same run. y is
 * poisoned with NaN before every launch. The Blackwell path's cuBLASLt descriptors build without
 * a GPU; the rest skips cleanly. Argument checks: tests/test_api_errors.c.
 *
 * Error bound, per element: the kernel's products are exact (deq values are f16 numbers) and are
 * summed in fp32 by the tensor cores, one k16 MMA at a time into the accumulator: at most
 * about K/16 + 16 roundings of 2^-24 relative to the running sum, so |acc - exact| <=
 * (K/16 + 16) 2^-23 S with S = alpha sum_k |deq(A) deq(B)| (computed by the reference on the
 * absolute values). Then one fmaf and one rounding to bf16 (2^-9 relative). We accept
 * |y - ref| <= 2^-8 |ref| + (K/16 + 16) 2^-22 S + 2^-24 |bias|: twice each term, so that a wrong
 * scale, a lost block or a swapped element (errors of the size of a whole product) fails. The
 * whole-matrix ||y - ref|| / ||ref|| must also stay below 4e-3 (the MXFP8 test's bound: bf16
 * output rounding, RMS 2^-9/sqrt(3) ~ 1.1e-3, plus fp32 accumulation). */
#include "test_gpu_gemm.h"

#include <math.h>
#include <stdio.h>

#include "ctx.h"
#include "qfuse.h"
#include "ref.h"
#include "ref_nvfp4.h"


static const char *const kRecipe = "nvfp4";
static const double kTol = 4e-3; /* ||y - ref|| / ||ref|| */
static int g_cases;

/* ==================================================================== problems */

/* Scale bytes of a case: uniform in [lo, hi] (never 0x7F/0xFF unless set by hand); with `neg`,
 * each byte gets the sign bit with probability 1/2. */
typedef struct scale_range {
    int lo, hi, neg;
} scale_range;

/* One GEMM: host operands and scales, and their device copies. */
typedef struct gemm_case {
    int64_t M, N, K, kb, sc, ra, rb; /* kb = K/2 bytes per row; sc scale row stride; ra, rb rows */
    float amax_a, amax_b;
    uint8_t *a, *b, *as, *bs;     /* host */
    uint16_t *bias;               /* host bf16 [N] or NULL */
    void *da, *db, *das, *dbs, *dbias, *dy, *damax; /* damax: device fp32 [2] = {amax_a, amax_b} */
} gemm_case;

static void fill_bytes(uint8_t *p, int64_t n, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n / 4096 + 1; r++) {
        uint64_t s = seed ^ ((uint64_t)r * 0x9E3779B97F4A7C15ull);
        for (int64_t i = r * 4096; i < n && i < (r + 1) * 4096; i++)
            p[i] = (uint8_t)qf_test_rng_next(&s);
    }
}

/* Real entries (rows < real, columns < nb) from range; padding = pad. */
static void fill_scales(uint8_t *p, int64_t R, int64_t real, int64_t sc, int64_t nb,
                        scale_range range, int pad, uint64_t seed) {
    uint64_t s = seed;
    const uint64_t span = (uint64_t)(range.hi - range.lo + 1);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < sc; j++) {
            if (r >= real || j >= nb) {
                p[r * sc + j] = (uint8_t)pad;
                continue;
            }
            const uint64_t x = qf_test_rng_next(&s);
            p[r * sc + j] = (uint8_t)((range.lo + (int)(x % span)) | (range.neg && (x >> 40 & 1)
                                                                          ? 0x80 : 0));
        }
}


/* Random packed operands, scales from range (padding 0xFF), amaxes as a quantizer could give. */
static gemm_case case_make(int64_t M, int64_t N, int64_t K, int bias, scale_range range,
                           uint64_t seed) {
    gemm_case c = {.M = M, .N = N, .K = K, .amax_a = 3.75f, .amax_b = 0.2109375f};
    c.kb = K / 2;
    c.sc = (K / 16 + 3) / 4 * 4;
    c.ra = (M + 127) / 128 * 128;
    c.rb = (N + 127) / 128 * 128;
    c.a = malloc((size_t)(M * c.kb));
    c.b = malloc((size_t)(N * c.kb));
    c.as = malloc((size_t)(c.ra * c.sc));
    c.bs = malloc((size_t)(c.rb * c.sc));
    assert_true(c.a && c.b && c.as && c.bs);
    fill_bytes(c.a, M * c.kb, seed);
    fill_bytes(c.b, N * c.kb, seed + 1);
    fill_scales(c.as, c.ra, M, c.sc, K / 16, range, 0xFF, seed + 2);
    fill_scales(c.bs, c.rb, N, c.sc, K / 16, range, 0xFF, seed + 3);
    if (bias) {
        uint64_t s = seed + 4;
        c.bias = malloc((size_t)N * 2);
        for (int64_t n = 0; n < N; n++)
            c.bias[n] = qf_float_to_bf16(4.0f * qf_test_rng_uniform(&s));
    }
    return c;
}

static void case_upload(gemm_case *c) {
    const float amax[2] = {c->amax_a, c->amax_b};
    c->da = dev_copy(c->a, (size_t)(c->M * c->kb));
    c->db = dev_copy(c->b, (size_t)(c->N * c->kb));
    c->das = dev_copy(c->as, (size_t)(c->ra * c->sc));
    c->dbs = dev_copy(c->bs, (size_t)(c->rb * c->sc));
    c->dbias = c->bias ? dev_copy(c->bias, (size_t)c->N * 2) : NULL;
    c->dy = dev_copy(NULL, (size_t)(c->M * c->N) * 2);
    c->damax = dev_copy(amax, sizeof amax);
}

static void case_free(gemm_case *c) {
    void *d[] = {c->da, c->db, c->das, c->dbs, c->dbias, c->dy, c->damax};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        cudaFree(d[i]);
    free(c->a), free(c->b), free(c->as), free(c->bs), free(c->bias);
}

/* Rewrites only the padding entries of both device scale matrices with byte v. */
static void case_repad(const gemm_case *c, int v) {
    uint8_t *t = malloc((size_t)((c->ra > c->rb ? c->ra : c->rb) * c->sc));
    const uint8_t *h[2] = {c->as, c->bs};
    void *d[2] = {c->das, c->dbs};
    const int64_t R[2] = {c->ra, c->rb}, real[2] = {c->M, c->N};
    for (int o = 0; o < 2; o++) {
        memset(t, v, (size_t)(R[o] * c->sc));
        for (int64_t r = 0; r < real[o]; r++)
            memcpy(t + r * c->sc, h[o] + r * c->sc, (size_t)(c->K / 16));
        CK(cudaMemcpy(d[o], t, (size_t)(R[o] * c->sc), cudaMemcpyHostToDevice));
    }
    free(t);
}

/* ==================================================================== running and checking */

static qf_status case_run(qf_ctx_t *ctx, const gemm_case *c) {
    qf_tensor a = {.data = c->da, .dtype = QF_DTYPE_E2M1, .ndim = 2, .dims = {c->M, c->kb}};
    qf_tensor b = {.data = c->db, .dtype = QF_DTYPE_E2M1, .ndim = 2, .dims = {c->N, c->kb}};
    qf_tensor as = {.data = c->das, .dtype = QF_DTYPE_E4M3, .ndim = 2, .dims = {c->ra, c->sc}};
    qf_tensor bs = {.data = c->dbs, .dtype = QF_DTYPE_E4M3, .ndim = 2, .dims = {c->rb, c->sc}};
    qf_tensor ama = {.data = c->damax, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}};
    qf_tensor amb = {.data = (float *)c->damax + 1, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}};
    qf_tensor bias = {.data = c->dbias, .dtype = QF_DTYPE_BF16, .ndim = 1, .dims = {c->N}};
    qf_tensor y = {.data = c->dy, .dtype = QF_DTYPE_BF16, .ndim = 2, .dims = {c->M, c->N}};
    const qf_quantized qa = gemm_rowwise_q(&a, &as, &ama, QF_SCALE_LAYOUT_COMPACT);
    const qf_quantized qb = gemm_rowwise_q(&b, &bs, &amb, QF_SCALE_LAYOUT_COMPACT);
    return gemm_rowwise(ctx, kRecipe, &qa, &qb, c->dbias ? &bias : NULL, &y);
}

/* y (poisoned with NaN first, so an unwritten element cannot pass) downloaded to the host. */
static uint16_t *case_y(qf_ctx_t *ctx, const gemm_case *c) {
    CK(cudaMemset(c->dy, 0xFF, (size_t)(c->M * c->N) * 2));
    QF_OK_OR_FAIL(case_run(ctx, c));
    CK(cudaDeviceSynchronize());
    uint16_t *y = malloc((size_t)(c->M * c->N) * 2);
    assert_non_null(y);
    CK(cudaMemcpy(y, c->dy, (size_t)(c->M * c->N) * 2, cudaMemcpyDeviceToHost));
    return y;
}

/* The comparison of one case: Frobenius ratio, non-finite count and the first element outside
 * the per-element bound (row-major order over the checked rows). */
typedef struct case_err {
    double num, den;
    int64_t nonfinite, bad, bad_m, bad_n;
    double bad_ref, bad_got, bad_lim;
} case_err;

/* Per-element check of one row block [m, n0 .. n0+w): ref, and S from the absolute values. */
static void check_block(const gemm_case *c, const uint16_t *y, const double *bias, int64_t m,
                        int64_t n0, int64_t w, case_err *e) {
    double ref[256], sabs[256];
    uint8_t *aa = malloc((size_t)c->kb), *ab = malloc((size_t)(w * c->kb));
    uint8_t *sa = malloc((size_t)c->sc), *sb = malloc((size_t)(w * c->sc));
    qf_gemm_nvfp4_ref(c->a + m * c->kb, c->as + m * c->sc, c->amax_a, c->b + n0 * c->kb,
                      c->bs + n0 * c->sc, c->amax_b, bias ? bias + n0 : NULL, 1, w, c->K, ref);
    for (int64_t i = 0; i < c->kb; i++)
        aa[i] = c->a[m * c->kb + i] & 0x77;
    for (int64_t i = 0; i < w * c->kb; i++)
        ab[i] = c->b[n0 * c->kb + i] & 0x77;
    for (int64_t i = 0; i < c->sc; i++)
        sa[i] = c->as[m * c->sc + i] & 0x7F;
    for (int64_t i = 0; i < w * c->sc; i++)
        sb[i] = c->bs[n0 * c->sc + i] & 0x7F;
    qf_gemm_nvfp4_ref(aa, sa, c->amax_a, ab, sb, c->amax_b, NULL, 1, w, c->K, sabs);
    for (int64_t j = 0; j < w; j++) {
        const double v = qf_bf16_to_float(y[m * c->N + n0 + j]);
        const double bj = bias ? fabs(bias[n0 + j]) : 0.0;
        const double lim = ldexp(fabs(ref[j]), -8) + (double)(c->K / 16 + 16) *
                           ldexp(sabs[j], -22) + ldexp(bj, -24);
        e->nonfinite += !isfinite(v);
        e->num += (v - ref[j]) * (v - ref[j]);
        e->den += ref[j] * ref[j];
        if (!(fabs(v - ref[j]) <= lim) && (e->bad++ == 0 || m * c->N + n0 + j < e->bad_m * c->N +
                                                                            e->bad_n)) {
            e->bad_m = m, e->bad_n = n0 + j;
            e->bad_ref = ref[j], e->bad_got = v, e->bad_lim = lim;
        }
    }
    free(aa), free(ab), free(sa), free(sb);
}

/* Checks rows[0..nr) (every row when rows is NULL) against the reference, on all cores in
 * blocks of one row x 256 columns. */
static case_err case_check(const gemm_case *c, const uint16_t *y, const int64_t *rows,
                           int64_t nr) {
    const int64_t R = rows ? nr : c->M, CB = 256, nblk = (c->N + CB - 1) / CB;
    double *bias = NULL;
    case_err total = {0};
    if (c->bias) {
        bias = malloc((size_t)c->N * sizeof(double));
        for (int64_t n = 0; n < c->N; n++)
            bias[n] = qf_bf16_to_float(c->bias[n]);
    }
#pragma omp parallel
    {
        case_err e = {0};
#pragma omp for schedule(dynamic)
        for (int64_t i = 0; i < R * nblk; i++) {
            const int64_t m = rows ? rows[i / nblk] : i / nblk, n0 = i % nblk * CB;
            check_block(c, y, bias, m, n0, c->N - n0 < CB ? c->N - n0 : CB, &e);
        }
#pragma omp critical
        {
            total.num += e.num, total.den += e.den, total.nonfinite += e.nonfinite;
            if (e.bad && (total.bad == 0 || e.bad_m * c->N + e.bad_n <
                                                total.bad_m * c->N + total.bad_n)) {
                total.bad_m = e.bad_m, total.bad_n = e.bad_n;
                total.bad_ref = e.bad_ref, total.bad_got = e.bad_got, total.bad_lim = e.bad_lim;
            }
            total.bad += e.bad;
        }
    }
    free(bias);
    return total;
}

static int ctx_or_skip(qf_ctx_t **ctx) {
    if (!qf_test_have_gpu())
        return 0;
    QF_OK_OR_FAIL(qf_ctx_init(ctx, 0));
    return 1;
}

/* Prints the result of a check and fails with the first bad element. */
static void report(const gemm_case *c, const char *what, const case_err *e, int same) {
    const double rel = e->den > 0 ? sqrt(e->num / e->den) : sqrt(e->num);
    printf("nvfp4_gemm %-12s M=%-5lld N=%-5lld K=%-5lld bias=%d: rel err %.3e, non-finite %lld, "
           "outside bound %lld, padding 0xFF vs 0x00 bit-identical %s\n", what, (long long)c->M,
           (long long)c->N, (long long)c->K, c->bias != NULL, rel, (long long)e->nonfinite,
           (long long)e->bad, same ? "yes" : "NO");
    if (e->bad)
        fail_msg("nvfp4_gemm %s M=%lld N=%lld K=%lld: %lld elements outside the bound; first "
                 "y[%lld, %lld] = %.9g, expected %.9g (|diff| %.3g > bound %.3g)", what,
                 (long long)c->M, (long long)c->N, (long long)c->K, (long long)e->bad,
                 (long long)e->bad_m, (long long)e->bad_n, e->bad_got, e->bad_ref,
                 fabs(e->bad_got - e->bad_ref), e->bad_lim);
    if (!(rel < kTol) || e->nonfinite || !same)
        fail_msg("nvfp4_gemm %s M=%lld N=%lld K=%lld: rel err %.3e (limit %.1e), %lld non-finite, "
                 "padding bit-identical %s", what, (long long)c->M, (long long)c->N,
                 (long long)c->K, rel, kTol, (long long)e->nonfinite, same ? "yes" : "NO");
}

/* Checks one case against the reference, then again with the padding poisoned 0x00 instead of
 * 0xFF (NaN in E4M3): y must not move by a bit (TE PR #3070). */
static void check_case(qf_ctx_t *ctx, gemm_case *c, const char *what) {
    case_upload(c);
    uint16_t *y = case_y(ctx, c);
    case_err e = case_check(c, y, NULL, 0);
    case_repad(c, 0x00);
    uint16_t *y0 = case_y(ctx, c);
    int64_t first_diff = -1;
    for (int64_t i = 0; i < c->M * c->N && first_diff < 0; i++)
        if (y[i] != y0[i])
            first_diff = i;
    report(c, what, &e, first_diff < 0);
    if (first_diff >= 0)
        fail_msg("padding changed y[%lld, %lld]: 0x%04x with 0xFF padding, 0x%04x with 0x00",
                 (long long)(first_diff / c->N), (long long)(first_diff % c->N), y[first_diff],
                 y0[first_diff]);
    free(y);
    free(y0);
    g_cases++;
}

/* ==================================================================== GPU tests */

static const scale_range kRealistic = {0x20, 0x7E, 0}; /* 2^-3 .. 448, as a quantizer gives */

/* M, N in {1, 17, 100, 129} (partial tiles), K in {32, 64, 96, 1024, 8192} (partial k-tiles,
 * scale rows of 2 and 6 real blocks next to padding), bias on and off; then several tiles and
 * more than one raster group of tile rows. */
static void test_gemm_shapes(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    static const int64_t mn[][2] = {{1, 1}, {17, 100}, {100, 17}, {129, 129}, {1, 129}, {17, 1}};
    static const int64_t ks[] = {32, 64, 96, 1024, 8192};
    uint64_t seed = 100;
    for (size_t i = 0; i < sizeof mn / sizeof mn[0]; i++)
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            gemm_case c = case_make(mn[i][0], mn[i][1], ks[j], (int)((i + j) & 1), kRealistic,
                                    seed++);
            check_case(ctx, &c, "shape");
            case_free(&c);
        }
    static const int64_t big[][4] = {
        {1100, 260, 96, 1}, {257, 1000, 544, 0}, {1024, 1024, 1024, 1}, {300, 130, 2080, 0}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        gemm_case c = case_make(big[i][0], big[i][1], big[i][2], (int)big[i][3], kRealistic,
                                seed++);
        check_case(ctx, &c, "tiles");
        case_free(&c);
    }
    qf_ctx_free(ctx);
}

/* Every finite E4M3 scale byte, positive and negative (0x00 .. 0x7E | sign), with zero amaxes in
 * one operand too (alpha 0: y = bias exactly). */
static void test_gemm_scale_range(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    const scale_range all = {0x00, 0x7E, 1};
    gemm_case c = case_make(200, 136, 1024, 1, all, 7);
    check_case(ctx, &c, "all scales");
    case_free(&c);
    c = case_make(64, 48, 256, 1, all, 8);
    c.amax_b = 0.0f;
    check_case(ctx, &c, "alpha 0");
    case_free(&c);
    qf_ctx_free(ctx);
}

/* Only the E4M3 subnormal scales 2^-9 and 2^-8: most tensor-core operands are then f16
 * subnormals (deq x 2^-7 < 2^-14 when |E2M1| < 4 at 2^-9, < 2 at 2^-8), so y is right only if the
 * MMA keeps f16 subnormals (flushed, most products would vanish: far outside the bound). */
static void test_gemm_subnormal_scales(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    const scale_range sub = {0x01, 0x02, 0};
    gemm_case c = case_make(130, 72, 512, 0, sub, 9);
    c.amax_a = 2688.0f, c.amax_b = 2688.0f; /* alpha = 1: y of order 1e-4, well inside bf16 */
    check_case(ctx, &c, "subnormal");
    case_free(&c);
    qf_ctx_free(ctx);
}

/* Counts NaNs where expected (row nan_m or column nan_n) and finite values elsewhere. */
static int64_t nan_mismatches(const gemm_case *c, const uint16_t *y, int64_t nan_m,
                              int64_t nan_n, int64_t *first) {
    int64_t wrong = 0;
    *first = -1;
    for (int64_t m = 0; m < c->M; m++)
        for (int64_t n = 0; n < c->N; n++) {
            const int want = m == nan_m || n == nan_n;
            if (want != isnan(qf_bf16_to_float(y[m * c->N + n])) && wrong++ == 0)
                *first = m * c->N + n;
        }
    return wrong;
}

/* A NaN scale byte (0x7F or 0xFF) in a real entry of A makes exactly its row NaN; one of B
 * exactly its column. The rest stays finite. */
static void test_gemm_nan_scale(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    for (int op = 0; op < 2; op++) {
        gemm_case c = case_make(150, 100, 128, 1, kRealistic, 9 + (uint64_t)op);
        if (op == 0)
            c.as[7 * c.sc + 2] = 0x7F; /* A row 7, block 2 */
        else
            c.bs[99 * c.sc + 7] = 0xFF; /* B row (= y column) 99, last real block */
        case_upload(&c);
        uint16_t *y = case_y(ctx, &c);
        int64_t first;
        const int64_t wrong = nan_mismatches(&c, y, op == 0 ? 7 : -1, op == 1 ? 99 : -1, &first);
        if (wrong)
            fail_msg("NaN scale in %s: %lld elements wrong, first y[%lld, %lld] = 0x%04x",
                     op == 0 ? "a_scale[7, 2]" : "b_scale[99, 7]", (long long)wrong,
                     (long long)(first / c.N), (long long)(first % c.N), y[first]);
        free(y);
        case_free(&c);
    }
    qf_ctx_free(ctx);
    g_cases++;
}

/* ==================================================================== timing */

/* 8192^3 (QFUSE_TEST_QUICK=1 skips it): 16 sampled rows against the reference, then the kernel's
 * TFLOP/s next to bf16 cuBLASLt's. */
static void test_gemm_8192_timing(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (getenv("QFUSE_TEST_QUICK") && atoi(getenv("QFUSE_TEST_QUICK")))
        skip();
    if (!ctx_or_skip(&ctx))
        skip();
    const int64_t S = 8192;
    gemm_case c = case_make(S, S, S, 1, kRealistic, 11);
    case_upload(&c);
    CK(cudaMemset(c.dy, 0xFF, (size_t)(S * S) * 2));
    float ms;
    QF_TIME_MEDIAN(ms, QF_OK_OR_FAIL(case_run(ctx, &c)));
    uint16_t *y = malloc((size_t)(S * S) * 2);
    CK(cudaMemcpy(y, c.dy, (size_t)(S * S) * 2, cudaMemcpyDeviceToHost));
    int64_t rows[16];
    for (int i = 0; i < 16; i++) /* spread over M, at varying offsets inside a 128-row tile */
        rows[i] = (i * (S / 16) + i * 37 % 128) % S;
    rows[15] = S - 1;
    const case_err e = case_check(&c, y, rows, 16);
    free(y);
    const double tf = 2.0 * (double)S * S * S / (ms * 1e-3) / 1e12;
    const double lt = bf16_lt_tflops(S);
    report(&c, "8192^3", &e, 1);
    printf("nvfp4_gemm: %.1f TFLOP/s (%.3f ms); bf16 cuBLASLt: %.1f TFLOP/s\n", tf, (double)ms,
           lt);
    case_free(&c);
    qf_ctx_free(ctx);
    g_cases++;
}

/* ==================================================================== without a GPU */

/* The Blackwell path's cuBLASLt descriptors and layouts (FP4 E2M1 operands, VEC16_UE4M3 scale
 * modes, device pointer mode, TN, bias epilogue) build without a device: what can be checked of
 * a path that cannot run here. */
static void test_lt_descriptors(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{128, 128, 32}, {8192, 8192, 8192}, {1, 16, 96}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int bias = 0; bias < 2; bias++)
            QF_OK_OR_FAIL(
                qf_gemm_lt_nvfp4_describe(shapes[i][0], shapes[i][1], shapes[i][2], bias));
    g_cases++;
}

/* The kernel's alpha constant is the reference's fl(1/7225344), and alpha is rounded as
 * fl(fl(amax_a * amax_b) * rcp) (SPEC 2.4). */
static void test_alpha_constant(void **state) {
    (void)state;
    const float rcp = qf_nvfp4_gemm_alpha_ref(1.0f, 1.0f);
    uint32_t bits;
    memcpy(&bits, &rcp, 4);
    assert_int_equal(bits, 0x34149b93u); /* kAlphaRcpBits of templates/sm90_nvfp4_gemm.cu */
    g_cases++;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lt_descriptors),      cmocka_unit_test(test_alpha_constant),
        cmocka_unit_test(test_gemm_shapes),         cmocka_unit_test(test_gemm_scale_range),
        cmocka_unit_test(test_gemm_subnormal_scales), cmocka_unit_test(test_gemm_nan_scale),
        cmocka_unit_test(test_gemm_8192_timing),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    printf("test_gpu_nvfp4_gemm: %d cases checked\n", g_cases);
    return rc;
}
