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

/* Small zeroed device buffers for one call of the op of any kernel (the lookup is what is timed),
 * and the outputs of that op from its recipe's fake shapes. */
typedef struct probe {
    void *x, *gamma, *beta, *amax, *sinv, *scale, *hist, *fmt;
    void *dxn, *stats; /* the norm backward's dxn [PROBE_M, PROBE_K] fp32, mu and rsigma */
    out_set o, w, y; /* the op's outputs; a GEMM's: o and w its operands' copies, y its output */
    qf_quantized q, qw;
} probe;

static void *dev_zero(size_t bytes) {
    void *d;
    CUDA_OR_DIE(cudaMalloc(&d, bytes));
    CUDA_OR_DIE(cudaMemset(d, 0, bytes));
    return d;
}

/* N of a GEMM probe: the staged path for a GEMM module's staged instance, else the module's own
 * kernel (qf_gemm's QF_GEMM_STAGED_MIN on sm_90). */
static int64_t probe_n(const qf_kernel_instance *inst) {
    return inst->staged ? PROBE_N_STAGED : PROBE_N;
}

/* The inputs, and the outputs of kernel k's op as instance inst (rowwise only, as the default
 * instance; a GEMM's at probe_n). */
static void probe_alloc(probe *p, const qf_recipe *r, const qf_kernel_entry *k,
                        const qf_kernel_instance *inst) {
    size_t mk = (size_t)PROBE_M * PROBE_K;
    int H = r->amax_history_len > 0 ? r->amax_history_len : 1;
    p->x = dev_zero(4 * mk), p->gamma = dev_zero(4 * PROBE_K), p->beta = dev_zero(4 * PROBE_K);
    p->dxn = dev_zero(4 * mk), p->stats = dev_zero(8 * PROBE_M);
    p->amax = dev_zero(4), p->sinv = dev_zero(4), p->hist = dev_zero(4 * (size_t)H);
    const float one = 1.0f;
    const uint8_t fmt = QF_DTYPE_E4M3;
    p->scale = bench_dev_upload(&one, sizeof one), p->fmt = bench_dev_upload(&fmt, 1);
    p->o.n = p->w.n = p->y.n = 0;
    if (k->op == QF_OP_NORM_QUANTIZE || k->op == QF_OP_QUANTIZE) {
        qf_shape_query q = {.op = k->op, .role = k->role, .norm = k->norm,
                            .outputs = QF_OUT_ROWWISE, .M = PROBE_M, .K = PROBE_K};
        bench_out_alloc(&p->o, r, &q);
    } else if (k->op == QF_OP_GEMM) { /* fprop: a [PROBE_M, PROBE_K], w [N, PROBE_K] */
        const int64_t n = probe_n(inst);
        const qf_shape_query qa =
            bench_operand_query(QF_ROLE_INPUT, QF_COPY_ROWWISE, PROBE_M, PROBE_K);
        const qf_shape_query qw = bench_operand_query(QF_ROLE_WEIGHT, QF_COPY_ROWWISE, n, PROBE_K);
        const qf_shape_query qy = {.op = QF_OP_GEMM, .M = PROBE_M, .N = n, .K = PROBE_K};
        bench_out_alloc(&p->o, r, &qa), bench_out_alloc(&p->w, r, &qw);
        bench_out_alloc(&p->y, r, &qy);
    } else if (k->op != QF_OP_SCALE_UPDATE) { /* norm backward, dbias, activation: [M, K] in */
        qf_shape_query q = {.op = k->op, .norm = k->norm, .M = PROBE_M, .N = PROBE_K,
                            .K = PROBE_K, .dtype = k->in_dtype};
        bench_out_alloc(&p->o, r, &q);
    }
    p->q = bench_out_quantized(&p->o, QF_SCALE_LAYOUT_COMPACT);
    p->qw = bench_out_quantized(&p->w, QF_SCALE_LAYOUT_COMPACT);
}

