/* ctx.h: the runtime context (device, arch, cuBLASLt handle) and its in-memory kernel table. */
#ifndef QF_CTX_H
#define QF_CTX_H

#include <pthread.h>

#include <cublasLt.h>

#include "cuda_api.h"
#include "kernel_key.h"

/* One loaded kernel instance. The table is keyed by (kernel entry, instance), which determines
 * the fusion key for this context's fixed arch and NVRTC; M and K never enter it. NOTES: the key
 * is the entry's address, not an index into qf_kernels[]: recipes loaded at run time bring
 * entries of their own. */
#define QF_ROWS_VARIANTS 4 /* <name>_rows1, _rows2, _rows4, _rows8 */
#define QF_ROWS_IT(i) (1 << (i)) /* vectors per thread of variant i: 1, 2, 4, 8 */

typedef struct qf_loaded_kernel {
    const qf_kernel_entry *kernel; /* the variant (not owned; outlives the context) */
    qf_kernel_instance inst;
    char key[QF_KEY_HEX_LEN + 1];
    CUmodule module;
    CUfunction fn;              /* the variant's main entry (NULL for a GEMM module's staged
                                 * instance, which has none) */
    CUfunction fn_rows[QF_ROWS_VARIANTS]; /* optional row-in-registers entries, NULL if absent */
    int occ_rows[QF_ROWS_VARIANTS];       /* resident blocks per SM of each fn_rows */
    unsigned smem_rows[QF_ROWS_VARIANTS]; /* dynamic shared memory of each fn_rows launch: a norm's
                                           * gamma and beta (QF_ROWS_PARAM_SMEM), or 0 */
    CUfunction fn_amax;         /* <name>_amax, the first pass of two-pass modules (NVFP4
                                 * quantizers: statistics and global amax), NULL if absent */
    CUfunction fn_cols;         /* <name>_cols, the columnwise copy after a rows entry, or both
                                 * copies without a norm (per-tensor FP8, MXFP8), NULL if absent */
    int occ_cols;               /* resident blocks per SM of fn_cols */
    CUfunction fn_dequant;      /* <name>_dequant, a block-scaled copy to bf16 (the MXFP8 and NVFP4
                                 * GEMM modules), NULL if absent */
    CUfunction fn_alpha;        /* <name>_alpha, NVFP4's device alpha (its GEMM module), NULL if
                                 * absent */
    CUfunction fn_reduce;       /* <name>_reduce, the column sums after a partial-sums entry (the
                                 * norm backward's dgamma, dbeta), NULL if absent */
    CUfunction fn_grad;         /* <name>_grad, the activation's backward, NULL if absent */
} qf_loaded_kernel;

typedef struct qf_gemm_plan qf_gemm_plan; /* gemm_lt.c */

#define QF_GRAPH_SCRATCH_OLD 8 /* outgrown graph scratch buffers a context keeps */

/* Device times of the stages of the compositions (layernorm_linear, layernorm_mlp): while one is
 * attached to a context (qf_stage_times_attach), each stage run records a CUDA event before and
 * after itself on the call's stream. For tools (qfuse-bench's step split), not thread-safe. */
#define QF_STAGE_TIMES_MAX 64
typedef struct qf_stage_times {
    int n;                                  /* stages recorded (at most QF_STAGE_TIMES_MAX) */
    const char *name[QF_STAGE_TIMES_MAX];   /* each stage's name (static strings) */
    int is_gemm[QF_STAGE_TIMES_MAX];        /* 1: a GEMM stage */
    cudaEvent_t ev[2 * QF_STAGE_TIMES_MAX]; /* start and end of stage i: ev[2i], ev[2i + 1] */
} qf_stage_times;

