/* test_gpu_mxfp8_gemm.c: the MXFP8 block-scaled GEMM (qf_gemm, SPEC 2.3) against the fp64
 * reference qf_gemm_mxfp8_ref: ragged shapes, padded scale bytes poisoned two ways (y must be
 * bit-identical), scale pairs past the fp32 range (the kernel's exact path), a NaN scale, and the
 * TFLOP/s at 8192^3 next to bf16 cuBLASLt measured in the same run. The argument checks and the
 * Blackwell path (cuBLASLt VEC32_UE8M0 descriptors) run without a GPU; the rest skips cleanly. */
#include "test_gpu_gemm.h"

#include <math.h>
#include <stdio.h>

#include "ctx.h"
#include "qfuse.h"
#include "ref.h"
#include "ref_mx.h"


static const char *const kRecipe = "mxfp8";
static const double kTol = 4e-3; /* ||y - ref|| / ||ref||: bf16 output rounding */
static int g_cases;

/* ==================================================================== problems */

/* One GEMM: host operands and scales, and their device copies. */
typedef struct gemm_case {
    int64_t M, N, K, sc, ra, rb; /* sc: scale row stride; ra, rb: padded scale rows */
    qf_dtype fa, fb;
    uint8_t *a, *b, *as, *bs;     /* host */
    uint16_t *bias;               /* host bf16 [N] or NULL */
    void *da, *db, *das, *dbs, *dbias, *dy;
} gemm_case;

/* A random byte of format fmt that is neither NaN nor infinity, with exponent field <= emax. */
static uint8_t rand_fp8(uint64_t *s, qf_dtype fmt, int emax) {
    for (;;) {
        uint8_t v = (uint8_t)qf_test_rng_next(s);
        int e = fmt == QF_DTYPE_E4M3 ? (v >> 3) & 15 : (v >> 2) & 31;
        int special = fmt == QF_DTYPE_E4M3 ? (v & 0x7f) == 0x7f : e == 31;
        if (!special && e <= emax)
            return v;
    }
}

static void fill_data(uint8_t *p, int64_t rows, int64_t K, qf_dtype fmt, int emax, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        uint64_t s = seed ^ ((uint64_t)r * 0x9E3779B97F4A7C15ull);
        for (int64_t k = 0; k < K; k++)
            p[r * K + k] = rand_fp8(&s, fmt, emax);
    }
}

/* Real entries uniform in [lo, hi]; padding (rows >= real, columns >= K/32) = pad. */
static void fill_scales(uint8_t *p, int64_t R, int64_t real, int64_t sc, int64_t nb, int lo,
                        int hi, int pad, uint64_t seed) {
    uint64_t s = seed;
    const uint64_t span = (uint64_t)(hi - lo + 1);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < sc; j++)
            p[r * sc + j] = r < real && j < nb ? (uint8_t)(lo + (int)(qf_test_rng_next(&s) % span))
                                               : (uint8_t)pad;
}


/* Scale bytes [lo_a, hi_a] / [lo_b, hi_b], element exponent fields <= emax, padding 0xFF. */
static gemm_case case_make(int64_t M, int64_t N, int64_t K, int bias, int lo_a, int hi_a,
                           int lo_b, int hi_b, int emax, uint64_t seed) {
    gemm_case c = {.M = M, .N = N, .K = K, .fa = QF_DTYPE_E4M3, .fb = QF_DTYPE_E4M3};
    c.sc = (K / 32 + 3) / 4 * 4;
    c.ra = (M + 127) / 128 * 128;
    c.rb = (N + 127) / 128 * 128;
    c.a = malloc((size_t)(M * K));
    c.b = malloc((size_t)(N * K));
    c.as = malloc((size_t)(c.ra * c.sc));
    c.bs = malloc((size_t)(c.rb * c.sc));
    assert_true(c.a && c.b && c.as && c.bs);
    fill_data(c.a, M, K, c.fa, emax, seed);
    fill_data(c.b, N, K, c.fb, emax, seed + 1);
    fill_scales(c.as, c.ra, M, c.sc, K / 32, lo_a, hi_a, 0xFF, seed + 2);
    fill_scales(c.bs, c.rb, N, c.sc, K / 32, lo_b, hi_b, 0xFF, seed + 3);
    if (bias) {
        uint64_t s = seed + 4;
        c.bias = malloc((size_t)N * 2);
        for (int64_t n = 0; n < N; n++)
            c.bias[n] = qf_float_to_bf16(4.0f * qf_test_rng_uniform(&s));
    }
    return c;
}

