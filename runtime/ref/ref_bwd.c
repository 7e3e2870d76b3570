/* ref_bwd.c: the backward references (ref_bwd.h, numerics 6). */
#include "ref_bwd.h"

#include <math.h>
#include <stdlib.h>

#include "ref.h"
#include "status.h"

/* ---- norm backward */

/* g of column k: gamma (+1 in fp32 when zero-centered). */
static float qf_bwd_gamma(qf_dtype gdt, const void *gamma, int zcg, int64_t k) {
    const float g = qf_load_as_float(gamma, gdt, k);
    return zcg ? g + 1.0f : g;
}

void qf_norm_backward_ref(qf_norm norm, int zcg, qf_dtype xdt, const void *x, qf_dtype gdt,
                          const void *gamma, const float *dxn, const float *mu,
                          const float *rsigma, int64_t M, int64_t K, float *dx, float *dgamma,
                          float *dbeta) {
    QF_ASSERT(norm == QF_NORM_LAYERNORM || norm == QF_NORM_RMSNORM);
    QF_ASSERT(K >= 1 && M >= 0 && x && gamma && dxn && rsigma && dx);
    QF_ASSERT(norm == QF_NORM_RMSNORM || mu);
    const int ln = norm == QF_NORM_LAYERNORM;
    float *xh = qf_ref_alloc((size_t)K * sizeof(float));
    for (int64_t k = 0; dgamma && k < K; k++)
        dgamma[k] = 0.0f;
    for (int64_t k = 0; ln && dbeta && k < K; k++)
        dbeta[k] = 0.0f;
    for (int64_t r = 0; r < M; r++) {
        const float m = ln ? mu[r] : 0.0f, rs = rsigma[r];
        float s1 = 0.0f, s2 = 0.0f; /* sum dxh, sum dxh * xh */
        for (int64_t k = 0; k < K; k++) {
            const float xv = qf_load_as_float(x, xdt, r * K + k);
            xh[k] = ln ? (xv - m) * rs : xv * rs;
            const float dxh = dxn[r * K + k] * qf_bwd_gamma(gdt, gamma, zcg, k);
            s1 += dxh;
            s2 += dxh * xh[k];
        }
        const float m1 = ln ? s1 / (float)K : 0.0f, m2 = s2 / (float)K;
        for (int64_t k = 0; k < K; k++) {
            const float d = dxn[r * K + k];
            const float dxh = d * qf_bwd_gamma(gdt, gamma, zcg, k);
            dx[r * K + k] = rs * (dxh - m1 - xh[k] * m2);
            if (dgamma)
                dgamma[k] += d * xh[k];
            if (ln && dbeta)
                dbeta[k] += d;
        }
    }
    free(xh);
}

void qf_dbias_ref(qf_dtype dydt, const void *dy, int64_t M, int64_t N, float *dbias) {
    QF_ASSERT(M >= 0 && N >= 0 && dy && dbias);
    for (int64_t n = 0; n < N; n++)
        dbias[n] = 0.0f;
    for (int64_t r = 0; r < M; r++)
        for (int64_t n = 0; n < N; n++)
            dbias[n] += qf_load_as_float(dy, dydt, r * N + n);
}

/* ---- activations */

#define QF_GELU_C 0.7978845608028654f /* fl(sqrt(2 / pi)) */
#define QF_GELU_A 0.044715f

/* 0.5 (1 + tanh(u)) = sigmoid(2 u): gelu = h s with s = 1 / (1 + exp(-2 u)), an identity that
 * keeps its relative accuracy where 1 + tanh(u) cancels (h << 0) and costs one exponential. */
float qf_gelu_ref(float h) {
    const float u = QF_GELU_C * (h + QF_GELU_A * h * h * h);
    const float s = 1.0f / (1.0f + expf(-2.0f * u));
    return h * s;
}

/* d/dh of h sigmoid(2 u), u = c (h + a h^3): s + 2 h s (1 - s) u', u' = c (1 + 3 a h^2) (the
 * derivative of 0.5 h (1 + tanh(u)): 0.5 (1 + t) = s, 0.5 (1 - t^2) = 2 s (1 - s)). */
float qf_gelu_grad_ref(float h) {
    const float u = QF_GELU_C * (h + QF_GELU_A * h * h * h);
    const float s = 1.0f / (1.0f + expf(-2.0f * u));
    const float du = QF_GELU_C * (1.0f + 3.0f * QF_GELU_A * h * h);
    return s + 2.0f * h * s * (1.0f - s) * du;
}

float qf_silu_ref(float v) {
    return v * (1.0f / (1.0f + expf(-v)));
}

float qf_silu_grad_ref(float v) {
    const float s = 1.0f / (1.0f + expf(-v));
    return s * (1.0f + v * (1.0f - s));
}

void qf_activation_ref(qf_activation act, const float *h, int64_t M, int64_t F, float *a) {
    QF_ASSERT((unsigned)act < QF_ACT_COUNT && M >= 0 && F >= 1 && h && a);
    const int64_t fin = act == QF_ACT_SWIGLU ? 2 * F : F;
    for (int64_t r = 0; r < M; r++)
        for (int64_t f = 0; f < F; f++) {
            const float v = h[r * fin + f];
            a[r * F + f] = act == QF_ACT_GELU     ? qf_gelu_ref(v)
                           : act == QF_ACT_RELU   ? (v > 0.0f ? v : 0.0f)
                                                  : qf_silu_ref(v) * h[r * fin + F + f];
        }
}

void qf_activation_backward_ref(qf_activation act, const float *h, const float *da, int64_t M,
                                int64_t F, float *dh) {
    QF_ASSERT((unsigned)act < QF_ACT_COUNT && M >= 0 && F >= 1 && h && da && dh);
    const int64_t fin = act == QF_ACT_SWIGLU ? 2 * F : F;
    for (int64_t r = 0; r < M; r++)
        for (int64_t f = 0; f < F; f++) {
            const float v = h[r * fin + f], d = da[r * F + f];
            if (act == QF_ACT_GELU) {
                dh[r * fin + f] = d * qf_gelu_grad_ref(v);
            } else if (act == QF_ACT_RELU) {
                dh[r * fin + f] = v > 0.0f ? d : 0.0f;
            } else {
                const float h2 = h[r * fin + F + f];
                dh[r * fin + f] = d * h2 * qf_silu_grad_ref(v);
                dh[r * fin + F + f] = d * qf_silu_ref(v);
            }
        }
}
