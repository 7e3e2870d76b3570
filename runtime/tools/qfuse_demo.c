/* qfuse_demo.c: the main job: every generated recipe through layernorm_linear at real layer shapes.
 *
 * For each recipe it shows the fusion keys and whether each kernel was compiled or found in a
 * cache, then runs LayerNorm/RMSNorm + Linear forward and prints a table: time of norm+quantize
 * and of the GEMM, GEMM TFLOP/s, relative error of y against an fp64 reference (sampled rows), and
 * whether the buffers the op used matched the fake shapes exactly (validated, guards intact).
 * Without a GPU it compiles every kernel with NVRTC and prints keys and fake shapes instead. */
#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "jit_cache.h"
#include "kernel_key.h"
#include "ref.h"
#include "registry.h"
#define QF_TOOL_NAME "qfuse-demo"
#include "tool_compile.h"
#include "tool_file.h"
#include "tool_util.h"
#include "safetensors.h"
#include "demo_train.h"
#include "tool_dbuf.h"

#define REF_ROWS 32

typedef struct demo_opts {
    const char *weights;
    int64_t tokens;
    int iters;
    int train_steps;                        /* --train-steps (0: no training) */
    int train_steps_given;                  /* --train-steps was on the command line */
    const char *loss_csv;                   /* --loss-csv */
    tool_recipes recipes;                   /* --recipe */
} demo_opts;

/* One layer to run: x [M, K] -> y [M, N], host tensors as bf16 bit patterns. */
typedef struct layer {
    const char *label;
    int64_t M, K, N;
    qf_norm norm;
    float eps;
    uint16_t *x, *gamma, *beta, *w, *bias;
} layer;

/* ==================================================================== inputs */

static uint16_t *bf16_alloc(int64_t n) {
    return tool_xmalloc((size_t)n * 2);
}

/* Synthetic activations with the structure of real LLM residual streams: most channels N(0,1),
 * a few fixed outlier channels 20-60x larger (the "massive activations" of LLMs), per-token
 * scale drift. Deterministic. */
static void synth_activation(uint16_t *x, int64_t M, int64_t K, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; m++) {
        uint64_t s = seed ^ ((uint64_t)m * 0xD1B54A32D192ED03ull);
        float tok = 0.5f + (float)(m % 7) * 0.25f;
        for (int64_t k = 0; k < K; k++) {
            float v = rng_normal(&s) * tok;
            if (k % 1021 == 7)
                v = v * 20.0f + 60.0f * ((k / 1021) % 2 ? 1.0f : -1.0f);
            x[m * K + k] = qf_float_to_bf16(v);
        }
    }
}

static void synth_layer(layer *L, int64_t M, int64_t K, int64_t N, qf_norm norm) {
    uint64_t s = 1234 + (uint64_t)N;
    *L = (layer){.label = "synthetic", .M = M, .K = K, .N = N, .norm = norm, .eps = 1e-5f};
    L->x = bf16_alloc(M * K), L->gamma = bf16_alloc(K), L->beta = bf16_alloc(K);
    L->w = bf16_alloc(N * K), L->bias = bf16_alloc(N);
    synth_activation(L->x, M, K, 99);
    for (int64_t k = 0; k < K; k++) {
        L->gamma[k] = qf_float_to_bf16(1.0f + 0.1f * rng_normal(&s));
        L->beta[k] = qf_float_to_bf16(0.02f * rng_normal(&s));
    }
    float ws = 1.0f / sqrtf((float)K);
    for (int64_t i = 0; i < N * K; i++)
        L->w[i] = qf_float_to_bf16(ws * rng_normal(&s));
    for (int64_t n = 0; n < N; n++)
        L->bias[n] = qf_float_to_bf16(0.01f * rng_normal(&s));
}

/* A new bf16 array of the n doubles v. */
static uint16_t *to_bf16_array(const double *v, int64_t n) {
    uint16_t *p = bf16_alloc(n);
    for (int64_t i = 0; i < n; i++)
        p[i] = qf_float_to_bf16((float)v[i]);
    return p;
}

/* The forward table's layer of the checkpoint block: its LayerNorm and fc1. */
static void weights_layer(layer *L, const demo_block *b) {
    *L = (layer){.label = "checkpoint", .norm = QF_NORM_LAYERNORM, .eps = (float)b->eps,
                 .M = b->M, .K = b->K, .N = b->F};
    L->x = to_bf16_array(b->x, b->M * b->K);
    L->w = to_bf16_array(b->w1, b->F * b->K);
    L->gamma = to_bf16_array(b->ln_w, b->K);
    L->beta = to_bf16_array(b->ln_b, b->K);
    L->bias = to_bf16_array(b->b1, b->F);
}

