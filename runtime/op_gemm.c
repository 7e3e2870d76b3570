/* op_gemm.c: the GEMM op, y = A B^T (+ bias) in bf16 for every family (numerics 2, 6): the operand
 * checks, one dispatch on the recipe's family, and each family's path.
 *
 * Who runs it on an architecture is the family's row (qf_family_gemm_path, family.c): per-tensor
 * FP8 is cuBLASLt with per-tensor scales (gemm_lt.c), FP8 block scaling the same GEMM with
 * cuBLASLt's 1x128 / 128x128 block scale modes (sm_90 and later); MXFP8 and NVFP4 run
 * cuBLASLt's block-scaled GEMM on sm_100 and later (VEC32_UE8M0, VEC16_UE4M3; swizzled scales)
 * and the recipe's generated GEMM module on sm_89..sm_99 (templates/sm90_{mxfp8,nvfp4}_gemm.cu,
 * compact scales), in one of two ways:
 * - staged (qf_g_staged): the module's <name>_dequant entry writes each operand in bf16 (exact,
 *   numerics 7) into stream-ordered scratch, and cuBLASLt runs a bf16 GEMM on them, with NVFP4's
 *   alpha from <name>_alpha. Every training GEMM, either major order.
 * - direct: the module's GEMM kernel reads the quantized bytes and scales itself. Only the kinds
 *   in the path's direct_kinds, and by default only for small problems (M or N under
 *   QF_GEMM_STAGED_MIN), where writing and reading the bf16 copies would cost more than the
 *   kernel's lower tensor throughput. Compiled for sm_90a (sm_90's JIT target) that kernel is
 *   the warp-specialized one (templates/qf_dev_ws_gemm.cuh: TMA, B dequantized into shared
 *   memory and A into registers, wgmma; any y, accumulation), reached through TMA descriptors
 *   built here; on an H200 it runs 393 (MXFP8) and 394 (NVFP4) TFLOP/s at 8192^3, the staged
 *   path 729 and 700.
 * QFUSE_HOPPER_GEMM=staged or direct forces one way (direct where the kernel runs the kind).
 * A caller that keeps b's bf16 copy (qf_dequantize, qf_gemm_opts.b_dequantized) saves the staged
 * path b's dequantization; the same module entry writes that copy. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "qf_arch.h"
#include "ctx.h"
#include "gemm_lt.h"
#include "names.h"
#include "validate.h"

#define QF_NV_GEMM_K_ALIGN 32
/* QF_GEMM_KERNEL paths run staged when M and N are both at least this (QFUSE_HOPPER_GEMM=auto). */
#define QF_GEMM_STAGED_MIN 256

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
    QF_TRY(qf_check_tensor_struct(op, v->data_arg, t));
    const int64_t n = qf_tensor_numel(t);
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

/* a and b quantized with one scale layout. */
static qf_status qf_g_same_layout(const char *op, const qf_g_opnd *a, const qf_g_opnd *b) {
    if (a->layout != b->layout)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: a and b have scale layouts %d and %d; "
                            "quantize both with the layout the arch's GEMM reads", op,
                            (int)a->layout, (int)b->layout);
    return QF_OK;
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
    return qf_g_same_layout(op, a, b);
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

/* The recipe's GEMM module, looked up and loaded after qf_ctx_ready: with staged, its staged
 * instance (kernel_key.h: the <name>_dequant and <name>_alpha entries, no GEMM kernel, compiled
 * in a fraction of the time), else its default instance, the GEMM kernel alone. */
