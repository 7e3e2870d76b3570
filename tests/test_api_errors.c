/* test_api_errors.c: bad input at the public API. Every case returns its documented status with a
 * message naming the argument and the requirement, and launches nothing.
 *
 * The checks run before any device work, so a device-less context (qf_ctx_init_host, sm_90)
 * exercises them on machines without a GPU: valid arguments stop there with QF_ERR_NO_DEVICE
 * ("arguments are valid"), which each group checks first so that every other case fails for its
 * own reason. Pointers are stand-ins that are never dereferenced. The last tests need a GPU (a
 * stream of another CUDA context; bad input leaves poisoned outputs untouched). */
#include "test_util.h"

#include <dlfcn.h>
#include <stdio.h>

#include <cuda.h>

#include "ctx.h"

#define M 4
#define K 64
#define N 32
#define HIST 16

static const char *const kRecipe = "fp8_delayed";

/* Stand-ins for device buffers, 256-byte aligned so that +1 is a misalignment. */
static _Alignas(256) unsigned char g_mem[16][256];

static void *slot(int i) {
    return g_mem[i];
}

static qf_tensor t2(void *data, qf_dtype dt, int64_t d0, int64_t d1) {
    qf_tensor t = {.data = data, .dtype = dt, .ndim = 2, .dims = {d0, d1}};
    return t;
}

static qf_tensor t1(void *data, qf_dtype dt, int64_t d0) {
    qf_tensor t = {.data = data, .dtype = dt, .ndim = 1, .dims = {d0}};
    return t;
}

/* Asserts status s == want and that qf_last_error() holds every string of the NULL-ended list. */
static void expect_(qf_status s, qf_status want, const char *const *subs) {
    const char *msg = qf_last_error();
    if (s != want)
        fail_msg("status %s, expected %s; message: %s", qf_status_name(s), qf_status_name(want),
                 msg);
    for (; *subs; subs++)
        if (!strstr(msg, *subs))
            fail_msg("message \"%s\" lacks \"%s\"", msg, *subs);
}
#define expect(s, want, ...) expect_((s), (want), (const char *const[]){__VA_ARGS__, NULL})

static int setup(void **state) {
    qf_ctx_t *ctx = NULL;
    if (qf_ctx_init_host(&ctx, 90) != QF_OK)
        return -1;
    *state = ctx;
    return 0;
}

static int teardown(void **state) {
    qf_ctx_free(*state);
    return 0;
}

/* {===================================================================== contexts */

static void test_ctx_init_null_out(void **state) {
    (void)state;
    expect(qf_ctx_init(NULL, 0), QF_ERR_INVALID_ARG, "qf_ctx_init: out is NULL");
    expect(qf_ctx_init_host(NULL, 90), QF_ERR_INVALID_ARG, "qf_ctx_init_host: out is NULL");
}

static void test_ctx_init_host_bad_arch(void **state) {
    (void)state;
    qf_ctx_t *ctx = (qf_ctx_t *)1;
    expect(qf_ctx_init_host(&ctx, 9), QF_ERR_INVALID_ARG, "arch 9 is not a compute capability",
           "50..199");
    assert_null(ctx);
    expect(qf_ctx_init_host(&ctx, 900), QF_ERR_INVALID_ARG, "arch 900");
}

/* =====================================================================} */

/* {===================================================================== qf_quantize with a norm */

typedef struct nq_args {
    qf_ctx_t *ctx;
    const char *recipe;
    int x_null;
    qf_tensor x;
    qf_norm_desc nd;
    const float *scale;
    qf_quantized out;
} nq_args;

/* A valid LayerNorm call: x [M, K] bf16, rowwise E4M3 output (hybrid input format). */
static nq_args nq_valid(void **state) {
    nq_args a = {.ctx = *state, .recipe = kRecipe};
    a.x = t2(slot(0), QF_DTYPE_BF16, M, K);
    a.nd = (qf_norm_desc){.norm = QF_NORM_LAYERNORM, .eps = 1e-5f};
    a.nd.gamma = t1(slot(1), QF_DTYPE_BF16, K);
    a.nd.beta = t1(slot(2), QF_DTYPE_BF16, K);
    a.out.t[QF_SLOT_MU] = t1(slot(3), QF_DTYPE_FP32, M);
    a.out.t[QF_SLOT_RSIGMA] = t1(slot(4), QF_DTYPE_FP32, M);
    a.scale = slot(5);
    a.out.t[QF_SLOT_ROWWISE_DATA] = t2(slot(6), QF_DTYPE_E4M3, M, K);
    a.out.t[QF_SLOT_AMAX] = t1(slot(7), QF_DTYPE_FP32, 1);
    a.out.t[QF_SLOT_SCALE_INV] = t1(slot(8), QF_DTYPE_FP32, 1);
    return a;
}

static qf_status nq_run(nq_args *a) {
    return qf_quantize(a->ctx, a->recipe, QF_ROLE_INPUT, a->x_null ? NULL : &a->x, &a->nd,
                       a->scale, NULL, &a->out, NULL);
}

/* Switches a valid call to RMSNorm: no beta, no mu. */
static void nq_rmsnorm(nq_args *a) {
    a->nd.norm = QF_NORM_RMSNORM;
    a->nd.beta.data = NULL;
    a->out.t[QF_SLOT_MU].data = NULL;
}

