/* test_api_bwd.c: the argument checks of qf_norm_backward and qf_dbias on a device-less sm_90
 * context (no GPU needed): valid arguments reach the device check (QF_ERR_NO_DEVICE), and each
 * bad argument gets QF_ERR_INVALID_ARG (or QF_ERR_UNSUPPORTED) naming it, before anything
 * launches. The fake shapes of both ops are checked too, and the checks of the activation, its
 * fused quantization (qf_quantize_act, qf_dbias_act) and the MLP, and the shapes a whole MLP step
 * accepts per recipe. */
#include "ctx.h"
#include "registry.h"
#include "validate.h"

#include "test_api_util.h"

typedef struct nb_args {
    qf_ctx_t *ctx;
    const char *recipe;
    qf_norm_desc nd;
    qf_tensor x, dxn, mu, rsigma;
    qf_norm_grads g;
} nb_args;

/* LayerNorm backward of x [4, 64] bf16, dxn bf16, gamma bf16, fp32 statistics. */
static nb_args nb_valid(void **state) {
    nb_args a = {.ctx = *state, .recipe = kRecipe};
    a.nd = (qf_norm_desc){.norm = QF_NORM_LAYERNORM, .gamma = t1(slot(0), QF_DTYPE_BF16, K)};
    a.x = t2(slot(1), QF_DTYPE_BF16, M, K);
    a.dxn = t2(slot(2), QF_DTYPE_BF16, M, K);
    a.mu = t1(slot(3), QF_DTYPE_FP32, M);
    a.rsigma = t1(slot(4), QF_DTYPE_FP32, M);
    a.g.dx = t2(slot(5), QF_DTYPE_BF16, M, K);
    a.g.dgamma = t1(slot(6), QF_DTYPE_FP32, K);
    a.g.dbeta = t1(slot(7), QF_DTYPE_FP32, K);
    return a;
}

static qf_status nb_run(nb_args *a) {
    return qf_norm_backward(a->ctx, a->recipe, &a->nd, &a->x, &a->dxn, &a->mu, &a->rsigma, &a->g,
                            NULL);
}

#define NB_TEST(name, change, ...)                                                                 \
    QF_BAD_ARG_TEST(name, nb_args, nb_valid, nb_run, change, __VA_ARGS__)

