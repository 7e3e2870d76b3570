/* test_api_errors.c: bad input at the public API: contexts, qf_quantize (with and without a
 * norm, every family), qf_scale_update, and on a GPU streams of another context and bad input
 * that must write nothing (test_api_gemm.c: qf_gemm and qf_layernorm_linear_fwd). Every case
 * returns its documented status with a message naming the argument and the requirement, and
 * launches nothing.
 *
 * The checks run before any device work, so a device-less context (qf_ctx_init_host, sm_90)
 * exercises them on machines without a GPU: valid arguments stop there with QF_ERR_NO_DEVICE
 * ("arguments are valid"), which each group checks first so that every other case fails for its
 * own reason. Pointers are stand-ins that are never dereferenced. The last tests need a GPU (a
 * stream of another CUDA context; bad input leaves poisoned outputs untouched). */
#include "test_api_util.h"

#include <dlfcn.h>
#include <stdio.h>

#include <cuda.h>

/* {===================================================================== contexts */

/* qf_set_amax_reduce / qf_get_amax_reduce: per thread, NULL by default, user kept with fn and
 * dropped with a NULL fn. */
static qf_status amax_noop(void *user, float *amax, void *stream) {
    (void)user, (void)amax, (void)stream;
    return QF_OK;
}

static void test_amax_reduce_get_set(void **state) {
    (void)state;
    void *user = (void *)1;
    assert_null(qf_get_amax_reduce(&user));
    assert_null(user);
    int tag = 0;
    qf_set_amax_reduce(amax_noop, &tag);
    assert_ptr_equal(qf_get_amax_reduce(&user), amax_noop);
    assert_ptr_equal(user, &tag);
    assert_ptr_equal(qf_get_amax_reduce(NULL), amax_noop);
    qf_set_amax_reduce(NULL, &tag);
    assert_null(qf_get_amax_reduce(&user));
    assert_null(user);
}

static void test_ctx_init_null_out(void **state) {
    (void)state;
    expect(qf_ctx_init(NULL, 0), QF_ERR_INVALID_ARG, "qf_ctx_init: out is NULL");
    expect(qf_ctx_init_host(NULL, 90), QF_ERR_INVALID_ARG, "qf_ctx_init_host: out is NULL");
    qf_ctx_t *ctx = (qf_ctx_t *)slot(0); /* set to NULL by the refusal */
    expect(qf_ctx_init(&ctx, -1), QF_ERR_INVALID_ARG, "qf_ctx_init: device -1 is negative");
    assert_null(ctx);
}

static void test_ctx_init_host_bad_arch(void **state) {
    (void)state;
    qf_ctx_t *ctx = (qf_ctx_t *)1;
    expect(qf_ctx_init_host(&ctx, 9), QF_ERR_INVALID_ARG, "arch 9 is not a compute capability",
           "89..199");
    assert_null(ctx);
    expect(qf_ctx_init_host(&ctx, 900), QF_ERR_INVALID_ARG, "arch 900");
    /* GPUs before sm_89 have no FP8 conversions: no qfuse op runs there (the tools agree). */
    expect(qf_ctx_init_host(&ctx, 80), QF_ERR_INVALID_ARG, "arch 80", "89..199");
    expect(qf_ctx_init_host(&ctx, 88), QF_ERR_INVALID_ARG, "arch 88");
    /* inside the range but no such GPU: NVRTC lists the targets it knows */
    expect(qf_ctx_init_host(&ctx, 91), QF_ERR_INVALID_ARG, "sm_91 is not a GPU architecture this "
           "NVRTC compiles for (sm_89, sm_90");
    assert_null(ctx);
    assert_int_equal(qf_ctx_init_host(&ctx, 89), QF_OK);
    qf_ctx_free(ctx);
    /* newer than every target: the newest one's code, as on such a device */
    assert_int_equal(qf_ctx_init_host(&ctx, 150), QF_OK);
    qf_ctx_free(ctx);
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

/* The LayerNorm part of a valid call on m x k: x bf16 in slot 0, eps 1e-5, gamma and beta [k]
 * bf16 in slots 1 and 2, out's mu and rsigma [m] fp32 in slots 3 and 4. */
static void layernorm_call(qf_tensor *x, qf_norm_desc *nd, qf_quantized *out, int64_t m,
                           int64_t k) {
    *x = t2(slot(0), QF_DTYPE_BF16, m, k);
    *nd = (qf_norm_desc){.norm = QF_NORM_LAYERNORM, .eps = 1e-5f};
    nd->gamma = t1(slot(1), QF_DTYPE_BF16, k);
    nd->beta = t1(slot(2), QF_DTYPE_BF16, k);
    out->t[QF_SLOT_MU] = t1(slot(3), QF_DTYPE_FP32, m);
    out->t[QF_SLOT_RSIGMA] = t1(slot(4), QF_DTYPE_FP32, m);
}

/* A valid LayerNorm call: x [M, K] bf16, rowwise E4M3 output (hybrid input format). */
static nq_args nq_valid(void **state) {
    nq_args a = {.ctx = *state, .recipe = kRecipe};
    layernorm_call(&a.x, &a.nd, &a.out, M, K);
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

/* A test of one change to nq_valid's call (QF_BAD_ARG_TEST). */
#define NQ_TEST(name, change, ...)                                                                 \
    QF_BAD_ARG_TEST(name, nq_args, nq_valid, nq_run, change, __VA_ARGS__)

/* Switches a valid call to RMSNorm: no beta, no mu. */
static void nq_rmsnorm(nq_args *a) {
    a->nd.norm = QF_NORM_RMSNORM;
    a->nd.beta.data = NULL;
    a->out.t[QF_SLOT_MU].data = NULL;
}

/* eps must be a finite number >= 0: NaN, negative and infinite values are refused. */
static void test_nq_eps_not_finite(void **state) {
    nq_args a = nq_valid(state);
    a.nd.eps = INFINITY;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "eps must be finite and >= 0 (got inf)");
    a.nd.eps = NAN;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "eps must be finite and >= 0");
    a.nd.eps = -1e-5f;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "eps must be finite and >= 0");
}