static qf_status qf_g_kernel(qf_ctx_t *ctx, const char *op, const qf_recipe *r, qf_dtype in,
                             int staged, const qf_kernel_entry **k, qf_loaded_kernel *lk,
                             void *stream) {
    *k = qf_registry_kernel(r, QF_OP_GEMM, QF_ROLE_INPUT, QF_NORM_NONE, 0, in);
    if (!*k)
        return QF_ERR_NOT_FOUND;
    qf_kernel_instance inst = qf_kernel_instance_default(*k);
    inst.staged = staged;
    return qf_ctx_load(ctx, op, stream, *k, &inst, lk);
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

static qf_status qf_g_fp8(qf_ctx_t *ctx, const char *op, const qf_recipe *r, const qf_g_opnd *a,
                          const qf_g_opnd *b, const qf_tensor *bias, qf_tensor *y, int acc,
                          void *stream) {
    QF_TRY(qf_g_fp8_scale(op, a));
    QF_TRY(qf_g_fp8_scale(op, b));
    const qf_gemm_lt_fp8_args g = {r, a->data, a->scale_inv->data, b->data, b->scale_inv->data,
                                   a->data_arg, b->data_arg, acc, QF_LT_SCALE_TENSOR,
                                   QF_LT_SCALE_TENSOR};
    return qf_gemm_lt_fp8(ctx, op, &g, bias, y, stream);
}

/* =====================================================================} */

/* {===================================================================== FP8 block scaling */

/* One fp8_block operand of role `role` (numerics 2.5): E4M3 data [*rows, K], K-major in every
 * copy (the columnwise copies are transposed), and its fp32 scale_inv in the layout cuBLASLt
 * reads: 128x128 tiles for weights ([cdiv(rows,128), roundup(cdiv(K,128),4)], BLK128x128_32F),
 * 1x128 blocks along K otherwise ([cdiv(K,128), roundup(rows,4)], VEC128_32F). */
static qf_status qf_g_block_operand(const char *op, const qf_g_opnd *v, qf_role role,
                                    qf_lt_scale *mode, int64_t *rows) {
    int64_t K;
    QF_TRY(qf_g_data(op, v, QF_DTYPE_E4M3, "fp8_block quantizes every role to E4M3", rows, &K));
    const int64_t kb = (K + 127) / 128;
    *mode = role == QF_ROLE_WEIGHT ? QF_LT_SCALE_BLK128 : QF_LT_SCALE_VEC128;
    qf_shape s = {v->scale_arg, QF_DTYPE_FP32, 2, {kb, (*rows + 3) / 4 * 4}, 0};
    if (*mode == QF_LT_SCALE_BLK128)
        s.dims[0] = (*rows + 127) / 128, s.dims[1] = (kb + 3) / 4 * 4;
    return qf_check_buffer(op, v->scale_arg, v->scale, &s);
}

/* The training GEMM `kind` of two fp8_block copies: cuBLASLt with both operands' block scales
 * (fprop and dgrad 1x128 x 128x128, wgrad 1x128 x 1x128 along the tokens), on the family's GEMM
 * path (its arch and its one scale layout, compact: qf_check_gemm_path). */
static qf_status qf_g_fp8_block(qf_ctx_t *ctx, const char *op, const qf_recipe *r,
                                qf_gemm_kind kind, const qf_g_opnd *a, const qf_g_opnd *b,
                                const qf_tensor *bias, qf_tensor *y, int acc, void *stream) {
    qf_lt_scale am, bm;
    int64_t M, N; /* the rows of a and b: y is [M, N] (qf_gemm_lt_fp8 checks y) */
    qf_gemm_path path;
    QF_TRY(qf_g_same_layout(op, a, b));
    QF_TRY(qf_g_block_operand(op, a, qf_gemm_kinds[kind].a_role, &am, &M));
    QF_TRY(qf_g_block_operand(op, b, qf_gemm_kinds[kind].b_role, &bm, &N));
    QF_TRY(qf_check_gemm_path(op, r, ctx->arch, a->layout, N, &path));
    const qf_gemm_lt_fp8_args g = {r, a->data, a->scale->data, b->data, b->scale->data,
                                   a->data_arg, b->data_arg, acc, am, bm};
    return qf_gemm_lt_fp8(ctx, op, &g, bias, y, stream);
}

/* =====================================================================} */

/* {===================================================================== staged GEMM */

/* One operand as the module's <name>_dequant entry reads it (qf_dq_params). */
typedef struct qf_g_stage {
    const void *data, *scale;
    int64_t rows, cols;     /* the stored copy: [rows, cols] elements */
    int64_t scale_ld;       /* scale entries per scale row */
    qf_dtype elem;
    int block_rows, block_cols;
    int mn;                 /* 1: stored [K, M] (or [K, N]): MXFP8's columnwise copies */
    int out_fp32;           /* the bias broadcast into an fp32 y */
    const void *bf16;       /* the caller's bf16 copy [rows, cols] (qf_dequantize), or NULL */
} qf_g_stage;

/* A bf16 copy of stage st ([st->rows, st->cols] bf16, 16-byte aligned), named arg: the output of
 * qf_dequantize or opts->b_dequantized. */
static qf_status qf_g_bf16_copy(const char *op, const char *arg, const qf_tensor *t,
                                const qf_g_stage *st) {
    if (!t || !t->data)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL (its data); expected bf16 [%lld, "
                            "%lld], the dims of the copy in elements", op, arg,
                            (long long)st->rows, (long long)st->cols);
    const qf_shape s = {arg, QF_DTYPE_BF16, 2, {st->rows, st->cols}, 0};
    return qf_check_buffer(op, arg, t, &s);
}

/* The tensors a block-scaled GEMM reads from its operands (data, block scales, NVFP4's amaxes
 * when amax) and the bias. */
static qf_inputs qf_g_inputs(const qf_g_opnd *a, const qf_g_opnd *b, const qf_tensor *bias,
                             int amax) {
    qf_inputs in = {5, {a->data_arg, a->scale_arg, b->data_arg, b->scale_arg, "bias"},
                    {a->data, a->scale, b->data, b->scale, bias}};
    if (amax) {
        in.name[5] = a->amax_arg, in.t[5] = a->amax;
        in.name[6] = b->amax_arg, in.t[6] = b->amax;
        in.n = 7;
    }
    return in;
}

/* opts->b_dequantized, when set, checked against b's stage, apart from y and from a's data and
 * scales, and recorded in the stage. */
static qf_status qf_g_kept_b(const char *op, const qf_gemm_opts *o, const qf_g_opnd *a,
                             const qf_tensor *y, qf_g_stage *sb) {
    if (!o->b_dequantized)
        return QF_OK;
    QF_TRY(qf_g_bf16_copy(op, "opts->b_dequantized", o->b_dequantized, sb));
    const qf_inputs in = {3, {"y", a->data_arg, a->scale_arg}, {y, a->data, a->scale}};
    QF_TRY(qf_check_apart(op, "opts->b_dequantized", o->b_dequantized, &in));
    sb->bf16 = o->b_dequantized->data;
    return QF_OK;
}

/* Whether a GEMM of this kind and size runs staged on `path` (QF_GEMM_KERNEL) rather than by the
 * module's GEMM kernel; kernel_ok: that kernel can run this call (qf_g_kernel_takes). By default
 * the kernel runs small problems only (M or N under QF_GEMM_STAGED_MIN) and never when b's bf16
 * copy is kept, being slower than the staged path on large ones (the rates: this file's header,
 * docs/bench.md). QFUSE_HOPPER_GEMM=staged or direct forces one way. */
static int qf_g_use_staged(const qf_gemm_path *path, qf_gemm_kind kind, int64_t M, int64_t N,
                           int kernel_ok, int b_kept) {
    static const char *const ways[] = {"auto", "staged", "direct"};
    if (!(path->direct_kinds & QF_GEMM_KIND_BIT(kind)) || !kernel_ok)
        return 1;
    switch (qf_env_choice("QFUSE_HOPPER_GEMM", ways, 3)) {
    case 1:
        return 1;
    case 2:
        return 0;
    default:
        return b_kept || (M >= QF_GEMM_STAGED_MIN && N >= QF_GEMM_STAGED_MIN);
    }
}

/* Whether the module's GEMM kernel is the warp-specialized one: the arch's feature target
 * (sm_90a: qf_arch_feature), for which the JIT compiles it. */
static int qf_g_ws(const qf_ctx_t *ctx) {
    return *qf_arch_feature(ctx->arch) != '\0';
}

/* Whether the warp-specialized kernel takes operands a [M, row_bytes] and b [N, row_bytes]: TMA
 * descriptors need the driver's encoder (a device-less context assumes it), 16-byte aligned
 * addresses and row strides, nonzero dims and 32-bit coordinates. */
static int qf_g_ws_fits(const qf_ctx_t *ctx, const void *a, const void *b, int64_t M, int64_t N,
                        int64_t row_bytes) {
    if (!ctx->host) {
        const qf_cu_api *cu = qf_cu(); /* loaded: the context has a device */
        if (!cu || !cu->TensorMapEncodeTiled)
            return 0;
    }
    return (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 && M > 0 && N > 0 && row_bytes > 0 &&
           row_bytes % 16 == 0 && M <= INT_MAX && N <= INT_MAX && row_bytes <= INT_MAX;
}

/* Whether the module's GEMM kernel can run a call with operands a [M, row_bytes] and b [N,
 * row_bytes] into y: the warp-specialized kernel (sm_90a; any y, accumulation) when its TMA
 * descriptors take the operands, the older kernels (sm_89) into a bf16 y without accumulation. */
static int qf_g_kernel_takes(const qf_ctx_t *ctx, const void *a, const void *b, int64_t M,
                             int64_t N, int64_t row_bytes, const qf_tensor *y, int acc) {
    if (qf_g_ws(ctx))
        return qf_g_ws_fits(ctx, a, b, M, N, row_bytes);
    return y->dtype == QF_DTYPE_BF16 && !acc;
}

/* The TMA descriptor of a K-major operand of `rows` rows of row_bytes bytes at data, read in
 * boxes of box_rows rows of box_bytes (uint8 elements, the given swizzle, zero fill past the
 * edges). */
static qf_status qf_g_tma(const void *data, int64_t rows, int64_t row_bytes, int box_bytes,
                          int box_rows, CUtensorMapSwizzle swizzle, qf_tma_desc *d) {
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    const cuuint64_t dims[2] = {(cuuint64_t)row_bytes, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)row_bytes};
    const cuuint32_t box[2] = {(cuuint32_t)box_bytes, (cuuint32_t)box_rows};
    const cuuint32_t steps[2] = {1, 1};
    QF_CU_CHECK(cu->TensorMapEncodeTiled((CUtensorMap *)d, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
                                         (void *)data, dims, strides, box, steps,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return QF_OK;
}

/* The warp-specialized GEMM (templates/qf_dev_ws_gemm.cuh) on p (scales, amaxes, bias, M, N, K and
 * scale_cols set): the TMA descriptors of a [M, row_bytes] and b [N, row_bytes] (k-tiles of
 * raw_row bytes), y and the accumulate flag filled in, then one persistent block per SM (at most
 * one per output tile). */
static qf_status qf_g_ws_launch(qf_ctx_t *ctx, const qf_loaded_kernel *lk, qf_ws_gemm_params *p,
                                const void *a, const void *b, int64_t row_bytes, int raw_row,
                                qf_tensor *y, int acc, void *stream) {
    /* B's raw rows are read whole by one thread each: swizzled by their width (raw_b_offset) */
    const CUtensorMapSwizzle b_swizzle =
        raw_row == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B;
    QF_TRY(qf_g_tma(a, p->M, row_bytes, raw_row, QF_WS_TILE_M, CU_TENSOR_MAP_SWIZZLE_NONE,
                    &p->tma_a));
    QF_TRY(qf_g_tma(b, p->N, row_bytes, raw_row, QF_WS_TILE_N, b_swizzle, &p->tma_b));
    p->y = y->data;
    p->y_fp32 = y->dtype == QF_DTYPE_FP32;
    p->accumulate = acc;
    const int64_t tiles = (p->M + QF_WS_TILE_M - 1) / QF_WS_TILE_M *
                          ((p->N + QF_WS_TILE_N - 1) / QF_WS_TILE_N);
    const int64_t grid = tiles < ctx->sm_count ? tiles : ctx->sm_count;
    const int smem = QF_WS_SMEM_BYTES(raw_row);
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    QF_CU_CHECK(cu->FuncSetAttribute(lk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     smem));
    return qf_ctx_launch(ctx, lk->fn, grid > 0 ? (unsigned)grid : 1u, QF_WS_THREADS,
                         (unsigned)smem, p, stream);
}

/* The QF_DQ_VEC-element chunks of one row of stage v (the last one partly past cols). */
static int64_t qf_g_dequant_per_row(const qf_g_stage *v) {
    return (v->cols + QF_DQ_VEC - 1) / QF_DQ_VEC;
}

/* The QF_DQ_VEC-element chunks of stage v: the work items of its <name>_dequant launch. */
static int64_t qf_g_dequant_chunks(const qf_g_stage *v) {
    return v->rows * qf_g_dequant_per_row(v);
}

/* Whether one <name>_dequant launch covers stage v (checked before any kernel load, so that a
 * device-less context refuses what a GPU refuses). */
static qf_status qf_g_dequant_fits(const char *op, const qf_g_stage *v) {
    if (qf_g_dequant_chunks(v) > (int64_t)UINT32_MAX - QF_DQ_THREADS * QF_DQ_CHUNKS)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: an operand of [%lld, %lld] elements is too "
                            "large for one dequantize launch", op, (long long)v->rows,
                            (long long)v->cols);
    return QF_OK;
}

/* qf_dq_params.per_row_magic for rows of per_row chunks: ceil(2^64 / per_row), which is
 * UINT64_MAX / per_row + 1 for per_row >= 2 (one more than the floor, or, where per_row divides
 * 2^64, the exact quotient); 0 for per_row 1 (the kernel takes the row as the chunk index). */
static uint64_t qf_dq_magic(uint64_t per_row) {
    return per_row <= 1 ? 0 : UINT64_MAX / per_row + 1;
}

static qf_status qf_g_dequant(qf_ctx_t *ctx, const char *op, const qf_loaded_kernel *lk,
                              const qf_g_stage *v, void *out, void *stream) {
    QF_TRY(qf_g_dequant_fits(op, v));
    /* the kernel finds scale entries by shifts (qf_dq_params); the bias broadcast reads none */
    QF_ASSERT(v->elem == QF_DTYPE_BF16 ||
              (v->block_rows > 0 && (v->block_rows & (v->block_rows - 1)) == 0 &&
               v->block_cols > 0 && (v->block_cols & (v->block_cols - 1)) == 0));
    qf_dq_params p = {.data = v->data, .scale = v->scale, .out = out, .rows = v->rows,
                      .cols = v->cols, .scale_ld = v->scale_ld, .elem = (int32_t)v->elem,
                      .block_rows = v->block_rows, .block_cols = v->block_cols,
                      .out_fp32 = v->out_fp32,
                      .per_row_magic = qf_dq_magic((uint64_t)qf_g_dequant_per_row(v))};
    const int64_t per_block = QF_DQ_THREADS * QF_DQ_CHUNKS;
    const int64_t blocks = (qf_g_dequant_chunks(v) + per_block - 1) / per_block;
    return qf_ctx_launch(ctx, lk->fn_dequant, blocks > 0 ? (unsigned)blocks : 1u, QF_DQ_THREADS,
                         0, &p, stream);
}

/* Sets a device beta slot (fp32) to 1 on stream: the <name>_dequant entry's bias broadcast with
 * no rows (qf_dq_params). */
static qf_status qf_g_beta_one(qf_ctx_t *ctx, const char *op, const qf_loaded_kernel *lk,
                               float *beta, void *stream) {
    const qf_g_stage none = {.scale = beta, .cols = 1, .elem = QF_DTYPE_BF16};
    return qf_g_dequant(ctx, op, lk, &none, NULL, stream);
}

/* Scratch bytes for stage v's bf16 copy: none when the caller keeps one. */
static size_t qf_g_stage_bytes(const qf_g_stage *v) {
    return v->bf16 ? 0 : ((size_t)(v->rows * v->cols) * 2 + 255) / 256 * 256;
}

/* Stage v in bf16 on stream: the caller's copy, or dequantized into scratch at *at. */
static qf_status qf_g_stage_bf16(qf_ctx_t *ctx, const char *op, const qf_loaded_kernel *lk,
                                 const qf_g_stage *v, char *at, const void **out, void *stream) {
    *out = v->bf16 ? v->bf16 : at;
    return v->bf16 ? QF_OK : qf_g_dequant(ctx, op, lk, v, at, stream);
}

/* y[M, N] = alpha * deq(a) deq(b)^T (+ bias, or + y when acc): each operand dequantized into
 * one scratch buffer (unless its stage carries the caller's bf16 copy), then the bf16 GEMM
 * (gemm_lt.c), y bf16 or fp32. nv: NVFP4's parameter
 * block, whose <name>_alpha entry writes {alpha, 0} into the scratch first; NULL for alpha 1. A
 * bias is broadcast into y by the <name>_dequant entry (which also sets the device beta to 1) and
 * the GEMM accumulates onto it: one rounding after the bias (numerics 2.3, 2.4). The caller has
 * checked every argument. */
static qf_status qf_g_staged(qf_ctx_t *ctx, const char *op, const qf_loaded_kernel *lk,
                             const qf_kernel_entry *k, const qf_g_stage *a, const qf_g_stage *b,
                             int64_t M, int64_t N, int64_t K, qf_nv_gemm_params *nv,
                             const qf_tensor *bias, qf_tensor *y, int acc, void *stream) {
    if (!lk->fn_dequant || (nv && !lk->fn_alpha))
        return qf_set_error(QF_ERR_NOT_FOUND, "%s: kernel %s has no %s entry", op, k->name,
                            lk->fn_dequant ? "_alpha" : "_dequant");
    const size_t off_b = qf_g_stage_bytes(a), off_ab = off_b + qf_g_stage_bytes(b);
    char *buf = NULL;
    QF_TRY(qf_ctx_scratch(ctx, off_ab + 2 * sizeof(float), (void **)&buf,
                          "the bf16 copies of the operands", stream));
    const void *pa = NULL, *pb = NULL;
    qf_status s = qf_g_stage_bf16(ctx, op, lk, a, buf, &pa, stream);
    if (s == QF_OK)
        s = qf_g_stage_bf16(ctx, op, lk, b, buf + off_b, &pb, stream);
    float *ab = nv ? (float *)(buf + off_ab) : NULL;
    if (s == QF_OK && nv) {
        nv->alpha_out = ab;
        s = qf_ctx_launch(ctx, lk->fn_alpha, 1, 32, 0, nv, stream);
    }
    if (s == QF_OK && bias) {
        const qf_g_stage bc = {.data = bias->data, .scale = ab ? ab + 1 : NULL, .rows = M,
                               .cols = N, .elem = QF_DTYPE_BF16,
                               .out_fp32 = y->dtype == QF_DTYPE_FP32};
        s = qf_g_dequant(ctx, op, lk, &bc, y->data, stream);
    }
    if (s == QF_OK && acc && ab)
        s = qf_g_beta_one(ctx, op, lk, ab + 1, stream);
    if (s == QF_OK) {
        const qf_gemm_lt_bf16_args g = {pa, pb, a->mn, b->mn, ab, bias || acc,
                                        y->data, y->dtype, M, N, K};
        s = qf_gemm_lt_bf16(ctx, &g, stream);
    }
    const qf_status f = qf_ctx_scratch_free(ctx, buf, stream);
    return s != QF_OK ? s : f;
}

/* =====================================================================} */

/* {===================================================================== MXFP8 */

/* An MXFP8 operand's data: [rows, K] rowwise, [K, rows] columnwise (not transposed: 32x1 blocks
 * down K), of the format the recipe gives the kind's role for it; *st is the operand as the
 * staged path reads it (scales checked later, by qf_g_mx_scales). */
static qf_status qf_g_mx_data(const char *op, const qf_recipe *r, qf_role role, qf_copy copy,
                              const qf_g_opnd *v, int64_t *rows, int64_t *K, qf_g_stage *st) {
    char why[96];
    snprintf(why, sizeof why, "recipe '%s' quantizes the %s role to it", r->name,
             qf_enum_name(QF_ENUM_ROLE, role));
    int64_t R, C;
    QF_TRY(qf_g_data(op, v, r->fmt[role], why, &R, &C));
    const int col = copy == QF_COPY_COLUMNWISE;
    *rows = col ? C : R;
    *K = col ? R : C;
    *st = (qf_g_stage){.data = v->data->data, .scale = v->scale->data, .rows = R, .cols = C,
                       .scale_ld = col ? (C + 127) / 128 * 128
                                       : ((C + QF_MX_BLOCK - 1) / QF_MX_BLOCK + 3) / 4 * 4,
                       .elem = r->fmt[role], .block_rows = col ? QF_MX_BLOCK : 1,
                       .block_cols = col ? 1 : QF_MX_BLOCK, .mn = col};
    return QF_OK;
}

/* The padded E8M0 scales of an operand (numerics 2.3): rowwise [roundup(R,128),
 * roundup(cdiv(C,32),4)] (a last, shorter block when C % 32: qf_dequantize takes any K, the
 * GEMM whole blocks), columnwise [roundup(cdiv(R,32),4), roundup(C,128)] for data [R, C]. */
static qf_status qf_g_mx_scales(const char *op, const qf_g_opnd *v, const qf_g_stage *st) {
    if (!st->mn)
        return qf_g_scales(op, v, QF_DTYPE_E8M0, st->rows,
                           (st->cols + QF_MX_BLOCK - 1) / QF_MX_BLOCK);
    qf_shape sh = {v->scale_arg, QF_DTYPE_E8M0, 2,
                   {((st->rows + QF_MX_BLOCK - 1) / QF_MX_BLOCK + 3) / 4 * 4, st->scale_ld}, 0};
    return qf_check_buffer(op, v->scale_arg, v->scale, &sh);
}

/* Checks every argument, fills the kernel's parameter block (fprop) and the staged operands. */
static qf_status qf_g_mx_check(const char *op, const qf_ctx_t *ctx, const qf_recipe *r,
                               qf_gemm_kind kind, const qf_g_opnd *a, const qf_g_opnd *b,
                               const qf_tensor *bias, qf_tensor *y, qf_mx_gemm_params *p,
                               qf_g_stage *sa, qf_g_stage *sb, qf_gemm_path *path) {
    const qf_gemm_kind_traits *g = &qf_gemm_kinds[kind];
    int64_t Kb;
    QF_TRY(qf_g_mx_data(op, r, g->a_role, g->a_copy, a, &p->M, &p->K, sa));
    QF_TRY(qf_g_mx_data(op, r, g->b_role, g->b_copy, b, &p->N, &Kb, sb));
    if (Kb != p->K)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is [%lld, %lld], a K of %lld, but %s has "
                            "K = %lld (%s GEMM: a is [%s], b is [%s]); both operands have the "
                            "same K", op, b->data_arg, (long long)sb->rows, (long long)sb->cols,
                            (long long)Kb, a->data_arg, (long long)p->K, g->name,
                            sa->mn ? "K, M" : "M, K", sb->mn ? "K, N" : "N, K");
    QF_TRY(qf_g_same_layout(op, a, b));
    if (p->K % QF_MX_BLOCK)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: K = %lld is not a multiple of %d: the GEMM "
                            "takes whole scale blocks; pad K with zeros", op, (long long)p->K,
                            QF_MX_BLOCK);
    QF_TRY(qf_g_mx_scales(op, a, sa));
    QF_TRY(qf_g_mx_scales(op, b, sb));
    QF_TRY(qf_check_gemm_outputs(op, r, bias, y, p->M, p->N, p->K));
    const qf_inputs in = qf_g_inputs(a, b, bias, 0);
    QF_TRY(qf_check_apart(op, "y", y, &in));
    QF_TRY(qf_check_gemm_path(op, r, ctx->arch, a->layout, p->N, path));
    *p = (qf_mx_gemm_params){.a = a->data->data, .a_scale = a->scale->data, .b = b->data->data,
                             .b_scale = b->scale->data, .bias = bias ? bias->data : NULL,
                             .y = y->data, .M = p->M, .N = p->N, .K = p->K,
                             .scale_cols = (p->K / QF_MX_BLOCK + 3) / 4 * 4};
    return QF_OK;
}

