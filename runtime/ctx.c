/* ctx.c: context creation, registry lookups and the in-memory kernel table (DESIGN data flow 3). */
#include "ctx.h"

#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "jit_cache.h"
#include "jit_compile.h"

#define QF_WORKSPACE_BYTES (32u << 20)

static double qf_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ==================================================================== registry lookups */

int qf_registry_recipe(const char *name) {
    for (int i = 0; name && i < qf_recipe_count; i++)
        if (strcmp(qf_recipes[i].name, name) == 0)
            return i;
    qf_set_error(QF_ERR_NOT_FOUND, "recipe '%s' not found: generate it with qfuse-gen "
                 "(recipes/<name>.lua) and link the generated registry", name ? name : "(null)");
    return -1;
}

int qf_registry_kernel(int recipe, qf_op op, qf_role role, qf_norm norm, int zcg,
                       qf_dtype in_dtype) {
    for (int i = 0; i < qf_kernel_count; i++) {
        const qf_kernel_entry *k = &qf_kernels[i];
        if (k->recipe == recipe && k->op == op && k->role == role && k->norm == norm &&
            k->zero_centered_gamma == !!zcg && k->in_dtype == in_dtype)
            return i;
    }
    qf_set_error(QF_ERR_NOT_FOUND, "recipe '%s' has no kernel for op %d role %d norm %d zcg %d "
                 "dtype %s", qf_recipes[recipe].name, (int)op, (int)role, (int)norm, zcg,
                 qf_dtype_name(in_dtype));
    return -1;
}

/* ==================================================================== context */

static qf_status qf_ctx_open_device(qf_ctx_t *c, int device) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return qf_set_error(QF_ERR_NO_DEVICE, "no CUDA device present");
    }
    if (device < 0 || device >= n)
        return qf_set_error(QF_ERR_INVALID_ARG, "device %d out of range: %d device(s)", device, n);
    /* cudart creates and binds the primary context; the driver calls then share it. */
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(0) != cudaSuccess)
        return qf_set_error(QF_ERR_CUDA, "cannot initialize device %d: %s", device,
                            cudaGetErrorString(cudaGetLastError()));
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    CUdevice dev;
    int major = 0, minor = 0;
    QF_CU_CHECK(cu->DeviceGet(&dev, device));
    QF_CU_CHECK(cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    QF_CU_CHECK(cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    QF_CU_CHECK(cu->DeviceGetAttribute(&c->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    QF_CU_CHECK(cu->CtxGetCurrent(&c->cu_ctx));
    c->device = device;
    c->arch = major * 10 + minor;
    return QF_OK;
}

static qf_status qf_ctx_open_blas(qf_ctx_t *c) {
    cublasStatus_t s = cublasLtCreate(&c->lt);
    if (s != CUBLAS_STATUS_SUCCESS)
        return qf_set_error(QF_ERR_CUBLAS, "cublasLtCreate failed: %s", cublasLtGetStatusString(s));
    if (cudaMalloc(&c->workspace, QF_WORKSPACE_BYTES) != cudaSuccess) {
        (void)cudaGetLastError();
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "cannot allocate %u bytes of cuBLASLt workspace",
                            QF_WORKSPACE_BYTES);
    }
    c->workspace_size = QF_WORKSPACE_BYTES;
    return QF_OK;
}

qf_status qf_ctx_init(qf_ctx_t **out, int device) {
    qf_clear_error();
    if (!out)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_ctx_init: out is NULL");
    *out = NULL;
    qf_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "qf_ctx_init: out of host memory");
    pthread_mutex_init(&c->lock, NULL);
    qf_status s = qf_ctx_open_device(c, device);
    if (s == QF_OK)
        s = qf_ctx_open_blas(c);
    if (s != QF_OK) {
        qf_ctx_free(c);
        return s;
    }
    *out = c;
    return QF_OK;
}

void qf_ctx_free(qf_ctx_t *c) {
    if (!c)
        return;
    const qf_cu_api *cu = c->n_kernels && !c->host ? qf_cu() : NULL;
    for (int i = 0; cu && i < c->n_kernels; i++)
        cu->ModuleUnload(c->kernels[i].module);
    free(c->kernels);
    qf_gemm_plans_free(c);
    if (c->workspace)
        cudaFree(c->workspace);
    if (c->lt)
        cublasLtDestroy(c->lt);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int qf_ctx_arch(const qf_ctx_t *ctx) {
    return ctx ? ctx->arch : 0;
}

const qf_kernel_info *qf_ctx_last_kernel(const qf_ctx_t *ctx) {
    return ctx ? &ctx->last : NULL;
}

qf_status qf_ctx_bind(qf_ctx_t *ctx) {
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    QF_CU_CHECK(cu->CtxSetCurrent(ctx->cu_ctx));
    return QF_OK;
}

/* ==================================================================== device-less contexts */

qf_status qf_ctx_init_host(qf_ctx_t **out, int arch) {
    qf_clear_error();
    if (!out)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_ctx_init_host: out is NULL");
    *out = NULL;
    if (arch < 50 || arch > 199)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_ctx_init_host: arch %d is not a compute "
                            "capability; expected 10*major+minor in 50..199 (e.g. 90 for sm_90)",
                            arch);
    qf_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "qf_ctx_init_host: out of host memory");
    pthread_mutex_init(&c->lock, NULL);
    c->host = 1;
    c->device = -1;
    c->arch = arch;
    *out = c;
    return QF_OK;
}

