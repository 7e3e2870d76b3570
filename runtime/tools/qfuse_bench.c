/* qfuse_bench.c: `make bench`: every qfuse op timed against ceilings measured in the same run.
 *
 * Rows (printed as a table and written as CSV, see usage()):
 * - ceilings: device-to-device copy of 1 GiB (TB/s, bytes read + written), bf16 and FP8 GEMMs
 *   called on cuBLASLt directly (TN, fp32 compute) at each GEMM shape;
 * - norm + quantize and weight quantize for every recipe x norm x x dtype x outputs x shape:
 *   bytes counted from the recipe's fake shapes, median time, TB/s and the ratio to the copy;
 * - FP8 GEMM through qf_gemm_fp8: TFLOP/s and the ratio to cuBLASLt FP8 alone and to bf16;
 * - JIT: cold NVRTC compile, disk-cache load in a fresh context, in-memory lookup per kernel.
 * Times: CUDA events around batches of back-to-back launches (the per-launch time is the batch
 * time over its size; the median over batches is reported), after a warm-up, with inputs rotated
 * between sets that together exceed twice the L2 cache, filled with random data.
 * Without a GPU it says so and exits 0. scripts/bench_peers.py and scripts/bench_report.py add
 * the PyTorch peers, the plot and the README table. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "jit_cache.h"
#include "kernel_key.h"
#include "ref.h"
#include "registry.h"
#define QF_TOOL_NAME "qfuse-bench"
#include "tool_util.h"

#define MAX_ROT 64          /* most input sets rotated between */
#define MAX_OUT 8           /* outputs of one op per fake-shape function */
#define WARMUP 5            /* launches before timing */
#define LT_WORKSPACE (32u << 20) /* cuBLASLt workspace: the same size libqfuse uses */
#define COPY_BYTES (1ull << 30)
#define PROBE_M 256         /* JIT probes: a small problem, kernels do not depend on M or K */
#define PROBE_K 1024
#define NORM_EPS 1e-5f

#define LT_OR_DIE(call)                                                                       \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            fprintf(stderr, "qfuse-bench: %s failed: %s\n", #call, cublasLtGetStatusString(s_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* Sections of the run (--section); the copy ceiling always runs. */
enum { SEC_QUANT = 1, SEC_GEMM = 2, SEC_JIT = 4, SEC_ALL = 7 };

typedef struct bench_opts {
    const char *csv;
    int quick, iters, batch;
    unsigned sections;          /* SEC_* mask */
    int dtype;                  /* --dtype: one x dtype, or -1 for all */
    tool_recipes recipes;       /* --recipe */
} bench_opts;

/* Everything measured once per run and shared by the sections. */
typedef struct bench {
    bench_opts o;
    qf_ctx_t *ctx;
    FILE *csv;
    size_t l2;                  /* L2 bytes (cudaDeviceProp.l2CacheSize) */
    double copy_tbps;           /* measured D2D copy bandwidth */
    cublasLtHandle_t lt;        /* the tool's own handle for the direct cuBLASLt calls */
    void *lt_ws;
} bench;

/* tokens x hidden of real models' layers; GEMMs as M, K, N (y[M, N] = x[M, K] W[N, K]^T). */
static const int64_t nq_shapes_full[][2] = {
    {16384, 4096}, {16384, 8192}, {4096, 12288}, {8192, 4096}, {2048, 16384}};
static const int64_t nq_shapes_quick[][2] = {{8192, 4096}};
static const int64_t gemm_shapes_full[][3] = {{8192, 8192, 8192}, {16384, 4096, 14336}};
static const int64_t gemm_shapes_quick[][3] = {{8192, 8192, 8192}};
static const qf_dtype x_dtypes[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};

/* Family names as SPEC 2 spells them; bench_report.py matches peers to recipes by family. */
static const char *const family_names[] = {
    [QF_FAMILY_FP8_DELAYED] = "fp8_delayed", [QF_FAMILY_FP8_CURRENT] = "fp8_current",
    [QF_FAMILY_MXFP8] = "mxfp8", [QF_FAMILY_NVFP4] = "nvfp4", [QF_FAMILY_FP8_BLOCK] = "fp8_block"};
_Static_assert(sizeof family_names / sizeof family_names[0] == QF_FAMILY_COUNT, "family_names");

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "qfuse-bench: out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n-1] (sorts v). */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ==================================================================== random inputs */

/* Element i of a random array: N(0, 1) for float dtypes, E4M3 bytes of U[-200, 200] (never NaN). */
static void store_random(void *p, qf_dtype dt, int64_t i, uint64_t *s) {
    switch (dt) {
    case QF_DTYPE_FP32:
        ((float *)p)[i] = rng_normal(s);
        break;
    case QF_DTYPE_FP16:
        ((uint16_t *)p)[i] = qf_float_to_fp16(rng_normal(s));
        break;
    case QF_DTYPE_BF16:
        ((uint16_t *)p)[i] = qf_float_to_bf16(rng_normal(s));
        break;
    default:
        ((uint8_t *)p)[i] = qf_e4m3_from_float_ref((float)(400.0 * rng_uniform(s) - 200.0));
        break;
    }
}

/* n random elements of dt in a new host array. Deterministic for a seed. */
static void *host_random(qf_dtype dt, int64_t n, uint64_t seed) {
    void *p = xmalloc((size_t)n * qf_dtype_size(dt));
    const int64_t chunk = 1 << 14;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < (n + chunk - 1) / chunk; c++) {
        uint64_t s = seed ^ ((uint64_t)c * 0xD1B54A32D192ED03ull);
        int64_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (int64_t i = c * chunk; i < end; i++)
            store_random(p, dt, i, &s);
    }
    return p;
}

/* A device copy of h rotated left by about `part` / `parts` of its length (256-byte aligned), so
 * that rotated sets share the statistics but not the contents. */
static void *dev_rotated(const void *h, size_t bytes, int part, int parts) {
    void *d;
    size_t shift = (bytes / (size_t)parts * (size_t)part) & ~(size_t)255;
    CUDA_OR_DIE(cudaMalloc(&d, bytes));
    CUDA_OR_DIE(cudaMemcpy(d, (const char *)h + shift, bytes - shift, cudaMemcpyHostToDevice));
    if (shift)
        CUDA_OR_DIE(cudaMemcpy((char *)d + bytes - shift, h, shift, cudaMemcpyHostToDevice));
    return d;
}

static void *dev_upload(const void *h, size_t bytes) {
    return dev_rotated(h, bytes, 0, 1);
}

/* How many sets of set_bytes to rotate between so that together they exceed twice the L2. */
static int rotation_count(const bench *b, double set_bytes) {
    int n = (int)(2.0 * (double)b->l2 / set_bytes) + 1;
    return n < 2 ? 2 : n > MAX_ROT ? MAX_ROT : n;
}

/* ==================================================================== timing */

typedef void (*launch_fn)(void *arg, int rot);

/* Median microseconds per launch: WARMUP launches, then o.iters batches of o.batch back-to-back
 * launches between two CUDA events on the legacy default stream, cycling through n_rot sets. */
static double time_launches(const bench *b, launch_fn fn, void *arg, int n_rot) {
    cudaEvent_t e0, e1;
    double *t = xmalloc((size_t)b->o.iters * sizeof *t);
    CUDA_OR_DIE(cudaEventCreate(&e0));
    CUDA_OR_DIE(cudaEventCreate(&e1));
    int k = 0;
    for (int i = 0; i < WARMUP; i++)
        fn(arg, k++ % n_rot);
    CUDA_OR_DIE(cudaDeviceSynchronize());
    for (int it = 0; it < b->o.iters; it++) {
        CUDA_OR_DIE(cudaEventRecord(e0, NULL));
        for (int j = 0; j < b->o.batch; j++)
            fn(arg, k++ % n_rot);
        CUDA_OR_DIE(cudaEventRecord(e1, NULL));
        CUDA_OR_DIE(cudaEventSynchronize(e1));
        float ms = 0.0f;
        CUDA_OR_DIE(cudaEventElapsedTime(&ms, e0, e1));
        t[it] = 1e3 * ms / b->o.batch;
    }
    CUDA_OR_DIE(cudaGetLastError());
    double med = median(t, b->o.iters);
    free(t);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return med;
}