static qf_status qf_g_mxfp8(qf_ctx_t *ctx, const char *op, const qf_recipe *r,
                            qf_gemm_kind kind, const qf_g_opnd *a, const qf_g_opnd *b,
                            const qf_tensor *bias, qf_tensor *y, const qf_gemm_opts *o,
                            void *stream) {
    const int acc = o->accumulate;
    qf_mx_gemm_params p = {0};
    qf_g_stage sa, sb;
    qf_gemm_path path;
    QF_TRY(qf_g_mx_check(op, ctx, r, kind, a, b, bias, y, &p, &sa, &sb, &path));
    QF_TRY(qf_g_kept_b(op, o, a, y, &sb));
    if (path.engine == QF_GEMM_CUBLASLT) {
        QF_TRY(qf_ctx_ready(ctx, op, stream));
        return qf_gemm_lt_mxfp8(ctx, a->data, a->scale, b->data, b->scale, bias, y, p.M, p.N,
                                p.K, acc, stream);
    }
    /* one module per recipe: its _dequant entry takes E4M3 and E5M2 */
    const qf_kernel_entry *k;
    qf_loaded_kernel lk;
    const int staged = qf_g_use_staged(&path, kind, p.M, p.N,
                                       qf_g_kernel_takes(ctx, p.a, p.b, p.M, p.N, p.K, y, acc),
                                       sb.bf16 != NULL);
    QF_TRY(qf_g_kernel(ctx, op, r, r->fmt[QF_ROLE_INPUT], staged, &k, &lk, stream));
    if (staged)
        return qf_g_staged(ctx, op, &lk, k, &sa, &sb, p.M, p.N, p.K, NULL, bias, y, acc, stream);
    if (qf_g_ws(ctx)) { /* sm_90 compiles for sm_90a: the warp-specialized kernel */
        qf_ws_gemm_params w = {.a_scale = p.a_scale, .b_scale = p.b_scale, .bias = p.bias,
                               .M = p.M, .N = p.N, .K = p.K, .scale_cols = p.scale_cols};
        return qf_g_ws_launch(ctx, &lk, &w, p.a, p.b, p.K, QF_WS_RAW_ROW_MXFP8, y, acc, stream);
    }
    /* sm_89 gets fewer stages (99 KiB per block) */
    const int stages = ctx->arch >= 90 ? QF_MX_GEMM_STAGES : QF_MX_GEMM_STAGES_SM89;
    return qf_g_launch(ctx, op, &lk, k, p.M, p.N, QF_MX_GEMM_TILE_N,
                       QF_MX_GEMM_SMEM_BYTES_FOR(stages), &p, stream);
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

/* An NVFP4 operand's data: packed E2M1 [rows, K/2] bytes (the quantizers' fake shapes count
 * packed dims in bytes; both copies K-major, the columnwise one transposed). */
static qf_status qf_g_nv_data(const char *op, const qf_g_opnd *v, int64_t *rows, int64_t *K) {
    static const char why[] = "packed, two elements per byte: the output of an NVFP4 quantizer";
    int64_t bytes;
    QF_TRY(qf_g_data(op, v, QF_DTYPE_E2M1, why, rows, &bytes));
    *K = 2 * bytes;
    return QF_OK;
}

/* The compact E4M3 scales of 1x16 blocks of an NVFP4 operand [rows, K] (elements), checked; *st
 * is the operand as the staged path reads it. */
static qf_status qf_g_nv_stage(const char *op, const qf_g_opnd *v, int64_t rows, int64_t K,
                               qf_g_stage *st) {
    const int64_t blocks = (K + 15) / 16;
    *st = (qf_g_stage){.data = v->data->data, .scale = v->scale->data, .rows = rows, .cols = K,
                       .scale_ld = (blocks + 3) / 4 * 4, .elem = QF_DTYPE_E2M1, .block_rows = 1,
                       .block_cols = 16};
    return qf_g_scales(op, v, QF_DTYPE_E4M3, rows, blocks);
}

/* Checks every argument, fills the kernel's parameter block and the staged operands: K a whole
 * number of 16-byte rows of packed data. */
static qf_status qf_g_nv_check(const char *op, const qf_ctx_t *ctx, const qf_recipe *r,
                               qf_gemm_kind kind, const qf_g_opnd *a, const qf_g_opnd *b,
                               const qf_tensor *bias, qf_tensor *y, qf_nv_gemm_params *p,
                               qf_g_stage *sa, qf_g_stage *sb, qf_gemm_path *path) {
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
    int64_t kb;
    QF_TRY(qf_g_nv_data(op, a, &p->M, &p->K));
    QF_TRY(qf_g_nv_data(op, b, &p->N, &kb));
    QF_TRY(qf_g_same_k(op, a, b, p->K, p->N, kb, 1));
    if (p->K % QF_NV_GEMM_K_ALIGN)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: K = %lld is not a multiple of %d: each row "
                            "of packed data must be whole 16-byte units; pad K with zeros", op,
                            (long long)p->K, QF_NV_GEMM_K_ALIGN);
    QF_TRY(qf_g_nv_stage(op, a, p->M, p->K, sa));
    QF_TRY(qf_g_nv_stage(op, b, p->N, p->K, sb));
    QF_TRY(qf_g_nv_amax(op, a));
    QF_TRY(qf_g_nv_amax(op, b));
    QF_TRY(qf_check_gemm_outputs(op, r, bias, y, p->M, p->N, p->K));
    const qf_inputs in = qf_g_inputs(a, b, bias, 1);
    QF_TRY(qf_check_apart(op, "y", y, &in));
    QF_TRY(qf_check_gemm_path(op, r, ctx->arch, a->layout, p->N, path));
    *p = (qf_nv_gemm_params){.a = a->data->data, .a_scale = a->scale->data, .b = b->data->data,
                             .b_scale = b->scale->data, .amax_a = a->amax->data,
                             .amax_b = b->amax->data, .bias = bias ? bias->data : NULL,
                             .y = y->data, .M = p->M, .N = p->N, .K = p->K,
                             .scale_cols = (p->K / 16 + 3) / 4 * 4};
    return QF_OK;
}

