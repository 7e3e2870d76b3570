/* jit_table.c: a context's in-memory kernel table in front of the disk cache and NVRTC (DESIGN
 * data flow 3): a kernel instance is looked up by (kernel entry, instance), else loaded from the
 * disk cache, else compiled, and its entry points found. */
#include <string.h>
#include <time.h>

#include "ctx.h"
#include "jit_cache.h"
#include "jit_compile.h"

static double qf_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static qf_loaded_kernel *qf_ctx_find(qf_ctx_t *c, const qf_kernel_entry *k,
                                     const qf_kernel_instance *inst) {
    for (int i = 0; i < c->n_kernels; i++) {
        qf_loaded_kernel *e = &c->kernels[i];
        if (e->kernel == k && qf_kernel_instance_equal(&e->inst, inst))
            return e;
    }
    return NULL;
}

/* Compiles kernel k (prelude + template, qf_kernel_source) for the context's arch (NVRTC),
 * returning a malloc'ed CUBIN. */
static qf_status qf_ctx_compile(qf_ctx_t *c, const qf_kernel_entry *k,
                                const qf_kernel_instance *inst, void **cubin, size_t *size) {
    char store[QF_KERNEL_MAX_EXTRA][48], archbuf[64];
    const char *extra[QF_KERNEL_MAX_EXTRA], *opts[QF_JIT_MAX_OPTIONS];
    int n_extra = qf_kernel_extra_options(k, inst, store, extra);
    int n_opts = qf_jit_options(c->arch, extra, n_extra, opts, archbuf);
    QF_ASSERT(n_opts >= 0); /* at most QF_KERNEL_MAX_EXTRA extras: always fits */
    char *source = qf_kernel_text(k);
    if (!source)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "%s: out of host memory for its source", k->name);
    qf_status s = qf_jit_compile(k->name, source, qf_nvrtc_header_names, qf_nvrtc_headers,
                                 qf_nvrtc_header_count, opts, n_opts, cubin, size);
    free(source);
    return s;
}

/* The optional <name>_rowsN entries of a module, their dynamic shared memory (a norm's gamma
 * and beta as fp32, QF_ROWS_PARAM_SMEM; the attribute set where it exceeds the default 48 KB)
 * and their occupancy with it (absent ones, and ones the driver refuses, stay NULL: the tiled
 * entry runs instead). NOTES: the registry lists the entry points each module has (k->entries,
 * from the generator; by instance, qf_kernel_instance_entries); others are not probed, so no
 * failing cuModuleGetFunction call is made (sanitizers report those as API errors). */
