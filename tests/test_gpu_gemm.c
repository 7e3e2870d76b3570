/* test_gpu_gemm.c: the GEMM of every family (qf_gemm, numerics 2, 6) against its fp64 reference, by
 * looping over the registry's recipes: each family has a row of hooks (kHooks: how a case is made
 * and checked, test_gpu_gemm_families.h; its shape plan; its scale-range, NaN-scale and 8192^3
 * timing checks, the last two shared by mxfp8 and nvfp4, which differ there only by their usual
 * operands and NaN bytes). A family's GEMM cases run once, under its first recipe in the registry
 * (the GEMM reads the operands' slots, no recipe option beyond the formats); a family without hooks
 * has its recipes skipped with a message. Shared loops: shape plans (ragged shapes, bias on and
 * off; mxfp8 and nvfp4 with padded scale bytes poisoned two ways, y bit-identical), the
 * scale-range checks (mxfp8: scale pairs past the fp32 range, the kernel's exact path; nvfp4:
 * every finite E4M3 scale, alpha 0, subnormal scales), a NaN scale reaching exactly its row (or
 * column), and the TFLOP/s at 8192^3 next to bf16 cuBLASLt measured in the same run
 * (QFUSE_TEST_QUICK=1 skips it). Without a GPU: the MXFP8 argument checks (a table of edits
 * to one valid argument set), the Blackwell path's cuBLASLt descriptors and the NVFP4 alpha
 * constant; the rest skips cleanly. Other argument checks: tests/test_api_errors.c. */
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

/* The checks of a family, each run under its first recipe: its shape plan (CHECK_SHAPES, every
 * family with hooks has one) and those of its row's checks[]. */
enum { CHECK_SHAPES = -1, CHECK_SCALE_RANGE, CHECK_NAN_SCALE, CHECK_TIMING_8192, CHECK_COUNT };
typedef struct gemm_hooks gemm_hooks;
typedef void (*gemm_check_fn)(qf_ctx_t *ctx, const char *recipe, const gemm_hooks *h);

/* A NaN scale byte written into a real entry: operand op (0: A, 1: B), its row and block. A
 * list of them ends with byte 0. */
typedef struct nan_scale {
    int op;
    int64_t row, block;
    uint8_t byte;
} nan_scale;

/* One family: its cases and checks; NULL: the family has none of that kind. */
struct gemm_hooks {
    const char *summary; /* printf format of the family's count line */
    void (*check)(qf_ctx_t *ctx, const char *recipe, const gemm_hooks *h, const int64_t s[4],
                  uint64_t seed, const char *what);
    const gemm_plan *plan;
    gemm_check_fn checks[CHECK_COUNT];
    void (*lt_descriptors)(void); /* without a device */
    /* Block-scaled families: the operands of a usual case (shape plan, NaN scales, 8192^3) and
     * the NaN scale bytes of CHECK_NAN_SCALE, one case each. */
    blk_gemm_case (*make)(int64_t M, int64_t N, int64_t K, int bias, uint64_t seed);
    const nan_scale *nan;
};

#define COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* 16 rows of an S x S result spread over M, at varying offsets inside a 128-row tile. */
static void sample_rows(int64_t S, int64_t rows[16]) {
    for (int i = 0; i < 16; i++)
        rows[i] = (i * (S / 16) + i * 37 % 128) % S;
    rows[15] = S - 1;
}

/* }=====================================================================} */

/* {===================================================================== fp8_delayed */

static void fp8_check(qf_ctx_t *ctx, const char *recipe, const gemm_hooks *h, const int64_t s[4],
                      uint64_t seed, const char *what) {
    (void)h, (void)what;
    fp8_gemm_case(ctx, recipe, s[0], s[1], s[2], (int)s[3], seed);
}

static const int64_t kFp8Shapes[][4] = {
    {1, 16, 16, 0}, {3, 32, 64, 1}, {217, 256, 384, 1}, {1000, 1536, 384, 1}, {512, 1024, 4096, 0}};
