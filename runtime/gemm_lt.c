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
#include "stream.h"
#include "validate.h"

#define QF_LT_MX_VERSION 120800 /* cuBLASLt 12.8: CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 */
#define QF_LT_BLOCK_VERSION 120900 /* cuBLASLt 12.9: VEC128_32F and BLK128x128_32F */

#if CUBLAS_VERSION < 120000
#error "qfuse needs cuBLASLt 12.0 or newer for FP8 GEMMs"
#endif

/* What a plan multiplies. */
enum {
    QF_LT_PER_TENSOR = 0, /* FP8 with per-tensor or 1x128 / 128x128 block scales (qf_gemm_lt_fp8:
                           * the plan's a_mode, b_mode) */
    QF_LT_MXFP8 = 1,      /* VEC32_UE8M0 block scales (qf_gemm_lt_mxfp8) */
    QF_LT_NVFP4 = 2,      /* VEC16_UE4M3 block scales, device alpha/beta (qf_gemm_lt_nvfp4) */
    QF_LT_BF16 = 3        /* bf16 operands, either major order (qf_gemm_lt_bf16) */
};

struct qf_gemm_plan {
    int64_t M, N, K;
    qf_dtype ta, tb;
    qf_dtype td;      /* y: bf16, or fp32 (C and D) */
    int has_bias;
    int block_scaled; /* QF_LT_* */
    int a_mn, b_mn;   /* QF_LT_BF16: 1 when that operand is stored [K, M] / [K, N] */
    qf_lt_scale a_mode, b_mode; /* QF_LT_PER_TENSOR: how each operand's scales read */
    int dev_alpha;    /* alpha and beta read from device memory (CUBLASLT_POINTER_MODE_DEVICE) */
    int accumulate;   /* beta 1 (host mode; device mode: the caller's beta slot holds 1),
                       * y += A B^T; never tuned */
    int tuned;        /* the algorithm was chosen by timing (qf_plan_tune), or tuning is off */
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
    if (dt == QF_DTYPE_BF16)
        return CUDA_R_16BF;
    if (dt == QF_DTYPE_FP32)
        return CUDA_R_32F;
#if CUBLAS_VERSION >= QF_LT_MX_VERSION
    if (dt == QF_DTYPE_E2M1)
        return CUDA_R_4F_E2M1;
#endif
    return dt == QF_DTYPE_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

/* The op a plan serves, for messages. */
static const char *qf_plan_op(const qf_gemm_plan *p) {
    return p->block_scaled == QF_LT_BF16    ? "qf_gemm (staged bf16)"
           : p->block_scaled == QF_LT_NVFP4 ? "qf_gemm (nvfp4)"
           : p->block_scaled                ? "qf_gemm (mxfp8)"
           : p->a_mode || p->b_mode         ? "qf_gemm (fp8_block)"
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

/* The context's plans_free: releases every cached plan and the table. */
static void qf_gemm_plans_free(qf_ctx_t *ctx) {
    for (int i = 0; i < ctx->n_plans; i++)
        qf_plan_release(&ctx->plans[i]);
    free(ctx->plans);
    ctx->plans = NULL;
    ctx->n_plans = ctx->cap_plans = 0;
}

/* One attribute of a plan's descriptor. */
static qf_status qf_lt_set(qf_gemm_plan *p, cublasLtMatmulDescAttributes_t attr, const void *v,
                           size_t n) {
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, attr, v, n));
    return QF_OK;
}

/* MXFP8 (numerics 2.3): one UE8M0 scale per 32 elements along K of both operands; NVFP4 (2.4):
 * one UE4M3 scale per 16 elements, and alpha (from the amaxes) and beta read from device memory.
 * Both read swizzled scales. NOTES: Lt's A is our B, so Lt's A scales are b_scale
 * (qf_lt_plan_run). */
