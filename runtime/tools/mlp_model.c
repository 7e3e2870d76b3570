/* mlp_model.c: the LayerNorm + MLP block in double precision (mlp_model.h, numerics 6). */
#include "mlp_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_A 0.044715

static int64_t fin_of(const qf_mlp_params *p) {
    return p->act == QF_ACT_SWIGLU ? 2 * p->F : p->F;
}

static double silu(double v) {
    return v / (1.0 + exp(-v));
}

void qf_mlp_act_row(qf_activation act, const double *h, int64_t F, double *a) {
    for (int64_t f = 0; f < F; f++) {
        const double v = h[f];
        if (act == QF_ACT_GELU)
            a[f] = 0.5 * v * (1.0 + tanh(GELU_C * (v + GELU_A * v * v * v)));
        else if (act == QF_ACT_RELU)
            a[f] = v > 0.0 ? v : 0.0;
        else
            a[f] = silu(v) * h[F + f];
    }
}

void qf_mlp_act_bwd_row(qf_activation act, const double *h, const double *da, int64_t F,
                        double *dh) {
    for (int64_t f = 0; f < F; f++) {
        const double v = h[f], d = da[f];
        if (act == QF_ACT_GELU) {
            const double t = tanh(GELU_C * (v + GELU_A * v * v * v));
            dh[f] = d * (0.5 * (1.0 + t) +
                         0.5 * v * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * v * v));
        } else if (act == QF_ACT_RELU) {
            dh[f] = v > 0.0 ? d : 0.0;
        } else {
            const double s = 1.0 / (1.0 + exp(-v));
            dh[f] = d * h[F + f] * s * (1.0 + v * (1.0 - s));
            dh[F + f] = d * silu(v);
        }
    }
}

/* Four rows of a against every row of b at once (four dot products share each load of b). */
void qf_mlp_mm_nt(const double *a, const double *b, const double *bias, int64_t R, int64_t C,
                  int64_t Kd, double *out) {
#pragma omp parallel for schedule(static)
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
        const int64_t nr = R - r0 < 4 ? R - r0 : 4;
        const double *ar[4];
        for (int64_t i = 0; i < 4; i++)
            ar[i] = a + (r0 + (i < nr ? i : 0)) * Kd;
        for (int64_t c = 0; c < C; c++) {
            const double *bc = b + c * Kd;
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (int64_t k = 0; k < Kd; k++) {
                s0 += ar[0][k] * bc[k], s1 += ar[1][k] * bc[k];
                s2 += ar[2][k] * bc[k], s3 += ar[3][k] * bc[k];
            }
            const double s[4] = {s0, s1, s2, s3}, bb = bias ? bias[c] : 0.0;
            for (int64_t i = 0; i < nr; i++)
                out[(r0 + i) * C + c] = s[i] + bb;
        }
    }
}

/* t [C, R] = the transpose of a [R, C]; NULL when out of memory. */
static double *transpose(const double *a, int64_t R, int64_t C) {
    double *t = malloc((size_t)(R * C) * sizeof *t);
    if (!t)
        return NULL;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++)
        for (int64_t r = 0; r < R; r++)
            t[c * R + r] = a[r * C + c];
    return t;
}

void qf_mlp_saved_free(qf_mlp_saved *s) {
    free(s->xh), free(s->rsigma), free(s->xn), free(s->h), free(s->a);
    memset(s, 0, sizeof *s);
}