static void test_nq_valid_reaches_device(void **state) {
    nq_args a = nq_valid(state);
    expect(nq_run(&a), QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid", "sm_90");
    nq_rmsnorm(&a);
    a.nd.gamma.dtype = QF_DTYPE_FP32; /* gamma may be fp32 for any x */
    expect(nq_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
}

static void test_nq_null_ctx(void **state) {
    nq_args a = nq_valid(state);
    a.ctx = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: ctx is NULL");
}

static void test_nq_null_x(void **state) {
    nq_args a = nq_valid(state);
    a.x_null = 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: x is NULL");
}

static void test_nq_null_x_data(void **state) {
    nq_args a = nq_valid(state);
    a.x.data = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "x.data is NULL");
}

static void test_nq_ndim_0(void **state) {
    nq_args a = nq_valid(state);
    a.x.ndim = 0;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "x.ndim is 0; expected 1..8");
}

static void test_nq_ndim_9(void **state) {
    nq_args a = nq_valid(state);
    a.x.ndim = 9;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "x.ndim is 9; expected 1..8");
}

static void test_nq_negative_dim(void **state) {
    nq_args a = nq_valid(state);
    a.x.dims[0] = -4;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "x.dims[0] is -4; expected >= 1");
}

/* Dims whose product overflows int64_t are no tensor: numel -1, and the op rejects x. */
static void test_nq_dims_overflow(void **state) {
    qf_tensor t = {.data = slot(0), .dtype = QF_DTYPE_BF16, .ndim = 3,
                   .dims = {INT64_MAX / 2, 4, 4}};
    assert_int_equal(qf_tensor_numel(&t), -1);
    nq_args a = nq_valid(state);
    a.x = t;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: x has more than 2^59 elements");
}

static void test_nq_x_dtype_e4m3(void **state) {
    nq_args a = nq_valid(state);
    a.x.dtype = QF_DTYPE_E4M3;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "x.dtype is e4m3; expected bf16, fp16 or fp32");
}

static void test_nq_x_misaligned(void **state) {
    nq_args a = nq_valid(state);
    a.x.data = (char *)a.x.data + 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "x.data", "is not aligned to its 2-byte elements");
}

static void test_nq_gamma_wrong_length(void **state) {
    nq_args a = nq_valid(state);
    a.nd.gamma.dims[0] = K - 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "gamma has 63 elements; expected K = 64");
}

static void test_nq_gamma_dtype_mismatch(void **state) {
    nq_args a = nq_valid(state);
    a.nd.gamma.dtype = QF_DTYPE_FP16;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "gamma.dtype is fp16; expected bf16 or fp32");
}

static void test_nq_beta_dtype_differs_from_gamma(void **state) {
    nq_args a = nq_valid(state);
    a.nd.gamma.dtype = QF_DTYPE_FP32;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "beta.dtype bf16 differs from gamma.dtype fp32");
}

/* RMSNorm with a beta, or with a mu slot, each on its own. */
static void test_nq_rmsnorm_with_beta(void **state) {
    nq_args a = nq_valid(state);
    a.nd.norm = QF_NORM_RMSNORM, a.out.t[QF_SLOT_MU].data = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "rmsnorm takes no beta", "leave norm->beta.data");
    a = nq_valid(state);
    a.nd.norm = QF_NORM_RMSNORM, a.nd.beta.data = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "rmsnorm takes no beta and produces no mu",
           "out->mu.data NULL");
}

static void test_nq_bad_norm(void **state) {
    nq_args a = nq_valid(state);
    a.nd.norm = (qf_norm)7;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: norm->norm 7 is not QF_NORM_NONE");
}

static void test_nq_no_output_requested(void **state) {
    nq_args a = nq_valid(state);
    a.out.t[QF_SLOT_ROWWISE_DATA].data = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "out->rowwise_data.data and out->columnwise_data.data "
           "are both NULL", "request at least one copy");
}

static void test_nq_null_out(void **state) {
    nq_args a = nq_valid(state);
    expect(qf_quantize(a.ctx, kRecipe, QF_ROLE_INPUT, &a.x, &a.nd, a.scale, NULL, NULL, NULL),
           QF_ERR_INVALID_ARG, "qf_quantize: out is NULL");
}

/* The buffers are checked against the recipe's fake-shape function, slot by name. */
static void test_nq_rowwise_too_small(void **state) {
    nq_args a = nq_valid(state);
    a.out.t[QF_SLOT_ROWWISE_DATA].dims[0] = M - 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "out->rowwise_data has 192 elements (last dim 64); "
           "the shape function requires 256 (last dim 64)");
}

static void test_nq_mu_too_small(void **state) {
    nq_args a = nq_valid(state);
    a.out.t[QF_SLOT_MU].dims[0] = M - 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "out->mu has 3 elements", "requires 4");
}

static void test_nq_missing_scale_inv(void **state) {
    nq_args a = nq_valid(state);
    a.out.t[QF_SLOT_SCALE_INV].data = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: out->scale_inv.data is NULL");
}

static void test_nq_wrong_output_dtype(void **state) {
    nq_args a = nq_valid(state);
    a.out.t[QF_SLOT_ROWWISE_DATA].dtype = QF_DTYPE_E5M2; /* hybrid quantizes inputs to E4M3 */
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "out->rowwise_data.dtype is e5m2; expected e4m3");
}

static void test_nq_misaligned_output(void **state) {
    nq_args a = nq_valid(state);
    a.out.t[QF_SLOT_ROWWISE_DATA].data = (char *)a.out.t[QF_SLOT_ROWWISE_DATA].data + 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "out->rowwise_data.data", "is not 16-byte aligned");
}