/* sm_100 and later: {alpha, 0} into stream-ordered scratch by the module's <name>_alpha entry,
 * then cuBLASLt reading them in device pointer mode. NOTES: scratch per call (qf_ctx_scratch), so
 * calls on different streams never share an alpha slot. */
static qf_status qf_g_nv_lt(qf_ctx_t *ctx, const char *op, const qf_loaded_kernel *lk,
                            const qf_kernel_entry *k, const qf_g_opnd *a, const qf_g_opnd *b,
                            const qf_tensor *bias, qf_tensor *y, qf_nv_gemm_params *p, int acc,
                            void *stream) {
    if (!lk->fn_alpha || (acc && !lk->fn_dequant))
        return qf_set_error(QF_ERR_NOT_FOUND, "%s: kernel %s has no %s entry", op, k->name,
                            lk->fn_alpha ? "_dequant" : "_alpha");
    float *ab = NULL;
    QF_TRY(qf_ctx_scratch(ctx, 2 * sizeof(float), (void **)&ab, "the GEMM's alpha", stream));
    p->alpha_out = ab;
    qf_status s = qf_ctx_launch(ctx, lk->fn_alpha, 1, 32, 0, p, stream);
    if (s == QF_OK && acc)
        s = qf_g_beta_one(ctx, op, lk, ab + 1, stream);
    if (s == QF_OK)
        s = qf_gemm_lt_nvfp4(ctx, a->data, a->scale, b->data, b->scale, ab, bias, y, p->M, p->N,
                             p->K, acc, stream);
    const qf_status f = qf_ctx_scratch_free(ctx, ab, stream);
    return s != QF_OK ? s : f;
}

