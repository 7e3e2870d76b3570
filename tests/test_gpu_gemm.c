/* test_gpu_gemm.c: the GEMM of every family (qf_gemm, SPEC 2, 6) against its fp64 reference, by
 * looping over the registry's recipes: each family has a row of hooks (kHooks: how a case is made
 * and checked, test_gpu_gemm_families.h; its shape plan; its scale-range, NaN-scale and 8192^3
 * timing checks). A family's GEMM cases run once, under its first recipe in the registry (the
 * GEMM reads the operands' slots, no recipe option beyond the formats); a family without hooks
 * has its recipes skipped with a message. Shared loops: shape plans (ragged shapes, bias on and
 * off; mxfp8 and nvfp4 with padded scale bytes poisoned two ways, y bit-identical), the
 * scale-range checks (mxfp8: scale pairs past the fp32 range, the kernel's exact path; nvfp4:
 * every finite E4M3 scale, alpha 0, subnormal scales), a NaN scale reaching exactly its row (or
 * column), and the TFLOP/s at 8192^3 next to bf16 cuBLASLt measured in the same run
 * (QFUSE_TEST_QUICK=1 skips it). Without a GPU: the MXFP8 argument checks, the Blackwell path's
 * cuBLASLt descriptors and the NVFP4 alpha constant; the rest skips cleanly. Other argument
 * checks: tests/test_api_errors.c. */
#include "test_gpu_gemm_families.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>

#include "ctx.h"
#include "qfuse.h"
#include "ref.h"

/* {===================================================================== hooks */

/* A family's shape cases: the cross product mn x ks (bias (i + j) & 1, "shape"), then rows
 * {M, N, K, bias} (labelled rows_what); seeds count up from seed0 over both. */
typedef struct gemm_plan {
    const int64_t (*mn)[2];
    int n_mn;
    const int64_t *ks;
    int n_ks;
    const int64_t (*rows)[4];
    int n_rows;
    const char *rows_what;
    uint64_t seed0;
} gemm_plan;

/* The checks of a family besides its shape plan, each run under its first recipe. */
enum { CHECK_SCALE_RANGE, CHECK_NAN_SCALE, CHECK_TIMING_8192, CHECK_COUNT };
typedef void (*gemm_check_fn)(qf_ctx_t *ctx, const char *recipe);

/* One family: its cases and checks; NULL: the family has none of that kind. */
typedef struct gemm_hooks {
    const char *summary; /* printf format of the family's count line */
    void (*check)(qf_ctx_t *ctx, const char *recipe, const int64_t s[4], uint64_t seed,
                  const char *what);
    const gemm_plan *plan;
    gemm_check_fn checks[CHECK_COUNT];
    void (*lt_descriptors)(void); /* without a device */
} gemm_hooks;

#define COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* 16 rows of an S x S result spread over M, at varying offsets inside a 128-row tile. */
static void sample_rows(int64_t S, int64_t rows[16]) {
    for (int i = 0; i < 16; i++)
        rows[i] = (i * (S / 16) + i * 37 % 128) % S;
    rows[15] = S - 1;
}

/* }=====================================================================} */

/* {===================================================================== fp8_delayed */

static void fp8_check(qf_ctx_t *ctx, const char *recipe, const int64_t s[4], uint64_t seed,
                      const char *what) {
    (void)what;
    fp8_gemm_case(ctx, recipe, s[0], s[1], s[2], (int)s[3], seed);
}

static const int64_t kFp8Shapes[][4] = {
    {1, 16, 16, 0}, {3, 32, 64, 1}, {217, 256, 384, 1}, {1000, 1536, 384, 1}, {512, 1024, 4096, 0}};
static const gemm_plan kFp8Plan = {NULL, 0, NULL, 0, kFp8Shapes, COUNTOF(kFp8Shapes), "shape", 1};

/* }=====================================================================} */

/* {===================================================================== mxfp8 */

