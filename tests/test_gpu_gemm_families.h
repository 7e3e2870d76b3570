/* test_gpu_gemm_families.h: the GEMM problems of test_gpu_gemm.c per family: how a case is made,
 * run through qf_gemm and checked against the fp64 reference with the family's tolerance:
 *   fp8_delayed (numerics 2.1): qf_gemm_fp8_ref, ||y - ref|| / ||ref|| < kFp8Tol;
 *   mxfp8 (numerics 2.3): qf_gemm_mxfp8_ref, ||y - ref|| / ||ref|| < kMxGemm.tol, no non-finite y,
 *       y bit-identical with the padded scale bytes poisoned 0xFF and 0x00;
 *   nvfp4 (numerics 2.4): qf_gemm_nvfp4_ref, every element within its bound (below) and
 *       ||y - ref|| / ||ref|| < kNvGemm.tol, no non-finite y, padding as mxfp8.
 * The two block-scaled families share one case path (blk_*), parametrized by a blk_gemm_fmt row.
 * y is poisoned with NaN before every launch.
 *
 * NVFP4 error bound, per element: the kernel's products are exact (deq values are f16 numbers)
 * and are summed in fp32 by the tensor cores, one k16 MMA at a time into the accumulator: at most
 * about K/16 + 16 roundings of 2^-24 relative to the running sum, so |acc - exact| <=
 * (K/16 + 16) 2^-23 S with S = alpha sum_k |deq(A) deq(B)| (computed by the reference on the
 * absolute values). Then one fmaf and one rounding to bf16 (2^-9 relative). We accept
 * |y - ref| <= 2^-8 |ref| + (K/16 + 16) 2^-22 S + 2^-24 |bias|: twice each term, so that a wrong
 * scale, a lost block or a swapped element (errors of the size of a whole product) fails. The
 * whole-matrix ||y - ref|| / ||ref|| must also stay below 4e-3 (the MXFP8 bound: bf16 output
 * rounding, RMS 2^-9/sqrt(3) ~ 1.1e-3, plus fp32 accumulation). */
#ifndef QF_TEST_GPU_GEMM_FAMILIES_H
#define QF_TEST_GPU_GEMM_FAMILIES_H

#include "test_gpu_gemm.h"

#include <math.h>
#include <stdio.h>

#include "qfuse.h"
#include "ref.h"
#include "ref_mx.h"
#include "ref_nvfp4.h"

static int g_cases[QF_FAMILY_COUNT]; /* cases checked per family, printed at the end */

/* {===================================================================== fp8_delayed */

static const double kFp8Tol = 4e-3; /* bf16 output rounding (<= 2^-9 per element), fp32 sums */

static double rel_err(const double *ref, const uint16_t *y_bf16, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)qf_bf16_to_float(y_bf16[i]) - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

/* One FP8 GEMM of random E4M3 operands (per-tensor scale_inv 1/64 and 1/96) against fp64, under
 * a per-tensor recipe (delayed or current scaling: the same cuBLASLt GEMM). */
