/* test_gpu_fp8.c: per-tensor FP8 kernels on the GPU against the C references (SPEC 2.1, 3).
 * Every test skips cleanly without a GPU. Outputs are poisoned before each run and every byte is
 * compared with the reference. */
#include "test_gpu_util.h"

#include <math.h>
#include <stdio.h>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jit_cache.h"
#include "qfuse.h"
#include "ref.h"


static const char *const kRecipe = "fp8_delayed";
static int g_cases; /* cases checked, printed at the end */

/* ==================================================================== host/device helpers */

typedef struct gbuf {
    void *d;
    void *h;
    size_t bytes;
} gbuf;

static gbuf gb_alloc(size_t bytes) {
    gbuf b = {NULL, malloc(bytes ? bytes : 1), bytes};
    assert_non_null(b.h);
    CK(cudaMalloc(&b.d, bytes ? bytes : 1));
    return b;
}

static void gb_free(gbuf *b) {
    cudaFree(b->d);
    free(b->h);
    memset(b, 0, sizeof *b);
}

static void gb_upload(gbuf *b) {
    CK(cudaMemcpy(b->d, b->h, b->bytes, cudaMemcpyHostToDevice));
}

static void gb_download(gbuf *b) {
    CK(cudaMemcpy(b->h, b->d, b->bytes, cudaMemcpyDeviceToHost));
}

static void gb_poison(gbuf *b, int byte) {
    CK(cudaMemset(b->d, byte, b->bytes));
}

static qf_tensor tview(gbuf *b, qf_dtype dt, int ndim, int64_t d0, int64_t d1) {
    qf_tensor t = {.data = b->d, .dtype = dt, .ndim = ndim, .dims = {d0, d1}};
    return t;
}

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

static int ctx_or_skip(qf_ctx_t **ctx) {
    if (!qf_test_have_gpu())
        return 0;
    QF_OK_OR_FAIL(qf_ctx_init(ctx, 0));
    return 1;
}

/* ==================================================================== norm + quantize */

typedef struct nq_case {
    int64_t M, K;
    qf_dtype xdt, gdt;
    qf_norm norm;
    int zcg;
    unsigned outputs;
} nq_case;

/* Counts bytes where the kernel's output differs from the reference. */
static int64_t count_byte_mismatches(const uint8_t *ref, const uint8_t *got, int64_t n) {
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad)
    for (int64_t i = 0; i < n; i++)
        bad += ref[i] != got[i];
    return bad;
}