/* Scale bytes 120..134 for both operands, element exponent fields <= 15. */
static void mx_check(qf_ctx_t *ctx, const char *recipe, const int64_t s[4], uint64_t seed,
                     const char *what) {
    mx_gemm_case c = mx_case_make(s[0], s[1], s[2], (int)s[3], 120, 134, 120, 134, 15, seed);
    c.recipe = recipe;
    mx_check_case(ctx, &c, what);
    mx_case_free(&c);
}

static const int64_t kMxShapes[][4] = {
    {32, 32, 32, 0},     {96, 64, 64, 1},      {1, 1, 32, 0},        {130, 7, 96, 1},
    {257, 129, 160, 1},  {993, 1024, 1024, 0}, {1024, 993, 1024, 1}, {320, 200, 2016, 1},
};
static const gemm_plan kMxPlan = {NULL, 0, NULL, 0, kMxShapes, COUNTOF(kMxShapes), "shape", 100};

/* A scales near 2^115, B near 2^11: products up to 2^130 overflow fp32 although every result
 * (small elements) is finite, so the kernel must take its exact path for these k-tiles. */
static void mx_exact_path(qf_ctx_t *ctx, const char *recipe) {
    mx_gemm_case c = mx_case_make(200, 136, 96, 0, 236, 244, 136, 140, 2, 7);
    c.recipe = recipe;
    mx_check_case(ctx, &c, "exact path");
    mx_case_free(&c);
}

/* A NaN scale byte (0xFF) in a real entry makes exactly its row NaN. */
static void mx_nan_scale(qf_ctx_t *ctx, const char *recipe) {
    mx_gemm_case c = mx_case_make(150, 100, 128, 1, 120, 134, 120, 134, 15, 9);
    c.recipe = recipe;
    c.as[7 * c.sc + 2] = 0xFF;
    mx_case_upload(&c);
    uint16_t *y = mx_case_y(ctx, &c);
    int64_t wrong = 0;
    for (int64_t m = 0; m < c.M; m++)
        for (int64_t n = 0; n < c.N; n++)
            wrong += (m == 7) != isnan(qf_bf16_to_float(y[m * c.N + n]));
    free(y);
    mx_case_free(&c);
    assert_int_equal(wrong, 0);
    g_cases[QF_FAMILY_MXFP8]++;
}

/* 8192^3: 16 sampled rows against the reference, then the kernel's TFLOP/s next to bf16
 * cuBLASLt's. */
static void mx_timing(qf_ctx_t *ctx, const char *recipe) {
    const int64_t S = 8192;
    mx_gemm_case c = mx_case_make(S, S, S, 1, 120, 134, 120, 134, 15, 11);
    c.recipe = recipe;
    mx_case_upload(&c);
    float ms;
    QF_TIME_MEDIAN(ms, QF_OK_OR_FAIL(mx_case_run(ctx, &c)));
    uint16_t *y = malloc((size_t)(S * S) * 2);
    CK(cudaMemcpy(y, c.dy, (size_t)(S * S) * 2, cudaMemcpyDeviceToHost));
    int64_t rows[16], nonfinite;
    sample_rows(S, rows);
    double err = mx_case_error(&c, y, rows, 16, &nonfinite);
    free(y);
    mx_case_free(&c);
    const double tf = 2.0 * (double)S * S * S / (ms * 1e-3) / 1e12;
    const double lt = bf16_lt_tflops(S);
    printf("mxfp8_gemm 8192^3 (16 sampled rows): rel err %.3e, non-finite %lld\n", err,
           (long long)nonfinite);
    printf("mxfp8_gemm: %.1f TFLOP/s (%.3f ms); bf16 cuBLASLt: %.1f TFLOP/s\n", tf, (double)ms,
           lt);
    assert_true(err < kMxTol && nonfinite == 0);
    g_cases[QF_FAMILY_MXFP8]++;
}

/* The Blackwell path's cuBLASLt descriptors and layouts (VEC32_UE8M0 scale modes, TN, bias
 * epilogue) build without a device: what can be checked of a path that cannot run here. */