static void test_nb_valid_reaches_device(void **state) {
    nb_args a = nb_valid(state);
    expect(nb_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
    /* RMSNorm: no mu, no dbeta; fp32 gamma and dxn; a recipe of every family */
    a.nd.norm = QF_NORM_RMSNORM;
    a.mu = (qf_tensor){0};
    a.g.dbeta = (qf_tensor){0};
    a.nd.gamma.dtype = QF_DTYPE_FP32;
    a.dxn.dtype = QF_DTYPE_FP32;
    static const char *const recipes[] = {"fp8_delayed", "fp8_current", "mxfp8", "nvfp4"};
    for (size_t i = 0; i < sizeof recipes / sizeof recipes[0]; i++) {
        a.recipe = recipes[i];
        expect(nb_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
    }
}

static void test_nb_null_args(void **state) {
    nb_args a = nb_valid(state);
    expect(qf_norm_backward(a.ctx, a.recipe, NULL, &a.x, &a.dxn, &a.mu, &a.rsigma, &a.g, NULL),
           QF_ERR_INVALID_ARG, "norm is NULL");
    expect(qf_norm_backward(a.ctx, a.recipe, &a.nd, &a.x, NULL, &a.mu, &a.rsigma, &a.g, NULL),
           QF_ERR_INVALID_ARG, "dxn is NULL");
    expect(qf_norm_backward(a.ctx, a.recipe, &a.nd, &a.x, &a.dxn, &a.mu, &a.rsigma, NULL, NULL),
           QF_ERR_INVALID_ARG, "out is NULL");
    expect(qf_norm_backward(NULL, a.recipe, &a.nd, &a.x, &a.dxn, &a.mu, &a.rsigma, &a.g, NULL),
           QF_ERR_INVALID_ARG, "ctx");
}

NB_TEST(test_nb_no_norm, a.nd.norm = QF_NORM_NONE, QF_ERR_INVALID_ARG,
        "norm->norm 0 is not QF_NORM_LAYERNORM or QF_NORM_RMSNORM")
NB_TEST(test_nb_zcg_not_flag, a.nd.zero_centered_gamma = 5, QF_ERR_INVALID_ARG,
        "norm->zero_centered_gamma 5 is not 0 or 1")
NB_TEST(test_nb_x_dtype, a.x.dtype = QF_DTYPE_E4M3, QF_ERR_INVALID_ARG,
        "x.dtype is e4m3; expected bf16, fp16 or fp32")
NB_TEST(test_nb_gamma_length, a.nd.gamma.dims[0] = K - 1, QF_ERR_INVALID_ARG,
        "norm->gamma has 63 elements; expected K = 64")
NB_TEST(test_nb_gamma_dtype, a.nd.gamma.dtype = QF_DTYPE_FP16, QF_ERR_INVALID_ARG,
        "norm->gamma.dtype is fp16; expected bf16 or fp32")
NB_TEST(test_nb_dxn_dtype, a.dxn.dtype = QF_DTYPE_FP16, QF_ERR_INVALID_ARG,
        "dxn.dtype is fp16; the gradient of the norm's output is bf16 or fp32")
NB_TEST(test_nb_dxn_shape, a.dxn.dims[1] = K / 2, QF_ERR_INVALID_ARG, "dxn has 128 elements")
NB_TEST(test_nb_rsigma_missing, a.rsigma.data = NULL, QF_ERR_INVALID_ARG, "rsigma.data is NULL")
NB_TEST(test_nb_mu_short, a.mu.dims[0] = M - 1, QF_ERR_INVALID_ARG, "mu has 3 elements")
NB_TEST(test_nb_dx_dtype, a.g.dx.dtype = QF_DTYPE_FP32, QF_ERR_INVALID_ARG,
        "out->dx.dtype is fp32; expected bf16")
NB_TEST(test_nb_dgamma_dtype, a.g.dgamma.dtype = QF_DTYPE_BF16, QF_ERR_INVALID_ARG,
        "out->dgamma.dtype is bf16; expected fp32")
NB_TEST(test_nb_dbeta_missing, a.g.dbeta.data = NULL, QF_ERR_INVALID_ARG,
        "out->dbeta.data is NULL")
NB_TEST(test_nb_rmsnorm_dbeta, a.nd.norm = QF_NORM_RMSNORM, QF_ERR_INVALID_ARG,
        "rmsnorm has no beta; leave out->dbeta.data NULL")
NB_TEST(test_nb_k_too_large,
        (a.x.dims[1] = a.dxn.dims[1] = a.g.dx.dims[1] = 24577,
         a.nd.gamma.dims[0] = a.g.dgamma.dims[0] = a.g.dbeta.dims[0] = 24577),
        QF_ERR_UNSUPPORTED, "K = 24577", "K <= 24576")
NB_TEST(test_nb_unknown_recipe, a.recipe = "nope", QF_ERR_NOT_FOUND, "nope")
/* no output may overlap an input or another output */
NB_TEST(test_nb_dx_on_x, a.g.dx.data = a.x.data, QF_ERR_INVALID_ARG, "out->dx", "and x", "overlap")
NB_TEST(test_nb_dx_on_dxn, a.g.dx.data = (char *)a.dxn.data + 16, QF_ERR_INVALID_ARG, "out->dx",
        "and dxn", "overlap")
NB_TEST(test_nb_dgamma_on_mu, a.g.dgamma.data = a.mu.data, QF_ERR_INVALID_ARG, "out->dgamma",
        "and mu", "overlap")
NB_TEST(test_nb_dbeta_on_rsigma, a.g.dbeta.data = a.rsigma.data, QF_ERR_INVALID_ARG,
        "out->dbeta", "and rsigma", "overlap")
NB_TEST(test_nb_dgamma_on_gamma, a.g.dgamma.data = a.nd.gamma.data, QF_ERR_INVALID_ARG,
        "out->dgamma", "and norm->gamma", "overlap")
NB_TEST(test_nb_dbeta_on_dgamma, a.g.dbeta.data = a.g.dgamma.data, QF_ERR_INVALID_ARG,
        "out->dgamma", "and out->dbeta", "overlap")
NB_TEST(test_nb_dgamma_in_dx, a.g.dgamma.data = (char *)a.g.dx.data + 64, QF_ERR_INVALID_ARG,
        "out->dx", "and out->dgamma", "overlap")

/* RMSNorm ignores mu and beta: an output on their (unused) pointers is accepted */
static void test_nb_rmsnorm_ignored_inputs(void **state) {
    nb_args a = nb_valid(state);
    a.nd.norm = QF_NORM_RMSNORM;
    a.g.dbeta = (qf_tensor){0};
    a.mu.data = a.g.dgamma.data;
    a.nd.beta = a.g.dx;
    expect(nb_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
}

/* The op's fake shapes: dx in the query's dtype, fp32 dgamma, dbeta for LayerNorm only; a query
 * without a norm or with a dtype that is not bf16, fp16 or fp32 is refused. */
static void test_nb_fake_shapes(void **state) {
    (void)state;
    qf_shape sh[4];
    int n = 0;
    /* {op, role, norm, outputs, M, N, K, dtype} (test_api_util.h defines M, N and K) */
    qf_shape_query q = {QF_OP_NORM_BACKWARD, QF_ROLE_INPUT, QF_NORM_LAYERNORM, 0, 3, 0, 5,
                        QF_DTYPE_FP16};
    assert_int_equal(qf_fake_shapes("nvfp4", &q, sh, 4, &n), QF_OK);
    assert_int_equal(n, 3);
    assert_string_equal(sh[0].name, "dx");
    assert_int_equal(sh[0].dtype, QF_DTYPE_FP16);
    assert_int_equal(sh[0].bytes, 2u * 3 * 5);
    assert_string_equal(sh[1].name, "dgamma");
    assert_int_equal(sh[1].bytes, 4u * 5);
    assert_string_equal(sh[2].name, "dbeta");
    q.norm = QF_NORM_RMSNORM;
    assert_int_equal(qf_fake_shapes("fp8_delayed", &q, sh, 4, &n), QF_OK);
    assert_int_equal(n, 2);
    q.dtype = QF_DTYPE_E4M3;
    expect(qf_fake_shapes("mxfp8", &q, sh, 4, &n), QF_ERR_INVALID_ARG,
           "rejects the shape query (op norm_backward", "norm rmsnorm, dtype e4m3");
    q.dtype = QF_DTYPE_BF16;
    q.norm = QF_NORM_NONE;
    assert_int_equal(qf_fake_shapes("mxfp8", &q, sh, 4, &n), QF_ERR_INVALID_ARG);
}

/* dbias of dy [4, 32] bf16 into [32] bf16; bad dtypes, sizes, N and the fake shapes. */
static void test_dbias_args(void **state) {
    qf_ctx_t *ctx = *state;
    const qf_tensor dy = t2(slot(0), QF_DTYPE_BF16, M, N);
    qf_tensor db = t1(slot(1), QF_DTYPE_BF16, N);
    expect(qf_dbias(ctx, kRecipe, &dy, &db, NULL), QF_ERR_NO_DEVICE, "arguments are valid");
    expect(qf_dbias(ctx, kRecipe, NULL, &db, NULL), QF_ERR_INVALID_ARG, "dy is NULL");
    expect(qf_dbias(ctx, kRecipe, &dy, NULL, NULL), QF_ERR_INVALID_ARG, "dbias is NULL");
    db.dtype = QF_DTYPE_FP32;
    expect(qf_dbias(ctx, kRecipe, &dy, &db, NULL), QF_ERR_INVALID_ARG,
           "dbias.dtype is fp32; expected bf16");
    db = t1(slot(1), QF_DTYPE_BF16, N - 1);
    expect(qf_dbias(ctx, kRecipe, &dy, &db, NULL), QF_ERR_INVALID_ARG, "dbias has 31 elements");
    qf_tensor e4 = dy;
    e4.dtype = QF_DTYPE_E4M3;
    expect(qf_dbias(ctx, kRecipe, &e4, &db, NULL), QF_ERR_INVALID_ARG,
           "dy.dtype is e4m3; expected bf16, fp16 or fp32");
    const qf_tensor wide = t2(slot(0), QF_DTYPE_BF16, 1, ((int64_t)1 << 30) + 1);
    expect(qf_dbias(ctx, kRecipe, &wide, &db, NULL), QF_ERR_UNSUPPORTED, "N = 1073741825");
    qf_shape sh[2];
    int n = 0;
    /* {op, role, norm, outputs, M, N, K, dtype} */
    const qf_shape_query q = {QF_OP_DBIAS, QF_ROLE_GRAD, QF_NORM_NONE, 0, 7, 9, 0, QF_DTYPE_FP16};
    assert_int_equal(qf_fake_shapes("nvfp4", &q, sh, 2, &n), QF_OK);
    assert_int_equal(n, 1);
    assert_string_equal(sh[0].name, "dbias");
    assert_int_equal(sh[0].dtype, QF_DTYPE_FP16);
    assert_int_equal(sh[0].bytes, 2u * 9);
}

/* The activation's checks: h [4, 64] bf16 -> a [4, 64] (gelu) or [4, 32] (swiglu); dh as h. */
static void test_activation_args(void **state) {
    qf_ctx_t *ctx = *state;
    const qf_tensor h = t2(slot(0), QF_DTYPE_BF16, M, K);
    qf_tensor a = t2(slot(1), QF_DTYPE_BF16, M, K), ah = t2(slot(1), QF_DTYPE_BF16, M, K / 2);
    const qf_tensor da = t2(slot(2), QF_DTYPE_FP32, M, K / 2);
    qf_tensor dh = t2(slot(3), QF_DTYPE_BF16, M, K);
    expect(qf_activation_fwd(ctx, kRecipe, QF_ACT_GELU, &h, &a, NULL), QF_ERR_NO_DEVICE,
           "arguments are valid");
    expect(qf_activation_fwd(ctx, kRecipe, QF_ACT_SWIGLU, &h, &ah, NULL), QF_ERR_NO_DEVICE,
           "arguments are valid");
    expect(qf_activation_bwd(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, &dh, NULL), QF_ERR_NO_DEVICE,
           "arguments are valid");
    expect(qf_activation_fwd(ctx, kRecipe, QF_ACT_SWIGLU, &h, &a, NULL), QF_ERR_INVALID_ARG,
           "a has 256 elements");
    expect(qf_activation_fwd(ctx, kRecipe, (qf_activation)9, &h, &a, NULL), QF_ERR_INVALID_ARG,
           "act 9 is not a qf_activation");
    const qf_tensor odd = t2(slot(0), QF_DTYPE_BF16, M, 7);
    expect(qf_activation_fwd(ctx, kRecipe, QF_ACT_SWIGLU, &odd, &a, NULL), QF_ERR_INVALID_ARG,
           "is odd");
    expect(qf_activation_bwd(ctx, kRecipe, QF_ACT_SWIGLU, &h, NULL, &dh, NULL),
           QF_ERR_INVALID_ARG, "da is NULL");
    const qf_tensor da16 = t2(slot(2), QF_DTYPE_FP16, M, K / 2);
    expect(qf_activation_bwd(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da16, &dh, NULL),
           QF_ERR_INVALID_ARG, "da.dtype is fp16");
    /* in place only where the output lies exactly on its input, non-gated */
    qf_tensor a_on_h = t2(slot(0), QF_DTYPE_BF16, M, K);
    expect(qf_activation_fwd(ctx, kRecipe, QF_ACT_GELU, &h, &a_on_h, NULL), QF_ERR_NO_DEVICE,
           "arguments are valid");
    qf_tensor ah_on_h = t2(slot(0), QF_DTYPE_BF16, M, K / 2);
    expect(qf_activation_fwd(ctx, kRecipe, QF_ACT_SWIGLU, &h, &ah_on_h, NULL), QF_ERR_INVALID_ARG,
           "overlap");
    ah_on_h.data = (char *)slot(0) + 64;
    expect(qf_activation_fwd(ctx, kRecipe, QF_ACT_SWIGLU, &h, &ah_on_h, NULL), QF_ERR_INVALID_ARG,
           "overlap");
    qf_tensor a_past_h = t2((char *)slot(0) + 64, QF_DTYPE_BF16, M, K);
    expect(qf_activation_fwd(ctx, kRecipe, QF_ACT_RELU, &h, &a_past_h, NULL), QF_ERR_INVALID_ARG,
           "overlap");
    qf_tensor dh_on_da = t2((char *)slot(2) + 16, QF_DTYPE_BF16, M, K);
    expect(qf_activation_bwd(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, &dh_on_da, NULL),
           QF_ERR_INVALID_ARG, "overlap");
    /* qf_activation_amax: the same checks, and its amax [1] fp32 apart from the others */
    qf_tensor am = {.data = slot(4), .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}};
    expect(qf_activation_amax(ctx, kRecipe, QF_ACT_GELU, &h, NULL, &a, &am, NULL),
           QF_ERR_NO_DEVICE, "arguments are valid");
    expect(qf_activation_amax(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, &dh, &am, NULL),
           QF_ERR_NO_DEVICE, "arguments are valid");
    expect(qf_activation_amax(ctx, kRecipe, QF_ACT_GELU, &h, NULL, &a, NULL, NULL),
           QF_ERR_INVALID_ARG, "amax is NULL");
    expect(qf_activation_amax(ctx, kRecipe, QF_ACT_SWIGLU, &h, NULL, &a, &am, NULL),
           QF_ERR_INVALID_ARG, "a has 256 elements");
    qf_tensor am_on_a = {.data = slot(1), .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}};
    expect(qf_activation_amax(ctx, kRecipe, QF_ACT_GELU, &h, NULL, &a, &am_on_a, NULL),
           QF_ERR_INVALID_ARG, "overlap");
    am.dtype = QF_DTYPE_BF16;
    expect(qf_activation_amax(ctx, kRecipe, QF_ACT_GELU, &h, NULL, &a, &am, NULL),
           QF_ERR_INVALID_ARG, "amax.dtype is bf16");
    am.dtype = QF_DTYPE_FP32, am.dims[0] = 2;
    expect(qf_activation_amax(ctx, kRecipe, QF_ACT_GELU, &h, NULL, &a, &am, NULL),
           QF_ERR_INVALID_ARG, "amax");
    a.dtype = QF_DTYPE_FP32;
    expect(qf_activation_fwd(ctx, kRecipe, QF_ACT_RELU, &h, &a, NULL), QF_ERR_INVALID_ARG,
           "a.dtype is fp32; expected bf16");
    qf_shape sh[4];
    int n = 0;
    /* {op, role, norm, outputs, M, N, K, dtype}: swiglu, F = 5: a [3, 5], dh [3, 2, 5] */
    const qf_shape_query q = {QF_OP_ACTIVATION, QF_ROLE_INPUT, QF_NORM_NONE, QF_OUT_GATED, 3, 5,
                              0, QF_DTYPE_BF16};
    assert_int_equal(qf_fake_shapes("mxfp8", &q, sh, 4, &n), QF_OK);
    assert_int_equal(n, 2);
    assert_string_equal(sh[0].name, "a");
    assert_int_equal(sh[0].bytes, 2u * 3 * 5);
    assert_string_equal(sh[1].name, "dh");
    assert_int_equal(sh[1].bytes, 2u * 3 * 2 * 5);
}

/* Device-like addresses that a host context checks but never dereferences (256-byte aligned). */
static void *fake_buf(size_t bytes) {
    static uintptr_t next = (uintptr_t)1 << 40;
    void *p = (void *)next;
    next += (bytes + 511) / 256 * 256;
    return p;
}

static qf_tensor fake_t(qf_dtype dt, int ndim, int64_t d0, int64_t d1) {
    qf_tensor t = {.data = fake_buf((size_t)(d0 * (ndim > 1 ? d1 : 1)) * qf_dtype_size(dt)),
                   .dtype = dt, .ndim = ndim};
    t.dims[0] = d0, t.dims[1] = d1;
    return t;
}

/* Both copies of a [rows, cols] tensor (with a norm's statistics for the input role's x) at fake
 * addresses, as the fake shapes list them; *st keeps the first refusal of the shape function. */
static qf_quantized fake_q(const char *recipe, qf_role role, qf_norm norm, int64_t rows,
                           int64_t cols, qf_scale_layout layout, qf_status *st) {
    /* {op, role, norm, outputs, M, N, K, dtype} (M and K are macros here) */
    const qf_shape_query sq = {norm ? QF_OP_NORM_QUANTIZE : QF_OP_QUANTIZE, role, norm,
                               QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, rows, 0, cols, 0};
    qf_shape sh[QF_SLOT_COUNT];
    int n = 0;
    qf_quantized q = {.layout = layout};
    const qf_status s = qf_fake_shapes(recipe, &sq, sh, QF_SLOT_COUNT, &n);
    if (s != QF_OK) {
        *st = *st != QF_OK ? *st : s;
        return q;
    }
    for (int i = 0; i < n; i++) {
        const int sl = qf_slot_from_name(sh[i].name);
        q.t[sl] = (qf_tensor){.data = fake_buf(sh[i].bytes), .dtype = sh[i].dtype,
                              .ndim = sh[i].ndim};
        memcpy(q.t[sl].dims, sh[i].dims, sizeof sh[i].dims);
    }
    return q;
}

/* qf_quantize_act and qf_dbias_act: h [4, 64] bf16; swiglu: a's copies [4, 32], dh's [4, 64],
 * da [4, 32]. Valid calls reach the device check; each bad argument is named. */
static void test_act_quantize_args(void **state) {
    qf_ctx_t *ctx = *state;
    const qf_tensor h = t2(slot(0), QF_DTYPE_BF16, M, K), da = t2(slot(1), QF_DTYPE_FP32, M, K / 2);
    const float *scale = (const float *)slot(2);
    const qf_rng rng = {1, 2};
    const qf_scale_layout cl = QF_SCALE_LAYOUT_COMPACT;
    qf_status st = QF_OK;
    qf_quantized aq = fake_q(kRecipe, QF_ROLE_INPUT, QF_NORM_NONE, M, K / 2, cl, &st);
    qf_quantized dhq = fake_q(kRecipe, QF_ROLE_GRAD, QF_NORM_NONE, M, K, cl, &st);
    qf_quantized gq = fake_q(kRecipe, QF_ROLE_INPUT, QF_NORM_NONE, M, K, cl, &st); /* gelu's a */
    assert_int_equal(st, QF_OK);
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, NULL, scale, NULL, &aq, NULL),
           QF_ERR_NO_DEVICE, "arguments are valid");
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_GELU, &h, NULL, scale, NULL, &gq, NULL),
           QF_ERR_NO_DEVICE, "arguments are valid");
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, NULL),
           QF_ERR_NO_DEVICE, "arguments are valid");
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_GELU, &h, NULL, scale, NULL, &aq, NULL),
           QF_ERR_INVALID_ARG, "out->rowwise_data", "elements");
    expect(qf_quantize_act(ctx, kRecipe, (qf_activation)9, &h, NULL, scale, NULL, &aq, NULL),
           QF_ERR_INVALID_ARG, "act 9 is not a qf_activation");
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, NULL, NULL, scale, NULL, &aq, NULL),
           QF_ERR_INVALID_ARG, "h is NULL");
    const qf_tensor odd = t2(slot(0), QF_DTYPE_BF16, M, 7);
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &odd, NULL, scale, NULL, &aq, NULL),
           QF_ERR_INVALID_ARG, "h's last dimension 7 is odd");
    qf_tensor h8 = h;
    h8.dtype = QF_DTYPE_E4M3;
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h8, NULL, scale, NULL, &aq, NULL),
           QF_ERR_INVALID_ARG, "h.dtype is e4m3");
    const qf_tensor da_wide = t2(slot(1), QF_DTYPE_FP32, M, K);
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da_wide, scale, &rng, &dhq, NULL),
           QF_ERR_INVALID_ARG, "da has 256 elements (last dim 64); the gradient of the "
           "activation's output is [M, F] = [4, 32]");
    const qf_tensor da_same = t2(slot(1), QF_DTYPE_FP32, 2 * M, K / 4); /* 128 elements too */
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da_same, scale, &rng, &dhq, NULL),
           QF_ERR_INVALID_ARG, "da has 128 elements (last dim 16)", "[M, F] = [4, 32]");
    const qf_tensor da16 = t2(slot(1), QF_DTYPE_FP16, M, K / 2);
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da16, scale, &rng, &dhq, NULL),
           QF_ERR_INVALID_ARG, "da.dtype is fp16");
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, NULL, NULL, NULL, &aq, NULL),
           QF_ERR_INVALID_ARG, "scale is NULL");
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, NULL,
                           (const float *)((const char *)scale + 1), NULL, &aq, NULL),
           QF_ERR_INVALID_ARG, "scale", "is not 4-byte aligned");
    /* a's input-role [4, 32] copies given for dh's grad-role [4, 64] ones: E4M3 for E5M2 */
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &aq, NULL),
           QF_ERR_INVALID_ARG, "out->rowwise_data.dtype is e4m3; expected e5m2");
    expect(qf_quantize_act(NULL, kRecipe, (qf_activation)7, &h, NULL, scale, NULL, &aq, NULL),
           QF_ERR_INVALID_ARG, "ctx is NULL"); /* ctx and recipe first, as every op */
    /* NVFP4 names the quantized tensor: a = act(h) is [4, 32] for h [4, 64] */
    expect(qf_quantize_act(ctx, "nvfp4", QF_ACT_SWIGLU, &h, NULL, scale, NULL, &aq, NULL),
           QF_ERR_INVALID_ARG, "the quantized a = act(h) is [M, K] = [4, 32]");
    expect(qf_quantize_act(ctx, "nvfp4", QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, NULL),
           QF_ERR_INVALID_ARG, "the quantized dh is [M, K] = [4, 64]");
    qf_tensor db = t1(slot(15), QF_DTYPE_BF16, K);
    const qf_tensor h_wide = t2(slot(0), QF_DTYPE_BF16, 1, ((int64_t)1 << 31));
    const qf_tensor da_wide2 = t2(slot(1), QF_DTYPE_FP32, 1, ((int64_t)1 << 30));
    expect(qf_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h_wide, &da_wide2, NULL, NULL),
           QF_ERR_INVALID_ARG, "dbias is NULL");
    expect(qf_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h_wide, &da_wide2, &db, NULL),
           QF_ERR_UNSUPPORTED, "h's last dimension N = 2147483648 is too large");
    expect(qf_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, &db, NULL), QF_ERR_NO_DEVICE,
           "arguments are valid");
    expect(qf_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, NULL, &db, NULL), QF_ERR_INVALID_ARG,
           "da is NULL");
    expect(qf_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &odd, &da, &db, NULL), QF_ERR_INVALID_ARG,
           "is odd");
    expect(qf_dbias_act(ctx, kRecipe, (qf_activation)-1, &h, &da, &db, NULL), QF_ERR_INVALID_ARG,
           "act -1 is not a qf_activation");
    expect(qf_dbias_act(ctx, kRecipe, QF_ACT_GELU, &h, &da, &db, NULL), QF_ERR_INVALID_ARG, "da");
    /* qf_quantize_dbias_act: both ops' checks, before any launch */
    db = t1(slot(15), QF_DTYPE_BF16, K);
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, &db,
                                 NULL), QF_ERR_NO_DEVICE, "arguments are valid");
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, NULL, scale, &rng, &dhq, &db,
                                 NULL), QF_ERR_INVALID_ARG, "da is NULL");
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, NULL,
                                 NULL), QF_ERR_INVALID_ARG, "dbias is NULL");
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &aq, &db,
                                 NULL), QF_ERR_INVALID_ARG, "out->rowwise_data.dtype is e4m3");
    expect(qf_quantize_dbias_act(ctx, "nope", QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, &db,
                                 NULL), QF_ERR_NOT_FOUND, "nope");
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, NULL, NULL, scale, &rng, &dhq, &db,
                                 NULL), QF_ERR_INVALID_ARG, "h is NULL");
    /* dbias apart from every input and copy */
    qf_tensor db_on = t1(h.data, QF_DTYPE_BF16, K);
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, &db_on,
                                 NULL), QF_ERR_INVALID_ARG, "dbias", "and h", "overlap");
    expect(qf_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, &db_on, NULL), QF_ERR_INVALID_ARG,
           "dbias", "and h", "overlap");
    db_on.data = da.data;
    expect(qf_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, &db_on, NULL), QF_ERR_INVALID_ARG,
           "dbias", "and da", "overlap");
    db_on.data = dhq.t[QF_SLOT_COLUMNWISE_DATA].data;
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, &db_on,
                                 NULL), QF_ERR_INVALID_ARG, "out->columnwise_data", "overlap");
    db_on.data = (void *)scale;
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, &db_on,
                                 NULL), QF_ERR_INVALID_ARG, "scale", "overlap");
    db_on.data = dhq.t[QF_SLOT_SCALE_INV].data; /* every slot the quantization writes */
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, &db_on,
                                 NULL), QF_ERR_INVALID_ARG, "dbias", "out->scale_inv", "overlap");
    /* the scale fp8_delayed reads apart from the slots it writes */
    qf_quantized dhq_on = dhq;
    dhq_on.t[QF_SLOT_AMAX].data = (void *)scale;
    expect(qf_quantize_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq_on, NULL),
           QF_ERR_INVALID_ARG, "out->amax", "and scale", "overlap");
    /* fp8_current ignores scale: a pointer that happens to equal dbias's or a slot's is no
     * overlap */
    qf_quantized cq = fake_q("fp8_current", QF_ROLE_GRAD, QF_NORM_NONE, M, K, cl, &st);
    assert_int_equal(st, QF_OK);
    db = t1(slot(15), QF_DTYPE_BF16, K);
    expect(qf_quantize_dbias_act(ctx, "fp8_current", QF_ACT_SWIGLU, &h, &da, (const float *)db.data,
                                 &rng, &cq, &db, NULL), QF_ERR_NO_DEVICE, "arguments are valid");
    expect(qf_quantize_act(ctx, "fp8_current", QF_ACT_SWIGLU, &h, &da,
                           (const float *)cq.t[QF_SLOT_AMAX].data, &rng, &cq, NULL),
           QF_ERR_NO_DEVICE, "arguments are valid");
    /* the cast from a given amax: current scaling's only, and checked as qf_quantize */
    const qf_tensor dh = t2(slot(14), QF_DTYPE_BF16, M, K);
    expect(qf_quantize_cast(ctx, "fp8_current", QF_ROLE_GRAD, &dh, &cq, NULL), QF_ERR_NO_DEVICE,
           "arguments are valid");
    expect(qf_quantize_cast(ctx, kRecipe, QF_ROLE_GRAD, &dh, &dhq, NULL), QF_ERR_INVALID_ARG,
           "is fp8_delayed", "current scaling");
    const qf_tensor dh_on = t2(cq.t[QF_SLOT_COLUMNWISE_DATA].data, QF_DTYPE_BF16, M, K);
    expect(qf_quantize_cast(ctx, "fp8_current", QF_ROLE_GRAD, &dh_on, &cq, NULL),
           QF_ERR_INVALID_ARG, "overlap");
    expect(qf_quantize_cast(ctx, "fp8_current", QF_ROLE_GRAD, &da, &cq, NULL), QF_ERR_INVALID_ARG,
           "out->rowwise_data", "elements");
    /* qf_quantize_dbias: q(dy) [4, 64] and dbias [64] in dy's dtype, apart from dy and the slots */
    expect(qf_quantize_dbias(ctx, kRecipe, &dh, scale, &rng, &dhq, &db, NULL), QF_ERR_NO_DEVICE,
           "arguments are valid");
    expect(qf_quantize_dbias(ctx, "fp8_current", &dh, NULL, &rng, &cq, &db, NULL),
           QF_ERR_NO_DEVICE, "arguments are valid");
    expect(qf_quantize_dbias(ctx, kRecipe, NULL, scale, &rng, &dhq, &db, NULL), QF_ERR_INVALID_ARG,
           "dy is NULL");
    /* its input named dy in every message, not qf_quantize's x */
    const qf_tensor dy_e5m2 = t2(slot(14), QF_DTYPE_E5M2, M, K);
    expect(qf_quantize_dbias(ctx, kRecipe, &dy_e5m2, scale, &rng, &dhq, &db, NULL),
           QF_ERR_INVALID_ARG, "dy.dtype is e5m2");
    const qf_tensor dy_on_q = t2(dhq.t[QF_SLOT_ROWWISE_DATA].data, QF_DTYPE_BF16, M, K);
    expect(qf_quantize_dbias(ctx, kRecipe, &dy_on_q, scale, &rng, &dhq, &db, NULL),
           QF_ERR_INVALID_ARG, "dy", "overlap");
    expect(qf_quantize_dbias(ctx, kRecipe, &dh, scale, &rng, &dhq, NULL, NULL), QF_ERR_INVALID_ARG,
           "dbias");
    qf_tensor db_bad = t1(slot(15), QF_DTYPE_FP32, K);
    expect(qf_quantize_dbias(ctx, kRecipe, &dh, scale, &rng, &dhq, &db_bad, NULL),
           QF_ERR_INVALID_ARG, "dbias");
    qf_tensor db_on_dy = t1(slot(14), QF_DTYPE_BF16, K);
    expect(qf_quantize_dbias(ctx, kRecipe, &dh, scale, &rng, &dhq, &db_on_dy, NULL),
           QF_ERR_INVALID_ARG, "dbias", "overlap");
    qf_tensor db_on_q = t1(dhq.t[QF_SLOT_ROWWISE_DATA].data, QF_DTYPE_BF16, K);
    expect(qf_quantize_dbias(ctx, kRecipe, &dh, scale, &rng, &dhq, &db_on_q, NULL),
           QF_ERR_INVALID_ARG, "dbias", "out->rowwise_data", "overlap");
    expect(qf_quantize_dbias(ctx, kRecipe, &dh, scale, &rng, &aq, &db, NULL), QF_ERR_INVALID_ARG,
           "out->rowwise_data"); /* an input role's copies: [4, 32] in E4M3 */
    db = t1(slot(15), QF_DTYPE_BF16, K / 2);
    expect(qf_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, &db, NULL), QF_ERR_INVALID_ARG,
           "dbias has 32 elements");
    expect(qf_quantize_dbias_act(ctx, kRecipe, QF_ACT_SWIGLU, &h, &da, scale, &rng, &dhq, &db,
                                 NULL), QF_ERR_INVALID_ARG, "dbias has 32 elements");
}