static qf_status qf_plan_block_scales(qf_gemm_plan *p) {
#if CUBLAS_VERSION >= QF_LT_MX_VERSION
    const int32_t mode = p->block_scaled == QF_LT_NVFP4 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3
                                                        : CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                               sizeof mode));
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                               sizeof mode));
    return QF_OK;
#else
    return qf_set_error(QF_ERR_UNSUPPORTED, "%s: qfuse was built against cuBLASLt %d; "
                        "block-scaled (VEC32_UE8M0, VEC16_UE4M3) GEMMs need %d or newer",
                        qf_plan_op(p), CUBLAS_VERSION, QF_LT_MX_VERSION);
#endif
}

/* FP8 block scaling (numerics 2.5): each operand's cuBLASLt scale mode, Lt's A being our B. */
static qf_status qf_plan_fp8_block_scales(qf_gemm_plan *p) {
#if CUBLAS_VERSION >= QF_LT_BLOCK_VERSION
    static const int32_t modes[] = {[QF_LT_SCALE_TENSOR] = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
                                    [QF_LT_SCALE_VEC128] = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                                    [QF_LT_SCALE_BLK128] =
                                        CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F};
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                               &modes[p->b_mode], sizeof modes[0]));
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                               &modes[p->a_mode], sizeof modes[0]));
    return QF_OK;
#else
    return qf_set_error(QF_ERR_UNSUPPORTED, "%s: qfuse was built against cuBLASLt %d; "
                        "block-scaled FP8 (VEC128_32F, BLK128x128_32F) GEMMs need %d or newer",
                        qf_plan_op(p), CUBLAS_VERSION, QF_LT_BLOCK_VERSION);
#endif
}

/* Lt's A is our B: K-major [N, K] row-major is Lt's [K, N] column-major, transposed (op T); our
 * B stored [K, N] (b_mn) is Lt's [N, K] as is (op N). Lt's B is our A: [M, K] is [K, M] as is;
 * [K, M] (a_mn) is [M, K], transposed. */
static qf_status qf_plan_descs(qf_gemm_plan *p) {
    const cublasOperation_t ta = p->b_mn ? CUBLAS_OP_N : CUBLAS_OP_T;
    const cublasOperation_t tb = p->a_mn ? CUBLAS_OP_T : CUBLAS_OP_N;
    QF_LT_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (p->block_scaled == QF_LT_MXFP8 || p->block_scaled == QF_LT_NVFP4)
        QF_TRY(qf_plan_block_scales(p));
    if (p->a_mode || p->b_mode)
        QF_TRY(qf_plan_fp8_block_scales(p));
    if (p->dev_alpha) {
        const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
        QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm,
                                                   sizeof pm));
    }
    if (p->has_bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        const cudaDataType_t bt = CUDA_R_16BF;
        QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                   sizeof epi));
        QF_LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                   sizeof bt));
    }
    const int64_t la_rows = p->b_mn ? p->N : p->K, la_cols = p->b_mn ? p->K : p->N;
    const int64_t lb_rows = p->a_mn ? p->M : p->K, lb_cols = p->a_mn ? p->K : p->M;
    QF_LT_CHECK(cublasLtMatrixLayoutCreate(&p->la, qf_lt_type(p->tb), (uint64_t)la_rows,
                                           (uint64_t)la_cols, la_rows));
    QF_LT_CHECK(cublasLtMatrixLayoutCreate(&p->lb, qf_lt_type(p->ta), (uint64_t)lb_rows,
                                           (uint64_t)lb_cols, lb_rows));
    QF_LT_CHECK(cublasLtMatrixLayoutCreate(&p->lc, qf_lt_type(p->td), (uint64_t)p->N,
                                           (uint64_t)p->M, p->N));
    return QF_OK;
}