static qf_status qf_g_nvfp4(qf_ctx_t *ctx, const char *op, const qf_recipe *r,
                            qf_gemm_kind kind, const qf_g_opnd *a, const qf_g_opnd *b,
                            const qf_tensor *bias, qf_tensor *y, const qf_gemm_opts *o,
                            void *stream) {
    const int acc = o->accumulate;
    qf_nv_gemm_params p = {0};
    qf_g_stage sa, sb;
    qf_gemm_path path;
    QF_TRY(qf_g_nv_check(op, ctx, r, kind, a, b, bias, y, &p, &sa, &sb, &path));
    QF_TRY(qf_g_kept_b(op, o, a, y, &sb));
    const qf_kernel_entry *k;
    qf_loaded_kernel lk;
    const int lt = path.engine == QF_GEMM_CUBLASLT; /* alpha from the module's <name>_alpha */
    const int staged = lt || qf_g_use_staged(&path, kind, p.M, p.N,
                                             qf_g_kernel_takes(ctx, p.a, p.b, p.M, p.N, p.K / 2,
                                                               y, acc),
                                             sb.bf16 != NULL);
    QF_TRY(qf_g_kernel(ctx, op, r, QF_DTYPE_E2M1, staged, &k, &lk, stream));
    if (lt)
        return qf_g_nv_lt(ctx, op, &lk, k, a, b, bias, y, &p, acc, stream);
    if (staged)
        return qf_g_staged(ctx, op, &lk, k, &sa, &sb, p.M, p.N, p.K, &p, bias, y, acc, stream);
    if (qf_g_ws(ctx)) { /* sm_90 compiles for sm_90a: the warp-specialized kernel */
        qf_ws_gemm_params w = {.a_scale = p.a_scale, .b_scale = p.b_scale, .amax_a = p.amax_a,
                               .amax_b = p.amax_b, .bias = p.bias, .M = p.M, .N = p.N,
                               .K = p.K, .scale_cols = p.scale_cols};
        return qf_g_ws_launch(ctx, &lk, &w, p.a, p.b, p.K / 2, QF_WS_RAW_ROW_NVFP4, y, acc,
                              stream);
    }
    const int smem = ctx->arch >= 90 ? QF_NV_GEMM_SMEM_BYTES_FOR(QF_NV_GEMM_STAGES)
                                     : QF_NV_GEMM_SMEM_BYTES_FOR(QF_NV_GEMM_STAGES_SM89);
    return qf_g_launch(ctx, op, &lk, k, p.M, p.N, QF_NV_GEMM_TILE_N, smem, &p, stream);
}

