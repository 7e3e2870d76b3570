/* op_gemm.c: the GEMM op, y = A B^T (+ bias) in bf16 for every family (numerics 2, 6): the operand
 * checks, one dispatch on the recipe's family, and each family's path.
 *
 * Who runs it on an architecture is the family's row (qf_family_gemm_path, family.c): per-tensor
 * FP8 is cuBLASLt with per-tensor scales (gemm_lt.c); MXFP8 and NVFP4 run the recipe's generated
 * kernel on sm_89..sm_99 (templates/sm90_{mxfp8,nvfp4}_gemm.cu, reading the quantized bytes and
 * compact scales directly) and cuBLASLt's block-scaled GEMM on sm_100 and later (VEC32_UE8M0,
 * VEC16_UE4M3; swizzled scales). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "qf_arch.h"
#include "ctx.h"
#include "gemm_lt.h"
#include "names.h"
#include "validate.h"

#define QF_NV_GEMM_K_ALIGN 32

/* The slots one copy of a quantized tensor reads from. */
typedef struct qf_copy_slots {
    qf_slot data, scale_inv, amax;
} qf_copy_slots;

static const qf_copy_slots qf_copy_slot_table[] = {
    [QF_COPY_ROWWISE] = {QF_SLOT_ROWWISE_DATA, QF_SLOT_ROWWISE_SCALE_INV, QF_SLOT_AMAX_ROWWISE},
    [QF_COPY_COLUMNWISE] = {QF_SLOT_COLUMNWISE_DATA, QF_SLOT_COLUMNWISE_SCALE_INV,
                            QF_SLOT_AMAX_COLUMNWISE},
};
_Static_assert(sizeof qf_copy_slot_table / sizeof qf_copy_slot_table[0] == QF_COPY_COUNT,
               "qf_copy_slot_table out of sync with qf_copy");

/* One operand resolved to its tensors, each with its name for messages ("a.rowwise_data"). */
typedef struct qf_g_opnd {
    const qf_tensor *data, *scale, *amax, *scale_inv; /* scale_inv: the per-tensor FP8 slot */
    char data_arg[40], scale_arg[40], amax_arg[40], scale_inv_arg[40];
    qf_scale_layout layout;
} qf_g_opnd;

/* {===================================================================== common checks */

static qf_status qf_g_operand(const char *op, const char *arg, const qf_operand *o,
                              qf_g_opnd *v) {
    if (!o || !o->q)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s%s is NULL", op, arg, o ? "->q" : "");
    if ((unsigned)o->copy >= QF_COPY_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s->copy %d is not a qf_copy", op, arg,
                            (int)o->copy);
    const qf_copy_slots *s = &qf_copy_slot_table[o->copy];
    v->data = &o->q->t[s->data];
    v->scale = &o->q->t[s->scale_inv];
    v->amax = &o->q->t[s->amax];
    v->scale_inv = &o->q->t[QF_SLOT_SCALE_INV];
    v->layout = o->q->layout;
    snprintf(v->data_arg, sizeof v->data_arg, "%s.%s", arg, qf_slot_name(s->data));
    snprintf(v->scale_arg, sizeof v->scale_arg, "%s.%s", arg, qf_slot_name(s->scale_inv));
    snprintf(v->amax_arg, sizeof v->amax_arg, "%s.%s", arg, qf_slot_name(s->amax));
    snprintf(v->scale_inv_arg, sizeof v->scale_inv_arg, "%s.%s", arg,
             qf_slot_name(QF_SLOT_SCALE_INV));
    return QF_OK;
}

/* The training GEMM (qf_gemm_kinds) that reads copies (a, b), if the recipe's path on this arch
 * runs it. */
static qf_status qf_g_kind(const char *op, const qf_ctx_t *ctx, const qf_recipe *r, qf_copy a,
                           qf_copy b, qf_gemm_kind *kind) {
    int k = 0;
    while (k < QF_GEMM_KIND_COUNT && (qf_gemm_kinds[k].a_copy != a || qf_gemm_kinds[k].b_copy != b))
        k++;
    if (k == QF_GEMM_KIND_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: a is the columnwise copy and b the rowwise "
                            "one; no training GEMM reads that pair (fprop: both rowwise; dgrad: "
                            "a rowwise, b columnwise; wgrad: both columnwise; numerics 6)", op);
    *kind = (qf_gemm_kind)k;
    const qf_gemm_path path = qf_family_gemm_path(r->family, ctx->arch);
    if (path.engine == QF_GEMM_NONE || (path.kinds & QF_GEMM_KIND_BIT(k)))
        return QF_OK;
    char runs[64] = "";
    for (int j = 0; j < QF_GEMM_KIND_COUNT; j++)
        if (path.kinds & QF_GEMM_KIND_BIT(j))
            snprintf(runs + strlen(runs), sizeof runs - strlen(runs), "%s%s", *runs ? ", " : "",
                     qf_gemm_kinds[j].name);
    return qf_set_error(QF_ERR_UNSUPPORTED, "%s: recipe '%s': the %s GEMM (a %s, b %s) is not "
                        "implemented for %s on sm_%d, which runs %s", op, r->name,
                        qf_gemm_kinds[k].name, qf_enum_name(QF_ENUM_COPY, a),
                        qf_enum_name(QF_ENUM_COPY, b), qf_family_name(r->family), ctx->arch, runs);
}