static void fp8_gemm_case(qf_ctx_t *ctx, const char *recipe, int64_t M, int64_t N, int64_t K,
                          int with_bias, uint64_t seed) {
    dual a = dual_alloc((size_t)M * K), b = dual_alloc((size_t)N * K);
    dual y = dual_alloc((size_t)M * N * 2);
    dual bias = dual_alloc((size_t)N * 2), sa = dual_alloc(4), sb = dual_alloc(4);
    uint64_t s = seed;
    for (int64_t i = 0; i < M * K; i++)
        ((uint8_t *)a.h)[i] = qf_e4m3_from_float_ref(qf_test_rng_uniform(&s) * 300.0f);
    for (int64_t i = 0; i < N * K; i++)
        ((uint8_t *)b.h)[i] = qf_e4m3_from_float_ref(qf_test_rng_uniform(&s) * 300.0f);
    double *dbias = malloc((size_t)N * sizeof(double)), *yref = malloc((size_t)M * N * 8);
    for (int64_t i = 0; i < N; i++) {
        ((uint16_t *)bias.h)[i] = qf_float_to_bf16(qf_test_rng_uniform(&s) * 4.0f);
        dbias[i] = qf_bf16_to_float(((uint16_t *)bias.h)[i]);
    }
    *(float *)sa.h = 1.0f / 64.0f, *(float *)sb.h = 1.0f / 96.0f;
    dual_up(&a), dual_up(&b), dual_up(&bias), dual_up(&sa), dual_up(&sb);
    CK(cudaMemset(y.d, 0xFF, y.bytes));
    qf_tensor ta = tv(&a, QF_DTYPE_E4M3, 2, M, K), tb = tv(&b, QF_DTYPE_E4M3, 2, N, K);
    qf_tensor ty = tv(&y, QF_DTYPE_BF16, 2, M, N), tbias = tv(&bias, QF_DTYPE_BF16, 1, N, 0);
    qf_quantized qa = {.t = {[QF_SLOT_ROWWISE_DATA] = ta,
                             [QF_SLOT_SCALE_INV] = tv(&sa, QF_DTYPE_FP32, 1, 1, 0)}};
    qf_quantized qb = {.t = {[QF_SLOT_ROWWISE_DATA] = tb,
                             [QF_SLOT_SCALE_INV] = tv(&sb, QF_DTYPE_FP32, 1, 1, 0)}};
    const qf_operand oa = {&qa, QF_COPY_ROWWISE}, ob = {&qb, QF_COPY_ROWWISE};
    QF_OK_OR_FAIL(qf_gemm(ctx, recipe, &oa, &ob, with_bias ? &tbias : NULL, &ty, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&y);
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, a.h, *(float *)sa.h, QF_DTYPE_E4M3, b.h, *(float *)sb.h,
                    with_bias ? dbias : NULL, M, N, K, yref);
    double e = rel_err(yref, y.h, M * N);
    printf("fp8_gemm   shape        M=%-5lld N=%-5lld K=%-5lld bias=%d: rel err %.3e\n",
           (long long)M, (long long)N, (long long)K, with_bias, e);
    if (!(e < kFp8Tol))
        fail_msg("FP8 GEMM M=%lld N=%lld K=%lld: relative error %.3g", (long long)M,
                 (long long)N, (long long)K, e);
    free(dbias), free(yref);
    dual *all[] = {&a, &b, &y, &bias, &sa, &sb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
    g_cases[recipe_of(recipe)->family]++;
}

/* }=====================================================================} */

/* {===================================================================== block-scaled */

/* Scale bytes of a case: uniform in [lo, hi] (never 0x7F/0xFF unless set by hand); with `neg`,
 * each byte gets the sign bit with probability 1/2. */
typedef struct scale_range {
    int lo, hi, neg;
} scale_range;

typedef struct blk_gemm_case blk_gemm_case;

/* The comparison of one case: Frobenius ratio, non-finite count and, under a per-element bound,
 * the first element outside it (row-major order over the checked rows). */
typedef struct blk_case_err {
    double num, den;
    int64_t nonfinite, bad, bad_m, bad_n;
    double bad_ref, bad_got, bad_lim;
} blk_case_err;

/* Compares the row block [m, n0 .. n0+w) of y with the reference; bias: fp64 [N] or NULL. */
typedef void (*blk_check_fn)(const blk_gemm_case *c, const uint16_t *y, const double *bias,
                             int64_t m, int64_t n0, int64_t w, blk_case_err *e);

/* The operands of a block-scaled family and how its y is compared. */
typedef struct blk_gemm_fmt {
    const char *label;    /* first word of its output lines */
    qf_family family;
    int block;            /* elements per scale byte along K */
    int per_byte;         /* operand elements per byte: 1 (FP8), 2 (packed E2M1) */
    qf_dtype elem, scale; /* operand element and scale dtypes */
    int amax;             /* 1: a global fp32 amax per operand (alpha, numerics 2.4) */
    int bounded;          /* 1: check_block counts the elements outside their bound */
    double tol;           /* ||y - ref|| / ||ref|| < tol */
    blk_check_fn check_block;
} blk_gemm_fmt;

/* One GEMM: host operands and scales, and their device copies. */
struct blk_gemm_case {
    const blk_gemm_fmt *f;
    const char *recipe;
    int64_t M, N, K, kb, sc, ra, rb; /* kb bytes per operand row; sc scale row stride; ra, rb
                                      * padded scale rows */
    qf_dtype fa, fb;
    float amax_a, amax_b;     /* f->amax */
    uint8_t *a, *b, *as, *bs; /* host */
    uint16_t *bias;           /* host bf16 [N] or NULL */
    void *da, *db, *das, *dbs, *dbias, *dy, *damax; /* damax: device fp32 [2] = {amax_a, amax_b},
                                                     * NULL without f->amax */
};

/* Adds one element y = v (reference ref) to the Frobenius sums and the non-finite count. */
static void err_add(blk_case_err *e, double v, double ref) {
    e->nonfinite += !isfinite(v);
    e->num += (v - ref) * (v - ref);
    e->den += ref * ref;
}

/* MXFP8: the reference of the block, no per-element bound. */
static void mx_check_block(const blk_gemm_case *c, const uint16_t *y, const double *bias,
                           int64_t m, int64_t n0, int64_t w, blk_case_err *e) {
    double ref[256];
    qf_gemm_mxfp8_ref(c->fa, c->a + m * c->kb, c->as + m * c->sc, c->fb, c->b + n0 * c->kb,
                      c->bs + n0 * c->sc, bias ? bias + n0 : NULL, 1, w, c->K, ref);
    for (int64_t j = 0; j < w; j++)
        err_add(e, qf_bf16_to_float(y[m * c->N + n0 + j]), ref[j]);
}

/* NVFP4: the reference of the block and S from the absolute values, every element within its
 * bound (the top of this file). */
static void nv_check_block(const blk_gemm_case *c, const uint16_t *y, const double *bias,
                           int64_t m, int64_t n0, int64_t w, blk_case_err *e) {
    double ref[256], sabs[256];
    uint8_t *aa = malloc((size_t)c->kb), *ab = malloc((size_t)(w * c->kb));
    uint8_t *sa = malloc((size_t)c->sc), *sb = malloc((size_t)(w * c->sc));
    qf_gemm_nvfp4_ref(c->a + m * c->kb, c->as + m * c->sc, c->amax_a, c->b + n0 * c->kb,
                      c->bs + n0 * c->sc, c->amax_b, bias ? bias + n0 : NULL, 1, w, c->K, ref);
    for (int64_t i = 0; i < c->kb; i++)
        aa[i] = c->a[m * c->kb + i] & 0x77;
    for (int64_t i = 0; i < w * c->kb; i++)
        ab[i] = c->b[n0 * c->kb + i] & 0x77;
    for (int64_t i = 0; i < c->sc; i++)
        sa[i] = c->as[m * c->sc + i] & 0x7F;
    for (int64_t i = 0; i < w * c->sc; i++)
        sb[i] = c->bs[n0 * c->sc + i] & 0x7F;
    qf_gemm_nvfp4_ref(aa, sa, c->amax_a, ab, sb, c->amax_b, NULL, 1, w, c->K, sabs);
    for (int64_t j = 0; j < w; j++) {
        const double v = qf_bf16_to_float(y[m * c->N + n0 + j]);
        const double bj = bias ? fabs(bias[n0 + j]) : 0.0;
        const double lim = ldexp(fabs(ref[j]), -8) + (double)(c->K / 16 + 16) *
                           ldexp(sabs[j], -22) + ldexp(bj, -24);
        err_add(e, v, ref[j]);
        if (!(fabs(v - ref[j]) <= lim) && (e->bad++ == 0 || m * c->N + n0 + j < e->bad_m * c->N +
                                                                            e->bad_n)) {
            e->bad_m = m, e->bad_n = n0 + j;
            e->bad_ref = ref[j], e->bad_got = v, e->bad_lim = lim;
        }
    }
    free(aa), free(ab), free(sa), free(sb);
}

/* MXFP8 (numerics 2.3): E4M3 operands, E8M0 scales of 1x32 blocks. */
static const blk_gemm_fmt kMxGemm = {
    .label = "mxfp8_gemm", .family = QF_FAMILY_MXFP8, .block = QF_MX_BLOCK, .per_byte = 1,
    .elem = QF_DTYPE_E4M3, .scale = QF_DTYPE_E8M0,
    .tol = 4e-3, /* bf16 output rounding */
    .check_block = mx_check_block};

/* NVFP4 (numerics 2.4): packed E2M1 operands, E4M3 scales of 1x16 blocks, global amaxes. */
static const blk_gemm_fmt kNvGemm = {
    .label = "nvfp4_gemm", .family = QF_FAMILY_NVFP4, .block = QF_NVFP4_BLOCK, .per_byte = 2,
    .elem = QF_DTYPE_E2M1, .scale = QF_DTYPE_E4M3, .amax = 1, .bounded = 1,
    .tol = 4e-3, /* the MXFP8 bound (the top of this file) */
    .check_block = nv_check_block};

/* Real entries (rows < real, columns < nb) from range; padding = pad. */
static void fill_scales(uint8_t *p, int64_t R, int64_t real, int64_t sc, int64_t nb,
                        scale_range range, int pad, uint64_t seed) {
    uint64_t s = seed;
    const uint64_t span = (uint64_t)(range.hi - range.lo + 1);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < sc; j++) {
            if (r >= real || j >= nb) {
                p[r * sc + j] = (uint8_t)pad;
                continue;
            }
            const uint64_t x = qf_test_rng_next(&s);
            p[r * sc + j] = (uint8_t)((range.lo + (int)(x % span)) | (range.neg && (x >> 40 & 1)
                                                                          ? 0x80 : 0));
        }
}