static const gemm_plan kFp8Plan = {NULL, 0, NULL, 0, kFp8Shapes, COUNTOF(kFp8Shapes), "shape", 1};

/* }=====================================================================} */

/* {===================================================================== mxfp8 and nvfp4 */

/* A case of the shape plan: the family's usual operands. */
static void blk_check(qf_ctx_t *ctx, const char *recipe, const gemm_hooks *h, const int64_t s[4],
                      uint64_t seed, const char *what) {
    blk_gemm_case c = h->make(s[0], s[1], s[2], (int)s[3], seed);
    c.recipe = recipe;
    blk_check_case(ctx, &c, what);
    blk_case_free(&c);
}

/* A NaN scale byte in a real entry of A makes exactly its row NaN, one of B exactly its column;
 * the rest stays finite. One 150 x 100 x 128 case per entry of h->nan, seeds 9, 10, ... */
static void blk_nan_scale(qf_ctx_t *ctx, const char *recipe, const gemm_hooks *h) {
    for (const nan_scale *p = h->nan; p->byte; p++) {
        blk_gemm_case c = h->make(150, 100, 128, 1, 9 + (uint64_t)(p - h->nan));
        c.recipe = recipe;
        (p->op ? c.bs : c.as)[p->row * c.sc + p->block] = p->byte;
        blk_case_upload(&c);
        uint16_t *y = blk_case_y(ctx, &c);
        int64_t first;
        const int64_t wrong = blk_nan_mismatches(&c, y, p->op ? -1 : p->row, p->op ? p->row : -1,
                                                 &first);
        if (wrong)
            fail_msg("NaN scale 0x%02X in %s_scale[%lld, %lld]: %lld elements wrong, first "
                     "y[%lld, %lld] = 0x%04x", p->byte, p->op ? "b" : "a", (long long)p->row,
                     (long long)p->block, (long long)wrong, (long long)(first / c.N),
                     (long long)(first % c.N), y[first]);
        free(y);
        blk_case_free(&c);
    }
    g_cases[recipe_of(recipe)->family]++;
}

/* The ways qf_gemm runs a block-scaled GEMM on sm_89..99 (QFUSE_HOPPER_GEMM, op_gemm.c): the
 * shape plan, scale ranges and NaN scales run under each. */
static const char *const kWays[] = {"direct", "staged"};

/* 8192^3 under each way: 16 sampled rows against the reference, then its TFLOP/s next to bf16
 * cuBLASLt's (the heuristic's first algorithm). */
static void blk_timing(qf_ctx_t *ctx, const char *recipe, const gemm_hooks *h) {
    const int64_t S = 8192;
    blk_gemm_case c = h->make(S, S, S, 1, 11);
    c.recipe = recipe;
    blk_case_upload(&c);
    double tf[COUNTOF(kWays)];
    for (int w = 0; w < COUNTOF(kWays); w++) {
        setenv("QFUSE_HOPPER_GEMM", kWays[w], 1);
        CK(cudaMemset(c.dy, 0xFF, (size_t)(S * S) * 2));
        float ms;
        QF_TIME_MEDIAN(ms, QF_OK_OR_FAIL(blk_case_run(ctx, &c)));
        uint16_t *y = malloc((size_t)(S * S) * 2);
        CK(cudaMemcpy(y, c.dy, (size_t)(S * S) * 2, cudaMemcpyDeviceToHost));
        int64_t rows[16];
        sample_rows(S, rows);
        const blk_case_err e = blk_case_check(&c, y, rows, 16);
        free(y);
        blk_report(&c, kWays[w], &e, -1);
        tf[w] = 2.0 * (double)S * S * S / (ms * 1e-3) / 1e12;
    }
    unsetenv("QFUSE_HOPPER_GEMM");
    const blk_gemm_fmt *f = c.f;
    blk_case_free(&c);
    const double lt = bf16_lt_tflops(S);
    printf("%s 8192^3: direct %.1f TFLOP/s, staged %.1f TFLOP/s; bf16 cuBLASLt: %.1f TFLOP/s\n",
           f->label, tf[0], tf[1], lt);
    g_cases[f->family]++;
}

