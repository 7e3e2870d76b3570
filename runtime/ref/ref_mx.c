/* ref_mx.c: scalar C references for MXFP8 (numerics 2.3): E8M0 scales, block quantization, scale
 * layouts, fused norm + MXFP8 quantize and the block-scaled GEMM. */
#include "ref_mx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "status.h"

/* NOTES: the oracle of the MXFP8 kernels. Build with -ffp-contract=off: the only fp32 arithmetic
 * here is amax * fl(1/fp8_max), x * 2^-E and qf_norm_apply_ref, each written in kernel order.
 * Exponents are read from the fp32 bits, never from log2f, whose last-bit error could move a
 * scale across a power of two. */

/* {================================================================== E8M0 */

/* E clamped to [-127, 127] as a biased byte (254 at most: 0xFF is NaN, never a clamp result). */
static uint8_t e8m0_clamp(int E) {
    E = E < -127 ? -127 : E > 127 ? 127 : E;
    return (uint8_t)(E + 127);
}

/* Largest exponent of the element format: floor(log2(fp8_max)) (OCP MX v1.0 emax_elem). */
static int fmt_emax(qf_dtype fmt) {
    QF_ASSERT(fmt == QF_DTYPE_E4M3 || fmt == QF_DTYPE_E5M2);
    return fmt == QF_DTYPE_E4M3 ? 8 : 15;
}

uint8_t qf_e8m0_ceil_log2_ref(float v) {
    if (isnan(v))
        return 0xFF;
    if (!(v > 0.0f))
        return 0x00;
    const uint32_t u = qf_f32_bits(v);
    const int e = (int)(u >> 23);
    const uint32_t m = u & 0x7FFFFFu;
    if (e == 0xFF)
        return 254; /* +inf: satfinite */
    /* Subnormal v = m * 2^-149 lies in (0, 2^-126): ceil(log2 v) is -126 above 2^-127 (m > 2^22)
     * and <= -127 (clamps to byte 0) at or below it, as TE's software float_to_e8m0. */
    if (e == 0)
        return m > 0x400000u ? 1 : 0;
    /* Normal v = 1.m * 2^(e-127): an exact power of two stays, anything above moves up one. */
    return e8m0_clamp(m == 0 ? e - 127 : e - 126);
}

/* floor(log2(a)) - emax from the bits of a finite a > 0 (OCP v1.0 rule). */
static uint8_t e8m0_floor(float a, int emax) {
    const uint32_t u = qf_f32_bits(a);
    int e = (int)(u >> 23) - 127;
    if ((u >> 23) == 0) { /* subnormal m * 2^-149: floor(log2 a) = bitlen(m) - 150 */
        e = -150;
        for (uint32_t m = u; m != 0; m >>= 1)
            e++;
    }
    return e8m0_clamp(e - emax);
}

uint8_t qf_e8m0_from_amax_ref(float amax, qf_dtype fmt, qf_scale_rounding r) {
    const int emax = fmt_emax(fmt);
    if (isnan(amax))
        return 0xFF; /* a NaN is never dropped by the scale (numerics 2.3) */
    if (!(amax > 0.0f))
        return 0x00; /* zero block: finite scale, zero data, never NaN */
    if (isinf(amax))
        return 254;
    if (r == QF_SCALE_ROUNDING_FLOOR)
        return e8m0_floor(amax, emax);
    QF_ASSERT(r == QF_SCALE_ROUNDING_CEIL);
    /* fl(1/fp8_max) then one fp32 multiply, as the kernels (and TE's max_norm_rcp) do. */
    const float rcp = 1.0f / qf_fp8_max(fmt);
    return qf_e8m0_ceil_log2_ref(amax * rcp);
}

float qf_e8m0_to_float_ref(uint8_t b) {
    if (b == 0xFF)
        return NAN;
    return qf_f32_from_bits(b == 0 ? 0x00400000u : (uint32_t)b << 23); /* 2^-127 is subnormal */
}