/* A quantized operand's data viewed as [*rows, *cols] (cols its last dim), dtype dt. */
static qf_status qf_g_data(const char *op, const qf_g_opnd *v, qf_dtype dt, const char *why,
                           int64_t *rows, int64_t *cols) {
    const qf_tensor *t = v->data;
    const int64_t n = qf_tensor_numel(t);
    if (!t->data || n < 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL or has no elements (ndim 1..%d, "
                            "every dim >= 1)", op, v->data_arg, QF_MAX_DIMS);
    if (t->dtype != dt)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.dtype is %s; expected %s (%s)", op,
                            v->data_arg, qf_dtype_name(t->dtype), qf_dtype_name(dt), why);
    *cols = t->dims[t->ndim - 1];
    *rows = n / *cols;
    qf_shape s = {v->data_arg, dt, 2, {*rows, *cols}, 0};
    return qf_check_buffer(op, v->data_arg, t, &s);
}

/* Padded block scales of an operand with `rows` rows and `blocks` blocks per row. */
static qf_status qf_g_scales(const char *op, const qf_g_opnd *v, qf_dtype dt, int64_t rows,
                             int64_t blocks) {
    qf_shape s = {v->scale_arg, dt, 2, {(rows + 127) / 128 * 128, (blocks + 3) / 4 * 4}, 0};
    return qf_check_buffer(op, v->scale_arg, v->scale, &s);
}

/* a and b with the same K (elements; packed: the data's last dims are K/2 bytes), and one scale
 * layout. */
static qf_status qf_g_same_k(const char *op, const qf_g_opnd *a, const qf_g_opnd *b, int64_t Ka,
                             int64_t N, int64_t Kb, int packed) {
    if (Kb != Ka)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is [N=%lld, %s=%lld]%s but %s has K = "
                            "%lld; both operands are K-major with the same K", op, b->data_arg,
                            (long long)N, packed ? "K/2" : "K", (long long)(packed ? Kb / 2 : Kb),
                            packed ? " bytes" : "", a->data_arg, (long long)Ka);
    if (a->layout != b->layout)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: a and b have scale layouts %d and %d; "
                            "quantize both with the layout the arch's GEMM reads", op,
                            (int)a->layout, (int)b->layout);
    return QF_OK;
}

/* Sets the shared memory a generated GEMM kernel asks for (past the default 48 KiB, the whole
 * carveout) and launches it on one block per tile_m x tile_n tile of y [M, N]. */
static qf_status qf_g_launch(qf_ctx_t *ctx, const char *op, const qf_loaded_kernel *lk,
                             const qf_kernel_entry *k, int64_t M, int64_t N, int tile_n, int smem,
                             void *p, void *stream) {
    const int64_t tiles = (M + k->tile_m - 1) / k->tile_m * ((N + tile_n - 1) / tile_n);
    if (tiles > INT_MAX)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: M = %lld, N = %lld give %lld tiles, more "
                            "than one launch takes", op, (long long)M, (long long)N,
                            (long long)tiles);
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

/* The recipe's GEMM kernel, looked up and loaded after qf_ctx_ready. */
static qf_status qf_g_kernel(qf_ctx_t *ctx, const char *op, const qf_recipe *r,
                             qf_dtype in, const qf_kernel_entry **k, qf_loaded_kernel *lk,
                             void *stream) {
    *k = qf_registry_kernel(r, QF_OP_GEMM, QF_ROLE_INPUT, QF_NORM_NONE, 0, in);
    if (!*k)
        return QF_ERR_NOT_FOUND;
    QF_TRY(qf_ctx_ready(ctx, op, stream));
    const qf_kernel_instance inst = qf_kernel_instance_default(*k);
    return qf_ctx_kernel(ctx, *k, &inst, lk);
}

/* =====================================================================} */

/* {===================================================================== per-tensor FP8 */

