/* ref.c: scalar C references (*_ref): element conversions, norm + FP8 quantize, scaling, GEMM. */
#include "ref.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

/* NOTES: this file is the oracle for the kernels. Build it with -ffp-contract=off: every fp32
 * expression below is written in the order the kernels evaluate it, and a fused multiply-add the
 * compiler invents would change results in the last bit. */

/* {================================================================== memory */

void *qf_ref_alloc(size_t n) {
    void *p = malloc(n ? n : 1);
    QF_ASSERT(p != NULL);
    return p;
}

/* }================================================================== */

/* {================================================================== element conversions */

/* Rounds a finite, nonzero fp32 magnitude (sign bit clear) to a binary format with `ebits` exponent
 * bits (IEEE bias) and `mbits` mantissa bits, round to nearest even, subnormals included. Returns
 * the magnitude code (exponent field << mbits | mantissa), NOT clamped: a value past the format's
 * range gives a code past its largest finite one, and the caller saturates or overflows to inf.
 * NOTES: all integer arithmetic, so no intermediate rounding (numerics 1: no double rounding
 * through fp16/bf16). Works for fp32 subnormal inputs too, for any format with emin > -126. */
static int32_t round_to_code(uint32_t abs, int ebits, int mbits) {
    const int bias = (1 << (ebits - 1)) - 1;
    int ef = (int)(abs >> 23);
    uint64_t sig = abs & 0x7FFFFFu;
    int e = ef == 0 ? -126 : ef - 127; /* value = sig * 2^(e - 23) */
    if (ef != 0)
        sig |= 0x800000u;
    int te = e > 1 - bias ? e : 1 - bias; /* exponent of the target binade (min: subnormal) */
    int shift = te - mbits - (e - 23);    /* value / quantum = sig >> shift; always > 0 here */
    if (shift >= 40)
        return 0; /* under 2^-16 of the smallest subnormal: rounds to zero */
    uint64_t n = sig >> shift;
    uint64_t rem = sig & ((UINT64_C(1) << shift) - 1);
    uint64_t half = UINT64_C(1) << (shift - 1);
    if (rem > half || (rem == half && (n & 1)))
        n++;
    /* Normal: field (te + bias) and n in [2^mbits, 2^(mbits+1)], so code = ((te+bias-1) << mbits)
     * + n; a carry to 2^(mbits+1) moves into the exponent on its own. Subnormal: te + bias = 1 and
     * code = n, the same formula. */
    return (int32_t)(((int64_t)(te + bias - 1) << mbits) + (int64_t)n);
}

/* rn_sat to an FP8 format: NaN -> 0x7F (as cvt.rn.satfinite, sign dropped), +-inf and overflow ->
 * +-max_code, zero and underflow keep the sign. */
static uint8_t fp8_encode(float v, int ebits, int mbits, int32_t max_code) {
    uint32_t u = qf_f32_bits(v);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u)
        return 0x7F;
    if (abs == 0x7F800000u)
        return (uint8_t)(sign | max_code);
    if (abs == 0)
        return sign;
    int32_t code = round_to_code(abs, ebits, mbits);
    return (uint8_t)(sign | (code > max_code ? max_code : code));
}

uint8_t qf_e4m3_from_float_ref(float v) {
    /* E4M3 (fn) has no inf; exponent field 15 is normal except mantissa 111 (NaN), so 0x7E = 448
     * is the largest finite code and everything that rounds past it saturates. */
    return fp8_encode(v, 4, 3, 0x7E);
}

uint8_t qf_e5m2_from_float_ref(float v) {
    return fp8_encode(v, 5, 2, 0x7B); /* 0x7C is inf: satfinite stops at 57344 */
}

float qf_e4m3_to_float_ref(uint8_t b) {
    int exp = (b >> 3) & 0xF, man = b & 0x7;
    float mag;
    if ((b & 0x7F) == 0x7F)
        mag = NAN;
    else if (exp == 0)
        mag = ldexpf((float)man, -9); /* subnormal: man * 2^(1 - 7 - 3) */
    else
        mag = ldexpf((float)(8 + man), exp - 7 - 3);
    return (b & 0x80) ? -mag : mag;
}

float qf_e5m2_to_float_ref(uint8_t b) {
    int exp = (b >> 2) & 0x1F, man = b & 0x3;
    float mag;
    if (exp == 31)
        mag = man ? NAN : INFINITY;
    else if (exp == 0)
        mag = ldexpf((float)man, -16); /* subnormal: man * 2^(1 - 15 - 2) */
    else
        mag = ldexpf((float)(4 + man), exp - 15 - 2);
    return (b & 0x80) ? -mag : mag;
}

