/* test_gpu_nvfp4.c: NVFP4 quantizers on the GPU against the C reference (SPEC 2.4, 3), bit for
 * bit: packed E2M1 data, E4M3 scales (padding included), both global amaxes; rowwise, the
 * transposed columnwise copy with and without the RHT, 16x16 weight tiles, stochastic rounding,
 * compact and swizzled scales, with every output poisoned before each run. mu/rsigma are held to
 * the fp64 statistics (rel 1e-5) and then handed to the reference. Skips cleanly without a GPU;
 * QFUSE_TEST_QUICK=1 drops the shapes of more than 2^22 elements. */
#include "test_gpu_util.h"

#include <math.h>
#include <stdio.h>

#include "qfuse.h"
#include "ref.h"
#include "ref_nvfp4.h"
#include "registry.h"

static int g_cases;

/* {===================================================================== cases */

enum { DATA_RANDOM, DATA_ZERO, DATA_NAN };

typedef struct nv_case {
    const char *recipe;   /* "nvfp4" (RHT) or "nvfp4_nort" */
    qf_role role;         /* QF_ROLE_INPUT: norm + quantize */
    qf_norm norm;
    int zcg;
    qf_dtype xdt, gdt;    /* gdt: gamma/beta dtype (x's or fp32) */
    qf_scale_layout layout;
    unsigned outputs;
    int64_t M, K;
    uint64_t seed, offset; /* SR stream (grads) */
    int data;             /* DATA_* */
} nv_case;

static const char *describe(const nv_case *c) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s role %d norm %d zcg %d x %s gamma %s M=%lld K=%lld layout %s "
             "outputs %u seed %llu offset %llu data %d", c->recipe, (int)c->role, (int)c->norm,
             c->zcg, qf_dtype_name(c->xdt), qf_dtype_name(c->gdt), (long long)c->M,
             (long long)c->K, c->layout ? "swizzled" : "compact", c->outputs,
             (unsigned long long)c->seed, (unsigned long long)c->offset, c->data);
    return buf;
}

static const qf_recipe *recipe_of(const char *name) {
    for (int i = 0; i < qf_recipe_count; i++)
        if (strcmp(qf_recipes[i].name, name) == 0)
            return &qf_recipes[i];
    fail_msg("recipe %s is not in the registry", name);
    return NULL;
}

/* The reference options of a case, from the recipe's registry entry. */
static qf_nvfp4_opts opts_of(const nv_case *c) {
    const qf_recipe *r = recipe_of(c->recipe);
    qf_nvfp4_opts o = {.rowwise = (c->outputs & QF_OUT_ROWWISE) != 0,
                       .columnwise = (c->outputs & QF_OUT_COLUMNWISE) != 0,
                       .layout = c->layout};
    o.rht = r->rht[c->role];
    o.rht_mask = !o.rht ? 0
                 : r->rht_seed >= 0 ? qf_nvfp4_rht_mask_from_seed_ref((uint64_t)r->rht_seed)
                                    : QF_NVFP4_RHT_MASK_DEFAULT;
    o.sr = r->sr[c->role];
    o.sr_seed = c->seed, o.sr_offset = c->offset;
    o.block_2d = r->block_2d[c->role];
    return o;
}

/* Device and host buffers of one case. */
typedef struct nv_bufs {
    dual x, g, b, row, srow, col, scol, amr, amc, mu, rs;
    size_t srb, scb;
    int64_t sr_r, sr_c, sc_r, sc_c;
} nv_bufs;

static void bufs_alloc(const nv_case *c, nv_bufs *B) {
    const int64_t M = c->M, K = c->K;
    qf_nvfp4_scale_shape_row(M, K, &B->sr_r, &B->sr_c);
    qf_nvfp4_scale_shape_col(M, K, &B->sc_r, &B->sc_c);
    B->srb = (size_t)(B->sr_r * B->sr_c), B->scb = (size_t)(B->sc_r * B->sc_c);
    B->x = dual_alloc((size_t)(M * K) * qf_dtype_size(c->xdt));
    B->g = dual_alloc((size_t)K * 4), B->b = dual_alloc((size_t)K * 4);
    B->row = dual_alloc((size_t)(M * K / 2)), B->col = dual_alloc((size_t)(M * K / 2));
    B->srow = dual_alloc(B->srb), B->scol = dual_alloc(B->scb);
    B->amr = dual_alloc(4), B->amc = dual_alloc(4);
    B->mu = dual_alloc((size_t)M * 4), B->rs = dual_alloc((size_t)M * 4);
}

