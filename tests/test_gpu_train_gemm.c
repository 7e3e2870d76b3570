/* test_gpu_train_gemm.c: the three training GEMMs of numerics 6 end to end on the GPU. x [M, K],
 * W [N, K] and dy [M, N] (bf16) are quantized by qf_quantize with both copies (roles input,
 * weight, grad); then qf_gemm runs fprop y = x W^T, dgrad dx = dy W and wgrad dW = dy^T x from
 * the copies numerics 6 names (x is quantized by the fused RMSNorm + quantize, gamma 1, so the
 * GEMMs read xn = x * rsigma). Each result is checked against the C reference of the same GEMM
 * over the bytes, scales and amaxes the quantizers wrote (double; a bf16 output adds its own
 * rounding), and wgrad also against dy^T xn of the unquantized values, which shows that NVFP4's
 * RHT on both columnwise copies cancels. Every recipe whose family runs dgrad and wgrad on this
 * GPU takes part (on sm_90 all of them; MXFP8 reads its columnwise copies as stored, [K, M]); a
 * family whose GEMM module runs either way (QF_GEMM_KERNEL: staged, or its kernel directly for
 * the kinds it runs) runs under QFUSE_HOPPER_GEMM=staged and =direct. Each GEMM also writes an fp32
 * y (fp32 sums, no output rounding: rel err <= fp32_bound against the same reference; fprop with
 * a bias) and accumulates twice into an fp32 main_grad (qf_gemm_ex, y = y0 + 2 A B^T, the same
 * bound), at two sizes: small, and a reduction of 8192 for fprop. For MXFP8 and NVFP4, b's bf16
 * copy from qf_dequantize matches the reference values exactly, and the GEMM reading it
 * (opts.b_dequantized) is bit-identical to the one without it. Without a GPU it skips. */
#include "test_gpu_util.h"

#include <math.h>

#include "ref/ref.h"
#include "ref/ref_mx.h"
#include "ref/ref_fp8_block.h"
#include "ref/ref_nvfp4.h"
#include "family.h"
#include "registry.h"

/* x [M, K], W [N, K], dy [M, N]. Multiples of 32: the reduction of every GEMM here (K, N, M) is
 * whole rows of NVFP4 bytes. */
typedef struct train_dims {
    int64_t M, N, K;
} train_dims;

static const train_dims kDims[] = {{256, 128, 192}, {128, 64, 8192}};

enum { T_X, T_W, T_DY, T_COUNT };   /* the quantized tensors */

/* One training GEMM: y [rows, cols] = A B^T with A, B the given copies of two tensors. */
typedef struct train_gemm {
    const char *name;
    int a, b;             /* T_* */
    qf_copy a_copy, b_copy;
    int64_t rows, cols, k; /* y [rows, cols], reduction k */
} train_gemm;

/* fprop, dgrad and wgrad of numerics 6 at dims d. */
static void train_gemms(const train_dims *d, train_gemm g[3]) {
    g[0] = (train_gemm){"fprop", T_X, T_W, QF_COPY_ROWWISE, QF_COPY_ROWWISE, d->M, d->N, d->K};
    g[1] = (train_gemm){"dgrad", T_DY, T_W, QF_COPY_ROWWISE, QF_COPY_COLUMNWISE, d->M, d->K,
                        d->N};
    g[2] = (train_gemm){"wgrad", T_DY, T_X, QF_COPY_COLUMNWISE, QF_COPY_COLUMNWISE, d->N, d->K,
                        d->M};
}

/* Rel err bound of an fp32 y against fp64 of the same operands, per family. MXFP8 and NVFP4 on
 * Hopper sum exact bf16 products on the bf16 tensor cores in fp32: 1e-5 (SPEC 7). Per-tensor FP8
 * runs on the FP8 tensor cores, which keep only about 14 bits of each instruction's partial sum
 * before cuBLASLt promotes it to fp32 (DeepSeek-V3 technical report, 3.3.2; measured on an H200:
 * 9.5e-5 at k 192): 4e-4, a quarter of the bf16 output rounding (rms about 1.6e-3), so an output
 * rounded to bf16 fails either bound. */