/* ==================================================================== rows: table and CSV */

/* One result. Numbers that do not apply are NAN and print as empty CSV fields. */
typedef struct row {
    const char *kind, *recipe, *op, *norm, *dtype, *outputs;
    int64_t M, K, N;
    double bytes, flops, us, ratio_copy, ratio_lt;
    char note[200];
} row;

static row row_new(const char *kind, const char *recipe, const char *op) {
    row r = {.kind = kind, .recipe = recipe, .op = op, .norm = "", .dtype = "", .outputs = "",
             .bytes = NAN, .flops = NAN, .us = NAN, .ratio_copy = NAN, .ratio_lt = NAN};
    return r;
}

static void csv_num(FILE *f, double v, const char *fmt) {
    fputc(',', f);
    if (!isnan(v))
        fprintf(f, fmt, v);
}

static void csv_dim(FILE *f, int64_t v) {
    if (v > 0)
        fprintf(f, ",%lld", (long long)v);
    else
        fputc(',', f);
}

static void row_csv(FILE *f, const row *r, double tbps, double tflops) {
    fprintf(f, "%s,%s,%s,%s,%s,%s", r->kind, r->recipe, r->op, r->norm, r->dtype, r->outputs);
    csv_dim(f, r->M), csv_dim(f, r->K), csv_dim(f, r->N);
    csv_num(f, r->bytes, "%.0f"), csv_num(f, r->flops, "%.0f"), csv_num(f, r->us, "%.3f");
    csv_num(f, tbps, "%.4f"), csv_num(f, tflops, "%.2f");
    csv_num(f, r->ratio_copy, "%.4f"), csv_num(f, r->ratio_lt, "%.4f");
    /* speedup_eager, speedup_compile: bench_report.py; the note quoted (notes hold no '"') */
    fprintf(f, ",,,\"%s\"\n", r->note);
    fflush(f);
}

static void print_field(const char *fmt, double v) {
    if (isnan(v))
        printf(" %9s |", "");
    else
        printf(fmt, v);
}

/* Prints r as a table line and appends it to the CSV. */
static void row_emit(bench *b, const row *r) {
    double tbps = r->bytes / (r->us * 1e6), tflops = r->flops / (r->us * 1e6);
    char shape[48];
    int n = snprintf(shape, sizeof shape, "%lld x %lld", (long long)r->M, (long long)r->K);
    if (r->N > 0)
        snprintf(shape + n, sizeof shape - (size_t)n, " -> %lld", (long long)r->N);
    printf("| %-10s | %-12s | %-34s | %-9s | %-5s | %-18s | %-22s |", r->kind, r->recipe, r->op,
           r->norm, r->dtype, r->outputs, r->M > 0 ? shape : "");
    print_field(" %9.1f |", r->us), print_field(" %9.3f |", tbps);
    print_field(" %9.1f |", tflops), print_field(" %9.3f |", r->ratio_copy);
    print_field(" %9.3f |", r->ratio_lt);
    printf(" %s\n", r->note);
    fflush(stdout);
    row_csv(b->csv, r, tbps, tflops);
}

static void print_table_header(void) {
    printf("\n| %-10s | %-12s | %-34s | %-9s | %-5s | %-18s | %-22s | %9s | %9s | %9s | %9s | %9s "
           "| %s\n", "kind", "recipe", "op", "norm", "dtype", "outputs", "M x K (-> N)", "us",
           "TB/s", "TFLOP/s", "x copy", "x cuBLASLt", "note");
}

/* ==================================================================== header and CSV file */

/* Creates the parent directories of path (mkdir -p of its dirname). */
static void make_parents(const char *path) {
    char *p = strdup(path);
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            fprintf(stderr, "qfuse-bench: warning: cannot create %s: %s\n", p, strerror(errno));
        *s = '/';
    }
    free(p);
}

/* The CSV's comment lines: `# gpu=..., cuda=..., date=...` (read by bench_report.py). */
static void write_header(bench *b, const struct cudaDeviceProp *p) {
    int rt = 0, drv = 0, nv_major = 0, nv_minor = 0;
    cudaRuntimeGetVersion(&rt), cudaDriverGetVersion(&drv);
    qf_jit_nvrtc_version(&nv_major, &nv_minor);
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    char info[512];
    snprintf(info, sizeof info, "gpu=%s, cuda=%d.%d, driver=%d.%d, cublaslt=%zu, nvrtc=%d.%d, "
             "date=%s", p->name, rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10,
             cublasLtGetVersion(), nv_major, nv_minor, date);
    fprintf(b->csv, "# %s\n", info);
    fprintf(b->csv, "# sm=%d%d, sms=%d, l2_bytes=%zu, iters=%d, batch=%d, warmup=%d\n", p->major,
            p->minor, p->multiProcessorCount, b->l2, b->o.iters, b->o.batch, WARMUP);
    fprintf(b->csv, "# recipes=");
    for (int i = 0; i < qf_recipe_count; i++)
        fprintf(b->csv, "%s%s:%s", i ? ";" : "", qf_recipes[i].name,
                family_names[qf_recipes[i].family]);
    fprintf(b->csv, "\n# timing=median over iters batches of batch back-to-back launches between "
            "two CUDA events / batch; inputs rotated between sets exceeding 2x L2; random data\n");
    fprintf(b->csv, "kind,recipe,op,norm,dtype,outputs,M,K,N,bytes,flops,us_median,tbps,tflops,"
            "ratio_copy,ratio_cublaslt,speedup_eager,speedup_compile,note\n");
    printf("%s\nsm_%d%d, %d SMs, L2 %.1f MB; %s\n", info, p->major, p->minor,
           p->multiProcessorCount, b->l2 / 1e6, "times: median over batches of back-to-back "
           "launches between two CUDA events, divided by the batch size");
    printf("iters %d x batch %d after %d warm-up launches; CSV %s\n", b->o.iters, b->o.batch,
           WARMUP, b->o.csv);
}

static void bench_open(bench *b) {
    struct cudaDeviceProp p;
    CUDA_OR_DIE(cudaGetDeviceProperties(&p, 0));
    b->l2 = (size_t)p.l2CacheSize;
    make_parents(b->o.csv);
    if (!(b->csv = fopen(b->o.csv, "w"))) {
        fprintf(stderr, "qfuse-bench: cannot write %s: %s\n", b->o.csv, strerror(errno));
        exit(1);
    }
    LT_OR_DIE(cublasLtCreate(&b->lt));
    CUDA_OR_DIE(cudaMalloc(&b->lt_ws, LT_WORKSPACE));
    write_header(b, &p);
}

static void bench_close(bench *b) {
    fclose(b->csv);
    cudaFree(b->lt_ws);
    cublasLtDestroy(b->lt);
}

/* ==================================================================== ceiling: D2D copy */

typedef struct copy_run {
    void *src, *dst;
} copy_run;

static void copy_launch(void *arg, int rot) {
    (void)rot; /* 1 GiB is far beyond L2: no rotation needed */
    copy_run *c = arg;
    CUDA_OR_DIE(cudaMemcpyAsync(c->dst, c->src, COPY_BYTES, cudaMemcpyDeviceToDevice, NULL));
}

