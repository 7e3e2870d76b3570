/* ref_fp8_current.c: scalar C references for fp8_current (numerics 2.2): scale, norm + quantize. */
#include "ref_fp8_current.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "ref.h"
#include "status.h"

/* NOTES: the oracle of the current-scaling kernels. Nothing here normalizes or converts on its
 * own: y and the FP8 bytes come from qf_norm_quantize_fp8_ref (ref.c), run twice, first with no
 * outputs for the amax, then with the scale that amax gives. So the two families can never
 * disagree on the norm arithmetic or the rounding. Build with -ffp-contract=off. */

/* {================================================================== scale */

float qf_fp8_scale_from_amax_ref(float amax, float amax_epsilon, int power_2_scales, qf_dtype fmt,
                                 float value_for_inf) {
    const float fp8_max = qf_fp8_max(fmt); /* asserts fmt */
    /* TE's `if (amax < eps) amax = eps`: a NaN amax fails the comparison and stays NaN, where
     * fmaxf(NaN, eps) would return eps and hide it. */
    const float a = amax < amax_epsilon ? amax_epsilon : amax;
    if (a == 0.0f || isinf(a) || isnan(a))
        return 1.0f;
    float s = fp8_max / a; /* IEEE division: correctly rounded, as __fdiv_rn */
    if (isinf(s))
        s = value_for_inf; /* a below fp8_max / value_for_inf, e.g. the subnormal 1e-40 */
    if (power_2_scales) {
        /* s is normal and positive: clearing the mantissa floors it to a power of two */
        s = qf_f32_from_bits(qf_f32_bits(s) & 0xFF800000u);
    }
    return s;
}

float qf_fp8_current_scale_ref(float amax, float amax_epsilon, int power_2_scales, qf_dtype fmt) {
    return qf_fp8_scale_from_amax_ref(amax, amax_epsilon, power_2_scales, fmt, FLT_MAX);
}

float qf_fp8_scale_inv_ref(float scale) {
    return 1.0f / scale; /* IEEE division: correctly rounded, as __frcp_rn */
}

/* }================================================================== */

/* {================================================================== norm + quantize */

static int is_input_dtype(qf_dtype dt) {
    return dt == QF_DTYPE_FP32 || dt == QF_DTYPE_FP16 || dt == QF_DTYPE_BF16;
}

qf_status qf_ref_check_norm_src(const char *fn, const qf_norm_src *s) {
    if (!s)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: src must not be NULL", fn);
    if (!s->x)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: x must not be NULL", fn);
    if (s->M < 0 || s->K < 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: M (%lld) must be >= 0 and K (%lld) >= 1", fn,
                            (long long)s->M, (long long)s->K);
    if ((unsigned)s->norm >= QF_NORM_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: unknown norm %d", fn, (int)s->norm);
    if ((s->norm != QF_NORM_NONE && !s->gamma) || (s->norm == QF_NORM_LAYERNORM && !s->beta))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: the norm needs gamma (and beta)", fn);
    if (!is_input_dtype(s->xdt) || (s->norm != QF_NORM_NONE && !is_input_dtype(s->gdt)))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: x and gamma/beta must be bf16, fp16 or fp32",
                            fn);
    return QF_OK;
}

static qf_status check_opts(const char *fn, const qf_fp8_current_opts *o) {
    if (o->fmt != QF_DTYPE_E4M3 && o->fmt != QF_DTYPE_E5M2)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: fmt (%d) must be E4M3 or E5M2", fn,
                            (int)o->fmt);
    if (!(o->amax_epsilon >= 0.0f))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: amax_epsilon (%g) must be >= 0", fn,
                            (double)o->amax_epsilon);
    return QF_OK;
}

/* One pass of qf_norm_quantize_fp8_ref over the whole source. */
static void run_pass(const qf_fp8_current_src *s, float scale, qf_dtype fmt, uint8_t *row,
                     uint8_t *col, float *mu_out, float *rsigma_out, float *amax) {
    qf_norm_quantize_fp8_ref(s->norm, s->zcg, s->xdt, s->x, s->gdt, s->gamma, s->beta, s->M, s->K,
                             s->eps, s->mu_in, s->rsigma_in, scale, fmt, row, col, mu_out,
                             rsigma_out, amax);
}

qf_status qf_fp8_current_amax_ref(const qf_fp8_current_src *src, float *amax, float *mu_out,
                                  float *rsigma_out) {
    static const char fn[] = "qf_fp8_current_amax_ref";
    QF_TRY(qf_ref_check_norm_src(fn, src));
    if (!amax)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: amax must not be NULL", fn);
    /* No data outputs: only y's amax and the statistics; the scale and format are unused. */
    run_pass(src, 1.0f, QF_DTYPE_E4M3, NULL, NULL, mu_out, rsigma_out, amax);
    return QF_OK;
}

/* The fused reference under the public name fn (for its error messages). */
static qf_status nq_current(const char *fn, const qf_fp8_current_src *src,
                            const qf_fp8_current_opts *opts, const qf_fp8_current_out *out) {
    QF_TRY(qf_ref_check_norm_src(fn, src));
    if (!opts || !out)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: opts and out must not be NULL", fn);
    QF_TRY(check_opts(fn, opts));
    /* Pass 1: the amax of the whole tensor, before any element is cast (numerics 2.2). */
    float amax = 0.0f;
    run_pass(src, 1.0f, opts->fmt, NULL, NULL, out->mu, out->rsigma, &amax);
    const float scale =
        qf_fp8_current_scale_ref(amax, opts->amax_epsilon, opts->power_2_scales, opts->fmt);
    /* Pass 2: the same y (same statistics: given, or recomputed identically), cast once. */
    if (out->row || out->col)
        run_pass(src, scale, opts->fmt, out->row, out->col, NULL, NULL, NULL);
    if (out->amax)
        *out->amax = amax;
    if (out->scale)
        *out->scale = scale;
    if (out->scale_inv)
        *out->scale_inv = qf_fp8_scale_inv_ref(scale);
    return QF_OK;
}

qf_status qf_norm_quantize_fp8_current_ref(const qf_fp8_current_src *src,
                                           const qf_fp8_current_opts *opts,
                                           const qf_fp8_current_out *out) {
    return nq_current("qf_norm_quantize_fp8_current_ref", src, opts, out);
}

qf_status qf_quantize_fp8_current_ref(qf_dtype xdt, const void *x, int64_t M, int64_t K,
                                      const qf_fp8_current_opts *opts,
                                      const qf_fp8_current_out *out) {
    const qf_fp8_current_src src = {.norm = QF_NORM_NONE, .xdt = xdt, .x = x, .M = M, .K = K};
    qf_fp8_current_out plain = {0};
    if (out) { /* no statistics for a plain quantize */
        plain = *out;
        plain.mu = plain.rsigma = NULL;
    }
    return nq_current("qf_quantize_fp8_current_ref", &src, opts, out ? &plain : NULL);
}

/* }================================================================== */
