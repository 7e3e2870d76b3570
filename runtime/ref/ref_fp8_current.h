/* ref_fp8_current.h: scalar C references for the fp8_current family (numerics 2.2, TE
 * Float8CurrentScaling): the scale from a tensor's own amax, fused norm + quantize and plain
 * quantize. Built on ref.h (same norm arithmetic, same FP8 conversions); the oracle of the
 * current-scaling kernels. fp32 arithmetic in the kernels' order (build with -ffp-contract=off). */
#ifndef QF_REF_FP8_CURRENT_H
#define QF_REF_FP8_CURRENT_H

#include <stdint.h>

#include "qf_formats.h"
#include "qfuse.h"
#include "ref.h"

/* ---- scale (numerics 2.2) */

/* The current-scaling scale of a tensor whose amax is `amax` (max |v|: >= 0, or NaN), as fp32:
 *   a = amax_epsilon if amax < amax_epsilon, else amax (TE's comparison: a NaN amax stays NaN);
 *   a == 0, +inf or NaN -> 1;
 *   else fp8_max / a correctly rounded (fp8_max = qf_fp8_max(fmt): 448 E4M3, 57344 E5M2),
 *   an infinite quotient (a tiny amax, e.g. 1e-40) -> FLT_MAX;
 *   power_2_scales (nonzero): then bits & 0xFF800000 (mantissa cleared: 448/3 -> 128,
 *   FLT_MAX -> 2^127).
 * Never returns 0, inf, NaN or a subnormal. fmt is QF_DTYPE_E4M3 or QF_DTYPE_E5M2 (asserted). */
float qf_fp8_current_scale_ref(float amax, float amax_epsilon, int power_2_scales, qf_dtype fmt);

/* TE's compute_scale_from_amax, which both FP8 current scaling and FP8 block scaling (numerics
 * 2.5, per block) use: the rule above with `value_for_inf` in place of FLT_MAX for an infinite
 * quotient (current scaling: FLT_MAX; block scaling: the largest finite value of the input
 * dtype, bf16 0x7F7F = 3.3895e38). value_for_inf is finite and > 0; power_2_scales clears its
 * mantissa too (3.3895e38 -> 2^127). */
float qf_fp8_scale_from_amax_ref(float amax, float amax_epsilon, int power_2_scales, qf_dtype fmt,
                                 float value_for_inf);

/* scale_inv = 1 / scale, correctly rounded in fp32 (TE's __frcp_rn), for a scale from
 * qf_fp8_current_scale_ref (or any finite nonzero scale); 1/FLT_MAX gives the subnormal 2^-128. */
float qf_fp8_scale_inv_ref(float scale);

/* ---- norm + quantize (numerics 2.2, 3) */

/* What is quantized: y [M, K], fp32, y = qf_norm_apply_ref of each element (layernorm, rmsnorm, or
 * y = x for QF_NORM_NONE). x [M, K] of xdt (bf16, fp16 or fp32); gamma/beta [K] of gdt (the input's
 * dtype or fp32; gamma NULL for none, beta NULL unless layernorm); zcg: zero_centered_gamma
 * (g = fl(gamma) + 1 in fp32); eps inside the square root. mu_in / rsigma_in [M]: the statistics
 * to normalize with (a GPU test passes the kernel's own, so y, the amax and every byte are the
 * kernel's), or NULL to compute them with qf_norm_stats_ref (fp64, rounded to fp32); either may
 * be NULL on its own (rmsnorm reads no mu). The reference only reads these buffers and does not
 * own them. */
typedef qf_norm_src qf_fp8_current_src; /* see ref.h */

/* Argument checks of a reference's source s, shared by the norm + quantize references: QF_OK, or
 * QF_ERR_INVALID_ARG with "<fn>: ..." recorded (qf_last_error) when s or s->x is NULL, M < 0 or
 * K < 1, the norm is unknown, the norm's gamma (and beta) is NULL, or xdt/gdt is not bf16, fp16
 * or fp32. */
qf_status qf_ref_check_norm_src(const char *fn, const qf_norm_src *s);

