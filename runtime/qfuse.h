/* qfuse.h: public C API of libqfuse (fused norm + quantize kernels, FP8 GEMM, fake shapes).
 *
 * Conventions
 * - Tensors are row-major and contiguous; a tensor of any rank [..., K] is viewed as [M, K] with M
 *   the product of the leading dimensions (SPEC preamble).
 * - Every data pointer is a device pointer unless the comment says host. qfuse never takes
 *   ownership of caller memory.
 * - Functions return a qf_status; on failure qf_last_error() gives a thread-local message saying
 *   what failed, where, and what to do. Bad input launches nothing.
 * - `stream` (a cudaStream_t or CUstream) must be NULL, a special handle (cudaStreamLegacy,
 *   cudaStreamPerThread) or a stream of ctx's device primary context (the one qf_ctx_init binds);
 *   a stream of another CUDA context is QF_ERR_INVALID_ARG ("... belongs to another CUDA
 *   context"), checked after the arguments and before any launch.
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
/* Product of dims[0..ndim-1]; -1 when ndim is out of range, a dim is negative or the product
 * overflows int64_t. */
int64_t qf_tensor_numel(const qf_tensor *t);

/* ------------------------------------------------------------------ context */

typedef struct qf_ctx qf_ctx_t; /* opaque: device, arch, cuBLASLt handle, kernel table */

/* Creates a context on CUDA device `device` (primary context). Returns QF_ERR_NO_DEVICE when no
 * driver or GPU is present (callers and tests use that to skip GPU work). *out is owned by the
 * caller and released with qf_ctx_free. */
qf_status qf_ctx_init(qf_ctx_t **out, int device);
/* A dry-run context with no device, for compute capability `arch` (10*major+minor, 50..199): every
 * op validates its arguments exactly as on a GPU (recipe, shapes against the fake-shape
 * functions, dtypes, alignment, GEMM constraints of that arch) and then returns
 * QF_ERR_NO_DEVICE ("arguments are valid, but the context has no device") instead of launching;
 * a bad argument returns its own error first. Works on machines without a driver or GPU (build
 * machines, CI). *out is owned by the caller (qf_ctx_free). Errors: QF_ERR_INVALID_ARG (out NULL,
 * arch out of range), QF_ERR_OUT_OF_MEMORY. */
qf_status qf_ctx_init_host(qf_ctx_t **out, int arch);
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
 * Errors: QF_ERR_INVALID_ARG (names the argument: NULL ctx or tensor, ndim outside 1..8, a dim
 * < 1, x not bf16/fp16/fp32 or misaligned, gamma/beta of the wrong length or dtype, beta given
 * for rmsnorm, no output requested, a buffer whose dtype, size or 16-byte alignment differs from
 * the fake shape, NULL scale, a stream of another context), QF_ERR_NOT_FOUND (recipe),
 * QF_ERR_UNSUPPORTED (recipe not per-tensor FP8), QF_ERR_NVRTC, QF_ERR_CUDA. Asynchronous on
 * `stream` (a cudaStream_t; NULL = legacy default stream). */
qf_status qf_norm_quantize(qf_ctx_t *ctx, const char *recipe, qf_norm norm, int zero_centered_gamma,
                           const qf_tensor *x, const qf_tensor *gamma, const qf_tensor *beta,
                           float eps, const float *scale, qf_fp8_out *out, qf_tensor *mu,
                           qf_tensor *rsigma, void *stream);

/* Per-tensor FP8 quantization without a norm (weights, gradients), SPEC 2.1.
 *   x: [..., K] bf16/fp16/fp32; role QF_ROLE_WEIGHT or QF_ROLE_GRAD picks the recipe's format.
 * Errors as qf_norm_quantize; another role is QF_ERR_INVALID_ARG. */
qf_status qf_quantize(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                      const float *scale, qf_fp8_out *out, void *stream);

