/* test_api_gemm.c: bad input at qf_gemm (per-tensor FP8 and NVFP4 operands; MXFP8 ones are in
 * test_gpu_mxfp8_gemm.c) and qf_layernorm_linear_fwd, the same API under a recipe loaded from a
 * .lua file, and the slot-name table. As in test_api_errors.c: a device-less sm_90 context,
 * valid arguments stop with QF_ERR_NO_DEVICE, every message is asserted. */
#include "test_api_util.h"

/* {===================================================================== qf_gemm, per-tensor FP8 */

typedef struct gemm_args {
    qf_ctx_t *ctx;
    qf_quantized qa, qb;
    qf_tensor bias, y;
    qf_copy copy_a, copy_b;
} gemm_args;

/* y [M, N] bf16 = A [M, K] E4M3 x B [N, K] E4M3 ^T + bias [N] bf16, fp32 [1] scale_inv slots. */
static gemm_args gemm_valid(void **state) {
    gemm_args g = {.ctx = *state, .copy_a = QF_COPY_ROWWISE, .copy_b = QF_COPY_ROWWISE};
    g.qa.t[QF_SLOT_ROWWISE_DATA] = t2(slot(0), QF_DTYPE_E4M3, M, K);
    g.qb.t[QF_SLOT_ROWWISE_DATA] = t2(slot(1), QF_DTYPE_E4M3, N, K);
    g.bias = t1(slot(2), QF_DTYPE_BF16, N);
    g.y = t2(slot(3), QF_DTYPE_BF16, M, N);
    g.qa.t[QF_SLOT_SCALE_INV] = t1(slot(4), QF_DTYPE_FP32, 1);
    g.qb.t[QF_SLOT_SCALE_INV] = t1(slot(5), QF_DTYPE_FP32, 1);
    return g;
}

static qf_status gemm_run(gemm_args *g) {
    const qf_operand a = {&g->qa, g->copy_a}, b = {&g->qb, g->copy_b};
    return qf_gemm(g->ctx, kRecipe, &a, &b, &g->bias, &g->y, NULL);
}

/* A test of one change to gemm_valid's arguments (QF_BAD_ARG_TEST). */
#define GEMM_TEST(name, change, ...)                                                               \
    QF_BAD_ARG_TEST(name, gemm_args, gemm_valid, gemm_run, change, __VA_ARGS__)

