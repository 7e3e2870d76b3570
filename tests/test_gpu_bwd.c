/* test_gpu_bwd.c: the backward reductions on the GPU. qf_dbias against the fp64 column sums of
 * dy (rel err 1e-5 before the one rounding to dy's dtype: 2^-8 / 2^-11 / 1e-5 for bf16 / fp16 /
 * fp32), at odd and large shapes, for every recipe's module. qf_norm_backward (numerics 6) against
 * the fp64 evaluation of
 * the same formulas for the same inputs (x, gamma, dxn and the forward's mu and rsigma), and
 * against the C reference qf_norm_backward_ref. Every variant (LayerNorm / RMSNorm, zero-centered
 * gamma or not, x in bf16, fp16 or fp32) at odd and large shapes, gamma in x's dtype and in fp32,
 * dxn in bf16 and fp32; outputs are poisoned first. Bounds, as ||got - ref|| / ||size||:
 *   dgamma, dbeta (fp32): 1e-5 of ||ref|| (numerics 6: fp32 arithmetic, any reduction order);
 *   dx: 1e-5 in fp32; a bf16 or fp16 dx adds its own rounding (half an ulp: at most 2^-9 and
 *   2^-12 relative, rms about a third of that), so 2^-8 and 2^-11. dx is a difference of terms,
 *   rsigma * (dxh - mean(dxh) - xh * mean(dxh * xh)), so its size is that of the terms,
 *   rsigma * (|dxh| + |mean(dxh)| + |xh * mean(dxh * xh)|): where they cancel (RMSNorm with K = 1:
 *   xh^2 = x^2 / (x^2 + eps), dx = rsigma dxh (1 - xh^2)), no fp32 evaluation keeps 1e-5 of the
 *   result, and the C reference in fp32 would fail a bound relative to ||ref|| as well.
 * qf_activation_fwd / _bwd (gelu, swiglu, relu) against the C references qf_activation_ref and
 * qf_activation_backward_ref (fp32, then rounded once to h's dtype): rel err 2^-8 in bf16, 1e-6
 * in fp32 (the kernel may contract a multiply and an add), with F a multiple of 8 (the kernel's
 * 16-byte vector path) and not (one element at a time), h in bf16 and fp32, da in bf16 and fp32;
 * outputs poisoned first. qf_activation_amax (the same kernels, also writing the amax of their
 * output) against them: the same bytes, and the amax equal to the largest |value| stored.
 * qf_quantize_act and qf_dbias_act (the activation fused with the quantization of a, its
 * derivative with the gradient quantization and db1; numerics 6) against the unfused ops on the
 * same h and da (qf_activation_fwd / _bwd, then qf_quantize / qf_dbias, each checked against the C
 * references above and in test_gpu_quantize): every byte of every slot identical, for every
 * recipe and activation, at shapes that take the 16-byte row path with the columnwise entry, the
 * tiled path, a SwiGLU dh whose halves are not whole vectors, and a dh wider than any row entry
 * holds; the two sides' buffers are poisoned with different bytes first (amaxes zeroed: delayed
 * scaling merges into them). qf_quantize_dbias of that dh: q(dh) as qf_quantize's, byte for byte,
 * and dbias within bf16 rounding of fp64. Under current scaling, qf_activation_amax then
 * qf_quantize_cast (the cast from that amax, as layernorm_mlp's forward runs it), for a and dh,
 * against the same unfused ops, byte for byte; under every other recipe qf_quantize_cast is
 * refused.
 * One recipe runs every variant (the module is the same in every family); every other recipe
 * runs one case, through its own registry entry. Without a GPU it skips. */
#include "test_gpu_util.h"

#include "ctx.h"
#include "ref/ref_bwd.h"

typedef struct nb_case {
    qf_norm norm;
    int zcg;
    qf_dtype xdt, gdt, ddt; /* x, gamma, dxn */
    int64_t M, K;
} nb_case;

/* The formulas of numerics 6 in double over the given inputs (as fp32 values); dx_size: the size
 * of the terms of each dx (the top of this file). */
static void nb_f64(const nb_case *c, const void *x, const void *gamma, const void *dxn,
                   const float *mu, const float *rs, double *dx, double *dx_size, double *dg,
                   double *db) {
    const int ln = c->norm == QF_NORM_LAYERNORM;
    const int64_t M = c->M, K = c->K;
    for (int64_t k = 0; k < K; k++)
        dg[k] = db[k] = 0.0;
    double *xh = malloc((size_t)K * sizeof *xh), *dxh = malloc((size_t)K * sizeof *dxh);
    assert_true(xh && dxh);
    for (int64_t r = 0; r < M; r++) {
        double s1 = 0.0, s2 = 0.0;
        for (int64_t k = 0; k < K; k++) {
            const double xv = qf_load_as_float(x, c->xdt, r * K + k);
            const double g = qf_load_as_float(gamma, c->gdt, k) + (c->zcg ? 1.0 : 0.0);
            const double d = qf_load_as_float(dxn, c->ddt, r * K + k);
            xh[k] = ln ? (xv - mu[r]) * rs[r] : xv * rs[r];
            dxh[k] = d * g;
            s1 += dxh[k];
            s2 += dxh[k] * xh[k];
            dg[k] += d * xh[k];
            db[k] += d;
        }
        const double m1 = ln ? s1 / (double)K : 0.0, m2 = s2 / (double)K;
        for (int64_t k = 0; k < K; k++) {
            dx[r * K + k] = rs[r] * (dxh[k] - m1 - xh[k] * m2);
            dx_size[r * K + k] = rs[r] * (fabs(dxh[k]) + fabs(m1) + fabs(xh[k] * m2));
        }
    }
    free(xh);
    free(dxh);
}