/* Delayed-scaling update for all n tensors of a step in one launch (SPEC 2.1).
 *   amax [n] fp32 (consumed: reset to 0), history [n, H] fp32 newest first, scale [n],
 *   scale_inv [n] fp32, fmt [n] uint8 (QF_DTYPE_E4M3 or QF_DTYPE_E5M2). All device pointers.
 * A tensor whose amax is 0 did not run: its history and scale stay unchanged.
 * Errors: QF_ERR_INVALID_ARG (n < 1, H outside 1..12288, a NULL pointer named, a stream of
 * another context), QF_ERR_NOT_FOUND, QF_ERR_UNSUPPORTED, QF_ERR_NVRTC, QF_ERR_CUDA. */
qf_status qf_fp8_scale_update(qf_ctx_t *ctx, const char *recipe, int n, int H, float *amax,
                              float *history, float *scale, float *scale_inv, const uint8_t *fmt,
                              void *stream);

/* FP8 GEMM through cuBLASLt: y[M, N] = (a_scale_inv * b_scale_inv) * A[M, K] @ B[N, K]^T (+ bias).
 *   a: [M, K] E4M3 (activation, rowwise), b: [N, K] E4M3 (weight, rowwise), both K-major ("TN").
 *   a_scale_inv, b_scale_inv: device fp32 [1]. bias: [N] bf16 or NULL. y: [M, N] bf16.
 * K and N must be multiples of 16 and every pointer, the two scale_inv included, 16-byte
 * aligned (cuBLASLt FP8 requirement).
 * Errors: QF_ERR_INVALID_ARG (a NULL pointer, wrong dtype, K or N not a multiple of 16, a
 * buffer of the wrong size or misaligned, a stream of another context), QF_ERR_UNSUPPORTED
 * (arch < 89), QF_ERR_CUBLAS, QF_ERR_CUDA. */
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
 * y is bf16 with the leading dims of x. Every stage (weight quantize when weight_changed, norm +
 * quantize, GEMM) is checked before the first one launches; a message names the stage and the
 * argument ("qf_layernorm_linear_fwd: GEMM of ll->xq.rowwise and ...: qf_gemm_fp8: bias has 31
 * elements; ..."). weight_changed is cleared once the weight is quantized. Errors as
 * qf_norm_quantize and qf_gemm_fp8; ll->weight [N, K'] with K' != K is QF_ERR_INVALID_ARG. */
qf_status qf_layernorm_linear_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  qf_ln_linear *ll, qf_tensor *y, void *stream);

/* ------------------------------------------------------------------ ops: mxfp8 (SPEC 2.3, 3) */

/* Outputs of an MXFP8 quantizer. Unused members have data == NULL. Scale matrices are padded and
 * their padding entries are written 0x00. */
typedef struct qf_mx_out {
    qf_tensor rowwise;              /* [M, K] E4M3/E5M2, 1x32 blocks along K */
    qf_tensor rowwise_scale_inv;    /* [roundup(M,128), roundup(cdiv(K,32),4)] E8M0 */
    qf_tensor columnwise;           /* [M, K], 32x1 blocks along M, NOT transposed */
    qf_tensor columnwise_scale_inv; /* [roundup(cdiv(M,32),4), roundup(K,128)] E8M0 */
    qf_scale_layout layout;         /* compact (the Hopper GEMM) or swizzled (cuBLASLt) */
} qf_mx_out;

/* Fused LayerNorm/RMSNorm + MXFP8 quantization in one pass over x (SPEC 2.3, 3).
 *   x [..., K] bf16/fp16/fp32 (any K >= 1; partial blocks are quantized, not rejected),
 *   gamma/beta [K] (x's dtype or fp32; beta layernorm only), mu [M] (layernorm) and rsigma [M]
 *   fp32. Rowwise and/or columnwise outputs as selected by non-NULL data in out.
 * Errors: QF_ERR_INVALID_ARG (names the argument), QF_ERR_NOT_FOUND, QF_ERR_UNSUPPORTED (recipe
 * not MXFP8), QF_ERR_NVRTC, QF_ERR_CUDA. Asynchronous on stream. */
qf_status qf_norm_quantize_mxfp8(qf_ctx_t *ctx, const char *recipe, qf_norm norm,
                                 int zero_centered_gamma, const qf_tensor *x,
                                 const qf_tensor *gamma, const qf_tensor *beta, float eps,
                                 qf_mx_out *out, qf_tensor *mu, qf_tensor *rsigma, void *stream);

/* MXFP8 quantization without a norm: QF_ROLE_WEIGHT (32x32 tiles when the recipe says
 * weight_2d) or QF_ROLE_GRAD (the recipe's grad format), SPEC 2.3. x [..., K]. */
qf_status qf_quantize_mxfp8(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                            qf_mx_out *out, void *stream);

/* Block-scaled MXFP8 GEMM: y[M, N] = A[M, K] B[N, K]^T (+ bias) in bf16 (SPEC 2.3), where every
 * element is multiplied by its 1x32 block's E8M0 scale; products are summed in fp32 and rounded
 * to bf16 once, after the bias. Neither operand is dequantized to memory.
 *   a:       [..., K] in the recipe's input format (rowwise output of qf_norm_quantize_mxfp8),
 *            viewed as [M, K]; b: [N, K] in its weight format. K-major ("TN"), K % 32 == 0.
 *   a_scale: [roundup(M,128), roundup(K/32,4)] E8M0; b_scale: [roundup(N,128), roundup(K/32,4)].
 *            Only the entries of real rows and blocks are read: the padding may hold anything.
 *   layout:  QF_SCALE_LAYOUT_COMPACT on sm_89..sm_99 (qfuse's generated kernel),
 *            QF_SCALE_LAYOUT_SWIZZLED on sm_100 and later (cuBLASLt VEC32_UE8M0; N % 16 == 0).
 *   bias:    [N] bf16, or NULL. y: [M, N] bf16 (the leading dims of a may be kept).
 * A NaN scale (0xFF) makes the outputs it reaches NaN. Does not own any buffer. Errors:
 * QF_ERR_INVALID_ARG (names the argument), QF_ERR_NOT_FOUND (recipe or kernel),
 * QF_ERR_UNSUPPORTED (arch < 89, recipe not MXFP8), QF_ERR_NVRTC, QF_ERR_CUDA, QF_ERR_CUBLAS.
 * Asynchronous on stream. */
qf_status qf_gemm_mxfp8(qf_ctx_t *ctx, const char *recipe, const qf_tensor *a,
                        const qf_tensor *a_scale, const qf_tensor *b, const qf_tensor *b_scale,
                        qf_scale_layout layout, const qf_tensor *bias, qf_tensor *y,
                        void *stream);

/* State and scratch of one LayerNorm + Linear under an MXFP8 recipe; all device memory owned by
 * the caller, shaped as the fake-shape functions say. Scales are compact on Hopper (the generated
 * GEMM) and swizzled on Blackwell (cuBLASLt VEC32_UE8M0): set xq.layout = wq.layout accordingly. */
typedef struct qf_ln_linear_mx {
    qf_norm norm;
    int zero_centered_gamma;
    float eps;
    qf_tensor gamma, beta;      /* [K]; beta unused (data NULL) for rmsnorm */
    qf_tensor weight;           /* [N, K] high-precision weight */
    qf_tensor bias;             /* [N] bf16, or data NULL */
    qf_mx_out xq;               /* rowwise [M, K] + scales */
    qf_mx_out wq;               /* rowwise [N, K] + scales (32x32 tiles if the recipe's weight_2d) */
    qf_tensor mu, rsigma;       /* [M] fp32 */
    int weight_changed;         /* nonzero: quantize the weight this call; 0: reuse wq */
} qf_ln_linear_mx;

/* y[..., N] = gemm(mxfp8(norm(x)), mxfp8(W)) + bias (SPEC 2.3, 3); x [..., K], y bf16.
 * Errors as qf_norm_quantize_mxfp8 and qf_gemm_mxfp8. */
qf_status qf_layernorm_linear_mxfp8_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                        qf_ln_linear_mx *ll, qf_tensor *y, void *stream);

