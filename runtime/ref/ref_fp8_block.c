/* ref_fp8_block.c: scalar C references for fp8_block (numerics 2.5): block scales, GEMM_READY
 * layouts, norm + quantize, dequantize and the block-scaled GEMM. */
#include "ref_fp8_block.h"

#include <float.h>
#include <stdlib.h>

#include "ref.h"
#include "ref_fp8_current.h"
#include "status.h"

/* NOTES: the oracle of the fp8_block kernels. Nothing here normalizes, converts or computes a
 * scale on its own: y comes from qf_norm_row_apply_ref (ref.c), the bytes from
 * qf_e4m3_from_float_ref, the scale from qf_fp8_scale_from_amax_ref (TE's
 * compute_scale_from_amax, shared with fp8_current). Build with -ffp-contract=off. */

/* {================================================================== scale and layouts */

static int64_t cdiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

static int64_t roundup(int64_t a, int64_t b) {
    return cdiv(a, b) * b;
}

/* Largest finite value of the input dtype: what an infinite scale becomes (TE's
 * TypeInfo<IType>::max_finite_value). */
static float input_max(qf_dtype xdt) {
    QF_ASSERT(xdt == QF_DTYPE_BF16 || xdt == QF_DTYPE_FP16 || xdt == QF_DTYPE_FP32);
    return xdt == QF_DTYPE_BF16 ? qf_bf16_to_float(0x7F7F)
           : xdt == QF_DTYPE_FP16 ? qf_fp16_to_float(0x7BFF)
                                  : FLT_MAX;
}

float qf_fp8_block_scale_ref(float amax, float amax_epsilon, int power_2_scales, qf_dtype xdt) {
    return qf_fp8_scale_from_amax_ref(amax, amax_epsilon, power_2_scales, QF_DTYPE_E4M3,
                                      input_max(xdt));
}

void qf_fp8_block_scale_shape(int block_2d, int64_t R, int64_t C, int64_t *rows, int64_t *cols) {
    *rows = block_2d ? cdiv(R, QF_FP8_BLOCK) : cdiv(C, QF_FP8_BLOCK);
    *cols = block_2d ? roundup(cdiv(C, QF_FP8_BLOCK), 4) : roundup(R, 4);
}

int64_t qf_fp8_block_scale_index(int block_2d, int64_t R, int64_t C, int64_t r, int64_t c) {
    int64_t rows, cols;
    qf_fp8_block_scale_shape(block_2d, R, C, &rows, &cols);
    return block_2d ? (r / QF_FP8_BLOCK) * cols + c / QF_FP8_BLOCK
                    : (c / QF_FP8_BLOCK) * cols + r;
}

/* }================================================================== */

/* {================================================================== norm + quantize */

/* Everything one band of 128 rows needs; keeps the helpers' argument lists short. */
typedef struct blk_job {
    qf_norm_src src;
    const qf_fp8_block_opts *opts;
    const qf_fp8_block_out *out;
    float *y; /* [128, K]: the band's normalized values */
} blk_job;

/* y of rows [r0, r0 + h) into j->y; the statistics go to out->mu / out->rsigma. */
/* The scale of the band rectangle rows [i0, i0 + ih) x cols [k0, k0 + kw) (NaN-propagating). */
static float blk_rect_scale(const blk_job *j, int64_t i0, int64_t ih, int64_t k0, int64_t kw) {
    const float a = qf_rect_amax_ref(j->y, j->src.K, i0, ih, k0, kw);
    return qf_fp8_block_scale_ref(a, j->opts->amax_epsilon, j->opts->power_2_scales, j->src.xdt);
}

/* Quantizes the band rectangle with one scale into the rowwise copy [M, K] (want_row) and the
 * columnwise copy [K, M] (want_col); the band starts at row r0. */
static void blk_rect_quantize(const blk_job *j, int64_t r0, int64_t i0, int64_t ih, int64_t k0,
                              int64_t kw, float scale, int want_row, int want_col) {
    const int64_t M = j->src.M, K = j->src.K;
    for (int64_t i = i0; i < i0 + ih; i++)
        for (int64_t k = k0; k < k0 + kw; k++) {
            const uint8_t q = qf_e4m3_from_float_ref(j->y[i * K + k] * scale);
            if (want_row && j->out->row)
                j->out->row[(r0 + i) * K + k] = q;
            if (want_col && j->out->col)
                j->out->col[k * M + r0 + i] = q;
        }
}

/* Writes scale_inv of a block holding element (r, c) of the stored copy [R, C]. */
static void blk_put(float *s, int block_2d, int64_t R, int64_t C, int64_t r, int64_t c,
                    float scale) {
    if (s)
        s[qf_fp8_block_scale_index(block_2d, R, C, r, c)] = qf_fp8_scale_inv_ref(scale);
}

/* Rowwise 1x128 blocks of the band: one scale per (row, block of 128 along K). */
static void blk_band_rowwise(const blk_job *j, int64_t r0, int64_t h) {
    const int64_t M = j->src.M, K = j->src.K;
    for (int64_t i = 0; i < h; i++)
        for (int64_t k0 = 0; k0 < K; k0 += QF_FP8_BLOCK) {
            const int64_t w = K - k0 < QF_FP8_BLOCK ? K - k0 : QF_FP8_BLOCK;
            const float scale = blk_rect_scale(j, i, 1, k0, w);
            blk_put(j->out->row_scale_inv, 0, M, K, r0 + i, k0, scale);
            blk_rect_quantize(j, r0, i, 1, k0, w, scale, 1, 0);
        }
}

/* Columnwise 128x1 blocks of the band: one scale per column k, the band being one block along M;
 * in the transposed copy [K, M] that is the 1x128 block of row k holding column r0. */