static void case_upload(gemm_case *c) {
    c->da = dev_copy(c->a, (size_t)(c->M * c->K));
    c->db = dev_copy(c->b, (size_t)(c->N * c->K));
    c->das = dev_copy(c->as, (size_t)(c->ra * c->sc));
    c->dbs = dev_copy(c->bs, (size_t)(c->rb * c->sc));
    c->dbias = c->bias ? dev_copy(c->bias, (size_t)c->N * 2) : NULL;
    c->dy = dev_copy(NULL, (size_t)(c->M * c->N) * 2);
}

static void case_free(gemm_case *c) {
    void *d[] = {c->da, c->db, c->das, c->dbs, c->dbias, c->dy};
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
        fill_scales(t, R[o], 0, c->sc, 0, 0, 0, v, 0); /* all padding ... */
        for (int64_t r = 0; r < real[o]; r++)          /* ... then the real entries back */
            memcpy(t + r * c->sc, h[o] + r * c->sc, (size_t)(c->K / 32));
        CK(cudaMemcpy(d[o], t, (size_t)(R[o] * c->sc), cudaMemcpyHostToDevice));
    }
    free(t);
}

/* ==================================================================== running and checking */

static qf_status case_run(qf_ctx_t *ctx, const gemm_case *c) {
    qf_tensor a = {.data = c->da, .dtype = c->fa, .ndim = 2, .dims = {c->M, c->K}};
    qf_tensor b = {.data = c->db, .dtype = c->fb, .ndim = 2, .dims = {c->N, c->K}};
    qf_tensor as = {.data = c->das, .dtype = QF_DTYPE_E8M0, .ndim = 2, .dims = {c->ra, c->sc}};
    qf_tensor bs = {.data = c->dbs, .dtype = QF_DTYPE_E8M0, .ndim = 2, .dims = {c->rb, c->sc}};
    qf_tensor bias = {.data = c->dbias, .dtype = QF_DTYPE_BF16, .ndim = 1, .dims = {c->N}};
    qf_tensor y = {.data = c->dy, .dtype = QF_DTYPE_BF16, .ndim = 2, .dims = {c->M, c->N}};
    const qf_quantized qa = gemm_rowwise_q(&a, &as, NULL, QF_SCALE_LAYOUT_COMPACT);
    const qf_quantized qb = gemm_rowwise_q(&b, &bs, NULL, QF_SCALE_LAYOUT_COMPACT);
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

/* ||y - ref|| / ||ref|| over rows[0..nr) (every row when rows is NULL); counts non-finite y. The
 * reference runs on all cores in blocks of one row x 256 columns. */
static double case_error(const gemm_case *c, const uint16_t *y, const int64_t *rows, int64_t nr,
                         int64_t *nonfinite) {
    const int64_t R = rows ? nr : c->M, CB = 256, nblk = (c->N + CB - 1) / CB;
    double *bias = NULL, num = 0.0, den = 0.0;
    int64_t bad = 0;
    if (c->bias) {
        bias = malloc((size_t)c->N * sizeof(double));
        for (int64_t n = 0; n < c->N; n++)
            bias[n] = qf_bf16_to_float(c->bias[n]);
    }
#pragma omp parallel for schedule(dynamic) reduction(+ : num, den, bad)
    for (int64_t i = 0; i < R * nblk; i++) {
        const int64_t m = rows ? rows[i / nblk] : i / nblk, n0 = i % nblk * CB;
        const int64_t w = c->N - n0 < CB ? c->N - n0 : CB;
        double ref[256];
        qf_gemm_mxfp8_ref(c->fa, c->a + m * c->K, c->as + m * c->sc, c->fb, c->b + n0 * c->K,
                          c->bs + n0 * c->sc, bias ? bias + n0 : NULL, 1, w, c->K, ref);
        for (int64_t j = 0; j < w; j++) {
            const double v = qf_bf16_to_float(y[m * c->N + n0 + j]);
            bad += !isfinite(v);
            num += (v - ref[j]) * (v - ref[j]);
            den += ref[j] * ref[j];
        }
    }
    free(bias);
    *nonfinite = bad;
    return sqrt(num / den);
}

static int ctx_or_skip(qf_ctx_t **ctx) {
    if (!qf_test_have_gpu())
        return 0;
    QF_OK_OR_FAIL(qf_ctx_init(ctx, 0));
    return 1;
}

/* Checks one case against the reference, then again with the padding poisoned 0x00 instead of
 * 0xFF: y must not move by a bit (TE PR #3070). */
static void check_case(qf_ctx_t *ctx, gemm_case *c, const char *what) {
    case_upload(c);
    uint16_t *y = case_y(ctx, c);
    int64_t nonfinite;
    double err = case_error(c, y, NULL, 0, &nonfinite);
    case_repad(c, 0x00);
    uint16_t *y0 = case_y(ctx, c);
    const int same = memcmp(y, y0, (size_t)(c->M * c->N) * 2) == 0;
    printf("mxfp8_gemm %-12s M=%-5lld N=%-5lld K=%-5lld bias=%d: rel err %.3e, non-finite %lld, "
           "padding 0xFF vs 0x00 bit-identical %s\n", what, (long long)c->M, (long long)c->N,
           (long long)c->K, c->bias != NULL, err, (long long)nonfinite, same ? "yes" : "NO");
    free(y);
    free(y0);
    if (!(err < kTol) || nonfinite || !same)
        fail_msg("mxfp8_gemm %s M=%lld N=%lld K=%lld failed", what, (long long)c->M,
                 (long long)c->N, (long long)c->K);
    g_cases++;
}

/* ==================================================================== GPU tests */

static void test_gemm_shapes(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    static const int64_t shapes[][4] = {
        {32, 32, 32, 0},     {96, 64, 64, 1},      {1, 1, 32, 0},        {130, 7, 96, 1},
        {257, 129, 160, 1},  {993, 1024, 1024, 0}, {1024, 993, 1024, 1}, {320, 200, 2016, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t *s = shapes[i];
        gemm_case c = case_make(s[0], s[1], s[2], (int)s[3], 120, 134, 120, 134, 15, 100 + i);
        check_case(ctx, &c, "shape");
        case_free(&c);
    }
    qf_ctx_free(ctx);
}

/* A scales near 2^115, B near 2^11: products up to 2^130 overflow fp32 although every result
 * (small elements) is finite, so the kernel must take its exact path for these k-tiles. */
static void test_gemm_exact_path(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    gemm_case c = case_make(200, 136, 96, 0, 236, 244, 136, 140, 2, 7);
    check_case(ctx, &c, "exact path");
    case_free(&c);
    qf_ctx_free(ctx);
}

/* A NaN scale byte (0xFF) in a real entry makes exactly its row NaN. */
static void test_gemm_nan_scale(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    gemm_case c = case_make(150, 100, 128, 1, 120, 134, 120, 134, 15, 9);
    c.as[7 * c.sc + 2] = 0xFF;
    case_upload(&c);
    uint16_t *y = case_y(ctx, &c);
    int64_t wrong = 0;
    for (int64_t m = 0; m < c.M; m++)
        for (int64_t n = 0; n < c.N; n++)
            wrong += (m == 7) != isnan(qf_bf16_to_float(y[m * c.N + n]));
    free(y);
    case_free(&c);
    qf_ctx_free(ctx);
    assert_int_equal(wrong, 0);
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
    gemm_case c = case_make(S, S, S, 1, 120, 134, 120, 134, 15, 11);
    case_upload(&c);
    float ms;
    QF_TIME_MEDIAN(ms, QF_OK_OR_FAIL(case_run(ctx, &c)));
    uint16_t *y = malloc((size_t)(S * S) * 2);
    CK(cudaMemcpy(y, c.dy, (size_t)(S * S) * 2, cudaMemcpyDeviceToHost));
    int64_t rows[16], nonfinite;
    for (int i = 0; i < 16; i++) /* spread over M, at varying offsets inside a 128-row tile */
        rows[i] = (i * (S / 16) + i * 37 % 128) % S;
    rows[15] = S - 1;
    double err = case_error(&c, y, rows, 16, &nonfinite);
    free(y);
    case_free(&c);
    const double tf = 2.0 * (double)S * S * S / (ms * 1e-3) / 1e12;
    const double lt = bf16_lt_tflops(S);
    printf("mxfp8_gemm 8192^3 (16 sampled rows): rel err %.3e, non-finite %lld\n", err,
           (long long)nonfinite);
    printf("mxfp8_gemm: %.1f TFLOP/s (%.3f ms); bf16 cuBLASLt: %.1f TFLOP/s\n", tf, (double)ms,
           lt);
    qf_ctx_free(ctx);
    assert_true(err < kTol && nonfinite == 0);
    g_cases++;
}

/* ==================================================================== without a GPU */

/* Fake, 16-byte aligned device pointers: the argument checks never dereference them. */
#define FAKE(i) ((void *)(uintptr_t)(0x100000u * (i)))

typedef struct arg_set {
    qf_tensor a, as, b, bs, bias, y;
    qf_scale_layout layout;
} arg_set;

/* Valid arguments for M x N x K. */
static arg_set args_valid(int64_t M, int64_t N, int64_t K, qf_scale_layout layout) {
    const int64_t sc = (K / 32 + 3) / 4 * 4;
    arg_set s = {
        .a = {FAKE(1), QF_DTYPE_E4M3, 2, {M, K}},
        .as = {FAKE(2), QF_DTYPE_E8M0, 2, {(M + 127) / 128 * 128, sc}},
        .b = {FAKE(3), QF_DTYPE_E4M3, 2, {N, K}},
        .bs = {FAKE(4), QF_DTYPE_E8M0, 2, {(N + 127) / 128 * 128, sc}},
        .bias = {FAKE(5), QF_DTYPE_BF16, 1, {N}},
        .y = {FAKE(6), QF_DTYPE_BF16, 2, {M, N}},
        .layout = layout,
    };
    return s;
}

static qf_status args_call(qf_ctx_t *ctx, const char *recipe, arg_set *s) {
    const qf_quantized qa = gemm_rowwise_q(&s->a, &s->as, NULL, s->layout);
    const qf_quantized qb = gemm_rowwise_q(&s->b, &s->bs, NULL, s->layout);
    return gemm_rowwise(ctx, recipe, &qa, &qb, &s->bias, &s->y);
}

/* The call fails with status st and a message containing text. */
static void expect_fail(qf_ctx_t *ctx, arg_set *s, qf_status st, const char *text) {
    qf_status got = args_call(ctx, kRecipe, s);
    if (got != st || !strstr(qf_last_error(), text))
        fail_msg("expected %s with \"%s\", got %s: %s", qf_status_name(st), text,
                 qf_status_name(got), qf_last_error());
}

static void test_args_sm90(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 90));
    arg_set s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    assert_int_equal(args_call(ctx, kRecipe, &s), QF_ERR_NO_DEVICE); /* valid: stops at launch */
    assert_non_null(strstr(qf_last_error(), "arguments are valid"));
    /* the family comes from the recipe: the FP8 GEMM finds no per-tensor scale_inv slot */
    assert_int_equal(args_call(ctx, "fp8_delayed", &s), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "a.scale_inv is NULL"));
    s.a.dtype = QF_DTYPE_E5M2;
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "a.rowwise_data.dtype is e5m2; expected e4m3 (recipe "
                "'mxfp8' quantizes the input");
    s = args_valid(100, 64, 80, QF_SCALE_LAYOUT_COMPACT);
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "K = 80 is not a multiple of 32");
    s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    s.b.dims[1] = 64;
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "but a.rowwise_data has K = 96");
    s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_SWIZZLED);
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "reads compact scales");
    s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    const qf_quantized qb = gemm_rowwise_q(&s.b, &s.bs, NULL, s.layout);
    const qf_operand ob = {&qb, QF_COPY_ROWWISE};
    assert_int_equal(qf_gemm(ctx, kRecipe, NULL, &ob, NULL, &s.y, NULL), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "a is NULL"));
    s.a.data = NULL;
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "a.rowwise_data is NULL");
    qf_ctx_free(ctx);
    g_cases++;
}