/* A case of format f with its scales from sa / sb (padding 0xFF) and, with bias, a bf16 bias;
 * the operand bytes are allocated, left to the caller to fill. Seeds: seed + 2 and + 3 for the
 * scales, + 4 for the bias (seed and seed + 1 are the operands'). */
static blk_gemm_case blk_case_alloc(const blk_gemm_fmt *f, int64_t M, int64_t N, int64_t K,
                                    int bias, scale_range sa, scale_range sb, uint64_t seed) {
    blk_gemm_case c = {.f = f, .M = M, .N = N, .K = K, .fa = f->elem, .fb = f->elem};
    c.kb = K / f->per_byte;
    c.sc = (K / f->block + 3) / 4 * 4;
    c.ra = (M + 127) / 128 * 128;
    c.rb = (N + 127) / 128 * 128;
    c.a = malloc((size_t)(M * c.kb));
    c.b = malloc((size_t)(N * c.kb));
    c.as = malloc((size_t)(c.ra * c.sc));
    c.bs = malloc((size_t)(c.rb * c.sc));
    assert_true(c.a && c.b && c.as && c.bs);
    fill_scales(c.as, c.ra, M, c.sc, K / f->block, sa, 0xFF, seed + 2);
    fill_scales(c.bs, c.rb, N, c.sc, K / f->block, sb, 0xFF, seed + 3);
    if (bias) {
        uint64_t s = seed + 4;
        c.bias = malloc((size_t)N * 2);
        for (int64_t n = 0; n < N; n++)
            c.bias[n] = qf_float_to_bf16(4.0f * qf_test_rng_uniform(&s));
    }
    return c;
}

