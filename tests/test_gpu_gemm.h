/* test_gpu_gemm.h: what the GEMM tests share: device copies, CUDA-event medians, and the bf16
 * cuBLASLt ceiling measured in the same run. */
#ifndef QF_TEST_GPU_GEMM_H
#define QF_TEST_GPU_GEMM_H

#include "test_gpu_util.h"

#include <cublasLt.h>

#define LT_OK(call) assert_int_equal((int)(call), (int)CUBLAS_STATUS_SUCCESS)

/* The rowwise copy of a quantized tensor: its data, block scales and (NVFP4; NULL otherwise)
 * global amax, in the slots qf_gemm reads. */
static inline qf_quantized gemm_rowwise_q(const qf_tensor *data, const qf_tensor *scale,
                                          const qf_tensor *amax, qf_scale_layout layout) {
    qf_quantized q = {.layout = layout};
    q.t[QF_SLOT_ROWWISE_DATA] = *data;
    q.t[QF_SLOT_ROWWISE_SCALE_INV] = *scale;
    if (amax)
        q.t[QF_SLOT_AMAX_ROWWISE] = *amax;
    return q;
}

/* qf_gemm of the rowwise copies of qa and qb on the default stream. */
static inline qf_status gemm_rowwise(qf_ctx_t *ctx, const char *recipe, const qf_quantized *qa,
                                     const qf_quantized *qb, const qf_tensor *bias, qf_tensor *y) {
    const qf_operand a = {qa, QF_COPY_ROWWISE}, b = {qb, QF_COPY_ROWWISE};
    return qf_gemm(ctx, recipe, &a, &b, bias, y, NULL);
}

/* A device copy of n bytes of h (uninitialized when h is NULL). */
static inline void *dev_copy(const void *h, size_t n) {
    void *d = NULL;
    CK(cudaMalloc(&d, n ? n : 1));
    if (h)
        CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

static inline int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median of 10 timed runs after 3 warm-ups (the first compiles), CUDA events, in ms. */
#define QF_TIME_MEDIAN(ms, stmt)                                                              \
    do {                                                                                      \
        float t_[10];                                                                         \
        cudaEvent_t e0_, e1_;                                                                 \
        CK(cudaEventCreate(&e0_));                                                            \
        CK(cudaEventCreate(&e1_));                                                            \
        for (int i_ = 0; i_ < 13; i_++) {                                                     \
            CK(cudaEventRecord(e0_, 0));                                                      \
            stmt;                                                                             \
            CK(cudaEventRecord(e1_, 0));                                                      \
            CK(cudaEventSynchronize(e1_));                                                    \
            if (i_ >= 3)                                                                      \
                CK(cudaEventElapsedTime(&t_[i_ - 3], e0_, e1_));                              \
        }                                                                                     \
        qsort(t_, 10, sizeof t_[0], cmp_float);                                               \
        (ms) = t_[5];                                                                         \
        cudaEventDestroy(e0_);                                                                \
        cudaEventDestroy(e1_);                                                                \
    } while (0)

/* A bf16 TN plan for [S, S] x [S, S]^T with its heuristic's algorithm. */
typedef struct bf16_plan {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l;
    cublasLtMatmulHeuristicResult_t res;
} bf16_plan;

static inline void bf16_plan_make(bf16_plan *p, int64_t S, size_t wsz) {
    const cublasOperation_t ta = CUBLAS_OP_T;
    cublasLtMatmulPreference_t pref;
    int found = 0;
    LT_OK(cublasLtCreate(&p->lt));
    LT_OK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_OK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_OK(cublasLtMatrixLayoutCreate(&p->l, CUDA_R_16BF, (uint64_t)S, (uint64_t)S, S));
    LT_OK(cublasLtMatmulPreferenceCreate(&pref));
    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &wsz, sizeof wsz));
    LT_OK(cublasLtMatmulAlgoGetHeuristic(p->lt, p->op, p->l, p->l, p->l, p->l, pref, 1, &p->res,
                                         &found));
    cublasLtMatmulPreferenceDestroy(pref);
    assert_int_equal(found, 1);
}

/* bf16 cuBLASLt, TN, [S, S] x [S, S]^T on random data: the ceiling of the same run. */
static inline double bf16_lt_tflops(int64_t S) {
    const size_t bytes = (size_t)(S * S) * 2, wsz = 32u << 20;
    uint16_t *h = malloc(bytes);
    uint64_t s = 3;
    for (int64_t i = 0; i < S * S; i++)
        h[i] = qf_float_to_bf16(qf_test_rng_uniform(&s));
    void *A = dev_copy(h, bytes), *B = dev_copy(h, bytes), *C = dev_copy(NULL, bytes);
    void *ws = dev_copy(NULL, wsz);
    free(h);
    bf16_plan p;
    bf16_plan_make(&p, S, wsz);
    const float alpha = 1.0f, beta = 0.0f;
    float ms;
    QF_TIME_MEDIAN(ms, LT_OK(cublasLtMatmul(p.lt, p.op, &alpha, A, p.l, B, p.l, &beta, C, p.l, C,
                                            p.l, &p.res.algo, ws, wsz, 0)));
    cublasLtMatrixLayoutDestroy(p.l);
    cublasLtMatmulDescDestroy(p.op);
    cublasLtDestroy(p.lt);
    cudaFree(A), cudaFree(B), cudaFree(C), cudaFree(ws);
    return 2.0 * (double)S * S * S / (ms * 1e-3) / 1e12;
}

#endif /* QF_TEST_GPU_GEMM_H */