/* Counts bytes of the columnwise [K, M] output that differ from the transposed rowwise reference. */
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
static float ref_rows(const nq_case *c, const void *x, const void *g, const void *b,
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

/* mu/rsigma of the kernel within rel 1e-5 of the fp64 reference (SPEC 3). */
static void check_stats(const nq_case *c, const void *x, const float *mu, const float *rs) {
    float *mu_ref = malloc((size_t)c->M * 4), *rs_ref = malloc((size_t)c->M * 4);
    const size_t xsz = qf_dtype_size(c->xdt);
#pragma omp parallel for schedule(dynamic)
    for (int64_t m = 0; m < c->M; m++)
        qf_norm_stats_ref(c->norm, c->xdt, (const char *)x + m * c->K * xsz, 1, c->K, 1e-5f,
                          mu_ref + m, rs_ref + m);
    for (int64_t m = 0; m < c->M; m++) {
        double e = fabs((double)rs[m] - rs_ref[m]) / fabs((double)rs_ref[m]);
        if (e > 1e-5)
            fail_msg("rsigma[%lld] = %.9g, reference %.9g (M=%lld K=%lld)", (long long)m, rs[m],
                     rs_ref[m], (long long)c->M, (long long)c->K);
        if (c->norm == QF_NORM_LAYERNORM) {
            /* mu relative to the row's scale: |mu - ref| <= 1e-5 * (|ref| + sigma). */
            double tol = 1e-5 * (fabs((double)mu_ref[m]) + 1.0 / rs_ref[m]);
            if (fabs((double)mu[m] - mu_ref[m]) > tol)
                fail_msg("mu[%lld] = %.9g, reference %.9g", (long long)m, mu[m], mu_ref[m]);
        }
    }
    free(mu_ref);
    free(rs_ref);
}

static void run_nq_case(qf_ctx_t *ctx, const nq_case *c, uint64_t seed) {
    const int64_t M = c->M, K = c->K, n = M * K;
    gbuf x = gb_alloc((size_t)n * qf_dtype_size(c->xdt));
    gbuf g = gb_alloc((size_t)K * 4), b = gb_alloc((size_t)K * 4);
    gbuf row = gb_alloc((size_t)n), col = gb_alloc((size_t)n);
    gbuf mu = gb_alloc((size_t)M * 4), rs = gb_alloc((size_t)M * 4);
    gbuf amax = gb_alloc(4), sinv = gb_alloc(4), scale = gb_alloc(4);
    fill_activation(x.h, c->xdt, M, K, seed);
    fill_gamma(g.h, c->gdt, K, seed + 1, c->zcg ? 0.0f : 1.0f);
    fill_gamma(b.h, c->gdt, K, seed + 2, 0.0f);
    *(float *)scale.h = 448.0f / 40.0f;
    gb_upload(&x), gb_upload(&g), gb_upload(&b), gb_upload(&scale);
    gb_poison(&row, 0xCD), gb_poison(&col, 0xCD), gb_poison(&mu, 0xCD), gb_poison(&rs, 0xCD);
    gb_poison(&sinv, 0xCD);
    CK(cudaMemset(amax.d, 0, 4));

    int is_ln = c->norm == QF_NORM_LAYERNORM;
    qf_tensor tx = tview(&x, c->xdt, 2, M, K), tg = tview(&g, c->gdt, 1, K, 0);
    qf_tensor tb = tview(&b, c->gdt, 1, K, 0), tmu = tview(&mu, QF_DTYPE_FP32, 1, M, 0);
    qf_tensor trs = tview(&rs, QF_DTYPE_FP32, 1, M, 0);
    qf_quantized out = {0};
    out.t[QF_SLOT_AMAX] = tview(&amax, QF_DTYPE_FP32, 1, 1, 0);
    out.t[QF_SLOT_SCALE_INV] = tview(&sinv, QF_DTYPE_FP32, 1, 1, 0);
    if (c->outputs & QF_OUT_ROWWISE)
        out.t[QF_SLOT_ROWWISE_DATA] = tview(&row, QF_DTYPE_E4M3, 2, M, K);
    if (c->outputs & QF_OUT_COLUMNWISE)
        out.t[QF_SLOT_COLUMNWISE_DATA] = tview(&col, QF_DTYPE_E4M3, 2, K, M);
    if (is_ln)
        out.t[QF_SLOT_MU] = tmu;
    out.t[QF_SLOT_RSIGMA] = trs;
    const qf_norm_desc nd = {.norm = c->norm, .zero_centered_gamma = c->zcg, .eps = 1e-5f,
                             .gamma = tg, .beta = is_ln ? tb : (qf_tensor){0}};
    QF_OK_OR_FAIL(qf_quantize(ctx, kRecipe, QF_ROLE_INPUT, &tx, &nd, scale.d, NULL, &out, NULL));
    CK(cudaDeviceSynchronize());
    gb_download(&row), gb_download(&col), gb_download(&mu), gb_download(&rs);
    gb_download(&amax), gb_download(&sinv);

    check_stats(c, x.h, mu.h, rs.h);
    uint8_t *rrow = malloc((size_t)n);
    float ramax = ref_rows(c, x.h, g.h, b.h, is_ln ? mu.h : NULL, rs.h, *(float *)scale.h, rrow);
    if (c->outputs & QF_OUT_ROWWISE)
        assert_int_equal(count_byte_mismatches(rrow, row.h, n), 0);
    else
        assert_int_equal(count_not_poison(row.h, n, 0xCD), 0);
    if (c->outputs & QF_OUT_COLUMNWISE)
        assert_int_equal(count_col_mismatches(rrow, col.h, M, K), 0);
    else
        assert_int_equal(count_not_poison(col.h, n, 0xCD), 0);
    assert_memory_equal(&ramax, amax.h, 4);
    float want_sinv = 1.0f / *(float *)scale.h;
    assert_memory_equal(&want_sinv, sinv.h, 4);
    free(rrow);
    gbuf *all[] = {&x, &g, &b, &row, &col, &mu, &rs, &amax, &sinv, &scale};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        gb_free(all[i]);
    g_cases++;
}

static void nq_sweep(qf_dtype xdt) {
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    static const int64_t Ms[] = {1, 3, 128, 1000, 16384};
    static const int64_t Ks[] = {16, 768, 769, 4096, 8192, 65536};
    /* QFUSE_TEST_QUICK=1 (sanitizer runs) skips the shapes of more than 2^26 elements. */
    const int quick = getenv("QFUSE_TEST_QUICK") && atoi(getenv("QFUSE_TEST_QUICK"));
    int i = 0;
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++) {
        for (size_t b = 0; b < sizeof Ks / sizeof Ks[0]; b++, i++) {
            if (quick && Ms[a] * Ks[b] > (1 << 26))
                continue;
            nq_case c = {.M = Ms[a], .K = Ks[b], .xdt = xdt,
                         .gdt = (i % 3 == 2) ? QF_DTYPE_FP32 : xdt,
                         .norm = (i % 2) ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM,
                         .zcg = (i / 2) % 2,
                         .outputs = (a + b) % 2 ? QF_OUT_ROWWISE
                                                : QF_OUT_ROWWISE | QF_OUT_COLUMNWISE};
            run_nq_case(ctx, &c, 1000u + (uint64_t)i * 7919u + (uint64_t)xdt);
        }
    }
    qf_ctx_free(ctx);
}