uint8_t qf_fp8_from_float_ref(qf_dtype fmt, float v) {
    QF_ASSERT(fmt == QF_DTYPE_E4M3 || fmt == QF_DTYPE_E5M2);
    return fmt == QF_DTYPE_E4M3 ? qf_e4m3_from_float_ref(v) : qf_e5m2_from_float_ref(v);
}

float qf_fp8_to_float_ref(qf_dtype fmt, uint8_t b) {
    QF_ASSERT(fmt == QF_DTYPE_E4M3 || fmt == QF_DTYPE_E5M2);
    return fmt == QF_DTYPE_E4M3 ? qf_e4m3_to_float_ref(b) : qf_e5m2_to_float_ref(b);
}

float qf_fp8_max(qf_dtype fmt) {
    QF_ASSERT(fmt == QF_DTYPE_E4M3 || fmt == QF_DTYPE_E5M2);
    return fmt == QF_DTYPE_E4M3 ? QF_E4M3_MAX : QF_E5M2_MAX;
}

float qf_bf16_to_float(uint16_t h) {
    return qf_f32_from_bits((uint32_t)h << 16);
}

uint16_t qf_float_to_bf16(float f) {
    uint32_t u = qf_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN; truncation could turn it into inf */
    /* Adding 0x7FFF plus the kept lsb rounds to nearest even; a carry into the exponent is the
     * correct result, including overflow to inf. */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float qf_fp16_to_float(uint16_t h) {
    int exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    float mag;
    if (exp == 31)
        return qf_f32_from_bits(
            ((uint32_t)(h & 0x8000u) << 16) | 0x7F800000u | ((uint32_t)man << 13) |
            (man ? 0x400000u : 0u)); /* inf, or NaN (payload kept, made quiet) */
    if (exp == 0)
        mag = ldexpf((float)man, -24);
    else
        mag = ldexpf((float)(1024 + man), exp - 25);
    return (h & 0x8000) ? -mag : mag;
}

uint16_t qf_float_to_fp16(float f) {
    uint32_t u = qf_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u)
        return (uint16_t)(sign | 0x7E00u);
    if (abs == 0)
        return sign;
    int32_t code = abs == 0x7F800000u ? 0x7C00 : round_to_code(abs, 5, 10);
    return (uint16_t)(sign | (code > 0x7C00 ? 0x7C00 : code)); /* overflow -> inf (IEEE) */
}

float qf_load_as_float(const void *p, qf_dtype dt, int64_t i) {
    QF_ASSERT(dt == QF_DTYPE_FP32 || dt == QF_DTYPE_FP16 || dt == QF_DTYPE_BF16);
    if (dt == QF_DTYPE_FP32)
        return ((const float *)p)[i];
    if (dt == QF_DTYPE_FP16)
        return qf_fp16_to_float(((const uint16_t *)p)[i]);
    return qf_bf16_to_float(((const uint16_t *)p)[i]);
}

float qf_amax_merge(float m, float v) {
    /* NOTES: fmaxf would drop a NaN; an amax that hides a NaN lets a broken step pass silently. */
    if (isnan(m) || isnan(v))
        return NAN;
    float a = fabsf(v);
    return a > m ? a : m;
}

/* }================================================================== */

/* {================================================================== norm + FP8 quantize */

/* One row's statistics in double (numerics 3: the fp64 reference the kernels are held to). */
static void row_stats(qf_norm norm, qf_dtype xdt, const void *x, int64_t row, int64_t K, float eps,
                      float *mu, float *rsigma) {
    const int64_t base = row * K;
    double s = 0.0, ss = 0.0, mean = 0.0;
    if (norm == QF_NORM_NONE) {
        *mu = 0.0f;
        *rsigma = 1.0f;
        return;
    }
    if (norm == QF_NORM_LAYERNORM) {
        for (int64_t k = 0; k < K; k++)
            s += qf_load_as_float(x, xdt, base + k);
        mean = s / (double)K;
    }
    /* Two passes: sum((x - mean)^2) does not cancel the way sum(x^2) - K*mean^2 does. For
     * rmsnorm mean is 0, so this is sum(x^2). */
    for (int64_t k = 0; k < K; k++) {
        double d = (double)qf_load_as_float(x, xdt, base + k) - mean;
        ss += d * d;
    }
    *mu = (float)mean;
    *rsigma = (float)(1.0 / sqrt(ss / (double)K + (double)eps));
}

