/* test_gpu_ln_linear.c: qf_layernorm_linear_fwd + qf_layernorm_linear_bwd (numerics 6) for every
 * recipe on the GPU. For x [M, K], W [N, K], dy [M, N] (bf16) and a LayerNorm (RMSNorm for every
 * other recipe) with bias:
 *   1. the composition equals its ops: q(dy) with dbias, dgrad, wgrad and the norm backward run
 *      one by one (qf_quantize_dbias, qf_gemm, qf_gemm_ex, qf_norm_backward) give the same bytes;
 *   2. every gradient against the unquantized layer in fp64 (xn, dxn = dy W, dW = dy^T xn,
 *      dbias = sum dy, and the norm backward of that dxn), rel err ||got - ref|| / ||ref|| within
 *      the recipe's bound: the GEMMs multiply two quantized operands, so their results carry both
 *      operands' rounding. E4M3 (weights, inputs; rms relative rounding 2^-4 / sqrt(3) = 3.6%) and
 *      E5M2 (hybrid FP8's gradients, 7.2%) give about 8% for a product: per-tensor FP8 and MXFP8
 *      (E4M3 everywhere, block scales) 0.15. NVFP4's E2M1 codes (rms about 10% per operand with
 *      block scales, more with stochastic rounding of dy) give about 15-20%: 0.40. dx, dgamma and
 *      dbeta are linear in dxn and inherit its error. dbias is from the unquantized dy: 2^-8, its
 *      bf16 rounding;
 *   3. defer_wgrad leaves dweight untouched, and qf_layernorm_linear_wgrad then writes the bytes of
 *      1.; accumulate_wgrad adds into a main_grad: dweight = D0 + dW within fp32 rounding (1e-6);
 *   4. CUDA graphs (SPEC 6): after one eager step (weight quantize, forward, backward) on a stream,
 *      the same step captured (global capture mode: an allocation or synchronization inside
 *      fails it) and replayed twice writes the eager step's bytes into every output, poisoned
 *      before; families whose Hopper GEMM runs either way capture under QFUSE_HOPPER_GEMM=staged
 *      (scratch) and =direct;
 *   5. the weight cache (SPEC 6): new values in W's buffer are not seen while weight_version stays
 *      (y bit-identical to before), and are once it is bumped (y bit-identical to a fresh layer
 *      quantizing the new W);
 *   6. MXFP8 and NVFP4: the weight's bf16 copies kept (ll.wq_bf16) change no byte of a step,
 *      eager or captured (kept_recipe).
 * Without a GPU it skips. */
#include "test_gpu_util.h"

#include "ref/ref_bwd.h"

enum { M = 256, N = 128, K = 192 };

static double grad_bound(qf_family f) {
    return f == QF_FAMILY_NVFP4 ? 0.40 : 0.15;
}

static double bf(const dual *b, int64_t i) {
    return qf_load_as_float(b->h, QF_DTYPE_BF16, i);
}

/* The unquantized layer in fp64: dxn [M, K], dW [N, K], dbias [N], dx [M, K], dgamma, dbeta [K]. */
typedef struct exact {
    double *dxn, *dw, *dbias, *dx, *dg, *db;
} exact;