/* zero_centered_gamma is a flag: 0 or 1; any other value is refused, not read as true. */
static void test_nq_zcg_not_flag(void **state) {
    nq_args a = nq_valid(state);
    a.nd.zero_centered_gamma = 5;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "norm->zero_centered_gamma 5 is not 0 or 1");
    a.nd.zero_centered_gamma = -1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "norm->zero_centered_gamma -1 is not 0 or 1");
    a.nd.zero_centered_gamma = 1;
    expect(nq_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
}

static void test_nq_valid_reaches_device(void **state) {
    nq_args a = nq_valid(state);
    expect(nq_run(&a), QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid", "sm_90");
    nq_rmsnorm(&a);
    a.nd.gamma.dtype = QF_DTYPE_FP32; /* gamma may be fp32 for any x */
    expect(nq_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
}

NQ_TEST(test_nq_null_ctx, a.ctx = NULL, QF_ERR_INVALID_ARG, "qf_quantize: ctx is NULL")

NQ_TEST(test_nq_null_x, a.x_null = 1, QF_ERR_INVALID_ARG, "qf_quantize: x is NULL")

NQ_TEST(test_nq_null_x_data, a.x.data = NULL, QF_ERR_INVALID_ARG, "x.data is NULL")

NQ_TEST(test_nq_ndim_0, a.x.ndim = 0, QF_ERR_INVALID_ARG, "x.ndim is 0; expected 1..8")

NQ_TEST(test_nq_ndim_9, a.x.ndim = 9, QF_ERR_INVALID_ARG, "x.ndim is 9; expected 1..8")

NQ_TEST(test_nq_negative_dim, a.x.dims[0] = -4, QF_ERR_INVALID_ARG,
        "x.dims[0] is -4; expected >= 1")

/* Dims whose product overflows int64_t are no tensor: numel -1, and the op rejects x. */
static void test_nq_dims_overflow(void **state) {
    qf_tensor t = {.data = slot(0), .dtype = QF_DTYPE_BF16, .ndim = 3,
                   .dims = {INT64_MAX / 2, 4, 4}};
    assert_int_equal(qf_tensor_numel(&t), -1);
    nq_args a = nq_valid(state);
    a.x = t;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_quantize: x has more than 2^59 elements");
}

NQ_TEST(test_nq_x_dtype_e4m3, a.x.dtype = QF_DTYPE_E4M3, QF_ERR_INVALID_ARG,
        "x.dtype is e4m3; expected bf16, fp16 or fp32")

NQ_TEST(test_nq_x_misaligned, a.x.data = (char *)a.x.data + 1, QF_ERR_INVALID_ARG, "x.data",
        "is not aligned to its 2-byte elements")

NQ_TEST(test_nq_gamma_wrong_length, a.nd.gamma.dims[0] = K - 1, QF_ERR_INVALID_ARG,
        "gamma has 63 elements; expected K = 64")

NQ_TEST(test_nq_gamma_dtype_mismatch, a.nd.gamma.dtype = QF_DTYPE_FP16, QF_ERR_INVALID_ARG,
        "gamma.dtype is fp16; expected bf16 or fp32")

/* gamma [1, K] holds K elements but is no [K] vector */
NQ_TEST(test_nq_gamma_2d, (a.nd.gamma.ndim = 2, a.nd.gamma.dims[1] = K, a.nd.gamma.dims[0] = 1),
        QF_ERR_INVALID_ARG, "gamma.ndim is 2; expected 1 ([K] = [64])")

/* fp32 x: gamma must be fp32, and the message names it once */
static void test_nq_gamma_dtype_fp32_x(void **state) {
    nq_args a = nq_valid(state);
    a.x.dtype = QF_DTYPE_FP32, a.nd.gamma.dtype = QF_DTYPE_BF16;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "gamma.dtype is bf16; expected fp32");
    const char *end = strstr(qf_last_error(), "expected fp32") + strlen("expected fp32");
    assert_string_equal(end, "");
}

NQ_TEST(test_nq_beta_dtype_differs_from_gamma, a.nd.gamma.dtype = QF_DTYPE_FP32, QF_ERR_INVALID_ARG,
        "beta.dtype bf16 differs from gamma.dtype fp32")

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

NQ_TEST(test_nq_bad_norm, a.nd.norm = (qf_norm)7, QF_ERR_INVALID_ARG,
        "qf_quantize: norm->norm 7 is not QF_NORM_NONE")

NQ_TEST(test_nq_no_output_requested, a.out.t[QF_SLOT_ROWWISE_DATA].data = NULL, QF_ERR_INVALID_ARG,
        "out->rowwise_data.data and out->columnwise_data.data are both NULL",
        "request at least one copy")

static void test_nq_null_out(void **state) {
    nq_args a = nq_valid(state);
    expect(qf_quantize(a.ctx, kRecipe, QF_ROLE_INPUT, &a.x, &a.nd, a.scale, NULL, NULL, NULL),
           QF_ERR_INVALID_ARG, "qf_quantize: out is NULL");
}

/* The buffers are checked against the recipe's fake-shape function, slot by name. */
NQ_TEST(test_nq_rowwise_too_small, a.out.t[QF_SLOT_ROWWISE_DATA].dims[0] = M - 1,
        QF_ERR_INVALID_ARG,
        "out->rowwise_data has 192 elements (last dim 64); the shape function requires 256 (last "
        "dim 64)")

NQ_TEST(test_nq_mu_too_small, a.out.t[QF_SLOT_MU].dims[0] = M - 1, QF_ERR_INVALID_ARG,
        "out->mu has 3 elements", "requires 4")

NQ_TEST(test_nq_missing_scale_inv, a.out.t[QF_SLOT_SCALE_INV].data = NULL, QF_ERR_INVALID_ARG,
        "qf_quantize: out->scale_inv.data is NULL")

/* Hybrid quantizes inputs to E4M3. */
NQ_TEST(test_nq_wrong_output_dtype, a.out.t[QF_SLOT_ROWWISE_DATA].dtype = QF_DTYPE_E5M2,
        QF_ERR_INVALID_ARG, "out->rowwise_data.dtype is e5m2; expected e4m3")

NQ_TEST(test_nq_misaligned_output,
        a.out.t[QF_SLOT_ROWWISE_DATA].data = (char *)a.out.t[QF_SLOT_ROWWISE_DATA].data + 1,
        QF_ERR_INVALID_ARG, "out->rowwise_data.data", "is not 16-byte aligned")

/* Delayed scaling needs its scale; the families that compute theirs ignore the argument. */
NQ_TEST(test_nq_null_scale, a.scale = NULL, QF_ERR_INVALID_ARG, "qf_quantize: scale is NULL",
        "recipe 'fp8_delayed' (fp8_delayed)")

NQ_TEST(test_nq_unknown_recipe, a.recipe = "no_such_recipe", QF_ERR_NOT_FOUND,
        "recipe 'no_such_recipe' not found")

NQ_TEST(test_nq_null_recipe, a.recipe = NULL, QF_ERR_INVALID_ARG, "qf_quantize: recipe is NULL")

/* A very long unknown name is cut in the message, so that the reason and the list stay in it. */
static char long_name[6001];
NQ_TEST(test_nq_long_unknown_recipe,
        (memset(long_name, 'a', sizeof long_name - 1), a.recipe = long_name), QF_ERR_NOT_FOUND,
        "aaa...' not found: this build ships", "fp8_delayed")

/* =====================================================================} */

/* {===================================================================== roles, scale update */

/* Without a norm the roles are weight and grad; a norm goes with the input role only. */
static void test_quantize_role_input(void **state) {
    nq_args a = nq_valid(state);
    expect(qf_quantize(a.ctx, kRecipe, QF_ROLE_WEIGHT, &a.x, NULL, a.scale, NULL, &a.out, NULL),
           QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
    /* the input role without a norm: layernorm_mlp's fc2 input */
    expect(qf_quantize(a.ctx, kRecipe, QF_ROLE_INPUT, &a.x, NULL, a.scale, NULL, &a.out, NULL),
           QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
    expect(qf_quantize(a.ctx, kRecipe, (qf_role)7, &a.x, NULL, a.scale, NULL, &a.out, NULL),
           QF_ERR_INVALID_ARG, "qf_quantize: role 7 is not a qf_role");
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
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "n = 0 and H = 1024; expected n >= 1");
}

static void test_su_history_too_long(void **state) {
    su_args a = su_valid();
    a.H = 1 << 20;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "H = 1048576", "1 <= H <= 8192");
}

/* H is the recipe's amax_history_len: a history of another length is refused. */
static void test_su_history_not_the_recipes(void **state) {
    su_args a = su_valid();
    a.H = 8192;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "H = 8192, but recipe 'fp8_delayed' keeps an "
           "amax history of amax_history_len = 1024 steps");
    a.H = HIST - 1;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "H = 1023");
}

