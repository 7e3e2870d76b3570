/* test_gpu_quantize.h: the family hooks of test_gpu_quantize.c: one case type for every family
 * and, per family, how a case runs on the GPU and is checked against its C reference (runtime/ref/)
 * with the family's tolerance. Outputs are poisoned before each run and every byte is compared:
 *   fp8_delayed (numerics 2.1): data bit for bit (the columnwise copy as the transposed rowwise
 *       reference), amax and scale_inv bit for bit, mu/rsigma within rel 1e-5 of fp64;
 *   mxfp8 (numerics 2.3): data and E8M0 scales bit for bit, padding and unrequested copies
 * included; nvfp4 (numerics 2.4): packed data, E4M3 scales and both amaxes bit for bit, mu/rsigma
 * within rel 1e-5 of fp64, then handed to the reference; fp8_block (numerics 2.5): data (the
 * columnwise copy transposed [K, M]) and fp32 scale_inv bit for bit, padding (1.0) and
 * unrequested copies included, mu/rsigma within rel 1e-5 of fp64. mxfp8, nvfp4 and fp8_block
 * share one run function (blk_run), parametrized by a blk_family row. A new family adds its run
 * function (or its blk_family row) here and its row in test_gpu_quantize.c's kHooks. */
#ifndef QF_TEST_GPU_QUANTIZE_H
#define QF_TEST_GPU_QUANTIZE_H

#include "test_gpu_util.h"

#include <math.h>
#include <stdio.h>

#include "qfuse.h"
#include "ref.h"
#include "ref_fp8_block.h"
#include "ref_fp8_current.h"
#include "ref_mx.h"
#include "ref_nvfp4.h"

/* {===================================================================== cases */

enum { DATA_RANDOM, DATA_ZERO, DATA_NAN };

/* One quantization of any family. */
typedef struct qcase {
    const qf_recipe *recipe;
    qf_role role;
    qf_norm norm;         /* not QF_NORM_NONE: norm + quantize (role QF_ROLE_INPUT) */
    int zcg;
    qf_dtype xdt, gdt;    /* gdt: gamma/beta dtype (x's or fp32) */
    qf_scale_layout layout; /* block-scaled families */
    unsigned outputs;
    int64_t M, K;
    uint64_t seed, offset; /* SR stream (nvfp4 grads) */
    int data;             /* DATA_* */
} qcase;

static int g_cases[QF_FAMILY_COUNT]; /* cases checked per family, printed at the end */

/* 1 when c is a norm + quantize case (else a plain quantize of its role, the input role too:
 * layernorm_mlp's fc2 input). */
static int fused(const qcase *c) {
    return c->norm != QF_NORM_NONE;
}

static const char *describe(const qcase *c) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s role %d norm %d zcg %d x %s gamma %s M=%lld K=%lld layout %s "
             "outputs %u seed %llu offset %llu data %d", c->recipe->name, (int)c->role,
             (int)c->norm, c->zcg, qf_dtype_name(c->xdt), qf_dtype_name(c->gdt), (long long)c->M,
             (long long)c->K, c->layout ? "swizzled" : "compact", c->outputs,
             (unsigned long long)c->seed, (unsigned long long)c->offset, c->data);
    return buf;
}

/* The norm of an input case (gamma [K], and beta [K] under layernorm, both c->gdt) and the
 * statistics slots it fills in out: mu [M] (layernorm) and rsigma [M], fp32. */
static qf_norm_desc norm_slots(const qcase *c, const dual *g, const dual *b, const dual *mu,
                               const dual *rs, qf_quantized *out) {
    const int ln = c->norm == QF_NORM_LAYERNORM;
    if (ln)
        out->t[QF_SLOT_MU] = tv(mu, QF_DTYPE_FP32, 1, c->M, 0);
    out->t[QF_SLOT_RSIGMA] = tv(rs, QF_DTYPE_FP32, 1, c->M, 0); /* ignored without a norm */
    const qf_norm_desc nd = {.norm = c->norm, .zero_centered_gamma = c->zcg, .eps = 1e-5f,
                             .gamma = tv(g, c->gdt, 1, c->K, 0),
                             .beta = ln ? tv(b, c->gdt, 1, c->K, 0) : (qf_tensor){0}};
    return nd;
}