static double fp32_bound(qf_family f) {
    if (f == QF_FAMILY_FP8_BLOCK) /* the FP8 tensor cores with block scales: 1.0e-4 to 3.6e-4
                                   * measured on an H200 (test_gpu_block_gemm) */
        return 1e-3;
    return f == QF_FAMILY_MXFP8 || f == QF_FAMILY_NVFP4 ? 1e-5 : 4e-4;
}

/* Rel err bound of wgrad against dy^T xn of the unquantized values, per family: random data of
 * the scale 1 per-tensor FP8 handles exactly enough that the relative rounding of E5M2 (rms
 * 2^-3 / sqrt(3) = 7.2%) and E4M3 (3.6%) dominate, about 8% for the product; NVFP4's E2M1 codes
 * and block scales leave about 15-20% rms. A wgrad whose transforms did not cancel would be
 * uncorrelated with dy^T x (rel err near sqrt(2)). */
static double wgrad_bound(qf_family f) { /* MXFP8: E4M3 like per-tensor FP8 */
    return f == QF_FAMILY_NVFP4 ? 0.40 : 0.15;
}

/* The values of an MXFP8 operand of `rows` rows and reduction k, K-major ([rows, k] doubles):
 * its copy dequantized as stored ([k, rows] for the columnwise copy, qf_mx_dequant_ref), then
 * transposed when columnwise. */
static double *mx_operand(const qtensor *t, int col, int64_t rows, int64_t k) {
    const qf_slot d = col ? QF_SLOT_COLUMNWISE_DATA : QF_SLOT_ROWWISE_DATA;
    const qf_slot sc = col ? QF_SLOT_COLUMNWISE_SCALE_INV : QF_SLOT_ROWWISE_SCALE_INV;
    double *v = malloc((size_t)(rows * k) * sizeof *v), *out = v;
    assert_non_null(v);
    qf_mx_dequant_ref(t->q.t[d].dtype, col, qt_host(t, d), qt_host(t, sc), col ? k : rows,
                      col ? rows : k, v);
    if (col) {
        out = malloc((size_t)(rows * k) * sizeof *out);
        assert_non_null(out);
        qf_transpose_f64_ref(v, k, rows, out);
        free(v);
    }
    return out;
}