/* x and its forward statistics (double, stored fp32: the MU and RSIGMA a forward writes). */
static void nb_inputs(const nb_case *c, void *x, void *gamma, void *dxn, float *mu, float *rs,
                      uint64_t seed) {
    const int64_t M = c->M, K = c->K;
    fill(x, c->xdt, M, K, seed, 0.3f);
    uint64_t s = seed + 1;
    for (int64_t k = 0; k < K; k++)
        store_as(gamma, c->gdt, k, (c->zcg ? 0.0f : 1.0f) + 0.5f * qf_test_rng_uniform(&s));
    for (int64_t i = 0; i < M * K; i++)
        store_as(dxn, c->ddt, i, qf_test_rng_uniform(&s));
    for (int64_t r = 0; r < M; r++) {
        double m = 0.0, v = 0.0;
        for (int64_t k = 0; k < K && c->norm == QF_NORM_LAYERNORM; k++)
            m += qf_load_as_float(x, c->xdt, r * K + k) / (double)K;
        for (int64_t k = 0; k < K; k++) {
            const double d = qf_load_as_float(x, c->xdt, r * K + k) - m;
            v += d * d / (double)K;
        }
        mu[r] = (float)m;
        rs[r] = (float)(1.0 / sqrt(v + 1e-5));
    }
}

static double dx_bound(qf_dtype dt) {
    return dt == QF_DTYPE_BF16 ? 0x1p-8 : dt == QF_DTYPE_FP16 ? 0x1p-11 : 1e-5;
}