static void layer_free(layer *L) {
    free(L->x), free(L->gamma), free(L->beta), free(L->w), free(L->bias);
}

/* ==================================================================== one run */

typedef struct run_state {
    const qf_recipe *r;
    layer *L;
    dbuf x, gamma, beta, w, bias, y;
    dbuf amax, hist, scale, sinv, fmt;        /* delayed-scaling state of [x, w] */
    qf_shape xs[TOOL_MAX_SHAPES], ws[TOOL_MAX_SHAPES];
    dbuf xb[TOOL_MAX_SHAPES], wb[TOOL_MAX_SHAPES];
    int nx, nw;
    qf_ln_linear ll;
    qf_tensor tx, ty;
} run_state;

/* Delayed scaling keeps a scale and an amax history per tensor between steps (numerics 2.1); every
 * other family computes its scales from the data. */
static int delayed_scaling(const run_state *st) {
    return st->r->family == QF_FAMILY_FP8_DELAYED;
}

static void run_alloc_state(run_state *st) {
    int H = st->r->amax_history_len > 0 ? st->r->amax_history_len : 1;
    float ones[2] = {1.0f, 1.0f};
    uint8_t fmt[2] = {(uint8_t)st->r->fmt[QF_ROLE_INPUT], (uint8_t)st->r->fmt[QF_ROLE_WEIGHT]};
    st->amax = dbuf_alloc(8), st->hist = dbuf_alloc((size_t)2 * H * 4);
    st->scale = dbuf_upload(ones, 8), st->sinv = dbuf_upload(ones, 8);
    st->fmt = dbuf_upload(fmt, 2);
    CUDA_OR_DIE(cudaMemset(st->amax.d, 0, 8));
    CUDA_OR_DIE(cudaMemset(st->hist.d, 0, (size_t)2 * H * 4));
}

/* Every quantizer output and y from the fake-shape functions, bound to their slots. Delayed
 * scaling max-merges the amaxes into the [x, w] array its scale update consumes. */
static void run_alloc_outputs(run_state *st) {
    layer *L = st->L;
    qf_shape_query qx = {.op = QF_OP_NORM_QUANTIZE, .role = QF_ROLE_INPUT, .norm = L->norm,
                         .outputs = QF_OUT_ROWWISE, .M = L->M, .K = L->K};
    qf_shape_query qw = {.op = QF_OP_QUANTIZE, .role = QF_ROLE_WEIGHT,
                         .outputs = QF_OUT_ROWWISE, .M = L->N, .K = L->K};
    st->nx = alloc_from_shapes(st->r, &qx, st->xs, st->xb, TOOL_MAX_SHAPES);
    st->nw = alloc_from_shapes(st->r, &qw, st->ws, st->wb, TOOL_MAX_SHAPES);
    qf_shape_query qy = {.op = QF_OP_GEMM, .M = L->M, .N = L->N, .K = L->K};
    qf_shape ys[1];
    alloc_from_shapes(st->r, &qy, ys, &st->y, 1);
    bind_slots(st->xs, st->xb, st->nx, &st->ll.xq);
    bind_slots(st->ws, st->wb, st->nw, &st->ll.wq);
    st->ll.xq.layout = st->ll.wq.layout = tool_gemm_scale_layout(st->r);
    if (delayed_scaling(st)) {
        st->ll.xq.t[QF_SLOT_AMAX].data = st->amax.d;
        st->ll.wq.t[QF_SLOT_AMAX].data = (float *)st->amax.d + 1;
    }
}

static void run_setup(run_state *st, const qf_recipe *r, layer *L) {
    memset(st, 0, sizeof *st);
    st->r = r, st->L = L;
    st->x = dbuf_upload(L->x, (size_t)L->M * L->K * 2);
    st->w = dbuf_upload(L->w, (size_t)L->N * L->K * 2);
    st->gamma = dbuf_upload(L->gamma, (size_t)L->K * 2);
    st->beta = dbuf_upload(L->beta, (size_t)L->K * 2);
    st->bias = dbuf_upload(L->bias, (size_t)L->N * 2);
    run_alloc_state(st);
    run_alloc_outputs(st);
    qf_ln_linear *ll = &st->ll;
    ll->norm.norm = L->norm, ll->norm.eps = L->eps, ll->weight_changed = 1;
    ll->norm.gamma = tens(&st->gamma, QF_DTYPE_BF16, 1, L->K, 0);
    if (L->norm == QF_NORM_LAYERNORM)
        ll->norm.beta = tens(&st->beta, QF_DTYPE_BF16, 1, L->K, 0);
    ll->weight = tens(&st->w, QF_DTYPE_BF16, 2, L->N, L->K);
    ll->bias = tens(&st->bias, QF_DTYPE_BF16, 1, L->N, 0);
    ll->x_scale = st->scale.d, ll->w_scale = (float *)st->scale.d + 1; /* delayed scaling only */
    st->tx = tens(&st->x, QF_DTYPE_BF16, 2, L->M, L->K);
    st->ty = tens(&st->y, QF_DTYPE_BF16, 2, L->M, L->N);
}