static void bench_copy(bench *b) {
    void *h = host_random(QF_DTYPE_BF16, (int64_t)(COPY_BYTES / 2), 7);
    copy_run c = {dev_upload(h, COPY_BYTES), NULL};
    free(h);
    CUDA_OR_DIE(cudaMalloc(&c.dst, COPY_BYTES));
    row r = row_new("ceiling", "", "copy_d2d");
    r.bytes = 2.0 * COPY_BYTES;
    r.us = time_launches(b, copy_launch, &c, 1);
    b->copy_tbps = r.bytes / (r.us * 1e6);
    r.ratio_copy = 1.0;
    snprintf(r.note, sizeof r.note, "cudaMemcpyAsync D2D of 1 GiB; bytes = read + written");
    row_emit(b, &r);
    cudaFree(c.src), cudaFree(c.dst);
}

/* ==================================================================== direct cuBLASLt */

/* A cuBLASLt matmul y[M, N] = A[M, K] W[N, K]^T, both K-major (TN), fp32 compute, bf16 out; the
 * same layout as qf_gemm_fp8 (Lt's A is our W seen as [K, N] column-major, Lt's B our A). */
typedef struct lt_gemm {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} lt_gemm;

/* Picks cuBLASLt's first heuristic algorithm for g within the workspace. */
static void lt_gemm_algo(lt_gemm *g, const bench *b) {
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const size_t ws = LT_WORKSPACE;
    LT_OR_DIE(cublasLtMatmulPreferenceCreate(&pref));
    LT_OR_DIE(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws));
    LT_OR_DIE(cublasLtMatmulAlgoGetHeuristic(b->lt, g->op, g->la, g->lb, g->lc, g->lc, pref, 1,
                                             &res, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (!found) {
        fprintf(stderr, "qfuse-bench: cuBLASLt has no algorithm for this GEMM\n");
        exit(1);
    }
    g->algo = res.algo;
}

/* in: CUDA_R_16BF or CUDA_R_8F_E4M3; sa, sb: device scale_inv of A and W (FP8 only). */
static void lt_gemm_init(lt_gemm *g, const bench *b, cudaDataType_t in, int64_t M, int64_t K,
                         int64_t N, const float *sa, const float *sb) {
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_OR_DIE(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_OR_DIE(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_OR_DIE(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (in == CUDA_R_8F_E4M3) { /* Lt's A is our W: its scale is W's */
        LT_OR_DIE(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb,
                                                 sizeof sb));
        LT_OR_DIE(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa,
                                                 sizeof sa));
    }
    LT_OR_DIE(cublasLtMatrixLayoutCreate(&g->la, in, (uint64_t)K, (uint64_t)N, K));
    LT_OR_DIE(cublasLtMatrixLayoutCreate(&g->lb, in, (uint64_t)K, (uint64_t)M, K));
    LT_OR_DIE(cublasLtMatrixLayoutCreate(&g->lc, CUDA_R_16BF, (uint64_t)N, (uint64_t)M, N));
    lt_gemm_algo(g, b);
}

static void lt_gemm_run(const lt_gemm *g, const bench *b, const void *a, const void *w, void *y) {
    const float alpha = 1.0f, beta = 0.0f;
    LT_OR_DIE(cublasLtMatmul(b->lt, g->op, &alpha, w, g->la, a, g->lb, &beta, y, g->lc, y, g->lc,
                             &g->algo, b->lt_ws, LT_WORKSPACE, NULL));
}

/* One untimed call; returns cuBLASLt's status instead of exiting, so that a configuration the
 * library rejects is reported in its row rather than ending the whole run. */
static cublasStatus_t lt_gemm_try(const lt_gemm *g, const bench *b, const void *a, const void *w,
                                  void *y) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t s = cublasLtMatmul(b->lt, g->op, &alpha, w, g->la, a, g->lb, &beta, y, g->lc,
                                      y, g->lc, &g->algo, b->lt_ws, LT_WORKSPACE, NULL);
    CUDA_OR_DIE(cudaDeviceSynchronize());
    return s;
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
} gemm_run;

static void gemm_alloc(gemm_run *g, const bench *b, qf_dtype dt, const int64_t s[3]) {
    *g = (gemm_run){.b = b, .M = s[0], .K = s[1], .N = s[2], .dt = dt};
    size_t es = qf_dtype_size(dt), ab = (size_t)(g->M * g->K) * es, wb = (size_t)(g->N * g->K) * es;
    g->n_rot = rotation_count(b, (double)(ab + wb));
    void *ha = host_random(dt, g->M * g->K, 11), *hw = host_random(dt, g->N * g->K, 13);
    for (int i = 0; i < g->n_rot; i++) {
        g->a[i] = dev_rotated(ha, ab, i, g->n_rot), g->w[i] = dev_rotated(hw, wb, i, g->n_rot);
        CUDA_OR_DIE(cudaMalloc(&g->y[i], (size_t)(g->M * g->N) * 2));
    }
    free(ha), free(hw);
    /* Each scale in its own allocation, as the tests have them (with W's scale 4 bytes after
     * A's, cuBLASLt answered "not supported" on an H200). */
    const float sa = 1.0f / 64.0f, sb = 1.0f / 32.0f;
    g->sa = dev_upload(&sa, sizeof sa);
    g->sb = dev_upload(&sb, sizeof sb);
    cudaDataType_t t = dt == QF_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
    lt_gemm_init(&g->lt, b, t, g->M, g->K, g->N, g->sa, g->sb);
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

/* qf_gemm_fp8 on operand set i. */
static qf_status gemm_qf_call(gemm_run *g, int i) {
    qf_tensor a = {.data = g->a[i], .dtype = QF_DTYPE_E4M3, .ndim = 2, .dims = {g->M, g->K}};
    qf_tensor w = {.data = g->w[i], .dtype = QF_DTYPE_E4M3, .ndim = 2, .dims = {g->N, g->K}};
    qf_tensor y = {.data = g->y[i], .dtype = QF_DTYPE_BF16, .ndim = 2, .dims = {g->M, g->N}};
    return qf_gemm_fp8(g->b->ctx, &a, g->sa, &w, g->sb, NULL, &y, NULL);
}

static void gemm_qf_launch(void *arg, int i) {
    QF_OR_DIE(gemm_qf_call(arg, i));
}

static row gemm_row(const gemm_run *g, const char *kind, const char *op) {
    row r = row_new(kind, "", op);
    r.dtype = qf_dtype_name(g->dt);
    r.M = g->M, r.K = g->K, r.N = g->N;
    size_t es = qf_dtype_size(g->dt);
    r.bytes = (double)(g->M * g->K + g->N * g->K) * (double)es + (double)(g->M * g->N) * 2.0;
    r.flops = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    return r;
}

/* Index of the first selected recipe (--recipe) of family f in the registry, -1 when none. */
static int first_recipe_index(const bench *b, qf_family f) {
    for (int i = 0; i < qf_recipe_count; i++)
        if (qf_recipes[i].family == f && tool_recipe_selected(&b->o.recipes, i))
            return i;
    return -1;
}

/* Name of the first recipe of family f, "" when none (qf_gemm_fp8 is per-tensor FP8's GEMM). */
static const char *first_recipe_of(const bench *b, qf_family f) {
    int i = first_recipe_index(b, f);
    return i < 0 ? "" : qf_recipes[i].name;
}

/* One GEMM shape: bf16 and FP8 cuBLASLt called directly, then qf_gemm_fp8. Returns the bf16
 * microseconds (the reference of the block-scaled GEMM rows). */
static double bench_gemm_shape(bench *b, const int64_t s[3]) {
    gemm_run g;
    gemm_alloc(&g, b, QF_DTYPE_BF16, s);
    row bf = gemm_row(&g, "ceiling", "cublaslt_bf16_gemm");
    bf.us = time_launches(b, gemm_lt_launch, &g, g.n_rot);
    snprintf(bf.note, sizeof bf.note, "cuBLASLt bf16 TN; fp32 compute; bf16 out");
    row_emit(b, &bf);
    gemm_free(&g);
    gemm_alloc(&g, b, QF_DTYPE_E4M3, s);
    row lt = gemm_row(&g, "ceiling", "cublaslt_fp8_gemm");
    cublasStatus_t st = lt_gemm_try(&g.lt, b, g.a[0], g.w[0], g.y[0]);
    if (st == CUBLAS_STATUS_SUCCESS) {
        lt.us = time_launches(b, gemm_lt_launch, &g, g.n_rot);
        snprintf(lt.note, sizeof lt.note, "cuBLASLt E4M3 TN alone; per-tensor scale pointers; "
                 "x%.3f of bf16", bf.us / lt.us);
        row_emit(b, &lt);
    } else {
        fprintf(stderr, "qfuse-bench: direct cuBLASLt FP8 call failed (%s); no FP8 ceiling row\n",
                cublasLtGetStatusString(st));
    }
    row q = gemm_row(&g, "qfuse", "gemm_fp8");
    q.recipe = first_recipe_of(b, QF_FAMILY_FP8_DELAYED);
    qf_status qs = gemm_qf_call(&g, 0); /* one untimed call: a failure skips the row, not the run */
    if (qs == QF_OK) {
        q.us = time_launches(b, gemm_qf_launch, &g, g.n_rot);
        q.ratio_lt = st == CUBLAS_STATUS_SUCCESS ? lt.us / q.us : NAN;
        snprintf(q.note, sizeof q.note, "qf_gemm_fp8; x%.3f of bf16 cuBLASLt", bf.us / q.us);
        row_emit(b, &q);
    } else {
        fprintf(stderr, "qfuse-bench: qf_gemm_fp8 failed (%s: %s); no qf_gemm_fp8 row\n",
                qf_status_name(qs), qf_last_error());
    }
    gemm_free(&g);
    return bf.us;
}

/* ==================================================================== norm + quantize rows */

/* Rotated inputs of one (shape, x dtype): x sets, gamma/beta in x's dtype, the scale. */
typedef struct input_set {
    int64_t M, K;
    qf_dtype dt;
    int n_rot;
    qf_tensor x[MAX_ROT];
    qf_tensor gamma, beta;
    float *scale;               /* device [1] */
} input_set;

static qf_tensor tensor_2d(void *d, qf_dtype dt, int64_t r, int64_t c) {
    qf_tensor t = {.data = d, .dtype = dt, .ndim = 2, .dims = {r, c}};
    return t;
}

static qf_tensor tensor_1d(void *d, qf_dtype dt, int64_t n) {
    qf_tensor t = {.data = d, .dtype = dt, .ndim = 1, .dims = {n}};
    return t;
}

static void input_alloc(input_set *in, const bench *b, qf_dtype dt, int64_t M, int64_t K) {
    *in = (input_set){.M = M, .K = K, .dt = dt};
    size_t xb = (size_t)(M * K) * qf_dtype_size(dt), gb = (size_t)K * qf_dtype_size(dt);
    in->n_rot = rotation_count(b, (double)xb);
    void *h = host_random(dt, M * K, 21);
    for (int i = 0; i < in->n_rot; i++)
        in->x[i] = tensor_2d(dev_rotated(h, xb, i, in->n_rot), dt, M, K);
    free(h);
    void *hg = host_random(dt, 2 * K, 23); /* gamma, beta ~ N(0, 1): values do not matter here */
    in->gamma = tensor_1d(dev_upload(hg, gb), dt, K);
    in->beta = tensor_1d(dev_upload((char *)hg + gb, gb), dt, K);
    free(hg);
    const float one = 1.0f;
    in->scale = dev_upload(&one, sizeof one);
}

static void input_free(input_set *in) {
    for (int i = 0; i < in->n_rot; i++)
        cudaFree(in->x[i].data);
    cudaFree(in->gamma.data), cudaFree(in->beta.data), cudaFree(in->scale);
}

/* Outputs of one launch exactly as the recipe's fake-shape function describes them. */
typedef struct out_set {
    qf_shape sh[MAX_OUT];
    void *buf[MAX_OUT];
    int n;
} out_set;

static void out_alloc(out_set *o, const qf_recipe *r, const qf_shape_query *q) {
    o->n = r->shapes(q, o->sh, MAX_OUT);
    if (o->n < 0) {
        fprintf(stderr, "qfuse-bench: shape function of %s rejected op %d M=%lld K=%lld\n",
                r->name, (int)q->op, (long long)q->M, (long long)q->K);
        exit(1);
    }
    for (int i = 0; i < o->n; i++) {
        CUDA_OR_DIE(cudaMalloc(&o->buf[i], o->sh[i].bytes));
        CUDA_OR_DIE(cudaMemset(o->buf[i], 0, o->sh[i].bytes));
    }
}

static void out_free(out_set *o) {
    for (int i = 0; i < o->n; i++)
        cudaFree(o->buf[i]);
    o->n = 0;
}

/* The output called name as a tensor; data NULL when the op does not produce it. */
static qf_tensor out_tensor(const out_set *o, const char *name) {
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->sh[i].name, name) == 0) {
            qf_tensor t = {.data = o->buf[i], .dtype = o->sh[i].dtype, .ndim = o->sh[i].ndim};
            memcpy(t.dims, o->sh[i].dims, sizeof o->sh[i].dims);
            return t;
        }
    qf_tensor none = {0};
    return none;
}

