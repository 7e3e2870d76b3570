/* test_gpu_ln_mlp.c: qf_layernorm_mlp_fwd + qf_layernorm_mlp_bwd (numerics 6) for every recipe
 * on the GPU, with gelu, swiglu and relu in turn (LayerNorm, RMSNorm for every other case),
 * x [M, K], W1 [Fin, K], W2 [N, F] and dy [M, N] in bf16:
 *   1. the activation and its backward against fp64 of the same h and da: a and dh are rounded
 *      once to bf16, so rel err <= 2^-8;
 *   2. y and every gradient against the unquantized MLP in fp64 (xn, h = xn W1^T + b1, a = act(h),
 *      y = a W2^T + b2 and their backward), ||got - ref|| / ||ref|| within the recipe's bound. Two
 *      quantized GEMMs run in series, each carrying its operands' rounding (one layer: 0.15 for
 *      per-tensor FP8 and MXFP8, 0.40 for NVFP4, test_gpu_ln_linear.c); in quadrature that is
 *      sqrt(2) times one layer's: 0.25 and 0.60. A wrong or missing stage gives an error near 1 or
 *      more. db2, from the unquantized dy: 2^-8;
 *   3. CUDA graphs (SPEC 6): the same step (both weights' quantization, forward, backward)
 *      captured on a stream in global capture mode (an allocation or synchronization inside fails
 *      it) and replayed twice writes the eager step's bytes into every output, poisoned before.
 * Without a GPU it skips. */
#include "test_gpu_util.h"

enum { M = 256, K = 192, F = 128, N = 192 };

static double mlp_bound(qf_family f) {
    return f == QF_FAMILY_NVFP4 ? 0.60 : 0.25;
}

/* The activations in double (numerics 6). */
static double d_silu(double v) {
    return v / (1.0 + exp(-v));
}

static double d_act(qf_activation act, const double *h, int64_t fin, int64_t f) {
    const double v = h[f];
    if (act == QF_ACT_GELU)
        return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    if (act == QF_ACT_RELU)
        return v > 0.0 ? v : 0.0;
    (void)fin;
    return d_silu(v) * h[F + f];
}

/* dh of one row (fin elements) from da (F) and h. */
static void d_act_bwd(qf_activation act, const double *h, const double *da, double *dh) {
    for (int64_t f = 0; f < F; f++) {
        const double v = h[f], d = da[f];
        if (act == QF_ACT_GELU) {
            const double c = 0.7978845608028654, a = 0.044715;
            const double t = tanh(c * (v + a * v * v * v));
            dh[f] = d * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + 3.0 * a * v * v));
        } else if (act == QF_ACT_RELU) {
            dh[f] = v > 0.0 ? d : 0.0;
        } else {
            const double s = 1.0 / (1.0 + exp(-v));
            dh[f] = d * h[F + f] * s * (1.0 + v * (1.0 - s));
            dh[F + f] = d * d_silu(v);
        }
    }
}

/* out[r, c] = sum_k a[r, k] b[c, k] (+ bias[c]) for a [R, Kd], b [C, Kd]. */
static void mm_nt(const double *a, const double *b, const double *bias, int64_t R, int64_t C,
                  int64_t Kd, double *out) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double s = bias ? bias[c] : 0.0;
            for (int64_t k = 0; k < Kd; k++)
                s += a[r * Kd + k] * b[c * Kd + k];
            out[r * C + c] = s;
        }
}

static double *to_f64(const dual *b, qf_dtype dt, int64_t n) {
    double *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = qf_load_as_float(b->h, dt, i);
    return v;
}

/* [C, R] = transpose of [R, C]. */
static double *tr(const double *a, int64_t R, int64_t C) {
    double *t = malloc((size_t)(R * C) * sizeof *t);
    assert_non_null(t);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++)
            t[c * R + r] = a[r * C + c];
    return t;
}

/* One MLP step (graph_check's step_fn): both weights (weight_changed), forward, backward. */
typedef struct mlp_step {
    qf_ctx_t *ctx;
    const qf_recipe *r;
    qf_ln_mlp *mlp;
    qf_ln_mlp_grads *g;
    const qf_tensor *x, *dy;
    qf_tensor *y;
} mlp_step;