static void bufs_free(nv_bufs *B) {
    dual *all[] = {&B->x, &B->g, &B->b, &B->row, &B->srow, &B->col, &B->scol,
                   &B->amr, &B->amc, &B->mu, &B->rs};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
}

/* Inputs of the case on host and device. */
static void make_inputs(const nv_case *c, nv_bufs *B, uint64_t seed) {
    const int64_t M = c->M, K = c->K;
    if (c->data == DATA_ZERO)
        memset(B->x.h, 0, B->x.bytes);
    else
        fill(B->x.h, c->xdt, M, K, seed, c->role == QF_ROLE_INPUT ? 0.3f : 0.0f);
    if (c->data == DATA_NAN)
        store_as(B->x.h, c->xdt, (M / 2) * K + K / 3, NAN);
    fill(B->g.h, c->gdt, 1, K, seed + 1, c->zcg ? 0.0f : 1.0f);
    fill(B->b.h, c->gdt, 1, K, seed + 2, 0.0f);
    dual_up(&B->x), dual_up(&B->g), dual_up(&B->b);
}

/* Runs the op of the case on B's device buffers (rng from the case). */
static void run_op(qf_ctx_t *ctx, const nv_case *c, nv_bufs *B) {
    const int64_t M = c->M, K = c->K;
    qf_quantized out = {.layout = c->layout};
    if (c->outputs & QF_OUT_ROWWISE) {
        out.t[QF_SLOT_ROWWISE_DATA] = tv(&B->row, QF_DTYPE_E2M1, 2, M, K / 2);
        out.t[QF_SLOT_ROWWISE_SCALE_INV] = tv(&B->srow, QF_DTYPE_E4M3, 2, B->sr_r, B->sr_c);
        out.t[QF_SLOT_AMAX_ROWWISE] = tv(&B->amr, QF_DTYPE_FP32, 1, 1, 0);
    }
    if (c->outputs & QF_OUT_COLUMNWISE) {
        out.t[QF_SLOT_COLUMNWISE_DATA] = tv(&B->col, QF_DTYPE_E2M1, 2, K, M / 2);
        out.t[QF_SLOT_COLUMNWISE_SCALE_INV] = tv(&B->scol, QF_DTYPE_E4M3, 2, B->sc_r, B->sc_c);
        out.t[QF_SLOT_AMAX_COLUMNWISE] = tv(&B->amc, QF_DTYPE_FP32, 1, 1, 0);
    }
    qf_tensor tx = tv(&B->x, c->xdt, 2, M, K), tg = tv(&B->g, c->gdt, 1, K, 0);
    qf_tensor tb = tv(&B->b, c->gdt, 1, K, 0), tmu = tv(&B->mu, QF_DTYPE_FP32, 1, M, 0);
    qf_tensor trs = tv(&B->rs, QF_DTYPE_FP32, 1, M, 0);
    const int ln = c->norm == QF_NORM_LAYERNORM;
    const qf_rng rng = {c->seed, c->offset};
    if (ln)
        out.t[QF_SLOT_MU] = tmu;
    out.t[QF_SLOT_RSIGMA] = trs; /* ignored without a norm */
    const qf_norm_desc nd = {.norm = c->norm, .zero_centered_gamma = c->zcg, .eps = 1e-5f,
                             .gamma = tg, .beta = ln ? tb : (qf_tensor){0}};
    /* rng for every role, as before: the input and weight roles ignore it */
    QF_OK_OR_FAIL(qf_quantize(ctx, c->recipe, c->role, &tx, c->role == QF_ROLE_INPUT ? &nd : NULL,
                              NULL, &rng, &out, NULL));
    CK(cudaDeviceSynchronize());
    dual *got[] = {&B->row, &B->srow, &B->col, &B->scol, &B->amr, &B->amc, &B->mu, &B->rs};
    for (size_t i = 0; i < sizeof got / sizeof got[0]; i++)
        dual_down(got[i]);
}

/* }=====================================================================} */

/* {===================================================================== checks */

/* Fails naming the first differing byte of buffer `what` (n bytes). */
static void expect_bytes(const nv_case *c, const char *what, const uint8_t *want,
                         const uint8_t *got, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (want[i] != got[i] && bad++ == 0)
            first = i;
    if (bad)
        fail_msg("%s: %s differs in %zu of %zu bytes; first at byte %zu: expected 0x%02X, got "
                 "0x%02X", describe(c), what, bad, n, first, want[first], got[first]);
}