/* The reference of g under family f over the copies' bytes: y double [rows, cols]. */
static void gemm_ref(qf_family f, const train_gemm *g, const qtensor *a, const qtensor *b,
                     double *y) {
    const int ca = g->a_copy == QF_COPY_COLUMNWISE, cb = g->b_copy == QF_COPY_COLUMNWISE;
    const qf_slot da = ca ? QF_SLOT_COLUMNWISE_DATA : QF_SLOT_ROWWISE_DATA;
    const qf_slot db = cb ? QF_SLOT_COLUMNWISE_DATA : QF_SLOT_ROWWISE_DATA;
    if (f == QF_FAMILY_MXFP8) {
        double *va = mx_operand(a, ca, g->rows, g->k), *vb = mx_operand(b, cb, g->cols, g->k);
        qf_gemm_f64_ref(va, vb, 1.0, NULL, g->rows, g->cols, g->k, y);
        free(va);
        free(vb);
    } else if (f == QF_FAMILY_NVFP4) {
        const qf_slot sa = ca ? QF_SLOT_COLUMNWISE_SCALE_INV : QF_SLOT_ROWWISE_SCALE_INV;
        const qf_slot sb = cb ? QF_SLOT_COLUMNWISE_SCALE_INV : QF_SLOT_ROWWISE_SCALE_INV;
        const qf_slot aa = ca ? QF_SLOT_AMAX_COLUMNWISE : QF_SLOT_AMAX_ROWWISE;
        const qf_slot ab = cb ? QF_SLOT_AMAX_COLUMNWISE : QF_SLOT_AMAX_ROWWISE;
        qf_gemm_nvfp4_ref(qt_host(a, da), qt_host(a, sa), qt_float(a, aa), qt_host(b, db),
                          qt_host(b, sb), qt_float(b, ab), NULL, g->rows, g->cols, g->k, y);
    } else if (f == QF_FAMILY_FP8_BLOCK) { /* the copies' block scales; W's are 128x128 tiles */
        const qf_slot sa = ca ? QF_SLOT_COLUMNWISE_SCALE_INV : QF_SLOT_ROWWISE_SCALE_INV;
        const qf_slot sb = cb ? QF_SLOT_COLUMNWISE_SCALE_INV : QF_SLOT_ROWWISE_SCALE_INV;
        qf_gemm_fp8_block_ref(qt_host(a, da), (const float *)qt_host(a, sa), g->a == T_W,
                              qt_host(b, db), (const float *)qt_host(b, sb), g->b == T_W, NULL,
                              g->rows, g->cols, g->k, y);
    } else {
        qf_gemm_fp8_ref(a->q.t[da].dtype, qt_host(a, da), qt_float(a, QF_SLOT_SCALE_INV),
                        b->q.t[db].dtype, qt_host(b, db), qt_float(b, QF_SLOT_SCALE_INV), NULL,
                        g->rows, g->cols, g->k, y);
    }
}

/* dW = dy^T xn of the bf16 inputs, xn = x * rsigma (the rsigma the forward wrote), double
 * [N, K]. */
static void wgrad_exact(const train_dims *d, const uint16_t *dy, const uint16_t *x,
                        const float *rsigma, double *y) {
    const int64_t M = d->M, N = d->N, K = d->K;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t m = 0; m < M; m++)
                s += (double)qf_bf16_to_float(dy[m * N + n]) * qf_bf16_to_float(x[m * K + k]) *
                     rsigma[m];
            y[n * K + k] = s;
        }
}

/* The fp32 outputs of g: y alone (+ a bf16 bias [cols] when bias is not NULL), then y0 + A B^T
 * accumulated twice into a main_grad (y0 random at the reference's scale), both within fp32_bound
 * of the reference `want` (A B^T without the bias). */