/* The shapes of the Blackwell path's cuBLASLt descriptors. */
static const int64_t kLtShapes[][3] = {{128, 128, 32}, {8192, 8192, 8192}, {1, 16, 96}};

/* }=====================================================================} */

/* {===================================================================== mxfp8 */

/* Scale bytes 120..134 for both operands, element exponent fields <= 15. */
static blk_gemm_case mx_case_usual(int64_t M, int64_t N, int64_t K, int bias, uint64_t seed) {
    return mx_case_make(M, N, K, bias, 120, 134, 120, 134, 15, seed);
}

/* The last: 17 x 11 output tiles of the sm_90a kernel (128 x 256), more than an H200's 132
 * SMs, so its persistent blocks walk two tiles each (a raster group of one tile row at the end,
 * three k-tiles, the last one partial). */
static const int64_t kMxShapes[][4] = {
    {32, 32, 32, 0},     {96, 64, 64, 1},      {1, 1, 32, 0},        {130, 7, 96, 1},
    {257, 129, 160, 1},  {993, 1024, 1024, 0}, {1024, 993, 1024, 1}, {320, 200, 2016, 1},
    {2100, 2600, 160, 1},
};
static const gemm_plan kMxPlan = {NULL, 0, NULL, 0, kMxShapes, COUNTOF(kMxShapes), "shape", 100};

/* A scales near 2^115, B near 2^11: products up to 2^130 overflow fp32 although every result
 * (small elements) is finite, so the kernel must take its exact path for these k-tiles. */
static void mx_exact_path(qf_ctx_t *ctx, const char *recipe, const gemm_hooks *h) {
    (void)h;
    blk_gemm_case c = mx_case_make(200, 136, 96, 0, 236, 244, 136, 140, 2, 7);
    c.recipe = recipe;
    blk_check_case(ctx, &c, "exact path");
    blk_case_free(&c);
}

/* 0xFF (NaN) in A's row 7, block 2. */
static const nan_scale kMxNan[] = {{0, 7, 2, 0xFF}, {0}};

/* The Blackwell path's cuBLASLt descriptors and layouts (VEC32_UE8M0 scale modes, TN, bias
 * epilogue) build without a device: what can be checked of a path that cannot run here. */
static void mx_lt_descriptors(void) {
    for (int i = 0; i < COUNTOF(kLtShapes); i++)
        for (int bias = 0; bias < 2; bias++) {
            QF_OK_OR_FAIL(qf_gemm_lt_mxfp8_describe(kLtShapes[i][0], kLtShapes[i][1],
                                                    kLtShapes[i][2], QF_DTYPE_E4M3, QF_DTYPE_E4M3,
                                                    bias));
            QF_OK_OR_FAIL(qf_gemm_lt_mxfp8_describe(kLtShapes[i][0], kLtShapes[i][1],
                                                    kLtShapes[i][2], QF_DTYPE_E5M2, QF_DTYPE_E4M3,
                                                    bias));
        }
    g_cases[QF_FAMILY_MXFP8]++;
}

/* }=====================================================================} */

/* {===================================================================== nvfp4 */

static const scale_range kRealistic = {0x20, 0x7E, 0}; /* 2^-3 .. 448, as a quantizer gives */

static blk_gemm_case nv_case_usual(int64_t M, int64_t N, int64_t K, int bias, uint64_t seed) {
    return nv_case_make(M, N, K, bias, kRealistic, seed);
}

/* M, N in {1, 17, 100, 129} (partial tiles), K in {32, 64, 96, 1024, 8192} (partial k-tiles,
 * scale rows of 2 and 6 real blocks next to padding), bias on and off; then several tiles and
 * more than one raster group of tile rows, the last with more tiles of the sm_90a kernel than an
 * H200 has SMs (as in kMxShapes). */