/* The bf16 copies of both copies of a weight's q at fake addresses, as qf_dequantize writes them
 * (qf_dequantized_dims); off_by (nonzero: a wrong shape) is added to the last dim of the
 * columnwise one. */
static void fake_kept(const qf_quantized *q, int64_t off_by, qf_tensor kept[QF_COPY_COUNT]) {
    for (int c = 0; c < QF_COPY_COUNT; c++) {
        int64_t d[2];
        assert_int_equal(qf_dequantized_dims(q, (qf_copy)c, d), QF_OK);
        kept[c] = fake_t(QF_DTYPE_BF16, 2, d[0], d[1] + (c == QF_COPY_COLUMNWISE ? off_by : 0));
    }
}

/* The scale layout recipe r's GEMM reads on sm_90 (compact where it has no block scales). */
static qf_scale_layout host_layout(const qf_recipe *r) {
    qf_scale_layout layout = QF_SCALE_LAYOUT_COMPACT;
    if (qf_family_get(r->family)->scale_layout)
        assert_int_equal(qf_gemm_scale_layout(r->name, 90, &layout), QF_OK);
    return layout;
}

/* A LayerNorm over k columns with bf16 gamma and beta at fake addresses. */
static qf_norm_desc fake_ln(int64_t k) {
    return (qf_norm_desc){.norm = QF_NORM_LAYERNORM, .eps = 1e-5f,
                          .gamma = fake_t(QF_DTYPE_BF16, 1, k, 0),
                          .beta = fake_t(QF_DTYPE_BF16, 1, k, 0)};
}

