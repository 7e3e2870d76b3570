/* test_gpu_mxfp8.c: MXFP8 quantizers on the GPU against the C reference (SPEC 2.3, 3), bit for
 * bit: data and E8M0 scales, compact and swizzled, 1D and 2D blocks, with every output (padding
 * included) poisoned before each run. Skips cleanly without a GPU. */
#include "test_gpu_util.h"

#include <math.h>
#include <stdio.h>

#include "qfuse.h"
#include "ref.h"
#include "ref_mx.h"

static int g_cases;

static int64_t mismatches(const uint8_t *a, const uint8_t *b, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += a[i] != b[i];
    return bad;
}

typedef struct mx_case {
    const char *recipe;
    qf_role role;        /* QF_ROLE_INPUT: norm + quantize */
    qf_norm norm;
    int zcg;
    qf_dtype xdt;
    qf_dtype fmt;
    int block_2d;
    qf_scale_layout layout;
    unsigned outputs;
    int64_t M, K;
} mx_case;

/* The reference for a case, given the kernel's statistics (NULL for plain quantize). */
static void mx_reference(const mx_case *c, const void *x, const void *g, const void *b,
                         const float *mu, const float *rs, uint8_t *row, uint8_t *srow,
                         uint8_t *col, uint8_t *scol) {
    qf_norm norm = c->role == QF_ROLE_INPUT ? c->norm : QF_NORM_NONE;
    qf_norm_quantize_mxfp8_ref(norm, c->zcg, c->xdt, x, c->xdt, g, b, c->M, c->K, 1e-5f,
                               norm == QF_NORM_LAYERNORM ? mu : NULL, norm ? rs : NULL, c->fmt,
                               QF_SCALE_ROUNDING_CEIL, c->block_2d, c->layout,
                               (c->outputs & QF_OUT_ROWWISE) ? row : NULL, srow,
                               (c->outputs & QF_OUT_COLUMNWISE) ? col : NULL, scol, NULL, NULL);
}

/* Byte sizes of the padded scale matrices (SPEC 2.3). */
static void scale_bytes(int64_t M, int64_t K, size_t *row, size_t *col) {
    int64_t r, cc;
    qf_mx_scale_shape_row(M, K, &r, &cc);
    *row = (size_t)(r * cc);
    qf_mx_scale_shape_col(M, K, &r, &cc);
    *col = (size_t)(r * cc);
}