/* mu/rsigma of the kernel within rel 1e-5 of the fp64 reference (SPEC 3). */
static void check_stats(const nv_case *c, const nv_bufs *B) {
    if (c->role != QF_ROLE_INPUT || c->data == DATA_NAN)
        return;
    const int64_t M = c->M, K = c->K;
    const size_t xsz = qf_dtype_size(c->xdt);
    const float *mu = B->mu.h, *rs = B->rs.h;
    for (int64_t m = 0; m < M; m++) {
        float mr, rr;
        qf_norm_stats_ref(c->norm, c->xdt, (const char *)B->x.h + (size_t)(m * K) * xsz, 1, K,
                          1e-5f, &mr, &rr);
        if (fabs((double)rs[m] - rr) > 1e-5 * fabs((double)rr))
            fail_msg("%s: rsigma[%lld] = %.9g, reference %.9g", describe(c), (long long)m,
                     rs[m], rr);
        double tol = 1e-5 * (fabs((double)mr) + 1.0 / rr); /* mu relative to the row's scale */
        if (c->norm == QF_NORM_LAYERNORM && fabs((double)mu[m] - mr) > tol)
            fail_msg("%s: mu[%lld] = %.9g, reference %.9g", describe(c), (long long)m, mu[m], mr);
    }
}

/* Reference outputs: buffers of copies not requested keep the poison, like the device's. */
typedef struct nv_expect {
    uint8_t *row, *srow, *col, *scol;
    float amr, amc;
} nv_expect;

static void reference(const nv_case *c, const nv_bufs *B, nv_expect *e) {
    const int64_t M = c->M, K = c->K;
    const int ln = c->norm == QF_NORM_LAYERNORM;
    const qf_norm norm = c->role == QF_ROLE_INPUT ? c->norm : QF_NORM_NONE;
    e->row = malloc(B->row.bytes), e->col = malloc(B->col.bytes);
    e->srow = malloc(B->srb), e->scol = malloc(B->scb);
    memset(e->row, QF_TEST_POISON, B->row.bytes), memset(e->col, QF_TEST_POISON, B->col.bytes);
    memset(e->srow, QF_TEST_POISON, B->srb), memset(e->scol, QF_TEST_POISON, B->scb);
    memset(&e->amr, QF_TEST_POISON, 4), memset(&e->amc, QF_TEST_POISON, 4);
    qf_nvfp4_src src = {.norm = norm, .zcg = c->zcg, .xdt = c->xdt, .gdt = c->gdt, .x = B->x.h,
                        .gamma = norm ? B->g.h : NULL, .beta = ln && norm ? B->b.h : NULL,
                        .M = M, .K = K, .eps = 1e-5f,
                        .mu_in = norm == QF_NORM_LAYERNORM ? B->mu.h : NULL,
                        .rsigma_in = norm ? B->rs.h : NULL};
    const qf_nvfp4_opts o = opts_of(c);
    qf_nvfp4_out out = {.row = e->row, .scale_row = e->srow, .col = e->col, .scale_col = e->scol,
                        .amax_row = o.rowwise ? &e->amr : NULL,
                        .amax_col = o.columnwise ? &e->amc : NULL};
    if (qf_quantize_nvfp4_ref(&src, &o, &out) != QF_OK)
        fail_msg("%s: reference failed: %s", describe(c), qf_last_error());
}

static void expect_free(nv_expect *e) {
    free(e->row), free(e->col), free(e->srow), free(e->scol);
}

/* Every byte of every output, padding and unrequested copies included; amaxes bit for bit. */
static void compare(const nv_case *c, const nv_bufs *B, const nv_expect *e) {
    expect_bytes(c, "rowwise data", e->row, B->row.h, B->row.bytes);
    expect_bytes(c, "rowwise scales", e->srow, B->srow.h, B->srb);
    expect_bytes(c, "columnwise data", e->col, B->col.h, B->col.bytes);
    expect_bytes(c, "columnwise scales", e->scol, B->scol.h, B->scb);
    const float wantf[2] = {e->amr, e->amc};
    float gotf[2];
    memcpy(&gotf[0], B->amr.h, 4), memcpy(&gotf[1], B->amc.h, 4);
    for (int i = 0; i < 2; i++) {
        uint32_t w, g;
        memcpy(&w, &wantf[i], 4), memcpy(&g, &gotf[i], 4);
        if (w != g)
            fail_msg("%s: amax_%s is 0x%08X (%.9g), expected 0x%08X (%.9g)", describe(c),
                     i ? "columnwise" : "rowwise", g, gotf[i], w, wantf[i]);
    }
}