/* Up to n (<= QF_LT_HEURISTIC_MAX) algorithms for plan p from cuBLASLt's heuristic, best first,
 * within ctx's workspace, with split-K partial sums, if any, reduced in fp32
 * (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE; the other schemes reduce in the output type or in
 * place in y, in an unspecified order), and no split-K with a bias epilogue into a bf16 y, which
 * then adds the bias to a bf16-rounded sum (pytorch/pytorch PR 180875), unless every algorithm
 * the heuristic returns splits K (small M and N, large K: measured on an H200 at M=128 N=64
 * K=8192); then those, one rounding more than none at all. */
#define QF_LT_HEURISTIC_MAX 16
static cublasStatus_t qf_plan_heuristic(qf_ctx_t *ctx, const qf_gemm_plan *p, int n,
                                        cublasLtMatmulHeuristicResult_t *res, int *found) {
    cublasLtMatmulPreference_t pref;
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    *found = 0;
    cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ctx->workspace_size, sizeof ctx->workspace_size);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &schemes, sizeof schemes);
    cublasLtMatmulHeuristicResult_t all[QF_LT_HEURISTIC_MAX];
    int got = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->op, p->la, p->lb, p->lc, p->lc, pref,
                                           QF_LT_HEURISTIC_MAX, all, &got);
    cublasLtMatmulPreferenceDestroy(pref);
    for (int pass = p->has_bias && p->td != QF_DTYPE_FP32 ? 0 : 1; pass < 2 && !*found; pass++)
        for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < got && *found < n; i++) {
            int32_t splitk = 1;
            size_t w = 0;
            if (all[i].state != CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigGetAttribute(&all[i].algo,
                                                     CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                                     sizeof splitk, &w) != CUBLAS_STATUS_SUCCESS ||
                (pass == 0 && splitk > 1))
                continue;
            res[(*found)++] = all[i];
        }
    return s;
}

static qf_status qf_plan_algo(qf_ctx_t *ctx, qf_gemm_plan *p) {
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const cublasStatus_t s = qf_plan_heuristic(ctx, p, 1, &res, &found);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0)
        return qf_set_error(QF_ERR_CUBLAS, "%s: cuBLASLt has no %s algorithm for "
                            "M=%lld N=%lld K=%lld on sm_%d (%s)", qf_plan_op(p),
                            p->block_scaled == QF_LT_NVFP4  ? "FP4"
                            : p->block_scaled == QF_LT_BF16 ? "bf16"
                                                            : "FP8",
                            (long long)p->M,
                            (long long)p->N, (long long)p->K, ctx->arch,
                            cublasLtGetStatusString(s));
    p->algo = res.algo;
    return QF_OK;
}

/* The operands of one call of a plan. sa, sb: device scales of our A and B (fp32 [1] per tensor,
 * E8M0/E4M3 matrices, or NULL for bf16); ab: device {alpha, beta} for plans in device pointer
 * mode, else NULL (alpha 1, beta 0 on the host). */
typedef struct qf_lt_call {
    const void *a, *sa, *b, *sb;
    const float *ab;
    const void *bias;
    void *y;
} qf_lt_call;

/* The call's scale pointers and bias in the plan's descriptor (cheap host writes, per call; Lt's
 * A is our B). Set before the heuristic too: cuBLASLt refuses block scale modes without them. */
static qf_status qf_plan_operands(qf_gemm_plan *p, const qf_lt_call *c) {
    if (c->sa) {
        QF_TRY(qf_lt_set(p, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &c->sb, sizeof c->sb));
        QF_TRY(qf_lt_set(p, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &c->sa, sizeof c->sa));
    }
    if (p->has_bias)
        QF_TRY(qf_lt_set(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c->bias, sizeof c->bias));
    return QF_OK;
}

/* Finds or builds the plan for this problem, with call c's operands in its descriptor (a new
 * plan's heuristic is asked with them); caller holds ctx->lock. */
