/* launch.c: binding a context, checking a stream, and launching generated kernels (one parameter
 * block each; the row-in-registers and columnwise entries of norm/quantize modules). */
#include <string.h>

#include <cuda_runtime_api.h>

#include "ctx.h"

qf_status qf_ctx_bind(qf_ctx_t *ctx) {
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    QF_CU_CHECK(cu->CtxSetCurrent(ctx->cu_ctx));
    return QF_OK;
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

qf_status qf_ctx_load(qf_ctx_t *ctx, const char *op, void *stream, const qf_kernel_entry *k,
                      const qf_kernel_instance *inst, qf_loaded_kernel *out) {
    if (!k)
        return QF_ERR_NOT_FOUND;
    QF_TRY(qf_ctx_ready(ctx, op, stream));
    const qf_kernel_instance def = qf_kernel_instance_default(k);
    return qf_ctx_kernel(ctx, k, inst ? inst : &def, out);
}

qf_status qf_ctx_launch_2d(qf_ctx_t *ctx, CUfunction fn, unsigned grid_x, unsigned grid_y,
                           unsigned block, unsigned smem, void *params, void *stream) {
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    QF_TRY(qf_ctx_bind(ctx));
    void *args[] = {params};
    QF_CU_CHECK(cu->LaunchKernel(fn, grid_x, grid_y, 1, block, 1, 1, smem, (CUstream)stream, args,
                                 NULL));
    return QF_OK;
}

int64_t qf_ctx_wave(const qf_ctx_t *ctx, CUfunction fn, unsigned threads, unsigned smem,
                    int64_t fallback) {
    const qf_cu_api *cu = qf_cu();
    int occ = 0;
    if (!cu || cu->OccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, (int)threads, smem) !=
                   CUDA_SUCCESS || occ < 1)
        return fallback;
    return (int64_t)ctx->sm_count * occ;
}

qf_status qf_ctx_launch(qf_ctx_t *ctx, CUfunction fn, unsigned grid, unsigned block,
                        unsigned smem, void *params, void *stream) {
    return qf_ctx_launch_2d(ctx, fn, grid, 1, block, smem, params, stream);
}

/* Rows of c's `<name>_cols` tiles (their columns: QF_COLS_TILE). */
static int64_t qf_cols_tile_m(const qf_rows_call *c) {
    return c->cols_tile_m ? c->cols_tile_m : QF_COLS_TILE;
}

/* 1 when the `<name>_cols` entry can write c's columnwise copy (see qf_ctx_launch_rows). */
static int qf_cols_ok(const qf_loaded_kernel *lk, const qf_rows_call *c, const qf_q_params *p) {
    const int64_t tm = qf_cols_tile_m(c);
    return lk->fn_cols && p->M % tm == 0 && p->K % QF_COLS_TILE == 0 &&
           qf_aligned16(p->out_col) && (p->M / tm) * (p->K / QF_COLS_TILE) <= 0x7fffffff;
}

/* 1 when c's `<name>_cols` entry runs alone and writes both copies (cols_both, a kernel without a
 * norm or current scaling's cast pass, p->pass 1, whose statistics are in memory; the columnwise
 * copy asked for, the entry's shape and 16-byte alignment of x, da and out_row: its vector loads
 * and stores). */
static int qf_cols_alone(const qf_loaded_kernel *lk, const qf_kernel_entry *k,
                         const qf_rows_call *c, const qf_q_params *p) {
    return c->cols_both && (k->norm == QF_NORM_NONE || p->pass == 1) &&
           (lk->inst.outputs & QF_OUT_COLUMNWISE) &&
           !c->no_cols && qf_cols_ok(lk, c, p) && qf_aligned16(p->x) && qf_aligned16(p->da) &&
           qf_aligned16(p->out_row);
}