/* Scales, output, bias: shapes, dtypes and alignment against what the op requires. */
static void test_args_buffers(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 90));
    arg_set s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    s.as.dims[0] = 100; /* unpadded rows */
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "a.rowwise_scale_inv has 400 elements");
    s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    s.bs.dims[1] = 3; /* unpadded blocks */
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "b.rowwise_scale_inv has");
    s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    s.y.dtype = QF_DTYPE_FP32;
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "y.dtype is fp32; expected bf16");
    s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    s.bias.dims[0] = 63;
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "bias has 63 elements");
    s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    s.a.data = (char *)s.a.data + 8;
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "is not 16-byte aligned");
    qf_ctx_free(ctx);
    g_cases++;
}

/* Blackwell: swizzled scales required, N % 16, then cuBLASLt (no device here: NO_DEVICE). */
static void test_args_sm100(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 100));
    arg_set s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_SWIZZLED);
    assert_int_equal(args_call(ctx, kRecipe, &s), QF_ERR_NO_DEVICE);
    s.layout = QF_SCALE_LAYOUT_COMPACT;
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "reads swizzled scales");
    s = args_valid(100, 72, 96, QF_SCALE_LAYOUT_SWIZZLED);
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "N = 72 must be a multiple of 16");
    qf_ctx_free(ctx);
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 86));
    s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    expect_fail(ctx, &s, QF_ERR_UNSUPPORTED, "need sm_89 or newer");
    qf_ctx_free(ctx);
    g_cases++;
}