/* 2^-(b - 127) exactly as fp32 for b in [0, 254]: 2^127 (b = 0) .. 2^-127 (b = 254, subnormal). */
static float e8m0_inv(uint8_t b) {
    return qf_f32_from_bits(b == 254 ? 0x00400000u : (uint32_t)(254 - b) << 23);
}

uint8_t qf_mx_quantize_elem_ref(float x, uint8_t scale_byte, qf_dtype fmt) {
    QF_ASSERT(fmt == QF_DTYPE_E4M3 || fmt == QF_DTYPE_E5M2);
    if (scale_byte == 0xFF)
        return 0x7F; /* NaN in both E4M3 and E5M2 */
    return qf_fp8_from_float_ref(fmt, x * e8m0_inv(scale_byte));
}

/* }================================================================== */

/* {================================================================== layouts */

static int64_t cdiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

static int64_t roundup(int64_t a, int64_t b) {
    return cdiv(a, b) * b;
}

void qf_mx_scale_shape_row(int64_t M, int64_t K, int64_t *rows, int64_t *cols) {
    *rows = roundup(M, 128);
    *cols = roundup(cdiv(K, QF_MX_BLOCK), 4);
}

void qf_mx_scale_shape_col(int64_t M, int64_t K, int64_t *rows, int64_t *cols) {
    *rows = roundup(cdiv(M, QF_MX_BLOCK), 4);
    *cols = roundup(K, 128);
}

int64_t qf_mx_swizzle_offset_ref(int64_t i, int64_t j, int64_t C) {
    const int64_t tile = (i / 128) * (C / 4) + j / 4;
    return tile * 512 + (i % 32) * 16 + ((i % 128) / 32) * 4 + j % 4;
}

void qf_mx_swizzle_ref(const uint8_t *compact, int64_t R, int64_t C, uint8_t *swizzled) {
    QF_ASSERT(R % 128 == 0 && C % 4 == 0);
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            swizzled[qf_mx_swizzle_offset_ref(i, j, C)] = compact[i * C + j];
}

/* }================================================================== */

/* {================================================================== norm + MXFP8 quantize */

/* Everything one band of 32 rows needs; keeps the helpers' argument lists short. */
typedef struct mx_job {
    qf_norm_src src;
    qf_dtype fmt;
    float *mu_out, *rsigma_out;
    qf_scale_rounding rounding;
    uint8_t *row, *col;   /* [M, K] data, or NULL */
    uint8_t *srow, *scol; /* COMPACT scale matrices being filled, or NULL */
    int64_t srow_cols, scol_cols;
    float *y; /* [32, K]: the band's normalized values */
} mx_job;

/* y of rows [r0, r0 + h) into j->y, one fp32 qf_norm_apply_ref per element. */
/* Scale byte of the band rectangle rows [i0, i0 + ih) x cols [k0, k0 + kw) (NaN-propagating). */
static uint8_t mx_rect_byte(const mx_job *j, int64_t i0, int64_t ih, int64_t k0, int64_t kw) {
    const float a = qf_rect_amax_ref(j->y, j->src.K, i0, ih, k0, kw);
    return qf_e8m0_from_amax_ref(a, j->fmt, j->rounding);
}

/* Quantizes the band rectangle with one scale byte into dst [M, K] (band starts at row r0). */
static void mx_rect_quantize(const mx_job *j, uint8_t *dst, int64_t r0, int64_t i0, int64_t ih,
                             int64_t k0, int64_t kw, uint8_t byte) {
    if (!dst)
        return;
    for (int64_t i = i0; i < i0 + ih; i++)
        for (int64_t k = k0; k < k0 + kw; k++)
            dst[(r0 + i) * j->src.K + k] =
                qf_mx_quantize_elem_ref(j->y[i * j->src.K + k], byte, j->fmt);
}

/* Rowwise 1x32 blocks of the band: one byte per (row, block of 32 along K). */
static void mx_band_rowwise(const mx_job *j, int64_t r0, int64_t h) {
    for (int64_t i = 0; i < h; i++)
        for (int64_t k0 = 0; k0 < j->src.K; k0 += QF_MX_BLOCK) {
            int64_t w = j->src.K - k0 < QF_MX_BLOCK ? j->src.K - k0 : QF_MX_BLOCK;
            uint8_t byte = mx_rect_byte(j, i, 1, k0, w);
            if (j->srow)
                j->srow[(r0 + i) * j->srow_cols + k0 / QF_MX_BLOCK] = byte;
            mx_rect_quantize(j, j->row, r0, i, 1, k0, w, byte);
        }
}