/* The `<name>_cols` entry on min(tiles, SMs x resident blocks) blocks, each walking tiles (alone,
 * a block merges its amax once; after a rows entry it measured 3% slower than the old one block
 * per tile, which with the walking body measured 7% slower). */
static qf_status qf_ctx_launch_cols(qf_ctx_t *ctx, const qf_loaded_kernel *lk,
                                    const qf_kernel_entry *k, const qf_rows_call *c,
                                    qf_q_params *p, void *stream) {
    const int64_t tiles = (p->M / qf_cols_tile_m(c)) * (p->K / QF_COLS_TILE);
    const int64_t slots = (int64_t)ctx->sm_count * (lk->occ_cols > 0 ? lk->occ_cols : 1);
    return qf_ctx_launch(ctx, lk->fn_cols, (unsigned)(slots < tiles ? slots : tiles),
                         k->block_threads, 0, p, stream);
}

/* 1 when a call of kernel k writes its columnwise copy from statistics a rows entry wrote first
 * (qf_rows_call.cols_after_rows with a norm). */
static int qf_stats_first(const qf_rows_call *c, const qf_kernel_entry *k) {
    return c->cols_after_rows && k->norm != QF_NORM_NONE;
}

/* 1 when, after a rows entry wrote the statistics (qf_stats_first), the `<name>_cols` entry can
 * write the columnwise copy from them (c->cols_after_stats: 16-bit x, its tiles whole, out_col
 * 16-byte aligned); else the tiled entry does. The rows entry that ran (qf_rows_entry) already
 * required x, gamma and beta 16-byte aligned, and a kernel with a norm has no prologue (its
 * template asserts it). */
static int qf_stats_cols_ok(const qf_loaded_kernel *lk, const qf_rows_call *c,
                            const qf_q_params *p) {
    return c->cols_after_stats && qf_dtype_size(c->xdt) == 2 && qf_cols_ok(lk, c, p);
}

/* Index into lk->fn_rows of the entry that runs c, or -1 for the tiled entry. */
static int qf_rows_entry(const qf_loaded_kernel *lk, const qf_kernel_entry *k,
                         const qf_rows_call *c, const qf_q_params *p) {
    const int64_t esz = (int64_t)qf_dtype_size(c->xdt), epv = 16 / esz;
    const int cols =
        (lk->inst.outputs & QF_OUT_COLUMNWISE) != 0 && !c->no_cols && !qf_stats_first(c, k);
    /* cols_after_stats: the `_cols` entry writes a columnwise copy only from a norm's statistics */
    if (!c->rows_ok || (cols && (c->cols_after_stats || !qf_cols_ok(lk, c, p))) ||
        (p->K * esz) % 16 != 0 ||
        !qf_aligned16(p->x) || !qf_aligned16(p->out_row) || !qf_aligned16(p->gamma) ||
        !qf_aligned16(p->beta))
        return -1;
    /* a SwiGLU dh prologue: a vector must lie in one half of dh (qf_dev_act.cuh) */
    if (lk->inst.prologue == QF_PROLOGUE_DACT(QF_ACT_SWIGLU) && (p->K / 2 * esz) % 16 != 0)
        return -1;
    const int64_t vecs_per_thread = (p->K / epv + k->block_threads - 1) / k->block_threads;
    /* without a norm the widest entry allowed walks a longer row in chunks (qf_dev_norm.cuh
     * rows_load); an activation prologue holds two or three input vectors per output vector, so
     * its chunks stay at 2 vectors per thread (more would cost occupancy, not save a read) */
    const int last = lk->inst.prologue != QF_PROLOGUE_NONE ? 1 : QF_ROWS_VARIANTS - 1;
    for (int i = 0; i <= last; i++)
        if (vecs_per_thread <= QF_ROWS_IT(i) && lk->fn_rows[i])
            return i;
    return k->norm == QF_NORM_NONE && lk->fn_rows[last] ? last : -1;
}