/* A per-tensor scale_inv slot: fp32 [1], 16-byte aligned. NOTES: cuBLASLt answers "not
 * supported" for a scale pointer 4, 8 or 12 bytes past a 16-byte boundary (measured on an H200
 * with cuBLASLt 13.1). */
static qf_status qf_g_fp8_scale(const char *op, const qf_g_opnd *v) {
    if (!v->scale_inv->data)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL (its data); the FP8 GEMM needs "
                            "the fp32 [1] scale_inv written by the operand's quantizer", op,
                            v->scale_inv_arg);
    qf_shape s = {v->scale_inv_arg, QF_DTYPE_FP32, 1, {1}, 0};
    QF_TRY(qf_check_buffer(op, v->scale_inv_arg, v->scale_inv, &s));
    if ((uintptr_t)v->scale_inv->data % 16)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s %p is not 16-byte aligned (cuBLASLt's "
                            "FP8 GEMM needs 16-byte aligned scale pointers)", op,
                            v->scale_inv_arg, v->scale_inv->data);
    return QF_OK;
}

static qf_status qf_g_fp8(qf_ctx_t *ctx, const char *op, const qf_g_opnd *a, const qf_g_opnd *b,
                          const qf_tensor *bias, qf_tensor *y, void *stream) {
    QF_TRY(qf_g_fp8_scale(op, a));
    QF_TRY(qf_g_fp8_scale(op, b));
    const qf_gemm_lt_fp8_args g = {a->data, a->scale_inv->data, b->data, b->scale_inv->data,
                                   a->data_arg, b->data_arg};
    return qf_gemm_lt_fp8(ctx, op, &g, bias, y, stream);
}

/* =====================================================================} */

/* {===================================================================== MXFP8 */

/* Checks every argument and fills the kernel's parameter block. */
static qf_status qf_g_mx_check(const char *op, const qf_ctx_t *ctx, const qf_recipe *r,
                               qf_gemm_kind kind, const qf_g_opnd *a, const qf_g_opnd *b,
                               const qf_tensor *bias, qf_tensor *y, qf_mx_gemm_params *p,
                               qf_gemm_path *path) {
    const qf_gemm_kind_traits *g = &qf_gemm_kinds[kind];
    int64_t Kb;
    char why[96];
    snprintf(why, sizeof why, "recipe '%s' quantizes the %s role to it", r->name,
             qf_enum_name(QF_ENUM_ROLE, g->a_role));
    QF_TRY(qf_g_data(op, a, r->fmt[g->a_role], why, &p->M, &p->K));
    snprintf(why, sizeof why, "recipe '%s' quantizes the %s role to it", r->name,
             qf_enum_name(QF_ENUM_ROLE, g->b_role));
    QF_TRY(qf_g_data(op, b, r->fmt[g->b_role], why, &p->N, &Kb));
    QF_TRY(qf_g_same_k(op, a, b, p->K, p->N, Kb, 0));
    if (p->K % QF_MX_BLOCK)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: K = %lld is not a multiple of %d: the GEMM "
                            "takes whole scale blocks; pad K with zeros", op, (long long)p->K,
                            QF_MX_BLOCK);
    QF_TRY(qf_g_scales(op, a, QF_DTYPE_E8M0, p->M, p->K / QF_MX_BLOCK));
    QF_TRY(qf_g_scales(op, b, QF_DTYPE_E8M0, p->N, p->K / QF_MX_BLOCK));
    QF_TRY(qf_check_gemm_outputs(op, r, bias, y, p->M, p->N, p->K));
    QF_TRY(qf_check_gemm_path(op, r, ctx->arch, a->layout, p->N, path));
    *p = (qf_mx_gemm_params){.a = a->data->data, .a_scale = a->scale->data, .b = b->data->data,
                             .b_scale = b->scale->data, .bias = bias ? bias->data : NULL,
                             .y = y->data, .M = p->M, .N = p->N, .K = p->K,
                             .scale_cols = (p->K / QF_MX_BLOCK + 3) / 4 * 4};
    return QF_OK;
}