static void nb_run(qf_ctx_t *ctx, const char *recipe, const nb_case *c, uint64_t seed) {
    const int64_t M = c->M, K = c->K;
    const int ln = c->norm == QF_NORM_LAYERNORM;
    dual x = dual_alloc((size_t)(M * K) * qf_dtype_size(c->xdt));
    dual gamma = dual_alloc((size_t)K * qf_dtype_size(c->gdt));
    dual dxn = dual_alloc((size_t)(M * K) * qf_dtype_size(c->ddt));
    dual mu = dual_alloc((size_t)M * 4), rs = dual_alloc((size_t)M * 4);
    dual dx = dual_alloc((size_t)(M * K) * qf_dtype_size(c->xdt));
    dual dg = dual_alloc((size_t)K * 4), db = dual_alloc((size_t)K * 4);
    nb_inputs(c, x.h, gamma.h, dxn.h, mu.h, rs.h, seed);
    dual *up[] = {&x, &gamma, &dxn, &mu, &rs};
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++)
        dual_up(up[i]);
    CK(cudaMemset(dx.d, 0xFF, dx.bytes)); /* NaN in every dtype: an unwritten element fails */
    CK(cudaMemset(dg.d, 0xFF, dg.bytes));
    CK(cudaMemset(db.d, 0xFF, db.bytes));
    const qf_norm_desc nd = {.norm = c->norm, .zero_centered_gamma = c->zcg, .eps = 1e-5f,
                             .gamma = tv(&gamma, c->gdt, 1, K, 0)};
    const qf_tensor tx = tv(&x, c->xdt, 2, M, K), td = tv(&dxn, c->ddt, 2, M, K);
    const qf_tensor tmu = tv(&mu, QF_DTYPE_FP32, 1, M, 0), trs = tv(&rs, QF_DTYPE_FP32, 1, M, 0);
    qf_norm_grads g = {.dx = tv(&dx, c->xdt, 2, M, K), .dgamma = tv(&dg, QF_DTYPE_FP32, 1, K, 0),
                       .dbeta = ln ? tv(&db, QF_DTYPE_FP32, 1, K, 0) : (qf_tensor){0}};
    QF_OK_OR_FAIL(qf_norm_backward(ctx, recipe, &nd, &tx, &td, &tmu, &trs, &g, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&dx), dual_down(&dg), dual_down(&db);

    double *rdx = malloc((size_t)(M * K) * 8), *rdg = malloc((size_t)K * 8);
    double *rdb = malloc((size_t)K * 8), *zdx = malloc((size_t)(M * K) * 8);
    float *cdx = malloc((size_t)(M * K) * 4), *cdg = malloc((size_t)K * 4);
    float *cdb = malloc((size_t)K * 4), *dxn32 = malloc((size_t)(M * K) * 4);
    assert_true(rdx && rdg && rdb && zdx && cdx && cdg && cdb && dxn32);
    nb_f64(c, x.h, gamma.h, dxn.h, mu.h, rs.h, rdx, zdx, rdg, rdb);
    for (int64_t i = 0; i < M * K; i++)
        dxn32[i] = qf_load_as_float(dxn.h, c->ddt, i);
    qf_norm_backward_ref(c->norm, c->zcg, c->xdt, x.h, c->gdt, gamma.h, dxn32, mu.h, rs.h, M, K,
                         cdx, cdg, cdb);
    int64_t b0, b1, b2 = 0, b3;
    const double e_dx = rel_frob_sized(dx.h, c->xdt, rdx, zdx, M * K, &b0);
    const double e_dg = rel_frob_sized(dg.h, QF_DTYPE_FP32, rdg, NULL, K, &b1);
    const double e_db = ln ? rel_frob_sized(db.h, QF_DTYPE_FP32, rdb, NULL, K, &b2) : 0.0;
    /* the C reference against the same fp64 values: both within the bound, or the bound is wrong */
    const double e_ref = rel_frob_sized(cdx, QF_DTYPE_FP32, rdx, zdx, M * K, &b3);
    printf("norm_bwd %-9s zcg=%d x=%-4s gamma=%-4s dxn=%-4s M=%-5lld K=%-5lld: rel err dx %.2e "
           "(bound %.1e; C reference %.2e), dgamma %.2e, dbeta %.2e\n",
           ln ? "layernorm" : "rmsnorm", c->zcg, qf_dtype_name(c->xdt), qf_dtype_name(c->gdt),
           qf_dtype_name(c->ddt), (long long)M, (long long)K, e_dx, dx_bound(c->xdt), e_ref, e_dg,
           e_db);
    assert_int_equal(b0 + b1 + b2 + b3, 0);
    assert_true(e_dx <= dx_bound(c->xdt));
    assert_true(e_ref <= 1e-5);
    assert_true(e_dg <= 1e-5);
    assert_true(e_db <= 1e-5);
    if (!ln) { /* rmsnorm: dbeta untouched */
        for (size_t i = 0; i < db.bytes; i++)
            assert_int_equal(((uint8_t *)db.h)[i], 0xFF);
    }
    free(rdx), free(rdg), free(rdb), free(zdx), free(cdx), free(cdg), free(cdb), free(dxn32);
    dual *all[] = {&x, &gamma, &dxn, &mu, &rs, &dx, &dg, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
}

/* Shapes: one element; odd M and K; a row longer than a block's threads many times over; many
 * rows per block (M > 512 blocks); rows of 1, 2 and 3 of the held walk's 16-byte vectors per
 * thread (K = 1000, 4096, 5000; the last partly past K); the largest K. */
static const int64_t kShapes[][2] = {{1, 1},       {7, 300},  {257, 4096},
                                     {5000, 1000}, {9, 5000}, {3, 24576}};

/* dbias of dy [M, N] (dtype dt) under recipe: fp64 column sums, bound as dx's. */
static void db_run(qf_ctx_t *ctx, const char *recipe, qf_dtype dt, int64_t M, int64_t N,
                   uint64_t seed) {
    dual dy = dual_alloc((size_t)(M * N) * qf_dtype_size(dt));
    dual db = dual_alloc((size_t)N * qf_dtype_size(dt));
    uint64_t s = seed; /* U(-0.5, 0.5) + 0.01: the sums grow with M, and fit fp16 at M = 16384 */
    for (int64_t i = 0; i < M * N; i++)
        store_as(dy.h, dt, i, 0.5f * qf_test_rng_uniform(&s) + 0.01f);
    dual_up(&dy);
    CK(cudaMemset(db.d, 0xFF, db.bytes));
    const qf_tensor tdy = tv(&dy, dt, 2, M, N);
    qf_tensor tdb = tv(&db, dt, 1, N, 0);
    QF_OK_OR_FAIL(qf_dbias(ctx, recipe, &tdy, &tdb, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&db);
    double *ref = calloc((size_t)N, sizeof *ref);
    float *cref = malloc((size_t)N * sizeof *cref);
    assert_true(ref && cref);
    for (int64_t r = 0; r < M; r++)
        for (int64_t n = 0; n < N; n++)
            ref[n] += qf_load_as_float(dy.h, dt, r * N + n);
    qf_dbias_ref(dt, dy.h, M, N, cref);
    int64_t bad, bad_ref;
    const double e = rel_frob_sized(db.h, dt, ref, NULL, N, &bad);
    const double e_ref = rel_frob_sized(cref, QF_DTYPE_FP32, ref, NULL, N, &bad_ref);
    printf("dbias %-11s dy=%-4s M=%-6lld N=%-6lld: rel err %.2e (bound %.1e; C reference %.2e)\n",
           recipe, qf_dtype_name(dt), (long long)M, (long long)N, e, dx_bound(dt), e_ref);
    assert_int_equal(bad + bad_ref, 0);
    assert_true(e <= dx_bound(dt));
    assert_true(e_ref <= 1e-5);
    free(ref), free(cref);
    dual_free(&dy), dual_free(&db);
}

static void test_dbias(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{1, 1}, {3, 1000}, {16384, 4096}, {600, 49152}};
    static const qf_dtype dts[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};
    qf_ctx_t *ctx = gpu_ctx();
    int cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 3; d++) {
            if (test_quick() && shapes[s][0] * shapes[s][1] > 100000)
                continue;
            db_run(ctx, qf_recipes[0].name, dts[d], shapes[s][0], shapes[s][1], 5u + s);
            cases++;
        }
    for (int i = 1; i < qf_recipe_count; i++, cases++)
        db_run(ctx, qf_recipes[i].name, QF_DTYPE_BF16, 77, 333, 50u + (uint64_t)i);
    printf("test_dbias: %d cases\n", cases);
    qf_ctx_free(ctx);
}