/* Arguments of the per-tensor FP8 ops (qf_norm_quantize, qf_quantize). A new family adds its own
 * struct here and a case in nq_bind and nq_launch. */
typedef struct fp8_args {
    qf_fp8_out out;
    qf_tensor mu, rsigma;
} fp8_args;

/* Arguments of the MXFP8 ops (qf_norm_quantize_mxfp8, qf_quantize_mxfp8); compact scales. */
typedef struct mx_args {
    qf_mx_out out;
    qf_tensor mu, rsigma;
} mx_args;

/* Arguments of the NVFP4 ops (qf_norm_quantize_nvfp4, qf_quantize_nvfp4); compact scales. */
typedef struct nv_args {
    qf_nv_out out;
    qf_tensor mu, rsigma;
} nv_args;

/* One norm + quantize (or weight quantize) configuration with its rotated outputs. */
typedef struct nq_run {
    bench *b;
    const qf_recipe *r;
    const input_set *in;
    qf_op op;
    qf_norm norm;
    unsigned outputs;
    out_set o[MAX_ROT];
    fp8_args fp8[MAX_ROT];
    mx_args mx[MAX_ROT];
    nv_args nv[MAX_ROT];
} nq_run;

static void die_family(const qf_recipe *r) {
    fprintf(stderr, "qfuse-bench: not implemented scaling mode: family %d of recipe %s\n",
            (int)r->family, r->name);
    exit(1);
}

/* Families this tool can run; the loop over recipes skips the others (with a note). */
static int family_supported(qf_family f) {
    switch (f) {
    case QF_FAMILY_FP8_DELAYED:
    case QF_FAMILY_MXFP8:
    case QF_FAMILY_NVFP4:
        return 1;
    default:
        return 0;
    }
}

/* 1 when registry recipe ri is benchmarked: a family with cases, selected by --recipe. */
static int recipe_benched(const bench *b, int ri) {
    return family_supported(qf_recipes[ri].family) && tool_recipe_selected(&b->o.recipes, ri);
}

