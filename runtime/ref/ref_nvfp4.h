/* ref_nvfp4.h: NVFP4's scalar C references (numerics 1, 2.4): E2M1 elements, E4M3 block scales, the
 * fp32 global scale, the 16-point random Hadamard transform, Philox4x32-10 stochastic rounding,
 * 16x16 weight tiles, the layouts and the block-scaled GEMM. These are the oracle of the NVFP4
 * kernels; fp32 arithmetic in the kernels' order (build with -ffp-contract=off). */
#ifndef QF_REF_NVFP4_H
#define QF_REF_NVFP4_H

#include <stddef.h>
#include <stdint.h>

#include "qf_formats.h"
#include "qfuse.h"
#include "ref.h"

#define QF_NVFP4_BLOCK 16
/* TE's fixed RHT sign pattern: bit k set means s_k = -1 (numerics 2.4). */
#define QF_NVFP4_RHT_MASK_DEFAULT 0xD7E8u

/* ---- E2M1 (numerics 1) */

/* fp32 -> E2M1 code (4 bits: bit 3 sign, bits 0..2 magnitude code for 0, 0.5, 1, 1.5, 2, 3, 4, 6),
 * round to nearest even straight from fp32 (2.500004 -> 5), ties to the even code (0.25 -> 0,
 * 0.75 -> 2, 1.25 -> 2, 1.75 -> 4, 2.5 -> 4, 3.5 -> 6, 5 -> 6), saturating: |v| > 5 and +-inf give
 * +-6. Zero and underflow keep the sign (-0.0 -> 0x8, -0.1 -> 0x8).
 * NaN -> 0x7 (+6, sign dropped). E2M1 has no NaN; ASSUMPTION (not checked on hardware): this is
 * what cvt.rn.satfinite.e2m1x2.f32 gives (satfinite maps NaN to MAX_NORM for formats without NaN,
 * and the FP8 ref drops NaN's sign the same way). The NaN is not lost: a NaN in a block makes its
 * E4M3 scale byte 0x7F, so the block dequantizes to NaN. */
uint8_t qf_e2m1_from_float_ref(float v);
/* Code (low 4 bits used) -> fp32, exact. */
float qf_e2m1_to_float_ref(uint8_t code);
/* Stochastic rounding of v with random word u (numerics 2.4): a = |v| (fp32); a >= 6 or +-inf ->
 * +-6; NaN -> 0x7 (as above); otherwise lo <= a < hi are the neighbouring grid values,
 * frac = (a - lo) / (hi - lo) (exact in fp32: Sterbenz, power-of-two divisor), and the result is
 * hi iff u < (uint32_t)ceilf(ldexpf(frac, 32)), else lo (a == lo gives lo for every u). So
 * P(hi) = ceil(frac * 2^32) / 2^32, within 2^-32 of frac; the sign of v is kept. */
uint8_t qf_e2m1_sr_ref(float v, uint32_t u);

/* Element i of a packed E2M1 array (element 2j in the low nibble of byte j, 2j+1 in the high). */
uint8_t qf_e2m1_get_ref(const uint8_t *packed, int64_t i);
/* Sets element i (low 4 bits of code) leaving the other nibble of its byte unchanged. */
void qf_e2m1_set_ref(uint8_t *packed, int64_t i, uint8_t code);

/* ---- Philox4x32-10 (Salmon et al., SC'11; Random123 philox4x32 with 10 rounds) */