/* Recipe options that reach the quantizer (numerics 2.2). fmt is the role's element format:
 * QF_DTYPE_E4M3 for input and weight; for grad QF_DTYPE_E5M2 under format = "hybrid" (default),
 * QF_DTYPE_E4M3 under "e4m3". amax_epsilon >= 0 (recipe default 0.0); power_2_scales: 0 or 1
 * (default 0). */
typedef struct qf_fp8_current_opts {
    qf_dtype fmt;
    float amax_epsilon;
    int power_2_scales;
} qf_fp8_current_opts;

/* Host buffers the caller owns; every pointer may be NULL (that output is not produced). */
typedef struct qf_fp8_current_out {
    uint8_t *row;     /* [M, K] FP8 (opts->fmt) rowwise copy */
    uint8_t *col;     /* [K, M] FP8 columnwise copy, the transpose (same scale_inv) */
    float *amax;      /* [1] max |y| over all M*K elements, before epsilon (NaN propagates) */
    float *scale;     /* [1] qf_fp8_current_scale_ref(amax, ...) */
    float *scale_inv; /* [1] qf_fp8_scale_inv_ref(scale): the dequantization factor */
    float *mu;        /* [M] the mu used (0 for rmsnorm); ignored by qf_quantize_fp8_current_ref */
    float *rsigma;    /* [M] the rsigma used; ignored by qf_quantize_fp8_current_ref */
} qf_fp8_current_out;

/* Step 1 of two: *amax = max |y| over all elements (NaN propagates), fp32, y as in
 * qf_fp8_current_src; mu_out / rsigma_out [M] (may be NULL) receive the statistics used.
 * Two-step use, e.g. a GPU test checking in row chunks or an amax MAX-reduced over a
 * data/tensor-parallel group (numerics 2.2): run this per chunk, merge the amaxes with
 * qf_amax_merge, take scale = qf_fp8_current_scale_ref(amax, ...), then quantize each chunk
 * with qf_norm_quantize_fp8_ref(..., scale, opts->fmt, ...) and the same mu/rsigma: the bytes
 * equal those of qf_norm_quantize_fp8_current_ref on the whole tensor.
 * Errors: QF_ERR_INVALID_ARG (message via qf_last_error) as qf_norm_quantize_fp8_current_ref
 * for src, or a NULL amax; nothing is written then. */
qf_status qf_fp8_current_amax_ref(const qf_fp8_current_src *src, float *amax, float *mu_out,
                                  float *rsigma_out);

/* Fused norm + FP8 quantize under current scaling (numerics 2.2, 3): amax = max |y| over the whole
 * normalized output (after gamma/beta), scale = qf_fp8_current_scale_ref(amax, opts...),
 * q = rn_sat_fmt(fl(y * scale)) into out->row [M, K] and/or out->col [K, M]; y is rounded once,
 * from fp32 (TE rounds y to bf16 first and casts that: two roundings, the only cause of any
 * byte difference from TE). An all-zero y gives scale 1 and all-zero data.
 * Errors: QF_ERR_INVALID_ARG (message via qf_last_error; nothing written) when src, opts, out
 * or src->x is NULL, M < 0 or K < 1, norm is unknown, the norm's gamma (and beta) is NULL,
 * xdt/gdt is not bf16/fp16/fp32, fmt is not E4M3/E5M2, or amax_epsilon is negative or NaN.
 * Memory: none beyond the caller's buffers (two passes over x: amax, then quantize). */
qf_status qf_norm_quantize_fp8_current_ref(const qf_fp8_current_src *src,
                                           const qf_fp8_current_opts *opts,
                                           const qf_fp8_current_out *out);

/* Plain quantize (no norm) under current scaling, for the weight and grad roles (numerics 2.2):
 * x [M, K] of xdt (bf16, fp16 or fp32), amax = max |x|, then as
 * qf_norm_quantize_fp8_current_ref with y = x (rowwise [M, K] and/or columnwise [K, M]).
 * out->mu and out->rsigma are ignored. Errors: as qf_norm_quantize_fp8_current_ref. */
qf_status qf_quantize_fp8_current_ref(qf_dtype xdt, const void *x, int64_t M, int64_t K,
                                      const qf_fp8_current_opts *opts,
                                      const qf_fp8_current_out *out);

#endif /* QF_REF_FP8_CURRENT_H */