static const int64_t kNvMN[][2] = {{1, 1}, {17, 100}, {100, 17}, {129, 129}, {1, 129}, {17, 1}};
static const int64_t kNvKs[] = {32, 64, 96, 1024, 8192};
static const int64_t kNvTiles[][4] = {{1100, 260, 96, 1},    {257, 1000, 544, 0},
                                      {1024, 1024, 1024, 1}, {300, 130, 2080, 0},
                                      {2100, 2600, 160, 1}};
static const gemm_plan kNvPlan = {kNvMN,    COUNTOF(kNvMN),    kNvKs, COUNTOF(kNvKs),
                                  kNvTiles, COUNTOF(kNvTiles), "tiles", 100};

/* Every finite E4M3 scale byte, positive and negative (0x00 .. 0x7E | sign), with zero amaxes in
 * one operand too (alpha 0: y = bias exactly); then only the E4M3 subnormal scales 2^-9 and 2^-8:
 * most tensor-core operands are then f16 subnormals (deq x 2^-7 < 2^-14 when |E2M1| < 4 at 2^-9,
 * < 2 at 2^-8), so y is right only if the MMA keeps f16 subnormals (flushed, most products would
 * vanish: far outside the bound). */
static void nv_scale_range(qf_ctx_t *ctx, const char *recipe, const gemm_hooks *h) {
    (void)h;
    const scale_range all = {0x00, 0x7E, 1};
    blk_gemm_case c = nv_case_make(200, 136, 1024, 1, all, 7);
    c.recipe = recipe;
    blk_check_case(ctx, &c, "all scales");
    blk_case_free(&c);
    c = nv_case_make(64, 48, 256, 1, all, 8);
    c.recipe = recipe;
    c.amax_b = 0.0f;
    blk_check_case(ctx, &c, "alpha 0");
    blk_case_free(&c);
    const scale_range sub = {0x01, 0x02, 0};
    c = nv_case_make(130, 72, 512, 0, sub, 9);
    c.recipe = recipe;
    c.amax_a = 2688.0f, c.amax_b = 2688.0f; /* alpha = 1: y of order 1e-4, well inside bf16 */
    blk_check_case(ctx, &c, "subnormal");
    blk_case_free(&c);
}

/* 0x7F (NaN) in A's row 7, block 2; 0xFF in B's row (= y column) 99, its last real block. */
static const nan_scale kNvNan[] = {{0, 7, 2, 0x7F}, {1, 99, 7, 0xFF}, {0}};

/* The Blackwell path's cuBLASLt descriptors and layouts (FP4 E2M1 operands, VEC16_UE4M3 scale
 * modes, device pointer mode, TN, bias epilogue) build without a device: what can be checked of
 * a path that cannot run here. */
static void nv_lt_descriptors(void) {
    for (int i = 0; i < COUNTOF(kLtShapes); i++)
        for (int bias = 0; bias < 2; bias++)
            QF_OK_OR_FAIL(qf_gemm_lt_nvfp4_describe(kLtShapes[i][0], kLtShapes[i][1],
                                                    kLtShapes[i][2], bias));
    g_cases[QF_FAMILY_NVFP4]++;
}
/* }=====================================================================} */

/* {===================================================================== the hooks table */

/* The checks of a block-scaled family: its own scale range, the shared NaN-scale and 8192^3. */
#define BLK_CHECKS(scale_range)                                                               \
    {[CHECK_SCALE_RANGE] = (scale_range), [CHECK_NAN_SCALE] = blk_nan_scale,                  \
     [CHECK_TIMING_8192] = blk_timing}

/* One row per family; an empty row: no GEMM hooks yet (its recipes are skipped with a message).
 * fp8_current (numerics 2.2) runs the per-tensor FP8 GEMM: fp8_delayed's row, its own summary. */