/* A whole LayerNorm + MLP step (SwiGLU, every output, fp32 wgrads) of x [m, k], fc1 [2f, k], fc2
 * [n, f] under recipe on a host context: QF_ERR_NO_DEVICE when every stage accepts the shapes.
 * kept: 1 keeps both weights' bf16 copies (w1q_bf16, w2q_bf16), 2 with W2's columnwise one of a
 * wrong shape, 3 with W2's rowwise one on W1's, 4 with W1's rowwise one on W2's rowwise data, 5
 * with W1's columnwise one on h, 6 with W2's columnwise one on the backward's dxn; 0 keeps
 * none. Buffers shared across stages, none kept: 7 a on h, 8 y on h, 9 w2q's copies on w1q's,
 * 10 aq on xq, 11 the backward's dh on h, 12 its dxn on x, 13 its dyq's data on dy, 14 a_scale
 * on h; under gelu (fc1 [f, k]): 15 dh on da, 16 dh on h (in place), 17 da on h. */
static qf_status mlp_host_step_kept(qf_ctx_t *ctx, const qf_recipe *r, int64_t m, int64_t k,
                                    int64_t f, int64_t n, int kept) {
    const qf_dtype bf = QF_DTYPE_BF16, f32 = QF_DTYPE_FP32;
    const char *recipe = r->name;
    const int gelu = kept >= 15;
    const int64_t fin = gelu ? f : 2 * f;
    const qf_scale_layout layout = host_layout(r);
    qf_status st = QF_OK;
    const float *sc = fake_buf(64);
    qf_ln_mlp mlp = {
        .norm = fake_ln(k),
        .act = gelu ? QF_ACT_GELU : QF_ACT_SWIGLU,
        .w1 = fake_t(bf, 2, fin, k), .b1 = fake_t(bf, 1, fin, 0),
        .w2 = fake_t(bf, 2, n, f), .b2 = fake_t(bf, 1, n, 0),
        .x_scale = sc, .w1_scale = sc + 1, .a_scale = sc + 2, .w2_scale = sc + 3,
        .xq = fake_q(recipe, QF_ROLE_INPUT, QF_NORM_LAYERNORM, m, k, layout, &st),
        .w1q = fake_q(recipe, QF_ROLE_WEIGHT, QF_NORM_NONE, fin, k, layout, &st),
        .w2q = fake_q(recipe, QF_ROLE_WEIGHT, QF_NORM_NONE, n, f, layout, &st),
        .aq = fake_q(recipe, QF_ROLE_INPUT, QF_NORM_NONE, m, f, layout, &st),
        .h = fake_t(bf, 2, m, fin), .a = fake_t(bf, 2, m, f), .weight_changed = 1};
    qf_ln_mlp_grads g = {
        .dyq = fake_q(recipe, QF_ROLE_GRAD, QF_NORM_NONE, m, n, layout, &st),
        .dhq = fake_q(recipe, QF_ROLE_GRAD, QF_NORM_NONE, m, fin, layout, &st),
        .dy_scale = sc + 4, .dh_scale = sc + 5, .rng_dy = {1, 2}, .rng_dh = {3, 4},
        .da = fake_t(bf, 2, m, f), .dh = fake_t(bf, 2, m, fin), .dxn = fake_t(bf, 2, m, k),
        .dw1 = fake_t(f32, 2, fin, k), .dw2 = fake_t(f32, 2, n, f),
        .db1 = fake_t(bf, 1, fin, 0), .db2 = fake_t(bf, 1, n, 0)};
    g.norm.dx = fake_t(bf, 2, m, k);
    g.norm.dgamma = fake_t(f32, 1, k, 0), g.norm.dbeta = fake_t(f32, 1, k, 0);
    const qf_tensor x = fake_t(bf, 2, m, k), dy = fake_t(bf, 2, m, n);
    qf_tensor y = fake_t(bf, 2, m, n);
    if (st != QF_OK) /* the fake shapes refuse a tensor of the step (message set) */
        return st;
    if (kept >= 1 && kept <= 6) {
        fake_kept(&mlp.w1q, 0, mlp.w1q_bf16);
        fake_kept(&mlp.w2q, kept == 2 ? 32 : 0, mlp.w2q_bf16);
    }
    if (kept == 3)
        mlp.w2q_bf16[0].data = mlp.w1q_bf16[0].data;
    if (kept == 4)
        mlp.w1q_bf16[0].data = mlp.w2q.t[QF_SLOT_ROWWISE_DATA].data;
    if (kept == 5)
        mlp.w1q_bf16[1].data = mlp.h.data;
    if (kept == 6)
        mlp.w2q_bf16[1].data = g.dxn.data;
    if (kept == 7)
        mlp.a.data = mlp.h.data;
    if (kept == 8)
        y.data = mlp.h.data;
    if (kept == 9)
        for (int i = 0; i < QF_SLOT_COUNT; i++)
            mlp.w2q.t[i].data = mlp.w1q.t[i].data;
    if (kept == 10)
        for (int i = 0; i < QF_SLOT_COUNT; i++)
            mlp.aq.t[i].data = mlp.xq.t[i].data;
    if (kept == 11)
        g.dh.data = mlp.h.data;
    if (kept == 12)
        g.dxn.data = x.data;
    if (kept == 13)
        g.dyq.t[QF_SLOT_ROWWISE_DATA].data = dy.data;
    if (kept == 14)
        mlp.a_scale = mlp.h.data;
    if (kept == 15)
        g.dh.data = g.da.data;
    if (kept == 16)
        g.dh.data = mlp.h.data;
    if (kept == 17)
        g.da.data = mlp.h.data;
    const qf_status s = qf_layernorm_mlp_fwd(ctx, recipe, &x, &mlp, &y, NULL);
    return s != QF_ERR_NO_DEVICE ? s : qf_layernorm_mlp_bwd(ctx, recipe, &x, &dy, &mlp, &g, NULL);
}

