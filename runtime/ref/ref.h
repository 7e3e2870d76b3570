/* ref.h: scalar C references (*_ref), the oracle of every kernel (numerics 1, 2.1, 3).
 *
 * Plain C, fp32 arithmetic in the exact order the kernels use (build with -ffp-contract=off so the
 * compiler fuses nothing), except where a function says it works in double. */
#ifndef QF_REF_H
#define QF_REF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qf_formats.h"

/* ---- memory */

/* malloc that never returns NULL (n == 0 included; aborts in QF_ASSERT): the references have no
 * memory error path. The caller frees. */
void *qf_ref_alloc(size_t n);

/* ---- element conversions (numerics 1) */

/* The bits of an fp32 value and the fp32 value of 32 bits (memcpy: no aliasing, no conversion). */
static inline uint32_t qf_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float qf_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp32 -> E4M3, round to nearest even, saturating to +-448 (inf too); NaN -> 0x7F whatever its
 * sign (0xFF is never produced: the hardware cvt.rn.satfinite gives 0x7F for any NaN). Subnormals
 * down to 2^-9 are exact; zero and underflow keep the sign (-0.0 -> 0x80). */
uint8_t qf_e4m3_from_float_ref(float v);
float qf_e4m3_to_float_ref(uint8_t b);
/* fp32 -> E5M2, round to nearest even, saturating to +-57344 (inf too); NaN -> 0x7F (sign not
 * kept). Subnormals down to 2^-16 are exact. */
uint8_t qf_e5m2_from_float_ref(float v);
float qf_e5m2_to_float_ref(uint8_t b);
/* fmt is QF_DTYPE_E4M3 or QF_DTYPE_E5M2. */
uint8_t qf_fp8_from_float_ref(qf_dtype fmt, float v);
float qf_fp8_to_float_ref(qf_dtype fmt, uint8_t b);
float qf_fp8_max(qf_dtype fmt);

float qf_bf16_to_float(uint16_t h);
uint16_t qf_float_to_bf16(float f); /* round to nearest even, NaN stays NaN */
float qf_fp16_to_float(uint16_t h);
uint16_t qf_float_to_fp16(float f); /* round to nearest even, overflow -> inf */

/* Element i of a bf16/fp16/fp32 array, as fp32. */
float qf_load_as_float(const void *p, qf_dtype dt, int64_t i);

/* max(m, |v|) that keeps NaN: a NaN anywhere makes the result NaN (numerics 2.3 spirit). */
float qf_amax_merge(float m, float v);

/* ---- norm + per-tensor FP8 quantize (numerics 2.1, 3) */

/* Row statistics in double, rounded to fp32: layernorm mu and rsigma = 1/sqrt(var + eps);
 * rmsnorm rsigma = 1/sqrt(mean(x^2) + eps) and mu = 0; none: mu = 0, rsigma = 1.
 * x: [M, K] of dtype xdt; mu, rsigma: [M] outputs. */
void qf_norm_stats_ref(qf_norm norm, qf_dtype xdt, const void *x, int64_t M, int64_t K, float eps,
                       float *mu, float *rsigma);

/* The normalized value the kernels quantize, for one element given its row's mu/rsigma:
 * layernorm y = fmaf((x - mu) * rsigma, g, b); rmsnorm y = (x * rsigma) * g; none: y = x;
 * g = gamma, or fl(gamma + 1) in fp32 when zcg. gamma/beta are already loaded as fp32. */
float qf_norm_apply_ref(qf_norm norm, int zcg, float x, float mu, float rsigma, float gamma,
                        float beta);

/* The input of a fused norm + quantize reference (per-tensor current scaling, NVFP4): x [M, K]
 * of xdt (bf16, fp16 or fp32); gamma/beta [K] of gdt (gamma NULL for none, beta NULL unless
 * layernorm); zcg: zero_centered_gamma; eps inside the square root. mu_in / rsigma_in [M]: the
 * statistics to normalize with (a GPU test passes the kernel's own), or NULL to compute them with
 * qf_norm_stats_ref. y = qf_norm_apply_ref of each element (fp32) is what gets quantized. The
 * reference only reads these buffers and does not own them. */
typedef struct qf_norm_src {
    qf_norm norm;
    int zcg;
    qf_dtype xdt, gdt;
    const void *x, *gamma, *beta;
    int64_t M, K;
    float eps;
    const float *mu_in, *rsigma_in;
} qf_norm_src;

/* The qf_norm_src of separate arguments; asserts (QF_ASSERT) K >= 1, M >= 0, and gamma (and beta
 * for layernorm) where the norm reads them. */
