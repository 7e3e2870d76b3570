/* bench_gemm.c: qfuse-bench's GEMM rows: bf16 and FP8 GEMMs called on cuBLASLt directly (the
 * ceilings), qfuse's per-tensor FP8 GEMM against them, and the generated GEMM of every recipe
 * that has one next to bf16 cuBLASLt. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* ==================================================================== direct cuBLASLt */

/* A cuBLASLt matmul y[M, N] = A[M, K] W[N, K]^T, fp32 compute, bf16 out, each operand K-major
 * ([M, K], [N, K]: TN, qf_gemm's per-tensor FP8 layout) or MN-major ([K, M], [K, N]: MXFP8's
 * columnwise copies); Lt's A is our W, Lt's B our A, as in runtime/gemm_lt.c. */
#define LT_MAX_ALGOS 16 /* heuristic candidates timed for a ceiling */

typedef struct lt_gemm {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulHeuristicResult_t cand[LT_MAX_ALGOS]; /* cuBLASLt's heuristic, ranked */
    int n_cand;
    cublasLtMatmulAlgo_t algo; /* cand[0] until lt_gemm_pick_best times them all */
    int best;                  /* the index of algo in cand */
} lt_gemm;

/* cuBLASLt's heuristic candidates for g within the workspace (up to LT_MAX_ALGOS) into g->cand;
 * the first is what a caller without tuning gets. */
static void lt_gemm_candidates(lt_gemm *g, const bench *b) {
    cublasLtMatmulPreference_t pref;
    const size_t ws = LT_WORKSPACE;
    LT_OR_DIE(cublasLtMatmulPreferenceCreate(&pref));
    LT_OR_DIE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws));
    LT_OR_DIE(cublasLtMatmulAlgoGetHeuristic(b->lt, g->op, g->la, g->lb, g->lc, g->lc, pref,
                                             LT_MAX_ALGOS, g->cand, &g->n_cand));
    cublasLtMatmulPreferenceDestroy(pref);
    if (!g->n_cand) {
        fprintf(stderr, "qfuse-bench: cuBLASLt has no algorithm for this GEMM\n");
        exit(1);
    }
    g->algo = g->cand[0].algo;
    g->best = 0;
}

/* in: CUDA_R_16BF or CUDA_R_8F_E4M3; sa, sb: device scale_inv of A and W (FP8 only); a_mn, w_mn:
 * A stored [K, M], W stored [K, N] (bf16 only). */