static qf_status qf_plan_get(qf_ctx_t *ctx, const qf_gemm_plan *want, const qf_lt_call *c,
                             qf_gemm_plan **out) {
    for (int i = 0; i < ctx->n_plans; i++) {
        qf_gemm_plan *p = &ctx->plans[i];
        if (p->M == want->M && p->N == want->N && p->K == want->K && p->ta == want->ta &&
            p->tb == want->tb && p->td == want->td && p->has_bias == want->has_bias &&
            p->block_scaled == want->block_scaled && p->a_mn == want->a_mn &&
            p->b_mn == want->b_mn && p->a_mode == want->a_mode && p->b_mode == want->b_mode &&
            p->dev_alpha == want->dev_alpha && p->accumulate == want->accumulate) {
            *out = p;
            return qf_plan_operands(p, c);
        }
    }
    /* never evicted: a plan made again would be tuned again, and could take another algorithm
     * (other bits for the same inputs) or, inside a capture, go untuned */
    QF_TRY(qf_ctx_table_grow((void **)&ctx->plans, ctx->n_plans, &ctx->cap_plans,
                             sizeof *ctx->plans, qf_plan_op(want)));
    ctx->plans_free = qf_gemm_plans_free; /* the table is the context's now, a plan or not */
    qf_gemm_plan *p = &ctx->plans[ctx->n_plans];
    *p = *want;
    qf_status s = qf_plan_descs(p);
    if (s == QF_OK)
        s = qf_plan_operands(p, c);
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
    if (b->dims[b->ndim - 1] != want->K)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s has K = %lld but %s has K = %lld; both "
                            "operands are K-major with the same K", op, g->b_arg,
                            (long long)b->dims[b->ndim - 1], g->a_arg, (long long)want->K);
    want->M = na / want->K;
    want->N = nb / want->K;
    want->ta = a->dtype;
    want->tb = b->dtype;
    if ((a->dtype != QF_DTYPE_E4M3 && a->dtype != QF_DTYPE_E5M2) || b->dtype != QF_DTYPE_E4M3)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s must be e4m3 or e5m2 and %s e4m3 (got "
                            "%s, %s)", op, g->a_arg, g->b_arg, qf_dtype_name(a->dtype),
                            qf_dtype_name(b->dtype));
    if (want->K % 16 || want->N % 16) /* name the one that is not (numerics 4) */
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s = %lld is not a multiple of 16 (cuBLASLt "
                            "FP8 needs the GEMM's K and N multiples of 16; y [M, N] = a [M, K] "
                            "b [N, K]^T with K = %lld, N = %lld: in a wgrad K is the token count, "
                            "in a dgrad N is the layer's input width)", op,
                            want->K % 16 ? "K" : "N", (long long)(want->K % 16 ? want->K : want->N),
                            (long long)want->K, (long long)want->N);
    sa.dims[0] = want->M, sa.dims[1] = want->K;
    QF_TRY(qf_check_buffer(op, g->a_arg, a, &sa));
    qf_shape sb = {g->b_arg, b->dtype, 2, {want->N, want->K}, 0};
    QF_TRY(qf_check_buffer(op, g->b_arg, b, &sb));
    QF_TRY(qf_check_gemm_outputs(op, g->r, bias, y, want->M, want->N, want->K));
    const qf_inputs in = {3, {g->a_arg, g->b_arg, "bias"}, {a, b, bias}};
    QF_TRY(qf_check_apart(op, "y", y, &in));
    want->td = y->dtype;
    want->has_bias = bias != NULL;
    want->accumulate = g->accumulate;
    want->a_mode = g->a_mode;
    want->b_mode = g->b_mode;
    return QF_OK;
}