static void blk_band_colwise(const blk_job *j, int64_t r0, int64_t h) {
    const int64_t M = j->src.M, K = j->src.K;
    for (int64_t k = 0; k < K; k++) {
        const float scale = blk_rect_scale(j, 0, h, k, 1);
        blk_put(j->out->col_scale_inv, 0, K, M, k, r0, scale);
        blk_rect_quantize(j, r0, 0, h, k, 1, scale, 0, 1);
    }
}

/* 128x128 tiles of the band: one scale per tile, shared by both copies (the columnwise copy's
 * tile grid is the transpose of the rowwise one). */
static void blk_band_tiles(const blk_job *j, int64_t r0, int64_t h, int want_row, int want_col) {
    const int64_t M = j->src.M, K = j->src.K;
    for (int64_t k0 = 0; k0 < K; k0 += QF_FP8_BLOCK) {
        const int64_t w = K - k0 < QF_FP8_BLOCK ? K - k0 : QF_FP8_BLOCK;
        const float scale = blk_rect_scale(j, 0, h, k0, w);
        if (want_row)
            blk_put(j->out->row_scale_inv, 1, M, K, r0, k0, scale);
        if (want_col)
            blk_put(j->out->col_scale_inv, 1, K, M, k0, r0, scale);
        blk_rect_quantize(j, r0, 0, h, k0, w, scale, want_row, want_col);
    }
}

/* Fills a scale matrix of the stored copy [R, C] with 1.0f (its padding keeps that value). */
static void blk_scales_init(float *s, int block_2d, int64_t R, int64_t C) {
    int64_t rows, cols;
    qf_fp8_block_scale_shape(block_2d, R, C, &rows, &cols);
    for (int64_t i = 0; s && i < rows * cols; i++)
        s[i] = 1.0f;
}

/* The fused reference under the public name fn (for its error messages). */
static qf_status nq_block(const char *fn, const qf_norm_src *src, const qf_fp8_block_opts *opts,
                          const qf_fp8_block_out *out) {
    QF_TRY(qf_ref_check_norm_src(fn, src));
    if (!opts || !out)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: opts and out must not be NULL", fn);
    if (!(opts->amax_epsilon >= 0.0f))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: amax_epsilon (%g) must be >= 0", fn,
                            (double)opts->amax_epsilon);
    const int d2 = opts->block_2d != 0;
    const int want_row = out->row || out->row_scale_inv, want_col = out->col || out->col_scale_inv;
    blk_scales_init(out->row_scale_inv, d2, src->M, src->K);
    blk_scales_init(out->col_scale_inv, d2, src->K, src->M);
    blk_job j = {.src = *src, .opts = opts, .out = out,
                 .y = qf_ref_alloc((size_t)(QF_FP8_BLOCK * src->K) * sizeof(float))};
    for (int64_t r0 = 0; r0 < src->M; r0 += QF_FP8_BLOCK) {
        const int64_t h = src->M - r0 < QF_FP8_BLOCK ? src->M - r0 : QF_FP8_BLOCK;
        qf_norm_band_ref(&j.src, r0, h, j.y, j.out->mu, j.out->rsigma);
        if (d2) {
            blk_band_tiles(&j, r0, h, want_row, want_col);
            continue;
        }
        if (want_row)
            blk_band_rowwise(&j, r0, h);
        if (want_col)
            blk_band_colwise(&j, r0, h);
    }
    free(j.y);
    return QF_OK;
}

qf_status qf_norm_quantize_fp8_block_ref(const qf_norm_src *src, const qf_fp8_block_opts *opts,
                                         const qf_fp8_block_out *out) {
    return nq_block("qf_norm_quantize_fp8_block_ref", src, opts, out);
}

qf_status qf_quantize_fp8_block_ref(qf_dtype xdt, const void *x, int64_t M, int64_t K,
                                    const qf_fp8_block_opts *opts, const qf_fp8_block_out *out) {
    const qf_norm_src src = {.norm = QF_NORM_NONE, .xdt = xdt, .x = x, .M = M, .K = K};
    qf_fp8_block_out plain = {0};
    if (out) { /* no statistics for a plain quantize */
        plain = *out;
        plain.mu = plain.rsigma = NULL;
    }
    return nq_block("qf_quantize_fp8_block_ref", &src, opts, out ? &plain : NULL);
}

/* }================================================================== */

/* {================================================================== dequantize and GEMM */

void qf_fp8_block_dequant_ref(int block_2d, const uint8_t *data, const float *scale_inv, int64_t R,
                              int64_t C, double *out) {
    QF_ASSERT(R >= 0 && C >= 0 && data && scale_inv && out);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            out[r * C + c] =
                (double)qf_e4m3_to_float_ref(data[r * C + c]) *
                (double)scale_inv[qf_fp8_block_scale_index(block_2d, R, C, r, c)];
}

void qf_gemm_fp8_block_ref(const uint8_t *a, const float *a_scale, int a_2d, const uint8_t *b,
                           const float *b_scale, int b_2d, const double *bias, int64_t M, int64_t N,
                           int64_t K, double *y) {
    double *da = qf_ref_alloc((size_t)(M * K) * sizeof(double));
    double *db = qf_ref_alloc((size_t)(N * K) * sizeof(double));
    qf_fp8_block_dequant_ref(a_2d, a, a_scale, M, K, da);
    qf_fp8_block_dequant_ref(b_2d, b, b_scale, N, K, db);
    qf_gemm_f64_ref(da, db, 1.0, bias, M, N, K, y);
    free(da);
    free(db);
}

/* }================================================================== */