int qf_mlp_forward(const qf_mlp_params *p, const double *x, int64_t M, double *y,
                   qf_mlp_saved *s) {
    const int64_t K = p->K, F = p->F, Fin = fin_of(p);
    const int ln = p->norm == QF_NORM_LAYERNORM;
    qf_mlp_saved t = {.M = M};
    t.xh = malloc((size_t)(M * K) * 8), t.rsigma = malloc((size_t)M * 8);
    t.xn = malloc((size_t)(M * K) * 8), t.h = malloc((size_t)(M * Fin) * 8);
    t.a = malloc((size_t)(M * F) * 8);
    if (!t.xh || !t.rsigma || !t.xn || !t.h || !t.a) {
        qf_mlp_saved_free(&t);
        return -1;
    }
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const double *xr = x + m * K;
        double mu = 0.0, var = 0.0;
        for (int64_t k = 0; ln && k < K; k++)
            mu += xr[k];
        mu /= (double)K;
        for (int64_t k = 0; k < K; k++)
            var += (xr[k] - mu) * (xr[k] - mu);
        const double rs = 1.0 / sqrt(var / (double)K + p->eps);
        t.rsigma[m] = rs;
        for (int64_t k = 0; k < K; k++) {
            const double xh = (xr[k] - mu) * rs;
            t.xh[m * K + k] = xh;
            t.xn[m * K + k] = xh * p->gamma[k] + (ln && p->beta ? p->beta[k] : 0.0);
        }
    }
    qf_mlp_mm_nt(t.xn, p->w1, p->b1, M, Fin, K, t.h);
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++)
        qf_mlp_act_row(p->act, t.h + m * Fin, F, t.a + m * F);
    qf_mlp_mm_nt(t.a, p->w2, p->b2, M, p->N, F, y);
    if (s)
        *s = t;
    else
        qf_mlp_saved_free(&t);
    return 0;
}

/* bias [C] = the sum over the R rows of d [R, C], in row order. */
static void col_sum(const double *d, int64_t R, int64_t C, double *bias) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++) {
        double acc = 0.0;
        for (int64_t r = 0; r < R; r++)
            acc += d[r * C + c];
        bias[c] = acc;
    }
}

int qf_mlp_backward(const qf_mlp_params *p, const qf_mlp_saved *s, const double *dy,
                    const qf_mlp_grads *g) {
    const int64_t M = s->M, K = p->K, F = p->F, N = p->N, Fin = fin_of(p);
    const int ln = p->norm == QF_NORM_LAYERNORM;
    double *w2t = transpose(p->w2, N, F), *w1t = transpose(p->w1, Fin, K);
    double *dyt = transpose(dy, M, N), *at = transpose(s->a, M, F);
    double *xnt = transpose(s->xn, M, K);
    double *da = malloc((size_t)(M * F) * 8), *dh = malloc((size_t)(M * Fin) * 8);
    double *dxn = malloc((size_t)(M * K) * 8);
    double *dht = NULL;
    int rc = -1;
    if (!w2t || !w1t || !dyt || !at || !xnt || !da || !dh || !dxn)
        goto out;
    qf_mlp_mm_nt(dy, w2t, NULL, M, F, N, da); /* da = dy W2 */
    if (g->dw2)
        qf_mlp_mm_nt(dyt, at, NULL, N, F, M, g->dw2); /* dW2 = dy^T a */
    if (g->db2)
        col_sum(dy, M, N, g->db2);
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++)
        qf_mlp_act_bwd_row(p->act, s->h + m * Fin, da + m * F, F, dh + m * Fin);
    if (g->db1)
        col_sum(dh, M, Fin, g->db1);
    qf_mlp_mm_nt(dh, w1t, NULL, M, K, Fin, dxn); /* dxn = dh W1 */
    if (g->dw1) {
        if (!(dht = transpose(dh, M, Fin)))
            goto out;
        qf_mlp_mm_nt(dht, xnt, NULL, Fin, K, M, g->dw1); /* dW1 = dh^T xn */
    }
    if (g->dx)
#pragma omp parallel for schedule(static)
        for (int64_t m = 0; m < M; m++) {
            const double *d = dxn + m * K, *xh = s->xh + m * K;
            double s1 = 0.0, s2 = 0.0;
            for (int64_t k = 0; k < K; k++)
                s1 += d[k] * p->gamma[k], s2 += d[k] * p->gamma[k] * xh[k];
            for (int64_t k = 0; k < K; k++)
                g->dx[m * K + k] = s->rsigma[m] * (d[k] * p->gamma[k] -
                                                   (ln ? s1 / (double)K : 0.0) -
                                                   xh[k] * s2 / (double)K);
        }
    if (g->dgamma || (ln && g->dbeta))
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < K; k++) {
            double sg = 0.0, sb = 0.0;
            for (int64_t m = 0; m < M; m++)
                sg += dxn[m * K + k] * s->xh[m * K + k], sb += dxn[m * K + k];
            if (g->dgamma)
                g->dgamma[k] = sg;
            if (ln && g->dbeta)
                g->dbeta[k] = sb;
        }
    rc = 0;
out:
    free(w2t), free(w1t), free(dyt), free(at), free(xnt), free(da), free(dh), free(dxn), free(dht);
    return rc;
}