static qf_status mlp_host_step(qf_ctx_t *ctx, const qf_recipe *r, int64_t m, int64_t k,
                               int64_t f, int64_t n) {
    return mlp_host_step_kept(ctx, r, m, k, f, n, 0);
}

/* The weights' bf16 copies kept (w1q_bf16, w2q_bf16) on a host context: under MXFP8 and NVFP4
 * on sm_90 a whole step accepts them; a copy of the wrong shape is refused with its stage and its
 * copy named; a copy overlapping another kept one, a weight's quantized data, h or a gradient is
 * refused by name. The other families, and sm_100 (whose GEMMs read the quantized copies), refuse
 * them before any stage. */
static void test_mlp_kept_bf16_host(void **state) {
    qf_ctx_t *ctx = *state, *c100 = NULL;
    assert_int_equal(qf_ctx_init_host(&c100, 100), QF_OK);
    for (int i = 0; i < qf_recipe_count; i++) {
        const qf_recipe *r = &qf_recipes[i];
        const qf_status s = mlp_host_step_kept(ctx, r, 256, 192, 128, 192, 1);
        if (r->family == QF_FAMILY_MXFP8 || r->family == QF_FAMILY_NVFP4) {
            assert_int_equal(s, QF_ERR_NO_DEVICE);
            expect(mlp_host_step_kept(ctx, r, 256, 192, 128, 192, 2), QF_ERR_INVALID_ARG,
                   "dequantizing mlp->w2q into mlp->w2q_bf16 (qf_dequantize): the columnwise "
                   "copy, mlp->w2q_bf16[1]: qf_dequantize: out");
            expect(mlp_host_step_kept(ctx, r, 256, 192, 128, 192, 3), QF_ERR_INVALID_ARG,
                   "qf_layernorm_mlp_fwd: mlp->w1q_bf16[0] (", "and mlp->w2q_bf16[0] (",
                   "overlap");
            expect(mlp_host_step_kept(ctx, r, 256, 192, 128, 192, 4), QF_ERR_INVALID_ARG,
                   "qf_layernorm_mlp_fwd: ", "overlap"); /* 96 KiB from there: h too */
            expect(mlp_host_step_kept(ctx, r, 256, 192, 128, 192, 5), QF_ERR_INVALID_ARG,
                   "qf_layernorm_mlp_fwd: ", "overlap"); /* fc1's GEMM stage: y on its b */
            expect(mlp_host_step_kept(ctx, r, 256, 192, 128, 192, 6), QF_ERR_INVALID_ARG,
                   "qf_layernorm_mlp_bwd: mlp->w2q_bf16[1] (", "and g->dxn (", "overlap");
        } else {
            expect(s, QF_ERR_INVALID_ARG, "qf_layernorm_mlp_fwd: mlp->w1q_bf16[0] is set, but "
                   "recipe", "multiplies its quantized copies directly", "leave it NULL");
        }
        if (r->family == QF_FAMILY_MXFP8 || r->family == QF_FAMILY_NVFP4)
            expect(mlp_host_step_kept(c100, r, 256, 192, 128, 192, 1), QF_ERR_INVALID_ARG,
                   "on sm_100 multiplies its quantized copies directly");
    }
    qf_ctx_free(c100);
}

