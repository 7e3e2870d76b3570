/* bench_step.c: one LayerNorm + MLP training step per recipe (qfuse-bench --section step):
 * qf_layernorm_mlp_fwd + qf_layernorm_mlp_bwd with SwiGLU at tokens M, hidden K, ffn F (fc1
 * [2F, K], fc2 [K, F]), both weights quantized in every step (as after each optimizer update),
 * wgrad into fp32, dgrads (da, dxn) in bf16 as TE's. The step's time is split into its GEMM
 * stages and the rest by CUDA events around each stage (qf_stage_times). PyTorch's bf16 eager
 * and torch.compile of the same block are scripts/bench_peers.py --section step, same shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ctx.h"
#include "tool_dbuf.h"

#define STEP_K 4096
#define STEP_F 14336
#define STEP_M_FULL 16384
#define STEP_M_QUICK 2048
#define STEP_WARMUP 3
#define STEP_SPLIT_STEPS 3 /* steps timed stage by stage (17 stages each, QF_STAGE_TIMES_MAX) */

typedef struct step_bench {
    const qf_recipe *r;
    int64_t M, K, F, N;
    out_set q[TOOL_MLP_COUNT];
    void *dense[32];
    int n_dense;
    qf_ln_mlp mlp;
    qf_ln_mlp_grads g;
    qf_tensor tx, ty, tdy;
} step_bench;

/* Keeps device buffer d for step_free. */
static void *step_keep(step_bench *s, void *d) {
    if (s->n_dense == (int)(sizeof s->dense / sizeof s->dense[0])) {
        fprintf(stderr, "qfuse-bench: step_bench holds too many buffers\n");
        exit(1);
    }
    return s->dense[s->n_dense++] = d;
}

/* A device tensor of random N(0, 1) elements (dtype dt) times 2^-scale_log2 (bf16 only: an
 * exponent shift; the few values too small to shift keep theirs). An input of the step. */
static void *step_dense(step_bench *s, qf_dtype dt, int64_t n, uint64_t seed, int scale_log2) {
    void *h = bench_host_random(dt, n, seed);
    if (dt == QF_DTYPE_BF16 && scale_log2) /* exact: an exponent shift of each bf16 */
        for (int64_t i = 0; i < n; i++) {
            uint16_t *v = (uint16_t *)h + i;
            if ((*v & 0x7F80) > (scale_log2 << 7))
                *v = (uint16_t)(*v - (scale_log2 << 7));
        }
    void *d = bench_dev_upload(h, (size_t)n * qf_dtype_size(dt));
    free(h);
    return step_keep(s, d);
}

/* A zeroed device tensor of n elements of dt: an output of the step (no host data to make). */
static void *step_out(step_bench *s, qf_dtype dt, int64_t n) {
    void *d = NULL;
    CUDA_OR_DIE(cudaMalloc(&d, (size_t)n * qf_dtype_size(dt)));
    CUDA_OR_DIE(cudaMemset(d, 0, (size_t)n * qf_dtype_size(dt)));
    return step_keep(s, d);
}