static void test_su_null_pointer(void **state) {
    su_args a = su_valid();
    a.scale_inv = NULL;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "scale_inv is NULL", "must all be device "
           "pointers");
}

/* The float arrays must be 4-byte aligned, and no two arrays may overlap. */
static void test_su_misaligned_or_overlapping(void **state) {
    su_args a = su_valid();
    a.amax = (float *)((char *)a.amax + 1);
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "amax", "is not 4-byte aligned");
    a = su_valid();
    a.history = (float *)((char *)a.history + 2);
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "history", "is not 4-byte aligned");
    a = su_valid();
    a.scale = a.scale_inv;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "scale", "scale_inv");
    a = su_valid();
    a.amax = a.history + 4;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "amax", "history");
    a = su_valid();
    a.fmt = (const uint8_t *)a.scale;
    expect(su_run(state, &a), QF_ERR_INVALID_ARG, "scale", "fmt");
}

/* Every family but delayed scaling computes its scales in the quantizer: no scale update, said
 * before any argument is checked. */
static void test_su_block_family(void **state) {
    su_args a = su_valid();
    expect(su_run_recipe(state, "mxfp8", &a), QF_ERR_UNSUPPORTED,
           "qf_scale_update: recipe 'mxfp8' (mxfp8) has no scale update");
    expect(su_run_recipe(state, "nvfp4", &a), QF_ERR_UNSUPPORTED, "recipe 'nvfp4' (nvfp4)");
    expect(su_run_recipe(state, "fp8_block", &a), QF_ERR_UNSUPPORTED,
           "recipe 'fp8_block' (fp8_block) has no scale update");
    expect(su_run_recipe(state, "fp8_current", &a), QF_ERR_UNSUPPORTED,
           "recipe 'fp8_current' (fp8_current) has no scale update");
    a.amax = a.history; /* the family's answer comes before the arguments' */
    expect(su_run_recipe(state, "mxfp8", &a), QF_ERR_UNSUPPORTED, "has no scale update");
    expect(su_run_recipe(state, "no_such_recipe", &a), QF_ERR_NOT_FOUND, "no_such_recipe");
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
    layernorm_call(&a.x, &a.nd, &a.out, NV_M, NV_K);
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

/* A test of one change to nv_valid's call (QF_BAD_ARG_TEST). */
#define NV_TEST(name, change, ...)                                                                 \
    QF_BAD_ARG_TEST(name, nv_args, nv_valid, nv_run, change, __VA_ARGS__)

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

NV_TEST(test_nv_null_out, a.out_null = 1, QF_ERR_INVALID_ARG, "qf_quantize: out is NULL")

NV_TEST(test_nv_m_not_multiple_of_16, a.x.dims[0] = 24, QF_ERR_INVALID_ARG,
        "x is viewed as [M, K] = [24, 64]", "NVFP4 needs M and K to be multiples of 16")

NV_TEST(test_nv_k_not_multiple_of_16, (a.role = QF_ROLE_WEIGHT, a.x.dims[1] = 40),
        QF_ERR_INVALID_ARG, "qf_quantize: x is viewed as [M, K] = [32, 40]", "multiples of 16")

static void test_nv_x_misaligned(void **state) {
    nv_args a = nv_valid(state);
    a.x.data = (char *)a.x.data + 2;
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "x.data", "is not 16-byte aligned");
    a = nv_valid(state);
    a.nd.gamma.dtype = QF_DTYPE_FP32, a.nd.beta.dtype = QF_DTYPE_FP32;
    a.nd.beta.data = (char *)a.nd.beta.data + 4; /* element-aligned, not 16-byte */
    expect(nv_run(&a), QF_ERR_INVALID_ARG, "beta.data", "is not 16-byte aligned");
}

