/* test_ref_bwd.c: the backward references (runtime/ref/ref_bwd.c, numerics 6) against
 * independent computations in double: central finite differences of the forward functions (so
 * a wrong formula fails, not only a wrong implementation), and the fp64 evaluation of the same
 * formulas (the numerics contract's "within rel 1e-5 of fp64 for the same dxn"). */
#include "test_util.h"

#include <math.h>

#include "ref_bwd.h"

/* ||a - b|| / ||b|| over n values (a fp32, b double). */
static double rel_err(const float *a, const double *b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* ---- norm backward */

typedef struct norm_case {
    qf_norm norm;
    int zcg;
    int64_t M, K;
} norm_case;

/* L(x, gamma, beta) = sum dxn * norm(x) over one row, in double, with the row's own mean and
 * variance (what the forward's mu and rsigma are, to fp32 rounding). */
static double row_loss(qf_norm norm, int zcg, const double *x, const double *g, const double *b,
                       const double *dxn, int64_t K, double eps) {
    double mu = 0.0, var = 0.0, l = 0.0;
    for (int64_t k = 0; norm == QF_NORM_LAYERNORM && k < K; k++)
        mu += x[k] / (double)K;
    for (int64_t k = 0; k < K; k++)
        var += (x[k] - mu) * (x[k] - mu) / (double)K;
    const double rs = 1.0 / sqrt(var + eps);
    for (int64_t k = 0; k < K; k++) {
        const double gk = zcg ? g[k] + 1.0 : g[k];
        l += dxn[k] * ((x[k] - mu) * rs * gk + (norm == QF_NORM_LAYERNORM ? b[k] : 0.0));
    }
    return l;
}

static void check_norm_case(const norm_case *c) {
    const int64_t M = c->M, K = c->K, n = M * K;
    const double eps = 1e-5, h = 1e-4;
    uint64_t s = 1234 + (uint64_t)K;
    float *x = malloc((size_t)n * 4), *dxn = malloc((size_t)n * 4), *gam = malloc((size_t)K * 4);
    float *mu = malloc((size_t)M * 4), *rs = malloc((size_t)M * 4), *dx = malloc((size_t)n * 4);
    float *dg = malloc((size_t)K * 4), *db = malloc((size_t)K * 4);
    double *fd_x = malloc((size_t)n * 8), *fd_g = calloc((size_t)K, 8), *fd_b = calloc((size_t)K, 8);
    double *xr = malloc((size_t)K * 8), *gd = malloc((size_t)K * 8), *bd = calloc((size_t)K, 8);
    double *dd = malloc((size_t)K * 8);
    assert_true(x && dxn && gam && mu && rs && dx && dg && db && fd_x && fd_g && fd_b && xr && gd &&
                bd && dd);
    for (int64_t i = 0; i < n; i++) {
        x[i] = 3.0f * qf_test_rng_uniform(&s) + 0.5f;
        dxn[i] = qf_test_rng_uniform(&s);
    }
    for (int64_t k = 0; k < K; k++)
        gam[k] = c->zcg ? 0.1f * qf_test_rng_uniform(&s) : 1.0f + 0.2f * qf_test_rng_uniform(&s);
    qf_norm_stats_ref(c->norm, QF_DTYPE_FP32, x, M, K, (float)eps, mu, rs);
    qf_norm_backward_ref(c->norm, c->zcg, QF_DTYPE_FP32, x, QF_DTYPE_FP32, gam, dxn, mu, rs, M, K,
                         dx, dg, db);
    for (int64_t k = 0; k < K; k++)
        gd[k] = gam[k];
    for (int64_t r = 0; r < M; r++) {
        for (int64_t k = 0; k < K; k++)
            xr[k] = x[r * K + k], dd[k] = dxn[r * K + k];
        for (int64_t k = 0; k < K; k++) { /* d/dx, d/dgamma, d/dbeta by central differences */
            const double x0 = xr[k], g0 = gd[k];
            xr[k] = x0 + h;
            const double lp = row_loss(c->norm, c->zcg, xr, gd, bd, dd, K, eps);
            xr[k] = x0 - h;
            const double lm = row_loss(c->norm, c->zcg, xr, gd, bd, dd, K, eps);
            xr[k] = x0;
            fd_x[r * K + k] = (lp - lm) / (2 * h);
            gd[k] = g0 + h;
            const double gp = row_loss(c->norm, c->zcg, xr, gd, bd, dd, K, eps);
            gd[k] = g0 - h;
            const double gm = row_loss(c->norm, c->zcg, xr, gd, bd, dd, K, eps);
            gd[k] = g0;
            fd_g[k] += (gp - gm) / (2 * h);
            fd_b[k] += dd[k]; /* L is linear in beta */
        }
    }
    const double ex = rel_err(dx, fd_x, n), eg = rel_err(dg, fd_g, K);
    if (ex > 1e-5 || eg > 1e-5)
        fail_msg("norm %d zcg %d [%lld, %lld]: dx rel err %.3g, dgamma %.3g (limit 1e-5)",
                 (int)c->norm, c->zcg, (long long)M, (long long)K, ex, eg);
    if (c->norm == QF_NORM_LAYERNORM && rel_err(db, fd_b, K) > 1e-6)
        fail_msg("dbeta rel err %.3g", rel_err(db, fd_b, K));
    free(x), free(dxn), free(gam), free(mu), free(rs), free(dx), free(dg), free(db);
    free(fd_x), free(fd_g), free(fd_b), free(xr), free(gd), free(bd), free(dd);
}

static void test_norm_backward(void **state) {
    (void)state;
    static const norm_case cases[] = {
        {QF_NORM_LAYERNORM, 0, 7, 64},  {QF_NORM_LAYERNORM, 1, 5, 96}, {QF_NORM_LAYERNORM, 0, 3, 1},
        {QF_NORM_RMSNORM, 0, 7, 64},    {QF_NORM_RMSNORM, 1, 4, 200},  {QF_NORM_LAYERNORM, 0, 2, 513},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_norm_case(&cases[i]);
}

/* A bf16 x gives the same dx as its fp32 values (the input dtype is only how x is read). */
static void test_norm_backward_dtype(void **state) {
    (void)state;
    enum { M = 3, K = 40 };
    uint64_t s = 7;
    uint16_t xb[M * K];
    float xf[M * K], dxn[M * K], g[K], mu[M], rs[M], a[M * K], b[M * K];
    for (int i = 0; i < M * K; i++) {
        xb[i] = qf_float_to_bf16(2.0f * qf_test_rng_uniform(&s));
        xf[i] = qf_bf16_to_float(xb[i]);
        dxn[i] = qf_test_rng_uniform(&s);
    }
    for (int k = 0; k < K; k++)
        g[k] = 1.0f + 0.1f * qf_test_rng_uniform(&s);
    qf_norm_stats_ref(QF_NORM_LAYERNORM, QF_DTYPE_FP32, xf, M, K, 1e-5f, mu, rs);
    qf_norm_backward_ref(QF_NORM_LAYERNORM, 0, QF_DTYPE_BF16, xb, QF_DTYPE_FP32, g, dxn, mu, rs, M,
                         K, a, NULL, NULL);
    qf_norm_backward_ref(QF_NORM_LAYERNORM, 0, QF_DTYPE_FP32, xf, QF_DTYPE_FP32, g, dxn, mu, rs, M,
                         K, b, NULL, NULL);
    assert_memory_equal(a, b, sizeof a);
}

/* ---- dbias */

static void test_dbias(void **state) {
    (void)state;
    enum { M = 33, N = 17 };
    uint64_t s = 99;
    uint16_t dy[M * N];
    double want[N] = {0};
    float got[N];
    for (int i = 0; i < M * N; i++) {
        dy[i] = qf_float_to_bf16(qf_test_rng_uniform(&s));
        want[i % N] += qf_bf16_to_float(dy[i]);
    }
    qf_dbias_ref(QF_DTYPE_BF16, dy, M, N, got);
    assert_true(rel_err(got, want, N) < 1e-6);
}

/* ---- activations */

static double gelu_d(double h) {
    return 0.5 * h * (1.0 + tanh(sqrt(2.0 / M_PI) * (h + 0.044715 * h * h * h)));
}

static double silu_d(double v) {
    return v / (1.0 + exp(-v));
}

/* The scalar functions against double, and their derivatives against central differences. */
static void test_scalar_activations(void **state) {
    (void)state;
    const double h = 1e-5;
    for (double v = -8.0; v <= 8.0; v += 0.0625) {
        const float f = (float)v;
        if (fabs(qf_gelu_ref(f) - gelu_d(v)) > 1e-6 * (1.0 + fabs(v)))
            fail_msg("gelu(%g) = %.9g, want %.9g", v, (double)qf_gelu_ref(f), gelu_d(v));
        if (fabs(qf_silu_ref(f) - silu_d(v)) > 1e-6 * (1.0 + fabs(v)))
            fail_msg("silu(%g) = %.9g, want %.9g", v, (double)qf_silu_ref(f), silu_d(v));
        const double dg = (gelu_d(v + h) - gelu_d(v - h)) / (2 * h);
        const double ds = (silu_d(v + h) - silu_d(v - h)) / (2 * h);
        if (fabs(qf_gelu_grad_ref(f) - dg) > 1e-5 || fabs(qf_silu_grad_ref(f) - ds) > 1e-5)
            fail_msg("at %g: gelu' %.9g (fd %.9g), silu' %.9g (fd %.9g)", v,
                     (double)qf_gelu_grad_ref(f), dg, (double)qf_silu_grad_ref(f), ds);
    }
}

/* Each activation's backward is the gradient of sum(da * act(h)): central differences of
 * qf_activation_ref itself (in fp32, so the step is large and the tolerance loose) per input. */
static void test_activation_backward(void **state) {
    (void)state;
    enum { M = 3, F = 5 };
    for (int act = 0; act < QF_ACT_COUNT; act++) {
        const int fin = act == QF_ACT_SWIGLU ? 2 * F : F;
        uint64_t s = 5 + (uint64_t)act;
        float hv[M * 2 * F], da[M * F], dh[M * 2 * F], a[M * F];
        for (int i = 0; i < M * fin; i++) {
            hv[i] = 3.0f * qf_test_rng_uniform(&s);
            if (act == QF_ACT_RELU && fabsf(hv[i]) < 0.05f)
                hv[i] = 0.5f; /* away from the kink */
        }
        for (int i = 0; i < M * F; i++)
            da[i] = qf_test_rng_uniform(&s);
        qf_activation_backward_ref((qf_activation)act, hv, da, M, F, dh);
        for (int i = 0; i < M * fin; i++) {
            const float h0 = hv[i], step = 1e-2f;
            double lp = 0.0, lm = 0.0;
            hv[i] = h0 + step;
            qf_activation_ref((qf_activation)act, hv, M, F, a);
            for (int j = 0; j < M * F; j++)
                lp += (double)da[j] * a[j];
            hv[i] = h0 - step;
            qf_activation_ref((qf_activation)act, hv, M, F, a);
            for (int j = 0; j < M * F; j++)
                lm += (double)da[j] * a[j];
            hv[i] = h0;
            const double fd = (lp - lm) / (2.0 * step);
            if (fabs(fd - dh[i]) > 2e-3 * (1.0 + fabs(fd)))
                fail_msg("activation %d, input %d: dh %.6g, finite difference %.6g", act, i,
                         (double)dh[i], fd);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norm_backward),
        cmocka_unit_test(test_norm_backward_dtype),
        cmocka_unit_test(test_dbias),
        cmocka_unit_test(test_scalar_activations),
        cmocka_unit_test(test_activation_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