struct qf_ctx {
    int host;                   /* 1: qf_ctx_init_host, 2: silent twin (qf_ctx_twin); 0: a device */
    int device;
    int arch;                   /* 10*major + minor */
    int sm_count;
    CUcontext cu_ctx;           /* the device's primary context */
    cublasLtHandle_t lt;
    void *workspace;            /* cuBLASLt workspace, device memory */
    size_t workspace_size;
    cudaMemPool_t pool;         /* stream-ordered scratch (qf_ctx_scratch); keeps its memory */
    void *graph_scratch;        /* the scratch of calls on a stream being captured: as large as
                                 * the largest request outside a capture (qf_ctx_scratch) */
    size_t graph_scratch_bytes;
    int graph_scratch_taken;    /* 1 while a captured call holds it */
    void *graph_scratch_old[QF_GRAPH_SCRATCH_OLD]; /* outgrown buffers: graphs captured earlier
                                                    * still use them; freed with the context */
    int n_graph_scratch_old;
    pthread_mutex_t lock;       /* guards kernels[], plans[], last and graph_scratch* */
    qf_loaded_kernel *kernels;
    int n_kernels, cap_kernels;
    qf_gemm_plan *plans;        /* one per GEMM problem, kept for the context's life */
    int n_plans, cap_plans;
    void (*plans_free)(qf_ctx_t *); /* releases plans[]: set by gemm_lt.c when it allocates the
                                     * table, called by qf_ctx_free and qf_ctx_twin_free */
    qf_kernel_info last;
    qf_stage_times *stage_times; /* NULL unless a tool attached one */
};

/* Finds kernel k as instance inst, compiling or loading it from the disk cache on first use
 * (numerics 5), and copies its entry points to *out. k must outlive ctx. Thread-safe.
 * Updates ctx->last. */
QF_INTERNAL qf_status qf_ctx_kernel(qf_ctx_t *ctx, const qf_kernel_entry *k,
                                    const qf_kernel_instance *inst, qf_loaded_kernel *out);

/* Makes room for one more item in a context's table *items (n used of *cap, each `size` bytes),
 * doubling it from 16 (the kernels, the cuBLASLt plans); the items may move. Errors:
 * QF_ERR_OUT_OF_MEMORY naming `what`. */
QF_INTERNAL qf_status qf_ctx_table_grow(void **items, int n, int *cap, size_t size,
                                        const char *what);

/* MXFP8 GEMM through cuBLASLt's VEC32_UE8M0 block scales (sm_100 and later; gemm_lt.c), TN:
 * y[M, N] = A[M, K] B[N, K]^T (+ bias) with swizzled E8M0 scales (numerics 2.3), y bf16 or fp32;
 * accumulate: y += ... (beta 1, fp32 y). The caller (qf_gemm) has checked every argument.
 * Errors: QF_ERR_UNSUPPORTED (cuBLASLt older than 12.8, at build or run time), QF_ERR_CUBLAS. */
QF_INTERNAL qf_status qf_gemm_lt_mxfp8(qf_ctx_t *ctx, const qf_tensor *a, const qf_tensor *a_scale,
                                       const qf_tensor *b, const qf_tensor *b_scale,
                                       const qf_tensor *bias, qf_tensor *y, int64_t M, int64_t N,
                                       int64_t K, int accumulate, void *stream);

/* Builds and releases the cuBLASLt descriptors of that GEMM without a device or handle: the
 * compile test of the Blackwell path on machines that cannot run it. */
QF_INTERNAL qf_status qf_gemm_lt_mxfp8_describe(int64_t M, int64_t N, int64_t K, qf_dtype ta,
                                                qf_dtype tb, int has_bias);

/* NVFP4 GEMM through cuBLASLt's VEC16_UE4M3 block scales (sm_100 and later; gemm_lt.c), TN:
 * y[M, N] = alpha * A B^T (+ bias) with A [M, K/2] and B [N, K/2] packed E2M1 and swizzled
 * E4M3 scales (numerics 2.4), y bf16 or fp32. alpha_beta: device fp32 [2] = {alpha, beta}, read
 * in CUBLASLT_POINTER_MODE_DEVICE (written on stream by the GEMM module's <name>_alpha entry;
 * beta 1, set by the caller, when accumulate). The caller (qf_gemm) has checked every
 * argument. Errors: QF_ERR_UNSUPPORTED (cuBLASLt older
 * than 12.8, at build or run time), QF_ERR_CUBLAS. */
