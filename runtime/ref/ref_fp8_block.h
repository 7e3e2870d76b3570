/* ref_fp8_block.h: scalar C references for the fp8_block family (numerics 2.5, TE
 * Float8BlockScaling, DeepSeek-V3 style): per-block scales, fused norm + quantize with 1x128 /
 * 128x1 blocks or 128x128 tiles, the GEMM_READY scale layouts cuBLASLt reads, dequantization and
 * the block-scaled GEMM. Built on ref.h (norm arithmetic, E4M3 conversion) and ref_fp8_current.h
 * (TE's compute_scale_from_amax); the oracle of the fp8_block kernels. fp32 arithmetic in the
 * kernels' order (build with -ffp-contract=off). */
#ifndef QF_REF_FP8_BLOCK_H
#define QF_REF_FP8_BLOCK_H

#include <stdint.h>

#include "qf_formats.h"
#include "qfuse.h"
#include "ref.h"

/* QF_FP8_BLOCK (qf_formats.h): the block length, 1x128, 128x1, 128x128 */

/* ---- scale (numerics 2.5) */

/* The scale of one block whose amax is `amax` (max |v| over the block: >= 0, or NaN), for input
 * dtype xdt (bf16, fp16 or fp32: x's dtype), as fp32:
 *   a = amax_epsilon if amax < amax_epsilon, else amax (a NaN amax stays NaN);
 *   a == 0, +inf or NaN -> 1;
 *   else 448 / a correctly rounded; an infinite quotient becomes the largest finite value of
 *   xdt (bf16 0x7F7F = 3.3895314e38, fp16 65504, fp32 FLT_MAX), as TE's compute_scale_from_types;
 *   power_2_scales (nonzero): then bits & 0xFF800000 (448/3 -> 128, 3.3895e38 -> 2^127).
 * The element format is E4M3 for every role. Asserts xdt. */
float qf_fp8_block_scale_ref(float amax, float amax_epsilon, int power_2_scales, qf_dtype xdt);

/* ---- layouts (TE GEMM_READY; what cuBLASLt's VEC128_32F and BLK128x128_32F read) */

/* The fp32 scale_inv matrix [*rows, *cols] of one stored copy [R, C] (rowwise: the data [M, K];
 * columnwise: the transposed data [K, M]): every copy is quantized along its own rows, so one
 * rule serves both.
 *   block_2d 0 (1x128 blocks along C, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F):
 *     [cdiv(C,128), roundup(R,4)], entry [c/128][r] (R-major);
 *   block_2d 1 (128x128 tiles, BLK128x128_32F): [cdiv(R,128), roundup(cdiv(C,128),4)], entry
 *     [r/128][c/128].
 * So a rowwise copy of x [M, K] has [cdiv(K,128), roundup(M,4)] (1D) or
 * [cdiv(M,128), roundup(cdiv(K,128),4)] (2D), its columnwise copy [cdiv(M,128), roundup(K,4)]
 * or [cdiv(K,128), roundup(cdiv(M,128),4)]: TE's Float8BlockQuantizer::get_scale_shape. */
void qf_fp8_block_scale_shape(int block_2d, int64_t R, int64_t C, int64_t *rows, int64_t *cols);

/* Index in that matrix of the scale_inv of element (r, c) of the stored copy [R, C]. */
int64_t qf_fp8_block_scale_index(int block_2d, int64_t R, int64_t C, int64_t r, int64_t c);

/* ---- norm + quantize (numerics 2.5, 3) */

/* Recipe options that reach the quantizer (numerics 2.5) and the role's geometry:
 * amax_epsilon >= 0 (recipe default 0), power_2_scales 0 or 1 (default 1), block_2d 1 for the
 * weight role (128x128 tiles, one scale shared by both copies), 0 for input and grad (1x128
 * rowwise, 128x1 columnwise). */
typedef struct qf_fp8_block_opts {
    float amax_epsilon;
    int power_2_scales;
    int block_2d;
} qf_fp8_block_opts;