/* mu/rsigma of the kernel within rel 1e-5 of the fp64 reference (numerics 3), for an input case of
 * finite data (other cases return at once); mu relative to the row's scale:
 * |mu - ref| <= 1e-5 (|ref| + sigma). The reference runs on all cores. */
static void check_stats(const qcase *c, const void *x, const float *mu, const float *rs) {
    if (!fused(c) || c->data == DATA_NAN)
        return;
    float *mu_ref = malloc((size_t)c->M * 4), *rs_ref = malloc((size_t)c->M * 4);
    const size_t xsz = qf_dtype_size(c->xdt);
#pragma omp parallel for schedule(dynamic)
    for (int64_t m = 0; m < c->M; m++)
        qf_norm_stats_ref(c->norm, c->xdt, (const char *)x + m * c->K * xsz, 1, c->K, 1e-5f,
                          mu_ref + m, rs_ref + m);
    for (int64_t m = 0; m < c->M; m++) {
        if (fabs((double)rs[m] - rs_ref[m]) > 1e-5 * fabs((double)rs_ref[m]))
            fail_msg("%s: rsigma[%lld] = %.9g, reference %.9g", describe(c), (long long)m,
                     rs[m], rs_ref[m]);
        const double tol = 1e-5 * (fabs((double)mu_ref[m]) + 1.0 / rs_ref[m]);
        if (c->norm == QF_NORM_LAYERNORM && fabs((double)mu[m] - mu_ref[m]) > tol)
            fail_msg("%s: mu[%lld] = %.9g, reference %.9g", describe(c), (long long)m, mu[m],
                     mu_ref[m]);
    }
    free(mu_ref);
    free(rs_ref);
}

/* }=====================================================================} */

/* {===================================================================== fp8_delayed */

/* Fills n elements of dtype dt with deterministic data: N(0,1)-ish values, a few outlier
 * channels (x30) and an offset so that layernorm's mean matters. */
static void fill_activation(void *p, qf_dtype dt, int64_t M, int64_t K, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        uint64_t s = seed ^ ((uint64_t)m * 0x9E3779B97F4A7C15ull);
        for (int64_t k = 0; k < K; k++) {
            float v = qf_test_rng_uniform(&s) * 1.7f + 0.25f;
            if (k % 97 == 13)
                v *= 30.0f;
            store_as(p, dt, m * K + k, v);
        }
    }
}

static void fill_gamma(void *p, qf_dtype dt, int64_t K, uint64_t seed, float base) {
    fill_activation(p, dt, 1, K, seed);
    for (int64_t k = 0; k < K; k++)
        store_as(p, dt, k, base + 0.1f * qf_load_as_float(p, dt, k));
}
/* Counts bytes of the columnwise [K, M] output that differ from the transposed rowwise
 * reference. */
static int64_t count_col_mismatches(const uint8_t *ref_row, const uint8_t *col, int64_t M,
                                    int64_t K) {
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad)
    for (int64_t k = 0; k < K; k++)
        for (int64_t m = 0; m < M; m++)
            bad += col[k * M + m] != ref_row[m * K + k];
    return bad;
}

/* Counts bytes still holding the poison value (for outputs that must not be written). */
static int64_t count_not_poison(const uint8_t *p, int64_t n, uint8_t poison) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += p[i] != poison;
    return bad;
}

/* The rowwise reference, computed in row chunks on all cores; returns the merged amax. */
static float ref_rows(const qcase *c, const void *x, const void *g, const void *b,
                      const float *mu, const float *rs, float scale, uint8_t *rrow) {
    const int64_t chunk = 64, nchunks = (c->M + chunk - 1) / chunk;
    const size_t xsz = qf_dtype_size(c->xdt);
    float *amax = calloc((size_t)nchunks, sizeof(float));
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < nchunks; i++) {
        int64_t m0 = i * chunk, rows = c->M - m0 < chunk ? c->M - m0 : chunk;
        qf_norm_quantize_fp8_ref(c->norm, c->zcg, c->xdt, (const char *)x + m0 * c->K * xsz,
                                 c->gdt, g, b, rows, c->K, 1e-5f, mu ? mu + m0 : NULL, rs + m0,
                                 scale, QF_DTYPE_E4M3, rrow + m0 * c->K, NULL, NULL, NULL,
                                 &amax[i]);
    }
    float a = 0.0f;
    for (int64_t i = 0; i < nchunks; i++)
        a = qf_amax_merge(a, amax[i]);
    free(amax);
    return a;
}