static void blk_case_upload(blk_gemm_case *c) {
    const float amax[2] = {c->amax_a, c->amax_b};
    c->da = dev_copy(c->a, (size_t)(c->M * c->kb));
    c->db = dev_copy(c->b, (size_t)(c->N * c->kb));
    c->das = dev_copy(c->as, (size_t)(c->ra * c->sc));
    c->dbs = dev_copy(c->bs, (size_t)(c->rb * c->sc));
    c->dbias = c->bias ? dev_copy(c->bias, (size_t)c->N * 2) : NULL;
    c->dy = dev_copy(NULL, (size_t)(c->M * c->N) * 2);
    c->damax = c->f->amax ? dev_copy(amax, sizeof amax) : NULL;
}

static void blk_case_free(blk_gemm_case *c) {
    void *d[] = {c->da, c->db, c->das, c->dbs, c->dbias, c->dy, c->damax};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        cudaFree(d[i]);
    free(c->a), free(c->b), free(c->as), free(c->bs), free(c->bias);
}

/* Rewrites only the padding entries of both device scale matrices with byte v. */
static void blk_case_repad(const blk_gemm_case *c, int v) {
    uint8_t *t = malloc((size_t)((c->ra > c->rb ? c->ra : c->rb) * c->sc));
    const uint8_t *h[2] = {c->as, c->bs};
    void *d[2] = {c->das, c->dbs};
    const int64_t R[2] = {c->ra, c->rb}, real[2] = {c->M, c->N};
    for (int o = 0; o < 2; o++) {
        memset(t, v, (size_t)(R[o] * c->sc));
        for (int64_t r = 0; r < real[o]; r++)
            memcpy(t + r * c->sc, h[o] + r * c->sc, (size_t)(c->K / c->f->block));
        CK(cudaMemcpy(d[o], t, (size_t)(R[o] * c->sc), cudaMemcpyHostToDevice));
    }
    free(t);
}