static void test_norm_backward(void **state) {
    (void)state;
    static const qf_norm norms[] = {QF_NORM_LAYERNORM, QF_NORM_RMSNORM};
    static const qf_dtype xdts[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};
    qf_ctx_t *ctx = gpu_ctx();
    const char *first = qf_recipes[0].name;
    int cases = 0;
    for (int n = 0; n < 2; n++)
        for (int z = 0; z < 2; z++)
            for (int d = 0; d < 3; d++)
                for (size_t s = 0; s < sizeof kShapes / sizeof kShapes[0]; s++) {
                    if (test_quick() && kShapes[s][0] * kShapes[s][1] > 100000)
                        continue;
                    const int alt = (int)(s + (size_t)z) % 2; /* gamma fp32, dxn fp32 */
                    const nb_case c = {norms[n], z, xdts[d], alt ? QF_DTYPE_FP32 : xdts[d],
                                       alt ? QF_DTYPE_BF16 : QF_DTYPE_FP32, kShapes[s][0],
                                       kShapes[s][1]};
                    nb_run(ctx, first, &c, 11u + (uint64_t)cases);
                    cases++;
                }
    for (int i = 1; i < qf_recipe_count; i++) {
        const nb_case c = {QF_NORM_LAYERNORM, 0, QF_DTYPE_BF16, QF_DTYPE_BF16, QF_DTYPE_BF16, 33,
                           640};
        nb_run(ctx, qf_recipes[i].name, &c, 99u + (uint64_t)i);
        cases++;
    }
    printf("test_norm_backward: %d cases\n", cases);
    qf_ctx_free(ctx);
}

/* The activation and its backward of h [M, Fin] (dtype hdt), da [M, F] (ddt) against the C
 * references; the bound of h's dtype. */