static const gemm_hooks kHooks[QF_FAMILY_COUNT] = {
    [QF_FAMILY_FP8_DELAYED] = {.summary = "test_gpu_fp8_gemm: %d cases checked\n",
                               .check = fp8_check, .plan = &kFp8Plan},
    [QF_FAMILY_FP8_CURRENT] = {.summary = "test_gpu_fp8_current_gemm: %d cases checked\n",
                               .check = fp8_check, .plan = &kFp8Plan},
    [QF_FAMILY_MXFP8] = {.summary = "test_gpu_mxfp8_gemm: %d cases checked\n",
                         .check = blk_check, .plan = &kMxPlan, .make = mx_case_usual,
                         .checks = BLK_CHECKS(mx_exact_path), .nan = kMxNan,
                         .lt_descriptors = mx_lt_descriptors},
    [QF_FAMILY_NVFP4] = {.summary = "test_gpu_nvfp4_gemm: %d cases checked\n",
                         .check = blk_check, .plan = &kNvPlan, .make = nv_case_usual,
                         .checks = BLK_CHECKS(nv_scale_range), .nan = kNvNan,
                         .lt_descriptors = nv_lt_descriptors},
};
static_assert(QF_FAMILY_COUNT == 5, "a new family: give it a row in kHooks (or leave it empty)");

#undef BLK_CHECKS

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

/* The shape plan of family h, under recipe. */
static void run_plan(qf_ctx_t *ctx, const char *recipe, const gemm_hooks *h) {
    const gemm_plan *p = h->plan;
    uint64_t seed = p->seed0;
    for (int i = 0; i < p->n_mn; i++)
        for (int j = 0; j < p->n_ks; j++) {
            const int64_t s[4] = {p->mn[i][0], p->mn[i][1], p->ks[j], (i + j) & 1};
            h->check(ctx, recipe, h, s, seed++, "shape");
        }
    for (int i = 0; i < p->n_rows; i++)
        h->check(ctx, recipe, h, p->rows[i], seed++, p->rows_what);
}

/* Check `which` (CHECK_*) of every family that has it, under its first recipe; a block-scaled
 * family whose GEMM runs either way on this GPU (QF_GEMM_KERNEL) runs it under each of kWays
 * (the 8192^3 timing does so itself). */
static void for_each_family(int which) {
    qf_ctx_t *ctx = gpu_ctx();
    for (int r = 0; r < qf_recipe_count; r++) {
        const gemm_hooks *h = hooks_of(&qf_recipes[r]);
        const gemm_check_fn fn = !h ? NULL : which == CHECK_SHAPES ? run_plan : h->checks[which];
        if (!fn)
            continue;
        const int ways = h->make && which != CHECK_TIMING_8192 &&
                                 qf_family_gemm_path(qf_recipes[r].family, qf_ctx_arch(ctx))
                                         .engine == QF_GEMM_KERNEL
                             ? COUNTOF(kWays)
                             : 1;
        for (int w = 0; w < ways; w++) {
            if (ways > 1) {
                setenv("QFUSE_HOPPER_GEMM", kWays[w], 1);
                printf("gpu_gemm: %s GEMMs %s\n", qf_recipes[r].name, kWays[w]);
            }
            fn(ctx, qf_recipes[r].name, h);
        }
        unsetenv("QFUSE_HOPPER_GEMM");
    }
    qf_ctx_free(ctx);
}

/* Check test_arg(state) (CHECK_*) of every family; QFUSE_TEST_QUICK=1 skips the 8192^3 one. */
static void test_gemm_check(void **state) {
    const int which = test_arg(state);
    if (which == CHECK_TIMING_8192 && test_quick()) {
        printf("skipped: the 8192^3 timing under QFUSE_TEST_QUICK=1\n");
        skip();
    }
    for_each_family(which);
}

/* The cmocka test `name` of check `which`. */
#define GEMM_CHECK_TEST(name, which) QF_TEST_ARG(name, test_gemm_check, which)

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

/* The call under recipe fails (or stops) with status st and a message containing text. */
static void expect_fail(qf_ctx_t *ctx, const char *recipe, arg_set *s, qf_status st,
                        const char *text) {
    qf_status got = mx_args_call(ctx, recipe, s);
    if (got != st || !strstr(qf_last_error(), text))
        fail_msg("expected %s with \"%s\", got %s: %s", qf_status_name(st), text,
                 qf_status_name(got), qf_last_error());
}

