/* test_mlp_model.c: the fp64 LayerNorm + MLP model (runtime/tools/mlp_model.c), the reference of
 * the GPU MLP tests and the demo's training baseline. Its backward is checked against central
 * differences of its own forward, for every activation and both norms: for the scalar
 * L = sum(dy * y) with a fixed random dy, dL/dp of every parameter and of x must match
 * (L(p + e) - L(p - e)) / 2e within 1e-6 relative to the gradient's largest entry. A dropped
 * term (the mean of dxh, a bias, silu's factor) fails by orders of magnitude more. No GPU. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "mlp_model.h"

enum { M = 5, K = 8, F = 6, N = 7 };

static uint64_t g_state = 12345;

static double urand(void) { /* uniform in [-1, 1) */
    g_state = g_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_state >> 11) / 4503599627370496.0 - 1.0;
}

static void fill(double *v, int64_t n, double scale, double offset) {
    for (int64_t i = 0; i < n; i++)
        v[i] = offset + scale * urand();
}

/* L = sum(dy * y) of the model at x. */
static double objective(const qf_mlp_params *p, const double *x, const double *dy) {
    double y[M * N], l = 0.0;
    assert_int_equal(qf_mlp_forward(p, x, M, y, NULL), 0);
    for (int i = 0; i < M * N; i++)
        l += dy[i] * y[i];
    return l;
}

/* Compares the analytic gradient g [n] of the array v [n] (inside p or x) with differences. */
static void check(const char *what, double *v, const double *g, int64_t n,
                  const qf_mlp_params *p, const double *x, const double *dy) {
    double gmax = 0.0, emax = 0.0;
    for (int64_t i = 0; i < n; i++)
        gmax = fmax(gmax, fabs(g[i]));
    for (int64_t i = 0; i < n; i++) {
        const double keep = v[i], e = 1e-5;
        v[i] = keep + e;
        const double lp = objective(p, x, dy);
        v[i] = keep - e;
        const double lm = objective(p, x, dy);
        v[i] = keep;
        emax = fmax(emax, fabs((lp - lm) / (2 * e) - g[i]));
    }
    if (!(gmax > 0.0) || emax > 1e-6 * gmax)
        fail_msg("%s: max |analytic - difference| %.3e, max |gradient| %.3e", what, emax, gmax);
}

static void run(qf_norm norm, qf_activation act) {
    const int64_t Fin = act == QF_ACT_SWIGLU ? 2 * F : F;
    double x[M * K], gamma[K], beta[K], w1[2 * F * K], b1[2 * F], w2[N * F], b2[N], dy[M * N];
    fill(x, M * K, 1.0, 0.3), fill(gamma, K, 0.3, 1.0), fill(beta, K, 0.2, 0.0);
    fill(w1, Fin * K, 0.5, 0.0), fill(b1, Fin, 0.3, 0.0), fill(w2, N * F, 0.5, 0.0);
    fill(b2, N, 0.3, 0.0), fill(dy, M * N, 1.0, 0.0);
    const qf_mlp_params p = {.K = K, .F = F, .N = N, .norm = norm, .act = act, .eps = 1e-5,
                             .gamma = gamma, .beta = norm == QF_NORM_LAYERNORM ? beta : NULL,
                             .w1 = w1, .b1 = b1, .w2 = w2, .b2 = b2};
    double y[M * N], dx[M * K], dg[K], db[K], dw1[2 * F * K], db1[2 * F], dw2[N * F], db2[N];
    qf_mlp_saved s;
    assert_int_equal(qf_mlp_forward(&p, x, M, y, &s), 0);
    assert_int_equal(s.M, M);
    const qf_mlp_grads g = {.dx = dx, .dgamma = dg, .dbeta = db, .dw1 = dw1, .db1 = db1,
                            .dw2 = dw2, .db2 = db2};
    assert_int_equal(qf_mlp_backward(&p, &s, dy, &g), 0);
    qf_mlp_saved_free(&s);
    check("dx", x, dx, M * K, &p, x, dy);
    check("dgamma", gamma, dg, K, &p, x, dy);
    if (norm == QF_NORM_LAYERNORM)
        check("dbeta", beta, db, K, &p, x, dy);
    check("dW1", w1, dw1, Fin * K, &p, x, dy);
    check("db1", b1, db1, Fin, &p, x, dy);
    check("dW2", w2, dw2, N * F, &p, x, dy);
    check("db2", b2, db2, N, &p, x, dy);
}

static void test_gradients(void **state) {
    (void)state;
    for (int act = 0; act < QF_ACT_COUNT; act++) {
        run(QF_NORM_LAYERNORM, (qf_activation)act);
        run(QF_NORM_RMSNORM, (qf_activation)act);
    }
}

/* The saved tensors are the forward's: xn = norm(x) with gamma, a = act(h). */
static void test_saved(void **state) {
    (void)state;
    double x[M * K], gamma[K], w1[F * K], w2[N * F], y[M * N];
    fill(x, M * K, 1.0, 0.0), fill(gamma, K, 0.3, 1.0), fill(w1, F * K, 0.5, 0.0);
    fill(w2, N * F, 0.5, 0.0);
    const qf_mlp_params p = {.K = K, .F = F, .N = N, .norm = QF_NORM_RMSNORM,
                             .act = QF_ACT_RELU, .eps = 1e-6, .gamma = gamma, .w1 = w1, .w2 = w2};
    qf_mlp_saved s;
    assert_int_equal(qf_mlp_forward(&p, x, M, y, &s), 0);
    for (int m = 0; m < M; m++) {
        double ss = 0.0;
        for (int k = 0; k < K; k++)
            ss += x[m * K + k] * x[m * K + k];
        const double rs = 1.0 / sqrt(ss / K + 1e-6);
        assert_true(fabs(s.rsigma[m] - rs) <= 1e-12 * rs);
        for (int k = 0; k < K; k++)
            assert_true(fabs(s.xn[m * K + k] - x[m * K + k] * rs * gamma[k]) <= 1e-12);
        for (int f = 0; f < F; f++)
            assert_true(s.a[m * F + f] == (s.h[m * F + f] > 0.0 ? s.h[m * F + f] : 0.0));
    }
    qf_mlp_saved_free(&s);
    assert_null(s.h);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gradients),
                                       cmocka_unit_test(test_saved)};
    return cmocka_run_group_tests_name("mlp_model", tests, NULL, NULL);
}