void qf_ctx_twin(const qf_ctx_t *ctx, qf_ctx_t *twin) {
    memset(twin, 0, sizeof *twin);
    pthread_mutex_init(&twin->lock, NULL);
    twin->host = 2;
    twin->device = ctx->device;
    twin->arch = ctx->arch;
    twin->sm_count = ctx->sm_count;
}

void qf_ctx_twin_free(qf_ctx_t *twin) {
    free(twin->kernels); /* empty unless an op looked up a kernel before qf_ctx_ready (a bug) */
    qf_gemm_plans_free(twin);
    pthread_mutex_destroy(&twin->lock);
}

/* NOTES: a kernel launched on a stream of another context fails with an opaque driver error at
 * best, and at worst runs against the wrong device's memory; so the stream is checked up front.
 * cuStreamGetCtx answers the current context for NULL and the special handles, hence the bind. */
qf_status qf_ctx_ready(qf_ctx_t *ctx, const char *op, void *stream) {
    if (ctx->host == 2)
        return QF_ERR_NO_DEVICE;
    if (ctx->host)
        return qf_set_error(QF_ERR_NO_DEVICE, "%s: arguments are valid, but the context has no "
                            "device (qf_ctx_init_host for sm_%d); nothing was launched", op,
                            ctx->arch);
    QF_TRY(qf_ctx_bind(ctx));
    const qf_cu_api *cu = qf_cu();
    CUcontext owner = NULL;
    QF_CU_CHECK(cu->StreamGetCtx((CUstream)stream, &owner));
    if (owner != ctx->cu_ctx)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: stream %p belongs to another CUDA context; "
                            "pass a stream created on device %d's primary context (the one "
                            "qf_ctx_init uses), or NULL", op, stream, ctx->device);
    return QF_OK;
}

qf_status qf_ctx_launch(qf_ctx_t *ctx, CUfunction fn, unsigned grid, unsigned block,
                        unsigned smem, void *params, void *stream) {
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    QF_TRY(qf_ctx_bind(ctx));
    void *args[] = {params};
    QF_CU_CHECK(cu->LaunchKernel(fn, grid, 1, 1, block, 1, 1, smem, (CUstream)stream, args, NULL));
    return QF_OK;
}

static int qf_aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

/* 1 when the `<name>_cols` entry can write c's columnwise copy (see qf_ctx_launch_rows). */
static int qf_cols_ok(const qf_loaded_kernel *lk, const qf_rows_call *c) {
    return lk->fn_cols && c->M % QF_COLS_TILE == 0 && c->K % QF_COLS_TILE == 0 &&
           qf_aligned16(c->out_col) && (c->M / QF_COLS_TILE) * (c->K / QF_COLS_TILE) <= 0x7fffffff;
}

/* Index into lk->fn_rows of the entry that runs c, or -1 for the tiled entry. */
static int qf_rows_entry(const qf_loaded_kernel *lk, const qf_kernel_entry *k,
                         const qf_rows_call *c) {
    const int64_t esz = (int64_t)qf_dtype_size(c->xdt), epv = 16 / esz;
    const int cols = (lk->inst.outputs & QF_OUT_COLUMNWISE) != 0;
    if (!c->rows_ok || (cols && !qf_cols_ok(lk, c)) || (c->K * esz) % 16 != 0 ||
        !qf_aligned16(c->x) || !qf_aligned16(c->out_row) || !qf_aligned16(c->gamma) ||
        !qf_aligned16(c->beta))
        return -1;
    const int64_t vecs_per_thread = (c->K / epv + k->block_threads - 1) / k->block_threads;
    static const int its[QF_ROWS_VARIANTS] = {1, 2, 4, 8};
    for (int i = 0; i < QF_ROWS_VARIANTS; i++)
        if (vecs_per_thread <= its[i] && lk->fn_rows[i])
            return i;
    return -1;
}