/* The tiled entry: cdiv(M, tile_m) blocks, times cdiv(K, tiled_k) (at most 65535) when the call
 * has tiled_k and the kernel no norm or its statistics given (p->pass 1 after a rows entry,
 * cols_after_rows); the kernel walks its chunks with stride gridDim.y. With
 * tiled_smem, that much dynamic shared memory per block (the attribute set first). */
static qf_status qf_ctx_launch_tiled(qf_ctx_t *ctx, const qf_loaded_kernel *lk,
                                     const qf_kernel_entry *k, const qf_rows_call *c,
                                     qf_q_params *p, void *stream) {
    const int64_t grid = (p->M + k->tile_m - 1) / k->tile_m;
    if (grid > 0x7fffffff)
        return qf_set_error(QF_ERR_UNSUPPORTED, "M = %lld is too large for one launch",
                            (long long)p->M);
    int64_t gy = 1;
    if (c->tiled_k && (k->norm == QF_NORM_NONE || p->pass == 1)) {
        gy = (p->K + c->tiled_k - 1) / c->tiled_k;
        gy = gy < 65535 ? gy : 65535;
    }
    if (c->tiled_smem) {
        const qf_cu_api *cu = qf_cu();
        if (!cu)
            return QF_ERR_NO_DEVICE;
        if (cu->FuncSetAttribute(lk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 (int)c->tiled_smem) != CUDA_SUCCESS)
            return qf_set_error(QF_ERR_CUDA, "%u bytes of shared memory per block refused for %s",
                                c->tiled_smem, k->name);
    }
    return qf_ctx_launch_2d(ctx, lk->fn, (unsigned)grid, (unsigned)gy, k->block_threads,
                            c->tiled_smem, p, stream);
}

qf_status qf_ctx_launch_rows(qf_ctx_t *ctx, const qf_loaded_kernel *lk, const qf_kernel_entry *k,
                             const qf_rows_call *c, qf_q_params *p, void *stream) {
    if (qf_cols_alone(lk, k, c, p))
        return qf_ctx_launch_cols(ctx, lk, k, c, p, stream);
    if (k->norm == QF_NORM_NONE && p->dbias_part && !c->no_cols) /* only `_cols` writes them */
        return qf_set_error(QF_ERR_INTERNAL, "%s: dbias's partials asked for where the _cols "
                            "entry cannot run alone", k->name);
    const int r = qf_rows_entry(lk, k, c, p);
    if (r >= 0) { /* persistent grid: every resident block loops over rows */
        const int64_t slots = (int64_t)ctx->sm_count * lk->occ_rows[r];
        const int64_t grid = p->M < slots ? p->M : slots;
        QF_TRY(qf_ctx_launch(ctx, lk->fn_rows[r], (unsigned)grid, k->block_threads,
                             lk->smem_rows[r], p, stream));
        if (!(lk->inst.outputs & QF_OUT_COLUMNWISE) || c->no_cols)
            return QF_OK;
        if (qf_stats_first(c, k)) {
            p->pass = 1; /* the statistics are written: the columnwise copy from them */
            const qf_status s = qf_stats_cols_ok(lk, c, p)
                                    ? qf_ctx_launch_cols(ctx, lk, k, c, p, stream)
                                    : qf_ctx_launch_tiled(ctx, lk, k, c, p, stream);
            p->pass = 0;
            return s;
        }
        return qf_ctx_launch_cols(ctx, lk, k, c, p, stream);
    }
    return qf_ctx_launch_tiled(ctx, lk, k, c, p, stream);
}

qf_status qf_zero_async(void *p, size_t n, const char *what, void *stream) {
    if (p && cudaMemsetAsync(p, 0, n, (cudaStream_t)stream) != cudaSuccess)
        return qf_set_error(QF_ERR_CUDA, "cudaMemsetAsync of %s failed: %s", what,
                            cudaGetErrorString(cudaGetLastError()));
    return QF_OK;
}