/* ------------------------------------------------------------------ ops: nvfp4 (SPEC 2.4, 3) */

/* Outputs of an NVFP4 quantizer (SPEC 2.4). Unused members have data == NULL; a copy is produced
 * when its data is non-NULL, and then its scale matrix and amax must be given too. Shapes are
 * those of the fake-shape functions (dims of packed data in bytes). Scale padding is 0x00.
 *   rowwise              [M, K/2]  E2M1, two per byte (low nibble first), 1x16 blocks along K
 *   rowwise_scale_inv    [roundup(M,128), roundup(K/16,4)] E4M3 block scales
 *   columnwise           [K, M/2]  E2M1 of the transpose, 1x16 blocks along M (after the RHT
 *                        when the recipe applies it to this role)
 *   columnwise_scale_inv [roundup(K,128), roundup(M/16,4)] E4M3
 *   amax_rowwise, amax_columnwise  [1] fp32: the global amax of each copy (written by the op;
 *                        S_enc = 2688 / amax is derived from it, and the GEMM's alpha too). */
typedef struct qf_nv_out {
    qf_tensor rowwise;
    qf_tensor rowwise_scale_inv;
    qf_tensor columnwise;
    qf_tensor columnwise_scale_inv;
    qf_tensor amax_rowwise;
    qf_tensor amax_columnwise;
    qf_scale_layout layout; /* compact (the Hopper GEMM) or swizzled (cuBLASLt VEC16_UE4M3) */
} qf_nv_out;