/* Columnwise 32x1 blocks of the band: one byte per column, the band being one block along M. */
static void mx_band_colwise(const mx_job *j, int64_t r0, int64_t h) {
    for (int64_t k = 0; k < j->src.K; k++) {
        uint8_t byte = mx_rect_byte(j, 0, h, k, 1);
        if (j->scol)
            j->scol[(r0 / QF_MX_BLOCK) * j->scol_cols + k] = byte;
        mx_rect_quantize(j, j->col, r0, 0, h, k, 1, byte);
    }
}

/* 32x32 tiles of the band: one byte per tile, written to every row and column entry it covers,
 * so both data copies are quantized with the same byte and are identical. */
static void mx_band_tiles(const mx_job *j, int64_t r0, int64_t h, int want_row, int want_col) {
    for (int64_t k0 = 0; k0 < j->src.K; k0 += QF_MX_BLOCK) {
        int64_t w = j->src.K - k0 < QF_MX_BLOCK ? j->src.K - k0 : QF_MX_BLOCK;
        uint8_t byte = mx_rect_byte(j, 0, h, k0, w);
        for (int64_t i = 0; want_row && j->srow && i < h; i++)
            j->srow[(r0 + i) * j->srow_cols + k0 / QF_MX_BLOCK] = byte;
        for (int64_t k = k0; want_col && j->scol && k < k0 + w; k++)
            j->scol[(r0 / QF_MX_BLOCK) * j->scol_cols + k] = byte;
        if (want_row)
            mx_rect_quantize(j, j->row, r0, 0, h, k0, w, byte);
        if (want_col)
            mx_rect_quantize(j, j->col, r0, 0, h, k0, w, byte);
    }
}

/* A zeroed [R, C] compact scale matrix: the caller's buffer when compact, else a temporary. */
static uint8_t *mx_scales_begin(uint8_t *out, qf_scale_layout layout, int64_t R, int64_t C) {
    if (!out)
        return NULL;
    uint8_t *s = layout == QF_SCALE_LAYOUT_COMPACT ? out : qf_ref_alloc((size_t)(R * C));
    memset(s, 0x00, (size_t)(R * C)); /* padding entries are 0x00 (numerics 2.3) */
    return s;
}

/* Writes a compact [R, C] matrix to out in the swizzled layout, as its transpose [C, R] when
 * `transpose` (columnwise scales), and frees the temporary. No-op for the compact layout. */
static void mx_scales_end(uint8_t *s, uint8_t *out, qf_scale_layout layout, int64_t R, int64_t C,
                          int transpose) {
    if (!out || layout == QF_SCALE_LAYOUT_COMPACT)
        return;
    if (transpose) {
        uint8_t *t = qf_ref_alloc((size_t)(R * C));
        for (int64_t i = 0; i < R; i++)
            for (int64_t k = 0; k < C; k++)
                t[k * R + i] = s[i * C + k];
        qf_mx_swizzle_ref(t, C, R, out);
        free(t);
    } else {
        qf_mx_swizzle_ref(s, R, C, out);
    }
    free(s);
}

/* Walks x in bands of 32 rows: y once per band, then the blocks of each requested direction. */
static void mx_run_bands(const mx_job *j, int block_2d, int want_row, int want_col) {
    for (int64_t r0 = 0; r0 < j->src.M; r0 += QF_MX_BLOCK) {
        const int64_t h = j->src.M - r0 < QF_MX_BLOCK ? j->src.M - r0 : QF_MX_BLOCK;
        qf_norm_band_ref(&j->src, r0, h, j->y, j->mu_out, j->rsigma_out);
        if (block_2d) {
            mx_band_tiles(j, r0, h, want_row, want_col);
            continue;
        }
        if (want_row)
            mx_band_rowwise(j, r0, h);
        if (want_col)
            mx_band_colwise(j, r0, h);
    }
}