static void test_nq_bf16(void **state) {
    (void)state;
    nq_sweep(QF_DTYPE_BF16);
}

static void test_nq_fp16(void **state) {
    (void)state;
    nq_sweep(QF_DTYPE_FP16);
}

static void test_nq_fp32(void **state) {
    (void)state;
    nq_sweep(QF_DTYPE_FP32);
}

/* Every norm x zcg x dtype variant and each output selection alone, on an odd shape (the tiled
 * entry) and on one of 64x64 tiles (the rows entry, then the columnwise entry). */
static void test_nq_variants(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    static const qf_dtype dts[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};
    static const int64_t shapes[][2] = {{217, 259}, {192, 320}};
    int i = 0;
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 3; d++)
            for (int norm = QF_NORM_LAYERNORM; norm <= QF_NORM_RMSNORM; norm++)
                for (int zcg = 0; zcg < 2; zcg++)
                    for (unsigned o = 1; o <= 3; o++, i++) {
                        nq_case c = {.M = shapes[s][0], .K = shapes[s][1], .xdt = dts[d],
                                     .gdt = dts[d], .norm = (qf_norm)norm, .zcg = zcg,
                                     .outputs = o};
                        run_nq_case(ctx, &c, 77u + (uint64_t)i);
                    }
    qf_ctx_free(ctx);
}