static cublasStatus_t qf_lt_matmul(qf_ctx_t *ctx, const qf_gemm_plan *p,
                                   const cublasLtMatmulAlgo_t *algo, const qf_lt_call *c,
                                   void *stream) {
    const float host_ab[2] = {1.0f, p->accumulate ? 1.0f : 0.0f};
    const float *alpha = c->ab ? c->ab : &host_ab[0], *beta = c->ab ? c->ab + 1 : &host_ab[1];
    return cublasLtMatmul(ctx->lt, p->op, alpha, c->b, p->la, c->a, p->lb, beta, c->y, p->lc,
                          c->y, p->lc, algo, ctx->workspace, ctx->workspace_size,
                          (cudaStream_t)stream);
}

/* Milliseconds of `reps` runs of algo after one untimed run, or -1 when it fails. Synchronizes
 * on stream. */
static float qf_lt_time(qf_ctx_t *ctx, const qf_gemm_plan *p, const cublasLtMatmulAlgo_t *algo,
                        const qf_lt_call *c, cudaEvent_t e0, cudaEvent_t e1, int reps,
                        void *stream) {
    if (qf_lt_matmul(ctx, p, algo, c, stream) != CUBLAS_STATUS_SUCCESS ||
        cudaEventRecord(e0, (cudaStream_t)stream) != cudaSuccess)
        return -1.0f;
    for (int i = 0; i < reps; i++)
        if (qf_lt_matmul(ctx, p, algo, c, stream) != CUBLAS_STATUS_SUCCESS)
            return -1.0f;
    float ms = -1.0f;
    if (cudaEventRecord(e1, (cudaStream_t)stream) != cudaSuccess ||
        cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
        return -1.0f;
    return ms;
}

#define QF_LT_TUNE_ALGOS 8 /* candidates timed by qf_plan_tune */
#define QF_LT_TUNE_REPS 3  /* timed runs of each, after one untimed run */

/* QFUSE_VERBOSE's lines of a tuning: each candidate's cuBLASLt configuration (algorithm, tile and
 * stages ids, cublasLt.h's enums) and time per run (ms[i] of QF_LT_TUNE_REPS runs; < 0: failed). */
static void qf_plan_tune_report(const qf_gemm_plan *p, const cublasLtMatmulHeuristicResult_t *res,
                                const float *ms, int n, int pick) {
    for (int i = 0; i < n; i++) {
        int32_t id = -1, tile = -1, stages = -1;
        size_t w = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id,
                                             &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                             sizeof stages, &w);
        fprintf(stderr,
                "qfuse: %s M=%lld N=%lld K=%lld: cuBLASLt candidate %d (algo %d, tile %d, stages "
                "%d): %s%.1f us per run%s\n",
                qf_plan_op(p), (long long)p->M, (long long)p->N, (long long)p->K, i, id, tile,
                stages, ms[i] < 0.0f ? "failed, " : "",
                ms[i] < 0.0f ? 0.0f : 1e3f * ms[i] / QF_LT_TUNE_REPS, i == pick ? ", kept" : "");
    }
}

/* The first call of a plan times up to QF_LT_TUNE_ALGOS of the algorithms cuBLASLt's heuristic
 * returns (QF_LT_TUNE_REPS runs each, on the call's own operands: beta is 0, so y is the same
 * after every run) and keeps the fastest; the heuristic's first choice is often not it (bf16 at
 * 8192^3 on an H200, qfuse-bench: 680 TFLOP/s for the first, 699-707 for the fastest). Skipped,
 * keeping the first choice, under QFUSE_GEMM_NO_TUNE=1 and while the stream is being captured
 * into a CUDA graph (tried again at the next call outside a capture). QFUSE_VERBOSE=1 prints each
 * candidate's time and the one kept. */