static void test_gemm_valid_reaches_device(void **state) {
    gemm_args g = gemm_valid(state);
    expect(gemm_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    g.y.dtype = QF_DTYPE_FP32; /* fp32 output: the fake shapes with QF_OUT_FP32 */
    expect(gemm_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
}

GEMM_TEST(test_gemm_k_not_multiple_of_16,
          a.qa.t[QF_SLOT_ROWWISE_DATA].dims[1] = a.qb.t[QF_SLOT_ROWWISE_DATA].dims[1] = 24,
          QF_ERR_INVALID_ARG, "K = 24 is not a multiple of 16",
          "K = 24, N = 32: in a wgrad K is the token count")

GEMM_TEST(test_gemm_n_not_multiple_of_16,
          a.qb.t[QF_SLOT_ROWWISE_DATA].dims[0] = a.y.dims[1] = a.bias.dims[0] = 24,
          QF_ERR_INVALID_ARG, "N = 24 is not a multiple of 16")

GEMM_TEST(test_gemm_wrong_a_dtype, a.qa.t[QF_SLOT_ROWWISE_DATA].dtype = QF_DTYPE_BF16,
          QF_ERR_INVALID_ARG,
          "a.rowwise_data must be e4m3 or e5m2 and b.rowwise_data e4m3 (got bf16, e4m3)")

GEMM_TEST(test_gemm_y_too_small, a.y.dims[1] = N / 2, QF_ERR_INVALID_ARG,
          "y has 64 elements (last dim 16); the shape function requires 128 (last dim 32)")

GEMM_TEST(test_gemm_bias_wrong_length, a.bias.dims[0] = N - 1, QF_ERR_INVALID_ARG,
          "bias has 31 elements", "requires 32")

GEMM_TEST(test_gemm_misaligned_a,
          a.qa.t[QF_SLOT_ROWWISE_DATA].data = (char *)a.qa.t[QF_SLOT_ROWWISE_DATA].data + 1,
          QF_ERR_INVALID_ARG, "a.rowwise_data.data", "is not 16-byte aligned")

/* cuBLASLt rejects a scale pointer off a 16-byte boundary with "not supported"; the op names it. */
GEMM_TEST(test_gemm_misaligned_scale_inv,
          a.qb.t[QF_SLOT_SCALE_INV].data = (float *)a.qb.t[QF_SLOT_SCALE_INV].data + 1,
          QF_ERR_INVALID_ARG, "qf_gemm: b.scale_inv", "is not 16-byte aligned")

static void test_gemm_null_scale_inv(void **state) {
    gemm_args g = gemm_valid(state);
    g.qb.t[QF_SLOT_SCALE_INV].data = NULL;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: b.scale_inv is NULL");
    g = gemm_valid(state);
    g.qa.t[QF_SLOT_SCALE_INV].dtype = QF_DTYPE_BF16;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "a.scale_inv.dtype is bf16; expected fp32");
}

/* FP8 GEMMs need sm_89: a context for an older GPU cannot be made (qf_ctx_init says
 * QF_ERR_UNSUPPORTED for such a device; qf_ctx_init_host rejects the arch). */
static void test_gemm_arch_too_old(void **state) {
    gemm_args g = gemm_valid(state);
    expect(qf_ctx_init_host(&g.ctx, 80), QF_ERR_INVALID_ARG, "arch 80", "89..199");
    assert_null(g.ctx);
}

/* Operands: NULL ones are named. */
static void test_gemm_operands(void **state) {
    gemm_args g = gemm_valid(state);
    const qf_operand b = {&g.qb, QF_COPY_ROWWISE}, no_q = {NULL, QF_COPY_ROWWISE};
    expect(qf_gemm(g.ctx, kRecipe, NULL, &b, NULL, &g.y, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: a is NULL");
    expect(qf_gemm(g.ctx, kRecipe, &b, &no_q, NULL, &g.y, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: b->q is NULL");
    expect(qf_gemm(g.ctx, kRecipe, &b, &b, NULL, NULL, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: y is NULL");
    g.copy_a = (qf_copy)5;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: a->copy 5 is not a qf_copy");
}

/* The training GEMMs by their copies (numerics 6): the per-tensor FP8 columnwise copies are
 * transposed, so dgrad (a rowwise, b columnwise) and wgrad (both columnwise) are TN GEMMs on
 * those copies' data; b columnwise with a rowwise is no training GEMM. */
static void test_gemm_training_copies(void **state) {
    gemm_args g = gemm_valid(state);
    g.qa.t[QF_SLOT_COLUMNWISE_DATA] = g.qa.t[QF_SLOT_ROWWISE_DATA];
    g.qb.t[QF_SLOT_COLUMNWISE_DATA] = g.qb.t[QF_SLOT_ROWWISE_DATA];
    g.qa.t[QF_SLOT_ROWWISE_DATA].data = g.qb.t[QF_SLOT_ROWWISE_DATA].data = NULL;
    g.copy_b = QF_COPY_COLUMNWISE;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: a.rowwise_data.data is NULL"); /* dgrad */
    g.copy_a = QF_COPY_COLUMNWISE; /* wgrad reads only the columnwise copies */
    expect(gemm_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    g.qa.t[QF_SLOT_COLUMNWISE_DATA].dims[1] = 32;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, /* K from a's copy */
           "qf_gemm: b.columnwise_data has K = 64 but a.columnwise_data has K = 32");
    g = gemm_valid(state);
    g.qb.t[QF_SLOT_COLUMNWISE_DATA] = g.qb.t[QF_SLOT_ROWWISE_DATA];
    g.copy_b = QF_COPY_COLUMNWISE;
    expect(gemm_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid"); /* dgrad */
    g.copy_a = QF_COPY_COLUMNWISE;
    g.copy_b = QF_COPY_ROWWISE;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: a is the columnwise copy and b the "
           "rowwise one; no training GEMM reads that pair");
}

/* =====================================================================} */

/* {===================================================================== qf_layernorm_linear_fwd */

typedef struct ll_args {
    qf_ctx_t *ctx;
    qf_tensor x, y;
    qf_ln_linear ll;
} ll_args;

/* x [M, K] bf16 -> y [M, N] bf16 with weight [N, K] bf16, quantized this call. */
static ll_args ll_valid(void **state) {
    ll_args a = {.ctx = *state};
    qf_ln_linear *ll = &a.ll;
    a.x = t2(slot(0), QF_DTYPE_BF16, M, K);
    a.y = t2(slot(1), QF_DTYPE_BF16, M, N);
    ll->norm = (qf_norm_desc){.norm = QF_NORM_LAYERNORM, .eps = 1e-5f};
    ll->weight_changed = 1;
    ll->norm.gamma = t1(slot(2), QF_DTYPE_BF16, K), ll->norm.beta = t1(slot(3), QF_DTYPE_BF16, K);
    ll->weight = t2(slot(4), QF_DTYPE_BF16, N, K);
    ll->bias = t1(slot(5), QF_DTYPE_BF16, N);
    ll->x_scale = slot(6), ll->w_scale = slot(7);
    ll->xq.t[QF_SLOT_ROWWISE_DATA] = t2(slot(8), QF_DTYPE_E4M3, M, K);
    ll->xq.t[QF_SLOT_AMAX] = t1(slot(9), QF_DTYPE_FP32, 1);
    ll->xq.t[QF_SLOT_SCALE_INV] = t1(slot(10), QF_DTYPE_FP32, 1);
    ll->wq.t[QF_SLOT_ROWWISE_DATA] = t2(slot(11), QF_DTYPE_E4M3, N, K);
    ll->wq.t[QF_SLOT_AMAX] = t1(slot(12), QF_DTYPE_FP32, 1);
    ll->wq.t[QF_SLOT_SCALE_INV] = t1(slot(13), QF_DTYPE_FP32, 1);
    ll->xq.t[QF_SLOT_MU] = t1(slot(14), QF_DTYPE_FP32, M);
    ll->xq.t[QF_SLOT_RSIGMA] = t1(slot(15), QF_DTYPE_FP32, M);
    return a;
}

static qf_status ll_run(ll_args *a, const char *recipe) {
    return qf_layernorm_linear_fwd(a->ctx, recipe, &a->x, &a->ll, &a->y, NULL);
}

static void test_ll_valid_reaches_device(void **state) {
    ll_args a = ll_valid(state);
    expect(ll_run(&a, kRecipe), QF_ERR_NO_DEVICE, "qf_layernorm_linear_fwd: quantizing "
           "ll->weight", "arguments are valid");
    assert_int_equal(a.ll.weight_changed, 1); /* nothing ran, so the weight is still stale */
}

/* The same state struct under an MXFP8 recipe: E8M0 scale slots [128, roundup(64/32, 4)]. */
static void test_ll_mxfp8_valid_reaches_device(void **state) {
    ll_args a = ll_valid(state);
    a.ll.xq.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(9), QF_DTYPE_E8M0, 128, 4);
    a.ll.wq.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(12), QF_DTYPE_E8M0, 128, 4);
    expect(ll_run(&a, "mxfp8"), QF_ERR_NO_DEVICE, "qf_layernorm_linear_fwd: quantizing "
           "ll->weight", "arguments are valid");
    a.ll.wq.layout = QF_SCALE_LAYOUT_SWIZZLED; /* the GEMM of sm_90 reads compact scales */
    expect(ll_run(&a, "mxfp8"), QF_ERR_INVALID_ARG, "GEMM of ll->xq and ll->wq",
           "scale layouts 0 and 1");
}

/* ll->wq_bf16 (the weight's kept bf16 copies, rowwise [32, 64]): accepted under MXFP8 (the
 * forward only: its rowwise copy; the GEMM then reads it, staged); refused by name where it
 * overlaps y (by the GEMM stage) or the weight (across stages), and under a per-tensor FP8
 * recipe, before any stage. */
static void test_ll_kept_weight(void **state) {
    ll_args a = ll_valid(state);
    a.ll.xq.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(9), QF_DTYPE_E8M0, 128, 4);
    a.ll.wq.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(12), QF_DTYPE_E8M0, 128, 4);
    void *const k0 = (char *)slot(14) + 65536, *const k1 = (char *)slot(15) + 65536; /* free */
    a.ll.wq_bf16[QF_COPY_ROWWISE] = t2(k0, QF_DTYPE_BF16, N, K);
    expect(ll_run(&a, "mxfp8"), QF_ERR_NO_DEVICE, "arguments are valid");
    a.ll.wq_bf16[QF_COPY_ROWWISE].data = a.y.data;
    expect(ll_run(&a, "mxfp8"), QF_ERR_INVALID_ARG, "qf_layernorm_linear_fwd: GEMM of ll->xq",
           "opts->b_dequantized (", "and y (", "overlap"); /* the GEMM stage's own check */
    a.ll.wq_bf16[QF_COPY_ROWWISE].data = a.ll.weight.data;
    expect(ll_run(&a, "mxfp8"), QF_ERR_INVALID_ARG, "ll->wq_bf16[0] (", "and ll->weight (",
           "overlap");
    a.ll.wq_bf16[QF_COPY_ROWWISE].data = k0;
    a.ll.wq_bf16[QF_COPY_COLUMNWISE] = t2(k1, QF_DTYPE_BF16, N, K);
    expect(ll_run(&a, "mxfp8"), QF_ERR_INVALID_ARG, "dequantizing ll->wq into ll->wq_bf16",
           "the columnwise copy, ll->wq_bf16[1]: qf_dequantize: x.columnwise_data");
    a = ll_valid(state); /* fp8_delayed: its GEMM multiplies the FP8 bytes */
    a.ll.wq_bf16[QF_COPY_COLUMNWISE] = t2(k1, QF_DTYPE_BF16, N, K);
    expect(ll_run(&a, kRecipe), QF_ERR_INVALID_ARG, "qf_layernorm_linear_fwd: ll->wq_bf16[1] is "
           "set, but recipe 'fp8_delayed' (fp8_delayed) on sm_90 multiplies its quantized copies "
           "directly", "leave it NULL");
}

static void test_ll_weight_k_mismatch(void **state) {
    ll_args a = ll_valid(state);
    a.ll.weight.dims[1] = 48;
    expect(ll_run(&a, kRecipe), QF_ERR_INVALID_ARG, "qf_layernorm_linear_fwd: ll->weight is "
           "[32, 48]; its last dimension must equal x's K = 64");
}

/* The GEMM's bias is checked before the first stage runs: on this context the weight stage would
 * have returned QF_ERR_NO_DEVICE, so INVALID_ARG from the GEMM proves the dry run came first. */
static void test_ll_bad_bias_checked_before_any_stage(void **state) {
    ll_args a = ll_valid(state);
    a.ll.bias.dims[0] = N - 1;
    expect(ll_run(&a, kRecipe), QF_ERR_INVALID_ARG, "qf_layernorm_linear_fwd: GEMM of ll->xq",
           "bias has 31 elements");
}

static void test_ll_null_y(void **state) {
    ll_args a = ll_valid(state);
    expect(qf_layernorm_linear_fwd(a.ctx, kRecipe, &a.x, &a.ll, NULL, NULL), QF_ERR_INVALID_ARG,
           "qf_layernorm_linear_fwd: y is NULL");
    a.ll.norm.norm = QF_NORM_NONE;
    expect(ll_run(&a, kRecipe), QF_ERR_INVALID_ARG, "ll->norm.norm 0 is not QF_NORM_LAYERNORM");
}

/* =====================================================================} */

/* {===================================================================== qf_gemm, NVFP4 */

#define NVG_M 100
#define NVG_N 64
#define NVG_K 96

typedef struct nvg_args {
    qf_ctx_t *ctx;
    const char *recipe;
    qf_quantized qa, qb;
    qf_tensor bias, y;
    qf_scale_layout layout;
    qf_copy copy_a, copy_b;
    qf_gemm_opts opts;
} nvg_args;

/* y [100, 64] bf16 = A [100, 96/2] E2M1 x B [64, 96/2] E2M1 ^T + bias, compact E4M3 scales
 * [128, roundup(96/16, 4) = 8], amaxes fp32 [1]. */
static nvg_args nvg_valid(void **state) {
    nvg_args g = {.ctx = *state, .recipe = "nvfp4", .layout = QF_SCALE_LAYOUT_COMPACT,
                  .copy_a = QF_COPY_ROWWISE, .copy_b = QF_COPY_ROWWISE};
    g.qa.t[QF_SLOT_ROWWISE_DATA] = t2(slot(0), QF_DTYPE_E2M1, NVG_M, NVG_K / 2);
    g.qa.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(1), QF_DTYPE_E4M3, 128, 8);
    g.qa.t[QF_SLOT_AMAX_ROWWISE] = t1(slot(2), QF_DTYPE_FP32, 1);
    g.qb.t[QF_SLOT_ROWWISE_DATA] = t2(slot(3), QF_DTYPE_E2M1, NVG_N, NVG_K / 2);
    g.qb.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(4), QF_DTYPE_E4M3, 128, 8);
    g.qb.t[QF_SLOT_AMAX_ROWWISE] = t1(slot(5), QF_DTYPE_FP32, 1);
    g.bias = t1(slot(6), QF_DTYPE_BF16, NVG_N);
    g.y = t2(slot(7), QF_DTYPE_BF16, NVG_M, NVG_N);
    return g;
}

static qf_status nvg_run(nvg_args *g) {
    g->qa.layout = g->qb.layout = g->layout;
    const qf_operand a = {&g->qa, g->copy_a}, b = {&g->qb, g->copy_b};
    return qf_gemm_ex(g->ctx, g->recipe, &a, &b, &g->bias, &g->y, &g->opts, NULL);
}

/* Slot s of operand a (0) or b (1). */
static qf_tensor *nvg_slot(nvg_args *g, int which, qf_slot s) {
    return which ? &g->qb.t[s] : &g->qa.t[s];
}

/* On fresh nvg_valid arguments `a` changed by `change`, nvg_run returns the status that follows
 * (expect_changed). */
#define NVG_EXPECT(change, ...) expect_changed(nvg_args, nvg_valid, nvg_run, change, __VA_ARGS__)
/* A test of one change to nvg_valid's arguments (QF_BAD_ARG_TEST). */
#define NVG_TEST(name, change, ...)                                                                \
    QF_BAD_ARG_TEST(name, nvg_args, nvg_valid, nvg_run, change, __VA_ARGS__)

static void test_nvg_valid_reaches_device(void **state) {
    nvg_args g = nvg_valid(state);
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    g.bias.data = NULL; /* no bias */
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    g = nvg_valid(state);
    g.recipe = "nvfp4_nort";
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
}

/* wgrad from NVFP4's columnwise copies (transposed, RHT along M): valid when both copies carry the
 * transform or neither does; a recipe with the RHT on only one of them is refused, naming both. */
static void test_nvg_wgrad_copies(void **state) {
    nvg_args g = nvg_valid(state);
    static const qf_slot row[] = {QF_SLOT_ROWWISE_DATA, QF_SLOT_ROWWISE_SCALE_INV,
                                  QF_SLOT_AMAX_ROWWISE},
                         col[] = {QF_SLOT_COLUMNWISE_DATA, QF_SLOT_COLUMNWISE_SCALE_INV,
                                  QF_SLOT_AMAX_COLUMNWISE};
    for (int i = 0; i < 3; i++) { /* the copies' slots, the rowwise ones emptied */
        g.qa.t[col[i]] = g.qa.t[row[i]];
        g.qb.t[col[i]] = g.qb.t[row[i]];
        g.qa.t[row[i]].data = g.qb.t[row[i]].data = NULL;
    }
    g.copy_a = g.copy_b = QF_COPY_COLUMNWISE;
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    g.recipe = "nvfp4_nort";
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    g.qb.t[QF_SLOT_AMAX_COLUMNWISE].data = NULL;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: b.amax_columnwise is NULL");
    g.qb.t[QF_SLOT_AMAX_COLUMNWISE] = g.qa.t[QF_SLOT_AMAX_COLUMNWISE];
    qf_test_dir d;
    qf_test_dir_make(&d, "api_nv_rht");
    g.recipe = qf_test_dir_write(d.path, "half_rht.lua",
                                 "return {family = 'nvfp4', rht_input = false, rht_grad = true}");
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "applies the RHT to the columnwise copy of grad but "
           "not of input", "set rht_input = rht_grad");
    g.copy_a = QF_COPY_ROWWISE; /* dgrad (no RHT on either copy it reads) is fine */
    g.qa.t[QF_SLOT_ROWWISE_DATA] = g.qa.t[QF_SLOT_COLUMNWISE_DATA];
    g.qa.t[QF_SLOT_ROWWISE_SCALE_INV] = g.qa.t[QF_SLOT_COLUMNWISE_SCALE_INV];
    g.qa.t[QF_SLOT_AMAX_ROWWISE] = g.qa.t[QF_SLOT_AMAX_COLUMNWISE];
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    qf_test_dir_remove(d.path);
}