/* A new M (and a new K) reuses the loaded kernel: served from memory, no compile. */
static void test_new_m_does_not_recompile(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    nq_case c = {.M = 128, .K = 768, .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16,
                 .norm = QF_NORM_LAYERNORM, .outputs = QF_OUT_ROWWISE};
    run_nq_case(ctx, &c, 5);
    char key[33];
    memcpy(key, qf_ctx_last_kernel(ctx)->key, sizeof key);
    c.M = 1000;
    run_nq_case(ctx, &c, 6);
    assert_int_equal(qf_ctx_last_kernel(ctx)->source, QF_KSRC_MEMORY);
    assert_string_equal(qf_ctx_last_kernel(ctx)->key, key);
    c.M = 3, c.K = 4096;
    run_nq_case(ctx, &c, 7);
    assert_int_equal(qf_ctx_last_kernel(ctx)->source, QF_KSRC_MEMORY);
    qf_ctx_free(ctx);
}

/* ==================================================================== disk cache, end to end */

static const nq_case kCacheCase = {.M = 128, .K = 768, .xdt = QF_DTYPE_BF16,
                                   .gdt = QF_DTYPE_BF16, .norm = QF_NORM_LAYERNORM,
                                   .outputs = QF_OUT_ROWWISE};

/* Runs kCacheCase in a fresh context and returns how its kernel was obtained. */
static qf_kernel_source fresh_ctx_source(char key[33]) {
    qf_ctx_t *ctx = NULL;
    QF_OK_OR_FAIL(qf_ctx_init(&ctx, 0));
    run_nq_case(ctx, &kCacheCase, 11);
    qf_kernel_source src = qf_ctx_last_kernel(ctx)->source;
    if (key)
        memcpy(key, qf_ctx_last_kernel(ctx)->key, 33);
    qf_ctx_free(ctx);
    return src;
}

/* Flips the last byte of the cache entry whose name holds key. */
static void corrupt_entry(const char *dir, const char *key) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strstr(e->d_name, key))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        assert_int_equal(fseek(f, -1, SEEK_END), 0);
        int c = fgetc(f);
        assert_int_equal(fseek(f, -1, SEEK_END), 0);
        fputc(c ^ 0x5A, f);
        fclose(f);
        found = 1;
    }
    closedir(d);
    assert_true(found);
}

/* A second process finds the entry on disk; a corrupted entry is recompiled, then replaced. */
static void test_disk_cache_across_processes(void **state) {
    (void)state;
    QF_SKIP_WITHOUT_GPU();
    char dir[] = "/tmp/qfuse-gpu-cache-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("QFUSE_CACHE_DIR", dir, 1);
    qf_cache_reset();
    char key[33];
    assert_int_equal(fresh_ctx_source(key), QF_KSRC_COMPILED);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_gpu_fp8", "--child-disk-hit", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0); /* the child saw a disk-cache hit */
    corrupt_entry(dir, key);
    assert_int_equal(fresh_ctx_source(NULL), QF_KSRC_COMPILED); /* detected, not loaded */
    assert_int_equal(fresh_ctx_source(NULL), QF_KSRC_DISK);     /* replaced by a good entry */
    unsetenv("QFUSE_CACHE_DIR");
    qf_cache_reset();
}

/* Child side of test_disk_cache_across_processes (no cmocka here): exit 0 iff the kernel of
 * kCacheCase came from the disk cache. */