NV_TEST(test_nv_rowwise_wrong_dtype, nv_slot(&a, QF_SLOT_ROWWISE_DATA)->dtype = QF_DTYPE_E4M3,
        QF_ERR_INVALID_ARG, "out->rowwise_data.dtype is e4m3; expected e2m1")

/* One element per byte: twice the size. */
NV_TEST(test_nv_rowwise_unpacked_size, nv_slot(&a, QF_SLOT_ROWWISE_DATA)->dims[1] = NV_K,
        QF_ERR_INVALID_ARG,
        "out->rowwise_data has 2048 elements (last dim 64); the shape function requires 1024 "
        "(last dim 32)")

NV_TEST(test_nv_row_scale_wrong_dtype,
        nv_slot(&a, QF_SLOT_ROWWISE_SCALE_INV)->dtype = QF_DTYPE_E8M0, QF_ERR_INVALID_ARG,
        "out->rowwise_scale_inv.dtype is e8m0; expected e4m3")

/* Rows must be padded to 128. */
NV_TEST(test_nv_row_scale_unpadded, nv_slot(&a, QF_SLOT_ROWWISE_SCALE_INV)->dims[0] = NV_M,
        QF_ERR_INVALID_ARG, "out->rowwise_scale_inv has 128 elements", "requires 512")