/* The tests of the argument checks (kArgChecks). */
enum { ARGS_SM90, ARGS_BUFFERS, ARGS_SM100 };

/* The one change an argument check makes to a tensor of the valid set. */
enum { EDIT_NONE, EDIT_DIM0, EDIT_DIM1, EDIT_DTYPE, EDIT_SHIFT, EDIT_NO_DATA };

/* One argument check: the valid arguments of 100 x N x K (64 x 96 unless given), compact scales
 * unless swizzled, on a host context of compute capability arch (90 unless given), with at most
 * one tensor edited; the call under recipe (kMxRecipe unless given) must give status
 * (QF_ERR_INVALID_ARG unless given) and a message containing text. */
typedef struct arg_check {
    int test; /* ARGS_*: the cmocka test that runs it */
    int arch;
    int64_t N, K;
    int swizzled;
    int edit;      /* EDIT_* of the tensor at offset `tensor` in arg_set */
    size_t tensor;
    int64_t value; /* EDIT_DIM0/DIM1: the dim; EDIT_DTYPE: the dtype; EDIT_SHIFT: bytes added */
    const char *recipe;
    qf_status status;
    const char *text;
} arg_check;

#define EDIT(t, how, v) .edit = EDIT_##how, .tensor = offsetof(arg_set, t), .value = (v)

static const arg_check kArgChecks[] = {
    /* sm_90: valid arguments stop at launch; the family comes from the recipe (the FP8 GEMM
     * finds no per-tensor scale_inv slot); the operand dtype, K, the scale layout, NULL data */
    {ARGS_SM90, .status = QF_ERR_NO_DEVICE, .text = "arguments are valid"},
    {ARGS_SM90, .recipe = "fp8_delayed", .text = "a.scale_inv is NULL"},
    {ARGS_SM90, EDIT(a, DTYPE, QF_DTYPE_E5M2),
     .text = "a.rowwise_data.dtype is e5m2; expected e4m3 (recipe 'mxfp8' quantizes the input"},
    {ARGS_SM90, .K = 80, .text = "K = 80 is not a multiple of 32"},
    {ARGS_SM90, EDIT(b, DIM1, 64), .text = "but a.rowwise_data has K = 96"},
    {ARGS_SM90, .swizzled = 1, .text = "reads compact scales"},
    {ARGS_SM90, EDIT(a, NO_DATA, 0), .text = "a.rowwise_data.data is NULL"},
    /* scales (unpadded rows, unpadded blocks), output, bias: shapes, dtypes and alignment */
    {ARGS_BUFFERS, EDIT(as, DIM0, 100), .text = "a.rowwise_scale_inv has 400 elements"},
    {ARGS_BUFFERS, EDIT(bs, DIM1, 3), .text = "b.rowwise_scale_inv has"},
    {ARGS_BUFFERS, EDIT(y, DTYPE, QF_DTYPE_FP16), .text = "y.dtype is fp16; a GEMM writes bf16"},
    {ARGS_BUFFERS, EDIT(bias, DIM0, 63), .text = "bias has 63 elements"},
    {ARGS_BUFFERS, EDIT(a, SHIFT, 8), .text = "is not 16-byte aligned"},
    /* Blackwell: swizzled scales required, N % 16, then cuBLASLt (no device here: NO_DEVICE) */
    {ARGS_SM100, .arch = 100, .swizzled = 1, .status = QF_ERR_NO_DEVICE, .text = ""},
    {ARGS_SM100, .arch = 100, .text = "reads swizzled scales"},
    {ARGS_SM100, .arch = 100, .N = 72, .swizzled = 1, .text = "N = 72 must be a multiple of 16"},
};

#undef EDIT