/* A LayerNorm + Linear step (forward, then backward with every gradient, an fp32 wgrad) of x
 * [m, k] and a weight [n, k] under recipe on a host context: QF_ERR_NO_DEVICE when every stage
 * accepts its arguments. tweak: 0 none; 1 y on x; 2 xq's mu on wq's rowwise data; 3 wq's
 * rowwise data on x; 4 the backward's dxn on xq's rowwise data; 5 dy [2, m / 2, n]; 6
 * defer_wgrad 5; 7 x_scale on wq's amax slot (read by the norm's stage after the weight's wrote
 * it; delayed scaling only); 8 the weight [1, n, k] with wq's columnwise data on x. */
static qf_status ll_host_step(qf_ctx_t *ctx, const qf_recipe *r, int64_t m, int64_t k, int64_t n,
                              int tweak) {
    const qf_dtype bf = QF_DTYPE_BF16, f32 = QF_DTYPE_FP32;
    const char *recipe = r->name;
    const qf_scale_layout layout = host_layout(r);
    qf_status st = QF_OK;
    const float *sc = fake_buf(64);
    qf_ln_linear ll = {
        .norm = fake_ln(k),
        .weight = fake_t(bf, 2, n, k), .bias = fake_t(bf, 1, n, 0),
        .x_scale = sc, .w_scale = sc + 1, .weight_changed = 1,
        .xq = fake_q(recipe, QF_ROLE_INPUT, QF_NORM_LAYERNORM, m, k, layout, &st),
        .wq = fake_q(recipe, QF_ROLE_WEIGHT, QF_NORM_NONE, n, k, layout, &st)};
    qf_ln_linear_grads g = {
        .dyq = fake_q(recipe, QF_ROLE_GRAD, QF_NORM_NONE, m, n, layout, &st),
        .dy_scale = sc + 2, .rng = {1, 2}, .dxn = fake_t(bf, 2, m, k),
        .dweight = fake_t(f32, 2, n, k), .dbias = fake_t(bf, 1, n, 0)};
    g.norm.dx = fake_t(bf, 2, m, k);
    g.norm.dgamma = fake_t(f32, 1, k, 0), g.norm.dbeta = fake_t(f32, 1, k, 0);
    const qf_tensor x = fake_t(bf, 2, m, k);
    qf_tensor dy = fake_t(bf, 2, m, n), y = fake_t(bf, 2, m, n);
    if (st != QF_OK)
        return st;
    if (tweak == 1)
        y.data = x.data;
    if (tweak == 2)
        ll.xq.t[QF_SLOT_MU].data = ll.wq.t[QF_SLOT_ROWWISE_DATA].data;
    if (tweak == 3)
        ll.wq.t[QF_SLOT_ROWWISE_DATA].data = x.data;
    if (tweak == 4)
        g.dxn.data = ll.xq.t[QF_SLOT_ROWWISE_DATA].data;
    if (tweak == 5)
        dy.ndim = 3, dy.dims[0] = 2, dy.dims[1] = m / 2, dy.dims[2] = n;
    if (tweak == 6)
        g.defer_wgrad = 5;
    if (tweak == 7 && ll.wq.t[QF_SLOT_AMAX].data)
        ll.x_scale = ll.wq.t[QF_SLOT_AMAX].data;
    if (tweak == 8) {
        ll.weight.ndim = 3, ll.weight.dims[0] = 1, ll.weight.dims[1] = n, ll.weight.dims[2] = k;
        ll.wq.t[QF_SLOT_COLUMNWISE_DATA].data = x.data;
    }
    const qf_status s = qf_layernorm_linear_fwd(ctx, recipe, &x, &ll, &y, NULL);
    return s != QF_ERR_NO_DEVICE ? s : qf_layernorm_linear_bwd(ctx, recipe, &x, &dy, &ll, &g, NULL);
}

/* A LayerNorm + Linear step's arguments across its stages, under every recipe on a host context:
 * accepted as made; refused by name, before any stage, where one stage's output is another's
 * input or output (y on x, the statistics or x under the weight's copy, dxn on x's copy), where
 * dy's leading dims are not x's, and where defer_wgrad is neither 0 nor 1. */