static void step_alloc(step_bench *s, const qf_recipe *r, int64_t M) {
    memset(s, 0, sizeof *s);
    s->r = r, s->M = M, s->K = STEP_K, s->F = STEP_F, s->N = STEP_K;
    const int64_t K = s->K, F = s->F, N = s->N, Fin = 2 * F;
    const float ones[TOOL_MLP_COUNT] = {1, 1, 1, 1, 1, 1}; /* fp8_delayed's scales */
    float *sc = step_keep(s, bench_dev_upload(ones, sizeof ones));
    const qf_dtype bf = QF_DTYPE_BF16, f32 = QF_DTYPE_FP32;
    /* weights N(0, 1) / 64 (about 1 / sqrt(K)), so that h and a stay in range */
    s->mlp = (qf_ln_mlp){
        .norm = {.norm = QF_NORM_LAYERNORM, .eps = NORM_EPS,
                 .gamma = bench_tensor_1d(step_dense(s, bf, K, 1, 0), bf, K),
                 .beta = bench_tensor_1d(step_dense(s, bf, K, 2, 0), bf, K)},
        .act = QF_ACT_SWIGLU,
        .w1 = bench_tensor_2d(step_dense(s, bf, Fin * K, 3, 6), bf, Fin, K),
        .b1 = bench_tensor_1d(step_dense(s, bf, Fin, 4, 0), bf, Fin),
        .w2 = bench_tensor_2d(step_dense(s, bf, N * F, 5, 6), bf, N, F),
        .b2 = bench_tensor_1d(step_dense(s, bf, N, 6, 0), bf, N),
        .x_scale = sc + TOOL_MLP_X, .w1_scale = sc + TOOL_MLP_W1, .a_scale = sc + TOOL_MLP_A,
        .w2_scale = sc + TOOL_MLP_W2,
        .h = bench_tensor_2d(step_out(s, bf, M * Fin), bf, M, Fin),
        .a = bench_tensor_2d(step_out(s, bf, M * F), bf, M, F)};
    s->g = (qf_ln_mlp_grads){
        .dy_scale = sc + TOOL_MLP_DY, .dh_scale = sc + TOOL_MLP_DH,
        .rng_dy = {1, 0}, .rng_dh = {2, 0},
        .da = bench_tensor_2d(step_out(s, bf, M * F), bf, M, F),
        .dh = bench_tensor_2d(step_out(s, bf, M * Fin), bf, M, Fin),
        .dxn = bench_tensor_2d(step_out(s, bf, M * K), bf, M, K),
        .dw1 = bench_tensor_2d(step_out(s, f32, Fin * K), f32, Fin, K),
        .dw2 = bench_tensor_2d(step_out(s, f32, N * F), f32, N, F),
        .db1 = bench_tensor_1d(step_out(s, bf, Fin), bf, Fin),
        .db2 = bench_tensor_1d(step_out(s, bf, N), bf, N)};
    s->g.norm.dx = bench_tensor_2d(step_out(s, bf, M * K), bf, M, K);
    s->g.norm.dgamma = bench_tensor_1d(step_out(s, f32, K), f32, K);
    s->g.norm.dbeta = bench_tensor_1d(step_out(s, f32, K), f32, K);
    s->tx = bench_tensor_2d(step_dense(s, bf, M * K, 19, 0), bf, M, K);
    s->ty = bench_tensor_2d(step_out(s, bf, M * N), bf, M, N);
    s->tdy = bench_tensor_2d(step_dense(s, bf, M * N, 21, 4), bf, M, N);
    qf_quantized *dst[TOOL_MLP_COUNT];
    tool_mlp_quantized(&s->mlp, &s->g, dst);
    qf_shape_query qs[TOOL_MLP_COUNT];
    tool_mlp_queries(M, K, F, N, QF_ACT_SWIGLU, QF_NORM_LAYERNORM, qs);
    for (int i = 0; i < TOOL_MLP_COUNT; i++) {
        bench_out_alloc(&s->q[i], r, &qs[i]);
        *dst[i] = bench_out_quantized(&s->q[i], QF_SCALE_LAYOUT_COMPACT);
    }
}

static void step_free(step_bench *s) {
    for (int i = 0; i < TOOL_MLP_COUNT; i++)
        bench_out_free(&s->q[i]);
    for (int i = 0; i < s->n_dense; i++)
        cudaFree(s->dense[i]);
}

/* One training step on the legacy default stream: new weights (the cache re-quantizes them). */
static void step_run(bench *b, step_bench *s) {
    s->mlp.weight_version++;
    s->g.rng_dy.offset++, s->g.rng_dh.offset++;
    QF_OR_DIE(qf_layernorm_mlp_fwd(b->ctx, s->r->name, &s->tx, &s->mlp, &s->ty, NULL));
    QF_OR_DIE(qf_layernorm_mlp_bwd(b->ctx, s->r->name, &s->tx, &s->tdy, &s->mlp, &s->g, NULL));
}