static qf_status blk_case_run(qf_ctx_t *ctx, const blk_gemm_case *c) {
    const qf_dtype st = c->f->scale;
    float *amax = c->damax;
    qf_tensor a = {.data = c->da, .dtype = c->fa, .ndim = 2, .dims = {c->M, c->kb}};
    qf_tensor b = {.data = c->db, .dtype = c->fb, .ndim = 2, .dims = {c->N, c->kb}};
    qf_tensor as = {.data = c->das, .dtype = st, .ndim = 2, .dims = {c->ra, c->sc}};
    qf_tensor bs = {.data = c->dbs, .dtype = st, .ndim = 2, .dims = {c->rb, c->sc}};
    qf_tensor ama = {.data = amax, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}};
    qf_tensor amb = ama;
    amb.data = amax ? amax + 1 : NULL;
    qf_tensor bias = {.data = c->dbias, .dtype = QF_DTYPE_BF16, .ndim = 1, .dims = {c->N}};
    qf_tensor y = {.data = c->dy, .dtype = QF_DTYPE_BF16, .ndim = 2, .dims = {c->M, c->N}};
    const qf_quantized qa = gemm_rowwise_q(&a, &as, amax ? &ama : NULL, QF_SCALE_LAYOUT_COMPACT);
    const qf_quantized qb = gemm_rowwise_q(&b, &bs, amax ? &amb : NULL, QF_SCALE_LAYOUT_COMPACT);
    return gemm_rowwise(ctx, c->recipe, &qa, &qb, c->dbias ? &bias : NULL, &y);
}

/* y (poisoned with NaN first, so an unwritten element cannot pass) downloaded to the host. */
static uint16_t *blk_case_y(qf_ctx_t *ctx, const blk_gemm_case *c) {
    CK(cudaMemset(c->dy, 0xFF, (size_t)(c->M * c->N) * 2));
    QF_OK_OR_FAIL(blk_case_run(ctx, c));
    CK(cudaDeviceSynchronize());
    uint16_t *y = malloc((size_t)(c->M * c->N) * 2);
    assert_non_null(y);
    CK(cudaMemcpy(y, c->dy, (size_t)(c->M * c->N) * 2, cudaMemcpyDeviceToHost));
    return y;
}

/* Checks rows[0..nr) (every row when rows is NULL) against the reference, on all cores in
 * blocks of one row x 256 columns. */