/* Delayed scaling needs its scale; the families that compute theirs ignore the argument. */
static void test_nq_null_scale(void **state) {
    nq_args a = nq_valid(state);
    a.scale = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: scale is NULL",
           "recipe 'fp8_delayed' (fp8_delayed)");
}

static void test_nq_unknown_recipe(void **state) {
    nq_args a = nq_valid(state);
    a.recipe = "no_such_recipe";
    expect(nq_run(&a), QF_ERR_NOT_FOUND, "recipe 'no_such_recipe' not found");
}

static void test_nq_null_recipe(void **state) {
    nq_args a = nq_valid(state);
    a.recipe = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: recipe is NULL");
}

/* =====================================================================} */

/* {===================================================================== roles, scale update */

/* Without a norm the roles are weight and grad; a norm goes with the input role only. */
static void test_quantize_role_input(void **state) {
    nq_args a = nq_valid(state);
    expect(qf_quantize(a.ctx, kRecipe, QF_ROLE_WEIGHT, &a.x, NULL, a.scale, NULL, &a.out, NULL),
           QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
    expect(qf_quantize(a.ctx, kRecipe, QF_ROLE_INPUT, &a.x, NULL, a.scale, NULL, &a.out, NULL),
           QF_ERR_INVALID_ARG, "qf_quantize: role 0 is not QF_ROLE_WEIGHT or QF_ROLE_GRAD");
    expect(qf_quantize(a.ctx, kRecipe, QF_ROLE_WEIGHT, &a.x, &a.nd, a.scale, NULL, &a.out, NULL),
           QF_ERR_INVALID_ARG, "qf_quantize: role 1 with a fused norm", "QF_ROLE_INPUT");
}

typedef struct su_args {
    int n, H;
    float *amax, *history, *scale, *scale_inv;
    const uint8_t *fmt;
} su_args;

static su_args su_valid(void) {
    su_args a = {2, HIST, slot(0), slot(1), slot(2), slot(3), slot(4)};
    return a;
}

static qf_status su_run_recipe(void **state, const char *recipe, const su_args *a) {
    return qf_scale_update(*state, recipe, a->n, a->H, a->amax, a->history, a->scale,
                           a->scale_inv, a->fmt, NULL);
}

static qf_status su_run(void **state, const su_args *a) {
    return su_run_recipe(state, kRecipe, a);
}

static void test_su_n_zero(void **state) {
    su_args a = su_valid();
    expect(su_run(state, &a), QF_ERR_NO_DEVICE, "qf_scale_update: arguments are valid");
    a.n = 0;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "n = 0 and H = 16; expected n >= 1");
}

static void test_su_history_too_long(void **state) {
    su_args a = su_valid();
    a.H = 1 << 20;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "H = 1048576", "1 <= H <= 12288");
}

static void test_su_null_pointer(void **state) {
    su_args a = su_valid();
    a.scale_inv = NULL;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "scale_inv is NULL", "must all be device "
           "pointers");
}

/* Block-scaled families compute their scales in the quantizer: no scale update. */
static void test_su_block_family(void **state) {
    su_args a = su_valid();
    expect(su_run_recipe(state, "mxfp8", &a), QF_ERR_UNSUPPORTED,
           "qf_scale_update: recipe 'mxfp8' (mxfp8) has no scale update");
    expect(su_run_recipe(state, "nvfp4", &a), QF_ERR_UNSUPPORTED, "recipe 'nvfp4' (nvfp4)");
    expect(su_run_recipe(state, "no_such_recipe", &a), QF_ERR_NOT_FOUND, "no_such_recipe");
}

/* =====================================================================} */

/* {===================================================================== qf_gemm, per-tensor FP8 */

typedef struct gemm_args {
    qf_ctx_t *ctx;
    qf_quantized qa, qb;
    qf_tensor bias, y;
    qf_copy copy_a;
} gemm_args;

/* y [M, N] bf16 = A [M, K] E4M3 x B [N, K] E4M3 ^T + bias [N] bf16, fp32 [1] scale_inv slots. */
static gemm_args gemm_valid(void **state) {
    gemm_args g = {.ctx = *state, .copy_a = QF_COPY_ROWWISE};
    g.qa.t[QF_SLOT_ROWWISE_DATA] = t2(slot(0), QF_DTYPE_E4M3, M, K);
    g.qb.t[QF_SLOT_ROWWISE_DATA] = t2(slot(1), QF_DTYPE_E4M3, N, K);
    g.bias = t1(slot(2), QF_DTYPE_BF16, N);
    g.y = t2(slot(3), QF_DTYPE_BF16, M, N);
    g.qa.t[QF_SLOT_SCALE_INV] = t1(slot(4), QF_DTYPE_FP32, 1);
    g.qb.t[QF_SLOT_SCALE_INV] = t1(slot(5), QF_DTYPE_FP32, 1);
    return g;
}

static qf_status gemm_run(gemm_args *g) {
    const qf_operand a = {&g->qa, g->copy_a}, b = {&g->qb, QF_COPY_ROWWISE};
    return qf_gemm(g->ctx, kRecipe, &a, &b, &g->bias, &g->y, NULL);
}