/* 1 when c runs under current scaling (the scale from the tensor's own amax, numerics 2.2). */
static int fp8_current(const qcase *c) {
    return c->recipe->family == QF_FAMILY_FP8_CURRENT;
}

/* The scale current scaling takes from amax under c's recipe, for element format fmt. */
static float fp8_current_scale(const qcase *c, float amax, qf_dtype fmt) {
    return qf_fp8_current_scale_ref(amax, c->recipe->amax_epsilon, c->recipe->power_2_scales,
                                    fmt);
}

/* Norm + quantize of the input (rowwise and/or the transposed columnwise copy), under delayed
 * scaling (the given scale) or current scaling (the scale from the kernel's amax, which must be
 * the reference's for the kernel's own mu and rsigma). */
static void fp8_run_nq(qf_ctx_t *ctx, const qcase *c, uint64_t seed) {
    const int64_t M = c->M, K = c->K, n = M * K;
    dual x = dual_alloc((size_t)n * qf_dtype_size(c->xdt));
    dual g = dual_alloc((size_t)K * 4), b = dual_alloc((size_t)K * 4);
    dual row = dual_alloc((size_t)n), col = dual_alloc((size_t)n);
    dual mu = dual_alloc((size_t)M * 4), rs = dual_alloc((size_t)M * 4);
    dual amax = dual_alloc(4), sinv = dual_alloc(4), scale = dual_alloc(4);
    fill_activation(x.h, c->xdt, M, K, seed);
    fill_gamma(g.h, c->gdt, K, seed + 1, c->zcg ? 0.0f : 1.0f);
    fill_gamma(b.h, c->gdt, K, seed + 2, 0.0f);
    *(float *)scale.h = 448.0f / 40.0f;
    dual_up(&x), dual_up(&g), dual_up(&b), dual_up(&scale);
    CK(cudaMemset(row.d, 0xCD, row.bytes)), CK(cudaMemset(col.d, 0xCD, col.bytes));
    CK(cudaMemset(mu.d, 0xCD, mu.bytes)), CK(cudaMemset(rs.d, 0xCD, rs.bytes));
    CK(cudaMemset(sinv.d, 0xCD, sinv.bytes));
    CK(cudaMemset(amax.d, 0, 4));

    qf_tensor tx = tv(&x, c->xdt, 2, M, K);
    qf_quantized out = {0};
    out.t[QF_SLOT_AMAX] = tv(&amax, QF_DTYPE_FP32, 1, 1, 0);
    out.t[QF_SLOT_SCALE_INV] = tv(&sinv, QF_DTYPE_FP32, 1, 1, 0);
    if (c->outputs & QF_OUT_ROWWISE)
        out.t[QF_SLOT_ROWWISE_DATA] = tv(&row, QF_DTYPE_E4M3, 2, M, K);
    if (c->outputs & QF_OUT_COLUMNWISE)
        out.t[QF_SLOT_COLUMNWISE_DATA] = tv(&col, QF_DTYPE_E4M3, 2, K, M);
    const qf_norm_desc nd = norm_slots(c, &g, &b, &mu, &rs, &out);
    QF_OK_OR_FAIL(qf_quantize(ctx, c->recipe->name, QF_ROLE_INPUT, &tx, &nd,
                              fp8_current(c) ? NULL : scale.d, NULL, &out, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&row), dual_down(&col), dual_down(&mu), dual_down(&rs);
    dual_down(&amax), dual_down(&sinv);

    check_stats(c, x.h, mu.h, rs.h);
    uint8_t *rrow = malloc((size_t)n);
    const float *kmu = c->norm == QF_NORM_LAYERNORM ? mu.h : NULL;
    float s = *(float *)scale.h;
    float ramax = ref_rows(c, x.h, g.h, b.h, kmu, rs.h, s, rrow);
    if (fp8_current(c)) { /* the scale of the amax of the same y, then the cast (numerics 2.2) */
        s = fp8_current_scale(c, ramax, QF_DTYPE_E4M3);
        ref_rows(c, x.h, g.h, b.h, kmu, rs.h, s, rrow);
    }
    if (c->outputs & QF_OUT_ROWWISE)
        assert_int_equal(count_mismatches(rrow, row.h, n), 0);
    else
        assert_int_equal(count_not_poison(row.h, n, 0xCD), 0);
    if (c->outputs & QF_OUT_COLUMNWISE)
        assert_int_equal(count_col_mismatches(rrow, col.h, M, K), 0);
    else
        assert_int_equal(count_not_poison(col.h, n, 0xCD), 0);
    assert_memory_equal(&ramax, amax.h, 4);
    float want_sinv = qf_fp8_scale_inv_ref(s);
    assert_memory_equal(&want_sinv, sinv.h, 4);
    free(rrow);
    dual *all[] = {&x, &g, &b, &row, &col, &mu, &rs, &amax, &sinv, &scale};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
    g_cases[c->recipe->family]++;
}
/* Plain quantize of an input, a weight or a gradient (the role's format: hybrid E4M3 / E5M2). */
static void fp8_run_quant(qf_ctx_t *ctx, const qcase *c, uint64_t seed) {
    const qf_role role = c->role;
    const qf_dtype xdt = c->xdt;
    const int64_t M = c->M, K = c->K, n = M * K;
    const unsigned outputs = c->outputs;
    const qf_dtype fmt = c->recipe->fmt[role]; /* hybrid: E4M3 weights, E5M2 gradients */
    dual x = dual_alloc((size_t)n * qf_dtype_size(xdt)), row = dual_alloc((size_t)n);
    dual col = dual_alloc((size_t)n), amax = dual_alloc(4), sinv = dual_alloc(4);
    dual scale = dual_alloc(4);
    fill_activation(x.h, xdt, M, K, seed);
    *(float *)scale.h = role == QF_ROLE_GRAD ? 1024.0f : 3.0f;
    dual_up(&x), dual_up(&scale);
    CK(cudaMemset(row.d, 0xCD, row.bytes)), CK(cudaMemset(col.d, 0xCD, col.bytes));
    CK(cudaMemset(sinv.d, 0xCD, sinv.bytes));
    CK(cudaMemset(amax.d, 0, 4));
    qf_tensor tx = tv(&x, xdt, 2, M, K);
    qf_quantized out = {0};
    out.t[QF_SLOT_ROWWISE_DATA] = tv(&row, fmt, 2, M, K);
    out.t[QF_SLOT_AMAX] = tv(&amax, QF_DTYPE_FP32, 1, 1, 0);
    out.t[QF_SLOT_SCALE_INV] = tv(&sinv, QF_DTYPE_FP32, 1, 1, 0);
    if (outputs & QF_OUT_COLUMNWISE)
        out.t[QF_SLOT_COLUMNWISE_DATA] = tv(&col, fmt, 2, K, M);
    QF_OK_OR_FAIL(qf_quantize(ctx, c->recipe->name, role, &tx, NULL,
                              fp8_current(c) ? NULL : scale.d, NULL, &out, NULL));
    CK(cudaDeviceSynchronize());
    dual_down(&row), dual_down(&col), dual_down(&amax), dual_down(&sinv);
    uint8_t *rrow = malloc((size_t)n), *rcol = malloc((size_t)n);
    float ramax = 0.0f, s = *(float *)scale.h;
    qf_norm_quantize_fp8_ref(QF_NORM_NONE, 0, xdt, x.h, xdt, NULL, NULL, M, K, 0.0f, NULL, NULL, s,
                             fmt, rrow, rcol, NULL, NULL, &ramax);
    if (fp8_current(c)) { /* the amax above does not depend on the scale (numerics 2.2) */
        s = fp8_current_scale(c, ramax, fmt);
        qf_norm_quantize_fp8_ref(QF_NORM_NONE, 0, xdt, x.h, xdt, NULL, NULL, M, K, 0.0f, NULL,
                                 NULL, s, fmt, rrow, rcol, NULL, NULL, &ramax);
        const float want_sinv = qf_fp8_scale_inv_ref(s);
        assert_memory_equal(&want_sinv, sinv.h, 4);
    }
    assert_int_equal(count_mismatches(rrow, row.h, n), 0);
    if (outputs & QF_OUT_COLUMNWISE)
        assert_int_equal(count_mismatches(rcol, col.h, n), 0);
    else
        assert_int_equal(count_not_poison(col.h, n, 0xCD), 0);
    assert_memory_equal(&ramax, amax.h, 4);
    free(rrow), free(rcol);
    dual *all[] = {&x, &row, &col, &amax, &sinv, &scale};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
    g_cases[c->recipe->family]++;
}

/* The family's hook: norm + quantize for the input, plain quantize for the other roles. */
static void fp8_run(qf_ctx_t *ctx, const qcase *c, uint64_t seed) {
    if (fused(c))
        fp8_run_nq(ctx, c, seed);
    else
        fp8_run_quant(ctx, c, seed);
}

/* }=====================================================================} */

/* {===================================================================== mxfp8, nvfp4 */

/* Device and host buffers of one case. */
typedef struct blk_bufs {
    dual x, g, b, row, srow, col, scol, amr, amc, mu, rs;
    size_t srb, scb;
    int64_t sr_r, sr_c, sc_r, sc_c;
} blk_bufs;

/* Reference outputs: buffers of copies not requested keep the poison, like the device's. */
typedef struct blk_expect {
    uint8_t *row, *srow, *col, *scol;
    float amr, amc;
} blk_expect;

/* What a block-scaled family's quantizer writes, and its reference. */
typedef struct blk_family {
    qf_dtype scale; /* dtype of the scale matrices */
    int packed;     /* 1: two E2M1 elements a byte, the columnwise copy transposed [K, M/2];
                     * 0: a byte an element, the columnwise copy [M, K] (or [K, M]: transposed) */
    int transposed; /* 1 (unpacked): the columnwise copy is transposed, [K, M] */
    int amax;       /* 1: a global fp32 amax per copy (AMAX_ROWWISE / AMAX_COLUMNWISE) */
    int stats;      /* 1: mu/rsigma checked against fp64 (check_stats) */
    /* The scale matrices [rows, cols] of a case (its M, K and role) */
    void (*scale_shape_row)(const qcase *c, int64_t *rows, int64_t *cols);
    void (*scale_shape_col)(const qcase *c, int64_t *rows, int64_t *cols);
    /* Writes the expected outputs of c into e (allocated and poisoned) from the inputs and the
     * kernel's statistics in B. */
    void (*reference)(const qcase *c, const blk_bufs *B, blk_expect *e);
} blk_family;

/* MXFP8 (numerics 2.3): the reference for a case, given the kernel's statistics. */
static void mx_reference(const qcase *c, const blk_bufs *B, blk_expect *e) {
    const qf_norm norm = c->norm;
    const int row = (c->outputs & QF_OUT_ROWWISE) != 0;
    const int col = (c->outputs & QF_OUT_COLUMNWISE) != 0;
    qf_norm_quantize_mxfp8_ref(norm, c->zcg, c->xdt, B->x.h, c->gdt, B->g.h, B->b.h, c->M, c->K,
                               1e-5f, norm == QF_NORM_LAYERNORM ? B->mu.h : NULL,
                               norm ? B->rs.h : NULL, c->recipe->fmt[c->role],
                               QF_SCALE_ROUNDING_CEIL, c->recipe->block_2d[c->role], c->layout,
                               row ? e->row : NULL, row ? e->srow : NULL, col ? e->col : NULL,
                               col ? e->scol : NULL, NULL, NULL);
}

/* The NVFP4 reference options of a case, from the recipe's registry entry. */
static qf_nvfp4_opts opts_of(const qcase *c) {
    const qf_recipe *r = c->recipe;
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

/* NVFP4 (numerics 2.4): the reference for a case, given the kernel's statistics. */
static void nv_reference(const qcase *c, const blk_bufs *B, blk_expect *e) {
    const int ln = c->norm == QF_NORM_LAYERNORM;
    const qf_norm norm = c->norm;
    qf_nvfp4_src src = {.norm = norm, .zcg = c->zcg, .xdt = c->xdt, .gdt = c->gdt, .x = B->x.h,
                        .gamma = norm ? B->g.h : NULL, .beta = ln && norm ? B->b.h : NULL,
                        .M = c->M, .K = c->K, .eps = 1e-5f,
                        .mu_in = norm == QF_NORM_LAYERNORM ? B->mu.h : NULL,
                        .rsigma_in = norm ? B->rs.h : NULL};
    const qf_nvfp4_opts o = opts_of(c);
    qf_nvfp4_out out = {.row = e->row, .scale_row = e->srow, .col = e->col, .scale_col = e->scol,
                        .amax_row = o.rowwise ? &e->amr : NULL,
                        .amax_col = o.columnwise ? &e->amc : NULL};
    if (qf_quantize_nvfp4_ref(&src, &o, &out) != QF_OK)
        fail_msg("%s: reference failed: %s", describe(c), qf_last_error());
}

/* FP8 block scaling (numerics 2.5): 128x128 tiles for weights, 1x128 / 128x1 blocks else. */
static int fb_2d(const qcase *c) {
    return c->role == QF_ROLE_WEIGHT;
}

/* FP8 block scaling: the reference for a case, given the kernel's statistics. */
static void fb_reference(const qcase *c, const blk_bufs *B, blk_expect *e) {
    const int ln = c->norm == QF_NORM_LAYERNORM;
    const int row = (c->outputs & QF_OUT_ROWWISE) != 0;
    const int col = (c->outputs & QF_OUT_COLUMNWISE) != 0;
    const qf_norm_src src = {.norm = c->norm, .zcg = c->zcg, .xdt = c->xdt, .gdt = c->gdt,
                             .x = B->x.h, .gamma = c->norm ? B->g.h : NULL,
                             .beta = ln ? B->b.h : NULL, .M = c->M, .K = c->K, .eps = 1e-5f,
                             .mu_in = ln ? B->mu.h : NULL, .rsigma_in = c->norm ? B->rs.h : NULL};
    const qf_fp8_block_opts o = {.amax_epsilon = c->recipe->amax_epsilon,
                                 .power_2_scales = c->recipe->power_2_scales,
                                 .block_2d = fb_2d(c)};
    const qf_fp8_block_out out = {.row = row ? e->row : NULL,
                                  .row_scale_inv = row ? (float *)e->srow : NULL,
                                  .col = col ? e->col : NULL,
                                  .col_scale_inv = col ? (float *)e->scol : NULL};
    if (qf_norm_quantize_fp8_block_ref(&src, &o, &out) != QF_OK)
        fail_msg("%s: reference failed: %s", describe(c), qf_last_error());
}

/* The scale shapes of each family, from a case. */
static void mx_shape_row(const qcase *c, int64_t *r, int64_t *k) {
    qf_mx_scale_shape_row(c->M, c->K, r, k);
}
static void mx_shape_col(const qcase *c, int64_t *r, int64_t *k) {
    qf_mx_scale_shape_col(c->M, c->K, r, k);
}
static void nv_shape_row(const qcase *c, int64_t *r, int64_t *k) {
    qf_nvfp4_scale_shape_row(c->M, c->K, r, k);
}
static void nv_shape_col(const qcase *c, int64_t *r, int64_t *k) {
    qf_nvfp4_scale_shape_col(c->M, c->K, r, k);
}
static void fb_shape_row(const qcase *c, int64_t *r, int64_t *k) {
    qf_fp8_block_scale_shape(fb_2d(c), c->M, c->K, r, k);
}
static void fb_shape_col(const qcase *c, int64_t *r, int64_t *k) {
    qf_fp8_block_scale_shape(fb_2d(c), c->K, c->M, r, k); /* of the transposed copy [K, M] */
}

/* One row per block-scaled family (the others stay empty). */
static const blk_family kBlk[QF_FAMILY_COUNT] = {
    [QF_FAMILY_MXFP8] = {.scale = QF_DTYPE_E8M0, .scale_shape_row = mx_shape_row,
                         .scale_shape_col = mx_shape_col, .reference = mx_reference},
    [QF_FAMILY_NVFP4] = {.scale = QF_DTYPE_E4M3, .packed = 1, .amax = 1, .stats = 1,
                         .scale_shape_row = nv_shape_row, .scale_shape_col = nv_shape_col,
                         .reference = nv_reference},
    [QF_FAMILY_FP8_BLOCK] = {.scale = QF_DTYPE_FP32, .transposed = 1, .stats = 1,
                             .scale_shape_row = fb_shape_row, .scale_shape_col = fb_shape_col,
                             .reference = fb_reference},
};

/* The row of c's family; fails the test when the family is not block-scaled. */
static const blk_family *blk_family_of(const qcase *c) {
    const blk_family *f = (unsigned)c->recipe->family < QF_FAMILY_COUNT
                              ? &kBlk[c->recipe->family] : NULL;
    if (!f || !f->reference)
        fail_msg("%s: family %s is not block-scaled", describe(c),
                 qf_family_name(c->recipe->family));
    return f;
}

static void blk_bufs_alloc(const qcase *c, blk_bufs *B) {
    const blk_family *f = blk_family_of(c);
    const int64_t M = c->M, K = c->K, n = f->packed ? M * K / 2 : M * K; /* data bytes */
    const size_t ssz = qf_dtype_size(f->scale);
    f->scale_shape_row(c, &B->sr_r, &B->sr_c);
    f->scale_shape_col(c, &B->sc_r, &B->sc_c);
    B->srb = (size_t)(B->sr_r * B->sr_c) * ssz, B->scb = (size_t)(B->sc_r * B->sc_c) * ssz;
    B->x = dual_alloc((size_t)(M * K) * qf_dtype_size(c->xdt));
    B->g = dual_alloc((size_t)K * 4), B->b = dual_alloc((size_t)K * 4);
    B->row = dual_alloc((size_t)n), B->col = dual_alloc((size_t)n);
    B->srow = dual_alloc(B->srb), B->scol = dual_alloc(B->scb);
    B->amr = dual_alloc(4), B->amc = dual_alloc(4);
    B->mu = dual_alloc((size_t)M * 4), B->rs = dual_alloc((size_t)M * 4);
}

static void blk_bufs_free(blk_bufs *B) {
    dual *all[] = {&B->x, &B->g, &B->b, &B->row, &B->srow, &B->col, &B->scol,
                   &B->amr, &B->amc, &B->mu, &B->rs};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
}

/* Inputs of the case on host and device. */
static void blk_make_inputs(const qcase *c, blk_bufs *B, uint64_t seed) {
    const int64_t M = c->M, K = c->K;
    if (c->data == DATA_ZERO)
        memset(B->x.h, 0, B->x.bytes);
    else
        fill(B->x.h, c->xdt, M, K, seed, fused(c) ? 0.3f : 0.0f);
    if (c->data == DATA_NAN)
        store_as(B->x.h, c->xdt, (M / 2) * K + K / 3, NAN);
    fill(B->g.h, c->gdt, 1, K, seed + 1, c->zcg ? 0.0f : 1.0f);
    fill(B->b.h, c->gdt, 1, K, seed + 2, 0.0f);
    dual_up(&B->x), dual_up(&B->g), dual_up(&B->b);
}

/* Runs the op of the case on B's device buffers (rng from the case: only NVFP4's stochastic
 * rounding reads it). */
static void blk_run_op(qf_ctx_t *ctx, const qcase *c, blk_bufs *B) {
    const blk_family *f = blk_family_of(c);
    const int64_t M = c->M, K = c->K;
    const qf_dtype fmt = c->recipe->fmt[c->role];
    qf_quantized out = {.layout = c->layout};
    if (c->outputs & QF_OUT_ROWWISE) {
        out.t[QF_SLOT_ROWWISE_DATA] = tv(&B->row, fmt, 2, M, f->packed ? K / 2 : K);
        out.t[QF_SLOT_ROWWISE_SCALE_INV] = tv(&B->srow, f->scale, 2, B->sr_r, B->sr_c);
        if (f->amax)
            out.t[QF_SLOT_AMAX_ROWWISE] = tv(&B->amr, QF_DTYPE_FP32, 1, 1, 0);
    }
    if (c->outputs & QF_OUT_COLUMNWISE) {
        out.t[QF_SLOT_COLUMNWISE_DATA] = f->packed       ? tv(&B->col, fmt, 2, K, M / 2)
                                         : f->transposed ? tv(&B->col, fmt, 2, K, M)
                                                         : tv(&B->col, fmt, 2, M, K);
        out.t[QF_SLOT_COLUMNWISE_SCALE_INV] = tv(&B->scol, f->scale, 2, B->sc_r, B->sc_c);
        if (f->amax)
            out.t[QF_SLOT_AMAX_COLUMNWISE] = tv(&B->amc, QF_DTYPE_FP32, 1, 1, 0);
    }
    qf_tensor tx = tv(&B->x, c->xdt, 2, M, K);
    const qf_norm_desc nd = norm_slots(c, &B->g, &B->b, &B->mu, &B->rs, &out);
    const qf_rng rng = {c->seed, c->offset};
    QF_OK_OR_FAIL(qf_quantize(ctx, c->recipe->name, c->role, &tx,
                              fused(c) ? &nd : NULL, NULL, &rng, &out, NULL));
    CK(cudaDeviceSynchronize());
    dual *got[] = {&B->row, &B->srow, &B->col, &B->scol, &B->amr, &B->amc, &B->mu, &B->rs};
    for (size_t i = 0; i < sizeof got / sizeof got[0]; i++)
        dual_down(got[i]);
}

/* Fails naming the first differing byte of buffer `what` (n bytes). */
static void expect_bytes(const qcase *c, const char *what, const uint8_t *want,
                         const uint8_t *got, size_t n) {
    const int64_t bad = count_mismatches(want, got, (int64_t)n);
    if (bad) {
        int64_t first, last;
        mismatch_bounds(want, got, (int64_t)n, &first, &last);
        fail_msg("%s: %s differs in %lld of %zu bytes; first at byte %lld: expected 0x%02X, got "
                 "0x%02X", describe(c), what, (long long)bad, n, (long long)first, want[first],
                 got[first]);
    }
}

/* The expected outputs (e), poisoned as the device buffers were, then the family's reference. */
static void blk_reference(const qcase *c, const blk_bufs *B, blk_expect *e) {
    e->row = malloc(B->row.bytes), e->col = malloc(B->col.bytes);
    e->srow = malloc(B->srb), e->scol = malloc(B->scb);
    memset(e->row, QF_TEST_POISON, B->row.bytes), memset(e->col, QF_TEST_POISON, B->col.bytes);
    memset(e->srow, QF_TEST_POISON, B->srb), memset(e->scol, QF_TEST_POISON, B->scb);
    memset(&e->amr, QF_TEST_POISON, 4), memset(&e->amc, QF_TEST_POISON, 4);
    blk_family_of(c)->reference(c, B, e);
}

static void blk_expect_free(blk_expect *e) {
    free(e->row), free(e->col), free(e->srow), free(e->scol);
}

/* Every byte of every output, padding and unrequested copies included; amaxes bit for bit. */
static void blk_compare(const qcase *c, const blk_bufs *B, const blk_expect *e) {
    expect_bytes(c, "rowwise data", e->row, B->row.h, B->row.bytes);
    expect_bytes(c, "rowwise scales", e->srow, B->srow.h, B->srb);
    expect_bytes(c, "columnwise data", e->col, B->col.h, B->col.bytes);
    expect_bytes(c, "columnwise scales", e->scol, B->scol.h, B->scb);
    if (!blk_family_of(c)->amax)
        return;
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

/* The families' hook (every role): run, check the statistics, compare with the reference. */
static void blk_run(qf_ctx_t *ctx, const qcase *c, uint64_t seed) {
    blk_bufs B;
    blk_expect e;
    blk_bufs_alloc(c, &B);
    blk_make_inputs(c, &B, seed);
    blk_run_op(ctx, c, &B);
    if (blk_family_of(c)->stats)
        check_stats(c, B.x.h, B.mu.h, B.rs.h);
    blk_reference(c, &B, &e);
    blk_compare(c, &B, &e);
    blk_expect_free(&e);
    blk_bufs_free(&B);
    g_cases[c->recipe->family]++;
}

/* }=====================================================================} */

#endif /* QF_TEST_GPU_QUANTIZE_H */