/* One case: run, check the statistics, compare with the reference. */
static void run_case(qf_ctx_t *ctx, const nv_case *c, uint64_t seed) {
    nv_bufs B;
    nv_expect e;
    bufs_alloc(c, &B);
    make_inputs(c, &B, seed);
    run_op(ctx, c, &B);
    check_stats(c, &B);
    reference(c, &B, &e);
    compare(c, &B, &e);
    expect_free(&e);
    bufs_free(&B);
    g_cases++;
}

static int ctx_or_skip(qf_ctx_t **ctx) {
    if (!qf_test_have_gpu())
        return 0;
    QF_OK_OR_FAIL(qf_ctx_init(ctx, 0));
    return 1;
}

static int quick(void) {
    return getenv("QFUSE_TEST_QUICK") && atoi(getenv("QFUSE_TEST_QUICK"));
}

/* }=====================================================================} */

/* {===================================================================== tests */

static const int64_t kDims[] = {16, 32, 64, 96, 1024, 8192};
#define NDIMS ((int)(sizeof kDims / sizeof kDims[0]))

/* Norm + quantize over the cross product of kDims; the options rotate with the case index.
 * max_elems bounds the CPU time of the reference. */
static void nq_sweep(qf_dtype xdt, int64_t max_elems) {
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    if (quick() && max_elems > (1 << 22))
        max_elems = 1 << 22;
    int i = 0;
    for (int a = 0; a < NDIMS; a++)
        for (int b = 0; b < NDIMS; b++, i++) {
            if (kDims[a] * kDims[b] > max_elems)
                continue;
            nv_case c = {.recipe = (i / 4) % 2 ? "nvfp4_nort" : "nvfp4", .role = QF_ROLE_INPUT,
                         .norm = (a + b) % 2 ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM,
                         .zcg = (i / 2) % 2, .xdt = xdt,
                         .gdt = xdt != QF_DTYPE_FP32 && i % 7 == 3 ? QF_DTYPE_FP32 : xdt,
                         .layout = (i / 3) % 2 ? QF_SCALE_LAYOUT_SWIZZLED : QF_SCALE_LAYOUT_COMPACT,
                         .outputs = i % 5 == 4   ? QF_OUT_ROWWISE
                                    : i % 5 == 2 ? QF_OUT_COLUMNWISE
                                                 : QF_OUT_ROWWISE | QF_OUT_COLUMNWISE,
                         .M = kDims[a], .K = kDims[b]};
            run_case(ctx, &c, 31u * (uint64_t)i + (uint64_t)xdt);
        }
    qf_ctx_free(ctx);
}

static void test_nv_nq_bf16(void **state) {
    (void)state;
    nq_sweep(QF_DTYPE_BF16, (int64_t)8192 * 8192);
}

static void test_nv_nq_fp16(void **state) {
    (void)state;
    nq_sweep(QF_DTYPE_FP16, (int64_t)8192 * 1024);
}

static void test_nv_nq_fp32(void **state) {
    (void)state;
    nq_sweep(QF_DTYPE_FP32, (int64_t)8192 * 1024);
}

/* Every norm / zcg / gamma dtype / output / layout / recipe combination once, on a small
 * non-square shape. */
static void test_nv_nq_options(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    int i = 0;
    for (int r = 0; r < 2; r++)
        for (int norm = QF_NORM_LAYERNORM; norm <= QF_NORM_RMSNORM; norm++)
            for (int z = 0; z < 2; z++)
                for (int gf = 0; gf < 2; gf++)
                    for (unsigned o = 1; o <= 3; o++)
                        for (int l = 0; l < 2; l++, i++) {
                            nv_case c = {.recipe = r ? "nvfp4_nort" : "nvfp4",
                                         .role = QF_ROLE_INPUT, .norm = (qf_norm)norm, .zcg = z,
                                         .xdt = QF_DTYPE_BF16,
                                         .gdt = gf ? QF_DTYPE_FP32 : QF_DTYPE_BF16,
                                         .layout = (qf_scale_layout)l, .outputs = o, .M = 48,
                                         .K = 272};
                            run_case(ctx, &c, 700u + (uint64_t)i);
                        }
    qf_ctx_free(ctx);
}