static void qf_ctx_find_rows(const qf_cu_api *cu, const qf_kernel_entry *k, qf_loaded_kernel *e) {
    static const qf_entry rows[QF_ROWS_VARIANTS] = {QF_ENTRY_ROWS1, QF_ENTRY_ROWS2,
                                                    QF_ENTRY_ROWS4, QF_ENTRY_ROWS8};
    for (int i = 0; i < QF_ROWS_VARIANTS; i++) {
        e->fn_rows[i] = NULL;
        e->occ_rows[i] = 0;
        e->smem_rows[i] = 0;
        if (!(qf_kernel_instance_entries(k, &e->inst) & QF_ENTRY_BIT(rows[i])))
            continue; /* only quantizers have them (a GEMM's E2M1 input has no byte size) */
        e->smem_rows[i] = QF_ROWS_PARAM_SMEM(QF_ROWS_IT(i), (unsigned)qf_dtype_size(k->in_dtype),
                                             k->norm, k->block_threads);
        char name[160];
        snprintf(name, sizeof name, "%s%s", k->name, qf_kernel_entry_suffix(rows[i]));
        if (cu->ModuleGetFunction(&e->fn_rows[i], e->module, name) != CUDA_SUCCESS ||
            (e->smem_rows[i] > 48u * 1024u &&
             cu->FuncSetAttribute(e->fn_rows[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  (int)e->smem_rows[i]) != CUDA_SUCCESS) ||
            cu->OccupancyMaxActiveBlocksPerMultiprocessor(&e->occ_rows[i], e->fn_rows[i],
                                                          (int)k->block_threads,
                                                          e->smem_rows[i]) != CUDA_SUCCESS ||
            e->occ_rows[i] < 1)
            e->fn_rows[i] = NULL;
    }
}

/* The entry `which` into *fn (NULL when k's instance e->inst does not hold it:
 * qf_kernel_instance_entries). NOTES: other modules are not probed (see qf_ctx_find_rows), and a
 * module that lists the entry must have it. */
static qf_status qf_ctx_find_entry(const qf_cu_api *cu, const qf_kernel_entry *k,
                                   const qf_loaded_kernel *e, qf_entry which, CUfunction *fn) {
    *fn = NULL;
    if (!(qf_kernel_instance_entries(k, &e->inst) & QF_ENTRY_BIT(which)))
        return QF_OK;
    char name[160];
    snprintf(name, sizeof name, "%s%s", k->name, qf_kernel_entry_suffix(which));
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
    qf_ctx_find_rows(cu, k, e);
    qf_status s = qf_ctx_find_entry(cu, k, e, QF_ENTRY_MAIN, &e->fn);
    if (s == QF_OK)
        s = qf_ctx_find_entry(cu, k, e, QF_ENTRY_AMAX, &e->fn_amax);
    if (s == QF_OK)
        s = qf_ctx_find_entry(cu, k, e, QF_ENTRY_COLS, &e->fn_cols);
    e->occ_cols = 0;
    if (s == QF_OK && e->fn_cols &&
        cu->OccupancyMaxActiveBlocksPerMultiprocessor(&e->occ_cols, e->fn_cols,
                                                      (int)k->block_threads, 0) != CUDA_SUCCESS)
        e->occ_cols = 0; /* the launch then takes one block per SM */
    if (s == QF_OK)
        s = qf_ctx_find_entry(cu, k, e, QF_ENTRY_DEQUANT, &e->fn_dequant);
    if (s == QF_OK)
        s = qf_ctx_find_entry(cu, k, e, QF_ENTRY_ALPHA, &e->fn_alpha);
    if (s == QF_OK)
        s = qf_ctx_find_entry(cu, k, e, QF_ENTRY_REDUCE, &e->fn_reduce);
    if (s == QF_OK)
        s = qf_ctx_find_entry(cu, k, e, QF_ENTRY_GRAD, &e->fn_grad);
    if (s != QF_OK)
        cu->ModuleUnload(e->module);
    return s;
}

/* Disk cache, else NVRTC; a cached binary the driver rejects is recompiled and replaced. *src:
 * QF_KSRC_DISK or QF_KSRC_COMPILED; *on_disk: 1 when the binary is in the disk cache afterwards
 * (loaded from it, or stored to it). */
static qf_status qf_ctx_build(qf_ctx_t *c, const qf_kernel_entry *k, const qf_kernel_instance *inst,
                              qf_loaded_kernel *e, qf_kernel_source *src, int *on_disk) {
    void *cubin = NULL;
    size_t size = 0;
    *src = QF_KSRC_DISK;
    *on_disk = 1;
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
    if (s == QF_OK) {
        qf_cache_store(k->name, e->key, c->arch, cubin, size);
        *on_disk = qf_cache_last_stored() == 1;
    }
    free(cubin);
    return s;
}

static qf_status qf_ctx_insert(qf_ctx_t *c, const qf_loaded_kernel *e) {
    QF_TRY(qf_ctx_table_grow((void **)&c->kernels, c->n_kernels, &c->cap_kernels,
                             sizeof *c->kernels, "kernel table"));
    c->kernels[c->n_kernels++] = *e;
    return QF_OK;
}

static void qf_ctx_note(qf_ctx_t *c, const qf_kernel_entry *k, const char *key,
                        qf_kernel_source src, int on_disk, double t0) {
    snprintf(c->last.name, sizeof c->last.name, "%s", k->name);
    memcpy(c->last.key, key, QF_KEY_HEX_LEN + 1);
    c->last.source = src;
    c->last.on_disk = on_disk;
    c->last.ms = qf_now_ms() - t0;
}

qf_status qf_ctx_kernel(qf_ctx_t *c, const qf_kernel_entry *k, const qf_kernel_instance *inst,
                        qf_loaded_kernel *out) {
    double t0 = qf_now_ms();
    pthread_mutex_lock(&c->lock);
    qf_loaded_kernel *hit = qf_ctx_find(c, k, inst);
    if (hit) {
        *out = *hit;
        qf_ctx_note(c, k, hit->key, QF_KSRC_MEMORY, 0, t0);
        pthread_mutex_unlock(&c->lock);
        return QF_OK;
    }
    qf_loaded_kernel e = {.kernel = k, .inst = *inst};
    qf_kernel_key(qf_registry_kernel_recipe(k), k, inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                  qf_nvrtc_header_count, c->arch, e.key);
    qf_kernel_source src;
    int on_disk;
    qf_status s = qf_ctx_build(c, k, inst, &e, &src, &on_disk);
    if (s == QF_OK)
        s = qf_ctx_insert(c, &e);
    if (s == QF_OK) {
        *out = e;
        qf_ctx_note(c, k, e.key, src, on_disk, t0);
    }
    pthread_mutex_unlock(&c->lock);
    return s;
}