/* Host buffers the caller owns; every pointer may be NULL (that output is not produced). Scale
 * matrices are written whole: each real entry scale_inv = fl(1/scale) of its block, padding
 * entries 1.0f. */
typedef struct qf_fp8_block_out {
    uint8_t *row;         /* [M, K] E4M3 */
    float *row_scale_inv; /* qf_fp8_block_scale_shape(block_2d, M, K) */
    uint8_t *col;         /* [K, M] E4M3, the transpose */
    float *col_scale_inv; /* qf_fp8_block_scale_shape(block_2d, K, M) */
    float *mu;            /* [M] the mu used (0 for rmsnorm); ignored without a norm */
    float *rsigma;        /* [M] the rsigma used; ignored without a norm */
} qf_fp8_block_out;

/* Fused norm + FP8 block quantize (numerics 2.5, 3): y = qf_norm_apply_ref of each element
 * (src as in qf_norm_src, ref.h; y = x for QF_NORM_NONE), then per block (1x128 along K and
 * 128x1 along M, or 128x128 tiles; partial blocks use the elements that exist) amax = max |y|
 * (NaN propagates), scale = qf_fp8_block_scale_ref(amax, opts..., src->xdt),
 * q = rn_sat_E4M3(fl(y * scale)). The columnwise copy equals the rowwise quantization of y^T
 * (1D), or shares each tile's scale with the rowwise copy (2D: col = row^T byte for byte).
 * A block holding a NaN gets scale 1 (scale_inv 1) and its NaN elements 0x7F; an all-zero block
 * scale 1 and zero data. y is rounded once, from fp32 (TE's norm writes bf16 first).
 * Errors: QF_ERR_INVALID_ARG (message via qf_last_error; nothing written) as
 * qf_ref_check_norm_src for src, when opts or out is NULL, or amax_epsilon is negative or NaN.
 * Memory: O(128 * K) floats of temporaries (bands of 128 rows). */
qf_status qf_norm_quantize_fp8_block_ref(const qf_norm_src *src, const qf_fp8_block_opts *opts,
                                         const qf_fp8_block_out *out);

/* Plain quantize (no norm) of x [M, K] of xdt (bf16, fp16 or fp32): as
 * qf_norm_quantize_fp8_block_ref with y = x; out->mu and out->rsigma are ignored. Errors: as
 * qf_norm_quantize_fp8_block_ref. */
qf_status qf_quantize_fp8_block_ref(qf_dtype xdt, const void *x, int64_t M, int64_t K,
                                    const qf_fp8_block_opts *opts, const qf_fp8_block_out *out);

/* ---- dequantize and GEMM */

/* The values of one stored copy in double: data [R, C] E4M3 with its scale_inv matrix
 * (qf_fp8_block_scale_shape(block_2d, R, C)); out [R, C] = each decoded element times the
 * scale_inv of its block. Padding entries are never read. */
void qf_fp8_block_dequant_ref(int block_2d, const uint8_t *data, const float *scale_inv, int64_t R,
                              int64_t C, double *out);

/* y[m, n] = sum_k deq(A)[m, k] * deq(B)[n, k] (+ bias[n]) in double: the TN GEMM cuBLASLt runs on
 * these layouts, a [M, K] with scale a_scale (a_2d: 128x128 tiles, else 1x128 blocks), b [N, K]
 * likewise (fprop: X 1x128 x W 128x128; dgrad: dY 1x128 x W^T 128x128; wgrad: X^T and dY^T,
 * both 1x128 along tokens). bias may be NULL. y double [M, N]. */
void qf_gemm_fp8_block_ref(const uint8_t *a, const float *a_scale, int a_2d, const uint8_t *b,
                           const float *b_scale, int b_2d, const double *bias, int64_t M, int64_t N,
                           int64_t K, double *y);

#endif /* QF_REF_FP8_BLOCK_H */