static void run_case(qf_ctx_t *ctx, const mx_case *c, uint64_t seed) {
    const int64_t M = c->M, K = c->K, n = M * K;
    size_t srb, scb;
    scale_bytes(M, K, &srb, &scb);
    int64_t sr_r, sr_c, sc_r, sc_c;
    qf_mx_scale_shape_row(M, K, &sr_r, &sr_c);
    qf_mx_scale_shape_col(M, K, &sc_r, &sc_c);
    dual x = dual_alloc((size_t)n * qf_dtype_size(c->xdt)), g = dual_alloc((size_t)K * 4);
    dual b = dual_alloc((size_t)K * 4), row = dual_alloc((size_t)n), col = dual_alloc((size_t)n);
    dual srow = dual_alloc(srb), scol = dual_alloc(scb);
    dual mu = dual_alloc((size_t)M * 4), rs = dual_alloc((size_t)M * 4);
    fill(x.h, c->xdt, M, K, seed, c->role == QF_ROLE_INPUT ? 0.3f : 0.0f);
    fill(g.h, c->xdt, 1, K, seed + 1, c->zcg ? 0.0f : 1.0f);
    fill(b.h, c->xdt, 1, K, seed + 2, 0.0f);
    dual_up(&x), dual_up(&g), dual_up(&b);
    qf_tensor tx = tv(&x, c->xdt, 2, M, K), tg = tv(&g, c->xdt, 1, K, 0), tb = tv(&b, c->xdt, 1, K, 0);
    qf_tensor tmu = tv(&mu, QF_DTYPE_FP32, 1, M, 0), trs = tv(&rs, QF_DTYPE_FP32, 1, M, 0);
    qf_quantized out = {.layout = c->layout};
    if (c->outputs & QF_OUT_ROWWISE) {
        out.t[QF_SLOT_ROWWISE_DATA] = tv(&row, c->fmt, 2, M, K);
        out.t[QF_SLOT_ROWWISE_SCALE_INV] = tv(&srow, QF_DTYPE_E8M0, 2, sr_r, sr_c);
    }
    if (c->outputs & QF_OUT_COLUMNWISE) {
        out.t[QF_SLOT_COLUMNWISE_DATA] = tv(&col, c->fmt, 2, M, K);
        out.t[QF_SLOT_COLUMNWISE_SCALE_INV] = tv(&scol, QF_DTYPE_E8M0, 2, sc_r, sc_c);
    }
    int ln = c->norm == QF_NORM_LAYERNORM;
    if (ln)
        out.t[QF_SLOT_MU] = tmu;
    out.t[QF_SLOT_RSIGMA] = trs; /* ignored without a norm */
    const qf_norm_desc nd = {.norm = c->norm, .zero_centered_gamma = c->zcg, .eps = 1e-5f,
                             .gamma = tg, .beta = ln ? tb : (qf_tensor){0}};
    QF_OK_OR_FAIL(qf_quantize(ctx, c->recipe, c->role, &tx, c->role == QF_ROLE_INPUT ? &nd : NULL,
                              NULL, NULL, &out, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&row), dual_down(&col), dual_down(&srow), dual_down(&scol), dual_down(&mu),
        dual_down(&rs);
    uint8_t *rr = malloc((size_t)n), *rc = malloc((size_t)n), *rsr = malloc(srb), *rsc = malloc(scb);
    memset(rr, 0xAB, (size_t)n), memset(rc, 0xAB, (size_t)n);
    memset(rsr, 0xAB, srb), memset(rsc, 0xAB, scb);
    mx_reference(c, x.h, g.h, b.h, mu.h, rs.h, rr, (c->outputs & QF_OUT_ROWWISE) ? rsr : NULL, rc,
                 (c->outputs & QF_OUT_COLUMNWISE) ? rsc : NULL);
    /* Whole buffers, padding included: unrequested outputs must still hold the poison. */
    if (mismatches(rr, row.h, n) || mismatches(rsr, srow.h, (int64_t)srb) ||
        mismatches(rc, col.h, n) || mismatches(rsc, scol.h, (int64_t)scb))
        fail_msg("%s role %d norm %d zcg %d %s M=%lld K=%lld layout %d outputs %u: row %lld, "
                 "row scales %lld, col %lld, col scales %lld bytes differ", c->recipe, c->role,
                 c->norm, c->zcg, qf_dtype_name(c->xdt), (long long)M, (long long)K, c->layout,
                 c->outputs, (long long)mismatches(rr, row.h, n),
                 (long long)mismatches(rsr, srow.h, (int64_t)srb),
                 (long long)mismatches(rc, col.h, n),
                 (long long)mismatches(rsc, scol.h, (int64_t)scb));
    free(rr), free(rc), free(rsr), free(rsc);
    dual *all[] = {&x, &g, &b, &row, &col, &srow, &scol, &mu, &rs};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
    g_cases++;
}

static int ctx_or_skip(qf_ctx_t **ctx) {
    if (!qf_test_have_gpu())
        return 0;
    QF_OK_OR_FAIL(qf_ctx_init(ctx, 0));
    return 1;
}

static const int64_t kDims[] = {32, 64, 96, 993, 1024, 8192};
#define NDIMS ((int)(sizeof kDims / sizeof kDims[0]))

static void nq_sweep(qf_dtype xdt) {
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    /* QFUSE_TEST_QUICK=1 (sanitizer runs) skips the shapes of more than 2^22 elements. */
    const int quick = getenv("QFUSE_TEST_QUICK") && atoi(getenv("QFUSE_TEST_QUICK"));
    int i = 0;
    for (int a = 0; a < NDIMS; a++)
        for (int b = 0; b < NDIMS; b++, i++) {
            if (quick && kDims[a] * kDims[b] > (1 << 22))
                continue;
            mx_case c = {.recipe = "mxfp8", .role = QF_ROLE_INPUT,
                         .norm = (a + b) % 2 ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM,
                         .zcg = (i / 2) % 2, .xdt = xdt, .fmt = QF_DTYPE_E4M3,
                         .layout = (i / 3) % 2 ? QF_SCALE_LAYOUT_SWIZZLED : QF_SCALE_LAYOUT_COMPACT,
                         .outputs = i % 5 == 4 ? QF_OUT_ROWWISE : QF_OUT_ROWWISE | QF_OUT_COLUMNWISE,
                         .M = kDims[a], .K = kDims[b]};
            run_case(ctx, &c, 31u * (uint64_t)i + (uint64_t)xdt);
        }
    qf_ctx_free(ctx);
}

static void test_mx_nq_bf16(void **state) {
    (void)state;
    nq_sweep(QF_DTYPE_BF16);
}

static void test_mx_nq_fp16(void **state) {
    (void)state;
    nq_sweep(QF_DTYPE_FP16);
}

static void test_mx_nq_fp32(void **state) {
    (void)state;
    nq_sweep(QF_DTYPE_FP32);
}

/* Partial blocks in both directions, every norm/zcg/output/layout combination once; the last
 * shape is whole 64x64 tiles (the rows entry, then the columnwise entry). */
static void test_mx_partial_blocks(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    static const int64_t shapes[][2] = {{1, 1},     {1, 33},   {33, 1},
                                        {7, 769},   {217, 259}, {65, 95},
                                        {128, 192}};
    int i = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int norm = QF_NORM_LAYERNORM; norm <= QF_NORM_RMSNORM; norm++)
            for (unsigned o = 1; o <= 3; o++, i++) {
                mx_case c = {.recipe = "mxfp8", .role = QF_ROLE_INPUT, .norm = (qf_norm)norm,
                             .zcg = i % 2, .xdt = QF_DTYPE_BF16, .fmt = QF_DTYPE_E4M3,
                             .layout = (qf_scale_layout)(i / 2 % 2), .outputs = o,
                             .M = shapes[s][0], .K = shapes[s][1]};
                run_case(ctx, &c, 500u + (uint64_t)i);
            }
    qf_ctx_free(ctx);
}