QF_INTERNAL qf_status qf_gemm_lt_nvfp4(qf_ctx_t *ctx, const qf_tensor *a, const qf_tensor *a_scale,
                                       const qf_tensor *b, const qf_tensor *b_scale,
                                       const float *alpha_beta, const qf_tensor *bias, qf_tensor *y,
                                       int64_t M, int64_t N, int64_t K, int accumulate,
                                       void *stream);

/* Builds and releases the descriptors of that GEMM without a device (its compile test). */
QF_INTERNAL qf_status qf_gemm_lt_nvfp4_describe(int64_t M, int64_t N, int64_t K, int has_bias);

/* Makes ctx's CUDA context current on the calling thread. */
QF_INTERNAL qf_status qf_ctx_bind(qf_ctx_t *ctx);

/* Launches fn on a 1-D grid with one by-value parameter block (every generated kernel takes a
 * single `const qf_*_params p`), binding ctx first. Errors: QF_ERR_NO_DEVICE, QF_ERR_CUDA. */
QF_INTERNAL qf_status qf_ctx_launch(qf_ctx_t *ctx, CUfunction fn, unsigned grid, unsigned block,
                                    unsigned smem, void *params, void *stream);
/* Blocks of fn (`threads` threads, `smem` bytes of dynamic shared memory each) that ctx's device
 * holds at once: SMs x resident blocks per SM, or `fallback` where the driver cannot say. A
 * grid-stride kernel launched on more than that runs its last blocks in a second, partial wave
 * (an elementwise pass on 8 blocks per SM, 5 of them resident, took two waves' time). */
QF_INTERNAL int64_t qf_ctx_wave(const qf_ctx_t *ctx, CUfunction fn, unsigned threads,
                                unsigned smem, int64_t fallback);
/* The same on a grid_x x grid_y grid. */
QF_INTERNAL qf_status qf_ctx_launch_2d(qf_ctx_t *ctx, CUfunction fn, unsigned grid_x,
                                       unsigned grid_y, unsigned block, unsigned smem,
                                       void *params, void *stream);

/* One launch of a norm/quantize module that may have row-in-registers entries (`<name>_rowsN`,
 * QF_ROWS_VARIANTS of them): the smallest entry whose IT covers a row, on a persistent grid of
 * min(M, SMs x resident blocks) blocks, when the call allows it: rows_ok, rows of whole 16-byte
 * vectors (K * sizeof(x) % 16 == 0), x, out_row, gamma, beta (those not NULL) 16-byte aligned,
 * and rowwise output only, or a columnwise copy the module's `<name>_cols` entry can write after
 * the rows entry (M and K multiples of QF_COLS_TILE, out_col 16-byte aligned): then the rows
 * entry writes statistics, amax and the rowwise copy (if asked) and `<name>_cols` the transposed
 * copy, its blocks (at most SMs x resident blocks) walking the QF_COLS_TILE x QF_COLS_TILE tiles.
 * With cols_both and no norm, `<name>_cols` runs alone where it can (M and K multiples of
 * QF_COLS_TILE; x, da, out_row and out_col 16-byte aligned) and writes both copies from one read
 * of x. Otherwise the tiled entry on
 * cdiv(M, tile_m) blocks. A call with tiled_k (fp8_block: its 128x1 blocks are taller than a
 * `_cols` tile) has no `_cols` entry: its columnwise copy comes from the tiled entry, on
 * cdiv(M, tile_m) x cdiv(K, tiled_k) blocks (each walking tiled_k / tile_m chunks of its strip)
 * when the kernel has no norm, on cdiv(M, tile_m) blocks with one (the statistics need whole
 * rows); with cols_after_rows and a norm, where a rows entry can run (rows_ok, alignment, the
 * row within 8 vectors per thread) that entry writes the statistics (and the rowwise copy) and
 * then the tiled entry, with p->pass 1, the columnwise copy on the cdiv(M, tile_m) x
 * cdiv(K, tiled_k) grid. p is the call's parameter block. Errors: QF_ERR_UNSUPPORTED (M too
 * large for one grid), QF_ERR_CUDA (tiled_smem refused), as qf_ctx_launch. */