static exact exact_grads(qf_norm norm, const dual *x, const dual *w, const dual *gamma,
                         const dual *beta, const dual *dy) {
    exact e = {malloc(M * K * 8), malloc(N * K * 8), calloc(N, 8), malloc(M * K * 8),
               calloc(K, 8), calloc(K, 8)};
    double *xh = malloc(M * K * 8), *xn = malloc(M * K * 8), *rs = malloc(M * 8);
    const int ln = norm == QF_NORM_LAYERNORM;
    for (int64_t m = 0; m < M; m++) {
        double mu = 0.0, var = 0.0;
        for (int64_t k = 0; ln && k < K; k++)
            mu += bf(x, m * K + k) / K;
        for (int64_t k = 0; k < K; k++)
            var += (bf(x, m * K + k) - mu) * (bf(x, m * K + k) - mu) / K;
        rs[m] = 1.0 / sqrt(var + 1e-5);
        for (int64_t k = 0; k < K; k++) {
            xh[m * K + k] = (bf(x, m * K + k) - mu) * rs[m];
            xn[m * K + k] = xh[m * K + k] * bf(gamma, k) + (ln ? bf(beta, k) : 0.0);
        }
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0.0;
            for (int64_t n = 0; n < N; n++)
                s += bf(dy, m * N + n) * bf(w, n * K + k);
            e.dxn[m * K + k] = s;
        }
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0.0;
            for (int64_t m = 0; m < M; m++)
                s += bf(dy, m * N + n) * xn[m * K + k];
            e.dw[n * K + k] = s;
        }
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++)
            e.dbias[n] += bf(dy, m * N + n);
    for (int64_t m = 0; m < M; m++) {
        double s1 = 0.0, s2 = 0.0;
        for (int64_t k = 0; k < K; k++) {
            const double dxh = e.dxn[m * K + k] * bf(gamma, k);
            s1 += dxh;
            s2 += dxh * xh[m * K + k];
            e.dg[k] += e.dxn[m * K + k] * xh[m * K + k];
            e.db[k] += e.dxn[m * K + k];
        }
        for (int64_t k = 0; k < K; k++)
            e.dx[m * K + k] = rs[m] * (e.dxn[m * K + k] * bf(gamma, k) - (ln ? s1 / K : 0.0) -
                                       xh[m * K + k] * s2 / K);
    }
    free(xh), free(xn), free(rs);
    return e;
}

static void exact_free(exact *e) {
    free(e->dxn), free(e->dw), free(e->dbias), free(e->dx), free(e->dg), free(e->db);
}

/* The outputs of one backward call. */
typedef struct bwd_out {
    qtensor dyq;
    dual dxn, dx, dg, db, dw, dbias;
} bwd_out;

static void bwd_alloc(bwd_out *o, const char *recipe, qf_scale_layout layout) {
    qt_alloc(&o->dyq, recipe, QF_ROLE_GRAD, QF_NORM_NONE, M, N, layout);
    o->dxn = dual_alloc(M * K * 4);
    o->dx = dual_alloc(M * K * 2);
    o->dg = dual_alloc(K * 4), o->db = dual_alloc(K * 4);
    o->dw = dual_alloc(N * K * 4);
    o->dbias = dual_alloc(N * 2);
}

