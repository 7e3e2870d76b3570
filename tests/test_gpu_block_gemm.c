/* test_gpu_block_gemm.c: fp8_block's GEMMs (numerics 2.5): qf_gemm through cuBLASLt's block
 * scale modes (VEC128_32F for inputs and gradients, BLK128x128_32F for weights), on operands the
 * C reference quantized (qf_quantize_fp8_block_ref), against qf_gemm_fp8_block_ref in fp64:
 *   fprop  y[M, N]  = X (1x128)       . W (128x128)^T,
 *   dgrad  dx[M, K] = dY (1x128)      . W^T (128x128, the transposed copy)^T,
 *   wgrad  dW[N, K] = dY^T (1x128 along tokens) . X^T (1x128 along tokens)^T,
 * with K or M not a multiple of 128 (partial blocks), a bias, a bf16 y within its rounding
 * (||y - ref|| / ||ref|| < 4e-3), an fp32 y within 1e-3, wgrad accumulated into an fp32
 * main_grad, and y bit-identical when every scale padding entry is NaN (never read).
 * The fp32 bound is the hardware's: Hopper's FP8 tensor cores sum the products inside each MMA
 * with fewer bits than fp32 (cuBLASLt's split accumulation promotes the partial sums to fp32
 * between MMAs); the same GEMM at 4096^3 measured 1.27e-4 against fp64 (per-tensor FP8 with
 * split accumulation alike), and 1.0e-4 to 3.6e-4 here on an H200. A lost block, a wrong scale
 * or a swapped index errs by the size of whole products, far above it.
 * Without a GPU: the argument checks on device-less sm_90 and sm_89 contexts. */
#include "test_gpu_util.h"

#include <math.h>
#include <stdio.h>

#include "qfuse.h"
#include "ref.h"
#include "ref_fp8_block.h"

static const char kRecipe[] = "fp8_block";
static int g_failed; /* cases that failed in test_block_gemms */

/* One [R, C] tensor quantized by the reference (both copies), its buffers on the device (or on
 * the host for device-less contexts), as a qf_quantized. */
typedef struct bq {
    int64_t R, C;
    int two_d;
    dual row, rs, col, cs;
    int64_t rs_dims[2], cs_dims[2];
    qf_quantized q;
} bq;

static dual host_buf(size_t bytes) {
    dual b = {NULL, aligned_alloc(256, (bytes + 255) / 256 * 256), bytes};
    assert_non_null(b.h);
    b.d = b.h;
    return b;
}

static void bq_make(bq *t, int64_t R, int64_t C, int two_d, uint64_t seed, int device) {
    memset(t, 0, sizeof *t);
    t->R = R, t->C = C, t->two_d = two_d;
    qf_fp8_block_scale_shape(two_d, R, C, &t->rs_dims[0], &t->rs_dims[1]);
    qf_fp8_block_scale_shape(two_d, C, R, &t->cs_dims[0], &t->cs_dims[1]);
    dual (*alloc)(size_t) = device ? dual_alloc : host_buf;
    t->row = alloc((size_t)(R * C)), t->col = alloc((size_t)(R * C));
    t->rs = alloc((size_t)(t->rs_dims[0] * t->rs_dims[1]) * 4);
    t->cs = alloc((size_t)(t->cs_dims[0] * t->cs_dims[1]) * 4);
    uint16_t *x = malloc((size_t)(R * C) * 2);
    assert_non_null(x);
    fill(x, QF_DTYPE_BF16, R, C, seed, 0.05f);
    const qf_fp8_block_opts o = {0.0f, 1, two_d};
    const qf_fp8_block_out out = {t->row.h, t->rs.h, t->col.h, t->cs.h, NULL, NULL};
    QF_OK_OR_FAIL(qf_quantize_fp8_block_ref(QF_DTYPE_BF16, x, R, C, &o, &out));
    free(x);
    if (device)
        dual_up(&t->row), dual_up(&t->rs), dual_up(&t->col), dual_up(&t->cs);
    t->q.t[QF_SLOT_ROWWISE_DATA] = tv(&t->row, QF_DTYPE_E4M3, 2, R, C);
    t->q.t[QF_SLOT_ROWWISE_SCALE_INV] = tv(&t->rs, QF_DTYPE_FP32, 2, t->rs_dims[0], t->rs_dims[1]);
    t->q.t[QF_SLOT_COLUMNWISE_DATA] = tv(&t->col, QF_DTYPE_E4M3, 2, C, R);
    t->q.t[QF_SLOT_COLUMNWISE_SCALE_INV] = tv(&t->cs, QF_DTYPE_FP32, 2, t->cs_dims[0],
                                              t->cs_dims[1]);
}