/* Applies the edit of k to s. */
static void arg_edit(arg_set *s, const arg_check *k) {
    qf_tensor *t = (qf_tensor *)((char *)s + k->tensor);
    if (k->edit == EDIT_DIM0)
        t->dims[0] = k->value;
    else if (k->edit == EDIT_DIM1)
        t->dims[1] = k->value;
    else if (k->edit == EDIT_DTYPE)
        t->dtype = (qf_dtype)k->value;
    else if (k->edit == EDIT_SHIFT)
        t->data = (char *)t->data + k->value;
    else if (k->edit == EDIT_NO_DATA)
        t->data = NULL;
}

/* Runs the argument checks of one test (ARGS_*), each on a fresh host context. */
static void run_arg_checks(int test) {
    for (int i = 0; i < COUNTOF(kArgChecks); i++) {
        const arg_check *k = &kArgChecks[i];
        if (k->test != test)
            continue;
        qf_ctx_t *ctx = NULL;
        QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, k->arch ? k->arch : 90));
        arg_set s = args_valid(100, k->N ? k->N : 64, k->K ? k->K : 96,
                               k->swizzled ? QF_SCALE_LAYOUT_SWIZZLED : QF_SCALE_LAYOUT_COMPACT);
        arg_edit(&s, k);
        expect_fail(ctx, k->recipe ? k->recipe : kMxRecipe, &s,
                    k->status != QF_OK ? k->status : QF_ERR_INVALID_ARG, k->text);
        qf_ctx_free(ctx);
    }
    g_cases[QF_FAMILY_MXFP8]++;
}

/* A columnwise MXFP8 copy of a [R, C] tensor (not transposed; 32x1 blocks down R, numerics 2.3):
 * data at FAKE(data), its scales [roundup(cdiv(R,32),4), roundup(C,128)] at FAKE(data + 1). */
static qf_quantized mx_columnwise_q(int64_t R, int64_t C, int data) {
    qf_quantized q = {.layout = QF_SCALE_LAYOUT_COMPACT};
    q.t[QF_SLOT_COLUMNWISE_DATA] = (qf_tensor){FAKE(data), QF_DTYPE_E4M3, 2, {R, C}};
    q.t[QF_SLOT_COLUMNWISE_SCALE_INV] =
        (qf_tensor){FAKE(data + 1), QF_DTYPE_E8M0, 2, {((R + 31) / 32 + 3) / 4 * 4,
                                                     (C + 127) / 128 * 128}};
    return q;
}

/* qf_gemm of operands a, b on ctx gives status st and a message containing text. */
static void expect_gemm(qf_ctx_t *ctx, const qf_operand *a, const qf_operand *b, qf_tensor *y,
                        qf_status st, const char *text) {
    const qf_status got = qf_gemm(ctx, kMxRecipe, a, b, NULL, y, NULL);
    if (got != st || !strstr(qf_last_error(), text))
        fail_msg("expected %s with \"%s\", got %s: %s", qf_status_name(st), text,
                 qf_status_name(got), qf_last_error());
}

/* sm_90: the ARGS_SM90 rows, then no operand a at all, then dgrad and wgrad, which read the
 * columnwise copies as they are stored ([K, N] and [K, M]: the staged path): valid ones stop at
 * launch, a wrong K, a scale matrix of the rowwise shape and the wrong dtype are refused; on
 * sm_100, whose cuBLASLt path reads K-major operands only, dgrad is not implemented. */