NV_TEST(test_nv_columnwise_not_transposed,
        (nv_slot(&a, QF_SLOT_COLUMNWISE_DATA)->dims[0] = NV_M,
         nv_slot(&a, QF_SLOT_COLUMNWISE_DATA)->dims[1] = NV_K / 2),
        QF_ERR_INVALID_ARG, "out->columnwise_data has 1024 elements (last dim 32)",
        "requires 1024 (last dim 16)")

NV_TEST(test_nv_col_scale_too_small, nv_slot(&a, QF_SLOT_COLUMNWISE_SCALE_INV)->dims[0] = 64,
        QF_ERR_INVALID_ARG, "out->columnwise_scale_inv has 256 elements", "requires 512")

NV_TEST(test_nv_amax_wrong_dtype, nv_slot(&a, QF_SLOT_AMAX_ROWWISE)->dtype = QF_DTYPE_BF16,
        QF_ERR_INVALID_ARG, "out->amax_rowwise.dtype is bf16; expected fp32")

NV_TEST(test_nv_amax_wrong_size, nv_slot(&a, QF_SLOT_AMAX_COLUMNWISE)->dims[0] = 2,
        QF_ERR_INVALID_ARG, "out->amax_columnwise has 2 elements", "requires 1")

NV_TEST(test_nv_missing_amax_rowwise, nv_slot(&a, QF_SLOT_AMAX_ROWWISE)->data = NULL,
        QF_ERR_INVALID_ARG, "out->amax_rowwise.data is NULL")

NV_TEST(test_nv_missing_amax_columnwise,
        (a.role = QF_ROLE_GRAD, nv_slot(&a, QF_SLOT_AMAX_COLUMNWISE)->data = NULL),
        QF_ERR_INVALID_ARG, "qf_quantize: out->amax_columnwise.data is NULL")

