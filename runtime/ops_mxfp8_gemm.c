/* ops_mxfp8_gemm.c: the MXFP8 block-scaled GEMM op, y = A B^T (+ bias) in bf16 (SPEC 2.3).
 *
 * sm_89..sm_99: the recipe's generated kernel (templates/sm90_mxfp8_gemm.cu), which reads the FP8
 * bytes and the compact E8M0 scales directly. sm_100 and later: cuBLASLt's block-scaled GEMM
 * (VEC32_UE8M0, swizzled scales; gemm_lt.c). Both take K in whole 32-element blocks. */
#include <limits.h>

#include "ctx.h"
#include "validate.h"


/* An FP8 operand viewed as [*rows, *K] (K its last dim), in the recipe's format for `role`. */
static qf_status qf_mxg_operand(const char *op, const char *arg, const qf_tensor *t,
                                const qf_recipe *r, qf_role role, int64_t *rows,
                                int64_t *K) {
    int64_t n = qf_tensor_numel(t);
    if (!t || n < 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL or has no elements (ndim 1..%d, "
                            "every dim >= 1)", op, arg, QF_MAX_DIMS);
    const qf_dtype fmt = r->fmt[role];
    if (t->dtype != fmt)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.dtype is %s; recipe '%s' quantizes the "
                            "%s role to %s", op, arg, qf_dtype_name(t->dtype), r->name,
                            role == QF_ROLE_INPUT ? "input" : "weight", qf_dtype_name(fmt));
    *K = t->dims[t->ndim - 1];
    *rows = n / *K;
    qf_shape s = {arg, fmt, 2, {*rows, *K}, 0};
    return qf_check_buffer(op, arg, t, &s);
}

/* Padded E8M0 scales of an operand with `rows` rows: [roundup(rows,128), roundup(K/32,4)]. */
static qf_status qf_mxg_scales(const char *op, const char *arg, const qf_tensor *t, int64_t rows,
                               int64_t K) {
    qf_shape s = {arg, QF_DTYPE_E8M0, 2, {(rows + 127) / 128 * 128, (K / 32 + 3) / 4 * 4}, 0};
    return qf_check_buffer(op, arg, t, &s);
}

/* Checks every argument and fills the kernel's parameter block. */
static qf_status qf_mxg_check(const char *op, const qf_ctx_t *ctx, const qf_recipe *r,
                              const qf_tensor *a, const qf_tensor *a_scale, const qf_tensor *b,
                              const qf_tensor *b_scale, qf_scale_layout layout,
                              const qf_tensor *bias, qf_tensor *y, qf_mx_gemm_params *p) {
    int64_t Kb;
    QF_TRY(qf_mxg_operand(op, "a", a, r, QF_ROLE_INPUT, &p->M, &p->K));
    QF_TRY(qf_mxg_operand(op, "b", b, r, QF_ROLE_WEIGHT, &p->N, &Kb));
    if (Kb != p->K)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: b is [N=%lld, K=%lld] but a has K = %lld; "
                            "both operands are K-major with the same K", op, (long long)p->N,
                            (long long)Kb, (long long)p->K);
    if (p->K % QF_MX_BLOCK)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: K = %lld is not a multiple of %d: the GEMM "
                            "takes whole scale blocks; pad K with zeros", op, (long long)p->K,
                            QF_MX_BLOCK);
    QF_TRY(qf_mxg_scales(op, "a_scale", a_scale, p->M, p->K));
    QF_TRY(qf_mxg_scales(op, "b_scale", b_scale, p->N, p->K));
    QF_TRY(qf_check_gemm_outputs(op, r, bias, y, p->M, p->N, p->K));
    QF_TRY(qf_check_block_gemm_path(op, "MXFP8", "VEC32_UE8M0", "FP8", ctx->arch, layout, p->N));
    p->a = a->data;
    p->a_scale = a_scale->data;
    p->b = b->data;
    p->b_scale = b_scale->data;
    p->bias = bias ? bias->data : NULL;
    p->y = y->data;
    p->scale_cols = (p->K / QF_MX_BLOCK + 3) / 4 * 4;
    return QF_OK;
}

/* Launches the generated kernel: one block per QF_MX_GEMM_TILE_M x QF_MX_GEMM_TILE_N tile of y,
 * with the kernel's dynamic shared memory opted into (it is past the default 48 KiB) and the
 * whole carveout asked for shared memory (QF_MX_GEMM_MIN_BLOCKS blocks must fit on an SM). */
static qf_status qf_mxg_launch(qf_ctx_t *ctx, int kidx, qf_mx_gemm_params *p, void *stream) {
    const qf_kernel_entry *k = &qf_kernels[kidx];
    const qf_kernel_instance inst = qf_kernel_instance_default(k);
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_kernel(ctx, kidx, &inst, &lk));
    const int64_t tiles = (p->M + k->tile_m - 1) / k->tile_m *
                          ((p->N + QF_MX_GEMM_TILE_N - 1) / QF_MX_GEMM_TILE_N);
    if (tiles > INT_MAX)
        return qf_set_error(QF_ERR_UNSUPPORTED, "qf_gemm_mxfp8: M = %lld, N = %lld give %lld "
                            "tiles, more than one launch takes", (long long)p->M,
                            (long long)p->N, (long long)tiles);
    const int smem = ctx->arch >= 90 ? QF_MX_GEMM_SMEM_BYTES_FOR(QF_MX_GEMM_STAGES)
                                     : QF_MX_GEMM_SMEM_BYTES_FOR(QF_MX_GEMM_STAGES_SM89);
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    QF_CU_CHECK(cu->FuncSetAttribute(lk.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
    QF_CU_CHECK(cu->FuncSetAttribute(lk.fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                     CU_SHAREDMEM_CARVEOUT_MAX_SHARED));
    return qf_ctx_launch(ctx, lk.fn, (unsigned)tiles, k->block_threads, (unsigned)smem, p, stream);
}

qf_status qf_gemm_mxfp8(qf_ctx_t *ctx, const char *recipe, const qf_tensor *a,
                        const qf_tensor *a_scale, const qf_tensor *b, const qf_tensor *b_scale,
                        qf_scale_layout layout, const qf_tensor *bias, qf_tensor *y,
                        void *stream) {
    static const char op[] = "qf_gemm_mxfp8";
    int ri = -1;
    QF_TRY(qf_check_recipe(op, ctx, recipe, QF_FAMILY_MXFP8, "an MXFP8 recipe", &ri));
    if (bias && !bias->data)
        bias = NULL;
    qf_mx_gemm_params p = {0};
    QF_TRY(qf_mxg_check(op, ctx, &qf_recipes[ri], a, a_scale, b, b_scale, layout, bias, y, &p));
    if (ctx->arch >= 100) {
        QF_TRY(qf_ctx_ready(ctx, op, stream));
        return qf_gemm_lt_mxfp8(ctx, a, a_scale, b, b_scale, bias, y, p.M, p.N, p.K, stream);
    }
    int kidx = qf_registry_kernel(ri, QF_OP_GEMM, QF_ROLE_INPUT, QF_NORM_NONE, 0, a->dtype);
    if (kidx < 0)
        return QF_ERR_NOT_FOUND;
    QF_TRY(qf_ctx_ready(ctx, op, stream));
    return qf_mxg_launch(ctx, kidx, &p, stream);
}