static void mlp_step_on(void *arg, cudaStream_t st) {
    const mlp_step *m = arg;
    m->mlp->weight_changed = 1;
    QF_OK_OR_FAIL(qf_layernorm_mlp_fwd(m->ctx, m->r->name, m->x, m->mlp, m->y, st));
    QF_OK_OR_FAIL(qf_layernorm_mlp_bwd(m->ctx, m->r->name, m->x, m->dy, m->mlp, m->g, st));
}

static void run_recipe(qf_ctx_t *ctx, const qf_recipe *r, qf_norm norm, qf_activation act) {
    const int ln = norm == QF_NORM_LAYERNORM, Fin = act == QF_ACT_SWIGLU ? 2 * F : F;
    qf_scale_layout layout = QF_SCALE_LAYOUT_COMPACT;
    if (qf_family_get(r->family)->scale_layout)
        QF_OK_OR_FAIL(qf_gemm_scale_layout(r->name, qf_ctx_arch(ctx), &layout));
    dual x = dual_alloc(M * K * 2), gamma = dual_alloc(K * 2), beta = dual_alloc(K * 2);
    dual w1 = dual_alloc((size_t)Fin * K * 2), b1 = dual_alloc((size_t)Fin * 2);
    dual w2 = dual_alloc(N * F * 2), b2 = dual_alloc(N * 2), dy = dual_alloc(M * N * 2);
    dual h = dual_alloc((size_t)M * Fin * 2), a = dual_alloc(M * F * 2), y = dual_alloc(M * N * 2);
    dual one = dual_alloc(4);
    fill_uniform_bf16(x.h, M * K, 1.0f, 0.2f, 1), fill_uniform_bf16(gamma.h, K, 0.3f, 1.0f, 2);
    fill_uniform_bf16(beta.h, K, 0.2f, 0.0f, 3);
    fill_uniform_bf16(w1.h, (int64_t)Fin * K, 0.15f, 0.0f, 4);
    fill_uniform_bf16(b1.h, Fin, 0.3f, 0.0f, 5), fill_uniform_bf16(w2.h, N * F, 0.15f, 0.0f, 6);
    fill_uniform_bf16(b2.h, N, 0.3f, 0.0f, 7), fill_uniform_bf16(dy.h, M * N, 1.0f, 0.05f, 8);
    *(float *)one.h = 1.0f; /* fp8_delayed's scales */
    dual *up[] = {&x, &gamma, &beta, &w1, &b1, &w2, &b2, &dy, &one};
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++)
        dual_up(up[i]);
    qtensor xq, w1q, w2q, aq, dyq, dhq;
    qt_alloc(&xq, r->name, QF_ROLE_INPUT, norm, M, K, layout);
    qt_alloc(&w1q, r->name, QF_ROLE_WEIGHT, QF_NORM_NONE, Fin, K, layout);
    qt_alloc(&w2q, r->name, QF_ROLE_WEIGHT, QF_NORM_NONE, N, F, layout);
    qt_alloc(&aq, r->name, QF_ROLE_INPUT, QF_NORM_NONE, M, F, layout);
    qt_alloc(&dyq, r->name, QF_ROLE_GRAD, QF_NORM_NONE, M, N, layout);
    qt_alloc(&dhq, r->name, QF_ROLE_GRAD, QF_NORM_NONE, M, Fin, layout);
    qf_ln_mlp mlp = {
        .norm = {.norm = norm, .eps = 1e-5f, .gamma = tv(&gamma, QF_DTYPE_BF16, 1, K, 0),
                 .beta = ln ? tv(&beta, QF_DTYPE_BF16, 1, K, 0) : (qf_tensor){0}},
        .act = act, .w1 = tv(&w1, QF_DTYPE_BF16, 2, Fin, K),
        .b1 = tv(&b1, QF_DTYPE_BF16, 1, Fin, 0),
        .w2 = tv(&w2, QF_DTYPE_BF16, 2, N, F), .b2 = tv(&b2, QF_DTYPE_BF16, 1, N, 0),
        .x_scale = one.d, .w1_scale = one.d, .a_scale = one.d, .w2_scale = one.d,
        .xq = xq.q, .w1q = w1q.q, .w2q = w2q.q, .aq = aq.q,
        .h = tv(&h, QF_DTYPE_BF16, 2, M, Fin), .a = tv(&a, QF_DTYPE_BF16, 2, M, F),
        .weight_changed = 1};
    dual da = dual_alloc(M * F * 4), dh = dual_alloc((size_t)M * Fin * 2);
    dual dxn = dual_alloc(M * K * 4), dx = dual_alloc(M * K * 2), dg = dual_alloc(K * 4);
    dual db = dual_alloc(K * 4), dw1 = dual_alloc((size_t)Fin * K * 4), dw2 = dual_alloc(N * F * 4);
    dual db1 = dual_alloc((size_t)Fin * 2), db2 = dual_alloc(N * 2);
    qf_ln_mlp_grads g = {.dyq = dyq.q, .dhq = dhq.q, .dy_scale = one.d, .dh_scale = one.d,
                         .rng_dy = {5, 3}, .rng_dh = {6, 4},
                         .da = tv(&da, QF_DTYPE_FP32, 2, M, F),
                         .dh = tv(&dh, QF_DTYPE_BF16, 2, M, Fin),
                         .dxn = tv(&dxn, QF_DTYPE_FP32, 2, M, K),
                         .dw1 = tv(&dw1, QF_DTYPE_FP32, 2, Fin, K),
                         .dw2 = tv(&dw2, QF_DTYPE_FP32, 2, N, F),
                         .db1 = tv(&db1, QF_DTYPE_BF16, 1, Fin, 0),
                         .db2 = tv(&db2, QF_DTYPE_BF16, 1, N, 0)};
    g.norm.dx = tv(&dx, QF_DTYPE_BF16, 2, M, K);
    g.norm.dgamma = tv(&dg, QF_DTYPE_FP32, 1, K, 0);
    if (ln)
        g.norm.dbeta = tv(&db, QF_DTYPE_FP32, 1, K, 0);
    const qf_tensor tx = tv(&x, QF_DTYPE_BF16, 2, M, K), tdy = tv(&dy, QF_DTYPE_BF16, 2, M, N);
    qf_tensor ty = tv(&y, QF_DTYPE_BF16, 2, M, N);
    QF_OK_OR_FAIL(qf_layernorm_mlp_fwd(ctx, r->name, &tx, &mlp, &ty, NULL));
    QF_OK_OR_FAIL(qf_layernorm_mlp_bwd(ctx, r->name, &tx, &tdy, &mlp, &g, NULL));
    CK(cudaDeviceSynchronize());
    dual *down[] = {&h, &a, &y, &da, &dh, &dxn, &dx, &dg, &db, &dw1, &dw2, &db1, &db2};
    for (size_t i = 0; i < sizeof down / sizeof down[0]; i++)
        dual_down(down[i]);

    /* 1. the activation and its backward on the GPU's own h and da */
    double *hv = to_f64(&h, QF_DTYPE_BF16, (int64_t)M * Fin);
    double *dav = to_f64(&da, QF_DTYPE_FP32, M * F);
    double *ra = malloc(M * F * 8), *rdh = malloc((size_t)M * Fin * 8);
    for (int64_t m = 0; m < M; m++) {
        for (int64_t f = 0; f < F; f++)
            ra[m * F + f] = d_act(act, hv + m * Fin, Fin, f);
        d_act_bwd(act, hv + m * Fin, dav + m * F, rdh + m * Fin);
    }
    const double e_a = rel_frob(a.h, QF_DTYPE_BF16, ra, M * F);
    const double e_dh = rel_frob(dh.h, QF_DTYPE_BF16, rdh, (int64_t)M * Fin);

    /* 2. the unquantized MLP in fp64 */
    double *xv = to_f64(&x, QF_DTYPE_BF16, M * K), *w1v = to_f64(&w1, QF_DTYPE_BF16, Fin * K);
    double *w2v = to_f64(&w2, QF_DTYPE_BF16, N * F), *b1v = to_f64(&b1, QF_DTYPE_BF16, Fin);
    double *b2v = to_f64(&b2, QF_DTYPE_BF16, N), *dyv = to_f64(&dy, QF_DTYPE_BF16, M * N);
    double *gv = to_f64(&gamma, QF_DTYPE_BF16, K), *bv = to_f64(&beta, QF_DTYPE_BF16, K);
    double *xh = malloc(M * K * 8), *xn = malloc(M * K * 8), *rs = malloc(M * 8);
    for (int64_t m = 0; m < M; m++) {
        double mu = 0.0, var = 0.0;
        for (int64_t k = 0; ln && k < K; k++)
            mu += xv[m * K + k] / K;
        for (int64_t k = 0; k < K; k++)
            var += (xv[m * K + k] - mu) * (xv[m * K + k] - mu) / K;
        rs[m] = 1.0 / sqrt(var + 1e-5);
        for (int64_t k = 0; k < K; k++) {
            xh[m * K + k] = (xv[m * K + k] - mu) * rs[m];
            xn[m * K + k] = xh[m * K + k] * gv[k] + (ln ? bv[k] : 0.0);
        }
    }
    double *he = malloc((size_t)M * Fin * 8), *ae = malloc(M * F * 8), *ye = malloc(M * N * 8);
    mm_nt(xn, w1v, b1v, M, Fin, K, he);
    for (int64_t m = 0; m < M; m++)
        for (int64_t f = 0; f < F; f++)
            ae[m * F + f] = d_act(act, he + m * Fin, Fin, f);
    mm_nt(ae, w2v, b2v, M, N, F, ye);
    double *w2t = tr(w2v, N, F), *dae = malloc(M * F * 8), *dhe = malloc((size_t)M * Fin * 8);
    mm_nt(dyv, w2t, NULL, M, F, N, dae); /* da = dy W2 */
    double *dyt = tr(dyv, M, N), *at = tr(ae, M, F), *dw2e = malloc(N * F * 8);
    mm_nt(dyt, at, NULL, N, F, M, dw2e); /* dW2 = dy^T a */
    for (int64_t m = 0; m < M; m++)
        d_act_bwd(act, he + m * Fin, dae + m * F, dhe + m * Fin);
    double *db1e = calloc((size_t)Fin, 8), *db2e = calloc(N, 8);
    for (int64_t m = 0; m < M; m++) {
        for (int64_t f = 0; f < Fin; f++)
            db1e[f] += dhe[m * Fin + f];
        for (int64_t n = 0; n < N; n++)
            db2e[n] += dyv[m * N + n];
    }
    double *w1t = tr(w1v, Fin, K), *dxne = malloc(M * K * 8);
    mm_nt(dhe, w1t, NULL, M, K, Fin, dxne); /* dxn = dh W1 */
    double *dht = tr(dhe, M, Fin), *xnt = tr(xn, M, K), *dw1e = malloc((size_t)Fin * K * 8);
    mm_nt(dht, xnt, NULL, Fin, K, M, dw1e); /* dW1 = dh^T xn */
    double *dxe = malloc(M * K * 8), *dge = calloc(K, 8), *dbe = calloc(K, 8);
    for (int64_t m = 0; m < M; m++) {
        double s1 = 0.0, s2 = 0.0;
        for (int64_t k = 0; k < K; k++) {
            const double dxh = dxne[m * K + k] * gv[k];
            s1 += dxh, s2 += dxh * xh[m * K + k];
            dge[k] += dxne[m * K + k] * xh[m * K + k];
            dbe[k] += dxne[m * K + k];
        }
        for (int64_t k = 0; k < K; k++)
            dxe[m * K + k] = rs[m] * (dxne[m * K + k] * gv[k] - (ln ? s1 / K : 0.0) -
                                      xh[m * K + k] * s2 / K);
    }
    const double bound = mlp_bound(r->family);
    const double e[] = {rel_frob(y.h, QF_DTYPE_BF16, ye, M * N),
                        rel_frob(dw2.h, QF_DTYPE_FP32, dw2e, N * F),
                        rel_frob(dw1.h, QF_DTYPE_FP32, dw1e, (int64_t)Fin * K),
                        rel_frob(dx.h, QF_DTYPE_BF16, dxe, M * K),
                        rel_frob(dg.h, QF_DTYPE_FP32, dge, K),
                        ln ? rel_frob(db.h, QF_DTYPE_FP32, dbe, K) : 0.0,
                        rel_frob(db1.h, QF_DTYPE_BF16, db1e, Fin)};
    const double e_db2 = rel_frob(db2.h, QF_DTYPE_BF16, db2e, N);
    static const char *const act_names[] = {"gelu", "swiglu", "relu"};
    printf("%-12s %-9s %-6s: act %.1e, act' %.1e (bound %.1e); against the unquantized MLP: "
           "y %.3f, dW2 %.3f, dW1 %.3f, dx %.3f, dgamma %.3f, dbeta %.3f, db1 %.3f (bound %.2f), "
           "db2 %.1e\n",
           r->name, ln ? "layernorm" : "rmsnorm", act_names[act], e_a, e_dh, 0x1p-8, e[0], e[1],
           e[2], e[3], e[4], e[5], e[6], bound, e_db2);
    assert_true(e_a <= 0x1p-8 && e_dh <= 0x1p-8);
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++)
        assert_true(e[i] <= bound);
    assert_true(e_db2 <= 0x1p-8);

    dual *outs[64];
    int n_out = 0;
    dual *plain[] = {&h, &a, &y, &da, &dh, &dxn, &dx, &dg, &dw1, &dw2, &db1, &db2};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        outs[n_out++] = plain[i];
    if (ln)
        outs[n_out++] = &db;
    qtensor *saved[] = {&xq, &w1q, &w2q, &aq, &dyq, &dhq};
    for (size_t q = 0; q < sizeof saved / sizeof saved[0]; q++)
        for (int sl = 0; sl < QF_SLOT_COUNT; sl++)
            if (saved[q]->has[sl])
                outs[n_out++] = &saved[q]->buf[sl];
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    mlp_step ms = {ctx, r, &mlp, &g, &tx, &tdy, &ty};
    graph_check(mlp_step_on, &ms, st, outs, n_out, r->name);
    CK(cudaStreamDestroy(st));
    printf("%-12s %-6s: captured step, 2 replays bit-identical to eager (%d outputs)\n", r->name,
           act_names[act], n_out);

    double *frees[] = {hv, dav, ra, rdh, xv, w1v, w2v, b1v, b2v, dyv, gv, bv, xh, xn, rs, he, ae,
                       ye, w2t, dae, dhe, dyt, at, dw2e, db1e, db2e, w1t, dxne, dht, xnt, dw1e,
                       dxe, dge, dbe};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
        free(frees[i]);
    qtensor *qts[] = {&xq, &w1q, &w2q, &aq, &dyq, &dhq};
    for (size_t i = 0; i < sizeof qts / sizeof qts[0]; i++)
        qt_free(qts[i]);
    dual *all[] = {&x, &gamma, &beta, &w1, &b1, &w2, &b2, &dy, &h, &a, &y, &one, &da, &dh, &dxn,
                   &dx, &dg, &db, &dw1, &dw2, &db1, &db2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
}

static void test_ln_mlp(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    int runs = 0;
    for (int i = 0; i < qf_recipe_count; i++)
        for (int act = 0; act < QF_ACT_COUNT; act++, runs++)
            run_recipe(ctx, &qf_recipes[i], (i + act) % 2 ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM,
                       (qf_activation)act);
    printf("test_gpu_ln_mlp: %d recipes x %d activations, forward + backward\n", qf_recipe_count,
           (int)QF_ACT_COUNT);
    assert_int_equal(runs, qf_recipe_count * QF_ACT_COUNT);
    qf_ctx_free(ctx);
}

int main(void) {
    qf_test_filter_from_env();
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_ln_mlp)};
    return cmocka_run_group_tests_name("gpu_ln_mlp", tests, NULL, NULL);
}