static void mx_lt_descriptors(void) {
    static const int64_t shapes[][3] = {{128, 128, 32}, {8192, 8192, 8192}, {1, 16, 96}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int bias = 0; bias < 2; bias++) {
            QF_OK_OR_FAIL(qf_gemm_lt_mxfp8_describe(shapes[i][0], shapes[i][1], shapes[i][2],
                                                    QF_DTYPE_E4M3, QF_DTYPE_E4M3, bias));
            QF_OK_OR_FAIL(qf_gemm_lt_mxfp8_describe(shapes[i][0], shapes[i][1], shapes[i][2],
                                                    QF_DTYPE_E5M2, QF_DTYPE_E4M3, bias));
        }
    g_cases[QF_FAMILY_MXFP8]++;
}

/* }=====================================================================} */

/* {===================================================================== nvfp4 */

static const scale_range kRealistic = {0x20, 0x7E, 0}; /* 2^-3 .. 448, as a quantizer gives */

static void nv_check(qf_ctx_t *ctx, const char *recipe, const int64_t s[4], uint64_t seed,
                     const char *what) {
    nv_gemm_case c = nv_case_make(s[0], s[1], s[2], (int)s[3], kRealistic, seed);
    c.recipe = recipe;
    nv_check_case(ctx, &c, what);
    nv_case_free(&c);
}

/* M, N in {1, 17, 100, 129} (partial tiles), K in {32, 64, 96, 1024, 8192} (partial k-tiles,
 * scale rows of 2 and 6 real blocks next to padding), bias on and off; then several tiles and
 * more than one raster group of tile rows. */
static const int64_t kNvMN[][2] = {{1, 1}, {17, 100}, {100, 17}, {129, 129}, {1, 129}, {17, 1}};
static const int64_t kNvKs[] = {32, 64, 96, 1024, 8192};
static const int64_t kNvTiles[][4] = {
    {1100, 260, 96, 1}, {257, 1000, 544, 0}, {1024, 1024, 1024, 1}, {300, 130, 2080, 0}};
static const gemm_plan kNvPlan = {kNvMN,    COUNTOF(kNvMN),    kNvKs, COUNTOF(kNvKs),
                                  kNvTiles, COUNTOF(kNvTiles), "tiles", 100};

/* Every finite E4M3 scale byte, positive and negative (0x00 .. 0x7E | sign), with zero amaxes in
 * one operand too (alpha 0: y = bias exactly); then only the E4M3 subnormal scales 2^-9 and 2^-8:
 * most tensor-core operands are then f16 subnormals (deq x 2^-7 < 2^-14 when |E2M1| < 4 at 2^-9,
 * < 2 at 2^-8), so y is right only if the MMA keeps f16 subnormals (flushed, most products would
 * vanish: far outside the bound). */
static void nv_scale_range(qf_ctx_t *ctx, const char *recipe) {
    const scale_range all = {0x00, 0x7E, 1};
    nv_gemm_case c = nv_case_make(200, 136, 1024, 1, all, 7);
    c.recipe = recipe;
    nv_check_case(ctx, &c, "all scales");
    nv_case_free(&c);
    c = nv_case_make(64, 48, 256, 1, all, 8);
    c.recipe = recipe;
    c.amax_b = 0.0f;
    nv_check_case(ctx, &c, "alpha 0");
    nv_case_free(&c);
    const scale_range sub = {0x01, 0x02, 0};
    c = nv_case_make(130, 72, 512, 0, sub, 9);
    c.recipe = recipe;
    c.amax_a = 2688.0f, c.amax_b = 2688.0f; /* alpha = 1: y of order 1e-4, well inside bf16 */
    nv_check_case(ctx, &c, "subnormal");
    nv_case_free(&c);
}

/* A NaN scale byte (0x7F or 0xFF) in a real entry of A makes exactly its row NaN; one of B
 * exactly its column. The rest stays finite. */