void qf_norm_stats_ref(qf_norm norm, qf_dtype xdt, const void *x, int64_t M, int64_t K, float eps,
                       float *mu, float *rsigma) {
    QF_ASSERT(K >= 1 && M >= 0);
    for (int64_t m = 0; m < M; m++)
        row_stats(norm, xdt, x, m, K, eps, &mu[m], &rsigma[m]);
}

float qf_norm_apply_ref(qf_norm norm, int zcg, float x, float mu, float rsigma, float gamma,
                        float beta) {
    /* fl(gamma) + 1 in fp32, never in gamma's storage dtype (numerics 3, TE PR #1690). */
    const float g = zcg ? gamma + 1.0f : gamma;
    switch (norm) {
    case QF_NORM_LAYERNORM:
        return fmaf((x - mu) * rsigma, g, beta);
    case QF_NORM_RMSNORM:
        return (x * rsigma) * g;
    default:
        return x;
    }
}

qf_norm_src qf_norm_src_make(qf_norm norm, int zcg, qf_dtype xdt, const void *x, qf_dtype gdt,
                             const void *gamma, const void *beta, int64_t M, int64_t K, float eps,
                             const float *mu_in, const float *rsigma_in) {
    QF_ASSERT(K >= 1 && M >= 0);
    QF_ASSERT(norm == QF_NORM_NONE || gamma != NULL);
    QF_ASSERT(norm != QF_NORM_LAYERNORM || beta != NULL);
    const qf_norm_src s = {.norm = norm,
                           .zcg = zcg,
                           .xdt = xdt,
                           .gdt = gdt,
                           .x = x,
                           .gamma = gamma,
                           .beta = beta,
                           .M = M,
                           .K = K,
                           .eps = eps,
                           .mu_in = mu_in,
                           .rsigma_in = rsigma_in};
    return s;
}

void qf_norm_row_stats_ref(const qf_norm_src *s, int64_t r, float *mu, float *rsigma, float *mu_out,
                           float *rsigma_out) {
    *mu = 0.0f;
    *rsigma = 1.0f;
    if (!s->mu_in || !s->rsigma_in)
        row_stats(s->norm, s->xdt, s->x, r, s->K, s->eps, mu, rsigma);
    if (s->mu_in)
        *mu = s->mu_in[r];
    if (s->rsigma_in)
        *rsigma = s->rsigma_in[r];
    if (mu_out)
        mu_out[r] = *mu;
    if (rsigma_out)
        rsigma_out[r] = *rsigma;
}

void qf_norm_row_apply_ref(const qf_norm_src *s, int64_t r, float mu, float rsigma, float *y) {
    for (int64_t k = 0; k < s->K; k++) {
        float xv = qf_load_as_float(s->x, s->xdt, r * s->K + k);
        float g = s->norm != QF_NORM_NONE ? qf_load_as_float(s->gamma, s->gdt, k) : 1.0f;
        float b = s->norm == QF_NORM_LAYERNORM ? qf_load_as_float(s->beta, s->gdt, k) : 0.0f;
        y[k] = qf_norm_apply_ref(s->norm, s->zcg, xv, mu, rsigma, g, b);
    }
}

void qf_norm_band_ref(const qf_norm_src *s, int64_t r0, int64_t h, float *y, float *mu_out,
                      float *rsigma_out) {
    for (int64_t i = 0; i < h; i++) {
        float mu, rs;
        qf_norm_row_stats_ref(s, r0 + i, &mu, &rs, mu_out, rsigma_out);
        qf_norm_row_apply_ref(s, r0 + i, mu, rs, y + i * s->K);
    }
}

float qf_rect_amax_ref(const float *y, int64_t K, int64_t i0, int64_t ih, int64_t k0, int64_t kw) {
    float a = 0.0f;
    for (int64_t i = i0; i < i0 + ih; i++)
        for (int64_t k = k0; k < k0 + kw; k++)
            a = qf_amax_merge(a, y[i * K + k]);
    return a;
}

/* Quantizes y, row m of K elements, into row (stride 1) and col (stride M); returns its amax
 * merged into `amax`. */
static float quantize_row(const float *y, int64_t m, int64_t M, int64_t K, float scale,
                          qf_dtype fmt, uint8_t *row, uint8_t *col, float amax) {
    for (int64_t k = 0; k < K; k++) {
        uint8_t q = qf_fp8_from_float_ref(fmt, y[k] * scale);
        amax = qf_amax_merge(amax, y[k]);
        if (row)
            row[m * K + k] = q;
        if (col)
            col[k * M + m] = q;
    }
    return amax;
}