/* =====================================================================} */

/* The options' own rules: reserved fields 0; accumulate 0 or 1, into an fp32 y, without a bias. */
static qf_status qf_g_opts(const char *op, const qf_gemm_opts *o, const qf_tensor *bias,
                           const qf_tensor *y) {
    for (size_t i = 0; i < sizeof o->reserved / sizeof o->reserved[0]; i++)
        if (o->reserved[i])
            return qf_set_error(QF_ERR_INVALID_ARG, "%s: opts->reserved[%zu] is %d; it must be 0 "
                                "(zero-initialize qf_gemm_opts)", op, i, o->reserved[i]);
    if (o->accumulate != 0 && o->accumulate != 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: opts->accumulate is %d; 0 (y = A B^T) or 1 "
                            "(y += A B^T)", op, o->accumulate);
    if (o->accumulate && y->dtype != QF_DTYPE_FP32)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: opts->accumulate adds into y, which is %s; "
                            "accumulate into an fp32 y (a main_grad)", op,
                            qf_dtype_name(y->dtype));
    if (o->accumulate && bias)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: a bias with opts->accumulate would be added "
                            "at every accumulation; add it once, in a GEMM without accumulate",
                            op);
    return QF_OK;
}

qf_status qf_gemm_ex(qf_ctx_t *ctx, const char *recipe, const qf_operand *a, const qf_operand *b,
                     const qf_tensor *bias, qf_tensor *y, const qf_gemm_opts *opts,
                     void *stream) {
    static const char op[] = "qf_gemm";
    static const qf_gemm_opts none = {0};
    const qf_recipe *r = NULL;
    qf_g_opnd va, vb;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    QF_TRY(qf_g_operand(op, "a", a, &va));
    QF_TRY(qf_g_operand(op, "b", b, &vb));
    if (!y)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: y is NULL", op);
    if (bias && !bias->data)
        bias = NULL;
    const qf_gemm_opts *o = opts ? opts : &none;
    QF_TRY(qf_g_opts(op, o, bias, y));
    qf_gemm_kind kind = QF_GEMM_FPROP;
    QF_TRY(qf_g_kind(op, ctx, r, a->copy, b->copy, &kind));
    switch (r->family) {
    case QF_FAMILY_FP8_DELAYED:
    case QF_FAMILY_FP8_CURRENT: /* per-tensor scales: the same cuBLASLt GEMM (numerics 2.2) */
    case QF_FAMILY_FP8_BLOCK:   /* block scales: that GEMM with cuBLASLt's scale modes (2.5) */
        if (o->b_dequantized)
            return qf_set_error(QF_ERR_INVALID_ARG, "%s: opts->b_dequantized is set, but recipe "
                                "'%s' (%s) multiplies its FP8 operands directly; pass NULL", op,
                                r->name, qf_family_name(r->family));
        if (r->family == QF_FAMILY_FP8_BLOCK)
            return qf_g_fp8_block(ctx, op, r, kind, &va, &vb, bias, y, o->accumulate, stream);
        return qf_g_fp8(ctx, op, r, &va, &vb, bias, y, o->accumulate, stream);
    case QF_FAMILY_MXFP8:
        return qf_g_mxfp8(ctx, op, r, kind, &va, &vb, bias, y, o, stream);
    case QF_FAMILY_NVFP4:
        return qf_g_nvfp4(ctx, op, r, kind, &va, &vb, bias, y, o, stream);
    default:
        return qf_family_unsupported(op, r);
    }
}