/* Median milliseconds of o.iters steps, each between two CUDA events. */
static double step_median_ms(bench *b, step_bench *s) {
    cudaEvent_t e0, e1;
    CUDA_OR_DIE(cudaEventCreate(&e0));
    CUDA_OR_DIE(cudaEventCreate(&e1));
    for (int i = 0; i < STEP_WARMUP; i++)
        step_run(b, s);
    const int n = b->o.iters < 20 ? b->o.iters : 20;
    double *ms = tool_xmalloc((size_t)n * sizeof *ms);
    for (int i = 0; i < n; i++) {
        CUDA_OR_DIE(cudaEventRecord(e0, NULL));
        step_run(b, s);
        CUDA_OR_DIE(cudaEventRecord(e1, NULL));
        CUDA_OR_DIE(cudaEventSynchronize(e1));
        float t = 0.0f;
        CUDA_OR_DIE(cudaEventElapsedTime(&t, e0, e1));
        ms[i] = t;
    }
    const double med = bench_median(ms, n);
    free(ms);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return med;
}

void bench_steps(bench *b) {
    const int64_t M = b->o.quick ? STEP_M_QUICK : STEP_M_FULL;
    for (int ri = 0; ri < qf_recipe_count; ri++) {
        if (!tool_recipe_selected(&b->o.recipes, ri))
            continue;
        if (!tool_recipe_quantizes(ri)) {
            fprintf(stderr, "qfuse-bench: %s step skipped: no quantizer or no GEMM yet\n",
                    qf_recipes[ri].name);
            continue;
        }
        step_bench *s = calloc(1, sizeof *s);
        if (!s)
            exit(1);
        step_alloc(s, &qf_recipes[ri], M);
        const double med = step_median_ms(b, s);
        qf_stage_times st;
        QF_OR_DIE(qf_stage_times_attach(b->ctx, &st));
        for (int i = 0; i < STEP_SPLIT_STEPS; i++)
            step_run(b, s);
        CUDA_OR_DIE(cudaDeviceSynchronize());
        double gemm = 0.0, other = 0.0, worst = 0.0;
        const char *worst_name = "";
        for (int i = 0; i < st.n; i++) {
            const double t = qf_stage_times_ms(&st, i);
            if (t < 0.0) {
                fprintf(stderr, "qfuse-bench: no time for stage %d (%s)\n", i, st.name[i]);
                exit(1);
            }
            if (st.is_gemm[i])
                gemm += t;
            else
                other += t;
        }
        fprintf(stderr, "qfuse-bench: %s step, mean of %d steps per stage:\n", s->r->name,
                STEP_SPLIT_STEPS);
        for (int i = 0; i < st.n; i++) { /* each stage summed over the steps; the costliest */
            double t = 0.0;
            int first = 1;
            for (int j = 0; j < st.n; j++) {
                first &= !(j < i && st.name[j] == st.name[i]);
                t += st.name[j] == st.name[i] ? qf_stage_times_ms(&st, j) : 0.0;
            }
            if (first)
                fprintf(stderr, "  %8.3f ms  %s%s\n", t / STEP_SPLIT_STEPS, st.name[i],
                        st.is_gemm[i] ? " [GEMM]" : "");
            if (!st.is_gemm[i] && t > worst)
                worst = t, worst_name = st.name[i];
        }
        qf_stage_times_detach(b->ctx);
        gemm /= STEP_SPLIT_STEPS, other /= STEP_SPLIT_STEPS, worst /= STEP_SPLIT_STEPS;
        row r = bench_row_new("qfuse", s->r->name, "mlp_step_swiglu");
        r.dtype = "bf16", r.M = M, r.K = s->K, r.N = s->F;
        const double Fin = 2.0 * (double)s->F;
        r.flops = 3.0 * (2.0 * (double)M * (double)s->K * Fin +
                         2.0 * (double)M * (double)s->F * (double)s->N);
        r.us = med * 1e3;
        snprintf(r.note, sizeof r.note, "fwd+bwd, N = ffn; GEMM stages %.2f ms (%.1f%%), other "
                 "%.2f ms (%.1f%%; most: %.2f ms %.40s); mean of %d steps", gemm,
                 100.0 * gemm / (gemm + other),
                 other, 100.0 * other / (gemm + other), worst, worst_name, STEP_SPLIT_STEPS);
        bench_row_emit(b, &r);
        step_free(s);
        free(s);
    }
}
