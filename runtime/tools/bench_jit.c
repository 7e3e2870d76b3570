/* bench_jit.c: qfuse-bench's JIT rows: per kernel, the cold NVRTC compile, the disk-cache load in
 * a fresh context and the in-memory lookup. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "jit_cache.h"
#include "jit_compile.h"
#include "kernel_key.h"

/* Small zeroed device buffers for one call of any quantizer or scale update (the lookup is what
 * is timed), and the outputs of the kernel's op from its recipe's fake shapes. */
typedef struct probe {
    void *x, *gamma, *beta, *amax, *sinv, *scale, *hist, *fmt;
    out_set o;
    qf_quantized q;
} probe;

static void *dev_zero(size_t bytes) {
    void *d;
    CUDA_OR_DIE(cudaMalloc(&d, bytes));
    CUDA_OR_DIE(cudaMemset(d, 0, bytes));
    return d;
}

/* The inputs, and the outputs of kernel k's op (rowwise only, as its default instance). */
static void probe_alloc(probe *p, const qf_recipe *r, const qf_kernel_entry *k) {
    size_t mk = (size_t)PROBE_M * PROBE_K;
    int H = r->amax_history_len > 0 ? r->amax_history_len : 1;
    p->x = dev_zero(4 * mk), p->gamma = dev_zero(4 * PROBE_K), p->beta = dev_zero(4 * PROBE_K);
    p->amax = dev_zero(4), p->sinv = dev_zero(4), p->hist = dev_zero(4 * (size_t)H);
    const float one = 1.0f;
    const uint8_t fmt = QF_DTYPE_E4M3;
    p->scale = bench_dev_upload(&one, sizeof one), p->fmt = bench_dev_upload(&fmt, 1);
    p->o.n = 0;
    if (k->op == QF_OP_NORM_QUANTIZE || k->op == QF_OP_QUANTIZE) {
        qf_shape_query q = {.op = k->op, .role = k->role, .norm = k->norm,
                            .outputs = QF_OUT_ROWWISE, .M = PROBE_M, .K = PROBE_K};
        bench_out_alloc(&p->o, r, &q);
    }
    p->q = bench_out_quantized(&p->o, QF_SCALE_LAYOUT_COMPACT);
}

static void probe_free(probe *p) {
    void *all[] = {p->x, p->gamma, p->beta, p->amax, p->sinv, p->scale, p->hist, p->fmt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cudaFree(all[i]);
    bench_out_free(&p->o);
}

/* 1 when the JIT rows can call the op of kernel k on probe buffers: the quantizers and the scale
 * update (GEMM kernels are timed in the GEMM section). */
static int probe_supported(const qf_kernel_entry *k) {
    return k->op != QF_OP_GEMM;
}

/* One call of the op that runs kernel k (default instance: rowwise only, gamma in x's dtype), so
 * that ctx looks k up: one code path for every family (the recipe picks it). */
static void probe_call(qf_ctx_t *ctx, const qf_recipe *r, const qf_kernel_entry *k,
                       probe *p) {
    static const qf_rng rng = {1, 2}; /* gradients of recipes that round stochastically */
    if (k->op == QF_OP_SCALE_UPDATE) {
        QF_OR_DIE(qf_scale_update(ctx, r->name, 1, r->amax_history_len, p->amax, p->hist,
                                  p->scale, p->sinv, p->fmt, NULL));
    } else {
        qf_tensor x = bench_tensor_2d(p->x, k->in_dtype, PROBE_M, PROBE_K);
        const qf_norm_desc nd = {
            .norm = k->norm, .zero_centered_gamma = k->zero_centered_gamma, .eps = NORM_EPS,
            .gamma = bench_tensor_1d(p->gamma, k->in_dtype, PROBE_K),
            .beta = k->norm == QF_NORM_LAYERNORM ? bench_tensor_1d(p->beta, k->in_dtype, PROBE_K)
                                                 : (qf_tensor){0}};
        QF_OR_DIE(qf_quantize(ctx, r->name, k->role, &x, k->norm ? &nd : NULL, p->scale, &rng,
                              &p->q, NULL));
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
    return bench_median(t, reps);
}

/* Disk-cache hit in a fresh context (first call) and in-memory hit (second call), median ms over
 * reps; *how reports a first call not served from disk. */
static void jit_warm(const qf_recipe *r, const qf_kernel_entry *k, probe *p,
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
    *disk_ms = bench_median(td, reps), *mem_ms = bench_median(tm, reps);
}

static void jit_emit(bench *b, const char *kind, const qf_kernel_entry *k, double ms,
                     const char *note) {
    row r = bench_row_new(kind, k->recipe->name, k->name);
    r.norm = bench_norm_name(k->norm), r.dtype = qf_dtype_name(k->in_dtype);
    r.outputs = k->op == QF_OP_SCALE_UPDATE ? "" : "rowwise";
    r.us = 1e3 * ms;
    snprintf(r.note, sizeof r.note, "%s", note);
    bench_row_emit(b, &r);
}

/* One kernel: cold compile, then store it in the temporary cache and time the warm lookups. */
static void bench_jit_kernel(bench *b, const qf_kernel_entry *k) {
    const qf_recipe *r = k->recipe;
    probe p;
    probe_alloc(&p, r, k);
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
    jit_warm(r, k, &p, reps_warm, &disk, &mem, &how);
    probe_free(&p);
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

/* JIT numbers of every kernel of the first selected recipe (GEMM kernels aside), with
 * QFUSE_CACHE_DIR pointed at a fresh temporary directory (restored afterwards). */
void bench_jit(bench *b) {
    int ri = bench_first_recipe(b);
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
    int n = 0;
    for (int i = 0; i < qf_kernel_count; i++)
        if (qf_kernels[i].recipe == &qf_recipes[ri] && probe_supported(&qf_kernels[i]) &&
            (!b->o.quick || n++ < 2))
            bench_jit_kernel(b, &qf_kernels[i]);
    if (saved)
        setenv("QFUSE_CACHE_DIR", saved, 1);
    else
        unsetenv("QFUSE_CACHE_DIR");
    free(saved);
    qf_cache_reset();
    remove_dir(dir);
}