static void bq_free(bq *t, int device) {
    dual *b[] = {&t->row, &t->rs, &t->col, &t->cs};
    for (int i = 0; i < 4; i++) {
        if (device)
            dual_free(b[i]);
        else
            free(b[i]->h);
    }
}

/* The stored copy `copy` of t as the reference reads it: data [R', C'], scale_inv, 2D or not. */
typedef struct bview {
    const uint8_t *data;
    const float *scale;
    float *scale_mut;
    int64_t R, C, scale_n;
    int two_d;
    dual *scale_buf;
} bview;

static bview bq_view(bq *t, qf_copy copy) {
    const int row = copy == QF_COPY_ROWWISE;
    dual *s = row ? &t->rs : &t->cs;
    const int64_t *d = row ? t->rs_dims : t->cs_dims;
    return (bview){row ? t->row.h : t->col.h, s->h, s->h, row ? t->R : t->C, row ? t->C : t->R,
                   d[0] * d[1], t->two_d, s};
}

/* Sets every scale entry no element reads to NaN (on the device too). */
static void poison_padding(bview *v) {
    char *used = calloc((size_t)v->scale_n, 1);
    assert_non_null(used);
    for (int64_t r = 0; r < v->R; r++)
        for (int64_t c = 0; c < v->C; c += 1)
            used[qf_fp8_block_scale_index(v->two_d, v->R, v->C, r, c)] = 1;
    for (int64_t i = 0; i < v->scale_n; i++)
        if (!used[i])
            v->scale_mut[i] = NAN;
    free(used);
    dual_up(v->scale_buf);
}

static double rel_err(const double *ref, const void *y, qf_dtype dt, const float *prev,
                      int64_t n, int *bad) {
    double num = 0.0, den = 0.0;
    *bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double got = dt == QF_DTYPE_BF16 ? (double)qf_bf16_to_float(((const uint16_t *)y)[i])
                                               : (double)((const float *)y)[i];
        const double want = ref[i] + (prev ? (double)prev[i] : 0.0);
        *bad += !isfinite(got);
        num += (got - want) * (got - want);
        den += want * want;
    }
    return sqrt(num / den);
}

static const struct {
    const char *name;
    qf_copy a_copy, b_copy;
} kKinds[] = {{"fprop", QF_COPY_ROWWISE, QF_COPY_ROWWISE},
              {"dgrad", QF_COPY_ROWWISE, QF_COPY_COLUMNWISE},
              {"wgrad", QF_COPY_COLUMNWISE, QF_COPY_COLUMNWISE}};

/* One training GEMM `kind` of x [M, K], W [N, K] and dy [M, N] (y bf16, or fp32 with
 * `accumulate` into a filled main_grad), against fp64; then again with the scales' padding NaN:
 * the same bytes. */