static void test_gemm_valid_reaches_device(void **state) {
    gemm_args g = gemm_valid(state);
    expect(gemm_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
}

static void test_gemm_k_not_multiple_of_16(void **state) {
    gemm_args g = gemm_valid(state);
    g.qa.t[QF_SLOT_ROWWISE_DATA].dims[1] = g.qb.t[QF_SLOT_ROWWISE_DATA].dims[1] = 24;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "K = 24 and N = 32 must be multiples of 16");
}

static void test_gemm_n_not_multiple_of_16(void **state) {
    gemm_args g = gemm_valid(state);
    g.qb.t[QF_SLOT_ROWWISE_DATA].dims[0] = g.y.dims[1] = g.bias.dims[0] = 24;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "K = 64 and N = 24 must be multiples of 16");
}

static void test_gemm_wrong_a_dtype(void **state) {
    gemm_args g = gemm_valid(state);
    g.qa.t[QF_SLOT_ROWWISE_DATA].dtype = QF_DTYPE_BF16;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "a.rowwise_data must be e4m3 or e5m2 and "
           "b.rowwise_data e4m3 (got bf16, e4m3)");
}

static void test_gemm_y_too_small(void **state) {
    gemm_args g = gemm_valid(state);
    g.y.dims[1] = N / 2;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "y has 64 elements (last dim 16); the shape function "
           "requires 128 (last dim 32)");
}

static void test_gemm_bias_wrong_length(void **state) {
    gemm_args g = gemm_valid(state);
    g.bias.dims[0] = N - 1;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "bias has 31 elements", "requires 32");
}

static void test_gemm_misaligned_a(void **state) {
    gemm_args g = gemm_valid(state);
    g.qa.t[QF_SLOT_ROWWISE_DATA].data = (char *)g.qa.t[QF_SLOT_ROWWISE_DATA].data + 1;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "a.rowwise_data.data", "is not 16-byte aligned");
}

/* cuBLASLt rejects a scale pointer off a 16-byte boundary with "not supported"; the op names it. */
static void test_gemm_misaligned_scale_inv(void **state) {
    gemm_args g = gemm_valid(state);
    g.qb.t[QF_SLOT_SCALE_INV].data = (float *)g.qb.t[QF_SLOT_SCALE_INV].data + 1;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: b.scale_inv", "is not 16-byte aligned");
}

static void test_gemm_null_scale_inv(void **state) {
    gemm_args g = gemm_valid(state);
    g.qb.t[QF_SLOT_SCALE_INV].data = NULL;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: b.scale_inv is NULL");
    g = gemm_valid(state);
    g.qa.t[QF_SLOT_SCALE_INV].dtype = QF_DTYPE_BF16;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "a.scale_inv.dtype is bf16; expected fp32");
}

/* FP8 GEMMs need sm_89; a context for an older GPU says so before anything else. */
static void test_gemm_arch_too_old(void **state) {
    gemm_args g = gemm_valid(state);
    assert_int_equal(qf_ctx_init_host(&g.ctx, 80), QF_OK);
    expect(gemm_run(&g), QF_ERR_UNSUPPORTED, "FP8 GEMM needs sm_89 or newer; device is sm_80");
    qf_ctx_free(g.ctx);
}