static void act_run(qf_ctx_t *ctx, const char *recipe, qf_activation act, qf_dtype hdt,
                    qf_dtype ddt, int64_t M, int64_t F, uint64_t seed) {
    const int64_t Fin = act == QF_ACT_SWIGLU ? 2 * F : F;
    const size_t hs = qf_dtype_size(hdt);
    dual h = dual_alloc((size_t)(M * Fin) * hs);
    dual da = dual_alloc((size_t)(M * F) * qf_dtype_size(ddt));
    dual a = dual_alloc((size_t)(M * F) * hs), dh = dual_alloc((size_t)(M * Fin) * hs);
    uint64_t s = seed;
    for (int64_t i = 0; i < M * Fin; i++)
        store_as(h.h, hdt, i, 3.0f * qf_test_rng_uniform(&s));
    for (int64_t i = 0; i < M * F; i++)
        store_as(da.h, ddt, i, qf_test_rng_uniform(&s));
    dual_up(&h), dual_up(&da);
    CK(cudaMemset(a.d, 0xFF, a.bytes)), CK(cudaMemset(dh.d, 0xFF, dh.bytes));
    const qf_tensor th = tv(&h, hdt, 2, M, Fin), tda = tv(&da, ddt, 2, M, F);
    qf_tensor ta = tv(&a, hdt, 2, M, F), tdh = tv(&dh, hdt, 2, M, Fin);
    QF_OK_OR_FAIL(qf_activation_fwd(ctx, recipe, act, &th, &ta, NULL));
    QF_OK_OR_FAIL(qf_activation_bwd(ctx, recipe, act, &th, &tda, &tdh, NULL));
    /* the same kernels with the amax of what they store: the amaxes poisoned (they are zeroed) */
    dual a2 = dual_alloc(a.bytes), dh2 = dual_alloc(dh.bytes), am = dual_alloc(2 * sizeof(float));
    CK(cudaMemset(a2.d, 0x3C, a2.bytes)), CK(cudaMemset(dh2.d, 0x3C, dh2.bytes));
    CK(cudaMemset(am.d, 0x7F, am.bytes));
    qf_tensor ta2 = tv(&a2, hdt, 2, M, F), tdh2 = tv(&dh2, hdt, 2, M, Fin);
    qf_tensor tam = {.data = am.d, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}};
    qf_tensor tdam = {.data = (float *)am.d + 1, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}};
    QF_OK_OR_FAIL(qf_activation_amax(ctx, recipe, act, &th, NULL, &ta2, &tam, NULL));
    QF_OK_OR_FAIL(qf_activation_amax(ctx, recipe, act, &th, &tda, &tdh2, &tdam, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&a), dual_down(&dh), dual_down(&a2), dual_down(&dh2), dual_down(&am);
    float want_am[2] = {0.0f, 0.0f};
    for (int64_t i = 0; i < M * F; i++)
        want_am[0] = fmaxf(want_am[0], fabsf(qf_load_as_float(a.h, hdt, i)));
    for (int64_t i = 0; i < M * Fin; i++)
        want_am[1] = fmaxf(want_am[1], fabsf(qf_load_as_float(dh.h, hdt, i)));
    const int64_t a_diff = count_mismatches(a.h, a2.h, (int64_t)a.bytes);
    const int64_t dh_diff = count_mismatches(dh.h, dh2.h, (int64_t)dh.bytes);
    const float *got_am = am.h;
    if (a_diff || dh_diff || memcmp(got_am, want_am, sizeof want_am) != 0)
        fail_msg("activation %d h=%s M=%lld F=%lld: qf_activation_amax differs from the "
                 "activation in %lld bytes of a and %lld of dh; amax a %.9g (want %.9g), dh "
                 "%.9g (want %.9g)", (int)act, qf_dtype_name(hdt), (long long)M, (long long)F,
                 (long long)a_diff, (long long)dh_diff, got_am[0], want_am[0], got_am[1],
                 want_am[1]);
    dual_free(&a2), dual_free(&dh2), dual_free(&am);
    float *hf = malloc((size_t)(M * Fin) * 4), *df = malloc((size_t)(M * F) * 4);
    float *ra = malloc((size_t)(M * F) * 4), *rdh = malloc((size_t)(M * Fin) * 4);
    double *wa = malloc((size_t)(M * F) * 8), *wdh = malloc((size_t)(M * Fin) * 8);
    assert_true(hf && df && ra && rdh && wa && wdh);
    for (int64_t i = 0; i < M * Fin; i++)
        hf[i] = qf_load_as_float(h.h, hdt, i);
    for (int64_t i = 0; i < M * F; i++)
        df[i] = qf_load_as_float(da.h, ddt, i);
    qf_activation_ref(act, hf, M, F, ra);
    qf_activation_backward_ref(act, hf, df, M, F, rdh);
    for (int64_t i = 0; i < M * F; i++)
        wa[i] = ra[i];
    for (int64_t i = 0; i < M * Fin; i++)
        wdh[i] = rdh[i];
    int64_t bad_a, bad_dh;
    const double ea = rel_frob_sized(a.h, hdt, wa, NULL, M * F, &bad_a);
    const double edh = rel_frob_sized(dh.h, hdt, wdh, NULL, M * Fin, &bad_dh);
    const double bound = hdt == QF_DTYPE_FP32 ? 1e-6 : 0x1p-8;
    if (bad_a || bad_dh || !(ea <= bound) || !(edh <= bound))
        fail_msg("activation %d h=%s da=%s M=%lld F=%lld: a rel err %.2e (%lld not finite), dh "
                 "%.2e (%lld), bound %.1e", (int)act, qf_dtype_name(hdt), qf_dtype_name(ddt),
                 (long long)M, (long long)F, ea, (long long)bad_a, edh, (long long)bad_dh, bound);
    free(hf), free(df), free(ra), free(rdh), free(wa), free(wdh);
    dual_free(&h), dual_free(&da), dual_free(&a), dual_free(&dh);
}

/* Poisons every slot of t with byte (amax slots zeroed). */
static void qt_poison(qtensor *t, int byte) {
    for (int sl = 0; sl < QF_SLOT_COUNT; sl++)
        if (t->has[sl]) {
            const int amax = sl == QF_SLOT_AMAX || sl == QF_SLOT_AMAX_ROWWISE ||
                             sl == QF_SLOT_AMAX_COLUMNWISE;
            CK(cudaMemset(t->buf[sl].d, amax ? 0 : byte, t->buf[sl].bytes));
        }
}

/* Bytes that differ between two quantized tensors of one shape, over every slot. */
static int64_t qt_diff(qtensor *a, qtensor *b) {
    qt_down(a), qt_down(b);
    int64_t n = 0;
    for (int sl = 0; sl < QF_SLOT_COUNT; sl++)
        if (a->has[sl])
            n += count_mismatches(a->buf[sl].h, b->buf[sl].h, (int64_t)a->buf[sl].bytes);
    return n;
}

/* A fused dbias db [Fin] (bf16, host copy) of dh [M, Fin] (bf16, host copy) against dh's fp64
 * column sums: within its rounding to bf16 and an fp32 sum's error (1e-5 of the column's sum of
 * |dh|). */