qf_norm_src qf_norm_src_make(qf_norm norm, int zcg, qf_dtype xdt, const void *x, qf_dtype gdt,
                             const void *gamma, const void *beta, int64_t M, int64_t K, float eps,
                             const float *mu_in, const float *rsigma_in);

/* Row r of s: its statistics, mu_in/rsigma_in where given, else qf_norm_stats_ref's (mu 0,
 * rsigma 1 for QF_NORM_NONE); also stored in mu_out[r] / rsigma_out[r] where those are non-NULL. */
void qf_norm_row_stats_ref(const qf_norm_src *s, int64_t r, float *mu, float *rsigma, float *mu_out,
                           float *rsigma_out);

/* y [K] of row r of s: qf_norm_apply_ref of each element with the row's mu and rsigma (gamma 1
 * and beta 0 where the norm has none). */
void qf_norm_row_apply_ref(const qf_norm_src *s, int64_t r, float mu, float rsigma, float *y);

/* y [h, K]: rows r0 .. r0 + h - 1 of s through qf_norm_row_stats_ref (statistics stored in
 * mu_out / rsigma_out where non-NULL) and qf_norm_row_apply_ref: a band of a block quantizer. */
void qf_norm_band_ref(const qf_norm_src *s, int64_t r0, int64_t h, float *y, float *mu_out,
                      float *rsigma_out);

/* The NaN-propagating amax (qf_amax_merge) of rows [i0, i0 + ih) x cols [k0, k0 + kw) of y,
 * row-major with K columns: one scale block of a block quantizer. */
float qf_rect_amax_ref(const float *y, int64_t K, int64_t i0, int64_t ih, int64_t k0, int64_t kw);

/* Fused norm + FP8 quantize reference. x [M, K] (xdt), gamma/beta [K] (gdt; NULL for none/rmsnorm
 * beta). mu/rsigma: if mu_in/rsigma_in are non-NULL they are used (the kernel's own statistics);
 * otherwise qf_norm_stats_ref's values are. q = rn_sat(fl(y * scale)), fmt E4M3 or E5M2.
 * Outputs (each may be NULL): row [M, K], col [K, M] (transposed), mu_out/rsigma_out [M];
 * *amax = max |y| over all elements (pre-scale, NaN propagates). */
void qf_norm_quantize_fp8_ref(qf_norm norm, int zcg, qf_dtype xdt, const void *x, qf_dtype gdt,
                              const void *gamma, const void *beta, int64_t M, int64_t K, float eps,
                              const float *mu_in, const float *rsigma_in, float scale, qf_dtype fmt,
                              uint8_t *row, uint8_t *col, float *mu_out, float *rsigma_out,
                              float *amax);

/* Delayed-scaling update (numerics 2.1), same contract as the kernel: for each tensor t < n with
 * a = amax[t] != 0: history[t, :] rolls (newest at index 0), then scale/scale_inv are recomputed;
 * amax[t] is reset to 0. margin and ac come from the recipe. */
void qf_fp8_scale_update_ref(int n, int H, float *amax, float *history, float *scale,
                             float *scale_inv, const uint8_t *fmt, float margin,
                             qf_amax_compute ac);

/* y[m, n] = alpha * sum_k a[m, k] * b[n, k] (+ bias[n]) in double, the sum in k order: the GEMM
 * of dequantized operands, both K-major (a [M, K], b [N, K], row-major); bias may be NULL. y
 * double [M, N]. The oracle of every GEMM and the fp64 check of fprop, dgrad and wgrad
 * (numerics 6, 7), given the copies' values (qf_mx_dequant_ref, qf_nvfp4_dequant_ref). */
void qf_gemm_f64_ref(const double *a, const double *b, double alpha, const double *bias,
                     int64_t M, int64_t N, int64_t K, double *y);

/* out [C, R] = in [R, C] transposed (doubles). */
void qf_transpose_f64_ref(const double *in, int64_t R, int64_t C, double *out);

/* GEMM reference in double: y[m, n] = sa * sb * sum_k A[m, k] * B[n, k] (+ bias[n]), with A, B
 * FP8 bytes (fmt_a, fmt_b) decoded exactly; bias may be NULL. y is double [M, N]. */
void qf_gemm_fp8_ref(qf_dtype fmt_a, const uint8_t *a, float sa, qf_dtype fmt_b, const uint8_t *b,
                     float sb, const double *bias, int64_t M, int64_t N, int64_t K, double *y);

#endif /* QF_REF_H */