/* Operands: NULL ones are named; the columnwise copies (dgrad, wgrad) are not implemented yet. */
static void test_gemm_operands(void **state) {
    gemm_args g = gemm_valid(state);
    const qf_operand b = {&g.qb, QF_COPY_ROWWISE}, no_q = {NULL, QF_COPY_ROWWISE};
    expect(qf_gemm(g.ctx, kRecipe, NULL, &b, NULL, &g.y, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: a is NULL");
    expect(qf_gemm(g.ctx, kRecipe, &b, &no_q, NULL, &g.y, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: b->q is NULL");
    expect(qf_gemm(g.ctx, kRecipe, &b, &b, NULL, NULL, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: y is NULL");
    g.copy_a = QF_COPY_COLUMNWISE;
    expect(gemm_run(&g), QF_ERR_UNSUPPORTED, "qf_gemm: a is the columnwise copy",
           "only the rowwise TN GEMM");
    g.copy_a = (qf_copy)5;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: a->copy 5 is not a qf_copy");
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

/* {===================================================================== NVFP4 quantizers */

#define NV_M 32
#define NV_K 64

typedef struct nv_args {
    qf_ctx_t *ctx;
    const char *recipe;
    qf_role role;         /* QF_ROLE_INPUT: with the LayerNorm of nd */
    qf_tensor x;
    qf_norm_desc nd;
    qf_quantized out;
    qf_rng rng;
    int out_null, rng_null;
} nv_args;

/* A valid LayerNorm call: x [32, 64] bf16, both copies with their scales and amaxes. */
static nv_args nv_valid(void **state) {
    nv_args a = {.ctx = *state, .recipe = "nvfp4", .role = QF_ROLE_INPUT, .rng = {1, 2}};
    a.x = t2(slot(0), QF_DTYPE_BF16, NV_M, NV_K);
    a.nd = (qf_norm_desc){.norm = QF_NORM_LAYERNORM, .eps = 1e-5f};
    a.nd.gamma = t1(slot(1), QF_DTYPE_BF16, NV_K);
    a.nd.beta = t1(slot(2), QF_DTYPE_BF16, NV_K);
    a.out.t[QF_SLOT_MU] = t1(slot(3), QF_DTYPE_FP32, NV_M);
    a.out.t[QF_SLOT_RSIGMA] = t1(slot(4), QF_DTYPE_FP32, NV_M);
    a.out.t[QF_SLOT_ROWWISE_DATA] = t2(slot(5), QF_DTYPE_E2M1, NV_M, NV_K / 2);
    a.out.t[QF_SLOT_ROWWISE_SCALE_INV] = t2(slot(6), QF_DTYPE_E4M3, 128, 4);
    a.out.t[QF_SLOT_COLUMNWISE_DATA] = t2(slot(7), QF_DTYPE_E2M1, NV_K, NV_M / 2);
    a.out.t[QF_SLOT_COLUMNWISE_SCALE_INV] = t2(slot(8), QF_DTYPE_E4M3, 128, 4);
    a.out.t[QF_SLOT_AMAX_ROWWISE] = t1(slot(9), QF_DTYPE_FP32, 1);
    a.out.t[QF_SLOT_AMAX_COLUMNWISE] = t1(slot(10), QF_DTYPE_FP32, 1);
    return a;
}

static qf_status nv_run(nv_args *a) {
    qf_quantized *out = a->out_null ? NULL : &a->out;
    const int norm = a->role == QF_ROLE_INPUT;
    return qf_quantize(a->ctx, a->recipe, a->role, &a->x, norm ? &a->nd : NULL, NULL,
                       a->rng_null ? NULL : &a->rng, out, NULL);
}

static qf_tensor *nv_slot(nv_args *a, qf_slot s) {
    return &a->out.t[s];
}

static void test_nv_valid_reaches_device(void **state) {
    nv_args a = nv_valid(state);
    expect(nv_run(&a), QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
    a.role = QF_ROLE_GRAD;
    expect(nv_run(&a), QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
    a.role = QF_ROLE_WEIGHT, a.rng_null = 1; /* weights do not round stochastically */
    expect(nv_run(&a), QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
    nv_slot(&a, QF_SLOT_COLUMNWISE_DATA)->data = NULL; /* rowwise only */
    nv_slot(&a, QF_SLOT_AMAX_COLUMNWISE)->data = NULL;
    expect(nv_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
}

static void test_nv_null_out(void **state) {
    nv_args a = nv_valid(state);
    a.out_null = 1;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: out is NULL");
}

static void test_nv_m_not_multiple_of_16(void **state) {
    nv_args a = nv_valid(state);
    a.x.dims[0] = 24;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "x is viewed as [M, K] = [24, 64]",
           "NVFP4 needs M and K to be multiples of 16");
}

static void test_nv_k_not_multiple_of_16(void **state) {
    nv_args a = nv_valid(state);
    a.role = QF_ROLE_WEIGHT;
    a.x.dims[1] = 40;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: x is viewed as [M, K] = [32, 40]",
           "multiples of 16");
}

static void test_nv_x_misaligned(void **state) {
    nv_args a = nv_valid(state);
    a.x.data = (char *)a.x.data + 2;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "x.data", "is not 16-byte aligned");
    a = nv_valid(state);
    a.nd.gamma.dtype = QF_DTYPE_FP32, a.nd.beta.dtype = QF_DTYPE_FP32;
    a.nd.beta.data = (char *)a.nd.beta.data + 4; /* element-aligned, not 16-byte */
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "beta.data", "is not 16-byte aligned");
}

static void test_nv_rowwise_wrong_dtype(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_ROWWISE_DATA)->dtype = QF_DTYPE_E4M3;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->rowwise_data.dtype is e4m3; expected e2m1");
}

static void test_nv_rowwise_unpacked_size(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_ROWWISE_DATA)->dims[1] = NV_K; /* one element per byte: twice the size */
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->rowwise_data has 2048 elements (last dim 64); "
           "the shape function requires 1024 (last dim 32)");
}

static void test_nv_row_scale_wrong_dtype(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_ROWWISE_SCALE_INV)->dtype = QF_DTYPE_E8M0;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->rowwise_scale_inv.dtype is e8m0; expected e4m3");
}

static void test_nv_row_scale_unpadded(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_ROWWISE_SCALE_INV)->dims[0] = NV_M; /* rows must be padded to 128 */
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->rowwise_scale_inv has 128 elements",
           "requires 512");
}

static void test_nv_columnwise_not_transposed(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_COLUMNWISE_DATA)->dims[0] = NV_M;
    nv_slot(&a, QF_SLOT_COLUMNWISE_DATA)->dims[1] = NV_K / 2;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->columnwise_data has 1024 elements (last dim 32)",
           "requires 1024 (last dim 16)");
}

static void test_nv_col_scale_too_small(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_COLUMNWISE_SCALE_INV)->dims[0] = 64;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->columnwise_scale_inv has 256 elements",
           "requires 512");
}

static void test_nv_amax_wrong_dtype(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_AMAX_ROWWISE)->dtype = QF_DTYPE_BF16;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->amax_rowwise.dtype is bf16; expected fp32");
}

static void test_nv_amax_wrong_size(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_AMAX_COLUMNWISE)->dims[0] = 2;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->amax_columnwise has 2 elements", "requires 1");
}

static void test_nv_missing_amax_rowwise(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_AMAX_ROWWISE)->data = NULL;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->amax_rowwise.data is NULL");
}

static void test_nv_missing_amax_columnwise(void **state) {
    nv_args a = nv_valid(state);
    a.role = QF_ROLE_GRAD;
    nv_slot(&a, QF_SLOT_AMAX_COLUMNWISE)->data = NULL;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: out->amax_columnwise.data is NULL");
}

static void test_nv_mu_wrong_size(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_MU)->dims[0] = NV_M - 16;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->mu has 16 elements", "requires 32");
}