static void test_ll_step_host(void **state) {
    qf_ctx_t *ctx = *state;
    for (int i = 0; i < qf_recipe_count; i++) {
        const qf_recipe *r = &qf_recipes[i];
        assert_int_equal(ll_host_step(ctx, r, 256, 192, 128, 0), QF_ERR_NO_DEVICE);
        expect(ll_host_step(ctx, r, 256, 192, 128, 1), QF_ERR_INVALID_ARG,
               "qf_layernorm_linear_fwd: y (", "and x (", "overlap");
        expect(ll_host_step(ctx, r, 256, 192, 128, 2), QF_ERR_INVALID_ARG,
               "qf_layernorm_linear_fwd: ", "ll->xq->mu (", "overlap");
        expect(ll_host_step(ctx, r, 256, 192, 128, 3), QF_ERR_INVALID_ARG,
               "qf_layernorm_linear_fwd: ll->wq->rowwise_data (", "and x (", "overlap");
        expect(ll_host_step(ctx, r, 256, 192, 128, 4), QF_ERR_INVALID_ARG,
               "qf_layernorm_linear_bwd: ", "overlap"); /* the dgrad stage: y on its a */
        expect(ll_host_step(ctx, r, 256, 192, 128, 5), QF_ERR_INVALID_ARG,
               "qf_layernorm_linear_bwd: dy has 3 dims; expected x's 2");
        expect(ll_host_step(ctx, r, 256, 192, 128, 6), QF_ERR_INVALID_ARG,
               "qf_layernorm_linear_bwd: g->defer_wgrad is 5; expected 0");
        if (r->family == QF_FAMILY_FP8_DELAYED)
            expect(ll_host_step(ctx, r, 256, 192, 128, 7), QF_ERR_INVALID_ARG,
                   "qf_layernorm_linear_fwd: ll->wq->amax (", "and ll->x_scale (", "overlap");
        expect(ll_host_step(ctx, r, 256, 192, 128, 8), QF_ERR_INVALID_ARG,
               "qf_layernorm_linear_fwd: ll->wq->columnwise_data (", "and x (", "overlap");
    }
}

/* Buffers that two stages of an MLP step share (one writes what another reads or writes) are
 * refused (by name, where no stage of the call checks both) under every recipe, on a host
 * context, where the stages the call runs use them: a only where the forward writes it, dh only
 * where the backward writes it (not where per-tensor FP8 quantizes act'(h) in one kernel), a
 * scale only under delayed scaling. dh on da or on h, as one buffer under gelu, is the
 * activation backward in place: accepted. */
static void test_mlp_shared_across_stages(void **state) {
    qf_ctx_t *ctx = *state;
    enum { ALL, WRITES_A, WRITES_DH, DELAYED, NONE };
    static const struct {
        int when;
        const char *a, *b, *op;
    } cases[] = {
        {WRITES_A, "mlp->a (", "mlp->h (", "qf_layernorm_mlp_fwd"},
        {ALL, "y (", "mlp->h (", "qf_layernorm_mlp_fwd"},
        {ALL, "mlp->w1q->", "mlp->w2q->", "qf_layernorm_mlp_fwd"},
        {ALL, "mlp->xq->", "mlp->aq->", "qf_layernorm_mlp_fwd"},
        {WRITES_DH, "g->dh (", "mlp->h (", "qf_layernorm_mlp_bwd"},
        {ALL, "g->dxn (", "x (", "qf_layernorm_mlp_bwd"},
        {ALL, "g->dyq->rowwise_data (", "dy (", "qf_layernorm_mlp_bwd"},
        {DELAYED, "mlp->h (", "mlp->a_scale (", "qf_layernorm_mlp_fwd"},
        {NONE, "", "", ""},
        {NONE, "", "", ""},
        {ALL, "g->da (", "mlp->h (", "qf_layernorm_mlp_bwd"},
    };
    for (int i = 0; i < qf_recipe_count; i++) {
        const qf_recipe *r = &qf_recipes[i];
        const int writes_a = qf_layernorm_mlp_writes_a(ctx, r->name, 256, 128) == 1;
        const int writes_dh = qf_family_get(r->family)->act_tile == 0;
        assert_int_equal(mlp_host_step_kept(ctx, r, 256, 192, 128, 192, 0), QF_ERR_NO_DEVICE);
        for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
            const int w = cases[c].when;
            const int refused = w == ALL || (w == WRITES_A && writes_a) ||
                                (w == WRITES_DH && writes_dh) ||
                                (w == DELAYED && r->family == QF_FAMILY_FP8_DELAYED);
            const qf_status s = mlp_host_step_kept(ctx, r, 256, 192, 128, 192, 7 + c);
            const char *msg = qf_last_error();
            if (!refused && s != QF_ERR_NO_DEVICE)
                fail_msg("%s case %d: refused (%d): %s", r->name, 7 + c, (int)s, msg);
            /* a stage that checks both itself names them its way ("(qf_activation_fwd): a (")
             * first; the check across stages names the call's arguments */
            const int by_stage = strstr(msg, "(qf_") != NULL;
            if (refused && (s != QF_ERR_INVALID_ARG || !strstr(msg, cases[c].op) ||
                            !strstr(msg, "overlap") ||
                            (!by_stage && (!strstr(msg, cases[c].a) || !strstr(msg, cases[c].b)))))
                fail_msg("%s case %d: status %d, message: %s", r->name, 7 + c, (int)s, msg);
        }
    }
}

/* The shapes a whole MLP step accepts per recipe, on a host context (sm_90): the GPU test's
 * shape and one of multiples of 32 only (not of 64: the tiled columnwise paths) for every recipe;
 * multiples of 16 only (per-tensor FP8 only: the block-scaled GEMMs take whole 32-element K
 * blocks) and odd sizes, printed with the stage that refuses them. */
static void test_mlp_shapes_host(void **state) {
    qf_ctx_t *ctx = *state;
    static const int64_t shapes[][4] = {
        {256, 192, 128, 192}, {96, 160, 96, 224}, {48, 80, 48, 112}, {40, 72, 24, 56}};
    printf("expected below: each recipe's answer per shape, 'accepted' or the refusal's "
           "message\n");
    for (int i = 0; i < qf_recipe_count; i++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
            const int64_t *d = shapes[sh];
            const qf_status s = mlp_host_step(ctx, &qf_recipes[i], d[0], d[1], d[2], d[3]);
            printf("%-12s x [%lld, %lld], F %lld, N %lld: %s\n", qf_recipes[i].name,
                   (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3],
                   s == QF_ERR_NO_DEVICE ? "accepted" : qf_last_error());
            /* a family without a GEMM on sm_90 (none today) would refuse the step at its first
             * GEMM, after its quantizers accepted their tensors */
            if (qf_family_gemm_path(qf_recipes[i].family, 90).engine == QF_GEMM_NONE) {
                assert_int_equal(s, QF_ERR_UNSUPPORTED);
                assert_non_null(strstr(qf_last_error(), "fc1 GEMM"));
                assert_non_null(strstr(qf_last_error(), "qf_gemm: not implemented scaling mode"));
            } else if (sh < 2)
                assert_int_equal(s, QF_ERR_NO_DEVICE);
            else
                assert_true(s == QF_ERR_NO_DEVICE || s == QF_ERR_INVALID_ARG ||
                            s == QF_ERR_UNSUPPORTED);
        }
}

/* A tensor of more rows than one launch's grid holds (M = 2^40, K = 64, fake addresses: the
 * host context never dereferences them) is refused by every recipe's quantizer with one status,
 * before any kernel is compiled or launched (NVFP4's message gives M * K, the size of its
 * grids). */
static void test_quantize_m_too_large(void **state) {
    qf_ctx_t *ctx = *state;
    const int64_t big = (int64_t)1 << 40;
    const float *scale = fake_buf(sizeof(float));
    for (int i = 0; i < qf_recipe_count; i++) {
        const qf_recipe *r = &qf_recipes[i];
        const qf_tensor x = fake_t(QF_DTYPE_BF16, 2, big, K);
        const qf_rng rng = {1, 2};
        qf_status st = QF_OK;
        qf_quantized q = fake_q(r->name, QF_ROLE_INPUT, QF_NORM_NONE, big, K,
                                QF_SCALE_LAYOUT_COMPACT, &st);
        assert_int_equal(st, QF_OK);
        expect(qf_quantize(ctx, r->name, QF_ROLE_INPUT, &x, NULL, scale, &rng, &q, NULL),
               QF_ERR_UNSUPPORTED, "1099511627776", "is too large for one launch");
    }
}

