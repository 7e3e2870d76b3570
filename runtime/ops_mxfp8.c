/* ops_mxfp8.c: MXFP8 quantizers (SPEC 2.3, 3): fused norm + quantize and plain quantize. */
#include <cuda_runtime_api.h>

#include "ctx.h"
#include "validate.h"

#define QF_MAX_SHAPES 8

/* The selected outputs of out, and its scale layout checked. */
static qf_status qf_mx_outputs(const char *op, const qf_mx_out *out, unsigned *outputs) {
    if (!out)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: out is NULL", op);
    QF_TRY(qf_check_outputs_selected(op, &out->rowwise, &out->columnwise, outputs));
    if ((unsigned)out->layout >= QF_SCALE_LAYOUT_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: out->layout %d is not a qf_scale_layout", op,
                            (int)out->layout);
    return QF_OK;
}

/* Every output against the recipe's fake shapes (names as in the generated shape table). */
static qf_status qf_check_mx_outputs(const char *op, const qf_recipe_entry *r,
                                     const qf_shape_query *q, const qf_mx_out *out,
                                     const qf_tensor *mu, const qf_tensor *rsigma) {
    qf_shape shapes[QF_MAX_SHAPES];
    int n = 0;
    QF_TRY(qf_query_shapes(op, r, q, shapes, QF_MAX_SHAPES, &n));
    static const char *const names[] = {"rowwise_data", "rowwise_scale_inv", "columnwise_data",
                                        "columnwise_scale_inv", "mu", "rsigma"};
    const qf_tensor *tensors[] = {&out->rowwise, &out->rowwise_scale_inv, &out->columnwise,
                                  &out->columnwise_scale_inv, mu, rsigma};
    return qf_check_buffers(op, shapes, n, names, tensors, 6);
}

static int qf_aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

/* Which <name>_rowsN entry (index into fn_rows) can run this call, or -1 for the tiled entry.
 * The rows entries hold a row in registers: rowwise only, 1x32 blocks (not the 32x32 weight
 * tiles), rows of whole 16-byte vectors, 16-byte aligned pointers, and K within
 * IT * threads * (16 / sizeof(x)) elements. A partial last block (K % 32 != 0) is fine. */
static int qf_mx_rows_variant(const qf_loaded_kernel *lk, const qf_kernel_entry *k,
                              const qf_mx_params *p) {
    const int64_t esz = (int64_t)qf_dtype_size(k->in_dtype), epv = 16 / esz;
    const int block_2d = qf_recipes[k->recipe].weight_2d && k->op == QF_OP_QUANTIZE &&
                         k->role == QF_ROLE_WEIGHT; /* as qf_gen_variant_block_2d */
    if (lk->inst.outputs != QF_OUT_ROWWISE || block_2d || (p->K * esz) % 16 != 0 ||
        !qf_aligned16(p->x) || !qf_aligned16(p->out_row) ||
        (p->gamma && !qf_aligned16(p->gamma)) || (p->beta && !qf_aligned16(p->beta)))
        return -1;
    const int64_t vecs_per_thread = (p->K / epv + k->block_threads - 1) / k->block_threads;
    static const int its[QF_ROWS_VARIANTS] = {1, 2, 4, 8};
    for (int i = 0; i < QF_ROWS_VARIANTS; i++)
        if (vecs_per_thread <= its[i] && lk->fn_rows[i])
            return i;
    return -1;
}

static qf_status qf_mx_launch(qf_ctx_t *ctx, const char *op, int kidx,
                              const qf_kernel_instance *inst, qf_mx_params *p,
                              const qf_mx_out *out, void *stream) {
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_ready(ctx, op, stream)); /* device-less contexts stop here; foreign streams too */
    QF_TRY(qf_ctx_kernel(ctx, kidx, inst, &lk));
    const qf_kernel_entry *k = &qf_kernels[kidx];
    const int r = qf_mx_rows_variant(&lk, k, p);
    CUfunction fn = lk.fn;
    int64_t grid = (p->M + k->tile_m - 1) / k->tile_m;
    if (r >= 0) { /* persistent grid: every resident block loops over rows */
        const int64_t slots = (int64_t)ctx->sm_count * (lk.occ_rows[r] > 0 ? lk.occ_rows[r] : 1);
        fn = lk.fn_rows[r];
        grid = p->M < slots ? p->M : slots;
    }
    if (grid > 0x7fffffff)
        return qf_set_error(QF_ERR_UNSUPPORTED, "M = %lld is too large for one launch",
                            (long long)p->M);
    /* Padding entries are always 0x00: zero both scale matrices, the kernel writes the rest. */
    const qf_tensor *sc[2] = {&out->rowwise_scale_inv, &out->columnwise_scale_inv};
    for (int i = 0; i < 2; i++)
        if (sc[i]->data &&
            cudaMemsetAsync(sc[i]->data, 0, (size_t)qf_tensor_numel(sc[i]),
                            (cudaStream_t)stream) != cudaSuccess)
            return qf_set_error(QF_ERR_CUDA, "cudaMemsetAsync of a scale matrix failed: %s",
                                cudaGetErrorString(cudaGetLastError()));
    return qf_ctx_launch(ctx, fn, (unsigned)grid, k->block_threads, 0, p, stream);
}