static void test_nv_rsigma_wrong_dtype(void **state) {
    nv_args a = nv_valid(state);
    nv_slot(&a, QF_SLOT_RSIGMA)->dtype = QF_DTYPE_BF16;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->rsigma.dtype is bf16; expected fp32");
}

static void test_nv_null_rng_with_sr(void **state) {
    nv_args a = nv_valid(state);
    a.role = QF_ROLE_GRAD, a.rng_null = 1;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: rng is NULL",
           "recipe 'nvfp4' rounds gradients stochastically");
}

static void test_nv_wrong_role(void **state) {
    nv_args a = nv_valid(state);
    expect(qf_quantize(a.ctx, "nvfp4", QF_ROLE_INPUT, &a.x, NULL, NULL, &a.rng, &a.out, NULL),
           QF_ERR_INVALID_ARG, "qf_quantize: role 0 is not QF_ROLE_WEIGHT or QF_ROLE_GRAD");
}

/* The family comes from the recipe: NVFP4 buffers under an MXFP8 recipe are checked against the
 * MXFP8 fake shapes, and rejected. */
static void test_nv_wrong_family(void **state) {
    nv_args a = nv_valid(state);
    a.recipe = "mxfp8";
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->rowwise_data.dtype is e2m1; expected e4m3");
}

static void test_nv_bad_layout(void **state) {
    nv_args a = nv_valid(state);
    a.out.layout = (qf_scale_layout)7;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "out->layout 7 is not a qf_scale_layout");
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
} nvg_args;

/* y [100, 64] bf16 = A [100, 96/2] E2M1 x B [64, 96/2] E2M1 ^T + bias, compact E4M3 scales
 * [128, roundup(96/16, 4) = 8], amaxes fp32 [1]. */
static nvg_args nvg_valid(void **state) {
    nvg_args g = {.ctx = *state, .recipe = "nvfp4", .layout = QF_SCALE_LAYOUT_COMPACT};
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
    const qf_operand a = {&g->qa, QF_COPY_ROWWISE}, b = {&g->qb, QF_COPY_ROWWISE};
    return qf_gemm(g->ctx, g->recipe, &a, &b, &g->bias, &g->y, NULL);
}

/* Slot s of operand a (0) or b (1). */
static qf_tensor *nvg_slot(nvg_args *g, int which, qf_slot s) {
    return which ? &g->qb.t[s] : &g->qa.t[s];
}

static void test_nvg_valid_reaches_device(void **state) {
    nvg_args g = nvg_valid(state);
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    g.bias.data = NULL; /* no bias */
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
    g = nvg_valid(state);
    g.recipe = "nvfp4_nort";
    expect(nvg_run(&g), QF_ERR_NO_DEVICE, "qf_gemm: arguments are valid");
}

static void test_nvg_null_pointers(void **state) {
    nvg_args g = nvg_valid(state);
    const qf_operand a = {&g.qa, QF_COPY_ROWWISE}, b = {&g.qb, QF_COPY_ROWWISE};
    expect(qf_gemm(NULL, "nvfp4", &a, &b, NULL, &g.y, NULL), QF_ERR_INVALID_ARG, "ctx");
    expect(qf_gemm(g.ctx, "nvfp4", NULL, &b, NULL, &g.y, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: a is NULL");
    expect(qf_gemm(g.ctx, "nvfp4", &a, &b, NULL, NULL, NULL), QF_ERR_INVALID_ARG,
           "qf_gemm: y");
    nvg_slot(&g, 1, QF_SLOT_ROWWISE_SCALE_INV)->data = NULL;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: b.rowwise_scale_inv");
    g = nvg_valid(state);
    nvg_slot(&g, 1, QF_SLOT_ROWWISE_DATA)->data = NULL;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: b.rowwise_data");
}

static void test_nvg_missing_amax(void **state) {
    nvg_args g = nvg_valid(state);
    nvg_slot(&g, 0, QF_SLOT_AMAX_ROWWISE)->data = NULL;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: a.amax_rowwise is NULL");
    g = nvg_valid(state);
    nvg_slot(&g, 1, QF_SLOT_AMAX_ROWWISE)->data = NULL;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: b.amax_rowwise");
    g = nvg_valid(state);
    nvg_slot(&g, 1, QF_SLOT_AMAX_ROWWISE)->dtype = QF_DTYPE_BF16;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "b.amax_rowwise.dtype is bf16; expected fp32");
    g = nvg_valid(state);
    nvg_slot(&g, 0, QF_SLOT_AMAX_ROWWISE)->dims[0] = 2;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "a.amax_rowwise has 2 elements");
}

static void test_nvg_k_not_multiple_of_32(void **state) {
    nvg_args g = nvg_valid(state);
    /* K = 80: whole 1x16 blocks, not whole 16-byte rows */
    nvg_slot(&g, 0, QF_SLOT_ROWWISE_DATA)->dims[1] = 40;
    nvg_slot(&g, 1, QF_SLOT_ROWWISE_DATA)->dims[1] = 40;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "qf_gemm: K = 80 is not a multiple of 32");
}

static void test_nvg_k_mismatch(void **state) {
    nvg_args g = nvg_valid(state);
    nvg_slot(&g, 1, QF_SLOT_ROWWISE_DATA)->dims[1] = 32;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "b.rowwise_data is [N=64, K/2=32] bytes but "
           "a.rowwise_data has K = 96");
}