/* Points the per-tensor FP8 arguments at the buffers of o, by output name. */
static void fp8_bind(fp8_args *a, const out_set *o) {
    a->out.rowwise = out_tensor(o, "rowwise_data");
    a->out.columnwise = out_tensor(o, "columnwise_data");
    a->out.amax = out_tensor(o, "amax");
    a->out.scale_inv = out_tensor(o, "scale_inv");
    a->mu = out_tensor(o, "mu");
    a->rsigma = out_tensor(o, "rsigma");
}

/* Points the MXFP8 arguments at the buffers of o, by output name. */
static void mx_bind(mx_args *a, const out_set *o) {
    a->out.rowwise = out_tensor(o, "rowwise_data");
    a->out.rowwise_scale_inv = out_tensor(o, "rowwise_scale_inv");
    a->out.columnwise = out_tensor(o, "columnwise_data");
    a->out.columnwise_scale_inv = out_tensor(o, "columnwise_scale_inv");
    a->out.layout = QF_SCALE_LAYOUT_COMPACT;
    a->mu = out_tensor(o, "mu");
    a->rsigma = out_tensor(o, "rsigma");
}

/* Points the NVFP4 arguments at the buffers of o, by output name. */
static void nv_bind(nv_args *a, const out_set *o) {
    a->out.rowwise = out_tensor(o, "rowwise_data");
    a->out.rowwise_scale_inv = out_tensor(o, "rowwise_scale_inv");
    a->out.columnwise = out_tensor(o, "columnwise_data");
    a->out.columnwise_scale_inv = out_tensor(o, "columnwise_scale_inv");
    a->out.amax_rowwise = out_tensor(o, "amax_rowwise");
    a->out.amax_columnwise = out_tensor(o, "amax_columnwise");
    a->out.layout = QF_SCALE_LAYOUT_COMPACT;
    a->mu = out_tensor(o, "mu");
    a->rsigma = out_tensor(o, "rsigma");
}

/* Points the family's API arguments of set i at the buffers of q->o[i]. */
static void nq_bind(nq_run *q, int i) {
    switch (q->r->family) {
    case QF_FAMILY_FP8_DELAYED:
        fp8_bind(&q->fp8[i], &q->o[i]);
        break;
    case QF_FAMILY_MXFP8:
        mx_bind(&q->mx[i], &q->o[i]);
        break;
    case QF_FAMILY_NVFP4:
        nv_bind(&q->nv[i], &q->o[i]);
        break;
    default:
        die_family(q->r);
    }
}

static void nq_launch(void *arg, int i) {
    nq_run *q = arg;
    const input_set *in = q->in;
    switch (q->r->family) {
    case QF_FAMILY_FP8_DELAYED: {
        fp8_args *a = &q->fp8[i];
        if (q->op == QF_OP_QUANTIZE)
            QF_OR_DIE(qf_quantize(q->b->ctx, q->r->name, QF_ROLE_WEIGHT, &in->x[i], in->scale,
                                  &a->out, NULL));
        else
            QF_OR_DIE(qf_norm_quantize(q->b->ctx, q->r->name, q->norm, 0, &in->x[i], &in->gamma,
                                       q->norm == QF_NORM_LAYERNORM ? &in->beta : NULL, NORM_EPS,
                                       in->scale, &a->out, &a->mu, &a->rsigma, NULL));
        break;
    }
    case QF_FAMILY_MXFP8: {
        mx_args *a = &q->mx[i];
        if (q->op == QF_OP_QUANTIZE)
            QF_OR_DIE(qf_quantize_mxfp8(q->b->ctx, q->r->name, QF_ROLE_WEIGHT, &in->x[i], &a->out,
                                        NULL));
        else
            QF_OR_DIE(qf_norm_quantize_mxfp8(q->b->ctx, q->r->name, q->norm, 0, &in->x[i],
                                             &in->gamma,
                                             q->norm == QF_NORM_LAYERNORM ? &in->beta : NULL,
                                             NORM_EPS, &a->out, &a->mu, &a->rsigma, NULL));
        break;
    }
    case QF_FAMILY_NVFP4: { /* weights: 16x16 tiles when the recipe says so, never SR */
        nv_args *a = &q->nv[i];
        if (q->op == QF_OP_QUANTIZE)
            QF_OR_DIE(qf_quantize_nvfp4(q->b->ctx, q->r->name, QF_ROLE_WEIGHT, &in->x[i], NULL,
                                        &a->out, NULL));
        else
            QF_OR_DIE(qf_norm_quantize_nvfp4(q->b->ctx, q->r->name, q->norm, 0, &in->x[i],
                                             &in->gamma,
                                             q->norm == QF_NORM_LAYERNORM ? &in->beta : NULL,
                                             NORM_EPS, &a->out, &a->mu, &a->rsigma, NULL));
        break;
    }
    default:
        die_family(q->r);
    }
}

/* Bytes one launch moves: x read, gamma (and beta) read, every output written. */
static double nq_bytes(const nq_run *q) {
    const input_set *in = q->in;
    double gb = (double)in->K * (double)qf_dtype_size(in->dt);
    double bytes = (double)(in->M * in->K) * (double)qf_dtype_size(in->dt);
    if (q->op == QF_OP_NORM_QUANTIZE)
        bytes += q->norm == QF_NORM_LAYERNORM ? 2.0 * gb : gb;
    for (int i = 0; i < q->o[0].n; i++)
        bytes += (double)q->o[0].sh[i].bytes;
    return bytes;
}

static const char *norm_name(qf_norm n) {
    return n == QF_NORM_LAYERNORM ? "layernorm" : n == QF_NORM_RMSNORM ? "rmsnorm" : "none";
}

static const char *outputs_name(unsigned outputs) {
    return outputs == QF_OUT_ROWWISE ? "rowwise" : "rowwise+columnwise";
}

static void bench_nq(bench *b, const input_set *in, const qf_recipe *r, qf_op op,
                     qf_norm norm, unsigned outputs) {
    nq_run *q = calloc(1, sizeof *q); /* ~64 KiB: not on the stack */
    if (!q)
        exit(1);
    q->b = b, q->r = r, q->in = in, q->op = op, q->norm = norm, q->outputs = outputs;
    qf_shape_query sq = {.op = op, .role = op == QF_OP_QUANTIZE ? QF_ROLE_WEIGHT : QF_ROLE_INPUT,
                         .norm = norm, .outputs = outputs, .M = in->M, .K = in->K};
    for (int i = 0; i < in->n_rot; i++) {
        out_alloc(&q->o[i], r, &sq);
        nq_bind(q, i);
    }
    row w = row_new("qfuse", r->name, op == QF_OP_QUANTIZE ? "quantize_weight" : "norm_quantize");
    w.norm = norm_name(norm), w.dtype = qf_dtype_name(in->dt), w.outputs = outputs_name(outputs);
    w.M = in->M, w.K = in->K;
    w.bytes = nq_bytes(q);
    w.us = time_launches(b, nq_launch, q, in->n_rot);
    w.ratio_copy = w.bytes / (w.us * 1e6) / b->copy_tbps;
    snprintf(w.note, sizeof w.note, "%d input sets rotated", in->n_rot);
    row_emit(b, &w);
    for (int i = 0; i < in->n_rot; i++)
        out_free(&q->o[i]);
    free(q);
}

/* Every op of recipe r on the inputs in. */
static void bench_recipe_ops(bench *b, const input_set *in, const qf_recipe *r) {
    static const unsigned outs[] = {QF_OUT_ROWWISE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE};
    for (qf_norm nm = QF_NORM_LAYERNORM; nm <= QF_NORM_RMSNORM; nm++)
        for (int o = 0; o < 2; o++)
            bench_nq(b, in, r, QF_OP_NORM_QUANTIZE, nm, outs[o]);
    for (int o = 0; o < 2; o++)
        bench_nq(b, in, r, QF_OP_QUANTIZE, QF_NORM_NONE, outs[o]);
}