static void dbias_check(const char *recipe, const char *op, int act, const dual *dh,
                        const dual *db, int64_t M, int64_t Fin) {
    for (int64_t n = 0; n < Fin; n++) {
        double sum = 0.0, abs_sum = 0.0;
        for (int64_t m = 0; m < M; m++) {
            const double v = qf_load_as_float(dh->h, QF_DTYPE_BF16, m * Fin + n);
            sum += v, abs_sum += fabs(v);
        }
        const double got = qf_load_as_float(db->h, QF_DTYPE_BF16, n);
        if (!(fabs(got - sum) <= 0x1p-8 * fabs(sum) + 1e-5 * abs_sum))
            fail_msg("%s act %d M=%lld Fin=%lld: %s's dbias[%lld] = %.8g, the fp64 sum of dh is "
                     "%.8g", recipe, act, (long long)M, (long long)Fin, op, (long long)n, got,
                     sum);
    }
}

/* Fused against unfused for h [M, Fin] bf16 and da [M, F] (ddt) under recipe r. */
static void act_q_run(qf_ctx_t *ctx, const qf_recipe *r, qf_activation act, qf_dtype ddt,
                      int64_t M, int64_t F, uint64_t seed) {
    const int64_t Fin = act == QF_ACT_SWIGLU ? 2 * F : F;
    const qf_dtype bf = QF_DTYPE_BF16;
    qf_scale_layout layout = QF_SCALE_LAYOUT_COMPACT;
    if (qf_family_get(r->family)->scale_layout)
        QF_OK_OR_FAIL(qf_gemm_scale_layout(r->name, qf_ctx_arch(ctx), &layout));
    dual h = dual_alloc((size_t)(M * Fin) * 2), da = dual_alloc((size_t)(M * F) * qf_dtype_size(ddt));
    dual a = dual_alloc((size_t)(M * F) * 2), dh = dual_alloc((size_t)(M * Fin) * 2);
    dual dbf = dual_alloc((size_t)Fin * 2), dbu = dual_alloc((size_t)Fin * 2), one = dual_alloc(4);
    dual dbq = dual_alloc((size_t)Fin * 2);
    uint64_t s = seed;
    for (int64_t i = 0; i < M * Fin; i++)
        store_as(h.h, bf, i, 3.0f * qf_test_rng_uniform(&s));
    for (int64_t i = 0; i < M * F; i++)
        store_as(da.h, ddt, i, qf_test_rng_uniform(&s));
    /* one spike per case, at a place the seed picks: h (both halves under SwiGLU) 24 and da 64
     * there, so that |a| and |dh| are largest there by far and an amax that missed the place
     * would change every scale (current scaling's amax walks: all of them, and their tails) */
    const int64_t sm = (int64_t)(seed * 7919u % (uint64_t)M);
    const int64_t sf = (int64_t)(seed * 104729u % (uint64_t)F);
    store_as(h.h, bf, sm * Fin + sf, 24.0f);
    if (act == QF_ACT_SWIGLU)
        store_as(h.h, bf, sm * Fin + F + sf, 24.0f);
    store_as(da.h, ddt, sm * F + sf, 64.0f);
    *(float *)one.h = 1.0f;
    dual_up(&h), dual_up(&da), dual_up(&one);
    qtensor fa, ua, fd, ud, qd;
    qt_alloc(&fa, r->name, QF_ROLE_INPUT, QF_NORM_NONE, M, F, layout);
    qt_alloc(&ua, r->name, QF_ROLE_INPUT, QF_NORM_NONE, M, F, layout);
    qt_alloc(&fd, r->name, QF_ROLE_GRAD, QF_NORM_NONE, M, Fin, layout);
    qt_alloc(&ud, r->name, QF_ROLE_GRAD, QF_NORM_NONE, M, Fin, layout);
    qt_alloc(&qd, r->name, QF_ROLE_GRAD, QF_NORM_NONE, M, Fin, layout);
    qt_poison(&fa, 0x5A), qt_poison(&ua, 0xC3), qt_poison(&fd, 0x5A), qt_poison(&ud, 0xC3);
    qt_poison(&qd, 0x77);
    CK(cudaMemset(dbf.d, 0x5A, dbf.bytes)), CK(cudaMemset(dbu.d, 0xC3, dbu.bytes));
    CK(cudaMemset(dbq.d, 0x77, dbq.bytes));
    const qf_tensor th = tv(&h, bf, 2, M, Fin), tda = tv(&da, ddt, 2, M, F);
    qf_tensor ta = tv(&a, bf, 2, M, F), tdh = tv(&dh, bf, 2, M, Fin);
    qf_tensor tdbf = tv(&dbf, bf, 1, Fin, 0), tdbu = tv(&dbu, bf, 1, Fin, 0);
    qf_tensor tdbq = tv(&dbq, bf, 1, Fin, 0);
    const qf_rng rng = {11, seed};
    QF_OK_OR_FAIL(qf_activation_fwd(ctx, r->name, act, &th, &ta, NULL));
    QF_OK_OR_FAIL(qf_quantize(ctx, r->name, QF_ROLE_INPUT, &ta, NULL, one.d, NULL, &ua.q, NULL));
    QF_OK_OR_FAIL(qf_quantize_act(ctx, r->name, act, &th, NULL, one.d, NULL, &fa.q, NULL));
    QF_OK_OR_FAIL(qf_activation_bwd(ctx, r->name, act, &th, &tda, &tdh, NULL));
    QF_OK_OR_FAIL(qf_quantize(ctx, r->name, QF_ROLE_GRAD, &tdh, NULL, one.d, &rng, &ud.q, NULL));
    QF_OK_OR_FAIL(qf_quantize_act(ctx, r->name, act, &th, &tda, one.d, &rng, &fd.q, NULL));
    QF_OK_OR_FAIL(qf_dbias(ctx, r->name, &tdh, &tdbu, NULL));
    QF_OK_OR_FAIL(qf_dbias_act(ctx, r->name, act, &th, &tda, &tdbf, NULL));
    QF_OK_OR_FAIL(qf_quantize_dbias_act(ctx, r->name, act, &th, &tda, one.d, &rng, &qd.q, &tdbq,
                                        NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&dbf), dual_down(&dbu), dual_down(&dbq), dual_down(&dh);
    /* qf_quantize_dbias_act: q(dh)'s bytes, and its dbias (dbias_check) */
    const int64_t dq_diff = qt_diff(&qd, &ud);
    dbias_check(r->name, "qf_quantize_dbias_act", act, &dh, &dbq, M, Fin);
    if (dq_diff)
        fail_msg("%s act %d M=%lld F=%lld: qf_quantize_dbias_act's q(dh) differs from the "
                 "unfused one in %lld bytes", r->name, (int)act, (long long)M, (long long)F,
                 (long long)dq_diff);
    /* qf_quantize_dbias of the unfused dh: q(dh) as qf_quantize's, dbias within the bound */
    dual dbp = dual_alloc((size_t)Fin * 2);
    qf_tensor tdbp = tv(&dbp, bf, 1, Fin, 0);
    qtensor pd;
    qt_alloc(&pd, r->name, QF_ROLE_GRAD, QF_NORM_NONE, M, Fin, layout);
    qt_poison(&pd, 0x66), CK(cudaMemset(dbp.d, 0x66, dbp.bytes));
    QF_OK_OR_FAIL(qf_quantize_dbias(ctx, r->name, &tdh, one.d, &rng, &pd.q, &tdbp, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&dbp);
    dbias_check(r->name, "qf_quantize_dbias", act, &dh, &dbp, M, Fin);
    const int64_t pd_diff = qt_diff(&pd, &ud);
    if (pd_diff)
        fail_msg("%s act %d M=%lld F=%lld: qf_quantize_dbias's q(dh) differs from qf_quantize's "
                 "in %lld bytes", r->name, (int)act, (long long)M, (long long)F,
                 (long long)pd_diff);
    qt_free(&pd);
    if (r->family == QF_FAMILY_FP8_CURRENT) { /* the activation's amax, then the cast alone */
        qtensor ca, cd;
        qt_alloc(&ca, r->name, QF_ROLE_INPUT, QF_NORM_NONE, M, F, layout);
        qt_alloc(&cd, r->name, QF_ROLE_GRAD, QF_NORM_NONE, M, Fin, layout);
        qt_poison(&ca, 0x99), qt_poison(&cd, 0x99);
        CK(cudaMemset(a.d, 0x99, a.bytes)), CK(cudaMemset(dh.d, 0x99, dh.bytes));
        QF_OK_OR_FAIL(qf_activation_amax(ctx, r->name, act, &th, NULL, &ta, &ca.q.t[QF_SLOT_AMAX],
                                         NULL));
        QF_OK_OR_FAIL(qf_quantize_cast(ctx, r->name, QF_ROLE_INPUT, &ta, &ca.q, NULL));
        QF_OK_OR_FAIL(qf_activation_amax(ctx, r->name, act, &th, &tda, &tdh,
                                         &cd.q.t[QF_SLOT_AMAX], NULL));
        QF_OK_OR_FAIL(qf_quantize_cast(ctx, r->name, QF_ROLE_GRAD, &tdh, &cd.q, NULL));
        CK(cudaDeviceSynchronize());
        const int64_t ca_diff = qt_diff(&ca, &ua), cd_diff = qt_diff(&cd, &ud);
        if (ca_diff || cd_diff)
            fail_msg("%s act %d M=%lld F=%lld: qf_activation_amax + qf_quantize_cast differ from "
                     "the unfused ops in %lld bytes of q(a), %lld of q(dh)", r->name, (int)act,
                     (long long)M, (long long)F, (long long)ca_diff, (long long)cd_diff);
        qt_free(&ca), qt_free(&cd);
    } else {
        assert_int_equal(qf_quantize_cast(ctx, r->name, QF_ROLE_INPUT, &ta, &ua.q, NULL),
                         QF_ERR_INVALID_ARG);
        assert_non_null(strstr(qf_last_error(), "current scaling"));
    }
    dual_free(&dbp);
    const int64_t da_diff = qt_diff(&fa, &ua), dd_diff = qt_diff(&fd, &ud);
    const int64_t db_diff = count_mismatches(dbu.h, dbf.h, (int64_t)dbf.bytes);
    if (da_diff || dd_diff || db_diff)
        fail_msg("%s act %d da=%s M=%lld F=%lld: fused differs from unfused in %lld bytes of "
                 "q(a), %lld of q(dh), %lld of db1", r->name, (int)act, qf_dtype_name(ddt),
                 (long long)M, (long long)F, (long long)da_diff, (long long)dd_diff,
                 (long long)db_diff);
    qtensor *qts[] = {&fa, &ua, &fd, &ud, &qd};
    for (size_t i = 0; i < sizeof qts / sizeof qts[0]; i++)
        qt_free(qts[i]);
    dual *all[] = {&h, &da, &a, &dh, &dbf, &dbu, &dbq, &one};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
}

static void test_act_quantize(void **state) {
    (void)state;
    /* {M, F, da fp32}: 16-byte rows with the columnwise entry; the tiled columnwise path (M % 64
     * != 0); K * 2 % 16 != 0 (tiled everywhere) with a SwiGLU dh of 104 columns whose halves of
     * 52 are not whole vectors (not NVFP4: multiples of 16 only); dh of 16416 columns, wider than
     * the row entries hold; 512 SwiGLU dh tile pairs with bf16 da, more than the columnwise
     * entry's blocks (most walk two, the next pair's loads in registers: per-tensor FP8's
     * cols_ahead); whole pairs with fp32 da, and halves of 96 columns (tiles not paired), which
     * that entry walks without them; 8192 x 1024, where current scaling's `_amax` entry (one
     * wave of 4 to 6 blocks of 256 threads per SM, 2 to 6 positions per thread and step) takes
     * whole steps before its tail (on an H200 all threads of the SwiGLU and gelu entries, fewer
     * of relu's); 576 rows, 9 tile rows, where per-tensor FP8's column sums of dbias take a
     * group of QF_DBIAS_GROUP (8) tile rows and a group of one */
    static const int64_t shapes[][3] = {{256, 128, 0}, {96, 48, 1},    {100, 52, 0},
                                        {32, 8208, 1}, {2048, 1024, 0}, {128, 128, 1},
                                        {128, 96, 0},  {8192, 1024, 0}, {576, 192, 0}};
    qf_ctx_t *ctx = gpu_ctx();
    int cases = 0;
    for (int i = 0; i < qf_recipe_count; i++) {
        const qf_recipe *r = &qf_recipes[i];
        if (!recipe_quantizes(r, "test_act_quantize"))
            continue;
        for (int act = 0; act < QF_ACT_COUNT; act++)
            for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
                if (r->family == QF_FAMILY_NVFP4 && (shapes[sh][0] % 16 || shapes[sh][1] % 16))
                    continue;
                const qf_dtype ddt = shapes[sh][2] ? QF_DTYPE_FP32 : QF_DTYPE_BF16;
                act_q_run(ctx, r, (qf_activation)act, ddt, shapes[sh][0], shapes[sh][1],
                          100u + (uint64_t)cases);
                cases++;
            }
    }
    printf("test_act_quantize: %d cases, fused bit-identical to unfused; qf_quantize_dbias_act's "
           "q(dh) too, its dbias within bf16 rounding of fp64\n", cases);
    assert_true(cases >= recipes_quantizing() * QF_ACT_COUNT * 3);
    qf_ctx_free(ctx);
}

static void test_activation(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{7, 13}, {33, 128}, {3, 1}, {300, 1000}, {64, 4100}};
    static const qf_dtype hdts[] = {QF_DTYPE_BF16, QF_DTYPE_FP32};
    qf_ctx_t *ctx = gpu_ctx();
    int cases = 0;
    for (int act = 0; act < QF_ACT_COUNT; act++)
        for (int d = 0; d < 2; d++)
            for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++, cases++)
                act_run(ctx, qf_recipes[0].name, (qf_activation)act, hdts[d],
                        sh % 2 ? QF_DTYPE_FP32 : QF_DTYPE_BF16, shapes[sh][0], shapes[sh][1],
                        7u + (uint64_t)cases);
    printf("test_activation: %d cases (F %% 8 == 0 and not)\n", cases);
    qf_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_dbias),
                                       cmocka_unit_test(test_norm_backward),
                                       cmocka_unit_test(test_activation),
                                       cmocka_unit_test(test_act_quantize)};
    qf_test_filter_from_env("gpu_bwd", tests);
    return cmocka_run_group_tests_name("gpu_bwd", tests, NULL, NULL);
}