static void test_nvg_wrong_dtypes(void **state) {
    nvg_args g = nvg_valid(state);
    nvg_slot(&g, 0, QF_SLOT_ROWWISE_DATA)->dtype = QF_DTYPE_E4M3;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "a.rowwise_data.dtype is e4m3; expected e2m1");
    g = nvg_valid(state);
    nvg_slot(&g, 1, QF_SLOT_ROWWISE_SCALE_INV)->dtype = QF_DTYPE_E8M0;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "b.rowwise_scale_inv.dtype is e8m0; expected e4m3");
    g = nvg_valid(state);
    g.y.dtype = QF_DTYPE_FP32;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "y.dtype is fp32; expected bf16");
    g = nvg_valid(state);
    g.bias.dtype = QF_DTYPE_FP16;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "bias.dtype is fp16; expected bf16");
}

static void test_nvg_wrong_sizes(void **state) {
    nvg_args g = nvg_valid(state);
    nvg_slot(&g, 0, QF_SLOT_ROWWISE_DATA)->dims[1] = NVG_K; /* unpacked: K = 192 */
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "but a.rowwise_data has K = 192");
    g = nvg_valid(state);
    nvg_slot(&g, 0, QF_SLOT_ROWWISE_SCALE_INV)->dims[0] = NVG_M; /* unpadded rows */
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "a.rowwise_scale_inv has 800 elements");
    g = nvg_valid(state);
    nvg_slot(&g, 1, QF_SLOT_ROWWISE_SCALE_INV)->dims[1] = 6; /* unpadded blocks */
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "b.rowwise_scale_inv has 768 elements");
    g = nvg_valid(state);
    g.y.dims[0] = NVG_M - 1;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "y has");
    g = nvg_valid(state);
    g.bias.dims[0] = NVG_N - 1;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "bias has 63 elements");
    g = nvg_valid(state);
    nvg_slot(&g, 1, QF_SLOT_ROWWISE_DATA)->data = (char *)g.qb.t[QF_SLOT_ROWWISE_DATA].data + 8;
    expect(nvg_run(&g), QF_ERR_INVALID_ARG, "b.rowwise_data.data", "is not 16-byte aligned");
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
    qf_ctx_t *c86 = NULL;
    assert_int_equal(qf_ctx_init_host(&c86, 86), QF_OK);
    g = nvg_valid(state);
    g.ctx = c86;
    expect(nvg_run(&g), QF_ERR_UNSUPPORTED, "NVFP4 GEMMs need sm_89 or newer; device is sm_86");
    qf_ctx_free(c86);
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

/* {===================================================================== on a GPU */

/* A driver entry point from libcuda.so.1 (loaded by cudart already on a GPU machine). */
static void *cu_sym(const char *name) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(lib);
    void *f = dlsym(lib, name);
    if (!f)
        fail_msg("libcuda.so.1 lacks %s", name);
    dlclose(lib);
    return f;
}

/* Device buffers for nq_valid's arguments, rowwise/amax/scale_inv poisoned with 0xCD. */
static void gpu_alloc(nq_args *a, void *bufs[9]) {
    qf_tensor *ts[] = {&a->x, &a->nd.gamma, &a->nd.beta, &a->out.t[QF_SLOT_MU],
                       &a->out.t[QF_SLOT_RSIGMA], NULL, &a->out.t[QF_SLOT_ROWWISE_DATA],
                       &a->out.t[QF_SLOT_AMAX], &a->out.t[QF_SLOT_SCALE_INV]};
    for (int i = 0; i < 9; i++) {
        assert_int_equal(cudaMalloc(&bufs[i], 4096), cudaSuccess);
        assert_int_equal(cudaMemset(bufs[i], i >= 6 ? 0xCD : 0, 4096), cudaSuccess);
        if (ts[i])
            ts[i]->data = bufs[i];
    }
    a->scale = bufs[5];
}

static int gpu_untouched(void *const bufs[9]) {
    unsigned char h[4096];
    int ok = 1;
    for (int i = 6; i < 9; i++) {
        assert_int_equal(cudaMemcpy(h, bufs[i], sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t j = 0; j < sizeof h; j++)
            ok &= h[j] == 0xCD;
    }
    return ok;
}

/* Creates a second context on device 0 (as a library with its own driver context would) and a
 * stream in it, then makes the previous context current again. */
static void other_context_stream(CUcontext *other, CUstream *s) {
    CUcontext popped = NULL;
    CUdevice dev = 0;
    CUresult (*dev_get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))cu_sym("cuDeviceGet");
    CUresult (*ctx_create)(CUcontext *, unsigned, CUdevice) =
        (CUresult(*)(CUcontext *, unsigned, CUdevice))cu_sym("cuCtxCreate_v2");
    CUresult (*stream_create)(CUstream *, unsigned) =
        (CUresult(*)(CUstream *, unsigned))cu_sym("cuStreamCreate");
    CUresult (*ctx_pop)(CUcontext *) = (CUresult(*)(CUcontext *))cu_sym("cuCtxPopCurrent_v2");
    assert_int_equal(dev_get(&dev, 0), CUDA_SUCCESS);
    assert_int_equal(ctx_create(other, 0, dev), CUDA_SUCCESS); /* pushed: current now */
    assert_int_equal(stream_create(s, 0), CUDA_SUCCESS);
    assert_int_equal(ctx_pop(&popped), CUDA_SUCCESS);
}

/* A stream of another context on the same device is rejected and nothing is written; the same
 * call on the default stream runs. */
