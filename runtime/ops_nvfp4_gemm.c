/* ops_nvfp4_gemm.c: the NVFP4 block-scaled GEMM op, y = alpha A B^T (+ bias) in bf16 (SPEC 2.4).
 *
 * sm_89..sm_99: the recipe's generated kernel (templates/sm90_nvfp4_gemm.cu), which reads the
 * packed E2M1 bytes, the compact E4M3 scales and the two amaxes directly. sm_100 and later:
 * cuBLASLt's block-scaled GEMM (VEC16_UE4M3, swizzled scales; gemm_lt.c) with alpha and beta in
 * device memory, written by the GEMM module's <name>_alpha entry. Both take K in whole 32-element
 * units (16-byte rows of packed data). */
#include <limits.h>
#include <stdio.h>

#include "ctx.h"
#include "validate.h"

#define QF_NV_GEMM_K_ALIGN 32

/* A packed E2M1 operand [rows, K/2] bytes (the quantizers' fake shapes count packed dims in
 * bytes), viewed as [*rows, *K] elements. */
static qf_status qf_nvg_operand(const char *op, const char *arg, const qf_tensor *t,
                                int64_t *rows, int64_t *K) {
    int64_t n = qf_tensor_numel(t);
    if (!t || n < 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL or has no elements (ndim 1..%d, "
                            "every dim >= 1)", op, arg, QF_MAX_DIMS);
    if (t->dtype != QF_DTYPE_E2M1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.dtype is %s; expected e2m1 (packed, two "
                            "elements per byte: the rowwise output of an NVFP4 quantizer)", op,
                            arg, qf_dtype_name(t->dtype));
    const int64_t bytes = t->dims[t->ndim - 1];
    *K = 2 * bytes;
    *rows = n / bytes;
    qf_shape s = {arg, QF_DTYPE_E2M1, 2, {*rows, bytes}, 0};
    return qf_check_buffer(op, arg, t, &s);
}

/* Padded E4M3 scales of an operand with `rows` rows: [roundup(rows,128), roundup(K/16,4)]. */
static qf_status qf_nvg_scales(const char *op, const char *arg, const qf_tensor *t, int64_t rows,
                               int64_t K) {
    qf_shape s = {arg, QF_DTYPE_E4M3, 2, {(rows + 127) / 128 * 128, (K / 16 + 3) / 4 * 4}, 0};
    return qf_check_buffer(op, arg, t, &s);
}

/* A global amax: fp32 [1]. */
static qf_status qf_nvg_amax(const char *op, const char *arg, const qf_tensor *t) {
    if (!t)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL; the GEMM's alpha needs the fp32 "
                            "[1] amax written by the operand's quantizer", op, arg);
    qf_shape s = {arg, QF_DTYPE_FP32, 1, {1}, 0};
    return qf_check_buffer(op, arg, t, &s);
}

/* The operands a and b: packed E2M1 with the same K, a whole number of 32-element units. */
static qf_status qf_nvg_check_ab(const char *op, const qf_tensor *a, const qf_tensor *b,
                                 qf_nv_gemm_params *p) {
    int64_t Kb;
    QF_TRY(qf_nvg_operand(op, "a", a, &p->M, &p->K));
    QF_TRY(qf_nvg_operand(op, "b", b, &p->N, &Kb));
    if (Kb != p->K)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: b is [N=%lld, K/2=%lld] bytes but a has "
                            "K = %lld; both operands are K-major with the same K", op,
                            (long long)p->N, (long long)(Kb / 2), (long long)p->K);
    if (p->K % QF_NV_GEMM_K_ALIGN)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: K = %lld is not a multiple of %d: each row "
                            "of packed data must be whole 16-byte units; pad K with zeros", op,
                            (long long)p->K, QF_NV_GEMM_K_ALIGN);
    return QF_OK;
}

/* Every argument of qf_gemm_nvfp4 but ctx and recipe. */
typedef struct qf_nvg_args {
    const qf_tensor *a, *a_scale, *amax_a, *b, *b_scale, *amax_b, *bias;
    qf_tensor *y;
    qf_scale_layout layout;
} qf_nvg_args;

/* Checks every argument and fills the kernel's parameter block. */
static qf_status qf_nvg_check(const char *op, const qf_ctx_t *ctx, const qf_recipe *r,
                              const qf_nvg_args *g, qf_nv_gemm_params *p) {
    QF_TRY(qf_nvg_check_ab(op, g->a, g->b, p));
    QF_TRY(qf_nvg_scales(op, "a_scale", g->a_scale, p->M, p->K));
    QF_TRY(qf_nvg_scales(op, "b_scale", g->b_scale, p->N, p->K));
    QF_TRY(qf_nvg_amax(op, "amax_a", g->amax_a));
    QF_TRY(qf_nvg_amax(op, "amax_b", g->amax_b));
    QF_TRY(qf_check_gemm_outputs(op, r, g->bias, g->y, p->M, p->N, p->K));
    QF_TRY(qf_check_block_gemm_path(op, "NVFP4", "VEC16_UE4M3", "FP4", ctx->arch, g->layout,
                                    p->N));
    p->a = g->a->data;
    p->a_scale = g->a_scale->data;
    p->b = g->b->data;
    p->b_scale = g->b_scale->data;
    p->amax_a = g->amax_a->data;
    p->amax_b = g->amax_b->data;
    p->bias = g->bias ? g->bias->data : NULL;
    p->y = g->y->data;
    p->scale_cols = (p->K / 16 + 3) / 4 * 4;
    return QF_OK;
}