static qf_status qf_g_mxfp8(qf_ctx_t *ctx, const char *op, const qf_recipe *r,
                            qf_gemm_kind kind, const qf_g_opnd *a, const qf_g_opnd *b,
                            const qf_tensor *bias, qf_tensor *y, void *stream) {
    qf_mx_gemm_params p = {0};
    qf_gemm_path path;
    QF_TRY(qf_g_mx_check(op, ctx, r, kind, a, b, bias, y, &p, &path));
    if (path.engine == QF_GEMM_CUBLASLT) {
        QF_TRY(qf_ctx_ready(ctx, op, stream));
        return qf_gemm_lt_mxfp8(ctx, a->data, a->scale, b->data, b->scale, bias, y, p.M, p.N,
                                p.K, stream);
    }
    const qf_kernel_entry *k;
    qf_loaded_kernel lk;
    QF_TRY(qf_g_kernel(ctx, op, r, a->data->dtype, &k, &lk, stream));
    /* sm_90 compiles for sm_90a, whose kernel body is the wgmma GEMM (templates/
     * qf_dev_mx_wgmma.cuh); sm_89 gets fewer stages (99 KiB per block). */
    const int stages = ctx->arch >= 90 ? QF_MX_GEMM_STAGES : QF_MX_GEMM_STAGES_SM89;
    const int smem = *qf_arch_feature(ctx->arch) ? QF_MX_GEMM_SM90A_SMEM_BYTES
                                                 : QF_MX_GEMM_SMEM_BYTES_FOR(stages);
    return qf_g_launch(ctx, op, &lk, k, p.M, p.N, QF_MX_GEMM_TILE_N, smem, &p, stream);
}

/* =====================================================================} */

/* {===================================================================== NVFP4 */

/* A global amax: fp32 [1]. */
static qf_status qf_g_nv_amax(const char *op, const qf_g_opnd *v) {
    if (!v->amax->data)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL (its data); the GEMM's alpha "
                            "needs the fp32 [1] amax written by the operand's quantizer", op,
                            v->amax_arg);
    qf_shape s = {v->amax_arg, QF_DTYPE_FP32, 1, {1}, 0};
    return qf_check_buffer(op, v->amax_arg, v->amax, &s);
}

/* Checks every argument and fills the kernel's parameter block: packed E2M1 [rows, K/2] bytes
 * (the quantizers' fake shapes count packed dims in bytes), K a whole number of 16-byte rows. */
static qf_status qf_g_nv_check(const char *op, const qf_ctx_t *ctx, const qf_recipe *r,
                               qf_gemm_kind kind, const qf_g_opnd *a, const qf_g_opnd *b,
                               const qf_tensor *bias, qf_tensor *y, qf_nv_gemm_params *p,
                               qf_gemm_path *path) {
    static const char why[] = "packed, two elements per byte: the output of an NVFP4 quantizer";
    const qf_gemm_kind_traits *g = &qf_gemm_kinds[kind];
    /* The RHT of a columnwise copy is orthogonal along M: it cancels in dy^T x only when both
     * operands carry it (numerics 2.4). */
    if (kind == QF_GEMM_WGRAD && r->rht[g->a_role] != r->rht[g->b_role])
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: recipe '%s' applies the RHT to the "
                            "columnwise copy of %s but not of %s; wgrad reads both, and the "
                            "transform cancels only when both carry it (set rht_input = "
                            "rht_grad)", op, r->name,
                            qf_enum_name(QF_ENUM_ROLE, r->rht[g->a_role] ? g->a_role : g->b_role),
                            qf_enum_name(QF_ENUM_ROLE, r->rht[g->a_role] ? g->b_role : g->a_role));
    int64_t ka, kb;
    QF_TRY(qf_g_data(op, a, QF_DTYPE_E2M1, why, &p->M, &ka));
    QF_TRY(qf_g_data(op, b, QF_DTYPE_E2M1, why, &p->N, &kb));
    p->K = 2 * ka;
    QF_TRY(qf_g_same_k(op, a, b, p->K, p->N, 2 * kb, 1));
    if (p->K % QF_NV_GEMM_K_ALIGN)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: K = %lld is not a multiple of %d: each row "
                            "of packed data must be whole 16-byte units; pad K with zeros", op,
                            (long long)p->K, QF_NV_GEMM_K_ALIGN);
    QF_TRY(qf_g_scales(op, a, QF_DTYPE_E4M3, p->M, p->K / 16));
    QF_TRY(qf_g_scales(op, b, QF_DTYPE_E4M3, p->N, p->K / 16));
    QF_TRY(qf_g_nv_amax(op, a));
    QF_TRY(qf_g_nv_amax(op, b));
    QF_TRY(qf_check_gemm_outputs(op, r, bias, y, p->M, p->N, p->K));
    QF_TRY(qf_check_gemm_path(op, r, ctx->arch, a->layout, p->N, path));
    *p = (qf_nv_gemm_params){.a = a->data->data, .a_scale = a->scale->data, .b = b->data->data,
                             .b_scale = b->scale->data, .amax_a = a->amax->data,
                             .amax_b = b->amax->data, .bias = bias ? bias->data : NULL,
                             .y = y->data, .M = p->M, .N = p->N, .K = p->K,
                             .scale_cols = (p->K / 16 + 3) / 4 * 4};
    return QF_OK;
}