static void nv_nan_scale(qf_ctx_t *ctx, const char *recipe) {
    for (int op = 0; op < 2; op++) {
        nv_gemm_case c = nv_case_make(150, 100, 128, 1, kRealistic, 9 + (uint64_t)op);
        c.recipe = recipe;
        if (op == 0)
            c.as[7 * c.sc + 2] = 0x7F; /* A row 7, block 2 */
        else
            c.bs[99 * c.sc + 7] = 0xFF; /* B row (= y column) 99, last real block */
        nv_case_upload(&c);
        uint16_t *y = nv_case_y(ctx, &c);
        int64_t first;
        const int64_t wrong =
            nv_nan_mismatches(&c, y, op == 0 ? 7 : -1, op == 1 ? 99 : -1, &first);
        if (wrong)
            fail_msg("NaN scale in %s: %lld elements wrong, first y[%lld, %lld] = 0x%04x",
                     op == 0 ? "a_scale[7, 2]" : "b_scale[99, 7]", (long long)wrong,
                     (long long)(first / c.N), (long long)(first % c.N), y[first]);
        free(y);
        nv_case_free(&c);
    }
    g_cases[QF_FAMILY_NVFP4]++;
}

/* 8192^3: 16 sampled rows against the reference, then the kernel's TFLOP/s next to bf16
 * cuBLASLt's. */
static void nv_timing(qf_ctx_t *ctx, const char *recipe) {
    const int64_t S = 8192;
    nv_gemm_case c = nv_case_make(S, S, S, 1, kRealistic, 11);
    c.recipe = recipe;
    nv_case_upload(&c);
    CK(cudaMemset(c.dy, 0xFF, (size_t)(S * S) * 2));
    float ms;
    QF_TIME_MEDIAN(ms, QF_OK_OR_FAIL(nv_case_run(ctx, &c)));
    uint16_t *y = malloc((size_t)(S * S) * 2);
    CK(cudaMemcpy(y, c.dy, (size_t)(S * S) * 2, cudaMemcpyDeviceToHost));
    int64_t rows[16];
    sample_rows(S, rows);
    const nv_case_err e = nv_case_check(&c, y, rows, 16);
    free(y);
    const double tf = 2.0 * (double)S * S * S / (ms * 1e-3) / 1e12;
    const double lt = bf16_lt_tflops(S);
    nv_report(&c, "8192^3", &e, 1);
    printf("nvfp4_gemm: %.1f TFLOP/s (%.3f ms); bf16 cuBLASLt: %.1f TFLOP/s\n", tf, (double)ms,
           lt);
    nv_case_free(&c);
    g_cases[QF_FAMILY_NVFP4]++;
}

/* The Blackwell path's cuBLASLt descriptors and layouts (FP4 E2M1 operands, VEC16_UE4M3 scale
 * modes, device pointer mode, TN, bias epilogue) build without a device: what can be checked of
 * a path that cannot run here. */
static void nv_lt_descriptors(void) {
    static const int64_t shapes[][3] = {{128, 128, 32}, {8192, 8192, 8192}, {1, 16, 96}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int bias = 0; bias < 2; bias++)
            QF_OK_OR_FAIL(
                qf_gemm_lt_nvfp4_describe(shapes[i][0], shapes[i][1], shapes[i][2], bias));
    g_cases[QF_FAMILY_NVFP4]++;
}
/* }=====================================================================} */

/* {===================================================================== the hooks table */

/* One row per family; an empty row: no GEMM hooks yet (its recipes are skipped with a message).
 * fp8_current (SPEC 2.2) runs the per-tensor FP8 GEMM: fp8_delayed's row, its own summary. */
static const gemm_hooks kHooks[QF_FAMILY_COUNT] = {
    [QF_FAMILY_FP8_DELAYED] = {.summary = "test_gpu_fp8_gemm: %d cases checked\n",
                               .check = fp8_check, .plan = &kFp8Plan},
    [QF_FAMILY_FP8_CURRENT] = {.summary = "test_gpu_fp8_current_gemm: %d cases checked\n",
                               .check = fp8_check, .plan = &kFp8Plan},
    [QF_FAMILY_MXFP8] = {.summary = "test_gpu_mxfp8_gemm: %d cases checked\n",
                         .check = mx_check, .plan = &kMxPlan,
                         .checks = {[CHECK_SCALE_RANGE] = mx_exact_path,
                                    [CHECK_NAN_SCALE] = mx_nan_scale,
                                    [CHECK_TIMING_8192] = mx_timing},
                         .lt_descriptors = mx_lt_descriptors},
    [QF_FAMILY_NVFP4] = {.summary = "test_gpu_nvfp4_gemm: %d cases checked\n",
                         .check = nv_check, .plan = &kNvPlan,
                         .checks = {[CHECK_SCALE_RANGE] = nv_scale_range,
                                    [CHECK_NAN_SCALE] = nv_nan_scale,
                                    [CHECK_TIMING_8192] = nv_timing},
                         .lt_descriptors = nv_lt_descriptors},
};
static_assert(QF_FAMILY_COUNT == 5, "a new family: give it a row in kHooks (or leave it empty)");

