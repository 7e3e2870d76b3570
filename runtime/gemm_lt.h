/* gemm_lt.h: the FP8 GEMM through cuBLASLt (gemm_lt.c), per-tensor or 1x128 / 128x128 block
 * scales, called by qf_gemm's fp8_delayed, fp8_current and fp8_block paths (op_gemm.c), and the
 * bf16 GEMM of the staged MXFP8/NVFP4 path. The MXFP8/NVFP4 cuBLASLt GEMMs of sm_100 and later
 * are declared in ctx.h. */
#ifndef QF_GEMM_LT_H
#define QF_GEMM_LT_H

#include "ctx.h"

/* How an FP8 operand's scale_inv reads (numerics 2.1, 2.5). ORDER LT_SCALE */
typedef enum qf_lt_scale {
    QF_LT_SCALE_TENSOR = 0, /* fp32 [1] per tensor */
    QF_LT_SCALE_VEC128 = 1, /* fp32 per 1x128 block along K: [cdiv(K,128), roundup(rows,4)] */
    QF_LT_SCALE_BLK128 = 2  /* fp32 per 128x128 tile: [cdiv(rows,128), roundup(cdiv(K,128),4)] */
} qf_lt_scale;

/* TN: y[M, N] = A[M, K] B[N, K]^T (+ bias), each operand's FP8 values times its scale_inv (per
 * tensor, numerics 2.1, or per block, numerics 2.5: cuBLASLt's VEC128_32F / BLK128x128_32F,
 * split accumulation), y bf16 or fp32 (then, with accumulate, y += ...: beta 1). qf_gemm has
 * checked the scale buffers (fp32 [1], 16-byte aligned; or the block matrices) and the
 * accumulate rules; this checks the rest (arch >= 89, and >= 90 with block scales; a E4M3/E5M2
 * and b E4M3, K and N multiples of 16, shapes, alignment, y and bias against r's fake shapes),
 * naming a and b a_arg and b_arg, then runs a cached plan. Errors: QF_ERR_INVALID_ARG,
 * QF_ERR_UNSUPPORTED, QF_ERR_CUBLAS, as qf_ctx_ready. */
typedef struct qf_gemm_lt_fp8_args {
    const qf_recipe *r;
    const qf_tensor *a;
    const void *a_scale_inv; /* device fp32, as a_mode says */
    const qf_tensor *b;
    const void *b_scale_inv;
    const char *a_arg, *b_arg; /* "a.rowwise_data" */
    int accumulate;
    qf_lt_scale a_mode, b_mode;
} qf_gemm_lt_fp8_args;

QF_INTERNAL qf_status qf_gemm_lt_fp8(qf_ctx_t *ctx, const char *op, const qf_gemm_lt_fp8_args *g,
                                     const qf_tensor *bias, qf_tensor *y, void *stream);

/* The bf16 GEMM of the staged path (op_gemm.c): y[M, N] = alpha * A B^T (+ y when accumulate),
 * fp32 accumulation, y of y_dtype (bf16 or fp32), from the bf16 copies the module's
 * `<name>_dequant` entry wrote. a is [M, K]
 * row-major, or [K, M] when a_mn (MXFP8's columnwise copies are not transposed); b is [N, K], or
 * [K, N] when b_mn. alpha_beta: device fp32 [2] = {alpha, beta} (NVFP4's global scales), or NULL
 * for alpha 1 and beta = accumulate on the host. accumulate: y += alpha A B^T in fp32 before the
 * one rounding (y holds the broadcast bias; cuBLASLt's bias epilogue adds a bias to the rounded
 * sum, measured on an H200: up to 1 ulp off). All device pointers, owned by the caller, checked
 * by it. The plan is cached per shape; its algorithm is tuned on the first call (qf_plan_tune)
 * unless it accumulates (the tuning runs would add up in y). Errors: QF_ERR_CUBLAS,
 * QF_ERR_OUT_OF_MEMORY (host). */
typedef struct qf_gemm_lt_bf16_args {
    const void *a, *b;
    int a_mn, b_mn;
    const float *alpha_beta;
    int accumulate;
    void *y;
    qf_dtype y_dtype;
    int64_t M, N, K;
} qf_gemm_lt_bf16_args;

QF_INTERNAL qf_status qf_gemm_lt_bf16(qf_ctx_t *ctx, const qf_gemm_lt_bf16_args *g, void *stream);

#endif /* QF_GEMM_LT_H */
