/* test_gpu_ln_mlp.c: qf_layernorm_mlp_fwd + qf_layernorm_mlp_bwd (numerics 6) for every recipe
 * on the GPU, with gelu, swiglu and relu in turn (LayerNorm, RMSNorm for every other case),
 * x [M, K], W1 [Fin, K], W2 [N, F] and dy [M, N] in bf16, at two shapes (kShapes):
 *   1. the activation and its backward against fp64 of the same h and da: a and dh are rounded
 *      once to bf16, so rel err <= 2^-8 (where the step quantizes act(h) and dh in one kernel
 *      each, a and dh are checked to be left unwritten and then computed by qf_activation_fwd /
 *      _bwd from the step's h and da);
 *   2. y and every gradient against the unquantized MLP in fp64 (xn, h = xn W1^T + b1, a = act(h),
 *      y = a W2^T + b2 and their backward), ||got - ref|| / ||ref|| within the recipe's bound. Two
 *      quantized GEMMs run in series, each carrying its operands' rounding (one layer: 0.15 for
 *      per-tensor FP8 and MXFP8, 0.40 for NVFP4, test_gpu_ln_linear.c); in quadrature that is
 *      sqrt(2) times one layer's: 0.25 and 0.60. A wrong or missing stage gives an error near 1 or
 *      more. db2, from the unquantized dy: 2^-8;
 *   3. CUDA graphs (SPEC 6): the same step (both weights' quantization, forward, backward)
 *      captured on a stream in global capture mode (an allocation or synchronization inside fails
 *      it) and replayed twice writes the eager step's bytes into every output, poisoned before;
 *   4. MXFP8 and NVFP4 (swiglu, compact scales): the weights' bf16 copies kept (w1q_bf16,
 *      w2q_bf16) change no byte of the step (check_kept).
 * Without a GPU it skips. */
#include "mlp_model.h"
#include "test_gpu_util.h"

/* The shape of the current run: {M, K, F, N} from kShapes (test_ln_mlp). */
static int64_t M, K, F, N;

/* 256 x 192 -> 128 -> 192, and one of multiples of 32 only (not of 64: the quantizers' tiled
 * columnwise paths instead of the 64x64 columnwise entries), which every recipe's step accepts
 * (test_api_bwd: test_mlp_shapes_host). */
static const int64_t kShapes[][4] = {{256, 192, 128, 192}, {96, 160, 96, 224}};

static double mlp_bound(qf_family f) {
    return f == QF_FAMILY_NVFP4 ? 0.60 : 0.25;
}