/* The MLP's first checks, before any stage: NULL arguments, the norm, W1's K. */
static void test_mlp_args(void **state) {
    qf_ctx_t *ctx = *state;
    const qf_tensor x = t2(slot(0), QF_DTYPE_BF16, M, K), dy = t2(slot(1), QF_DTYPE_BF16, M, N);
    qf_tensor y = t2(slot(2), QF_DTYPE_BF16, M, N);
    qf_ln_mlp mlp = {.norm = {.norm = QF_NORM_RMSNORM}, .w1 = t2(slot(3), QF_DTYPE_BF16, N, K)};
    qf_ln_mlp_grads g = {0};
    expect(qf_layernorm_mlp_fwd(ctx, kRecipe, NULL, &mlp, &y, NULL), QF_ERR_INVALID_ARG,
           "x is NULL");
    expect(qf_layernorm_mlp_bwd(ctx, kRecipe, &x, &dy, &mlp, NULL, NULL), QF_ERR_INVALID_ARG,
           "g is NULL");
    mlp.norm.norm = QF_NORM_NONE;
    expect(qf_layernorm_mlp_fwd(ctx, kRecipe, &x, &mlp, &y, NULL), QF_ERR_INVALID_ARG,
           "mlp->norm.norm 0 is not QF_NORM_LAYERNORM");
    mlp.norm.norm = QF_NORM_RMSNORM;
    mlp.w1.dims[1] = K + 1;
    expect(qf_layernorm_mlp_bwd(ctx, kRecipe, &x, &dy, &mlp, &g, NULL), QF_ERR_INVALID_ARG,
           "mlp->w1 is [32, 65]; its last dimension must equal x's K = 64");
    mlp.w1.dims[1] = K;
    expect(qf_layernorm_mlp_fwd(ctx, kRecipe, &x, &mlp, &y, NULL), QF_ERR_INVALID_ARG,
           "mlp->h.dtype is fp32; the MLP keeps fc1's output h and the activation a in bf16");
    mlp.h = t2(slot(4), QF_DTYPE_BF16, M, N), mlp.a = t2(slot(5), QF_DTYPE_BF16, M, 16);
    mlp.w2 = t2(slot(6), QF_DTYPE_BF16, N + 1, 16);
    expect(qf_layernorm_mlp_bwd(ctx, kRecipe, &x, &dy, &mlp, &g, NULL), QF_ERR_INVALID_ARG,
           "qf_layernorm_mlp_bwd: dy is [4, 32]; expected [4, N = 33] (x's leading dims, N "
           "mlp->w2's rows)");
    qf_tensor dy2 = dy; /* the same elements, other leading dims */
    dy2.dims[0] = 2, dy2.dims[1] = 2 * N;
    mlp.w2.dims[0] = 2 * N;
    expect(qf_layernorm_mlp_bwd(ctx, kRecipe, &x, &dy2, &mlp, &g, NULL), QF_ERR_INVALID_ARG,
           "dy is [2, 64]; expected [4, N = 64]");
    dy2.ndim = 3, dy2.dims[0] = 2, dy2.dims[1] = 2, dy2.dims[2] = N;
    mlp.w2.dims[0] = N;
    expect(qf_layernorm_mlp_bwd(ctx, kRecipe, &x, &dy2, &mlp, &g, NULL), QF_ERR_INVALID_ARG,
           "dy has 3 dims; expected x's 2");
    mlp.w2.dims[0] = N;
    /* a stage's own check, named with its stage: nothing is cached, so the first stage is W1's
     * quantization, and mlp->w1q has no buffers */
    expect(qf_layernorm_mlp_fwd(ctx, kRecipe, &x, &mlp, &y, NULL), QF_ERR_INVALID_ARG,
           "qf_layernorm_mlp_fwd: quantizing mlp->w1 into mlp->w1q (qf_quantize)");
}

/* Which recipes and shapes the MLP's forward quantizes act(h) in one kernel, leaving mlp->a
 * unwritten (where the family table's act_tile divides M and F and act_amax is not set:
 * fp8_delayed; fp8_current writes a with its amax), and the query's errors. */
static void test_mlp_writes_a(void **state) {
    qf_ctx_t *ctx = *state;
    for (int i = 0; i < qf_recipe_count; i++) {
        const qf_recipe *r = &qf_recipes[i];
        const int fused = qf_family_get(r->family)->act_tile > 0; /* per-tensor FP8 */
        assert_true(fused == (r->family == QF_FAMILY_FP8_DELAYED ||
                              r->family == QF_FAMILY_FP8_CURRENT));
        const int amax = qf_family_get(r->family)->act_amax; /* writes a and its amax */
        assert_true(amax == (r->family == QF_FAMILY_FP8_CURRENT));
        assert_int_equal(qf_layernorm_mlp_writes_a(ctx, r->name, 16384, 14336), !fused || amax);
        assert_int_equal(qf_layernorm_mlp_writes_a(ctx, r->name, 256, 96), 1);
        assert_int_equal(qf_layernorm_mlp_writes_a(ctx, r->name, 96, 128), 1);
    }
    assert_int_equal(qf_layernorm_mlp_writes_a(ctx, "no_such_recipe", 64, 64), -QF_ERR_NOT_FOUND);
    assert_int_equal(qf_layernorm_mlp_writes_a(NULL, kRecipe, 64, 64), -QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "ctx is NULL"));
    assert_int_equal(qf_layernorm_mlp_writes_a(ctx, kRecipe, 0, 64), -QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "must be positive"));
}

/* The weight cache's decision (SPEC 6): reuse while the weights' storage, their kept bf16
 * copies, the version and the recipe are those of the cached copies; quantize when any differs,
 * when nothing is cached, or on request. */
static void test_weight_cache_key(void **state) {
    (void)state;
    const qf_recipe *r1 = &qf_recipes[0], *r2 = &qf_recipes[1];
    const qf_tensor kept[2] = {{.data = slot(3)}, {.data = NULL}};
    const qf_tensor other[2] = {{.data = slot(3)}, {.data = slot(4)}};
    const qf_weight_key now = qf_weight_key_of(slot(0), kept, slot(1), NULL, 7, r1), none = {0};
    assert_true(qf_weights_stale(&none, 0, &now));   /* nothing cached: quantize */
    assert_false(qf_weights_stale(&now, 0, &now));   /* same storage, version, recipe: reuse */
    assert_true(qf_weights_stale(&now, 1, &now));    /* weight_changed */
    assert_false(qf_weights_stale(&none, -1, &now)); /* the caller's copies: never quantize */
    assert_false(qf_weights_stale(&now, -1, &now));
    const qf_weight_key later[] = {qf_weight_key_of(slot(0), kept, slot(1), NULL, 8, r1),
                                   qf_weight_key_of(slot(2), kept, slot(1), NULL, 7, r1),
                                   qf_weight_key_of(slot(0), kept, slot(2), NULL, 7, r1),
                                   qf_weight_key_of(slot(0), kept, slot(1), NULL, 7, r2),
                                   qf_weight_key_of(slot(0), other, slot(1), NULL, 7, r1),
                                   qf_weight_key_of(slot(0), NULL, slot(1), NULL, 7, r1),
                                   qf_weight_key_of(slot(0), NULL, slot(1), kept, 7, r1)};
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++)
        assert_true(qf_weights_stale(&now, 0, &later[i]));
    /* a bf16 copy kept from now on is written before a GEMM reads it */
    assert_true(qf_weights_stale(&later[5], 0, &now));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_nb_valid_reaches_device),
        T(test_nb_null_args),
        T(test_nb_no_norm),
        T(test_nb_zcg_not_flag),
        T(test_nb_x_dtype),
        T(test_nb_gamma_length),
        T(test_nb_gamma_dtype),
        T(test_nb_dxn_dtype),
        T(test_nb_dxn_shape),
        T(test_nb_rsigma_missing),
        T(test_nb_mu_short),
        T(test_nb_dx_dtype),
        T(test_nb_dgamma_dtype),
        T(test_nb_dbeta_missing),
        T(test_nb_rmsnorm_dbeta),
        T(test_nb_k_too_large),
        T(test_nb_unknown_recipe),
        T(test_nb_dx_on_x),
        T(test_nb_dx_on_dxn),
        T(test_nb_dgamma_on_mu),
        T(test_nb_dbeta_on_rsigma),
        T(test_nb_dgamma_on_gamma),
        T(test_nb_dbeta_on_dgamma),
        T(test_nb_dgamma_in_dx),
        T(test_nb_rmsnorm_ignored_inputs),
        cmocka_unit_test(test_nb_fake_shapes),
        T(test_dbias_args),
        T(test_activation_args),
        T(test_act_quantize_args),
        T(test_quantize_m_too_large),
        T(test_mlp_args),
        T(test_mlp_shapes_host),
        T(test_mlp_writes_a),
        T(test_mlp_shared_across_stages),
        T(test_ll_step_host),
        T(test_mlp_kept_bf16_host),
        cmocka_unit_test(test_weight_cache_key),
    };
    return cmocka_run_group_tests_name("api_bwd", tests, NULL, NULL);
}