static void bench_quantizers(bench *b) {
    const int64_t(*shapes)[2] = b->o.quick ? nq_shapes_quick : nq_shapes_full;
    int n = b->o.quick ? 1 : (int)(sizeof nq_shapes_full / sizeof nq_shapes_full[0]);
    for (int s = 0; s < n; s++)
        for (size_t d = 0; d < sizeof x_dtypes / sizeof x_dtypes[0]; d++) {
            if (b->o.dtype >= 0 && (int)x_dtypes[d] != b->o.dtype)
                continue;
            input_set in;
            input_alloc(&in, b, x_dtypes[d], shapes[s][0], shapes[s][1]);
            for (int ri = 0; ri < qf_recipe_count; ri++)
                if (recipe_benched(b, ri))
                    bench_recipe_ops(b, &in, &qf_recipes[ri]);
            input_free(&in);
        }
    for (int ri = 0; ri < qf_recipe_count; ri++)
        if (!family_supported(qf_recipes[ri].family))
            printf("recipe %s: family %d has no benchmark case yet; skipped\n", qf_recipes[ri].name,
                   (int)qf_recipes[ri].family);
}

/* ==================================================================== block-scaled GEMM rows */

/* Rotated operands of one block-scaled GEMM (MXFP8 or NVFP4), laid out by the recipe's fake
 * shapes: A the rowwise copy of an activation [M, K], B of a weight [N, K], y [M, N]. Element
 * bytes are random with bit 3 clear (never an E4M3 NaN); every block scale is 1.0 (E8M0 127,
 * E4M3 0x38) and every NVFP4 amax 2688, so alpha = 1. */
typedef struct block_gemm {
    bench *b;
    const qf_recipe *r;
    int64_t M, K, N;
    int n_rot;
    out_set a[MAX_ROT], w[MAX_ROT], y[MAX_ROT];
} block_gemm;

/* Fills the buffers of o as the block_gemm comment says. */
static void block_gemm_fill(out_set *o, qf_family f, uint64_t seed) {
    for (int i = 0; i < o->n; i++) {
        size_t n = o->sh[i].bytes;
        if (strcmp(o->sh[i].name, "rowwise_data") == 0) {
            uint8_t *h = xmalloc(n);
            for (size_t j = 0; j < n; j++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                h[j] = (uint8_t)(seed >> 56) & 0xF7u;
            }
            CUDA_OR_DIE(cudaMemcpy(o->buf[i], h, n, cudaMemcpyHostToDevice));
            free(h);
        } else if (strcmp(o->sh[i].name, "rowwise_scale_inv") == 0) {
            CUDA_OR_DIE(cudaMemset(o->buf[i], f == QF_FAMILY_MXFP8 ? 127 : 0x38, n));
        } else if (strncmp(o->sh[i].name, "amax", 4) == 0) {
            const float amax = 2688.0f;
            CUDA_OR_DIE(cudaMemcpy(o->buf[i], &amax, sizeof amax, cudaMemcpyHostToDevice));
        }
    }
}

static void block_gemm_launch(void *arg, int i) {
    block_gemm *g = arg;
    qf_tensor a = out_tensor(&g->a[i], "rowwise_data");
    qf_tensor as = out_tensor(&g->a[i], "rowwise_scale_inv");
    qf_tensor w = out_tensor(&g->w[i], "rowwise_data");
    qf_tensor ws = out_tensor(&g->w[i], "rowwise_scale_inv");
    qf_tensor y = out_tensor(&g->y[i], "y");
    if (g->r->family == QF_FAMILY_MXFP8) {
        QF_OR_DIE(qf_gemm_mxfp8(g->b->ctx, g->r->name, &a, &as, &w, &ws, QF_SCALE_LAYOUT_COMPACT,
                                NULL, &y, NULL));
    } else {
        qf_tensor aa = out_tensor(&g->a[i], "amax_rowwise");
        qf_tensor wa = out_tensor(&g->w[i], "amax_rowwise");
        QF_OR_DIE(qf_gemm_nvfp4(g->b->ctx, g->r->name, &a, &as, &aa, &w, &ws, &wa,
                                QF_SCALE_LAYOUT_COMPACT, NULL, &y, NULL));
    }
}

/* The generated block-scaled GEMM of the first MXFP8 and NVFP4 recipes at shape s, next to the
 * bf16 cuBLASLt time bf_us of the same run. On Blackwell these recipes go to cuBLASLt (swizzled
 * scales) and this section is skipped. */
static void bench_block_gemms(bench *b, const int64_t s[3], double bf_us) {
    static const qf_family fams[] = {QF_FAMILY_MXFP8, QF_FAMILY_NVFP4};
    if (qf_ctx_arch(b->ctx) >= 100)
        return;
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        int ri = first_recipe_index(b, fams[f]);
        if (ri < 0)
            continue;
        block_gemm *g = calloc(1, sizeof *g);
        if (!g)
            exit(1);
        *g = (block_gemm){.b = b, .r = &qf_recipes[ri], .M = s[0], .K = s[1], .N = s[2]};
        qf_shape_query qa = {.op = QF_OP_QUANTIZE, .role = QF_ROLE_INPUT,
                             .outputs = QF_OUT_ROWWISE, .M = g->M, .K = g->K};
        qf_shape_query qw = qa, qy = {.op = QF_OP_GEMM, .M = g->M, .N = g->N, .K = g->K};
        qw.role = QF_ROLE_WEIGHT, qw.M = g->N;
        double set_bytes = (double)(g->M + g->N) * (double)g->K; /* upper bound: 1 byte each */
        g->n_rot = rotation_count(b, set_bytes);
        for (int i = 0; i < g->n_rot; i++) {
            out_alloc(&g->a[i], g->r, &qa), out_alloc(&g->w[i], g->r, &qw);
            out_alloc(&g->y[i], g->r, &qy);
            block_gemm_fill(&g->a[i], fams[f], 31 + (uint64_t)i);
            block_gemm_fill(&g->w[i], fams[f], 37 + (uint64_t)i);
        }
        row q = row_new("qfuse", g->r->name, fams[f] == QF_FAMILY_MXFP8 ? "gemm_mxfp8"
                                                                          : "gemm_nvfp4");
        q.dtype = qf_dtype_name(g->r->fmt[QF_ROLE_INPUT]);
        q.M = g->M, q.K = g->K, q.N = g->N;
        q.bytes = 0.0;
        for (int j = 0; j < g->a[0].n; j++)
            q.bytes += (double)g->a[0].sh[j].bytes;
        for (int j = 0; j < g->w[0].n; j++)
            q.bytes += (double)g->w[0].sh[j].bytes;
        q.bytes += (double)g->y[0].sh[0].bytes;
        q.flops = 2.0 * (double)g->M * (double)g->N * (double)g->K;
        q.us = time_launches(b, block_gemm_launch, g, g->n_rot);
        snprintf(q.note, sizeof q.note, "generated Hopper kernel, compact scales; x%.3f of bf16 "
                 "cuBLASLt in this run", bf_us / q.us);
        row_emit(b, &q);
        for (int i = 0; i < g->n_rot; i++)
            out_free(&g->a[i]), out_free(&g->w[i]), out_free(&g->y[i]);
        free(g);
    }
}

/* ==================================================================== JIT rows */

/* Small zeroed device buffers for one call of any kernel (the lookup is what is timed). */
typedef struct probe {
    void *x, *gamma, *beta, *row, *col, *amax, *sinv, *mu, *rsigma, *scale, *hist, *fmt;
} probe;

static void *dev_zero(size_t bytes) {
    void *d;
    CUDA_OR_DIE(cudaMalloc(&d, bytes));
    CUDA_OR_DIE(cudaMemset(d, 0, bytes));
    return d;
}