static void check_fp32(qf_ctx_t *ctx, const qf_recipe *r, const train_gemm *g, const qf_operand *a,
                       const qf_operand *b, const double *want, const dual *bias) {
    const int64_t n = g->rows * g->cols;
    dual y = dual_alloc((size_t)n * 4);
    qf_tensor yt = tv(&y, QF_DTYPE_FP32, 2, g->rows, g->cols);
    const qf_tensor bt = bias ? tv(bias, QF_DTYPE_BF16, 1, g->cols, 0) : (qf_tensor){0};
    CK(cudaMemset(y.d, 0xFF, y.bytes));
    QF_OK_OR_FAIL(qf_gemm(ctx, r->name, a, b, bias ? &bt : NULL, &yt, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&y);
    double *acc = malloc((size_t)n * sizeof *acc);
    assert_non_null(acc);
    for (int64_t i = 0; i < n; i++)
        acc[i] = want[i] + (bias ? qf_bf16_to_float(((const uint16_t *)bias->h)[i % g->cols]) : 0);
    int64_t bad;
    const double e = rel_frob_sized(y.h, QF_DTYPE_FP32, acc, NULL, n, &bad);
    double rms = 0;
    for (int64_t i = 0; i < n; i++)
        rms += want[i] * want[i] / (double)n;
    rms = sqrt(rms);
    uint64_t seed = 77;
    for (int64_t i = 0; i < n; i++) {
        ((float *)y.h)[i] = (float)(rms * qf_test_rng_uniform(&seed));
        acc[i] = (double)((float *)y.h)[i] + 2.0 * want[i];
    }
    dual_up(&y);
    const qf_gemm_opts opts = {.accumulate = 1};
    for (int i = 0; i < 2; i++)
        QF_OK_OR_FAIL(qf_gemm_ex(ctx, r->name, a, b, NULL, &yt, &opts, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&y);
    int64_t bad_acc;
    const double ea = rel_frob_sized(y.h, QF_DTYPE_FP32, acc, NULL, n, &bad_acc);
    printf("; fp32 y%s %.3e, main_grad += twice %.3e (bound %.0e)", bias ? " + bias" : "", e, ea,
           fp32_bound(r->family));
    assert_int_equal(bad, 0);
    assert_int_equal(bad_acc, 0);
    assert_true(e <= fp32_bound(r->family));
    assert_true(ea <= fp32_bound(r->family));
    free(acc);
    dual_free(&y);
}

/* MXFP8 and NVFP4: b's bf16 copy from qf_dequantize (the dims of its stored copy) equals the
 * reference values of that copy exactly (numerics 7: bf16(element * scale) is exact here), and
 * qf_gemm_ex reading it as opts.b_dequantized writes y bit-identical to y_plain, the same GEMM
 * without it (under the same QFUSE_HOPPER_GEMM way). Other families refuse qf_dequantize. */
static void check_b_dequantized(qf_ctx_t *ctx, const qf_recipe *r, const train_gemm *g,
                                qf_role b_role, const qf_operand *a, const qf_operand *b,
                                const qtensor *bq, const dual *y_plain) {
    const int mx = r->family == QF_FAMILY_MXFP8;
    if (!mx && r->family != QF_FAMILY_NVFP4) {
        const qf_tensor none = {0};
        assert_int_equal(qf_dequantize(ctx, r->name, b_role, b, (qf_tensor *)&none, NULL),
                         QF_ERR_UNSUPPORTED);
        return;
    }
    const int col = g->b_copy == QF_COPY_COLUMNWISE;
    const qf_slot ds = col ? QF_SLOT_COLUMNWISE_DATA : QF_SLOT_ROWWISE_DATA;
    const qf_slot ss = col ? QF_SLOT_COLUMNWISE_SCALE_INV : QF_SLOT_ROWWISE_SCALE_INV;
    /* stored copy [R, C] elements: MXFP8's columnwise copy is [k, cols], every other [cols, k] */
    const int64_t R = mx && col ? g->k : g->cols, C = mx && col ? g->cols : g->k;
    dual kept = dual_alloc((size_t)(R * C) * 2);
    CK(cudaMemset(kept.d, 0xFF, kept.bytes));
    qf_tensor kt = tv(&kept, QF_DTYPE_BF16, 2, R, C);
    QF_OK_OR_FAIL(qf_dequantize(ctx, r->name, b_role, b, &kt, NULL));
    double *want = malloc((size_t)(R * C) * sizeof *want);
    assert_non_null(want);
    if (mx)
        qf_mx_dequant_ref(bq->q.t[ds].dtype, col, qt_host(bq, ds), qt_host(bq, ss), R, C, want);
    else
        qf_nvfp4_dequant_ref(qt_host(bq, ds), qt_host(bq, ss), R, C, want);
    dual y = dual_alloc(y_plain->bytes);
    CK(cudaMemset(y.d, 0xA5, y.bytes));
    qf_tensor yt = tv(&y, QF_DTYPE_BF16, 2, g->rows, g->cols);
    const qf_gemm_opts o = {.b_dequantized = &kt};
    QF_OK_OR_FAIL(qf_gemm_ex(ctx, r->name, a, b, NULL, &yt, &o, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&kept);
    dual_down(&y);
    int64_t off = 0;
    for (int64_t i = 0; i < R * C; i++) {
        const double v = qf_bf16_to_float(((const uint16_t *)kept.h)[i]);
        off += !(v == want[i] || (isnan(v) && isnan(want[i])));
    }
    const int same = memcmp(y.h, y_plain->h, y.bytes) == 0;
    printf("; b_dequantized [%lld, %lld]: %lld values off the reference, y %s", (long long)R,
           (long long)C, (long long)off, same ? "bit-identical" : "DIFFERS");
    assert_int_equal(off, 0);
    assert_true(same);
    free(want);
    dual_free(&kept);
    dual_free(&y);
}

static void fill_const_bf16(void *p, int64_t n, float v) {
    for (int64_t i = 0; i < n; i++)
        store_as(p, QF_DTYPE_BF16, i, v);
}

/* Uniform [-1, 1) bf16 data: within every format's range at scale 1 (xn = x * rsigma, rms 1, is
 * within [-1.8, 1.8)). */
static void fill_unit(void *p, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++)
        store_as(p, QF_DTYPE_BF16, i, qf_test_rng_uniform(&seed));
}

static void run_recipe(qf_ctx_t *ctx, const qf_recipe *r, const train_dims *d) {
    const int64_t dims[T_COUNT][2] = {[T_X] = {d->M, d->K}, [T_W] = {d->N, d->K},
                                      [T_DY] = {d->M, d->N}};
    const int64_t K = d->K;
    train_gemm gemms[3];
    train_gemms(d, gemms);
    static const qf_role roles[T_COUNT] = {QF_ROLE_INPUT, QF_ROLE_WEIGHT, QF_ROLE_GRAD};
    qf_scale_layout layout = QF_SCALE_LAYOUT_COMPACT;
    if (qf_family_get(r->family)->scale_layout) /* block scales: the layout the GEMM reads */
        QF_OK_OR_FAIL(qf_gemm_scale_layout(r->name, qf_ctx_arch(ctx), &layout));
    const float one = 1.0f;
    dual scale = dual_alloc(sizeof one); /* fp8_delayed's quantization scale */
    memcpy(scale.h, &one, sizeof one);
    dual_up(&scale);
    dual bias = dual_alloc((size_t)d->N * 2); /* fprop's bias, for the fp32 y */
    fill_unit(bias.h, d->N, 99);
    dual_up(&bias);
    dual gamma = dual_alloc(K * 2); /* RMSNorm gamma = 1 */
    fill_const_bf16(gamma.h, K, 1.0f);
    dual_up(&gamma);
    const qf_norm_desc rms = {.norm = QF_NORM_RMSNORM, .eps = 1e-6f,
                              .gamma = tv(&gamma, QF_DTYPE_BF16, 1, K, 0)};
    dual in[T_COUNT];
    qtensor q[T_COUNT];
    for (int t = 0; t < T_COUNT; t++) {
        in[t] = dual_alloc((size_t)(dims[t][0] * dims[t][1] * 2));
        fill_unit(in[t].h, dims[t][0] * dims[t][1], 0xC0FFEEull + 977u * (uint64_t)t);
        dual_up(&in[t]);
        qt_alloc(&q[t], r->name, roles[t], QF_NORM_RMSNORM, dims[t][0], dims[t][1], layout);
        const qf_tensor x = tv(&in[t], QF_DTYPE_BF16, 2, dims[t][0], dims[t][1]);
        const qf_rng rng = {.seed = 1234, .offset = 7};
        QF_OK_OR_FAIL(qf_quantize(ctx, r->name, roles[t], &x, t == T_X ? &rms : NULL, scale.d,
                                  &rng, &q[t].q, NULL));
    }
    CK(cudaDeviceSynchronize());
    for (int t = 0; t < T_COUNT; t++)
        qt_down(&q[t]);
    for (int i = 0; i < 3; i++) {
        const train_gemm *g = &gemms[i];
        const int64_t n = g->rows * g->cols;
        dual y = dual_alloc((size_t)n * 2);
        qf_tensor yt = tv(&y, QF_DTYPE_BF16, 2, g->rows, g->cols);
        const qf_operand a = {&q[g->a].q, g->a_copy}, b = {&q[g->b].q, g->b_copy};
        QF_OK_OR_FAIL(qf_gemm(ctx, r->name, &a, &b, NULL, &yt, NULL));
        CK(cudaDeviceSynchronize());
        dual_down(&y);
        double *want = malloc((size_t)n * sizeof *want);
        assert_non_null(want);
        gemm_ref(r->family, g, &q[g->a], &q[g->b], want);
        int64_t bad;
        const double e = rel_frob_sized(y.h, QF_DTYPE_BF16, want, NULL, n, &bad);
        printf("%-12s %s [%lld, %lld] (k %lld): rel err %.3e against the reference of its "
               "copies, non-finite %lld", r->name, g->name, (long long)g->rows,
               (long long)g->cols, (long long)g->k, e, (long long)bad);
        assert_int_equal(bad, 0);
        assert_true(e <= 4e-3); /* bf16 output rounding (2^-9 at most, rms about 2^-10) */
        check_fp32(ctx, r, g, &a, &b, want, i == 0 ? &bias : NULL);
        check_b_dequantized(ctx, r, g, roles[g->b], &a, &b, &q[g->b], &y);
        if (g->a_copy == QF_COPY_COLUMNWISE) {
            wgrad_exact(d, in[T_DY].h, in[T_X].h,
                        (const float *)qt_host(&q[T_X], QF_SLOT_RSIGMA), want);
            const double ex = rel_frob_sized(y.h, QF_DTYPE_BF16, want, NULL, n, &bad);
            printf("; %.3e against dy^T xn (bound %.2f)", ex, wgrad_bound(r->family));
            assert_true(ex <= wgrad_bound(r->family));
        }
        printf("\n");
        free(want);
        dual_free(&y);
    }
    for (int t = 0; t < T_COUNT; t++) {
        qt_free(&q[t]);
        dual_free(&in[t]);
    }
    dual_free(&scale);
    dual_free(&gamma);
    dual_free(&bias);
}

static void test_training_gemms(void **state) {
    (void)state;
    static const char *const ways[] = {"staged", "direct"};
    qf_ctx_t *ctx = gpu_ctx();
    int ran = 0, runs = 0;
    for (int i = 0; i < qf_recipe_count; i++) {
        const qf_recipe *r = &qf_recipes[i];
        const qf_gemm_path path = qf_family_gemm_path(r->family, qf_ctx_arch(ctx));
        const unsigned need = QF_GEMM_KIND_BIT(QF_GEMM_DGRAD) | QF_GEMM_KIND_BIT(QF_GEMM_WGRAD);
        if (path.engine == QF_GEMM_NONE || (path.kinds & need) != need)
            continue;
        const int n_ways = path.engine == QF_GEMM_KERNEL ? 2 : 1;
        for (int w = 0; w < n_ways; w++) {
            if (n_ways > 1) {
                setenv("QFUSE_HOPPER_GEMM", ways[w], 1);
                printf("%s: QFUSE_HOPPER_GEMM=%s\n", r->name, ways[w]);
            }
            for (size_t j = 0; j < sizeof kDims / sizeof kDims[0]; j++)
                run_recipe(ctx, r, &kDims[j]);
            runs++;
        }
        unsetenv("QFUSE_HOPPER_GEMM");
        ran++;
    }
    printf("test_gpu_train_gemm: %d recipes (%d runs), 3 GEMMs each at %d sizes, bf16 and fp32 "
           "y\n", ran, runs, (int)(sizeof kDims / sizeof kDims[0]));
    /* fp8_delayed, fp8_current, nvfp4, nvfp4_nort, and on sm_89..99 mxfp8, mxfp8_2d */
    assert_true(ran >= 4);
    qf_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_training_gemms)};
    qf_test_filter_from_env("gpu_train_gemm", tests);
    return cmocka_run_group_tests_name("gpu_train_gemm", tests, NULL, NULL);
}