/* Launches the generated kernel: one block per QF_NV_GEMM_TILE_M x QF_NV_GEMM_TILE_N tile of y,
 * with its dynamic shared memory opted into (past the default 48 KiB) and the whole carveout
 * asked for shared memory. */
static qf_status qf_nvg_launch(qf_ctx_t *ctx, const qf_loaded_kernel *lk, const qf_kernel_entry *k,
                               qf_nv_gemm_params *p, void *stream) {
    const int64_t tiles = (p->M + k->tile_m - 1) / k->tile_m *
                          ((p->N + QF_NV_GEMM_TILE_N - 1) / QF_NV_GEMM_TILE_N);
    if (tiles > INT_MAX)
        return qf_set_error(QF_ERR_UNSUPPORTED, "qf_gemm_nvfp4: M = %lld, N = %lld give %lld "
                            "tiles, more than one launch takes", (long long)p->M,
                            (long long)p->N, (long long)tiles);
    const int smem = ctx->arch >= 90 ? QF_NV_GEMM_SMEM_BYTES_FOR(QF_NV_GEMM_STAGES)
                                     : QF_NV_GEMM_SMEM_BYTES_FOR(QF_NV_GEMM_STAGES_SM89);
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    QF_CU_CHECK(cu->FuncSetAttribute(lk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     smem));
    QF_CU_CHECK(cu->FuncSetAttribute(lk->fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                     CU_SHAREDMEM_CARVEOUT_MAX_SHARED));
    return qf_ctx_launch(ctx, lk->fn, (unsigned)tiles, k->block_threads, (unsigned)smem, p,
                         stream);
}

/* sm_100 and later: {alpha, 0} into a stream-ordered device allocation by the module's
 * <name>_alpha entry, then cuBLASLt reading them in device pointer mode. NOTES: one allocation
 * per call (cudaMallocAsync/cudaFreeAsync on the same stream), so calls on different streams
 * never share an alpha slot. */
static qf_status qf_nvg_lt(qf_ctx_t *ctx, const qf_loaded_kernel *lk, const qf_kernel_entry *k,
                           const qf_nvg_args *g, qf_nv_gemm_params *p, void *stream) {
    char name[160];
    snprintf(name, sizeof name, "%s_alpha", k->name);
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    CUfunction fn;
    QF_CU_CHECK(cu->ModuleGetFunction(&fn, lk->module, name));
    void *ab = NULL;
    if (cudaMallocAsync(&ab, 2 * sizeof(float), (cudaStream_t)stream) != cudaSuccess)
        return qf_set_error(QF_ERR_CUDA, "qf_gemm_nvfp4: cudaMallocAsync of alpha failed: %s",
                            cudaGetErrorString(cudaGetLastError()));
    p->alpha_out = ab;
    qf_status s = qf_ctx_launch(ctx, fn, 1, 32, 0, p, stream);
    if (s == QF_OK)
        s = qf_gemm_lt_nvfp4(ctx, g->a, g->a_scale, g->b, g->b_scale, ab, g->bias, g->y, p->M,
                             p->N, p->K, stream);
    if (cudaFreeAsync(ab, (cudaStream_t)stream) != cudaSuccess && s == QF_OK)
        s = qf_set_error(QF_ERR_CUDA, "qf_gemm_nvfp4: cudaFreeAsync of alpha failed: %s",
                         cudaGetErrorString(cudaGetLastError()));
    return s;
}

qf_status qf_gemm_nvfp4(qf_ctx_t *ctx, const char *recipe, const qf_tensor *a,
                        const qf_tensor *a_scale, const qf_tensor *amax_a, const qf_tensor *b,
                        const qf_tensor *b_scale, const qf_tensor *amax_b, qf_scale_layout layout,
                        const qf_tensor *bias, qf_tensor *y, void *stream) {
    static const char op[] = "qf_gemm_nvfp4";
    int ri = -1;
    QF_TRY(qf_check_recipe(op, ctx, recipe, QF_FAMILY_NVFP4, "an NVFP4 recipe", &ri));
    const qf_nvg_args g = {a, a_scale, amax_a, b, b_scale, amax_b,
                           bias && bias->data ? bias : NULL, y, layout};
    qf_nv_gemm_params p = {0};
    QF_TRY(qf_nvg_check(op, ctx, &qf_recipes[ri], &g, &p));
    int kidx = qf_registry_kernel(ri, QF_OP_GEMM, QF_ROLE_INPUT, QF_NORM_NONE, 0, QF_DTYPE_E2M1);
    if (kidx < 0)
        return QF_ERR_NOT_FOUND;
    QF_TRY(qf_ctx_ready(ctx, op, stream));
    const qf_kernel_entry *k = &qf_kernels[kidx];
    const qf_kernel_instance inst = qf_kernel_instance_default(k);
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_kernel(ctx, kidx, &inst, &lk));
    return ctx->arch >= 100 ? qf_nvg_lt(ctx, &lk, k, &g, &p, stream)
                            : qf_nvg_launch(ctx, &lk, k, &p, stream);
}