static void probe_alloc(probe *p, int H) {
    size_t mk = (size_t)PROBE_M * PROBE_K;
    p->x = dev_zero(4 * mk), p->gamma = dev_zero(4 * PROBE_K), p->beta = dev_zero(4 * PROBE_K);
    p->row = dev_zero(mk), p->col = dev_zero(mk), p->amax = dev_zero(4), p->sinv = dev_zero(4);
    p->mu = dev_zero(4 * PROBE_M), p->rsigma = dev_zero(4 * PROBE_M);
    p->hist = dev_zero(4 * (size_t)H);
    const float one = 1.0f;
    const uint8_t fmt = QF_DTYPE_E4M3;
    p->scale = dev_upload(&one, sizeof one), p->fmt = dev_upload(&fmt, 1);
}

static void probe_free(probe *p) {
    void *all[] = {p->x, p->gamma, p->beta, p->row, p->col, p->amax, p->sinv, p->mu, p->rsigma,
                   p->scale, p->hist, p->fmt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cudaFree(all[i]);
}

/* The probe buffer that holds the output called name. */
static void *probe_buffer(const probe *p, const char *name) {
    static const char *const names[] = {"rowwise_data", "columnwise_data", "amax", "scale_inv",
                                        "mu", "rsigma"};
    void *const bufs[] = {p->row, p->col, p->amax, p->sinv, p->mu, p->rsigma};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0)
            return bufs[i];
    fprintf(stderr, "qfuse-bench: no probe buffer for output '%s'\n", name);
    exit(1);
}

/* One call of the per-tensor FP8 op that runs kernel k (default instance: rowwise only, gamma
 * in x's dtype), so that ctx looks k up. */
static void probe_call_fp8(qf_ctx_t *ctx, const qf_recipe *r, const qf_kernel_entry *k,
                           const probe *p) {
    if (k->op == QF_OP_SCALE_UPDATE) {
        QF_OR_DIE(qf_fp8_scale_update(ctx, r->name, 1, r->amax_history_len, p->amax, p->hist,
                                      p->scale, p->sinv, p->fmt, NULL));
        return;
    }
    qf_shape_query q = {.op = k->op, .role = k->role, .norm = k->norm, .outputs = QF_OUT_ROWWISE,
                        .M = PROBE_M, .K = PROBE_K};
    out_set o;
    o.n = r->shapes(&q, o.sh, MAX_OUT);
    for (int i = 0; i < o.n; i++)
        o.buf[i] = probe_buffer(p, o.sh[i].name);
    fp8_args a;
    fp8_bind(&a, &o);
    qf_tensor x = tensor_2d(p->x, k->in_dtype, PROBE_M, PROBE_K);
    qf_tensor g = tensor_1d(p->gamma, k->in_dtype, PROBE_K);
    qf_tensor bt = tensor_1d(p->beta, k->in_dtype, PROBE_K);
    if (k->op == QF_OP_QUANTIZE)
        QF_OR_DIE(qf_quantize(ctx, r->name, k->role, &x, p->scale, &a.out, NULL));
    else
        QF_OR_DIE(qf_norm_quantize(ctx, r->name, k->norm, k->zero_centered_gamma, &x, &g,
                                   k->norm == QF_NORM_LAYERNORM ? &bt : NULL, NORM_EPS, p->scale,
                                   &a.out, &a.mu, &a.rsigma, NULL));
}

static void probe_call(qf_ctx_t *ctx, const qf_recipe *r, const qf_kernel_entry *k,
                       const probe *p) {
    switch (r->family) {
    case QF_FAMILY_FP8_DELAYED:
        probe_call_fp8(ctx, r, k, p);
        break;
    default:
        die_family(r);
    }
    CUDA_OR_DIE(cudaDeviceSynchronize());
}

/* Cold compile of k with NVRTC for arch, bypassing every cache; median ms over reps. The CUBIN
 * of the last rep is returned (caller frees) to seed the disk cache. */
static double jit_cold(const qf_kernel_entry *k, int arch, int reps, void **cubin, size_t *size) {
    qf_kernel_instance inst = qf_kernel_instance_default(k);
    char store[QF_KERNEL_MAX_EXTRA][48], archbuf[64];
    const char *extra[QF_KERNEL_MAX_EXTRA], *opts[QF_JIT_MAX_OPTIONS];
    int ne = qf_kernel_extra_options(k, &inst, store, extra);
    int no = qf_jit_options(arch, extra, ne, opts, archbuf);
    double t[8];
    char *src = qf_kernel_text(k);
    if (!src)
        QF_OR_DIE(qf_set_error(QF_ERR_OUT_OF_MEMORY, "out of host memory"));
    *cubin = NULL;
    for (int i = 0; i < reps; i++) {
        free(*cubin);
        double t0 = now_ms();
        QF_OR_DIE(qf_jit_compile(k->name, src, qf_nvrtc_header_names, qf_nvrtc_headers,
                                 qf_nvrtc_header_count, opts, no, cubin, size));
        t[i] = now_ms() - t0;
    }
    free(src);
    return median(t, reps);
}

/* Disk-cache hit in a fresh context (first call) and in-memory hit (second call), median ms over
 * reps; *how reports a first call not served from disk. */
static void jit_warm(const qf_recipe *r, const qf_kernel_entry *k, const probe *p,
                     int reps, double *disk_ms, double *mem_ms, const char **how) {
    static const char *const src[] = {"compiled", "memory", "disk"};
    double td[8], tm[8];
    *how = "disk";
    for (int i = 0; i < reps; i++) {
        qf_ctx_t *ctx = NULL;
        QF_OR_DIE(qf_ctx_init(&ctx, 0));
        probe_call(ctx, r, k, p);
        const qf_kernel_info *ki = qf_ctx_last_kernel(ctx);
        td[i] = ki->ms;
        if (ki->source != QF_KSRC_DISK)
            *how = src[ki->source];
        probe_call(ctx, r, k, p);
        tm[i] = qf_ctx_last_kernel(ctx)->ms;
        qf_ctx_free(ctx);
    }
    *disk_ms = median(td, reps), *mem_ms = median(tm, reps);
}

static void jit_emit(bench *b, const char *kind, const qf_kernel_entry *k, double ms,
                     const char *note) {
    row r = row_new(kind, k->recipe->name, k->name);
    r.norm = norm_name(k->norm), r.dtype = qf_dtype_name(k->in_dtype);
    r.outputs = k->op == QF_OP_SCALE_UPDATE ? "" : "rowwise";
    r.us = 1e3 * ms;
    snprintf(r.note, sizeof r.note, "%s", note);
    row_emit(b, &r);
}

/* One kernel: cold compile, then store it in the temporary cache and time the warm lookups. */
static void bench_jit_kernel(bench *b, const qf_kernel_entry *k, const probe *p) {
    const qf_recipe *r = k->recipe;
    int arch = qf_ctx_arch(b->ctx), reps_cold = b->o.quick ? 1 : 3, reps_warm = 5;
    void *cubin;
    size_t size;
    double cold = jit_cold(k, arch, reps_cold, &cubin, &size);
    qf_kernel_instance inst = qf_kernel_instance_default(k);
    char key[QF_KEY_HEX_LEN + 1], note[160];
    qf_kernel_key(r, k, &inst, qf_nvrtc_header_names, qf_nvrtc_headers, qf_nvrtc_header_count,
                  arch, key);
    qf_cache_store(k->name, key, arch, cubin, size);
    free(cubin);
    double disk, mem;
    const char *how;
    jit_warm(r, k, p, reps_warm, &disk, &mem, &how);
    snprintf(note, sizeof note, "NVRTC compile for sm_%d; %zu-byte CUBIN; median of %d", arch,
             size, reps_cold);
    jit_emit(b, "jit_cold", k, cold, note);
    snprintf(note, sizeof note, "first call in a fresh context: served from %s (key + cache read + "
             "cuModuleLoadData); median of %d", how, reps_warm);
    jit_emit(b, "jit_disk", k, disk, note);
    snprintf(note, sizeof note, "second call: in-memory table; median of %d", reps_warm);
    jit_emit(b, "jit_memory", k, mem, note);
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4096];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* JIT numbers of every kernel of the first recipe this tool can run, with QFUSE_CACHE_DIR
 * pointed at a fresh temporary directory (restored afterwards). */