/* Weights (1D and 32x32) and gradients, both layouts, all dtypes. */
static void test_mx_quantize(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    static const qf_dtype dts[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};
    static const int64_t shapes[][2] = {{32, 32}, {96, 993}, {993, 64}, {1024, 1024}, {8192, 96}};
    int i = 0;
    for (int v = 0; v < 3; v++)
        for (int d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++, i++) {
                mx_case c = {.recipe = v == 2 ? "mxfp8_2d" : "mxfp8",
                             .role = v == 1 ? QF_ROLE_GRAD : QF_ROLE_WEIGHT, .xdt = dts[d],
                             .fmt = QF_DTYPE_E4M3, .block_2d = v == 2,
                             .layout = (qf_scale_layout)(i % 2),
                             .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE,
                             .M = shapes[s][0], .K = shapes[s][1]};
                run_case(ctx, &c, 900u + (uint64_t)i);
            }
    qf_ctx_free(ctx);
}

static int print_counts(void **state) {
    (void)state;
    if (qf_test_have_gpu())
        printf("gpu_mxfp8: %d cases checked bit for bit against the C reference\n", g_cases);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mx_partial_blocks),
        cmocka_unit_test(test_mx_quantize),
        cmocka_unit_test(test_mx_nq_bf16),
        cmocka_unit_test(test_mx_nq_fp16),
        cmocka_unit_test(test_mx_nq_fp32),
    };
    return cmocka_run_group_tests_name("gpu_mxfp8", tests, NULL, print_counts);
}