static void bwd_down(bwd_out *o) {
    qt_down(&o->dyq);
    dual *all[] = {&o->dxn, &o->dx, &o->dg, &o->db, &o->dw, &o->dbias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_down(all[i]);
}

static void bwd_free(bwd_out *o) {
    qt_free(&o->dyq);
    dual *all[] = {&o->dxn, &o->dx, &o->dg, &o->db, &o->dw, &o->dbias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
}

static qf_ln_linear_grads bwd_grads(bwd_out *o, qf_norm norm, const float *dy_scale) {
    qf_ln_linear_grads g = {.dyq = o->dyq.q, .dy_scale = dy_scale, .rng = {.seed = 5, .offset = 3},
                            .dxn = tv(&o->dxn, QF_DTYPE_FP32, 2, M, K),
                            .dweight = tv(&o->dw, QF_DTYPE_FP32, 2, N, K),
                            .dbias = tv(&o->dbias, QF_DTYPE_BF16, 1, N, 0)};
    g.norm.dx = tv(&o->dx, QF_DTYPE_BF16, 2, M, K);
    g.norm.dgamma = tv(&o->dg, QF_DTYPE_FP32, 1, K, 0);
    if (norm == QF_NORM_LAYERNORM)
        g.norm.dbeta = tv(&o->db, QF_DTYPE_FP32, 1, K, 0);
    return g;
}

/* Bytes of a and b equal. */
static void same(const char *what, const dual *a, const dual *b) {
    const int64_t bad = count_mismatches(a->h, b->h, (int64_t)a->bytes);
    if (bad)
        fail_msg("%s: %lld bytes differ between the composition and its ops", what,
                 (long long)bad);
}

/* One layer: inputs, the forward's state and the backward's outputs (a). */
typedef struct layer {
    const qf_recipe *r;
    qf_norm norm;
    qf_scale_layout layout;
    dual x, w, dy, gamma, beta, bias, y, one;
    qtensor xq, wq;
    qf_ln_linear ll;
    bwd_out a;
    qf_ln_linear_grads ga;
    qf_tensor tx, tdy, ty;
} layer;

static void layer_make(qf_ctx_t *ctx, layer *L, const qf_recipe *r, qf_norm norm) {
    memset(L, 0, sizeof *L);
    L->r = r, L->norm = norm, L->layout = QF_SCALE_LAYOUT_COMPACT;
    if (qf_family_get(r->family)->scale_layout)
        QF_OK_OR_FAIL(qf_gemm_scale_layout(r->name, qf_ctx_arch(ctx), &L->layout));
    const int ln = norm == QF_NORM_LAYERNORM;
    L->x = dual_alloc(M * K * 2), L->w = dual_alloc(N * K * 2), L->dy = dual_alloc(M * N * 2);
    L->gamma = dual_alloc(K * 2), L->beta = dual_alloc(K * 2), L->bias = dual_alloc(N * 2);
    L->y = dual_alloc(M * N * 2), L->one = dual_alloc(4);
    fill_uniform_bf16(L->x.h, M * K, 1.0f, 0.2f, 1);
    fill_uniform_bf16(L->w.h, N * K, 0.5f, 0.0f, 2);
    fill_uniform_bf16(L->dy.h, M * N, 1.0f, 0.05f, 3);
    fill_uniform_bf16(L->gamma.h, K, 0.3f, 1.0f, 4);
    fill_uniform_bf16(L->beta.h, K, 0.2f, 0.0f, 5), fill_uniform_bf16(L->bias.h, N, 0.5f, 0.0f, 6);
    *(float *)L->one.h = 1.0f; /* fp8_delayed's scales of x, W and dy */
    dual *up[] = {&L->x, &L->w, &L->dy, &L->gamma, &L->beta, &L->bias, &L->one};
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++)
        dual_up(up[i]);
    qt_alloc(&L->xq, r->name, QF_ROLE_INPUT, norm, M, K, L->layout);
    qt_alloc(&L->wq, r->name, QF_ROLE_WEIGHT, QF_NORM_NONE, N, K, L->layout);
    L->ll = (qf_ln_linear){
        .norm = {.norm = norm, .eps = 1e-5f, .gamma = tv(&L->gamma, QF_DTYPE_BF16, 1, K, 0),
                 .beta = ln ? tv(&L->beta, QF_DTYPE_BF16, 1, K, 0) : (qf_tensor){0}},
        .weight = tv(&L->w, QF_DTYPE_BF16, 2, N, K),
        .bias = tv(&L->bias, QF_DTYPE_BF16, 1, N, 0),
        .x_scale = L->one.d, .w_scale = L->one.d, .xq = L->xq.q, .wq = L->wq.q,
        .weight_changed = 1};
    L->tx = tv(&L->x, QF_DTYPE_BF16, 2, M, K), L->tdy = tv(&L->dy, QF_DTYPE_BF16, 2, M, N);
    L->ty = tv(&L->y, QF_DTYPE_BF16, 2, M, N);
    bwd_alloc(&L->a, r->name, L->layout);
    L->ga = bwd_grads(&L->a, norm, L->one.d);
}

/* A training step on stream: the weight's quantization (weight_changed set again), forward,
 * backward into L->a. */
static void layer_step(qf_ctx_t *ctx, layer *L, void *stream) {
    L->ll.weight_changed = 1;
    QF_OK_OR_FAIL(qf_layernorm_linear_fwd(ctx, L->r->name, &L->tx, &L->ll, &L->ty, stream));
    QF_OK_OR_FAIL(qf_layernorm_linear_bwd(ctx, L->r->name, &L->tx, &L->tdy, &L->ll, &L->ga,
                                          stream));
}

/* Every output of a step (y, the saved copies, the backward's) as device buffers. */
static int layer_outputs(layer *L, dual **out) {
    int n = 0;
    out[n++] = &L->y;
    qtensor *qs[] = {&L->xq, &L->wq, &L->a.dyq};
    for (int q = 0; q < 3; q++)
        for (int s = 0; s < QF_SLOT_COUNT; s++)
            if (qs[q]->has[s])
                out[n++] = &qs[q]->buf[s];
    dual *rest[] = {&L->a.dxn, &L->a.dx, &L->a.dg, &L->a.dw, &L->a.dbias};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
        out[n++] = rest[i];
    if (L->norm == QF_NORM_LAYERNORM) /* RMSNorm has no dbeta */
        out[n++] = &L->a.db;
    return n;
}

static void layer_free(layer *L) {
    bwd_free(&L->a);
    qt_free(&L->xq), qt_free(&L->wq);
    dual *all[] = {&L->x, &L->w, &L->dy, &L->gamma, &L->beta, &L->bias, &L->y, &L->one};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
}

static void run_recipe(qf_ctx_t *ctx, const qf_recipe *r, qf_norm norm) {
    layer L;
    layer_make(ctx, &L, r, norm);
    const int ln = norm == QF_NORM_LAYERNORM;
    qf_ln_linear ll = L.ll;
    dual x = L.x, w = L.w, dy = L.dy, gamma = L.gamma, beta = L.beta, one = L.one;
    const qf_tensor tx = L.tx, tdy = L.tdy;
    QF_OK_OR_FAIL(qf_layernorm_linear_fwd(ctx, r->name, &tx, &ll, &L.ty, NULL));

    /* 1. the composition, then its ops one by one */
    bwd_out a = L.a, b;
    bwd_alloc(&b, r->name, L.layout);
    qf_ln_linear_grads ga = L.ga, gb = bwd_grads(&b, norm, one.d);
    QF_OK_OR_FAIL(qf_layernorm_linear_bwd(ctx, r->name, &tx, &tdy, &ll, &ga, NULL));
    QF_OK_OR_FAIL(qf_quantize_dbias(ctx, r->name, &tdy, one.d, &gb.rng, &gb.dyq, &gb.dbias,
                                    NULL));
    const qf_operand dyr = {&gb.dyq, QF_COPY_ROWWISE}, dyc = {&gb.dyq, QF_COPY_COLUMNWISE};
    const qf_operand wc = {&ll.wq, QF_COPY_COLUMNWISE}, xc = {&ll.xq, QF_COPY_COLUMNWISE};
    QF_OK_OR_FAIL(qf_gemm(ctx, r->name, &dyr, &wc, NULL, &gb.dxn, NULL));
    QF_OK_OR_FAIL(qf_gemm(ctx, r->name, &dyc, &xc, NULL, &gb.dweight, NULL));
    QF_OK_OR_FAIL(qf_norm_backward(ctx, r->name, &ll.norm, &tx, &gb.dxn, &ll.xq.t[QF_SLOT_MU],
                                   &ll.xq.t[QF_SLOT_RSIGMA], &gb.norm, NULL));
    CK(cudaDeviceSynchronize());
    bwd_down(&a), bwd_down(&b);
    for (int s = 0; s < QF_SLOT_COUNT; s++)
        if (a.dyq.has[s])
            same("dyq", &a.dyq.buf[s], &b.dyq.buf[s]);
    same("dxn", &a.dxn, &b.dxn), same("dx", &a.dx, &b.dx), same("dgamma", &a.dg, &b.dg);
    same("dweight", &a.dw, &b.dw), same("dbias", &a.dbias, &b.dbias);
    if (ln)
        same("dbeta", &a.db, &b.db);

    /* 2. against the unquantized layer */
    exact e = exact_grads(norm, &x, &w, &gamma, &beta, &dy);
    const double bound = grad_bound(r->family);
    const double r_dxn = rel_frob(a.dxn.h, QF_DTYPE_FP32, e.dxn, M * K);
    const double r_dw = rel_frob(a.dw.h, QF_DTYPE_FP32, e.dw, N * K);
    const double r_dx = rel_frob(a.dx.h, QF_DTYPE_BF16, e.dx, M * K);
    const double r_dg = rel_frob(a.dg.h, QF_DTYPE_FP32, e.dg, K);
    const double r_db = ln ? rel_frob(a.db.h, QF_DTYPE_FP32, e.db, K) : 0.0;
    const double r_bias = rel_frob(a.dbias.h, QF_DTYPE_BF16, e.dbias, N);
    printf("%-12s %-9s rel err against fp64 of the unquantized layer: dxn %.3f, dW %.3f, dx %.3f, "
           "dgamma %.3f, dbeta %.3f (bound %.2f), dbias %.1e (bound %.1e)\n", r->name,
           ln ? "layernorm" : "rmsnorm", r_dxn, r_dw, r_dx, r_dg, r_db, bound, r_bias, 0x1p-8);
    assert_true(r_dxn <= bound && r_dw <= bound && r_dx <= bound && r_dg <= bound &&
                r_db <= bound);
    assert_true(r_bias <= 0x1p-8);

    /* 3. deferred wgrad, then accumulation into a main_grad */
    CK(cudaMemset(b.dw.d, 0xFF, b.dw.bytes));
    gb.defer_wgrad = 1;
    QF_OK_OR_FAIL(qf_layernorm_linear_bwd(ctx, r->name, &tx, &tdy, &ll, &gb, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&b.dw);
    for (size_t i = 0; i < b.dw.bytes; i++)
        assert_int_equal(((uint8_t *)b.dw.h)[i], 0xFF);
    QF_OK_OR_FAIL(qf_layernorm_linear_wgrad(ctx, r->name, &ll, &gb, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&b.dw);
    same("deferred dweight", &a.dw, &b.dw);
    double *acc = malloc(N * K * 8);
    uint64_t s = 9;
    for (int64_t i = 0; i < N * K; i++) {
        ((float *)b.dw.h)[i] = qf_test_rng_uniform(&s);
        acc[i] = (double)((float *)b.dw.h)[i] + ((float *)a.dw.h)[i];
    }
    dual_up(&b.dw);
    gb.accumulate_wgrad = 1;
    QF_OK_OR_FAIL(qf_layernorm_linear_wgrad(ctx, r->name, &ll, &gb, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&b.dw);
    const double r_acc = rel_frob(b.dw.h, QF_DTYPE_FP32, acc, N * K);
    printf("%-12s deferred wgrad bit-identical; main_grad += dW rel err %.1e (bound 1e-6)\n",
           r->name, r_acc);
    assert_true(r_acc <= 1e-6);

    free(acc);
    exact_free(&e);
    bwd_free(&b);
    layer_free(&L);
}

/* The step of capture_recipe (graph_check's step_fn). */
typedef struct layer_run {
    qf_ctx_t *ctx;
    layer *L;
} layer_run;

static void layer_step_on(void *arg, cudaStream_t st) {
    const layer_run *lr = arg;
    layer_step(lr->ctx, lr->L, st);
}

/* 4.: one eager step, then the step captured and replayed twice, every output compared. */
static void capture_recipe(qf_ctx_t *ctx, const qf_recipe *r, qf_norm norm, const char *way) {
    layer L;
    layer_make(ctx, &L, r, norm);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    layer_step(ctx, &L, st); /* the warm-up: compiles, plans, tunes, sizes the graph scratch */
    CK(cudaStreamSynchronize(st));
    dual *outs[64];
    const int n = layer_outputs(&L, outs);
    layer_run lr = {ctx, &L};
    char what[64];
    snprintf(what, sizeof what, "%s (%s)", r->name, way);
    const size_t nodes = graph_check(layer_step_on, &lr, st, outs, n, what);
    printf("%-12s %-9s QFUSE_HOPPER_GEMM=%-6s: captured step of %zu nodes, 2 replays "
           "bit-identical to eager (%d outputs)\n", r->name,
           norm == QF_NORM_LAYERNORM ? "layernorm" : "rmsnorm", way, nodes, n);
    CK(cudaStreamDestroy(st));
    layer_free(&L);
}

/* 5.: reuse while the key holds, quantize again once weight_version is bumped. */
static void cache_recipe(qf_ctx_t *ctx, const qf_recipe *r) {
    layer L, F;
    layer_make(ctx, &L, r, QF_NORM_LAYERNORM);
    L.ll.weight_changed = 0; /* a zeroed cache: the first call quantizes anyway */
    QF_OK_OR_FAIL(qf_layernorm_linear_fwd(ctx, r->name, &L.tx, &L.ll, &L.ty, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&L.y);
    uint8_t *y1 = malloc(L.y.bytes);
    memcpy(y1, L.y.h, L.y.bytes);
    fill_uniform_bf16(L.w.h, N * K, 0.5f, 0.1f, 42); /* new weights, same storage */
    dual_up(&L.w);
    QF_OK_OR_FAIL(qf_layernorm_linear_fwd(ctx, r->name, &L.tx, &L.ll, &L.ty, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&L.y);
    const int64_t reused = count_mismatches(y1, L.y.h, (int64_t)L.y.bytes);
    L.ll.weight_version++;
    L.ll.weight_changed = -1; /* the caller's word that ll.wq is current: not quantized */
    QF_OK_OR_FAIL(qf_layernorm_linear_fwd(ctx, r->name, &L.tx, &L.ll, &L.ty, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&L.y);
    const int64_t trusted = count_mismatches(y1, L.y.h, (int64_t)L.y.bytes);
    assert_int_equal(L.ll.weight_changed, -1);
    L.ll.weight_changed = 0;
    QF_OK_OR_FAIL(qf_layernorm_linear_fwd(ctx, r->name, &L.tx, &L.ll, &L.ty, NULL));
    layer_make(ctx, &F, r, QF_NORM_LAYERNORM); /* a fresh layer with the new weights */
    memcpy(F.w.h, L.w.h, L.w.bytes);
    dual_up(&F.w);
    QF_OK_OR_FAIL(qf_layernorm_linear_fwd(ctx, r->name, &F.tx, &F.ll, &F.ty, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&L.y), dual_down(&F.y);
    const int64_t changed = count_mismatches(y1, L.y.h, (int64_t)L.y.bytes);
    const int64_t fresh = count_mismatches(F.y.h, L.y.h, (int64_t)L.y.bytes);
    printf("%-12s weight cache: same version %lld bytes of y changed; bumped %lld changed, %lld "
           "differ from a fresh layer\n", r->name, (long long)reused, (long long)changed,
           (long long)fresh);
    assert_int_equal(reused, 0);
    assert_int_equal(trusted, 0);
    assert_true(changed > 0);
    assert_int_equal(fresh, 0);
    free(y1);
    layer_free(&L), layer_free(&F);
}

/* 6.: MXFP8 and NVFP4 with compact scales (the staged Hopper GEMM's): a layer that keeps its
 * weight's bf16 copies (ll.wq_bf16) writes, step for step, the bytes of one that does not (both
 * under QFUSE_HOPPER_GEMM=staged, the way a kept copy takes at every size), and its step
 * captured in a CUDA graph replays them. */
static void kept_recipe(qf_ctx_t *ctx, const qf_recipe *r) {
    layer P, L;
    layer_make(ctx, &P, r, QF_NORM_LAYERNORM), layer_make(ctx, &L, r, QF_NORM_LAYERNORM);
    if (L.layout != QF_SCALE_LAYOUT_COMPACT) {
        printf("%-12s kept bf16 weight: not on this GPU (its GEMM reads swizzled scales)\n",
               r->name);
        layer_free(&P), layer_free(&L);
        return;
    }
    dual kb[QF_COPY_COUNT];
    kept_alloc(&L.wq, kb, L.ll.wq_bf16);
    setenv("QFUSE_HOPPER_GEMM", "staged", 1);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    layer_step(ctx, &P, st), layer_step(ctx, &L, st);
    CK(cudaStreamSynchronize(st));
    dual *po[64], *lo[64];
    const int n = layer_outputs(&P, po);
    assert_int_equal(layer_outputs(&L, lo), n);
    int64_t differ = 0;
    for (int i = 0; i < n; i++) {
        dual_down(po[i]), dual_down(lo[i]);
        differ += count_mismatches(po[i]->h, lo[i]->h, (int64_t)po[i]->bytes);
    }
    layer_run lr = {ctx, &L};
    const size_t nodes = graph_check(layer_step_on, &lr, st, lo, n, r->name);
    unsetenv("QFUSE_HOPPER_GEMM");
    printf("%-12s kept bf16 weight: %lld bytes of %d outputs differ from the layer without; "
           "captured step of %zu nodes replays them\n", r->name, (long long)differ, n, nodes);
    assert_int_equal(differ, 0);
    CK(cudaStreamDestroy(st));
    for (int c = 0; c < QF_COPY_COUNT; c++)
        dual_free(&kb[c]);
    layer_free(&P), layer_free(&L);
}

static void test_ln_linear_kept_weight(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    int runs = 0;
    for (int i = 0; i < qf_recipe_count; i++) {
        const qf_recipe *r = &qf_recipes[i];
        if ((r->family == QF_FAMILY_MXFP8 || r->family == QF_FAMILY_NVFP4) &&
            recipe_quantizes(r, "test_ln_linear_kept_weight"))
            kept_recipe(ctx, r), runs++;
    }
    printf("test_gpu_ln_linear: %d recipes with a kept bf16 weight\n", runs);
    qf_ctx_free(ctx);
}

static void test_ln_linear_weight_cache(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    for (int i = 0; i < qf_recipe_count; i++)
        if (recipe_quantizes(&qf_recipes[i], "test_ln_linear_weight_cache"))
            cache_recipe(ctx, &qf_recipes[i]);
    qf_ctx_free(ctx);
}

static void test_ln_linear_backward(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    for (int i = 0; i < qf_recipe_count; i++)
        if (recipe_quantizes(&qf_recipes[i], "test_ln_linear_backward"))
            run_recipe(ctx, &qf_recipes[i], i % 2 ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM);
    printf("test_gpu_ln_linear: %d recipes, forward + backward\n", recipes_quantizing());
    qf_ctx_free(ctx);
}

static void test_ln_linear_graph(void **state) {
    (void)state;
    static const char *const ways[] = {"staged", "direct"};
    qf_ctx_t *ctx = gpu_ctx();
    int runs = 0;
    for (int i = 0; i < qf_recipe_count; i++) {
        const qf_recipe *r = &qf_recipes[i];
        if (!recipe_quantizes(r, "test_ln_linear_graph"))
            continue;
        const int n_ways =
            qf_family_gemm_path(r->family, qf_ctx_arch(ctx)).engine == QF_GEMM_KERNEL ? 2 : 1;
        for (int w = 0; w < n_ways; w++, runs++) {
            if (n_ways > 1)
                setenv("QFUSE_HOPPER_GEMM", ways[w], 1);
            capture_recipe(ctx, r, i % 2 ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM,
                           n_ways > 1 ? ways[w] : "-");
        }
        unsetenv("QFUSE_HOPPER_GEMM");
    }
    printf("test_gpu_ln_linear: %d captured steps\n", runs);
    qf_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_ln_linear_backward),
                                       cmocka_unit_test(test_ln_linear_graph),
                                       cmocka_unit_test(test_ln_linear_weight_cache),
                                       cmocka_unit_test(test_ln_linear_kept_weight)};
    qf_test_filter_from_env("gpu_ln_linear", tests);
    return cmocka_run_group_tests_name("gpu_ln_linear", tests, NULL, NULL);
}
