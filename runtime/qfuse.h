/* qfuse.h: public C API of libqfuse (fused norm + quantize kernels, FP8 GEMM, fake shapes).
 *
 * Conventions
 * - Tensors are row-major and contiguous; a tensor of any rank [..., K] is viewed as [M, K] with M
 *   the product of the leading dimensions (SPEC preamble).
 * - Every data pointer is a device pointer unless the comment says host. qfuse never takes
 *   ownership of caller memory.
 * - Functions return a qf_status; on failure qf_last_error() gives a thread-local message saying
 *   what failed, where, and what to do. Bad input launches nothing.
 * - Numerics follow ../SPEC.md; section numbers are cited per function.
 */
#ifndef QFUSE_H
#define QFUSE_H

#include <stddef.h>
#include <stdint.h>

#include "qf_formats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ status */

typedef enum qf_status {
    QF_OK = 0,
    QF_ERR_INVALID_ARG = 1,  /* null pointer, wrong shape/dtype, misaligned or too-small buffer */
    QF_ERR_UNSUPPORTED = 2,  /* valid request this build or GPU cannot run */
    QF_ERR_NO_DEVICE = 3,    /* no CUDA driver or no GPU */
    QF_ERR_CUDA = 4,         /* CUDA driver/runtime call failed */
    QF_ERR_NVRTC = 5,        /* kernel compile failed; message holds the NVRTC log */
    QF_ERR_CUBLAS = 6,       /* cuBLASLt call failed or found no algorithm */
    QF_ERR_CACHE = 7,        /* disk-cache I/O failure that could not be degraded */
    QF_ERR_OUT_OF_MEMORY = 8,
    QF_ERR_NOT_FOUND = 9,    /* unknown recipe or kernel variant */
    QF_ERR_INTERNAL = 10,
    QF_STATUS_COUNT
} qf_status;

/* Name of a status ("QF_ERR_INVALID_ARG"); never null. */
const char *qf_status_name(qf_status s);

/* Message of the last failure on this thread; "" when none. Owned by qfuse, valid until the next
 * qfuse call on this thread. */
const char *qf_last_error(void);

/* ------------------------------------------------------------------ tensors and fake shapes */

#define QF_MAX_DIMS 8

/* A view of caller memory. Does not own data. ndim in [1, QF_MAX_DIMS]. */
typedef struct qf_tensor {
    void *data;
    qf_dtype dtype;
    int ndim;
    int64_t dims[QF_MAX_DIMS];
} qf_tensor;

/* One output as described by a fake-shape function (SPEC 4). */
typedef struct qf_shape {
    const char *name;   /* "rowwise_data", "columnwise_data", "amax", "scale_inv", "mu", ... */
    qf_dtype dtype;
    int ndim;
    int64_t dims[4];
    uint64_t bytes;     /* exact bytes written */
} qf_shape;

/* Bytes of one element of dtype; 0 for E2M1 (packed; use qf_dtype_bytes_for). */
size_t qf_dtype_size(qf_dtype dt);
/* Name of a dtype ("bf16", "e4m3", ...); "?" when out of range. */
const char *qf_dtype_name(qf_dtype dt);
/* Product of dims[0..ndim-1]; -1 when ndim is out of range or a dim is negative. */
int64_t qf_tensor_numel(const qf_tensor *t);

/* ------------------------------------------------------------------ context */

typedef struct qf_ctx qf_ctx_t; /* opaque: device, arch, cuBLASLt handle, kernel table */

/* Creates a context on CUDA device `device` (primary context). Returns QF_ERR_NO_DEVICE when no
 * driver or GPU is present (callers and tests use that to skip GPU work). *out is owned by the
 * caller and released with qf_ctx_free. */
qf_status qf_ctx_init(qf_ctx_t **out, int device);
void qf_ctx_free(qf_ctx_t *ctx);
/* Compute capability as 10*major+minor (90 for H100/H200). */
int qf_ctx_arch(const qf_ctx_t *ctx);

/* How the last kernel lookup of an op was served. */
typedef enum qf_kernel_source {
    QF_KSRC_COMPILED = 0,  /* NVRTC compile (and stored to the disk cache) */
    QF_KSRC_MEMORY = 1,    /* in-memory table */
    QF_KSRC_DISK = 2,      /* disk cache */
    QF_KSRC_COUNT
} qf_kernel_source;

typedef struct qf_kernel_info {
    char name[96];          /* variant name, also the CUDA entry symbol */
    char key[33];           /* fusion key, 32 hex digits (SPEC 5) */
    qf_kernel_source source;
    double ms;              /* wall time of the lookup (compile, disk load or memory hit) */
} qf_kernel_info;

/* Info about the most recent kernel lookup made by ctx on this thread (for reporting). */
const qf_kernel_info *qf_ctx_last_kernel(const qf_ctx_t *ctx);

/* ------------------------------------------------------------------ ops: fp8_delayed (SPEC 2.1, 3) */