static void lt_gemm_init(lt_gemm *g, const bench *b, cudaDataType_t in, int64_t M, int64_t K,
                         int64_t N, const float *sa, const float *sb, int a_mn, int w_mn) {
    const cublasOperation_t ta = w_mn ? CUBLAS_OP_N : CUBLAS_OP_T;
    const cublasOperation_t tb = a_mn ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_OR_DIE(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_OR_DIE(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_OR_DIE(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (in == CUDA_R_8F_E4M3) { /* Lt's A is our W: its scale is W's */
        LT_OR_DIE(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb,
                                                 sizeof sb));
        LT_OR_DIE(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa,
                                                 sizeof sa));
    }
    LT_OR_DIE(cublasLtMatrixLayoutCreate(&g->la, in, (uint64_t)(w_mn ? N : K),
                                         (uint64_t)(w_mn ? K : N), w_mn ? N : K));
    LT_OR_DIE(cublasLtMatrixLayoutCreate(&g->lb, in, (uint64_t)(a_mn ? M : K),
                                         (uint64_t)(a_mn ? K : M), a_mn ? M : K));
    LT_OR_DIE(cublasLtMatrixLayoutCreate(&g->lc, CUDA_R_16BF, (uint64_t)N, (uint64_t)M, N));
    lt_gemm_candidates(g, b);
}

/* One cuBLASLt call of g with algorithm algo; its status. */
static cublasStatus_t lt_gemm_call(const lt_gemm *g, const bench *b,
                                   const cublasLtMatmulAlgo_t *algo, const void *a, const void *w,
                                   void *y) {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(b->lt, g->op, &alpha, w, g->la, a, g->lb, &beta, y, g->lc, y, g->lc,
                          algo, b->lt_ws, LT_WORKSPACE, NULL);
}

static void lt_gemm_run(const lt_gemm *g, const bench *b, const void *a, const void *w, void *y) {
    LT_OR_DIE(lt_gemm_call(g, b, &g->algo, a, w, y));
}

/* One untimed call; returns cuBLASLt's status instead of exiting, so that a configuration the
 * library rejects is reported in its row rather than ending the whole run. */
static cublasStatus_t lt_gemm_try(const lt_gemm *g, const bench *b, const void *a, const void *w,
                                  void *y) {
    cublasStatus_t s = lt_gemm_call(g, b, &g->algo, a, w, y);
    CUDA_OR_DIE(cudaDeviceSynchronize());
    return s;
}

/* The fastest of cuBLASLt's heuristic candidates for g on operands a, w, y: each is run once
 * (a candidate the library then rejects is skipped), then timed over 5 launches with CUDA
 * events; the ceiling is that algorithm (what a tuned caller such as torch.matmul's gets). */
static void lt_gemm_pick_best(lt_gemm *g, const bench *b, const void *a, const void *w, void *y) {
    cudaEvent_t e0, e1;
    CUDA_OR_DIE(cudaEventCreate(&e0));
    CUDA_OR_DIE(cudaEventCreate(&e1));
    float best = INFINITY;
    for (int i = 0; i < g->n_cand; i++) {
        const cublasLtMatmulAlgo_t *algo = &g->cand[i].algo;
        if (lt_gemm_call(g, b, algo, a, w, y) != CUBLAS_STATUS_SUCCESS)
            continue;
        CUDA_OR_DIE(cudaEventRecord(e0, NULL));
        for (int k = 0; k < 5; k++)
            LT_OR_DIE(lt_gemm_call(g, b, algo, a, w, y));
        CUDA_OR_DIE(cudaEventRecord(e1, NULL));
        CUDA_OR_DIE(cudaEventSynchronize(e1));
        float ms = 0.0f;
        CUDA_OR_DIE(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best)
            best = ms, g->algo = *algo, g->best = i;
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
}

static void lt_gemm_free(lt_gemm *g) {
    cublasLtMatrixLayoutDestroy(g->la), cublasLtMatrixLayoutDestroy(g->lb);
    cublasLtMatrixLayoutDestroy(g->lc), cublasLtMatmulDescDestroy(g->op);
}

/* ==================================================================== GEMM rows */

/* Rotated operand sets of one GEMM shape: A [M, K], W [N, K] of dtype dt, y [M, N] bf16. */
typedef struct gemm_run {
    const bench *b;
    int64_t M, K, N;
    qf_dtype dt;
    int n_rot;
    void *a[MAX_ROT], *w[MAX_ROT], *y[MAX_ROT];
    float *sa, *sb;             /* [1] scale_inv of A and W, each its own allocation */
    lt_gemm lt;
    const char *recipe;         /* the per-tensor FP8 recipe of the qfuse row, "" when none */
} gemm_run;

static void gemm_alloc(gemm_run *g, const bench *b, qf_dtype dt, const int64_t s[3]) {
    *g = (gemm_run){.b = b, .M = s[0], .K = s[1], .N = s[2], .dt = dt};
    size_t es = qf_dtype_size(dt), ab = (size_t)(g->M * g->K) * es, wb = (size_t)(g->N * g->K) * es;
    g->n_rot = bench_rotation_count(b, (double)(ab + wb));
    void *ha = bench_host_random(dt, g->M * g->K, 11), *hw = bench_host_random(dt, g->N * g->K, 13);
    for (int i = 0; i < g->n_rot; i++) {
        g->a[i] = bench_dev_rotated(ha, ab, i, g->n_rot);
        g->w[i] = bench_dev_rotated(hw, wb, i, g->n_rot);
        CUDA_OR_DIE(cudaMalloc(&g->y[i], (size_t)(g->M * g->N) * 2));
    }
    free(ha), free(hw);
    /* Each scale in its own allocation, as the tests have them (with W's scale 4 bytes after
     * A's, cuBLASLt answered "not supported" on an H200). */
    const float sa = 1.0f / 64.0f, sb = 1.0f / 32.0f;
    g->sa = bench_dev_upload(&sa, sizeof sa);
    g->sb = bench_dev_upload(&sb, sizeof sb);
    cudaDataType_t t = dt == QF_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
    lt_gemm_init(&g->lt, b, t, g->M, g->K, g->N, g->sa, g->sb, 0, 0);
}

static void gemm_free(gemm_run *g) {
    for (int i = 0; i < g->n_rot; i++)
        cudaFree(g->a[i]), cudaFree(g->w[i]), cudaFree(g->y[i]);
    cudaFree(g->sa), cudaFree(g->sb);
    lt_gemm_free(&g->lt);
}

static void gemm_lt_launch(void *arg, int i) {
    gemm_run *g = arg;
    lt_gemm_run(&g->lt, g->b, g->a[i], g->w[i], g->y[i]);
}

/* qf_gemm of recipe g->recipe (per-tensor FP8) on operand set i: the rowwise copies with their
 * scale_inv slots. */
static qf_status gemm_qf_call(gemm_run *g, int i) {
    qf_quantized qa = {0}, qw = {0};
    qa.t[QF_SLOT_ROWWISE_DATA] = bench_tensor_2d(g->a[i], QF_DTYPE_E4M3, g->M, g->K);
    qa.t[QF_SLOT_SCALE_INV] = bench_tensor_1d(g->sa, QF_DTYPE_FP32, 1);
    qw.t[QF_SLOT_ROWWISE_DATA] = bench_tensor_2d(g->w[i], QF_DTYPE_E4M3, g->N, g->K);
    qw.t[QF_SLOT_SCALE_INV] = bench_tensor_1d(g->sb, QF_DTYPE_FP32, 1);
    qf_tensor y = bench_tensor_2d(g->y[i], QF_DTYPE_BF16, g->M, g->N);
    const qf_operand a = {&qa, QF_COPY_ROWWISE}, w = {&qw, QF_COPY_ROWWISE};
    return qf_gemm(g->b->ctx, g->recipe, &a, &w, NULL, &y, NULL);
}

static void gemm_qf_launch(void *arg, int i) {
    QF_OR_DIE(gemm_qf_call(arg, i));
}

static row gemm_row(const gemm_run *g, const char *kind, const char *op) {
    row r = bench_row_new(kind, "", op);
    r.dtype = qf_dtype_name(g->dt);
    r.M = g->M, r.K = g->K, r.N = g->N;
    size_t es = qf_dtype_size(g->dt);
    r.bytes = (double)(g->M * g->K + g->N * g->K) * (double)es + (double)(g->M * g->N) * 2.0;
    r.flops = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    return r;
}

/* The first selected per-tensor FP8 recipe, "" when none: its GEMM is cuBLASLt's, compared with
 * the direct FP8 call. */
static const char *first_fp8_recipe(const bench *b) {
    for (int i = 0; i < qf_recipe_count; i++)
        if (qf_recipes[i].family == QF_FAMILY_FP8_DELAYED &&
            tool_recipe_selected(&b->o.recipes, i))
            return qf_recipes[i].name;
    return "";
}

/* The qfuse row of the FP8 operands of g: qf_gemm of the first selected per-tensor FP8 recipe,
 * timed side by side (bench_time_rounds) with the direct FP8 call (when lt_ok: its ratio_lt) and
 * the bf16 ceiling (in its note). */
static void gemm_qf_row(bench *b, gemm_run *g, const char *kind, const bench_timed *bf16,
                        int lt_ok) {
    row q = gemm_row(g, "qfuse", "gemm_fp8");
    q.recipe = g->recipe = first_fp8_recipe(b);
    if (!*g->recipe)
        return;
    qf_status qs = gemm_qf_call(g, 0); /* one untimed call: a failure skips the row, not the run */
    if (qs != QF_OK) {
        fprintf(stderr, "qfuse-bench: qf_gemm of %s failed (%s: %s); no gemm_fp8 row\n",
                g->recipe, qf_status_name(qs), qf_last_error());
        return;
    }
    bench_timed t[3] = {{gemm_qf_launch, g, g->n_rot, 0.0}, *bf16,
                        {gemm_lt_launch, g, g->n_rot, 0.0}};
    bench_time_rounds(b, t, lt_ok ? 3 : 2);
    q.us = t[0].us;
    q.ratio_lt = lt_ok ? t[2].us / q.us : NAN;
    snprintf(q.note, sizeof q.note, "%s: qf_gemm (%s); x%.3f of bf16 cuBLASLt timed beside it "
             "(%.1f us)", kind, g->recipe, t[1].us / q.us, t[1].us);
    bench_row_emit(b, &q);
}

static void bench_block_gemms(bench *b, const bench_gemm_case *c, const bench_timed *bf16);

void bench_gemm_shape(bench *b, const bench_gemm_case *c) {
    const int64_t *s = c->s;
    gemm_run bg, g;
    gemm_alloc(&bg, b, QF_DTYPE_BF16, s);
    row bf = gemm_row(&bg, "ceiling", "cublaslt_bf16_gemm");
    lt_gemm_pick_best(&bg.lt, b, bg.a[0], bg.w[0], bg.y[0]);
    bf.us = bench_time_launches(b, gemm_lt_launch, &bg, bg.n_rot);
    snprintf(bf.note, sizeof bf.note, "cuBLASLt bf16 TN; fp32 compute; bf16 out; fastest of %d "
             "heuristic algorithms (#%d)", bg.lt.n_cand, bg.lt.best);
    bench_row_emit(b, &bf);
    /* the ceiling the rows below are timed beside, its operands kept until the last of them */
    const bench_timed bf16 = {gemm_lt_launch, &bg, bg.n_rot, bf.us};
    gemm_alloc(&g, b, QF_DTYPE_E4M3, s);
    row lt = gemm_row(&g, "ceiling", "cublaslt_fp8_gemm");
    cublasStatus_t st = lt_gemm_try(&g.lt, b, g.a[0], g.w[0], g.y[0]);
    if (st == CUBLAS_STATUS_SUCCESS) {
        lt_gemm_pick_best(&g.lt, b, g.a[0], g.w[0], g.y[0]);
        lt.us = bench_time_launches(b, gemm_lt_launch, &g, g.n_rot);
        snprintf(lt.note, sizeof lt.note, "cuBLASLt E4M3 TN alone; per-tensor scale pointers; "
                 "fastest of %d heuristic algorithms; x%.3f of bf16", g.lt.n_cand, bf.us / lt.us);
        bench_row_emit(b, &lt);
    } else {
        fprintf(stderr, "qfuse-bench: direct cuBLASLt FP8 call failed (%s); no FP8 ceiling row\n",
                cublasLtGetStatusString(st));
    }
    gemm_qf_row(b, &g, c->kind, &bf16, st == CUBLAS_STATUS_SUCCESS);
    gemm_free(&g);
    bench_block_gemms(b, c, &bf16);
    gemm_free(&bg);
}

/* ==================================================================== generated GEMM rows */

/* Rotated operands of one block-scaled GEMM (MXFP8, NVFP4 on Hopper; FP8 block scaling), laid
 * out by the recipe's fake shapes: the copies its training GEMM reads (qf_gemm_kinds): for fprop
 * the rowwise copies of an activation [M, K] and a weight [N, K]; a columnwise copy is that of a
 * [K, M] (or [K, N]) tensor, as the backward quantizes dy and x. y is [M, N]. The operands are
 * the recipe's own quantization (qf_quantize, in each operand's role) of N(0, 1) bf16 data, what
 * a training step multiplies: a GEMM's speed depends on its values (docs/bench.md). With
 * --gemm-data bytes they are random bytes with bit 3 clear (never an E4M3 NaN), every block scale
 * 1.0 in its dtype (E8M0 127, E4M3 0x38) and every amax 2688, so an NVFP4 alpha is 1. bf16[0]
 * and bf16[1] hold the sets' bf16 copies of a and b once block_gemm_bf16 made them
 * (qf_dequantize); when kept is set, the GEMM reads b's (qf_gemm_opts.b_dequantized): a weight
 * kept across the micro-batches of a step. */
typedef struct block_gemm {
    bench *b;
    const qf_recipe *r;
    int64_t M, K, N;
    qf_gemm_kind kind;
    int n_rot;
    out_set a[MAX_ROT], w[MAX_ROT], y[MAX_ROT];
    qf_quantized qa[MAX_ROT], qw[MAX_ROT];
    int kept;
    qf_tensor bf16[2][MAX_ROT]; /* a's and b's bf16 copies per set, the dims of the stored copy */
} block_gemm;

/* Fills the buffers of o as the block_gemm comment says, by slot name and dtype. */
static void block_gemm_fill(out_set *o, uint64_t seed) {
    for (int i = 0; i < o->n; i++) {
        size_t n = o->sh[i].bytes;
        const char *name = o->sh[i].name;
        if (strcmp(name, "rowwise_data") == 0 || strcmp(name, "columnwise_data") == 0) {
            uint8_t *h = tool_xmalloc(n);
            for (size_t j = 0; j < n; j++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                h[j] = (uint8_t)(seed >> 56) & 0xF7u;
            }
            CUDA_OR_DIE(cudaMemcpy(o->buf[i], h, n, cudaMemcpyHostToDevice));
            free(h);
        } else if ((strcmp(name, "rowwise_scale_inv") == 0 ||
                    strcmp(name, "columnwise_scale_inv") == 0) &&
                   o->sh[i].dtype == QF_DTYPE_FP32) { /* FP8 block scaling: 1.0f */
            float *h = tool_xmalloc(n);
            for (size_t j = 0; j < n / sizeof *h; j++)
                h[j] = 1.0f;
            CUDA_OR_DIE(cudaMemcpy(o->buf[i], h, n, cudaMemcpyHostToDevice));
            free(h);
        } else if (strcmp(name, "rowwise_scale_inv") == 0 ||
                   strcmp(name, "columnwise_scale_inv") == 0) {
            CUDA_OR_DIE(cudaMemset(o->buf[i], o->sh[i].dtype == QF_DTYPE_E8M0 ? 127 : 0x38, n));
        } else if (strncmp(name, "amax", 4) == 0) {
            const float amax = 2688.0f;
            CUDA_OR_DIE(cudaMemcpy(o->buf[i], &amax, sizeof amax, cudaMemcpyHostToDevice));
        }
    }
}

static void block_gemm_launch(void *arg, int i) {
    block_gemm *g = arg;
    qf_tensor y = bench_out_tensor(&g->y[i], "y");
    const qf_gemm_kind_traits *k = &qf_gemm_kinds[g->kind];
    const qf_operand a = {&g->qa[i], k->a_copy}, w = {&g->qw[i], k->b_copy};
    const qf_gemm_opts o = {.b_dequantized = g->kept ? &g->bf16[1][i] : NULL};
    QF_OR_DIE(qf_gemm_ex(g->b->ctx, g->r->name, &a, &w, NULL, &y, &o, NULL));
}

/* r->us of fn's launches over n_rot operand sets and r->ratio_lt, the bf16 ceiling's time over
 * it, timed side by side (bench_time_rounds). */
static void time_beside(const bench *b, launch_fn fn, void *arg, int n_rot,
                        const bench_timed *bf16, row *r) {
    bench_timed t[2] = {{fn, arg, n_rot, 0.0}, *bf16};
    bench_time_rounds(b, t, 2);
    r->us = t[0].us;
    r->ratio_lt = t[1].us / r->us;
}

/* Whether operand `which` (0: a, 1: b) of g is stored MN-major: MXFP8's columnwise copies. */
static int block_gemm_mn(const block_gemm *g, int which) {
    const qf_gemm_kind_traits *k = &qf_gemm_kinds[g->kind];
    return g->r->family == QF_FAMILY_MXFP8 &&
           (which ? k->b_copy : k->a_copy) == QF_COPY_COLUMNWISE;
}

/* The bf16 copy of operand `which` (0: a, 1: b) of every set, by qf_dequantize: the dims of the
 * stored copy ([rows, K], or [K, rows] when MN-major), once. */
static void block_gemm_bf16(block_gemm *g, int which) {
    if (g->bf16[which][0].data)
        return;
    const qf_gemm_kind_traits *k = &qf_gemm_kinds[g->kind];
    const int64_t rows = which ? g->N : g->M;
    const int mn = block_gemm_mn(g, which);
    for (int i = 0; i < g->n_rot; i++) {
        void *d = NULL;
        CUDA_OR_DIE(cudaMalloc(&d, (size_t)(rows * g->K) * 2));
        g->bf16[which][i] = bench_tensor_2d(d, QF_DTYPE_BF16, mn ? g->K : rows, mn ? rows : g->K);
        const qf_operand o = {which ? &g->qw[i] : &g->qa[i], which ? k->b_copy : k->a_copy};
        QF_OR_DIE(qf_dequantize(g->b->ctx, g->r->name, which ? k->b_role : k->a_role, &o,
                                &g->bf16[which][i], NULL));
    }
    CUDA_OR_DIE(cudaDeviceSynchronize());
}

/* cuBLASLt bf16 alone on the bf16 copies of both operands of g (lt_gemm, the fastest of its
 * heuristic's algorithms): the staged GEMM's last step without its dequantizations, on the
 * same values. */
typedef struct values_run {
    const bench *b;
    block_gemm *g;
    lt_gemm lt;
} values_run;

static void values_launch(void *arg, int i) {
    values_run *v = arg;
    lt_gemm_run(&v->lt, v->b, v->g->bf16[0][i].data, v->g->bf16[1][i].data,
                bench_out_tensor(&v->g->y[i], "y").data);
}

/* The ceiling row of g's values (kind ceiling, op cublaslt_bf16_gemm_<family>_values). */
static void block_gemm_values_row(bench *b, block_gemm *g, const char *kind,
                                  const bench_timed *bf16) {
    block_gemm_bf16(g, 0);
    block_gemm_bf16(g, 1);
    values_run v = {.b = b, .g = g};
    lt_gemm_init(&v.lt, b, CUDA_R_16BF, g->M, g->K, g->N, NULL, NULL, block_gemm_mn(g, 0),
                 block_gemm_mn(g, 1));
    lt_gemm_pick_best(&v.lt, b, g->bf16[0][0].data, g->bf16[1][0].data,
                      bench_out_tensor(&g->y[0], "y").data);
    char op[64];
    snprintf(op, sizeof op, "cublaslt_bf16_gemm_%s_values", qf_family_name(g->r->family));
    row r = bench_row_new("ceiling", g->r->name, op);
    r.dtype = "bf16";
    r.M = g->M, r.K = g->K, r.N = g->N;
    r.bytes = (double)(g->M + g->N) * (double)g->K * 2.0 + (double)(g->M * g->N) * 2.0;
    r.flops = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    time_beside(b, values_launch, &v, g->n_rot, bf16, &r);
    snprintf(r.note, sizeof r.note, "%s: cuBLASLt bf16 alone on the %s copies' dequantized "
             "values (a %s, b %s); fastest of %d heuristic algorithms (#%d); x%.3f of bf16 "
             "cuBLASLt on random data timed beside it", kind, qf_gemm_kinds[g->kind].name,
             block_gemm_mn(g, 0) ? "MN-major" : "K-major",
             block_gemm_mn(g, 1) ? "MN-major" : "K-major", v.lt.n_cand, v.lt.best, r.ratio_lt);
    bench_row_emit(b, &r);
    lt_gemm_free(&v.lt);
}

/* 1 when recipe ri has a generated GEMM kernel (the registry lists it). */
static int has_gemm_kernel(int ri) {
    for (int i = 0; i < qf_kernel_count; i++)
        if (qf_kernels[i].recipe == &qf_recipes[ri] && qf_kernels[i].op == QF_OP_GEMM)
            return 1;
    return 0;
}

/* 1 when recipe ri's GEMM reads block scales on this arch: a generated GEMM (MXFP8, NVFP4 on
 * Hopper), or cuBLASLt with block scale matrices (FP8 block scaling: its quantizer's fake shapes
 * list a rowwise_scale_inv). */
static int block_scaled_gemm(const bench *b, int ri) {
    if (has_gemm_kernel(ri))
        return 1;
    const qf_recipe *r = &qf_recipes[ri];
    if (qf_family_gemm_path(r->family, qf_ctx_arch(b->ctx)).engine != QF_GEMM_CUBLASLT)
        return 0;
    const qf_shape_query q = {.op = QF_OP_QUANTIZE, .role = QF_ROLE_INPUT,
                              .outputs = QF_OUT_ROWWISE, .M = 128, .K = 128};
    qf_shape sh[QF_FAKE_MAX_OUTPUTS];
    int n = 0;
    if (qf_fake_shapes(r->name, &q, sh, QF_FAKE_MAX_OUTPUTS, &n) != QF_OK)
        return 0;
    for (int i = 0; i < n; i++)
        if (strcmp(sh[i].name, "rowwise_scale_inv") == 0)
            return 1;
    return 0;
}

/* 1 when recipe ri gets a row: selected, with a block-scaled GEMM, and the first such recipe of
 * its family (the rows are named gemm_<family>, which bench_report.py matches to the peers). */
static int block_gemm_benched(const bench *b, int ri) {
    if (!tool_recipe_selected(&b->o.recipes, ri) || !block_scaled_gemm(b, ri))
        return 0;
    for (int j = 0; j < ri; j++)
        if (qf_recipes[j].family == qf_recipes[ri].family &&
            tool_recipe_selected(&b->o.recipes, j) && block_scaled_gemm(b, j))
            return 0;
    return 1;
}

/* The operands' data as the rows' notes name it (--gemm-data). */
static const char *block_gemm_data(const bench *b) {
    return b->o.gemm_bytes ? "random bytes, unit scales" : "quantized N(0, 1) data";
}

/* Quantizes the [q->M, q->K] bf16 data h (host) into each set's operand `which` (0: a, 1: b) of
 * g, in q's role and copy, each set from its own rotation of h (bench_dev_rotated): the recipe's
 * quantizer, with stochastic rounding where its role has it (a seed per set). */
static void block_gemm_quantize(block_gemm *g, int which, const qf_shape_query *q, const void *h) {
    const size_t bytes = (size_t)(q->M * q->K) * 2;
    for (int i = 0; i < g->n_rot; i++) {
        void *d = bench_dev_rotated(h, bytes, i, g->n_rot);
        const qf_tensor x = bench_tensor_2d(d, QF_DTYPE_BF16, q->M, q->K);
        const qf_rng rng = {.seed = 0x5eed + (uint64_t)which, .offset = (uint64_t)i};
        QF_OR_DIE(qf_quantize(g->b->ctx, g->r->name, q->role, &x, NULL, NULL, &rng,
                              which ? &g->qw[i] : &g->qa[i], NULL));
        CUDA_OR_DIE(cudaDeviceSynchronize());
        cudaFree(d);
    }
}

/* Allocates and fills the rotated operand sets of g (block_gemm). */
static void block_gemm_alloc(block_gemm *g) {
    const qf_gemm_kind_traits *k = &qf_gemm_kinds[g->kind];
    const qf_shape_query qa = bench_operand_query(k->a_role, k->a_copy, g->M, g->K);
    const qf_shape_query qw = bench_operand_query(k->b_role, k->b_copy, g->N, g->K);
    const qf_shape_query qy = {.op = QF_OP_GEMM, .M = g->M, .N = g->N, .K = g->K};
    double set_bytes = (double)(g->M + g->N) * (double)g->K; /* upper bound: 1 byte each */
    g->n_rot = bench_rotation_count(g->b, set_bytes);
    for (int i = 0; i < g->n_rot; i++) {
        bench_out_alloc(&g->a[i], g->r, &qa), bench_out_alloc(&g->w[i], g->r, &qw);
        bench_out_alloc(&g->y[i], g->r, &qy);
        if (g->b->o.gemm_bytes) {
            block_gemm_fill(&g->a[i], 31 + (uint64_t)i);
            block_gemm_fill(&g->w[i], 37 + (uint64_t)i);
        }
        g->qa[i] = bench_out_quantized(&g->a[i], QF_SCALE_LAYOUT_COMPACT);
        g->qw[i] = bench_out_quantized(&g->w[i], QF_SCALE_LAYOUT_COMPACT);
    }
    if (g->b->o.gemm_bytes)
        return;
    for (int which = 0; which < 2; which++) {
        const qf_shape_query *q = which ? &qw : &qa;
        void *h = bench_host_random(QF_DTYPE_BF16, q->M * q->K, which ? 13 : 11);
        block_gemm_quantize(g, which, q, h);
        free(h);
    }
}

/* The row of g: bytes of both operands (data, scales, amaxes) and y. */
static row block_gemm_row(const block_gemm *g, char *op, size_t cap) {
    snprintf(op, cap, "gemm_%s", qf_family_name(g->r->family));
    row q = bench_row_new("qfuse", g->r->name, op);
    q.dtype = qf_dtype_name(g->r->fmt[QF_ROLE_INPUT]);
    q.M = g->M, q.K = g->K, q.N = g->N;
    q.bytes = (double)g->y[0].sh[0].bytes;
    for (int j = 0; j < g->a[0].n; j++)
        q.bytes += (double)g->a[0].sh[j].bytes;
    for (int j = 0; j < g->w[0].n; j++)
        q.bytes += (double)g->w[0].sh[j].bytes;
    q.flops = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    return q;
}

/* The generated GEMM of every selected recipe that has one (and FP8 block scaling's cuBLASLt
 * GEMM), at c's shape, each row timed side by side with the bf16 ceiling bf16 (its ratio_lt). */
static void bench_block_gemms(bench *b, const bench_gemm_case *c, const bench_timed *bf16) {
    const int64_t *s = c->s;
    if (qf_ctx_arch(b->ctx) >= 100) /* Blackwell: these recipes go to cuBLASLt (swizzled) */
        return;
    for (int ri = 0; ri < qf_recipe_count; ri++) {
        if (!block_gemm_benched(b, ri))
            continue;
        block_gemm *g = calloc(1, sizeof *g);
        if (!g)
            exit(1);
        *g = (block_gemm){.b = b, .r = &qf_recipes[ri], .M = s[0], .K = s[1], .N = s[2],
                          .kind = c->gemm};
        block_gemm_alloc(g);
        const char *way = getenv("QFUSE_HOPPER_GEMM"); /* qf_gemm decides (op_gemm.c) */
        way = way && *way ? way : "auto";
        char op[48];
        row q = block_gemm_row(g, op, sizeof op);
        time_beside(b, block_gemm_launch, g, g->n_rot, bf16, &q);
        if (has_gemm_kernel(ri))
            snprintf(q.note, sizeof q.note, "%s: qf_gemm (QFUSE_HOPPER_GEMM=%s) of the %s copies, "
                     "compact scales, %s; x%.3f of bf16 cuBLASLt timed beside it", c->kind, way,
                     qf_gemm_kinds[c->gemm].name, block_gemm_data(b), q.ratio_lt);
        else
            snprintf(q.note, sizeof q.note, "%s: qf_gemm of the %s copies, cuBLASLt with their "
                     "block scales, %s; x%.3f of bf16 cuBLASLt timed beside it", c->kind,
                     qf_gemm_kinds[c->gemm].name, block_gemm_data(b), q.ratio_lt);
        bench_row_emit(b, &q);
        if (!has_gemm_kernel(ri)) { /* no dequantized copies: the FP8 tensor cores read them */
            for (int i = 0; i < g->n_rot; i++)
                bench_out_free(&g->a[i]), bench_out_free(&g->w[i]), bench_out_free(&g->y[i]);
            free(g);
            continue;
        }
        if (qf_gemm_kinds[c->gemm].b_role == QF_ROLE_WEIGHT) { /* the weight's bf16 copy kept */
            block_gemm_bf16(g, 1);
            g->kept = 1;
            char kop[64];
            row k = block_gemm_row(g, op, sizeof op);
            snprintf(kop, sizeof kop, "%s_wkept", op);
            k.op = kop;
            time_beside(b, block_gemm_launch, g, g->n_rot, bf16, &k);
            snprintf(k.note, sizeof k.note, "%s: qf_gemm (QFUSE_HOPPER_GEMM=%s) of the %s copies "
                     "with the weight's bf16 copy kept (qf_dequantize once, opts.b_dequantized); "
                     "x%.3f of bf16 cuBLASLt timed beside it", c->kind, way,
                     qf_gemm_kinds[c->gemm].name, k.ratio_lt);
            bench_row_emit(b, &k);
        }
        block_gemm_values_row(b, g, c->kind, bf16);
        for (int i = 0; i < g->n_rot; i++) {
            bench_out_free(&g->a[i]), bench_out_free(&g->w[i]), bench_out_free(&g->y[i]);
            cudaFree(g->bf16[0][i].data), cudaFree(g->bf16[1][i].data);
        }
        free(g);
    }
}