static void block_gemm_case(qf_ctx_t *ctx, int kind, int64_t M, int64_t K, int64_t N,
                            int with_bias, qf_dtype ydt, int accumulate, uint64_t seed) {
    bq x, w, dy;
    bq_make(&x, M, K, 0, seed, 1);
    bq_make(&w, N, K, 1, seed + 1, 1);
    bq_make(&dy, M, N, 0, seed + 2, 1);
    bq *a = kind == 0 ? &x : &dy, *b = kind == 2 ? &x : &w;
    bview va = bq_view(a, kKinds[kind].a_copy), vb = bq_view(b, kKinds[kind].b_copy);
    const int64_t ym = va.R, yn = vb.R, red = va.C;
    assert_int_equal(vb.C, red);
    const size_t esz = ydt == QF_DTYPE_FP32 ? 4 : 2;
    dual y = dual_alloc((size_t)(ym * yn) * esz), bias = dual_alloc((size_t)yn * 2);
    double *dbias = malloc((size_t)yn * sizeof(double)), *yref = malloc((size_t)(ym * yn) * 8);
    float *prev = NULL;
    assert_true(dbias && yref);
    uint64_t s = seed * 7 + 1;
    for (int64_t i = 0; i < yn; i++) {
        ((uint16_t *)bias.h)[i] = qf_float_to_bf16(qf_test_rng_uniform(&s) * 2.0f);
        dbias[i] = qf_bf16_to_float(((uint16_t *)bias.h)[i]);
    }
    dual_up(&bias);
    qf_gemm_fp8_block_ref(va.data, va.scale, va.two_d, vb.data, vb.scale, vb.two_d,
                          with_bias ? dbias : NULL, ym, yn, red, yref);
    if (accumulate) { /* main_grad holds an earlier micro-batch's sum */
        prev = malloc((size_t)(ym * yn) * 4);
        assert_non_null(prev);
        for (int64_t i = 0; i < ym * yn; i++)
            prev[i] = (float)(yref[i] * 0.5 + qf_test_rng_uniform(&s));
    }
    const qf_operand oa = {&a->q, kKinds[kind].a_copy}, ob = {&b->q, kKinds[kind].b_copy};
    qf_tensor ty = tv(&y, ydt, 2, ym, yn), tbias = tv(&bias, QF_DTYPE_BF16, 1, yn, 0);
    const qf_gemm_opts opts = {.accumulate = accumulate};
    uint8_t *first = malloc(y.bytes);
    assert_non_null(first);
    for (int pass = 0; pass < 2; pass++) {
        if (accumulate) {
            memcpy(y.h, prev, y.bytes);
            dual_up(&y);
        } else {
            CK(cudaMemset(y.d, 0xFF, y.bytes)); /* NaN */
        }
        if (pass == 1)
            poison_padding(&va), poison_padding(&vb);
        const qf_status st = qf_gemm_ex(ctx, kRecipe, &oa, &ob, with_bias ? &tbias : NULL, &ty,
                                        &opts, NULL);
        if (st != QF_OK) { /* reported, and the test fails after every case has run */
            printf("  FAILED fp8_block %s M=%lld K=%lld N=%lld %s%s%s: %s\n", kKinds[kind].name,
                   (long long)M, (long long)K, (long long)N, qf_dtype_name(ydt),
                   with_bias ? " +bias" : "", accumulate ? " accumulated" : "", qf_last_error());
            g_failed++;
            break;
        }
        CK(cudaDeviceSynchronize());
        dual_down(&y);
        if (pass == 0) {
            int bad;
            const double e = rel_err(yref, y.h, ydt, prev, ym * yn, &bad);
            const double tol = ydt == QF_DTYPE_FP32 ? 1e-3 : 4e-3;
            printf("  fp8_block %s M=%lld K=%lld N=%lld -> y [%lld, %lld] %s%s%s: rel err %.3g\n",
                   kKinds[kind].name, (long long)M, (long long)K, (long long)N, (long long)ym,
                   (long long)yn, qf_dtype_name(ydt), with_bias ? " +bias" : "",
                   accumulate ? " accumulated" : "", e);
            if (bad || !(e < tol)) {
                printf("  FAILED: rel err %.3g (tol %.0e), %d non-finite\n", e, tol, bad);
                g_failed++;
            }
            memcpy(first, y.h, y.bytes);
        } else if (memcmp(first, y.h, y.bytes) != 0) {
            printf("  FAILED: y changed when the scales' padding entries became NaN\n");
            g_failed++;
        }
    }
    free(first), free(prev), free(dbias), free(yref);
    dual_free(&y), dual_free(&bias);
    bq_free(&x, 1), bq_free(&w, 1), bq_free(&dy, 1);
}

static void test_block_gemms(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    static const int64_t shapes[][3] = {{256, 512, 384}, {304, 528, 272}, {128, 128, 128}};
    g_failed = 0;
    for (int bias = 0; bias < 2; bias++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int kind = 0; kind < 3; kind++) {
                const int64_t *d = shapes[i];
                if (bias) { /* a bias on the GEMMs that have one: fprop and dgrad */
                    if (kind != 2)
                        block_gemm_case(ctx, kind, d[0], d[1], d[2], 1, QF_DTYPE_BF16, 0, 31 + i);
                    continue;
                }
                block_gemm_case(ctx, kind, d[0], d[1], d[2], 0, QF_DTYPE_BF16, 0, 11 + i);
                block_gemm_case(ctx, kind, d[0], d[1], d[2], 0, QF_DTYPE_FP32, kind == 2, 21 + i);
            }
    qf_ctx_free(ctx);
    if (g_failed)
        fail_msg("%d fp8_block GEMM cases failed (above)", g_failed);
}