NV_TEST(test_nv_mu_wrong_size, nv_slot(&a, QF_SLOT_MU)->dims[0] = NV_M - 16, QF_ERR_INVALID_ARG,
        "out->mu has 16 elements", "requires 32")

NV_TEST(test_nv_rsigma_wrong_dtype, nv_slot(&a, QF_SLOT_RSIGMA)->dtype = QF_DTYPE_BF16,
        QF_ERR_INVALID_ARG, "out->rsigma.dtype is bf16; expected fp32")

NV_TEST(test_nv_null_rng_with_sr, (a.role = QF_ROLE_GRAD, a.rng_null = 1), QF_ERR_INVALID_ARG,
        "qf_quantize: rng is NULL", "recipe 'nvfp4' rounds gradients stochastically")

static void test_nv_wrong_role(void **state) {
    nv_args a = nv_valid(state);
    expect(qf_quantize(a.ctx, "nvfp4", (qf_role)3, &a.x, NULL, NULL, &a.rng, &a.out, NULL),
           QF_ERR_INVALID_ARG, "qf_quantize: role 3 is not a qf_role");
    /* the input role without a norm (RHT on its columnwise copy, no stochastic rounding) */
    expect(qf_quantize(a.ctx, "nvfp4", QF_ROLE_INPUT, &a.x, NULL, NULL, NULL, &a.out, NULL),
           QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
}

/* The family comes from the recipe: NVFP4 buffers under an MXFP8 recipe are checked against the
 * MXFP8 fake shapes, and rejected. */
NV_TEST(test_nv_wrong_family, a.recipe = "mxfp8", QF_ERR_INVALID_ARG,
        "out->rowwise_data.dtype is e2m1; expected e4m3")

NV_TEST(test_nv_bad_layout, a.out.layout = (qf_scale_layout)7, QF_ERR_INVALID_ARG,
        "out->layout 7 is not a qf_scale_layout")

/* =====================================================================} */

/* {===================================================================== FP8 block scaling */

/* x [5, 130]: partial 1x128 blocks along K and a partial 128-row strip (numerics 2.5). */
#define FB_M 5
#define FB_K 130

typedef struct fb_args {
    qf_ctx_t *ctx;
    qf_role role; /* QF_ROLE_INPUT: with the LayerNorm of nd */
    qf_tensor x;
    qf_norm_desc nd;
    qf_quantized out;
} fb_args;

/* Both copies of x [5, 130] with the scale_inv matrices of role's blocks: 1x128 / 128x1 (input,
 * grad) or 128x128 tiles (weight). */
static void fb_outputs(fb_args *a) {
    const int w = a->role == QF_ROLE_WEIGHT;
    a->out.t[QF_SLOT_ROWWISE_DATA] = t2(slot(5), QF_DTYPE_E4M3, FB_M, FB_K);
    a->out.t[QF_SLOT_ROWWISE_SCALE_INV] = w ? t2(slot(6), QF_DTYPE_FP32, 1, 4)
                                            : t2(slot(6), QF_DTYPE_FP32, 2, 8);
    a->out.t[QF_SLOT_COLUMNWISE_DATA] = t2(slot(7), QF_DTYPE_E4M3, FB_K, FB_M);
    a->out.t[QF_SLOT_COLUMNWISE_SCALE_INV] = w ? t2(slot(8), QF_DTYPE_FP32, 2, 4)
                                               : t2(slot(8), QF_DTYPE_FP32, 1, 132);
}

/* A valid LayerNorm call on x [5, 130] bf16, both copies. */
static fb_args fb_valid(void **state) {
    fb_args a = {.ctx = *state, .role = QF_ROLE_INPUT};
    layernorm_call(&a.x, &a.nd, &a.out, FB_M, FB_K);
    fb_outputs(&a);
    return a;
}

static qf_status fb_run(fb_args *a) {
    const int norm = a->role == QF_ROLE_INPUT;
    return qf_quantize(a->ctx, "fp8_block", a->role, &a->x, norm ? &a->nd : NULL, NULL, NULL,
                       &a->out, NULL);
}

static qf_tensor *fb_slot(fb_args *a, qf_slot s) {
    return &a->out.t[s];
}

#define FB_TEST(name, change, ...)                                                                 \
    QF_BAD_ARG_TEST(name, fb_args, fb_valid, fb_run, change, __VA_ARGS__)

/* Every role and copy selection of the fake shapes reaches the device. */
static void test_fb_valid_reaches_device(void **state) {
    fb_args a = fb_valid(state);
    expect(fb_run(&a), QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
    for (int r = QF_ROLE_WEIGHT; r <= QF_ROLE_GRAD; r++) {
        a.role = (qf_role)r;
        fb_outputs(&a);
        expect(fb_run(&a), QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
    }
    fb_slot(&a, QF_SLOT_COLUMNWISE_DATA)->data = NULL; /* grad, rowwise only */
    fb_slot(&a, QF_SLOT_COLUMNWISE_SCALE_INV)->data = NULL;
    expect(fb_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
    a = fb_valid(state); /* input, columnwise only */
    fb_slot(&a, QF_SLOT_ROWWISE_DATA)->data = NULL;
    fb_slot(&a, QF_SLOT_ROWWISE_SCALE_INV)->data = NULL;
    expect(fb_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
    /* the input role without a norm (layernorm_mlp's fc2 input) */
    a = fb_valid(state);
    expect(qf_quantize(a.ctx, "fp8_block", QF_ROLE_INPUT, &a.x, NULL, NULL, NULL, &a.out, NULL),
           QF_ERR_NO_DEVICE, "arguments are valid");
}

FB_TEST(test_fb_scale_wrong_dtype, fb_slot(&a, QF_SLOT_ROWWISE_SCALE_INV)->dtype = QF_DTYPE_E8M0,
        QF_ERR_INVALID_ARG, "qf_quantize: out->rowwise_scale_inv.dtype is e8m0; expected fp32")

/* M-major [cdiv(K,128), roundup(M,4)]: M not padded to 4 is refused. */
FB_TEST(test_fb_row_scale_unpadded, fb_slot(&a, QF_SLOT_ROWWISE_SCALE_INV)->dims[1] = FB_M,
        QF_ERR_INVALID_ARG, "out->rowwise_scale_inv has 10 elements", "requires 16")

/* The columnwise copy is transposed [K, M]: [M, K] with the same bytes has another last dim. */
FB_TEST(test_fb_columnwise_not_transposed,
        (fb_slot(&a, QF_SLOT_COLUMNWISE_DATA)->dims[0] = FB_M,
         fb_slot(&a, QF_SLOT_COLUMNWISE_DATA)->dims[1] = FB_K),
        QF_ERR_INVALID_ARG, "out->columnwise_data has 650 elements (last dim 130)",
        "requires 650 (last dim 5)")

/* Weights take 128x128 tile scales: the 1x128 matrices are refused. */
FB_TEST(test_fb_weight_with_1d_scales,
        (a.role = QF_ROLE_WEIGHT,
         *fb_slot(&a, QF_SLOT_ROWWISE_SCALE_INV) = t2(slot(6), QF_DTYPE_FP32, 2, 8)),
        QF_ERR_INVALID_ARG, "out->rowwise_scale_inv has 16 elements", "requires 4")

FB_TEST(test_fb_missing_col_scale, fb_slot(&a, QF_SLOT_COLUMNWISE_SCALE_INV)->data = NULL,
        QF_ERR_INVALID_ARG, "qf_quantize: out->columnwise_scale_inv.data is NULL")

/* One scale layout: the compact GEMM_READY matrices (a swizzled request is not ignored). */
FB_TEST(test_fb_swizzled_layout, a.out.layout = QF_SCALE_LAYOUT_SWIZZLED, QF_ERR_INVALID_ARG,
        "qf_quantize: out->layout is swizzled; FP8 block scaling has one scale layout, compact")

FB_TEST(test_fb_layout_out_of_range, a.out.layout = (qf_scale_layout)7, QF_ERR_INVALID_ARG,
        "qf_quantize: out->layout 7 is not a qf_scale_layout")

FB_TEST(test_fb_mu_wrong_size, fb_slot(&a, QF_SLOT_MU)->dims[0] = FB_M + 1, QF_ERR_INVALID_ARG,
        "out->mu has 6 elements", "requires 5")

/* Outputs that share memory with each other or with x are refused before anything runs (the
 * kernels would overwrite one with the other), the overlapping pair named. */
FB_TEST(test_fb_copies_alias,
        fb_slot(&a, QF_SLOT_COLUMNWISE_DATA)->data = fb_slot(&a, QF_SLOT_ROWWISE_DATA)->data,
        QF_ERR_INVALID_ARG, "out->rowwise_data (", "and out->columnwise_data (", "overlap")

FB_TEST(test_fb_stats_alias, fb_slot(&a, QF_SLOT_RSIGMA)->data = fb_slot(&a, QF_SLOT_MU)->data,
        QF_ERR_INVALID_ARG, "out->mu (", "and out->rsigma (", "overlap")

FB_TEST(test_fb_output_is_x, fb_slot(&a, QF_SLOT_ROWWISE_SCALE_INV)->data = (char *)a.x.data + 256,
        QF_ERR_INVALID_ARG, "out->rowwise_scale_inv (", "and x (", "overlap")

FB_TEST(test_fb_output_is_gamma, a.nd.gamma.data = fb_slot(&a, QF_SLOT_MU)->data,
        QF_ERR_INVALID_ARG, "out->mu (", "and norm->gamma (", "overlap")

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

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_amax_reduce_get_set),
        T(test_ctx_init_null_out),
        T(test_ctx_init_host_bad_arch),
        T(test_nq_valid_reaches_device),
        T(test_nq_eps_not_finite),
        T(test_nq_zcg_not_flag),
        T(test_nq_null_ctx),
        T(test_nq_null_x),
        T(test_nq_null_x_data),
        T(test_nq_ndim_0),
        T(test_nq_ndim_9),
        T(test_nq_negative_dim),
        T(test_nq_x_dtype_e4m3),
        T(test_nq_x_misaligned),
        T(test_nq_gamma_wrong_length),
        T(test_nq_gamma_dtype_mismatch),
        T(test_nq_gamma_2d),
        T(test_nq_gamma_dtype_fp32_x),
        T(test_nq_beta_dtype_differs_from_gamma),
        T(test_nq_rmsnorm_with_beta),
        T(test_nq_bad_norm),
        T(test_nq_no_output_requested),
        T(test_nq_null_out),
        T(test_nq_rowwise_too_small),
        T(test_nq_mu_too_small),
        T(test_nq_missing_scale_inv),
        T(test_nq_wrong_output_dtype),
        T(test_nq_misaligned_output),
        T(test_nq_null_scale),
        T(test_nq_unknown_recipe),
        T(test_nq_null_recipe),
        T(test_nq_long_unknown_recipe),
        T(test_nq_dims_overflow),
        T(test_quantize_role_input),
        T(test_su_n_zero),
        T(test_su_history_too_long),
        T(test_su_history_not_the_recipes),
        T(test_su_null_pointer),
        T(test_su_misaligned_or_overlapping),
        T(test_su_block_family),
        T(test_nv_valid_reaches_device),
        T(test_nv_null_out),
        T(test_nv_m_not_multiple_of_16),
        T(test_nv_k_not_multiple_of_16),
        T(test_nv_x_misaligned),
        T(test_nv_rowwise_wrong_dtype),
        T(test_nv_rowwise_unpacked_size),
        T(test_nv_row_scale_wrong_dtype),
        T(test_nv_row_scale_unpadded),
        T(test_nv_columnwise_not_transposed),
        T(test_nv_col_scale_too_small),
        T(test_nv_amax_wrong_dtype),
        T(test_nv_amax_wrong_size),
        T(test_nv_missing_amax_rowwise),
        T(test_nv_missing_amax_columnwise),
        T(test_nv_mu_wrong_size),
        T(test_nv_rsigma_wrong_dtype),
        T(test_nv_null_rng_with_sr),
        T(test_nv_wrong_role),
        T(test_nv_wrong_family),
        T(test_nv_bad_layout),
        T(test_fb_valid_reaches_device),
        T(test_fb_scale_wrong_dtype),
        T(test_fb_row_scale_unpadded),
        T(test_fb_columnwise_not_transposed),
        T(test_fb_weight_with_1d_scales),
        T(test_fb_missing_col_scale),
        T(test_fb_swizzled_layout),
        T(test_fb_layout_out_of_range),
        T(test_fb_mu_wrong_size),
        T(test_fb_copies_alias),
        T(test_fb_stats_alias),
        T(test_fb_output_is_x),
        T(test_fb_output_is_gamma),
        T(test_stream_of_other_context),
        T(test_bad_input_writes_nothing),
    };
    return cmocka_run_group_tests_name("api_errors", tests, NULL, NULL);
}