/* NOTES: memory is O(32 * K) floats for y plus the scale matrices (M*K/32 bytes), never O(M*K):
 * a band of 32 rows is the height of one columnwise block and of one 2D tile, and each band's y
 * serves both directions. */
void qf_norm_quantize_mxfp8_ref(qf_norm norm, int zcg, qf_dtype xdt, const void *x, qf_dtype gdt,
                                const void *gamma, const void *beta, int64_t M, int64_t K,
                                float eps, const float *mu_in, const float *rsigma_in, qf_dtype fmt,
                                qf_scale_rounding rounding, int block_2d, qf_scale_layout layout,
                                uint8_t *row, uint8_t *scale_row, uint8_t *col, uint8_t *scale_col,
                                float *mu_out, float *rsigma_out) {
    const qf_norm_src src =
        qf_norm_src_make(norm, zcg, xdt, x, gdt, gamma, beta, M, K, eps, mu_in, rsigma_in);
    QF_ASSERT(fmt == QF_DTYPE_E4M3 || fmt == QF_DTYPE_E5M2);
    QF_ASSERT(layout == QF_SCALE_LAYOUT_COMPACT || layout == QF_SCALE_LAYOUT_SWIZZLED);
    int64_t rr, rc, cr, cc;
    qf_mx_scale_shape_row(M, K, &rr, &rc);
    qf_mx_scale_shape_col(M, K, &cr, &cc);
    mx_job j = {.src = src,
                .fmt = fmt,
                .mu_out = mu_out,
                .rsigma_out = rsigma_out,
                .rounding = rounding,
                .row = row,
                .col = col,
                .srow = mx_scales_begin(scale_row, layout, rr, rc),
                .scol = mx_scales_begin(scale_col, layout, cr, cc),
                .srow_cols = rc,
                .scol_cols = cc,
                .y = qf_ref_alloc((size_t)(QF_MX_BLOCK * K) * sizeof(float))};
    mx_run_bands(&j, block_2d, row || scale_row, col || scale_col);
    free(j.y);
    mx_scales_end(j.srow, scale_row, layout, rr, rc, 0);
    mx_scales_end(j.scol, scale_col, layout, cr, cc, 1);
}

/* }================================================================== */

/* {================================================================== GEMM */

/* Decoded element times 2^(s - 127) in double (exact); a NaN scale makes it NaN. */
static double mx_dequant(qf_dtype fmt, uint8_t q, uint8_t s) {
    if (s == 0xFF)
        return NAN;
    return ldexp((double)qf_fp8_to_float_ref(fmt, q), (int)s - 127);
}

void qf_mx_dequant_ref(qf_dtype fmt, int columnwise, const uint8_t *data, const uint8_t *scale,
                       int64_t R, int64_t C, double *out) {
    QF_ASSERT(R >= 0 && C >= 0 && data && scale && out);
    const int64_t sc = columnwise ? roundup(C, 128) : roundup(cdiv(C, QF_MX_BLOCK), 4);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            out[r * C + c] = mx_dequant(fmt, data[r * C + c],
                                        columnwise ? scale[(r / QF_MX_BLOCK) * sc + c]
                                                   : scale[r * sc + c / QF_MX_BLOCK]);
}

void qf_gemm_mxfp8_ref(qf_dtype fmt_a, const uint8_t *a, const uint8_t *a_scale, qf_dtype fmt_b,
                       const uint8_t *b, const uint8_t *b_scale, const double *bias, int64_t M,
                       int64_t N, int64_t K, double *y) {
    double *da = qf_ref_alloc((size_t)(M * K) * sizeof(double));
    double *db = qf_ref_alloc((size_t)(N * K) * sizeof(double));
    qf_mx_dequant_ref(fmt_a, 0, a, a_scale, M, K, da);
    qf_mx_dequant_ref(fmt_b, 0, b, b_scale, N, K, db);
    qf_gemm_f64_ref(da, db, 1.0, bias, M, N, K, y);
    free(da);
    free(db);
}

/* }================================================================== */
