/* gemm_lt.c: per-tensor-scaled FP8 GEMM through cuBLASLt, with cached plans (numerics 2.1, DESIGN
 * "Ops": cuBLASLt where the hardware supports the scale mode natively), and the block-scaled
 * MXFP8 (numerics 2.3) and NVFP4 (numerics 2.4) GEMMs of sm_100 and later.
 *
 * Layout: y[M, N] = A[M, K] B[N, K]^T with both operands K-major (row-major [M, K] and [N, K]).
 * cuBLASLt is column-major, so we ask it for y^T[N, M] = B' A' with Lt's A = our B (transposed,
 * [K, N] column-major) and Lt's B = our A ([K, M] column-major): the "TN" layout that FP8 GEMMs
 * require on Hopper. */
#include <string.h>

#include "ctx.h"
#include "gemm_lt.h"
#include "validate.h"

#define QF_MAX_PLANS 32
#define QF_LT_MX_VERSION 120800 /* cuBLASLt 12.8: CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 */

#if CUBLAS_VERSION < 120000
#error "qfuse needs cuBLASLt 12.0 or newer for FP8 GEMMs"
#endif

struct qf_gemm_plan {
    int64_t M, N, K;
    qf_dtype ta, tb;
    int has_bias;
    int block_scaled; /* 1: MXFP8 with VEC32_UE8M0 block scales (qf_gemm_lt_mxfp8), 2: NVFP4 with
                       * VEC16_UE4M3 and device alpha/beta (qf_gemm_lt_nvfp4), 0: per tensor */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

#define QF_LT_CHECK(call)                                                                    \
    do {                                                                                     \
        cublasStatus_t qf_lt_s_ = (call);                                                    \
        if (qf_lt_s_ != CUBLAS_STATUS_SUCCESS)                                               \
            return qf_set_error(QF_ERR_CUBLAS, "%s failed at %s:%d: %s", #call, __FILE__,     \
                                __LINE__, cublasLtGetStatusString(qf_lt_s_));                \
    } while (0)

static cudaDataType_t qf_lt_type(qf_dtype dt) {
#if CUBLAS_VERSION >= QF_LT_MX_VERSION
    if (dt == QF_DTYPE_E2M1)
        return CUDA_R_4F_E2M1;
#endif
    return dt == QF_DTYPE_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

/* The op a plan serves, for messages. */
static const char *qf_plan_op(const qf_gemm_plan *p) {
    return p->block_scaled == 2   ? "qf_gemm (nvfp4)"
           : p->block_scaled ? "qf_gemm (mxfp8)"
                             : "qf_gemm (fp8_delayed)";
}

static void qf_plan_release(qf_gemm_plan *p) {
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

void qf_gemm_plans_free(qf_ctx_t *ctx) {
    for (int i = 0; i < ctx->n_plans; i++)
        qf_plan_release(&ctx->plans[i]);
    free(ctx->plans);
    ctx->plans = NULL;
    ctx->n_plans = 0;
}

/* MXFP8 (numerics 2.3): one UE8M0 scale per 32 elements along K of both operands; NVFP4 (2.4):
 * one UE4M3 scale per 16 elements, and alpha (from the amaxes) and beta read from device memory.
 * Both read swizzled scales. NOTES: Lt's A is our B, so Lt's A scales are b_scale (qf_gemm_run). */
static qf_status qf_plan_block_scales(qf_gemm_plan *p) {
#if CUBLAS_VERSION >= QF_LT_MX_VERSION
    const int32_t mode = p->block_scaled == 2 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3
                                              : CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                               sizeof mode));
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                               sizeof mode));
    if (p->block_scaled == 2) {
        const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
        QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm,
                                                   sizeof pm));
    }
    return QF_OK;
#else
    return qf_set_error(QF_ERR_UNSUPPORTED, "%s: qfuse was built against cuBLASLt %d; "
                        "block-scaled (VEC32_UE8M0, VEC16_UE4M3) GEMMs need %d or newer",
                        qf_plan_op(p), CUBLAS_VERSION, QF_LT_MX_VERSION);