static int child_disk_hit(void) {
    const int64_t M = kCacheCase.M, K = kCacheCase.K;
    qf_ctx_t *ctx = NULL;
    void *x, *g, *b, *row, *st;
    if (qf_ctx_init(&ctx, 0) != QF_OK || cudaMalloc(&x, (size_t)M * K * 2) ||
        cudaMalloc(&g, (size_t)K * 4) || cudaMalloc(&b, (size_t)K * 4) ||
        cudaMalloc(&row, (size_t)M * K) || cudaMalloc(&st, (size_t)(2 * M + 8) * 4))
        return 3;
    cudaMemset(x, 0, (size_t)M * K * 2), cudaMemset(st, 0, (size_t)(2 * M + 8) * 4);
    float *f = st;
    qf_tensor tx = {.data = x, .dtype = QF_DTYPE_BF16, .ndim = 2, .dims = {M, K}};
    qf_tensor tg = {.data = g, .dtype = QF_DTYPE_BF16, .ndim = 1, .dims = {K}}, tb = tg;
    tb.data = b;
    qf_tensor tmu = {.data = f + 8, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {M}};
    qf_tensor trs = tmu;
    trs.data = f + 8 + M;
    qf_quantized out = {
        .t = {[QF_SLOT_ROWWISE_DATA] = {.data = row, .dtype = QF_DTYPE_E4M3, .ndim = 2,
                                        .dims = {M, K}},
              [QF_SLOT_AMAX] = {.data = f, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}},
              [QF_SLOT_SCALE_INV] = {.data = f + 1, .dtype = QF_DTYPE_FP32, .ndim = 1,
                                     .dims = {1}},
              [QF_SLOT_MU] = tmu, [QF_SLOT_RSIGMA] = trs}};
    const qf_norm_desc nd = {.norm = QF_NORM_LAYERNORM, .eps = 1e-5f, .gamma = tg, .beta = tb};
    if (qf_quantize(ctx, kRecipe, QF_ROLE_INPUT, &tx, &nd, f + 2, NULL, &out, NULL) != QF_OK ||
        cudaDeviceSynchronize() != cudaSuccess)
        return 4;
    int rc = qf_ctx_last_kernel(ctx)->source == QF_KSRC_DISK ? 0 : 5;
    qf_ctx_free(ctx);
    return rc;
}

/* ==================================================================== quantize (weights, grads) */

static void run_quant_case(qf_ctx_t *ctx, qf_role role, qf_dtype xdt, int64_t M, int64_t K,
                           unsigned outputs, uint64_t seed) {
    const int64_t n = M * K;
    const qf_dtype fmt = role == QF_ROLE_GRAD ? QF_DTYPE_E5M2 : QF_DTYPE_E4M3; /* hybrid */
    gbuf x = gb_alloc((size_t)n * qf_dtype_size(xdt)), row = gb_alloc((size_t)n);
    gbuf col = gb_alloc((size_t)n), amax = gb_alloc(4), sinv = gb_alloc(4), scale = gb_alloc(4);
    fill_activation(x.h, xdt, M, K, seed);
    *(float *)scale.h = role == QF_ROLE_GRAD ? 1024.0f : 3.0f;
    gb_upload(&x), gb_upload(&scale);
    gb_poison(&row, 0xCD), gb_poison(&col, 0xCD), gb_poison(&sinv, 0xCD);
    CK(cudaMemset(amax.d, 0, 4));
    qf_tensor tx = tview(&x, xdt, 2, M, K);
    qf_quantized out = {0};
    out.t[QF_SLOT_ROWWISE_DATA] = tview(&row, fmt, 2, M, K);
    out.t[QF_SLOT_AMAX] = tview(&amax, QF_DTYPE_FP32, 1, 1, 0);
    out.t[QF_SLOT_SCALE_INV] = tview(&sinv, QF_DTYPE_FP32, 1, 1, 0);
    if (outputs & QF_OUT_COLUMNWISE)
        out.t[QF_SLOT_COLUMNWISE_DATA] = tview(&col, fmt, 2, K, M);
    QF_OK_OR_FAIL(qf_quantize(ctx, kRecipe, role, &tx, NULL, scale.d, NULL, &out, NULL));
    CK(cudaDeviceSynchronize());
    gb_download(&row), gb_download(&col), gb_download(&amax);
    uint8_t *rrow = malloc((size_t)n), *rcol = malloc((size_t)n);
    float ramax = 0.0f;
    qf_norm_quantize_fp8_ref(QF_NORM_NONE, 0, xdt, x.h, xdt, NULL, NULL, M, K, 0.0f, NULL, NULL,
                             *(float *)scale.h, fmt, rrow, rcol, NULL, NULL, &ramax);
    assert_int_equal(count_byte_mismatches(rrow, row.h, n), 0);
    if (outputs & QF_OUT_COLUMNWISE)
        assert_int_equal(count_byte_mismatches(rcol, col.h, n), 0);
    else
        assert_int_equal(count_not_poison(col.h, n, 0xCD), 0);
    assert_memory_equal(&ramax, amax.h, 4);
    free(rrow), free(rcol);
    gbuf *all[] = {&x, &row, &col, &amax, &sinv, &scale};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        gb_free(all[i]);
    g_cases++;
}