/* 1 when p is 16-byte aligned (the kernels' vector loads and stores; NULL is). */
static inline int qf_aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

typedef struct qf_rows_call {
    qf_dtype xdt;
    int rows_ok; /* 0: the variant has no rows path for this call (e.g. MXFP8 32x32 tiles) */
    int no_cols; /* 1: this launch writes no columnwise copy (fp8_current's statistics and amax
                  * pass): a rows entry runs alone, without `<name>_cols` */
    int cols_both; /* 1 (per-tensor FP8): for a kernel without a norm, or in current scaling's
                    * cast pass (p->pass 1, the statistics in memory), `<name>_cols` writes both
                    * copies (and merges the amax, without a norm); it runs alone where it can
                    * (see above) */
    unsigned tiled_k; /* > 0: columns per block of the tiled entry along K (see above) */
    unsigned tiled_smem; /* dynamic shared memory of the tiled entry, bytes (0: none) */
    int cols_after_rows; /* 1 (fp8_block): a kernel with a norm writes a columnwise copy in two
                          * launches where a rows entry can run: the rows entry the statistics
                          * (and the rowwise copy), then the tiled entry, with p->pass = 1, on the
                          * tiled_k grid, the columnwise copy from them */
    int cols_after_stats; /* 1 (fp8_block, with cols_after_rows): where qf_stats_cols_ok allows,
                           * the `<name>_cols` entry writes that columnwise copy instead; it
                           * writes no other (without a norm the tiled entry writes it) */
    unsigned cols_tile_m; /* rows of the `<name>_cols` entry's tiles (0: QF_COLS_TILE) */
} qf_rows_call;
QF_INTERNAL qf_status qf_ctx_launch_rows(qf_ctx_t *ctx, const qf_loaded_kernel *lk,
                                         const qf_kernel_entry *k, const qf_rows_call *c,
                                         qf_q_params *p, void *stream);

/* Stream-ordered scratch of n bytes (256-byte aligned) from ctx's memory pool, valid for work
 * queued on stream until qf_ctx_scratch_free(ctx, *p, ...) on the same stream. The pool keeps
 * freed memory for the next call (no allocation from the driver once it has grown), and calls on
 * different streams never share a buffer. While stream is being captured into a CUDA graph
 * nothing is allocated: the call gets ctx->graph_scratch, which every call outside a capture
 * grows to its own request (SPEC 6: after one warm-up call an op captures without allocating).
 * So the graphs of one context share that buffer: replay them one at a time, and capture on one
 * stream at a time. `what` names the buffer in the error. Errors: QF_ERR_OUT_OF_MEMORY (device),
 * QF_ERR_UNSUPPORTED (a captured call larger than every call before the capture, or a second
 * one holding it at once), QF_ERR_CUDA. */
QF_INTERNAL qf_status qf_ctx_scratch(qf_ctx_t *ctx, size_t n, void **p, const char *what,
                                     void *stream);
/* Returns p (NULL: nothing) to the pool after the work queued on stream. Errors: QF_ERR_CUDA. */
QF_INTERNAL qf_status qf_ctx_scratch_free(qf_ctx_t *ctx, void *p, void *stream);

/* cudaMemsetAsync(p, 0, n) on stream; p NULL does nothing. `what` names the buffer in the error.
 * Errors: QF_ERR_CUDA. */
QF_INTERNAL qf_status qf_zero_async(void *p, size_t n, const char *what, void *stream);

/* dbias [N] = the column sums of part [blocks, N] (fp32, another kernel's partials, in block
 * order), rounded once to dbias's dtype: the _reduce entry of the dbias module k on stream.
 * Errors: as qf_ctx_load, QF_ERR_CUDA. */
QF_INTERNAL qf_status qf_dbias_reduce(qf_ctx_t *ctx, const char *op, const qf_kernel_entry *k,
                                      const float *part, int32_t blocks, int64_t N,
                                      qf_tensor *dbias, void *stream);

