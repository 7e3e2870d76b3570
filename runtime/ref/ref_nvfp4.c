/* ref_nvfp4.c: NVFP4's scalar C references (numerics 2.4): E2M1, Philox SR, RHT, scales, fused norm
 * + NVFP4 quantize and the block-scaled GEMM. */
#include "ref_nvfp4.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "ref_mx.h"
#include "status.h"

/* NOTES: the oracle of the NVFP4 kernels. Build with -ffp-contract=off: every fp32 expression is
 * written in the order the kernels evaluate it. E2M1 rounding compares against the exact grid
 * midpoints in fp32 (all representable), so there is no intermediate rounding. */

/* {================================================================== E2M1 */

/* Magnitudes of codes 0..7 (numerics 1 table). */
static const float k_e2m1_grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

static uint8_t e2m1_sign(float v) {
    return signbit(v) ? 0x8 : 0x0;
}

/* Nearest magnitude code of a >= 0 (not NaN): the first code whose upper rounding bound holds a.
 * A midpoint goes to the even code: `<=` where the lower neighbour is even (0.25, 1.25, 2.5, 5),
 * `<` where the upper one is (0.75, 1.75, 3.5); past 5 it saturates to 7 (6.0). */
static uint8_t e2m1_rn_mag(float a) {
    static const float bound[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    for (uint8_t c = 0; c < 7; c++)
        if (c % 2 == 0 ? a <= bound[c] : a < bound[c])
            return c;
    return 7;
}

uint8_t qf_e2m1_from_float_ref(float v) {
    if (isnan(v))
        return 0x7; /* no NaN in E2M1: +MAX_NORM (see the header) */
    return (uint8_t)(e2m1_sign(v) | e2m1_rn_mag(fabsf(v)));
}

float qf_e2m1_to_float_ref(uint8_t code) {
    const float m = k_e2m1_grid[code & 0x7];
    return (code & 0x8) ? -m : m;
}

uint8_t qf_e2m1_sr_ref(float v, uint32_t u) {
    if (isnan(v))
        return 0x7;
    const float a = fabsf(v);
    if (a >= 6.0f)
        return (uint8_t)(e2m1_sign(v) | 0x7);
    uint8_t lo = 0;
    while (k_e2m1_grid[lo + 1] <= a)
        lo++;
    /* a - lo is exact (lo = 0, or lo <= a < 2*lo: Sterbenz) and hi - lo is 0.5, 1 or 2, so frac
     * is exact; ldexpf by 32 is exact and below 2^32 - 2^8, so the ceiling fits in 32 bits. */
    const float frac = (a - k_e2m1_grid[lo]) / (k_e2m1_grid[lo + 1] - k_e2m1_grid[lo]);
    const uint32_t threshold = (uint32_t)ceilf(ldexpf(frac, 32));
    return (uint8_t)(e2m1_sign(v) | (u < threshold ? lo + 1 : lo));
}

uint8_t qf_e2m1_get_ref(const uint8_t *packed, int64_t i) {
    const uint8_t b = packed[i / 2];
    return (uint8_t)((i & 1) ? b >> 4 : b & 0xF);
}

void qf_e2m1_set_ref(uint8_t *packed, int64_t i, uint8_t code) {
    uint8_t *b = &packed[i / 2];
    if (i & 1)
        *b = (uint8_t)((*b & 0x0F) | ((code & 0xF) << 4));
    else
        *b = (uint8_t)((*b & 0xF0) | (code & 0xF));
}

/* }================================================================== */

/* {================================================================== Philox4x32-10 */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* One round: two 32x32 -> 64-bit products, the halves xored with the other words and the key. */
static void philox_round(uint32_t c[4], const uint32_t k[2]) {
    const uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    const uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    const uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void qf_philox4x32_10_ref(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) { /* the key is bumped by the Weyl constants before rounds 2..10 */
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    memcpy(out, c, sizeof c);
}

uint32_t qf_nvfp4_sr_bits_ref(uint64_t seed, uint64_t offset, uint64_t index) {
    const uint64_t q = index / 4;
    const uint32_t ctr[4] = {(uint32_t)q, (uint32_t)(q >> 32), (uint32_t)offset,
                             (uint32_t)(offset >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    qf_philox4x32_10_ref(ctr, key, out);
    return out[index % 4];
}

/* }================================================================== */

/* {================================================================== RHT */

uint16_t qf_nvfp4_rht_mask_from_seed_ref(uint64_t seed) {
    uint16_t mask = 0;
    for (int k = 0; k < 16; k++)
        mask = (uint16_t)(mask | ((qf_nvfp4_sr_bits_ref(seed, 0, (uint64_t)k) & 1u) << k));
    return mask;
}

static int popcount4(unsigned v) {
    return (int)((v & 1u) + ((v >> 1) & 1u) + ((v >> 2) & 1u) + ((v >> 3) & 1u));
}

void qf_rht16_ref(const float *x, uint16_t mask, float *y) {
    for (unsigned n = 0; n < 16; n++) {
        float acc = 0.0f;
        for (unsigned k = 0; k < 16; k++) {
            const unsigned neg = ((mask >> k) ^ (unsigned)popcount4(k & n)) & 1u;
            acc += neg ? -x[k] : x[k];
        }
        y[n] = qf_bf16_to_float(qf_float_to_bf16(0.25f * acc));
    }
}

/* }================================================================== */

/* {================================================================== scales */

float qf_nvfp4_global_enc_ref(float amax) {
    const float s = fminf(2688.0f / amax, FLT_MAX); /* 2688 = 448 * 6 */
    if (amax == 0.0f || s == 0.0f)
        return 1.0f; /* compressed-tensors #595: all-zero tensor keeps a finite scale */
    return s;
}

float qf_nvfp4_global_dec_ref(float s_enc) {
    return 1.0f / s_enc;
}

uint8_t qf_nvfp4_block_scale_ref(float bamax, float s_enc) {
    const float r6 = 1.0f / 6.0f;
    const float t = s_enc * r6;
    return qf_e4m3_from_float_ref(bamax * t);
}

float qf_nvfp4_elem_enc_ref(uint8_t sf, float s_dec) {
    const float d = qf_e4m3_to_float_ref(sf) * s_dec;
    return fminf(1.0f / d, FLT_MAX);
}

float qf_nvfp4_gemm_alpha_ref(float amax_a, float amax_b) {
    const float rcp = 1.0f / (6.0f * 6.0f * 448.0f * 448.0f); /* 7225344 is exact in fp32 */
    return amax_a * amax_b * rcp;
}

static int64_t roundup(int64_t a, int64_t b) {
    return (a + b - 1) / b * b;
}

void qf_nvfp4_scale_shape_row(int64_t M, int64_t K, int64_t *rows, int64_t *cols) {
    *rows = roundup(M, 128);
    *cols = roundup(K / QF_NVFP4_BLOCK, 4);
}

void qf_nvfp4_scale_shape_col(int64_t M, int64_t K, int64_t *rows, int64_t *cols) {
    qf_nvfp4_scale_shape_row(K, M, rows, cols);
}

/* }================================================================== */

/* {================================================================== norm + NVFP4 quantize */

/* y [M, K] = qf_norm_apply_ref of every element; row statistics as the FP8/MX references. */
static void nv_compute_y(const qf_nvfp4_src *s, const qf_nvfp4_out *out, float *y) {
    for (int64_t m = 0; m < s->M; m++) {
        float mu, rs;
        qf_norm_row_stats_ref(s, m, &mu, &rs, out->mu, out->rsigma);
        qf_norm_row_apply_ref(s, m, mu, rs, y + m * s->K);
    }
}

/* One copy to quantize: v [R, C] fp32, rows split into 1x16 blocks (or 16x16 tiles). */
typedef struct nv_copy {
    const float *v;
    int64_t R, C;
    int block_2d, sr;
    uint64_t seed, offset;
    uint8_t *data;  /* [R, C/2] */
    uint8_t *scale; /* compact [SR, SC] */
    int64_t SC;
} nv_copy;

/* amax of rows [r0, r0 + h) x cols [c0, c0 + 16) of v (NaN-propagating). */
static float nv_rect_amax(const nv_copy *c, int64_t r0, int64_t h, int64_t c0) {
    float a = 0.0f;
    for (int64_t r = r0; r < r0 + h; r++)
        for (int64_t k = c0; k < c0 + QF_NVFP4_BLOCK; k++)
            a = qf_amax_merge(a, c->v[r * c->C + k]);
    return a;
}

/* Quantizes every block of the copy with global scale s_enc, writing data and scale bytes. */
static void nv_quantize_copy(const nv_copy *c, float s_enc) {
    const float s_dec = qf_nvfp4_global_dec_ref(s_enc);
    for (int64_t r = 0; r < c->R; r++)
        for (int64_t c0 = 0; c0 < c->C; c0 += QF_NVFP4_BLOCK) {
            const float bamax =
                c->block_2d ? nv_rect_amax(c, r - r % 16, 16, c0) : nv_rect_amax(c, r, 1, c0);
            const uint8_t sf = qf_nvfp4_block_scale_ref(bamax, s_enc);
            const float enc = qf_nvfp4_elem_enc_ref(sf, s_dec);
            c->scale[r * c->SC + c0 / QF_NVFP4_BLOCK] = sf;
            for (int64_t k = c0; k < c0 + QF_NVFP4_BLOCK; k++) {
                const int64_t i = r * c->C + k;
                const float v = c->v[i] * enc;
                uint8_t q =
                    c->sr ? qf_e2m1_sr_ref(v, qf_nvfp4_sr_bits_ref(c->seed, c->offset, (uint64_t)i))
                          : qf_e2m1_from_float_ref(v);
                qf_e2m1_set_ref(c->data, i, q);
            }
        }
}

/* max |v| over n values (NaN-propagating). */
static float nv_amax(const float *v, int64_t n) {
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++)
        a = qf_amax_merge(a, v[i]);
    return a;
}

/* Quantizes c, writing its scale matrix [SR, SC] in `layout` to `scale_out` (padding 0x00).
 * Returns the copy's amax. */
static float nv_run_copy(nv_copy *c, int64_t SR, qf_scale_layout layout, uint8_t *scale_out) {
    const size_t n = (size_t)(SR * c->SC);
    c->scale = layout == QF_SCALE_LAYOUT_COMPACT ? scale_out : qf_ref_alloc(n);
    memset(c->scale, 0x00, n);
    const float amax = nv_amax(c->v, c->R * c->C);
    nv_quantize_copy(c, qf_nvfp4_global_enc_ref(amax));
    if (layout != QF_SCALE_LAYOUT_COMPACT) {
        qf_mx_swizzle_ref(c->scale, SR, c->SC, scale_out);
        free(c->scale);
    }
    return amax;
}

/* The columnwise source [K, M]: y transposed, or RHT of each group of 16 tokens per column. */
static void nv_col_source(const float *y, int64_t M, int64_t K, const qf_nvfp4_opts *o, float *t) {
    float g[16], h[16];
    for (int64_t k = 0; k < K; k++)
        for (int64_t m0 = 0; m0 < M; m0 += 16) {
            for (int i = 0; i < 16; i++)
                g[i] = y[(m0 + i) * K + k];
            if (o->rht)
                qf_rht16_ref(g, o->rht_mask, h);
            for (int i = 0; i < 16; i++)
                t[k * M + m0 + i] = o->rht ? h[i] : g[i];
        }
}

/* Argument checks; records the message. */
static qf_status nv_check(const qf_nvfp4_src *s, const qf_nvfp4_opts *o, const qf_nvfp4_out *out) {
    static const char fn[] = "qf_quantize_nvfp4_ref";
    if (!s || !o || !out || !s->x)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: src, opts, out and x must not be NULL", fn);
    if (s->M < 0 || s->K <= 0 || s->M % 16 != 0 || s->K % 16 != 0)
        return qf_set_error(
            QF_ERR_INVALID_ARG,
            "%s: M (%lld) and K (%lld) must be multiples of 16 (numerics 2.4), K > 0", fn,
            (long long)s->M, (long long)s->K);
    if ((s->norm != QF_NORM_NONE && !s->gamma) || (s->norm == QF_NORM_LAYERNORM && !s->beta))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: the norm needs gamma (and beta)", fn);
    if ((o->rowwise && (!out->row || !out->scale_row)) ||
        (o->columnwise && (!out->col || !out->scale_col)))
        return qf_set_error(QF_ERR_INVALID_ARG,
                            "%s: a requested copy needs its data and scale buffers", fn);
    if (o->block_2d && o->rht)
        return qf_set_error(QF_ERR_INVALID_ARG,
                            "%s: block_2d (weights) and rht (input/grad) are exclusive", fn);
    if (o->layout != QF_SCALE_LAYOUT_COMPACT && o->layout != QF_SCALE_LAYOUT_SWIZZLED)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: unknown scale layout %d", fn, (int)o->layout);
    return QF_OK;
}

qf_status qf_quantize_nvfp4_ref(const qf_nvfp4_src *src, const qf_nvfp4_opts *opts,
                                const qf_nvfp4_out *out) {
    QF_TRY(nv_check(src, opts, out));
    const int64_t M = src->M, K = src->K;
    int64_t SR, SC;
    float *y = qf_ref_alloc((size_t)(M * K) * sizeof(float));
    nv_compute_y(src, out, y);
    nv_copy c = {.block_2d = opts->block_2d, .sr = opts->sr, .seed = opts->sr_seed};
    if (opts->rowwise) {
        qf_nvfp4_scale_shape_row(M, K, &SR, &SC);
        c.v = y, c.R = M, c.C = K, c.SC = SC, c.data = out->row, c.offset = opts->sr_offset;
        float a = nv_run_copy(&c, SR, opts->layout, out->scale_row);
        if (out->amax_row)
            *out->amax_row = a;
    } else if (out->amax_row) {
        *out->amax_row = nv_amax(y, M * K);
    }
    if (opts->columnwise || out->amax_col) {
        float *t = qf_ref_alloc((size_t)(M * K) * sizeof(float));
        nv_col_source(y, M, K, opts, t);
        float a = nv_amax(t, M * K);
        if (opts->columnwise) {
            qf_nvfp4_scale_shape_col(M, K, &SR, &SC);
            c.v = t, c.R = K, c.C = M, c.SC = SC, c.data = out->col;
            c.offset = opts->sr_offset ^ (UINT64_C(1) << 63);
            a = nv_run_copy(&c, SR, opts->layout, out->scale_col);
        }
        if (out->amax_col)
            *out->amax_col = a;
        free(t);
    }
    free(y);
    return QF_OK;
}

/* }================================================================== */

/* {================================================================== GEMM */

/* Element k of packed row r (stride K/2 bytes) times its block's E4M3 scale, in double. */
void qf_nvfp4_dequant_ref(const uint8_t *data, const uint8_t *scale, int64_t R, int64_t C,
                          double *out) {
    QF_ASSERT(R >= 0 && C % QF_NVFP4_BLOCK == 0 && data && scale && out);
    const int64_t sc = roundup(C / QF_NVFP4_BLOCK, 4);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            out[r * C + c] = (double)qf_e2m1_to_float_ref(qf_e2m1_get_ref(data + r * (C / 2), c)) *
                             (double)qf_e4m3_to_float_ref(scale[r * sc + c / QF_NVFP4_BLOCK]);
}

void qf_gemm_nvfp4_ref(const uint8_t *a, const uint8_t *a_scale, float amax_a, const uint8_t *b,
                       const uint8_t *b_scale, float amax_b, const double *bias, int64_t M,
                       int64_t N, int64_t K, double *y) {
    QF_ASSERT(K % QF_NVFP4_BLOCK == 0);
    double *da = qf_ref_alloc((size_t)(M * K) * sizeof(double));
    double *db = qf_ref_alloc((size_t)(N * K) * sizeof(double));
    qf_nvfp4_dequant_ref(a, a_scale, M, K, da);
    qf_nvfp4_dequant_ref(b, b_scale, N, K, db);
    qf_gemm_f64_ref(da, db, (double)qf_nvfp4_gemm_alpha_ref(amax_a, amax_b), bias, M, N, K, y);
    free(da);
    free(db);
}

/* }================================================================== */