#endif
}

static qf_status qf_plan_descs(qf_gemm_plan *p) {
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    QF_LT_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (p->block_scaled)
        QF_TRY(qf_plan_block_scales(p));
    if (p->has_bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        const cudaDataType_t bt = CUDA_R_16BF;
        QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                   sizeof epi));
        QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                   sizeof bt));
    }
    /* Lt A = weight B[N, K] seen as [K, N] column-major; Lt B = activation A[M, K] as [K, M]. */
    QF_LT_CHECK(cublasLtMatrixLayoutCreate(&p->la, qf_lt_type(p->tb), (uint64_t)p->K,
                                           (uint64_t)p->N, p->K));
    QF_LT_CHECK(cublasLtMatrixLayoutCreate(&p->lb, qf_lt_type(p->ta), (uint64_t)p->K,
                                           (uint64_t)p->M, p->K));
    QF_LT_CHECK(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_16BF, (uint64_t)p->N, (uint64_t)p->M,
                                           p->N));
    return QF_OK;
}

static qf_status qf_plan_algo(qf_ctx_t *ctx, qf_gemm_plan *p) {
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    QF_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx->workspace_size,
        sizeof ctx->workspace_size);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1,
                                           &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0)
        return qf_set_error(QF_ERR_CUBLAS, "%s: cuBLASLt has no %s algorithm for "
                            "M=%lld N=%lld K=%lld on sm_%d (%s)", qf_plan_op(p),
                            p->block_scaled == 2 ? "FP4" : "FP8", (long long)p->M,
                            (long long)p->N, (long long)p->K, ctx->arch,
                            cublasLtGetStatusString(s));
    p->algo = res.algo;
    return QF_OK;
}

/* Finds or builds the plan for this problem; caller holds ctx->lock. */
static qf_status qf_plan_get(qf_ctx_t *ctx, const qf_gemm_plan *want, qf_gemm_plan **out) {
    for (int i = 0; i < ctx->n_plans; i++) {
        qf_gemm_plan *p = &ctx->plans[i];
        if (p->M == want->M && p->N == want->N && p->K == want->K && p->ta == want->ta &&
            p->tb == want->tb && p->has_bias == want->has_bias &&
            p->block_scaled == want->block_scaled) {
            *out = p;
            return QF_OK;
        }
    }
    if (!ctx->plans && !(ctx->plans = calloc(QF_MAX_PLANS, sizeof *ctx->plans)))
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "%s: out of host memory", qf_plan_op(want));
    if (ctx->n_plans == QF_MAX_PLANS) /* simple bound: drop the oldest */
        qf_plan_release(&ctx->plans[--ctx->n_plans]);
    qf_gemm_plan *p = &ctx->plans[ctx->n_plans];
    *p = *want;
    qf_status s = qf_plan_descs(p);
    if (s == QF_OK)
        s = qf_plan_algo(ctx, p);
    if (s != QF_OK) {
        qf_plan_release(p);
        return s;
    }
    ctx->n_plans++;
    *out = p;
    return QF_OK;
}