static void test_stream_of_other_context(void **state) {
    QF_SKIP_WITHOUT_GPU();
    qf_ctx_t *ctx = NULL;
    void *bufs[9];
    CUcontext other = NULL;
    CUstream s = NULL;
    assert_int_equal(qf_ctx_init(&ctx, 0), QF_OK);
    nq_args a = nq_valid(state);
    a.ctx = ctx;
    gpu_alloc(&a, bufs);
    other_context_stream(&other, &s);
    expect(qf_quantize(ctx, kRecipe, QF_ROLE_WEIGHT, &a.x, NULL, a.scale, NULL, &a.out, s),
           QF_ERR_INVALID_ARG, "qf_quantize: stream", "belongs to another CUDA context");
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_true(gpu_untouched(bufs));
    expect(qf_quantize(ctx, kRecipe, QF_ROLE_WEIGHT, &a.x, NULL, a.scale, NULL, &a.out, NULL),
           QF_OK, "");
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    ((CUresult(*)(CUstream))cu_sym("cuStreamDestroy_v2"))(s);
    ((CUresult(*)(CUcontext))cu_sym("cuCtxDestroy_v2"))(other);
    for (int i = 0; i < 9; i++)
        cudaFree(bufs[i]);
    qf_ctx_free(ctx);
}

/* Bad input on a real device launches nothing: poisoned outputs stay poisoned. */
static void test_bad_input_writes_nothing(void **state) {
    QF_SKIP_WITHOUT_GPU();
    qf_ctx_t *ctx = NULL;
    void *bufs[9];
    assert_int_equal(qf_ctx_init(&ctx, 0), QF_OK);
    nq_args a = nq_valid(state);
    a.ctx = ctx;
    gpu_alloc(&a, bufs);
    a.nd.gamma.dims[0] = K - 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "gamma has 63 elements");
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_true(gpu_untouched(bufs));
    for (int i = 0; i < 9; i++)
        cudaFree(bufs[i]);
    qf_ctx_free(ctx);
}

/* =====================================================================} */

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_ctx_init_null_out), T(test_ctx_init_host_bad_arch),
        T(test_nq_valid_reaches_device), T(test_nq_null_ctx), T(test_nq_null_x),
        T(test_nq_null_x_data), T(test_nq_ndim_0), T(test_nq_ndim_9), T(test_nq_negative_dim),
        T(test_nq_x_dtype_e4m3), T(test_nq_x_misaligned), T(test_nq_gamma_wrong_length),
        T(test_nq_gamma_dtype_mismatch), T(test_nq_beta_dtype_differs_from_gamma),
        T(test_nq_rmsnorm_with_beta), T(test_nq_bad_norm), T(test_nq_no_output_requested),
        T(test_nq_null_out), T(test_nq_rowwise_too_small), T(test_nq_mu_too_small),
        T(test_nq_missing_scale_inv), T(test_nq_wrong_output_dtype),
        T(test_nq_misaligned_output), T(test_nq_null_scale), T(test_nq_unknown_recipe),
        T(test_nq_null_recipe), T(test_nq_dims_overflow),
        T(test_quantize_role_input), T(test_su_n_zero), T(test_su_history_too_long),
        T(test_su_null_pointer), T(test_su_block_family), T(test_gemm_valid_reaches_device),
        T(test_gemm_k_not_multiple_of_16), T(test_gemm_n_not_multiple_of_16),
        T(test_gemm_wrong_a_dtype), T(test_gemm_y_too_small), T(test_gemm_bias_wrong_length),
        T(test_gemm_misaligned_a), T(test_gemm_misaligned_scale_inv),
        T(test_gemm_null_scale_inv), T(test_gemm_arch_too_old), T(test_gemm_operands),
        T(test_ll_valid_reaches_device), T(test_ll_mxfp8_valid_reaches_device),
        T(test_ll_weight_k_mismatch), T(test_ll_bad_bias_checked_before_any_stage),
        T(test_ll_null_y),
        T(test_nv_valid_reaches_device), T(test_nv_null_out), T(test_nv_m_not_multiple_of_16),
        T(test_nv_k_not_multiple_of_16), T(test_nv_x_misaligned), T(test_nv_rowwise_wrong_dtype),
        T(test_nv_rowwise_unpacked_size), T(test_nv_row_scale_wrong_dtype),
        T(test_nv_row_scale_unpadded), T(test_nv_columnwise_not_transposed),
        T(test_nv_col_scale_too_small), T(test_nv_amax_wrong_dtype), T(test_nv_amax_wrong_size),
        T(test_nv_missing_amax_rowwise), T(test_nv_missing_amax_columnwise),
        T(test_nv_mu_wrong_size), T(test_nv_rsigma_wrong_dtype), T(test_nv_null_rng_with_sr),
        T(test_nv_wrong_role), T(test_nv_wrong_family), T(test_nv_bad_layout),
        T(test_nvg_valid_reaches_device), T(test_nvg_null_pointers), T(test_nvg_missing_amax),
        T(test_nvg_k_not_multiple_of_32), T(test_nvg_k_mismatch), T(test_nvg_wrong_dtypes),
        T(test_nvg_wrong_sizes), T(test_nvg_layout_for_arch), T(test_nvg_arch_and_family),
        T(test_slot_names), T(test_stream_of_other_context), T(test_bad_input_writes_nothing),
    };
    return cmocka_run_group_tests_name("api_errors", tests, NULL, NULL);
}