static void qf_plan_tune(qf_ctx_t *ctx, qf_gemm_plan *p, const qf_lt_call *c, void *stream) {
    if (qf_stream_capturing(stream) != 0) /* capturing, or the runtime cannot say */
        return;
    p->tuned = 1;
    if (qf_env_flag("QFUSE_GEMM_NO_TUNE"))
        return;
    cublasLtMatmulHeuristicResult_t res[QF_LT_TUNE_ALGOS];
    int found = 0;
    if (qf_plan_heuristic(ctx, p, QF_LT_TUNE_ALGOS, res, &found) != CUBLAS_STATUS_SUCCESS)
        found = 0;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (found > 1 && cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
        float ms[QF_LT_TUNE_ALGOS];
        int pick = -1;
        for (int i = 0; i < found; i++) { /* qf_plan_heuristic kept only usable ones */
            ms[i] = qf_lt_time(ctx, p, &res[i].algo, c, e0, e1, QF_LT_TUNE_REPS, stream);
            if (ms[i] >= 0.0f && (pick < 0 || ms[i] < ms[pick]))
                pick = i;
        }
        if (pick >= 0)
            p->algo = res[pick].algo;
        if (qf_verbose())
            qf_plan_tune_report(p, res, ms, found, pick);
    }
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    (void)cudaGetLastError(); /* a failed candidate leaves no error behind */
}


/* Locks ctx, finds or builds the plan (tuning it on its first call), and runs it: the arguments
 * are checked by the caller. */
static qf_status qf_lt_plan_run(qf_ctx_t *ctx, const qf_gemm_plan *want, const qf_lt_call *c,
                                void *stream) {
    pthread_mutex_lock(&ctx->lock);
    qf_gemm_plan *p = NULL;
    qf_status s = qf_plan_get(ctx, want, c, &p);
    if (s != QF_OK)
        goto out;
    if (!p->tuned && !p->accumulate)
        qf_plan_tune(ctx, p, c, stream);
    const cublasStatus_t st = qf_lt_matmul(ctx, p, &p->algo, c, stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        s = qf_set_error(QF_ERR_CUBLAS, "%s: cublasLtMatmul failed for M=%lld N=%lld K=%lld: %s",
                         qf_plan_op(p), (long long)p->M, (long long)p->N, (long long)p->K,
                         cublasLtGetStatusString(st));
out:
    pthread_mutex_unlock(&ctx->lock);
    return s;
}

/* The loaded cuBLASLt is `need` or newer, for block scale modes `mode` (named in the message). */
static qf_status qf_gemm_lt_version_of(const char *op, const char *mode, int need) {
    size_t v = cublasLtGetVersion();
    if (v < (size_t)need)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: the loaded cuBLASLt is version %zu; "
                            "block-scaled (%s) GEMMs need %d or newer", op, v, mode, need);
    return QF_OK;
}

qf_status qf_gemm_lt_fp8(qf_ctx_t *ctx, const char *op, const qf_gemm_lt_fp8_args *g,
                         const qf_tensor *bias, qf_tensor *y, void *stream) {
    qf_gemm_plan want = {0};
    QF_TRY(qf_check_gemm_args(ctx, op, g, bias, y, &want));
    if (want.a_mode || want.b_mode)
        QF_TRY(qf_gemm_lt_version_of(op, "VEC128_32F, BLK128x128_32F", QF_LT_BLOCK_VERSION));
    QF_TRY(qf_ctx_ready(ctx, op, stream));
    const qf_lt_call c = {g->a->data, g->a_scale_inv, g->b->data, g->b_scale_inv, NULL,
                          bias ? bias->data : NULL, y->data};
    return qf_lt_plan_run(ctx, &want, &c, stream);
}

/* ==================================================================== bf16 (staged GEMMs) */

qf_status qf_gemm_lt_bf16(qf_ctx_t *ctx, const qf_gemm_lt_bf16_args *g, void *stream) {
    const qf_gemm_plan want = {.M = g->M, .N = g->N, .K = g->K, .ta = QF_DTYPE_BF16,
                               .tb = QF_DTYPE_BF16, .td = g->y_dtype,
                               .block_scaled = QF_LT_BF16, .a_mn = g->a_mn,
                               .b_mn = g->b_mn, .dev_alpha = g->alpha_beta != NULL,
                               .accumulate = g->accumulate};
    const qf_lt_call c = {g->a, NULL, g->b, NULL, g->alpha_beta, NULL, g->y};
    return qf_lt_plan_run(ctx, &want, &c, stream);
}