static qf_status qf_check_gemm_args(qf_ctx_t *ctx, const char *op, const qf_gemm_lt_fp8_args *g,
                                    const qf_tensor *bias, qf_tensor *y, qf_gemm_plan *want) {
    const qf_tensor *a = g->a, *b = g->b;
    if (ctx->arch < 89)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: FP8 GEMM needs sm_89 or newer; device is "
                            "sm_%d", op, ctx->arch);
    int64_t na = qf_tensor_numel(a), nb = qf_tensor_numel(b);
    qf_shape sa = {g->a_arg, a ? a->dtype : QF_DTYPE_E4M3, 2, {1, 1}, 0};
    if (!a || !b || na < 1 || nb < 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL or empty", op,
                            !a || na < 1 ? g->a_arg : g->b_arg);
    want->K = a->dims[a->ndim - 1];
    want->M = na / want->K;
    want->N = nb / want->K;
    want->ta = a->dtype;
    want->tb = b->dtype;
    if ((a->dtype != QF_DTYPE_E4M3 && a->dtype != QF_DTYPE_E5M2) || b->dtype != QF_DTYPE_E4M3)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s must be e4m3 or e5m2 and %s e4m3 (got "
                            "%s, %s)", op, g->a_arg, g->b_arg, qf_dtype_name(a->dtype),
                            qf_dtype_name(b->dtype));
    if (want->K % 16 || want->N % 16)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: K = %lld and N = %lld must be multiples of 16 "
                            "(cuBLASLt FP8)", op, (long long)want->K, (long long)want->N);
    sa.dims[0] = want->M, sa.dims[1] = want->K;
    QF_TRY(qf_check_buffer(op, g->a_arg, a, &sa));
    qf_shape sb = {g->b_arg, b->dtype, 2, {want->N, want->K}, 0};
    QF_TRY(qf_check_buffer(op, g->b_arg, b, &sb));
    qf_shape sy = {"y", QF_DTYPE_BF16, 2, {want->M, want->N}, 0};
    QF_TRY(qf_check_buffer(op, "y", y, &sy));
    want->has_bias = bias && bias->data;
    qf_shape sbias = {"bias", QF_DTYPE_BF16, 1, {want->N}, 0};
    return want->has_bias ? qf_check_buffer(op, "bias", bias, &sbias) : QF_OK;
}

/* sa, sb: device scales of our A and B (fp32 [1] per tensor, or E8M0/E4M3 matrices); ab: device
 * {alpha, beta} for plans in device pointer mode (NVFP4), else NULL (alpha 1, beta 0 on the host). */
static qf_status qf_gemm_run(qf_ctx_t *ctx, qf_gemm_plan *p, const qf_tensor *a, const void *sa,
                             const qf_tensor *b, const void *sb, const float *ab,
                             const qf_tensor *bias, qf_tensor *y, void *stream) {
    /* Scale pointers and bias live in the descriptor: set them per call (cheap host writes). */
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb,
                                               sizeof sb));
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa,
                                               sizeof sa));
    if (p->has_bias)
        QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias->data, sizeof bias->data));
    const float host_ab[2] = {1.0f, 0.0f};
    const float *alpha = ab ? ab : &host_ab[0], *beta = ab ? ab + 1 : &host_ab[1];
    QF_LT_CHECK(cublasLtMatmul(ctx->lt, p->op, alpha, b->data, p->la, a->data, p->lb, beta,
                               y->data, p->lc, y->data, p->lc, &p->algo, ctx->workspace,
                               ctx->workspace_size, (cudaStream_t)stream));
    return QF_OK;
}

qf_status qf_gemm_lt_fp8(qf_ctx_t *ctx, const char *op, const qf_gemm_lt_fp8_args *g,
                         const qf_tensor *bias, qf_tensor *y, void *stream) {
    qf_gemm_plan want = {0};
    QF_TRY(qf_check_gemm_args(ctx, op, g, bias, y, &want));
    QF_TRY(qf_ctx_ready(ctx, op, stream));
    pthread_mutex_lock(&ctx->lock);
    qf_gemm_plan *p = NULL;
    qf_status s = qf_plan_get(ctx, &want, &p);
    if (s == QF_OK)
        s = qf_gemm_run(ctx, p, g->a, g->a_scale_inv, g->b, g->b_scale_inv, NULL, bias, y,
                        stream);
    pthread_mutex_unlock(&ctx->lock);
    return s;
}

/* ==================================================================== MXFP8 (sm_100 and later) */