static int run_guards_ok(const run_state *st) {
    int ok = dbuf_guard_ok(&st->y);
    for (int i = 0; i < st->nx; i++)
        ok &= dbuf_guard_ok(&st->xb[i]);
    for (int i = 0; i < st->nw; i++)
        ok &= dbuf_guard_ok(&st->wb[i]);
    return ok;
}

static void run_free(run_state *st) {
    dbuf *all[] = {&st->x, &st->gamma, &st->beta, &st->w, &st->bias, &st->y, &st->amax,
                   &st->hist, &st->scale, &st->sinv, &st->fmt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cudaFree(all[i]->d);
    for (int i = 0; i < st->nx; i++)
        cudaFree(st->xb[i].d);
    for (int i = 0; i < st->nw; i++)
        cudaFree(st->wb[i].d);
}

static void print_kernel(const qf_ctx_t *ctx, int show) {
    static const char *const how[] = {"compiled (NVRTC)", "memory hit", "disk-cache hit"};
    const qf_kernel_info *ki = qf_ctx_last_kernel(ctx);
    if (show)
        printf("    %-44s key %s  %-16s %8.2f ms\n", ki->name, ki->key, how[ki->source], ki->ms);
}

/* One step: weight quantize, norm + quantize, the whole layer with the quantized weight, then,
 * under delayed scaling, the scale update (the first step calibrates the scales from scale = 1,
 * TE's initial state). */
static void run_step(qf_ctx_t *ctx, run_state *st, int show_kernels) {
    const char *rn = st->r->name;
    qf_ln_linear *ll = &st->ll;
    QF_OR_DIE(qf_quantize(ctx, rn, QF_ROLE_WEIGHT, &ll->weight, NULL, ll->w_scale, NULL, &ll->wq,
                          NULL));
    print_kernel(ctx, show_kernels);
    QF_OR_DIE(qf_quantize(ctx, rn, QF_ROLE_INPUT, &st->tx, &ll->norm, ll->x_scale, NULL, &ll->xq,
                          NULL));
    print_kernel(ctx, show_kernels);
    ll->weight_changed = 0;
    QF_OR_DIE(qf_layernorm_linear_fwd(ctx, rn, &st->tx, ll, &st->ty, NULL));
    print_kernel(ctx, show_kernels);
    if (delayed_scaling(st)) {
        QF_OR_DIE(qf_scale_update(ctx, rn, 2, st->r->amax_history_len, st->amax.d, st->hist.d,
                                  st->scale.d, st->sinv.d, st->fmt.d, NULL));
        print_kernel(ctx, show_kernels);
    }
    CUDA_OR_DIE(cudaDeviceSynchronize());
}

/* ==================================================================== timing and error */

/* One launch of the timed op: 0 = norm + quantize, 1 = GEMM. */
static void run_op(qf_ctx_t *ctx, run_state *st, int which) {
    qf_ln_linear *ll = &st->ll;
    if (which == 0) {
        QF_OR_DIE(qf_quantize(ctx, st->r->name, QF_ROLE_INPUT, &st->tx, &ll->norm, ll->x_scale,
                              NULL, &ll->xq, NULL));
        return;
    }
    const qf_operand a = {&ll->xq, QF_COPY_ROWWISE}, b = {&ll->wq, QF_COPY_ROWWISE};
    QF_OR_DIE(qf_gemm(ctx, st->r->name, &a, &b, &ll->bias, &st->ty, NULL));
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median time in microseconds of `iters` launches of the op selected by which (0: norm+quantize,
 * 1: GEMM), each bracketed by CUDA events. */
static double time_op(qf_ctx_t *ctx, run_state *st, int which, int iters) {
    cudaEvent_t e0, e1;
    float *t = malloc((size_t)iters * sizeof(float));
    CUDA_OR_DIE(cudaEventCreate(&e0));
    CUDA_OR_DIE(cudaEventCreate(&e1));
    for (int i = -3; i < iters; i++) {
        CUDA_OR_DIE(cudaEventRecord(e0, NULL));
        run_op(ctx, st, which);
        CUDA_OR_DIE(cudaEventRecord(e1, NULL));
        CUDA_OR_DIE(cudaEventSynchronize(e1));
        if (i >= 0)
            CUDA_OR_DIE(cudaEventElapsedTime(&t[i], e0, e1));
    }
    qsort(t, (size_t)iters, sizeof(float), cmp_float);
    double med = 1e3 * t[iters / 2];
    free(t);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return med;
}

/* fp64 reference of one output row: norm in double from the bf16 inputs, then x W^T + bias. */
static void ref_row(const layer *L, int64_t m, double *yrow) {
    const uint16_t *x = L->x + m * L->K;
    double mu = 0.0, var = 0.0;
    for (int64_t k = 0; k < L->K; k++)
        mu += qf_bf16_to_float(x[k]);
    mu = L->norm == QF_NORM_LAYERNORM ? mu / (double)L->K : 0.0;
    for (int64_t k = 0; k < L->K; k++) {
        double d = qf_bf16_to_float(x[k]) - mu;
        var += d * d;
    }
    double rs = 1.0 / sqrt(var / (double)L->K + L->eps);
    double *xn = malloc((size_t)L->K * sizeof(double));
    for (int64_t k = 0; k < L->K; k++) {
        double g = qf_bf16_to_float(L->gamma[k]);
        double b = L->norm == QF_NORM_LAYERNORM ? qf_bf16_to_float(L->beta[k]) : 0.0;
        xn[k] = (qf_bf16_to_float(x[k]) - mu) * rs * g + b;
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < L->N; n++) {
        double acc = qf_bf16_to_float(L->bias[n]);
        const uint16_t *w = L->w + n * L->K;
        for (int64_t k = 0; k < L->K; k++)
            acc += xn[k] * qf_bf16_to_float(w[k]);
        yrow[n] = acc;
    }
    free(xn);
}

/* ||y - y_ref|| / ||y_ref|| over REF_ROWS evenly spaced rows. */
static double y_rel_err(const run_state *st) {
    const layer *L = st->L;
    int64_t rows = L->M < REF_ROWS ? L->M : REF_ROWS;
    uint16_t *y = bf16_alloc(L->N);
    double *yr = malloc((size_t)L->N * sizeof(double)), num = 0.0, den = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        int64_t m = i * L->M / rows;
        CUDA_OR_DIE(cudaMemcpy(y, (uint16_t *)st->y.d + m * L->N, (size_t)L->N * 2,
                               cudaMemcpyDeviceToHost));
        ref_row(L, m, yr);
        for (int64_t n = 0; n < L->N; n++) {
            double d = qf_bf16_to_float(y[n]) - yr[n];
            num += d * d, den += yr[n] * yr[n];
        }
    }
    free(y), free(yr);
    return sqrt(num / den);
}

static const char *norm_name(qf_norm n) {
    return n == QF_NORM_LAYERNORM ? "layernorm" : "rmsnorm";
}

/* 1 when the recipe runs layer L: its fake shapes accept x [M, K], and a dry run of the whole
 * layer on a device-less context of ctx's arch accepts every argument (e.g. NVFP4 needs M and K
 * multiples of 16 and its GEMM K % 32 == 0); otherwise prints the row as skipped, with why. */
static int run_accepted(qf_ctx_t *ctx, run_state *st, const layer *L) {
    qf_shape sh[TOOL_MAX_SHAPES];
    const qf_shape_query q[2] = {
        {.op = QF_OP_NORM_QUANTIZE, .role = QF_ROLE_INPUT, .norm = L->norm,
         .outputs = QF_OUT_ROWWISE, .M = L->M, .K = L->K},
        {.op = QF_OP_QUANTIZE, .role = QF_ROLE_WEIGHT, .outputs = QF_OUT_ROWWISE, .M = L->N,
         .K = L->K}};
    for (int i = 0; i < 2; i++)
        if (st->r->shapes(&q[i], sh, TOOL_MAX_SHAPES) < 0) {
            printf("| %-12s | %-10s | skipped: the recipe's fake shapes reject %s [%lld, %lld]\n",
                   st->r->name, L->label, i ? "W" : "x", (long long)q[i].M, (long long)L->K);
            return 0;
        }
    qf_ctx_t *dry = NULL;
    QF_OR_DIE(qf_ctx_init_host(&dry, qf_ctx_arch(ctx)));
    run_setup(st, st->r, st->L);
    qf_status s = qf_layernorm_linear_fwd(dry, st->r->name, &st->tx, &st->ll, &st->ty, NULL);
    qf_ctx_free(dry);
    if (s == QF_ERR_NO_DEVICE) /* every argument valid */
        return 1;
    printf("| %-12s | %-10s | skipped: %s\n", st->r->name, L->label, qf_last_error());
    run_free(st);
    return 0;
}

static void run_layer(qf_ctx_t *ctx, const qf_recipe *r, layer *L, int iters) {
    run_state st = {.r = r, .L = L};
    if (!run_accepted(ctx, &st, L))
        return;
    run_step(ctx, &st, 0);   /* calibrate scales from amax */
    run_step(ctx, &st, 0);   /* a step with delayed scales */
    double err = y_rel_err(&st);
    double t_nq = time_op(ctx, &st, 0, iters), t_mm = time_op(ctx, &st, 1, iters);
    double tflops = 2.0 * L->M * L->N * L->K / (t_mm * 1e-6) / 1e12;
    char shape[64];
    snprintf(shape, sizeof shape, "%lld x %lld -> %lld", (long long)L->M, (long long)L->K,
             (long long)L->N);
    printf("| %-12s | %-10s | %-10s | %-22s | %10.1f | %9.1f | %7.1f | %9.2e | %-6s |\n", r->name,
           L->label, norm_name(L->norm), shape, t_nq, t_mm, tflops, err,
           run_guards_ok(&st) ? "yes" : "NO");
    run_free(&st);
}

/* First use of every kernel the table needs: prints fusion keys and compile or cache-hit times. */
static void show_kernels(qf_ctx_t *ctx, int ri) {
    printf("\nrecipe %s (%s)\n  options: %s\n", qf_recipes[ri].name, qf_recipes[ri].file,
           qf_recipes[ri].options);
    for (qf_norm nm = QF_NORM_LAYERNORM; nm <= QF_NORM_RMSNORM; nm++) {
        layer L;
        synth_layer(&L, 256, 4096, 1024, nm);
        run_state st;
        run_setup(&st, &qf_recipes[ri], &L);
        printf("  kernels for %s (weight quantize, norm + quantize, layernorm_linear%s):\n",
               norm_name(nm), delayed_scaling(&st) ? ", scale update" : "");
        run_step(ctx, &st, 1);
        run_free(&st);
        layer_free(&L);
    }
}

/* ==================================================================== no-GPU path */

static void show_shapes(const qf_recipe *r, const qf_shape_query *q, const char *what) {
    qf_shape sh[8];
    int n = r->shapes(q, sh, 8);
    if (n < 0) {
        printf("  fake shapes of %s: rejected by %s (%s)\n", what, r->name,
               n == -1 ? "the recipe does not support this shape, e.g. NVFP4 needs M and K "
                         "multiples of 16"
                       : "more than 8 outputs");
        return;
    }
    char dims[8][80];
    int wn = 0, wd = 0;
    for (int i = 0; i < n; i++) { /* column widths: the longest name and dims */
        int len = snprintf(dims[i], sizeof dims[i], "[");
        for (int d = 0; d < sh[i].ndim && len < (int)sizeof dims[i]; d++)
            len += snprintf(dims[i] + len, sizeof dims[i] - (size_t)len, "%s%lld", d ? ", " : "",
                            (long long)sh[i].dims[d]);
        if (len < (int)sizeof dims[i])
            len += snprintf(dims[i] + len, sizeof dims[i] - (size_t)len, "]");
        wn = (int)strlen(sh[i].name) > wn ? (int)strlen(sh[i].name) : wn;
        wd = (int)strlen(dims[i]) > wd ? (int)strlen(dims[i]) : wd;
    }
    printf("  fake shapes of %s:\n", what);
    for (int i = 0; i < n; i++)
        printf("    %-*s  %-5s  %-*s  %llu bytes\n", wn, sh[i].name, qf_dtype_name(sh[i].dtype),
               wd, dims[i], (unsigned long long)sh[i].bytes);
}

/* One line per kernel as it finishes: key, where it came from, time; failures counted. */
static void compile_done(void *ud, const qf_tool_job *job, int done, int total, qf_status s,
                         const qf_kernel_info *info) {
    int *failures = ud;
    (void)done, (void)total;
    if (s != QF_OK) {
        printf("    %-44s COMPILE FAILED: %s\n", job->k->name, qf_last_error());
        ++*failures;
        return;
    }
    printf("    %-44s key %s  %-16s %8.1f ms\n", job->k->name, info->key,
           info->source == QF_KSRC_DISK ? "disk-cache hit" : "compiled (NVRTC)", info->ms);
}

/* Compiles (or finds in the disk cache) the default variant of every kernel of recipe ri for
 * arch, on every CPU. Returns the number of failures. */
static int compile_all(int ri, int arch) {
    qf_tool_job jobs[256];
    int n = 0, failures = 0;
    for (int i = 0; i < qf_kernel_count && n < (int)(sizeof jobs / sizeof jobs[0]); i++)
        if (qf_kernels[i].recipe == &qf_recipes[ri])
            jobs[n++] = (qf_tool_job){&qf_kernels[i], qf_kernel_instance_default(&qf_kernels[i])};
    fflush(stdout); /* the workers print */
    failures += qf_tool_compile(jobs, n, arch, qf_tool_cpus(64), compile_done, &failures);
    return failures;
}

/* Without a GPU: every selected recipe's kernels compiled for sm_90 and its fake shapes at the
 * table's size; with a checkpoint block b (NULL: none) to train, which recipes would train it. */
static int run_without_gpu(const demo_opts *o, const char *why, const demo_block *b) {
    int failures = 0;
    printf("no usable GPU (%s): every kernel compiled for sm_90 instead (NVRTC, or the disk "
           "cache)\n\n",
           why);
    for (int ri = 0; ri < qf_recipe_count; ri++) {
        const qf_recipe *r = &qf_recipes[ri];
        if (!tool_recipe_selected(&o->recipes, ri))
            continue;
        printf("recipe %s (%s)\n  %s\n", r->name, r->file, r->options);
        failures += compile_all(ri, 90);
        qf_shape_query q = {.op = QF_OP_NORM_QUANTIZE, .norm = QF_NORM_LAYERNORM,
                            .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .M = o->tokens,
                            .K = 4096};
        char what[96];
        snprintf(what, sizeof what, "layernorm + quantize, x [%lld, 4096]", (long long)o->tokens);
        show_shapes(r, &q, what);
        q = (qf_shape_query){.op = QF_OP_GEMM, .M = o->tokens, .N = 14336, .K = 4096};
        snprintf(what, sizeof what, "GEMM, x [%lld, 4096] @ W [14336, 4096]^T",
                 (long long)o->tokens);
        show_shapes(r, &q, what);
    }
    if (b && o->train_steps > 0) { /* the shapes say now what the GPU run would leave out */
        printf("\ncheckpoint block x [%lld, %lld], fc1 [%lld, %lld], fc2 [%lld, %lld]: the "
               "recipes that would train it\n",
               (long long)b->M, (long long)b->K, (long long)b->F, (long long)b->K,
               (long long)b->N, (long long)b->F);
        for (int ri = 0; ri < qf_recipe_count; ri++)
            if (tool_recipe_selected(&o->recipes, ri) && demo_block_fits(&qf_recipes[ri], b))
                printf("| %-12s | trains: its fake shapes accept every tensor of the step\n",
                       qf_recipes[ri].name);
    }
    printf("\nGPU part skipped: no GPU on this machine.\n");
    return failures ? 1 : 0;
}

/* ==================================================================== main */

static void usage(FILE *f) {
    fprintf(f, "usage: qfuse-demo [--weights FILE.safetensors] [--tokens M] [--iters N]\n"
               "                  [--train-steps S] [--loss-csv FILE] [--recipe NAME]...\n"
               "Runs LayerNorm/RMSNorm + Linear forward for every generated recipe at real layer\n"
               "shapes (hidden 4096 -> 14336 and 12288) on synthetic activations with outlier\n"
               "channels, and on a checkpoint's block with --weights (tensors x, ln.weight,\n"
               "ln.bias, fc1.weight, fc1.bias, fc2.weight, fc2.bias; see\n"
               "scripts/get-real-weights).\n"
               "With --weights it then trains that LayerNorm + MLP block with every recipe and an\n"
               "fp64 baseline (recover the block's output from perturbed weights) and prints the\n"
               "losses side by side.\n"
               "  --tokens M       tokens of the synthetic runs (default 16384, at most\n"
               "                   1048576: x [M, 4096] and its outputs live in host and GPU\n"
               "                   memory, 8 GiB of bf16 x at the most)\n"
               "  --iters N        timed iterations per op, median reported (default 20;\n"
               "                   1..100000)\n"
               "  --train-steps S  Adam steps per training run (default 300; 0: no training;\n"
               "                   at most 1000000)\n"
               "  --loss-csv FILE  write the loss curves (run,step,loss) to FILE (missing folders\n"
               "                   are made)\n"
               "  --recipe R       only recipe R (repeatable; default: every built-in\n"
               "                   recipe, the names of recipes/*.lua)\n"
               "  --help, -h       this text\n"
               "Without a GPU it compiles every kernel for sm_90 and prints the keys and the\n"
               "fake shapes. Exit status: 0 success, 1 failure, 2 bad usage.\n");
}

/* --tokens' upper bound: x [M, 4096] bf16 is 8 GiB there, in host and device memory. */
#define DEMO_MAX_TOKENS (1LL << 20)

static int parse_args(int argc, char **argv, demo_opts *o) {
    static const struct option longs[] = {{"weights", required_argument, 0, 'w'},
                                          {"tokens", required_argument, 0, 't'},
                                          {"iters", required_argument, 0, 'i'},
                                          {"recipe", required_argument, 0, 'r'},
                                          {"train-steps", required_argument, 0, 's'},
                                          {"loss-csv", required_argument, 0, 'l'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    *o = (demo_opts){.tokens = 16384, .iters = 20, .train_steps = 300};
    argv[0] = (char *)"qfuse-demo"; /* getopt's messages name the program, not its path */
    int c;
    unsigned seen = 0;
    while ((c = tool_getopt(argc, argv, longs)) != -1) {
        if (tool_once(longs, "rh", c, &seen) < 0) /* --recipe adds up */
            return 2;
        if (c == 'w' || c == 'l') { /* file names */
            const char *v = tool_path_arg(c == 'w' ? "--weights" : "--loss-csv", optarg);
            if (!v)
                return 2;
            *(c == 'w' ? &o->weights : &o->loss_csv) = v;
        } else if (strchr("tis", c)) { /* the counts; --train-steps 0 asks for no training */
            static const struct {
                const char *opt;
                long long lo, hi;
            } counts[] = {{"--tokens", 1, DEMO_MAX_TOKENS}, {"--iters", 1, 100000},
                          {"--train-steps", 0, 1000000}};
            const int k = (int)(strchr("tis", c) - "tis");
            long long n;
            if (tool_count_arg(counts[k].opt, optarg, counts[k].lo, counts[k].hi, &n) < 0)
                return 2;
            if (c == 't')
                o->tokens = n;
            else if (c == 'i')
                o->iters = (int)n;
            else
                o->train_steps = (int)n, o->train_steps_given = 1;
        }
        else if (c == 'r' && tool_recipes_add(&o->recipes, optarg) < 0)
            return 2;
        else if (c != 'r')
            return tool_usage_exit(c == 'h', usage);
    }
    if (optind != argc) {
        fprintf(stderr, "qfuse-demo: unexpected argument '%s'\n", argv[optind]);
        tool_usage_hint();
        return 2;
    }
    /* --train-steps 0 asks for no training, which is what a run without --weights does */
    if (!o->weights && (o->loss_csv || (o->train_steps_given && o->train_steps > 0))) {
        fprintf(stderr, "qfuse-demo: --train-steps and --loss-csv train the --weights block; "
                "give --weights FILE (scripts/get-real-weights) or leave them out\n");
        tool_usage_hint();
        return 2;
    }
    return -1;
}

static void print_table_header(void) {
    printf("\n| recipe       | input      | norm       | M x K -> N             | norm+quant | GEMM      "
           "| GEMM    | rel err   | fake   |\n");
    printf("|              |            |            |                        | us         | us        "
           "| TFLOP/s | of y      | shapes |\n");
    printf("|--------------|------------|------------|------------------------|------------|-----------"
           "|---------|-----------|--------|\n");
}

/* The run; main adds stdout's write errors. Returns the exit status. */
static int demo_main(int argc, char **argv) {
    demo_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    const char *csv_path = o.weights && o.train_steps > 0 ? o.loss_csv : NULL;
    if (csv_path && (tool_out_check(csv_path) != 0 || tool_same_file(csv_path, o.weights))) {
        /* a usage error, before any work or output; never over the checkpoint it reads */
        fprintf(stderr, "qfuse-demo: --loss-csv %s: %s\n", csv_path,
                errno ? tool_out_why(csv_path, errno) : "the --weights file itself");
        tool_usage_hint();
        return 2;
    }
    /* line by line into a pipe or log too (make demo tees it), so that progress and errors on
     * stderr stay in order */
    setvbuf(stdout, NULL, _IOLBF, 0);
    int selected = 0;
    for (int ri = 0; ri < qf_recipe_count; ri++)
        selected += tool_recipe_selected(&o.recipes, ri);
    printf("qfuse-demo: %d recipe(s), %d kernel variant(s) in the registry", qf_recipe_count,
           qf_kernel_count);
    if (o.recipes.n)
        printf("; %d recipe(s) chosen by --recipe", selected);
    printf("\n");
    if (o.loss_csv && o.train_steps == 0)
        fprintf(stderr, "qfuse-demo: --train-steps 0: no training, so no loss curves for "
                "--loss-csv %s\n", o.loss_csv);
    layer real = {0};
    demo_block block = {0};
    if (o.weights) { /* read and checked on the CPU, GPU or not */
        demo_block_load(o.weights, &block);
        weights_layer(&real, &block);
        printf("checkpoint %s: x [%lld, %lld], fc1.weight [%lld, %lld], fc2.weight [%lld, "
               "%lld]\n", o.weights, (long long)block.M, (long long)block.K, (long long)block.F,
               (long long)block.K, (long long)block.N, (long long)block.F);
    }
    qf_ctx_t *ctx = NULL;
    qf_status s = qf_ctx_init(&ctx, 0);
    if (s == QF_ERR_NO_DEVICE) {
        const int status = run_without_gpu(&o, qf_last_error(), o.weights ? &block : NULL);
        if (o.weights)
            layer_free(&real), demo_block_free(&block);
        return status;
    }
    QF_OR_DIE(s);
    printf("GPU sm_%d; kernel cache %s\n", qf_ctx_arch(ctx), qf_cache_dir() ? qf_cache_dir()
                                                                            : "(memory only)");
    for (int ri = 0; ri < qf_recipe_count; ri++)
        if (tool_recipe_selected(&o.recipes, ri))
            show_kernels(ctx, ri);
    print_table_header();
    static const int64_t Ns[] = {14336, 12288};
    for (int ri = 0; ri < qf_recipe_count; ri++) {
        if (!tool_recipe_selected(&o.recipes, ri))
            continue;
        for (int n = 0; n < 2; n++)
            for (qf_norm nm = QF_NORM_LAYERNORM; nm <= QF_NORM_RMSNORM; nm++) {
                layer L;
                synth_layer(&L, o.tokens, 4096, Ns[n], nm);
                run_layer(ctx, &qf_recipes[ri], &L, o.iters);
                layer_free(&L);
            }
        if (o.weights)
            run_layer(ctx, &qf_recipes[ri], &real, o.iters);
    }
    printf("\nnorm+quant: median of %d runs of the fused kernel (CUDA events). GEMM: the same;\n"
           "cuBLASLt FP8 for fp8_delayed and fp8_current, the generated block-scaled kernels\n"
           "for MXFP8 and NVFP4 on Hopper (cuBLASLt's block-scaled modes on Blackwell).\n"
           "rel err: ||y - y_ref|| / ||y_ref|| over %d rows, y_ref in fp64 from the bf16 inputs.\n"
           "fake shapes: every buffer sized by the shape functions, validated by the op, guard\n"
           "bytes after each intact.\n", o.iters, REF_ROWS);
    int failed = 0;
    FILE *loss_csv = csv_path && tool_make_parents(csv_path) == 0 ? fopen(csv_path, "w") : NULL;
    if (csv_path && !loss_csv) {
        fprintf(stderr, "qfuse-demo: --loss-csv %s: %s; the curves are not written\n", csv_path,
                strerror(errno));
        failed++;
    }
    if (o.weights && o.train_steps > 0) {
        const demo_train_opts to = {.steps = o.train_steps, .lr = 1e-3, .noise = 0.5,
                                    .seed = 20261201, .csv = loss_csv, .recipes = &o.recipes};
        failed += demo_train(ctx, &block, &to);
    }
    if (loss_csv && fclose(loss_csv) != 0) {
        fprintf(stderr, "qfuse-demo: writing %s failed\n", o.loss_csv);
        failed++;
    } else if (loss_csv && failed == 0) {
        printf("loss curves: %s\n", o.loss_csv);
    }
    if (o.weights)
        layer_free(&real), demo_block_free(&block);
    qf_ctx_free(ctx);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    tool_std_fds();
    return tool_stdout_status("qfuse-demo", demo_main(argc, argv));
}