/* sm_100 and later: {alpha, 0} into a stream-ordered device allocation by the module's
 * <name>_alpha entry, then cuBLASLt reading them in device pointer mode. NOTES: one allocation
 * per call (cudaMallocAsync/cudaFreeAsync on the same stream), so calls on different streams
 * never share an alpha slot. */
static qf_status qf_g_nv_lt(qf_ctx_t *ctx, const char *op, const qf_loaded_kernel *lk,
                            const qf_kernel_entry *k, const qf_g_opnd *a, const qf_g_opnd *b,
                            const qf_tensor *bias, qf_tensor *y, qf_nv_gemm_params *p,
                            void *stream) {
    char name[160];
    snprintf(name, sizeof name, "%s_alpha", k->name);
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    CUfunction fn;
    QF_CU_CHECK(cu->ModuleGetFunction(&fn, lk->module, name));
    void *ab = NULL;
    if (cudaMallocAsync(&ab, 2 * sizeof(float), (cudaStream_t)stream) != cudaSuccess)
        return qf_set_error(QF_ERR_CUDA, "%s: cudaMallocAsync of alpha failed: %s", op,
                            cudaGetErrorString(cudaGetLastError()));
    p->alpha_out = ab;
    qf_status s = qf_ctx_launch(ctx, fn, 1, 32, 0, p, stream);
    if (s == QF_OK)
        s = qf_gemm_lt_nvfp4(ctx, a->data, a->scale, b->data, b->scale, ab, bias, y, p->M, p->N,
                             p->K, stream);
    if (cudaFreeAsync(ab, (cudaStream_t)stream) != cudaSuccess && s == QF_OK)
        s = qf_set_error(QF_ERR_CUDA, "%s: cudaFreeAsync of alpha failed: %s", op,
                         cudaGetErrorString(cudaGetLastError()));
    return s;
}

static qf_status qf_g_nvfp4(qf_ctx_t *ctx, const char *op, const qf_recipe *r,
                            qf_gemm_kind kind, const qf_g_opnd *a, const qf_g_opnd *b,
                            const qf_tensor *bias, qf_tensor *y, void *stream) {
    qf_nv_gemm_params p = {0};
    qf_gemm_path path;
    QF_TRY(qf_g_nv_check(op, ctx, r, kind, a, b, bias, y, &p, &path));
    const qf_kernel_entry *k;
    qf_loaded_kernel lk;
    QF_TRY(qf_g_kernel(ctx, op, r, QF_DTYPE_E2M1, &k, &lk, stream));
    if (path.engine == QF_GEMM_CUBLASLT) /* alpha from the module's <name>_alpha entry */
        return qf_g_nv_lt(ctx, op, &lk, k, a, b, bias, y, &p, stream);
    const int smem = ctx->arch >= 90 ? QF_NV_GEMM_SMEM_BYTES_FOR(QF_NV_GEMM_STAGES)
                                     : QF_NV_GEMM_SMEM_BYTES_FOR(QF_NV_GEMM_STAGES_SM89);
    return qf_g_launch(ctx, op, &lk, k, p.M, p.N, QF_NV_GEMM_TILE_N, smem, &p, stream);
}

/* =====================================================================} */

qf_status qf_gemm(qf_ctx_t *ctx, const char *recipe, const qf_operand *a, const qf_operand *b,
                  const qf_tensor *bias, qf_tensor *y, void *stream) {
    static const char op[] = "qf_gemm";
    const qf_recipe *r = NULL;
    qf_g_opnd va, vb;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    QF_TRY(qf_g_operand(op, "a", a, &va));
    QF_TRY(qf_g_operand(op, "b", b, &vb));
    if (!y)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: y is NULL", op);
    if (bias && !bias->data)
        bias = NULL;
    qf_gemm_kind kind = QF_GEMM_FPROP;
    QF_TRY(qf_g_kind(op, ctx, r, a->copy, b->copy, &kind));
    switch (r->family) {
    case QF_FAMILY_FP8_DELAYED:
    case QF_FAMILY_FP8_CURRENT: /* per-tensor scales: the same cuBLASLt GEMM (numerics 2.2) */
        return qf_g_fp8(ctx, op, &va, &vb, bias, y, stream);
    case QF_FAMILY_MXFP8:
        return qf_g_mxfp8(ctx, op, r, kind, &va, &vb, bias, y, stream);
    case QF_FAMILY_NVFP4:
        return qf_g_nvfp4(ctx, op, r, kind, &va, &vb, bias, y, stream);
    default:
        return qf_family_unsupported(op, r);
    }
}
