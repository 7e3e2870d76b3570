/* ops_mxfp8.c: MXFP8 quantizers (SPEC 2.3, 3): fused norm + quantize and plain quantize. */
#include "ctx.h"
#include "validate.h"

#define QF_MAX_SHAPES 8

/* The selected outputs of out, and its scale layout checked. */
static qf_status qf_mx_outputs(const char *op, const qf_mx_out *out, unsigned *outputs) {
    if (!out)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: out is NULL", op);
    return qf_check_block_outputs(op, &out->rowwise, &out->columnwise, out->layout, outputs);
}

/* Every output against the recipe's fake shapes (names as in the generated shape table). */
static qf_status qf_check_mx_outputs(const char *op, const qf_recipe *r,
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

/* Zeroes both scale matrices (their padding entries are always 0x00; the kernel writes every
 * real entry), then launches the tiled entry, or a row-in-registers entry for rowwise 1x32
 * blocks (not the 32x32 weight tiles; a partial last block, K % 32 != 0, is fine). */
static qf_status qf_mx_launch(qf_ctx_t *ctx, const char *op, int kidx,
                              const qf_kernel_instance *inst, qf_mx_params *p,
                              const qf_mx_out *out, void *stream) {
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_ready(ctx, op, stream)); /* device-less contexts stop here; foreign streams too */
    QF_TRY(qf_ctx_kernel(ctx, kidx, inst, &lk));
    const qf_kernel_entry *k = &qf_kernels[kidx];
    const int block_2d = qf_recipes[k->recipe].weight_2d && k->op == QF_OP_QUANTIZE &&
                         k->role == QF_ROLE_WEIGHT; /* as qf_gen_variant_block_2d */
    const qf_rows_call c = {.M = p->M, .K = p->K, .xdt = k->in_dtype, .x = p->x,
                            .out_row = p->out_row, .out_col = p->out_col, .gamma = p->gamma,
                            .beta = p->beta, .rows_ok = !block_2d};
    if ((p->M + k->tile_m - 1) / k->tile_m > 0x7fffffff) /* before any device work */
        return qf_set_error(QF_ERR_UNSUPPORTED, "M = %lld is too large for one launch",
                            (long long)p->M);
    QF_TRY(qf_zero_async(out->rowwise_scale_inv.data,
                         (size_t)qf_tensor_numel(&out->rowwise_scale_inv),
                         "out->rowwise_scale_inv", stream));
    QF_TRY(qf_zero_async(out->columnwise_scale_inv.data,
                         (size_t)qf_tensor_numel(&out->columnwise_scale_inv),
                         "out->columnwise_scale_inv", stream));
    return qf_ctx_launch_rows(ctx, &lk, k, &c, p, stream);
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