/* Locks ctx, finds or builds the plan and runs it (arguments already checked by the caller). */
static qf_status qf_gemm_lt_plan_run(qf_ctx_t *ctx, const qf_gemm_plan *want, const qf_tensor *a,
                                     const void *sa, const qf_tensor *b, const void *sb,
                                     const float *ab, const qf_tensor *bias, qf_tensor *y,
                                     void *stream) {
    pthread_mutex_lock(&ctx->lock);
    qf_gemm_plan *p = NULL;
    qf_status s = qf_plan_get(ctx, want, &p);
    if (s == QF_OK)
        s = qf_gemm_run(ctx, p, a, sa, b, sb, ab, bias, y, stream);
    pthread_mutex_unlock(&ctx->lock);
    return s;
}

static qf_status qf_gemm_lt_mx_version_of(const char *op, const char *mode) {
    size_t v = cublasLtGetVersion();
    if (v < QF_LT_MX_VERSION)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: the loaded cuBLASLt is version %zu; "
                            "block-scaled (%s) GEMMs need %d or newer", op, v, mode,
                            QF_LT_MX_VERSION);
    return QF_OK;
}

static qf_status qf_gemm_lt_mx_version(void) {
    return qf_gemm_lt_mx_version_of("qf_gemm (mxfp8)", "VEC32_UE8M0");
}

qf_status qf_gemm_lt_mxfp8(qf_ctx_t *ctx, const qf_tensor *a, const qf_tensor *a_scale,
                           const qf_tensor *b, const qf_tensor *b_scale, const qf_tensor *bias,
                           qf_tensor *y, int64_t M, int64_t N, int64_t K, void *stream) {
    QF_TRY(qf_gemm_lt_mx_version());
    qf_gemm_plan want = {.M = M, .N = N, .K = K, .ta = a->dtype, .tb = b->dtype,
                         .has_bias = bias && bias->data, .block_scaled = 1};
    return qf_gemm_lt_plan_run(ctx, &want, a, a_scale->data, b, b_scale->data, NULL, bias, y,
                               stream);
}

qf_status qf_gemm_lt_mxfp8_describe(int64_t M, int64_t N, int64_t K, qf_dtype ta, qf_dtype tb,
                                    int has_bias) {
    QF_TRY(qf_gemm_lt_mx_version());
    qf_gemm_plan p = {.M = M, .N = N, .K = K, .ta = ta, .tb = tb, .has_bias = has_bias,
                      .block_scaled = 1};
    qf_status s = qf_plan_descs(&p);
    qf_plan_release(&p);
    return s;
}

/* ==================================================================== NVFP4 (sm_100 and later) */

qf_status qf_gemm_lt_nvfp4(qf_ctx_t *ctx, const qf_tensor *a, const qf_tensor *a_scale,
                           const qf_tensor *b, const qf_tensor *b_scale, const float *alpha_beta,
                           const qf_tensor *bias, qf_tensor *y, int64_t M, int64_t N, int64_t K,
                           void *stream) {
    QF_TRY(qf_gemm_lt_mx_version_of("qf_gemm (nvfp4)", "VEC16_UE4M3"));
    qf_gemm_plan want = {.M = M, .N = N, .K = K, .ta = QF_DTYPE_E2M1, .tb = QF_DTYPE_E2M1,
                         .has_bias = bias && bias->data, .block_scaled = 2};
    return qf_gemm_lt_plan_run(ctx, &want, a, a_scale->data, b, b_scale->data, alpha_beta, bias,
                               y, stream);
}

qf_status qf_gemm_lt_nvfp4_describe(int64_t M, int64_t N, int64_t K, int has_bias) {
    QF_TRY(qf_gemm_lt_mx_version_of("qf_gemm (nvfp4)", "VEC16_UE4M3"));
    qf_gemm_plan p = {.M = M, .N = N, .K = K, .ta = QF_DTYPE_E2M1, .tb = QF_DTYPE_E2M1,
                      .has_bias = has_bias, .block_scaled = 2};
    qf_status s = qf_plan_descs(&p);
    qf_plan_release(&p);
    return s;
}