/* Outputs of a per-tensor FP8 quantizer. Unused members have data == NULL. */
typedef struct qf_fp8_out {
    qf_tensor rowwise;     /* [M, K] E4M3 or E5M2 (the recipe's format for the role) */
    qf_tensor columnwise;  /* [K, M] same dtype, transposed copy for TN wgrad; optional */
    qf_tensor amax;        /* [1] fp32, max-merged atomically (pre-scale |y|); caller zeroes it */
    qf_tensor scale_inv;   /* [1] fp32, written as 1/scale */
} qf_fp8_out;

/* Fused LayerNorm/RMSNorm + per-tensor FP8 quantization (SPEC 2.1, 3).
 *   x:     [..., K] bf16, fp16 or fp32 (M = product of leading dims, M >= 1, K >= 1)
 *   gamma: [K] x's dtype or fp32; beta: [K] same dtype as gamma (layernorm; NULL for rmsnorm)
 *   scale: device fp32 [1], the quantization scale (from qf_fp8_scale_update)
 *   out:   rowwise and/or columnwise, amax, scale_inv as described by the recipe's fake shapes
 *   mu:    [M] fp32 (layernorm only, else NULL); rsigma: [M] fp32
 * y = fmaf((x - mu) * rsigma, g, b) with g = gamma (+1 when zero_centered_gamma), q = rn_sat(y*scale).
 * Errors: QF_ERR_INVALID_ARG (names the argument), QF_ERR_NOT_FOUND (recipe), QF_ERR_NVRTC,
 * QF_ERR_CUDA. Asynchronous on `stream` (a cudaStream_t; NULL = legacy default stream). */
qf_status qf_norm_quantize(qf_ctx_t *ctx, const char *recipe, qf_norm norm, int zero_centered_gamma,
                           const qf_tensor *x, const qf_tensor *gamma, const qf_tensor *beta,
                           float eps, const float *scale, qf_fp8_out *out, qf_tensor *mu,
                           qf_tensor *rsigma, void *stream);

/* Per-tensor FP8 quantization without a norm (weights, gradients), SPEC 2.1.
 *   x: [..., K] bf16/fp16/fp32; role QF_ROLE_WEIGHT or QF_ROLE_GRAD picks the recipe's format. */
qf_status qf_quantize(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                      const float *scale, qf_fp8_out *out, void *stream);

/* Delayed-scaling update for all n tensors of a step in one launch (SPEC 2.1).
 *   amax [n] fp32 (consumed: reset to 0), history [n, H] fp32 newest first, scale [n],
 *   scale_inv [n] fp32, fmt [n] uint8 (QF_DTYPE_E4M3 or QF_DTYPE_E5M2). All device pointers.
 * A tensor whose amax is 0 did not run: its history and scale stay unchanged. */
qf_status qf_fp8_scale_update(qf_ctx_t *ctx, const char *recipe, int n, int H, float *amax,
                              float *history, float *scale, float *scale_inv, const uint8_t *fmt,
                              void *stream);

/* FP8 GEMM through cuBLASLt: y[M, N] = (a_scale_inv * b_scale_inv) * A[M, K] @ B[N, K]^T (+ bias).
 *   a: [M, K] E4M3 (activation, rowwise), b: [N, K] E4M3 (weight, rowwise), both K-major ("TN").
 *   a_scale_inv, b_scale_inv: device fp32 [1]. bias: [N] bf16 or NULL. y: [M, N] bf16.
 * K and N must be multiples of 16 and pointers 16-byte aligned (cuBLASLt FP8 requirement).
 * Errors: QF_ERR_INVALID_ARG, QF_ERR_UNSUPPORTED (arch < 89), QF_ERR_CUBLAS. */
qf_status qf_gemm_fp8(qf_ctx_t *ctx, const qf_tensor *a, const float *a_scale_inv,
                      const qf_tensor *b, const float *b_scale_inv, const qf_tensor *bias,
                      qf_tensor *y, void *stream);

/* State and scratch of one LayerNorm + Linear under a per-tensor FP8 recipe. All device memory,
 * owned by the caller; shapes are those of the fake-shape functions. */
typedef struct qf_ln_linear {
    qf_norm norm;               /* QF_NORM_LAYERNORM or QF_NORM_RMSNORM */
    int zero_centered_gamma;
    float eps;
    qf_tensor gamma, beta;      /* [K]; beta unused (data NULL) for rmsnorm */
    qf_tensor weight;           /* [N, K] bf16/fp16/fp32 high-precision weight */
    qf_tensor bias;             /* [N] bf16, or data NULL */
    const float *x_scale;       /* [1] */
    const float *w_scale;       /* [1] */
    qf_fp8_out xq;              /* rowwise [M, K] (+ columnwise [K, M] when data != NULL) */
    qf_fp8_out wq;              /* rowwise [N, K] */
    qf_tensor mu, rsigma;       /* [M] fp32 */
    int weight_changed;         /* nonzero: quantize weight this call; 0: reuse wq */
} qf_ln_linear;

/* y[..., N] = gemm(quant(norm(x)), quant(W)) + bias with x [..., K] (SPEC 2.1, 3).
 * y is bf16 with the leading dims of x. Errors as qf_norm_quantize and qf_gemm_fp8. */
qf_status qf_layernorm_linear_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  qf_ln_linear *ll, qf_tensor *y, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* QFUSE_H */