static void test_mx_args_sm90(void **state) {
    (void)state;
    run_arg_checks(ARGS_SM90);
    qf_ctx_t *ctx = NULL;
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 90));
    arg_set s = args_valid(100, 64, 96, QF_SCALE_LAYOUT_COMPACT);
    const qf_quantized qb = gemm_rowwise_q(&s.b, &s.bs, NULL, s.layout);
    const qf_operand ob = {&qb, QF_COPY_ROWWISE};
    assert_int_equal(qf_gemm(ctx, kMxRecipe, NULL, &ob, NULL, &s.y, NULL), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "a is NULL"));
    /* dgrad: dy [100, 96] rowwise (a), W [96, 64] columnwise (b) -> y [100, 64] */
    const qf_quantized qa = gemm_rowwise_q(&s.a, &s.as, NULL, s.layout);
    qf_quantized qw = mx_columnwise_q(96, 64, 7);
    const qf_operand oa = {&qa, QF_COPY_ROWWISE}, ow = {&qw, QF_COPY_COLUMNWISE};
    expect_gemm(ctx, &oa, &ow, &s.y, QF_ERR_NO_DEVICE, "arguments are valid");
    qw.t[QF_SLOT_COLUMNWISE_DATA].dims[0] = 64;
    expect_gemm(ctx, &oa, &ow, &s.y, QF_ERR_INVALID_ARG,
                "b.columnwise_data is [64, 64], a K of 64, but a.rowwise_data has K = 96 (dgrad "
                "GEMM: a is [M, K], b is [K, N])");
    qw = mx_columnwise_q(96, 64, 7);
    qw.t[QF_SLOT_COLUMNWISE_SCALE_INV].dims[0] = 128; /* the rowwise copy's scale shape */
    qw.t[QF_SLOT_COLUMNWISE_SCALE_INV].dims[1] = 4;
    expect_gemm(ctx, &oa, &ow, &s.y, QF_ERR_INVALID_ARG, "b.columnwise_scale_inv");
    qw = mx_columnwise_q(96, 64, 7);
    qw.t[QF_SLOT_COLUMNWISE_DATA].dtype = QF_DTYPE_E5M2;
    expect_gemm(ctx, &oa, &ow, &s.y, QF_ERR_INVALID_ARG, "b.columnwise_data.dtype is e5m2");
    /* wgrad: dy [96, 100] and x [96, 64] columnwise -> dW [100, 64] (K = 96 tokens) */
    qw = mx_columnwise_q(96, 64, 7);
    const qf_quantized qd = mx_columnwise_q(96, 100, 9);
    const qf_operand od = {&qd, QF_COPY_COLUMNWISE};
    expect_gemm(ctx, &od, &ow, &s.y, QF_ERR_NO_DEVICE, "arguments are valid");
    qf_ctx_free(ctx);
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 100));
    expect_gemm(ctx, &oa, &ow, &s.y, QF_ERR_UNSUPPORTED,
                "the dgrad GEMM (a rowwise, b columnwise) is not implemented for mxfp8 on "
                "sm_100, which runs fprop");
    qf_ctx_free(ctx);
}

/* The ARGS_* rows test_arg(state): scales, output and bias (ARGS_BUFFERS); Blackwell's swizzled
 * scales, N % 16, then cuBLASLt (ARGS_SM100). */
static void test_mx_args(void **state) {
    run_arg_checks(test_arg(state));
}
/* }=====================================================================} */

/* {===================================================================== nvfp4 without a GPU */

/* The kernel's alpha constant is the reference's fl(1/7225344), and alpha is rounded as
 * fl(fl(amax_a * amax_b) * rcp) (numerics 2.4). */
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
        cmocka_unit_test(test_lt_descriptors), cmocka_unit_test(test_mx_args_sm90),
        QF_TEST_ARG(test_mx_args_buffers, test_mx_args, ARGS_BUFFERS),
        QF_TEST_ARG(test_mx_args_sm100, test_mx_args, ARGS_SM100),
        cmocka_unit_test(test_nv_alpha_constant),
        GEMM_CHECK_TEST(test_gemm_shapes, CHECK_SHAPES),
        GEMM_CHECK_TEST(test_gemm_scale_range, CHECK_SCALE_RANGE),
        GEMM_CHECK_TEST(test_gemm_nan_scale, CHECK_NAN_SCALE),
        GEMM_CHECK_TEST(test_gemm_8192_timing, CHECK_TIMING_8192),
    };
    qf_test_filter_from_env("gpu_gemm", tests);
    int rc = cmocka_run_group_tests_name("gpu_gemm", tests, NULL, NULL);
    for (int f = 0; f < QF_FAMILY_COUNT; f++)
        if (kHooks[f].summary)
            printf(kHooks[f].summary, g_cases[f]);
    return rc;
}
