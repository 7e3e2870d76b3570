/* ref_mx.h: scalar C references for MXFP8 (numerics 2.3): E8M0 scales, 1x32 / 32x1 / 32x32 block
 * quantization, compact and swizzled scale layouts, and the block-scaled GEMM. These are the oracle
 * of the MXFP8 kernels; fp32 arithmetic in the kernels' order (build with -ffp-contract=off). */
#ifndef QF_REF_MX_H
#define QF_REF_MX_H

#include <stddef.h>
#include <stdint.h>

#include "qf_formats.h"

/* ---- E8M0 (numerics 1, 2.3) */

/* The scale byte of a block with this amax (amax >= 0 or NaN), for element format fmt
 * (QF_DTYPE_E4M3: fp8_max 448, emax 8; QF_DTYPE_E5M2: 57344, emax 15):
 *   ceil:  E = ceil(log2(fl(amax * fl(1/fp8_max)))), clamped to [-127, 127];
 *   floor: E = floor(log2(amax)) - emax, clamped to [-127, 127];
 * byte = E + 127. amax 0 (or anything whose E falls at or below -127) gives 0x00; NaN gives 0xFF;
 * +inf clamps to 254. Examples (E4M3, ceil): 150 -> 126, 500 -> 128, 448 -> 127; (floor):
 * 448 -> 127, 500 -> 127 (its elements can then saturate), 1.0 -> 119.
 * Both are exact bit arithmetic on the fp32 value (ceil: on the product), never log2f. */
uint8_t qf_e8m0_from_amax_ref(float amax, qf_dtype fmt, qf_scale_rounding r);

/* 2^(byte - 127) as fp32 (2^-127 is a subnormal, exact); NaN for 0xFF. */
float qf_e8m0_to_float_ref(uint8_t b);

/* The rounding primitive alone: ceil(log2(v)) as an E8M0 byte for v > 0, with the clamp above
 * (1.0 -> 127, 1.125 -> 128, 5.0 -> 130, v <= 2^-127 -> 0). Exact for fp32 subnormals too: v in
 * (2^-127, 2^-126) -> 1, as TE's float_to_e8m0. v <= 0 -> 0x00, NaN -> 0xFF, +inf -> 254. */
uint8_t qf_e8m0_ceil_log2_ref(float v);

/* Element: q = rn_sat_fmt(x * 2^-E) (exact power-of-two multiply in fp32); a block whose scale byte
 * is 0xFF (NaN) yields NaN elements (0x7F). */
uint8_t qf_mx_quantize_elem_ref(float x, uint8_t scale_byte, qf_dtype fmt);

/* ---- layouts */

/* Padded scale matrix shapes: rowwise [roundup(M,128), roundup(cdiv(K,32),4)], columnwise
 * [roundup(cdiv(M,32),4), roundup(K,128)]. */
void qf_mx_scale_shape_row(int64_t M, int64_t K, int64_t *rows, int64_t *cols);
void qf_mx_scale_shape_col(int64_t M, int64_t K, int64_t *rows, int64_t *cols);

/* Byte offset of entry (i, j) of a padded [R, C] scale matrix (R % 128 == 0, C % 4 == 0) in the
 * swizzled layout: tile (i/128) * (C/4) + j/4 of 512 bytes, inside it
 * (i%32)*16 + ((i%128)/32)*4 + j%4. */
int64_t qf_mx_swizzle_offset_ref(int64_t i, int64_t j, int64_t C);

/* compact [R, C] -> swizzled (same byte count). */
void qf_mx_swizzle_ref(const uint8_t *compact, int64_t R, int64_t C, uint8_t *swizzled);

/* ---- norm + MXFP8 quantize */

/* Fused norm + MXFP8 quantize ref (numerics 2.3, 3). x [M, K] (xdt), gamma/beta [K] (gdt; NULL
 * when not used), mu_in/rsigma_in as in qf_norm_quantize_fp8_ref (the kernel's own statistics, or
 * NULL to compute them). y is qf_norm_apply_ref of each element (fp32). Outputs, each may be NULL:
 *   row [M, K] with scale_row [roundup(M,128), roundup(cdiv(K,32),4)]: 1x32 blocks along K;
 *   col [M, K] (not transposed) with scale_col [roundup(cdiv(M,32),4), roundup(K,128)]: 32x1
 *   blocks along M;
 * block_2d: one amax per 32x32 tile (weights), its byte written to every row and column entry the
 * tile covers. Partial blocks use the elements that exist. Scale matrices are written whole,
 * padding entries 0x00, in `layout` (columnwise swizzled as its transpose [roundup(K,128),
 * roundup(cdiv(M,32),4)]). mu_out/rsigma_out [M] may be NULL.
 * A NaN y makes exactly the blocks holding it 0xFF with NaN elements; note that a NaN in x with
 * statistics computed here makes its whole row's y NaN (layernorm/rmsnorm), given ones do not.
 * Memory: O(32 * K) floats of temporaries (bands of 32 rows), plus a scale-matrix copy when
 * swizzled. */
void qf_norm_quantize_mxfp8_ref(qf_norm norm, int zcg, qf_dtype xdt, const void *x, qf_dtype gdt,
                                const void *gamma, const void *beta, int64_t M, int64_t K,
                                float eps, const float *mu_in, const float *rsigma_in, qf_dtype fmt,
                                qf_scale_rounding rounding, int block_2d, qf_scale_layout layout,
                                uint8_t *row, uint8_t *scale_row, uint8_t *col, uint8_t *scale_col,
                                float *mu_out, float *rsigma_out);

/* ---- GEMM */

/* The values of one MXFP8 copy in double, in the orientation it is stored in: data [R, C] bytes
 * of fmt with COMPACT E8M0 scales (numerics 2.3). Rowwise (columnwise 0): 1x32 blocks along C,
 * scale [roundup(R,128), roundup(cdiv(C,32),4)]. Columnwise (1): 32x1 blocks along R, scale
 * [roundup(cdiv(R,32),4), roundup(C,128)] (that copy is not transposed). out [R, C]: each decoded
 * element times 2^(s - 127) of its block; a 0xFF scale makes its block NaN. Padding is never
 * read. */
void qf_mx_dequant_ref(qf_dtype fmt, int columnwise, const uint8_t *data, const uint8_t *scale,
                       int64_t R, int64_t C, double *out);

/* y[m, n] = sum_k deq(A)[m, k] * deq(B)[n, k] (+ bias[n]) in double, where deq multiplies each
 * decoded element by its 1x32 block's E8M0 scale. a [M, K] / b [N, K] bytes of fmt_a / fmt_b with
 * COMPACT rowwise scales (row stride roundup(cdiv(K,32),4)); padding entries are never read. A
 * 0xFF (NaN) scale makes its block, and so the outputs it reaches, NaN. bias may be NULL.
 * y double [M, N]. */
void qf_gemm_mxfp8_ref(qf_dtype fmt_a, const uint8_t *a, const uint8_t *a_scale, qf_dtype fmt_b,
                       const uint8_t *b, const uint8_t *b_scale, const double *bias, int64_t M,
                       int64_t N, int64_t K, double *y);

#endif /* QF_REF_MX_H */