static blk_case_err blk_case_check(const blk_gemm_case *c, const uint16_t *y, const int64_t *rows,
                                   int64_t nr) {
    const int64_t R = rows ? nr : c->M, CB = 256, nblk = (c->N + CB - 1) / CB;
    double *bias = NULL;
    blk_case_err total = {0};
    if (c->bias) {
        bias = malloc((size_t)c->N * sizeof(double));
        for (int64_t n = 0; n < c->N; n++)
            bias[n] = qf_bf16_to_float(c->bias[n]);
    }
#pragma omp parallel
    {
        blk_case_err e = {0};
#pragma omp for schedule(dynamic)
        for (int64_t i = 0; i < R * nblk; i++) {
            const int64_t m = rows ? rows[i / nblk] : i / nblk, n0 = i % nblk * CB;
            c->f->check_block(c, y, bias, m, n0, c->N - n0 < CB ? c->N - n0 : CB, &e);
        }
#pragma omp critical
        {
            total.num += e.num, total.den += e.den, total.nonfinite += e.nonfinite;
            if (e.bad && (total.bad == 0 || e.bad_m * c->N + e.bad_n <
                                                total.bad_m * c->N + total.bad_n)) {
                total.bad_m = e.bad_m, total.bad_n = e.bad_n;
                total.bad_ref = e.bad_ref, total.bad_got = e.bad_got, total.bad_lim = e.bad_lim;
            }
            total.bad += e.bad;
        }
    }
    free(bias);
    return total;
}

/* Prints the result of a check and fails with the first element outside the bound, or on the
 * Frobenius ratio, non-finite elements or padding that moved y. same: 1 bit-identical under both
 * paddings, 0 not, -1 not compared (not printed). */
static void blk_report(const blk_gemm_case *c, const char *what, const blk_case_err *e,
                       int same) {
    const blk_gemm_fmt *f = c->f;
    const double rel = sqrt(e->num / e->den);
    char bound[48] = "", pad[64] = "";
    if (f->bounded)
        snprintf(bound, sizeof bound, ", outside bound %lld", (long long)e->bad);
    if (same >= 0)
        snprintf(pad, sizeof pad, ", padding 0xFF vs 0x00 bit-identical %s", same ? "yes" : "NO");
    printf("%s %-12s M=%-5lld N=%-5lld K=%-5lld bias=%d: rel err %.3e, non-finite %lld%s%s\n",
           f->label, what, (long long)c->M, (long long)c->N, (long long)c->K, c->bias != NULL,
           rel, (long long)e->nonfinite, bound, pad);
    if (e->bad)
        fail_msg("%s %s M=%lld N=%lld K=%lld: %lld elements outside the bound; first "
                 "y[%lld, %lld] = %.9g, expected %.9g (|diff| %.3g > bound %.3g)", f->label, what,
                 (long long)c->M, (long long)c->N, (long long)c->K, (long long)e->bad,
                 (long long)e->bad_m, (long long)e->bad_n, e->bad_got, e->bad_ref,
                 fabs(e->bad_got - e->bad_ref), e->bad_lim);
    if (!(rel < f->tol) || e->nonfinite || !same)
        fail_msg("%s %s M=%lld N=%lld K=%lld: rel err %.3e (limit %.1e), %lld non-finite, "
                 "padding bit-identical %s", f->label, what, (long long)c->M, (long long)c->N,
                 (long long)c->K, rel, f->tol, (long long)e->nonfinite,
                 same < 0 ? "not compared" : same ? "yes" : "NO");
}

/* Checks one case against the reference, then again with the padding poisoned 0x00 instead of
 * 0xFF (NaN in E8M0 and in E4M3): y must not move by a bit (TE PR #3070). */