/* Weights (16x16 tiles) and gradients (RHT per recipe, SR), all dtypes, square and not. */
static void test_nv_quantize(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    static const qf_dtype dts[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};
    static const int64_t shapes[][2] = {{16, 16}, {32, 8192}, {8192, 32}, {96, 1040},
                                        {1040, 96}, {1024, 1024}, {4096, 2048}};
    int i = 0;
    for (int v = 0; v < 4; v++)
        for (int d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++, i++) {
                if (quick() && shapes[s][0] * shapes[s][1] > (1 << 22))
                    continue;
                nv_case c = {.recipe = v % 2 ? "nvfp4_nort" : "nvfp4",
                             .role = v < 2 ? QF_ROLE_GRAD : QF_ROLE_WEIGHT, .xdt = dts[d],
                             .gdt = dts[d], .layout = (qf_scale_layout)(i % 2),
                             .outputs = i % 3 == 1 ? QF_OUT_COLUMNWISE
                                                   : QF_OUT_ROWWISE | QF_OUT_COLUMNWISE,
                             .M = shapes[s][0], .K = shapes[s][1],
                             .seed = 0x5EEDull + (uint64_t)i, .offset = 977u * (uint64_t)i};
                run_case(ctx, &c, 900u + (uint64_t)i);
            }
    qf_ctx_free(ctx);
}

/* Runs a grad case and returns its device bytes (row then col), malloc'ed. */
static uint8_t *grad_bytes(qf_ctx_t *ctx, const nv_case *c, size_t *n) {
    nv_bufs B;
    bufs_alloc(c, &B);
    make_inputs(c, &B, 4242);
    run_op(ctx, c, &B);
    *n = B.row.bytes + B.col.bytes;
    uint8_t *r = malloc(*n);
    memcpy(r, B.row.h, B.row.bytes);
    memcpy(r + B.row.bytes, B.col.h, B.col.bytes);
    bufs_free(&B);
    return r;
}

/* Stochastic rounding: (seed, offset) fixes every byte; another offset or seed changes them. */
static void test_nv_sr_streams(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    nv_case c = {.recipe = "nvfp4", .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_BF16,
                 .gdt = QF_DTYPE_BF16, .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .M = 256,
                 .K = 512, .seed = 1234, .offset = 10};
    size_t n;
    uint8_t *a = grad_bytes(ctx, &c, &n), *b = grad_bytes(ctx, &c, &n);
    assert_memory_equal(a, b, n);
    c.offset = 11;
    uint8_t *d = grad_bytes(ctx, &c, &n);
    if (memcmp(a, d, n) == 0)
        fail_msg("offsets 10 and 11 gave identical bytes");
    c.offset = 10, c.seed = 1235;
    uint8_t *s = grad_bytes(ctx, &c, &n);
    if (memcmp(a, s, n) == 0)
        fail_msg("seeds 1234 and 1235 gave identical bytes");
    free(a), free(b), free(d), free(s);
    c.offset = 11; /* and each is still the reference's */
    run_case(ctx, &c, 4242);
    qf_ctx_free(ctx);
}

/* All-zero input: finite global scale (S_enc = 1), zero scale bytes and data, amax 0. */
static void test_nv_zero_input(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    static const qf_role roles[] = {QF_ROLE_WEIGHT, QF_ROLE_GRAD, QF_ROLE_INPUT};
    for (int i = 0; i < 3; i++) {
        nv_case c = {.recipe = "nvfp4", .role = roles[i], .norm = QF_NORM_RMSNORM,
                     .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16,
                     .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .M = 64, .K = 128,
                     .seed = 9, .offset = 3, .data = DATA_ZERO};
        nv_bufs B;
        bufs_alloc(&c, &B);
        make_inputs(&c, &B, 1);
        run_op(ctx, &c, &B);
        assert_true(*(float *)B.amr.h == 0.0f && *(float *)B.amc.h == 0.0f);
        for (size_t j = 0; j < B.srb; j++)
            if (((uint8_t *)B.srow.h)[j] != 0)
                fail_msg("%s: rowwise scale byte %zu is 0x%02X", describe(&c), j,
                         ((uint8_t *)B.srow.h)[j]);
        for (size_t j = 0; j < B.row.bytes; j++)
            if (((uint8_t *)B.row.h)[j] & 0x77) /* +-0 only */
                fail_msg("%s: rowwise data byte %zu is 0x%02X", describe(&c), j,
                         ((uint8_t *)B.row.h)[j]);
        bufs_free(&B);
        run_case(ctx, &c, 1); /* and bit for bit the reference's */
    }
    qf_ctx_free(ctx);
}