qf_status qf_ctx_launch_rows(qf_ctx_t *ctx, const qf_loaded_kernel *lk, const qf_kernel_entry *k,
                             const qf_rows_call *c, void *params, void *stream) {
    const int r = qf_rows_entry(lk, k, c);
    if (r >= 0) { /* persistent grid: every resident block loops over rows */
        const int64_t slots = (int64_t)ctx->sm_count * (lk->occ_rows[r] > 0 ? lk->occ_rows[r] : 1);
        const int64_t grid = c->M < slots ? c->M : slots;
        QF_TRY(qf_ctx_launch(ctx, lk->fn_rows[r], (unsigned)grid, k->block_threads, 0, params,
                             stream));
        if (!(lk->inst.outputs & QF_OUT_COLUMNWISE))
            return QF_OK;
        const int64_t tiles = (c->M / QF_COLS_TILE) * (c->K / QF_COLS_TILE);
        return qf_ctx_launch(ctx, lk->fn_cols, (unsigned)tiles, k->block_threads, 0, params,
                             stream);
    }
    const int64_t grid = (c->M + k->tile_m - 1) / k->tile_m;
    if (grid > 0x7fffffff)
        return qf_set_error(QF_ERR_UNSUPPORTED, "M = %lld is too large for one launch",
                            (long long)c->M);
    return qf_ctx_launch(ctx, lk->fn, (unsigned)grid, k->block_threads, 0, params, stream);
}

qf_status qf_zero_async(void *p, size_t n, const char *what, void *stream) {
    if (p && cudaMemsetAsync(p, 0, n, (cudaStream_t)stream) != cudaSuccess)
        return qf_set_error(QF_ERR_CUDA, "cudaMemsetAsync of %s failed: %s", what,
                            cudaGetErrorString(cudaGetLastError()));
    return QF_OK;
}

/* ==================================================================== kernel table */

static qf_loaded_kernel *qf_ctx_find(qf_ctx_t *c, int kidx, const qf_kernel_instance *inst) {
    for (int i = 0; i < c->n_kernels; i++) {
        qf_loaded_kernel *e = &c->kernels[i];
        if (e->kernel == kidx && qf_kernel_instance_equal(&e->inst, inst))
            return e;
    }
    return NULL;
}

/* Compiles kernel k for the context's arch (NVRTC), returning a malloc'ed CUBIN. */
static qf_status qf_ctx_compile(qf_ctx_t *c, const qf_kernel_entry *k,
                                const qf_kernel_instance *inst, void **cubin, size_t *size) {
    char store[QF_KERNEL_MAX_EXTRA][48], archbuf[64];
    const char *extra[QF_KERNEL_MAX_EXTRA], *opts[QF_JIT_MAX_OPTIONS];
    int n_extra = qf_kernel_extra_options(k, inst, store, extra);
    int n_opts = qf_jit_options(c->arch, extra, n_extra, opts, archbuf);
    QF_ASSERT(n_opts >= 0); /* at most QF_KERNEL_MAX_EXTRA extras: always fits */
    return qf_jit_compile(k->name, k->source, qf_nvrtc_header_names, qf_nvrtc_headers,
                          qf_nvrtc_header_count, opts, n_opts, cubin, size);
}

/* The optional <name>_rowsN entries of a module and their occupancy (absent ones stay NULL).
 * NOTES: a template declares them with QF_ROWS_ENTRY; modules without it are not probed, so no
 * failing cuModuleGetFunction call is made (sanitizers report those as API errors). */
static void qf_ctx_find_rows(const qf_cu_api *cu, const qf_kernel_entry *k, qf_loaded_kernel *e) {
    static const int its[QF_ROWS_VARIANTS] = {1, 2, 4, 8};
    const int has_rows = strstr(k->source, "QF_ROWS_ENTRY(1)") != NULL;
    for (int i = 0; i < QF_ROWS_VARIANTS; i++) {
        e->fn_rows[i] = NULL;
        e->occ_rows[i] = 0;
        if (!has_rows)
            continue;
        char name[160];
        snprintf(name, sizeof name, "%s_rows%d", k->name, its[i]);
        if (cu->ModuleGetFunction(&e->fn_rows[i], e->module, name) != CUDA_SUCCESS ||
            cu->OccupancyMaxActiveBlocksPerMultiprocessor(&e->occ_rows[i], e->fn_rows[i],
                                                          (int)k->block_threads, 0) != CUDA_SUCCESS)
            e->fn_rows[i] = NULL;
    }
}

/* The optional entry <name><suffix> into *fn (NULL when the source has no `marker`). NOTES:
 * declared by a template with a marker macro (QF_AMAX_ENTRY, QF_COLS_ENTRY); other modules are
 * not probed (see qf_ctx_find_rows), and a module that declares the entry must have it. */
static qf_status qf_ctx_find_entry(const qf_cu_api *cu, const qf_kernel_entry *k,
                                   const qf_loaded_kernel *e, const char *marker,
                                   const char *suffix, CUfunction *fn) {
    *fn = NULL;
    if (!strstr(k->source, marker))
        return QF_OK;
    char name[160];
    snprintf(name, sizeof name, "%s%s", k->name, suffix);
    CUresult r = cu->ModuleGetFunction(fn, e->module, name);
    return r == CUDA_SUCCESS ? QF_OK : qf_cu_fail(r, "cuModuleGetFunction", __FILE__, __LINE__);
}

