/* ctx.h: the runtime context (device, arch, cuBLASLt handle) and its in-memory kernel table. */
#ifndef QF_CTX_H
#define QF_CTX_H

#include <pthread.h>

#include <cublasLt.h>

#include "cuda_api.h"
#include "kernel_key.h"

/* One loaded kernel instance. The table is keyed by (kernel index, instance), which determines
 * the fusion key for this context's fixed arch and NVRTC; M and K never enter it. */
#define QF_ROWS_VARIANTS 4 /* <name>_rows1, _rows2, _rows4, _rows8 */

typedef struct qf_loaded_kernel {
    int kernel;                 /* index into qf_kernels */
    qf_kernel_instance inst;
    char key[QF_KEY_HEX_LEN + 1];
    CUmodule module;
    CUfunction fn;              /* the variant's main entry */
    CUfunction fn_rows[QF_ROWS_VARIANTS]; /* optional row-in-registers entries, NULL if absent */
    int occ_rows[QF_ROWS_VARIANTS];       /* resident blocks per SM of each fn_rows */
} qf_loaded_kernel;

typedef struct qf_gemm_plan qf_gemm_plan; /* gemm_lt.c */

struct qf_ctx {
    int device;
    int arch;                   /* 10*major + minor */
    int sm_count;
    CUcontext cu_ctx;           /* the device's primary context */
    cublasLtHandle_t lt;
    void *workspace;            /* cuBLASLt workspace, device memory */
    size_t workspace_size;
    pthread_mutex_t lock;       /* guards kernels[], plans[] and last */
    qf_loaded_kernel *kernels;
    int n_kernels, cap_kernels;
    qf_gemm_plan *plans;
    int n_plans;
    qf_kernel_info last;
};

/* Finds the loaded kernel index kidx as instance inst, compiling or loading it from the disk cache
 * on first use (SPEC 5), and copies its entry points to *out. Thread-safe. Updates ctx->last. */
QF_INTERNAL qf_status qf_ctx_kernel(qf_ctx_t *ctx, int kidx, const qf_kernel_instance *inst,
                                    qf_loaded_kernel *out);

/* Releases the cached cuBLASLt plans (gemm_lt.c). */
QF_INTERNAL void qf_gemm_plans_free(qf_ctx_t *ctx);

/* Makes ctx's CUDA context current on the calling thread. */
QF_INTERNAL qf_status qf_ctx_bind(qf_ctx_t *ctx);

/* Registry lookups. Return -1 (and set QF_ERR_NOT_FOUND naming what was asked) when absent. */
QF_INTERNAL int qf_registry_recipe(const char *name);
QF_INTERNAL int qf_registry_kernel(int recipe, qf_op op, qf_role role, qf_norm norm, int zcg,
                                   qf_dtype in_dtype);

#endif /* QF_CTX_H */