/* out = philox4x32_10(ctr, key). Reproduces Random123's known-answer vectors. */
void qf_philox4x32_10_ref(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The random word of element `index` under (seed, offset) (numerics 2.4 SR): word (index % 4) of
 * philox4x32_10(ctr = {lo32(index/4), hi32(index/4), lo32(offset), hi32(offset)},
 *               key = {lo32(seed), hi32(seed)}).
 * A pure function of its arguments: any kernel launch layout reproduces it. */
uint32_t qf_nvfp4_sr_bits_ref(uint64_t seed, uint64_t offset, uint64_t index);

/* ---- RHT (numerics 2.4) */

/* RHT signs drawn from a seed (recipe option rht_seed): bit k of the mask (s_k = -1 when set) is
 * the low bit of qf_nvfp4_sr_bits_ref(seed, 0, k), i.e. of the successive output words of Philox
 * with key = seed and counters {0,0,0,0}, {1,0,0,0}, {2,0,0,0}, {3,0,0,0}. */
uint16_t qf_nvfp4_rht_mask_from_seed_ref(uint64_t seed);

/* y_n = bf16(0.25 * sum_k s_k * (-1)^popcount(k & n) * x_k), n = 0..15, s_k = -1 iff mask bit k.
 * fp32: acc = 0.0f, then acc += t_k for k = 0, 1, ..., 15 in that order, where t_k = +-x_k (the
 * sign product is exact); then 0.25f * acc, rounded to bf16 (RNE) and returned widened to fp32.
 * x and y are [16] and may not overlap. */
void qf_rht16_ref(const float *x, uint16_t mask, float *y);

/* ---- scales (numerics 2.4) */

/* S_enc = fminf(fl(2688 / amax), FLT_MAX); amax == 0 or a zero quotient (amax = +inf) gives 1.
 * NaN amax gives FLT_MAX (fminf drops the NaN, as TE's compute_global_encode_scaling_factor_FP4;
 * the NaN still reaches the block scale bytes). amax is max |x| (>= 0 or NaN). */
float qf_nvfp4_global_enc_ref(float amax);
/* S_dec = fl(1 / S_enc). */
float qf_nvfp4_global_dec_ref(float s_enc);
/* sf = rn_sat_E4M3(fl(bamax * fl(s_enc * fl(1/6)))); a zero block gives 0x00, a NaN one 0x7F. */
uint8_t qf_nvfp4_block_scale_ref(float bamax, float s_enc);
/* enc = fminf(fl(1 / fl(float(sf) * s_dec)), FLT_MAX): sf 0x00 gives FLT_MAX (1/0 = inf), and a
 * NaN sf gives FLT_MAX too (fminf, as the kernels compute it). */
float qf_nvfp4_elem_enc_ref(uint8_t sf, float s_dec);
/* alpha = fl(fl(amax_a * amax_b) * fl(1 / (6*6*448*448))) (numerics 2.4 GEMM). */
float qf_nvfp4_gemm_alpha_ref(float amax_a, float amax_b);

/* Padded scale shapes: rowwise [roundup(M,128), roundup(K/16,4)], columnwise (of the transposed
 * [K, M] copy) [roundup(K,128), roundup(M/16,4)]. */
void qf_nvfp4_scale_shape_row(int64_t M, int64_t K, int64_t *rows, int64_t *cols);
void qf_nvfp4_scale_shape_col(int64_t M, int64_t K, int64_t *rows, int64_t *cols);

/* ---- norm + NVFP4 quantize */

/* The input: x [M, K] (xdt), gamma/beta [K] (gdt; NULL when the norm does not use them), mu_in /
 * rsigma_in [M] (the kernel's own statistics) or NULL to compute them with qf_norm_stats_ref.
 * y = qf_norm_apply_ref of each element (fp32) is what gets quantized. */
typedef qf_norm_src qf_nvfp4_src; /* see ref.h */

typedef struct qf_nvfp4_opts {
    int rowwise;          /* produce the rowwise copy (1x16 blocks along K) */
    int columnwise;       /* produce the columnwise copy (transposed, 1x16 blocks along M) */
    int rht;              /* columnwise copy only: 16-point RHT over groups of 16 tokens */
    uint16_t rht_mask;    /* signs: QF_NVFP4_RHT_MASK_DEFAULT or qf_nvfp4_rht_mask_from_seed_ref */
    int sr;               /* stochastic rounding of the elements (both copies) */
    uint64_t sr_seed, sr_offset;
    int block_2d;         /* one 16x16 tile amax per block scale (weights); excludes rht */
    qf_scale_layout layout; /* both scale matrices (swizzled: numerics 2.3 formula, no transpose) */
} qf_nvfp4_opts;

/* Host buffers (the reference does not own them). The pointers of a copy that is not requested
 * are ignored and may be NULL; amax_*, mu and rsigma may always be NULL. */
typedef struct qf_nvfp4_out {
    uint8_t *row;         /* [M, K/2] packed E2M1 */
    uint8_t *scale_row;   /* [roundup(M,128), roundup(K/16,4)] E4M3, padding 0x00 */
    uint8_t *col;         /* [K, M/2] packed E2M1 of the transpose (after RHT when rht) */
    uint8_t *scale_col;   /* [roundup(K,128), roundup(M/16,4)] E4M3, padding 0x00 */
    float *amax_row;      /* [1] max |y| */
    float *amax_col;      /* [1] max |y| or, with rht, max |RHT(y)| (bf16-rounded values) */
    float *mu, *rsigma;   /* [M] */
} qf_nvfp4_out;

/* Fused norm + NVFP4 quantize reference (numerics 2.4, 3).
 * Each copy uses its own global scale S_enc = qf_nvfp4_global_enc_ref(amax of that copy), block
 * scales sf = qf_nvfp4_block_scale_ref(block amax, S_enc) and elements
 * q = rn_sat_E2M1(fl(v * qf_nvfp4_elem_enc_ref(sf, fl(1/S_enc)))) (or qf_e2m1_sr_ref with sr).
 * SR element index: the element's position in the data it is written to, unpacked: rowwise
 * m*K + k; columnwise k*M + m, and the columnwise copy uses offset sr_offset ^ (1 << 63) so that
 * its random words never coincide with the rowwise copy's.
 * block_2d: the tile (m/16, k/16)'s byte is the scale of every rowwise block (m, k/16) and every
 * columnwise block (k, m/16) it covers.
 * Returns QF_ERR_INVALID_ARG (message via qf_last_error) when M or K is not a multiple of 16, K is
 * 0, a required pointer is NULL, or block_2d and rht are both set. Memory: O(M*K) floats. */
qf_status qf_quantize_nvfp4_ref(const qf_nvfp4_src *src, const qf_nvfp4_opts *opts,
                                const qf_nvfp4_out *out);

/* ---- GEMM */

/* The values of one NVFP4 copy in double, without its global scale (which the GEMM folds into
 * alpha): packed E2M1 data [R, C/2] bytes (the rowwise copy of [M, K] is R = M, C = K; the
 * columnwise copy, transposed, is R = K, C = M) with 1x16 blocks along C and COMPACT E4M3 scales
 * [roundup(R,128), roundup(C/16,4)] (numerics 2.4). out [R, C] = E2M1 value * float(sf). C is a
 * multiple of 16. */
void qf_nvfp4_dequant_ref(const uint8_t *data, const uint8_t *scale, int64_t R, int64_t C,
                          double *out);

/* y[m, n] = alpha * sum_k deq(A)[m, k] * deq(B)[n, k] (+ bias[n]) in double, deq = E2M1 value times
 * float(sf) of its 1x16 block, alpha = qf_nvfp4_gemm_alpha_ref(amax_a, amax_b) (so S_dec of each
 * operand is folded into alpha, as the kernels do). a [M, K/2], b [N, K/2] packed; COMPACT rowwise
 * scales (row stride roundup(K/16,4)). bias may be NULL; y double [M, N]. */
void qf_gemm_nvfp4_ref(const uint8_t *a, const uint8_t *a_scale, float amax_a, const uint8_t *b,
                       const uint8_t *b_scale, float amax_b, const double *bias, int64_t M,
                       int64_t N, int64_t K, double *y);

#endif /* QF_REF_NVFP4_H */