/* Device-less contexts: valid fprop, dgrad and wgrad operands stop at the launch; sm_89 has no
 * block-scaled FP8 GEMM; scale matrices of the other block geometry, E5M2 data and a K that is
 * not a multiple of 16 are refused, naming the slot. */
static void expect(qf_ctx_t *ctx, const qf_operand *a, const qf_operand *b, qf_tensor *y,
                   qf_status want, const char *msg) {
    assert_int_equal(qf_gemm(ctx, kRecipe, a, b, NULL, y, NULL), want);
    if (!strstr(qf_last_error(), msg))
        fail_msg("expected \"%s\" in: %s", msg, qf_last_error());
}

static void test_block_gemm_args(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 90));
    const int64_t M = 304, K = 528, N = 272;
    bq x, w, dy;
    bq_make(&x, M, K, 0, 1, 0);
    bq_make(&w, N, K, 1, 2, 0);
    bq_make(&dy, M, N, 0, 3, 0);
    dual y = host_buf((size_t)(M * K) * 4);
    qf_tensor y_fprop = tv(&y, QF_DTYPE_BF16, 2, M, N), y_dgrad = tv(&y, QF_DTYPE_BF16, 2, M, K);
    qf_tensor y_wgrad = tv(&y, QF_DTYPE_FP32, 2, N, K);
    qf_operand xr = {&x.q, QF_COPY_ROWWISE}, wr = {&w.q, QF_COPY_ROWWISE};
    qf_operand wc = {&w.q, QF_COPY_COLUMNWISE}, dyr = {&dy.q, QF_COPY_ROWWISE};
    qf_operand dyc = {&dy.q, QF_COPY_COLUMNWISE}, xc = {&x.q, QF_COPY_COLUMNWISE};
    expect(ctx, &xr, &wr, &y_fprop, QF_ERR_NO_DEVICE, "arguments are valid");
    expect(ctx, &dyr, &wc, &y_dgrad, QF_ERR_NO_DEVICE, "arguments are valid");
    expect(ctx, &dyc, &xc, &y_wgrad, QF_ERR_NO_DEVICE, "arguments are valid");
    /* the weight's copy with 1x128 scales: the geometry of another role */
    qf_quantized wq = w.q;
    wq.t[QF_SLOT_ROWWISE_SCALE_INV] = x.q.t[QF_SLOT_ROWWISE_SCALE_INV];
    wq.t[QF_SLOT_ROWWISE_SCALE_INV].dims[1] = (N + 3) / 4 * 4;
    qf_operand wbad = {&wq, QF_COPY_ROWWISE};
    expect(ctx, &xr, &wbad, &y_fprop, QF_ERR_INVALID_ARG, "b.rowwise_scale_inv");
    qf_quantized xq = x.q;
    xq.t[QF_SLOT_ROWWISE_DATA].dtype = QF_DTYPE_E5M2;
    qf_operand xbad = {&xq, QF_COPY_ROWWISE};
    expect(ctx, &xbad, &wr, &y_fprop, QF_ERR_INVALID_ARG, "a.rowwise_data.dtype is e5m2");
    qf_ctx_free(ctx);
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 89));
    expect(ctx, &xr, &wr, &y_fprop, QF_ERR_UNSUPPORTED, "sm_89");
    qf_ctx_free(ctx);
    free(y.h);
    bq_free(&x, 0), bq_free(&w, 0), bq_free(&dy, 0);
    /* K = 120: no multiple of 16 for cuBLASLt */
    QF_OK_OR_FAIL(qf_ctx_init_host(&ctx, 90));
    bq_make(&x, 64, 120, 0, 4, 0);
    bq_make(&w, 32, 120, 1, 5, 0);
    y = host_buf(64 * 32 * 2);
    qf_tensor y2 = tv(&y, QF_DTYPE_BF16, 2, 64, 32);
    qf_operand a2 = {&x.q, QF_COPY_ROWWISE}, b2 = {&w.q, QF_COPY_ROWWISE};
    expect(ctx, &a2, &b2, &y2, QF_ERR_INVALID_ARG, "K = 120");
    free(y.h);
    bq_free(&x, 0), bq_free(&w, 0);
    qf_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_gemm_args),
        cmocka_unit_test(test_block_gemms),
    };
    qf_test_filter_from_env("gpu_block_gemm", tests);
    return cmocka_run_group_tests_name("gpu_block_gemm", tests, NULL, NULL);
}
