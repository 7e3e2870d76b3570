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

/* {===================================================================== qf_norm_quantize */

typedef struct nq_args {
    qf_ctx_t *ctx;
    const char *recipe;
    qf_norm norm;
    int x_null;
    qf_tensor x, gamma, beta, mu, rsigma;
    const float *scale;
    qf_fp8_out out;
} nq_args;

/* A valid LayerNorm call: x [M, K] bf16, rowwise E4M3 output (hybrid input format). */
static nq_args nq_valid(void **state) {
    nq_args a = {.ctx = *state, .recipe = kRecipe, .norm = QF_NORM_LAYERNORM};
    a.x = t2(slot(0), QF_DTYPE_BF16, M, K);
    a.gamma = t1(slot(1), QF_DTYPE_BF16, K);
    a.beta = t1(slot(2), QF_DTYPE_BF16, K);
    a.mu = t1(slot(3), QF_DTYPE_FP32, M);
    a.rsigma = t1(slot(4), QF_DTYPE_FP32, M);
    a.scale = slot(5);
    a.out.rowwise = t2(slot(6), QF_DTYPE_E4M3, M, K);
    a.out.amax = t1(slot(7), QF_DTYPE_FP32, 1);
    a.out.scale_inv = t1(slot(8), QF_DTYPE_FP32, 1);
    return a;
}

static qf_status nq_run(nq_args *a) {
    int ln = a->norm == QF_NORM_LAYERNORM;
    return qf_norm_quantize(a->ctx, a->recipe, a->norm, 0, a->x_null ? NULL : &a->x, &a->gamma,
                            ln || a->beta.data ? &a->beta : NULL, 1e-5f, a->scale, &a->out,
                            ln ? &a->mu : NULL, &a->rsigma, NULL);
}

static void test_nq_valid_reaches_device(void **state) {
    nq_args a = nq_valid(state);
    expect(nq_run(&a), QF_ERR_NO_DEVICE, "qf_norm_quantize: arguments are valid", "sm_90");
    a.norm = QF_NORM_RMSNORM, a.beta.data = NULL;
    a.gamma.dtype = QF_DTYPE_FP32; /* gamma may be fp32 for any x */
    expect(nq_run(&a), QF_ERR_NO_DEVICE, "arguments are valid");
}

static void test_nq_null_ctx(void **state) {
    nq_args a = nq_valid(state);
    a.ctx = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_norm_quantize: ctx is NULL");
}

static void test_nq_null_x(void **state) {
    nq_args a = nq_valid(state);
    a.x_null = 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_norm_quantize: x is NULL");
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
    a.gamma.dims[0] = K - 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "gamma has 63 elements; expected K = 64");
}

static void test_nq_gamma_dtype_mismatch(void **state) {
    nq_args a = nq_valid(state);
    a.gamma.dtype = QF_DTYPE_FP16;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "gamma.dtype is fp16; expected bf16 or fp32");
}

static void test_nq_beta_dtype_differs_from_gamma(void **state) {
    nq_args a = nq_valid(state);
    a.gamma.dtype = QF_DTYPE_FP32;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "beta.dtype bf16 differs from gamma.dtype fp32");
}

static void test_nq_rmsnorm_with_beta(void **state) {
    nq_args a = nq_valid(state);
    a.norm = QF_NORM_RMSNORM;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "rmsnorm takes no beta", "pass NULL");
}

static void test_nq_no_output_requested(void **state) {
    nq_args a = nq_valid(state);
    a.out.rowwise.data = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "out->rowwise.data and out->columnwise.data are both "
           "NULL", "request at least one output");
}

/* The buffers are checked against the recipe's fake-shape function. */
static void test_nq_rowwise_too_small(void **state) {
    nq_args a = nq_valid(state);
    a.out.rowwise.dims[0] = M - 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "out->rowwise has 192 elements (last dim 64); the "
           "shape function requires 256 (last dim 64)");
}

static void test_nq_mu_too_small(void **state) {
    nq_args a = nq_valid(state);
    a.mu.dims[0] = M - 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "mu has 3 elements", "requires 4");
}

static void test_nq_wrong_output_dtype(void **state) {
    nq_args a = nq_valid(state);
    a.out.rowwise.dtype = QF_DTYPE_E5M2; /* the hybrid format quantizes inputs to E4M3 */
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "out->rowwise.dtype is e5m2; expected e4m3");
}

static void test_nq_misaligned_output(void **state) {
    nq_args a = nq_valid(state);
    a.out.rowwise.data = (char *)a.out.rowwise.data + 1;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "out->rowwise.data", "is not 16-byte aligned");
}