static void bench_jit(bench *b) {
    int ri = 0;
    while (ri < qf_recipe_count && !recipe_benched(b, ri))
        ri++;
    if (ri == qf_recipe_count)
        return;
    char dir[] = "/tmp/qfuse-bench-cache-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "qfuse-bench: mkdtemp: %s; JIT rows skipped\n", strerror(errno));
        return;
    }
    const char *old = getenv("QFUSE_CACHE_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("QFUSE_CACHE_DIR", dir, 1);
    qf_cache_reset();
    probe p;
    probe_alloc(&p, qf_recipes[ri].amax_history_len);
    int n = 0;
    for (int i = 0; i < qf_kernel_count; i++)
        if (qf_kernels[i].recipe == &qf_recipes[ri] && (!b->o.quick || n++ < 2))
            bench_jit_kernel(b, &qf_kernels[i], &p);
    probe_free(&p);
    if (saved)
        setenv("QFUSE_CACHE_DIR", saved, 1);
    else
        unsetenv("QFUSE_CACHE_DIR");
    free(saved);
    qf_cache_reset();
    remove_dir(dir);
}

/* ==================================================================== main */

static void usage(FILE *f) {
    fprintf(f, "usage: qfuse-bench [--csv FILE] [--quick] [--iters N] [--batch N]\n"
               "                   [--recipe NAME]... [--dtype bf16|fp16|fp32] [--section S]...\n"
               "Times every qfuse op at the shapes of real models' layers against ceilings\n"
               "measured in the same run (D2D copy, cuBLASLt bf16 and FP8 GEMMs), the\n"
               "generated MXFP8 and NVFP4 GEMMs next to bf16 cuBLASLt, and reports\n"
               "bytes, FLOPs, median microseconds, TB/s, TFLOP/s and the ratios; then the JIT:\n"
               "cold NVRTC compile, disk-cache load and in-memory lookup of every kernel.\n"
               "  --csv FILE  CSV output (default out/bench/qfuse.csv)\n"
               "  --quick     one shape per section, 10 iterations (smoke run)\n"
               "  --iters N   timed batches per row, median reported (default 50)\n"
               "  --batch N   back-to-back launches per timed batch (default 10)\n"
               "  --recipe R  only recipe R (repeatable; default: every recipe)\n"
               "  --dtype D   only norm + quantize rows with x in dtype D\n"
               "  --section S only section S: quant (norm + quantize), gemm or jit (repeatable;\n"
               "              default: all; the copy ceiling always runs)\n"
               "CSV columns: kind,recipe,op,norm,dtype,outputs,M,K,N,bytes,flops,us_median,tbps,\n"
               "tflops,ratio_copy,ratio_cublaslt,speedup_eager,speedup_compile,note (the speedups\n"
               "are filled by scripts/bench_report.py). Without a GPU it exits 0.\n");
}

/* A count option in 1..1000000, or -1 with a message naming the option. */
static int parse_count(const char *opt, const char *v) {
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < 1 || n > 1000000) {
        fprintf(stderr, "qfuse-bench: %s '%s': expected an integer in 1..1000000\n", opt, v);
        return -1;
    }
    return (int)n;
}

/* --dtype: the qf_dtype of bf16, fp16 or fp32, or -1 with a message. */
static int parse_dtype(const char *v) {
    for (size_t d = 0; d < sizeof x_dtypes / sizeof x_dtypes[0]; d++)
        if (strcmp(v, qf_dtype_name(x_dtypes[d])) == 0)
            return (int)x_dtypes[d];
    fprintf(stderr, "qfuse-bench: --dtype '%s': expected bf16, fp16 or fp32\n", v);
    return -1;
}

/* --section: adds quant, gemm or jit to *mask; 0, or -1 with a message. */
static int parse_section(const char *v, unsigned *mask) {
    static const char *const names[] = {"quant", "gemm", "jit"};
    static const unsigned bits[] = {SEC_QUANT, SEC_GEMM, SEC_JIT};
    for (int i = 0; i < 3; i++)
        if (strcmp(v, names[i]) == 0) {
            *mask |= bits[i];
            return 0;
        }
    fprintf(stderr, "qfuse-bench: --section '%s': expected quant, gemm or jit\n", v);
    return -1;
}

static int parse_args(int argc, char **argv, bench_opts *o) {
    static const struct option longs[] = {{"csv", required_argument, 0, 'c'},
                                          {"quick", no_argument, 0, 'q'},
                                          {"iters", required_argument, 0, 'i'},
                                          {"batch", required_argument, 0, 'b'},
                                          {"recipe", required_argument, 0, 'r'},
                                          {"dtype", required_argument, 0, 'd'},
                                          {"section", required_argument, 0, 's'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    *o = (bench_opts){.csv = "out/bench/qfuse.csv", .iters = 0, .batch = 10, .dtype = -1};
    int c;
    while ((c = getopt_long(argc, argv, "c:qi:b:r:d:s:h", longs, NULL)) != -1) {
        if (c == 'c')
            o->csv = optarg;
        else if (c == 'q')
            o->quick = 1;
        else if (c == 'i' && (o->iters = parse_count("--iters", optarg)) < 0)
            return 2;
        else if (c == 'b' && (o->batch = parse_count("--batch", optarg)) < 0)
            return 2;
        else if (c == 'r' && tool_recipes_add(&o->recipes, optarg) < 0)
            return 2;
        else if (c == 'd' && (o->dtype = parse_dtype(optarg)) < 0)
            return 2;
        else if (c == 's' && parse_section(optarg, &o->sections) < 0)
            return 2;
        else if (c == 'i' || c == 'b' || c == 'r' || c == 'd' || c == 's')
            continue;
        else {
            usage(c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    if (!o->iters)
        o->iters = o->quick ? 10 : 50;
    if (!o->sections)
        o->sections = SEC_ALL;
    if (optind != argc) {
        fprintf(stderr, "qfuse-bench: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv) {
    bench b = {0};
    int rc = parse_args(argc, argv, &b.o);
    if (rc >= 0)
        return rc;
    qf_status s = qf_ctx_init(&b.ctx, 0);
    if (s == QF_ERR_NO_DEVICE) {
        printf("no GPU: nothing to benchmark (%s)\n", qf_last_error());
        return 0;
    }
    QF_OR_DIE(s);
    bench_open(&b);
    print_table_header();
    bench_copy(&b);
    if (b.o.sections & SEC_QUANT)
        bench_quantizers(&b);
    const int64_t(*gs)[3] = b.o.quick ? gemm_shapes_quick : gemm_shapes_full;
    int ng = b.o.quick ? 1 : (int)(sizeof gemm_shapes_full / sizeof gemm_shapes_full[0]);
    for (int i = 0; (b.o.sections & SEC_GEMM) && i < ng; i++)
        bench_block_gemms(&b, gs[i], bench_gemm_shape(&b, gs[i]));
    if (b.o.sections & SEC_JIT)
        bench_jit(&b);
    bench_close(&b);
    qf_ctx_free(b.ctx);
    printf("\nwrote %s\n", b.o.csv);
    return 0;
}