qf_status qf_gemm(qf_ctx_t *ctx, const char *recipe, const qf_operand *a, const qf_operand *b,
                  const qf_tensor *bias, qf_tensor *y, void *stream) {
    return qf_gemm_ex(ctx, recipe, a, b, bias, y, NULL, stream);
}

qf_status qf_dequantize(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_operand *x,
                        qf_tensor *out, void *stream) {
    static const char op[] = "qf_dequantize";
    const qf_recipe *r = NULL;
    qf_g_opnd v;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    if ((unsigned)role >= QF_ROLE_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: role %d is not a qf_role", op, (int)role);
    QF_TRY(qf_g_operand(op, "x", x, &v));
    if (r->family != QF_FAMILY_MXFP8 && r->family != QF_FAMILY_NVFP4)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: recipe '%s' (%s): only MXFP8 and NVFP4 "
                            "copies have a bf16 form for the staged GEMM", op, r->name,
                            qf_family_name(r->family));
    if (v.layout != QF_SCALE_LAYOUT_COMPACT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: x has scale layout %d (%s); it reads compact "
                            "scales (QF_SCALE_LAYOUT_COMPACT, the staged Hopper GEMM's layout)",
                            op, (int)v.layout,
                            v.layout == QF_SCALE_LAYOUT_SWIZZLED ? "QF_SCALE_LAYOUT_SWIZZLED"
                                                                 : "not a qf_scale_layout");
    qf_g_stage st;
    int64_t rows, K;
    qf_dtype in;
    switch (r->family) {
    case QF_FAMILY_MXFP8:
        QF_TRY(qf_g_mx_data(op, r, role, x->copy, &v, &rows, &K, &st));
        QF_TRY(qf_g_mx_scales(op, &v, &st));
        in = r->fmt[QF_ROLE_INPUT]; /* one module per recipe (qf_g_mxfp8) */
        break;
    case QF_FAMILY_NVFP4:
        QF_TRY(qf_g_nv_data(op, &v, &rows, &K));
        QF_TRY(qf_g_nv_stage(op, &v, rows, K, &st));
        in = QF_DTYPE_E2M1;
        break;
    default:
        return qf_family_unsupported(op, r);
    }
    QF_TRY(qf_g_bf16_copy(op, "out", out, &st));
    const qf_inputs read = {2, {v.data_arg, v.scale_arg}, {v.data, v.scale}};
    QF_TRY(qf_check_apart(op, "out", out, &read));
    QF_TRY(qf_g_dequant_fits(op, &st));
    const qf_kernel_entry *k;
    qf_loaded_kernel lk;
    QF_TRY(qf_g_kernel(ctx, op, r, in, 1, &k, &lk, stream));
    if (!lk.fn_dequant)
        return qf_set_error(QF_ERR_NOT_FOUND, "%s: kernel %s has no _dequant entry", op, k->name);
    return qf_g_dequant(ctx, op, &lk, &st, out->data, stream);
}