static void blk_check_case(qf_ctx_t *ctx, blk_gemm_case *c, const char *what) {
    blk_case_upload(c);
    uint16_t *y = blk_case_y(ctx, c);
    const blk_case_err e = blk_case_check(c, y, NULL, 0);
    blk_case_repad(c, 0x00);
    uint16_t *y0 = blk_case_y(ctx, c);
    int64_t first_diff = -1;
    for (int64_t i = 0; i < c->M * c->N && first_diff < 0; i++)
        if (y[i] != y0[i])
            first_diff = i;
    if (first_diff >= 0)
        printf("%s %s: padding changed y[%lld, %lld]: 0x%04x with 0xFF padding, 0x%04x with "
               "0x00\n", c->f->label, what, (long long)(first_diff / c->N),
               (long long)(first_diff % c->N), y[first_diff], y0[first_diff]);
    free(y);
    free(y0);
    blk_report(c, what, &e, first_diff < 0);
    g_cases[c->f->family]++;
}

/* Counts NaNs where expected (row nan_m or column nan_n) and finite values elsewhere. */
static int64_t blk_nan_mismatches(const blk_gemm_case *c, const uint16_t *y, int64_t nan_m,
                                  int64_t nan_n, int64_t *first) {
    int64_t wrong = 0;
    *first = -1;
    for (int64_t m = 0; m < c->M; m++)
        for (int64_t n = 0; n < c->N; n++) {
            const int want = m == nan_m || n == nan_n;
            if (want != isnan(qf_bf16_to_float(y[m * c->N + n])) && wrong++ == 0)
                *first = m * c->N + n;
        }
    return wrong;
}

/* }=====================================================================} */

/* {===================================================================== mxfp8 */

/* A random byte of format fmt that is neither NaN nor infinity, with exponent field <= emax. */
static uint8_t rand_fp8(uint64_t *s, qf_dtype fmt, int emax) {
    for (;;) {
        uint8_t v = (uint8_t)qf_test_rng_next(s);
        int e = fmt == QF_DTYPE_E4M3 ? (v >> 3) & 15 : (v >> 2) & 31;
        int special = fmt == QF_DTYPE_E4M3 ? (v & 0x7f) == 0x7f : e == 31;
        if (!special && e <= emax)
            return v;
    }
}

static void fill_data(uint8_t *p, int64_t rows, int64_t K, qf_dtype fmt, int emax, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        uint64_t s = seed ^ ((uint64_t)r * 0x9E3779B97F4A7C15ull);
        for (int64_t k = 0; k < K; k++)
            p[r * K + k] = rand_fp8(&s, fmt, emax);
    }
}

/* Scale bytes [lo_a, hi_a] / [lo_b, hi_b], element exponent fields <= emax, padding 0xFF. */
static blk_gemm_case mx_case_make(int64_t M, int64_t N, int64_t K, int bias, int lo_a, int hi_a,
                                  int lo_b, int hi_b, int emax, uint64_t seed) {
    const scale_range sa = {lo_a, hi_a, 0}, sb = {lo_b, hi_b, 0};
    blk_gemm_case c = blk_case_alloc(&kMxGemm, M, N, K, bias, sa, sb, seed);
    fill_data(c.a, M, K, c.fa, emax, seed);
    fill_data(c.b, N, K, c.fb, emax, seed + 1);
    return c;
}

/* }=====================================================================} */

/* {===================================================================== nvfp4 */

static void fill_bytes(uint8_t *p, int64_t n, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n / 4096 + 1; r++) {
        uint64_t s = seed ^ ((uint64_t)r * 0x9E3779B97F4A7C15ull);
        for (int64_t i = r * 4096; i < n && i < (r + 1) * 4096; i++)
            p[i] = (uint8_t)qf_test_rng_next(&s);
    }
}

/* Random packed operands, scales from range (padding 0xFF), amaxes as a quantizer could give. */
static blk_gemm_case nv_case_make(int64_t M, int64_t N, int64_t K, int bias, scale_range range,
                                  uint64_t seed) {
    blk_gemm_case c = blk_case_alloc(&kNvGemm, M, N, K, bias, range, range, seed);
    c.amax_a = 3.75f, c.amax_b = 0.2109375f;
    fill_bytes(c.a, M * c.kb, seed);
    fill_bytes(c.b, N * c.kb, seed + 1);
    return c;
}

/* }=====================================================================} */

#endif /* QF_TEST_GPU_GEMM_FAMILIES_H */