static void test_nvg_null_pointers(void **state) {
    nvg_args g = nvg_valid(state);
    const qf_operand oa = {&g.qa, QF_COPY_ROWWISE}, ob = {&g.qb, QF_COPY_ROWWISE};
    expect(qf_gemm(NULL, "nvfp4", &oa, &ob, NULL, &g.y, NULL), QF_ERR_INVALID_ARG, "ctx");
    expect(qf_gemm(g.ctx, "nvfp4", NULL, &ob, NULL, &g.y, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: a is NULL");
    expect(qf_gemm(g.ctx, "nvfp4", &oa, &ob, NULL, NULL, NULL), QF_ERR_INVALID_ARG, "qf_gemm: y");
    NVG_EXPECT(nvg_slot(&a, 1, QF_SLOT_ROWWISE_SCALE_INV)->data = NULL, QF_ERR_INVALID_ARG,
               "qf_gemm: b.rowwise_scale_inv");
    NVG_EXPECT(nvg_slot(&a, 1, QF_SLOT_ROWWISE_DATA)->data = NULL, QF_ERR_INVALID_ARG,
               "qf_gemm: b.rowwise_data");
}

static void test_nvg_missing_amax(void **state) {
    NVG_EXPECT(nvg_slot(&a, 0, QF_SLOT_AMAX_ROWWISE)->data = NULL, QF_ERR_INVALID_ARG,
               "qf_gemm: a.amax_rowwise is NULL");
    NVG_EXPECT(nvg_slot(&a, 1, QF_SLOT_AMAX_ROWWISE)->data = NULL, QF_ERR_INVALID_ARG,
               "qf_gemm: b.amax_rowwise");
    NVG_EXPECT(nvg_slot(&a, 1, QF_SLOT_AMAX_ROWWISE)->dtype = QF_DTYPE_BF16, QF_ERR_INVALID_ARG,
               "b.amax_rowwise.dtype is bf16; expected fp32");
    NVG_EXPECT(nvg_slot(&a, 0, QF_SLOT_AMAX_ROWWISE)->dims[0] = 2, QF_ERR_INVALID_ARG,
               "a.amax_rowwise has 2 elements");
}

/* K = 80: whole 1x16 blocks, not whole 16-byte rows. */
NVG_TEST(test_nvg_k_not_multiple_of_32,
         (nvg_slot(&a, 0, QF_SLOT_ROWWISE_DATA)->dims[1] = 40,
          nvg_slot(&a, 1, QF_SLOT_ROWWISE_DATA)->dims[1] = 40),
         QF_ERR_INVALID_ARG, "qf_gemm: K = 80 is not a multiple of 32")

/* y shares no byte with what the GEMM reads: the operands' data, scales and amaxes, the bias
 * (each would race with the kernel's own stores). */
static void test_nvg_y_apart_from_inputs(void **state) {
    NVG_EXPECT(a.y.data = slot(0), QF_ERR_INVALID_ARG, "qf_gemm: y (", "and a.rowwise_data (",
               "overlap");
    NVG_EXPECT(a.y.data = slot(4), QF_ERR_INVALID_ARG, "qf_gemm: y (",
               "and b.rowwise_scale_inv (", "overlap");
    NVG_EXPECT(a.y.data = slot(5), QF_ERR_INVALID_ARG, "qf_gemm: y (", "and b.amax_rowwise (",
               "overlap");
    NVG_EXPECT(a.y.data = slot(6), QF_ERR_INVALID_ARG, "qf_gemm: y (", "and bias (", "overlap");
    gemm_args g = gemm_valid(state); /* per-tensor FP8: the cuBLASLt path's own checks */
    g.y.data = slot(1);
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: y (", "and b.rowwise_data (", "overlap");
}

NVG_TEST(test_nvg_k_mismatch, nvg_slot(&a, 1, QF_SLOT_ROWWISE_DATA)->dims[1] = 32,
         QF_ERR_INVALID_ARG, "b.rowwise_data is [N=64, K/2=32] bytes but a.rowwise_data has K = 96")

static void test_nvg_wrong_dtypes(void **state) {
    NVG_EXPECT(nvg_slot(&a, 0, QF_SLOT_ROWWISE_DATA)->dtype = QF_DTYPE_E4M3, QF_ERR_INVALID_ARG,
               "a.rowwise_data.dtype is e4m3; expected e2m1");
    NVG_EXPECT(nvg_slot(&a, 1, QF_SLOT_ROWWISE_SCALE_INV)->dtype = QF_DTYPE_E8M0,
               QF_ERR_INVALID_ARG, "b.rowwise_scale_inv.dtype is e8m0; expected e4m3");
    NVG_EXPECT(a.y.dtype = QF_DTYPE_FP16, QF_ERR_INVALID_ARG,
               "y.dtype is fp16; a GEMM writes bf16, or fp32");
    NVG_EXPECT(a.bias.dtype = QF_DTYPE_FP16, QF_ERR_INVALID_ARG,
               "bias.dtype is fp16; expected bf16");
}

/* An fp32 y is valid (fake shapes with QF_OUT_FP32), and so is accumulating into it without a
 * bias; accumulating into bf16, with a bias or with a flag other than 0 or 1 is not. */
static void test_nvg_fp32_and_accumulate(void **state) {
    NVG_EXPECT(a.y.dtype = QF_DTYPE_FP32, QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    NVG_EXPECT((a.y.dtype = QF_DTYPE_FP32, a.bias.data = NULL, a.opts.accumulate = 1),
               QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    NVG_EXPECT((a.bias.data = NULL, a.opts.accumulate = 1), QF_ERR_INVALID_ARG,
               "opts->accumulate adds into y, which is bf16");
    NVG_EXPECT((a.y.dtype = QF_DTYPE_FP32, a.opts.accumulate = 1), QF_ERR_INVALID_ARG,
               "a bias with opts->accumulate");
    NVG_EXPECT(a.opts.accumulate = 2, QF_ERR_INVALID_ARG, "opts->accumulate is 2");
    NVG_EXPECT(a.opts.reserved[3] = 1, QF_ERR_INVALID_ARG, "opts->reserved[3] is 1; it must be 0");
    qf_shape sh[2];
    int n = 0;
    /* {op, role, norm, outputs, M, N, K, dtype} (test_api_util.h defines M, N and K) */
    const qf_shape_query q = {QF_OP_GEMM, QF_ROLE_INPUT, QF_NORM_NONE, QF_OUT_FP32, NVG_M, NVG_N,
                              NVG_K, QF_DTYPE_BF16};
    assert_int_equal(qf_fake_shapes("nvfp4", &q, sh, 2, &n), QF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(sh[0].dtype, QF_DTYPE_FP32);
    assert_int_equal(sh[0].bytes, 4u * NVG_M * NVG_N);
}

static void test_nvg_wrong_sizes(void **state) {
    /* unpacked: K = 192 */
    NVG_EXPECT(nvg_slot(&a, 0, QF_SLOT_ROWWISE_DATA)->dims[1] = NVG_K, QF_ERR_INVALID_ARG,
               "but a.rowwise_data has K = 192");
    /* unpadded rows */
    NVG_EXPECT(nvg_slot(&a, 0, QF_SLOT_ROWWISE_SCALE_INV)->dims[0] = NVG_M, QF_ERR_INVALID_ARG,
               "a.rowwise_scale_inv has 800 elements");
    /* unpadded blocks */
    NVG_EXPECT(nvg_slot(&a, 1, QF_SLOT_ROWWISE_SCALE_INV)->dims[1] = 6, QF_ERR_INVALID_ARG,
               "b.rowwise_scale_inv has 768 elements");
    NVG_EXPECT(a.y.dims[0] = NVG_M - 1, QF_ERR_INVALID_ARG, "y has");
    NVG_EXPECT(a.bias.dims[0] = NVG_N - 1, QF_ERR_INVALID_ARG, "bias has 63 elements");
    NVG_EXPECT(nvg_slot(&a, 1, QF_SLOT_ROWWISE_DATA)->data =
                   (char *)a.qb.t[QF_SLOT_ROWWISE_DATA].data + 8,
               QF_ERR_INVALID_ARG, "b.rowwise_data.data", "is not 16-byte aligned");
}

/* Compact scales on sm_89..99 (the generated kernel), swizzled on sm_100+ (cuBLASLt); a and b
 * share one layout. */
static void test_nvg_layout_for_arch(void **state) {
    nvg_args g = nvg_valid(state);
    g.layout = QF_SCALE_LAYOUT_SWIZZLED;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "on sm_90 the GEMM is qfuse's generated kernel",
           "QF_SCALE_LAYOUT_COMPACT");
    g.layout = (qf_scale_layout)5;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "layout 5 is not a qf_scale_layout");
    qf_ctx_t *c100 = NULL;
    assert_int_equal(qf_ctx_init_host(&c100, 100), QF_OK);
    g = nvg_valid(state);
    g.ctx = c100;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "on sm_100 the GEMM is cuBLASLt's VEC16_UE4M3",
           "QF_SCALE_LAYOUT_SWIZZLED");
    g.layout = QF_SCALE_LAYOUT_SWIZZLED;
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    nvg_slot(&g, 1, QF_SLOT_ROWWISE_DATA)->dims[0] = g.y.dims[1] = g.bias.dims[0] = 40;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "N = 40 must be a multiple of 16 on sm_100");
    qf_ctx_free(c100);
    g = nvg_valid(state);
    g.qb.layout = QF_SCALE_LAYOUT_SWIZZLED;
    const qf_operand a = {&g.qa, QF_COPY_ROWWISE}, b = {&g.qb, QF_COPY_ROWWISE};
    expect(qf_gemm(g.ctx, g.recipe, &a, &b, NULL, &g.y, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: a and b have scale layouts 0 and 1");
}

/* The family comes from the recipe: NVFP4 operands under an MXFP8 recipe are the wrong dtype. */
static void test_nvg_arch_and_family(void **state) {
    nvg_args g = nvg_valid(state);
    g.recipe = "mxfp8";
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "a.rowwise_data.dtype is e2m1; expected e4m3",
           "recipe 'mxfp8' quantizes the input role to it");
    g.recipe = "no_such_recipe";
    expect(nvg_run(&g), QF_ERR_NOT_FOUND, "no_such_recipe");
}

/* =====================================================================} */

/* {===================================================================== run-time recipes */

/* A recipe loaded from a .lua path at run time takes the same API: its fake shapes come from its
 * family's table (the loaded entry has no generated shape function), its kernels from the file. */
static void test_recipe_file_same_api(void **state) {
    qf_test_dir d;
    qf_test_dir_make(&d, "api_recipe");
    const char *path = qf_test_dir_write(d.path, "user_mx.lua", "return {family = 'mxfp8'}");
    ll_args a = ll_valid(state);
    a.ll.xq.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(9), QF_DTYPE_E8M0, 128, 4);
    a.ll.wq.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(12), QF_DTYPE_E8M0, 128, 4);
    expect(ll_run(&a, path), QF_ERR_NO_DEVICE, "qf_layernorm_linear_fwd: quantizing ll->weight",
           "arguments are valid");
    a.ll.xq.t[QF_SLOT_ROWWISE_SCALE_INV].dims[0] = 64; /* unpadded rows */
    expect(qf_quantize(a.ctx, path, QF_ROLE_INPUT, &a.x, &a.ll.norm, NULL, NULL, &a.ll.xq, NULL),
           QF_ERR_INVALID_ARG, "out->rowwise_scale_inv has 256 elements", "requires 512");
    qf_test_dir_remove(d.path);
}

/* fp8_block's GEMM (cuBLASLt block scales, numerics 2.5): the fprop of y [100, 64] = A [100, 96]
 * (1x128 scales [1, 100]) x W [64, 96] (128x128 tiles [1, 4]) reaches the device with compact
 * scales; operands quantized with another layout, or with two layouts, are refused by the
 * GEMM-path checks every family's GEMM takes (the layout is not ignored: fp8_block has one). */
static void test_fbg_layout(void **state) {
    nvg_args g = {.ctx = *state, .recipe = "fp8_block", .layout = QF_SCALE_LAYOUT_COMPACT,
                  .copy_a = QF_COPY_ROWWISE, .copy_b = QF_COPY_ROWWISE};
    g.qa.t[QF_SLOT_ROWWISE_DATA] = t2(slot(0), QF_DTYPE_E4M3, NVG_M, NVG_K);
    g.qa.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(1), QF_DTYPE_FP32, 1, NVG_M);
    g.qb.t[QF_SLOT_ROWWISE_DATA] = t2(slot(3), QF_DTYPE_E4M3, NVG_N, NVG_K);
    g.qb.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(4), QF_DTYPE_FP32, 1, 4);
    g.bias = t1(slot(6), QF_DTYPE_BF16, NVG_N);
    g.y = t2(slot(7), QF_DTYPE_BF16, NVG_M, NVG_N);
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    g.layout = QF_SCALE_LAYOUT_SWIZZLED;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: on sm_90 the GEMM is cuBLASLt's "
           "VEC128_32F/BLK128x128_32F mode, which reads compact scales; quantize with layout "
           "QF_SCALE_LAYOUT_COMPACT");
    g.layout = (qf_scale_layout)7;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: layout 7 is not a qf_scale_layout");
    g.qa.layout = QF_SCALE_LAYOUT_COMPACT, g.qb.layout = QF_SCALE_LAYOUT_SWIZZLED;
    const qf_operand a = {&g.qa, QF_COPY_ROWWISE}, b = {&g.qb, QF_COPY_ROWWISE};
    expect(qf_gemm(g.ctx, "fp8_block", &a, &b, &g.bias, &g.y, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: a and b have scale layouts 0 and 1");
    g.qb.layout = QF_SCALE_LAYOUT_COMPACT; /* the path's arch: sm_90 and newer */
    qf_ctx_t *c89 = NULL;
    assert_int_equal(qf_ctx_init_host(&c89, 89), QF_OK);
    expect(qf_gemm(c89, "fp8_block", &a, &b, &g.bias, &g.y, NULL), QF_ERR_UNSUPPORTED,
           "qf_gemm: FP8_BLOCK GEMMs need sm_90 or newer; device is sm_89");
    qf_ctx_free(c89);
}

/* opts->b_dequantized, b's bf16 copy [N, K] in elements: valid with a matching bf16 tensor,
 * refused with the wrong dims, dtype or alignment, and under a per-tensor FP8 recipe. */
static void test_nvg_b_dequantized(void **state) {
    qf_tensor kept = t2(slot(8), QF_DTYPE_BF16, NVG_N, NVG_K), bad = kept;
    NVG_EXPECT(a.opts.b_dequantized = &kept, QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    NVG_EXPECT((a.opts.b_dequantized = &kept, a.y.dtype = QF_DTYPE_FP32, a.bias.data = NULL,
                a.opts.accumulate = 1), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    bad.dims[1] = NVG_K / 2; /* the packed bytes, not the elements */
    NVG_EXPECT(a.opts.b_dequantized = &bad, QF_ERR_INVALID_ARG,
               "qf_gemm: opts->b_dequantized has 3072 elements (last dim 48); the shape function "
               "requires 6144 (last dim 96)");
    bad = kept, bad.dtype = QF_DTYPE_FP32;
    NVG_EXPECT(a.opts.b_dequantized = &bad, QF_ERR_INVALID_ARG,
               "opts->b_dequantized.dtype is fp32; expected bf16");
    bad = kept, bad.data = (char *)slot(8) + 2;
    NVG_EXPECT(a.opts.b_dequantized = &bad, QF_ERR_INVALID_ARG,
               "opts->b_dequantized.data", "is not 16-byte aligned");
    bad = kept, bad.data = NULL;
    NVG_EXPECT(a.opts.b_dequantized = &bad, QF_ERR_INVALID_ARG,
               "opts->b_dequantized is NULL (its data); expected bf16 [64, 96]");
    bad = kept, bad.data = slot(7); /* y's memory: the GEMM would overwrite its own operand */
    NVG_EXPECT(a.opts.b_dequantized = &bad, QF_ERR_INVALID_ARG, "qf_gemm: opts->b_dequantized (",
               "and y (", "overlap");
    bad = kept, bad.data = slot(0); /* a's data: written by a caller's dequantize, read here */
    NVG_EXPECT(a.opts.b_dequantized = &bad, QF_ERR_INVALID_ARG, "qf_gemm: opts->b_dequantized (",
               "and a.rowwise_data (", "overlap");
    gemm_args g = gemm_valid(state); /* fp8_delayed: cuBLASLt multiplies the FP8 bytes */
    const qf_operand fa = {&g.qa, g.copy_a}, fb = {&g.qb, g.copy_b};
    const qf_tensor fk = t2(slot(8), QF_DTYPE_BF16, N, K);
    const qf_gemm_opts o = {.b_dequantized = &fk};
    expect(qf_gemm_ex(g.ctx, kRecipe, &fa, &fb, &g.bias, &g.y, &o, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: opts->b_dequantized is set, but recipe 'fp8_delayed' (fp8_delayed) "
           "multiplies its FP8 operands directly");
}

/* qf_dequantize of one copy: the NVFP4 rowwise copy [100, 96] (elements) and an MXFP8
 * columnwise copy stored [K, N] = [64, 32] (32x1 blocks, E8M0 scales [4, 128]) reach the device
 * with an out of their dims; bad arguments are named. */
static void test_dequantize_args(void **state) {
    nvg_args g = nvg_valid(state);
    qf_tensor out = t2(slot(8), QF_DTYPE_BF16, NVG_M, NVG_K);
    qf_operand x = {&g.qa, QF_COPY_ROWWISE};
    expect(qf_dequantize(g.ctx, "nvfp4", QF_ROLE_INPUT, &x, &out, NULL), QF_ERR_NO_DEVICE,
           "qf_dequantize: arguments are valid");
    out.dims[0] = NVG_M - 1;
    expect(qf_dequantize(g.ctx, "nvfp4", QF_ROLE_INPUT, &x, &out, NULL), QF_ERR_INVALID_ARG,
           "qf_dequantize: out has 9504 elements", "requires 9600 (last dim 96)");
    out.dims[0] = NVG_M;
    expect(qf_dequantize(g.ctx, "nvfp4", QF_ROLE_INPUT, &x, NULL, NULL), QF_ERR_INVALID_ARG,
           "qf_dequantize: out is NULL (its data); expected bf16 [100, 96]");
    expect(qf_dequantize(g.ctx, "nvfp4", (qf_role)7, &x, &out, NULL), QF_ERR_INVALID_ARG,
           "qf_dequantize: role 7 is not a qf_role");
    out.data = slot(1); /* over x's scales */
    expect(qf_dequantize(g.ctx, "nvfp4", QF_ROLE_INPUT, &x, &out, NULL), QF_ERR_INVALID_ARG,
           "qf_dequantize: out (", "and x.rowwise_scale_inv (", "overlap");
    out.data = slot(8);
    expect(qf_dequantize(g.ctx, "nvfp4", QF_ROLE_INPUT, NULL, &out, NULL), QF_ERR_INVALID_ARG,
           "qf_dequantize: x is NULL");
    expect(qf_dequantize(g.ctx, "fp8_delayed", QF_ROLE_INPUT, &x, &out, NULL),
           QF_ERR_UNSUPPORTED, "recipe 'fp8_delayed' (fp8_delayed): only MXFP8 and NVFP4");
    g.qa.t[QF_SLOT_ROWWISE_SCALE_INV].dims[0] = 64;
    expect(qf_dequantize(g.ctx, "nvfp4", QF_ROLE_INPUT, &x, &out, NULL), QF_ERR_INVALID_ARG,
           "x.rowwise_scale_inv has 512 elements");
    g.qa.layout = QF_SCALE_LAYOUT_SWIZZLED;
    expect(qf_dequantize(g.ctx, "nvfp4", QF_ROLE_INPUT, &x, &out, NULL), QF_ERR_INVALID_ARG,
           "qf_dequantize: x has scale layout 1 (QF_SCALE_LAYOUT_SWIZZLED); it reads compact "
           "scales");
    expect(qf_dequantize(g.ctx, "fp8_delayed", QF_ROLE_INPUT, &x, &out, NULL),
           QF_ERR_UNSUPPORTED, "only MXFP8 and NVFP4"); /* the family first: FP8 has no layout */
    g = nvg_valid(state);
    g.qa.t[QF_SLOT_ROWWISE_DATA].dims[0] = 1; /* [1, 2^59 - 1] bytes: 2^60 - 2 elements */
    g.qa.t[QF_SLOT_ROWWISE_DATA].dims[1] = ((int64_t)1 << 59) - 1;
    out.dims[0] = 1, out.dims[1] = ((int64_t)1 << 60) - 2;
    expect(qf_dequantize(g.ctx, "nvfp4", QF_ROLE_INPUT, &x, &out, NULL), QF_ERR_INVALID_ARG,
           "x.rowwise_scale_inv would need more than 2^63 elements");
    /* MXFP8 takes any K, with a shorter last block: K = 144 has roundup(cdiv(144,32),4) = 8
     * scale columns */
    qf_quantized qr = {0};
    qr.t[QF_SLOT_ROWWISE_DATA] = t2(slot(12), QF_DTYPE_E4M3, 128, 144);
    qr.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(13), QF_DTYPE_E8M0, 128, 8);
    const qf_operand xr = {&qr, QF_COPY_ROWWISE};
    qf_tensor orow = t2(slot(14), QF_DTYPE_BF16, 128, 144);
    expect(qf_dequantize(g.ctx, "mxfp8", QF_ROLE_INPUT, &xr, &orow, NULL), QF_ERR_NO_DEVICE,
           "qf_dequantize: arguments are valid");
    qr.t[QF_SLOT_ROWWISE_SCALE_INV].dims[1] = 4;
    expect(qf_dequantize(g.ctx, "mxfp8", QF_ROLE_INPUT, &xr, &orow, NULL), QF_ERR_INVALID_ARG,
           "x.rowwise_scale_inv has 512 elements (last dim 4); the shape function requires 1024 "
           "(last dim 8)");
    qf_quantized q = {0};
    q.t[QF_SLOT_COLUMNWISE_DATA] = t2(slot(9), QF_DTYPE_E4M3, K, N);
    q.t[QF_SLOT_COLUMNWISE_SCALE_INV] = t2(slot(10), QF_DTYPE_E8M0, 4, 128);
    const qf_operand xc = {&q, QF_COPY_COLUMNWISE};
    qf_tensor oc = t2(slot(11), QF_DTYPE_BF16, K, N);
    expect(qf_dequantize(g.ctx, "mxfp8", QF_ROLE_WEIGHT, &xc, &oc, NULL), QF_ERR_NO_DEVICE,
           "qf_dequantize: arguments are valid");
    oc = t2(slot(11), QF_DTYPE_BF16, N, K); /* as the GEMM multiplies it, not as stored */
    expect(qf_dequantize(g.ctx, "mxfp8", QF_ROLE_WEIGHT, &xc, &oc, NULL), QF_ERR_INVALID_ARG,
           "out has 2048 elements (last dim 64); the shape function requires 2048 (last dim 32)");
    q.t[QF_SLOT_COLUMNWISE_DATA].dtype = QF_DTYPE_E2M1;
    expect(qf_dequantize(g.ctx, "mxfp8", QF_ROLE_WEIGHT, &xc, &oc, NULL), QF_ERR_INVALID_ARG,
           "x.columnwise_data.dtype is e2m1; expected e4m3");
}

/* qf_dequantized_dims: the dims qf_dequantize's out must have, from the copy's data slot: the
 * NVFP4 rowwise copy [100, 48] packed bytes -> [100, 96], MXFP8's columnwise copy as stored,
 * a 3-D copy viewed 2-D; bad arguments are named. */
static void test_dequantized_dims(void **state) {
    nvg_args g = nvg_valid(state);
    int64_t d[2] = {0, 0};
    assert_int_equal(qf_dequantized_dims(&g.qa, QF_COPY_ROWWISE, d), QF_OK);
    assert_int_equal(d[0], NVG_M), assert_int_equal(d[1], NVG_K);
    qf_tensor out = t2(slot(8), QF_DTYPE_BF16, d[0], d[1]); /* what qf_dequantize accepts */
    const qf_operand x = {&g.qa, QF_COPY_ROWWISE};
    expect(qf_dequantize(g.ctx, "nvfp4", QF_ROLE_INPUT, &x, &out, NULL), QF_ERR_NO_DEVICE,
           "qf_dequantize: arguments are valid");
    qf_quantized q = {0};
    q.t[QF_SLOT_COLUMNWISE_DATA] = t2(NULL, QF_DTYPE_E4M3, K, N); /* dims only: no data */
    assert_int_equal(qf_dequantized_dims(&q, QF_COPY_COLUMNWISE, d), QF_OK);
    assert_int_equal(d[0], K), assert_int_equal(d[1], N);
    q.t[QF_SLOT_COLUMNWISE_DATA].ndim = 3, q.t[QF_SLOT_COLUMNWISE_DATA].dims[2] = 8;
    assert_int_equal(qf_dequantized_dims(&q, QF_COPY_COLUMNWISE, d), QF_OK);
    assert_int_equal(d[0], K * N), assert_int_equal(d[1], 8);
    expect(qf_dequantized_dims(&q, QF_COPY_ROWWISE, d), QF_ERR_INVALID_ARG,
           "qf_dequantized_dims: the rowwise copy's data slot has dtype fp32; expected a "
           "quantized element format");
    q.t[QF_SLOT_ROWWISE_DATA].dtype = QF_DTYPE_E4M3;
    expect(qf_dequantized_dims(&q, QF_COPY_ROWWISE, d), QF_ERR_INVALID_ARG,
           "the rowwise copy's data slot has ndim 0 (1..8); give it its fake shape");
    q.t[QF_SLOT_ROWWISE_DATA] = t2(NULL, QF_DTYPE_E2M1, 1, INT64_MAX); /* 2^64 - 2 elements */
    expect(qf_dequantized_dims(&q, QF_COPY_ROWWISE, d), QF_ERR_INVALID_ARG,
           "more elements than an int64 counts");
    q.t[QF_SLOT_ROWWISE_DATA] = t2(NULL, QF_DTYPE_E2M1, (int64_t)1 << 40, (int64_t)1 << 22);
    expect(qf_dequantized_dims(&q, QF_COPY_ROWWISE, d), QF_ERR_INVALID_ARG,
           "holds 4611686018427387904 bytes"); /* 2^62 bytes: 2^63 elements */
    q.t[QF_SLOT_ROWWISE_DATA].dims[1] = -4;
    expect(qf_dequantized_dims(&q, QF_COPY_ROWWISE, d), QF_ERR_INVALID_ARG,
           "has ndim 2 and no elements, or too many");
    expect(qf_dequantized_dims(&q, (qf_copy)2, d), QF_ERR_INVALID_ARG,
           "copy 2 is not a qf_copy");
    expect(qf_dequantized_dims(NULL, QF_COPY_ROWWISE, d), QF_ERR_INVALID_ARG, "q is NULL");
    expect(qf_dequantized_dims(&q, QF_COPY_ROWWISE, NULL), QF_ERR_INVALID_ARG, "dims is NULL");
}

/* =====================================================================} */

/* {===================================================================== slot names */

/* The slot table names every output the fake-shape functions list, and nothing else. */
static void test_slot_names(void **state) {
    (void)state;
    for (int s = 0; s < QF_SLOT_COUNT; s++) {
        assert_non_null(qf_slot_name((qf_slot)s));
        assert_int_equal(qf_slot_from_name(qf_slot_name((qf_slot)s)), s);
    }
    assert_null(qf_slot_name(QF_SLOT_COUNT));
    assert_int_equal(qf_slot_from_name("y"), -1);
    assert_int_equal(qf_slot_from_name(NULL), -1);
    assert_string_equal(qf_slot_name(QF_SLOT_AMAX_COLUMNWISE), "amax_columnwise");
    assert_string_equal(qf_family_name(QF_FAMILY_NVFP4), "nvfp4");
    assert_string_equal(qf_family_name(QF_FAMILY_COUNT), "?");
}

/* =====================================================================} */

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_gemm_valid_reaches_device),
        T(test_gemm_k_not_multiple_of_16),
        T(test_gemm_n_not_multiple_of_16),
        T(test_gemm_wrong_a_dtype),
        T(test_gemm_y_too_small),
        T(test_gemm_bias_wrong_length),
        T(test_gemm_misaligned_a),
        T(test_gemm_misaligned_scale_inv),
        T(test_gemm_null_scale_inv),
        T(test_gemm_arch_too_old),
        T(test_gemm_operands),
        T(test_gemm_training_copies),
        T(test_ll_valid_reaches_device),
        T(test_ll_mxfp8_valid_reaches_device),
        T(test_ll_kept_weight),
        T(test_ll_weight_k_mismatch),
        T(test_ll_bad_bias_checked_before_any_stage),
        T(test_ll_null_y),
        T(test_nvg_valid_reaches_device),
        T(test_nvg_wgrad_copies),
        T(test_nvg_null_pointers),
        T(test_nvg_missing_amax),
        T(test_nvg_k_not_multiple_of_32),
        T(test_nvg_k_mismatch),
        T(test_nvg_y_apart_from_inputs),
        T(test_nvg_wrong_dtypes),
        T(test_nvg_fp32_and_accumulate),
        T(test_nvg_wrong_sizes),
        T(test_nvg_layout_for_arch),
        T(test_nvg_arch_and_family),
        T(test_fbg_layout),
        T(test_nvg_b_dequantized),
        T(test_dequantize_args),
        T(test_dequantized_dims),
        T(test_recipe_file_same_api),
        T(test_slot_names),
    };
    return cmocka_run_group_tests_name("api_gemm", tests, NULL, NULL);
}