static void test_nq_null_scale(void **state) {
    nq_args a = nq_valid(state);
    a.scale = NULL;
    expect(nq_run(&a), QF_ERR_INVALID_ARG, "qf_norm_quantize: scale is NULL");
}

static void test_nq_unknown_recipe(void **state) {
    nq_args a = nq_valid(state);
    a.recipe = "no_such_recipe";
    expect(nq_run(&a), QF_ERR_NOT_FOUND, "recipe 'no_such_recipe' not found");
}

/* =====================================================================} */

/* {===================================================================== qf_quantize, scale update */

static void test_quantize_role_input(void **state) {
    nq_args a = nq_valid(state);
    expect(qf_quantize(a.ctx, kRecipe, QF_ROLE_WEIGHT, &a.x, a.scale, &a.out, NULL),
           QF_ERR_NO_DEVICE, "qf_quantize: arguments are valid");
    expect(qf_quantize(a.ctx, kRecipe, QF_ROLE_INPUT, &a.x, a.scale, &a.out, NULL),
           QF_ERR_INVALID_ARG, "qf_quantize: role 0 is not QF_ROLE_WEIGHT or QF_ROLE_GRAD");
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

static qf_status su_run(void **state, const su_args *a) {
    return qf_fp8_scale_update(*state, kRecipe, a->n, a->H, a->amax, a->history, a->scale,
                               a->scale_inv, a->fmt, NULL);
}

static void test_su_n_zero(void **state) {
    su_args a = su_valid();
    expect(su_run(state, &a), QF_ERR_NO_DEVICE, "qf_fp8_scale_update: arguments are valid");
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

/* =====================================================================} */

/* {===================================================================== qf_gemm_fp8 */

typedef struct gemm_args {
    qf_ctx_t *ctx;
    qf_tensor a, b, bias, y;
    const float *sa, *sb;
} gemm_args;

/* y [M, N] bf16 = A [M, K] E4M3 x B [N, K] E4M3 ^T + bias [N] bf16. */
static gemm_args gemm_valid(void **state) {
    gemm_args g = {.ctx = *state, .sa = slot(4), .sb = slot(5)};
    g.a = t2(slot(0), QF_DTYPE_E4M3, M, K);
    g.b = t2(slot(1), QF_DTYPE_E4M3, N, K);
    g.bias = t1(slot(2), QF_DTYPE_BF16, N);
    g.y = t2(slot(3), QF_DTYPE_BF16, M, N);
    return g;
}

static qf_status gemm_run(gemm_args *g) {
    return qf_gemm_fp8(g->ctx, &g->a, g->sa, &g->b, g->sb, &g->bias, &g->y, NULL);
}

static void test_gemm_valid_reaches_device(void **state) {
    gemm_args g = gemm_valid(state);
    expect(gemm_run(&g), QF_ERR_NO_DEVICE, "qf_gemm_fp8: arguments are valid");
}

static void test_gemm_k_not_multiple_of_16(void **state) {
    gemm_args g = gemm_valid(state);
    g.a.dims[1] = g.b.dims[1] = 24;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "K = 24 and N = 32 must be multiples of 16");
}

static void test_gemm_n_not_multiple_of_16(void **state) {
    gemm_args g = gemm_valid(state);
    g.b.dims[0] = g.y.dims[1] = g.bias.dims[0] = 24;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "K = 64 and N = 24 must be multiples of 16");
}

static void test_gemm_wrong_a_dtype(void **state) {
    gemm_args g = gemm_valid(state);
    g.a.dtype = QF_DTYPE_BF16;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "a must be e4m3 or e5m2 and b e4m3 (got bf16, e4m3)");
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
    g.a.data = (char *)g.a.data + 1;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "a.data", "is not 16-byte aligned");
}

static void test_gemm_null_scale_inv(void **state) {
    gemm_args g = gemm_valid(state);
    g.sb = NULL;
    expect(gemm_run(&g), QF_ERR_INVALID_ARG, "qf_gemm_fp8: b_scale_inv is NULL");
}