/* The activation (da NULL: out = a [M, F] from h) or its backward (out = dh [M, Fin] from da
 * [M, F] and h) as qf_activation_fwd / qf_activation_bwd compute it, which also writes the amax
 * of out as stored into amax ([1] fp32, zeroed first on stream; NaN kept, numerics 2.2): what
 * current scaling's quantizer of out would find in its amax pass, so qf_quantize_cast can skip
 * that pass. The same checks and errors as those ops, and amax NULL, not [1] fp32 or overlapping
 * h, da or out: QF_ERR_INVALID_ARG. */
QF_INTERNAL qf_status qf_activation_amax(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                                         const qf_tensor *h, const qf_tensor *da, qf_tensor *out,
                                         qf_tensor *amax, void *stream);

/* Current scaling's quantization of x [M, K] (no norm) from the amax already in out's amax slot
 * (qf_activation_amax wrote it): the thread's amax reduction (qf_set_amax_reduce), then the cast
 * pass alone; the same bytes as qf_quantize of x when that amax is x's. Errors: as qf_quantize;
 * a recipe of another family: QF_ERR_INVALID_ARG. */
QF_INTERNAL qf_status qf_quantize_cast(qf_ctx_t *ctx, const char *recipe, qf_role role,
                                       const qf_tensor *x, qf_quantized *out, void *stream);

/* qf_ctx_init_host is public (qfuse.h). */

/* Fills *twin as a silent device-less copy of ctx (same arch) for a dry run: the ops check their
 * arguments against it and stop with QF_ERR_NO_DEVICE, recording no message. Release with
 * qf_ctx_twin_free. */
QF_INTERNAL void qf_ctx_twin(const qf_ctx_t *ctx, qf_ctx_t *twin);
QF_INTERNAL void qf_ctx_twin_free(qf_ctx_t *twin);

/* Called by every op after its argument checks and before any device work: binds ctx and checks
 * that stream (a CUstream/cudaStream_t; NULL and the special handles mean the current context's)
 * belongs to ctx's CUDA context. Returns QF_ERR_NO_DEVICE for a device-less context,
 * QF_ERR_INVALID_ARG for a stream of another context, QF_ERR_CUDA when the driver fails. */
QF_INTERNAL qf_status qf_ctx_ready(qf_ctx_t *ctx, const char *op, void *stream);

/* What every op does after its argument checks: qf_ctx_ready, then kernel k as instance inst
 * (NULL: k's default) through qf_ctx_kernel. k NULL (no registry entry) is QF_ERR_NOT_FOUND.
 * Errors as the two. */
QF_INTERNAL qf_status qf_ctx_load(qf_ctx_t *ctx, const char *op, void *stream,
                                  const qf_kernel_entry *k, const qf_kernel_instance *inst,
                                  qf_loaded_kernel *out);

/* Attaches t to ctx (its events created, n = 0): the compositions' stages are timed from then
 * on, until qf_stage_times_detach (which destroys the events). Errors: QF_ERR_INVALID_ARG (NULL,
 * a host context, one already attached), QF_ERR_CUDA. */
QF_INTERNAL qf_status qf_stage_times_attach(qf_ctx_t *ctx, qf_stage_times *t);
QF_INTERNAL void qf_stage_times_detach(qf_ctx_t *ctx);
/* Milliseconds of recorded stage i, once its stream has passed it (after a synchronize). */
QF_INTERNAL float qf_stage_times_ms(const qf_stage_times *t, int i);

/* Registry lookups (registry.c). Return NULL (and set QF_ERR_NOT_FOUND naming what was asked)
 * when absent. The entries are not owned by the caller and live as long as the program. */
QF_INTERNAL const qf_recipe *qf_registry_recipe(const char *name);
QF_INTERNAL const qf_kernel_entry *qf_registry_kernel(const qf_recipe *r, qf_op op,
                                                      qf_role role, qf_norm norm, int zcg,
                                                      qf_dtype in_dtype);
/* The recipe a kernel entry belongs to. */
QF_INTERNAL const qf_recipe *qf_registry_kernel_recipe(const qf_kernel_entry *k);

#endif /* QF_CTX_H */