/* The Blackwell path's cuBLASLt descriptors and layouts (VEC32_UE8M0 scale modes, TN, bias
 * epilogue) build without a device: what can be checked of a path that cannot run here. */
static void test_lt_descriptors(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{128, 128, 32}, {8192, 8192, 8192}, {1, 16, 96}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int bias = 0; bias < 2; bias++) {
            QF_OK_OR_FAIL(qf_gemm_lt_mxfp8_describe(shapes[i][0], shapes[i][1], shapes[i][2],
                                                    QF_DTYPE_E4M3, QF_DTYPE_E4M3, bias));
            QF_OK_OR_FAIL(qf_gemm_lt_mxfp8_describe(shapes[i][0], shapes[i][1], shapes[i][2],
                                                    QF_DTYPE_E5M2, QF_DTYPE_E4M3, bias));
        }
    g_cases++;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lt_descriptors),  cmocka_unit_test(test_args_sm90),
        cmocka_unit_test(test_args_buffers),    cmocka_unit_test(test_args_sm100),
        cmocka_unit_test(test_gemm_shapes),
        cmocka_unit_test(test_gemm_exact_path), cmocka_unit_test(test_gemm_nan_scale),
        cmocka_unit_test(test_gemm_8192_timing),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    printf("test_gpu_mxfp8_gemm: %d cases checked\n", g_cases);
    return rc;
}