/* Loads the CUBIN as a module. NOTES: a device-less context (qf_ctx_init_host) keeps module and
 * entry points NULL: it exists to compile and fill the disk cache, and its ops never launch. */
static qf_status qf_ctx_load_module(const qf_ctx_t *c, const qf_kernel_entry *k, const void *cubin,
                                    qf_loaded_kernel *e) {
    if (c->host)
        return QF_OK;
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    QF_CU_CHECK(cu->ModuleLoadData(&e->module, cubin));
    CUresult r = cu->ModuleGetFunction(&e->fn, e->module, k->name);
    if (r != CUDA_SUCCESS) {
        cu->ModuleUnload(e->module);
        return qf_cu_fail(r, "cuModuleGetFunction", __FILE__, __LINE__);
    }
    qf_ctx_find_rows(cu, k, e);
    qf_status s = qf_ctx_find_entry(cu, k, e, "QF_AMAX_ENTRY(", "_amax", &e->fn_amax);
    if (s == QF_OK)
        s = qf_ctx_find_entry(cu, k, e, "QF_COLS_ENTRY(", "_cols", &e->fn_cols);
    if (s != QF_OK)
        cu->ModuleUnload(e->module);
    return s;
}

/* Disk cache, else NVRTC; a cached binary the driver rejects is recompiled and replaced. */
static qf_status qf_ctx_build(qf_ctx_t *c, const qf_kernel_entry *k, const qf_kernel_instance *inst,
                              qf_loaded_kernel *e, qf_kernel_source *src) {
    void *cubin = NULL;
    size_t size = 0;
    *src = QF_KSRC_DISK;
    if (qf_cache_load(k->name, e->key, c->arch, &cubin, &size)) {
        if (qf_ctx_load_module(c, k, cubin, e) == QF_OK) {
            free(cubin);
            return QF_OK;
        }
        qf_warn("cached kernel %s (key %s) failed to load; recompiling", k->name, e->key);
        free(cubin);
    }
    *src = QF_KSRC_COMPILED;
    QF_TRY(qf_ctx_compile(c, k, inst, &cubin, &size));
    qf_status s = qf_ctx_load_module(c, k, cubin, e);
    if (s == QF_OK)
        qf_cache_store(k->name, e->key, c->arch, cubin, size);
    free(cubin);
    return s;
}

static qf_status qf_ctx_insert(qf_ctx_t *c, const qf_loaded_kernel *e) {
    if (c->n_kernels == c->cap_kernels) {
        int cap = c->cap_kernels ? 2 * c->cap_kernels : 16;
        qf_loaded_kernel *t = realloc(c->kernels, (size_t)cap * sizeof *t);
        if (!t)
            return qf_set_error(QF_ERR_OUT_OF_MEMORY, "kernel table: out of host memory");
        c->kernels = t;
        c->cap_kernels = cap;
    }
    c->kernels[c->n_kernels++] = *e;
    return QF_OK;
}

static void qf_ctx_note(qf_ctx_t *c, const qf_kernel_entry *k, const char *key,
                        qf_kernel_source src, double t0) {
    snprintf(c->last.name, sizeof c->last.name, "%s", k->name);
    memcpy(c->last.key, key, QF_KEY_HEX_LEN + 1);
    c->last.source = src;
    c->last.ms = qf_now_ms() - t0;
}

qf_status qf_ctx_kernel(qf_ctx_t *c, int kidx, const qf_kernel_instance *inst,
                        qf_loaded_kernel *out) {
    const qf_kernel_entry *k = &qf_kernels[kidx];
    double t0 = qf_now_ms();
    pthread_mutex_lock(&c->lock);
    qf_loaded_kernel *hit = qf_ctx_find(c, kidx, inst);
    if (hit) {
        *out = *hit;
        qf_ctx_note(c, k, hit->key, QF_KSRC_MEMORY, t0);
        pthread_mutex_unlock(&c->lock);
        return QF_OK;
    }
    qf_loaded_kernel e = {.kernel = kidx, .inst = *inst};
    qf_kernel_key(&qf_recipes[k->recipe], k, inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                  qf_nvrtc_header_count, c->arch, e.key);
    qf_kernel_source src;
    qf_status s = qf_ctx_build(c, k, inst, &e, &src);
    if (s == QF_OK)
        s = qf_ctx_insert(c, &e);
    if (s == QF_OK) {
        *out = e;
        qf_ctx_note(c, k, e.key, src, t0);
    }
    pthread_mutex_unlock(&c->lock);
    return s;
}