/* FP8 GEMMs need sm_89; a context for an older GPU says so before anything else. */
static void test_gemm_arch_too_old(void **state) {
    gemm_args g = gemm_valid(state);
    assert_int_equal(qf_ctx_init_host(&g.ctx, 80), QF_OK);
    expect(gemm_run(&g), QF_ERR_UNSUPPORTED, "FP8 GEMM needs sm_89 or newer; device is sm_80");
    qf_ctx_free(g.ctx);
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
    ll->norm = QF_NORM_LAYERNORM, ll->eps = 1e-5f, ll->weight_changed = 1;
    ll->gamma = t1(slot(2), QF_DTYPE_BF16, K), ll->beta = t1(slot(3), QF_DTYPE_BF16, K);
    ll->weight = t2(slot(4), QF_DTYPE_BF16, N, K);
    ll->bias = t1(slot(5), QF_DTYPE_BF16, N);
    ll->x_scale = slot(6), ll->w_scale = slot(7);
    ll->xq.rowwise = t2(slot(8), QF_DTYPE_E4M3, M, K);
    ll->xq.amax = t1(slot(9), QF_DTYPE_FP32, 1), ll->xq.scale_inv = t1(slot(10), QF_DTYPE_FP32, 1);
    ll->wq.rowwise = t2(slot(11), QF_DTYPE_E4M3, N, K);
    ll->wq.amax = t1(slot(12), QF_DTYPE_FP32, 1), ll->wq.scale_inv = t1(slot(13), QF_DTYPE_FP32, 1);
    ll->mu = t1(slot(14), QF_DTYPE_FP32, M), ll->rsigma = t1(slot(15), QF_DTYPE_FP32, M);
    return a;
}

static qf_status ll_run(ll_args *a) {
    return qf_layernorm_linear_fwd(a->ctx, kRecipe, &a->x, &a->ll, &a->y, NULL);
}

static void test_ll_valid_reaches_device(void **state) {
    ll_args a = ll_valid(state);
    expect(ll_run(&a), QF_ERR_NO_DEVICE, "qf_layernorm_linear_fwd: quantizing ll->weight",
           "arguments are valid");
    assert_int_equal(a.ll.weight_changed, 1); /* nothing ran, so the weight is still stale */
}

static void test_ll_weight_k_mismatch(void **state) {
    ll_args a = ll_valid(state);
    a.ll.weight.dims[1] = 48;
    expect(ll_run(&a), QF_ERR_INVALID_ARG, "qf_layernorm_linear_fwd: ll->weight is [32, 48]; its "
           "last dimension must equal x's K = 64");
}

/* The GEMM's bias is checked before the first stage runs: on this context the weight stage would
 * have returned QF_ERR_NO_DEVICE, so INVALID_ARG from the GEMM proves the dry run came first. */
static void test_ll_bad_bias_checked_before_any_stage(void **state) {
    ll_args a = ll_valid(state);
    a.ll.bias.dims[0] = N - 1;
    expect(ll_run(&a), QF_ERR_INVALID_ARG, "qf_layernorm_linear_fwd: GEMM of ll->xq.rowwise",
           "bias has 31 elements");
}

static void test_ll_null_y(void **state) {
    ll_args a = ll_valid(state);
    expect(qf_layernorm_linear_fwd(a.ctx, kRecipe, &a.x, &a.ll, NULL, NULL), QF_ERR_INVALID_ARG,
           "qf_layernorm_linear_fwd: y is NULL");
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
    qf_tensor *ts[] = {&a->x, &a->gamma, &a->beta, &a->mu, &a->rsigma, NULL, &a->out.rowwise,
                       &a->out.amax, &a->out.scale_inv};
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
    expect(qf_quantize(ctx, kRecipe, QF_ROLE_WEIGHT, &a.x, a.scale, &a.out, s),
           QF_ERR_INVALID_ARG, "qf_quantize: stream", "belongs to another CUDA context");
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_true(gpu_untouched(bufs));
    expect(qf_quantize(ctx, kRecipe, QF_ROLE_WEIGHT, &a.x, a.scale, &a.out, NULL), QF_OK, "");
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
    a.gamma.dims[0] = K - 1;
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
        T(test_nq_rmsnorm_with_beta), T(test_nq_no_output_requested),
        T(test_nq_rowwise_too_small), T(test_nq_mu_too_small), T(test_nq_wrong_output_dtype),
        T(test_nq_misaligned_output), T(test_nq_null_scale), T(test_nq_unknown_recipe),
        T(test_quantize_role_input), T(test_su_n_zero), T(test_su_history_too_long),
        T(test_su_null_pointer), T(test_gemm_valid_reaches_device),
        T(test_gemm_k_not_multiple_of_16), T(test_gemm_n_not_multiple_of_16),
        T(test_gemm_wrong_a_dtype), T(test_gemm_y_too_small), T(test_gemm_bias_wrong_length),
        T(test_gemm_misaligned_a), T(test_gemm_null_scale_inv), T(test_gemm_arch_too_old),
        T(test_ll_valid_reaches_device), T(test_ll_weight_k_mismatch),
        T(test_ll_bad_bias_checked_before_any_stage), T(test_ll_null_y),
        T(test_stream_of_other_context), T(test_bad_input_writes_nothing),
    };
    return cmocka_run_group_tests_name("api_errors", tests, NULL, NULL);
}