static void probe_free(probe *p) {
    void *all[] = {p->x, p->gamma, p->beta, p->amax, p->sinv, p->scale, p->hist, p->fmt,
                   p->dxn, p->stats};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cudaFree(all[i]);
    bench_out_free(&p->o), bench_out_free(&p->w), bench_out_free(&p->y);
}

/* 1 when the JIT rows can call the op of kernel k on probe buffers: every op, a GEMM module where
 * qf_gemm looks it up (sm_89..99: from sm_100 on, MXFP8 and NVFP4 GEMMs are cuBLASLt's). */
static int probe_supported(const qf_kernel_entry *k, int arch) {
    return k->op != QF_OP_GEMM || arch < 100;
}

/* One call of the op that runs kernel k (default instance: rowwise only, gamma in x's dtype; the
 * activation module through gelu's forward; a GEMM at the N of probe_alloc, which picks the
 * instance), so that ctx looks k up: one code path for every family (the recipe picks it). */
static void probe_call(qf_ctx_t *ctx, const qf_recipe *r, const qf_kernel_entry *k,
                       probe *p) {
    static const qf_rng rng = {1, 2}; /* gradients of recipes that round stochastically */
    const qf_tensor x = bench_tensor_2d(p->x, k->in_dtype, PROBE_M, PROBE_K);
    const qf_norm_desc nd = {
        .norm = k->norm, .zero_centered_gamma = k->zero_centered_gamma, .eps = NORM_EPS,
        .gamma = bench_tensor_1d(p->gamma, k->in_dtype, PROBE_K),
        .beta = k->norm == QF_NORM_LAYERNORM ? bench_tensor_1d(p->beta, k->in_dtype, PROBE_K)
                                             : (qf_tensor){0}};
    switch (k->op) {
    case QF_OP_SCALE_UPDATE:
        QF_OR_DIE(qf_scale_update(ctx, r->name, 1, r->amax_history_len, p->amax, p->hist,
                                  p->scale, p->sinv, p->fmt, NULL));
        break;
    case QF_OP_GEMM: { /* the instance probe_alloc's N selects */
        const qf_operand a = {&p->q, QF_COPY_ROWWISE}, w = {&p->qw, QF_COPY_ROWWISE};
        qf_tensor y = bench_out_tensor(&p->y, "y");
        QF_OR_DIE(qf_gemm(ctx, r->name, &a, &w, NULL, &y, NULL));
        break;
    }
    case QF_OP_NORM_BACKWARD: {
        const qf_tensor dxn = bench_tensor_2d(p->dxn, QF_DTYPE_FP32, PROBE_M, PROBE_K);
        const qf_tensor mu = bench_tensor_1d(p->stats, QF_DTYPE_FP32, PROBE_M);
        const qf_tensor rsigma =
            bench_tensor_1d((float *)p->stats + PROBE_M, QF_DTYPE_FP32, PROBE_M);
        qf_norm_grads g = {bench_out_tensor(&p->o, "dx"), bench_out_tensor(&p->o, "dgamma"),
                           bench_out_tensor(&p->o, "dbeta")};
        QF_OR_DIE(qf_norm_backward(ctx, r->name, &nd, &x, &dxn, &mu, &rsigma, &g, NULL));
        break;
    }
    case QF_OP_DBIAS: {
        qf_tensor dbias = bench_out_tensor(&p->o, "dbias");
        QF_OR_DIE(qf_dbias(ctx, r->name, &x, &dbias, NULL));
        break;
    }
    case QF_OP_ACTIVATION: {
        qf_tensor a = bench_out_tensor(&p->o, "a");
        QF_OR_DIE(qf_activation_fwd(ctx, r->name, QF_ACT_GELU, &x, &a, NULL));
        break;
    }
    default:
        QF_OR_DIE(qf_quantize(ctx, r->name, k->role, &x, k->norm ? &nd : NULL, p->scale, &rng,
                              &p->q, NULL));
    }
    CUDA_OR_DIE(cudaDeviceSynchronize());
}

/* Cold compile of k as inst with NVRTC for arch, bypassing every cache; median ms over reps. The
 * CUBIN of the last rep is returned (caller frees) to seed the disk cache. */