/* ==================================================================== MXFP8 (sm_100 and later) */

static qf_status qf_gemm_lt_mx_version(void) {
    return qf_gemm_lt_version_of("qf_gemm (mxfp8)", "VEC32_UE8M0", QF_LT_MX_VERSION);
}

qf_status qf_gemm_lt_mxfp8(qf_ctx_t *ctx, const qf_tensor *a, const qf_tensor *a_scale,
                           const qf_tensor *b, const qf_tensor *b_scale, const qf_tensor *bias,
                           qf_tensor *y, int64_t M, int64_t N, int64_t K, int accumulate,
                           void *stream) {
    QF_TRY(qf_gemm_lt_mx_version());
    qf_gemm_plan want = {.M = M, .N = N, .K = K, .ta = a->dtype, .tb = b->dtype, .td = y->dtype,
                         .has_bias = bias && bias->data, .block_scaled = QF_LT_MXFP8,
                         .accumulate = accumulate};
    const qf_lt_call c = {a->data, a_scale->data, b->data, b_scale->data, NULL,
                          bias ? bias->data : NULL, y->data};
    return qf_lt_plan_run(ctx, &want, &c, stream);
}

qf_status qf_gemm_lt_mxfp8_describe(int64_t M, int64_t N, int64_t K, qf_dtype ta, qf_dtype tb,
                                    int has_bias) {
    QF_TRY(qf_gemm_lt_mx_version());
    qf_gemm_plan p = {.M = M, .N = N, .K = K, .ta = ta, .tb = tb, .td = QF_DTYPE_BF16,
                      .has_bias = has_bias, .block_scaled = QF_LT_MXFP8};
    qf_status s = qf_plan_descs(&p);
    qf_plan_release(&p);
    return s;
}

/* ==================================================================== NVFP4 (sm_100 and later) */

qf_status qf_gemm_lt_nvfp4(qf_ctx_t *ctx, const qf_tensor *a, const qf_tensor *a_scale,
                           const qf_tensor *b, const qf_tensor *b_scale, const float *alpha_beta,
                           const qf_tensor *bias, qf_tensor *y, int64_t M, int64_t N, int64_t K,
                           int accumulate, void *stream) {
    QF_TRY(qf_gemm_lt_version_of("qf_gemm (nvfp4)", "VEC16_UE4M3", QF_LT_MX_VERSION));
    qf_gemm_plan want = {.M = M, .N = N, .K = K, .ta = QF_DTYPE_E2M1, .tb = QF_DTYPE_E2M1,
                         .td = y->dtype, .has_bias = bias && bias->data,
                         .block_scaled = QF_LT_NVFP4, .dev_alpha = 1, .accumulate = accumulate};
    const qf_lt_call c = {a->data, a_scale->data, b->data, b_scale->data, alpha_beta,
                          bias ? bias->data : NULL, y->data};
    return qf_lt_plan_run(ctx, &want, &c, stream);
}

qf_status qf_gemm_lt_nvfp4_describe(int64_t M, int64_t N, int64_t K, int has_bias) {
    QF_TRY(qf_gemm_lt_version_of("qf_gemm (nvfp4)", "VEC16_UE4M3", QF_LT_MX_VERSION));
    qf_gemm_plan p = {.M = M, .N = N, .K = K, .ta = QF_DTYPE_E2M1, .tb = QF_DTYPE_E2M1,
                      .td = QF_DTYPE_BF16, .has_bias = has_bias, .block_scaled = QF_LT_NVFP4,
                      .dev_alpha = 1};
    qf_status s = qf_plan_descs(&p);
    qf_plan_release(&p);
    return s;
}