static double *to_f64(const dual *b, qf_dtype dt, int64_t n) {
    double *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = qf_load_as_float(b->h, dt, i);
    return v;
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

/* Poisons outs[0..n) except the buffers of w1q and w2q (written only where the weights are
 * quantized), runs the MLP's forward and backward with weight_changed = changed, and compares
 * every output with want: 1 when all are bit-identical. */
static int step_same(mlp_step *ms, int changed, const qtensor *w1q, const qtensor *w2q,
                     dual **outs, int n, void **want) {
    for (int i = 0; i < n; i++) {
        const dual *b = outs[i];
        const int weight = b >= w1q->buf && b < w1q->buf + QF_SLOT_COUNT;
        if (!weight && !(b >= w2q->buf && b < w2q->buf + QF_SLOT_COUNT))
            CK(cudaMemset(b->d, 0xFF, b->bytes));
    }
    ms->mlp->weight_changed = changed;
    QF_OK_OR_FAIL(qf_layernorm_mlp_fwd(ms->ctx, ms->r->name, ms->x, ms->mlp, ms->y, NULL));
    QF_OK_OR_FAIL(qf_layernorm_mlp_bwd(ms->ctx, ms->r->name, ms->x, ms->dy, ms->mlp, ms->g, NULL));
    CK(cudaDeviceSynchronize());
    int same = 1;
    for (int i = 0; i < n; i++) {
        dual_down(outs[i]);
        same &= count_mismatches(want[i], outs[i]->h, (int64_t)outs[i]->bytes) == 0;
    }
    return same;
}

/* MXFP8 and NVFP4 with compact scales (the staged Hopper GEMM's): the step with both weights'
 * bf16 copies kept (w1q_bf16, w2q_bf16) writes the bytes of the step without them, both under
 * QFUSE_HOPPER_GEMM=staged (the way the GEMMs take with a kept copy at every size): in the call
 * that quantizes the weights, in a later one that reuses them (a micro-batch), and after the
 * weights' version is bumped. The GEMMs do read the kept copies: with W1's rowwise one zeroed
 * and the weights reused, h changes. */
static void check_kept(mlp_step *ms, qtensor *w1q, qtensor *w2q, dual **outs, int n, dual *h) {
    qf_ln_mlp *mlp = ms->mlp;
    setenv("QFUSE_HOPPER_GEMM", "staged", 1);
    ms->mlp->weight_changed = 1;
    QF_OK_OR_FAIL(qf_layernorm_mlp_fwd(ms->ctx, ms->r->name, ms->x, mlp, ms->y, NULL));
    QF_OK_OR_FAIL(qf_layernorm_mlp_bwd(ms->ctx, ms->r->name, ms->x, ms->dy, mlp, ms->g, NULL));
    CK(cudaDeviceSynchronize());
    void **want = snap(outs, n);
    dual kb1[QF_COPY_COUNT], kb2[QF_COPY_COUNT];
    kept_alloc(w1q, kb1, mlp->w1q_bf16);
    kept_alloc(w2q, kb2, mlp->w2q_bf16);
    const int first = step_same(ms, 1, w1q, w2q, outs, n, want);
    const int reused = step_same(ms, 0, w1q, w2q, outs, n, want);
    CK(cudaMemset(kb1[QF_COPY_ROWWISE].d, 0, kb1[QF_COPY_ROWWISE].bytes));
    QF_OK_OR_FAIL(qf_layernorm_mlp_fwd(ms->ctx, ms->r->name, ms->x, mlp, ms->y, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(h);
    int64_t h_at = -1;
    for (int i = 0; i < n && h_at < 0; i++)
        h_at = outs[i] == h ? i : -1;
    assert_true(h_at >= 0);
    const int64_t h_changed = count_mismatches(want[h_at], h->h, (int64_t)h->bytes);
    mlp->weight_version++;
    const int bumped = step_same(ms, 0, w1q, w2q, outs, n, want);
    printf("%-12s kept bf16 weights: the step %s, reused %s, bumped %s; h with W1's kept copy "
           "zeroed: %lld bytes differ\n", ms->r->name, first ? "bit-identical" : "DIFFERS",
           reused ? "bit-identical" : "DIFFERS", bumped ? "bit-identical" : "DIFFERS",
           (long long)h_changed);
    assert_true(first && reused && bumped);
    assert_true(h_changed > 0);
    unsetenv("QFUSE_HOPPER_GEMM");
    memset(mlp->w1q_bf16, 0, sizeof mlp->w1q_bf16), memset(mlp->w2q_bf16, 0, sizeof mlp->w2q_bf16);
    for (int c = 0; c < QF_COPY_COUNT; c++)
        dual_free(&kb1[c]), dual_free(&kb2[c]);
    snap_free(want, n);
}

static void run_recipe(qf_ctx_t *ctx, const qf_recipe *r, qf_norm norm, qf_activation act) {
    const int ln = norm == QF_NORM_LAYERNORM;
    const int64_t Fin = act == QF_ACT_SWIGLU ? 2 * F : F;
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
    /* where the family's act_tile divides M and F, the backward quantizes dh with db1 in one
     * kernel, leaving dh unwritten (poisoned: NaN), and the forward act(h), leaving a unwritten,
     * unless the family's act_amax has the forward write a with its amax
     * (qf_layernorm_mlp_writes_a) */
    const unsigned at = qf_family_get(r->family)->act_tile;
    const int fused = at > 0 && M % at == 0 && F % at == 0;
    const int writes_a = qf_layernorm_mlp_writes_a(ctx, r->name, M, F);
    assert_int_equal(writes_a, !fused || qf_family_get(r->family)->act_amax);
    CK(cudaMemset(a.d, 0xFF, a.bytes)), CK(cudaMemset(dh.d, 0xFF, dh.bytes));
    QF_OK_OR_FAIL(qf_layernorm_mlp_fwd(ctx, r->name, &tx, &mlp, &ty, NULL));
    QF_OK_OR_FAIL(qf_layernorm_mlp_bwd(ctx, r->name, &tx, &tdy, &mlp, &g, NULL));
    CK(cudaDeviceSynchronize());
    if (fused) { /* check 1 then takes a and dh from the unfused ops on the step's h and da */
        dual_down(&a), dual_down(&dh);
        for (int64_t i = 0; !writes_a && i < M * F; i++)
            assert_int_equal(((const uint16_t *)a.h)[i], 0xFFFF);
        for (int64_t i = 0; i < M * Fin; i++)
            assert_int_equal(((const uint16_t *)dh.h)[i], 0xFFFF);
        const qf_tensor th = tv(&h, QF_DTYPE_BF16, 2, M, Fin);
        if (!writes_a)
            QF_OK_OR_FAIL(qf_activation_fwd(ctx, r->name, act, &th, &mlp.a, NULL));
        QF_OK_OR_FAIL(qf_activation_bwd(ctx, r->name, act, &th, &g.da, &g.dh, NULL));
        CK(cudaDeviceSynchronize());
    }
    dual *down[] = {&h, &a, &y, &da, &dh, &dxn, &dx, &dg, &db, &dw1, &dw2, &db1, &db2};
    for (size_t i = 0; i < sizeof down / sizeof down[0]; i++)
        dual_down(down[i]);

    /* 1. the activation and its backward on the GPU's own h and da */
    double *hv = to_f64(&h, QF_DTYPE_BF16, (int64_t)M * Fin);
    double *dav = to_f64(&da, QF_DTYPE_FP32, M * F);
    double *ra = malloc(M * F * 8), *rdh = malloc((size_t)M * Fin * 8);
    for (int64_t m = 0; m < M; m++) {
        qf_mlp_act_row(act, hv + m * Fin, F, ra + m * F);
        qf_mlp_act_bwd_row(act, hv + m * Fin, dav + m * F, F, rdh + m * Fin);
    }
    const double e_a = rel_frob(a.h, QF_DTYPE_BF16, ra, M * F);
    const double e_dh = rel_frob(dh.h, QF_DTYPE_BF16, rdh, (int64_t)M * Fin);

    /* 2. the unquantized MLP in fp64 */
    double *xv = to_f64(&x, QF_DTYPE_BF16, M * K), *w1v = to_f64(&w1, QF_DTYPE_BF16, Fin * K);
    double *w2v = to_f64(&w2, QF_DTYPE_BF16, N * F), *b1v = to_f64(&b1, QF_DTYPE_BF16, Fin);
    double *b2v = to_f64(&b2, QF_DTYPE_BF16, N), *dyv = to_f64(&dy, QF_DTYPE_BF16, M * N);
    double *gv = to_f64(&gamma, QF_DTYPE_BF16, K), *bv = to_f64(&beta, QF_DTYPE_BF16, K);
    const qf_mlp_params mp = {.K = K, .F = F, .N = N, .norm = norm, .act = act, .eps = 1e-5,
                              .gamma = gv, .beta = ln ? bv : NULL, .w1 = w1v, .b1 = b1v,
                              .w2 = w2v, .b2 = b2v};
    double *ye = malloc(M * N * 8), *dw1e = malloc((size_t)Fin * K * 8), *dw2e = malloc(N * F * 8);
    double *db1e = malloc((size_t)Fin * 8), *db2e = malloc(N * 8), *dxe = malloc(M * K * 8);
    double *dge = malloc(K * 8), *dbe = malloc(K * 8);
    qf_mlp_saved sv;
    assert_int_equal(qf_mlp_forward(&mp, xv, M, ye, &sv), 0);
    const qf_mlp_grads mg = {.dx = dxe, .dgamma = dge, .dbeta = dbe, .dw1 = dw1e, .db1 = db1e,
                             .dw2 = dw2e, .db2 = db2e};
    assert_int_equal(qf_mlp_backward(&mp, &sv, dyv, &mg), 0);
    qf_mlp_saved_free(&sv);
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
        if (!(fused && ((plain[i] == &a && !writes_a) || plain[i] == &dh))) /* not written */
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
    if ((r->family == QF_FAMILY_MXFP8 || r->family == QF_FAMILY_NVFP4) &&
        layout == QF_SCALE_LAYOUT_COMPACT && act == QF_ACT_SWIGLU)
        check_kept(&ms, &w1q, &w2q, outs, n_out, &h);

    double *frees[] = {hv, dav, ra, rdh, xv, w1v, w2v, b1v, b2v, dyv, gv, bv, ye, dw1e, dw2e,
                       db1e, db2e, dxe, dge, dbe};
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
    const int n_shapes = (int)(sizeof kShapes / sizeof kShapes[0]);
    for (int sh = 0; sh < n_shapes; sh++) {
        M = kShapes[sh][0], K = kShapes[sh][1], F = kShapes[sh][2], N = kShapes[sh][3];
        printf("shape: x [%lld, %lld], F %lld, N %lld\n", (long long)M, (long long)K,
               (long long)F, (long long)N);
        for (int i = 0; i < qf_recipe_count; i++) {
            if (!recipe_quantizes(&qf_recipes[i], "test_ln_mlp"))
                continue;
            for (int act = 0; act < QF_ACT_COUNT; act++, runs++)
                run_recipe(ctx, &qf_recipes[i],
                           (i + act + sh) % 2 ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM,
                           (qf_activation)act);
        }
    }
    printf("test_gpu_ln_mlp: %d shapes x %d recipes x %d activations, forward + backward\n",
           n_shapes, recipes_quantizing(), (int)QF_ACT_COUNT);
    assert_int_equal(runs, n_shapes * recipes_quantizing() * QF_ACT_COUNT);
    qf_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_ln_mlp)};
    qf_test_filter_from_env("gpu_ln_mlp", tests);
    return cmocka_run_group_tests_name("gpu_ln_mlp", tests, NULL, NULL);
}