/* Stochastic-rounding stream of one quantization (SPEC 2.4): element i of a copy is rounded with
 * word i % 4 of Philox4x32-10(counter {i/4, offset}, key seed). A training job advances offset
 * every step. Ignored where the recipe does not round stochastically. */
typedef struct qf_nv_rng {
    uint64_t seed;
    uint64_t offset;
} qf_nv_rng;

/* Fused LayerNorm/RMSNorm + NVFP4 quantization (SPEC 2.4, 3), the role QF_ROLE_INPUT.
 *   x [..., K] bf16/fp16/fp32 viewed as [M, K]; M and K multiples of 16; 16-byte aligned.
 *   gamma/beta [K] (x's dtype or fp32; beta layernorm only; 16-byte aligned); mu [M]
 *   (layernorm), rsigma [M] fp32 (written by the first launch, read by the second).
 * x is read twice (statistics and amax, then normalize and quantize) and never written back.
 * The op zeroes the scale matrices (padding stays 0x00) and the amax slots of the produced
 * copies, then launches two kernels on stream. Does not own any buffer.
 * The columnwise copy gets the recipe's RHT over groups of 16 tokens and its own amax.
 * Errors: QF_ERR_INVALID_ARG (names the argument), QF_ERR_NOT_FOUND, QF_ERR_UNSUPPORTED (recipe
 * not NVFP4), QF_ERR_NVRTC, QF_ERR_CUDA. Asynchronous on stream. */
qf_status qf_norm_quantize_nvfp4(qf_ctx_t *ctx, const char *recipe, qf_norm norm,
                                 int zero_centered_gamma, const qf_tensor *x,
                                 const qf_tensor *gamma, const qf_tensor *beta, float eps,
                                 qf_nv_out *out, qf_tensor *mu, qf_tensor *rsigma, void *stream);

/* NVFP4 quantization without a norm (SPEC 2.4): QF_ROLE_WEIGHT (16x16 tiles when the recipe says
 * weight_2d) or QF_ROLE_GRAD (RHT on the columnwise copy and stochastic rounding as the recipe
 * says; rng may be NULL only when the recipe does not round stochastically). x [..., K] viewed
 * as [M, K], M and K multiples of 16, 16-byte aligned. Errors as qf_norm_quantize_nvfp4; another
 * role is QF_ERR_INVALID_ARG. */
qf_status qf_quantize_nvfp4(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                            const qf_nv_rng *rng, qf_nv_out *out, void *stream);