static double jit_cold(const qf_kernel_entry *k, const qf_kernel_instance *inst, int arch,
                       int reps, void **cubin, size_t *size) {
    char store[QF_KERNEL_MAX_EXTRA][48], archbuf[64];
    const char *extra[QF_KERNEL_MAX_EXTRA], *opts[QF_JIT_MAX_OPTIONS];
    int ne = qf_kernel_extra_options(k, inst, store, extra);
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

/* A JIT row of k as inst; its outputs column names a quantizer's copy, or a GEMM module's staged
 * instance ("staged"). */
static void jit_emit(bench *b, const char *kind, const qf_kernel_entry *k,
                     const qf_kernel_instance *inst, double ms, const char *note) {
    row r = bench_row_new(kind, k->recipe->name, k->name);
    r.norm = bench_norm_name(k->norm), r.dtype = qf_dtype_name(k->in_dtype);
    r.outputs = k->op == QF_OP_NORM_QUANTIZE || k->op == QF_OP_QUANTIZE ? "rowwise"
                : inst->staged                                            ? "staged"
                                                                          : "";
    r.us = 1e3 * ms;
    snprintf(r.note, sizeof r.note, "%s", note);
    bench_row_emit(b, &r);
}

/* One kernel as its default instance, or a GEMM module's as its staged one (staged): cold
 * compile, then store it in the temporary cache and time the warm lookups. */
static void bench_jit_kernel(bench *b, const qf_kernel_entry *k, int staged) {
    const qf_recipe *r = k->recipe;
    qf_kernel_instance inst = qf_kernel_instance_default(k);
    inst.staged = staged;
    probe p;
    probe_alloc(&p, r, k, &inst);
    int arch = qf_ctx_arch(b->ctx), reps_cold = b->o.quick ? 1 : 3, reps_warm = 5;
    void *cubin;
    size_t size;
    double cold = jit_cold(k, &inst, arch, reps_cold, &cubin, &size);
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
    jit_emit(b, "jit_cold", k, &inst, cold, note);
    snprintf(note, sizeof note, "first call in a fresh context: served from %s (key + cache read + "
             "cuModuleLoadData); median of %d", how, reps_warm);
    jit_emit(b, "jit_disk", k, &inst, disk, note);
    snprintf(note, sizeof note, "second call: in-memory table; median of %d", reps_warm);
    jit_emit(b, "jit_memory", k, &inst, mem, note);
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

/* A kernel's JIT rows: its default instance and, for a GEMM module, its staged instance (which
 * every call of 256 rows and columns or more loads on sm_90). */
static void bench_jit_instances(bench *b, const qf_kernel_entry *k) {
    bench_jit_kernel(b, k, 0);
    if (k->op == QF_OP_GEMM)
        bench_jit_kernel(b, k, 1);
}

/* JIT numbers of every kernel of the first selected recipe (--quick: its first kernel of each op),
 * and of the GEMM module of every other selected recipe that has one (the largest compiles), with
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
    const int arch = qf_ctx_arch(b->ctx);
    unsigned ops_done = 0; /* --quick: the ops of the first recipe timed so far */
    for (int i = 0; i < qf_kernel_count; i++) {
        const qf_kernel_entry *k = &qf_kernels[i];
        const int rj = (int)(k->recipe - qf_recipes);
        if (!probe_supported(k, arch))
            continue;
        if (rj == ri) {
            if (!b->o.quick || !(ops_done & 1u << k->op))
                bench_jit_instances(b, k);
            ops_done |= 1u << k->op;
        } else if (k->op == QF_OP_GEMM && tool_recipe_selected(&b->o.recipes, rj)) {
            bench_jit_instances(b, k);
        }
    }
    if (saved)
        setenv("QFUSE_CACHE_DIR", saved, 1);
    else
        unsetenv("QFUSE_CACHE_DIR");
    free(saved);
    qf_cache_reset();
    remove_dir(dir);
}