void qf_norm_quantize_fp8_ref(qf_norm norm, int zcg, qf_dtype xdt, const void *x, qf_dtype gdt,
                              const void *gamma, const void *beta, int64_t M, int64_t K, float eps,
                              const float *mu_in, const float *rsigma_in, float scale, qf_dtype fmt,
                              uint8_t *row, uint8_t *col, float *mu_out, float *rsigma_out,
                              float *amax) {
    const qf_norm_src s =
        qf_norm_src_make(norm, zcg, xdt, x, gdt, gamma, beta, M, K, eps, mu_in, rsigma_in);
    float *y = qf_ref_alloc((size_t)K * sizeof *y), a = 0.0f;
    for (int64_t m = 0; m < M; m++) {
        float mu, rs;
        qf_norm_row_stats_ref(&s, m, &mu, &rs, mu_out, rsigma_out);
        qf_norm_row_apply_ref(&s, m, mu, rs, y);
        a = quantize_row(y, m, M, K, scale, fmt, row, col, a);
    }
    free(y);
    if (amax)
        *amax = a;
}

/* }================================================================== */

/* {================================================================== delayed scaling */

/* (fp8_max * 2^-margin) / amax in fp32 for a finite amax > 0 (numerics 2.1); inf -> FLT_MAX. */
static float delayed_scale(float fp8_max, float margin, float amax) {
    /* NOTES: ldexpf is exact for an integer margin; powf is only needed (and only approximately
     * specified) for a fractional one. */
    const int int_margin = margin == floorf(margin) && fabsf(margin) < 256.0f;
    float num = int_margin ? ldexpf(fp8_max, -(int)margin) : fp8_max / powf(2.0f, margin);
    float s = num / amax;
    return isinf(s) ? FLT_MAX : s; /* TE PR #786: amax 1e-38 -> FLT_MAX, not inf */
}

void qf_fp8_scale_update_ref(int n, int H, float *amax, float *history, float *scale,
                             float *scale_inv, const uint8_t *fmt, float margin,
                             qf_amax_compute ac) {
    QF_ASSERT(H >= 1);
    for (int t = 0; t < n; t++) {
        const float a = amax[t];
        float *h = history + (int64_t)t * H;
        if (a == 0.0f)
            continue; /* tensor did not run this step: nothing changes (TE PR #825) */
        /* Roll: newest at index 0, oldest (index H-1) dropped. */
        memmove(h + 1, h, (size_t)(H - 1) * sizeof *h);
        h[0] = a;
        float r = a;
        if (ac == QF_AMAX_COMPUTE_MAX)
            for (int i = 0; i < H; i++)
                r = qf_amax_merge(r, h[i]);
        if (isfinite(r) && r > 0.0f)
            scale[t] = delayed_scale(qf_fp8_max((qf_dtype)fmt[t]), margin, r);
        scale_inv[t] = 1.0f / scale[t];
        amax[t] = 0.0f;
    }
}

/* }================================================================== */

/* {================================================================== GEMM */

void qf_gemm_fp8_ref(qf_dtype fmt_a, const uint8_t *a, float sa, qf_dtype fmt_b, const uint8_t *b,
                     float sb, const double *bias, int64_t M, int64_t N, int64_t K, double *y) {
    /* each byte decoded once; the same sums, in k order, as decoding inside the loop */
    double *da = qf_ref_alloc((size_t)(M * K) * sizeof(double));
    double *db = qf_ref_alloc((size_t)(N * K) * sizeof(double));
    for (int64_t i = 0; i < M * K; i++)
        da[i] = qf_fp8_to_float_ref(fmt_a, a[i]);
    for (int64_t i = 0; i < N * K; i++)
        db[i] = qf_fp8_to_float_ref(fmt_b, b[i]);
    qf_gemm_f64_ref(da, db, (double)sa * (double)sb, bias, M, N, K, y);
    free(da);
    free(db);
}

/* }================================================================== */

void qf_gemm_f64_ref(const double *a, const double *b, double alpha, const double *bias,
                     int64_t M, int64_t N, int64_t K, double *y) {
    QF_ASSERT(M >= 0 && N >= 0 && K >= 0 && a && b && y);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0.0;
            for (int64_t k = 0; k < K; k++)
                acc += a[m * K + k] * b[n * K + k];
            y[m * N + n] = acc * alpha + (bias ? bias[n] : 0.0);
        }
}

void qf_transpose_f64_ref(const double *in, int64_t R, int64_t C, double *out) {
    QF_ASSERT(R >= 0 && C >= 0 && in && out && in != out);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            out[c * R + r] = in[r * C + c];
}