static void test_quantize(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    static const qf_dtype dts[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};
    static const int64_t shapes[][2] = {{1, 16}, {5, 160}, {217, 256}, {4096, 4096}, {1000, 769}};
    int i = 0;
    for (int r = QF_ROLE_WEIGHT; r <= QF_ROLE_GRAD; r++)
        for (int d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++, i++)
                for (unsigned o = 1; o <= 3; o += 2)
                    run_quant_case(ctx, (qf_role)r, dts[d], shapes[s][0], shapes[s][1], o,
                                   900u + i);
    qf_ctx_free(ctx);
}

/* ==================================================================== scale update */

static void test_scale_update(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    enum { N = 9, H = 1024, STEPS = 5 };
    gbuf amax = gb_alloc(N * 4), hist = gb_alloc(N * H * 4), scale = gb_alloc(N * 4);
    gbuf sinv = gb_alloc(N * 4), fmt = gb_alloc(N);
    float ref_amax[N], ref_scale[N], ref_sinv[N], *ref_hist = malloc(N * H * 4);
    uint64_t s = 42;
    for (int i = 0; i < N * H; i++)
        ((float *)hist.h)[i] = ref_hist[i] = fabsf(qf_test_rng_uniform(&s)) * 10.0f;
    for (int t = 0; t < N; t++) {
        ((float *)scale.h)[t] = ref_scale[t] = 1.0f + t;
        ((float *)sinv.h)[t] = ref_sinv[t] = 1.0f / (1.0f + t);
        ((uint8_t *)fmt.h)[t] = ref_sinv[t] > 0.3f ? QF_DTYPE_E4M3 : QF_DTYPE_E5M2;
    }
    gb_upload(&hist), gb_upload(&scale), gb_upload(&sinv), gb_upload(&fmt);
    const float special[N] = {0.0f, 1e-38f, INFINITY, NAN, 3.5f, 1e30f, 0.0f, 448.0f, 2e-3f};
    for (int step = 0; step < STEPS; step++) {
        for (int t = 0; t < N; t++)
            ((float *)amax.h)[t] = ref_amax[t] =
                step == 0 ? special[t] : (t == 6 ? 0.0f : fabsf(qf_test_rng_uniform(&s)) * 50.0f);
        gb_upload(&amax);
        QF_OK_OR_FAIL(qf_scale_update(ctx, kRecipe, N, H, amax.d, hist.d, scale.d, sinv.d,
                                      fmt.d, NULL));
        CK(cudaDeviceSynchronize());
        qf_fp8_scale_update_ref(N, H, ref_amax, ref_hist, ref_scale, ref_sinv, fmt.h, 0.0f,
                                QF_AMAX_COMPUTE_MAX);
        gb_download(&amax), gb_download(&hist), gb_download(&scale), gb_download(&sinv);
        assert_memory_equal(ref_amax, amax.h, sizeof ref_amax);
        assert_memory_equal(ref_hist, hist.h, (size_t)N * H * 4);
        assert_memory_equal(ref_scale, scale.h, sizeof ref_scale);
        assert_memory_equal(ref_sinv, sinv.h, sizeof ref_sinv);
        g_cases++;
    }
    free(ref_hist);
    gbuf *all[] = {&amax, &hist, &scale, &sinv, &fmt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        gb_free(all[i]);
    qf_ctx_free(ctx);
}

/* ==================================================================== FP8 GEMM */

static double rel_err(const double *ref, const uint16_t *y_bf16, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)qf_bf16_to_float(y_bf16[i]) - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

static void run_gemm_case(qf_ctx_t *ctx, int64_t M, int64_t N, int64_t K, int with_bias,
                          uint64_t seed) {
    gbuf a = gb_alloc((size_t)M * K), b = gb_alloc((size_t)N * K), y = gb_alloc((size_t)M * N * 2);
    gbuf bias = gb_alloc((size_t)N * 2), sa = gb_alloc(4), sb = gb_alloc(4);
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
    gb_upload(&a), gb_upload(&b), gb_upload(&bias), gb_upload(&sa), gb_upload(&sb);
    gb_poison(&y, 0xFF);
    qf_tensor ta = tview(&a, QF_DTYPE_E4M3, 2, M, K), tb = tview(&b, QF_DTYPE_E4M3, 2, N, K);
    qf_tensor ty = tview(&y, QF_DTYPE_BF16, 2, M, N), tbias = tview(&bias, QF_DTYPE_BF16, 1, N, 0);
    qf_quantized qa = {.t = {[QF_SLOT_ROWWISE_DATA] = ta,
                             [QF_SLOT_SCALE_INV] = tview(&sa, QF_DTYPE_FP32, 1, 1, 0)}};
    qf_quantized qb = {.t = {[QF_SLOT_ROWWISE_DATA] = tb,
                             [QF_SLOT_SCALE_INV] = tview(&sb, QF_DTYPE_FP32, 1, 1, 0)}};
    const qf_operand oa = {&qa, QF_COPY_ROWWISE}, ob = {&qb, QF_COPY_ROWWISE};
    QF_OK_OR_FAIL(qf_gemm(ctx, kRecipe, &oa, &ob, with_bias ? &tbias : NULL, &ty, NULL));
    CK(cudaDeviceSynchronize());
    gb_download(&y);
    qf_gemm_fp8_ref(QF_DTYPE_E4M3, a.h, *(float *)sa.h, QF_DTYPE_E4M3, b.h, *(float *)sb.h,
                    with_bias ? dbias : NULL, M, N, K, yref);
    double e = rel_err(yref, y.h, M * N);
    if (!(e < 4e-3)) /* bf16 output rounding (<= 2^-9 per element) and fp32 accumulation */
        fail_msg("FP8 GEMM M=%lld N=%lld K=%lld: relative error %.3g", (long long)M,
                 (long long)N, (long long)K, e);
    free(dbias), free(yref);
    gbuf *all[] = {&a, &b, &y, &bias, &sa, &sb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        gb_free(all[i]);
    g_cases++;
}

static void test_gemm_fp8(void **state) {
    (void)state;
    qf_ctx_t *ctx = NULL;
    if (!ctx_or_skip(&ctx))
        skip();
    run_gemm_case(ctx, 1, 16, 16, 0, 1);
    run_gemm_case(ctx, 3, 32, 64, 1, 2);
    run_gemm_case(ctx, 217, 256, 384, 1, 3);
    run_gemm_case(ctx, 1000, 1536, 384, 1, 4);
    run_gemm_case(ctx, 512, 1024, 4096, 0, 5);
    qf_ctx_free(ctx);
}

static int print_counts(void **state) {
    (void)state;
    if (qf_test_have_gpu())
        printf("gpu_fp8: %d cases checked against the C references\n", g_cases);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--child-disk-hit") == 0)
        return child_disk_hit();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disk_cache_across_processes),
        cmocka_unit_test(test_nq_variants),
        cmocka_unit_test(test_new_m_does_not_recompile),
        cmocka_unit_test(test_quantize),
        cmocka_unit_test(test_scale_update),
        cmocka_unit_test(test_gemm_fp8),
        cmocka_unit_test(test_nq_bf16),
        cmocka_unit_test(test_nq_fp16),
        cmocka_unit_test(test_nq_fp32),
    };
    return cmocka_run_group_tests_name("gpu_fp8", tests, NULL, print_counts);
}