static void qf_mx_params_outputs(qf_mx_params *p, const qf_mx_out *out) {
    p->out_row = out->rowwise.data;
    p->scale_row = out->rowwise.data ? out->rowwise_scale_inv.data : NULL;
    p->out_col = out->columnwise.data;
    p->scale_col = out->columnwise.data ? out->columnwise_scale_inv.data : NULL;
}

qf_status qf_norm_quantize_mxfp8(qf_ctx_t *ctx, const char *recipe, qf_norm norm, int zcg,
                                 const qf_tensor *x, const qf_tensor *gamma,
                                 const qf_tensor *beta, float eps, qf_mx_out *out, qf_tensor *mu,
                                 qf_tensor *rsigma, void *stream) {
    static const char op[] = "qf_norm_quantize_mxfp8";
    int ri;
    int64_t M, K;
    QF_TRY(qf_check_recipe(op, ctx, recipe, QF_FAMILY_MXFP8, "an MXFP8 recipe", &ri));
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    QF_TRY(qf_check_norm_args(op, norm, x, gamma, beta, K, mu, eps));
    unsigned outputs;
    QF_TRY(qf_mx_outputs(op, out, &outputs));
    qf_shape_query q = {.op = QF_OP_NORM_QUANTIZE, .role = QF_ROLE_INPUT, .norm = norm,
                        .outputs = outputs, .M = M, .K = K};
    QF_TRY(qf_check_mx_outputs(op, &qf_recipes[ri], &q, out, mu, rsigma));
    int kidx = qf_registry_kernel(ri, QF_OP_NORM_QUANTIZE, QF_ROLE_INPUT, norm, zcg, x->dtype);
    if (kidx < 0)
        return QF_ERR_NOT_FOUND;
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    inst.outputs = outputs, inst.gamma_dtype = gamma->dtype, inst.layout = out->layout;
    qf_mx_params p = {.x = x->data, .gamma = gamma->data, .beta = beta ? beta->data : NULL,
                      .mu = mu ? mu->data : NULL, .rsigma = rsigma->data, .M = M, .K = K,
                      .eps = eps};
    qf_mx_params_outputs(&p, out);
    return qf_mx_launch(ctx, op, kidx, &inst, &p, out, stream);
}

qf_status qf_quantize_mxfp8(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                            qf_mx_out *out, void *stream) {
    static const char op[] = "qf_quantize_mxfp8";
    int ri;
    int64_t M, K;
    QF_TRY(qf_check_recipe(op, ctx, recipe, QF_FAMILY_MXFP8, "an MXFP8 recipe", &ri));
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    if (role != QF_ROLE_WEIGHT && role != QF_ROLE_GRAD)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: role %d is not QF_ROLE_WEIGHT or "
                            "QF_ROLE_GRAD", op, (int)role);
    unsigned outputs;
    QF_TRY(qf_mx_outputs(op, out, &outputs));
    qf_shape_query q = {.op = QF_OP_QUANTIZE, .role = role, .outputs = outputs, .M = M, .K = K};
    QF_TRY(qf_check_mx_outputs(op, &qf_recipes[ri], &q, out, NULL, NULL));
    int kidx = qf_registry_kernel(ri, QF_OP_QUANTIZE, role, QF_NORM_NONE, 0, x->dtype);
    if (kidx < 0)
        return QF_ERR_NOT_FOUND;
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    inst.outputs = outputs, inst.gamma_dtype = x->dtype, inst.layout = out->layout;
    qf_mx_params p = {.x = x->data, .M = M, .K = K};
    qf_mx_params_outputs(&p, out);
    return qf_mx_launch(ctx, op, kidx, &inst, &p, out, stream);
}