/* Block-scaled NVFP4 GEMM: y[M, N] = alpha * A[M, K] B[N, K]^T (+ bias) in bf16 (SPEC 2.4), every
 * E2M1 element multiplied by its 1x16 block's E4M3 scale, products summed in fp32,
 * alpha = fl(fl(amax_a * amax_b) * fl(1/(6*6*448*448))) applied to the accumulator, then the
 * bias, then one rounding to bf16. Neither operand is dequantized to memory.
 *   a: [M, K/2] packed E2M1 (rowwise output of qf_norm_quantize_nvfp4; dtype QF_DTYPE_E2M1,
 *      dims in bytes as the fake shapes give them), b: [N, K/2] (rowwise output of
 *      qf_quantize_nvfp4 for the weight); K % 32 == 0 ("TN", K-major).
 *   a_scale: [roundup(M,128), roundup(K/16,4)] E4M3, b_scale: [roundup(N,128), roundup(K/16,4)].
 *            Only the entries of real rows and blocks are read: the padding may hold anything.
 *   amax_a, amax_b: [1] fp32 device (the amax outputs of the quantizers), read on the device
 *            when the GEMM runs (never copied to the host).
 *   layout: QF_SCALE_LAYOUT_COMPACT on sm_89..sm_99 (qfuse's generated kernel),
 *           QF_SCALE_LAYOUT_SWIZZLED on sm_100 and later (cuBLASLt VEC16_UE4M3; N % 16 == 0).
 *   bias: [N] bf16 or NULL; y: [M, N] bf16.
 * A NaN scale byte (0x7F/0xFF) makes the outputs it reaches NaN. Does not own any buffer.
 * Errors: QF_ERR_INVALID_ARG (names the argument: NULL tensor or amax, wrong dtype, size or
 * alignment, K not a multiple of 32, a and b with different K, the wrong layout for the arch),
 * QF_ERR_NOT_FOUND, QF_ERR_UNSUPPORTED (arch < 89, recipe not NVFP4), QF_ERR_NVRTC, QF_ERR_CUDA,
 * QF_ERR_CUBLAS. Asynchronous on stream. */
qf_status qf_gemm_nvfp4(qf_ctx_t *ctx, const char *recipe, const qf_tensor *a,
                        const qf_tensor *a_scale, const qf_tensor *amax_a, const qf_tensor *b,
                        const qf_tensor *b_scale, const qf_tensor *amax_b, qf_scale_layout layout,
                        const qf_tensor *bias, qf_tensor *y, void *stream);

/* State and scratch of one LayerNorm + Linear under an NVFP4 recipe; device memory owned by the
 * caller, shaped as the fake-shape functions say (xq and wq rowwise copies, their scales and
 * amaxes). */
typedef struct qf_ln_linear_nv {
    qf_norm norm;
    int zero_centered_gamma;
    float eps;
    qf_tensor gamma, beta;      /* [K]; beta unused (data NULL) for rmsnorm */
    qf_tensor weight;           /* [N, K] high-precision weight */
    qf_tensor bias;             /* [N] bf16, or data NULL */
    qf_nv_out xq;               /* rowwise [M, K/2] + scales + amax_rowwise */
    qf_nv_out wq;               /* rowwise [N, K/2] + scales + amax_rowwise (16x16 tiles if weight_2d) */
    qf_tensor mu, rsigma;       /* [M] fp32 */
    int weight_changed;         /* nonzero: quantize the weight this call; 0: reuse wq */
} qf_ln_linear_nv;

/* y[..., N] = gemm(nvfp4(norm(x)), nvfp4(W)) + bias (SPEC 2.4, 3); x [..., K], y bf16.
 * Errors as qf_norm_quantize_nvfp4, qf_quantize_nvfp4 and qf_gemm_nvfp4. */
qf_status qf_layernorm_linear_nvfp4_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                        qf_ln_linear_nv *ll, qf_tensor *y, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* QFUSE_H */