/* The hooks of recipe r when its family's GEMM cases run under it (its first recipe in the
 * registry); else NULL, with a message once per recipe. */
static const gemm_hooks *hooks_of(const qf_recipe *r) {
    static unsigned long long said;
    const unsigned long long bit = 1ull << ((r - qf_recipes) % 64);
    int nfam;
    const int rank = recipe_rank(r, &nfam);
    const gemm_hooks *h = (unsigned)r->family < QF_FAMILY_COUNT ? &kHooks[r->family] : NULL;
    if (h && h->check && rank == 0)
        return h;
    if (!(said & bit))
        printf(h && h->check ? "gpu_gemm: recipe %s: family %s's GEMM cases run under its first "
                               "recipe\n"
                             : "gpu_gemm: recipe %s: family %s has no GEMM test hooks yet "
                               "(kHooks); skipped\n",
               r->name, qf_family_name(r->family));
    said |= bit;
    return NULL;
}

/* }=====================================================================} */

/* {===================================================================== shared loops */

/* The shape plan of each family, under its first recipe. */
static void test_gemm_shapes(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    for (int r = 0; r < qf_recipe_count; r++) {
        const gemm_hooks *h = hooks_of(&qf_recipes[r]);
        if (!h)
            continue;
        const gemm_plan *p = h->plan;
        uint64_t seed = p->seed0;
        for (int i = 0; i < p->n_mn; i++)
            for (int j = 0; j < p->n_ks; j++) {
                const int64_t s[4] = {p->mn[i][0], p->mn[i][1], p->ks[j], (i + j) & 1};
                h->check(ctx, qf_recipes[r].name, s, seed++, "shape");
            }
        for (int i = 0; i < p->n_rows; i++)
            h->check(ctx, qf_recipes[r].name, p->rows[i], seed++, p->rows_what);
    }
    qf_ctx_free(ctx);
}

/* Check `which` (CHECK_*) of every family that has it, under its first recipe. */
static void for_each_family(int which) {
    qf_ctx_t *ctx = gpu_ctx();
    for (int r = 0; r < qf_recipe_count; r++) {
        const gemm_hooks *h = hooks_of(&qf_recipes[r]);
        if (h && h->checks[which])
            h->checks[which](ctx, qf_recipes[r].name);
    }
    qf_ctx_free(ctx);
}

static void test_gemm_scale_range(void **state) {
    (void)state;
    for_each_family(CHECK_SCALE_RANGE);
}

static void test_gemm_nan_scale(void **state) {
    (void)state;
    for_each_family(CHECK_NAN_SCALE);
}

/* QFUSE_TEST_QUICK=1 skips it. */
static void test_gemm_8192_timing(void **state) {
    (void)state;
    if (test_quick())
        skip();
    for_each_family(CHECK_TIMING_8192);
}

/* Without a device: every family's cuBLASLt descriptors. */
static void test_lt_descriptors(void **state) {
    (void)state;
    for (int f = 0; f < QF_FAMILY_COUNT; f++)
        if (kHooks[f].lt_descriptors)
            kHooks[f].lt_descriptors();
}

/* }=====================================================================} */

/* {===================================================================== mxfp8 without a GPU */

static const char *const kMxRecipe = "mxfp8"; /* the recipe of the argument checks */

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