/* A NaN in x: both amaxes are NaN (0x7FC00000), its blocks get scale 0x7F; as the reference. */
static void test_nv_nan_input(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    const nv_case cases[] = {
        {.recipe = "nvfp4", .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16,
         .outputs = 3, .M = 64, .K = 96, .seed = 5, .data = DATA_NAN},
        {.recipe = "nvfp4", .role = QF_ROLE_WEIGHT, .xdt = QF_DTYPE_FP32, .gdt = QF_DTYPE_FP32,
         .outputs = 3, .M = 48, .K = 64, .layout = QF_SCALE_LAYOUT_SWIZZLED, .data = DATA_NAN},
        {.recipe = "nvfp4_nort", .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_FP16,
         .gdt = QF_DTYPE_FP16, .outputs = 3, .M = 32, .K = 32, .seed = 5, .data = DATA_NAN},
        {.recipe = "nvfp4", .role = QF_ROLE_INPUT, .norm = QF_NORM_LAYERNORM,
         .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16, .outputs = 3, .M = 32, .K = 64,
         .data = DATA_NAN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nv_bufs B;
        bufs_alloc(&cases[i], &B);
        make_inputs(&cases[i], &B, 77);
        run_op(ctx, &cases[i], &B);
        uint32_t r, c;
        memcpy(&r, B.amr.h, 4), memcpy(&c, B.amc.h, 4);
        if (r != 0x7FC00000u || c != 0x7FC00000u)
            fail_msg("%s: amaxes 0x%08X / 0x%08X, expected NaN 0x7FC00000", describe(&cases[i]),
                     r, c);
        bufs_free(&B);
        run_case(ctx, &cases[i], 77);
    }
    qf_ctx_free(ctx);
}

/* The RHT setting reaches the fusion key and the bytes: nvfp4 and nvfp4_nort grads differ in
 * key and columnwise data, and each matches its own reference. */
static void test_nv_rht_changes_key(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    nv_case c = {.recipe = "nvfp4", .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_BF16,
                 .gdt = QF_DTYPE_BF16, .outputs = QF_OUT_COLUMNWISE, .M = 128, .K = 64,
                 .seed = 1, .offset = 2};
    size_t n;
    uint8_t *a = grad_bytes(ctx, &c, &n);
    char key_rht[33];
    memcpy(key_rht, qf_ctx_last_kernel(ctx)->key, sizeof key_rht);
    assert_string_equal(qf_ctx_last_kernel(ctx)->name, "qf_nvfp4_quant_grad_bf16");
    c.recipe = "nvfp4_nort";
    uint8_t *b = grad_bytes(ctx, &c, &n);
    assert_string_equal(qf_ctx_last_kernel(ctx)->name, "qf_nvfp4_nort_quant_grad_bf16");
    assert_string_not_equal(qf_ctx_last_kernel(ctx)->key, key_rht);
    if (memcmp(a, b, n) == 0)
        fail_msg("RHT on and off gave identical columnwise bytes");
    free(a), free(b);
    run_case(ctx, &c, 4242);
    c.recipe = "nvfp4";
    run_case(ctx, &c, 4242);
    qf_ctx_free(ctx);
}

static int print_counts(void **state) {
    (void)state;
    if (qf_test_have_gpu())
        printf("gpu_nvfp4: %d cases checked bit for bit against the C reference\n", g_cases);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nv_rht_changes_key), cmocka_unit_test(test_nv_sr_streams),
        cmocka_unit_test(test_nv_zero_input),      cmocka_unit_test(test_nv_nan_input),
        cmocka_unit_test(test_nv_nq_options),      cmocka_unit_test(test_nv_quantize),
        cmocka_unit_test(test_nv_nq_bf16),         cmocka_unit_test(test_nv_nq_fp16),
        cmocka_unit_test(test_nv_nq_fp32),
    };
    return cmocka_run_group_tests_name("gpu_nvfp4", tests, NULL, print_counts);
}
