/* gemm_lt.h: the per-tensor FP8 GEMM through cuBLASLt (gemm_lt.c), called by qf_gemm's
 * fp8_delayed path (op_gemm.c). The block-scaled cuBLASLt GEMMs are declared in ctx.h. */
#ifndef QF_GEMM_LT_H
#define QF_GEMM_LT_H

#include "ctx.h"

/* TN: y[M, N] bf16 = (a_scale_inv * b_scale_inv) A[M, K] B[N, K]^T (+ bias), numerics 2.1. qf_gemm
 * has checked the scale pointers (fp32 [1], 16-byte aligned); this checks the rest (arch >= 89, a
 * E4M3/E5M2 and b E4M3, K and N multiples of 16, shapes, alignment), naming a and b a_arg and
 * b_arg, then runs a cached plan. Errors: QF_ERR_INVALID_ARG, QF_ERR_UNSUPPORTED, QF_ERR_CUBLAS,
 * as qf_ctx_ready. */
typedef struct qf_gemm_lt_fp8_args {
    const qf_tensor *a;
    const float *a_scale_inv;
    const qf_tensor *b;
    const float *b_scale_inv;
    const char *a_arg, *b_arg; /* "a.rowwise_data" */
} qf_gemm_lt_fp8_args;

QF_INTERNAL qf_status qf_gemm_lt_fp8(qf_ctx_t *ctx, const char *op, const qf_gemm_lt_fp8_args *g,
                                     const qf_tensor *bias, qf_tensor *y, void *stream);

#endif /* QF_GEMM_LT_H */