qf_status qf_dequantized_dims(const qf_quantized *q, qf_copy copy, int64_t dims[2]) {
    static const char op[] = "qf_dequantized_dims";
    qf_clear_error();
    if (!q || !dims)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op, !q ? "q" : "dims");
    if ((unsigned)copy >= QF_COPY_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: copy %d is not a qf_copy", op, (int)copy);
    const char *name = qf_enum_name(QF_ENUM_COPY, copy);
    const qf_tensor *d = &q->t[qf_copy_slot_table[copy].data];
    if (d->dtype != QF_DTYPE_E4M3 && d->dtype != QF_DTYPE_E5M2 && d->dtype != QF_DTYPE_E2M1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: the %s copy's data slot has dtype %s; "
                            "expected a quantized element format (e4m3, e5m2 or e2m1)", op, name,
                            qf_dtype_name(d->dtype));
    const int64_t n = qf_tensor_numel(d);
    if (d->ndim < 1 || d->ndim > QF_MAX_DIMS || n < 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: the %s copy's data slot has ndim %d%s; give "
                            "it its fake shape", op, name, d->ndim,
                            d->ndim < 1 || d->ndim > QF_MAX_DIMS ? " (1..8)"
                                                                 : " and no elements, or too many");
    const int64_t last = d->dims[d->ndim - 1], per_byte = d->dtype == QF_DTYPE_E2M1 ? 2 : 1;
    if (n > INT64_MAX / per_byte)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: the %s copy holds %lld bytes of E2M1 codes: "
                            "more elements than an int64 counts", op, name, (long long)n);
    dims[0] = n / last;
    dims[1] = last * per_byte;
    return QF_OK;
}