static qf_status mx_args_call(qf_ctx_t *ctx, const char *recipe, arg_set *s) {
    const qf_quantized qa = gemm_rowwise_q(&s->a, &s->as, NULL, s->layout);
    const qf_quantized qb = gemm_rowwise_q(&s->b, &s->bs, NULL, s->layout);
    return gemm_rowwise(ctx, recipe, &qa, &qb, &s->bias, &s->y);
}

/* The call fails with status st and a message containing text. */
static void expect_fail(qf_ctx_t *ctx, arg_set *s, qf_status st, const char *text) {
    qf_status got = mx_args_call(ctx, kMxRecipe, s);
    if (got != st || !strstr(qf_last_error(), text))
        fail_msg("expected %s with \"%s\", got %s: %s", qf_status_name(st), text,
                 qf_status_name(got), qf_last_error());
}

static void test_mx_args_sm90(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 90));
    arg_set s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    /* valid: stops at launch */
    assert_int_equal(mx_args_call(ctx, kMxRecipe, &s), QF_ERR_NO_DEVICE);
    assert_non_null(strstr(qf_last_error(), "arguments are valid"));
    /* the family comes from the recipe: the FP8 GEMM finds no per-tensor scale_inv slot */
    assert_int_equal(mx_args_call(ctx, "fp8_delayed", &s), QF_ERR_INVALID_ARG);
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
    assert_int_equal(qf_gemm(ctx, kMxRecipe, NULL, &ob, NULL, &s.y, NULL), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "a is NULL"));
    s.a.data = NULL;
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "a.rowwise_data is NULL");
    qf_ctx_free(ctx);
    g_cases[QF_FAMILY_MXFP8]++;
}

/* Scales, output, bias: shapes, dtypes and alignment against what the op requires. */
static void test_mx_args_buffers(void **state) {
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
    g_cases[QF_FAMILY_MXFP8]++;
}

/* Blackwell: swizzled scales required, N % 16, then cuBLASLt (no device here: NO_DEVICE). */
static void test_mx_args_sm100(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 100));
    arg_set s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_SWIZZLED);
    assert_int_equal(mx_args_call(ctx, kMxRecipe, &s), QF_ERR_NO_DEVICE);
    s.layout = QF_SCALE_LAYOUT_COMPACT;
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "reads swizzled scales");
    s = args_valid(100, 72, 96, QF_SCALE_LAYOUT_SWIZZLED);
    expect_fail(ctx, &s, QF_ERR_INVALID_ARG, "N = 72 must be a multiple of 16");
    qf_ctx_free(ctx);
    g_cases[QF_FAMILY_MXFP8]++;
}
/* }=====================================================================} */

/* {===================================================================== nvfp4 without a GPU */

/* The kernel's alpha constant is the reference's fl(1/7225344), and alpha is rounded as
 * fl(fl(amax_a * amax_b) * rcp) (SPEC 2.4). */
static void test_nv_alpha_constant(void **state) {
    (void)state;
    const float rcp = qf_nvfp4_gemm_alpha_ref(1.0f, 1.0f);
    uint32_t bits;
    memcpy(&bits, &rcp, 4);
    assert_int_equal(bits, 0x34149b93u); /* kAlphaRcpBits of templates/sm90_nvfp4_gemm.cu */
    g_cases[QF_FAMILY_NVFP4]++;
}

/* }=====================================================================} */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lt_descriptors),      cmocka_unit_test(test_mx_args_sm90),
        cmocka_unit_test(test_mx_args_buffers),     cmocka_unit_test(test_mx_args_sm100),
        cmocka_unit_test(test_nv_alpha_constant),   cmocka_unit_test(test_gemm_shapes),
        cmocka_unit_test(test_gemm_scale_range),    cmocka_unit_test(test_gemm_nan_scale),
        cmocka_unit_test(test_gemm_8192_timing),
    };
    int rc = cmocka_run_group_tests_name("gpu_gemm", tests, NULL, NULL);
    for (int f = 0; f < QF_FAMILY_COUNT; f++)
        if (kHooks[f].summary)
            printf(kHooks[f].summary, g_cases[f]);
    return rc;
}
